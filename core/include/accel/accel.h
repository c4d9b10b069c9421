/* SPDX-License-Identifier: MIT */
/*
 * accel/accel.h: the API training programs call.
 *
 * Conventions (see docs/api.md):
 *  - functions that can fail return ACCEL_OK (0) or a negative ACCEL_ERR_*;
 *    the explanation is read with accel_errmsg(ctx).  The first error of a
 *    context wins until accel_clear_error().
 *  - output parameters are named ret_*, come last, and are written only on
 *    success.
 *  - destructors accept NULL and return NULL: `ctx = accel_ctx_free(ctx);`
 *  - `_new` returns an owned object, `_get_` a borrowed one (valid until its
 *    owner is freed).
 *  - a context is used from one thread at a time.
 *
 * The typical program:
 *
 *     accel_ctx *ctx; accel_ctx_new(NULL, &ctx);       // config from ACCEL_CONFIG...
 *     accel_model_add_param(ctx, "fc0", "fc0.weight", ACCEL_DTYPE_F32, 2, shape, init, &p0);
 *     ...
 *     accel_prepare(ctx);
 *     for (step...) {
 *         for (micro...) {
 *             for (u...) { accel_unit_pre_forward(ctx,u); forward(u); accel_unit_post_forward(ctx,u); }
 *             for (u backwards...) { accel_unit_pre_backward(ctx,u); backward(u); accel_unit_post_backward(ctx,u); }
 *         }
 *         accel_step(ctx);
 *     }
 *     ctx = accel_ctx_free(ctx);
 */
#ifndef ACCEL_ACCEL_H
#define ACCEL_ACCEL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "accel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 1
#define ACCEL_VERSION_PATCH 0
#define ACCEL_VERSION_STRING "0.1.0"

/* Marks the functions libaccel exports (everything else is hidden). */
#if defined(__GNUC__)
#define ACCEL_API __attribute__((visibility("default")))
#else
#define ACCEL_API
#endif

/* ---- status and versions --------------------------------------------------- */

/* Name of a status code ("ACCEL_ERR_CONFIG"); never NULL. Static string. */
ACCEL_API const char *accel_status_str(int status);
/* Library version string (static). */
ACCEL_API const char *accel_version(void);
/* Name of a dtype ("f32"), NULL if unknown; size in bytes, 0 if unknown. */
ACCEL_API const char *accel_dtype_name(uint32_t dtype);
ACCEL_API size_t accel_dtype_size(uint32_t dtype);
/* Parse "f32"/"bf16"/...; ACCEL_DTYPE_INVALID when unknown. */
ACCEL_API uint32_t accel_dtype_parse(const char *name);

/* ---- context ------------------------------------------------------------------ */

typedef struct accel_ctx accel_ctx;

/* Options for accel_ctx_new; zero-initialize and set struct_size. */
typedef struct accel_opts {
	uint32_t struct_size;        /* sizeof(accel_opts) */
	uint32_t reserved;
	const char *config_path;     /* config file; NULL: ACCEL_CONFIG, ./accel.json,
	                                ~/.config/accel/default.json, else defaults  */
	const char *config_json;     /* config text instead of a file (optional)    */
	const char *const *sets;     /* NULL-terminated "key=value" overrides, the
	                                highest layer (optional)                     */
	int32_t skip_env;            /* nonzero: ignore ACCEL_* config variables     */
	int32_t reserved2;
} accel_opts;

/* Create a context: resolve the configuration, load the selected plugins and
 * comm backend, join the other ranks.  opts may be NULL.  On failure
 * *ret_ctx is still set to a context in error state when one could be made,
 * so accel_errmsg() can say why; free it either way.  Returns the status. */
ACCEL_API int accel_ctx_new(const accel_opts *opts, accel_ctx **ret_ctx);
/* Tear down: plugin fini, backend fini, free memory.  NULL-safe. */
ACCEL_API accel_ctx *accel_ctx_free(accel_ctx *ctx);

/* The first recorded error's message ("" when none); borrowed until the next
 * call on ctx.  accel_errcode() is its status. */
ACCEL_API const char *accel_errmsg(const accel_ctx *ctx);
ACCEL_API int accel_errcode(const accel_ctx *ctx);
ACCEL_API void accel_clear_error(accel_ctx *ctx);
/* Record an error in the context (for programs that report through accel);
 * returns `code`. */
ACCEL_API int accel_set_error(accel_ctx *ctx, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);

/* A named extension interface of an active plugin (e.g. plugin "fp8",
 * name "fp8.gemm", version 1): a static table whose layout the plugin
 * documents, borrowed until the context is freed.  NULL (with the error
 * recorded) when the plugin is not active or does not offer it. */
ACCEL_API const void *accel_plugin_extension(accel_ctx *ctx, const char *plugin, const char *name,
                                             uint32_t version);

/* ---- processes ----------------------------------------------------------------- */

ACCEL_API int accel_rank(const accel_ctx *ctx);
ACCEL_API int accel_world_size(const accel_ctx *ctx);
ACCEL_API int accel_local_rank(const accel_ctx *ctx);
ACCEL_API int accel_local_world_size(const accel_ctx *ctx);
/* Rank 0. */
ACCEL_API int accel_is_main(const accel_ctx *ctx);
/* local_rank 0. */
ACCEL_API int accel_is_local_main(const accel_ctx *ctx);
/* Barrier across all ranks. */
ACCEL_API int accel_wait_for_everyone(accel_ctx *ctx);
/* printf on the main process only (stdout, flushed). */
ACCEL_API void accel_print(const accel_ctx *ctx, const char *fmt, ...) ACCEL_PRINTF(2, 3);
/* Log through accel's logger (level filter, rank prefix). */
ACCEL_API void accel_log_msg(const accel_ctx *ctx, int level, const char *fmt, ...) ACCEL_PRINTF(3, 4);

/* ---- configuration access --------------------------------------------------------
 * Typed reads of the resolved configuration by dotted path.  Strings are
 * borrowed until the context is freed.  ACCEL_ERR_NOT_FOUND when unset. */
ACCEL_API int accel_config_int(const accel_ctx *ctx, const char *path, int64_t *ret_value);
ACCEL_API int accel_config_double(const accel_ctx *ctx, const char *path, double *ret_value);
ACCEL_API int accel_config_bool(const accel_ctx *ctx, const char *path, int32_t *ret_value);
ACCEL_API int accel_config_string(const accel_ctx *ctx, const char *path, const char **ret_value);

/* ---- collectives on user memory (CPU or device, chosen by the buffer) -------
 * Blocking.  Called in the same order on every rank. */
ACCEL_API int accel_allreduce(accel_ctx *ctx, const void *send, void *recv, uint64_t count,
                    uint32_t dtype, uint32_t op);
ACCEL_API int accel_broadcast(accel_ctx *ctx, void *buf, uint64_t count, uint32_t dtype, int root);
ACCEL_API int accel_allgather(accel_ctx *ctx, const void *send, void *recv, uint64_t sendcount,
                    uint32_t dtype);
ACCEL_API int accel_reduce_scatter(accel_ctx *ctx, const void *send, void *recv, uint64_t recvcount,
                         uint32_t dtype, uint32_t op);

/* ---- device streams (docs/streams.md) ------------------------------------------
 * accel enqueues the device work it does for a context (the ops and the
 * optimizer step of its strategy, staging copies) on the context's compute
 * stream, and orders every collective on device buffers after the work
 * queued there before the call, without blocking the host.  A stream is a
 * cudaStream_t passed as void *; NULL, the default, is the legacy default
 * stream (CUDA's stream 0). */

/* Make `stream` the context's compute stream (NULL: back to the legacy
 * default stream); it also becomes the calling thread's stream for the
 * device work accel does there outside a context's strategy calls
 * (checkpoint copies, initial values).  Takes effect with the next call;
 * what was issued before keeps its order.  The program owns the stream
 * and keeps it alive while it is set (set NULL, or free the context,
 * before destroying it).  Errors: ACCEL_ERR_UNSUPPORTED when there is no
 * CUDA device to run a stream (a build without CUDA, no module, no GPU:
 * the message says which; NULL is always accepted), ACCEL_ERR_INVALID_ARG
 * when `stream` is not a live CUDA stream. */
ACCEL_API int accel_set_stream(accel_ctx *ctx, void *stream);
/* The context's compute stream; NULL for the legacy default stream (and
 * for a NULL ctx).  Borrowed: the program's own. */
ACCEL_API void *accel_get_stream(const accel_ctx *ctx);
/* Copy src into dst on the context's stream and return before it has run:
 * same dtype and numel; host to device, device to host, device to device,
 * and across devices (a peer copy: direct where the GPUs have peer access,
 * through the host otherwise).  Touch neither buffer until
 * accel_stream_synchronize() or later work on the stream.  Host memory
 * from accel_pinned_alloc() overlaps; pageable memory is copied
 * synchronously by CUDA (correct, slower).  Two host views: a plain copy,
 * done on return, on every build.  Errors: INVALID_ARG (views, dtype or
 * count differ), UNSUPPORTED (a device view and no CUDA device). */
ACCEL_API int accel_copy_async(accel_ctx *ctx, const accel_view *dst, const accel_view *src);
/* Block until everything queued on the context's stream has run; reports
 * an error of that work.  ACCEL_OK at once on a context that never had
 * device work (CPU only). */
ACCEL_API int accel_stream_synchronize(accel_ctx *ctx);
/* `bytes` of page-locked host memory (for accel_copy_async), accounted like
 * every allocation of accel (category ACCEL_MEM_BUFFERS, on the host).
 * Owned by the caller: free it with accel_pinned_free() before the context
 * (accel_ctx_free releases what is left).  ACCEL_ERR_UNSUPPORTED without
 * the cuda device module or a GPU.  accel_pinned_free(ctx, NULL) is a
 * no-op. */
ACCEL_API int accel_pinned_alloc(accel_ctx *ctx, uint64_t bytes, void **ret_ptr);
ACCEL_API void accel_pinned_free(accel_ctx *ctx, void *ptr);

/* @api-train: model registry, prepare, unit hooks, step, metrics (train owner) */

/* ---- model registry --------------------------------------------------------
 * A model is an ordered list of units (layers), each a contiguous run of
 * named parameters.  Units are created by the first parameter that names
 * them; all parameters of a unit must be registered one after the other.
 * Registration order is forward order.  Parameters and units are
 * identified by their index (0, 1, ... in registration order).  The
 * registry is frozen by accel_prepare(). */

/* A range initializer: write the initial values of elements [offset,
 * offset + count) of parameter `param_name` (flat, row-major) to dst as f32.
 * accel may call it for any sub-range, in any order, on any rank (sharded
 * strategies initialise only what a rank owns), so the values must depend
 * only on the name and the element index.  Return 0, or nonzero to fail
 * accel_prepare() (the code is reported). */
typedef int (*accel_init_fn)(void *user, const char *param_name, uint64_t offset,
                             uint64_t count, float *dst);

#define ACCEL_INIT_ZEROS   0  /* all zero (also what a NULL init means)         */
#define ACCEL_INIT_CONST   1  /* every element = a                              */
#define ACCEL_INIT_UNIFORM 2  /* uniform in [a, b)                              */
#define ACCEL_INIT_NORMAL  3  /* normal, mean a, standard deviation b           */
#define ACCEL_INIT_DATA    4  /* copied from `data` at registration             */
#define ACCEL_INIT_FN      5  /* produced by fn(user, ...) during accel_prepare  */

/* How a parameter gets its initial values.  UNIFORM and NORMAL draw from a
 * counter-based generator keyed by the config `seed`, the parameter's name
 * and the element index, so the same seed gives the same model at any world
 * size and under any sharding.  Build one with the accel_init_* helpers. */
typedef struct accel_init {
	uint32_t struct_size;     /* sizeof(accel_init)                           */
	uint32_t kind;            /* ACCEL_INIT_*                                 */
	double a, b;              /* CONST / UNIFORM / NORMAL parameters          */
	const void *data;         /* DATA: numel values of data_dtype; copied     */
	uint32_t data_dtype;      /* DATA: dtype of data (f32, f64, f16, bf16)    */
	uint32_t reserved;
	accel_init_fn fn;         /* FN                                           */
	void *user;               /* FN: passed back; must outlive accel_prepare() */
} accel_init;

ACCEL_API accel_init accel_init_const(double value);
ACCEL_API accel_init accel_init_uniform(double lo, double hi);
ACCEL_API accel_init accel_init_normal(double mean, double std);
/* `values`: numel f32 values, copied by accel_model_add_*(). */
ACCEL_API accel_init accel_init_data(const float *values);
ACCEL_API accel_init accel_init_callback(accel_init_fn fn, void *user);

/* Full description of one parameter; zero-initialize and set struct_size. */
typedef struct accel_param_desc {
	uint32_t struct_size;     /* sizeof(accel_param_desc)                     */
	uint32_t dtype;           /* working dtype you compute with: f32, f16, bf16 */
	const char *unit;         /* unit (layer) name, e.g. "block3"             */
	const char *name;         /* unique parameter name, e.g. "block3.fc.weight" */
	uint32_t ndim;            /* 0..8                                         */
	uint32_t frozen;          /* nonzero: no gradient, never reduced or stepped */
	const int64_t *shape;     /* ndim entries > 0 (may be NULL when ndim == 0) */
	int32_t device;           /* ACCEL_DEVICE_CPU (0) or ACCEL_DEVICE_CUDA    */
	int32_t device_index;     /* CUDA ordinal                                 */
	const accel_init *init;   /* NULL: zeros                                  */
	/* Since accel 1.3 (ABI minor 3); 0 (ACCEL_DTYPE_INVALID) = the default.
	 * Set struct_size = sizeof(accel_param_desc) to use them. */
	uint32_t grad_dtype;      /* gradient dtype (f32, f16, bf16): what
	                             accel_param_grad() points at and what
	                             micro-steps accumulate into; default dtype.
	                             f32 with bf16 weights: f32 accumulation    */
	uint32_t reduce_dtype;    /* dtype gradients cross ranks in (f32, f16,
	                             bf16); default grad_dtype.  Strategies that
	                             cannot reduce in another dtype than the
	                             gradient's refuse the model at prepare     */
	uint32_t compute_dtype;   /* dtype your kernels compute in (f32, f16, bf16,
	                             f8e4m3, f8e5m2); default dtype.  Read by
	                             precision plugins (fp8)                     */
	uint32_t reserved;        /* 0 */
	/* Since ABI minor 6 (reach it with struct_size = sizeof(accel_param_desc)): */
	const char *unit_kind;    /* (optional) what the unit is, e.g. "Block":
	                             plugins see it as accel_unit_info_v1.kind
	                             (FSDP's transformer_cls_names_to_wrap matches
	                             it).  NULL: none (or the one set earlier);
	                             a kind differing from the unit's is refused */
} accel_param_desc;

/* Register a parameter; *ret_param is its index (optional, may be NULL).
 * Its optimizer group is "no_decay" when its name ends with one of the
 * config's optimizer.no_decay suffixes.  Errors: INVALID_ARG (bad shape,
 * dtype, duplicate name, unit registered non-contiguously), STATE (after
 * accel_prepare). */
ACCEL_API int accel_model_add(accel_ctx *ctx, const accel_param_desc *desc,
                              uint32_t *ret_param);
/* Shorthand for a trainable CPU parameter. */
ACCEL_API int accel_model_add_param(accel_ctx *ctx, const char *unit, const char *name,
                                    uint32_t dtype, uint32_t ndim, const int64_t *shape,
                                    const accel_init *init, uint32_t *ret_param);
/* Look up by name.  ACCEL_ERR_NOT_FOUND when unknown (no error recorded). */
ACCEL_API int accel_model_find_param(const accel_ctx *ctx, const char *name, uint32_t *ret_param);
ACCEL_API int accel_model_find_unit(const accel_ctx *ctx, const char *name, uint32_t *ret_unit);
ACCEL_API uint32_t accel_model_n_params(const accel_ctx *ctx);
ACCEL_API uint32_t accel_model_n_units(const accel_ctx *ctx);
/* Elements of a parameter (0 when unknown).  Name: borrowed, NULL when unknown. */
ACCEL_API uint64_t accel_param_numel(const accel_ctx *ctx, uint32_t param);
ACCEL_API const char *accel_param_name(const accel_ctx *ctx, uint32_t param);
ACCEL_API const char *accel_unit_name(const accel_ctx *ctx, uint32_t unit);
/* Say what a registered unit is ("Block", "Embedding"), as a PyTorch module's
 * class names it: strategies read it as accel_unit_info_v1.kind (FSDP's
 * TRANSFORMER_BASED_WRAP matches transformer_cls_names_to_wrap against unit
 * names and kinds).  `kind` is copied; NULL clears it.  Errors: NOT_FOUND
 * (no unit of that name is registered yet), INVALID_ARG (empty, too long or
 * with control/quote characters), STATE (after accel_prepare). */
ACCEL_API int accel_unit_set_kind(accel_ctx *ctx, const char *unit, const char *kind);
/* The kind of a unit: borrowed, NULL when none was set or the index is
 * unknown. */
ACCEL_API const char *accel_unit_kind(const accel_ctx *ctx, uint32_t unit);
/* Unit `unit` also uses `param`, registered by an earlier unit (a tied
 * weight). The strategy makes the parameter's data valid in that
 * unit's hooks window as in its own unit's, and its gradient is the sum
 * of both uses' contributions (write with += in both units, as
 * accel_param_grad() says). One master, one optimizer state.
 * Errors: NOT_FOUND (no unit of that name), INVALID_ARG (param out of range,
 * registered by this unit or a later one, or already declared for this
 * unit), STATE (after accel_prepare).  accel_prepare refuses a strategy that
 * does not declare ACCEL_CAP_SHARED_PARAMS (docs/abi.md). */
ACCEL_API int accel_unit_use_param(accel_ctx *ctx, const char *unit, uint32_t param);
/* The parameters unit `unit` uses besides its own (accel_unit_use_param),
 * in declaration order: *ret_n entries, borrowed; NULL/0 when none. */
ACCEL_API const uint32_t *accel_unit_shared_params(const accel_ctx *ctx, uint32_t unit,
                                                   uint32_t *ret_n);

/* ---- prepare ---------------------------------------------------------------
 * Freeze the model and hand it to the strategy, which lays out parameters,
 * gradients, master weights and optimizer state, initialises them and makes
 * every rank start from rank 0's values.  Call once, on every rank, after
 * registering the whole model and before the first forward.  Gradients
 * start at zero. */
ACCEL_API int accel_prepare(accel_ctx *ctx);

/* Working-dtype values and gradient of a parameter (numel elements, row
 * major, on the parameter's device).  Borrowed: owned by the strategy.
 * Under DDP and ZeRO-1/2 valid from accel_prepare() until the context is
 * freed; under
 * ZeRO-3/FSDP valid only between the unit's pre- and post-hook.  NULL
 * outside that window (a debug log line says which hook is missing), for a
 * frozen parameter's gradient, or for an unknown index.
 * Write your gradients with += : they accumulate over micro-steps and are
 * zeroed by accel_step(). */
ACCEL_API void *accel_param_data(accel_ctx *ctx, uint32_t param);
ACCEL_API void *accel_param_grad(accel_ctx *ctx, uint32_t param);
/* Dtype of accel_param_grad()'s elements (the registered grad_dtype, or the
 * working dtype); ACCEL_DTYPE_INVALID for an unknown index. */
ACCEL_API uint32_t accel_param_grad_dtype(const accel_ctx *ctx, uint32_t param);

/* ---- unit hooks ------------------------------------------------------------
 * Call around your forward and backward of each unit (forward in unit order,
 * backward in reverse).  Strategies that shard parameters gather them in the
 * pre hooks and free them in the post hooks; DDP launches gradient
 * reductions from post_backward to overlap them with the rest of backward.
 * Strategies that need none of this make them no-ops, so a program that
 * always calls them runs under every strategy. */
ACCEL_API int accel_unit_pre_forward(accel_ctx *ctx, uint32_t unit);
ACCEL_API int accel_unit_post_forward(accel_ctx *ctx, uint32_t unit);
ACCEL_API int accel_unit_pre_backward(accel_ctx *ctx, uint32_t unit);
ACCEL_API int accel_unit_post_backward(accel_ctx *ctx, uint32_t unit);

/* ---- accumulation and step -------------------------------------------------
 * One optimizer step takes `gradient_accumulation_steps` (config, default 1)
 * micro-steps; each micro-step ends with accel_step().  Gradients of all
 * micro-steps are summed in the gradient buffers; the step applies their
 * mean over micro-steps and ranks: with a per-micro-batch mean loss, G
 * micro-steps of B/G samples equal one step of B samples, and N ranks of B
 * samples equal one rank of N*B (see docs/api.md).  Only the last
 * micro-step of a cycle communicates. */

/* 1 when the current micro-step ends a cycle (its accel_step() reduces
 * gradients and updates parameters), else 0.  Like Accelerate's
 * `accelerator.sync_gradients`. */
ACCEL_API int accel_sync_gradients(const accel_ctx *ctx);

/* Zeroing gradients.  By default every accel_step() leaves the gradients
 * zeroed and the program adds (+=) each micro-step's gradients to them.  A
 * program can instead *write* every trainable gradient on the first
 * micro-step of a step and add on the others (a GEMM with beta 0, then 1:
 * PyTorch's zero_grad(set_to_none=True)); it says so once, before
 * accel_prepare(), with accel_set_grad_overwrite(ctx, 1), and then accel
 * never zeroes the gradients, which saves a pass over all of them per step.
 * accel_grad_accumulate() tells such a program what to do now: 0 = write
 * (overwrite what is there), 1 = add.  It is always 1 without overwrite
 * mode, so a program may use it unconditionally.  In overwrite mode a
 * gradient the program does not write on a first micro-step keeps stale
 * values: every trainable parameter must get one. */
ACCEL_API int accel_set_grad_overwrite(accel_ctx *ctx, int on);
ACCEL_API int accel_grad_accumulate(const accel_ctx *ctx);
/* Forward-only passes (evaluation; torch.no_grad()).  With `on` 0 the next
 * passes compute no gradients: call the forward unit hooks as usual (a
 * sharded strategy gathers each unit and frees it in post_forward, keeping
 * nothing for a backward), but no backward hook and no accel_step(): those
 * fail with ACCEL_ERR_STATE until gradients are enabled again.  Such
 * passes are not micro-steps: accel_sync_gradients() and the accumulation
 * count do not move.  Switch between passes, not inside one.  Default: 1.
 * accel_grad_enabled() returns the setting (1 for a NULL or failed ctx). */
ACCEL_API int accel_set_grad_enabled(accel_ctx *ctx, int on);
ACCEL_API int accel_grad_enabled(const accel_ctx *ctx);
/* End a micro-step.  On non-sync micro-steps only counts it.  On sync ones:
 * finish gradient reduction, compute the global gradient norm, apply loss
 * (un)scaling, clip to `max_grad_norm` (when > 0, like torch's
 * clip_grad_norm_), run the optimizer, zero the gradients, advance the step
 * count and the learning-rate schedule.  A precision plugin may skip the
 * update (fp16 overflow); gradients are zeroed then too. */
ACCEL_API int accel_step(accel_ctx *ctx);
/* The factor to multiply the loss by before backward (the loss-scaler
 * plugin's current loss scale; 1 without one). */
ACCEL_API double accel_loss_scale(accel_ctx *ctx);
/* Learning rate the next optimizer step will use (group 0). */
ACCEL_API double accel_get_lr(const accel_ctx *ctx);
/* Optimizer steps applied so far (skipped ones not counted). */
ACCEL_API uint64_t accel_get_step(const accel_ctx *ctx);

/* ---- checkpoints (docs/checkpoints.md) ---------------------------------------- */

/* Save the training state into the directory `dir` (which must not exist;
 * its parent must, on a file system every rank sees): the model's weights
 * (model.safetensors, rank 0's "param/<name>" tensors), every plugin's state
 * (master weights and optimizer state as tensors by range, blobs) and every
 * sampler made with this context, the step (and so the LR schedule's
 * position), and a manifest.json (format version 2) with each file's size
 * and XXH64 and each tensor's slices with theirs.  Collective: every rank
 * calls it, after accel_prepare() and at the same step, between optimizer
 * steps (not inside a gradient accumulation).  Written into
 * "<dir>.tmp-<job>", committed by a rename once every rank's files are on
 * disk, then the parent's "latest" file names it: a failed or interrupted
 * save leaves earlier checkpoints untouched.  Every rank returns the same
 * status.  `dir` NULL, with the config key automatic_checkpoint_naming
 * true: project_dir/checkpoints/checkpoint_<n>, n counting from the key
 * `iteration` (or from the loaded checkpoint's n + 1); then, with
 * total_limit set, the oldest committed checkpoint_<n> beyond it are
 * removed (after the new one is committed). */
ACCEL_API int accel_save_state(accel_ctx *ctx, const char *dir);
/* Restore what accel_save_state() saved, with the same model, strategy and
 * samplers (created in the same order), at any world size: tensors are
 * read by element range from whichever ranks' files hold them, samplers
 * resume at the same global sample.  Collective.  Checks the manifest
 * (format version, strategy, plugins, tensors against the model) and the
 * files' sizes and checksums before it changes anything; never writes to
 * `dir`.  `dir` NULL, with automatic_checkpoint_naming: the checkpoint
 * project_dir/checkpoints/latest names.  Errors: ACCEL_ERR_CHECKPOINT
 * naming the file, the tensor and what was expected. */
ACCEL_API int accel_load_state(accel_ctx *ctx, const char *dir);
/* Write the model's weights only, as one safetensors file `file` (metadata
 * format "pt", each parameter under its own name in its working dtype:
 * safetensors.torch.load_file + load_state_dict read it).  Consolidated one
 * tensor at a time on rank 0 (memory: the largest parameter), written to a
 * temporary file and renamed into place.  Collective: every rank calls it
 * after accel_prepare(); every rank returns the same status. */
ACCEL_API int accel_save_model(accel_ctx *ctx, const char *file);

/* What the last sync accel_step() did. */
typedef struct accel_step_report {
	uint32_t struct_size;     /* sizeof(accel_step_report)                    */
	uint32_t skipped;         /* nonzero: the update was not applied          */
	uint64_t step;            /* optimizer steps applied after it             */
	double lr;                /* learning rate it used                        */
	double grad_norm;         /* global L2 norm of the gradients before clipping
	                             (unscaled, averaged); +inf if some element is
	                             infinite, NaN if some is NaN, as torch's
	                             clip_grad_norm_; NaN when it was not computed
	                             (has_grad_norm 0) */
	double clip_coef;         /* factor clipping applied (1: not clipped)     */
	double loss_scale;        /* loss scale of that step                      */
	uint64_t nonfinite;       /* non-finite gradient elements (all ranks);
	                             0 when not computed, and when the statistics
	                             stayed on the device (docs/streams.md)       */
	uint32_t has_grad_norm;   /* 1: grad_norm (and, unless the statistics stayed
	                             on the device, nonfinite) were computed: with
	                             max_grad_norm > 0, track_grad_norm, a loss
	                             scaler or a hook plugin's pre_step; 0: not
	                             (saves a pass over all gradients per step)   */
	uint32_t reserved;
} accel_step_report;
/* ACCEL_ERR_STATE before the first sync step.  report->struct_size must be
 * set by the caller; members beyond it are not written.  When the step kept
 * its gradient statistics on the device (clipping on a GPU, no loss scaler:
 * docs/streams.md, "Clipping on the device"), this waits for the context's
 * stream and reads grad_norm and clip_coef from the device: the step's one
 * host synchronisation, made only here. */
ACCEL_API int accel_last_step(const accel_ctx *ctx, accel_step_report *ret_report);

/* ---- memory report (docs/api.md, "Memory") ------------------------------------ */

/* Every category together, for accel_memory_stats(). */
#define ACCEL_MEM_ALL UINT32_MAX

/* Bytes accel allocated for this context (everything plugins and the core
 * allocate through host->mem_alloc) of `category` (ACCEL_MEM_PARAMS ..
 * ACCEL_MEM_OFFLOAD, or ACCEL_MEM_ALL for their sum) on one device:
 * ACCEL_DEVICE_CPU with device_index 0 (host memory, pinned included), or
 * ACCEL_DEVICE_CUDA with the device's index.  *ret_current: live now;
 * *ret_peak: the most live at any time since the context was made (for
 * ACCEL_MEM_ALL the peak of the sum, not the sum of the peaks).  A device
 * nothing was allocated on reads 0.  Either output may be NULL, not both.
 * ACCEL_ERR_INVALID_ARG with a message (accel_errmsg) for an unknown
 * category or device or a bad index.  The program's own buffers and
 * libraries' internal memory (CUDA's context, NCCL) are not counted. */
ACCEL_API int accel_memory_stats(const accel_ctx *ctx, uint32_t category, int32_t device,
                                 int32_t device_index, uint64_t *ret_current,
                                 uint64_t *ret_peak);

/* ---- metrics ------------------------------------------------------------------
 * JSON lines written by the main process only: {"step":N,"time":T,...}.
 * Destination: the file set by accel_metrics_open(), else the config key
 * `metrics_file`, else stdout.  Other ranks
 * return ACCEL_OK and write nothing. */
/* path NULL or "-": stdout.  The file is appended to and flushed per line. */
ACCEL_API int accel_metrics_open(accel_ctx *ctx, const char *path);
/* `json_object`: a JSON object text ("{\"loss\":0.5}") whose members are
 * merged after "step" and "time". */
ACCEL_API int accel_log_metrics(accel_ctx *ctx, uint64_t step, const char *json_object);
/* Key/value form: n pairs. */
ACCEL_API int accel_log_scalars(accel_ctx *ctx, uint64_t step, uint32_t n,
                                const char *const *keys, const double *values);

/* ---- progress ------------------------------------------------------------------
 * The run's progress on the main process (other ranks return ACCEL_OK and
 * show nothing).  stdout a terminal: a bar redrawn in place (steps, samples/s,
 * the last loss, ETA); otherwise a plain line per update that gives a loss:
 *   step    50/200  loss 0.1063  lr 0.001  6240 samples/s  eta 00:06
 * accel_print() between updates writes below the bar.  docs/tracking.md. */
/* Start: first_step optimizer steps are done already (0, or where a resumed
 * run starts), total_steps is the run's end. */
ACCEL_API int accel_progress_begin(accel_ctx *ctx, uint64_t first_step, uint64_t total_steps);
/* `step`: optimizer steps done; `samples`: samples processed since
 * accel_progress_begin() (all ranks together); `loss`: the loss to show,
 * NaN when this update has none (the bar keeps the last one; no line is
 * printed except at the last step).  ACCEL_ERR_STATE without a begin. */
ACCEL_API int accel_progress_update(accel_ctx *ctx, uint64_t step, uint64_t samples,
                                    double loss);
/* Draw the bar a last time and end its line.  Also done by accel_ctx_free(). */
ACCEL_API int accel_progress_end(accel_ctx *ctx);

/* @api-data: sampler, RNG streams, schedules (data owner) */

/* ---- learning-rate schedules ---------------------------------------------------
 * The learning rate of optimizer step t (t = optimizer steps applied before
 * it, so the first step uses t = 0, as with transformers' LambdaLR stepped
 * after each optimizer.step()).  W = warmup_steps, T = total_steps:
 *   t < W:          lr * t / W                                 (all types)
 *   constant:       lr
 *   linear:         min_lr + (lr - min_lr) * max(0, (T - t) / (T - W))
 *   cosine:         min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * min(1, (t - W) / (T - W))))
 * With min_lr = 0 these are transformers' get_constant_schedule(_with_warmup),
 * get_linear_schedule_with_warmup and get_cosine_schedule_with_warmup; after
 * T the rate stays at min_lr.  Config keys: scheduler.type, .warmup_steps,
 * .total_steps, .min_lr; the peak rate is optimizer.params.lr.  See
 * docs/optim.md. */

#define ACCEL_SCHED_CONSTANT 0
#define ACCEL_SCHED_LINEAR   1
#define ACCEL_SCHED_COSINE   2

typedef struct accel_sched accel_sched;

/* Zero-initialize and set struct_size. */
typedef struct accel_sched_opts {
	uint32_t struct_size;     /* sizeof(accel_sched_opts)                       */
	uint32_t type;            /* ACCEL_SCHED_*                                  */
	double lr;                /* peak learning rate (>= 0, finite)              */
	double min_lr;            /* floor of the decay, 0 <= min_lr <= lr          */
	uint64_t warmup_steps;    /* linear warm-up from 0 to lr                    */
	uint64_t total_steps;     /* end of the decay (linear, cosine: > 0 and >=
	                             warmup_steps; constant: ignored)               */
} accel_sched_opts;

/* Create a schedule.  opts NULL: the context's configuration (scheduler.*
 * and optimizer.params.lr); then ctx is required.  With opts, ctx is
 * optional: it only receives the error message (without one the message is
 * logged).  Errors: INVALID_ARG (bad values, named), CONFIG (bad keys).
 * Owned; free with accel_sched_free(). */
ACCEL_API int accel_sched_new(accel_ctx *ctx, const accel_sched_opts *opts,
                              accel_sched **ret_sched);
ACCEL_API accel_sched *accel_sched_free(accel_sched *sched);
/* Learning rate for optimizer step `step` (0-based, see above); NaN when
 * sched is NULL. */
ACCEL_API double accel_sched_lr(const accel_sched *sched, uint64_t step);
/* "constant", "linear", "cosine" <-> ACCEL_SCHED_*; parse returns -1 for
 * an unknown name, name returns NULL for an unknown type. */
ACCEL_API int accel_sched_type_parse(const char *name);
ACCEL_API const char *accel_sched_type_name(uint32_t type);

/* ---- distributed sampler ---------------------------------------------------------
 * Splits the N samples of a dataset into per-rank batches the way
 * Accelerate's prepared DataLoader does (DataLoaderConfiguration's
 * split_batches and even_batches, the DataLoader's drop_last), with the
 * order of an epoch a pseudo-random permutation of 0..N-1 keyed by (seed,
 * epoch) and computed the same on every rank.  It hands out sample indices;
 * loading the samples is the program's business.
 *
 * Terms: R = world size, b = per-rank batch, G = R * b = global batch (the
 * samples one optimizer micro-step consumes on all ranks together).
 *  - split_batches = 0 (default): batch_size is b, G = batch_size * R.
 *  - split_batches = 1: batch_size is G (must be a multiple of R), b = G / R.
 * A step starting at position c of the epoch's order gives rank r the
 * positions c + r*b ... c + r*b + b - 1.  At the end of the epoch:
 *  - drop_last = 1: a step that cannot fill all G entries is dropped
 *    (every rank gets floor(N / G) batches);
 *  - else even_batches = 1 (default): the last step is filled up with
 *    positions N, N+1, ... taken modulo N (the first samples of the same
 *    epoch again), so every rank gets ceil(N / G) full batches; the added
 *    entries are "padding", reported by accel_sampler_last_batch() and
 *    removed by accel_gather_for_metrics();
 *  - else: positions >= N are cut off; the last batches are short and some
 *    ranks get one batch fewer (a loop that calls collectives per batch
 *    must then handle the uneven count itself).
 * See docs/data.md. */

typedef struct accel_sampler accel_sampler;

/* A value of the int32/int64 members of accel_sampler_opts meaning "take it
 * from the context, or the default without one". */
#define ACCEL_SAMPLER_AUTO (-1)

typedef struct accel_sampler_opts {
	uint32_t struct_size;     /* sizeof(accel_sampler_opts)                     */
	uint32_t reserved;
	uint64_t n_samples;       /* N, dataset length (> 0)                        */
	uint64_t batch_size;      /* b or G, see split_batches (> 0)                */
	int64_t seed;             /* >= 0, or AUTO: config `seed` (default 42)      */
	int32_t rank;             /* 0..world_size-1, or AUTO: ctx's rank (0)       */
	int32_t world_size;       /* > 0, or AUTO: ctx's world size (1)             */
	int32_t shuffle;          /* 1: a new order each epoch, 0: 0..N-1 in order;
	                             AUTO: config `dataloader.shuffle` (1)          */
	int32_t drop_last;        /* 0/1, AUTO: `dataloader.drop_last` (0)          */
	int32_t split_batches;    /* 0/1, AUTO: `dataloader.split_batches` (0)      */
	int32_t even_batches;     /* 0/1, AUTO: `dataloader.even_batches` (1)       */
} accel_sampler_opts;

/* Set struct_size, ACCEL_SAMPLER_AUTO in seed, rank, world_size, shuffle,
 * drop_last, split_batches and even_batches, and 0 in n_samples and
 * batch_size (you must set those).  Without a context AUTO means the value
 * in parentheses above, the configuration's default. */
ACCEL_API void accel_sampler_opts_init(accel_sampler_opts *opts);

/* Create a sampler positioned at epoch 0, position 0.  ctx (optional)
 * supplies the AUTO values and receives error messages (without a context
 * the message is logged).  Giving shuffle, drop_last, split_batches or
 * even_batches here while the configuration also sets the dataloader key
 * (not by default) to another value is an error naming both.  Errors:
 * INVALID_ARG, CONFIG.  Owned; the sampler keeps ctx (borrowed) for
 * messages, so free it before the context. */
ACCEL_API int accel_sampler_new(accel_ctx *ctx, const accel_sampler_opts *opts,
                                accel_sampler **ret_sampler);
ACCEL_API accel_sampler *accel_sampler_free(accel_sampler *s);

/* Fill `ret_indices` (room for `accel_sampler_info.batch_size` entries)
 * with this rank's next batch of sample indices (0..N-1) and set
 * *ret_count.  *ret_count = 0 means this rank's epoch is over: the sampler
 * has moved to position 0 of the next epoch, so `while (next(), count > 0)`
 * is one epoch and calling on starts the next.  Errors: INVALID_ARG. */
ACCEL_API int accel_sampler_next(accel_sampler *s, int64_t *ret_indices, uint32_t *ret_count);

/* Go to the start of `epoch` (like torch's DistributedSampler.set_epoch;
 * not needed between epochs, see accel_sampler_next). */
ACCEL_API int accel_sampler_set_epoch(accel_sampler *s, uint64_t epoch);

/* Where the sampler stands: the same on every rank after the same number of
 * calls (except with even_batches and drop_last both off, where ranks get
 * different numbers of batches per epoch: then each rank saves its own,
 * docs/data.md).  Save it and hand it to accel_sampler_restore() to continue
 * exactly where it stopped: with the same world size and batch size the
 * remaining batches are the ones an uninterrupted run gets; with another
 * world size or batch size, the rest of the epoch is still the remaining
 * samples in the same order (only the batching and the end padding differ). */
typedef struct accel_sampler_state {
	uint32_t struct_size;     /* sizeof(accel_sampler_state)                    */
	uint32_t version;         /* ACCEL_SAMPLER_STATE_VERSION                    */
	uint64_t n_samples;       /* must match on restore                          */
	uint64_t seed;            /* must match on restore                          */
	uint32_t shuffle;         /* must match on restore                          */
	uint32_t reserved;
	uint64_t epoch;           /* current epoch                                  */
	uint64_t consumed;        /* positions of this epoch already handed out by
	                             all ranks together (0..N)                      */
} accel_sampler_state;
#define ACCEL_SAMPLER_STATE_VERSION 1

/* ret_state->struct_size must be set; members beyond it are not written. */
ACCEL_API int accel_sampler_get_state(const accel_sampler *s, accel_sampler_state *ret_state);
/* Errors: INVALID_ARG (unknown version, N / seed / shuffle differ, consumed
 * > N), each named. */
ACCEL_API int accel_sampler_restore(accel_sampler *s, const accel_sampler_state *state);

/* Resolved settings and sizes. */
typedef struct accel_sampler_info {
	uint32_t struct_size;     /* sizeof(accel_sampler_info), set by the caller  */
	int32_t rank;
	int32_t world_size;
	int32_t shuffle;
	int32_t drop_last;
	int32_t split_batches;
	int32_t even_batches;
	int32_t reserved;
	uint64_t seed;
	uint64_t n_samples;
	uint64_t batch_size;      /* b: per-rank batch, the room ret_indices needs  */
	uint64_t global_batch;    /* G = R * b                                      */
	uint64_t num_batches;     /* this rank's batches in a whole epoch (what
	                             len(dataloader) is in Accelerate)              */
} accel_sampler_info;
ACCEL_API int accel_sampler_get_info(const accel_sampler *s, accel_sampler_info *ret_info);

/* The batch the last accel_sampler_next() returned (count > 0). */
typedef struct accel_sampler_batch {
	uint32_t struct_size;     /* sizeof(accel_sampler_batch), set by the caller */
	uint32_t last;            /* 1: the next call ends this rank's epoch        */
	uint64_t epoch;
	uint64_t offset;          /* c: epoch position where this step starts       */
	uint64_t count;           /* entries this rank got                          */
	uint64_t valid;           /* the first `valid` of them are real samples, the
	                             rest padding (even_batches)                    */
	uint64_t global_valid;    /* real samples of the step on all ranks          */
} accel_sampler_batch;
/* ACCEL_ERR_STATE when no batch was returned since creation, set_epoch,
 * restore or the end of an epoch. */
ACCEL_API int accel_sampler_last_batch(const accel_sampler *s, accel_sampler_batch *ret_batch);

/* Metrics over the real samples only (Accelerate's gather_for_metrics).
 * `data` holds what every rank produced for the last batch, gathered in rank
 * order with a fixed stride: world_size blocks of batch_size samples of
 * `sample_bytes` bytes each, rank r's entries at the start of block r (the
 * tail of a short block is ignored).  Moves the real samples to the front
 * of `data`, in the order of the epoch, and sets *ret_count to their number
 * (accel_sampler_batch.global_valid).  Host memory.  Errors: INVALID_ARG,
 * STATE (no last batch). */
ACCEL_API int accel_sampler_compact(const accel_sampler *s, void *data, size_t sample_bytes,
                                   uint64_t *ret_count);

/* The same with the gather done here: `send` holds this rank's
 * accel_sampler_batch.count samples of `per_sample` elements of `dtype`
 * (host memory); `recv` has room for world_size * batch_size * per_sample
 * elements and receives the real samples of the step, in epoch order;
 * *ret_count is their number.  A collective: every rank calls it after
 * the same accel_sampler_next() step (with even_batches = 0 and drop_last
 * = 0 the ranks whose epoch ended one step early cannot: gather the earlier
 * steps only, or use accel_sampler_compact() with your own exchange).
 * Errors: INVALID_ARG (also when the sampler's world is not ctx's), STATE,
 * and those of accel_allgather(). */
ACCEL_API int accel_gather_for_metrics(accel_ctx *ctx, const accel_sampler *s, const void *send,
                                       uint64_t per_sample, uint32_t dtype, void *recv,
                                       uint64_t *ret_count);

/* ---- random numbers ---------------------------------------------------------------
 * Counter-based streams on Philox4x32-10 (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC'11; cuRAND's Philox and the generator of
 * PyTorch's CUDA random numbers).  A stream is a key, a lane and a position: word w of a stream is
 * word w % 4 of the block philox4x32_10(counter = {b, b >> 32, lane, 0},
 * key) with b = w / 4.  Drawing only advances the position, so a stream can
 * be copied, saved (accel_rng_tell) and resumed (accel_rng_seek), and any
 * stretch of it computed without drawing what comes before.
 *
 * Streams from one seed (config key `seed`, default 42):
 *   ACCEL_RNG_DATA   identical on every rank: choices all ranks must agree
 *                    on (augmentations, which tokens to mask)
 *   ACCEL_RNG_RANK   different on every rank (lane = rank): dropout, noise
 *   ACCEL_RNG_PARAM  parameter initialisation, id = accel_rng_key(name)
 * `id` numbers independent streams of one kind (a layer, an epoch).  The key
 * is Philox-10 of (id, kind) under the seed, so streams that differ in seed,
 * kind, id or rank are unrelated.
 *
 * Numbers:
 *   uniform  one word w: (w >> 8) * 2^-24, in [0, 1), exact in float
 *   normal   two words a, b (Box-Muller, cosine branch):
 *            sqrt(-2 ln((a + 0.5) 2^-32)) * cos(2 pi b 2^-32) in double,
 *            then rounded to float (|z| < 6.7)
 * Element i of a fill takes word i (uniform) or words 2i, 2i+1 (normal), so
 * a fill of n equals n single draws, and the _indexed fills make element i
 * of a parameter a function of (seed, key, i) alone: the same initial model
 * at any world size and under any sharding.  The numbers are the same on
 * every machine; the normals up to the C library's log and cos, which
 * glibc computes far below one float ulp. */
#define ACCEL_RNG_DATA  0
#define ACCEL_RNG_RANK  1
#define ACCEL_RNG_PARAM 2

/* A stream: a value, copy it freely; its members are read-only to programs. */
typedef struct accel_rng {
	uint32_t key[2];          /* Philox key derived from (seed, kind, id)       */
	uint32_t lane;            /* counter word 2: the rank for ACCEL_RNG_RANK     */
	uint32_t reserved;        /* counter word 3: 0                               */
	uint64_t pos;             /* the next word to draw                           */
	uint64_t cached;          /* block held in block[] (UINT64_MAX: none)        */
	uint32_t block[4];
} accel_rng;

/* Make a stream at position 0.  rank is used by ACCEL_RNG_RANK only (>= 0).
 * Errors: INVALID_ARG (unknown kind, negative rank, ret_rng NULL). */
ACCEL_API int accel_rng_init(uint64_t seed, uint32_t kind, uint64_t id, int32_t rank,
                             accel_rng *ret_rng);
/* The same with the context's `seed` and rank. */
ACCEL_API int accel_rng_seed_stream(accel_ctx *ctx, uint32_t kind, uint64_t id,
                                    accel_rng *ret_rng);

/* The next word. */
ACCEL_API uint32_t accel_rng_u32(accel_rng *rng);
/* The next uniform float in [0, 1) (one word). */
ACCEL_API float accel_rng_uniform(accel_rng *rng);
/* A uniform double in [0, 1) with 53 bits (two words, the first is high). */
ACCEL_API double accel_rng_uniform_double(accel_rng *rng);
/* The next standard normal (two words). */
ACCEL_API float accel_rng_normal(accel_rng *rng);
/* n values lo + (hi - lo) * u in [lo, hi) (after rounding to float;
 * lo == hi gives lo), or mean + std * z.  Errors: INVALID_ARG (NULL with
 * n > 0, non-finite bounds, hi < lo, std < 0); nothing is drawn then. */
ACCEL_API int accel_rng_fill_uniform(accel_rng *rng, float *dst, uint64_t n, double lo,
                                     double hi);
ACCEL_API int accel_rng_fill_normal(accel_rng *rng, float *dst, uint64_t n, double mean,
                                    double std);
/* Position in words; seek moves there (a saved tell() resumes a stream). */
ACCEL_API uint64_t accel_rng_tell(const accel_rng *rng);
ACCEL_API void accel_rng_seek(accel_rng *rng, uint64_t pos);

/* The id of a parameter's ACCEL_RNG_PARAM stream: FNV-1a (64-bit) of its
 * name's bytes. */
ACCEL_API uint64_t accel_rng_key(const char *name);
/* Elements [offset, offset + count) of the values the ACCEL_RNG_PARAM
 * stream (seed, key) gives a parameter, into dst[0 .. count): uniform in
 * [lo, hi) or normal(mean, std), as the fills above.  For init callbacks:
 * `accel_rng_fill_normal_indexed(seed, accel_rng_key(name), offset, count,
 * 0, 0.02, out)`.  Errors as the fills. */
ACCEL_API int accel_rng_fill_uniform_indexed(uint64_t seed, uint64_t key, uint64_t offset,
                                             uint64_t count, double lo, double hi,
                                             float *dst);
ACCEL_API int accel_rng_fill_normal_indexed(uint64_t seed, uint64_t key, uint64_t offset,
                                            uint64_t count, double mean, double std,
                                            float *dst);
/* Keep *rng with the context's checkpoints: accel_save_state writes its
 * position on every rank and accel_load_state seeks it back, so a stream
 * the program draws from during training (dropout, augmentation) resumes
 * where it was.  Register the same streams, made the same way (seed, kind,
 * id), in the same order before loading.  At the saving world size each
 * rank gets its own position back; at another, every rank takes rank 0's
 * position and keeps its own lane (docs/rng.md).  *rng must stay valid
 * while ctx lives.  Errors: INVALID_ARG (NULL, registered twice). */
ACCEL_API int accel_rng_register(accel_ctx *ctx, accel_rng *rng);

/* The raw block function: ret_out = Philox4x32-10(ctr, key). */
ACCEL_API void accel_rng_philox4x32(const uint32_t ctr[4], const uint32_t key[2],
                                    uint32_t ret_out[4]);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_ACCEL_H */
