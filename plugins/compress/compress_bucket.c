/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress_bucket.c: per-bucket state (made the first
 * time a bucket_id comes, kept for the context), its buffers, the plain
 * reduction of warm-up steps, and the collectives on a bucket's group. */
#include <stdlib.h>
#include <string.h>

#include "compress.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * UINT64_C(0x100000001b3);
	return h;
}

static uint64_t layout_hash(const accel_bucket_v1 *b)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	h = fnv(h, &b->bucket_id, sizeof(b->bucket_id));
	h = fnv(h, &b->view.numel, sizeof(b->view.numel));
	for (uint32_t i = 0; i < b->n_entries; i++)
		h = fnv(h, &b->entries[i], sizeof(b->entries[i]));
	return h;
}

int cz_group(cz_state *s, accel_group *g, int32_t *ret_size)
{
	if (!g) {
		*ret_size = s->world.world_size;
		return ACCEL_OK;
	}
	return s->host->group_info(s->h, g, NULL, ret_size);
}

int cz_allreduce(cz_state *s, accel_group *g, const accel_view *v, uint32_t op, accel_req **ret)
{
	return g ? s->host->group_allreduce(s->h, g, v, v, op, ret)
	         : s->host->allreduce(s->h, v, v, op, ret);
}

int cz_allgather(cz_state *s, accel_group *g, const accel_view *send, const accel_view *recv,
                 accel_req **ret)
{
	return g ? s->host->group_allgather(s->h, g, send, recv, ret)
	         : s->host->allgather(s->h, send, recv, ret);
}

/* Host memory from the comm backend (collectives on it need no staging),
 * grown when a bucket needs more. */
int cz_buf(cz_state *s, void **p, uint64_t *have, uint64_t bytes)
{
	if (*p && *have >= bytes)
		return ACCEL_OK;
	s->host->mem_free(s->h, *p);
	*p = NULL;
	*have = 0;
	int r = s->host->mem_alloc(s->h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0,
	                           bytes ? bytes : 64, ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, p);
	if (r)
		return r;
	*have = bytes;
	return ACCEL_OK;
}

static int alloc_f32(cz_state *s, float **p, uint64_t n)
{
	uint64_t have = 0;
	void *q = NULL;
	int r = cz_buf(s, &q, &have, n * sizeof(float));
	*p = q;
	return r;
}

/* The bucket in f32 on the host: a device bucket is staged through a host
 * copy of its dtype on the context's stream. */
int cz_load(cz_bucket *cb, float *dst)
{
	cz_state *s = cb->s;
	const accel_view *v = &cb->b.view;
	accel_view d = {sizeof(d), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, dst, v->numel};
	if (v->device == ACCEL_DEVICE_CPU)
		return s->host->op_copy(s->h, &d, v);
	uint64_t have = 0;
	int r;
	if (!ACCEL_HOST_HAS(s->host, stream_sync))
		return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED, "bucket %u is in device "
		                      "memory and this host has no stream_sync (ABI 1.6)", cb->id);
	if (!cb->stage && (r = cz_buf(s, &cb->stage, &have,
	                              v->numel * accel_abi_dtype_size(v->dtype))))
		return r;
	accel_view st = {sizeof(st), v->dtype, ACCEL_DEVICE_CPU, 0, cb->stage, v->numel};
	if ((r = s->host->op_copy_async(s->h, &st, v)) || (r = s->host->stream_sync(s->h)))
		return r;
	return s->host->op_copy(s->h, &d, &st);
}

int cz_store(cz_bucket *cb, const float *src)
{
	cz_state *s = cb->s;
	const accel_view *v = &cb->b.view;
	accel_view d = {sizeof(d), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, (void *)src, v->numel};
	if (v->device == ACCEL_DEVICE_CPU)
		return s->host->op_copy(s->h, v, &d);
	accel_view st = {sizeof(st), v->dtype, ACCEL_DEVICE_CPU, 0, cb->stage, v->numel};
	int r;
	if ((r = s->host->op_copy(s->h, &st, &d)) || (r = s->host->op_copy_async(s->h, v, &st)))
		return r;
	return s->host->stream_sync(s->h);
}

/* The residual this reduction starts from, and the one it writes. */
float *cz_res_in(cz_bucket *cb)
{
	return cb->pending ? cb->res[!cb->cur] : cb->res[cb->cur];
}

float *cz_res_out(cz_bucket *cb)
{
	return cb->res[!cb->cur];
}

int cz_plain(cz_state *s, cz_bucket *cb, const accel_bucket_v1 *b, accel_req **ret_req)
{
	(void)cb;
	accel_view v = b->view;
	return cz_allreduce(s, b->group, &v,
	                    b->flags & ACCEL_REDUCE_PREDIVIDED ? ACCEL_RED_SUM : ACCEL_RED_AVG,
	                    ret_req);
}

static int make_segs(cz_state *s, cz_bucket *cb, const accel_bucket_v1 *b)
{
	uint32_t n = b->n_entries ? b->n_entries : 1;
	cb->segs = calloc(n, sizeof(*cb->segs));
	if (!cb->segs)
		return cz_error_nomem(s, "bucket runs");
	cb->n_segs = n;
	if (!b->n_entries) {
		cb->segs[0] = (cz_seg){.off = 0, .numel = b->view.numel, .param = UINT32_MAX};
		return ACCEL_OK;
	}
	for (uint32_t i = 0; i < n; i++)
		cb->segs[i] = (cz_seg){.off = b->entries[i].bucket_offset,
		                       .numel = b->entries[i].numel,
		                       .param = b->entries[i].param,
		                       .poff = b->entries[i].param_offset};
	return ACCEL_OK;
}

int cz_bucket_get(cz_state *s, const accel_bucket_v1 *b, uint32_t kind, cz_bucket **ret)
{
	uint64_t hash = layout_hash(b);
	int r;
	for (uint32_t i = 0; i < s->n_buckets; i++) {
		cz_bucket *cb = s->buckets[i];
		if (cb->id != b->bucket_id || cb->kind != kind)
			continue;
		if (cb->hash != hash || cb->dtype != b->view.dtype)
			return s->host->error(s->h, ACCEL_ERR_STATE, "bucket %u changed its "
			                      "layout (%llu elements of %s now) since its first reduction; "
			                      "bucket_id must name the same bucket every step",
			                      b->bucket_id, (unsigned long long)b->view.numel,
			                      accel_abi_dtype_name(b->view.dtype));
		*ret = cb;
		return ACCEL_OK;
	}
	if (s->n_buckets == s->cap_buckets) {
		uint32_t cap = s->cap_buckets ? 2 * s->cap_buckets : 8;
		cz_bucket **nb = realloc(s->buckets, cap * sizeof(*nb));
		if (!nb)
			return cz_error_nomem(s, "buckets");
		s->buckets = nb;
		s->cap_buckets = cap;
	}
	cz_bucket *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return cz_error_nomem(s, "a bucket");
	cb->s = s;
	cb->id = b->bucket_id;
	cb->kind = kind;
	cb->numel = b->view.numel;
	cb->dtype = b->view.dtype;
	cb->hash = hash;
	s->buckets[s->n_buckets++] = cb;
	if ((r = make_segs(s, cb, b)))
		return r;
	if (kind == CZ_KIND_ALLREDUCE && s->method == CZ_TOPK && (r = cz_topk_plan(s, cb)))
		return r;
	if (kind == CZ_KIND_ALLREDUCE && s->method == CZ_POWERSGD && (r = cz_psgd_plan(s, cb)))
		return r;
	if (kind == CZ_KIND_ALLREDUCE && (s->method == CZ_TOPK || s->method == CZ_POWERSGD)) {
		if ((r = alloc_f32(s, &cb->work, cb->numel)))
			return r;
		if (s->error_feedback && ((r = alloc_f32(s, &cb->res[0], cb->numel)) ||
		                          (r = alloc_f32(s, &cb->res[1], cb->numel))))
			return r;
		if (cb->n_dense && (r = alloc_f32(s, &cb->dense_buf, cb->n_dense)))
			return r;
		if (s->method == CZ_POWERSGD &&
		    ((r = alloc_f32(s, &cb->orig, cb->numel)) ||
		     (cb->q_numel && ((r = alloc_f32(s, &cb->q[0], cb->q_numel)) ||
		                      (r = alloc_f32(s, &cb->q[1], cb->q_numel))))))
			return r;
		if ((r = cz_adopt(s, cb)))
			return r;
	}
	*ret = cb;
	return ACCEL_OK;
}

void cz_bucket_free(cz_state *s, cz_bucket *cb)
{
	if (!cb)
		return;
	void *bufs[] = {cb->work, cb->orig, cb->stage, cb->dense_buf, cb->send, cb->recv,
	                cb->half, cb->half_shard, cb->res[0], cb->res[1], cb->q[0], cb->q[1]};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		s->host->mem_free(s->h, bufs[i]);
	free(cb->segs);
	free(cb);
}
