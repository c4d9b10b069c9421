/* SPDX-License-Identifier: MIT */
/* core/config_load.c: the layers: config files, ACCEL_* variables and --set
 * assignments kept as documents exactly as given, and raw lookups in them
 * before resolve (accel_config_peek_*). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "backends/common/launch-env.h"
#include "config-impl.h"
#include "config_import.h"
#include "log.h"

extern char **environ;

doc *cfg_doc_free(doc *d)
{
	if (!d)
		return NULL;
	free(d->name);
	free(d->prefix);
	free(d->raw);
	json_decref(d->root);
	json_decref(d->split);
	for (size_t i = 0; i < d->npos; i++)
		free(d->pos[i].path);
	free(d->pos);
	free(d);
	return NULL;
}

static int add_doc(accel_config *cfg, doc *d, accel_err *err)
{
	if (cfg_grow((void **)&cfg->docs, &cfg->capdocs, cfg->ndocs + 1, sizeof(*cfg->docs))) {
		cfg_doc_free(d);
		return cfg_nomem(err);
	}
	cfg->docs[cfg->ndocs++] = d;
	cfg->resolved = 0;
	return ACCEL_OK;
}

/* A value from the environment or the command line: JSON if it parses,
 * else the text itself (and, for string lists, the text split at commas).
 * Text that starts like a JSON list, object or string but does not parse is
 * an error: splitting '["a"' at commas would only hide the typo. */
static int value_doc(int kind, const char *name, const char *prefix, const char *raw,
                     doc **ret, accel_err *err)
{
	doc *d = calloc(1, sizeof(*d));
	if (!d)
		return cfg_nomem(err);
	d->kind = kind;
	d->name = cfg_xstrdup(name);
	d->prefix = cfg_xstrdup(prefix);
	d->raw = cfg_xstrdup(raw);
	if (!d->name || (prefix && !d->prefix) || !d->raw)
		goto oom;
	json_error_t je;
	d->root = json_loads(raw, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	if (d->root) {
		d->raw_json = 1;
		*ret = d;
		return ACCEL_OK;
	}
	const char *first = raw + strspn(raw, " \t\r\n");
	if (strstr(je.text, "duplicate object key")) {
		int r = accelp_err_set(err, ACCEL_ERR_CONFIG, "%s%s: column %d: %s",
		                      kind == D_ENV ? "env " : "", name, je.column, je.text);
		cfg_doc_free(d);
		return r;
	}
	if (*first == '[' || *first == '{' || *first == '"') {
		int r = accelp_err_set(err, ACCEL_ERR_CONFIG,
		                      "%s%s: the value looks like JSON but is not valid JSON (column "
		                      "%d: %s); quote it for the shell, or write plain text without "
		                      "a leading %c", kind == D_ENV ? "env " : "", name, je.column,
		                      je.text, *first);
		cfg_doc_free(d);
		return r;
	}
	d->root = json_string(raw);
	if (!d->root) {
		json_t *raw_bytes = json_string_nocheck(raw);
		if (raw_bytes) {   /* it was not the memory */
			json_decref(raw_bytes);
			int r = accelp_err_set(err, ACCEL_ERR_CONFIG,
			                      "%s%s: the value is not valid UTF-8 text (settings are "
			                      "JSON strings)", kind == D_ENV ? "env " : "", name);
			cfg_doc_free(d);
			return r;
		}
	}
	d->split = json_array();
	if (!d->root || !d->split)
		goto oom;
	const char *p = raw;
	while (*p) {
		const char *q = strchr(p, ',');
		size_t n = q ? (size_t)(q - p) : strlen(p);
		while (n && (*p == ' ' || *p == '\t'))
			p++, n--;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n && json_array_append_new(d->split, json_stringn(p, n)))
			goto oom;
		if (!q)
			break;
		p = q + 1;
	}
	*ret = d;
	return ACCEL_OK;
oom:
	cfg_doc_free(d);
	return cfg_nomem(err);
}

/* Members named "//..." are comments (docs/config.md): removed from every
 * object, at any depth, before anything reads the document. */
static void strip_comments(json_t *obj)
{
	const char *k;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(obj, tmp, k, v) {
		if (!strncmp(k, "//", 2))
			json_object_del(obj, k);
		else if (json_is_object(v))
			strip_comments(v);
	}
}

static void log_list(int level, const char *what, const char *file, const json_t *list)
{
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
		accelp_log(level, "deepspeed_config_file %s: %s%s", file, what, json_string_value(e));
}

/* `deepspeed_config_file` of config file `base` (NULL: not a file, the
 * path is taken as given): the DeepSpeed config mapped onto accel's keys
 * (core/config_deepspeed.c) becomes a document of the file layer placed
 * before base's own, so base's keys override it. */
static int load_deepspeed(accel_config *cfg, const char *path, const char *base,
                          const char *name, accel_err *err)
{
	char *full;
	if (path[0] != '/' && base && strchr(base, '/'))
		full = cfg_strfmt("%.*s/%s", (int)(strrchr(base, '/') - base), base, path);
	else
		full = cfg_xstrdup(path);
	if (!full)
		return cfg_nomem(err);
	accelp_import imp;
	accel_err e;
	accelp_err_clear(&e);
	int r = accelp_import_init(&imp, NULL, err);
	if (r) {
		free(full);
		return r;
	}
	if ((r = accelp_import_deepspeed_file(&imp, full, &e))) {
		accelp_err_set(err, r, "deepspeed_config_file of %s: %s", name, e.msg);
		goto out;
	}
	accelp_log(ACCEL_LOG_INFO, "deepspeed_config_file %s: strategy %s (%s)", full, imp.strategy,
	           imp.strategy_why);
	log_list(ACCEL_LOG_DEBUG, "", full, imp.mapped);
	log_list(ACCEL_LOG_INFO, "", full, imp.autos);
	log_list(ACCEL_LOG_WARN, "not supported, ignored: ", full, imp.unsupported);
	doc *d = calloc(1, sizeof(*d));
	if (!d || !(d->name = cfg_strfmt("%s (deepspeed_config_file)", full))) {
		free(d);
		r = cfg_nomem(err);
		goto out;
	}
	d->kind = D_FILE;
	d->root = json_incref(imp.config);
	r = add_doc(cfg, d, err);
out:
	accelp_import_fini(&imp);
	free(full);
	return r;
}

static int load_text(accel_config *cfg, const char *text, size_t len, const char *name,
                     int is_path, accel_err *err)
{
	json_error_t je;
	/* A byte-order mark is allowed to be ignored (RFC 8259, section 8.1);
	 * a NUL byte would end the text for jansson, hiding what follows. */
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
		text += 3;
		len -= 3;
	}
	const char *nul = memchr(text, '\0', len);
	if (nul)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "%s: contains a NUL byte (at byte %zu); a config file is JSON text",
		                     name, (size_t)(nul - text));
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "%s:%d:%d: invalid JSON: %s", name,
		                     je.line > 0 ? je.line : 1, je.column > 0 ? je.column : 1, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "%s: the top level must be a JSON object ({...}) of settings",
		                     name);
	}
	strip_comments(root);
	json_t *dsf = json_object_get(root, "deepspeed_config_file");
	if (json_is_string(dsf)) {
		int r = load_deepspeed(cfg, json_string_value(dsf), is_path ? name : NULL, name, err);
		if (r) {
			json_decref(root);
			return r;
		}
	}
	doc *d = calloc(1, sizeof(*d));
	if (!d || !(d->name = strdup(name))) {
		free(d);
		json_decref(root);
		return cfg_nomem(err);
	}
	d->kind = D_FILE;
	d->root = root;
	cfg_scan_positions(d, text, len);
	return add_doc(cfg, d, err);
}

int accelp_config_load_string(accel_config *cfg, const char *json, const char *origin,
                             accel_err *err)
{
	if (!cfg || !json)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_load_string: NULL argument");
	return load_text(cfg, json, strlen(json), origin ? origin : "<string>", 0, err);
}

int accelp_config_load_file(accel_config *cfg, const char *path, accel_err *err)
{
	char *text = NULL;
	size_t len = 0, cap = 0;
	int r;
	if (!cfg || !path)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_load_file: NULL argument");
	/* O_NONBLOCK for the open only: a FIFO without a writer would block
	 * open() forever; once open, reads block as usual and such a FIFO
	 * reads as empty (/dev/stdin from a pipe still works). */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	FILE *f = NULL;
	if (fd >= 0) {
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0)
			(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		f = fdopen(fd, "rb");
		if (!f)
			close(fd);
	}
	if (!f)
		return accelp_err_set(err, ACCEL_ERR_IO, "cannot open config file '%s': %s", path,
		                     strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		return accelp_err_set(err, ACCEL_ERR_IO, "cannot read config file '%s': %s", path,
		                     strerror(EISDIR));
	}
	for (;;) {
		if (cfg_grow((void **)&text, &cap, len + 65536 + 1, 1)) {
			r = cfg_nomem(err);
			goto fail;
		}
		size_t n = fread(text + len, 1, 65536, f);
		len += n;
		if (n < 65536) {
			if (ferror(f)) {
				r = accelp_err_set(err, ACCEL_ERR_IO, "cannot read config file '%s': %s",
				                  path, strerror(errno));
				goto fail;
			}
			break;
		}
		if (len > (64u << 20)) {
			r = accelp_err_set(err, ACCEL_ERR_CONFIG,
			                  "config file '%s' is larger than 64 MiB; is it a config?", path);
			goto fail;
		}
	}
	text[len] = '\0';
	r = load_text(cfg, text, len, path, 1, err);
fail:
	fclose(f);
	free(text);
	return r;
}

/* "key=value" with a key of [A-Za-z0-9_-.]; splits into key and value. */
static int parse_assignment(const char *a, const char *where, char **ret_key, const char **ret_val,
                            accel_err *err)
{
	const char *eq = strchr(a, '=');
	if (!eq || eq == a)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "%s '%s': expected KEY=VALUE "
		                     "(for example seed=3 or optimizer.params.lr=1e-4)", where, a);
	const char *ks = a, *ke = eq;
	while (ks < ke && (*ks == ' ' || *ks == '\t'))
		ks++;
	while (ke > ks && (ke[-1] == ' ' || ke[-1] == '\t'))
		ke--;
	char *key = strndup(ks, (size_t)(ke - ks));
	if (!key)
		return cfg_nomem(err);
	if (!cfg_valid_path(key)) {
		accelp_err_set(err, ACCEL_ERR_CONFIG, "%s '%s': '%s' is not a key (keys are names of "
		              "[A-Za-z0-9_-] joined by '.', like optimizer.params.lr)", where, a, key);
		free(key);
		return ACCEL_ERR_CONFIG;
	}
	if (!strcmp(key, "deepspeed_config_file")) {
		free(key);
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "%s '%s': deepspeed_config_file is read "
		                     "from a config file only; put it there, or turn the DeepSpeed "
		                     "config into an accel one with `accel config import-deepspeed`",
		                     where, a);
	}
	*ret_key = key;
	*ret_val = eq + 1;
	return ACCEL_OK;
}

int accelp_config_set(accel_config *cfg, const char *assignment, const char *origin,
                     accel_err *err)
{
	char *key = NULL, *src = NULL;
	const char *val;
	if (!cfg || !assignment)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_set: NULL argument");
	int r = parse_assignment(assignment, origin ? origin : "--set", &key, &val, err);
	if (r)
		return r;
	doc *d = NULL;
	src = cfg_strfmt("%s %s", origin ? origin : "--set", assignment);
	r = src ? value_doc(D_SET, src, key, val, &d, err) : cfg_nomem(err);
	free(src);
	free(key);
	return r ? r : add_doc(cfg, d, err);
}

static int load_launch_sets(accel_config *cfg, const char *text, accel_err *err)
{
	int line = 0, r = ACCEL_OK;
	const char *p = text;
	while (*p && !r) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		const char *next = p + n + (nl ? 1 : 0);   /* before n loses a '\r' */
		char *a = strndup(p, n);
		line++;
		if (!a)
			return cfg_nomem(err);
		if (n && a[n - 1] == '\r')
			a[--n] = '\0';
		if (n) {
			char where[64], *key = NULL, *src = NULL;
			const char *val;
			snprintf(where, sizeof(where), "ACCEL_SET line %d", line);
			r = parse_assignment(a, where, &key, &val, err);
			if (!r) {
				doc *d = NULL;
				src = cfg_strfmt("--set %s (accel launch)", a);
				r = src ? value_doc(D_LAUNCH, src, key, val, &d, err) : cfg_nomem(err);
				if (!r)
					r = add_doc(cfg, d, err);
			}
			free(key);
			free(src);
		}
		free(a);
		p = next;
	}
	return r;
}

int accelp_config_load_env(accel_config *cfg, char *const *envp, accel_err *err)
{
	if (!cfg)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_load_env: NULL argument");
	if (!envp)
		envp = environ;
	for (char *const *e = envp; e && *e; e++) {
		const char *s = *e, *eq = strchr(s, '=');
		if (strncmp(s, "ACCEL_", 6) || !eq)
			continue;
		char name[256];
		size_t n = (size_t)(eq - s);
		if (n >= sizeof(name)) {
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "environment variable %.40s... has a name too long to be "
			                     "a config key", s);
		}
		memcpy(name, s, n);
		name[n] = '\0';
		int r;
		if (!strcmp(name, ACCEL_ENV_SET)) {
			if ((r = load_launch_sets(cfg, eq + 1, err)))
				return r;
			continue;
		}
		if (accelp_config_env_reserved(name))
			continue;
		if (!strcmp(name, "ACCEL_DEEPSPEED_CONFIG_FILE"))
			return accelp_err_set(err, ACCEL_ERR_CONFIG, "ACCEL_DEEPSPEED_CONFIG_FILE: "
			                     "deepspeed_config_file is read from a config file only; put "
			                     "it there, or turn the DeepSpeed config into an accel one "
			                     "with `accel config import-deepspeed`");
		if (!eq[1]) {
			accelp_log(ACCEL_LOG_DEBUG, "config: ignoring empty %s", name);
			continue;
		}
		doc *d = NULL;
		if ((r = value_doc(D_ENV, name, NULL, eq + 1, &d, err)) || (r = add_doc(cfg, d, err)))
			return r;
	}
	return ACCEL_OK;
}

const char *accelp_config_find_file(const char **ret_from)
{
	static _Thread_local char buf[PATH_MAX];
	const char *from = NULL, *path = NULL;
	const char *e = getenv(ACCEL_ENV_CONFIG);
	if (e && *e) {
		from = ACCEL_ENV_CONFIG;
		path = e;
	} else if (access("accel.json", F_OK) == 0) {
		from = "./accel.json";
		path = "accel.json";
	} else {
		const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
		if (xdg && xdg[0] == '/') {
			if ((size_t)snprintf(buf, sizeof(buf), "%s/accel/default.json", xdg) < sizeof(buf) &&
			    access(buf, F_OK) == 0) {
				from = "$XDG_CONFIG_HOME/accel/default.json";
				path = buf;
			}
		} else if (home && *home) {
			if ((size_t)snprintf(buf, sizeof(buf), "%s/.config/accel/default.json", home) <
			            sizeof(buf) && access(buf, F_OK) == 0) {
				from = "~/.config/accel/default.json";
				path = buf;
			}
		}
	}
	if (ret_from)
		*ret_from = from;
	return path;
}

/* Finds dotted `path` inside object `obj`, also through members whose names
 * contain dots ({"optimizer.type": ...}); appends position segments. */
static json_t *obj_find(json_t *obj, const char *path, char *pp, size_t ppcap)
{
	const char *k;
	json_t *v;
	if (!json_is_object(obj))
		return NULL;
	size_t base = strlen(pp);
	json_object_foreach(obj, k, v) {
		size_t n = strlen(k);
		if (strncmp(path, k, n) || (path[n] != '\0' && path[n] != '.'))
			continue;
		if (base + n + 2 < ppcap) {
			size_t u = base;
			if (u)
				pp[u++] = PSEP;
			memcpy(pp + u, k, n + 1);
		}
		if (path[n] == '\0')
			return v;
		json_t *r = obj_find(v, path + n + 1, pp, ppcap);
		if (r)
			return r;
		pp[base] = '\0';
	}
	return NULL;
}

static json_t *doc_find(const doc *d, const char *path, const char *env, char *pp, size_t ppcap)
{
	pp[0] = '\0';
	switch (d->kind) {
	case D_FILE:
		return obj_find(d->root, path, pp, ppcap);
	case D_ENV:
		return env && !strcmp(d->name, env) ? d->root : NULL;
	default:
		if (!strcmp(d->prefix, path))
			return d->root;
		if (cfg_path_in(path, d->prefix))
			return obj_find(d->root, path + strlen(d->prefix) + 1, pp, ppcap);
		return NULL;
	}
}

/* The raw value of `path` from the highest layer that has it (or its
 * alias), or the schema default.  ret_doc is NULL for defaults. */
int cfg_raw_find(const accel_config *cfg, const char *path, json_t **ret_v, const doc **ret_doc,
                 char *src, size_t srccap)
{
	char pp[1024];
	return cfg_raw_find_at(cfg, path, ret_v, ret_doc, pp, sizeof(pp), src, srccap);
}

int cfg_raw_find_at(const accel_config *cfg, const char *path, json_t **ret_v,
                    const doc **ret_doc, char *pp, size_t ppcap, char *src, size_t srccap)
{
	static const int order[] = {D_LAUNCH, D_SET, D_ENV, D_FILE};
	int alias = 0;
	long ki = cfg_find_key(cfg, path, &alias);
	const keydef *k = ki >= 0 ? &cfg->keys[ki] : NULL;
	const char *names[2] = {k ? k->key : path, k ? k->alias : NULL};
	char *envs[2] = {cfg_env_name(names[0]), names[1] ? cfg_env_name(names[1]) : NULL};
	int found = 0;

	for (size_t o = 0; o < 4 && !found; o++) {
		for (size_t i = cfg->ndocs; i-- > 0 && !found;) {
			const doc *d = cfg->docs[i];
			if (d->kind != order[o])
				continue;
			for (int a = 0; a < 2 && !found; a++) {
				if (!names[a])
					continue;
				json_t *v = doc_find(d, names[a], envs[a], pp, ppcap);
				if (!v)
					continue;
				found = 1;
				if (json_is_null(v))
					break;   /* explicit null: back to the default */
				*ret_v = v;
				*ret_doc = d;
				cfg_doc_source(d, pp, 0, src, srccap);
				free(envs[0]);
				free(envs[1]);
				return ACCEL_OK;
			}
		}
	}
	free(envs[0]);
	free(envs[1]);
	if (k && k->def) {
		*ret_v = k->def;
		*ret_doc = NULL;
		snprintf(src, srccap, "default");
		return ACCEL_OK;
	}
	return ACCEL_ERR_NOT_FOUND;
}

int accelp_config_peek_string(const accel_config *cfg, const char *path, const char **ret)
{
	json_t *v;
	const doc *d;
	char src[512];
	if (!cfg || !path || !ret)
		return ACCEL_ERR_INVALID_ARG;
	int r = cfg_raw_find(cfg, path, &v, &d, src, sizeof(src));
	if (r)
		return r;
	if (json_is_string(v)) {
		*ret = json_string_value(v);
		return ACCEL_OK;
	}
	if (d && d->raw && v == d->root && !json_is_array(v) && !json_is_object(v)) {
		*ret = d->raw;
		return ACCEL_OK;
	}
	return ACCEL_ERR_CONFIG;
}

int accelp_config_peek_strlist(const accel_config *cfg, const char *path, uint32_t index,
                              const char **ret)
{
	json_t *v;
	const doc *d;
	char src[512];
	if (!cfg || !path || !ret)
		return ACCEL_ERR_INVALID_ARG;
	int r = cfg_raw_find(cfg, path, &v, &d, src, sizeof(src));
	if (r)
		return r;
	if (d && d->split && !d->raw_json && v == d->root)
		v = d->split;
	if (!json_is_array(v))
		return ACCEL_ERR_CONFIG;
	if (index >= json_array_size(v))
		return ACCEL_ERR_NOT_FOUND;
	json_t *e = json_array_get(v, index);
	if (!json_is_string(e))
		return ACCEL_ERR_CONFIG;
	*ret = json_string_value(e);
	return ACCEL_OK;
}


const char *accelp_config_peek_source_at(const accel_config *cfg, const char *path,
                                         uint32_t index)
{
	json_t *v;
	const doc *d;
	char pp[1024];
	if (!cfg || !path)
		return NULL;
	accel_config *mut = (accel_config *)cfg;   /* scratch space, as config_source's */
	if (cfg_raw_find_at(cfg, path, &v, &d, pp, sizeof(pp), mut->peek_src,
	                    sizeof(mut->peek_src)))
		return NULL;
	if (d && d->kind == D_FILE && json_is_array(v) && index < json_array_size(v)) {
		size_t n = strlen(pp);
		if (n + 16 < sizeof(pp)) {
			if (n)
				pp[n++] = PSEP;
			snprintf(pp + n, sizeof(pp) - n, "[%u]", index);
			cfg_doc_source(d, pp, 0, mut->peek_src, sizeof(mut->peek_src));
		}
	}
	return mut->peek_src;
}
