/* SPDX-License-Identifier: MIT */
/* cli/probe.h: what `accel env` and `accel bench` need to find out about
 * this machine: the CUDA runtime, NCCL and MPI libraries looked up at run
 * time with dlopen() (the CLI has no link-time dependency on them).  The
 * CUDA driver and the plugin loader are set up by core (core/setup.h), the
 * way a context sets them up. */
#ifndef ACCEL_CLI_PROBE_H
#define ACCEL_CLI_PROBE_H

#include <stddef.h>
#include <stdint.h>

/* Libraries `accel env` reports beside the CUDA driver (core/cuda_probe.h). */
typedef struct accel_cli_libs {
	char runtime_lib[64];     /* the libcudart that answered, "" if none    */
	int runtime_version;
	char nccl_lib[64];        /* "" when libnccl.so.2 could not be opened   */
	int nccl_version;         /* NCCL_VERSION_CODE                          */
} accel_cli_libs;

/* Fill `out`; never fails (what is missing is recorded as such). */
void accelp_cli_probe_libs(accel_cli_libs *out);

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
int accelp_cli_cudart_open(accel_cli_cudart *rt, char *why, size_t cap);

/* MPI library version through MPI_Get_library_version (callable before
 * MPI_Init).  Writes the first line into buf and returns 0, or -1 with a
 * reason in buf. */
int accelp_cli_probe_mpi(char *buf, size_t cap);

#endif
