/* SPDX-License-Identifier: MIT */
/*
 * plugins/ddp/ddp-debug.h: the "ddp.debug" extension, version 1.
 *
 * A read-only view of the ddp plugin's bucket plan and reduction counters,
 * for tests and tools (docs/ddp.md).  Get it through the plugin's
 * `extension` slot (accel_plugin_v1.extension(state, ACCEL_DDP_DEBUG, 1)).
 * The returned struct lives in the plugin's state: valid until the context
 * is freed; the arrays are filled by accel_prepare() (NULL / 0 before) and
 * the counters change during accel_unit_post_backward() and accel_step().
 */
#ifndef ACCEL_DDP_DEBUG_H
#define ACCEL_DDP_DEBUG_H

#include <stdint.h>

#define ACCEL_DDP_DEBUG "ddp.debug"

typedef struct accel_ddp_debug_v1 {
	uint32_t struct_size;           /* sizeof(accel_ddp_debug_v1)                */
	uint32_t n_buckets;
	/* Bucket b holds the parameters bucket_params[bucket_first[b] ..
	 * bucket_first[b + 1]) in memory order (n_buckets + 1 entries). */
	const uint32_t *bucket_first;
	const uint32_t *bucket_params;  /* parameter indices                          */
	const uint64_t *bucket_numel;   /* elements of the bucket (with alignment)    */
	const uint64_t *bucket_bytes;   /* gradient bytes of its parameters (no padding) */
	const uint32_t *bucket_dtype;   /* ACCEL_DTYPE_* of the bucket                */
	/* For the last sync step: the number of accel_unit_post_backward()
	 * calls of that step made so far (counting the one that issued it) when
	 * bucket b's reduction was issued; -1 when accel_step() issued it
	 * (no hooks were called in that step). */
	const int64_t *launch_pos;
	uint32_t hook_units;            /* units with trainable parameters: the
	                                   post_backward calls a full step makes     */
	uint32_t reserved;
	uint64_t plan_hash;             /* FNV-1a of the plan; equal on every rank    */
	uint64_t sync_steps;            /* sync steps reduced since prepare           */
	uint64_t reductions;            /* bucket reductions issued since prepare     */
	uint64_t overlapped;            /* of those, issued by a post_backward call
	                                   other than the step's last one, i.e. while
	                                   backward of other units was still to come */
} accel_ddp_debug_v1;

#endif
