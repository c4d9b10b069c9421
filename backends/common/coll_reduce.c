/* SPDX-License-Identifier: MIT */
/* backends/common/coll_reduce.c: element-wise reductions of n inputs, for
 * the host backends (shm, tcp), in the common library (each module links
 * its own hidden copy).
 *
 * Every reduction walks the data in blocks that fit in L1: the block is
 * combined into a scratch buffer input by input, in rank order (so every
 * rank that reduces the same elements gets the same bits), then stored to
 * each output.  The scratch makes exact aliasing of an output with an input
 * harmless (in-place collectives) and lets f16/bf16 accumulate in f32 with a
 * single rounding at the end.  The inner loops are plain restrict loops the
 * compiler vectorizes (this file is built with -O3); measured at memory
 * bandwidth on f32, see docs/comm.md. */
#include <math.h>
#include <string.h>

#include "backends/common/half.h"
#include "backends/common/coll-reduce.h"

#define BLK_BYTES 16384

/* The x86-64 baseline is SSE2; an AVX2 clone of each kernel, picked at load
 * time (ifunc), doubles the throughput of the f16 conversions and
 * vectorizes the 64-bit integer max/min (measured: f16 sum 0.38 -> 0.80
 * Gelem/s).  Plain C either way; no intrinsics. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KERNEL __attribute__((target_clones("avx2", "default"))) static
#endif
#endif
#ifndef KERNEL
#define KERNEL static
#endif

/* max/min that propagate NaN (like torch.maximum), written as selects so
 * the loops vectorize (a short-circuit || would be control flow). */
static inline float max_f32(float a, float b)
{
	float m = a > b ? a : b;
	m = a != a ? a : m;
	return b != b ? b : m;
}
static inline float min_f32(float a, float b)
{
	float m = a < b ? a : b;
	m = a != a ? a : m;
	return b != b ? b : m;
}
static inline double max_f64(double a, double b)
{
	double m = a > b ? a : b;
	m = a != a ? a : m;
	return b != b ? b : m;
}
static inline double min_f64(double a, double b)
{
	double m = a < b ? a : b;
	m = a != a ? a : m;
	return b != b ? b : m;
}

/* f16 <-> f32 without branches, so the loops vectorize (backends/common/half.h's
 * versions loop over subnormals and run ~10x slower).  Bit-identical to
 * half.h for every input: checked exhaustively (all 2^16 halves, all 2^32
 * floats) when written. */
/* Selects are written as masks: GCC treats `c ? a : b` next to these float
 * operations as control flow and would not vectorize. */
static inline float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t em = h & 0x7fffu;
	/* exponent and mantissa moved into place and rebiased by a multiply
	 * (exact, subnormals included); infinities and NaNs keep their payload */
	union { uint32_t u; float f; } x = {.u = em << 13};
	x.f *= 0x1p112f;
	uint32_t infnan = 0x7f800000u | ((em & 0x3ffu) << 13);
	uint32_t m = -(uint32_t)(em >= 0x7c00u);
	union { uint32_t u; float f; } y = {.u = ((x.u & ~m) | (infnan & m)) | sign};
	return y.f;
}
static inline uint16_t f32_to_f16(float f)
{
	union { float f; uint32_t u; } x = {.f = f};
	uint32_t sign = x.u & 0x80000000u, a = x.u ^ sign;
	/* normal: rebias, round to nearest even at bit 13 */
	uint32_t n = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
	/* subnormal or zero: an add of 0.5 rounds the bits into place */
	union { uint32_t u; float f; } y = {.u = a};
	y.f += 0.5f;
	uint32_t sub = y.u - 0x3f000000u;
	uint32_t m_sub = -(uint32_t)(a < 0x38800000u);
	uint32_t o = (sub & m_sub) | (n & ~m_sub);
	/* overflow to infinity; NaN becomes the quiet NaN 0x7e00 */
	uint32_t m_big = -(uint32_t)(a >= 0x47800000u);
	uint32_t special = 0x7c00u | ((uint32_t)(a > 0x7f800000u) << 9);
	o = (special & m_big) | (o & ~m_big);
	return (uint16_t)(o | (sign >> 16));
}

/* Integer sums wrap (two's complement) instead of being undefined. */
#define ADD_I32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define ADD_I64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define MAXI(x, y) ((x) > (y) ? (x) : (y))
#define MINI(x, y) ((x) < (y) ? (x) : (y))

/* Native types: scratch has the input's type. */
#define DEF_NATIVE(NAME, T, EXPR)                                                       \
	KERNEL void NAME##_first(void *vt, const void *va, const void *vb, size_t n)   \
	{                                                                              \
		T *restrict t = vt;                                                    \
		const T *restrict a = va;                                              \
		const T *restrict b = vb;                                              \
		for (size_t i = 0; i < n; i++) {                                       \
			T x = a[i], y = b[i];                                          \
			t[i] = EXPR;                                                   \
		}                                                                      \
	}                                                                              \
	KERNEL void NAME##_acc(void *vt, const void *vb, size_t n)                     \
	{                                                                              \
		T *restrict t = vt;                                                    \
		const T *restrict b = vb;                                              \
		for (size_t i = 0; i < n; i++) {                                       \
			T x = t[i], y = b[i];                                          \
			t[i] = EXPR;                                                   \
		}                                                                      \
	}                                                                              \
	KERNEL void NAME##_racc(void *vt, const void *va, size_t n)                    \
	{                                                                              \
		T *restrict t = vt;                                                    \
		const T *restrict a = va;                                              \
		for (size_t i = 0; i < n; i++) {                                       \
			T x = a[i], y = t[i];                                          \
			t[i] = EXPR;                                                   \
		}                                                                      \
	}

DEF_NATIVE(sum_f32, float, x + y)
DEF_NATIVE(max_f32, float, max_f32(x, y))
DEF_NATIVE(min_f32, float, min_f32(x, y))
DEF_NATIVE(sum_f64, double, x + y)
DEF_NATIVE(max_f64, double, max_f64(x, y))
DEF_NATIVE(min_f64, double, min_f64(x, y))
DEF_NATIVE(sum_i32, int32_t, ADD_I32(x, y))
DEF_NATIVE(max_i32, int32_t, MAXI(x, y))
DEF_NATIVE(min_i32, int32_t, MINI(x, y))
DEF_NATIVE(sum_i64, int64_t, ADD_I64(x, y))
DEF_NATIVE(max_i64, int64_t, MAXI(x, y))
DEF_NATIVE(min_i64, int64_t, MINI(x, y))

/* 16-bit floats: scratch is f32. */
#define DEF_HALF(NAME, CVT, EXPR)                                                       \
	KERNEL void NAME##_first(void *vt, const void *va, const void *vb, size_t n)   \
	{                                                                              \
		float *restrict t = vt;                                                \
		const uint16_t *restrict a = va;                                       \
		const uint16_t *restrict b = vb;                                       \
		for (size_t i = 0; i < n; i++) {                                       \
			float x = CVT(a[i]), y = CVT(b[i]);                            \
			t[i] = EXPR;                                                   \
		}                                                                      \
	}                                                                              \
	KERNEL void NAME##_acc(void *vt, const void *vb, size_t n)                     \
	{                                                                              \
		float *restrict t = vt;                                                \
		const uint16_t *restrict b = vb;                                       \
		for (size_t i = 0; i < n; i++) {                                       \
			float x = t[i], y = CVT(b[i]);                                 \
			t[i] = EXPR;                                                   \
		}                                                                      \
	}

DEF_HALF(sum_bf16, accel_bf16_to_f32, x + y)
DEF_HALF(max_bf16, accel_bf16_to_f32, max_f32(x, y))
DEF_HALF(min_bf16, accel_bf16_to_f32, min_f32(x, y))
DEF_HALF(sum_f16, f16_to_f32, x + y)
DEF_HALF(max_f16, f16_to_f32, max_f32(x, y))
DEF_HALF(min_f16, f16_to_f32, min_f32(x, y))

KERNEL void load_bf16(void *vt, const void *va, size_t n)
{
	float *restrict t = vt;
	const uint16_t *restrict a = va;
	for (size_t i = 0; i < n; i++)
		t[i] = accel_bf16_to_f32(a[i]);
}
KERNEL void load_f16(void *vt, const void *va, size_t n)
{
	float *restrict t = vt;
	const uint16_t *restrict a = va;
	for (size_t i = 0; i < n; i++)
		t[i] = f16_to_f32(a[i]);
}
KERNEL void store_bf16(void *vo, const void *vt, size_t n)
{
	uint16_t *restrict o = vo;
	const float *restrict t = vt;
	for (size_t i = 0; i < n; i++)
		o[i] = accel_f32_to_bf16(t[i]);
}
KERNEL void store_f16(void *vo, const void *vt, size_t n)
{
	uint16_t *restrict o = vo;
	const float *restrict t = vt;
	for (size_t i = 0; i < n; i++)
		o[i] = f32_to_f16(t[i]);
}

KERNEL void avg_f32(void *vt, size_t n, int32_t div)
{
	float *restrict t = vt;
	float d = (float)div;
	for (size_t i = 0; i < n; i++)
		t[i] = t[i] / d;
}
KERNEL void avg_f64(void *vt, size_t n, int32_t div)
{
	double *restrict t = vt;
	double d = (double)div;
	for (size_t i = 0; i < n; i++)
		t[i] = t[i] / d;
}
KERNEL void avg_i32(void *vt, size_t n, int32_t div)
{
	int32_t *restrict t = vt;
	for (size_t i = 0; i < n; i++)
		t[i] = t[i] / div;     /* C division truncates toward zero */
}
KERNEL void avg_i64(void *vt, size_t n, int32_t div)
{
	int64_t *restrict t = vt;
	for (size_t i = 0; i < n; i++)
		t[i] = t[i] / div;
}

typedef void (*first_fn)(void *t, const void *a, const void *b, size_t n);
typedef void (*acc_fn)(void *t, const void *b, size_t n);
typedef void (*conv_fn)(void *dst, const void *src, size_t n);
typedef void (*avg_fn)(void *t, size_t n, int32_t div);

typedef struct kern {
	first_fn first[3];   /* sum, max, min: t = a op b */
	acc_fn acc[3];       /* t = t op b */
	acc_fn racc[3];      /* t = a op t (native types only) */
	conv_fn load;        /* NULL: memcpy */
	conv_fn store;       /* NULL: memcpy */
	avg_fn avg;
	size_t tsize;        /* scratch element size */
} kern;

#define K3(p, s) {p##sum_##s##_first, p##max_##s##_first, p##min_##s##_first}
#define A3(p, s) {p##sum_##s##_acc, p##max_##s##_acc, p##min_##s##_acc}
#define R3(p, s) {p##sum_##s##_racc, p##max_##s##_racc, p##min_##s##_racc}

static const kern k_f32 = {K3(, f32), A3(, f32), R3(, f32), NULL, NULL, avg_f32, 4};
static const kern k_f64 = {K3(, f64), A3(, f64), R3(, f64), NULL, NULL, avg_f64, 8};
static const kern k_i32 = {K3(, i32), A3(, i32), R3(, i32), NULL, NULL, avg_i32, 4};
static const kern k_i64 = {K3(, i64), A3(, i64), R3(, i64), NULL, NULL, avg_i64, 8};
static const kern k_bf16 = {K3(, bf16), A3(, bf16), {NULL, NULL, NULL}, load_bf16, store_bf16,
                            avg_f32, 4};
static const kern k_f16 = {K3(, f16), A3(, f16), {NULL, NULL, NULL}, load_f16, store_f16, avg_f32,
                           4};

static const kern *pick(uint32_t dtype)
{
	switch (dtype) {
	case ACCEL_DTYPE_F32: return &k_f32;
	case ACCEL_DTYPE_F64: return &k_f64;
	case ACCEL_DTYPE_I32: return &k_i32;
	case ACCEL_DTYPE_I64: return &k_i64;
	case ACCEL_DTYPE_BF16: return &k_bf16;
	case ACCEL_DTYPE_F16: return &k_f16;
	default: return NULL;
	}
}

/* An output that can serve as the accumulator: it aliases no input, or
 * exactly in[0] or in[1] (then the first step is t op= in[1], or
 * t = in[0] op t, keeping the operand order).  -1 when there is none. */
static int accumulator(int n_in, const void *const *in, int n_out, void *const *out, int *ret_alias)
{
	for (int d = 0; d < n_out; d++) {
		int alias = -1, ok = 1;
		for (int q = 0; q < n_in && ok; q++) {
			if (out[d] != in[q])
				continue;
			if (q >= 2 || alias >= 0)
				ok = 0;
			alias = q;
		}
		if (ok) {
			*ret_alias = alias;
			return d;
		}
	}
	return -1;
}

void coll_reduce(uint32_t dtype, uint32_t redop, int n_in, const void *const *in, int n_out,
                void *const *out, uint64_t count, int32_t avg_div)
{
	_Alignas(64) unsigned char tmp[BLK_BYTES];
	const kern *k = pick(dtype);
	size_t es = accel_abi_dtype_size(dtype);
	int which = redop == ACCEL_RED_MAX ? 1 : redop == ACCEL_RED_MIN ? 2 : 0;
	int alias = -1;
	int d = -1;

	if (!k || n_in < 1 || n_out < 1)
		return;   /* callers validate; nothing sensible to do */
	/* Native types accumulate straight into an output (one pass less over
	 * memory); 16-bit floats and awkward aliasing go through the scratch. */
	if (!k->store && n_in >= 2)
		d = accumulator(n_in, in, n_out, out, &alias);
	size_t blk = BLK_BYTES / k->tsize;
	for (uint64_t o = 0; o < count; o += blk) {
		size_t n = (size_t)(count - o < blk ? count - o : blk);
		size_t off = (size_t)o * es;
		const char *a = (const char *)in[0] + off;
		const char *b = n_in > 1 ? (const char *)in[1] + off : NULL;
		void *t = d >= 0 ? (void *)((char *)out[d] + off) : (void *)tmp;
		if (n_in == 1) {
			if (k->load)
				k->load(t, a, n);
			else
				memcpy(t, a, n * es);
		} else if (alias == 0) {
			k->acc[which](t, b, n);
		} else if (alias == 1) {
			k->racc[which](t, a, n);
		} else {
			k->first[which](t, a, b, n);
		}
		for (int q = 2; q < n_in; q++)
			k->acc[which](t, (const char *)in[q] + off, n);
		if (redop == ACCEL_RED_AVG)
			k->avg(t, n, avg_div);
		if (d >= 0) {
			for (int j = 0; j < n_out; j++)
				if (j != d)
					memcpy((char *)out[j] + off, t, n * es);
			continue;
		}
		if (k->store)
			k->store((char *)out[0] + off, tmp, n);
		else
			memcpy((char *)out[0] + off, tmp, n * es);
		for (int j = 1; j < n_out; j++)
			memcpy((char *)out[j] + off, (const char *)out[0] + off, n * es);
	}
}
