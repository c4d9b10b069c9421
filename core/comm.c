/* SPDX-License-Identifier: MIT */
/* core/comm.c: the core side of collectives.
 *
 * One backend serves host buffers; a device backend serves CUDA buffers
 * and is brought up on first use, which is collective because every rank
 * issues the same collectives in the same order.  Which backends: the one
 * config `backend` names, or under "auto" the one core/select.c picks from
 * the descriptors (no backend is known here by name).  Every call is
 * checked here (dtypes, counts, root) so backends see only valid requests
 * and users get messages that name the argument.  Groups
 * (sub-communicators, accel_comm_group_*) are states the backends' split()
 * made; the world is the group every context has. */
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "comm_stage.h"
#include "config.h"
#include "loader.h"
#include "log.h"
#include "select.h"
#include "train.h"

#define GROUP_TAG_MAX 96

typedef struct comm_backend {
	const accel_module *module;
	const accel_comm_v1 *vt;
	void *state;            /* the world's */
	struct accel_host host;
	int up;
	int failed;             /* init failed: not retried (see route()) */
	int starting;           /* inside init(): a device call from it is refused */
	int fail_code;
	char fail_msg[ACCEL_ERRMSG_MAX];
} comm_backend;

struct accel_group {
	accel_comm *comm;
	char tag[GROUP_TAG_MAX];    /* "" for the world; see accel_comm_split_v1.tag */
	char what[200];             /* "group 1c0 (world ranks 1, 3)"; "" for the world */
	int32_t rank, size;
	int32_t *wranks;            /* size world ranks; NULL for the world (identity) */
	int32_t *nodes;             /* size node ranks; NULL for the world */
	void *cpu_state;            /* this group's state of comm->cpu */
	void *dev_state;            /* of comm->dev; NULL when it was not up at the split */
	uint64_t seq;               /* collectives issued on the group */
	uint32_t n_splits;          /* splits of this group so far (names children) */
	struct accel_group *next;   /* accel_comm.groups */
};

struct accel_req {
	comm_backend *be;
	void *state;            /* the backend state it was issued on */
	accel_group *g;
	accel_comm_req *breq;   /* NULL: already complete */
	const char *op;
	uint64_t seq;
	int64_t t_issue_ns;     /* CLOCK_MONOTONIC when the backend took it */
	struct accel_req *prev, *next;   /* in accel_comm.live */
	comm_staged stage;      /* a device buffer staged through host memory */
};

typedef struct comm_alloc {
	void *ptr;
	comm_backend *be;
} comm_alloc;

struct accel_comm {
	accel_ctx *ctx;
	comm_backend cpu;
	comm_backend dev;
	const char *dev_name;   /* device backend to bring up on first use, or NULL */
	/* A host backend named in the config and no device backend: CUDA
	 * buffers are staged through pinned host memory (comm_stage.h). */
	int stage_device;
	comm_stage_pool *stage;
	char dev_why[ACCEL_ERRMSG_MAX]; /* without one: why none can be used, or "" */
	accel_group world;
	accel_group *groups;    /* every group split and not freed */
	comm_alloc *allocs;
	size_t n_allocs, cap_allocs;
	/* Requests issued and not yet waited: wait() and test() accept only
	 * these (a request waited twice is an error, not a use after free), and
	 * the ones never waited are released with the communicator. */
	pthread_mutex_t live_mu;
	accel_req *live;
	/* ACCEL_TEST_COMM_TRACE=PREFIX: PREFIX.<rank> gets one line per
	 * collective, "SEQ OP ISSUE_NS DONE_NS" (CLOCK_MONOTONIC when the
	 * backend took it and when its wait returned), so tests can check
	 * what overlapped with what (docs/testing.md). */
	FILE *trace;
	/* accel_comm_stats(): bytes this rank handed to each kind of
	 * collective and how many it issued (training thread only, like the
	 * collectives themselves). */
	uint64_t stat_bytes[ACCEL_COLL_COUNT];
	uint64_t stat_calls[ACCEL_COLL_COUNT];
};

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

static void live_unlink_locked(accel_comm *c, accel_req *q)
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
		live_unlink_locked(c, q);
	pthread_mutex_unlock(&c->live_mu);
	return p != NULL;
}

static int backend_up(accel_comm *c, comm_backend *be, const char *name, int device_index)
{
	accel_ctx *ctx = c->ctx;
	const accel_module *m;
	int r = accelp_loader_find(ctx->loader, ACCEL_MODULE_COMM, name, &m, &ctx->err);
	if (r)
		return r;
	int64_t timeout_ms, keepalive_ms;
	accelp_comm_times(ctx, &timeout_ms, &keepalive_ms);
	accel_comm_init_v1 args = {
		.struct_size = sizeof(args),
		.rank = ctx->world.rank,
		.world_size = ctx->world.world_size,
		.local_rank = ctx->world.local_rank,
		.local_world_size = ctx->world.local_world_size,
		.node_rank = ctx->world.node_rank,
		.num_nodes = ctx->world.num_nodes,
		.device_index = device_index,
		.timeout_ms = timeout_ms,
		.job_id = accelp_comm_job_id(ctx),
		.master_addr = ctx->master_addr[0] ? ctx->master_addr : NULL,
		.keepalive_ms = keepalive_ms,
	};
	be->module = m;
	be->vt = m->comm;
	be->host.ctx = ctx;
	be->host.module = m;
	be->host.name = m->name;
	be->host.section = m->comm->desc->config_section;
	int had_err = ctx->err.code != ACCEL_OK;   /* the caller's, kept */
	r = be->vt->init(accelp_comm_host_table(), &be->host, &args, &be->state);
	if (r) {
		if (ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "comm backend '%s' (%s) failed to start: %s", name,
			              m->path, accel_status_str(r));
		return r;
	}
	if (!had_err && ctx->err.code != ACCEL_OK) {
		/* an error recorded on the way (a host call that failed) must
		 * not stand in for a later failure's message */
		accelp_log(ACCEL_LOG_WARN, "comm backend '%s' (%s) started, but reported on the way: "
		          "%s", name, m->path, ctx->err.msg);
		accelp_err_clear(&ctx->err);
	}
	be->up = 1;
	accelp_log(ACCEL_LOG_DEBUG, "comm backend %s up (%s)", name, m->path);
	return ACCEL_OK;
}

const char *accelp_comm_job_id(const accel_ctx *ctx)
{
	return ctx->job_id[0] ? ctx->job_id : "single";
}

/* The probe of backend "auto" (core/select.c): the module's own probe(),
 * with a host handle of this context. */
static int probe_cb(void *arg, const accel_module *m)
{
	accel_ctx *ctx = arg;
	struct accel_host ph = {.ctx = ctx, .module = m, .name = m->name,
	                        .section = m->comm->desc->config_section};
	return m->comm->probe(accelp_comm_host_table(), &ph) != 0;
}

/* The loaded module named `name` (usable here or not), or NULL. */
static const accel_module *comm_named(accel_ctx *ctx, const char *name)
{
	for (uint32_t i = 0; i < accelp_loader_count(ctx->loader); i++) {
		const accel_module *m = accelp_loader_get(ctx->loader, i);
		if (m->kind == ACCEL_MODULE_COMM && m->name && !strcmp(m->name, name) &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE))
			return m;
	}
	return NULL;
}

int accelp_comm_new(accel_ctx *ctx, accel_comm **ret_comm)
{
	const char *want = "auto";
	const char *cpu_name = NULL;
	const accel_module *m;
	char why[ACCEL_ERRMSG_MAX];
	int r;

	accelp_config_get_string(ctx->cfg, "backend", &want);
	accel_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	c->ctx = ctx;
	pthread_mutex_init(&c->live_mu, NULL);
	const char *tp = getenv("ACCEL_TEST_COMM_TRACE");
	if (tp && *tp) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%d", tp, ctx->world.rank);
		if (!(c->trace = fopen(path, "w")))
			accelp_log(ACCEL_LOG_WARN, "ACCEL_TEST_COMM_TRACE: cannot open %s", path);
	}
	if (strcmp(want, "auto") != 0) {
		/* A named backend carries host buffers when it says it serves
		 * them; one for device buffers only is brought up on the first
		 * device collective, and host buffers go where auto sends them. */
		accel_err e;
		accelp_err_clear(&e);
		r = accelp_loader_find(ctx->loader, ACCEL_MODULE_COMM, want, &m, &e);
		if (r == ACCEL_ERR_UNSUPPORTED && (m = comm_named(ctx, want)) &&
		    !(m->devices & (1u << ACCEL_DEVICE_CPU))) {
			/* a device backend this machine cannot run (no GPU): said by
			 * the first device collective, like before it is needed */
			r = ACCEL_OK;
		}
		if (r) {
			accelp_err_set(&ctx->err, r, "backend '%s' (from %s): %s", want,
			              accelp_config_source(ctx->cfg, "backend"),
			              e.msg[0] ? e.msg : accel_status_str(r));
			goto fail;
		}
		uint32_t dev = m->devices;
		if (dev & (1u << ACCEL_DEVICE_CPU))
			cpu_name = m->name;
		if (dev & (1u << ACCEL_DEVICE_CUDA))
			c->dev_name = m->name;
		/* a host backend named alone carries device buffers too, staged */
		c->stage_device = cpu_name && !c->dev_name;
		if (!cpu_name && !c->dev_name) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
			                  "backend '%s' (%s) serves neither host nor CUDA buffers "
			                  "(devices 0x%x)", want, m->path, dev);
			goto fail;
		}
		if (cpu_name && ctx->world.num_nodes > 1 &&
		    !(accelp_select_comm_scope(m) & ACCEL_COMM_SCOPE_NODES)) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_CONFIG,
			                  "backend %s (from %s) works within one node, but this job has "
			                  "%d nodes; use backend auto, which picks one that spans nodes "
			                  "(see 'accel plugins list')",
			                  want, accelp_config_source(ctx->cfg, "backend"),
			                  ctx->world.num_nodes);
			goto fail;
		}
	}
	if (!cpu_name) {
		int broken = 0;
		if (accelp_select_comm_auto(ctx->loader, ACCEL_DEVICE_CPU, ctx->world.num_nodes,
		                           probe_cb, ctx, &m, why, sizeof(why), &broken)) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
			                  "backend %s: no comm backend can carry host buffers of this job "
			                  "(%d ranks on %d node%s): %s (see 'accel plugins list')", want,
			                  ctx->world.world_size, ctx->world.num_nodes,
			                  ctx->world.num_nodes == 1 ? "" : "s",
			                  why[0] ? why : "none is installed");
			goto fail;
		}
		cpu_name = m->name;
		/* a file that might have been the better choice is not passed
		 * over in silence */
		if (broken)
			accelp_log(ACCEL_LOG_WARN, "backend auto: using '%s' for host buffers; passed "
			          "over: %s", cpu_name, why);
	}
	if (!c->dev_name && !strcmp(want, "auto")) {
		int broken = 0;
		if (!accelp_select_comm_auto(ctx->loader, ACCEL_DEVICE_CUDA, ctx->world.num_nodes,
		                            probe_cb, ctx, &m, why, sizeof(why), &broken)) {
			c->dev_name = m->name;
		} else if (why[0]) {
			/* kept for the first collective on a CUDA buffer; said now as
			 * well when a file is broken (not merely: no GPU here) */
			if (broken)
				accelp_log(ACCEL_LOG_WARN, "backend auto: no backend for CUDA buffers: %s",
				          why);
			snprintf(c->dev_why, sizeof(c->dev_why), "%s", why);
		}
	}
	if ((r = backend_up(c, &c->cpu, cpu_name, -1)))
		goto fail;
	c->world.comm = c;
	c->world.rank = ctx->world.rank;
	c->world.size = ctx->world.world_size;
	c->world.cpu_state = c->cpu.state;
	*ret_comm = c;
	return ACCEL_OK;
fail:
	accelp_comm_free(c);
	return r;
}

accel_comm *accelp_comm_free(accel_comm *c)
{
	if (!c)
		return NULL;
	while (c->groups)
		accelp_comm_group_free(c, c->groups);
	for (size_t i = 0; i < c->n_allocs; i++)
		if (c->allocs[i].be->vt->mem_free)
			c->allocs[i].be->vt->mem_free(c->allocs[i].be->state, c->allocs[i].ptr);
	free(c->allocs);
	if (c->dev.up)
		c->dev.vt->fini(c->dev.state);
	if (c->cpu.up)
		c->cpu.vt->fini(c->cpu.state);
	/* after the backends: a request never waited for may have had them
	 * write into its staging buffer until fini */
	c->stage = comm_stage_pool_free(c->stage);
	/* The backends released their own requests in fini. */
	size_t never = 0;
	for (accel_req *q = c->live, *nx; q; q = nx) {
		nx = q->next;
		free(q);
		never++;
	}
	if (never)
		accelp_log(ACCEL_LOG_DEBUG, "%zu collective request%s never waited for", never,
		          never == 1 ? " was" : "s were");
	pthread_mutex_destroy(&c->live_mu);
	if (c->trace)
		fclose(c->trace);
	free(c);
	return NULL;
}

void accelp_comm_times(const accel_ctx *ctx, int64_t *ret_timeout_ms, int64_t *ret_keepalive_ms)
{
	double timeout_s = 300, keepalive_s = 30;
	accelp_config_get_double(ctx->cfg, "comm.timeout_s", &timeout_s);
	accelp_config_get_double(ctx->cfg, "comm.keepalive_s", &keepalive_s);
	*ret_timeout_ms = (int64_t)(timeout_s * 1000.0);
	*ret_keepalive_ms = (int64_t)ceil(keepalive_s * 1000.0);
}

const char *accelp_comm_backend_name(const accel_comm *c)
{
	return c && c->cpu.up ? c->cpu.module->name : "none";
}

const char *accelp_comm_device_backend_name(const accel_comm *c, int *ret_staged)
{
	*ret_staged = 0;
	if (!c)
		return "none";
	if (c->stage_device && !c->dev_name) {
		*ret_staged = 1;
		return accelp_comm_backend_name(c);
	}
	return c->dev.up ? c->dev.module->name : c->dev_name ? c->dev_name : "none";
}

/* ---- routing and checks ---------------------------------------------------------- */

uint64_t accelp_comm_seq(const accel_comm *c)
{
	return c->world.seq;
}

/* " on group 1c0 (world ranks 1, 3)" or "" for the world. */
static const char *on_group(const accel_group *g)
{
	return g->what;
}

static int route(accel_comm *c, accel_group *g, const accel_view *v, const char *op,
                 comm_backend **ret_be, void **ret_state)
{
	accel_ctx *ctx = c->ctx;
	if (v->device == ACCEL_DEVICE_CPU) {
		*ret_be = &c->cpu;
		*ret_state = g->cpu_state;
		return ACCEL_OK;
	}
	if (v->device != ACCEL_DEVICE_CUDA)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: unknown device %d", op,
		                     v->device);
	if (c->stage_device && !c->dev_name) {
		/* staged through the host backend by the caller (comm_stage.h) */
		if (!c->stage && comm_stage_pool_new(&c->stage, &ctx->err))
			return ACCEL_ERR_NOMEM;
		*ret_be = &c->cpu;
		*ret_state = g->cpu_state;
		return ACCEL_OK;
	}
	if (!c->dev.up) {
		if (!c->dev_name)
			return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
			                     "%s on a cuda:%d buffer needs a backend for device buffers, "
			                     "and none is in use (backend '%s' serves host buffers; name "
			                     "it in the config, backend: \"%s\", to stage device buffers "
			                     "through host memory; %s)",
			                     op, v->device_index, c->cpu.module->name, c->cpu.module->name,
			                     c->dev_why[0] ? c->dev_why
			                                   : "none is installed that serves CUDA "
			                                     "buffers, or no GPU; see 'accel plugins "
			                                     "list'");
		/* Bringing the device backend up is collective (its bootstrap
		 * counts communicators in the store); after a failure the ranks
		 * no longer agree on that count, so a retry could join a dead
		 * bootstrap.  Every later call repeats the first reason. */
		if (c->dev.failed)
			return accelp_err_set(&ctx->err, c->dev.fail_code,
			                     "%s on a cuda:%d buffer: the %s backend failed to start "
			                     "earlier and is not retried: %s", op, v->device_index,
			                     c->dev_name, c->dev.fail_msg);
		/* init() may use host collectives (a device backend bootstraps over
		 * them without a store); one on a device buffer would start
		 * init() again, without end. */
		if (c->dev.starting)
			return accelp_err_set(&ctx->err, ACCEL_ERR_STATE,
			                     "%s on a cuda:%d buffer from inside the %s backend's init(): "
			                     "a device backend can use host buffers only while it starts",
			                     op, v->device_index, c->dev_name);
		if (g != &c->world)
			return accelp_err_set(&ctx->err, ACCEL_ERR_STATE,
			                     "%s on a cuda:%d buffer%s: the device backend (%s) starts "
			                     "with the first collective on a device buffer on the world, "
			                     "and none came before this group was split; issue one (a "
			                     "barrier-like broadcast will do) before group_split",
			                     op, v->device_index, on_group(g), c->dev_name);
		c->dev.starting = 1;
		int r = backend_up(c, &c->dev, c->dev_name, v->device_index);
		c->dev.starting = 0;
		if (r) {
			c->dev.failed = 1;
			c->dev.fail_code = r;
			snprintf(c->dev.fail_msg, sizeof(c->dev.fail_msg), "%s",
			         ctx->err.code != ACCEL_OK ? ctx->err.msg : accel_status_str(r));
			return r;
		}
		c->world.dev_state = c->dev.state;
	}
	if (!g->dev_state)
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE,
		                     "%s on a cuda:%d buffer%s: the group was split before the device "
		                     "backend (%s) started, so it has no device communicator; issue a "
		                     "collective on a device buffer on the world before group_split",
		                     op, v->device_index, on_group(g), c->dev.module->name);
	*ret_be = &c->dev;
	*ret_state = g->dev_state;
	return ACCEL_OK;
}

static int check_view(accel_comm *c, accel_group *g, const accel_view *v, const char *op,
                      const char *which, int reduce)
{
	accel_ctx *ctx = c->ctx;
	if (!v)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s is NULL", op, which);
	if (v->struct_size < sizeof(accel_view))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s.struct_size is %u, expected at least %zu (set it to "
		                     "sizeof(accel_view))", op, which, v->struct_size, sizeof(accel_view));
	if (accel_dtype_size(v->dtype) == 0)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has invalid dtype %u",
		                     op, which, v->dtype);
	if (reduce && v->dtype != ACCEL_DTYPE_F32 && v->dtype != ACCEL_DTYPE_F64 &&
	    v->dtype != ACCEL_DTYPE_F16 && v->dtype != ACCEL_DTYPE_BF16 &&
	    v->dtype != ACCEL_DTYPE_I32 && v->dtype != ACCEL_DTYPE_I64)
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "%s: reductions over %s are not supported (f32, f64, f16, bf16, "
		                     "i32, i64 are)", op, accel_dtype_name(v->dtype));
	if (v->numel && !v->data)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s has %llu elements but a NULL data pointer", op, which,
		                     (unsigned long long)v->numel);
	/* numel * world * 8 must fit comfortably in 64 bits (and in memory) */
	if (v->numel > (UINT64_C(1) << 56) / 8 / (uint64_t)g->size)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has %llu elements, too many",
		                     op, which, (unsigned long long)v->numel);
	return ACCEL_OK;
}

static int overlap(const accel_view *a, const accel_view *b)
{
	size_t es = accel_dtype_size(a->dtype);
	const char *x = a->data, *y = b->data;
	return a->numel && b->numel && x < y + b->numel * es && y < x + a->numel * es;
}

/* In place means exactly the same buffer (allreduce), or for reduce_scatter
 * recv at send's start or at this rank's block, and for allgather send at
 * recv's start or at this rank's block; any other overlap is a mistake. */
static int check_overlap(accel_comm *c, accel_group *g, const accel_view *s, const accel_view *d,
                         const char *op)
{
	accel_ctx *ctx = c->ctx;
	size_t es = accel_dtype_size(s->dtype);
	if (!overlap(s, d) || s->data == d->data)
		return ACCEL_OK;
	if (!strcmp(op, "reduce_scatter") &&
	    (const char *)d->data == (const char *)s->data + (uint64_t)g->rank * d->numel * es)
		return ACCEL_OK;
	if (!strcmp(op, "allgather") &&
	    (const char *)s->data == (const char *)d->data + (uint64_t)g->rank * s->numel * es)
		return ACCEL_OK;
	return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
	                     "%s: send [%p, +%llu) and recv [%p, +%llu) overlap; in place means %s",
	                     op, s->data, (unsigned long long)(s->numel * es), d->data,
	                     (unsigned long long)(d->numel * es),
	                     !strcmp(op, "allreduce") ? "send == recv"
	                     : !strcmp(op, "reduce_scatter")
	                         ? "recv == send or recv == send + rank * recv count"
	                         : "send == recv or send == recv + rank * send count");
}

static int check_pair(accel_comm *c, accel_group *g, const accel_view *s, const accel_view *d,
                      const char *op, int reduce, uint64_t want_send, uint64_t want_recv)
{
	accel_ctx *ctx = c->ctx;
	int r;
	if ((r = check_view(c, g, s, op, "send", reduce)) ||
	    (r = check_view(c, g, d, op, "recv", reduce)))
		return r;
	if (s->dtype != d->dtype)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: send is %s but recv is %s", op, accel_dtype_name(s->dtype),
		                     accel_dtype_name(d->dtype));
	if (s->device != d->device || s->device_index != d->device_index)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: send and recv are on different devices", op);
	if (s->numel != want_send || d->numel != want_recv)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s%s: with %d ranks, send has %llu elements and recv %llu; "
		                     "expected %llu and %llu", op, on_group(g), g->size,
		                     (unsigned long long)s->numel, (unsigned long long)d->numel,
		                     (unsigned long long)want_send, (unsigned long long)want_recv);
	return check_overlap(c, g, s, d, op);
}

static int check_op(accel_comm *c, uint32_t op, const char *what)
{
	if (op > ACCEL_RED_MIN)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: unknown reduction %u (ACCEL_RED_SUM, _AVG, _MAX, _MIN)", what,
		                     op);
	return ACCEL_OK;
}

/* The bytes of a view (0 for none). */
static uint64_t view_bytes(const accel_view *v)
{
	return v ? v->numel * accel_abi_dtype_size(v->dtype) : 0;
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
			              on_group(g), (unsigned long long)g->seq, be->module->name,
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
			              (unsigned long long)seq, on_group(g), be->module->name,
			              accel_status_str(r));
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

/* The group a caller means: NULL is the world; anything else must be one
 * of this communicator's groups. */
static int group_of(accel_comm *c, accel_group *g, const char *op, accel_group **ret)
{
	if (!g || g == &c->world) {
		*ret = &c->world;
		return ACCEL_OK;
	}
	for (accel_group *p = c->groups; p; p = p->next)
		if (p == g) {
			*ret = g;
			return ACCEL_OK;
		}
	return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
	                     "%s: %p is not a group of this context (freed already?)", op,
	                     (void *)g);
}

int accelp_comm_group_allreduce(accel_comm *c, accel_group *grp, const accel_view *send,
                               const accel_view *recv, uint32_t op, accel_req **ret_req)
{
	comm_backend *be = NULL;
	void *state = NULL;
	accel_comm_req *breq = NULL;
	accel_group *g = NULL;
	int r = group_of(c, grp, "allreduce", &g);
	if (r || (r = check_op(c, op, "allreduce")) ||
	    (r = check_pair(c, g, send, recv, "allreduce", 1, send ? send->numel : 0,
	                    send ? send->numel : 0)) ||
	    (r = route(c, g, send, "allreduce", &be, &state)))
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
	int r = group_of(c, grp, "reduce_scatter", &g);
	if (r || (r = check_op(c, op, "reduce_scatter")) ||
	    (r = check_pair(c, g, send, recv, "reduce_scatter", 1, n * (uint64_t)g->size, n)) ||
	    (r = route(c, g, send, "reduce_scatter", &be, &state)))
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
	int r = group_of(c, grp, "allgather", &g);
	if (r || (r = check_pair(c, g, send, recv, "allgather", 0, n, n * (uint64_t)g->size)) ||
	    (r = route(c, g, send, "allgather", &be, &state)))
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
	int r = group_of(c, grp, "broadcast", &g);
	if (r || (r = check_view(c, g, buf, "broadcast", "buffer", 0)))
		return r;
	if (root < 0 || root >= g->size)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "broadcast%s: root %d is not a rank (%s size %d)", on_group(g),
		                     root, g == &c->world ? "world" : "group", g->size);
	if ((r = route(c, g, buf, "broadcast", &be, &state)))
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
	int r = group_of(c, grp, "barrier", &g);
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

int accel_comm_stats(const accel_ctx *ctx, uint32_t collective, uint64_t *ret_bytes,
                     uint64_t *ret_calls)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	accel_err *err = (accel_err *)&ctx->err;  /* the message slot, as accel_memory_stats */
	if (!ret_bytes && !ret_calls)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "accel_comm_stats: both outputs are NULL; pass ret_bytes, "
		                     "ret_calls or both");
	if (collective >= ACCEL_COLL_COUNT && collective != ACCEL_COLL_ALL)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "accel_comm_stats: unknown collective %u (ACCEL_COLL_ALLREDUCE .. "
		                     "ACCEL_COLL_BARRIER, or ACCEL_COLL_ALL)", collective);
	uint64_t bytes = 0, calls = 0;
	const accel_comm *c = ctx->comm;
	for (uint32_t i = 0; c && i < ACCEL_COLL_COUNT; i++)
		if (collective == ACCEL_COLL_ALL || collective == i) {
			bytes += c->stat_bytes[i];
			calls += c->stat_calls[i];
		}
	if (ret_bytes)
		*ret_bytes = bytes;
	if (ret_calls)
		*ret_calls = calls;
	return ACCEL_OK;
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
		              (unsigned long long)req->seq, on_group(req->g), req->be->module->name,
		              accel_status_str(r));
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
	if (r)
		return r;
	/* a staged result reaches the device buffer now, so whatever runs on
	 * "done" (req_on_done callbacks) sees it; wait() then has nothing left
	 * to copy */
	if (done && (r = comm_stage_out(&req->stage, 1, &c->ctx->err)))
		return r;
	*ret_done = done;
	return ACCEL_OK;
}

int accelp_comm_mem_alloc(accel_comm *c, int32_t device, int32_t device_index, uint64_t bytes,
                         void **ret_ptr)
{
	accel_view probe = {.struct_size = sizeof(probe), .dtype = ACCEL_DTYPE_U8, .device = device,
	                    .device_index = device_index};
	comm_backend *be = NULL;
	void *state = NULL;
	void *p = NULL;
	/* no backend for device buffers at all: ordinary memory, as for a
	 * backend without an allocator (the first collective says why) */
	if (device != ACCEL_DEVICE_CPU && !c->dev_name && !c->stage_device) {
		*ret_ptr = NULL;
		return ACCEL_OK;
	}
	int r = route(c, &c->world, &probe, "mem_alloc", &be, &state);
	if (r)
		return r;
	/* staged device buffers are ordinary device memory */
	if (!be->vt->mem_alloc || (device != ACCEL_DEVICE_CPU && be == &c->cpu)) {
		*ret_ptr = NULL;
		return ACCEL_OK;
	}
	if (c->n_allocs == c->cap_allocs) {
		size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 16;
		comm_alloc *na = realloc(c->allocs, cap * sizeof(*na));
		if (!na)
			return accelp_err_set(&c->ctx->err, ACCEL_ERR_NOMEM, "out of memory");
		c->allocs = na;
		c->cap_allocs = cap;
	}
	if ((r = be->vt->mem_alloc(state, device, device_index, bytes, &p)))
		return r;
	c->allocs[c->n_allocs++] = (comm_alloc){p, be};
	*ret_ptr = p;
	return ACCEL_OK;
}

int accelp_comm_mem_free(accel_comm *c, void *ptr)
{
	if (!c)
		return 0;
	for (size_t i = c->n_allocs; i-- > 0;) {
		if (c->allocs[i].ptr != ptr)
			continue;
		comm_backend *be = c->allocs[i].be;
		if (be->vt->mem_free)
			be->vt->mem_free(be->state, ptr);
		c->allocs[i] = c->allocs[--c->n_allocs];
		return 1;
	}
	return 0;
}

/* ---- groups ------------------------------------------------------------------------ */

typedef struct member {
	int32_t key, parent_rank;
} member;

static int member_cmp(const void *a, const void *b)
{
	const member *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->parent_rank < y->parent_rank ? -1 : x->parent_rank > y->parent_rank;
}

static void describe_group(accel_group *g)
{
	size_t used = (size_t)snprintf(g->what, sizeof(g->what), " on group %s (world rank%s ",
	                               g->tag, g->size == 1 ? "" : "s");
	for (int32_t i = 0; i < g->size && used + 16 < sizeof(g->what); i++)
		used += (size_t)snprintf(g->what + used, sizeof(g->what) - used, "%s%d",
		                         i ? ", " : "", g->wranks[i]);
	if (used + 16 >= sizeof(g->what))
		snprintf(g->what + sizeof(g->what) - 16, 16, ", ...)");
	else
		snprintf(g->what + used, sizeof(g->what) - used, ")");
}

static accel_group *group_destroy(accel_comm *c, accel_group *g)
{
	if (!g)
		return NULL;
	if (g->dev_state)
		c->dev.vt->fini(g->dev_state);
	if (g->cpu_state)
		c->cpu.vt->fini(g->cpu_state);
	free(g->wranks);
	free(g->nodes);
	free(g);
	return NULL;
}

int accelp_comm_group_split(accel_comm *c, accel_group *parent, int32_t color, int32_t key,
                           accel_group **ret_group)
{
	accel_ctx *ctx = c->ctx;
	accel_group *p = NULL, *g = NULL;
	int32_t *all = NULL;
	member *mem = NULL;
	int32_t *pranks = NULL;
	int r = group_of(c, parent, "group_split", &p);
	if (r)
		return r;
	if (!ret_group)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "group_split: ret_group is NULL");
	if (color < ACCEL_COMM_SPLIT_NONE)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "group_split%s: colour %d is negative; colours are >= 0, or "
		                     "ACCEL_COMM_SPLIT_NONE (-1) for a rank that joins no group",
		                     on_group(p), color);
	/* the same answer on every rank (the same backends), so nobody is
	 * left waiting in the all-gather below */
	if (!c->cpu.vt->split)
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "group_split: comm backend '%s' (%s, built against accel ABI "
		                     "1.%u) cannot make sub-communicators (it has no split slot); "
		                     "choose a backend that has one (docs/comm.md, \"Groups\")",
		                     c->cpu.module->name, c->cpu.module->path,
		                     c->cpu.module->abi_minor);
	if (p->dev_state && !c->dev.vt->split)
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "group_split: device comm backend '%s' (%s) cannot make "
		                     "sub-communicators (it has no split slot)", c->dev.module->name,
		                     c->dev.module->path);
	uint32_t n = ++p->n_splits;   /* on every rank, NONE included: names stay in step */

	/* Everyone's (colour, key, node) over the parent. */
	int32_t mine[3] = {color, key, ctx->world.node_rank};
	all = malloc(sizeof(int32_t) * 3 * (size_t)p->size);
	if (!all)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	accel_view sv = {sizeof(accel_view), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, mine, 3};
	accel_view rv = {sizeof(accel_view), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, all,
	                 3 * (uint64_t)p->size};
	if ((r = accelp_comm_group_allgather(c, p, &sv, &rv, NULL)))
		goto fail;

	accel_comm_split_v1 args = {.struct_size = sizeof(args), .color = color, .key = key,
	                            .rank = -1, .size = 0};
	char tag[GROUP_TAG_MAX];
	int tl = snprintf(tag, sizeof(tag), "%s%s%uc%d", p->tag, p->tag[0] ? "." : "", n,
	                  color < 0 ? 0 : color);
	if (tl < 0 || (size_t)tl >= sizeof(tag)) {
		r = accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                  "group_split%s: groups nested too deeply (the name of the new "
		                  "group would pass %d characters)", on_group(p), GROUP_TAG_MAX - 1);
		goto fail;
	}
	int64_t keepalive_ms;
	accelp_comm_times(ctx, &args.timeout_ms, &keepalive_ms);
	args.job_id = accelp_comm_job_id(ctx);
	args.tag = tag;
	if (color != ACCEL_COMM_SPLIT_NONE) {
		g = calloc(1, sizeof(*g));
		mem = malloc(sizeof(*mem) * (size_t)p->size);
		if (!g || !mem) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
			goto fail;
		}
		int32_t k = 0;
		for (int32_t q = 0; q < p->size; q++)
			if (all[3 * q] == color)
				mem[k++] = (member){all[3 * q + 1], q};
		qsort(mem, (size_t)k, sizeof(*mem), member_cmp);
		g->comm = c;
		g->size = k;
		g->wranks = malloc(sizeof(int32_t) * (size_t)k);
		g->nodes = malloc(sizeof(int32_t) * (size_t)k);
		pranks = malloc(sizeof(int32_t) * (size_t)k);
		if (!g->wranks || !g->nodes || !pranks) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
			goto fail;
		}
		int32_t nodes = 0, local = 0;
		for (int32_t i = 0; i < k; i++) {
			int32_t q = mem[i].parent_rank;
			pranks[i] = q;
			g->wranks[i] = p->wranks ? p->wranks[q] : q;
			g->nodes[i] = all[3 * q + 2];
			if (q == p->rank)
				g->rank = i;
			local += g->nodes[i] == ctx->world.node_rank;
			int seen = 0;
			for (int32_t j = 0; j < i && !seen; j++)
				seen = g->nodes[j] == g->nodes[i];
			nodes += !seen;
		}
		snprintf(g->tag, sizeof(g->tag), "%s", tag);
		describe_group(g);
		args.rank = g->rank;
		args.size = k;
		args.ranks = g->wranks;
		args.parent_ranks = pranks;
		args.num_nodes = nodes;
		args.local_size = local;
	}
	void *cs = NULL, *ds = NULL;
	if ((r = c->cpu.vt->split(p->cpu_state, &args, &cs))) {
		if (ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "group_split%s: backend %s failed: %s", on_group(p),
			              c->cpu.module->name, accel_status_str(r));
		goto fail;
	}
	if (p->dev_state && (r = c->dev.vt->split(p->dev_state, &args, &ds))) {
		if (cs)
			c->cpu.vt->fini(cs);
		if (ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "group_split%s: device backend %s failed: %s",
			              on_group(p), c->dev.module->name, accel_status_str(r));
		goto fail;
	}
	if (g && !cs) {
		if (ds)
			c->dev.vt->fini(ds);
		r = accelp_err_set(&ctx->err, ACCEL_ERR_INTERNAL,
		                  "group_split: backend %s returned no state for a member",
		                  c->cpu.module->name);
		goto fail;
	}
	free(all);
	free(mem);
	free(pranks);
	if (g) {
		g->cpu_state = cs;
		g->dev_state = ds;
		g->next = c->groups;
		c->groups = g;
		accelp_log(ACCEL_LOG_DEBUG, "group %s: rank %d of %d%s", g->tag, g->rank, g->size,
		          g->what);
	} else {
		if (cs)
			c->cpu.vt->fini(cs);
		if (ds)
			c->dev.vt->fini(ds);
	}
	*ret_group = g;
	return ACCEL_OK;
fail:
	free(all);
	free(mem);
	free(pranks);
	group_destroy(c, g);
	return r;
}

int accelp_comm_group_info(accel_comm *c, accel_group *grp, int32_t *ret_rank, int32_t *ret_size)
{
	accel_group *g = NULL;
	int r = group_of(c, grp, "group_info", &g);
	if (r)
		return r;
	if (ret_rank)
		*ret_rank = g->rank;
	if (ret_size)
		*ret_size = g->size;
	return ACCEL_OK;
}

int accelp_comm_group_world_rank(accel_comm *c, accel_group *grp, int32_t rank,
                                int32_t *ret_world_rank)
{
	accel_group *g = NULL;
	int r = group_of(c, grp, "group_world_rank", &g);
	if (r)
		return r;
	if (!ret_world_rank || rank < 0 || rank >= g->size)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "group_world_rank%s: %s", on_group(g),
		                     !ret_world_rank ? "ret_world_rank is NULL"
		                                     : "rank is outside the group");
	*ret_world_rank = g->wranks ? g->wranks[rank] : rank;
	return ACCEL_OK;
}

accel_group *accelp_comm_group_free(accel_comm *c, accel_group *g)
{
	if (!c || !g || g == &c->world)
		return NULL;
	accel_group **pp = &c->groups;
	while (*pp && *pp != g)
		pp = &(*pp)->next;
	if (!*pp) {
		accelp_log(ACCEL_LOG_WARN, "group_free: %p is not a group of this context (freed "
		          "already?); ignored", (void *)g);
		return NULL;
	}
	*pp = g->next;
	/* Requests of the group not yet waited for: released now, while the
	 * backend state they belong to still exists; taken off the live list
	 * under the lock, waited for outside it (a wait can last timeout_s).
	 * Their staging buffers go back unused and their req_on_done callbacks
	 * are dropped, not run (a later request may get the same address). */
	accel_req *mine = NULL;
	pthread_mutex_lock(&c->live_mu);
	for (accel_req *q = c->live, *nx; q; q = nx) {
		nx = q->next;
		if (q->g != g)
			continue;
		live_unlink_locked(c, q);
		q->next = mine;
		mine = q;
	}
	pthread_mutex_unlock(&c->live_mu);
	for (accel_req *q = mine, *nx; q; q = nx) {
		nx = q->next;
		if (q->breq)
			q->be->vt->wait(q->state, q->breq);
		comm_stage_out(&q->stage, 0, &c->ctx->err);
		accelp_train_drop_callbacks_of(c->ctx->train, q);
		free(q);
	}
	return group_destroy(c, g);
}
