/* SPDX-License-Identifier: MIT */
/* core/device.c: finding, loading and initialising device modules.
 *
 * Device modules are not scanned with the plugins: they live in their own
 * directories, so `accel plugins list` and the loader's broken-file
 * reports never see them, and only the module a device needs is mapped
 * (loading CUDA costs a few hundred milliseconds and hundreds of MB of
 * address space; a CPU-only run never pays it). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "accel-build-config.h"
#include "device.h"
#include "loader.h"
#include "log.h"

#ifndef ACCEL_DEVICEDIR
#define ACCEL_DEVICEDIR ""
#endif

typedef struct dev_slot {
	int tried;
	int code;                       /* ACCEL_OK once loaded                  */
	char msg[ACCEL_ERRMSG_MAX];     /* why not, when code != ACCEL_OK        */
	char path[1024];
	const accel_device_v1 *vt;      /* &table once loaded                    */
	accel_device_v1 table;          /* the module's vtable, zero-padded to this
	                                   core's size (structs are append-only) */
	uint32_t count;
} dev_slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dev_slot cuda_slot;
/* The stream device work of this thread goes to (accelp_device_stream). */
static _Thread_local void *tl_stream;

static void host_log(int32_t level, const char *msg)
{
	accelp_log(level, "%s", msg);
}

static const accel_device_host_v1 host = {
	.struct_size = sizeof(accel_device_host_v1),
	.abi_major = 1,
	.abi_minor = ACCEL_DEVICE_ABI_MINOR,
	.log = host_log,
};

typedef const accel_device_v1 *(*entry_fn)(const accel_device_host_v1 *);

/* Fills s: path of the first device-<name>.so found, or why none. */
static int find_file(dev_slot *s, const char *name)
{
	char dirs[4096];
	const char *env = getenv(ACCEL_ENV_DEVICE_PATH);
	snprintf(dirs, sizeof(dirs), "%s%s%s", env && *env ? env : "", env && *env ? ":" : "",
	         ACCEL_DEVICEDIR);
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(s->path, sizeof(s->path), "%s/device-%s.so", d, name);
		if (access(s->path, R_OK) == 0)
			return ACCEL_OK;
	}
	s->path[0] = '\0';
	snprintf(s->msg, sizeof(s->msg), "the %s device module (device-%s.so) is not in "
	         "ACCEL_DEVICE_PATH (%s) or the install directory %s; install accel's %s module "
	         "or point ACCEL_DEVICE_PATH at the directory holding it", name, name,
	         env && *env ? env : "unset", ACCEL_DEVICEDIR, name);
	return ACCEL_ERR_UNSUPPORTED;
}

static int load(dev_slot *s, const char *name)
{
	int r;
	if (!ACCEL_HAVE_CUDA) {
		snprintf(s->msg, sizeof(s->msg), "this build of accel has no CUDA support "
		         "(configure with -Dcuda=enabled and the CUDA toolkit)");
		return ACCEL_ERR_UNSUPPORTED;
	}
	if ((r = find_file(s, name)))
		return r;
	dlerror();
	void *h = dlopen(s->path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(s->msg, sizeof(s->msg), "%s: cannot load: %s", s->path, e ? e : "?");
		return ACCEL_ERR_PLUGIN;
	}
	void *sym = dlsym(h, ACCEL_DEVICE_ENTRY_V1);
	entry_fn entry;
	memcpy(&entry, &sym, sizeof(entry));   /* POSIX: dlsym results convert */
	const accel_device_v1 *raw = sym ? entry(&host) : NULL;
	/* a module of an older minor lacks what later minors append: copy what
	 * it has, the rest reads as NULL */
	const accel_device_v1 *vt = NULL;
	if (raw && raw->struct_size >= ACCEL_ABI_END(accel_device_v1, optim_step)) {
		memset(&s->table, 0, sizeof(s->table));
		memcpy(&s->table, raw,
		       raw->struct_size < sizeof(s->table) ? raw->struct_size : sizeof(s->table));
		vt = &s->table;
	}
	if (!vt || !vt->desc ||
	    vt->desc->abi_major != 1 || vt->desc->device != ACCEL_DEVICE_CUDA || !vt->init ||
	    !vt->mem_alloc || !vt->mem_free || !vt->memcpy || !vt->sync || !vt->copy ||
	    !vt->fill || !vt->scale || !vt->axpy || !vt->sumsq || !vt->nonfinite ||
	    !vt->optim_step) {
		snprintf(s->msg, sizeof(s->msg), "%s: not a device module for ABI v1 (%s)", s->path,
		         !sym ? "no " ACCEL_DEVICE_ENTRY_V1 " symbol"
		         : !raw ? "its entry returned NULL"
		         : !vt  ? "its vtable is smaller than device ABI 1.0's"
		                : "its vtable or descriptor is incomplete or for another device");
		/* not dlclose()d, like every module (docs/abi.md, Loading): its
		 * libraries (the CUDA runtime) may not support unloading; the slot
		 * is tried once, so one handle at most stays */
		return ACCEL_ERR_PLUGIN;
	}
	char buf[1024] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	if ((r = vt->init(&s->count, &de))) {
		snprintf(s->msg, sizeof(s->msg), "%s", buf[0] ? buf : "device module init failed");
		return r;
	}
	accelp_log(ACCEL_LOG_DEBUG, "device module %s loaded from %s: %u device(s)",
	          vt->desc->name, s->path, s->count);
	s->vt = vt;
	return ACCEL_OK;
}

int accelp_device_get(int32_t device, const accel_device_v1 **ret_dev, accel_err *err)
{
	if (device != ACCEL_DEVICE_CUDA)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "device kind %d has no device "
		                     "module (ACCEL_DEVICE_CPU is %d, ACCEL_DEVICE_CUDA %d)", device,
		                     ACCEL_DEVICE_CPU, ACCEL_DEVICE_CUDA);
	dev_slot *s = &cuda_slot;
	pthread_mutex_lock(&lock);
	if (!s->tried) {
		s->code = load(s, "cuda");
		s->tried = 1;
	}
	int code = s->code;
	pthread_mutex_unlock(&lock);
	if (code)
		return accelp_err_set(err, code, "%s", s->msg);
	*ret_dev = s->vt;
	return ACCEL_OK;
}

int accelp_device_for(const char *what, int32_t device, int32_t device_index,
                     const accel_device_v1 **ret_dev, accel_err *err)
{
	const accel_device_v1 *vt;
	accel_err e = {0};
	int r = accelp_device_get(device, &vt, &e);
	if (r)
		return accelp_err_set(err, r, "%s: CUDA device %d needs the cuda device module, but %s",
		                     what, device_index, e.msg);
	if (device_index < 0 || (uint32_t)device_index >= cuda_slot.count)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: CUDA device %d does not exist "
		                     "(this machine has %u)", what, device_index, cuda_slot.count);
	*ret_dev = vt;
	return ACCEL_OK;
}

int accelp_device_fail(accel_err *err, int code, const char *what, const char *msg)
{
	return accelp_err_set(err, code, "%s: %s", what, msg && *msg ? msg : "device op failed");
}

const char *accelp_device_module_path(int32_t device, uint32_t *ret_count)
{
	const char *p = NULL;
	uint32_t n = 0;
	pthread_mutex_lock(&lock);
	if (device == ACCEL_DEVICE_CUDA && cuda_slot.vt) {
		p = cuda_slot.path;
		n = cuda_slot.count;
	}
	pthread_mutex_unlock(&lock);
	if (ret_count)
		*ret_count = n;
	return p;
}

void *accelp_device_stream(void)
{
	return tl_stream;
}

void *accelp_device_stream_swap(void *stream)
{
	void *prev = tl_stream;
	tl_stream = stream;
	return prev;
}

int accelp_device_use_stream(const accel_device_v1 *d, const char *what, accel_err *err)
{
	void *s = tl_stream;
	if (!d->set_stream) {
		if (!s)
			return ACCEL_OK;
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "%s: the %s device module (%s) is of "
		                     "device ABI 1.%u and cannot run on a caller's stream (%p); install "
		                     "the module of this accel (device ABI 1.%u), or use the default "
		                     "stream (accel_set_stream(ctx, NULL))", what, d->desc->name,
		                     cuda_slot.path, d->desc->abi_minor, s, ACCEL_DEVICE_ABI_MINOR);
	}
	char buf[512] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	int r = d->set_stream(s, &de);
	return r ? accelp_device_fail(err, r, what, buf) : ACCEL_OK;
}
