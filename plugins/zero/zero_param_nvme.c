/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_param_nvme.c: stage 3's working-weight shards in an
 * NVMe swap file (zero_optimization.offload_param.device "nvme").
 *
 * Every group's block of working weights lies in one swap file under
 * offload_param.nvme_path, at a 4096-aligned offset.  Between uses nothing
 * of it is in memory: a gather reads the rank's block into a host staging
 * buffer, copies it into its place in the unit's gather buffer and
 * all-gathers in place; materialize's writeback writes it back.  The step
 * (and the initial values, and a checkpoint's load) needs every block at
 * once: zero3p_shards_in() reads them into one transient buffer and points
 * the pieces' working weights there, zero3p_shards_out() writes them back
 * and frees it.  The masters are then always the optimizer shard's own
 * (never the working weights).  The swap file is unlinked from the start
 * (zero_nvme.h), so no file is left in nvme_path. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

#define PSWAP_ALIGN 4096

static uint64_t up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static uint64_t block_bytes(const zero_group *g)
{
	return g->block * accel_abi_dtype_size(g->dtype);
}

/* Swap bytes of the groups' blocks (each aligned), and the largest one. */
uint64_t zero3p_layout(zero_state *s, uint64_t *ret_largest)
{
	uint64_t at = 0, largest = 0;
	for (uint32_t i = 0; i < s->n_groups; i++) {
		zero_group *g = &s->groups[i];
		g->pswap_off = at;
		uint64_t b = up(block_bytes(g), PSWAP_ALIGN);
		at += b;
		if (b > largest)
			largest = b;
	}
	*ret_largest = largest;
	return at;
}

int zero3p_open(zero_state *s)
{
	const accel_host_v1 *H = s->host;
	uint64_t largest, bytes = zero3p_layout(s, &largest);
	char tag[64];
	int r;
	if ((r = zero_nvme_preflight(H, s->h, "zero_optimization.offload_param.nvme_path",
	                             s->cfg.param_nvme_path, bytes)))
		return r;
	snprintf(tag, sizeof(tag), "parameter shards, rank %u", s->rank);
	if ((r = zero_swap_open(H, s->h, s->cfg.param_nvme_path, tag, bytes, &s->cfg.aio,
	                        &s->pswap)))
		return r;
	s->pstage_bytes = largest + PSWAP_ALIGN;
	if ((r = zero_alloc(s, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0, s->pstage_bytes,
	                    ACCEL_MEMF_ZERO, &s->pstage_raw)))
		return r;
	s->pstage = (void *)(uintptr_t)up((uint64_t)(uintptr_t)s->pstage_raw, PSWAP_ALIGN);
	H->log(s->h, ACCEL_LOG_DEBUG, "stage 3 parameter shards: swap of %llu bytes under %s",
	       (unsigned long long)bytes, s->cfg.param_nvme_path);
	return ACCEL_OK;
}

void zero3p_close(zero_state *s)
{
	s->pswap = zero_swap_close(s->pswap);
	zero_free(s, s->pshards_raw, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, s->pshards_bytes);
	s->pshards_raw = NULL;
	zero_free(s, s->pstage_raw, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, s->pstage_bytes);
	s->pstage_raw = NULL;
}

/* Group g's block from the swap into `dst` (its dtype, g->block elements). */
int zero3p_read_block(zero_state *s, zero_group *g, void *dst)
{
	uint64_t t, n = up(block_bytes(g), PSWAP_ALIGN);
	int r;
	if ((r = zero_swap_read(s->pswap, g->pswap_off, s->pstage, n, &t)) ||
	    (r = zero_swap_wait(s->pswap, t)))
		return r;
	accel_view d = shard_view(g->dtype, g->device, g->device_index, dst, g->block);
	accel_view h = shard_view(g->dtype, ACCEL_DEVICE_CPU, 0, s->pstage, g->block);
	return s->host->op_copy(s->h, &d, &h);
}

/* `src` (g->block elements of g's dtype) into the swap as g's block. */
int zero3p_write_block(zero_state *s, zero_group *g, const void *src)
{
	uint64_t t, n = up(block_bytes(g), PSWAP_ALIGN);
	int r;
	accel_view sv = shard_view(g->dtype, g->device, g->device_index, (void *)src, g->block);
	accel_view h = shard_view(g->dtype, ACCEL_DEVICE_CPU, 0, s->pstage, g->block);
	if ((r = s->host->op_copy(s->h, &h, &sv)))
		return r;
	if ((r = zero_swap_write(s->pswap, g->pswap_off, s->pstage, n, &t)))
		return r;
	return zero_swap_wait(s->pswap, t);
}

/* Every group's block in one transient buffer (read from the swap when
 * `read`, else zeros), the pieces' working weights pointing into it. */
int zero3p_shards_in(zero_state *s, int read)
{
	uint64_t largest, bytes = zero3p_layout(s, &largest);
	uint64_t t;
	int r;
	s->pshards_bytes = bytes + PSWAP_ALIGN;
	if ((r = zero_alloc(s, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, s->pshards_bytes,
	                    ACCEL_MEMF_ZERO, &s->pshards_raw)))
		return r;
	char *base = (char *)(uintptr_t)up((uint64_t)(uintptr_t)s->pshards_raw, PSWAP_ALIGN);
	for (uint32_t i = 0; i < s->n_groups; i++)
		s->groups[i].shard_work = base + s->groups[i].pswap_off;
	if (read && bytes) {
		if ((r = zero_swap_read(s->pswap, 0, base, bytes, &t)) ||
		    (r = zero_swap_wait(s->pswap, t)))
			return r;
	}
	for (uint32_t k = 0; k < s->n_pieces; k++) {
		zero_group *g = &s->groups[s->piece_group[k]];
		s->pieces[k].work = shard_at(g->shard_work, g->dtype, s->piece_boff[k]);
	}
	return s->store ? zero_store_set_pieces(s->store, s->pieces, s->n_pieces) : ACCEL_OK;
}

/* Write every block back, free the transient buffer. */
int zero3p_shards_out(zero_state *s)
{
	uint64_t largest, bytes = zero3p_layout(s, &largest), t;
	int r = ACCEL_OK;
	if (bytes && s->n_groups && s->groups[0].shard_work)
		r = zero_swap_write(s->pswap, 0, s->groups[0].shard_work, bytes, &t);
	if (!r && bytes && s->n_groups && s->groups[0].shard_work)
		r = zero_swap_wait(s->pswap, t);
	for (uint32_t i = 0; i < s->n_groups; i++)
		s->groups[i].shard_work = NULL;
	zero_free(s, s->pshards_raw, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, s->pshards_bytes);
	s->pshards_raw = NULL;
	return r;
}
