/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_state.c: what every call of the nccl backend shares:
 * recording the failure that breaks the communicator, aborting it, settling
 * a call on the non-blocking communicator against its deadline, naming
 * the ranks a timeout waited for, and making the instance's device current
 * for a call. */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "backends/common/mono.h"
#include "backends/common/coll-missing.h"
#include "nccl-comm.h"

/* Record a failure that breaks the communicator: later ops fail fast. */
int nccl_set_failed(nccl_state *st, int code, const char *fmt, ...)
{
	char msg[MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!st->failed) {
		st->failed = 1;
		st->fail_code = code;
		snprintf(st->fail_msg, sizeof(st->fail_msg), "%s", msg);
	}
	return st->host->error(st->h, code, "%s", msg);
}

int nccl_cuda_fail(nccl_state *st, cudaError_t e, const char *call)
{
	char msg[MSG_MAX];
	int code = accel_nccl_describe_cuda(e, call, msg, sizeof(msg));
	return nccl_set_failed(st, code, "%s (rank %d, cuda:%d)", msg, st->rank, st->device);
}

int nccl_fail(nccl_state *st, ncclResult_t r, const char *call)
{
	char msg[MSG_MAX];
	int code = accel_nccl_describe_nccl(r, call, ncclGetLastError(st->comm), msg, sizeof(msg));
	return nccl_set_failed(st, code, "%s (rank %d of %d, cuda:%d)", msg, st->rank, st->world,
	                       st->device);
}

void nccl_backoff(uint32_t *spins)
{
	if (++*spins < 1000)
		sched_yield();
	else
		usleep(20);
}

void nccl_abort_comm(nccl_state *st)
{
	if (st->wstarted)
		pthread_mutex_lock(&st->wmu);
	if (st->comm && !st->aborted) {
		ncclCommAbort(st->comm);
		st->aborted = 1;
	}
	if (st->wstarted)
		pthread_mutex_unlock(&st->wmu);
}

/* Who this rank is, for messages: "rank 1 of 2" or, on a group, "world
 * rank 5 (1 of 2 in its group)". */
void nccl_self_name(const nccl_state *st, char *buf, size_t cap)
{
	if (st->wranks)
		snprintf(buf, cap, "world rank %d (%d of %d in its group)", (int)st->wranks[st->rank],
		         st->rank, st->world);
	else
		snprintf(buf, cap, "rank %d of %d", st->rank, st->world);
}

/* The training thread calls NCCL on st->comm between nccl_comm_enter() and
 * nccl_comm_leave(): ncclCommAbort frees the communicator, so the watchdog must
 * not abort it meanwhile (it waits for the next tick; a call that hangs
 * ends by its own deadline, nccl_settle()).  Returns -1, entering nothing, when
 * the communicator is aborted already. */
int nccl_comm_enter(nccl_state *st)
{
	if (!st->wstarted)
		return st->aborted ? -1 : 0;
	pthread_mutex_lock(&st->wmu);
	int ok = !st->aborted;
	st->in_nccl = ok;
	pthread_mutex_unlock(&st->wmu);
	return ok ? 0 : -1;
}

void nccl_comm_leave(nccl_state *st)
{
	if (!st->wstarted)
		return;
	pthread_mutex_lock(&st->wmu);
	st->in_nccl = 0;
	pthread_mutex_unlock(&st->wmu);
}

/* `what` (collective #seq, or communicator creation when seq is 0) did not
 * finish in time and the communicator is aborted: ask the store which
 * ranks never arrived, and record the failure.  Training thread only (the
 * store is the host's).  on_stream: the watchdog found it. */
int nccl_timeout_record(nccl_state *st, const char *what, uint64_t seq, int on_stream)
{
	char missing[256] = "", self[96], msg[MSG_MAX];
	int named = st->ns[0] ? coll_missing_ranks_map(st->host, st->h, st->ns, st->rank,
	                                               st->world, st->wranks, seq,
	                                               st->timeout_ms, missing, sizeof(missing))
	                      : -1;
	nccl_self_name(st, self, sizeof(self));
	accel_nccl_timeout_text(msg, sizeof(msg), what, on_stream, (double)st->timeout_ms / 1000.0,
	                        self, named, missing, st->no_store);
	return nccl_set_failed(st, ACCEL_ERR_TIMEOUT, "%s", msg);
}

/* A collective on the training thread timed out: abort the communicator
 * (the only way to stop NCCL kernels that wait for a missing peer), then
 * name the missing ranks. */
int nccl_timeout_fail(nccl_state *st, const char *what, uint64_t seq)
{
	nccl_abort_comm(st);
	return nccl_timeout_record(st, what, seq, 0);
}

/* Poll ncclCommGetAsyncError until the last call finished.  On timeout
 * abort the communicator; *rc gets the status recorded. */
ncclResult_t nccl_settle(nccl_state *st, const char *name, uint64_t seq, int *rc)
{
	int64_t deadline = mono_deadline_ns(st->timeout_ms);
	ncclResult_t ar = ncclInProgress;
	uint32_t spins = 0;
	*rc = ACCEL_OK;
	for (;;) {
		ncclResult_t q = ncclCommGetAsyncError(st->comm, &ar);
		if (q != ncclSuccess)
			return q;
		if (ar != ncclInProgress)
			return ar;
		if (deadline && mono_ns() > deadline) {
			*rc = nccl_timeout_fail(st, name, seq);
			return ncclInProgress;
		}
		nccl_backoff(&spins);
	}
}

/* Make st->device current for the duration of a call, restoring the
 * caller's device afterwards. */
int nccl_enter_device(nccl_state *st, int *ret_prev)
{
	int prev = -1, rc = ACCEL_OK;
	CUDA_TRY(st, cudaGetDevice(&prev), fail);
	if (prev != st->device)
		CUDA_TRY(st, cudaSetDevice(st->device), fail);
	*ret_prev = prev;
	return ACCEL_OK;
fail:
	return rc;
}

void nccl_leave_device(nccl_state *st, int prev)
{
	if (prev >= 0 && prev != st->device)
		cudaSetDevice(prev);
}
