/* SPDX-License-Identifier: MIT */
/*
 * examples/common/ex_cuda.cuh: pieces the examples' CUDA files share
 * (train_mlp/mlp_cuda.cu, gpt2/gpt2_cuda.cu): error checks, element access
 * of f32 / bf16 / f16 buffers with f32 arithmetic, a launch per working
 * dtype, and grid sizes.  Header-only; include it from one .cu per object.
 *
 * EX_CU, EX_LT and EX_LAUNCHED return fail(g, fmt, ...) from the calling
 * function: the including file defines `static int fail(X *g, const char
 * *fmt, ...)` for its own work-space type X first.
 */
#ifndef EXAMPLES_COMMON_EX_CUDA_CUH
#define EXAMPLES_COMMON_EX_CUDA_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

/* working dtypes: the same values as MLP_F32/_BF16/_F16 and
 * GPT2_CUDA_F32/_BF16/_F16 */
#define EX_F32 0
#define EX_BF16 1
#define EX_F16 2

#define EX_CU(g, call)                                                                  \
	do {                                                                                \
		cudaError_t e_ = (call);                                                        \
		if (e_ != cudaSuccess)                                                          \
			return fail(g, "%s: %s (%s)", #call, cudaGetErrorString(e_),                \
			            cudaGetErrorName(e_));                                          \
	} while (0)

#define EX_LT(g, call)                                                                  \
	do {                                                                                \
		cublasStatus_t s_ = (call);                                                     \
		if (s_ != CUBLAS_STATUS_SUCCESS)                                                \
			return fail(g, "%s: cuBLASLt status %d", #call, (int)s_);                   \
	} while (0)

/* A launch's error, checked without waiting. */
#define EX_LAUNCHED(g, what)                                                            \
	do {                                                                                \
		cudaError_t e_ = cudaGetLastError();                                            \
		if (e_ != cudaSuccess)                                                          \
			return fail(g, "%s: %s", what, cudaGetErrorString(e_));                     \
	} while (0)

/* ---- element access: f32 arithmetic on any of the three dtypes ------------------------- */

__device__ __forceinline__ float ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p, size_t i)
{
	return __bfloat162float(p[i]);
}
__device__ __forceinline__ float ld(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__nv_bfloat16 *p, size_t i, float v)
{
	p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void st(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }

/* KERNEL<T><<<grid, block, 0, stream>>>(ARGS) for the working dtype `prec`
 * (EX_F32, EX_BF16, EX_F16), where ARGS may name T. */
#define EX_LAUNCH_T(prec, stream, kernel, grid, block, ...)                             \
	do {                                                                            \
		if ((prec) == EX_BF16) {                                                    \
			typedef __nv_bfloat16 T;                                                \
			kernel<T><<<grid, block, 0, stream>>>(__VA_ARGS__);                     \
		} else if ((prec) == EX_F16) {                                              \
			typedef __half T;                                                       \
			kernel<T><<<grid, block, 0, stream>>>(__VA_ARGS__);                     \
		} else {                                                                    \
			typedef float T;                                                        \
			kernel<T><<<grid, block, 0, stream>>>(__VA_ARGS__);                     \
		}                                                                           \
	} while (0)

static inline const char *ex_dtype_name(int prec)
{
	return prec == EX_BF16 ? "bf16" : prec == EX_F16 ? "f16" : "f32";
}

static inline cudaDataType_t ex_cuda_type(int prec)
{
	return prec == EX_BF16 ? CUDA_R_16BF : prec == EX_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Blocks of `threads` for n items in a grid-stride loop (at most 65535 x 16). */
static inline unsigned ex_blocks_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;
	return (unsigned)(b < 65535u * 16u ? (b ? b : 1) : 65535u * 16u);
}

/* The heuristic's best algorithm for desc (D = C's layout) with at most
 * `workspace` bytes and operands aligned to `align` bytes only (gradients
 * sit in accel's buckets at 64-byte offsets, attention heads hd elements
 * apart: the algorithm must not assume cudaMalloc's 256).  *ret_found is 0
 * when cuBLASLt has no algorithm for it (the caller falls back); the
 * status is that of creating the preference. */
static inline cublasStatus_t ex_lt_pick(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                                        cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                        cublasLtMatrixLayout_t lc, uint64_t workspace,
                                        uint32_t align, cublasLtMatmulAlgo_t *ret_algo,
                                        int *ret_found)
{
	*ret_found = 0;
	cublasLtMatmulPreference_t pref;
	cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	                                     &workspace, sizeof(workspace));
	const cublasLtMatmulPreferenceAttributes_t aligns[] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++)
		cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof(align));
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	s = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &res, &found);
	cublasLtMatmulPreferenceDestroy(pref);
	if (s == CUBLAS_STATUS_SUCCESS && found >= 1) {
		*ret_algo = res.algo;
		*ret_found = 1;
	}
	return CUBLAS_STATUS_SUCCESS;
}

/* The number of visible GPUs; 0 when the runtime cannot tell (no driver). */
static inline int ex_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

/* Switch work space g (fields device, stream, own_stream) to a new
 * non-blocking stream of its own (own) or to the default stream, after the
 * old stream's work (the new one is not ordered after it).  Errors through
 * the including file's fail(g, ...). */
template <typename G>
static int ex_use_stream(G *g, int own)
{
	cudaStream_t s = 0;
	EX_CU(g, cudaSetDevice(g->device));
	if (own)
		EX_CU(g, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaError_t e = g->stream || own ? cudaDeviceSynchronize() : cudaSuccess;
	if (e != cudaSuccess) {
		if (own)
			cudaStreamDestroy(s);
		return fail(g, "cudaDeviceSynchronize: %s (%s)", cudaGetErrorString(e),
		            cudaGetErrorName(e));
	}
	if (g->own_stream)
		cudaStreamDestroy(g->stream);
	g->stream = s;
	g->own_stream = own;
	return 0;
}

#endif
