/* SPDX-License-Identifier: MIT */
/* core/host_comm.c: what comm backends see of the host (accel_comm_host_v1),
 * the group members of the plugin host table, and the launcher's clean-up
 * call into the backends.
 *
 * A comm backend gets a table of the plugin table's type and layout (a
 * backend built against an older minor finds log, error, cfg_* and store_*
 * where it expects them) in which everything built on the backend itself
 * is NULL: the model, parameters, memory accounting, device ops, the
 * optimizer, checkpoints and the plugin collectives.  What stays beyond
 * logging, configuration and the store is the blocking host allgather,
 * broadcast and barrier, which a device backend's init() may use to
 * bootstrap over the host backend in a job without a store, and (ABI minor
 * 4) the context's compute stream, after which a device backend orders its
 * collectives. */
#include <pthread.h>
#include <string.h>

#include "comm.h"
#include "ctx-impl.h"
#include "loader.h"
#include "log.h"

static int need(accel_host *h, const char *what)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!h->ctx->comm)
		return accelp_err_set(&h->ctx->err, ACCEL_ERR_STATE, "%s%s%s: no comm backend is up",
		                     h->name ? h->name : "", h->name ? ": " : "", what);
	return ACCEL_OK;
}

/* A backend's host collectives: blocking only (a request would outlive the
 * call that is allowed to make it). */
static int blocking_only(accel_host *h, accel_req **ret_req, const char *what)
{
	if (ret_req)
		return accelp_err_set(&h->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s from a comm backend is blocking only: pass ret_req NULL",
		                     h->name ? h->name : "backend", what);
	return need(h, what);
}

static int comm_allgather(accel_host *h, const accel_view *send, const accel_view *recv,
                          accel_req **ret_req)
{
	int r = blocking_only(h, ret_req, "allgather");
	return r ? r : accelp_comm_allgather(h->ctx->comm, send, recv, NULL);
}

static int comm_broadcast(accel_host *h, const accel_view *buf, int32_t root, accel_req **ret_req)
{
	int r = blocking_only(h, ret_req, "broadcast");
	return r ? r : accelp_comm_broadcast(h->ctx->comm, buf, root, NULL);
}

static int comm_barrier(accel_host *h, accel_req **ret_req)
{
	int r = blocking_only(h, ret_req, "barrier");
	return r ? r : accelp_comm_barrier(h->ctx->comm, NULL);
}

static accel_host_v1 comm_table;
static pthread_once_t comm_once = PTHREAD_ONCE_INIT;

static void comm_table_init(void)
{
	const accel_host_v1 *full = accelp_host_table();
	memset(&comm_table, 0, sizeof(comm_table));
	comm_table.struct_size = full->struct_size;
	comm_table.abi_major = full->abi_major;
	comm_table.abi_minor = full->abi_minor;
	comm_table.accel_version = full->accel_version;
	comm_table.log = full->log;
	comm_table.error = full->error;
	comm_table.world = full->world;
	comm_table.cfg_bool = full->cfg_bool;
	comm_table.cfg_int = full->cfg_int;
	comm_table.cfg_double = full->cfg_double;
	comm_table.cfg_string = full->cfg_string;
	comm_table.cfg_strlist = full->cfg_strlist;
	comm_table.store_set = full->store_set;
	comm_table.store_get = full->store_get;
	comm_table.store_add = full->store_add;
	comm_table.allgather = comm_allgather;
	comm_table.broadcast = comm_broadcast;
	comm_table.barrier = comm_barrier;
	/* ABI minor 4: a device backend orders collectives after this stream */
	comm_table.stream = full->stream;
}

const accel_host_v1 *accelp_comm_host_table(void)
{
	pthread_once(&comm_once, comm_table_init);
	return &comm_table;
}

/* ---- groups in the plugin table -------------------------------------------------- */

int accelp_host_group_split(accel_host *h, accel_group *parent, int32_t color, int32_t key,
                           accel_group **ret_group)
{
	int r = need(h, "group_split");
	return r ? r : accelp_comm_group_split(h->ctx->comm, parent, color, key, ret_group);
}

int accelp_host_group_info(accel_host *h, accel_group *g, int32_t *ret_rank, int32_t *ret_size)
{
	int r = need(h, "group_info");
	return r ? r : accelp_comm_group_info(h->ctx->comm, g, ret_rank, ret_size);
}

int accelp_host_group_world_rank(accel_host *h, accel_group *g, int32_t rank,
                                int32_t *ret_world_rank)
{
	int r = need(h, "group_world_rank");
	return r ? r : accelp_comm_group_world_rank(h->ctx->comm, g, rank, ret_world_rank);
}

accel_group *accelp_host_group_free(accel_host *h, accel_group *g)
{
	if (h && h->ctx && h->ctx->comm)
		accelp_comm_group_free(h->ctx->comm, g);
	return NULL;
}

int accelp_host_group_allreduce(accel_host *h, accel_group *g, const accel_view *send,
                               const accel_view *recv, uint32_t op, accel_req **ret_req)
{
	int r = need(h, "group_allreduce");
	return r ? r : accelp_comm_group_allreduce(h->ctx->comm, g, send, recv, op, ret_req);
}

int accelp_host_group_reduce_scatter(accel_host *h, accel_group *g, const accel_view *send,
                                    const accel_view *recv, uint32_t op, accel_req **ret_req)
{
	int r = need(h, "group_reduce_scatter");
	return r ? r : accelp_comm_group_reduce_scatter(h->ctx->comm, g, send, recv, op, ret_req);
}

int accelp_host_group_allgather(accel_host *h, accel_group *g, const accel_view *send,
                               const accel_view *recv, accel_req **ret_req)
{
	int r = need(h, "group_allgather");
	return r ? r : accelp_comm_group_allgather(h->ctx->comm, g, send, recv, ret_req);
}

int accelp_host_group_broadcast(accel_host *h, accel_group *g, const accel_view *buf,
                               int32_t root, accel_req **ret_req)
{
	int r = need(h, "group_broadcast");
	return r ? r : accelp_comm_group_broadcast(h->ctx->comm, g, buf, root, ret_req);
}

int accelp_host_group_barrier(accel_host *h, accel_group *g, accel_req **ret_req)
{
	int r = need(h, "group_barrier");
	return r ? r : accelp_comm_group_barrier(h->ctx->comm, g, ret_req);
}

/* ---- clean-up after a failed job ---------------------------------------------------- */

void accelp_comm_cleanup_job(accel_loader *loader, const accel_comm_cleanup_v1 *args)
{
	for (uint32_t i = 0; loader && i < accelp_loader_count(loader); i++) {
		const accel_module *m = accelp_loader_get(loader, i);
		if (m->kind != ACCEL_MODULE_COMM || m->status != ACCEL_MODULE_OK ||
		    !m->comm->cleanup)
			continue;
		struct accel_host ph = {.ctx = NULL, .module = m, .name = m->name,
		                        .section = m->comm->desc->config_section};
		int r = m->comm->cleanup(accelp_comm_host_table(), &ph, args);
		if (r)
			accelp_log(ACCEL_LOG_WARN, "comm backend %s (%s): clean-up after job %s: %s",
			          m->name, m->path, args->job_id ? args->job_id : "?",
			          accel_status_str(r));
	}
}
