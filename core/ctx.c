/* SPDX-License-Identifier: MIT */
/* core/ctx.c: the context: configuration, loader, processes, comm backend,
 * plugins; and the small public API around it (errors, ranks, printing,
 * config reads, blocking collectives). */
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "accel/accel.h"
#include "comm.h"
#include "config.h"
#include "ctx-impl.h"
#include "kv.h"
#include "loader.h"
#include "log.h"
#include "mem.h"
#include "select.h"
#include "store.h"
#include "train.h"
#include "world.h"

/* ---- creation ------------------------------------------------------------------ */

static int load_config(accel_ctx *ctx, const accel_opts *opts)
{
	int r = accel_config_new(&ctx->cfg, &ctx->err);
	if (r)
		return r;
	if (opts && opts->config_json) {
		r = accel_config_load_string(ctx->cfg, opts->config_json, "<config_json>", &ctx->err);
	} else {
		const char *path = opts ? opts->config_path : NULL;
		const char *from = NULL;
		if (!path)
			path = accel_config_find_file(&from);
		if (path) {
			accel_log(ACCEL_LOG_DEBUG, "config file %s%s%s", path, from ? " from " : "",
			          from ? from : "");
			r = accel_config_load_file(ctx->cfg, path, &ctx->err);
		}
	}
	if (r)
		return r;
	if (!(opts && opts->skip_env) && (r = accel_config_load_env(ctx->cfg, NULL, &ctx->err)))
		return r;
	if (opts && opts->sets)
		for (const char *const *s = opts->sets; *s; s++)
			if ((r = accel_config_set(ctx->cfg, *s, "accel_opts.sets", &ctx->err)))
				return r;
	return ACCEL_OK;
}

/* What a plugin's init or validate returned, made safe to pass on: a
 * positive value (no ACCEL_* status is positive) is a plugin bug, and an
 * error recorded through host->error by a call that then returned OK must
 * not stand in for a later failure's message. */
static int plugin_status(accel_ctx *ctx, const accel_module *m, const char *slot, int r)
{
	if (r > 0) {
		accel_err_clear(&ctx->err);
		return accel_err_set(&ctx->err, ACCEL_ERR_PLUGIN,
		                     "plugin '%s' (%s): %s returned %d, which is not an accel status "
		                     "(ACCEL_OK or a negative ACCEL_ERR_*)", m->name, m->path, slot, r);
	}
	if (r == ACCEL_OK && ctx->err.code != ACCEL_OK) {
		accel_log(ACCEL_LOG_WARN, "plugin '%s' (%s): %s reported an error but returned "
		          "ACCEL_OK; going on: %s", m->name, m->path, slot, ctx->err.msg);
		accel_err_clear(&ctx->err);
	}
	return r;
}

static int activate_plugins(accel_ctx *ctx, const accel_select *sel, const accel_module **mods)
{
	int r;
	ctx->active = calloc(sel->n, sizeof(*ctx->active));
	if (!ctx->active)
		return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < sel->n; i++) {
		const accel_module *m = mods[i];
		accel_active *a = &ctx->active[ctx->n_active++];
		a->module = m;
		a->vt = m->plugin;
		a->host.ctx = ctx;
		a->host.module = m;
		a->host.name = m->name;
		a->host.section = m->plugin->desc->config_section;
	}
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		void *state = NULL;
		/* The run-time availability check (ABI minor 3) comes first. */
		if (a->vt->available) {
			r = plugin_status(ctx, a->module, "available",
			                  a->vt->available(accel_host_table(), &a->host));
			if (r) {
				char msg[ACCEL_ERRMSG_MAX];
				snprintf(msg, sizeof(msg), "%s",
				         ctx->err.code ? ctx->err.msg : "no reason given");
				accel_err_clear(&ctx->err);
				return accel_err_set(&ctx->err,
				                     r == ACCEL_ERR_UNSUPPORTED ? r : ACCEL_ERR_PLUGIN,
				                     "plugin '%s' (%s) is not available in this process "
				                     "(%s): %s", a->module->name, a->module->path,
				                     accel_status_str(r), msg);
			}
		}
		r = a->vt->init(accel_host_table(), &a->host, &state);
		r = plugin_status(ctx, a->module, "init", r);
		if (r) {
			if (ctx->err.code == ACCEL_OK)
				accel_err_set(&ctx->err, r, "plugin '%s' (%s): init failed with %s and no "
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
	const char *names[ACCEL_SELECT_MAX];
	uint32_t roles[ACCEL_SELECT_MAX], caps[ACCEL_SELECT_MAX];
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		names[i] = ctx->active[i].module->name;
		roles[i] = ctx->active[i].vt->desc->role;
		caps[i] = ctx->active[i].vt->desc->caps;
	}
	accel_selection_v1 s = {
		.struct_size = sizeof(s),
		.n_plugins = ctx->n_active,
		.names = names,
		.roles = roles,
		.backend = ctx->comm ? accel_comm_backend_name(ctx->comm) : "none",
		.world_size = ctx->world.world_size,
		.caps = caps,
	};
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->vt->validate &&
		    (r = plugin_status(ctx, a->module, "validate", a->vt->validate(a->state, &s))))
			return ctx->err.code ? ctx->err.code
			                     : accel_err_set(&ctx->err, r, "plugin '%s' (%s) refused the "
			                                     "selection (%s, no message)", a->module->name,
			                                     a->module->path, accel_status_str(r));
	}
	return ACCEL_OK;
}

static int setup_processes(accel_ctx *ctx)
{
	int r = accel_world_from_env(&ctx->world, ctx->job_id, sizeof(ctx->job_id), ctx->master_addr,
	                           sizeof(ctx->master_addr), &ctx->master_port, &ctx->launcher,
	                           &ctx->err);
	if (r)
		return r;
	accel_log_set_rank(ctx->world.rank);
	if (ctx->world.world_size > 1) {
		if (ctx->master_addr[0] && ctx->master_port > 0) {
			int64_t timeout_ms, keepalive_ms;
			accel_comm_times(ctx, &timeout_ms, &keepalive_ms);
			return accel_store_new_keepalive(ctx->master_addr, ctx->master_port,
			                                 ctx->world.rank, ctx->world.world_size,
			                                 timeout_ms, keepalive_ms, &ctx->store, &ctx->err);
		}
		if (!ctx->launcher || strncmp(ctx->launcher, "mpi", 3) != 0)
			return accel_err_set(&ctx->err, ACCEL_ERR_CONFIG,
			                     "rank %d of %d: no rendezvous address; start the program "
			                     "with 'accel launch', or set ACCEL_MASTER_ADDR and "
			                     "ACCEL_MASTER_PORT", ctx->world.rank,
			                     ctx->world.world_size);
		/* The mpi backend bootstraps through MPI itself, and then
		 * mpi_store() may give the job a store over it; a backend that
		 * needs the store while it starts says so when it asks (host.c). */
		accel_log(ACCEL_LOG_DEBUG, "started by %s without ACCEL_MASTER_ADDR/PORT: no "
		          "rendezvous store while the comm backend starts", ctx->launcher);
	}
	/* No rendezvous server: the store calls go to an in-process map. */
	if (accel_kv_new(&ctx->local_store))
		return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	return ACCEL_OK;
}

/* ---- a rendezvous store for jobs started by an MPI launcher ------------------------ */

/* What rank 0 broadcasts: where its store listens, or why it has none. */
typedef struct {
	char magic[8];          /* "accelMSt" */
	int32_t port;           /* 0: no store (why says so) */
	uint32_t pad;
	uint64_t token;         /* the job token the store wants in every HELLO */
	char host[256];         /* gethostname() */
	char boot[40];          /* /proc/sys/kernel/random/boot_id: same host */
	char why[256];
} mpi_store_msg;

/* The buffers of the two collectives.  MPI may still write them after a
 * collective timed out, even after the context is gone (comm ABI), so
 * after a failure they are never freed: kept on a list (not a leak). */
typedef struct mpi_store_bufs {
	struct mpi_store_bufs *next;
	mpi_store_msg m;
	int32_t ok;
	int32_t oks[];
} mpi_store_bufs;

static pthread_mutex_t g_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static mpi_store_bufs *g_lost;

static void keep_lost(mpi_store_bufs *b)
{
	pthread_mutex_lock(&g_lost_mu);
	b->next = g_lost;
	g_lost = b;
	pthread_mutex_unlock(&g_lost_mu);
}

#define MPI_STORE_MAGIC "accelMSt"
/* The others must be connected (or have given up) within this, and within
 * half of comm.timeout_s: rank 0 meanwhile waits in the host all-gather
 * that follows, under that timeout.  Rank 0's server listens before it
 * sends its address, so only an unreachable host takes that long. */
#define MPI_STORE_JOIN_MS 15000

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void read_boot_id(char *buf, size_t cap)
{
	buf[0] = '\0';
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return;
	if (!fgets(buf, (int)cap, f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
}

static void this_host(mpi_store_msg *m)
{
	if (gethostname(m->host, sizeof(m->host) - 1) != 0)
		m->host[0] = '\0';
	m->host[sizeof(m->host) - 1] = '\0';
	read_boot_id(m->boot, sizeof(m->boot));
}

static uint64_t job_token(void)
{
	uint64_t t = 0;
	if (getrandom(&t, sizeof(t), GRND_NONBLOCK) != (ssize_t)sizeof(t)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		t = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
		    ((uint64_t)getpid() << 32);
	}
	return t ? t : 1;
}

/* Join rank 0's store: on rank 0's host (same host name and boot id) over
 * loopback first, then by its host name if loopback was refused or led
 * elsewhere (a network namespace of its own); elsewhere by its host name.
 * A join whose handshake went unanswered is not retried at another address
 * (the server may have counted it).  Returns the address that worked, or
 * NULL with the error in `why`. */
static const char *mpi_store_join(accel_ctx *ctx, const mpi_store_msg *m, int64_t within_ms,
                                  int64_t timeout_ms, int64_t keepalive_ms, accel_store **st,
                                  char *why, size_t cap)
{
	mpi_store_msg me;
	memset(&me, 0, sizeof(me));
	this_host(&me);
	int local = m->host[0] && m->boot[0] && !strcmp(me.host, m->host) &&
	            !strcmp(me.boot, m->boot);
	const char *addrs[2];
	int n = 0;
	if (local)
		addrs[n++] = "127.0.0.1";
	if (m->host[0])
		addrs[n++] = m->host;
	if (n == 0) {
		snprintf(why, cap, "rank 0 has no host name to connect to");
		return NULL;
	}
	int64_t start = mono_ms();
	for (int i = 0; i < n; i++) {
		/* a refused loopback fails at once (the server listened before
		 * it sent its address), so the whole time is each one's */
		int64_t left = start + within_ms - mono_ms();
		accel_err e;
		accel_err_clear(&e);
		int rc = accel_store_join(addrs[i], m->port, ctx->world.rank, ctx->world.world_size,
		                          left > 0 ? left : 1, timeout_ms, keepalive_ms, m->token, st,
		                          &e);
		if (rc == ACCEL_OK)
			return addrs[i];
		*st = NULL;
		snprintf(why, cap, "%s", e.msg[0] ? e.msg : accel_status_str(rc));
		if (rc == ACCEL_ERR_TIMEOUT)
			break;
	}
	return NULL;
}

/* Under an MPI launcher without ACCEL_MASTER_ADDR/PORT the job has no store,
 * and the mpi and nccl backends then cannot name the ranks that never
 * reached a timed-out collective.  So rank 0 starts one on a free port and
 * sends its address over the host backend (comm.mpi_store).  If any rank
 * cannot connect, every rank drops the store and the job runs as without
 * one, with warnings; a failed host collective fails the context.  Every
 * rank takes part in both collectives whatever happened before them. */
static int mpi_store(accel_ctx *ctx)
{
	int32_t on = 1;
	if (ctx->store || ctx->world.world_size < 2 || !ctx->launcher ||
	    strncmp(ctx->launcher, "mpi", 3) != 0)
		return ACCEL_OK;
	accel_config_get_bool(ctx->cfg, "comm.mpi_store", &on);
	if (!on)
		return ACCEL_OK;
	int64_t timeout_ms, keepalive_ms;
	accel_comm_times(ctx, &timeout_ms, &keepalive_ms);
	int32_t rank = ctx->world.rank, world = ctx->world.world_size;
	accel_store *st = NULL;
	char why[ACCEL_ERRMSG_MAX] = "";
	int r;
	mpi_store_bufs *bufs = calloc(1, sizeof(*bufs) + (size_t)world * sizeof(int32_t));
	if (!bufs)   /* before the first collective: the others then fail in it, not hang */
		return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	mpi_store_msg *m = &bufs->m;
	if (rank == 0) {
		accel_err e;
		accel_err_clear(&e);
		memcpy(m->magic, MPI_STORE_MAGIC, sizeof(m->magic));
		this_host(m);
		m->token = job_token();
		if (accel_store_new_host(world, timeout_ms, keepalive_ms, m->token, &st, &e) ==
		    ACCEL_OK)
			m->port = accel_store_port(st);
		else
			snprintf(m->why, sizeof(m->why), "%.255s",
			         e.msg[0] ? e.msg : "the store did not start (no message)");
	}
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_U8,
	                .device = ACCEL_DEVICE_CPU, .data = m, .numel = sizeof(*m)};
	if ((r = accel_comm_broadcast(ctx->comm, &v, 0, NULL)))
		goto fail;
	m->why[sizeof(m->why) - 1] = '\0';
	m->host[sizeof(m->host) - 1] = '\0';
	m->boot[sizeof(m->boot) - 1] = '\0';
	int no_store = 0;   /* rank 0 has none: nothing to reach */
	const char *via = NULL;
	if (memcmp(m->magic, MPI_STORE_MAGIC, sizeof(m->magic)) != 0) {
		snprintf(why, sizeof(why), "rank 0 sent something else than its store's address "
		         "(ranks out of step at start-up?)");
	} else if (m->port <= 0) {
		no_store = 1;
		if (rank == 0)
			accel_log(ACCEL_LOG_WARN, "the job runs without a rendezvous store: rank 0 "
			          "could not start one (comm.mpi_store): %s; timeouts of mpi and nccl "
			          "collectives will not name the missing ranks", m->why);
	} else if (rank != 0) {
		int64_t within = timeout_ms / 2 < MPI_STORE_JOIN_MS ? timeout_ms / 2 : MPI_STORE_JOIN_MS;
		via = mpi_store_join(ctx, m, within > 0 ? within : 1, timeout_ms, keepalive_ms, &st,
		                     why, sizeof(why));
	}
	/* Every rank learns which ranks are connected: all use the store, or none. */
	bufs->ok = !no_store && why[0] == '\0' && (rank == 0 ? st != NULL : via != NULL);
	accel_view sv = {.struct_size = sizeof(sv), .dtype = ACCEL_DTYPE_I32,
	                 .device = ACCEL_DEVICE_CPU, .data = &bufs->ok, .numel = 1};
	accel_view rv = {.struct_size = sizeof(rv), .dtype = ACCEL_DTYPE_I32,
	                 .device = ACCEL_DEVICE_CPU, .data = bufs->oks, .numel = (uint64_t)world};
	if ((r = accel_comm_allgather(ctx->comm, &sv, &rv, NULL)))
		goto fail;
	char bad[160] = "";
	size_t used = 0;
	int nbad = 0, listed = 0;
	for (int32_t q = 0; q < world; q++) {
		if (bufs->oks[q])
			continue;
		nbad++;
		int k = snprintf(bad + used, sizeof(bad) - used, "%s%d", listed ? ", " : "", (int)q);
		if (k > 0 && (size_t)k < sizeof(bad) - used - 24) {   /* room for the tail */
			used += (size_t)k;
			listed++;
		} else {
			bad[used] = '\0';
		}
	}
	if (listed < nbad)
		snprintf(bad + used, sizeof(bad) - used, " and %d more", nbad - listed);
	char host[sizeof(m->host)];
	int port = m->port, via_loopback = via && !strcmp(via, "127.0.0.1");
	snprintf(host, sizeof(host), "%s", m->host);
	free(bufs);   /* both collectives completed (via may point into it) */
	via = NULL;
	if (nbad == 0) {
		ctx->store = st;
		if (rank == 0)
			accel_log(ACCEL_LOG_DEBUG, "started by %s without ACCEL_MASTER_ADDR/PORT: rank 0 "
			          "hosts the rendezvous store on %s:%d", ctx->launcher, host, port);
		else
			accel_log(ACCEL_LOG_DEBUG, "connected to rank 0's rendezvous store at %s:%d (%s)",
			          via_loopback ? "127.0.0.1" : host, port,
			          via_loopback ? "same host" : "rank 0's host name");
		return ACCEL_OK;
	}
	accel_store_abandon(st);
	if (no_store)
		return ACCEL_OK;   /* rank 0 said why */
	if (why[0])
		accel_log(ACCEL_LOG_WARN, "no rendezvous store in this job: %s", why);
	if (rank == 0)
		accel_log(ACCEL_LOG_WARN, "the job runs without a rendezvous store: %s %s could not "
		          "reach rank 0's store on %s:%d (comm.mpi_store); timeouts of mpi and nccl "
		          "collectives will not name the missing ranks. Set ACCEL_MASTER_ADDR and "
		          "ACCEL_MASTER_PORT (mpirun -x) to an address of rank 0's node that the "
		          "others reach, or comm.mpi_store=false to skip the attempt",
		          nbad > 1 ? "ranks" : "rank", bad, host, port);
	return ACCEL_OK;
fail:
	keep_lost(bufs);   /* MPI may still write them */
	if (ctx->err.code) {
		/* say which step of the start-up the collective was */
		char was[ACCEL_ERRMSG_MAX];
		int code = ctx->err.code;
		snprintf(was, sizeof(was), "%s", ctx->err.msg);
		accel_err_clear(&ctx->err);
		accel_err_set(&ctx->err, code, "while rank 0 announced its rendezvous store over MPI "
		              "(comm.mpi_store; false skips this step): %s", was);
		/* ranks that got through tell why when they use the store */
		if (st)
			accel_store_fail(st, ctx->err.msg);
	}
	accel_store_abandon(st);
	return ctx->err.code ? ctx->err.code : r;
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
	accel_log_init();
	ctx->world = (accel_world_v1){.struct_size = sizeof(accel_world_v1), .world_size = 1,
	                              .local_world_size = 1, .num_nodes = 1};
	if ((r = accel_mem_new(&ctx->mem)))
		return accel_err_set(&ctx->err, r, "out of memory");
	if ((r = load_config(ctx, opts)))
		goto fail;
	if ((r = accel_select_open_loader(ctx->cfg, &ctx->loader, &ctx->err)))
		goto fail;
	if ((r = accel_select_from_config(ctx->cfg, &sel, &ctx->err)) ||
	    (r = accel_select_register_schemas(ctx->cfg, ctx->loader, &sel, &ctx->err)))
		goto fail;
	if ((r = accel_config_resolve(ctx->cfg, &ctx->err))) {
		/* A selected plugin that cannot be used is the better story
		 * (its section is otherwise an "unknown key"). */
		accel_err e;
		accel_err_clear(&e);
		if ((r = accel_select_modules(&sel, ctx->loader, 0, mods, &e)) == ACCEL_OK)
			r = ctx->err.code;
		else
			ctx->err = e;
		goto fail;
	}
	/* The resolved value includes ACCEL_LOG_LEVEL (the env layer). */
	if (accel_config_get_string(ctx->cfg, "log_level", &lv) == ACCEL_OK)
		accel_log_set_level(accel_log_level_parse(lv));
	if ((r = setup_processes(ctx)))
		goto fail;
	/* After the store is up: a plugin missing on this node only must be
	 * reported to the other ranks (the fail path below), not leave them
	 * waiting until comm.timeout_s. */
	if ((r = accel_select_modules(&sel, ctx->loader, 0, mods, &ctx->err)))
		goto fail;
	if ((r = accel_comm_new(ctx, &ctx->comm)) || (r = mpi_store(ctx)))
		goto fail;
	if ((r = activate_plugins(ctx, &sel, mods)))
		goto fail;
	if ((r = accel_train_new(ctx, &ctx->train)))
		goto fail;
	accel_log(ACCEL_LOG_DEBUG, "context ready: rank %d/%d, strategy %s, backend %s, launcher %s",
	          ctx->world.rank, ctx->world.world_size, sel.names[0],
	          accel_comm_backend_name(ctx->comm), ctx->launcher ? ctx->launcher : "none");
	return ACCEL_OK;

fail:
	if (ctx->err.code == ACCEL_OK)
		accel_err_set(&ctx->err, r, "context creation failed: %s", accel_status_str(r));
	/* The others must not wait for this rank until their timeouts (and
	 * rank 0 must not keep the store up for them). */
	if (ctx->store)
		accel_store_fail(ctx->store, ctx->err.msg);
	return ctx->err.code;
}

accel_ctx *accel_ctx_free(accel_ctx *ctx)
{
	if (!ctx)
		return NULL;
	/* Plugins may read the model until fini (plugin.h), so they go first;
	 * a request a strategy waits for in its fini must not call back into
	 * a hook finalized before it. */
	accel_train_drop_callbacks(ctx->train);
	for (uint32_t i = ctx->n_active; i-- > 0;)
		if (ctx->active[i].inited)
			ctx->active[i].vt->fini(ctx->active[i].state);
	free(ctx->active);
	ctx->train = accel_train_free(ctx->train);
	/* Buffers from the backend go back before the backend goes away. */
	ctx->mem = accel_mem_free_all(ctx->mem, ctx);
	ctx->comm = accel_comm_free(ctx->comm);
	ctx->store = accel_store_free(ctx->store);
	ctx->local_store = accel_kv_free(ctx->local_store);
	/* Plugins stay mapped: see docs/abi.md ("no unloading"). */
	ctx->loader = accel_loader_free(ctx->loader);
	ctx->cfg = accel_config_free(ctx->cfg);
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
			accel_err_set(&ctx->err, ACCEL_ERR_NOT_FOUND,
			              "plugin '%s' (%s) has no extension '%s' version %u", plugin,
			              a->module->path, name, version);
		return ext;
	}
	accel_err_set(&ctx->err, ACCEL_ERR_NOT_FOUND, "no active plugin named '%s' (extension '%s')",
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
		accel_err_clear(&ctx->err);
}

int accel_set_error(accel_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	if (!ctx)
		return code;
	va_start(ap, fmt);
	accel_err_setv(&ctx->err, code, fmt, ap);
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
		return accel_err_set(&ctx->err, ACCEL_ERR_STATE,
		                     "%s: the context has no comm backend (creation failed: %s)", what,
		                     ctx->err.code ? ctx->err.msg : "unknown");
	return ACCEL_OK;
}

int accel_wait_for_everyone(accel_ctx *ctx)
{
	int r = need_comm(ctx, "accel_wait_for_everyone");
	return r ? r : accel_comm_barrier(ctx->comm, NULL);
}

void accel_print(const accel_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	if (!accel_is_main(ctx))
		return;
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
	accel_logv(level, fmt, ap);
	va_end(ap);
}

/* ---- configuration ------------------------------------------------------------- */

int accel_config_int(const accel_ctx *ctx, const char *path, int64_t *ret_value)
{
	return ctx && ctx->cfg ? accel_config_get_int(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

int accel_config_double(const accel_ctx *ctx, const char *path, double *ret_value)
{
	return ctx && ctx->cfg ? accel_config_get_double(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

int accel_config_bool(const accel_ctx *ctx, const char *path, int32_t *ret_value)
{
	return ctx && ctx->cfg ? accel_config_get_bool(ctx->cfg, path, ret_value)
	                       : ACCEL_ERR_INVALID_ARG;
}

int accel_config_string(const accel_ctx *ctx, const char *path, const char **ret_value)
{
	return ctx && ctx->cfg ? accel_config_get_string(ctx->cfg, path, ret_value)
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
	return r ? r : accel_comm_allreduce(ctx->comm, &s, &d, op, NULL);
}

int accel_broadcast(accel_ctx *ctx, void *buf, uint64_t count, uint32_t dtype, int root)
{
	int r = need_comm(ctx, "accel_broadcast");
	accel_view b = user_view(buf, count, dtype);
	return r ? r : accel_comm_broadcast(ctx->comm, &b, root, NULL);
}

int accel_allgather(accel_ctx *ctx, const void *send, void *recv, uint64_t sendcount,
                    uint32_t dtype)
{
	int r = need_comm(ctx, "accel_allgather");
	if (r)
		return r;
	accel_view s = user_view(send, sendcount, dtype);
	accel_view d = user_view(recv, sendcount * (uint64_t)ctx->world.world_size, dtype);
	return accel_comm_allgather(ctx->comm, &s, &d, NULL);
}

int accel_reduce_scatter(accel_ctx *ctx, const void *send, void *recv, uint64_t recvcount,
                         uint32_t dtype, uint32_t op)
{
	int r = need_comm(ctx, "accel_reduce_scatter");
	if (r)
		return r;
	accel_view s = user_view(send, recvcount * (uint64_t)ctx->world.world_size, dtype);
	accel_view d = user_view(recv, recvcount, dtype);
	return accel_comm_reduce_scatter(ctx->comm, &s, &d, op, NULL);
}
