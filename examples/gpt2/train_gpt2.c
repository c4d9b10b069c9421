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
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <accel/accel.h>

#include "blas.h"
#include "gpt2.h"
#include "gpt2_data.h"
#include "gpt2_device.h"
#include "gpt2_fp8.h"
#include "mlp.h"
#include "st_write.h"
#include "step_metrics.h"

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

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: accel-gpt2 [options]            train GPT-2 with accel\n"
	        "       accel-gpt2 prepare IN OUT       byte-level token file (vocabulary 256)\n"
	        "Run directly or under `accel launch -n N --`; strategy, precision and\n"
	        "accumulation come from the accel configuration.\n"
	        "  --model NAME       tiny (2 layers, 2 heads, dim 32, seq 32, vocab 256; the\n"
	        "                     default) or gpt2 (124M: 12, 12, 768, 1024, 50257)\n"
	        "  --layers L --heads H --dim C --seq-len T --vocab V\n"
	        "                     override the model's sizes\n"
	        "  --untied           give the LM head its own weight instead of the token\n"
	        "                     embedding's\n"
	        "  --data FILE        token file (docs/data.md); without it, random tokens\n"
	        "  --random-tokens N  how many random tokens without --data (default 65536)\n"
	        "  --val-fraction F   the last F of the tokens are held out (default 0.1)\n"
	        "  --steps N          optimizer steps (default 100)\n"
	        "  --batch-size B     global batch of sequences, split over the processes\n"
	        "                     (default 8)\n"
	        "  --lr X             learning rate (sets optimizer.params.lr)\n"
	        "  --seed S           seed of the weights, shuffling and random tokens\n"
	        "  --eval-every N     held-out loss every N steps and at the end (0: only at\n"
	        "                     the end, the default)\n"
	        "  --eval-batches N   held-out batches per evaluation (default 8; 0: all)\n"
	        "  --sample N         after training, N greedy tokens from a held-out prompt\n"
	        "  --recompute        keep only block inputs; re-run each block's forward in\n"
	        "                     its backward\n"
	        "  --log-every N      progress line every N steps (default 10)\n"
	        "  --peak-tflops X    the device's peak, for the MFU in progress lines\n"
	        "  --checkpoint-every N, --project-dir DIR, --resume DIR|latest\n"
	        "                     as train_mlp (docs/checkpointing.md)\n"
	        "  --save-final FILE  trained parameters as safetensors (f32)\n"
	        "  --save-final-ranks PREFIX\n"
	        "                     every rank writes the parameters as it sees them to\n"
	        "                     PREFIX.rank<r>.safetensors (to compare the ranks)\n"
	        "  --metrics FILE     also write the progress as JSON lines to FILE ('-':\n"
	        "                     stdout): loss, lr, samples_per_s, loss_scale, skipped,\n"
	        "                     tokens_per_s, tflops, mfu (with --peak-tflops); val_loss\n"
	        "  --config FILE      accel configuration;  --set KEY=VALUE  override a key\n"
	        "  --device D         cpu (default), cuda (GPU local rank %% count) or cuda:N\n"
	        "                     (docs/gpt2.md, \"On a GPU\")\n");
}

static int parse_num(const char *flag, const char *v, double lo, double hi, double *ret)
{
	char *end;
	double x = v ? strtod(v, &end) : 0;
	if (!v || *end || end == v || !(x >= lo && x <= hi)) {
		fprintf(stderr, "accel-gpt2: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi,
		        v ? v : "(nothing)");
		return -1;
	}
	*ret = x;
	return 0;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *ret)
{
	double x;
	if (parse_num(flag, v, (double)lo, (double)hi, &x))
		return -1;
	if (x != floor(x)) {
		fprintf(stderr, "accel-gpt2: %s needs an integer, got '%s'\n", flag, v);
		return -1;
	}
	*ret = (long)x;
	return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.steps = 100, .batch = 8, .lr = -1, .seed = -1, .log_every = 10,
	               .eval_batches = 8, .val_fraction = 0.1, .random_tokens = 65536,
	               .project_dir = "checkpoints"};
	gpt2_config_named(&o->c, "tiny");
	int sizes[5] = {-1, -1, -1, -1, -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long x = 0;
		int r = 0;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--untied")) {
			o->untied = 1;
			continue;
		} else if (!strcmp(a, "--recompute")) {
			o->recompute = 1;
			continue;
		} else if (!strcmp(a, "--model")) {
			if (!v || gpt2_config_named(&o->c, v)) {
				fprintf(stderr, "accel-gpt2: --model needs tiny or gpt2, got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
		} else if (!strcmp(a, "--layers")) {
			r = parse_int(a, v, 1, 256, &x);
			sizes[0] = (int)x;
		} else if (!strcmp(a, "--heads")) {
			r = parse_int(a, v, 1, 4096, &x);
			sizes[1] = (int)x;
		} else if (!strcmp(a, "--dim")) {
			r = parse_int(a, v, 1, 65536, &x);
			sizes[2] = (int)x;
		} else if (!strcmp(a, "--seq-len")) {
			r = parse_int(a, v, 1, 65536, &x);
			sizes[3] = (int)x;
		} else if (!strcmp(a, "--vocab")) {
			r = parse_int(a, v, 2, 65536, &x);
			sizes[4] = (int)x;
		} else if (!strcmp(a, "--steps")) {
			r = parse_int(a, v, 1, 100000000, &o->steps);
		} else if (!strcmp(a, "--batch-size")) {
			r = parse_int(a, v, 1, 1 << 20, &o->batch);
		} else if (!strcmp(a, "--lr")) {
			r = parse_num(a, v, 1e-12, 1e6, &o->lr);
		} else if (!strcmp(a, "--seed")) {
			r = parse_int(a, v, 0, INT32_MAX, &x);
			o->seed = x;
		} else if (!strcmp(a, "--random-tokens")) {
			r = parse_int(a, v, 2, 1L << 34, &o->random_tokens);
		} else if (!strcmp(a, "--val-fraction")) {
			r = parse_num(a, v, 0.0, 0.9, &o->val_fraction);
		} else if (!strcmp(a, "--eval-every")) {
			r = parse_int(a, v, 0, 100000000, &o->eval_every);
		} else if (!strcmp(a, "--eval-batches")) {
			r = parse_int(a, v, 0, 100000000, &o->eval_batches);
		} else if (!strcmp(a, "--sample")) {
			r = parse_int(a, v, 0, 100000, &o->sample);
		} else if (!strcmp(a, "--log-every")) {
			r = parse_int(a, v, 1, 100000000, &x);
			o->log_every = (int)x;
		} else if (!strcmp(a, "--peak-tflops")) {
			r = parse_num(a, v, 1e-6, 1e9, &o->peak_tflops);
		} else if (!strcmp(a, "--checkpoint-every")) {
			r = parse_int(a, v, 1, 100000000, &o->checkpoint_every);
		} else if ((!strcmp(a, "--data") || !strcmp(a, "--save-final") ||
		            !strcmp(a, "--save-final-ranks") || !strcmp(a, "--metrics") ||
		            !strcmp(a, "--project-dir") || !strcmp(a, "--resume") ||
		            !strcmp(a, "--config")) && (!v || !strncmp(v, "--", 2))) {
			fprintf(stderr, "accel-gpt2: %s needs a path%s%s%s\n", a,
			        v ? ", not the option '" : "", v ? v : "", v ? "'" : "");
			return -1;
		} else if (!strcmp(a, "--data")) {
			o->data = v;
		} else if (!strcmp(a, "--save-final")) {
			o->save_final = v;
		} else if (!strcmp(a, "--save-final-ranks")) {
			if (strlen(v) > 4000) {
				fprintf(stderr, "accel-gpt2: --save-final-ranks: the prefix is longer than "
				        "4000 bytes\n");
				return -1;
			}
			o->save_final_ranks = v;
		} else if (!strcmp(a, "--metrics")) {
			o->metrics = v;
		} else if (!strcmp(a, "--project-dir")) {
			o->project_dir = v;
		} else if (!strcmp(a, "--resume")) {
			o->resume = v;
		} else if (!strcmp(a, "--config")) {
			o->config = v;
		} else if (!strcmp(a, "--device")) {
			if (!v || (strcmp(v, "cpu") && strcmp(v, "cuda") && strncmp(v, "cuda:", 5))) {
				fprintf(stderr, "accel-gpt2: --device needs cpu, cuda or cuda:N, got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
			if (!strncmp(v, "cuda:", 5) && parse_int(a, v + 5, 0, 1023, &x))
				return -1;
			o->device = v;
		} else if (!strcmp(a, "--set")) {
			if (!v || !strchr(v, '=') || o->n_sets >= 32) {
				fprintf(stderr, "accel-gpt2: --set needs KEY=VALUE (at most 32), got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
			o->sets[o->n_sets++] = v;
		} else {
			fprintf(stderr, "accel-gpt2: unknown option or missing value: '%s' (see --help)\n",
			        a);
			return -1;
		}
		if (r)
			return -1;
		i++;
	}
	int *dst[5] = {&o->c.layers, &o->c.heads, &o->c.dim, &o->c.seq, &o->c.vocab};
	for (int k = 0; k < 5; k++)
		if (sizes[k] > 0)
			*dst[k] = sizes[k];
	char err[256];
	if (gpt2_config_check(&o->c, err, sizeof(err))) {
		fprintf(stderr, "accel-gpt2: %s\n", err);
		return -1;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static int fail(const trainer *t, const char *what, int rc)
{
	fprintf(stderr, "accel-gpt2: %s: %s (%s)\n", what,
	        t->ctx && *accel_errmsg(t->ctx) ? accel_errmsg(t->ctx) : "no message",
	        accel_status_str(rc));
	return -1;
}

static int add_param(trainer *t, const char *unit, const char *name, int ndim,
                     const int64_t *shape, const accel_init *init, uint32_t *ret)
{
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = t->dtype, .unit = unit,
	                      .name = name, .ndim = (uint32_t)ndim, .shape = shape,
	                      .compute_dtype = t->cdt,
	                      .device = t->gpu ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU,
	                      .device_index = t->gpu ? t->dev_index : 0, .init = init,
	                      .grad_dtype = ACCEL_DTYPE_F32};
	int rc = accel_model_add(t->ctx, &d, ret);
	return rc ? fail(t, "registering the model", rc) : 0;
}

/* GPT-2's initialisation: N(0, 0.02) for embeddings and linear weights,
 * N(0, 0.02 / sqrt(2 L)) for the two projections into the residual, zero
 * biases, LayerNorms 1 and 0. */
static int register_model(trainer *t)
{
	int64_t C = t->c.dim, V = t->c.vocab, T = t->c.seq;
	accel_init w02 = accel_init_normal(0, 0.02), ones = accel_init_const(1),
	           res = accel_init_normal(0, 0.02 / sqrt(2.0 * t->c.layers));
	int64_t s_wte[2] = {V, C}, s_wpe[2] = {T, C}, s_c[1] = {C};
	char unit[32], name[96];
	int rc;
	if (add_param(t, "embed", "wte", 2, s_wte, &w02, &t->p_wte) ||
	    add_param(t, "embed", "wpe", 2, s_wpe, &w02, &t->p_wpe))
		return -1;
	for (int l = 0; l < t->c.layers; l++) {
		snprintf(unit, sizeof(unit), "h.%d", l);
		for (int k = 0; k < GPT2_BLOCK_TENSORS; k++) {
			int64_t sh[2];
			int nd = gpt2_block_shape(&t->c, k, sh);
			const accel_init *init = k == GPT2_LN1_W || k == GPT2_LN2_W    ? &ones
			                         : k == GPT2_APROJ_W || k == GPT2_MPROJ_W ? &res
			                         : nd == 2                                ? &w02
			                                                                  : NULL;
			snprintf(name, sizeof(name), "h.%d.%s", l, gpt2_block_names[k]);
			t->cdt = t->fp8_on && nd == 2 ? gpt2_fp8_compute_dtype(k, sh[0], sh[1]) : 0;
			rc = add_param(t, unit, name, nd, sh, init, &t->p_block[l * GPT2_BLOCK_TENSORS + k]);
			t->cdt = 0;
			if (rc)
				return -1;
		}
		/* what PyTorch calls the class: fsdp's TRANSFORMER_BASED_WRAP with
		 * transformer_cls_names_to_wrap "GPT2Block" wraps each block */
		if ((rc = accel_unit_set_kind(t->ctx, unit, "GPT2Block")))
			return fail(t, "naming the block kind", rc);
	}
	if (add_param(t, "head", "ln_f.weight", 1, s_c, &ones, &t->p_lnf_w) ||
	    add_param(t, "head", "ln_f.bias", 1, s_c, NULL, &t->p_lnf_b))
		return -1;
	if (!t->tied) {
		if (add_param(t, "head", "lm_head.weight", 2, s_wte, &w02, &t->p_head))
			return -1;
	} else {
		if ((rc = accel_unit_use_param(t->ctx, "head", t->p_wte)))
			return fail(t, "tying the LM head to wte (accel_unit_use_param)", rc);
		t->p_head = t->p_wte;
	}
	if ((rc = accel_model_find_unit(t->ctx, "embed", &t->u_embed)) ||
	    (rc = accel_model_find_unit(t->ctx, "head", &t->u_head)))
		return fail(t, "looking up a unit", rc);
	for (int l = 0; l < t->c.layers; l++) {
		snprintf(unit, sizeof(unit), "h.%d", l);
		if ((rc = accel_model_find_unit(t->ctx, unit, &t->u_block[l])))
			return fail(t, "looking up a unit", rc);
	}
	return 0;
}

/* The f32 values of parameter p (slot: which wide buffer in 16-bit). */
static const float *weights(trainer *t, uint32_t p, int slot)
{
	const void *d = accel_param_data(t->ctx, p);
	if (!d || t->prec == PREC_F32 || t->gpu)   /* GPU: the device's working dtype */
		return d;
	mlp_widen(t->wide[slot], d, (size_t)accel_param_numel(t->ctx, p), t->prec);
	return t->wide[slot];
}

static int block_params(trainer *t, int l, const float **p, float **g)
{
	for (int k = 0; k < GPT2_BLOCK_TENSORS; k++) {
		uint32_t id = t->p_block[l * GPT2_BLOCK_TENSORS + k];
		p[k] = weights(t, id, k);
		if (g)
			g[k] = accel_param_grad(t->ctx, id);
		if (!p[k] || (g && !g[k]))
			return fail(t, "a block's parameters outside its hooks", ACCEL_ERR_STATE);
	}
	return 0;
}

/* Forward of n sequences (n may be 0: the hooks only, so every rank makes
 * the same collective calls). */
static int forward(trainer *t, const int32_t *tokens, int n)
{
	int rc;
	if ((rc = accel_unit_pre_forward(t->ctx, t->u_embed)))
		return fail(t, "pre-forward hook", rc);
	const float *wte = weights(t, t->p_wte, GPT2_BLOCK_TENSORS),
	            *wpe = weights(t, t->p_wpe, GPT2_BLOCK_TENSORS + 1);
	if (!wte || !wpe)
		return fail(t, "the embeddings outside their hooks", ACCEL_ERR_STATE);
	if (n > 0 && gpt2_dev_embed_forward(&t->w, t->gpu, tokens, wte, wpe, n))
		return -1;
	if ((rc = accel_unit_post_forward(t->ctx, t->u_embed)))
		return fail(t, "post-forward hook", rc);
	for (int l = 0; l < t->c.layers; l++) {
		const float *p[GPT2_BLOCK_TENSORS];
		if ((rc = accel_unit_pre_forward(t->ctx, t->u_block[l])))
			return fail(t, "pre-forward hook", rc);
		if (block_params(t, l, p, NULL))
			return -1;
		if (n > 0 && gpt2_dev_block_forward(&t->w, t->gpu, l, p, n))
			return -1;
		if ((rc = accel_unit_post_forward(t->ctx, t->u_block[l])))
			return fail(t, "post-forward hook", rc);
	}
	if ((rc = accel_unit_pre_forward(t->ctx, t->u_head)))
		return fail(t, "pre-forward hook", rc);
	const float *lw = weights(t, t->p_lnf_w, 0), *lb = weights(t, t->p_lnf_b, 1),
	            *head = weights(t, t->p_head, GPT2_BLOCK_TENSORS + 2);
	if (!lw || !lb || !head)
		return fail(t, "the head's parameters outside its hooks", ACCEL_ERR_STATE);
	if (n > 0 && gpt2_dev_head_forward(&t->w, t->gpu, lw, lb, head, n))
		return -1;
	if ((rc = accel_unit_post_forward(t->ctx, t->u_head)))
		return fail(t, "post-forward hook", rc);
	return 0;
}

static int backward(trainer *t, int n)
{
	int rc;
	if ((rc = accel_unit_pre_backward(t->ctx, t->u_head)))
		return fail(t, "pre-backward hook", rc);
	const float *lw = weights(t, t->p_lnf_w, 0),
	            *head = weights(t, t->p_head, GPT2_BLOCK_TENSORS + 2);
	float *dlw = accel_param_grad(t->ctx, t->p_lnf_w), *dlb = accel_param_grad(t->ctx, t->p_lnf_b),
	      *dhead = accel_param_grad(t->ctx, t->p_head);
	if (!lw || !head || !dlw || !dlb || !dhead)
		return fail(t, "the head's gradients outside its hooks", ACCEL_ERR_STATE);
	if (gpt2_dev_head_backward(&t->w, t->gpu, lw, head, dlw, dlb, dhead, n))
		return -1;
	if ((rc = accel_unit_post_backward(t->ctx, t->u_head)))
		return fail(t, "post-backward hook", rc);
	for (int l = t->c.layers - 1; l >= 0; l--) {
		const float *p[GPT2_BLOCK_TENSORS];
		float *g[GPT2_BLOCK_TENSORS];
		if ((rc = accel_unit_pre_backward(t->ctx, t->u_block[l])))
			return fail(t, "pre-backward hook", rc);
		if (block_params(t, l, p, g))
			return -1;
		/* recompute: only the block's input was kept */
		if ((t->recompute && gpt2_dev_block_forward(&t->w, t->gpu, l, p, n)) ||
		    gpt2_dev_block_backward(&t->w, t->gpu, l, p, g, n))
			return -1;
		if ((rc = accel_unit_post_backward(t->ctx, t->u_block[l])))
			return fail(t, "post-backward hook", rc);
	}
	if ((rc = accel_unit_pre_backward(t->ctx, t->u_embed)))
		return fail(t, "pre-backward hook", rc);
	float *dwte = accel_param_grad(t->ctx, t->p_wte), *dwpe = accel_param_grad(t->ctx, t->p_wpe);
	if (!dwte || !dwpe)
		return fail(t, "the embeddings' gradients outside their hooks", ACCEL_ERR_STATE);
	if (gpt2_dev_embed_backward(&t->w, t->gpu, dwte, dwpe, n))
		return -1;
	if ((rc = accel_unit_post_backward(t->ctx, t->u_embed)))
		return fail(t, "post-backward hook", rc);
	return 0;
}

#define FORWARD_ONLY(t, rc, call)                                                   \
	do {                                                                            \
		int fo_rc_;                                                                 \
		if ((fo_rc_ = accel_set_grad_enabled((t)->ctx, 0))) {                       \
			(rc) = fail((t), "starting a forward-only pass", fo_rc_);                \
			break;                                                                  \
		}                                                                           \
		(rc) = (call);                                                              \
		if ((fo_rc_ = accel_set_grad_enabled((t)->ctx, 1)) && !(rc))                 \
			(rc) = fail((t), "ending a forward-only pass", fo_rc_);                  \
	} while (0)

/* Mean held-out loss over the first `batches` batches of cap sequences
 * per rank (0: all), each rank a contiguous slice. */
static int eval_pass(trainer *t, const gpt2_stream *val, long batches, double *ret_loss)
{
	int rank = accel_rank(t->ctx), world = t->world, T = t->c.seq;
	uint64_t total = val->n_samples;
	if (batches > 0 && (uint64_t)batches * (uint64_t)t->cap * (uint64_t)world < total)
		total = (uint64_t)batches * (uint64_t)t->cap * (uint64_t)world;
	uint64_t lo = total * (uint64_t)rank / (uint64_t)world,
	         hi = total * (uint64_t)(rank + 1) / (uint64_t)world;
	uint64_t max_slice = (total + (uint64_t)world - 1) / (uint64_t)world;
	uint64_t rounds = (max_slice + (uint64_t)t->cap - 1) / (uint64_t)t->cap;
	int32_t *inp = malloc((size_t)t->cap * T * sizeof(int32_t)),
	        *tgt = malloc((size_t)t->cap * T * sizeof(int32_t));
	int64_t *idx = malloc((size_t)t->cap * sizeof(int64_t));
	double sums[2] = {0, 0};
	int ret = -1, rc;
	if (!inp || !tgt || !idx) {
		fprintf(stderr, "accel-gpt2: out of memory for evaluation\n");
		goto out;
	}
	for (uint64_t r = 0; r < rounds; r++) {
		uint64_t a = lo + r * (uint64_t)t->cap;
		int n = a < hi ? (int)(hi - a < (uint64_t)t->cap ? hi - a : (uint64_t)t->cap) : 0;
		for (int k = 0; k < n; k++)
			idx[k] = (int64_t)(a + (uint64_t)k);
		gpt2_stream_gather(val, idx, n, inp, tgt);
		if (forward(t, inp, n))
			goto out;
		double s = 0;
		if (n > 0 && gpt2_dev_loss(&t->w, t->gpu, tgt, n, 0, &s))
			goto out;
		sums[0] += s;
		sums[1] += (double)n * T;
	}
	if ((rc = accel_allreduce(t->ctx, sums, sums, 2, ACCEL_DTYPE_F64, ACCEL_RED_SUM))) {
		fail(t, "reducing the held-out loss", rc);
		goto out;
	}
	*ret_loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
	ret = 0;
out:
	free(inp);
	free(tgt);
	free(idx);
	return ret;
}

static int evaluate(trainer *t, const gpt2_stream *val, long batches, double *ret_loss)
{
	int rc;
	FORWARD_ONLY(t, rc, eval_pass(t, val, batches, ret_loss));
	return rc;
}

/* Greedy continuation of a held-out prompt: every rank computes (the hooks
 * are collective), rank 0 prints. */
static int sample_pass(trainer *t, const gpt2_stream *val, long n_new)
{
	int T = t->c.seq, V = t->c.vocab;
	int plen = T / 2 > 0 ? T / 2 : 1;
	int32_t *ctxt = calloc((size_t)T, sizeof(int32_t));
	int32_t *gen = malloc((size_t)(n_new + 1) * sizeof(int32_t));
	float *lbuf = malloc((size_t)V * sizeof(float));   /* the GPU's logits row */
	if (!ctxt || !gen || !lbuf) {
		free(ctxt);
		free(gen);
		free(lbuf);
		return -1;
	}
	int len = 0;
	for (; len < plen && (uint64_t)len < val->t->n - val->first; len++)
		ctxt[len] = val->t->tok[val->first + (uint64_t)len];
	for (long k = 0; k < n_new; k++) {
		const float *row = NULL;
		if (forward(t, ctxt, 1) ||
		    !(row = gpt2_dev_logits_row(&t->w, t->gpu, len - 1, V, lbuf))) {
			free(ctxt);
			free(gen);
			free(lbuf);
			return -1;
		}
		int best = 0;
		for (int j = 1; j < V; j++)
			if (row[j] > row[best])
				best = j;
		gen[k] = best;
		if (len == T) {   /* slide the window */
			memmove(ctxt, ctxt + 1, (size_t)(T - 1) * sizeof(int32_t));
			len--;
		}
		ctxt[len++] = best;
	}
	if (accel_is_main(t->ctx)) {
		char *s = malloc((size_t)(n_new * 8 + plen * 8 + 1));
		size_t o = 0;
		for (int i = 0; s && i < plen; i++) {
			int v = val->t->tok[val->first + (uint64_t)i];
			o += (size_t)(V == 256 && v >= 32 && v < 127 ? sprintf(s + o, "%c", v)
			              : V == 256 && v == '\n'       ? sprintf(s + o, "\\n")
			                                           : sprintf(s + o, "<%d>", v));
		}
		if (s)
			s[o++] = '|', s[o] = 0;
		for (long k = 0; s && k < n_new; k++) {
			int v = gen[k];
			o += (size_t)(V == 256 && v >= 32 && v < 127 ? sprintf(s + o, "%c", v)
			              : V == 256 && v == '\n'       ? sprintf(s + o, "\\n")
			                                           : sprintf(s + o, "<%d>", v));
		}
		accel_print(t->ctx, "sample (prompt|greedy continuation): %s\n", s ? s : "?");
		free(s);
	}
	free(ctxt);
	free(gen);
	free(lbuf);
	return 0;
}

/* all_ranks: every rank writes its own file (path differs per rank), with
 * its rank in the metadata; else the main process writes. */
static int save_final_pass(trainer *t, const char *path, long steps, int all_ranks)
{
	uint32_t np = accel_model_n_params(t->ctx);
	int writer = all_ranks || accel_is_main(t->ctx), ret = -1, rc;
	st_tensor *ts = calloc(np, sizeof(*ts));
	float **copies = calloc(np, sizeof(*copies));
	uint32_t units[3 + 256], nu = 0;
	char err[512];
	if (!ts || !copies)
		goto out;
	units[nu++] = t->u_embed;
	for (int l = 0; l < t->c.layers; l++)
		units[nu++] = t->u_block[l];
	units[nu++] = t->u_head;
	/* parameters in registration order are grouped by unit: copy each in
	 * its unit's window */
	uint32_t p = 0;
	for (uint32_t u = 0; u < nu; u++) {
		if ((rc = accel_unit_pre_forward(t->ctx, units[u]))) {
			fail(t, "gathering parameters", rc);
			goto out;
		}
		uint32_t end = u == 0 ? 2 : u + 1 < nu ? 2 + (u) * GPT2_BLOCK_TENSORS : np;
		for (; p < end; p++) {
			size_t n = (size_t)accel_param_numel(t->ctx, p);
			const float *src = weights(t, p, 0);
			if (!writer)
				continue;
			if (!(copies[p] = malloc(n * sizeof(float))) || !src) {
				fprintf(stderr, "accel-gpt2: %s: cannot copy %s\n", path,
				        accel_param_name(t->ctx, p));
				accel_unit_post_forward(t->ctx, units[u]);
				goto out;
			}
			if (gpt2_dev_param_to_host(t->gpu, copies[p], src, n, t->prec == PREC_F32)) {
				accel_unit_post_forward(t->ctx, units[u]);
				goto out;
			}
			ts[p] = (st_tensor){.name = accel_param_name(t->ctx, p), .dtype = "F32",
			                    .data = copies[p], .nbytes = n * sizeof(float), .ndim = 1,
			                    .shape = {(int64_t)n}};
		}
		if ((rc = accel_unit_post_forward(t->ctx, units[u]))) {
			fail(t, "releasing parameters", rc);
			goto out;
		}
	}
	char stepstr[32], rankstr[16];
	snprintf(stepstr, sizeof(stepstr), "%ld", steps);
	snprintf(rankstr, sizeof(rankstr), "%d", accel_rank(t->ctx));
	const char *meta[] = {"format", "pt", "producer", "accel-gpt2", "steps", stepstr,
	                      "rank", rankstr};
	if (writer && st_write(path, ts, (int)np, meta, all_ranks ? 4 : 3, err, sizeof(err))) {
		fprintf(stderr, "accel-gpt2: %s\n", err);
		goto out;
	}
	ret = 0;
out:
	for (uint32_t k = 0; copies && k < np; k++)
		free(copies[k]);
	free(copies);
	free(ts);
	return ret;
}

static int save_final(trainer *t, const char *path, long steps, int all_ranks)
{
	int rc;
	FORWARD_ONLY(t, rc, save_final_pass(t, path, steps, all_ranks));
	return rc;
}

static int resume_dir(const options *o, char *buf, size_t cap)
{
	if (strcmp(o->resume, "latest")) {
		snprintf(buf, cap, "%s", o->resume);
		return 0;
	}
	char path[4096], name[1024];
	snprintf(path, sizeof(path), "%s/latest", o->project_dir);
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "accel-gpt2: --resume latest: cannot read %s: %s (no checkpoint in "
		        "--project-dir %s?)\n", path, strerror(errno), o->project_dir);
		return -1;
	}
	int ok = fgets(name, sizeof(name), f) != NULL;
	fclose(f);
	name[strcspn(name, "\n")] = '\0';
	if (!ok || !*name || strchr(name, '/')) {
		fprintf(stderr, "accel-gpt2: --resume latest: %s names no checkpoint directory\n", path);
		return -1;
	}
	snprintf(buf, cap, "%s/%s", o->project_dir, name);
	return 0;
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

/* --metrics FILE, else the configuration's metrics_file: rank 0 opens it
 * and every rank learns the outcome, so all stop together.  Progress is
 * logged when a file is named or logging_dir (the trackers') is set. */
static int open_metrics(trainer *t, const char *path, int *ret_log)
{
	const char *dir = NULL;
	int32_t bad = 0;
	int rc;
	if (!path && accel_config_string(t->ctx, "metrics_file", &path) != ACCEL_OK)
		path = NULL;
	if (accel_is_main(t->ctx) && path && (rc = accel_metrics_open(t->ctx, path))) {
		fail(t, "opening the metrics file (--metrics, else metrics_file)", rc);
		bad = 1;
	}
	if ((rc = accel_allreduce(t->ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX)))
		return fail(t, "agreeing on the metrics file", rc);
	if (bad) {
		if (!accel_is_main(t->ctx))
			fprintf(stderr, "accel-gpt2: rank %d: stopping: rank 0 could not open the "
			        "metrics file (its message says why)\n", accel_rank(t->ctx));
		return -1;
	}
	*ret_log = path != NULL ||
	           (accel_config_string(t->ctx, "logging_dir", &dir) == ACCEL_OK && *dir);
	return 0;
}

/* A held-out loss as its own metrics record. */
static int log_val_loss(trainer *t, int log_metrics, long step, double loss)
{
	const char *k = "val_loss";
	int rc;
	if (log_metrics && (rc = accel_log_scalars(t->ctx, (uint64_t)step, 1, &k, &loss)))
		return fail(t, "writing metrics", rc);
	return 0;
}

/* The mixed_precision the program computes in: no, bf16 or fp16. */
static int choose_dtype(trainer *t)
{
	const char *mp = "no";
	if (accel_config_string(t->ctx, "mixed_precision", &mp) != ACCEL_OK)
		mp = "no";
	if (!strcmp(mp, "no")) {
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = PREC_F32;
	} else if (!strcmp(mp, "bf16")) {
		t->dtype = ACCEL_DTYPE_BF16;
		t->prec = PREC_BF16;
	} else if (!strcmp(mp, "fp16")) {
		t->dtype = ACCEL_DTYPE_F16;
		t->prec = PREC_F16;
	} else if (!strcmp(mp, "fp8")) {   /* GPU: f32, block GEMMs in fp8 (gpt2_fp8.c) */
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = PREC_F32;
		t->fp8_on = 1;
	} else {
		fprintf(stderr, "accel-gpt2: on the CPU the program computes with f32 "
		        "(mixed_precision=no), bf16 or f16 weights (bf16, fp16), not "
		        "mixed_precision=%s\n", mp);
		return -1;
	}
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

	switch (parse_args(argc, argv, &o)) {
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
		fail(&t, "starting accel", rc);
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
		fail(&t, "reading the configuration key 'seed'", rc);
		goto out;
	}
	if (choose_dtype(&t))
		goto out;
	if (t.fp8_on && !on_gpu) {
		fprintf(stderr, "accel-gpt2: mixed_precision=fp8 runs on --device cuda only (the "
		        "fp8 plugin's GEMMs for the blocks' linear layers); on the CPU use no, bf16 "
		        "or fp16\n");
		ret = 2;
		goto out;
	}
	int log_metrics = 0;
	if (open_metrics(&t, o.metrics, &log_metrics))
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
		fail(&t, "creating the sampler", rc);
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
	if (register_model(&t))
		goto out;
	if ((rc = accel_prepare(t.ctx))) {
		fail(&t, "accel_prepare", rc);
		goto out;
	}
	if (t.fp8_on && (rc = gpt2_fp8_new(t.ctx, &t.c, t.p_block, t.cap * t.c.seq, t.gpu,
	                                   t.dev_index, &t.fp8))) {
		fail(&t, "mixed_precision fp8", rc);
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
		int32_t bad = resume_dir(&o, dir, sizeof(dir)) ? 1 : 0;
		if ((rc = accel_allreduce(t.ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
			fail(&t, "agreeing on --resume", rc);
			goto out;
		}
		if (bad) {
			ret = 2;
			goto out;
		}
		if ((rc = accel_load_state(t.ctx, dir))) {
			fail(&t, "--resume: accel_load_state", rc);
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
				fail(&t, "sampler", rc);                                              \
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
		if (forward(&t, inp, (int)count))
			goto out;
		double scale = accel_loss_scale(t.ctx), denom = (double)count * t.c.seq;
		double loss;
		if (gpt2_dev_loss(&t.w, t.gpu, tgt, (int)count, scale / denom, &loss))
			goto out;
		loss /= denom;
		if (backward(&t, (int)count))
			goto out;
		int sync = accel_sync_gradients(t.ctx);
		if ((rc = accel_step(t.ctx))) {
			fail(&t, "accel_step", rc);
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
				fail(&t, "reducing the loss", rc);
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
					fail(&t, "writing metrics", rc);
					goto out;
				}
			}
			window[0] = window[1] = 0;
			tok_since = 0;
			t_log = now();
		}
		if (o.eval_every && done % o.eval_every == 0 && done < o.steps) {
			double vl;
			if (evaluate(&t, &val, o.eval_batches, &vl))
				goto out;
			accel_print(t.ctx, "step %ld held-out loss %.6f\n", done, vl);
			if (log_val_loss(&t, log_metrics, done, vl))
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
				fail(&t, "saving a checkpoint", rc);
				goto out;
			}
			accel_print(t.ctx, "saved checkpoint %s\n", dir);
			t_log = now();
		}
	}
	(void)micro;
	if (val.n_samples > 0) {
		double vl;
		if (evaluate(&t, &val, o.eval_batches, &vl))
			goto out;
		accel_print(t.ctx, "final held-out loss %.6f (step %ld)\n", vl, done);
		if (log_val_loss(&t, log_metrics, done, vl))
			goto out;
	}
	if (o.sample > 0 && val.n_samples > 0) {
		FORWARD_ONLY(&t, rc, sample_pass(&t, &val, o.sample));
		if (rc)
			goto out;
	}
	uint64_t cur = 0, peak = 0;
	if (accel_memory_stats(t.ctx, ACCEL_MEM_ALL, t.gpu ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU,
	                       t.gpu ? t.dev_index : 0, &cur, &peak) == ACCEL_OK)
		accel_print(t.ctx, "memory per rank: accel %.1f MiB (peak %.1f MiB), activations "
		            "%.1f MiB%s\n", (double)cur / 1048576.0, (double)peak / 1048576.0,
		            (double)(t.gpu ? gpt2_cuda_work_bytes(t.gpu) : gpt2_work_bytes(&t.w)) /
		                    1048576.0,
		            o.recompute ? " (recompute)" : "");
	if (o.save_final) {
		if (save_final(&t, o.save_final, done, 0))
			goto out;
		accel_print(t.ctx, "saved %s\n", o.save_final);
	}
	if (o.save_final_ranks) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.rank%d.safetensors", o.save_final_ranks,
		         accel_rank(t.ctx));
		if (save_final(&t, path, done, 1))
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
