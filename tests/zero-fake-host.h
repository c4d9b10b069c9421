/* SPDX-License-Identifier: MIT */
/* tests/zero-fake-host.h: a small accel_host_v1 for the tests of the zero
 * plugin's store and swap files (tests/test-zero-store.c,
 * tests/test-zero-nvme.c), so they test those modules' logic without the
 * core.  Header-only, static.
 *
 *  - mem_alloc/mem_free: malloc, each allocation recorded with its
 *    category, flags and device.  "Device" memory (ACCEL_DEVICE_CUDA) is
 *    host memory too, so a test can read it, but every view handed to an
 *    op is checked against the device its memory was allocated on: a
 *    store that passes device memory as a host view fails the test
 *    (memory from plain malloc counts as host memory).
 *  - op_copy converts f32/bf16/f16 (round to nearest even) and refuses a
 *    dtype change across devices, as the core does.
 *  - op_copy_async between a device and the host is queued and runs only
 *    when an event recorded after it, or the stream, is synchronized (or a
 *    synchronous op_copy comes): a missing wait reads stale data.
 *  - optim_step is a reference AdamW (torch's formula, f32 arithmetic,
 *    step count and learning rate from the fake); optim_step_n loops over
 *    it after checking that every view is host memory.  Each update of
 *    element offset + i of a parameter is counted (touched[]), so a test
 *    sees elements stepped twice, never, or at the wrong offset.
 * fake_host_minimal() removes optim_step_n and the stream/event members,
 * as a host older than ABI minor 6 would. */
#ifndef ACCEL_TEST_ZERO_FAKE_HOST_H
#define ACCEL_TEST_ZERO_FAKE_HOST_H

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/plugin.h"
#include "backends/common/half.h"

#define FAKE_MAX_ALLOC 512
#define FAKE_MAX_QUEUE 8192
#define FAKE_MAX_PARAMS 8

typedef struct fake_alloc {
	char *p;
	uint64_t bytes;
	uint32_t cat, flags;
	int32_t dev;
} fake_alloc;

typedef struct fake_host {
	accel_host_v1 H;
	accel_model_v1 model;
	accel_param_info_v1 params[FAKE_MAX_PARAMS];
	fake_alloc allocs[FAKE_MAX_ALLOC];
	int nalloc;
	int last_code;
	char last_err[2048];
	char warnings[8192];
	int nwarn;
	uint64_t t;            /* step count of the next optim_step (>= 1) */
	float lr;
	uint32_t n_state;
	struct {
		accel_view dst, src;
	} q[FAKE_MAX_QUEUE];
	uint64_t nq, ran;      /* copies queued and run so far (q[] is a ring) */
	uint64_t optim_calls, optim_n_calls, async_copies, sync_copies;
	uint8_t *touched[FAKE_MAX_PARAMS];   /* updates of each element (offset + i) */
} fake_host;

static fake_host *fh_of(accel_host *h)
{
	return (fake_host *)(void *)h;
}

static inline accel_host *fake_h(fake_host *fh)
{
	return (accel_host *)(void *)fh;
}

static inline void fake_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (getenv("ZERO_TEST_VERBOSE"))
		fprintf(stderr, "[log %d] %s\n", level, buf);
	if (h && level <= ACCEL_LOG_WARN) {
		fake_host *fh = fh_of(h);
		fh->nwarn++;
		size_t l = strlen(fh->warnings);
		snprintf(fh->warnings + l, sizeof(fh->warnings) - l, "%s\n", buf);
	}
}

static inline int fake_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (getenv("ZERO_TEST_VERBOSE"))
		fprintf(stderr, "[error %d] %s\n", code, buf);
	if (h) {
		fake_host *fh = fh_of(h);
		if (!fh->last_code) {
			fh->last_code = code;
			snprintf(fh->last_err, sizeof(fh->last_err), "%s", buf);
		}
	}
	return code;
}

static inline void fake_clear_error(fake_host *fh)
{
	fh->last_code = 0;
	fh->last_err[0] = '\0';
}

static inline const accel_model_v1 *fake_model(accel_host *h)
{
	return &fh_of(h)->model;
}

static inline fake_alloc *fake_find(fake_host *fh, const void *p)
{
	for (int i = 0; i < fh->nalloc; i++) {
		fake_alloc *a = &fh->allocs[i];
		if ((const char *)p >= a->p && (const char *)p < a->p + (a->bytes ? a->bytes : 1))
			return a;
	}
	return NULL;
}

/* A view's memory must be where the view says. */
static inline void fake_check_view(fake_host *fh, const accel_view *v, const char *what)
{
	if (!v->numel)
		return;
	fake_alloc *a = fake_find(fh, v->data);
	/* memory the test took with malloc is host memory */
	ck_assert_msg(a != NULL || v->device == ACCEL_DEVICE_CPU,
	              "%s: %p is not device memory of this host", what, v->data);
	if (!a)
		return;
	ck_assert_msg(a->dev == v->device, "%s: view on device %d, memory on device %d", what,
	              v->device, a->dev);
	size_t es = accel_abi_dtype_size(v->dtype);
	ck_assert_msg((const char *)v->data + v->numel * es <= a->p + a->bytes,
	              "%s: view of %llu elements runs past its allocation", what,
	              (unsigned long long)v->numel);
}

static inline int fake_mem_alloc(accel_host *h, uint32_t category, int32_t device, int32_t device_index,
                          uint64_t bytes, uint32_t flags, void **ret_ptr)
{
	fake_host *fh = fh_of(h);
	ck_assert_int_lt(fh->nalloc, FAKE_MAX_ALLOC);
	ck_assert_msg(!(flags & ACCEL_MEMF_PINNED) || device == ACCEL_DEVICE_CPU,
	              "pinned memory asked for on a device");
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes ? (size_t)bytes : 1))
		return fake_error(h, ACCEL_ERR_NOMEM, "fake mem_alloc: %llu bytes",
		                  (unsigned long long)bytes);
	if (flags & ACCEL_MEMF_ZERO)
		memset(p, 0, (size_t)bytes);
	else
		memset(p, 0xa5, (size_t)bytes);   /* garbage: a read before a write shows */
	fh->allocs[fh->nalloc++] = (fake_alloc){p, bytes, category, flags, device};
	*ret_ptr = p;
	return ACCEL_OK;
}

static inline void fake_mem_free(accel_host *h, void *ptr)
{
	fake_host *fh = fh_of(h);
	if (!ptr)
		return;
	for (int i = 0; i < fh->nalloc; i++)
		if (fh->allocs[i].p == ptr) {
			free(ptr);
			fh->allocs[i] = fh->allocs[--fh->nalloc];
			return;
		}
	ck_abort_msg("mem_free of %p, not allocated here", ptr);
}

static inline float fake_load(const void *p, uint32_t dt, uint64_t i)
{
	if (dt == ACCEL_DTYPE_F32)
		return ((const float *)p)[i];
	if (dt == ACCEL_DTYPE_BF16)
		return accel_bf16_to_f32(((const uint16_t *)p)[i]);
	return accel_f16_to_f32(((const uint16_t *)p)[i]);
}

static inline void fake_store(void *p, uint32_t dt, uint64_t i, float x)
{
	if (dt == ACCEL_DTYPE_F32)
		((float *)p)[i] = x;
	else if (dt == ACCEL_DTYPE_BF16)
		((uint16_t *)p)[i] = accel_f32_to_bf16(x);
	else
		((uint16_t *)p)[i] = accel_f32_to_f16(x);
}

static inline void fake_do_copy(const accel_view *dst, const accel_view *src)
{
	if (dst->dtype == src->dtype)
		memmove(dst->data, src->data, dst->numel * accel_abi_dtype_size(dst->dtype));
	else
		for (uint64_t i = 0; i < dst->numel; i++)
			fake_store(dst->data, dst->dtype, i, fake_load(src->data, src->dtype, i));
}

static inline void fake_run_queue(fake_host *fh, uint64_t upto)
{
	for (; fh->ran < upto; fh->ran++)
		fake_do_copy(&fh->q[fh->ran % FAKE_MAX_QUEUE].dst, &fh->q[fh->ran % FAKE_MAX_QUEUE].src);
}

static inline int fake_copy_check(fake_host *fh, const accel_view *dst, const accel_view *src,
                           const char *what)
{
	fake_check_view(fh, dst, what);
	fake_check_view(fh, src, what);
	if (dst->numel != src->numel)
		return fake_error(fake_h(fh), ACCEL_ERR_INVALID_ARG, "%s: %llu vs %llu elements", what,
		                  (unsigned long long)dst->numel, (unsigned long long)src->numel);
	if (dst->dtype != src->dtype && dst->device != src->device)
		return fake_error(fake_h(fh), ACCEL_ERR_INVALID_ARG,
		                  "%s: a copy across devices keeps the dtype (%s to %s)", what,
		                  accel_abi_dtype_name(src->dtype), accel_abi_dtype_name(dst->dtype));
	return ACCEL_OK;
}

static inline int fake_op_copy(accel_host *h, const accel_view *dst, const accel_view *src)
{
	fake_host *fh = fh_of(h);
	int r = fake_copy_check(fh, dst, src, "op_copy");
	if (r)
		return r;
	/* a copy that involves the device is ordered after the stream's
	 * work; one between host buffers is a memmove, ordered with nothing */
	if (dst->device != ACCEL_DEVICE_CPU || src->device != ACCEL_DEVICE_CPU)
		fake_run_queue(fh, fh->nq);
	fake_do_copy(dst, src);
	fh->sync_copies++;
	return ACCEL_OK;
}

static inline int fake_op_copy_async(accel_host *h, const accel_view *dst, const accel_view *src)
{
	fake_host *fh = fh_of(h);
	int r = fake_copy_check(fh, dst, src, "op_copy_async");
	if (r)
		return r;
	ck_assert_msg(dst->dtype == src->dtype, "op_copy_async changes no dtype");
	if (dst->device == ACCEL_DEVICE_CPU && src->device == ACCEL_DEVICE_CPU) {
		fake_do_copy(dst, src);
		return ACCEL_OK;
	}
	ck_assert_uint_lt(fh->nq - fh->ran, FAKE_MAX_QUEUE);
	fh->q[fh->nq % FAKE_MAX_QUEUE].dst = *dst;
	fh->q[fh->nq % FAKE_MAX_QUEUE].src = *src;
	fh->nq++;
	fh->async_copies++;
	return ACCEL_OK;
}

static inline int fake_stream_sync(accel_host *h)
{
	fake_run_queue(fh_of(h), fh_of(h)->nq);
	return ACCEL_OK;
}

static inline int fake_event_record(accel_host *h, void **ret_event)
{
	uint64_t *e = malloc(sizeof(*e));
	ck_assert_ptr_nonnull(e);
	*e = fh_of(h)->nq;
	*ret_event = e;
	return ACCEL_OK;
}

static inline int fake_event_sync(accel_host *h, void *event)
{
	fake_run_queue(fh_of(h), *(uint64_t *)event);
	return ACCEL_OK;
}

static inline int fake_event_query(accel_host *h, void *event, int32_t *ret_done)
{
	*ret_done = fh_of(h)->ran >= *(uint64_t *)event;
	return ACCEL_OK;
}

static inline void fake_event_free(accel_host *h, void *event)
{
	free(event);
}

static inline uint32_t fake_optim_state_count(accel_host *h)
{
	return fh_of(h)->n_state;
}

/* torch.optim.AdamW's update of one element, in f32. */
static inline void fake_adamw(float *p, float g, float *m, float *v, uint64_t t, float lr)
{
	const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
	float bc1 = (float)(1.0 - pow(0.9, (double)t)), bc2 = (float)(1.0 - pow(0.999, (double)t));
	*p = *p * (1.0f - lr * wd);
	*m = b1 * *m + (1.0f - b1) * g;
	*v = b2 * *v + (1.0f - b2) * g * g;
	float denom = sqrtf(*v) / sqrtf(bc2) + eps;
	*p = *p - (lr / bc1) * (*m / denom);
}

/* n_state 0: SGD, p -= lr * g; 2: AdamW. */
static inline void fake_update(fake_host *fh, float *p, float g, float *m, float *v)
{
	if (fh->n_state == 0)
		*p = *p - fh->lr * g;
	else
		fake_adamw(p, g, m, v, fh->t, fh->lr);
}

static inline int fake_optim_step(accel_host *h, const accel_optim_args_v1 *a)
{
	fake_host *fh = fh_of(h);
	ck_assert_uint_eq(a->struct_size, sizeof(*a));
	ck_assert_uint_eq(a->master.dtype, ACCEL_DTYPE_F32);
	ck_assert_uint_eq(a->master.numel, a->grad.numel);
	ck_assert_int_eq(a->master.device, a->grad.device);
	ck_assert_uint_lt(a->param, fh->model.n_params);
	ck_assert_uint_le(a->offset + a->master.numel, fh->params[a->param].numel);
	fake_check_view(fh, &a->master, "optim_step master");
	fake_check_view(fh, &a->grad, "optim_step grad");
	if (a->master.device != ACCEL_DEVICE_CPU)   /* on the stream, after its copies */
		fake_run_queue(fh, fh->nq);
	double scale = a->grad_scale;
	if (a->grad_scale_dev) {
		ck_assert_int_ne(a->master.device, ACCEL_DEVICE_CPU);
		scale = *a->grad_scale_dev;
	}
	float *p = a->master.data;
	for (uint64_t i = 0; i < a->master.numel; i++)
		fh->touched[a->param][a->offset + i]++;
	for (uint64_t i = 0; i < a->master.numel; i++) {
		float g = fake_load(a->grad.data, a->grad.dtype, i) * (float)scale;
		fake_update(fh, &p[i], g, fh->n_state ? &a->state[0][i] : NULL,
		            fh->n_state ? &a->state[1][i] : NULL);
	}
	fh->optim_calls++;
	return ACCEL_OK;
}

static inline int fake_optim_step_n(accel_host *h, const accel_optim_args_v1 *args, uint32_t n,
                             uint32_t n_threads)
{
	fake_host *fh = fh_of(h);
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_int_eq(args[i].master.device, ACCEL_DEVICE_CPU);
		ck_assert_int_eq(args[i].grad.device, ACCEL_DEVICE_CPU);
		int r = fake_optim_step(h, &args[i]);
		if (r)
			return r;
	}
	fh->optim_n_calls++;
	return ACCEL_OK;
}

static inline void fake_host_init(fake_host *fh, uint32_t n_state)
{
	memset(fh, 0, sizeof(*fh));
	accel_host_v1 *H = &fh->H;
	H->struct_size = sizeof(*H);
	H->abi_major = ACCEL_ABI_MAJOR;
	H->abi_minor = ACCEL_ABI_MINOR;
	H->accel_version = "test";
	H->log = fake_log;
	H->error = fake_error;
	H->model = fake_model;
	H->mem_alloc = fake_mem_alloc;
	H->mem_free = fake_mem_free;
	H->op_copy = fake_op_copy;
	H->optim_state_count = fake_optim_state_count;
	H->optim_step = fake_optim_step;
	H->op_copy_async = fake_op_copy_async;
	H->optim_step_n = fake_optim_step_n;
	H->stream_sync = fake_stream_sync;
	H->event_record = fake_event_record;
	H->event_sync = fake_event_sync;
	H->event_query = fake_event_query;
	H->event_free = fake_event_free;
	fh->model.struct_size = sizeof(fh->model);
	fh->model.params = fh->params;
	fh->model.param_info_size = sizeof(accel_param_info_v1);
	fh->n_state = n_state;
	fh->lr = 1e-3f;
	fh->t = 1;
}

/* A host of minor 5: no optim_step_n, no stream waits. */
static inline void fake_host_minimal(fake_host *fh)
{
	fh->H.optim_step_n = NULL;
	fh->H.stream_sync = NULL;
	fh->H.event_record = NULL;
	fh->H.event_sync = NULL;
	fh->H.event_query = NULL;
	fh->H.event_free = NULL;
	fh->H.struct_size = (uint32_t)offsetof(accel_host_v1, optim_step_n);
}

static inline void fake_add_param(fake_host *fh, const char *name, uint32_t dtype, uint64_t numel,
                           int32_t device)
{
	ck_assert_uint_lt(fh->model.n_params, FAKE_MAX_PARAMS);
	accel_param_info_v1 *p = &fh->params[fh->model.n_params];
	memset(p, 0, sizeof(*p));
	p->struct_size = sizeof(*p);
	p->dtype = dtype;
	p->name = name;
	p->index = fh->model.n_params++;
	p->numel = numel;
	p->device = device;
	p->requires_grad = 1;
	p->grad_dtype = p->reduce_dtype = p->compute_dtype = dtype;
	fh->model.total_numel += numel;
	fh->touched[p->index] = calloc(numel, 1);
	ck_assert_ptr_nonnull(fh->touched[p->index]);
}

static inline void fake_host_fini(fake_host *fh)
{
	for (int i = 0; i < FAKE_MAX_PARAMS; i++) {
		free(fh->touched[i]);
		fh->touched[i] = NULL;
	}
}

/* Allocations of a category (and flags, when `flags` is not 0). */
static inline int fake_count(const fake_host *fh, uint32_t cat, int32_t dev, uint32_t flags)
{
	int n = 0;
	for (int i = 0; i < fh->nalloc; i++)
		if (fh->allocs[i].cat == cat && fh->allocs[i].dev == dev &&
		    (fh->allocs[i].flags & flags) == flags)
			n++;
	return n;
}

#endif
