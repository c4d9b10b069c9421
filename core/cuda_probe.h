/* SPDX-License-Identifier: MIT */
/* core/cuda_probe.h: what the CUDA driver says about this machine (private
 * to libaccel and the CLI).
 *
 * The driver is opened with dlopen() at run time, so libaccel and `accel`
 * never link CUDA and work (reporting "not found") where it is missing.
 * One probe serves the loader's requirement checks (a context, `accel
 * plugins`, `accel config`) and what `accel env` prints, so both always
 * agree on whether this machine offers CUDA. */
#ifndef ACCEL_CORE_CUDA_PROBE_H
#define ACCEL_CORE_CUDA_PROBE_H

#include <stdint.h>

#define ACCELP_CUDA_MAX_GPUS 64

typedef struct accelp_cuda_gpu {
	char name[128];
	int cc;                   /* compute capability * 10 (90 for 9.0) */
	uint64_t mem_bytes;
} accelp_cuda_gpu;

typedef struct accelp_cuda_info {
	char driver_lib[64];      /* "" when libcuda.so.1 could not be opened  */
	char driver_error[256];   /* why, when it could not, or cuInit failed  */
	int driver_version;       /* 12040 for 12.4; 0 when unknown            */
	int n_gpus;               /* -1 when the driver could not tell          */
	accelp_cuda_gpu gpus[ACCELP_CUDA_MAX_GPUS];
	int best_cc;              /* highest compute capability found, 0 if none */
} accelp_cuda_info;

/* Fill `out`; never fails (what is missing is recorded as such).  The
 * driver stays loaded (unloading it is not supported). */
void accelp_cuda_probe(accelp_cuda_info *out);

/* What the probe offers plugins (loader requirements): ACCEL_REQ_CUDA and
 * the best compute capability when this build has CUDA and at least one
 * GPU answered; else 0 and 0. */
void accelp_cuda_offered(const accelp_cuda_info *info, uint32_t *ret_req_bits,
                         int32_t *ret_best_cc);

#endif
