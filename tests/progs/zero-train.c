/* SPDX-License-Identifier: MIT */
/*
 * tests/progs/zero-train.c: tests/progs/train-parity for strategies that
 * shard parameters (tests/test-zero-parity.sh).  The same model, data and
 * options, and:
 *  - parameters are written inside a forward-only pass
 *    (accel_set_grad_enabled(ctx, 0)) with each unit's forward hooks around
 *    the read, so a stage-3 strategy gathers them there;
 *  - --rank-init makes fc1.bias's init callback rank-dependent (the
 *    strategy must still start every rank from rank 0's values);
 *  - --lr-probe is not needed: the optimizer comes from the config;
 *  - --unit-kind UNIT=KIND (repeatable) sets a unit's kind
 *    (accel_unit_set_kind), which FSDP's TRANSFORMER_BASED_WRAP matches.
 *
 * Original description (train-parity):
 * trains a small deterministic MLP through the
 * accel API and writes its final parameters, so runs at different world
 * sizes, accumulation settings and hook patterns can be compared.
 *
 *   zero-train [--steps S] [--batch B] [--hooks all|none|partial|twice]
 *                [--out FILE] [--out-ranks PREFIX] [--metrics FILE] [--dtype f32|bf16]
 *                [--trace PREFIX]
 *   zero-train --compare A B [--rtol R] [--atol A]
 *
 * --out is written by the main process; --out-ranks makes every rank write
 * its own parameters to PREFIX.RANK (for strategies whose ranks may differ
 * and for checks that every rank holds the same values).  --trace makes
 * every rank write PREFIX.RANK with a line "backward MICRO T_BEGIN T_LAST
 * T_END" per micro-step: CLOCK_MONOTONIC nanoseconds when the backward of
 * the first unit began, when the backward of the last unit (fc1) began and
 * after its accel_unit_post_backward() returned, to be matched with the
 * comm layer's ACCEL_TEST_COMM_TRACE records.
 *
 * --compare passes when, for every parameter tensor, the largest absolute
 * difference is at most rtol times the tensor's largest absolute value
 * (plus atol).
 *
 * The model is 8 -> 16 -> 16 -> 4 (tanh, tanh, linear) in three units;
 * the loss is the batch mean of 0.5 * |y - target|^2.  B is the global
 * batch of one optimizer step (all ranks, all micro-steps); each rank takes
 * its contiguous share of each micro-batch.  Forward and backward run in
 * double and add their f32 gradients with +=, as the API asks.  The
 * optimizer, accumulation, clipping and strategy come from the accel
 * configuration (ACCEL_CONFIG, or `accel launch --config/--set`).
 *
 * Exit status: 0 ok, 1 accel error (message on stderr), 2 usage, 3 compare
 * mismatch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"
#include "parity-model.h"

const char *parity_prog = "zero-train";

/* Collective (stage 3 gathers in the forward hooks): every rank calls it,
 * f NULL on ranks that write nothing. */
static int write_params(model *m, FILE *f)
{
	int r = 0;
	if (accel_set_grad_enabled(m->ctx, 0))
		return fail(m->ctx, "accel_set_grad_enabled");
	for (int l = 0; !r && l < NL; l++) {
		uint32_t ps[2] = {m->w[l], m->b[l]};
		if (accel_unit_pre_forward(m->ctx, (uint32_t)l)) {
			r = fail(m->ctx, "pre_forward (writing parameters)");
			break;
		}
		for (int k = 0; f && k < 2; k++) {
			uint32_t p = ps[k];
			const void *v = accel_param_data(m->ctx, p);
			uint64_t n = accel_param_numel(m->ctx, p);
			if (!v) {
				r = fail(m->ctx, "accel_param_data returned NULL inside the unit's hooks");
				break;
			}
			for (uint64_t i = 0; i < n; i++)
				fprintf(f, "%s %llu %.9e\n", accel_param_name(m->ctx, p),
				        (unsigned long long)i, pget(m, v, (long)i));
		}
		if (accel_unit_post_forward(m->ctx, (uint32_t)l) && !r)
			r = fail(m->ctx, "post_forward (writing parameters)");
	}
	if (accel_set_grad_enabled(m->ctx, 1) && !r)
		r = fail(m->ctx, "accel_set_grad_enabled");
	return r;
}

static int write_params_to(model *m, const char *path, int mine)
{
	FILE *f = NULL;
	if (mine && !(f = fopen(path, "w")))
		return perror(path), 1;
	int r = write_params(m, f);
	if (f && fclose(f) && !r)
		r = (perror(path), 1);
	return r;
}

int main(int argc, char **argv)
{
	long steps = 6, batch = 32;
	const char *hooks = "all", *out = NULL, *metrics = NULL, *dtype = "f32";
	const char *out_ranks = NULL, *trace = NULL;
	long rank_shift = 0;
	const char *memory = NULL;
	int rank_init = 0, n_kinds = 0;
	const char *kinds[8];
	model m = {0};
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--compare") && i + 2 < argc) {
			double rtol = 1e-6, atol = 0;
			for (int j = i + 3; j + 1 < argc; j += 2) {
				if (!strcmp(argv[j], "--rtol"))
					rtol = atof(argv[j + 1]);
				else if (!strcmp(argv[j], "--atol"))
					atol = atof(argv[j + 1]);
			}
			return compare(argv[i + 1], argv[i + 2], rtol, atol);
		} else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
			steps = atol(argv[++i]);
		} else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
			batch = atol(argv[++i]);
		} else if (!strcmp(argv[i], "--hooks") && i + 1 < argc) {
			hooks = argv[++i];
		} else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
			out = argv[++i];
		} else if (!strcmp(argv[i], "--out-ranks") && i + 1 < argc) {
			out_ranks = argv[++i];
		} else if (!strcmp(argv[i], "--metrics") && i + 1 < argc) {
			metrics = argv[++i];
		} else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
			dtype = argv[++i];
		} else if (!strcmp(argv[i], "--memory") && i + 1 < argc) {
			memory = argv[++i];
		} else if (!strcmp(argv[i], "--rank-init")) {
			rank_init = 1;
		} else if (!strcmp(argv[i], "--trace") && i + 1 < argc) {
			trace = argv[++i];
		} else if (!strcmp(argv[i], "--unit-kind") && i + 1 < argc && n_kinds < 8 &&
		           strchr(argv[i + 1], '=')) {
			kinds[n_kinds++] = argv[++i];
		} else {
			fprintf(stderr, "usage: zero-train [--steps S] [--batch B] [--hooks "
			        "all|none|partial|twice] [--out FILE] [--out-ranks PREFIX] [--metrics FILE]\n"
			        "                    [--dtype f32|bf16] [--trace PREFIX] [--rank-init]\n"
			        "                    [--memory PREFIX] [--unit-kind UNIT=KIND]...\n"
			        "       zero-train --compare A B [--rtol R] [--atol A]\n");
			return 2;
		}
	}

	if ((r = accel_ctx_new(NULL, &m.ctx))) {
		fail(m.ctx, "accel_ctx_new");
		accel_ctx_free(m.ctx);
		return 1;
	}
	m.dtype = accel_dtype_parse(dtype);
	int64_t gas = 1;
	accel_config_int(m.ctx, "gradient_accumulation_steps", &gas);
	long world = accel_world_size(m.ctx), rank = accel_rank(m.ctx);
	if (batch % (world * gas)) {
		fprintf(stderr, "zero-train: batch %ld is not a multiple of world %ld x "
		        "accumulation %lld\n", batch, world, (long long)gas);
		accel_ctx_free(m.ctx);
		return 2;
	}
	long micro = batch / (world * gas);
	rank_shift = rank_init ? rank : 0;
	if (trace) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%ld", trace, rank);
		if (!(g_trace = fopen(path, "w"))) {
			perror(path);
			accel_ctx_free(m.ctx);
			return 1;
		}
	}

	float fc2_bias[16];
	for (int i = 0; i < 16; i++)
		fc2_bias[i] = 0.01f * (float)(i - 8);
	for (int l = 0; l < NL; l++) {
		char unit[16], wn[32], bn[32];
		int64_t wshape[2] = {dims[l + 1], dims[l]}, bshape[1] = {dims[l + 1]};
		accel_init wi = accel_init_normal(0.0, 1.0 / sqrt((double)dims[l]));
		accel_init bi = l == 0 ? accel_init_callback(bias_init, &rank_shift)
		              : l == 1 ? accel_init_data(fc2_bias)
		                       : accel_init_uniform(-0.1, 0.1);
		snprintf(unit, sizeof(unit), "fc%d", l + 1);
		snprintf(wn, sizeof(wn), "fc%d.weight", l + 1);
		snprintf(bn, sizeof(bn), "fc%d.bias", l + 1);
		if (accel_model_add_param(m.ctx, unit, wn, m.dtype, 2, wshape, &wi, &m.w[l]) ||
		    accel_model_add_param(m.ctx, unit, bn, m.dtype, 1, bshape, &bi, &m.b[l])) {
			r = fail(m.ctx, "accel_model_add_param");
			goto done;
		}
	}
	for (int k = 0; k < n_kinds; k++) {
		char unit[64];
		const char *eq = strchr(kinds[k], '=');
		snprintf(unit, sizeof(unit), "%.*s", (int)(eq - kinds[k]), kinds[k]);
		if (accel_unit_set_kind(m.ctx, unit, eq + 1)) {
			r = fail(m.ctx, "accel_unit_set_kind");
			goto done;
		}
	}
	if (accel_prepare(m.ctx)) {
		r = fail(m.ctx, "accel_prepare");
		goto done;
	}
	if (metrics && accel_metrics_open(m.ctx, metrics)) {
		r = fail(m.ctx, "accel_metrics_open");
		goto done;
	}

	for (long s = 0; s < steps; s++) {
		double loss_sum = 0, loss;
		for (long g = 0; g < gas; g++) {
			/* Global batch s: micro-batch g, this rank's share. */
			long first = (s * batch + g * (batch / gas) + rank * micro) % (N_SAMPLES - 64);
			if ((r = micro_step(&m, first, micro, hooks, &loss)))
				goto done;
			loss_sum += loss;
			if (accel_step(m.ctx)) {
				r = fail(m.ctx, "accel_step");
				goto done;
			}
		}
		accel_step_report rep = {.struct_size = sizeof(rep)};
		if (accel_last_step(m.ctx, &rep)) {
			r = fail(m.ctx, "accel_last_step");
			goto done;
		}
		const char *keys[] = {"loss", "lr", "grad_norm", "clip_coef"};
		double vals[] = {loss_sum / (double)gas, rep.lr, rep.grad_norm, rep.clip_coef};
		if (accel_log_scalars(m.ctx, accel_get_step(m.ctx), 4, keys, vals)) {
			r = fail(m.ctx, "accel_log_scalars");
			goto done;
		}
	}
	if (memory) {
		static const char *const cat[] = {"params", "grads", "master", "optimizer", "buffers",
		                                  "offload"};
		char path[4096];
		snprintf(path, sizeof(path), "%s.%ld", memory, rank);
		FILE *f = fopen(path, "w");
		if (!f) {
			perror(path);
			r = 1;
			goto done;
		}
		for (uint32_t c = 0; c < 6; c++) {
			uint64_t cur = 0, peak = 0;
			if (accel_memory_stats(m.ctx, c, ACCEL_DEVICE_CPU, 0, &cur, &peak)) {
				fclose(f);
				r = fail(m.ctx, "accel_memory_stats");
				goto done;
			}
			fprintf(f, "%s %llu %llu\n", cat[c], (unsigned long long)cur,
			        (unsigned long long)peak);
		}
		if (fclose(f)) {
			r = (perror(path), 1);
			goto done;
		}
	}
	if (out)
		r = write_params_to(&m, out, accel_is_main(m.ctx));
	if (!r && out_ranks) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%ld", out_ranks, rank);
		r = write_params_to(&m, path, 1);
	}
	if (!r && accel_wait_for_everyone(m.ctx))
		r = fail(m.ctx, "accel_wait_for_everyone");
done:
	accel_ctx_free(m.ctx);
	if (g_trace && fclose(g_trace) && !r)
		r = (perror("--trace"), 1);
	return r;
}
