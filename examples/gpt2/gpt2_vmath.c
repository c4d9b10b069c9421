/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_vmath.c: gpt2_vmath.h, AVX2+FMA and portable. */
#include <math.h>
#include <stdint.h>

#include "gpt2_vmath.h"

#define GELU_K 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* ---- portable ------------------------------------------------------------ */

static float max_c(const float *x, size_t n)
{
	float m = x[0];
	for (size_t i = 1; i < n; i++)
		m = x[i] > m ? x[i] : m;
	return m;
}

static double exp_sum_c(float *y, const float *x, float shift, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) {
		float e = expf(x[i] - shift);
		if (y)
			y[i] = e;
		s += e;
	}
	return s;
}

static void scale_c(float *x, float s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

static double dot_c(const float *x, const float *y, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)x[i] * y[i];
	return s;
}

/* tanh(u) and 1 - tanh(u)^2 = 4 e / (1 + e)^2, e = exp(-2|u|): the second
 * without the cancellation of 1 - t*t where t is near +-1 (GELU's
 * derivative multiplies it by up to ~10). */
static float tanh_c(float u, float *sech2)
{
	float e = expf(-2 * fabsf(u)), inv = 1 / (1 + e);
	if (sech2)
		*sech2 = 4 * e * inv * inv;
	return copysignf((1 - e) * inv, u);
}

static void gelu_forward_c(float *y, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float v = x[i];
		y[i] = 0.5f * v * (1 + tanh_c(GELU_K * (v + GELU_A * v * v * v), NULL));
	}
}

static void gelu_backward_c(float *d, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float v = x[i], s2;
		float t = tanh_c(GELU_K * (v + GELU_A * v * v * v), &s2);
		float dt = GELU_K * (1 + 3 * GELU_A * v * v);
		d[i] *= 0.5f * (1 + t) + 0.5f * v * s2 * dt;
	}
}

/* ---- AVX2 + FMA ---------------------------------------------------------- */

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_KERNELS 1
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

/* Lanes [0, r) set, r in 0..8: the mask of a partial last vector. */
AVX2 static __m256i tail_mask(size_t r)
{
	const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), idx);
}

/* exp(x), Cephes' expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-7
 * polynomial (Cephes' coefficients), times 2^n built in the exponent
 * field.  Below -87.33 (where exp leaves the normal floats) the result is
 * 0, above 88.72 +inf; NaN stays NaN (min/max take their second operand
 * when one is NaN, so x goes second). */
AVX2 static __m256 exp8(__m256 x)
{
	const __m256 hi = _mm256_set1_ps(88.7228391f), lo = _mm256_set1_ps(-87.3365448f);
	__m256 xc = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
	                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	/* r = x - n ln2 in two pieces, ln2 = 0.693359375 - 2.12194440e-4 */
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	/* 2^n for n in [-126, 128): at n = 128 (x near hi) build 2^127 and
	 * double it, so the exponent field never overflows */
	__m256i ni = _mm256_cvtps_epi32(n);
	__m256i big = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
	ni = _mm256_sub_epi32(ni, _mm256_and_si256(big, _mm256_set1_epi32(1)));
	__m256 pow2 = _mm256_castsi256_ps(
	    _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
	p = _mm256_mul_ps(p, pow2);
	p = _mm256_add_ps(p, _mm256_and_ps(_mm256_castsi256_ps(big), p));
	/* out of range: 0 below, +inf above */
	p = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), p);
	return _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

/* tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|): the absolute error
 * is about 1e-7 everywhere (the relative one grows near 0, where GELU
 * multiplies t by x anyway).  With sech2, also 1 - tanh(u)^2 = 4 e / (1 +
 * e)^2, which has no cancellation where t is near +-1. */
AVX2 static __m256 tanh8(__m256 u, __m256 *sech2)
{
	const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
	__m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_andnot_ps(sign, u)));
	__m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
	__m256 t = _mm256_mul_ps(_mm256_sub_ps(one, e), inv);
	if (sech2)
		*sech2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(4.0f), e), _mm256_mul_ps(inv, inv));
	return _mm256_or_ps(t, _mm256_and_ps(sign, u));
}

AVX2 static __m256d sum_pd(__m256d acc, __m256 v)
{
	acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
	return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

AVX2 static double hsum_pd(__m256d v)
{
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

AVX2 static float max_x(const float *x, size_t n)
{
	__m256 m = _mm256_set1_ps(-INFINITY);
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
	if (i < n) {
		__m256i k = tail_mask(n - i);
		__m256 v = _mm256_maskload_ps(x + i, k);
		m = _mm256_max_ps(m, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v,
		                                      _mm256_castsi256_ps(k)));
	}
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
	return _mm_cvtss_f32(h);
}

AVX2 static double exp_sum_x(float *y, const float *x, float shift, size_t n)
{
	__m256 sh = _mm256_set1_ps(shift);
	__m256d acc = _mm256_setzero_pd();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
		if (y)
			_mm256_storeu_ps(y + i, e);
		acc = sum_pd(acc, e);
	}
	if (i < n) {
		__m256i k = tail_mask(n - i);
		__m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), sh));
		e = _mm256_and_ps(e, _mm256_castsi256_ps(k));
		if (y)
			_mm256_maskstore_ps(y + i, k, e);
		acc = sum_pd(acc, e);
	}
	return hsum_pd(acc);
}

AVX2 static void scale_x(float *x, float s, size_t n)
{
	__m256 sv = _mm256_set1_ps(s);
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
	for (; i < n; i++)
		x[i] *= s;
}

AVX2 static double dot_x(const float *x, const float *y, size_t n)
{
	__m256d acc = _mm256_setzero_pd();
	size_t i = 0;
	for (; i + 4 <= n; i += 4)   /* products in double, as the portable loop */
		acc = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)),
		                      _mm256_cvtps_pd(_mm_loadu_ps(y + i)), acc);
	double s = hsum_pd(acc);
	for (; i < n; i++)
		s += (double)x[i] * y[i];
	return s;
}

/* t = tanh(k (v + a v^3)) of 8 values (and 1 - t^2 when sech2) */
AVX2 static __m256 gelu_t8(__m256 v, __m256 *sech2)
{
	__m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
	return tanh8(_mm256_mul_ps(_mm256_set1_ps(GELU_K),
	                           _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), v3, v)),
	             sech2);
}

AVX2 static void gelu_forward_x(float *y, const float *x, size_t n)
{
	const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m256 t = gelu_t8(v, NULL);
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t)));
	}
	if (i < n)
		gelu_forward_c(y + i, x + i, n - i);
}

AVX2 static void gelu_backward_x(float *d, const float *x, size_t n)
{
	const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m256 s2, t = gelu_t8(v, &s2);
		/* dt = k (1 + 3 a v^2) */
		__m256 dt = _mm256_mul_ps(_mm256_set1_ps(GELU_K),
		                          _mm256_fmadd_ps(_mm256_set1_ps(3 * GELU_A),
		                                          _mm256_mul_ps(v, v), one));
		/* 0.5 (1 + t) + 0.5 v (1 - t^2) dt */
		__m256 g = _mm256_mul_ps(_mm256_mul_ps(half, v), s2);
		g = _mm256_fmadd_ps(g, dt, _mm256_mul_ps(half, _mm256_add_ps(one, t)));
		_mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_loadu_ps(d + i), g));
	}
	if (i < n)
		gelu_backward_c(d + i, x + i, n - i);
}
#endif

/* ---- dispatch ------------------------------------------------------------ */

static int forced = -1;

static int cpu_simd(void)
{
#ifdef HAVE_X86_KERNELS
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return 0;
#endif
}

int gpt2_vmath_simd(void)
{
	return forced >= 0 ? forced : cpu_simd();
}

int gpt2_vmath_force(int on)
{
	forced = on < 0 ? -1 : on && cpu_simd();
	return gpt2_vmath_simd();
}

#ifdef HAVE_X86_KERNELS
#define SIMD() gpt2_vmath_simd()
#else
#define SIMD() 0
#define max_x max_c
#define exp_sum_x exp_sum_c
#define scale_x scale_c
#define dot_x dot_c
#define gelu_forward_x gelu_forward_c
#define gelu_backward_x gelu_backward_c
#endif

float gpt2_vmath_max(const float *x, size_t n)
{
	return SIMD() ? max_x(x, n) : max_c(x, n);
}

double gpt2_vmath_exp_sum(float *y, const float *x, float shift, size_t n)
{
	return SIMD() ? exp_sum_x(y, x, shift, n) : exp_sum_c(y, x, shift, n);
}

void gpt2_vmath_scale(float *x, float s, size_t n)
{
	if (SIMD())
		scale_x(x, s, n);
	else
		scale_c(x, s, n);
}

double gpt2_vmath_dot(const float *x, const float *y, size_t n)
{
	return SIMD() ? dot_x(x, y, n) : dot_c(x, y, n);
}

void gpt2_vmath_gelu_forward(float *y, const float *x, size_t n)
{
	if (SIMD())
		gelu_forward_x(y, x, n);
	else
		gelu_forward_c(y, x, n);
}

void gpt2_vmath_gelu_backward(float *d, const float *x, size_t n)
{
	if (SIMD())
		gelu_backward_x(d, x, n);
	else
		gelu_backward_c(d, x, n);
}
