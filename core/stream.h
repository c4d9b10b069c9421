/* SPDX-License-Identifier: MIT */
/* core/stream.h: a context's compute stream (private side of
 * accel_set_stream; docs/streams.md).  The public calls are in accel.h; the
 * host-table members of ABI minor 4 (stream, wait_stream, op_copy_async)
 * are defined here and listed in core/host.c's table. */
#ifndef ACCEL_CORE_STREAM_H
#define ACCEL_CORE_STREAM_H

#include "ctx-impl.h"

/* Host table, ABI minor 4. */
void *accelp_host_stream(accel_host *h);
int accelp_host_wait_stream(accel_host *h, accel_req *req);
int accelp_host_op_copy_async(accel_host *h, const accel_view *dst, const accel_view *src);
/* ABI minor 6: host waits on stream work (device ABI 1.3 events) */
int accelp_host_stream_sync(accel_host *h);
int accelp_host_event_record(accel_host *h, void **ret_event);
int accelp_host_event_sync(accel_host *h, void *event);
int accelp_host_event_query(accel_host *h, void *event, int32_t *ret_done);
void accelp_host_event_free(accel_host *h, void *event);

/* accel_ctx_free: the calling thread stops using the context's stream as
 * its default (a stream the program destroys next must not stay in use). */
void accelp_stream_forget(accel_ctx *ctx);

#endif
