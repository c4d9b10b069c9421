/* SPDX-License-Identifier: MIT */
/*
 * plugins/fp8/fp8_gemm.c: the "fp8.gemm" extension table (accel-fp8.h):
 * quantize, the scaled GEMM and a linear layer's forward and backward, on
 * cuBLASLt (fp8-cuda.so) for device operands and emulated on the CPU for
 * host ones.  Called by the program outside any plugin slot: it uses only
 * the buffers fp8_setup() allocated, the caller's workspace, and the host
 * members valid from any thread (stream, log, error).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp8.h"
#include "fp8_codec.h"

static fp8_state *state_of(const accel_fp8_gemm_v1 *self)
{
	/* the table is the first member of the state */
	return (fp8_state *)(void *)(uintptr_t)self;
}

static int is_fp8(uint32_t dt)
{
	return dt == ACCEL_DTYPE_F8E4M3 || dt == ACCEL_DTYPE_F8E5M2;
}

/* The loops keep each D[i, j] a plain in-order f32 sum over k (what the
 * reference computes) while running over a block of j at once: B is
 * dequantized transposed, so the innermost loop is over contiguous j and
 * vectorizes without reassociating any sum. */
#define EMU_JB 64

void fp8_gemm_emulate(uint64_t m, uint64_t n, uint64_t k, const uint8_t *a, uint32_t afmt,
                      float a_scale_inv, const uint8_t *b, uint32_t bfmt, float b_scale_inv,
                      float alpha, float *d, int accumulate)
{
	/* the dequantized value of every code, so each product is the one a
	 * dequantize-then-GEMM computes */
	float la[256], lb[256];
	for (int c = 0; c < 256; c++) {
		la[c] = fp8_decode(afmt, (uint8_t)c) * a_scale_inv;
		lb[c] = fp8_decode(bfmt, (uint8_t)c) * b_scale_inv;
	}
	float *bt = malloc((size_t)(n * k + 1) * sizeof(float));
	float *ar = malloc((size_t)(k + 1) * sizeof(float));
	if (!bt || !ar) {   /* no memory for the fast layout: the same sums, slower */
		free(bt);
		free(ar);
		for (uint64_t i = 0; i < m; i++)
			for (uint64_t j = 0; j < n; j++) {
				float acc = 0.0f;
				for (uint64_t t = 0; t < k; t++)
					acc += la[a[i * k + t]] * lb[b[j * k + t]];
				float v = alpha * acc;
				d[i * n + j] = accumulate ? d[i * n + j] + v : v;
			}
		return;
	}
	for (uint64_t j = 0; j < n; j++)
		for (uint64_t t = 0; t < k; t++)
			bt[t * n + j] = lb[b[j * k + t]];
	for (uint64_t i = 0; i < m; i++) {
		for (uint64_t t = 0; t < k; t++)
			ar[t] = la[a[i * k + t]];
		for (uint64_t j0 = 0; j0 < n; j0 += EMU_JB) {
			uint64_t jn = n - j0 < EMU_JB ? n - j0 : EMU_JB;
			float acc[EMU_JB];
			for (uint64_t j = 0; j < jn; j++)
				acc[j] = 0.0f;
			if (jn == EMU_JB)   /* a constant trip count: the compiler vectorizes it */
				for (uint64_t t = 0; t < k; t++) {
					const float av = ar[t], *brow = bt + t * n + j0;
					for (int j = 0; j < EMU_JB; j++)
						acc[j] += av * brow[j];
				}
			else
				for (uint64_t t = 0; t < k; t++) {
					const float av = ar[t], *brow = bt + t * n + j0;
					for (uint64_t j = 0; j < jn; j++)
						acc[j] += av * brow[j];
				}
			float *dr = d + i * n + j0;
			for (uint64_t j = 0; j < jn; j++) {
				float v = alpha * acc[j];
				dr[j] = accumulate ? dr[j] + v : v;
			}
		}
	}
	free(bt);
	free(ar);
}

static int cuda_fail(fp8_state *s, const char *what, const char *err)
{
	return s->host->error(s->h, ACCEL_ERR_CUDA, "fp8: %s on the GPU: %s", what, err);
}

/* Views of one call must all be on the host, or all on the device the
 * CUDA part runs on. */
static int where(fp8_state *s, const char *fn, const accel_view *const *v, int n, int *ret_dev)
{
	int dev = -1;
	for (int i = 0; i < n; i++) {
		if (!v[i])
			continue;
		if (v[i]->numel && !v[i]->data)
			return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm %s: operand %d has "
			                      "no data", fn, i);
		int d = v[i]->device == ACCEL_DEVICE_CUDA;
		if (dev >= 0 && d != dev)
			return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm %s: operands on the "
			                      "host and on a CUDA device mixed; put them all in one place",
			                      fn);
		dev = d;
	}
	if (dev == 1 && !s->cuda)
		return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED, "fp8.gemm %s: CUDA operands, but "
		                      "this process emulates fp8 on the CPU (no device of compute "
		                      "capability >= 8.9 with cuBLASLt): pass host memory", fn);
	if (dev == 1 && !s->cctx) {
		char err[512];
		if (s->cuda->ctx_new(v[0]->device_index, &s->cctx, err, sizeof(err)))
			return cuda_fail(s, "creating the cuBLASLt handle", err);
		s->cuda_device = v[0]->device_index;
	}
	*ret_dev = dev == 1;
	return ACCEL_OK;
}

static int tbl_quantize(const accel_fp8_gemm_v1 *self, const accel_view *dst,
                        const accel_view *src, float scale, float *ret_amax)
{
	fp8_state *s = state_of(self);
	const accel_view *v[2] = {dst, src};
	int dev, r;
	if (!dst || !src || !is_fp8(dst->dtype) || dst->numel != src->numel)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm quantize: dst must be "
		                      "f8e4m3 or f8e5m2 with src's numel (%s %llu vs %llu)",
		                      dst ? accel_abi_dtype_name(dst->dtype) : "NULL",
		                      dst ? (unsigned long long)dst->numel : 0ull,
		                      src ? (unsigned long long)src->numel : 0ull);
	if ((r = where(s, "quantize", v, 2, &dev)))
		return r;
	if (dev) {
		char err[512];
		void *st = s->host->stream(s->h);
		float zero = 0.0f, *am = ret_amax ? s->cuda->amax_scratch(s->cctx) : NULL;
		if (src->dtype != ACCEL_DTYPE_F32 && src->dtype != ACCEL_DTYPE_BF16)
			return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm quantize: a CUDA "
			                      "source is f32 or bf16, not %s", accel_abi_dtype_name(src->dtype));
		if ((am && s->cuda->upload(st, am, &zero, sizeof(zero), err, sizeof(err))) ||
		    s->cuda->quantize(s->cctx, st, dst->dtype, src->dtype, src->data, 1, src->numel,
		                      scale, dst->data, NULL, 1, am, err, sizeof(err)) ||
		    (am && s->cuda->download(st, ret_amax, am, sizeof(float), err, sizeof(err))))
			return cuda_fail(s, "quantize", err);
		return ACCEL_OK;
	}
	float amax;
	switch (src->dtype) {
	case ACCEL_DTYPE_F32:
		amax = fp8_quantize_f32(dst->dtype, src->data, src->numel, scale, dst->data);
		break;
	case ACCEL_DTYPE_BF16:
		amax = fp8_quantize_bf16(dst->dtype, src->data, src->numel, scale, dst->data);
		break;
	case ACCEL_DTYPE_F16:
		amax = fp8_quantize_f16(dst->dtype, src->data, src->numel, scale, dst->data);
		break;
	default:
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm quantize: src is f32, "
		                      "bf16 or f16, not %s", accel_abi_dtype_name(src->dtype));
	}
	if (ret_amax)
		*ret_amax = amax;
	return ACCEL_OK;
}

static int tbl_dequantize(const accel_fp8_gemm_v1 *self, const accel_view *dst,
                          const accel_view *src, float scale_inv)
{
	fp8_state *s = state_of(self);
	const accel_view *v[2] = {dst, src};
	int dev, r;
	if (!dst || !src || !is_fp8(src->dtype) || dst->dtype != ACCEL_DTYPE_F32 ||
	    dst->numel != src->numel)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm dequantize: src must be "
		                      "f8e4m3 or f8e5m2 and dst f32 of the same numel");
	if ((r = where(s, "dequantize", v, 2, &dev)))
		return r;
	if (dev) {
		char err[512];
		if (s->cuda->dequantize(s->cctx, s->host->stream(s->h), src->dtype, src->data,
		                        src->numel, scale_inv, dst->data, err, sizeof(err)))
			return cuda_fail(s, "dequantize", err);
		return ACCEL_OK;
	}
	fp8_dequantize_f32(src->dtype, src->data, src->numel, scale_inv, dst->data);
	return ACCEL_OK;
}

/* One GEMM on either path; operands already checked. */
static int run_gemm(fp8_state *s, int dev, uint64_t m, uint64_t n, uint64_t k, const uint8_t *a,
                    uint32_t afmt, float asi, const uint8_t *b, uint32_t bfmt, float bsi,
                    float alpha, float *d, int accumulate, int fast)
{
	if (!dev) {
		fp8_gemm_emulate(m, n, k, a, afmt, asi, b, bfmt, bsi, alpha, d, accumulate);
		return ACCEL_OK;
	}
	char err[512];
	if (s->cuda->gemm(s->cctx, s->host->stream(s->h), m, n, k, a, afmt, asi, b, bfmt, bsi,
	                  alpha, d, accumulate, fast, err, sizeof(err)))
		return cuda_fail(s, "cublasLtMatmul", err);
	return ACCEL_OK;
}

static int tbl_gemm(const accel_fp8_gemm_v1 *self, const accel_fp8_gemm_args_v1 *g)
{
	fp8_state *s = state_of(self);
	int dev, r;
	if (!g || g->struct_size < sizeof(*g))
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm gemm: args is NULL or "
		                      "its struct_size is not sizeof(accel_fp8_gemm_args_v1)");
	const accel_view *v[3] = {&g->a, &g->b, &g->d};
	if (!is_fp8(g->a.dtype) || !is_fp8(g->b.dtype) || g->d.dtype != ACCEL_DTYPE_F32 ||
	    (g->a.dtype == ACCEL_DTYPE_F8E5M2 && g->b.dtype == ACCEL_DTYPE_F8E5M2))
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm gemm: A and B are f8e4m3 "
		                      "or f8e5m2 (not both f8e5m2) and D f32; got %s, %s, %s",
		                      accel_abi_dtype_name(g->a.dtype), accel_abi_dtype_name(g->b.dtype),
		                      accel_abi_dtype_name(g->d.dtype));
	if (g->a.numel != g->m * g->k || g->b.numel != g->n * g->k || g->d.numel != g->m * g->n)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm gemm: m %llu, n %llu, k "
		                      "%llu need A %llu, B %llu, D %llu elements; the views have %llu, "
		                      "%llu, %llu", (unsigned long long)g->m, (unsigned long long)g->n,
		                      (unsigned long long)g->k, (unsigned long long)(g->m * g->k),
		                      (unsigned long long)(g->n * g->k),
		                      (unsigned long long)(g->m * g->n), (unsigned long long)g->a.numel,
		                      (unsigned long long)g->b.numel, (unsigned long long)g->d.numel);
	if ((r = where(s, "gemm", v, 3, &dev)))
		return r;
	return run_gemm(s, dev, g->m, g->n, g->k, g->a.data, g->a.dtype, g->a_scale_inv, g->b.data,
	                g->b.dtype, g->b_scale_inv, g->alpha, g->d.data,
	                !!(g->flags & ACCEL_FP8_ACCUMULATE), !!(g->flags & ACCEL_FP8_FAST_ACCUM));
}

/* ---- linear layers ------------------------------------------------------------ */

static int param_of(fp8_state *s, const char *fn, uint32_t param, fp8_param **ret)
{
	if (!s->set_up)
		return s->host->error(s->h, ACCEL_ERR_STATE, "fp8.gemm %s: call it after "
		                      "accel_unit_pre_forward() of the parameter's unit", fn);
	if (param >= s->n_model_params || s->slot[param] < 0)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm %s: parameter %u is not "
		                      "an fp8 parameter (register it with compute_dtype f8e4m3 or "
		                      "f8e5m2)", fn, param);
	*ret = &s->p[s->slot[param]];
	return ACCEL_OK;
}

/* workspace: X (rows x in), X^T, dY (rows x out), dY^T; 64-byte aligned
 * parts, each sized for rows rounded up to 16: on the GPU the transposes
 * are [in, K16(rows)] and [out, K16(rows)] with zero padding, because the
 * weight gradient's GEMM runs over the rows as k, and cuBLASLt's FP8
 * kernels need k a multiple of 16 (any batch size works) */
#define ALIGN64(x) (((x) + 63u) & ~(uint64_t)63u)
#define K16(x) (((x) + 15u) & ~(uint64_t)15u)

static int tbl_linear_workspace(const accel_fp8_gemm_v1 *self, uint32_t param, uint64_t rows,
                                uint64_t *ret_bytes)
{
	fp8_state *s = state_of(self);
	fp8_param *p = NULL;
	int r;
	if ((r = param_of(s, "linear_workspace", param, &p)))
		return r;
	*ret_bytes = 2 * ALIGN64(K16(rows) * p->in) + 2 * ALIGN64(K16(rows) * p->out);
	return ACCEL_OK;
}

static float inv(float scale)
{
	return 1.0f / scale;   /* TE's scale_inv */
}

static int check_f32(fp8_state *s, const char *fn, const char *what, const accel_view *v,
                     uint64_t numel)
{
	if (v->dtype != ACCEL_DTYPE_F32 || v->numel != numel)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm %s: %s must be f32 with "
		                      "%llu elements (it is %s with %llu)", fn, what,
		                      (unsigned long long)numel, accel_abi_dtype_name(v->dtype),
		                      (unsigned long long)v->numel);
	return ACCEL_OK;
}

/* q (and qt, the transpose) of x [rows, cols] with `scale`; amax into
 * *amax (host) or amax_dev (device).  On the device qt is [cols,
 * K16(rows)], zero padded. */
static int quantize_operand(fp8_state *s, int dev, uint32_t fmt, const float *x, uint64_t rows,
                            uint64_t cols, float scale, uint8_t *q, uint8_t *qt, float *amax,
                            float *amax_dev)
{
	if (dev) {
		char err[512];
		if (s->cuda->quantize(s->cctx, s->host->stream(s->h), fmt, ACCEL_DTYPE_F32, x, rows,
		                      cols, scale, q, qt, K16(rows), amax_dev, err, sizeof(err)))
			return cuda_fail(s, "quantize", err);
		return ACCEL_OK;
	}
	float a = fp8_quantize_f32(fmt, x, rows * cols, scale, q);
	if (qt)
		fp8_quantize_t_f32(fmt, x, rows, cols, scale, qt);
	if (a > *amax || isnan(a))
		*amax = isnan(*amax) ? *amax : a;
	return ACCEL_OK;
}

int fp8_quantize_weight(fp8_state *s, fp8_param *p, const accel_view *w)
{
	int dev = w->device == ACCEL_DEVICE_CUDA;
	float sc = p->scale[ACCEL_FP8_OPERAND_W];
	if (w->numel != p->out * p->in)
		return s->host->error(s->h, ACCEL_ERR_STATE, "fp8: the weight view of parameter %u "
		                      "has %llu elements, not %llu", p->index,
		                      (unsigned long long)w->numel,
		                      (unsigned long long)(p->out * p->in));
	if (dev) {
		char err[512];
		if (w->dtype != ACCEL_DTYPE_F32 && w->dtype != ACCEL_DTYPE_BF16)
			return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8: parameter %u is %s on "
			                      "the GPU; fp8 quantizes f32 or bf16 weights", p->index,
			                      accel_abi_dtype_name(w->dtype));
		if (s->cuda->quantize(s->cctx, s->host->stream(s->h), p->fmt_fwd, w->dtype, w->data,
		                      p->out, p->in, sc, p->wq, p->wtq, p->out,
		                      p->amax_dev + ACCEL_FP8_OPERAND_W, err, sizeof(err)))
			return cuda_fail(s, "quantizing a weight", err);
		p->ready = 1;
		return ACCEL_OK;
	}
	float a;
	switch (w->dtype) {
	case ACCEL_DTYPE_F32:
		a = fp8_quantize_f32(p->fmt_fwd, w->data, w->numel, sc, p->wq);
		fp8_quantize_t_f32(p->fmt_fwd, w->data, p->out, p->in, sc, p->wtq);
		break;
	case ACCEL_DTYPE_BF16:
	case ACCEL_DTYPE_F16: {
		/* transpose of the codes: the same values, another order */
		a = w->dtype == ACCEL_DTYPE_BF16
		            ? fp8_quantize_bf16(p->fmt_fwd, w->data, w->numel, sc, p->wq)
		            : fp8_quantize_f16(p->fmt_fwd, w->data, w->numel, sc, p->wq);
		for (uint64_t i = 0; i < p->out; i++)
			for (uint64_t j = 0; j < p->in; j++)
				p->wtq[j * p->out + i] = p->wq[i * p->in + j];
		break;
	}
	default:
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8: parameter %u is %s; fp8 "
		                      "quantizes f32, bf16 or f16 weights", p->index,
		                      accel_abi_dtype_name(w->dtype));
	}
	float *m = &p->amax[ACCEL_FP8_OPERAND_W];
	if (a > *m || isnan(a))
		*m = isnan(*m) ? *m : a;
	p->ready = 1;
	return ACCEL_OK;
}

static int tbl_linear_forward(const accel_fp8_gemm_v1 *self, uint32_t param, uint64_t rows,
                              const accel_view *x, const accel_view *y, void *workspace)
{
	fp8_state *s = state_of(self);
	fp8_param *p = NULL;
	int dev, r;
	if ((r = param_of(s, "linear_forward", param, &p)))
		return r;
	const accel_view *v[2] = {x, y};
	if (!x || !y || !workspace)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm linear_forward: x, y "
		                      "and workspace are required");
	if ((r = check_f32(s, "linear_forward", "x", x, rows * p->in)) ||
	    (r = check_f32(s, "linear_forward", "y", y, rows * p->out)) ||
	    (r = where(s, "linear_forward", v, 2, &dev)))
		return r;
	if (!p->ready)
		return s->host->error(s->h, ACCEL_ERR_STATE, "fp8.gemm linear_forward: parameter %u's "
		                      "weight is not quantized for this step: call "
		                      "accel_unit_pre_forward() of its unit first", param);
	uint8_t *xq = workspace, *xtq = xq + ALIGN64(K16(rows) * p->in);
	float sx = p->scale[ACCEL_FP8_OPERAND_X];
	if ((r = quantize_operand(s, dev, p->fmt_fwd, x->data, rows, p->in, sx, xq, xtq,
	                          &p->amax[ACCEL_FP8_OPERAND_X],
	                          p->amax_dev ? p->amax_dev + ACCEL_FP8_OPERAND_X : NULL)))
		return r;
	return run_gemm(s, dev, rows, p->out, p->in, xq, p->fmt_fwd, inv(sx), p->wq, p->fmt_fwd,
	                inv(p->scale[ACCEL_FP8_OPERAND_W]), 1.0f, y->data, 0, 1);
}

static int tbl_linear_backward(const accel_fp8_gemm_v1 *self, uint32_t param, uint64_t rows,
                               const accel_view *dy, const accel_view *dx,
                               const accel_view *dw, uint32_t accumulate, void *workspace)
{
	fp8_state *s = state_of(self);
	fp8_param *p = NULL;
	int dev, r;
	if ((r = param_of(s, "linear_backward", param, &p)))
		return r;
	const accel_view *v[3] = {dy, dw, dx};
	if (!dy || !dw || !workspace)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "fp8.gemm linear_backward: dy, dw "
		                      "and workspace are required");
	if ((r = check_f32(s, "linear_backward", "dy", dy, rows * p->out)) ||
	    (r = check_f32(s, "linear_backward", "dw", dw, p->out * p->in)) ||
	    (dx && (r = check_f32(s, "linear_backward", "dx", dx, rows * p->in))) ||
	    (r = where(s, "linear_backward", v, dx ? 3 : 2, &dev)))
		return r;
	if (!p->ready)
		return s->host->error(s->h, ACCEL_ERR_STATE, "fp8.gemm linear_backward: parameter "
		                      "%u's weight is not quantized for this step", param);
	uint8_t *xtq = (uint8_t *)workspace + ALIGN64(K16(rows) * p->in);
	uint8_t *dyq = xtq + ALIGN64(K16(rows) * p->in), *dytq = dyq + ALIGN64(K16(rows) * p->out);
	float sdy = p->scale[ACCEL_FP8_OPERAND_DY];
	if ((r = quantize_operand(s, dev, p->fmt_bwd, dy->data, rows, p->out, sdy, dyq, dytq,
	                          &p->amax[ACCEL_FP8_OPERAND_DY],
	                          p->amax_dev ? p->amax_dev + ACCEL_FP8_OPERAND_DY : NULL)))
		return r;
	/* dW[out, in] (+)= dY^T . X: A = dY^T [out, rows], B = X^T [in, rows]
	 * (on the GPU [., K16(rows)], zero padded) */
	if ((r = run_gemm(s, dev, p->out, p->in, dev ? K16(rows) : rows, dytq, p->fmt_bwd, inv(sdy),
	                  xtq, p->fmt_fwd,
	                  inv(p->scale[ACCEL_FP8_OPERAND_X]), 1.0f, dw->data, !!accumulate, 0)))
		return r;
	if (!dx)
		return ACCEL_OK;
	/* dX[rows, in] = dY . W: A = dY [rows, out], B = W^T [in, out] */
	return run_gemm(s, dev, rows, p->in, p->out, dyq, p->fmt_bwd, inv(sdy), p->wtq, p->fmt_fwd,
	                inv(p->scale[ACCEL_FP8_OPERAND_W]), 1.0f, dx->data, 0, 0);
}

static int tbl_scales(const accel_fp8_gemm_v1 *self, uint32_t param, float *ret_scale)
{
	fp8_state *s = state_of(self);
	fp8_param *p = NULL;
	int r;
	if ((r = param_of(s, "scales", param, &p)))
		return r;
	memcpy(ret_scale, p->scale, sizeof(p->scale));
	return ACCEL_OK;
}

void fp8_gemm_table_init(fp8_state *s)
{
	accel_fp8_gemm_v1 *t = &s->table;
	t->struct_size = sizeof(*t);
	t->path = s->cuda ? ACCEL_FP8_PATH_CUBLASLT : ACCEL_FP8_PATH_EMULATION;
	t->quantize = tbl_quantize;
	t->dequantize = tbl_dequantize;
	t->gemm = tbl_gemm;
	t->linear_workspace = tbl_linear_workspace;
	t->linear_forward = tbl_linear_forward;
	t->linear_backward = tbl_linear_backward;
	t->scales = tbl_scales;
}
