/* SPDX-License-Identifier: MIT */
/* core/ops_cpu.c: the device ops for host memory.  Plain loops the compiler
 * vectorises; f16/bf16 go through f32. */
#include <math.h>
#include <string.h>

/* These loops stream whole gradient buffers every step; the default
 * debugoptimized build (-O2) only vectorises the cheapest of them, so ask
 * for the vectoriser with its dynamic cost model here, as core/optim.c does. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "vect-cost-model=dynamic")
#endif

#include "accel/accel.h"
#include "backends/common/half.h"
#include "ops.h"

static int check_view(const accel_view *v, const char *what, int float_only, accel_err *err)
{
	if (!v)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: view is NULL", what);
	if (v->device != ACCEL_DEVICE_CPU)   /* callers route device views first */
		return accelp_err_set(err, ACCEL_ERR_INTERNAL, "%s: view on device %d:%d reached "
		                     "the CPU op", what, v->device, v->device_index);
	if (accel_dtype_size(v->dtype) == 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: invalid dtype %u", what,
		                     v->dtype);
	if (float_only && v->dtype != ACCEL_DTYPE_F32 && v->dtype != ACCEL_DTYPE_F64 &&
	    v->dtype != ACCEL_DTYPE_F16 && v->dtype != ACCEL_DTYPE_BF16)
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED,
		                     "%s: dtype %s is not supported (f32, f64, f16, bf16 are)", what,
		                     accel_dtype_name(v->dtype));
	if (v->numel && !v->data)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: NULL data with %llu elements",
		                     what, (unsigned long long)v->numel);
	return ACCEL_OK;
}

/* A view on a device (not NULL, not the CPU): the op goes to ops_device.c. */
static int on_device(const accel_view *v)
{
	return v && v->device != ACCEL_DEVICE_CPU;
}

static inline double load(const void *p, uint32_t dt, uint64_t i)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: return ((const float *)p)[i];
	case ACCEL_DTYPE_F64: return ((const double *)p)[i];
	case ACCEL_DTYPE_F16: return accel_f16_to_f32(((const uint16_t *)p)[i]);
	default: return accel_bf16_to_f32(((const uint16_t *)p)[i]);
	}
}

static inline void store(void *p, uint32_t dt, uint64_t i, double v)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: ((float *)p)[i] = (float)v; break;
	case ACCEL_DTYPE_F64: ((double *)p)[i] = v; break;
	case ACCEL_DTYPE_F16: ((uint16_t *)p)[i] = accel_f32_to_f16((float)v); break;
	default: ((uint16_t *)p)[i] = accel_f32_to_bf16((float)v); break;
	}
}

int accelp_ops_copy(const accel_view *dst, const accel_view *src, accel_err *err)
{
	int r;
	if (on_device(dst) || on_device(src))
		return accelp_ops_device_copy(dst, src, err);
	if ((r = check_view(dst, "copy dst", 0, err)) || (r = check_view(src, "copy src", 0, err)))
		return r;
	if (dst->numel != src->numel)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "copy: %llu destination elements but %llu source elements",
		                     (unsigned long long)dst->numel, (unsigned long long)src->numel);
	if (dst->dtype == src->dtype) {
		if (dst->data != src->data && dst->numel)
			memmove(dst->data, src->data, dst->numel * accel_dtype_size(dst->dtype));
		return ACCEL_OK;
	}
	if ((r = check_view(dst, "copy dst", 1, err)) || (r = check_view(src, "copy src", 1, err)))
		return r;
	uint64_t n = dst->numel;
	if (dst->dtype == ACCEL_DTYPE_F32 && src->dtype == ACCEL_DTYPE_BF16) {
		float *restrict d = dst->data;
		const uint16_t *restrict s = src->data;
		for (uint64_t i = 0; i < n; i++)
			d[i] = accel_bf16_to_f32(s[i]);
	} else if (dst->dtype == ACCEL_DTYPE_BF16 && src->dtype == ACCEL_DTYPE_F32) {
		uint16_t *restrict d = dst->data;
		const float *restrict s = src->data;
		for (uint64_t i = 0; i < n; i++)
			d[i] = accel_f32_to_bf16(s[i]);
	} else {
		for (uint64_t i = 0; i < n; i++)
			store(dst->data, dst->dtype, i, load(src->data, src->dtype, i));
	}
	return ACCEL_OK;
}

int accelp_ops_fill(const accel_view *dst, double value, accel_err *err)
{
	if (on_device(dst))
		return accelp_ops_device_fill(dst, value, err);
	int r = check_view(dst, "fill", 1, err);
	if (r)
		return r;
	if (value == 0.0) {
		if (dst->numel)
			memset(dst->data, 0, dst->numel * accel_dtype_size(dst->dtype));
		return ACCEL_OK;
	}
	if (dst->dtype == ACCEL_DTYPE_F32) {
		float *restrict d = dst->data;
		const float v = (float)value;
		const uint64_t n = dst->numel;
		for (uint64_t i = 0; i < n; i++)
			d[i] = v;
	} else {
		for (uint64_t i = 0; i < dst->numel; i++)
			store(dst->data, dst->dtype, i, value);
	}
	return ACCEL_OK;
}

int accelp_ops_scale(const accel_view *x, double alpha, accel_err *err)
{
	if (on_device(x))
		return accelp_ops_device_scale(x, alpha, err);
	int r = check_view(x, "scale", 1, err);
	if (r)
		return r;
	if (x->dtype == ACCEL_DTYPE_F32) {
		/* numel in a local: stores through d could alias the view, which
		 * would make gcc reload it every iteration and not vectorise */
		float *restrict d = x->data;
		const float a = (float)alpha;
		const uint64_t n = x->numel;
		for (uint64_t i = 0; i < n; i++)
			d[i] *= a;
	} else {
		for (uint64_t i = 0; i < x->numel; i++)
			store(x->data, x->dtype, i, load(x->data, x->dtype, i) * alpha);
	}
	return ACCEL_OK;
}

int accelp_ops_axpy(const accel_view *y, double alpha, const accel_view *x, accel_err *err)
{
	int r;
	if (on_device(y) || on_device(x))
		return accelp_ops_device_axpy(y, alpha, x, err);
	if ((r = check_view(y, "axpy y", 1, err)) || (r = check_view(x, "axpy x", 1, err)))
		return r;
	if (y->numel != x->numel)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "axpy: y has %llu elements, x %llu",
		                     (unsigned long long)y->numel, (unsigned long long)x->numel);
	if (y->dtype == ACCEL_DTYPE_F32 && x->dtype == ACCEL_DTYPE_F32) {
		float *restrict yd = y->data;
		const float *restrict xd = x->data;
		const float a = (float)alpha;
		const uint64_t n = y->numel;
		for (uint64_t i = 0; i < n; i++)
			yd[i] += a * xd[i];
	} else {
		for (uint64_t i = 0; i < y->numel; i++)
			store(y->data, y->dtype, i,
			      load(y->data, y->dtype, i) + alpha * load(x->data, x->dtype, i));
	}
	return ACCEL_OK;
}

int accelp_ops_sumsq(const accel_view *x, double *ret_sumsq, accel_err *err)
{
	if (on_device(x))
		return accelp_ops_device_sumsq(x, ret_sumsq, err);
	int r = check_view(x, "sumsq", 1, err);
	if (r)
		return r;
	double s = 0.0;
	if (x->dtype == ACCEL_DTYPE_F32) {
		/* f64 accumulation in four independent chains: exact enough for
		 * norms of any size, and no reassociation flags needed. */
		const float *restrict d = x->data;
		double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
		uint64_t i = 0;
		for (; i + 4 <= x->numel; i += 4) {
			a0 += (double)d[i] * d[i];
			a1 += (double)d[i + 1] * d[i + 1];
			a2 += (double)d[i + 2] * d[i + 2];
			a3 += (double)d[i + 3] * d[i + 3];
		}
		for (; i < x->numel; i++)
			a0 += (double)d[i] * d[i];
		s = (a0 + a1) + (a2 + a3);
	} else {
		for (uint64_t i = 0; i < x->numel; i++) {
			double v = load(x->data, x->dtype, i);
			s += v * v;
		}
	}
	*ret_sumsq = s;
	return ACCEL_OK;
}

int accelp_ops_nonfinite(const accel_view *x, uint64_t *ret_count, accel_err *err)
{
	if (on_device(x))
		return accelp_ops_device_nonfinite(x, ret_count, err);
	int r = check_view(x, "nonfinite", 1, err);
	if (r)
		return r;
	uint64_t c = 0;
	if (x->dtype == ACCEL_DTYPE_F32) {
		/* exponent all ones <=> Inf or NaN; integer test vectorises */
		const uint32_t *restrict d = x->data;
		const uint64_t n = x->numel;
		for (uint64_t i = 0; i < n; i++)
			c += (d[i] & 0x7f800000u) == 0x7f800000u;
	} else {
		for (uint64_t i = 0; i < x->numel; i++)
			c += !isfinite(load(x->data, x->dtype, i));
	}
	*ret_count = c;
	return ACCEL_OK;
}
