/* SPDX-License-Identifier: MIT */
/* core/mem.h: accounted allocations (private).  Every byte accel allocates
 * for a context goes through here, recorded by category and device, so
 * memory can be reported and checked against the ZeRO/FSDP formulas. */
#ifndef ACCEL_CORE_MEM_H
#define ACCEL_CORE_MEM_H

#include <stdint.h>

#include "ctx-impl.h"

typedef struct accel_mem accel_mem;

int accelp_mem_new(accel_mem **ret_mem);
/* Frees every allocation still live (backend memory through ctx->comm, so
 * call before the comm layer goes away). */
accel_mem *accelp_mem_free_all(accel_mem *mem, accel_ctx *ctx);

/* 64-byte aligned.  ACCEL_MEMF_COMM: from the comm backend when it has an
 * allocator, else ordinary memory.  ACCEL_MEMF_ZERO: zero-filled. */
int accelp_mem_alloc(accel_ctx *ctx, uint32_t category, int32_t device, int32_t device_index,
                    uint64_t bytes, uint32_t flags, void **ret_ptr);
/* NULL is a no-op; a pointer accel did not allocate is reported at error
 * level and ignored (never freed). */
void accelp_mem_release(accel_ctx *ctx, void *ptr);

/* Current and peak bytes of a category on a device kind (ACCEL_DEVICE_*). */
uint64_t accelp_mem_current(const accel_ctx *ctx, uint32_t category, int32_t device);
uint64_t accelp_mem_peak(const accel_ctx *ctx, uint32_t category, int32_t device);

#endif
