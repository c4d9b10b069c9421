/* SPDX-License-Identifier: MIT */
/*
 * tests/test-fp8-gpu.c MODULE: the fp8 plugin's CUDA part (fp8-cuda.so) on
 * an FP8 GPU (compute capability >= 8.9); prints "skipped: no GPU" and
 * exits 77 elsewhere.
 *  - codec: the device's E4M3/E5M2 encoding (cuda_fp8.h, __NV_SATFINITE)
 *    equals the CPU codec (plugins/fp8/fp8_codec.c) on every code value,
 *    every midpoint and its neighbours, special values and a random sweep,
 *    at scales 1, 3.5 and 2^-7;
 *  - GEMM: cuBLASLt's FP8 matmul (TN, scale pointers) is within FP8_RTOL
 *    of an f64 GEMM of the dequantized operands, relative to sum |a||b|
 *    per element (the operands are exact; only the accumulation differs),
 *    for E4M3 x E4M3 and E5M2 x E4M3, with and without accumulation.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/types.h"
#include "fp8_codec.h"
#include "fp8_cuda_api.h"

/* not measured yet (no FP8 GPU where this was written): f32 accumulation
 * of up to 1024 exact products gives about 1024 * 2^-24 relative; the
 * bound leaves room for split-K orders */
#define FP8_RTOL 1e-4

static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs >> 16);
}

static int codec(const fp8_cuda_api *api, uint32_t fmt)
{
	size_t cap = 1u << 20, n = 0;
	float *in = malloc(cap * sizeof(float));
	uint8_t *got = malloc(cap);
	char err[512];
	int bad = 0;
	for (unsigned c = 0; c < 256; c++) {
		float v = fp8_decode(fmt, (uint8_t)c), w = fp8_decode(fmt, (uint8_t)(c + 1));
		in[n++] = v;
		in[n++] = nextafterf(v, INFINITY);
		in[n++] = nextafterf(v, -INFINITY);
		if (isfinite(v) && isfinite(w) && (c & 0x7f) != 0x7f) {
			float mid = (v + w) / 2;
			in[n++] = mid;
			in[n++] = nextafterf(mid, INFINITY);
			in[n++] = nextafterf(mid, -INFINITY);
		}
	}
	const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 464.0f,
	                         449.0f, 57345.0f, 61440.0f, 1e-30f, 1.4e-45f};
	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		in[n++] = special[i];
	while (n < cap) {
		uint32_t b = (rnd() & 0x80000000u) | ((uint32_t)(127 - 30 + rnd() % 61) << 23) |
		             (rnd() & 0x7fffffu);
		memcpy(&in[n++], &b, sizeof(float));
	}
	const float scales[] = {1.0f, 3.5f, 0.0078125f};
	for (int s = 0; s < 3 && !bad; s++) {
		if (api->encode_host(0, fmt, in, n, scales[s], got, err, sizeof(err))) {
			fprintf(stderr, "FAIL: encode on the GPU: %s\n", err);
			bad = 1;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			uint8_t want = fp8_encode(fmt, in[i] * scales[s]);
			if (got[i] != want) {
				fprintf(stderr, "FAIL: %s encode(%a * %g): GPU 0x%02x, CPU 0x%02x\n",
				        fmt == ACCEL_DTYPE_F8E4M3 ? "e4m3" : "e5m2", in[i], scales[s], got[i],
				        want);
				if (++bad > 10)
					break;
			}
		}
	}
	printf("codec %s: %zu inputs x 3 scales: %s\n", fmt == ACCEL_DTYPE_F8E4M3 ? "e4m3" : "e5m2",
	       n, bad ? "FAIL" : "GPU == CPU");
	free(in);
	free(got);
	return bad != 0;
}

static uint8_t finite_code(uint32_t fmt)
{
	for (;;) {
		uint8_t c = (uint8_t)rnd();
		float v = fp8_decode(fmt, c);
		if (isfinite(v) && fabsf(v) <= 16.0f)
			return c;
	}
}

static int gemm(const fp8_cuda_api *api, fp8_cuda_ctx *ctx, uint32_t afmt, uint32_t bfmt,
                int acc, size_t off)
{
	const uint64_t m = 256, n = 512, k = 1024;
	const float asi = 0.25f, bsi = 0.0625f;
	uint8_t *a = malloc(m * k), *b = malloc(n * k);
	float *d = malloc(m * n * sizeof(float)), *d0 = malloc(m * n * sizeof(float));
	uint8_t *da = NULL, *db = NULL, *ba = NULL, *bb = NULL, *bd = NULL;
	float *dd = NULL;
	char err[512];
	int bad = 0;
	double worst = 0;
	for (uint64_t i = 0; i < m * k; i++)
		a[i] = finite_code(afmt);
	for (uint64_t i = 0; i < n * k; i++)
		b[i] = finite_code(bfmt);
	for (uint64_t i = 0; i < m * n; i++)
		d0[i] = (float)(i % 17) - 8.0f;
	/* off: every operand that many bytes past cudaMalloc's 256-byte
	 * alignment (the linear layers' operands sit at 64-byte offsets) */
	if (cudaMalloc((void **)&ba, m * k + off) || cudaMalloc((void **)&bb, n * k + off) ||
	    cudaMalloc((void **)&bd, m * n * sizeof(float) + off)) {
		fprintf(stderr, "FAIL: CUDA memory\n");
		bad = 1;
		goto out;
	}
	da = ba + off;
	db = bb + off;
	dd = (float *)(void *)(bd + off);
	if (cudaMemcpy(da, a, m * k, cudaMemcpyHostToDevice) ||
	    cudaMemcpy(db, b, n * k, cudaMemcpyHostToDevice) ||
	    cudaMemcpy(dd, d0, m * n * sizeof(float), cudaMemcpyHostToDevice)) {
		fprintf(stderr, "FAIL: CUDA memory\n");
		bad = 1;
		goto out;
	}
	if (api->gemm(ctx, NULL, m, n, k, da, afmt, asi, db, bfmt, bsi, 1.0f, dd, acc, 0, err,
	              sizeof(err)) ||
	    cudaMemcpy(d, dd, m * n * sizeof(float), cudaMemcpyDeviceToHost)) {
		fprintf(stderr, "FAIL: cuBLASLt FP8 GEMM: %s\n", err);
		bad = 1;
		goto out;
	}
	for (uint64_t i = 0; i < m; i++)
		for (uint64_t j = 0; j < n; j++) {
			double s = 0, sa = 0;
			for (uint64_t t = 0; t < k; t++) {
				double p = (double)fp8_decode(afmt, a[i * k + t]) * asi *
				           (double)fp8_decode(bfmt, b[j * k + t]) * bsi;
				s += p;
				sa += fabs(p);
			}
			if (acc)
				s += d0[i * n + j];
			double e = fabs(d[i * n + j] - s) / (sa + 1e-30);
			if (e > worst)
				worst = e;
		}
	bad = !(worst <= FP8_RTOL);
	printf("gemm %s x %s%s %llux%llux%llu, operands at +%zu bytes: worst error / sum|ab| "
	       "%.3g (tolerance %g) %s\n",
	       afmt == ACCEL_DTYPE_F8E4M3 ? "e4m3" : "e5m2",
	       bfmt == ACCEL_DTYPE_F8E4M3 ? "e4m3" : "e5m2", acc ? " +=" : "",
	       (unsigned long long)m, (unsigned long long)n, (unsigned long long)k, off, worst,
	       FP8_RTOL, bad ? "FAIL" : "ok");
out:
	cudaFree(ba);
	cudaFree(bb);
	cudaFree(bd);
	free(a);
	free(b);
	free(d);
	free(d0);
	return bad;
}

/* A GEMM the module must refuse before cuBLASLt, naming why. */
static int refused(const fp8_cuda_api *api, fp8_cuda_ctx *ctx, uint32_t afmt, uint32_t bfmt,
                   uint64_t k, const char *why)
{
	uint8_t *a = NULL, *b = NULL;
	float *d = NULL;
	char err[512] = "";
	int bad = 1;
	if (cudaMalloc((void **)&a, 16 * k) || cudaMalloc((void **)&b, 16 * k) ||
	    cudaMalloc((void **)&d, 16 * 16 * sizeof(float)))
		fprintf(stderr, "FAIL: CUDA memory\n");
	else if (!api->gemm(ctx, NULL, 16, 16, k, a, afmt, 1.0f, b, bfmt, 1.0f, 1.0f, d, 0, 0, err,
	                    sizeof(err)))
		fprintf(stderr, "FAIL: a GEMM that needs %s ran\n", why);
	else if (!strstr(err, why))
		fprintf(stderr, "FAIL: the refusal does not say '%s': %s\n", why, err);
	else {
		printf("refused as it must be: %s\n", err);
		bad = 0;
	}
	cudaFree(a);
	cudaFree(b);
	cudaFree(d);
	return bad;
}

int main(int argc, char **argv)
{
	int count = 0, cc = 0;
	char err[512];
	if (argc < 2) {
		fprintf(stderr, "usage: test-fp8-gpu FP8_CUDA_MODULE\n");
		return 2;
	}
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		printf("skipped: no GPU\n");
		return 77;
	}
	void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	fp8_cuda_entry_fn entry = NULL;
	if (dl)
		*(void **)&entry = dlsym(dl, FP8_CUDA_ENTRY);
	const fp8_cuda_api *api = entry ? entry() : NULL;
	if (!api) {
		fprintf(stderr, "FAIL: %s does not load: %s\n", argv[1], dlerror());
		return 1;
	}
	if (api->probe(0, &cc, err, sizeof(err)) || cc < 89) {
		printf("skipped: no GPU with FP8 tensor cores (cuda:0 compute capability %d.%d)\n",
		       cc / 10, cc % 10);
		return 77;
	}
	int bad = codec(api, ACCEL_DTYPE_F8E4M3) + codec(api, ACCEL_DTYPE_F8E5M2);
	fp8_cuda_ctx *ctx = NULL;
	if (api->ctx_new(0, &ctx, err, sizeof(err))) {
		fprintf(stderr, "FAIL: cuBLASLt handle: %s\n", err);
		return 1;
	}
	bad += gemm(api, ctx, ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E4M3, 0, 0);
	bad += gemm(api, ctx, ACCEL_DTYPE_F8E5M2, ACCEL_DTYPE_F8E4M3, 0, 0);
	bad += gemm(api, ctx, ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E5M2, 0, 64);
	bad += gemm(api, ctx, ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E4M3, 1, 16);
	/* refused with a message, not left to cuBLASLt: both E5M2, and k not a
	 * multiple of 16 */
	bad += refused(api, ctx, ACCEL_DTYPE_F8E5M2, ACCEL_DTYPE_F8E5M2, 32, "both operands E5M2");
	bad += refused(api, ctx, ACCEL_DTYPE_F8E4M3, ACCEL_DTYPE_F8E4M3, 40, "k a multiple of 16");
	api->ctx_free(ctx);
	return bad ? 1 : 0;
}
