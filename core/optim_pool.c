/* SPDX-License-Identifier: MIT */
/* core/optim_pool.c: the optimizer on many threads (host->optim_step_n). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "optim_pool.h"

/* A piece: elements [off, off + numel) of task `task`. */
typedef struct piece {
	uint32_t task;
	uint64_t off, numel;
} piece;

typedef struct job {
	const accel_optim *optim;
	uint64_t t;
	double lr;
	const accel_optim_task *tasks;
	const piece *pieces;
	uint32_t n_pieces;
	uint32_t next;                /* the next piece to take (atomic) */
	pthread_mutex_t err_mu;
	uint32_t err_piece;           /* the lowest failing piece, n_pieces: none */
	int err_code;
	accel_err err;
} job;

struct accel_optim_pool {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	pthread_t *threads;
	uint32_t n_threads, cap_threads;
	uint64_t gen;                 /* bumped for every run */
	int stop;
	job *job;                     /* the current run */
	uint32_t job_workers;         /* workers 0 .. job_workers-1 take part */
	uint32_t busy;                /* of those, the ones not yet finished */
};

typedef struct worker_arg {
	accel_optim_pool *pool;
	uint32_t id;
	uint64_t seen;                /* the run before its first (the thread may
	                                 start after that run was announced) */
} worker_arg;

static void run_pieces(job *j)
{
	for (;;) {
		uint32_t k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (k >= j->n_pieces)
			return;
		const piece *pc = &j->pieces[k];
		const accel_optim_task *q = &j->tasks[pc->task];
		size_t gsz = accel_dtype_size(q->gdtype);
		float *state[ACCEL_OPTIM_MAX_STATE] = {NULL};
		uint32_t ns = accelp_optim_state_count(j->optim);
		for (uint32_t s = 0; s < ns && s < ACCEL_OPTIM_MAX_STATE; s++)
			state[s] = q->state[s] ? q->state[s] + pc->off : NULL;
		accel_err e;
		accelp_err_clear(&e);
		/* an unknown gradient dtype is one piece at offset 0 (gsz 0) and
		 * is refused by step_range with its message */
		int r = accelp_optim_step_range(j->optim, q->grp, j->t, j->lr,
		                               q->param ? q->param + pc->off : NULL,
		                               q->grad ? (const char *)q->grad + pc->off * gsz : NULL,
		                               q->gdtype, ns ? state : NULL, pc->numel, q->grad_scale,
		                               &e);
		if (r) {
			pthread_mutex_lock(&j->err_mu);
			if (k < j->err_piece) {
				j->err_piece = k;
				j->err_code = r;
				j->err = e;
			}
			pthread_mutex_unlock(&j->err_mu);
		}
	}
}

static void *worker(void *arg)
{
	worker_arg wa = *(worker_arg *)arg;
	accel_optim_pool *p = wa.pool;
	free(arg);
	uint64_t seen = wa.seen;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		if (wa.id >= p->job_workers)
			continue;
		job *j = p->job;
		pthread_mutex_unlock(&p->mu);
		run_pieces(j);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int accelp_optim_pool_new(accel_optim_pool **ret_pool)
{
	accel_optim_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return ACCEL_ERR_NOMEM;
	if (pthread_mutex_init(&p->mu, NULL)) {
		free(p);
		return ACCEL_ERR_SYSTEM;
	}
	if (pthread_cond_init(&p->go, NULL)) {
		pthread_mutex_destroy(&p->mu);
		free(p);
		return ACCEL_ERR_SYSTEM;
	}
	if (pthread_cond_init(&p->done, NULL)) {
		pthread_cond_destroy(&p->go);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return ACCEL_ERR_SYSTEM;
	}
	*ret_pool = p;
	return ACCEL_OK;
}

accel_optim_pool *accelp_optim_pool_free(accel_optim_pool *p)
{
	if (!p)
		return NULL;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (uint32_t i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->go);
	pthread_mutex_destroy(&p->mu);
	free(p);
	return NULL;
}

/* Start workers until there are `want`.  Workers block every signal: the
 * program's handlers run on its own threads. */
static int grow(accel_optim_pool *p, uint32_t want, accel_err *err)
{
	if (want <= p->n_threads)
		return ACCEL_OK;
	if (want > p->cap_threads) {
		pthread_t *t = realloc(p->threads, want * sizeof(*t));
		if (!t)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "optim_step_n: out of memory");
		p->threads = t;
		p->cap_threads = want;
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = 0;
	while (p->n_threads < want) {
		worker_arg *wa = malloc(sizeof(*wa));
		if (!wa) {
			rc = ENOMEM;
			break;
		}
		*wa = (worker_arg){p, p->n_threads, p->gen};
		if ((rc = pthread_create(&p->threads[p->n_threads], NULL, worker, wa))) {
			free(wa);
			break;
		}
		p->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return accelp_err_set(err, ACCEL_ERR_SYSTEM, "optim_step_n: cannot start optimizer "
		                     "thread %u of %u: %s; ask for fewer threads (n_threads or "
		                     "OMP_NUM_THREADS)", p->n_threads + 1, want, strerror(rc));
	return ACCEL_OK;
}

int accelp_optim_pool_step(accel_optim_pool *p, const accel_optim *optim, uint64_t t,
                          double lr, const accel_optim_task *tasks, uint32_t n,
                          uint32_t n_threads, accel_err *err)
{
	piece *pieces = NULL;
	uint64_t n_pieces = 0;
	int r;

	if (!p || !optim || (n && !tasks) || n_threads == 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optim_step_n: bad arguments");
	for (uint32_t i = 0; i < n; i++)
		n_pieces += tasks[i].numel && accel_dtype_size(tasks[i].gdtype)
		                ? (tasks[i].numel + ACCEL_OPTIM_POOL_PIECE - 1) / ACCEL_OPTIM_POOL_PIECE
		                : 1;
	if (n_pieces > UINT32_MAX)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optim_step_n: %llu pieces; too "
		                     "many ranges", (unsigned long long)n_pieces);
	if (n_pieces && !(pieces = malloc(n_pieces * sizeof(*pieces))))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "optim_step_n: out of memory");
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t len = tasks[i].numel;
		if (!len || !accel_dtype_size(tasks[i].gdtype)) {
			pieces[k++] = (piece){i, 0, len};
			continue;
		}
		for (uint64_t off = 0; off < len; off += ACCEL_OPTIM_POOL_PIECE)
			pieces[k++] = (piece){i, off, len - off < ACCEL_OPTIM_POOL_PIECE
			                                  ? len - off : ACCEL_OPTIM_POOL_PIECE};
	}
	job j = {.optim = optim, .t = t, .lr = lr, .tasks = tasks, .pieces = pieces,
	         .n_pieces = (uint32_t)n_pieces, .err_piece = (uint32_t)n_pieces};
	if (pthread_mutex_init(&j.err_mu, NULL)) {
		free(pieces);
		return accelp_err_set(err, ACCEL_ERR_SYSTEM, "optim_step_n: pthread_mutex_init failed");
	}
	/* no more workers than pieces to share */
	uint32_t workers = n_threads - 1;
	if (workers > n_pieces)
		workers = n_pieces ? (uint32_t)n_pieces - 1 : 0;
	if ((r = grow(p, workers, err)))
		goto out;
	if (workers) {
		pthread_mutex_lock(&p->mu);
		p->job = &j;
		p->job_workers = workers;
		p->busy = workers;
		p->gen++;
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->mu);
	}
	run_pieces(&j);
	if (workers) {
		pthread_mutex_lock(&p->mu);
		while (p->busy)
			pthread_cond_wait(&p->done, &p->mu);
		p->job = NULL;
		pthread_mutex_unlock(&p->mu);
	}
	if (j.err_code)
		r = accelp_err_set(err, j.err_code, "%s", j.err.msg);
out:
	pthread_mutex_destroy(&j.err_mu);
	free(pieces);
	return r;
}

uint32_t accelp_optim_pool_default_threads(int32_t local_world_size)
{
	const char *omp = getenv("OMP_NUM_THREADS");
	if (omp && *omp) {
		char *end = NULL;
		errno = 0;
		long v = strtol(omp, &end, 10);
		/* "8,4" (nested levels): the first level */
		if (!errno && end != omp && (*end == '\0' || *end == ',') && v > 0)
			return v > 4096 ? 4096 : (uint32_t)v;
	}
	cpu_set_t set;
	long cpus = 1;
	CPU_ZERO(&set);
	if (!sched_getaffinity(0, sizeof(set), &set))
		cpus = CPU_COUNT(&set);
	if (local_world_size > 1)
		cpus /= local_world_size;
	return cpus > 0 ? (uint32_t)cpus : 1;
}
