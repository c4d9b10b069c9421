/* SPDX-License-Identifier: MIT */
/* tests/test-abi.c: the plugin ABI 1.3 additions end to end at world size 1,
 * with the fixture plugins of tests/fixtures/abi13 (which record what the
 * core did) and ddp:
 *  - a strategy built against the verbatim 1.2 headers (tests/abi-1.2)
 *    loads and trains (params[] at the 1.2 stride) and matches ddp;
 *  - micro_step_end: called on every micro-step with the right sync flag,
 *    strategy before hooks, before reduce() on sync steps;
 *  - the accumulation contract: a gradient reduction on a non-sync
 *    micro-step fails without ACCEL_CAP_MICRO_REDUCE and works with it;
 *  - reduce hooks: reduce_bucket_v2 gets ddp's bucket description, its
 *    req_on_done callback runs before wait() returns (the bucket holds the
 *    cast-back values when the optimizer runs); reduce_scatter_bucket;
 *    an old 1.x hook (sum-hook) through reduce_bucket_v2; the selection
 *    refuses a hook that cannot serve the strategy's reduction;
 *  - accel_set_grad_enabled: forward hooks see grad_enabled() == 0,
 *    backward hooks and accel_step are refused, the count does not move;
 *  - param_view and grad_dtype: bf16 weights with f32 gradients equal an
 *    f32 reference; f32 gradients reduced as bf16 (reduce_dtype);
 *  - available(): runs before init, sees device_info, can refuse;
 *  - roles: a loss scaler and an fp8 recipe together, two scalers not;
 *    validate() gets every plugin's caps;
 *  - instance_caps (ABI 1.6): the caps of fx-strat-inst follow its config;
 *    validate(), the reduce-hook check and the accumulation contract use
 *    them; bits outside desc->caps are refused;
 *  - unit kinds (ABI 1.6 gap F): set by accel_param_desc.unit_kind and
 *    accel_unit_set_kind, seen by a minor-6 strategy through
 *    ACCEL_MODEL_UNIT; a strategy built as minor 5 (fx-strat-m5) and the
 *    1.2 one get units[] at the old stride and still train as ddp does;
 *    ACCEL_MODEL_UNIT under an older core's model; the errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plugins/ddp/ddp-debug.h"
#include "accel/accel.h"
#include "ctx-impl.h"
#include "cuda_probe.h"
#include "fixtures/abi13/fx-record.h"
#include "backends/common/half.h"
#include "loader.h"
#include "select.h"
#include "train-impl.h"
#include "train.h"

static char dirs_json[4096];

/* "plugin_dirs": [abi13 fixtures, the sum-hook dir, the 1.2 build]. */
static const char *plugin_dirs(void)
{
	const char *b = getenv("ACCEL_TEST_BUILDDIR");
	ck_assert_msg(b != NULL, "ACCEL_TEST_BUILDDIR is not set (run through meson test)");
	snprintf(dirs_json, sizeof(dirs_json),
	         "\"plugin_dirs\": [\"%s/tests/fixtures/abi13\", \"%s/tests/fixtures/hook\", "
	         "\"%s/tests/abi-1.2\"]", b, b, b);
	return dirs_json;
}

static accel_ctx *ctx_cfg(const char *body, int expect_ok)
{
	char json[8192];
	snprintf(json, sizeof(json), "{%s, \"optimizer\": {\"type\": \"sgd\", \"params\": "
	         "{\"lr\": 0.1}}%s%s}", plugin_dirs(), body[0] ? ", " : "", body);
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&o, &ctx);
	if (expect_ok)
		ck_assert_msg(r == ACCEL_OK, "accel_ctx_new(%s): %s", json,
		              ctx ? accel_errmsg(ctx) : "");
	return ctx;
}

static const accel_active *active_named(accel_ctx *ctx, const char *name)
{
	for (uint32_t i = 0; i < ctx->n_active; i++)
		if (!strcmp(ctx->active[i].host.name, name))
			return &ctx->active[i];
	ck_abort_msg("plugin '%s' is not active", name);
	return NULL;
}

static const fx_record *record(accel_ctx *ctx, const char *name)
{
	const accel_active *a = active_named(ctx, name);
	ck_assert_ptr_nonnull(a->vt->extension);
	const fx_record *r = a->vt->extension(a->state, FX_RECORD, 1);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->struct_size, sizeof(*r));
	return r;
}

/* The model: unit u0 = w0 (5) + b0 (3), unit u1 = w1 (7); f32 unless
 * `dtype` says otherwise, gradients in `grad_dtype` (0: default). */
#define NP 3
static const int64_t numels[NP] = {5, 3, 7};
static const char *const names[NP] = {"u0.w", "u0.b", "u1.w"};
static const char *const units[NP] = {"u0", "u0", "u1"};

static void add_model(accel_ctx *ctx, uint32_t dtype, uint32_t grad_dtype)
{
	for (int i = 0; i < NP; i++) {
		accel_init init = accel_init_uniform(-1, 1);
		accel_param_desc d = {.struct_size = sizeof(d), .dtype = dtype, .unit = units[i],
		                      .name = names[i], .ndim = 1, .shape = &numels[i],
		                      .init = &init, .grad_dtype = grad_dtype};
		ck_assert_msg(accel_model_add(ctx, &d, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	}
}

static float to_f32(const void *p, uint32_t dtype, uint64_t i)
{
	if (dtype == ACCEL_DTYPE_BF16)
		return accel_bf16_to_f32(((const uint16_t *)p)[i]);
	return ((const float *)p)[i];
}

static void add_grad(void *g, uint32_t dtype, uint64_t i, float v)
{
	if (dtype == ACCEL_DTYPE_BF16) {
		uint16_t *b = g;
		b[i] = accel_f32_to_bf16(accel_bf16_to_f32(b[i]) + v);
	} else {
		((float *)g)[i] += v;
	}
}

/* Gradient of element i at micro-step k: not a function of the weights,
 * so runs with different weight dtypes get the same gradients, and with
 * fractions bf16 cannot hold. */
static float grad_value(int p, uint64_t i, int k)
{
	return 0.01f * (float)(p + 1) + 0.001f * (float)i + 0.0137f * (float)k + 1.0f / 3.0f;
}

/* `micro` micro-steps with all hooks; out[] gets the final weights. */
static void train(accel_ctx *ctx, int micro, float *out)
{
	for (int k = 0; k < micro; k++) {
		for (uint32_t u = 0; u < 2; u++) {
			ck_assert_int_eq(accel_unit_pre_forward(ctx, u), ACCEL_OK);
			ck_assert_int_eq(accel_unit_post_forward(ctx, u), ACCEL_OK);
		}
		for (uint32_t u = 2; u-- > 0;) {
			ck_assert_int_eq(accel_unit_pre_backward(ctx, u), ACCEL_OK);
			for (uint32_t p = 0; p < NP; p++) {
				if ((u == 0) != (p < 2))
					continue;
				void *g = accel_param_grad(ctx, p);
				ck_assert_ptr_nonnull(g);
				for (int64_t i = 0; i < numels[p]; i++)
					add_grad(g, accel_param_grad_dtype(ctx, p), (uint64_t)i,
					         grad_value((int)p, (uint64_t)i, k));
			}
			int r = accel_unit_post_backward(ctx, u);
			ck_assert_msg(r == ACCEL_OK, "post_backward: %s", accel_errmsg(ctx));
		}
		int r = accel_step(ctx);
		ck_assert_msg(r == ACCEL_OK, "accel_step: %s", accel_errmsg(ctx));
	}
	int at = 0;
	for (uint32_t p = 0; p < NP; p++) {
		const void *d = accel_param_data(ctx, p);
		ck_assert_ptr_nonnull(d);
		uint32_t dt = ctx->train->params[p].dtype;
		for (int64_t i = 0; i < numels[p]; i++)
			out[at++] = to_f32(d, dt, (uint64_t)i);
	}
}

#define NTOT 15

static void ddp_reference(const char *extra, int micro, float *out)
{
	char body[512];
	snprintf(body, sizeof(body), "\"strategy\": \"ddp\"%s", extra);
	accel_ctx *ctx = ctx_cfg(body, 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, micro, out);
	accel_ctx_free(ctx);
}

static void expect_close(const float *a, const float *b, double tol)
{
	for (int i = 0; i < NTOT; i++)
		ck_assert_msg(fabs((double)a[i] - (double)b[i]) <= tol, "element %d: %.9g vs %.9g", i,
		              (double)a[i], (double)b[i]);
}

/* ---- a 1.2 plugin under the 1.3 core ------------------------------------------ */

START_TEST(abi12_strategy_trains)
{
	float ref[NTOT], got[NTOT], init[NTOT];
	ddp_reference(", \"gradient_accumulation_steps\": 2", 6, ref);

	accel_ctx *ctx = ctx_cfg("\"strategy\": \"localsgd\", \"gradient_accumulation_steps\": 2, "
	                         "\"localsgd\": {\"sync_every\": 1}", 1);
	ck_assert_uint_eq(ctx->active[0].module->abi_minor, 2);
	/* no instance_caps slot before minor 6: the descriptor's caps */
	ck_assert_ptr_null(ctx->active[0].vt->instance_caps);
	ck_assert_uint_eq(ctx->active[0].caps, ctx->active[0].vt->desc->caps);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	/* It sees the 1.2 layout: params[] entries at the 1.2 stride. */
	const accel_model_v1 *m = accelp_host_table()->model((accel_host *)&ctx->active[0].host);
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->struct_size, offsetof(accel_model_v1, param_info_size));
	const accel_param_info_v1 *p2 = (const accel_param_info_v1 *)(const void *)(
		(const char *)m->params + 2 * ACCEL_PARAM_INFO_V1_SIZE_MINOR2);
	ck_assert_uint_eq(p2->struct_size, ACCEL_PARAM_INFO_V1_SIZE_MINOR2);
	ck_assert_str_eq(p2->name, "u1.w");
	ck_assert_uint_eq(p2->numel, 7);
	ck_assert_ptr_eq(ACCEL_MODEL_PARAM(m, 2), p2);
	ck_assert_str_eq(ACCEL_MODEL_PARAM(m, 1)->name, "u0.b");
	int at = 0;
	for (uint32_t p = 0; p < NP; p++)
		for (int64_t i = 0; i < numels[p]; i++)
			init[at++] = ((const float *)accel_param_data(ctx, p))[i];
	train(ctx, 6, got);
	expect_close(got, ref, 1e-6);
	int moved = 0;
	for (int i = 0; i < NTOT; i++)
		moved += fabsf(got[i] - init[i]) > 0.01f;
	ck_assert_int_eq(moved, NTOT);
	accel_ctx_free(ctx);

	/* A 1.2 strategy has one dtype per parameter: f32 gradients of bf16
	 * weights are refused at prepare, not written into a bf16 buffer. */
	ctx = ctx_cfg("\"strategy\": \"localsgd\"", 1);
	add_model(ctx, ACCEL_DTYPE_BF16, ACCEL_DTYPE_F32);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(accel_errmsg(ctx), "ABI 1.2"), "%s", accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

/* ---- unit kinds (ABI minor 6, gap F) ------------------------------------------- */

/* add_model, with u1's kind set through the desc on its parameter */
static void add_model_kinds(accel_ctx *ctx)
{
	for (int i = 0; i < NP; i++) {
		accel_init init = accel_init_uniform(-1, 1);
		accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32,
		                      .unit = units[i], .name = names[i], .ndim = 1,
		                      .shape = &numels[i], .init = &init,
		                      .unit_kind = i == 2 ? "Block" : NULL};
		ck_assert_msg(accel_model_add(ctx, &d, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	}
}

START_TEST(unit_kind_strides)
{
	float ref[NTOT], got[NTOT];
	ddp_reference("", 4, ref);
	static const char *const strats[] = {"fx-strat", "fx-strat-m5"};
	for (int v = 0; v < 2; v++) {
		char body[128];
		snprintf(body, sizeof(body), "\"strategy\": \"%s\"", strats[v]);
		accel_ctx *ctx = ctx_cfg(body, 1);
		ck_assert_uint_eq(ctx->active[0].module->abi_minor, v == 0 ? ACCEL_ABI_MINOR : 5);
		add_model_kinds(ctx);
		/* u0's kind by name; u1 keeps the desc's */
		ck_assert_int_eq(accel_unit_set_kind(ctx, "u0", "Embedding"), ACCEL_OK);
		ck_assert_str_eq(accel_unit_kind(ctx, 0), "Embedding");
		ck_assert_str_eq(accel_unit_kind(ctx, 1), "Block");
		ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
		const fx_record *rec = record(ctx, strats[v]);
		ck_assert_uint_eq(rec->n_units, 2);
		ck_assert_str_eq(rec->unit_name[0], "u0");
		ck_assert_str_eq(rec->unit_name[1], "u1");
		ck_assert_uint_eq(rec->unit_first[1], 2);
		const accel_model_v1 *m =
			accelp_host_table()->model((accel_host *)&ctx->active[0].host);
		if (v == 0) {
			/* minor 6: the kind, at the current stride */
			ck_assert_str_eq(rec->unit_kind[0], "Embedding");
			ck_assert_str_eq(rec->unit_kind[1], "Block");
			ck_assert_uint_eq(rec->unit_size[1], sizeof(accel_unit_info_v1));
			ck_assert_uint_eq(m->struct_size, sizeof(accel_model_v1));
			ck_assert_uint_eq(m->unit_info_size, sizeof(accel_unit_info_v1));
			ck_assert_ptr_eq(ACCEL_MODEL_UNIT(m, 1), &m->units[1]);
		} else {
			/* minor 5: entries of that minor's size, no kind; the
			 * params of minor 3 */
			ck_assert_str_eq(rec->unit_kind[1], "");
			ck_assert_uint_eq(rec->unit_size[1], ACCEL_UNIT_INFO_V1_SIZE_MINOR5);
			ck_assert_uint_eq(m->struct_size, offsetof(accel_model_v1, unit_info_size));
			ck_assert_uint_eq(m->param_info_size, sizeof(accel_param_info_v1));
			ck_assert_str_eq(ACCEL_MODEL_UNIT(m, 1)->name, "u1");
			ck_assert(!ACCEL_STRUCT_HAS(ACCEL_MODEL_UNIT(m, 1), accel_unit_info_v1, kind));
		}
		train(ctx, 4, got);
		expect_close(got, ref, 1e-6);
		accel_ctx_free(ctx);
	}

	/* the 1.2 strategy: units at the minor-5 stride too */
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"localsgd\"", 1);
	add_model_kinds(ctx);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	const accel_model_v1 *m = accelp_host_table()->model((accel_host *)&ctx->active[0].host);
	const accel_unit_info_v1 *u1 = (const accel_unit_info_v1 *)(const void *)(
		(const char *)m->units + ACCEL_UNIT_INFO_V1_SIZE_MINOR5);
	ck_assert_str_eq(u1->name, "u1");
	ck_assert_uint_eq(u1->struct_size, ACCEL_UNIT_INFO_V1_SIZE_MINOR5);
	ck_assert_ptr_eq(ACCEL_MODEL_UNIT(m, 1), u1);
	accel_ctx_free(ctx);
}
END_TEST

/* A plugin built now on a core older than minor 6: the model ends before
 * unit_info_size (or says 0); ACCEL_MODEL_UNIT steps by the old size. */
START_TEST(unit_kind_old_core)
{
	union {
		accel_unit_info_v1 align;
		char b[4 * ACCEL_UNIT_INFO_V1_SIZE_MINOR5];
	} arr;
	memset(&arr, 0, sizeof(arr));
	static const char *const nm[4] = {"a", "b", "c", "d"};
	for (uint32_t i = 0; i < 4; i++) {
		accel_unit_info_v1 e = {.struct_size = (uint32_t)ACCEL_UNIT_INFO_V1_SIZE_MINOR5,
		                        .first_param = 10 * i, .n_params = 1, .name = nm[i]};
		memcpy(arr.b + i * ACCEL_UNIT_INFO_V1_SIZE_MINOR5, &e, ACCEL_UNIT_INFO_V1_SIZE_MINOR5);
	}
	accel_model_v1 m = {.struct_size = (uint32_t)offsetof(accel_model_v1, unit_info_size),
	                    .n_units = 4, .units = &arr.align};
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < 4; i++) {
			const accel_unit_info_v1 *u = ACCEL_MODEL_UNIT(&m, i);
			ck_assert_str_eq(u->name, nm[i]);
			ck_assert_uint_eq(u->first_param, 10 * i);
			ck_assert(!ACCEL_STRUCT_HAS(u, accel_unit_info_v1, kind));
		}
		/* a minor-6 model that leaves unit_info_size 0 */
		m.struct_size = sizeof(m);
		m.unit_info_size = 0;
	}
}
END_TEST

START_TEST(unit_kind_errors)
{
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"fx-strat\"", 1);
	add_model_kinds(ctx);
	ck_assert_int_eq(accel_unit_set_kind(ctx, "u9", "Block"), ACCEL_ERR_NOT_FOUND);
	ck_assert_msg(strstr(accel_errmsg(ctx), "no unit 'u9'"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	ck_assert_int_eq(accel_unit_set_kind(ctx, "u0", "Bl\"ock"), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "accel_unit_set_kind('u0')"), "%s",
	              accel_errmsg(ctx));
	accel_clear_error(ctx);
	/* a second parameter of u1 with another kind */
	int64_t two = 2;
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32, .unit = "u1",
	                      .name = "u1.b", .ndim = 1, .shape = &two, .unit_kind = "Layer"};
	ck_assert_int_eq(accel_model_add(ctx, &d, NULL), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "unit_kind 'Layer' differs") &&
	              strstr(accel_errmsg(ctx), "'Block'"), "%s", accel_errmsg(ctx));
	/* the same kind, or none, is fine; NULL clears */
	d.unit_kind = "Block";
	ck_assert_int_eq(accel_model_add(ctx, &d, NULL), ACCEL_OK);
	ck_assert_int_eq(accel_unit_set_kind(ctx, "u1", NULL), ACCEL_OK);
	ck_assert_ptr_null(accel_unit_kind(ctx, 1));
	ck_assert_ptr_null(accel_unit_kind(ctx, 7));
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	ck_assert_int_eq(accel_unit_set_kind(ctx, "u0", "Block"), ACCEL_ERR_STATE);
	accel_ctx_free(ctx);
}
END_TEST

/* ---- micro_step_end, the accumulation contract --------------------------------- */

START_TEST(micro_step_end_order)
{
	float ref[NTOT], got[NTOT];
	ddp_reference(", \"gradient_accumulation_steps\": 3", 6, ref);
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"fx-strat\", \"plugins\": [\"fx-hook\"], "
	                         "\"gradient_accumulation_steps\": 3", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 6, got);
	expect_close(got, ref, 1e-6);
	const fx_record *s = record(ctx, "fx-strat"), *h = record(ctx, "fx-hook");
	ck_assert_uint_eq(s->n_micro, 6);
	ck_assert_uint_eq(h->n_micro, 6);
	static const uint32_t sync[6] = {0, 0, 1, 0, 0, 1};
	for (int k = 0; k < 6; k++) {
		ck_assert_uint_eq(s->micro_sync[k], sync[k]);
		ck_assert_uint_eq(h->micro_sync[k], sync[k]);
		/* the strategy first, then the hooks */
		ck_assert_int_lt(s->micro_tick[k], h->micro_tick[k]);
	}
	/* on sync steps: micro_step_end, then reduce(), then step() */
	ck_assert_uint_eq(s->n_reduce, 2);
	ck_assert_uint_eq(s->n_step, 2);
	for (int k = 0; k < 2; k++) {
		ck_assert_int_lt(h->micro_tick[3 * k + 2], s->reduce_tick[k]);
		ck_assert_int_lt(s->reduce_tick[k], s->step_tick[k]);
		if (k)
			ck_assert_int_lt(s->step_tick[k - 1], s->micro_tick[3 * k]);
	}
	/* reductions only on the sync micro-steps: 3 params x 2 steps */
	ck_assert_uint_eq(s->reductions, 6);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(accumulation_contract)
{
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"fx-strat\", \"gradient_accumulation_steps\": 2, "
	                         "\"fx_strat\": {\"every_micro\": true}", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	for (uint32_t u = 0; u < 2; u++)
		ck_assert_int_eq(accel_unit_pre_forward(ctx, u), ACCEL_OK);
	ck_assert_int_eq(accel_unit_pre_backward(ctx, 1), ACCEL_OK);
	int r = accel_unit_post_backward(ctx, 1);
	ck_assert_int_eq(r, ACCEL_ERR_STATE);
	ck_assert_int_eq(record(ctx, "fx-strat")->last_reduce_status, ACCEL_ERR_STATE);
	ck_assert_uint_eq(record(ctx, "fx-strat")->reductions, 0);
	const char *msg = accel_errmsg(ctx);
	ck_assert_msg(strstr(msg, "reduce_bucket_v2 on micro-step 1 of 2") &&
	              strstr(msg, "ACCEL_CAP_MICRO_REDUCE") && strstr(msg, "fx-strat"), "%s", msg);
	accel_ctx_free(ctx);

	/* With the capability (ZeRO-2 style: reduce-scatter every micro-step,
	 * finished in micro_step_end) the same training equals ddp. */
	float ref[NTOT], got[NTOT];
	ddp_reference(", \"gradient_accumulation_steps\": 2", 4, ref);
	ctx = ctx_cfg("\"strategy\": \"fx-strat-zero\", \"gradient_accumulation_steps\": 2", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 4, got);
	expect_close(got, ref, 1e-6);
	ck_assert_uint_eq(record(ctx, "fx-strat-zero")->reductions, 3 * 4);
	accel_ctx_free(ctx);
}
END_TEST

/* ---- reduce hooks ------------------------------------------------------------- */

/* Without a reduce hook a bucket that names a group is reduced over that
 * group (HYBRID_SHARD's within-node buckets): both hook points, at world 1
 * (mean over one rank: the values stay; a pre-divided sum likewise). */
START_TEST(bucket_over_a_group)
{
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"fx-strat\"", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	const accel_active *a = active_named(ctx, "fx-strat");
	const accel_host_v1 *t = accelp_host_table();
	accel_host *h = (accel_host *)&a->host;
	accel_group *g = NULL;
	ck_assert_int_eq(t->group_split(h, NULL, 0, 0, &g), ACCEL_OK);
	ck_assert_ptr_nonnull(g);
	float x[4] = {1, -2, 3.5f, 4}, sh[4] = {0};
	accel_bucket_entry_v1 e = {.param = 0, .numel = 4};
	accel_bucket_v1 b = {.struct_size = sizeof(b), .bucket_id = 9, .n_entries = 1,
	                     .entries = &e, .group = g,
	                     .view = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, x, 4}};
	accel_req *req = NULL;
	ck_assert_msg(t->reduce_bucket_v2(h, &b, 0, &req) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_int_eq(t->wait(h, req), ACCEL_OK);
	ck_assert(x[0] == 1 && x[1] == -2 && x[2] == 3.5f && x[3] == 4);
	accel_view shard = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, sh, 4};
	ck_assert_msg(t->reduce_scatter_bucket(h, &b, &shard, ACCEL_REDUCE_PREDIVIDED, NULL) ==
	              ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert(sh[0] == 1 && sh[1] == -2 && sh[2] == 3.5f && sh[3] == 4);
	ck_assert_ptr_null(t->group_free(h, g));
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(reduce_hook_v2_callback)
{
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"fx-reduce\"], "
	                         "\"ddp\": {\"first_bucket_mb\": 0.00003}", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	float before[NTOT], got[NTOT];
	int at = 0;
	for (uint32_t p = 0; p < NP; p++)
		for (int64_t i = 0; i < numels[p]; i++)
			before[at++] = ((const float *)accel_param_data(ctx, p))[i];
	train(ctx, 1, got);
	/* SGD lr 0.1 on the bf16-rounded gradient: the cast back ran inside
	 * ddp's wait(), before the optimizer read the bucket. */
	at = 0;
	for (uint32_t p = 0; p < NP; p++)
		for (int64_t i = 0; i < numels[p]; i++, at++) {
			float g = grad_value((int)p, (uint64_t)i, 0);
			float gb = accel_bf16_to_f32(accel_f32_to_bf16(g));
			ck_assert_float_ne(g, gb);
			double want = (double)before[at] - 0.1 * gb, raw = (double)before[at] - 0.1 * g;
			ck_assert_msg(fabs(got[at] - want) < 1e-7 && fabs(got[at] - raw) > 1e-6,
			              "element %d: %.9g, want %.9g (unrounded gradient: %.9g)", at,
			              (double)got[at], want, raw);
		}
	const fx_record *h = record(ctx, "fx-reduce");
	const accel_active *d = active_named(ctx, "ddp");
	const accel_ddp_debug_v1 *dbg = d->vt->extension(d->state, ACCEL_DDP_DEBUG, 1);
	ck_assert_uint_ge(dbg->n_buckets, 2);
	ck_assert_uint_eq(h->v2_calls, dbg->n_buckets);
	ck_assert_uint_eq(h->callbacks_run, dbg->n_buckets);
	ck_assert_uint_eq(h->v2_entries, NP);
	ck_assert_uint_eq(h->v2_entry_numel, NTOT);
	ck_assert_uint_eq(h->v2_flags, 0);
	ck_assert_uint_eq(h->scatter_calls, 0);
	accel_ctx_free(ctx);

	/* A strategy that polls with test(): the callback runs there, once. */
	ctx = ctx_cfg("\"strategy\": \"fx-strat\", \"plugins\": [\"fx-reduce\"]", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 2, got);
	h = record(ctx, "fx-reduce");
	ck_assert_uint_eq(h->v2_calls, 3 * 2);
	ck_assert_uint_eq(h->v2_entries, 3 * 2);
	ck_assert_uint_eq(h->callbacks_run, 3 * 2);
	accel_ctx_free(ctx);

	/* The reduce-scatter hook point, with a strategy that reduces so. */
	float ref[NTOT];
	ddp_reference(", \"gradient_accumulation_steps\": 2", 4, ref);
	ctx = ctx_cfg("\"strategy\": \"fx-strat-zero\", \"plugins\": [\"fx-reduce\"], "
	              "\"gradient_accumulation_steps\": 2", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 4, got);
	expect_close(got, ref, 1e-6);
	h = record(ctx, "fx-reduce");
	ck_assert_uint_eq(h->scatter_calls, 3 * 4);
	ck_assert_uint_eq(h->callbacks_run, 3 * 4);
	ck_assert_uint_eq(h->v2_calls, 0);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(old_hook_and_selection)
{
	/* sum-hook is a 1.x hook (reduce_bucket only): ddp's reduce_bucket_v2
	 * reaches it with a pre-divided bucket, and training equals ddp. */
	float ref[NTOT], got[NTOT];
	ddp_reference("", 2, ref);
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"sum-hook\"]", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 2, got);
	expect_close(got, ref, 1e-6);
	accel_ctx_free(ctx);

	/* A reduce-scatter strategy with a hook that only all-reduces. */
	ctx = ctx_cfg("\"strategy\": \"fx-strat-zero\", \"plugins\": [\"sum-hook\"]", 0);
	ck_assert_int_eq(accel_errcode(ctx), ACCEL_ERR_CONFIG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "reduce hook 'sum-hook'") &&
	              strstr(accel_errmsg(ctx), "no reduce_scatter_bucket") &&
	              strstr(accel_errmsg(ctx), "fx-strat-zero"), "%s", accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

/* ---- instance_caps (ABI minor 6) ------------------------------------------------ */

START_TEST(instance_caps_follow_config)
{
	float ref[NTOT], got[NTOT];
	static const uint32_t rs_mr = ACCEL_CAP_REDUCE_SCATTER | ACCEL_CAP_MICRO_REDUCE;
	/* scatter off: the instance all-reduces, so a hook with only an
	 * all-reduce slot is accepted (desc->caps, the union, would refuse it)
	 * and validate() sees the instance's caps; training equals ddp. */
	ddp_reference("", 2, ref);
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"fx-strat-inst\", \"plugins\": [\"sum-hook\", "
	                         "\"fx-hook\"]", 1);
	ck_assert_uint_eq(ctx->active[0].vt->desc->caps, ACCEL_CAP_CPU | rs_mr);
	ck_assert_uint_eq(ctx->active[0].caps, ACCEL_CAP_CPU);
	const fx_record *h = record(ctx, "fx-hook");
	ck_assert_uint_eq(h->validate_calls, 1);
	ck_assert_uint_eq(h->sel_caps[0], ACCEL_CAP_CPU);
	ck_assert_uint_eq(record(ctx, "fx-strat-inst")->instance_caps_calls, 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 2, got);
	expect_close(got, ref, 1e-6);
	accel_ctx_free(ctx);

	/* scatter on: the same hook is refused after init, naming both. */
	ctx = ctx_cfg("\"strategy\": \"fx-strat-inst\", \"plugins\": [\"sum-hook\"], "
	              "\"fx_strat_inst\": {\"scatter\": true}", 0);
	ck_assert_int_eq(accel_errcode(ctx), ACCEL_ERR_CONFIG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "reduce hook 'sum-hook'") &&
	              strstr(accel_errmsg(ctx), "no reduce_scatter_bucket") &&
	              strstr(accel_errmsg(ctx), "strategy 'fx-strat-inst'"), "%s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);

	/* scatter on with a hook that has the slot: validate() sees the
	 * instance caps, and reducing on every micro-step is allowed
	 * (ACCEL_CAP_MICRO_REDUCE from the instance); equals ddp. */
	ddp_reference(", \"gradient_accumulation_steps\": 2", 4, ref);
	ctx = ctx_cfg("\"strategy\": \"fx-strat-inst\", \"plugins\": [\"fx-reduce\", \"fx-hook\"], "
	              "\"gradient_accumulation_steps\": 2, \"fx_strat_inst\": {\"scatter\": true}", 1);
	ck_assert_uint_eq(ctx->active[0].caps, ACCEL_CAP_CPU | rs_mr);
	ck_assert_uint_eq(record(ctx, "fx-hook")->sel_caps[0], ACCEL_CAP_CPU | rs_mr);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	train(ctx, 4, got);
	expect_close(got, ref, 1e-6);
	ck_assert_uint_eq(record(ctx, "fx-reduce")->scatter_calls, 3 * 4);
	accel_ctx_free(ctx);

	/* scatter off but reducing on every micro-step: the contract follows
	 * the instance caps (no ACCEL_CAP_MICRO_REDUCE), though desc->caps has it. */
	ctx = ctx_cfg("\"strategy\": \"fx-strat-inst\", \"gradient_accumulation_steps\": 2, "
	              "\"fx_strat_inst\": {\"every_micro\": true}", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	for (uint32_t u = 0; u < 2; u++)
		ck_assert_int_eq(accel_unit_pre_forward(ctx, u), ACCEL_OK);
	ck_assert_int_eq(accel_unit_pre_backward(ctx, 1), ACCEL_OK);
	ck_assert_int_eq(accel_unit_post_backward(ctx, 1), ACCEL_ERR_STATE);
	ck_assert_msg(strstr(accel_errmsg(ctx), "without ACCEL_CAP_MICRO_REDUCE") &&
	              strstr(accel_errmsg(ctx), "fx-strat-inst"), "%s", accel_errmsg(ctx));
	ck_assert_uint_eq(record(ctx, "fx-strat-inst")->reductions, 0);
	accel_ctx_free(ctx);

	/* a bit outside desc->caps (ACCEL_CAP_SHARD_PARAMS, 0x10) */
	ctx = ctx_cfg("\"strategy\": \"fx-strat-inst\", \"fx_strat_inst\": {\"extra_caps\": true}",
	              0);
	ck_assert_int_eq(accel_errcode(ctx), ACCEL_ERR_PLUGIN);
	ck_assert_msg(strstr(accel_errmsg(ctx), "plugin 'fx-strat-inst'") &&
	              strstr(accel_errmsg(ctx), "instance_caps reported 0x") &&
	              strstr(accel_errmsg(ctx), "bits 0x10 outside"), "%s", accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

/* ---- grad_enabled, param_view, grad_dtype ---------------------------------------- */

START_TEST(grad_disabled_forward_only)
{
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"fx-hook\"], "
	                         "\"gradient_accumulation_steps\": 2", 1);
	add_model(ctx, ACCEL_DTYPE_F32, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	ck_assert_int_eq(accel_grad_enabled(ctx), 1);
	ck_assert_int_eq(accel_set_grad_enabled(ctx, 0), ACCEL_OK);
	ck_assert_int_eq(accel_grad_enabled(ctx), 0);
	for (int pass = 0; pass < 3; pass++)
		for (uint32_t u = 0; u < 2; u++) {
			ck_assert_int_eq(accel_unit_pre_forward(ctx, u), ACCEL_OK);
			ck_assert_int_eq(accel_unit_post_forward(ctx, u), ACCEL_OK);
		}
	const fx_record *h = record(ctx, "fx-hook");
	ck_assert_uint_eq(h->fwd_calls, 6);
	ck_assert_uint_eq(h->fwd_no_grad, 6);
	int r = accel_unit_pre_backward(ctx, 1);
	ck_assert_int_eq(r, ACCEL_ERR_STATE);
	ck_assert_msg(strstr(accel_errmsg(ctx), "gradients are disabled"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	ck_assert_int_eq(accel_unit_post_backward(ctx, 1), ACCEL_ERR_STATE);
	accel_clear_error(ctx);
	ck_assert_int_eq(accel_step(ctx), ACCEL_ERR_STATE);
	ck_assert_msg(strstr(accel_errmsg(ctx), "not a micro-step"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	/* nothing counted: the next training micro-step is still the first */
	ck_assert_uint_eq(accelp_train_micro_step(ctx->train), 0);
	ck_assert_uint_eq(h->n_micro, 0);
	ck_assert_uint_eq(h->bwd_calls, 0);
	ck_assert_int_eq(accel_sync_gradients(ctx), 0);
	ck_assert_int_eq(accel_set_grad_enabled(ctx, 1), ACCEL_OK);
	float ref[NTOT], got[NTOT];
	ddp_reference(", \"gradient_accumulation_steps\": 2", 2, ref);
	train(ctx, 2, got);
	expect_close(got, ref, 1e-6);
	ck_assert_uint_eq(h->fwd_no_grad, 6);
	ck_assert_uint_eq(h->fwd_calls, 10);
	/* param_view in post_backward: the unit's first parameter */
	ck_assert_uint_eq(h->bwd_calls, 4);
	ck_assert_uint_eq(h->view_dtype, ACCEL_DTYPE_F32);
	ck_assert_uint_eq(h->view_grad_dtype, ACCEL_DTYPE_F32);
	ck_assert_uint_eq(h->view_numel, 5);
	ck_assert_uint_eq(h->view_grad_numel, 5);
	ck_assert_int_eq(h->view_data_set, 1);
	ck_assert_int_eq(h->view_grad_set, 1);
	accel_ctx_free(ctx);
}
END_TEST

/* bf16 weights with f32 gradient accumulation equal f32 weights and
 * gradients rounded to bf16: the f32 masters see identical updates. */
START_TEST(f32_grads_of_bf16_weights)
{
	float ref[NTOT], got[NTOT], bf16grad[NTOT];
	ddp_reference(", \"gradient_accumulation_steps\": 8", 16, ref);

	accel_ctx *ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"fx-hook\"], "
	                         "\"gradient_accumulation_steps\": 8", 1);
	add_model(ctx, ACCEL_DTYPE_BF16, ACCEL_DTYPE_F32);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	ck_assert_uint_eq(accel_param_grad_dtype(ctx, 0), ACCEL_DTYPE_F32);
	const accel_active *d = active_named(ctx, "ddp");
	const accel_ddp_debug_v1 *dbg = d->vt->extension(d->state, ACCEL_DDP_DEBUG, 1);
	for (uint32_t b = 0; b < dbg->n_buckets; b++)
		ck_assert_uint_eq(dbg->bucket_dtype[b], ACCEL_DTYPE_F32);
	train(ctx, 16, got);
	const fx_record *h = record(ctx, "fx-hook");
	ck_assert_uint_eq(h->view_dtype, ACCEL_DTYPE_BF16);
	ck_assert_uint_eq(h->view_grad_dtype, ACCEL_DTYPE_F32);
	for (int i = 0; i < NTOT; i++)
		ck_assert_msg(got[i] == accel_bf16_to_f32(accel_f32_to_bf16(ref[i])),
		              "element %d: %.9g, reference %.9g", i, (double)got[i], (double)ref[i]);
	accel_ctx_free(ctx);

	/* The same with bf16 gradients differs: the test can tell. */
	ctx = ctx_cfg("\"strategy\": \"ddp\", \"gradient_accumulation_steps\": 8", 1);
	add_model(ctx, ACCEL_DTYPE_BF16, 0);
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	ck_assert_uint_eq(accel_param_grad_dtype(ctx, 0), ACCEL_DTYPE_BF16);
	train(ctx, 16, bf16grad);
	int differ = 0;
	for (int i = 0; i < NTOT; i++)
		differ += bf16grad[i] != got[i];
	ck_assert_int_gt(differ, 0);
	accel_ctx_free(ctx);

	/* bad dtypes are refused at registration */
	ctx = ctx_cfg("\"strategy\": \"ddp\"", 1);
	accel_param_desc pd = {.struct_size = sizeof(pd), .dtype = ACCEL_DTYPE_BF16, .unit = "u",
	                       .name = "w", .ndim = 1, .shape = &numels[0]};
	pd.grad_dtype = ACCEL_DTYPE_I32;
	ck_assert_int_eq(accel_model_add(ctx, &pd, NULL), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "grad_dtype i32"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	pd.grad_dtype = 0;
	pd.compute_dtype = ACCEL_DTYPE_F8E4M3;
	ck_assert_int_eq(accel_model_add(ctx, &pd, NULL), ACCEL_OK);
	accel_ctx_free(ctx);
}
END_TEST

/* f32 gradients reduced in bf16 (reduce_dtype): ddp sends a bf16 copy of
 * the bucket and casts the result back when the reduction completes, so
 * the optimizer sees the bf16-rounded mean. */
START_TEST(reduce_dtype_bf16)
{
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"ddp\"", 1);
	for (int i = 0; i < NP; i++) {
		accel_init init = accel_init_uniform(-1, 1);
		accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32,
		                      .unit = units[i], .name = names[i], .ndim = 1,
		                      .shape = &numels[i], .init = &init,
		                      /* the last parameter keeps f32: a bucket of its own */
		                      .reduce_dtype = i < 2 ? ACCEL_DTYPE_BF16 : 0};
		ck_assert_int_eq(accel_model_add(ctx, &d, NULL), ACCEL_OK);
	}
	ck_assert_int_eq(accel_prepare(ctx), ACCEL_OK);
	ck_assert_uint_eq(accel_param_grad_dtype(ctx, 0), ACCEL_DTYPE_F32);
	const accel_active *d = active_named(ctx, "ddp");
	const accel_ddp_debug_v1 *dbg = d->vt->extension(d->state, ACCEL_DDP_DEBUG, 1);
	ck_assert_uint_eq(dbg->n_buckets, 2);
	float before[NTOT], got[NTOT];
	int at = 0;
	for (uint32_t p = 0; p < NP; p++)
		for (int64_t i = 0; i < numels[p]; i++)
			before[at++] = ((const float *)accel_param_data(ctx, p))[i];
	train(ctx, 1, got);
	at = 0;
	for (uint32_t p = 0; p < NP; p++)
		for (int64_t i = 0; i < numels[p]; i++, at++) {
			float g = grad_value((int)p, (uint64_t)i, 0);
			float gr = p < 2 ? accel_bf16_to_f32(accel_f32_to_bf16(g)) : g;
			double want = (double)before[at] - 0.1 * gr;
			ck_assert_msg(fabs(got[at] - want) < 1e-7, "element %d: %.9g, want %.9g", at,
			              (double)got[at], want);
			if (p < 2)
				ck_assert_msg(fabs(got[at] - ((double)before[at] - 0.1 * g)) > 1e-6,
				              "element %d was not reduced in bf16", at);
		}
	accel_ctx_free(ctx);
}
END_TEST

/* ---- available(), roles, validate's caps ---------------------------------------- */

START_TEST(available_slot)
{
	accelp_cuda_info probe;
	uint32_t req = 0;
	int32_t cc = 0;
	accelp_cuda_probe(&probe);
	accelp_cuda_offered(&probe, &req, &cc);
	accel_ctx *ctx = ctx_cfg("\"strategy\": \"fx-strat-zero\", \"plugins\": [\"fx-hook\"]", 1);
	const fx_record *h = record(ctx, "fx-hook");
	ck_assert_uint_eq(h->available_calls, 1);
	ck_assert_int_lt(h->available_tick, h->init_tick);
	ck_assert_uint_eq(h->cuda_present, (req & ACCEL_REQ_CUDA) ? 1 : 0);
	ck_assert_int_eq(h->compute_capability, cc);
	if (!(req & ACCEL_REQ_CUDA))
		ck_assert_int_eq(h->device_count, 0);
	/* validate() saw every plugin's caps */
	ck_assert_uint_eq(h->validate_calls, 1);
	ck_assert_uint_eq(h->sel_n_plugins, 2);
	ck_assert_uint_eq(h->sel_has_caps, 1);
	ck_assert_uint_eq(h->sel_caps[0], ACCEL_CAP_CPU | ACCEL_CAP_REDUCE_SCATTER |
	                                      ACCEL_CAP_MICRO_REDUCE);
	ck_assert_uint_eq(h->sel_caps[1], ACCEL_CAP_CPU);
	accel_ctx_free(ctx);

	ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"fx-hook\"], "
	              "\"fx_hook\": {\"refuse\": true}", 0);
	ck_assert_int_eq(accel_errcode(ctx), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(accel_errmsg(ctx), "plugin 'fx-hook'") &&
	              strstr(accel_errmsg(ctx), "is not available in this process") &&
	              strstr(accel_errmsg(ctx), "refusing to run: fx_hook.refuse is set"), "%s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(scaler_and_fp8_roles)
{
	ck_assert_str_eq(accelp_loader_role_name(ACCEL_ROLE_LOSS_SCALER), "loss_scaler");
	ck_assert_str_eq(accelp_loader_role_name(ACCEL_ROLE_FP8_RECIPE), "fp8_recipe");
	ck_assert_int_eq(ACCEL_ROLE_LOSS_SCALER, ACCEL_ROLE_PRECISION);
	char buf[128];
	ck_assert_str_eq(accelp_loader_caps_str(ACCEL_CAP_REDUCE_SCATTER | ACCEL_CAP_MICRO_REDUCE,
	                                       buf, sizeof(buf)),
	                 "reduce_scatter, micro_reduce");

	accel_ctx *ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"fx-scaler\", \"fx-fp8\"]",
	                         1);
	ck_assert_uint_eq(ctx->active[1].vt->desc->role, ACCEL_ROLE_LOSS_SCALER);
	ck_assert_uint_eq(ctx->active[2].vt->desc->role, ACCEL_ROLE_FP8_RECIPE);
	/* the loss scale comes from the loss scaler */
	ck_assert(accel_loss_scale(ctx) == 4.0);
	accel_ctx_free(ctx);

	ctx = ctx_cfg("\"strategy\": \"ddp\", \"plugins\": [\"fx-scaler\", \"fx-scaler2\"]", 0);
	ck_assert_int_eq(accel_errcode(ctx), ACCEL_ERR_CONFIG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "plugins 'fx-scaler' and 'fx-scaler2' both have "
	                                        "the loss_scaler role"), "%s", accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

/* The loader: role 5 loads, an unknown role and a reduce hook without any
 * reduce slot are broken with a reason; a hook with only the 1.3 slots is
 * fine. */
START_TEST(loader_roles_and_slots)
{
	accel_loader *ld = NULL;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_new(accelp_host_table(), &ld, &err), ACCEL_OK);
	static const struct {
		const char *file;
		int status;
		const char *cause;
	} rows[] = {
		{"fx-fp8.so", ACCEL_MODULE_OK, NULL},
		{"fx-reduce.so", ACCEL_MODULE_OK, NULL},
		{"fx-role-bad.so", ACCEL_MODULE_BROKEN, "plugin 'fx-role-bad': unknown role 6"},
		{"fx-reduce-noslot.so", ACCEL_MODULE_BROKEN,
		 "reduce hook 'fx-reduce-noslot': required slot reduce_bucket (or, since ABI 1.3, "
		 "reduce_bucket_v2 or reduce_scatter_bucket) is NULL"},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char path[4096];
		const accel_module *m = NULL;
		snprintf(path, sizeof(path), "%s/tests/fixtures/abi13/%s",
		         getenv("ACCEL_TEST_BUILDDIR"), rows[i].file);
		ck_assert_int_eq(accelp_loader_load_file(ld, path, &m, &err), ACCEL_OK);
		ck_assert_msg(m->status == rows[i].status, "%s: %s (%s)", rows[i].file,
		              accelp_loader_status_name(m->status), m->reason ? m->reason : "");
		if (rows[i].cause)
			ck_assert_msg(m->cause && strstr(m->cause, rows[i].cause), "%s: '%s'",
			              rows[i].file, m->cause ? m->cause : "");
	}
	const accel_module *m = accelp_loader_get(ld, 0);
	ck_assert_uint_eq(m->role, ACCEL_ROLE_FP8_RECIPE);
	ck_assert_str_eq(accelp_loader_role_name(m->role), "fp8_recipe");
	ck_assert_uint_eq(m->abi_minor, ACCEL_ABI_MINOR);
	accelp_loader_free(ld);
}
END_TEST

static Suite *abi_suite(void)
{
	Suite *s = suite_create("abi");
	TCase *tc = tcase_create("abi13");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, abi12_strategy_trains);
	tcase_add_test(tc, micro_step_end_order);
	tcase_add_test(tc, accumulation_contract);
	tcase_add_test(tc, reduce_hook_v2_callback);
	tcase_add_test(tc, bucket_over_a_group);
	tcase_add_test(tc, old_hook_and_selection);
	tcase_add_test(tc, instance_caps_follow_config);
	tcase_add_test(tc, grad_disabled_forward_only);
	tcase_add_test(tc, f32_grads_of_bf16_weights);
	tcase_add_test(tc, reduce_dtype_bf16);
	tcase_add_test(tc, available_slot);
	tcase_add_test(tc, scaler_and_fp8_roles);
	tcase_add_test(tc, loader_roles_and_slots);
	tcase_add_test(tc, unit_kind_strides);
	tcase_add_test(tc, unit_kind_old_core);
	tcase_add_test(tc, unit_kind_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(abi_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
