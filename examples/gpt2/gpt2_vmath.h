/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_vmath.h: the element-wise loops of gpt2_model.c's
 * float build that call exp/tanh (the loss's softmax over the vocabulary,
 * the attention softmax, GELU) and the row reductions around them.
 *
 * With libm's scalar exp and tanh these loops took about a third of a
 * training step of the ~10M model on the CPU (docs/benchmarks.md, "gpt2 on
 * the CPU").  Here they run 8 floats at a time with AVX2+FMA when the CPU
 * has both (checked at run time, so the binary stays portable), with a
 * polynomial exp accurate to about 2 ulp; otherwise with libm's expf and
 * tanhf one element at a time.  Both paths keep NaN and infinities as libm
 * does (a loss scaler relies on them to see an overflow).
 */
#ifndef EXAMPLES_GPT2_GPT2_VMATH_H
#define EXAMPLES_GPT2_GPT2_VMATH_H

#include <stddef.h>

/* max of x[0..n-1]; n >= 1 (NaN-propagation is not promised: a NaN row
 * gives a NaN result through the exp that follows anyway). */
float gpt2_vmath_max(const float *x, size_t n);

/* y[i] = exp(x[i] - shift) when y is not NULL (y may be x); returns the sum
 * of those values, accumulated in double. */
double gpt2_vmath_exp_sum(float *y, const float *x, float shift, size_t n);

/* x[i] *= s */
void gpt2_vmath_scale(float *x, float s, size_t n);

/* sum of x[i] * y[i], accumulated in double */
double gpt2_vmath_dot(const float *x, const float *y, size_t n);

/* GELU with the tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))) (y may be x). */
void gpt2_vmath_gelu_forward(float *y, const float *x, size_t n);

/* d[i] *= gelu'(x[i]) */
void gpt2_vmath_gelu_backward(float *d, const float *x, size_t n);

/* Which kernels run: 1 the AVX2+FMA ones, 0 the portable ones. */
int gpt2_vmath_simd(void);

/* For tests: on = 0 forces the portable kernels, 1 the AVX2+FMA ones where
 * the CPU has them, -1 back to the automatic choice.  Returns the kernels
 * now in use (gpt2_vmath_simd). */
int gpt2_vmath_force(int on);

#endif
