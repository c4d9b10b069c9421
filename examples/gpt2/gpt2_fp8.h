/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_fp8.h: accel-gpt2 --device cuda with mixed_precision
 * fp8.  The four linear weights of each block (qkv, attention projection,
 * fc, MLP projection) are registered with compute_dtype f8e4m3 when both
 * dimensions are multiples of 16 (cuBLASLt's FP8 rule, as train_mlp); their
 * forward and backward GEMMs run through the fp8 plugin's GEMM extension
 * (accel-fp8.h, delayed scaling), everything else (embeddings, LayerNorms,
 * attention, the tied head, the loss) in f32 on cuBLASLt and the kernels
 * of gpt2_cuda.cu.  Weights, activations and gradients are f32.
 */
#ifndef EXAMPLES_GPT2_GPT2_FP8_H
#define EXAMPLES_GPT2_GPT2_FP8_H

#include <stdint.h>

#include <accel/accel.h>

#include "gpt2.h"
#include "gpt2_cuda.h"

typedef struct gpt2_fp8 gpt2_fp8;

/* 1 when the context's mixed_precision is fp8. */
int gpt2_fp8_wanted(accel_ctx *ctx);
/* The compute_dtype of block tensor k of shape [out, in] under fp8:
 * f8e4m3 for the four linear weights when out and in are multiples of 16,
 * else 0 (f32). */
uint32_t gpt2_fp8_compute_dtype(int k, int64_t out, int64_t in);
/* After accel_prepare: the fp8 plugin's GEMM extension, a device work
 * space per fp8 weight for `rows` token rows, and gpu's linear hooks.
 * p_block: the [layers * GPT2_BLOCK_TENSORS] parameter indices.  Returns
 * an accel status (the message is in ctx); ACCEL_ERR_CONFIG when c->seq is
 * not a multiple of 16 (the weight gradients' FP8 GEMMs contract over the
 * token rows). */
int gpt2_fp8_new(accel_ctx *ctx, const gpt2_config *c, const uint32_t *p_block, int rows,
                 gpt2_cuda *gpu, int32_t device_index, gpt2_fp8 **ret);
/* Unhooks from the GPU work space; NULL. */
gpt2_fp8 *gpt2_fp8_free(gpt2_fp8 *f);

#endif
