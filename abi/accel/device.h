/* SPDX-License-Identifier: MIT */
/*
 * accel/device.h: the device module ABI, version 1.
 *
 * A device module gives libaccel memory and element-wise ops on one kind of
 * accelerator (the cuda module: ACCEL_DEVICE_CUDA).  libaccel never links an
 * accelerator runtime: it dlopen()s the module the first time a view, an
 * allocation or an optimizer step names the device, calls the one exported
 * symbol
 *
 *     ACCEL_EXPORT const accel_device_v1 *
 *     accel_device_entry_v1(const accel_device_host_v1 *host);
 *
 * and then init().  Device modules are not plugins: they live in their own
 * directories (ACCEL_DEVICE_PATH, then <libdir>/accel/devices) and are named
 * device-<name>.so; see docs/abi.md, "Device modules".
 *
 * Rules as for the other ABI headers: structs start with `uint32_t
 * struct_size` and are append-only, fixed-width integers only, no runtime
 * (CUDA) types.  Every pointer an op receives in a view with device ==
 * desc->device is a device pointer of the view's device_index.
 *
 * Ordering: ops are enqueued, in call order, on the calling thread's
 * current stream (minor 1, set_stream(); before it, and until a thread
 * sets one, the legacy default stream of the device), and may return
 * before the device ran them.  memcpy to the host, sumsq, nonfinite and
 * sync() wait for everything enqueued before them on that stream; an error
 * of an enqueued op may therefore be reported by a later call.  A stream is
 * the runtime's handle (the cuda module: a cudaStream_t) passed as void *;
 * NULL always means the legacy default stream.  See docs/streams.md.
 *
 * Errors: every fallible member returns ACCEL_OK or a negative ACCEL_ERR_*
 * (runtime failures ACCEL_ERR_CUDA) and writes a one-line message naming
 * the failed call into err (see accel_device_err_v1).
 *
 * Thread contract: init()/fini() once, from one thread; every other member
 * may be called from any thread (the module serialises what it must).
 */
#ifndef ACCEL_DEVICE_H
#define ACCEL_DEVICE_H

#include "accel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACCEL_DEVICE_ENTRY_V1 "accel_device_entry_v1"
/* Minor of this header's device ABI (independent of ACCEL_ABI_MINOR). */
#define ACCEL_DEVICE_ABI_MINOR 3

/* What the core gives the module (borrowed, valid for the process). */
typedef struct accel_device_host_v1 {
	uint32_t struct_size;   /* sizeof(accel_device_host_v1)                    */
	uint32_t abi_major;     /* 1                                                */
	uint32_t abi_minor;     /* ACCEL_DEVICE_ABI_MINOR of the core               */
	uint32_t reserved;      /* 0                                                */
	/* Log one line at ACCEL_LOG_* level through the core's logger
	 * (any thread). */
	void (*log)(int32_t level, const char *msg);
} accel_device_host_v1;

/* Where a failing call writes its message: at most cap - 1 bytes and a
 * NUL into msg (owned by the caller).  Untouched on success. */
typedef struct accel_device_err_v1 {
	uint32_t struct_size;   /* sizeof(accel_device_err_v1)                     */
	uint32_t cap;           /* bytes at msg, >= 1                               */
	char *msg;              /* caller's buffer                                  */
} accel_device_err_v1;

typedef struct accel_device_desc_v1 {
	uint32_t struct_size;   /* sizeof(accel_device_desc_v1)                    */
	uint32_t abi_major;     /* 1                                                */
	uint32_t abi_minor;     /* ACCEL_DEVICE_ABI_MINOR the module was built with */
	int32_t device;         /* ACCEL_DEVICE_* the module serves                 */
	const char *name;       /* "cuda"; static                                   */
	const char *version;    /* module version; static                           */
	const char *summary;    /* one line; static                                 */
} accel_device_desc_v1;

/* accel_device_v1.mem_alloc kinds. */
#define ACCEL_DEVICE_MEM_DEVICE 0   /* device memory of device_index            */
#define ACCEL_DEVICE_MEM_PINNED 1   /* page-locked host memory (any device)     */

/* accel_device_v1.memcpy directions. */
#define ACCEL_DEVICE_H2D 0
#define ACCEL_DEVICE_D2H 1
#define ACCEL_DEVICE_D2D 2

/* accel_device_optim_v1.type (the same numbers as the core's optimizer). */
#define ACCEL_DEVICE_OPTIM_SGD   0
#define ACCEL_DEVICE_OPTIM_ADAMW 1

/*
 * One fused optimizer step over many ranges (a parameter group at one step
 * count).  The update rules, the order of float operations and the f32
 * rounding of the hyper-parameters are the core's (docs/optim.md): a
 * module must give the bits the CPU optimizer gives.
 */
typedef struct accel_device_optim_v1 {
	uint32_t struct_size;   /* sizeof(accel_device_optim_v1)                   */
	uint32_t type;          /* ACCEL_DEVICE_OPTIM_*                             */
	uint32_t grad_dtype;    /* ACCEL_DTYPE_F32, _F16 or _BF16                   */
	int32_t nesterov;       /* SGD: 0/1 (needs momentum > 0, dampening 0)       */
	uint64_t step;          /* this update's step count t, >= 1                 */
	double lr;              /* this update's learning rate, finite, >= 0        */
	double beta1, beta2;    /* AdamW                                            */
	double eps;             /* AdamW                                            */
	double weight_decay;    /* AdamW decoupled, SGD L2; >= 0                    */
	double momentum;        /* SGD; 0: no momentum buffer                       */
	double dampening;       /* SGD                                              */
	double grad_scale;      /* gradients are multiplied by (float)grad_scale    */
	uint32_t range_size;    /* sizeof(accel_device_range_v1): the array stride  */
	uint32_t reserved;      /* 0                                                */
	/* device ABI minor 2 (read only when struct_size covers it): */
	const double *grad_scale_dev; /* non-NULL: device memory of the step's
	                             device holding the factor, read by the kernels
	                             when they run (in place of grad_scale; the same
	                             (float) rounding) */
} accel_device_optim_v1;

/* Device ABI minor 2: the f64 slots of a statistics buffer (sumsq_acc,
 * clip_scale): [0] sum of squares, [1] norm, [2] clip coefficient, [3]
 * gradient factor, then scratch for the module. */
#define ACCEL_DEVICE_STATS_DOUBLES 1088

/* One range: numel f32 parameters, gradients of grad_dtype and the state
 * arrays (AdamW: exp_avg, exp_avg_sq; SGD with momentum: the buffer; unused
 * ones NULL), all device pointers of the step's device, not overlapping. */
typedef struct accel_device_range_v1 {
	float *param;
	const void *grad;
	float *state[2];
	uint64_t numel;
} accel_device_range_v1;

typedef struct accel_device_v1 {
	uint32_t struct_size;                /* sizeof(accel_device_v1)              */
	uint32_t reserved;                   /* 0                                    */
	const accel_device_desc_v1 *desc;    /* static                               */

	/* Bring the runtime up.  ACCEL_ERR_UNSUPPORTED (message says why) when
	 * the machine has no usable device; then no other member is called.
	 * ret_count: number of devices. */
	int (*init)(uint32_t *ret_count, accel_device_err_v1 *err);
	/* Release what init() made (memory still allocated stays valid until
	 * the process exits). */
	void (*fini)(void);

	/* bytes (> 0) of memory of `kind` (ACCEL_DEVICE_MEM_*), 256-byte
	 * aligned; zero-filled when `zero`.  Owned by the caller, released with
	 * mem_free(kind, ...). */
	int (*mem_alloc)(uint32_t kind, int32_t device_index, uint64_t bytes, uint32_t zero,
	                 void **ret_ptr, accel_device_err_v1 *err);
	/* NULL is a no-op. */
	int (*mem_free)(uint32_t kind, void *ptr, accel_device_err_v1 *err);
	/* Copy bytes in direction dir (ACCEL_DEVICE_H2D/D2H/D2D); device_index
	 * names the device side.  Returns after the copy is complete. */
	int (*memcpy)(void *dst, const void *src, uint64_t bytes, uint32_t dir,
	              int32_t device_index, accel_device_err_v1 *err);
	/* Wait for everything enqueued on device_index. */
	int (*sync)(int32_t device_index, accel_device_err_v1 *err);

	/* The ops of core/ops.h on views of this device (both views of a binary
	 * op on the same device_index; the core checked dtypes, sizes and
	 * NULLs).  copy converts among f32/f64/f16/bf16 (round to nearest
	 * even, as the CPU op) and copies other dtypes to the same dtype;
	 * sumsq accumulates in f64 and reduces on the device. */
	int (*copy)(const accel_view *dst, const accel_view *src, accel_device_err_v1 *err);
	int (*fill)(const accel_view *dst, double value, accel_device_err_v1 *err);
	int (*scale)(const accel_view *x, double alpha, accel_device_err_v1 *err);
	int (*axpy)(const accel_view *y, double alpha, const accel_view *x,
	            accel_device_err_v1 *err);
	int (*sumsq)(const accel_view *x, double *ret_sumsq, accel_device_err_v1 *err);
	int (*nonfinite)(const accel_view *x, uint64_t *ret_count, accel_device_err_v1 *err);

	/* One fused optimizer step over n_ranges ranges of device_index
	 * (ranges is n_ranges elements, opt->range_size bytes apart). */
	int (*optim_step)(int32_t device_index, const accel_device_optim_v1 *opt,
	                  const accel_device_range_v1 *ranges, uint32_t n_ranges,
	                  accel_device_err_v1 *err);

	/* ---- device ABI minor 1: caller streams (NULL in a module of minor 0;
	 * the core then runs everything on the legacy default stream and
	 * refuses a caller's stream with ACCEL_ERR_UNSUPPORTED) ---- */

	/* The device a stream belongs to: *ret_device_index = its ordinal, or -1
	 * for NULL (the legacy default stream exists on every device).
	 * ACCEL_ERR_INVALID_ARG when `stream` is not a live stream. */
	int (*stream_device)(void *stream, int32_t *ret_device_index, accel_device_err_v1 *err);
	/* Make `stream` (of the device it belongs to, or NULL) the calling
	 * thread's current stream: copy, fill, scale, axpy, sumsq, nonfinite and
	 * optim_step on this thread are enqueued there from now on.  An op on
	 * another device than a non-NULL stream's fails with
	 * ACCEL_ERR_INVALID_ARG naming both.  Cheap (a thread-local store): the
	 * core calls it before every op. */
	int (*set_stream)(void *stream, accel_device_err_v1 *err);
	/* Enqueue a copy of `bytes` on `stream` and return.  dir H2D: dst is
	 * memory of device dst_index (src_index ignored); D2H: src is memory of
	 * src_index (dst_index ignored); D2D: dst on dst_index, src on
	 * src_index, which may differ (a peer copy: direct where the devices
	 * have peer access, else through the host by the runtime; defined
	 * either way).  `stream` must be NULL or a stream of the device the
	 * copy runs on (the destination's for H2D and D2D, the source's for
	 * D2H).  Host memory should be pinned (mem_alloc(ACCEL_DEVICE_MEM_PINNED))
	 * for the copy to overlap; with pageable memory the runtime copies
	 * synchronously, which is still correct.  The caller must not touch
	 * either buffer until the stream has run the copy (stream_sync, or
	 * later work on the stream). */
	int (*memcpy_async)(void *dst, int32_t dst_index, const void *src, int32_t src_index,
	                    uint64_t bytes, uint32_t dir, void *stream, accel_device_err_v1 *err);
	/* Block the calling thread until everything enqueued on `stream` of
	 * device_index has run (NULL: the legacy default stream of
	 * device_index); reports the error of a failed enqueued op. */
	int (*stream_sync)(int32_t device_index, void *stream, accel_device_err_v1 *err);

	/* ---- device ABI minor 2: gradient statistics and clipping that stay on
	 * the device (NULL in an older module: the core then reads sumsq on the
	 * host) ---- */

	/* Enqueue stats[0] += (the f64 sum of squares sumsq() returns for x) on
	 * the thread's stream and return without waiting.  stats: a buffer of
	 * ACCEL_DEVICE_STATS_DOUBLES f64 in device memory of x's device; slots
	 * from 4 on are the module's scratch, so work on one buffer must stay
	 * on one stream. */
	int (*sumsq_acc)(const accel_view *x, double *stats, accel_device_err_v1 *err);
	/* Enqueue, from stats[0] (the sum of squares of the gradients as they
	 * are, scaled), in f64 with every operation rounded once (the core's
	 * host arithmetic, bit for bit):
	 *     stats[1] = sqrt(stats[0]) * unscale                      (the norm)
	 *     stats[2] = max_norm > 0 ? min(1, max_norm / (stats[1] + 1e-6)) : 1
	 *     stats[3] = stats[2] * unscale          (the optimizer's grad_scale)
	 * on device_index's current stream of this thread.  No wait. */
	int (*clip_scale)(int32_t device_index, double *stats, double max_norm, double unscale,
	                  accel_device_err_v1 *err);

	/* ---- device ABI minor 3: events, for host waits on part of a stream's
	 * work (plugin ABI 1.6 host->event_*; NULL in an older module: the core
	 * refuses event_record with ACCEL_ERR_UNSUPPORTED naming the module) ---- */

	/* Record a new event on `stream` of device_index (NULL: its legacy
	 * default stream) after the work enqueued there so far.  *ret_event:
	 * the runtime's handle (the cuda module: a cudaEvent_t), owned by the
	 * caller, released with event_free. */
	int (*event_record)(int32_t device_index, void *stream, void **ret_event,
	                    accel_device_err_v1 *err);
	/* Block the calling thread until the event's work ran; reports the
	 * error of a failed enqueued op. */
	int (*event_sync)(void *event, accel_device_err_v1 *err);
	/* No wait: *ret_done = 1 when the event's work ran, else 0. */
	int (*event_query)(void *event, int32_t *ret_done, accel_device_err_v1 *err);
	/* Destroy an event (NULL: no-op); pending work is not waited for. */
	void (*event_free)(void *event);
	/* Appended members go here. */
} accel_device_v1;

ACCEL_EXPORT const accel_device_v1 *accel_device_entry_v1(const accel_device_host_v1 *host);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_DEVICE_H */
