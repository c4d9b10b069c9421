/* SPDX-License-Identifier: MIT */
/* core/rng.h: the Philox4x32 block function and the word -> number
 * conversions behind the accel_rng_* API (private; header-only so in-tree
 * modules such as a device kernel can reproduce the same numbers).
 *
 * Philox4x32-R as published by Salmon, Moraes, Dror and Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3" (SC'11): a 4-word counter and a
 * 2-word key; each round multiplies counter words 0 and 2 by M0 and M1
 * (64-bit products split into hi and lo halves) and mixes:
 *   out = { hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0) }
 * and the key is bumped by the Weyl constants W0, W1 between rounds.  R = 10
 * is the recommended strength (Random123's philox4x32 default); the
 * known-answer vectors of Random123's kat_vectors file are in
 * tests/test-rng.c. */
#ifndef ACCEL_CORE_RNG_H
#define ACCEL_CORE_RNG_H

#include <stdint.h>

#define ACCEL_PHILOX_M0 UINT32_C(0xD2511F53)
#define ACCEL_PHILOX_M1 UINT32_C(0xCD9E8D57)
#define ACCEL_PHILOX_W0 UINT32_C(0x9E3779B9)
#define ACCEL_PHILOX_W1 UINT32_C(0xBB67AE85)

/* out = Philox4x32-`rounds`(ctr, key).  out may alias ctr. */
static inline void accelp_philox4x32_r(const uint32_t ctr[4], const uint32_t key[2],
                                      unsigned rounds, uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	for (unsigned r = 0; r < rounds; r++) {
		if (r) {
			k0 += ACCEL_PHILOX_W0;
			k1 += ACCEL_PHILOX_W1;
		}
		uint64_t p0 = (uint64_t)ACCEL_PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)ACCEL_PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

/* A 32-bit word as a float in [0, 1): its top 24 bits times 2^-24, exact. */
static inline float accelp_rng_word_to_uniform(uint32_t w)
{
	return (float)(w >> 8) * 0x1p-24f;
}

/* Two words as a double in [0, 1) with 53 random bits (w0 the high part). */
static inline double accelp_rng_words_to_double(uint32_t w0, uint32_t w1)
{
	uint64_t u = ((uint64_t)w0 << 32 | w1) >> 11;
	return (double)u * 0x1p-53;
}

#endif
