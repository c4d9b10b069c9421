/* SPDX-License-Identifier: MIT */
/*
 * tests/test-fp8.c: the fp8 plugin's arithmetic, against references
 * written here independently of plugins/fp8:
 *  - every one of the 256 codes of E4M3 and E5M2 decodes to the value its
 *    bit fields define;
 *  - encoding at every boundary (each code, each midpoint between
 *    neighbours and the floats next to it, ties to even, subnormals, +-max,
 *    just above max, +-inf, NaN, -0) and on a random sweep of f32 bit
 *    patterns equals a brute-force nearest-code search with saturation;
 *  - the delayed-scaling update: scale * amax <= fp8_max * 2^-margin after
 *    every update, amax 0 / inf / NaN keeps the scale, the history's roll
 *    and amax_compute_algo max vs most_recent;
 *  - the emulated GEMM equals an f32 GEMM of the dequantized operands,
 *    bit for bit.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accel/types.h"
#include "fp8.h"
#include "fp8_codec.h"
#include "fp8_recipe.h"

static const uint32_t fmts[2] = {ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E5M2};

/* ---- the reference ----------------------------------------------------------- */

/* The value of a code from its fields, in double. */
static double ref_decode(uint32_t fmt, unsigned code)
{
	int e5 = fmt == ACCEL_DTYPE_F8E5M2;
	int mbits = e5 ? 2 : 3, bias = e5 ? 15 : 7;
	unsigned sign = code >> 7, e = (code >> mbits) & (e5 ? 31u : 15u);
	unsigned m = code & ((1u << mbits) - 1);
	double v;
	if (e5 && e == 31)
		v = m ? NAN : INFINITY;
	else if (!e5 && (code & 0x7f) == 0x7f)
		v = NAN;
	else if (e == 0)
		v = pow(2.0, 1 - bias) * m / (1 << mbits);
	else
		v = pow(2.0, (int)e - bias) * (1.0 + (double)m / (1 << mbits));
	return sign ? -v : v;
}

/* Nearest finite code to x (in double), ties to the even code, saturating;
 * NaN -> 0x7f. */
static unsigned ref_encode(uint32_t fmt, double x)
{
	if (isnan(x))
		return 0x7f;
	unsigned sign = signbit(x) ? 0x80 : 0;
	double a = fabs(x);
	unsigned best = 0;
	double bd = INFINITY;
	for (unsigned c = 0; c < 0x80; c++) {
		double v = ref_decode(fmt, c);
		if (!isfinite(v))
			continue;
		double dist = fabs(a - v);
		if (dist < bd || (dist == bd && (c & 1) == 0)) {
			bd = dist;
			best = c;
		}
	}
	/* saturate: everything above the largest finite value is max */
	unsigned maxc = fmt == ACCEL_DTYPE_F8E5M2 ? 0x7b : 0x7e;
	if (a >= ref_decode(fmt, maxc))
		best = maxc;
	return sign | best;
}

static int same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

/* ---- codec ---------------------------------------------------------------------- */

START_TEST(test_decode_all)
{
	uint32_t fmt = fmts[_i];
	int nan = 0, inf = 0;
	for (unsigned c = 0; c < 256; c++) {
		float want = (float)ref_decode(fmt, c), got = fp8_decode(fmt, (uint8_t)c);
		ck_assert_msg(same_float(got, want), "%s code 0x%02x decodes to %a, want %a",
		              accel_abi_dtype_name(fmt), c, got, want);
		nan += isnan(got) != 0;
		inf += isinf(got) != 0;
	}
	/* E4M3: 0x7f, 0xff; E5M2: 0x7d-0x7f, 0xfd-0xff NaN and 0x7c/0xfc inf */
	ck_assert_int_eq(nan, (fmt == ACCEL_DTYPE_F8E4M3 ? 2 : 6));
	ck_assert_int_eq(inf, (fmt == ACCEL_DTYPE_F8E4M3 ? 0 : 2));
	ck_assert(fp8_decode(fmt, fmt == ACCEL_DTYPE_F8E4M3 ? 0x7e : 0x7b) == fp8_max(fmt));
}
END_TEST

static void check_encode(uint32_t fmt, float x)
{
	unsigned want = ref_encode(fmt, x), got = fp8_encode(fmt, x);
	ck_assert_msg(got == want, "%s encode(%a = %.9g) = 0x%02x, want 0x%02x",
	              accel_abi_dtype_name(fmt), x, x, got, want);
}

START_TEST(test_encode_boundaries)
{
	uint32_t fmt = fmts[_i];
	float vals[128];
	int n = 0;
	for (unsigned c = 0; c < 0x80; c++) {
		float v = (float)ref_decode(fmt, c);
		if (isfinite(v))
			vals[n++] = v;
	}
	for (int i = 0; i < n; i++) {
		float v = vals[i];
		for (int s = 0; s < 2; s++) {
			float sg = s ? -1.0f : 1.0f;
			check_encode(fmt, sg * v);
			check_encode(fmt, sg * nextafterf(v, INFINITY));
			check_encode(fmt, sg * nextafterf(v, 0.0f));
			if (i + 1 < n) {
				/* the midpoint is exact in f32: a tie, which goes to the even code */
				float mid = (v + vals[i + 1]) / 2;
				ck_assert((double)mid == ((double)v + vals[i + 1]) / 2);
				check_encode(fmt, sg * mid);
				check_encode(fmt, sg * nextafterf(mid, INFINITY));
				check_encode(fmt, sg * nextafterf(mid, 0.0f));
			}
		}
	}
	float mx = fp8_max(fmt), gap = mx - vals[n - 2];
	float special[] = {0.0f, -0.0f, mx, -mx, nextafterf(mx, INFINITY), mx + gap / 2,
	                   mx + gap, 1e30f, -1e30f, FLT_MAX, INFINITY, -INFINITY, NAN, -NAN,
	                   FLT_TRUE_MIN, -FLT_TRUE_MIN, vals[1] / 2, vals[1] * 0.75f,
	                   vals[1] * 1.5f, vals[1] * 2.5f};
	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		check_encode(fmt, special[i]);
	/* the points of the contract, spelled out */
	uint8_t mc = fmt == ACCEL_DTYPE_F8E4M3 ? 0x7e : 0x7b;
	ck_assert_uint_eq(fp8_encode(fmt, INFINITY), mc);
	ck_assert_uint_eq(fp8_encode(fmt, -INFINITY), 0x80 | mc);
	ck_assert_uint_eq(fp8_encode(fmt, nextafterf(mx, INFINITY)), mc);
	ck_assert_uint_eq(fp8_encode(fmt, NAN), 0x7f);
	ck_assert_uint_eq(fp8_encode(fmt, -0.0f), 0x80);
	ck_assert_uint_eq(fp8_encode(fmt, vals[1] / 2), 0x00);   /* tie to even: 0 */
	ck_assert_uint_eq(fp8_encode(fmt, vals[1] * 1.5f), 0x02); /* tie to even: 2 */
}
END_TEST

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

START_TEST(test_encode_sweep)
{
	uint32_t fmt = fmts[_i];
	/* random f32 around the format's range: sign, exponents 2^-30 .. 2^30,
	 * random mantissas; fewer under sanitizers (ACCEL_TEST_QUICK) */
	int n = getenv("ACCEL_TEST_QUICK") ? 20000 : 200000;
	for (int i = 0; i < n; i++) {
		uint32_t r = rnd32();
		uint32_t bits = (r & 0x80000000u) | ((uint32_t)(127 - 30 + (rnd32() % 61)) << 23) |
		                (r & 0x7fffffu);
		float x;
		memcpy(&x, &bits, sizeof(x));
		check_encode(fmt, x);
	}
	/* with a scale: quantize(x, s) = encode(x * s) in f32 */
	float x[64];
	uint8_t q[64];
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i - 32) * 0.37f;
	float amax = fp8_quantize_f32(fmt, x, 64, 3.5f, q);
	ck_assert(amax == 32 * 0.37f);
	for (int i = 0; i < 64; i++)
		ck_assert_uint_eq(q[i], ref_encode(fmt, (double)(x[i] * 3.5f)));
	x[5] = NAN;
	ck_assert(isnan(fp8_quantize_f32(fmt, x, 64, 1.0f, q)));
	x[5] = -INFINITY;
	ck_assert(isinf(fp8_quantize_f32(fmt, x, 64, 1.0f, q)));
}
END_TEST

/* ---- recipe ---------------------------------------------------------------------- */

START_TEST(test_scale_bound)
{
	/* scale * amax <= fp8_max * 2^-margin after every update, over random
	 * amaxes across 40 decades and margins 0..4 */
	for (int f = 0; f < 2; f++)
		for (int margin = 0; margin <= 4; margin++) {
			float fmax = fp8_max(fmts[f]);
			float hist[4 * 3] = {0}, scale[3] = {1, 1, 1};
			float fm[3] = {fmax, fmax, fmax};
			for (int step = 0; step < 2000; step++) {
				for (int j = 0; j < 3; j++) {
					float a = ldexpf(1.0f + (float)(rnd32() % 1000000) / 1e6f,
					                 (int)(rnd32() % 80) - 40);
					hist[j] = a;
				}
				float amax[3];
				fp8_recipe_update(hist, 4, 3, FP8_ALGO_MAX, fm, margin, 1, scale, amax);
				for (int j = 0; j < 3; j++) {
					double bound = ldexp(fmax, -margin);
					ck_assert_msg((double)scale[j] * amax[j] <= bound,
					              "margin %d: scale %a * amax %a > %g", margin, scale[j],
					              amax[j], bound);
					/* and not far below it: within one f32 ulp */
					ck_assert((double)nextafterf(scale[j], INFINITY) * amax[j] > bound ||
					          scale[j] == FLT_MAX);
				}
			}
		}
}
END_TEST

START_TEST(test_scale_unchanged)
{
	const float bad[] = {0.0f, INFINITY, NAN};
	for (int i = 0; i < 3; i++) {
		float hist[3] = {bad[i], bad[i], bad[i]}, scale[3] = {0.25f, 2.0f, 8.0f};
		float fm[3] = {448, 448, 57344};
		fp8_recipe_update(hist, 1, 3, FP8_ALGO_MAX, fm, 0, 1, scale, NULL);
		ck_assert(scale[0] == 0.25f && scale[1] == 2.0f && scale[2] == 8.0f);
		ck_assert(hist[0] == 0 && hist[1] == 0 && hist[2] == 0);   /* row 0 zeroed */
		ck_assert(fp8_recipe_scale(bad[i], 448, 0, 3.0f) == 3.0f);
	}
	/* the rule itself */
	ck_assert(fp8_recipe_scale(2.0f, 448, 0, 1) == 224.0f);
	ck_assert(fp8_recipe_scale(2.0f, 448, 3, 1) == 28.0f);
	ck_assert(fp8_recipe_scale(57344, 57344, 0, 1) == 1.0f);
	/* update_scale 0 (between intervals): the history moves, the scale not */
	float hist[2] = {4.0f, 0}, scale[2] = {1, 1}, fm[2] = {448, 448};
	fp8_recipe_update(hist, 1, 2, FP8_ALGO_MAX, fm, 0, 0, scale, NULL);
	ck_assert(scale[0] == 1.0f && hist[0] == 0.0f);
}
END_TEST

START_TEST(test_history)
{
	/* len 3, one column: amaxes 5, 1, 2, 0.5 in turn.  torch.roll(h, -1)
	 * then zero row 0: after each update row 0 is 0 and the past steps sit
	 * at the end, newest last. */
	float h[3] = {0}, scale[1] = {1}, fm[1] = {448}, amax[1];
	const float in[4] = {5, 1, 2, 0.5f};
	const float want_max[4] = {5, 5, 5, 2};   /* max over the last 3 steps */
	const float want_rows[4][3] = {{0, 0, 5}, {0, 5, 1}, {0, 1, 2}, {0, 2, 0.5f}};
	for (int t = 0; t < 4; t++) {
		h[0] = in[t];
		fp8_recipe_update(h, 3, 1, FP8_ALGO_MAX, fm, 0, 1, scale, amax);
		ck_assert_msg(amax[0] == want_max[t], "step %d: amax %g, want %g", t, amax[0],
		              want_max[t]);
		ck_assert(scale[0] == 448.0f / want_max[t]);
		for (int r = 0; r < 3; r++)
			ck_assert_msg(h[r] == want_rows[t][r], "step %d row %d: %g, want %g", t, r, h[r],
			              want_rows[t][r]);
	}
	/* most_recent: only this step's amax */
	float g[3] = {0, 9, 9};
	g[0] = 3.0f;
	fp8_recipe_update(g, 3, 1, FP8_ALGO_MOST_RECENT, fm, 0, 1, scale, amax);
	ck_assert(amax[0] == 3.0f && scale[0] == 448.0f / 3.0f);
	/* a NaN anywhere in the history: max is NaN and the scale stays */
	float k[3] = {1.0f, NAN, 2.0f};
	scale[0] = 7.0f;
	fp8_recipe_update(k, 3, 1, FP8_ALGO_MAX, fm, 0, 1, scale, amax);
	ck_assert(isnan(amax[0]) && scale[0] == 7.0f);
}
END_TEST

/* ---- emulated GEMM ------------------------------------------------------------------ */

START_TEST(test_gemm_emulated)
{
	/* D = alpha A.B^T (+ D): A [m,k] in afmt, B [n,k] in bfmt */
	static const struct {
		uint64_t m, n, k;
		uint32_t afmt, bfmt;
		float asi, bsi, alpha;
		int acc;
	} cases[] = {
		{7, 5, 33, ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E4M3, 0.125f, 3.0f, 1.0f, 0},
		{16, 16, 64, ACCEL_DTYPE_F8E5M2, ACCEL_DTYPE_F8E4M3, 1.0f / 448, 0.5f, 2.0f, 1},
		{1, 9, 300, ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E5M2, 1e-3f, 7.0f, -1.0f, 0},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint64_t m = cases[c].m, n = cases[c].n, k = cases[c].k;
		uint8_t *a = malloc(m * k), *b = malloc(n * k);
		float *d = malloc(m * n * sizeof(float)), *want = malloc(m * n * sizeof(float));
		float *da = malloc(m * k * sizeof(float)), *db = malloc(n * k * sizeof(float));
		/* every finite code, NaN codes left out (they would make D NaN) */
		for (uint64_t i = 0; i < m * k; i++) {
			unsigned cc;
			do
				cc = rnd32() & 0xff;
			while (!isfinite(ref_decode(cases[c].afmt, cc)));
			a[i] = (uint8_t)cc;
			da[i] = (float)ref_decode(cases[c].afmt, cc) * cases[c].asi;
		}
		for (uint64_t i = 0; i < n * k; i++) {
			unsigned cc;
			do
				cc = rnd32() & 0xff;
			while (!isfinite(ref_decode(cases[c].bfmt, cc)));
			b[i] = (uint8_t)cc;
			db[i] = (float)ref_decode(cases[c].bfmt, cc) * cases[c].bsi;
		}
		for (uint64_t i = 0; i < m * n; i++)
			d[i] = want[i] = (float)i * 0.01f;
		/* the reference: dequantize, then the plain f32 GEMM */
		for (uint64_t i = 0; i < m; i++)
			for (uint64_t j = 0; j < n; j++) {
				float acc = 0.0f;
				for (uint64_t t = 0; t < k; t++)
					acc += da[i * k + t] * db[j * k + t];
				float v = cases[c].alpha * acc;
				want[i * n + j] = cases[c].acc ? want[i * n + j] + v : v;
			}
		fp8_gemm_emulate(m, n, k, a, cases[c].afmt, cases[c].asi, b, cases[c].bfmt,
		                 cases[c].bsi, cases[c].alpha, d, cases[c].acc);
		ck_assert_msg(memcmp(d, want, m * n * sizeof(float)) == 0,
		              "case %zu: emulated GEMM differs from the dequantized f32 GEMM", c);
		free(a);
		free(b);
		free(d);
		free(want);
		free(da);
		free(db);
	}
}
END_TEST

static Suite *fp8_suite(void)
{
	Suite *s = suite_create("fp8");
	TCase *tc = tcase_create("codec");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_decode_all, 0, 2);
	tcase_add_loop_test(tc, test_encode_boundaries, 0, 2);
	tcase_add_loop_test(tc, test_encode_sweep, 0, 2);
	suite_add_tcase(s, tc);
	tc = tcase_create("recipe");
	tcase_add_test(tc, test_scale_bound);
	tcase_add_test(tc, test_scale_unchanged);
	tcase_add_test(tc, test_history);
	suite_add_tcase(s, tc);
	tc = tcase_create("gemm");
	tcase_add_test(tc, test_gemm_emulated);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(fp8_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
