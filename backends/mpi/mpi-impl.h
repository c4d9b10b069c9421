/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi-impl.h: pieces of the mpi comm backend shared between its
 * files (private to the module; hidden visibility). */
#ifndef ACCEL_MPI_IMPL_H
#define ACCEL_MPI_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "accel/types.h"

/* NaN-propagating MAX/MIN for f32 and f64 (f16/bf16 reduce as f32).
 * Created once per backend instance (MPI_Op_create) and freed in fini. */
typedef struct mpi_ops {
	MPI_Op op[2][2];   /* [f32, f64][MAX, MIN] */
	int created;
} mpi_ops;


/* The MPI datatype that carries one element of `dtype` (16-bit floats travel
 * as MPI_UINT16_T, fp8 and u8 as MPI_UINT8_T).  MPI_DATATYPE_NULL if unknown. */
MPI_Datatype accel_mpi_datatype(uint32_t dtype);

/* Create / free the operators.  Returns an MPI error code. */
int accel_mpi_ops_create(mpi_ops *ops);
void accel_mpi_ops_free(mpi_ops *ops);

/* The MPI_Op for reduction `red` on `dtype`; for f16/bf16 the op on their
 * f32 staging.  AVG is SUM; the division comes afterwards
 * (accel_mpi_avg_finish, or accel_mpi_narrow for the halves). */
MPI_Op accel_mpi_op(const mpi_ops *ops, uint32_t dtype, uint32_t red);

/* f16 or bf16: reduced through f32 staging. */
int accel_mpi_is_half(uint32_t dtype);
/* n f16/bf16 elements at src to f32 at dst. */
void accel_mpi_widen(const void *src, uint32_t dtype, float *dst, uint64_t n);
/* n f32 sums at src, divided by `world` when world > 1 (AVG; pass 1 for
 * the others), rounded once to f16/bf16 at dst. */
void accel_mpi_narrow(const float *src, uint32_t dtype, void *dst, uint64_t n, int world);

/* Divide `numel` elements of `dtype` (f32, f64, i32, i64) at `data` by
 * `world` in place: floats in their own precision, integers with C division
 * (truncation toward zero). */
void accel_mpi_avg_finish(void *data, uint32_t dtype, uint64_t numel, int world);

#endif
