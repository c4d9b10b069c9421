/* SPDX-License-Identifier: MIT */
/*
 * tests/progs/train-parity.c: trains a small deterministic MLP through the
 * accel API and writes its final parameters, so runs at different world
 * sizes, accumulation settings and hook patterns can be compared.
 *
 *   train-parity [--steps S] [--batch B] [--hooks all|none|partial|twice]
 *                [--out FILE] [--out-ranks PREFIX] [--metrics FILE] [--dtype f32|bf16]
 *                [--trace PREFIX] [--rank-init]
 *   train-parity --compare A B [--rtol R] [--atol A]
 *
 * --out is written by the main process; --out-ranks makes every rank write
 * its own parameters to PREFIX.RANK (for strategies whose ranks may differ
 * and for checks that every rank holds the same values).  --trace makes
 * every rank write PREFIX.RANK with a line "backward MICRO T_BEGIN T_LAST
 * T_END" per micro-step: CLOCK_MONOTONIC nanoseconds when the backward of
 * the first unit began, when the backward of the last unit (fc1) began and
 * after its accel_unit_post_backward() returned, to be matched with the
 * comm layer's ACCEL_TEST_COMM_TRACE records.  --rank-init makes fc1.bias's
 * init callback rank-dependent (every value shifted by 0.5 x rank), so only
 * a strategy that starts every rank from rank 0's values gives ranks equal
 * to rank 0's and to a world-1 run.
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

const char *parity_prog = "train-parity";

static int write_params(model *m, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return perror(path), 1;
	for (uint32_t p = 0; p < accel_model_n_params(m->ctx); p++) {
		const void *v = accel_param_data(m->ctx, p);
		uint64_t n = accel_param_numel(m->ctx, p);
		for (uint64_t i = 0; i < n; i++)
			fprintf(f, "%s %llu %.9e\n", accel_param_name(m->ctx, p), (unsigned long long)i,
			        pget(m, v, (long)i));
	}
	return fclose(f) ? (perror(path), 1) : 0;
}

int main(int argc, char **argv)
{
	parity_opts o = PARITY_OPTS_DEFAULT;
	parity_job job;
	long rank_shift = 0;
	model m = {0};
	int r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--compare") && i + 2 < argc) {
			return parity_compare_main(argc, argv, i);
		} else if (!parity_option(argc, argv, &i, &o)) {
			fprintf(stderr, "usage: train-parity [--steps S] [--batch B] [--hooks "
			        "all|none|partial|twice] [--out FILE] [--out-ranks PREFIX] [--metrics FILE]\n"
			        "                    [--dtype f32|bf16] [--trace PREFIX] [--rank-init]\n"
			        "       train-parity --compare A B [--rtol R] [--atol A]\n");
			return 2;
		}
	}

	if ((r = parity_begin(&m, &o, &job, &rank_shift)))
		goto done;
	if ((r = parity_prepare_train(&m, &o, &job)))
		goto done;
	if (o.out && accel_is_main(m.ctx))
		r = write_params(&m, o.out);
	if (!r && o.out_ranks) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%ld", o.out_ranks, job.rank);
		r = write_params(&m, path);
	}
done:
	return parity_end(&m, r);
}
