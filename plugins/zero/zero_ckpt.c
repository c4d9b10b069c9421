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

#include "shard_ckpt.h"
#include "zero.h"

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
	int r = ACCEL_OK;

	if (!s->model)
		return H->error(s->h, ACCEL_ERR_STATE, "%s before accel_prepare()",
		                save ? "save_state" : "load_state");
	for (uint32_t k = 0; k < n; k++)
		if (runs[k].numel > largest)
			largest = runs[k].numel;
	if (!(buf = malloc(largest * 4)))
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory staging checkpoint state");
	shard_ckpt_io io = {H, s->h, s->ckpt_w, s->ckpt_r, s->n_state, zero_store_copy, s->store,
	                    buf};
	for (uint32_t k = 0; !r && k < n; k++)
		r = shard_ckpt_run(&io, save, ACCEL_MODEL_PARAM(s->model, runs[k].param),
		                   runs[k].param_offset, runs[k].numel, at[k]);
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
