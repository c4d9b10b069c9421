/* SPDX-License-Identifier: MIT */
/* tests/progs/parity-model.h: the model of tests/progs/train-parity.c and
 * tests/progs/zero-train.c (parity-model.c): 8 -> 16 -> 16 -> 4 (tanh,
 * tanh, linear) in three units, deterministic data, and one micro-step of
 * forward and backward in double adding f32 or bf16 gradients. */
#ifndef ACCEL_TEST_PARITY_MODEL_H
#define ACCEL_TEST_PARITY_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "accel/accel.h"

#define NL 3
#define DMAX 16
#define N_SAMPLES 4096
extern const int dims[NL + 1];

/* The program's name in messages, defined by each program. */
extern const char *parity_prog;

typedef struct model {
	accel_ctx *ctx;
	uint32_t w[NL], b[NL];
	uint32_t dtype;
} model;

extern FILE *g_trace;      /* --trace: this rank's backward windows */
extern long g_micro;       /* micro-steps run so far */

void input(long i, double *x);
void target(long i, double *t);
/* fc1.bias's range callback; user NULL or a long added x 0.5 (per rank). */
int bias_init(void *user, const char *name, uint64_t offset, uint64_t count, float *dst);
double pget(const model *m, const void *p, long i);
void gadd(const model *m, void *g, long i, double v);
long long now_ns(void);
/* "PROG: what: the context's error" on stderr; returns 1. */
int fail(accel_ctx *ctx, const char *what);
/* One micro-batch: samples [first, first + n).  Returns the mean loss. */
int micro_step(model *m, long first, long n, const char *hooks, double *ret_loss);
/* --compare A B: per parameter tensor, max |a - b| <= rtol * max |a| + atol;
 * prints a summary; returns 0 when all pass, 3 when not (or the files do
 * not match up), 2 when one cannot be opened. */
int compare(const char *a, const char *b, double rtol, double atol);

#endif
