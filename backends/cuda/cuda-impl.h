/* SPDX-License-Identifier: MIT */
/* backends/cuda/cuda-impl.h: between the module's C side (cuda_device.c)
 * and its kernels (cuda_kernels.cu).  Launchers enqueue on the calling
 * thread's stream (accel_cuda_set_stream; the legacy default stream until
 * a thread sets one) and return a cudaError_t as int. */
#ifndef ACCEL_CUDA_IMPL_H
#define ACCEL_CUDA_IMPL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ACCEL_CUDA_HIDDEN __attribute__((visibility("hidden")))
#else
#define ACCEL_CUDA_HIDDEN
#endif

/* Partial sums of a reduction: one 8-byte slot per block plus the result. */
#define ACCEL_CUDA_SCRATCH_SLOTS 1024

/* The f32 constants of one update (fields as backends/common/optim-consts.h). */
typedef struct accel_cuda_adamw_k {
	float decay, b1, omb1, b2, omb2, bc2s, eps, nstep, gs;
} accel_cuda_adamw_k;

typedef struct accel_cuda_sgd_k {
	float wd, mom, omdamp, nlr, gs;
	int32_t has_wd, nesterov, first;
} accel_cuda_sgd_k;

typedef struct accel_cuda_range {
	float *p;
	const void *g;
	float *s0, *s1;   /* NULL where the optimizer keeps no such state */
	uint64_t n;
} accel_cuda_range;

typedef struct accel_cuda_opt {
	int32_t adamw;          /* 1: AdamW with adamw_k, 0: SGD with sgd_k */
	uint32_t grad_dtype;    /* ACCEL_DTYPE_F32/_F16/_BF16 */
	accel_cuda_adamw_k adamw_k;
	accel_cuda_sgd_k sgd_k;
	const accel_cuda_range *ranges;
	uint32_t n;
	const double *gs_dev;   /* non-NULL: the factor, read on the device (device ABI 1.2) */
} accel_cuda_opt;

ACCEL_CUDA_HIDDEN int accel_cuda_launch_convert(uint32_t ddt, void *dst, uint32_t sdt,
                                                const void *src, uint64_t n);
/* bits: the element's bit pattern, elsize 2, 4 or 8 bytes. */
ACCEL_CUDA_HIDDEN int accel_cuda_launch_fill(void *dst, uint32_t elsize, uint64_t bits,
                                             uint64_t n);
ACCEL_CUDA_HIDDEN int accel_cuda_launch_scale(uint32_t dt, void *x, double alpha, uint64_t n);
ACCEL_CUDA_HIDDEN int accel_cuda_launch_axpy(uint32_t ydt, void *y, double alpha, uint32_t xdt,
                                             const void *x, uint64_t n);
ACCEL_CUDA_HIDDEN int accel_cuda_launch_sumsq(uint32_t dt, const void *x, uint64_t n,
                                              void *scratch, unsigned *ret_slot);
ACCEL_CUDA_HIDDEN int accel_cuda_launch_nonfinite(uint32_t dt, const void *x, uint64_t n,
                                                  void *scratch, unsigned *ret_slot);
/* stats[0] += the f64 sum of squares of x (sumsq's kernels, their partial
 * sums in stats[4..]); then the clipping factors from stats[0]
 * (accel_device_v1.clip_scale). */
ACCEL_CUDA_HIDDEN int accel_cuda_launch_sumsq_acc(uint32_t dt, const void *x, uint64_t n,
                                                  double *stats);
ACCEL_CUDA_HIDDEN int accel_cuda_launch_clip_scale(double *stats, double max_norm,
                                                   double unscale);
ACCEL_CUDA_HIDDEN int accel_cuda_launch_optim(const accel_cuda_opt *o);
/* The calling thread's stream for every launcher (a cudaStream_t; NULL:
 * the legacy default stream), and the one set now. */
ACCEL_CUDA_HIDDEN void accel_cuda_set_stream(void *stream);
ACCEL_CUDA_HIDDEN void *accel_cuda_get_stream(void);
/* Blocks of the grid-stride kernels (from the multiprocessor count). */
ACCEL_CUDA_HIDDEN void accel_cuda_set_grid_cap(int blocks);
/* on != 0: every launcher waits for its kernels and returns their error
 * (CUDA_LAUNCH_BLOCKING=1 in the environment at init; a debug mode). */
ACCEL_CUDA_HIDDEN void accel_cuda_set_sync(int on);

#ifdef __cplusplus
}
#endif

#endif
