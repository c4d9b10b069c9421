/* SPDX-License-Identifier: MIT */
/* tests/test-rng.c: Philox4x32 streams (core/rng.c).
 *
 * Known-answer vectors of Random123's kat_vectors file (counter, key ->
 * output, for 7 and 10 rounds); the documented stream layout; which
 * streams agree and which differ across ranks; independence and
 * distribution checks; seek/copy/fill equivalences; the same parameter
 * values under every sharding; argument errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "rng.h"

/* Random123 tests/kat_vectors, the philox4x32 lines: rounds, counter[4],
 * key[2], expected output[4]. */
static const struct {
	unsigned rounds;
	uint32_t ctr[4], key[2], out[4];
} kat[] = {
	{7, {0, 0, 0, 0}, {0, 0}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
	{7, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
	 {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
	{7, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
	 {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
	{10, {0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
	{10, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
	 {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
	{10, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
	 {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

START_TEST(known_answers)
{
	for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
		uint32_t out[4];
		accelp_philox4x32_r(kat[i].ctr, kat[i].key, kat[i].rounds, out);
		for (int j = 0; j < 4; j++)
			ck_assert_msg(out[j] == kat[i].out[j], "philox4x32-%u vector %zu word %d: %08x, "
			              "want %08x", kat[i].rounds, i, j, out[j], kat[i].out[j]);
		if (kat[i].rounds == 10) {
			uint32_t pub[4];
			accel_rng_philox4x32(kat[i].ctr, kat[i].key, pub);
			ck_assert(!memcmp(pub, out, sizeof(out)));
		}
	}
	/* in place */
	uint32_t io[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
	accelp_philox4x32_r(io, kat[5].key, 10, io);
	ck_assert(!memcmp(io, kat[5].out, sizeof(io)));
}
END_TEST

/* Word w of a stream is word w % 4 of philox(counter {b, b >> 32, lane, 0},
 * key), b = w / 4, as accel.h documents. */
START_TEST(stream_layout)
{
	accel_rng r;
	ck_assert_int_eq(accel_rng_init(123, ACCEL_RNG_RANK, 5, 3, &r), ACCEL_OK);
	ck_assert_uint_eq(r.lane, 3);
	ck_assert_uint_eq(accel_rng_tell(&r), 0);
	accel_rng copy = r;
	for (uint64_t w = 0; w < 40; w++) {
		uint32_t ctr[4] = {(uint32_t)(w / 4), 0, 3, 0}, out[4];
		accel_rng_philox4x32(ctr, copy.key, out);
		ck_assert_uint_eq(accel_rng_u32(&r), out[w % 4]);
	}
	ck_assert_uint_eq(accel_rng_tell(&r), 40);
	/* High counter word: position 2^34 words is block 2^32. */
	accel_rng_seek(&r, UINT64_C(1) << 34);
	uint32_t ctr[4] = {0, 1, 3, 0}, out[4];
	accel_rng_philox4x32(ctr, copy.key, out);
	ck_assert_uint_eq(accel_rng_u32(&r), out[0]);
	/* The key depends on seed, kind and id; the lane only on the rank. */
	accel_rng a, b;
	accel_rng_init(123, ACCEL_RNG_DATA, 5, 3, &a);
	ck_assert_uint_eq(a.lane, 0);
	ck_assert(memcmp(a.key, copy.key, sizeof(a.key)));
	accel_rng_init(124, ACCEL_RNG_RANK, 5, 3, &b);
	ck_assert(memcmp(b.key, copy.key, sizeof(b.key)));
	accel_rng_init(123, ACCEL_RNG_RANK, 6, 3, &b);
	ck_assert(memcmp(b.key, copy.key, sizeof(b.key)));
	accel_rng_init(123, ACCEL_RNG_RANK, 5, 4, &b);
	ck_assert(!memcmp(b.key, copy.key, sizeof(b.key)));
}
END_TEST

static void draw(accel_rng *r, uint32_t *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		w[i] = accel_rng_u32(r);
}

START_TEST(streams_across_ranks)
{
	enum { N = 64, RANKS = 8 };
	uint32_t data[RANKS][N], rank[RANKS][N];
	for (int r = 0; r < RANKS; r++) {
		accel_rng d, k;
		ck_assert_int_eq(accel_rng_init(42, ACCEL_RNG_DATA, 0, r, &d), ACCEL_OK);
		ck_assert_int_eq(accel_rng_init(42, ACCEL_RNG_RANK, 0, r, &k), ACCEL_OK);
		draw(&d, data[r], N);
		draw(&k, rank[r], N);
	}
	for (int r = 1; r < RANKS; r++)
		ck_assert_msg(!memcmp(data[r], data[0], sizeof(data[0])),
		              "data stream differs on rank %d", r);
	for (int r = 0; r < RANKS; r++) {
		ck_assert(memcmp(rank[r], data[0], sizeof(data[0])));
		for (int q = r + 1; q < RANKS; q++) {
			int same = 0;
			for (int i = 0; i < N; i++)
				same += rank[r][i] == rank[q][i];
			ck_assert_msg(same == 0, "rank streams %d and %d share %d of %d words", r, q, same, N);
		}
	}
	/* Other seeds, ids and kinds are other streams. */
	accel_rng a;
	uint32_t w[N];
	accel_rng_init(43, ACCEL_RNG_DATA, 0, 0, &a);
	draw(&a, w, N);
	ck_assert(memcmp(w, data[0], sizeof(w)));
	accel_rng_init(42, ACCEL_RNG_DATA, 1, 0, &a);
	draw(&a, w, N);
	ck_assert(memcmp(w, data[0], sizeof(w)));
	accel_rng_init(42, ACCEL_RNG_PARAM, 0, 0, &a);
	draw(&a, w, N);
	ck_assert(memcmp(w, data[0], sizeof(w)));
}
END_TEST

/* Pearson correlation of uniforms between rank streams and between
 * neighbouring ids: within 5 standard errors of 0. */
START_TEST(independence)
{
	enum { N = 200000, S = 6 };
	float *u = malloc(sizeof(float) * N * S);
	ck_assert_ptr_nonnull(u);
	for (int s = 0; s < S; s++) {
		accel_rng r;
		if (s < 4)
			accel_rng_init(7, ACCEL_RNG_RANK, 0, s, &r);
		else
			accel_rng_init(7, ACCEL_RNG_DATA, (uint64_t)(s - 4), 0, &r);
		ck_assert_int_eq(accel_rng_fill_uniform(&r, u + (size_t)s * N, N, 0, 1), ACCEL_OK);
	}
	double lim = 5.0 / sqrt((double)N);
	for (int a = 0; a < S; a++)
		for (int b = a + 1; b < S; b++) {
			double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
			for (int i = 0; i < N; i++) {
				double x = u[(size_t)a * N + i], y = u[(size_t)b * N + i];
				sa += x;
				sb += y;
				sab += x * y;
				saa += x * x;
				sbb += y * y;
			}
			double cov = sab / N - (sa / N) * (sb / N);
			double corr = cov / sqrt((saa / N - (sa / N) * (sa / N)) * (sbb / N - (sb / N) * (sb / N)));
			ck_assert_msg(fabs(corr) < lim, "streams %d and %d: correlation %g", a, b, corr);
		}
	/* Lag-1 serial correlation inside one stream. */
	double s1 = 0, s2 = 0, s12 = 0;
	for (int i = 0; i + 1 < N; i++) {
		s1 += u[i];
		s2 += u[i] * (double)u[i];
		s12 += u[i] * (double)u[i + 1];
	}
	double m = s1 / (N - 1);
	double lag = (s12 / (N - 1) - m * m) / (s2 / (N - 1) - m * m);
	ck_assert_msg(fabs(lag) < lim, "lag-1 correlation %g", lag);
	free(u);
}
END_TEST

START_TEST(distributions)
{
	enum { N = 1 << 20, BINS = 64 };
	accel_rng r;
	accel_rng_init(2024, ACCEL_RNG_DATA, 9, 0, &r);
	double sum = 0, sq = 0;
	uint32_t bins[BINS] = {0};
	for (int i = 0; i < N; i++) {
		float x = accel_rng_uniform(&r);
		ck_assert(x >= 0.0f && x < 1.0f);
		ck_assert_float_eq(x * 0x1p24f, floorf(x * 0x1p24f));   /* 24-bit grid */
		sum += x;
		sq += (double)x * x;
		bins[(int)(x * BINS)]++;
	}
	double mean = sum / N, var = sq / N - mean * mean;
	ck_assert_msg(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / N), "uniform mean %g", mean);
	ck_assert_msg(fabs(var - 1.0 / 12) < 0.001, "uniform variance %g", var);
	double chi = 0, e = (double)N / BINS;
	for (int b = 0; b < BINS; b++)
		chi += (bins[b] - e) * (bins[b] - e) / e;
	/* 63 degrees of freedom: P(chi2 > 130) < 1e-6. */
	ck_assert_msg(chi < 130, "uniform chi-square %g over %d bins", chi, BINS);

	float *z = malloc(sizeof(float) * N);
	ck_assert_ptr_nonnull(z);
	ck_assert_int_eq(accel_rng_fill_normal(&r, z, N, 0, 1), ACCEL_OK);
	double s = 0, s2 = 0, s4 = 0, maxz = 0;
	int in1 = 0, in2 = 0;
	for (int i = 0; i < N; i++) {
		double x = z[i];
		s += x;
		s2 += x * x;
		s4 += x * x * x * x;
		in1 += fabs(x) < 1;
		in2 += fabs(x) < 2;
		if (fabs(x) > maxz)
			maxz = fabs(x);
	}
	mean = s / N;
	var = s2 / N - mean * mean;
	ck_assert_msg(fabs(mean) < 5 / sqrt((double)N), "normal mean %g", mean);
	ck_assert_msg(fabs(var - 1) < 5 * sqrt(2.0 / N), "normal variance %g", var);
	ck_assert_msg(fabs(s4 / N - 3) < 0.05, "normal kurtosis %g", s4 / N);
	ck_assert_msg(fabs((double)in1 / N - 0.682689) < 0.003, "P(|z| < 1) = %g", (double)in1 / N);
	ck_assert_msg(fabs((double)in2 / N - 0.954500) < 0.002, "P(|z| < 2) = %g", (double)in2 / N);
	ck_assert_msg(maxz < 6.7 && maxz > 4, "max |z| %g", maxz);
	free(z);

	/* Mean and std are applied; a range is half-open after rounding. */
	float f[1000];
	accel_rng_init(1, ACCEL_RNG_DATA, 0, 0, &r);
	ck_assert_int_eq(accel_rng_fill_normal(&r, f, 1000, 10, 0), ACCEL_OK);
	for (int i = 0; i < 1000; i++)
		ck_assert_float_eq(f[i], 10.0f);
	ck_assert_int_eq(accel_rng_fill_uniform(&r, f, 1000, -3, -3), ACCEL_OK);
	for (int i = 0; i < 1000; i++)
		ck_assert_float_eq(f[i], -3.0f);
	ck_assert_int_eq(accel_rng_fill_uniform(&r, f, 1000, 1.0, 1.0000001), ACCEL_OK);
	for (int i = 0; i < 1000; i++)
		ck_assert(f[i] >= 1.0f && f[i] < (float)1.0000001);
	double d = accel_rng_uniform_double(&r);
	ck_assert(d >= 0 && d < 1);
}
END_TEST

/* A fill equals single draws from any position, a copy continues the same,
 * seek(tell()) resumes. */
START_TEST(fill_seek_copy)
{
	enum { N = 37 };
	for (uint64_t start = 0; start < 9; start++) {
		accel_rng a, b;
		float fa[N], fb[N];
		accel_rng_init(5, ACCEL_RNG_RANK, 2, 1, &a);
		accel_rng_seek(&a, start);
		b = a;
		ck_assert_int_eq(accel_rng_fill_uniform(&a, fa, N, 0, 1), ACCEL_OK);
		for (int i = 0; i < N; i++)
			fb[i] = accel_rng_uniform(&b);
		ck_assert(!memcmp(fa, fb, sizeof(fa)));
		ck_assert_uint_eq(accel_rng_tell(&a), start + N);
		ck_assert_uint_eq(accel_rng_tell(&b), start + N);

		accel_rng_seek(&a, start);
		b = a;
		ck_assert_int_eq(accel_rng_fill_normal(&a, fa, N, 0.5, 2), ACCEL_OK);
		for (int i = 0; i < N; i++)
			fb[i] = (float)(0.5 + 2 * (double)accel_rng_normal(&b));
		ck_assert_msg(!memcmp(fa, fb, sizeof(fa)), "normal fill from position %llu",
		              (unsigned long long)start);
		ck_assert_uint_eq(accel_rng_tell(&a), start + 2 * N);
		ck_assert_uint_eq(accel_rng_tell(&b), start + 2 * N);
	}
	/* Save the position, draw, restore, draw again. */
	accel_rng r;
	accel_rng_init(5, ACCEL_RNG_DATA, 0, 0, &r);
	(void)accel_rng_u32(&r);
	uint64_t pos = accel_rng_tell(&r);
	uint32_t w1[10], w2[10];
	draw(&r, w1, 10);
	accel_rng fresh;
	accel_rng_init(5, ACCEL_RNG_DATA, 0, 0, &fresh);
	accel_rng_seek(&fresh, pos);
	draw(&fresh, w2, 10);
	ck_assert(!memcmp(w1, w2, sizeof(w1)));
}
END_TEST

/* Element i of a parameter depends on (seed, key, i) only: every sharding
 * of every world size gives the bits of the whole fill. */
START_TEST(indexed_any_sharding)
{
	enum { N = 1001 };
	float whole_u[N], whole_n[N], part[N];
	uint64_t key = accel_rng_key("layers.3.attn.q.weight");
	ck_assert_int_eq(accel_rng_fill_uniform_indexed(42, key, 0, N, -0.1, 0.1, whole_u), ACCEL_OK);
	ck_assert_int_eq(accel_rng_fill_normal_indexed(42, key, 0, N, 0, 0.02, whole_n), ACCEL_OK);
	for (int world = 1; world <= 7; world++) {
		/* Uneven shards: rank r owns [N*r/world, N*(r+1)/world), filled in
		 * chunks of 3 as a streaming init would. */
		for (int normal = 0; normal < 2; normal++) {
			memset(part, 0, sizeof(part));
			for (int r = 0; r < world; r++) {
				uint64_t a = (uint64_t)N * r / world, b = (uint64_t)N * (r + 1) / world;
				for (uint64_t c = a; c < b; c += 3) {
					uint64_t n = b - c < 3 ? b - c : 3;
					int rc = normal ? accel_rng_fill_normal_indexed(42, key, c, n, 0, 0.02, part + c)
					                : accel_rng_fill_uniform_indexed(42, key, c, n, -0.1, 0.1,
					                                                 part + c);
					ck_assert_int_eq(rc, ACCEL_OK);
				}
			}
			ck_assert_msg(!memcmp(part, normal ? whole_n : whole_u, sizeof(part)),
			              "world %d: %s values differ from the unsharded fill", world,
			              normal ? "normal" : "uniform");
		}
	}
	/* It is the ACCEL_RNG_PARAM stream of the key. */
	accel_rng r;
	accel_rng_init(42, ACCEL_RNG_PARAM, key, 0, &r);
	ck_assert_int_eq(accel_rng_fill_normal(&r, part, N, 0, 0.02), ACCEL_OK);
	ck_assert(!memcmp(part, whole_n, sizeof(part)));
	for (int i = 0; i < N; i++)
		ck_assert(whole_u[i] >= -0.1f && whole_u[i] < 0.1f);
	/* Another name or seed: other values. */
	ck_assert_int_eq(accel_rng_fill_normal_indexed(42, accel_rng_key("layers.3.attn.k.weight"),
	                                               0, N, 0, 0.02, part), ACCEL_OK);
	ck_assert(memcmp(part, whole_n, sizeof(part)));
	ck_assert_int_eq(accel_rng_fill_normal_indexed(43, key, 0, N, 0, 0.02, part), ACCEL_OK);
	ck_assert(memcmp(part, whole_n, sizeof(part)));
	/* FNV-1a 64 reference values. */
	ck_assert_uint_eq(accel_rng_key(""), UINT64_C(0xcbf29ce484222325));
	ck_assert_uint_eq(accel_rng_key("a"), UINT64_C(0xaf63dc4c8601ec8c));
	ck_assert_uint_eq(accel_rng_key("foobar"), UINT64_C(0x85944171f73967e8));
}
END_TEST

START_TEST(bad_arguments)
{
	accel_rng r, keep;
	float f[4];
	memset(&keep, 0xab, sizeof(keep));
	r = keep;
	ck_assert_int_eq(accel_rng_init(1, 3, 0, 0, &r), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_init(1, ACCEL_RNG_RANK, 0, -1, &r), ACCEL_ERR_INVALID_ARG);
	ck_assert(!memcmp(&r, &keep, sizeof(r)));   /* untouched */
	ck_assert_int_eq(accel_rng_init(1, ACCEL_RNG_DATA, 0, -1, &r), ACCEL_OK);   /* rank unused */
	ck_assert_int_eq(accel_rng_init(1, ACCEL_RNG_DATA, 0, 0, NULL), ACCEL_ERR_INVALID_ARG);
	uint64_t pos = accel_rng_tell(&r);
	ck_assert_int_eq(accel_rng_fill_uniform(&r, NULL, 4, 0, 1), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_uniform(&r, f, 4, 1, 0), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_uniform(&r, f, 4, 0, INFINITY), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_normal(&r, f, 4, 0, -1), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_normal(&r, f, 4, NAN, 1), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_normal(NULL, f, 4, 0, 1), ACCEL_ERR_INVALID_ARG);
	ck_assert_uint_eq(accel_rng_tell(&r), pos);   /* nothing drawn */
	ck_assert_int_eq(accel_rng_fill_uniform(&r, NULL, 0, 0, 1), ACCEL_OK);
	ck_assert_int_eq(accel_rng_fill_normal_indexed(1, 2, UINT64_MAX - 1, 4, 0, 1, f),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_uniform_indexed(1, 2, UINT64_MAX - 1, 4, 0, 1, f),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_rng_fill_uniform_indexed(1, 2, 0, 4, 0, 1, NULL),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_uint_eq(accel_rng_u32(NULL), 0);
	ck_assert_uint_eq(accel_rng_tell(NULL), 0);
	accel_rng_seek(NULL, 3);
	accel_rng_philox4x32(NULL, NULL, NULL);
}
END_TEST

/* With a context: the seed comes from the configuration, the lane from the
 * rank (0 in a one-process run). */
START_TEST(from_context)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = "{\"seed\": 7}", .skip_env = 1};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	ck_assert_msg(rc == ACCEL_OK, "accel_ctx_new: %s", ctx ? accel_errmsg(ctx) : "no context");
	accel_rng a, b;
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_RANK, 3, &a), ACCEL_OK);
	ck_assert_int_eq(accel_rng_init(7, ACCEL_RNG_RANK, 3, accel_rank(ctx), &b), ACCEL_OK);
	ck_assert(!memcmp(&a, &b, sizeof(a)));
	ck_assert_int_eq(accel_rng_seed_stream(ctx, 9, 3, &a), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(accel_errmsg(ctx), "kind"));
	ck_assert_int_eq(accel_rng_seed_stream(NULL, ACCEL_RNG_DATA, 0, &a), ACCEL_ERR_INVALID_ARG);
	accel_ctx_free(ctx);
}
END_TEST

static Suite *rng_suite(void)
{
	Suite *s = suite_create("rng");
	TCase *tc = tcase_create("philox");
	tcase_add_test(tc, known_answers);
	tcase_add_test(tc, stream_layout);
	tcase_add_test(tc, streams_across_ranks);
	tcase_add_test(tc, independence);
	tcase_add_test(tc, distributions);
	tcase_add_test(tc, fill_seek_copy);
	tcase_add_test(tc, indexed_any_sharding);
	tcase_add_test(tc, bad_arguments);
	suite_add_tcase(s, tc);
	tc = tcase_create("context");
	tcase_add_test(tc, from_context);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(rng_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
