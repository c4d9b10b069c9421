/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_ckpt.c: checkpoint names and the per-run save/load
 * shared by the plugins that shard (shard_ckpt.h). */
#include <stdio.h>

#include "shard_ckpt.h"

const char *shard_ckpt_state_name(const accel_host_v1 *H, accel_host *h, uint32_t n_state,
                                  uint32_t k, char *buf, size_t cap)
{
	const char *type = "adamw";
	if (H->cfg_string(h, "/optimizer.type", &type) != ACCEL_OK)
		type = "adamw";
	const char *name = accel_ckpt_optim_state_name(type, n_state, k);
	if (name)
		return name;
	snprintf(buf, cap, "state%u", k);
	return buf;
}

int shard_ckpt_tensor_name(const accel_host_v1 *H, accel_host *h, uint32_t n_state,
                           const accel_param_info_v1 *p, uint32_t array, char *buf, size_t cap)
{
	char sb[16];
	int n = array == 0 ? snprintf(buf, cap, "master/%s", p->name)
	                   : snprintf(buf, cap, "optim/%s/%s",
	                              shard_ckpt_state_name(H, h, n_state, array - 1, sb,
	                                                    sizeof(sb)),
	                              p->name);
	if (n < 0 || (size_t)n >= cap)
		return H->error(h, ACCEL_ERR_INVALID_ARG, "parameter name '%s' too "
		                "long for a checkpoint tensor name", p->name);
	return ACCEL_OK;
}

int shard_ckpt_run(const shard_ckpt_io *io, int save, const accel_param_info_v1 *p,
                   uint64_t param_offset, uint64_t numel, uint64_t at)
{
	const accel_host_v1 *H = io->host;
	uint64_t shape[ACCEL_CKPT_MAX_DIMS];
	char name[600];
	int r = ACCEL_OK;

	for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
		shape[d] = (uint64_t)p->shape[d];
	accel_view hv = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, io->buf, numel};
	for (uint32_t a = 0; !r && a <= io->n_state; a++) {
		if ((r = shard_ckpt_tensor_name(H, io->h, io->n_state, p, a, name, sizeof(name))))
			break;
		if (save) {
			if ((r = io->copy(io->store, a, at, &hv, 1)))
				break;
			accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_F32, p->ndim, 0, name,
			                          shape, param_offset, numel, io->buf};
			r = H->ckpt_write_tensor(io->h, io->w, &sl);
		} else {
			r = H->ckpt_read_tensor(io->h, io->rd, name, ACCEL_DTYPE_F32, param_offset,
			                        numel, io->buf);
			if (!r)
				r = io->copy(io->store, a, at, &hv, 0);
		}
	}
	return r;
}
