/* SPDX-License-Identifier: MIT */
/* core/metrics.c: accel_log_metrics / accel_log_scalars on the main
 * process: JSON lines, and the trackers `log_with` selects besides them
 * (CSV, TensorBoard: core/tracker.h).
 *
 * One line per call, written with a single fwrite and flushed, so a reader
 * tailing the file never sees half a record and a crash loses at most the
 * line being written.  JSON has no NaN or infinity: such values are written
 * as the strings "NaN", "Infinity" and "-Infinity", which Python's
 * float() and pandas understand. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "accel/accel.h"
#include "config.h"
#include "ctx-impl.h"
#include "tracker.h"
#include "train-impl.h"

/* log_with is checked when the context is made, on every rank, so a typo
 * fails the job at start instead of at the first metric. */
int accelp_train_metrics_new(accel_train *t)
{
	uint32_t n = 0;
	const char *dir = NULL;
	accel_config *cfg = t->ctx->cfg;
	int r = accelp_config_get_count(cfg, "log_with", &n);
	if (r == ACCEL_ERR_NOT_FOUND) {
		t->log_jsonl = 1;
		return ACCEL_OK;
	}
	if (r)
		return accelp_err_set(&t->ctx->err, r, "config key 'log_with' must be a list of "
		                      "tracker names (jsonl, csv, tensorboard)");
	for (uint32_t i = 0; i < n; i++) {
		const char *name = NULL;
		if ((r = accelp_config_get_strlist(cfg, "log_with", i, &name)))
			return accelp_err_set(&t->ctx->err, r, "config key 'log_with' must be a list of "
			                      "tracker names (jsonl, csv, tensorboard)");
		if (!strcmp(name, "jsonl") || !strcmp(name, "json"))
			t->log_jsonl = 1;
		else if (!strcmp(name, "csv"))
			t->log_csv = 1;
		else if (!strcmp(name, "tensorboard"))
			t->log_tb = 1;
		else if (!strcmp(name, "all"))
			t->log_jsonl = t->log_csv = t->log_tb = 1;
		else
			return accelp_err_set(&t->ctx->err, ACCEL_ERR_CONFIG, "config key 'log_with' "
			                      "(%s): unknown tracker '%s'; accel writes jsonl, csv, "
			                      "tensorboard (or all)", accelp_config_source(cfg, "log_with"),
			                      name);
	}
	if ((t->log_csv || t->log_tb) &&
	    (accelp_config_get_string(cfg, "logging_dir", &dir) != ACCEL_OK || !*dir))
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_CONFIG, "config key 'log_with' (%s) "
		                      "selects %s, which write%s into a directory: set 'logging_dir' "
		                      "(e.g. \"logging_dir\": \"runs/exp1\")",
		                      accelp_config_source(cfg, "log_with"),
		                      t->log_csv && t->log_tb ? "csv and tensorboard"
		                      : t->log_csv ? "csv" : "tensorboard",
		                      t->log_csv && t->log_tb ? "" : "s");
	/* Made now on the main process, so a logging_dir that cannot be made
	 * fails the job at start, not after its first steps. */
	if (t->ctx->world.rank == 0 &&
	    accelp_config_get_string(cfg, "logging_dir", &dir) == ACCEL_OK && *dir &&
	    accelp_tracker_mkdirs(dir))
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_IO, "logging_dir '%s' (%s): cannot "
		                      "create it: %s (set logging_dir to a writable directory)", dir,
		                      accelp_config_source(cfg, "logging_dir"), strerror(errno));
	return ACCEL_OK;
}

static void jsonl_close(accel_train *t)
{
	if (t->metrics && t->metrics_owned)
		fclose(t->metrics);
	t->metrics = NULL;
	free(t->metrics_path);
	t->metrics_path = NULL;
}

void accelp_train_metrics_free(accel_train *t)
{
	accelp_progress_free(t);
	jsonl_close(t);
	t->csv = accelp_tracker_csv_free(t->csv);
	t->tb = accelp_tracker_tb_free(t->tb);
}

static int is_fifo(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

static int open_sink(accel_train *t, const char *path)
{
	FILE *f;
	char *copy = NULL;
	if (!path || !strcmp(path, "-")) {
		jsonl_close(t);
		t->metrics = stdout;
		t->metrics_owned = 0;
		return ACCEL_OK;
	}
	/* O_NONBLOCK for the open only: a FIFO nobody reads would block
	 * open() forever (ENXIO instead); writes block as usual after. */
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0666);
	if (fd < 0) {
		int e = errno;   /* before is_fifo's stat */
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_IO, "metrics file '%s': cannot open "
		                     "for appending: %s", path,
		                     e == ENXIO && is_fifo(path) ? "it is a FIFO that no process reads"
		                                                 : strerror(e));
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	f = fdopen(fd, "a");
	if (!f) {
		int e = errno;
		close(fd);
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_IO, "metrics file '%s': %s", path,
		                     strerror(e));
	}
	copy = strdup(path);
	if (!copy) {
		fclose(f);
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	}
	jsonl_close(t);
	t->metrics = f;
	t->metrics_owned = 1;
	t->metrics_path = copy;
	return ACCEL_OK;
}

int accel_metrics_open(accel_ctx *ctx, const char *path)
{
	if (!ctx || !ctx->train)
		return ACCEL_ERR_INVALID_ARG;
	if (ctx->world.rank != 0)
		return ACCEL_OK;
	ctx->train->log_jsonl = 1;   /* asked for by name */
	return open_sink(ctx->train, path);
}

/* The sink on first use: config `metrics_file` when the configuration
 * declares it, else metrics.jsonl in `logging_dir` when that is set, else
 * stdout. */
static int sink(accel_train *t)
{
	const char *path = NULL, *dir = NULL;
	char *joined = NULL;
	int r;
	if (t->metrics)
		return ACCEL_OK;
	if (accelp_config_get_string(t->ctx->cfg, "metrics_file", &path) != ACCEL_OK || !*path)
		path = NULL;
	if (!path && accelp_config_get_string(t->ctx->cfg, "logging_dir", &dir) == ACCEL_OK && *dir) {
		size_t n = strlen(dir) + sizeof("/metrics.jsonl");
		if (accelp_tracker_mkdirs(dir))
			return accelp_err_set(&t->ctx->err, ACCEL_ERR_IO, "logging_dir '%s': cannot "
			                      "create it: %s (set logging_dir to a writable directory)",
			                      dir, strerror(errno));
		if (!(joined = malloc(n)))
			return accelp_err_set(&t->ctx->err, ACCEL_ERR_NOMEM, "out of memory");
		snprintf(joined, n, "%s/metrics.jsonl", dir);
		path = joined;
	}
	r = open_sink(t, path);
	free(joined);
	return r;
}

/* The other trackers on first use (main process only). */
static int write_trackers(accel_train *t, json_t *rec)
{
	const char *dir = NULL;
	int r;
	if (!t->log_csv && !t->log_tb)
		return ACCEL_OK;
	if (accelp_config_get_string(t->ctx->cfg, "logging_dir", &dir) != ACCEL_OK)
		dir = NULL;
	if (!dir || !*dir)   /* checked by accelp_train_metrics_new */
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_CONFIG, "logging_dir is not set");
	if (t->log_csv && !t->csv && (r = accelp_tracker_csv_new(dir, &t->ctx->err, &t->csv)))
		return r;
	if (t->log_tb && !t->tb && (r = accelp_tracker_tb_new(dir, &t->ctx->err, &t->tb)))
		return r;
	if (t->csv && (r = accelp_tracker_csv_write(t->csv, rec, &t->ctx->err)))
		return r;
	if (t->tb && (r = accelp_tracker_tb_write(t->tb, rec, &t->ctx->err)))
		return r;
	return ACCEL_OK;
}

static json_t *number(double v)
{
	if (isnan(v))
		return json_string("NaN");
	if (isinf(v))
		return json_string(v > 0 ? "Infinity" : "-Infinity");
	return json_real(v);
}

static int emit(accel_train *t, json_t *rec)
{
	char *line;
	size_t n;
	int r = ACCEL_OK;
	if ((r = write_trackers(t, rec)))
		return r;
	if (!t->log_jsonl)
		return ACCEL_OK;
	if ((r = sink(t)))
		return r;
	line = json_dumps(rec, JSON_COMPACT | JSON_REAL_PRECISION(17));
	if (!line)
		return accelp_err_set(&t->ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	n = strlen(line);
	line[n] = '\n';  /* json_dumps leaves room for the terminator we replace */
	if (fwrite(line, 1, n + 1, t->metrics) != n + 1 || fflush(t->metrics))
		r = accelp_err_set(&t->ctx->err, ACCEL_ERR_IO, "metrics %s: write failed: %s",
		                  t->metrics_path ? t->metrics_path : "stdout", strerror(errno));
	free(line);
	return r;
}

static json_t *record(uint64_t step)
{
	struct timespec ts;
	json_t *rec = json_object();
	clock_gettime(CLOCK_REALTIME, &ts);
	if (rec && (json_object_set_new(rec, "step", json_integer((json_int_t)step)) ||
	            json_object_set_new(rec, "time",
	                                json_real((double)ts.tv_sec + ts.tv_nsec * 1e-9)))) {
		json_decref(rec);
		return NULL;
	}
	return rec;
}

int accel_log_metrics(accel_ctx *ctx, uint64_t step, const char *json_object)
{
	json_error_t jerr;
	json_t *user, *rec;
	const char *key;
	json_t *val;
	int r;

	if (!ctx || !ctx->train)
		return ACCEL_ERR_INVALID_ARG;
	if (!json_object)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_metrics: text is "
		                     "NULL");
	/* Checked on every rank so a bad call fails the same way everywhere. */
	user = json_loads(json_object, JSON_DECODE_ANY, &jerr);
	if (!user)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_metrics: not "
		                     "valid JSON at column %d: %s", jerr.column, jerr.text);
	if (!json_is_object(user)) {
		json_decref(user);
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_metrics: expected "
		                     "a JSON object like {\"loss\": 0.5}");
	}
	if (json_object_get(user, "step") || json_object_get(user, "time")) {
		json_decref(user);
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_metrics: \"step\" "
		                     "and \"time\" are written by accel; use other key names");
	}
	if (ctx->world.rank != 0) {
		json_decref(user);
		return ACCEL_OK;
	}
	rec = record(step);
	if (!rec) {
		json_decref(user);
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	}
	json_object_foreach(user, key, val)
		json_object_set(rec, key, val);
	r = emit(ctx->train, rec);
	json_decref(rec);
	json_decref(user);
	return r;
}

int accel_log_scalars(accel_ctx *ctx, uint64_t step, uint32_t n, const char *const *keys,
                      const double *values)
{
	json_t *rec;
	int r;

	if (!ctx || !ctx->train)
		return ACCEL_ERR_INVALID_ARG;
	if (n && (!keys || !values))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_scalars: keys or "
		                     "values is NULL");
	for (uint32_t i = 0; i < n; i++) {
		if (!keys[i] || !*keys[i])
			return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_scalars: "
			                     "key %u is empty", i);
		if (!strcmp(keys[i], "step") || !strcmp(keys[i], "time"))
			return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_scalars: "
			                     "\"%s\" is written by accel; use another key name",
			                     keys[i]);
	}
	if (ctx->world.rank != 0)
		return ACCEL_OK;
	rec = record(step);
	if (!rec)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		json_t *v = number(values[i]);
		if (!v || json_object_set_new(rec, keys[i], v)) {
			json_decref(rec);
			return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_log_scalars: "
			                     "key %u is not valid UTF-8", i);
		}
	}
	r = emit(ctx->train, rec);
	json_decref(rec);
	return r;
}
