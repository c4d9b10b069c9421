/* SPDX-License-Identifier: MIT */
/* core/comm_stage.h: device buffers through a host backend (private).
 *
 * When the configured backend serves host buffers only (shm, tcp, mpi) and
 * no device backend is in use, a collective on CUDA buffers is staged: the
 * send data is copied into a pinned host buffer, the host backend runs the
 * collective there, and the result is copied back into the device buffer
 * when the collective completes (at once for a blocking call, in wait()
 * otherwise).  So several ranks can share one GPU (NCCL refuses that) and
 * CPU-only transports carry device gradients.  Pinned buffers are pooled
 * and reused: a training step issues the same sizes every time. */
#ifndef ACCEL_CORE_COMM_STAGE_H
#define ACCEL_CORE_COMM_STAGE_H

#include <stdint.h>

#include "accel/types.h"
#include "error.h"

typedef struct comm_stage_pool comm_stage_pool;

/* One collective's staging: a pinned buffer of the pool and where its
 * result goes.  Zero-initialised = none. */
typedef struct comm_staged {
	comm_stage_pool *pool;
	void *host;               /* pinned, `bytes` long                     */
	uint64_t bytes;
	accel_view dst;           /* device view the result is copied to      */
	uint64_t dst_at;          /* byte offset of the result in host        */
	void *stream;             /* the context's stream the copies run on   */
} comm_staged;

/* A pool; NULL-safe free (releases every buffer, busy or not). */
int comm_stage_pool_new(comm_stage_pool **ret_pool, accel_err *err);
comm_stage_pool *comm_stage_pool_free(comm_stage_pool *pool);

/* Stage a collective: a pinned buffer of `total` elements of send's dtype;
 * send's numel elements copied to element `send_at` of it on `stream` (the
 * context's; NULL: the legacy default stream), after the work enqueued there
 * before, and waited for; ret_send / ret_recv are host views of send->numel
 * elements at send_at and recv->numel at recv_at, for the backend.  ret_st
 * holds what comm_stage_out() needs (the copy back runs on the same stream
 * and is waited for too). */
int comm_stage_in(comm_stage_pool *pool, void *stream, const accel_view *send,
                  const accel_view *recv, uint64_t total, uint64_t send_at, uint64_t recv_at,
                  accel_view *ret_send, accel_view *ret_recv, comm_staged *ret_st,
                  accel_err *err);

/* After the collective: with `ok`, copy the result into the device view;
 * in any case give the buffer back.  No-op for a zeroed st. */
int comm_stage_out(comm_staged *st, int ok, accel_err *err);

#endif
