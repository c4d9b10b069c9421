/* SPDX-License-Identifier: MIT */
/* core/ckpt_params.c: visiting every parameter's working weights for the
 * paths that read or write them whole (param/<name> of accel_save_state and
 * accel_load_state, accel_save_model).  A strategy that shards parameters
 * (ACCEL_CAP_SHARD_PARAMS in its instance caps) holds them whole only
 * inside a unit's hooks; here it materialises them unit by unit through
 * its materialize slot (ABI minor 6), which is collective: every rank runs
 * the same walk, also the ranks that read or write nothing. */
#include <stdio.h>
#include <string.h>

#include "ckpt_impl.h"
#include "loader.h"
#include "train.h"

int accelp_ckpt_params_sharded(const accel_ctx *ctx)
{
	return ctx->n_active && ctx->active[0].inited &&
	       (ctx->active[0].caps & ACCEL_CAP_SHARD_PARAMS);
}

int accelp_ckpt_params_usable(accel_ctx *ctx, const char *who)
{
	if (!accelp_ckpt_params_sharded(ctx) || ctx->active[0].vt->materialize)
		return ACCEL_OK;
	const accel_active *s = &ctx->active[0];
	return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED, "%s: strategy '%s' (%s) shards "
	                     "parameters (ACCEL_CAP_SHARD_PARAMS) but has no materialize slot "
	                     "(ABI 1.6): its working weights cannot be %s; update the plugin or "
	                     "use a strategy that keeps whole parameters", who, s->host.name,
	                     s->module->path, strstr(who, "load") ? "loaded" : "saved");
}

int accelp_ckpt_each_param(accel_ctx *ctx, const char *who, uint32_t release_flags,
                           accelp_ckpt_param_fn fn, void *arg)
{
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	int rc = ACCEL_OK;
	if (!m)
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE, "%s: no prepared model", who);
	if (!accelp_ckpt_params_sharded(ctx)) {
		for (uint32_t i = 0; !rc && fn && i < m->n_params; i++) {
			accel_view data;
			if (!(rc = accelp_train_param_view(ctx->train, i, &data, NULL)))
				rc = fn(ctx, i, &data, 0, arg);
		}
		return rc;
	}
	accel_active *s = &ctx->active[0];
	if ((rc = accelp_ckpt_params_usable(ctx, who)))
		return rc;
	/* After a failure of fn the walk goes on without it: the other ranks
	 * are in the same gathers. */
	for (uint32_t u = 0; u < m->n_units; u++) {
		const accel_unit_info_v1 *unit = ACCEL_MODEL_UNIT(m, u);
		int r = s->vt->materialize(s->state, u, ACCEL_MATERIALIZE_GATHER);
		if (r) {
			if (!ctx->err.code)
				accelp_err_set(&ctx->err, r, "%s: strategy '%s': materialize(unit %u '%s', "
				              "GATHER) failed (%s)", who, s->host.name, u, unit->name,
				              accel_status_str(r));
			return ctx->err.code;
		}
		for (uint32_t i = unit->first_param; !rc && fn && i < unit->first_param + unit->n_params;
		     i++) {
			accel_view data;
			if ((rc = accelp_train_param_view(ctx->train, i, &data, NULL)))
				break;
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
			if (p->numel && (!data.data || data.numel != p->numel)) {
				rc = accelp_err_set(&ctx->err, ACCEL_ERR_PLUGIN, "%s: strategy '%s' "
				                    "materialized unit %u '%s' but parameter '%s' is %s "
				                    "(materialize(GATHER) must param_bind every parameter of "
				                    "the unit whole)", who, s->host.name, u, unit->name,
				                    p->name, data.data ? "bound partly" : "not bound");
				break;
			}
			rc = fn(ctx, i, &data, 1, arg);
		}
		/* WRITEBACK only of values the core wrote */
		uint32_t fl = ACCEL_MATERIALIZE_RELEASE | (rc ? 0 : release_flags);
		r = s->vt->materialize(s->state, u, fl);
		if (r) {
			if (!ctx->err.code)
				accelp_err_set(&ctx->err, r, "%s: strategy '%s': materialize(unit %u '%s', "
				              "RELEASE%s) failed (%s)", who, s->host.name, u, unit->name,
				              (fl & ACCEL_MATERIALIZE_WRITEBACK) ? "|WRITEBACK" : "",
				              accel_status_str(r));
			return ctx->err.code;
		}
	}
	return rc;
}
