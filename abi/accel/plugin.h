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
#include <string.h>

#include "accel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- roles ----------------------------------------------------------------
 * Exactly one STRATEGY is active (ddp if the config names none).  Any number
 * of hook plugins may be active, at most one per exclusive role:
 * LOSS_SCALER (the loss scale, e.g. fp16 dynamic scaling), FP8_RECIPE (fp8
 * scaling factors and GEMMs) and REDUCE_HOOK (replaces the gradient
 * reduction of a bucket, e.g. compression).  A scaler and an fp8 recipe
 * can be selected together.  OTHER is not exclusive. */
#define ACCEL_ROLE_STRATEGY    1
#define ACCEL_ROLE_PRECISION   2  /* loss scaling; before minor 3 also fp8 */
#define ACCEL_ROLE_LOSS_SCALER ACCEL_ROLE_PRECISION
#define ACCEL_ROLE_REDUCE_HOOK 3
#define ACCEL_ROLE_OTHER       4
#define ACCEL_ROLE_FP8_RECIPE  5  /* ABI minor 3: fp8 recipe (delayed scaling, ...) */

/* ---- capabilities (desc.caps, bit set) ----------------------------------- */
#define ACCEL_CAP_CPU            (1u << 0) /* works with parameters in host memory  */
#define ACCEL_CAP_CUDA           (1u << 1) /* works with parameters on CUDA devices */
#define ACCEL_CAP_SHARD_OPTIM    (1u << 2) /* shards optimizer state (ZeRO-1)       */
#define ACCEL_CAP_SHARD_GRADS    (1u << 3) /* shards gradients (ZeRO-2)             */
#define ACCEL_CAP_SHARD_PARAMS   (1u << 4) /* shards parameters (ZeRO-3, FSDP): data
                                              pointers valid only inside unit hooks */
#define ACCEL_CAP_OFFLOAD        (1u << 5) /* can offload to host memory or NVMe    */
#define ACCEL_CAP_CHECKPOINT     (1u << 6) /* implements save_state/load_state      */
/* ABI minor 3: how a strategy reduces gradients, so hooks can validate a
 * selection from accel_selection_v1.caps alone. */
#define ACCEL_CAP_REDUCE_SCATTER (1u << 7) /* reduces gradient buckets with
                                              reduce_scatter_bucket() (ZeRO-2/3,
                                              FSDP); without it: all-reduce with
                                              reduce_bucket*()                     */
#define ACCEL_CAP_MICRO_REDUCE   (1u << 8) /* reduces gradients on every micro-step,
                                              not only on sync steps (DeepSpeed
                                              ZeRO-2/3); see sync_step()          */
/* ABI minor 7: */
#define ACCEL_CAP_SHARED_PARAMS  (1u << 9) /* handles a parameter used by more than
                                              one unit (accel_unit_info_v1.uses, a
                                              tied weight); accel_prepare refuses a
                                              model with such uses under a strategy
                                              without it                           */

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

/* A sub-communicator (ABI minor 3, host->group_split()): a set of ranks;
 * NULL always means the whole world.  Owned by the core; freed with
 * host->group_free() or with the context. */
typedef struct accel_group accel_group;

/* Checkpoint streams, owned by the core, valid during save_state/load_state. */
typedef struct accel_ckpt_writer accel_ckpt_writer;
typedef struct accel_ckpt_reader accel_ckpt_reader;

/* ABI minor 4: a checkpoint tensor (host->ckpt_write_tensor, ckpt_tensor_info). */
#define ACCEL_CKPT_MAX_DIMS 8
/* accel_ckpt_slice_v1.flags: `data` stays valid and unchanged until
 * accel_save_state returns (the plugin's own state, which no step can
 * change during the save): the core writes it from there instead of
 * copying it first. */
#define ACCEL_CKPT_BORROW (1u << 0)
typedef struct accel_ckpt_slice_v1 {
	uint32_t struct_size;     /* sizeof(accel_ckpt_slice_v1)                  */
	uint32_t dtype;           /* ACCEL_DTYPE_* of the tensor                  */
	uint32_t ndim;            /* 0..ACCEL_CKPT_MAX_DIMS                       */
	uint32_t flags;           /* ACCEL_CKPT_BORROW or 0                       */
	const char *name;         /* canonical name ("master/fc0.weight")         */
	const uint64_t *shape;    /* ndim entries: the GLOBAL shape               */
	uint64_t offset;          /* first element of this slice, row-major       */
	uint64_t count;           /* elements in this slice                       */
	const void *data;         /* host memory, count x dtype size bytes        */
} accel_ckpt_slice_v1;
typedef struct accel_ckpt_tensor_info_v1 {
	uint32_t struct_size;     /* set by the caller                            */
	uint32_t dtype;           /* ACCEL_DTYPE_* as saved                       */
	uint32_t ndim;
	uint32_t reserved;
	uint64_t shape[ACCEL_CKPT_MAX_DIMS]; /* global shape; ndim entries used   */
	uint64_t numel;           /* product of shape (1 when ndim == 0)          */
} accel_ckpt_tensor_info_v1;

/* The canonical <state> of "optim/<state>/<param>" for optimizer state
 * array k of a parameter (in the order host->optim_step takes them) under
 * the core's optimizer `type` (config key optimizer.type) with n_state
 * arrays per parameter: "exp_avg", "exp_avg_sq" (adamw, 2),
 * "momentum_buffer" (sgd, 1); NULL for anything else, which a plugin then
 * names itself (docs/checkpoints.md).  Compiled into the module. */
static inline const char *accel_ckpt_optim_state_name(const char *type, uint32_t n_state,
                                                      uint32_t k)
{
	if (type && !strcmp(type, "adamw") && n_state == 2 && k < 2)
		return k == 0 ? "exp_avg" : "exp_avg_sq";
	if (type && !strcmp(type, "sgd") && n_state == 1 && k == 0)
		return "momentum_buffer";
	return NULL;
}

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
	/* ABI minor 3 (read only when ACCEL_STRUCT_HAS(p, accel_param_info_v1,
	 * member); under an older core use `dtype` for all three): */
	uint32_t grad_dtype;      /* dtype of the gradient the user accumulates into
	                             (accel_param_grad()); default: dtype.  f32 with
	                             bf16 weights is f32 gradient accumulation   */
	uint32_t reduce_dtype;    /* dtype gradients are reduced in across ranks;
	                             default: grad_dtype (FSDP MixedPrecision's
	                             reduce_dtype)                              */
	uint32_t compute_dtype;   /* dtype the user's kernels compute in; default:
	                             dtype; f8e4m3/f8e5m2 when an fp8 recipe
	                             plugin runs the unit's GEMMs               */
	uint32_t reserved2;
} accel_param_info_v1;

/* Size of an accel_param_info_v1 before minor 3 (its stride in
 * accel_model_v1.params for a core or plugin older than minor 3). */
#define ACCEL_PARAM_INFO_V1_SIZE_MINOR2 offsetof(accel_param_info_v1, grad_dtype)

/* A unit is a contiguous run of parameters that forward/backward together:
 * the granularity of ZeRO-3/FSDP gathers and of DDP readiness. */
typedef struct accel_unit_info_v1 {
	uint32_t struct_size;
	uint32_t first_param;     /* index of its first parameter  */
	uint32_t n_params;        /* its parameters are first_param .. +n_params-1 */
	uint32_t reserved;
	const char *name;
	uint64_t numel;           /* total elements of its parameters */
	/* ABI minor 6 (read only when ACCEL_STRUCT_HAS(u, accel_unit_info_v1,
	 * kind); index units only through ACCEL_MODEL_UNIT()): */
	const char *kind;         /* what the program says the unit is ("Block",
	                             "Embedding"; accel_param_desc.unit_kind or
	                             accel_unit_set_kind()), NULL when it said
	                             nothing.  Borrowed, valid while the model is.
	                             FSDP's transformer_cls_names_to_wrap matches it */
	/* ABI minor 7 (read only when ACCEL_STRUCT_HAS(u, accel_unit_info_v1,
	 * uses)): */
	uint32_t n_uses;          /* parameters of earlier units this unit also uses */
	uint32_t reserved2;       /* 0 */
	const uint32_t *uses;     /* n_uses parameter indices (accel_unit_use_param,
	                             a tied weight), each owned by an earlier unit;
	                             the strategy makes their data valid in this
	                             unit's hook windows too, and their gradient
	                             is complete (both uses' contributions) only
	                             after the owning unit's post_backward.  Only a
	                             strategy with ACCEL_CAP_SHARED_PARAMS sees a
	                             model with n_uses != 0 */
} accel_unit_info_v1;

/* Size of an accel_unit_info_v1 before minor 6 (its stride in
 * accel_model_v1.units for a core or plugin older than minor 6). */
#define ACCEL_UNIT_INFO_V1_SIZE_MINOR5 offsetof(accel_unit_info_v1, kind)

typedef struct accel_model_v1 {
	uint32_t struct_size;
	uint32_t n_params;
	uint32_t n_units;
	uint32_t n_groups;        /* optimizer parameter groups */
	const accel_param_info_v1 *params;  /* n_params, in registration order */
	const accel_unit_info_v1 *units;    /* n_units, in forward order       */
	uint64_t total_numel;
	/* ABI minor 3: */
	uint32_t param_info_size; /* bytes from one params[] entry to the next; a
	                             core serves a plugin built before minor 3 an
	                             array at that minor's stride, so index
	                             params only through ACCEL_MODEL_PARAM()     */
	uint32_t reserved;        /* 0 */
	/* ABI minor 6: */
	uint32_t unit_info_size;  /* bytes from one units[] entry to the next; a
	                             core serves a plugin built before minor 6 an
	                             array at that minor's stride, so index units
	                             only through ACCEL_MODEL_UNIT()             */
	uint32_t reserved2;       /* 0 */
} accel_model_v1;

/* Parameter i of a model, at the stride the running core laid the array
 * out with (ACCEL_PARAM_INFO_V1_SIZE_MINOR2 under a core older than minor
 * 3, whose model has no param_info_size).  `params[i]` is right only for a
 * plugin built before minor 3. */
static inline const accel_param_info_v1 *accel_model_param(const accel_model_v1 *m, uint32_t i)
{
	size_t stride = ACCEL_STRUCT_HAS(m, accel_model_v1, param_info_size) && m->param_info_size
	                        ? m->param_info_size
	                        : ACCEL_PARAM_INFO_V1_SIZE_MINOR2;
	return (const accel_param_info_v1 *)(const void *)((const char *)m->params + stride * i);
}
#define ACCEL_MODEL_PARAM(model, i) accel_model_param((model), (i))

/* Unit i of a model, at the stride the running core laid the array out
 * with (ACCEL_UNIT_INFO_V1_SIZE_MINOR5 under a core older than minor 6,
 * whose model has no unit_info_size or leaves it 0).  `units[i]` is right
 * only for a plugin built before minor 6; read `kind` only when
 * ACCEL_STRUCT_HAS(unit, accel_unit_info_v1, kind). */
static inline const accel_unit_info_v1 *accel_model_unit(const accel_model_v1 *m, uint32_t i)
{
	size_t stride = ACCEL_STRUCT_HAS(m, accel_model_v1, unit_info_size) && m->unit_info_size
	                        ? m->unit_info_size
	                        : ACCEL_UNIT_INFO_V1_SIZE_MINOR5;
	return (const accel_unit_info_v1 *)(const void *)((const char *)m->units + stride * i);
}
#define ACCEL_MODEL_UNIT(model, i) accel_model_unit((model), (i))

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
	/* ABI minor 5 (read only when struct_size covers it): */
	const double *grad_scale_dev; /* non-NULL: device memory (master's device)
	                             holding the factor, used in place of
	                             grad_scale and read when the kernel runs:
	                             pass info->grad_scale_dev through */
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
	/* ABI minor 5 (read only when info->struct_size covers it): */
	const double *grad_scale_dev; /* non-NULL when the statistics stayed on the
	                             device (the strategy's grad_stats_device ran):
	                             device memory holding the factor, to pass as
	                             accel_optim_args_v1.grad_scale_dev.  grad_norm
	                             is then NaN, nonfinite 0 and grad_scale the
	                             factor without clipping (1 / (loss_scale * G)) */
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
	/* ABI minor 3 (check ACCEL_STRUCT_HAS(sel, accel_selection_v1, caps)): */
	const uint32_t *caps;       /* n_plugins ACCEL_CAP_* sets, parallel to names:
	                               caps[0] says how the strategy reduces     */
} accel_selection_v1;

/* What the core knows about CUDA devices (host->device_info, minor 3),
 * from the same driver probe that decides ACCEL_REQ_CUDA at load time. */
typedef struct accel_device_info_v1 {
	uint32_t struct_size;       /* in: sizeof the caller's struct; the core
	                               writes only the members it covers        */
	uint32_t cuda_present;      /* 1: this build has CUDA and the driver
	                               reports at least one device              */
	int32_t device_count;       /* CUDA devices visible to this process     */
	int32_t compute_capability; /* of the device asked for, major*10+minor
	                               (89 = sm_89); 0 when there is none       */
	uint32_t reserved[4];       /* 0 */
} accel_device_info_v1;

/* One run of one parameter's gradient inside a bucket.  FIXED layout: this
 * struct is never appended to (it is an array element without a
 * struct_size); a new layout would be a new type. */
typedef struct accel_bucket_entry_v1 {
	uint32_t param;           /* parameter index (accel_model_v1)            */
	uint32_t reserved;        /* 0 */
	uint64_t param_offset;    /* first element of the parameter in the run   */
	uint64_t bucket_offset;   /* where the run starts in the bucket (elements) */
	uint64_t numel;           /* length of the run                           */
} accel_bucket_entry_v1;

/* A gradient bucket handed to a reduction (host->reduce_bucket_v2,
 * host->reduce_scatter_bucket) and by the core to a reduce hook. */
typedef struct accel_bucket_v1 {
	uint32_t struct_size;     /* sizeof(accel_bucket_v1)                       */
	uint32_t bucket_id;       /* stable across steps (hooks keep error
	                             feedback or low-rank state by it)            */
	accel_view view;          /* the bucket, reduced in place; its dtype is
	                             the reduce dtype                             */
	uint32_t n_entries;       /* runs in `entries`; 0 when the strategy gave no
	                             description (a strategy older than minor 3) */
	uint32_t flags;           /* to a hook: the ACCEL_REDUCE_* flags the
	                             strategy passed; ignored from a strategy     */
	const accel_bucket_entry_v1 *entries; /* sorted by bucket_offset, not
	                             overlapping; elements outside every run are
	                             padding and hold zeros.  Borrowed for the
	                             call and until the reduction completes      */
	accel_group *group;       /* ranks to reduce over; NULL: the world        */
} accel_bucket_v1;

/* Flags of host->reduce_bucket_v2 / reduce_scatter_bucket. */
/* The strategy divided the bucket by the number of ranks already; the
 * reduction sums (reduce_bucket()'s contract).  Without it the bucket
 * holds the strategy's own gradients and the result is their mean
 * (reduce_bucket_mean()'s contract; the backend divides in its
 * reduction pass).  Either way the result is the mean gradient. */
#define ACCEL_REDUCE_PREDIVIDED (1u << 0)

/* ABI minor 6: what estimate_memory() is asked about and answers. */
#define ACCEL_EST_CATEGORIES 8  /* slots per location; ACCEL_MEM_* index them */
#define ACCEL_EST_DEVICE 0      /* where the parameters live (the GPU, or host
                                   memory for a CPU job)                      */
#define ACCEL_EST_HOST   1      /* host memory beyond that: offload targets   */
#define ACCEL_EST_NVME   2      /* files (NVMe offload)                       */
#define ACCEL_EST_PLACES 3
typedef struct accel_estimate_in_v1 {
	uint32_t struct_size;      /* sizeof(accel_estimate_in_v1)                 */
	int32_t world_size;        /* ranks the job would run on                   */
	int32_t local_world_size;  /* of those, ranks per node                     */
	int32_t device;            /* ACCEL_DEVICE_* the parameters would live on  */
	uint32_t n_params;         /* entries of numel/dtype; 0: one parameter of
	                              total_numel elements                         */
	uint32_t n_units;          /* entries of unit_numel; 0: one unit           */
	const uint64_t *numel;     /* n_params element counts (registration order) */
	const uint32_t *dtype;     /* n_params working dtypes; NULL: all
	                              default_dtype                                */
	const uint64_t *unit_numel; /* n_units element counts (forward order)      */
	uint64_t total_numel;      /* sum of numel (all elements when n_params 0)  */
	uint32_t default_dtype;    /* ACCEL_DTYPE_* of the working weights         */
	uint32_t n_state;          /* optimizer state arrays per element (2 AdamW) */
} accel_estimate_in_v1;
typedef struct accel_estimate_out_v1 {
	uint32_t struct_size;      /* set by the caller                            */
	uint32_t reserved;
	/* bytes[place][category]: per-rank bytes of each ACCEL_MEM_* category at
	 * each ACCEL_EST_* place, as mem_alloc would account them. */
	uint64_t bytes[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES];
	char variant[64];          /* "stage 3, offload cpu": NUL-terminated label */
} accel_estimate_out_v1;

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
	/* Nonzero when the current micro-step ends an accumulation cycle
	 * (gradient_accumulation_steps micro-steps), i.e. the step's gradients
	 * must be fully reduced by the end of reduce().  The accumulation
	 * contract on the other micro-steps:
	 *  - a strategy may communicate parameters there (ZeRO-3 and FSDP
	 *    all-gather in the unit hooks on every micro-step);
	 *  - it may reduce gradients there only if its descriptor has
	 *    ACCEL_CAP_MICRO_REDUCE (ZeRO-2/3 reduce-scatter every micro-step
	 *    and accumulate into their shard, as DeepSpeed does).  The core
	 *    enforces this: reduce_bucket(), reduce_bucket_mean(),
	 *    reduce_bucket_v2() and reduce_scatter_bucket() fail with
	 *    ACCEL_ERR_STATE on a non-sync micro-step under a strategy without
	 *    the capability.  (Plain allreduce()/reduce_scatter() are not
	 *    checked: the core cannot tell gradients from other data.)
	 * Forward-only passes (grad_enabled() == 0) are not micro-steps and do
	 * not change the value. */
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

	/* -- ABI minor 3 ---------------------------------------------------------------- */

	/* Zero while the program runs a forward-only pass
	 * (accel_set_grad_enabled(ctx, 0), e.g. evaluation): a sharded strategy
	 * then gathers parameters in pre_forward and frees them in post_forward
	 * without keeping anything for backward (no prefetch for backward, no
	 * saved copies); the core refuses the backward hooks and accel_step()
	 * until gradients are enabled again, so post_backward never runs in
	 * such a pass and the micro-step count does not move.  Nonzero
	 * otherwise (the default). */
	int32_t (*grad_enabled)(accel_host *h);
	/* The current working view of parameter `param` (working dtype, its
	 * device, the pointer param_bind() gave) and of its gradient (grad_dtype).
	 * A view that is not materialized now (sharded strategies outside the
	 * unit's hook window, a frozen parameter's gradient) has data NULL and
	 * numel 0.  Either ret may be NULL.  For hook plugins (fp8 casts, a
	 * scaler's checks) that must not know the strategy's layout.  Valid
	 * until the strategy binds the parameter again. */
	int (*param_view)(accel_host *h, uint32_t param, accel_view *ret_data,
	                  accel_view *ret_grad);
	/* CUDA devices as this process sees them: `device_index` is the CUDA
	 * ordinal whose compute capability to report, or -1 for the most
	 * capable device.  Works from available() and init() on; needs no
	 * device module (the driver is probed with dlopen).  `ret` needs
	 * struct_size set by the caller. */
	int (*device_info)(accel_host *h, int32_t device_index, accel_device_info_v1 *ret);
	/* The all-reduce hook point with a bucket description: replaces
	 * reduce_bucket() and reduce_bucket_mean().  Without a REDUCE_HOOK plugin
	 * an in-place all-reduce of b->view over b->group (AVG, or SUM with
	 * ACCEL_REDUCE_PREDIVIDED); with one, the hook's reduce_bucket_v2() (or,
	 * for a hook older than minor 3, its reduce_bucket() on a pre-divided
	 * bucket of the world).  On return (ret_req NULL) or after wait(),
	 * b->view holds the mean gradient.  `b` and its entries must stay
	 * valid until then.  Subject to the accumulation contract (sync_step). */
	int (*reduce_bucket_v2)(accel_host *h, const accel_bucket_v1 *b, uint32_t flags,
	                        accel_req **ret_req);
	/* The reduce-scatter hook point: rank r of b->group (NULL: the world)
	 * receives into `shard` the mean (or, with ACCEL_REDUCE_PREDIVIDED, the
	 * sum) of block r of b->view over the group's ranks; b->view.numel ==
	 * group size * shard->numel, shard has b->view's dtype and device.
	 * Without a REDUCE_HOOK plugin a reduce_scatter() (AVG or SUM); with
	 * one, its reduce_scatter_bucket() (ACCEL_ERR_UNSUPPORTED, naming the
	 * hook, when it has none).  Subject to the accumulation contract. */
	int (*reduce_scatter_bucket)(accel_host *h, const accel_bucket_v1 *b,
	                             const accel_view *shard, uint32_t flags, accel_req **ret_req);
	/* Run fn(arg) on the training thread once `req` completes: inside the
	 * wait() or the test() that finds it complete, before that call
	 * returns, in registration order.  A hook uses it to cast back or
	 * decompress a bucket without blocking; fn may call host members,
	 * including collectives and wait().  A failure of fn is the status of
	 * that wait()/test(); fn runs also when the collective failed (so it can
	 * release what it holds), and that failure then wins.  `req` is a
	 * request this host returned and that
	 * was not released yet.  Callbacks of requests never waited for are
	 * dropped (not run) when the context is freed. */
	int (*req_on_done)(accel_host *h, accel_req *req, int (*fn)(void *arg), void *arg);

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

	/* -- ABI minor 4: checkpoint tensors (only inside save_state/load_state) -------
	 * Tensors by canonical name, global shape and element range, so a state
	 * saved by N processes loads at any world size (docs/checkpoints.md).
	 * Names are shared by every plugin (not prefixed with the plugin's):
	 *     master/<param>           f32 master weights
	 *     optim/<state>/<param>    optimizer state: exp_avg, exp_avg_sq,
	 *                              momentum_buffer, step
	 * ("param/<param>", the working weights, are the core's.)  Each element
	 * of a tensor is written by exactly one rank, in one slice.  Check with
	 * ACCEL_HOST_HAS(host, ckpt_read_tensor) first.  The blobs above stay
	 * for state that is not a tensor. */

	/* Write elements [s->offset, s->offset + s->count) of the flattened
	 * (row-major) tensor s->name of global shape s->shape (s->ndim dims)
	 * and dtype s->dtype; s->data is host memory, count x dtype size bytes,
	 * copied before the call returns (with ACCEL_CKPT_BORROW in s->flags:
	 * read when the file is written, before accel_save_state returns).  The same name must come with the
	 * same dtype and shape on every rank; ranges must not overlap and, over
	 * all ranks, must cover the tensor (the save fails naming the gap). */
	int (*ckpt_write_tensor)(accel_host *h, accel_ckpt_writer *w,
	                         const accel_ckpt_slice_v1 *s);
	/* dtype and global shape of saved tensor `name` (ret->struct_size set
	 * by the caller); ACCEL_ERR_NOT_FOUND, without recording an error,
	 * when the checkpoint has no such tensor. */
	int (*ckpt_tensor_info)(accel_host *h, accel_ckpt_reader *r, const char *name,
	                        accel_ckpt_tensor_info_v1 *ret);
	/* Read elements [offset, offset + count) of saved tensor `name` into
	 * host memory `buf`, whatever ranks wrote them; `dtype` must be the
	 * saved one.  Every slice read is checked against its checksum. */
	int (*ckpt_read_tensor)(accel_host *h, accel_ckpt_reader *r, const char *name,
	                        uint32_t dtype, uint64_t offset, uint64_t count, void *buf);

	/* -- ABI minor 4: device streams (docs/streams.md) -------------------------------
	 * A stream is a cudaStream_t passed as void *; NULL is the legacy
	 * default stream.  Check ACCEL_HOST_HAS(host, wait_stream) first. */

	/* The context's compute stream (accel_set_stream; NULL by default).  The
	 * host enqueues this context's device ops (op_*), optimizer steps and
	 * staging copies on it, and a device comm backend orders every
	 * collective on device buffers after the work queued on it before the
	 * call, without blocking the host.  A plugin that launches kernels of
	 * its own launches them here.  Borrowed: valid while the call that runs
	 * the plugin's slot lasts (the program may set another between calls).
	 * Any thread. */
	void *(*stream)(accel_host *h);
	/* wait() without blocking the host where the device can wait: the
	 * context's stream waits on the device until `req` has completed (a
	 * collective of the device backend records an event when done), then
	 * req is released and its req_on_done callbacks run, so device work
	 * they enqueue comes after the wait.  A request the device cannot wait
	 * for (host buffers, device buffers staged through a host backend, a
	 * backend older than minor 4) is waited for on the host, which orders
	 * it before everything enqueued later.  Errors the backend already
	 * knows are returned; a collective that fails after the call is
	 * reported by a later wait/test/collective (its deadline still holds:
	 * the backend aborts it, so the stream does not hang). */
	int (*wait_stream)(accel_host *h, accel_req *req);
	/* Enqueue a copy of src into dst on the context's stream and return:
	 * same dtype and numel, any devices (host to device, device to host,
	 * device to device, across devices as a peer copy).  Neither buffer
	 * may be touched until the stream has run it.  Host memory should come
	 * from mem_alloc(..., ACCEL_MEMF_PINNED) for the copy to overlap.  Two
	 * host views: a plain copy, done on return. */
	int (*op_copy_async)(accel_host *h, const accel_view *dst, const accel_view *src);

	/* -- ABI minor 5: gradient statistics on the device ------------------------------
	 * Check ACCEL_HOST_HAS(host, op_sumsq_acc) first. */

	/* Enqueue stats[0] += (the f64 sum of squares op_sumsq gives for x) on
	 * the context's stream and return without waiting: for the stats
	 * buffer grad_stats_device() receives (x on its device). */
	int (*op_sumsq_acc)(accel_host *h, const accel_view *x, double *stats);

	/* -- ABI minor 6: the optimizer on many threads (offload) ------------------------
	 * Check ACCEL_HOST_HAS(host, optim_step_n) first. */

	/* optim_step() of n ranges (args[0 .. n-1], each as optim_step takes
	 * it) on a pool of n_threads threads the core owns, then return: the
	 * result is bit-identical to calling optim_step on each in turn (the
	 * update of an element depends on that element alone), whatever the
	 * split.  The core may cut a long range into pieces for the threads.
	 * Host (CPU) views only; ranges must not overlap.  n_threads 0: the
	 * threads this rank is given (OMP_NUM_THREADS, which `accel launch`
	 * sets to the rank's share of the cores, else the CPUs the process
	 * may run on divided by the ranks on this node); 1: this thread.
	 * Called on the training thread like every host member; the pool's
	 * threads run only the core's optimizer arithmetic. */
	int (*optim_step_n)(accel_host *h, const accel_optim_args_v1 *args, uint32_t n,
	                    uint32_t n_threads);

	/* -- ABI minor 6: host waits on stream work (docs/streams.md) --------------------
	 * What op_copy_async and a plugin's own kernels enqueued on the
	 * context's stream can be waited for from the host.  Without a device
	 * module (host views only) every copy is done on return, and these
	 * succeed at once.  Check ACCEL_HOST_HAS(host, event_record) first. */

	/* Block until everything enqueued on the context's stream so far ran. */
	int (*stream_sync)(accel_host *h);
	/* Record an event on the context's stream after the work enqueued so
	 * far; *ret_event is owned by the plugin: free it with event_free().
	 * Without a device module: a token that is already complete. */
	int (*event_record)(accel_host *h, void **ret_event);
	/* Block until `event`'s work ran (an error of that work is returned). */
	int (*event_sync)(accel_host *h, void *event);
	/* Nonblocking: *ret_done = 1 when `event`'s work ran, else 0. */
	int (*event_query)(accel_host *h, void *event, int32_t *ret_done);
	/* Release an event (NULL is a no-op). */
	void (*event_free)(accel_host *h, void *event);
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
	 * state, scaler state, ...).  Default: the plugin has no state.
	 * state_version: the saving plugin's desc->state_version; 0 for the
	 * strategy when the checkpoint was saved under another strategy (no
	 * state of its own: read the canonical tensors, or refuse). */
	int (*save_state)(void *state, accel_ckpt_writer *w);
	int (*load_state)(void *state, accel_ckpt_reader *r, uint32_t state_version);

	/* (optional) Unit hooks, called by accel_unit_pre_forward() etc. around
	 * the user's forward and backward of unit `unit`.  ZeRO-3/FSDP gather
	 * parameters in pre_* and release them in post_*; post_backward is where
	 * a strategy marks the unit's gradients ready and may launch their
	 * reduction (when host->sync_step(), or on every micro-step with
	 * ACCEL_CAP_MICRO_REDUCE).  In a forward-only pass
	 * (host->grad_enabled() == 0) only the forward hooks run.  Default:
	 * no-op. */
	int (*pre_forward)(void *state, uint32_t unit);
	int (*post_forward)(void *state, uint32_t unit);
	int (*pre_backward)(void *state, uint32_t unit);
	int (*post_backward)(void *state, uint32_t unit);

	/* (REDUCE_HOOK role; since minor 3 one of reduce_bucket,
	 * reduce_bucket_v2 and reduce_scatter_bucket is required) Replace the
	 * all-reduce of one gradient bucket of the world, pre-divided by the
	 * world size: on completion the bucket holds the mean over ranks (of
	 * whatever the hook approximates).  May block and set *ret_req = NULL,
	 * or return the request of its last collective.  The core prefers
	 * reduce_bucket_v2 when a hook has both. */
	int (*reduce_bucket)(void *state, const accel_view *bucket, uint32_t bucket_id,
	                     accel_req **ret_req);

	/* (LOSS_SCALER role, optional) The factor the user multiplies the loss
	 * by; read from the LOSS_SCALER plugin only.  Default 1. */
	int (*loss_scale)(void *state, double *ret_scale);
	/* (hooks, optional) Before the strategy's step, after gradient stats are
	 * in `info`: may set info->skip (overflow) or adjust grad_scale. */
	int (*pre_step)(void *state, accel_step_info_v1 *info);
	/* (hooks, optional) After the step (also a skipped one): update the
	 * scale, the amax history, ... */
	int (*post_step)(void *state, const accel_step_info_v1 *info);

	/* (optional) Named extension interfaces (e.g. "fp8.gemm" version 1) that
	 * the user API reaches through accel_plugin_extension().  Returns a
	 * table valid until fini() (it may live in the plugin's state), or NULL
	 * when unknown. */
	const void *(*extension)(void *state, const char *name, uint32_t version);

	/* -- ABI minor 3 ------------------------------------------------------------ */

	/* (optional) Whether this plugin can run in this process, decided at run
	 * time: called by the core for a selected plugin before its init(),
	 * with the host members that need no model (log, error, world, cfg_*,
	 * device_info).  Returns ACCEL_OK (and may log, at info level, which
	 * path it will take: "cuBLASLt" or "emulation"), or
	 * ACCEL_ERR_UNSUPPORTED after host->error() saying why; context
	 * creation then fails with that message.  A plugin with this slot
	 * leaves desc.requires / min_cuda_cc at 0, so the loader never refuses
	 * it for this machine.  Default: available. */
	int (*available)(const accel_host_v1 *host, accel_host *h);
	/* (optional) Called by accel_step() at the end of every micro-step,
	 * first thing in it: on a sync step (sync != 0) before the strategy's
	 * reduce(), on the others before accel_step() returns.  The strategy
	 * first, then the hooks in selection order.  A ZeRO-2/3 strategy with
	 * ACCEL_CAP_MICRO_REDUCE finishes the micro-step's reduce-scatters and
	 * accumulates them into its shard here.  Not called for forward-only
	 * passes.  Default: nothing. */
	int (*micro_step_end)(void *state, uint32_t sync);
	/* (REDUCE_HOOK role, optional) host->reduce_bucket_v2()'s work: reduce
	 * b->view in place over b->group so that it holds the mean (b->flags
	 * has ACCEL_REDUCE_PREDIVIDED: the bucket was pre-divided, sum it).
	 * May block (*ret_req = NULL) or return a request; work that must follow
	 * the collective (cast back, decompress) goes into host->req_on_done()
	 * on that request. */
	int (*reduce_bucket_v2)(void *state, const accel_bucket_v1 *b, accel_req **ret_req);
	/* (REDUCE_HOOK role, optional) host->reduce_scatter_bucket()'s work:
	 * `shard` receives this rank's block of the mean (or, with
	 * ACCEL_REDUCE_PREDIVIDED in b->flags, the sum) over b->group.  A hook
	 * without it cannot be selected with a strategy that has
	 * ACCEL_CAP_REDUCE_SCATTER. */
	int (*reduce_scatter_bucket)(void *state, const accel_bucket_v1 *b,
	                             const accel_view *shard, accel_req **ret_req);

	/* -- ABI minor 5 ------------------------------------------------------------ */

	/* (strategy, optional) grad_stats() without the trip to the host: add
	 * the global sum of squares of all (scaled) gradients, over all ranks,
	 * each element counted once, to stats[0] with host->op_sumsq_acc (and,
	 * for a sharded strategy, an all-reduce of stats[0] on the device),
	 * enqueued on the context's stream.  stats: ACCEL_DEVICE_STATS_DOUBLES (accel/device.h)
	 * f64 of device memory on device `device_index` (of kind `device`),
	 * stats[0] zeroed; the core then computes the clipping factor there and
	 * passes it as info->grad_scale_dev, which step() must hand to every
	 * optim_step.  ACCEL_ERR_UNSUPPORTED, without host->error(), when this
	 * rank's gradients are not all on that device: the core then calls
	 * grad_stats().  Called instead of grad_stats() only when nothing needs
	 * the values on the host (clipping or track_grad_norm alone, no
	 * pre_step hook or loss scaler).  Default: grad_stats() every step. */
	int (*grad_stats_device)(void *state, int32_t device, int32_t device_index, double *stats);

	/* -- ABI minor 6 ------------------------------------------------------------ */

	/* (optional) This instance's capabilities, when they follow its config
	 * (ZeRO's stage, FSDP's sharding strategy): a subset of desc->caps,
	 * which stays the union over every configuration (what `accel plugins
	 * info` shows).  Called once, after init() and before validate(); the
	 * core then uses the result wherever it reads a plugin's caps (the
	 * selection's caps given to validate(), the reduce-hook check, the
	 * accumulation contract, the binding check of accel_prepare).  Bits
	 * outside desc->caps are an error.  Default: desc->caps. */
	int (*instance_caps)(void *state, uint32_t *ret_caps);

	/* (strategy with ACCEL_CAP_SHARD_PARAMS, optional) Materialise or
	 * release the working weights of unit `unit` outside the unit hooks, so
	 * that the core can read or write them through the bound views (for
	 * param/<name> in accel_save_state / accel_load_state and for
	 * accel_save_model).  Collective: every rank calls it for the same
	 * units in the same order, one unit at a time (memory: one unit).
	 * flags:
	 *  ACCEL_MATERIALIZE_GATHER   gather the unit's full working weights
	 *                             and param_bind() them (data; grad may be
	 *                             NULL);
	 *  ACCEL_MATERIALIZE_RELEASE  unbind (param_bind NULL) and free what
	 *                             GATHER allocated;
	 *  ACCEL_MATERIALIZE_WRITEBACK (with RELEASE) the core wrote values
	 *                             into the bound views: copy this rank's
	 *                             owned range of them into its shard of the
	 *                             working weights first (masters are the
	 *                             strategy's own state: load_state sets
	 *                             them).
	 * A unit that is already gathered (inside its hooks, or persistent)
	 * stays bound by GATHER and is not released by RELEASE.  Without the
	 * slot, a strategy with ACCEL_CAP_SHARD_PARAMS cannot save or load
	 * working weights: the core refuses with a message naming it. */
	int (*materialize)(void *state, uint32_t unit, uint32_t flags);

	/* (strategy, optional) Per-rank bytes this strategy would allocate for
	 * a model described by `in`, without a model or a job: called like
	 * available() (host members that need no model: log, error, world,
	 * cfg_*), with the config the estimate is for (`accel estimate-memory`
	 * calls it once per variant, e.g. each ZeRO stage, by overriding the
	 * plugin's keys).  Fill out->bytes (out->struct_size is set by the
	 * caller; write only what it covers).  Default: the strategy gives no
	 * estimate (the command says so). */
	int (*estimate_memory)(const accel_host_v1 *host, accel_host *h,
	                       const accel_estimate_in_v1 *in, accel_estimate_out_v1 *out);
} accel_plugin_v1;

/* accel_plugin_v1.materialize flags (ABI minor 6) */
#define ACCEL_MATERIALIZE_GATHER    (1u << 0)
#define ACCEL_MATERIALIZE_RELEASE   (1u << 1)
#define ACCEL_MATERIALIZE_WRITEBACK (1u << 2)

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
