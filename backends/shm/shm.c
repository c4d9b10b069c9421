/* SPDX-License-Identifier: MIT */
/* backends/shm/shm.c: the shm comm backend's descriptor, vtable, requests
 * and comm thread.
 *
 * Collectives run in issue order.  Large ones are queued for a comm thread,
 * so that the training thread can compute while a gradient bucket is
 * reduced; a caller that waits for a queued op runs it (and the ops before
 * it) itself when the thread has not started it, saving two wake-ups.  Small
 * ops (payload within the one-shot slots) run on the caller when nothing is
 * queued: the caller posts the op and polls up to 20 us for the others; if
 * they are late it returns with the op posted but unfinished ("lazy"), and
 * wait(), test() or the next op finishes it.  The thread and waiting callers
 * take queued ops under one lock (exec_busy), so one executes at a time. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/common/coll.h"
#include "backends/common/store-keys.h"
#include "shm-impl.h"

#define MAX_FREE_REQS 64
/* How long an inline op waits for its peers before returning unfinished. */
#define INLINE_SPIN_NS 20000
/* A rank's staging ring stays within 8 MiB, and all rings together within
 * 512 MiB (many ranks on a big node), whatever chunk_kb says. */
#define STAGE_CAP_BYTES (8u << 20)
#define STAGE_TOTAL_CAP_BYTES (512u << 20)

static const accel_param_schema_v1 shm_params[] = {
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "spin_us", "1000", 0, 1000000, NULL,
	 "Microseconds a caller waiting for a collective busy-polls before it sleeps on a futex "
	 "(the comm thread, which shares the CPU with computation, polls at most 20; with more "
	 "ranks than CPUs at most 2)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "yield_us", "1000", 0, 1000000, NULL,
	 "With more ranks than CPUs: microseconds a waiting rank polls with sched_yield(), "
	 "handing its CPU to the rank it waits for, before it sleeps."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "small_kb", "64", 1, 65536, NULL,
	 "Largest per-rank payload in KiB sent with the one-shot algorithm (each rank reads every "
	 "rank's copy); larger collectives are pipelined."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "chunk_kb", "64", 4, 65536, NULL,
	 "Bytes in KiB each rank contributes per pipeline round (capped so the staging ring stays "
	 "within 8 MiB per rank)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "depth", "4", 3, 64, NULL,
	 "Staging buffers in the pipeline ring: how many rounds ranks may drift apart."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "stream_kb", "32768", 0, INT64_C(1) << 40, NULL,
	 "Size in KiB of a pipelined all-gather's result from which it is written into user "
	 "buffers with streaming (non-temporal) stores, which skip reading each destination "
	 "line first and leave the result out of the caches (0: never)."},
};

static const accel_comm_desc_v1 shm_desc = {
	.struct_size = sizeof(accel_comm_desc_v1),
	.devices = 1u << ACCEL_DEVICE_CPU,
	.name = "shm",
	.version = "1.0.0",
	.summary = "shared-memory collectives between the processes of one node",
	.requires = 0,
	.config_section = "shm",
	.params = shm_params,
	.n_params = sizeof(shm_params) / sizeof(shm_params[0]),
	.scope = ACCEL_COMM_SCOPE_NODE,
	.preference = ACCEL_COMM_PREF_NODE,
};

/* ---- requests ---- */

static struct accel_comm_req *req_get(shm_comm *c)
{
	struct accel_comm_req *r = c->free_reqs;
	if (r) {
		c->free_reqs = r->next;
		c->n_free_reqs--;
		memset(r, 0, sizeof(*r));
	} else {
		r = calloc(1, sizeof(*r));
		if (!r)
			return NULL;
	}
	r->all_next = c->live;
	if (c->live)
		c->live->all_prev = r;
	c->live = r;
	return r;
}

static void req_put(shm_comm *c, struct accel_comm_req *r)
{
	if (r->all_prev)
		r->all_prev->all_next = r->all_next;
	else
		c->live = r->all_next;
	if (r->all_next)
		r->all_next->all_prev = r->all_prev;
	if (c->n_free_reqs < MAX_FREE_REQS) {
		r->next = c->free_reqs;
		c->free_reqs = r;
		c->n_free_reqs++;
	} else {
		free(r);
	}
}

/* Record the outcome (executor side: caller inline, or the thread). */
static void complete(shm_comm *c, struct accel_comm_req *r, int st)
{
	r->status = st;
	if (st) {
		int expect = 0;
		if (atomic_compare_exchange_strong(&c->fail_claim, &expect, 1)) {
			shm_fmt(c->fail_msg, sizeof(c->fail_msg), "%s", r->msg);
			atomic_store_explicit(&c->failed, st, memory_order_release);
		}
		/* Tell the other ranks, unless this rank is just going away (they
		 * see it leave). */
		if (!atomic_load(&c->closing))
			shm_abort(c, st, r->msg);
	}
	atomic_store_explicit(&r->state, st ? REQ_FAILED : REQ_DONE, memory_order_release);
}

/* ---- running queued ops (comm thread, or a caller that waits) ---- */

static int run_one(shm_comm *c, struct accel_comm_req *r, int on_thread)
{
	char what[160];
	if (atomic_load(&c->closing)) {
		shm_op_describe(c, &r->op, what, sizeof(what));
		shm_fmt(r->msg, sizeof(r->msg), "%s: abandoned: the communicator was closed", what);
		return ACCEL_ERR_COMM;
	}
	int failed = atomic_load_explicit(&c->failed, memory_order_acquire);
	if (failed) {
		shm_op_describe(c, &r->op, what, sizeof(what));
		shm_fmt(r->msg, sizeof(r->msg), "%s: not run: the communicator failed earlier: %s", what,
		        c->fail_msg);
		return failed;
	}
	return shm_coll_run(c, &r->op, on_thread, r->msg, sizeof(r->msg));
}

/* With mu held and the queue's head runnable: take it, run it without the
 * lock, record the outcome.  Returns with mu held. */
static void run_head_locked(shm_comm *c, int by_thread)
{
	struct accel_comm_req *r = coll_reqs_pop(&c->q);
	c->exec_busy = 1;
	if (by_thread)
		c->n_by_thread++;
	else
		c->n_by_caller++;
	pthread_mutex_unlock(&c->mu);
	complete(c, r, run_one(c, r, by_thread));
	pthread_mutex_lock(&c->mu);
	c->exec_busy = 0;
	atomic_fetch_sub_explicit(&c->queued, 1, memory_order_release);
	pthread_cond_broadcast(&c->cv_done);
	pthread_cond_signal(&c->cv_work);
}

static void *comm_thread(void *arg)
{
	shm_comm *c = arg;
	sigset_t all;

	/* Signals are the application's business; keep them on its threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	/* Woken by an enqueue, the thread must not preempt the caller that
	 * enqueued: if that caller is about to wait, it runs the op itself and
	 * saves two wake-ups.  SCHED_BATCH tasks do not preempt on wake-up. */
	struct sched_param sp = {.sched_priority = 0};
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while ((!c->q.head || c->exec_busy) && !c->stop)
			pthread_cond_wait(&c->cv_work, &c->mu);
		if (c->q.head && !c->exec_busy)
			run_head_locked(c, 1);
		else if (c->stop)
			break;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void enqueue(shm_comm *c, struct accel_comm_req *r)
{
	pthread_mutex_lock(&c->mu);
	atomic_fetch_add_explicit(&c->queued, 1, memory_order_relaxed);
	coll_reqs_append(&c->q, r);
	pthread_cond_signal(&c->cv_work);
	pthread_mutex_unlock(&c->mu);
}

/* Is a rank that has not posted op `op` dead?  At most every 10 ms: test()
 * may be polled in a tight loop. */
static int lazy_peer_dead(shm_comm *c, const shm_op *op, uint64_t now)
{
	if (now - c->lazy_probe_ns < 10000000ull)
		return 0;
	c->lazy_probe_ns = now;
	char why[160];
	for (int32_t q = 0; q < c->world; q++)
		if (q != c->rank &&
		    atomic_load_explicit(&c->ranks[q].seq, memory_order_acquire) < op->seq &&
		    shm_peer_dead(c, q, why, sizeof(why)))
			return 1;
	return 0;
}

/* The lazily finished inline op: finish it now if every rank has posted,
 * a rank it waits for is dead, or its time is up (or always, blocking,
 * when `block`); its deadline counts from when it was issued, since it was
 * posted then.  Only called while the queue is empty, so nothing else
 * executes. */
static void lazy_finish(shm_comm *c, int block)
{
	struct accel_comm_req *r = c->lazy;
	if (!r)
		return;
	uint64_t now = shm_now_ns(), deadline = r->op.issued_ns + (uint64_t)c->timeout_ms * 1000000ull;
	if (!block && !shm_coll_arrived(c, &r->op) &&
	    !atomic_load_explicit(&c->hdr->abort_code, memory_order_relaxed) && now < deadline &&
	    !lazy_peer_dead(c, &r->op, now))
		return;
	c->lazy = NULL;
	r->op.deadline_ns = deadline;
	complete(c, r, run_one(c, r, 0));
}

/* Block until `r` (or, r NULL, everything) is done, running queued ops on
 * this thread when the comm thread is not already at it: a caller that
 * waits anyway saves the hand-off to the thread and back. */
static void wait_for(shm_comm *c, struct accel_comm_req *r)
{
	if (c->lazy && (!r || r == c->lazy))
		lazy_finish(c, 1);
	pthread_mutex_lock(&c->mu);
	for (;;) {
		int done = r ? atomic_load_explicit(&r->state, memory_order_acquire) != REQ_QUEUED
		             : atomic_load(&c->queued) == 0;
		if (done)
			break;
		if (c->q.head && !c->exec_busy)
			run_head_locked(c, 0);
		else
			pthread_cond_wait(&c->cv_done, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
}

void shm_drain(shm_comm *c)
{
	if (c->lazy || atomic_load(&c->queued))
		wait_for(c, NULL);
}

/* ---- issuing ---- */

static int issue(shm_comm *c, shm_op *op, accel_comm_req **ret_req)
{
	char what[160];
	assert(ret_req);
	int failed = atomic_load_explicit(&c->failed, memory_order_acquire);
	if (failed) {
		op->seq = c->next_seq + 1;
		shm_op_describe(c, op, what, sizeof(what));
		return c->host->error(c->h, failed, "%s refused: the communicator failed earlier: %s", what,
		                      c->fail_msg);
	}
	struct accel_comm_req *r = req_get(c);
	if (!r)
		return c->host->error(c->h, ACCEL_ERR_NOMEM, "out of memory");
	r->op = *op;
	r->op.seq = ++c->next_seq;
	r->op.posted = 0;
	r->op.issued_ns = shm_now_ns();
	r->op.deadline_ns = 0;
	atomic_store_explicit(&r->state, REQ_QUEUED, memory_order_relaxed);
	*ret_req = r;

	/* A lazily finished op goes first: now if its peers are there, else on
	 * the thread ahead of this one. */
	if (c->lazy) {
		lazy_finish(c, 0);
		if (c->lazy) {
			c->n_lazy_queued++;
			/* posted at issue: its time counts from then */
			c->lazy->op.deadline_ns =
				c->lazy->op.issued_ns + (uint64_t)c->timeout_ms * 1000000ull;
			enqueue(c, c->lazy);
			c->lazy = NULL;
		}
	}
	if (atomic_load_explicit(&c->queued, memory_order_acquire) != 0 ||
	    !(c->world == 1 || shm_coll_is_small(c, &r->op))) {
		enqueue(c, r);
		return ACCEL_OK;
	}
	/* Inline: the queue is empty, so nothing runs on the thread. */
	if (c->world > 1) {
		int st = shm_check_abort(c, &r->op, r->msg, sizeof(r->msg));
		if (st) {
			complete(c, r, st);
			return ACCEL_OK;
		}
		shm_coll_post(c, &r->op);
		uint64_t end = 0;
		for (unsigned i = 0; !shm_coll_arrived(c, &r->op); i++) {
			if ((i & 63) == 63) {
				uint64_t now = shm_now_ns();
				if (!end) {
					end = now + (uint64_t)(c->spin_ns < INLINE_SPIN_NS ? c->spin_ns
					                                                   : INLINE_SPIN_NS);
				} else if (now >= end || atomic_load_explicit(&c->hdr->abort_code,
				                                               memory_order_relaxed)) {
					/* posted; wait(), test() or the next op finishes it */
					c->lazy = r;
					c->n_lazy++;
					return ACCEL_OK;
				}
			}
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#endif
		}
	}
	c->n_inline++;
	complete(c, r, run_one(c, r, 0));
	return ACCEL_OK;
}

static int shm_allreduce(void *state, const accel_view *send, const accel_view *recv, uint32_t redop,
                         accel_comm_req **ret_req)
{
	shm_comm *c = state;
	coll_assert_pair(OP_ALLREDUCE, c->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, redop);
	shm_op op = {.kind = SHM_OP_ALLREDUCE, .dtype = send->dtype, .redop = redop,
	             .count = send->numel, .send = *send, .recv = *recv};
	return issue(c, &op, ret_req);
}

static int shm_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                              uint32_t redop, accel_comm_req **ret_req)
{
	shm_comm *c = state;
	coll_assert_pair(OP_REDUCE_SCATTER, c->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, redop);
	shm_op op = {.kind = SHM_OP_REDUCE_SCATTER, .dtype = send->dtype, .redop = redop,
	             .count = recv->numel, .send = *send, .recv = *recv};
	return issue(c, &op, ret_req);
}

static int shm_allgather(void *state, const accel_view *send, const accel_view *recv,
                         accel_comm_req **ret_req)
{
	shm_comm *c = state;
	coll_assert_pair(OP_ALLGATHER, c->world, send, recv, ACCEL_DEVICE_CPU);
	shm_op op = {.kind = SHM_OP_ALLGATHER, .dtype = send->dtype, .count = send->numel,
	             .send = *send, .recv = *recv};
	return issue(c, &op, ret_req);
}

static int shm_broadcast(void *state, const accel_view *buf, int32_t root, accel_comm_req **ret_req)
{
	shm_comm *c = state;
	coll_assert_view(buf, ACCEL_DEVICE_CPU);
	assert(root >= 0 && root < c->world);
	shm_op op = {.kind = SHM_OP_BROADCAST, .dtype = buf->dtype, .root = root, .count = buf->numel,
	             .send = *buf, .recv = *buf};
	return issue(c, &op, ret_req);
}

static int shm_barrier(void *state, accel_comm_req **ret_req)
{
	shm_op op = {.kind = SHM_OP_BARRIER, .dtype = ACCEL_DTYPE_U8};
	return issue(state, &op, ret_req);
}

static int shm_req_wait(void *state, accel_comm_req *r)
{
	shm_comm *c = state;
	assert(r);   /* the core waits its own, once */
	if (atomic_load_explicit(&r->state, memory_order_acquire) == REQ_QUEUED)
		wait_for(c, r);
	int st = r->status;
	if (st)
		c->host->error(c->h, st, "%s", r->msg);
	req_put(c, r);
	return st;
}

static int shm_req_test(void *state, accel_comm_req *r, int32_t *ret_done)
{
	shm_comm *c = state;
	assert(r && ret_done);
	if (r == c->lazy)
		lazy_finish(c, 0);
	*ret_done = atomic_load_explicit(&r->state, memory_order_acquire) != REQ_QUEUED;
	return ACCEL_OK;
}

/* ---- init / fini ---- */

static int64_t cfg_int(const accel_host_v1 *host, accel_host *h, const char *key, int64_t dflt)
{
	int64_t v;
	if (host->cfg_int && host->cfg_int(h, key, &v) == ACCEL_OK)
		return v;
	return dflt;
}

static int online_cpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return CPU_COUNT(&set);
	return 1;
}

static void shm_fini(void *state);

/* A communicator of `world` ranks (the job's, or a group's): tunables from
 * the config, the control segment joined through the store under c->ns. */
static int comm_open(const accel_host_v1 *host, accel_host *h, int32_t rank, int32_t world,
                     int64_t timeout_ms, const char *job_id, const shm_comm *parent,
                     const char *group_tag, const int32_t *wranks, shm_comm **ret)
{
	shm_comm *c = NULL;
	int st;
	c = calloc(1, sizeof(*c));
	if (!c)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	c->host = host;
	c->h = h;
	c->rank = rank;
	c->world = world;
	c->loadavg_fd = -1;
	if (group_tag) {
		/* under the parent communicator's keys, which its instance number
		 * made unique in the job (a later context may split the same way) */
		shm_fmt(c->ns, sizeof(c->ns), "%s/%lld/g%s", parent->ns, (long long)parent->inst,
		        group_tag);
		shm_fmt(c->gname, sizeof(c->gname), "-g%s", group_tag);
		c->wranks = malloc(sizeof(int32_t) * (size_t)world);
		if (!c->wranks) {
			free(c);
			return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
		}
		memcpy(c->wranks, wranks, sizeof(int32_t) * (size_t)world);
	} else {
		shm_fmt(c->ns, sizeof(c->ns), "%s", ACCEL_STORE_NS_SHM);
	}
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 300000;
	/* deadlines are now + timeout in ns (uint64): 1e12 ms, about 31 years,
	 * is in effect no limit and cannot wrap (the core caps it there too) */
	if (c->timeout_ms > INT64_C(1000000000000))
		c->timeout_ms = INT64_C(1000000000000);
	c->spin_ns = cfg_int(host, h, "spin_us", 1000) * 1000;
	c->yield_ns = 0;
	c->small_bytes = (uint64_t)cfg_int(host, h, "small_kb", 64) * 1024;
	c->depth = (uint32_t)cfg_int(host, h, "depth", 4);
	c->stream_bytes = (uint64_t)cfg_int(host, h, "stream_kb", 32768) * 1024;
	if (c->depth < 3)
		c->depth = 3;   /* the deferred all-gather needs three buffers in flight */
	uint64_t chunk = (uint64_t)cfg_int(host, h, "chunk_kb", 64) * 1024;
	uint64_t ring = STAGE_TOTAL_CAP_BYTES / (uint64_t)c->world;
	if (ring > STAGE_CAP_BYTES)
		ring = STAGE_CAP_BYTES;
	uint64_t cap = ring / ((uint64_t)c->depth * (uint64_t)c->world);
	if (chunk > cap)
		chunk = cap;
	chunk = chunk / SHM_PAGE * SHM_PAGE;
	c->chunk_bytes = chunk < SHM_PAGE ? SHM_PAGE : chunk;
	c->small_bytes = (c->small_bytes + SHM_LINE - 1) / SHM_LINE * SHM_LINE;
	c->stage_rank_bytes = (uint64_t)c->depth * (uint64_t)c->world * c->chunk_bytes;
	/* two rounds' worth of bytes at 1 GB/s (1 ns per byte), at least 100 us */
	c->stall_ns = 2 * (uint64_t)c->world * c->chunk_bytes;
	if (c->stall_ns < 100000)
		c->stall_ns = 100000;
	c->ncpus = online_cpus();
	c->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	if (c->world > c->ncpus) {
		/* Spinning would steal the CPU of the rank we wait for. */
		c->oversubscribed = 1;
		if (c->spin_ns > 2000)
			c->spin_ns = 2000;
		c->yield_ns = cfg_int(host, h, "yield_us", 1000) * 1000;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv_work, NULL);
	pthread_cond_init(&c->cv_done, NULL);
	c->in_ptrs = calloc((size_t)c->world, sizeof(*c->in_ptrs));
	c->out_ptrs = calloc((size_t)c->world, sizeof(*c->out_ptrs));
	c->zc_soff = calloc((size_t)c->world, sizeof(*c->zc_soff));
	c->zc_roff = calloc((size_t)c->world, sizeof(*c->zc_roff));
	c->reuse = calloc(c->depth, sizeof(*c->reuse));
	if (!c->in_ptrs || !c->out_ptrs || !c->zc_soff || !c->zc_roff || !c->reuse) {
		st = host->error(h, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((st = shm_seg_open(c, job_id)))
		goto fail;
	if ((st = pthread_create(&c->thread, NULL, comm_thread, c)) != 0) {
		st = host->error(h, ACCEL_ERR_SYSTEM, "cannot start the comm thread: %s", strerror(st));
		goto fail;
	}
	c->thread_started = 1;
	*ret = c;
	return ACCEL_OK;

fail:
	shm_fini(c);
	return st;
}

static int shm_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                    void **ret_state)
{
	if (!args || !ACCEL_COMM_INIT_HAS(args, job_id))
		return host->error(h, ACCEL_ERR_ABI, "init: accel_comm_init_v1 is too old");
	if (args->world_size < 1 || args->rank < 0 || args->rank >= args->world_size)
		return host->error(h, ACCEL_ERR_INVALID_ARG, "init: rank %d is not in a world of %d",
		                   (int)args->rank, (int)args->world_size);
	if (args->num_nodes > 1 || (args->local_world_size > 0 && args->local_world_size != args->world_size))
		return host->error(h, ACCEL_ERR_UNSUPPORTED,
		                   "shm connects the processes of one node, but this job has %d nodes "
		                   "(%d of %d ranks here); use backend \"mpi\"",
		                   (int)args->num_nodes, (int)args->local_world_size,
		                   (int)args->world_size);
	shm_comm *c = NULL;
	int st = comm_open(host, h, args->rank, args->world_size, args->timeout_ms, args->job_id,
	                   NULL, NULL, NULL, &c);
	if (st)
		return st;
	*ret_state = c;
	return ACCEL_OK;
}

/* A group: a communicator of its own (control segment, comm thread) for the
 * members, bootstrapped through the store under the group's tag; the
 * parent's segment is not touched, so no op of the parent is disturbed. */
static int shm_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	shm_comm *p = state;
	if (!args || args->struct_size < offsetof(accel_comm_split_v1, local_size) + sizeof(int32_t))
		return p->host->error(p->h, ACCEL_ERR_ABI, "split: accel_comm_split_v1 is too old");
	if (args->color == ACCEL_COMM_SPLIT_NONE) {
		*ret_state = NULL;
		return ACCEL_OK;
	}
	if (args->size < 1 || args->rank < 0 || args->rank >= args->size || !args->ranks ||
	    !args->tag)
		return p->host->error(p->h, ACCEL_ERR_INVALID_ARG,
		                      "split: rank %d is not in a group of %d", (int)args->rank,
		                      (int)args->size);
	shm_comm *c = NULL;
	int st = comm_open(p->host, p->h, args->rank, args->size, args->timeout_ms, args->job_id,
	                   p, args->tag, args->ranks, &c);
	if (st)
		return st;
	*ret_state = c;
	return ACCEL_OK;
}

static void shm_fini(void *state)
{
	shm_comm *c = state;
	if (!c)
		return;
	atomic_store(&c->closing, 1);
	if (c->lazy) {
		struct accel_comm_req *r = c->lazy;
		c->lazy = NULL;
		complete(c, r, run_one(c, r, 0));   /* closing: abandoned */
	}
	if (c->thread_started) {
		pthread_mutex_lock(&c->mu);
		c->stop = 1;
		pthread_cond_broadcast(&c->cv_work);
		pthread_mutex_unlock(&c->mu);
		if (c->hdr)
			shm_wake_rank(c, c->rank);
		pthread_join(c->thread, NULL);
	}
	if (c->hdr)
		c->host->log(c->h, ACCEL_LOG_DEBUG,
		             "%llu ops: %llu finished inline, %llu later by wait/test (%llu of them "
		             "queued), %llu run from the queue by a waiting caller, %llu by the comm "
		             "thread; moved off a peer's CPU %llu times; %llu large ops on busy CPUs "
		             "(no polling)",
		             (unsigned long long)c->next_seq, (unsigned long long)c->n_inline,
		             (unsigned long long)c->n_lazy, (unsigned long long)c->n_lazy_queued,
		             (unsigned long long)c->n_by_caller, (unsigned long long)c->n_by_thread,
		             (unsigned long long)c->n_moves, (unsigned long long)c->n_busy);
	shm_seg_leave(c);
	while (c->live) {
		struct accel_comm_req *r = c->live;
		c->live = r->all_next;
		free(r);
	}
	while (c->free_reqs) {
		struct accel_comm_req *r = c->free_reqs;
		c->free_reqs = r->next;
		free(r);
	}
	shm_mem_close_all(c);
	shm_seg_close(c);
	if (c->loadavg_fd >= 0)
		close(c->loadavg_fd);
	free(c->in_ptrs);
	free(c->out_ptrs);
	free(c->zc_soff);
	free(c->zc_roff);
	free(c->reuse);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv_work);
	pthread_cond_destroy(&c->cv_done);
	free(c->wranks);
	free(c);
}

static int32_t shm_probe(const accel_host_v1 *host, accel_host *h)
{
	accel_world_v1 w;
	memset(&w, 0, sizeof(w));
	w.struct_size = sizeof(w);
	if (host->world && host->world(h, &w) == ACCEL_OK && w.num_nodes > 1)
		return 0;
	return 1;
}

static const accel_comm_v1 shm_vtable = {
	.struct_size = sizeof(accel_comm_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &shm_desc,
	.init = shm_init,
	.fini = shm_fini,
	.probe = shm_probe,
	.mem_alloc = shm_mem_alloc,
	.mem_free = shm_mem_free,
	.allreduce = shm_allreduce,
	.reduce_scatter = shm_reduce_scatter,
	.allgather = shm_allgather,
	.broadcast = shm_broadcast,
	.barrier = shm_barrier,
	.wait = shm_req_wait,
	.test = shm_req_test,
	.split = shm_split,
	.cleanup = shm_seg_cleanup,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "shm", store_add))   /* the rendezvous store */
		return NULL;
	return &shm_vtable;
}
