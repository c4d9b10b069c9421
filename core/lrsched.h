/* SPDX-License-Identifier: MIT */
/* core/lrsched.h: learning-rate schedules (private side).
 *
 * The public API (accel_sched_*) and the formulas are in accel/accel.h;
 * docs/optim.md has the keys and defaults.  The training state uses
 * accelp_sched_new_from_config() once, then accel_sched_lr() per optimizer
 * step with the number of steps applied before it. */
#ifndef ACCEL_CORE_LRSCHED_H
#define ACCEL_CORE_LRSCHED_H

#include <stdint.h>

#include "accel/accel.h"
#include "config.h"
#include "error.h"

/* Check opts and make a schedule.  Messages name the member and value.
 * Returns ACCEL_OK, ACCEL_ERR_INVALID_ARG or ACCEL_ERR_NOMEM. */
int accelp_sched_create(const accel_sched_opts *opts, accel_sched **ret_sched, accel_err *err);

/* Read scheduler.type, scheduler.warmup_steps, scheduler.total_steps,
 * scheduler.min_lr and optimizer.params.lr from a resolved configuration.
 * Unset scheduler keys take the defaults (constant, 0, 0, 0.0); an unset
 * optimizer.params.lr is an error.  Messages name the key and where its
 * value came from.  Returns ACCEL_OK, ACCEL_ERR_CONFIG or ACCEL_ERR_NOMEM. */
int accelp_sched_new_from_config(const accel_config *cfg, accel_sched **ret_sched,
                                accel_err *err);

/* The options a schedule was made from (borrowed). */
const accel_sched_opts *accelp_sched_get_opts(const accel_sched *sched);

/* The multiplier of opts.lr at `step` (lr(step) / lr); NaN for NULL. */
double accelp_sched_factor(const accel_sched *sched, uint64_t step);

#endif
