/* SPDX-License-Identifier: MIT */
/* core/safetensors-impl.h: what the files of the safetensors reader and
 * writer share (private):
 *   safetensors.c        the format's dtype names, a shape's size
 *   safetensors_write.c  the writer: layout, header, streamed writes, the
 *                        atomic commit and the file's checksum
 *   safetensors_read.c   the reader: the header validated against the file,
 *                        lookups, reads of element ranges
 * safetensors.h is what the rest of the core sees. */
#ifndef ACCEL_CORE_SAFETENSORS_IMPL_H
#define ACCEL_CORE_SAFETENSORS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

/* Tensor bytes are copied to and from the file as they are in memory; the
 * format is little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "core/safetensors*.c assume a little-endian host"
#endif

#define METADATA_KEY "__metadata__"

/* numel and byte size of a shape; 0 on overflow of uint64 (a 0 in the shape
 * gives numel 0 and returns 1). */
int accelp_st_shape_size(uint32_t ndim, const uint64_t *shape, size_t esize,
                         uint64_t *ret_numel, uint64_t *ret_nbytes);

#endif
