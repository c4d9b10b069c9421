/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2.h: the math of GPT-2 on the CPU, independent of accel
 * (train_model.c drives it unit by unit, through gpt2_device.c).
 *
 * The model: token and position embeddings; L pre-LayerNorm blocks
 *   x = x + proj(attn(ln1(x)));  x = x + mproj(gelu_tanh(fc(ln2(x))))
 * with causal multi-head self-attention; a final LayerNorm and an LM head
 * whose weight is the token embedding (tied) or a separate [V, C] matrix.
 * Weights are [out, in] row-major (torch.nn.Linear's layout).
 *
 * The code is written once over a scalar type `gpt2_real`: float (the
 * program, GEMMs through blas.h) or, compiled with GPT2_F64 defined,
 * double (the gradient check, with its own loop GEMM); the function names
 * then start with gpt2d_ instead of gpt2_.  Backward functions ACCUMULATE
 * into the parameter gradients (+=), as accel expects.
 */
#ifndef EXAMPLES_GPT2_GPT2_H
#define EXAMPLES_GPT2_GPT2_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpt2_config {
	int layers, heads, dim, seq, vocab;
} gpt2_config;

/* What the f32 build rounds its stored activations to (gpt2_work.prec):
 * the values of train_mlp's MLP_F32 / MLP_BF16 / MLP_F16 (mlp.h), whose
 * mlp_round does the rounding. */
enum { GPT2_ACT_F32 = 0, GPT2_ACT_BF16 = 1, GPT2_ACT_F16 = 2 };

/* "tiny" or "gpt2" (124M); 0, or -1 for an unknown name. */
int gpt2_config_named(gpt2_config *c, const char *name);
/* 0 when consistent (dim a multiple of heads, sizes in range); else -1
 * and a message in err. */
int gpt2_config_check(const gpt2_config *c, char *err, size_t cap);
/* Trainable parameters (tied head: the token embedding counted once). */
int64_t gpt2_n_params(const gpt2_config *c, int tied);
/* Model FLOPs per token of a training step (forward + backward = 3x the
 * forward's 2 per multiply-add, attention included). */
double gpt2_flops_per_token(const gpt2_config *c);

/* The tensors of one block, in this order (names in gpt2_block_names). */
enum {
	GPT2_LN1_W, GPT2_LN1_B, GPT2_QKV_W, GPT2_QKV_B, GPT2_APROJ_W, GPT2_APROJ_B,
	GPT2_LN2_W, GPT2_LN2_B, GPT2_FC_W, GPT2_FC_B, GPT2_MPROJ_W, GPT2_MPROJ_B,
	GPT2_BLOCK_TENSORS
};
extern const char *const gpt2_block_names[GPT2_BLOCK_TENSORS];
/* Shape of block tensor k: ndim 1 or 2 into shape[0..1]. */
int gpt2_block_shape(const gpt2_config *c, int k, int64_t shape[2]);

#endif

/* ---- the scalar-generic part (included once per scalar type) ------------- */
#if defined(GPT2_F64) && !defined(EXAMPLES_GPT2_GPT2_H_F64)
#define EXAMPLES_GPT2_GPT2_H_F64
#define GPT2_DECLARE
#elif !defined(GPT2_F64) && !defined(EXAMPLES_GPT2_GPT2_H_F32)
#define EXAMPLES_GPT2_GPT2_H_F32
#define GPT2_DECLARE
#endif

#ifdef GPT2_DECLARE
#undef GPT2_DECLARE
#undef GPT2
#undef gpt2_real
/* a macro, not a typedef: a file may include both variants */
#ifdef GPT2_F64
#define gpt2_real double
#define GPT2(name) gpt2d_##name
#else
#define gpt2_real float
#define GPT2(name) gpt2_##name
#endif

/* Activations of one block for a batch of B sequences of T tokens (BT =
 * B*T rows).  With recompute several blocks share one of these for all
 * but `in`. */
typedef struct GPT2(block_act) {
	gpt2_real *in;               /* [BT, C] block input (the residual)    */
	gpt2_real *ln1, *mean1, *rstd1;   /* [BT, C], [BT], [BT]            */
	gpt2_real *qkv;              /* [BT, 3C]                              */
	gpt2_real *att;              /* [B, H, T, T] softmax probabilities    */
	gpt2_real *atty;             /* [BT, C] attention output, pre-proj    */
	gpt2_real *mid;              /* [BT, C] residual after attention      */
	gpt2_real *ln2, *mean2, *rstd2;
	gpt2_real *fc, *gelu;        /* [BT, 4C] before and after GELU        */
} GPT2(block_act);

typedef struct GPT2(work) {
	gpt2_config c;
	int B, recompute;
	/* GPT2_ACT_F32 (work_init's choice), _BF16 or _F16 (f32 build only; set
	 * it after work_init): a 16-bit program's activations.  Every value
	 * such a program stores in 16 bits -- GEMM inputs and outputs (the
	 * LayerNorm outputs, qkv, the attention probabilities P before P.V and
	 * its output, the projections' outputs, GELU's output, the logits, and
	 * in backward the gradients wrt them, dS of the softmax included) -- is
	 * rounded to that type (to nearest, ties to even) and kept in an f32
	 * slot; the GEMMs accumulate in f32 (a tensor core's f32 accumulate).
	 * f32 stay: the residual stream and its gradient, LayerNorm's mean and
	 * rstd, the softmax and the scores before it, the loss, and the weight
	 * gradients (accel's grad_dtype f32). */
	int prec;
	GPT2(block_act) *blk;        /* [layers]                              */
	gpt2_real *out;              /* [BT, C] output of the last block      */
	gpt2_real *lnf, *meanf, *rstdf;
	gpt2_real *logits;           /* [BT, V]; probabilities after loss     */
	gpt2_real *dx;               /* [BT, C] gradient wrt the residual     */
	gpt2_real *dbuf;             /* scratch gradients: [BT, 4C]+[BT,3C]+
	                                [BT,C]*2 + [T,T]                      */
	const int32_t *tokens;       /* [BT] inputs (borrowed)                */
} GPT2(work);

/* Buffers for batches of up to B sequences; recompute: one shared set of
 * block activations besides each block's input.  0, or -1 (memory). */
int GPT2(work_init)(GPT2(work) *w, const gpt2_config *c, int B, int recompute);
void GPT2(work_free)(GPT2(work) *w);
/* Bytes of activations the work space holds. */
size_t GPT2(work_bytes)(const GPT2(work) *w);

/* Embeddings: blk[0].in = wte[tokens] + wpe[t] for n sequences. */
void GPT2(embed_forward)(GPT2(work) *w, const int32_t *tokens, const gpt2_real *wte,
                         const gpt2_real *wpe, int n);
/* p: the block's GPT2_BLOCK_TENSORS tensors.  Writes blk[l] and the next
 * block's input (w->out for the last). */
void GPT2(block_forward)(GPT2(work) *w, int l, const gpt2_real *const *p, int n);
/* Final LN and logits = lnf . head^T ([V, C], the token embedding when
 * tied). */
void GPT2(head_forward)(GPT2(work) *w, const gpt2_real *lnf_w, const gpt2_real *lnf_b,
                        const gpt2_real *head, int n);
/* Cross-entropy against targets [n*T]; returns the SUM over tokens of
 * -log p (double) and, when dlogits_scale != 0, replaces the logits with
 * (softmax - onehot) * dlogits_scale for head_backward. */
double GPT2(loss)(GPT2(work) *w, const int32_t *targets, int n, double dlogits_scale);
/* Backward of head and final LN: dhead += dlogits^T . lnf, ... and the
 * gradient wrt the last block's output into w->dx. */
void GPT2(head_backward)(GPT2(work) *w, const gpt2_real *lnf_w, const gpt2_real *head,
                         gpt2_real *dlnf_w, gpt2_real *dlnf_b, gpt2_real *dhead, int n);
/* Block backward: w->dx holds the gradient wrt the block's output; on
 * return it holds the gradient wrt its input.  g: the gradients. */
void GPT2(block_backward)(GPT2(work) *w, int l, const gpt2_real *const *p, gpt2_real *const *g,
                          int n);
void GPT2(embed_backward)(GPT2(work) *w, gpt2_real *dwte, gpt2_real *dwpe, int n);
#endif
