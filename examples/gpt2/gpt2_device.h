/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_device.h: accel-gpt2's device dispatch.  Each unit's
 * math runs on the CPU (gpt2.h, work space w) or, when gpu is not NULL, on
 * the GPU (gpt2_cuda.h); the training loop calls these and stays the same
 * for both.  Pointers are accel's: f32 (or f32 copies of 16-bit weights)
 * on the CPU, the working dtype on the GPU; gradients f32 on both.
 * Functions return 0, or -1 after printing what failed.
 */
#ifndef EXAMPLES_GPT2_GPT2_DEVICE_H
#define EXAMPLES_GPT2_GPT2_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <accel/accel.h>

#include "gpt2.h"
#include "gpt2_cuda.h"

/* --device DEV (cuda or cuda:N) before accel starts: 0, or the exit status
 * 2 (said on stderr) when this build has no CUDA, no GPU is visible, or N
 * is not one of them.  No fallback to the CPU. */
int gpt2_dev_check(const char *dev);
/* The GPU work space of this process (cuda: local rank modulo the GPUs)
 * for cap sequences in working dtype prec (GPT2_CUDA_*), on a
 * non-blocking stream that accel uses too (accel_set_stream).  Every rank
 * agrees first, so one out of memory stops all.  *ret_index: the CUDA
 * ordinal. */
int gpt2_dev_gpu_setup(accel_ctx *ctx, const gpt2_config *c, int cap, int recompute, int prec,
                       const char *dev, int32_t *ret_index, gpt2_cuda **ret);

int gpt2_dev_embed_forward(gpt2_work *w, gpt2_cuda *g, const int32_t *tokens, const float *wte,
                           const float *wpe, int n);
int gpt2_dev_block_forward(gpt2_work *w, gpt2_cuda *g, int l, const float *const *p, int n);
int gpt2_dev_head_forward(gpt2_work *w, gpt2_cuda *g, const float *lw, const float *lb,
                          const float *head, int n);
/* *ret_sum: the sum over tokens of -log p (gpt2_loss). */
int gpt2_dev_loss(gpt2_work *w, gpt2_cuda *g, const int32_t *targets, int n,
                  double dlogits_scale, double *ret_sum);
int gpt2_dev_head_backward(gpt2_work *w, gpt2_cuda *g, const float *lw, const float *head,
                           float *dlw, float *dlb, float *dhead, int n);
int gpt2_dev_block_backward(gpt2_work *w, gpt2_cuda *g, int l, const float *const *p,
                            float *const *gr, int n);
int gpt2_dev_embed_backward(gpt2_work *w, gpt2_cuda *g, float *dwte, float *dwpe, int n);
/* The V logits of token row `row` of the last forward: a pointer into the
 * CPU work space, or (GPU) copied into buf (V floats); NULL after saying
 * why. */
const float *gpt2_dev_logits_row(gpt2_work *w, gpt2_cuda *g, int row, int V, float *buf);
/* n values of a parameter's working copy (src, from accel or the f32
 * copy) into host f32 dst; f32_src: src holds f32 (GPU). */
int gpt2_dev_param_to_host(gpt2_cuda *g, float *dst, const float *src, size_t n, int f32_src);

#endif
