/* SPDX-License-Identifier: MIT */
/* plugins/shard/shard.h: the arithmetic of flat, padded, equal-block
 * partitions, shared by the plugins that shard (zero; fsdp later).  A static
 * library with no state and no host calls, so it is unit-tested on its own
 * (tests/test-shard.c).
 *
 * A run of items (parameters) of n_i elements each is laid out back to back
 * in a flat space: item i occupies [at_i, at_i + n_i), at_0 = 0.  The space
 * is padded to a multiple of world x align elements and cut into `world`
 * equal blocks; rank r owns block r.  A block intersects some items: each
 * intersection is a `piece` (one item's run inside one block).  Items are
 * grouped into runs of consecutive units so that every group is such a
 * space of its own (shard_cut_groups). */
#ifndef ACCEL_SHARD_H
#define ACCEL_SHARD_H

#include <stdint.h>

typedef struct shard_piece {
	uint32_t item;          /* index of the item (in the arrays given)        */
	uint32_t reserved;
	uint64_t item_offset;   /* first element inside the item                  */
	uint64_t block_offset;  /* where the run starts inside the block          */
	uint64_t numel;         /* elements in the run                            */
} shard_piece;

/* `numel` rounded up to a multiple of world x align (0 stays 0).  world and
 * align of 0 count as 1.  Returns 0 when the result would overflow. */
uint64_t shard_padded(uint64_t numel, uint32_t world, uint32_t align);

/* Block `rank` of a padded space of `padded` elements (a multiple of world):
 * elements [*ret_lo, *ret_lo + *ret_n). */
void shard_block(uint64_t padded, uint32_t world, uint32_t rank, uint64_t *ret_lo,
                 uint64_t *ret_n);

/* Offsets of n items of numel[] laid out back to back: at[i]; returns the
 * total. */
uint64_t shard_offsets(const uint64_t *numel, uint32_t n, uint64_t *at);

/* The pieces of items (offsets at[], sizes numel[], n of them, sorted by
 * offset) inside [lo, lo + len): written to out[] (room for n), in item
 * order, empty intersections left out.  Returns the number written. */
uint32_t shard_pieces(const uint64_t *at, const uint64_t *numel, uint32_t n, uint64_t lo,
                      uint64_t len, shard_piece *out);

/* Cut n_units consecutive units (unit_numel[]) into groups of consecutive
 * units: a group closes once it holds at least `target` elements (a unit is
 * never split; target 0: one unit per group).  group_first[g] is the first
 * unit of group g (room for n_units + 1: group_first[n_groups] ==
 * n_units).  Returns the number of groups. */
uint32_t shard_cut_groups(const uint64_t *unit_numel, uint32_t n_units, uint64_t target,
                          uint32_t *group_first);

#endif
