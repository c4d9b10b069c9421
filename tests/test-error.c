/* SPDX-License-Identifier: MIT */
/* tests/test-error.c: status names, error records (first error wins). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "error.h"

START_TEST(status_names)
{
	ck_assert_str_eq(accel_status_str(ACCEL_OK), "ACCEL_OK");
	ck_assert_str_eq(accel_status_str(ACCEL_ERR_CONFIG), "ACCEL_ERR_CONFIG");
	ck_assert_str_eq(accel_status_str(ACCEL_ERR_TIMEOUT), "ACCEL_ERR_TIMEOUT");
	ck_assert_str_eq(accel_status_str(ACCEL_ERR_INTERNAL), "ACCEL_ERR_INTERNAL");
	ck_assert_str_eq(accel_status_str(-999), "ACCEL_ERR_UNKNOWN");
	/* every code from -1 to the last has its own name */
	for (int c = ACCEL_ERR_INVALID_ARG; c >= ACCEL_ERR_INTERNAL; c--)
		ck_assert_str_ne(accel_status_str(c), "ACCEL_ERR_UNKNOWN");
}
END_TEST

START_TEST(first_error_wins)
{
	accel_err e;
	accelp_err_clear(&e);
	ck_assert_int_eq(e.code, ACCEL_OK);
	ck_assert_int_eq(accelp_err_set(&e, ACCEL_ERR_IO, "cannot open %s", "a.json"), ACCEL_ERR_IO);
	ck_assert_int_eq(accelp_err_set(&e, ACCEL_ERR_CONFIG, "second"), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(e.code, ACCEL_ERR_IO);
	ck_assert_str_eq(e.msg, "cannot open a.json");
	accelp_err_clear(&e);
	ck_assert_int_eq(e.code, ACCEL_OK);
	ck_assert_str_eq(e.msg, "");
	ck_assert_int_eq(accelp_err_set(NULL, ACCEL_ERR_NOMEM, "x"), ACCEL_ERR_NOMEM);
}
END_TEST

START_TEST(dtypes)
{
	ck_assert_str_eq(accel_dtype_name(ACCEL_DTYPE_BF16), "bf16");
	ck_assert_uint_eq(accel_dtype_size(ACCEL_DTYPE_F64), 8);
	ck_assert_uint_eq(accel_dtype_size(ACCEL_DTYPE_F8E4M3), 1);
	ck_assert_uint_eq(accel_dtype_parse("i64"), ACCEL_DTYPE_I64);
	ck_assert_uint_eq(accel_dtype_parse("float"), ACCEL_DTYPE_INVALID);
	ck_assert_ptr_null(accel_dtype_name(1000));
}
END_TEST

static Suite *error_suite(void)
{
	Suite *s = suite_create("error");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, status_names);
	tcase_add_test(tc, first_error_wins);
	tcase_add_test(tc, dtypes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(error_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
