/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_ckpt.c: the zero strategy's checkpoint state: master
 * weights and optimizer state as canonical tensors (master/<param>,
 * optim/<state>/<param>), each rank writing the runs it owns (stage 0: the
 * runs of its block, the replicas being equal), read back by every rank for
 * the runs it owns now, at any world size and from a checkpoint of another
 * strategy (state_version 0).  Data passes through a host staging buffer
 * (zero_store_read/write), so offloaded state is saved the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static const char *state_name(zero_state *s, uint32_t k, char *buf, size_t cap)
{
	const char *type = "adamw";
	if (s->host->cfg_string(s->h, "/optimizer.type", &type) != ACCEL_OK)
		type = "adamw";
	const char *name = accel_ckpt_optim_state_name(type, s->n_state, k);
	if (name)
		return name;
	snprintf(buf, cap, "state%u", k);
	return buf;
}

static int tensor_name(zero_state *s, const accel_param_info_v1 *p, uint32_t array, char *buf,
                       size_t cap)
{
	char sb[16];
	int n = array == 0 ? snprintf(buf, cap, "master/%s", p->name)
	                   : snprintf(buf, cap, "optim/%s/%s",
	                              state_name(s, array - 1, sb, sizeof(sb)), p->name);
	if (n < 0 || (size_t)n >= cap)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "parameter name '%s' too "
		                      "long for a checkpoint tensor name", p->name);
	return ACCEL_OK;
}

/* The runs (params, offsets, numel) and their store offsets: save uses
 * s->save, load the store's own pieces. */
static int walk(zero_state *s, int save)
{
	const accel_host_v1 *H = s->host;
	const zero_piece *runs = save ? s->save : s->pieces;
	const uint64_t *at = save ? s->save_at : s->piece_at;
	uint32_t n = save ? s->n_save : s->n_pieces;
	uint64_t largest = 1;
	float *buf = NULL;
	char name[600];
	int r = ACCEL_OK;

	if (!s->model)
		return H->error(s->h, ACCEL_ERR_STATE, "%s before accel_prepare()",
		                save ? "save_state" : "load_state");
	for (uint32_t k = 0; k < n; k++)
		if (runs[k].numel > largest)
			largest = runs[k].numel;
	if (!(buf = malloc(largest * 4)))
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory staging checkpoint state");
	for (uint32_t k = 0; !r && k < n; k++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, runs[k].param);
		uint64_t shape[ACCEL_CKPT_MAX_DIMS];
		for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
			shape[d] = (uint64_t)p->shape[d];
		accel_view hv = zero_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, buf, runs[k].numel);
		for (uint32_t a = 0; !r && a <= s->n_state; a++) {
			if ((r = tensor_name(s, p, a, name, sizeof(name))))
				break;
			if (save) {
				if ((r = zero_store_read(s->store, a, at[k], &hv)))
					break;
				accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_F32, p->ndim, 0, name,
				                          shape, runs[k].param_offset, runs[k].numel, buf};
				r = H->ckpt_write_tensor(s->h, s->ckpt_w, &sl);
			} else {
				r = H->ckpt_read_tensor(s->h, s->ckpt_r, name, ACCEL_DTYPE_F32,
				                        runs[k].param_offset, runs[k].numel, buf);
				if (!r)
					r = zero_store_write(s->store, a, at[k], &hv);
			}
		}
	}
	free(buf);
	if (r || save)
		return r;
	/* the working weights follow the masters, on every rank */
	if (zero_param_nvme(s) && (r = zero3p_shards_in(s, 1)))
		return r;
	r = zero_store_refresh_work(s->store);
	if (zero_param_nvme(s)) {
		int r2 = zero3p_shards_out(s);
		r = r ? r : r2;
	}
	if (r)
		return r;
	return zero_publish(s);
}

int zero_save_state(void *state, accel_ckpt_writer *w)
{
	zero_state *s = state;
	s->ckpt_w = w;
	int r = walk(s, 1);
	s->ckpt_w = NULL;
	return r;
}

int zero_load_state(void *state, accel_ckpt_reader *rd, uint32_t state_version)
{
	zero_state *s = state;
	/* 0: saved under another strategy; zero's state is the canonical
	 * tensors alone, so it loads the same way */
	if (state_version != zero_desc.state_version && state_version != 0)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint holds zero "
		                      "state version %u; this zero reads version %u", state_version,
		                      zero_desc.state_version);
	s->ckpt_r = rd;
	int r = walk(s, 0);
	s->ckpt_r = NULL;
	return r;
}
