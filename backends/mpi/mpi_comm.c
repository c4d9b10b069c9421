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
 * would hang.
 *
 * This file holds the issuing of collectives and their completion, and
 * the module's descriptor and entry; mpi_progress.c the queue of requests
 * and who drives it, mpi_init.c the life cycle (MPI_Init and MPI_Finalize,
 * init, split, fini), mpi_reduce.c the dtype mapping and reduction
 * operators. */
#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/comm.h"
#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "backends/common/coll-missing.h"
#include "mpi-impl.h"

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

int accel_mpi_fail_fast_now(mpi_state *st, const char *op)
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
		int rc = accel_mpi_fail_fast_now(st, coll_op_name(r->kind));
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
		accel_mpi_progress(st, NULL);
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
	accel_mpi_req_describe(r, what, sizeof(what));
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
		accel_mpi_progress(st, r);
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
		accel_mpi_progress(st, NULL);
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
	.init = accel_mpi_init,
	.fini = accel_mpi_fini,
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
	.split = accel_mpi_split,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "mpi", error))
		return NULL;
	return &mpi_vtable;
}
