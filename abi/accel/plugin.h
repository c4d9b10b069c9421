/* SPDX-License-Identifier: MIT */
/*
 * accel/plugin.h: the strategy/hook plugin ABI, version 1.
 *
 * A plugin is a shared object that exports exactly one symbol:
 *
 *     ACCEL_EXPORT const accel_plugin_v1 *
 *     accel_plugin_entry_v1(const accel_host_v1 *host);
 *
 * The loader dlopen()s the file with RTLD_NOW | RTLD_LOCAL, looks up the
 * entry of the newest major it supports, and calls it once.  The entry must
 * not allocate or keep state: it returns a pointer to a static, immutable
 * vtable (or NULL if `host` is too old for it, after calling host->error).
 * All per-run state lives behind the `void *state` that init() returns; a
 * plugin keeps nothing in process globals, so two contexts can use the same
 * plugin at once.
 *
 * Plugins never link libaccel: everything they may call is in the host
 * table below.  Build with -fvisibility=hidden and -Wl,--no-undefined.
 *
 * Threading: unless a member says otherwise, the core calls every vtable
 * slot from the thread that calls the user API (the "training thread"),
 * never two at once for one state, and host functions may be called only
 * from that thread while the slot runs.
 *
 * Errors: every slot returns ACCEL_OK or a negative ACCEL_ERR_* code.  On
 * failure the plugin first calls host->error(h, code, fmt, ...) (which copies
 * the message; the first message wins) and returns that code.  Nothing is
 * ever freed across the boundary: memory the plugin allocates, it frees;
 * strings the host returns are borrowed.
 *
 * Compatibility: structs are append-only.  The core reads a plugin struct
 * member only if the plugin's struct_size covers it; a plugin must check
 * host->struct_size before it uses a host member newer than ACCEL_ABI_MINOR 0,
 * and the host honours a flag of minor N only when host->abi_minor >= N.
 */
#ifndef ACCEL_PLUGIN_H
#define ACCEL_PLUGIN_H

#include <stdarg.h>

#include "accel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- roles ----------------------------------------------------------------
 * Exactly one STRATEGY is active (ddp if the config names none).  Any number
 * of hook plugins may be active, at most one per exclusive role:
 * PRECISION (loss scaling, fp8 scaling) and REDUCE_HOOK (replaces the
 * gradient all-reduce of a bucket, e.g. compression). */
#define ACCEL_ROLE_STRATEGY    1
#define ACCEL_ROLE_PRECISION   2
#define ACCEL_ROLE_REDUCE_HOOK 3
#define ACCEL_ROLE_OTHER       4

/* ---- capabilities (desc.caps, bit set) ----------------------------------- */
#define ACCEL_CAP_CPU            (1u << 0) /* works with parameters in host memory  */
#define ACCEL_CAP_CUDA           (1u << 1) /* works with parameters on CUDA devices */
#define ACCEL_CAP_SHARD_OPTIM    (1u << 2) /* shards optimizer state (ZeRO-1)       */
#define ACCEL_CAP_SHARD_GRADS    (1u << 3) /* shards gradients (ZeRO-2)             */
#define ACCEL_CAP_SHARD_PARAMS   (1u << 4) /* shards parameters (ZeRO-3, FSDP): data
                                              pointers valid only inside unit hooks */
#define ACCEL_CAP_OFFLOAD        (1u << 5) /* can offload to host memory or NVMe    */
#define ACCEL_CAP_CHECKPOINT     (1u << 6) /* implements save_state/load_state      */

/* ---- requirements (desc.requires, bit set) -------------------------------- */
/* The loader refuses to select a plugin whose requirements this process cannot
 * meet, with a message naming the missing piece ("needs CUDA"). */
#define ACCEL_REQ_CUDA (1u << 0) /* a CUDA device and accel's cuda module  */
#define ACCEL_REQ_NCCL (1u << 1) /* accel's nccl comm backend               */
#define ACCEL_REQ_MPI  (1u << 2) /* accel's mpi comm backend                */

/* ---- configuration schema --------------------------------------------------
 * A plugin declares every key it reads.  The core validates the user's config
 * against the schema before init(), fills in defaults, rejects unknown keys
 * with a suggestion, and documents the keys in `accel plugins info NAME`. */
#define ACCEL_CFG_BOOL    1
#define ACCEL_CFG_INT     2 /* int64                                     */
#define ACCEL_CFG_DOUBLE  3 /* accepts JSON integers too                 */
#define ACCEL_CFG_STRING  4
#define ACCEL_CFG_ENUM    5 /* a string from `choices`                   */
#define ACCEL_CFG_STRLIST 6 /* JSON array of strings                     */

typedef struct accel_param_schema_v1 {
	uint32_t struct_size;      /* sizeof(accel_param_schema_v1)                  */
	uint32_t type;             /* ACCEL_CFG_*                                    */
	const char *key;           /* path inside the plugin's section; nested JSON
	                              objects are written with dots:
	                              "offload_optimizer.device"                     */
	const char *default_json;  /* default as JSON text ("25", "\"cpu\"", "true",
	                              "[]"); NULL: no default, the key is unset unless
	                              the user gives it                               */
	double min, max;           /* inclusive range for INT/DOUBLE; ignored when
	                              min > max                                       */
	const char *choices;       /* ENUM only: '|'-separated ("none|cpu|nvme")     */
	const char *help;          /* one sentence for `accel plugins info`          */
} accel_param_schema_v1;

/* ---- descriptor ---------------------------------------------------------- */
typedef struct accel_plugin_desc_v1 {
	uint32_t struct_size;        /* sizeof(accel_plugin_desc_v1)                */
	uint32_t role;               /* ACCEL_ROLE_*                                */
	const char *name;            /* unique, [a-z0-9_-]+; what the config selects */
	const char *version;         /* the plugin's own version, "MAJOR.MINOR.PATCH" */
	const char *summary;         /* one line for `accel plugins list`           */
	uint32_t caps;               /* ACCEL_CAP_* bits                            */
	uint32_t requires;           /* ACCEL_REQ_* bits                            */
	int32_t min_cuda_cc;         /* e.g. 89 for sm_89; 0 when no CUDA need      */
	uint32_t state_version;      /* version of the blob save_state writes; stored
	                                in checkpoints and handed back to load_state */
	const char *config_section;  /* JSON object holding this plugin's keys (e.g.
	                                "ddp", "zero_optimization"); NULL: no keys  */
	const accel_param_schema_v1 *params; /* n_params entries (may be NULL if 0) */
	uint32_t n_params;
	uint32_t reserved;           /* 0                                           */
} accel_plugin_desc_v1;

/* ---- the host side --------------------------------------------------------- */

/* Opaque handle the core gives each plugin (and comm backend) instance; the
 * first argument of every host function.  Valid from init() to fini(). */
typedef struct accel_host accel_host;

/* An outstanding collective.  Owned by the host; released by wait(). */
typedef struct accel_req accel_req;

/* A sub-communicator (ABI minor 3, host->group_split()).  Owned by the core;
 * freed with host->group_free() or with the context. */
typedef struct accel_group accel_group;

/* Checkpoint streams, owned by the core, valid during save_state/load_state. */
typedef struct accel_ckpt_writer accel_ckpt_writer;
typedef struct accel_ckpt_reader accel_ckpt_reader;

typedef struct accel_world_v1 {
	uint32_t struct_size;
	int32_t rank;              /* 0 .. world_size-1                 */
	int32_t world_size;
	int32_t local_rank;        /* rank among processes on this node */
	int32_t local_world_size;
	int32_t node_rank;
	int32_t num_nodes;
} accel_world_v1;

/* One parameter of the user's model, as registered.  Read-only. */
typedef struct accel_param_info_v1 {
	uint32_t struct_size;
	uint32_t dtype;           /* working dtype the user computes with        */
	const char *name;         /* unique within the model ("fc0.weight")      */
	uint32_t index;           /* position in accel_model_v1.params           */
	uint32_t unit;            /* index of the unit (layer) holding it        */
	uint32_t group;           /* optimizer parameter group                   */
	uint32_t ndim;            /* 0..8                                         */
	const int64_t *shape;     /* ndim entries, row-major                     */
	uint64_t numel;           /* product of shape (1 when ndim == 0)         */
	int32_t device;           /* ACCEL_DEVICE_* where the user computes       */
	int32_t device_index;
	uint32_t requires_grad;   /* 0: frozen, never reduced or stepped         */
	uint32_t reserved;
} accel_param_info_v1;

/* A unit is a contiguous run of parameters that forward/backward together:
 * the granularity of ZeRO-3/FSDP gathers and of DDP readiness. */
typedef struct accel_unit_info_v1 {
	uint32_t struct_size;
	uint32_t first_param;     /* index of its first parameter  */
	uint32_t n_params;        /* its parameters are first_param .. +n_params-1 */
	uint32_t reserved;
	const char *name;
	uint64_t numel;           /* total elements of its parameters */
} accel_unit_info_v1;

typedef struct accel_model_v1 {
	uint32_t struct_size;
	uint32_t n_params;
	uint32_t n_units;
	uint32_t n_groups;        /* optimizer parameter groups */
	const accel_param_info_v1 *params;  /* n_params, in registration order */
	const accel_unit_info_v1 *units;    /* n_units, in forward order       */
	uint64_t total_numel;
} accel_model_v1;

/* One call of the core's optimizer on a flat range of one parameter.  The
 * core knows the optimizer, its hyper-parameters, the parameter's group, the
 * learning rate of this step and the step count; the strategy brings the
 * memory.  Element `i` of the views is element `offset + i` of the parameter. */
typedef struct accel_optim_args_v1 {
	uint32_t struct_size;
	uint32_t param;           /* parameter index                                */
	uint64_t offset;          /* first element of the range inside the parameter */
	accel_view master;        /* f32 values to update, in place                 */
	accel_view grad;          /* gradients (f32, f16 or bf16), read only        */
	float *state[4];          /* optim_state_count() f32 arrays of master.numel
	                             elements on master's device, in place; zero on
	                             the first step                                 */
	double grad_scale;        /* multiply gradients by this first (unscale, clip) */
} accel_optim_args_v1;

/* What the core passes through a step.  Precision hooks may modify it in
 * pre_step; the strategy reads it in step. */
typedef struct accel_step_info_v1 {
	uint32_t struct_size;
	uint32_t skip;            /* in/out: nonzero = do not apply this step     */
	uint64_t step;            /* optimizer steps applied before this one      */
	double lr;                /* learning rate of group 0 for this step       */
	double loss_scale;        /* the scale the loss was multiplied by (1 = none) */
	double grad_norm;         /* global L2 norm of the unscaled gradients, as
	                             torch computes it: +inf if some element is
	                             infinite, NaN if some is NaN (test nonfinite,
	                             or !isfinite(), to detect overflow); NaN also
	                             when nothing needed it (no clipping, loss
	                             scaler, pre_step hook or track_grad_norm:
	                             grad_stats was not called) */
	double grad_scale;        /* the factor step() must apply to gradients:
	                             clip coefficient / (loss_scale * G)           */
	uint64_t nonfinite;       /* non-finite gradient elements, all ranks      */
	/* ABI minor 1 (read only when info->struct_size covers it): */
	uint32_t flags;           /* ACCEL_STEP_* bits                            */
	uint32_t reserved;
} accel_step_info_v1;

/* accel_step_info_v1.flags */
/* The program writes (rather than adds to) every trainable gradient on the
 * first micro-step after this step (accel_set_grad_overwrite()): step() must
 * not spend a pass zeroing them; their contents afterwards do not matter. */
#define ACCEL_STEP_KEEP_GRADS (1u << 0)

/* The whole selection, given to validate(). */
typedef struct accel_selection_v1 {
	uint32_t struct_size;
	uint32_t n_plugins;
	const char *const *names;   /* n_plugins names; names[0] is the strategy */
	const uint32_t *roles;      /* n_plugins ACCEL_ROLE_* */
	const char *backend;        /* comm backend name that will be used */
	int32_t world_size;
	int32_t reserved;
} accel_selection_v1;

typedef struct accel_host_v1 {
	uint32_t struct_size;     /* sizeof(accel_host_v1) of the running core   */
	uint32_t abi_major;       /* ACCEL_ABI_MAJOR of the running core          */
	uint32_t abi_minor;       /* ACCEL_ABI_MINOR of the running core          */
	uint32_t reserved;
	const char *accel_version; /* "MAJOR.MINOR.PATCH" of libaccel             */

	/* -- logging and errors (any thread) ----------------------------------- */
	/* Log through the core's logger (level filter, rank prefix).  `h` may be
	 * NULL inside the entry function. */
	void (*log)(accel_host *h, int32_t level, const char *fmt, ...) ACCEL_PRINTF(3, 4);
	/* Record why a call failed and return `code`.  The text is copied; the
	 * first error recorded for a context wins.  Say what, where and what to
	 * do.  `h` may be NULL inside the entry function (the loader then
	 * reports the text with the file's path). */
	int (*error)(accel_host *h, int32_t code, const char *fmt, ...) ACCEL_PRINTF(3, 4);

	/* -- world --------------------------------------------------------------- */
	int (*world)(accel_host *h, accel_world_v1 *ret_world);

	/* -- configuration ------------------------------------------------------
	 * Typed, already validated values.  `key` is a path inside the plugin's
	 * config_section ("offload_optimizer.device"); a leading '/' addresses
	 * the root instead ("/gradient_accumulation_steps",
	 * "/zero_optimization.stage"), for reading core keys or another plugin's.
	 * Return ACCEL_ERR_NOT_FOUND (without recording an error) when the key
	 * is unset and has no default, ACCEL_ERR_CONFIG on a type mismatch.
	 * Strings are borrowed until fini(). */
	int (*cfg_bool)(accel_host *h, const char *key, int32_t *ret_value);
	int (*cfg_int)(accel_host *h, const char *key, int64_t *ret_value);
	int (*cfg_double)(accel_host *h, const char *key, double *ret_value);
	int (*cfg_string)(accel_host *h, const char *key, const char **ret_value);
	int (*cfg_strlist)(accel_host *h, const char *key, uint32_t index,
	                   const char **ret_value); /* NOT_FOUND past the end */

	/* -- the model -------------------------------------------------------------
	 * Valid from wrap() on; borrowed until fini(). */
	const accel_model_v1 *(*model)(accel_host *h);
	/* Tell the core where parameter `param`'s full working-dtype values and
	 * gradient live now, so accel_param_data()/accel_param_grad() can return
	 * them.  NULL means "not materialized" (sharded strategies outside the
	 * unit's hook window).  Call again whenever the storage moves. */
	int (*param_bind)(accel_host *h, uint32_t param, void *data, void *grad);
	/* Fill `dst` with the initial values of elements [offset, offset +
	 * dst->numel) of parameter `param`, converting to dst->dtype: copied from
	 * what the user registered or produced by the user's init callback.
	 * Lets a strategy materialize only the shard it owns. */
	int (*param_init)(accel_host *h, uint32_t param, uint64_t offset, const accel_view *dst);

	/* -- memory ------------------------------------------------------------------
	 * Every byte is accounted under `category` (ACCEL_MEM_*) and device.
	 * ACCEL_MEMF_COMM asks the comm backend for the memory so collectives on
	 * it run without staging; it falls back to ordinary memory (and says so
	 * at debug level) when the backend has no allocator.  Alignment: 64 B. */
	int (*mem_alloc)(accel_host *h, uint32_t category, int32_t device, int32_t device_index,
	                 uint64_t bytes, uint32_t flags, void **ret_ptr);
	void (*mem_free)(accel_host *h, void *ptr); /* NULL is a no-op */

	/* -- device ops on views (the device is taken from the views) ------------- */
	int (*op_copy)(accel_host *h, const accel_view *dst, const accel_view *src); /* converts dtype */
	int (*op_fill)(accel_host *h, const accel_view *dst, double value);
	int (*op_scale)(accel_host *h, const accel_view *x, double alpha);            /* x *= alpha */
	int (*op_axpy)(accel_host *h, const accel_view *y, double alpha, const accel_view *x); /* y += alpha x */
	int (*op_sumsq)(accel_host *h, const accel_view *x, double *ret_sumsq);       /* local, f64 accumulation */
	int (*op_nonfinite)(accel_host *h, const accel_view *x, uint64_t *ret_count);  /* local NaN/Inf count */

	/* -- optimizer -------------------------------------------------------------- */
	/* Number of f32 state arrays per element the configured optimizer keeps
	 * (0: SGD without momentum, 1: SGD with momentum, 2: AdamW). */
	uint32_t (*optim_state_count)(accel_host *h);
	/* Apply one update of the configured optimizer to a range; see
	 * accel_optim_args_v1.  Uses the step's learning rate and step count. */
	int (*optim_step)(accel_host *h, const accel_optim_args_v1 *args);

	/* -- collectives through the selected comm backend --------------------------
	 * Views may be in place (send->data == recv->data).  With ret_req NULL the
	 * call blocks; otherwise it returns at once and *ret_req must be passed
	 * to wait().  Collectives are issued in call order and must be called in
	 * the same order on every rank.  A timeout or dead peer is an error that
	 * names the collective, its sequence number and the missing ranks.
	 * A comm backend for device buffers may call them on host buffers from
	 * its init(), which the core runs inside the first collective or
	 * backend allocation on a device buffer: they go to the job's host
	 * backend (nccl broadcasts its unique id so in a job without a store).
	 * On device buffers they fail there with ACCEL_ERR_STATE, as they do
	 * in a host backend's init() (no comm is up yet). */
	int (*allreduce)(accel_host *h, const accel_view *send, const accel_view *recv,
	                 uint32_t op, accel_req **ret_req);
	/* send->numel == world_size * recv->numel; rank r receives block r. */
	int (*reduce_scatter)(accel_host *h, const accel_view *send, const accel_view *recv,
	                      uint32_t op, accel_req **ret_req);
	/* recv->numel == world_size * send->numel; block r comes from rank r. */
	int (*allgather)(accel_host *h, const accel_view *send, const accel_view *recv,
	                 accel_req **ret_req);
	int (*broadcast)(accel_host *h, const accel_view *buf, int32_t root, accel_req **ret_req);
	int (*barrier)(accel_host *h, accel_req **ret_req);
	/* wait() releases req: a second wait() or test() of it fails with
	 * ACCEL_ERR_INVALID_ARG.  Requests never waited for are released with
	 * the context. */
	int (*wait)(accel_host *h, accel_req *req);                      /* releases req */
	int (*test)(accel_host *h, accel_req *req, int32_t *ret_done);   /* never blocks */

	/* The reduce-hook point.  A strategy that all-reduces gradient buckets
	 * calls this instead of allreduce(); on return (or after wait()) the
	 * bucket holds the mean of the ranks' buckets.  Without a REDUCE_HOOK
	 * plugin it is an in-place allreduce SUM of a bucket the strategy has
	 * pre-divided by the world size; with one, the hook's reduce_bucket().
	 * `bucket_id` is stable across steps (hooks keep error feedback by it). */
	int (*reduce_bucket)(accel_host *h, const accel_view *bucket, uint32_t bucket_id,
	                     accel_req **ret_req);

	/* -- step state ---------------------------------------------------------------- */
	/* Nonzero when the current micro-step ends an accumulation cycle, i.e.
	 * gradients are to be reduced now.  On other micro-steps a strategy must
	 * not communicate in unit hooks. */
	int32_t (*sync_step)(accel_host *h);

	/* -- checkpoint streams (only inside save_state/load_state) --------------------
	 * Named blobs private to this plugin.  Data is copied; readers get exactly
	 * the bytes written (ACCEL_ERR_CHECKPOINT when missing or a different size). */
	int (*ckpt_write)(accel_host *h, accel_ckpt_writer *w, const char *name,
	                  const void *data, uint64_t bytes);
	int (*ckpt_size)(accel_host *h, accel_ckpt_reader *r, const char *name, uint64_t *ret_bytes);
	int (*ckpt_read)(accel_host *h, accel_ckpt_reader *r, const char *name,
	                 void *buf, uint64_t bytes);

	/* -- rendezvous store (for comm backends' bootstrap; any rank) ----------------
	 * A key-value store shared by all ranks of the job (hosted by rank 0).
	 * get() waits up to timeout_ms for the key to appear; timeout_ms == 0
	 * probes: the status is the answer (ACCEL_ERR_NOT_FOUND for a missing
	 * key, ACCEL_ERR_UNSUPPORTED in a job without a store, another status
	 * when the store cannot be reached) and no error is recorded.  While
	 * waiting outside the store (for peers to attach, say), probe
	 * "accel/job/failed": the store sets it, to a message naming the rank,
	 * when a rank exited before joining the job, reported failing, or lost
	 * its connection without leaving (docs/launch.md). */
	int (*store_set)(accel_host *h, const char *key, const void *value, uint64_t len);
	int (*store_get)(accel_host *h, const char *key, void *buf, uint64_t cap,
	                 uint64_t *ret_len, int64_t timeout_ms);
	int (*store_add)(accel_host *h, const char *key, int64_t delta, int64_t *ret_value);

	/* -- ABI minor 1 ----------------------------------------------------------------
	 * (check host->struct_size >= offsetof(accel_host_v1, member) + sizeof(member)) */

	/* reduce_bucket() without the pre-division: the strategy passes its own
	 * (undivided) gradients and, on return or after wait(), the bucket holds
	 * their mean over the ranks.  Without a REDUCE_HOOK plugin the backend
	 * averages in its reduction pass (an allreduce AVG: no separate pass
	 * over the bucket); with one, the host pre-divides the bucket and calls
	 * the hook's reduce_bucket() with the contract above. */
	int (*reduce_bucket_mean)(accel_host *h, const accel_view *bucket, uint32_t bucket_id,
	                          accel_req **ret_req);

	/* -- ABI minor 3: groups ----------------------------------------------------------
	 * Sub-communicators, as MPI_Comm_split / ncclCommSplit / torch's
	 * new_subgroups: HYBRID_SHARD shards within a node and replicates across
	 * nodes with two splits of the world (docs/comm.md, "Groups"):
	 *     within the node: color = world.node_rank,  key = world.local_rank
	 *     across nodes:    color = world.local_rank, key = world.node_rank
	 * `g` NULL means the world everywhere below.  Check with
	 * ACCEL_HOST_HAS(host, group_split) first. */

	/* Collective over `parent` (every rank of it calls it, in the same order
	 * as its other collectives there): the ranks that pass the same `color`
	 * form a group, ordered by (key, rank in parent).  color
	 * ACCEL_COMM_SPLIT_NONE (-1, accel/comm.h) joins no group: *ret_group
	 * is set to NULL and the call still returns ACCEL_OK.  Other negative
	 * colours are ACCEL_ERR_INVALID_ARG.  Host and (when it is up) device
	 * backend are split together; a backend without a split slot fails
	 * with ACCEL_ERR_UNSUPPORTED naming it.  Owned by the caller: free
	 * with group_free(). */
	int (*group_split)(accel_host *h, accel_group *parent, int32_t color, int32_t key,
	                   accel_group **ret_group);
	/* This rank's rank in `g` and g's size (either pointer may be NULL). */
	int (*group_info)(accel_host *h, accel_group *g, int32_t *ret_rank, int32_t *ret_size);
	/* The world rank of `g`'s rank `rank`. */
	int (*group_world_rank)(accel_host *h, accel_group *g, int32_t rank,
	                        int32_t *ret_world_rank);
	/* Not collective.  Frees the group's communicators; requests of it not
	 * yet waited for must be waited for first.  NULL and the world are
	 * no-ops.  Returns NULL. */
	accel_group *(*group_free)(accel_host *h, accel_group *g);
	/* The world collectives' semantics on `g`: counts, blocks and `root`
	 * are in g's ranks and size; requests go to the same wait()/test().
	 * Every member of g calls them in the same order; a timeout or dead
	 * member names the collective, g's sequence number and the missing
	 * ranks by WORLD rank. */
	int (*group_allreduce)(accel_host *h, accel_group *g, const accel_view *send,
	                       const accel_view *recv, uint32_t op, accel_req **ret_req);
	int (*group_reduce_scatter)(accel_host *h, accel_group *g, const accel_view *send,
	                            const accel_view *recv, uint32_t op, accel_req **ret_req);
	int (*group_allgather)(accel_host *h, accel_group *g, const accel_view *send,
	                       const accel_view *recv, accel_req **ret_req);
	int (*group_broadcast)(accel_host *h, accel_group *g, const accel_view *buf, int32_t root,
	                       accel_req **ret_req);
	int (*group_barrier)(accel_host *h, accel_group *g, accel_req **ret_req);
} accel_host_v1;

/* ---- the plugin vtable ---------------------------------------------------------
 * "(required)": the loader rejects a plugin whose slot is NULL.
 * "(strategy)": required when role == ACCEL_ROLE_STRATEGY, unused otherwise.
 * "(optional)": NULL means the core's default, stated per slot. */
typedef struct accel_plugin_v1 {
	uint32_t struct_size;     /* sizeof(accel_plugin_v1) the plugin was built with */
	uint32_t abi_minor;       /* ACCEL_ABI_MINOR the plugin was built with        */
	const accel_plugin_desc_v1 *desc; /* (required) static                      */

	/* (required) Create the plugin's state for one context.  Config values
	 * are readable through host->cfg_*.  `host` and `h` stay valid until
	 * fini(); keep them in the state. */
	int (*init)(const accel_host_v1 *host, accel_host *h, void **ret_state);
	/* (required) Free everything; called once for every successful init(),
	 * also after a failure in a later slot. */
	void (*fini)(void *state);
	/* (optional) Refuse selections that cannot work, naming both sides
	 * ("compress: top-k needs all-reduce; zero stage 2 reduces with
	 * reduce-scatter").  Default: accept. */
	int (*validate)(void *state, const accel_selection_v1 *sel);

	/* (strategy) Lay out parameter, gradient, master-weight and optimizer
	 * storage for host->model(); get initial values through param_init();
	 * make all ranks start from rank 0's values (broadcast, or by
	 * construction); param_bind() every parameter that is materialized. */
	int (*wrap)(void *state);
	/* (strategy) Called by accel_step() on sync steps, before clipping:
	 * make sure every gradient reduction of this step is issued and finished.
	 * A unit whose gradients never became ready is an error naming it. */
	int (*reduce)(void *state);
	/* (strategy) Global gradient statistics after reduce(): sum of squares of
	 * all (scaled) gradients of the whole model and the number of non-finite
	 * elements, both over all ranks, each element counted once. */
	int (*grad_stats)(void *state, double *ret_sumsq, uint64_t *ret_nonfinite);
	/* (strategy) Apply the optimizer (host->optim_step with info->grad_scale)
	 * to the parameters this rank updates, publish the new values wherever
	 * they are needed (all-gather, re-bind), then zero the gradients.  When
	 * info->skip is set: only zero the gradients. */
	int (*step)(void *state, const accel_step_info_v1 *info);

	/* (optional) Write/read this plugin's state (master weights, optimizer
	 * state, scaler state, ...).  Default: the plugin has no state. */
	int (*save_state)(void *state, accel_ckpt_writer *w);
	int (*load_state)(void *state, accel_ckpt_reader *r, uint32_t state_version);

	/* (optional) Unit hooks, called by accel_unit_pre_forward() etc. around
	 * the user's forward and backward of unit `unit`.  ZeRO-3/FSDP gather
	 * parameters in pre_* and release them in post_*; post_backward is where
	 * a strategy marks the unit's gradients ready and may launch their
	 * reduction (only when host->sync_step()).  Default: no-op. */
	int (*pre_forward)(void *state, uint32_t unit);
	int (*post_forward)(void *state, uint32_t unit);
	int (*pre_backward)(void *state, uint32_t unit);
	int (*post_backward)(void *state, uint32_t unit);

	/* (REDUCE_HOOK role) Replace the all-reduce of one gradient bucket: on
	 * completion the bucket holds the mean over ranks (of whatever the hook
	 * approximates).  May block and set *ret_req = NULL, or return the
	 * request of its last collective. */
	int (*reduce_bucket)(void *state, const accel_view *bucket, uint32_t bucket_id,
	                     accel_req **ret_req);

	/* (PRECISION role, optional) The factor the user multiplies the loss
	 * by.  Default 1. */
	int (*loss_scale)(void *state, double *ret_scale);
	/* (hooks, optional) Before the strategy's step, after gradient stats are
	 * in `info`: may set info->skip (overflow) or adjust grad_scale. */
	int (*pre_step)(void *state, accel_step_info_v1 *info);
	/* (hooks, optional) After the step (also a skipped one): update the
	 * scale, the amax history, ... */
	int (*post_step)(void *state, const accel_step_info_v1 *info);

	/* (optional) Named extension interfaces (e.g. "fp8.gemm" version 1) that
	 * the user API reaches through accel_plugin_extension().  Returns a
	 * static table or NULL when unknown. */
	const void *(*extension)(void *state, const char *name, uint32_t version);
} accel_plugin_v1;

/* ---- checking the host table ---------------------------------------------
 * ACCEL_HOST_HAS(host, member): whether the running host's table covers
 * `member` (appended in some ABI minor) and fills it (false for NULL).  Use it before
 * calling any member newer than minor 0.
 *
 * ACCEL_HOST_REQUIRE(host, who, member): the check an entry point starts
 * with.  True when `host` is of this major and has `member` (the newest
 * member the module calls); otherwise it reports, through host->error when
 * the major matches, which module needs what and what this host is, and is
 * false: the entry then returns NULL.  Header-only; it adds nothing to the
 * binary interface. */
static inline int accel_host_covers_(const accel_host_v1 *host, size_t bytes)
{
	return host && host->struct_size >= bytes;
}

#define ACCEL_HOST_HAS(host, member)                                                     \
	(accel_host_covers_((host), offsetof(accel_host_v1, member) +                        \
	                                sizeof(((const accel_host_v1 *)0)->member)) &&       \
	 (host)->member != NULL)

static inline int accel_host_require_(const accel_host_v1 *host, const char *who, int has,
                                      const char *member)
{
	if (!host)
		return 0;
	if (host->abi_major == ACCEL_ABI_MAJOR && has)
		return 1;
	/* error() exists since 1.0, but only this major's layout is known. */
	if (host->abi_major == ACCEL_ABI_MAJOR && host->error)
		host->error(NULL, ACCEL_ERR_ABI,
		            "%s needs accel ABI %d.x with host member %s; this host is ABI %u.%u "
		            "(%u-byte host table): use an accel at least as new as the headers %s "
		            "was built against",
		            who, ACCEL_ABI_MAJOR, member, host->abi_major, host->abi_minor,
		            host->struct_size, who);
	return 0;
}

#define ACCEL_HOST_REQUIRE(host, who, member) \
	accel_host_require_((host), (who), ACCEL_HOST_HAS(host, member), #member)

/* The entry point a plugin exports (declared here so the compiler checks
 * the plugin's definition). */
ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host);

#define ACCEL_PLUGIN_ENTRY_V1 "accel_plugin_entry_v1"

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_PLUGIN_H */
