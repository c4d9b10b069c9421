/* SPDX-License-Identifier: MIT */
/* core/config_value.c: one value checked against its key's type, range and
 * choices, and normalized (integers, enums, lists). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config-impl.h"
#include "log.h"

static int has_range(const keydef *k)
{
	return k->min <= k->max && (isfinite(k->min) || isfinite(k->max));
}

static int in_range(const keydef *k, double x)
{
	if (!has_range(k))
		return 1;
	if ((k->flags & F_MIN_EXCL) ? !(x > k->min) : !(x >= k->min))
		return 0;
	if ((k->flags & F_MAX_EXCL) ? !(x < k->max) : !(x <= k->max))
		return 0;
	return 1;
}

static void range_text(const keydef *k, char *buf, size_t cap)
{
	char lo[64], hi[64];
	buf[0] = '\0';
	if (!has_range(k))
		return;
	cfg_fmt_num(k->min, lo, sizeof(lo));
	cfg_fmt_num(k->max, hi, sizeof(hi));
	if (isfinite(k->min) && isfinite(k->max))
		snprintf(buf, cap, " in %c%s, %s%c", (k->flags & F_MIN_EXCL) ? '(' : '[', lo, hi,
		         (k->flags & F_MAX_EXCL) ? ')' : ']');
	else if (isfinite(k->min))
		snprintf(buf, cap, " %s %s", (k->flags & F_MIN_EXCL) ? ">" : ">=", lo);
	else
		snprintf(buf, cap, " %s %s", (k->flags & F_MAX_EXCL) ? "<" : "<=", hi);
}

static void expected_text(const keydef *k, char *buf, size_t cap)
{
	char r[160];
	range_text(k, r, sizeof(r));
	switch (k->type) {
	case ACCEL_CFG_BOOL: snprintf(buf, cap, "true or false"); break;
	case ACCEL_CFG_INT: snprintf(buf, cap, "an integer%s", r); break;
	case ACCEL_CFG_DOUBLE: snprintf(buf, cap, "a number%s", r); break;
	case ACCEL_CFG_STRING: snprintf(buf, cap, "a string"); break;
	case ACCEL_CFG_ENUM: snprintf(buf, cap, "one of %s", k->choices); break;
	case ACCEL_CFG_STRLIST: snprintf(buf, cap, "a list of strings"); break;
	case T_DBLLIST:
		if (k->list_len)
			snprintf(buf, cap, "a list of %u numbers%s", k->list_len, r);
		else
			snprintf(buf, cap, "a list of numbers%s", r);
		break;
	default: snprintf(buf, cap, "?"); break;
	}
}

static int choice_ok(const char *choices, const char *s)
{
	size_t n = strlen(s);
	for (const char *p = choices; p && *p;) {
		const char *q = strchr(p, '|');
		size_t m = q ? (size_t)(q - p) : strlen(p);
		if (m == n && !strncmp(p, s, n))
			return 1;
		p = q ? q + 1 : NULL;
	}
	return 0;
}

static const char *suggest_choice(const char *choices, const char *s, char *buf, size_t cap)
{
	size_t best = SIZE_MAX, lim = cfg_max_distance(s);
	buf[0] = '\0';
	for (const char *p = choices; p && *p;) {
		const char *q = strchr(p, '|');
		size_t m = q ? (size_t)(q - p) : strlen(p);
		char c[128];
		if (m < sizeof(c)) {
			memcpy(c, p, m);
			c[m] = '\0';
			size_t d = cfg_edit_distance(s, c);
			if (d <= lim && d < best) {
				best = d;
				snprintf(buf, cap, "%s", c);
			}
		}
		p = q ? q + 1 : NULL;
	}
	return buf[0] ? buf : NULL;
}

static void element_source(const vsrc *vs, size_t i, char *buf, size_t cap)
{
	if (vs->d && vs->d->kind == D_FILE && vs->ppath) {
		char pp[1024];
		snprintf(pp, sizeof(pp), "%s%c[%zu]", vs->ppath, PSEP, i);
		cfg_doc_source(vs->d, pp, 0, buf, cap);
	} else {
		snprintf(buf, cap, "%s", vs->text);
	}
}

static int bad_value(const keydef *k, const char *shown_key, const vsrc *vs, const json_t *v,
                     const char *extra, accel_err *err)
{
	char exp[256], got[128];
	expected_text(k, exp, sizeof(exp));
	cfg_describe(v, got, sizeof(got));
	return accelp_err_set(err, ACCEL_ERR_CONFIG, "invalid value for '%s' at %s: expected %s, got %s%s",
	                     shown_key, vs->text, exp, got, extra ? extra : "");
}

/* Check `v` against k's type and range; *ret is a new reference to the
 * normalized value (json null stays null: "back to the default"). */
int cfg_normalize(const keydef *k, const char *shown_key, json_t *v, const vsrc *vs,
                  json_t **ret, accel_err *err)
{
	const doc *d = vs->d;
	/* env or --set value as typed: its raw text is available */
	int textual = d && d->kind != D_FILE && v == d->root;
	json_t *out = NULL;

	if (json_is_null(v)) {
		*ret = json_incref(v);
		return ACCEL_OK;
	}
	switch (k->type) {
	case ACCEL_CFG_BOOL:
		if (!json_is_boolean(v))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_incref(v);
		break;
	case ACCEL_CFG_INT: {
		json_int_t x;
		if (json_is_integer(v)) {
			x = json_integer_value(v);
		} else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
		           fabs(json_real_value(v)) < 9.2e18) {
			x = (json_int_t)json_real_value(v);
		} else {
			return bad_value(k, shown_key, vs, v, NULL, err);
		}
		if (!in_range(k, (double)x))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_integer(x);
		break;
	}
	case ACCEL_CFG_DOUBLE:
		if (!json_is_number(v) || !in_range(k, json_number_value(v)))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_real(json_number_value(v));
		break;
	case ACCEL_CFG_STRING:
		if (json_is_string(v))
			out = json_incref(v);
		else if (textual && !json_is_array(v) && !json_is_object(v))
			out = json_string(d->raw);
		else
			return bad_value(k, shown_key, vs, v, NULL, err);
		break;
	case ACCEL_CFG_ENUM: {
		const char *s = NULL;
		char lvl[16];
		if (json_is_string(v))
			s = json_string_value(v);
		else if (textual && !json_is_array(v) && !json_is_object(v))
			s = d->raw;
		if ((k->flags & F_LOGLEVEL) && json_is_integer(v)) {
			snprintf(lvl, sizeof(lvl), "%lld", (long long)json_integer_value(v));
			s = lvl;
		}
		if (s && (k->flags & F_LOGLEVEL)) {
			static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
			int l = accelp_log_level_parse(s);
			if (l >= 0)
				s = names[l];
		}
		if (!s)
			return bad_value(k, shown_key, vs, v, NULL, err);
		if (!choice_ok(k->choices, s)) {
			char sug[128], extra[160] = "";
			json_t *sv = json_string(s);
			if (suggest_choice(k->choices, s, sug, sizeof(sug)))
				snprintf(extra, sizeof(extra), "; did you mean '%s'?", sug);
			int r = bad_value(k, shown_key, vs, sv ? sv : v, extra, err);
			json_decref(sv);
			return r;
		}
		out = json_string(s);
		break;
	}
	case ACCEL_CFG_STRLIST: {
		size_t i;
		json_t *e;
		if (textual && !d->raw_json && json_is_string(v) && d->split) {
			out = json_incref(d->split);
			break;
		}
		if (!json_is_array(v))
			return bad_value(k, shown_key, vs, v, NULL, err);
		json_array_foreach(v, i, e) {
			if (!json_is_string(e)) {
				char src[512], got[128];
				element_source(vs, i, src, sizeof(src));
				cfg_describe(e, got, sizeof(got));
				return accelp_err_set(err, ACCEL_ERR_CONFIG,
				                     "invalid value for '%s' at %s: element %zu must be a "
				                     "string, got %s", shown_key, src, i, got);
			}
		}
		out = json_incref(v);
		break;
	}
	case T_DBLLIST: {
		size_t i;
		json_t *e;
		if (!json_is_array(v) || (k->list_len && json_array_size(v) != k->list_len))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_array();
		if (!out)
			return cfg_nomem(err);
		json_array_foreach(v, i, e) {
			if (!json_is_number(e) || !in_range(k, json_number_value(e))) {
				char src[512], got[128], exp[256];
				element_source(vs, i, src, sizeof(src));
				cfg_describe(e, got, sizeof(got));
				expected_text(k, exp, sizeof(exp));
				json_decref(out);
				return accelp_err_set(err, ACCEL_ERR_CONFIG,
				                     "invalid value for '%s' at %s: element %zu is %s; "
				                     "expected %s", shown_key, src, i, got, exp);
			}
			if (json_array_append_new(out, json_real(json_number_value(e)))) {
				json_decref(out);
				return cfg_nomem(err);
			}
		}
		break;
	}
	default:
		return accelp_err_set(err, ACCEL_ERR_INTERNAL, "config key '%s' has type %d",
		                     k->key, k->type);
	}
	if (!out)
		return cfg_nomem(err);
	*ret = out;
	return ACCEL_OK;
}

