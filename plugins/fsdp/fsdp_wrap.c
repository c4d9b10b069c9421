/* SPDX-License-Identifier: MIT */
/* plugins/fsdp/fsdp_wrap.c: the wrap policies (program units grouped into
 * FSDP units), each FSDP unit's flat parameter and its blocks
 * (plugins/shard), the rank's pieces and optimizer store
 * (plugins/zero/zero_store.c), and the initial values. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

int fsdp_alloc(fsdp_state *s, uint32_t category, const fsdp_unit *u, uint64_t bytes,
               uint32_t flags, void **ret)
{
	return s->host->mem_alloc(s->h, category, u->device, u->device_index, bytes ? bytes : 1,
	                          flags, ret);
}

void fsdp_free(fsdp_state *s, void *p)
{
	if (p)
		s->host->mem_free(s->h, p);
}

void fsdp_release_all(fsdp_state *s)
{
	for (uint32_t i = 0; s->units && i < s->n_units; i++) {
		fsdp_unit *u = &s->units[i];
		if (u->req)
			s->host->wait(s->h, u->req);
		if (u->greq)
			s->host->wait(s->h, u->greq);
		fsdp_free(s, u->shard);
		fsdp_free(s, u->work);
		fsdp_free(s, u->grad);
		fsdp_free(s, u->acc);
		fsdp_free(s, u->rbuf);
		free(u->at);
		free(u->entries);
		free(u->rentries);
	}
	s->store = zero_store_free(s->store);
	s->shard_g = s->host->group_free(s->h, s->shard_g);
	s->rep_g = s->host->group_free(s->h, s->rep_g);
	fsdp_free(s, s->stats);
	free(s->units);
	free(s->unit_of);
	free(s->unit_done);
	free(s->pieces);
	free(s->piece_at);
	free(s->piece_unit);
	s->units = NULL;
	s->stats = NULL;
}

/* ---- wrap policies ----------------------------------------------------------- */

static int name_matches(const char *patterns, const char *name)
{
	char pat[256];
	for (const char *p = patterns; p && *p;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n && n < sizeof(pat)) {
			memcpy(pat, p, n);
			pat[n] = 0;
			if (!fnmatch(pat, name, 0))
				return 1;
		}
		p = e ? e + 1 : NULL;
	}
	return 0;
}

/* TRANSFORMER_BASED_WRAP: whether a pattern matches the unit's name or its
 * kind (ABI minor 6, accel_unit_info_v1.kind: the class name a PyTorch
 * policy matches). */
static int unit_matches(const fsdp_state *s, uint32_t u)
{
	const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(s->model, u);
	const char *kind = ACCEL_STRUCT_HAS(ui, accel_unit_info_v1, kind) ? ui->kind : NULL;
	return name_matches(s->cfg.cls_names, ui->name) ||
	       (kind && name_matches(s->cfg.cls_names, kind));
}

/* Whether program unit u starts a new FSDP unit, given the run so far
 * (run_numel elements; u > 0). */
static int starts_run(fsdp_state *s, uint32_t u, uint64_t run_numel)
{
	switch (s->cfg.wrap) {
	case FSDP_WRAP_UNIT:
		return 1;
	case FSDP_WRAP_NONE:
		return 0;
	case FSDP_WRAP_SIZE:
		return run_numel >= (uint64_t)s->cfg.min_num_params;
	default: {
		/* a matching unit is wrapped alone; the units between matching
		 * ones form runs of the root */
		return unit_matches(s, u) || unit_matches(s, u - 1);
	}
	}
}

static int split_run(void *ctx, uint32_t u, const shard_span *cur)
{
	return starts_run(ctx, u, cur->numel);
}

static int build_units(fsdp_state *s)
{
	const accel_model_v1 *m = s->model;
	const accel_host_v1 *H = s->host;
	uint32_t n = m->n_units ? m->n_units : 1;
	shard_span *spans = calloc(n, sizeof(*spans));
	fsdp_unit *f;
	int r;

	s->units = calloc(n, sizeof(*s->units));
	s->unit_of = calloc(n, sizeof(uint32_t));
	s->unit_done = calloc(n, 1);
	if (!spans || !s->units || !s->unit_of || !s->unit_done) {
		free(spans);
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	}
	if ((r = shard_cut_spans(H, s->h, m, "fsdp", "fsdp keeps a unit in one flat parameter",
	                         split_run, s, spans, s->unit_of, &s->n_units))) {
		free(spans);
		return r;
	}
	for (uint32_t i = 0; i < s->n_units; i++)
		SHARD_SPAN_COPY(&s->units[i], &spans[i]);
	free(spans);
	for (uint32_t i = 0; i < s->n_units; i++) {
		f = &s->units[i];
		f->owner = s;
		f->at = calloc(f->n_params, sizeof(uint64_t));
		f->entries = calloc(f->n_params, sizeof(*f->entries));
		if (!f->at || !f->entries)
			return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
		for (uint32_t k = 0; k < f->n_params; k++) {
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, f->first_param + k);
			uint32_t rd = s->cfg.reduce_dtype ? s->cfg.reduce_dtype
			              : ACCEL_STRUCT_HAS(p, accel_param_info_v1, reduce_dtype) &&
			                                p->reduce_dtype
			                        ? p->reduce_dtype
			                        : shard_grad_dtype(p);
			if (p->requires_grad && f->trainable && rd != f->red_dtype)
				return H->error(s->h, ACCEL_ERR_UNSUPPORTED, "FSDP unit %u: parameter "
				                "'%s' is reduced in %s, an earlier one in %s; fsdp reduces "
				                "a unit's flat gradient in one dtype: register them in "
				                "separate units or set "
				                "fsdp.mixed_precision_policy.reduce_dtype", i, p->name,
				                accel_abi_dtype_name(rd), accel_abi_dtype_name(f->red_dtype));
			if (p->requires_grad && !f->trainable)
				f->red_dtype = rd;
			f->trainable |= p->requires_grad != 0;
		}
		if (!f->trainable)
			f->red_dtype = f->grad_dtype;
		shard_param_runs(m, f->first_param, f->n_params, f->at, f->entries, &f->n_entries);
		if (!(f->padded = shard_padded(f->numel, s->S, 1)))
			return H->error(s->h, ACCEL_ERR_INVALID_ARG, "FSDP unit %u has no elements", i);
		shard_block(f->padded, s->S, s->srank, &f->lo, &f->block);
		f->desc = (accel_bucket_v1){sizeof(accel_bucket_v1), i,
		                            shard_view(f->red_dtype, f->device, f->device_index, NULL,
		                                       f->padded),
		                            f->n_entries, 0, f->entries, s->shard_g};
		H->log(s->h, ACCEL_LOG_DEBUG, "FSDP unit %u: units %s..%s (%u), %llu elements, "
		       "padded %llu", i, ACCEL_MODEL_UNIT(m, f->first_unit)->name,
		       ACCEL_MODEL_UNIT(m, f->first_unit + f->n_units - 1)->name, f->n_units,
		       (unsigned long long)f->numel, (unsigned long long)f->padded);
	}
	return ACCEL_OK;
}

/* ---- pieces, buffers, initial values ---------------------------------------- */

static int build_pieces(fsdp_state *s)
{
	const accel_model_v1 *m = s->model;
	uint32_t cap = m->n_params + 1;
	shard_piece *sp = calloc(cap, sizeof(*sp));
	uint64_t *numel = calloc(cap, sizeof(uint64_t));
	s->pieces = calloc(cap, sizeof(*s->pieces));
	s->piece_at = calloc(cap, sizeof(uint64_t));
	s->piece_unit = calloc(cap, sizeof(uint32_t));
	if (!sp || !numel || !s->pieces || !s->piece_at || !s->piece_unit) {
		free(sp);
		free(numel);
		return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	}
	uint64_t at = 0;
	for (uint32_t i = 0; i < s->n_units; i++) {
		fsdp_unit *f = &s->units[i];
		for (uint32_t k = 0; k < f->n_params; k++)
			numel[k] = ACCEL_MODEL_PARAM(m, f->first_param + k)->numel;
		uint32_t n = shard_pieces(f->at, numel, f->n_params, f->lo, f->block, sp);
		if (s->rep_g) {
			/* HYBRID_SHARD: the block's trainable runs, reduced across nodes */
			if (!(f->rentries = calloc(n ? n : 1, sizeof(*f->rentries)))) {
				free(sp);
				free(numel);
				return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
			}
			uint32_t ne = 0;
			for (uint32_t j = 0; j < n; j++)
				if (ACCEL_MODEL_PARAM(m, f->first_param + sp[j].item)->requires_grad)
					f->rentries[ne++] = (accel_bucket_entry_v1){
						f->first_param + sp[j].item, 0, sp[j].item_offset,
						sp[j].block_offset, sp[j].numel};
			f->rdesc = (accel_bucket_v1){sizeof(accel_bucket_v1), s->n_units + i,
			                             shard_view(f->red_dtype, f->device, f->device_index,
			                                        NULL, f->block),
			                             ne, 0, f->rentries, s->rep_g};
		}
		if (!fsdp_shards_params(s)) {
			/* NO_SHARD: every rank steps every parameter whole, in place
			 * (ddp's arithmetic); checkpoints write the block's ranges */
			for (uint32_t k = 0; k < f->n_params; k++) {
				const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, f->first_param + k);
				if (!p->requires_grad)
					continue;
				s->pieces[s->n_pieces] = (zero_piece){
					f->first_param + k, f->grad_dtype, 0, p->numel,
					shard_at(f->work, f->dtype, f->at[k]),
					shard_at(f->grad, f->grad_dtype, f->at[k]),
					f->dtype == ACCEL_DTYPE_F32 && !s->cfg.cpu_offload, 0};
				s->piece_unit[s->n_pieces] = i;
				s->piece_at[s->n_pieces++] = at;
				at += p->numel;
			}
			continue;
		}
		for (uint32_t j = 0; j < n; j++) {
			uint32_t k = sp[j].item;
			if (!ACCEL_MODEL_PARAM(m, f->first_param + k)->requires_grad)
				continue;
			s->piece_unit[s->n_pieces] = i;
			s->pieces[s->n_pieces] = (zero_piece){
				f->first_param + k, f->grad_dtype, sp[j].item_offset, sp[j].numel,
				shard_at(f->shard, f->dtype, sp[j].block_offset),
				shard_at(f->acc, f->grad_dtype, sp[j].block_offset),
				f->dtype == ACCEL_DTYPE_F32 && !s->cfg.cpu_offload, 0};
			s->piece_at[s->n_pieces++] = at;
			at += sp[j].numel;
		}
	}
	free(sp);
	free(numel);
	return ACCEL_OK;
}

static int alloc_unit(fsdp_state *s, fsdp_unit *f)
{
	uint64_t wsz = accel_abi_dtype_size(f->dtype), gsz = accel_abi_dtype_size(f->grad_dtype);
	int r;
	if (fsdp_offloaded(s)) {
		/* cpu_offload: both blocks in host memory, pinned for the copies
		 * to and from a GPU; collectives never run on them */
		uint32_t fl = ACCEL_MEMF_ZERO |
		              (f->device != ACCEL_DEVICE_CPU ? (uint32_t)ACCEL_MEMF_PINNED : 0u);
		if ((r = s->host->mem_alloc(s->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0,
		                            f->block * wsz, fl, &f->shard)))
			return r;
		if (f->trainable && (r = s->host->mem_alloc(s->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU,
		                                            0, f->block * gsz, fl, &f->acc)))
			return r;
	} else if (fsdp_shards_params(s)) {
		/* the own block of the weights and of the reduced gradient */
		if ((r = fsdp_alloc(s, ACCEL_MEM_PARAMS, f, f->block * wsz,
		                    ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &f->shard)))
			return r;
		if (f->trainable && (r = fsdp_alloc(s, ACCEL_MEM_GRADS, f, f->block * gsz,
		                                    ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &f->acc)))
			return r;
	} else {
		/* NO_SHARD: the flat parameter and gradient stay whole */
		if ((r = fsdp_alloc(s, ACCEL_MEM_PARAMS, f, f->padded * wsz,
		                    ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &f->work)))
			return r;
		f->gathered = 1;
		if (f->trainable && (r = fsdp_alloc(s, ACCEL_MEM_GRADS, f, f->padded * gsz,
		                                    ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &f->grad)))
			return r;
	}
	return ACCEL_OK;
}

/* Every parameter whole in f32 from its init (rank 0's, broadcast, with
 * sync_module_states); the rank's block into its shard (NO_SHARD: the whole
 * into the flat parameter) and the masters. */
static int init_values(fsdp_state *s)
{
	const accel_host_v1 *H = s->host;
	const accel_model_v1 *m = s->model;
	uint64_t largest = shard_largest_param(m);
	float *tmp = NULL;
	int r = ACCEL_OK;

	if ((r = H->mem_alloc(s->h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, largest * 4, 0,
	                      (void **)&tmp)))
		return r;
	uint32_t pk = 0;
	for (uint32_t ui = 0; !r && ui < s->n_units; ui++) {
		fsdp_unit *f = &s->units[ui];
		for (uint32_t k = 0; !r && k < f->n_params; k++) {
			uint32_t pi = f->first_param + k;
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, pi);
			accel_view v = shard_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, tmp, p->numel);
			if ((r = H->param_init(s->h, pi, 0, &v)))
				break;
			if (s->cfg.sync_module_states && s->W > 1 &&
			    (r = H->broadcast(s->h, &v, 0, NULL)))
				break;
			uint64_t a = f->at[k], b = a + p->numel;
			uint64_t lo = f->lo > a ? f->lo : a;
			uint64_t hi = f->lo + f->block < b ? f->lo + f->block : b;
			if (!fsdp_shards_params(s)) {
				accel_view dst = shard_view(f->dtype, f->device, f->device_index,
				                            shard_at(f->work, f->dtype, a), p->numel);
				if ((r = H->op_copy(s->h, &dst, &v)))
					break;
			} else if (hi > lo) {
				accel_view src = shard_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0,
				                            tmp + (lo - a), hi - lo);
				accel_view dst = fsdp_block_view(s, f, f->dtype,
				                                 shard_at(f->shard, f->dtype, lo - f->lo),
				                                 hi - lo);
				if ((r = H->op_copy(s->h, &dst, &src)))
					break;
			}
			r = zero_store_write_param(s->store, s->pieces, s->piece_at, s->n_pieces, &pk, pi,
			                           tmp);
		}
	}
	H->mem_free(s->h, tmp);
	return r;
}

int fsdp_wrap(void *state)
{
	fsdp_state *s = state;
	const accel_host_v1 *H = s->host;
	int r;

	if ((r = shard_wrap_begin(H, s->h, "fsdp", ZERO_MAX_STATE, &s->model, &s->n_state)))
		return r;
	if (s->cfg.sharding == FSDP_HYBRID_SHARD) {
		/* shard within the node, replicate across nodes (docs/comm.md) */
		int32_t sr = 0, sz = 0, rr = 0;
		if ((r = H->group_split(s->h, NULL, s->world.node_rank, s->world.local_rank,
		                        &s->shard_g)) ||
		    (r = H->group_split(s->h, NULL, s->world.local_rank, s->world.node_rank,
		                        &s->rep_g)) ||
		    (r = H->group_info(s->h, s->shard_g, &sr, &sz)) ||
		    (r = H->group_info(s->h, s->rep_g, &rr, NULL)))
			return r;
		s->S = (uint32_t)sz;
		s->srank = (uint32_t)sr;
		s->rrank = (uint32_t)rr;
		H->log(s->h, ACCEL_LOG_DEBUG, "HYBRID_SHARD: rank %d of %d in the node's shard group, "
		       "%d in the replica group", sr, sz, rr);
	}
	if ((r = build_units(s)))
		return r;
	for (uint32_t i = 0; i < s->n_units; i++)
		if ((r = alloc_unit(s, &s->units[i])))
			return r;
	if ((r = build_pieces(s)))
		return r;
	if ((r = H->mem_alloc(s->h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, 2 * sizeof(double),
	                      ACCEL_MEMF_COMM, (void **)&s->stats)))
		return r;
	/* the store's pieces are the blocks: in host memory when offloaded
	 * (the store then steps them where they are, on the CPU threads) */
	zero_store_opts o = {
		.place = s->cfg.cpu_offload ? ZERO_PLACE_CPU : ZERO_PLACE_DEVICE,
		.n_state = s->n_state,
		.device = fsdp_offloaded(s) ? ACCEL_DEVICE_CPU : s->units[0].device,
		.device_index = fsdp_offloaded(s) ? 0 : s->units[0].device_index,
		.sub_group_size = 1000000000,
		.buffer_count = 2,
		.pin_memory = s->units[0].device != ACCEL_DEVICE_CPU,
	};
	zero_aio_opts_default(&o.aio);
	if ((r = zero_store_new(H, s->h, &o, s->pieces, s->n_pieces, &s->store)) ||
	    (r = init_values(s)) || (r = fsdp_publish(s)))
		return r;
	if (fsdp_offloaded(s)) {
		uint64_t b = 0;
		for (uint32_t i = 0; i < s->n_units; i++)
			b += s->units[i].block * (accel_abi_dtype_size(s->units[i].dtype) +
			                          (s->units[i].trainable
			                                   ? accel_abi_dtype_size(s->units[i].grad_dtype)
			                                   : 0));
		H->log(s->h, ACCEL_LOG_INFO, "cpu_offload: the parameter and gradient blocks of %u "
		       "FSDP units in %shost memory (%llu bytes), the optimizer on the CPU threads",
		       s->n_units, s->units[0].device != ACCEL_DEVICE_CPU ? "pinned " : "",
		       (unsigned long long)b);
	}
	uint64_t owned = 0;
	for (uint32_t k = 0; k < s->n_pieces; k++)
		owned += s->pieces[k].numel;
	H->log(s->h, ACCEL_LOG_DEBUG, "%u FSDP units, %u pieces, %llu of %llu elements owned by "
	       "rank %u", s->n_units, s->n_pieces, (unsigned long long)owned,
	       (unsigned long long)s->model->total_numel, s->rank);
	fsdp_log_estimate(s);
	return ACCEL_OK;
}
