/* SPDX-License-Identifier: MIT */
/* core/config_import.c: the builder that imports share (config_import.h):
 * the accel config being built and the lists of what was mapped, what
 * "auto" became and what is not supported. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-impl.h"
#include "config_import.h"

int accelp_import_init(accelp_import *imp, const accel_config *schemas, accel_err *err)
{
	memset(imp, 0, sizeof(*imp));
	imp->config = json_object();
	imp->mapped = json_array();
	imp->autos = json_array();
	imp->unsupported = json_array();
	imp->launch = json_array();
	snprintf(imp->strategy, sizeof(imp->strategy), "ddp");
	snprintf(imp->strategy_why, sizeof(imp->strategy_why), "the default");
	imp->schemas = schemas;
	if (!imp->config || !imp->mapped || !imp->autos || !imp->unsupported || !imp->launch) {
		accelp_import_fini(imp);
		return cfg_nomem(err);
	}
	int r = accelp_config_new(&imp->core, err);
	if (r)
		accelp_import_fini(imp);
	return r;
}

void accelp_import_fini(accelp_import *imp)
{
	if (!imp)
		return;
	json_decref(imp->config);
	json_decref(imp->mapped);
	json_decref(imp->autos);
	json_decref(imp->unsupported);
	json_decref(imp->launch);
	accelp_config_free(imp->core);
	memset(imp, 0, sizeof(*imp));
}

void accelp_import_note(json_t *list, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	json_array_append_new(list, json_string(buf));
}

/* The object holding dotted `key`'s last part, created as needed. */
static json_t *parent_of(json_t *root, const char *key, const char **ret_last)
{
	json_t *o = root;
	const char *p = key, *dot;
	while ((dot = strchr(p, '.'))) {
		char seg[256];
		size_t n = (size_t)(dot - p);
		if (n >= sizeof(seg))
			return NULL;
		memcpy(seg, p, n);
		seg[n] = '\0';
		json_t *c = json_object_get(o, seg);
		if (!json_is_object(c)) {
			c = json_object();
			if (!c || json_object_set_new(o, seg, c))
				return NULL;
		}
		o = c;
		p = dot + 1;
	}
	*ret_last = p;
	return o;
}

int accelp_import_put(accelp_import *imp, const char *from, const char *key, json_t *v)
{
	const char *last;
	json_t *o = v ? parent_of(imp->config, key, &last) : NULL;
	if (!o || json_object_set(o, last, v)) {
		json_decref(v);
		return ACCEL_ERR_NOMEM;
	}
	char *s = cfg_value_string(v);
	if (!strcmp(from, key))
		accelp_import_note(imp->mapped, "%s = %s", key, s ? s : "?");
	else
		accelp_import_note(imp->mapped, "%s -> %s = %s", from, key, s ? s : "?");
	free(s);
	json_decref(v);
	return ACCEL_OK;
}

/* The declared key `key` in the installed schemas, else the core's. */
static const keydef *find_def(const accelp_import *imp, const char *key)
{
	long i;
	if (imp->schemas && (i = cfg_find_key(imp->schemas, key, NULL)) >= 0)
		return &imp->schemas->keys[i];
	if (imp->core && (i = cfg_find_key(imp->core, key, NULL)) >= 0)
		return &imp->core->keys[i];
	return NULL;
}

void accelp_import_auto(accelp_import *imp, const char *from, const char *key)
{
	const keydef *k = find_def(imp, key);
	long sec = imp->schemas ? cfg_find_section(imp->schemas, key) : -1;
	if (k && k->def) {
		char *s = cfg_value_string(k->def);
		accelp_import_note(imp->autos, "%s: \"auto\" -> %s (%s's default for %s)", from,
		                   s ? s : "?", k->section >= 0 && imp->schemas
		                                   ? imp->schemas->secs[k->section].owner : "accel",
		                   key);
		free(s);
	} else if (k) {
		accelp_import_note(imp->autos, "%s: \"auto\" -> unset (%s has no default: %s)", from,
		                   key, k->help ? k->help : "");
	} else if (sec >= 0) {
		accelp_import_note(imp->autos, "%s: \"auto\" -> unset (plugin %s declares no key %s)",
		                   from, imp->schemas->secs[sec].owner, key);
	} else {
		accelp_import_note(imp->autos,
		                   "%s: \"auto\" -> left out (%s: the default of the plugin that "
		                   "reads it, which is not installed here)", from, key);
	}
}

void accelp_import_strategy(accelp_import *imp, const char *name, const char *why, ...)
{
	va_list ap;
	snprintf(imp->strategy, sizeof(imp->strategy), "%s", name);
	va_start(ap, why);
	vsnprintf(imp->strategy_why, sizeof(imp->strategy_why), why, ap);
	va_end(ap);
}

int accelp_import_section_value(accelp_import *imp, const char *from, const char *section,
                                const char *key, json_t *v)
{
	char full[512], sub[512];
	snprintf(full, sizeof(full), "%s.%s", section, key);
	if (json_is_object(v) && json_object_size(v)) {
		const char *k;
		json_t *e;
		json_object_foreach(v, k, e) {
			snprintf(sub, sizeof(sub), "%s.%s", from, k);
			char sk[512];
			snprintf(sk, sizeof(sk), "%s.%s", key, k);
			int r = accelp_import_section_value(imp, sub, section, sk, e);
			if (r)
				return r;
		}
		return ACCEL_OK;
	}
	long sec = imp->schemas ? cfg_find_section(imp->schemas, full) : -1;
	int declared = sec >= 0 && cfg_find_key(imp->schemas, full, NULL) >= 0;
	if (sec >= 0 && !declared) {
		char *s = cfg_value_string(v);
		accelp_import_note(imp->unsupported, "%s = %s: the installed plugin %s has no key %s",
		                   from, s ? s : "?", imp->schemas->secs[sec].owner, full);
		free(s);
		return ACCEL_OK;
	}
	if (json_is_string(v) && !strcmp(json_string_value(v), "auto")) {
		accelp_import_auto(imp, from, full);
		return ACCEL_OK;
	}
	return accelp_import_put(imp, from, full, json_incref(v));
}

json_t *accelp_import_comment(const accelp_import *imp, const char *header)
{
	json_t *c = json_array();
	size_t i;
	json_t *e;
	if (!c)
		return NULL;
	json_array_append_new(c, json_string(header));
	char buf[512];
	snprintf(buf, sizeof(buf), "strategy %s: %s", imp->strategy, imp->strategy_why);
	json_array_append_new(c, json_string(buf));
	json_array_foreach(imp->autos, i, e) {
		snprintf(buf, sizeof(buf), "auto: %s", json_string_value(e));
		json_array_append_new(c, json_string(buf));
	}
	json_array_foreach(imp->unsupported, i, e) {
		snprintf(buf, sizeof(buf), "not supported, left out: %s", json_string_value(e));
		json_array_append_new(c, json_string(buf));
	}
	json_array_foreach(imp->launch, i, e) {
		snprintf(buf, sizeof(buf), "for accel launch: %s", json_string_value(e));
		json_array_append_new(c, json_string(buf));
	}
	return c;
}
