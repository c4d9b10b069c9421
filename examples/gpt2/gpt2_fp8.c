/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_fp8.c: fp8 linear layers of accel-gpt2 on a GPU
 * (gpt2_fp8.h), through the fp8 plugin's GEMM extension. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel-fp8.h"
#include "gpt2_fp8.h"

static const int linear_k[4] = {GPT2_QKV_W, GPT2_APROJ_W, GPT2_FC_W, GPT2_MPROJ_W};

struct gpt2_fp8 {
	accel_ctx *ctx;
	const accel_fp8_gemm_v1 *g;
	gpt2_config c;
	gpt2_cuda *gpu;
	int32_t dev;
	int layers;
	uint32_t *param;   /* [layers * GPT2_BLOCK_TENSORS] */
	void **ws;         /* [layers * GPT2_BLOCK_TENSORS]: NULL where not fp8 */
	int *on;           /* the same: the tensor computes in fp8 */
};

int gpt2_fp8_wanted(accel_ctx *ctx)
{
	const char *mp = NULL;
	return accel_config_string(ctx, "mixed_precision", &mp) == ACCEL_OK && mp &&
	       !strcmp(mp, "fp8");
}

uint32_t gpt2_fp8_compute_dtype(int k, int64_t out, int64_t in)
{
	int linear = k == GPT2_QKV_W || k == GPT2_APROJ_W || k == GPT2_FC_W || k == GPT2_MPROJ_W;
	return linear && out % 16 == 0 && in % 16 == 0 ? ACCEL_DTYPE_F8E4M3 : 0;
}

gpt2_fp8 *gpt2_fp8_free(gpt2_fp8 *f)
{
	if (!f)
		return NULL;
	if (f->gpu)
		gpt2_cuda_set_linear_hooks(f->gpu, NULL, NULL, NULL);
	for (int i = 0; f->ws && i < f->layers * GPT2_BLOCK_TENSORS; i++)
		gpt2_cuda_free_mem(f->ws[i]);
	free(f->ws);
	free(f->on);
	free(f->param);
	free(f);
	return NULL;
}

static accel_view view(const gpt2_fp8 *f, const void *p, uint64_t n)
{
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_F32,
	                .device = ACCEL_DEVICE_CUDA, .device_index = f->dev, .data = (void *)p,
	                .numel = n};
	return v;
}

static void report(const gpt2_fp8 *f, const char *what, int l, int k)
{
	fprintf(stderr, "accel-gpt2: fp8 %s of h.%d.%s: %s\n", what, l, gpt2_block_names[k],
	        accel_errmsg(f->ctx));
}

/* gpt2_cuda's linear hooks */
static int fwd(void *user, int l, int k, const void *x, void *y, int rows)
{
	gpt2_fp8 *f = user;
	int i = l * GPT2_BLOCK_TENSORS + k;
	if (!f->on[i])
		return 1;
	int64_t sh[2];
	gpt2_block_shape(&f->c, k, sh);   /* [out, in] */
	accel_view vx = view(f, x, (uint64_t)rows * (uint64_t)sh[1]),
	           vy = view(f, y, (uint64_t)rows * (uint64_t)sh[0]);
	if (f->g->linear_forward(f->g, f->param[i], (uint64_t)rows, &vx, &vy, f->ws[i])) {
		report(f, "forward", l, k);
		return -1;
	}
	return 0;
}

static int bwd(void *user, int l, int k, const void *dy, void *dx, float *dW, int rows)
{
	gpt2_fp8 *f = user;
	int i = l * GPT2_BLOCK_TENSORS + k;
	if (!f->on[i])
		return 1;
	int64_t sh[2];
	gpt2_block_shape(&f->c, k, sh);
	accel_view vdy = view(f, dy, (uint64_t)rows * (uint64_t)sh[0]),
	           vdx = view(f, dx, (uint64_t)rows * (uint64_t)sh[1]),
	           vdw = view(f, dW, (uint64_t)sh[0] * (uint64_t)sh[1]);
	/* accumulate: gpt2's backward adds into the gradients */
	if (f->g->linear_backward(f->g, f->param[i], (uint64_t)rows, &vdy, &vdx, &vdw, 1,
	                          f->ws[i])) {
		report(f, "backward", l, k);
		return -1;
	}
	return 0;
}

int gpt2_fp8_new(accel_ctx *ctx, const gpt2_config *c, const uint32_t *p_block, int rows,
                 gpt2_cuda *gpu, int32_t device_index, gpt2_fp8 **ret)
{
	size_t nt = (size_t)c->layers * GPT2_BLOCK_TENSORS;
	gpt2_fp8 *f = calloc(1, sizeof(*f));
	int rc;
	*ret = NULL;
	if (!f || !(f->param = calloc(nt, sizeof(*f->param))) || !(f->ws = calloc(nt, sizeof(void *))) ||
	    !(f->on = calloc(nt, sizeof(int)))) {
		gpt2_fp8_free(f);
		return accel_set_error(ctx, ACCEL_ERR_NOMEM, "accel-gpt2: out of memory (fp8)");
	}
	f->ctx = ctx;
	f->c = *c;
	f->layers = c->layers;
	f->dev = device_index;
	memcpy(f->param, p_block, nt * sizeof(*f->param));
	if (!gpu) {
		gpt2_fp8_free(f);
		return accel_set_error(ctx, ACCEL_ERR_UNSUPPORTED, "accel-gpt2: mixed_precision fp8 "
		                       "runs on --device cuda only (the CPU math has no fp8 GEMMs; use "
		                       "no, bf16 or fp16 on the CPU)");
	}
	f->g = accel_plugin_extension(ctx, "fp8", ACCEL_FP8_GEMM_NAME, ACCEL_FP8_GEMM_VERSION);
	if (!f->g) {
		gpt2_fp8_free(f);
		return accel_errcode(ctx) ? accel_errcode(ctx) : ACCEL_ERR_UNSUPPORTED;
	}
	if (f->g->path != ACCEL_FP8_PATH_CUBLASLT) {
		gpt2_fp8_free(f);
		return accel_set_error(ctx, ACCEL_ERR_UNSUPPORTED, "accel-gpt2: mixed_precision fp8 "
		                       "on --device cuda needs the fp8 plugin's cuBLASLt path (a GPU "
		                       "of compute capability 8.9 or newer and the plugin's CUDA part); "
		                       "this process has only its CPU emulation");
	}
	/* the weight gradient dW = dY^T . X contracts over the token rows
	 * (n sequences of seq tokens): cuBLASLt's FP8 GEMMs need the inner
	 * dimension a multiple of 16, for every n */
	if (c->seq % 16) {
		gpt2_fp8_free(f);
		return accel_set_error(ctx, ACCEL_ERR_CONFIG, "accel-gpt2: mixed_precision fp8 needs "
		                       "--seq-len a multiple of 16 (cuBLASLt's FP8 weight-gradient "
		                       "GEMMs contract over the token rows), not %d (e.g. %d), or "
		                       "mixed_precision bf16", c->seq, (c->seq / 16 + 1) * 16);
	}
	/* the plugin finds its parameters in the first unit hook: one
	 * forward-only visit of unit 0 (collective under sharded strategies,
	 * so every rank makes it) */
	if ((rc = accel_set_grad_enabled(ctx, 0)) || (rc = accel_unit_pre_forward(ctx, 0)) ||
	    (rc = accel_unit_post_forward(ctx, 0)) || (rc = accel_set_grad_enabled(ctx, 1))) {
		gpt2_fp8_free(f);
		return rc;
	}
	for (int l = 0; l < c->layers; l++)
		for (int j = 0; j < 4; j++) {
			int k = linear_k[j], i = l * GPT2_BLOCK_TENSORS + k;
			int64_t sh[2];
			uint64_t bytes;
			gpt2_block_shape(c, k, sh);
			if (!(f->on[i] = gpt2_fp8_compute_dtype(k, sh[0], sh[1]) != 0))
				continue;
			if ((rc = f->g->linear_workspace(f->g, f->param[i], (uint64_t)rows, &bytes))) {
				gpt2_fp8_free(f);
				return rc;
			}
			if (gpt2_cuda_alloc(gpu, bytes, &f->ws[i])) {
				rc = accel_set_error(ctx, ACCEL_ERR_NOMEM, "accel-gpt2: no device memory for "
				                     "the fp8 work space of h.%d.%s: %s", l,
				                     gpt2_block_names[k], gpt2_cuda_error(gpu));
				gpt2_fp8_free(f);
				return rc;
			}
		}
	f->gpu = gpu;
	if (gpt2_cuda_set_linear_hooks(gpu, fwd, bwd, f)) {
		rc = accel_set_error(ctx, ACCEL_ERR_STATE, "accel-gpt2: %s", gpt2_cuda_error(gpu));
		gpt2_fp8_free(f);
		return rc;
	}
	*ret = f;
	return ACCEL_OK;
}
