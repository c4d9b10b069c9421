/* SPDX-License-Identifier: MIT */
/* core/rng.c: Philox4x32-10 streams (the accel_rng_* part of accel.h's
 * @api-data section).
 *
 * Why a counter-based generator: every number is a pure function of (key,
 * counter), so a stream's state is one position, a parameter's initial
 * values can be produced for any slice on any rank, and a checkpoint only
 * needs the position.  Why Philox-10 rather than a hash such as splitmix:
 * it is the published, cryptanalysed and BigCrush-tested design that GPU
 * libraries use, so a device kernel can produce the same numbers. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "rng.h"

#define PI 3.14159265358979323846
#define NO_BLOCK UINT64_MAX

/* Domain tag in counter word 3 of the key derivation ("rng" + 1). */
#define KEY_TAG UINT32_C(0x01676e72)

void accel_rng_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t ret_out[4])
{
	if (ctr && key && ret_out)
		accelp_philox4x32_r(ctr, key, 10, ret_out);
}

int accel_rng_init(uint64_t seed, uint32_t kind, uint64_t id, int32_t rank, accel_rng *ret_rng)
{
	uint32_t ctr[4], key[2], out[4];
	if (!ret_rng || kind > ACCEL_RNG_PARAM || (kind == ACCEL_RNG_RANK && rank < 0))
		return ACCEL_ERR_INVALID_ARG;
	/* The stream key is Philox of (id, kind) under the seed: a keyed
	 * pseudo-random function, so related seeds or ids give unrelated keys. */
	ctr[0] = (uint32_t)id;
	ctr[1] = (uint32_t)(id >> 32);
	ctr[2] = kind;
	ctr[3] = KEY_TAG;
	key[0] = (uint32_t)seed;
	key[1] = (uint32_t)(seed >> 32);
	accelp_philox4x32_r(ctr, key, 10, out);
	*ret_rng = (accel_rng){
		.key = {out[0], out[1]},
		.lane = kind == ACCEL_RNG_RANK ? (uint32_t)rank : 0,
		.pos = 0,
		.cached = NO_BLOCK,
	};
	return ACCEL_OK;
}

int accel_rng_seed_stream(accel_ctx *ctx, uint32_t kind, uint64_t id, accel_rng *ret_rng)
{
	int64_t seed = 42;
	int rank = 0, rc;
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!ret_rng || kind > ACCEL_RNG_PARAM)
		return accel_set_error(ctx, ACCEL_ERR_INVALID_ARG, "accel_rng_seed_stream: %s",
		                       !ret_rng ? "ret_rng is NULL"
		                                : "kind must be ACCEL_RNG_DATA, _RANK or _PARAM");
	rc = accel_config_int(ctx, "seed", &seed);
	if (rc && rc != ACCEL_ERR_NOT_FOUND)
		return accel_set_error(ctx, rc, "accel_rng_seed_stream: cannot read config key 'seed' "
		                       "(%s)", accel_status_str(rc));
	if (kind == ACCEL_RNG_RANK && (rank = accel_rank(ctx)) < 0)
		return accel_set_error(ctx, ACCEL_ERR_STATE, "accel_rng_seed_stream: the context has "
		                       "no rank");
	return accel_rng_init((uint64_t)seed, kind, id, rank, ret_rng);
}

static void block_at(const accel_rng *r, uint64_t b, uint32_t out[4])
{
	uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), r->lane, r->reserved};
	accelp_philox4x32_r(ctr, r->key, 10, out);
}

uint32_t accel_rng_u32(accel_rng *rng)
{
	if (!rng)
		return 0;
	uint64_t b = rng->pos >> 2;
	if (rng->cached != b) {
		block_at(rng, b, rng->block);
		rng->cached = b;
	}
	return rng->block[rng->pos++ & 3];
}

float accel_rng_uniform(accel_rng *rng)
{
	return accelp_rng_word_to_uniform(accel_rng_u32(rng));
}

double accel_rng_uniform_double(accel_rng *rng)
{
	uint32_t hi = accel_rng_u32(rng);
	return accelp_rng_words_to_double(hi, accel_rng_u32(rng));
}

static float normal_of(uint32_t a, uint32_t b)
{
	double u1 = ((double)a + 0.5) * 0x1p-32;   /* (0, 1): log is finite */
	double u2 = (double)b * 0x1p-32;
	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * PI * u2));
}

float accel_rng_normal(accel_rng *rng)
{
	uint32_t a = accel_rng_u32(rng);
	return normal_of(a, accel_rng_u32(rng));
}

uint64_t accel_rng_tell(const accel_rng *rng)
{
	return rng ? rng->pos : 0;
}

void accel_rng_seek(accel_rng *rng, uint64_t pos)
{
	if (rng)
		rng->pos = pos;
}

static int check_uniform(const float *dst, uint64_t n, double lo, double hi)
{
	if ((!dst && n) || !isfinite(lo) || !isfinite(hi) || hi < lo)
		return ACCEL_ERR_INVALID_ARG;
	return ACCEL_OK;
}

static int check_normal(const float *dst, uint64_t n, double mean, double std)
{
	if ((!dst && n) || !isfinite(mean) || !isfinite(std) || std < 0)
		return ACCEL_ERR_INVALID_ARG;
	return ACCEL_OK;
}

/* lo + (hi - lo) * u in double; a result that rounds up to hi in float is
 * moved one float below it so the interval stays half-open. */
static float scale_uniform(float u, double lo, double hi, float top)
{
	float x = (float)(lo + (hi - lo) * (double)u);
	return x < top ? x : nextafterf(top, -INFINITY);
}

int accel_rng_fill_uniform(accel_rng *rng, float *dst, uint64_t n, double lo, double hi)
{
	if (!rng || check_uniform(dst, n, lo, hi))
		return ACCEL_ERR_INVALID_ARG;
	if (lo == hi) {
		for (uint64_t i = 0; i < n; i++)
			dst[i] = (float)lo;
		rng->pos += n;
		return ACCEL_OK;
	}
	float top = (float)hi;
	uint64_t i = 0;
	/* Partial first block through the cache, whole blocks directly. */
	while (i < n && (rng->pos & 3))
		dst[i++] = scale_uniform(accel_rng_uniform(rng), lo, hi, top);
	for (; n - i >= 4; i += 4) {
		uint32_t w[4];
		block_at(rng, rng->pos >> 2, w);
		for (int j = 0; j < 4; j++)
			dst[i + j] = scale_uniform(accelp_rng_word_to_uniform(w[j]), lo, hi, top);
		rng->pos += 4;
	}
	while (i < n)
		dst[i++] = scale_uniform(accel_rng_uniform(rng), lo, hi, top);
	return ACCEL_OK;
}

int accel_rng_fill_normal(accel_rng *rng, float *dst, uint64_t n, double mean, double std)
{
	if (!rng || check_normal(dst, n, mean, std))
		return ACCEL_ERR_INVALID_ARG;
	uint64_t i = 0;
	/* Word pairs never straddle blocks once pos is even; an odd position
	 * (after a u32 draw) goes through the cache all the way. */
	if (rng->pos & 1) {
		for (; i < n; i++)
			dst[i] = (float)(mean + std * (double)accel_rng_normal(rng));
		return ACCEL_OK;
	}
	if (i < n && (rng->pos & 3))
		dst[i++] = (float)(mean + std * (double)accel_rng_normal(rng));
	for (; n - i >= 2; i += 2) {
		uint32_t w[4];
		block_at(rng, rng->pos >> 2, w);
		dst[i] = (float)(mean + std * (double)normal_of(w[0], w[1]));
		dst[i + 1] = (float)(mean + std * (double)normal_of(w[2], w[3]));
		rng->pos += 4;
	}
	if (i < n)
		dst[i] = (float)(mean + std * (double)accel_rng_normal(rng));
	return ACCEL_OK;
}

uint64_t accel_rng_key(const char *name)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (; name && *name; name++)
		h = (h ^ (unsigned char)*name) * UINT64_C(0x100000001b3);
	return h;
}

int accel_rng_fill_uniform_indexed(uint64_t seed, uint64_t key, uint64_t offset, uint64_t count,
                                   double lo, double hi, float *dst)
{
	accel_rng r;
	if (check_uniform(dst, count, lo, hi) || offset > UINT64_MAX - count ||
	    accel_rng_init(seed, ACCEL_RNG_PARAM, key, 0, &r))
		return ACCEL_ERR_INVALID_ARG;
	accel_rng_seek(&r, offset);
	return accel_rng_fill_uniform(&r, dst, count, lo, hi);
}

int accel_rng_fill_normal_indexed(uint64_t seed, uint64_t key, uint64_t offset, uint64_t count,
                                  double mean, double std, float *dst)
{
	accel_rng r;
	if (check_normal(dst, count, mean, std) || offset > (UINT64_MAX >> 1) - count ||
	    accel_rng_init(seed, ACCEL_RNG_PARAM, key, 0, &r))
		return ACCEL_ERR_INVALID_ARG;
	accel_rng_seek(&r, 2 * offset);
	return accel_rng_fill_normal(&r, dst, count, mean, std);
}
