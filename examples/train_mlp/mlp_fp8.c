/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/mlp_fp8.c: fp8 linear layers (mlp_fp8.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel-fp8.h"
#include "mlp_fp8.h"

struct mlp_fp8 {
	accel_ctx *ctx;
	const accel_fp8_gemm_v1 *g;
	const mlp_shape *shape;
	mlp_cuda *gpu;              /* --device cuda, else NULL                    */
	int32_t dev;
	int on[MLP_MAX_LAYERS];     /* fc{l} computes in fp8                      */
	uint32_t weight[MLP_MAX_LAYERS];
	void *ws[MLP_MAX_LAYERS];   /* per fp8 layer: forward keeps X quantized there */
};

uint32_t mlp_fp8_compute_dtype(int64_t out, int64_t in)
{
	return out % 16 == 0 && in % 16 == 0 ? ACCEL_DTYPE_F8E4M3 : 0;
}

int mlp_fp8_wanted(accel_ctx *ctx)
{
	const char *mp = NULL;
	return accel_config_string(ctx, "mixed_precision", &mp) == ACCEL_OK && mp &&
	       !strcmp(mp, "fp8");
}

int mlp_fp8_add_weight(accel_ctx *ctx, const char *unit, const char *name,
                       const int64_t *shape, const accel_init *init, uint32_t *ret_param)
{
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32, .unit = unit,
	                      .name = name, .ndim = 2, .shape = shape,
	                      .device = ACCEL_DEVICE_CPU, .init = init,
	                      .compute_dtype = mlp_fp8_compute_dtype(shape[0], shape[1])};
	return accel_model_add(ctx, &d, ret_param);
}

mlp_fp8 *mlp_fp8_free(mlp_fp8 *f)
{
	if (!f)
		return NULL;
	if (f->gpu)
		mlp_cuda_set_gemm_hooks(f->gpu, NULL, NULL, NULL);
	for (int l = 0; l < MLP_MAX_LAYERS; l++)
		if (f->gpu)
			mlp_cuda_free_mem(f->ws[l]);
		else
			free(f->ws[l]);
	free(f);
	return NULL;
}

static accel_view view(const mlp_fp8 *f, const void *p, uint64_t n)
{
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_F32,
	                .device = f->gpu ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU,
	                .device_index = f->gpu ? f->dev : 0, .data = (void *)p, .numel = n};
	return v;
}

static void report(mlp_fp8 *f, const char *what, int l)
{
	fprintf(stderr, "train_mlp: fp8 %s of fc%d: %s\n", what, l, accel_errmsg(f->ctx));
}

/* mlp_cuda's GEMM hooks (--device cuda) */
static int gpu_fwd(void *user, int l, const void *x, void *y, int n)
{
	mlp_fp8 *f = user;
	if (!f->on[l])
		return 1;
	int in = f->shape->dims[l], out = f->shape->dims[l + 1];
	accel_view vx = view(f, x, (uint64_t)n * in), vy = view(f, y, (uint64_t)n * out);
	if (f->g->linear_forward(f->g, f->weight[l], (uint64_t)n, &vx, &vy, f->ws[l])) {
		report(f, "forward", l);
		return -1;
	}
	return 0;
}

static int gpu_bwd(void *user, int l, const void *dy, void *dx, void *dW, int n, int accumulate)
{
	mlp_fp8 *f = user;
	if (!f->on[l])
		return 1;
	int in = f->shape->dims[l], out = f->shape->dims[l + 1];
	accel_view vdy = view(f, dy, (uint64_t)n * out), vdx = view(f, dx, (uint64_t)n * in);
	accel_view vdw = view(f, dW, (uint64_t)out * in);
	if (f->g->linear_backward(f->g, f->weight[l], (uint64_t)n, &vdy, dx ? &vdx : NULL, &vdw,
	                          (uint32_t)!!accumulate, f->ws[l])) {
		report(f, "backward", l);
		return -1;
	}
	return 0;
}

int mlp_fp8_new(accel_ctx *ctx, const mlp_shape *s, const uint32_t *weight, int cap,
                mlp_cuda *gpu, int32_t device_index, mlp_fp8 **ret)
{
	mlp_fp8 *f = calloc(1, sizeof(*f));
	int rc;
	if (!f)
		return accel_set_error(ctx, ACCEL_ERR_NOMEM, "train_mlp: out of memory (fp8)");
	f->ctx = ctx;
	f->shape = s;
	f->gpu = gpu;
	f->dev = device_index;
	f->g = accel_plugin_extension(ctx, "fp8", ACCEL_FP8_GEMM_NAME, ACCEL_FP8_GEMM_VERSION);
	if (!f->g) {
		mlp_fp8_free(f);
		return accel_errcode(ctx) ? accel_errcode(ctx) : ACCEL_ERR_UNSUPPORTED;
	}
	/* the plugin finds its parameters in the first unit hook: one
	 * forward-only visit of unit 0 (a collective under sharded strategies,
	 * so every rank makes it) */
	if ((rc = accel_set_grad_enabled(ctx, 0)) || (rc = accel_unit_pre_forward(ctx, 0)) ||
	    (rc = accel_unit_post_forward(ctx, 0)) || (rc = accel_set_grad_enabled(ctx, 1))) {
		mlp_fp8_free(f);
		return rc;
	}
	for (int l = 0; l < s->n_layers; l++) {
		uint64_t bytes;
		f->weight[l] = weight[l];
		f->on[l] = mlp_fp8_compute_dtype(s->dims[l + 1], s->dims[l]) != 0;
		if (!f->on[l])
			continue;
		if ((rc = f->g->linear_workspace(f->g, weight[l], (uint64_t)cap, &bytes))) {
			mlp_fp8_free(f);
			return rc;
		}
		if (gpu ? mlp_cuda_alloc(gpu, bytes, &f->ws[l]) : !(f->ws[l] = malloc(bytes ? bytes : 1))) {
			mlp_fp8_free(f);
			return accel_set_error(ctx, ACCEL_ERR_NOMEM, "train_mlp: out of memory for "
			                       "the fp8 workspace of fc%d", l);
		}
	}
	if (gpu && mlp_cuda_set_gemm_hooks(gpu, gpu_fwd, gpu_bwd, f)) {
		int code = accel_set_error(ctx, ACCEL_ERR_STATE, "train_mlp: %s", mlp_cuda_error(gpu));
		mlp_fp8_free(f);
		return code;
	}
	*ret = f;
	return ACCEL_OK;
}

static accel_view f32(float *p, uint64_t n)
{
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_F32,
	                .device = ACCEL_DEVICE_CPU, .data = p, .numel = n};
	return v;
}

int mlp_fp8_forward_layer(mlp_fp8 *f, const mlp_shape *s, mlp_work *w, int l, const float *W,
                          const float *b, int n)
{
	int in = s->dims[l], out = s->dims[l + 1];
	if (!f->on[l]) {
		mlp_forward_layer(s, w, l, W, b, n);
		return ACCEL_OK;
	}
	float *y = w->act[l + 1];
	accel_view vx = f32(w->act[l], (uint64_t)n * in), vy = f32(y, (uint64_t)n * out);
	int rc = f->g->linear_forward(f->g, f->weight[l], (uint64_t)n, &vx, &vy, f->ws[l]);
	if (rc)
		return rc;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < out; j++) {
			float v = y[(size_t)i * out + j] + b[j];
			y[(size_t)i * out + j] = l < s->n_layers - 1 && !(v > 0.0f) ? 0.0f : v;
		}
	return ACCEL_OK;
}

int mlp_fp8_backward_layer(mlp_fp8 *f, const mlp_shape *s, mlp_work *w, int l, const float *W,
                           float *dW, float *db, int n, int accumulate)
{
	int in = s->dims[l], out = s->dims[l + 1];
	if (!f->on[l]) {
		mlp_backward_layer(s, w, l, W, dW, db, n, accumulate);
		return ACCEL_OK;
	}
	int cur = (s->n_layers - 1 - l) & 1;   /* as mlp_backward_layer */
	float *dy = w->dact[cur], *dx = w->dact[cur ^ 1];
	accel_view vdy = f32(dy, (uint64_t)n * out), vdx = f32(dx, (uint64_t)n * in);
	accel_view vdw = f32(dW, (uint64_t)out * in);
	int rc = f->g->linear_backward(f->g, f->weight[l], (uint64_t)n, &vdy, l ? &vdx : NULL, &vdw,
	                               (uint32_t)!!accumulate, f->ws[l]);
	if (rc)
		return rc;
	if (!accumulate)
		memset(db, 0, (size_t)out * sizeof(*db));
	for (int i = 0; i < n; i++)
		for (int j = 0; j < out; j++)
			db[j] += dy[(size_t)i * out + j];
	if (l == 0)
		return ACCEL_OK;
	const float *x = w->act[l];
	for (size_t i = 0; i < (size_t)n * in; i++)
		if (!(x[i] > 0.0f))
			dx[i] = 0.0f;
	return ACCEL_OK;
}
