/* SPDX-License-Identifier: MIT */
/* core/comm.c: the core side of collectives.
 *
 * One backend serves host buffers (shm, tcp or mpi); a device backend (nccl)
 * serves CUDA buffers and is brought up on first use, which is collective
 * because every rank issues the same collectives in the same order.  Every
 * call is checked here (dtypes, counts, root) so backends see only valid
 * requests and users get messages that name the argument. */
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

typedef struct comm_backend {
	const accel_module *module;
	const accel_comm_v1 *vt;
	void *state;
	struct accel_host host;
	int up;
	int failed;             /* init failed: not retried (see route()) */
	int starting;           /* inside init(): a device call from it is refused */
	int fail_code;
	char fail_msg[ACCEL_ERRMSG_MAX];
} comm_backend;

struct accel_req {
	comm_backend *be;
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
	char dev_why[ACCEL_ERRMSG_MAX]; /* without one: why nccl cannot be used, or "" */
	uint64_t seq;
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
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void trace_done(accel_comm *c, uint64_t seq, const char *op, int64_t t_issue)
{
	if (c->trace)
		fprintf(c->trace, "%llu %s %lld %lld\n", (unsigned long long)seq, op,
		        (long long)t_issue, (long long)now_ns());
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
	if (p && take) {
		if (q->prev)
			q->prev->next = q->next;
		else
			c->live = q->next;
		if (q->next)
			q->next->prev = q->prev;
	}
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
	accel_comm_times(ctx, &timeout_ms, &keepalive_ms);
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
		.job_id = ctx->job_id[0] ? ctx->job_id : "single",
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
	r = be->vt->init(accel_host_table(), &be->host, &args, &be->state);
	if (r) {
		if (ctx->err.code == ACCEL_OK)
			accel_err_set(&ctx->err, r, "comm backend '%s' (%s) failed to start: %s", name,
			              m->path, accel_status_str(r));
		return r;
	}
	if (!had_err && ctx->err.code != ACCEL_OK) {
		/* an error recorded on the way (a host call that failed) must
		 * not stand in for a later failure's message */
		accel_log(ACCEL_LOG_WARN, "comm backend '%s' (%s) started, but reported on the way: "
		          "%s", name, m->path, ctx->err.msg);
		accel_err_clear(&ctx->err);
	}
	be->up = 1;
	accel_log(ACCEL_LOG_DEBUG, "comm backend %s up (%s)", name, m->path);
	return ACCEL_OK;
}

/* Whether comm backend `name` can be used here.  When a file of that name
 * exists but cannot be used (broken, or two of them), `why` says so; when
 * none exists or this machine lacks its requirements, `why` is empty. */
static int usable(accel_ctx *ctx, const char *name, const accel_module **ret, char *why,
                  size_t cap)
{
	const accel_module *m = NULL;
	accel_err e;
	accel_err_clear(&e);
	why[0] = '\0';
	int r = accelp_loader_find(ctx->loader, ACCEL_MODULE_COMM, name, &m, &e);
	if (r == ACCEL_OK) {
		if (ret)
			*ret = m;
		return 1;
	}
	if (r == ACCEL_ERR_PLUGIN)
		snprintf(why, cap, "%s", e.msg);
	return 0;
}

int accel_comm_new(accel_ctx *ctx, accel_comm **ret_comm)
{
	const char *want = "auto";
	const char *cpu_name = NULL;
	const accel_module *m;
	char why[ACCEL_ERRMSG_MAX];
	int r;

	accel_config_get_string(ctx->cfg, "backend", &want);
	accel_comm *c = calloc(1, sizeof(*c));
	if (!c)
		return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	c->ctx = ctx;
	pthread_mutex_init(&c->live_mu, NULL);
	const char *tp = getenv("ACCEL_TEST_COMM_TRACE");
	if (tp && *tp) {
		char path[4096];
		snprintf(path, sizeof(path), "%s.%d", tp, ctx->world.rank);
		if (!(c->trace = fopen(path, "w")))
			accel_log(ACCEL_LOG_WARN, "ACCEL_TEST_COMM_TRACE: cannot open %s", path);
	}
	if (!strcmp(want, "shm") || !strcmp(want, "mpi") || !strcmp(want, "tcp")) {
		cpu_name = want;
		c->stage_device = 1;
	} else if (!strcmp(want, "nccl")) {
		c->dev_name = "nccl";
	} else if (strcmp(want, "auto") != 0) {
		/* A third-party backend: it carries host buffers when it says it
		 * serves them; one for device buffers only is brought up on the
		 * first device collective, like nccl, and host buffers go where
		 * auto sends them. */
		accel_err e;
		accel_err_clear(&e);
		if ((r = accelp_loader_find(ctx->loader, ACCEL_MODULE_COMM, want, &m, &e))) {
			accel_err_set(&ctx->err, r, "backend '%s' (from %s): %s", want,
			              accel_config_source(ctx->cfg, "backend"),
			              e.msg[0] ? e.msg : accel_status_str(r));
			goto fail;
		}
		uint32_t dev = m->comm->desc->devices;
		if (dev & (1u << ACCEL_DEVICE_CPU)) {
			cpu_name = m->name;
			c->stage_device = 1;
		} else if (dev & (1u << ACCEL_DEVICE_CUDA)) {
			c->dev_name = m->name;
		} else {
			r = accel_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
			                  "backend '%s' (%s) serves neither host nor CUDA buffers "
			                  "(devices 0x%x)", want, m->path, dev);
			goto fail;
		}
	}
	if (!cpu_name) {
		/* auto: mpi when an MPI launcher started us, else shm on one node
		 * and tcp across nodes.  The world says who started us (the
		 * innermost launcher wins); MPI variables inherited from outside
		 * (a shell inside `srun --pty`, then `accel launch`) do not
		 * count. */
		cpu_name = ctx->world.num_nodes > 1 ? "tcp" : "shm";
		int mpi_launcher = ctx->launcher && (!strncmp(ctx->launcher, "mpi", 3) ||
		                                     !strcmp(ctx->launcher, "srun"));
		if (mpi_launcher && usable(ctx, "mpi", &m, why, sizeof(why)) && m->comm->probe) {
			struct accel_host ph = {.ctx = ctx, .module = m, .name = m->name,
			                        .section = m->comm->desc->config_section};
			if (m->comm->probe(accel_host_table(), &ph))
				cpu_name = "mpi";
		} else if (mpi_launcher && why[0]) {
			/* an mpi file that cannot be used is not silently replaced by shm */
			r = accel_err_set(&ctx->err, ACCEL_ERR_PLUGIN, "backend auto under %s: %s",
			                  ctx->launcher, why);
			goto fail;
		}
	}
	if (!c->dev_name && !strcmp(want, "auto")) {
		if (usable(ctx, "nccl", NULL, why, sizeof(why)))
			c->dev_name = "nccl";
		else if (why[0]) {
			/* said now, and again by the first collective on a CUDA buffer */
			accel_log(ACCEL_LOG_WARN, "backend auto: no backend for CUDA buffers: %s", why);
			snprintf(c->dev_why, sizeof(c->dev_why), "%s", why);
		}
	}
	if (!strcmp(cpu_name, "tcp") && strcmp(want, "tcp") != 0 &&
	    !usable(ctx, "tcp", NULL, why, sizeof(why))) {
		r = accel_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
		                  "backend %s: this job spans %d nodes, where host buffers need the tcp "
		                  "backend (or mpi, with the processes started by mpirun or srun), and "
		                  "it cannot be used: %s", want, ctx->world.num_nodes,
		                  why[0] ? why : "no comm backend named 'tcp' is installed (see "
		                                 "'accel plugins list')");
		goto fail;
	}
	if (ctx->world.num_nodes > 1 && !strcmp(cpu_name, "shm")) {
		r = accel_err_set(&ctx->err, ACCEL_ERR_CONFIG,
		                  "backend shm (from %s) works within one node, but this job has %d "
		                  "nodes; across nodes use backend tcp (what auto picks) or mpi under "
		                  "mpirun/srun", accel_config_source(ctx->cfg, "backend"),
		                  ctx->world.num_nodes);
		goto fail;
	}
	if ((r = backend_up(c, &c->cpu, cpu_name, -1)))
		goto fail;
	*ret_comm = c;
	return ACCEL_OK;
fail:
	accel_comm_free(c);
	return r;
}

accel_comm *accel_comm_free(accel_comm *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < c->n_allocs; i++)
		if (c->allocs[i].be->vt->mem_free)
			c->allocs[i].be->vt->mem_free(c->allocs[i].be->state, c->allocs[i].ptr);
	free(c->allocs);
	c->stage = comm_stage_pool_free(c->stage);
	if (c->dev.up)
		c->dev.vt->fini(c->dev.state);
	if (c->cpu.up)
		c->cpu.vt->fini(c->cpu.state);
	/* The backends released their own requests in fini. */
	size_t never = 0;
	for (accel_req *q = c->live, *nx; q; q = nx) {
		nx = q->next;
		free(q);
		never++;
	}
	if (never)
		accel_log(ACCEL_LOG_DEBUG, "%zu collective request%s never waited for", never,
		          never == 1 ? " was" : "s were");
	pthread_mutex_destroy(&c->live_mu);
	if (c->trace)
		fclose(c->trace);
	free(c);
	return NULL;
}

void accel_comm_times(const accel_ctx *ctx, int64_t *ret_timeout_ms, int64_t *ret_keepalive_ms)
{
	double timeout_s = 300, keepalive_s = 30;
	accel_config_get_double(ctx->cfg, "comm.timeout_s", &timeout_s);
	accel_config_get_double(ctx->cfg, "comm.keepalive_s", &keepalive_s);
	*ret_timeout_ms = (int64_t)(timeout_s * 1000.0);
	*ret_keepalive_ms = (int64_t)ceil(keepalive_s * 1000.0);
}

const char *accel_comm_backend_name(const accel_comm *c)
{
	return c && c->cpu.up ? c->cpu.module->name : "none";
}

const char *accel_comm_device_backend_name(const accel_comm *c, int *ret_staged)
{
	*ret_staged = 0;
	if (!c)
		return "none";
	if (c->stage_device && !c->dev_name) {
		*ret_staged = 1;
		return accel_comm_backend_name(c);
	}
	return c->dev.up ? c->dev.module->name : c->dev_name ? c->dev_name : "none";
}

/* ---- routing and checks ---------------------------------------------------------- */

uint64_t accel_comm_seq(const accel_comm *c)
{
	return c->seq;
}

static int route(accel_comm *c, const accel_view *v, const char *op, comm_backend **ret_be)
{
	accel_ctx *ctx = c->ctx;
	if (v->device == ACCEL_DEVICE_CPU) {
		*ret_be = &c->cpu;
		return ACCEL_OK;
	}
	if (v->device != ACCEL_DEVICE_CUDA)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: unknown device %d", op,
		                     v->device);
	if (c->stage_device && !c->dev_name) {
		/* staged through the host backend by the caller (comm_stage.h) */
		if (!c->stage && comm_stage_pool_new(&c->stage, &ctx->err))
			return ACCEL_ERR_NOMEM;
		*ret_be = &c->cpu;
		return ACCEL_OK;
	}
	if (!c->dev.up) {
		if (!c->dev_name)
			return accel_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
			                     "%s on a cuda:%d buffer needs a backend for device buffers "
			                     "(nccl), and none is in use (backend '%s' serves host "
			                     "buffers; name it in the config, backend: \"%s\", to stage "
			                     "device buffers through host memory; nccl: %s)", op,
			                     v->device_index, c->cpu.module->name,
			                     c->cpu.module->name,
			                     c->dev_why[0] ? c->dev_why
			                                   : "not built, or no GPU; see 'accel plugins "
			                                     "list'");
		/* Bringing the device backend up is collective (its bootstrap
		 * counts communicators in the store); after a failure the ranks
		 * no longer agree on that count, so a retry could join a dead
		 * bootstrap.  Every later call repeats the first reason. */
		if (c->dev.failed)
			return accel_err_set(&ctx->err, c->dev.fail_code,
			                     "%s on a cuda:%d buffer: the %s backend failed to start "
			                     "earlier and is not retried: %s", op, v->device_index,
			                     c->dev_name, c->dev.fail_msg);
		/* init() may use host collectives (nccl bootstraps over them
		 * without a store); one on a device buffer would start init()
		 * again, without end. */
		if (c->dev.starting)
			return accel_err_set(&ctx->err, ACCEL_ERR_STATE,
			                     "%s on a cuda:%d buffer from inside the %s backend's init(): "
			                     "a device backend can use host buffers only while it starts",
			                     op, v->device_index, c->dev_name);
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
	}
	*ret_be = &c->dev;
	return ACCEL_OK;
}

static int check_view(accel_comm *c, const accel_view *v, const char *op, const char *which,
                      int reduce)
{
	accel_ctx *ctx = c->ctx;
	if (!v)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s is NULL", op, which);
	if (v->struct_size < sizeof(accel_view))
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s.struct_size is %u, expected at least %zu (set it to "
		                     "sizeof(accel_view))", op, which, v->struct_size, sizeof(accel_view));
	if (accel_dtype_size(v->dtype) == 0)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has invalid dtype %u",
		                     op, which, v->dtype);
	if (reduce && v->dtype != ACCEL_DTYPE_F32 && v->dtype != ACCEL_DTYPE_F64 &&
	    v->dtype != ACCEL_DTYPE_F16 && v->dtype != ACCEL_DTYPE_BF16 &&
	    v->dtype != ACCEL_DTYPE_I32 && v->dtype != ACCEL_DTYPE_I64)
		return accel_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "%s: reductions over %s are not supported (f32, f64, f16, bf16, "
		                     "i32, i64 are)", op, accel_dtype_name(v->dtype));
	if (v->numel && !v->data)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s has %llu elements but a NULL data pointer", op, which,
		                     (unsigned long long)v->numel);
	/* numel * world * 8 must fit comfortably in 64 bits (and in memory) */
	if (v->numel > (UINT64_C(1) << 56) / 8 / (uint64_t)ctx->world.world_size)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has %llu elements, too many",
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
static int check_overlap(accel_comm *c, const accel_view *s, const accel_view *d, const char *op)
{
	accel_ctx *ctx = c->ctx;
	size_t es = accel_dtype_size(s->dtype);
	if (!overlap(s, d) || s->data == d->data)
		return ACCEL_OK;
	if (!strcmp(op, "reduce_scatter") &&
	    (const char *)d->data == (const char *)s->data + (uint64_t)ctx->world.rank * d->numel * es)
		return ACCEL_OK;
	if (!strcmp(op, "allgather") &&
	    (const char *)s->data == (const char *)d->data + (uint64_t)ctx->world.rank * s->numel * es)
		return ACCEL_OK;
	return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
	                     "%s: send [%p, +%llu) and recv [%p, +%llu) overlap; in place means %s",
	                     op, s->data, (unsigned long long)(s->numel * es), d->data,
	                     (unsigned long long)(d->numel * es),
	                     !strcmp(op, "allreduce") ? "send == recv"
	                     : !strcmp(op, "reduce_scatter")
	                         ? "recv == send or recv == send + rank * recv count"
	                         : "send == recv or send == recv + rank * send count");
}

static int check_pair(accel_comm *c, const accel_view *s, const accel_view *d, const char *op,
                      int reduce, uint64_t want_send, uint64_t want_recv)
{
	accel_ctx *ctx = c->ctx;
	int r;
	if ((r = check_view(c, s, op, "send", reduce)) || (r = check_view(c, d, op, "recv", reduce)))
		return r;
	if (s->dtype != d->dtype)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: send is %s but recv is %s", op, accel_dtype_name(s->dtype),
		                     accel_dtype_name(d->dtype));
	if (s->device != d->device || s->device_index != d->device_index)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: send and recv are on different devices", op);
	if (s->numel != want_send || d->numel != want_recv)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: with %d ranks, send has %llu elements and recv %llu; "
		                     "expected %llu and %llu", op, ctx->world.world_size,
		                     (unsigned long long)s->numel, (unsigned long long)d->numel,
		                     (unsigned long long)want_send, (unsigned long long)want_recv);
	return check_overlap(c, s, d, op);
}

static int check_op(accel_comm *c, uint32_t op, const char *what)
{
	if (op > ACCEL_RED_MIN)
		return accel_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: unknown reduction %u (ACCEL_RED_SUM, _AVG, _MAX, _MIN)", what,
		                     op);
	return ACCEL_OK;
}

/* Issue through the backend; wait at once when the caller wants a blocking call. */
static int finish(accel_comm *c, comm_backend *be, const char *op, int r, accel_comm_req *breq,
                  accel_req **ret_req, comm_staged *st)
{
	accel_ctx *ctx = c->ctx;
	if (r) {
		if (ctx->err.code == ACCEL_OK)
			accel_err_set(&ctx->err, r, "%s (after #%llu) failed in backend %s: %s", op,
			              (unsigned long long)c->seq, be->module->name, accel_status_str(r));
		comm_stage_out(st, 0, &ctx->err);
		return r;
	}
	uint64_t seq = ++c->seq;
	int64_t t_issue = c->trace ? now_ns() : 0;
	if (!ret_req) {
		r = breq ? be->vt->wait(be->state, breq) : ACCEL_OK;
		trace_done(c, seq, op, t_issue);
		if (r && ctx->err.code == ACCEL_OK)
			accel_err_set(&ctx->err, r, "%s #%llu failed in backend %s: %s", op,
			              (unsigned long long)seq, be->module->name, accel_status_str(r));
		int s = comm_stage_out(st, r == ACCEL_OK, &ctx->err);
		return r ? r : s;
	}
	accel_req *q = malloc(sizeof(*q));
	if (!q) {
		if (breq)
			be->vt->wait(be->state, breq);
		comm_stage_out(st, 0, &ctx->err);
		return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	}
	*q = (accel_req){.be = be, .breq = breq, .op = op, .seq = seq, .t_issue_ns = t_issue,
	                 .stage = *st};
	pthread_mutex_lock(&c->live_mu);
	q->next = c->live;
	if (c->live)
		c->live->prev = q;
	c->live = q;
	pthread_mutex_unlock(&c->live_mu);
	*ret_req = q;
	return ACCEL_OK;
}

int accel_comm_allreduce(accel_comm *c, const accel_view *send, const accel_view *recv,
                         uint32_t op, accel_req **ret_req)
{
	comm_backend *be = NULL;
	accel_comm_req *breq = NULL;
	int r = check_op(c, op, "allreduce");
	if (r || (r = check_pair(c, send, recv, "allreduce", 1, send ? send->numel : 0,
	                         send ? send->numel : 0)) ||
	    (r = route(c, send, "allreduce", &be)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	if (send->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		if ((r = comm_stage_in(c->stage, send, recv, send->numel, 0, 0, &hs, &hr, &st,
		                       &c->ctx->err)))
			return r;
		send = recv = &hs;
	}
	r = be->vt->allreduce(be->state, send, recv, op, &breq);
	return finish(c, be, "allreduce", r, breq, ret_req, &st);
}

int accel_comm_reduce_scatter(accel_comm *c, const accel_view *send, const accel_view *recv,
                              uint32_t op, accel_req **ret_req)
{
	comm_backend *be = NULL;
	accel_comm_req *breq = NULL;
	uint64_t n = recv ? recv->numel : 0;
	int r = check_op(c, op, "reduce_scatter");
	if (r || (r = check_pair(c, send, recv, "reduce_scatter", 1,
	                         n * (uint64_t)c->ctx->world.world_size, n)) ||
	    (r = route(c, send, "reduce_scatter", &be)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	if (send->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		/* the in-place form: this rank's block of the staged send */
		if ((r = comm_stage_in(c->stage, send, recv, send->numel, 0,
		                       n * (uint64_t)c->ctx->world.rank, &hs, &hr, &st, &c->ctx->err)))
			return r;
		send = &hs;
		recv = &hr;
	}
	r = be->vt->reduce_scatter(be->state, send, recv, op, &breq);
	return finish(c, be, "reduce_scatter", r, breq, ret_req, &st);
}

int accel_comm_allgather(accel_comm *c, const accel_view *send, const accel_view *recv,
                         accel_req **ret_req)
{
	comm_backend *be = NULL;
	accel_comm_req *breq = NULL;
	uint64_t n = send ? send->numel : 0;
	int r = check_pair(c, send, recv, "allgather", 0, n, n * (uint64_t)c->ctx->world.world_size);
	if (r || (r = route(c, send, "allgather", &be)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	if (send->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		/* the in-place form: send at this rank's block of the staged recv */
		if ((r = comm_stage_in(c->stage, send, recv, recv->numel,
		                       n * (uint64_t)c->ctx->world.rank, 0, &hs, &hr, &st, &c->ctx->err)))
			return r;
		send = &hs;
		recv = &hr;
	}
	r = be->vt->allgather(be->state, send, recv, &breq);
	return finish(c, be, "allgather", r, breq, ret_req, &st);
}

int accel_comm_broadcast(accel_comm *c, const accel_view *buf, int32_t root, accel_req **ret_req)
{
	comm_backend *be = NULL;
	accel_comm_req *breq = NULL;
	int r = check_view(c, buf, "broadcast", "buffer", 0);
	if (r)
		return r;
	if (root < 0 || root >= c->ctx->world.world_size)
		return accel_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "broadcast: root %d is not a rank (world size %d)", root,
		                     c->ctx->world.world_size);
	if ((r = route(c, buf, "broadcast", &be)))
		return r;
	comm_staged st = {0};
	accel_view hs, hr;
	if (buf->device != ACCEL_DEVICE_CPU && be == &c->cpu) {
		if ((r = comm_stage_in(c->stage, buf, buf, buf->numel, 0, 0, &hs, &hr, &st,
		                       &c->ctx->err)))
			return r;
		buf = &hs;
	}
	r = be->vt->broadcast(be->state, buf, root, &breq);
	return finish(c, be, "broadcast", r, breq, ret_req, &st);
}

int accel_comm_barrier(accel_comm *c, accel_req **ret_req)
{
	accel_comm_req *breq = NULL;
	comm_staged st = {0};
	int r = c->cpu.vt->barrier(c->cpu.state, &breq);
	return finish(c, &c->cpu, "barrier", r, breq, ret_req, &st);
}

int accel_comm_wait(accel_comm *c, accel_req *req)
{
	if (!req)
		return accel_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG, "wait: request is NULL");
	if (!req_find(c, req, 1))
		return accel_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "wait: %p is not a collective in flight on this context (waited "
		                     "for already?)", (void *)req);
	int r = req->breq ? req->be->vt->wait(req->be->state, req->breq) : ACCEL_OK;
	trace_done(c, req->seq, req->op, req->t_issue_ns);
	if (r && c->ctx->err.code == ACCEL_OK)
		accel_err_set(&c->ctx->err, r, "%s #%llu failed in backend %s: %s", req->op,
		              (unsigned long long)req->seq, req->be->module->name, accel_status_str(r));
	int s = comm_stage_out(&req->stage, r == ACCEL_OK, &c->ctx->err);
	free(req);
	return r ? r : s;
}

int accel_comm_test(accel_comm *c, accel_req *req, int32_t *ret_done)
{
	if (!req || !ret_done)
		return accel_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG, "test: NULL argument");
	if (!req_find(c, req, 0))
		return accel_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "test: %p is not a collective in flight on this context (waited "
		                     "for already?)", (void *)req);
	if (!req->breq) {
		*ret_done = 1;
		return ACCEL_OK;
	}
	return req->be->vt->test(req->be->state, req->breq, ret_done);
}

int accel_comm_mem_alloc(accel_comm *c, int32_t device, int32_t device_index, uint64_t bytes,
                         void **ret_ptr)
{
	accel_view probe = {.struct_size = sizeof(probe), .dtype = ACCEL_DTYPE_U8, .device = device,
	                    .device_index = device_index};
	comm_backend *be = NULL;
	void *p = NULL;
	int r = route(c, &probe, "mem_alloc", &be);
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
			return accel_err_set(&c->ctx->err, ACCEL_ERR_NOMEM, "out of memory");
		c->allocs = na;
		c->cap_allocs = cap;
	}
	if ((r = be->vt->mem_alloc(be->state, device, device_index, bytes, &p)))
		return r;
	c->allocs[c->n_allocs++] = (comm_alloc){p, be};
	*ret_ptr = p;
	return ACCEL_OK;
}

int accel_comm_mem_free(accel_comm *c, void *ptr)
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
