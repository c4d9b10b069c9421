/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi-impl.h: pieces of the mpi comm backend shared between its
 * files (private to the module; hidden visibility). */
#ifndef ACCEL_MPI_IMPL_H
#define ACCEL_MPI_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "accel/types.h"

/* Reduction operators for the 16-bit float types, which MPI does not have.
 * Created once per backend instance (MPI_Op_create) and freed in fini. */
typedef struct mpi_half_ops {
	MPI_Op op[2][3];   /* [f16, bf16][SUM, MAX, MIN] */
	int created;
} mpi_half_ops;


/* The MPI datatype that carries one element of `dtype` (16-bit floats travel
 * as MPI_UINT16_T, fp8 and u8 as MPI_UINT8_T).  MPI_DATATYPE_NULL if unknown. */
MPI_Datatype accel_mpi_datatype(uint32_t dtype);

/* Create / free the 16-bit float operators.  Returns an MPI error code. */
int accel_mpi_half_ops_create(mpi_half_ops *ops);
void accel_mpi_half_ops_free(mpi_half_ops *ops);

/* The MPI_Op for reduction `red` on `dtype` (AVG is SUM; the division is
 * done afterwards by accel_mpi_avg_finish). */
MPI_Op accel_mpi_op(const mpi_half_ops *ops, uint32_t dtype, uint32_t red);

/* Divide `numel` elements of `dtype` at `data` by `world` in place: floats
 * in their own precision (halves through f32, rounded once), integers with
 * C division (truncation toward zero). */
void accel_mpi_avg_finish(void *data, uint32_t dtype, uint64_t numel, int world);

#endif
