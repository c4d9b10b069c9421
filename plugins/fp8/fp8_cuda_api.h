/* SPDX-License-Identifier: MIT */
/*
 * plugins/fp8/fp8_cuda_api.h: what fp8.so asks of its CUDA part,
 * fp8-cuda.so (plugins/fp8/fp8-cuda), which it dlopen()s only when a CUDA
 * device is present, so fp8.so itself needs no CUDA library to load.
 * fp8-cuda.so exports one symbol, fp8_cuda_entry (FP8_CUDA_ENTRY), which
 * returns this table.  Internal to the plugin: both files are built and
 * installed together (fp8-cuda/fp8-cuda.so next to fp8.so).
 *
 * Every function returns 0 or writes a message into err[cap] and returns
 * nonzero.  Work is enqueued on `stream` (a cudaStream_t, NULL = legacy).
 */
#ifndef ACCEL_FP8_CUDA_API_H
#define ACCEL_FP8_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#define FP8_CUDA_ENTRY "fp8_cuda_entry"
#define FP8_CUDA_API_VERSION 2

typedef struct fp8_cuda_ctx fp8_cuda_ctx;

typedef struct fp8_cuda_api {
	uint32_t struct_size;
	uint32_t version;            /* FP8_CUDA_API_VERSION */
	/* Compute capability of `device` (major*10+minor) and whether cuBLASLt
	 * runs FP8 matmuls there (a handle could be made). */
	int (*probe)(int device, int *ret_cc, char *err, size_t cap);
	/* A cuBLASLt handle, its workspace and a device float for amax_scratch(),
	 * on `device`. */
	int (*ctx_new)(int device, fp8_cuda_ctx **ret, char *err, size_t cap);
	void (*ctx_free)(fp8_cuda_ctx *c);
	/* A device float of the context for one amax (quantize's amax_dev). */
	float *(*amax_scratch)(fp8_cuda_ctx *c);
	/* q[i] = encode(x[i] * scale) (and qt = the transpose of x [rows, cols]
	 * when qt != NULL, [cols, qt_ld] with qt_ld >= rows, the columns past
	 * rows zero: a GEMM over rows as k needs k a multiple of 16); amax_dev
	 * (optional, device float) = max(*amax_dev, max |x|).  src_dtype:
	 * ACCEL_DTYPE_F32 or ACCEL_DTYPE_BF16. */
	int (*quantize)(fp8_cuda_ctx *c, void *stream, uint32_t fmt, uint32_t src_dtype,
	                const void *x, uint64_t rows, uint64_t cols, float scale, uint8_t *q,
	                uint8_t *qt, uint64_t qt_ld, float *amax_dev, char *err, size_t cap);
	int (*dequantize)(fp8_cuda_ctx *c, void *stream, uint32_t fmt, const uint8_t *q,
	                  uint64_t n, float scale_inv, float *y, char *err, size_t cap);
	/* D[m,n] (row-major f32) = alpha * A[m,k] . B[n,k]^T (+ D when accumulate),
	 * A in afmt, B in bfmt, dequantized by a_scale_inv and b_scale_inv. */
	int (*gemm)(fp8_cuda_ctx *c, void *stream, uint64_t m, uint64_t n, uint64_t k,
	            const uint8_t *a, uint32_t afmt, float a_scale_inv, const uint8_t *b,
	            uint32_t bfmt, float b_scale_inv, float alpha, float *d, int accumulate,
	            int fast_accum, char *err, size_t cap);
	/* Copies on the stream; download waits for it. */
	int (*upload)(void *stream, void *dst_dev, const void *src, size_t bytes, char *err,
	              size_t cap);
	int (*download)(void *stream, void *dst, const void *src_dev, size_t bytes, char *err,
	                size_t cap);
	/* The device codec on host data (tests): out[i] = encode(in[i] * scale). */
	int (*encode_host)(int device, uint32_t fmt, const float *in, size_t n, float scale,
	                   uint8_t *out, char *err, size_t cap);
} fp8_cuda_api;

typedef const fp8_cuda_api *(*fp8_cuda_entry_fn)(void);

#endif
