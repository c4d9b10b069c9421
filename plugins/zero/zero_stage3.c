/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_stage3.c: ZeRO stage 3's unit hooks.  Every rank keeps
 * its block of each unit's working weights (shard_work); a unit is gathered
 * (all-gather into a full buffer, param_bind) in pre_forward/pre_backward
 * and released in post_forward/post_backward, unless it is persistent
 * (stage3_param_persistence_threshold).  The order in which units are
 * entered is recorded in the first training micro-step; later micro-steps
 * prefetch the next units of that order with asynchronous all-gathers,
 * within stage3_prefetch_bucket_size elements ahead and
 * stage3_max_live_parameters gathered at once.  A unit's gradient is
 * bound from pre_backward to post_backward, then reduce-scattered into the
 * rank's f32 gradient shard and freed (zero_partition.c, fifo).  When the
 * units together fit the peak that gathering one by one may reach anyway
 * (zero3_keeps_units), each unit's gather and gradient buffer is allocated
 * at its first use and kept for the job: released units only lose the
 * binding, and no gather pays for page faults and page clearing.
 *
 * A parameter another unit also uses (a tied weight, ABI 1.7 `uses`): the
 * using unit's forward hooks gather the owning group too and release it
 * after (gathered twice in a forward); its pre_backward gathers the owning
 * group with its gradient buffer and keeps both until the owning group's
 * own post_backward, so the two uses add into one gradient, reduced once,
 * and one shard holds the master and optimizer state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"


static uint64_t wbytes(const zero_group *g)
{
	return g->padded * accel_abi_dtype_size(g->dtype);
}

static int bind_unit(zero_state *s, zero_group *g, int with_grad)
{
	for (uint32_t k = 0; k < g->n_params; k++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, g->first_param + k);
		void *data = g->gathered ? shard_at(g->work, g->dtype, g->at[k]) : NULL;
		void *grad = with_grad && g->grad && p->requires_grad
		                     ? shard_at(g->grad, g->grad_dtype, g->at[k])
		                     : NULL;
		int r = s->host->param_bind(s->h, g->first_param + k, data, grad);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

/* Start gathering g into a new full buffer (async: g->req). */
static int gather_start(zero_state *s, zero_group *g, int async)
{
	int r;
	if (s->keep_units) {
		/* the unit's own buffer, allocated at its first gather */
		if (!g->keep_work &&
		    (r = zero_alloc(s, ACCEL_MEM_PARAMS, g->device, g->device_index, wbytes(g), 0,
		                    &g->keep_work)))
			return r;
		g->work = g->keep_work;
	} else if ((r = zero_alloc(s, ACCEL_MEM_PARAMS, g->device, g->device_index, wbytes(g), 0,
	                           &g->work))) {
		return r;
	}
	accel_view all = shard_view(g->dtype, g->device, g->device_index, g->work, g->padded);
	accel_view mine = shard_view(g->dtype, g->device, g->device_index, g->shard_work, g->block);
	if (zero_param_nvme(s)) {
		/* the block from the swap into its place; all-gather in place */
		mine.data = shard_at(g->work, g->dtype, g->lo);
		if ((r = zero3p_read_block(s, g, mine.data)))
			return r;
	}
	g->gathered = 1;
	if (!g->persistent)
		s->live_numel += g->padded;
	if (async) {
		g->gathering = 1;
		return s->host->allgather(s->h, &mine, &all, &g->req);
	}
	return s->host->allgather(s->h, &mine, &all, NULL);
}

static int gather_finish(zero_state *s, zero_group *g)
{
	if (!g->gathering)
		return ACCEL_OK;
	accel_req *q = g->req;
	g->req = NULL;
	g->gathering = 0;
	/* on a device: the stream waits, the host goes on */
	if (ACCEL_HOST_HAS(s->host, wait_stream) && g->device != ACCEL_DEVICE_CPU)
		return s->host->wait_stream(s->h, q);
	return s->host->wait(s->h, q);
}

int zero3_gather(zero_state *s, zero_group *g, int bind)
{
	int r;
	if (!g->gathered)
		r = gather_start(s, g, 0);
	else
		r = gather_finish(s, g);
	if (!r && bind)
		r = bind_unit(s, g, 0);
	return r;
}

int zero3_release(zero_state *s, zero_group *g)
{
	int r;
	if (!g->gathered || g->persistent || g->in_forward || g->in_backward || g->materialized ||
	    g->held)
		return ACCEL_OK;
	if ((r = gather_finish(s, g)))
		return r;
	g->gathered = 0;
	if ((r = bind_unit(s, g, 0)))
		return r;
	if (g->work != g->keep_work)
		zero_free(s, g->work, ACCEL_MEM_PARAMS, g->device, wbytes(g));
	g->work = NULL;
	s->live_numel -= g->padded;
	return ACCEL_OK;
}

/* ---- the recorded order and prefetch -------------------------------------------- */

#define TRACE_BACKWARD 0x80000000u

static int trace_note(zero_state *s, uint32_t entry)
{
	if (!s->host->grad_enabled(s->h))
		return ACCEL_OK;
	if (!s->trace_done) {
		if (s->n_trace == s->cap_trace) {
			uint32_t cap = s->cap_trace ? 2 * s->cap_trace : 64;
			uint32_t *t = realloc(s->trace, cap * sizeof(*t));
			if (!t)
				return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
			s->trace = t;
			s->cap_trace = cap;
		}
		s->trace[s->n_trace++] = entry;
		return ACCEL_OK;
	}
	/* later micro-steps: follow the recorded order; a program that goes
	 * another way only loses the prefetch (every rank sees the same) */
	if (s->trace_pos < s->n_trace && s->trace[s->trace_pos] == entry)
		s->trace_pos++;
	else
		s->trace_pos = UINT32_MAX;
	return ACCEL_OK;
}

static int prefetch(zero_state *s)
{
	if (!s->trace_done || s->trace_pos == UINT32_MAX || s->cfg.prefetch_bucket_size <= 0 ||
	    !s->host->grad_enabled(s->h))
		return ACCEL_OK;
	uint64_t ahead = 0;
	for (uint32_t i = s->trace_pos; i < s->n_trace; i++) {
		zero_group *g = &s->groups[s->unit_group[s->trace[i] & ~TRACE_BACKWARD]];
		if (g->gathered || g->persistent)
			continue;
		if ((double)(ahead + g->padded) > s->cfg.prefetch_bucket_size ||
		    (double)(s->live_numel + g->padded) > s->cfg.max_live_parameters)
			break;
		ahead += g->padded;
		int r = gather_start(s, g, 1);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

/* ---- hooks --------------------------------------------------------------------------- */

static int unit_group(zero_state *s, uint32_t unit, const char *hook, zero_group **ret)
{
	if (!s->model || unit >= s->model->n_units)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "%s of unit %u out of "
		                      "range", hook, unit);
	*ret = &s->groups[s->unit_group[unit]];
	return ACCEL_OK;
}

/* g's gradient buffer for a backward: zeroed (kept units: the kept one). */
static int grad_buffer(zero_state *s, zero_group *g)
{
	int r;
	if (g->trainable && !g->grad && s->keep_units && g->keep_grad) {
		/* the kept buffer, cleared as a new one would be */
		accel_view all = shard_view(g->grad_dtype, g->device, g->device_index, g->keep_grad,
		                            g->padded);
		if ((r = s->host->op_fill(s->h, &all, 0)))
			return r;
		g->grad = g->keep_grad;
	} else if (g->trainable && !g->grad) {
		if ((r = zero_alloc(s, zero_grad_category(s), g->device, g->device_index,
		                    g->padded * accel_abi_dtype_size(g->grad_dtype),
		                    ACCEL_MEMF_ZERO, &g->grad)))
			return r;
		if (s->keep_units)
			g->keep_grad = g->grad;
	}
	return ACCEL_OK;
}

/* The groups owning the parameters unit `unit` also uses (ABI 1.7), other
 * than its own: on = 1 gathers and holds them (backward: with their
 * gradient bound, held until their own post_backward), on = 0 (forward
 * only) drops the hold and releases them. */
static int hold_uses(zero_state *s, uint32_t unit, int on, int backward)
{
	uint32_t n = 0;
	const uint32_t *uses = shard_unit_uses(s->model, unit, &n);
	uint32_t own = s->unit_group[unit];
	int r;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t gi = s->unit_group[ACCEL_MODEL_PARAM(s->model, uses[k])->unit];
		int seen = gi == own;
		for (uint32_t j = 0; j < k && !seen; j++)
			seen = s->unit_group[ACCEL_MODEL_PARAM(s->model, uses[j])->unit] == gi;
		if (seen)
			continue;
		zero_group *g = &s->groups[gi];
		if (!on) {
			if (g->held)
				g->held--;
			if ((r = zero3_release(s, g)))
				return r;
			continue;
		}
		if (backward && g->held_bwd)
			continue;
		if ((r = zero3_gather(s, g, 0)) || (backward && (r = grad_buffer(s, g))) ||
		    (r = bind_unit(s, g, backward)))
			return r;
		g->held++;
		g->held_bwd |= backward;
	}
	return ACCEL_OK;
}

int zero3_pre_forward(void *state, uint32_t unit)
{
	zero_state *s = state;
	zero_group *g = NULL;
	int r;
	if ((r = unit_group(s, unit, "pre_forward", &g)) || (r = trace_note(s, unit)) ||
	    (r = zero3_gather(s, g, 1)))
		return r;
	g->in_forward = 1;
	if ((r = hold_uses(s, unit, 1, 0)))
		return r;
	return prefetch(s);
}

int zero3_post_forward(void *state, uint32_t unit)
{
	zero_state *s = state;
	zero_group *g = NULL;
	int r;
	if ((r = unit_group(s, unit, "post_forward", &g)) || (r = hold_uses(s, unit, 0, 0)))
		return r;
	g->in_forward = 0;
	return zero3_release(s, g);
}

int zero3_pre_backward(void *state, uint32_t unit)
{
	zero_state *s = state;
	zero_group *g = NULL;
	int r;
	if ((r = unit_group(s, unit, "pre_backward", &g)) ||
	    (r = trace_note(s, unit | TRACE_BACKWARD)) || (r = zero3_gather(s, g, 0)))
		return r;
	if ((r = grad_buffer(s, g)))
		return r;
	g->in_backward = 1;
	if ((r = hold_uses(s, unit, 1, 1)))
		return r;
	if ((r = bind_unit(s, g, 1)))
		return r;
	return prefetch(s);
}

int zero3_post_backward(void *state, uint32_t unit)
{
	zero_state *s = state;
	zero_group *g = NULL;
	int r;
	if ((r = unit_group(s, unit, "post_backward", &g)))
		return r;
	if (s->unit_done[unit] || !g->in_backward)
		return s->host->error(s->h, ACCEL_ERR_STATE, "accel_unit_post_backward for "
		                      "unit '%s' %s", ACCEL_MODEL_UNIT(s->model, unit)->name,
		                      s->unit_done[unit] ? "called twice in one micro-step"
		                                         : "without accel_unit_pre_backward");
	s->unit_done[unit] = 1;
	g->in_backward = 0;
	if (g->held_bwd) {
		/* the last use of a tied weight: every contribution is in */
		g->held_bwd = 0;
		g->held--;
	}
	if ((r = bind_unit(s, g, 0)))   /* the gradient leaves the program's hands */
		return r;
	if ((r = zero_issue(s, g, 1)) || (r = zero3_release(s, g)))
		return r;
	return zero_drain(s, 1);
}

/* After a micro-step: the recorded order is complete; anything a
 * prefetch gathered that was not used is released. */
int zero3_end_micro(zero_state *s)
{
	int r;
	if (s->n_trace)
		s->trace_done = 1;
	s->trace_pos = 0;
	for (uint32_t i = 0; i < s->n_groups; i++) {
		s->groups[i].held = 0;
		s->groups[i].held_bwd = 0;
	}
	for (uint32_t i = 0; i < s->n_groups; i++)
		if ((r = zero3_release(s, &s->groups[i])))
			return r;
	return ACCEL_OK;
}

int zero3_regather_persistent(zero_state *s)
{
	int r;
	for (uint32_t i = 0; i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		if (!g->persistent)
			continue;
		if (!g->gathered) {
			if ((r = zero3_gather(s, g, 1)))
				return r;
			continue;
		}
		accel_view all = shard_view(g->dtype, g->device, g->device_index, g->work, g->padded);
		accel_view mine = shard_view(g->dtype, g->device, g->device_index, g->shard_work,
		                             g->block);
		if (zero_param_nvme(s)) {
			mine.data = shard_at(g->work, g->dtype, g->lo);
			if ((r = zero3p_read_block(s, g, mine.data)))
				return r;
		}
		if ((r = s->host->allgather(s->h, &mine, &all, NULL)))
			return r;
	}
	return ACCEL_OK;
}

/* ABI 1.6 slot B: the working weights outside the hooks, unit by unit. */
int zero3_materialize(void *state, uint32_t unit, uint32_t flags)
{
	zero_state *s = state;
	zero_group *g = NULL;
	int r;
	if (s->cfg.stage < 3)
		return ACCEL_OK;   /* always materialized */
	if ((r = unit_group(s, unit, "materialize", &g)))
		return r;
	if (flags & ACCEL_MATERIALIZE_GATHER) {
		int had = g->gathered;
		if ((r = zero3_gather(s, g, 1)))
			return r;
		if (!had)
			g->materialized = 1;
	}
	if (flags & ACCEL_MATERIALIZE_RELEASE) {
		if ((flags & ACCEL_MATERIALIZE_WRITEBACK) && g->gathered) {
			accel_view mine = shard_view(g->dtype, g->device, g->device_index,
			                             shard_at(g->work, g->dtype, g->lo), g->block);
			accel_view sh = shard_view(g->dtype, g->device, g->device_index, g->shard_work,
			                           g->block);
			if (zero_param_nvme(s))
				r = zero3p_write_block(s, g, mine.data);
			else
				r = s->host->op_copy(s->h, &sh, &mine);
			if (r)
				return r;
		}
		if (g->materialized) {
			g->materialized = 0;
			if ((r = zero3_release(s, g)))
				return r;
		}
	}
	return ACCEL_OK;
}
