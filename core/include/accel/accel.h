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

/* @api-data: sampler, RNG streams, schedules (data owner) */

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_ACCEL_H */
