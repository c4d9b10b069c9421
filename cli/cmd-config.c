/* SPDX-License-Identifier: MIT */
/* cli/cmd-config.c: `accel config validate` and `accel config show`, and
 * the dispatch of every `accel config` subcommand (cmd-config.h).
 *
 * Both build the configuration the way a training process does (file,
 * environment, --set), but register the schemas of every plugin and backend
 * the loader finds, so a key of any installed plugin is recognized and a
 * section of an installed but unselected plugin is reported as such. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "cli.h"
#include "cmd-config.h"
#include "config.h"
#include "loader.h"
#include "log.h"
#include "setup.h"
#include "world.h"

static void usage_main(FILE *out)
{
	fprintf(out,
		"Usage: accel config COMMAND [OPTIONS]\n"
		"\n"
		"Check and inspect accel configurations.  Values come from, lowest first:\n"
		"defaults < config file < ACCEL_* environment < --set.\n"
		"\n"
		"Commands:\n"
		"  validate FILE...         check config files against the core and plugin schemas\n"
		"  show [FILE]              print the configuration with the source of every value\n"
		"  init [--template NAME]   write a commented config from a template (--list: all)\n"
		"  wizard                   a few questions, then a config file (what `accel config`\n"
		"                           alone does on a terminal; scriptable with flags)\n"
		"  import-deepspeed FILE    a DeepSpeed JSON config as an accel config\n"
		"  import-accelerate FILE   an Accelerate YAML config as an accel config\n"
		"\n"
		"'accel config COMMAND --help' describes a command; docs/config.md lists every key.\n");
}

static void usage_validate(FILE *out)
{
	fprintf(out,
		"Usage: accel config validate [--no-env] [--set KEY=VALUE]... FILE...\n"
		"\n"
		"Load each FILE with the ACCEL_* environment and the --set assignments, register\n"
		"the schemas of all plugins and backends found (plugin_dirs, ACCEL_PLUGIN_PATH,\n"
		"the install directory) and resolve; the selected strategy, plugins and backend\n"
		"must exist (whether this machine meets their needs is `accel plugins list`'s\n"
		"business).  Prints 'FILE: ok', or one 'FILE: error: ...' line per problem\n"
		"found: every bad key or value (up to 20, each with its position), a selected\n"
		"plugin or backend that cannot be used, a bad plugin_dirs entry.  When nothing\n"
		"else is wrong and this machine can run them, a one-process context starts the\n"
		"selected plugins and runs their validate checks (a hook that cannot work with\n"
		"the strategy); otherwise a note says why they were not run.  Their info lines\n"
		"are not shown (log_level warn while they run, unless log_level asks for\n"
		"debug or trace); warnings and errors are.\n"
		"\n"
		"Options:\n"
		"  --set KEY=VALUE   override a key (repeatable; VALUE is JSON or a plain string)\n"
		"  --no-env          ignore ACCEL_* configuration variables\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 all files valid, 1 some file invalid, 2 bad usage.\n");
}

static void usage_show(FILE *out)
{
	fprintf(out,
		"Usage: accel config show [--resolved] [--set KEY=VALUE]... [--json] [--no-env] [FILE]\n"
		"\n"
		"Print the configuration a training process would get, one 'key = value' per line\n"
		"with its source (file:line:col, env VAR, --set ..., default).  FILE (or --config\n"
		"FILE) is the config file; without one it is ACCEL_CONFIG, ./accel.json or\n"
		"$XDG_CONFIG_HOME/accel/default.json (~/.config/accel/default.json), if any.\n"
		"\n"
		"Options:\n"
		"  --resolved        show every key, defaults included (default: only keys set)\n"
		"  --config FILE     the same as FILE (the older spelling)\n"
		"  --set KEY=VALUE   override a key (repeatable)\n"
		"  --json            print {\"config\": {...}, \"sources\": {...}} instead\n"
		"  --no-env          ignore ACCEL_* configuration variables\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 ok, 1 invalid configuration, 2 bad usage.\n");
}

typedef struct opts {
	const char *config;
	const char **sets;
	int nsets;
	const char **files;
	int nfiles;
	int resolved, json, no_env;
} opts;

/* "--opt VALUE" or "--opt=VALUE"; returns the value or NULL. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *ret_bad)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	*ret_bad = 0;
	if (strncmp(a, name, n))
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*ret_bad = 1;
		return NULL;
	}
	return argv[++*i];
}

/* Parses options of `sub`; 0 ok, 2 usage error (printed), -1 help printed. */
static int parse(const char *sub, int argc, char **argv, int is_show, opts *o)
{
	char where[32];
	snprintf(where, sizeof(where), "config %s", sub);
	memset(o, 0, sizeof(*o));
	o->sets = calloc((size_t)argc + 1, sizeof(*o->sets));
	o->files = calloc((size_t)argc + 1, sizeof(*o->files));
	if (!o->sets || !o->files) {
		fprintf(stderr, "accel %s: out of memory\n", where);
		return 2;
	}
	int only_files = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;
		int bad;
		if (!only_files && a[0] == '-' && a[1] != '\0') {
			if (!strcmp(a, "--")) {
				only_files = 1;
			} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
				(is_show ? usage_show : usage_validate)(stdout);
				return -1;
			} else if ((v = opt_value(argc, argv, &i, "--set", &bad)) || bad) {
				if (bad)
					return accelp_cli_usage_error(where, "--set needs KEY=VALUE");
				const char *eq = strchr(v, '=');
				if (!eq || eq == v)
					return accelp_cli_usage_error(where, "--set '%s': expected KEY=VALUE "
					                              "(for example seed=3 or "
					                              "optimizer.params.lr=1e-4)", v);
				o->sets[o->nsets++] = v;
			} else if (is_show && ((v = opt_value(argc, argv, &i, "--config", &bad)) || bad)) {
				if (bad || !*v)
					return accelp_cli_usage_error(where, "--config needs a FILE");
				o->config = v;
			} else if (is_show && !strcmp(a, "--resolved")) {
				o->resolved = 1;
			} else if (is_show && !strcmp(a, "--json")) {
				o->json = 1;
			} else if (!strcmp(a, "--no-env")) {
				o->no_env = 1;
			} else {
				return accelp_cli_usage_error(where, "unknown option '%s'", a);
			}
		} else if (is_show && (o->config || o->nfiles)) {
			return accelp_cli_usage_error(where, "one config file only (got '%s' and '%s')",
			                              o->config ? o->config : o->files[0], a);
		} else {
			o->files[o->nfiles++] = a;
		}
	}
	if (!is_show && !o->nfiles)
		return accelp_cli_usage_error(where, "missing FILE to validate");
	if (is_show && o->nfiles) {   /* `show FILE` is `show --config FILE` */
		o->config = o->files[0];
		o->nfiles = 0;
	}
	return 0;
}

static void opts_free(opts *o)
{
	free(o->sets);
	free(o->files);
}

/* The set-up a context runs (core/setup.c), on FILE (NULL: the usual
 * lookup) and the command's --set and --no-env.  all_errors: a bad
 * plugin_dirs entry does not stop the rest (validate). */
static int setup(const opts *o, const char *file, int all_errors, accelp_setup *s,
                 accel_err *err)
{
	accelp_setup_opts so = {
		.config_path = file,
		.config_path_from = "--config",
		.skip_env = o->no_env,
		.sets = o->sets,
		.resolve = 1,
		.all_errors = all_errors,
	};
	return accelp_setup_run(&so, s, err);
}

/* The selected backend must exist and load.  Requirements (CUDA, NCCL,
 * MPI) are not checked: the config may be meant for another machine, and
 * `accel plugins list` reports them for this one. */
static int check_backend(const accelp_setup *s, accel_err *err)
{
	const accel_module *m;
	if (!strcmp(s->sel.backend, "auto"))
		return ACCEL_OK;
	accel_err e;
	accelp_err_clear(&e);
	int r = accelp_loader_find(s->loader, ACCEL_MODULE_COMM, s->sel.backend, &m, &e);
	if (r && r != ACCEL_ERR_UNSUPPORTED)
		return accelp_err_set(err, r, "backend '%s' (from %s): %s", s->sel.backend,
		                     accelp_config_source(s->cfg, "backend"),
		                     e.msg[0] ? e.msg : accel_status_str(r));
	return ACCEL_OK;
}

/* Why the selected plugins cannot be started here (a one-process context),
 * or NULL: one of them (or the backend) needs what this machine lacks, or
 * this process is a rank of a larger job. */
static const char *why_not_run(const accelp_setup *s, char *buf, size_t cap)
{
	for (uint32_t i = 0; i < s->sel.n; i++)
		if (s->mods[i] && s->mods[i]->status != ACCEL_MODULE_OK) {
			snprintf(buf, cap, "%s", s->mods[i]->reason ? s->mods[i]->reason
			                                             : "a selected plugin is not usable");
			return buf;
		}
	const accel_module *m;
	accel_err e;
	accelp_err_clear(&e);
	int any_comm = 0;
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		m = accelp_loader_get(s->loader, i);
		any_comm |= m->kind == ACCEL_MODULE_COMM && m->status == ACCEL_MODULE_OK;
	}
	if (!any_comm) {
		snprintf(buf, cap, "no usable comm backend is installed here (see `accel plugins "
		         "list`)");
		return buf;
	}
	if (strcmp(s->sel.backend, "auto") &&
	    accelp_loader_find(s->loader, ACCEL_MODULE_COMM, s->sel.backend, &m, &e)) {
		snprintf(buf, cap, "%s", e.msg);
		return buf;
	}
	accel_world_v1 w = {.struct_size = sizeof(w)};
	char job[256], addr[256];
	int port = 0;
	const char *launcher = NULL;
	accelp_err_clear(&e);
	if (accelp_world_from_env(&w, job, sizeof(job), addr, sizeof(addr), &port, &launcher, &e))
		snprintf(buf, cap, "%s", e.msg);
	else if (w.world_size > 1)
		snprintf(buf, cap, "this process is rank %d of %d (started by %s); run `accel config "
		         "validate` outside the job", w.rank, w.world_size,
		         launcher ? launcher : "a launcher");
	else
		return NULL;
	return buf;
}

/* The plugins' own checks: a one-process context of FILE runs every
 * selected plugin's init and validate (and the core's hook/strategy
 * rules), as `accel launch` would on each rank.  0 ok, 1 refused (said),
 * 2 not run (a note says why). */
static int run_plugins(const opts *o, const char *file, const accelp_setup *s)
{
	char why[ACCEL_ERRMSG_MAX];
	if (why_not_run(s, why, sizeof(why))) {
		fprintf(stderr, "%s: note: the selected plugins' validate checks were not run: %s\n",
		        file, why);
		return 2;
	}
	/* A verdict, not the plugins' chatter: their info lines (the method or
	 * sharding they run) are left out, their warnings and errors still
	 * show; a config whose log_level (or ACCEL_LOG_LEVEL) asks for less,
	 * or for debug or trace, keeps that.  The context takes its level from the configuration, so
	 * the level is passed as a last --set, and the process's own level
	 * (what the context sets it to) is put back after. */
	const char *lv = NULL;
	int level = ACCEL_LOG_WARN, asked = -1;
	if (accelp_config_get_string(s->cfg, "log_level", &lv) == ACCEL_OK)
		asked = accelp_log_level_parse(lv);
	/* error asks for less; debug and trace were asked for: kept */
	if (asked == ACCEL_LOG_ERROR || asked > ACCEL_LOG_INFO)
		level = asked;
	const char **sets = calloc((size_t)o->nsets + 2, sizeof(*sets));
	if (!sets) {
		fprintf(stderr, "%s: error: out of memory starting the selected plugins\n", file);
		return 1;
	}
	for (int i = 0; i < o->nsets; i++)
		sets[i] = o->sets[i];
	if (level == ACCEL_LOG_WARN)
		sets[o->nsets] = "log_level=warn";
	int saved = accelp_log_get_level();
	if (saved > level)
		accelp_log_set_level(level);
	accel_opts ao = {.struct_size = sizeof(ao), .config_path = file, .sets = sets,
	                 .skip_env = o->no_env};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&ao, &ctx);
	if (r)
		fprintf(stderr, "%s: error: %s\n", file,
		        ctx ? accel_errmsg(ctx) : accel_status_str(r));
	accel_ctx_free(ctx);
	accelp_log_set_level(saved);
	free(sets);
	return r ? 1 : 0;
}

/* One file: every problem found, one line each: the plugin_dirs entries',
 * the configuration's (every bad key or value) and the selected plugins'
 * and backend's, so a typo is not hidden behind a plugin this machine
 * lacks.  With plugins: when nothing else is wrong, the selected plugins'
 * validate slots too.  0 when valid. */
static int validate_file(const opts *o, const char *file, int plugins)
{
	accelp_setup s;
	accel_err err, e;
	accelp_err_clear(&err);
	int r = setup(o, file, 1, &s, &err), bad = 0;
	for (uint32_t i = 0; i < s.n_dir_errors; i++)
		fprintf(stderr, "%s: error: %s\n", file, s.dir_errors[i]);
	if (s.dir_errors_more)
		fprintf(stderr, "%s: error: %u more problems not shown (the first %d are)\n", file,
		        s.dir_errors_more, ACCEL_CONFIG_ERRORS_MAX);
	if (s.n_dir_errors)
		bad = 1;
	/* resolve's bad keys */
	uint32_t nerr = r && s.failed_at == ACCELP_SETUP_RESOLVE && s.cfg
	                        ? accelp_config_error_count(s.cfg)
	                        : 0;
	if (r && nerr > 1) {
		/* every bad key, one line each, with its position */
		for (uint32_t i = 0; i < nerr; i++)
			fprintf(stderr, "%s: error: %s\n", file, accelp_config_error_get(s.cfg, i));
		if (accelp_config_error_more(s.cfg))
			fprintf(stderr, "%s: error: %u more problems not shown (the first %d are)\n",
			        file, accelp_config_error_more(s.cfg), ACCEL_CONFIG_ERRORS_MAX);
		bad = 1;
	} else if (r) {
		fprintf(stderr, "%s: error: %s\n", file, err.msg);
		bad = 1;
	}
	int mods_ok = 0;
	if (!r || s.failed_at == ACCELP_SETUP_RESOLVE) {
		/* the selected plugins must exist and load, with the roles they
		 * are selected for (the context's own rules) */
		accelp_err_clear(&e);
		if (accelp_setup_modules(&s, 1, &e)) {
			fprintf(stderr, "%s: error: %s\n", file, e.msg);
			bad = 1;
		} else {
			mods_ok = 1;
		}
		accelp_err_clear(&e);
		if (check_backend(&s, &e)) {
			fprintf(stderr, "%s: error: %s\n", file, e.msg);
			bad = 1;
		}
	}
	if (!bad && plugins && mods_ok && run_plugins(o, file, &s) == 1)
		bad = 1;
	if (!bad)
		printf("%s: ok\n", file);
	accelp_setup_fini(&s);
	return bad;
}

static int cmd_validate(int argc, char **argv)
{
	opts o;
	int r = parse("validate", argc, argv, 0, &o), status = 0;
	if (r) {
		opts_free(&o);
		return r < 0 ? 0 : r;
	}
	for (int i = 0; i < o.nfiles; i++)
		if (validate_file(&o, o.files[i], 1))
			status = 1;
	opts_free(&o);
	return status;
}

static int cmd_show(int argc, char **argv)
{
	opts o;
	int r = parse("show", argc, argv, 1, &o);
	if (r) {
		opts_free(&o);
		return r < 0 ? 0 : r;
	}
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	int status = 0;
	if (setup(&o, o.config, 0, &s, &err)) {
		fprintf(stderr, "accel config show: %s\n", err.msg);
		status = 1;
	} else if (o.json) {
		if (accelp_config_dump_json(s.cfg, stdout, o.resolved, 1) != ACCEL_OK) {
			fprintf(stderr, "accel config show: cannot print the configuration\n");
			status = 1;
		}
	} else {
		if (s.config_file)
			printf("# config file: %s (%s)\n", s.config_file, s.config_from);
		else
			printf("# config file: none (defaults, environment and --set only)\n");
		accelp_config_dump(s.cfg, stdout, o.resolved, 1);
	}
	accelp_setup_fini(&s);
	opts_free(&o);
	if (fflush(stdout) != 0 && !status) {
		perror("accel config show: stdout");
		status = 1;
	}
	return status;
}

int accelp_cli_config_check(const char *file)
{
	opts o;
	memset(&o, 0, sizeof(o));
	const char *none[1] = {NULL};
	o.sets = none;
	o.no_env = 1;
	return validate_file(&o, file, 0);
}

/* The plugin_dirs of the user's config (`config`, else the usual lookup:
 * ACCEL_CONFIG, ./accel.json, ~/.config/accel/default.json), copied into
 * dirs[0..*n).  A config that cannot be read, or an entry that is not a
 * folder, is said as a warning and left out.  0, or 1 out of memory. */
static int user_dirs(const char *where, const char *config, char ***dirs, uint32_t *n)
{
	const char *from = "--config";
	const char *path = config ? config : accelp_config_find_file(&from);
	accel_config *cfg = NULL;
	accel_err err;
	accelp_err_clear(&err);
	*dirs = NULL;
	*n = 0;
	if (!path)
		return 0;
	char *file = strdup(path);   /* find_file's answer lives until its next call */
	if (!file || accelp_config_new(&cfg, &err))
		goto oom;
	if (accelp_config_load_file(cfg, file, &err)) {
		fprintf(stderr, "accel config %s: warning: %s (%s): its plugin_dirs are not "
		        "searched: %s\n", where, file, from, err.msg);
		goto done;
	}
	const char *d;
	uint32_t count = 0;
	int r;
	while ((r = accelp_config_peek_strlist(cfg, "plugin_dirs", count, &d)) == ACCEL_OK)
		count++;
	if (r != ACCEL_ERR_NOT_FOUND) {
		fprintf(stderr, "accel config %s: warning: %s: plugin_dirs is not a list of directory "
		        "names; not searched\n", where, file);
		goto done;
	}
	if (count && !(*dirs = calloc(count, sizeof(**dirs))))
		goto oom;
	for (uint32_t i = 0; i < count; i++) {
		accelp_config_peek_strlist(cfg, "plugin_dirs", i, &d);
		const char *problem = *d ? accelp_loader_dir_problem(d) : "an empty string";
		if (problem) {
			fprintf(stderr, "accel config %s: warning: plugin_dirs[%u] of %s, '%s', is left "
			        "out: %s (`accel config validate %s` says more)\n", where, i, file, d,
			        problem, file);
			continue;
		}
		if (!((*dirs)[*n] = strdup(d)))
			goto oom;
		++*n;
	}
done:
	accelp_config_free(cfg);
	free(file);
	return 0;
oom:
	fprintf(stderr, "accel config %s: out of memory\n", where);
	accelp_config_free(cfg);
	free(file);
	return 1;
}

int accelp_cli_config_modules(const char *where, int resolve, const char *config,
                              accelp_setup *s)
{
	char **dirs = NULL;
	uint32_t n = 0;
	memset(s, 0, sizeof(*s));
	if (user_dirs(where, config, &dirs, &n)) {
		for (uint32_t i = 0; i < n; i++)
			free(dirs[i]);
		free(dirs);
		return 1;
	}
	/* the user's plugin_dirs first, as a context searches them */
	accelp_setup_opts so = {
		.config_json = "{}",
		.config_path_from = "none",
		.skip_env = 1,
		.resolve = resolve,
		.extra_dirs = (const char *const *)dirs,
		.n_extra_dirs = n,
		.extra_dirs_origin = "plugin_dirs",
	};
	accel_err err;
	accelp_err_clear(&err);
	int r = accelp_setup_run(&so, s, &err), status = 0;
	for (uint32_t i = 0; i < n; i++)
		free(dirs[i]);
	free(dirs);
	if (r) {
		/* the plugins were found, but the default selection (ddp) is not
		 * there or a schema clashes: what was registered still serves */
		if (s->loader && s->cfg && s->failed_at >= ACCELP_SETUP_SELECT) {
			fprintf(stderr, "accel config %s: warning: %s\n", where, err.msg);
			return 0;
		}
		fprintf(stderr, "accel config %s: cannot list the installed plugins: %s\n", where,
		        err.msg);
		status = 1;
	}
	return status;
}

int accelp_cli_config_write(const char *where, const char *path, const char *text, int force)
{
	if (!strcmp(path, "-")) {
		if (fputs(text, stdout) == EOF || fflush(stdout)) {
			fprintf(stderr, "accel config %s: writing to stdout: %s\n", where, strerror(errno));
			return 1;
		}
		return 0;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL), 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			fprintf(stderr, "accel config %s: '%s' exists; --force overwrites it, or write "
			        "elsewhere with --output FILE\n", where, path);
		else
			fprintf(stderr, "accel config %s: cannot create '%s': %s\n", where, path,
			        strerror(errno));
		return 1;
	}
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "accel config %s: writing '%s': %s\n", where, path,
			        strerror(n < 0 ? errno : EIO));
			close(fd);
			return 1;
		}
		off += (size_t)n;
	}
	if (close(fd)) {
		fprintf(stderr, "accel config %s: writing '%s': %s\n", where, path, strerror(errno));
		return 1;
	}
	return 0;
}

int accelp_cli_config(int argc, char **argv)
{
	if (argc < 2) {
		if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO))
			return accelp_cli_config_wizard(argc, argv);
		return accelp_cli_usage_error("config", "missing command (validate, show, init, "
		                              "wizard, import-deepspeed or import-accelerate; on a "
		                              "terminal `accel config` alone asks a few questions)");
	}
	const char *sub = argv[1];
	if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
		usage_main(stdout);
		return 0;
	}
	if (!strcmp(sub, "validate"))
		return cmd_validate(argc - 1, argv + 1);
	if (!strcmp(sub, "show"))
		return cmd_show(argc - 1, argv + 1);
	if (!strcmp(sub, "init"))
		return accelp_cli_config_init(argc - 1, argv + 1);
	if (!strcmp(sub, "wizard"))
		return accelp_cli_config_wizard(argc - 1, argv + 1);
	if (!strcmp(sub, "import-deepspeed"))
		return accelp_cli_config_import(argc - 1, argv + 1, 0);
	if (!strcmp(sub, "import-accelerate"))
		return accelp_cli_config_import(argc - 1, argv + 1, 1);
	return accelp_cli_usage_error("config", "unknown subcommand '%s' (validate, show, init, "
	                              "wizard, import-deepspeed or import-accelerate)", sub);
}
