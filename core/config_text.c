/* SPDX-License-Identifier: MIT */
/* core/config_text.c: text helpers the other parts share: paths and variable names,
 * edit distances for suggestions, JSON values as text. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config-impl.h"

int cfg_nomem(accel_err *err)
{
	return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory in the configuration");
}

char *cfg_xstrdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

char *cfg_strfmt(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

int cfg_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap * 2 : 16;
	while (n < need)
		n *= 2;
	void *p = realloc(*arr, n * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = n;
	return 0;
}

/* Shortest "%g" form that reads back as the same double. */
void cfg_fmt_num(double x, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.15g", x);
	if (strtod(buf, NULL) != x)
		snprintf(buf, cap, "%.17g", x);
}

/* A JSON real as text: like cfg_fmt_num, but "1.0" rather than "1". */
static void fmt_real(double x, char *buf, size_t cap)
{
	cfg_fmt_num(x, buf, cap);
	if (isfinite(x) && !strpbrk(buf, ".eE") && strlen(buf) + 3 <= cap)
		strcat(buf, ".0");
}

char *cfg_env_name(const char *path)
{
	size_t n = strlen(path);
	char *s = malloc(n + 7);
	if (!s)
		return NULL;
	memcpy(s, "ACCEL_", 6);
	for (size_t i = 0; i < n; i++) {
		char c = path[i];
		s[6 + i] = (c == '.' || c == '-') ? '_' : (c >= 'a' && c <= 'z') ? (char)(c - 32) : c;
	}
	s[n + 6] = '\0';
	return s;
}

/* [A-Za-z0-9_-]+ segments joined by '.'. */
int cfg_valid_path(const char *p)
{
	if (!p || !*p)
		return 0;
	int seg = 0;
	for (; *p; p++) {
		char c = *p;
		if (c == '.') {
			if (!seg)
				return 0;
			seg = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		           c == '_' || c == '-') {
			seg++;
		} else {
			return 0;
		}
	}
	return seg > 0;
}

/* 1 when `path` lies inside `group` ("a.b" inside "a"). */
int cfg_path_in(const char *path, const char *group)
{
	size_t n = strlen(group);
	return !strncmp(path, group, n) && path[n] == '.';
}

/* Optimal string alignment distance (Damerau-Levenshtein with adjacent
 * transpositions), case-insensitive; SIZE_MAX for very long strings. */
size_t cfg_edit_distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	if (n > 200 || m > 200)
		return SIZE_MAX;
	size_t rows[3][201];
	size_t *pp = rows[0], *p = rows[1], *c = rows[2];
	for (size_t j = 0; j <= m; j++)
		p[j] = j;
	for (size_t i = 1; i <= n; i++) {
		c[0] = i;
		for (size_t j = 1; j <= m; j++) {
			char x = a[i - 1], y = b[j - 1];
			if (x >= 'A' && x <= 'Z')
				x = (char)(x + 32);
			if (y >= 'A' && y <= 'Z')
				y = (char)(y + 32);
			size_t cost = x != y;
			size_t v = p[j] + 1;
			if (c[j - 1] + 1 < v)
				v = c[j - 1] + 1;
			if (p[j - 1] + cost < v)
				v = p[j - 1] + cost;
			if (i > 1 && j > 1) {
				char x1 = a[i - 2], y1 = b[j - 2];
				if (x1 >= 'A' && x1 <= 'Z')
					x1 = (char)(x1 + 32);
				if (y1 >= 'A' && y1 <= 'Z')
					y1 = (char)(y1 + 32);
				if (x == y1 && x1 == y && pp[j - 2] + 1 < v)
					v = pp[j - 2] + 1;
			}
			c[j] = v;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[m];
}

/* How far a suggestion may be from what was typed. */
size_t cfg_max_distance(const char *s)
{
	size_t n = strlen(s);
	return n <= 3 ? 1 : n <= 8 ? 2 : 3;
}

/* A value as it appears in messages: JSON, cut at ~60 characters. */
void cfg_describe(const json_t *v, char *buf, size_t cap)
{
	char num[64];
	if (!v) {
		snprintf(buf, cap, "nothing");
		return;
	}
	switch (json_typeof(v)) {
	case JSON_REAL:
		fmt_real(json_real_value(v), num, sizeof(num));
		snprintf(buf, cap, "%s", num);
		return;
	case JSON_OBJECT:
	case JSON_ARRAY:
	case JSON_STRING: {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
		const char *what = json_is_object(v) ? "an object " : json_is_array(v) ? "a list "
		                                                                       : "string ";
		if (!s) {
			snprintf(buf, cap, "%s", what);
			return;
		}
		if (strlen(s) > 60)
			memcpy(s + 56, " ...", 5);
		snprintf(buf, cap, "%s%s", what, s);
		free(s);
		return;
	}
	default: {
		char *s = json_dumps(v, JSON_ENCODE_ANY);
		snprintf(buf, cap, "%s", s ? s : "?");
		free(s);
		return;
	}
	}
}

/* A value for dumps: JSON with shortest round-trip numbers. */
void cfg_fput_value(FILE *out, const json_t *v)
{
	char num[64];
	if (!v) {
		fputs("null", out);
	} else if (json_is_real(v)) {
		fmt_real(json_real_value(v), num, sizeof(num));
		fputs(num, out);
	} else if (json_is_array(v)) {
		size_t i;
		json_t *e;
		fputc('[', out);
		json_array_foreach(v, i, e) {
			if (i)
				fputs(", ", out);
			cfg_fput_value(out, e);
		}
		fputc(']', out);
	} else {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		fputs(s ? s : "null", out);
		free(s);
	}
}

char *cfg_value_string(const json_t *v)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	if (!f)
		return NULL;
	cfg_fput_value(f, v);
	if (fclose(f)) {
		free(s);
		return NULL;
	}
	return s;
}

