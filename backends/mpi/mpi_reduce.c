/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi_reduce.c: dtype mapping and reduction operators.
 *
 * MPI has no 16-bit float types.  f16 and bf16 travel as MPI_UINT16_T and
 * are combined by user-defined operators that widen each pair to f32,
 * combine, and round back (round to nearest even), which is what NCCL does
 * for half types.  With two ranks that is exactly the correctly rounded
 * result; with more ranks it is rounded once per combining step, the same
 * order-dependent rounding as any tree reduction.
 *
 * AVG is SUM followed by a division on the received elements: MPI has no
 * average, and dividing once at the end keeps integer AVG truncating toward
 * zero as the ABI requires. */
#include <string.h>

#include "core/half.h"
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

/* One MPI_User_function per (type, reduction): MPI gives the function no
 * context pointer, so the type is in the function, not looked up. */
#define HALF_OP(fname, to32, from32, combine)                                        \
	static void fname(void *in, void *inout, int *len, MPI_Datatype *dt)         \
	{                                                                            \
		const uint16_t *a = in;                                              \
		uint16_t *b = inout;                                                 \
		(void)dt;                                                            \
		for (int i = 0; i < *len; i++) {                                     \
			float x = to32(a[i]), y = to32(b[i]);                        \
			b[i] = from32(combine(x, y));                                \
		}                                                                    \
	}

#define COMBINE_SUM(x, y) ((x) + (y))
/* Same choice as MPI_MAX/MPI_MIN on floats: compare, keep the winner. */
#define COMBINE_MAX(x, y) ((x) > (y) ? (x) : (y))
#define COMBINE_MIN(x, y) ((x) < (y) ? (x) : (y))

HALF_OP(f16_sum, accel_f16_to_f32, accel_f32_to_f16, COMBINE_SUM)
HALF_OP(f16_max, accel_f16_to_f32, accel_f32_to_f16, COMBINE_MAX)
HALF_OP(f16_min, accel_f16_to_f32, accel_f32_to_f16, COMBINE_MIN)
HALF_OP(bf16_sum, accel_bf16_to_f32, accel_f32_to_bf16, COMBINE_SUM)
HALF_OP(bf16_max, accel_bf16_to_f32, accel_f32_to_bf16, COMBINE_MAX)
HALF_OP(bf16_min, accel_bf16_to_f32, accel_f32_to_bf16, COMBINE_MIN)

int accel_mpi_half_ops_create(mpi_half_ops *ops)
{
	MPI_User_function *fns[2][3] = {
		{f16_sum, f16_max, f16_min},
		{bf16_sum, bf16_max, bf16_min},
	};
	memset(ops, 0, sizeof(*ops));
	for (int t = 0; t < 2; t++)
		for (int r = 0; r < 3; r++)
			ops->op[t][r] = MPI_OP_NULL;
	for (int t = 0; t < 2; t++) {
		for (int r = 0; r < 3; r++) {
			int rc = MPI_Op_create(fns[t][r], 1, &ops->op[t][r]);
			if (rc != MPI_SUCCESS) {
				accel_mpi_half_ops_free(ops);
				return rc;
			}
		}
	}
	ops->created = 1;
	return MPI_SUCCESS;
}

void accel_mpi_half_ops_free(mpi_half_ops *ops)
{
	for (int t = 0; t < 2; t++)
		for (int r = 0; r < 3; r++)
			if (ops->op[t][r] != MPI_OP_NULL)
				MPI_Op_free(&ops->op[t][r]);
	ops->created = 0;
}

MPI_Op accel_mpi_op(const mpi_half_ops *ops, uint32_t dtype, uint32_t red)
{
	int r = red == ACCEL_RED_MAX ? 1 : red == ACCEL_RED_MIN ? 2 : 0;
	if (dtype == ACCEL_DTYPE_F16)
		return ops->op[0][r];
	if (dtype == ACCEL_DTYPE_BF16)
		return ops->op[1][r];
	return r == 1 ? MPI_MAX : r == 2 ? MPI_MIN : MPI_SUM;
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
	case ACCEL_DTYPE_F16: {
		uint16_t *p = data;
		float w = (float)world;
		for (uint64_t i = 0; i < numel; i++)
			p[i] = accel_f32_to_f16(accel_f16_to_f32(p[i]) / w);
		break;
	}
	case ACCEL_DTYPE_BF16: {
		uint16_t *p = data;
		float w = (float)world;
		for (uint64_t i = 0; i < numel; i++)
			p[i] = accel_f32_to_bf16(accel_bf16_to_f32(p[i]) / w);
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
