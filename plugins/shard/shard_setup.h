/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard_setup.h: the set-up the plugins that shard (zero,
 * fsdp) share: the host table check and world of their init, the start of
 * their wrap, and the walk that cuts the program's units into runs of
 * consecutive units kept in one flat buffer each (shard_setup.c). */
#ifndef ACCEL_SHARD_SETUP_H
#define ACCEL_SHARD_SETUP_H

#include <stdint.h>

#include "accel/plugin.h"

/* Read config key `key` with the host's `fn` (cfg_int, cfg_bool, ...) into
 * *dst; a key not set leaves *dst as it is.  For a read_config function
 * with `H`, `h` and `int r` in scope: any other error returns from it. */
#define SHARD_CFG_GET(fn, key, dst)                                 \
	do {                                                            \
		r = H->fn(h, key, dst);                                     \
		if (r && r != ACCEL_ERR_NOT_FOUND)                          \
			return r;                                               \
	} while (0)

/* The start of init: ACCEL_ERR_ABI (reported) when the host table is older
 * than ABI 1.4 (ckpt_read_tensor, reduce_scatter_bucket); else the world
 * into *world (its struct_size set here), its size and this rank into
 * *ret_world_size, *ret_rank. */
int shard_init_world(const accel_host_v1 *H, accel_host *h, accel_world_v1 *world,
                     uint32_t *ret_world_size, uint32_t *ret_rank);

/* The start of wrap: the host's model into *model (ACCEL_ERR_STATE,
 * reported, when *model is already set: wrap called twice, or the host has
 * none) and the optimizer's state count into *ret_n_state
 * (ACCEL_ERR_UNSUPPORTED, reported, naming `plugin`, above max_state). */
int shard_wrap_begin(const accel_host_v1 *H, accel_host *h, const char *plugin,
                     uint32_t max_state, const accel_model_v1 **model, uint32_t *ret_n_state);

/* A run of consecutive program units whose parameters share one dtype,
 * gradient dtype and device (a zero reduce group, an FSDP unit). */
typedef struct shard_span {
	uint32_t first_unit, n_units;
	uint32_t first_param, n_params;
	uint32_t dtype, grad_dtype;
	int32_t device, device_index;
	uint64_t numel;
} shard_span;

/* Copy span *sp into *dst, a plugin's record with members of the same
 * names. */
#define SHARD_SPAN_COPY(dst, sp)                                    \
	do {                                                            \
		(dst)->first_unit = (sp)->first_unit;                       \
		(dst)->n_units = (sp)->n_units;                             \
		(dst)->first_param = (sp)->first_param;                     \
		(dst)->n_params = (sp)->n_params;                           \
		(dst)->dtype = (sp)->dtype;                                 \
		(dst)->grad_dtype = (sp)->grad_dtype;                       \
		(dst)->device = (sp)->device;                               \
		(dst)->device_index = (sp)->device_index;                   \
		(dst)->numel = (sp)->numel;                                 \
	} while (0)

/* Whether program unit u opens a new span after `cur`, the span so far (the
 * walk opens one anyway where the dtypes or the device change). */
typedef int (*shard_split_fn)(void *ctx, uint32_t u, const shard_span *cur);

/* Check that the units of m cover its parameters in registration order,
 * each holding some, and that each unit keeps one dtype and device
 * (shard_unit_uniform, `keeps`); ACCEL_ERR_UNSUPPORTED (reported, naming
 * `plugin`) when not.  Then cut the units into spans: spans[] (room for
 * m->n_units), unit_span[u] the span of unit u, *ret_n their number. */
int shard_cut_spans(const accel_host_v1 *H, accel_host *h, const accel_model_v1 *m,
                    const char *plugin, const char *keeps, shard_split_fn split, void *ctx,
                    shard_span *spans, uint32_t *unit_span, uint32_t *ret_n);

/* The element count of the largest parameter of m (1 when it has none):
 * the size of a host buffer that holds any one whole. */
uint64_t shard_largest_param(const accel_model_v1 *m);

/* Parameters first_param .. first_param + n - 1 of m back to back: the
 * offset of each into at[], and the gradient bucket runs of the trainable
 * ones (each whole, at its offset) into entries[] (room for n),
 * *ret_n_entries of them. */
void shard_param_runs(const accel_model_v1 *m, uint32_t first_param, uint32_t n, uint64_t *at,
                      accel_bucket_entry_v1 *entries, uint32_t *ret_n_entries);

#endif
