/* SPDX-License-Identifier: MIT */
/* core/comm.c: the core side of collectives: the communicator's life cycle
 * and its backends.
 *
 * One backend serves host buffers; a device backend serves CUDA buffers
 * and is brought up on first use, which is collective because every rank
 * issues the same collectives in the same order.  Which backends: the one
 * config `backend` names, or under "auto" the one core/select.c picks from
 * the descriptors (no backend is known here by name).  Every call is
 * checked once (comm_check.c: dtypes, counts, root) so backends see only
 * valid requests and users get messages that name the argument; comm_coll.c
 * issues the collectives and completes them.  Groups (sub-communicators,
 * accel_comm_group_*, comm_group.c) are states the backends' split() made;
 * the world is the group every context has.  comm-impl.h holds what these
 * files share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm-impl.h"
#include "config.h"
#include "loader.h"
#include "log.h"
#include "select.h"

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

uint64_t accelp_comm_seq(const accel_comm *c)
{
	return c->world.seq;
}

/* ---- routing ----------------------------------------------------------------------- */

int accelp_comm_route(accel_comm *c, accel_group *g, const accel_view *v, const char *op,
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
			                     op, v->device_index, accelp_comm_on_group(g), c->dev_name);
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
		                     op, v->device_index, accelp_comm_on_group(g), c->dev.module->name);
	*ret_be = &c->dev;
	*ret_state = g->dev_state;
	return ACCEL_OK;
}

/* ---- backend memory ---------------------------------------------------------------- */

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
	int r = accelp_comm_route(c, &c->world, &probe, "mem_alloc", &be, &state);
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

/* ---- statistics -------------------------------------------------------------------- */

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
