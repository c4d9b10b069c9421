/* SPDX-License-Identifier: MIT */
/* core/comm_coll.c: issuing collectives and completing them.
 *
 * Each collective (on the world, or on a group: the world's are the group
 * ones with the world) is checked (comm_check.c), routed to a backend
 * (comm.c), staged through pinned host memory when a host backend carries a
 * device buffer (comm_stage.h), counted for accel_comm_stats and numbered
 * for messages, then waited for at once or handed back as an accel_req.
 * The requests in flight are kept on a list, so that wait() and test()
 * accept only those.  A collective that timed out or lost a peer is told to
 * the rendezvous store. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm-impl.h"
#include "loader.h"
#include "restart.h"
#include "store.h"

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void trace_done(accel_comm *c, const accel_group *g, uint64_t seq, const char *op,
                       int64_t t_issue)
{
	/* the world's collectives only: the overlap checks read its sequence */
	if (c->trace && g == &c->world)
		fprintf(c->trace, "%llu %s %lld %lld\n", (unsigned long long)seq, op,
		        (long long)t_issue, (long long)now_ns());
}

void accelp_comm_req_unlink_locked(accel_comm *c, accel_req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		c->live = q->next;
	if (q->next)
		q->next->prev = q->prev;
	q->prev = q->next = NULL;
}

/* Is q one of c's requests in flight (compared as a pointer only)?  With
 * `take`, also unlink it, under the same lock, so that of two waits on it
 * only one gets it. */
static int req_find(accel_comm *c, accel_req *q, int take)
{
	pthread_mutex_lock(&c->live_mu);
	accel_req *p = c->live;
	while (p && p != q)
		p = p->next;
	if (p && take)
		accelp_comm_req_unlink_locked(c, q);
	pthread_mutex_unlock(&c->live_mu);
	return p != NULL;
}

/* The bytes of a view (0 for none). */
static uint64_t view_bytes(const accel_view *v)
{
	return v ? v->numel * accel_abi_dtype_size(v->dtype) : 0;
}

/* A collective timed out or lost a peer: the job cannot go on.  Mark this
 * rank's failure as a consequence for the launcher (core/restart.h), and
 * tell the rendezvous store at once (once), so that the ranks waiting in
 * it learn it and rank 0's store, at its teardown, does not wait another
 * comm.timeout_s for ranks that will not come (a hung rank is stopped by
 * the launcher as soon as this rank exits). */
static void report_failure(accel_comm *c, int r)
{
	accel_ctx *ctx = c->ctx;
	if (r != ACCEL_ERR_TIMEOUT && r != ACCEL_ERR_PEER)
		return;
	accelp_restart_note_peer(ctx);
	if (c->reported || !ctx->store)
		return;
	c->reported = 1;
	accelp_store_fail(ctx->store, ctx->err.msg);
}

/* Issue through the backend; wait at once when the caller wants a blocking
 * call.  `coll` (ACCEL_COLL_*) and `bytes` count a collective the backend
 * took in accel_comm_stats(). */
static int finish(accel_comm *c, accel_group *g, comm_backend *be, void *state, const char *op,
                  uint32_t coll, uint64_t bytes, int r, accel_comm_req *breq,
                  accel_req **ret_req, comm_staged *st)
{
	accel_ctx *ctx = c->ctx;
	if (!r) {
		c->stat_bytes[coll] += bytes;
		c->stat_calls[coll]++;
	}
	if (r) {
		if (ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "%s%s (after #%llu) failed in backend %s: %s", op,
			              accelp_comm_on_group(g), (unsigned long long)g->seq, be->module->name,
			              accel_status_str(r));
		comm_stage_out(st, 0, &ctx->err);
		return r;
	}
	uint64_t seq = ++g->seq;
	int64_t t_issue = c->trace ? now_ns() : 0;
	if (!ret_req) {
		r = breq ? be->vt->wait(state, breq) : ACCEL_OK;
		trace_done(c, g, seq, op, t_issue);
		if (r && ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "%s #%llu%s failed in backend %s: %s", op,
			              (unsigned long long)seq, accelp_comm_on_group(g), be->module->name,
			              accel_status_str(r));
		report_failure(c, r);
		int s = comm_stage_out(st, r == ACCEL_OK, &ctx->err);
		return r ? r : s;
	}
	accel_req *q = malloc(sizeof(*q));
	if (!q) {
		if (breq)
			be->vt->wait(state, breq);
		comm_stage_out(st, 0, &ctx->err);
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	}
	*q = (accel_req){.be = be, .state = state, .g = g, .breq = breq, .op = op, .seq = seq,
	                 .t_issue_ns = t_issue, .stage = *st};
	pthread_mutex_lock(&c->live_mu);
	q->next = c->live;
	if (c->live)
		c->live->prev = q;
	c->live = q;
	pthread_mutex_unlock(&c->live_mu);
	*ret_req = q;
	return ACCEL_OK;
}

int accelp_comm_group_allreduce(accel_comm *c, accel_group *grp, const accel_view *send,
                               const accel_view *recv, uint32_t op, accel_req **ret_req)
{
	comm_backend *be = NULL;
	void *state = NULL;
	accel_comm_req *breq = NULL;
	accel_group *g = NULL;
	int r = accelp_comm_group_of(c, grp, "allreduce", &g);
	if (r || (r = accelp_comm_check_op(c, op, "allreduce")) ||
	    (r = accelp_comm_check_pair(c, g, send, recv, "allreduce", 1, send ? send->numel : 0,
	                                send ? send->numel : 0)) ||
	    (r = accelp_comm_route(c, g, send, "allreduce", &be, &state)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	uint64_t bytes = view_bytes(send);
	if (send->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		if ((r = comm_stage_in(c->stage, c->ctx->stream, send, recv, send->numel, 0, 0, &hs, &hr, &st,
		                       &c->ctx->err)))
			return r;
		send = recv = &hs;
	}
	r = be->vt->allreduce(state, send, recv, op, &breq);
	return finish(c, g, be, state, "allreduce", ACCEL_COLL_ALLREDUCE, bytes, r, breq, ret_req,
	              &st);
}

int accelp_comm_group_reduce_scatter(accel_comm *c, accel_group *grp, const accel_view *send,
                                    const accel_view *recv, uint32_t op, accel_req **ret_req)
{
	comm_backend *be = NULL;
	void *state = NULL;
	accel_comm_req *breq = NULL;
	accel_group *g = NULL;
	uint64_t n = recv ? recv->numel : 0;
	int r = accelp_comm_group_of(c, grp, "reduce_scatter", &g);
	if (r || (r = accelp_comm_check_op(c, op, "reduce_scatter")) ||
	    (r = accelp_comm_check_pair(c, g, send, recv, "reduce_scatter", 1, n * (uint64_t)g->size,
	                                n)) ||
	    (r = accelp_comm_route(c, g, send, "reduce_scatter", &be, &state)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	uint64_t bytes = view_bytes(send);
	if (send->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		/* the in-place form: this rank's block of the staged send */
		if ((r = comm_stage_in(c->stage, c->ctx->stream, send, recv, send->numel, 0, n * (uint64_t)g->rank,
		                       &hs, &hr, &st, &c->ctx->err)))
			return r;
		send = &hs;
		recv = &hr;
	}
	r = be->vt->reduce_scatter(state, send, recv, op, &breq);
	return finish(c, g, be, state, "reduce_scatter", ACCEL_COLL_REDUCE_SCATTER, bytes, r, breq,
	              ret_req, &st);
}

int accelp_comm_group_allgather(accel_comm *c, accel_group *grp, const accel_view *send,
                               const accel_view *recv, accel_req **ret_req)
{
	comm_backend *be = NULL;
	void *state = NULL;
	accel_comm_req *breq = NULL;
	accel_group *g = NULL;
	uint64_t n = send ? send->numel : 0;
	int r = accelp_comm_group_of(c, grp, "allgather", &g);
	if (r ||
	    (r = accelp_comm_check_pair(c, g, send, recv, "allgather", 0, n, n * (uint64_t)g->size)) ||
	    (r = accelp_comm_route(c, g, send, "allgather", &be, &state)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	uint64_t bytes = view_bytes(send);
	if (send->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		/* the in-place form: send at this rank's block of the staged recv */
		if ((r = comm_stage_in(c->stage, c->ctx->stream, send, recv, recv->numel, n * (uint64_t)g->rank, 0,
		                       &hs, &hr, &st, &c->ctx->err)))
			return r;
		send = &hs;
		recv = &hr;
	}
	r = be->vt->allgather(state, send, recv, &breq);
	return finish(c, g, be, state, "allgather", ACCEL_COLL_ALLGATHER, bytes, r, breq, ret_req,
	              &st);
}

int accelp_comm_group_broadcast(accel_comm *c, accel_group *grp, const accel_view *buf,
                               int32_t root, accel_req **ret_req)
{
	comm_backend *be = NULL;
	void *state = NULL;
	accel_comm_req *breq = NULL;
	accel_group *g = NULL;
	int r = accelp_comm_group_of(c, grp, "broadcast", &g);
	if (r || (r = accelp_comm_check_view(c, g, buf, "broadcast", "buffer", 0)))
		return r;
	if (root < 0 || root >= g->size)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "broadcast%s: root %d is not a rank (%s size %d)",
		                     accelp_comm_on_group(g), root, g == &c->world ? "world" : "group",
		                     g->size);
	if ((r = accelp_comm_route(c, g, buf, "broadcast", &be, &state)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	uint64_t bytes = view_bytes(buf);
	if (buf->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		if ((r = comm_stage_in(c->stage, c->ctx->stream, buf, buf, buf->numel, 0, 0, &hs, &hr, &st,
		                       &c->ctx->err)))
			return r;
		buf = &hs;
	}
	r = be->vt->broadcast(state, buf, root, &breq);
	return finish(c, g, be, state, "broadcast", ACCEL_COLL_BROADCAST, bytes, r, breq, ret_req,
	              &st);
}

int accelp_comm_group_barrier(accel_comm *c, accel_group *grp, accel_req **ret_req)
{
	accel_comm_req *breq = NULL;
	accel_group *g = NULL;
	int r = accelp_comm_group_of(c, grp, "barrier", &g);
	if (r)
		return r;
	comm_staged st = {0};
	r = c->cpu.vt->barrier(g->cpu_state, &breq);
	return finish(c, g, &c->cpu, g->cpu_state, "barrier", ACCEL_COLL_BARRIER, 0, r, breq,
	              ret_req, &st);
}

int accelp_comm_allreduce(accel_comm *c, const accel_view *send, const accel_view *recv,
                         uint32_t op, accel_req **ret_req)
{
	return accelp_comm_group_allreduce(c, NULL, send, recv, op, ret_req);
}

int accelp_comm_reduce_scatter(accel_comm *c, const accel_view *send, const accel_view *recv,
                              uint32_t op, accel_req **ret_req)
{
	return accelp_comm_group_reduce_scatter(c, NULL, send, recv, op, ret_req);
}

int accelp_comm_allgather(accel_comm *c, const accel_view *send, const accel_view *recv,
                         accel_req **ret_req)
{
	return accelp_comm_group_allgather(c, NULL, send, recv, ret_req);
}

int accelp_comm_broadcast(accel_comm *c, const accel_view *buf, int32_t root, accel_req **ret_req)
{
	return accelp_comm_group_broadcast(c, NULL, buf, root, ret_req);
}

int accelp_comm_barrier(accel_comm *c, accel_req **ret_req)
{
	return accelp_comm_group_barrier(c, NULL, ret_req);
}

static int wait_req(accel_comm *c, accel_req *req, int on_stream, void *stream)
{
	const char *what = on_stream ? "wait_stream" : "wait";
	if (!req)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG, "%s: request is NULL", what);
	if (!req_find(c, req, 1))
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %p is not a collective in flight on this context (waited "
		                     "for already?)", what, (void *)req);
	/* a staged request's result reaches the device in comm_stage_out()
	 * below, on the host's watch: nothing for the device to wait on */
	int device_wait = on_stream && req->breq && req->be == &c->dev && req->be->vt->wait_stream &&
	                  !req->stage.pool;
	int r = !req->breq     ? ACCEL_OK
	        : device_wait ? req->be->vt->wait_stream(req->state, req->breq, stream)
	                      : req->be->vt->wait(req->state, req->breq);
	trace_done(c, req->g, req->seq, req->op, req->t_issue_ns);
	if (r && c->ctx->err.code == ACCEL_OK)
		accelp_err_set(&c->ctx->err, r, "%s #%llu%s failed in backend %s: %s", req->op,
		              (unsigned long long)req->seq, accelp_comm_on_group(req->g),
		              req->be->module->name, accel_status_str(r));
	report_failure(c, r);
	int s = comm_stage_out(&req->stage, r == ACCEL_OK, &c->ctx->err);
	free(req);
	return r ? r : s;
}

int accelp_comm_wait(accel_comm *c, accel_req *req)
{
	return wait_req(c, req, 0, NULL);
}

int accelp_comm_wait_stream(accel_comm *c, accel_req *req, void *stream)
{
	return wait_req(c, req, 1, stream);
}

int accelp_comm_test(accel_comm *c, accel_req *req, int32_t *ret_done)
{
	if (!req || !ret_done)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG, "test: NULL argument");
	if (!req_find(c, req, 0))
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "test: %p is not a collective in flight on this context (waited "
		                     "for already?)", (void *)req);
	int32_t done = 1;
	int r = req->breq ? req->be->vt->test(req->state, req->breq, &done) : ACCEL_OK;
	if (r) {
		report_failure(c, r);
		return r;
	}
	/* a staged result reaches the device buffer now, so whatever runs on
	 * "done" (req_on_done callbacks) sees it; wait() then has nothing left
	 * to copy */
	if (done && (r = comm_stage_out(&req->stage, 1, &c->ctx->err)))
		return r;
	*ret_done = done;
	return ACCEL_OK;
}
