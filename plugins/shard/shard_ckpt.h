/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_ckpt.h: the checkpoint names and the per-run
 * save/load of the plugins that shard (zero, fsdp).  Master weights and
 * optimizer state are canonical tensors, master/<param> and
 * optim/<state>/<param> (docs/checkpoints.md); a rank saves or loads each
 * run (one parameter's elements it owns) of every array through a host
 * staging buffer and the plugin's store, reached through a callback. */
#ifndef ACCEL_SHARD_CKPT_H
#define ACCEL_SHARD_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "accel/plugin.h"

/* Name of optimizer state k of n_state (the configured /optimizer.type's,
 * "adamw" when unset): a fixed name, or "state<k>" written to buf. */
const char *shard_ckpt_state_name(const accel_host_v1 *H, accel_host *h, uint32_t n_state,
                                  uint32_t k, char *buf, size_t cap);

/* Tensor name of array `array` of parameter p into buf: 0 the masters,
 * k + 1 optimizer state k.  ACCEL_ERR_INVALID_ARG (reported) when it does
 * not fit. */
int shard_ckpt_tensor_name(const accel_host_v1 *H, accel_host *h, uint32_t n_state,
                           const accel_param_info_v1 *p, uint32_t array, char *buf, size_t cap);

/* Copy `v->numel` elements at `at` of the store's array `array` into v
 * (to_view nonzero) or from v into the store. */
typedef int (*shard_ckpt_copy_fn)(void *store, uint32_t array, uint64_t at,
                                  const accel_view *v, int to_view);

/* One run: elements [param_offset, param_offset + numel) of parameter p,
 * at `at` in the store, for the masters and every optimizer state.  save:
 * read from the store and written to w; else read from rd and written to
 * the store.  buf (f32, room for numel) stages the data. */
typedef struct shard_ckpt_io {
	const accel_host_v1 *host;
	accel_host *h;
	accel_ckpt_writer *w;         /* save */
	accel_ckpt_reader *rd;        /* load */
	uint32_t n_state;
	shard_ckpt_copy_fn copy;
	void *store;
	float *buf;
} shard_ckpt_io;

int shard_ckpt_run(const shard_ckpt_io *io, int save, const accel_param_info_v1 *p,
                   uint64_t param_offset, uint64_t numel, uint64_t at);

#endif
