/* SPDX-License-Identifier: MIT */
/* core/ops.h: device ops on views (private).  The CPU versions live in
 * core/ops_cpu.c; views on CUDA devices go to the cuda device module when it
 * is loaded (a later module) and are ACCEL_ERR_UNSUPPORTED until then. */
#ifndef ACCEL_CORE_OPS_H
#define ACCEL_CORE_OPS_H

#include <stdint.h>

#include "accel/types.h"
#include "error.h"

/* dst = src converted to dst's dtype; same numel.  Floating dtypes convert
 * among f32/f64/f16/bf16; integer dtypes only copy to the same dtype. */
int accel_ops_copy(const accel_view *dst, const accel_view *src, accel_err *err);
int accel_ops_fill(const accel_view *dst, double value, accel_err *err);
int accel_ops_scale(const accel_view *x, double alpha, accel_err *err);
int accel_ops_axpy(const accel_view *y, double alpha, const accel_view *x, accel_err *err);
int accel_ops_sumsq(const accel_view *x, double *ret_sumsq, accel_err *err);
int accel_ops_nonfinite(const accel_view *x, uint64_t *ret_count, accel_err *err);

#endif
