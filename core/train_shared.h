/* SPDX-License-Identifier: MIT */
/* core/train_shared.h: what the training sources share (private):
 * core/train.c (lifetime, registry), core/train_prepare.c (accel_prepare,
 * bindings, initial values), core/train_hooks.c (unit hooks, accumulation,
 * request callbacks) and core/train_step.c (accel_step, optimizer). */
#ifndef ACCEL_CORE_TRAIN_SHARED_H
#define ACCEL_CORE_TRAIN_SHARED_H

#include <stdarg.h>
#include <stdint.h>

#include "ctx-impl.h"
#include "error.h"
#include "train-impl.h"

/* Record an error in t's context (the first wins) and return `code`.
 * Static: each source gets its own copy; the short name keeps the many
 * wrapped messages that call it readable. */
static inline int terr(accel_train *t, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static inline int terr(accel_train *t, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_err_setv(&t->ctx->err, code, fmt, ap);
	va_end(ap);
	return code;
}

/* The same for a const context (NULL: only returns `code`). */
static inline int cerr(const accel_ctx *ctx, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static inline int cerr(const accel_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	if (!ctx)
		return code;
	va_start(ap, fmt);
	/* The error record is the one mutable part of a const context. */
	accelp_err_setv((accel_err *)&ctx->err, code, fmt, ap);
	va_end(ap);
	return code;
}

/* ctx's training state; NULL for a NULL context or one whose creation
 * failed.  Borrowed. */
accel_train *accelp_train_get(const accel_ctx *ctx);
/* The same for a user API call `fn` that needs it: ACCEL_ERR_STATE with a
 * message naming fn when the context was not created successfully. */
int accelp_train_need(const accel_ctx *ctx, const char *fn, accel_train **ret);
/* The active strategy (active[0]); NULL when no plugin is active. */
accel_active *accelp_train_strategy(accel_train *t);
/* The optimizer group of parameter `name` (core/train_step.c: 1 when it
 * matches optimizer.no_decay, else 0). */
uint32_t accelp_train_param_group(accel_train *t, const char *name);

#endif
