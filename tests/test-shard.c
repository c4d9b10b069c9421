/* SPDX-License-Identifier: MIT */
/* tests/test-shard.c: plugins/shard's partition arithmetic (padding, blocks,
 * pieces, groups), table-driven, plus an exhaustive check that for every
 * small layout the pieces of all ranks cover every element exactly once. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shard.h"

static const struct {
	uint64_t numel;
	uint32_t world, align;
	uint64_t want;
} pad_cases[] = {
	{0, 4, 16, 0},       {1, 1, 1, 1},        {1, 4, 1, 4},       {5, 4, 1, 8},
	{8, 4, 1, 8},        {9, 3, 2, 12},       {100, 3, 16, 144},  {48, 3, 16, 48},
	{7, 0, 0, 7},        {UINT64_MAX, 2, 1, 0},
};

START_TEST(test_padded)
{
	uint64_t got = shard_padded(pad_cases[_i].numel, pad_cases[_i].world, pad_cases[_i].align);
	ck_assert_msg(got == pad_cases[_i].want, "shard_padded(%llu, %u, %u) = %llu, want %llu",
	              (unsigned long long)pad_cases[_i].numel, pad_cases[_i].world,
	              pad_cases[_i].align, (unsigned long long)got,
	              (unsigned long long)pad_cases[_i].want);
}
END_TEST

START_TEST(test_block)
{
	uint64_t lo, n;
	shard_block(144, 3, 0, &lo, &n);
	ck_assert_uint_eq(lo, 0);
	ck_assert_uint_eq(n, 48);
	shard_block(144, 3, 2, &lo, &n);
	ck_assert_uint_eq(lo, 96);
	ck_assert_uint_eq(n, 48);
	shard_block(144, 3, 3, &lo, &n);   /* not a rank: empty, at the end */
	ck_assert_uint_eq(lo, 144);
	ck_assert_uint_eq(n, 0);
}
END_TEST

/* 3 items of 10, 5, 20 elements (at 0, 10, 15; 35 in all) padded for 4
 * ranks to 36: blocks of 9. */
static const struct {
	uint32_t rank;
	uint32_t n;
	shard_piece want[3];
} piece_cases[] = {
	{0, 1, {{0, 0, 0, 0, 9}}},
	{1, 3, {{0, 0, 9, 0, 1}, {1, 0, 0, 1, 5}, {2, 0, 0, 6, 3}}},
	{2, 1, {{2, 0, 3, 0, 9}}},
	{3, 1, {{2, 0, 12, 0, 8}}},   /* the last element of the block is padding */
};

START_TEST(test_pieces)
{
	const uint64_t numel[3] = {10, 5, 20};
	uint64_t at[3], lo, len;
	shard_piece out[3];
	ck_assert_uint_eq(shard_offsets(numel, 3, at), 35);
	ck_assert_uint_eq(at[2], 15);
	uint64_t padded = shard_padded(35, 4, 1);
	ck_assert_uint_eq(padded, 36);
	shard_block(padded, 4, piece_cases[_i].rank, &lo, &len);
	uint32_t n = shard_pieces(at, numel, 3, lo, len, out);
	ck_assert_uint_eq(n, piece_cases[_i].n);
	for (uint32_t k = 0; k < n; k++) {
		const shard_piece *w = &piece_cases[_i].want[k];
		ck_assert_uint_eq(out[k].item, w->item);
		ck_assert_uint_eq(out[k].item_offset, w->item_offset);
		ck_assert_uint_eq(out[k].block_offset, w->block_offset);
		ck_assert_uint_eq(out[k].numel, w->numel);
	}
}
END_TEST

/* Every layout of up to 4 items of 0..4 elements, worlds 1..5, alignments
 * 1, 2, 4: over all ranks every element of every item is in exactly one
 * piece, at the flat position the piece claims. */
START_TEST(test_cover)
{
	for (uint32_t n = 1; n <= 4; n++)
		for (uint32_t code = 0; code < 5u * 5 * 5 * 5; code++) {
			uint64_t numel[4], at[4];
			uint32_t c = code;
			for (uint32_t i = 0; i < n; i++, c /= 5)
				numel[i] = c % 5;
			if (n < 4 && c)
				continue;   /* each layout once */
			uint64_t total = shard_offsets(numel, n, at);
			for (uint32_t w = 1; w <= 5; w++)
				for (uint32_t al = 1; al <= 4; al *= 2) {
					uint64_t padded = shard_padded(total, w, al);
					ck_assert(padded >= total && padded % ((uint64_t)w * al) == 0);
					ck_assert(padded - total < (uint64_t)w * al);
					unsigned char seen[4][5];
					memset(seen, 0, sizeof(seen));
					for (uint32_t r = 0; r < w; r++) {
						uint64_t lo, len;
						shard_piece out[4];
						shard_block(padded, w, r, &lo, &len);
						ck_assert_uint_eq(len * w, padded);
						uint32_t k = shard_pieces(at, numel, n, lo, len, out);
						for (uint32_t j = 0; j < k; j++) {
							ck_assert(out[j].block_offset + out[j].numel <= len);
							ck_assert_uint_eq(lo + out[j].block_offset,
							                  at[out[j].item] + out[j].item_offset);
							for (uint64_t e = 0; e < out[j].numel; e++)
								seen[out[j].item][out[j].item_offset + e]++;
						}
					}
					for (uint32_t i = 0; i < n; i++)
						for (uint64_t e = 0; e < numel[i]; e++)
							ck_assert_msg(seen[i][e] == 1, "item %u element %llu seen %u "
							              "times (world %u align %u)", i,
							              (unsigned long long)e, seen[i][e], w, al);
				}
		}
}
END_TEST

static const struct {
	uint64_t target;
	uint32_t n_groups;
	uint32_t first[6];
} group_cases[] = {
	{0, 5, {0, 1, 2, 3, 4, 5}},     /* one unit per group (stage 3)          */
	{1, 5, {0, 1, 2, 3, 4, 5}},
	{150, 3, {0, 2, 4, 5}},         /* 100+100 | 50+200 | 10                 */
	{300, 2, {0, 4, 5}},            /* 100+100+50+200 | 10 (last, below)     */
	{10000, 1, {0, 5}},             /* everything in one group               */
};

START_TEST(test_groups)
{
	const uint64_t units[5] = {100, 100, 50, 200, 10};
	uint32_t first[6];
	uint32_t g = shard_cut_groups(units, 5, group_cases[_i].target, first);
	ck_assert_uint_eq(g, group_cases[_i].n_groups);
	for (uint32_t k = 0; k <= g; k++)
		ck_assert_uint_eq(first[k], group_cases[_i].first[k]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shard");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_padded, 0, (int)(sizeof(pad_cases) / sizeof(pad_cases[0])));
	tcase_add_test(tc, test_block);
	tcase_add_loop_test(tc, test_pieces, 0, (int)(sizeof(piece_cases) / sizeof(piece_cases[0])));
	tcase_add_test(tc, test_cover);
	tcase_add_loop_test(tc, test_groups, 0, (int)(sizeof(group_cases) / sizeof(group_cases[0])));
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
