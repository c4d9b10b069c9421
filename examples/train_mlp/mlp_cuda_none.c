/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/mlp_cuda_none.c: mlp_cuda.h in a build without CUDA
 * (meson found no CUDA toolkit or cuBLASLt): --device cuda says so. */
#include <stdio.h>

#include "mlp_cuda.h"

int mlp_cuda_device_count(void)
{
	return -1;
}

int mlp_cuda_new(const mlp_shape *s, int cap, int device, int half, const mlp_data *train,
                 const mlp_data *test, mlp_cuda **ret, char *err, size_t errcap)
{
	(void)s, (void)cap, (void)device, (void)half, (void)train, (void)test;
	*ret = NULL;
	snprintf(err, errcap, "this train_mlp was built without CUDA (meson found no CUDA toolkit "
	         "with cuBLASLt; configure with -Dcuda=enabled -Dcublaslt=enabled)");
	return -1;
}

void mlp_cuda_free(mlp_cuda *g)
{
	(void)g;
}

void *mlp_cuda_stream(const mlp_cuda *g)
{
	(void)g;
	return NULL;
}

const char *mlp_cuda_error(const mlp_cuda *g)
{
	(void)g;
	return "built without CUDA";
}

const char *mlp_cuda_name(const mlp_cuda *g)
{
	(void)g;
	return "none";
}

#define NONE(...)            \
	{                        \
		(void)g;             \
		return -1;           \
	}

int mlp_cuda_load_batch(mlp_cuda *g, const int64_t *idx, int n) NONE()
int mlp_cuda_load_slice(mlp_cuda *g, int set, int64_t first, int n) NONE()
int mlp_cuda_forward_layer(mlp_cuda *g, int l, const void *W, const void *b, int n) NONE()
int mlp_cuda_loss(mlp_cuda *g, int n, double denom, double weight) NONE()
int mlp_cuda_backward_layer(mlp_cuda *g, int l, const void *W, void *dW, void *db, int n,
                            int accumulate) NONE()
int mlp_cuda_eval(mlp_cuda *g, int n) NONE()
int mlp_cuda_take_train_loss(mlp_cuda *g, double *ret_train) NONE()
int mlp_cuda_take_eval(mlp_cuda *g, double *ret_loss, double *ret_hits) NONE()
int mlp_cuda_to_host(mlp_cuda *g, float *dst, const void *src, size_t n) NONE()
int mlp_cuda_sync(mlp_cuda *g) NONE()
int mlp_cuda_use_stream(mlp_cuda *g, int own) NONE()
int mlp_cuda_set_gemm_hooks(mlp_cuda *g, mlp_cuda_fwd_fn fwd, mlp_cuda_bwd_fn bwd, void *user)
        NONE()
int mlp_cuda_alloc(mlp_cuda *g, size_t bytes, void **ret) NONE()
void mlp_cuda_free_mem(void *p)
{
	(void)p;
}
