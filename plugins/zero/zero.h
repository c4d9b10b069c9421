/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero.h: state of the zero strategy (private to the plugin).
 *
 * Layout (docs/zero.md): parameters, in registration order, are cut into
 * reduce groups of consecutive units (about reduce_bucket_size elements; at
 * stage 3 one unit per group).  A group's parameters lie back to back in a
 * flat space padded to a multiple of world x ZERO_ALIGN elements and cut
 * into `world` equal blocks; rank r owns block r of every group.  The
 * elements of a rank's blocks that belong to parameters are its `pieces`
 * (zero_store.h), which the store keeps masters and optimizer state for. */
#ifndef ACCEL_ZERO_H
#define ACCEL_ZERO_H

#include <stdint.h>

#include "accel/plugin.h"
#include "shard.h"
#include "shard_setup.h"
#include "shard_util.h"
#include "zero_store.h"

/* Elements a group is padded to a multiple of, times the world size.  1:
 * blocks as DeepSpeed's flat partitions, and the ZeRO paper's per-rank
 * bytes exactly when the world divides the size (docs/zero.md,
 * "Decisions"). */
#define ZERO_ALIGN 1
#define ZERO_MAX_STATE_ARRAYS 4

typedef struct zero_state zero_state;

typedef struct zero_group {
	zero_state *owner;
	uint32_t first_unit, n_units;
	uint32_t first_param, n_params;   /* parameters first_param .. + n_params - 1 */
	uint32_t dtype, grad_dtype;       /* working and gradient dtype (uniform)     */
	int32_t device, device_index;
	uint64_t numel;                   /* elements of its parameters               */
	uint64_t padded;                  /* numel padded to world x ZERO_ALIGN       */
	uint64_t block;                   /* padded / world                           */
	uint64_t lo;                      /* this rank's block: [lo, lo + block)      */
	uint64_t *at;                     /* n_params: offset of each in the group    */
	uint32_t trainable;               /* some parameter requires a gradient      */
	/* stages 0-2: the full working weights and gradients (padded); stage 3:
	 * `work` is the gathered unit while materialized, `grad` its gradient
	 * during its backward. */
	void *work, *grad;
	/* stage 3 with zero3_keeps_units: the unit's gather and gradient
	 * buffers, allocated once for the job; `work`/`grad` point at them
	 * while the unit is gathered / its gradient is bound */
	void *keep_work, *keep_grad;
	void *shard_work;                 /* stage 3: this rank's block of weights    */
	void *acc;                        /* stages 2, 3: the gradient shard (acc_dtype) */
	uint32_t acc_dtype;               /* f32, or the gradient dtype when nothing
	                                     accumulates in it (docs/zero.md)      */
	uint32_t reserved;
	accel_bucket_entry_v1 *entries;   /* n_params runs of the gradient bucket     */
	uint32_t n_entries;
	accel_bucket_v1 desc;
	accel_req *req;                   /* outstanding reduction or gather          */
	uint32_t units_left;              /* units not done with backward this micro-step */
	int issued;                       /* reduction issued this micro-step         */
	int gathered;                     /* stage 3: `work` holds the unit           */
	int gathering;                    /* stage 3: `req` is its (prefetch) gather  */
	int persistent;                   /* stage 3: stays gathered                  */
	int in_forward, in_backward;      /* stage 3: inside the unit's hooks         */
	int materialized;                 /* stage 3: gathered by materialize()       */
	uint32_t held;                    /* stage 3: hooks of other units using one of
	                                     its parameters (a tied weight) hold it
	                                     gathered                                 */
	int held_bwd;                     /* stage 3: held (with its gradient bound)
	                                     from a using unit's pre_backward to its
	                                     own post_backward                        */
	uint64_t pswap_off;               /* offload_param nvme: its block in the swap */
} zero_group;

typedef struct zero_cfg {
	int64_t stage;
	int32_t overlap_comm, reduce_scatter, contiguous_gradients;
	double reduce_bucket_size, allgather_bucket_size;
	double prefetch_bucket_size, persistence_threshold, max_live_parameters;
	double max_reuse_distance, sub_group_size;
	int32_t zero3_init_flag;
	uint32_t opt_place;               /* ZERO_PLACE_* of offload_optimizer.device */
	uint32_t param_place;             /* ZERO_PLACE_* of offload_param.device     */
	const char *opt_nvme_path, *param_nvme_path;
	int32_t opt_pin_memory;
	int64_t opt_buffer_count;
	int64_t grad_accum;               /* /gradient_accumulation_steps           */
	zero_aio_opts aio;
} zero_cfg;

struct zero_state {
	const accel_host_v1 *host;
	accel_host *h;
	accel_world_v1 world;
	zero_cfg cfg;
	const accel_model_v1 *model;
	uint32_t n_state;
	uint32_t W, rank;

	zero_group *groups;
	uint32_t n_groups;
	uint32_t *unit_group;             /* n_units: the group holding each unit     */
	uint8_t *unit_done;               /* n_units: post_backward seen this micro-step */

	zero_piece *pieces;               /* this rank's runs, in group order         */
	uint32_t n_pieces;
	uint64_t *piece_at;               /* n_pieces: where each starts in the store */
	zero_store *store;
	uint32_t *piece_group;            /* n_pieces: the group of each piece        */
	uint64_t *piece_boff;             /* n_pieces: where it starts in the block   */

	/* offload_param nvme (zero_param_nvme.c) */
	zero_swap *pswap;
	void *pstage_raw, *pstage;        /* one block, 4096-aligned                  */
	uint64_t pstage_bytes;
	void *pshards_raw;                /* every block, during a step               */
	uint64_t pshards_bytes;

	/* checkpoint ranges this rank writes (stage 0 splits the replicas) */
	zero_piece *save;
	uint64_t *save_at;
	uint32_t n_save;

	/* stage 3 prefetch: units in the order their pre_* hooks came in the
	 * first step (forward then backward), and where we are in it */
	uint32_t *trace;
	uint32_t n_trace, cap_trace;
	int trace_done;
	uint32_t trace_pos;
	int keep_units;                   /* stage 3: zero3_keeps_units() held       */
	uint64_t live_numel;              /* gathered, non-persistent elements        */

	/* reductions in flight (stages 2, 3): groups in issue order */
	uint32_t *fifo;
	uint32_t fifo_head, fifo_n;

	double *stats;                    /* 2 f64 on the host for grad_stats        */
	uint64_t mem[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES]; /* bytes allocated now */
	uint64_t mem_peak[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES];
	int mem_logged;
	accel_ckpt_writer *ckpt_w;
	accel_ckpt_reader *ckpt_r;
};

/* The gradient shard's dtype (stages 2, 3): f32 when the gradients are f32
 * or when micro-steps accumulate into it (gradient_accumulation_steps > 1);
 * else the gradient dtype, the reduced gradient as it arrives (the ZeRO
 * paper's 2 bytes per element for 16-bit gradients). */
static inline uint32_t zero_acc_dtype(uint32_t grad_dtype, int64_t grad_accum)
{
	return grad_accum > 1 ? (uint32_t)ACCEL_DTYPE_F32 : grad_dtype;
}

/* The category of the full-size gradient buffers the program writes into:
 * gradients at stages 0-1 (they are the accumulated gradients); a reused
 * buffer at stage 2 (cleared after every micro-step's reduce-scatter) and
 * stage 3 (a unit's, from its pre_backward to its reduce-scatter). */
/* Stage 3 keeps every unit's gather and gradient buffer for the job
 * (instead of allocating them per gather) when the non-persistent units
 * together (`sum` padded elements) fit the peak that gathering one by one
 * may reach anyway: the two largest units (top1 + top2) and the prefetch
 * budget, and stage3_max_live_parameters; not with parameters on NVMe. */
static inline int zero3_keeps_units(const zero_cfg *c, uint64_t sum, uint64_t top1,
                                    uint64_t top2)
{
	return c->stage == 3 && c->param_place != ZERO_PLACE_NVME &&
	       (double)sum <= (double)(top1 + top2) + c->prefetch_bucket_size &&
	       (double)sum <= c->max_live_parameters;
}

#define zero_grad_category(s) ((s)->cfg.stage >= 2 ? ACCEL_MEM_BUFFERS : ACCEL_MEM_GRADS)

/* zero.c */
extern const accel_plugin_desc_v1 zero_desc;
int zero_read_config(const accel_host_v1 *H, accel_host *h, zero_cfg *c, int for_estimate);

/* zero_partition.c: layout, stages 0-2, the step */
int zero_alloc(zero_state *s, uint32_t category, int32_t device, int32_t device_index,
               uint64_t bytes, uint32_t flags, void **ret);
void zero_free(zero_state *s, void *p, uint32_t category, int32_t device, uint64_t bytes);
int zero_wrap(void *state);
int zero_post_backward(void *state, uint32_t unit);
int zero_micro_step_end(void *state, uint32_t sync);
int zero_reduce(void *state);
int zero_grad_stats(void *state, double *ret_sumsq, uint64_t *ret_nonfinite);
int zero_grad_stats_device(void *state, int32_t device, int32_t device_index, double *stats);
int zero_step(void *state, const accel_step_info_v1 *info);
int zero_publish(zero_state *s);
void zero_release_all(zero_state *s);
int zero_issue(zero_state *s, zero_group *g, int async);
int zero_drain(zero_state *s, uint32_t keep);

/* zero_stage3.c */
int zero3_gather(zero_state *s, zero_group *g, int bind);
int zero3_release(zero_state *s, zero_group *g);
int zero3_pre_forward(void *state, uint32_t unit);
int zero3_post_forward(void *state, uint32_t unit);
int zero3_pre_backward(void *state, uint32_t unit);
int zero3_post_backward(void *state, uint32_t unit);
int zero3_materialize(void *state, uint32_t unit, uint32_t flags);
int zero3_regather_persistent(zero_state *s);
int zero3_end_micro(zero_state *s);

/* zero_param_nvme.c */
#define zero_param_nvme(s) ((s)->cfg.stage == 3 && (s)->cfg.param_place == ZERO_PLACE_NVME)
uint64_t zero3p_layout(zero_state *s, uint64_t *ret_largest);
int zero3p_open(zero_state *s);
void zero3p_close(zero_state *s);
int zero3p_read_block(zero_state *s, zero_group *g, void *dst);
int zero3p_write_block(zero_state *s, zero_group *g, const void *src);
int zero3p_shards_in(zero_state *s, int read);
int zero3p_shards_out(zero_state *s);

/* zero_ckpt.c */
int zero_save_state(void *state, accel_ckpt_writer *w);
int zero_load_state(void *state, accel_ckpt_reader *r, uint32_t state_version);

/* zero_estimate.c */
int zero_estimate_memory(const accel_host_v1 *host, accel_host *h,
                         const accel_estimate_in_v1 *in, accel_estimate_out_v1 *out);
void zero_log_memory(zero_state *s);

#endif
