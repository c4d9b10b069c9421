/* SPDX-License-Identifier: MIT */
/* core/comm.h: the core side of collectives (private).
 *
 * Holds the selected comm backend(s) (one for CPU buffers, one for device
 * buffers when the nccl backend is used), turns backend requests into
 * accel_req handles, routes each call by the buffers' device, and gives
 * every collective a sequence number for messages. */
#ifndef ACCEL_CORE_COMM_H
#define ACCEL_CORE_COMM_H

#include <stdint.h>

#include "accel/comm.h"
#include "ctx-impl.h"

/* Select and init the backend named by config `backend` (a backend's name,
 * or "auto": chosen from the descriptors, docs/comm.md) for ctx (needs
 * ctx->cfg, ctx->loader, ctx->world, ctx->store). */
int accelp_comm_new(accel_ctx *ctx, accel_comm **ret_comm);
accel_comm *accelp_comm_free(accel_comm *comm);
/* comm.timeout_s and comm.keepalive_s of ctx's config in milliseconds (the
 * defaults, 300 s and 30 s, when unset): what the backends and the
 * rendezvous store get. */
void accelp_comm_times(const accel_ctx *ctx, int64_t *ret_timeout_ms, int64_t *ret_keepalive_ms);
/* The name of the CPU backend in use ("shm"). */
const char *accelp_comm_backend_name(const accel_comm *comm);
/* The backend that carries CUDA buffers: the device backend (nccl), or,
 * with *ret_staged 1, the host backend they are staged through (a host
 * backend named in the config); "none" when there is neither.  Static. */
const char *accelp_comm_device_backend_name(const accel_comm *comm, int *ret_staged);
/* The sequence number of the last collective issued (0 before the first). */
uint64_t accelp_comm_seq(const accel_comm *comm);

/* The collectives; semantics as in accel_host_v1 (plugin.h).  Errors go to
 * ctx->err. */
int accelp_comm_allreduce(accel_comm *comm, const accel_view *send, const accel_view *recv,
                         uint32_t op, accel_req **ret_req);
int accelp_comm_reduce_scatter(accel_comm *comm, const accel_view *send, const accel_view *recv,
                              uint32_t op, accel_req **ret_req);
int accelp_comm_allgather(accel_comm *comm, const accel_view *send, const accel_view *recv,
                         accel_req **ret_req);
int accelp_comm_broadcast(accel_comm *comm, const accel_view *buf, int32_t root,
                         accel_req **ret_req);
int accelp_comm_barrier(accel_comm *comm, accel_req **ret_req);
int accelp_comm_wait(accel_comm *comm, accel_req *req);
int accelp_comm_test(accel_comm *comm, accel_req *req, int32_t *ret_done);
/* wait() without blocking the host where the device can wait: a request
 * of the device backend whose vtable has wait_stream (ABI minor 4) makes
 * `stream` (NULL: the legacy default stream) wait for it on the device;
 * any other (host buffers, staged device buffers, an older backend) is
 * waited for on the host, which orders it before whatever the stream runs
 * next.  Releases req either way. */
int accelp_comm_wait_stream(accel_comm *comm, accel_req *req, void *stream);
/* Backend memory (ACCEL_MEMF_COMM); *ret_ptr NULL with ACCEL_OK when the
 * backend has no allocator. */
int accelp_comm_mem_alloc(accel_comm *comm, int32_t device, int32_t device_index, uint64_t bytes,
                         void **ret_ptr);
/* Returns 1 if ptr came from accelp_comm_mem_alloc (and frees it), else 0. */
int accelp_comm_mem_free(accel_comm *comm, void *ptr);

/* ctx's job id as the backends get it (accel_comm_init_v1.job_id). */
const char *accelp_comm_job_id(const accel_ctx *ctx);

/* ---- groups (sub-communicators); semantics as in accel_host_v1 -------------- */
int accelp_comm_group_split(accel_comm *comm, accel_group *parent, int32_t color, int32_t key,
                           accel_group **ret_group);
int accelp_comm_group_info(accel_comm *comm, accel_group *g, int32_t *ret_rank,
                          int32_t *ret_size);
int accelp_comm_group_world_rank(accel_comm *comm, accel_group *g, int32_t rank,
                                int32_t *ret_world_rank);
/* Waits for (releases) the group's requests still in flight first. */
accel_group *accelp_comm_group_free(accel_comm *comm, accel_group *g);
int accelp_comm_group_allreduce(accel_comm *comm, accel_group *g, const accel_view *send,
                               const accel_view *recv, uint32_t op, accel_req **ret_req);
int accelp_comm_group_reduce_scatter(accel_comm *comm, accel_group *g, const accel_view *send,
                                    const accel_view *recv, uint32_t op, accel_req **ret_req);
int accelp_comm_group_allgather(accel_comm *comm, accel_group *g, const accel_view *send,
                               const accel_view *recv, accel_req **ret_req);
int accelp_comm_group_broadcast(accel_comm *comm, accel_group *g, const accel_view *buf,
                               int32_t root, accel_req **ret_req);
int accelp_comm_group_barrier(accel_comm *comm, accel_group *g, accel_req **ret_req);

/* ---- core/host_comm.c ------------------------------------------------------------ */
/* The host table comm backends get (accel_comm_host_v1, comm.h): the
 * plugin table's layout with only log, error, world, cfg_*, store_* and
 * blocking host allgather/broadcast/barrier filled.  Static. */
const accel_host_v1 *accelp_comm_host_table(void);
/* The group members of the plugin host table (host.c fills them in). */
int accelp_host_group_split(accel_host *h, accel_group *parent, int32_t color, int32_t key,
                           accel_group **ret_group);
int accelp_host_group_info(accel_host *h, accel_group *g, int32_t *ret_rank, int32_t *ret_size);
int accelp_host_group_world_rank(accel_host *h, accel_group *g, int32_t rank,
                                int32_t *ret_world_rank);
accel_group *accelp_host_group_free(accel_host *h, accel_group *g);
int accelp_host_group_allreduce(accel_host *h, accel_group *g, const accel_view *send,
                               const accel_view *recv, uint32_t op, accel_req **ret_req);
int accelp_host_group_reduce_scatter(accel_host *h, accel_group *g, const accel_view *send,
                                    const accel_view *recv, uint32_t op, accel_req **ret_req);
int accelp_host_group_allgather(accel_host *h, accel_group *g, const accel_view *send,
                               const accel_view *recv, accel_req **ret_req);
int accelp_host_group_broadcast(accel_host *h, accel_group *g, const accel_view *buf,
                               int32_t root, accel_req **ret_req);
int accelp_host_group_barrier(accel_host *h, accel_group *g, accel_req **ret_req);

/* Run every loaded comm backend's cleanup() for a job whose ranks on this
 * node have all exited (accel launch, after a failed job); loader: the
 * modules to ask.  Errors are logged, not returned: cleaning up is best
 * effort. */
void accelp_comm_cleanup_job(accel_loader *loader, const accel_comm_cleanup_v1 *args);

#endif
