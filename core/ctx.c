/* SPDX-License-Identifier: MIT */
/* core/ctx.c: the context: configuration, loader, processes, comm backend,
 * plugins; and the small public API around it (errors, ranks, printing,
 * config reads, blocking collectives). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ckpt_impl.h"
#include "comm.h"
#include "config.h"
#include "ctx-impl.h"
#include "train-impl.h"
#include "kv.h"
#include "loader.h"
#include "log.h"
#include "mem.h"
#include "mpi_store.h"
#include "optim_pool.h"
#include "sampler.h"
#include "select.h"
#include "setup.h"
#include "store.h"
#include "stream.h"
#include "train.h"
#include "world.h"
#include "restart.h"

/* ---- creation ------------------------------------------------------------------ */

/* What a plugin's init or validate returned, made safe to pass on: a
 * positive value (no ACCEL_* status is positive) is a plugin bug, and an
 * error recorded through host->error by a call that then returned OK must
 * not stand in for a later failure's message. */
static int plugin_status(accel_ctx *ctx, const accel_module *m, const char *slot, int r)
{
	if (r > 0) {
		accelp_err_clear(&ctx->err);
		return accelp_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
		                     "plugin '%s' (%s): %s returned %d, which is not an accel status "
		                     "(ACCEL_OK or a negative ACCEL_ERR_*)", m->name, m->path, slot, r);
	}
	if (r == ACCEL_OK && ctx->err.code != ACCEL_OK) {
		accelp_log(ACCEL_LOG_WARN, "plugin '%s' (%s): %s reported an error but returned "
		          "ACCEL_OK; going on: %s", m->name, m->path, slot, ctx->err.msg);
		accelp_err_clear(&ctx->err);
	}
	return r;
}

/* Each plugin's caps for this configuration (ABI minor 6), a subset of
 * its descriptor's; then the reduce-hook check that needs the strategy's. */
static int instance_caps(accel_ctx *ctx)
{
	int r;
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		uint32_t caps = 0, all = a->vt->desc->caps;
		if (!a->vt->instance_caps)
			continue;  /* older than minor 6 (zero-padded by the loader) or static */
		r = plugin_status(ctx, a->module, "instance_caps", a->vt->instance_caps(a->state, &caps));
		if (r)
			return ctx->err.code ? ctx->err.code
			                     : accelp_err_set(&ctx->err, r, "plugin '%s' (%s): "
			                                     "instance_caps failed with %s and no message",
			                                     a->module->name, a->module->path,
			                                     accel_status_str(r));
		if (caps & ~all)
			return accelp_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
			                     "plugin '%s' (%s): instance_caps reported 0x%x, which has bits "
			                     "0x%x outside its descriptor's caps 0x%x (desc->caps must be "
			                     "the union over every configuration): fix the plugin",
			                     a->module->name, a->module->path, caps, caps & ~all, all);
		a->caps = caps;
		if (caps != all)
			accelp_log(ACCEL_LOG_DEBUG, "plugin '%s': instance caps 0x%x (descriptor 0x%x)",
			          a->module->name, caps, all);
	}
	for (uint32_t i = 1; i < ctx->n_active; i++)
		if (ctx->active[i].vt->desc->role == ACCEL_ROLE_REDUCE_HOOK &&
		    (r = accelp_select_check_reduce_hook(ctx->active[0].module, ctx->active[0].caps,
		                                        ctx->active[i].module, &ctx->err)))
			return r;
	return ACCEL_OK;
}

static int activate_plugins(accel_ctx *ctx, const accel_select *sel, const accel_module **mods)
{
	int r;
	ctx->active = calloc(sel->n, sizeof(*ctx->active));
	if (!ctx->active)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < sel->n; i++) {
		const accel_module *m = mods[i];
		accel_active *a = &ctx->active[ctx->n_active++];
		a->module = m;
		a->vt = m->plugin;
		a->host.ctx = ctx;
		a->host.module = m;
		a->host.name = m->name;
		a->host.section = m->plugin->desc->config_section;
		a->caps = m->plugin->desc->caps;
	}
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		void *state = NULL;
		/* The run-time availability check (ABI minor 3) comes first. */
		if (a->vt->available) {
			r = plugin_status(ctx, a->module, "available",
			                  a->vt->available(accelp_host_table(), &a->host));
			if (r) {
				char msg[ACCEL_ERRMSG_MAX];
				snprintf(msg, sizeof(msg), "%s",
				         ctx->err.code ? ctx->err.msg : "no reason given");
				accelp_err_clear(&ctx->err);
				return accelp_err_set(&ctx->err,
				                     r == ACCEL_ERR_UNSUPPORTED ? r : ACCEL_ERR_PLUGIN,
				                     "plugin '%s' (%s) is not available in this process "
				                     "(%s): %s", a->module->name, a->module->path,
				                     accel_status_str(r), msg);
			}
		}
		r = a->vt->init(accelp_host_table(), &a->host, &state);
		r = plugin_status(ctx, a->module, "init", r);
		if (r) {
			if (ctx->err.code == ACCEL_OK)
				accelp_err_set(&ctx->err, r, "plugin '%s' (%s): init failed with %s and no "
				              "message", a->module->name, a->module->path,
				              accel_status_str(r));
			else if (!strstr(ctx->err.msg, a->module->path)) {
				/* Name the file: the plugin only knows its own name. */
				char msg[ACCEL_ERRMSG_MAX + 1024];
				if (snprintf(msg, sizeof(msg), "%s (plugin file %s)", ctx->err.msg,
				             a->module->path) > 0) {
					memcpy(ctx->err.msg, msg, sizeof(ctx->err.msg) - 1);
					ctx->err.msg[sizeof(ctx->err.msg) - 1] = '\0';
				}
			}
			return r;
		}
		a->state = state;
		a->inited = 1;
	}
	if ((r = instance_caps(ctx)))
		return r;
	const char *names[ACCEL_SELECT_MAX];
	uint32_t roles[ACCEL_SELECT_MAX], caps[ACCEL_SELECT_MAX];
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		names[i] = ctx->active[i].module->name;
		roles[i] = ctx->active[i].vt->desc->role;
		caps[i] = ctx->active[i].caps;
	}
	accel_selection_v1 s = {
		.struct_size = sizeof(s),
		.n_plugins = ctx->n_active,
		.names = names,
		.roles = roles,
		.backend = ctx->comm ? accelp_comm_backend_name(ctx->comm) : "none",
		.world_size = ctx->world.world_size,
		.caps = caps,
	};
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->vt->validate &&
		    (r = plugin_status(ctx, a->module, "validate", a->vt->validate(a->state, &s))))
			return ctx->err.code ? ctx->err.code
			                     : accelp_err_set(&ctx->err, r, "plugin '%s' (%s) refused the "
			                                     "selection (%s, no message)", a->module->name,
			                                     a->module->path, accel_status_str(r));
	}
	return ACCEL_OK;
}

static int setup_processes(accel_ctx *ctx)
{
	int r = accelp_world_from_env(&ctx->world, ctx->job_id, sizeof(ctx->job_id), ctx->master_addr,
	                           sizeof(ctx->master_addr), &ctx->master_port, &ctx->launcher,
	                           &ctx->err);
	if (r)
		return r;
	accelp_log_set_rank(ctx->world.rank);
	if (ctx->world.world_size > 1) {
		if (ctx->master_addr[0] && ctx->master_port > 0) {
			int64_t timeout_ms, keepalive_ms;
			accelp_comm_times(ctx, &timeout_ms, &keepalive_ms);
			return accelp_store_new_keepalive(ctx->master_addr, ctx->master_port,
			                                 ctx->world.rank, ctx->world.world_size,
			                                 timeout_ms, keepalive_ms, &ctx->store, &ctx->err);
		}
		if (!ctx->launcher || strncmp(ctx->launcher, "mpi", 3) != 0)
			return accelp_err_set(&ctx->err, ACCEL_ERR_CONFIG,
			                     "rank %d of %d: no rendezvous address; start the program "
			                     "with 'accel launch', or set ACCEL_MASTER_ADDR and "
			                     "ACCEL_MASTER_PORT", ctx->world.rank,
			                     ctx->world.world_size);
		/* The mpi backend bootstraps through MPI itself, and then
		 * mpi_store() may give the job a store over it; a backend that
		 * needs the store while it starts says so when it asks (host.c). */
		accelp_log(ACCEL_LOG_DEBUG, "started by %s without ACCEL_MASTER_ADDR/PORT: no "
		          "rendezvous store while the comm backend starts", ctx->launcher);
	}
	/* No rendezvous server: the store calls go to an in-process map. */
	if (accelp_kv_new(&ctx->local_store))
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	return ACCEL_OK;
}

/* Configuration, loader, schemas and selection (core/setup.c), the same
 * set-up `accel config` and `accel plugins` run; the context keeps the
 * configuration and the loader. */
static int setup(accel_ctx *ctx, const accel_opts *opts, accel_select *ret_sel)
{
	accelp_setup_opts so = {
		.config_json = opts ? opts->config_json : NULL,
		.config_path = opts ? opts->config_path : NULL,
		.config_path_from = "accel_opts.config_path",
		.skip_env = opts && opts->skip_env,
		.sets = opts ? opts->sets : NULL,
		.sets_origin = "accel_opts.sets",
		.resolve = 1,
		.module_errors_first = 1,
	};
	accelp_setup s;
	int r = accelp_setup_run(&so, &s, &ctx->err);
	ctx->cfg = s.cfg;
	ctx->loader = s.loader;
	s.cfg = NULL;
	s.loader = NULL;
	*ret_sel = s.sel;
	accelp_setup_fini(&s);
	return r;
}

int accel_ctx_new(const accel_opts *opts, accel_ctx **ret_ctx)
{
	accel_ctx *ctx;
	accel_select sel;
	const accel_module *mods[ACCEL_SELECT_MAX];
	int r;
	const char *lv;

	if (!ret_ctx)
		return ACCEL_ERR_INVALID_ARG;
	*ret_ctx = NULL;
	if (opts && opts->struct_size < offsetof(accel_opts, skip_env) + sizeof(opts->skip_env))
		return ACCEL_ERR_INVALID_ARG;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return ACCEL_ERR_NOMEM;
	*ret_ctx = ctx;
	accelp_log_init();
	ctx->world = (accel_world_v1){.struct_size = sizeof(accel_world_v1), .world_size = 1,
	                              .local_world_size = 1, .num_nodes = 1};
	if ((r = accelp_mem_new(&ctx->mem)))
		return accelp_err_set(&ctx->err, r, "out of memory");
	if ((r = setup(ctx, opts, &sel)))
		goto fail;
	/* The resolved value includes ACCEL_LOG_LEVEL (the env layer). */
	if (accelp_config_get_string(ctx->cfg, "log_level", &lv) == ACCEL_OK)
		accelp_log_set_level(accelp_log_level_parse(lv));
	if ((r = setup_processes(ctx)))
		goto fail;
	if ((r = accelp_restart_init(ctx, opts && opts->skip_env)))
		goto fail;
	/* After the store is up: a plugin missing on this node only must be
	 * reported to the other ranks (the fail path below), not leave them
	 * waiting until comm.timeout_s. */
	if ((r = accelp_select_modules(&sel, ctx->loader, 0, mods, &ctx->err)))
		goto fail;
	if ((r = accelp_comm_new(ctx, &ctx->comm)) || (r = accelp_mpi_store_start(ctx)))
		goto fail;
	if ((r = activate_plugins(ctx, &sel, mods)))
		goto fail;
	if ((r = accelp_train_new(ctx, &ctx->train)))
		goto fail;
	accelp_log(ACCEL_LOG_DEBUG, "context ready: rank %d/%d, strategy %s, backend %s, launcher %s",
	          ctx->world.rank, ctx->world.world_size, sel.names[0],
	          accelp_comm_backend_name(ctx->comm), ctx->launcher ? ctx->launcher : "none");
	return ACCEL_OK;

fail:
	if (ctx->err.code == ACCEL_OK)
		accelp_err_set(&ctx->err, r, "context creation failed: %s", accel_status_str(r));
	/* The others must not wait for this rank until their timeouts (and
	 * rank 0 must not keep the store up for them). */
	if (ctx->store)
		accelp_store_fail(ctx->store, ctx->err.msg);
	return ctx->err.code;
}

accel_ctx *accel_ctx_free(accel_ctx *ctx)
{
	if (!ctx)
		return NULL;
	/* Plugins may read the model until fini (plugin.h), so they go first;
	 * a request a strategy waits for in its fini must not call back into
	 * a hook finalized before it. */
	accelp_train_drop_callbacks(ctx->train);
	for (uint32_t i = ctx->n_active; i-- > 0;)
		if (ctx->active[i].inited)
			ctx->active[i].vt->fini(ctx->active[i].state);
	free(ctx->active);
	ctx->optim_pool = accelp_optim_pool_free(ctx->optim_pool);
	for (uint32_t i = 0; i < ctx->n_samplers; i++)
		accelp_sampler_detach(ctx->samplers[i]);
	free(ctx->samplers);
	free(ctx->rngs);
	accelp_ckpt_project_release(ctx);   /* the project directory's lock */
	ctx->train = accelp_train_free(ctx->train);
	/* Buffers from the backend go back before the backend goes away. */
	ctx->mem = accelp_mem_free_all(ctx->mem, ctx);
	ctx->comm = accelp_comm_free(ctx->comm);
	ctx->store = accelp_store_free(ctx->store);
	ctx->local_store = accelp_kv_free(ctx->local_store);
	/* Plugins stay mapped: see docs/abi.md ("no unloading"). */
	ctx->loader = accelp_loader_free(ctx->loader);
	ctx->cfg = accelp_config_free(ctx->cfg);
	accelp_stream_forget(ctx);
	accelp_restart_free(ctx);
	free(ctx);
	return NULL;
}

const void *accel_plugin_extension(accel_ctx *ctx, const char *plugin, const char *name,
                                   uint32_t version)
{
	if (!ctx || !plugin || !name)
		return NULL;
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (!a->inited || strcmp(a->module->name, plugin) != 0)
			continue;
		const void *ext = a->vt->extension ? a->vt->extension(a->state, name, version) : NULL;
		if (!ext)
			accelp_err_set(&ctx->err, ACCEL_ERR_NOT_FOUND,
			              "plugin '%s' (%s) has no extension '%s' version %u", plugin,
			              a->module->path, name, version);
		return ext;
	}
	accelp_err_set(&ctx->err, ACCEL_ERR_NOT_FOUND, "no active plugin named '%s' (extension '%s')",
	              plugin, name);
	return NULL;
}

/* ---- errors -------------------------------------------------------------------- */

const char *accel_errmsg(const accel_ctx *ctx)
{
	return ctx ? ctx->err.msg : "no context";
}

int accel_errcode(const accel_ctx *ctx)
{
	return ctx ? ctx->err.code : ACCEL_ERR_INVALID_ARG;
}

void accel_clear_error(accel_ctx *ctx)
{
	if (ctx)
		accelp_err_clear(&ctx->err);
}

int accel_set_error(accel_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	if (!ctx)
		return code;
	va_start(ap, fmt);
	accelp_err_setv(&ctx->err, code, fmt, ap);
	va_end(ap);
	return code;
}

/* ---- processes ----------------------------------------------------------------- */

int accel_rank(const accel_ctx *ctx)
{
	return ctx ? ctx->world.rank : 0;
}

int accel_world_size(const accel_ctx *ctx)
{
	return ctx ? ctx->world.world_size : 1;
}

int accel_local_rank(const accel_ctx *ctx)
{
	return ctx ? ctx->world.local_rank : 0;
}

int accel_local_world_size(const accel_ctx *ctx)
{
	return ctx ? ctx->world.local_world_size : 1;
}

int accel_is_main(const accel_ctx *ctx)
{
	return accel_rank(ctx) == 0;
}

int accel_is_local_main(const accel_ctx *ctx)
{
	return accel_local_rank(ctx) == 0;
}

static int need_comm(accel_ctx *ctx, const char *what)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!ctx->comm)
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE,
		                     "%s: the context has no comm backend (creation failed: %s)", what,
		                     ctx->err.code ? ctx->err.msg : "unknown");
	return ACCEL_OK;
}

int accel_wait_for_everyone(accel_ctx *ctx)
{
	int r = need_comm(ctx, "accel_wait_for_everyone");
	return r ? r : accelp_comm_barrier(ctx->comm, NULL);
}

void accel_print(const accel_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	if (!accel_is_main(ctx))
		return;
	if (ctx->train)
		accelp_progress_clear(ctx->train);   /* a message below the bar, not on it */
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fflush(stdout);
}

void accel_log_msg(const accel_ctx *ctx, int level, const char *fmt, ...)
{
	va_list ap;
	(void)ctx;
	va_start(ap, fmt);
	accelp_logv(level, fmt, ap);
	va_end(ap);
}

/* ---- configuration ------------------------------------------------------------- */

int accel_config_int(const accel_ctx *ctx, const char *path, int64_t *ret_value)
{
	return ctx && ctx->cfg ? accelp_config_get_int(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

int accel_config_double(const accel_ctx *ctx, const char *path, double *ret_value)
{
	return ctx && ctx->cfg ? accelp_config_get_double(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

int accel_config_bool(const accel_ctx *ctx, const char *path, int32_t *ret_value)
{
	return ctx && ctx->cfg ? accelp_config_get_bool(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

int accel_config_string(const accel_ctx *ctx, const char *path, const char **ret_value)
{
	return ctx && ctx->cfg ? accelp_config_get_string(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

/* ---- blocking collectives on user memory --------------------------------------- */

/* User memory is host memory unless the pointer is device memory; routing by
 * pointer needs the cuda module, so until then views are CPU views. */
static accel_view user_view(const void *p, uint64_t count, uint32_t dtype)
{
	return (accel_view){.struct_size = sizeof(accel_view), .dtype = dtype,
	                    .device = ACCEL_DEVICE_CPU, .data = (void *)(uintptr_t)p,
	                    .numel = count};
}

int accel_allreduce(accel_ctx *ctx, const void *send, void *recv, uint64_t count, uint32_t dtype,
                    uint32_t op)
{
	int r = need_comm(ctx, "accel_allreduce");
	accel_view s = user_view(send, count, dtype), d = user_view(recv, count, dtype);
	return r ? r : accelp_comm_allreduce(ctx->comm, &s, &d, op, NULL);
}

int accel_broadcast(accel_ctx *ctx, void *buf, uint64_t count, uint32_t dtype, int root)
{
	int r = need_comm(ctx, "accel_broadcast");
	accel_view b = user_view(buf, count, dtype);
	return r ? r : accelp_comm_broadcast(ctx->comm, &b, root, NULL);
}

int accel_allgather(accel_ctx *ctx, const void *send, void *recv, uint64_t sendcount,
                    uint32_t dtype)
{
	int r = need_comm(ctx, "accel_allgather");
	if (r)
		return r;
	accel_view s = user_view(send, sendcount, dtype);
	accel_view d = user_view(recv, sendcount * (uint64_t)ctx->world.world_size, dtype);
	return accelp_comm_allgather(ctx->comm, &s, &d, NULL);
}

int accel_reduce_scatter(accel_ctx *ctx, const void *send, void *recv, uint64_t recvcount,
                         uint32_t dtype, uint32_t op)
{
	int r = need_comm(ctx, "accel_reduce_scatter");
	if (r)
		return r;
	accel_view s = user_view(send, recvcount * (uint64_t)ctx->world.world_size, dtype);
	accel_view d = user_view(recv, recvcount, dtype);
	return accelp_comm_reduce_scatter(ctx->comm, &s, &d, op, NULL);
}
