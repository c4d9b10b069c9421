/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl-comm.h: the insides of the nccl comm backend, shared by
 * its files (private):
 *   nccl_comm.c   the backend's life cycle (init, split, fini), its memory,
 *                 its vtable
 *   nccl_state.c  what every call shares: the failure that breaks the
 *                 communicator, the abort, settling a non-blocking NCCL call
 *                 against its deadline, the device made current for a call
 *   nccl_coll.c   requests, argument checks, issuing collectives, waiting
 *                 for them and testing them
 *   nccl_watch.c  the watchdog of the requests a caller's stream waits on
 * nccl-impl.h holds the parts that need no GPU (bootstrap, error text). */
#ifndef ACCEL_NCCL_COMM_H
#define ACCEL_NCCL_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "accel/comm.h"
#include "nccl-impl.h"

#define MSG_MAX 1024

struct accel_comm_req {
	accel_comm_req *next;     /* live list (issued, not released) or free list */
	cudaEvent_t ev;
	uint64_t seq;
	int kind;
	uint32_t dtype;
	uint64_t count;
	int64_t deadline_ns;      /* from issue; 0: no limit */
};

typedef struct nccl_state {
	const accel_host_v1 *host;
	accel_host *h;
	int rank, world, device;
	int64_t timeout_ms;       /* <= 0: no limit */
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t dep_ev;       /* orders our stream after the default stream */
	void *scratch;            /* device memory for barrier()  */
	uint64_t seq;
	accel_comm_req *live, *spare;
	int failed, fail_code, aborted;
	char fail_msg[MSG_MAX];
	char ns[128];             /* this communicator's store namespace (from its id,
	                             or a group's tag) */
	int32_t *wranks;          /* a group's members by world rank; NULL: the world */
	int no_store;             /* bootstrapped over the host backend: no store to ask */
	/* Requests a caller's stream waits on (wait_stream) and not yet seen
	 * complete, and the thread that enforces their deadlines.  Under wmu:
	 * watched, wstop, wfired, wmsg; and the abort once the thread runs. */
	pthread_mutex_t wmu;
	pthread_cond_t wcv;
	pthread_t wthread;
	int wstarted, wstop, wfired, wfired_code;
	int in_nccl;              /* the training thread is in an NCCL call on comm:
	                             the watchdog defers its abort (nccl_comm_enter) */
	accel_comm_req *watched;
	char wmsg[MSG_MAX];
	char wwhat[96];           /* a timeout: the collective, for the training */
	uint64_t wseq;            /* thread to name the missing ranks (nccl_watch_reap) */
} nccl_state;

#define CUDA_TRY(st, call, label)                                   \
	do {                                                        \
		cudaError_t e_ = (call);                            \
		if (e_ != cudaSuccess) {                            \
			(void)cudaGetLastError();                   \
			rc = nccl_cuda_fail((st), e_, #call);       \
			goto label;                                 \
		}                                                   \
	} while (0)

/* NCCL calls on a non-blocking communicator may return ncclInProgress:
 * settle them before the next call.  `seq`: the collective the call is
 * for (0: none). */
#define NCCL_TRY(st, name, seq, call, label)                        \
	do {                                                        \
		ncclResult_t r_ = (call);                           \
		if (r_ == ncclInProgress)                           \
			r_ = nccl_settle((st), (name), (seq), &rc); \
		if (rc == ACCEL_OK && r_ != ncclSuccess)            \
			rc = nccl_fail((st), r_, (name));           \
		if (rc != ACCEL_OK)                                 \
			goto label;                                 \
	} while (0)

/* ---- nccl_state.c ------------------------------------------------------------------------ */

/* Record a failure that breaks the communicator: later ops fail fast. */
int nccl_set_failed(nccl_state *st, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
/* A failed CUDA or NCCL call, as nccl_set_failed(). */
int nccl_cuda_fail(nccl_state *st, cudaError_t e, const char *call);
int nccl_fail(nccl_state *st, ncclResult_t r, const char *call);
/* Yield, then sleep 20 us once spun 1000 times: a polling loop's pause. */
void nccl_backoff(uint32_t *spins);
/* ncclCommAbort once (under the watchdog's lock when it runs). */
void nccl_abort_comm(nccl_state *st);
/* "rank 1 of 2", or "world rank 5 (1 of 2 in its group)". */
void nccl_self_name(const nccl_state *st, char *buf, size_t cap);
/* Around the training thread's NCCL calls on st->comm: the watchdog does
 * not abort it meanwhile.  nccl_comm_enter: -1 when it is aborted already. */
int nccl_comm_enter(nccl_state *st);
void nccl_comm_leave(nccl_state *st);
/* A timeout: name the missing ranks and record the failure
 * (nccl_timeout_fail aborts the communicator first). */
int nccl_timeout_record(nccl_state *st, const char *what, uint64_t seq, int on_stream);
int nccl_timeout_fail(nccl_state *st, const char *what, uint64_t seq);
/* Poll until the last call on the communicator finished, or its deadline. */
ncclResult_t nccl_settle(nccl_state *st, const char *name, uint64_t seq, int *rc);
/* Make st->device current for a call, and restore the caller's after. */
int nccl_enter_device(nccl_state *st, int *ret_prev);
void nccl_leave_device(nccl_state *st, int prev);

/* ---- nccl_coll.c ------------------------------------------------------------------------- */
/* A request back to the spares; the vtable's collectives, wait and test. */
void nccl_req_put(nccl_state *st, accel_comm_req *r);
int nccl_allreduce(void *state, const accel_view *send, const accel_view *recv, uint32_t red,
                   accel_comm_req **ret_req);
int nccl_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                        uint32_t red, accel_comm_req **ret_req);
int nccl_allgather(void *state, const accel_view *send, const accel_view *recv,
                   accel_comm_req **ret_req);
int nccl_broadcast(void *state, const accel_view *buf, int32_t root, accel_comm_req **ret_req);
int nccl_barrier(void *state, accel_comm_req **ret_req);
int nccl_wait(void *state, accel_comm_req *r);
int nccl_wait_stream(void *state, accel_comm_req *r, void *stream);
int nccl_test(void *state, accel_comm_req *r, int32_t *ret_done);

/* ---- nccl_watch.c ------------------------------------------------------------------------ */
/* Training thread: release the watched requests that completed and take
 * over a failure the watchdog found. */
void nccl_watch_reap(nccl_state *st);
/* Watch r (taken over from the caller); starts the thread on first use. */
int nccl_watch_add(nccl_state *st, accel_comm_req *r);
/* Stop the thread; the watched requests go back to the spares. */
void nccl_watch_stop(nccl_state *st);

#endif
