/* SPDX-License-Identifier: MIT */
/* core/ckpt.h: the checkpoint streams behind host->ckpt_* (private;
 * core/ckpt.c, docs/checkpoints.md).  `plugin` prefixes every blob name. */
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

#endif
