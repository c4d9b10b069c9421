/* SPDX-License-Identifier: MIT */
/* cli/cmd-config-import.c: `accel config import-deepspeed` and `accel config
 * import-accelerate`: another tool's config written as an accel config,
 * with every mapping, every "auto" and every key left out reported
 * (core/config_import.h; the DeepSpeed mapping is core/config_deepspeed.c,
 * shared with the `deepspeed_config_file` key).  Accelerate's YAML is read
 * with libyaml. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "accel-build-config.h"
#include "cli.h"
#include "cmd-config.h"
#include "config_import.h"
#include "import-accelerate.h"
#include "loader.h"

static void usage_import(FILE *out, int accelerate)
{
	const char *sub = accelerate ? "import-accelerate" : "import-deepspeed";
	fprintf(out,
		"Usage: accel config %s FILE [--output OUT] [--force] [--config CFG]\n"
		"\n"
		"Write %s as an accel config.  Keys are mapped to accel's names\n"
		"(docs/config.md has the table), every \"auto\" takes accel's default (or the\n"
		"installed plugin's) and is reported with the value it took, and every key accel\n"
		"does not support is listed: nothing is dropped in silence.  The report goes to\n"
		"stderr and into the file as \"//\" comments.  A strategy or precision plugin\n"
		"the file selects that is not installed here is named; the file is still\n"
		"written (exit status 1).\n"
		"\n"
		"Options:\n"
		"  -o, --output OUT  write here (default: stdout); the file is then checked as\n"
		"                    `accel config validate` would\n"
		"  --force           overwrite OUT if it exists\n"
		"  --config CFG      look for the strategy also in the plugin_dirs of CFG\n"
		"                    (default: the config accel finds: $ACCEL_CONFIG,\n"
		"                    ./accel.json, ~/.config/accel/default.json)\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 written (and valid here), 1 not written, or written but not usable\n"
		"here (a strategy or plugin not installed, a check failed), 2 bad usage.\n",
		sub, accelerate ? "an Accelerate config (the YAML `accelerate config` writes)"
		                : "a DeepSpeed JSON config");
}

/* Read Accelerate config file `path` (NULL, with the message on stderr,
 * when it cannot be read or is not a YAML mapping). */
static json_t *yaml_load(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "accel config import-accelerate: cannot open '%s': %s\n", path,
		        strerror(errno));
		return NULL;
	}
	size_t n = 0, cap = 4096, got;
	char *text = malloc(cap);
	while (text && (got = fread(text + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			char *t2 = realloc(text, cap * 2);
			if (!t2) {
				free(text);
				text = NULL;
				break;
			}
			text = t2;
			cap *= 2;
		}
	}
	int bad = ferror(f);
	fclose(f);
	if (!text || bad) {
		fprintf(stderr, "accel config import-accelerate: cannot read '%s': %s\n", path,
		        text ? strerror(errno) : "out of memory");
		free(text);
		return NULL;
	}
	accel_err err;
	json_t *y = NULL;
	accelp_err_clear(&err);
	if (accelp_import_yaml_parse(text, n, path, &y, &err))
		fprintf(stderr, "accel config import-accelerate: %s\n", err.msg);
	free(text);
	return y;
}

/* ---- the command ------------------------------------------------------------ */

static void print_list(const char *sub, const char *file, const char *what, const json_t *l)
{
	size_t i;
	json_t *e;
	json_array_foreach(l, i, e)
		fprintf(stderr, "accel config %s: %s: %s%s\n", sub, file, what, json_string_value(e));
}

/* The module `name` of kind PLUGIN, usable or only unmet here. */
static int installed(const accelp_setup *s, const char *name)
{
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		if (m->kind == ACCEL_MODULE_PLUGIN && m->name && !strcmp(m->name, name) &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE))
			return 1;
	}
	return 0;
}

/* The folder of plugin `name` when it was found through the user's
 * plugin_dirs (the config written names it, so it finds the plugin), else
 * NULL; *oom set when a copy could not be made. */
static char *user_dir(const accelp_setup *s, const char *name, int *oom)
{
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		const char *slash = strrchr(m->path, '/');
		if (m->kind != ACCEL_MODULE_PLUGIN || !m->name || strcmp(m->name, name) ||
		    (m->status != ACCEL_MODULE_OK && m->status != ACCEL_MODULE_UNAVAILABLE))
			continue;
		if (strcmp(m->origin, "plugin_dirs") || !slash)
			return NULL;
		char *d = strndup(m->path, (size_t)(slash - m->path));
		*oom = !d;
		return d;
	}
	return NULL;
}

static void found_plugins(const accelp_setup *s, FILE *out)
{
	int n = 0;
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		if (m->kind == ACCEL_MODULE_PLUGIN && m->name &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE))
			fprintf(out, "%s%s", n++ ? ", " : "", m->name);
	}
	if (!n)
		fprintf(out, "none");
}

int accelp_cli_config_import(int argc, char **argv, int accelerate)
{
	const char *sub = accelerate ? "import-accelerate" : "import-deepspeed";
	char where[64];
	snprintf(where, sizeof(where), "config %s", sub);
	const char *in = NULL, *out = "-", *config = NULL;
	int force = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage_import(stdout, accelerate);
			return 0;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			if (i + 1 >= argc || !*argv[i + 1])
				return accelp_cli_usage_error(where, "%s needs a FILE", a);
			out = argv[++i];
		} else if (!strncmp(a, "--output=", 9) && a[9]) {
			out = a + 9;
		} else if (!strcmp(a, "--config")) {
			if (i + 1 >= argc || !*argv[i + 1])
				return accelp_cli_usage_error(where, "%s needs a FILE", a);
			config = argv[++i];
		} else if (!strncmp(a, "--config=", 9) && a[9]) {
			config = a + 9;
		} else if (!strcmp(a, "--force")) {
			force = 1;
		} else if (a[0] == '-' && a[1]) {
			return accelp_cli_usage_error(where, "unknown option '%s'", a);
		} else if (in) {
			return accelp_cli_usage_error(where, "one FILE only (got '%s' and '%s')", in, a);
		} else {
			in = a;
		}
	}
	if (!in)
		return accelp_cli_usage_error(where, "missing FILE to import");
#if !ACCEL_HAVE_YAML
	if (accelerate) {
		fprintf(stderr, "accel config import-accelerate: this accel was built without libyaml "
		        "(install libyaml-dev, tools/install-deps.sh does, and rebuild)\n");
		return 1;
	}
#endif
	accelp_setup s;
	accelp_import imp;
	accel_err err;
	accelp_err_clear(&err);
	int status = 1, r;
	char *text = NULL;
	json_t *doc = NULL, *y = NULL;
	memset(&imp, 0, sizeof(imp));
	if (accelp_cli_config_modules(sub, 1, config, &s))
		goto out;
	if ((r = accelp_import_init(&imp, s.cfg, &err))) {
		fprintf(stderr, "accel %s: %s\n", where, err.msg);
		goto out;
	}
	if (!accelerate) {
		r = accelp_import_deepspeed_file(&imp, in, &err);
	} else {
		if (!(y = yaml_load(in)))
			goto out;
		r = accelp_import_accelerate(&imp, y, in, &err);
	}
	if (r) {
		fprintf(stderr, "accel %s: %s\n", where, err.msg);
		goto out;
	}
	fprintf(stderr, "accel %s: %s: strategy %s (%s)\n", where, in, imp.strategy,
	        imp.strategy_why);
	print_list(sub, in, "", imp.mapped);
	print_list(sub, in, "auto: ", imp.autos);
	print_list(sub, in, "not supported, left out: ", imp.unsupported);
	print_list(sub, in, "for accel launch: ", imp.launch);

	char header[1024];
	snprintf(header, sizeof(header), "imported from %s by `accel config %s`; members named "
	         "\"//...\" are comments that accel ignores", in, sub);
	doc = json_object();
	json_t *comment = accelp_import_comment(&imp, header);
	int oom = 0;
	char *sdir = user_dir(&s, imp.strategy, &oom);
	if (!doc || !comment || oom || json_object_set_new(doc, "//", comment) ||
	    (sdir && (json_object_set_new(doc, "// plugin_dirs", json_string(
	                  "where the strategy was found (the plugin_dirs of your config)")) ||
	              json_object_set_new(doc, "plugin_dirs", json_pack("[s]", sdir)))) ||
	    json_object_set_new(doc, "strategy", json_string(imp.strategy)) ||
	    json_object_update(doc, imp.config)) {
		free(sdir);
		fprintf(stderr, "accel %s: out of memory\n", where);
		goto out;
	}
	free(sdir);
	char *t = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	if (!t || asprintf(&text, "%s\n", t) < 0) {
		free(t);
		text = NULL;
		fprintf(stderr, "accel %s: out of memory\n", where);
		goto out;
	}
	free(t);
	if (accelp_cli_config_write(sub, out, text, force))
		goto out;
	const char *written = strcmp(out, "-") ? out : "the config (stdout)";
	/* what this machine lacks, named as such */
	int missing = 0;
	if (!installed(&s, imp.strategy)) {
		fprintf(stderr, "accel %s: %s selects strategy '%s', which is not installed (plugins "
		        "found: ", where, imp.strategy_why, imp.strategy);
		found_plugins(&s, stderr);
		fprintf(stderr, "); %s is written and will validate once a %s plugin is installed\n",
		        written, imp.strategy);
		missing = 1;
	}
	json_t *mp = json_object_get(imp.config, "mixed_precision");
	const char *mode = json_is_string(mp) ? json_string_value(mp) : "no";
	const char *need = !strcmp(mode, "fp16") ? "scaler" : !strcmp(mode, "fp8") ? "fp8" : NULL;
	if (need && !installed(&s, need)) {
		fprintf(stderr, "accel %s: mixed_precision %s needs the '%s' plugin, which is not "
		        "installed (plugins found: ", where, mode, need);
		found_plugins(&s, stderr);
		fprintf(stderr, ")\n");
		missing = 1;
	}
	if (missing)
		goto out;
	if (strcmp(out, "-")) {
		printf("wrote %s\n", out);
		status = accelp_cli_config_check(out);
		if (!status) {   /* the launcher's share, as one command line */
			size_t i;
			json_t *e;
			printf("run it with: accel launch");
			json_array_foreach(imp.launch, i, e) {
				const char *l = json_string_value(e), *p = strstr(l, " (");
				printf(" %.*s", p ? (int)(p - l) : (int)strlen(l), l);
			}
			printf(" --config %s PROGRAM [ARGS...]\n", out);
		}
	} else {
		status = 0;
	}
out:
	free(text);
	json_decref(doc);
	json_decref(y);
	accelp_import_fini(&imp);
	accelp_setup_fini(&s);
	return status;
}
