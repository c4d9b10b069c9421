/* SPDX-License-Identifier: MIT */
/* plugins/ddp/ddp.h: state of the ddp strategy (private to the plugin). */
#ifndef ACCEL_DDP_H
#define ACCEL_DDP_H

#include <stdint.h>

#include "accel/plugin.h"
#include "ddp-debug.h"

#define DDP_NO_BUCKET UINT32_MAX
#define DDP_MAX_STATE 4


typedef struct ddp_param {
	uint32_t bucket;             /* DDP_NO_BUCKET for frozen parameters        */
	uint64_t offset;             /* element offset of its gradient in the bucket */
	float *master;               /* f32 values the optimizer updates           */
	void *work;                  /* working dtype values (== master for f32)   */
	float *state[DDP_MAX_STATE]; /* optimizer state arrays                     */
} ddp_param;

typedef struct ddp_state ddp_state;

typedef struct ddp_bucket {
	uint32_t dtype;              /* the parameters' gradient dtype              */
	uint32_t reduce_dtype;       /* the dtype it crosses ranks in               */
	void *comm;                  /* reduce_dtype copy when it differs from dtype
	                                (mem_alloc(BUFFERS, COMM)); else NULL       */
	ddp_state *owner;            /* for the completion callback                 */
	int32_t device, device_index;
	uint64_t numel;              /* with alignment padding                      */
	uint64_t bytes;              /* gradient bytes of its parameters            */
	void *data;                  /* from mem_alloc(GRADS, COMM)                  */
	uint32_t first, n;           /* its parameters: ddp_state.order[first ..]    */
	uint32_t n_units;            /* distinct units with parameters in it         */
	uint32_t pending;            /* of those, not done with backward this step   */
	accel_req *req;              /* outstanding reduction                        */
	int launched;
	accel_bucket_v1 desc;        /* what reduce_bucket_v2 gets (entries below)    */
} ddp_bucket;

struct ddp_state {
	const accel_host_v1 *host;
	accel_host *h;
	accel_world_v1 world;
	uint64_t cap_bytes, first_bytes;
	const accel_model_v1 *model;
	uint32_t n_state;            /* optimizer state arrays per element            */
	accel_ckpt_writer *ckpt_w;   /* during save_state                             */
	accel_ckpt_reader *ckpt_r;   /* during load_state                             */
	ddp_param *params;           /* n_params (== model->n_params)                */
	uint32_t n_params;

	ddp_bucket *buckets;
	uint32_t n_buckets;
	uint32_t *order;             /* parameter indices grouped by bucket           */
	accel_bucket_entry_v1 *entries; /* parallel to order: where each gradient lies */
	/* Units -> buckets holding their gradients (CSR: unit u's buckets are
	 * unit_buckets[unit_first[u] .. unit_first[u + 1])). */
	uint32_t *unit_first, *unit_buckets;
	uint8_t *unit_done;          /* post_backward seen in this sync step          */
	uint32_t hook_units;         /* units with trainable parameters               */
	uint32_t hook_calls;         /* post_backward calls in this sync step         */
	uint32_t next_launch;        /* buckets are issued in order: the next one     */

	/* The debug extension and the arrays it points at. */
	accel_ddp_debug_v1 debug;
	uint32_t *dbg_first;
	uint64_t *dbg_numel, *dbg_bytes;
	uint32_t *dbg_dtype;
	int64_t *launch_pos;
};

/* The dtype a parameter's gradient is accumulated and reduced in: its
 * grad_dtype (ABI minor 3), else its working dtype. */
static inline uint32_t ddp_grad_dtype(const accel_param_info_v1 *p)
{
	return ACCEL_STRUCT_HAS(p, accel_param_info_v1, grad_dtype) && p->grad_dtype
	               ? p->grad_dtype
	               : p->dtype;
}

/* The dtype a parameter's gradients cross ranks in: its reduce_dtype
 * (ABI minor 3), else its gradient dtype. */
static inline uint32_t ddp_reduce_dtype(const accel_param_info_v1 *p)
{
	return ACCEL_STRUCT_HAS(p, accel_param_info_v1, reduce_dtype) && p->reduce_dtype
	               ? p->reduce_dtype
	               : ddp_grad_dtype(p);
}

/* ddp_bucket.c */
int ddp_plan_build(ddp_state *s);
int ddp_plan_check_ranks(ddp_state *s);
void ddp_plan_log(ddp_state *s);
int ddp_post_backward(void *state, uint32_t unit);
int ddp_reduce(void *state);
int ddp_zero_grads(ddp_state *s);

/* ddp_estimate.c */
int ddp_estimate_memory(const accel_host_v1 *host, accel_host *h, const accel_estimate_in_v1 *in,
                        accel_estimate_out_v1 *out);

#endif
