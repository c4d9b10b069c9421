/* SPDX-License-Identifier: MIT */
/* plugins/fp8/fp8_codec.c: E4M3/E5M2 conversion on the CPU (fp8_codec.h). */
#include <math.h>
#include <string.h>

#include "accel/types.h"
#include "fp8_codec.h"

typedef struct fmt_desc {
	int mbits, bias;
	float max;
	uint8_t max_code;
	float sub_scale;   /* 2^(mbits - emin): subnormal values to integers */
} fmt_desc;

static const fmt_desc E4M3 = {3, 7, FP8_E4M3_MAX, 0x7e, 512.0f};     /* 2^(3+6)  */
static const fmt_desc E5M2 = {2, 15, FP8_E5M2_MAX, 0x7b, 65536.0f};  /* 2^(2+14) */

static const fmt_desc *desc_of(uint32_t fmt)
{
	return fmt == ACCEL_DTYPE_F8E5M2 ? &E5M2 : &E4M3;
}

float fp8_max(uint32_t fmt)
{
	return desc_of(fmt)->max;
}

/* Round to nearest even on the f32 bits: no libm call per element (this
 * runs for every element of every emulated GEMM operand). */
static inline uint8_t encode(const fmt_desc *d, float x)
{
	uint32_t u, maxbits;
	memcpy(&u, &x, sizeof(u));
	memcpy(&maxbits, &d->max, sizeof(maxbits));
	uint8_t sign = (uint8_t)((u >> 31) << 7);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return 0x7f;                       /* NaN */
	if (a >= maxbits)
		return sign | d->max_code;         /* saturate, infinities included */
	int emin = 1 - d->bias;
	if (a < (uint32_t)(127 + emin) << 23) {
		/* below the smallest normal: multiples of 2^(emin - mbits).  The
		 * scaled value is < 2^mbits, and adding 1.5 * 2^23 rounds it to an
		 * integer, ties to even, in f32 arithmetic */
		float f;
		memcpy(&f, &a, sizeof(f));
		float t = f * d->sub_scale + 12582912.0f;
		return sign | (uint8_t)(uint32_t)(t - 12582912.0f);
	}
	int shift = 23 - d->mbits;
	uint32_t r = (a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u)) >> shift;
	/* a < max: rounding lands at most on max_code */
	return sign | (uint8_t)(r - ((uint32_t)(127 - d->bias) << d->mbits));
}

uint8_t fp8_encode(uint32_t fmt, float x)
{
	return encode(desc_of(fmt), x);
}

float fp8_decode(uint32_t fmt, uint8_t code)
{
	const fmt_desc *d = desc_of(fmt);
	int ebits = 7 - d->mbits;
	uint32_t mag = code & 0x7fu, m = mag & ((1u << d->mbits) - 1), e = mag >> d->mbits;
	float v;
	if (fmt == ACCEL_DTYPE_F8E5M2 && e == (1u << ebits) - 1)
		v = m ? NAN : INFINITY;
	else if (fmt != ACCEL_DTYPE_F8E5M2 && mag == 0x7f)
		v = NAN;
	else if (e == 0)
		v = ldexpf((float)m, 1 - d->bias - d->mbits);
	else
		v = ldexpf((float)(m + (1u << d->mbits)), (int)e - d->bias - d->mbits);
	return (code & 0x80) ? -v : v;
}

/* max |x| that propagates NaN (fmaxf would drop it) */
static inline float amax_step(float m, float v)
{
	float a = fabsf(v);
	return (a > m || isnan(a)) && !isnan(m) ? a : m;
}

float fp8_quantize_f32(uint32_t fmt, const float *x, size_t n, float scale, uint8_t *q)
{
	const fmt_desc *d = desc_of(fmt);
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		m = amax_step(m, x[i]);
		if (q)
			q[i] = encode(d, x[i] * scale);
	}
	return m;
}

float fp8_bf16_to_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

float fp8_f16_to_f32(uint16_t h)
{
	uint32_t s = (h >> 15) & 1u, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	float v;
	if (e == 0x1f)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexpf((float)m, -24);
	else
		v = ldexpf((float)(m | 0x400u), (int)e - 25);
	return s ? -v : v;
}

float fp8_quantize_bf16(uint32_t fmt, const uint16_t *x, size_t n, float scale, uint8_t *q)
{
	const fmt_desc *d = desc_of(fmt);
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float v = fp8_bf16_to_f32(x[i]);
		m = amax_step(m, v);
		if (q)
			q[i] = encode(d, v * scale);
	}
	return m;
}

float fp8_quantize_f16(uint32_t fmt, const uint16_t *x, size_t n, float scale, uint8_t *q)
{
	const fmt_desc *d = desc_of(fmt);
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float v = fp8_f16_to_f32(x[i]);
		m = amax_step(m, v);
		if (q)
			q[i] = encode(d, v * scale);
	}
	return m;
}

void fp8_quantize_t_f32(uint32_t fmt, const float *x, size_t rows, size_t cols, float scale,
                        uint8_t *qt)
{
	const fmt_desc *d = desc_of(fmt);
	/* blocks, so both sides stay in cache */
	enum { B = 32 };
	for (size_t r0 = 0; r0 < rows; r0 += B)
		for (size_t c0 = 0; c0 < cols; c0 += B)
			for (size_t r = r0; r < r0 + B && r < rows; r++)
				for (size_t c = c0; c < c0 + B && c < cols; c++)
					qt[c * rows + r] = encode(d, x[r * cols + c] * scale);
}

void fp8_dequantize_f32(uint32_t fmt, const uint8_t *q, size_t n, float scale_inv, float *y)
{
	float lut[256];
	for (int c = 0; c < 256; c++)
		lut[c] = fp8_decode(fmt, (uint8_t)c);
	for (size_t i = 0; i < n; i++)
		y[i] = lut[q[i]] * scale_inv;
}
