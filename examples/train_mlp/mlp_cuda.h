/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/mlp_cuda.h: the math of mlp.h on a CUDA GPU, for
 * train_mlp --device cuda.  The same model, loss and layouts (weights
 * [out, in] row-major, one sample per row); GEMMs through cuBLASLt in f32
 * (exact f32 arithmetic, no TF32) or bf16/f16 with f32 accumulation, and small
 * kernels for the bias, ReLU, softmax cross-entropy, the bias gradient and
 * the batch gather.  Parameters and gradients are device pointers that
 * accel owns (of the working dtype); activations, the data set and the
 * loss sums live here.
 *
 * Everything is enqueued on one stream, mlp_cuda_stream(): the legacy
 * default stream until mlp_cuda_use_stream() makes a non-blocking one of
 * its own (train_mlp then hands it to accel_set_stream, so accel's ops,
 * optimizer and collectives order themselves after it without host
 * syncs; docs/streams.md).  Calls return without waiting, except the
 * ones that say they wait.  The loss of the
 * training steps is summed on the device and read only when asked for, so
 * a step has no host round trip of its own.
 *
 * Functions return 0, or -1 with a message for mlp_cuda_error().  A build
 * without CUDA has the same functions; mlp_cuda_new() then fails saying so.
 */
#ifndef TRAIN_MLP_MLP_CUDA_H
#define TRAIN_MLP_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlp_cuda mlp_cuda;

/* Number of CUDA devices (0 when none; -1 in a build without CUDA). */
int mlp_cuda_device_count(void);

/* Work space for batches of up to cap samples on device `device`, in f32
 * (half MLP_F32), bf16 (MLP_BF16) or f16 (MLP_F16): activations,
 * parameters and gradients in that dtype.  The training and test sets are
 * copied to the device (test may have n 0).  On failure *ret is NULL and err (errcap
 * bytes) says why. */
int mlp_cuda_new(const mlp_shape *s, int cap, int device, int half, const mlp_data *train,
                 const mlp_data *test, mlp_cuda **ret, char *err, size_t errcap);
void mlp_cuda_free(mlp_cuda *g);
/* own 1: from now on compute on a new non-blocking stream of the device
 * (cudaStreamNonBlocking); 0: on the legacy default stream (the start).
 * Waits for the device first.  The stream is destroyed by the next call or
 * mlp_cuda_free(): whoever was given it (accel_set_stream) must let it go
 * before. */
int mlp_cuda_use_stream(mlp_cuda *g, int own);
/* The stream of every launch (a cudaStream_t; NULL: the legacy stream). */
void *mlp_cuda_stream(const mlp_cuda *g);
/* The last failure's message. */
const char *mlp_cuda_error(const mlp_cuda *g);
/* "cuBLASLt f32 on <device name>" (or bf16, f16). */
const char *mlp_cuda_name(const mlp_cuda *g);

/* The input of the next forward: training samples idx[0..n) (host
 * indices, copied at once), or samples first..first+n-1 of the training
 * (set 0) or test (set 1) set.  Also sets the labels of the batch. */
int mlp_cuda_load_batch(mlp_cuda *g, const int64_t *idx, int n);
int mlp_cuda_load_slice(mlp_cuda *g, int set, int64_t first, int n);

/* fc{l} forward on n samples (W [out, in], b [out], device pointers of the
 * working dtype). */
int mlp_cuda_forward_layer(mlp_cuda *g, int l, const void *W, const void *b, int n);
/* Softmax cross-entropy of the logits against the batch labels:
 * dlogits = (softmax - onehot) / denom for backward, and weight * (the sum
 * over the n samples of -log p(label)) added to the training loss sum. */
int mlp_cuda_loss(mlp_cuda *g, int n, double denom, double weight);
/* fc{l} backward after mlp_cuda_loss (and the layers above): dW (+)= dY^T X,
 * db (+)= column sums of dY (accumulate 0 overwrites), dX for the layer
 * below through its ReLU. */
int mlp_cuda_backward_layer(mlp_cuda *g, int l, const void *W, void *dW, void *db, int n,
                            int accumulate);
/* Evaluation: the loss sum and the argmax hits of the batch's logits are
 * added to the evaluation sums (no gradient). */
int mlp_cuda_eval(mlp_cuda *g, int n);

/* Wait for the device, then read and zero the training loss sum
 * (ret_train) and the evaluation sums (loss, hits); NULL skips one. */
int mlp_cuda_take_train_loss(mlp_cuda *g, double *ret_train);
int mlp_cuda_take_eval(mlp_cuda *g, double *ret_loss, double *ret_hits);
/* n values of the working dtype at device src into host f32 (waits). */
int mlp_cuda_to_host(mlp_cuda *g, float *dst, const void *src, size_t n);
/* Wait for everything enqueued on the device (every stream). */
int mlp_cuda_sync(mlp_cuda *g);

/* mixed_precision fp8 (mlp_fp8.c): the GEMMs of chosen layers through the
 * caller.  fwd computes y[n, out] = x[n, in] . W^T of fc{l}; bwd computes
 * dW (+)= dY^T X (accumulate) and, when dx is not NULL, dX = dY . W; all
 * f32 device buffers, on mlp_cuda_stream().  Each returns 0 when it did
 * the layer, 1 to leave it to this file's cuBLASLt GEMMs, -1 on failure
 * (after printing why).  The bias, ReLU and their gradients stay here.
 * f32 work spaces only (bf16 0 in mlp_cuda_new). */
typedef int (*mlp_cuda_fwd_fn)(void *user, int l, const void *x, void *y, int n);
typedef int (*mlp_cuda_bwd_fn)(void *user, int l, const void *dy, void *dx, void *dW, int n,
                               int accumulate);
int mlp_cuda_set_gemm_hooks(mlp_cuda *g, mlp_cuda_fwd_fn fwd, mlp_cuda_bwd_fn bwd, void *user);
/* bytes of device memory on g's GPU (a hook's work space); freed with
 * mlp_cuda_free_mem, also after mlp_cuda_free. */
int mlp_cuda_alloc(mlp_cuda *g, size_t bytes, void **ret);
void mlp_cuda_free_mem(void *p);

#ifdef __cplusplus
}
#endif

#endif
