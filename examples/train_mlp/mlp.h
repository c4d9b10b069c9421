/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/mlp.h: the math of a multi-layer perceptron classifier,
 * independent of accel (train_model.c drives it layer by layer).
 *
 * Layers fc0 .. fc{L}: fc{l} maps dims[l] -> dims[l+1]; its weight is
 * [out, in] row-major and its bias [out] (torch.nn.Linear's layout).  ReLU
 * follows every layer but the last; the last layer's outputs are logits of a
 * softmax cross-entropy loss.
 *
 * Forward and backward are per layer, so a training loop can wrap each
 * layer in accel's unit hooks.  Backward ACCUMULATES into the gradient
 * buffers (dW += ..., db += ...), as accel expects.  All matrices are
 * row-major with one sample per row.
 */
#ifndef TRAIN_MLP_MLP_H
#define TRAIN_MLP_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 16

typedef struct mlp_shape {
	int n_layers;                    /* Linear layers (hidden layers + 1)   */
	int dims[MLP_MAX_LAYERS + 1];    /* dims[0] inputs ... dims[n] classes  */
} mlp_shape;

/* Layers = hidden + 1.  Returns 0, or -1 if a size is out of range. */
int mlp_shape_init(mlp_shape *s, int inputs, int hidden, int n_hidden, int classes);
int mlp_max_dim(const mlp_shape *s);

/* ---- precision -------------------------------------------------------------
 * A bf16 or f16 program holds its weights, activations and activation
 * gradients in that dtype and computes each product in f32 (the f32
 * accumulation of a tensor-core GEMM).  On the CPU that is emulated
 * exactly: the 16-bit weights widen to f32 (exact), the SGEMM runs in f32,
 * and each result the program would store in 16 bits is rounded to the
 * nearest bf16/f16 value (ties to even, overflow to infinity) and kept in
 * an f32 slot.  Weight gradients stay f32 (accel's grad_dtype f32). */
enum { MLP_F32 = 0, MLP_BF16 = 1, MLP_F16 = 2 };

/* x[0..n) rounded in place to the nearest value of `prec` (no-op for f32). */
void mlp_round(float *x, size_t n, int prec);
/* dst[0..n) = the bf16 (prec MLP_BF16) or f16 (MLP_F16) values src[0..n). */
void mlp_widen(float *dst, const uint16_t *src, size_t n, int prec);
/* One value: f32 -> the bf16/f16 bit pattern, and back. */
uint16_t mlp_to_half(float x, int prec);
float mlp_from_half(uint16_t h, int prec);

/* Activations and gradients for batches of up to `cap` samples. */
typedef struct mlp_work {
	int cap;
	int prec;                        /* MLP_F32 (mlp_work_init), _BF16, _F16:
	                                    what activations and their gradients
	                                    are rounded to                       */
	float *act[MLP_MAX_LAYERS + 1];  /* act[l+1]: output of fc{l} (after ReLU
	                                    for hidden layers, logits for the
	                                    last); act[0] is the input (borrowed) */
	float *dact[2];                  /* ping-pong gradients wrt activations  */
} mlp_work;

int mlp_work_init(mlp_work *w, const mlp_shape *s, int cap);
void mlp_work_free(mlp_work *w);

/* fc{l} forward on n samples: y = x . W^T + b, then ReLU unless last.
 * x is w->act[l] (set w->act[0] to the input first); writes w->act[l+1],
 * rounded to w->prec. */
void mlp_forward_layer(const mlp_shape *s, mlp_work *w, int l, const float *W, const float *b,
                       int n);

/* Softmax cross-entropy of the logits w->act[n_layers] against labels.
 * Returns the SUM over the n samples of -log p(label) (double).  Writes
 * dlogits = (softmax - onehot) / denom into w->dact for backward: pass
 * denom = n for the gradient of the mean over these n samples; dlogits
 * are rounded to w->prec (the softmax and the loss are f32/f64).  correct
 * (optional) receives the number of argmax hits. */
double mlp_loss(const mlp_shape *s, mlp_work *w, const int64_t *labels, int n, double denom,
                int *ret_correct);

/* Loss and hits only (evaluation; no gradient). */
double mlp_eval_loss(const mlp_shape *s, const mlp_work *w, const int64_t *labels, int n,
                     int *ret_correct);

/* fc{l} backward on n samples after mlp_loss (and the backward of the layers
 * above): dW += dY^T . X, db += sum over rows of dY (with accumulate 0:
 * dW = ..., db = ..., overwriting them), and for l > 0 the gradient wrt
 * fc{l}'s input, through the ReLU of fc{l-1}, is left in w->dact for the
 * next (lower) layer, rounded to w->prec. */
void mlp_backward_layer(const mlp_shape *s, mlp_work *w, int l, const float *W, float *dW,
                        float *db, int n, int accumulate);

/* ---- data set --------------------------------------------------------------
 * Synthetic classification: each class is a mixture of `modes` Gaussian
 * clusters in R^D with centres drawn N(0, sep^2 / D) per coordinate (so
 * centre distances do not depend on D) and unit-variance isotropic noise
 * scaled by `noise`.  Everything derives from `seed`; sample i of a given
 * seed is the same whatever n is.  x is [n, D], y is [n] in 0..classes-1. */
typedef struct mlp_data {
	int64_t n;
	int dim, classes;
	float *x;
	int64_t *y;
} mlp_data;

/* first: index of the first sample (a test set is samples after the
 * training set of the same seed). */
int mlp_data_make(mlp_data *d, int64_t first, int64_t n, int dim, int classes, int modes,
                  double sep, double noise, uint64_t seed);
void mlp_data_free(mlp_data *d);

#endif
