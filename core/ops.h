/* SPDX-License-Identifier: MIT */
/* core/ops.h: device ops on views (private).  The CPU versions live in
 * core/ops_cpu.c; a call with a view on a CUDA device goes to
 * core/ops_device.c, which hands it to the cuda device module (loaded on
 * first need, core/device.c).  Copies between the host and a device keep
 * the dtype; every other op wants its views on one device.  Device ops are
 * enqueued in call order; sumsq, nonfinite and copies to the host wait for
 * the device.  Without a CUDA build, module or GPU these calls fail with
 * ACCEL_ERR_UNSUPPORTED and a message that says which is missing. */
#ifndef ACCEL_CORE_OPS_H
#define ACCEL_CORE_OPS_H

#include <stdint.h>

#include "accel/types.h"
#include "error.h"

/* dst = src converted to dst's dtype; same numel.  Floating dtypes convert
 * among f32/f64/f16/bf16; integer dtypes only copy to the same dtype. */
int accelp_ops_copy(const accel_view *dst, const accel_view *src, accel_err *err);
int accelp_ops_fill(const accel_view *dst, double value, accel_err *err);
int accelp_ops_scale(const accel_view *x, double alpha, accel_err *err);
int accelp_ops_axpy(const accel_view *y, double alpha, const accel_view *x, accel_err *err);
int accelp_ops_sumsq(const accel_view *x, double *ret_sumsq, accel_err *err);
int accelp_ops_nonfinite(const accel_view *x, uint64_t *ret_count, accel_err *err);

/* The same for views of which at least one is on a device (ops_device.c). */
int accelp_ops_device_copy(const accel_view *dst, const accel_view *src, accel_err *err);
int accelp_ops_device_fill(const accel_view *dst, double value, accel_err *err);
int accelp_ops_device_scale(const accel_view *x, double alpha, accel_err *err);
int accelp_ops_device_axpy(const accel_view *y, double alpha, const accel_view *x,
                          accel_err *err);
int accelp_ops_device_sumsq(const accel_view *x, double *ret_sumsq, accel_err *err);
int accelp_ops_device_nonfinite(const accel_view *x, uint64_t *ret_count, accel_err *err);
/* Device ABI minor 2 (accel/device.h): stats[0] += sumsq(x), enqueued; and
 * the clipping factors from stats[0] (accel_device_v1.clip_scale).
 * ACCEL_ERR_UNSUPPORTED from an older module. */
int accelp_ops_device_sumsq_acc(const accel_view *x, double *stats, accel_err *err);
/* Whether device (device_index) has a module with both (loads it). */
int accelp_ops_device_stats_ok(int32_t device, int32_t device_index);
int accelp_ops_device_clip_scale(int32_t device, int32_t device_index, double *stats,
                                double max_norm, double unscale, accel_err *err);

#endif
