/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_device.c: gpt2_device.h, the CPU or GPU math of a unit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_device.h"

static int gpu_fail(const gpt2_cuda *g, const char *what)
{
	fprintf(stderr, "accel-gpt2: %s on the GPU: %s\n", what, gpt2_cuda_error(g));
	return -1;
}

int gpt2_dev_check(const char *dev)
{
	int n = gpt2_cuda_device_count();
	if (n < 0) {
		fprintf(stderr, "accel-gpt2: --device %s: accel-gpt2 was built without CUDA (meson "
		        "found no CUDA toolkit with cuBLASLt; configure with -Dcuda=enabled "
		        "-Dcublaslt=enabled); it does not fall back to the CPU\n", dev);
		return 2;
	}
	if (n == 0) {
		fprintf(stderr, "accel-gpt2: --device %s: no CUDA device is visible (see nvidia-smi "
		        "and CUDA_VISIBLE_DEVICES)\n", dev);
		return 2;
	}
	if (!strncmp(dev, "cuda:", 5) && atoi(dev + 5) >= n) {
		fprintf(stderr, "accel-gpt2: --device %s: there are %d CUDA devices (0 .. %d)\n", dev,
		        n, n - 1);
		return 2;
	}
	return 0;
}

static int accel_fail(accel_ctx *ctx, const char *what, int rc)
{
	fprintf(stderr, "accel-gpt2: %s: %s (%s)\n", what,
	        *accel_errmsg(ctx) ? accel_errmsg(ctx) : "no message", accel_status_str(rc));
	return -1;
}

int gpt2_dev_gpu_setup(accel_ctx *ctx, const gpt2_config *c, int cap, int recompute, int prec,
                       const char *dev, int32_t *ret_index, gpt2_cuda **ret)
{
	char err[600];
	int32_t bad = 0;
	int rc, n = gpt2_cuda_device_count();
	*ret = NULL;
	if (n < 1)   /* gpt2_dev_check said so */
		return -1;
	*ret_index = !strncmp(dev, "cuda:", 5) ? (int32_t)atoi(dev + 5)
	                                       : (int32_t)(accel_local_rank(ctx) % n);
	if (gpt2_cuda_new(c, cap, recompute, *ret_index, prec, ret, err, sizeof(err))) {
		fprintf(stderr, "accel-gpt2: --device %s: %s\n", dev, err);
		bad = 1;
	}
	if ((rc = accel_allreduce(ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX)))
		return accel_fail(ctx, "agreeing on the GPU set-up", rc);
	if (bad)
		return -1;
	if (gpt2_cuda_use_stream(*ret, 1))
		return gpu_fail(*ret, "creating the compute stream");
	if ((rc = accel_set_stream(ctx, gpt2_cuda_stream(*ret))))
		return accel_fail(ctx, "accel_set_stream", rc);
	return 0;
}

int gpt2_dev_embed_forward(gpt2_work *w, gpt2_cuda *g, const int32_t *tokens, const float *wte,
                           const float *wpe, int n)
{
	if (!g) {
		gpt2_embed_forward(w, tokens, wte, wpe, n);
		return 0;
	}
	return gpt2_cuda_embed_forward(g, tokens, wte, wpe, n) ? gpu_fail(g, "the embeddings") : 0;
}

int gpt2_dev_block_forward(gpt2_work *w, gpt2_cuda *g, int l, const float *const *p, int n)
{
	if (!g) {
		gpt2_block_forward(w, l, p, n);
		return 0;
	}
	return gpt2_cuda_block_forward(g, l, (const void *const *)p, n)
	               ? gpu_fail(g, "a block's forward") : 0;
}

int gpt2_dev_head_forward(gpt2_work *w, gpt2_cuda *g, const float *lw, const float *lb,
                          const float *head, int n)
{
	if (!g) {
		gpt2_head_forward(w, lw, lb, head, n);
		return 0;
	}
	return gpt2_cuda_head_forward(g, lw, lb, head, n) ? gpu_fail(g, "the head") : 0;
}

int gpt2_dev_loss(gpt2_work *w, gpt2_cuda *g, const int32_t *targets, int n,
                  double dlogits_scale, double *ret_sum)
{
	if (!g) {
		*ret_sum = gpt2_loss(w, targets, n, dlogits_scale);
		return 0;
	}
	return gpt2_cuda_loss(g, targets, n, dlogits_scale, ret_sum)
	               ? gpu_fail(g, "the cross-entropy") : 0;
}

int gpt2_dev_head_backward(gpt2_work *w, gpt2_cuda *g, const float *lw, const float *head,
                           float *dlw, float *dlb, float *dhead, int n)
{
	if (!g) {
		gpt2_head_backward(w, lw, head, dlw, dlb, dhead, n);
		return 0;
	}
	return gpt2_cuda_head_backward(g, lw, head, dlw, dlb, dhead, n)
	               ? gpu_fail(g, "the head's backward") : 0;
}

int gpt2_dev_block_backward(gpt2_work *w, gpt2_cuda *g, int l, const float *const *p,
                            float *const *gr, int n)
{
	if (!g) {
		gpt2_block_backward(w, l, p, gr, n);
		return 0;
	}
	return gpt2_cuda_block_backward(g, l, (const void *const *)p, gr, n)
	               ? gpu_fail(g, "a block's backward") : 0;
}

int gpt2_dev_embed_backward(gpt2_work *w, gpt2_cuda *g, float *dwte, float *dwpe, int n)
{
	if (!g) {
		gpt2_embed_backward(w, dwte, dwpe, n);
		return 0;
	}
	return gpt2_cuda_embed_backward(g, dwte, dwpe, n)
	               ? gpu_fail(g, "the embeddings' backward") : 0;
}

const float *gpt2_dev_logits_row(gpt2_work *w, gpt2_cuda *g, int row, int V, float *buf)
{
	if (!g)
		return w->logits + (size_t)row * (size_t)V;
	if (gpt2_cuda_logits_row(g, row, buf)) {
		gpu_fail(g, "reading the logits");
		return NULL;
	}
	return buf;
}

int gpt2_dev_param_to_host(gpt2_cuda *g, float *dst, const float *src, size_t n, int f32_src)
{
	if (!g) {
		memcpy(dst, src, n * sizeof(float));
		return 0;
	}
	return gpt2_cuda_to_host(g, dst, src, n, f32_src)
	               ? gpu_fail(g, "copying a parameter to the host") : 0;
}
