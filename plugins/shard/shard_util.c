/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_util.c: the unit check of shard_util.h. */
#include "shard_util.h"

int shard_unit_uniform(const accel_host_v1 *H, accel_host *h, const accel_model_v1 *m,
                       uint32_t u, const char *keeps, uint32_t *dt, uint32_t *gdt, int32_t *dev,
                       int32_t *devi)
{
	const accel_unit_info_v1 *ui = &m->units[u];
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
