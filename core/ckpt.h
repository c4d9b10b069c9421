/* SPDX-License-Identifier: MIT */
/* core/ckpt.h: the checkpoint streams behind host->ckpt_* (private;
 * core/ckpt_stream.c, docs/checkpoints.md).  `plugin` prefixes every blob name. */
#ifndef ACCEL_CORE_CKPT_H
#define ACCEL_CORE_CKPT_H

#include <stdint.h>

#include "accel/plugin.h"
#include "error.h"

int accelp_ckpt_write(accel_ckpt_writer *w, const char *plugin, const char *name,
                      const void *data, uint64_t bytes, accel_err *err);
int accelp_ckpt_size(accel_ckpt_reader *r, const char *plugin, const char *name,
                     uint64_t *ret_bytes, accel_err *err);
int accelp_ckpt_read(accel_ckpt_reader *r, const char *plugin, const char *name, void *buf,
                     uint64_t bytes, accel_err *err);

/* host->ckpt_write_tensor (borrow: the core's own param/ slices, data kept
 * alive by the caller until commit), ckpt_tensor_info, ckpt_read_tensor. */
int accelp_ckpt_write_tensor(accel_ckpt_writer *w, const char *plugin,
                             const accel_ckpt_slice_v1 *s, int borrow, accel_err *err);
/* The core's whole tensors streamed into the file (param/ of a strategy
 * that shards parameters: one unit at a time in memory).  declare: tensor
 * s->name whole (s->offset 0, s->count its numel; s->data ignored), before
 * accelp_ckpt_set_slices_meta; *ret_index names it to stream_tensor, which
 * writes all its bytes at once, in any order of tensors, and checksums
 * them.  A declared tensor never streamed fails the commit. */
int accelp_ckpt_declare_tensor(accel_ckpt_writer *w, const accel_ckpt_slice_v1 *s,
                               uint32_t *ret_index, accel_err *err);
int accelp_ckpt_stream_tensor(accel_ckpt_writer *w, uint32_t index, const void *data,
                              uint64_t bytes, accel_err *err);
int accelp_ckpt_tensor_info(accel_ckpt_reader *r, const char *plugin, const char *name,
                            accel_ckpt_tensor_info_v1 *ret, accel_err *err);
int accelp_ckpt_read_tensor(accel_ckpt_reader *r, const char *plugin, const char *name,
                            uint32_t dtype, uint64_t offset, uint64_t count, void *buf,
                            accel_err *err);

#endif
