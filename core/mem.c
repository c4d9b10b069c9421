/* SPDX-License-Identifier: MIT */
/* core/mem.c: accounted allocations. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "log.h"
#include "mem.h"

typedef struct mem_rec {
	void *ptr;
	uint64_t bytes;
	uint32_t category;
	int32_t device, device_index;
	int32_t from_comm;
	int32_t from_module;   /* 1 + ACCEL_DEVICE_MEM_* when the device module owns it */
} mem_rec;

/* Bytes on one device (kind and index): current and peak per category,
 * and the peak of their sum. */
typedef struct mem_place {
	int32_t device, index;
	uint64_t cur[ACCEL_MEM_CATEGORY_COUNT], peak[ACCEL_MEM_CATEGORY_COUNT];
	uint64_t total, total_peak;
} mem_place;

struct accel_mem {
	mem_rec *recs;
	size_t n, cap;
	mem_place *places;
	uint32_t n_places, cap_places;
};

/* The counters of (device, index), made when `add` (NULL otherwise, and
 * when out of memory). */
static mem_place *place(accel_mem *m, int32_t device, int32_t index, int add)
{
	if (device == ACCEL_DEVICE_CPU)
		index = 0;
	for (uint32_t i = 0; i < m->n_places; i++)
		if (m->places[i].device == device && m->places[i].index == index)
			return &m->places[i];
	if (!add)
		return NULL;
	if (m->n_places == m->cap_places) {
		uint32_t cap = m->cap_places ? 2 * m->cap_places : 4;
		mem_place *np = realloc(m->places, cap * sizeof(*np));
		if (!np)
			return NULL;
		m->places = np;
		m->cap_places = cap;
	}
	mem_place *pl = &m->places[m->n_places++];
	*pl = (mem_place){.device = device, .index = index};
	return pl;
}

int accelp_mem_new(accel_mem **ret_mem)
{
	accel_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return ACCEL_ERR_NOMEM;
	*ret_mem = m;
	return ACCEL_OK;
}

static void release_rec(accel_ctx *ctx, const mem_rec *r)
{
	if (r->from_comm) {
		if (!ctx->comm || !accelp_comm_mem_free(ctx->comm, r->ptr))
			accelp_log(ACCEL_LOG_ERROR, "internal: backend buffer %p outlived its backend",
			          r->ptr);
	} else if (r->from_module) {
		const accel_device_v1 *dev;
		char buf[512] = "";
		accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
		/* the module was loaded when this was allocated, so get cannot fail */
		if (accelp_device_get(ACCEL_DEVICE_CUDA, &dev, NULL) ||
		    dev->mem_free((uint32_t)(r->from_module - 1), r->ptr, &de))
			accelp_log(ACCEL_LOG_ERROR, "mem_free: %p: %s", r->ptr, buf);
	} else {
		free(r->ptr);
	}
	int d = r->device == ACCEL_DEVICE_CPU ? 0 : 1;
	ctx->mem_bytes[r->category][d] -= r->bytes;
	mem_place *pl = place(ctx->mem, r->device, r->device_index, 0);
	if (pl) {
		pl->cur[r->category] -= r->bytes;
		pl->total -= r->bytes;
	}
}

accel_mem *accelp_mem_free_all(accel_mem *mem, accel_ctx *ctx)
{
	if (!mem)
		return NULL;
	for (size_t i = 0; i < mem->n; i++)
		release_rec(ctx, &mem->recs[i]);
	free(mem->recs);
	free(mem->places);
	free(mem);
	return NULL;
}

int accelp_mem_alloc(accel_ctx *ctx, uint32_t category, int32_t device, int32_t device_index,
                    uint64_t bytes, uint32_t flags, void **ret_ptr)
{
	accel_mem *m = ctx->mem;
	void *p = NULL;
	int from_comm = 0, from_module = 0;

	if (category >= ACCEL_MEM_CATEGORY_COUNT)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "mem_alloc: unknown memory category %u", category);
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		mem_rec *nr = realloc(m->recs, cap * sizeof(*nr));
		if (!nr)
			return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "mem_alloc: out of memory");
		m->recs = nr;
		m->cap = cap;
	}
	/* the counters exist before the memory does: nothing to undo after */
	mem_place *pl = place(m, device, device_index, 1);
	if (!pl)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "mem_alloc: out of memory");
	if ((flags & ACCEL_MEMF_COMM) && ctx->comm) {
		int r = accelp_comm_mem_alloc(ctx->comm, device, device_index, bytes ? bytes : 1, &p);
		if (r)
			return r;
		from_comm = p != NULL;
		if (!p)
			accelp_log(ACCEL_LOG_DEBUG, "comm backend has no allocator; %llu bytes of "
			          "ordinary memory instead", (unsigned long long)bytes);
	}
	/* Device memory (unless the comm backend gave it) and pinned host
	 * memory come from the device module. */
	if (!p && (device != ACCEL_DEVICE_CPU || (flags & ACCEL_MEMF_PINNED))) {
		const accel_device_v1 *dev;
		char buf[1024] = "";
		accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
		int on_host = device == ACCEL_DEVICE_CPU;
		int r = accelp_device_for(on_host ? "mem_alloc (pinned host memory)" : "mem_alloc",
		                         on_host ? ACCEL_DEVICE_CUDA : device,
		                         on_host ? 0 : device_index, &dev, &ctx->err);
		if (r)
			return r;
		from_module = 1 + (on_host ? ACCEL_DEVICE_MEM_PINNED : ACCEL_DEVICE_MEM_DEVICE);
		r = dev->mem_alloc((uint32_t)(from_module - 1), device_index, bytes ? bytes : 1,
		                   (flags & ACCEL_MEMF_ZERO) ? 1 : 0, &p, &de);
		if (r)
			return accelp_err_set(&ctx->err, r, "mem_alloc: %llu bytes (category %u) on device "
			                     "%d:%d: %s", (unsigned long long)bytes, category, device,
			                     device_index, buf);
	}
	if (!p) {
		if (device != ACCEL_DEVICE_CPU)
			return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
			                     "mem_alloc: no allocator for device %d:%d", device,
			                     device_index);
		size_t sz = (size_t)((bytes + 63) & ~(uint64_t)63);
		p = aligned_alloc(64, sz ? sz : 64);
		if (!p)
			return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM,
			                     "out of memory allocating %llu bytes (category %u)",
			                     (unsigned long long)bytes, category);
	}
	if ((flags & ACCEL_MEMF_ZERO) && device == ACCEL_DEVICE_CPU && !from_module && bytes)
		memset(p, 0, bytes);
	m->recs[m->n++] = (mem_rec){p, bytes, category, device,
	                            device == ACCEL_DEVICE_CPU ? 0 : device_index, from_comm,
	                            from_module};
	int d = device == ACCEL_DEVICE_CPU ? 0 : 1;
	ctx->mem_bytes[category][d] += bytes;
	if (ctx->mem_bytes[category][d] > ctx->mem_peak[category][d])
		ctx->mem_peak[category][d] = ctx->mem_bytes[category][d];
	pl->cur[category] += bytes;
	pl->total += bytes;
	if (pl->cur[category] > pl->peak[category])
		pl->peak[category] = pl->cur[category];
	if (pl->total > pl->total_peak)
		pl->total_peak = pl->total;
	*ret_ptr = p;
	return ACCEL_OK;
}

void accelp_mem_release(accel_ctx *ctx, void *ptr)
{
	accel_mem *m = ctx ? ctx->mem : NULL;
	if (!ptr || !m)
		return;
	/* Newest first: buffers are usually freed in reverse order. */
	for (size_t i = m->n; i-- > 0;) {
		if (m->recs[i].ptr != ptr)
			continue;
		release_rec(ctx, &m->recs[i]);
		m->recs[i] = m->recs[--m->n];
		return;
	}
	accelp_log(ACCEL_LOG_ERROR, "mem_free: %p was not allocated by accel; ignored", ptr);
}

uint64_t accelp_mem_current(const accel_ctx *ctx, uint32_t category, int32_t device)
{
	if (category >= ACCEL_MEM_CATEGORY_COUNT)
		return 0;
	return ctx->mem_bytes[category][device == ACCEL_DEVICE_CPU ? 0 : 1];
}

uint64_t accelp_mem_peak(const accel_ctx *ctx, uint32_t category, int32_t device)
{
	if (category >= ACCEL_MEM_CATEGORY_COUNT)
		return 0;
	return ctx->mem_peak[category][device == ACCEL_DEVICE_CPU ? 0 : 1];
}

int accel_memory_stats(const accel_ctx *ctx, uint32_t category, int32_t device,
                       int32_t device_index, uint64_t *ret_current, uint64_t *ret_peak)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	/* The context's error record is the one thing a reader writes. */
	accel_err *err = (accel_err *)&ctx->err;
	if (category >= ACCEL_MEM_CATEGORY_COUNT && category != ACCEL_MEM_ALL)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_memory_stats: unknown "
		                     "category %u (ACCEL_MEM_PARAMS .. ACCEL_MEM_OFFLOAD, 0 .. %u, or "
		                     "ACCEL_MEM_ALL)", category, ACCEL_MEM_CATEGORY_COUNT - 1);
	if (device != ACCEL_DEVICE_CPU && device != ACCEL_DEVICE_CUDA)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_memory_stats: unknown "
		                     "device %d (ACCEL_DEVICE_CPU or ACCEL_DEVICE_CUDA)", device);
	if (device == ACCEL_DEVICE_CPU ? device_index != 0 : device_index < 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_memory_stats: device index "
		                     "%d for %s (%s)", device_index,
		                     device == ACCEL_DEVICE_CPU ? "the CPU" : "a CUDA device",
		                     device == ACCEL_DEVICE_CPU ? "host memory is index 0"
		                                                : "CUDA devices count from 0");
	if (!ret_current && !ret_peak)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_memory_stats: ret_current "
		                     "and ret_peak are both NULL");
	const mem_place *pl = ctx->mem ? place(ctx->mem, device, device_index, 0) : NULL;
	uint64_t cur = 0, peak = 0;
	if (pl && category == ACCEL_MEM_ALL) {
		cur = pl->total;
		peak = pl->total_peak;
	} else if (pl) {
		cur = pl->cur[category];
		peak = pl->peak[category];
	}
	if (ret_current)
		*ret_current = cur;
	if (ret_peak)
		*ret_peak = peak;
	return ACCEL_OK;
}
