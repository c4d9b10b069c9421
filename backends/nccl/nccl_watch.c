/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_watch.c: the watchdog of the requests a caller's stream
 * waits on (wait_stream): a thread of the instance that aborts the
 * communicator at such a collective's deadline or on its error, so a stream
 * waiting for a peer that never comes is released, and hands the failure to
 * the training thread, which reports it (docs/streams.md). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "nccl-comm.h"

/* ---- requests a stream waits on ------------------------------------------------------------- */

/* The watchdog: every 10 ms, each watched request that is still running is
 * checked against its deadline and NCCL's asynchronous error; the first
 * that fails aborts the communicator (NCCL's kernels end, so the streams
 * waiting on them go on) and leaves a message for the training thread
 * (nccl_watch_reap).  It never calls host->error (that is the training
 * thread's) nor the store. */
static void *watch_main(void *arg)
{
	nccl_state *st = arg;
	cudaSetDevice(st->device);
	pthread_mutex_lock(&st->wmu);
	while (!st->wstop) {
		for (accel_comm_req *r = st->watched; r && !st->wfired && !st->aborted; r = r->next) {
			char what[96];
			cudaError_t e = cudaEventQuery(r->ev);
			if (e == cudaSuccess)
				continue;
			coll_describe(what, sizeof(what), r->kind, r->seq, r->dtype, r->count);
			ncclResult_t ar = ncclSuccess;
			if (e != cudaErrorNotReady) {
				(void)cudaGetLastError();
				st->wfired_code = ACCEL_ERR_CUDA;
				snprintf(st->wmsg, sizeof(st->wmsg), "%s, waited for on a stream, failed: %s "
				         "(rank %d, cuda:%d)", what, cudaGetErrorName(e), st->rank,
				         st->device);
			} else if (ncclCommGetAsyncError(st->comm, &ar) == ncclSuccess &&
			           ar != ncclSuccess && ar != ncclInProgress) {
				st->wfired_code = ar == ncclRemoteError ? ACCEL_ERR_PEER : ACCEL_ERR_NCCL;
				snprintf(st->wmsg, sizeof(st->wmsg), "%s, waited for on a stream, failed: NCCL "
				         "reported %s (rank %d of %d, cuda:%d)", what,
				         accel_nccl_result_name(ar), st->rank, st->world, st->device);
			} else if (r->deadline_ns && mono_ns() > r->deadline_ns) {
				char self[96];
				nccl_self_name(st, self, sizeof(self));
				st->wfired_code = ACCEL_ERR_TIMEOUT;
				st->wseq = r->seq;
				snprintf(st->wwhat, sizeof(st->wwhat), "%s", what);
				snprintf(st->wmsg, sizeof(st->wmsg), "%s, waited for on a stream, did not "
				         "complete within %.1f s on %s; the communicator was aborted (the "
				         "next call on it asks the rendezvous store which ranks did not "
				         "arrive, and fails with that)", what,
				         (double)st->timeout_ms / 1000.0, self);
			} else {
				continue;
			}
			if (st->in_nccl)
				break;   /* the training thread is inside NCCL: next tick */
			st->wfired = 1;
			if (!st->aborted) {
				ncclCommAbort(st->comm);
				st->aborted = 1;
			}
			st->host->log(st->h, ACCEL_LOG_ERROR, "%s", st->wmsg);
		}
		if (!st->watched || st->wfired) {
			pthread_cond_wait(&st->wcv, &st->wmu);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 10 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&st->wcv, &st->wmu, &ts);
		}
	}
	pthread_mutex_unlock(&st->wmu);
	return NULL;
}

/* Training thread: release the watched requests that completed, and take
 * over a failure the watchdog found (recorded and reported as this
 * thread's, so the next call fails fast with it). */
void nccl_watch_reap(nccl_state *st)
{
	if (!st->wstarted)
		return;
	pthread_mutex_lock(&st->wmu);
	for (accel_comm_req **pp = &st->watched; *pp;) {
		accel_comm_req *r = *pp;
		if (cudaEventQuery(r->ev) == cudaSuccess || st->aborted) {
			*pp = r->next;
			r->next = st->spare;
			st->spare = r;
		} else {
			pp = &r->next;
		}
	}
	(void)cudaGetLastError();
	int fired = st->wfired && !st->failed;
	pthread_mutex_unlock(&st->wmu);
	/* the watchdog only reads and writes these before it sets wfired and
	 * stops looking (wfired stays set) */
	if (fired && st->wfired_code == ACCEL_ERR_TIMEOUT)
		nccl_timeout_record(st, st->wwhat, st->wseq, 1);
	else if (fired)
		nccl_set_failed(st, st->wfired_code, "%s", st->wmsg);
}

/* Watch r (taken over from the caller); starts the thread on first use. */
int nccl_watch_add(nccl_state *st, accel_comm_req *r)
{
	if (!st->wstarted) {
		if (pthread_mutex_init(&st->wmu, NULL))
			return ACCEL_ERR_SYSTEM;
		if (pthread_cond_init(&st->wcv, NULL)) {
			pthread_mutex_destroy(&st->wmu);
			return ACCEL_ERR_SYSTEM;
		}
		if (pthread_create(&st->wthread, NULL, watch_main, st)) {
			pthread_cond_destroy(&st->wcv);
			pthread_mutex_destroy(&st->wmu);
			return ACCEL_ERR_SYSTEM;
		}
		st->wstarted = 1;
	}
	pthread_mutex_lock(&st->wmu);
	r->next = st->watched;
	st->watched = r;
	pthread_cond_signal(&st->wcv);
	pthread_mutex_unlock(&st->wmu);
	return ACCEL_OK;
}

void nccl_watch_stop(nccl_state *st)
{
	if (!st->wstarted)
		return;
	pthread_mutex_lock(&st->wmu);
	st->wstop = 1;
	pthread_cond_signal(&st->wcv);
	pthread_mutex_unlock(&st->wmu);
	pthread_join(st->wthread, NULL);
	st->wstarted = 0;
	while (st->watched) {
		accel_comm_req *r = st->watched;
		st->watched = r->next;
		r->next = st->spare;
		st->spare = r;
	}
	pthread_cond_destroy(&st->wcv);
	pthread_mutex_destroy(&st->wmu);
}
