/* SPDX-License-Identifier: MIT */
/* plugins/fsdp/fsdp_hooks.c: the fsdp strategy at run time.  A sharded FSDP
 * unit (FULL_SHARD, SHARD_GRAD_OP) is all-gathered into its flat parameter
 * in the pre hook of its first program unit and freed after the post hook
 * of its last: FULL_SHARD after forward and again after backward,
 * SHARD_GRAD_OP only after backward (or after a forward-only pass).  Its
 * full flat gradient lives from its first pre_backward to the sync step's
 * reduce-scatter (non-sync micro-steps accumulate into it: no
 * ACCEL_CAP_MICRO_REDUCE); the rank's block of the mean lands in `acc`,
 * which the optimizer store steps.  NO_SHARD keeps both whole, all-reduces
 * the gradient and all-gathers the updated blocks after the step.
 *
 * A parameter a program unit of another FSDP unit also uses (a tied weight,
 * ABI 1.7 `uses`): that unit's forward hooks gather the owning FSDP unit
 * too and free it after (FULL_SHARD; SHARD_GRAD_OP keeps it for backward),
 * its pre_backward gathers it with its flat gradient and keeps both until
 * the owner's own post_backward: one gradient, reduced once, one shard of
 * master and optimizer state.  NO_SHARD keeps everything bound anyway.
 *
 * Debug log lines "fsdp: trace: <event> unit <i>" (gather, prefetch, free,
 * reduce) record the order of gathers and frees (docs/fsdp.md). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

static uint64_t wbytes(const fsdp_unit *f)
{
	return f->padded * accel_abi_dtype_size(f->dtype);
}

static void trace(fsdp_state *s, const char *event, const fsdp_unit *f)
{
	s->host->log(s->h, ACCEL_LOG_DEBUG, "trace: %s unit %u", event,
	             (unsigned)(f - s->units));
}

static int bind_unit(fsdp_state *s, fsdp_unit *f, int with_grad)
{
	for (uint32_t k = 0; k < f->n_params; k++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, f->first_param + k);
		void *data = f->gathered ? shard_at(f->work, f->dtype, f->at[k]) : NULL;
		void *grad = with_grad && f->grad && p->requires_grad
		                     ? shard_at(f->grad, f->grad_dtype, f->at[k])
		                     : NULL;
		int r = s->host->param_bind(s->h, f->first_param + k, data, grad);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

/* Start gathering f (async: f->greq, a prefetch). */
static int gather_start(fsdp_state *s, fsdp_unit *f, int async)
{
	int r;
	if (f->gathered)
		return ACCEL_OK;
	if ((r = fsdp_alloc(s, ACCEL_MEM_PARAMS, f, wbytes(f), 0, &f->work)))
		return r;
	accel_view all = shard_view(f->dtype, f->device, f->device_index, f->work, f->padded);
	accel_view mine = shard_view(f->dtype, f->device, f->device_index, f->shard, f->block);
	if (fsdp_offloaded(s)) {
		/* the block from host memory into its place in the gathered flat
		 * parameter (on the stream, before the collective), gathered in
		 * place there */
		accel_view host = fsdp_block_view(s, f, f->dtype, f->shard, f->block);
		mine.data = shard_at(f->work, f->dtype, f->lo);
		if ((r = s->host->op_copy_async(s->h, &mine, &host)))
			return r;
	}
	f->gathered = 1;
	s->gathered_bytes += wbytes(f);
	if (s->gathered_bytes > s->gathered_peak)
		s->gathered_peak = s->gathered_bytes;
	trace(s, async ? "prefetch" : "gather", f);
	return fsdp_allgather(s, &mine, &all, async ? &f->greq : NULL);
}

static int gather_finish(fsdp_state *s, fsdp_unit *f)
{
	if (!f->greq)
		return ACCEL_OK;
	accel_req *q = f->greq;
	f->greq = NULL;
	if (ACCEL_HOST_HAS(s->host, wait_stream) && f->device != ACCEL_DEVICE_CPU)
		return s->host->wait_stream(s->h, q);
	return s->host->wait(s->h, q);
}

static int gather(fsdp_state *s, fsdp_unit *f)
{
	int r = f->gathered ? gather_finish(s, f) : gather_start(s, f, 0);
	return r;
}

static int release(fsdp_state *s, fsdp_unit *f)
{
	int r;
	if (!fsdp_shards_params(s) || !f->gathered || f->in_forward || f->in_backward ||
	    f->materialized || f->held)
		return ACCEL_OK;
	if ((r = gather_finish(s, f)))
		return r;
	f->gathered = 0;
	if ((r = bind_unit(s, f, 0)))
		return r;
	fsdp_free(s, f->work);
	f->work = NULL;
	s->gathered_bytes -= wbytes(f);
	trace(s, "free", f);
	return ACCEL_OK;
}

/* Gathers in flight (prefetches not yet waited for). */
static uint32_t in_flight(const fsdp_state *s)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->n_units; i++)
		n += s->units[i].greq != NULL;
	return n;
}

/* Prefetch FSDP unit i (if it exists and is not gathered), within
 * limit_all_gathers' two gathers in flight. */
static int prefetch(fsdp_state *s, int64_t i)
{
	if (i < 0 || i >= (int64_t)s->n_units || !fsdp_shards_params(s) ||
	    !s->host->grad_enabled(s->h))
		return ACCEL_OK;
	fsdp_unit *f = &s->units[i];
	if (f->gathered)
		return ACCEL_OK;
	if (s->cfg.limit_all_gathers && in_flight(s) >= 2)
		return ACCEL_OK;
	return gather_start(s, f, 1);
}

/* ---- reductions ------------------------------------------------------------------ */

/* The rank's reduced block `blk` (on the parameters' device, in the
 * gradient's or the reduce dtype) into acc.  Offloaded, acc is in host
 * memory, and a copy between the host and a device keeps the dtype: the
 * cast runs on the device first, into the gradient's own block. */
static int to_acc(fsdp_state *s, fsdp_unit *f, const accel_view *blk)
{
	accel_view acc = fsdp_block_view(s, f, f->grad_dtype, f->acc, f->block);
	int r;
	if (fsdp_offloaded(s) && blk->dtype != f->grad_dtype) {
		accel_view g = shard_view(f->grad_dtype, f->device, f->device_index,
		                          shard_at(f->grad, f->grad_dtype, f->lo), f->block);
		if ((r = s->host->op_copy(s->h, &g, blk)))
			return r;
		return s->host->op_copy(s->h, &acc, &g);
	}
	return s->host->op_copy(s->h, &acc, blk);
}

/* A reduction in another dtype than the gradient's (reduce_dtype) is
 * done: cast the reduced values back where the step reads them, and free
 * the copy.  Run by the host inside the wait() or test() that finds the
 * request complete (req_on_done), or right after a reduction that
 * blocked.  Sharded: the rank's block into acc; NO_SHARD: the whole flat
 * gradient.  HYBRID_SHARD reduces the node's block once more across nodes
 * in reduce_dtype first: finish_reduce casts it back after that. */
static int cast_back(void *arg)
{
	fsdp_unit *f = arg;
	fsdp_state *s = f->owner;
	int r;
	if (!f->rbuf || s->rep_g)
		return ACCEL_OK;
	if (fsdp_shards_params(s)) {
		accel_view blk = shard_view(f->red_dtype, f->device, f->device_index,
		                            shard_at(f->rbuf, f->red_dtype, f->lo), f->block);
		r = to_acc(s, f, &blk);
	} else {
		accel_view all = shard_view(f->grad_dtype, f->device, f->device_index, f->grad,
		                            f->padded);
		accel_view rall = shard_view(f->red_dtype, f->device, f->device_index, f->rbuf,
		                             f->padded);
		r = s->host->op_copy(s->h, &all, &rall);
	}
	fsdp_free(s, f->rbuf);
	f->rbuf = NULL;
	f->cast_done = 1;
	s->host->log(s->h, ACCEL_LOG_DEBUG, "reduce_dtype: unit %u cast back from %s %s",
	             (unsigned)(f - s->units), accel_abi_dtype_name(f->red_dtype),
	             f->cb_pending ? "in req_on_done" : "after a blocking reduction");
	f->cb_pending = 0;
	return r;
}

/* Finish f's reduction: its block of the mean into acc; the full gradient
 * freed (sharded) or cleared (NO_SHARD). */
static int finish_reduce(fsdp_state *s, fsdp_unit *f)
{
	const accel_host_v1 *H = s->host;
	int r;
	if (f->req) {
		accel_req *q = f->req;
		f->req = NULL;
		if ((r = H->wait(s->h, q)))
			return r;
	}
	if (f->cast_done) {
		/* req_on_done cast the reduced values back and freed the copy */
		f->cast_done = 0;
		if (!fsdp_shards_params(s))
			return ACCEL_OK;
		if (!f->in_backward && (r = bind_unit(s, f, 0)))
			return r;
		fsdp_free(s, f->grad);
		f->grad = NULL;
		return ACCEL_OK;
	}
	/* the reduced block: in the gradient buffer, or in the reduce-dtype
	 * copy, cast back below */
	accel_view blk = f->rbuf ? shard_view(f->red_dtype, f->device, f->device_index,
	                                      shard_at(f->rbuf, f->red_dtype, f->lo), f->block)
	                         : shard_view(f->grad_dtype, f->device, f->device_index,
	                                      shard_at(f->grad, f->grad_dtype, f->lo), f->block);
	if (s->rep_g) {
		/* HYBRID_SHARD: the node's mean block, averaged across nodes */
		f->rdesc.view.data = blk.data;
		if ((r = H->reduce_bucket_v2(s->h, &f->rdesc, 0, NULL)))
			return r;
	}
	if (!fsdp_shards_params(s)) {
		/* NO_SHARD: the mean is in the flat gradient the store steps
		 * (cast back from a reduce-dtype copy) */
		if (f->rbuf) {
			accel_view all = shard_view(f->grad_dtype, f->device, f->device_index, f->grad,
			                            f->padded);
			accel_view rall = shard_view(f->red_dtype, f->device, f->device_index, f->rbuf,
			                             f->padded);
			r = H->op_copy(s->h, &all, &rall);
			fsdp_free(s, f->rbuf);
			f->rbuf = NULL;
		}
		return r;
	}
	if ((r = to_acc(s, f, &blk)))
		return r;
	fsdp_free(s, f->rbuf);
	f->rbuf = NULL;
	if (!f->in_backward && (r = bind_unit(s, f, 0)))
		return r;
	fsdp_free(s, f->grad);
	f->grad = NULL;
	return ACCEL_OK;
}

static int drain(fsdp_state *s, const fsdp_unit *except)
{
	int r;
	for (uint32_t i = 0; i < s->n_units; i++) {
		fsdp_unit *f = &s->units[i];
		if (f != except && f->issued == 1) {
			f->issued = 2;
			if ((r = finish_reduce(s, f)))
				return r;
		}
	}
	return ACCEL_OK;
}

/* Issue f's reduction (sync steps): reduce-scatter of the flat gradient
 * into its own block (sharded), all-reduce (NO_SHARD); the mean. */
static int issue(fsdp_state *s, fsdp_unit *f)
{
	const accel_host_v1 *H = s->host;
	int r;
	if (f->issued || !f->trainable)
		return ACCEL_OK;
	if (!f->grad) {
		if (fsdp_shards_params(s))
			return H->error(s->h, ACCEL_ERR_STATE, "fsdp needs accel_unit_pre_backward/"
			                "post_backward around every unit's backward; unit '%s' had "
			                "none before this sync step",
			                ACCEL_MODEL_UNIT(s->model, f->first_unit)->name);
		return H->error(s->h, ACCEL_ERR_INTERNAL, "fsdp: NO_SHARD unit without gradient");
	}
	/* sharded: one reduction in flight, finish the earlier ones first (each
	 * frees a full gradient); NO_SHARD: all in flight until the end of the
	 * micro-step, as ddp's buckets */
	if (fsdp_shards_params(s) && (r = drain(s, f)))
		return r;
	f->issued = 1;
	f->desc.view.data = f->grad;
	if (f->red_dtype != f->grad_dtype) {
		/* reduced in another dtype: a cast copy crosses ranks
		 * (MixedPrecision's reduce_dtype); finish_reduce casts back */
		accel_view g = shard_view(f->grad_dtype, f->device, f->device_index, f->grad,
		                          f->padded);
		if ((r = fsdp_alloc(s, ACCEL_MEM_BUFFERS, f,
		                    f->padded * accel_abi_dtype_size(f->red_dtype), ACCEL_MEMF_COMM,
		                    &f->rbuf)))
			return r;
		f->desc.view.data = f->rbuf;
		accel_view rv = f->desc.view;
		if ((r = H->op_copy(s->h, &rv, &g)))
			return r;
	}
	trace(s, "reduce", f);
	f->cast_done = 0;
	if (!fsdp_shards_params(s) || s->S == 1) {
		r = H->reduce_bucket_v2(s->h, &f->desc, 0, &f->req);
	} else {
		accel_view shard = shard_view(f->red_dtype, f->device, f->device_index,
		                              shard_at(f->desc.view.data, f->red_dtype, f->lo),
		                              f->block);
		r = H->reduce_scatter_bucket(s->h, &f->desc, &shard, 0, &f->req);
	}
	if (r || !f->rbuf || s->rep_g)
		return r;
	/* the cast back of the reduce-dtype copy runs when the reduction
	 * completes (inside the wait() that finds it done), not later */
	if (!f->req)
		return cast_back(f);
	f->cb_pending = 1;
	return H->req_on_done(s->h, f->req, cast_back, f);
}

/* ---- hooks --------------------------------------------------------------------------- */

static int unit_of(fsdp_state *s, uint32_t unit, const char *hook, fsdp_unit **ret)
{
	if (!s->model || unit >= s->model->n_units)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "%s of unit %u out of range",
		                      hook, unit);
	*ret = &s->units[s->unit_of[unit]];
	return ACCEL_OK;
}

static int grad_buffer(fsdp_state *s, fsdp_unit *f)
{
	if (!f->trainable || f->grad)
		return ACCEL_OK;
	return fsdp_alloc(s, ACCEL_MEM_GRADS, f, f->padded * accel_abi_dtype_size(f->grad_dtype),
	                  ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &f->grad);
}

/* The FSDP units owning the parameters program unit `unit` also uses (ABI
 * 1.7), other than its own: on = 1 gathers and holds them (backward: with
 * their gradient bound, until their own post_backward); on = 0 (after a
 * forward) drops the hold and frees them as the unit's own post_forward
 * would. */
static int hold_uses(fsdp_state *s, uint32_t unit, int on, int backward)
{
	uint32_t n = 0;
	const uint32_t *uses = shard_unit_uses(s->model, unit, &n);
	uint32_t own = s->unit_of[unit];
	int r;
	if (!fsdp_shards_params(s))
		return ACCEL_OK;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t fi = s->unit_of[ACCEL_MODEL_PARAM(s->model, uses[k])->unit];
		int seen = fi == own;
		for (uint32_t j = 0; j < k && !seen; j++)
			seen = s->unit_of[ACCEL_MODEL_PARAM(s->model, uses[j])->unit] == fi;
		if (seen)
			continue;
		fsdp_unit *f = &s->units[fi];
		if (!on) {
			if (f->held)
				f->held--;
			if (s->cfg.sharding == FSDP_SHARD_GRAD_OP && s->host->grad_enabled(s->h))
				continue;
			if ((r = release(s, f)))
				return r;
			continue;
		}
		if (backward && f->held_bwd)
			continue;
		if ((r = gather(s, f)) || (backward && (r = grad_buffer(s, f))) ||
		    (r = bind_unit(s, f, backward)))
			return r;
		f->held++;
		f->held_bwd |= backward;
	}
	return ACCEL_OK;
}

int fsdp_pre_forward(void *state, uint32_t unit)
{
	fsdp_state *s = state;
	fsdp_unit *f = NULL;
	int r;
	if ((r = unit_of(s, unit, "pre_forward", &f)))
		return r;
	if (!fsdp_shards_params(s))
		return ACCEL_OK;
	if (f->in_forward)
		return hold_uses(s, unit, 1, 0);
	if ((r = gather(s, f)))
		return r;
	f->in_forward = 1;
	if ((r = bind_unit(s, f, 0)) || (r = hold_uses(s, unit, 1, 0)))
		return r;
	return s->cfg.forward_prefetch ? prefetch(s, (int64_t)(f - s->units) + 1) : ACCEL_OK;
}

int fsdp_post_forward(void *state, uint32_t unit)
{
	fsdp_state *s = state;
	fsdp_unit *f = NULL;
	int r;
	if ((r = unit_of(s, unit, "post_forward", &f)) || (r = hold_uses(s, unit, 0, 0)))
		return r;
	if (!fsdp_shards_params(s) || unit != f->first_unit + f->n_units - 1)
		return ACCEL_OK;
	f->in_forward = 0;
	/* SHARD_GRAD_OP keeps the parameters for backward, unless there is none */
	if (s->cfg.sharding == FSDP_SHARD_GRAD_OP && s->host->grad_enabled(s->h))
		return ACCEL_OK;
	return release(s, f);
}

int fsdp_pre_backward(void *state, uint32_t unit)
{
	fsdp_state *s = state;
	fsdp_unit *f = NULL;
	int r;
	if ((r = unit_of(s, unit, "pre_backward", &f)))
		return r;
	if (!fsdp_shards_params(s))
		return ACCEL_OK;
	if (f->in_backward)
		return hold_uses(s, unit, 1, 1);
	if ((r = gather(s, f)) || (r = grad_buffer(s, f)))
		return r;
	f->in_backward = 1;
	if ((r = bind_unit(s, f, 1)) || (r = hold_uses(s, unit, 1, 1)))
		return r;
	return s->cfg.prefetch == FSDP_PREFETCH_PRE ? prefetch(s, (int64_t)(f - s->units) - 1)
	                                            : ACCEL_OK;
}

int fsdp_post_backward(void *state, uint32_t unit)
{
	fsdp_state *s = state;
	fsdp_unit *f = NULL;
	int r;
	if ((r = unit_of(s, unit, "post_backward", &f)))
		return r;
	if (s->unit_done[unit])
		return s->host->error(s->h, ACCEL_ERR_STATE, "accel_unit_post_backward called "
		                      "twice for unit '%s' in one micro-step",
		                      ACCEL_MODEL_UNIT(s->model, unit)->name);
	if (fsdp_shards_params(s) && !f->in_backward)
		return s->host->error(s->h, ACCEL_ERR_STATE, "accel_unit_post_backward for unit "
		                      "'%s' without accel_unit_pre_backward",
		                      ACCEL_MODEL_UNIT(s->model, unit)->name);
	s->unit_done[unit] = 1;
	if (++f->done < f->n_units)
		return ACCEL_OK;
	f->in_backward = 0;
	if (f->held_bwd) {
		/* the last use of a tied weight: every contribution is in */
		f->held_bwd = 0;
		f->held--;
	}
	if (fsdp_shards_params(s) && (r = bind_unit(s, f, 0)))
		return r;
	if (s->host->sync_step(s->h) && (r = issue(s, f)))
		return r;
	if ((r = release(s, f)))
		return r;
	return s->cfg.prefetch == FSDP_PREFETCH_POST ? prefetch(s, (int64_t)(f - s->units) - 1)
	                                             : ACCEL_OK;
}

static int new_micro_step(fsdp_state *s)
{
	int r;
	memset(s->unit_done, 0, s->model->n_units);
	for (uint32_t i = 0; i < s->n_units; i++) {
		fsdp_unit *f = &s->units[i];
		f->done = 0;
		f->in_forward = f->in_backward = 0;
		f->held = 0;
		f->held_bwd = 0;
		/* a prefetch that was not used */
		if ((r = release(s, f)))
			return r;
	}
	return ACCEL_OK;
}

int fsdp_micro_step_end(void *state, uint32_t sync)
{
	fsdp_state *s = state;
	int r;
	if (!s->model)
		return ACCEL_OK;
	if (sync) {
		for (uint32_t i = 0; i < s->n_units; i++)
			if ((r = issue(s, &s->units[i])))
				return r;
		if ((r = drain(s, NULL)))
			return r;
	}
	return new_micro_step(s);
}

int fsdp_reduce(void *state)
{
	fsdp_state *s = state;
	int r;
	for (uint32_t i = 0; i < s->n_units; i++)
		if ((r = issue(s, &s->units[i])))
			return r;
	return drain(s, NULL);
}

/* ---- clipping statistics, step ----------------------------------------------------- */

/* The reduced gradient this rank holds: its block (sharded), or the whole
 * flat gradient (NO_SHARD: the same on every rank). */
static accel_view reduced_view(fsdp_state *s, fsdp_unit *f)
{
	if (!fsdp_shards_params(s))
		return shard_view(f->grad_dtype, f->device, f->device_index, f->grad, f->padded);
	return fsdp_block_view(s, f, f->grad_dtype, f->acc, f->block);
}

static int grad_view(void *ctx, uint32_t i, accel_view *ret_v)
{
	fsdp_state *s = ctx;
	fsdp_unit *u = &s->units[i];
	if (!u->trainable)
		return 0;
	*ret_v = reduced_view(s, u);
	return 1;
}

static int stats_sum(void *ctx, const accel_view *v)
{
	fsdp_state *s = ctx;
	return fsdp_allreduce_sum(s, v);
}

/* Every element lies in exactly one block of the shard group (padding is
 * zero; HYBRID_SHARD's replicas hold the same blocks); NO_SHARD: every
 * rank holds the same whole gradients. */
static shard_sum_fn stats_reduce(fsdp_state *s)
{
	return s->S > 1 && fsdp_shards_params(s) ? stats_sum : NULL;
}

int fsdp_grad_stats(void *state, double *ret_sumsq, uint64_t *ret_nonfinite)
{
	fsdp_state *s = state;
	return shard_grad_stats(s->host, s->h, s->n_units, grad_view, stats_reduce(s), s, s->stats,
	                        ret_sumsq, ret_nonfinite);
}

int fsdp_grad_stats_device(void *state, int32_t device, int32_t device_index, double *stats)
{
	fsdp_state *s = state;
	if (fsdp_offloaded(s)) {
		/* the reduced blocks are in host memory: the core asks grad_stats */
		if (!s->said_host_stats)
			s->host->log(s->h, ACCEL_LOG_DEBUG, "cpu_offload: the gradient blocks are in "
			             "host memory, so their statistics are computed on the host");
		s->said_host_stats = 1;
		return ACCEL_ERR_UNSUPPORTED;
	}
	return shard_grad_stats_device(s->host, s->h, s->n_units, grad_view, stats_reduce(s), s,
	                               device, device_index, stats);
}

/* NO_SHARD: the whole flat parameter and gradient bound (every rank
 * stepped the same values in place).  Sharded: nothing (gathered when
 * used). */
int fsdp_publish(fsdp_state *s)
{
	int r;
	if (fsdp_shards_params(s))
		return ACCEL_OK;
	for (uint32_t i = 0; i < s->n_units; i++)
		if ((r = bind_unit(s, &s->units[i], 1)))
			return r;
	return ACCEL_OK;
}

int fsdp_step(void *state, const accel_step_info_v1 *info)
{
	fsdp_state *s = state;
	const double *gsd = ACCEL_STRUCT_HAS(info, accel_step_info_v1, grad_scale_dev)
	                            ? info->grad_scale_dev
	                            : NULL;
	int keep = info->struct_size >= offsetof(accel_step_info_v1, flags) + sizeof(info->flags) &&
	           (info->flags & ACCEL_STEP_KEEP_GRADS);
	int r;
	if (!info->skip && (r = zero_store_step(s->store, info->grad_scale, gsd)))
		return r;
	/* the reduced gradients start again from zero (NO_SHARD: unless the
	 * core keeps the gradients) */
	for (uint32_t i = 0; i < s->n_units; i++) {
		fsdp_unit *f = &s->units[i];
		f->issued = 0;
		if (!f->trainable || (!fsdp_shards_params(s) && keep))
			continue;
		accel_view a = reduced_view(s, f);
		if ((r = s->host->op_fill(s->h, &a, 0)))
			return r;
	}
	return ACCEL_OK;
}

/* ABI 1.6 slot B: the working weights outside the hooks. */
int fsdp_materialize(void *state, uint32_t unit, uint32_t flags)
{
	fsdp_state *s = state;
	fsdp_unit *f = NULL;
	int r;
	if ((r = unit_of(s, unit, "materialize", &f)))
		return r;
	if ((flags & ACCEL_MATERIALIZE_GATHER) && fsdp_shards_params(s)) {
		int had = f->gathered;
		if ((r = gather(s, f)) || (r = bind_unit(s, f, f->in_backward)))
			return r;
		if (!had)
			f->materialized = 1;
	}
	if (flags & ACCEL_MATERIALIZE_RELEASE) {
		if ((flags & ACCEL_MATERIALIZE_WRITEBACK) && f->gathered && fsdp_shards_params(s)) {
			accel_view mine = shard_view(f->dtype, f->device, f->device_index,
			                             shard_at(f->work, f->dtype, f->lo), f->block);
			accel_view sh = fsdp_block_view(s, f, f->dtype, f->shard, f->block);
			if ((r = s->host->op_copy(s->h, &sh, &mine)))
				return r;
		}
		if (f->materialized) {
			f->materialized = 0;
			if ((r = release(s, f)))
				return r;
		}
	}
	return ACCEL_OK;
}
