/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/mlp_fp8.h: train_mlp's linear layers through the fp8
 * plugin's GEMM (accel-fp8.h) when mixed_precision is fp8: the fc weights
 * are registered with compute_dtype f8e4m3, and each layer's forward and
 * backward GEMMs run in fp8 (cuBLASLt on an FP8 GPU, emulated on the CPU),
 * with the bias, ReLU and loss in f32 as in mlp.c.
 */
#ifndef TRAIN_MLP_MLP_FP8_H
#define TRAIN_MLP_MLP_FP8_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlp.h"

typedef struct mlp_fp8 mlp_fp8;

/* 1 when the context's mixed_precision is fp8. */
int mlp_fp8_wanted(accel_ctx *ctx);
/* Register a CPU f32 weight whose GEMMs run in fp8 (compute_dtype f8e4m3). */
int mlp_fp8_add_weight(accel_ctx *ctx, const char *unit, const char *name,
                       const int64_t *shape, const accel_init *init, uint32_t *ret_param);
/* After accel_prepare: the extension table and a workspace per layer for
 * up to `cap` rows.  Returns an accel status (the message is in ctx). */
int mlp_fp8_new(accel_ctx *ctx, const mlp_shape *s, const uint32_t *weight, int cap,
                mlp_fp8 **ret);
mlp_fp8 *mlp_fp8_free(mlp_fp8 *f);
/* mlp_forward_layer / mlp_backward_layer with the GEMMs in fp8. */
int mlp_fp8_forward_layer(mlp_fp8 *f, const mlp_shape *s, mlp_work *w, int l, const float *b,
                          int n);
int mlp_fp8_backward_layer(mlp_fp8 *f, const mlp_shape *s, mlp_work *w, int l, float *dW,
                           float *db, int n, int accumulate);

#endif
