/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_mlp.h: the parts of the train_mlp program
 * (examples/README.md), private to it.  One concern per file:
 *
 *   train_mlp.c      main: set-up, the training loop, the end of the run
 *   train_options.c  the command line: --help and the flags
 *   train_model.c    the model as accel holds it: the working dtype, the
 *                    GPU, the registration, and forward and backward unit
 *                    by unit through accel's hooks, over mlp.c (CPU),
 *                    mlp_cuda.cu (--device cuda) or mlp_fp8.c (fp8 GEMMs)
 *   train_eval.c     loss and accuracy of the trained model
 *   train_files.c    output paths checked before any work, the safetensors
 *                    files, the checkpoint to resume
 *   train_timing.c   the clock, and the timing of the steps (--json)
 *
 * mlp.c is the model math, with no accel in it; st_write.c and
 * step_metrics.c are shared with examples/gpt2.  Functions that can fail
 * return 0, or -1 after saying on stderr what failed, unless their
 * declaration says otherwise.
 */
#ifndef TRAIN_MLP_TRAIN_MLP_H
#define TRAIN_MLP_TRAIN_MLP_H

#include <stddef.h>
#include <stdint.h>

#include <accel/accel.h>

#include "mlp.h"
#include "mlp_cuda.h"
#include "mlp_fp8.h"

/* The command line (train_options.c). */
typedef struct options {
	long steps;
	long warmup;            /* untimed optimizer steps before --steps */
	long batch;
	double lr;              /* < 0: from the configuration */
	int hidden, layers;
	long long seed;         /* < 0: from the configuration (`seed`) */
	long samples, test_samples;
	int inputs, classes, modes;
	double sep, noise;
	int no_shuffle;
	int no_eval;
	int legacy_stream;      /* --device cuda on CUDA's legacy default stream */
	int json;
	int log_every;
	const char *save_init;
	const char *save_final;
	const char *save_final_ranks;   /* PREFIX: rank r writes PREFIX.rank<r>.safetensors */
	long checkpoint_every;  /* 0: no checkpoints */
	const char *project_dir;
	const char *resume;     /* checkpoint directory or "latest" */
	const char *config;
	const char *metrics;
	const char *device;     /* NULL / "cpu", "cuda" or "cuda:N" */
	const char *sets[40];   /* 32 --set, lr, shuffle, seed, project_dir, NULL */
	int n_sets;
	long die_rank, die_step;   /* --die-at; die_step 0: never */
	const char *die_marker;
	int hang;                  /* --hang-at: stop there instead of dying */
	int slow;                  /* --crash-at: cut the connections, die 1 s later */
} options;

/* The program's state: the model as registered with accel, and buffers. */
typedef struct trainer {
	accel_ctx *ctx;
	mlp_shape shape;
	mlp_work work;
	uint32_t unit[MLP_MAX_LAYERS];     /* accel unit of fc{l}         */
	uint32_t weight[MLP_MAX_LAYERS];   /* accel parameter indices     */
	uint32_t bias[MLP_MAX_LAYERS];
	float *xb;                         /* this rank's batch inputs    */
	int64_t *yb;
	int64_t *idx;
	mlp_cuda *gpu;                     /* --device cuda, else NULL    */
	int32_t dev_index;                 /* its CUDA ordinal            */
	uint32_t dtype;                    /* working dtype (mixed_precision) */
	int fp8_on;                        /* mixed_precision fp8         */
	mlp_fp8 *fp8;                      /* its GEMMs, after prepare    */
	int prec;                          /* the same as MLP_F32/_BF16/_F16 */
	float *wf, *bf;                    /* CPU, 16-bit: a layer's weight and
	                                      bias widened to f32 for the BLAS */
} trainer;

/* Timing of the steps after --warmup: wall time per optimizer step, and
 * where the micro-steps spend it (for --json). */
#define TM_PHASES 5
typedef struct timing {
	int on;
	double t0, cpu0, last;   /* start (wall, process CPU), end of the last step */
	double *step_s;          /* wall time of each timed optimizer step */
	long n, micro;           /* timed optimizer steps, micro-steps */
	double phase[TM_PHASES]; /* seconds, summed over the timed micro-steps */
} timing;

/* A forward-only pass (accel_set_grad_enabled(ctx, 0)) around `rc = call`:
 * the unit hooks then tell a sharded strategy that no backward follows, so
 * it gathers each unit and frees it again (nothing kept or prefetched for
 * a backward). */
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

/* train_mlp.c */
/* An accel failure (accel's message for t->ctx) with what we were doing;
 * a failure of the GPU math (mlp_cuda_error).  Both return -1. */
int train_fail(const trainer *t, const char *what, int rc);
int train_gpu_fail(const trainer *t, const char *what);

/* train_options.c */
/* argv into *o: 0 ok, 1 --help was printed (exit successfully), -1 a
 * usage error was printed. */
int train_parse_args(int argc, char **argv, options *o);

/* train_model.c */
/* t->dtype and t->prec from the configuration's mixed_precision. */
int train_choose_dtype(trainer *t, const options *o, int on_gpu);
/* t->dev_index for --device cuda[:N]. */
int train_choose_gpu(trainer *t, const options *o);
/* fc0 .. fc{L} with accel: t->unit, t->weight, t->bias. */
int train_register_model(trainer *t);
/* n samples in t->work.act[0] (n 0: the hooks only). */
int train_forward(trainer *t, int n);
int train_backward(trainer *t, int n);
/* Samples idx[0 .. n) of d as this rank's batch (t->xb, t->yb; on a GPU,
 * gathered there). */
int train_load_batch(trainer *t, const mlp_data *d, const int64_t *idx, int n);

/* train_eval.c */
/* Mean loss and accuracy over d (set: 0 training, 1 held-out, the GPU's
 * copy), the same on every rank; collective. */
int train_evaluate(trainer *t, const mlp_data *d, int set, double *ret_loss, double *ret_acc);

/* train_files.c */
/* 1 (said on stderr) when path cannot be written as option opt: dir 1 a
 * directory, 2 a stream (pipe or device allowed), 0 a regular file;
 * made_dir: a directory made before path is written.  0 otherwise. */
int train_bad_output(const char *path, const char *opt, int dir, const char *made_dir);
/* The same for --save-final-ranks PREFIX (rank 0's file). */
int train_bad_ranks_output(const char *prefix, const char *made_dir);
int train_make_dir(const char *dir);
/* The parameters as f32 safetensors at path with n_meta metadata pairs,
 * from the main process, or every rank when every_rank; collective. */
int train_save_params(trainer *t, const char *path, const char *const *meta, int n_meta,
                      int every_rank);
/* DIR/data.safetensors: the data set d. */
int train_save_data(const char *dir, const mlp_data *d, const char *const *meta, int n_meta);
/* --resume's checkpoint directory into buf. */
int train_resume_dir(accel_ctx *ctx, const options *o, char *buf, size_t cap);

/* train_timing.c */
/* Seconds: CLOCK_MONOTONIC, and this process's CPU time. */
double train_now(void);
double train_cpu_now(void);
/* Timing starts (after the device finished the work before it). */
int train_timing_start(trainer *t, timing *tm);
/* One optimizer step timed. */
void train_timing_step(timing *tm);
/* The --json line on stdout. */
void train_timing_json(const trainer *t, timing *tm, const options *o, int rank, int world,
                       const char *dims, double elapsed, double cpu);

#endif
