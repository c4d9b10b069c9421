/* SPDX-License-Identifier: MIT */
/*
 * plugins/fp8/fp8-cuda/fp8_cuda.cu: fp8-cuda.so, the CUDA part of the fp8
 * plugin (fp8_cuda_api.h): quantize kernels (with amax), dequantize, and
 * the cuBLASLt FP8 matmul.  fp8.so dlopen()s it only when a device of
 * compute capability >= 8.9 is present, so fp8.so loads without CUDA.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "accel/types.h"
#include "fp8_cuda_api.h"
}

#define WORKSPACE_BYTES (32u << 20)  /* cuBLASLt's recommended size on Hopper */

/* A GEMM shape's cuBLASLt objects, made once (gemm()). */
typedef struct gemm_plan {
	uint64_t m, n, k;                    /* the key ... */
	uint32_t afmt, bfmt, fast, align;    /* ... (align: of every operand) */
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
} gemm_plan;

#define MAX_PLANS 64

struct fp8_cuda_ctx {
	int device;
	cublasLtHandle_t lt;
	void *workspace;
	float *scalars;   /* device: [2] is the amax scratch */
	gemm_plan plans[MAX_PLANS];
	int n_plans;
};

static int plan_same(const gemm_plan *a, const gemm_plan *b)
{
	return a->m == b->m && a->n == b->n && a->k == b->k && a->afmt == b->afmt &&
	       a->bfmt == b->bfmt && a->fast == b->fast && a->align == b->align;
}

static void plan_free(gemm_plan *p)
{
	if (p->lc)
		cublasLtMatrixLayoutDestroy(p->lc);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	p->op = NULL;
	p->la = p->lb = p->lc = NULL;
}

static int cuda_err(cudaError_t e, const char *what, char *err, size_t cap)
{
	if (e == cudaSuccess)
		return 0;
	snprintf(err, cap, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
	return 1;
}

static int lt_err(cublasStatus_t st, const char *what, char *err, size_t cap)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return 0;
	snprintf(err, cap, "%s: cuBLAS status %d%s", what, (int)st,
	         st == CUBLAS_STATUS_NOT_SUPPORTED ? " (not supported: FP8 needs sm_89 or newer, "
	                                             "dimensions multiple of 16, not both E5M2)"
	                                           : "");
	return 1;
}

static __device__ __forceinline__ unsigned char enc(float v, uint32_t fmt)
{
	/* saturating, round to nearest even; NaN -> 0x7f (fp8_codec.h) */
	__nv_fp8_interpretation_t k = fmt == ACCEL_DTYPE_F8E5M2 ? __NV_E5M2 : __NV_E4M3;
	return (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, k);
}

template <typename T> static __device__ __forceinline__ float ld(const T *p, size_t i);
template <> __device__ __forceinline__ float ld<float>(const float *p, size_t i)
{
	return p[i];
}
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p, size_t i)
{
	return __bfloat162float(p[i]);
}

/* amax as the bits of a non-negative float: integer order is float order,
 * and NaN (0x7fc00000) is above inf, so it wins as in the CPU code. */
static __device__ __forceinline__ void amax_add(float *amax, float v)
{
	atomicMax((unsigned int *)amax, __float_as_uint(fabsf(v)));
}

/* one warp's max (lane 0 holds it) into *amax, NaN winning */
static __device__ __forceinline__ void amax_warp(float *amax, float m, bool nan)
{
	for (int o = 16; o > 0; o >>= 1)
		m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
	nan = __any_sync(0xffffffffu, nan);
	if ((threadIdx.x & 31) == 0)
		amax_add(amax, nan ? __int_as_float(0x7fc00000) : m);
}

/* q[i] = enc(x[i] * scale) over n elements; amax of |x| (blocks of 256:
 * whole warps reach the shuffles) */
template <typename T>
static __global__ void quantize_kernel(const T *x, size_t n, float scale, uint32_t fmt,
                                       unsigned char *q, float *amax)
{
	float m = 0.0f;
	bool nan = false;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = ld<T>(x, i);
		q[i] = enc(v * scale, fmt);
		nan |= v != v;
		m = fmaxf(m, fabsf(v));
	}
	if (amax)
		amax_warp(amax, m, nan);
}

/* The same for x [rows, cols] with its transpose too: qt[c * qt_ld + r].
 * 32 x 32 tiles through shared memory, so that both q and qt are written
 * in runs of consecutive bytes (a plain scattered transpose writes one
 * 32-byte sector per byte).  Blocks of 32 x 8 threads: a warp is one
 * threadIdx.y; blockIdx.x picks the tile column, blockIdx.y strides over
 * the tile rows. */
#define TILE 32
template <typename T>
static __global__ void quantize_t_kernel(const T *x, size_t rows, size_t cols, float scale,
                                         uint32_t fmt, unsigned char *q, unsigned char *qt,
                                         size_t qt_ld, float *amax)
{
	__shared__ unsigned char tile[TILE][TILE + 1];
	float m = 0.0f;
	bool nan = false;
	size_t c0 = (size_t)blockIdx.x * TILE;
	for (size_t r0 = (size_t)blockIdx.y * TILE; r0 < rows; r0 += (size_t)gridDim.y * TILE) {
		for (unsigned j = threadIdx.y; j < TILE; j += blockDim.y) {
			size_t r = r0 + j, c = c0 + threadIdx.x;
			if (r < rows && c < cols) {
				float v = ld<T>(x, r * cols + c);
				unsigned char e = enc(v * scale, fmt);
				q[r * cols + c] = e;
				tile[j][threadIdx.x] = e;
				nan |= v != v;
				m = fmaxf(m, fabsf(v));
			}
		}
		__syncthreads();
		for (unsigned j = threadIdx.y; j < TILE; j += blockDim.y) {
			size_t c = c0 + j, r = r0 + threadIdx.x;
			if (c < cols && r < rows)
				qt[c * qt_ld + r] = tile[threadIdx.x][j];
		}
		__syncthreads();
	}
	if (amax)
		amax_warp(amax, m, nan);
}

static __global__ void dequantize_kernel(const unsigned char *q, size_t n, uint32_t fmt,
                                         float scale_inv, float *y)
{
	__nv_fp8_interpretation_t k = fmt == ACCEL_DTYPE_F8E5M2 ? __NV_E5M2 : __NV_E4M3;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		__half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q[i], k);
		y[i] = __half2float(__half(h)) * scale_inv;
	}
}

/* Run on the context's device and give the caller's current device back:
 * the program may compute on another one. */
struct device_guard {
	int prev, ok;
	explicit device_guard(int dev) : prev(-1), ok(1)
	{
		if (cudaGetDevice(&prev) != cudaSuccess)
			prev = -1;
		if (prev != dev)
			ok = cudaSetDevice(dev) == cudaSuccess;
	}
	~device_guard()
	{
		int cur = -1;
		if (prev >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev)
			cudaSetDevice(prev);
	}
};

static unsigned blocks_for(size_t n)
{
	size_t b = (n + 255) / 256;
	return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

static int probe(int device, int *ret_cc, char *err, size_t cap)
{
	cudaDeviceProp prop;
	if (cuda_err(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", err, cap))
		return 1;
	*ret_cc = prop.major * 10 + prop.minor;
	return 0;
}

static void ctx_free(fp8_cuda_ctx *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_plans; i++)
		plan_free(&c->plans[i]);
	if (c->lt)
		cublasLtDestroy(c->lt);
	cudaFree(c->workspace);
	cudaFree(c->scalars);
	free(c);
}

static int ctx_new(int device, fp8_cuda_ctx **ret, char *err, size_t cap)
{
	fp8_cuda_ctx *c = (fp8_cuda_ctx *)calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, cap, "out of memory");
		return 1;
	}
	c->device = device;
	device_guard dg(device);
	if (!dg.ok) {
		snprintf(err, cap, "cudaSetDevice(%d) failed", device);
		free(c);
		return 1;
	}
	if (lt_err(cublasLtCreate(&c->lt), "cublasLtCreate", err, cap) ||
	    cuda_err(cudaMalloc(&c->workspace, WORKSPACE_BYTES), "cudaMalloc (workspace)", err,
	             cap) ||
	    cuda_err(cudaMalloc((void **)&c->scalars, 4 * sizeof(float)), "cudaMalloc", err, cap)) {
		ctx_free(c);
		return 1;
	}
	*ret = c;
	return 0;
}

static float *amax_scratch(fp8_cuda_ctx *c)
{
	return c->scalars + 2;
}

static int quantize(fp8_cuda_ctx *c, void *stream, uint32_t fmt, uint32_t src_dtype,
                    const void *x, uint64_t rows, uint64_t cols, float scale, uint8_t *q,
                    uint8_t *qt, uint64_t qt_ld, float *amax_dev, char *err, size_t cap)
{
	size_t n = (size_t)rows * cols;
	cudaStream_t st = (cudaStream_t)stream;
	if (!n)
		return 0;
	if (qt && qt_ld < rows) {
		snprintf(err, cap, "quantize: the transpose's leading dimension %llu is below its "
		         "%llu rows", (unsigned long long)qt_ld, (unsigned long long)rows);
		return 1;
	}
	device_guard dg(c->device);
	/* the padding columns of the transpose: zeros, so they add nothing to a
	 * GEMM over them */
	if (qt && qt_ld > rows &&
	    cuda_err(cudaMemsetAsync(qt, 0, (size_t)cols * qt_ld, st), "cudaMemsetAsync", err, cap))
		return 1;
	int bf = src_dtype == ACCEL_DTYPE_BF16;
	if (qt) {
		size_t ty = (rows + TILE - 1) / TILE;
		dim3 grid((unsigned)((cols + TILE - 1) / TILE), (unsigned)(ty < 65535 ? ty : 65535));
		dim3 block(TILE, 8);
		if (bf)
			quantize_t_kernel<__nv_bfloat16><<<grid, block, 0, st>>>(
			        (const __nv_bfloat16 *)x, rows, cols, scale, fmt, q, qt, qt_ld, amax_dev);
		else
			quantize_t_kernel<float><<<grid, block, 0, st>>>((const float *)x, rows, cols,
			                                                  scale, fmt, q, qt, qt_ld,
			                                                  amax_dev);
	} else if (bf) {
		quantize_kernel<__nv_bfloat16><<<blocks_for(n), 256, 0, st>>>(
		        (const __nv_bfloat16 *)x, n, scale, fmt, q, amax_dev);
	} else {
		quantize_kernel<float><<<blocks_for(n), 256, 0, st>>>((const float *)x, n, scale, fmt, q,
		                                                       amax_dev);
	}
	return cuda_err(cudaGetLastError(), "quantize kernel", err, cap);
}

static int dequantize(fp8_cuda_ctx *c, void *stream, uint32_t fmt, const uint8_t *q, uint64_t n,
                      float scale_inv, float *y, char *err, size_t cap)
{
	if (!n)
		return 0;
	device_guard dg(c->device);
	dequantize_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)stream>>>(q, n, fmt, scale_inv, y);
	return cuda_err(cudaGetLastError(), "dequantize kernel", err, cap);
}

static cudaDataType_t lt_type(uint32_t fmt)
{
	return fmt == ACCEL_DTYPE_F8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* Row-major D[m,n] = A[m,k] . B[n,k]^T is column-major D^T[n,m] =
 * B'^T . A' with B' = B as a column-major [k, n] matrix and A' = A as
 * [k, m]: cuBLASLt's "TN" (transa T, transb N), the one layout its FP8
 * kernels take. */
/* Make plan p (descriptor, layouts, the heuristic's algorithm) for its
 * key; 0 or a message in err. */
static int plan_make(fp8_cuda_ctx *c, gemm_plan *p, char *err, size_t cap)
{
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t heur;
	cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
	int8_t fast = (int8_t)p->fast;
	uint64_t ws = WORKSPACE_BYTES;
	uint32_t align = p->align;
	int found = 0, rc = 1;
	static const cublasLtMatmulPreferenceAttributes_t min_align[] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	if (lt_err(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
	           "cublasLtMatmulDescCreate", err, cap) ||
	    lt_err(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &tA,
	                                          sizeof(tA)), "TRANSA", err, cap) ||
	    lt_err(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tB,
	                                          sizeof(tB)), "TRANSB", err, cap) ||
	    lt_err(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
	                                          sizeof(fast)), "FAST_ACCUM", err, cap))
		goto out;
	if (lt_err(cublasLtMatrixLayoutCreate(&p->la, lt_type(p->bfmt), p->k, p->n, p->k),
	           "layout A", err, cap) ||
	    lt_err(cublasLtMatrixLayoutCreate(&p->lb, lt_type(p->afmt), p->k, p->m, p->k),
	           "layout B", err, cap) ||
	    lt_err(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, p->n, p->m, p->n), "layout D",
	           err, cap))
		goto out;
	if (lt_err(cublasLtMatmulPreferenceCreate(&pref), "preference", err, cap) ||
	    lt_err(cublasLtMatmulPreferenceSetAttribute(pref,
	                                                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	                                                &ws, sizeof(ws)), "workspace", err, cap))
		goto out;
	/* The heuristic assumes 256-byte aligned pointers unless told: the
	 * linear layers' operands sit at 64-byte offsets in their workspace, and
	 * an algorithm picked for 256 would fail on them (CUBLAS_STATUS_INVALID_VALUE
	 * or a misaligned access) */
	for (size_t i = 0; i < sizeof(min_align) / sizeof(min_align[0]); i++)
		if (lt_err(cublasLtMatmulPreferenceSetAttribute(pref, min_align[i], &align,
		                                                sizeof(align)), "alignment", err, cap))
			goto out;
	if (lt_err(cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1,
	                                          &heur, &found),
	           "cublasLtMatmulAlgoGetHeuristic", err, cap))
		goto out;
	if (!found) {
		snprintf(err, cap, "cuBLASLt has no FP8 algorithm for m %llu n %llu k %llu (FP8 "
		         "needs k and the leading dimensions multiple of 16)", (unsigned long long)p->m,
		         (unsigned long long)p->n, (unsigned long long)p->k);
		goto out;
	}
	p->algo = heur.algo;
	rc = 0;
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (rc)
		plan_free(p);
	return rc;
}

static int gemm(fp8_cuda_ctx *c, void *stream, uint64_t m, uint64_t n, uint64_t k,
                const uint8_t *a, uint32_t afmt, float a_scale_inv, const uint8_t *b,
                uint32_t bfmt, float b_scale_inv, float alpha, float *d, int accumulate,
                int fast_accum, char *err, size_t cap)
{
	float beta = accumulate ? 1.0f : 0.0f;
	/* The dequantizing scales go into alpha (a host value) rather than
	 * through CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER: those must be device
	 * floats, and copying the two host values there before every call is a
	 * cudaMemcpyAsync from pageable memory, which the runtime may turn into
	 * a stream synchronisation (docs: "API synchronization behavior") --
	 * a host stall per GEMM.  With an f32 D, D = alpha * scale_a * scale_b *
	 * (A B) either way; the product of the three is taken in double and
	 * rounded once to f32 (2^-24 relative). */
	float alpha_eff = (float)((double)alpha * a_scale_inv * b_scale_inv);

	if (!m || !n)
		return 0;
	if (afmt == ACCEL_DTYPE_F8E5M2 && bfmt == ACCEL_DTYPE_F8E5M2) {
		snprintf(err, cap, "FP8 GEMM with both operands E5M2: cuBLASLt takes E4M3 x E4M3, "
		         "E4M3 x E5M2 or E5M2 x E4M3, not both operands E5M2");
		return 1;
	}
	/* FP8 kernels need 16-byte aligned operands and leading dimensions
	 * (k bytes for A and B, n floats for D) */
	uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | 256u;
	uint32_t align = (uint32_t)(bits & (~bits + 1));
	if (align < 16 || k % 16) {
		snprintf(err, cap, "FP8 GEMM m %llu n %llu k %llu: cuBLASLt needs k a multiple of 16 "
		         "and A, B, D 16-byte aligned (A %p, B %p, D %p)", (unsigned long long)m,
		         (unsigned long long)n, (unsigned long long)k, (const void *)a, (const void *)b,
		         (void *)d);
		return 1;
	}
	device_guard dg(c->device);
	/* the plan of this shape, made once: the descriptors and the heuristic
	 * cost tens of microseconds of host time per call otherwise */
	gemm_plan key;
	memset(&key, 0, sizeof(key));
	key.m = m;
	key.n = n;
	key.k = k;
	key.afmt = afmt;
	key.bfmt = bfmt;
	key.fast = fast_accum ? 1 : 0;
	key.align = align;
	gemm_plan *p = NULL, tmp;
	for (int i = 0; i < c->n_plans && !p; i++)
		if (plan_same(&c->plans[i], &key))
			p = &c->plans[i];
	if (!p) {
		p = c->n_plans < MAX_PLANS ? &c->plans[c->n_plans] : &tmp;
		*p = key;
		if (plan_make(c, p, err, cap))
			return 1;
		if (p != &tmp)
			c->n_plans++;
	}
	int rc = lt_err(cublasLtMatmul(c->lt, p->op, &alpha_eff, b, p->la, a, p->lb, &beta, d,
	                               p->lc, d, p->lc, &p->algo, c->workspace, WORKSPACE_BYTES,
	                               (cudaStream_t)stream),
	                "cublasLtMatmul", err, cap);
	if (p == &tmp)   /* more shapes than the cache holds: this one is not kept */
		plan_free(p);
	return rc;
}

static int upload(void *stream, void *dst, const void *src, size_t bytes, char *err, size_t cap)
{
	return cuda_err(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
	                                (cudaStream_t)stream), "cudaMemcpyAsync", err, cap);
}

static int download(void *stream, void *dst, const void *src, size_t bytes, char *err,
                    size_t cap)
{
	return cuda_err(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
	                                (cudaStream_t)stream), "cudaMemcpyAsync", err, cap) ||
	       cuda_err(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize", err,
	                cap);
}

static int encode_host(int device, uint32_t fmt, const float *in, size_t n, float scale,
                       uint8_t *out, char *err, size_t cap)
{
	float *din = NULL;
	uint8_t *dout = NULL;
	int rc = 1;
	if (cuda_err(cudaSetDevice(device), "cudaSetDevice", err, cap) ||
	    cuda_err(cudaMalloc((void **)&din, n * sizeof(float)), "cudaMalloc", err, cap) ||
	    cuda_err(cudaMalloc((void **)&dout, n ? n : 1), "cudaMalloc", err, cap) ||
	    cuda_err(cudaMemcpy(din, in, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy",
	             err, cap))
		goto out;
	if (n)
		quantize_kernel<float><<<blocks_for(n), 256>>>(din, n, scale, fmt, dout, NULL);
	if (cuda_err(cudaGetLastError(), "quantize kernel", err, cap) ||
	    cuda_err(cudaMemcpy(out, dout, n, cudaMemcpyDeviceToHost), "cudaMemcpy", err, cap))
		goto out;
	rc = 0;
out:
	cudaFree(din);
	cudaFree(dout);
	return rc;
}

static const fp8_cuda_api api = {
	sizeof(fp8_cuda_api), FP8_CUDA_API_VERSION, probe, ctx_new, ctx_free, amax_scratch,
	quantize, dequantize, gemm, upload, download, encode_host,
};

extern "C" __attribute__((visibility("default"))) const fp8_cuda_api *fp8_cuda_entry(void)
{
	return &api;
}
