/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/train_gpt2.c: train GPT-2 with accel (docs/gpt2.md).  The
 * strategy (ddp, zero, fsdp), precision and accumulation come from the
 * accel configuration; the program is the same under all of them.  Like
 * train_mlp, the run computes the same model at any world size up to
 * floating-point reassociation: --batch-size is the global batch of
 * sequences (the sampler gives each rank a contiguous slice), each rank's
 * loss is the mean over its slice, and initial values come from accel's
 * seeded per-parameter generator.
 *
 * Units: "embed" (wte, wpe), "h.<l>" for each block, "head" (ln_f and the
 * LM head, which is the token embedding wte: a parameter the head unit
 * also uses, accel_unit_use_param; --untied gives the head its own weight).
 *
 *   accel-gpt2 prepare IN OUT       byte-level token file from a text file
 *   accel-gpt2 [options]            train (see --help)
 *
 * This file is the set-up and the training loop; train_gpt2.h lists the
 * files with the rest (the command line, the model's registration and its
 * forward and backward through accel's hooks, evaluation and sampling,
 * output files).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <accel/accel.h>

#include "blas.h"
#include "gpt2_device.h"
#include "step_metrics.h"
#include "train_gpt2.h"

int train_fail(const trainer *t, const char *what, int rc)
{
	const char *msg = t->ctx && *accel_errmsg(t->ctx) ? accel_errmsg(t->ctx) : "no message";
	size_t n = strlen(what);
	/* the library's message may name the call already ("accel_prepare: ...") */
	if (!strncmp(msg, what, n) && msg[n] == ':')
		fprintf(stderr, "accel-gpt2: %s (%s)\n", msg, accel_status_str(rc));
	else
		fprintf(stderr, "accel-gpt2: %s: %s (%s)\n", what, msg, accel_status_str(rc));
	return -1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int prepare_main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: accel-gpt2 prepare IN OUT (any file; its bytes become tokens "
		        "of a vocabulary of 256)\n");
		return 2;
	}
	char err[600];
	uint64_t n;
	if (gpt2_prepare_bytes(argv[2], argv[3], &n, err, sizeof(err))) {
		fprintf(stderr, "accel-gpt2 prepare: %s\n", err);
		return 1;
	}
	printf("accel-gpt2 prepare: %s: %llu tokens (vocabulary 256) from %s\n", argv[3],
	       (unsigned long long)n, argv[2]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "prepare"))
		return prepare_main(argc, argv);
	options o;
	trainer t = {0};
	gpt2_tokens toks = {0};
	gpt2_stream train, val;
	gpt2_reader rd = {0};
	accel_sampler *sampler = NULL;
	int64_t *idx = NULL;
	int ret = EXIT_FAILURE, rc;
	char lr_set[64], seed_set[64], err[600];

	switch (train_parse_args(argc, argv, &o)) {
	case 1: return EXIT_SUCCESS;
	case -1: return 2;
	}
	int on_gpu = o.device && strcmp(o.device, "cpu") != 0;
	if (on_gpu && (rc = gpt2_dev_check(o.device)))
		return rc;
	t.recompute = o.recompute;
	t.c = o.c;
	t.tied = !o.untied;
	if (o.lr > 0) {
		snprintf(lr_set, sizeof(lr_set), "optimizer.params.lr=%.17g", o.lr);
		o.sets[o.n_sets++] = lr_set;
	}
	if (o.seed >= 0) {
		snprintf(seed_set, sizeof(seed_set), "seed=%lld", o.seed);
		o.sets[o.n_sets++] = seed_set;
	}
	o.sets[o.n_sets] = NULL;
	blas_single_thread();

	accel_opts ao = {.struct_size = sizeof(ao), .config_path = o.config, .sets = o.sets};
	if ((rc = accel_ctx_new(&ao, &t.ctx))) {
		train_fail(&t, "starting accel", rc);
		goto out;
	}
	t.world = accel_world_size(t.ctx);
	if (o.batch % t.world) {
		fprintf(stderr, "accel-gpt2: --batch-size %ld is not a multiple of the %d processes\n",
		        o.batch, t.world);
		ret = 2;
		goto out;
	}
	t.cap = (int)(o.batch / t.world);
	int64_t seed;
	if ((rc = accel_config_int(t.ctx, "seed", &seed))) {
		train_fail(&t, "reading the configuration key 'seed'", rc);
		goto out;
	}
	if (train_choose_dtype(&t))
		goto out;
	if (t.fp8_on && !on_gpu) {
		fprintf(stderr, "accel-gpt2: mixed_precision=fp8 runs on --device cuda only (the "
		        "fp8 plugin's GEMMs for the blocks' linear layers); on the CPU use no, bf16 "
		        "or fp16\n");
		ret = 2;
		goto out;
	}
	int log_metrics = 0;
	if (train_open_metrics(&t, o.metrics, &log_metrics))
		goto out;

	/* the tokens */
	if (o.data) {
		if (gpt2_tokens_open(&toks, o.data, err, sizeof(err))) {
			fprintf(stderr, "accel-gpt2: --data %s\n", err);
			ret = 2;
			goto out;
		}
		if ((int)toks.vocab > t.c.vocab) {
			fprintf(stderr, "accel-gpt2: --data %s has a vocabulary of %u, the model %d (set "
			        "--vocab %u)\n", o.data, toks.vocab, t.c.vocab, toks.vocab);
			ret = 2;
			goto out;
		}
	} else if (gpt2_tokens_random(&toks, (uint64_t)o.random_tokens, (uint32_t)t.c.vocab,
	                              (uint64_t)seed)) {
		fprintf(stderr, "accel-gpt2: out of memory for the random tokens\n");
		goto out;
	}
	uint64_t n_val = (uint64_t)((double)toks.n * o.val_fraction), n_train = toks.n - n_val;
	gpt2_stream_init(&train, &toks, 0, n_train, t.c.seq);
	gpt2_stream_init(&val, &toks, n_train, n_val, t.c.seq);
	if (train.n_samples < (uint64_t)o.batch) {
		fprintf(stderr, "accel-gpt2: %llu training tokens make %llu sequences of %d (+1), fewer "
		        "than one global batch of %ld: use more data, a shorter --seq-len or a smaller "
		        "--batch-size\n", (unsigned long long)n_train,
		        (unsigned long long)train.n_samples, t.c.seq, o.batch);
		ret = 2;
		goto out;
	}

	accel_sampler_opts so;
	accel_sampler_opts_init(&so);
	so.n_samples = train.n_samples;
	so.batch_size = (uint64_t)o.batch;
	so.split_batches = 1;
	if ((rc = accel_sampler_new(t.ctx, &so, &sampler))) {
		train_fail(&t, "creating the sampler", rc);
		goto out;
	}
	t.u_block = calloc((size_t)t.c.layers, sizeof(uint32_t));
	t.p_block = calloc((size_t)t.c.layers * GPT2_BLOCK_TENSORS, sizeof(uint32_t));
	idx = malloc((size_t)t.cap * sizeof(int64_t));
	if (!t.u_block || !t.p_block || !idx ||
	    (!on_gpu && gpt2_work_init(&t.w, &t.c, t.cap, o.recompute)) ||
	    gpt2_reader_start(&rd, &train, t.cap)) {
		fprintf(stderr, "accel-gpt2: out of memory for the activations\n");
		goto out;
	}
	if (on_gpu && gpt2_dev_gpu_setup(t.ctx, &t.c, t.cap, t.recompute,
	                                  t.prec == PREC_BF16  ? GPT2_CUDA_BF16
	                                  : t.prec == PREC_F16 ? GPT2_CUDA_F16
	                                                       : GPT2_CUDA_F32,
	                                  o.device, &t.dev_index, &t.gpu))
		goto out;
	t.w.prec = t.prec;   /* 16-bit activations with 16-bit weights (CPU) */
	if (t.prec != PREC_F32 && !on_gpu) {
		size_t C = (size_t)t.c.dim, big = (size_t)t.c.vocab * C;
		for (int k = 0; k < GPT2_BLOCK_TENSORS + 3; k++) {
			size_t n = k == GPT2_BLOCK_TENSORS || k == GPT2_BLOCK_TENSORS + 2 ? big
			           : k == GPT2_BLOCK_TENSORS + 1 ? (size_t)t.c.seq * C
			                                         : 4 * C * C;
			if (!(t.wide[k] = malloc((n > big ? n : big) * sizeof(float)))) {
				fprintf(stderr, "accel-gpt2: out of memory for the f32 weight copies\n");
				goto out;
			}
		}
	}
	if (train_register_model(&t))
		goto out;
	if ((rc = accel_prepare(t.ctx))) {
		train_fail(&t, "accel_prepare", rc);
		goto out;
	}
	if (t.fp8_on && (rc = gpt2_fp8_new(t.ctx, &t.c, t.p_block, t.cap * t.c.seq, t.gpu,
	                                   t.dev_index, &t.fp8))) {
		train_fail(&t, "mixed_precision fp8", rc);
		goto out;
	}
	if (accel_is_main(t.ctx) && o.checkpoint_every && mkdir(o.project_dir, 0777) &&
	    errno != EEXIST) {
		fprintf(stderr, "accel-gpt2: cannot create --project-dir %s: %s\n", o.project_dir,
		        strerror(errno));
		goto out;
	}
	double fpt = gpt2_flops_per_token(&t.c);
	accel_print(t.ctx, "accel-gpt2: %d layers, %d heads, dim %d, seq %d, vocab %d, %s head, "
	            "%lld parameters; %d process%s, global batch %ld x %d tokens, %s, BLAS %s%s, "
	            "lr %g\n", t.c.layers, t.c.heads, t.c.dim, t.c.seq, t.c.vocab,
	            t.tied ? "tied" : "untied", (long long)gpt2_n_params(&t.c, t.tied), t.world,
	            t.world > 1 ? "es" : "", o.batch, t.c.seq, o.data ? o.data : "random tokens",
	            blas_name(), t.prec == PREC_BF16 ? ", bf16 weights and activations"
	                         : t.prec == PREC_F16 ? ", f16 weights and activations" : "",
	            accel_get_lr(t.ctx));
	if (!t.tied)
		accel_print(t.ctx, "accel-gpt2: --untied: the LM head has its own weight\n");
	if (t.gpu)
		accel_print(t.ctx, "accel-gpt2: --device %s: %s%s\n", o.device, gpt2_cuda_name(t.gpu),
		            t.fp8 ? "; the blocks' linear layers in fp8 (the fp8 plugin)" : "");

	long done = 0;
	if (o.resume) {
		char dir[4096];
		int32_t bad = train_resume_dir(t.ctx, &o, dir, sizeof(dir)) ? 1 : 0;
		if ((rc = accel_allreduce(t.ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
			train_fail(&t, "agreeing on --resume", rc);
			goto out;
		}
		if (bad) {
			ret = 2;
			goto out;
		}
		if ((rc = accel_load_state(t.ctx, dir))) {
			train_fail(&t, "--resume: accel_load_state", rc);
			goto out;
		}
		done = (long)accel_get_step(t.ctx);
		accel_print(t.ctx, "resumed from %s at step %ld\n", dir, done);
	}

	/* The reader gathers batch k+1 while batch k computes.  The sampler
	 * then stands one batch ahead; a checkpoint saves the state from
	 * before that batch (`before`), so a resume reads it again. */
	accel_sampler_state before = {.struct_size = sizeof(before)}, ahead = {.struct_size = sizeof(ahead)};
	uint32_t count = 0, next_count = 0;
#define FETCH()                                                                       \
	do {                                                                              \
		do {                                                                          \
			if ((rc = accel_sampler_get_state(sampler, &before)) ||                   \
			    (rc = accel_sampler_next(sampler, idx, &next_count))) {               \
				train_fail(&t, "sampler", rc);                                        \
				goto out;                                                             \
			}                                                                         \
		} while (next_count == 0);                                                    \
		gpt2_reader_submit(&rd, idx, (int)next_count);                                \
	} while (0)
	if (done < o.steps)
		FETCH();
	double t_log = now(), window[2] = {0, 0}, tok_since = 0;
	long micro = 0;
	while (done < o.steps) {
		int32_t *inp, *tgt;
		gpt2_reader_take(&rd, &inp, &tgt);
		count = next_count;
		FETCH();
		if (train_forward(&t, inp, (int)count))
			goto out;
		double scale = accel_loss_scale(t.ctx), denom = (double)count * t.c.seq;
		double loss;
		if (gpt2_dev_loss(&t.w, t.gpu, tgt, (int)count, scale / denom, &loss))
			goto out;
		loss /= denom;
		if (train_backward(&t, (int)count))
			goto out;
		int sync = accel_sync_gradients(t.ctx);
		if ((rc = accel_step(t.ctx))) {
			train_fail(&t, "accel_step", rc);
			goto out;
		}
		micro++;
		window[0] += loss;
		window[1] += 1;
		tok_since += (double)o.batch * t.c.seq;
		if (!sync)
			continue;
		done++;
		if (done % o.log_every == 0 || done == o.steps) {
			if ((rc = accel_allreduce(t.ctx, window, window, 2, ACCEL_DTYPE_F64,
			                          ACCEL_RED_AVG))) {
				train_fail(&t, "reducing the loss", rc);
				goto out;
			}
			double tn = now(), tps = tok_since / (tn - t_log);
			char mfu[64] = "";
			if (o.peak_tflops > 0)
				snprintf(mfu, sizeof(mfu), ", MFU %.1f%%",
				         100 * tps * fpt / (o.peak_tflops * 1e12 * t.world));
			accel_print(t.ctx, "step %ld loss %.6f lr %.3g tokens/s %.0f (%.3f TFLOP/s)%s\n",
			            done, window[0] / window[1], accel_get_lr(t.ctx), tps,
			            tps * fpt * 1e-12, mfu);
			if (log_metrics) {
				const char *xk[] = {"tokens_per_s", "tflops", "mfu"};
				double xv[] = {tps, tps * fpt * 1e-12,
				               o.peak_tflops > 0 ? tps * fpt / (o.peak_tflops * 1e12 * t.world)
				                                 : 0};
				if ((rc = step_metrics_log(t.ctx, (uint64_t)done, window[0] / window[1],
				                           tps / t.c.seq, o.peak_tflops > 0 ? 3 : 2, xk, xv))) {
					train_fail(&t, "writing metrics", rc);
					goto out;
				}
			}
			window[0] = window[1] = 0;
			tok_since = 0;
			t_log = now();
		}
		if (o.eval_every && done % o.eval_every == 0 && done < o.steps) {
			double vl;
			if (train_evaluate(&t, &val, o.eval_batches, &vl))
				goto out;
			accel_print(t.ctx, "step %ld held-out loss %.6f\n", done, vl);
			if (train_log_val_loss(&t, log_metrics, done, vl))
				goto out;
			t_log = now();
		}
		if (o.checkpoint_every && done % o.checkpoint_every == 0) {
			char dir[4096];
			snprintf(dir, sizeof(dir), "%s/checkpoint_%ld", o.project_dir, done);
			if ((rc = accel_sampler_get_state(sampler, &ahead)) ||
			    (rc = accel_sampler_restore(sampler, &before)) ||
			    (rc = accel_save_state(t.ctx, dir)) ||
			    (rc = accel_sampler_restore(sampler, &ahead))) {
				train_fail(&t, "saving a checkpoint", rc);
				goto out;
			}
			accel_print(t.ctx, "saved checkpoint %s\n", dir);
			t_log = now();
		}
	}
	(void)micro;
	if (val.n_samples > 0) {
		double vl;
		if (train_evaluate(&t, &val, o.eval_batches, &vl))
			goto out;
		accel_print(t.ctx, "final held-out loss %.6f (step %ld)\n", vl, done);
		if (train_log_val_loss(&t, log_metrics, done, vl))
			goto out;
	}
	if (o.sample > 0 && val.n_samples > 0 && train_sample(&t, &val, o.sample))
		goto out;
	uint64_t cur = 0, peak = 0;
	if (accel_memory_stats(t.ctx, ACCEL_MEM_ALL, t.gpu ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU,
	                       t.gpu ? t.dev_index : 0, &cur, &peak) == ACCEL_OK)
		accel_print(t.ctx, "memory per rank: accel %.1f MiB (peak %.1f MiB), activations "
		            "%.1f MiB%s\n", (double)cur / 1048576.0, (double)peak / 1048576.0,
		            (double)(t.gpu ? gpt2_cuda_work_bytes(t.gpu) : gpt2_work_bytes(&t.w)) /
		                    1048576.0,
		            o.recompute ? " (recompute)" : "");
	if (o.save_final) {
		if (train_save_final(&t, o.save_final, done, 0))
			goto out;
		accel_print(t.ctx, "saved %s\n", o.save_final);
	}
	if (o.save_final_ranks) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.rank%d.safetensors", o.save_final_ranks,
		         accel_rank(t.ctx));
		if (train_save_final(&t, path, done, 1))
			goto out;
		accel_print(t.ctx, "saved %s.rank<r>.safetensors, r < %d\n", o.save_final_ranks,
		            t.world);
	}
	ret = EXIT_SUCCESS;
out:
	gpt2_reader_stop(&rd);
	sampler = accel_sampler_free(sampler);
	t.ctx = accel_ctx_free(t.ctx);   /* first: it lets go of the GPU's stream */
	t.fp8 = gpt2_fp8_free(t.fp8);   /* unhooks from t.gpu: first */
	gpt2_cuda_free(t.gpu);
	gpt2_work_free(&t.w);
	gpt2_tokens_close(&toks);
	for (int k = 0; k < GPT2_BLOCK_TENSORS + 3; k++)
		free(t.wide[k]);
	free(t.u_block);
	free(t.p_block);
	free(idx);
	return ret;
}
