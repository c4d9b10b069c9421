/* SPDX-License-Identifier: MIT */
/* core/tracker_csv.c: metrics as CSV (RFC 4180), one row per record.
 *
 * Columns are "step", "time", then the metric keys in the order they first
 * appeared.  Programs often log different keys at different steps (the
 * training loss every step, an evaluation score now and then): a key the
 * header lacks extends it, and the file is rewritten once with empty cells
 * in the earlier rows, so the file always has one header that every row
 * matches (what pandas.read_csv and spreadsheets expect). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracker.h"

struct accel_tracker_csv {
	FILE *f;
	char *path;
	char **cols;
	size_t n_cols, cap_cols;
	/* the row being built: one string per column (owned, NULL empty) */
	char **cells;
	size_t cap_cells;
};

static long find_col(const accel_tracker_csv *c, const char *key)
{
	for (size_t i = 0; i < c->n_cols; i++)
		if (!strcmp(c->cols[i], key))
			return (long)i;
	return -1;
}

static int add_col(accel_tracker_csv *c, const char *key)
{
	if (c->n_cols == c->cap_cols) {
		size_t nc = c->cap_cols ? c->cap_cols * 2 : 16;
		char **n = realloc(c->cols, nc * sizeof(*n));
		if (!n)
			return -1;
		c->cols = n;
		c->cap_cols = nc;
	}
	if (!(c->cols[c->n_cols] = strdup(key)))
		return -1;
	c->n_cols++;
	return 0;
}

/* A field quoted when it holds a comma, quote, CR or LF (RFC 4180 2.6). */
static void put_field(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void put_header(FILE *f, const accel_tracker_csv *c)
{
	for (size_t i = 0; i < c->n_cols; i++) {
		if (i)
			fputc(',', f);
		put_field(f, c->cols[i]);
	}
	fputc('\n', f);
}

/* Split the header line of an existing file into columns (our own files:
 * fields quoted as put_field quotes them). */
static int parse_header(accel_tracker_csv *c, const char *line)
{
	char buf[1024];
	size_t n = 0;
	const char *p = line;
	for (;;) {
		n = 0;
		if (*p == '"') {
			for (p++; *p && !(*p == '"' && p[1] != '"'); p++) {
				if (*p == '"')
					p++;
				if (n + 1 < sizeof(buf))
					buf[n++] = *p;
			}
			if (*p == '"')
				p++;
		} else {
			for (; *p && *p != ',' && *p != '\n' && *p != '\r'; p++)
				if (n + 1 < sizeof(buf))
					buf[n++] = *p;
		}
		buf[n] = '\0';
		if (add_col(c, buf))
			return -1;
		if (*p != ',')
			return 0;
		p++;
	}
}

int accelp_tracker_csv_new(const char *dir, accel_err *err, accel_tracker_csv **ret_csv)
{
	accel_tracker_csv *c = NULL;
	int r;
	if (accelp_tracker_mkdirs(dir))
		return accelp_err_set(err, ACCEL_ERR_IO, "logging_dir '%s': cannot create it: %s "
		                      "(set logging_dir to a writable directory)", dir, strerror(errno));
	c = calloc(1, sizeof(*c));
	if (!c)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	size_t n = strlen(dir) + sizeof("/metrics.csv");
	if (!(c->path = malloc(n))) {
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	snprintf(c->path, n, "%s/metrics.csv", dir);
	FILE *old = fopen(c->path, "r");
	if (old) {
		/* a resumed run: continue under the file's own header */
		char *line = NULL;
		size_t cap = 0;
		ssize_t got = getline(&line, &cap, old);
		fclose(old);
		if (got > 0 && parse_header(c, line)) {
			free(line);
			r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			goto fail;
		}
		free(line);
	}
	if (c->n_cols == 0 && (add_col(c, "step") || add_col(c, "time"))) {
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	c->f = fopen(c->path, "a");
	if (!c->f) {
		r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': cannot open it for "
		                   "appending: %s", c->path, strerror(errno));
		goto fail;
	}
	if (!old) {
		put_header(c->f, c);
		if (fflush(c->f)) {
			r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': write failed: %s",
			                   c->path, strerror(errno));
			goto fail;
		}
	}
	*ret_csv = c;
	return ACCEL_OK;

fail:
	accelp_tracker_csv_free(c);
	return r;
}

/* Rewrite the file under the current (longer) header: every row after the
 * first line gets `added` empty cells. */
static int rewrite(accel_tracker_csv *c, size_t added, accel_err *err)
{
	size_t n = strlen(c->path) + 8;
	char *tmp = malloc(n), *line = NULL;
	size_t cap = 0;
	FILE *in = NULL, *out = NULL;
	int r = ACCEL_OK, first = 1;
	if (!tmp)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	snprintf(tmp, n, "%s.tmp", c->path);
	fclose(c->f);
	c->f = NULL;
	if (!(in = fopen(c->path, "r")) || !(out = fopen(tmp, "w"))) {
		r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': cannot rewrite it "
		                   "with new columns: %s", c->path, strerror(errno));
		goto out;
	}
	put_header(out, c);
	/* Rows are one line each: put_field quotes newlines, but metric values
	 * and keys with newlines are not something we write unquoted, and a
	 * quoted one still ends its row on the last line, where the cells go. */
	ssize_t got;
	int in_quote = 0;
	while ((got = getline(&line, &cap, in)) > 0) {
		for (ssize_t i = 0; i < got; i++)
			if (line[i] == '"')
				in_quote = !in_quote;
		if (first) {
			first = in_quote;   /* the old header may span lines */
			continue;
		}
		if (in_quote) {
			fputs(line, out);
			continue;
		}
		if (line[got - 1] == '\n')
			line[--got] = '\0';
		fputs(line, out);
		for (size_t k = 0; k < added; k++)
			fputc(',', out);
		fputc('\n', out);
	}
	if (ferror(in) || fflush(out) || ferror(out) || fclose(out)) {
		out = NULL;
		r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': rewriting failed: %s",
		                   c->path, strerror(errno));
		goto out;
	}
	out = NULL;
	if (rename(tmp, c->path)) {
		r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': cannot replace it: %s",
		                   c->path, strerror(errno));
		goto out;
	}
out:
	if (in)
		fclose(in);
	if (out)
		fclose(out);
	if (r)
		(void)remove(tmp);
	free(tmp);
	free(line);
	if (!(c->f = fopen(c->path, "a")) && r == ACCEL_OK)
		r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': cannot reopen it: %s",
		                   c->path, strerror(errno));
	return r;
}

static char *cell_text(json_t *v)
{
	char buf[64];
	if (json_is_integer(v)) {
		snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
	} else if (json_is_real(v)) {
		double d = json_real_value(v);
		if (isnan(d))
			return strdup("NaN");
		if (isinf(d))
			return strdup(d > 0 ? "inf" : "-inf");
		snprintf(buf, sizeof(buf), "%.17g", d);
	} else if (json_is_boolean(v)) {
		snprintf(buf, sizeof(buf), "%s", json_is_true(v) ? "true" : "false");
	} else if (json_is_string(v)) {
		const char *s = json_string_value(v);
		/* metrics.c writes non-finite numbers as these strings */
		if (!strcmp(s, "Infinity"))
			return strdup("inf");
		if (!strcmp(s, "-Infinity"))
			return strdup("-inf");
		return strdup(s);
	} else if (json_is_null(v)) {
		return strdup("");
	} else {
		return json_dumps(v, JSON_COMPACT);   /* an array: its JSON text */
	}
	return strdup(buf);
}

struct row_ctx {
	accel_tracker_csv *c;
	int failed;
};

static int collect(const char *key, json_t *v, void *arg)
{
	struct row_ctx *rc = arg;
	accel_tracker_csv *c = rc->c;
	long i = find_col(c, key);
	if (i < 0) {
		if (add_col(c, key))
			return rc->failed = -1;
		i = (long)c->n_cols - 1;
	}
	if ((size_t)i >= c->cap_cells) {
		size_t nc = c->cap_cells ? c->cap_cells * 2 : 16;
		while (nc <= (size_t)i)
			nc *= 2;
		char **n = realloc(c->cells, nc * sizeof(*n));
		if (!n)
			return rc->failed = -1;
		memset(n + c->cap_cells, 0, (nc - c->cap_cells) * sizeof(*n));
		c->cells = n;
		c->cap_cells = nc;
	}
	free(c->cells[i]);
	if (!(c->cells[i] = cell_text(v)))
		return rc->failed = -1;
	return 0;
}

int accelp_tracker_csv_write(accel_tracker_csv *c, json_t *rec, accel_err *err)
{
	size_t before = c->n_cols;
	struct row_ctx rc = {c, 0};
	int r = ACCEL_OK;
	if (accelp_tracker_flatten(rec, collect, &rc) || rc.failed) {
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (c->n_cols > before && (r = rewrite(c, c->n_cols - before, err)))
		goto out;
	for (size_t i = 0; i < c->n_cols; i++) {
		if (i)
			fputc(',', c->f);
		if (i < c->cap_cells && c->cells[i])
			put_field(c->f, c->cells[i]);
	}
	fputc('\n', c->f);
	if (fflush(c->f) || ferror(c->f))
		r = accelp_err_set(err, ACCEL_ERR_IO, "csv metrics file '%s': write failed: %s",
		                   c->path, strerror(errno));
out:
	for (size_t i = 0; i < c->cap_cells; i++) {
		free(c->cells[i]);
		c->cells[i] = NULL;
	}
	return r;
}

accel_tracker_csv *accelp_tracker_csv_free(accel_tracker_csv *c)
{
	if (!c)
		return NULL;
	if (c->f)
		fclose(c->f);
	for (size_t i = 0; i < c->n_cols; i++)
		free(c->cols[i]);
	for (size_t i = 0; i < c->cap_cells; i++)
		free(c->cells[i]);
	free(c->cols);
	free(c->cells);
	free(c->path);
	free(c);
	return NULL;
}
