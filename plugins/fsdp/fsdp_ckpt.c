/* SPDX-License-Identifier: MIT */
/* plugins/fsdp/fsdp_ckpt.c: the fsdp strategy's checkpoint state, by
 * state_dict_type.  SHARDED_STATE_DICT and FULL_STATE_DICT: master weights
 * and optimizer state as canonical tensors (master/<param>,
 * optim/<state>/<param>), each rank writing the runs it owns, read back
 * for the runs it owns now at any world size, and from or by another
 * strategy (ddp, zero); FULL_STATE_DICT's full weights are accel_save_model's
 * (the core gathers them through materialize).  LOCAL_STATE_DICT: each
 * rank's flat shard of masters and state as its own blobs
 * (local/<rank>/...), loadable only at the saving world size and layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"
#include "shard_ckpt.h"

/* SHARDED/FULL: the rank's pieces as ranges of the canonical tensors. */
static int walk_tensors(fsdp_state *s, int save)
{
	const accel_host_v1 *H = s->host;
	uint64_t largest = 1;
	float *buf = NULL;
	int r = ACCEL_OK;

	for (uint32_t k = 0; k < s->n_pieces; k++)
		if (s->pieces[k].numel > largest)
			largest = s->pieces[k].numel;
	if (!(buf = malloc(largest * 4)))
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory staging checkpoint state");
	/* HYBRID_SHARD: one replica (node 0's ranks) writes the ranges */
	if (save && s->rrank != 0) {
		free(buf);
		return ACCEL_OK;
	}
	shard_ckpt_io io = {H, s->h, s->ckpt_w, s->ckpt_r, s->n_state, zero_store_copy, s->store,
	                    buf};
	for (uint32_t k = 0; !r && k < s->n_pieces; k++) {
		zero_piece z = s->pieces[k];
		uint64_t zat = s->piece_at[k];
		if (save && !fsdp_shards_params(s)) {
			/* NO_SHARD: every rank holds the whole; each writes the part
			 * of the parameter inside its block of the flat parameter */
			const fsdp_unit *f = &s->units[s->piece_unit[k]];
			uint64_t a = f->at[z.param - f->first_param], b = a + z.numel;
			uint64_t lo = f->lo > a ? f->lo : a;
			uint64_t hi = f->lo + f->block < b ? f->lo + f->block : b;
			if (hi <= lo)
				continue;
			z.param_offset = lo - a;
			z.numel = hi - lo;
			zat += lo - a;
		}
		r = shard_ckpt_run(&io, save, ACCEL_MODEL_PARAM(s->model, z.param), z.param_offset,
		                   z.numel, zat);
	}
	free(buf);
	return r;
}

/* LOCAL: the rank's store arrays whole, with the layout they belong to. */
static int walk_local(fsdp_state *s, int save)
{
	const accel_host_v1 *H = s->host;
	uint64_t n = zero_store_numel(s->store);
	uint64_t meta[4] = {s->W, s->n_units, n, s->n_state}, got[4] = {0};
	char name[64];
	float *buf = NULL;
	int r;

	snprintf(name, sizeof(name), "local/%u/layout", s->rank);
	if (save) {
		if ((r = H->ckpt_write(s->h, s->ckpt_w, name, meta, sizeof(meta))))
			return r;
	} else {
		uint64_t sz = 0;
		if (H->ckpt_size(s->h, s->ckpt_r, name, &sz) || sz != sizeof(got) ||
		    (r = H->ckpt_read(s->h, s->ckpt_r, name, got, sizeof(got))))
			return H->error(s->h, ACCEL_ERR_CHECKPOINT, "fsdp LOCAL_STATE_DICT: the "
			                "checkpoint has no local state for rank %u (saved with another "
			                "state_dict_type or at a smaller world size); load it with the "
			                "state_dict_type and world size it was saved with", s->rank);
		if (memcmp(got, meta, sizeof(meta)))
			return H->error(s->h, ACCEL_ERR_CHECKPOINT, "fsdp LOCAL_STATE_DICT: the "
			                "checkpoint was saved at world size %llu with %llu FSDP units "
			                "and %llu elements on rank %u; this run has %u, %u and %llu: "
			                "a local state dict loads only with the same world size and "
			                "wrapping (use SHARDED_STATE_DICT to reshard)",
			                (unsigned long long)got[0], (unsigned long long)got[1],
			                (unsigned long long)got[2], s->rank, s->W, s->n_units,
			                (unsigned long long)n);
	}
	if (!(buf = malloc((n ? n : 1) * 4)))
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory staging checkpoint state");
	accel_view hv = shard_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, buf, n);
	r = ACCEL_OK;
	for (uint32_t a = 0; !r && n && a <= s->n_state; a++) {
		snprintf(name, sizeof(name), "local/%u/array%u", s->rank, a);
		if (save) {
			if (!(r = zero_store_read(s->store, a, 0, &hv)))
				r = H->ckpt_write(s->h, s->ckpt_w, name, buf, n * 4);
		} else if (!(r = H->ckpt_read(s->h, s->ckpt_r, name, buf, n * 4))) {
			r = zero_store_write(s->store, a, 0, &hv);
		}
	}
	free(buf);
	return r;
}

int fsdp_save_state(void *state, accel_ckpt_writer *w)
{
	fsdp_state *s = state;
	if (!s->model)
		return s->host->error(s->h, ACCEL_ERR_STATE, "save_state before accel_prepare()");
	s->ckpt_w = w;
	int r = s->cfg.state_dict == FSDP_SD_LOCAL ? walk_local(s, 1) : walk_tensors(s, 1);
	s->ckpt_w = NULL;
	return r;
}

int fsdp_load_state(void *state, accel_ckpt_reader *rd, uint32_t state_version)
{
	fsdp_state *s = state;
	int r;
	if (!s->model)
		return s->host->error(s->h, ACCEL_ERR_STATE, "load_state before accel_prepare()");
	/* 0: saved under another strategy (canonical tensors) */
	if (state_version != fsdp_desc.state_version && state_version != 0)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint holds fsdp "
		                      "state version %u; this fsdp reads version %u", state_version,
		                      fsdp_desc.state_version);
	s->ckpt_r = rd;
	r = s->cfg.state_dict == FSDP_SD_LOCAL && state_version ? walk_local(s, 0)
	                                                         : walk_tensors(s, 0);
	s->ckpt_r = NULL;
	if (r || (r = zero_store_refresh_work(s->store)))
		return r;
	return fsdp_publish(s);
}
