/* SPDX-License-Identifier: MIT */
/*
 * tests/progs/fp8-check.c: the fp8 plugin through accel (driven by
 * tests/test-fp8-recipe.sh).  One linear layer fc0 ([OUT, IN], compute_dtype
 * f8e4m3, f32 working weights) under mixed_precision fp8.
 *
 *   fp8-check train STEPS [SAVE_DIR SAVE_AT]
 *       Each step: linear_forward of X_rank (rank r's inputs have amax
 *       (r + 1) * step-dependent value, so ranks differ), backward with a
 *       fixed dY, accel_step.  Checks on every rank and step:
 *        - the forward output equals, bit for bit, the f32 GEMM of the
 *          operands quantized and dequantized through the table;
 *        - the scales are the ones every rank expects from the MAXIMUM
 *          over all ranks' amax (computed here from the known inputs), so
 *          ranks agree and the all-reduce is a max;
 *        - scale * amax <= fp8_max.
 *       The expected scales follow the config's fp8.margin,
 *       fp8.interval (recomputed only on every interval-th step),
 *       fp8.amax_history_len and fp8.amax_compute_algo (the maximum of
 *       the last amax_history_len steps' amax, or the latest one; X's
 *       amax cycles 1, 2, 3 times the rank's factor, so a history of 2 or
 *       more steps differs from the latest step's at every third step).
 *       Prints "scales STEP X W DY" (rank 0, %a).  With SAVE_DIR, saves
 *       the state after step SAVE_AT.
 *   fp8-check resume DIR
 *       Loads DIR and prints "scales loaded X W DY" (rank 0).
 * Exit 0 on success, 1 on a failed check (the reason on stderr).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "accel-fp8.h"

#define IN 32
#define OUT 16
#define ROWS 8
#define MAX_STEPS 64

static int bad(accel_ctx *ctx, const char *what)
{
	fprintf(stderr, "fp8-check: %s: %s\n", what, ctx ? accel_errmsg(ctx) : "");
	return 1;
}

/* rank r's inputs at step t: amax (r + 1) * (1 + t % 3) */
static void inputs(int rank, int t, float *x)
{
	float top = (float)(rank + 1) * (float)(1 + t % 3);
	for (int i = 0; i < ROWS * IN; i++)
		x[i] = top * (float)((i * 37 + t) % 101 - 50) / 50.0f;
	x[(t * 7) % (ROWS * IN)] = top;   /* exactly top somewhere */
}

static float amax_of(const float *v, int n)
{
	float m = 0;
	for (int i = 0; i < n; i++)
		m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
	return m;
}

int main(int argc, char **argv)
{
	accel_ctx *ctx = NULL;
	int rc = 1;
	if (argc < 3) {
		fprintf(stderr, "usage: fp8-check train STEPS [DIR AT] | resume DIR\n");
		return 2;
	}
	int train = !strcmp(argv[1], "train");
	if (accel_ctx_new(NULL, &ctx))
		return bad(ctx, "accel_ctx_new");
	int rank = accel_rank(ctx), world = accel_world_size(ctx);
	int64_t wshape[2] = {OUT, IN};
	accel_init init = accel_init_uniform(-0.5, 0.5);
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32, .unit = "fc0",
	                      .name = "fc0.weight", .ndim = 2, .shape = wshape,
	                      .device = ACCEL_DEVICE_CPU, .init = &init,
	                      .compute_dtype = ACCEL_DTYPE_F8E4M3};
	uint32_t w, unit;
	if (accel_model_add(ctx, &d, &w) || accel_model_find_unit(ctx, "fc0", &unit) ||
	    accel_prepare(ctx)) {
		bad(ctx, "model");
		goto out;
	}
	const accel_fp8_gemm_v1 *g = accel_plugin_extension(ctx, "fp8", ACCEL_FP8_GEMM_NAME,
	                                                    ACCEL_FP8_GEMM_VERSION);
	if (!g) {
		bad(ctx, "accel_plugin_extension");
		goto out;
	}
	if (!train) {
		float sc[3];
		if (accel_load_state(ctx, argv[2]) || accel_unit_pre_forward(ctx, unit) ||
		    g->scales(g, w, sc) || accel_unit_post_forward(ctx, unit)) {
			bad(ctx, "resume");
			goto out;
		}
		if (rank == 0)
			printf("scales loaded %a %a %a\n", sc[0], sc[1], sc[2]);
		rc = 0;
		goto out;
	}
	int steps = atoi(argv[2]);
	int64_t margin = 0, interval = 1, hist_len = 1;
	const char *algo = "max";
	if (accel_config_int(ctx, "fp8.margin", &margin) ||
	    accel_config_int(ctx, "fp8.interval", &interval) ||
	    accel_config_int(ctx, "fp8.amax_history_len", &hist_len) ||
	    accel_config_string(ctx, "fp8.amax_compute_algo", &algo)) {
		bad(ctx, "reading fp8.margin / interval / amax_history_len / amax_compute_algo");
		goto out;
	}
	int most_recent = !strcmp(algo, "most_recent");
	if (steps < 0 || steps > MAX_STEPS) {
		fprintf(stderr, "fp8-check: at most %d steps\n", MAX_STEPS);
		goto out;
	}
	const char *save_dir = argc > 4 ? argv[3] : NULL;
	int save_at = argc > 4 ? atoi(argv[4]) : -1;
	uint64_t ws_bytes;
	float x[ROWS * IN], y[ROWS * OUT], dy[ROWS * OUT], dx[ROWS * IN], ref[ROWS * OUT];
	float xd[ROWS * IN], wd[OUT * IN];
	uint8_t xq[ROWS * IN], wq[OUT * IN];
	float expect[3] = {1, 1, 1};   /* TE's initial scales */
	float seen[MAX_STEPS][3];      /* each step's amax over all ranks */
	/* host operands: emulated whatever g->path says (a GPU machine's
	 * cuBLASLt serves device operands) */
	if (accel_unit_pre_forward(ctx, unit) || g->linear_workspace(g, w, ROWS, &ws_bytes) ||
	    accel_unit_post_forward(ctx, unit)) {
		bad(ctx, "linear_workspace");
		goto out;
	}
	void *ws = malloc(ws_bytes);
	for (int i = 0; i < ROWS * OUT; i++)
		dy[i] = (float)((i * 13) % 29 - 14) * 1e-3f;
	for (int t = 0; t < steps; t++) {
		float sc[3];
		accel_view vx = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, x, ROWS * IN};
		accel_view vy = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, y, ROWS * OUT};
		accel_view vdy = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, dy,
		                  ROWS * OUT};
		accel_view vdx = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, dx,
		                  ROWS * IN};
		inputs(rank, t, x);
		if (accel_unit_pre_forward(ctx, unit) || g->scales(g, w, sc)) {
			bad(ctx, "pre_forward");
			goto out_ws;
		}
		for (int j = 0; j < 3; j++)
			if (memcmp(&sc[j], &expect[j], sizeof(float))) {
				fprintf(stderr, "fp8-check: rank %d step %d: scale %d is %a, expected %a (from "
				        "the max amax over %d ranks)\n", rank, t, j, sc[j], expect[j], world);
				goto out_ws;
			}
		if (g->linear_forward(g, w, ROWS, &vx, &vy, ws)) {
			bad(ctx, "linear_forward");
			goto out_ws;
		}
		/* the reference: quantize/dequantize through the table, f32 GEMM */
		const float *W = accel_param_data(ctx, w);
		accel_view vwf = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, (void *)W,
		                  OUT * IN};
		accel_view vxq = {sizeof(accel_view), ACCEL_DTYPE_F8E4M3, ACCEL_DEVICE_CPU, 0, xq,
		                  ROWS * IN};
		accel_view vwq = {sizeof(accel_view), ACCEL_DTYPE_F8E4M3, ACCEL_DEVICE_CPU, 0, wq,
		                  OUT * IN};
		accel_view vxd = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, xd,
		                  ROWS * IN};
		accel_view vwd = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, wd,
		                  OUT * IN};
		if (g->quantize(g, &vxq, &vx, sc[0], NULL) || g->quantize(g, &vwq, &vwf, sc[1], NULL) ||
		    g->dequantize(g, &vxd, &vxq, 1.0f / sc[0]) ||
		    g->dequantize(g, &vwd, &vwq, 1.0f / sc[1])) {
			bad(ctx, "quantize/dequantize");
			goto out_ws;
		}
		for (int i = 0; i < ROWS; i++)
			for (int j = 0; j < OUT; j++) {
				float acc = 0.0f;
				for (int k = 0; k < IN; k++)
					acc += xd[i * IN + k] * wd[j * IN + k];
				ref[i * OUT + j] = 1.0f * acc;
			}
		if (memcmp(y, ref, sizeof(y))) {
			fprintf(stderr, "fp8-check: rank %d step %d: linear_forward differs from the "
			        "quantize-dequantize reference\n", rank, t);
			goto out_ws;
		}
		float w_amax = amax_of(W, OUT * IN);
		if (accel_unit_post_forward(ctx, unit) || accel_unit_pre_backward(ctx, unit)) {
			bad(ctx, "hooks");
			goto out_ws;
		}
		accel_view vdw = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0,
		                  accel_param_grad(ctx, w), OUT * IN};
		if (g->linear_backward(g, w, ROWS, &vdy, &vdx, &vdw, 0, ws) ||
		    accel_unit_post_backward(ctx, unit) || accel_step(ctx)) {
			bad(ctx, "backward/step");
			goto out_ws;
		}
		/* what every rank must now hold: 448 / (max over ranks of amax) for X
		 * (the largest rank's inputs), W (the same weights everywhere), and
		 * 57344 / amax(dY) (HYBRID: E5M2 gradients) */
		float xa = (float)world * (float)(1 + t % 3);
		float fm[3] = {448.0f, 448.0f, 57344.0f}, am[3];
		seen[t][0] = xa;
		seen[t][1] = w_amax;
		seen[t][2] = amax_of(dy, ROWS * OUT);
		/* the history: the last amax_history_len steps (this one
		 * included), its maximum or the latest (most_recent);
		 * (fp8_max / amax) / 2^margin, on every interval-th step */
		for (int j = 0; j < 3; j++) {
			am[j] = seen[t][j];
			for (int64_t k = 1; !most_recent && k < hist_len && k <= t; k++)
				am[j] = seen[t - k][j] > am[j] ? seen[t - k][j] : am[j];
		}
		for (int j = 0; j < 3 && (t + 1) % interval == 0; j++) {
			double bound = ldexp(fm[j], -(int)margin);
			float s = (float)(bound / am[j]);
			while ((double)s * am[j] > bound)
				s = nextafterf(s, 0.0f);
			expect[j] = s;
		}
		if (rank == 0)
			printf("scales %d %a %a %a\n", t, expect[0], expect[1], expect[2]);
		if (save_dir && t == save_at && accel_save_state(ctx, save_dir)) {
			bad(ctx, "accel_save_state");
			goto out_ws;
		}
	}
	rc = 0;
out_ws:
	free(ws);
out:
	accel_ctx_free(ctx);
	return rc;
}
