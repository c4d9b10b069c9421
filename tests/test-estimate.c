/* SPDX-License-Identifier: MIT */
/* tests/test-estimate.c: core/estimate.c and ddp's estimate_memory slot.
 *
 * The estimate must be what ddp really allocates: a context registers a
 * model (train_mlp's layers plus parameters whose sizes leave bucket
 * padding), accel_prepare() allocates, and the bytes the core counted per
 * category (accel_memory_stats) must equal the estimate for the same model
 * and config, byte for byte.  Then the call's errors, one row each. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ctx-impl.h"
#include "estimate.h"

/* train_mlp 784-100-100-10 (fc0..fc2), then a unit of odd sizes: 7 and
 * 1001 elements are no multiple of a 64-byte line in any dtype. */
typedef struct tparam {
	const char *unit, *name;
	uint32_t ndim;
	int64_t shape[2];
} tparam;
static const tparam model[] = {
	{"fc0", "fc0.weight", 2, {100, 784}}, {"fc0", "fc0.bias", 1, {100, 0}},
	{"fc1", "fc1.weight", 2, {100, 100}}, {"fc1", "fc1.bias", 1, {100, 0}},
	{"fc2", "fc2.weight", 2, {10, 100}},  {"fc2", "fc2.bias", 1, {10, 0}},
	{"odd", "odd.a", 1, {7, 0}},          {"odd", "odd.b", 2, {7, 143}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

static uint64_t numel_of(const tparam *p)
{
	return p->ndim == 1 ? (uint64_t)p->shape[0] : (uint64_t)(p->shape[0] * p->shape[1]);
}

typedef struct mcase {
	const char *name;
	const char *config;
	uint32_t dtype;        /* of every parameter                */
	uint32_t n_state;      /* what the config's optimizer keeps */
} mcase;
static const mcase mcases[] = {
	{"f32 adamw", "{\"optimizer\": {\"type\": \"adamw\"}}", ACCEL_DTYPE_F32, 2},
	{"bf16 adamw", "{\"mixed_precision\": \"bf16\"}", ACCEL_DTYPE_BF16, 2},
	{"f16 sgd momentum", "{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"momentum\": 0.9}}}",
	 ACCEL_DTYPE_F16, 1},
	{"f32 sgd, small buckets",
	 "{\"optimizer\": {\"type\": \"sgd\"}, \"ddp\": {\"bucket_cap_mb\": 0.01, "
	 "\"first_bucket_mb\": 0.001}}", ACCEL_DTYPE_F32, 0},
};

static const char *const cat_name[] = {"params", "grads", "master", "optimizer", "buffers",
                                       "offload"};

START_TEST(ddp_equals_allocation)
{
	const mcase *c = &mcases[_i];
	accel_opts o = {.struct_size = sizeof(o), .config_json = c->config, .skip_env = 1};
	accel_ctx *ctx = NULL;
	ck_assert_msg(accel_ctx_new(&o, &ctx) == ACCEL_OK, "%s: %s", c->name,
	              ctx ? accel_errmsg(ctx) : "no context");
	uint64_t numel[N_MODEL];
	uint32_t dtype[N_MODEL];
	uint64_t unit_numel[4] = {0}, total = 0;
	for (uint32_t i = 0; i < N_MODEL; i++) {
		ck_assert_int_eq(accel_model_add_param(ctx, model[i].unit, model[i].name, c->dtype,
		                                       model[i].ndim, model[i].shape, NULL, NULL),
		                 ACCEL_OK);
		numel[i] = numel_of(&model[i]);
		dtype[i] = c->dtype;
		unit_numel[i / 2] += numel[i];
		total += numel[i];
	}
	ck_assert_msg(accel_prepare(ctx) == ACCEL_OK, "%s: %s", c->name, accel_errmsg(ctx));

	accelp_setup_opts so = {.config_json = c->config, .skip_env = 1};
	accelp_estimate_opts eo = {
		.setup = &so,
		.strategy = "ddp",
		.in = {.world_size = 1, .local_world_size = 1, .device = ACCEL_DEVICE_CPU,
		       .n_params = N_MODEL, .n_units = 4, .numel = numel, .dtype = dtype,
		       .unit_numel = unit_numel, .total_numel = total, .default_dtype = c->dtype,
		       .n_state = UINT32_MAX},
	};
	accelp_estimate_result res;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_msg(accelp_estimate_memory(&eo, &res, &err) == ACCEL_OK, "%s: %s", c->name,
	              err.msg);
	ck_assert_uint_eq(res.n_state, c->n_state);
	ck_assert_uint_eq(res.dtype, c->dtype);
	ck_assert_str_eq(res.out.variant, "ddp");
	uint64_t sum = 0;
	for (uint32_t k = 0; k < ACCEL_MEM_CATEGORY_COUNT; k++) {
		uint64_t got = UINT64_MAX;
		ck_assert_int_eq(accel_memory_stats(ctx, k, ACCEL_DEVICE_CPU, 0, &got, NULL), ACCEL_OK);
		ck_assert_msg(res.out.bytes[ACCEL_EST_DEVICE][k] == got,
		              "%s: %s: estimate %llu bytes, ddp allocated %llu", c->name, cat_name[k],
		              (unsigned long long)res.out.bytes[ACCEL_EST_DEVICE][k],
		              (unsigned long long)got);
		ck_assert_uint_eq(res.out.bytes[ACCEL_EST_HOST][k], 0);
		ck_assert_uint_eq(res.out.bytes[ACCEL_EST_NVME][k], 0);
		sum += got;
	}
	/* the hand count: masters and working copies, state, padded gradients */
	uint64_t es = accel_abi_dtype_size(c->dtype), pad = 0;
	for (uint32_t i = 0; i < N_MODEL; i++)
		pad += (numel[i] + 64 / es - 1) / (64 / es) * (64 / es) - numel[i];
	uint64_t want = total * 4 + (c->dtype == ACCEL_DTYPE_F32 ? 0 : total * es) +
	                c->n_state * total * 4 + (total + pad) * es;
	ck_assert_msg(sum == want, "%s: %llu bytes allocated, %llu by hand", c->name,
	              (unsigned long long)sum, (unsigned long long)want);
	uint64_t all = 0;
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_ALL, ACCEL_DEVICE_CPU, 0, &all, NULL),
	                 ACCEL_OK);
	ck_assert_uint_eq(all, sum);
	ck_assert_uint_gt(pad, 0);
	accel_ctx_free(ctx);
}
END_TEST

/* --params N: one tensor of N elements. */
START_TEST(one_tensor)
{
	accelp_setup_opts so = {.config_json = "{\"mixed_precision\": \"bf16\"}", .skip_env = 1};
	accelp_estimate_opts eo = {
		.setup = &so,
		.strategy = "ddp",
		.in = {.world_size = 64, .local_world_size = 8, .device = ACCEL_DEVICE_CUDA,
		       .total_numel = 1001, .n_state = UINT32_MAX},
	};
	accelp_estimate_result res;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_msg(accelp_estimate_memory(&eo, &res, &err) == ACCEL_OK, "%s", err.msg);
	const uint64_t *d = res.out.bytes[ACCEL_EST_DEVICE];
	ck_assert_uint_eq(res.dtype, ACCEL_DTYPE_BF16);
	ck_assert_uint_eq(d[ACCEL_MEM_PARAMS], 2002);
	ck_assert_uint_eq(d[ACCEL_MEM_MASTER], 4004);
	ck_assert_uint_eq(d[ACCEL_MEM_OPTIMIZER], 8008);
	ck_assert_uint_eq(d[ACCEL_MEM_GRADS], 1024 * 2);   /* 1001 -> 32 lines of 32 bf16 */
	ck_assert_uint_eq(d[ACCEL_MEM_BUFFERS], 0);
}
END_TEST

typedef struct ecase {
	const char *name;
	const char *config;
	const char *strategy;
	int32_t world;
	uint64_t total;        /* with two parameters of 10 elements */
	int plugin_dir;        /* searched first: 1 the fixture strategy named zero,
	                          2 the sum-hook fixture, 3 Local SGD built against
	                          the ABI 1.2 headers                          */
	int code;
	const char *needle;
} ecase;
static const ecase ecases[] = {
	{"world 0", "{}", "ddp", 0, 20, 0, ACCEL_ERR_CONFIG, "world size 0"},
	{"counts", "{}", "ddp", 1, 21, 0, ACCEL_ERR_CONFIG, "total_numel 21 is not the sum"},
	{"not installed", "{}", "nosuch", 1, 20, 0, ACCEL_ERR_NOT_FOUND,
	 "no plugin named 'nosuch'"},
	{"no slot", "{}", "zero", 1, 20, 1, ACCEL_ERR_UNSUPPORTED,
	 "/tests/fixtures/zero/zero.so) gives no memory estimate: it has no estimate_memory slot"},
	{"bad key", "{\"ddp\": {\"bucket_cap_mbb\": 1}}", "ddp", 1, 20, 0, ACCEL_ERR_CONFIG,
	 "bucket_cap_mbb"},
	{"bad value", "{\"ddp\": {\"bucket_cap_mb\": -1}}", "ddp", 1, 20, 0, ACCEL_ERR_CONFIG,
	 "ddp.bucket_cap_mb"},
	{"a hook", "{}", "sum-hook", 1, 20, 2, ACCEL_ERR_CONFIG, "is not a sharding strategy"},
	{"ABI 1.2", "{}", "localsgd", 1, 20, 3, ACCEL_ERR_UNSUPPORTED,
	 "/tests/abi-1.2/localsgd.so) gives no memory estimate: it was built against plugin ABI "
	 "1.2, before the estimate_memory slot (1.6)"},
};

START_TEST(errors)
{
	const ecase *c = &ecases[_i];
	const char *build = getenv("ACCEL_TEST_BUILDDIR");
	char dir[4096];
	ck_assert_ptr_nonnull(build);
	snprintf(dir, sizeof(dir), "%s/tests/%s", build,
	         c->plugin_dir == 1 ? "fixtures/zero" : c->plugin_dir == 2 ? "fixtures/hook" : "abi-1.2");
	const char *dirs[1] = {dir};
	accelp_setup_opts so = {.config_json = c->config, .skip_env = 1,
	                        .extra_dirs = c->plugin_dir ? dirs : NULL,
	                        .n_extra_dirs = c->plugin_dir ? 1 : 0};
	uint64_t numel[2] = {10, 10};
	accelp_estimate_opts eo = {
		.setup = &so,
		.strategy = c->strategy,
		.in = {.world_size = c->world, .local_world_size = c->world ? c->world : 1,
		       .n_params = 2, .numel = numel, .total_numel = c->total,
		       .n_state = UINT32_MAX},
	};
	accelp_estimate_result res;
	accel_err err;
	accelp_err_clear(&err);
	int r = accelp_estimate_memory(&eo, &res, &err);
	ck_assert_msg(r == c->code, "%s: status %d (%s), expected %d", c->name, r, err.msg, c->code);
	ck_assert_msg(strstr(err.msg, c->needle), "%s: message '%s' lacks '%s'", c->name, err.msg,
	              c->needle);
}
END_TEST

static Suite *estimate_suite(void)
{
	Suite *s = suite_create("estimate");
	TCase *tc = tcase_create("ddp");
	tcase_add_loop_test(tc, ddp_equals_allocation, 0, (int)(sizeof(mcases) / sizeof(mcases[0])));
	tcase_add_test(tc, one_tensor);
	suite_add_tcase(s, tc);
	tc = tcase_create("errors");
	tcase_add_loop_test(tc, errors, 0, (int)(sizeof(ecases) / sizeof(ecases[0])));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(estimate_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
