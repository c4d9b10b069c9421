/* SPDX-License-Identifier: MIT */
/* plugins/scaler/scaler_rule.c: the dynamic loss scale's update rule.
 *
 * torch.cuda.amp.GradScaler keeps its scale as an f32 tensor and updates it
 * with _amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu and its
 * CPU twin):
 *     found_inf:  scale = f32(scale * backoff_factor); tracker = 0
 *     otherwise:  tracker + 1 == growth_interval ?
 *                     (new = f32(scale * growth_factor), taken only when
 *                      finite; tracker = 0) : tracker += 1
 * DeepSpeed's DynamicLossScaler adds two knobs, both neutral at the values
 * this plugin defaults to: `hysteresis` (overflows tolerated before a
 * back-off; 1 = back off on the first, torch's rule) and `min_loss_scale`
 * (a floor for the back-off; 0 = none, torch's rule).  Like DeepSpeed, an
 * overflow that hysteresis absorbs still restarts the growth count, and
 * hysteresis is refilled when the scale grows (or, with
 * consecutive_hysteresis, on every good step). */
#include <math.h>
#include <stdio.h>

#include "scaler.h"

scaler_rule_state scaler_rule_initial(const scaler_cfg *c)
{
	return (scaler_rule_state){
		.scale = (float)c->init_scale,
		.growth_tracker = 0,
		.hysteresis_left = c->hysteresis,
	};
}

int scaler_rule_update(const scaler_cfg *c, scaler_rule_state *st, int found_inf)
{
	if (!c->enabled || !c->dynamic)
		return 0;
	if (found_inf) {
		st->growth_tracker = 0;
		if (st->hysteresis_left > 1) {
			st->hysteresis_left--;
			return 0;
		}
		double next = (double)st->scale * c->backoff_factor;
		if (next < c->min_loss_scale)
			next = c->min_loss_scale;
		float f = (float)next;
		if (!(f > 0))
			return -1;
		st->scale = f;
		return 0;
	}
	if (c->consecutive_hysteresis)
		st->hysteresis_left = c->hysteresis;
	/* torch compares with ==; >= differs only for a tracker loaded from a
	 * run with a longer interval, which would otherwise never grow again */
	if (st->growth_tracker + 1 >= c->growth_interval) {
		float f = (float)((double)st->scale * c->growth_factor);
		if (isfinite(f))
			st->scale = f;
		st->growth_tracker = 0;
		st->hysteresis_left = c->hysteresis;
	} else {
		st->growth_tracker++;
	}
	return 0;
}

const char *scaler_cfg_check(const scaler_cfg *c, char *buf, uint32_t cap)
{
	float init = (float)c->init_scale;
	buf[0] = 0;
	if (!(c->init_scale > 0) || !isfinite(init) || !(init > 0))
		snprintf(buf, cap, "scaler.init_scale is %g; it must be > 0 and representable "
		         "as a finite f32 (torch keeps the scale as f32; the default is 65536)",
		         c->init_scale);
	else if (!(c->growth_factor > 1))
		snprintf(buf, cap, "scaler.growth_factor is %g; it must be > 1 (torch "
		         "GradScaler's rule; the default is 2)", c->growth_factor);
	else if (!(c->backoff_factor > 0 && c->backoff_factor < 1))
		snprintf(buf, cap, "scaler.backoff_factor is %g; it must be in (0, 1) (torch "
		         "GradScaler's rule; the default is 0.5)", c->backoff_factor);
	else if (c->growth_interval < 1)
		snprintf(buf, cap, "scaler.growth_interval is %lld; it must be >= 1",
		         (long long)c->growth_interval);
	else if (c->hysteresis < 1)
		snprintf(buf, cap, "scaler.hysteresis is %lld; it must be >= 1 (1: back off on "
		         "the first overflow)", (long long)c->hysteresis);
	else if (!(c->min_loss_scale >= 0))
		snprintf(buf, cap, "scaler.min_loss_scale is %g; it must be >= 0 (0: no floor)",
		         c->min_loss_scale);
	else if (c->dynamic && c->init_scale < c->min_loss_scale)
		snprintf(buf, cap, "scaler.init_scale (%g) is below scaler.min_loss_scale (%g): "
		         "raise init_scale or lower the floor", c->init_scale, c->min_loss_scale);
	return buf;
}
