/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_bootstrap.c: agreeing on an NCCL unique id through the
 * job's rendezvous store.
 *
 * NCCL needs every rank to hold the same ncclUniqueId (128 opaque bytes,
 * holding rank 0's bootstrap socket address) before ncclCommInitRank.  The
 * launcher's store is the channel: rank 0 publishes, the others wait for
 * the key.  A job may create several communicators (several contexts, or a
 * context re-created); a per-rank counter kept in the store itself numbers
 * them, so no process-wide state is needed and ranks that create them in
 * the same order use the same keys. */
#include <stdio.h>
#include <string.h>

#include "nccl-impl.h"

int accel_nccl_bootstrap(const nccl_boot_ops *ops, void *ctx, int rank, int world_size,
                         int64_t timeout_ms, ncclUniqueId *ret_id, char *msg, size_t cap)
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
	memset(&id, 0, sizeof(id));
	if (world_size == 1) {
		/* Nobody to tell: no store needed (there may be none). */
		ncclResult_t r = (ncclResult_t)ops->unique_id(ctx, &id);
		if (r != ncclSuccess)
			return accel_nccl_describe_nccl(r, "ncclGetUniqueId", NULL, msg, cap);
		*ret_id = id;
		return ACCEL_OK;
	}

	snprintf(key, sizeof(key), "nccl/count/%d", rank);
	rc = ops->add(ctx, key, 1, &count);
	if (rc != ACCEL_OK) {
		snprintf(msg, cap, "bootstrap on rank %d: cannot reach the rendezvous store "
		         "(store_add '%s' failed); NCCL needs it to exchange its unique id", rank,
		         key);
		return rc;
	}
	snprintf(key, sizeof(key), "nccl/uid/%lld", (long long)count);

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
