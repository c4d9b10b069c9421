/* SPDX-License-Identifier: MIT */
/* tests/progs/sampler-gather.c: one rank of the sampler's multi-process
 * test (run by tests/test-sampler-gather.sh, alone or under accel launch).
 *
 * For several dataset sizes, batch sizes, split_batches and drop_last
 * settings, every rank walks two epochs with a sampler made from its
 * context, gathers per-sample results with accel_gather_for_metrics() and
 * checks that, over an epoch, every sample arrives exactly once (drop_last:
 * at most once, floor(N/G)*G in all), that the gathered values belong to
 * their sample, that the ranks agree on every gathered step, and that the
 * number of batches is what accel_sampler_get_info() announced.  Uses the
 * installed API only.  Exit 0 on success, 1 with a message on failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"

static int rank_g;

#define CHECK(cond, ...)                                                     \
	do {                                                                     \
		if (!(cond)) {                                                       \
			fprintf(stderr, "sampler-gather rank %d: ", rank_g);              \
			fprintf(stderr, __VA_ARGS__);                                    \
			fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                \
			return 1;                                                        \
		}                                                                    \
	} while (0)

static int run_case(accel_ctx *ctx, uint64_t n, uint64_t bs, int split, int drop)
{
	int world = accel_world_size(ctx);
	accel_sampler_opts o;
	accel_sampler_opts_init(&o);
	o.n_samples = n;
	o.batch_size = bs;
	o.split_batches = split;
	o.drop_last = drop;
	accel_sampler *s = NULL;
	int rc = accel_sampler_new(ctx, &o, &s);
	CHECK(rc == ACCEL_OK, "accel_sampler_new(n=%llu, bs=%llu, split=%d): %s",
	      (unsigned long long)n, (unsigned long long)bs, split, accel_errmsg(ctx));
	accel_sampler_info info = {.struct_size = sizeof(info)};
	CHECK(accel_sampler_get_info(s, &info) == ACCEL_OK, "get_info");
	const uint64_t b = info.batch_size, g = info.global_batch;
	CHECK(g == b * (uint64_t)world, "global batch %llu != %llu * %d", (unsigned long long)g,
	      (unsigned long long)b, world);

	int64_t *idx = malloc(sizeof(int64_t) * b);
	double *send = malloc(sizeof(double) * 2 * b);
	double *recv = malloc(sizeof(double) * 2 * g);
	double *sum = malloc(sizeof(double) * 2 * g);
	uint32_t *seen = malloc(sizeof(uint32_t) * n);
	for (int epoch = 0; epoch < 2; epoch++) {
		memset(seen, 0, sizeof(uint32_t) * n);
		uint64_t batches = 0, total = 0;
		for (;;) {
			uint32_t cnt = 0;
			CHECK(accel_sampler_next(s, idx, &cnt) == ACCEL_OK, "next: %s", accel_errmsg(ctx));
			if (cnt == 0)
				break;
			batches++;
			/* per sample: (index, 1000 + index + epoch / 2) */
			for (uint32_t j = 0; j < cnt; j++) {
				send[2 * j] = (double)idx[j];
				send[2 * j + 1] = 1000.0 + (double)idx[j] + epoch * 0.5;
			}
			uint64_t got = 0;
			rc = accel_gather_for_metrics(ctx, s, send, 2, ACCEL_DTYPE_F64, recv, &got);
			CHECK(rc == ACCEL_OK, "gather_for_metrics: %s", accel_errmsg(ctx));
			accel_sampler_batch lb = {.struct_size = sizeof(lb)};
			CHECK(accel_sampler_last_batch(s, &lb) == ACCEL_OK, "last_batch");
			CHECK(got == lb.global_valid, "gathered %llu, expected %llu",
			      (unsigned long long)got, (unsigned long long)lb.global_valid);
			for (uint64_t j = 0; j < got; j++) {
				int64_t sample = (int64_t)recv[2 * j];
				CHECK(sample >= 0 && (uint64_t)sample < n, "gathered index %lld out of range",
				      (long long)sample);
				CHECK(recv[2 * j + 1] == 1000.0 + (double)sample + epoch * 0.5,
				      "value of sample %lld is %g", (long long)sample, recv[2 * j + 1]);
				seen[sample]++;
			}
			total += got;
			/* every rank must hold the same gathered step: the sum over
			 * ranks is world times ours */
			memset(sum, 0, sizeof(double) * 2 * g);
			rc = accel_allreduce(ctx, recv, sum, 2 * got, ACCEL_DTYPE_F64, ACCEL_RED_SUM);
			CHECK(rc == ACCEL_OK, "allreduce: %s", accel_errmsg(ctx));
			for (uint64_t j = 0; j < 2 * got; j++)
				CHECK(sum[j] == world * recv[j], "ranks disagree on gathered entry %llu",
				      (unsigned long long)j);
		}
		CHECK(batches == info.num_batches, "epoch %d: %llu batches, info says %llu", epoch,
		      (unsigned long long)batches, (unsigned long long)info.num_batches);
		uint64_t expect = drop ? n / g * g : n;
		CHECK(total == expect, "epoch %d: %llu samples gathered, expected %llu", epoch,
		      (unsigned long long)total, (unsigned long long)expect);
		for (uint64_t i = 0; i < n; i++)
			CHECK(seen[i] <= 1 && (drop || seen[i] == 1),
			      "epoch %d: sample %llu gathered %u times", epoch, (unsigned long long)i,
			      seen[i]);
	}
	free(idx);
	free(send);
	free(recv);
	free(sum);
	free(seen);
	accel_sampler_free(s);
	return 0;
}

int main(void)
{
	accel_ctx *ctx = NULL;
	if (accel_ctx_new(NULL, &ctx) != ACCEL_OK) {
		fprintf(stderr, "sampler-gather: accel_ctx_new: %s\n",
		        ctx ? accel_errmsg(ctx) : "no context");
		accel_ctx_free(ctx);
		return 1;
	}
	rank_g = accel_rank(ctx);
	int world = accel_world_size(ctx);
	const uint64_t ns[] = {23, 5, 48, 1};
	int cases = 0, rc = 0;
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]) && !rc; k++)
		for (int split = 0; split <= 1 && !rc; split++)
			for (int drop = 0; drop <= 1 && !rc; drop++) {
				uint64_t bs = split ? 2 * (uint64_t)world : 3;
				rc = run_case(ctx, ns[k], bs, split, drop);
				cases++;
			}
	if (!rc)
		printf("sampler-gather rank %d of %d: %d cases ok\n", rank_g, world, cases);
	ctx = accel_ctx_free(ctx);
	return rc ? 1 : 0;
}
