/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/step_metrics.h: the --metrics record the example
 * programs (train_mlp, accel-gpt2) write at each progress line, through
 * accel_log_scalars (one JSON line on the main process; docs/api.md):
 *
 *   {"step", "time" (accel's), "loss", "lr", "samples_per_s",
 *    "loss_scale", "skipped", <the caller's extra keys>,
 *    ["compress_sent_bytes", "compress_dense_bytes", "compress_ratio"]}
 *
 * loss_scale and skipped are accel_last_step's (1 and 0 without a loss
 * scaler); the compress figures come from the compress plugin's stats
 * extension when that plugin is active (docs/compress.md). */
#ifndef TRAIN_MLP_STEP_METRICS_H
#define TRAIN_MLP_STEP_METRICS_H

#include <stdint.h>

#include <accel/accel.h>

#define STEP_METRICS_MAX_EXTRA 8

/* Collective-free; call it on every rank (only the main process writes).
 * extra_keys/extra_vals: n_extra (at most STEP_METRICS_MAX_EXTRA) more
 * scalars, borrowed.  Returns ACCEL_OK or accel's status, with the message
 * in the context. */
int step_metrics_log(accel_ctx *ctx, uint64_t step, double loss, double samples_per_s,
                     uint32_t n_extra, const char *const *extra_keys, const double *extra_vals);

#endif
