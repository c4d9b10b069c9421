/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_cuda.cu: gpt2_cuda.h on cuBLASLt and kernels of its own.
 *
 * Row-major products are computed as the column-major products of the
 * transposes (C^T = op(B)^T op(A)^T), so every matrix keeps gpt2.h's
 * layout; attention's per-head products are strided-batched GEMMs over the
 * H heads of one sequence (the heads of q, k, v sit hd columns apart in a
 * qkv row, their T x T probabilities T*T apart).  Plans (descriptors,
 * layouts, the heuristic's algorithm) are made once per shape and reused.
 *
 * The order of operations mirrors gpt2_model.c function by function, so a
 * reader can hold the two side by side.  Reductions that feed the model
 * (bias, LayerNorm and position-embedding gradients, the loss) are
 * deterministic: fixed partial sums, then a fixed-order sum of the
 * partials.  The token-embedding gradient is scattered with f32 atomics
 * (the order of additions into one row varies between runs). */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cuda.cuh"
#include "gpt2_cuda.h"
#include "gpt2_cuda_kernels.cuh"
#include "gpt2_gemm.h"

static_assert(GPT2_CUDA_F32 == EX_F32 && GPT2_CUDA_BF16 == EX_BF16 && GPT2_CUDA_F16 == EX_F16,
              "working dtype values");

#define WORKSPACE_BYTES (32u << 20)
#define MAX_PLANS 64

typedef struct plan {
	int used;
	/* the key, in row-major terms: C[m, n] = op(A) op(B), `batch` times
	 * with element strides sa, sb, sc; c32: C is f32 (else the working
	 * dtype); epi: 1 adds a bias of n values */
	int ta, tb, m, n, k, lda, ldb, ldc, batch, c32, epi, align;
	long long sa, sb, sc;
	int fused;   /* the bias runs in cuBLASLt's epilogue */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
} plan;

/* One block's activations (gpt2.h's block_act); with recompute, blocks
 * after the first share block 0's except `in`. */
typedef struct act {
	void *in, *ln1, *qkv, *att, *atty, *mid, *ln2, *fc, *gelu;
	float *mean1, *rstd1, *mean2, *rstd2;
} act;

struct gpt2_cuda {
	gpt2_config c;
	int B, recompute, device, prec;
	size_t es;         /* bytes per working element */
	int ldv;           /* row stride of the logits: V rounded up to 64 */
	cublasLtHandle_t lt;
	void *workspace;
	act *blk;
	void *out, *lnf, *logits, *dx;
	float *meanf, *rstdf;
	void *dfc, *dqkv, *datty, *dln, *dS;   /* backward scratch */
	float *part;                           /* partial column sums */
	double *rowloss, *loss;                /* [B*T] per token, [1] the sum */
	int32_t *tok, *tgt;                    /* device copies of the batch */
	int32_t *tok_host, *tgt_host;          /* pinned staging */
	cudaEvent_t tok_ev, tgt_ev;
	float *f32tmp;                         /* to_host of 16-bit values */
	size_t f32tmp_n;
	size_t bytes;                          /* activations + scratch */
	cudaStream_t stream;
	int own_stream;
	plan plans[MAX_PLANS];
	int evict;
	gpt2_cuda_fwd_fn hook_fwd;             /* fp8 GEMMs (gpt2_cuda_set_linear_hooks) */
	gpt2_cuda_bwd_fn hook_bwd;
	void *hook_user;
	char name[200];
	char err[512];
};

/* ---- errors ------------------------------------------------------------------------------ */

static int fail(gpt2_cuda *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->err, sizeof(g->err), fmt, ap);
	va_end(ap);
	return -1;
}

#define CU EX_CU
#define LT EX_LT
#define LAUNCHED EX_LAUNCHED
#define LAUNCH_T(g, kernel, grid, block, ...) \
	EX_LAUNCH_T((g)->prec, (g)->stream, kernel, grid, block, __VA_ARGS__)

/* ---- cuBLASLt ---------------------------------------------------------------------------- */

static void plan_free(plan *p)
{
	if (!p->used)
		return;
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->lc)
		cublasLtMatrixLayoutDestroy(p->lc);
	if (p->desc)
		cublasLtMatmulDescDestroy(p->desc);
	memset(p, 0, sizeof(*p));
}

/* A cuBLASLt layout of type t (gpt2_gemm.h's view), batched when batch > 1. */
static int layout(gpt2_cuda *g, cublasLtMatrixLayout_t *l, cudaDataType_t t,
                  const gpt2_lt_layout *d)
{
	LT(g, cublasLtMatrixLayoutCreate(l, t, d->rows, d->cols, d->ld));
	if (d->batch > 1) {
		int32_t bc = d->batch;
		int64_t so = d->stride;
		LT(g, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc,
		                                       sizeof(bc)));
		LT(g, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
		                                       &so, sizeof(so)));
	}
	return 0;
}

/* Make plan p with epilogue epi: 1 made, 0 no algorithm, -1 error. */
static int plan_try(gpt2_cuda *g, plan *p, cublasLtEpilogue_t epi)
{
	cudaDataType_t ab = ex_cuda_type(g->prec), ct = p->c32 ? CUDA_R_32F : ab;
	/* cuBLASLt's A is our B, its B our A (gpt2_gemm.h) */
	gpt2_gemm key = {p->ta, p->tb, p->m, p->n, p->k, 1.0f, NULL, p->lda, p->sa, NULL, p->ldb,
	                 p->sb, 0.0f, NULL, p->ldc, p->sc, p->batch, p->c32, NULL};
	gpt2_lt_view v;
	gpt2_lt_view_of(&key, &v);
	cublasOperation_t opa = v.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t opb = v.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	p->used = 1;
	LT(g, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
	                                     sizeof(opa)));
	LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
	                                     sizeof(opb)));
	LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
	                                     sizeof(epi)));
	if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
		const void *bias = g->workspace;   /* a placeholder; set per call */
		LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
		                                     sizeof(bias)));
	}
	if (layout(g, &p->la, ab, &v.a) || layout(g, &p->lb, ab, &v.b) ||
	    layout(g, &p->lc, ct, &v.c))
		return -1;
	int found;
	LT(g, ex_lt_pick(g->lt, p->desc, p->la, p->lb, p->lc, WORKSPACE_BYTES, (uint32_t)p->align,
	                 &p->algo, &found));
	if (!found) {
		plan_free(p);
		return 0;
	}
	return 1;
}


static int same_key(const plan *q, const plan *k)
{
	return q->used && q->ta == k->ta && q->tb == k->tb && q->m == k->m && q->n == k->n &&
	       q->k == k->k && q->lda == k->lda && q->ldb == k->ldb && q->ldc == k->ldc &&
	       q->batch == k->batch && q->c32 == k->c32 && q->epi == k->epi &&
	       q->align == k->align && q->sa == k->sa && q->sb == k->sb && q->sc == k->sc;
}

/* C = alpha op(A) op(B) + beta C (+ bias), row-major. */
static int gemm(gpt2_cuda *g, const gpt2_gemm *a)
{
	size_t es = g->es, ces = a->c32 ? 4 : g->es;
	int batch = a->batch > 1 ? a->batch : 1;
	/* the largest power of two up to 256 dividing every address, leading
	 * dimension and batch stride in bytes */
	uintptr_t bits = (uintptr_t)a->A | (uintptr_t)a->B | (uintptr_t)a->C |
	                 (a->bias ? (uintptr_t)a->bias : 0) | ((uintptr_t)a->lda * es) |
	                 ((uintptr_t)a->ldb * es) | ((uintptr_t)a->ldc * ces) | 256u;
	if (batch > 1)
		bits |= ((uintptr_t)a->sa * es) | ((uintptr_t)a->sb * es) | ((uintptr_t)a->sc * ces);
	plan key;
	memset(&key, 0, sizeof(key));
	key.used = 1;
	key.ta = a->ta;
	key.tb = a->tb;
	key.m = a->m;
	key.n = a->n;
	key.k = a->k;
	key.lda = a->lda;
	key.ldb = a->ldb;
	key.ldc = a->ldc;
	key.batch = batch;
	key.sa = batch > 1 ? a->sa : 0;
	key.sb = batch > 1 ? a->sb : 0;
	key.sc = batch > 1 ? a->sc : 0;
	key.c32 = a->c32;
	key.epi = a->bias != NULL;
	key.align = (int)(bits & (~bits + 1));
	plan *p = NULL;
	for (int i = 0; i < MAX_PLANS && !p; i++)
		if (same_key(&g->plans[i], &key))
			p = &g->plans[i];
	if (!p) {
		for (int i = 0; i < MAX_PLANS && !p; i++)
			if (!g->plans[i].used)
				p = &g->plans[i];
		if (!p) {   /* all taken (evaluation and sampling add shapes): reuse in turn */
			p = &g->plans[g->evict];
			g->evict = (g->evict + 1) % MAX_PLANS;
			plan_free(p);
		}
		int made = 0;
		if (key.epi) {
			*p = key;
			p->used = 0;
			made = plan_try(g, p, CUBLASLT_EPILOGUE_BIAS);
			p->fused = made == 1;
		}
		if (made == 0) {
			*p = key;
			p->used = 0;
			made = plan_try(g, p, CUBLASLT_EPILOGUE_DEFAULT);
		}
		if (made < 0) {
			plan_free(p);
			return -1;
		}
		if (made == 0)
			return fail(g, "cuBLASLt has no algorithm for a %s GEMM of %d x %d x %d (%s%s, "
			            "batch %d, alignment %d bytes)", ex_dtype_name(g->prec), a->m, a->n,
			            a->k, a->ta ? "T" : "N", a->tb ? "T" : "N", batch, key.align);
	}
	if (p->fused)
		LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
		                                     &a->bias, sizeof(a->bias)));
	float alpha = a->alpha, beta = a->beta;
	LT(g, cublasLtMatmul(g->lt, p->desc, &alpha, a->B, p->la, a->A, p->lb, &beta, a->C, p->lc,
	                     a->C, p->lc, &p->algo, g->workspace, WORKSPACE_BYTES, g->stream));
	if (a->bias && !p->fused) {
		size_t rows = (size_t)a->m;
		LAUNCH_T(g, bias_k, ex_blocks_for(rows * (size_t)a->n, 256), 256, (T *)a->C,
		         (const T *)a->bias, rows, a->n);
		LAUNCHED(g, "bias kernel");
	}
	return 0;
}

/* Row offset helpers: element i of a working-dtype buffer. */
static inline void *at(const gpt2_cuda *g, const void *base, size_t i)
{
	return (char *)base + i * g->es;
}

/* ---- the pieces (gpt2_model.c's, on the device) ------------------------------------------ */

static int layernorm_forward(gpt2_cuda *g, void *y, float *mean, float *rstd, const void *x,
                             const void *w, const void *b, size_t N)
{
	int C = g->c.dim;
	unsigned blocks = (unsigned)((N * 32 + 255) / 256);
	LAUNCH_T(g, ln_fwd_k, blocks, 256, (T *)y, mean, rstd, (const T *)x, (const T *)w,
	         (const T *)b, N, C);
	LAUNCHED(g, "LayerNorm kernel");
	return 0;
}

/* column sums of dy [N, out] into db (and LayerNorm's dw with x) */
static int colsum(gpt2_cuda *g, float *db, float *dw, const void *dy, const void *x,
                  const float *mean, const float *rstd, size_t N, int out)
{
	unsigned chunks = (unsigned)((N + COLSUM_ROWS - 1) / COLSUM_ROWS);
	dim3 grid((unsigned)((out + 127) / 128), chunks);
	LAUNCH_T(g, colsum_part_k, grid, 128, g->part, (const T *)dy, (const T *)x, mean, rstd, N,
	         out);
	colsum_done_k<<<(out + 127) / 128, 128, 0, g->stream>>>(db, dw, g->part, (int)chunks, out);
	LAUNCHED(g, "column sum kernels");
	return 0;
}

/* dx += d LN / dx . dy; dw += sum dy xhat; db += sum dy. */
static int layernorm_backward(gpt2_cuda *g, void *dx, float *dw, float *db, const void *dy,
                              const void *x, const void *w, const float *mean, const float *rstd,
                              size_t N)
{
	int C = g->c.dim;
	unsigned blocks = (unsigned)((N * 32 + 255) / 256);
	LAUNCH_T(g, ln_bwd_dx_k, blocks, 256, (T *)dx, (const T *)dy, (const T *)x, (const T *)w,
	         mean, rstd, N, C);
	LAUNCHED(g, "LayerNorm backward kernel");
	return colsum(g, db, dw, dy, x, mean, rstd, N, C);
}

/* y[N, out] = x[N, in] . W^T + b; l, k: the block and weight (the fp8 hook) */
static int linear_forward(gpt2_cuda *g, int l, int k, void *y, const void *x, const void *W,
                          const void *b, size_t N, int in, int out)
{
	int h = g->hook_fwd ? g->hook_fwd(g->hook_user, l, k, x, y, (int)N) : 1;
	if (h < 0)
		return fail(g, "the fp8 GEMM of block %d's weight %d failed", l, k);
	if (h == 0) {   /* the GEMM was the hook's: the bias here */
		LAUNCH_T(g, bias_k, ex_blocks_for(N * (size_t)out, 256), 256, (T *)y, (const T *)b, N,
		         out);
		LAUNCHED(g, "bias kernel");
		return 0;
	}
	gpt2_gemm a = gpt2_gemm_linear_fwd(y, x, W, b, (int)N, in, out);
	return gemm(g, &a);
}

/* dW += dy^T x, db += sum dy, dx = dy . W. */
static int linear_backward(gpt2_cuda *g, int l, int k, void *dx, float *dW, float *db,
                           const void *dy, const void *x, const void *W, size_t N, int in,
                           int out)
{
	if (colsum(g, db, NULL, dy, NULL, NULL, NULL, N, out))
		return -1;
	int h = g->hook_bwd ? g->hook_bwd(g->hook_user, l, k, dy, dx, dW, (int)N) : 1;
	if (h < 0)
		return fail(g, "the fp8 GEMMs of block %d's weight %d's backward failed", l, k);
	if (h == 0)
		return 0;
	gpt2_gemm a = gpt2_gemm_linear_dw(dW, dy, x, (int)N, in, out),
	          b = gpt2_gemm_linear_dx(dx, dy, W, (int)N, in, out);
	return gemm(g, &a) || gemm(g, &b) ? -1 : 0;
}

/* Causal attention of one sequence's heads: qkv [T, 3C] -> y [T, C],
 * probabilities att [H, T, T] (gpt2_gemm.h's products around the softmax). */
static int attention_forward(gpt2_cuda *g, void *y, void *att, const void *qkv)
{
	int Tq = g->c.seq, C = g->c.dim, H = g->c.heads;
	gpt2_gemm p[2];
	gpt2_gemm_attn_fwd(p, y, att, qkv, Tq, C, H, g->es);
	if (gemm(g, &p[0]))
		return -1;
	size_t rows = (size_t)H * (size_t)Tq;
	LAUNCH_T(g, softmax_causal_k, (unsigned)((rows * 32 + 255) / 256), 256, (T *)att, rows, Tq);
	LAUNCHED(g, "softmax kernel");
	return gemm(g, &p[1]);
}

/* dqkv [T, 3C] of one sequence from dy [T, C]; dS: [H, T, T] scratch. */
static int attention_backward(gpt2_cuda *g, void *dqkv, void *dS, const void *dy,
                              const void *att, const void *qkv)
{
	int Tq = g->c.seq, C = g->c.dim, H = g->c.heads;
	gpt2_gemm p[4];
	gpt2_gemm_attn_bwd(p, dqkv, dS, dy, att, qkv, Tq, C, H, g->es);
	if (gemm(g, &p[0]) || gemm(g, &p[1]))
		return -1;
	size_t rows = (size_t)H * (size_t)Tq;
	LAUNCH_T(g, softmax_causal_bwd_k, (unsigned)((rows * 32 + 255) / 256), 256, (T *)dS,
	         (const T *)att, rows, Tq);
	LAUNCHED(g, "softmax backward kernel");
	return gemm(g, &p[2]) || gemm(g, &p[3]) ? -1 : 0;
}

static int residual_add(gpt2_cuda *g, void *y, const void *a, size_t total)
{
	LAUNCH_T(g, add_k, ex_blocks_for(total, 256), 256, (T *)y, (const T *)a, total);
	LAUNCHED(g, "residual kernel");
	return 0;
}

/* ---- the units ----------------------------------------------------------------------------- */

static int check_n(gpt2_cuda *g, int n)
{
	if (n < 1 || n > g->B)
		return fail(g, "a batch of %d sequences (this work space holds 1 .. %d)", n, g->B);
	return 0;
}

/* Copy n*T host tokens into the device buffer dst through pinned staging
 * (waiting for the previous copy out of it first). */
static int upload_tokens(gpt2_cuda *g, int32_t *dst, int32_t *staging, cudaEvent_t ev,
                         const int32_t *src, int n)
{
	size_t cnt = (size_t)n * (size_t)g->c.seq;
	for (size_t i = 0; i < cnt; i++)
		if (src[i] < 0 || src[i] >= g->c.vocab)
			return fail(g, "token %d at position %zu is outside the vocabulary of %d", src[i],
			            i, g->c.vocab);
	CU(g, cudaEventSynchronize(ev));
	memcpy(staging, src, cnt * sizeof(int32_t));
	CU(g, cudaMemcpyAsync(dst, staging, cnt * sizeof(int32_t), cudaMemcpyHostToDevice,
	                      g->stream));
	CU(g, cudaEventRecord(ev, g->stream));
	return 0;
}

extern "C" int gpt2_cuda_embed_forward(gpt2_cuda *g, const int32_t *tokens, const void *wte,
                                       const void *wpe, int n)
{
	if (check_n(g, n) || upload_tokens(g, g->tok, g->tok_host, g->tok_ev, tokens, n))
		return -1;
	size_t N = (size_t)n * (size_t)g->c.seq;
	LAUNCH_T(g, embed_fwd_k, ex_blocks_for(N * (size_t)g->c.dim, 256), 256, (T *)g->blk[0].in,
	         g->tok, (const T *)wte, (const T *)wpe, N, g->c.seq, g->c.dim);
	LAUNCHED(g, "embedding kernel");
	return 0;
}

extern "C" int gpt2_cuda_block_forward(gpt2_cuda *g, int l, const void *const *p, int n)
{
	if (check_n(g, n))
		return -1;
	int Tq = g->c.seq, C = g->c.dim, H = g->c.heads;
	size_t N = (size_t)n * (size_t)Tq;
	act *a = &g->blk[l];
	void *out = l + 1 < g->c.layers ? g->blk[l + 1].in : g->out;
	if (layernorm_forward(g, a->ln1, a->mean1, a->rstd1, a->in, p[GPT2_LN1_W], p[GPT2_LN1_B],
	                      N) ||
	    linear_forward(g, l, GPT2_QKV_W, a->qkv, a->ln1, p[GPT2_QKV_W], p[GPT2_QKV_B], N, C,
	                   3 * C))
		return -1;
	for (int b = 0; b < n; b++)
		if (attention_forward(g, at(g, a->atty, (size_t)b * Tq * C),
		                      at(g, a->att, (size_t)b * H * Tq * Tq),
		                      at(g, a->qkv, (size_t)b * Tq * 3 * C)))
			return -1;
	if (linear_forward(g, l, GPT2_APROJ_W, a->mid, a->atty, p[GPT2_APROJ_W], p[GPT2_APROJ_B], N,
	                   C, C) ||
	    residual_add(g, a->mid, a->in, N * (size_t)C) ||
	    layernorm_forward(g, a->ln2, a->mean2, a->rstd2, a->mid, p[GPT2_LN2_W], p[GPT2_LN2_B],
	                      N) ||
	    linear_forward(g, l, GPT2_FC_W, a->fc, a->ln2, p[GPT2_FC_W], p[GPT2_FC_B], N, C, 4 * C))
		return -1;
	size_t n4 = N * 4 * (size_t)C;
	LAUNCH_T(g, gelu_fwd_k, ex_blocks_for(n4, 256), 256, (T *)a->gelu, (const T *)a->fc, n4);
	LAUNCHED(g, "GELU kernel");
	if (linear_forward(g, l, GPT2_MPROJ_W, out, a->gelu, p[GPT2_MPROJ_W], p[GPT2_MPROJ_B], N,
	                   4 * C, C))
		return -1;
	return residual_add(g, out, a->mid, N * (size_t)C);
}

extern "C" int gpt2_cuda_head_forward(gpt2_cuda *g, const void *lnf_w, const void *lnf_b,
                                      const void *head, int n)
{
	if (check_n(g, n))
		return -1;
	int C = g->c.dim, V = g->c.vocab;
	size_t N = (size_t)n * (size_t)g->c.seq;
	if (layernorm_forward(g, g->lnf, g->meanf, g->rstdf, g->out, lnf_w, lnf_b, N))
		return -1;
	/* logits[N, V] (rows ldv apart) = lnf[N, C] . head[V, C]^T */
	gpt2_gemm a = gpt2_gemm_head_fwd(g->logits, g->ldv, g->lnf, head, (int)N, C, V);
	return gemm(g, &a);
}

extern "C" int gpt2_cuda_loss(gpt2_cuda *g, const int32_t *targets, int n, double dlogits_scale,
                              double *ret_sum)
{
	if (check_n(g, n) || upload_tokens(g, g->tgt, g->tgt_host, g->tgt_ev, targets, n))
		return -1;
	size_t N = (size_t)n * (size_t)g->c.seq;
	LAUNCH_T(g, xent_k, (unsigned)N, 256, (T *)g->logits, g->rowloss, g->tgt, g->c.vocab,
	         g->ldv, (float)dlogits_scale);
	sum_rows_k<<<1, 256, 0, g->stream>>>(g->loss, g->rowloss, N);
	LAUNCHED(g, "cross-entropy kernels");
	double s = 0;
	CU(g, cudaMemcpyAsync(&s, g->loss, sizeof(s), cudaMemcpyDeviceToHost, g->stream));
	CU(g, cudaStreamSynchronize(g->stream));
	*ret_sum = s;
	return 0;
}

extern "C" int gpt2_cuda_head_backward(gpt2_cuda *g, const void *lnf_w, const void *head,
                                       float *dlnf_w, float *dlnf_b, float *dhead, int n)
{
	if (check_n(g, n))
		return -1;
	int C = g->c.dim, V = g->c.vocab;
	size_t N = (size_t)n * (size_t)g->c.seq;
	/* dhead[V, C] += dlogits[N, V]^T . lnf[N, C] (f32) */
	gpt2_gemm dh = gpt2_gemm_head_dw(dhead, g->logits, g->ldv, g->lnf, (int)N, C, V),
	          dl = gpt2_gemm_head_dx(g->dln, g->logits, g->ldv, head, (int)N, C, V);
	if (gemm(g, &dh) || gemm(g, &dl))
		return -1;
	CU(g, cudaMemsetAsync(g->dx, 0, N * (size_t)C * g->es, g->stream));
	return layernorm_backward(g, g->dx, dlnf_w, dlnf_b, g->dln, g->out, lnf_w, g->meanf,
	                          g->rstdf, N);
}

extern "C" int gpt2_cuda_block_backward(gpt2_cuda *g, int l, const void *const *p,
                                        float *const *gr, int n)
{
	if (check_n(g, n))
		return -1;
	int Tq = g->c.seq, C = g->c.dim, H = g->c.heads;
	size_t N = (size_t)n * (size_t)Tq;
	act *a = &g->blk[l];
	void *dres = g->dx;
	/* MLP */
	if (linear_backward(g, l, GPT2_MPROJ_W, g->dfc, gr[GPT2_MPROJ_W], gr[GPT2_MPROJ_B], dres,
	                    a->gelu, p[GPT2_MPROJ_W], N, 4 * C, C))
		return -1;
	size_t n4 = N * 4 * (size_t)C;
	LAUNCH_T(g, gelu_bwd_k, ex_blocks_for(n4, 256), 256, (T *)g->dfc, (const T *)a->fc, n4);
	LAUNCHED(g, "GELU backward kernel");
	if (linear_backward(g, l, GPT2_FC_W, g->dln, gr[GPT2_FC_W], gr[GPT2_FC_B], g->dfc, a->ln2,
	                    p[GPT2_FC_W], N, C, 4 * C) ||
	    layernorm_backward(g, dres, gr[GPT2_LN2_W], gr[GPT2_LN2_B], g->dln, a->mid,
	                       p[GPT2_LN2_W], a->mean2, a->rstd2, N))
		return -1;
	/* attention */
	if (linear_backward(g, l, GPT2_APROJ_W, g->datty, gr[GPT2_APROJ_W], gr[GPT2_APROJ_B], dres,
	                    a->atty, p[GPT2_APROJ_W], N, C, C))
		return -1;
	for (int b = 0; b < n; b++)
		if (attention_backward(g, at(g, g->dqkv, (size_t)b * Tq * 3 * C), g->dS,
		                       at(g, g->datty, (size_t)b * Tq * C),
		                       at(g, a->att, (size_t)b * H * Tq * Tq),
		                       at(g, a->qkv, (size_t)b * Tq * 3 * C)))
			return -1;
	if (linear_backward(g, l, GPT2_QKV_W, g->dln, gr[GPT2_QKV_W], gr[GPT2_QKV_B], g->dqkv,
	                    a->ln1, p[GPT2_QKV_W], N, C, 3 * C))
		return -1;
	return layernorm_backward(g, dres, gr[GPT2_LN1_W], gr[GPT2_LN1_B], g->dln, a->in,
	                          p[GPT2_LN1_W], a->mean1, a->rstd1, N);
}

extern "C" int gpt2_cuda_embed_backward(gpt2_cuda *g, float *dwte, float *dwpe, int n)
{
	if (check_n(g, n))
		return -1;
	int Tq = g->c.seq, C = g->c.dim;
	size_t N = (size_t)n * (size_t)Tq;
	LAUNCH_T(g, embed_bwd_wte_k, ex_blocks_for(N * (size_t)C, 256), 256, dwte, g->tok,
	         (const T *)g->dx, N, C);
	LAUNCH_T(g, embed_bwd_wpe_k, ex_blocks_for((size_t)Tq * (size_t)C, 256), 256, dwpe,
	         (const T *)g->dx, n, Tq, C);
	LAUNCHED(g, "embedding backward kernels");
	return 0;
}

/* ---- set-up and the rest -------------------------------------------------------------------- */

extern "C" int gpt2_cuda_device_count(void)
{
	return ex_device_count();
}

extern "C" const char *gpt2_cuda_error(const gpt2_cuda *g)
{
	return g ? g->err : "no CUDA work space";
}

extern "C" const char *gpt2_cuda_name(const gpt2_cuda *g)
{
	return g->name;
}

extern "C" size_t gpt2_cuda_work_bytes(const gpt2_cuda *g)
{
	return g->bytes;
}

extern "C" void gpt2_cuda_free(gpt2_cuda *g)
{
	if (!g)
		return;
	cudaSetDevice(g->device);
	cudaDeviceSynchronize();
	if (g->own_stream)
		cudaStreamDestroy(g->stream);
	for (int i = 0; i < MAX_PLANS; i++)
		plan_free(&g->plans[i]);
	if (g->lt)
		cublasLtDestroy(g->lt);
	if (g->blk)
		for (int l = 0; l < g->c.layers; l++) {
			act *a = &g->blk[l];
			cudaFree(a->in);
			if (g->recompute && l > 0)
				continue;
			void *bufs[] = {a->ln1, a->qkv, a->att, a->atty, a->mid, a->ln2, a->fc, a->gelu,
			                a->mean1, a->rstd1, a->mean2, a->rstd2};
			for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++)
				cudaFree(bufs[k]);
		}
	free(g->blk);
	void *bufs[] = {g->out, g->lnf, g->logits, g->dx, g->meanf, g->rstdf, g->dfc, g->dqkv,
	                g->datty, g->dln, g->dS, g->part, g->rowloss, g->loss, g->tok, g->tgt,
	                g->f32tmp, g->workspace};
	for (size_t k = 0; k < sizeof(bufs) / sizeof(bufs[0]); k++)
		cudaFree(bufs[k]);
	cudaFreeHost(g->tok_host);
	cudaFreeHost(g->tgt_host);
	if (g->tok_ev)
		cudaEventDestroy(g->tok_ev);
	if (g->tgt_ev)
		cudaEventDestroy(g->tgt_ev);
	free(g);
}

/* cudaMalloc of bytes into *p, counted in g->bytes. */
static int dalloc(gpt2_cuda *g, void **p, size_t bytes)
{
	CU(g, cudaMalloc(p, bytes ? bytes : 1));
	g->bytes += bytes;
	return 0;
}

#define DALLOC(g, p, bytes) dalloc(g, (void **)&(p), bytes)

static int setup(gpt2_cuda *g)
{
	const gpt2_config *c = &g->c;
	size_t B = (size_t)g->B, Tq = (size_t)c->seq, C = (size_t)c->dim, H = (size_t)c->heads,
	       BT = B * Tq, es = g->es;
	cudaDeviceProp prop;
	CU(g, cudaSetDevice(g->device));
	CU(g, cudaGetDeviceProperties(&prop, g->device));
	snprintf(g->name, sizeof(g->name), "cuBLASLt %s%s on cuda:%d (%.100s)", ex_dtype_name(g->prec),
	         g->prec != GPT2_CUDA_F32 ? " (f32 accumulation)" : "", g->device, prop.name);
	LT(g, cublasLtCreate(&g->lt));
	CU(g, cudaMalloc(&g->workspace, WORKSPACE_BYTES));
	if (!(g->blk = (act *)calloc((size_t)c->layers, sizeof(act))))
		return fail(g, "out of host memory");
	for (int l = 0; l < c->layers; l++) {
		act *a = &g->blk[l];
		if (DALLOC(g, a->in, BT * C * es))
			return -1;
		if (g->recompute && l > 0) {   /* share block 0's intermediates */
			void *in = a->in;
			*a = g->blk[0];
			a->in = in;
			continue;
		}
		if (DALLOC(g, a->ln1, BT * C * es) || DALLOC(g, a->qkv, BT * 3 * C * es) ||
		    DALLOC(g, a->att, B * H * Tq * Tq * es) || DALLOC(g, a->atty, BT * C * es) ||
		    DALLOC(g, a->mid, BT * C * es) || DALLOC(g, a->ln2, BT * C * es) ||
		    DALLOC(g, a->fc, BT * 4 * C * es) || DALLOC(g, a->gelu, BT * 4 * C * es) ||
		    DALLOC(g, a->mean1, BT * 4) || DALLOC(g, a->rstd1, BT * 4) ||
		    DALLOC(g, a->mean2, BT * 4) || DALLOC(g, a->rstd2, BT * 4))
			return -1;
	}
	size_t chunks = (BT + COLSUM_ROWS - 1) / COLSUM_ROWS;
	if (DALLOC(g, g->out, BT * C * es) || DALLOC(g, g->lnf, BT * C * es) ||
	    DALLOC(g, g->meanf, BT * 4) || DALLOC(g, g->rstdf, BT * 4) ||
	    DALLOC(g, g->logits, BT * (size_t)g->ldv * es) || DALLOC(g, g->dx, BT * C * es) ||
	    DALLOC(g, g->dfc, BT * 4 * C * es) || DALLOC(g, g->dqkv, BT * 3 * C * es) ||
	    DALLOC(g, g->datty, BT * C * es) || DALLOC(g, g->dln, BT * C * es) ||
	    DALLOC(g, g->dS, H * Tq * Tq * es) || DALLOC(g, g->part, chunks * 4 * C * 4) ||
	    DALLOC(g, g->rowloss, BT * 8) || DALLOC(g, g->loss, 8) || DALLOC(g, g->tok, BT * 4) ||
	    DALLOC(g, g->tgt, BT * 4))
		return -1;
	/* the logits' padding columns stay zero (never read, but defined) */
	CU(g, cudaMemset(g->logits, 0, BT * (size_t)g->ldv * es));
	CU(g, cudaMallocHost((void **)&g->tok_host, BT * 4));
	CU(g, cudaMallocHost((void **)&g->tgt_host, BT * 4));
	CU(g, cudaEventCreateWithFlags(&g->tok_ev, cudaEventDisableTiming));
	CU(g, cudaEventCreateWithFlags(&g->tgt_ev, cudaEventDisableTiming));
	/* recorded once, so the first wait returns */
	CU(g, cudaEventRecord(g->tok_ev, g->stream));
	CU(g, cudaEventRecord(g->tgt_ev, g->stream));
	CU(g, cudaDeviceSynchronize());
	return 0;
}

extern "C" int gpt2_cuda_new(const gpt2_config *c, int B, int recompute, int device, int prec,
                             gpt2_cuda **ret, char *err, size_t errcap)
{
	*ret = NULL;
	if (prec != GPT2_CUDA_F32 && prec != GPT2_CUDA_BF16 && prec != GPT2_CUDA_F16) {
		snprintf(err, errcap, "working dtype %d is not f32, bf16 or f16", prec);
		return -1;
	}
	if (B < 1 || c->heads < 1 || c->dim % c->heads) {
		snprintf(err, errcap, "batch of %d sequences, dim %d over %d heads: need B >= 1 and "
		         "dim a multiple of heads", B, c->dim, c->heads);
		return -1;
	}
	gpt2_cuda *g = (gpt2_cuda *)calloc(1, sizeof(*g));
	if (!g) {
		snprintf(err, errcap, "out of host memory");
		return -1;
	}
	g->c = *c;
	g->B = B;
	g->recompute = recompute;
	g->device = device;
	g->prec = prec;
	g->es = prec == GPT2_CUDA_F32 ? 4 : 2;
	g->ldv = (c->vocab + 63) / 64 * 64;
	if (setup(g)) {
		snprintf(err, errcap, "%s", g->err);
		gpt2_cuda_free(g);
		return -1;
	}
	*ret = g;
	return 0;
}

extern "C" int gpt2_cuda_use_stream(gpt2_cuda *g, int own)
{
	return ex_use_stream(g, own);
}

extern "C" void *gpt2_cuda_stream(const gpt2_cuda *g)
{
	return g ? (void *)g->stream : NULL;
}

extern "C" int gpt2_cuda_sync(gpt2_cuda *g)
{
	CU(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int gpt2_cuda_to_host(gpt2_cuda *g, float *dst, const void *src, size_t n, int f32_src)
{
	if (!f32_src && g->prec != GPT2_CUDA_F32) {
		if (g->f32tmp_n < n) {
			CU(g, cudaStreamSynchronize(g->stream));   /* the old buffer may be in use */
			cudaFree(g->f32tmp);
			g->f32tmp = NULL;
			g->f32tmp_n = 0;
			CU(g, cudaMalloc((void **)&g->f32tmp, n ? n * 4 : 4));
			g->f32tmp_n = n;
		}
		LAUNCH_T(g, to_f32_k, ex_blocks_for(n, 256), 256, g->f32tmp, (const T *)src, n);
		LAUNCHED(g, "cast kernel");
		src = g->f32tmp;
	}
	CU(g, cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToHost, g->stream));
	CU(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int gpt2_cuda_logits_row(gpt2_cuda *g, int row, float *dst)
{
	if (row < 0 || row >= g->B * g->c.seq)
		return fail(g, "logits row %d of %d", row, g->B * g->c.seq);
	return gpt2_cuda_to_host(g, dst, at(g, g->logits, (size_t)row * (size_t)g->ldv),
	                         (size_t)g->c.vocab, 0);
}

extern "C" int gpt2_cuda_set_linear_hooks(gpt2_cuda *g, gpt2_cuda_fwd_fn fwd,
                                          gpt2_cuda_bwd_fn bwd, void *user)
{
	if (g->prec != GPT2_CUDA_F32 && (fwd || bwd))
		return fail(g, "linear-layer hooks need an f32 work space");
	g->hook_fwd = fwd;
	g->hook_bwd = bwd;
	g->hook_user = user;
	return 0;
}

extern "C" int gpt2_cuda_alloc(gpt2_cuda *g, size_t bytes, void **ret)
{
	CU(g, cudaSetDevice(g->device));
	CU(g, cudaMalloc(ret, bytes ? bytes : 1));
	return 0;
}

extern "C" void gpt2_cuda_free_mem(void *p)
{
	cudaFree(p);
}
