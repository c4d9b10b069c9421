/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_config.c: GPT-2 configurations, parameter shapes and
 * counts (gpt2.h); no scalar type. */
#include <stdio.h>
#include <string.h>

#include "gpt2.h"

const char *const gpt2_block_names[GPT2_BLOCK_TENSORS] = {
	"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
	"attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
	"mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

int gpt2_config_named(gpt2_config *c, const char *name)
{
	if (!strcmp(name, "gpt2"))          /* the 124M model of the GPT-2 paper */
		*c = (gpt2_config){.layers = 12, .heads = 12, .dim = 768, .seq = 1024, .vocab = 50257};
	else if (!strcmp(name, "tiny"))     /* for the test suite */
		*c = (gpt2_config){.layers = 2, .heads = 2, .dim = 32, .seq = 32, .vocab = 256};
	else
		return -1;
	return 0;
}

int gpt2_config_check(const gpt2_config *c, char *err, size_t cap)
{
	if (c->layers < 1 || c->layers > 256 || c->heads < 1 || c->dim < 1 || c->dim > 65536 ||
	    c->seq < 1 || c->seq > 65536 || c->vocab < 2 || c->vocab > 65536) {
		snprintf(err, cap, "a size is out of range (layers 1..256, heads >= 1, dim 1..65536, "
		         "seq-len 1..65536, vocab 2..65536; tokens are 16-bit)");
		return -1;
	}
	if (c->dim % c->heads) {
		snprintf(err, cap, "--dim %d is not a multiple of --heads %d", c->dim, c->heads);
		return -1;
	}
	return 0;
}

int gpt2_block_shape(const gpt2_config *c, int k, int64_t shape[2])
{
	int64_t C = c->dim;
	switch (k) {
	case GPT2_QKV_W: shape[0] = 3 * C; shape[1] = C; return 2;
	case GPT2_QKV_B: shape[0] = 3 * C; return 1;
	case GPT2_APROJ_W: shape[0] = C; shape[1] = C; return 2;
	case GPT2_FC_W: shape[0] = 4 * C; shape[1] = C; return 2;
	case GPT2_FC_B: shape[0] = 4 * C; return 1;
	case GPT2_MPROJ_W: shape[0] = C; shape[1] = 4 * C; return 2;
	default: shape[0] = C; return 1;
	}
}

int64_t gpt2_n_params(const gpt2_config *c, int tied)
{
	int64_t C = c->dim, n = (int64_t)c->vocab * C + (int64_t)c->seq * C + 2 * C;
	n += (int64_t)c->layers * (12 * C * C + 13 * C);
	if (!tied)
		n += (int64_t)c->vocab * C;
	return n;
}

double gpt2_flops_per_token(const gpt2_config *c)
{
	/* matmul weights (the head included, embeddings' lookups not) and the
	 * attention's two T x T products, forward 2 per MAC, training 3x */
	double C = c->dim, L = c->layers, T = c->seq;
	double weights = L * 12 * C * C + (double)c->vocab * C;
	double attn = L * 2 * T * C;   /* q.k and p.v per token over the full T (PaLM's count) */
	return 6 * weights + 6 * attn;
}
