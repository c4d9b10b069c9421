/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/train_model.c: GPT-2 as accel holds it.  The working dtype
 * mixed_precision asks for; the units embed, h.<l> (kind GPT2Block) and
 * head with GPT-2's initialisation, the head tied to wte through
 * accel_unit_use_param unless --untied; and forward and backward unit by
 * unit between accel's hooks (which gather, prefetch and reduce for the
 * strategy), each unit's math run by gpt2_device.c on the CPU or the GPU.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpt2_device.h"
#include "train_gpt2.h"

static int add_param(trainer *t, const char *unit, const char *name, int ndim,
                     const int64_t *shape, const accel_init *init, uint32_t *ret)
{
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = t->dtype, .unit = unit,
	                      .name = name, .ndim = (uint32_t)ndim, .shape = shape,
	                      .compute_dtype = t->cdt,
	                      .device = t->gpu ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU,
	                      .device_index = t->gpu ? t->dev_index : 0, .init = init,
	                      .grad_dtype = ACCEL_DTYPE_F32};
	int rc = accel_model_add(t->ctx, &d, ret);
	return rc ? train_fail(t, "registering the model", rc) : 0;
}

/* GPT-2's initialisation: N(0, 0.02) for embeddings and linear weights,
 * N(0, 0.02 / sqrt(2 L)) for the two projections into the residual, zero
 * biases, LayerNorms 1 and 0. */
int train_register_model(trainer *t)
{
	int64_t C = t->c.dim, V = t->c.vocab, T = t->c.seq;
	accel_init w02 = accel_init_normal(0, 0.02), ones = accel_init_const(1),
	           res = accel_init_normal(0, 0.02 / sqrt(2.0 * t->c.layers));
	int64_t s_wte[2] = {V, C}, s_wpe[2] = {T, C}, s_c[1] = {C};
	char unit[32], name[96];
	int rc;
	if (add_param(t, "embed", "wte", 2, s_wte, &w02, &t->p_wte) ||
	    add_param(t, "embed", "wpe", 2, s_wpe, &w02, &t->p_wpe))
		return -1;
	for (int l = 0; l < t->c.layers; l++) {
		snprintf(unit, sizeof(unit), "h.%d", l);
		for (int k = 0; k < GPT2_BLOCK_TENSORS; k++) {
			int64_t sh[2];
			int nd = gpt2_block_shape(&t->c, k, sh);
			const accel_init *init = k == GPT2_LN1_W || k == GPT2_LN2_W    ? &ones
			                         : k == GPT2_APROJ_W || k == GPT2_MPROJ_W ? &res
			                         : nd == 2                                ? &w02
			                                                                  : NULL;
			snprintf(name, sizeof(name), "h.%d.%s", l, gpt2_block_names[k]);
			t->cdt = t->fp8_on && nd == 2 ? gpt2_fp8_compute_dtype(k, sh[0], sh[1]) : 0;
			rc = add_param(t, unit, name, nd, sh, init, &t->p_block[l * GPT2_BLOCK_TENSORS + k]);
			t->cdt = 0;
			if (rc)
				return -1;
		}
		/* what PyTorch calls the class: fsdp's TRANSFORMER_BASED_WRAP with
		 * transformer_cls_names_to_wrap "GPT2Block" wraps each block */
		if ((rc = accel_unit_set_kind(t->ctx, unit, "GPT2Block")))
			return train_fail(t, "naming the block kind", rc);
	}
	if (add_param(t, "head", "ln_f.weight", 1, s_c, &ones, &t->p_lnf_w) ||
	    add_param(t, "head", "ln_f.bias", 1, s_c, NULL, &t->p_lnf_b))
		return -1;
	if (!t->tied) {
		if (add_param(t, "head", "lm_head.weight", 2, s_wte, &w02, &t->p_head))
			return -1;
	} else {
		if ((rc = accel_unit_use_param(t->ctx, "head", t->p_wte)))
			return train_fail(t, "tying the LM head to wte (accel_unit_use_param)", rc);
		t->p_head = t->p_wte;
	}
	if ((rc = accel_model_find_unit(t->ctx, "embed", &t->u_embed)) ||
	    (rc = accel_model_find_unit(t->ctx, "head", &t->u_head)))
		return train_fail(t, "looking up a unit", rc);
	for (int l = 0; l < t->c.layers; l++) {
		snprintf(unit, sizeof(unit), "h.%d", l);
		if ((rc = accel_model_find_unit(t->ctx, unit, &t->u_block[l])))
			return train_fail(t, "looking up a unit", rc);
	}
	return 0;
}

/* The f32 values of parameter p (slot: which wide buffer in 16-bit). */
const float *train_weights(trainer *t, uint32_t p, int slot)
{
	const void *d = accel_param_data(t->ctx, p);
	if (!d || t->prec == PREC_F32 || t->gpu)   /* GPU: the device's working dtype */
		return d;
	mlp_widen(t->wide[slot], d, (size_t)accel_param_numel(t->ctx, p), t->prec);
	return t->wide[slot];
}

static int block_params(trainer *t, int l, const float **p, float **g)
{
	for (int k = 0; k < GPT2_BLOCK_TENSORS; k++) {
		uint32_t id = t->p_block[l * GPT2_BLOCK_TENSORS + k];
		p[k] = train_weights(t, id, k);
		if (g)
			g[k] = accel_param_grad(t->ctx, id);
		if (!p[k] || (g && !g[k]))
			return train_fail(t, "a block's parameters outside its hooks", ACCEL_ERR_STATE);
	}
	return 0;
}

/* Forward of n sequences (n may be 0: the hooks only, so every rank makes
 * the same collective calls). */
int train_forward(trainer *t, const int32_t *tokens, int n)
{
	int rc;
	if ((rc = accel_unit_pre_forward(t->ctx, t->u_embed)))
		return train_fail(t, "pre-forward hook", rc);
	const float *wte = train_weights(t, t->p_wte, GPT2_BLOCK_TENSORS),
	            *wpe = train_weights(t, t->p_wpe, GPT2_BLOCK_TENSORS + 1);
	if (!wte || !wpe)
		return train_fail(t, "the embeddings outside their hooks", ACCEL_ERR_STATE);
	if (n > 0 && gpt2_dev_embed_forward(&t->w, t->gpu, tokens, wte, wpe, n))
		return -1;
	if ((rc = accel_unit_post_forward(t->ctx, t->u_embed)))
		return train_fail(t, "post-forward hook", rc);
	for (int l = 0; l < t->c.layers; l++) {
		const float *p[GPT2_BLOCK_TENSORS];
		if ((rc = accel_unit_pre_forward(t->ctx, t->u_block[l])))
			return train_fail(t, "pre-forward hook", rc);
		if (block_params(t, l, p, NULL))
			return -1;
		if (n > 0 && gpt2_dev_block_forward(&t->w, t->gpu, l, p, n))
			return -1;
		if ((rc = accel_unit_post_forward(t->ctx, t->u_block[l])))
			return train_fail(t, "post-forward hook", rc);
	}
	if ((rc = accel_unit_pre_forward(t->ctx, t->u_head)))
		return train_fail(t, "pre-forward hook", rc);
	const float *lw = train_weights(t, t->p_lnf_w, 0), *lb = train_weights(t, t->p_lnf_b, 1),
	            *head = train_weights(t, t->p_head, GPT2_BLOCK_TENSORS + 2);
	if (!lw || !lb || !head)
		return train_fail(t, "the head's parameters outside its hooks", ACCEL_ERR_STATE);
	if (n > 0 && gpt2_dev_head_forward(&t->w, t->gpu, lw, lb, head, n))
		return -1;
	if ((rc = accel_unit_post_forward(t->ctx, t->u_head)))
		return train_fail(t, "post-forward hook", rc);
	return 0;
}

int train_backward(trainer *t, int n)
{
	int rc;
	if ((rc = accel_unit_pre_backward(t->ctx, t->u_head)))
		return train_fail(t, "pre-backward hook", rc);
	const float *lw = train_weights(t, t->p_lnf_w, 0),
	            *head = train_weights(t, t->p_head, GPT2_BLOCK_TENSORS + 2);
	float *dlw = accel_param_grad(t->ctx, t->p_lnf_w), *dlb = accel_param_grad(t->ctx, t->p_lnf_b),
	      *dhead = accel_param_grad(t->ctx, t->p_head);
	if (!lw || !head || !dlw || !dlb || !dhead)
		return train_fail(t, "the head's gradients outside its hooks", ACCEL_ERR_STATE);
	if (gpt2_dev_head_backward(&t->w, t->gpu, lw, head, dlw, dlb, dhead, n))
		return -1;
	if ((rc = accel_unit_post_backward(t->ctx, t->u_head)))
		return train_fail(t, "post-backward hook", rc);
	for (int l = t->c.layers - 1; l >= 0; l--) {
		const float *p[GPT2_BLOCK_TENSORS];
		float *g[GPT2_BLOCK_TENSORS];
		if ((rc = accel_unit_pre_backward(t->ctx, t->u_block[l])))
			return train_fail(t, "pre-backward hook", rc);
		if (block_params(t, l, p, g))
			return -1;
		/* recompute: only the block's input was kept */
		if ((t->recompute && gpt2_dev_block_forward(&t->w, t->gpu, l, p, n)) ||
		    gpt2_dev_block_backward(&t->w, t->gpu, l, p, g, n))
			return -1;
		if ((rc = accel_unit_post_backward(t->ctx, t->u_block[l])))
			return train_fail(t, "post-backward hook", rc);
	}
	if ((rc = accel_unit_pre_backward(t->ctx, t->u_embed)))
		return train_fail(t, "pre-backward hook", rc);
	float *dwte = accel_param_grad(t->ctx, t->p_wte), *dwpe = accel_param_grad(t->ctx, t->p_wpe);
	if (!dwte || !dwpe)
		return train_fail(t, "the embeddings' gradients outside their hooks", ACCEL_ERR_STATE);
	if (gpt2_dev_embed_backward(&t->w, t->gpu, dwte, dwpe, n))
		return -1;
	if ((rc = accel_unit_post_backward(t->ctx, t->u_embed)))
		return train_fail(t, "post-backward hook", rc);
	return 0;
}

/* The mixed_precision the program computes in: no, bf16 or fp16. */
int train_choose_dtype(trainer *t)
{
	const char *mp = "no";
	if (accel_config_string(t->ctx, "mixed_precision", &mp) != ACCEL_OK)
		mp = "no";
	if (!strcmp(mp, "no")) {
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = PREC_F32;
	} else if (!strcmp(mp, "bf16")) {
		t->dtype = ACCEL_DTYPE_BF16;
		t->prec = PREC_BF16;
	} else if (!strcmp(mp, "fp16")) {
		t->dtype = ACCEL_DTYPE_F16;
		t->prec = PREC_F16;
	} else if (!strcmp(mp, "fp8")) {   /* GPU: f32, block GEMMs in fp8 (gpt2_fp8.c) */
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = PREC_F32;
		t->fp8_on = 1;
	} else {
		fprintf(stderr, "accel-gpt2: on the CPU the program computes with f32 "
		        "(mixed_precision=no), bf16 or f16 weights (bf16, fp16), not "
		        "mixed_precision=%s\n", mp);
		return -1;
	}
	return 0;
}
