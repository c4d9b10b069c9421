/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi_init.c: the mpi backend's life cycle.
 *
 * MPI is initialized once per process (unless the program did) and
 * finalized at exit; a state is a private duplicate of MPI_COMM_WORLD (a
 * group's: an MPI_Comm_split of its parent's), made against comm.timeout_s,
 * with its operators and progress thread; fini drains the requests that
 * timed out, and leaves MPI alone when one never completes. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/comm.h"
#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "mpi-impl.h"

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

/* Record an MPI failure of an init-time call through the host. */
static int init_mpi_error(mpi_state *st, const char *what, int rc)
{
	char es[MPI_MAX_ERROR_STRING];
	accel_mpi_errstr(rc, es, sizeof(es));
	return st->host->error(st->h, ACCEL_ERR_COMM, "%s failed on rank %d: %s", what,
	                       st->rank, es);
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
			accel_mpi_backoff(&spins);
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

void accel_mpi_fini(void *state)
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
			accel_mpi_progress(st, st->cursor);
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
		int e = pthread_create(&st->thread, NULL, accel_mpi_progress_main, st);
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

int accel_mpi_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
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
			accel_mpi_backoff(&spins);
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
	accel_mpi_fini(st);
	return rc;
}

/* A group: MPI_Comm_split of the parent's communicator (collective over it;
 * the colour NONE gets MPI_UNDEFINED), ordered by the rank the core gave.
 * Every op issued on the parent before is finished first, so each rank
 * calls MPI on the parent in the same order even with a progress thread. */
int accel_mpi_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	mpi_state *p = state, *st = NULL;
	int rc, mrc;
	if (!args || args->struct_size < offsetof(accel_comm_split_v1, local_size) + sizeof(int32_t))
		return p->host->error(p->h, ACCEL_ERR_ABI, "split: accel_comm_split_v1 is too old");
	if (p->failed)
		return accel_mpi_fail_fast_now(p, "split");
	if (p->use_thread) {
		pthread_mutex_lock(&p->lock);
		while (p->cursor)
			pthread_cond_wait(&p->done, &p->lock);
		pthread_mutex_unlock(&p->lock);
	} else {
		while (p->cursor)
			accel_mpi_progress(p, p->cursor);
	}
	if (p->failed)
		return accel_mpi_fail_fast_now(p, "split");
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
	accel_mpi_fini(st);
	return rc;
}
