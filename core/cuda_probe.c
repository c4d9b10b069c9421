/* SPDX-License-Identifier: MIT */
/* core/cuda_probe.c: the CUDA driver, asked at run time through dlopen(). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "accel-build-config.h"
#include "accel/plugin.h"
#include "cuda_probe.h"

typedef int (*cu_int_fn)(int *);
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_errstr_fn)(int, const char **);

/* CUDA driver constants (cuda.h). */
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CUDA_ERROR_NO_DEVICE 100

/* dlsym() returns an object pointer; POSIX lets it hold functions. */
#define FN(type, h, name) ((type)(uintptr_t)dlsym((h), (name)))

typedef struct driver {
	cu_init_fn init;
	cu_int_fn count;
	cu_get_fn get;
	cu_name_fn name;
	cu_attr_fn attr;
	cu_mem_fn mem;
	cu_errstr_fn errstr;
} driver;

static void probe_gpus(const driver *d, accelp_cuda_info *out, int n)
{
	out->n_gpus = n < ACCELP_CUDA_MAX_GPUS ? n : ACCELP_CUDA_MAX_GPUS;
	for (int i = 0; i < out->n_gpus; i++) {
		accelp_cuda_gpu *g = &out->gpus[i];
		int dev = 0, ma = 0, mi = 0;
		size_t bytes = 0;
		if (!d->get || d->get(&dev, i) != 0)
			continue;
		if (d->name)
			d->name(g->name, (int)sizeof(g->name), dev);
		if (d->attr) {
			d->attr(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
			d->attr(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
		}
		if (d->mem)
			d->mem(&bytes, dev);
		g->cc = ma * 10 + mi;
		g->mem_bytes = bytes;
		if (g->cc > out->best_cc)
			out->best_cc = g->cc;
	}
}

void accelp_cuda_probe(accelp_cuda_info *out)
{
	static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
	void *h = NULL;
	memset(out, 0, sizeof(*out));
	out->n_gpus = -1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++) {
		dlerror();
		if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) {
			snprintf(out->driver_lib, sizeof(out->driver_lib), "%s", names[i]);
		} else if (!out->driver_error[0]) {
			const char *e = dlerror();
			snprintf(out->driver_error, sizeof(out->driver_error), "%s",
			         e ? e : "not found");
		}
	}
	if (!h)
		return;
	out->driver_error[0] = '\0';
	driver d = {
		.init = FN(cu_init_fn, h, "cuInit"),
		.count = FN(cu_int_fn, h, "cuDeviceGetCount"),
		.get = FN(cu_get_fn, h, "cuDeviceGet"),
		.name = FN(cu_name_fn, h, "cuDeviceGetName"),
		.attr = FN(cu_attr_fn, h, "cuDeviceGetAttribute"),
		.mem = FN(cu_mem_fn, h, "cuDeviceTotalMem_v2"),
		.errstr = FN(cu_errstr_fn, h, "cuGetErrorString"),
	};
	cu_int_fn version = FN(cu_int_fn, h, "cuDriverGetVersion");
	if (version)
		version(&out->driver_version);
	int r = d.init ? d.init(0) : -1, n = 0;
	if (r != 0) {
		const char *s = NULL;
		if (d.errstr && r > 0)
			d.errstr(r, &s);
		snprintf(out->driver_error, sizeof(out->driver_error), "cuInit failed: %s (%d)",
		         s ? s : "missing symbol", r);
		/* "no CUDA-capable device" is an answer: zero GPUs. */
		if (r == CUDA_ERROR_NO_DEVICE)
			out->n_gpus = 0;
	} else if (d.count && d.count(&n) == 0) {
		probe_gpus(&d, out, n);
	}
}

void accelp_cuda_offered(const accelp_cuda_info *info, uint32_t *ret_req_bits,
                         int32_t *ret_best_cc)
{
	int yes = ACCEL_HAVE_CUDA && info && info->n_gpus > 0;
	*ret_req_bits = yes ? ACCEL_REQ_CUDA : 0;
	*ret_best_cc = yes ? info->best_cc : 0;
}
