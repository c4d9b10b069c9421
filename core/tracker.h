/* SPDX-License-Identifier: MIT */
/* core/tracker.h: the metrics trackers besides JSON lines (private).
 *
 * The config key `log_with` selects them ("jsonl", "csv", "tensorboard");
 * `logging_dir` is where csv and tensorboard write.  core/metrics.c builds
 * one record per accel_log_metrics()/accel_log_scalars() call (a JSON
 * object with "step", "time" and the user's members) and hands it to each
 * tracker on the main process.  Nested objects are flattened with '/'
 * ({"eval": {"loss": 1}} is "eval/loss"), the way TensorBoard groups tags. */
#ifndef ACCEL_CORE_TRACKER_H
#define ACCEL_CORE_TRACKER_H

#include <stdint.h>

#include <jansson.h>

#include "error.h"

/* metrics.csv in a directory: a header row of the column names, one row per
 * record.  A record with a key the header lacks extends the header (the
 * file is rewritten with empty cells for the earlier rows). */
typedef struct accel_tracker_csv accel_tracker_csv;
/* Opens (appends to) dir/metrics.csv, creating dir; a file there already is
 * continued with its own header (a resumed run). */
int accelp_tracker_csv_new(const char *dir, accel_err *err, accel_tracker_csv **ret_csv);
int accelp_tracker_csv_write(accel_tracker_csv *c, json_t *rec, accel_err *err);
accel_tracker_csv *accelp_tracker_csv_free(accel_tracker_csv *c);

/* A TensorBoard event file, dir/events.out.tfevents.<seconds>.<host>.<pid>:
 * TFRecord framing (length, masked CRC-32C of the length, the serialized
 * Event, masked CRC-32C of it), a first Event with file_version
 * "brain.Event:2", then one Event per record with wall_time, step and a
 * Summary of simple_value scalars (numbers and booleans; strings, arrays
 * and null are left out). */
typedef struct accel_tracker_tb accel_tracker_tb;
int accelp_tracker_tb_new(const char *dir, accel_err *err, accel_tracker_tb **ret_tb);
int accelp_tracker_tb_write(accel_tracker_tb *tb, json_t *rec, accel_err *err);
/* The file's path (borrowed). */
const char *accelp_tracker_tb_path(const accel_tracker_tb *tb);
accel_tracker_tb *accelp_tracker_tb_free(accel_tracker_tb *tb);

/* CRC-32C (Castagnoli) of data, and TFRecord's mask of it. */
uint32_t accelp_crc32c(const void *data, size_t n);
uint32_t accelp_crc32c_masked(const void *data, size_t n);

/* mkdir -p; 0 or -1 with errno. */
int accelp_tracker_mkdirs(const char *dir);

/* Calls fn(key, value, arg) for every scalar leaf of rec in order, with
 * nested objects flattened as "outer/inner"; stops at fn's first nonzero
 * return and returns it. */
int accelp_tracker_flatten(json_t *rec, int (*fn)(const char *key, json_t *v, void *arg),
                           void *arg);

#endif
