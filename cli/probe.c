/* SPDX-License-Identifier: MIT */
/* cli/probe.c: run-time probes of the CUDA runtime, NCCL and MPI libraries
 * for `accel env` and `accel bench` (the CUDA driver, which decides what
 * plugins are offered, is probed by core/cuda_probe.c).
 *
 * The libraries are opened with dlopen() so that one `accel` binary works
 * (and reports "not found") on machines without them.  Nothing opened here
 * is closed: some of these libraries do not survive being unloaded, and
 * the CLI exits soon anyway. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

typedef int (*cu_int_fn)(int *);
typedef int (*mpi_ver_fn)(char *, int *);

static void *sym(void *h, const char *name)
{
	return h ? dlsym(h, name) : NULL;
}

/* dlsym() returns an object pointer; POSIX lets it hold functions. */
#define FN(type, h, name) ((type)(uintptr_t)sym((h), (name)))

/* First library of `names` that opens; its name into `ret_name`. */
static void *open_first(const char *const *names, char *ret_name, size_t cap, char *why,
                        size_t why_cap)
{
	for (; *names; names++) {
		void *h = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
		if (h) {
			snprintf(ret_name, cap, "%s", *names);
			return h;
		}
		if (why && why_cap && !why[0]) {
			const char *e = dlerror();
			snprintf(why, why_cap, "%s", e ? e : "not found");
		}
	}
	return NULL;
}

/* The CUDA runtime library, its name into `lib`. */
static void *open_cudart(char *lib, size_t cap, char *why, size_t why_cap)
{
	/* The unversioned name exists only with the development files; the
	 * toolkit's own directory is not on the loader path by default. */
	static char paths[4][256];
	const char *home = getenv("CUDA_HOME");
	if (!home || !*home)
		home = getenv("CUDA_PATH");
	if (!home || !*home)
		home = "/usr/local/cuda";
	snprintf(paths[0], sizeof(paths[0]), "%s/lib64/libcudart.so", home);
	const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
	                       "libcudart.so.11.0", paths[0], NULL};
	return open_first(names, lib, cap, why, why_cap);
}

int accelp_cli_cudart_open(accel_cli_cudart *rt, char *why, size_t cap)
{
	char lib[64];
	if (cap)
		why[0] = '\0';
	void *h = open_cudart(lib, sizeof(lib), why, cap);
	rt->memcpy = FN(accel_cli_memcpy_fn, h, "cudaMemcpy");
	rt->set_device = FN(accel_cli_set_device_fn, h, "cudaSetDevice");
	rt->error_name = FN(accel_cli_error_name_fn, h, "cudaGetErrorName");
	if (h && (!rt->memcpy || !rt->set_device || !rt->error_name))
		snprintf(why, cap, "%s lacks cudaMemcpy, cudaSetDevice or cudaGetErrorName", lib);
	return rt->memcpy && rt->set_device && rt->error_name ? 0 : -1;
}

static void probe_runtime(accel_cli_libs *out)
{
	char lib[64];
	void *h = open_cudart(lib, sizeof(lib), NULL, 0);
	cu_int_fn ver = FN(cu_int_fn, h, "cudaRuntimeGetVersion");
	int v = 0;
	if (ver && ver(&v) == 0) {
		snprintf(out->runtime_lib, sizeof(out->runtime_lib), "%s",
		         strrchr(lib, '/') ? strrchr(lib, '/') + 1 : lib);
		out->runtime_version = v;
	}
}

static void probe_nccl(accel_cli_libs *out)
{
	const char *names[] = {"libnccl.so.2", "libnccl.so", NULL};
	char lib[64];
	void *h = open_first(names, lib, sizeof(lib), NULL, 0);
	cu_int_fn ver = FN(cu_int_fn, h, "ncclGetVersion");
	int v = 0;
	if (ver && ver(&v) == 0) {
		snprintf(out->nccl_lib, sizeof(out->nccl_lib), "%s", lib);
		out->nccl_version = v;
	}
}

void accelp_cli_probe_libs(accel_cli_libs *out)
{
	memset(out, 0, sizeof(*out));
	probe_runtime(out);
	probe_nccl(out);
}

int accelp_cli_probe_mpi(char *buf, size_t cap)
{
	const char *names[] = {"libmpi.so.40", "libmpi.so.12", "libmpi.so", NULL};
	char lib[64], why[256] = "";
	dlerror();
	void *h = open_first(names, lib, sizeof(lib), why, sizeof(why));
	if (!h) {
		snprintf(buf, cap, "%s", why[0] ? why : "not found");
		return -1;
	}
	mpi_ver_fn ver = FN(mpi_ver_fn, h, "MPI_Get_library_version");
	if (!ver) {
		snprintf(buf, cap, "%s has no MPI_Get_library_version (MPI < 3.0)", lib);
		return -1;
	}
	/* MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI, 8192 in MPICH. */
	char *v = calloc(1, 8192);
	int len = 0;
	if (!v) {
		snprintf(buf, cap, "out of memory");
		return -1;
	}
	if (ver(v, &len) != 0) {
		snprintf(buf, cap, "%s: MPI_Get_library_version failed", lib);
		free(v);
		return -1;
	}
	v[8191] = '\0';
	char *nl = strchr(v, '\n');
	if (nl)
		*nl = '\0';
	/* Trailing separators some implementations leave. */
	size_t n = strlen(v);
	while (n && (v[n - 1] == ' ' || v[n - 1] == ',' || v[n - 1] == '\r'))
		v[--n] = '\0';
	snprintf(buf, cap, "%s (%s)", v, lib);
	free(v);
	return 0;
}
