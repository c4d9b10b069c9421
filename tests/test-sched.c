/* SPDX-License-Identifier: MIT */
/* tests/test-sched.c: learning-rate schedules against transformers'
 * formulas (values computed by its lambdas in Python, kept here as
 * literals), over many steps against the closed forms, the min_lr floor,
 * option checks and the configuration keys. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "config.h"
#include "lrsched.h"

static accel_sched *make(uint32_t type, double lr, double min_lr, uint64_t w, uint64_t t)
{
	accel_sched_opts o = {.struct_size = sizeof(o), .type = type, .lr = lr, .min_lr = min_lr,
	                      .warmup_steps = w, .total_steps = t};
	accel_sched *s = NULL;
	accel_err err = {0};
	ck_assert_msg(accelp_sched_create(&o, &s, &err) == ACCEL_OK, "%s", err.msg);
	return s;
}

/* lr = 3e-4, warmup 100, total 1000.  Columns: step, linear, cosine (both
 * min_lr 0: transformers' get_*_schedule_with_warmup times the base lr,
 * exactly), cosine with min_lr = 3e-5 (get_cosine_with_min_lr_schedule_
 * with_warmup, min_lr_rate 0.1; equal to rounding). */
static const struct {
	uint64_t step;
	double linear, cosine, cosine_min;
} hf[] = {
	{0, 0.0, 0.0, 0.0},
	{1, 2.9999999999999997e-06, 2.9999999999999997e-06, 2.9999999999999997e-06},
	{7, 2.1e-05, 2.1e-05, 2.1e-05},
	{50, 0.00015, 0.00015, 0.00015},
	{99, 0.00029699999999999996, 0.00029699999999999996, 0.00029699999999999996},
	{100, 0.0003, 0.0003, 0.0003},
	{101, 0.00029966666666666667, 0.0002999990861486685, 0.00029999917753380164},
	{333, 0.00022233333333333333, 0.00025306312662066343, 0.0002577568139585971},
	{777, 7.433333333333333e-05, 4.319609310135054e-05, 6.887648379121549e-05},
	{999, 3.333333333333333e-07, 9.138513314410623e-10, 3.0000822466198297e-05},
	{1000, 0.0, 0.0, 2.9999999999999997e-05},
};

START_TEST(matches_transformers_values)
{
	accel_sched *lin = make(ACCEL_SCHED_LINEAR, 3e-4, 0, 100, 1000);
	accel_sched *cos_ = make(ACCEL_SCHED_COSINE, 3e-4, 0, 100, 1000);
	accel_sched *cmin = make(ACCEL_SCHED_COSINE, 3e-4, 3e-5, 100, 1000);
	for (size_t i = 0; i < sizeof(hf) / sizeof(hf[0]); i++) {
		/* bit-identical to transformers without a floor */
		ck_assert_msg(accel_sched_lr(lin, hf[i].step) == hf[i].linear,
		              "linear step %llu: %.17g vs %.17g", (unsigned long long)hf[i].step,
		              accel_sched_lr(lin, hf[i].step), hf[i].linear);
		ck_assert_msg(accel_sched_lr(cos_, hf[i].step) == hf[i].cosine,
		              "cosine step %llu: %.17g vs %.17g", (unsigned long long)hf[i].step,
		              accel_sched_lr(cos_, hf[i].step), hf[i].cosine);
		ck_assert_double_eq_tol(accel_sched_lr(cmin, hf[i].step), hf[i].cosine_min,
		                        1e-14 * 3e-4);
	}
	accel_sched_free(lin);
	accel_sched_free(cos_);
	accel_sched_free(cmin);
}
END_TEST

/* Closed forms at every step of several shapes. */
START_TEST(closed_forms_every_step)
{
	const struct {
		uint64_t w, t;
		double lr, min_lr;
	} shapes[] = {{0, 1, 1.0, 0}, {0, 50, 0.1, 0.0}, {10, 50, 0.1, 0.01}, {1, 2, 2e-3, 1e-3},
	              {37, 1000, 1e-3, 0}, {999, 1000, 5e-4, 5e-5}, {5, 6, 1.0, 1.0}};
	const double pi = acos(-1.0);
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		uint64_t w = shapes[k].w, t = shapes[k].t;
		double lr = shapes[k].lr, mn = shapes[k].min_lr;
		accel_sched *c = make(ACCEL_SCHED_CONSTANT, lr, mn, w, t);
		accel_sched *l = make(ACCEL_SCHED_LINEAR, lr, mn, w, t);
		accel_sched *q = make(ACCEL_SCHED_COSINE, lr, mn, w, t);
		double prev_l = INFINITY, prev_q = INFINITY;
		for (uint64_t s = 0; s < t + 20; s++) {
			double want_c, want_l, want_q;
			if (s < w) {
				want_c = want_l = want_q = lr * (double)s / (double)w;
			} else {
				double prog = s >= t ? 1.0 : (double)(s - w) / (double)(t - w);
				want_c = lr;
				want_l = mn + (lr - mn) * (1.0 - prog);
				want_q = mn + (lr - mn) * 0.5 * (1.0 + cos(pi * prog));
			}
			double tol = 1e-14 * lr;
			ck_assert_double_eq_tol(accel_sched_lr(c, s), want_c, tol);
			ck_assert_double_eq_tol(accel_sched_lr(l, s), want_l, tol);
			ck_assert_double_eq_tol(accel_sched_lr(q, s), want_q, tol);
			ck_assert_double_eq_tol(accelp_sched_factor(q, s), want_q / lr, 1e-14);
			if (s >= w) {
				/* non-increasing after the warm-up, never below the floor */
				ck_assert(accel_sched_lr(l, s) <= prev_l + tol);
				ck_assert(accel_sched_lr(q, s) <= prev_q + tol);
				ck_assert(accel_sched_lr(l, s) >= mn - tol);
				ck_assert(accel_sched_lr(q, s) >= mn - tol);
				prev_l = accel_sched_lr(l, s);
				prev_q = accel_sched_lr(q, s);
			}
		}
		/* the end and far beyond: the floor */
		ck_assert_double_eq_tol(accel_sched_lr(l, t), mn, 1e-15);
		ck_assert_double_eq_tol(accel_sched_lr(q, t), mn, 1e-15);
		ck_assert_double_eq_tol(accel_sched_lr(q, UINT64_MAX), mn, 1e-15);
		ck_assert_double_eq(accel_sched_lr(c, UINT64_MAX), lr);
		accel_sched_free(c);
		accel_sched_free(l);
		accel_sched_free(q);
	}
}
END_TEST

START_TEST(landmarks)
{
	/* warmup 10, decay over 100 steps, lr 1, floor 0.2 */
	accel_sched *q = make(ACCEL_SCHED_COSINE, 1.0, 0.2, 10, 110);
	accel_sched *l = make(ACCEL_SCHED_LINEAR, 1.0, 0.2, 10, 110);
	ck_assert_double_eq(accel_sched_lr(q, 0), 0.0);        /* first step: 0, as HF */
	ck_assert_double_eq_tol(accel_sched_lr(q, 5), 0.5, 1e-15);
	ck_assert_double_eq(accel_sched_lr(q, 10), 1.0);
	ck_assert_double_eq_tol(accel_sched_lr(q, 60), 0.6, 1e-15);   /* midpoint */
	ck_assert_double_eq_tol(accel_sched_lr(l, 60), 0.6, 1e-15);
	ck_assert_double_eq_tol(accel_sched_lr(l, 35), 0.8, 1e-15);
	ck_assert_double_eq_tol(accel_sched_lr(q, 110), 0.2, 1e-15);
	ck_assert_double_eq_tol(accel_sched_lr(q, 200), 0.2, 1e-15);  /* no rise after T */
	ck_assert_double_eq_tol(accel_sched_lr(l, 5000), 0.2, 1e-15);
	const accel_sched_opts *o = accelp_sched_get_opts(q);
	ck_assert_uint_eq(o->type, ACCEL_SCHED_COSINE);
	ck_assert_uint_eq(o->total_steps, 110);
	ck_assert(isnan(accel_sched_lr(NULL, 3)));
	ck_assert(isnan(accelp_sched_factor(NULL, 3)));
	ck_assert_ptr_null(accel_sched_free(q));
	ck_assert_ptr_null(accel_sched_free(l));
	ck_assert_ptr_null(accel_sched_free(NULL));
	/* warm-up as long as the run: then the floor */
	accel_sched *wt = make(ACCEL_SCHED_LINEAR, 1.0, 0.1, 10, 10);
	ck_assert_double_eq_tol(accel_sched_lr(wt, 9), 0.9, 1e-15);
	ck_assert_double_eq_tol(accel_sched_lr(wt, 10), 0.1, 1e-15);
	accel_sched_free(wt);
	/* lr 0: the rate is 0, the factor still has the shape */
	accel_sched *z = make(ACCEL_SCHED_COSINE, 0.0, 0.0, 4, 8);
	ck_assert_double_eq(accel_sched_lr(z, 2), 0.0);
	ck_assert_double_eq_tol(accelp_sched_factor(z, 2), 0.5, 1e-15);
	ck_assert_double_eq_tol(accelp_sched_factor(z, 6), 0.5, 1e-15);
	accel_sched_free(z);
	/* constant without warm-up is flat from step 0 */
	accel_sched *c = make(ACCEL_SCHED_CONSTANT, 0.25, 0, 0, 0);
	ck_assert_double_eq(accel_sched_lr(c, 0), 0.25);
	ck_assert_double_eq(accel_sched_lr(c, 123456789), 0.25);
	accel_sched_free(c);
}
END_TEST

START_TEST(type_names)
{
	ck_assert_int_eq(accel_sched_type_parse("constant"), ACCEL_SCHED_CONSTANT);
	ck_assert_int_eq(accel_sched_type_parse("linear"), ACCEL_SCHED_LINEAR);
	ck_assert_int_eq(accel_sched_type_parse("cosine"), ACCEL_SCHED_COSINE);
	ck_assert_int_eq(accel_sched_type_parse("Cosine"), -1);
	ck_assert_int_eq(accel_sched_type_parse(NULL), -1);
	ck_assert_str_eq(accel_sched_type_name(ACCEL_SCHED_LINEAR), "linear");
	ck_assert_ptr_null(accel_sched_type_name(3));
}
END_TEST

static void bad(uint32_t type, double lr, double mn, uint64_t w, uint64_t t, const char *want)
{
	accel_sched_opts o = {.struct_size = sizeof(o), .type = type, .lr = lr, .min_lr = mn,
	                      .warmup_steps = w, .total_steps = t};
	accel_sched *s = (accel_sched *)&o;
	accel_err err = {0};
	ck_assert_int_eq(accelp_sched_create(&o, &s, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_eq(s, (accel_sched *)&o);       /* untouched on failure */
	ck_assert_msg(strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
}

START_TEST(bad_options)
{
	bad(ACCEL_SCHED_LINEAR, 1e-3, 0, 100, 99,
	    "total_steps > 0 and >= accel_sched_opts.warmup_steps, got total_steps 99");
	bad(ACCEL_SCHED_COSINE, 1e-3, 0, 0, 0, "total_steps is not set");
	bad(ACCEL_SCHED_LINEAR, -1.0, 0, 0, 10, "lr must be a finite number >= 0, got -1");
	bad(ACCEL_SCHED_LINEAR, NAN, 0, 0, 10, "lr must be a finite number");
	bad(ACCEL_SCHED_LINEAR, 1e-3, 2e-3, 0, 10, "min_lr must be in [0,");
	bad(ACCEL_SCHED_LINEAR, 1e-3, -1e-5, 0, 10, "min_lr");
	bad(7, 1e-3, 0, 0, 10, "type 7 is not one of");
	accel_sched *s = NULL;
	accel_err err = {0};
	accel_sched_opts o = {0};
	ck_assert_int_eq(accelp_sched_create(&o, &s, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "struct_size"));
	ck_assert_int_eq(accel_sched_new(NULL, NULL, &s), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_null(s);
	/* a constant schedule ignores total_steps */
	o = (accel_sched_opts){.struct_size = sizeof(o), .type = ACCEL_SCHED_CONSTANT, .lr = 1,
	                       .warmup_steps = 10};
	ck_assert_int_eq(accel_sched_new(NULL, &o, &s), ACCEL_OK);
	ck_assert_double_eq_tol(accel_sched_lr(s, 4), 0.4, 1e-15);
	accel_sched_free(s);
}
END_TEST

/* ---- configuration ----------------------------------------------------------- */

/* A resolved configuration from JSON text, or NULL with the reason in err
 * when the configuration module refuses it. */
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
	accel_config *cfg = config_from(
		"{\"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 0.0003}},"
		" \"scheduler\": {\"type\": \"cosine\", \"warmup_steps\": 100,"
		"                 \"total_steps\": 1000, \"min_lr\": 3e-5}}", &err);
	ck_assert_msg(cfg != NULL, "config refused: %s", err.msg);
	accel_sched *s = NULL;
	ck_assert_msg(accelp_sched_new_from_config(cfg, &s, &err) == ACCEL_OK, "%s", err.msg);
	const accel_sched_opts *o = accelp_sched_get_opts(s);
	ck_assert_uint_eq(o->type, ACCEL_SCHED_COSINE);
	ck_assert_uint_eq(o->warmup_steps, 100);
	ck_assert_uint_eq(o->total_steps, 1000);
	ck_assert_double_eq(o->min_lr, 3e-5);
	ck_assert_double_eq(o->lr, 3e-4);
	for (size_t i = 0; i < sizeof(hf) / sizeof(hf[0]); i++)
		ck_assert_double_eq_tol(accel_sched_lr(s, hf[i].step), hf[i].cosine_min, 1e-14 * 3e-4);
	accel_sched_free(s);
	accelp_config_free(cfg);

	/* defaults: constant at the optimizer's lr */
	accelp_err_clear(&err);
	cfg = config_from("{\"optimizer\": {\"params\": {\"lr\": 0.5}}}", &err);
	ck_assert_msg(cfg != NULL, "config refused: %s", err.msg);
	ck_assert_int_eq(accelp_sched_new_from_config(cfg, &s, &err), ACCEL_OK);
	ck_assert_uint_eq(accelp_sched_get_opts(s)->type, ACCEL_SCHED_CONSTANT);
	ck_assert_double_eq(accel_sched_lr(s, 0), 0.5);
	ck_assert_double_eq(accel_sched_lr(s, 1000000), 0.5);
	accel_sched_free(s);
	accelp_config_free(cfg);
}
END_TEST

START_TEST(from_config_errors)
{
	/* Each bad setting is refused, by the configuration's cross-checks or
	 * by the schedule, with a message that names the key. */
	const struct {
		const char *json, *want;
	} cases[] = {
		{"{\"scheduler\": {\"type\": \"linear\", \"warmup_steps\": 10}}",
		 "scheduler.total_steps"},
		{"{\"optimizer\": {\"params\": {\"lr\": 0.1}},"
		 " \"scheduler\": {\"type\": \"cosine\", \"total_steps\": 10, \"min_lr\": 0.5}}",
		 "scheduler.min_lr"},
		{"{\"scheduler\": {\"type\": \"cosine\", \"total_steps\": 10, \"warmup_steps\": 11}}",
		 "scheduler.warmup_steps"},
		{"{\"scheduler\": {\"type\": \"exponential\"}}", "exponential"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		accel_err err = {0};
		accel_config *cfg = config_from(cases[i].json, &err);
		if (cfg) {
			accel_sched *s = (accel_sched *)&err;
			ck_assert_int_eq(accelp_sched_new_from_config(cfg, &s, &err), ACCEL_ERR_CONFIG);
			ck_assert_ptr_eq(s, (accel_sched *)&err);
			accelp_config_free(cfg);
		}
		ck_assert_int_eq(err.code, ACCEL_ERR_CONFIG);
		ck_assert_msg(strstr(err.msg, cases[i].want), "case %zu: \"%s\" lacks \"%s\"", i,
		              err.msg, cases[i].want);
	}
}
END_TEST

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("formulas");
	tcase_add_test(tc, matches_transformers_values);
	tcase_add_test(tc, closed_forms_every_step);
	tcase_add_test(tc, landmarks);
	tcase_add_test(tc, type_names);
	tcase_add_test(tc, bad_options);
	suite_add_tcase(s, tc);
	tc = tcase_create("config");
	tcase_add_test(tc, from_config);
	tcase_add_test(tc, from_config_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sched_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
