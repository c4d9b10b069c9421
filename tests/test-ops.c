/* SPDX-License-Identifier: MIT */
/* tests/test-ops.c: the CPU device ops (core/ops_cpu.c).
 *
 * - op_copy f32 -> bf16 and f32 -> f16 against the independent reference of
 *   tests/half-ref.h: every finite target value of either sign, its
 *   midpoints to the next value up (ties to even) and one f32 ulp either
 *   side of each, f16 overflow (65504 <= x < 65520 -> 65504, 65520 and up
 *   -> Inf) and bf16's, subnormals of both formats, +-0, +-Inf, NaNs (stay
 *   NaN, quiet) and 2^20 random f32 bit patterns;
 * - the way back (bf16/f16 -> f32) is exact: every pattern decodes to the
 *   reference's value, and each finite one survives the round trip.
 * The CUDA module runs the same probes in tests/test-cuda.c (gpu suite). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ops.h"
#include "half-ref.h"

static accel_view host_view(uint32_t dt, void *data, uint64_t n)
{
	accel_view v = {sizeof(v), dt, ACCEL_DEVICE_CPU, 0, data, n};
	return v;
}

static const struct {
	const half_fmt *fmt;
	uint32_t dtype;
} formats[] = {
	{&half_fmt_bf16, ACCEL_DTYPE_BF16},
	{&half_fmt_f16, ACCEL_DTYPE_F16},
};

START_TEST(copy_rounds_to_nearest_even)
{
	const half_fmt *f = formats[_i].fmt;
	size_t n = 0;
	half_probe *p = half_ref_probes(f, (size_t)1 << 20, &n);
	ck_assert_msg(p != NULL, "%s: building the probes failed (see stderr)", f->name);
	float *x = malloc(n * sizeof(*x));
	uint16_t *out = malloc(n * sizeof(*out));
	ck_assert(x && out);
	for (size_t i = 0; i < n; i++)
		x[i] = p[i].x;
	accel_view src = host_view(ACCEL_DTYPE_F32, x, n);
	accel_view dst = host_view(formats[_i].dtype, out, n);
	accel_err e = {0};
	ck_assert_msg(accelp_ops_copy(&dst, &src, &e) == ACCEL_OK, "%s", e.msg);
	char msg[256];
	size_t bad = half_ref_compare(f, p, out, n, msg, sizeof(msg));
	ck_assert_msg(bad == 0, "%zu of %zu conversions wrong; first: %s", bad, n, msg);
	/* the probes hit every finite result of both signs (the values
	 * themselves are among them) */
	ck_assert_uint_ge(n, (size_t)2 * 4 * (half_ref_exp_mask(f) - 1u + 1u));
	free(p);
	free(x);
	free(out);
}
END_TEST

START_TEST(decode_is_exact)
{
	const half_fmt *f = formats[_i].fmt;
	enum { N = 65536 };
	uint16_t *h = malloc(N * sizeof(*h)), *back = malloc(N * sizeof(*back));
	float *x = malloc(N * sizeof(*x));
	ck_assert(h && back && x);
	for (uint32_t i = 0; i < N; i++)
		h[i] = (uint16_t)i;
	accel_view hv = host_view(formats[_i].dtype, h, N), xv = host_view(ACCEL_DTYPE_F32, x, N),
	           bv = host_view(formats[_i].dtype, back, N);
	accel_err e = {0};
	ck_assert_msg(accelp_ops_copy(&xv, &hv, &e) == ACCEL_OK, "%s", e.msg);
	ck_assert_msg(accelp_ops_copy(&bv, &xv, &e) == ACCEL_OK, "%s", e.msg);
	size_t bad = 0, first = 0;
	for (uint32_t i = 0; i < N; i++) {
		double want = half_ref_decode(f, (uint16_t)i);
		int ok = isnan(want) ? isnan(x[i]) && half_ref_is_nan(f, back[i])
		                     : (double)x[i] == want && !signbit(x[i]) == !signbit(want) &&
		                       back[i] == h[i];
		if (!ok && bad++ == 0)
			first = i;
	}
	ck_assert_msg(bad == 0, "%s: %zu patterns wrong; first 0x%04zx -> %a -> 0x%04x, want %a",
	              f->name, bad, first, (double)x[first], back[first],
	              half_ref_decode(f, (uint16_t)first));
	free(h);
	free(back);
	free(x);
}
END_TEST

static Suite *ops_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *tc = tcase_create("convert");
	tcase_add_loop_test(tc, copy_rounds_to_nearest_even, 0, 2);
	tcase_add_loop_test(tc, decode_is_exact, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ops_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
