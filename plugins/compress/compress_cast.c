/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress_cast.c: fp16/bf16: the bucket crosses ranks as
 * a half-precision copy (half the bytes), summed, and is cast back in a
 * req_on_done callback, so the strategy's pipeline of buckets is not
 * blocked.  The bucket is divided by the group size first (unless the
 * strategy pre-divided it), as PyTorch's fp16_compress_hook does, so the
 * sum stays in the half type's range. */
#include "compress.h"

static uint32_t half_dtype(const cz_state *s)
{
	return s->method == CZ_FP16 ? ACCEL_DTYPE_F16 : ACCEL_DTYPE_BF16;
}

/* A buffer on the bucket's device (collectives on it need no staging). */
static int dev_buf(cz_state *s, const accel_view *like, void **p, uint64_t *have, uint64_t numel)
{
	if (*p && *have >= numel)
		return ACCEL_OK;
	s->host->mem_free(s->h, *p);
	*p = NULL;
	*have = 0;
	int r = s->host->mem_alloc(s->h, ACCEL_MEM_BUFFERS, like->device, like->device_index,
	                           (numel ? numel : 1) * 2, ACCEL_MEMF_COMM, p);
	if (!r)
		*have = numel;
	return r;
}

static int cast_back(void *arg)
{
	cz_bucket *cb = arg;
	cz_state *s = cb->s;
	accel_view hv = {sizeof(hv), half_dtype(s), cb->b.view.device, cb->b.view.device_index,
	                 cb->half, cb->b.view.numel};
	return s->host->op_copy(s->h, &cb->b.view, &hv);
}

static int cast_back_shard(void *arg)
{
	cz_bucket *cb = arg;
	cz_state *s = cb->s;
	accel_view hv = {sizeof(hv), half_dtype(s), cb->shard.device, cb->shard.device_index,
	                 cb->half_shard, cb->shard.numel};
	return s->host->op_copy(s->h, &cb->shard, &hv);
}

/* Run `fn` when the request completes, or now when the call was blocking. */
static int then(cz_state *s, accel_req **ret_req, accel_req *req, int (*fn)(void *), void *arg)
{
	if (!ret_req)
		return fn(arg);
	int r = s->host->req_on_done(s->h, req, fn, arg);
	if (r) {
		s->host->wait(s->h, req);
		return r;
	}
	*ret_req = req;
	return ACCEL_OK;
}

int cz_cast_allreduce(cz_state *s, cz_bucket *cb, accel_req **ret_req)
{
	const accel_view *v = &cb->b.view;
	int r;
	if ((r = dev_buf(s, v, &cb->half, &cb->half_numel, v->numel)))
		return r;
	accel_view hv = {sizeof(hv), half_dtype(s), v->device, v->device_index, cb->half,
	                 v->numel};
	if (cb->factor != 1.0 && (r = s->host->op_scale(s->h, v, cb->factor)))
		return r;
	if ((r = s->host->op_copy(s->h, &hv, v)))
		return r;
	accel_req *req = NULL;
	if ((r = cz_allreduce(s, cb->b.group, &hv, ACCEL_RED_SUM, ret_req ? &req : NULL)))
		return r;
	s->cur_sent += v->numel * 2;
	return then(s, ret_req, req, cast_back, cb);
}

int cz_cast_scatter(cz_state *s, cz_bucket *cb, accel_req **ret_req)
{
	const accel_view *v = &cb->b.view;
	int r;
	if ((r = dev_buf(s, v, &cb->half, &cb->half_numel, v->numel)) ||
	    (r = dev_buf(s, &cb->shard, &cb->half_shard, &cb->half_shard_numel, cb->shard.numel)))
		return r;
	accel_view hv = {sizeof(hv), half_dtype(s), v->device, v->device_index, cb->half,
	                 v->numel};
	accel_view hs = {sizeof(hs), half_dtype(s), cb->shard.device, cb->shard.device_index,
	                 cb->half_shard, cb->shard.numel};
	/* The strategy's bucket is its input only here: it is not scaled in
	 * place; the half copy is. */
	if ((r = s->host->op_copy(s->h, &hv, v)))
		return r;
	if (cb->factor != 1.0 && (r = s->host->op_scale(s->h, &hv, cb->factor)))
		return r;
	accel_req *req = NULL;
	r = cb->b.group ? s->host->group_reduce_scatter(s->h, cb->b.group, &hv, &hs, ACCEL_RED_SUM,
	                                                ret_req ? &req : NULL)
	                : s->host->reduce_scatter(s->h, &hv, &hs, ACCEL_RED_SUM,
	                                          ret_req ? &req : NULL);
	if (r)
		return r;
	s->cur_sent += v->numel * 2;
	return then(s, ret_req, req, cast_back_shard, cb);
}
