/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_model.c: forward and backward of GPT-2 (gpt2.h), over
 * the scalar type gpt2_real: float with the GEMMs of blas.h, or double
 * (GPT2_F64, the gradient check) with loop GEMMs.  Loops run over
 * contiguous rows so compilers vectorise them; in float, those with exp or
 * tanh (softmax, loss, GELU) are gpt2_vmath.h's vector kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"

#ifdef GPT2_F64
/* C = alpha op(A) op(B) + beta C, row-major (blas.h's contract). */
static void gemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                 const double *b, int ldb, double beta, double *c, int ldc)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double s = 0;
			for (int p = 0; p < k; p++)
				s += (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
				     (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
			double *cij = c + (size_t)i * ldc + j;
			*cij = alpha * s + (beta == 0 ? 0 : beta * *cij);
		}
}
/* the gradient check computes in f64 throughout (prec stays f32) */
static void round16(int prec, double *x, size_t n)
{
	(void)prec;
	(void)x;
	(void)n;
}

/* gpt2_vmath.h's contracts in double, with libm */
static double vmax(const double *x, size_t n)
{
	double m = x[0];
	for (size_t i = 1; i < n; i++)
		m = x[i] > m ? x[i] : m;
	return m;
}

static double vexp_sum(double *y, const double *x, double shift, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) {
		double e = exp(x[i] - shift);
		if (y)
			y[i] = e;
		s += e;
	}
	return s;
}

static void vscale(double *x, double s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

static double vdot(const double *x, const double *y, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += x[i] * y[i];
	return s;
}

#define GELU_K 0.7978845608028654   /* sqrt(2 / pi) */
#define GELU_A 0.044715

static void gelu_forward(double *y, const double *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double v = x[i];
		y[i] = 0.5 * v * (1 + tanh(GELU_K * (v + GELU_A * v * v * v)));
	}
}

/* d *= gelu'(x) */
static void gelu_backward(double *d, const double *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double v = x[i];
		double t = tanh(GELU_K * (v + GELU_A * v * v * v));
		double dt = GELU_K * (1 + 3 * GELU_A * v * v);
		d[i] *= 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * dt;
	}
}
#else
#include "blas.h"
#include "gpt2_vmath.h"
#include "mlp.h"
static void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc)
{
	blas_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

_Static_assert((int)GPT2_ACT_BF16 == (int)MLP_BF16 && (int)GPT2_ACT_F16 == (int)MLP_F16 &&
               (int)GPT2_ACT_F32 == (int)MLP_F32,
               "gpt2.h's activation types are mlp.h's");

/* A 16-bit program's stored value: train_mlp's rounding (mlp.h). */
static void round16(int prec, float *x, size_t n)
{
	mlp_round(x, n, prec);
}

#define vmax gpt2_vmath_max
#define vexp_sum gpt2_vmath_exp_sum
#define vscale gpt2_vmath_scale
#define vdot gpt2_vmath_dot
#define gelu_forward gpt2_vmath_gelu_forward
#define gelu_backward gpt2_vmath_gelu_backward
#endif

typedef gpt2_real real;
typedef GPT2(work) work;
typedef GPT2(block_act) block_act;

#define LN_EPS 1e-5

/* ---- allocation ---------------------------------------------------------- */

static real *alloc(size_t n, size_t *total)
{
	*total += n * sizeof(real);
	return calloc(n ? n : 1, sizeof(real));
}

int GPT2(work_init)(work *w, const gpt2_config *c, int B, int recompute)
{
	memset(w, 0, sizeof(*w));
	w->c = *c;
	w->B = B;
	w->recompute = recompute;
	size_t BT = (size_t)B * (size_t)c->seq, C = (size_t)c->dim, T = (size_t)c->seq,
	       H = (size_t)c->heads, V = (size_t)c->vocab, sz = 0;
	w->blk = calloc((size_t)c->layers, sizeof(*w->blk));
	if (!w->blk)
		return -1;
	for (int l = 0; l < c->layers; l++) {
		block_act *a = &w->blk[l];
		if (!(a->in = alloc(BT * C, &sz)))
			return -1;
		if (recompute && l > 0) {   /* share block 0's intermediates */
			block_act in = *a;
			*a = w->blk[0];
			a->in = in.in;
			continue;
		}
		a->ln1 = alloc(BT * C, &sz);
		a->mean1 = alloc(BT, &sz);
		a->rstd1 = alloc(BT, &sz);
		a->qkv = alloc(BT * 3 * C, &sz);
		a->att = alloc((size_t)B * H * T * T, &sz);
		a->atty = alloc(BT * C, &sz);
		a->mid = alloc(BT * C, &sz);
		a->ln2 = alloc(BT * C, &sz);
		a->mean2 = alloc(BT, &sz);
		a->rstd2 = alloc(BT, &sz);
		a->fc = alloc(BT * 4 * C, &sz);
		a->gelu = alloc(BT * 4 * C, &sz);
		if (!a->ln1 || !a->mean1 || !a->rstd1 || !a->qkv || !a->att || !a->atty || !a->mid ||
		    !a->ln2 || !a->mean2 || !a->rstd2 || !a->fc || !a->gelu)
			return -1;
	}
	w->out = alloc(BT * C, &sz);
	w->lnf = alloc(BT * C, &sz);
	w->meanf = alloc(BT, &sz);
	w->rstdf = alloc(BT, &sz);
	w->logits = alloc(BT * V, &sz);
	w->dx = alloc(BT * C, &sz);
	w->dbuf = alloc(BT * (4 + 3 + 1 + 1) * C + T * T, &sz);
	if (!w->out || !w->lnf || !w->meanf || !w->rstdf || !w->logits || !w->dx || !w->dbuf)
		return -1;
	return 0;
}

void GPT2(work_free)(work *w)
{
	if (w->blk)
		for (int l = 0; l < w->c.layers; l++) {
			block_act *a = &w->blk[l];
			free(a->in);
			if (w->recompute && l > 0)
				continue;
			free(a->ln1);
			free(a->mean1);
			free(a->rstd1);
			free(a->qkv);
			free(a->att);
			free(a->atty);
			free(a->mid);
			free(a->ln2);
			free(a->mean2);
			free(a->rstd2);
			free(a->fc);
			free(a->gelu);
		}
	free(w->blk);
	free(w->out);
	free(w->lnf);
	free(w->meanf);
	free(w->rstdf);
	free(w->logits);
	free(w->dx);
	free(w->dbuf);
	memset(w, 0, sizeof(*w));
}

size_t GPT2(work_bytes)(const work *w)
{
	size_t BT = (size_t)w->B * (size_t)w->c.seq, C = (size_t)w->c.dim, T = (size_t)w->c.seq,
	       H = (size_t)w->c.heads, V = (size_t)w->c.vocab;
	size_t blk = BT * C * 9 + BT * 4 + BT * 3 * C + (size_t)w->B * H * T * T;
	size_t n = (size_t)w->c.layers * BT * C +
	           (w->recompute ? 1 : (size_t)w->c.layers) * blk +
	           BT * C * 3 + BT * 2 + BT * V + BT * 9 * C + T * T;
	return n * sizeof(real);
}

/* ---- pieces -------------------------------------------------------------- */

static void layernorm_forward(real *y, real *mean, real *rstd, const real *x, const real *g,
                              const real *b, size_t N, int C)
{
	for (size_t i = 0; i < N; i++) {
		const real *xi = x + i * (size_t)C;
		real *yi = y + i * (size_t)C;
		double m = 0, v = 0;
		for (int j = 0; j < C; j++)
			m += xi[j];
		m /= C;
		for (int j = 0; j < C; j++)
			v += ((double)xi[j] - m) * ((double)xi[j] - m);
		v /= C;
		real r = (real)(1.0 / sqrt(v + LN_EPS)), mr = (real)m;
		for (int j = 0; j < C; j++)
			yi[j] = (xi[j] - mr) * r * g[j] + b[j];
		mean[i] = mr;
		rstd[i] = r;
	}
}

/* dx += d LN / dx . dy; dg += sum dy * xhat; db += sum dy. */
static void layernorm_backward(real *dx, real *dg, real *db, const real *dy, const real *x,
                               const real *g, const real *mean, const real *rstd, size_t N,
                               int C)
{
	for (size_t i = 0; i < N; i++) {
		const real *dyi = dy + i * (size_t)C, *xi = x + i * (size_t)C;
		real *dxi = dx + i * (size_t)C;
		real m = mean[i], r = rstd[i];
		real s1 = 0, s2 = 0;   /* mean of dxhat and of dxhat * xhat */
		for (int j = 0; j < C; j++) {
			real xh = (xi[j] - m) * r, dxh = dyi[j] * g[j];
			s1 += dxh;
			s2 += dxh * xh;
			dg[j] += dyi[j] * xh;
			db[j] += dyi[j];
		}
		s1 /= (real)C;
		s2 /= (real)C;
		for (int j = 0; j < C; j++) {
			real xh = (xi[j] - m) * r;
			dxi[j] += r * (dyi[j] * g[j] - s1 - xh * s2);
		}
	}
}

/* y[N, out] = x[N, in] . W^T + b, stored in prec.  The bias goes in first
 * and the GEMM adds to it (beta 1): one pass over y fewer than zeroing it
 * (what a BLAS does for beta 0) and adding b afterwards, same sum. */
static void linear_forward(real *y, const real *x, const real *W, const real *b, size_t N,
                           int in, int out, int prec)
{
	for (size_t i = 0; i < N; i++)
		memcpy(y + i * (size_t)out, b, (size_t)out * sizeof(real));
	gemm(0, 1, (int)N, out, in, 1, x, in, W, in, 1, y, out);
	round16(prec, y, N * (size_t)out);
}

/* dW += dy^T x, db += sum dy, dx = dy . W (dx may be NULL; stored in
 * prec). */
static void linear_backward(real *dx, real *dW, real *db, const real *dy, const real *x,
                            const real *W, size_t N, int in, int out, int prec)
{
	gemm(1, 0, out, in, (int)N, 1, dy, out, x, in, 1, dW, in);
	for (size_t i = 0; i < N; i++) {
		const real *dyi = dy + i * (size_t)out;
		for (int j = 0; j < out; j++)
			db[j] += dyi[j];
	}
	if (dx) {
		gemm(0, 0, (int)N, in, out, 1, dy, out, W, in, 0, dx, in);
		round16(prec, dx, N * (size_t)in);
	}
}

/* Causal attention of one sequence's heads: qkv [T, 3C] -> y [T, C],
 * probabilities att [H, T, T] (zero above the diagonal).  In 16 bits the
 * scores and the softmax are f32 (a fused attention's registers) and P is
 * rounded before P.V, as y is after it. */
static void attention_forward(real *y, real *att, const real *qkv, int T, int C, int H,
                              int prec)
{
	int hd = C / H;
	real scale = (real)(1.0 / sqrt((double)hd));
	for (int h = 0; h < H; h++) {
		const real *q = qkv + h * hd, *k = q + C, *v = q + 2 * C;
		real *P = att + (size_t)h * T * T;
		gemm(0, 1, T, T, hd, scale, q, 3 * C, k, 3 * C, 0, P, T);
		for (int i = 0; i < T; i++) {
			real *row = P + (size_t)i * T, mx = vmax(row, (size_t)i + 1);
			real s = (real)vexp_sum(row, row, mx, (size_t)i + 1);
			vscale(row, 1 / s, (size_t)i + 1);
			for (int j = i + 1; j < T; j++)
				row[j] = 0;
		}
		round16(prec, P, (size_t)T * T);
		gemm(0, 0, T, hd, T, 1, P, T, v, 3 * C, 0, y + h * hd, C);
	}
	round16(prec, y, (size_t)T * C);
}

/* dqkv [T, 3C] from dy [T, C]; dS: [T, T] scratch.  In 16 bits dP and
 * the softmax backward are f32; dS (a GEMM input) and dqkv are rounded. */
static void attention_backward(real *dqkv, real *dS, const real *dy, const real *att,
                               const real *qkv, int T, int C, int H, int prec)
{
	int hd = C / H;
	real scale = (real)(1.0 / sqrt((double)hd));
	for (int h = 0; h < H; h++) {
		const real *q = qkv + h * hd, *k = q + C, *v = q + 2 * C, *dyh = dy + h * hd;
		const real *P = att + (size_t)h * T * T;
		real *dq = dqkv + h * hd, *dk = dq + C, *dv = dq + 2 * C;
		gemm(0, 1, T, T, hd, 1, dyh, C, v, 3 * C, 0, dS, T);      /* dP */
		gemm(1, 0, T, hd, T, 1, P, T, dyh, C, 0, dv, 3 * C);       /* dv = P^T dy */
		for (int i = 0; i < T; i++) {
			const real *p = P + (size_t)i * T;
			real *d = dS + (size_t)i * T, s = (real)vdot(p, d, (size_t)i + 1);
			for (int j = 0; j <= i; j++)
				d[j] = p[j] * (d[j] - s);
			for (int j = i + 1; j < T; j++)
				d[j] = 0;
		}
		round16(prec, dS, (size_t)T * T);
		gemm(0, 0, T, hd, T, scale, dS, T, k, 3 * C, 0, dq, 3 * C);
		gemm(1, 0, T, hd, T, scale, dS, T, q, 3 * C, 0, dk, 3 * C);
	}
	round16(prec, dqkv, (size_t)T * 3 * C);
}

/* ---- the units ----------------------------------------------------------- */

void GPT2(embed_forward)(work *w, const int32_t *tokens, const real *wte, const real *wpe, int n)
{
	int T = w->c.seq, C = w->c.dim;
	real *x = w->blk[0].in;
	w->tokens = tokens;
	for (size_t i = 0; i < (size_t)n * (size_t)T; i++) {
		const real *te = wte + (size_t)tokens[i] * C, *pe = wpe + (i % (size_t)T) * C;
		real *xi = x + i * (size_t)C;
		for (int j = 0; j < C; j++)
			xi[j] = te[j] + pe[j];
	}
}

void GPT2(block_forward)(work *w, int l, const real *const *p, int n)
{
	int T = w->c.seq, C = w->c.dim, H = w->c.heads;
	size_t N = (size_t)n * (size_t)T;
	block_act *a = &w->blk[l];
	real *out = l + 1 < w->c.layers ? w->blk[l + 1].in : w->out;
	int pr = w->prec;
	/* 16 bits: each GEMM operand stored rounded; the residual sums are f32 */
	layernorm_forward(a->ln1, a->mean1, a->rstd1, a->in, p[GPT2_LN1_W], p[GPT2_LN1_B], N, C);
	round16(pr, a->ln1, N * (size_t)C);
	linear_forward(a->qkv, a->ln1, p[GPT2_QKV_W], p[GPT2_QKV_B], N, C, 3 * C, pr);
	for (int b = 0; b < n; b++)
		attention_forward(a->atty + (size_t)b * T * C, a->att + (size_t)b * H * T * T,
		                  a->qkv + (size_t)b * T * 3 * C, T, C, H, pr);
	linear_forward(a->mid, a->atty, p[GPT2_APROJ_W], p[GPT2_APROJ_B], N, C, C, pr);
	for (size_t i = 0; i < N * (size_t)C; i++)
		a->mid[i] += a->in[i];
	layernorm_forward(a->ln2, a->mean2, a->rstd2, a->mid, p[GPT2_LN2_W], p[GPT2_LN2_B], N, C);
	round16(pr, a->ln2, N * (size_t)C);
	linear_forward(a->fc, a->ln2, p[GPT2_FC_W], p[GPT2_FC_B], N, C, 4 * C, pr);
	gelu_forward(a->gelu, a->fc, N * 4 * (size_t)C);
	round16(pr, a->gelu, N * 4 * (size_t)C);
	linear_forward(out, a->gelu, p[GPT2_MPROJ_W], p[GPT2_MPROJ_B], N, 4 * C, C, pr);
	for (size_t i = 0; i < N * (size_t)C; i++)
		out[i] += a->mid[i];
}

void GPT2(head_forward)(work *w, const real *lnf_w, const real *lnf_b, const real *head, int n)
{
	int C = w->c.dim, V = w->c.vocab;
	size_t N = (size_t)n * (size_t)w->c.seq;
	layernorm_forward(w->lnf, w->meanf, w->rstdf, w->out, lnf_w, lnf_b, N, C);
	round16(w->prec, w->lnf, N * (size_t)C);
	gemm(0, 1, (int)N, V, C, 1, w->lnf, C, head, C, 0, w->logits, V);
	round16(w->prec, w->logits, N * (size_t)V);
}

double GPT2(loss)(work *w, const int32_t *targets, int n, double dlogits_scale)
{
	int V = w->c.vocab;
	size_t N = (size_t)n * (size_t)w->c.seq;
	double sum = 0;
	int grad = dlogits_scale != 0;
	for (size_t i = 0; i < N; i++) {
		real *row = w->logits + i * (size_t)V;
		real mx = vmax(row, (size_t)V), xt = row[targets[i]];
		/* with grad, row becomes exp(row - mx) on the way */
		double s = vexp_sum(grad ? row : NULL, row, mx, (size_t)V);
		sum += log(s) + (double)mx - (double)xt;
		if (grad) {
			real sc = (real)dlogits_scale;
			vscale(row, (real)(1.0 / s) * sc, (size_t)V);
			row[targets[i]] -= sc;
			round16(w->prec, row, (size_t)V);   /* dlogits: a GEMM input */
		}
	}
	return sum;
}

void GPT2(head_backward)(work *w, const real *lnf_w, const real *head, real *dlnf_w,
                         real *dlnf_b, real *dhead, int n)
{
	int C = w->c.dim, V = w->c.vocab;
	size_t N = (size_t)n * (size_t)w->c.seq;
	real *dln = w->dbuf;
	gemm(1, 0, V, C, (int)N, 1, w->logits, V, w->lnf, C, 1, dhead, C);
	gemm(0, 0, (int)N, C, V, 1, w->logits, V, head, C, 0, dln, C);
	round16(w->prec, dln, N * (size_t)C);
	memset(w->dx, 0, N * (size_t)C * sizeof(real));
	layernorm_backward(w->dx, dlnf_w, dlnf_b, dln, w->out, lnf_w, w->meanf, w->rstdf, N, C);
}

void GPT2(block_backward)(work *w, int l, const real *const *p, real *const *g, int n)
{
	int T = w->c.seq, C = w->c.dim, H = w->c.heads;
	size_t N = (size_t)n * (size_t)T;
	block_act *a = &w->blk[l];
	int pr = w->prec;
	real *dres = w->dx;
	real *dfc = w->dbuf, *dqkv = dfc + N * 4 * C, *datty = dqkv + N * 3 * C,
	     *dln = datty + N * C, *dS = dln + N * C;
	/* The residual's gradient stays f32; in 16 bits the projections see it
	 * rounded (the gradient wrt their 16-bit output), in a buffer free at
	 * that point: datty before the attention part, dln within it. */
	const real *dy = dres;
	if (pr != GPT2_ACT_F32) {
		memcpy(datty, dres, N * (size_t)C * sizeof(real));
		round16(pr, datty, N * (size_t)C);
		dy = datty;
	}
	/* MLP */
	linear_backward(dfc, g[GPT2_MPROJ_W], g[GPT2_MPROJ_B], dy, a->gelu, p[GPT2_MPROJ_W], N,
	                4 * C, C, pr);
	gelu_backward(dfc, a->fc, N * 4 * (size_t)C);
	round16(pr, dfc, N * 4 * (size_t)C);
	linear_backward(dln, g[GPT2_FC_W], g[GPT2_FC_B], dfc, a->ln2, p[GPT2_FC_W], N, C, 4 * C, pr);
	layernorm_backward(dres, g[GPT2_LN2_W], g[GPT2_LN2_B], dln, a->mid, p[GPT2_LN2_W], a->mean2,
	                   a->rstd2, N, C);
	/* attention */
	if (pr != GPT2_ACT_F32) {
		memcpy(dln, dres, N * (size_t)C * sizeof(real));
		round16(pr, dln, N * (size_t)C);
		dy = dln;
	}
	linear_backward(datty, g[GPT2_APROJ_W], g[GPT2_APROJ_B], dy, a->atty, p[GPT2_APROJ_W], N, C,
	                C, pr);
	for (int b = 0; b < n; b++)
		attention_backward(dqkv + (size_t)b * T * 3 * C, dS, datty + (size_t)b * T * C,
		                   a->att + (size_t)b * H * T * T, a->qkv + (size_t)b * T * 3 * C, T, C,
		                   H, pr);
	linear_backward(dln, g[GPT2_QKV_W], g[GPT2_QKV_B], dqkv, a->ln1, p[GPT2_QKV_W], N, C, 3 * C,
	                pr);
	layernorm_backward(dres, g[GPT2_LN1_W], g[GPT2_LN1_B], dln, a->in, p[GPT2_LN1_W], a->mean1,
	                   a->rstd1, N, C);
}

void GPT2(embed_backward)(work *w, real *dwte, real *dwpe, int n)
{
	int T = w->c.seq, C = w->c.dim;
	for (size_t i = 0; i < (size_t)n * (size_t)T; i++) {
		real *te = dwte + (size_t)w->tokens[i] * C, *pe = dwpe + (i % (size_t)T) * C;
		const real *d = w->dx + i * (size_t)C;
		for (int j = 0; j < C; j++) {
			te[j] += d[j];
			pe[j] += d[j];
		}
	}
}
