/* SPDX-License-Identifier: MIT */
/*
 * plugins/fp8/fp8_recipe.h: delayed scaling, TransformerEngine's rule
 * (transformer_engine/pytorch/fp8.py: _compute_amax_and_update_history,
 * _default_sf_compute), on host memory.
 *
 * A history is `len` rows of `n` amaxes (one per operand: x, w, dy of a
 * linear layer).  Row 0 is the current step's: the GEMMs of the step write
 * their amax there (max over the micro-steps).  At the end of the step,
 * fp8_recipe_update():
 *   1. amax[j] = max over the rows of column j ("max") or row 0 ("most_recent");
 *   2. when `update_scale`: scale[j] = (fp8_max[j] / amax[j]) / 2^margin,
 *      unless amax[j] is 0 or not finite (the scale is then left as is),
 *      rounded down to the f32 below when the f32 product would exceed the
 *      bound, so that scale[j] * amax[j] <= fp8_max[j] * 2^-margin holds
 *      exactly;
 *   3. the history rolls one row up (torch.roll(h, -1, 0): row 0 moves to
 *      the last row, the oldest row falls off) and row 0 is zeroed.
 */
#ifndef ACCEL_FP8_RECIPE_H
#define ACCEL_FP8_RECIPE_H

#include <stdint.h>

#define FP8_ALGO_MAX         0
#define FP8_ALGO_MOST_RECENT 1

/* history: len * n floats, row-major; fmax: n maxima; scale: n, in/out;
 * ret_amax (optional): n, the amax the scale was computed from. */
void fp8_recipe_update(float *history, uint32_t len, uint32_t n, uint32_t algo,
                       const float *fmax, int margin, int update_scale, float *scale,
                       float *ret_amax);

/* The scale rule alone (step 2 for one value). */
float fp8_recipe_scale(float amax, float fmax, int margin, float old_scale);

#endif
