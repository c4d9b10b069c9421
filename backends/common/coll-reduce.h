/* SPDX-License-Identifier: MIT */
/* backends/common/coll-reduce.h: the element-wise reduction kernels of the
 * host backends (coll_reduce.c, compiled into each module that uses it;
 * hidden visibility, like everything in a module but its entry point). */
#ifndef ACCEL_BACKENDS_COLL_REDUCE_H
#define ACCEL_BACKENDS_COLL_REDUCE_H

#include <stdint.h>

#include "accel/types.h"

/* out[j][i] = in[0][i] (op) in[1][i] (op) ... for i < count, in rank order,
 * f16/bf16 accumulated in f32; AVG divides by avg_div.  in[] and out[] may
 * alias each other exactly (same pointer), not partially. */
void coll_reduce(uint32_t dtype, uint32_t redop, int n_in, const void *const *in, int n_out,
                 void *const *out, uint64_t count, int32_t avg_div);

#endif
