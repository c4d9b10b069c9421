/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/train_gpt2.h: the parts of the accel-gpt2 program
 * (docs/gpt2.md), private to it.  One concern per file:
 *
 *   train_gpt2.c     main: set-up, the training loop, the end of the run;
 *                    `accel-gpt2 prepare`
 *   train_options.c  the command line: --help and the flags
 *   train_model.c    the model as accel holds it: the working dtype, the
 *                    registration of units and parameters, and forward and
 *                    backward unit by unit through accel's hooks
 *                    (gpt2_device.c runs each unit's math on the CPU or
 *                    the GPU)
 *   train_eval.c     the held-out loss, and the greedy sample
 *   train_files.c    the final parameters (safetensors), the checkpoint to
 *                    resume, the metrics file
 *
 * gpt2_model.c is the model math, gpt2_data.c the token files and the
 * batch reader; st_write.c and step_metrics.c are train_mlp's.  Functions
 * that can fail return 0, or -1 after saying on stderr what failed (but
 * train_sample and train_save_final say nothing when out of memory),
 * unless their declaration says otherwise.
 */
#ifndef EXAMPLES_GPT2_TRAIN_GPT2_H
#define EXAMPLES_GPT2_TRAIN_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include <accel/accel.h>

#include "gpt2.h"
#include "gpt2_cuda.h"
#include "gpt2_data.h"
#include "gpt2_fp8.h"
#include "mlp.h"

/* The command line (train_options.c). */
typedef struct options {
	gpt2_config c;
	int untied, recompute, log_every;
	long steps, batch, eval_every, eval_batches, sample, checkpoint_every;
	double lr, val_fraction, peak_tflops;
	long long seed;
	long random_tokens;
	const char *data, *save_final, *project_dir, *resume, *config;
	const char *device;   /* NULL / "cpu", "cuda" or "cuda:N" */
	const char *save_final_ranks, *metrics;
	const char *sets[40];
	int n_sets;
} options;

/* 16-bit working weights widened to f32 for the BLAS, activations rounded
 * to 16 bits (gpt2.h, gpt2_work.prec): the mixed_precision of train_mlp on
 * the CPU, whose conversions (mlp.h) these are; f32 masters and gradients
 * in accel. */
enum { PREC_F32 = MLP_F32, PREC_BF16 = MLP_BF16, PREC_F16 = MLP_F16 };

typedef struct trainer {
	accel_ctx *ctx;
	gpt2_config c;
	int tied, prec, world;
	uint32_t dtype;
	uint32_t u_embed, u_head, *u_block;
	uint32_t p_wte, p_wpe, p_lnf_w, p_lnf_b, p_head, *p_block;   /* [L * 12] */
	gpt2_work w;
	float *wide[GPT2_BLOCK_TENSORS + 3];   /* 16-bit: f32 copies of a unit's weights */
	int cap;                               /* sequences per rank per micro-step */
	gpt2_cuda *gpu;                        /* --device cuda, else NULL */
	int32_t dev_index;                     /* its CUDA ordinal */
	int recompute;                         /* --recompute */
	int fp8_on;                            /* mixed_precision fp8 (GPU only) */
	gpt2_fp8 *fp8;                         /* its GEMMs, after accel_prepare */
	uint32_t cdt;                          /* compute_dtype of the next add_param */
} trainer;

/* A forward-only pass (accel_set_grad_enabled(ctx, 0)) around `rc = call`:
 * the unit hooks then tell a sharded strategy that no backward follows. */
#define FORWARD_ONLY(t, rc, call)                                                   \
	do {                                                                            \
		int fo_rc_;                                                                 \
		if ((fo_rc_ = accel_set_grad_enabled((t)->ctx, 0))) {                       \
			(rc) = train_fail((t), "starting a forward-only pass", fo_rc_);          \
			break;                                                                  \
		}                                                                           \
		(rc) = (call);                                                              \
		if ((fo_rc_ = accel_set_grad_enabled((t)->ctx, 1)) && !(rc))                 \
			(rc) = train_fail((t), "ending a forward-only pass", fo_rc_);            \
	} while (0)

/* train_gpt2.c */
/* An accel failure (accel's message for t->ctx) with what we were doing;
 * returns -1. */
int train_fail(const trainer *t, const char *what, int rc);

/* train_options.c */
/* argv into *o: 0 ok, 1 --help was printed (exit successfully), -1 a
 * usage error was printed. */
int train_parse_args(int argc, char **argv, options *o);

/* train_model.c */
/* t->dtype, t->prec and t->fp8_on from the configuration's
 * mixed_precision. */
int train_choose_dtype(trainer *t);
/* The units embed, h.<l>, head and their parameters with accel
 * (t->u_*, t->p_*). */
int train_register_model(trainer *t);
/* The f32 values of parameter p: accel's, or (CPU, 16-bit) widened into
 * t->wide[slot]; on a GPU the device's working copy.  NULL outside the
 * parameter's unit hooks. */
const float *train_weights(trainer *t, uint32_t p, int slot);
/* n sequences of tokens (n 0: the hooks only, so every rank makes the same
 * collective calls). */
int train_forward(trainer *t, const int32_t *tokens, int n);
int train_backward(trainer *t, int n);

/* train_eval.c */
/* Mean held-out loss per token over `batches` batches (0: all), the same
 * on every rank; collective. */
int train_evaluate(trainer *t, const gpt2_stream *val, long batches, double *ret_loss);
/* n_new greedy tokens after a held-out prompt, printed by rank 0;
 * collective. */
int train_sample(trainer *t, const gpt2_stream *val, long n_new);

/* train_files.c */
/* The parameters as f32 safetensors at path, from the main process, or
 * from every rank when all_ranks (its rank in the metadata); collective. */
int train_save_final(trainer *t, const char *path, long steps, int all_ranks);
/* --resume's checkpoint directory into buf. */
int train_resume_dir(accel_ctx *ctx, const options *o, char *buf, size_t cap);
/* The metrics file (path, else the configuration's metrics_file) opened
 * on rank 0, every rank agreeing; *ret_log: progress is to be logged. */
int train_open_metrics(trainer *t, const char *path, int *ret_log);
/* A held-out loss as its own metrics record (when log_metrics). */
int train_log_val_loss(trainer *t, int log_metrics, long step, double loss);

#endif
