/* SPDX-License-Identifier: MIT */
/* plugins/scaler/scaler.c: the fp16 loss scaler (ACCEL_ROLE_LOSS_SCALER,
 * config section `scaler`), torch.cuda.amp.GradScaler's semantics with
 * DeepSpeed's hysteresis and floor (docs/scaler.md).
 *
 * The core does what GradScaler.unscale_ does: it folds 1/scale into the
 * gradient factor every strategy's optimizer applies, and counts the
 * non-finite gradient elements over all ranks (found_inf, agreed because
 * the count is global).  So this plugin only says the scale (loss_scale),
 * skips an overflowing step (pre_step) and updates the scale (post_step,
 * scaler_rule.c).  Its state is three numbers, equal on every rank: one
 * tensor written by rank 0, so a run resumes at any world size. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/plugin.h"
#include "scaler.h"

#define STATE_TENSOR "scaler/state"

static const accel_param_schema_v1 scaler_params[] = {
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_BOOL,
		.key = "enabled",
		.default_json = "true",
		.min = 1, .max = 0,
		.help = "false: a pass-through, as torch's GradScaler(enabled=False): the loss "
		        "scale is 1 and no step is skipped, even when gradients are non-finite.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_DOUBLE,
		.key = "init_scale",
		.default_json = "65536",
		.min = 0, .max = 3.4028234663852886e38,
		.help = "The loss scale of the first step (torch GradScaler's init_scale; DeepSpeed's "
		        "2^initial_scale_power); with dynamic false, the scale of every step.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_DOUBLE,
		.key = "growth_factor",
		.default_json = "2.0",
		.min = 1, .max = 1e6,
		.help = "Factor (> 1) the scale grows by after growth_interval steps without "
		        "non-finite gradients (torch GradScaler's growth_factor).",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_DOUBLE,
		.key = "backoff_factor",
		.default_json = "0.5",
		.min = 0, .max = 1,
		.help = "Factor in (0, 1) the scale shrinks by on a step with non-finite gradients "
		        "(torch GradScaler's backoff_factor).",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_INT,
		.key = "growth_interval",
		.default_json = "2000",
		.min = 1, .max = 2147483647,
		.help = "Consecutive steps without non-finite gradients before the scale grows "
		        "(torch GradScaler's growth_interval; DeepSpeed's loss_scale_window).",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_INT,
		.key = "hysteresis",
		.default_json = "1",
		.min = 1, .max = 2147483647,
		.help = "Overflowing steps tolerated before the scale backs off (DeepSpeed's "
		        "hysteresis; 1, the default, backs off on the first as torch does). "
		        "Every overflowing step is skipped.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_BOOL,
		.key = "consecutive_hysteresis",
		.default_json = "false",
		.min = 1, .max = 0,
		.help = "true: hysteresis is refilled after every step without overflow; false: "
		        "only when the scale grows (DeepSpeed's consecutive_hysteresis).",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_DOUBLE,
		.key = "min_loss_scale",
		.default_json = "0",
		.min = 0, .max = 3.4028234663852886e38,
		.help = "Floor of the back-off (DeepSpeed's min_loss_scale); 0, the default, is "
		        "no floor, as torch.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_BOOL,
		.key = "dynamic",
		.default_json = "true",
		.min = 1, .max = 0,
		.help = "false: a static scale, init_scale on every step (DeepSpeed's loss_scale > "
		        "0); steps with non-finite gradients are still skipped.",
	},
};

static const accel_plugin_desc_v1 scaler_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_LOSS_SCALER,
	.name = "scaler",
	.version = "1.0.0",
	.summary = "fp16 loss scaling: torch GradScaler's dynamic scale, skips overflowing steps",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_CHECKPOINT,
	.requires = 0,
	.min_cuda_cc = 0,
	.state_version = 1,     /* 1: tensor scaler/state, f64 [scale, tracker, hysteresis] */
	.config_section = "scaler",
	.params = scaler_params,
	.n_params = sizeof(scaler_params) / sizeof(scaler_params[0]),
};

typedef struct scaler_state {
	const accel_host_v1 *host;
	accel_host *h;
	accel_world_v1 world;
	scaler_cfg cfg;
	scaler_rule_state st;
} scaler_state;

static int get_bool(scaler_state *s, const char *key, int32_t *v)
{
	int r = s->host->cfg_bool(s->h, key, v);
	return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
}

static int get_double(scaler_state *s, const char *key, double *v)
{
	int r = s->host->cfg_double(s->h, key, v);
	return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
}

static int get_int(scaler_state *s, const char *key, int64_t *v)
{
	int r = s->host->cfg_int(s->h, key, v);
	return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
}

static int scaler_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	scaler_state *s;
	char why[256];
	int r;

	if (!ACCEL_HOST_HAS(host, ckpt_read_tensor))
		return host->error(h, ACCEL_ERR_ABI, "scaler: the host table is older than this "
		                   "plugin (it needs checkpoint tensors, ABI 1.4)");
	s = calloc(1, sizeof(*s));
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "scaler: out of memory");
	s->host = host;
	s->h = h;
	s->world.struct_size = sizeof(s->world);
	s->cfg = (scaler_cfg){
		.enabled = 1, .dynamic = 1, .consecutive_hysteresis = 0,
		.init_scale = 65536, .growth_factor = 2, .backoff_factor = 0.5,
		.min_loss_scale = 0, .growth_interval = 2000, .hysteresis = 1,
	};
	if ((r = host->world(h, &s->world)) ||
	    (r = get_bool(s, "enabled", &s->cfg.enabled)) ||
	    (r = get_bool(s, "dynamic", &s->cfg.dynamic)) ||
	    (r = get_bool(s, "consecutive_hysteresis", &s->cfg.consecutive_hysteresis)) ||
	    (r = get_double(s, "init_scale", &s->cfg.init_scale)) ||
	    (r = get_double(s, "growth_factor", &s->cfg.growth_factor)) ||
	    (r = get_double(s, "backoff_factor", &s->cfg.backoff_factor)) ||
	    (r = get_double(s, "min_loss_scale", &s->cfg.min_loss_scale)) ||
	    (r = get_int(s, "growth_interval", &s->cfg.growth_interval)) ||
	    (r = get_int(s, "hysteresis", &s->cfg.hysteresis)))
		goto fail;
	if (*scaler_cfg_check(&s->cfg, why, sizeof(why))) {
		r = host->error(h, ACCEL_ERR_CONFIG, "%s", why);
		goto fail;
	}
	s->st = scaler_rule_initial(&s->cfg);
	if (s->world.rank == 0)
		host->log(h, ACCEL_LOG_DEBUG, "scaler: %s, init_scale %g, growth_factor %g, "
		          "backoff_factor %g, growth_interval %" PRId64 ", hysteresis %" PRId64
		          ", min_loss_scale %g",
		          !s->cfg.enabled ? "disabled (scale 1, no skips)"
		          : s->cfg.dynamic ? "dynamic" : "static",
		          s->cfg.init_scale, s->cfg.growth_factor, s->cfg.backoff_factor,
		          s->cfg.growth_interval, s->cfg.hysteresis, s->cfg.min_loss_scale);
	*ret_state = s;
	return ACCEL_OK;

fail:
	free(s);
	return r;
}

static void scaler_fini(void *state)
{
	free(state);
}

static int scaler_loss_scale(void *state, double *ret_scale)
{
	scaler_state *s = state;
	*ret_scale = s->cfg.enabled ? (double)s->st.scale : 1.0;
	return ACCEL_OK;
}

/* info->nonfinite is the count over every rank (the strategy's
 * grad_stats), so every rank decides the same. */
static int scaler_pre_step(void *state, accel_step_info_v1 *info)
{
	scaler_state *s = state;
	if (s->cfg.enabled && info->nonfinite > 0)
		info->skip = 1;
	return ACCEL_OK;
}

static int scaler_post_step(void *state, const accel_step_info_v1 *info)
{
	scaler_state *s = state;
	int found_inf = info->nonfinite > 0;
	float before = s->st.scale;
	if (!s->cfg.enabled)
		return ACCEL_OK;
	if (scaler_rule_update(&s->cfg, &s->st, found_inf))
		return s->host->error(s->h, ACCEL_ERR_STATE, "scaler: after %" PRIu64 " applied "
		                      "steps the loss scale %g would back off to 0 (%" PRIu64
		                      " non-finite gradient elements): the gradients are non-finite "
		                      "at any scale; look for a NaN or Inf in the model, the data or "
		                      "the loss, or set scaler.min_loss_scale", info->step,
		                      (double)before, info->nonfinite);
	if (found_inf && s->world.rank == 0)
		s->host->log(s->h, ACCEL_LOG_INFO, "step skipped after %" PRIu64 " applied steps (%"
		             PRIu64 " non-finite gradient elements); loss scale %g -> %g",
		             info->step, info->nonfinite, (double)before, (double)s->st.scale);
	return ACCEL_OK;
}

static int scaler_save_state(void *state, accel_ckpt_writer *w)
{
	scaler_state *s = state;
	static const uint64_t shape[1] = {SCALER_STATE_LEN};
	double v[SCALER_STATE_LEN] = {(double)s->st.scale, (double)s->st.growth_tracker,
	                              (double)s->st.hysteresis_left};
	/* equal on every rank: rank 0 writes the whole tensor */
	if (s->world.rank != 0)
		return ACCEL_OK;
	accel_ckpt_slice_v1 sl = {
		.struct_size = sizeof(sl),
		.dtype = ACCEL_DTYPE_F64,
		.ndim = 1,
		.flags = 0,
		.name = STATE_TENSOR,
		.shape = shape,
		.offset = 0,
		.count = SCALER_STATE_LEN,
		.data = v,
	};
	return s->host->ckpt_write_tensor(s->h, w, &sl);
}

static int scaler_load_state(void *state, accel_ckpt_reader *r, uint32_t state_version)
{
	scaler_state *s = state;
	accel_ckpt_tensor_info_v1 ti = {.struct_size = sizeof(ti)};
	double v[SCALER_STATE_LEN];
	int rc;

	if (state_version == 0) {   /* switched on at this resume: start fresh */
		s->host->log(s->h, ACCEL_LOG_INFO, "scaler: the checkpoint holds no scaler state "
		             "(saved without fp16): starting from init_scale %g", (double)s->st.scale);
		return ACCEL_OK;
	}
	if (state_version != scaler_desc.state_version)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint holds "
		                      "scaler state version %u; this scaler reads version %u",
		                      state_version, scaler_desc.state_version);
	rc = s->host->ckpt_tensor_info(s->h, r, STATE_TENSOR, &ti);
	if (rc == ACCEL_ERR_NOT_FOUND)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint has no "
		                      "tensor %s (saved by another scaler?)", STATE_TENSOR);
	if (rc)
		return rc;
	if (ti.dtype != ACCEL_DTYPE_F64 || ti.numel != SCALER_STATE_LEN)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s has "
		                      "dtype %s and %" PRIu64 " elements; expected f64 with %d "
		                      "(scale, growth tracker, hysteresis left)", STATE_TENSOR,
		                      accel_abi_dtype_name(ti.dtype), ti.numel, SCALER_STATE_LEN);
	if ((rc = s->host->ckpt_read_tensor(s->h, r, STATE_TENSOR, ACCEL_DTYPE_F64, 0,
	                                    SCALER_STATE_LEN, v)))
		return rc;
	float scale = (float)v[0];
	if (!(scale > 0) || !isfinite(scale) || !(v[1] >= 0) || v[1] != floor(v[1]) ||
	    !(v[2] >= 1) || v[2] != floor(v[2]) || v[1] > 9e15 || v[2] > 9e15)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s "
		                      "holds scale %g, growth tracker %g, hysteresis left %g; expected "
		                      "a finite scale > 0 and whole counts (hysteresis >= 1)",
		                      STATE_TENSOR, v[0], v[1], v[2]);
	if (!s->cfg.dynamic) {
		/* a static scale is the config's, whatever was saved */
		if (scale != s->st.scale && s->world.rank == 0)
			s->host->log(s->h, ACCEL_LOG_INFO, "scaler: the checkpoint's loss scale %g is "
			             "not used: scaler.dynamic is false, the scale stays "
			             "scaler.init_scale = %g", (double)scale, (double)s->st.scale);
		return ACCEL_OK;
	}
	s->st.scale = scale;
	s->st.growth_tracker = (int64_t)v[1];
	/* the hysteresis setting may have changed since: never above it */
	s->st.hysteresis_left = (int64_t)v[2] < s->cfg.hysteresis ? (int64_t)v[2]
	                                                          : s->cfg.hysteresis;
	return ACCEL_OK;
}

static const accel_plugin_v1 scaler_plugin = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &scaler_desc,
	.init = scaler_init,
	.fini = scaler_fini,
	.save_state = scaler_save_state,
	.load_state = scaler_load_state,
	.loss_scale = scaler_loss_scale,
	.pre_step = scaler_pre_step,
	.post_step = scaler_post_step,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "scaler", ckpt_read_tensor))
		return NULL;
	return &scaler_plugin;
}
