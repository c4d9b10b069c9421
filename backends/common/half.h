/* SPDX-License-Identifier: MIT */
/* backends/common/half.h: f16 / bf16 <-> f32 conversions (header-only,
 * private: the core, the in-tree backends and plugins, tests and benchmarks
 * include it).  Round to nearest even; NaN stays
 * NaN; overflow goes to infinity, as IEEE 754 and PyTorch do. */
#ifndef ACCEL_COMMON_HALF_H
#define ACCEL_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t accel_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float accel_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline float accel_bf16_to_f32(uint16_t h)
{
	return accel_bits_f32((uint32_t)h << 16);
}

static inline uint16_t accel_f32_to_bf16(float f)
{
	uint32_t u = accel_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep it quiet NaN */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);               /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static inline float accel_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	uint32_t u;
	if (exp == 0) {
		if (man == 0) {
			u = sign;
		} else {                                /* subnormal: normalize */
			exp = 127 - 15 + 1;
			while (!(man & 0x400u)) {
				man <<= 1;
				exp--;
			}
			man &= 0x3ffu;
			u = sign | (exp << 23) | (man << 13);
		}
	} else if (exp == 0x1f) {
		u = sign | 0x7f800000u | (man << 13);    /* inf / nan */
	} else {
		u = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	return accel_bits_f32(u);
}

static inline uint16_t accel_f32_to_f16(float f)
{
	uint32_t u = accel_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t au = u & 0x7fffffffu;
	if (au > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u);       /* NaN */
	if (au >= 0x477ff000u)                        /* >= 65520 rounds to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (au < 0x38800000u) {                       /* below 2^-14: subnormal or 0 */
		if (au < 0x33000000u)                     /* < 2^-25: rounds to 0 */
			return sign;
		uint32_t e = au >> 23;
		uint32_t m = (au & 0x7fffffu) | 0x800000u;
		/* value = m * 2^(e-150); the f16 subnormal unit is 2^-24 */
		uint32_t sh = 150 - 24 - e;              /* bits to drop from m */
		uint32_t hm = m >> sh;
		uint32_t rem = m & ((1u << sh) - 1u);
		uint32_t half = 1u << (sh - 1);
		if (rem > half || (rem == half && (hm & 1u)))
			hm++;
		return (uint16_t)(sign | hm);
	}
	uint32_t r = au + 0xfffu + ((au >> 13) & 1u);  /* round to nearest even at bit 13 */
	r -= 0x38000000u;                              /* rebias exponent 127 -> 15 */
	return (uint16_t)(sign | (r >> 13));
}

#endif
