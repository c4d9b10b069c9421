/* SPDX-License-Identifier: MIT */
/* tests/test-scaler-rule.c: plugins/scaler's update rule (scaler_rule.c) at
 * its edges, table-driven: each row is a setting, a start state, a
 * sequence of steps (o = overflow, . = good) and the state expected after
 * it.  The step-by-step trace through accel_step is tests/test-scaler.sh;
 * this covers what a short trace cannot reach (the f32 bound, the scale
 * reaching 0, a count loaded above the interval) and the settings check. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scaler.h"

static scaler_cfg torch_cfg(void)
{
	return (scaler_cfg){.enabled = 1, .dynamic = 1, .consecutive_hysteresis = 0,
	                    .init_scale = 65536, .growth_factor = 2, .backoff_factor = 0.5,
	                    .min_loss_scale = 0, .growth_interval = 2000, .hysteresis = 1};
}

static const struct {
	const char *what;
	double init, growth, backoff, floor;
	int64_t interval, hysteresis;
	int32_t consecutive, dynamic, enabled;
	scaler_rule_state start;
	const char *steps;
	scaler_rule_state want;
	int want_rc;
} rows[] = {
	/* torch: growth after `interval` good steps, back-off resets the count */
	{"torch growth", 1024, 2, 0.5, 0, 3, 1, 0, 1, 1, {1024, 0, 1}, "...", {2048, 0, 1}, 0},
	{"torch back-off", 1024, 2, 0.5, 0, 3, 1, 0, 1, 1, {1024, 2, 1}, "o", {512, 0, 1}, 0},
	{"count restarts", 1024, 2, 0.5, 0, 3, 1, 0, 1, 1, {1024, 0, 1}, "..o..", {512, 2, 1}, 0},
	/* torch's f32 arithmetic: 3 * 0.1 rounds to f32 */
	{"f32 back-off", 3, 2, 0.1, 0, 5, 1, 0, 1, 1, {3, 0, 1}, "o", {(float)(3 * 0.1), 0, 1}, 0},
	/* never grows past f32's largest value (torch: "do not grow to inf") */
	{"f32 bound", 1, 2, 0.5, 0, 1, 1, 0, 1, 1, {FLT_MAX / 1.5f, 0, 1}, ".",
	 {FLT_MAX / 1.5f, 0, 1}, 0},
	/* a count loaded from a run with a longer interval grows at once */
	{"count above interval", 8, 2, 0.5, 0, 3, 1, 0, 1, 1, {8, 7, 1}, ".", {16, 0, 1}, 0},
	/* DeepSpeed's hysteresis: absorbed, then backs off while left is 1 */
	{"hysteresis 2", 1024, 2, 0.5, 0, 3, 2, 0, 1, 1, {1024, 0, 2}, "o", {1024, 0, 1}, 0},
	{"hysteresis 2 twice", 1024, 2, 0.5, 0, 3, 2, 0, 1, 1, {1024, 0, 2}, "ooo", {256, 0, 1}, 0},
	{"refill on growth", 1024, 2, 0.5, 0, 3, 2, 0, 1, 1, {1024, 0, 2}, "o...", {2048, 0, 2}, 0},
	{"no refill before growth", 1024, 2, 0.5, 0, 3, 2, 0, 1, 1, {1024, 0, 2}, "o..o",
	 {512, 0, 1}, 0},
	{"consecutive refill", 1024, 2, 0.5, 0, 3, 2, 1, 1, 1, {1024, 0, 2}, "o.o", {1024, 0, 1}, 0},
	/* the floor */
	{"floor", 1024, 2, 0.5, 256, 9, 1, 0, 1, 1, {1024, 0, 1}, "oooo", {256, 0, 1}, 0},
	{"floor between", 1024, 2, 0.5, 300, 9, 1, 0, 1, 1, {1024, 0, 1}, "oo", {300, 0, 1}, 0},
	/* static and disabled: the state never moves */
	{"static", 512, 2, 0.5, 0, 1, 1, 0, 0, 1, {512, 0, 1}, "o..o.", {512, 0, 1}, 0},
	{"disabled", 512, 2, 0.5, 0, 1, 1, 0, 1, 0, {512, 0, 1}, "o..o.", {512, 0, 1}, 0},
	/* down to 0: refused, the scale left as it was */
	{"scale to 0", 1, 2, 0.5, 0, 9, 1, 0, 1, 1, {0x1p-149f, 0, 1}, "o", {0x1p-149f, 0, 1}, -1},
};

START_TEST(test_rule)
{
	scaler_cfg c = {.enabled = rows[_i].enabled, .dynamic = rows[_i].dynamic,
	                .consecutive_hysteresis = rows[_i].consecutive,
	                .init_scale = rows[_i].init, .growth_factor = rows[_i].growth,
	                .backoff_factor = rows[_i].backoff, .min_loss_scale = rows[_i].floor,
	                .growth_interval = rows[_i].interval, .hysteresis = rows[_i].hysteresis};
	scaler_rule_state st = rows[_i].start;
	int rc = 0;
	for (const char *p = rows[_i].steps; *p && !rc; p++)
		rc = scaler_rule_update(&c, &st, *p == 'o');
	ck_assert_msg(rc == rows[_i].want_rc && st.scale == rows[_i].want.scale &&
	                  st.growth_tracker == rows[_i].want.growth_tracker &&
	                  st.hysteresis_left == rows[_i].want.hysteresis_left,
	              "%s: rc %d scale %.9g tracker %lld hysteresis %lld; want rc %d scale %.9g "
	              "tracker %lld hysteresis %lld", rows[_i].what, rc, (double)st.scale,
	              (long long)st.growth_tracker, (long long)st.hysteresis_left, rows[_i].want_rc,
	              (double)rows[_i].want.scale, (long long)rows[_i].want.growth_tracker,
	              (long long)rows[_i].want.hysteresis_left);
}
END_TEST

/* torch's default trace: 2000 good steps double 65536, an overflow halves */
START_TEST(test_torch_defaults)
{
	scaler_cfg c = torch_cfg();
	scaler_rule_state st = scaler_rule_initial(&c);
	ck_assert(st.scale == 65536.0f && st.growth_tracker == 0 && st.hysteresis_left == 1);
	for (int i = 0; i < 1999; i++)
		scaler_rule_update(&c, &st, 0);
	ck_assert(st.scale == 65536.0f && st.growth_tracker == 1999);
	scaler_rule_update(&c, &st, 0);
	ck_assert(st.scale == 131072.0f && st.growth_tracker == 0);
	scaler_rule_update(&c, &st, 1);
	ck_assert(st.scale == 65536.0f && st.growth_tracker == 0);
}
END_TEST

static const struct {
	const char *field;
	double value;
	const char *msg;
} bad_rows[] = {
	{"init_scale", 0, "scaler.init_scale is 0; it must be > 0"},
	{"init_scale", 1e39, "representable as a finite f32"},
	{"init_scale", 1e-50, "representable as a finite f32"},
	{"growth_factor", 1, "scaler.growth_factor is 1; it must be > 1"},
	{"backoff_factor", 1, "scaler.backoff_factor is 1; it must be in (0, 1)"},
	{"backoff_factor", 0, "scaler.backoff_factor is 0; it must be in (0, 1)"},
	{"growth_interval", 0, "scaler.growth_interval is 0; it must be >= 1"},
	{"hysteresis", 0, "scaler.hysteresis is 0; it must be >= 1"},
	{"min_loss_scale", -1, "scaler.min_loss_scale is -1; it must be >= 0"},
	{"min_loss_scale", 1e6, "scaler.init_scale (65536) is below scaler.min_loss_scale (1e+06)"},
};

START_TEST(test_cfg_check)
{
	scaler_cfg c = torch_cfg();
	char buf[256];
	ck_assert_str_eq(scaler_cfg_check(&c, buf, sizeof(buf)), "");
	const char *f = bad_rows[_i].field;
	double v = bad_rows[_i].value;
	if (!strcmp(f, "init_scale"))
		c.init_scale = v;
	else if (!strcmp(f, "growth_factor"))
		c.growth_factor = v;
	else if (!strcmp(f, "backoff_factor"))
		c.backoff_factor = v;
	else if (!strcmp(f, "growth_interval"))
		c.growth_interval = (int64_t)v;
	else if (!strcmp(f, "hysteresis"))
		c.hysteresis = (int64_t)v;
	else
		c.min_loss_scale = v;
	const char *msg = scaler_cfg_check(&c, buf, sizeof(buf));
	ck_assert_msg(strstr(msg, bad_rows[_i].msg), "%s = %g: message '%s' lacks '%s'", f, v, msg,
	              bad_rows[_i].msg);
}
END_TEST

static Suite *scaler_rule_suite(void)
{
	Suite *s = suite_create("scaler-rule");
	TCase *tc = tcase_create("rule");
	tcase_add_loop_test(tc, test_rule, 0, (int)(sizeof(rows) / sizeof(rows[0])));
	tcase_add_test(tc, test_torch_defaults);
	tcase_add_loop_test(tc, test_cfg_check, 0, (int)(sizeof(bad_rows) / sizeof(bad_rows[0])));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(scaler_rule_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
