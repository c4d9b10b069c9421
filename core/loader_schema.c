/* SPDX-License-Identifier: MIT */
/* core/loader_schema.c: a module's parameter schema, copied into this
 * core's layout and checked entry by entry (key, type, range, choices,
 * default) before the config layer or `accel plugins info` reads it. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader-impl.h"

#define SCHEMA_MAX_PARAMS 4096

int accelp_loader_schema_key_ok(const char *s)
{
	size_t seg = 0, n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		if (c == '.') {
			if (seg == 0)
				return 0;
			seg = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return 0;
		seg++;
	}
	return seg > 0 && n <= 255;
}

static int choice_in(const char *choices, const char *v)
{
	size_t vl = strlen(v);
	for (const char *p = choices; *p;) {
		const char *bar = strchr(p, '|');
		size_t l = bar ? (size_t)(bar - p) : strlen(p);
		if (l == vl && !strncmp(p, v, l))
			return 1;
		if (!bar)
			break;
		p = bar + 1;
	}
	return 0;
}

/* Checks one normalized schema entry; 0 or -1 with the cause in why. */
static int schema_entry_check(const accel_param_schema_v1 *p, char *why, size_t cap)
{
	char b1[96];
	if (p->type < ACCEL_CFG_BOOL || p->type > ACCEL_CFG_STRLIST) {
		snprintf(why, cap, "unknown type %u", p->type);
		return -1;
	}
	if (isnan(p->min) || isnan(p->max)) {
		snprintf(why, cap, "min or max is NaN");
		return -1;
	}
	if (p->type == ACCEL_CFG_INT && p->min <= p->max &&
	    ((isfinite(p->min) && p->min != floor(p->min)) ||
	     (isfinite(p->max) && p->max != floor(p->max)))) {
		snprintf(why, cap, "integer key with the range [%g, %g]; its bounds must be integers "
		         "(or infinite)", p->min, p->max);
		return -1;
	}
	if (p->type == ACCEL_CFG_ENUM) {
		if (!p->choices || !*p->choices) {
			snprintf(why, cap, "enum without choices");
			return -1;
		}
		/* No empty alternatives ("a||b", "a|") and no repeats. */
		for (const char *c = p->choices; *c;) {
			const char *bar = strchr(c, '|');
			size_t l = bar ? (size_t)(bar - c) : strlen(c);
			if (l == 0 || (bar && bar[1] == '\0')) {
				snprintf(why, cap, "choices \"%s\" has an empty alternative",
				         accelp_loader_shown(p->choices, b1, sizeof(b1)));
				return -1;
			}
			for (const char *d = c + l + (bar ? 1 : 0); bar && *d;) {
				const char *bar2 = strchr(d, '|');
				size_t l2 = bar2 ? (size_t)(bar2 - d) : strlen(d);
				if (l2 == l && !strncmp(c, d, l)) {
					snprintf(why, cap, "choices \"%s\" lists \"%.*s\" twice",
					         accelp_loader_shown(p->choices, b1, sizeof(b1)), (int)l, c);
					return -1;
				}
				if (!bar2)
					break;
				d = bar2 + 1;
			}
			if (!bar)
				break;
			c = bar + 1;
		}
	}
	if (!p->default_json)
		return 0;
	json_error_t jerr;
	json_t *v = json_loads(p->default_json, JSON_DECODE_ANY, &jerr);
	if (!v) {
		snprintf(why, cap, "default '%s' is not valid JSON (%s)",
		         accelp_loader_shown(p->default_json, b1, sizeof(b1)), jerr.text);
		return -1;
	}
	const char *want = NULL;
	int range = p->min <= p->max;
	switch (p->type) {
	case ACCEL_CFG_BOOL:
		if (!json_is_boolean(v))
			want = "true or false";
		break;
	case ACCEL_CFG_INT:
		if (!json_is_integer(v))
			want = "an integer";
		else if (range && ((double)json_integer_value(v) < p->min ||
		                   (double)json_integer_value(v) > p->max)) {
			snprintf(why, cap, "default %s is outside its range [%g, %g]",
			         accelp_loader_shown(p->default_json, b1, sizeof(b1)), p->min, p->max);
			json_decref(v);
			return -1;
		}
		break;
	case ACCEL_CFG_DOUBLE:
		if (!json_is_number(v))
			want = "a number";
		else if (range && (json_number_value(v) < p->min || json_number_value(v) > p->max)) {
			snprintf(why, cap, "default %s is outside its range [%g, %g]",
			         accelp_loader_shown(p->default_json, b1, sizeof(b1)), p->min, p->max);
			json_decref(v);
			return -1;
		}
		break;
	case ACCEL_CFG_STRING:
		if (!json_is_string(v))
			want = "a JSON string";
		break;
	case ACCEL_CFG_ENUM:
		if (!json_is_string(v)) {
			want = "a JSON string";
		} else if (!choice_in(p->choices, json_string_value(v))) {
			char b2[96];
			snprintf(why, cap, "default %s is not one of \"%s\"",
			         accelp_loader_shown(p->default_json, b1, sizeof(b1)),
			         accelp_loader_shown(p->choices, b2, sizeof(b2)));
			json_decref(v);
			return -1;
		}
		break;
	case ACCEL_CFG_STRLIST:
		if (!json_is_array(v)) {
			want = "a JSON array of strings";
		} else {
			for (size_t i = 0; i < json_array_size(v); i++)
				if (!json_is_string(json_array_get(v, i)))
					want = "a JSON array of strings";
		}
		break;
	default:
		break;
	}
	json_decref(v);
	if (want) {
		snprintf(why, cap, "default %s is not %s",
		         accelp_loader_shown(p->default_json, b1, sizeof(b1)), want);
		return -1;
	}
	return 0;
}

/* Copy the module's schema into our layout and check it.  `params` is the
 * module's array, whose stride is its entries' struct_size. */
int accelp_loader_schema_load(module_rec *m, const char *section, const accel_param_schema_v1 *params,
                                     uint32_t n_params)
{
	char b1[96], why[512];
	if (n_params == 0)
		return 0;
	if (n_params > SCHEMA_MAX_PARAMS)
		return accelp_loader_broken(m, "schema declares %u parameters (at most %u)",
		                            n_params, SCHEMA_MAX_PARAMS);
	if (!params)
		return accelp_loader_broken(m, "descriptor says n_params = %u but params is NULL",
		                            n_params);
	if (!section)
		return accelp_loader_broken(m, "declares %u parameters but no config_section to "
		                            "hold them", n_params);
	uint32_t stride = params[0].struct_size;
	if (stride < ACCEL_PARAM_SCHEMA_V1_MIN_SIZE)
		return accelp_loader_broken(m,
		                            "struct_size too small: params[0].struct_size is %u, "
		                            "accel_param_schema_v1 needs at least %zu",
		                            stride, (size_t)ACCEL_PARAM_SCHEMA_V1_MIN_SIZE);
	m->params = calloc(n_params, sizeof(*m->params));
	if (!m->params)
		return ACCEL_ERR_NOMEM;
	for (uint32_t i = 0; i < n_params; i++) {
		const accel_param_schema_v1 *src =
			(const accel_param_schema_v1 *)((const char *)params + (size_t)i * stride);
		if (src->struct_size != stride)
			return accelp_loader_broken(m, "schema entry %u has struct_size %u, entry "
			                            "0 has %u (all entries must be one struct type)",
			                            i, src->struct_size, stride);
		accel_param_schema_v1 *p = &m->params[i];
		memcpy(p, src, stride < sizeof(*p) ? stride : sizeof(*p));
		p->struct_size = sizeof(*p);
		if (!p->key || !accelp_loader_schema_key_ok(p->key))
			return accelp_loader_broken(m, "schema entry %u: key \"%s\" is not a "
			                            "dotted name of [A-Za-z0-9_-] parts", i,
			                            accelp_loader_shown(p->key, b1, sizeof(b1)));
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(m->params[j].key, p->key))
				return accelp_loader_broken(m, "schema entries %u and %u both "
				                            "declare key '%s'", j, i, p->key);
		if (schema_entry_check(p, why, sizeof(why)))
			return accelp_loader_broken(m, "schema entry %u ('%s.%s', %s): %s", i,
			                            section, p->key,
			                            accelp_loader_cfg_type_name(p->type), why);
	}
	m->pub.params = m->params;
	m->pub.n_params = n_params;
	return 0;
}

