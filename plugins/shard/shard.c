/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard.c: flat, padded, equal-block partitions (shard.h). */
#include "shard.h"

uint64_t shard_padded(uint64_t numel, uint32_t world, uint32_t align)
{
	uint64_t m = (uint64_t)(world ? world : 1) * (align ? align : 1);
	if (!numel)
		return 0;
	uint64_t k = numel / m + (numel % m != 0);
	if (k > UINT64_MAX / m)
		return 0;
	return k * m;
}

void shard_block(uint64_t padded, uint32_t world, uint32_t rank, uint64_t *ret_lo,
                 uint64_t *ret_n)
{
	uint64_t w = world ? world : 1, b = padded / w;
	*ret_lo = rank < w ? b * rank : padded;
	*ret_n = rank < w ? b : 0;
}

uint64_t shard_offsets(const uint64_t *numel, uint32_t n, uint64_t *at)
{
	uint64_t t = 0;
	for (uint32_t i = 0; i < n; i++) {
		at[i] = t;
		t += numel[i];
	}
	return t;
}

uint32_t shard_pieces(const uint64_t *at, const uint64_t *numel, uint32_t n, uint64_t lo,
                      uint64_t len, shard_piece *out)
{
	uint64_t hi = lo + len;
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t a = at[i], b = at[i] + numel[i];
		uint64_t s = a > lo ? a : lo, e = b < hi ? b : hi;
		if (s >= e)
			continue;
		out[k].item = i;
		out[k].reserved = 0;
		out[k].item_offset = s - a;
		out[k].block_offset = s - lo;
		out[k].numel = e - s;
		k++;
	}
	return k;
}

uint32_t shard_cut_groups(const uint64_t *unit_numel, uint32_t n_units, uint64_t target,
                          uint32_t *group_first)
{
	uint32_t g = 0;
	uint64_t have = 0;
	for (uint32_t u = 0; u < n_units; u++) {
		if (have == 0)
			group_first[g] = u;
		have += unit_numel[u];
		if (have >= target || target == 0) {
			g++;
			have = 0;
		}
	}
	if (have)
		g++;
	group_first[g] = n_units;
	return g;
}
