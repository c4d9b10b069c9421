/* SPDX-License-Identifier: MIT */
/* core/sampler.h: the distributed sampler (private side).
 *
 * The public API (accel_sampler_*, accel_gather_for_metrics) is in
 * accel/accel.h; docs/data.md has the rules.  This header adds what the
 * core and the unit tests need beyond it: creation from fully resolved
 * options with messages in an accel_err, the epoch permutation itself, and
 * the batch layout as pure functions. */
#ifndef ACCEL_CORE_SAMPLER_H
#define ACCEL_CORE_SAMPLER_H

#include <stdint.h>

#include "accel/accel.h"
#include "error.h"

/* Create from options without AUTO values (rank, world_size, seed,
 * split_batches, even_batches all explicit).  ctx (optional) receives
 * later errors of the public calls and is kept borrowed.  Errors go to err.
 * Returns ACCEL_OK, ACCEL_ERR_INVALID_ARG or ACCEL_ERR_NOMEM. */
int accelp_sampler_create(accel_ctx *ctx, const accel_sampler_opts *opts,
                         accel_sampler **ret_sampler, accel_err *err);

/* Message of the most recent failed call on s ("" if none). Borrowed. */
const char *accelp_sampler_last_error(const accel_sampler *s);
/* The context is going away: forget it (the sampler stays usable). */
void accelp_sampler_detach(accel_sampler *s);

/* The epoch order: position `pos` (0..n-1) of epoch `epoch` holds sample
 * accelp_sampler_perm(s, epoch, pos).  A bijection of 0..n-1 for every
 * (seed, epoch); the identity when shuffle is 0. */
uint64_t accelp_sampler_perm(const accel_sampler *s, uint64_t epoch, uint64_t pos);

/* The same permutation without a sampler object: n elements, (seed, epoch). */
typedef struct accel_perm {
	uint64_t n;
	uint32_t half_bits;       /* the Feistel network works on 2*half_bits bits */
	uint32_t rounds;
	uint64_t keys[8];
} accel_perm;
void accelp_perm_init(accel_perm *p, uint64_t n, uint64_t seed, uint64_t epoch);
uint64_t accelp_perm_apply(const accel_perm *p, uint64_t pos);

/* Real samples rank `rank` gets in the step that starts at epoch position
 * `offset`: min(b, n - offset - rank*b), or 0 when that is not positive. */
uint64_t accelp_sampler_layout_valid(uint64_t n, uint64_t b, uint32_t rank, uint64_t offset);
/* Batches one rank gets in a whole epoch (len(dataloader)). */
uint64_t accelp_sampler_layout_num_batches(uint64_t n, uint64_t b, uint32_t rank,
                                          uint32_t world_size, int drop_last,
                                          int even_batches);

#endif
