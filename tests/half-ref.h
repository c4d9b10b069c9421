/* SPDX-License-Identifier: MIT */
/*
 * tests/half-ref.h: an independent reference for the f32 -> bf16 and
 * f32 -> f16 direction of op_copy, and the inputs that probe it (shared by
 * tests/test-ops.c on the CPU and tests/test-cuda.c on the GPU).
 *
 * The reference does not share code or bit tricks with
 * backends/common/half.h: it rounds in double arithmetic, |x| / q to the
 * nearest integer with nearbyint() (the default rounding mode, ties to
 * even) times q, where q is the target's quantum at x's binade (or at the
 * smallest normal binade, for subnormal results), and calls anything that
 * rounds to 2^(emax+1) or more infinity (IEEE 754 overflow under round to
 * nearest).  Results are decoded with ldexp from their sign, exponent and
 * mantissa fields.
 *
 * The inputs: for every finite non-negative target value v (every bit
 * pattern from 0 to the largest finite) and its negative, v itself, the
 * midpoint m to the next value up (for the largest finite, to
 * 2^(emax+1)), and the f32 values one ulp below and above m; the
 * specials (+-0, +-Inf, quiet and signalling NaNs with payloads in the
 * high and in the low bits, f32 subnormals, FLT_MAX, the f16 overflow
 * threshold); and random f32 bit patterns.  Every one of them is an
 * exact f32 (asserted).  The generator also checks the reference against
 * what the construction says (v -> v, just below m -> v, just above m ->
 * the next, m -> the even one), so a wrong reference fails too.
 */
#ifndef ACCEL_TESTS_HALF_REF_H
#define ACCEL_TESTS_HALF_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct half_fmt {
	const char *name;
	int man_bits;        /* stored mantissa bits */
	int exp_bits;
	int emin, emax;      /* of normal numbers */
} half_fmt;

static const half_fmt half_fmt_bf16 = {"bf16", 7, 8, -126, 127};
static const half_fmt half_fmt_f16 = {"f16", 10, 5, -14, 15};

static inline uint32_t half_ref_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float half_ref_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint16_t half_ref_exp_mask(const half_fmt *f)
{
	return (uint16_t)(((1u << f->exp_bits) - 1u) << f->man_bits);
}

/* NaN pattern: exponent all ones, mantissa not 0. */
static inline int half_ref_is_nan(const half_fmt *f, uint16_t h)
{
	uint16_t em = half_ref_exp_mask(f);
	return (h & em) == em && (h & ((1u << f->man_bits) - 1u)) != 0;
}

/* Quiet NaN: the mantissa's top bit set. */
static inline int half_ref_is_quiet(const half_fmt *f, uint16_t h)
{
	return half_ref_is_nan(f, h) && (h & (1u << (f->man_bits - 1))) != 0;
}

/* The value of pattern h (Inf for exponent all ones and mantissa 0; NaN
 * for the NaNs), from its fields. */
static inline double half_ref_decode(const half_fmt *f, uint16_t h)
{
	int sign = (h >> (f->man_bits + f->exp_bits)) & 1;
	int e = (h >> f->man_bits) & ((1 << f->exp_bits) - 1);
	uint32_t m = h & ((1u << f->man_bits) - 1u);
	int bias = f->emax;
	double v;
	if (e == (1 << f->exp_bits) - 1)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp((double)m, f->emin - f->man_bits);
	else
		v = ldexp((double)(m | (1u << f->man_bits)), e - bias - f->man_bits);
	return sign ? -v : v;
}

/* x rounded to nearest even in format f (as a double; NaN for NaN). */
static inline double half_ref_round(const half_fmt *f, float x)
{
	if (isnan(x))
		return NAN;
	if (isinf(x) || x == 0)
		return (double)x;
	double a = fabs((double)x);
	int e;
	frexp(a, &e);                     /* a = m * 2^e, m in [0.5, 1) */
	int lead = e - 1 < f->emin ? f->emin : e - 1;
	double q = ldexp(1.0, lead - f->man_bits);
	double r = nearbyint(a / q) * q;  /* a / q is exact: q is a power of 2 */
	if (r >= ldexp(1.0, f->emax + 1))
		r = INFINITY;
	return copysign(r, (double)x);
}

/* One probe: an input and, for the boundary probes, the pattern the
 * construction says it rounds to (0xffffffff: none, use the reference). */
typedef struct half_probe {
	float x;
	uint32_t want;
} half_probe;

#define HALF_REF_NONE 0xffffffffu

static int half_ref_push(half_probe *p, size_t *n, double x, uint32_t want)
{
	if ((double)(float)x != x) {
		fprintf(stderr, "half-ref: probe %a is not an f32\n", x);
		return -1;
	}
	p[(*n)++] = (half_probe){(float)x, want};
	return 0;
}

/* The probes of format f: returns a malloc'd array and its length, or NULL
 * (with a message on stderr) when the construction fails.  n_random:
 * random f32 bit patterns added at the end (seeded). */
static half_probe *half_ref_probes(const half_fmt *f, size_t n_random, size_t *ret_n)
{
	uint16_t sign = (uint16_t)(1u << (f->man_bits + f->exp_bits));
	uint16_t max = (uint16_t)(half_ref_exp_mask(f) - 1u);   /* largest finite */
	size_t cap = (size_t)(max + 1u) * 8u + 64u + n_random, n = 0;
	half_probe *p = malloc(cap * sizeof(*p));
	if (!p)
		return NULL;
	for (uint32_t h = 0; h <= max; h++) {
		double v = half_ref_decode(f, (uint16_t)h);
		double up = h < max ? half_ref_decode(f, (uint16_t)(h + 1))
		                    : ldexp(1.0, f->emax + 1);
		double m = 0.5 * (v + up);
		/* the tie goes to the even pattern (h + 1 past max is Inf's) */
		uint32_t even = (h & 1u) ? h + 1 : h;
		for (int s = 0; s < 2; s++) {
			double sg = s ? -1.0 : 1.0;
			uint32_t sb = s ? sign : 0;
			if (half_ref_push(p, &n, sg * v, sb | h) ||
			    half_ref_push(p, &n, sg * m, sb | even) ||
			    half_ref_push(p, &n, sg * (double)nextafterf((float)m, 0.0f), sb | h) ||
			    half_ref_push(p, &n, sg * (double)nextafterf((float)m, INFINITY),
			                  sb | (h + 1)))
				goto fail;
		}
	}
	static const uint32_t special_bits[] = {
		0x00000000u, 0x80000000u,                 /* +-0 */
		0x7f800000u, 0xff800000u,                 /* +-Inf */
		0x7fc00000u, 0xffc00000u,                 /* quiet NaNs */
		0x7f800001u, 0xff800001u,                 /* signalling, payload in the low bits */
		0x7fa00000u, 0x7f810000u, 0x7fbfffffu,    /* signalling, high / mixed payloads */
		0x7fffffffu, 0x7fc00001u,
		0x00000001u, 0x80000001u,                 /* f32 subnormals */
		0x007fffffu, 0x00400000u, 0x00008000u, 0x00018000u,
		0x00800000u,                              /* smallest f32 normal */
		0x7f7fffffu, 0xff7fffffu,                 /* +-FLT_MAX */
		0x7f7f8000u, 0x7f7f7fffu,                 /* bf16's overflow threshold and below */
		0x477ff000u, 0x477fefffu, 0xc77ff000u,    /* f16: 65520 -> Inf, below -> 65504 */
		0x47800000u, 0x4e6e6b28u,                 /* 65536, 1e9 */
		0x33000000u, 0x33000001u, 0x32ffffffu,    /* 2^-25: f16's tie to 0, above, below */
		0x33c00000u, 0x387fe000u, 0x387ff000u,    /* 1.5 * 2^-24; to the smallest normal */
	};
	for (size_t i = 0; i < sizeof(special_bits) / sizeof(special_bits[0]); i++)
		p[n++] = (half_probe){half_ref_float(special_bits[i]), HALF_REF_NONE};
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n_random; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		p[n++] = (half_probe){half_ref_float((uint32_t)(s >> 16)), HALF_REF_NONE};
	}
	/* the reference against the construction */
	for (size_t i = 0; i < n; i++) {
		if (p[i].want == HALF_REF_NONE)
			continue;
		double r = half_ref_round(f, p[i].x), w = half_ref_decode(f, (uint16_t)p[i].want);
		if (r != w || !signbit(r) != !signbit(w)) {
			fprintf(stderr, "half-ref: %s reference rounds %a to %a, the construction says "
			        "%a (0x%04x)\n", f->name, (double)p[i].x, r, w, p[i].want);
			goto fail;
		}
	}
	*ret_n = n;
	return p;
fail:
	free(p);
	return NULL;
}

/* Compare out[i], the conversion of probes[i].x, with the reference: the
 * same value and sign (hence the same bits), or for a NaN input a quiet
 * NaN.  Returns the number of mismatches and describes the first in msg. */
static size_t half_ref_compare(const half_fmt *f, const half_probe *probes, const uint16_t *out,
                               size_t n, char *msg, size_t cap)
{
	size_t bad = 0;
	msg[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		float x = probes[i].x;
		uint16_t o = out[i];
		int ok;
		const char *why = "";
		if (isnan(x)) {
			ok = half_ref_is_quiet(f, o);
			why = half_ref_is_nan(f, o) ? " (a signalling NaN)" : " (not a NaN)";
		} else {
			double r = half_ref_round(f, x), g = half_ref_decode(f, o);
			ok = !half_ref_is_nan(f, o) && g == r && !signbit(g) == !signbit(r);
		}
		if (!ok && bad++ == 0)
			snprintf(msg, cap, "%s: f32 0x%08x (%a) -> 0x%04x (%a)%s, want %a", f->name,
			         half_ref_bits(x), (double)x, o, half_ref_decode(f, o), why,
			         isnan(x) ? NAN : half_ref_round(f, x));
	}
	return bad;
}

#endif
