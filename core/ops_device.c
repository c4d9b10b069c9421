/* SPDX-License-Identifier: MIT */
/* core/ops_device.c: the device ops for views on an accelerator, routed to
 * its device module (core/device.c) after the checks the CPU ops make, so
 * both give the same messages for the same mistakes.  Every op runs on the
 * thread's stream (accelp_device_stream, docs/streams.md). */
#include <string.h>

#include "accel/accel.h"
#include "device.h"
#include "ops.h"

static int is_float(uint32_t dt)
{
	return dt == ACCEL_DTYPE_F32 || dt == ACCEL_DTYPE_F64 || dt == ACCEL_DTYPE_F16 ||
	       dt == ACCEL_DTYPE_BF16;
}

static int check(const accel_view *v, const char *what, int float_only, accel_err *err)
{
	if (!v)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: view is NULL", what);
	if (v->device != ACCEL_DEVICE_CPU && v->device != ACCEL_DEVICE_CUDA)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: unknown device kind %d", what,
		                     v->device);
	if (accel_dtype_size(v->dtype) == 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: invalid dtype %u", what,
		                     v->dtype);
	if (float_only && !is_float(v->dtype))
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED,
		                     "%s: dtype %s is not supported (f32, f64, f16, bf16 are)", what,
		                     accel_dtype_name(v->dtype));
	if (v->numel && !v->data)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: NULL data with %llu elements",
		                     what, (unsigned long long)v->numel);
	return ACCEL_OK;
}

/* Both views on the same device (kind and index). */
static int same_device(const accel_view *a, const accel_view *b, const char *what,
                       accel_err *err)
{
	if (a->device == b->device && a->device_index == b->device_index)
		return ACCEL_OK;
	return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "%s: views on devices %d:%d and %d:%d; "
	                     "both must be on one device", what, a->device, a->device_index,
	                     b->device, b->device_index);
}

#define MSG_INIT(buf) {sizeof(accel_device_err_v1), sizeof(buf), buf}

int accelp_ops_device_copy(const accel_view *dst, const accel_view *src, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(dst, "copy dst", 0, err)) || (r = check(src, "copy src", 0, err)))
		return r;
	if (dst->numel != src->numel)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "copy: %llu destination elements but %llu source elements",
		                     (unsigned long long)dst->numel, (unsigned long long)src->numel);
	if (dst->dtype != src->dtype &&
	    ((r = check(dst, "copy dst", 1, err)) || (r = check(src, "copy src", 1, err))))
		return r;
	const accel_view *dv = dst->device != ACCEL_DEVICE_CPU ? dst : src;
	if ((r = accelp_device_for("copy", dv->device, dv->device_index, &d, err)) ||
	    (r = accelp_device_use_stream(d, "copy", err)))
		return r;
	if (dst->device == src->device && dst->device_index != src->device_index) {
		/* device to device across devices: a peer copy, dtype kept */
		if (dst->dtype != src->dtype)
			return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "copy: %s to %s from device "
			                     "%d:%d to %d:%d; a copy across devices keeps the dtype "
			                     "(convert on either side first)",
			                     accel_dtype_name(src->dtype), accel_dtype_name(dst->dtype),
			                     src->device, src->device_index, dst->device,
			                     dst->device_index);
		if (!d->memcpy_async)
			return same_device(dst, src, "copy (a device module of device ABI 1.0 has no "
			                   "peer copies)", err);
		if ((r = accelp_device_for("copy", src->device, src->device_index, &d, err)))
			return r;
		r = d->memcpy_async(dst->data, dst->device_index, src->data, src->device_index,
		                    dst->numel * accel_dtype_size(dst->dtype), ACCEL_DEVICE_D2D,
		                    accelp_device_stream(), &de);
	} else if (dst->device != src->device) {
		/* host <-> device, dtype kept (conversions run on one side) */
		if (dst->dtype != src->dtype)
			return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "copy: %s to %s between the host "
			                     "and device %d:%d; a copy across devices keeps the dtype "
			                     "(convert on either side first)",
			                     accel_dtype_name(src->dtype), accel_dtype_name(dst->dtype),
			                     dv->device, dv->device_index);
		uint64_t bytes = dst->numel * accel_dtype_size(dst->dtype);
		uint32_t dir = dst->device == ACCEL_DEVICE_CPU ? ACCEL_DEVICE_D2H : ACCEL_DEVICE_H2D;
		if (d->memcpy_async) {
			/* on the thread's stream, waited for: the host side may be
			 * pageable memory the caller reuses at once */
			void *s = accelp_device_stream();
			r = d->memcpy_async(dst->data, dst->device_index, src->data, src->device_index,
			                    bytes, dir, s, &de);
			if (!r)
				r = d->stream_sync(dv->device_index, s, &de);
		} else {
			r = d->memcpy(dst->data, src->data, bytes, dir, dv->device_index, &de);
		}
	} else {
		if ((r = same_device(dst, src, "copy", err)))
			return r;
		r = d->copy(dst, src, &de);
	}
	return r ? accelp_device_fail(err, r, "copy", buf) : ACCEL_OK;
}

int accelp_ops_device_fill(const accel_view *dst, double value, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(dst, "fill", 1, err)) ||
	    (r = accelp_device_for("fill", dst->device, dst->device_index, &d, err)) ||
	    (r = accelp_device_use_stream(d, "fill", err)))
		return r;
	r = d->fill(dst, value, &de);
	return r ? accelp_device_fail(err, r, "fill", buf) : ACCEL_OK;
}

int accelp_ops_device_scale(const accel_view *x, double alpha, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(x, "scale", 1, err)) ||
	    (r = accelp_device_for("scale", x->device, x->device_index, &d, err)) ||
	    (r = accelp_device_use_stream(d, "scale", err)))
		return r;
	r = d->scale(x, alpha, &de);
	return r ? accelp_device_fail(err, r, "scale", buf) : ACCEL_OK;
}

int accelp_ops_device_axpy(const accel_view *y, double alpha, const accel_view *x,
                          accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(y, "axpy y", 1, err)) || (r = check(x, "axpy x", 1, err)))
		return r;
	if (y->numel != x->numel)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "axpy: y has %llu elements, x %llu",
		                     (unsigned long long)y->numel, (unsigned long long)x->numel);
	if ((r = same_device(y, x, "axpy", err)) ||
	    (r = accelp_device_for("axpy", y->device, y->device_index, &d, err)) ||
	    (r = accelp_device_use_stream(d, "axpy", err)))
		return r;
	r = d->axpy(y, alpha, x, &de);
	return r ? accelp_device_fail(err, r, "axpy", buf) : ACCEL_OK;
}

int accelp_ops_device_sumsq(const accel_view *x, double *ret_sumsq, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(x, "sumsq", 1, err)) ||
	    (r = accelp_device_for("sumsq", x->device, x->device_index, &d, err)) ||
	    (r = accelp_device_use_stream(d, "sumsq", err)))
		return r;
	r = d->sumsq(x, ret_sumsq, &de);
	return r ? accelp_device_fail(err, r, "sumsq", buf) : ACCEL_OK;
}

int accelp_ops_device_nonfinite(const accel_view *x, uint64_t *ret_count, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(x, "nonfinite", 1, err)) ||
	    (r = accelp_device_for("nonfinite", x->device, x->device_index, &d, err)) ||
	    (r = accelp_device_use_stream(d, "nonfinite", err)))
		return r;
	r = d->nonfinite(x, ret_count, &de);
	return r ? accelp_device_fail(err, r, "nonfinite", buf) : ACCEL_OK;
}

/* Device ABI minor 2: statistics that stay on the device (docs/streams.md,
 * "Clipping on the device"). */
static int need_minor2(const accel_device_v1 *d, const char *what, accel_err *err)
{
	if (d->sumsq_acc && d->clip_scale)
		return ACCEL_OK;
	return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "%s: the %s device module predates "
	                     "device ABI 1.2 (no sumsq_acc/clip_scale)", what,
	                     d->desc && d->desc->name ? d->desc->name : "?");
}

int accelp_ops_device_stats_ok(int32_t device, int32_t device_index)
{
	const accel_device_v1 *d;
	accel_err e = {0};
	if (accelp_device_for("statistics", device, device_index, &d, &e))
		return 0;
	return d->sumsq_acc && d->clip_scale;
}

int accelp_ops_device_sumsq_acc(const accel_view *x, double *stats, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = check(x, "sumsq_acc", 1, err)))
		return r;
	if (x->device == ACCEL_DEVICE_CPU)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "sumsq_acc: a CPU view (the "
		                     "statistics buffer is device memory; use op_sumsq)");
	if ((r = accelp_device_for("sumsq_acc", x->device, x->device_index, &d, err)) ||
	    (r = need_minor2(d, "sumsq_acc", err)) ||
	    (r = accelp_device_use_stream(d, "sumsq_acc", err)))
		return r;
	r = d->sumsq_acc(x, stats, &de);
	return r ? accelp_device_fail(err, r, "sumsq_acc", buf) : ACCEL_OK;
}

int accelp_ops_device_clip_scale(int32_t device, int32_t device_index, double *stats,
                                double max_norm, double unscale, accel_err *err)
{
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = MSG_INIT(buf);
	int r;
	if ((r = accelp_device_for("clip_scale", device, device_index, &d, err)) ||
	    (r = need_minor2(d, "clip_scale", err)) ||
	    (r = accelp_device_use_stream(d, "clip_scale", err)))
		return r;
	r = d->clip_scale(device_index, stats, max_norm, unscale, &de);
	return r ? accelp_device_fail(err, r, "clip_scale", buf) : ACCEL_OK;
}
