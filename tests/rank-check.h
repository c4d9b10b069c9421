/* SPDX-License-Identifier: MIT */
/* tests/rank-check.h: CHECK() for test programs that run as several ranks
 * and are not Check suites (a forked child of an MPI or CUDA process cannot
 * use MPI or the GPU).  A failed check prints "[rank R] FAIL file:line:
 * message" and counts itself; the program defines `g_rank` and
 * `g_failures` and makes its exit status from the count on every rank. */
#ifndef ACCEL_TESTS_RANK_CHECK_H
#define ACCEL_TESTS_RANK_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                                     \
			fputc('\n', stderr);                                              \
			g_failures++;                                                     \
		}                                                                         \
	} while (0)

#endif
