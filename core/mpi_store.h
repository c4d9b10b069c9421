/* SPDX-License-Identifier: MIT */
/* core/mpi_store.h: the rendezvous store of a job started by an MPI
 * launcher (private).
 *
 * Under mpirun or srun without ACCEL_MASTER_ADDR/PORT the job has no store,
 * and the mpi and nccl backends then cannot name the ranks that never
 * reached a timed-out collective.  So rank 0 starts one on a free port and
 * sends its address over the host backend; the others join it (over
 * loopback on rank 0's host, else by its host name).  If any rank cannot
 * connect, every rank drops the store and the job runs as without one, with
 * warnings; a failed host collective fails the context.  comm.mpi_store =
 * false skips all of it. */
#ifndef ACCEL_CORE_MPI_STORE_H
#define ACCEL_CORE_MPI_STORE_H

#include "ctx-impl.h"

/* Called by accel_ctx_new() once the comm backend is up, on every rank;
 * a no-op unless the job was started by an MPI launcher, has more than one
 * rank and no store yet.  Sets ctx->store when every rank joined.  Errors
 * (a failed collective) are in ctx->err. */
int accelp_mpi_store_start(accel_ctx *ctx);

#endif
