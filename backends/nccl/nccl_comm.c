/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_comm.c: the "nccl" comm backend (abi/accel/comm.h) for
 * buffers in CUDA device memory.
 *
 * One communicator per backend instance, created non-blocking
 * (ncclConfig_t.blocking = 0) so that neither its creation nor a collective
 * can hang without a deadline: every NCCL call that returns ncclInProgress
 * is settled by polling ncclCommGetAsyncError against the timeout, and a
 * timeout aborts the communicator (ncclCommAbort), the only way to stop
 * NCCL kernels that wait for a missing peer.
 *
 * Collectives run on the instance's own CUDA stream; a request is a CUDA
 * event recorded after the collective.  The stream first waits (an event,
 * not a host sync) for the work queued earlier on the context's compute
 * stream (host->stream, ABI minor 4; the legacy default stream without
 * one), so gradients produced there are complete.  wait_stream() makes a
 * caller's stream wait on a request's event instead of the host; such a
 * request is then watched by a thread of the instance until it completes,
 * which aborts the communicator at the collective's deadline, so a stream
 * waiting for a peer that never comes is released and the failure is
 * reported by the next call (docs/streams.md).  NCCL's own AVG (ncclAvg)
 * and half types (ncclFloat16, ncclBfloat16) are used directly. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/comm.h"
#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "backends/common/coll-missing.h"
#include "nccl-impl.h"

#define MSG_MAX 1024
/* How long fini() lets outstanding work finish before it aborts (ms). */
#define DRAIN_MAX_MS 10000

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
	                             the watchdog defers its abort (comm_enter) */
	accel_comm_req *watched;
	char wmsg[MSG_MAX];
	char wwhat[96];           /* a timeout: the collective, for the training */
	uint64_t wseq;            /* thread to name the missing ranks (watch_reap) */
} nccl_state;

/* Record a failure that breaks the communicator: later ops fail fast. */
static int fail(nccl_state *st, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int fail(nccl_state *st, int code, const char *fmt, ...)
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

static int cuda_fail(nccl_state *st, cudaError_t e, const char *call)
{
	char msg[MSG_MAX];
	int code = accel_nccl_describe_cuda(e, call, msg, sizeof(msg));
	return fail(st, code, "%s (rank %d, cuda:%d)", msg, st->rank, st->device);
}

static int nccl_fail(nccl_state *st, ncclResult_t r, const char *call)
{
	char msg[MSG_MAX];
	int code = accel_nccl_describe_nccl(r, call, ncclGetLastError(st->comm), msg, sizeof(msg));
	return fail(st, code, "%s (rank %d of %d, cuda:%d)", msg, st->rank, st->world, st->device);
}

#define CUDA_TRY(st, call, label)                                 \
	do {                                                      \
		cudaError_t e_ = (call);                          \
		if (e_ != cudaSuccess) {                          \
			(void)cudaGetLastError();                 \
			rc = cuda_fail((st), e_, #call);          \
			goto label;                               \
		}                                                 \
	} while (0)

/* NCCL calls on a non-blocking communicator may return ncclInProgress:
 * settle them before the next call.  `seq`: the collective the call is
 * for (0: none). */
#define NCCL_TRY(st, name, seq, call, label)                      \
	do {                                                      \
		ncclResult_t r_ = (call);                         \
		if (r_ == ncclInProgress)                         \
			r_ = settle((st), (name), (seq), &rc);    \
		if (rc == ACCEL_OK && r_ != ncclSuccess)          \
			rc = nccl_fail((st), r_, (name));         \
		if (rc != ACCEL_OK)                               \
			goto label;                               \
	} while (0)

static void backoff(uint32_t *spins)
{
	if (++*spins < 1000)
		sched_yield();
	else
		usleep(20);
}

static void abort_comm(nccl_state *st)
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
static void self_name(const nccl_state *st, char *buf, size_t cap)
{
	if (st->wranks)
		snprintf(buf, cap, "world rank %d (%d of %d in its group)", (int)st->wranks[st->rank],
		         st->rank, st->world);
	else
		snprintf(buf, cap, "rank %d of %d", st->rank, st->world);
}

/* The training thread calls NCCL on st->comm between comm_enter() and
 * comm_leave(): ncclCommAbort frees the communicator, so the watchdog must
 * not abort it meanwhile (it waits for the next tick; a call that hangs
 * ends by its own deadline, settle()).  Returns -1, entering nothing, when
 * the communicator is aborted already. */
static int comm_enter(nccl_state *st)
{
	if (!st->wstarted)
		return st->aborted ? -1 : 0;
	pthread_mutex_lock(&st->wmu);
	int ok = !st->aborted;
	st->in_nccl = ok;
	pthread_mutex_unlock(&st->wmu);
	return ok ? 0 : -1;
}

static void comm_leave(nccl_state *st)
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
static int timeout_record(nccl_state *st, const char *what, uint64_t seq, int on_stream)
{
	char missing[256] = "", self[96], msg[MSG_MAX];
	int named = st->ns[0] ? coll_missing_ranks_map(st->host, st->h, st->ns, st->rank,
	                                               st->world, st->wranks, seq,
	                                               st->timeout_ms, missing, sizeof(missing))
	                      : -1;
	self_name(st, self, sizeof(self));
	accel_nccl_timeout_text(msg, sizeof(msg), what, on_stream, (double)st->timeout_ms / 1000.0,
	                        self, named, missing, st->no_store);
	return fail(st, ACCEL_ERR_TIMEOUT, "%s", msg);
}

/* A collective on the training thread timed out: abort the communicator
 * (the only way to stop NCCL kernels that wait for a missing peer), then
 * name the missing ranks. */
static int timeout_fail(nccl_state *st, const char *what, uint64_t seq)
{
	abort_comm(st);
	return timeout_record(st, what, seq, 0);
}

/* Poll ncclCommGetAsyncError until the last call finished.  On timeout
 * abort the communicator; *rc gets the status recorded. */
static ncclResult_t settle(nccl_state *st, const char *name, uint64_t seq, int *rc)
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
			*rc = timeout_fail(st, name, seq);
			return ncclInProgress;
		}
		backoff(&spins);
	}
}

/* Make st->device current for the duration of a call, restoring the
 * caller's device afterwards. */
static int enter_device(nccl_state *st, int *ret_prev)
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

static void leave_device(nccl_state *st, int prev)
{
	if (prev >= 0 && prev != st->device)
		cudaSetDevice(prev);
}

/* ---- requests ------------------------------------------------------------------------ */

static accel_comm_req *req_get(nccl_state *st, int *rc)
{
	accel_comm_req *r = st->spare;
	if (r) {
		st->spare = r->next;
		r->next = NULL;
		return r;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		/* this rank cannot take part: the others would pair their next
		 * collective with the wrong one, so the communicator is done */
		*rc = fail(st, ACCEL_ERR_NOMEM, "out of memory for a request (rank %d)", st->rank);
		return NULL;
	}
	cudaError_t e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		free(r);
		*rc = cuda_fail(st, e, "cudaEventCreateWithFlags");
		return NULL;
	}
	return r;
}

static void req_put(nccl_state *st, accel_comm_req *r)
{
	r->next = st->spare;
	st->spare = r;
}

static int req_unlink(nccl_state *st, accel_comm_req *r)
{
	accel_comm_req **pp = &st->live;
	for (; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			r->next = NULL;
			return 1;
		}
	}
	return 0;
}

static inline int req_known(const nccl_state *st, const accel_comm_req *r)
{
	for (const accel_comm_req *p = st->live; p; p = p->next)
		if (p == r)
			return 1;
	return 0;
}

/* ---- argument checks ---------------------------------------------------------------- */

static const char *memory_type_name(enum cudaMemoryType t)
{
	switch (t) {
	case cudaMemoryTypeUnregistered: return "ordinary host memory";
	case cudaMemoryTypeHost: return "pinned host memory";
	case cudaMemoryTypeDevice: return "device memory";
	case cudaMemoryTypeManaged: return "managed memory";
	default: return "memory of an unknown kind";
	}
}

/* What the core does not check: the view is on this rank's GPU, and its
 * pointer is device memory there (the rest of it the core checked). */
static int check_view(nccl_state *st, const char *op, const char *which, const accel_view *v)
{
	coll_assert_view(v, -1);
	if (v->device != ACCEL_DEVICE_CUDA || v->device_index != st->device)
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "%s: %s buffer is on %s:%d but this rank's NCCL "
		                       "communicator is on cuda:%d; the nccl backend serves this "
		                       "rank's GPU only",
		                       op, which, v->device == ACCEL_DEVICE_CUDA ? "cuda" : "cpu",
		                       v->device_index, st->device);
	if (v->numel == 0)
		return ACCEL_OK;
	/* The label is the caller's word; NCCL does not check pointers, and a
	 * host pointer would fault its kernel and take the CUDA context down.
	 * Since CUDA 11 host memory is cudaSuccess with type Unregistered. */
	struct cudaPointerAttributes at;
	memset(&at, 0, sizeof(at));
	cudaError_t e = cudaPointerGetAttributes(&at, v->data);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return st->host->error(st->h, ACCEL_ERR_INVALID_ARG,
		                       "%s: %s buffer %p: CUDA does not know this pointer (%s)", op,
		                       which, v->data, cudaGetErrorName(e));
	}
	if ((at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) ||
	    (at.type == cudaMemoryTypeDevice && at.device != st->device)) {
		char where[32] = "";
		if (at.type == cudaMemoryTypeDevice)
			snprintf(where, sizeof(where), " of cuda:%d", at.device);
		return st->host->error(st->h, ACCEL_ERR_INVALID_ARG,
		                       "%s: %s buffer %p is labelled cuda:%d but is %s%s; "
		                       "collectives on cuda views need device memory of this "
		                       "rank's GPU (cudaMalloc, or accelp_comm_mem_alloc)",
		                       op, which, v->data, v->device_index, memory_type_name(at.type),
		                       where);
	}
	return ACCEL_OK;
}

/* The two views of an op on this rank's GPU; sets *place (COLL_*). */
static int check_pair(nccl_state *st, int kind, const accel_view *send, const accel_view *recv,
                      int *place)
{
	const char *op = coll_op_name(kind);
	int rc;
	coll_assert_pair(kind, st->world, send, recv, -1);
	if ((rc = check_view(st, op, "send", send)) || (rc = check_view(st, op, "recv", recv)))
		return rc;
	*place = coll_place(kind, st->rank, send, recv);
	return ACCEL_OK;
}

static int check_reduce(nccl_state *st, const char *op, uint32_t dtype, uint32_t red,
                        ncclDataType_t *ret_type, ncclRedOp_t *ret_op)
{
	coll_assert_reduction(dtype, red);
	/* what this NCCL reduces (bf16 needs NCCL 2.10) */
	if (!accel_nccl_dtype(dtype, 1, ret_type))
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "%s: cannot reduce %s; reductions take f32, f64, f16, bf16, "
		                       "i32 or i64",
		                       op, accel_abi_dtype_name(dtype));
	if (!accel_nccl_redop(red, ret_op))
		return st->host->error(st->h, ACCEL_ERR_INTERNAL,
		                       "%s: no NCCL operation for reduction %u", op, red);
	return ACCEL_OK;
}

static int fail_fast(nccl_state *st, int kind)
{
	return st->host->error(st->h, st->fail_code,
	                       "%s #%llu not run: an earlier NCCL call failed (%.*s)",
	                       coll_op_name(kind), (unsigned long long)st->seq + 1, MSG_MAX / 2,
	                       st->fail_msg);
}

/* ---- requests a stream waits on ------------------------------------------------------------- */

/* The watchdog: every 10 ms, each watched request that is still running is
 * checked against its deadline and NCCL's asynchronous error; the first
 * that fails aborts the communicator (NCCL's kernels end, so the streams
 * waiting on them go on) and leaves a message for the training thread
 * (watch_reap).  It never calls host->error (that is the training
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
				self_name(st, self, sizeof(self));
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
static void watch_reap(nccl_state *st)
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
		timeout_record(st, st->wwhat, st->wseq, 1);
	else if (fired)
		fail(st, st->wfired_code, "%s", st->wmsg);
}

/* Watch r (taken over from the caller); starts the thread on first use. */
static int watch_add(nccl_state *st, accel_comm_req *r)
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

static void watch_stop(nccl_state *st)
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

/* ---- issuing ----------------------------------------------------------------------------- */

typedef struct launch {
	int kind;
	const void *send;
	void *recv;
	uint64_t count;           /* NCCL's count for the call */
	ncclDataType_t type;
	ncclRedOp_t op;
	int root;
	uint32_t dtype;
	/* ABI in-place conventions that differ from NCCL's (see below) */
	size_t block_bytes;       /* bytes of one rank's block */
	int copy_before;          /* allgather in place: move own block to slot rank */
	int copy_after;           /* reduce_scatter in place: move result to start */
} launch;

static int issue(nccl_state *st, const launch *L, accel_comm_req **ret_req)
{
	int rc = ACCEL_OK, prev = -1, entered = 0;
	accel_comm_req *r = NULL;
	char *base = L->recv;
	char what[96], name[128];
	uint64_t seq = st->seq + 1;
	int64_t deadline = mono_deadline_ns(st->timeout_ms);  /* counted from issue */
	if (st->failed)
		return fail_fast(st, L->kind);
	if ((rc = enter_device(st, &prev)))
		return rc;
	watch_reap(st);   /* a stream-waited collective may have failed meanwhile */
	if (st->failed) {
		leave_device(st, prev);
		return fail_fast(st, L->kind);
	}
	/* the names NCCL_TRY reports: "ncclAllReduce for allreduce #7 (...)" */
	coll_describe(what, sizeof(what), L->kind, seq, L->dtype, L->count);
	snprintf(name, sizeof(name), "%s for %s",
	         L->kind == OP_ALLREDUCE || L->kind == OP_BARRIER ? "ncclAllReduce"
	         : L->kind == OP_REDUCE_SCATTER                  ? "ncclReduceScatter"
	         : L->kind == OP_ALLGATHER                       ? "ncclAllGather"
	                                                         : "ncclBroadcast",
	         what);
	if (!(r = req_get(st, &rc)))
		goto out;
	/* after the work queued on the context's stream before this call */
	void *user = ACCEL_HOST_HAS(st->host, stream) ? st->host->stream(st->h) : NULL;
	CUDA_TRY(st, cudaEventRecord(st->dep_ev, user ? (cudaStream_t)user : cudaStreamLegacy),
	         out);
	CUDA_TRY(st, cudaStreamWaitEvent(st->stream, st->dep_ev, 0), out);
	if (L->copy_before && st->rank > 0 && L->block_bytes)
		CUDA_TRY(st, cudaMemcpyAsync(base + (size_t)st->rank * L->block_bytes, base,
		                             L->block_bytes, cudaMemcpyDeviceToDevice, st->stream),
		         out);
	if (comm_enter(st)) {   /* the watchdog aborted it since watch_reap */
		watch_reap(st);
		rc = st->failed ? fail_fast(st, L->kind)
		                : fail(st, ACCEL_ERR_NCCL, "%s not run: the communicator was aborted",
		                       what);
		goto out;
	}
	entered = 1;
	switch (L->kind) {
	case OP_ALLREDUCE:
		NCCL_TRY(st, name, seq,
		         ncclAllReduce(L->send, L->recv, L->count, L->type, L->op, st->comm, st->stream),
		         out);
		break;
	case OP_REDUCE_SCATTER:
		NCCL_TRY(st, name, seq,
		         ncclReduceScatter(L->send, L->recv, L->count, L->type, L->op, st->comm,
		                           st->stream),
		         out);
		break;
	case OP_ALLGATHER:
		NCCL_TRY(st, name, seq,
		         ncclAllGather(L->send, L->recv, L->count, L->type, st->comm, st->stream), out);
		break;
	case OP_BROADCAST:
		NCCL_TRY(st, name, seq,
		         ncclBroadcast(L->recv, L->recv, L->count, L->type, L->root, st->comm,
		                       st->stream),
		         out);
		break;
	case OP_BARRIER:
		NCCL_TRY(st, name, seq,
		         ncclAllReduce(st->scratch, st->scratch, 1, ncclFloat32, ncclSum, st->comm,
		                       st->stream),
		         out);
		break;
	default:
		rc = st->host->error(st->h, ACCEL_ERR_INTERNAL, "unknown op %d", L->kind);
		goto out;
	}
	comm_leave(st);
	entered = 0;
	if (L->copy_after && st->rank > 0 && L->block_bytes)
		CUDA_TRY(st, cudaMemcpyAsync((char *)L->send, L->recv, L->block_bytes,
		                             cudaMemcpyDeviceToDevice, st->stream),
		         out);
	CUDA_TRY(st, cudaEventRecord(r->ev, st->stream), out);
	r->seq = ++st->seq;
	r->kind = L->kind;
	r->dtype = L->dtype;
	r->count = L->count;
	r->deadline_ns = deadline;
	r->next = st->live;
	st->live = r;
	*ret_req = r;
	r = NULL;
out:
	if (entered)
		comm_leave(st);
	if (r)
		req_put(st, r);
	leave_device(st, prev);
	return rc;
}

static int nccl_allreduce(void *state, const accel_view *send, const accel_view *recv,
                          uint32_t red, accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_ALLREDUCE};
	int rc, place;
	assert(ret_req);
	if ((rc = check_pair(st, OP_ALLREDUCE, send, recv, &place)) ||
	    (rc = check_reduce(st, "allreduce", send->dtype, red, &L.type, &L.op)))
		return rc;
	L.send = send->data;
	L.recv = recv->data;
	L.count = recv->numel;
	L.dtype = send->dtype;
	return issue(st, &L, ret_req);
}

static int nccl_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                               uint32_t red, accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_REDUCE_SCATTER};
	int rc, place;
	assert(ret_req);
	if ((rc = check_pair(st, OP_REDUCE_SCATTER, send, recv, &place)) ||
	    (rc = check_reduce(st, "reduce_scatter", send->dtype, red, &L.type, &L.op)))
		return rc;
	L.send = send->data;
	L.recv = recv->data;
	L.count = recv->numel;
	L.dtype = send->dtype;
	if (place == COLL_SAME) {
		/* In place with the result at the start of the buffer.  NCCL's in
		 * place (COLL_RANK_BLOCK, passed as it is): recvbuff == sendbuff +
		 * rank * count.  Use NCCL's form, then move the block to the start
		 * (disjoint for rank > 0). */
		L.block_bytes = recv->numel * accel_abi_dtype_size(send->dtype);
		L.recv = (char *)send->data + (size_t)st->rank * L.block_bytes;
		L.copy_after = 1;
	}
	return issue(st, &L, ret_req);
}

static int nccl_allgather(void *state, const accel_view *send, const accel_view *recv,
                          accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_ALLGATHER};
	int rc, place;
	assert(ret_req);
	if ((rc = check_pair(st, OP_ALLGATHER, send, recv, &place)))
		return rc;
	if (!accel_nccl_dtype(send->dtype, 0, &L.type))
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED, "allgather: dtype %s",
		                       accel_abi_dtype_name(send->dtype));
	L.send = send->data;
	L.recv = recv->data;
	L.count = send->numel;
	L.dtype = send->dtype;
	if (place == COLL_SAME) {
		/* In place with the own block at the start; NCCL's in place
		 * (COLL_RANK_BLOCK, passed as it is) wants it at slot rank. */
		L.block_bytes = send->numel * accel_abi_dtype_size(send->dtype);
		L.send = (char *)recv->data + (size_t)st->rank * L.block_bytes;
		L.copy_before = 1;
	}
	return issue(st, &L, ret_req);
}

static int nccl_broadcast(void *state, const accel_view *buf, int32_t root,
                          accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_BROADCAST};
	int rc;
	assert(ret_req);
	assert(root >= 0 && root < st->world);
	if ((rc = check_view(st, "broadcast", "buffer", buf)))
		return rc;
	if (!accel_nccl_dtype(buf->dtype, 0, &L.type))
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED, "broadcast: dtype %s",
		                       accel_abi_dtype_name(buf->dtype));
	L.recv = buf->data;
	L.count = buf->numel;
	L.root = root;
	L.dtype = buf->dtype;
	return issue(st, &L, ret_req);
}

static int nccl_barrier(void *state, accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_BARRIER, .dtype = ACCEL_DTYPE_F32, .count = 1};
	assert(ret_req);
	return issue(st, &L, ret_req);
}

/* ---- completion -------------------------------------------------------------------------- */

/* The oldest request still running: where the stream is stuck. */
static accel_comm_req *oldest_running(nccl_state *st, accel_comm_req *r)
{
	accel_comm_req *old = r;
	for (accel_comm_req *p = st->live; p; p = p->next)
		if (p->seq < old->seq && cudaEventQuery(p->ev) == cudaErrorNotReady)
			old = p;
	(void)cudaGetLastError();
	return old;
}

/* One check of r: 1 done, 0 not yet, <0 failed (recorded).  Enforces the
 * deadline, so test() alone also ends a hang. */
static int req_poll(nccl_state *st, accel_comm_req *r)
{
	int rc = ACCEL_OK;
	char what[96];
	if (st->aborted)
		return fail(st, st->fail_code ? st->fail_code : ACCEL_ERR_NCCL,
		            "%s #%llu: the communicator was aborted after an earlier failure",
		            coll_op_name(r->kind), (unsigned long long)r->seq);
	cudaError_t e = cudaEventQuery(r->ev);
	if (e == cudaSuccess)
		return 1;
	if (e != cudaErrorNotReady) {
		(void)cudaGetLastError();
		return cuda_fail(st, e, "cudaEventQuery");
	}
	ncclResult_t ar = ncclSuccess, q;
	if (comm_enter(st)) {   /* by the watchdog, since the check above */
		watch_reap(st);
		return st->failed ? fail(st, st->fail_code, "%s", st->fail_msg)
		                  : fail(st, ACCEL_ERR_NCCL, "%s #%llu: the communicator was aborted",
		                         coll_op_name(r->kind), (unsigned long long)r->seq);
	}
	q = ncclCommGetAsyncError(st->comm, &ar);
	comm_leave(st);
	if (q != ncclSuccess) {
		rc = nccl_fail(st, q, "ncclCommGetAsyncError");
		goto out;
	}
	if (ar != ncclSuccess && ar != ncclInProgress) {
		coll_describe(what, sizeof(what), r->kind, r->seq, r->dtype, r->count);
		rc = nccl_fail(st, ar, what);
		abort_comm(st);
		goto out;
	}
	if (r->deadline_ns && mono_ns() > r->deadline_ns) {
		accel_comm_req *old = oldest_running(st, r);
		coll_describe(what, sizeof(what), old->kind, old->seq, old->dtype, old->count);
		rc = timeout_fail(st, what, old->seq);
	}
out:
	return rc;
}

static int nccl_wait(void *state, accel_comm_req *r)
{
	nccl_state *st = state;
	int rc = ACCEL_OK, prev = -1;
	assert(r && req_known(st, r));   /* the core waits its own, once */
	if ((rc = enter_device(st, &prev)) == ACCEL_OK) {
		watch_reap(st);
		uint32_t spins = 0;
		int p;
		while ((p = req_poll(st, r)) == 0)
			backoff(&spins);
		if (p < 0)
			rc = p;
		leave_device(st, prev);
	}
	/* released whatever happened: wait() is the end of a request */
	req_unlink(st, r);
	req_put(st, r);
	return rc;
}

/* The caller's stream waits for r's event; the host does not.  r is
 * released for the caller, but watched until it completes (its deadline
 * holds: see watch_main). */
static int nccl_wait_stream(void *state, accel_comm_req *r, void *stream)
{
	nccl_state *st = state;
	int rc, prev = -1, p = ACCEL_OK;
	assert(r && req_known(st, r));
	req_unlink(st, r);
	if ((rc = enter_device(st, &prev))) {
		req_put(st, r);
		return rc;
	}
	watch_reap(st);
	p = st->failed ? fail_fast(st, r->kind) : req_poll(st, r);
	if (p == 0) {
		cudaError_t e = cudaStreamWaitEvent(stream ? (cudaStream_t)stream : cudaStreamLegacy,
		                                    r->ev, 0);
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			p = cuda_fail(st, e, "cudaStreamWaitEvent(the caller's stream, the collective's "
			                     "event)");
		} else if (watch_add(st, r) == ACCEL_OK) {
			r = NULL;
		} else {
			/* no thread to enforce the deadline: wait here instead */
			uint32_t spins = 0;
			while ((p = req_poll(st, r)) == 0)
				backoff(&spins);
		}
	}
	if (r)
		req_put(st, r);
	leave_device(st, prev);
	return p < 0 ? p : ACCEL_OK;
}

static int nccl_test(void *state, accel_comm_req *r, int32_t *ret_done)
{
	nccl_state *st = state;
	int prev = -1, p;
	assert(ret_done);
	assert(r && req_known(st, r));
	if ((p = enter_device(st, &prev)))
		return p;
	watch_reap(st);
	p = req_poll(st, r);
	leave_device(st, prev);
	if (p < 0)
		return p;
	*ret_done = p;
	return ACCEL_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */

static int nccl_mem_alloc(void *state, int32_t device, int32_t device_index, uint64_t bytes,
                          void **ret_ptr)
{
	nccl_state *st = state;
	int rc = ACCEL_OK, prev = -1;
	void *p = NULL;
	if (device != ACCEL_DEVICE_CUDA)
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "mem_alloc: the nccl backend allocates device memory "
		                       "only (asked for device %d)", device);
	if (device_index != st->device)
		return st->host->error(st->h, ACCEL_ERR_INVALID_ARG,
		                       "mem_alloc: asked for cuda:%d, but this rank's "
		                       "communicator is on cuda:%d", device_index, st->device);
	if ((rc = enter_device(st, &prev)))
		return rc;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		char msg[MSG_MAX];
		accel_nccl_describe_cuda(e, "cudaMalloc", msg, sizeof(msg));
		/* Out of memory is the caller's to handle, not a broken communicator. */
		rc = st->host->error(st->h, e == cudaErrorMemoryAllocation ? ACCEL_ERR_NOMEM
		                                                           : ACCEL_ERR_CUDA,
		                     "%s (%llu bytes on cuda:%d)", msg, (unsigned long long)bytes,
		                     st->device);
	} else {
		*ret_ptr = p;
	}
	leave_device(st, prev);
	return rc;
}

static void drain_or_abort(nccl_state *st, int64_t deadline, const char *when);

static void nccl_mem_free(void *state, void *ptr)
{
	nccl_state *st = state;
	if (!ptr)
		return;
	/* cudaFree waits for the device: never behind a collective that waits
	 * for a missing peer, and never under a running kernel */
	if (st->live) {
		/* as long as the collectives themselves may take: the latest
		 * deadline of the requests still held (0: one has none) */
		int64_t deadline = 1;
		for (accel_comm_req *r = st->live; r; r = r->next)
			deadline = !r->deadline_ns || !deadline ? 0
			           : r->deadline_ns > deadline ? r->deadline_ns : deadline;
		drain_or_abort(st, deadline, "before freeing device memory");
	}
	cudaError_t e = cudaFree(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		st->host->log(st->h, ACCEL_LOG_WARN, "cudaFree(%p) failed: %s", ptr,
		              cudaGetErrorString(e));
	}
}

/* ---- life cycle ---------------------------------------------------------------------------- */

/* Let the work queued on our stream finish by `deadline` (mono_ns
 * clock, 0: none); a failed communicator, a stuck stream, a stream error or
 * an NCCL error meanwhile abort the communicator instead (after which the
 * stream drains: aborting ends NCCL's kernels).  Called before anything
 * that would wait for the stream without a deadline (cudaFree,
 * ncclCommFinalize). */
static void drain_or_abort(nccl_state *st, int64_t deadline, const char *when)
{
	if (!st->comm || st->aborted)
		return;
	if (st->failed) {
		abort_comm(st);
		return;
	}
	if (!st->stream)
		return;
	int64_t start = mono_ns();
	uint32_t spins = 0;
	cudaError_t e;
	ncclResult_t ar = ncclSuccess, q = ncclSuccess;
	while ((e = cudaStreamQuery(st->stream)) == cudaErrorNotReady &&
	       (!deadline || mono_ns() < deadline)) {
		if (comm_enter(st))
			return;   /* aborted by the watchdog: the stream drains */
		q = ncclCommGetAsyncError(st->comm, &ar);
		comm_leave(st);
		if (q != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress))
			break;
		backoff(&spins);
	}
	if (e == cudaSuccess)
		return;
	int code = ACCEL_ERR_NCCL;
	if (e != cudaErrorNotReady) {
		(void)cudaGetLastError();
		code = ACCEL_ERR_CUDA;
		st->host->log(st->h, ACCEL_LOG_WARN, "rank %d: the collective stream failed %s (%s); "
		              "aborting the communicator", st->rank, when, cudaGetErrorName(e));
	} else if (q != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress)) {
		ncclResult_t bad = q != ncclSuccess ? q : ar;
		if (bad == ncclRemoteError)
			code = ACCEL_ERR_PEER;
		st->host->log(st->h, ACCEL_LOG_WARN, "rank %d: NCCL reported %s %s; aborting the "
		              "communicator", st->rank, accel_nccl_result_name(bad), when);
	} else {
		code = ACCEL_ERR_TIMEOUT;
		st->host->log(st->h, ACCEL_LOG_WARN, "rank %d: collectives still running after %.1f s "
		              "%s; aborting the communicator", st->rank,
		              (double)(mono_ns() - start) / 1e9, when);
	}
	abort_comm(st);
	if (!st->failed) {
		st->failed = 1;
		st->fail_code = code;
		snprintf(st->fail_msg, sizeof(st->fail_msg), "the communicator was aborted %s", when);
	}
}

static void nccl_fini(void *state)
{
	nccl_state *st = state;
	int prev = -1;
	if (!st)
		return;
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	cudaSetDevice(st->device);
	drain_or_abort(st, mono_deadline_ns(DRAIN_MAX_MS), "at shutdown");
	watch_stop(st);   /* after the drain: the stream is idle or aborted */
	if (st->comm && !st->aborted) {
		/* finalize (flushes NCCL's own work), bounded too */
		int64_t deadline = mono_deadline_ns(DRAIN_MAX_MS);
		uint32_t spins = 0;
		ncclResult_t ar = ncclCommFinalize(st->comm);
		while (ar == ncclInProgress && mono_ns() < deadline &&
		       ncclCommGetAsyncError(st->comm, &ar) == ncclSuccess)
			backoff(&spins);
		if (ar == ncclSuccess)
			ncclCommDestroy(st->comm);
		else
			abort_comm(st);
	}
	while (st->live) {
		accel_comm_req *r = st->live;
		st->live = r->next;
		req_put(st, r);
	}
	while (st->spare) {
		accel_comm_req *r = st->spare;
		st->spare = r->next;
		cudaEventDestroy(r->ev);
		free(r);
	}
	if (st->scratch)
		cudaFree(st->scratch);
	if (st->dep_ev)
		cudaEventDestroy(st->dep_ev);
	if (st->stream)
		cudaStreamDestroy(st->stream);
	(void)cudaGetLastError();
	if (prev >= 0)
		cudaSetDevice(prev);
	free(st->wranks);
	free(st);
}

static int nccl_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                     void **ret_state)
{
	nccl_state *st = NULL;
	int rc = ACCEL_OK, ndev = 0, prev = -1;
	char msg[MSG_MAX];
	ncclUniqueId id;

	if (!args || !ACCEL_COMM_INIT_HAS(args, job_id))
		return host->error(h, ACCEL_ERR_ABI, "init: accel_comm_init_v1 is %s",
		                   args ? "too small (older core?)" : "NULL");
	st = calloc(1, sizeof(*st));
	if (!st)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory for the backend state");
	st->host = host;
	st->h = h;
	st->rank = args->rank;
	st->world = args->world_size;
	st->timeout_ms = args->timeout_ms;
	st->device = args->device_index >= 0 ? args->device_index : args->local_rank;

	CUDA_TRY(st, cudaGetDeviceCount(&ndev), fail);
	CUDA_TRY(st, cudaGetDevice(&prev), fail);
	if (st->device < 0 || st->device >= ndev) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		rc = host->error(h, ACCEL_ERR_CONFIG,
		                 "rank %d (local rank %d) wants cuda:%d, but %d GPU(s) are "
		                 "visible (CUDA_VISIBLE_DEVICES=%s); start at most one process per "
		                 "GPU on each node",
		                 st->rank, args->local_rank, st->device, ndev, vis ? vis : "(unset)");
		goto fail;
	}
	CUDA_TRY(st, cudaSetDevice(st->device), fail);

	nccl_host_boot hb = {host, h, 0};
	int via_store = 0;
	rc = accel_nccl_bootstrap(&accel_nccl_host_boot_ops, &hb, st->rank, st->world,
	                          st->timeout_ms, &id, &via_store, msg, sizeof(msg));
	if (rc != ACCEL_OK) {
		/* a failed host broadcast recorded its own error first (which
		 * then wins); this says what it was for */
		if (hb.bcast_failed)
			host->log(h, ACCEL_LOG_ERROR, "%s", msg);
		host->error(h, rc, "%s", msg);
		goto fail;
	}

	/* The store namespace for naming missing ranks: from the id, which is
	 * the same on every rank and new for every communicator.  Without a
	 * store a timeout cannot name them. */
	st->no_store = st->world > 1 && !via_store;
	if (st->world > 1 && via_store) {
		uint64_t hsh = 1469598103934665603ull;  /* FNV-1a */
		for (size_t i = 0; i < sizeof(id.internal); i++)
			hsh = (hsh ^ (unsigned char)id.internal[i]) * 1099511628211ull;
		snprintf(st->ns, sizeof(st->ns), "nccl/%016llx", (unsigned long long)hsh);
	}
	const char *blocking = getenv("NCCL_COMM_BLOCKING");
	if (blocking && atoi(blocking) == 1)
		host->log(h, ACCEL_LOG_WARN,
		          "NCCL_COMM_BLOCKING=1 makes NCCL calls block: a missing rank then hangs "
		          "this one without the %.1f s deadline (comm.timeout_s); unset it",
		          (double)st->timeout_ms / 1000.0);

	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	NCCL_TRY(st, "ncclCommInitRankConfig (creating the communicator)", 0,
	         ncclCommInitRankConfig(&st->comm, st->world, id, st->rank, &cfg), fail);

	CUDA_TRY(st, cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), fail);
	CUDA_TRY(st, cudaEventCreateWithFlags(&st->dep_ev, cudaEventDisableTiming), fail);
	CUDA_TRY(st, cudaMalloc(&st->scratch, 64), fail);
	CUDA_TRY(st, cudaMemset(st->scratch, 0, 64), fail);

	host->log(h, ACCEL_LOG_DEBUG, "rank %d of %d on cuda:%d, NCCL %d.%d.%d, timeout %lld ms",
	          st->rank, st->world, st->device, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
	          (long long)st->timeout_ms);
	*ret_state = st;
	if (prev >= 0 && prev != st->device)
		cudaSetDevice(prev);  /* every call restores the caller's device */
	return ACCEL_OK;
fail:
	nccl_fini(st);
	if (prev >= 0)
		cudaSetDevice(prev);
	(void)cudaGetLastError();
	return rc;
}

/* Where a rank outside the new group lets ncclCommSplit write its (NULL)
 * communicator; never read. */
static ncclComm_t g_split_sink;

/* ncclCommSplit in non-blocking mode: the new communicator's handle is
 * stored (from NCCL's thread) only once its initialisation has finished,
 * and until then *newcomm is NULL, while the parent's own state may already
 * read success (seen with NCCL 2.28 at one rank).  Wait for the handle
 * until `deadline` (the parent's timeout, counted from the split's call),
 * with the parent's errors reported; the new communicator's own result is
 * read after. */
static ncclResult_t split_wait(nccl_state *p, ncclComm_t *slot, int64_t deadline, int *rc)
{
	uint32_t spins = 0;
	*rc = ACCEL_OK;
	while (!__atomic_load_n(slot, __ATOMIC_ACQUIRE)) {
		ncclResult_t ar = ncclSuccess;
		ncclResult_t q = ncclCommGetAsyncError(p->comm, &ar);
		if (q != ncclSuccess)
			return q;
		if (ar != ncclSuccess && ar != ncclInProgress)
			return ar;
		if (deadline && mono_ns() > deadline) {
			*rc = timeout_fail(p, "ncclCommSplit (waiting for the new communicator)", 0);
			return ncclInProgress;
		}
		backoff(&spins);
	}
	return ncclSuccess;
}

/* A group: ncclCommSplit of the parent (collective over it; colour NONE is
 * NCCL_SPLIT_NOCOLOR), with the rank the core gave as the key, on the
 * parent's device; a stream and scratch of its own like init(). */
static int nccl_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	nccl_state *p = state, *st = NULL;
	int rc = ACCEL_OK, prev = -1;
	if (!args || args->struct_size < offsetof(accel_comm_split_v1, local_size) + sizeof(int32_t))
		return p->host->error(p->h, ACCEL_ERR_ABI, "split: accel_comm_split_v1 is too old");
	if (p->failed)
		return p->host->error(p->h, p->fail_code, "split: %s", p->fail_msg);
	int member = args->color != ACCEL_COMM_SPLIT_NONE;
	if (member) {
		st = calloc(1, sizeof(*st));
		if (!st)
			return p->host->error(p->h, ACCEL_ERR_NOMEM, "out of memory for the backend state");
		st->host = p->host;
		st->h = p->h;
		st->rank = args->rank;
		st->world = args->size;
		st->timeout_ms = args->timeout_ms;
		st->device = p->device;
		st->no_store = p->no_store;
		st->wranks = malloc(sizeof(int32_t) * (size_t)args->size);
		if (!st->wranks) {
			free(st);
			return p->host->error(p->h, ACCEL_ERR_NOMEM, "out of memory");
		}
		memcpy(st->wranks, args->ranks, sizeof(int32_t) * (size_t)args->size);
		/* under the parent's keys, which its unique id made unique */
		int nl = p->ns[0] ? snprintf(st->ns, sizeof(st->ns), "%s/g%s", p->ns, args->tag) : 0;
		if (nl < 0 || (size_t)nl >= sizeof(st->ns))
			st->ns[0] = '\0';   /* too deep to name missing ranks: said as "cannot tell" */
	}
	if ((rc = enter_device(p, &prev)))
		goto fail;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	if (comm_enter(p)) {
		rc = p->host->error(p->h, p->fail_code ? p->fail_code : ACCEL_ERR_NCCL, "ncclCommSplit "
		                    "not run: the parent communicator was aborted (%s)", p->fail_msg);
		goto fail;
	}
	/* NCCL writes the new communicator from its own thread when the split
	 * has finished: into st (on the heap) for a member, into a sink for the
	 * others (NCCL writes NULL there). */
	int64_t deadline = mono_deadline_ns(p->timeout_ms);
	ncclResult_t sr = ncclCommSplit(p->comm, member ? args->color : NCCL_SPLIT_NOCOLOR,
	                                member ? args->rank : 0,
	                                member ? &st->comm : &g_split_sink, &cfg);
	int launched = sr == ncclSuccess || sr == ncclInProgress;
	if (sr == ncclInProgress)
		sr = settle(p, "ncclCommSplit", 0, &rc);
	if (member && rc == ACCEL_OK && (sr == ncclSuccess || sr == ncclInProgress))
		sr = split_wait(p, &st->comm, deadline, &rc);
	comm_leave(p);
	if (rc == ACCEL_OK && sr != ncclSuccess)
		rc = nccl_fail(p, sr, "ncclCommSplit");
	if (rc != ACCEL_OK) {
		if (member && launched && !__atomic_load_n(&st->comm, __ATOMIC_ACQUIRE)) {
			/* NCCL may still write st->comm: st is left to it (a leak
			 * of one state, after an error that ends the job anyway) */
			free(st->wranks);
			st = NULL;
		}
		goto fail;
	}
	if (!member) {
		leave_device(p, prev);
		*ret_state = NULL;
		return ACCEL_OK;
	}
	NCCL_TRY(st, "ncclCommSplit (the new group's communicator)", 0, ncclInProgress, fail);
	CUDA_TRY(st, cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), fail);
	CUDA_TRY(st, cudaEventCreateWithFlags(&st->dep_ev, cudaEventDisableTiming), fail);
	CUDA_TRY(st, cudaMalloc(&st->scratch, 64), fail);
	CUDA_TRY(st, cudaMemset(st->scratch, 0, 64), fail);
	leave_device(p, prev);
	p->host->log(p->h, ACCEL_LOG_DEBUG, "group %s: rank %d of %d on cuda:%d", args->tag,
	             st->rank, st->world, st->device);
	*ret_state = st;
	return ACCEL_OK;
fail:
	nccl_fini(st);
	if (prev >= 0)
		leave_device(p, prev);
	(void)cudaGetLastError();
	return rc;
}

static int32_t nccl_probe(const accel_host_v1 *host, accel_host *h)
{
	int n = 0;
	(void)host;
	(void)h;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n > 0;
}

static const accel_comm_desc_v1 nccl_desc = {
	.struct_size = sizeof(accel_comm_desc_v1),
	.devices = 1u << ACCEL_DEVICE_CUDA,
	.name = "nccl",
	.version = "1.0.0",
	.summary = "NCCL collectives on CUDA device memory (one GPU per rank)",
	.requires = ACCEL_REQ_CUDA,
	.config_section = NULL,
	.params = NULL,
	.n_params = 0,
	.scope = ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES,
	.preference = ACCEL_COMM_PREF_LAUNCHER,
};

static const accel_comm_v1 nccl_vtable = {
	.struct_size = sizeof(accel_comm_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &nccl_desc,
	.init = nccl_init,
	.fini = nccl_fini,
	.probe = nccl_probe,
	.mem_alloc = nccl_mem_alloc,
	.mem_free = nccl_mem_free,
	.allreduce = nccl_allreduce,
	.reduce_scatter = nccl_reduce_scatter,
	.allgather = nccl_allgather,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.wait = nccl_wait,
	.test = nccl_test,
	.split = nccl_split,
	.wait_stream = nccl_wait_stream,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "nccl", store_add))   /* the rendezvous store */
		return NULL;
	return &nccl_vtable;
}
