/* SPDX-License-Identifier: MIT */
/* tests/progs/parity-model.h: the model of tests/progs/train-parity.c and
 * tests/progs/zero-train.c (parity-model.c): 8 -> 16 -> 16 -> 4 (tanh,
 * tanh, linear) in three units, deterministic data, and one micro-step of
 * forward and backward in double adding f32 or bf16 gradients; the options,
 * set-up and training loop the two programs share, and the --compare and
 * context set-up tests/progs/tied-train.c shares with them. */
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

/* The options train-parity and zero-train share (parity_option). */
typedef struct parity_opts {
	long steps, batch;
	const char *hooks, *out, *out_ranks, *metrics, *dtype, *trace;
	int rank_init;
} parity_opts;
#define PARITY_OPTS_DEFAULT {6, 32, "all", NULL, NULL, NULL, "f32", NULL, 0}

/* argv[*i], when it is one of the shared options (--steps S, --batch B,
 * --hooks H, --out FILE, --out-ranks PREFIX, --metrics FILE, --dtype D,
 * --trace PREFIX, --rank-init): into *o, *i past its value; returns 1.
 * Returns 0 for any other argument. */
int parity_option(int argc, char **argv, int *i, parity_opts *o);

/* --compare A B [--rtol R] [--atol A] at argv[i] (i + 2 < argc): compare()'s
 * exit status. */
int parity_compare_main(int argc, char **argv, int i);

/* The job's shape: accumulation steps (the configuration's
 * gradient_accumulation_steps), world size, rank, and the samples of one
 * rank's micro-batch. */
typedef struct parity_job {
	int64_t gas;
	long world, rank, micro;
} parity_job;

/* A context (*ret_ctx, to be freed by the caller on 0) and the shape of
 * the job for a global batch of `batch` samples: 1 when the context cannot
 * be made, 2 when the batch is not a multiple of world x accumulation or
 * (max_micro > 0) a rank's micro-batch exceeds max_micro (message on
 * stderr; no context is left). */
int parity_ctx_new(long batch, long max_micro, accel_ctx **ret_ctx, parity_job *ret_job);

/* --trace PREFIX: this rank's g_trace, PREFIX.RANK.  Returns 1 (perror)
 * when it cannot be opened. */
int parity_open_trace(const char *trace, long rank);

/* Register the model's parameters in m->dtype, unit by unit (fc1 .. fc3);
 * fc1.bias's init adds *rank_shift x 0.5 (--rank-init). */
int parity_add_params(model *m, long *rank_shift);

/* What train-parity and zero-train do after their options: the context
 * and job (parity_ctx_new) into m->ctx and *job, m->dtype, --rank-init's
 * shift into *rank_shift (read at accel_prepare), --trace, the parameters.
 * Returns an exit status; m->ctx is NULL or the context either way. */
int parity_begin(model *m, const parity_opts *o, parity_job *job, long *rank_shift);

/* accel_prepare, --metrics, then parity_train. */
int parity_prepare_train(model *m, const parity_opts *o, const parity_job *job);

/* The end of train-parity's and zero-train's run with status r: when 0,
 * accel_wait_for_everyone; then the context freed and --trace closed.
 * Returns the exit status. */
int parity_end(model *m, int r);

/* `steps` optimizer steps of a global batch of `batch` samples, each rank
 * its share of each micro-batch, logging loss, lr, grad_norm and clip_coef
 * per step. */
int parity_train(model *m, const parity_job *job, long steps, long batch, const char *hooks);

#endif
