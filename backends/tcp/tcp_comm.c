/* SPDX-License-Identifier: MIT */
/* backends/tcp/tcp_comm.c: the "tcp" comm backend (abi/accel/comm.h):
 * collectives on host memory over TCP, between processes on any number of
 * nodes, bootstrapped through the rendezvous store (tcp_boot.c).  It is
 * what backend "auto" uses for host buffers when `accel launch --nnodes`
 * starts a job on several nodes without an MPI launcher.
 *
 * Transport: one connection per pair of ranks (a full mesh).  Every op runs
 * on the communicator's comm thread, in issue order, as a series of
 * exchanges: each rank posts what it sends to and receives from every peer,
 * and one poll() loop moves all of it with nonblocking sockets, so no
 * ordering of sends and receives can deadlock and the loop can watch the
 * deadline and the peers' connections.
 *
 * This file holds the comm thread, issuing, completion and the life cycle
 * (init, split, fini); tcp_ops.c the ops' header exchange and algorithms,
 * tcp_exchange.c the exchange loop and the messages of the ops that fail
 * in it, tcp_boot.c the mesh's set-up. */
#include <assert.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "backends/common/sock.h"
#include "tcp-impl.h"

/* ---- the comm thread ------------------------------------------------------------------------ */

/* Run the request at the cursor, taken by this thread (worker or a caller
 * in wait()) under st->lock; returns with the lock held again, r finished
 * and the cursor moved on. */
static void run_cursor(tcp_state *st, accel_comm_req *r)
{
	int failed = st->failed;
	r->state = REQ_RUNNING;
	pthread_mutex_unlock(&st->lock);
	int rc;
	if (failed) {
		char what[192];
		tcp_req_describe(r, what, sizeof(what));
		snprintf(r->msg, sizeof(r->msg), "%s not run: an earlier collective failed (%.*s)",
		         what, TCP_MSG_MAX / 2, st->fail_msg);
		rc = r->status = st->fail_code;
	} else {
		rc = tcp_ops_run(st, r);
	}
	pthread_mutex_lock(&st->lock);
	if (rc != ACCEL_OK) {
		r->status = rc;
		if (!st->failed) {
			st->failed = 1;
			st->fail_code = rc;
			snprintf(st->fail_msg, sizeof(st->fail_msg), "%s", r->msg);
		}
	}
	__atomic_store_n(&r->state, rc == ACCEL_OK ? REQ_DONE : REQ_FAILED, __ATOMIC_RELEASE);
	st->cursor = r->next;
	pthread_cond_broadcast(&st->done);
	if (st->cursor)
		pthread_cond_signal(&st->work);
}

/* Whether the request at the cursor waits for a thread to run it. */
static int cursor_ready(const tcp_state *st)
{
	return st->cursor && st->cursor->state == REQ_QUEUED;
}

static void *worker_main(void *arg)
{
	tcp_state *st = arg;
	pthread_mutex_lock(&st->lock);
	for (;;) {
		while (!st->stop && !cursor_ready(st))
			pthread_cond_wait(&st->work, &st->lock);
		if (st->stop)
			break;
		run_cursor(st, st->cursor);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* ---- issuing -------------------------------------------------------------------------------- */

static accel_comm_req *req_new(tcp_state *st, int kind, uint32_t dtype, uint32_t red)
{
	accel_comm_req *r = calloc(1, sizeof(*r));
	if (!r) {
		st->host->error(st->h, ACCEL_ERR_NOMEM, "%s: out of memory for a request",
		                coll_op_name(kind));
		return NULL;
	}
	r->kind = kind;
	r->group = st->group;
	r->dtype = dtype;
	r->red = red;
	r->esz = accel_abi_dtype_size(dtype);
	return r;
}

static int req_submit(tcp_state *st, accel_comm_req *r, accel_comm_req **ret_req)
{
	pthread_mutex_lock(&st->lock);
	if (st->failed) {
		int rc = st->host->error(st->h, st->fail_code,
		                         "%s #%llu not run: an earlier collective failed (%.*s)",
		                         coll_op_name(r->kind), (unsigned long long)st->seq + 1,
		                         TCP_MSG_MAX / 2, st->fail_msg);
		pthread_mutex_unlock(&st->lock);
		free(r);
		return rc;
	}
	r->seq = ++st->seq;
	r->state = REQ_QUEUED;
	coll_reqs_append(&st->live, r);
	if (!st->cursor)
		st->cursor = r;
	pthread_cond_signal(&st->work);
	pthread_mutex_unlock(&st->lock);
	*ret_req = r;
	return ACCEL_OK;
}

static int tcp_allreduce(void *state, const accel_view *send, const accel_view *recv,
                         uint32_t red, accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_ALLREDUCE, st->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, red);
	accel_comm_req *r = req_new(st, OP_ALLREDUCE, send->dtype, red);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->src = send->data;
	r->dst = recv->data;
	r->count = recv->numel;
	return req_submit(st, r, ret_req);
}

static int tcp_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                              uint32_t red, accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_REDUCE_SCATTER, st->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, red);
	accel_comm_req *r = req_new(st, OP_REDUCE_SCATTER, send->dtype, red);
	if (!r)
		return ACCEL_ERR_NOMEM;
	/* in place (recv == send): the result goes to the buffer's start */
	r->src = send->data;
	r->dst = recv->data;
	r->count = recv->numel;
	return req_submit(st, r, ret_req);
}

static int tcp_allgather(void *state, const accel_view *send, const accel_view *recv,
                         accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_ALLGATHER, st->world, send, recv, ACCEL_DEVICE_CPU);
	accel_comm_req *r = req_new(st, OP_ALLGATHER, send->dtype, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	/* in place with this rank's block at the buffer's start (send ==
	 * recv): run_allgather copies it to block `rank` first, which does
	 * not overlap it on rank > 0 */
	r->src = send->data;
	r->dst = recv->data;
	r->count = send->numel;
	return req_submit(st, r, ret_req);
}

static int tcp_broadcast(void *state, const accel_view *buf, int32_t root,
                         accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_view(buf, ACCEL_DEVICE_CPU);
	assert(root >= 0 && root < st->world);
	accel_comm_req *r = req_new(st, OP_BROADCAST, buf->dtype, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->dst = buf->data;
	r->src = buf->data;
	r->count = buf->numel;
	r->root = root;
	return req_submit(st, r, ret_req);
}

static int tcp_barrier(void *state, accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	accel_comm_req *r = req_new(st, OP_BARRIER, ACCEL_DTYPE_U8, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	return req_submit(st, r, ret_req);
}

/* ---- completion --------------------------------------------------------------------------- */

static int tcp_wait(void *state, accel_comm_req *r)
{
	tcp_state *st = state;
	pthread_mutex_lock(&st->lock);
	assert(r && coll_reqs_has(&st->live, r));   /* the core waits its own, once */
	/* A blocking collective does not need the comm thread: while the next
	 * op waits for a thread, the caller runs it (no hand-off to a thread and
	 * back, which would dominate small ops).  Whoever runs an op enforces
	 * its deadline, so this ends. */
	while (r->state < REQ_DONE) {
		if (cursor_ready(st))
			run_cursor(st, st->cursor);
		else
			pthread_cond_wait(&st->done, &st->lock);
	}
	coll_reqs_unlink(&st->live, r);
	pthread_mutex_unlock(&st->lock);
	int status = r->status;
	if (status != ACCEL_OK)
		st->host->error(st->h, status, "%s", r->msg);
	free(r);
	return status;
}

static int tcp_test(void *state, accel_comm_req *r, int32_t *ret_done)
{
	tcp_state *st = state;
	assert(ret_done);
	pthread_mutex_lock(&st->lock);
	assert(r && coll_reqs_has(&st->live, r));
	int s = r->state;
	pthread_mutex_unlock(&st->lock);
	if (s == REQ_FAILED) {  /* finished, with an error; wait() still releases it */
		*ret_done = 1;
		return st->host->error(st->h, r->status, "%s", r->msg);
	}
	*ret_done = s == REQ_DONE;
	return ACCEL_OK;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

static void tcp_fini(void *state)
{
	tcp_state *st = state;
	if (!st)
		return;
	int idle = 1;
	if (st->thread_started) {
		pthread_mutex_lock(&st->lock);
		/* an op queued but not started leaves the streams in step */
		idle = !st->cursor || st->cursor->state == REQ_QUEUED;
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
		pthread_cond_signal(&st->work);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->thread, NULL);
	}
	/* A farewell where the peers expect the next op's header, so that one
	 * waiting there learns that this rank left rather than died.  Not
	 * after a failure or with an op cut short: the streams are then out of
	 * step, and the closed connection says enough. */
	if ((!idle || st->failed || st->init_failed) && st->peers) {
		/* Out of step: a peer that waits for this rank's data would only
		 * see the connection close.  Say why in the store first, where it
		 * looks (peer_gone_note). */
		char note[TCP_MSG_MAX];
		if (st->init_failed)
			snprintf(note, sizeof(note), "its tcp backend failed to start: %.*s",
			         TCP_MSG_MAX - 64, st->fail_msg[0] ? st->fail_msg : "(see its own error)");
		else if (st->failed)
			snprintf(note, sizeof(note), "it freed its context after a collective failed "
			         "there: %.*s", TCP_MSG_MAX - 100, st->fail_msg);
		else
			snprintf(note, sizeof(note), "it freed its context while collective #%llu ran",
			         (unsigned long long)(st->cursor ? st->cursor->seq : st->seq));
		tcp_note_gone(st, note);
	}
	if (idle && !st->failed && !st->init_failed && st->peers) {
		/* the last op it started: a queued one never ran */
		uint64_t last = st->cursor ? st->cursor->seq - 1 : st->seq;
		op_hdr bye = {.magic = TCP_MAGIC, .kind = OP_BYE, .seq = last};
		int64_t until = mono_ns() + 1000000000ll;
		for (int32_t p = 0; p < st->world; p++)
			if (st->peers[p].fd >= 0)
				(void)sock_send_all(st->peers[p].fd, &bye, sizeof(bye), until);
	}
	if (st->peers)
		for (int32_t p = 0; p < st->world; p++)
			if (st->peers[p].fd >= 0)
				close(st->peers[p].fd);
	if (st->listen_fd >= 0)
		close(st->listen_fd);
	for (accel_comm_req *r = st->live.head, *nx; r; r = nx) {
		nx = r->next;
		free(r);
	}
	if (st->thread_started || st->sync_inited) {
		pthread_mutex_destroy(&st->lock);
		pthread_cond_destroy(&st->work);
		pthread_cond_destroy(&st->done);
	}
	free(st->peers);
	free(st->stage);
	free(st->in_ptrs);
	free(st->hdrs);
	free(st->small_buf);
	free(st->xs);
	free(st->cur);
	free(st->pf);
	free(st->who);
	free(st->unacked_since);
	free(st->wranks);
	free(st);
}

/* A group's names (tcp_split); NULL for the world. */
typedef struct tcp_group {
	const char *ns;
	int64_t comm_no;
	const int32_t *wranks;
	const char *tag;
} tcp_group;

/* A communicator: the world's (g NULL) or a group's, whose mesh is
 * bootstrapped under the group's store keys. */
static int tcp_open(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                    const tcp_group *g, void **ret_state)
{
	tcp_state *st = calloc(1, sizeof(*st));
	if (!st)
		return host->error(h, ACCEL_ERR_NOMEM, "tcp backend: out of memory");
	st->host = host;
	st->h = h;
	st->rank = args->rank;
	st->world = args->world_size;
	st->timeout_ms = args->timeout_ms;
	st->listen_fd = -1;
	st->num_nodes = args->num_nodes;
	if (ACCEL_COMM_INIT_HAS(args, master_addr) && args->master_addr)
		snprintf(st->master_addr, sizeof(st->master_addr), "%s", args->master_addr);
	if (g) {
		snprintf(st->ns, sizeof(st->ns), "%s", g->ns);
		st->comm_no = g->comm_no;
		st->wranks = malloc(sizeof(int32_t) * (size_t)st->world);
		if (!st->wranks) {
			free(st);
			return host->error(h, ACCEL_ERR_NOMEM, "tcp backend: out of memory");
		}
		memcpy(st->wranks, g->wranks, sizeof(int32_t) * (size_t)st->world);
		snprintf(st->self, sizeof(st->self), "world rank %d (%d of %d in group %s)",
		         (int)g->wranks[st->rank], (int)st->rank, (int)st->world, g->tag);
		snprintf(st->group, sizeof(st->group), " on group %s", g->tag);
	} else {
		snprintf(st->self, sizeof(st->self), "rank %d of %d", (int)st->rank, (int)st->world);
	}
	int64_t chunk_kb = 1024;
	const char *addr = "";
	int64_t small_kb = 16;
	/* comm.keepalive_s, from a core of ABI minor 2 on; before, 30 s */
	st->keepalive_ms = ACCEL_COMM_INIT_HAS(args, keepalive_ms) ? args->keepalive_ms : 30000;
	if (host->cfg_int) {
		host->cfg_int(h, "chunk_kb", &chunk_kb);
		host->cfg_int(h, "small_kb", &small_kb);
	}
	if (host->cfg_string)
		host->cfg_string(h, "addr", &addr);
	if (!addr)
		addr = "";
	st->chunk_bytes = (uint64_t)chunk_kb * 1024;
	st->small_bytes = (uint64_t)small_kb * 1024;
	/* spinning helps only while every local rank has a CPU of its own */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	st->spin_ns = args->local_world_size <= cpus ? TCP_SPIN_NS : 0;
	/* the stage holds world - 1 slices: keep it within 256 MiB */
	uint64_t cap = (UINT64_C(256) << 20) / (uint64_t)st->world;
	if (st->chunk_bytes > cap)
		st->chunk_bytes = cap < 4096 ? 4096 : cap & ~UINT64_C(4095);
	/* the one-shot all-reduce lands in the stage too */
	if (st->small_bytes > st->chunk_bytes)
		st->small_bytes = st->chunk_bytes;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->work, NULL);
	pthread_cond_init(&st->done, NULL);
	st->sync_inited = 1;
	st->peers = calloc((size_t)st->world, sizeof(tcp_peer));
	for (int32_t p = 0; st->peers && p < st->world; p++)
		st->peers[p].fd = -1;  /* before any tcp_fini: 0 would be stdin */
	st->in_ptrs = calloc((size_t)st->world, sizeof(void *));
	st->hdrs = calloc((size_t)st->world, sizeof(op_hdr));
	/* the one running op's scratch: at most 4 transfers per peer (an
	 * all-reduce round's results and the next round's inputs) */
	st->xs = calloc((size_t)st->world * 4, sizeof(xfer));
	st->cur = calloc((size_t)st->world * 2, sizeof(int));
	st->pf = calloc((size_t)st->world, sizeof(struct pollfd));
	st->who = calloc((size_t)st->world, sizeof(int32_t));
	st->unacked_since = calloc((size_t)st->world, sizeof(int64_t));
	st->small_buf = malloc(sizeof(op_hdr) + st->small_bytes);
	st->stage = st->world > 1 ? malloc((size_t)(st->world - 1) * st->chunk_bytes) : NULL;
	if (!st->peers || !st->in_ptrs || !st->hdrs || !st->small_buf || !st->xs || !st->cur ||
	    !st->pf || !st->who || !st->unacked_since ||
	    (st->world > 1 && !st->stage)) {
		tcp_fini(st);
		return host->error(h, ACCEL_ERR_NOMEM, "tcp backend: out of memory");
	}
	int rc = tcp_boot(st, args, addr);
	if (rc) {
		st->init_failed = 1;  /* no farewell: nobody is in step with us */
		tcp_fini(st);
		return rc;
	}
	if (pthread_create(&st->thread, NULL, worker_main, st) != 0) {
		st->init_failed = 1;
		snprintf(st->fail_msg, sizeof(st->fail_msg), "cannot start the comm thread");
		tcp_fini(st);
		return host->error(h, ACCEL_ERR_SYSTEM, "tcp backend: cannot start the comm thread");
	}
	st->thread_started = 1;
	*ret_state = st;
	return ACCEL_OK;
}

static int tcp_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                    void **ret_state)
{
	if (!args || !ACCEL_COMM_INIT_HAS(args, job_id))
		return host->error(h, ACCEL_ERR_ABI, "init: accel_comm_init_v1 is %s",
		                   args ? "too small (older core?)" : "NULL");
	if (!ret_state || args->world_size < 1 || args->rank < 0 || args->rank >= args->world_size)
		return host->error(h, ACCEL_ERR_INVALID_ARG, "tcp backend: bad init arguments");
	return tcp_open(host, h, args, NULL, ret_state);
}

/* A group: a mesh of its own between the members, bootstrapped like the
 * world's (addresses in the store, hellos) under "<parent's keys>/g<tag>"
 * (unique in the job even when a later context splits the same way); the
 * parent's connections are not touched. */
static int tcp_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	tcp_state *p = state;
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
	accel_comm_init_v1 a = {
		.struct_size = sizeof(a), .rank = args->rank, .world_size = args->size,
		.local_rank = 0, .local_world_size = args->local_size, .node_rank = 0,
		.num_nodes = args->num_nodes, .device_index = -1, .timeout_ms = args->timeout_ms,
		.job_id = args->job_id, .master_addr = p->master_addr[0] ? p->master_addr : NULL,
		.keepalive_ms = p->keepalive_ms};
	/* the hello's communicator number: from the keys (the same on every
	 * member), kept apart from the world's counter values */
	char ns[128];
	int nl = snprintf(ns, sizeof(ns), "%s/g%s", p->ns, args->tag);
	if (nl < 0 || (size_t)nl >= sizeof(ns))
		return p->host->error(p->h, ACCEL_ERR_INVALID_ARG,
		                      "split: group %s is nested too deeply for tcp's store keys",
		                      args->tag);
	uint64_t hsh = 1469598103934665603ull;  /* FNV-1a */
	for (const char *c = ns; *c; c++)
		hsh = (hsh ^ (unsigned char)*c) * 1099511628211ull;
	tcp_group g = {ns, (int64_t)((hsh >> 3) | (UINT64_C(1) << 60)), args->ranks, args->tag};
	return tcp_open(p->host, p->h, &a, &g, ret_state);
}

static const accel_param_schema_v1 tcp_params[] = {
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "chunk_kb", "1024", 4, 65536, NULL,
	 "KiB each rank exchanges with each peer per pipeline round of an all-reduce, "
	 "reduce-scatter or broadcast (capped so the staging stays within 256 MiB)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "small_kb", "16", 0, 65536, NULL,
	 "Largest all-reduce or broadcast buffer, or all-gather block, in KiB sent in one exchange "
	 "with the op's header (an all-reduce whole to every peer, each rank reducing all inputs "
	 "itself; at most chunk_kb; 0: never)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_STRING, "addr", "\"\"", 0, -1, NULL,
	 "Address this rank listens on and the others connect to; empty: 127.0.0.1 on one node, "
	 "else the local address of the route to the master address."},
};

static const accel_comm_desc_v1 tcp_desc = {
	.struct_size = sizeof(accel_comm_desc_v1),
	.devices = 1u << ACCEL_DEVICE_CPU,
	.name = "tcp",
	.version = "1.0.0",
	.summary = "TCP collectives for host memory between processes on any nodes",
	.requires = 0,
	.config_section = "tcp",
	.params = tcp_params,
	.n_params = sizeof(tcp_params) / sizeof(tcp_params[0]),
	.scope = ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES,
	.preference = ACCEL_COMM_PREF_FALLBACK,
};

static const accel_comm_v1 tcp_vtable = {
	.struct_size = sizeof(accel_comm_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &tcp_desc,
	.init = tcp_init,
	.fini = tcp_fini,
	.probe = NULL,
	.mem_alloc = NULL,
	.mem_free = NULL,
	.allreduce = tcp_allreduce,
	.reduce_scatter = tcp_reduce_scatter,
	.allgather = tcp_allgather,
	.broadcast = tcp_broadcast,
	.barrier = tcp_barrier,
	.wait = tcp_wait,
	.test = tcp_test,
	.split = tcp_split,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "tcp", error))
		return NULL;
	return &tcp_vtable;
}
