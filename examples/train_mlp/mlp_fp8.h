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
#include "mlp_cuda.h"

typedef struct mlp_fp8 mlp_fp8;

/* 1 when the context's mixed_precision is fp8. */
int mlp_fp8_wanted(accel_ctx *ctx);
/* The compute_dtype of fc weight [out, in] under fp8: f8e4m3 when both
 * dimensions are multiples of 16 (what cuBLASLt's FP8 kernels and
 * TransformerEngine require; the same rule on the CPU, so both devices
 * train the same model), else 0 (the layer computes in f32, as
 * TransformerEngine users keep a small classifier head). */
uint32_t mlp_fp8_compute_dtype(int64_t out, int64_t in);
/* Register a CPU f32 weight, its compute_dtype by the rule above. */
int mlp_fp8_add_weight(accel_ctx *ctx, const char *unit, const char *name,
                       const int64_t *shape, const accel_init *init, uint32_t *ret_param);
/* After accel_prepare: the extension table and a workspace per fp8 layer
 * for up to `cap` rows, in host memory, or with `gpu` (--device cuda) on
 * its device `device_index`, where the layers' GEMMs then run through
 * mlp_cuda_set_gemm_hooks.  Returns an accel status (the message is in
 * ctx). */
int mlp_fp8_new(accel_ctx *ctx, const mlp_shape *s, const uint32_t *weight, int cap,
                mlp_cuda *gpu, int32_t device_index, mlp_fp8 **ret);
mlp_fp8 *mlp_fp8_free(mlp_fp8 *f);
/* mlp_forward_layer / mlp_backward_layer with the GEMMs in fp8 (CPU;
 * layers that are not fp8 run mlp.c's). */
int mlp_fp8_forward_layer(mlp_fp8 *f, const mlp_shape *s, mlp_work *w, int l, const float *W,
                          const float *b, int n);
int mlp_fp8_backward_layer(mlp_fp8 *f, const mlp_shape *s, mlp_work *w, int l, const float *W,
                           float *dW, float *db, int n, int accumulate);

#endif
