/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_partition.c: the zero strategy's layout (reduce groups,
 * blocks, pieces), initial values, stages 0-2 (gradient reduction, the
 * accumulation into the gradient shard) and the step of every stage.
 * Stage 3's unit hooks are in zero_stage3.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static uint32_t place_of_mem(int32_t device, uint32_t category)
{
	(void)device;
	return category == ACCEL_MEM_OFFLOAD ? ACCEL_EST_HOST : ACCEL_EST_DEVICE;
}

/* mem_alloc with the plugin's own tally (the memory report compares it
 * with the estimate). */
int zero_alloc(zero_state *s, uint32_t category, int32_t device, int32_t device_index,
               uint64_t bytes, uint32_t flags, void **ret)
{
	int r = s->host->mem_alloc(s->h, category, device, device_index, bytes ? bytes : 1, flags,
	                           ret);
	if (r)
		return r;
	uint32_t pl = place_of_mem(device, category);
	s->mem[pl][category] += bytes;
	if (s->mem[pl][category] > s->mem_peak[pl][category])
		s->mem_peak[pl][category] = s->mem[pl][category];
	return ACCEL_OK;
}

void zero_free(zero_state *s, void *p, uint32_t category, int32_t device, uint64_t bytes)
{
	if (!p)
		return;
	s->host->mem_free(s->h, p);
	s->mem[place_of_mem(device, category)][category] -= bytes;
}

static uint64_t group_bytes(const zero_group *g, uint32_t dtype, uint64_t n)
{
	(void)g;
	return n * accel_abi_dtype_size(dtype);
}

void zero_release_all(zero_state *s)
{
	const accel_host_v1 *H = s->host;
	for (uint32_t i = 0; s->groups && i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		if (g->req)
			H->wait(s->h, g->req);
		g->req = NULL;
		if (g->work == g->keep_work)
			g->work = NULL;
		if (g->grad == g->keep_grad)
			g->grad = NULL;
		zero_free(s, g->work, ACCEL_MEM_PARAMS, g->device, group_bytes(g, g->dtype, g->padded));
		zero_free(s, g->grad, zero_grad_category(s), g->device,
		          group_bytes(g, g->grad_dtype, g->padded));
		zero_free(s, g->keep_work, ACCEL_MEM_PARAMS, g->device,
		          group_bytes(g, g->dtype, g->padded));
		zero_free(s, g->keep_grad, zero_grad_category(s), g->device,
		          group_bytes(g, g->grad_dtype, g->padded));
		g->work = g->grad = g->keep_work = g->keep_grad = NULL;
		if (!zero_param_nvme(s))
			zero_free(s, g->shard_work, ACCEL_MEM_PARAMS, g->device,
			          group_bytes(g, g->dtype, g->block));
		zero_free(s, g->acc, ACCEL_MEM_GRADS, g->device,
		          g->block * accel_abi_dtype_size(g->acc_dtype));
		free(g->at);
		free(g->entries);
	}
	s->store = zero_store_free(s->store);
	zero3p_close(s);
	free(s->piece_group);
	free(s->piece_boff);
	if (s->stats)
		H->mem_free(s->h, s->stats);
	free(s->groups);
	free(s->unit_group);
	free(s->unit_done);
	free(s->pieces);
	free(s->piece_at);
	free(s->save);
	free(s->save_at);
	free(s->trace);
	free(s->fifo);
	s->groups = NULL;
	s->stats = NULL;
}

/* ---- layout ------------------------------------------------------------------- */

/* A group closes once it holds `target` elements (0: one unit each). */
static int split_group(void *ctx, uint32_t u, const shard_span *cur)
{
	uint64_t target = *(const uint64_t *)ctx;
	(void)u;
	return cur->numel >= target || target == 0;
}

static int build_groups(zero_state *s)
{
	const accel_model_v1 *m = s->model;
	const accel_host_v1 *H = s->host;
	uint64_t target = s->cfg.stage == 3 ? 0 : (uint64_t)s->cfg.reduce_bucket_size;
	uint32_t n = m->n_units ? m->n_units : 1;
	shard_span *spans = calloc(n, sizeof(*spans));
	zero_group *g;
	int r;

	s->groups = calloc(n, sizeof(*s->groups));
	s->unit_group = calloc(n, sizeof(uint32_t));
	s->unit_done = calloc(n, 1);
	s->fifo = calloc(n, sizeof(uint32_t));
	if (!spans || !s->groups || !s->unit_group || !s->unit_done || !s->fifo) {
		free(spans);
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	}
	if ((r = shard_cut_spans(H, s->h, m, "zero", "zero keeps a unit in one flat buffer",
	                         split_group, &target, spans, s->unit_group, &s->n_groups))) {
		free(spans);
		return r;
	}
	for (uint32_t i = 0; i < s->n_groups; i++) {
		s->groups[i].owner = s;
		SHARD_SPAN_COPY(&s->groups[i], &spans[i]);
	}
	free(spans);
	for (uint32_t i = 0; i < s->n_groups; i++) {
		g = &s->groups[i];
		g->at = calloc(g->n_params, sizeof(uint64_t));
		g->entries = calloc(g->n_params, sizeof(*g->entries));
		if (!g->at || !g->entries)
			return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
		/* the bucket description: one run per trainable parameter */
		shard_param_runs(m, g->first_param, g->n_params, g->at, g->entries, &g->n_entries);
		g->trainable = g->n_entries != 0;
		g->padded = shard_padded(g->numel, s->W, ZERO_ALIGN);
		if (!g->padded)
			return H->error(s->h, ACCEL_ERR_INVALID_ARG, "group %u has no elements", i);
		shard_block(g->padded, s->W, s->rank, &g->lo, &g->block);
		g->desc = (accel_bucket_v1){sizeof(accel_bucket_v1), i,
		                            shard_view(g->grad_dtype, g->device, g->device_index, NULL,
		                                       g->padded),
		                            g->n_entries, 0, g->entries, NULL};
		g->persistent = s->cfg.stage == 3 && (double)g->numel <= s->cfg.persistence_threshold;
	}
	uint64_t sum = 0, top1 = 0, top2 = 0;
	for (uint32_t i = 0; i < s->n_groups; i++) {
		const zero_group *u = &s->groups[i];
		if (u->persistent)
			continue;
		sum += u->padded;
		if (u->padded > top1) {
			top2 = top1;
			top1 = u->padded;
		} else if (u->padded > top2) {
			top2 = u->padded;
		}
	}
	s->keep_units = zero3_keeps_units(&s->cfg, sum, top1, top2);
	return ACCEL_OK;
}

/* This rank's pieces: stage 0 owns every trainable parameter whole; stages
 * 1-3 the trainable runs inside their block of each group.  Also the
 * ranges save_state writes (stage 0: the block's, so that each element is
 * written once). */
static int build_pieces(zero_state *s)
{
	const accel_model_v1 *m = s->model;
	uint32_t cap = m->n_params + 1;
	s->pieces = calloc(cap, sizeof(*s->pieces));
	s->piece_at = calloc(cap, sizeof(uint64_t));
	s->save = calloc(cap, sizeof(*s->save));
	s->save_at = calloc(cap, sizeof(uint64_t));
	s->piece_group = calloc(cap, sizeof(uint32_t));
	s->piece_boff = calloc(cap, sizeof(uint64_t));
	shard_piece *sp = calloc(cap, sizeof(*sp));
	uint64_t *numel = calloc(cap, sizeof(uint64_t));
	if (!s->pieces || !s->piece_at || !s->save || !s->save_at || !s->piece_group ||
	    !s->piece_boff || !sp || !numel) {
		free(sp);
		free(numel);
		return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	}
	uint64_t at = 0;
	for (uint32_t i = 0; i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		for (uint32_t k = 0; k < g->n_params; k++)
			numel[k] = ACCEL_MODEL_PARAM(m, g->first_param + k)->numel;
		uint32_t n = shard_pieces(g->at, numel, g->n_params, g->lo, g->block, sp);
		if (s->cfg.stage == 0) {
			/* the store: whole parameters; checkpoints: the block's runs */
			uint64_t first_at = at;
			for (uint32_t k = 0; k < g->n_params; k++) {
				const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, g->first_param + k);
				if (!p->requires_grad)
					continue;
				zero_piece *z = &s->pieces[s->n_pieces];
				*z = (zero_piece){g->first_param + k, g->grad_dtype, 0, p->numel,
				                  shard_at(g->work, g->dtype, g->at[k]),
				                  shard_at(g->grad, g->grad_dtype, g->at[k]),
				                  g->dtype == ACCEL_DTYPE_F32, 0};
				s->piece_at[s->n_pieces++] = at;
				at += p->numel;
			}
			for (uint32_t j = 0; j < n; j++) {
				uint32_t k = sp[j].item;
				if (!ACCEL_MODEL_PARAM(m, g->first_param + k)->requires_grad)
					continue;
				/* where parameter k starts in the store */
				uint64_t pat = first_at;
				for (uint32_t q = 0; q < k; q++)
					if (ACCEL_MODEL_PARAM(m, g->first_param + q)->requires_grad)
						pat += numel[q];
				s->save[s->n_save] = (zero_piece){g->first_param + k, g->grad_dtype,
				                                  sp[j].item_offset, sp[j].numel, NULL, NULL,
				                                  0, 0};
				s->save_at[s->n_save++] = pat + sp[j].item_offset;
			}
			continue;
		}
		for (uint32_t j = 0; j < n; j++) {
			uint32_t k = sp[j].item;
			if (!ACCEL_MODEL_PARAM(m, g->first_param + k)->requires_grad)
				continue;
			/* offload_param nvme: no shard in memory until zero3p_shards_in() */
			void *work = s->cfg.stage < 3 ? shard_at(g->work, g->dtype, g->lo + sp[j].block_offset)
			             : g->shard_work ? shard_at(g->shard_work, g->dtype, sp[j].block_offset)
			                             : NULL;
			const void *grad = s->cfg.stage >= 2
			                     ? shard_at(g->acc, g->acc_dtype, sp[j].block_offset)
			                     : shard_at(g->grad, g->grad_dtype, g->lo + sp[j].block_offset);
			zero_piece *z = &s->pieces[s->n_pieces];
			*z = (zero_piece){g->first_param + k,
			                  s->cfg.stage >= 2 ? g->acc_dtype : g->grad_dtype,
			                  sp[j].item_offset, sp[j].numel, work, grad,
			                  g->dtype == ACCEL_DTYPE_F32 && s->cfg.opt_place == ZERO_PLACE_DEVICE &&
			                          !zero_param_nvme(s),
			                  0};
			s->piece_group[s->n_pieces] = i;
			s->piece_boff[s->n_pieces] = sp[j].block_offset;
			s->piece_at[s->n_pieces] = at;
			s->save[s->n_save] = *z;
			s->save_at[s->n_save++] = at;
			s->n_pieces++;
			at += sp[j].numel;
		}
	}
	if (s->cfg.stage == 0)
		for (uint32_t k = 0; k < s->n_pieces; k++)
			s->pieces[k].master_is_work = s->pieces[k].master_is_work &&
			                               s->cfg.opt_place == ZERO_PLACE_DEVICE;
	free(sp);
	free(numel);
	return ACCEL_OK;
}

static int alloc_group(zero_state *s, zero_group *g)
{
	int r;
	uint32_t st = (uint32_t)s->cfg.stage;
	if (st < 3) {
		if ((r = zero_alloc(s, ACCEL_MEM_PARAMS, g->device, g->device_index,
		                    group_bytes(g, g->dtype, g->padded), ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO,
		                    &g->work)))
			return r;
		if (g->trainable &&
		    (r = zero_alloc(s, zero_grad_category(s), g->device, g->device_index,
		                    group_bytes(g, g->grad_dtype, g->padded),
		                    ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &g->grad)))
			return r;
	} else if (!zero_param_nvme(s) &&
	           (r = zero_alloc(s, ACCEL_MEM_PARAMS, g->device, g->device_index,
	                           group_bytes(g, g->dtype, g->block), ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO,
	                           &g->shard_work))) {
		return r;
	}
	g->acc_dtype = zero_acc_dtype(g->grad_dtype, s->cfg.grad_accum);
	if (st >= 2 && g->trainable &&
	    (r = zero_alloc(s, ACCEL_MEM_GRADS, g->device, g->device_index,
	                    g->block * accel_abi_dtype_size(g->acc_dtype), ACCEL_MEMF_ZERO,
	                    &g->acc)))
		return r;
	g->desc.view.data = g->grad;
	return ACCEL_OK;
}

/* Initial values: every parameter whole in f32 (rank 0's, broadcast), or
 * at stage 3 with zero3_init_flag each rank's block only; into the working
 * weights and the masters. */
static int init_values(zero_state *s)
{
	const accel_host_v1 *H = s->host;
	const accel_model_v1 *m = s->model;
	uint64_t largest = shard_largest_param(m);
	float *tmp = NULL;
	int r = ACCEL_OK;
	int own_only = s->cfg.stage == 3 && s->cfg.zero3_init_flag;

	/* host memory: param_init converts, a broadcast of host memory is the
	 * host backend's; one parameter at a time */
	if ((r = zero_alloc(s, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, largest * 4, 0,
	                    (void **)&tmp)))
		return r;
	uint32_t pk = 0;   /* next store piece */
	for (uint32_t gi = 0; !r && gi < s->n_groups; gi++) {
		zero_group *g = &s->groups[gi];
		for (uint32_t k = 0; !r && k < g->n_params; k++) {
			uint32_t pi = g->first_param + k;
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, pi);
			uint64_t plo = 0, pn = p->numel;   /* the range of it this rank needs */
			if (s->cfg.stage == 3) {
				uint64_t a = g->at[k], b = a + p->numel;
				uint64_t lo = g->lo > a ? g->lo : a, hi = g->lo + g->block < b ? g->lo + g->block : b;
				plo = hi > lo ? lo - a : 0;
				pn = hi > lo ? hi - lo : 0;
			}
			if (own_only) {
				accel_view v = shard_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, tmp + plo, pn);
				if (pn && (r = H->param_init(s->h, pi, plo, &v)))
					break;
			} else {
				accel_view v = shard_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, tmp, p->numel);
				if ((r = H->param_init(s->h, pi, 0, &v)))
					break;
				/* Every rank starts from rank 0's values, whatever the init did. */
				if (s->W > 1 && (r = H->broadcast(s->h, &v, 0, NULL)))
					break;
			}
			accel_view src = shard_view(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, tmp + plo, pn);
			accel_view dst = s->cfg.stage == 3
			        ? shard_view(g->dtype, g->device, g->device_index,
			                     shard_at(g->shard_work, g->dtype, g->at[k] + plo - g->lo), pn)
			        : shard_view(g->dtype, g->device, g->device_index,
			                     shard_at(g->work, g->dtype, g->at[k]), pn);
			if (pn && (r = H->op_copy(s->h, &dst, &src)))
				break;
			/* masters of this parameter's pieces, from the f32 values */
			r = zero_store_write_param(s->store, s->pieces, s->piece_at, s->n_pieces, &pk, pi,
			                           tmp);
		}
	}
	zero_free(s, tmp, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, largest * 4);
	return r;
}

static int bind_all(zero_state *s)
{
	for (uint32_t gi = 0; gi < s->n_groups; gi++) {
		zero_group *g = &s->groups[gi];
		for (uint32_t k = 0; k < g->n_params; k++) {
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, g->first_param + k);
			int r = s->host->param_bind(s->h, g->first_param + k,
			                            shard_at(g->work, g->dtype, g->at[k]),
			                            p->requires_grad ? shard_at(g->grad, g->grad_dtype, g->at[k])
			                                             : NULL);
			if (r)
				return r;
		}
	}
	return ACCEL_OK;
}

int zero_wrap(void *state)
{
	zero_state *s = state;
	const accel_host_v1 *H = s->host;
	int r;

	if ((r = shard_wrap_begin(H, s->h, "zero", ZERO_MAX_STATE, &s->model, &s->n_state)))
		return r;
	if ((r = build_groups(s)))
		return r;
	if (s->cfg.param_place != ZERO_PLACE_DEVICE && s->groups[0].device != ACCEL_DEVICE_CPU)
		return H->error(s->h, ACCEL_ERR_UNSUPPORTED, "zero_optimization.offload_param.device "
		                "\"%s\" with parameters on a GPU is not implemented (gathers would "
		                "need a host-to-device staging copy); set it to \"none\"",
		                s->cfg.param_place == ZERO_PLACE_CPU ? "cpu" : "nvme");
	for (uint32_t i = 0; i < s->n_groups; i++)
		if ((r = alloc_group(s, &s->groups[i])))
			return r;
	if ((r = build_pieces(s)))
		return r;
	if ((r = zero_alloc(s, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, 2 * sizeof(double),
	                    ACCEL_MEMF_COMM, (void **)&s->stats)))
		return r;
	const zero_group *g0 = &s->groups[0];
	zero_store_opts o = {
		.place = s->cfg.opt_place,
		.n_state = s->n_state,
		.device = g0->device,
		.device_index = g0->device_index,
		.sub_group_size = (uint64_t)s->cfg.sub_group_size,
		.pin_memory = s->cfg.opt_pin_memory,
		.n_threads = 0,
		.buffer_count = (uint32_t)s->cfg.opt_buffer_count,
		.nvme_path = s->cfg.opt_nvme_path,
		.nvme_key = "zero_optimization.offload_optimizer.nvme_path",
		.aio = s->cfg.aio,
	};
	/* offload_param nvme: the shards are in memory while the store is made
	 * and the initial values written, then in the swap (the store's
	 * pointers to them are renewed by every zero3p_shards_in()) */
	if (zero_param_nvme(s) && ((r = zero3p_open(s)) || (r = zero3p_shards_in(s, 0))))
		return r;
	if ((r = zero_store_new(H, s->h, &o, s->pieces, s->n_pieces, &s->store)) ||
	    (r = init_values(s)))
		return r;
	if (zero_param_nvme(s) && (r = zero3p_shards_out(s)))
		return r;
	if (s->cfg.stage < 3)
		r = bind_all(s);
	else
		r = zero3_regather_persistent(s);
	if (r)
		return r;
	uint64_t owned = 0;
	for (uint32_t k = 0; k < s->n_pieces; k++)
		owned += s->pieces[k].numel;
	H->log(s->h, ACCEL_LOG_DEBUG, "%u reduce groups, %u pieces, %llu of %llu elements "
	       "owned by rank %u", s->n_groups, s->n_pieces, (unsigned long long)owned,
	       (unsigned long long)s->model->total_numel, s->rank);
	return ACCEL_OK;
}

/* ---- stages 0-2: gradients ------------------------------------------------------ */

static int fifo_push(zero_state *s, uint32_t gi)
{
	s->fifo[(s->fifo_head + s->fifo_n) % s->model->n_units] = gi;
	s->fifo_n++;
	return ACCEL_OK;
}

/* Finish the oldest reduction in flight: wait, then (stage 2) add the
 * received block into the f32 shard and clear the full buffer for the next
 * micro-step; (stage 3) the same and free the unit's gradient. */
static int fifo_pop(zero_state *s)
{
	const accel_host_v1 *H = s->host;
	uint32_t gi = s->fifo[s->fifo_head];
	zero_group *g = &s->groups[gi];
	int r = ACCEL_OK;
	s->fifo_head = (s->fifo_head + 1) % s->model->n_units;
	s->fifo_n--;
	if (g->req) {
		accel_req *q = g->req;
		g->req = NULL;
		if ((r = H->wait(s->h, q)))
			return r;
	}
	if (s->cfg.stage >= 2) {
		accel_view blk = shard_view(g->grad_dtype, g->device, g->device_index,
		                            shard_at(g->grad, g->grad_dtype, g->lo), g->block);
		accel_view acc = shard_view(g->acc_dtype, g->device, g->device_index, g->acc, g->block);
		/* an f32 shard accumulates; one in the gradient dtype holds the
		 * one micro-step of a step (zero_acc_dtype) */
		r = g->acc_dtype == ACCEL_DTYPE_F32 ? H->op_axpy(s->h, &acc, 1.0, &blk)
		                                     : H->op_copy(s->h, &acc, &blk);
		if (r)
			return r;
		if (s->cfg.stage == 2) {
			accel_view all = shard_view(g->grad_dtype, g->device, g->device_index, g->grad,
			                            g->padded);
			r = H->op_fill(s->h, &all, 0);
		} else {
			if (g->grad != g->keep_grad)
				zero_free(s, g->grad, zero_grad_category(s), g->device,
				          group_bytes(g, g->grad_dtype, g->padded));
			g->grad = NULL;
		}
	}
	return r;
}

int zero_drain(zero_state *s, uint32_t keep)
{
	int r;
	while (s->fifo_n > keep)
		if ((r = fifo_pop(s)))
			return r;
	return ACCEL_OK;
}

/* Issue group g's reduction: stage 0 all-reduce (mean) of the whole
 * bucket; stages 1-3 reduce-scatter in place (this rank's block of the
 * mean lands at its block), or with reduce_scatter false an all-reduce of
 * which the block is kept. */
int zero_issue(zero_state *s, zero_group *g, int async)
{
	const accel_host_v1 *H = s->host;
	int r;
	if (g->issued || !g->trainable)
		return ACCEL_OK;
	g->issued = 1;
	g->desc.view.data = g->grad;
	accel_req **rq = async ? &g->req : NULL;
	if (s->cfg.stage == 0 || !s->cfg.reduce_scatter || s->W == 1) {
		r = H->reduce_bucket_v2(s->h, &g->desc, 0, rq);
	} else {
		accel_view shard = shard_view(g->grad_dtype, g->device, g->device_index,
		                              shard_at(g->grad, g->grad_dtype, g->lo), g->block);
		r = H->reduce_scatter_bucket(s->h, &g->desc, &shard, 0, rq);
	}
	if (r)
		return r;
	return fifo_push(s, (uint32_t)(g - s->groups));
}

/* Stages 0-2: when every unit of a group finished backward, reduce it
 * (stages 0, 1 on sync micro-steps only; stage 2 on every micro-step). */
int zero_post_backward(void *state, uint32_t unit)
{
	zero_state *s = state;
	const accel_model_v1 *m = s->model;
	if (!m || unit >= m->n_units)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "post_backward of unit %u "
		                      "out of range", unit);
	if (s->unit_done[unit])
		return s->host->error(s->h, ACCEL_ERR_STATE, "accel_unit_post_backward called "
		                      "twice for unit '%s' in one micro-step",
		                      ACCEL_MODEL_UNIT(m, unit)->name);
	s->unit_done[unit] = 1;
	if (s->cfg.stage < 2 && !s->host->sync_step(s->h))
		return ACCEL_OK;
	zero_group *g = &s->groups[s->unit_group[unit]];
	uint32_t left = 0;
	for (uint32_t u = g->first_unit; u < g->first_unit + g->n_units; u++)
		left += !s->unit_done[u];
	if (left)
		return ACCEL_OK;
	/* always asynchronous: the reduction travels while backward goes on
	 * (overlap_comm false changes nothing; docs/zero.md) */
	int r = zero_issue(s, g, 1);
	/* keep one reduction in flight, finish the older ones (stage 2 frees
	 * nothing, but the accumulation runs while the next one travels) */
	if (!r && s->cfg.stage >= 2)
		r = zero_drain(s, 1);
	return r;
}

static void new_micro_step(zero_state *s)
{
	memset(s->unit_done, 0, s->model->n_units);
	for (uint32_t i = 0; i < s->n_groups; i++)
		s->groups[i].issued = 0;
}

/* Stages 2, 3 reduce on every micro-step: issue what the hooks did not,
 * finish everything.  Stages 0, 1: on non-sync micro-steps nothing. */
int zero_micro_step_end(void *state, uint32_t sync)
{
	zero_state *s = state;
	int r;
	if (!s->model)
		return ACCEL_OK;
	if (s->cfg.stage >= 2) {
		for (uint32_t i = 0; i < s->n_groups; i++) {
			zero_group *g = &s->groups[i];
			if (s->cfg.stage == 3 && !g->issued && g->trainable) {
				/* stage 3 reduces in post_backward only */
				const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(s->model, g->first_unit);
				return s->host->error(s->h, ACCEL_ERR_STATE, "stage 3 needs "
				                      "accel_unit_pre_backward/post_backward around every "
				                      "unit's backward; unit '%s' had none this micro-step",
				                      ui->name);
			}
			if ((r = zero_issue(s, g, 1)))
				return r;
		}
		if ((r = zero_drain(s, 0)))
			return r;
		new_micro_step(s);
		if (s->cfg.stage == 3 && (r = zero3_end_micro(s)))
			return r;
	} else if (!sync) {
		new_micro_step(s);
	}
	return ACCEL_OK;
}

int zero_reduce(void *state)
{
	zero_state *s = state;
	int r;
	if (s->cfg.stage < 2) {
		for (uint32_t i = 0; i < s->n_groups; i++)
			if ((r = zero_issue(s, &s->groups[i], 1)))
				return r;
		if ((r = zero_drain(s, 0)))
			return r;
		new_micro_step(s);
	}
	return ACCEL_OK;
}

/* The view of group g's reduced gradients this rank holds: stage 0 all of
 * them, stage 1 its block, stages 2-3 its f32 shard. */
static accel_view reduced_view(zero_state *s, zero_group *g)
{
	if (s->cfg.stage == 0)
		return shard_view(g->grad_dtype, g->device, g->device_index, g->grad, g->padded);
	if (s->cfg.stage == 1)
		return shard_view(g->grad_dtype, g->device, g->device_index,
		                  shard_at(g->grad, g->grad_dtype, g->lo), g->block);
	return shard_view(g->acc_dtype, g->device, g->device_index, g->acc, g->block);
}

static int grad_view(void *ctx, uint32_t i, accel_view *ret_v)
{
	zero_state *s = ctx;
	zero_group *u = &s->groups[i];
	if (!u->trainable)
		return 0;
	*ret_v = reduced_view(s, u);
	return 1;
}

static int stats_sum(void *ctx, const accel_view *v)
{
	zero_state *s = ctx;
	return s->host->allreduce(s->h, v, v, ACCEL_RED_SUM, NULL);
}

/* Stage 0: every rank holds the same whole gradients.  Stages 1-3: each
 * element lies in exactly one rank's block (padding is zero). */
static shard_sum_fn stats_reduce(zero_state *s)
{
	return s->cfg.stage >= 1 && s->W > 1 ? stats_sum : NULL;
}

int zero_grad_stats(void *state, double *ret_sumsq, uint64_t *ret_nonfinite)
{
	zero_state *s = state;
	return shard_grad_stats(s->host, s->h, s->n_groups, grad_view, stats_reduce(s), s, s->stats,
	                        ret_sumsq, ret_nonfinite);
}

int zero_grad_stats_device(void *state, int32_t device, int32_t device_index, double *stats)
{
	zero_state *s = state;
	return shard_grad_stats_device(s->host, s->h, s->n_groups, grad_view, stats_reduce(s), s,
	                               device, device_index, stats);
}

/* Stages 1-2: every rank's updated block to every rank (all-gather in
 * place); stage 3: the persistent units again. */
int zero_publish(zero_state *s)
{
	const accel_host_v1 *H = s->host;
	int r;
	if (s->cfg.stage == 3)
		return zero3_regather_persistent(s);
	if (s->cfg.stage == 0 || s->W == 1)
		return ACCEL_OK;
	for (uint32_t i = 0; i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		if (!g->trainable)
			continue;
		accel_view all = shard_view(g->dtype, g->device, g->device_index, g->work, g->padded);
		accel_view mine = shard_view(g->dtype, g->device, g->device_index,
		                             shard_at(g->work, g->dtype, g->lo), g->block);
		if ((r = H->allgather(s->h, &mine, &all, &g->req)))
			return r;
	}
	for (uint32_t i = 0; i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		if (g->req) {
			accel_req *q = g->req;
			g->req = NULL;
			if ((r = H->wait(s->h, q)))
				return r;
		}
	}
	return ACCEL_OK;
}

int zero_step(void *state, const accel_step_info_v1 *info)
{
	zero_state *s = state;
	const accel_host_v1 *H = s->host;
	const double *gsd = ACCEL_STRUCT_HAS(info, accel_step_info_v1, grad_scale_dev)
	                            ? info->grad_scale_dev
	                            : NULL;
	int r;
	if (!info->skip) {
		if (zero_param_nvme(s) && (r = zero3p_shards_in(s, 1)))
			return r;
		r = zero_store_step(s->store, info->grad_scale, gsd);
		if (zero_param_nvme(s)) {
			int r2 = zero3p_shards_out(s);
			r = r ? r : r2;
		}
		if (r || (r = zero_publish(s)))
			return r;
	}
	int keep = info->struct_size >= offsetof(accel_step_info_v1, flags) + sizeof(info->flags) &&
	           (info->flags & ACCEL_STEP_KEEP_GRADS);
	for (uint32_t i = 0; i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		if (!g->trainable)
			continue;
		if (s->cfg.stage >= 2) {
			accel_view a = shard_view(g->acc_dtype, g->device, g->device_index, g->acc,
			                          g->block);
			if ((r = H->op_fill(s->h, &a, 0)))
				return r;
		} else if (!keep) {
			accel_view a = shard_view(g->grad_dtype, g->device, g->device_index, g->grad,
			                          g->padded);
			if ((r = H->op_fill(s->h, &a, 0)))
				return r;
		}
	}
	if (!s->mem_logged && !info->skip) {
		s->mem_logged = 1;
		zero_log_memory(s);
	}
	return ACCEL_OK;
}
