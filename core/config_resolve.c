/* SPDX-License-Identifier: MIT */
/* core/config_resolve.c: resolution: the documents walked in layer order, each value
 * matched to a declared key and normalized, the highest layer winning;
 * cross-key checks; the typed getters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config-impl.h"

extern char **environ;

typedef struct walker {
	accel_config *cfg;
	const doc *d;
	int layer;
	accel_err *err;
} walker;

/* "strategy is 'ddp' (default) and plugins is [] (default)" */
static void selection_text(const accel_config *cfg, int backend, char *buf, size_t cap)
{
	static const char *const sel_keys[] = {"strategy", "plugins", "backend"};
	size_t used = 0;
	buf[0] = '\0';
	for (int i = backend ? 2 : 0; i < (backend ? 3 : 2); i++) {
		json_t *v;
		const doc *d;
		char src[512], *vs = NULL;
		if (cfg_raw_find(cfg, sel_keys[i], &v, &d, src, sizeof(src)))
			continue;
		if (d && d->split && !d->raw_json && !strcmp(sel_keys[i], "plugins"))
			v = d->split;
		if (json_is_string(v))
			vs = cfg_strfmt("'%s'", json_string_value(v));
		else
			vs = cfg_value_string(v);
		if (used < cap)
			used += (size_t)snprintf(buf + used, cap - used, "%s%s is %s (%s)",
			                         used ? " and " : "", sel_keys[i], vs ? vs : "?", src);
		free(vs);
	}
}

static int err_unselected(walker *w, long si, const char *src)
{
	const cfg_section *s = &w->cfg->secs[si];
	char sel[1024];
	selection_text(w->cfg, s->backend, sel, sizeof(sel));
	return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
	                     "section '%s' (%s %s) is set at %s but %s; select %s or remove "
	                     "the section", s->name, s->backend ? "backend" : "plugin", s->owner,
	                     src, sel, s->owner);
}

static int err_unknown(walker *w, const char *path, const char *src)
{
	char sug[256], kids[512];
	if (cfg_suggest_key(w->cfg, path, sug, sizeof(sug)))
		return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
		                     "unknown key '%s' at %s; did you mean '%s'?", path, src, sug);
	const char *dot = strrchr(path, '.');
	if (dot) {
		char parent[256];
		snprintf(parent, sizeof(parent), "%.*s", (int)(dot - path), path);
		if (cfg_is_group(w->cfg, parent)) {
			cfg_list_children(w->cfg, parent, kids, sizeof(kids));
			return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
			                     "unknown key '%s' at %s; '%s' has: %s", path, src, parent,
			                     kids);
		}
	}
	return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
	                     "unknown key '%s' at %s (not a core key, and no registered plugin "
	                     "declares it; see docs/config.md and `accel plugins list`)", path, src);
}

static int assign(walker *w, long ki, int alias, json_t *v, const char *ppath, const char *src)
{
	keydef *k = &w->cfg->keys[ki];
	const char *shown = alias ? k->alias : k->key;
	vsrc vs = {.d = w->d, .ppath = ppath, .text = src};
	json_t *nv = NULL;
	int r = cfg_normalize(k, shown, v, &vs, &nv, w->err);
	if (r)
		return r;
	setting *s = &k->set[w->layer];
	if (s->val) {
		if (s->doc == w->d && s->alias == alias) {
			json_decref(nv);
			return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
			                     "key '%s' is given twice in %s: at %s and at %s", shown,
			                     w->d->name, s->src, src);
		}
		if (s->alias != alias && !json_equal(s->val, nv)) {
			char a[128], b[128];
			cfg_describe(s->val, a, sizeof(a));
			cfg_describe(nv, b, sizeof(b));
			r = accelp_err_set(w->err, ACCEL_ERR_CONFIG,
			                  "'%s' = %s at %s and '%s' = %s at %s set the same thing (%s is an "
			                  "alias of %s) to different values; keep one",
			                  s->alias ? k->alias : k->key, a, s->src, shown, b, src, k->alias,
			                  k->key);
			json_decref(nv);
			return r;
		}
		cfg_setting_clear(s);
	}
	s->val = nv;
	s->src = strdup(src);
	s->doc = w->d;
	s->alias = alias;
	if (!s->src)
		return cfg_nomem(w->err);
	return ACCEL_OK;
}

static int errs_report(const accel_config *cfg, accel_err *err);

static void errs_clear(accel_config *cfg)
{
	for (uint32_t i = 0; i < cfg->nerrs; i++)
		free(cfg->errs[i]);
	cfg->nerrs = 0;
	cfg->errs_more = 0;
}

/* A problem with one member is recorded and the walk goes on, so that a
 * user fixing a config sees every bad key at once; only running out of
 * memory stops it. */
static int keep(walker *w, int r)
{
	accel_config *cfg = w->cfg;
	if (r == ACCEL_OK || r == ACCEL_ERR_NOMEM)
		return r;
	if (cfg->nerrs < ACCEL_CONFIG_ERRORS_MAX) {
		char *m = strdup(w->err->code ? w->err->msg : "invalid value");
		if (!m)
			return ACCEL_ERR_NOMEM;
		cfg->errs[cfg->nerrs++] = m;
	} else {
		cfg->errs_more++;
	}
	accelp_err_clear(w->err);
	return ACCEL_OK;
}

int accelp_config_error_add(accel_config *cfg, const char *msg)
{
	if (!cfg || !msg)
		return ACCEL_ERR_INVALID_ARG;
	if (cfg->nerrs >= ACCEL_CONFIG_ERRORS_MAX) {
		cfg->errs_more++;
		return ACCEL_OK;
	}
	if (!(cfg->errs[cfg->nerrs] = strdup(msg)))
		return ACCEL_ERR_NOMEM;
	cfg->nerrs++;
	return ACCEL_OK;
}

int accelp_config_error_report(const accel_config *cfg, accel_err *err)
{
	if (!cfg || !cfg->nerrs)
		return ACCEL_OK;
	return errs_report(cfg, err);
}

/* The first problem, then the others as far as they fit. */
static int errs_report(const accel_config *cfg, accel_err *err)
{
	char msg[ACCEL_ERRMSG_MAX];
	size_t used = (size_t)snprintf(msg, sizeof(msg), "%s", cfg->errs[0]);
	uint32_t shown = 1;
	for (uint32_t i = 1; i < cfg->nerrs; i++) {
		size_t n = strlen(cfg->errs[i]);
		/* room for this one and a closing "(and N more)" */
		if (used + 8 + n + 40 >= sizeof(msg))
			break;
		used += (size_t)snprintf(msg + used, sizeof(msg) - used, "; also: %s", cfg->errs[i]);
		shown++;
	}
	uint32_t rest = cfg->nerrs - shown + cfg->errs_more;
	if (rest && used < sizeof(msg))
		snprintf(msg + used, sizeof(msg) - used, " (and %u more problem%s; `accel config "
		         "validate` lists them)", rest, rest == 1 ? "" : "s");
	return accelp_err_set(err, ACCEL_ERR_CONFIG, "%s", msg);
}

uint32_t accelp_config_error_count(const accel_config *cfg)
{
	return cfg ? cfg->nerrs : 0;
}

const char *accelp_config_error_get(const accel_config *cfg, uint32_t i)
{
	return cfg && i < cfg->nerrs ? cfg->errs[i] : NULL;
}

uint32_t accelp_config_error_more(const accel_config *cfg)
{
	return cfg ? cfg->errs_more : 0;
}

/* One member of a document: `path` is dotted, `ppath` its position path. */
static int walk(walker *w, const char *path, const char *ppath, json_t *v)
{
	char src[1024];
	int alias = 0;
	long si = *path ? cfg_find_section(w->cfg, path) : -1;
	if (si >= 0 && !w->cfg->secs[si].selected) {
		cfg_doc_source(w->d, ppath, 1, src, sizeof(src));
		return err_unselected(w, si, src);
	}
	long ki = *path ? cfg_find_key(w->cfg, path, &alias) : -1;
	if (ki >= 0) {
		cfg_doc_source(w->d, ppath, 0, src, sizeof(src));
		return assign(w, ki, alias, v, ppath, src);
	}
	if (!cfg_is_group(w->cfg, path)) {
		cfg_doc_source(w->d, ppath, 1, src, sizeof(src));
		return err_unknown(w, path, src);
	}
	if (!json_is_object(v)) {
		char got[128], kids[512];
		cfg_doc_source(w->d, ppath, 0, src, sizeof(src));
		cfg_describe(v, got, sizeof(got));
		cfg_list_children(w->cfg, path, kids, sizeof(kids));
		return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
		                     "invalid value for '%s' at %s: it is a group of settings (%s), so "
		                     "expected an object, got %s", path, src, kids, got);
	}
	const char *k;
	json_t *m;
	json_object_foreach(v, k, m) {
		char *cp = *path ? cfg_strfmt("%s.%s", path, k) : strdup(k);
		char *cpp = *ppath ? cfg_strfmt("%s%c%s", ppath, PSEP, k) : strdup(k);
		int r = (cp && cpp) ? ACCEL_OK : cfg_nomem(w->err);
		/* "" would name the group it is in ({"": {...}} the root), and
		 * "a..b" or "a." no key at all */
		size_t kl = strlen(k);
		if (!r && (!kl || k[0] == '.' || k[kl - 1] == '.' || strstr(k, ".."))) {
			cfg_doc_source(w->d, cpp, 0, src, sizeof(src));
			r = accelp_err_set(w->err, ACCEL_ERR_CONFIG,
			                  kl ? "invalid key '%s' at %s: a dotted key has an empty part"
			                     : "empty key%s at %s: every setting has a name",
			                  k, src);
		}
		if (!r)
			r = walk(w, cp, cpp, m);
		free(cp);
		free(cpp);
		if ((r = keep(w, r)))
			return r;
	}
	return ACCEL_OK;
}

static int walk_env(walker *w)
{
	const doc *d = w->d;
	char src[300];
	int alias = 0;
	snprintf(src, sizeof(src), "env %s", d->name);
	long ki = cfg_find_env(w->cfg, d->name, &alias);
	if (ki >= 0) {
		const keydef *k = &w->cfg->keys[ki];
		if (k->section >= 0 && !w->cfg->secs[k->section].selected)
			return err_unselected(w, k->section, src);
		return assign(w, ki, alias, d->root, NULL, src);
	}
	/* guess the key it was meant to be */
	size_t best = SIZE_MAX, lim = cfg_max_distance(d->name + 6);
	long bi = -1;
	int balias = 0;
	for (size_t i = 0; i < w->cfg->nkeys; i++) {
		const keydef *k = &w->cfg->keys[i];
		size_t a = cfg_edit_distance(d->name, k->env);
		size_t b = k->alias_env ? cfg_edit_distance(d->name, k->alias_env) : SIZE_MAX;
		if (a <= lim && a < best)
			best = a, bi = (long)i, balias = 0;
		if (b <= lim && b < best)
			best = b, bi = (long)i, balias = 1;
	}
	char guess[256];
	size_t n = strlen(d->name + 6);
	snprintf(guess, sizeof(guess), "%s", d->name + 6);
	for (size_t i = 0; i < n && i < sizeof(guess); i++)
		if (guess[i] >= 'A' && guess[i] <= 'Z')
			guess[i] = (char)(guess[i] + 32);
	if (bi >= 0) {
		const keydef *k = &w->cfg->keys[bi];
		return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
		                     "unknown key '%s' at %s; did you mean '%s' (%s)? (ACCEL_* "
		                     "variables set config keys; see docs/config.md)", guess, src,
		                     balias ? k->alias : k->key, balias ? k->alias_env : k->env);
	}
	return accelp_err_set(w->err, ACCEL_ERR_CONFIG,
	                     "unknown key '%s' at %s: no config key has this environment name "
	                     "(ACCEL_* variables set config keys, '.' written as '_'; see "
	                     "docs/config.md)", guess, src);
}

static int layer_of(int kind)
{
	return kind == D_FILE ? LY_FILE : kind == D_ENV ? LY_ENV : LY_SET;
}

/* The setting of the highest layer, or NULL. */
const setting *cfg_top_setting(const keydef *k)
{
	for (int l = LY_COUNT - 1; l > LY_DEFAULT; l--)
		if (k->set[l].val)
			return &k->set[l];
	return NULL;
}

/* Given by the user with a value (not only null). */
static int user_set(const keydef *k)
{
	const setting *s = cfg_top_setting(k);
	return s && !json_is_null(s->val);
}

/* Given by the user with a value other than the default: a key that would
 * be ignored is only an error then ("momentum": 0 with adamw changes
 * nothing, and a full dump must load back). */
static int user_changed(const keydef *k)
{
	return user_set(k) && !(k->def && json_equal(k->val, k->def));
}

static keydef *key_at(accel_config *cfg, const char *path)
{
	long i = cfg_find_key(cfg, path, NULL);
	return i >= 0 ? &cfg->keys[i] : NULL;
}

static int finalize(accel_config *cfg, accel_err *err)
{
	for (size_t i = 0; i < cfg->nkeys; i++) {
		keydef *k = &cfg->keys[i];
		json_decref(k->val);
		free(k->src);
		k->val = NULL;
		k->src = NULL;
		if (!cfg_key_active(cfg, k))
			continue;
		const setting *s = cfg_top_setting(k);
		if (s && !json_is_null(s->val)) {
			k->val = json_incref(s->val);
			k->src = strdup(s->src);
		} else if (k->def) {
			k->val = json_incref(k->def);
			k->src = s ? cfg_strfmt("default (null at %s)", s->src) : strdup("default");
		} else if (s) {
			k->src = cfg_strfmt("unset (null at %s)", s->src);
			if (!k->src)
				return cfg_nomem(err);
		}
		if (k->val && !k->src)
			return cfg_nomem(err);
	}
	/* torch.optim.SGD's weight_decay default is 0, AdamW's 0.01 */
	keydef *type = key_at(cfg, "optimizer.type"), *wd = key_at(cfg, "optimizer.params.weight_decay");
	if (type && wd && type->val && !strcmp(json_string_value(type->val), "sgd") && !user_set(wd)) {
		json_decref(wd->val);
		free(wd->src);
		wd->val = json_real(0.0);
		wd->src = strdup("default for sgd");
		if (!wd->val || !wd->src)
			return cfg_nomem(err);
	}
	return ACCEL_OK;
}

static const char *sval(const keydef *k)
{
	return k && json_is_string(k->val) ? json_string_value(k->val) : "";
}

static double dval(const keydef *k)
{
	return k && json_is_number(k->val) ? json_number_value(k->val) : 0.0;
}

/* Settings that only make sense together.  A key that would be ignored
 * under the chosen type is an error, never silently dropped. */
static int cross_check(accel_config *cfg, accel_err *err)
{
	keydef *st = key_at(cfg, "scheduler.type"), *tot = key_at(cfg, "scheduler.total_steps");
	keydef *wu = key_at(cfg, "scheduler.warmup_steps"), *mlr = key_at(cfg, "scheduler.min_lr");
	keydef *lr = key_at(cfg, "optimizer.params.lr"), *ot = key_at(cfg, "optimizer.type");
	const char *stype = sval(st), *otype = sval(ot);
	char a[64], b[64];

	if (!strcmp(stype, "linear") || !strcmp(stype, "cosine")) {
		if (dval(tot) <= 0)
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "scheduler.type is '%s' (%s) but scheduler.total_steps is "
			                     "%g (%s); set scheduler.total_steps to the number of "
			                     "optimizer steps of the run", stype, st->src, dval(tot),
			                     tot->src);
		if (dval(wu) > dval(tot))
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "scheduler.warmup_steps (%g, %s) exceeds "
			                     "scheduler.total_steps (%g, %s)", dval(wu), wu->src,
			                     dval(tot), tot->src);
		if (dval(mlr) > dval(lr)) {
			cfg_fmt_num(dval(mlr), a, sizeof(a));
			cfg_fmt_num(dval(lr), b, sizeof(b));
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "scheduler.min_lr (%s, %s) is larger than "
			                     "optimizer.params.lr (%s, %s)", a, mlr->src, b, lr->src);
		}
	} else if (user_changed(mlr)) {
		cfg_fmt_num(dval(mlr), a, sizeof(a));
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "scheduler.min_lr is set to %s at %s but scheduler.type is '%s' "
		                     "(%s), which does not decay; use linear or cosine, or remove min_lr",
		                     a, mlr->src, stype, st->src);
	}

	static const char *const sgd_only[] = {"optimizer.params.momentum",
	                                       "optimizer.params.dampening",
	                                       "optimizer.params.nesterov"};
	static const char *const adamw_only[] = {"optimizer.params.betas", "optimizer.params.eps"};
	int sgd = !strcmp(otype, "sgd");
	const char *const *other = sgd ? adamw_only : sgd_only;
	size_t n_other = sgd ? 2 : 3;
	for (size_t i = 0; i < n_other; i++) {
		keydef *k = key_at(cfg, other[i]);
		if (k && user_changed(k)) {
			char *v = cfg_value_string(k->val);
			int r = accelp_err_set(err, ACCEL_ERR_CONFIG,
			                      "%s is set to %s at %s but optimizer.type is '%s' (%s), which "
			                      "does not use it; remove it or change optimizer.type", k->key,
			                      v ? v : "?", k->src, otype, ot->src);
			free(v);
			return r;
		}
	}
	if (sgd) {
		keydef *nes = key_at(cfg, "optimizer.params.nesterov");
		keydef *mom = key_at(cfg, "optimizer.params.momentum");
		keydef *dmp = key_at(cfg, "optimizer.params.dampening");
		if (nes && json_is_true(nes->val) && (dval(mom) <= 0 || dval(dmp) != 0))
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "optimizer.params.nesterov (%s) needs momentum > 0 and "
			                     "dampening 0; momentum is %g (%s), dampening %g (%s)",
			                     nes->src, dval(mom), mom->src, dval(dmp), dmp->src);
	}
	return ACCEL_OK;
}

int accelp_config_resolve(accel_config *cfg, accel_err *err)
{
	static const int order[] = {D_FILE, D_ENV, D_SET, D_LAUNCH};
	int r = ACCEL_OK;
	if (!cfg)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_resolve: NULL config");
	cfg->resolved = 0;
	errs_clear(cfg);
	accel_err scratch;
	accelp_err_clear(&scratch);
	for (size_t i = 0; i < cfg->nkeys; i++)
		for (int l = 0; l < LY_COUNT; l++)
			cfg_setting_clear(&cfg->keys[i].set[l]);
	for (size_t o = 0; o < 4; o++) {
		for (size_t i = 0; i < cfg->ndocs; i++) {
			const doc *d = cfg->docs[i];
			if (d->kind != order[o])
				continue;
			walker w = {.cfg = cfg, .d = d, .layer = layer_of(d->kind), .err = &scratch};
			if (d->kind == D_ENV)
				r = walk_env(&w);
			else if (d->kind == D_FILE)
				r = walk(&w, "", "", d->root);
			else
				r = walk(&w, d->prefix, "", d->root);
			if ((r = keep(&w, r)))
				return r == ACCEL_ERR_NOMEM ? cfg_nomem(err) : r;
		}
	}
	if (cfg->nerrs)
		return errs_report(cfg, err);
	if ((r = finalize(cfg, err)) || (r = cross_check(cfg, err)))
		return r;
	cfg->resolved = 1;
	return ACCEL_OK;
}

static int get_key(const accel_config *cfg, const char *path, const void *ret, const keydef **rk)
{
	if (!cfg || !path || !ret)
		return ACCEL_ERR_INVALID_ARG;
	if (!cfg->resolved)
		return ACCEL_ERR_STATE;
	long i = cfg_find_key(cfg, path, NULL);
	if (i < 0 || !cfg_key_active(cfg, &cfg->keys[i]) || !cfg->keys[i].val)
		return ACCEL_ERR_NOT_FOUND;
	*rk = &cfg->keys[i];
	return ACCEL_OK;
}

int accelp_config_get_bool(const accel_config *cfg, const char *path, int32_t *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_BOOL)
		return ACCEL_ERR_CONFIG;
	*ret = json_is_true(k->val);
	return ACCEL_OK;
}

int accelp_config_get_int(const accel_config *cfg, const char *path, int64_t *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_INT)
		return ACCEL_ERR_CONFIG;
	*ret = (int64_t)json_integer_value(k->val);
	return ACCEL_OK;
}

int accelp_config_get_double(const accel_config *cfg, const char *path, double *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_DOUBLE && k->type != ACCEL_CFG_INT)
		return ACCEL_ERR_CONFIG;
	*ret = json_number_value(k->val);
	return ACCEL_OK;
}

int accelp_config_get_string(const accel_config *cfg, const char *path, const char **ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_STRING && k->type != ACCEL_CFG_ENUM)
		return ACCEL_ERR_CONFIG;
	*ret = json_string_value(k->val);
	return ACCEL_OK;
}

int accelp_config_get_strlist(const accel_config *cfg, const char *path, uint32_t index,
                             const char **ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_STRLIST)
		return ACCEL_ERR_CONFIG;
	if (index >= json_array_size(k->val))
		return ACCEL_ERR_NOT_FOUND;
	*ret = json_string_value(json_array_get(k->val, index));
	return ACCEL_OK;
}

int accelp_config_get_dbllist(const accel_config *cfg, const char *path, uint32_t index,
                             double *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != T_DBLLIST)
		return ACCEL_ERR_CONFIG;
	if (index >= json_array_size(k->val))
		return ACCEL_ERR_NOT_FOUND;
	*ret = json_number_value(json_array_get(k->val, index));
	return ACCEL_OK;
}

int accelp_config_get_count(const accel_config *cfg, const char *path, uint32_t *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != T_DBLLIST && k->type != ACCEL_CFG_STRLIST)
		return ACCEL_ERR_CONFIG;
	*ret = (uint32_t)json_array_size(k->val);
	return ACCEL_OK;
}

const char *accelp_config_source(const accel_config *cfg, const char *path)
{
	if (!cfg || !path)
		return NULL;
	if (!cfg->resolved) {
		/* the source of what peek_* sees; the buffer is scratch space, not
		 * part of the configuration's value */
		json_t *v;
		const doc *d;
		accel_config *mut = (accel_config *)cfg;
		if (cfg_raw_find(cfg, path, &v, &d, mut->peek_src, sizeof(mut->peek_src)))
			return NULL;
		return mut->peek_src;
	}
	long i = cfg_find_key(cfg, path, NULL);
	if (i < 0 || !cfg_key_active(cfg, &cfg->keys[i]) || !cfg->keys[i].val)
		return NULL;
	return cfg->keys[i].src;
}

