/* SPDX-License-Identifier: MIT */
/*
 * bench/fp8_gemm.c MODULE: the fp8 plugin's cuBLASLt FP8 GEMM (fp8-cuda.so,
 * the code path of accel_fp8_gemm_v1.gemm on an FP8 GPU) next to a bf16
 * cuBLASLt GEMM of the same shape in the same process (bench/fp8-gemm.sh
 * adds PyTorch's _scaled_mm).  One JSON line per result:
 *   {"bench":"fp8-gemm","machine":...,"op":"fp8_e4m3"|"bf16","m":..,"n":..,
 *    "k":..,"ms":..,"tflops":..}
 * Options: --m --n --k (8192), --iters (50), --machine NAME.  Exit 77
 * without an FP8 GPU.
 */
/* cublasLt.h declares one function without a prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/types.h"
#include "fp8_cuda_api.h"

#define CK(x)                                                                            \
	do {                                                                                 \
		if ((x) != 0) {                                                                  \
			fprintf(stderr, "fp8-gemm: %s failed (%s:%d)\n", #x, __FILE__, __LINE__);     \
			return 1;                                                                    \
		}                                                                                \
	} while (0)

static void line(const char *machine, const char *op, long m, long n, long k, float ms)
{
	double tf = 2.0 * m * n * k / (ms * 1e-3) / 1e12;
	printf("{\"bench\":\"fp8-gemm\",\"machine\":\"%s\",\"op\":\"%s\",\"m\":%ld,\"n\":%ld,"
	       "\"k\":%ld,\"ms\":%.4f,\"tflops\":%.1f}\n", machine, op, m, n, k, ms, tf);
	fflush(stdout);
}

/* bf16 D[m,n] = A[m,k] . B[n,k]^T in f32 compute, the same TN layout */
static int bf16_gemm(cublasLtHandle_t lt, void *ws, size_t wsb, long m, long n, long k,
                     const void *a, const void *b, void *d, cudaStream_t st, float *ret_ms,
                     int iters)
{
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t heur;
	cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
	int found = 0;
	float alpha = 1, beta = 0;
	cudaEvent_t e0, e1;
	CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof(tA)));
	CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof(tB)));
	CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k));
	CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k));
	CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));
	CK(cublasLtMatmulPreferenceCreate(&pref));
	CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	                                        &wsb, sizeof(wsb)));
	CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
	if (!found)
		return 1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int w = 0; w < 3; w++)
		CK(cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, d, lc, d, lc, &heur.algo, ws,
		                  wsb, st));
	CK(cudaEventRecord(e0, st));
	for (int i = 0; i < iters; i++)
		CK(cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, d, lc, d, lc, &heur.algo, ws,
		                  wsb, st));
	CK(cudaEventRecord(e1, st));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(ret_ms, e0, e1));
	*ret_ms /= (float)iters;
	return 0;
}

int main(int argc, char **argv)
{
	long m = 8192, n = 8192, k = 8192;
	int iters = 50, count = 0, cc = 0;
	const char *machine = "unknown", *module = NULL;
	char err[512];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--m") && i + 1 < argc)
			m = atol(argv[++i]);
		else if (!strcmp(argv[i], "--n") && i + 1 < argc)
			n = atol(argv[++i]);
		else if (!strcmp(argv[i], "--k") && i + 1 < argc)
			k = atol(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--machine") && i + 1 < argc)
			machine = argv[++i];
		else
			module = argv[i];
	}
	if (!module) {
		fprintf(stderr, "usage: bench-fp8-gemm [--m M --n N --k K --iters I --machine NAME] "
		        "FP8_CUDA_MODULE\n");
		return 2;
	}
	if (cudaGetDeviceCount(&count) != cudaSuccess || !count) {
		printf("skipped: no GPU\n");
		return 77;
	}
	void *dl = dlopen(module, RTLD_NOW | RTLD_LOCAL);
	fp8_cuda_entry_fn entry = NULL;
	if (dl)
		*(void **)&entry = dlsym(dl, FP8_CUDA_ENTRY);
	const fp8_cuda_api *api = entry ? entry() : NULL;
	if (!api || api->probe(0, &cc, err, sizeof(err)) || cc < 89) {
		printf("skipped: no GPU with FP8 tensor cores (cc %d)\n", cc);
		return 77;
	}
	fp8_cuda_ctx *ctx;
	void *a, *b, *d, *ws;
	cudaStream_t st;
	cublasLtHandle_t lt;
	size_t wsb = 32u << 20;
	CK(api->ctx_new(0, &ctx, err, sizeof(err)));
	CK(cudaStreamCreate(&st));
	CK(cudaMalloc(&a, (size_t)m * k * 2));
	CK(cudaMalloc(&b, (size_t)n * k * 2));
	CK(cudaMalloc(&d, (size_t)m * n * 4));
	CK(cudaMalloc(&ws, wsb));
	/* small finite codes in both formats (0x30: 0.5 in E4M3), bf16 1/64 */
	CK(cudaMemset(a, 0x30, (size_t)m * k * 2));
	CK(cudaMemset(b, 0x30, (size_t)n * k * 2));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int w = 0; w < 3; w++)
		CK(api->gemm(ctx, st, m, n, k, a, ACCEL_DTYPE_F8E4M3, 1, b, ACCEL_DTYPE_F8E4M3, 1, 1,
		             d, 0, 1, err, sizeof(err)));
	CK(cudaEventRecord(e0, st));
	for (int i = 0; i < iters; i++)
		CK(api->gemm(ctx, st, m, n, k, a, ACCEL_DTYPE_F8E4M3, 1, b, ACCEL_DTYPE_F8E4M3, 1, 1,
		             d, 0, 1, err, sizeof(err)));
	CK(cudaEventRecord(e1, st));
	CK(cudaEventSynchronize(e1));
	float ms;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	line(machine, "fp8_e4m3", m, n, k, ms / (float)iters);
	CK(cublasLtCreate(&lt));
	CK(bf16_gemm(lt, ws, wsb, m, n, k, a, b, d, st, &ms, iters));
	line(machine, "bf16", m, n, k, ms);
	return 0;
}
