/* SPDX-License-Identifier: MIT */
/*
 * backends/common/coll.h: what the comm backends share about collectives:
 * the kinds and their names, the dtypes that reduce, where an op's buffers
 * lie, and debug assertions of the arguments.  The core validates every
 * argument of a collective once (core/comm_check.c), with the message the
 * user sees; the backends assert what it guarantees.  Header-only.
 */
#ifndef ACCEL_BACKENDS_COLL_H
#define ACCEL_BACKENDS_COLL_H

#include <assert.h>
#include <stdint.h>
#include <stdio.h>

#include "accel/comm.h"

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

/* Where the two buffers of an op lie (coll_place). */
#define COLL_APART      0  /* separate buffers */
#define COLL_SAME       1  /* send->data == recv->data: the ABI's in place */
#define COLL_RANK_BLOCK 2  /* reduce_scatter: recv == send + rank x recv count;
                              allgather: send == recv + rank x send count (the
                              in-place form of NCCL and of MPI_IN_PLACE
                              all-gather); rank > 0 only, on rank 0 it is
                              COLL_SAME */

/* Where send and recv of op `kind` lie on this `rank`: apart, or one of
 * the in-place forms the core accepts (it refuses any other overlap). */
static inline int coll_place(int kind, int32_t rank, const accel_view *send,
                             const accel_view *recv)
{
	uint64_t es = accel_abi_dtype_size(send->dtype);
	uintptr_t s = (uintptr_t)send->data, r = (uintptr_t)recv->data;
	uint64_t ns = send->numel * es, nr = recv->numel * es;
	if (!ns || !nr || s >= r + nr || r >= s + ns)
		return COLL_APART;
	if (s == r)
		return COLL_SAME;
	assert((kind == OP_REDUCE_SCATTER && r == s + (uint64_t)rank * nr) ||
	       (kind == OP_ALLGATHER && s == r + (uint64_t)rank * ns));
	return COLL_RANK_BLOCK;
}

/*
 * Debug assertions of what the core (core/comm_check.c, comm_coll.c)
 * checked before it called the backend (accel_comm_*: views, dtypes,
 * counts, reductions, roots, requests in flight), so a backend does not check the arguments again: a failed
 * assertion here is a bug in the core, not a user error.  `device`:
 * ACCEL_DEVICE_CPU for the host backends (the core routes device buffers
 * elsewhere), -1 for any.
 */
static inline void coll_assert_view(const accel_view *v, int device)
{
	assert(v && v->struct_size >= sizeof(accel_view));
	assert(accel_abi_dtype_size(v->dtype) != 0);
	assert(v->data || v->numel == 0);
	assert(device < 0 || v->device == device);
	(void)v;
	(void)device;
}

/* The two views of op `kind` in a world of `world`: one dtype, and the
 * counts the op needs (reduce_scatter: send = world x recv; allgather:
 * recv = world x send; allreduce: equal). */
static inline void coll_assert_pair(int kind, int32_t world, const accel_view *send,
                                    const accel_view *recv, int device)
{
	coll_assert_view(send, device);
	coll_assert_view(recv, device);
	assert(send->dtype == recv->dtype);
	assert(kind != OP_ALLREDUCE || send->numel == recv->numel);
	assert(kind != OP_REDUCE_SCATTER || send->numel == recv->numel * (uint64_t)world);
	assert(kind != OP_ALLGATHER || recv->numel == send->numel * (uint64_t)world);
	(void)kind;
	(void)world;
}

/* A reduction the core accepted: an ACCEL_RED_* over a dtype that reduces. */
static inline void coll_assert_reduction(uint32_t dtype, uint32_t red)
{
	assert(red <= ACCEL_RED_MIN);
	assert(coll_dtype_reducible(dtype));
	(void)dtype;
	(void)red;
}

#endif /* ACCEL_BACKENDS_COLL_H */
