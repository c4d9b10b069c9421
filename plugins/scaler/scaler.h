/* SPDX-License-Identifier: MIT */
/* plugins/scaler/scaler.h: the loss scaler's update rule (scaler_rule.c),
 * kept apart from the vtable (scaler.c) so it can be tested without a
 * host (docs/scaler.md). */
#ifndef ACCEL_PLUGIN_SCALER_H
#define ACCEL_PLUGIN_SCALER_H

#include <stdint.h>

/* The settings (config section `scaler`, docs/scaler.md). */
typedef struct scaler_cfg {
	int32_t enabled;                /* 0: pass-through (scale 1, never skips)    */
	int32_t dynamic;                /* 0: static scale init_scale (still skips)   */
	int32_t consecutive_hysteresis; /* DeepSpeed: refill hysteresis on every
	                                   good step (1) or only on growth (0)      */
	double init_scale;
	double growth_factor;
	double backoff_factor;
	double min_loss_scale;          /* 0: no floor (torch)                       */
	int64_t growth_interval;
	int64_t hysteresis;             /* overflows tolerated before a back-off     */
} scaler_cfg;

/* What a checkpoint holds (tensor scaler/state, f64 [3] in this order). */
typedef struct scaler_rule_state {
	float scale;                    /* torch keeps its scale as an f32 tensor    */
	int64_t growth_tracker;         /* good steps since the last growth/overflow */
	int64_t hysteresis_left;        /* overflows left before the next back-off   */
} scaler_rule_state;

#define SCALER_STATE_LEN 3

/* The state a run starts from. */
scaler_rule_state scaler_rule_initial(const scaler_cfg *c);

/* One step's update, after the step was applied or skipped: found_inf is
 * nonzero when some gradient element (any rank) was non-finite.  torch's
 * _amp_update_scale_ with DeepSpeed's hysteresis and floor on top.
 * Returns 0, or -1 when a back-off would make the scale 0 (it is then
 * left unchanged). */
int scaler_rule_update(const scaler_cfg *c, scaler_rule_state *st, int found_inf);

/* A settings error as text ("" when the settings are usable). */
const char *scaler_cfg_check(const scaler_cfg *c, char *buf, uint32_t cap);

#endif
