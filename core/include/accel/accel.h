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
 * freed (the pointer may change only across accel_load_state()); under
 * ZeRO-3/FSDP valid only between the unit's pre- and post-hook.  NULL
 * outside that window (a debug log line says which hook is missing), for a
 * frozen parameter's gradient, or for an unknown index.
 * Write your gradients with += : they accumulate over micro-steps and are
 * zeroed by accel_step(). */
ACCEL_API void *accel_param_data(accel_ctx *ctx, uint32_t param);
ACCEL_API void *accel_param_grad(accel_ctx *ctx, uint32_t param);

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
/* End a micro-step.  On non-sync micro-steps only counts it.  On sync ones:
 * finish gradient reduction, compute the global gradient norm, apply loss
 * (un)scaling, clip to `max_grad_norm` (when > 0, like torch's
 * clip_grad_norm_), run the optimizer, zero the gradients, advance the step
 * count and the learning-rate schedule.  A precision plugin may skip the
 * update (fp16 overflow); gradients are zeroed then too. */
ACCEL_API int accel_step(accel_ctx *ctx);
/* The factor to multiply the loss by before backward (the precision
 * plugin's current loss scale; 1 without one). */
ACCEL_API double accel_loss_scale(accel_ctx *ctx);
/* Learning rate the next optimizer step will use (group 0). */
ACCEL_API double accel_get_lr(const accel_ctx *ctx);
/* Optimizer steps applied so far (skipped ones not counted). */
ACCEL_API uint64_t accel_get_step(const accel_ctx *ctx);

/* What the last sync accel_step() did. */
typedef struct accel_step_report {
	uint32_t struct_size;     /* sizeof(accel_step_report)                    */
	uint32_t skipped;         /* nonzero: the update was not applied          */
	uint64_t step;            /* optimizer steps applied after it             */
	double lr;                /* learning rate it used                        */
	double grad_norm;         /* global L2 norm of the gradients before clipping
	                             (unscaled, averaged; NaN if any non-finite)   */
	double clip_coef;         /* factor clipping applied (1: not clipped)     */
	double loss_scale;        /* loss scale of that step                      */
	uint64_t nonfinite;       /* non-finite gradient elements (all ranks)     */
} accel_step_report;
/* ACCEL_ERR_STATE before the first sync step.  report->struct_size must be
 * set by the caller; members beyond it are not written. */
ACCEL_API int accel_last_step(const accel_ctx *ctx, accel_step_report *ret_report);

/* ---- metrics ------------------------------------------------------------------
 * JSON lines written by the main process only: {"step":N,"time":T,...}.
 * Destination: the file set by accel_metrics_open(), else the config key
 * `metrics_file` when the configuration has one, else stdout.  Other ranks
 * return ACCEL_OK and write nothing. */
/* path NULL or "-": stdout.  The file is appended to and flushed per line. */
ACCEL_API int accel_metrics_open(accel_ctx *ctx, const char *path);
/* `json_object`: a JSON object text ("{\"loss\":0.5}") whose members are
 * merged after "step" and "time". */
ACCEL_API int accel_log_metrics(accel_ctx *ctx, uint64_t step, const char *json_object);
/* Key/value form: n pairs. */
ACCEL_API int accel_log_scalars(accel_ctx *ctx, uint64_t step, uint32_t n,
                                const char *const *keys, const double *values);

/* @api-data: sampler, RNG streams, schedules (data owner) */

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_ACCEL_H */
