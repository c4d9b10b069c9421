/* SPDX-License-Identifier: MIT */
/* tests/test-train.c: the training API (core/train*.c, core/metrics.c) with
 * the ddp strategy at world size 1: registration and its errors, initial
 * values, gradient accumulation, the step (SGD/AdamW numerics, clipping),
 * the ddp bucket plan and overlap counters, hook misuse, metrics lines. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../plugins/ddp/ddp-debug.h"
#include "accel/accel.h"
#include "ctx-impl.h"
#include "train.h"

/* ---- helpers ---------------------------------------------------------------- */

static accel_ctx *ctx_json(const char *json)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&o, &ctx);
	ck_assert_msg(r == ACCEL_OK, "accel_ctx_new(%s): %s", json, ctx ? accel_errmsg(ctx) : "");
	return ctx;
}

#define SGD(lr) "\"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": " #lr "}}"

static const accel_ddp_debug_v1 *ddp_debug(accel_ctx *ctx)
{
	accel_active *s = &ctx->active[0];
	ck_assert_str_eq(s->host.name, "ddp");
	ck_assert_ptr_nonnull(s->vt->extension);
	const accel_ddp_debug_v1 *d = s->vt->extension(s->state, ACCEL_DDP_DEBUG, 1);
	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq(d->struct_size, sizeof(*d));
	ck_assert_ptr_null(s->vt->extension(s->state, ACCEL_DDP_DEBUG, 2));
	ck_assert_ptr_null(s->vt->extension(s->state, "ddp.other", 1));
	return d;
}

static void add(accel_ctx *ctx, const char *unit, const char *name, int64_t n,
                const accel_init *init, uint32_t *ret)
{
	int64_t shape[1] = {n};
	int r = accel_model_add_param(ctx, unit, name, ACCEL_DTYPE_F32, 1, shape, init, ret);
	ck_assert_msg(r == ACCEL_OK, "add %s: %s", name, accel_errmsg(ctx));
}

static void expect_err(accel_ctx *ctx, int got, int code, const char *needle)
{
	ck_assert_int_eq(got, code);
	ck_assert_msg(strstr(accel_errmsg(ctx), needle), "message '%s' lacks '%s'",
	              accel_errmsg(ctx), needle);
	accel_clear_error(ctx);
}

/* ---- registration --------------------------------------------------------- */

START_TEST(register_errors)
{
	accel_ctx *ctx = ctx_json("{" SGD(0.1) "}");
	int64_t shape[2] = {3, 4}, bad[2] = {3, 0};
	uint32_t p = 99;

	ck_assert_int_eq(accel_model_add_param(ctx, "l0", "w", ACCEL_DTYPE_F32, 2, shape, NULL, &p),
	                 ACCEL_OK);
	ck_assert_uint_eq(p, 0);
	expect_err(ctx, accel_model_add_param(ctx, "l0", "w", ACCEL_DTYPE_F32, 2, shape, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "'w' is already registered");
	expect_err(ctx, accel_model_add_param(ctx, "l0", "b", ACCEL_DTYPE_I32, 2, shape, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "not a training dtype");
	expect_err(ctx, accel_model_add_param(ctx, "l0", "b", ACCEL_DTYPE_F32, 2, bad, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "shape[1] = 0");
	expect_err(ctx, accel_model_add_param(ctx, "l0", "b", ACCEL_DTYPE_F32, 9, shape, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "ndim 9");
	expect_err(ctx, accel_model_add_param(ctx, "l0", "", ACCEL_DTYPE_F32, 2, shape, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "parameter name");
	expect_err(ctx, accel_model_add_param(ctx, NULL, "b", ACCEL_DTYPE_F32, 2, shape, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "unit name");
	accel_init bad_init = accel_init_uniform(1, 0);
	expect_err(ctx, accel_model_add_param(ctx, "l0", "b", ACCEL_DTYPE_F32, 2, shape, &bad_init,
	                                      NULL),
	           ACCEL_ERR_INVALID_ARG, "lo <= hi");
	accel_init no_fn = accel_init_callback(NULL, NULL);
	expect_err(ctx, accel_model_add_param(ctx, "l0", "b", ACCEL_DTYPE_F32, 2, shape, &no_fn,
	                                      NULL),
	           ACCEL_ERR_INVALID_ARG, "callback is NULL");
	ck_assert_int_eq(accel_model_add_param(ctx, "l1", "x", ACCEL_DTYPE_F32, 0, NULL, NULL, &p),
	                 ACCEL_OK);
	ck_assert_uint_eq(p, 1);
	/* l0 again after l1: units must be contiguous. */
	expect_err(ctx, accel_model_add_param(ctx, "l0", "y", ACCEL_DTYPE_F32, 2, shape, NULL, NULL),
	           ACCEL_ERR_INVALID_ARG, "unit 'l0' was registered before unit 'l1'");
	ck_assert_uint_eq(accel_model_n_params(ctx), 2);
	ck_assert_uint_eq(accel_model_n_units(ctx), 2);
	ck_assert_uint_eq(accel_param_numel(ctx, 0), 12);
	ck_assert_uint_eq(accel_param_numel(ctx, 1), 1);  /* a scalar */
	ck_assert_int_eq(accel_model_find_param(ctx, "x", &p), ACCEL_OK);
	ck_assert_uint_eq(p, 1);
	ck_assert_int_eq(accel_model_find_param(ctx, "nope", &p), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accel_model_find_unit(ctx, "l1", &p), ACCEL_OK);
	ck_assert_uint_eq(p, 1);
	ck_assert_str_eq(accel_unit_name(ctx, 0), "l0");
	ck_assert_ptr_null(accel_param_name(ctx, 7));

	/* Nothing works before prepare. */
	ck_assert_ptr_null(accel_param_data(ctx, 0));
	expect_err(ctx, accel_step(ctx), ACCEL_ERR_STATE, "accel_prepare");
	expect_err(ctx, accel_unit_pre_forward(ctx, 0), ACCEL_ERR_STATE, "accel_prepare");

	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	expect_err(ctx, accel_model_add_param(ctx, "l2", "z", ACCEL_DTYPE_F32, 2, shape, NULL, NULL),
	           ACCEL_ERR_STATE, "frozen by accel_prepare");
	expect_err(ctx, accel_prepare(ctx), ACCEL_ERR_STATE, "already called");
	expect_err(ctx, accel_unit_post_backward(ctx, 5), ACCEL_ERR_INVALID_ARG, "out of range");
	ck_assert_ptr_null(accel_param_data(ctx, 2));
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(empty_model)
{
	accel_ctx *ctx = ctx_json("{" SGD(0.1) "}");
	expect_err(ctx, accel_prepare(ctx), ACCEL_ERR_STATE, "no parameters");
	accel_ctx_free(ctx);
	ck_assert_ptr_null(accel_ctx_free(NULL));
	ck_assert_ptr_null(accelp_train_free(NULL));
}
END_TEST

/* ---- initial values --------------------------------------------------------- */

static int ramp(void *user, const char *name, uint64_t offset, uint64_t count, float *dst)
{
	int *calls = user;
	(*calls)++;
	if (strcmp(name, "cb"))
		return 5;
	for (uint64_t i = 0; i < count; i++)
		dst[i] = (float)(offset + i) * 0.5f;
	return 0;
}

static int failing(void *user, const char *name, uint64_t offset, uint64_t count, float *dst)
{
	(void)user, (void)name, (void)offset, (void)count, (void)dst;
	return 42;
}

START_TEST(initial_values)
{
	accel_ctx *ctx = ctx_json("{\"seed\": 7, " SGD(0.1) "}");
	float given[5] = {1, -2, 3.5f, 4, 1e-3f};
	int calls = 0;
	accel_init c = accel_init_const(0.25), u = accel_init_uniform(-1, 3),
	           nrm = accel_init_normal(2, 0.5), d = accel_init_data(given),
	           cb = accel_init_callback(ramp, &calls);
	uint32_t pc, pu, pn, pd, pcb, pz;
	add(ctx, "a", "c", 10, &c, &pc);
	add(ctx, "a", "u", 20000, &u, &pu);
	add(ctx, "b", "n", 20000, &nrm, &pn);
	add(ctx, "b", "d", 5, &d, &pd);
	given[0] = 99;  /* copied at registration */
	add(ctx, "c", "cb", 7, &cb, &pcb);
	add(ctx, "c", "z", 3, NULL, &pz);
	ck_assert_int_eq(calls, 0);  /* callbacks run in prepare */
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	ck_assert_int_ge(calls, 1);

	const float *v = accel_param_data(ctx, pc);
	for (int i = 0; i < 10; i++)
		ck_assert_float_eq(v[i], 0.25f);
	v = accel_param_data(ctx, pd);
	ck_assert_float_eq(v[0], 1.0f);
	ck_assert_float_eq(v[2], 3.5f);
	ck_assert_float_eq(v[4], 1e-3f);
	v = accel_param_data(ctx, pcb);
	for (int i = 0; i < 7; i++)
		ck_assert_float_eq(v[i], i * 0.5f);
	v = accel_param_data(ctx, pz);
	ck_assert_float_eq(v[0], 0.0f);

	/* Uniform in [-1, 3): range and mean; normal: mean and std. */
	double s = 0, s2 = 0, lo = 1e9, hi = -1e9;
	v = accel_param_data(ctx, pu);
	for (int i = 0; i < 20000; i++) {
		s += v[i];
		lo = fmin(lo, v[i]);
		hi = fmax(hi, v[i]);
	}
	ck_assert(lo >= -1 && hi < 3);
	ck_assert_double_eq_tol(s / 20000, 1.0, 0.05);
	s = 0;
	v = accel_param_data(ctx, pn);
	for (int i = 0; i < 20000; i++) {
		s += v[i];
		s2 += (double)v[i] * v[i];
	}
	double mean = s / 20000, sd = sqrt(s2 / 20000 - mean * mean);
	ck_assert_double_eq_tol(mean, 2.0, 0.02);
	ck_assert_double_eq_tol(sd, 0.5, 0.02);

	/* Range init is sharding-invariant: any sub-range gives the same values,
	 * also converted to bf16. */
	float part[100];
	accel_view pv = {sizeof(pv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, part, 100};
	ck_assert_int_eq(accelp_train_param_init(ctx->train, pn, 12345, &pv), ACCEL_OK);
	for (int i = 0; i < 100; i++)
		ck_assert_float_eq(part[i], v[12345 + i]);
	uint16_t half[100];
	accel_view hv = {sizeof(hv), ACCEL_DTYPE_BF16, ACCEL_DEVICE_CPU, 0, half, 100};
	ck_assert_int_eq(accelp_train_param_init(ctx->train, pn, 12345, &hv), ACCEL_OK);
	for (int i = 0; i < 100; i++) {
		uint32_t bits = (uint32_t)half[i] << 16;
		float f;
		memcpy(&f, &bits, 4);
		ck_assert_float_eq_tol(f, v[12345 + i], fabsf(v[12345 + i]) * 0.008f);
	}
	pv.numel = 10;
	expect_err(ctx, accelp_train_param_init(ctx->train, pn, 19995, &pv), ACCEL_ERR_INVALID_ARG,
	           "outside its 20000 elements");
	expect_err(ctx, accelp_train_param_init(ctx->train, 77, 0, &pv), ACCEL_ERR_INVALID_ARG,
	           "out of range");
	accel_ctx_free(ctx);

	/* Same seed: same values; another seed: different values. */
	float first[3];
	for (int run = 0; run < 3; run++) {
		ctx = ctx_json(run < 2 ? "{\"seed\": 7, " SGD(0.1) "}" : "{\"seed\": 8, " SGD(0.1) "}");
		add(ctx, "b", "n", 3, &nrm, NULL);
		ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
		v = accel_param_data(ctx, 0);
		if (run == 0)
			memcpy(first, v, sizeof(first));
		else if (run == 1)
			ck_assert_mem_eq(first, v, sizeof(first));
		else
			ck_assert(memcmp(first, v, sizeof(first)) != 0);
		accel_ctx_free(ctx);
	}

	/* A failing callback fails prepare with its name and range. */
	ctx = ctx_json("{" SGD(0.1) "}");
	accel_init f = accel_init_callback(failing, NULL);
	add(ctx, "a", "bad", 4, &f, NULL);
	int r = accel_prepare(ctx);
	ck_assert_int_eq(r, ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "init callback for parameter 'bad' returned 42"),
	              "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	expect_err(ctx, accel_prepare(ctx), ACCEL_ERR_STATE, "earlier call failed");
	accel_ctx_free(ctx);
}
END_TEST

/* ---- accumulation and the step ---------------------------------------------- */

/* SGD without momentum: w -= lr * mean over micro-steps of the gradients. */
START_TEST(sgd_accumulation)
{
	accel_ctx *ctx = ctx_json("{\"gradient_accumulation_steps\": 3, \"track_grad_norm\": true, "
	                          SGD(0.5) "}");
	accel_init c = accel_init_const(1.0);
	uint32_t p;
	add(ctx, "a", "w", 4, &c, &p);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	const accel_ddp_debug_v1 *dbg = ddp_debug(ctx);
	float *w = accel_param_data(ctx, p), *g = accel_param_grad(ctx, p);
	ck_assert_ptr_nonnull(w);
	ck_assert_ptr_nonnull(g);
	for (int i = 0; i < 4; i++)
		ck_assert_float_eq(g[i], 0.0f);
	ck_assert_double_eq_tol(accel_get_lr(ctx), 0.5, 1e-12);
	ck_assert_double_eq(accel_loss_scale(ctx), 1.0);

	int expect_sync[6] = {0, 0, 1, 0, 0, 1};
	for (int m = 0; m < 6; m++) {
		ck_assert_int_eq(accel_sync_gradients(ctx), expect_sync[m]);
		for (int i = 0; i < 4; i++)
			g[i] += (float)(m % 3 + 1) * (float)(i + 1);  /* 1,2,3 x (i+1): mean 2(i+1) */
		ck_assert_int_eq(accel_unit_post_backward(ctx, 0), ACCEL_OK);
		uint64_t red = dbg->reductions;
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		if (!expect_sync[m]) {
			/* accumulating: nothing reduced or applied */
			ck_assert_uint_eq(dbg->reductions, red);
			ck_assert_float_eq(w[0], m < 3 ? 1.0f : 1.0f - 0.5f * 2.0f);
		} else {
			ck_assert_uint_eq(dbg->sync_steps, (uint64_t)(m / 3 + 1));
			for (int i = 0; i < 4; i++) {
				ck_assert_float_eq(g[i], 0.0f);  /* zeroed by the step */
				ck_assert_float_eq_tol(w[i], 1.0f - (m / 3 + 1) * 0.5f * 2.0f * (i + 1), 1e-6);
			}
		}
	}
	ck_assert_uint_eq(accel_get_step(ctx), 2);
	ck_assert_uint_eq(accelp_train_step_count(ctx->train), 2);
	accel_step_report rep = {.struct_size = sizeof(rep)};
	ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
	ck_assert_uint_eq(rep.step, 2);
	ck_assert_uint_eq(rep.skipped, 0);
	ck_assert_double_eq(rep.clip_coef, 1.0);
	/* |mean grad| = 2 * |(1,2,3,4)| */
	ck_assert_uint_eq(rep.has_grad_norm, 1);
	ck_assert_double_eq_tol(rep.grad_norm, 2 * sqrt(30.0), 1e-5);
	accel_ctx_free(ctx);
}
END_TEST

/* The gradient statistics are a pass over every gradient: without clipping,
 * a loss scaler, a pre_step hook or track_grad_norm they are not computed
 * (the report says so), and the step is the same.  With track_grad_norm a
 * non-finite gradient is counted. */
START_TEST(grad_stats_when_used)
{
	for (int track = 0; track < 2; track++) {
		accel_ctx *ctx = ctx_json(track ? "{\"track_grad_norm\": true, " SGD(1.0) "}"
		                                : "{" SGD(1.0) "}");
		uint32_t a;
		add(ctx, "u0", "a", 3, NULL, &a);
		ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
		float *g = accel_param_grad(ctx, a), *w = accel_param_data(ctx, a);
		g[0] = 3;
		g[1] = 4;
		g[2] = 0;
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		ck_assert_float_eq(w[0], -3.0f);
		ck_assert_float_eq(w[1], -4.0f);
		for (int i = 0; i < 3; i++)
			ck_assert_float_eq(g[i], 0.0f);   /* zeroed by the step */
		accel_step_report rep = {.struct_size = sizeof(rep)};
		ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
		ck_assert_uint_eq(rep.has_grad_norm, (uint32_t)track);
		if (track)
			ck_assert_double_eq_tol(rep.grad_norm, 5.0, 1e-6);
		else
			ck_assert(isnan(rep.grad_norm));
		ck_assert_uint_eq(rep.nonfinite, 0);
		g[2] = NAN;
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
		ck_assert_uint_eq(rep.nonfinite, track ? 1u : 0u);
		ck_assert(isnan(rep.grad_norm));
		ck_assert(isnan(w[2]));   /* applied, as torch would */
		accel_ctx_free(ctx);
	}
}
END_TEST

/* Clipping with an infinite gradient element does what torch's
 * clip_grad_norm_ does: the norm is inf, coef 0, the finite gradients
 * apply as 0 and only the infinite element's parameter becomes NaN (it
 * used to make every parameter NaN). */
START_TEST(clip_with_infinite_gradient)
{
	accel_ctx *ctx = ctx_json("{\"max_grad_norm\": 1.0, " SGD(0.1) "}");
	uint32_t a;
	add(ctx, "u0", "a", 4, NULL, &a);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	float *g = accel_param_grad(ctx, a), *w = accel_param_data(ctx, a);
	for (int i = 0; i < 4; i++)
		w[i] = (float)(i + 1);
	g[0] = 1;
	g[1] = INFINITY;
	g[2] = 2;
	g[3] = 3;
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	ck_assert_float_eq(w[0], 1.0f);
	ck_assert(isnan(w[1]));
	ck_assert_float_eq(w[2], 3.0f);
	ck_assert_float_eq(w[3], 4.0f);
	accel_step_report rep = {.struct_size = sizeof(rep)};
	ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
	ck_assert(isinf(rep.grad_norm) && rep.grad_norm > 0);
	ck_assert_double_eq(rep.clip_coef, 0.0);
	ck_assert_uint_eq(rep.nonfinite, 1);
	accel_ctx_free(ctx);
}
END_TEST

/* Overwrite mode: accel_grad_accumulate() is 0 on each step's first
 * micro-step and 1 on the others; the step leaves the gradients as they are
 * (no zeroing pass); the update is the one of the default mode.  Without the
 * mode it is always 1; switching after prepare is refused. */
START_TEST(grad_overwrite)
{
	accel_ctx *ctx = ctx_json("{\"gradient_accumulation_steps\": 2, " SGD(0.5) "}");
	uint32_t p;
	add(ctx, "a", "w", 2, NULL, &p);
	ck_assert_int_eq(accel_grad_accumulate(ctx), 1);
	ck_assert_int_eq(accel_set_grad_overwrite(ctx, 1), ACCEL_OK);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	float *w = accel_param_data(ctx, p), *g = accel_param_grad(ctx, p);
	for (int step = 0; step < 2; step++) {
		for (int m = 0; m < 2; m++) {
			int acc = accel_grad_accumulate(ctx);
			ck_assert_int_eq(acc, m);
			for (int i = 0; i < 2; i++)   /* micro-step gradients 1 and 3: mean 2 */
				g[i] = (acc ? g[i] : 0.0f) + (float)(2 * m + 1);
			ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		}
		for (int i = 0; i < 2; i++) {
			ck_assert_float_eq(w[i], -0.5f * 2.0f * (float)(step + 1));
			ck_assert_float_eq(g[i], 4.0f);   /* not zeroed: 1 + 3 still there */
		}
	}
	expect_err(ctx, accel_set_grad_overwrite(ctx, 0), ACCEL_ERR_STATE, "before accel_prepare");
	accel_ctx_free(ctx);

	ctx = ctx_json("{\"gradient_accumulation_steps\": 2, " SGD(0.5) "}");
	add(ctx, "a", "w", 2, NULL, &p);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	g = accel_param_grad(ctx, p);
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(accel_grad_accumulate(ctx), 1);
		g[0] += 1.0f;
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	}
	ck_assert_float_eq(g[0], 0.0f);   /* default mode: zeroed by the step */
	accel_ctx_free(ctx);
}
END_TEST

/* clip_grad_norm_: coef = max / (norm + 1e-6), clamped to 1. */
START_TEST(clipping)
{
	accel_ctx *ctx = ctx_json("{\"max_grad_norm\": 1.0, " SGD(1.0) "}");
	uint32_t a, b;
	add(ctx, "u0", "a", 1, NULL, &a);
	add(ctx, "u1", "b", 1, NULL, &b);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	float *ga = accel_param_grad(ctx, a), *gb = accel_param_grad(ctx, b);
	ga[0] = 3;
	gb[0] = 4;  /* norm 5 */
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	double coef = 1.0 / (5.0 + 1e-6);
	ck_assert_double_eq_tol(((float *)accel_param_data(ctx, a))[0], -3 * coef, 1e-6);
	ck_assert_double_eq_tol(((float *)accel_param_data(ctx, b))[0], -4 * coef, 1e-6);
	accel_step_report rep = {.struct_size = sizeof(rep)};
	ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
	ck_assert_double_eq_tol(rep.grad_norm, 5.0, 1e-6);
	ck_assert_double_eq_tol(rep.clip_coef, coef, 1e-12);
	/* Below the threshold: untouched. */
	ga[0] = 0.3f;
	gb[0] = 0.4f;
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
	ck_assert_double_eq(rep.clip_coef, 1.0);
	ck_assert_double_eq_tol(((float *)accel_param_data(ctx, a))[0], -3 * coef - 0.3, 1e-6);
	/* A short report struct gets only what it covers. */
	accel_step_report small = {.struct_size = offsetof(accel_step_report, lr)};
	small.lr = -7;
	ck_assert_int_eq(accel_last_step(ctx, &small), ACCEL_OK);
	ck_assert_uint_eq(small.step, 2);
	ck_assert_double_eq(small.lr, -7);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(adamw_step)
{
	/* One AdamW step from zero state moves every weight by lr * sign(g)
	 * (bias-corrected m / sqrt(v) = g / |g|), after decoupled decay. */
	accel_ctx *ctx = ctx_json("{\"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 0.01, "
	                          "\"weight_decay\": 0.1, \"eps\": 1e-8}}}");
	accel_init c = accel_init_const(2.0);
	uint32_t p;
	add(ctx, "a", "w", 3, &c, &p);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	float *w = accel_param_data(ctx, p), *g = accel_param_grad(ctx, p);
	g[0] = 0.5f;
	g[1] = -3.0f;
	g[2] = 0.0f;
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	double decayed = 2.0 * (1 - 0.01 * 0.1);
	ck_assert_double_eq_tol(w[0], decayed - 0.01, 1e-6);
	ck_assert_double_eq_tol(w[1], decayed + 0.01, 1e-6);
	ck_assert_double_eq_tol(w[2], decayed, 1e-6);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(no_decay_groups)
{
	accel_ctx *ctx = ctx_json("{\"optimizer\": {\"type\": \"adamw\", \"no_decay\": [\"bias\", "
	                          "\"norm.weight\"], \"params\": {\"lr\": 0.1, \"weight_decay\": 0.5}}}");
	accel_init c = accel_init_const(1.0);
	uint32_t w, b, n;
	add(ctx, "a", "fc.weight", 2, &c, &w);
	add(ctx, "a", "fc.bias", 2, &c, &b);
	add(ctx, "a", "norm.weight", 2, &c, &n);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->params[w].group, 0);
	ck_assert_uint_eq(m->params[b].group, 1);
	ck_assert_uint_eq(m->params[n].group, 1);
	ck_assert_uint_eq(m->n_groups, 2);
	ck_assert_uint_eq(m->total_numel, 6);
	/* zero gradients: only decay moves the weights */
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	ck_assert_float_eq_tol(((float *)accel_param_data(ctx, w))[0], 1.0f - 0.1f * 0.5f, 1e-6);
	ck_assert_float_eq(((float *)accel_param_data(ctx, b))[0], 1.0f);
	ck_assert_float_eq(((float *)accel_param_data(ctx, n))[1], 1.0f);
	accel_ctx_free(ctx);
}
END_TEST

/* The learning rate follows scheduler.* per optimizer step (not per
 * micro-step), and a step reports the rate it used. */
START_TEST(lr_schedule)
{
	accel_ctx *ctx = ctx_json("{\"gradient_accumulation_steps\": 2, \"scheduler\": {\"type\": "
	                          "\"linear\", \"warmup_steps\": 2, \"total_steps\": 4}, " SGD(0.8) "}");
	uint32_t p;
	add(ctx, "a", "w", 1, NULL, &p);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	const double expect[6] = {0, 0.4, 0.8, 0.4, 0, 0};
	float *w = accel_param_data(ctx, p), *g = accel_param_grad(ctx, p);
	double wexp = 0;
	for (int s = 0; s < 5; s++) {
		ck_assert_double_eq_tol(accel_get_lr(ctx), expect[s], 1e-12);
		for (int m = 0; m < 2; m++) {
			g[0] += 1.0f;
			ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
			ck_assert_double_eq_tol(accel_get_lr(ctx), expect[s + m], 1e-12);
		}
		wexp -= expect[s];
		ck_assert_double_eq_tol(w[0], wexp, 1e-6);
		accel_step_report rep = {.struct_size = sizeof(rep)};
		ck_assert_int_eq(accel_last_step(ctx, &rep), ACCEL_OK);
		ck_assert_double_eq_tol(rep.lr, expect[s], 1e-12);
	}
	accel_ctx_free(ctx);
}
END_TEST

/* ---- ddp buckets and hooks ----------------------------------------------------- */

/* Units u0..u3, each one weight of 100 f32 (400 bytes); first bucket 500
 * bytes, later ones 900 bytes: [u3 u2] [u1 u0] in backward order... the
 * first bucket closes at 800 >= 500, the second at 800 < 900 stays open
 * until the end. */
static accel_ctx *four_units(const char *extra)
{
	char json[512];
	snprintf(json, sizeof(json), "{\"ddp\": {\"first_bucket_mb\": %.10g, \"bucket_cap_mb\": "
	         "%.10g}%s, " SGD(0.1) "}", 500.0 / 1048576, 900.0 / 1048576, extra);
	accel_ctx *ctx = ctx_json(json);
	for (int u = 0; u < 4; u++) {
		char unit[8], name[16];
		snprintf(unit, sizeof(unit), "u%d", u);
		snprintf(name, sizeof(name), "u%d.w", u);
		add(ctx, unit, name, 100, NULL, NULL);
	}
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	return ctx;
}

START_TEST(bucket_plan)
{
	accel_ctx *ctx = four_units("");
	const accel_ddp_debug_v1 *d = ddp_debug(ctx);
	ck_assert_uint_eq(d->n_buckets, 2);
	ck_assert_uint_eq(d->hook_units, 4);
	/* reverse registration order */
	ck_assert_uint_eq(d->bucket_first[0], 0);
	ck_assert_uint_eq(d->bucket_first[1], 2);
	ck_assert_uint_eq(d->bucket_first[2], 4);
	ck_assert_uint_eq(d->bucket_params[0], 3);
	ck_assert_uint_eq(d->bucket_params[1], 2);
	ck_assert_uint_eq(d->bucket_params[2], 1);
	ck_assert_uint_eq(d->bucket_params[3], 0);
	ck_assert_uint_eq(d->bucket_bytes[0], 800);
	ck_assert_uint_eq(d->bucket_dtype[1], ACCEL_DTYPE_F32);
	/* 100 f32 padded to 64 bytes = 112 elements each */
	ck_assert_uint_eq(d->bucket_numel[0], 224);
	/* gradients are views into the bucket, in bucket order */
	float *g3 = accel_param_grad(ctx, 3), *g2 = accel_param_grad(ctx, 2);
	float *g1 = accel_param_grad(ctx, 1), *g0 = accel_param_grad(ctx, 0);
	ck_assert_ptr_eq(g2, g3 + 112);
	ck_assert_ptr_eq(g0, g1 + 112);
	uint64_t h = d->plan_hash;
	accel_ctx_free(ctx);

	/* The plan is a function of the model and config only. */
	ctx = four_units("");
	ck_assert_uint_eq(ddp_debug(ctx)->plan_hash, h);
	accel_ctx_free(ctx);

	/* Default sizes: one bucket. */
	ctx = ctx_json("{" SGD(0.1) "}");
	add(ctx, "a", "x", 1000, NULL, NULL);
	add(ctx, "b", "y", 1000, NULL, NULL);
	accel_param_desc fz = {.struct_size = sizeof(fz), .dtype = ACCEL_DTYPE_F32, .unit = "c",
	                       .name = "frozen", .ndim = 1, .shape = (int64_t[]){5}, .frozen = 1};
	ck_assert_int_eq(accel_model_add(ctx, &fz, NULL), ACCEL_OK);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	d = ddp_debug(ctx);
	ck_assert_uint_eq(d->n_buckets, 1);
	ck_assert_uint_eq(d->hook_units, 2);  /* the frozen unit does not count */
	ck_assert_ptr_null(accel_param_grad(ctx, 2));
	ck_assert_ptr_nonnull(accel_param_data(ctx, 2));
	/* hooks of a unit without trainable parameters are fine */
	ck_assert_int_eq(accel_unit_post_backward(ctx, 2), ACCEL_OK);
	ck_assert_int_eq(accel_unit_post_backward(ctx, 1), ACCEL_OK);
	ck_assert_int_eq(accel_unit_post_backward(ctx, 0), ACCEL_OK);
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	accel_ctx_free(ctx);

	/* One running bucket per dtype: f32 and bf16 gradients never share. */
	ctx = ctx_json("{" SGD(0.1) "}");
	int64_t four[1] = {4};
	ck_assert_int_eq(accel_model_add_param(ctx, "a", "f0", ACCEL_DTYPE_F32, 1, four, NULL, NULL),
	                 ACCEL_OK);
	ck_assert_int_eq(accel_model_add_param(ctx, "a", "h0", ACCEL_DTYPE_BF16, 1, four, NULL, NULL),
	                 ACCEL_OK);
	ck_assert_int_eq(accel_model_add_param(ctx, "b", "f1", ACCEL_DTYPE_F32, 1, four, NULL, NULL),
	                 ACCEL_OK);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	d = ddp_debug(ctx);
	ck_assert_uint_eq(d->n_buckets, 2);
	ck_assert_uint_eq(d->bucket_dtype[0], ACCEL_DTYPE_F32);  /* f1 is ready first */
	ck_assert_uint_eq(d->bucket_dtype[1], ACCEL_DTYPE_BF16);
	ck_assert_uint_eq(d->bucket_params[0], 2);
	ck_assert_uint_eq(d->bucket_params[1], 0);
	ck_assert_uint_eq(d->bucket_params[2], 1);
	ck_assert_uint_eq(d->bucket_bytes[0], 32);
	ck_assert_uint_eq(d->bucket_bytes[1], 8);
	accel_ctx_free(ctx);

	/* A parameter larger than the cap gets a bucket of its own. */
	ctx = ctx_json("{\"ddp\": {\"first_bucket_mb\": 0.001, \"bucket_cap_mb\": 0.001}, "
	               SGD(0.1) "}");
	add(ctx, "a", "small", 10, NULL, NULL);
	add(ctx, "a", "big", 1000, NULL, NULL);
	add(ctx, "b", "small2", 10, NULL, NULL);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	d = ddp_debug(ctx);
	ck_assert_uint_eq(d->n_buckets, 2);
	ck_assert_uint_eq(d->bucket_params[0], 2);  /* small2 */
	ck_assert_uint_eq(d->bucket_params[1], 1);  /* big closes bucket 0 */
	ck_assert_uint_eq(d->bucket_params[2], 0);
	ck_assert_uint_eq(d->bucket_first[1], 2);
	accel_ctx_free(ctx);
}
END_TEST

/* Backward in reverse unit order with hooks: bucket 0 ([u3 u2]) is issued
 * at the second post_backward, before the last unit's backward. */
START_TEST(overlap)
{
	accel_ctx *ctx = four_units("");
	const accel_ddp_debug_v1 *d = ddp_debug(ctx);
	for (int step = 0; step < 2; step++) {
		for (int u = 3; u >= 0; u--) {
			uint64_t before = d->reductions;
			ck_assert_int_eq(accel_unit_pre_backward(ctx, (uint32_t)u), ACCEL_OK);
			float *g = accel_param_grad(ctx, (uint32_t)u);
			g[0] = 1.0f;
			ck_assert_int_eq(accel_unit_post_backward(ctx, (uint32_t)u), ACCEL_OK);
			if (u == 2)
				ck_assert_uint_eq(d->reductions, before + 1);  /* bucket 0 issued now */
			if (u == 3 || u == 1)
				ck_assert_uint_eq(d->reductions, before);
		}
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		ck_assert_int_eq(d->launch_pos[0], 2);
		ck_assert_int_eq(d->launch_pos[1], 4);
	}
	ck_assert_uint_eq(d->overlapped, 2);
	ck_assert_uint_eq(d->reductions, 4);
	ck_assert_float_eq_tol(((float *)accel_param_data(ctx, 0))[0], -0.2f, 1e-7);

	/* Out of order: u1 before u2 -> bucket 1 is ready first but waits for
	 * bucket 0; both are issued in order by u2's hook. */
	int order[4] = {3, 1, 0, 2};
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(accel_unit_post_backward(ctx, (uint32_t)order[i]), ACCEL_OK);
	ck_assert_uint_eq(d->reductions, 6);
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	ck_assert_int_eq(d->launch_pos[0], 4);
	ck_assert_int_eq(d->launch_pos[1], 4);
	ck_assert_uint_eq(d->overlapped, 2);

	/* No hooks at all: everything is reduced by accel_step. */
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	ck_assert_int_eq(d->launch_pos[0], -1);
	ck_assert_int_eq(d->launch_pos[1], -1);
	ck_assert_uint_eq(d->reductions, 8);
	ck_assert_uint_eq(d->sync_steps, 4);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(hook_misuse)
{
	accel_ctx *ctx = four_units("");
	const accel_ddp_debug_v1 *d = ddp_debug(ctx);
	ck_assert_int_eq(accel_unit_post_backward(ctx, 3), ACCEL_OK);
	ck_assert_int_eq(accel_unit_post_backward(ctx, 1), ACCEL_OK);
	int r = accel_step(ctx);
	ck_assert_int_eq(r, ACCEL_ERR_STATE);
	ck_assert_msg(strstr(accel_errmsg(ctx), "2 of 4 units never called accel_unit_post_backward"),
	              "%s", accel_errmsg(ctx));
	ck_assert_msg(strstr(accel_errmsg(ctx), "'u0', 'u2'"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	/* The next step starts clean. */
	for (int u = 3; u >= 0; u--)
		ck_assert_int_eq(accel_unit_post_backward(ctx, (uint32_t)u), ACCEL_OK);
	ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
	ck_assert_uint_eq(d->sync_steps, 1);

	ck_assert_int_eq(accel_unit_post_backward(ctx, 3), ACCEL_OK);
	r = accel_unit_post_backward(ctx, 3);
	ck_assert_int_eq(r, ACCEL_ERR_STATE);
	ck_assert_msg(strstr(accel_errmsg(ctx), "called twice for unit 'u3'"), "%s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

/* Hooks on non-sync micro-steps do not communicate. */
START_TEST(accumulation_no_comm)
{
	accel_ctx *ctx = four_units(", \"gradient_accumulation_steps\": 4");
	const accel_ddp_debug_v1 *d = ddp_debug(ctx);
	for (int m = 0; m < 8; m++) {
		for (int u = 3; u >= 0; u--)
			ck_assert_int_eq(accel_unit_post_backward(ctx, (uint32_t)u), ACCEL_OK);
		ck_assert_uint_eq(d->reductions, (uint64_t)(m / 4 + (m % 4 == 3)) * 2);
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		ck_assert_uint_eq(accelp_train_micro_step(ctx->train), (uint32_t)((m + 1) % 4));
	}
	ck_assert_uint_eq(d->sync_steps, 2);
	ck_assert_uint_eq(accel_get_step(ctx), 2);
	accel_ctx_free(ctx);
}
END_TEST

/* req_on_done callbacks are matched by the request's address, which is
 * free again once the request completed: a callback that issues a new
 * request (which may get that address) and registers on it must not be run
 * by the completion that is running it. */
static int cb_order[4], n_cb;
static accel_train *cb_train;

static int cb_second(void *arg)
{
	cb_order[n_cb++] = (int)(intptr_t)arg;
	return ACCEL_OK;
}

static int cb_first(void *arg)
{
	cb_order[n_cb++] = (int)(intptr_t)arg;
	/* "a new request at the same address" */
	return accelp_train_req_on_done(cb_train, (accel_req *)&cb_train, cb_second, (void *)2);
}

START_TEST(req_callbacks_and_reused_addresses)
{
	accel_ctx *ctx = four_units("");
	accel_req *req = (accel_req *)&cb_train;
	cb_train = ctx->train;
	n_cb = 0;
	ck_assert_int_eq(accelp_train_req_on_done(ctx->train, req, cb_first, (void *)1), ACCEL_OK);
	ck_assert_int_eq(accelp_train_req_on_done(ctx->train, req, cb_second, (void *)3), ACCEL_OK);
	ck_assert_int_eq(accelp_train_req_done(ctx->train, req), ACCEL_OK);
	/* both of the first request's, in registration order, not the new one */
	ck_assert_int_eq(n_cb, 2);
	ck_assert_int_eq(cb_order[0], 1);
	ck_assert_int_eq(cb_order[1], 3);
	/* the new request's callback runs when it completes */
	ck_assert_int_eq(accelp_train_req_done(ctx->train, req), ACCEL_OK);
	ck_assert_int_eq(n_cb, 3);
	ck_assert_int_eq(cb_order[2], 2);
	ck_assert_int_eq(accelp_train_req_done(ctx->train, req), ACCEL_OK);
	ck_assert_int_eq(n_cb, 3);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(bf16_params)
{
	accel_ctx *ctx = ctx_json("{" SGD(0.5) "}");
	int64_t shape[1] = {4};
	accel_init c = accel_init_const(1.0);
	uint32_t p;
	ck_assert_int_eq(accel_model_add_param(ctx, "a", "w", ACCEL_DTYPE_BF16, 1, shape, &c, &p),
	                 ACCEL_OK);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	uint16_t *w = accel_param_data(ctx, p), *g = accel_param_grad(ctx, p);
	ck_assert_uint_eq(w[0], 0x3f80);  /* 1.0 in bf16 */
	ck_assert_uint_eq(g[0], 0);
	/* 1 - 0.5 * 2^-10 is not representable in bf16; repeated, the f32
	 * master accumulates what bf16 weights alone would lose. */
	for (int s = 0; s < 64; s++) {
		g[0] = 0x3a80;  /* 2^-10 */
		ck_assert_int_eq(accel_step(ctx), ACCEL_OK);
		ck_assert_uint_eq(g[0], 0);
	}
	/* master = 1 - 64 * 0.5 * 2^-10 = 0.96875, representable in bf16 */
	ck_assert_uint_eq(w[0], 0x3f78);
	accel_ctx_free(ctx);
}
END_TEST

/* ---- metrics ------------------------------------------------------------------- */

START_TEST(metrics_lines)
{
	char path[] = "/tmp/accel-test-metrics-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	accel_ctx *ctx = ctx_json("{" SGD(0.1) "}");
	ck_assert_int_eq(accel_metrics_open(ctx, path), ACCEL_OK);
	ck_assert_int_eq(accel_log_metrics(ctx, 3, "{\"loss\": 0.5, \"tag\": \"x\"}"), ACCEL_OK);
	const char *keys[] = {"loss", "bad", "inf"};
	double vals[] = {0.25, NAN, -INFINITY};
	ck_assert_int_eq(accel_log_scalars(ctx, 4, 3, keys, vals), ACCEL_OK);
	expect_err(ctx, accel_log_metrics(ctx, 5, "[1, 2]"), ACCEL_ERR_INVALID_ARG, "JSON object");
	expect_err(ctx, accel_log_metrics(ctx, 5, "{\"loss\": "), ACCEL_ERR_INVALID_ARG,
	           "not valid JSON");
	expect_err(ctx, accel_log_metrics(ctx, 5, "{\"step\": 1}"), ACCEL_ERR_INVALID_ARG,
	           "written by accel");
	const char *bad_keys[] = {"time"};
	expect_err(ctx, accel_log_scalars(ctx, 5, 1, bad_keys, vals), ACCEL_ERR_INVALID_ARG,
	           "written by accel");
	accel_ctx_free(ctx);

	FILE *f = fopen(path, "r");
	char line[512];
	json_error_t je;
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	json_t *j = json_loads(line, 0, &je);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), 3);
	ck_assert_double_eq(json_real_value(json_object_get(j, "loss")), 0.5);
	ck_assert_str_eq(json_string_value(json_object_get(j, "tag")), "x");
	ck_assert(json_real_value(json_object_get(j, "time")) > 1.5e9);
	ck_assert_str_eq(json_object_iter_key(json_object_iter(j)), "step");  /* step first */
	json_decref(j);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	j = json_loads(line, 0, &je);
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "step")), 4);
	ck_assert_double_eq(json_real_value(json_object_get(j, "loss")), 0.25);
	ck_assert_str_eq(json_string_value(json_object_get(j, "bad")), "NaN");
	ck_assert_str_eq(json_string_value(json_object_get(j, "inf")), "-Infinity");
	json_decref(j);
	ck_assert_ptr_null(fgets(line, sizeof(line), f));  /* rejected calls wrote nothing */
	fclose(f);
	unlink(path);
}
END_TEST

static Suite *train_suite(void)
{
	Suite *s = suite_create("train");
	TCase *tc = tcase_create("api");
	tcase_add_test(tc, register_errors);
	tcase_add_test(tc, empty_model);
	tcase_add_test(tc, initial_values);
	tcase_add_test(tc, sgd_accumulation);
	tcase_add_test(tc, grad_stats_when_used);
	tcase_add_test(tc, clip_with_infinite_gradient);
	tcase_add_test(tc, grad_overwrite);
	tcase_add_test(tc, clipping);
	tcase_add_test(tc, adamw_step);
	tcase_add_test(tc, no_decay_groups);
	tcase_add_test(tc, lr_schedule);
	tcase_add_test(tc, metrics_lines);
	suite_add_tcase(s, tc);
	TCase *dd = tcase_create("ddp");
	tcase_add_test(dd, bucket_plan);
	tcase_add_test(dd, overlap);
	tcase_add_test(dd, hook_misuse);
	tcase_add_test(dd, accumulation_no_comm);
	tcase_add_test(dd, req_callbacks_and_reused_addresses);
	tcase_add_test(dd, bf16_params);
	suite_add_tcase(s, dd);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(train_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
