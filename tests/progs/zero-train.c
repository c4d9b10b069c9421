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
	parity_opts o = PARITY_OPTS_DEFAULT;
	parity_job job;
	long rank_shift = 0;
	const char *memory = NULL;
	int n_kinds = 0;
	const char *kinds[8];
	model m = {0};
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--compare") && i + 2 < argc) {
			return parity_compare_main(argc, argv, i);
		} else if (parity_option(argc, argv, &i, &o)) {
			continue;
		} else if (!strcmp(argv[i], "--memory") && i + 1 < argc) {
			memory = argv[++i];
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

	if ((r = parity_begin(&m, &o, &job, &rank_shift)))
		goto done;
	for (int k = 0; k < n_kinds; k++) {
		char unit[64];
		const char *eq = strchr(kinds[k], '=');
		snprintf(unit, sizeof(unit), "%.*s", (int)(eq - kinds[k]), kinds[k]);
		if (accel_unit_set_kind(m.ctx, unit, eq + 1)) {
			r = fail(m.ctx, "accel_unit_set_kind");
			goto done;
		}
	}
	if ((r = parity_prepare_train(&m, &o, &job)))
		goto done;
	if (memory) {
		static const char *const cat[] = {"params", "grads", "master", "optimizer", "buffers",
		                                  "offload"};
		char path[4096];
		snprintf(path, sizeof(path), "%s.%ld", memory, job.rank);
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
	if (o.out)
		r = write_params_to(&m, o.out, accel_is_main(m.ctx));
	if (!r && o.out_ranks) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%ld", o.out_ranks, job.rank);
		r = write_params_to(&m, path, 1);
	}
done:
	return parity_end(&m, r);
}
