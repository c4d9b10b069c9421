/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl-impl.h: the parts of the nccl comm backend that need
 * no GPU (bootstrap, error translation, type mapping), shared between its
 * files and tests/test-nccl.c, which compiles them directly. */
#ifndef ACCEL_NCCL_IMPL_H
#define ACCEL_NCCL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
/* nccl.h declares ncclGroupStart() etc. without (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "accel/plugin.h"

/* ---- bootstrap --------------------------------------------------------------
 * Rank 0 creates the NCCL unique id and publishes it in the job's key-value
 * store; the other ranks read it.  A job without a store (mpirun without
 * ACCEL_MASTER_ADDR) broadcasts it over the job's host comm backend instead
 * (mpi there).  The store and broadcast operations are callbacks so the
 * logic can be tested without a GPU or a running job.  Each callback
 * returns an ACCEL_* status. */
typedef struct nccl_boot_ops {
	/* ncclGetUniqueId (rank 0 only); returns an ncclResult_t. */
	int (*unique_id)(void *ctx, ncclUniqueId *ret_id);
	int (*set)(void *ctx, const char *key, const void *value, uint64_t len);
	/* Wait up to timeout_ms for key; *ret_len is the value's full length. */
	int (*get)(void *ctx, const char *key, void *buf, uint64_t cap, uint64_t *ret_len,
	           int64_t timeout_ms);
	/* Atomic add; returns the new value. */
	int (*add)(void *ctx, const char *key, int64_t delta, int64_t *ret_value);
	/* ACCEL_OK when the job has a rendezvous store, ACCEL_ERR_UNSUPPORTED
	 * when it has none.  NULL: it has one. */
	int (*has_store)(void *ctx);
	/* Broadcast `len` bytes from rank 0 to every rank over the job's host
	 * comm backend; blocking and collective (every rank calls it once per
	 * communicator, in the same order as its other host collectives).  The
	 * callee records its own error.  NULL: no such channel. */
	int (*bcast)(void *ctx, void *buf, uint64_t len);
} nccl_boot_ops;

/* Agree on the unique id of a new communicator.  Every rank counts the
 * communicators it has created in the store ("nccl/count/<rank>"), so the
 * k-th communicator of a job uses key "nccl/uid/<k>" on every rank without
 * process-wide state.  Without a store rank 0 broadcasts the id (or the
 * status of its failed ncclGetUniqueId, so the others fail at once too)
 * through ops->bcast; *ret_via_store says which way it went.  world_size 1
 * needs neither.  On failure returns the status and writes a message (what,
 * which key, what to do) into msg. */
int accel_nccl_bootstrap(const nccl_boot_ops *ops, void *ctx, int rank, int world_size,
                         int64_t timeout_ms, ncclUniqueId *ret_id, int *ret_via_store,
                         char *msg, size_t cap);

/* The operations of a backend running inside accel: ncclGetUniqueId, the
 * host's store, and host->broadcast() of a host buffer (which the core
 * routes to the job's host backend).  ctx: an nccl_host_boot. */
typedef struct nccl_host_boot {
	const accel_host_v1 *host;
	accel_host *h;
	int bcast_failed;   /* set when host->broadcast failed (it recorded why) */
} nccl_host_boot;
extern const nccl_boot_ops accel_nccl_host_boot_ops;

/* ---- errors -------------------------------------------------------------------
 * Format "CALL failed: TEXT (NAME): DETAIL. HINT" into buf and return
 * ACCEL_ERR_PEER for ncclRemoteError (a peer failed or disconnected), else
 * ACCEL_ERR_NCCL; `detail` (ncclGetLastError's text) may be NULL or "". */
int accel_nccl_describe_nccl(ncclResult_t result, const char *call, const char *detail,
                             char *buf, size_t cap);
/* Same for the CUDA runtime; returns ACCEL_ERR_CUDA. */
int accel_nccl_describe_cuda(cudaError_t err, const char *call, char *buf, size_t cap);
/* The symbolic name of an ncclResult_t ("ncclSystemError"). */
const char *accel_nccl_result_name(ncclResult_t result);

/* The message of a collective that timed out (the communicator is then
 * aborted): "WHAT[, waited for on a stream,] did not complete within T s on
 * SELF: MISSING (asked through the rendezvous store). The communicator was
 * aborted".  `named`: what coll_missing_ranks_map() returned for it (> 0:
 * `missing` names the ranks; 0: every rank reached it; < 0: the store
 * could not tell, and `no_store` says whether the job has none).
 * `on_stream`: the request was released to a stream (wait_stream) and
 * the deadline was kept by the watchdog thread. */
void accel_nccl_timeout_text(char *buf, size_t cap, const char *what, int on_stream,
                             double timeout_s, const char *self, int named,
                             const char *missing, int no_store);

/* ---- types ------------------------------------------------------------------------ */
/* NCCL type for an ACCEL_DTYPE_*.  `reduce`: the op reduces, so only the
 * six reducible types map; otherwise fp8 travels as bytes.  Returns 0 when
 * the dtype cannot be used. */
int accel_nccl_dtype(uint32_t dtype, int reduce, ncclDataType_t *ret_type);
/* ncclSum/ncclAvg/ncclMax/ncclMin for ACCEL_RED_*; 0 when unknown. */
int accel_nccl_redop(uint32_t red, ncclRedOp_t *ret_op);

#endif
