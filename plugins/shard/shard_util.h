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

/* The parameters unit u of model m uses besides its own (a tied weight,
 * accel_unit_info_v1.uses, ABI 1.7): *ret_n entries, NULL and 0 when none
 * or under a core older than 1.7. */
static inline const uint32_t *shard_unit_uses(const accel_model_v1 *m, uint32_t u,
                                              uint32_t *ret_n)
{
	const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(m, u);
	*ret_n = 0;
	if (!ACCEL_STRUCT_HAS(ui, accel_unit_info_v1, uses) || !ui->n_uses || !ui->uses)
		return NULL;
	*ret_n = ui->n_uses;
	return ui->uses;
}

/* The reduced gradient a strategy holds in its buffer i (its block, or the
 * whole when not sharded): *ret_v; returns 0 for a buffer not trained. */
typedef int (*shard_grad_view_fn)(void *ctx, uint32_t i, accel_view *ret_v);
/* Sum an f64 view in place over the ranks holding different blocks. */
typedef int (*shard_sum_fn)(void *ctx, const accel_view *v);

/* grad_stats over buffers 0..n-1 (plugin ABI): the squared norm and count
 * of non-finite elements of the reduced gradients, summed by `sum` (NULL:
 * every rank holds the same whole gradients) through scratch[2]. */
int shard_grad_stats(const accel_host_v1 *H, accel_host *h, uint32_t n,
                     shard_grad_view_fn view, shard_sum_fn sum, void *ctx, double *scratch,
                     double *ret_sumsq, uint64_t *ret_nonfinite);

/* grad_stats_device: the squared norm accumulated into stats[0] on the
 * device; ACCEL_ERR_UNSUPPORTED (not reported) without op_sumsq_acc or
 * when a trained buffer lies on another device. */
int shard_grad_stats_device(const accel_host_v1 *H, accel_host *h, uint32_t n,
                            shard_grad_view_fn view, shard_sum_fn sum, void *ctx,
                            int32_t device, int32_t device_index, double *stats);

#endif
