/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi_reduce.c: dtype mapping and reduction operators.
 *
 * MPI has no 16-bit float types.  f16 and bf16 are gathered and broadcast
 * as MPI_UINT16_T; reductions widen them to f32 in a staging buffer, reduce
 * that as MPI_FLOAT, and round once at the end (after the AVG division), as
 * the shm backend does: no overflow of a sum whose average fits, and no
 * rounding per combining step.
 *
 * AVG is SUM followed by a division on the received elements: MPI has no
 * average, and dividing once at the end keeps integer AVG truncating toward
 * zero as the ABI requires. */
#include <string.h>

#include "backends/common/half.h"
#include "mpi-impl.h"

MPI_Datatype accel_mpi_datatype(uint32_t dtype)
{
	switch (dtype) {
	case ACCEL_DTYPE_F32: return MPI_FLOAT;
	case ACCEL_DTYPE_F64: return MPI_DOUBLE;
	case ACCEL_DTYPE_F16:
	case ACCEL_DTYPE_BF16: return MPI_UINT16_T;
	case ACCEL_DTYPE_F8E4M3:
	case ACCEL_DTYPE_F8E5M2:
	case ACCEL_DTYPE_U8: return MPI_UINT8_T;
	case ACCEL_DTYPE_I32: return MPI_INT32_T;
	case ACCEL_DTYPE_I64: return MPI_INT64_T;
	default: return MPI_DATATYPE_NULL;
	}
}

/* max/min that propagate NaN (as the shm backend and torch.maximum do;
 * MPI_MAX/MPI_MIN leave NaN to the implementation, and Open MPI keeps or
 * drops it depending on which rank holds it).  One MPI_User_function per
 * (type, reduction): MPI gives the function no context pointer. */
#define NAN_OP(fname, T, cmp)                                                        \
	static void fname(void *in, void *inout, int *len, MPI_Datatype *dt)         \
	{                                                                            \
		const T *a = in;                                                     \
		T *b = inout;                                                        \
		(void)dt;                                                            \
		for (int i = 0; i < *len; i++) {                                     \
			T x = a[i], y = b[i], m = x cmp y ? x : y;                   \
			m = x != x ? x : m;                                          \
			b[i] = y != y ? y : m;                                       \
		}                                                                    \
	}

NAN_OP(f32_max, float, >)
NAN_OP(f32_min, float, <)
NAN_OP(f64_max, double, >)
NAN_OP(f64_min, double, <)

int accel_mpi_ops_create(mpi_ops *ops)
{
	MPI_User_function *fns[2][2] = {{f32_max, f32_min}, {f64_max, f64_min}};
	memset(ops, 0, sizeof(*ops));
	for (int t = 0; t < 2; t++)
		for (int r = 0; r < 2; r++)
			ops->op[t][r] = MPI_OP_NULL;
	for (int t = 0; t < 2; t++) {
		for (int r = 0; r < 2; r++) {
			int rc = MPI_Op_create(fns[t][r], 1, &ops->op[t][r]);
			if (rc != MPI_SUCCESS) {
				accel_mpi_ops_free(ops);
				return rc;
			}
		}
	}
	ops->created = 1;
	return MPI_SUCCESS;
}

void accel_mpi_ops_free(mpi_ops *ops)
{
	for (int t = 0; t < 2; t++)
		for (int r = 0; r < 2; r++)
			if (ops->op[t][r] != MPI_OP_NULL)
				MPI_Op_free(&ops->op[t][r]);
	ops->created = 0;
}

int accel_mpi_is_half(uint32_t dtype)
{
	return dtype == ACCEL_DTYPE_F16 || dtype == ACCEL_DTYPE_BF16;
}

MPI_Op accel_mpi_op(const mpi_ops *ops, uint32_t dtype, uint32_t red)
{
	int is32 = dtype == ACCEL_DTYPE_F32 || accel_mpi_is_half(dtype);
	if (red == ACCEL_RED_MAX || red == ACCEL_RED_MIN) {
		int r = red == ACCEL_RED_MAX ? 0 : 1;
		if (is32)
			return ops->op[0][r];
		if (dtype == ACCEL_DTYPE_F64)
			return ops->op[1][r];
		return r == 0 ? MPI_MAX : MPI_MIN;
	}
	return MPI_SUM;
}

void accel_mpi_widen(const void *src, uint32_t dtype, float *dst, uint64_t n)
{
	const uint16_t *h = src;
	if (dtype == ACCEL_DTYPE_F16)
		for (uint64_t i = 0; i < n; i++)
			dst[i] = accel_f16_to_f32(h[i]);
	else
		for (uint64_t i = 0; i < n; i++)
			dst[i] = accel_bf16_to_f32(h[i]);
}

void accel_mpi_narrow(const float *src, uint32_t dtype, void *dst, uint64_t n, int world)
{
	uint16_t *h = dst;
	float w = (float)world;
	if (dtype == ACCEL_DTYPE_F16)
		for (uint64_t i = 0; i < n; i++)
			h[i] = accel_f32_to_f16(world > 1 ? src[i] / w : src[i]);
	else
		for (uint64_t i = 0; i < n; i++)
			h[i] = accel_f32_to_bf16(world > 1 ? src[i] / w : src[i]);
}

void accel_mpi_avg_finish(void *data, uint32_t dtype, uint64_t numel, int world)
{
	switch (dtype) {
	case ACCEL_DTYPE_F32: {
		float *p = data, w = (float)world;
		for (uint64_t i = 0; i < numel; i++)
			p[i] /= w;
		break;
	}
	case ACCEL_DTYPE_F64: {
		double *p = data, w = (double)world;
		for (uint64_t i = 0; i < numel; i++)
			p[i] /= w;
		break;
	}
	case ACCEL_DTYPE_I32: {
		int32_t *p = data;
		for (uint64_t i = 0; i < numel; i++)
			p[i] /= world;
		break;
	}
	case ACCEL_DTYPE_I64: {
		int64_t *p = data;
		for (uint64_t i = 0; i < numel; i++)
			p[i] /= world;
		break;
	}
	default:
		break;
	}
}
