/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_cuda_none.c: gpt2_cuda.h in a build without CUDA
 * (meson found no CUDA toolkit or cuBLASLt): gpt2_cuda_device_count() is
 * -1, so --device cuda says the build has no CUDA; the rest fails. */
#include <stdio.h>

#include "gpt2_cuda.h"

int gpt2_cuda_device_count(void)
{
	return -1;
}

int gpt2_cuda_new(const gpt2_config *c, int B, int recompute, int device, int prec,
                  gpt2_cuda **ret, char *err, size_t errcap)
{
	(void)c, (void)B, (void)recompute, (void)device, (void)prec;
	*ret = NULL;
	snprintf(err, errcap, "accel-gpt2 was built without CUDA (meson found no CUDA toolkit "
	         "with cuBLASLt; configure with -Dcuda=enabled -Dcublaslt=enabled)");
	return -1;
}

void gpt2_cuda_free(gpt2_cuda *g)
{
	(void)g;
}

void *gpt2_cuda_stream(const gpt2_cuda *g)
{
	(void)g;
	return NULL;
}

const char *gpt2_cuda_error(const gpt2_cuda *g)
{
	(void)g;
	return "built without CUDA";
}

const char *gpt2_cuda_name(const gpt2_cuda *g)
{
	(void)g;
	return "none";
}

size_t gpt2_cuda_work_bytes(const gpt2_cuda *g)
{
	(void)g;
	return 0;
}

#define NONE(...)            \
	{                        \
		(void)g;             \
		return -1;           \
	}

int gpt2_cuda_use_stream(gpt2_cuda *g, int own) NONE()
int gpt2_cuda_embed_forward(gpt2_cuda *g, const int32_t *tokens, const void *wte,
                            const void *wpe, int n) NONE()
int gpt2_cuda_block_forward(gpt2_cuda *g, int l, const void *const *p, int n) NONE()
int gpt2_cuda_head_forward(gpt2_cuda *g, const void *lnf_w, const void *lnf_b, const void *head,
                           int n) NONE()
int gpt2_cuda_loss(gpt2_cuda *g, const int32_t *targets, int n, double dlogits_scale,
                   double *ret_sum) NONE()
int gpt2_cuda_head_backward(gpt2_cuda *g, const void *lnf_w, const void *head, float *dlnf_w,
                            float *dlnf_b, float *dhead, int n) NONE()
int gpt2_cuda_block_backward(gpt2_cuda *g, int l, const void *const *p, float *const *gr,
                             int n) NONE()
int gpt2_cuda_embed_backward(gpt2_cuda *g, float *dwte, float *dwpe, int n) NONE()
int gpt2_cuda_logits_row(gpt2_cuda *g, int row, float *dst) NONE()
int gpt2_cuda_to_host(gpt2_cuda *g, float *dst, const void *src, size_t n, int f32_src) NONE()
int gpt2_cuda_sync(gpt2_cuda *g) NONE()
int gpt2_cuda_set_linear_hooks(gpt2_cuda *g, gpt2_cuda_fwd_fn fwd, gpt2_cuda_bwd_fn bwd,
                               void *user) NONE()
int gpt2_cuda_alloc(gpt2_cuda *g, size_t bytes, void **ret) NONE()
void gpt2_cuda_free_mem(void *p)
{
	(void)p;
}
