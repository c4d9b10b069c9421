/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/mlp.h: the math of a multi-layer perceptron classifier,
 * independent of accel (the training loop in train_mlp.c drives it).
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

#include <stdint.h>

#define MLP_MAX_LAYERS 16

typedef struct mlp_shape {
	int n_layers;                    /* Linear layers (hidden layers + 1)   */
	int dims[MLP_MAX_LAYERS + 1];    /* dims[0] inputs ... dims[n] classes  */
} mlp_shape;

/* Layers = hidden + 1.  Returns 0, or -1 if a size is out of range. */
int mlp_shape_init(mlp_shape *s, int inputs, int hidden, int n_hidden, int classes);
int mlp_max_dim(const mlp_shape *s);

/* Activations and gradients for batches of up to `cap` samples. */
typedef struct mlp_work {
	int cap;
	float *act[MLP_MAX_LAYERS + 1];  /* act[l+1]: output of fc{l} (after ReLU
	                                    for hidden layers, logits for the
	                                    last); act[0] is the input (borrowed) */
	float *dact[2];                  /* ping-pong gradients wrt activations  */
} mlp_work;

int mlp_work_init(mlp_work *w, const mlp_shape *s, int cap);
void mlp_work_free(mlp_work *w);

/* fc{l} forward on n samples: y = x . W^T + b, then ReLU unless last.
 * x is w->act[l] (set w->act[0] to the input first); writes w->act[l+1]. */
void mlp_forward_layer(const mlp_shape *s, mlp_work *w, int l, const float *W, const float *b,
                       int n);

/* Softmax cross-entropy of the logits w->act[n_layers] against labels.
 * Returns the SUM over the n samples of -log p(label) (double).  Writes
 * dlogits = (softmax - onehot) / denom into w->dact for backward: pass
 * denom = n for the gradient of the mean over these n samples.  correct
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
 * next (lower) layer. */
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
