/* SPDX-License-Identifier: MIT */
/*
 * tests/progs/scaler-trace.c: drives accel_step with scripted gradients,
 * finite and not, and checks the loss scaler step by step against the rule
 * computed here, independently of the plugin (tests/test-scaler.sh).
 *
 *   scaler-trace --script S [--start K] [--stop K] [--saved-world N]
 *                [--save DIR] [--load DIR] [--dtype f32|f16]
 *
 * One character of S per optimizer step:
 *   .  every gradient finite
 *   i  +Inf in one element, on the last rank only
 *   n  NaN in one element, on the last rank only
 *   I  -Inf on every rank, each rank in another element
 * With gradient_accumulation_steps > 1 the non-finite value goes into the
 * last micro-step only.  --start K runs S from step K (after --load of a
 * checkpoint saved at step K by --saved-world ranks), --stop K stops before
 * step K (then --save).  --dtype f16 registers f16 weights with f16
 * gradients (at one rank): scale × gradient then overflows f16 by itself
 * when the scale is too large (|x| >= 65520 rounds to Inf), the case a
 * loss scaler exists for, and the reference counts those elements too.
 *
 * The model: two units of one f32 parameter each (a.w 6 elements, b.w 10),
 * SGD with lr 0.25 and no momentum (config), so the update is
 * w -= lr * mean gradient.  Every value involved is a short dyadic
 * fraction and every scale a power of two (the test's configs keep
 * growth_factor and backoff_factor powers of two), so the expected weights
 * are exact: the test asserts bitwise equality, which also shows the
 * unscaled update equals an unscaled run's (the scale folded out exactly).
 *
 * The reference rule, per step: found_inf = some element non-finite; the
 * step is skipped when found_inf (enabled); the scale then follows
 * DeepSpeed's DynamicLossScaler formulation (iteration counting since the
 * last overflow, hysteresis, floor), which for hysteresis 1 and floor 0 is
 * torch GradScaler's rule, with torch's f32 scale arithmetic.
 *
 * Rank 0 prints one line per step:
 *   step S script C scale X skipped K next Y applied N nonfinite F
 * Exit status: 0 ok, 1 accel error, 2 usage, 3 mismatch (named on stderr).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "half.h"

#define NP 2
static const int numel[NP] = {6, 10};
static const char *const pname[NP] = {"a.w", "b.w"};
static const char *const uname[NP] = {"a", "b"};
#define NTOT 16
#define LR 0.25

static accel_ctx *ctx;
static int f16;   /* --dtype f16 */

/* What the program stores into a gradient or weight of the working dtype. */
static float rnd(double x)
{
	return f16 ? accel_f16_to_f32(accel_f32_to_f16((float)x)) : (float)x;
}

/* The reference's settings, read from the resolved config. */
typedef struct ref_cfg {
	int32_t enabled, dynamic, consecutive;
	double init, growth, backoff, floor;
	int64_t interval, hysteresis;
} ref_cfg;

typedef struct ref {
	float scale;
	long iter, last_overflow;  /* DeepSpeed's cur_iter, last_overflow_iter */
	long hysteresis;           /* DeepSpeed's cur_hysteresis              */
	long applied;
	double w[NTOT];
} ref;

static int fail(const char *what)
{
	fprintf(stderr, "scaler-trace: %s: %s\n", what, accel_errmsg(ctx));
	return 1;
}

/* True gradient of element e (flat over a.w, b.w) on rank r, micro-step g
 * of step s: a small dyadic value. */
static double grad_of(long s, int e, int r, int g)
{
	return (double)((s % 5) + 1 + e % 3 + r + 2 * g) / 8.0;
}

/* The non-finite element rank r writes at step s (script c, micro-step g
 * of gas), or -1; *ret_v its value. */
static int bad_elem(char c, int r, int world, int g, int gas, double *ret_v)
{
	if (g != gas - 1)
		return -1;
	if ((c == 'i' || c == 'n') && r == world - 1) {
		*ret_v = c == 'i' ? INFINITY : NAN;
		return NTOT - 1;   /* b.w's last element: the last shard under zero */
	}
	if (c == 'I') {
		*ret_v = -INFINITY;
		return r * 11 % NTOT; /* rank 0: a.w, rank 1: b.w */
	}
	return -1;
}


static double w0(int e)
{
	return (double)(e + 1) / 4.0;
}

/* One step of the reference: the gradients as the program accumulates
 * them (scaled, in the working dtype) and as the ranks' mean; found_inf
 * and the count of non-finite elements; the weights; the scale. */
static void ref_step(const ref_cfg *c, ref *R, long s, char ch, int world, int gas,
                     int *ret_skip, long *ret_nonfinite)
{
	double scale = c->enabled ? (double)R->scale : 1.0, mean[NTOT];
	long nonfinite = 0;
	for (int e = 0; e < NTOT; e++) {
		double sum = 0;
		for (int r = 0; r < world; r++) {
			double acc = 0;
			for (int g = 0; g < gas; g++) {
				double v;
				int be = bad_elem(ch, r, world, g, gas, &v);
				acc = rnd(acc + rnd(scale * (be == e ? v : grad_of(s, e, r, g))));
			}
			sum += acc;
		}
		mean[e] = sum / (double)world;
		nonfinite += !isfinite(mean[e]);
	}
	int found = nonfinite > 0;
	int skip = c->enabled && found;
	if (!skip) {
		for (int e = 0; e < NTOT; e++)
			R->w[e] -= LR * (mean[e] / (scale * (double)gas));
		R->applied++;
	}
	*ret_skip = skip;
	*ret_nonfinite = nonfinite;
	if (!c->enabled || !c->dynamic)
		return;
	/* DeepSpeed's DynamicLossScaler.update_scale, with torch's f32 scale */
	if (found) {
		if (c->hysteresis == 1 || R->hysteresis == 1) {
			double next = (double)R->scale * c->backoff;
			R->scale = (float)(next > c->floor ? next : c->floor);
		} else {
			R->hysteresis--;
		}
		R->last_overflow = R->iter;
	} else {
		if (c->consecutive)
			R->hysteresis = (long)c->hysteresis;
		if ((R->iter - R->last_overflow) % c->interval == 0) {
			if (!c->consecutive)
				R->hysteresis = (long)c->hysteresis;
			float f = (float)((double)R->scale * c->growth);
			if (isfinite(f))
				R->scale = f;
		}
	}
	R->iter++;
}

static int same(double a, double b)
{
	return a == b || (isnan(a) && isnan(b));
}

static int check_weights(const ref *R, int rank, long s, const char *when)
{
	int e = 0;
	for (int p = 0; p < NP; p++) {
		const void *w = accel_param_data(ctx, (uint32_t)p);
		if (!w) {
			fprintf(stderr, "scaler-trace: rank %d: no data for %s\n", rank, pname[p]);
			return 3;
		}
		for (int i = 0; i < numel[p]; i++, e++) {
			double got = f16 ? (double)accel_f16_to_f32(((const uint16_t *)w)[i])
			                 : (double)((const float *)w)[i];
			/* f16: the working copy of the f32 master; the values stay exact */
			if (!same(got, f16 ? (double)rnd(R->w[e]) : R->w[e])) {
				fprintf(stderr, "scaler-trace: rank %d step %ld (%s): %s[%d] = %.9g, expected "
				        "%.9g\n", rank, s, when, pname[p], i, got, R->w[e]);
				return 3;
			}
		}
	}
	return 0;
}

static int read_cfg(ref_cfg *c)
{
	*c = (ref_cfg){1, 1, 0, 65536, 2, 0.5, 0, 2000, 1};
	if (accel_config_bool(ctx, "scaler.enabled", &c->enabled) ||
	    accel_config_bool(ctx, "scaler.dynamic", &c->dynamic) ||
	    accel_config_bool(ctx, "scaler.consecutive_hysteresis", &c->consecutive) ||
	    accel_config_double(ctx, "scaler.init_scale", &c->init) ||
	    accel_config_double(ctx, "scaler.growth_factor", &c->growth) ||
	    accel_config_double(ctx, "scaler.backoff_factor", &c->backoff) ||
	    accel_config_double(ctx, "scaler.min_loss_scale", &c->floor) ||
	    accel_config_int(ctx, "scaler.growth_interval", &c->interval) ||
	    accel_config_int(ctx, "scaler.hysteresis", &c->hysteresis))
		return fail("reading the scaler's config");
	if (c->hysteresis > 1 && c->growth * c->backoff != 1) {
		fprintf(stderr, "scaler-trace: DeepSpeed's rule (hysteresis > 1) has one "
		        "scale_factor: use growth_factor = 1 / backoff_factor\n");
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *script = NULL, *save = NULL, *load = NULL;
	long start = 0, stop = -1;
	int saved_world = 0, r = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--script") && i + 1 < argc)
			script = argv[++i];
		else if (!strcmp(argv[i], "--start") && i + 1 < argc)
			start = atol(argv[++i]);
		else if (!strcmp(argv[i], "--stop") && i + 1 < argc)
			stop = atol(argv[++i]);
		else if (!strcmp(argv[i], "--saved-world") && i + 1 < argc)
			saved_world = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--save") && i + 1 < argc)
			save = argv[++i];
		else if (!strcmp(argv[i], "--load") && i + 1 < argc)
			load = argv[++i];
		else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
			f16 = !strcmp(argv[++i], "f16");
		else
			script = NULL, i = argc;
	}
	if (!script || !*script || start < 0 || (load && !saved_world) || (start && !load)) {
		fprintf(stderr, "usage: scaler-trace --script [.inI]+ [--start K --load DIR "
		        "--saved-world N] [--stop K] [--save DIR] [--dtype f32|f16]\n");
		return 2;
	}
	long n = (long)strlen(script);
	if (stop < 0 || stop > n)
		stop = n;

	if (accel_ctx_new(NULL, &ctx)) {
		fail("accel_ctx_new");
		accel_ctx_free(ctx);
		return 1;
	}
	int world = accel_world_size(ctx), rank = accel_rank(ctx);
	int64_t gas = 1;
	ref_cfg c;
	ref R = {0};
	uint32_t idx[NP];
	if (accel_config_int(ctx, "gradient_accumulation_steps", &gas)) {
		r = fail("gradient_accumulation_steps");
		goto done;
	}
	if ((r = read_cfg(&c)))
		goto done;
	if (f16 && world > 1) {
		/* how ranks' f16 gradients are summed (pre-divided or not) is
		 * the backend's: the reference is exact only at one rank */
		fprintf(stderr, "scaler-trace: --dtype f16 is checked at one rank\n");
		r = 2;
		goto done;
	}
	for (int p = 0, e = 0; p < NP; p++) {
		float init[16];
		int64_t shape[1] = {numel[p]};
		for (int i = 0; i < numel[p]; i++, e++)
			init[i] = (float)(R.w[e] = w0(e));
		accel_init in = accel_init_data(init);
		accel_param_desc d = {.struct_size = sizeof(d), .unit = uname[p], .name = pname[p],
		                      .ndim = 1, .shape = shape, .init = &in,
		                      .dtype = f16 ? ACCEL_DTYPE_F16 : ACCEL_DTYPE_F32,
		                      .grad_dtype = f16 ? ACCEL_DTYPE_F16 : ACCEL_DTYPE_F32};
		if (accel_model_add(ctx, &d, &idx[p])) {
			r = fail("accel_model_add_param");
			goto done;
		}
	}
	if (accel_prepare(ctx)) {
		r = fail("accel_prepare");
		goto done;
	}
	R.scale = (float)c.init;
	R.last_overflow = -1;
	R.hysteresis = (long)c.hysteresis;
	/* the steps before --start ran in the saving job, at its world size */
	for (long s = 0; s < start && s < n; s++) {
		int skip;
		long nf;
		ref_step(&c, &R, s, script[s], saved_world, (int)gas, &skip, &nf);
	}
	if (load && accel_load_state(ctx, load)) {
		r = fail("accel_load_state");
		goto done;
	}
	if ((r = check_weights(&R, rank, start, "start")))
		goto done;
	if (accel_get_step(ctx) != (uint64_t)R.applied) {
		fprintf(stderr, "scaler-trace: rank %d: accel_get_step %llu at the start, expected "
		        "%ld\n", rank, (unsigned long long)accel_get_step(ctx), R.applied);
		r = 3;
		goto done;
	}

	for (long s = start; s < stop; s++) {
		char ch = script[s];
		double scale = accel_loss_scale(ctx);
		double want = c.enabled ? (double)R.scale : 1.0;
		if (scale != want) {
			fprintf(stderr, "scaler-trace: rank %d step %ld: accel_loss_scale %.9g, expected "
			        "%.9g\n", rank, s, scale, want);
			r = 3;
			goto done;
		}
		if (!strchr(".inI", ch)) {
			fprintf(stderr, "scaler-trace: script character '%c' at %ld: use . i n I\n", ch, s);
			r = 2;
			goto done;
		}
		for (int g = 0; g < gas; g++) {
			double bv = 0;
			int be = bad_elem(ch, rank, world, g, (int)gas, &bv);
			for (int u = 0; u < NP; u++)
				if (accel_unit_pre_forward(ctx, (uint32_t)u) ||
				    accel_unit_post_forward(ctx, (uint32_t)u)) {
					r = fail("forward hooks");
					goto done;
				}
			for (int p = NP - 1; p >= 0; p--) {
				if (accel_unit_pre_backward(ctx, (uint32_t)p)) {
					r = fail("accel_unit_pre_backward");
					goto done;
				}
				void *gp = accel_param_grad(ctx, idx[p]);
				int e0 = p ? numel[0] : 0;
				for (int i = 0; i < numel[p]; i++) {
					int e = e0 + i;
					/* what a program does: the loss (so each gradient)
					 * multiplied by accel_loss_scale(), added in the
					 * gradient's dtype */
					double v = rnd(scale * (be == e ? bv : grad_of(s, e, rank, g)));
					if (f16) {
						uint16_t *h = gp;
						h[i] = accel_f32_to_f16(accel_f16_to_f32(h[i]) + (float)v);
					} else {
						((float *)gp)[i] += (float)v;
					}
				}
				if (accel_unit_post_backward(ctx, (uint32_t)p)) {
					r = fail("accel_unit_post_backward");
					goto done;
				}
			}
			if (accel_step(ctx)) {
				r = fail("accel_step");
				goto done;
			}
		}
		int skip;
		long want_nf;
		ref_step(&c, &R, s, ch, world, (int)gas, &skip, &want_nf);
		accel_step_report rep = {.struct_size = sizeof(rep)};
		if (accel_last_step(ctx, &rep)) {
			r = fail("accel_last_step");
			goto done;
		}
		double next = accel_loss_scale(ctx);
		double want_next = c.enabled ? (double)R.scale : 1.0;
		if ((int)rep.skipped != skip || rep.loss_scale != want || next != want_next ||
		    rep.step != (uint64_t)R.applied || (long)rep.nonfinite != want_nf ||
		    !rep.has_grad_norm) {
			fprintf(stderr, "scaler-trace: rank %d step %ld ('%c'): got skipped %u, "
			        "loss_scale %.9g, next scale %.9g, step %llu, nonfinite %llu, "
			        "has_grad_norm %u; expected skipped %d, loss_scale %.9g, next %.9g, "
			        "step %ld, nonfinite %ld, has_grad_norm 1\n", rank, s, ch, rep.skipped,
			        rep.loss_scale, next, (unsigned long long)rep.step,
			        (unsigned long long)rep.nonfinite, rep.has_grad_norm, skip, want,
			        want_next, R.applied, want_nf);
			r = 3;
			goto done;
		}
		if ((r = check_weights(&R, rank, s, skip ? "skipped step" : "applied step")))
			goto done;
		if (rank == 0)
			printf("step %ld script %c scale %.9g skipped %d next %.9g applied %ld "
			       "nonfinite %ld\n", s, ch, want, skip, want_next, R.applied, want_nf);
	}
	if (save && accel_save_state(ctx, save)) {
		r = fail("accel_save_state");
		goto done;
	}
	if (accel_wait_for_everyone(ctx))
		r = fail("accel_wait_for_everyone");
done:
	fflush(stdout);
	accel_ctx_free(ctx);
	return r;
}
