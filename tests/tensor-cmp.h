/* SPDX-License-Identifier: MIT */
/*
 * tests/tensor-cmp.h: the relative difference of two float arrays, the
 * measure shared by tests/test-gpt2-cuda.c, tests/test-gpt2-gemm.c and
 * tests/test-mlp-cuda.c: max |want - got| over max |want| (the plain max
 * difference when want is all zero); a NaN in got makes it infinite.
 */
#ifndef ACCEL_TESTS_TENSOR_CMP_H
#define ACCEL_TESTS_TENSOR_CMP_H

#include <math.h>
#include <stddef.h>

/* Returns the relative difference; ret_md and ret_ma get max |want - got|
 * and max |want|. */
static inline double tensor_cmp_rel(const float *want, const float *got, size_t n,
                                    double *ret_md, double *ret_ma)
{
	double md = 0, ma = 0;
	for (size_t i = 0; i < n; i++) {
		md = fmax(md, fabs((double)want[i] - (double)got[i]));
		ma = fmax(ma, fabs((double)want[i]));
		if (isnan(got[i]))
			md = INFINITY;
	}
	*ret_md = md;
	*ret_ma = ma;
	return ma > 0 ? md / ma : md;
}

#endif
