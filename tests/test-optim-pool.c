/* SPDX-License-Identifier: MIT */
/* tests/test-optim-pool.c: host->optim_step_n and its thread pool
 * (core/optim_pool.c, ABI minor 6).
 *
 * - AdamW and SGD with momentum (and nesterov), f32 and bf16 gradients,
 *   many ranges of odd lengths (two of them cut into pieces), three steps
 *   on 1..8 threads: parameters and state equal sequential
 *   accelp_optim_step_range bit for bit (memcmp);
 * - an error in one range is reported with that range's message;
 * - the default thread count (OMP_NUM_THREADS, else the affinity mask
 *   divided by the ranks on the node);
 * - through the host table in a context: the result equals optim_step,
 *   device views, grad_scale_dev with host views, a range that does not fit
 *   its parameter (named by index) and a call outside accel_step() are
 *   refused with messages. */
#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "backends/common/half.h"
#include "ctx-impl.h"
#include "optim.h"
#include "optim_pool.h"
#include "train-impl.h"

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static float rnd(uint64_t *s)
{
	return (float)((double)(splitmix(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* Range lengths: empty, tiny, around the 16-element vector width, and two
 * longer than a piece (ACCEL_OPTIM_POOL_PIECE) so they are cut. */
static const uint64_t lens[] = {0, 1, 3, 15, 16, 17, 31, 33, 97, 255, 1001, 4099,
                                ACCEL_OPTIM_POOL_PIECE + 7, 2 * ACCEL_OPTIM_POOL_PIECE + 45,
                                63, 5, 129, 777, 2, 19};
#define NR (sizeof(lens) / sizeof(lens[0]))

typedef struct arrays {
	float *p[NR], *st[NR][ACCEL_OPTIM_MAX_STATE];
	void *g[NR];
} arrays;

static void fill(arrays *a, uint32_t gdtype, uint32_t ns, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t r = 0; r < NR; r++) {
		uint64_t n = lens[r] ? lens[r] : 1;
		a->p[r] = malloc(n * 4);
		a->g[r] = malloc(n * 4);
		ck_assert(a->p[r] && a->g[r]);
		for (uint64_t i = 0; i < n; i++) {
			a->p[r][i] = rnd(&s);
			float g = rnd(&s) * 0.1f;
			if (gdtype == ACCEL_DTYPE_BF16)
				((uint16_t *)a->g[r])[i] = accel_f32_to_bf16(g);
			else
				((float *)a->g[r])[i] = g;
		}
		for (uint32_t k = 0; k < ACCEL_OPTIM_MAX_STATE; k++) {
			a->st[r][k] = k < ns ? calloc(n, 4) : NULL;
			ck_assert(k >= ns || a->st[r][k]);
		}
	}
}

static void drop(arrays *a)
{
	for (size_t r = 0; r < NR; r++) {
		free(a->p[r]);
		free(a->g[r]);
		for (uint32_t k = 0; k < ACCEL_OPTIM_MAX_STATE; k++)
			free(a->st[r][k]);
	}
}

static void same(const arrays *a, const arrays *b, uint32_t ns, const char *what, uint32_t thr)
{
	for (size_t r = 0; r < NR; r++) {
		ck_assert_msg(!memcmp(a->p[r], b->p[r], lens[r] * 4), "%s, %u threads: range %zu "
		              "(%llu elements): parameters differ", what, thr, r,
		              (unsigned long long)lens[r]);
		for (uint32_t k = 0; k < ns; k++)
			ck_assert_msg(!memcmp(a->st[r][k], b->st[r][k], lens[r] * 4), "%s, %u threads: "
			              "range %zu: state %u differs", what, thr, r, k);
	}
}

static const struct {
	const char *name;
	uint32_t type, gdtype;
	double momentum, wd;
	int nesterov;
} cases[] = {
	{"adamw f32", ACCEL_OPTIM_ADAMW, ACCEL_DTYPE_F32, 0, 0.01, 0},
	{"adamw bf16 grads", ACCEL_OPTIM_ADAMW, ACCEL_DTYPE_BF16, 0, 0.1, 0},
	{"sgd momentum", ACCEL_OPTIM_SGD, ACCEL_DTYPE_F32, 0.9, 0.001, 0},
	{"sgd nesterov bf16", ACCEL_OPTIM_SGD, ACCEL_DTYPE_BF16, 0.9, 0, 1},
};

START_TEST(bit_identical)
{
	accel_optim_opts o;
	accelp_optim_opts_init(&o, cases[_i].type);
	o.lr = 0.01;
	o.weight_decay = cases[_i].wd;
	o.momentum = cases[_i].momentum;
	o.nesterov = cases[_i].nesterov;
	accel_optim *opt = NULL;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_optim_new(&o, &opt, &err), ACCEL_OK);
	uint32_t ns = accelp_optim_state_count(opt), gd = cases[_i].gdtype;
	ck_assert_uint_eq(ns, cases[_i].type == ACCEL_OPTIM_ADAMW ? 2 : 1);
	accel_optim_pool *pool = NULL;
	ck_assert_int_eq(accelp_optim_pool_new(&pool), ACCEL_OK);
	for (uint32_t thr = 1; thr <= 8; thr++) {
		arrays ref, got;
		fill(&ref, gd, ns, 42 + _i);
		fill(&got, gd, ns, 42 + _i);
		accel_optim_task tasks[NR];
		for (size_t r = 0; r < NR; r++)
			tasks[r] = (accel_optim_task){.grp = accelp_optim_get_group(opt, r % 2),
			                              .param = got.p[r], .grad = got.g[r], .gdtype = gd,
			                              .state = {got.st[r][0], got.st[r][1]},
			                              .numel = lens[r], .grad_scale = r % 3 ? 1.0 : 0.5};
		for (uint64_t step = 1; step <= 3; step++) {
			double lr = 0.01 / (double)step;
			for (size_t r = 0; r < NR; r++)
				ck_assert_int_eq(accelp_optim_step_range(opt,
				                 accelp_optim_get_group(opt, r % 2), step, lr, ref.p[r],
				                 ref.g[r], gd, ref.st[r], lens[r], tasks[r].grad_scale,
				                 &err), ACCEL_OK);
			int rc = accelp_optim_pool_step(pool, opt, step, lr, tasks, NR, thr, &err);
			ck_assert_msg(rc == ACCEL_OK, "%s", err.msg);
		}
		same(&ref, &got, ns, cases[_i].name, thr);
		/* the values moved (the comparison is not of two untouched copies) */
		uint64_t s = 42 + _i;
		ck_assert(ref.p[NR - 1][0] != rnd(&s));
		drop(&ref);
		drop(&got);
	}
	pool = accelp_optim_pool_free(pool);
	ck_assert_ptr_null(pool);
	accelp_optim_free(opt);
}
END_TEST

START_TEST(error_in_one_range)
{
	accel_optim_opts o;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
	accel_optim *opt = NULL;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_optim_new(&o, &opt, &err), ACCEL_OK);
	float p[64] = {0}, g[64] = {0};
	accel_optim_task tasks[6];
	for (int i = 0; i < 6; i++)
		tasks[i] = (accel_optim_task){.param = p + 10 * i, .grad = g + 10 * i,
		                              .gdtype = ACCEL_DTYPE_F32, .numel = 10,
		                              .grad_scale = 1};
	tasks[4].param = NULL;  /* NULL with numel > 0 */
	accel_optim_pool *pool = NULL;
	ck_assert_int_eq(accelp_optim_pool_new(&pool), ACCEL_OK);
	ck_assert_int_eq(accelp_optim_pool_step(pool, opt, 1, 0.1, tasks, 6, 4, &err),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(err.msg, "NULL") != NULL, "%s", err.msg);
	accelp_optim_pool_free(pool);
	accelp_optim_free(opt);
}
END_TEST

START_TEST(default_threads)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	uint32_t cpus = (uint32_t)CPU_COUNT(&set);
	setenv("OMP_NUM_THREADS", "3", 1);
	ck_assert_uint_eq(accelp_optim_pool_default_threads(4), 3);
	setenv("OMP_NUM_THREADS", "6,2", 1);
	ck_assert_uint_eq(accelp_optim_pool_default_threads(1), 6);
	setenv("OMP_NUM_THREADS", "0", 1);
	ck_assert_uint_eq(accelp_optim_pool_default_threads(1), cpus);
	unsetenv("OMP_NUM_THREADS");
	ck_assert_uint_eq(accelp_optim_pool_default_threads(1), cpus);
	ck_assert_uint_eq(accelp_optim_pool_default_threads(2), cpus / 2 ? cpus / 2 : 1);
	ck_assert_uint_eq(accelp_optim_pool_default_threads(100000), 1);
}
END_TEST

/* ---- through the host table ------------------------------------------------ */

static accel_ctx *ddp_ctx(void)
{
	const char *json = "{\"strategy\": \"ddp\", \"optimizer\": {\"type\": \"adamw\", "
	                   "\"params\": {\"lr\": 0.01}}}";
	accel_opts opts = {.struct_size = sizeof(opts), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&opts, &ctx);
	ck_assert_msg(r == ACCEL_OK, "%s", ctx ? accel_errmsg(ctx) : "");
	int64_t shape = 300;
	accel_init init = accel_init_uniform(-1, 1);
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32, .unit = "u",
	                      .name = "w", .ndim = 1, .shape = &shape, .init = &init};
	ck_assert_int_eq(accel_model_add(ctx, &d, NULL), ACCEL_OK);
	ck_assert_msg(accel_prepare(ctx) == ACCEL_OK, "%s", accel_errmsg(ctx));
	return ctx;
}

static accel_optim_args_v1 args_of(float *m, float *g, float *s0, float *s1, uint64_t off,
                                   uint64_t n)
{
	accel_optim_args_v1 a = {.struct_size = sizeof(a), .param = 0, .offset = off,
	                         .grad_scale = 1.0};
	a.master = (accel_view){sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, m, n};
	a.grad = (accel_view){sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, g, n};
	a.state[0] = s0;
	a.state[1] = s1;
	return a;
}

START_TEST(host_member)
{
	accel_ctx *ctx = ddp_ctx();
	const accel_host_v1 *H = accelp_host_table();
	accel_host *h = &ctx->active[0].host;
	ck_assert(ACCEL_HOST_HAS(H, optim_step_n));
	float m[2][300], g[300], s[2][2][300];
	uint64_t seed = 7;
	for (int i = 0; i < 300; i++) {
		m[0][i] = m[1][i] = rnd(&seed);
		g[i] = rnd(&seed);
	}
	memset(s, 0, sizeof(s));
	/* three ranges of the parameter: [0,100) [100,217) [217,300) */
	static const uint64_t cut[4] = {0, 100, 217, 300};
	accel_optim_args_v1 a[2][3];
	for (int k = 0; k < 2; k++)
		for (int r = 0; r < 3; r++)
			a[k][r] = args_of(m[k] + cut[r], g + cut[r], s[k][0] + cut[r], s[k][1] + cut[r],
			                  cut[r], cut[r + 1] - cut[r]);
	/* outside accel_step() */
	ck_assert_int_eq(H->optim_step_n(h, a[1], 3, 2), ACCEL_ERR_STATE);
	ck_assert_msg(strstr(accel_errmsg(ctx), "optim_step_n called outside accel_step()"), "%s",
	              accel_errmsg(ctx));
	accel_clear_error(ctx);
	ctx->train->in_step = 1;  /* as inside the strategy's step() */
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(H->optim_step(h, &a[0][r]), ACCEL_OK);
	ck_assert_msg(H->optim_step_n(h, a[1], 3, 0) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert(!memcmp(m[0], m[1], sizeof(m[0])));
	ck_assert(!memcmp(s[0], s[1], sizeof(s[0])));
	ck_assert(m[1][5] != m[1][5] + 1 && g[0] != 0);

	static const struct {
		const char *what;
		int code;
		const char *msg;
	} bad[] = {
		{"device", ACCEL_ERR_INVALID_ARG, "optim_step_n (range 1 of 3)('w'): master and "
		 "gradient are on device 1:0; optim_step_n takes host (ACCEL_DEVICE_CPU) views only"},
		{"grad_scale_dev", ACCEL_ERR_INVALID_ARG, "optim_step_n (range 1 of 3)('w'): "
		 "grad_scale_dev (a factor in device memory) for parameters in host memory"},
		{"too long", ACCEL_ERR_INVALID_ARG, "optim_step_n (range 1 of 3)('w'): range [100, "
		 "+201) with f32 master and 201 gradients does not fit the parameter (300 elements"},
		{"param", ACCEL_ERR_INVALID_ARG, "optim_step_n (range 1 of 3): bad arguments "
		 "(struct_size"},
	};
	static const double factor = 1.0;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		accel_optim_args_v1 b[3] = {a[1][0], a[1][1], a[1][2]};
		switch (i) {
		case 0:
			b[1].master.device = b[1].grad.device = ACCEL_DEVICE_CUDA;
			break;
		case 1:
			b[1].grad_scale_dev = &factor;
			break;
		case 2:
			b[1].master.numel = b[1].grad.numel = 201;
			break;
		default:
			b[1].param = 9;
		}
		float before = m[1][0];
		ck_assert_int_eq(H->optim_step_n(h, b, 3, 2), bad[i].code);
		ck_assert_msg(strstr(accel_errmsg(ctx), bad[i].msg), "%s: %s", bad[i].what,
		              accel_errmsg(ctx));
		/* checked before anything is stepped */
		ck_assert(m[1][0] == before);
		accel_clear_error(ctx);
	}
	ck_assert_int_eq(H->optim_step_n(h, NULL, 0, 0), ACCEL_OK);
	ck_assert_int_eq(H->optim_step_n(h, NULL, 2, 0), ACCEL_ERR_INVALID_ARG);
	accel_clear_error(ctx);
	ctx->train->in_step = 0;
	accel_ctx_free(ctx);
}
END_TEST

static Suite *optim_pool_suite(void)
{
	Suite *s = suite_create("optim_pool");
	TCase *tc = tcase_create("pool");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, bit_identical, 0, sizeof(cases) / sizeof(cases[0]));
	tcase_add_test(tc, error_in_one_range);
	tcase_add_test(tc, default_threads);
	tcase_add_test(tc, host_member);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(optim_pool_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
