/* SPDX-License-Identifier: MIT */
/* tests/test-tracker.c: the trackers' pieces (core/tracker*.c): CRC-32C
 * against its published check value, the CSV tracker's header growth,
 * quoting, nested keys and continuation of an existing file, the event
 * writer's framing, and log_with/logging_dir errors through accel_ctx_new.
 * (tests/test-trackers.sh reads real runs' files with an outside reader.) */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "accel/accel.h"
#include "error.h"
#include "tracker.h"

static char tmpdir[256];

static void setup(void)
{
	const char *base = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/accel-tracker-XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static char *slurp(const char *path, size_t *ret_n)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "%s", path);
	char *buf = malloc(1 << 16);
	size_t n = fread(buf, 1, (1 << 16) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if (ret_n)
		*ret_n = n;
	return buf;
}

START_TEST(crc32c_check_value)
{
	/* the CRC-32C check value (RFC 3720 B.4; iSCSI) */
	ck_assert_uint_eq(accelp_crc32c("123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(accelp_crc32c("", 0), 0);
	uint32_t c = accelp_crc32c("123456789", 9);
	ck_assert_uint_eq(accelp_crc32c_masked("123456789", 9),
	                  (((c >> 15) | (c << 17)) + 0xA282EAD8u) & 0xFFFFFFFFu);
}
END_TEST

static json_t *rec(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, JSON_PRESERVE_ORDER, &e);
	ck_assert_msg(j != NULL, "%s", e.text);
	return j;
}

START_TEST(csv_columns_grow)
{
	accel_err err = {0};
	accel_tracker_csv *c = NULL;
	char dir[400], path[450];
	snprintf(dir, sizeof(dir), "%s/a/b", tmpdir);   /* made, parents too */
	snprintf(path, sizeof(path), "%s/metrics.csv", dir);
	ck_assert_int_eq(accelp_tracker_csv_new(dir, &err, &c), ACCEL_OK);
	json_t *r1 = rec("{\"step\":1,\"time\":10.5,\"loss\":0.25}");
	json_t *r2 = rec("{\"step\":2,\"time\":11,\"loss\":\"NaN\",\"eval\":{\"acc\":0.5,"
	                 "\"note\":\"a,\\\"b\\\"\"}}");
	json_t *r3 = rec("{\"step\":3,\"time\":12,\"eval\":{\"acc\":0.75},\"ok\":true,"
	                 "\"v\":[1,2]}");
	ck_assert_int_eq(accelp_tracker_csv_write(c, r1, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_tracker_csv_write(c, r2, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_tracker_csv_write(c, r3, &err), ACCEL_OK);
	c = accelp_tracker_csv_free(c);
	char *got = slurp(path, NULL);
	ck_assert_str_eq(got,
	                 "step,time,loss,eval/acc,eval/note,ok,v\n"
	                 "1,10.5,0.25,,,,\n"
	                 "2,11,NaN,0.5,\"a,\"\"b\"\"\",,\n"
	                 "3,12,,0.75,,true,\"[1,2]\"\n");
	free(got);

	/* a resumed run: the same header, one more row, no second header */
	ck_assert_int_eq(accelp_tracker_csv_new(dir, &err, &c), ACCEL_OK);
	json_t *r4 = rec("{\"step\":4,\"time\":13,\"ok\":false,\"loss\":1e300}");
	ck_assert_int_eq(accelp_tracker_csv_write(c, r4, &err), ACCEL_OK);
	c = accelp_tracker_csv_free(c);
	got = slurp(path, NULL);
	ck_assert_str_eq(got,
	                 "step,time,loss,eval/acc,eval/note,ok,v\n"
	                 "1,10.5,0.25,,,,\n"
	                 "2,11,NaN,0.5,\"a,\"\"b\"\"\",,\n"
	                 "3,12,,0.75,,true,\"[1,2]\"\n"
	                 "4,13,1.0000000000000001e+300,,,false,\n");
	free(got);
	json_decref(r1);
	json_decref(r2);
	json_decref(r3);
	json_decref(r4);
}
END_TEST

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

START_TEST(tb_framing)
{
	accel_err err = {0};
	accel_tracker_tb *tb = NULL;
	ck_assert_int_eq(accelp_tracker_tb_new(tmpdir, &err, &tb), ACCEL_OK);
	char path[512];
	snprintf(path, sizeof(path), "%s", accelp_tracker_tb_path(tb));
	ck_assert_ptr_nonnull(strstr(path, "/events.out.tfevents."));
	json_t *r = rec("{\"step\":300,\"time\":1.5,\"loss\":0.5,\"name\":\"x\"}");
	ck_assert_int_eq(accelp_tracker_tb_write(tb, r, &err), ACCEL_OK);
	json_t *none = rec("{\"step\":301,\"time\":2,\"name\":\"only text\"}");
	ck_assert_int_eq(accelp_tracker_tb_write(tb, none, &err), ACCEL_OK);  /* no event */
	tb = accelp_tracker_tb_free(tb);
	size_t n;
	unsigned char *b = (unsigned char *)slurp(path, &n);
	/* record 1: file_version */
	uint64_t len = le64(b);
	ck_assert_uint_eq(le32(b + 8), accelp_crc32c_masked(b, 8));
	ck_assert_uint_eq(le32(b + 12 + len), accelp_crc32c_masked(b + 12, len));
	ck_assert_int_eq(b[12], 0x09);                        /* wall_time, fixed64 */
	ck_assert_int_eq(b[21], 0x1A);                        /* file_version */
	ck_assert_int_eq(b[22], 13);
	ck_assert_int_eq(memcmp(b + 23, "brain.Event:2", 13), 0);
	/* record 2: the scalar, byte for byte */
	unsigned char *e = b + 16 + len;
	uint64_t len2 = le64(e);
	ck_assert_uint_eq(le32(e + 8), accelp_crc32c_masked(e, 8));
	ck_assert_uint_eq(le32(e + 12 + len2), accelp_crc32c_masked(e + 12, len2));
	static const unsigned char want[] = {
		0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,   /* wall_time 1.5 */
		0x10, 0xAC, 0x02,                     /* step 300 */
		0x2A, 0x0D,                           /* summary, 13 bytes */
		0x0A, 0x0B,                           /* value, 11 bytes */
		0x0A, 0x04, 'l', 'o', 's', 's',       /* tag */
		0x15, 0, 0, 0, 0x3F,                  /* simple_value 0.5f */
	};
	ck_assert_uint_eq(len2, sizeof(want));
	ck_assert_int_eq(memcmp(e + 12, want, sizeof(want)), 0);
	ck_assert_uint_eq(n, 16 + len + 16 + len2);           /* nothing for record 301 */
	free(b);
	json_decref(r);
	json_decref(none);
}
END_TEST

static void ctx_fails(const char *json, const char *text)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	ck_assert_int_ne(rc, ACCEL_OK);
	ck_assert_msg(strstr(accel_errmsg(ctx), text), "message: %s\nexpected: %s",
	              accel_errmsg(ctx), text);
	accel_ctx_free(ctx);
}

START_TEST(config_errors)
{
	ctx_fails("{\"log_with\": [\"jsonl\", \"wandb\"]}",
	          "config key 'log_with' (<config_json>:1:14): unknown tracker 'wandb'; accel writes "
	          "jsonl, csv, tensorboard (or all)");
	ctx_fails("{\"log_with\": [\"tensorboard\"]}",
	          "selects tensorboard, which writes into a directory: set 'logging_dir'");
	ctx_fails("{\"log_with\": \"csv\"}", "log_with");
	char json[600];
	snprintf(json, sizeof(json), "{\"log_with\": [\"all\"], \"logging_dir\": \"%s/f/x\"}",
	         tmpdir);
	char f[400];
	snprintf(f, sizeof(f), "%s/f", tmpdir);
	FILE *fp = fopen(f, "w");
	ck_assert_ptr_nonnull(fp);
	fclose(fp);
	ctx_fails(json, "cannot create it: Not a directory (set logging_dir to a writable "
	          "directory)");
}
END_TEST

START_TEST(log_metrics_all_trackers)
{
	char json[600], path[600];
	snprintf(json, sizeof(json), "{\"log_with\": [\"all\"], \"logging_dir\": \"%s/run\"}",
	         tmpdir);
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	ck_assert_int_eq(accel_ctx_new(&o, &ctx), ACCEL_OK);
	ck_assert_int_eq(accel_log_metrics(ctx, 7, "{\"loss\": 1.25, \"eval\": {\"acc\": 0.5}}"),
	                 ACCEL_OK);
	const char *keys[] = {"loss"};
	double vals[] = {INFINITY};
	ck_assert_int_eq(accel_log_scalars(ctx, 8, 1, keys, vals), ACCEL_OK);
	ctx = accel_ctx_free(ctx);
	snprintf(path, sizeof(path), "%s/run/metrics.csv", tmpdir);
	char *csv = slurp(path, NULL);
	/* step,time,loss,eval/acc then the rows; the times vary */
	ck_assert_msg(!strncmp(csv, "step,time,loss,eval/acc\n7,", 26), "%s", csv);
	ck_assert_ptr_nonnull(strstr(csv, ",1.25,0.5\n8,"));
	ck_assert_ptr_nonnull(strstr(csv, ",inf,\n"));
	free(csv);
	snprintf(path, sizeof(path), "%s/run/metrics.jsonl", tmpdir);
	char *jl = slurp(path, NULL);
	ck_assert_ptr_nonnull(strstr(jl, "\"eval\":{\"acc\":0.5}"));
	ck_assert_ptr_nonnull(strstr(jl, "\"loss\":\"Infinity\""));
	free(jl);
}
END_TEST

START_TEST(progress_state)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = "{}", .skip_env = 1};
	accel_ctx *ctx = NULL;
	ck_assert_int_eq(accel_ctx_new(&o, &ctx), ACCEL_OK);
	ck_assert_int_eq(accel_progress_update(ctx, 1, 1, 0.5), ACCEL_ERR_STATE);
	ck_assert_ptr_nonnull(strstr(accel_errmsg(ctx), "no accel_progress_begin() before it"));
	accel_clear_error(ctx);
	ck_assert_int_eq(accel_progress_begin(ctx, 5, 4), ACCEL_ERR_INVALID_ARG);
	accel_clear_error(ctx);
	ck_assert_int_eq(accel_progress_end(ctx), ACCEL_OK);   /* nothing begun: nothing to end */
	ctx = accel_ctx_free(ctx);
}
END_TEST

static Suite *tracker_suite(void)
{
	Suite *s = suite_create("tracker");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, crc32c_check_value);
	tcase_add_test(tc, csv_columns_grow);
	tcase_add_test(tc, tb_framing);
	tcase_add_test(tc, config_errors);
	tcase_add_test(tc, log_metrics_all_trackers);
	tcase_add_test(tc, progress_state);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tracker_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
