/* SPDX-License-Identifier: MIT */
/* core/optim_pool.h: the optimizer on many threads (private; ABI minor 6,
 * host->optim_step_n).
 *
 * A context owns one pool of worker threads, created on first use and
 * joined when the context is freed (no global state).  A call cuts its
 * ranges into pieces (a long range into blocks of a multiple of 16
 * elements, so each piece starts where the sequential kernel's vector loop
 * would be) and the calling thread and n_threads - 1 workers step them.
 * The update of an element depends on that element alone (core/optim.h),
 * so the result is bit-identical to stepping each range in turn whatever
 * the split. */
#ifndef ACCEL_CORE_OPTIM_POOL_H
#define ACCEL_CORE_OPTIM_POOL_H

#include <stdint.h>

#include "error.h"
#include "optim.h"

typedef struct accel_optim_pool accel_optim_pool;

/* One range of a multi-range step: accelp_optim_step_range()'s arguments
 * but for the optimizer, the step count and the learning rate, which a
 * call shares. */
typedef struct accel_optim_task {
	const accel_optim_group *grp;
	float *param;
	const void *grad;
	uint32_t gdtype;
	float *state[ACCEL_OPTIM_MAX_STATE];
	uint64_t numel;
	double grad_scale;
} accel_optim_task;

/* An empty pool (no threads until a run needs them).  Owned. */
int accelp_optim_pool_new(accel_optim_pool **ret_pool);
/* Joins the workers; NULL-safe; returns NULL. */
accel_optim_pool *accelp_optim_pool_free(accel_optim_pool *pool);

/* Step `n` tasks with optimizer `optim` at step count t and rate lr on
 * n_threads threads (>= 1; the caller is one of them), then return.  The
 * first error of any piece is returned with its message in err (each
 * range is checked by accelp_optim_step_range, as a sequential call
 * would).  Workers are started as needed; ACCEL_ERR_SYSTEM when none can
 * be (the message says why).  Not reentrant: one run at a time per pool. */
int accelp_optim_pool_step(accel_optim_pool *pool, const accel_optim *optim, uint64_t t,
                          double lr, const accel_optim_task *tasks, uint32_t n,
                          uint32_t n_threads, accel_err *err);

/* The threads a rank is given: OMP_NUM_THREADS when set to a positive
 * integer, else the CPUs sched_getaffinity allows divided by
 * local_world_size; at least 1. */
uint32_t accelp_optim_pool_default_threads(int32_t local_world_size);

/* Elements per piece a long range is cut into (a multiple of 16). */
#define ACCEL_OPTIM_POOL_PIECE ((uint64_t)1 << 16)

#endif
