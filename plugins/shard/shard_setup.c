/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_setup.c: the init, wrap and unit walk of
 * shard_setup.h. */
#include "shard_setup.h"
#include "shard_util.h"

int shard_init_world(const accel_host_v1 *H, accel_host *h, accel_world_v1 *world,
                     uint32_t *ret_world_size, uint32_t *ret_rank)
{
	int r;
	if (!ACCEL_HOST_HAS(H, ckpt_read_tensor) || !ACCEL_HOST_HAS(H, reduce_scatter_bucket))
		return H->error(h, ACCEL_ERR_ABI, "the host table is older than this "
		                "plugin (needs ABI 1.4)");
	world->struct_size = sizeof(*world);
	if ((r = H->world(h, world)))
		return r;
	*ret_world_size = (uint32_t)world->world_size;
	*ret_rank = (uint32_t)world->rank;
	return ACCEL_OK;
}

int shard_wrap_begin(const accel_host_v1 *H, accel_host *h, const char *plugin,
                     uint32_t max_state, const accel_model_v1 **model, uint32_t *ret_n_state)
{
	uint32_t n;
	if (*model)
		return H->error(h, ACCEL_ERR_STATE, "wrap called twice");
	if (!(*model = H->model(h)))
		return H->error(h, ACCEL_ERR_STATE, "wrap: the host has no model");
	n = H->optim_state_count(h);
	*ret_n_state = n;
	if (n > max_state)
		return H->error(h, ACCEL_ERR_UNSUPPORTED, "the optimizer keeps %u state "
		                "arrays; %s supports up to %u", n, plugin, max_state);
	return ACCEL_OK;
}

static int check_units(const accel_host_v1 *H, accel_host *h, const accel_model_v1 *m,
                       const char *plugin)
{
	uint32_t expect = 0;
	for (uint32_t u = 0; u < m->n_units; u++) {
		const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(m, u);
		if (ui->first_param != expect)
			return H->error(h, ACCEL_ERR_UNSUPPORTED, "unit '%s' starts at parameter "
			                "%u, expected %u: %s needs units that cover the parameters "
			                "in registration order", ui->name, ui->first_param, expect,
			                plugin);
		if (!ui->n_params)
			return H->error(h, ACCEL_ERR_UNSUPPORTED, "unit '%s' has no parameters",
			                ui->name);
		expect += ui->n_params;
	}
	if (!m->n_units || expect != m->n_params)
		return H->error(h, ACCEL_ERR_UNSUPPORTED, "the units hold %u of the %u "
		                "parameters; %s needs every parameter in a unit (accel_unit_begin)",
		                expect, m->n_params, plugin);
	return ACCEL_OK;
}

int shard_cut_spans(const accel_host_v1 *H, accel_host *h, const accel_model_v1 *m,
                    const char *plugin, const char *keeps, shard_split_fn split, void *ctx,
                    shard_span *spans, uint32_t *unit_span, uint32_t *ret_n)
{
	shard_span *sp = NULL;
	uint32_t n = 0;
	int r;

	if ((r = check_units(H, h, m, plugin)))
		return r;
	for (uint32_t u = 0; u < m->n_units; u++) {
		const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(m, u);
		uint32_t dt = 0, gdt = 0;
		int32_t dev = 0, devi = 0;
		if ((r = shard_unit_uniform(H, h, m, u, keeps, &dt, &gdt, &dev, &devi)))
			return r;
		if (!sp || split(ctx, u, sp) || sp->dtype != dt || sp->grad_dtype != gdt ||
		    sp->device != dev || sp->device_index != devi) {
			sp = &spans[n++];
			*sp = (shard_span){.first_unit = u, .first_param = ui->first_param, .dtype = dt,
			                   .grad_dtype = gdt, .device = dev, .device_index = devi};
		}
		sp->n_units++;
		sp->n_params += ui->n_params;
		sp->numel += ui->numel;
		unit_span[u] = n - 1;
	}
	*ret_n = n;
	return ACCEL_OK;
}

uint64_t shard_largest_param(const accel_model_v1 *m)
{
	uint64_t largest = 1;
	for (uint32_t i = 0; i < m->n_params; i++)
		if (ACCEL_MODEL_PARAM(m, i)->numel > largest)
			largest = ACCEL_MODEL_PARAM(m, i)->numel;
	return largest;
}

void shard_param_runs(const accel_model_v1 *m, uint32_t first_param, uint32_t n, uint64_t *at,
                      accel_bucket_entry_v1 *entries, uint32_t *ret_n_entries)
{
	uint64_t t = 0;
	uint32_t ne = 0;
	for (uint32_t k = 0; k < n; k++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, first_param + k);
		at[k] = t;
		if (p->requires_grad)
			entries[ne++] = (accel_bucket_entry_v1){first_param + k, 0, 0, t, p->numel};
		t += p->numel;
	}
	*ret_n_entries = ne;
}
