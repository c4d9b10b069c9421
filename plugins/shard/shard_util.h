/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_util.h: small helpers of the plugins that shard (zero,
 * fsdp): views, dtype arithmetic and the one-dtype-one-device check of a
 * unit they keep in one flat buffer (shard_util.c). */
#ifndef ACCEL_SHARD_UTIL_H
#define ACCEL_SHARD_UTIL_H

#include <stdint.h>

#include "accel/plugin.h"

/* The dtype a parameter's gradient is accumulated and reduced in. */
static inline uint32_t shard_grad_dtype(const accel_param_info_v1 *p)
{
	return ACCEL_STRUCT_HAS(p, accel_param_info_v1, grad_dtype) && p->grad_dtype
	               ? p->grad_dtype
	               : p->dtype;
}

static inline accel_view shard_view(uint32_t dtype, int32_t device, int32_t device_index,
                                    void *data, uint64_t numel)
{
	return (accel_view){sizeof(accel_view), dtype, device, device_index, data, numel};
}

static inline void *shard_at(void *base, uint32_t dtype, uint64_t elems)
{
	return (char *)base + elems * accel_abi_dtype_size(dtype);
}

/* Whether all parameters of unit u of model m share one dtype, gradient
 * dtype and device: their values into *dt, *gdt, *dev, *devi (the first
 * parameter's); ACCEL_ERR_UNSUPPORTED (reported, ending with `keeps`, e.g.
 * "zero keeps a unit in one flat buffer") when they do not. */
int shard_unit_uniform(const accel_host_v1 *H, accel_host *h, const accel_model_v1 *m,
                       uint32_t u, const char *keeps, uint32_t *dt, uint32_t *gdt, int32_t *dev,
                       int32_t *devi);

#endif
