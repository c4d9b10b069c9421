/* SPDX-License-Identifier: MIT */
/* cli/cmd-plugins.c: `accel plugins list` and `accel plugins info NAME`. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "cli.h"
#include "loader.h"
#include "setup.h"

#define MAX_DIRS 64

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: accel plugins [list] [OPTIONS]\n"
		"       accel plugins info NAME [OPTIONS]\n"
		"\n"
		"List the plugins and comm backends accel finds, with their status, or\n"
		"show one of them in detail: role, capabilities, requirements and every\n"
		"configuration key with its type, default, range and meaning.\n"
		"\n"
		"Directories are searched in this order: --plugin-dir, the config's\n"
		"plugin_dirs, ACCEL_PLUGIN_PATH (':'-separated), the install directory.\n"
		"\n"
		"Options:\n"
		"  --plugin-dir DIR  search DIR first (repeatable)\n"
		"  --config FILE     read plugin_dirs from FILE (default: $ACCEL_CONFIG,\n"
		"                    ./accel.json, $XDG_CONFIG_HOME/accel/default.json,\n"
		"                    ~/.config/accel/default.json)\n"
		"  --json            print JSON instead of text\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 success, 1 a problem (config error, NAME not found or not\n"
		"usable), 2 bad usage.\n");
}

typedef struct opts {
	const char *dirs[MAX_DIRS];   /* --plugin-dir */
	uint32_t n_dirs;
	const char *config;
	int json;
	const char *sub;
	const char *name;
} opts;

static int parse(int argc, char **argv, opts *o)
{
	static const struct option longopts[] = {
		{"plugin-dir", required_argument, NULL, 'd'},
		{"config", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	optind = 1;
	opterr = 0;
	int c;
	/* '+' would stop at the first operand; options may follow NAME. */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (o->n_dirs == MAX_DIRS)
				return accelp_cli_usage_error("plugins", "at most %d --plugin-dir options",
				                              MAX_DIRS);
			if (!*optarg)
				return accelp_cli_usage_error("plugins", "--plugin-dir needs a directory");
			o->dirs[o->n_dirs++] = optarg;
			break;
		case 'c':
			o->config = optarg;
			break;
		case 'j':
			o->json = 1;
			break;
		case 'h':
			usage(stdout);
			return -1;
		case ':':
			return accelp_cli_usage_error("plugins", "option '%s' needs a value",
			                              argv[optind - 1]);
		default:
			/* a short option inside a cluster (-xh) is optopt, not argv[optind - 1] */
			if (optopt && strncmp(argv[optind - 1], "--", 2))
				return accelp_cli_usage_error("plugins", "unknown option '-%c'", optopt);
			return accelp_cli_usage_error("plugins", "unknown option '%s'",
			                              argv[optind - 1]);
		}
	}
	int n = argc - optind;
	o->sub = n > 0 ? argv[optind] : "list";
	if (!strcmp(o->sub, "list")) {
		if (n > 1)
			return accelp_cli_usage_error("plugins", "'list' takes no argument (got '%s')",
			                              argv[optind + 1]);
	} else if (!strcmp(o->sub, "info")) {
		if (n < 2)
			return accelp_cli_usage_error("plugins", "'info' needs a plugin name");
		if (n > 2)
			return accelp_cli_usage_error("plugins", "'info' takes one name (got '%s' too)",
			                              argv[optind + 2]);
		o->name = argv[optind + 1];
	} else if (!strcmp(o->sub, "help")) {
		usage(stdout);
		return -1;
	} else {
		return accelp_cli_usage_error("plugins", "unknown subcommand '%s' (list, info)",
		                              o->sub);
	}
	return 0;
}

static const char *kind_col(const accel_module *m)
{
	if (m->kind == ACCEL_MODULE_COMM)
		return "comm";
	if (m->kind == ACCEL_MODULE_PLUGIN && m->name)
		return accelp_loader_role_name(m->role);
	return "-";
}

static void abi_col(const accel_module *m, char *buf, size_t cap)
{
	if (m->abi_major && (m->plugin || m->comm))
		snprintf(buf, cap, "v%d.%u", m->abi_major, m->abi_minor);
	else if (m->abi_major)
		snprintf(buf, cap, "v%d", m->abi_major);
	else
		snprintf(buf, cap, "-");
}

static void req_col(const accel_module *m, char *buf, size_t cap)
{
	if (!m->name || m->status == ACCEL_MODULE_BROKEN)
		snprintf(buf, cap, "-");
	else
		accelp_loader_requires_str(m->requires, m->min_cuda_cc, buf, cap);
}

/* ---- JSON ----------------------------------------------------------------------- */

/* A JSON string for text from a file name or a plugin, which need not be
 * UTF-8 (json_string() refuses it): bytes that are not valid UTF-8 are
 * written as the text \xNN, so nothing is dropped from the document. */
static json_t *text_json(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	size_t n = strlen(s);
	char *buf = malloc(4 * n + 1), *o = buf;
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		char one[5] = {0};
		size_t len = 1;
		unsigned char c = (unsigned char)s[i];
		if (c >= 0xc2 && c <= 0xf4)
			len = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
		memcpy(one, s + i, len <= n - i ? len : 1);
		json_t *t = c < 0x80 ? NULL : json_string(one);
		if (c < 0x80 || t) {
			memcpy(o, s + i, c < 0x80 ? 1 : len);
			o += c < 0x80 ? 1 : len;
			i += c < 0x80 ? 1 : len;
		} else {
			o += sprintf(o, "\\x%02x", c);
			i++;
		}
		json_decref(t);
	}
	*o = '\0';
	j = json_string(buf);
	free(buf);
	return j;
}

static json_t *str_or_null(const char *s)
{
	return s ? text_json(s) : json_null();
}

/* ["CUDA", "MPI"] from bits; min_cuda_cc is reported separately. */
static json_t *req_array(uint32_t req, int32_t min_cc)
{
	json_t *a = json_array();
	if (min_cc > 0)
		req |= ACCEL_REQ_CUDA;
	if (req & ACCEL_REQ_CUDA)
		json_array_append_new(a, json_string("cuda"));
	if (req & ACCEL_REQ_NCCL)
		json_array_append_new(a, json_string("nccl"));
	if (req & ACCEL_REQ_MPI)
		json_array_append_new(a, json_string("mpi"));
	return a;
}

static json_t *caps_array(uint32_t caps)
{
	char buf[256];
	json_t *a = json_array();
	if (!caps)
		return a;
	accelp_loader_caps_str(caps, buf, sizeof(buf));
	char *save = NULL;
	for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
		json_array_append_new(a, json_string(t));
	return a;
}

static json_t *module_json(const accel_module *m)
{
	json_t *o = json_object();
	json_object_set_new(o, "name", str_or_null(m->name));
	json_object_set_new(o, "path", text_json(m->path));
	json_object_set_new(o, "origin", json_string(m->origin));
	json_object_set_new(o, "status", json_string(accelp_loader_status_name(m->status)));
	json_object_set_new(o, "reason", str_or_null(m->cause));
	json_object_set_new(o, "shadowed_by", str_or_null(m->shadowed_by));
	json_object_set_new(o, "kind", m->kind ? json_string(accelp_loader_kind_name(m->kind))
	                                       : json_null());
	json_object_set_new(o, "abi_major", m->abi_major ? json_integer(m->abi_major) : json_null());
	if (!m->name || !(m->plugin || m->comm))
		return o;
	json_object_set_new(o, "abi_minor", json_integer(m->abi_minor));
	json_object_set_new(o, "version", str_or_null(m->version));
	json_object_set_new(o, "summary", str_or_null(m->summary));
	if (m->kind == ACCEL_MODULE_PLUGIN) {
		json_object_set_new(o, "role", json_string(accelp_loader_role_name(m->role)));
		json_object_set_new(o, "caps", caps_array(m->caps));
		json_object_set_new(o, "state_version", json_integer(m->state_version));
	} else {
		json_t *dev = json_array();
		if (m->devices & (1u << ACCEL_DEVICE_CPU))
			json_array_append_new(dev, json_string("cpu"));
		if (m->devices & (1u << ACCEL_DEVICE_CUDA))
			json_array_append_new(dev, json_string("cuda"));
		json_object_set_new(o, "devices", dev);
	}
	json_object_set_new(o, "requires", req_array(m->requires, m->min_cuda_cc));
	json_object_set_new(o, "min_cuda_cc", json_integer(m->min_cuda_cc));
	json_object_set_new(o, "config_section", str_or_null(m->config_section));
	return o;
}

static json_t *dirs_json(const accel_loader *ld)
{
	json_t *a = json_array();
	for (uint32_t i = 0; i < accelp_loader_dir_count(ld); i++) {
		const char *origin;
		int exists;
		const char *d = accelp_loader_dir(ld, i, &origin, &exists);
		json_t *o = json_object();
		json_object_set_new(o, "path", text_json(d));
		json_object_set_new(o, "origin", json_string(origin));
		json_object_set_new(o, "exists", json_boolean(exists));
		json_array_append_new(a, o);
	}
	return a;
}

static int print_json(json_t *root)
{
	char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!s) {
		fprintf(stderr, "accel plugins: out of memory\n");
		return 1;
	}
	printf("%s\n", s);
	free(s);
	return 0;
}

/* ---- list ------------------------------------------------------------------------- */

static void print_dirs(const accel_loader *ld)
{
	printf("Search directories, in order:\n");
	if (!accelp_loader_dir_count(ld))
		printf("  (none)\n");
	for (uint32_t i = 0; i < accelp_loader_dir_count(ld); i++) {
		const char *origin;
		int exists;
		const char *d = accelp_loader_dir(ld, i, &origin, &exists);
		printf("  %u. %s  (%s%s%s)\n", i + 1, d, origin, exists ? "" : ", ",
		       exists ? "" : accelp_loader_dir_problem(d) ? accelp_loader_dir_problem(d)
		                                            : "missing");
	}
}

static int cmd_list(const accel_loader *ld, const opts *o, const char *cfg_file)
{
	uint32_t n = accelp_loader_count(ld);
	if (o->json) {
		json_t *root = json_object();
		json_object_set_new(root, "accel_version", json_string(accel_version()));
		json_object_set_new(root, "abi_major", json_integer(ACCEL_ABI_MAJOR));
		json_object_set_new(root, "abi_minor", json_integer(ACCEL_ABI_MINOR));
		json_object_set_new(root, "config_file", str_or_null(cfg_file));
		json_object_set_new(root, "directories", dirs_json(ld));
		json_t *mods = json_array();
		for (uint32_t i = 0; i < n; i++)
			json_array_append_new(mods, module_json(accelp_loader_get(ld, i)));
		json_object_set_new(root, "modules", mods);
		return print_json(root);
	}

	static const char *const head[] = {"NAME", "VERSION", "ABI", "KIND", "STATUS", "REQUIRES",
	                                   "PATH"};
	enum { NCOL = 7 };
	size_t w[NCOL];
	for (int c = 0; c < NCOL; c++)
		w[c] = strlen(head[c]);
	char cell[NCOL][256];
	uint32_t counts[4] = {0};
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1 && n) {
			for (int c = 0; c < NCOL; c++)
				printf(c < NCOL - 1 ? "%-*s  " : "%-*s\n", (int)(c < NCOL - 1 ? w[c] : 0),
				       head[c]);
		}
		for (uint32_t i = 0; i < n; i++) {
			const accel_module *m = accelp_loader_get(ld, i);
			snprintf(cell[0], sizeof(cell[0]), "%s", m->name ? m->name : "-");
			snprintf(cell[1], sizeof(cell[1]), "%s", m->version ? m->version : "-");
			abi_col(m, cell[2], sizeof(cell[2]));
			snprintf(cell[3], sizeof(cell[3]), "%s", kind_col(m));
			snprintf(cell[4], sizeof(cell[4]), "%s", accelp_loader_status_name(m->status));
			req_col(m, cell[5], sizeof(cell[5]));
			snprintf(cell[6], sizeof(cell[6]), "%s", m->path);
			for (int c = 0; c < NCOL; c++) {
				if (pass == 0) {
					if (strlen(cell[c]) > w[c])
						w[c] = strlen(cell[c]);
				} else {
					printf(c < NCOL - 1 ? "%-*s  " : "%-*s\n",
					       (int)(c < NCOL - 1 ? w[c] : 0), cell[c]);
				}
			}
			if (pass == 0 && m->status >= 0 && m->status < 4)
				counts[m->status]++;
		}
	}
	if (!n)
		printf("No plugins or comm backends found.\n");
	else
		printf("\n%u found: %u ok, %u unavailable, %u broken, %u shadowed.\n", n,
		       counts[ACCEL_MODULE_OK], counts[ACCEL_MODULE_UNAVAILABLE],
		       counts[ACCEL_MODULE_BROKEN], counts[ACCEL_MODULE_SHADOWED]);
	/* A file shadowed from a later directory is not a problem (it is how an
	 * override works), so it gets its own heading. */
	for (int shadowed = 0; shadowed < 2; shadowed++) {
		int said = 0;
		for (uint32_t i = 0; i < n; i++) {
			const accel_module *m = accelp_loader_get(ld, i);
			if (m->status == ACCEL_MODULE_OK ||
			    shadowed != (m->status == ACCEL_MODULE_SHADOWED && !m->same_dir))
				continue;
			if (!said++)
				printf(shadowed ? "\nShadowed (the file of that name earlier in the search "
				                  "order is used):\n"
				                : "\nNot usable:\n");
			printf("  %s\n", m->reason);
		}
	}
	printf("\nConfig file: %s\n", cfg_file ? cfg_file : "none");
	print_dirs(ld);
	return 0;
}

/* ---- info ----------------------------------------------------------------------- */

static void range_str(const accel_param_schema_v1 *p, char *buf, size_t cap)
{
	buf[0] = '\0';
	if (p->type == ACCEL_CFG_ENUM && p->choices) {
		snprintf(buf, cap, "one of %s", p->choices);
		return;
	}
	if ((p->type != ACCEL_CFG_INT && p->type != ACCEL_CFG_DOUBLE) || p->min > p->max)
		return;
	char lo[64], hi[64];
	int dp = p->type == ACCEL_CFG_INT ? 0 : 10;
	snprintf(lo, sizeof(lo), dp ? "%.*g" : "%.*f", dp, p->min);
	snprintf(hi, sizeof(hi), dp ? "%.*g" : "%.*f", dp, p->max);
	if (isinf(p->min) && isinf(p->max))
		snprintf(buf, cap, "any");
	else if (isinf(p->max))
		snprintf(buf, cap, ">= %s", lo);
	else if (isinf(p->min))
		snprintf(buf, cap, "<= %s", hi);
	else
		snprintf(buf, cap, "%s .. %s", lo, hi);
}

/* A bound in --json: null when infinite (no limit); an integer for an
 * integer key (the loader refuses non-integral ones) while it fits. */
static json_t *bound_json(const accel_param_schema_v1 *p, double v)
{
	if (isinf(v))
		return json_null();
	if (p->type == ACCEL_CFG_INT && fabs(v) < 9.0e18)
		return json_integer((json_int_t)v);
	return json_real(v);
}

/* Help text indented by `indent`, wrapped at word boundaries to stay
 * within 100 columns where it can. */
static void print_wrapped(size_t indent, const char *text)
{
	const size_t width = 100;
	size_t avail = width > indent + 30 ? width - indent : 30;
	const char *p = text;
	while (*p) {
		size_t n = strlen(p);
		if (n > avail) {
			n = avail;
			while (n > 0 && p[n] != ' ')
				n--;
			if (n == 0) /* one long word */
				n = strcspn(p, " ");
		}
		printf("%*s%.*s\n", (int)indent, "", (int)n, p);
		p += n;
		while (*p == ' ')
			p++;
	}
}

static void full_key(const accel_module *m, const accel_param_schema_v1 *p, char *buf,
                     size_t cap)
{
	snprintf(buf, cap, "%s%s%s", m->config_section ? m->config_section : "",
	         m->config_section ? "." : "", p->key);
}

static json_t *param_json(const accel_module *m, const accel_param_schema_v1 *p)
{
	char key[512];
	full_key(m, p, key, sizeof(key));
	json_t *o = json_object();
	json_object_set_new(o, "key", json_string(p->key));
	json_object_set_new(o, "path", json_string(key));
	json_object_set_new(o, "type", json_string(accelp_loader_cfg_type_name(p->type)));
	json_t *def = p->default_json ? json_loads(p->default_json, JSON_DECODE_ANY, NULL) : NULL;
	json_object_set_new(o, "default", def ? def : json_null());
	if ((p->type == ACCEL_CFG_INT || p->type == ACCEL_CFG_DOUBLE) && p->min <= p->max) {
		json_object_set_new(o, "min", bound_json(p, p->min));
		json_object_set_new(o, "max", bound_json(p, p->max));
	}
	if (p->type == ACCEL_CFG_ENUM && p->choices) {
		json_t *a = json_array();
		char *c = strdup(p->choices), *save = NULL;
		for (char *t = c ? strtok_r(c, "|", &save) : NULL; t; t = strtok_r(NULL, "|", &save))
			json_array_append_new(a, json_string(t));
		free(c);
		json_object_set_new(o, "choices", a);
	}
	json_object_set_new(o, "help", text_json(p->help ? p->help : ""));
	return o;
}

/* The config fragment that selects m, as JSON. */
static json_t *select_json(const accel_module *m)
{
	if (m->kind == ACCEL_MODULE_COMM)
		return json_pack("{ss}", "backend", m->name);
	if (m->role == ACCEL_ROLE_STRATEGY)
		return json_pack("{ss}", "strategy", m->name);
	return json_pack("{s[s]}", "plugins", m->name);
}

static void select_hint(const accel_module *m, char *buf, size_t cap)
{
	if (m->kind == ACCEL_MODULE_COMM)
		snprintf(buf, cap, "\"backend\": \"%s\"", m->name);
	else if (m->role == ACCEL_ROLE_STRATEGY)
		snprintf(buf, cap, "\"strategy\": \"%s\"", m->name);
	else
		snprintf(buf, cap, "\"plugins\": [\"%s\"]", m->name);
}

static int cmd_info(accel_loader *ld, const opts *o)
{
	accel_err err;
	accelp_err_clear(&err);
	const accel_module *m = NULL;
	int r = accelp_loader_find(ld, 0, o->name, &m, &err);
	if (r == ACCEL_ERR_UNSUPPORTED) {
		/* Unmet requirements: still worth describing. */
		for (uint32_t i = 0; i < accelp_loader_count(ld) && !m; i++) {
			const accel_module *x = accelp_loader_get(ld, i);
			if (x->status == ACCEL_MODULE_UNAVAILABLE && !strcmp(x->name, o->name))
				m = x;
		}
	}
	if (!m) {
		fprintf(stderr, "accel plugins info: %s\n", err.msg);
		return 1;
	}
	char hint[256], buf[256];
	select_hint(m, hint, sizeof(hint));
	if (o->json) {
		json_t *root = module_json(m);
		json_object_set_new(root, "select", select_json(m));
		json_t *ps = json_array();
		for (uint32_t i = 0; i < m->n_params; i++)
			json_array_append_new(ps, param_json(m, &m->params[i]));
		json_object_set_new(root, "parameters", ps);
		return print_json(root);
	}
	printf("%s %s: %s\n\n", m->name, m->version, m->summary[0] ? m->summary : "(no summary)");
	if (m->kind == ACCEL_MODULE_COMM)
		printf("  kind:            comm backend\n");
	else
		printf("  kind:            plugin, role %s\n", accelp_loader_role_name(m->role));
	printf("  file:            %s  (%s)\n", m->path, m->origin);
	printf("  ABI:             v%d.%u\n", m->abi_major, m->abi_minor);
	printf("  status:          %s%s%s\n", accelp_loader_status_name(m->status),
	       m->cause ? ": " : "", m->cause ? m->cause : "");
	if (m->kind == ACCEL_MODULE_PLUGIN) {
		printf("  capabilities:    %s\n", accelp_loader_caps_str(m->caps, buf, sizeof(buf)));
		printf("  state version:   %u\n", m->state_version);
	} else {
		printf("  devices:         %s%s%s\n", m->devices & 1u ? "cpu" : "",
		       (m->devices & 3u) == 3u ? ", " : "", m->devices & 2u ? "cuda" : "");
	}
	printf("  requires:        %s\n",
	       accelp_loader_requires_str(m->requires, m->min_cuda_cc, buf, sizeof(buf)));
	printf("  select with:     %s\n", hint);
	if (!m->n_params) {
		printf("\nNo configuration keys.\n");
		return 0;
	}
	printf("  config section:  \"%s\"\n", m->config_section);
	printf("\nParameters (keys of the \"%s\" object; --set %s.KEY=VALUE):\n",
	       m->config_section, m->config_section);
	size_t kw = 0;
	for (uint32_t i = 0; i < m->n_params; i++) {
		char key[512];
		full_key(m, &m->params[i], key, sizeof(key));
		if (strlen(key) > kw)
			kw = strlen(key);
	}
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_schema_v1 *p = &m->params[i];
		char key[512], range[512], def[256];
		full_key(m, p, key, sizeof(key));
		range_str(p, range, sizeof(range));
		snprintf(def, sizeof(def), "%s", p->default_json ? p->default_json : "(none)");
		printf("  %-*s  %-7s  default %s%s%s\n", (int)kw, key,
		       accelp_loader_cfg_type_name(p->type), def, range[0] ? ", " : "", range);
		print_wrapped(kw + 6, p->help && *p->help ? p->help : "(no help)");
	}
	return 0;
}

int accelp_cli_plugins(int argc, char **argv)
{
	opts o;
	int r = parse(argc, argv, &o);
	if (r < 0)
		return 0; /* --help */
	if (r)
		return r;
	/* The loader a context would set up, plus the --plugin-dir ones. */
	accelp_setup_opts so = {
		.config_path = o.config,
		.config_path_from = "--config",
		.extra_dirs = o.dirs,
		.n_extra_dirs = o.n_dirs,
		.config_optional = 1,
	};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	if (accelp_setup_run(&so, &s, &err)) {
		fprintf(stderr, "accel plugins: %s\n", err.msg);
		accelp_setup_fini(&s);
		return 1;
	}
	if (s.config_err.code) {
		/* The directories it names would be missing from the answer. */
		fprintf(stderr, "accel plugins: config%s%s: %s\n", s.config_file ? " " : "",
		        s.config_file ? s.config_file : "", s.config_err.msg);
		accelp_setup_fini(&s);
		return 1;
	}
	r = !strcmp(o.sub, "info") ? cmd_info(s.loader, &o) : cmd_list(s.loader, &o, s.config_file);
	accelp_setup_fini(&s);
	fflush(stdout);
	return r;
}
