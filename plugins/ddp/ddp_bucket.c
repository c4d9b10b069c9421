/* SPDX-License-Identifier: MIT */
/* plugins/ddp/ddp_bucket.c: gradient buckets, their readiness and their
 * overlapped reduction.
 *
 * The plan follows PyTorch DDP's reducer after its first iteration
 * (buckets rebuilt in the order gradients become ready): parameters are
 * taken in reverse registration order (backward order), one running bucket
 * per (dtype, device); a bucket closes when it reaches its size limit,
 * which is first_bucket_mb for the first bucket of a kind and bucket_cap_mb
 * after it; buckets are ordered by when their first gradient becomes
 * ready.  The plan is a pure function of the model and the two sizes, so
 * every rank computes the same one; wrap() checks that with a hash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"

#define ALIGN_BYTES 64u

static size_t dtype_size(uint32_t dtype)
{
	switch (dtype) {
	case ACCEL_DTYPE_F64: return 8;
	case ACCEL_DTYPE_F32: return 4;
	case ACCEL_DTYPE_F16:
	case ACCEL_DTYPE_BF16: return 2;
	default: return 1;
	}
}

static const char *dtype_name(uint32_t dtype)
{
	switch (dtype) {
	case ACCEL_DTYPE_F32: return "f32";
	case ACCEL_DTYPE_F16: return "f16";
	case ACCEL_DTYPE_BF16: return "bf16";
	default: return "?";
	}
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * UINT64_C(0x100000001b3);
	return h;
}

/* A bucket being filled, per (dtype, device). */
typedef struct open_bucket {
	uint32_t dtype, reduce_dtype;
	int32_t device, device_index;
	uint64_t bytes, limit;
	uint32_t first_pos;          /* backward position of its first parameter */
	uint32_t n, cap;
	uint32_t *members;           /* parameter indices, in order added        */
	int used;                    /* has ever closed a bucket (limit = cap)    */
} open_bucket;

typedef struct closed_bucket {
	uint32_t dtype, reduce_dtype;
	int32_t device, device_index;
	uint64_t bytes;
	uint32_t first_pos;
	uint32_t n;
	uint32_t *members;
} closed_bucket;

static int cmp_first_pos(const void *a, const void *b)
{
	const closed_bucket *x = a, *y = b;
	return (x->first_pos > y->first_pos) - (x->first_pos < y->first_pos);
}

static int nomem(ddp_state *s)
{
	return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory building the bucket plan");
}

int ddp_plan_build(ddp_state *s)
{
	const accel_model_v1 *m = s->model;
	open_bucket *open = NULL;
	closed_bucket *closed = NULL;
	uint32_t n_open = 0, n_closed = 0, pos = 0, k;
	int r = ACCEL_ERR_NOMEM;

	/* At most one bucket per trainable parameter, one open kind per param. */
	open = calloc(m->n_params + 1, sizeof(*open));
	closed = calloc(m->n_params + 1, sizeof(*closed));
	if (!open || !closed)
		goto fail_nomem;

	for (uint32_t i = m->n_params; i-- > 0;) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		open_bucket *ob = NULL;
		uint32_t gd = ddp_grad_dtype(p), rd = ddp_reduce_dtype(p);
		if (!p->requires_grad)
			continue;
		for (k = 0; k < n_open; k++)
			if (open[k].dtype == gd && open[k].reduce_dtype == rd &&
			    open[k].device == p->device &&
			    open[k].device_index == p->device_index)
				break;
		if (k == n_open) {
			ob = &open[n_open++];
			ob->dtype = gd;
			ob->reduce_dtype = rd;
			ob->device = p->device;
			ob->device_index = p->device_index;
			ob->limit = s->first_bytes;
		} else {
			ob = &open[k];
		}
		if (!ob->members) {
			ob->first_pos = pos;
			ob->n = 0;
			ob->cap = 0;
			ob->bytes = 0;
		}
		if (ob->n == ob->cap) {
			/* grown as it fills: all buckets together hold each parameter
			 * once (an array of n_params per bucket was quadratic) */
			uint32_t nc = ob->cap ? 2 * ob->cap : 8;
			uint32_t *nm = realloc(ob->members, nc * sizeof(uint32_t));
			if (!nm)
				goto fail_nomem;
			ob->members = nm;
			ob->cap = nc;
		}
		ob->members[ob->n++] = i;
		ob->bytes += p->numel * dtype_size(gd);
		pos++;
		if (ob->bytes >= ob->limit) {
			closed_bucket *cb = &closed[n_closed++];
			cb->dtype = ob->dtype;
			cb->reduce_dtype = ob->reduce_dtype;
			cb->device = ob->device;
			cb->device_index = ob->device_index;
			cb->bytes = ob->bytes;
			cb->first_pos = ob->first_pos;
			cb->n = ob->n;
			cb->members = ob->members;
			ob->members = NULL;
			ob->limit = s->cap_bytes;
		}
	}
	for (k = 0; k < n_open; k++) {
		if (!open[k].members)
			continue;
		closed_bucket *cb = &closed[n_closed++];
		cb->dtype = open[k].dtype;
		cb->reduce_dtype = open[k].reduce_dtype;
		cb->device = open[k].device;
		cb->device_index = open[k].device_index;
		cb->bytes = open[k].bytes;
		cb->first_pos = open[k].first_pos;
		cb->n = open[k].n;
		cb->members = open[k].members;
		open[k].members = NULL;
	}
	if (n_closed)
		qsort(closed, n_closed, sizeof(*closed), cmp_first_pos);

	/* Materialize: order[], bucket records, offsets, unit -> buckets. */
	s->n_buckets = n_closed;
	s->buckets = calloc(n_closed ? n_closed : 1, sizeof(*s->buckets));
	s->order = calloc(pos ? pos : 1, sizeof(*s->order));
	s->entries = calloc(pos ? pos : 1, sizeof(*s->entries));
	s->unit_first = calloc(m->n_units + 1, sizeof(*s->unit_first));
	s->unit_done = calloc(m->n_units ? m->n_units : 1, 1);
	s->dbg_first = calloc(n_closed + 1, sizeof(*s->dbg_first));
	s->dbg_numel = calloc(n_closed ? n_closed : 1, sizeof(*s->dbg_numel));
	s->dbg_bytes = calloc(n_closed ? n_closed : 1, sizeof(*s->dbg_bytes));
	s->dbg_dtype = calloc(n_closed ? n_closed : 1, sizeof(*s->dbg_dtype));
	s->launch_pos = calloc(n_closed ? n_closed : 1, sizeof(*s->launch_pos));
	if (!s->buckets || !s->order || !s->entries || !s->unit_first || !s->unit_done || !s->dbg_first ||
	    !s->dbg_numel || !s->dbg_bytes || !s->dbg_dtype || !s->launch_pos)
		goto fail_nomem;
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	uint32_t at = 0;
	for (uint32_t b = 0; b < n_closed; b++) {
		ddp_bucket *bk = &s->buckets[b];
		size_t es = dtype_size(closed[b].dtype);
		uint64_t align = ALIGN_BYTES / es, off = 0;
		bk->dtype = closed[b].dtype;
		bk->reduce_dtype = closed[b].reduce_dtype;
		bk->owner = s;
		bk->device = closed[b].device;
		bk->device_index = closed[b].device_index;
		bk->bytes = closed[b].bytes;
		bk->first = at;
		bk->n = closed[b].n;
		for (uint32_t j = 0; j < closed[b].n; j++) {
			uint32_t pi = closed[b].members[j];
			const accel_param_info_v1 *pp = ACCEL_MODEL_PARAM(m, pi);
			s->entries[at] = (accel_bucket_entry_v1){.param = pi, .param_offset = 0,
			                                         .bucket_offset = off,
			                                         .numel = pp->numel};
			s->order[at++] = pi;
			s->params[pi].bucket = b;
			s->params[pi].offset = off;
			off += (pp->numel + align - 1) / align * align;
			hash = fnv(hash, pp->name, strlen(pp->name) + 1);
			hash = fnv(hash, &pp->numel, sizeof(pp->numel));
			hash = fnv(hash, &pp->dtype, sizeof(pp->dtype));
			hash = fnv(hash, &bk->dtype, sizeof(bk->dtype));
			hash = fnv(hash, &bk->reduce_dtype, sizeof(bk->reduce_dtype));
			hash = fnv(hash, &b, sizeof(b));
		}
		bk->numel = off;
		s->dbg_first[b] = bk->first;
		s->dbg_numel[b] = bk->numel;
		s->dbg_bytes[b] = bk->bytes;
		s->dbg_dtype[b] = bk->dtype;
		s->launch_pos[b] = -1;
	}
	s->dbg_first[n_closed] = at;

	/* Units -> buckets.  A unit's trainable parameters are contiguous in the
	 * registration order but may straddle bucket boundaries. */
	uint32_t total = 0;
	for (uint32_t u = 0; u < m->n_units; u++) {
		const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(m, u);
		uint32_t last = DDP_NO_BUCKET;
		for (uint32_t j = 0; j < ui->n_params; j++) {
			uint32_t b = s->params[ui->first_param + j].bucket;
			if (b != DDP_NO_BUCKET && b != last) {
				total++;
				last = b;
			}
		}
	}
	s->unit_buckets = calloc(total ? total : 1, sizeof(*s->unit_buckets));
	if (!s->unit_buckets)
		goto fail_nomem;
	total = 0;
	s->hook_units = 0;
	for (uint32_t u = 0; u < m->n_units; u++) {
		const accel_unit_info_v1 *ui = ACCEL_MODEL_UNIT(m, u);
		s->unit_first[u] = total;
		for (uint32_t j = 0; j < ui->n_params; j++) {
			uint32_t b = s->params[ui->first_param + j].bucket;
			int seen = 0;
			if (b == DDP_NO_BUCKET)
				continue;
			for (uint32_t x = s->unit_first[u]; x < total; x++)
				seen |= s->unit_buckets[x] == b;
			if (!seen) {
				s->unit_buckets[total++] = b;
				s->buckets[b].n_units++;
			}
		}
		if (total > s->unit_first[u])
			s->hook_units++;
	}
	s->unit_first[m->n_units] = total;
	for (uint32_t b = 0; b < n_closed; b++)
		s->buckets[b].pending = s->buckets[b].n_units;

	s->debug = (accel_ddp_debug_v1){
		.struct_size = sizeof(accel_ddp_debug_v1),
		.n_buckets = n_closed,
		.bucket_first = s->dbg_first,
		.bucket_params = s->order,
		.bucket_numel = s->dbg_numel,
		.bucket_bytes = s->dbg_bytes,
		.bucket_dtype = s->dbg_dtype,
		.launch_pos = s->launch_pos,
		.hook_units = s->hook_units,
		.plan_hash = hash,
	};
	r = ACCEL_OK;
	goto out;

fail_nomem:
	r = nomem(s);
out:
	if (open)
		for (k = 0; k < n_open; k++)
			free(open[k].members);
	if (closed)
		for (k = 0; k < n_closed; k++)
			free(closed[k].members);
	free(open);
	free(closed);
	return r;
}

void ddp_plan_log(ddp_state *s)
{
	const accel_model_v1 *m = s->model;
	char line[1024];
	s->host->log(s->h, ACCEL_LOG_DEBUG, "plan: %u buckets (first %llu bytes, cap %llu bytes), "
	             "hash %016llx", s->n_buckets, (unsigned long long)s->first_bytes,
	             (unsigned long long)s->cap_bytes, (unsigned long long)s->debug.plan_hash);
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		const ddp_bucket *bk = &s->buckets[b];
		size_t len = 0;
		line[0] = '\0';
		for (uint32_t j = 0; j < bk->n && len < sizeof(line) - 1; j++) {
			int w = snprintf(line + len, sizeof(line) - len, "%s%s", j ? " " : "",
			                 ACCEL_MODEL_PARAM(m, s->order[bk->first + j])->name);
			if (w < 0)
				break;
			len += (size_t)w;
		}
		if (len >= sizeof(line) - 1)
			strcpy(line + sizeof(line) - 5, "...");
		s->host->log(s->h, ACCEL_LOG_DEBUG, "bucket %u: %s, %llu elements, %llu bytes, "
		             "%u params: %s", b, dtype_name(bk->dtype),
		             (unsigned long long)bk->numel, (unsigned long long)bk->bytes, bk->n,
		             line);
	}
}

/* Every rank must have built the same plan, or bucket k of one rank would
 * be summed with something else on another. */
int ddp_plan_check_ranks(ddp_state *s)
{
	int32_t n = s->world.world_size;
	uint64_t *all;
	int r;
	if (n <= 1)
		return ACCEL_OK;
	all = calloc((size_t)n, sizeof(uint64_t));
	if (!all)
		return nomem(s);
	accel_view send = {sizeof(accel_view), ACCEL_DTYPE_U8, ACCEL_DEVICE_CPU, 0,
	                   &s->debug.plan_hash, 8};
	accel_view recv = {sizeof(accel_view), ACCEL_DTYPE_U8, ACCEL_DEVICE_CPU, 0, all,
	                   8 * (uint64_t)n};
	r = s->host->allgather(s->h, &send, &recv, NULL);
	for (int32_t i = 0; !r && i < n; i++)
		if (all[i] != all[0])
			r = s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "the gradient bucket plan of "
			                   "rank %d (hash %016llx) differs from rank 0's (%016llx): "
			                   "every rank must register the same parameters (names, "
			                   "shapes, dtypes, units, order) and use the same ddp config",
			                   i, (unsigned long long)all[i], (unsigned long long)all[0]);
	free(all);
	return r;
}

static accel_view bucket_view(const ddp_bucket *bk)
{
	return (accel_view){sizeof(accel_view), bk->dtype, bk->device, bk->device_index, bk->data,
	                    bk->numel};
}

/* A bucket reduced in another dtype than its gradients': the reduced
 * values go back into the gradient bucket when the reduction completes
 * (inside the wait() in ddp_reduce, or at once after a blocking one). */
static int cast_back(void *arg)
{
	ddp_bucket *bk = arg;
	accel_view v = bucket_view(bk), rv = v;
	rv.dtype = bk->reduce_dtype;
	rv.data = bk->comm;
	return bk->owner->host->op_copy(bk->owner->h, &v, &rv);
}

static int launch(ddp_state *s, uint32_t b, int64_t pos)
{
	ddp_bucket *bk = &s->buckets[b];
	accel_view v = bucket_view(bk);
	int r;
	/* The mean over ranks.  A host of ABI minor >= 1 takes the bucket as it
	 * is and the backend averages in its reduction loop (f16/bf16 sums are
	 * accumulated in f32 and divided before they are rounded, so they stay
	 * in range as PyTorch's pre-division keeps them); an older host wants
	 * the bucket pre-divided and sums it. */
	if (ACCEL_HOST_HAS(s->host, reduce_bucket_v2)) {
		/* The bucket with its description, so a reduce hook knows which
		 * gradients lie where; it stays in bk until the reduction is done.
		 * A bucket with its own reduce_dtype crosses ranks as a copy in
		 * that dtype, cast back when the reduction completes. */
		accel_view rv = v;
		if (bk->comm) {
			rv.dtype = bk->reduce_dtype;
			rv.data = bk->comm;
			if ((r = s->host->op_copy(s->h, &rv, &v)))
				return r;
		}
		bk->desc = (accel_bucket_v1){.struct_size = sizeof(accel_bucket_v1), .bucket_id = b,
		                             .view = rv, .n_entries = bk->n,
		                             .entries = s->entries + bk->first};
		if ((r = s->host->reduce_bucket_v2(s->h, &bk->desc, 0, &bk->req)))
			return r;
		if (bk->comm && !bk->req && (r = cast_back(bk)))
			return r;
		if (bk->comm && bk->req &&
		    (r = s->host->req_on_done(s->h, bk->req, cast_back, bk))) {
			s->host->wait(s->h, bk->req);
			bk->req = NULL;
			return r;
		}
	} else if (ACCEL_HOST_HAS(s->host, reduce_bucket_mean)) {
		if ((r = s->host->reduce_bucket_mean(s->h, &v, b, &bk->req)))
			return r;
	} else {
		if (s->world.world_size > 1 &&
		    (r = s->host->op_scale(s->h, &v, 1.0 / s->world.world_size)))
			return r;
		if ((r = s->host->reduce_bucket(s->h, &v, b, &bk->req)))
			return r;
	}
	bk->launched = 1;
	s->launch_pos[b] = pos;
	s->debug.reductions++;
	s->host->log(s->h, ACCEL_LOG_TRACE, "bucket %u reduction issued at post_backward %lld of %u",
	             b, (long long)pos, s->hook_units);
	return ACCEL_OK;
}

int ddp_post_backward(void *state, uint32_t unit)
{
	ddp_state *s = state;
	int r;
	if (!s->host->sync_step(s->h))
		return ACCEL_OK;   /* accumulating: no communication */
	if (!s->model || unit >= s->model->n_units)
		return s->host->error(s->h, ACCEL_ERR_STATE, "post_backward(%u) before wrap or out "
		                      "of range", unit);
	if (s->unit_first[unit] == s->unit_first[unit + 1])
		return ACCEL_OK;   /* no trainable parameters */
	if (s->unit_done[unit])
		return s->host->error(s->h, ACCEL_ERR_STATE, "accel_unit_post_backward called twice "
		                      "for unit '%s' in one step; its gradients were already being "
		                      "reduced", ACCEL_MODEL_UNIT(s->model, unit)->name);
	s->unit_done[unit] = 1;
	s->hook_calls++;
	for (uint32_t x = s->unit_first[unit]; x < s->unit_first[unit + 1]; x++)
		s->buckets[s->unit_buckets[x]].pending--;
	/* Issue in bucket order on every rank, so collectives match: a bucket
	 * that is ready early waits for its predecessors. */
	while (s->next_launch < s->n_buckets && !s->buckets[s->next_launch].pending) {
		if ((r = launch(s, s->next_launch, s->hook_calls)))
			return r;
		s->next_launch++;
	}
	return ACCEL_OK;
}

static void reset_step(ddp_state *s)
{
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		s->buckets[b].pending = s->buckets[b].n_units;
		s->buckets[b].launched = 0;
		s->buckets[b].req = NULL;
	}
	memset(s->unit_done, 0, s->model->n_units ? s->model->n_units : 1);
	s->hook_calls = 0;
	s->next_launch = 0;
}

/* Wait for everything issued, even after an error, so no request is left
 * behind; the first error is kept.  A bucket in device memory is waited
 * for by the context's compute stream, not the host (ABI minor 4): the
 * reductions ran on the backend's own stream, overlapping backward, and
 * the clipping and the optimizer step that follow are enqueued on the
 * compute stream after them, with no host round trip (docs/ddp.md). */
static int wait_all(ddp_state *s, int r)
{
	int on_stream = ACCEL_HOST_HAS(s->host, wait_stream);
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		ddp_bucket *bk = &s->buckets[b];
		if (bk->req) {
			int w = !r && on_stream && bk->device != ACCEL_DEVICE_CPU
			                ? s->host->wait_stream(s->h, bk->req)
			                : s->host->wait(s->h, bk->req);
			bk->req = NULL;
			if (!r)
				r = w;
		}
	}
	return r;
}

int ddp_reduce(void *state)
{
	ddp_state *s = state;
	int r = ACCEL_OK;
	if (s->hook_calls == 0) {
		/* No unit hooks in this step: DDP does not need them, they only
		 * give overlap.  Reduce everything now. */
		for (uint32_t b = 0; b < s->n_buckets && !r; b++)
			r = launch(s, b, -1);
	} else if (s->next_launch < s->n_buckets) {
		char names[768];
		size_t len = 0;
		uint32_t missing = 0;
		names[0] = '\0';
		for (uint32_t u = 0; u < s->model->n_units; u++) {
			if (s->unit_done[u] || s->unit_first[u] == s->unit_first[u + 1])
				continue;
			if (missing++ < 16 && len < sizeof(names) - 64) {
				int w = snprintf(names + len, sizeof(names) - len, "%s'%s'",
				                 len ? ", " : "", ACCEL_MODEL_UNIT(s->model, u)->name);
				if (w > 0)
					len += (size_t)w;
			}
		}
		r = s->host->error(s->h, ACCEL_ERR_STATE, "%u of %u units never called "
		                   "accel_unit_post_backward in this step while others did: %s%s; "
		                   "call it after the backward of every unit, or for none",
		                   missing, s->hook_units, names, missing > 16 ? ", ..." : "");
	} else {
		for (uint32_t b = 0; b < s->n_buckets; b++)
			if (s->launch_pos[b] >= 0 && (uint32_t)s->launch_pos[b] < s->hook_calls)
				s->debug.overlapped++;
	}
	r = wait_all(s, r);
	if (!r)
		s->debug.sync_steps++;
	reset_step(s);
	return r;
}

int ddp_zero_grads(ddp_state *s)
{
	int r;
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		accel_view v = bucket_view(&s->buckets[b]);
		if ((r = s->host->op_fill(s->h, &v, 0.0)))
			return r;
	}
	return ACCEL_OK;
}
