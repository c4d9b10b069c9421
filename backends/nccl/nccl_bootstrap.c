/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_bootstrap.c: agreeing on an NCCL unique id through the
 * job's rendezvous store, or over the host comm backend without one.
 *
 * NCCL needs every rank to hold the same ncclUniqueId (128 opaque bytes,
 * holding rank 0's bootstrap socket address) before ncclCommInitRank.  The
 * launcher's store is the channel: rank 0 publishes, the others wait for
 * the key.  A job may create several communicators (several contexts, or a
 * context re-created); a per-rank counter kept in the store itself numbers
 * them, so no process-wide state is needed and ranks that create them in
 * the same order use the same keys.
 *
 * A job started by mpirun without ACCEL_MASTER_ADDR and with
 * comm.mpi_store=false (or where a rank could not reach the store rank 0
 * announced over MPI) has no store; its host
 * buffers go through the mpi backend, and the id travels as a broadcast
 * from rank 0 there (as MPI programs bootstrap NCCL with MPI_Bcast).  The
 * broadcast carries a tag, so a rank whose host collectives are out of
 * step with rank 0's gets an error instead of a garbage id, and rank 0's
 * own failure, so the others fail with it instead of waiting. */
#include <stdio.h>
#include <string.h>

#include "backends/common/store-keys.h"
#include "nccl-impl.h"

#define BOOT_TAG "accelNid"

typedef struct boot_msg {
	char tag[8];          /* BOOT_TAG */
	int32_t result;       /* rank 0's ncclGetUniqueId result */
	int32_t reserved;
	ncclUniqueId id;
} boot_msg;

static int bootstrap_bcast(const nccl_boot_ops *ops, void *ctx, int rank,
                           ncclUniqueId *ret_id, char *msg, size_t cap)
{
	boot_msg m;
	int rc;
	memset(&m, 0, sizeof(m));
	if (!ops->bcast) {
		snprintf(msg, cap, "bootstrap on rank %d: this job has no rendezvous store to "
		         "exchange NCCL's unique id through; set ACCEL_MASTER_ADDR and "
		         "ACCEL_MASTER_PORT, or use backend mpi for host buffers with "
		         "comm.mpi_store at true", rank);
		return ACCEL_ERR_CONFIG;
	}
	if (rank == 0) {
		memcpy(m.tag, BOOT_TAG, sizeof(m.tag));
		m.result = (int32_t)ops->unique_id(ctx, &m.id);
	}
	rc = ops->bcast(ctx, &m, sizeof(m));
	if (rc != ACCEL_OK) {
		snprintf(msg, cap, "bootstrap on rank %d: the broadcast of NCCL's unique id over "
		         "the host comm backend failed (this job has no rendezvous store); every "
		         "rank must bring up nccl at the same point: its first collective or "
		         "backend allocation on a CUDA buffer", rank);
		return rc;
	}
	if (memcmp(m.tag, BOOT_TAG, sizeof(m.tag)) != 0) {
		snprintf(msg, cap, "bootstrap on rank %d: the host broadcast that should carry "
		         "NCCL's unique id from rank 0 carried something else: the ranks issued "
		         "their host collectives in a different order (every rank must make its "
		         "first collective or backend allocation on a CUDA buffer at the same "
		         "point)", rank);
		return ACCEL_ERR_COMM;
	}
	if (m.result != ncclSuccess) {
		if (rank == 0)
			return accel_nccl_describe_nccl((ncclResult_t)m.result, "ncclGetUniqueId", NULL,
			                                msg, cap);
		char why[512];
		rc = accel_nccl_describe_nccl((ncclResult_t)m.result, "ncclGetUniqueId", NULL, why,
		                              sizeof(why));
		snprintf(msg, cap, "bootstrap on rank %d: rank 0 could not create NCCL's unique "
		         "id: %s", rank, why);
		return rc;
	}
	*ret_id = m.id;
	return ACCEL_OK;
}

int accel_nccl_bootstrap(const nccl_boot_ops *ops, void *ctx, int rank, int world_size,
                         int64_t timeout_ms, ncclUniqueId *ret_id, int *ret_via_store,
                         char *msg, size_t cap)
{
	ncclUniqueId id;
	char key[64];
	int64_t count = 0;
	uint64_t len = 0;
	int rc;

	if (!ops || !ret_id || rank < 0 || world_size < 1 || rank >= world_size) {
		snprintf(msg, cap, "bootstrap: bad arguments (rank %d, world size %d)", rank,
		         world_size);
		return ACCEL_ERR_INVALID_ARG;
	}
	if (ret_via_store)
		*ret_via_store = 0;
	memset(&id, 0, sizeof(id));
	if (world_size == 1) {
		/* Nobody to tell: no store needed (there may be none). */
		ncclResult_t r = (ncclResult_t)ops->unique_id(ctx, &id);
		if (r != ncclSuccess)
			return accel_nccl_describe_nccl(r, "ncclGetUniqueId", NULL, msg, cap);
		*ret_id = id;
		return ACCEL_OK;
	}
	if (ops->has_store && ops->has_store(ctx) == ACCEL_ERR_UNSUPPORTED)
		return bootstrap_bcast(ops, ctx, rank, ret_id, msg, cap);
	if (ret_via_store)
		*ret_via_store = 1;

	snprintf(key, sizeof(key), ACCEL_STORE_FMT_NCCL_COUNT, rank);
	rc = ops->add(ctx, key, 1, &count);
	if (rc != ACCEL_OK) {
		snprintf(msg, cap, "bootstrap on rank %d: cannot reach the rendezvous store "
		         "(store_add '%s' failed); NCCL needs it to exchange its unique id", rank,
		         key);
		return rc;
	}
	snprintf(key, sizeof(key), ACCEL_STORE_FMT_NCCL_UID, (long long)count);

	if (rank == 0) {
		ncclResult_t r = (ncclResult_t)ops->unique_id(ctx, &id);
		if (r != ncclSuccess)
			return accel_nccl_describe_nccl(r, "ncclGetUniqueId", NULL, msg, cap);
		rc = ops->set(ctx, key, &id, sizeof(id));
		if (rc != ACCEL_OK) {
			snprintf(msg, cap, "bootstrap on rank 0: cannot publish the NCCL id "
			         "under store key '%s'", key);
			return rc;
		}
		*ret_id = id;
		return ACCEL_OK;
	}

	rc = ops->get(ctx, key, &id, sizeof(id), &len, timeout_ms);
	if (rc != ACCEL_OK) {
		snprintf(msg, cap, "bootstrap on rank %d: rank 0 did not publish the NCCL id "
		         "(store key '%s') within %.1f s; check that rank 0 started, reached "
		         "accel_ctx_new and selected backend \"nccl\" too", rank, key,
		         (double)timeout_ms / 1000.0);
		return rc == ACCEL_ERR_TIMEOUT ? ACCEL_ERR_TIMEOUT : rc;
	}
	if (len != sizeof(id)) {
		snprintf(msg, cap, "bootstrap on rank %d: store key '%s' holds %llu bytes, "
		         "not an NCCL id (%zu bytes); are two jobs sharing one store, or ranks "
		         "creating communicators in a different order?", rank, key,
		         (unsigned long long)len, sizeof(id));
		return ACCEL_ERR_COMM;
	}
	*ret_id = id;
	return ACCEL_OK;
}

/* ---- the callbacks of a backend running inside accel -------------------------- */

static int host_uid(void *ctx, ncclUniqueId *ret_id)
{
	(void)ctx;
	return (int)ncclGetUniqueId(ret_id);
}

static int host_set(void *ctx, const char *key, const void *value, uint64_t len)
{
	nccl_host_boot *b = ctx;
	return b->host->store_set(b->h, key, value, len);
}

static int host_get(void *ctx, const char *key, void *buf, uint64_t cap, uint64_t *ret_len,
                    int64_t timeout_ms)
{
	nccl_host_boot *b = ctx;
	return b->host->store_get(b->h, key, buf, cap, ret_len, timeout_ms);
}

static int host_add(void *ctx, const char *key, int64_t delta, int64_t *ret_value)
{
	nccl_host_boot *b = ctx;
	return b->host->store_add(b->h, key, delta, ret_value);
}

/* A probe (timeout 0) answers ACCEL_ERR_UNSUPPORTED in a job without a
 * store and records nothing. */
static int host_has_store(void *ctx)
{
	nccl_host_boot *b = ctx;
	char v[8];
	uint64_t len = 0;
	int r = b->host->store_get(b->h, ACCEL_STORE_KEY_JOB_FAILED, v, sizeof(v), &len, 0);
	return r == ACCEL_ERR_UNSUPPORTED ? ACCEL_ERR_UNSUPPORTED : ACCEL_OK;
}

/* Host memory goes to the job's host backend (mpi in a job without a
 * store), never to a device backend. */
static int host_bcast(void *ctx, void *buf, uint64_t len)
{
	nccl_host_boot *b = ctx;
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_U8,
	                .device = ACCEL_DEVICE_CPU, .data = buf, .numel = len};
	int r = b->host->broadcast(b->h, &v, 0, NULL);
	if (r != ACCEL_OK)
		b->bcast_failed = 1;
	return r;
}

const nccl_boot_ops accel_nccl_host_boot_ops = {host_uid, host_set, host_get, host_add,
                                                host_has_store, host_bcast};
