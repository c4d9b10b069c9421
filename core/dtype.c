/* SPDX-License-Identifier: MIT */
/* core/dtype.c: dtype names and sizes. */
#include <string.h>

#include "accel/accel.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[ACCEL_DTYPE_COUNT] = {
	[ACCEL_DTYPE_INVALID] = {NULL, 0},
	[ACCEL_DTYPE_F32] = {"f32", 4},
	[ACCEL_DTYPE_F64] = {"f64", 8},
	[ACCEL_DTYPE_F16] = {"f16", 2},
	[ACCEL_DTYPE_BF16] = {"bf16", 2},
	[ACCEL_DTYPE_F8E4M3] = {"f8e4m3", 1},
	[ACCEL_DTYPE_F8E5M2] = {"f8e5m2", 1},
	[ACCEL_DTYPE_I32] = {"i32", 4},
	[ACCEL_DTYPE_I64] = {"i64", 8},
	[ACCEL_DTYPE_U8] = {"u8", 1},
};

const char *accel_dtype_name(uint32_t dtype)
{
	return dtype < ACCEL_DTYPE_COUNT ? dtypes[dtype].name : NULL;
}

size_t accel_dtype_size(uint32_t dtype)
{
	return dtype < ACCEL_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

uint32_t accel_dtype_parse(const char *name)
{
	if (!name)
		return ACCEL_DTYPE_INVALID;
	for (uint32_t i = 1; i < ACCEL_DTYPE_COUNT; i++)
		if (!strcmp(name, dtypes[i].name))
			return i;
	return ACCEL_DTYPE_INVALID;
}
