/* SPDX-License-Identifier: MIT */
/* backends/cuda/cuda_device.c: the cuda device module (accel/device.h):
 * entry, memory, copies and the checks around the kernel launchers of
 * cuda_kernels.cu.
 *
 * Every CUDA call goes through CU_TRY, which turns a failure into
 * ACCEL_ERR_CUDA and a message naming the call, its error name and text.
 * Ops select the view's device first (cudaSetDevice is per thread, so a
 * caller's thread is left on the device it last used) and run on the
 * thread's stream (set_stream: like the current device, per thread, so two
 * training threads never share a stream by accident). */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/device.h"
#include "cuda-impl.h"
#include "backends/common/half.h"
#include "backends/common/optim-consts.h"

#define MAX_DEVICES 64
/* Bytes of a struct up to the end of member m (append-only structs). */
#define END_OF(type, m) (offsetof(type, m) + sizeof(((type *)0)->m))

static const accel_device_host_v1 *g_host;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;   /* scratch buffers */
static int g_count;
static void *g_scratch[MAX_DEVICES];   /* ACCEL_CUDA_SCRATCH_SLOTS + 1 slots, lazily */
/* The device of the thread's stream (accel_cuda_get_stream()); -1 for the
 * legacy default stream, which every device has. */
static _Thread_local int32_t tl_stream_dev = -1;

static int fail(accel_device_err_v1 *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(accel_device_err_v1 *err, int code, const char *fmt, ...)
{
	if (err && err->msg && err->cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, err->cap, fmt, ap);
		va_end(ap);
	}
	return code;
}

static int cuda_fail(accel_device_err_v1 *err, const char *call, int e)
{
	return fail(err, ACCEL_ERR_CUDA, "cuda: %s failed: %s (%s)", call,
	            cudaGetErrorName((cudaError_t)e), cudaGetErrorString((cudaError_t)e));
}

#define CU_TRY(call)                                      \
	do {                                                  \
		int e_ = (int)(call);                             \
		if (e_ != cudaSuccess)                            \
			return cuda_fail(err, #call, e_);             \
	} while (0)

static int set_device(int32_t index, accel_device_err_v1 *err)
{
	if (index < 0 || index >= g_count)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: device index %d out of range (this "
		            "machine has %d CUDA device%s)", index, g_count, g_count == 1 ? "" : "s");
	CU_TRY(cudaSetDevice(index));
	return ACCEL_OK;
}

/* set_device for an op on the thread's stream: a stream of another device
 * would fail inside the launch with an unhelpful "invalid resource handle". */
static int op_device(int32_t index, accel_device_err_v1 *err)
{
	if (tl_stream_dev >= 0 && index != tl_stream_dev)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: an op on device %d, but the current "
		            "stream (%p) belongs to device %d; set a stream of device %d (or NULL) "
		            "first", index, accel_cuda_get_stream(), tl_stream_dev, index);
	return set_device(index, err);
}

static cudaStream_t cur_stream(void)
{
	return (cudaStream_t)accel_cuda_get_stream();
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static int cu_init(uint32_t *ret_count, accel_device_err_v1 *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || (e == cudaSuccess && !n))
		return fail(err, ACCEL_ERR_UNSUPPORTED, "cuda: no usable CUDA device (%s%s%s)",
		            e == cudaSuccess ? "the driver reports 0 devices" : "cudaGetDeviceCount: ",
		            e == cudaSuccess ? "" : cudaGetErrorName(e),
		            e == cudaSuccess ? "" : "; is the NVIDIA driver loaded?");
	if (e != cudaSuccess)
		return fail(err, ACCEL_ERR_UNSUPPORTED, "cuda: cudaGetDeviceCount failed: %s (%s)",
		            cudaGetErrorName(e), cudaGetErrorString(e));
	g_count = n > MAX_DEVICES ? MAX_DEVICES : n;
	int sms = 0;
	if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess && sms)
		accel_cuda_set_grid_cap(sms * 8 > ACCEL_CUDA_SCRATCH_SLOTS ? ACCEL_CUDA_SCRATCH_SLOTS
		                                                           : sms * 8);
	/* CUDA's own debug switch makes launches synchronous; with it every op
	 * also waits for its kernels and reports their faults as its own. */
	const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
	int sync_each = blocking && !strcmp(blocking, "1");
	accel_cuda_set_sync(sync_each);
	if (g_host && g_host->log) {
		char line[200];
		snprintf(line, sizeof(line), "cuda device module: %d device%s, %d multiprocessors on "
		         "device 0%s", g_count, g_count == 1 ? "" : "s", sms,
		         sync_each ? "; CUDA_LAUNCH_BLOCKING=1: every op waits for its kernels" : "");
		g_host->log(ACCEL_LOG_DEBUG, line);
	}
	*ret_count = (uint32_t)g_count;
	return ACCEL_OK;
}

static void cu_fini(void)
{
	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < MAX_DEVICES; i++) {
		if (g_scratch[i] && cudaSetDevice(i) == cudaSuccess)
			cudaFree(g_scratch[i]);
		g_scratch[i] = NULL;
	}
	pthread_mutex_unlock(&g_lock);
}

/* ---- memory ------------------------------------------------------------------------------ */

static int cu_mem_alloc(uint32_t kind, int32_t device_index, uint64_t bytes, uint32_t zero,
                        void **ret_ptr, accel_device_err_v1 *err)
{
	void *p = NULL;
	int r;
	if (!ret_ptr || !bytes)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: mem_alloc of %llu bytes%s",
		            (unsigned long long)bytes, ret_ptr ? "" : " with ret_ptr NULL");
	if (kind == ACCEL_DEVICE_MEM_PINNED) {
		cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
		if (e != cudaSuccess)
			return fail(err, e == cudaErrorMemoryAllocation ? ACCEL_ERR_NOMEM : ACCEL_ERR_CUDA,
			            "cuda: cudaHostAlloc of %llu bytes of pinned memory failed: %s",
			            (unsigned long long)bytes, cudaGetErrorString(e));
		if (zero)
			memset(p, 0, bytes);
		*ret_ptr = p;
		return ACCEL_OK;
	}
	if (kind != ACCEL_DEVICE_MEM_DEVICE)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: unknown memory kind %u", kind);
	if ((r = set_device(device_index, err)))
		return r;
	cudaError_t e = cudaMalloc(&p, bytes);
	if (e != cudaSuccess)
		return fail(err, e == cudaErrorMemoryAllocation ? ACCEL_ERR_NOMEM : ACCEL_ERR_CUDA,
		            "cuda: cudaMalloc of %llu bytes on device %d failed: %s",
		            (unsigned long long)bytes, device_index, cudaGetErrorString(e));
	/* waited for: cudaMemset runs on the legacy stream, which a
	 * non-blocking stream (accel_set_stream) is not ordered after */
	if (zero && ((e = cudaMemset(p, 0, bytes)) != cudaSuccess ||
	             (e = cudaStreamSynchronize(cudaStreamLegacy)) != cudaSuccess)) {
		cudaFree(p);
		return cuda_fail(err, "cudaMemset(p, 0, bytes) on the legacy stream", e);
	}
	*ret_ptr = p;
	return ACCEL_OK;
}

static int cu_mem_free(uint32_t kind, void *ptr, accel_device_err_v1 *err)
{
	if (!ptr)
		return ACCEL_OK;
	if (kind == ACCEL_DEVICE_MEM_PINNED)
		CU_TRY(cudaFreeHost(ptr));
	else
		CU_TRY(cudaFree(ptr));
	return ACCEL_OK;
}

static int cu_memcpy(void *dst, const void *src, uint64_t bytes, uint32_t dir,
                     int32_t device_index, accel_device_err_v1 *err)
{
	static const enum cudaMemcpyKind kinds[] = {
		[ACCEL_DEVICE_H2D] = cudaMemcpyHostToDevice,
		[ACCEL_DEVICE_D2H] = cudaMemcpyDeviceToHost,
		[ACCEL_DEVICE_D2D] = cudaMemcpyDeviceToDevice,
	};
	int r;
	if (dir > ACCEL_DEVICE_D2D)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: memcpy direction %u unknown", dir);
	if (!bytes)
		return ACCEL_OK;
	if ((r = set_device(device_index, err)))
		return r;
	CU_TRY(cudaMemcpy(dst, src, bytes, kinds[dir]));
	return ACCEL_OK;
}

static int cu_sync(int32_t device_index, accel_device_err_v1 *err)
{
	int r = set_device(device_index, err);
	if (r)
		return r;
	CU_TRY(cudaDeviceSynchronize());
	return ACCEL_OK;
}

/* ---- ops ------------------------------------------------------------------------------------ */

/* A view's memory must be device memory of its device (or managed or
 * pinned host memory, which kernels reach too): a host pointer in a CUDA
 * view would otherwise fault inside a kernel and poison the context.  The
 * lookup costs about a microsecond, so the per-range optimizer step skips
 * it. */
static int check_mem(const accel_view *v, const char *what, accel_device_err_v1 *err)
{
	struct cudaPointerAttributes a;
	cudaError_t e = cudaPointerGetAttributes(&a, v->data);
	if (e != cudaSuccess) {
		cudaGetLastError();   /* not sticky; clear it */
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: %s: %p is not CUDA memory (%s)", what,
		            v->data, cudaGetErrorName(e));
	}
	if (a.type == cudaMemoryTypeUnregistered)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: %s: %p in a view on CUDA device %d is "
		            "ordinary host memory; allocate it with mem_alloc(ACCEL_DEVICE_CUDA) or "
		            "use a CPU view", what, v->data, v->device_index);
	if (a.type == cudaMemoryTypeDevice && a.device != v->device_index)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: %s: %p is memory of CUDA device %d, but "
		            "the view says device %d", what, v->data, a.device, v->device_index);
	return ACCEL_OK;
}

static int is_float(uint32_t dt)
{
	return dt == ACCEL_DTYPE_F32 || dt == ACCEL_DTYPE_F64 || dt == ACCEL_DTYPE_F16 ||
	       dt == ACCEL_DTYPE_BF16;
}

static int cu_copy(const accel_view *dst, const accel_view *src, accel_device_err_v1 *err)
{
	int r;
	if (!dst->numel)
		return ACCEL_OK;
	if ((r = op_device(dst->device_index, err)) || (r = check_mem(dst, "copy dst", err)) ||
	    (r = check_mem(src, "copy src", err)))
		return r;
	if (dst->dtype == src->dtype) {
		if (dst->data != src->data)
			CU_TRY(cudaMemcpyAsync(dst->data, src->data,
			                       dst->numel * accel_abi_dtype_size(dst->dtype),
			                       cudaMemcpyDeviceToDevice, cur_stream()));
		return ACCEL_OK;
	}
	if (!is_float(dst->dtype) || !is_float(src->dtype))
		return fail(err, ACCEL_ERR_UNSUPPORTED, "cuda: copy from %s to %s is not supported "
		            "(f32, f64, f16, bf16 convert among themselves)",
		            accel_abi_dtype_name(src->dtype), accel_abi_dtype_name(dst->dtype));
	CU_TRY(accel_cuda_launch_convert(dst->dtype, dst->data, src->dtype, src->data, dst->numel));
	return ACCEL_OK;
}

static int cu_fill(const accel_view *dst, double value, accel_device_err_v1 *err)
{
	int r;
	uint64_t bits;
	uint32_t sz = (uint32_t)accel_abi_dtype_size(dst->dtype);
	if (!dst->numel)
		return ACCEL_OK;
	if ((r = op_device(dst->device_index, err)) || (r = check_mem(dst, "fill", err)))
		return r;
	/* The element's bits as the CPU op stores them (core/ops_cpu.c). */
	switch (dst->dtype) {
	case ACCEL_DTYPE_F32: bits = accel_f32_bits((float)value); break;
	case ACCEL_DTYPE_F64: memcpy(&bits, &value, 8); break;
	case ACCEL_DTYPE_F16: bits = accel_f32_to_f16((float)value); break;
	default: bits = accel_f32_to_bf16((float)value); break;
	}
	if (value == 0.0)   /* -0.0 too: the CPU op memsets */
		CU_TRY(cudaMemsetAsync(dst->data, 0, dst->numel * sz, cur_stream()));
	else
		CU_TRY(accel_cuda_launch_fill(dst->data, sz, bits, dst->numel));
	return ACCEL_OK;
}

static int cu_scale(const accel_view *x, double alpha, accel_device_err_v1 *err)
{
	int r;
	if (!x->numel)
		return ACCEL_OK;
	if ((r = op_device(x->device_index, err)) || (r = check_mem(x, "scale", err)))
		return r;
	CU_TRY(accel_cuda_launch_scale(x->dtype, x->data, alpha, x->numel));
	return ACCEL_OK;
}

static int cu_axpy(const accel_view *y, double alpha, const accel_view *x,
                   accel_device_err_v1 *err)
{
	int r;
	if (!y->numel)
		return ACCEL_OK;
	if ((r = op_device(y->device_index, err)) || (r = check_mem(y, "axpy y", err)) ||
	    (r = check_mem(x, "axpy x", err)))
		return r;
	CU_TRY(accel_cuda_launch_axpy(y->dtype, y->data, alpha, x->dtype, x->data, y->numel));
	return ACCEL_OK;
}

/* Runs one of the reductions and copies its 8-byte result back.  The
 * scratch buffer of a device is shared, hence the lock. */
static int reduce(int sumsq, const accel_view *x, void *ret8, accel_device_err_v1 *err)
{
	int r, e;
	unsigned slot = 0;
	if (!x->numel) {
		memset(ret8, 0, 8);
		return ACCEL_OK;
	}
	if ((r = op_device(x->device_index, err)) ||
	    (r = check_mem(x, sumsq ? "sumsq" : "nonfinite", err)))
		return r;
	pthread_mutex_lock(&g_lock);
	void **s = &g_scratch[x->device_index];
	if (!*s && (e = cudaMalloc(s, (ACCEL_CUDA_SCRATCH_SLOTS + 1) * 8)) != cudaSuccess) {
		*s = NULL;
		r = cuda_fail(err, "cudaMalloc(scratch)", e);
		goto out;
	}
	e = sumsq ? accel_cuda_launch_sumsq(x->dtype, x->data, x->numel, *s, &slot)
	          : accel_cuda_launch_nonfinite(x->dtype, x->data, x->numel, *s, &slot);
	if (e != cudaSuccess) {
		r = cuda_fail(err, sumsq ? "sumsq kernel launch" : "nonfinite kernel launch", e);
		goto out;
	}
	/* pageable ret8: the copy is synchronous for the host, but only the
	 * stream sync reports a fault of the kernels above as this op's */
	if ((e = cudaMemcpyAsync(ret8, (char *)*s + 8 * (size_t)slot, 8, cudaMemcpyDeviceToHost,
	                         cur_stream())) ||
	    (e = cudaStreamSynchronize(cur_stream())))
		r = cuda_fail(err, "cudaMemcpyAsync(result, device to host) on the op's stream", e);
out:
	pthread_mutex_unlock(&g_lock);
	return r;
}

static int cu_sumsq(const accel_view *x, double *ret_sumsq, accel_device_err_v1 *err)
{
	double v;
	int r = reduce(1, x, &v, err);
	if (!r)
		*ret_sumsq = v;
	return r;
}

static int cu_nonfinite(const accel_view *x, uint64_t *ret_count, accel_device_err_v1 *err)
{
	uint64_t v;
	int r = reduce(0, x, &v, err);
	if (!r)
		*ret_count = v;
	return r;
}

/* ---- statistics and clipping on the device (device ABI minor 2) ---------------------------- */

static int stats_mem(int32_t device_index, double *stats, const char *what,
                     accel_device_err_v1 *err)
{
	if (!stats || ((uintptr_t)stats % 8))
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: %s: the statistics buffer %p is %s",
		            what, (void *)stats, stats ? "not 8-byte aligned" : "NULL");
	accel_view sv = {sizeof(sv), ACCEL_DTYPE_F64, ACCEL_DEVICE_CUDA, device_index, stats,
	                 ACCEL_DEVICE_STATS_DOUBLES};
	return check_mem(&sv, what, err);
}

static int cu_sumsq_acc(const accel_view *x, double *stats, accel_device_err_v1 *err)
{
	int r;
	if ((r = op_device(x->device_index, err)) ||
	    (r = stats_mem(x->device_index, stats, "sumsq_acc", err)))
		return r;
	if (!x->numel)
		return ACCEL_OK;
	if ((r = check_mem(x, "sumsq_acc", err)))
		return r;
	CU_TRY(accel_cuda_launch_sumsq_acc(x->dtype, x->data, x->numel, stats));
	return ACCEL_OK;
}

static int cu_clip_scale(int32_t device_index, double *stats, double max_norm, double unscale,
                         accel_device_err_v1 *err)
{
	int r;
	if ((r = op_device(device_index, err)) ||
	    (r = stats_mem(device_index, stats, "clip_scale", err)))
		return r;
	CU_TRY(accel_cuda_launch_clip_scale(stats, max_norm, unscale));
	return ACCEL_OK;
}

/* ---- the fused optimizer step ------------------------------------------------------------- */

static int cu_optim_step(int32_t device_index, const accel_device_optim_v1 *o,
                         const accel_device_range_v1 *ranges, uint32_t n_ranges,
                         accel_device_err_v1 *err)
{
	enum { BATCH = 256 };
	accel_cuda_range rs[BATCH];
	accel_cuda_opt k = {0};
	int r;

	if (!o || o->struct_size < END_OF(accel_device_optim_v1, reserved) ||
	    o->range_size < sizeof(accel_device_range_v1))
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: optim_step: options %s",
		            !o ? "NULL" : "from an older struct layout (struct_size/range_size)");
	if (o->type > ACCEL_DEVICE_OPTIM_ADAMW || o->step == 0 ||
	    (o->grad_dtype != ACCEL_DTYPE_F32 && o->grad_dtype != ACCEL_DTYPE_F16 &&
	     o->grad_dtype != ACCEL_DTYPE_BF16))
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: optim_step: type %u, step %llu, "
		            "gradient dtype %s (expected sgd/adamw, step >= 1, f32/f16/bf16)", o->type,
		            (unsigned long long)o->step, accel_abi_dtype_name(o->grad_dtype));
	if (!n_ranges)
		return ACCEL_OK;
	if ((r = op_device(device_index, err)))
		return r;
	k.grad_dtype = o->grad_dtype;
	if (o->struct_size >= END_OF(accel_device_optim_v1, grad_scale_dev) &&
	    o->grad_scale_dev) {
		accel_view sv = {sizeof(sv), ACCEL_DTYPE_F64, ACCEL_DEVICE_CUDA, device_index,
		                 (void *)o->grad_scale_dev, 1};
		if ((r = check_mem(&sv, "optim_step grad_scale_dev", err)))
			return r;
		k.gs_dev = o->grad_scale_dev;
	}
	if (o->type == ACCEL_DEVICE_OPTIM_ADAMW) {
		accel_optim_adamw_k c = accel_optim_adamw_consts(o->lr, o->beta1, o->beta2, o->eps,
		                                                 o->weight_decay, o->step,
		                                                 o->grad_scale);
		k.adamw = 1;
		k.adamw_k = (accel_cuda_adamw_k){c.decay, c.b1, c.omb1, c.b2, c.omb2, c.bc2s, c.eps,
		                                 c.nstep, c.gs};
	} else {
		accel_optim_sgd_k c = accel_optim_sgd_consts(o->lr, o->momentum, o->dampening,
		                                             o->nesterov, o->weight_decay, o->step,
		                                             o->grad_scale);
		k.sgd_k = (accel_cuda_sgd_k){c.wd, c.mom, c.omdamp, c.nlr, c.gs, c.has_wd,
		                             c.nesterov, c.first};
	}
	for (uint32_t i = 0; i < n_ranges;) {
		uint32_t n = 0;
		for (; i < n_ranges && n < BATCH; i++) {
			const accel_device_range_v1 *s =
				(const accel_device_range_v1 *)((const char *)ranges +
				                                (size_t)i * o->range_size);
			int need = k.adamw ? 2 : o->momentum != 0 ? 1 : 0;
			if (s->numel && (!s->param || !s->grad || (need >= 1 && !s->state[0]) ||
			                 (need >= 2 && !s->state[1])))
				return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: optim_step: range %u has a "
				            "NULL parameter, gradient or state pointer for %llu elements", i,
				            (unsigned long long)s->numel);
			rs[n++] = (accel_cuda_range){s->param, s->grad, need >= 1 ? s->state[0] : NULL,
			                             need >= 2 ? s->state[1] : NULL, s->numel};
		}
		k.ranges = rs;
		k.n = n;
		CU_TRY(accel_cuda_launch_optim(&k));
	}
	return ACCEL_OK;
}

/* ---- streams (device ABI minor 1) ----------------------------------------------------------- */

static int cu_stream_device(void *stream, int32_t *ret_device_index, accel_device_err_v1 *err)
{
	int dev = -1;
	if (!ret_device_index)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: stream_device: ret_device_index is NULL");
	if (stream) {
		cudaError_t e = cudaStreamGetDevice((cudaStream_t)stream, &dev);
		if (e != cudaSuccess) {
			cudaGetLastError();   /* an invalid handle is not sticky */
			return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: %p is not a live CUDA stream "
			            "(cudaStreamGetDevice: %s); pass a cudaStream_t from "
			            "cudaStreamCreate, or NULL for the legacy default stream", stream,
			            cudaGetErrorName(e));
		}
	}
	*ret_device_index = dev;
	return ACCEL_OK;
}

static int cu_set_stream(void *stream, accel_device_err_v1 *err)
{
	if (stream == accel_cuda_get_stream())
		return ACCEL_OK;
	int32_t dev = -1;
	int r = cu_stream_device(stream, &dev, err);
	if (r)
		return r;
	accel_cuda_set_stream(stream);
	tl_stream_dev = dev;
	return ACCEL_OK;
}

static int cu_memcpy_async(void *dst, int32_t dst_index, const void *src, int32_t src_index,
                           uint64_t bytes, uint32_t dir, void *stream,
                           accel_device_err_v1 *err)
{
	int r;
	if (dir > ACCEL_DEVICE_D2D)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: memcpy_async direction %u unknown", dir);
	if (!bytes)
		return ACCEL_OK;
	if (!dst || !src)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: memcpy_async of %llu bytes with a NULL "
		            "%s", (unsigned long long)bytes, !dst ? "destination" : "source");
	/* the copy runs on the destination's device, except device to host */
	int32_t run = dir == ACCEL_DEVICE_D2H ? src_index : dst_index;
	if ((r = set_device(run, err)))
		return r;
	if (stream) {
		int sdev = -1;
		if (cudaStreamGetDevice((cudaStream_t)stream, &sdev) != cudaSuccess) {
			cudaGetLastError();
			return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: memcpy_async: %p is not a live "
			            "CUDA stream", stream);
		}
		if (sdev != run)
			return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: memcpy_async: the copy runs on "
			            "device %d, but stream %p belongs to device %d", run, stream, sdev);
	}
	if (dir == ACCEL_DEVICE_D2D && src_index != dst_index) {
		if (src_index < 0 || src_index >= g_count)
			return set_device(src_index, err);   /* the range message */
		CU_TRY(cudaMemcpyPeerAsync(dst, dst_index, src, src_index, bytes,
		                           (cudaStream_t)stream));
		return ACCEL_OK;
	}
	static const enum cudaMemcpyKind kinds[] = {
		[ACCEL_DEVICE_H2D] = cudaMemcpyHostToDevice,
		[ACCEL_DEVICE_D2H] = cudaMemcpyDeviceToHost,
		[ACCEL_DEVICE_D2D] = cudaMemcpyDeviceToDevice,
	};
	CU_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[dir], (cudaStream_t)stream));
	return ACCEL_OK;
}

static int cu_stream_sync(int32_t device_index, void *stream, accel_device_err_v1 *err)
{
	int r = set_device(device_index, err);
	if (r)
		return r;
	CU_TRY(cudaStreamSynchronize((cudaStream_t)stream));
	return ACCEL_OK;
}

/* ---- events (device ABI minor 3) ----------------------------------------------------------- */

static int cu_event_record(int32_t device_index, void *stream, void **ret_event,
                           accel_device_err_v1 *err)
{
	cudaEvent_t ev = NULL;
	int r = set_device(device_index, err);
	if (r)
		return r;
	if (!ret_event)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: event_record: ret_event is NULL");
	CU_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	cudaError_t e = cudaEventRecord(ev, (cudaStream_t)stream);
	if (e != cudaSuccess) {
		cudaEventDestroy(ev);
		return cuda_fail(err, "cudaEventRecord(ev, (cudaStream_t)stream)", e);
	}
	*ret_event = ev;
	return ACCEL_OK;
}

static int cu_event_sync(void *event, accel_device_err_v1 *err)
{
	if (!event)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: event_sync: NULL event");
	CU_TRY(cudaEventSynchronize((cudaEvent_t)event));
	return ACCEL_OK;
}

static int cu_event_query(void *event, int32_t *ret_done, accel_device_err_v1 *err)
{
	if (!event || !ret_done)
		return fail(err, ACCEL_ERR_INVALID_ARG, "cuda: event_query: NULL %s",
		            event ? "ret_done" : "event");
	cudaError_t e = cudaEventQuery((cudaEvent_t)event);
	if (e == cudaErrorNotReady) {
		cudaGetLastError();   /* not an error: clear it */
		*ret_done = 0;
		return ACCEL_OK;
	}
	if (e != cudaSuccess)
		return cuda_fail(err, "cudaEventQuery(event)", e);
	*ret_done = 1;
	return ACCEL_OK;
}

static void cu_event_free(void *event)
{
	if (event)
		cudaEventDestroy((cudaEvent_t)event);
}

/* ---- entry ------------------------------------------------------------------------------ */

static const accel_device_desc_v1 desc = {
	.struct_size = sizeof(accel_device_desc_v1),
	.abi_major = 1,
	.abi_minor = ACCEL_DEVICE_ABI_MINOR,
	.device = ACCEL_DEVICE_CUDA,
	.name = "cuda",
	.version = "1.1",
	.summary = "CUDA memory, element-wise ops and fused multi-tensor SGD/AdamW",
};

static const accel_device_v1 vtable = {
	.struct_size = sizeof(accel_device_v1),
	.desc = &desc,
	.init = cu_init,
	.fini = cu_fini,
	.mem_alloc = cu_mem_alloc,
	.mem_free = cu_mem_free,
	.memcpy = cu_memcpy,
	.sync = cu_sync,
	.copy = cu_copy,
	.fill = cu_fill,
	.scale = cu_scale,
	.axpy = cu_axpy,
	.sumsq = cu_sumsq,
	.nonfinite = cu_nonfinite,
	.optim_step = cu_optim_step,
	.stream_device = cu_stream_device,
	.set_stream = cu_set_stream,
	.memcpy_async = cu_memcpy_async,
	.stream_sync = cu_stream_sync,
	.sumsq_acc = cu_sumsq_acc,
	.clip_scale = cu_clip_scale,
	.event_record = cu_event_record,
	.event_sync = cu_event_sync,
	.event_query = cu_event_query,
	.event_free = cu_event_free,
};

ACCEL_EXPORT const accel_device_v1 *accel_device_entry_v1(const accel_device_host_v1 *host)
{
	if (!host || host->struct_size < sizeof(accel_device_host_v1) || host->abi_major != 1)
		return NULL;
	g_host = host;
	return &vtable;
}
