/* SPDX-License-Identifier: MIT */
/* core/dtype.c: dtype names and sizes. */
#include <string.h>

#include "accel/accel.h"

const char *accel_dtype_name(uint32_t dtype)
{
	if (dtype == ACCEL_DTYPE_INVALID || dtype >= ACCEL_DTYPE_COUNT)
		return NULL;
	return accel_abi_dtype_name(dtype);
}

size_t accel_dtype_size(uint32_t dtype)
{
	return accel_abi_dtype_size(dtype);
}

uint32_t accel_dtype_parse(const char *name)
{
	if (!name)
		return ACCEL_DTYPE_INVALID;
	for (uint32_t i = 1; i < ACCEL_DTYPE_COUNT; i++)
		if (!strcmp(name, accel_abi_dtype_name(i)))
			return i;
	return ACCEL_DTYPE_INVALID;
}
