/* SPDX-License-Identifier: MIT */
/* core/device.h: the device modules (private).  A device module
 * (abi/accel/device.h) is loaded once per process, the first time a view,
 * an allocation or an optimizer step names its device: the file
 * device-<name>.so from the ACCEL_DEVICE_PATH directories (':'-separated),
 * then the install directory ACCEL_DEVICEDIR.  A failure (no such build, no
 * module file, no GPU) is remembered and reported the same way on every
 * later call.  Thread-safe; modules are never unloaded. */
#ifndef ACCEL_CORE_DEVICE_H
#define ACCEL_CORE_DEVICE_H

#include <stdint.h>

#include "accel/device.h"
#include "error.h"

/* The module serving `device` (ACCEL_DEVICE_CUDA), initialised; borrowed
 * for the process.  Errors: ACCEL_ERR_UNSUPPORTED (no CUDA in this build,
 * no module file, no usable device: the message says which and what to
 * do), ACCEL_ERR_PLUGIN (a module file that is not one), ACCEL_ERR_INVALID_ARG
 * (a device kind without modules). */
int accelp_device_get(int32_t device, const accel_device_v1 **ret_dev, accel_err *err);

/* The same, also checking that device_index names a device the module
 * found; `what` names the caller for the message. */
int accelp_device_for(const char *what, int32_t device, int32_t device_index,
                     const accel_device_v1 **ret_dev, accel_err *err);

/* Turns a module's status and message into err; returns code. */
int accelp_device_fail(accel_err *err, int code, const char *what, const char *msg);

/* The stream this thread's device work goes to (a cudaStream_t as void *;
 * NULL: the legacy default stream).  It is the stream of the context being
 * served: accel_set_stream() makes it the calling thread's default, and the
 * host-table calls of a context swap the context's stream in around their
 * work (swap returns the previous one, to be swapped back).  See
 * docs/streams.md. */
void *accelp_device_stream(void);
void *accelp_device_stream_swap(void *stream);
/* Before an op of module d on this thread: make the module run it on
 * accelp_device_stream().  A module of device ABI 1.0 (no streams) is
 * refused with ACCEL_ERR_UNSUPPORTED when that stream is not NULL; `what`
 * names the op for the message. */
int accelp_device_use_stream(const accel_device_v1 *d, const char *what, accel_err *err);

/* For `accel env`: the path of the loaded module (NULL if none was
 * loaded) and the device count (0 when not loaded). */
const char *accelp_device_module_path(int32_t device, uint32_t *ret_count);

#endif
