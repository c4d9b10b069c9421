/* SPDX-License-Identifier: MIT */
/* cli/cmd-config-init.c: `accel config init` (a commented config from a
 * template) and `accel config wizard` (a few questions, then a config; what
 * `accel config` alone does on a terminal).
 *
 * Templates: the core's (compiled in below) and those plugins ship next to
 * their .so: for a module found at DIR/STEM.so, DIR/STEM.template.json is
 * the template named after the module and DIR/STEM.NAME.template.json the
 * template NAME (docs/writing-a-plugin.md).  A template is a config file
 * whose "//..." members are comments (docs/config.md). */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "cmd-config.h"
#include "loader.h"

/* The core's templates: the precision modes that need no plugin. */
static const char tmpl_bf16[] =
	"{\n"
	"  \"//\": \"bf16 mixed precision: forward and backward in bfloat16, master weights and "
	"optimizer state in fp32 (Accelerate's mixed_precision: bf16). Members named \\\"//...\\\" "
	"are comments that accel ignores; docs/config.md lists every key.\",\n"
	"  \"// strategy\": \"bf16 works with every strategy; ddp is the default\",\n"
	"  \"strategy\": \"ddp\",\n"
	"  \"mixed_precision\": \"bf16\",\n"
	"  \"gradient_accumulation_steps\": 1,\n"
	"  \"// max_grad_norm\": \"clipping is usual with low precision; remove it to turn it off\",\n"
	"  \"max_grad_norm\": 1.0,\n"
	"  \"optimizer\": {\n"
	"    \"type\": \"adamw\",\n"
	"    \"params\": {\"lr\": 1e-3, \"weight_decay\": 0.01}\n"
	"  }\n"
	"}\n";

typedef struct tmpl {
	char *name;
	char *origin;      /* "core" or "plugin ddp"            */
	char *path;        /* the file; NULL for the core's     */
	char *text;        /* its contents                      */
	char *about;       /* the top "//" comment's first part */
	char *strategy;    /* its "strategy", or NULL           */
	char *plugin_dir;  /* its module's folder when that came from the user's
	                      plugin_dirs (the config written names it), else NULL */
	char *strategy_dir; /* likewise for the module of its strategy, when that
	                       is another folder */
	int own_dirs;      /* it sets plugin_dirs itself (kept as it is)    */
} tmpl;

typedef struct tmpls {
	tmpl *t;
	size_t n;
} tmpls;

static void tmpls_free(tmpls *ts)
{
	for (size_t i = 0; i < ts->n; i++) {
		free(ts->t[i].name);
		free(ts->t[i].origin);
		free(ts->t[i].path);
		free(ts->t[i].text);
		free(ts->t[i].about);
		free(ts->t[i].strategy);
		free(ts->t[i].plugin_dir);
		free(ts->t[i].strategy_dir);
	}
	free(ts->t);
	ts->t = NULL;
	ts->n = 0;
}

static const tmpl *tmpls_find(const tmpls *ts, const char *name)
{
	for (size_t i = 0; i < ts->n; i++)
		if (!strcmp(ts->t[i].name, name))
			return &ts->t[i];
	return NULL;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	char chunk[4096];
	size_t n;
	while (m && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, m);
	int bad = ferror(f);
	fclose(f);
	if (!m || fclose(m) || bad) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Adds a template; a name already taken keeps the first (the search order,
 * like plugins), with a warning. 0, or -1 out of memory. */
static int tmpls_add(tmpls *ts, const char *name, const char *origin, const char *path,
                     const char *text, const char *plugin_dir)
{
	const tmpl *old = tmpls_find(ts, name);
	if (old) {
		fprintf(stderr, "accel config: warning: template '%s' of %s (%s) is hidden by the one "
		        "of %s%s%s\n", name, origin, path ? path : "built in", old->origin,
		        old->path ? ", " : "", old->path ? old->path : "");
		return 0;
	}
	json_error_t je;
	json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(root)) {
		fprintf(stderr, "accel config: warning: template '%s' of %s is left out: %s:%d:%d: %s\n",
		        name, origin, path ? path : "built in", je.line, je.column,
		        root ? "not a JSON object" : je.text);
		json_decref(root);
		return 0;
	}
	tmpl *t = realloc(ts->t, (ts->n + 1) * sizeof(*t));
	if (!t) {
		json_decref(root);
		return -1;
	}
	ts->t = t;
	t = &ts->t[ts->n];
	memset(t, 0, sizeof(*t));
	json_t *c = json_object_get(root, "//"), *st = json_object_get(root, "strategy");
	if (json_is_array(c))
		c = json_array_get(c, 0);
	const char *about = json_is_string(c) ? json_string_value(c) : "";
	size_t alen = strcspn(about, ":.");
	t->name = strdup(name);
	t->origin = strdup(origin);
	t->path = path ? strdup(path) : NULL;
	t->text = strdup(text);
	t->about = strndup(about, alen);
	int has_strategy = json_is_string(st);
	t->strategy = has_strategy ? strdup(json_string_value(st)) : NULL;
	/* a template that names its own plugin_dirs keeps them */
	int own_dirs = json_object_get(root, "plugin_dirs") != NULL;
	t->own_dirs = own_dirs;
	t->plugin_dir = plugin_dir && !own_dirs ? strdup(plugin_dir) : NULL;
	json_decref(root);
	ts->n++;
	if (!t->name || !t->origin || (path && !t->path) || !t->text || !t->about ||
	    (has_strategy && !t->strategy) || (plugin_dir && !own_dirs && !t->plugin_dir))
		return -1;
	return 0;
}

/* The templates next to module file `path` (DIR/STEM.so). */
static int module_templates(tmpls *ts, const accel_module *m)
{
	const char *slash = strrchr(m->path, '/');
	size_t plen = strlen(m->path);
	if (!slash || plen < 4 || strcmp(m->path + plen - 3, ".so"))
		return 0;
	char *dir = strndup(m->path, (size_t)(slash - m->path));
	char *stem = strndup(slash + 1, plen - 3 - (size_t)(slash + 1 - m->path));
	char origin[256];
	int r = 0;
	snprintf(origin, sizeof(origin), "%s %s", m->kind == ACCEL_MODULE_COMM ? "backend" : "plugin",
	         m->name);
	if (!dir || !stem) {
		free(dir);
		free(stem);
		return -1;
	}
	/* by name, so the listing does not depend on the directory's order */
	struct dirent **ents = NULL;
	int ne = scandir(dir, &ents, NULL, alphasort);
	size_t sl = strlen(stem);
	static const char suffix[] = ".template.json";
	size_t xl = sizeof(suffix) - 1;
	for (int i = 0; i < ne; i++) {
		const char *f = ents[i]->d_name;
		size_t fl = strlen(f);
		if (!r && fl >= sl + xl && !strncmp(f, stem, sl) && !strcmp(f + fl - xl, suffix) &&
		    f[sl] == '.') {
			char name[256], full[4096];
			if (fl == sl + xl)   /* STEM.template.json */
				snprintf(name, sizeof(name), "%s", m->name);
			else
				snprintf(name, sizeof(name), "%.*s", (int)(fl - xl - sl - 1), f + sl + 1);
			if (!name[0] || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") !=
			                        strlen(name)) {
				fprintf(stderr, "accel config: warning: %s/%s of %s is left out: a "
				        "template's name is [a-z0-9_-]+\n", dir, f, origin);
				free(ents[i]);
				continue;
			}
			snprintf(full, sizeof(full), "%s/%s", dir, f);
			char *text = read_text(full);
			if (!text)
				fprintf(stderr, "accel config: warning: template %s of %s is left out: %s\n",
				        full, origin, strerror(errno));
			else if (tmpls_add(ts, name, origin, full, text,
			                   !strcmp(m->origin, "plugin_dirs") ? dir : NULL))
				r = -1;
			free(text);
		}
		free(ents[i]);
	}
	free(ents);
	free(dir);
	free(stem);
	return r;
}

/* Every template: the core's, then each usable module's in search order. */
static int tmpls_load(const accelp_setup *s, tmpls *ts)
{
	memset(ts, 0, sizeof(*ts));
	if (tmpls_add(ts, "bf16", "core", NULL, tmpl_bf16, NULL))
		goto oom;
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		if (!m->name || (m->status != ACCEL_MODULE_OK && m->status != ACCEL_MODULE_UNAVAILABLE))
			continue;
		if (module_templates(ts, m))
			goto oom;
	}
	/* a template whose strategy was found through plugin_dirs names that
	 * folder too (bf16's ddp, say), so the config it gives finds it */
	for (size_t i = 0; i < ts->n; i++) {
		tmpl *t = &ts->t[i];
		const accel_module *m = NULL;
		accel_err e;
		accelp_err_clear(&e);
		if (!t->strategy || t->own_dirs ||
		    accelp_loader_find(s->loader, ACCEL_MODULE_PLUGIN, t->strategy, &m, &e) ||
		    strcmp(m->origin, "plugin_dirs"))
			continue;
		const char *slash = strrchr(m->path, '/');
		size_t dl = slash ? (size_t)(slash - m->path) : 0;
		if (!slash || (t->plugin_dir && strlen(t->plugin_dir) == dl &&
		               !strncmp(t->plugin_dir, m->path, dl)))
			continue;
		if (!(t->strategy_dir = strndup(m->path, dl)))
			goto oom;
	}
	return 0;
oom:
	fprintf(stderr, "accel config: out of memory\n");
	tmpls_free(ts);
	return 1;
}

/* ---- init ---------------------------------------------------------------- */

static void usage_init(FILE *out)
{
	fprintf(out,
		"Usage: accel config init [--template NAME] [--output FILE] [--force]\n"
		"                         [--config FILE]\n"
		"       accel config init --list [--config FILE]\n"
		"\n"
		"Write a commented config file to start from.  Templates come with the core\n"
		"(bf16) and with the plugins installed (ddp, zero, fsdp, fp16, fp8, ...: a\n"
		"plugin ships its own as STEM.template.json or STEM.NAME.template.json next\n"
		"to its STEM.so; --list shows those found).  Plugins are looked for where a\n"
		"training process looks: the plugin_dirs of your config, ACCEL_PLUGIN_PATH,\n"
		"the install directory; a config from a template of a plugin in plugin_dirs\n"
		"names that folder in its own plugin_dirs.  The file written is checked as\n"
		"`accel config validate` would.\n"
		"\n"
		"Options:\n"
		"  --template NAME   the template (default: ddp)\n"
		"  --list            list the templates: name, where from, what it is\n"
		"  -o, --output FILE write here (default: accel.json, where accel looks first\n"
		"                    after ACCEL_CONFIG; '-': stdout)\n"
		"  --force           overwrite FILE if it exists\n"
		"  --config FILE     search the plugin_dirs of FILE (default: the config accel\n"
		"                    finds: $ACCEL_CONFIG, ./accel.json, ~/.config/accel/default.json)\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 written and valid, 1 not written or not valid, 2 bad usage.\n");
}

static const char *take(int argc, char **argv, int *i, const char *l, const char *s, int *bad)
{
	const char *a = argv[*i];
	size_t n = strlen(l);
	*bad = 0;
	if (!strncmp(a, l, n) && a[n] == '=')
		return a + n + 1;
	if (strcmp(a, l) && (!s || strcmp(a, s)))
		return NULL;
	if (*i + 1 >= argc) {
		*bad = 1;
		return NULL;
	}
	return argv[++*i];
}

/* The template's text with "plugin_dirs": [the folders of its plugin and
 * strategy found through plugin_dirs] first, so that the config finds what
 * it selects; NULL out of memory. */
static char *with_plugin_dirs(const tmpl *t)
{
	json_t *a = json_array();
	if (a && t->plugin_dir)
		json_array_append_new(a, json_string(t->plugin_dir));
	if (a && t->strategy_dir)
		json_array_append_new(a, json_string(t->strategy_dir));
	char *dirs = a ? json_dumps(a, JSON_ENCODE_ANY) : NULL;
	const char *brace = strchr(t->text, '{');   /* the text parsed as an object */
	char *out = NULL;
	json_decref(a);
	if (dirs && brace) {
		const char *rest = brace + 1 + strspn(brace + 1, " \t\r\n");
		if (asprintf(&out, "%.*s{\n  \"// plugin_dirs\": \"where the plugins this template "
		             "selects were found (the plugin_dirs of your config)\",\n  "
		             "\"plugin_dirs\": %s%s\n  %s", (int)(brace - t->text), t->text, dirs,
		             *rest == '}' ? "" : ",", rest) < 0)
			out = NULL;
	}
	free(dirs);
	return out;
}

static void list_names(const tmpls *ts, FILE *out)
{
	for (size_t i = 0; i < ts->n; i++)
		fprintf(out, "%s%s", i ? ", " : "", ts->t[i].name);
}

int accelp_cli_config_init(int argc, char **argv)
{
	const char *name = NULL, *out = "accel.json", *config = NULL, *v;
	int list = 0, force = 0, bad;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage_init(stdout);
			return 0;
		} else if ((v = take(argc, argv, &i, "--template", "-t", &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error("config init", "--template needs a NAME");
			name = v;
		} else if ((v = take(argc, argv, &i, "--output", "-o", &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error("config init", "--output needs a FILE");
			out = v;
		} else if ((v = take(argc, argv, &i, "--config", NULL, &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error("config init", "--config needs a FILE");
			config = v;
		} else if (!strcmp(a, "--list")) {
			list = 1;
		} else if (!strcmp(a, "--force")) {
			force = 1;
		} else {
			return accelp_cli_usage_error("config init", "unexpected argument '%s'", a);
		}
	}
	accelp_setup s;
	if (accelp_cli_config_modules("init", 0, config, &s)) {
		accelp_setup_fini(&s);
		return 1;
	}
	tmpls ts;
	int status = tmpls_load(&s, &ts);
	accelp_setup_fini(&s);
	if (status)
		return status;
	if (list) {
		printf("%-16s %-16s %s\n", "TEMPLATE", "FROM", "ABOUT");
		for (size_t i = 0; i < ts.n; i++)
			printf("%-16s %-16s %s\n", ts.t[i].name, ts.t[i].origin, ts.t[i].about);
		tmpls_free(&ts);
		return 0;
	}
	if (!name)
		name = tmpls_find(&ts, "ddp") ? "ddp" : ts.t[0].name;
	const tmpl *t = tmpls_find(&ts, name);
	if (!t) {
		fprintf(stderr, "accel config init: no template named '%s' (installed: ", name);
		list_names(&ts, stderr);
		fprintf(stderr, "); a plugin's templates appear once it is installed\n");
		tmpls_free(&ts);
		return 1;
	}
	char *text = t->plugin_dir || t->strategy_dir ? with_plugin_dirs(t) : strdup(t->text);
	if (!text) {
		fprintf(stderr, "accel config init: out of memory\n");
		tmpls_free(&ts);
		return 1;
	}
	status = accelp_cli_config_write("init", out, text, force);
	free(text);
	if (!status && strcmp(out, "-")) {
		printf("wrote %s from template %s (%s)\n", out, t->name, t->origin);
		status = accelp_cli_config_check(out);
	}
	tmpls_free(&ts);
	return status;
}

/* ---- the questionnaire ------------------------------------------------- */

static void usage_wizard(FILE *out)
{
	fprintf(out,
		"Usage: accel config wizard [--strategy NAME] [--mixed-precision MODE]\n"
		"                           [--gradient-accumulation-steps N] [--max-grad-norm X]\n"
		"                           [--num-processes N] [--output FILE] [--force] [--yes]\n"
		"                           [--config FILE]\n"
		"\n"
		"Ask a few questions (Up/Down and Enter, or a number or name, to choose; Enter\n"
		"alone takes the [default]) and write a config file; `accel config` alone does\n"
		"this on a terminal.  A question answered by an option is not asked; --yes\n"
		"takes the default of every other one and asks nothing (for scripts).  The\n"
		"strategies offered are the plugins installed; fp16 and fp8 are offered when\n"
		"the scaler and fp8 plugins are.  The file starts from the strategy's template\n"
		"(accel config init --list) and is checked as `accel config validate` would.\n"
		"\n"
		"Options:\n"
		"  --strategy NAME                  ddp or another installed strategy\n"
		"  --mixed-precision MODE           no, bf16 (fp16, fp8 with their plugins)\n"
		"  --gradient-accumulation-steps N  micro-batches per optimizer step (default 1)\n"
		"  --max-grad-norm X                clip gradients to this norm ('none': no clipping)\n"
		"  --num-processes N                processes per node, for the `accel launch`\n"
		"                                   command printed at the end (default 1)\n"
		"  -o, --output FILE                where to write (default accel.json; '-': stdout)\n"
		"  --force                          overwrite FILE (else asked, or an error with --yes)\n"
		"  --config FILE                    search the plugin_dirs of FILE for strategies\n"
		"                                   (default: the config accel finds the usual way)\n"
		"  -y, --yes                        ask nothing; defaults for what no option gives\n"
		"  -h, --help                       show this help\n"
		"\n"
		"Exit status: 0 written and valid, 1 not written (no answer, bad answer with --yes,\n"
		"file exists) or not valid, 2 bad usage.\n");
}

typedef struct choice {
	char name[64];
	char about[160];
	char *dir;         /* strategies: the module's folder when it came from the
	                      user's plugin_dirs (the config names it), else NULL */
} choice;

/* One line of the answer, without its newline; NULL at end of input. */
static char *ask(const char *prompt, char *buf, size_t cap)
{
	fputs(prompt, stdout);
	fflush(stdout);
	if (!fgets(buf, (int)cap, stdin))
		return NULL;
	buf[strcspn(buf, "\r\n")] = '\0';
	char *p = buf;
	while (*p == ' ' || *p == '\t')
		p++;
	size_t n = strlen(p);
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		p[--n] = '\0';
	return p;
}

/* The terminal's settings while a menu has it (restored on SIGINT/SIGTERM
 * too, so an interrupted questionnaire does not leave it without echo). */
static struct termios menu_saved;
static volatile sig_atomic_t menu_raw;

static void menu_restore(void)
{
	if (menu_raw) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &menu_saved);
		menu_raw = 0;
	}
}

static void menu_signal(int sig)
{
	menu_restore();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* One byte of input; -1 at end of input or on an error. */
static int menu_byte(void)
{
	unsigned char c;
	for (;;) {
		ssize_t n = read(STDIN_FILENO, &c, 1);
		if (n == 1)
			return c;
		if (n < 0 && errno == EINTR)
			continue;
		return -1;
	}
}

/* The byte after ESC when one comes soon (a key's sequence), else -1 (the
 * Escape key alone). */
static int menu_byte_soon(void)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	return poll(&p, 1, 100) == 1 ? menu_byte() : -1;
}

static void menu_mark(int n, int old, int now)
{
	/* the cursor is on the prompt line, n choice lines below the first */
	printf("\r\033[%dA  \r\033[%dB", n - old, n - old);
	printf("\r\033[%dA> \r\033[%dB", n - now, n - now);
}

/* ask_choice on a terminal: Up/Down move the marker (ESC [ A / ESC [ B,
 * or ESC O A / ESC O B), Enter takes the marked choice; a number or a
 * name typed before Enter still works.  -1 at end of input (Ctrl-D on an
 * empty line), -2 when the terminal cannot be set up. */
static int ask_menu(const char *prompt, const choice *c, int n, int dflt)
{
	struct termios raw;
	if (tcgetattr(STDIN_FILENO, &menu_saved))
		return -2;
	raw = menu_saved;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = menu_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	menu_raw = 1;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw)) {
		menu_raw = 0;
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
		return -2;
	}
	int mark = dflt, result;
	char buf[128];
	size_t len = 0;
	for (int i = 0; i < n; i++)
		printf("%s%d) %-8s %s\n", i == mark ? "> " : "  ", i + 1, c[i].name, c[i].about);
	fputs(prompt, stdout);
	fflush(stdout);
	for (;;) {
		int b = menu_byte();
		if (b < 0 || (b == 4 && !len)) {   /* end of input, Ctrl-D */
			result = -1;
			break;
		}
		if (b == 0x1b) {
			int b1 = menu_byte_soon(), b2 = b1 == '[' || b1 == 'O' ? menu_byte_soon() : -1;
			int to = b2 == 'A' ? (mark + n - 1) % n : b2 == 'B' ? (mark + 1) % n : mark;
			if (to != mark) {
				menu_mark(n, mark, to);
				mark = to;
				printf("\r\033[K%s%.*s", prompt, (int)len, buf);
				fflush(stdout);
			}
			continue;
		}
		if (b == '\r' || b == '\n') {
			buf[len] = '\0';
			if (!len) {
				result = mark;
				break;
			}
			char *end;
			long k = strtol(buf, &end, 10);
			result = -3;
			if (!*end && k >= 1 && k <= n)
				result = (int)k - 1;
			for (int i = 0; i < n && result == -3; i++)
				if (!strcmp(buf, c[i].name))
					result = i;
			if (result >= 0)
				break;
			printf("\n'%s' is not one of the choices; use the arrow keys, or type a number "
			       "from 1 to %d or a name\n", buf, n);
			/* the list again, so the marker stays right above the prompt */
			for (int i = 0; i < n; i++)
				printf("%s%d) %-8s %s\n", i == mark ? "> " : "  ", i + 1, c[i].name,
				       c[i].about);
			fputs(prompt, stdout);
			fflush(stdout);
			len = 0;
			continue;
		}
		if ((b == 0x7f || b == 8) && len) {
			len--;
			fputs("\b \b", stdout);
			fflush(stdout);
		} else if (b >= 0x20 && b < 0x7f && len + 1 < sizeof(buf)) {
			buf[len++] = (char)b;
			putchar(b);
			fflush(stdout);
		}
	}
	/* the choice on the prompt line, as a typed answer would leave it */
	if (result >= 0)
		printf("\r\033[K%s%s\n", prompt, c[result].name);
	else
		printf("\n");
	fflush(stdout);
	menu_restore();
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return result;
}

/* A choice by number or by name, or on a terminal with the arrow keys;
 * dflt is an index.  -1 at end of input. */
static int ask_choice(const char *q, const choice *c, int n, int dflt)
{
	char buf[256], prompt[64];
	printf("%s\n", q);
	snprintf(prompt, sizeof(prompt), "Choose 1-%d [%d]: ", n, dflt + 1);
	if (isatty(STDIN_FILENO)) {
		fflush(stdout);
		int k = ask_menu(prompt, c, n, dflt);
		if (k != -2)
			return k;
	}
	for (int i = 0; i < n; i++)
		printf("  %d) %-8s %s\n", i + 1, c[i].name, c[i].about);
	for (;;) {
		char *a = ask(prompt, buf, sizeof(buf));
		if (!a)
			return -1;
		if (!*a)
			return dflt;
		char *end;
		long k = strtol(a, &end, 10);
		if (!*end && k >= 1 && k <= n)
			return (int)k - 1;
		for (int i = 0; i < n; i++)
			if (!strcmp(a, c[i].name))
				return i;
		printf("'%s' is not one of the choices; type a number from 1 to %d or a name\n", a, n);
	}
}

/* A text answer checked by `ok`; dflt when empty.  NULL at end of input. */
static char *ask_text(const char *q, const char *dflt, int (*ok)(const char *), const char *hint,
                      char *buf, size_t cap)
{
	char prompt[1400];
	snprintf(prompt, sizeof(prompt), "%s [%s]: ", q, dflt);
	for (;;) {
		char *a = ask(prompt, buf, cap);
		if (!a)
			return NULL;
		if (!*a)
			return strcpy(buf, dflt);
		if (ok(a)) {
			memmove(buf, a, strlen(a) + 1);
			return buf;
		}
		printf("'%s': %s\n", a, hint);
	}
}

static int ok_count(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	return *s && !*end && !errno && v >= 1 && v <= 2147483647;
}

static int ok_norm(const char *s)
{
	char *end;
	if (!strcmp(s, "none"))
		return 1;
	double v = strtod(s, &end);
	return *s && !*end && v > 0 && v < 1e300;
}

static int ok_path(const char *s)
{
	return *s != '\0';
}

static int ok_yesno(const char *s)
{
	return !strcmp(s, "y") || !strcmp(s, "n") || !strcmp(s, "yes") || !strcmp(s, "no");
}

static int find_choice(const choice *c, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(c[i].name, name))
			return i;
	return -1;
}

/* The config: the strategy's template (comments kept), with the answers. */
static char *compose(const tmpls *ts, const char *strategy, const char *mp, const char *gas,
                     const char *norm, const char *nproc, const char *out, const char *dir)
{
	const tmpl *t = tmpls_find(ts, strategy);
	json_t *base = t && t->strategy && !strcmp(t->strategy, strategy)
	                       ? json_loads(t->text, 0, NULL)
	                       : NULL;
	json_t *cfg = json_object();
	char note[2048];
	snprintf(note, sizeof(note), "written by `accel config wizard` (strategy %s, mixed_precision "
	         "%s); run it with: accel launch -n %s --config %s PROGRAM [ARGS...]", strategy, mp,
	         nproc, strcmp(out, "-") ? out : "FILE");
	json_object_set_new(cfg, "//", json_string(note));
	if (dir) {   /* where the strategy was found, so the config finds it */
		json_object_set_new(cfg, "// plugin_dirs", json_string("where the strategy was found "
		                    "(the plugin_dirs of your config)"));
		json_object_set_new(cfg, "plugin_dirs", json_pack("[s]", dir));
	}
	if (base) {
		const char *k;
		json_t *v;
		json_object_foreach(base, k, v) {
			if (!strcmp(k, "//")) {
				char ck[128];
				snprintf(ck, sizeof(ck), "// template %s", t->name);
				json_object_set(cfg, ck, v);
			} else {
				json_object_set(cfg, k, v);
			}
		}
	}
	json_object_set_new(cfg, "strategy", json_string(strategy));
	json_object_set_new(cfg, "mixed_precision", json_string(mp));
	json_object_set_new(cfg, "gradient_accumulation_steps", json_integer(atol(gas)));
	if (strcmp(norm, "none")) {
		json_object_del(cfg, "//max_grad_norm");
		json_object_del(cfg, "// max_grad_norm");
		json_object_set_new(cfg, "max_grad_norm", json_real(strtod(norm, NULL)));
	} else {
		json_object_del(cfg, "max_grad_norm");
		json_object_del(cfg, "// max_grad_norm");
	}
	char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	json_decref(cfg);
	json_decref(base);
	if (!text)
		return NULL;
	char *nl = NULL;
	if (asprintf(&nl, "%s\n", text) < 0)
		nl = NULL;
	free(text);
	return nl;
}

int accelp_cli_config_wizard(int argc, char **argv)
{
	const char *strategy = NULL, *mp = NULL, *gas = NULL, *norm = NULL, *nproc = NULL;
	const char *out = NULL, *config = NULL, *v;
	int force = 0, yes = 0, bad;
	static const char *W = "config wizard";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage_wizard(stdout);
			return 0;
		} else if ((v = take(argc, argv, &i, "--strategy", NULL, &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error(W, "--strategy needs a NAME");
			strategy = v;
		} else if ((v = take(argc, argv, &i, "--mixed-precision", NULL, &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error(W, "--mixed-precision needs a MODE");
			mp = v;
		} else if ((v = take(argc, argv, &i, "--gradient-accumulation-steps", NULL, &bad)) ||
		           bad) {
			if (bad || !ok_count(v))
				return accelp_cli_usage_error(W, "--gradient-accumulation-steps needs a whole "
				                              "number from 1 to 2147483647");
			gas = v;
		} else if ((v = take(argc, argv, &i, "--max-grad-norm", NULL, &bad)) || bad) {
			if (bad || !ok_norm(v))
				return accelp_cli_usage_error(W, "--max-grad-norm needs a number > 0, or "
				                              "'none'");
			norm = v;
		} else if ((v = take(argc, argv, &i, "--num-processes", "-n", &bad)) || bad) {
			if (bad || !ok_count(v))
				return accelp_cli_usage_error(W, "--num-processes needs a whole number >= 1");
			nproc = v;
		} else if ((v = take(argc, argv, &i, "--output", "-o", &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error(W, "--output needs a FILE");
			out = v;
		} else if ((v = take(argc, argv, &i, "--config", NULL, &bad)) || bad) {
			if (bad || !*v)
				return accelp_cli_usage_error(W, "--config needs a FILE");
			config = v;
		} else if (!strcmp(a, "--force")) {
			force = 1;
		} else if (!strcmp(a, "--yes") || !strcmp(a, "-y")) {
			yes = 1;
		} else {
			return accelp_cli_usage_error(W, "unexpected argument '%s'", a);
		}
	}

	accelp_setup s;
	if (accelp_cli_config_modules("wizard", 0, config, &s)) {
		accelp_setup_fini(&s);
		return 1;
	}
	tmpls ts;
	if (tmpls_load(&s, &ts)) {
		accelp_setup_fini(&s);
		return 1;
	}
	/* the choices: installed strategies; precision modes whose plugin is */
	choice strat[32], prec[4];
	char *text = NULL;
	memset(strat, 0, sizeof(strat));
	memset(prec, 0, sizeof(prec));
	int ns = 0, np = 0, have_scaler = 0, have_fp8 = 0, status = 1;
	for (uint32_t i = 0; i < accelp_loader_count(s.loader); i++) {
		const accel_module *m = accelp_loader_get(s.loader, i);
		if (!m->name || m->kind != ACCEL_MODULE_PLUGIN ||
		    (m->status != ACCEL_MODULE_OK && m->status != ACCEL_MODULE_UNAVAILABLE))
			continue;
		have_scaler |= !strcmp(m->name, "scaler");
		have_fp8 |= !strcmp(m->name, "fp8");
		if (m->role == ACCEL_ROLE_STRATEGY && ns < 32 && find_choice(strat, ns, m->name) < 0) {
			snprintf(strat[ns].name, sizeof(strat[ns].name), "%s", m->name);
			snprintf(strat[ns].about, sizeof(strat[ns].about), "%s%s", m->summary,
			         m->status == ACCEL_MODULE_UNAVAILABLE ? " (its needs are not met here)"
			                                               : "");
			const char *slash = strrchr(m->path, '/');
			if (!strcmp(m->origin, "plugin_dirs") && slash &&
			    !(strat[ns].dir = strndup(m->path, (size_t)(slash - m->path)))) {
				fprintf(stderr, "accel config wizard: out of memory\n");
				accelp_setup_fini(&s);
				goto out;
			}
			ns++;
		}
	}
	accelp_setup_fini(&s);
	snprintf(prec[np].name, sizeof(prec[0].name), "no");
	snprintf(prec[np++].about, sizeof(prec[0].about), "fp32 throughout");
	snprintf(prec[np].name, sizeof(prec[0].name), "bf16");
	snprintf(prec[np++].about, sizeof(prec[0].about),
	         "bfloat16 forward/backward, fp32 master weights");
	if (have_scaler) {
		snprintf(prec[np].name, sizeof(prec[0].name), "fp16");
		snprintf(prec[np++].about, sizeof(prec[0].about), "float16 with dynamic loss scaling "
		         "(the scaler plugin)");
	}
	if (have_fp8) {
		snprintf(prec[np].name, sizeof(prec[0].name), "fp8");
		snprintf(prec[np++].about, sizeof(prec[0].about), "fp8 GEMMs (the fp8 plugin)");
	}
	char b_gas[64], b_norm[64], b_np[64], b_out[1024], b_yn[16];
	if (!ns) {
		fprintf(stderr, "accel config wizard: no strategy plugin is installed (looked in "
		        "your config's plugin_dirs, ACCEL_PLUGIN_PATH and the install directory); `accel plugins list` shows "
		        "what was found\n");
		goto out;
	}
	if (strategy && find_choice(strat, ns, strategy) < 0) {
		fprintf(stderr, "accel config wizard: --strategy %s: no such strategy is installed "
		        "(installed: ", strategy);
		for (int i = 0; i < ns; i++)
			fprintf(stderr, "%s%s", i ? ", " : "", strat[i].name);
		fprintf(stderr, ")\n");
		goto out;
	}
	if (mp && find_choice(prec, np, mp) < 0) {
		fprintf(stderr, "accel config wizard: --mixed-precision %s: expected one of ", mp);
		for (int i = 0; i < np; i++)
			fprintf(stderr, "%s%s", i ? ", " : "", prec[i].name);
		fprintf(stderr, "%s\n", !strcmp(mp, "fp16") || !strcmp(mp, "fp8")
		                              ? " (fp16 needs the scaler plugin, fp8 the fp8 plugin; "
		                                "neither is installed)"
		                              : "");
		goto out;
	}
	if (!yes)
		printf("accel config: a few questions; %sEnter takes the [default], Ctrl-D stops "
		       "without writing anything.\n\n",
		       isatty(STDIN_FILENO) ? "Up/Down move the marker (>) of a choice, " : "");
	if (!strategy) {
		int d = find_choice(strat, ns, "ddp");
		int k = yes ? (d < 0 ? 0 : d) : ask_choice("Which strategy?", strat, ns, d < 0 ? 0 : d);
		if (k < 0)
			goto eof;
		strategy = strat[k].name;
	}
	if (!mp) {
		int k = yes ? 0 : ask_choice("Mixed precision?", prec, np, 0);
		if (k < 0)
			goto eof;
		mp = prec[k].name;
	}
	if (!gas && !(gas = yes ? "1" : ask_text("Gradient accumulation steps", "1", ok_count,
	                                         "a whole number >= 1", b_gas, sizeof(b_gas))))
		goto eof;
	if (!norm && !(norm = yes ? "none" : ask_text("Clip gradients to a maximum norm ('none': "
	                                              "no clipping)", "none", ok_norm,
	                                              "a number > 0, or none", b_norm,
	                                              sizeof(b_norm))))
		goto eof;
	if (!nproc && !(nproc = yes ? "1" : ask_text("Processes on this machine (accel launch -n)",
	                                             "1", ok_count, "a whole number >= 1", b_np,
	                                             sizeof(b_np))))
		goto eof;
	if (!out && !(out = yes ? "accel.json" : ask_text("Write the config to", "accel.json",
	                                                  ok_path, "a file name", b_out,
	                                                  sizeof(b_out))))
		goto eof;
	if (!force && !yes && strcmp(out, "-") && access(out, F_OK) == 0) {
		char q[1200];
		snprintf(q, sizeof(q), "%s exists. Overwrite it? (y/n)", out);
		const char *a = ask_text(q, "n", ok_yesno, "y or n", b_yn, sizeof(b_yn));
		if (!a)
			goto eof;
		if (a[0] != 'y') {
			printf("nothing written\n");
			goto out;
		}
		force = 1;
	}
	if (!(text = compose(&ts, strategy, mp, gas, norm, nproc, out,
	                     strat[find_choice(strat, ns, strategy)].dir))) {
		fprintf(stderr, "accel config wizard: out of memory\n");
		goto out;
	}
	if (accelp_cli_config_write("wizard", out, text, force))
		goto out;
	if (strcmp(out, "-")) {
		printf("wrote %s (strategy %s, mixed_precision %s, gradient_accumulation_steps %s, "
		       "max_grad_norm %s)\n", out, strategy, mp, gas, norm);
		if ((status = accelp_cli_config_check(out)) == 0)
			printf("run it with: accel launch -n %s --config %s PROGRAM [ARGS...]\n", nproc,
			       out);
	} else {
		status = 0;
	}
	goto out;
eof:
	printf("\n");
	fprintf(stderr, "accel config wizard: input ended before every question was answered; "
	        "nothing written (options such as --yes answer without a terminal)\n");
out:
	for (int i = 0; i < ns; i++)
		free(strat[i].dir);
	free(text);
	tmpls_free(&ts);
	return status;
}
