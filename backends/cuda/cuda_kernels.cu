// SPDX-License-Identifier: MIT
/* backends/cuda/cuda_kernels.cu: the device module's kernels and their
 * launchers (C entry points declared in cuda-impl.h).
 *
 * Exactness: every float operation is written as the correctly rounded
 * intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn, __fmaf_rn) in the
 * order of the CPU code (core/ops_cpu.c, core/optim.c), so nvcc cannot
 * contract or approximate anything and a device result has the CPU's bits;
 * f16/bf16 conversions repeat core/half.h bit for bit (NaN payloads too).
 * Subnormals are kept (no -ftz).  Only the f64 sums of sumsq are added in a
 * different order than on the CPU.
 *
 * Speed: the kernels are memory bound; the f32 paths move 16 bytes per
 * access where every pointer of a range is 16-byte aligned, with several
 * independent loads per thread in flight, and fall back to one element per
 * access elsewhere (views at odd offsets). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda-impl.h"

#define DT_F32  1
#define DT_F64  2
#define DT_F16  3
#define DT_BF16 4

#define THREADS 256

static int g_blocks_cap = 1024;   /* per-op grid cap for grid-stride loops */
static int g_sync_each;           /* wait for every launch (accel_cuda_set_sync) */
/* The calling thread's stream (accel_cuda_set_stream); 0 = legacy default. */
static thread_local cudaStream_t tl_stream;

/* A launcher's result: the launch error, and with the debug mode on the
 * error of the kernels themselves (a fault, an illegal address), so the
 * failing op is the one named rather than a later copy. */
static cudaError_t launched(void)
{
	cudaError_t e = cudaGetLastError();
	if (e == cudaSuccess && g_sync_each)
		e = cudaDeviceSynchronize();
	return e;
}

/* ---- conversions (core/half.h on the device) ------------------------------------ */

__device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* Exact, without branches (as core/optim.c's f16_to_f32). */
__device__ __forceinline__ float f16_to_f32(uint16_t h)
{
	uint32_t a = (uint32_t)(h & 0x7fffu) << 13;
	uint32_t s = (uint32_t)(h & 0x8000u) << 16;
	uint32_t norm = __float_as_uint(__fmul_rn(__uint_as_float(a), 0x1p112f));
	uint32_t sub = __float_as_uint(__fmul_rn((float)(int32_t)(h & 0x3ffu), 0x1p-24f));
	uint32_t is_sub = 0u - (uint32_t)(a < 0x00800000u);
	uint32_t is_special = 0u - (uint32_t)(a >= 0x0f800000u);
	uint32_t u = (norm & ~is_sub) | (sub & is_sub);
	u = (u & ~is_special) | ((a | 0x7f800000u) & is_special);
	return __uint_as_float(u | s);
}

__device__ __forceinline__ uint16_t f32_to_f16(float f)
{
	uint32_t u = __float_as_uint(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t au = u & 0x7fffffffu;
	if (au > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u);
	if (au >= 0x477ff000u)
		return (uint16_t)(sign | 0x7c00u);
	if (au < 0x38800000u) {
		if (au < 0x33000000u)
			return sign;
		uint32_t e = au >> 23;
		uint32_t m = (au & 0x7fffffu) | 0x800000u;
		uint32_t sh = 150 - 24 - e;
		uint32_t hm = m >> sh;
		uint32_t rem = m & ((1u << sh) - 1u);
		uint32_t half = 1u << (sh - 1);
		if (rem > half || (rem == half && (hm & 1u)))
			hm++;
		return (uint16_t)(sign | hm);
	}
	uint32_t r = au + 0xfffu + ((au >> 13) & 1u);
	r -= 0x38000000u;
	return (uint16_t)(sign | (r >> 13));
}

/* Element i of a float array of dtype DT as a double (f64 paths) or float. */
template <int DT> __device__ __forceinline__ double load_d(const void *p, uint64_t i)
{
	if (DT == DT_F32) return (double)((const float *)p)[i];
	if (DT == DT_F64) return ((const double *)p)[i];
	if (DT == DT_F16) return (double)f16_to_f32(((const uint16_t *)p)[i]);
	return (double)bf16_to_f32(((const uint16_t *)p)[i]);
}

template <int DT> __device__ __forceinline__ void store_d(void *p, uint64_t i, double v)
{
	if (DT == DT_F32) ((float *)p)[i] = __double2float_rn(v);
	else if (DT == DT_F64) ((double *)p)[i] = v;
	else if (DT == DT_F16) ((uint16_t *)p)[i] = f32_to_f16(__double2float_rn(v));
	else ((uint16_t *)p)[i] = f32_to_bf16(__double2float_rn(v));
}

template <int DT> __device__ __forceinline__ float load_f(const void *p, uint64_t i)
{
	if (DT == DT_F32) return ((const float *)p)[i];
	if (DT == DT_F16) return f16_to_f32(((const uint16_t *)p)[i]);
	return bf16_to_f32(((const uint16_t *)p)[i]);
}

static unsigned grid_for(uint64_t n, uint64_t per_block)
{
	uint64_t b = (n + per_block - 1) / per_block;
	if (b < 1)
		b = 1;
	if (b > (uint64_t)g_blocks_cap)
		b = (uint64_t)g_blocks_cap;
	return (unsigned)b;
}

#define GRID_STRIDE(i, n) \
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (uint64_t)gridDim.x * blockDim.x)

/* ---- copy ---------------------------------------------------------------------- */

template <int S, int D> __global__ void k_convert(void *dst, const void *src, uint64_t n)
{
	GRID_STRIDE(i, n) {
		if (S == DT_F64 || D == DT_F64) {
			store_d<D>(dst, i, load_d<S>(src, i));
		} else {
			float v = load_f<S>(src, i);
			if (D == DT_F32) ((float *)dst)[i] = v;
			else if (D == DT_F16) ((uint16_t *)dst)[i] = f32_to_f16(v);
			else ((uint16_t *)dst)[i] = f32_to_bf16(v);
		}
	}
}

template <int S> static cudaError_t convert_from(uint32_t ddt, void *dst, const void *src,
                                                 uint64_t n)
{
	unsigned g = grid_for(n, THREADS * 4);
	switch (ddt) {
	case DT_F32: k_convert<S, DT_F32><<<g, THREADS, 0, tl_stream>>>(dst, src, n); break;
	case DT_F64: k_convert<S, DT_F64><<<g, THREADS, 0, tl_stream>>>(dst, src, n); break;
	case DT_F16: k_convert<S, DT_F16><<<g, THREADS, 0, tl_stream>>>(dst, src, n); break;
	default: k_convert<S, DT_BF16><<<g, THREADS, 0, tl_stream>>>(dst, src, n); break;
	}
	return launched();
}

extern "C" int accel_cuda_launch_convert(uint32_t ddt, void *dst, uint32_t sdt, const void *src,
                                         uint64_t n)
{
	switch (sdt) {
	case DT_F32: return convert_from<DT_F32>(ddt, dst, src, n);
	case DT_F64: return convert_from<DT_F64>(ddt, dst, src, n);
	case DT_F16: return convert_from<DT_F16>(ddt, dst, src, n);
	default: return convert_from<DT_BF16>(ddt, dst, src, n);
	}
}

/* ---- fill ------------------------------------------------------------------------ */

template <typename T> __global__ void k_fill(T *dst, T v, uint64_t n)
{
	GRID_STRIDE(i, n) dst[i] = v;
}

extern "C" int accel_cuda_launch_fill(void *dst, uint32_t elsize, uint64_t bits, uint64_t n)
{
	unsigned g = grid_for(n, THREADS * 4);
	if (elsize == 2)
		k_fill<uint16_t><<<g, THREADS, 0, tl_stream>>>((uint16_t *)dst, (uint16_t)bits, n);
	else if (elsize == 4)
		k_fill<uint32_t><<<g, THREADS, 0, tl_stream>>>((uint32_t *)dst, (uint32_t)bits, n);
	else
		k_fill<uint64_t><<<g, THREADS, 0, tl_stream>>>((uint64_t *)dst, bits, n);
	return launched();
}

/* ---- scale, axpy ----------------------------------------------------------------- */

__global__ void k_scale_f32(float *x, float a, uint64_t n)
{
	GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], a);
}

template <int DT> __global__ void k_scale_d(void *x, double a, uint64_t n)
{
	GRID_STRIDE(i, n) store_d<DT>(x, i, __dmul_rn(load_d<DT>(x, i), a));
}

extern "C" int accel_cuda_launch_scale(uint32_t dt, void *x, double alpha, uint64_t n)
{
	unsigned g = grid_for(n, THREADS * 4);
	switch (dt) {
	case DT_F32: k_scale_f32<<<g, THREADS, 0, tl_stream>>>((float *)x, (float)alpha, n); break;
	case DT_F64: k_scale_d<DT_F64><<<g, THREADS, 0, tl_stream>>>(x, alpha, n); break;
	case DT_F16: k_scale_d<DT_F16><<<g, THREADS, 0, tl_stream>>>(x, alpha, n); break;
	default: k_scale_d<DT_BF16><<<g, THREADS, 0, tl_stream>>>(x, alpha, n); break;
	}
	return launched();
}

__global__ void k_axpy_f32(float *y, float a, const float *x, uint64_t n)
{
	GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
}

template <int DY, int DX> __global__ void k_axpy_d(void *y, double a, const void *x, uint64_t n)
{
	GRID_STRIDE(i, n)
		store_d<DY>(y, i, __dadd_rn(load_d<DY>(y, i), __dmul_rn(a, load_d<DX>(x, i))));
}

template <int DY> static void axpy_y(uint32_t xdt, void *y, double a, const void *x, uint64_t n,
                                     unsigned g)
{
	switch (xdt) {
	case DT_F32: k_axpy_d<DY, DT_F32><<<g, THREADS, 0, tl_stream>>>(y, a, x, n); break;
	case DT_F64: k_axpy_d<DY, DT_F64><<<g, THREADS, 0, tl_stream>>>(y, a, x, n); break;
	case DT_F16: k_axpy_d<DY, DT_F16><<<g, THREADS, 0, tl_stream>>>(y, a, x, n); break;
	default: k_axpy_d<DY, DT_BF16><<<g, THREADS, 0, tl_stream>>>(y, a, x, n); break;
	}
}

extern "C" int accel_cuda_launch_axpy(uint32_t ydt, void *y, double alpha, uint32_t xdt,
                                      const void *x, uint64_t n)
{
	unsigned g = grid_for(n, THREADS * 4);
	if (ydt == DT_F32 && xdt == DT_F32) {
		k_axpy_f32<<<g, THREADS, 0, tl_stream>>>((float *)y, (float)alpha, (const float *)x, n);
		return launched();
	}
	switch (ydt) {
	case DT_F32: axpy_y<DT_F32>(xdt, y, alpha, x, n, g); break;
	case DT_F64: axpy_y<DT_F64>(xdt, y, alpha, x, n, g); break;
	case DT_F16: axpy_y<DT_F16>(xdt, y, alpha, x, n, g); break;
	default: axpy_y<DT_BF16>(xdt, y, alpha, x, n, g); break;
	}
	return launched();
}

/* ---- reductions: sumsq (f64) and the non-finite count (u64) -------------------------- */

template <typename T> __device__ __forceinline__ T block_sum(T v, T *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = 0;
	if (w == 0) {
		if (lane < (int)(blockDim.x >> 5))
			v = sh[lane];
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, o);
	}
	return v;
}

template <int DT> __global__ void k_sumsq(const void *x, uint64_t n, double *part)
{
	__shared__ double sh[32];
	double a = 0;
	GRID_STRIDE(i, n) {
		double v = load_d<DT>(x, i);
		a += v * v;
	}
	a = block_sum(a, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = a;
}

template <int DT> __global__ void k_nonfinite(const void *x, uint64_t n,
                                              unsigned long long *part)
{
	__shared__ unsigned long long sh[32];
	unsigned long long c = 0;
	GRID_STRIDE(i, n) {
		if (DT == DT_F32)
			c += (((const uint32_t *)x)[i] & 0x7f800000u) == 0x7f800000u;
		else if (DT == DT_F64)
			c += (((const uint64_t *)x)[i] & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
		else if (DT == DT_F16)
			c += (((const uint16_t *)x)[i] & 0x7c00u) == 0x7c00u;
		else
			c += (((const uint16_t *)x)[i] & 0x7f80u) == 0x7f80u;
	}
	c = block_sum(c, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = c;
}

/* The partial sums in one block, in a fixed order (deterministic), into
 * part[n]; with acc, added to acc[0] instead (one addition: the host's
 * `total += sq` over the values sumsq returns). */
template <typename T> __global__ void k_finish(T *part, unsigned n, T *acc)
{
	__shared__ T sh[32];
	T a = 0;
	for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
		a += part[i];
	a = block_sum(a, sh);
	if (threadIdx.x == 0) {
		if (acc)
			acc[0] = acc[0] + a;
		else
			part[n] = a;
	}
}

/* k_sumsq over x into part[0..g) and k_finish; returns g. */
static unsigned launch_sumsq_parts(uint32_t dt, const void *x, uint64_t n, double *part,
                                   double *acc)
{
	unsigned g = grid_for(n, THREADS * 8);
	if (g > ACCEL_CUDA_SCRATCH_SLOTS)
		g = ACCEL_CUDA_SCRATCH_SLOTS;
	switch (dt) {
	case DT_F32: k_sumsq<DT_F32><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	case DT_F64: k_sumsq<DT_F64><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	case DT_F16: k_sumsq<DT_F16><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	default: k_sumsq<DT_BF16><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	}
	k_finish<double><<<1, THREADS, 0, tl_stream>>>(part, g, acc);
	return g;
}

/* scratch: ACCEL_CUDA_SCRATCH_SLOTS + 1 slots of 8 bytes on the device;
 * the result is left in the slot *ret_slot. */
extern "C" int accel_cuda_launch_sumsq(uint32_t dt, const void *x, uint64_t n, void *scratch,
                                       unsigned *ret_slot)
{
	*ret_slot = launch_sumsq_parts(dt, x, n, (double *)scratch, NULL);
	return launched();
}

/* stats[0] += the sum of squares; the partial sums in stats[4..]. */
extern "C" int accel_cuda_launch_sumsq_acc(uint32_t dt, const void *x, uint64_t n,
                                           double *stats)
{
	launch_sumsq_parts(dt, x, n, stats + 4, stats);
	return launched();
}

/* The core's accel_step arithmetic (core/train.c), each operation rounded
 * once (no contraction into an FMA). */
__global__ void k_clip_scale(double *s, double max_norm, double unscale)
{
	double norm = __dmul_rn(__dsqrt_rn(s[0]), unscale);
	double coef = 1.0;
	if (max_norm > 0) {
		coef = __ddiv_rn(max_norm, __dadd_rn(norm, 1e-6));
		if (coef > 1.0)
			coef = 1.0;
	}
	s[1] = norm;
	s[2] = coef;
	s[3] = __dmul_rn(coef, unscale);
}

extern "C" int accel_cuda_launch_clip_scale(double *stats, double max_norm, double unscale)
{
	k_clip_scale<<<1, 1, 0, tl_stream>>>(stats, max_norm, unscale);
	return launched();
}

extern "C" int accel_cuda_launch_nonfinite(uint32_t dt, const void *x, uint64_t n,
                                           void *scratch, unsigned *ret_slot)
{
	unsigned g = grid_for(n, THREADS * 8);
	if (g > ACCEL_CUDA_SCRATCH_SLOTS)
		g = ACCEL_CUDA_SCRATCH_SLOTS;
	unsigned long long *part = (unsigned long long *)scratch;
	switch (dt) {
	case DT_F32: k_nonfinite<DT_F32><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	case DT_F64: k_nonfinite<DT_F64><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	case DT_F16: k_nonfinite<DT_F16><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	default: k_nonfinite<DT_BF16><<<g, THREADS, 0, tl_stream>>>(x, n, part); break;
	}
	k_finish<unsigned long long><<<1, THREADS, 0, tl_stream>>>(part, g, NULL);
	*ret_slot = g;
	return launched();
}

/* ---- fused multi-tensor optimizers ---------------------------------------------------- */

/* Ranges travel in the kernel's parameters (no upload before a launch), up
 * to MT_MAX per launch (160 ranges: 7.7 KB of parameters, which CUDA 12.1+
 * drivers take up to 32 KB of on Volta and newer; fewer launches, fewer
 * partly idle last waves); block b works on chunk b - block0 of the range
 * whose block0 is the largest <= b. */
#define MT_MAX   160
#define MT_CHUNK (THREADS * 4 * 4)   /* elements per block: 4 float4 per thread */

struct mt_range {
	float *p;
	const void *g;
	float *s0, *s1;
	uint64_t n;
	uint32_t block0;
	uint32_t vec;   /* every pointer aligned for 4-element accesses */
};

struct mt_args {
	mt_range r[MT_MAX];
	uint32_t nr;
	const double *gs_dev;   /* non-NULL: the gradient factor, read here */
};

__device__ __forceinline__ void adamw_elem(const accel_cuda_adamw_k &k, float gi, float &p,
                                           float &m, float &v)
{
	gi = __fmul_rn(gi, k.gs);
	float pi = __fmul_rn(p, k.decay);
	float mi = __fmaf_rn(gi, k.omb1, __fmul_rn(m, k.b1));
	float vi = __fmaf_rn(__fmul_rn(k.omb2, gi), gi, __fmul_rn(v, k.b2));
	float d = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2s), k.eps);
	m = mi;
	v = vi;
	p = __fadd_rn(pi, __fdiv_rn(__fmul_rn(k.nstep, mi), d));
}

__device__ __forceinline__ void sgd_elem(const accel_cuda_sgd_k &k, float gi, float &p,
                                         float *buf)
{
	float pi = p;
	float d = __fmul_rn(gi, k.gs);
	if (k.has_wd)
		d = __fmaf_rn(pi, k.wd, d);
	if (buf) {
		float b = k.first ? d : __fmaf_rn(d, k.omdamp, __fmul_rn(*buf, k.mom));
		*buf = b;
		d = k.nesterov ? __fmaf_rn(b, k.mom, d) : b;
	}
	p = __fmaf_rn(d, k.nlr, pi);
}

template <int GDT> __device__ __forceinline__ float4 load_g4(const void *g, uint64_t i)
{
	if (GDT == DT_F32)
		return __ldg((const float4 *)g + i / 4);
	uint2 h = __ldg((const uint2 *)g + i / 4);
	float4 r;
	if (GDT == DT_BF16) {
		r.x = bf16_to_f32((uint16_t)(h.x & 0xffffu));
		r.y = bf16_to_f32((uint16_t)(h.x >> 16));
		r.z = bf16_to_f32((uint16_t)(h.y & 0xffffu));
		r.w = bf16_to_f32((uint16_t)(h.y >> 16));
	} else {
		r.x = f16_to_f32((uint16_t)(h.x & 0xffffu));
		r.y = f16_to_f32((uint16_t)(h.x >> 16));
		r.z = f16_to_f32((uint16_t)(h.y & 0xffffu));
		r.w = f16_to_f32((uint16_t)(h.y >> 16));
	}
	return r;
}

__device__ __forceinline__ const mt_range &find_range(const mt_args &a)
{
	uint32_t lo = 0, hi = a.nr - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;
		if (a.r[mid].block0 <= blockIdx.x)
			lo = mid;
		else
			hi = mid - 1;
	}
	return a.r[lo];
}

template <int GDT> __global__ void __launch_bounds__(THREADS)
k_adamw(const __grid_constant__ mt_args a, const accel_cuda_adamw_k k0)
{
	accel_cuda_adamw_k k = k0;
	if (a.gs_dev)   /* the host's (float)grad_scale */
		k.gs = __double2float_rn(*a.gs_dev);
	const mt_range &r = find_range(a);
	uint64_t start = (uint64_t)(blockIdx.x - r.block0) * MT_CHUNK;
	uint64_t end = start + MT_CHUNK < r.n ? start + MT_CHUNK : r.n;
	if (r.vec) {
		uint64_t vend = start + ((end - start) & ~(uint64_t)3);
		float4 p[4], g[4], m[4], v[4];
		uint64_t idx[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			idx[u] = start + ((uint64_t)u * THREADS + threadIdx.x) * 4;
			if (idx[u] < vend) {
				p[u] = *(const float4 *)(r.p + idx[u]);
				g[u] = load_g4<GDT>(r.g, idx[u]);
				m[u] = *(const float4 *)(r.s0 + idx[u]);
				v[u] = *(const float4 *)(r.s1 + idx[u]);
			}
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			if (idx[u] < vend) {
				adamw_elem(k, g[u].x, p[u].x, m[u].x, v[u].x);
				adamw_elem(k, g[u].y, p[u].y, m[u].y, v[u].y);
				adamw_elem(k, g[u].z, p[u].z, m[u].z, v[u].z);
				adamw_elem(k, g[u].w, p[u].w, m[u].w, v[u].w);
				*(float4 *)(r.p + idx[u]) = p[u];
				*(float4 *)(r.s0 + idx[u]) = m[u];
				*(float4 *)(r.s1 + idx[u]) = v[u];
			}
		}
		start = vend;
	}
	for (uint64_t i = start + threadIdx.x; i < end; i += THREADS) {
		float p = r.p[i], m = r.s0[i], v = r.s1[i];
		adamw_elem(k, load_f<GDT>(r.g, i), p, m, v);
		r.p[i] = p;
		r.s0[i] = m;
		r.s1[i] = v;
	}
}

template <int GDT> __global__ void __launch_bounds__(THREADS)
k_sgd(const __grid_constant__ mt_args a, const accel_cuda_sgd_k k0)
{
	accel_cuda_sgd_k k = k0;
	if (a.gs_dev)
		k.gs = __double2float_rn(*a.gs_dev);
	const mt_range &r = find_range(a);
	uint64_t start = (uint64_t)(blockIdx.x - r.block0) * MT_CHUNK;
	uint64_t end = start + MT_CHUNK < r.n ? start + MT_CHUNK : r.n;
	for (uint64_t i = start + threadIdx.x; i < end; i += THREADS) {
		float p = r.p[i];
		sgd_elem(k, load_f<GDT>(r.g, i), p, r.s0 ? r.s0 + i : NULL);
		r.p[i] = p;
	}
}

static int aligned(const void *p, uintptr_t a)
{
	return p == NULL || ((uintptr_t)p % a) == 0;
}

template <int GDT> static cudaError_t launch_opt(const accel_cuda_opt *o)
{
	uint32_t i = 0;
	while (i < o->n) {
		mt_args a;
		uint32_t blocks = 0;
		a.nr = 0;
		a.gs_dev = o->gs_dev;
		for (; i < o->n && a.nr < MT_MAX; i++) {
			const accel_cuda_range *s = &o->ranges[i];
			uint64_t nb = (s->n + MT_CHUNK - 1) / MT_CHUNK;
			if (!s->n)
				continue;
			if (nb > 0x7fffffffu)   /* 8.8e12 elements: more than any GPU holds */
				return cudaErrorInvalidValue;
			if ((uint64_t)blocks + nb > 0x7fffffffu)
				break;
			mt_range *r = &a.r[a.nr++];
			r->p = s->p;
			r->g = s->g;
			r->s0 = s->s0;
			r->s1 = s->s1;
			r->n = s->n;
			r->block0 = blocks;
			r->vec = aligned(s->p, 16) && aligned(s->s0, 16) && aligned(s->s1, 16) &&
			         aligned(s->g, GDT == DT_F32 ? 16 : 8);
			blocks += (uint32_t)nb;
		}
		if (!a.nr)
			continue;
		if (o->adamw)
			k_adamw<GDT><<<blocks, THREADS, 0, tl_stream>>>(a, o->adamw_k);
		else
			k_sgd<GDT><<<blocks, THREADS, 0, tl_stream>>>(a, o->sgd_k);
		cudaError_t e = launched();
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

extern "C" int accel_cuda_launch_optim(const accel_cuda_opt *o)
{
	switch (o->grad_dtype) {
	case DT_F32: return launch_opt<DT_F32>(o);
	case DT_F16: return launch_opt<DT_F16>(o);
	default: return launch_opt<DT_BF16>(o);
	}
}

extern "C" void accel_cuda_set_stream(void *stream)
{
	tl_stream = (cudaStream_t)stream;
}

extern "C" void *accel_cuda_get_stream(void)
{
	return (void *)tl_stream;
}

extern "C" void accel_cuda_set_sync(int on)
{
	g_sync_each = on != 0;
}

extern "C" void accel_cuda_set_grid_cap(int blocks)
{
	if (blocks > 0)
		g_blocks_cap = blocks;
}
