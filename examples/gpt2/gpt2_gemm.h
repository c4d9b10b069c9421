/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_gemm.h: the GEMMs of gpt2_cuda.cu as data, shared by
 * it and by tests/test-gpt2-gemm.c, which runs them through a CPU
 * emulation of cuBLASLt's column-major contract (no GPU needed) against
 * plain loops: the operands, leading dimensions, batch strides and
 * transposes of every product, and the translation of a row-major product
 * into cuBLASLt's layouts.
 *
 * A gpt2_gemm is C = alpha op(A) op(B) + beta C (+ bias), row-major, done
 * `batch` times with element strides sa, sb, sc.  Pointers are of the
 * working dtype (es bytes an element), C of f32 when c32.
 */
#ifndef EXAMPLES_GPT2_GPT2_GEMM_H
#define EXAMPLES_GPT2_GPT2_GEMM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gpt2_gemm {
	int ta, tb, m, n, k;
	float alpha;
	const void *A;
	int lda;
	long long sa;
	const void *B;
	int ldb;
	long long sb;
	float beta;
	void *C;
	int ldc;
	long long sc;
	int batch;        /* 0 or 1: one product */
	int c32;          /* C is f32 */
	const void *bias; /* n values of the working dtype added to each row */
} gpt2_gemm;

/* Element i of a buffer of es-byte elements. */
static inline void *gpt2_at(const void *base, size_t i, size_t es)
{
	return (char *)base + i * es;
}

/* ---- cuBLASLt's view ---------------------------------------------------------------------- */

/* One matrix as cublasLtMatrixLayoutCreate takes it: rows x cols
 * column-major, leading dimension ld (element (r, c) at r + c ld), batch
 * matrices `stride` elements apart. */
typedef struct gpt2_lt_layout {
	uint64_t rows, cols;
	int64_t ld;
	int batch;
	long long stride;
} gpt2_lt_layout;

/* The column-major product cuBLASLt computes for a row-major one: D^T =
 * op(B)^T op(A)^T, so its A is our B (transposed when tb), its B our A
 * (transposed when ta), its C and D our C.  A stored row-major r x c
 * matrix is a column-major c x r one with the same leading dimension. */
typedef struct gpt2_lt_view {
	int trans_a, trans_b;   /* CUBLAS_OP_T for cuBLASLt's A, B */
	gpt2_lt_layout a, b, c; /* cuBLASLt's A (our B), B (our A), C = D */
} gpt2_lt_view;

static inline void gpt2_lt_layout_set(gpt2_lt_layout *l, int rows, int cols, int ld, int batch,
                                      long long stride)
{
	l->rows = (uint64_t)rows;
	l->cols = (uint64_t)cols;
	l->ld = ld;
	l->batch = batch;
	l->stride = batch > 1 ? stride : 0;
}

static inline void gpt2_lt_view_of(const gpt2_gemm *g, gpt2_lt_view *v)
{
	int batch = g->batch > 1 ? g->batch : 1;
	v->trans_a = g->tb;
	v->trans_b = g->ta;
	/* stored: our A is m x k (k x m when ta), our B k x n (n x k when tb),
	 * C m x n, each row-major r x c: column-major c x r */
	gpt2_lt_layout_set(&v->b, g->ta ? g->m : g->k, g->ta ? g->k : g->m, g->lda, batch, g->sa);
	gpt2_lt_layout_set(&v->a, g->tb ? g->k : g->n, g->tb ? g->n : g->k, g->ldb, batch, g->sb);
	gpt2_lt_layout_set(&v->c, g->n, g->m, g->ldc, batch, g->sc);
}

/* ---- the products of gpt2_cuda.cu ------------------------------------------------------- */

/* linear forward: y[N, out] = x[N, in] . W[out, in]^T + b */
static inline gpt2_gemm gpt2_gemm_linear_fwd(void *y, const void *x, const void *W,
                                            const void *b, int N, int in, int out)
{
	gpt2_gemm g = {0, 1, N, out, in, 1.0f, x, in, 0, W, in, 0, 0.0f, y, out, 0, 1, 0, b};
	return g;
}

/* linear backward: dW[out, in] (f32) += dy[N, out]^T . x[N, in] */
static inline gpt2_gemm gpt2_gemm_linear_dw(float *dW, const void *dy, const void *x, int N,
                                           int in, int out)
{
	gpt2_gemm g = {1, 0, out, in, N, 1.0f, dy, out, 0, x, in, 0, 1.0f, dW, in, 0, 1, 1, NULL};
	return g;
}

/* linear backward: dx[N, in] = dy[N, out] . W[out, in] */
static inline gpt2_gemm gpt2_gemm_linear_dx(void *dx, const void *dy, const void *W, int N,
                                           int in, int out)
{
	gpt2_gemm g = {0, 0, N, in, out, 1.0f, dy, out, 0, W, in, 0, 0.0f, dx, in, 0, 1, 0, NULL};
	return g;
}

/* head: logits[N, V] (rows ldv apart) = lnf[N, C] . head[V, C]^T */
static inline gpt2_gemm gpt2_gemm_head_fwd(void *logits, int ldv, const void *lnf,
                                          const void *head, int N, int C, int V)
{
	gpt2_gemm g = {0, 1, N, V, C, 1.0f, lnf, C, 0, head, C, 0, 0.0f, logits, ldv, 0, 1, 0, NULL};
	return g;
}

/* head backward: dhead[V, C] (f32) += dlogits[N, V]^T . lnf[N, C] */
static inline gpt2_gemm gpt2_gemm_head_dw(float *dhead, const void *dlogits, int ldv,
                                         const void *lnf, int N, int C, int V)
{
	gpt2_gemm g = {1, 0, V, C, N, 1.0f, dlogits, ldv, 0, lnf, C, 0, 1.0f, dhead, C, 0, 1, 1,
	               NULL};
	return g;
}

/* head backward: dln[N, C] = dlogits[N, V] . head[V, C] */
static inline gpt2_gemm gpt2_gemm_head_dx(void *dln, const void *dlogits, int ldv,
                                         const void *head, int N, int C, int V)
{
	gpt2_gemm g = {0, 0, N, C, V, 1.0f, dlogits, ldv, 0, head, C, 0, 0.0f, dln, C, 0, 1, 0,
	               NULL};
	return g;
}

/* Attention of one sequence, batched over its H heads (head h of q, k, v
 * at columns h hd, C + h hd, 2C + h hd of a qkv row [T, 3C]; its
 * probabilities T*T apart).  Forward: [0] att_h = scale q_h k_h^T, (the
 * causal softmax), [1] y_h = att_h v_h with y [T, C]. */
static inline void gpt2_gemm_attn_fwd(gpt2_gemm g[2], void *y, void *att, const void *qkv,
                                      int T, int C, int H, size_t es)
{
	int hd = C / H;
	float scale = (float)(1.0 / sqrt((double)hd));
	long long TT = (long long)T * T;
	gpt2_gemm s = {0, 1, T, T, hd, scale, qkv, 3 * C, hd, gpt2_at(qkv, (size_t)C, es), 3 * C,
	               hd, 0.0f, att, T, TT, H, 0, NULL};
	gpt2_gemm o = {0, 0, T, hd, T, 1.0f, att, T, TT, gpt2_at(qkv, 2 * (size_t)C, es), 3 * C,
	               hd, 0.0f, y, C, hd, H, 0, NULL};
	g[0] = s;
	g[1] = o;
}

/* Backward from dy [T, C] into dqkv [T, 3C], dS [H, T, T] scratch:
 * [0] dP_h = dy_h v_h^T (into dS), [1] dv_h = att_h^T dy_h, (the softmax's
 * backward turns dP into dS in place), [2] dq_h = scale dS_h k_h,
 * [3] dk_h = scale dS_h^T q_h. */
static inline void gpt2_gemm_attn_bwd(gpt2_gemm g[4], void *dqkv, void *dS, const void *dy,
                                      const void *att, const void *qkv, int T, int C, int H,
                                      size_t es)
{
	int hd = C / H;
	float scale = (float)(1.0 / sqrt((double)hd));
	long long TT = (long long)T * T;
	const void *q = qkv, *k = gpt2_at(qkv, (size_t)C, es), *v = gpt2_at(qkv, 2 * (size_t)C, es);
	void *dq = dqkv, *dk = gpt2_at(dqkv, (size_t)C, es), *dv = gpt2_at(dqkv, 2 * (size_t)C, es);
	gpt2_gemm dp = {0, 1, T, T, hd, 1.0f, dy, C, hd, v, 3 * C, hd, 0.0f, dS, T, TT, H, 0, NULL};
	gpt2_gemm dvv = {1, 0, T, hd, T, 1.0f, att, T, TT, dy, C, hd, 0.0f, dv, 3 * C, hd, H, 0,
	                 NULL};
	gpt2_gemm dqa = {0, 0, T, hd, T, scale, dS, T, TT, k, 3 * C, hd, 0.0f, dq, 3 * C, hd, H, 0,
	                 NULL};
	gpt2_gemm dka = {1, 0, T, hd, T, scale, dS, T, TT, q, 3 * C, hd, 0.0f, dk, 3 * C, hd, H, 0,
	                 NULL};
	g[0] = dp;
	g[1] = dvv;
	g[2] = dqa;
	g[3] = dka;
}

#endif
