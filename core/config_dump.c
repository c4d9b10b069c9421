/* SPDX-License-Identifier: MIT */
/* core/config_dump.c: the dumps of `accel config show` (text and JSON, with
 * sources). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config-impl.h"

static int dump_wanted(const accel_config *cfg, const keydef *k, int resolved)
{
	return cfg_key_active(cfg, k) && (resolved || cfg_top_setting(k));
}

typedef struct lineset {
	char **lines, **srcs;
	size_t n, cap;
} lineset;

/* Takes ownership of both strings. */
static void lines_add(lineset *ls, char *line, char *src)
{
	if (!line || cfg_grow((void **)&ls->lines, &ls->cap, ls->n + 1, sizeof(*ls->lines))) {
		free(line);
		free(src);
		return;
	}
	char **s2 = realloc(ls->srcs, ls->cap * sizeof(*s2));
	if (!s2) {
		free(line);
		free(src);
		return;
	}
	ls->srcs = s2;
	ls->lines[ls->n] = line;
	ls->srcs[ls->n] = src;
	ls->n++;
}

static void lines_print(FILE *out, const lineset *ls, int show_sources)
{
	size_t width = 0;
	for (size_t i = 0; i < ls->n; i++)
		if (strlen(ls->lines[i]) > width)
			width = strlen(ls->lines[i]);
	if (width > 60)
		width = 60;
	for (size_t i = 0; i < ls->n; i++) {
		if (show_sources && ls->srcs[i])
			fprintf(out, "%-*s  # %s\n", (int)width, ls->lines[i], ls->srcs[i]);
		else
			fprintf(out, "%s\n", ls->lines[i]);
	}
}

static void lines_free(lineset *ls)
{
	for (size_t i = 0; i < ls->n; i++) {
		free(ls->lines[i]);
		free(ls->srcs[i]);
	}
	free(ls->lines);
	free(ls->srcs);
}

/* Leaves of a document, for the raw dump before resolve(). */
static void raw_leaves(lineset *ls, const doc *d, const char *path, const char *ppath, json_t *v)
{
	if (json_is_object(v) && json_object_size(v)) {
		const char *k;
		json_t *m;
		json_object_foreach(v, k, m) {
			char *cp = *path ? cfg_strfmt("%s.%s", path, k) : strdup(k);
			char *cpp = *ppath ? cfg_strfmt("%s%c%s", ppath, PSEP, k) : strdup(k);
			if (cp && cpp)
				raw_leaves(ls, d, cp, cpp, m);
			free(cp);
			free(cpp);
		}
		return;
	}
	char src[1024], *vs = cfg_value_string(v);
	cfg_doc_source(d, ppath, 0, src, sizeof(src));
	lines_add(ls, cfg_strfmt("%s = %s", path, vs ? vs : "?"), strdup(src));
	free(vs);
}

void accelp_config_dump(const accel_config *cfg, FILE *out, int resolved, int show_sources)
{
	static const int order[] = {D_FILE, D_ENV, D_SET, D_LAUNCH};
	lineset ls = {0};
	if (!cfg || !out)
		return;
	if (cfg->resolved) {
		for (size_t i = 0; i < cfg->nkeys; i++) {
			const keydef *k = &cfg->keys[i];
			if (!dump_wanted(cfg, k, resolved))
				continue;
			char *vs = cfg_value_string(k->val);
			lines_add(&ls, cfg_strfmt("%s = %s", k->key, vs ? vs : "?"),
			          cfg_xstrdup(k->src ? k->src : "default (unset)"));
			free(vs);
		}
	} else {
		/* before resolve: the raw layers, lowest first */
		for (size_t o = 0; o < 4; o++) {
			for (size_t i = 0; i < cfg->ndocs; i++) {
				const doc *d = cfg->docs[i];
				if (d->kind != order[o])
					continue;
				if (d->kind == D_ENV)
					lines_add(&ls, cfg_strfmt("%s = %s", d->name, d->raw),
					          cfg_strfmt("env %s", d->name));
				else
					raw_leaves(&ls, d, d->prefix ? d->prefix : "", "", d->root);
			}
		}
	}
	lines_print(out, &ls, show_sources);
	lines_free(&ls);
}

static void emit_json(FILE *out, const json_t *v, int indent)
{
	if (json_is_object(v) && json_object_size(v)) {
		const char *k;
		json_t *m;
		size_t i = 0;
		fputs("{\n", out);
		json_object_foreach((json_t *)v, k, m) {
			json_t *ks = json_string(k);
			char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
			fprintf(out, "%s%*s%s: ", i++ ? ",\n" : "", indent + 2, "", kj ? kj : "\"?\"");
			free(kj);
			json_decref(ks);
			emit_json(out, m, indent + 2);
		}
		fprintf(out, "\n%*s}", indent, "");
	} else {
		cfg_fput_value(out, v);
	}
}

int accelp_config_dump_json(const accel_config *cfg, FILE *out, int resolved, int show_sources)
{
	int r = ACCEL_OK;
	if (!cfg || !out)
		return ACCEL_ERR_INVALID_ARG;
	if (!cfg->resolved)
		return ACCEL_ERR_STATE;
	json_t *tree = json_object(), *srcs = json_object();
	if (!tree || !srcs) {
		r = ACCEL_ERR_NOMEM;
		goto fail;
	}
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const keydef *k = &cfg->keys[i];
		if (!dump_wanted(cfg, k, resolved))
			continue;
		json_t *node = tree;
		char *path = strdup(k->key), *save = NULL;
		if (!path) {
			r = ACCEL_ERR_NOMEM;
			goto fail;
		}
		char *seg = strtok_r(path, ".", &save);
		while (seg) {
			char *next = strtok_r(NULL, ".", &save);
			if (!next) {
				json_object_set_new(node, seg, k->val ? json_incref(k->val) : json_null());
			} else {
				json_t *child = json_object_get(node, seg);
				if (!json_is_object(child)) {
					child = json_object();
					json_object_set_new(node, seg, child);
				}
				node = child;
			}
			seg = next;
		}
		free(path);
		json_object_set_new(srcs, k->key, json_string(k->src ? k->src : "default (unset)"));
	}
	if (show_sources) {
		json_t *both = json_pack("{s:O,s:O}", "config", tree, "sources", srcs);
		if (!both) {
			r = ACCEL_ERR_NOMEM;
			goto fail;
		}
		emit_json(out, both, 0);
		json_decref(both);
	} else {
		json_t *one = json_pack("{s:O}", "config", tree);
		if (!one) {
			r = ACCEL_ERR_NOMEM;
			goto fail;
		}
		emit_json(out, one, 0);
		json_decref(one);
	}
	fputc('\n', out);
fail:
	json_decref(tree);
	json_decref(srcs);
	return r;
}

