/* SPDX-License-Identifier: MIT */
/* tests/progs/comm-check.h: the collective checks shared by tests/test-comm.c
 * (which drives comm-shm.so directly) and tests/progs/comm-ranks.c (which
 * goes through libaccel under `accel launch`).
 *
 * Inputs are a function of (dtype, rank, element index, seed), so every rank
 * computes the expected result of every op itself: the reduction of all
 * ranks' inputs in rank order, f16/bf16 accumulated in f32 and rounded once,
 * AVG as sum / world (integers truncate), integer sums wrapping.  Results
 * must match bit for bit, and the bytes around every buffer must stay
 * untouched. */
#ifndef ACCEL_TEST_COMM_CHECK_H
#define ACCEL_TEST_COMM_CHECK_H

#include <stdint.h>

#include "accel/types.h"

/* Blocking collectives of the layer under test; status as returned. */
typedef struct comm_check_ops {
	int (*allreduce)(void *ctx, const accel_view *send, const accel_view *recv, uint32_t op);
	int (*reduce_scatter)(void *ctx, const accel_view *send, const accel_view *recv, uint32_t op);
	int (*allgather)(void *ctx, const accel_view *send, const accel_view *recv);
	int (*broadcast)(void *ctx, const accel_view *buf, int root);
	const char *(*errmsg)(void *ctx);
	void (*clear)(void *ctx);
	/* backend-allocated memory; NULL when the layer has none */
	int (*mem_alloc)(void *ctx, uint64_t bytes, void **ret_ptr);
	void (*mem_free)(void *ctx, void *ptr);
} comm_check_ops;

typedef struct comm_check {
	const comm_check_ops *ops;
	void *ctx;
	int rank, world;
	int use_mem;               /* buffers from ops->mem_alloc */
	const uint64_t *sizes;     /* element counts to try */
	int n_sizes;
	int all_reds_large;        /* all reductions also at >= 1M elements */
	int quiet;
} comm_check;

/* Run every op x dtype x reduction x placement x size; returns the number of
 * failed checks (each printed to stderr with rank and case). */
int comm_check_matrix(comm_check *cc);

/* The value of element `idx` of `rank`'s input in check number `seed`,
 * written as `dtype` to out. */
void comm_check_value(uint32_t dtype, int rank, uint64_t idx, uint32_t seed, void *out);

#endif
