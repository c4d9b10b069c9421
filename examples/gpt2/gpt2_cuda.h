/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_cuda.h: the math of gpt2.h on a CUDA GPU, for
 * accel-gpt2 --device cuda.  The same model, units, layouts (weights [out,
 * in] row-major, one token per row) and contract: backward functions ADD
 * into the parameter gradients.
 *
 * Parameters are device pointers that accel owns, in the working dtype
 * (f32, bf16 or f16: `prec`, GPT2_CUDA_F32/_BF16/_F16); gradients are f32
 * device pointers (the program registers grad_dtype f32).  Activations and
 * their gradients live here in the working dtype; LayerNorm statistics,
 * the softmax and the cross-entropy compute in f32.  GEMMs run on
 * cuBLASLt with f32 accumulation (f32: exact f32, no TF32); attention is
 * batched GEMMs over the heads around a causal softmax kernel that
 * materialises each head's T x T probabilities (kept for backward).
 *
 * Everything is enqueued on one stream, gpt2_cuda_stream(): the legacy
 * default stream until gpt2_cuda_use_stream() makes a non-blocking one
 * (the program hands it to accel_set_stream).  Calls return without
 * waiting, except gpt2_cuda_loss, gpt2_cuda_to_host and gpt2_cuda_sync.
 * Token arrays are host memory, copied at the call.
 *
 * Functions return 0, or -1 with a message for gpt2_cuda_error().  A build
 * without CUDA has the same functions (gpt2_cuda_none.c);
 * gpt2_cuda_device_count() then returns -1 and gpt2_cuda_new() fails.
 */
#ifndef EXAMPLES_GPT2_GPT2_CUDA_H
#define EXAMPLES_GPT2_GPT2_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GPT2_CUDA_F32, GPT2_CUDA_BF16, GPT2_CUDA_F16 };

typedef struct gpt2_cuda gpt2_cuda;

/* Number of CUDA devices (0 when none; -1 in a build without CUDA). */
int gpt2_cuda_device_count(void);

/* Work space for batches of up to B sequences on device `device` in
 * dtype prec; recompute: one shared set of block intermediates besides
 * each block's input (gpt2.h's work_init).  On failure *ret is NULL and
 * err (errcap bytes) says why. */
int gpt2_cuda_new(const gpt2_config *c, int B, int recompute, int device, int prec,
                  gpt2_cuda **ret, char *err, size_t errcap);
void gpt2_cuda_free(gpt2_cuda *g);
/* own 1: compute on a new non-blocking stream from now on; 0: on the
 * legacy default stream.  Waits for the device first.  The stream dies
 * with the next call or gpt2_cuda_free(): accel must let it go before. */
int gpt2_cuda_use_stream(gpt2_cuda *g, int own);
void *gpt2_cuda_stream(const gpt2_cuda *g);
const char *gpt2_cuda_error(const gpt2_cuda *g);
/* "cuBLASLt bf16 (f32 accumulation) on cuda:0 (NVIDIA H200)" */
const char *gpt2_cuda_name(const gpt2_cuda *g);
/* Bytes of device memory the activations (and their gradients) hold. */
size_t gpt2_cuda_work_bytes(const gpt2_cuda *g);

/* The units, as gpt2.h's (p: the block's GPT2_BLOCK_TENSORS device
 * tensors of the working dtype; gr: their f32 gradients). */
int gpt2_cuda_embed_forward(gpt2_cuda *g, const int32_t *tokens, const void *wte,
                            const void *wpe, int n);
int gpt2_cuda_block_forward(gpt2_cuda *g, int l, const void *const *p, int n);
int gpt2_cuda_head_forward(gpt2_cuda *g, const void *lnf_w, const void *lnf_b, const void *head,
                           int n);
/* Cross-entropy against targets [n*T] (host): *ret_sum = the sum over
 * tokens of -log p (waits for the device); when dlogits_scale != 0 the
 * logits become (softmax - onehot) * dlogits_scale for head_backward. */
int gpt2_cuda_loss(gpt2_cuda *g, const int32_t *targets, int n, double dlogits_scale,
                   double *ret_sum);
int gpt2_cuda_head_backward(gpt2_cuda *g, const void *lnf_w, const void *head, float *dlnf_w,
                            float *dlnf_b, float *dhead, int n);
int gpt2_cuda_block_backward(gpt2_cuda *g, int l, const void *const *p, float *const *gr, int n);
int gpt2_cuda_embed_backward(gpt2_cuda *g, float *dwte, float *dwpe, int n);

/* The V logits of token row `row` (of the last head_forward, before
 * gpt2_cuda_loss with a gradient) into host f32 (waits). */
int gpt2_cuda_logits_row(gpt2_cuda *g, int row, float *dst);
/* n values at device src of the working dtype (f32: f32_src 1) into host
 * f32 (waits). */
int gpt2_cuda_to_host(gpt2_cuda *g, float *dst, const void *src, size_t n, int f32_src);
/* Wait for everything enqueued on the stream. */
int gpt2_cuda_sync(gpt2_cuda *g);

/* mixed_precision fp8 (gpt2_fp8.c): the GEMMs of a block's linear layers
 * through the caller.  k names the weight (GPT2_QKV_W, GPT2_APROJ_W,
 * GPT2_FC_W, GPT2_MPROJ_W) of block l; fwd computes y[rows, out] =
 * x[rows, in] . W^T; bwd computes dx[rows, in] = dy . W and dW[out, in] +=
 * dy^T . x; all f32 device buffers, on gpt2_cuda_stream().  Each returns
 * 0 when it did the GEMMs, 1 to leave them to cuBLASLt here, -1 on
 * failure (after printing why).  Biases and their gradients stay here.
 * f32 work spaces only. */
typedef int (*gpt2_cuda_fwd_fn)(void *user, int l, int k, const void *x, void *y, int rows);
typedef int (*gpt2_cuda_bwd_fn)(void *user, int l, int k, const void *dy, void *dx, float *dW,
                                int rows);
int gpt2_cuda_set_linear_hooks(gpt2_cuda *g, gpt2_cuda_fwd_fn fwd, gpt2_cuda_bwd_fn bwd,
                               void *user);
/* bytes of device memory on g's GPU (a hook's work space); freed with
 * gpt2_cuda_free_mem, also after gpt2_cuda_free. */
int gpt2_cuda_alloc(gpt2_cuda *g, size_t bytes, void **ret);
void gpt2_cuda_free_mem(void *p);

#ifdef __cplusplus
}
#endif

#endif
