/* SPDX-License-Identifier: MIT */
/* core/safetensors.c: the safetensors format's dtype names and a shape's
 * size, shared by the writer (safetensors_write.c) and the reader
 * (safetensors_read.c); see safetensors.h. */
#include <stdint.h>
#include <string.h>

#include "accel/accel.h"
#include "safetensors-impl.h"

static const char *const st_names[ACCEL_DTYPE_COUNT] = {
	[ACCEL_DTYPE_F32] = "F32",
	[ACCEL_DTYPE_F64] = "F64",
	[ACCEL_DTYPE_F16] = "F16",
	[ACCEL_DTYPE_BF16] = "BF16",
	[ACCEL_DTYPE_F8E4M3] = "F8_E4M3",
	[ACCEL_DTYPE_F8E5M2] = "F8_E5M2",
	[ACCEL_DTYPE_I32] = "I32",
	[ACCEL_DTYPE_I64] = "I64",
	[ACCEL_DTYPE_U8] = "U8",
};

const char *accelp_st_dtype_name(uint32_t dtype)
{
	return dtype < ACCEL_DTYPE_COUNT ? st_names[dtype] : NULL;
}

uint32_t accelp_st_dtype_parse(const char *name)
{
	if (!name)
		return ACCEL_DTYPE_INVALID;
	for (uint32_t i = 1; i < ACCEL_DTYPE_COUNT; i++)
		if (st_names[i] && !strcmp(name, st_names[i]))
			return i;
	return ACCEL_DTYPE_INVALID;
}

/* numel and byte size of a shape; 0 on overflow of uint64 (a 0 in the shape
 * gives numel 0 and returns 1). */
int accelp_st_shape_size(uint32_t ndim, const uint64_t *shape, size_t esize,
                         uint64_t *ret_numel, uint64_t *ret_nbytes)
{
	uint64_t n = 1;
	for (uint32_t i = 0; i < ndim; i++) {
		if (shape[i] != 0 && n > UINT64_MAX / shape[i])
			return 0;
		n *= shape[i];
	}
	if (esize && n > UINT64_MAX / esize)
		return 0;
	*ret_numel = n;
	*ret_nbytes = n * esize;
	return 1;
}
