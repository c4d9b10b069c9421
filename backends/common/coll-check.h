/* SPDX-License-Identifier: MIT */
/*
 * backends/common/coll-check.h: what the mpi, nccl and tcp backends share: the
 * collective kinds and their names, a monotonic clock, the dtypes that
 * reduce, and the argument
 * checks of the comm ABI's calls that do not depend on where the buffers
 * live.  Header-only: each backend is a module of its own and links nothing
 * of the other's.  Every check reports through host->error() (naming the
 * call and the buffer) and returns its status.
 */
#ifndef ACCEL_BACKENDS_COLL_CHECK_H
#define ACCEL_BACKENDS_COLL_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "accel/comm.h"
#include "backends/common/mono.h"

#define OP_ALLREDUCE      1
#define OP_REDUCE_SCATTER 2
#define OP_ALLGATHER      3
#define OP_BROADCAST      4
#define OP_BARRIER        5

static inline const char *coll_op_name(int kind)
{
	switch (kind) {
	case OP_ALLREDUCE: return "allreduce";
	case OP_REDUCE_SCATTER: return "reduce_scatter";
	case OP_ALLGATHER: return "allgather";
	case OP_BROADCAST: return "broadcast";
	case OP_BARRIER: return "barrier";
	default: return "collective";
	}
}

/* "allreduce #7 (bf16, 1024 elements)", "barrier #8": how the backends
 * name a collective in their messages. */
static inline void coll_describe(char *buf, size_t cap, int kind, uint64_t seq, uint32_t dtype,
                                 uint64_t count)
{
	if (kind == OP_BARRIER)
		snprintf(buf, cap, "barrier #%llu", (unsigned long long)seq);
	else
		snprintf(buf, cap, "%s #%llu (%s, %llu elements)", coll_op_name(kind),
		         (unsigned long long)seq, accel_abi_dtype_name(dtype),
		         (unsigned long long)count);
}

/* The dtypes the comm ABI reduces: f32, f64, f16, bf16, i32, i64. */
static inline int coll_dtype_reducible(uint32_t dtype)
{
	switch (dtype) {
	case ACCEL_DTYPE_F32:
	case ACCEL_DTYPE_F64:
	case ACCEL_DTYPE_F16:
	case ACCEL_DTYPE_BF16:
	case ACCEL_DTYPE_I32:
	case ACCEL_DTYPE_I64: return 1;
	default: return 0;
	}
}

/* The parts of a view every backend checks: present, of a known layout and
 * dtype, data for its elements.  The caller checks the device. */
static inline int coll_check_view(const accel_host_v1 *host, accel_host *h, const char *op,
                                  const char *which, const accel_view *v)
{
	if (!v)
		return host->error(h, ACCEL_ERR_INVALID_ARG, "%s: %s view is NULL", op, which);
	if (v->struct_size < sizeof(accel_view))
		return host->error(h, ACCEL_ERR_ABI,
		                   "%s: %s view has struct_size %u, expected at least %zu", op,
		                   which, v->struct_size, sizeof(accel_view));
	if (accel_abi_dtype_size(v->dtype) == 0)
		return host->error(h, ACCEL_ERR_INVALID_ARG,
		                   "%s: %s view has dtype %u, which is not an ACCEL_DTYPE_*", op,
		                   which, v->dtype);
	if (!v->data && v->numel > 0)
		return host->error(h, ACCEL_ERR_INVALID_ARG,
		                   "%s: %s view has %llu elements but data is NULL", op, which,
		                   (unsigned long long)v->numel);
	return ACCEL_OK;
}

/* coll_check_view() for a backend that serves host memory only (`name`:
 * "mpi", "tcp"): a view on another device is refused, pointing at nccl. */
static inline int coll_check_host_view(const accel_host_v1 *host, accel_host *h,
                                       const char *name, const char *op, const char *which,
                                       const accel_view *v)
{
	int rc = coll_check_view(host, h, op, which, v);
	if (rc == ACCEL_OK && v->device != ACCEL_DEVICE_CPU)
		return host->error(h, ACCEL_ERR_UNSUPPORTED,
		                   "%s: %s buffer is on device %d (cuda:%d); the %s backend serves "
		                   "host memory only (use backend \"nccl\" for GPU buffers)", op,
		                   which, v->device, v->device_index, name);
	return rc;
}

/* Where the two buffers of an op lie (coll_check_pair). */
#define COLL_APART      0  /* separate buffers */
#define COLL_SAME       1  /* send->data == recv->data: the ABI's in place */
#define COLL_RANK_BLOCK 2  /* reduce_scatter: recv == send + rank x recv count;
                              allgather: send == recv + rank x send count (the
                              in-place form of NCCL and of MPI_IN_PLACE
                              all-gather); rank > 0 only, on rank 0 it is
                              COLL_SAME */

/* Two checked views of op `kind` on this `rank`: one dtype, and separate
 * buffers or one of the two in-place forms the core accepts (*ret_place). */
static inline int coll_check_pair(const accel_host_v1 *host, accel_host *h, int kind,
                                  int32_t rank, const accel_view *send,
                                  const accel_view *recv, int *ret_place)
{
	const char *op = coll_op_name(kind);
	if (send->dtype != recv->dtype)
		return host->error(h, ACCEL_ERR_INVALID_ARG,
		                   "%s: send is %s but recv is %s; both must have one dtype", op,
		                   accel_abi_dtype_name(send->dtype),
		                   accel_abi_dtype_name(recv->dtype));
	uint64_t es = accel_abi_dtype_size(send->dtype);
	uintptr_t s = (uintptr_t)send->data, r = (uintptr_t)recv->data;
	uint64_t ns = send->numel * es, nr = recv->numel * es;
	*ret_place = COLL_APART;
	if (!ns || !nr || s >= r + nr || r >= s + ns)
		return ACCEL_OK;
	if (s == r) {
		*ret_place = COLL_SAME;
		return ACCEL_OK;
	}
	if ((kind == OP_REDUCE_SCATTER && r == s + (uint64_t)rank * nr) ||
	    (kind == OP_ALLGATHER && s == r + (uint64_t)rank * ns)) {
		*ret_place = COLL_RANK_BLOCK;
		return ACCEL_OK;
	}
	return host->error(h, ACCEL_ERR_INVALID_ARG,
	                   "%s: send and recv overlap; in place means %s", op,
	                   kind == OP_REDUCE_SCATTER
	                       ? "recv == send or recv == send + rank x recv count"
	                   : kind == OP_ALLGATHER
	                       ? "send == recv or send == recv + rank x send count"
	                       : "send->data == recv->data");
}

/* reduce_scatter and all-gather: the whole buffer holds world blocks of the
 * other's size. */
static inline int coll_check_blocks(const accel_host_v1 *host, accel_host *h, int32_t world,
                                    const char *op, const char *whole_name,
                                    const accel_view *whole, const char *block_name,
                                    const accel_view *block)
{
	if (whole->numel == block->numel * (uint64_t)world)
		return ACCEL_OK;
	return host->error(h, ACCEL_ERR_INVALID_ARG,
	                   "%s: %s has %llu elements; it must be world size %d x %s's %llu", op,
	                   whole_name, (unsigned long long)whole->numel, world, block_name,
	                   (unsigned long long)block->numel);
}

/* The reduction is an ACCEL_RED_*; `reducible` says whether the backend
 * reduces this dtype. */
static inline int coll_check_reduction(const accel_host_v1 *host, accel_host *h, const char *op,
                                       uint32_t dtype, uint32_t red, int reducible)
{
	if (red > ACCEL_RED_MIN)
		return host->error(h, ACCEL_ERR_INVALID_ARG,
		                   "%s: reduction %u is not an ACCEL_RED_* (sum, avg, max, min)",
		                   op, red);
	if (!reducible)
		return host->error(h, ACCEL_ERR_UNSUPPORTED,
		                   "%s: cannot reduce %s; reductions take f32, f64, f16, bf16, "
		                   "i32 or i64",
		                   op, accel_abi_dtype_name(dtype));
	return ACCEL_OK;
}

/* The request out-parameter of an issuing call. */
static inline int coll_check_ret_req(const accel_host_v1 *host, accel_host *h, const char *op,
                                     accel_comm_req *const *ret_req)
{
	if (ret_req)
		return ACCEL_OK;
	return host->error(h, ACCEL_ERR_INVALID_ARG, "%s: ret_req is NULL", op);
}

/* A broadcast's root is a rank of the world. */
static inline int coll_check_root(const accel_host_v1 *host, accel_host *h, int32_t root,
                                  int32_t world)
{
	if (root >= 0 && root < world)
		return ACCEL_OK;
	return host->error(h, ACCEL_ERR_INVALID_ARG,
	                   "broadcast: root %d is not a rank (world size %d)", (int)root,
	                   (int)world);
}

/* wait() or test() (`call`) was given a request that is not live: NULL,
 * released already, or another backend's. */
static inline int coll_unknown_req(const accel_host_v1 *host, accel_host *h, const char *call,
                                   const accel_comm_req *r)
{
	return host->error(h, ACCEL_ERR_INVALID_ARG,
	                   "%s: %s request (already released, or not from this backend)", call,
	                   r ? "unknown" : "NULL");
}

#endif /* ACCEL_BACKENDS_COLL_CHECK_H */
