/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress_topk.c: top-k sparsification with error
 * feedback (Lin et al., Deep Gradient Compression; Horovod/DeepSpeed's
 * sparse all-gather).  Each rank sends the k largest |g + residual| of the
 * bucket (or of each parameter run) as (index, value) pairs; what it did
 * not send becomes its residual.  Ranks pick different indices, so the
 * pairs are all-gathered and scatter-added: an all-reduce of the values
 * would add unrelated elements.  Runs below min_numel go uncompressed,
 * packed into one all-reduce. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compress.h"

int cz_topk_plan(cz_state *s, cz_bucket *cb)
{
	uint64_t total = 0;
	if (cb->numel > INT32_MAX)
		return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED, "top-k bucket %u has "
		                      "%llu elements; indices are 32-bit (at most %d): use smaller "
		                      "buckets", cb->id, (unsigned long long)cb->numel, INT32_MAX);
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		cz_seg *g = &cb->segs[i];
		if (s->tensor_granularity) {
			g->dense = (int64_t)g->numel < s->min_numel || g->numel == 0;
			if (g->dense) {
				cb->n_dense += g->numel;
			} else {
				g->k = (uint64_t)floor((double)g->numel * s->ratio);
				g->k = g->k < 1 ? 1 : g->k;
				cb->k_total += g->k;
			}
		}
		total += g->numel;
	}
	if (!s->tensor_granularity) {
		if ((int64_t)total < s->min_numel || total == 0) {
			for (uint32_t i = 0; i < cb->n_segs; i++)
				cb->segs[i].dense = 1;
			cb->n_dense = total;
		} else {
			cb->k_total = (uint64_t)floor((double)total * s->ratio);
			cb->k_total = cb->k_total < 1 ? 1 : cb->k_total;
		}
	}
	return ACCEL_OK;
}

static float mag(const float *x, uint32_t p)
{
	return fabsf(x[p]);
}

static void swap32(uint32_t *a, uint32_t *b)
{
	uint32_t t = *a;
	*a = *b;
	*b = t;
}

/* Reorder pos[0, n) so that pos[0, k) hold k positions of the largest
 * |x| (ties at the boundary: any of them).  Three-way quickselect with a
 * median-of-three pivot: O(n) expected, no recursion. */
static void select_topk(const float *x, uint32_t *pos, uint64_t n, uint64_t k)
{
	uint64_t lo = 0, hi = n;
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		float a = mag(x, pos[lo]), b = mag(x, pos[mid]), c = mag(x, pos[hi - 1]);
		float pv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
		uint64_t lt = lo, i = lo, gt = hi;
		while (i < gt) {
			float v = mag(x, pos[i]);
			if (v > pv)
				swap32(&pos[lt++], &pos[i++]);
			else if (v < pv)
				swap32(&pos[i], &pos[--gt]);
			else
				i++;
		}
		if (k < lt)
			hi = lt;
		else if (k <= gt)
			return;
		else
			lo = gt;
	}
}

static int finish(void *arg)
{
	cz_bucket *cb = arg;
	cz_state *s = cb->s;
	int r = ACCEL_OK;
	if (cb->dense_req) {
		r = s->host->wait(s->h, cb->dense_req);
		cb->dense_req = NULL;
		if (r)
			return r;
	}
	float *out = cb->work;
	memset(out, 0, cb->numel * sizeof(float));
	const int32_t *all = cb->recv;
	uint64_t k = cb->k_total;
	for (int32_t q = 0; q < cb->group_size; q++) {
		const int32_t *idx = all + (uint64_t)q * 2 * k;
		const float *val = (const float *)(const void *)(idx + k);
		for (uint64_t j = 0; j < k; j++)
			out[idx[j]] += val[j];
	}
	float f = (float)cb->factor;
	if (cb->factor != 1.0)
		for (uint64_t i = 0; i < cb->numel; i++)
			out[i] *= f;
	uint64_t d = 0;
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		const cz_seg *g = &cb->segs[i];
		if (!g->dense)
			continue;
		for (uint64_t j = 0; j < g->numel; j++)
			out[g->off + j] = cb->dense_buf[d + j] * f;
		d += g->numel;
	}
	return cz_store(cb, out);
}

int cz_topk_reduce(cz_state *s, cz_bucket *cb, accel_req **ret_req)
{
	int r;
	uint64_t k = cb->k_total, n = cb->numel;
	int32_t N = cb->group_size;
	if (!cb->send || cb->send_bytes < 2 * k * 4) {
		if ((r = cz_buf(s, &cb->send, &cb->send_bytes, 2 * k * 4)))
			return r;
	}
	/* recv holds the gathered pairs; the candidates' positions share it
	 * (n u32) before the gather is issued */
	uint64_t need = (uint64_t)N * 2 * k * 4;
	if (n * 4 > need)
		need = n * 4;
	if (cb->recv_bytes < need && (r = cz_buf(s, &cb->recv, &cb->recv_bytes, need)))
		return r;
	float *x = cb->work;
	if ((r = cz_load(cb, x)))
		return r;
	if (s->error_feedback) {
		const float *e = cz_res_in(cb);
		for (uint64_t i = 0; i < n; i++)
			x[i] += e[i];
	}
	int32_t *idx = cb->send;
	float *val = (float *)(void *)(idx + k);
	uint32_t *pos = cb->recv;
	uint64_t got = 0;
	if (!s->tensor_granularity) {
		uint64_t m = 0;
		for (uint32_t i = 0; i < cb->n_segs; i++)
			for (uint64_t j = 0; !cb->segs[i].dense && j < cb->segs[i].numel; j++)
				pos[m++] = (uint32_t)(cb->segs[i].off + j);
		select_topk(x, pos, m, k);
		for (uint64_t j = 0; j < k; j++)
			idx[got++] = (int32_t)pos[j];
	} else {
		for (uint32_t i = 0; i < cb->n_segs; i++) {
			const cz_seg *g = &cb->segs[i];
			if (g->dense)
				continue;
			for (uint64_t j = 0; j < g->numel; j++)
				pos[j] = (uint32_t)(g->off + j);
			select_topk(x, pos, g->numel, g->k);
			for (uint64_t j = 0; j < g->k; j++)
				idx[got++] = (int32_t)pos[j];
		}
	}
	for (uint64_t j = 0; j < k; j++)
		val[j] = x[idx[j]];
	/* the residual: everything not sent (uncompressed runs are sent whole) */
	if (s->error_feedback) {
		float *e = cz_res_out(cb);
		memcpy(e, x, n * sizeof(float));
		for (uint64_t j = 0; j < k; j++)
			e[idx[j]] = 0;
		for (uint32_t i = 0; i < cb->n_segs; i++)
			if (cb->segs[i].dense)
				memset(e + cb->segs[i].off, 0, cb->segs[i].numel * sizeof(float));
		cb->pending = 1;
	}
	uint64_t d = 0;
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		const cz_seg *g = &cb->segs[i];
		if (!g->dense)
			continue;
		memcpy(cb->dense_buf + d, x + g->off, g->numel * sizeof(float));
		d += g->numel;
	}
	accel_req *req = NULL;
	if (cb->n_dense) {
		accel_view dv = {sizeof(dv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, cb->dense_buf,
		                 cb->n_dense};
		if ((r = cz_allreduce(s, cb->b.group, &dv, ACCEL_RED_SUM, &cb->dense_req)))
			return r;
		s->cur_sent += cb->n_dense * 4;
	}
	accel_view sv = {sizeof(sv), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, cb->send, 2 * k};
	accel_view rv = {sizeof(rv), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, cb->recv,
	                 (uint64_t)N * 2 * k};
	if ((r = cz_allgather(s, cb->b.group, &sv, &rv, &req))) {
		if (cb->dense_req)
			s->host->wait(s->h, cb->dense_req);
		cb->dense_req = NULL;
		return r;
	}
	s->cur_sent += 2 * k * 4;
	if (!ret_req) {
		if ((r = s->host->wait(s->h, req)))
			return r;
		return finish(cb);
	}
	if ((r = s->host->req_on_done(s->h, req, finish, cb))) {
		s->host->wait(s->h, req);
		return r;
	}
	*ret_req = req;
	return ACCEL_OK;
}
