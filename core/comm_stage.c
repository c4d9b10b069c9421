/* SPDX-License-Identifier: MIT */
/* core/comm_stage.c: device buffers through a host backend (comm_stage.h).
 *
 * The copies are enqueued on the context's stream and waited for there
 * (docs/streams.md): the copy out runs after the work the program queued
 * on that stream before the collective (its gradients are complete when
 * they are copied), and the copy back has finished before wait() returns,
 * so anything queued later, on any stream, sees the reduced values.  The
 * host backend never runs before the copy out is done.  The pool keeps every pinned buffer it
 * made (page-locking costs milliseconds; a step asks for the same sizes
 * again) and hands out the smallest free one that fits. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_stage.h"
#include "device.h"
#include "log.h"

typedef struct stage_buf {
	void *p;
	uint64_t bytes;
	int busy;
} stage_buf;

struct comm_stage_pool {
	pthread_mutex_t mu;
	stage_buf *b;
	size_t n, cap;
};

int comm_stage_pool_new(comm_stage_pool **ret_pool, accel_err *err)
{
	comm_stage_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	pthread_mutex_init(&p->mu, NULL);
	*ret_pool = p;
	return ACCEL_OK;
}

comm_stage_pool *comm_stage_pool_free(comm_stage_pool *pool)
{
	if (!pool)
		return NULL;
	const accel_device_v1 *dev = NULL;
	char buf[256];
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	if (pool->n && accelp_device_get(ACCEL_DEVICE_CUDA, &dev, NULL) == ACCEL_OK)
		for (size_t i = 0; i < pool->n; i++)
			dev->mem_free(ACCEL_DEVICE_MEM_PINNED, pool->b[i].p, &de);
	free(pool->b);
	pthread_mutex_destroy(&pool->mu);
	free(pool);
	return NULL;
}

/* A free buffer of at least `bytes`, marked busy. */
static int take(comm_stage_pool *pool, const accel_device_v1 *dev, uint64_t bytes,
                stage_buf *ret, accel_err *err)
{
	pthread_mutex_lock(&pool->mu);
	size_t best = pool->n;
	for (size_t i = 0; i < pool->n; i++)
		if (!pool->b[i].busy && pool->b[i].bytes >= bytes &&
		    (best == pool->n || pool->b[i].bytes < pool->b[best].bytes))
			best = i;
	if (best < pool->n) {
		pool->b[best].busy = 1;
		*ret = pool->b[best];
		pthread_mutex_unlock(&pool->mu);
		return ACCEL_OK;
	}
	pthread_mutex_unlock(&pool->mu);

	char buf[1024] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	void *p = NULL;
	int r = dev->mem_alloc(ACCEL_DEVICE_MEM_PINNED, 0, bytes, 0, &p, &de);
	if (r)
		return accelp_device_fail(err, r, "staging a device collective through pinned host "
		                         "memory", buf);
	pthread_mutex_lock(&pool->mu);
	if (pool->n == pool->cap) {
		size_t cap = pool->cap ? 2 * pool->cap : 8;
		stage_buf *nb = realloc(pool->b, cap * sizeof(*nb));
		if (!nb) {
			pthread_mutex_unlock(&pool->mu);
			dev->mem_free(ACCEL_DEVICE_MEM_PINNED, p, &de);
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		}
		pool->b = nb;
		pool->cap = cap;
	}
	pool->b[pool->n++] = (stage_buf){p, bytes, 1};
	pthread_mutex_unlock(&pool->mu);
	accelp_log(ACCEL_LOG_DEBUG, "comm: %llu bytes of pinned host memory for staging device "
	          "collectives", (unsigned long long)bytes);
	*ret = (stage_buf){p, bytes, 1};
	return ACCEL_OK;
}

/* bytes from src to dst (one side the device `index`) on `stream`, waited
 * for.  A module without streams (device ABI 1.0) copies on the legacy
 * default stream, which the core only uses then with stream NULL. */
static int copy_waited(const accel_device_v1 *dev, void *dst, const void *src, uint64_t bytes,
                       uint32_t dir, int32_t index, void *stream, accel_device_err_v1 *de)
{
	if (!dev->memcpy_async || !dev->stream_sync)
		return dev->memcpy(dst, src, bytes, dir, index, de);
	int r = dev->memcpy_async(dst, index, src, index, bytes, dir, stream, de);
	return r ? r : dev->stream_sync(index, stream, de);
}

static void give_back(comm_stage_pool *pool, void *p)
{
	pthread_mutex_lock(&pool->mu);
	for (size_t i = 0; i < pool->n; i++)
		if (pool->b[i].p == p)
			pool->b[i].busy = 0;
	pthread_mutex_unlock(&pool->mu);
}

int comm_stage_in(comm_stage_pool *pool, void *stream, const accel_view *send,
                  const accel_view *recv, uint64_t total, uint64_t send_at, uint64_t recv_at,
                  accel_view *ret_send, accel_view *ret_recv, comm_staged *ret_st,
                  accel_err *err)
{
	const accel_device_v1 *dev;
	size_t es = accel_abi_dtype_size(send->dtype);
	stage_buf b = {0};
	uint64_t bytes = total * es;
	int r;
	if ((r = accelp_device_for("a collective on device buffers", send->device,
	                          send->device_index, &dev, err)))
		return r;
	if (stream && (!dev->memcpy_async || !dev->stream_sync))
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "a collective on device buffers: the "
		                     "%s device module is of device ABI 1.%u and cannot copy on the "
		                     "context's stream (%p); install the module of this accel, or use "
		                     "the default stream", dev->desc->name, dev->desc->abi_minor, stream);
	if ((r = take(pool, dev, bytes ? bytes : 1, &b, err)))
		return r;
	char buf[1024] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	if (send->numel && (r = copy_waited(dev, (char *)b.p + send_at * es, send->data,
	                                    send->numel * es, ACCEL_DEVICE_D2H, send->device_index,
	                                    stream, &de))) {
		give_back(pool, b.p);
		return accelp_device_fail(err, r, "staging a device collective (device to host)", buf);
	}
	*ret_send = *send;
	ret_send->device = ACCEL_DEVICE_CPU;
	ret_send->device_index = 0;
	ret_send->data = (char *)b.p + send_at * es;
	*ret_recv = *recv;
	ret_recv->device = ACCEL_DEVICE_CPU;
	ret_recv->device_index = 0;
	ret_recv->data = (char *)b.p + recv_at * es;
	*ret_st = (comm_staged){pool, b.p, b.bytes, *recv, recv_at * es, stream};
	return ACCEL_OK;
}

int comm_stage_out(comm_staged *st, int ok, accel_err *err)
{
	int r = ACCEL_OK;
	if (!st->pool)
		return ACCEL_OK;
	size_t bytes = st->dst.numel * accel_abi_dtype_size(st->dst.dtype);
	if (ok && bytes) {
		const accel_device_v1 *dev;
		char buf[1024] = "";
		accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
		r = accelp_device_for("a collective on device buffers", st->dst.device,
		                     st->dst.device_index, &dev, err);
		if (!r && (r = copy_waited(dev, st->dst.data, (char *)st->host + st->dst_at, bytes,
		                           ACCEL_DEVICE_H2D, st->dst.device_index, st->stream, &de)))
			accelp_device_fail(err, r, "staging a device collective (host to device)", buf);
	}
	give_back(st->pool, st->host);
	memset(st, 0, sizeof(*st));
	return r;
}
