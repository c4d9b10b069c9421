/* SPDX-License-Identifier: MIT */
/*
 * tests/progs/fp8-check-gpu.c STEPS: the fp8 plugin's cuBLASLt path through
 * accel on an FP8 GPU (meson test fp8-recipe-gpu, suite gpu): one linear
 * layer fc0 ([OUT, IN] f32 on cuda:0, compute_dtype f8e4m3) under
 * mixed_precision fp8, activations in device memory.  Every step:
 *  - the table reports the cuBLASLt path;
 *  - linear_forward is within RTOL (of sum |x||w| per element) of an f64
 *    GEMM of the operands quantized and dequantized on the host with the
 *    step's scales (the CPU codec: plugins/fp8/fp8_codec.c), and so are
 *    linear_backward's dW and dX; ROWS (40) is not a multiple of 16, so
 *    dW's GEMM runs over the zero-padded transposes (k = 48);
 *  - after accel_step the scales are 448 / amax(X), 448 / amax(W) and
 *    57344 / amax(dY) exactly (amax_history_len 1), i.e. the device amax
 *    is the exact maximum.
 * Prints "skipped: no GPU" and exits 77 without a GPU of compute
 * capability >= 8.9.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "accel-fp8.h"
#include "fp8_codec.h"

#define IN 64
#define OUT 32
#define ROWS 40   /* not a multiple of 16: the padded weight-gradient GEMM */
#define RTOL 1e-4   /* not measured yet: f32 accumulation of up to 64 exact products */

static int bad(accel_ctx *ctx, const char *what)
{
	fprintf(stderr, "fp8-check-gpu: %s: %s\n", what, ctx ? accel_errmsg(ctx) : "");
	return 1;
}

static float amax_of(const float *v, int n)
{
	float m = 0;
	for (int i = 0; i < n; i++)
		m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
	return m;
}

/* x quantized with scale and dequantized (the CPU codec) */
static double q(uint32_t fmt, float x, float scale)
{
	return (double)fp8_decode(fmt, fp8_encode(fmt, x * scale)) / scale;
}

static float scale_for(float fmax, float amax)
{
	float s = (float)((double)fmax / amax);
	while ((double)s * amax > fmax)
		s = nextafterf(s, 0.0f);
	return s;
}

int main(int argc, char **argv)
{
	int count = 0, rc = 1, steps = argc > 1 ? atoi(argv[1]) : 3;
	struct cudaDeviceProp prop;
	if (cudaGetDeviceCount(&count) != cudaSuccess || !count) {
		printf("skipped: no GPU\n");
		return 77;
	}
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major * 10 + prop.minor < 89) {
		printf("skipped: no GPU with FP8 tensor cores (cuda:0 is %d.%d)\n", prop.major,
		       prop.minor);
		return 77;
	}
	accel_ctx *ctx = NULL;
	if (accel_ctx_new(NULL, &ctx))
		return bad(ctx, "accel_ctx_new");
	int64_t wshape[2] = {OUT, IN};
	accel_init init = accel_init_uniform(-0.5, 0.5);
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32, .unit = "fc0",
	                      .name = "fc0.weight", .ndim = 2, .shape = wshape,
	                      .device = ACCEL_DEVICE_CUDA, .device_index = 0, .init = &init,
	                      .compute_dtype = ACCEL_DTYPE_F8E4M3};
	uint32_t w, unit;
	float *dx_ = NULL, *dy_ = NULL, *ddx = NULL, *ddy = NULL;
	void *ws = NULL;
	uint64_t ws_bytes;
	if (accel_model_add(ctx, &d, &w) || accel_model_find_unit(ctx, "fc0", &unit) ||
	    accel_prepare(ctx)) {
		bad(ctx, "model");
		goto out;
	}
	const accel_fp8_gemm_v1 *g = accel_plugin_extension(ctx, "fp8", ACCEL_FP8_GEMM_NAME,
	                                                    ACCEL_FP8_GEMM_VERSION);
	if (!g || g->path != ACCEL_FP8_PATH_CUBLASLT) {
		bad(ctx, g ? "the table does not report the cuBLASLt path" : "extension");
		goto out;
	}
	if (accel_unit_pre_forward(ctx, unit) || g->linear_workspace(g, w, ROWS, &ws_bytes) ||
	    accel_unit_post_forward(ctx, unit)) {
		bad(ctx, "linear_workspace");
		goto out;
	}
	float x[ROWS * IN], y[ROWS * OUT], dy[ROWS * OUT], W[OUT * IN];
	if (cudaMalloc((void **)&dx_, sizeof(x)) || cudaMalloc((void **)&dy_, sizeof(y)) ||
	    cudaMalloc((void **)&ddy, sizeof(dy)) || cudaMalloc((void **)&ddx, sizeof(x)) ||
	    cudaMalloc(&ws, ws_bytes)) {
		fprintf(stderr, "fp8-check-gpu: cudaMalloc failed\n");
		goto out;
	}
	for (int i = 0; i < ROWS * OUT; i++)
		dy[i] = (float)((i * 13) % 29 - 14) * 1e-3f;
	cudaMemcpy(ddy, dy, sizeof(dy), cudaMemcpyHostToDevice);
	float expect[3] = {1, 1, 1};
	for (int t = 0; t < steps; t++) {
		float sc[3];
		for (int i = 0; i < ROWS * IN; i++)
			x[i] = (float)(1 + t % 3) * (float)((i * 37 + t) % 101 - 50) / 50.0f;
		cudaMemcpy(dx_, x, sizeof(x), cudaMemcpyHostToDevice);
		accel_view vx = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, dx_,
		                 ROWS * IN};
		accel_view vy = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, dy_,
		                 ROWS * OUT};
		accel_view vdy = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, ddy,
		                  ROWS * OUT};
		accel_view vdx = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, ddx,
		                  ROWS * IN};
		if (accel_unit_pre_forward(ctx, unit) || g->scales(g, w, sc)) {
			bad(ctx, "pre_forward");
			goto out;
		}
		for (int j = 0; j < 3; j++)
			if (sc[j] != expect[j]) {
				fprintf(stderr, "fp8-check-gpu: step %d scale %d is %a, expected %a\n", t, j,
				        sc[j], expect[j]);
				goto out;
			}
		if (g->linear_forward(g, w, ROWS, &vx, &vy, ws) ||
		    cudaMemcpy(y, dy_, sizeof(y), cudaMemcpyDeviceToHost) ||
		    cudaMemcpy(W, accel_param_data(ctx, w), sizeof(W), cudaMemcpyDeviceToHost)) {
			bad(ctx, "linear_forward");
			goto out;
		}
		double worst = 0;
		for (int i = 0; i < ROWS; i++)
			for (int j = 0; j < OUT; j++) {
				double s = 0, sa = 0;
				for (int k = 0; k < IN; k++) {
					double p = (double)fp8_decode(ACCEL_DTYPE_F8E4M3,
					                              fp8_encode(ACCEL_DTYPE_F8E4M3,
					                                         x[i * IN + k] * sc[0])) / sc[0] *
					           (double)fp8_decode(ACCEL_DTYPE_F8E4M3,
					                              fp8_encode(ACCEL_DTYPE_F8E4M3,
					                                         W[j * IN + k] * sc[1])) / sc[1];
					s += p;
					sa += fabs(p);
				}
				double e = fabs(y[i * OUT + j] - s) / (sa + 1e-30);
				worst = e > worst ? e : worst;
			}
		printf("step %d: forward worst error / sum|xw| %.3g (tolerance %g)\n", t, worst, RTOL);
		if (!(worst <= RTOL)) {
			fprintf(stderr, "fp8-check-gpu: step %d: cuBLASLt forward off by %.3g\n", t, worst);
			goto out;
		}
		float wa = amax_of(W, OUT * IN);
		if (accel_unit_post_forward(ctx, unit) || accel_unit_pre_backward(ctx, unit)) {
			bad(ctx, "hooks");
			goto out;
		}
		accel_view vdw = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0,
		                  accel_param_grad(ctx, w), OUT * IN};
		float dW[OUT * IN], dX[ROWS * IN];
		if (g->linear_backward(g, w, ROWS, &vdy, &vdx, &vdw, 0, ws) ||
		    cudaMemcpy(dW, vdw.data, sizeof(dW), cudaMemcpyDeviceToHost) ||
		    cudaMemcpy(dX, ddx, sizeof(dX), cudaMemcpyDeviceToHost)) {
			bad(ctx, "linear_backward");
			goto out;
		}
		/* dW = dY^T X and dX = dY W, the operands as the step quantized them */
		double wdw = 0, wdx = 0;
		for (int o = 0; o < OUT; o++)
			for (int k = 0; k < IN; k++) {
				double s = 0, sa = 0;
				for (int r = 0; r < ROWS; r++) {
					double p = q(ACCEL_DTYPE_F8E5M2, dy[r * OUT + o], sc[2]) *
					           q(ACCEL_DTYPE_F8E4M3, x[r * IN + k], sc[0]);
					s += p;
					sa += fabs(p);
				}
				double e = fabs(dW[o * IN + k] - s) / (sa + 1e-30);
				wdw = e > wdw ? e : wdw;
			}
		for (int r = 0; r < ROWS; r++)
			for (int k = 0; k < IN; k++) {
				double s = 0, sa = 0;
				for (int o = 0; o < OUT; o++) {
					double p = q(ACCEL_DTYPE_F8E5M2, dy[r * OUT + o], sc[2]) *
					           q(ACCEL_DTYPE_F8E4M3, W[o * IN + k], sc[1]);
					s += p;
					sa += fabs(p);
				}
				double e = fabs(dX[r * IN + k] - s) / (sa + 1e-30);
				wdx = e > wdx ? e : wdx;
			}
		printf("step %d: dW (k = %d rows, padded to 16) worst error / sum|dy x| %.3g, dX %.3g "
		       "(tolerance %g)\n", t, ROWS, wdw, wdx, RTOL);
		if (!(wdw <= RTOL) || !(wdx <= RTOL)) {
			fprintf(stderr, "fp8-check-gpu: step %d: cuBLASLt backward off by %.3g (dW), %.3g "
			        "(dX)\n", t, wdw, wdx);
			goto out;
		}
		if (accel_unit_post_backward(ctx, unit) || accel_step(ctx)) {
			bad(ctx, "backward/step");
			goto out;
		}
		expect[0] = scale_for(448.0f, amax_of(x, ROWS * IN));
		expect[1] = scale_for(448.0f, wa);
		expect[2] = scale_for(57344.0f, amax_of(dy, ROWS * OUT));
	}
	printf("fp8 on cuBLASLt through accel: %d steps ok\n", steps);
	rc = 0;
out:
	cudaFree(dx_);
	cudaFree(dy_);
	cudaFree(ddx);
	cudaFree(ddy);
	cudaFree(ws);
	accel_ctx_free(ctx);
	return rc;
}
