/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi_progress.c: the mpi backend's queue of requests.
 *
 * Requests run one at a time in issue order, so every rank issues MPI calls
 * in the same order even when an operation is split into several calls
 * (chunks of mpi.chunk_elements, f16/bf16 widened to f32 through a staging
 * buffer).  Each is a series of nonblocking MPI calls polled with MPI_Test
 * against its deadline.  The progress thread drives the queue under
 * MPI_THREAD_MULTIPLE; otherwise the caller does, inside test() and wait().
 * A request that timed out stays active in MPI (MPI cannot cancel it): it
 * is kept for fini() to drain (mpi_init.c). */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "mpi-impl.h"

/* ---- small helpers ----------------------------------------------------------- */

void accel_mpi_errstr(int rc, char *buf, size_t cap)
{
	char tmp[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, tmp, &len) != MPI_SUCCESS || len <= 0)
		snprintf(tmp, sizeof(tmp), "MPI error %d", rc);
	else
		tmp[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
	snprintf(buf, cap, "%s", tmp);
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

void accel_mpi_req_describe(const accel_comm_req *r, char *buf, size_t cap)
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
	accel_mpi_req_describe(r, what, sizeof(what));
	accel_mpi_errstr(rc, es, sizeof(es));
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
		accel_mpi_req_describe(r, what, sizeof(what));
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
void accel_mpi_backoff(uint32_t *spins)
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
	accel_mpi_req_describe(r, what, sizeof(what));
	r->status = st->fail_code;
	snprintf(r->msg, sizeof(r->msg), "%s not run: an earlier collective failed (%.*s)",
	         what, (int)(MSG_MAX / 2), st->fail_msg);
}

void *accel_mpi_progress_main(void *arg)
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
					accel_mpi_req_describe(r, what, sizeof(what));
					r->status = ACCEL_ERR_STATE;
					snprintf(r->msg, sizeof(r->msg), "%s: abandoned, the process is "
					         "exiting or MPI was finalized", what);
					if (r->issued)
						lost_add(st, r);  /* still active in MPI */
					break;
				}
				if (req_step(st, r, 1))
					break;
				accel_mpi_backoff(&spins);
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
void accel_mpi_progress(mpi_state *st, accel_comm_req *until)
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
			accel_mpi_backoff(&spins);
			continue;
		}
		req_finished(st, r);
		spins = 0;
		if (r == until)
			return;
	}
}
