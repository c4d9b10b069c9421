/* SPDX-License-Identifier: MIT */
/* cli/probe.h: what `accel plugins` and `accel env` need to find out about
 * this machine and its modules: CUDA/NCCL/MPI libraries looked up at run
 * time with dlopen() (the CLI has no link-time dependency on them), and
 * a plugin loader set up the way a context would set it up. */
#ifndef ACCEL_CLI_PROBE_H
#define ACCEL_CLI_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "loader.h"

#define ACCEL_CLI_MAX_GPUS 64

typedef struct accel_cli_gpu {
	char name[128];
	int cc;                   /* compute capability * 10 (90 for 9.0) */
	uint64_t mem_bytes;
} accel_cli_gpu;

typedef struct accel_cli_cuda {
	char driver_lib[64];      /* "" when libcuda.so.1 could not be opened  */
	char driver_error[256];   /* why, when it could not, or cuInit failed  */
	int driver_version;       /* 12040 for 12.4; 0 when unknown            */
	char runtime_lib[64];     /* the libcudart that answered, "" if none   */
	int runtime_version;
	int n_gpus;               /* -1 when the driver could not tell          */
	accel_cli_gpu gpus[ACCEL_CLI_MAX_GPUS];
	int best_cc;              /* highest compute capability found, 0 if none */
	char nccl_lib[64];        /* "" when libnccl.so.2 could not be opened   */
	int nccl_version;         /* NCCL_VERSION_CODE                          */
} accel_cli_cuda;

/* Fill `out`; never fails (what is missing is recorded as such). */
void accel_cli_probe_cuda(accel_cli_cuda *out);

/* The two CUDA runtime calls `accel bench comm --device cuda` needs:
 * cudaSetDevice, and cudaMemcpy (kind 4: cudaMemcpyDefault, which infers
 * the direction from the pointers).  Both return a cudaError_t, which
 * cudaGetErrorName names. */
typedef int (*accel_cli_memcpy_fn)(void *dst, const void *src, size_t bytes, int kind);
typedef int (*accel_cli_set_device_fn)(int device);
typedef const char *(*accel_cli_error_name_fn)(int error);
#define ACCEL_CLI_MEMCPY_DEFAULT 4
typedef struct accel_cli_cudart {
	accel_cli_memcpy_fn memcpy;
	accel_cli_set_device_fn set_device;
	accel_cli_error_name_fn error_name;   /* cudaGetErrorName */
} accel_cli_cudart;
/* Fill rt from the CUDA runtime library; 0, or -1 with the reason in why. */
int accel_cli_cudart_open(accel_cli_cudart *rt, char *why, size_t cap);

/* MPI library version through MPI_Get_library_version (callable before
 * MPI_Init).  Writes the first line into buf and returns 0, or -1 with a
 * reason in buf. */
int accel_cli_probe_mpi(char *buf, size_t cap);

/* Where plugin directories come from. */
typedef struct accel_cli_dirs {
	const char **extra;       /* --plugin-dir values, searched first        */
	uint32_t n_extra;
	const char *config_path;  /* --config; NULL: the usual lookup            */
} accel_cli_dirs;

/* A scanned loader on the host table: --plugin-dir directories, then the
 * config's plugin_dirs, then ACCEL_PLUGIN_PATH and the install directory;
 * requirements checked against this machine (CUDA: the build has CUDA and
 * a GPU answers; NCCL/MPI: their comm backends loaded).  On a config
 * problem the loader is still returned (without the config's
 * directories) and *ret_config_error holds the message (caller's buffer of
 * ACCEL_ERRMSG_MAX), so callers decide whether that is fatal.  Fails only
 * for out-of-memory and bad arguments (message in err). */
int accel_cli_open_loader(const accel_cli_dirs *dirs, const accel_cli_cuda *cuda,
                          accel_loader **ret_loader, char *ret_config_error,
                          const char **ret_config_file, accel_err *err);

#endif
