/* SPDX-License-Identifier: MIT */
/* tests/test-gpt2-gemm.c: the GEMMs of examples/gpt2's GPU path
 * (gpt2_gemm.h, what gpt2_cuda.cu hands cuBLASLt) run through a CPU
 * emulation of cuBLASLt's contract, against plain row-major loops, in f32;
 * no GPU needed.  The emulation takes each product exactly as cuBLASLt is
 * given it (gpt2_lt_view_of: column-major layouts of rows x cols with a
 * leading dimension, batch count and stride, transposes of its A and B,
 * D = alpha op(A) op(B) + beta C + bias per row of D) and checks that the
 * layouts are consistent (inner dimensions agree, ld >= rows).  Covered:
 * a linear layer forward (with bias) and both backward products, the tied
 * head with the logits' padded row stride, and attention forward and
 * backward batched over the heads (the head offsets and strides inside a
 * qkv row), with the causal softmax and its backward as the kernels do
 * them.  Odd sizes: 5 rows, 3 heads of dim 4, 7 tokens, vocabulary 11
 * padded to 16.  Values within 1e-5 of each tensor's largest (f32 sums in
 * another order; observed at most about 1e-7). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_gemm.h"
#include "tensor-cmp.h"

static int fails;

static float lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(*s >> 40) / (double)(1ull << 24) - 0.5);
}

static float *rnd(size_t n, uint64_t *seed)
{
	float *x = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = lcg(seed);
	return x;
}

static float *copy(const float *x, size_t n)
{
	float *y = malloc(n * sizeof(float));
	memcpy(y, x, n * sizeof(float));
	return y;
}

static void check(const char *what, const float *want, const float *got, size_t n)
{
	double md, ma;
	double rel = tensor_cmp_rel(want, got, n, &md, &ma);
	printf("%s %s: max difference %.3e, max |value| %.3e, relative %.3e\n",
	       rel <= 1e-5 ? "ok:" : "FAIL:", what, md, ma, rel);
	if (!(rel <= 1e-5))
		fails++;
}

/* element (r, c) of a column-major layout */
static float *el(const gpt2_lt_layout *l, const void *base, int b, uint64_t r, uint64_t c)
{
	return (float *)base + (size_t)b * (size_t)l->stride + r + c * (size_t)l->ld;
}

/* cuBLASLt's D = alpha op(A) op(B) + beta C (+ bias[i] on row i of D), D = C,
 * for every batch, on the layouts gemm gives it. */
static void lt_emulate(const char *what, const gpt2_gemm *g)
{
	gpt2_lt_view v;
	gpt2_lt_view_of(g, &v);
	const gpt2_lt_layout *la = &v.a, *lb = &v.b, *lc = &v.c;
	uint64_t M = lc->rows, N = lc->cols;
	uint64_t am = v.trans_a ? la->cols : la->rows, K = v.trans_a ? la->rows : la->cols;
	uint64_t bk = v.trans_b ? lb->cols : lb->rows, bn = v.trans_b ? lb->rows : lb->cols;
	if (am != M || bk != K || bn != N || la->ld < (int64_t)la->rows ||
	    lb->ld < (int64_t)lb->rows || lc->ld < (int64_t)lc->rows ||
	    la->batch != lc->batch || lb->batch != lc->batch) {
		printf("FAIL: %s: inconsistent layouts: op(A) %llu x %llu, op(B) %llu x %llu, D "
		       "%llu x %llu, ld %lld %lld %lld\n", what, (unsigned long long)am,
		       (unsigned long long)K, (unsigned long long)bk, (unsigned long long)bn,
		       (unsigned long long)M, (unsigned long long)N, (long long)la->ld,
		       (long long)lb->ld, (long long)lc->ld);
		fails++;
		return;
	}
	for (int b = 0; b < lc->batch; b++)
		for (uint64_t i = 0; i < M; i++)
			for (uint64_t j = 0; j < N; j++) {
				double s = 0;
				for (uint64_t k = 0; k < K; k++) {
					float a = v.trans_a ? *el(la, g->B, b, k, i) : *el(la, g->B, b, i, k);
					float bb = v.trans_b ? *el(lb, g->A, b, j, k) : *el(lb, g->A, b, k, j);
					s += (double)a * bb;
				}
				float *d = el(lc, g->C, b, i, j);
				double r = g->alpha * s + (g->beta != 0 ? g->beta * *d : 0);
				if (g->bias)
					r += ((const float *)g->bias)[i];
				*d = (float)r;
			}
}

static void test_linear(void)
{
	enum { N = 5, IN = 6, OUT = 10 };
	uint64_t seed = 1;
	float *x = rnd(N * IN, &seed), *W = rnd(OUT * IN, &seed), *b = rnd(OUT, &seed),
	      *dy = rnd(N * OUT, &seed), *dW0 = rnd(OUT * IN, &seed);
	float y[N * OUT], yw[N * OUT], dx[N * IN], dxw[N * IN];
	float *dW = copy(dW0, OUT * IN), *dWw = copy(dW0, OUT * IN);
	for (int i = 0; i < N; i++)
		for (int o = 0; o < OUT; o++) {
			double s = b[o];
			for (int k = 0; k < IN; k++)
				s += (double)x[i * IN + k] * W[o * IN + k];
			yw[i * OUT + o] = (float)s;
		}
	for (int o = 0; o < OUT; o++)
		for (int k = 0; k < IN; k++) {
			double s = 0;
			for (int i = 0; i < N; i++)
				s += (double)dy[i * OUT + o] * x[i * IN + k];
			dWw[o * IN + k] += (float)s;
		}
	for (int i = 0; i < N; i++)
		for (int k = 0; k < IN; k++) {
			double s = 0;
			for (int o = 0; o < OUT; o++)
				s += (double)dy[i * OUT + o] * W[o * IN + k];
			dxw[i * IN + k] = (float)s;
		}
	memset(y, 0x7f, sizeof(y));   /* beta 0: whatever was there goes */
	gpt2_gemm f = gpt2_gemm_linear_fwd(y, x, W, b, N, IN, OUT),
	          gw = gpt2_gemm_linear_dw(dW, dy, x, N, IN, OUT),
	          gx = gpt2_gemm_linear_dx(dx, dy, W, N, IN, OUT);
	lt_emulate("linear forward", &f);
	lt_emulate("linear dW", &gw);
	lt_emulate("linear dx", &gx);
	check("linear forward (bias in the epilogue)", yw, y, N * OUT);
	check("linear dW += dy^T x", dWw, dW, OUT * IN);
	check("linear dx = dy W", dxw, dx, N * IN);
	free(x), free(W), free(b), free(dy), free(dW0), free(dW), free(dWw);
}

static void test_head(void)
{
	enum { N = 5, C = 6, V = 11, LDV = 16 };
	uint64_t seed = 2;
	float *lnf = rnd(N * C, &seed), *head = rnd(V * C, &seed), *dl = rnd(N * LDV, &seed),
	      *dh0 = rnd(V * C, &seed);
	float logits[N * LDV], lw[N * V], lg[N * V], dln[N * C], dlnw[N * C];
	float *dh = copy(dh0, V * C), *dhw = copy(dh0, V * C);
	for (int i = 0; i < N; i++)
		for (int v = 0; v < V; v++) {
			double s = 0;
			for (int c = 0; c < C; c++)
				s += (double)lnf[i * C + c] * head[v * C + c];
			lw[i * V + v] = (float)s;
		}
	for (int v = 0; v < V; v++)
		for (int c = 0; c < C; c++) {
			double s = 0;
			for (int i = 0; i < N; i++)
				s += (double)dl[i * LDV + v] * lnf[i * C + c];
			dhw[v * C + c] += (float)s;
		}
	for (int i = 0; i < N; i++)
		for (int c = 0; c < C; c++) {
			double s = 0;
			for (int v = 0; v < V; v++)
				s += (double)dl[i * LDV + v] * head[v * C + c];
			dlnw[i * C + c] = (float)s;
		}
	for (int i = 0; i < N * LDV; i++)
		logits[i] = -7.0f;   /* the padding columns must stay as they are */
	gpt2_gemm f = gpt2_gemm_head_fwd(logits, LDV, lnf, head, N, C, V),
	          gw = gpt2_gemm_head_dw(dh, dl, LDV, lnf, N, C, V),
	          gx = gpt2_gemm_head_dx(dln, dl, LDV, head, N, C, V);
	lt_emulate("head forward", &f);
	lt_emulate("head dW", &gw);
	lt_emulate("head dx", &gx);
	int pad_ok = 1;
	for (int i = 0; i < N; i++) {
		memcpy(lg + i * V, logits + i * LDV, V * sizeof(float));
		for (int v = V; v < LDV; v++)
			pad_ok &= logits[i * LDV + v] == -7.0f;
	}
	printf("%s head: padding columns of the logits untouched\n", pad_ok ? "ok:" : "FAIL:");
	fails += !pad_ok;
	check("head logits (row stride 16)", lw, lg, N * V);
	check("head dW += dlogits^T lnf", dhw, dh, V * C);
	check("head dln = dlogits head", dlnw, dln, N * C);
	free(lnf), free(head), free(dl), free(dh0), free(dh), free(dhw);
}

/* the kernels' causal softmax and its backward over rows = H*T rows */
static void softmax_rows(float *att, int rows, int T)
{
	for (int r = 0; r < rows; r++) {
		int i = r % T;
		float *row = att + (size_t)r * T, mx = -INFINITY, s = 0;
		for (int j = 0; j <= i; j++)
			mx = fmaxf(mx, row[j]);
		for (int j = 0; j <= i; j++)
			s += expf(row[j] - mx);
		for (int j = 0; j < T; j++)
			row[j] = j <= i ? expf(row[j] - mx) / s : 0.0f;
	}
}

static void softmax_bwd_rows(float *d, const float *p, int rows, int T)
{
	for (int r = 0; r < rows; r++) {
		int i = r % T;
		float *dr = d + (size_t)r * T, s = 0;
		const float *pr = p + (size_t)r * T;
		for (int j = 0; j <= i; j++)
			s += pr[j] * dr[j];
		for (int j = 0; j < T; j++)
			dr[j] = j <= i ? pr[j] * (dr[j] - s) : 0.0f;
	}
}

static void test_attention(void)
{
	enum { T = 7, H = 3, HD = 4, C = H * HD };
	uint64_t seed = 3;
	float *qkv = rnd(T * 3 * C, &seed), *dy = rnd(T * C, &seed);
	float att[H * T * T], y[T * C], dqkv[T * 3 * C], dS[H * T * T];
	float attw[H * T * T], yw[T * C], dqkvw[T * 3 * C];
	double scale = 1.0 / sqrt((double)HD);
	/* reference: per head, plain loops */
	memset(dqkvw, 0, sizeof(dqkvw));
	for (int h = 0; h < H; h++) {
		float *P = attw + h * T * T;
		for (int i = 0; i < T; i++)
			for (int j = 0; j < T; j++) {
				double s = 0;
				for (int d = 0; d < HD; d++)
					s += (double)qkv[i * 3 * C + h * HD + d] * qkv[j * 3 * C + C + h * HD + d];
				P[i * T + j] = (float)(s * scale);
			}
		softmax_rows(P, T, T);
		for (int i = 0; i < T; i++)
			for (int d = 0; d < HD; d++) {
				double s = 0;
				for (int j = 0; j < T; j++)
					s += (double)P[i * T + j] * qkv[j * 3 * C + 2 * C + h * HD + d];
				yw[i * C + h * HD + d] = (float)s;
			}
		float dP[T * T];
		for (int i = 0; i < T; i++)
			for (int j = 0; j < T; j++) {
				double s = 0;
				for (int d = 0; d < HD; d++)
					s += (double)dy[i * C + h * HD + d] * qkv[j * 3 * C + 2 * C + h * HD + d];
				dP[i * T + j] = (float)s;
			}
		for (int j = 0; j < T; j++)   /* dv = P^T dy */
			for (int d = 0; d < HD; d++) {
				double s = 0;
				for (int i = 0; i < T; i++)
					s += (double)P[i * T + j] * dy[i * C + h * HD + d];
				dqkvw[j * 3 * C + 2 * C + h * HD + d] = (float)s;
			}
		softmax_bwd_rows(dP, P, T, T);
		for (int i = 0; i < T; i++)   /* dq = scale dS k, dk = scale dS^T q */
			for (int d = 0; d < HD; d++) {
				double sq = 0, sk = 0;
				for (int j = 0; j < T; j++) {
					sq += (double)dP[i * T + j] * qkv[j * 3 * C + C + h * HD + d];
					sk += (double)dP[j * T + i] * qkv[j * 3 * C + h * HD + d];
				}
				dqkvw[i * 3 * C + h * HD + d] = (float)(sq * scale);
				dqkvw[i * 3 * C + C + h * HD + d] = (float)(sk * scale);
			}
	}
	/* gpt2_cuda.cu's order: the batched products around the kernels */
	gpt2_gemm f[2], b[4];
	gpt2_gemm_attn_fwd(f, y, att, qkv, T, C, H, sizeof(float));
	lt_emulate("attention scores", &f[0]);
	softmax_rows(att, H * T, T);
	lt_emulate("attention output", &f[1]);
	check("attention probabilities (batched over heads)", attw, att, H * T * T);
	check("attention output", yw, y, T * C);
	memset(dqkv, 0x7f, sizeof(dqkv));
	gpt2_gemm_attn_bwd(b, dqkv, dS, dy, att, qkv, T, C, H, sizeof(float));
	lt_emulate("attention dP", &b[0]);
	lt_emulate("attention dv", &b[1]);
	softmax_bwd_rows(dS, att, H * T, T);
	lt_emulate("attention dq", &b[2]);
	lt_emulate("attention dk", &b[3]);
	check("attention dqkv (dq, dk, dv interleaved per row)", dqkvw, dqkv, T * 3 * C);
	free(qkv), free(dy);
}

int main(void)
{
	test_linear();
	test_head();
	test_attention();
	if (fails) {
		printf("%d check(s) failed\n", fails);
		return 1;
	}
	printf("all GEMM layouts check out\n");
	return 0;
}
