/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_model.c: the model as accel holds it.  The
 * working dtype mixed_precision asks for, the GPU of this process, the
 * Linear layers fc0 .. fc{L} registered as accel units, and forward and
 * backward unit by unit between accel's hooks (which gather, prefetch and
 * reduce for the strategy), each layer's math done by mlp.c on the CPU,
 * mlp_cuda.cu on a GPU or mlp_fp8.c for fp8 GEMMs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_mlp.h"

/* The working dtype mixed_precision asks for: no -> f32, bf16, fp16 -> f16
 * (the loss scaled by the scaler plugin's accel_loss_scale()).  Weights
 * and activations are held in it; accel keeps f32 masters and optimizer
 * state, and on the CPU the gradients are f32 (grad_dtype), on the GPU
 * the working dtype.  fp8 on the CPU: f32 weights, whose linear layers
 * the fp8 plugin's GEMM computes (on either device).  -1 (said on stderr) for a value
 * train_mlp does not compute in. */
int train_choose_dtype(trainer *t, const options *o, int on_gpu)
{
	const char *mp = "no";
	if (accel_config_string(t->ctx, "mixed_precision", &mp) != ACCEL_OK)
		mp = "no";
	if (!strcmp(mp, "no")) {
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = MLP_F32;
	} else if (!strcmp(mp, "bf16")) {
		t->dtype = ACCEL_DTYPE_BF16;
		t->prec = MLP_BF16;
	} else if (!strcmp(mp, "fp16")) {
		t->dtype = ACCEL_DTYPE_F16;
		t->prec = MLP_F16;
	} else if (!strcmp(mp, "fp8")) {   /* f32 weights, GEMMs in fp8 (mlp_fp8.c) */
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = MLP_F32;
	} else {
		fprintf(stderr, "train_mlp: --device %s computes in f32 (mixed_precision=no), bf16 "
		        "(mixed_precision=bf16), f16 (mixed_precision=fp16) or fp8 GEMMs "
		        "(mixed_precision=fp8), not mixed_precision=%s\n",
		        o->device ? o->device : "cpu", mp);
		return -1;
	}
	return 0;
}

/* --device cuda[:N]: the GPU of this process (cuda: local rank modulo the
 * GPUs, so `accel launch -n N` spreads the ranks, and several ranks may
 * share one). */
int train_choose_gpu(trainer *t, const options *o)
{
	int n = mlp_cuda_device_count();
	if (n < 0) {
		fprintf(stderr, "train_mlp: --device %s: this train_mlp was built without CUDA "
		        "(meson found no CUDA toolkit with cuBLASLt; configure with -Dcuda=enabled "
		        "-Dcublaslt=enabled)\n", o->device);
		return -1;
	}
	if (n == 0) {
		fprintf(stderr, "train_mlp: --device %s: no CUDA device is visible (see nvidia-smi "
		        "and CUDA_VISIBLE_DEVICES)\n", o->device);
		return -1;
	}
	if (!strncmp(o->device, "cuda:", 5)) {
		t->dev_index = (int32_t)atoi(o->device + 5);
		if (t->dev_index >= n) {
			fprintf(stderr, "train_mlp: --device %s: there are %d CUDA devices (0 .. %d)\n",
			        o->device, n, n - 1);
			return -1;
		}
	} else {
		t->dev_index = (int32_t)(accel_local_rank(t->ctx) % n);
	}
	return 0;
}

int train_register_model(trainer *t)
{
	char name[64], pname[80];
	int rc;
	for (int l = 0; l < t->shape.n_layers; l++) {
		int64_t in = t->shape.dims[l], out = t->shape.dims[l + 1];
		int64_t wshape[2] = {out, in}, bshape[1] = {out};
		/* torch.nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for both. */
		double k = 1.0 / sqrt((double)in);
		accel_init init = accel_init_uniform(-k, k);
		snprintf(name, sizeof(name), "fc%d", l);
		snprintf(pname, sizeof(pname), "fc%d.weight", l);
		if (t->gpu) {
			/* on the GPU, in the working dtype (accel keeps f32 masters) */
			accel_param_desc d = {.struct_size = sizeof(d), .dtype = t->dtype, .unit = name,
			                      .name = pname, .ndim = 2, .shape = wshape,
			                      .device = ACCEL_DEVICE_CUDA, .device_index = t->dev_index,
			                      .init = &init,
			                      .compute_dtype =
			                              t->fp8_on ? mlp_fp8_compute_dtype(out, in) : 0};
			if ((rc = accel_model_add(t->ctx, &d, &t->weight[l])))
				return train_fail(t, "registering the model", rc);
			d.compute_dtype = 0;
			snprintf(pname, sizeof(pname), "fc%d.bias", l);
			d.ndim = 1;
			d.shape = bshape;
			if ((rc = accel_model_add(t->ctx, &d, &t->bias[l])))
				return train_fail(t, "registering the model", rc);
		} else {
			/* in the working dtype, gradients in f32 (mlp.c's SGEMM writes
			 * f32; accel keeps f32 masters and refreshes the 16-bit copy) */
			accel_param_desc d = {.struct_size = sizeof(d), .dtype = t->dtype, .unit = name,
			                      .name = pname, .ndim = 2, .shape = wshape,
			                      .device = ACCEL_DEVICE_CPU, .init = &init,
			                      .grad_dtype = ACCEL_DTYPE_F32};
			if ((rc = t->fp8_on ? mlp_fp8_add_weight(t->ctx, name, pname, wshape, &init,
			                                         &t->weight[l])
			                    : accel_model_add(t->ctx, &d, &t->weight[l])))
				return train_fail(t, "registering the model", rc);
			snprintf(pname, sizeof(pname), "fc%d.bias", l);
			d.ndim = 1;
			d.shape = bshape;
			if ((rc = accel_model_add(t->ctx, &d, &t->bias[l])))
				return train_fail(t, "registering the model", rc);
		}
		if ((rc = accel_model_find_unit(t->ctx, name, &t->unit[l])))
			return train_fail(t, "looking up a unit", rc);
	}
	return 0;
}

/* CPU, 16-bit working weights: fc{l}'s weight (and bias, when b is not
 * NULL) widened into t->wf (t->bf), exactly, for the f32 BLAS. */
static void widen_layer(trainer *t, int l, const float **W, const float **b)
{
	if (t->prec == MLP_F32)
		return;
	size_t in = (size_t)t->shape.dims[l], out = (size_t)t->shape.dims[l + 1];
	mlp_widen(t->wf, (const uint16_t *)*W, out * in, t->prec);
	*W = t->wf;
	if (b) {
		mlp_widen(t->bf, (const uint16_t *)*b, out, t->prec);
		*b = t->bf;
	}
}

/* Forward through every unit on n samples in t->work.act[0]. */
int train_forward(trainer *t, int n)
{
	int rc;
	for (int l = 0; l < t->shape.n_layers; l++) {
		if ((rc = accel_unit_pre_forward(t->ctx, t->unit[l])))
			return train_fail(t, "pre-forward hook", rc);
		const float *W = accel_param_data(t->ctx, t->weight[l]);
		const float *b = accel_param_data(t->ctx, t->bias[l]);
		if (!W || !b)
			return train_fail(t, "parameters not available in forward", ACCEL_ERR_STATE);
		if (!t->gpu && n > 0)
			widen_layer(t, l, &W, &b);
		if (n > 0 && t->gpu) {
			if (mlp_cuda_forward_layer(t->gpu, l, W, b, n))
				return train_gpu_fail(t, "forward");
		} else if (n > 0 && t->fp8) {
			if ((rc = mlp_fp8_forward_layer(t->fp8, &t->shape, &t->work, l, W, b, n)))
				return train_fail(t, "fp8 forward", rc);
		} else if (n > 0) {
			mlp_forward_layer(&t->shape, &t->work, l, W, b, n);
		}
		if ((rc = accel_unit_post_forward(t->ctx, t->unit[l])))
			return train_fail(t, "post-forward hook", rc);
	}
	return 0;
}

int train_backward(trainer *t, int n)
{
	/* 0 on a step's first micro-step: write the gradients (overwrite mode,
	 * set before accel_prepare), so accel never zeroes them. */
	int acc = accel_grad_accumulate(t->ctx);
	int rc;
	for (int l = t->shape.n_layers - 1; l >= 0; l--) {
		if ((rc = accel_unit_pre_backward(t->ctx, t->unit[l])))
			return train_fail(t, "pre-backward hook", rc);
		const float *W = accel_param_data(t->ctx, t->weight[l]);
		float *dW = accel_param_grad(t->ctx, t->weight[l]);
		float *db = accel_param_grad(t->ctx, t->bias[l]);
		if (!W || !dW || !db)
			return train_fail(t, "gradients not available in backward", ACCEL_ERR_STATE);
		if (!t->gpu)
			widen_layer(t, l, &W, NULL);
		if (t->gpu) {
			if (mlp_cuda_backward_layer(t->gpu, l, W, dW, db, n, acc))
				return train_gpu_fail(t, "backward");
		} else if (t->fp8) {
			if ((rc = mlp_fp8_backward_layer(t->fp8, &t->shape, &t->work, l, W, dW, db, n, acc)))
				return train_fail(t, "fp8 backward", rc);
		} else {
			mlp_backward_layer(&t->shape, &t->work, l, W, dW, db, n, acc);
		}
		if ((rc = accel_unit_post_backward(t->ctx, t->unit[l])))
			return train_fail(t, "post-backward hook", rc);
	}
	return 0;
}

int train_load_batch(trainer *t, const mlp_data *d, const int64_t *idx, int n)
{
	if (t->gpu)
		return mlp_cuda_load_batch(t->gpu, idx, n) ? train_gpu_fail(t, "loading the batch") : 0;
	for (int i = 0; i < n; i++) {
		memcpy(t->xb + (size_t)i * d->dim, d->x + (size_t)idx[i] * d->dim,
		       (size_t)d->dim * sizeof(float));
		t->yb[i] = d->y[idx[i]];
	}
	/* the input in the working dtype, as a 16-bit program holds it */
	mlp_round(t->xb, (size_t)n * (size_t)d->dim, t->prec);
	t->work.act[0] = t->xb;
	return 0;
}
