/* SPDX-License-Identifier: MIT */
/* core/error.c: status names and error records. */
#include <stdio.h>
#include <string.h>

#include "accel/accel.h"
#include "error.h"
#include "log.h"

const char *accel_status_str(int status)
{
	switch (status) {
	case ACCEL_OK: return "ACCEL_OK";
	case ACCEL_ERR_INVALID_ARG: return "ACCEL_ERR_INVALID_ARG";
	case ACCEL_ERR_NOMEM: return "ACCEL_ERR_NOMEM";
	case ACCEL_ERR_CONFIG: return "ACCEL_ERR_CONFIG";
	case ACCEL_ERR_ABI: return "ACCEL_ERR_ABI";
	case ACCEL_ERR_SYSTEM: return "ACCEL_ERR_SYSTEM";
	case ACCEL_ERR_COMM: return "ACCEL_ERR_COMM";
	case ACCEL_ERR_TIMEOUT: return "ACCEL_ERR_TIMEOUT";
	case ACCEL_ERR_CUDA: return "ACCEL_ERR_CUDA";
	case ACCEL_ERR_NCCL: return "ACCEL_ERR_NCCL";
	case ACCEL_ERR_UNSUPPORTED: return "ACCEL_ERR_UNSUPPORTED";
	case ACCEL_ERR_PLUGIN: return "ACCEL_ERR_PLUGIN";
	case ACCEL_ERR_STATE: return "ACCEL_ERR_STATE";
	case ACCEL_ERR_IO: return "ACCEL_ERR_IO";
	case ACCEL_ERR_NOT_FOUND: return "ACCEL_ERR_NOT_FOUND";
	case ACCEL_ERR_PEER: return "ACCEL_ERR_PEER";
	case ACCEL_ERR_CHECKPOINT: return "ACCEL_ERR_CHECKPOINT";
	case ACCEL_ERR_USAGE: return "ACCEL_ERR_USAGE";
	case ACCEL_ERR_INTERNAL: return "ACCEL_ERR_INTERNAL";
	default: return "ACCEL_ERR_UNKNOWN";
	}
}

const char *accel_version(void)
{
	return ACCEL_VERSION_STRING;
}

int accelp_err_setv(accel_err *err, int code, const char *fmt, va_list ap)
{
	if (!err)
		return code;
	if (err->code != ACCEL_OK) {
		/* First error wins; later ones are usually consequences. */
		char later[512];
		vsnprintf(later, sizeof(later), fmt, ap);
		accelp_log(ACCEL_LOG_DEBUG, "later error (%s) not recorded: %s",
		          accel_status_str(code), later);
		return code;
	}
	err->code = code;
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	return code;
}

int accelp_err_set(accel_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_err_setv(err, code, fmt, ap);
	va_end(ap);
	return code;
}

void accelp_err_clear(accel_err *err)
{
	if (!err)
		return;
	err->code = ACCEL_OK;
	err->msg[0] = '\0';
}
