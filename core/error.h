/* SPDX-License-Identifier: MIT */
/* core/error.h: error records (private).  A message lives in an accel_err
 * owned by whoever asked (a context, a loader, a CLI command); never in a
 * global.  The first error recorded wins; later ones are logged at debug. */
#ifndef ACCEL_CORE_ERROR_H
#define ACCEL_CORE_ERROR_H

#include <stdarg.h>

#include "accel/types.h"

#define ACCEL_ERRMSG_MAX 2048

typedef struct accel_err {
	int code;                       /* ACCEL_OK while no error recorded */
	char msg[ACCEL_ERRMSG_MAX];
} accel_err;

/* Record `code` + message unless an error is already recorded; returns code.
 * err may be NULL (then only returns code). */
int accelp_err_set(accel_err *err, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
int accelp_err_setv(accel_err *err, int code, const char *fmt, va_list ap) ACCEL_PRINTF(3, 0);
/* Forget the recorded error. */
void accelp_err_clear(accel_err *err);

#endif
