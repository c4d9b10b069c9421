/* SPDX-License-Identifier: MIT */
/*
 * accel-fp8.h: the fp8 plugin's GEMM extension, "fp8.gemm" version 1
 * (installed; docs/fp8.md).
 *
 *     const accel_fp8_gemm_v1 *g =
 *             accel_plugin_extension(ctx, "fp8", ACCEL_FP8_GEMM_NAME,
 *                                    ACCEL_FP8_GEMM_VERSION);
 *
 * The table lives in the plugin's state: it is valid until the context is
 * freed, and every function takes it as `self`.  Call the functions from
 * the thread that calls accel's API (outside accel's calls: they are not
 * plugin slots), on the data of a parameter registered with compute_dtype
 * f8e4m3 (or f8e5m2) only between accel_unit_pre_forward() of its unit and
 * the end of that unit's backward.  Device operands are used on the
 * context's stream (accel_set_stream), without a host synchronisation.
 *
 * Layouts are row-major.  A GEMM is "TN": both operands hold K contiguous
 * values per row, D[m, n] = alpha * sum_k A[m, k] * B[n, k], so a linear
 * layer's forward Y = X . W^T is a GEMM of X [rows, in] and W [out, in].
 *
 * The delayed-scaling recipe tracks, for every fp8 parameter, three
 * operands: the layer's input X, its weight W and the gradient of its
 * output dY (ACCEL_FP8_OPERAND_*).  X and W are quantized to the
 * parameter's compute dtype, dY to E5M2 under fp8_format HYBRID (E4M3
 * under E4M3), each with its scale from the amax history of the steps
 * before; the amax of this step is recorded for the update at the end of
 * accel_step().
 */
#ifndef ACCEL_FP8_H
#define ACCEL_FP8_H

#include <stdint.h>

#include "accel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACCEL_FP8_GEMM_NAME    "fp8.gemm"
#define ACCEL_FP8_GEMM_VERSION 1

/* operands of a linear layer, in the order of its history columns */
#define ACCEL_FP8_OPERAND_X  0
#define ACCEL_FP8_OPERAND_W  1
#define ACCEL_FP8_OPERAND_DY 2
#define ACCEL_FP8_OPERANDS   3

/* accel_fp8_gemm_v1.path */
#define ACCEL_FP8_PATH_EMULATION 0  /* quantize, dequantize, f32 GEMM on the CPU */
#define ACCEL_FP8_PATH_CUBLASLT  1  /* FP8 tensor cores (compute capability >= 8.9) */

/* accel_fp8_gemm_args_v1.flags */
#define ACCEL_FP8_ACCUMULATE (1u << 0) /* D += alpha * A.B^T (else D = ...)        */
#define ACCEL_FP8_FAST_ACCUM (1u << 1) /* cuBLASLt: fast (less exact) accumulation */

/* One scaled GEMM of quantized operands.  Emulation computes, for each
 * D[i, j], acc = sum over k in order of (decode(A[i,k]) * a_scale_inv) *
 * (decode(B[j,k]) * b_scale_inv) in f32, then D = alpha * acc (+ D with
 * ACCEL_FP8_ACCUMULATE): exactly the f32 GEMM of the dequantized operands. */
typedef struct accel_fp8_gemm_args_v1 {
	uint32_t struct_size;      /* sizeof(accel_fp8_gemm_args_v1)              */
	uint32_t flags;            /* ACCEL_FP8_* bits                            */
	uint64_t m, n, k;
	accel_view a;              /* [m, k], dtype f8e4m3 or f8e5m2               */
	accel_view b;              /* [n, k], f8e4m3 or f8e5m2 (not both f8e5m2)   */
	accel_view d;              /* [m, n], f32, on the operands' device          */
	float a_scale_inv;         /* dequantization factors: 1 / the scale the    */
	float b_scale_inv;         /* operand was quantized with                  */
	float alpha;
	uint32_t reserved;         /* 0 */
} accel_fp8_gemm_args_v1;

typedef struct accel_fp8_gemm_v1 accel_fp8_gemm_v1;
struct accel_fp8_gemm_v1 {
	uint32_t struct_size;      /* sizeof(accel_fp8_gemm_v1) of the plugin      */
	uint32_t path;             /* ACCEL_FP8_PATH_* of CUDA operands in this
	                              process (CUBLASLT on a GPU of compute
	                              capability >= 8.9); host operands are
	                              always emulated                              */

	/* dst[i] = encode(src[i] * scale) (round to nearest even, saturating
	 * to +-max, NaN to 0x7f); src f32 (or bf16/f16 on the CPU), dst
	 * f8e4m3/f8e5m2 of the same numel on the same device.  *ret_amax
	 * (optional, host) receives max |src[i]|; device operands then wait for
	 * the stream. */
	int (*quantize)(const accel_fp8_gemm_v1 *self, const accel_view *dst,
	                const accel_view *src, float scale, float *ret_amax);
	/* dst[i] = decode(src[i]) * scale_inv; dst f32. */
	int (*dequantize)(const accel_fp8_gemm_v1 *self, const accel_view *dst,
	                  const accel_view *src, float scale_inv);
	/* The plain scaled GEMM above (tests, programs with their own recipe). */
	int (*gemm)(const accel_fp8_gemm_v1 *self, const accel_fp8_gemm_args_v1 *args);

	/* Bytes of workspace the linear functions of fp8 parameter `param`
	 * need for `rows` samples: the caller allocates it on the device of
	 * its activations (host memory for CPU ones) and passes the same
	 * workspace to the forward and the backward of those rows (forward
	 * keeps the quantized input there for backward). */
	int (*linear_workspace)(const accel_fp8_gemm_v1 *self, uint32_t param, uint64_t rows,
	                        uint64_t *ret_bytes);
	/* y[rows, out] = x[rows, in] . W^T, W = parameter `param` ([out, in],
	 * quantized in its unit's pre_forward).  x, y f32.  Records amax(x). */
	int (*linear_forward)(const accel_fp8_gemm_v1 *self, uint32_t param, uint64_t rows,
	                      const accel_view *x, const accel_view *y, void *workspace);
	/* After linear_forward on the same workspace: dx[rows, in] = dy . W
	 * (dx optional: NULL for the first layer) and dw[out, in] (+)= dy^T . x
	 * (accumulate 1: add, 0: overwrite).  dy, dx, dw f32.  Records amax(dy). */
	int (*linear_backward)(const accel_fp8_gemm_v1 *self, uint32_t param, uint64_t rows,
	                       const accel_view *dy, const accel_view *dx, const accel_view *dw,
	                       uint32_t accumulate, void *workspace);
	/* The scales parameter `param` quantizes with this step
	 * (ACCEL_FP8_OPERANDS values, host). */
	int (*scales)(const accel_fp8_gemm_v1 *self, uint32_t param, float *ret_scale);
};

#ifdef __cplusplus
}
#endif

#endif
