/* SPDX-License-Identifier: MIT */
/* core/stream.c: a context's compute stream and what hangs on it:
 * accel_set_stream / accel_get_stream, asynchronous copies, waiting for the
 * stream, pinned host memory, and the host-table members of ABI minor 4
 * (stream, wait_stream, op_copy_async).  The model and why it is this one:
 * docs/streams.md.
 *
 * The stream is a cudaStream_t passed as void * (no CUDA type crosses the
 * public header); NULL is the legacy default stream and the default, so a
 * program that never sets one behaves as before.  Setting one needs the
 * cuda device module (it checks the handle and finds its device); on a
 * context without a device the only stream is NULL. */
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "comm.h"
#include "ctx-impl.h"
#include "device.h"
#include "mem.h"
#include "stream.h"
#include "train.h"

#define MSG_INIT(buf) {sizeof(accel_device_err_v1), sizeof(buf), buf}

/* The module, with the minor-1 members this file needs. */
static int stream_module(accel_ctx *ctx, const char *what, const accel_device_v1 **ret_dev)
{
	const accel_device_v1 *d;
	accel_err e = {0};
	int r = accelp_device_get(ACCEL_DEVICE_CUDA, &d, &e);
	if (r)
		return accelp_err_set(&ctx->err, r, "%s: there is no CUDA device to run it (%s)", what,
		                     e.msg);
	if (!d->stream_device || !d->set_stream || !d->memcpy_async || !d->stream_sync) {
		uint32_t n;
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED, "%s: the %s device module (%s) "
		                     "is of device ABI 1.%u, which has no streams; install the module "
		                     "of this accel (device ABI 1.%u)", what, d->desc->name,
		                     accelp_device_module_path(ACCEL_DEVICE_CUDA, &n),
		                     d->desc->abi_minor, ACCEL_DEVICE_ABI_MINOR);
	}
	*ret_dev = d;
	return ACCEL_OK;
}

int accel_set_stream(accel_ctx *ctx, void *stream)
{
	const accel_device_v1 *d;
	char buf[512] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int32_t dev = -1;
	int r;
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!stream) {
		if (ctx->stream && accelp_device_stream() == ctx->stream)
			accelp_device_stream_swap(NULL);
		ctx->stream = NULL;
		ctx->stream_device = -1;
		return ACCEL_OK;
	}
	if ((r = stream_module(ctx, "accel_set_stream", &d)))
		return r;
	if ((r = d->stream_device(stream, &dev, &de)))
		return accelp_device_fail(&ctx->err, r, "accel_set_stream", buf);
	ctx->stream = stream;
	ctx->stream_device = dev;
	/* the thread's default too: work accel does for this context outside
	 * its host-table calls (checkpoint and initial-value copies) */
	accelp_device_stream_swap(stream);
	return ACCEL_OK;
}

void *accel_get_stream(const accel_ctx *ctx)
{
	return ctx ? ctx->stream : NULL;
}

void accelp_stream_forget(accel_ctx *ctx)
{
	if (ctx && ctx->stream && accelp_device_stream() == ctx->stream)
		accelp_device_stream_swap(NULL);
}

static int check_view(accel_ctx *ctx, const accel_view *v, const char *what, const char *which)
{
	if (!v)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s is NULL", what, which);
	if (v->struct_size < sizeof(accel_view))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s.struct_size is %u, "
		                     "expected at least %zu (set it to sizeof(accel_view))", what, which,
		                     v->struct_size, sizeof(accel_view));
	if (!accel_dtype_size(v->dtype))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has invalid dtype %u",
		                     what, which, v->dtype);
	if (v->device != ACCEL_DEVICE_CPU && v->device != ACCEL_DEVICE_CUDA)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has unknown device "
		                     "kind %d", what, which, v->device);
	if (v->numel && !v->data)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has %llu elements but "
		                     "a NULL data pointer", what, which, (unsigned long long)v->numel);
	return ACCEL_OK;
}

static int copy_async(accel_ctx *ctx, const accel_view *dst, const accel_view *src,
                      const char *what)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check_view(ctx, dst, what, "dst")) || (r = check_view(ctx, src, what, "src")))
		return r;
	if (dst->dtype != src->dtype || dst->numel != src->numel)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: dst is %llu x %s but src "
		                     "%llu x %s; an asynchronous copy moves bytes (same dtype and "
		                     "count: convert with the ops first)", what,
		                     (unsigned long long)dst->numel, accel_dtype_name(dst->dtype),
		                     (unsigned long long)src->numel, accel_dtype_name(src->dtype));
	uint64_t bytes = dst->numel * accel_dtype_size(dst->dtype);
	if (dst->device == ACCEL_DEVICE_CPU && src->device == ACCEL_DEVICE_CPU) {
		/* defined on every machine: host memory needs no stream */
		if (bytes && dst->data != src->data)
			memmove(dst->data, src->data, bytes);
		return ACCEL_OK;
	}
	const accel_view *dv = dst->device != ACCEL_DEVICE_CPU ? dst : src;
	if ((r = accelp_device_for(what, dv->device, dv->device_index, &d, &ctx->err)) ||
	    (src->device != ACCEL_DEVICE_CPU && src != dv &&
	     (r = accelp_device_for(what, src->device, src->device_index, &d, &ctx->err))) ||
	    (r = stream_module(ctx, what, &d)))
		return r;
	uint32_t dir = dst->device == ACCEL_DEVICE_CPU   ? ACCEL_DEVICE_D2H
	             : src->device == ACCEL_DEVICE_CPU ? ACCEL_DEVICE_H2D
	                                               : ACCEL_DEVICE_D2D;
	r = d->memcpy_async(dst->data, dst->device_index, src->data, src->device_index, bytes, dir,
	                    ctx->stream, &de);
	return r ? accelp_device_fail(&ctx->err, r, what, buf) : ACCEL_OK;
}

int accel_copy_async(accel_ctx *ctx, const accel_view *dst, const accel_view *src)
{
	return ctx ? copy_async(ctx, dst, src, "accel_copy_async") : ACCEL_ERR_INVALID_ARG;
}

static int stream_sync(accel_ctx *ctx, const char *what)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	uint32_t count = 0;
	int r;
	/* nothing can be queued for a context before the module is loaded */
	if (!ctx->stream && !accelp_device_module_path(ACCEL_DEVICE_CUDA, &count))
		return ACCEL_OK;
	if ((r = stream_module(ctx, what, &d)))
		return r;
	if (ctx->stream)
		r = d->stream_sync(ctx->stream_device, ctx->stream, &de);
	else   /* the legacy default stream of every device */
		for (uint32_t i = 0; i < count && !r; i++)
			r = d->stream_sync((int32_t)i, NULL, &de);
	return r ? accelp_device_fail(&ctx->err, r, what, buf) : ACCEL_OK;
}

int accel_stream_synchronize(accel_ctx *ctx)
{
	return ctx ? stream_sync(ctx, "accel_stream_synchronize") : ACCEL_ERR_INVALID_ARG;
}

int accel_pinned_alloc(accel_ctx *ctx, uint64_t bytes, void **ret_ptr)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!ret_ptr)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_pinned_alloc: ret_ptr "
		                     "is NULL");
	return accelp_mem_alloc(ctx, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, bytes,
	                        ACCEL_MEMF_PINNED, ret_ptr);
}

void accel_pinned_free(accel_ctx *ctx, void *ptr)
{
	if (ctx)
		accelp_mem_release(ctx, ptr);
}

/* ---- host table, ABI minor 4 ------------------------------------------------------- */

void *accelp_host_stream(accel_host *h)
{
	return h && h->ctx ? h->ctx->stream : NULL;
}

int accelp_host_wait_stream(accel_host *h, accel_req *req)
{
	accel_ctx *ctx = h->ctx;
	if (!ctx->comm)
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE, "%s%swait_stream: no comm backend is "
		                     "up", h->name ? h->name : "", h->name ? ": " : "");
	/* callbacks enqueue their device work after the wait, on the stream */
	void *prev = accelp_device_stream_swap(ctx->stream);
	int r = accelp_comm_wait_stream(ctx->comm, req, ctx->stream);
	int c = accelp_train_req_done(ctx->train, req);
	accelp_device_stream_swap(prev);
	return r ? r : c;
}

int accelp_host_op_copy_async(accel_host *h, const accel_view *dst, const accel_view *src)
{
	return copy_async(h->ctx, dst, src, "op_copy_async");
}

/* ---- host table, ABI minor 6: host waits on stream work ------------------------------ */

/* What event_record hands out: the device events of the context's stream
 * (one; or, for the legacy default stream, one per device, as
 * accel_stream_synchronize waits for all of them), none when nothing can
 * be queued (no device module loaded): a token that is already complete. */
typedef struct host_event {
	uint32_t n;
	void *ev[];
} host_event;

int accelp_host_stream_sync(accel_host *h)
{
	return stream_sync(h->ctx, "stream_sync");
}

/* The module for the event members: minor 1 (streams) and minor 3. */
static int event_module(accel_ctx *ctx, const char *what, const accel_device_v1 **ret_dev)
{
	int r = stream_module(ctx, what, ret_dev);
	if (r)
		return r;
	const accel_device_v1 *d = *ret_dev;
	if (!d->event_record || !d->event_sync || !d->event_query || !d->event_free) {
		uint32_t n;
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED, "%s: the %s device module (%s) "
		                     "is of device ABI 1.%u, which has no events; install the module "
		                     "of this accel (device ABI 1.%u), or wait with stream_sync",
		                     what, d->desc->name,
		                     accelp_device_module_path(ACCEL_DEVICE_CUDA, &n),
		                     d->desc->abi_minor, ACCEL_DEVICE_ABI_MINOR);
	}
	return ACCEL_OK;
}

static void free_events(const accel_device_v1 *d, host_event *e)
{
	for (uint32_t i = 0; d && i < e->n; i++)
		d->event_free(e->ev[i]);
	free(e);
}

int accelp_host_event_record(accel_host *h, void **ret_event)
{
	accel_ctx *ctx = h->ctx;
	const accel_device_v1 *d = NULL;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	uint32_t count = 0;
	int r;
	if (!ret_event)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s%sevent_record: ret_event "
		                     "is NULL", h->name ? h->name : "", h->name ? ": " : "");
	int none = !ctx->stream && !accelp_device_module_path(ACCEL_DEVICE_CUDA, &count);
	if (!none && (r = event_module(ctx, "event_record", &d)))
		return r;
	uint32_t n = none ? 0 : ctx->stream ? 1 : count;
	host_event *e = calloc(1, sizeof(*e) + n * sizeof(void *));
	if (!e)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "event_record: out of memory");
	for (; e->n < n; e->n++) {
		int32_t dev = ctx->stream ? ctx->stream_device : (int32_t)e->n;
		if ((r = d->event_record(dev, ctx->stream, &e->ev[e->n], &de))) {
			free_events(d, e);
			return accelp_device_fail(&ctx->err, r, "event_record", buf);
		}
	}
	*ret_event = e;
	return ACCEL_OK;
}

/* The module of an event's device events (loaded, since it made them). */
static const accel_device_v1 *events_module(const host_event *e)
{
	const accel_device_v1 *d = NULL;
	if (e->n && accelp_device_get(ACCEL_DEVICE_CUDA, &d, NULL))
		d = NULL;
	return d;
}

int accelp_host_event_sync(accel_host *h, void *event)
{
	accel_ctx *ctx = h->ctx;
	host_event *e = event;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	if (!e)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s%sevent_sync: event is "
		                     "NULL", h->name ? h->name : "", h->name ? ": " : "");
	const accel_device_v1 *d = events_module(e);
	for (uint32_t i = 0; d && i < e->n; i++) {
		int r = d->event_sync(e->ev[i], &de);
		if (r)
			return accelp_device_fail(&ctx->err, r, "event_sync", buf);
	}
	return ACCEL_OK;
}

int accelp_host_event_query(accel_host *h, void *event, int32_t *ret_done)
{
	accel_ctx *ctx = h->ctx;
	host_event *e = event;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int32_t all = 1;
	if (!e || !ret_done)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s%sevent_query: %s is NULL",
		                     h->name ? h->name : "", h->name ? ": " : "",
		                     e ? "ret_done" : "event");
	const accel_device_v1 *d = events_module(e);
	for (uint32_t i = 0; d && i < e->n && all; i++) {
		int32_t done = 0;
		int r = d->event_query(e->ev[i], &done, &de);
		if (r)
			return accelp_device_fail(&ctx->err, r, "event_query", buf);
		all = done;
	}
	*ret_done = all;
	return ACCEL_OK;
}

void accelp_host_event_free(accel_host *h, void *event)
{
	(void)h;
	if (event)
		free_events(events_module(event), event);
}
