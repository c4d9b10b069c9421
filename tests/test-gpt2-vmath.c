/* SPDX-License-Identifier: MIT */
/*
 * tests/test-gpt2-vmath.c: examples/gpt2/gpt2_vmath.h, both kernels (the
 * AVX2+FMA ones where the CPU has them, and the portable ones), against
 * double-precision libm: values over the ranges the model feeds them,
 * every length of a partial last vector, the elements past n untouched,
 * and NaN / infinities kept.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_vmath.h"

#define GELU_K 0.7978845608028654
#define GELU_A 0.044715
#define CANARY 12345.0f

static double gelu_d(double v)
{
	return 0.5 * v * (1 + tanh(GELU_K * (v + GELU_A * v * v * v)));
}

static double gelu_grad_d(double v)
{
	double t = tanh(GELU_K * (v + GELU_A * v * v * v));
	return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * GELU_K * (1 + 3 * GELU_A * v * v);
}

/* deterministic values in [lo, hi] */
static void fill(float *x, size_t n, double lo, double hi, unsigned seed)
{
	srand(seed);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(lo + (hi - lo) * rand() / (double)RAND_MAX);
}

/* the kernels of loop index k: 0 portable, 1 AVX2+FMA (skipped, with a
 * line saying so, where the CPU lacks them) */
static int use_kernels(int k)
{
	int got = gpt2_vmath_force(k);
	if (got != k)
		fprintf(stderr, "skipped: the CPU has no AVX2+FMA\n");
	return got == k;
}

/* Ranges of the inputs: the exp arguments of a softmax (<= 0 after the
 * max, down to where exp leaves the floats) and of GELU's pre-activations
 * (beyond |x| = 10 tanh is 1 in float). */
static const struct exp_case {
	double lo, hi, shift;
} exp_cases[] = {
	{-20, 0, 0},      /* a softmax row */
	{-110, 5, 3},     /* through the underflow, with a shift */
	{-1, 1, -0.5},    /* around 0 */
	{60, 88.7, 0},    /* up to the overflow */
};

START_TEST(exp_sum_matches_libm)
{
	for (int k = 0; k < 2; k++) {
		if (!use_kernels(k))
			continue;
		for (size_t c = 0; c < sizeof(exp_cases) / sizeof(exp_cases[0]); c++) {
			const struct exp_case *e = &exp_cases[c];
			enum { N = 4099 };
			static float x[N], y[N + 1];
			fill(x, N, e->lo, e->hi, 7 + (unsigned)c);
			y[N] = CANARY;
			double s = gpt2_vmath_exp_sum(y, x, (float)e->shift, N), sd = 0, worst = 0;
			for (size_t i = 0; i < N; i++) {
				double ref = exp((double)(x[i] - (float)e->shift));
				sd += (double)(float)ref;
				/* below the normal floats: 0 (AVX2) or a subnormal (libm) */
				double err = ref < FLT_MIN ? (y[i] <= FLT_MIN ? 0 : 1)
				                           : fabs(y[i] - ref) / ref;
				worst = fmax(worst, err);
			}
			/* observed worst 1.15e-7 (AVX2), 5.9e-8 (libm); of the sum
			 * against the sum of the rounded references 3.5e-9 */
			ck_assert_msg(worst < 3.6e-7, "kernels %d case %zu: exp rel error %.3g", k, c,
			              worst);
			ck_assert_msg(fabs(s - sd) <= 1e-8 * sd, "kernels %d case %zu: sum %.9g vs %.9g", k,
			              c, s, sd);
			ck_assert(y[N] == CANARY);
			/* without y: the same sum, x untouched */
			ck_assert(gpt2_vmath_exp_sum(NULL, x, (float)e->shift, N) == s);
		}
	}
}
END_TEST

/* Every length 1..40 (the masked last vector of each remainder), y == x
 * allowed, and the element after n untouched. */
START_TEST(lengths_and_tails)
{
	for (int k = 0; k < 2; k++) {
		if (!use_kernels(k))
			continue;
		for (size_t n = 1; n <= 40; n++) {
			float x[48] = {0}, y[48], m = -INFINITY;
			fill(x, n, -5, 5, (unsigned)n);
			for (size_t i = 0; i < n; i++)
				m = x[i] > m ? x[i] : m;
			x[n] = 100; /* beyond n: must not be seen */
			ck_assert_msg(gpt2_vmath_max(x, n) == m, "kernels %d n %zu: max", k, n);
			memcpy(y, x, sizeof(x));
			double s = gpt2_vmath_exp_sum(y, y, m, n), sd = 0;
			for (size_t i = 0; i < n; i++) {
				double ref = exp((double)(x[i] - m));
				sd += ref;
				ck_assert_msg(fabs(y[i] - ref) <= 3.6e-7 * ref, "kernels %d n %zu i %zu", k, n,
				              i);
			}
			ck_assert_msg(fabs(s - sd) <= 3.6e-7 * sd, "kernels %d n %zu: sum", k, n);
			ck_assert(y[n] == 100);
			float before[48];
			memcpy(before, y, sizeof(y));
			gpt2_vmath_scale(y, 0.5f, n);
			for (size_t i = 0; i < n; i++)
				ck_assert(y[i] == before[i] * 0.5f);
			ck_assert(y[n] == 100);
			double dot = gpt2_vmath_dot(x, x, n), dd = 0;
			for (size_t i = 0; i < n; i++)
				dd += (double)x[i] * x[i];
			ck_assert_msg(fabs(dot - dd) <= 1e-12 * dd, "kernels %d n %zu: dot", k, n);
			float g[48], d[48];
			for (size_t i = 0; i < 48; i++)
				g[i] = d[i] = 1;
			gpt2_vmath_gelu_forward(g, x, n);
			gpt2_vmath_gelu_backward(d, x, n);
			for (size_t i = 0; i < n; i++) {
				ck_assert(fabs(g[i] - gelu_d(x[i])) < 4e-7 * fmax(1, fabs(x[i])));
				ck_assert(fabs(d[i] - gelu_grad_d(x[i])) < 5e-7);
			}
			ck_assert(g[n] == 1 && d[n] == 1);
		}
	}
}
END_TEST

START_TEST(gelu_matches_libm)
{
	enum { N = 20001 };
	static float x[N], y[N], d[N];
	for (size_t i = 0; i < N; i++)
		x[i] = (float)(-12 + 24.0 * (double)i / (N - 1));
	for (int k = 0; k < 2; k++) {
		if (!use_kernels(k))
			continue;
		for (size_t i = 0; i < N; i++)
			d[i] = 1;
		gpt2_vmath_gelu_forward(y, x, N);
		gpt2_vmath_gelu_backward(d, x, N);
		double wf = 0, wb = 0;
		for (size_t i = 0; i < N; i++) {
			/* absolute error against max(1, |x|): near 0 GELU is ~x/2 */
			wf = fmax(wf, fabs(y[i] - gelu_d(x[i])) / fmax(1, fabs(x[i])));
			wb = fmax(wb, fabs(d[i] - gelu_grad_d(x[i])));
		}
		/* observed worst 1.3e-7 forward, 1.7e-7 backward (both kernels) */
		ck_assert_msg(wf < 4e-7, "kernels %d: GELU error %.3g", k, wf);
		ck_assert_msg(wb < 5e-7, "kernels %d: GELU' error %.3g", k, wb);
	}
}
END_TEST

/* What libm does with NaN and infinities: a loss scaler sees an overflow
 * through them. */
START_TEST(nan_and_inf_kept)
{
	for (int k = 0; k < 2; k++) {
		if (!use_kernels(k))
			continue;
		float x[9] = {NAN, INFINITY, -INFINITY, 0, 1, 89, -89, 88, -87}, y[9];
		gpt2_vmath_exp_sum(y, x, 0, 9);
		ck_assert(isnan(y[0]));
		ck_assert(isinf(y[1]) && y[1] > 0);
		ck_assert(y[2] == 0);
		ck_assert(y[3] == 1);
		ck_assert(fabs(y[4] - M_E) < 3e-7 * M_E);
		ck_assert(isinf(y[5]));
		ck_assert(y[6] <= FLT_MIN);
		ck_assert(fabs(y[7] - exp(88.0)) < 3.6e-7 * exp(88.0));
		ck_assert(fabs(y[8] - exp(-87.0)) < 3.6e-7 * exp(-87.0));
		float g[9], d[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
		gpt2_vmath_gelu_forward(g, x, 9);
		gpt2_vmath_gelu_backward(d, x, 9);
		ck_assert(isnan(g[0]) && isnan(d[0]));
		ck_assert(isinf(g[1]) && g[1] > 0);
		ck_assert(g[3] == 0 && d[3] == 0.5f);
		ck_assert(g[5] == 89 && d[5] == 1);
	}
	gpt2_vmath_force(-1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gpt2-vmath");
	TCase *tc = tcase_create("kernels");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, exp_sum_matches_libm);
	tcase_add_test(tc, lengths_and_tails);
	tcase_add_test(tc, gelu_matches_libm);
	tcase_add_test(tc, nan_and_inf_kept);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
