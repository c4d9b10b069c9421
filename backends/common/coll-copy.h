/* SPDX-License-Identifier: MIT */
/* backends/common/coll-copy.h: the copy the host backends use for results
 * that are large and that nothing reads again soon (coll_copy.c, compiled
 * into each module that uses it; hidden visibility). */
#ifndef ACCEL_BACKENDS_COLL_COPY_H
#define ACCEL_BACKENDS_COLL_COPY_H

#include <stdint.h>

/* dst = src, n bytes, the ranges not overlapping.  On x86-64 the stores are
 * non-temporal (SSE2 movntdq: the destination lines are written without
 * first being read into the cache, and are not left there), elsewhere this
 * is memcpy.  The stores are ordered (sfence) before it returns: whatever
 * the caller publishes afterwards (a phase counter, a request's state),
 * another CPU that sees it sees the data too. */
void coll_copy_stream(void *restrict dst, const void *restrict src, uint64_t n);

#endif
