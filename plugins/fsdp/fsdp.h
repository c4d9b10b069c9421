/* SPDX-License-Identifier: MIT */
/* plugins/fsdp/fsdp.h: state of the fsdp strategy (private to the plugin).
 *
 * Layout (docs/fsdp.md): the program's units, in forward order, are grouped
 * by the wrap policy into FSDP units, each a run of consecutive program
 * units.  An FSDP unit's parameters lie back to back in one flat space
 * (the flat parameter), padded to a multiple of the world size and cut into
 * `world` equal blocks (plugins/shard); rank r owns block r.  The trainable
 * runs inside a rank's blocks are its `pieces` (NO_SHARD: every trainable
 * parameter whole, stepped in place as ddp does), for which the optimizer
 * store (plugins/zero/zero_store.h, linked from its source) keeps masters
 * and optimizer state. */
#ifndef ACCEL_FSDP_H
#define ACCEL_FSDP_H

#include <stdint.h>

#include "accel/plugin.h"
#include "shard.h"
#include "shard_setup.h"
#include "shard_util.h"
#include "zero_store.h"

enum { FSDP_FULL_SHARD, FSDP_SHARD_GRAD_OP, FSDP_NO_SHARD, FSDP_HYBRID_SHARD };
enum { FSDP_WRAP_UNIT, FSDP_WRAP_SIZE, FSDP_WRAP_TRANSFORMER, FSDP_WRAP_NONE };
enum { FSDP_PREFETCH_PRE, FSDP_PREFETCH_POST, FSDP_PREFETCH_NONE };
enum { FSDP_SD_FULL, FSDP_SD_SHARDED, FSDP_SD_LOCAL };

typedef struct fsdp_cfg {
	uint32_t sharding, wrap, prefetch, state_dict;
	int64_t min_num_params;
	const char *cls_names;            /* comma-separated name patterns          */
	int32_t forward_prefetch, limit_all_gathers, cpu_offload;
	int32_t sync_module_states, use_orig_params;
	uint32_t reduce_dtype;            /* ACCEL_DTYPE_*, 0: per parameter         */
} fsdp_cfg;

typedef struct fsdp_unit {
	uint32_t first_unit, n_units;     /* program units of this FSDP unit         */
	uint32_t first_param, n_params;
	uint32_t dtype, grad_dtype;       /* uniform over the unit                   */
	uint32_t red_dtype;               /* dtype the gradient crosses ranks in     */
	uint32_t reserved;
	void *rbuf;                       /* the gradient cast to red_dtype, while a
	                                     reduction in another dtype is in flight */
	int32_t device, device_index;
	uint64_t numel, padded, block, lo;/* flat size, padded size, own block       */
	uint64_t *at;                     /* n_params: offset of each in the flat    */
	uint32_t trainable;
	uint32_t n_entries;
	accel_bucket_entry_v1 *entries;
	accel_bucket_v1 desc;
	accel_bucket_entry_v1 *rentries;  /* HYBRID_SHARD: the trainable runs of the
	                                     block, for the all-reduce across nodes */
	accel_bucket_v1 rdesc;
	void *shard;                      /* own block of the working weights        */
	void *work;                       /* the gathered flat parameter (or NULL)   */
	void *grad;                       /* the full flat gradient (or NULL)        */
	void *acc;                        /* own block of the reduced gradient       */
	accel_req *req;                   /* reduction in flight                     */
	accel_req *greq;                  /* prefetch gather in flight               */
	int gathered, in_forward, in_backward, materialized, issued;
	uint32_t done;                    /* program units done with backward        */
	uint32_t held;                    /* hooks of program units of other FSDP units
	                                     that use one of its parameters (a tied
	                                     weight) hold it gathered                */
	int held_bwd;                     /* held, gradient bound, from a using unit's
	                                     pre_backward to its own post_backward    */
	struct fsdp_state *owner;         /* for the req_on_done cast-back            */
	int cast_done;                    /* the reduce-dtype copy was cast back      */
	int cb_pending;                   /* cast_back registered with req_on_done    */
} fsdp_unit;

typedef struct fsdp_state {
	const accel_host_v1 *host;
	accel_host *h;
	accel_world_v1 world;
	fsdp_cfg cfg;
	const accel_model_v1 *model;
	uint32_t W, rank, n_state;
	/* the shard group (HYBRID_SHARD: the node; else the world, NULL) and
	 * the replica group (HYBRID_SHARD: equal local ranks across nodes) */
	accel_group *shard_g, *rep_g;
	uint32_t S, srank;                /* shard group size, rank in it           */
	uint32_t rrank;                   /* rank in the replica group (0: saves)    */
	fsdp_unit *units;
	uint32_t n_units;
	uint32_t *unit_of;                /* program unit -> FSDP unit               */
	uint8_t *unit_done;               /* program units: post_backward seen       */
	zero_piece *pieces;
	uint64_t *piece_at;
	uint32_t *piece_unit;             /* the FSDP unit of each piece             */
	uint32_t n_pieces;
	zero_store *store;
	double *stats;
	uint64_t gathered_bytes, gathered_peak;
	int said_host_stats;              /* the debug line of grad_stats_device     */
	accel_ckpt_writer *ckpt_w;
	accel_ckpt_reader *ckpt_r;
} fsdp_state;

/* Whether the strategy keeps parameters sharded between uses. */
#define fsdp_shards_params(s) ((s)->cfg.sharding != FSDP_NO_SHARD)

/* cpu_offload of a sharded strategy: the rank's blocks of the weights and
 * of the reduced gradient live in host memory (ACCEL_MEM_OFFLOAD, pinned
 * when the parameters are on a GPU); a gather copies the block into the
 * gathered flat parameter on the parameters' device and all-gathers in
 * place, and the optimizer steps the blocks on the CPU threads. */
#define fsdp_offloaded(s) ((s)->cfg.cpu_offload && fsdp_shards_params(s))

/* A view of n elements at p of f's own blocks (shard, acc): host memory
 * under fsdp_offloaded, else the parameters' device. */
static inline accel_view fsdp_block_view(const fsdp_state *s, const fsdp_unit *f,
                                         uint32_t dtype, void *p, uint64_t n)
{
	return fsdp_offloaded(s) ? shard_view(dtype, ACCEL_DEVICE_CPU, 0, p, n)
	                         : shard_view(dtype, f->device, f->device_index, p, n);
}

/* The collectives of the shard group: the world's, or group_* on the node. */
static inline int fsdp_allgather(fsdp_state *s, const accel_view *send, const accel_view *recv,
                                 accel_req **ret_req)
{
	return s->shard_g ? s->host->group_allgather(s->h, s->shard_g, send, recv, ret_req)
	                  : s->host->allgather(s->h, send, recv, ret_req);
}

static inline int fsdp_allreduce_sum(fsdp_state *s, const accel_view *v)
{
	return s->shard_g ? s->host->group_allreduce(s->h, s->shard_g, v, v, ACCEL_RED_SUM, NULL)
	                  : s->host->allreduce(s->h, v, v, ACCEL_RED_SUM, NULL);
}

/* fsdp.c */
extern const accel_plugin_desc_v1 fsdp_desc;
int fsdp_read_config(const accel_host_v1 *H, accel_host *h, fsdp_cfg *c);

/* fsdp_wrap.c: wrap policies, layout, initial values */
int fsdp_wrap(void *state);
void fsdp_release_all(fsdp_state *s);
int fsdp_alloc(fsdp_state *s, uint32_t category, const fsdp_unit *u, uint64_t bytes,
               uint32_t flags, void **ret);
void fsdp_free(fsdp_state *s, void *p);

/* fsdp_hooks.c: gathers, reductions, the step */
int fsdp_pre_forward(void *state, uint32_t unit);
int fsdp_post_forward(void *state, uint32_t unit);
int fsdp_pre_backward(void *state, uint32_t unit);
int fsdp_post_backward(void *state, uint32_t unit);
int fsdp_micro_step_end(void *state, uint32_t sync);
int fsdp_reduce(void *state);
int fsdp_grad_stats(void *state, double *ret_sumsq, uint64_t *ret_nonfinite);
int fsdp_grad_stats_device(void *state, int32_t device, int32_t device_index, double *stats);
int fsdp_step(void *state, const accel_step_info_v1 *info);
int fsdp_materialize(void *state, uint32_t unit, uint32_t flags);
int fsdp_publish(fsdp_state *s);

/* fsdp_estimate.c: bytes kept between steps (estimate_memory, ABI 1.6) */
int fsdp_estimate_bytes(const fsdp_cfg *c, const accel_estimate_in_v1 *in, uint32_t S,
                        uint32_t srank, uint32_t n_state,
                        uint64_t bytes[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES]);
int fsdp_estimate_memory(const accel_host_v1 *host, accel_host *h,
                         const accel_estimate_in_v1 *in, accel_estimate_out_v1 *out);
void fsdp_log_estimate(fsdp_state *s);

/* fsdp_ckpt.c */
int fsdp_save_state(void *state, accel_ckpt_writer *w);
int fsdp_load_state(void *state, accel_ckpt_reader *r, uint32_t state_version);

#endif
