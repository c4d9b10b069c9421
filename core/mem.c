/* SPDX-License-Identifier: MIT */
/* core/mem.c: accounted allocations. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "log.h"
#include "mem.h"

typedef struct mem_rec {
	void *ptr;
	uint64_t bytes;
	uint32_t category;
	int32_t device;
	int32_t from_comm;
} mem_rec;

struct accel_mem {
	mem_rec *recs;
	size_t n, cap;
};

int accel_mem_new(accel_mem **ret_mem)
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
		if (!ctx->comm || !accel_comm_mem_free(ctx->comm, r->ptr))
			accel_log(ACCEL_LOG_ERROR, "internal: backend buffer %p outlived its backend",
			          r->ptr);
	} else {
		free(r->ptr);
	}
	int d = r->device == ACCEL_DEVICE_CPU ? 0 : 1;
	ctx->mem_bytes[r->category][d] -= r->bytes;
}

accel_mem *accel_mem_free_all(accel_mem *mem, accel_ctx *ctx)
{
	if (!mem)
		return NULL;
	for (size_t i = 0; i < mem->n; i++)
		release_rec(ctx, &mem->recs[i]);
	free(mem->recs);
	free(mem);
	return NULL;
}

int accel_mem_alloc(accel_ctx *ctx, uint32_t category, int32_t device, int32_t device_index,
                    uint64_t bytes, uint32_t flags, void **ret_ptr)
{
	accel_mem *m = ctx->mem;
	void *p = NULL;
	int from_comm = 0;

	if (category >= ACCEL_MEM_CATEGORY_COUNT)
		return accel_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "mem_alloc: unknown memory category %u", category);
	if (device != ACCEL_DEVICE_CPU && !(flags & ACCEL_MEMF_COMM))
		return accel_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "mem_alloc: device memory (device %d:%d) needs the cuda device "
		                     "module, which this build does not have", device, device_index);
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		mem_rec *nr = realloc(m->recs, cap * sizeof(*nr));
		if (!nr)
			return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM, "mem_alloc: out of memory");
		m->recs = nr;
		m->cap = cap;
	}
	if ((flags & ACCEL_MEMF_COMM) && ctx->comm) {
		int r = accel_comm_mem_alloc(ctx->comm, device, device_index, bytes ? bytes : 1, &p);
		if (r)
			return r;
		from_comm = p != NULL;
		if (!p)
			accel_log(ACCEL_LOG_DEBUG, "comm backend has no allocator; %llu bytes of "
			          "ordinary memory instead", (unsigned long long)bytes);
	}
	if (!p) {
		if (device != ACCEL_DEVICE_CPU)
			return accel_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
			                     "mem_alloc: no allocator for device %d:%d", device,
			                     device_index);
		size_t sz = (size_t)((bytes + 63) & ~(uint64_t)63);
		p = aligned_alloc(64, sz ? sz : 64);
		if (!p)
			return accel_err_set(&ctx->err, ACCEL_ERR_NOMEM,
			                     "out of memory allocating %llu bytes (category %u)",
			                     (unsigned long long)bytes, category);
	}
	if ((flags & ACCEL_MEMF_ZERO) && device == ACCEL_DEVICE_CPU && bytes)
		memset(p, 0, bytes);
	m->recs[m->n++] = (mem_rec){p, bytes, category, device, from_comm};
	int d = device == ACCEL_DEVICE_CPU ? 0 : 1;
	ctx->mem_bytes[category][d] += bytes;
	if (ctx->mem_bytes[category][d] > ctx->mem_peak[category][d])
		ctx->mem_peak[category][d] = ctx->mem_bytes[category][d];
	*ret_ptr = p;
	return ACCEL_OK;
}

void accel_mem_release(accel_ctx *ctx, void *ptr)
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
	accel_log(ACCEL_LOG_ERROR, "mem_free: %p was not allocated by accel; ignored", ptr);
}

uint64_t accel_mem_current(const accel_ctx *ctx, uint32_t category, int32_t device)
{
	if (category >= ACCEL_MEM_CATEGORY_COUNT)
		return 0;
	return ctx->mem_bytes[category][device == ACCEL_DEVICE_CPU ? 0 : 1];
}

uint64_t accel_mem_peak(const accel_ctx *ctx, uint32_t category, int32_t device)
{
	if (category >= ACCEL_MEM_CATEGORY_COUNT)
		return 0;
	return ctx->mem_peak[category][device == ACCEL_DEVICE_CPU ? 0 : 1];
}
