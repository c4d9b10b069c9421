/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_cuda_kernels.cuh: the kernels of gpt2_cuda.cu (included
 * by it once): embeddings, LayerNorm, GELU (tanh), bias, residual, causal
 * softmax, the column reductions of the parameter gradients and the fused
 * softmax cross-entropy.  Templates over the working dtype T (float,
 * __nv_bfloat16, __half) that compute in f32 (ex_cuda.cuh's ld/st).
 * Each mirrors a loop of gpt2_model.c; the comment says which values a
 * thread (or warp, or block) owns.
 */
#ifndef EXAMPLES_GPT2_GPT2_CUDA_KERNELS_CUH
#define EXAMPLES_GPT2_GPT2_CUDA_KERNELS_CUH

#include "ex_cuda.cuh"

#define COLSUM_ROWS 64   /* rows per partial sum of a column reduction */
#define LN_EPS 1e-5f
#define GELU_K 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* ---- reductions inside a block ----------------------------------------------------------- */

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Sum (max when is_max) over the block (blockDim.x a multiple of 32, at
 * most 1024); every thread gets the result.  sh: 32 floats of shared
 * memory, free again on return. */
__device__ float block_reduce(float v, float *sh, int is_max)
{
	int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
	v = is_max ? warp_max(v) : warp_sum(v);
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	float r = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
	r = is_max ? warp_max(r) : warp_sum(r);
	__syncthreads();   /* sh may be reused by the next call */
	return r;
}

/* ---- element-wise kernels ---------------------------------------------------------------- */

/* x[i, j] = wte[tok[i], j] + wpe[i % T, j] for N = n*T rows of C. */
template <typename T>
__global__ void embed_fwd_k(T *x, const int32_t *tok, const T *wte, const T *wpe, size_t N,
                            int Tq, int C)
{
	size_t total = N * (size_t)C;
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		size_t i = t / (size_t)C, j = t % (size_t)C;
		size_t pos = i % (size_t)Tq;
		st(x, t, ld(wte, (size_t)tok[i] * (size_t)C + j) + ld(wpe, pos * (size_t)C + j));
	}
}

/* dwte[tok[i], j] += dx[i, j] (atomics: rows of equal tokens collide). */
template <typename T>
__global__ void embed_bwd_wte_k(float *dwte, const int32_t *tok, const T *dx, size_t N, int C)
{
	size_t total = N * (size_t)C;
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		size_t i = t / (size_t)C, j = t % (size_t)C;
		atomicAdd(dwte + (size_t)tok[i] * (size_t)C + j, ld(dx, t));
	}
}

/* dwpe[p, j] += sum over the n sequences b of dx[b*T + p, j], in b order. */
template <typename T>
__global__ void embed_bwd_wpe_k(float *dwpe, const T *dx, int n, int Tq, int C)
{
	size_t total = (size_t)Tq * (size_t)C;
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		float s = 0.0f;
		for (int b = 0; b < n; b++)
			s += ld(dx, (size_t)b * total + t);
		dwpe[t] += s;
	}
}

/* y[i, j] += b[j] (for shapes without a fused bias epilogue). */
template <typename T>
__global__ void bias_k(T *y, const T *b, size_t N, int out)
{
	size_t total = N * (size_t)out;
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x)
		st(y, t, ld(y, t) + ld(b, t % (size_t)out));
}

/* y += a (the residual). */
template <typename T>
__global__ void add_k(T *y, const T *a, size_t total)
{
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x)
		st(y, t, ld(y, t) + ld(a, t));
}

__device__ __forceinline__ float gelu_tanh_arg(float v)
{
	return GELU_K * (v + GELU_A * v * v * v);
}

template <typename T>
__global__ void gelu_fwd_k(T *y, const T *x, size_t total)
{
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		float v = ld(x, t);
		st(y, t, 0.5f * v * (1.0f + tanhf(gelu_tanh_arg(v))));
	}
}

/* d *= gelu'(x) */
template <typename T>
__global__ void gelu_bwd_k(T *d, const T *x, size_t total)
{
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		float v = ld(x, t);
		float th = tanhf(gelu_tanh_arg(v));
		float dt = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
		st(d, t, ld(d, t) * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * dt));
	}
}

/* dst[i] = src[i] as f32. */
template <typename T>
__global__ void to_f32_k(float *dst, const T *src, size_t total)
{
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x)
		dst[t] = ld(src, t);
}

/* ---- LayerNorm (one warp per row) -------------------------------------------------------- */

template <typename T>
__global__ void ln_fwd_k(T *y, float *mean, float *rstd, const T *x, const T *w, const T *b,
                         size_t N, int C)
{
	size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (row >= N)
		return;
	const size_t base = row * (size_t)C;
	float s = 0.0f;
	for (int j = lane; j < C; j += 32)
		s += ld(x, base + j);
	float m = warp_sum(s) / (float)C;
	float v = 0.0f;
	for (int j = lane; j < C; j += 32) {
		float d = ld(x, base + j) - m;
		v += d * d;
	}
	v = warp_sum(v) / (float)C;
	float r = 1.0f / sqrtf(v + LN_EPS);
	for (int j = lane; j < C; j += 32)
		st(y, base + j, (ld(x, base + j) - m) * r * ld(w, j) + ld(b, j));
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = r;
	}
}

/* dx += r (dy w - mean(dy w) - xhat mean(dy w xhat)) per row. */
template <typename T>
__global__ void ln_bwd_dx_k(T *dx, const T *dy, const T *x, const T *w, const float *mean,
                            const float *rstd, size_t N, int C)
{
	size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (row >= N)
		return;
	const size_t base = row * (size_t)C;
	float m = mean[row], r = rstd[row], s1 = 0.0f, s2 = 0.0f;
	for (int j = lane; j < C; j += 32) {
		float xh = (ld(x, base + j) - m) * r, dxh = ld(dy, base + j) * ld(w, j);
		s1 += dxh;
		s2 += dxh * xh;
	}
	s1 = warp_sum(s1) / (float)C;
	s2 = warp_sum(s2) / (float)C;
	for (int j = lane; j < C; j += 32) {
		float xh = (ld(x, base + j) - m) * r;
		st(dx, base + j, ld(dx, base + j) + r * (ld(dy, base + j) * ld(w, j) - s1 - xh * s2));
	}
}

/* ---- column reductions (bias and LayerNorm parameter gradients) ------------------------ */

/* part[c, j] = sum of dy[r, j] over the rows r of chunk c (COLSUM_ROWS
 * rows), in row order; with x (LayerNorm): also part[c, out + j] = sum of
 * dy[r, j] xhat[r, j], xhat from x, mean, rstd. */
template <typename T>
__global__ void colsum_part_k(float *part, const T *dy, const T *x, const float *mean,
                              const float *rstd, size_t N, int out)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	size_t c = blockIdx.y;
	if (j >= out)
		return;
	size_t r0 = c * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
	int width = x ? 2 * out : out;
	float s = 0.0f, sx = 0.0f;
	for (size_t r = r0; r < r1; r++) {
		float d = ld(dy, r * (size_t)out + (size_t)j);
		s += d;
		if (x)
			sx += d * (ld(x, r * (size_t)out + (size_t)j) - mean[r]) * rstd[r];
	}
	part[c * (size_t)width + (size_t)j] = s;
	if (x)
		part[c * (size_t)width + (size_t)out + (size_t)j] = sx;
}

/* db[j] += sum over chunks of part[c, j] (and dw[j] += of part[c, out + j]
 * when dw is not NULL), in chunk order. */
__global__ void colsum_done_k(float *db, float *dw, const float *part, int chunks, int out)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= out)
		return;
	int width = dw ? 2 * out : out;
	float s = 0.0f, sx = 0.0f;
	for (int c = 0; c < chunks; c++) {
		s += part[(size_t)c * (size_t)width + (size_t)j];
		if (dw)
			sx += part[(size_t)c * (size_t)width + (size_t)out + (size_t)j];
	}
	db[j] += s;
	if (dw)
		dw[j] += sx;
}

/* ---- attention's softmax (one warp per row of a head's T x T scores) ------------------- */

/* rows: H*T rows of T scores (row r is query i = r % T); the row becomes
 * softmax over columns 0..i, zeros after. */
template <typename T>
__global__ void softmax_causal_k(T *att, size_t rows, int Tq)
{
	size_t r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (r >= rows)
		return;
	int i = (int)(r % (size_t)Tq);
	T *row = att + r * (size_t)Tq;
	float mx = -INFINITY;
	for (int j = lane; j <= i; j += 32)
		mx = fmaxf(mx, ld(row, j));
	mx = warp_max(mx);
	float s = 0.0f;
	for (int j = lane; j <= i; j += 32)
		s += expf(ld(row, j) - mx);
	s = warp_sum(s);
	float inv = 1.0f / s;
	for (int j = lane; j < Tq; j += 32)
		st(row, j, j <= i ? expf(ld(row, j) - mx) * inv : 0.0f);
}

/* d = p (d - sum_j p d) over columns 0..i of each row, zeros after. */
template <typename T>
__global__ void softmax_causal_bwd_k(T *d, const T *p, size_t rows, int Tq)
{
	size_t r = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (r >= rows)
		return;
	int i = (int)(r % (size_t)Tq);
	T *dr = d + r * (size_t)Tq;
	const T *pr = p + r * (size_t)Tq;
	float s = 0.0f;
	for (int j = lane; j <= i; j += 32)
		s += ld(pr, j) * ld(dr, j);
	s = warp_sum(s);
	for (int j = lane; j < Tq; j += 32)
		st(dr, j, j <= i ? ld(pr, j) * (ld(dr, j) - s) : 0.0f);
}

/* ---- cross-entropy (one block per token row) ---------------------------------------------- */

/* rowloss[i] = log sum_j exp(z_ij) - z_i,tgt; when scale != 0 the row
 * becomes (softmax - onehot(tgt)) * scale.  Rows are ldv apart. */
template <typename T>
__global__ void xent_k(T *z, double *rowloss, const int32_t *tgt, int V, int ldv, float scale)
{
	__shared__ float sh[32];
	size_t i = blockIdx.x;
	T *row = z + i * (size_t)ldv;
	float mx = -INFINITY;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		mx = fmaxf(mx, ld(row, j));
	mx = block_reduce(mx, sh, 1);
	float s = 0.0f;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		s += expf(ld(row, j) - mx);
	s = block_reduce(s, sh, 0);
	int y = tgt[i];
	float zy = ld(row, y);
	__syncthreads();   /* every thread has read z[y] before it is overwritten */
	if (threadIdx.x == 0)
		rowloss[i] = log((double)s) + (double)mx - (double)zy;
	if (scale != 0.0f) {
		float inv = 1.0f / s;
		for (int j = threadIdx.x; j < V; j += blockDim.x)
			st(row, j, (expf(ld(row, j) - mx) * inv - (j == y ? 1.0f : 0.0f)) * scale);
	}
}

/* *sum = the rows' losses added in row order (one block). */
__global__ void sum_rows_k(double *sum, const double *rowloss, size_t N)
{
	__shared__ double sh[256];
	double s = 0.0;
	/* thread t adds rows t, t + 256, ...; then the 256 partials in order */
	for (size_t r = threadIdx.x; r < N; r += blockDim.x)
		s += rowloss[r];
	sh[threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		double t = 0.0;
		for (unsigned k = 0; k < blockDim.x; k++)
			t += sh[k];
		*sum = t;
	}
}

#endif
