/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_util.c: the unit check and gradient statistics of
 * shard_util.h. */
#include <math.h>

#include "shard_util.h"

int shard_unit_uniform(const accel_host_v1 *H, accel_host *h, const accel_model_v1 *m,
                       uint32_t u, const char *keeps, uint32_t *dt, uint32_t *gdt, int32_t *dev,
                       int32_t *devi)
{
	const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(m, u);
	for (uint32_t k = 0; k < ui->n_params; k++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, ui->first_param + k);
		if (k == 0) {
			*dt = p->dtype;
			*gdt = shard_grad_dtype(p);
			*dev = p->device;
			*devi = p->device_index;
		} else if (p->dtype != *dt || shard_grad_dtype(p) != *gdt || p->device != *dev ||
		           p->device_index != *devi) {
			return H->error(h, ACCEL_ERR_UNSUPPORTED, "unit '%s' mixes parameters of "
			                "different dtypes or devices ('%s' and '%s'); %s: register "
			                "them in separate units", ui->name,
			                ACCEL_MODEL_PARAM(m, ui->first_param)->name, p->name, keeps);
		}
	}
	return ACCEL_OK;
}

int shard_grad_stats(const accel_host_v1 *H, accel_host *h, uint32_t n,
                     shard_grad_view_fn view, shard_sum_fn sum, void *ctx, double *scratch,
                     double *ret_sumsq, uint64_t *ret_nonfinite)
{
	double total = 0, bad = 0;
	int r;
	for (uint32_t i = 0; i < n; i++) {
		accel_view v;
		if (!view(ctx, i, &v))
			continue;
		double sq = 0;
		uint64_t nf = 0;
		if ((r = H->op_sumsq(h, &v, &sq)))
			return r;
		if (!isfinite(sq) && (r = H->op_nonfinite(h, &v, &nf)))
			return r;
		total += sq;
		bad += (double)nf;
	}
	if (sum) {
		scratch[0] = total;
		scratch[1] = bad;
		accel_view sv = shard_view(ACCEL_DTYPE_F64, ACCEL_DEVICE_CPU, 0, scratch, 2);
		if ((r = sum(ctx, &sv)))
			return r;
		total = scratch[0];
		bad = scratch[1];
	}
	*ret_sumsq = total;
	*ret_nonfinite = (uint64_t)bad;
	return ACCEL_OK;
}

int shard_grad_stats_device(const accel_host_v1 *H, accel_host *h, uint32_t n,
                            shard_grad_view_fn view, shard_sum_fn sum, void *ctx,
                            int32_t device, int32_t device_index, double *stats)
{
	accel_view v;
	int r;
	if (!ACCEL_HOST_HAS(H, op_sumsq_acc))
		return ACCEL_ERR_UNSUPPORTED;
	for (uint32_t i = 0; i < n; i++)
		if (view(ctx, i, &v) && (v.device != device || v.device_index != device_index))
			return ACCEL_ERR_UNSUPPORTED;
	for (uint32_t i = 0; i < n; i++) {
		if (!view(ctx, i, &v))
			continue;
		if ((r = H->op_sumsq_acc(h, &v, stats)))
			return r;
	}
	if (sum) {
		accel_view sv = shard_view(ACCEL_DTYPE_F64, device, device_index, stats, 1);
		if ((r = sum(ctx, &sv)))
			return r;
	}
	return ACCEL_OK;
}
