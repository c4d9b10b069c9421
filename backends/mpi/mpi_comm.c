/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi_comm.c: the "mpi" comm backend (abi/accel/comm.h).
 *
 * Collectives are MPI's nonblocking ones (MPI_Iallreduce, ...) on a private
 * duplicate of MPI_COMM_WORLD, so accel's traffic never matches the
 * program's own MPI messages.  Why nonblocking: a blocking MPI call cannot
 * be interrupted, so it cannot honour the ABI's timeout; polling MPI_Test
 * against a deadline can.
 *
 * Who polls: with MPI_THREAD_MULTIPLE (what we ask for when we initialize
 * MPI) a progress thread runs the queue of requests one at a time in issue
 * order, so communication advances while the training thread computes.
 * When the program initialized MPI itself at a lower thread level, the
 * training thread drives the same queue inside test() and wait().  In both
 * modes one request is in flight at a time, so every rank issues MPI calls
 * in the same order even when an operation is split into several calls.
 *
 * MPI cannot name the ranks that did not arrive at a collective (there is no
 * portable way to ask), so a timeout says so and points at the logs.  MPI
 * also cannot cancel a collective: after a timeout the request is kept and
 * drained in fini(); if it never completes MPI_Finalize is skipped, since it
 * would hang. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/comm.h"
#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "backends/common/coll-missing.h"
#include "mpi-impl.h"

#define MSG_MAX 768
/* f32 elements of the staging buffer for f16/bf16 reductions (16 MiB) */
#define HALF_STAGE_ELEMS (UINT64_C(1) << 22)

#define REQ_QUEUED  0
#define REQ_RUNNING 1
#define REQ_DONE    2
#define REQ_FAILED  3

/* How long (ms) fini() gives timed-out requests to complete after all:
 * a late peer then still finishes, and MPI can be cleaned up. */
#define DRAIN_MAX_MS 10000
/* How long wait() watches a request before it sleeps on the condition. */
#define WAIT_SPIN_NS 50000

struct accel_comm_req {
	accel_comm_req *next;     /* live requests, in issue order           */
	int kind;                 /* OP_*                                     */
	int state;                /* REQ_*; under st->lock in thread mode     */
	uint64_t seq;
	uint32_t dtype, red;
	size_t esz;
	const char *sendp;        /* NULL: in place                          */
	char *recvp;
	char *result_at;          /* reduce_scatter in place at block `rank`:
	                             where the result goes after MPI leaves it
	                             at recvp; NULL otherwise                */
	int own_in_slot;          /* allgather in place: own block already at
	                             slot `rank` (MPI_IN_PLACE's form)       */
	int half;                 /* an f16/bf16 reduction: through st->stage */
	int timed_out;            /* failed by its own deadline (not fail-fast) */
	uint64_t count;           /* allreduce/broadcast: all elements;
	                             reduce_scatter: elements per rank result;
	                             allgather: elements each rank sends     */
	int32_t root;
	MPI_Datatype type;
	MPI_Op op;
	uint64_t off, cur;        /* elements issued before / in this call    */
	int issued;               /* an MPI request is active in mreq         */
	MPI_Request mreq;
	int64_t deadline_ns;      /* 0: not timed yet                         */
	int status;               /* ACCEL_OK or the failure                 */
	char msg[MSG_MAX];
};

#include "backends/common/coll-reqs.h"  /* needs struct accel_comm_req */

typedef struct abandoned {
	MPI_Request mreq;
	uint64_t seq;
	int kind;
} abandoned;

typedef struct mpi_state {
	const accel_host_v1 *host;
	accel_host *h;
	MPI_Comm comm;
	int rank, world;
	int32_t *wranks;          /* a group's members by world rank; NULL: the world */
	char who[96];             /* "rank 1 of 4" / "world rank 3 (1 of 2 in group 1c1)" */
	int64_t timeout_ms;       /* <= 0: no limit */
	uint64_t chunk;           /* max elements per MPI call (allreduce, broadcast) */
	int thread_level;
	mpi_ops ops;
	char ns[128];             /* store namespace for naming missing ranks */
	uint64_t timeout_seq;     /* the first request that timed out (set by
	                             the driver in req_finished, under lock) */
	int named;                /* the store was asked (training thread) */
	char missing[256];        /* what it said, "" when it could not tell */
	float *stage;             /* f16/bf16 reductions: f32 staging, used by
	                             the thread that drives the queue */
	uint64_t stage_cap;       /* elements */

	int use_thread;
	int thread_started;
	int sync_inited;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work;      /* the worker waits for requests       */
	pthread_cond_t done;      /* wait() waits for a request to finish */
	int stop;
	int sleeping;             /* the worker waits on `work` */

	coll_reqs live;               /* issued, not yet released */
	accel_comm_req *cursor;       /* first request not finished           */
	uint64_t seq;

	int failed;               /* first failure: every later op fails fast */
	int fail_code;
	char fail_msg[MSG_MAX];

	abandoned *lost;          /* timed-out MPI requests, drained in fini */
	uint32_t n_lost, cap_lost;
	int lost_untracked;       /* one could not be recorded (no memory) */

	int abandon;              /* the process is exiting: the worker stops
	                             calling MPI at once (atomic) */
	struct mpi_state *next_live;  /* live instances (g_live, under
	                                 g_mpi_lock) */
} mpi_state;

/* ---- process-wide MPI state --------------------------------------------------
 * MPI_Init and MPI_Finalize are once per process, not per backend instance,
 * so whether we initialized MPI is process state.  When we did, MPI is
 * finalized at exit (as mpi4py does), not in fini(): MPI cannot be
 * initialized twice, and a program may create a second context later. */
static pthread_mutex_t g_mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_mpi_we_initialized;
static int g_mpi_stuck;   /* a collective never completed: do not finalize */
static mpi_state *g_live; /* instances not yet freed */
static int g_instances;   /* instances created: their store namespaces */

static void finalize_at_exit(void)
{
	int fin = 0, ini = 0;
	pthread_mutex_lock(&g_mpi_lock);
	/* A program that exits without freeing its context may leave a
	 * progress thread inside MPI_Test: stop every one before MPI_Finalize
	 * (finalizing under it crashes).  A collective abandoned that way
	 * never completed, so MPI is not finalized (it could wait for it). */
	for (mpi_state *st = g_live; st; st = st->next_live) {
		if (!st->thread_started)
			continue;
		pthread_mutex_lock(&st->lock);
		__atomic_store_n(&st->abandon, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
		pthread_cond_signal(&st->work);
		pthread_mutex_unlock(&st->lock);
	}
	for (mpi_state *st = g_live; st; st = st->next_live) {
		if (st->thread_started) {
			pthread_join(st->thread, NULL);
			st->thread_started = 0;
		}
		/* still queued or running, or timed out and never drained */
		__atomic_store_n(&st->abandon, 1, __ATOMIC_RELEASE);
		if (st->cursor || st->n_lost || st->lost_untracked)
			g_mpi_stuck = 1;
	}
	g_live = NULL;
	MPI_Initialized(&ini);
	MPI_Finalized(&fin);
	if (ini && !fin && !g_mpi_stuck)
		MPI_Finalize();
	pthread_mutex_unlock(&g_mpi_lock);
}

/* ---- small helpers ----------------------------------------------------------- */

static const char *thread_level_name(int level)
{
	switch (level) {
	case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
	case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
	case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
	case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
	default: return "an unknown MPI thread level";
	}
}

static void mpi_errstr(int rc, char *buf, size_t cap)
{
	char tmp[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, tmp, &len) != MPI_SUCCESS || len <= 0)
		snprintf(tmp, sizeof(tmp), "MPI error %d", rc);
	else
		tmp[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
	snprintf(buf, cap, "%s", tmp);
}

/* Record an MPI failure of an init-time call through the host. */
static int init_mpi_error(mpi_state *st, const char *what, int rc)
{
	char es[MPI_MAX_ERROR_STRING];
	mpi_errstr(rc, es, sizeof(es));
	return st->host->error(st->h, ACCEL_ERR_COMM, "%s failed on rank %d: %s", what,
	                       st->rank, es);
}

static uint64_t req_total(const accel_comm_req *r)
{
	switch (r->kind) {
	case OP_ALLREDUCE:
	case OP_BROADCAST:
		return r->count;
	case OP_REDUCE_SCATTER:
		return r->half ? r->count : 1;  /* halves: in slices of every block */
	default:
		return 1;  /* one MPI call */
	}
}

/* Room for n f32 elements in st->stage. */
static int stage_reserve(mpi_state *st, uint64_t n)
{
	if (n <= st->stage_cap)
		return 1;
	float *p = realloc(st->stage, n * sizeof(float));
	if (!p)
		return 0;
	st->stage = p;
	st->stage_cap = n;
	return 1;
}

static void req_describe(const accel_comm_req *r, char *buf, size_t cap)
{
	coll_describe(buf, cap, r->kind, r->seq, r->dtype, r->count);
}

/* ---- running one request ------------------------------------------------------ */

/* Start the next MPI call of r.  Returns an MPI error code. */
static int req_issue(mpi_state *st, accel_comm_req *r)
{
	int rc = MPI_SUCCESS;
	switch (r->kind) {
	case OP_ALLREDUCE: {
		uint64_t left = r->count - r->off;
		uint64_t chunk = r->half && st->chunk > HALF_STAGE_ELEMS ? HALF_STAGE_ELEMS : st->chunk;
		r->cur = left < chunk ? left : chunk;
		if (r->half) {
			/* widen this part to f32, reduce that, round once when done */
			if (!stage_reserve(st, r->cur))
				return MPI_ERR_NO_MEM;
			const char *src = r->sendp ? r->sendp : r->recvp;
			accel_mpi_widen(src + r->off * r->esz, r->dtype, st->stage, r->cur);
			rc = MPI_Iallreduce(MPI_IN_PLACE, st->stage, (int)r->cur, MPI_FLOAT, r->op,
			                    st->comm, &r->mreq);
			break;
		}
		const void *s = r->sendp ? (const void *)(r->sendp + r->off * r->esz) : MPI_IN_PLACE;
		rc = MPI_Iallreduce(s, r->recvp + r->off * r->esz, (int)r->cur, r->type, r->op,
		                    st->comm, &r->mreq);
		break;
	}
	case OP_BROADCAST: {
		uint64_t left = r->count - r->off;
		r->cur = left < st->chunk ? left : st->chunk;
		rc = MPI_Ibcast(r->recvp + r->off * r->esz, (int)r->cur, r->type, r->root, st->comm,
		                &r->mreq);
		break;
	}
	case OP_REDUCE_SCATTER:
		if (r->half) {
			/* slice [off, off + cur) of every rank's block, widened
			 * side by side: world x cur inputs, then cur results */
			uint64_t w = (uint64_t)st->world, left = r->count - r->off;
			uint64_t chunk = HALF_STAGE_ELEMS / (w + 1);
			if (chunk > st->chunk)
				chunk = st->chunk;
			if (chunk == 0)
				chunk = 1;
			r->cur = left < chunk ? left : chunk;
			if (!stage_reserve(st, (w + 1) * r->cur))
				return MPI_ERR_NO_MEM;
			const char *src = r->sendp ? r->sendp : r->recvp;
			for (uint64_t k = 0; k < w; k++)
				accel_mpi_widen(src + (k * r->count + r->off) * r->esz, r->dtype,
				                st->stage + k * r->cur, r->cur);
			rc = MPI_Ireduce_scatter_block(st->stage, st->stage + w * r->cur, (int)r->cur,
			                               MPI_FLOAT, r->op, st->comm, &r->mreq);
			break;
		}
		r->cur = 1;
		/* In place: the input is the whole buffer at recvp, the result
		 * lands at its start (MPI's and the ABI's convention agree). */
		rc = MPI_Ireduce_scatter_block(r->sendp ? (const void *)r->sendp : MPI_IN_PLACE,
		                               r->recvp, (int)r->count, r->type, r->op, st->comm,
		                               &r->mreq);
		break;
	case OP_ALLGATHER:
		r->cur = 1;
		if (!r->sendp) {
			/* In place with this rank's block at the start of the
			 * buffer: MPI_IN_PLACE wants it at block `rank`.  The two
			 * ranges do not overlap for rank > 0. */
			if (!r->own_in_slot && st->rank > 0 && r->count > 0)
				memcpy(r->recvp + (uint64_t)st->rank * r->count * r->esz, r->recvp,
				       r->count * r->esz);
			rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->recvp, (int)r->count,
			                    r->type, st->comm, &r->mreq);
		} else {
			rc = MPI_Iallgather(r->sendp, (int)r->count, r->type, r->recvp, (int)r->count,
			                    r->type, st->comm, &r->mreq);
		}
		break;
	case OP_BARRIER:
		r->cur = 1;
		rc = MPI_Ibarrier(st->comm, &r->mreq);
		break;
	default:
		return MPI_ERR_OTHER;
	}
	if (rc == MPI_SUCCESS)
		r->issued = 1;
	return rc;
}

/* Work that follows the completion of one MPI call of r. */
static void req_chunk_done(mpi_state *st, accel_comm_req *r)
{
	if (r->half) {
		/* round once, after the AVG division; the result of a
		 * reduce_scatter goes straight to where it belongs */
		int div = r->red == ACCEL_RED_AVG ? st->world : 1;
		if (r->kind == OP_ALLREDUCE) {
			accel_mpi_narrow(st->stage, r->dtype, r->recvp + r->off * r->esz, r->cur, div);
		} else {
			char *dst = r->result_at ? r->result_at : r->recvp;
			accel_mpi_narrow(st->stage + (uint64_t)st->world * r->cur, r->dtype,
			                 dst + r->off * r->esz, r->cur, div);
		}
		r->off += r->cur;
		r->issued = 0;
		return;
	}
	if (r->red == ACCEL_RED_AVG) {
		if (r->kind == OP_ALLREDUCE)
			accel_mpi_avg_finish(r->recvp + r->off * r->esz, r->dtype, r->cur, st->world);
		else if (r->kind == OP_REDUCE_SCATTER)
			accel_mpi_avg_finish(r->recvp, r->dtype, r->count, st->world);
	}
	/* The result lands at the buffer's start; block `rank` (> 0) does not
	 * overlap it. */
	if (r->kind == OP_REDUCE_SCATTER && r->result_at && r->count)
		memcpy(r->result_at, r->recvp, r->count * r->esz);
	r->off += r->cur;
	r->issued = 0;
}

static void req_fail_mpi(accel_comm_req *r, int rc, const char *where)
{
	char what[160], es[MPI_MAX_ERROR_STRING];
	req_describe(r, what, sizeof(what));
	mpi_errstr(rc, es, sizeof(es));
	/* MPI_ERR_NO_MEM also stands for our own staging buffer */
	r->status = rc == MPI_ERR_NO_MEM ? ACCEL_ERR_NOMEM : ACCEL_ERR_COMM;
	snprintf(r->msg, sizeof(r->msg), "%s: %s failed: %s", what, where, es);
}

static void lost_add(mpi_state *st, accel_comm_req *r)
{
	if (st->n_lost == st->cap_lost) {
		uint32_t cap = st->cap_lost ? st->cap_lost * 2 : 4;
		abandoned *p = realloc(st->lost, cap * sizeof(*p));
		if (!p) {
			/* fini cannot drain it, so it must not free the
			 * communicator or finalize under it */
			st->lost_untracked = 1;
			r->issued = 0;
			return;
		}
		st->lost = p;
		st->cap_lost = cap;
	}
	st->lost[st->n_lost].mreq = r->mreq;
	st->lost[st->n_lost].seq = r->seq;
	st->lost[st->n_lost].kind = r->kind;
	st->n_lost++;
	r->issued = 0;
}

/* One step of r: issue its next call if none is active, test the active
 * one, and enforce the deadline when `timed`.  Returns 1 when r finished
 * (r->status says how), 0 when it is still running.  Runs on the thread
 * that drives the queue; touches only r and the driver's own fields. */
static int req_step(mpi_state *st, accel_comm_req *r, int timed)
{
	int rc, flag = 0;
	if (!r->issued) {
		rc = req_issue(st, r);
		if (rc != MPI_SUCCESS) {
			req_fail_mpi(r, rc, "starting it");
			return 1;
		}
	}
	rc = MPI_Test(&r->mreq, &flag, MPI_STATUS_IGNORE);
	if (rc != MPI_SUCCESS) {
		req_fail_mpi(r, rc, "MPI_Test");
		return 1;
	}
	if (flag) {
		req_chunk_done(st, r);
		if (r->off < req_total(r)) {
			rc = req_issue(st, r);
			if (rc != MPI_SUCCESS) {
				req_fail_mpi(r, rc, "starting its next part");
				return 1;
			}
			return 0;
		}
		r->status = ACCEL_OK;
		return 1;
	}
	if (timed && r->deadline_ns > 0 && mono_ns() > r->deadline_ns) {
		char what[160];
		req_describe(r, what, sizeof(what));
		r->status = ACCEL_ERR_TIMEOUT;
		r->timed_out = 1;
		snprintf(r->msg, sizeof(r->msg),
		         "%s did not complete within %.1f s on %s: the other ranks "
		         "did not arrive at it. MPI cannot tell which ranks are missing; look for "
		         "the rank whose log stops before collective #%llu, or that died or "
		         "issued collectives in a different order (raise comm.timeout_s if a "
		         "rank is just slow)",
		         what, (double)st->timeout_ms / 1000.0, st->who, (unsigned long long)r->seq);
		lost_add(st, r);
		return 1;
	}
	return 0;
}

static void set_deadline(mpi_state *st, accel_comm_req *r)
{
	if (st->timeout_ms > 0 && r->deadline_ns == 0)
		r->deadline_ns = mono_deadline_ns(st->timeout_ms);
}

/* Spin on MPI_Test first (lowest latency), then yield the CPU between
 * tests so a rank sharing a core with its peers lets them run. */
static void backoff(uint32_t *spins)
{
	if (++*spins > 2000)
		sched_yield();
}

/* Bookkeeping once r finished; caller holds st->lock in thread mode. */
static void req_finished(mpi_state *st, accel_comm_req *r)
{
	if (r->timed_out && !st->timeout_seq)
		st->timeout_seq = r->seq;
	__atomic_store_n(&r->state, r->status == ACCEL_OK ? REQ_DONE : REQ_FAILED,
	                 __ATOMIC_RELEASE);
	if (r->status != ACCEL_OK && !st->failed) {
		st->failed = 1;
		st->fail_code = r->status;
		snprintf(st->fail_msg, sizeof(st->fail_msg), "%s", r->msg);
	}
	__atomic_store_n(&st->cursor, r->next, __ATOMIC_RELEASE);
}

/* A request that runs after the failure of an earlier one. */
static void req_fail_fast(mpi_state *st, accel_comm_req *r)
{
	char what[160];
	req_describe(r, what, sizeof(what));
	r->status = st->fail_code;
	snprintf(r->msg, sizeof(r->msg), "%s not run: an earlier collective failed (%.*s)",
	         what, (int)(MSG_MAX / 2), st->fail_msg);
}

static void *worker_main(void *arg)
{
	mpi_state *st = arg;
	pthread_mutex_lock(&st->lock);
	for (;;) {
		if (!st->stop && !st->cursor) {
			/* Collectives often come in bursts: watch for the next one
			 * for a moment before sleeping (a wake-up costs microseconds). */
			pthread_mutex_unlock(&st->lock);
			int64_t until = mono_ns() + WAIT_SPIN_NS;
			while (!__atomic_load_n(&st->cursor, __ATOMIC_ACQUIRE) &&
			       !__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE) &&
			       mono_ns() < until)
				sched_yield();
			pthread_mutex_lock(&st->lock);
		}
		while (!st->stop && !st->cursor) {
			st->sleeping = 1;
			pthread_cond_wait(&st->work, &st->lock);
			st->sleeping = 0;
		}
		accel_comm_req *r = st->cursor;
		if (!r || __atomic_load_n(&st->abandon, __ATOMIC_ACQUIRE))
			break;  /* stop requested and the queue is empty, or exiting */
		__atomic_store_n(&r->state, REQ_RUNNING, __ATOMIC_RELAXED);
		int failed = st->failed;
		pthread_mutex_unlock(&st->lock);

		if (failed) {
			req_fail_fast(st, r);
		} else {
			uint32_t spins = 0;
			set_deadline(st, r);
			for (;;) {
				if (__atomic_load_n(&st->abandon, __ATOMIC_ACQUIRE)) {
					char what[160];
					req_describe(r, what, sizeof(what));
					r->status = ACCEL_ERR_STATE;
					snprintf(r->msg, sizeof(r->msg), "%s: abandoned, the process is "
					         "exiting or MPI was finalized", what);
					if (r->issued)
						lost_add(st, r);  /* still active in MPI */
					break;
				}
				if (req_step(st, r, 1))
					break;
				backoff(&spins);
			}
		}

		pthread_mutex_lock(&st->lock);
		req_finished(st, r);
		pthread_cond_broadcast(&st->done);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* Caller mode: drive the queue on this thread.  With `until` set, block
 * (timed) until that request finished; otherwise make what progress is
 * possible without waiting. */
static void caller_progress(mpi_state *st, accel_comm_req *until)
{
	uint32_t spins = 0;
	while (st->cursor) {
		accel_comm_req *r = st->cursor;
		int fin;
		if (st->failed) {
			req_fail_fast(st, r);
			fin = 1;
		} else {
			/* timed from the first step, in test() too: a program that
			 * only polls must also get the timeout */
			set_deadline(st, r);
			fin = req_step(st, r, 1);
		}
		if (!fin) {
			if (!until)
				return;
			backoff(&spins);
			continue;
		}
		req_finished(st, r);
		spins = 0;
		if (r == until)
			return;
	}
}

/* ---- issuing ---------------------------------------------------------------------- */

static int check_count(mpi_state *st, const char *op, uint64_t count)
{
	if (count > (uint64_t)INT32_MAX)
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "%s: %llu elements per rank exceed MPI's int count "
		                       "(%d); split the buffer", op, (unsigned long long)count,
		                       INT32_MAX);
	return ACCEL_OK;
}

static int fail_fast_now(mpi_state *st, const char *op)
{
	/* the store's answer on the timeout, once a wait/test has asked it */
	int with = st->named && st->missing[0];
	return st->host->error(st->h, st->fail_code,
	                       "%s #%llu not run: an earlier collective failed (%.*s)%s%s%s", op,
	                       (unsigned long long)st->seq + 1, (int)(MSG_MAX / 2), st->fail_msg,
	                       with ? " [" : "", with ? st->missing : "", with ? "]" : "");
}

static accel_comm_req *req_new(mpi_state *st, int kind, uint32_t dtype, uint32_t red)
{
	accel_comm_req *r = calloc(1, sizeof(*r));
	if (!r) {
		st->host->error(st->h, ACCEL_ERR_NOMEM, "%s: out of memory for a request",
		                coll_op_name(kind));
		return NULL;
	}
	r->kind = kind;
	r->dtype = dtype;
	r->red = red;
	r->esz = accel_abi_dtype_size(dtype);
	r->type = kind == OP_BARRIER ? MPI_DATATYPE_NULL : accel_mpi_datatype(dtype);
	r->op = MPI_OP_NULL;
	r->mreq = MPI_REQUEST_NULL;
	return r;
}

/* Queue r (it gets the next sequence number) and get it going. */
static int req_submit(mpi_state *st, accel_comm_req *r, accel_comm_req **ret_req)
{
	if (st->use_thread)
		pthread_mutex_lock(&st->lock);
	if (st->failed) {
		int rc = fail_fast_now(st, coll_op_name(r->kind));
		if (st->use_thread)
			pthread_mutex_unlock(&st->lock);
		free(r);
		return rc;
	}
	r->seq = ++st->seq;
	r->state = REQ_QUEUED;
	coll_reqs_append(&st->live, r);
	if (!st->cursor)
		__atomic_store_n(&st->cursor, r, __ATOMIC_RELEASE);
	if (st->use_thread) {
		if (st->sleeping)
			pthread_cond_signal(&st->work);
		pthread_mutex_unlock(&st->lock);
	} else {
		caller_progress(st, NULL);
	}
	*ret_req = r;
	return ACCEL_OK;
}

static int mpi_allreduce(void *state, const accel_view *send, const accel_view *recv, uint32_t red,
                         accel_comm_req **ret_req)
{
	mpi_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_ALLREDUCE, st->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, red);
	int place = coll_place(OP_ALLREDUCE, st->rank, send, recv);
	accel_comm_req *r = req_new(st, OP_ALLREDUCE, send->dtype, red);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->sendp = place == COLL_SAME ? NULL : send->data;
	r->recvp = recv->data;
	r->count = recv->numel;
	r->op = accel_mpi_op(&st->ops, send->dtype, red);
	r->half = accel_mpi_is_half(send->dtype);
	return req_submit(st, r, ret_req);
}

static int mpi_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                              uint32_t red, accel_comm_req **ret_req)
{
	mpi_state *st = state;
	int rc;
	assert(ret_req);
	coll_assert_pair(OP_REDUCE_SCATTER, st->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, red);
	if ((rc = check_count(st, "reduce_scatter", recv->numel)))
		return rc;
	int place = coll_place(OP_REDUCE_SCATTER, st->rank, send, recv);
	accel_comm_req *r = req_new(st, OP_REDUCE_SCATTER, send->dtype, red);
	if (!r)
		return ACCEL_ERR_NOMEM;
	/* In place (either form): MPI_IN_PLACE reads the whole buffer and
	 * leaves the result at its start; for the rank-block form it is then
	 * copied to block `rank`. */
	r->sendp = place == COLL_APART ? send->data : NULL;
	r->recvp = place == COLL_APART ? recv->data : send->data;
	r->result_at = place == COLL_RANK_BLOCK ? recv->data : NULL;
	r->count = recv->numel;
	r->op = accel_mpi_op(&st->ops, send->dtype, red);
	r->half = accel_mpi_is_half(send->dtype);
	return req_submit(st, r, ret_req);
}

static int mpi_allgather(void *state, const accel_view *send, const accel_view *recv,
                         accel_comm_req **ret_req)
{
	mpi_state *st = state;
	int rc;
	assert(ret_req);
	coll_assert_pair(OP_ALLGATHER, st->world, send, recv, ACCEL_DEVICE_CPU);
	if ((rc = check_count(st, "allgather", send->numel)))
		return rc;
	int place = coll_place(OP_ALLGATHER, st->rank, send, recv);
	accel_comm_req *r = req_new(st, OP_ALLGATHER, send->dtype, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->sendp = place == COLL_APART ? send->data : NULL;
	r->own_in_slot = place == COLL_RANK_BLOCK;
	r->recvp = recv->data;
	r->count = send->numel;
	return req_submit(st, r, ret_req);
}

static int mpi_broadcast(void *state, const accel_view *buf, int32_t root,
                         accel_comm_req **ret_req)
{
	mpi_state *st = state;
	assert(ret_req);
	coll_assert_view(buf, ACCEL_DEVICE_CPU);
	assert(root >= 0 && root < st->world);
	accel_comm_req *r = req_new(st, OP_BROADCAST, buf->dtype, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->recvp = buf->data;
	r->count = buf->numel;
	r->root = root;
	return req_submit(st, r, ret_req);
}

static int mpi_barrier(void *state, accel_comm_req **ret_req)
{
	mpi_state *st = state;
	assert(ret_req);
	accel_comm_req *r = req_new(st, OP_BARRIER, ACCEL_DTYPE_U8, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	return req_submit(st, r, ret_req);
}

/* ---- completion ------------------------------------------------------------------------ */

/* After a timeout, a failed request's message names the ranks that never
 * arrived at the collective that timed out, as the rendezvous store tells
 * (coll-missing.h; MPI cannot): the one that timed out gets its message
 * rewritten, the ones that failed fast because of it get the list added.
 * On the training thread, after the request finished (the driver no longer
 * touches it); the store is asked once, which may take up to 2 s.  Without
 * a store (comm.mpi_store=false or not reachable by every rank, and no
 * ACCEL_MASTER_ADDR) messages stay as they are. */
static void name_missing(mpi_state *st, accel_comm_req *r)
{
	char what[160];
	uint64_t seq = st->timeout_seq;
	if (!seq)
		return;
	if (!st->named) {
		st->named = 1;
		int n = coll_missing_ranks_map(st->host, st->h, st->ns, st->rank, st->world,
		                               st->wranks, seq, st->timeout_ms, st->missing,
		                               sizeof(st->missing));
		if (n == 0)
			snprintf(st->missing, sizeof(st->missing),
			         "every rank reached it and timed out there too: MPI itself is "
			         "stuck, or the ranks came too far apart (raise comm.timeout_s)");
		else if (n < 0)
			st->missing[0] = '\0';
	}
	if (!st->missing[0])
		return;
	req_describe(r, what, sizeof(what));
	if (r->timed_out) {
		snprintf(r->msg, sizeof(r->msg),
		         "%s did not complete within %.1f s on %s: %s (asked through "
		         "the rendezvous store)",
		         what, (double)st->timeout_ms / 1000.0, st->who, st->missing);
	} else {
		size_t n = strlen(r->msg);
		snprintf(r->msg + n, sizeof(r->msg) - n, " [at #%llu: %s]", (unsigned long long)seq,
		         st->missing);
	}
}

static int mpi_wait(void *state, accel_comm_req *r)
{
	mpi_state *st = state;
	int status;
	if (st->use_thread)
		pthread_mutex_lock(&st->lock);
	assert(r && coll_reqs_has(&st->live, r));   /* the core waits its own, once */
	if (st->use_thread) {
		/* Small collectives finish within microseconds: watch the state
		 * for a moment before sleeping, saving a futex wake-up.  The
		 * worker enforces the deadline, so this wait ends. */
		if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) < REQ_DONE) {
			pthread_mutex_unlock(&st->lock);
			int64_t until = mono_ns() + WAIT_SPIN_NS;
			while (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) < REQ_DONE &&
			       mono_ns() < until)
				sched_yield();
			pthread_mutex_lock(&st->lock);
		}
		while (r->state < REQ_DONE)
			pthread_cond_wait(&st->done, &st->lock);
	} else if (r->state < REQ_DONE) {
		caller_progress(st, r);
	}
	coll_reqs_unlink(&st->live, r);
	if (st->use_thread)
		pthread_mutex_unlock(&st->lock);
	status = r->status;
	if (status != ACCEL_OK) {
		name_missing(st, r);
		st->host->error(st->h, status, "%s", r->msg);
	}
	free(r);
	return status;
}

static int mpi_test(void *state, accel_comm_req *r, int32_t *ret_done)
{
	mpi_state *st = state;
	int s;
	assert(ret_done);
	if (st->use_thread)
		pthread_mutex_lock(&st->lock);
	assert(r && coll_reqs_has(&st->live, r));
	if (!st->use_thread && r->state < REQ_DONE)
		caller_progress(st, NULL);
	s = r->state;
	if (st->use_thread)
		pthread_mutex_unlock(&st->lock);
	if (s == REQ_FAILED) {  /* finished, with an error; wait() still releases it */
		*ret_done = 1;
		name_missing(st, r);
		return st->host->error(st->h, r->status, "%s", r->msg);
	}
	*ret_done = s == REQ_DONE;
	return ACCEL_OK;
}

/* ---- life cycle -------------------------------------------------------------------------- */

/* Give timed-out MPI requests a last chance to complete (a late peer). */
static int drain_lost(mpi_state *st)
{
	int64_t deadline = mono_deadline_ns(DRAIN_MAX_MS);
	uint32_t spins = 0;
	if (st->lost_untracked) {
		st->host->log(st->h, ACCEL_LOG_WARN,
		              "a timed-out collective on rank %d could not be tracked (out of "
		              "memory); skipping MPI cleanup and MPI_Finalize", st->rank);
		return 0;
	}
	for (uint32_t i = 0; i < st->n_lost; i++) {
		int flag = 0;
		while (MPI_Test(&st->lost[i].mreq, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag &&
		       mono_ns() < deadline)
			backoff(&spins);
		if (!flag) {
			st->host->log(st->h, ACCEL_LOG_WARN,
			              "%s #%llu never completed on rank %d; its communicator is not "
			              "freed%s",
			              coll_op_name(st->lost[i].kind),
			              (unsigned long long)st->lost[i].seq, st->rank,
			              g_mpi_we_initialized
			                  ? " and MPI is not finalized at exit (it could wait for "
			                    "the collective), so mpirun may report that this "
			                    "process exited without finalizing"
			                  : "");
			return 0;
		}
	}
	return 1;
}

static void mpi_fini(void *state)
{
	mpi_state *st = state;
	int fin = 0;
	if (!st)
		return;
	pthread_mutex_lock(&g_mpi_lock);
	for (mpi_state **pp = &g_live; *pp; pp = &(*pp)->next_live)
		if (*pp == st) {
			*pp = st->next_live;
			break;
		}
	MPI_Finalized(&fin);
	pthread_mutex_unlock(&g_mpi_lock);
	if (fin) {
		/* The program finalized MPI before freeing the context: no MPI
		 * call is allowed any more (Open MPI aborts the job on one). */
		__atomic_store_n(&st->abandon, 1, __ATOMIC_RELEASE);
		if (st->comm != MPI_COMM_NULL)  /* a context that was in use */
			st->host->log(st->h, ACCEL_LOG_WARN,
			              "MPI was finalized before the accel context was freed (rank "
			              "%d); the backend's MPI objects are left to MPI. Free contexts "
			              "before MPI_Finalize", st->rank);
	}
	if (st->thread_started) {
		pthread_mutex_lock(&st->lock);
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
		pthread_cond_signal(&st->work);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->thread, NULL);
	} else if (st->cursor && !fin && !__atomic_load_n(&st->abandon, __ATOMIC_ACQUIRE)) {
		/* Requests issued but never waited: finish them so every rank
		 * issued the same MPI calls before the communicator goes. */
		while (st->cursor)
			caller_progress(st, st->cursor);
	}
	while (st->live.head) {
		accel_comm_req *r = st->live.head;
		st->live.head = r->next;
		free(r);
	}
	/* after the exit handler stopped the thread: no more waiting */
	int clean = !fin && !__atomic_load_n(&st->abandon, __ATOMIC_ACQUIRE) && drain_lost(st);
	if (fin) {
		/* nothing to free: MPI released everything at MPI_Finalize */
	} else if (clean) {
		if (st->ops.created)
			accel_mpi_ops_free(&st->ops);
		if (st->comm != MPI_COMM_NULL)
			MPI_Comm_free(&st->comm);
	} else {
		pthread_mutex_lock(&g_mpi_lock);
		g_mpi_stuck = 1;
		pthread_mutex_unlock(&g_mpi_lock);
	}
	if (st->sync_inited) {
		pthread_cond_destroy(&st->done);
		pthread_cond_destroy(&st->work);
		pthread_mutex_destroy(&st->lock);
	}
	free(st->lost);
	free(st->wranks);
	if (clean || fin)
		free(st->stage);
	/* else a timed-out f16/bf16 reduction may still write into it: left */
	free(st);
}

/* Initialize MPI unless the program did; returns the thread level. */
static int mpi_ensure_init(mpi_state *st, int *ret_level)
{
	int ini = 0, fin = 0, level = MPI_THREAD_SINGLE, rc = MPI_SUCCESS;
	pthread_mutex_lock(&g_mpi_lock);
	MPI_Finalized(&fin);
	if (fin) {
		pthread_mutex_unlock(&g_mpi_lock);
		return st->host->error(st->h, ACCEL_ERR_STATE,
		                       "MPI was already finalized in this process; create accel "
		                       "contexts before MPI_Finalize (MPI cannot be initialized "
		                       "again)");
	}
	MPI_Initialized(&ini);
	if (!ini) {
		rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
		if (rc == MPI_SUCCESS) {
			g_mpi_we_initialized = 1;
			if (atexit(finalize_at_exit) != 0)
				st->host->log(st->h, ACCEL_LOG_WARN,
				              "cannot register MPI_Finalize at exit; call "
				              "MPI_Finalize yourself before exiting");
		}
	} else {
		rc = MPI_Query_thread(&level);
	}
	pthread_mutex_unlock(&g_mpi_lock);
	if (rc != MPI_SUCCESS)
		return init_mpi_error(st, ini ? "MPI_Query_thread" : "MPI_Init_thread", rc);
	*ret_level = level;
	return ACCEL_OK;
}

/* The rest of a state once st->comm is its communicator: operators, the
 * progress thread, the list of live instances. */
static int state_setup(mpi_state *st, int level, int32_t progress_thread)
{
	const accel_host_v1 *host = st->host;
	accel_host *h = st->h;
	int rc, mrc;
	MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
	if ((mrc = accel_mpi_ops_create(&st->ops)) != MPI_SUCCESS) {
		rc = init_mpi_error(st, "MPI_Op_create (max/min that keep NaN)", mrc);
		goto fail;
	}

	if (pthread_mutex_init(&st->lock, NULL) || pthread_cond_init(&st->work, NULL) ||
	    pthread_cond_init(&st->done, NULL)) {
		rc = host->error(h, ACCEL_ERR_SYSTEM, "cannot create a mutex/condition variable");
		goto fail;
	}
	st->sync_inited = 1;
	st->use_thread = progress_thread && level == MPI_THREAD_MULTIPLE;
	if (progress_thread && !st->use_thread)
		host->log(h, ACCEL_LOG_INFO,
		          "MPI runs at %s (the program initialized it), not "
		          "MPI_THREAD_MULTIPLE; collectives progress inside test/wait on the "
		          "calling thread", thread_level_name(level));
	if (st->use_thread) {
		int e = pthread_create(&st->thread, NULL, worker_main, st);
		if (e) {
			rc = host->error(h, ACCEL_ERR_SYSTEM, "cannot start the progress thread: %s",
			                 strerror(e));
			goto fail;
		}
		st->thread_started = 1;
	}
	pthread_mutex_lock(&g_mpi_lock);
	st->next_live = g_live;
	g_live = st;
	pthread_mutex_unlock(&g_mpi_lock);
	host->log(h, ACCEL_LOG_DEBUG, "rank %d of %d, %s, %s, timeout %lld ms", st->rank,
	          st->world, thread_level_name(level),
	          st->use_thread ? "progress thread" : "progress in test/wait",
	          (long long)st->timeout_ms);
	return ACCEL_OK;
fail:
	return rc;
}

static int mpi_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                    void **ret_state)
{
	mpi_state *st = NULL;
	int rc, mrc, level = MPI_THREAD_SINGLE;
	int32_t progress_thread = 1;
	int64_t chunk = 1073741824;

	if (!args || !ACCEL_COMM_INIT_HAS(args, job_id))
		return host->error(h, ACCEL_ERR_ABI, "init: accel_comm_init_v1 is %s",
		                   args ? "too small (older core?)" : "NULL");
	st = calloc(1, sizeof(*st));
	if (!st)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory for the backend state");
	st->host = host;
	st->h = h;
	st->comm = MPI_COMM_NULL;
	st->rank = args->rank;
	st->world = args->world_size;
	st->timeout_ms = args->timeout_ms;
	for (int t = 0; t < 2; t++)
		for (int r = 0; r < 2; r++)
			st->ops.op[t][r] = MPI_OP_NULL;

	rc = host->cfg_bool(h, "progress_thread", &progress_thread);
	if (rc != ACCEL_OK && rc != ACCEL_ERR_NOT_FOUND)
		goto fail;
	rc = host->cfg_int(h, "chunk_elements", &chunk);
	if (rc != ACCEL_OK && rc != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if (chunk < 1 || chunk > INT32_MAX) {
		rc = host->error(h, ACCEL_ERR_CONFIG,
		                 "mpi.chunk_elements is %lld; it must be 1 .. %d",
		                 (long long)chunk, INT32_MAX);
		goto fail;
	}
	st->chunk = (uint64_t)chunk;

	if ((rc = mpi_ensure_init(st, &level)))
		goto fail;
	st->thread_level = level;

	/* MPI_Comm_dup is collective and would block for ever on a rank
	 * whose peers never create their context: the nonblocking form,
	 * polled against the timeout. */
	MPI_Request dreq = MPI_REQUEST_NULL;
	/* MPI writes the new communicator when the request completes, which
	 * after a timeout may be long after st is gone: a handle of its own,
	 * left to the request then. */
	MPI_Comm *dup = malloc(sizeof(*dup));
	if (!dup) {
		rc = host->error(h, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((mrc = MPI_Comm_idup(MPI_COMM_WORLD, dup, &dreq)) != MPI_SUCCESS) {
		free(dup);
		rc = init_mpi_error(st, "MPI_Comm_idup(MPI_COMM_WORLD)", mrc);
		goto fail;
	}
	{
		int64_t deadline = mono_deadline_ns(st->timeout_ms);
		uint32_t spins = 0;
		int flag = 0;
		while ((mrc = MPI_Test(&dreq, &flag, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !flag &&
		       !(deadline && mono_ns() > deadline))
			backoff(&spins);
		if (flag) {
			st->comm = *dup;
			free(dup);
			/* the k-th communicator of every rank: k names it in the store */
			pthread_mutex_lock(&g_mpi_lock);
			snprintf(st->ns, sizeof(st->ns), "mpi/%d", g_instances++);
			pthread_mutex_unlock(&g_mpi_lock);
		} else {  /* dup stays with the request */
			if (mrc != MPI_SUCCESS) {
				rc = init_mpi_error(st, "MPI_Comm_idup(MPI_COMM_WORLD)", mrc);
			} else {
				/* the request stays active: MPI cannot cancel it */
				pthread_mutex_lock(&g_mpi_lock);
				g_mpi_stuck = 1;
				pthread_mutex_unlock(&g_mpi_lock);
				rc = host->error(h, ACCEL_ERR_TIMEOUT,
				                 "init on rank %d of %d: the other ranks did not create "
				                 "their accel context (backend mpi) within %.1f s "
				                 "(MPI_Comm_idup of MPI_COMM_WORLD did not complete); "
				                 "look for a rank that failed or is still busy before "
				                 "accel_ctx_new", st->rank, st->world,
				                 (double)st->timeout_ms / 1000.0);
			}
			goto fail;
		}
	}
	/* Errors come back as codes on our communicator, not an abort. */
	MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
	int mrank = -1, msize = 0;
	MPI_Comm_rank(st->comm, &mrank);
	MPI_Comm_size(st->comm, &msize);
	if (mrank != args->rank || msize != args->world_size) {
		rc = host->error(h, ACCEL_ERR_CONFIG,
		                 "MPI says this process is rank %d of %d, but accel was told "
		                 "rank %d of %d; start the program with mpirun/srun (not `accel "
		                 "launch`) to use backend \"mpi\", or choose backend \"shm\"",
		                 mrank, msize, args->rank, args->world_size);
		goto fail;
	}
	snprintf(st->who, sizeof(st->who), "rank %d of %d", st->rank, st->world);
	if ((rc = state_setup(st, level, progress_thread)))
		goto fail;
	*ret_state = st;
	return ACCEL_OK;
fail:
	mpi_fini(st);
	return rc;
}

/* A group: MPI_Comm_split of the parent's communicator (collective over it;
 * the colour NONE gets MPI_UNDEFINED), ordered by the rank the core gave.
 * Every op issued on the parent before is finished first, so each rank
 * calls MPI on the parent in the same order even with a progress thread. */
static int mpi_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	mpi_state *p = state, *st = NULL;
	int rc, mrc;
	if (!args || args->struct_size < offsetof(accel_comm_split_v1, local_size) + sizeof(int32_t))
		return p->host->error(p->h, ACCEL_ERR_ABI, "split: accel_comm_split_v1 is too old");
	if (p->failed)
		return fail_fast_now(p, "split");
	if (p->use_thread) {
		pthread_mutex_lock(&p->lock);
		while (p->cursor)
			pthread_cond_wait(&p->done, &p->lock);
		pthread_mutex_unlock(&p->lock);
	} else {
		while (p->cursor)
			caller_progress(p, p->cursor);
	}
	if (p->failed)
		return fail_fast_now(p, "split");
	int member = args->color != ACCEL_COMM_SPLIT_NONE;
	MPI_Comm sub = MPI_COMM_NULL;
	mrc = MPI_Comm_split(p->comm, member ? args->color : MPI_UNDEFINED,
	                     member ? args->rank : 0, &sub);
	if (mrc != MPI_SUCCESS)
		return init_mpi_error(p, "MPI_Comm_split", mrc);
	if (!member) {
		*ret_state = NULL;
		return ACCEL_OK;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		MPI_Comm_free(&sub);
		return p->host->error(p->h, ACCEL_ERR_NOMEM, "out of memory for the backend state");
	}
	st->host = p->host;
	st->h = p->h;
	st->comm = sub;
	st->rank = args->rank;
	st->world = args->size;
	st->timeout_ms = args->timeout_ms;
	st->chunk = p->chunk;
	for (int t = 0; t < 2; t++)
		for (int r = 0; r < 2; r++)
			st->ops.op[t][r] = MPI_OP_NULL;
	st->wranks = malloc(sizeof(int32_t) * (size_t)args->size);
	if (!st->wranks) {
		rc = p->host->error(p->h, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	memcpy(st->wranks, args->ranks, sizeof(int32_t) * (size_t)args->size);
	/* under the parent's (unique per communicator): unique in the job */
	int nl = snprintf(st->ns, sizeof(st->ns), "%s/g%s", p->ns, args->tag);
	if (nl < 0 || (size_t)nl >= sizeof(st->ns)) {
		rc = p->host->error(p->h, ACCEL_ERR_INVALID_ARG,
		                    "split: group %s is nested too deeply for mpi's store keys",
		                    args->tag);
		goto fail;
	}
	snprintf(st->who, sizeof(st->who), "world rank %d (%d of %d in group %s)",
	         (int)args->ranks[args->rank], st->rank, st->world, args->tag);
	int mrank = -1;
	MPI_Comm_rank(sub, &mrank);
	if (mrank != args->rank) {
		rc = p->host->error(p->h, ACCEL_ERR_INTERNAL,
		                    "split: MPI made this rank %d of group %s, the core %d", mrank,
		                    args->tag, (int)args->rank);
		goto fail;
	}
	if ((rc = state_setup(st, p->thread_level, p->use_thread)))
		goto fail;
	st->thread_level = p->thread_level;
	*ret_state = st;
	return ACCEL_OK;
fail:
	mpi_fini(st);
	return rc;
}

static int32_t mpi_probe(const accel_host_v1 *host, accel_host *h)
{
	static const char *const vars[] = {
		"OMPI_COMM_WORLD_SIZE",  /* Open MPI's mpirun */
		"PMI_SIZE",              /* MPICH/Intel MPI hydra, Slurm PMI-2 */
		"PMIX_RANK",             /* PMIx launchers (srun --mpi=pmix, prrte) */
		"MV2_COMM_WORLD_SIZE",   /* MVAPICH2 */
	};
	(void)host;
	(void)h;
	/* `accel launch` inside an allocation that mpirun or srun started
	 * passes their variables on; its own ACCEL_RANK says it is the
	 * innermost launcher (core/world.c reads the world the same way) */
	if (getenv("ACCEL_RANK"))
		return 0;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			return 1;
	return 0;
}

static const accel_param_schema_v1 mpi_params[] = {
	{sizeof(accel_param_schema_v1), ACCEL_CFG_BOOL, "progress_thread", "true", 0, -1, NULL,
	 "Progress collectives on a background thread so they overlap computation (needs "
	 "MPI_THREAD_MULTIPLE; otherwise they progress inside test/wait)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "chunk_elements", "1073741824", 1,
	 2147483647.0, NULL,
	 "Most elements per MPI call; all-reduce and broadcast of more are split into "
	 "several calls (MPI counts are int)."},
};

static const accel_comm_desc_v1 mpi_desc = {
	.struct_size = sizeof(accel_comm_desc_v1),
	.devices = 1u << ACCEL_DEVICE_CPU,
	.name = "mpi",
	.version = "1.0.0",
	.summary = "MPI collectives for host memory; runs under mpirun or srun, across nodes",
	.requires = 0,
	.config_section = "mpi",
	.params = mpi_params,
	.n_params = sizeof(mpi_params) / sizeof(mpi_params[0]),
	.scope = ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES,
	.preference = ACCEL_COMM_PREF_LAUNCHER,
};

static const accel_comm_v1 mpi_vtable = {
	.struct_size = sizeof(accel_comm_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &mpi_desc,
	.init = mpi_init,
	.fini = mpi_fini,
	.probe = mpi_probe,
	.mem_alloc = NULL,
	.mem_free = NULL,
	.allreduce = mpi_allreduce,
	.reduce_scatter = mpi_reduce_scatter,
	.allgather = mpi_allgather,
	.broadcast = mpi_broadcast,
	.barrier = mpi_barrier,
	.wait = mpi_wait,
	.test = mpi_test,
	.split = mpi_split,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "mpi", error))
		return NULL;
	return &mpi_vtable;
}
