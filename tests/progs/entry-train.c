/* SPDX-License-Identifier: MIT */
/*
 * tests/progs/entry-train.c: gradients whose every value names its
 * parameter and element (tests/fixtures/hook/entry-code.h), for the
 * entry-hook fixture to check the strategy's bucket descriptions against
 * (tests/test-bucket-entries.sh).
 *
 *   entry-train [--steps S] [--misplace]
 *
 * Eight f32 parameters in four units, sized so that no unit and few
 * parameters are a multiple of 2 or 3 (a sharded strategy pads them):
 *   a: a.w [5, 7], a.b [6]            41 elements
 *   b: b.w [3, 3], b.b [3], b.s [1]   13
 *   c: c.w [4, 6], c.b [7]            31
 *   d: d.w [11]                       11
 * Every element starts at 0.5.  Each step runs every unit's forward hooks
 * (reading its weights) and then, in reverse, its backward hooks, adding
 * entry_code(param, element, rank, step) to each gradient element.  The
 * configuration must select SGD without momentum, weight decay or
 * clipping, and gradient accumulation 1: after S steps every element must
 * then be 0.5 - lr * (sum over steps of the ranks' mean code) exactly (lr
 * a power of two, at most 4 ranks; the test uses 1/8), which each
 * rank checks on the weights it reads in a forward-only pass (so a sharded
 * strategy gathers them).
 *
 * --misplace (the test's check that the hook looks): in the last step,
 * c.b's gradient elements 0 and 1 get each other's values.
 *
 * Exit status: 0 ok, 1 accel error (message on stderr), 2 usage, 4 a
 * weight is not what the reduced gradients give.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "entry-code.h"

#define NP 8
#define NU 4

static const struct {
	const char *unit, *name;
	uint32_t ndim;
	int64_t shape[2];
} params[NP] = {
	{"a", "a.w", 2, {5, 7}}, {"a", "a.b", 1, {6}},
	{"b", "b.w", 2, {3, 3}}, {"b", "b.b", 1, {3}}, {"b", "b.s", 1, {1}},
	{"c", "c.w", 2, {4, 6}}, {"c", "c.b", 1, {7}},
	{"d", "d.w", 1, {11}},
};
/* the parameters of unit u: unit_first[u] .. unit_first[u + 1] - 1 */
static const uint32_t unit_first[NU + 1] = {0, 2, 5, 7, 8};
static uint32_t pid[NP];

static int fail(accel_ctx *ctx, const char *what)
{
	fprintf(stderr, "entry-train: %s: %s\n", what, ctx ? accel_errmsg(ctx) : "no context");
	return 1;
}

/* One step: forward hooks of every unit, then backward hooks in reverse,
 * each adding entry_code to its parameters' gradients. */
static int step(accel_ctx *ctx, uint32_t rank, int misplace)
{
	uint64_t s = accel_get_step(ctx);
	for (uint32_t u = 0; u < NU; u++) {
		if (accel_unit_pre_forward(ctx, u))
			return fail(ctx, "pre_forward");
		for (uint32_t k = unit_first[u]; k < unit_first[u + 1]; k++)
			if (!accel_param_data(ctx, pid[k]))
				return fail(ctx, "accel_param_data in the unit's forward window");
		if (accel_unit_post_forward(ctx, u))
			return fail(ctx, "post_forward");
	}
	for (uint32_t u = NU; u-- > 0;) {
		if (accel_unit_pre_backward(ctx, u))
			return fail(ctx, "pre_backward");
		for (uint32_t k = unit_first[u]; k < unit_first[u + 1]; k++) {
			float *g = accel_param_grad(ctx, pid[k]);
			uint64_t n = accel_param_numel(ctx, pid[k]);
			if (!g)
				return fail(ctx, "accel_param_grad in the unit's backward window");
			for (uint64_t i = 0; i < n; i++)
				g[i] += (float)entry_code(pid[k], i, rank, s);
			if (misplace && !strcmp(params[k].name, "c.b")) {
				float t = g[0];
				g[0] = g[1];
				g[1] = t;
			}
		}
		if (accel_unit_post_backward(ctx, u))
			return fail(ctx, "post_backward");
	}
	if (accel_step(ctx))
		return fail(ctx, "accel_step");
	return 0;
}

/* Collective: every weight, read in a forward-only pass, against
 * 0.5 - lr * sum over steps of the mean code. */
static int check_weights(accel_ctx *ctx, uint32_t rank, uint32_t world, long steps, double lr)
{
	double worst = 0;
	int r = 0;
	if (accel_set_grad_enabled(ctx, 0))
		return fail(ctx, "accel_set_grad_enabled");
	for (uint32_t u = 0; u < NU && !r; u++) {
		if (accel_unit_pre_forward(ctx, u)) {
			r = fail(ctx, "pre_forward (reading weights)");
			break;
		}
		for (uint32_t k = unit_first[u]; k < unit_first[u + 1] && !r; k++) {
			const float *w = accel_param_data(ctx, pid[k]);
			uint64_t n = accel_param_numel(ctx, pid[k]);
			if (!w) {
				r = fail(ctx, "accel_param_data (reading weights)");
				break;
			}
			for (uint64_t i = 0; i < n; i++) {
				double want = 0.5;
				for (long s = 0; s < steps; s++)
					want -= lr * entry_code_mean(pid[k], i, world, (uint64_t)s);
				double e = fabs(w[i] - want) / fabs(want);
				worst = fmax(worst, e);
				/* no tolerance: every gradient, mean (worlds up to 4), lr
				 * product and weight here is a dyadic fraction of at most
				 * 22 significant bits, exact in f32 (observed 0 at worlds 2
				 * and 3 under every strategy of the test) */
				if (w[i] != want) {
					fprintf(stderr, "entry-train: rank %u: %s[%llu] is %.9g after %ld steps, "
					        "expected %.9g (relative error %.3g): the reduced gradient did "
					        "not reach this element\n", rank, params[k].name,
					        (unsigned long long)i, w[i], steps, want, e);
					r = 4;
					break;
				}
			}
		}
		if (accel_unit_post_forward(ctx, u) && !r)
			r = fail(ctx, "post_forward (reading weights)");
	}
	if (accel_set_grad_enabled(ctx, 1) && !r)
		r = fail(ctx, "accel_set_grad_enabled");
	if (!r)
		printf("entry-train: rank %u: %u parameters as the reduced gradients give after %ld "
		       "steps (largest relative error %.3g)\n", rank, NP, steps, worst);
	return r;
}

int main(int argc, char **argv)
{
	long steps = 3;
	int misplace = 0;
	double lr = 0;
	int64_t gas = 1;
	accel_ctx *ctx = NULL;
	int r = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
			steps = atol(argv[++i]);
		} else if (!strcmp(argv[i], "--misplace")) {
			misplace = 1;
		} else {
			fprintf(stderr, "usage: entry-train [--steps S] [--misplace]\n");
			return 2;
		}
	}
	if (accel_ctx_new(NULL, &ctx)) {
		r = fail(ctx, "accel_ctx_new");
		goto done;
	}
	accel_config_int(ctx, "gradient_accumulation_steps", &gas);
	if (accel_config_double(ctx, "optimizer.params.lr", &lr) || gas != 1) {
		fprintf(stderr, "entry-train: the configuration must set optimizer.params.lr and "
		        "gradient accumulation 1 (it has %lld)\n", (long long)gas);
		r = 2;
		goto done;
	}
	uint32_t rank = (uint32_t)accel_rank(ctx), world = (uint32_t)accel_world_size(ctx);
	accel_init init = accel_init_const(0.5);
	for (uint32_t k = 0; k < NP; k++)
		if (accel_model_add_param(ctx, params[k].unit, params[k].name, ACCEL_DTYPE_F32,
		                          params[k].ndim, params[k].shape, &init, &pid[k])) {
			r = fail(ctx, "accel_model_add_param");
			goto done;
		}
	if (accel_prepare(ctx)) {
		r = fail(ctx, "accel_prepare");
		goto done;
	}
	for (long s = 0; s < steps && !r; s++)
		r = step(ctx, rank, misplace && s == steps - 1);
	if (!r)
		r = check_weights(ctx, rank, world, steps, lr);
	if (!r && accel_wait_for_everyone(ctx))
		r = fail(ctx, "accel_wait_for_everyone");
done:
	accel_ctx_free(ctx);
	return r;
}
