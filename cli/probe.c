/* SPDX-License-Identifier: MIT */
/* cli/probe.c: run-time probes of CUDA, NCCL and MPI, and the loader setup
 * shared by `accel plugins` and `accel env`.
 *
 * The libraries are opened with dlopen() so that one `accel` binary works
 * (and reports "not found") on machines without them.  Nothing opened here
 * is closed: some of these libraries do not survive being unloaded, and
 * the CLI exits soon anyway. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel-build-config.h"
#include "config.h"
#include "ctx-impl.h"
#include "probe.h"

typedef int (*cu_int_fn)(int *);
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_errstr_fn)(int, const char **);
typedef int (*mpi_ver_fn)(char *, int *);

/* CUDA driver attribute numbers (cuda.h). */
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

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

int accel_cli_cudart_open(accel_cli_cudart *rt, char *why, size_t cap)
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

static void probe_runtime(accel_cli_cuda *out)
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

static void probe_nccl(accel_cli_cuda *out)
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

void accel_cli_probe_cuda(accel_cli_cuda *out)
{
	memset(out, 0, sizeof(*out));
	out->n_gpus = -1;
	const char *names[] = {"libcuda.so.1", "libcuda.so", NULL};
	char lib[64];
	dlerror();
	void *h = open_first(names, lib, sizeof(lib), out->driver_error,
	                     sizeof(out->driver_error));
	if (h) {
		out->driver_error[0] = '\0';
		snprintf(out->driver_lib, sizeof(out->driver_lib), "%s", lib);
		cu_int_fn drv = FN(cu_int_fn, h, "cuDriverGetVersion");
		cu_init_fn init = FN(cu_init_fn, h, "cuInit");
		cu_int_fn count = FN(cu_int_fn, h, "cuDeviceGetCount");
		cu_get_fn get = FN(cu_get_fn, h, "cuDeviceGet");
		cu_name_fn name = FN(cu_name_fn, h, "cuDeviceGetName");
		cu_attr_fn attr = FN(cu_attr_fn, h, "cuDeviceGetAttribute");
		cu_mem_fn mem = FN(cu_mem_fn, h, "cuDeviceTotalMem_v2");
		cu_errstr_fn errstr = FN(cu_errstr_fn, h, "cuGetErrorString");
		if (drv)
			drv(&out->driver_version);
		int r = init ? init(0) : -1;
		int n = 0;
		if (r != 0) {
			const char *s = NULL;
			if (errstr && r > 0)
				errstr(r, &s);
			snprintf(out->driver_error, sizeof(out->driver_error), "cuInit failed: %s (%d)",
			         s ? s : "missing symbol", r);
			/* "no CUDA-capable device" is an answer: zero GPUs. */
			if (r == 100)
				out->n_gpus = 0;
		} else if (count && count(&n) == 0) {
			out->n_gpus = n < ACCEL_CLI_MAX_GPUS ? n : ACCEL_CLI_MAX_GPUS;
			for (int i = 0; i < out->n_gpus; i++) {
				accel_cli_gpu *g = &out->gpus[i];
				int dev = 0, ma = 0, mi = 0;
				size_t bytes = 0;
				if (!get || get(&dev, i) != 0)
					continue;
				if (name)
					name(g->name, (int)sizeof(g->name), dev);
				if (attr) {
					attr(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
					attr(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
				}
				if (mem)
					mem(&bytes, dev);
				g->cc = ma * 10 + mi;
				g->mem_bytes = bytes;
				if (g->cc > out->best_cc)
					out->best_cc = g->cc;
			}
		}
	}
	probe_runtime(out);
	probe_nccl(out);
}

int accel_cli_probe_mpi(char *buf, size_t cap)
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

static int add_config_dirs(accel_loader *ld, const accel_cli_dirs *dirs, char *config_error,
                           const char **ret_file, accel_err *err)
{
	accel_err cerr;
	accel_err_clear(&cerr);
	accel_config *cfg = NULL;
	const char *path = dirs ? dirs->config_path : NULL;
	const char *from = NULL;
	int r = ACCEL_OK;
	if (!path)
		path = accel_config_find_file(&from);
	if (ret_file)
		*ret_file = path;
	if ((r = accel_config_new(&cfg, &cerr)))
		goto fail;
	if (path && (r = accel_config_load_file(cfg, path, &cerr)))
		goto fail;
	if ((r = accel_config_load_env(cfg, NULL, &cerr)))
		goto fail;
	const char *dir = NULL;
	for (uint32_t i = 0;; i++) {
		r = accel_config_peek_strlist(cfg, "plugin_dirs", i, &dir);
		if (r == ACCEL_ERR_NOT_FOUND) {
			r = ACCEL_OK;
			break;
		}
		if (r) {
			const char *src = accel_config_source(cfg, "plugin_dirs");
			accel_err_set(&cerr, ACCEL_ERR_CONFIG,
			              "plugin_dirs%s%s%s must be a list of directory names",
			              src ? " (" : "", src ? src : "", src ? ")" : "");
			goto fail;
		}
		if ((r = accel_loader_add_dir(ld, dir, "plugin_dirs", err)))
			break;
	}
	accel_config_free(cfg);
	return r;
fail:
	if (config_error)
		snprintf(config_error, ACCEL_ERRMSG_MAX, "%s", cerr.msg[0] ? cerr.msg
		                                                  : accel_status_str(r));
	accel_config_free(cfg);
	return r == ACCEL_ERR_NOMEM ? accel_err_set(err, r, "out of memory") : ACCEL_OK;
}

int accel_cli_open_loader(const accel_cli_dirs *dirs, const accel_cli_cuda *cuda,
                          accel_loader **ret_loader, char *ret_config_error,
                          const char **ret_config_file, accel_err *err)
{
	accel_loader *ld = NULL;
	int r;
	if (ret_config_error)
		ret_config_error[0] = '\0';
	if (!ret_loader)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "ret_loader is NULL");
	if ((r = accel_loader_new(accel_host_table(), &ld, err)))
		goto fail;
	for (uint32_t i = 0; dirs && i < dirs->n_extra; i++)
		if ((r = accel_loader_add_dir(ld, dirs->extra[i], "--plugin-dir", err)))
			goto fail;
	if ((r = add_config_dirs(ld, dirs, ret_config_error, ret_config_file, err)))
		goto fail;
	if ((r = accel_loader_add_default_dirs(ld, err)))
		goto fail;
	/* CUDA: a CUDA build and a GPU that answers.  NCCL and MPI follow from
	 * their comm backends, which the loader checks itself. */
	if (ACCEL_HAVE_CUDA && cuda && cuda->n_gpus > 0)
		accel_loader_set_available(ld, ACCEL_REQ_CUDA, cuda->best_cc);
	else
		accel_loader_set_available(ld, 0, 0);
	if ((r = accel_loader_scan(ld, err)))
		goto fail;
	*ret_loader = ld;
	return ACCEL_OK;
fail:
	accel_loader_free(ld);
	return r;
}
