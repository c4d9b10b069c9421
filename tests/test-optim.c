/* SPDX-License-Identifier: MIT */
/* tests/test-optim.c: SGD and AdamW kernels (core/optim.c).
 *
 * - every option combination against a double-precision implementation of
 *   the published update rules (torch.optim's documented algorithms), step
 *   by step for 25 steps, within a first-order rounding-error bound (see
 *   check_close);
 * - sharded updates (ranges at odd offsets) and the portable kernel give the
 *   same bits as one whole-range update with the vector kernel;
 * - every f16 and bf16 gradient bit pattern converts exactly;
 * - options, configuration keys, groups and argument errors.
 *
 * With `--tool IN OUT` the program instead runs the steps described in IN
 * and writes every step's values to OUT, for tests/optim_torch_check.py,
 * which compares them with torch.optim bit for bit. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "config.h"
#include "backends/common/half.h"
#include "optim.h"

#define U32 0x1p-24   /* unit roundoff of f32 */

/* ---- test data ------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Roughly normal (sum of uniforms), in f32. */
static float rnd(uint64_t *s)
{
	double a = 0;
	for (int i = 0; i < 4; i++)
		a += (double)(splitmix(s) >> 11) * 0x1p-53;
	return (float)((a - 2.0) * 1.7);
}

static size_t dtype_bytes(uint32_t dt)
{
	return dt == ACCEL_DTYPE_F32 ? 4 : 2;
}

/* Gradient element i as the exact f32 the kernel must see before scaling,
 * and the stored form. */
static float store_grad(void *g, uint32_t dt, uint64_t i, float x)
{
	switch (dt) {
	case ACCEL_DTYPE_F32:
		((float *)g)[i] = x;
		return x;
	case ACCEL_DTYPE_BF16:
		((uint16_t *)g)[i] = accel_f32_to_bf16(x);
		return accel_bf16_to_f32(((uint16_t *)g)[i]);
	default:
		((uint16_t *)g)[i] = accel_f32_to_f16(x);
		return accel_f16_to_f32(((uint16_t *)g)[i]);
	}
}

static accel_optim *make(const accel_optim_opts *o)
{
	accel_optim *opt = NULL;
	accel_err err = {0};
	ck_assert_msg(accelp_optim_new(o, &opt, &err) == ACCEL_OK, "%s", err.msg);
	return opt;
}

/* ---- the double-precision reference ------------------------------------------ */

/* Each element carries its reference values and, for the error bound, the
 * same recurrences on absolute values (the magnitude every rounding error
 * of the f32 computation is relative to). */
typedef struct ref_elem {
	double p, m, v;       /* AdamW m, v; SGD m = momentum buffer */
	double sp, sm, sv;    /* magnitudes                          */
} ref_elem;

static void ref_adamw(const accel_optim_opts *o, double wd, uint64_t t, double lr, double g,
                      ref_elem *r)
{
	/* Loshchilov & Hutter's AdamW as torch.optim.AdamW documents it. */
	double bc1 = 1 - pow(o->beta1, (double)t), bc2 = 1 - pow(o->beta2, (double)t);
	r->p *= 1 - lr * wd;
	r->m = o->beta1 * r->m + (1 - o->beta1) * g;
	r->v = o->beta2 * r->v + (1 - o->beta2) * g * g;
	double denom = sqrt(r->v / bc2) + o->eps;
	r->p -= lr * (r->m / bc1) / denom;
	r->sm = o->beta1 * r->sm + (1 - o->beta1) * fabs(g);
	r->sv = r->v;
	r->sp = (1 - lr * wd) * r->sp + lr * (r->sm / bc1) / denom;
}

static void ref_sgd(const accel_optim_opts *o, double wd, uint64_t t, double lr, double g,
                    ref_elem *r)
{
	/* torch.optim.SGD's documented algorithm (momentum with dampening,
	 * Nesterov as in Sutskever et al.). */
	double d = g + wd * r->p, sd = fabs(g) + wd * r->sp;
	if (o->momentum != 0) {
		if (t == 1) {
			r->m = d;
			r->sm = sd;
		} else {
			r->m = o->momentum * r->m + (1 - o->dampening) * d;
			r->sm = o->momentum * r->sm + fabs(1 - o->dampening) * sd;
		}
		if (o->nesterov) {
			d = d + o->momentum * r->m;
			sd = sd + o->momentum * r->sm;
		} else {
			d = r->m;
			sd = r->sm;
		}
	}
	r->p -= lr * d;
	r->sp += lr * sd;
}

/* Error bound.  Within one update each f32 quantity suffers at most 8
 * rounding errors of relative size u = 2^-24 of the magnitudes involved:
 * the hyper-parameters rounded to f32 (beta, 1 - beta, the step size,
 * grad_scale), the gradient's scaling (twice in g * g), each product, the
 * sum, and for AdamW the sqrt, the divisions and eps's addition.  Earlier
 * errors are carried with factors <= 1 (beta, 1 - lr * wd, and the
 * momentum sum is tracked by the magnitude recurrence itself), so after t
 * updates the error is at most 8 * t * u times the quantity's magnitude
 * recurrence.  The check allows twice that, C = 16: 1e-6 of the magnitude
 * after the first update, 2.4e-5 after 25.  The tests print the largest
 * fraction of the bound they saw. */
#define BOUND_C 16.0

static double worst;   /* largest |err| / bound seen (reported) */

static void check_close(const char *what, const char *name, uint64_t t, uint64_t i, float got,
                        double want, double mag)
{
	double bound = BOUND_C * (double)t * U32 * mag;
	double err = fabs((double)got - want);
	if (bound > 0 && err / bound > worst)
		worst = err / bound;
	ck_assert_msg(err <= bound, "%s: %s step %llu element %llu: %.9g, reference %.12g "
	              "(error %.3g > bound %.3g)", what, name, (unsigned long long)t,
	              (unsigned long long)i, got, want, err, bound);
}

/* Run `steps` updates of n elements split over the two groups (elements
 * [0, n/3) in the no_decay group) and compare every element of p and the
 * state with the reference after every step.  lr varies per step (a warm-up
 * followed by a decay, as a schedule gives). */
static void run_vs_reference(const accel_optim_opts *o, uint32_t gdt, double grad_scale,
                             const char *what)
{
	enum { N = 301, STEPS = 25 };
	accel_optim *opt = make(o);
	uint32_t ns = accelp_optim_state_count(opt);
	float *p = calloc(N, sizeof(float));
	float *st[2] = {calloc(N, sizeof(float)), calloc(N, sizeof(float))};
	void *g = malloc(N * 4);
	ref_elem *r = calloc(N, sizeof(*r));
	uint64_t seed = 1234 + gdt;
	accel_err err = {0};
	uint64_t split = N / 3;

	ck_assert(p && st[0] && st[1] && g && r);
	for (uint64_t i = 0; i < N; i++) {
		p[i] = rnd(&seed);
		r[i].p = p[i];
		r[i].sp = fabs(p[i]);
	}
	for (uint64_t t = 1; t <= STEPS; t++) {
		double lr = o->lr * (t < 5 ? (double)t / 5 : 1.0 - 0.02 * (double)t);
		for (uint64_t i = 0; i < N; i++) {
			/* Gradients of mixed scales, a few exact zeros. */
			float x = rnd(&seed) * (i % 7 == 0 ? 1e-3f : 1.0f);
			if (i % 53 == 0)
				x = 0;
			double gx = (double)store_grad(g, gdt, i, x) * grad_scale;
			const accel_optim_group *grp =
				accelp_optim_get_group(opt, i < split ? ACCEL_OPTIM_GROUP_NO_DECAY
				                                     : ACCEL_OPTIM_GROUP_DECAY);
			if (o->type == ACCEL_OPTIM_ADAMW)
				ref_adamw(o, grp->weight_decay, t, lr, gx, &r[i]);
			else
				ref_sgd(o, grp->weight_decay, t, lr, gx, &r[i]);
		}
		float *s0[2] = {st[0], st[1]};
		float *s1[2] = {st[0] + split, st[1] + split};
		size_t gb = dtype_bytes(gdt);
		ck_assert_int_eq(accelp_optim_step_range(
			opt, accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_NO_DECAY), t, lr, p, g, gdt,
			ns ? s0 : NULL, split, grad_scale, &err), ACCEL_OK);
		ck_assert_int_eq(accelp_optim_step_range(
			opt, accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_DECAY), t, lr, p + split,
			(char *)g + split * gb, gdt, ns ? s1 : NULL, N - split, grad_scale, &err),
			ACCEL_OK);
		for (uint64_t i = 0; i < N; i++) {
			check_close(what, "param", t, i, p[i], r[i].p, r[i].sp);
			if (ns >= 1)
				check_close(what, o->type == ACCEL_OPTIM_ADAMW ? "exp_avg" : "momentum",
				            t, i, st[0][i], r[i].m, r[i].sm);
			if (ns >= 2)
				check_close(what, "exp_avg_sq", t, i, st[1][i], r[i].v, r[i].sv);
		}
	}
	free(p);
	free(st[0]);
	free(st[1]);
	free(g);
	free(r);
	accelp_optim_free(opt);
}

static const uint32_t gdtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F16, ACCEL_DTYPE_BF16};
static const double scales[] = {1.0, 0.37};

START_TEST(sgd_vs_double)
{
	static const double moms[] = {0, 0.9}, damps[] = {0, 0.5}, wds[] = {0, 1e-2};
	int cases = 0;
	worst = 0;
	for (size_t a = 0; a < 2; a++)
		for (size_t b = 0; b < 2; b++)
			for (int nest = 0; nest < 2; nest++)
				for (size_t w = 0; w < 2; w++)
					for (size_t d = 0; d < 3; d++)
						for (size_t s = 0; s < 2; s++) {
							if ((damps[b] != 0 && moms[a] == 0) ||
							    (nest && (moms[a] == 0 || damps[b] != 0)))
								continue;
							accel_optim_opts o;
							accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
							o.lr = 0.05;
							o.momentum = moms[a];
							o.dampening = damps[b];
							o.nesterov = nest;
							o.weight_decay = wds[w];
							char what[160];
							snprintf(what, sizeof(what), "sgd momentum %g dampening %g "
							         "nesterov %d wd %g grad %s scale %g", moms[a], damps[b],
							         nest, wds[w], accel_dtype_name(gdtypes[d]), scales[s]);
							run_vs_reference(&o, gdtypes[d], scales[s], what);
							cases++;
						}
	ck_assert_int_eq(cases, 48);
	fprintf(stderr, "sgd: %d option sets x 25 steps, largest error %.3f of the bound\n", cases,
	        worst);
}
END_TEST

START_TEST(adamw_vs_double)
{
	static const double betas[][2] = {{0.9, 0.999}, {0.8, 0.95}};
	static const double epss[] = {1e-8, 1e-3}, wds[] = {0, 1e-2, 0.1};
	int cases = 0;
	worst = 0;
	for (size_t b = 0; b < 2; b++)
		for (size_t e = 0; e < 2; e++)
			for (size_t w = 0; w < 3; w++)
				for (size_t d = 0; d < 3; d++)
					for (size_t s = 0; s < 2; s++) {
						accel_optim_opts o;
						accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
						o.lr = 1e-2;
						o.beta1 = betas[b][0];
						o.beta2 = betas[b][1];
						o.eps = epss[e];
						o.weight_decay = wds[w];
						char what[160];
						snprintf(what, sizeof(what), "adamw betas (%g, %g) eps %g wd %g "
						         "grad %s scale %g", o.beta1, o.beta2, o.eps, o.weight_decay,
						         accel_dtype_name(gdtypes[d]), scales[s]);
						run_vs_reference(&o, gdtypes[d], scales[s], what);
						cases++;
					}
	ck_assert_int_eq(cases, 72);
	fprintf(stderr, "adamw: %d option sets x 25 steps, largest error %.3f of the bound\n", cases,
	        worst);
}
END_TEST

/* ---- bit-level properties ------------------------------------------------------- */

/* Steps over [0, N) whole with the default kernel vs. split into ranges at
 * odd offsets with each kernel: identical bits. */
static void sharded_case(const accel_optim_opts *o, uint32_t gdt)
{
	enum { N = 1000 };
	static const uint64_t cuts[] = {0, 1, 7, 64, 333, 334, 901, N};
	accel_optim *whole = make(o), *part = make(o);
	uint32_t ns = accelp_optim_state_count(whole);
	float *pa = malloc(N * 4), *pb = malloc(N * 4);
	float *sa[2] = {calloc(N, 4), calloc(N, 4)}, *sb[2] = {calloc(N, 4), calloc(N, 4)};
	void *g = malloc(N * 4);
	uint64_t seed = 99;
	accel_err err = {0};
	size_t gb = dtype_bytes(gdt);

	for (uint64_t i = 0; i < N; i++)
		pa[i] = pb[i] = rnd(&seed);
	for (int kern = 0; kern < 2; kern++) {
		ck_assert_int_eq(accelp_optim_set_kernel(part, kern ? "generic" : "auto", &err),
		                 ACCEL_OK);
		for (uint64_t t = 1; t <= 6; t++) {
			for (uint64_t i = 0; i < N; i++)
				store_grad(g, gdt, i, rnd(&seed));
			ck_assert_int_eq(accelp_optim_step_range(whole, NULL, t + 6 * kern, 0.01, pa, g,
			                                        gdt, sa, N, 0.5, &err), ACCEL_OK);
			for (size_t c = 0; c + 1 < sizeof(cuts) / sizeof(cuts[0]); c++) {
				uint64_t a = cuts[c], n = cuts[c + 1] - a;
				float *sp[2] = {sb[0] + a, sb[1] + a};
				ck_assert_int_eq(accelp_optim_step_range(part, NULL, t + 6 * kern, 0.01, pb + a,
				                                        (char *)g + a * gb, gdt,
				                                        ns ? sp : NULL, n, 0.5, &err),
				                 ACCEL_OK);
			}
			ck_assert_msg(!memcmp(pa, pb, N * 4), "%s kernel: sharded params differ at step "
			              "%llu", accelp_optim_get_kernel(part), (unsigned long long)t);
			for (uint32_t k = 0; k < ns; k++)
				ck_assert_msg(!memcmp(sa[k], sb[k], N * 4), "state %u differs", k);
		}
	}
	free(pa);
	free(pb);
	free(sa[0]);
	free(sa[1]);
	free(sb[0]);
	free(sb[1]);
	free(g);
	accelp_optim_free(whole);
	accelp_optim_free(part);
}

START_TEST(sharded_and_kernels_identical)
{
	accel_optim_opts o;
	for (size_t d = 0; d < 3; d++) {
		accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
		sharded_case(&o, gdtypes[d]);
		accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
		o.momentum = 0.9;
		o.nesterov = 1;
		o.weight_decay = 1e-3;
		sharded_case(&o, gdtypes[d]);
		o.nesterov = 0;
		o.dampening = 0.1;
		sharded_case(&o, gdtypes[d]);
		o.momentum = 0;
		o.dampening = 0;
		sharded_case(&o, gdtypes[d]);
	}
}
END_TEST

/* SGD with lr 1 from p = 0 makes p = -g exactly: every f16 and bf16 bit
 * pattern goes through the kernel's conversion (subnormals, inf, NaN). */
START_TEST(every_half_gradient)
{
	enum { N = 65536 };
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
	accel_optim *opt = make(&o);
	uint16_t *g = malloc(N * 2);
	float *p = malloc(N * 4);
	accel_err err = {0};
	for (uint32_t i = 0; i < N; i++)
		g[i] = (uint16_t)i;
	for (int kern = 0; kern < 2; kern++) {
		ck_assert_int_eq(accelp_optim_set_kernel(opt, kern ? "generic" : "auto", &err), ACCEL_OK);
		for (int bf = 0; bf < 2; bf++) {
			memset(p, 0, N * 4);
			ck_assert_int_eq(accelp_optim_step_range(opt, NULL, 1, 1.0, p, g,
			                                        bf ? ACCEL_DTYPE_BF16 : ACCEL_DTYPE_F16,
			                                        NULL, N, 1.0, &err), ACCEL_OK);
			for (uint32_t i = 0; i < N; i++) {
				float want = bf ? accel_bf16_to_f32((uint16_t)i) : accel_f16_to_f32((uint16_t)i);
				if (isnan(want)) {
					ck_assert_msg(isnan(p[i]), "%s 0x%04x: %g, want NaN", bf ? "bf16" : "f16",
					              i, p[i]);
					continue;
				}
				/* 0 + (-1) * g: -g, except that g = +-0 gives +0. */
				float neg = want == 0 ? 0.0f : -want;
				ck_assert_msg(accel_f32_bits(p[i]) == accel_f32_bits(neg),
				              "%s 0x%04x (%s kernel): %a, want %a", bf ? "bf16" : "f16", i,
				              accelp_optim_get_kernel(opt), p[i], neg);
			}
		}
	}
	free(g);
	free(p);
	accelp_optim_free(opt);
}
END_TEST

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* With flush-to-zero and denormals-are-zero on (as -ffast-math programs
 * and torch.set_flush_denormal(True) set them), f16 subnormal gradients
 * still convert exactly: they are normal f32 numbers. */
START_TEST(f16_subnormals_under_daz)
{
	enum { N = 2048 };
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
	accel_optim *opt = make(&o);
	uint16_t g[N];
	float p[N];
	accel_err err = {0};
	_mm_setcsr(_mm_getcsr() | 0x8040);   /* FTZ | DAZ; Check forks each test */
	for (uint32_t i = 0; i < N; i++)
		g[i] = (uint16_t)(i < 1024 ? i : 0x8000 | (i - 1024));   /* +- subnormals */
	for (int kern = 0; kern < 2; kern++) {
		memset(p, 0, sizeof(p));
		ck_assert_int_eq(accelp_optim_set_kernel(opt, kern ? "generic" : "auto", &err), ACCEL_OK);
		ck_assert_int_eq(accelp_optim_step_range(opt, NULL, 1, 1.0, p, g, ACCEL_DTYPE_F16, NULL,
		                                        N, 1.0, &err), ACCEL_OK);
		for (uint32_t i = 1; i < N; i++) {
			if (i == 1024)
				continue;
			float want = -accel_f16_to_f32(g[i]);
			ck_assert_msg(p[i] == want && p[i] != 0, "f16 0x%04x (%s kernel): %a, want %a",
			              g[i], accelp_optim_get_kernel(opt), p[i], want);
		}
	}
	accelp_optim_free(opt);
}
END_TEST
#endif

START_TEST(nonfinite_propagates)
{
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	accel_optim *opt = make(&o);
	float p[3] = {1, 2, 3}, g[3] = {NAN, INFINITY, 1}, m[3] = {0}, v[3] = {0};
	float *st[2] = {m, v};
	accel_err err = {0};
	ck_assert_int_eq(accelp_optim_step_range(opt, NULL, 1, 1e-3, p, g, ACCEL_DTYPE_F32, st, 3,
	                                        1.0, &err), ACCEL_OK);
	ck_assert(isnan(p[0]) && isnan(m[0]) && isnan(v[0]));
	ck_assert(isnan(p[1]));   /* inf / inf */
	ck_assert(isfinite(p[2]));
	/* A NaN grad_scale (clipping an overflowed norm) poisons everything. */
	ck_assert_int_eq(accelp_optim_step_range(opt, NULL, 2, 1e-3, p + 2, g + 2, ACCEL_DTYPE_F32,
	                                        (float *[]){m + 2, v + 2}, 1, NAN, &err), ACCEL_OK);
	ck_assert(isnan(p[2]));
	accelp_optim_free(opt);
}
END_TEST

/* One known step worked by hand: AdamW's first step moves every element by
 * lr * sign(g) (times g/(|g| + eps*...)), after the decoupled decay. */
START_TEST(adamw_first_step_by_hand)
{
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	o.eps = 0;
	accel_optim *opt = make(&o);
	float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, -3.0f}, m[2] = {0}, v[2] = {0};
	accel_err err = {0};
	ck_assert_int_eq(accelp_optim_step_range(opt, NULL, 1, 0.1, p, g, ACCEL_DTYPE_F32,
	                                        (float *[]){m, v}, 2, 1.0, &err), ACCEL_OK);
	/* p * (1 - 0.1 * 0.01) - 0.1 * sign(g) */
	ck_assert_float_eq_tol(p[0], 1.0f * 0.999f - 0.1f, 1e-6);
	ck_assert_float_eq_tol(p[1], -2.0f * 0.999f + 0.1f, 1e-6);
	ck_assert_float_eq_tol(m[0], 0.05f, 1e-8);
	ck_assert_float_eq_tol(v[1], 0.009f, 1e-9);
	accelp_optim_free(opt);
}
END_TEST

/* ---- options, config, groups, errors ---------------------------------------------- */

/* Does this CPU run the AVX2+FMA kernel?  Asked independently of
 * core/optim.c (which must agree). */
static int cpu_has_avx2_fma(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return 0;
#endif
}

START_TEST(options_and_names)
{
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	ck_assert_double_eq(o.lr, 1e-3);
	ck_assert_double_eq(o.beta1, 0.9);
	ck_assert_double_eq(o.beta2, 0.999);
	ck_assert_double_eq(o.eps, 1e-8);
	ck_assert_double_eq(o.weight_decay, 1e-2);
	accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
	ck_assert_double_eq(o.weight_decay, 0);
	ck_assert_double_eq(o.momentum, 0);
	ck_assert_int_eq(accelp_optim_type_parse("adamw"), ACCEL_OPTIM_ADAMW);
	ck_assert_int_eq(accelp_optim_type_parse("sgd"), ACCEL_OPTIM_SGD);
	ck_assert_int_eq(accelp_optim_type_parse("adam"), -1);
	ck_assert_int_eq(accelp_optim_type_parse(NULL), -1);
	ck_assert_str_eq(accelp_optim_type_name(ACCEL_OPTIM_SGD), "sgd");
	ck_assert_ptr_null(accelp_optim_type_name(7));

	accel_optim *opt = make(&o);
	ck_assert_uint_eq(accelp_optim_state_count(opt), 0);
	opt = accelp_optim_free(opt);
	ck_assert_ptr_null(opt);
	o.momentum = 0.5;
	opt = make(&o);
	ck_assert_uint_eq(accelp_optim_state_count(opt), 1);
	ck_assert_ptr_null(accelp_optim_get_group(opt, ACCEL_OPTIM_N_GROUPS));
	ck_assert_double_eq(accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_NO_DECAY)->weight_decay, 0);
	/* Without configuration there are no no_decay suffixes. */
	ck_assert_uint_eq(accelp_optim_group_of(opt, "fc.bias"), ACCEL_OPTIM_GROUP_DECAY);
	accelp_optim_free(opt);
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	opt = make(&o);
	ck_assert_uint_eq(accelp_optim_state_count(opt), 2);
	ck_assert_double_eq(accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_DECAY)->weight_decay, 1e-2);
	ck_assert_uint_eq(accelp_optim_state_count(NULL), 0);
	ck_assert_ptr_null(accelp_optim_free(NULL));

	/* Kernel choice: on an x86-64 CPU with AVX2 and FMA the vector kernel
	 * is the one selected (the torch bit-identity check relies on it),
	 * anywhere else the portable one, and asking for avx2-fma is refused. */
	accel_err err = {0};
	int vec = cpu_has_avx2_fma();
	ck_assert_str_eq(accelp_optim_get_kernel(opt), vec ? "avx2-fma" : "generic");
	ck_assert_int_eq(accelp_optim_set_kernel(opt, "generic", &err), ACCEL_OK);
	ck_assert_str_eq(accelp_optim_get_kernel(opt), "generic");
	ck_assert_int_eq(accelp_optim_set_kernel(opt, "auto", &err), ACCEL_OK);
	ck_assert_str_eq(accelp_optim_get_kernel(opt), vec ? "avx2-fma" : "generic");
	int rc = accelp_optim_set_kernel(opt, "avx2-fma", &err);
	ck_assert_int_eq(rc, vec ? ACCEL_OK : ACCEL_ERR_UNSUPPORTED);
	if (!vec)
		ck_assert_msg(strstr(err.msg, "avx2-fma") != NULL, "%s", err.msg);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_optim_set_kernel(opt, "sse9", &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "sse9"));
	accelp_optim_free(opt);
}
END_TEST

START_TEST(bad_options)
{
	const struct {
		uint32_t type;
		double lr, b1, b2, eps, wd, mom, damp;
		int nest;
		const char *want;
	} cases[] = {
		{ACCEL_OPTIM_ADAMW, -1, 0.9, 0.999, 1e-8, 0, 0, 0, 0, "lr"},
		{ACCEL_OPTIM_ADAMW, NAN, 0.9, 0.999, 1e-8, 0, 0, 0, 0, "lr"},
		{ACCEL_OPTIM_ADAMW, 1e-3, 1.0, 0.999, 1e-8, 0, 0, 0, 0, "beta1 and beta2"},
		{ACCEL_OPTIM_ADAMW, 1e-3, 0.9, -0.1, 1e-8, 0, 0, 0, 0, "beta1 and beta2"},
		{ACCEL_OPTIM_ADAMW, 1e-3, 0.9, 0.999, -1, 0, 0, 0, 0, "eps"},
		{ACCEL_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, -0.1, 0, 0, 0, "weight_decay"},
		{ACCEL_OPTIM_SGD, 1e-3, 0, 0, 0, 0, -0.5, 0, 0, "momentum"},
		{ACCEL_OPTIM_SGD, 1e-3, 0, 0, 0, 0, 0, 0, 1, "nesterov needs momentum > 0"},
		{ACCEL_OPTIM_SGD, 1e-3, 0, 0, 0, 0, 0.9, 0.1, 1, "dampening = 0"},
		{ACCEL_OPTIM_SGD, 1e-3, 0, 0, 0, 0, 0.9, INFINITY, 0, "dampening"},
		{5, 1e-3, 0, 0, 0, 0, 0, 0, 0, "type 5"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		accel_optim_opts o;
		accelp_optim_opts_init(&o, cases[i].type);
		o.lr = cases[i].lr;
		o.beta1 = cases[i].b1;
		o.beta2 = cases[i].b2;
		o.eps = cases[i].eps;
		o.weight_decay = cases[i].wd;
		o.momentum = cases[i].mom;
		o.dampening = cases[i].damp;
		o.nesterov = cases[i].nest;
		accel_err err = {0};
		accel_optim *opt = (accel_optim *)&err;
		ck_assert_int_eq(accelp_optim_new(&o, &opt, &err), ACCEL_ERR_INVALID_ARG);
		ck_assert_ptr_eq(opt, (accel_optim *)&err);   /* untouched on failure */
		ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i,
		              err.msg, cases[i].want);
	}
	accel_err err = {0};
	accel_optim *opt = NULL;
	accel_optim_opts o = {0};
	ck_assert_int_eq(accelp_optim_new(&o, &opt, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "struct_size"));
	ck_assert_int_eq(accelp_optim_new(NULL, &opt, NULL), ACCEL_ERR_INVALID_ARG);
}
END_TEST

START_TEST(step_errors)
{
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	accel_optim *opt = make(&o);
	float p[4] = {0}, g[4] = {0}, m[4] = {0}, v[4] = {0};
	float *st[2] = {m, v}, *st_null[2] = {m, NULL}, *st_alias[2] = {m, m}, *st_p[2] = {p, v};
	const struct {
		uint64_t t;
		double lr;
		float *p;
		const void *g;
		uint32_t dt;
		float **st;
		const char *want;
	} cases[] = {
		{0, 1e-3, p, g, ACCEL_DTYPE_F32, st, "t is 0"},
		{1, -1, p, g, ACCEL_DTYPE_F32, st, "learning rate -1"},
		{1, INFINITY, p, g, ACCEL_DTYPE_F32, st, "learning rate inf"},
		{1, 1e-3, p, g, ACCEL_DTYPE_I32, st, "gradient dtype i32"},
		{1, 1e-3, p, g, 99, st, "gradient dtype unknown (99)"},
		{1, 1e-3, NULL, g, ACCEL_DTYPE_F32, st, "parameter is NULL"},
		{1, 1e-3, p, NULL, ACCEL_DTYPE_F32, st, "gradient is NULL"},
		{1, 1e-3, p, g, ACCEL_DTYPE_F32, NULL, "needs 2 state arrays"},
		{1, 1e-3, p, g, ACCEL_DTYPE_F32, st_null, "state[1] is NULL"},
		{1, 1e-3, p, g, ACCEL_DTYPE_F32, st_alias, "state[1] is the same array as the state[0]"},
		{1, 1e-3, p, g, ACCEL_DTYPE_F32, st_p, "state[0] is the same array as the parameters"},
		{1, 1e-3, p, p, ACCEL_DTYPE_F32, st, "parameters and gradients are the same"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		accel_err err = {0};
		ck_assert_int_eq(accelp_optim_step_range(opt, NULL, cases[i].t, cases[i].lr, cases[i].p,
		                                        cases[i].g, cases[i].dt, cases[i].st, 4, 1.0,
		                                        &err), ACCEL_ERR_INVALID_ARG);
		ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i,
		              err.msg, cases[i].want);
	}
	/* An empty range needs no arrays; NULL optim is refused. */
	ck_assert_int_eq(accelp_optim_step_range(opt, NULL, 1, 1e-3, NULL, NULL, ACCEL_DTYPE_F32,
	                                        NULL, 0, 1.0, NULL), ACCEL_OK);
	ck_assert_int_eq(accelp_optim_step_range(NULL, NULL, 1, 1e-3, p, g, ACCEL_DTYPE_F32, st, 4,
	                                        1.0, NULL), ACCEL_ERR_INVALID_ARG);
	accel_optim_group bad = {.weight_decay = -1};
	accel_err err = {0};
	ck_assert_int_eq(accelp_optim_step_range(opt, &bad, 1, 1e-3, p, g, ACCEL_DTYPE_F32, st, 4,
	                                        1.0, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "weight_decay"));
	accelp_optim_free(opt);
}
END_TEST

static accel_config *config_from(const char *json, accel_err *err)
{
	accel_config *cfg = NULL;
	if (accelp_config_new(&cfg, err) != ACCEL_OK)
		return NULL;
	if (accelp_config_load_string(cfg, json, "test.json", err) != ACCEL_OK ||
	    accelp_config_resolve(cfg, err) != ACCEL_OK)
		return accelp_config_free(cfg);
	return cfg;
}

START_TEST(from_config)
{
	accel_err err = {0};
	accel_optim *opt = NULL;
	accel_config *cfg = config_from("{}", &err);
	ck_assert_msg(cfg != NULL, "%s", err.msg);
	ck_assert_msg(accelp_optim_new_from_config(cfg, &opt, &err) == ACCEL_OK, "%s", err.msg);
	const accel_optim_opts *o = accelp_optim_get_opts(opt);
	ck_assert_uint_eq(o->type, ACCEL_OPTIM_ADAMW);
	ck_assert_double_eq(o->lr, 1e-3);
	ck_assert_double_eq(o->beta1, 0.9);
	ck_assert_double_eq(o->beta2, 0.999);
	ck_assert_double_eq(o->eps, 1e-8);
	ck_assert_double_eq(o->weight_decay, 1e-2);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "x.bias"), ACCEL_OPTIM_GROUP_DECAY);
	opt = accelp_optim_free(opt);
	accelp_config_free(cfg);

	cfg = config_from("{\"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 3e-4, "
	                  "\"betas\": [0.8, 0.95], \"eps\": 1e-6, \"weight_decay\": 0.1}, "
	                  "\"no_decay\": [\"bias\", \"norm.weight\", \"\"]}}", &err);
	ck_assert_msg(cfg != NULL, "%s", err.msg);
	ck_assert_msg(accelp_optim_new_from_config(cfg, &opt, &err) == ACCEL_OK, "%s", err.msg);
	o = accelp_optim_get_opts(opt);
	ck_assert_double_eq(o->lr, 3e-4);
	ck_assert_double_eq(o->beta1, 0.8);
	ck_assert_double_eq(o->beta2, 0.95);
	ck_assert_double_eq(o->eps, 1e-6);
	ck_assert_double_eq(accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_DECAY)->weight_decay, 0.1);
	ck_assert_double_eq(accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_NO_DECAY)->weight_decay, 0);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "fc0.bias"), ACCEL_OPTIM_GROUP_NO_DECAY);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "bias"), ACCEL_OPTIM_GROUP_NO_DECAY);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "ln.norm.weight"), ACCEL_OPTIM_GROUP_NO_DECAY);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "fc0.weight"), ACCEL_OPTIM_GROUP_DECAY);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "bias_proj.weight"), ACCEL_OPTIM_GROUP_DECAY);
	ck_assert_uint_eq(accelp_optim_group_of(opt, "ias"), ACCEL_OPTIM_GROUP_DECAY);
	ck_assert_uint_eq(accelp_optim_group_of(opt, NULL), ACCEL_OPTIM_GROUP_DECAY);
	opt = accelp_optim_free(opt);
	accelp_config_free(cfg);

	cfg = config_from("{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": 0.1, "
	                  "\"momentum\": 0.9, \"nesterov\": true}}}", &err);
	ck_assert_msg(cfg != NULL, "%s", err.msg);
	ck_assert_msg(accelp_optim_new_from_config(cfg, &opt, &err) == ACCEL_OK, "%s", err.msg);
	o = accelp_optim_get_opts(opt);
	ck_assert_uint_eq(o->type, ACCEL_OPTIM_SGD);
	ck_assert_double_eq(o->lr, 0.1);
	ck_assert_double_eq(o->momentum, 0.9);
	ck_assert_double_eq(o->dampening, 0);
	ck_assert_int_eq(o->nesterov, 1);
	ck_assert_double_eq(o->weight_decay, 0);   /* the sgd default */
	ck_assert_uint_eq(accelp_optim_state_count(opt), 1);
	opt = accelp_optim_free(opt);
	accelp_config_free(cfg);

	/* The configuration refuses what the optimizer cannot do; the message
	 * names the key. */
	accelp_err_clear(&err);
	cfg = config_from("{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"nesterov\": true}}}",
	                  &err);
	if (cfg) {
		ck_assert_int_eq(accelp_optim_new_from_config(cfg, &opt, &err), ACCEL_ERR_CONFIG);
		accelp_config_free(cfg);
	}
	ck_assert_ptr_nonnull(strstr(err.msg, "nesterov"));
	ck_assert_int_eq(accelp_optim_new_from_config(NULL, &opt, NULL), ACCEL_ERR_INVALID_ARG);
}
END_TEST

/* ---- tool mode (tests/optim_torch_check.py) -----------------------------------------
 * IN: one text line of key=value words (type beta1 beta2 eps wd momentum
 * dampening nesterov gdtype scale n0 n1 steps splits kernel), then p0 as
 * n0 + n1 f32, steps f64 learning rates, steps gradients of n0 + n1 elements
 * of gdtype.  Elements [0, n0) are in the decay group, stepped as `splits`
 * ranges; [n0, n0 + n1) in the no_decay group.  OUT: after every step, p and
 * then each state array (n0 + n1 f32 each). */

static int tool(const char *in_path, const char *out_path)
{
	FILE *in = fopen(in_path, "rb"), *out = NULL;
	char line[1024], *save = NULL, kernel[32] = "auto";
	accel_optim_opts o;
	accel_optim *opt = NULL;
	accel_err err = {0};
	uint32_t gdt = ACCEL_DTYPE_F32;
	double scale = 1;
	unsigned long long n0 = 0, n1 = 0, steps = 0, splits = 1;
	float *p = NULL, *st[2] = {NULL, NULL};
	double *lrs = NULL;
	void *g = NULL;
	int rc = 1;

	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	if (!in || !fgets(line, sizeof(line), in)) {
		fprintf(stderr, "optim tool: cannot read %s\n", in_path);
		goto done;
	}
	for (char *w = strtok_r(line, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
		char *eq = strchr(w, '=');
		if (!eq) {
			fprintf(stderr, "optim tool: bad word '%s'\n", w);
			goto done;
		}
		*eq++ = '\0';
		if (!strcmp(w, "type"))
			o.type = (uint32_t)accelp_optim_type_parse(eq);
		else if (!strcmp(w, "beta1"))
			o.beta1 = strtod(eq, NULL);
		else if (!strcmp(w, "beta2"))
			o.beta2 = strtod(eq, NULL);
		else if (!strcmp(w, "eps"))
			o.eps = strtod(eq, NULL);
		else if (!strcmp(w, "wd"))
			o.weight_decay = strtod(eq, NULL);
		else if (!strcmp(w, "momentum"))
			o.momentum = strtod(eq, NULL);
		else if (!strcmp(w, "dampening"))
			o.dampening = strtod(eq, NULL);
		else if (!strcmp(w, "nesterov"))
			o.nesterov = atoi(eq);
		else if (!strcmp(w, "gdtype"))
			gdt = accel_dtype_parse(eq);
		else if (!strcmp(w, "scale"))
			scale = strtod(eq, NULL);
		else if (!strcmp(w, "n0"))
			n0 = strtoull(eq, NULL, 10);
		else if (!strcmp(w, "n1"))
			n1 = strtoull(eq, NULL, 10);
		else if (!strcmp(w, "steps"))
			steps = strtoull(eq, NULL, 10);
		else if (!strcmp(w, "splits"))
			splits = strtoull(eq, NULL, 10);
		else if (!strcmp(w, "kernel"))
			snprintf(kernel, sizeof(kernel), "%s", eq);
		else {
			fprintf(stderr, "optim tool: unknown key '%s'\n", w);
			goto done;
		}
	}
	if (accelp_optim_new(&o, &opt, &err) || accelp_optim_set_kernel(opt, kernel, &err)) {
		fprintf(stderr, "optim tool: %s\n", err.msg);
		goto done;
	}
	/* the kernel "auto" resolved to, for optim_torch_check.py */
	printf("kernel %s\n", accelp_optim_get_kernel(opt));
	uint64_t n = n0 + n1;
	size_t gb = dtype_bytes(gdt);
	uint32_t ns = accelp_optim_state_count(opt);
	if (!splits || splits > n0 + 1 || n > (1u << 26) || !steps || !accel_dtype_name(gdt)) {
		fprintf(stderr, "optim tool: bad sizes or gradient dtype\n");
		goto done;
	}
	p = malloc(n * 4 + 4);
	st[0] = calloc(n + 1, 4);
	st[1] = calloc(n + 1, 4);
	lrs = malloc(steps * sizeof(double));
	g = malloc(n * gb + 4);
	out = fopen(out_path, "wb");
	if (!p || !st[0] || !st[1] || !lrs || !g || !out ||
	    fread(p, 4, n, in) != n || fread(lrs, sizeof(double), steps, in) != steps) {
		fprintf(stderr, "optim tool: short input or out of memory\n");
		goto done;
	}
	for (uint64_t t = 1; t <= steps; t++) {
		if (fread(g, gb, n, in) != n) {
			fprintf(stderr, "optim tool: short gradients at step %llu\n", (unsigned long long)t);
			goto done;
		}
		for (uint64_t s = 0; s < splits; s++) {
			uint64_t a = n0 * s / splits, b = n0 * (s + 1) / splits;
			float *sp[2] = {st[0] + a, st[1] + a};
			if (accelp_optim_step_range(opt, accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_DECAY),
			                           t, lrs[t - 1], p + a, (char *)g + a * gb, gdt,
			                           ns ? sp : NULL, b - a, scale, &err))
				goto fail;
		}
		float *sp[2] = {st[0] + n0, st[1] + n0};
		if (accelp_optim_step_range(opt, accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_NO_DECAY),
		                           t, lrs[t - 1], p + n0, (char *)g + n0 * gb, gdt,
		                           ns ? sp : NULL, n1, scale, &err))
			goto fail;
		fwrite(p, 4, n, out);
		for (uint32_t k = 0; k < ns; k++)
			fwrite(st[k], 4, n, out);
	}
	if (fflush(out) == 0)
		rc = 0;
	goto done;
fail:
	fprintf(stderr, "optim tool: %s\n", err.msg);
done:
	if (in)
		fclose(in);
	if (out)
		fclose(out);
	free(p);
	free(st[0]);
	free(st[1]);
	free(lrs);
	free(g);
	accelp_optim_free(opt);
	return rc;
}

static Suite *optim_suite(void)
{
	Suite *s = suite_create("optim");
	TCase *tc = tcase_create("arithmetic");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, sgd_vs_double);
	tcase_add_test(tc, adamw_vs_double);
	tcase_add_test(tc, adamw_first_step_by_hand);
	tcase_add_test(tc, sharded_and_kernels_identical);
	tcase_add_test(tc, every_half_gradient);
#if defined(__x86_64__) || defined(__i386__)
	tcase_add_test(tc, f16_subnormals_under_daz);
#endif
	tcase_add_test(tc, nonfinite_propagates);
	suite_add_tcase(s, tc);
	tc = tcase_create("api");
	tcase_add_test(tc, options_and_names);
	tcase_add_test(tc, bad_options);
	tcase_add_test(tc, step_errors);
	tcase_add_test(tc, from_config);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--tool"))
		return tool(argv[2], argv[3]) ? EXIT_FAILURE : EXIT_SUCCESS;
	SRunner *sr = srunner_create(optim_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
