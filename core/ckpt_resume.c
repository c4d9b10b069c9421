/* SPDX-License-Identifier: MIT */
/* core/ckpt_resume.c: what a resumed job is told when it trains on with
 * other settings than the saving job (docs/checkpoints.md, "Resuming with
 * other settings"): the optimizer (its state is dropped, or the load is
 * refused), gradient_accumulation_steps and the learning-rate schedule
 * (a warning naming both values).  The saving job's settings are keys of
 * the manifest ("optimizer", "gradient_accumulation_steps",
 * "lr_schedule"); a checkpoint without them (an older accel) is compared
 * as before: by the tensors it holds. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_impl.h"
#include "log.h"
#include "train.h"

static const char *optim_type(accel_ctx *ctx)
{
	const char *type = "adamw";
	if (accel_config_string(ctx, "optimizer.type", &type) != ACCEL_OK || !type)
		type = "adamw";
	return type;
}

static double cfg_double(accel_ctx *ctx, const char *key)
{
	double v = 0;
	return accel_config_double(ctx, key, &v) == ACCEL_OK ? v : 0;
}

static json_int_t cfg_int(accel_ctx *ctx, const char *key, int64_t dflt)
{
	int64_t v = dflt;
	return accel_config_int(ctx, key, &v) == ACCEL_OK ? (json_int_t)v : (json_int_t)dflt;
}

json_t *accelp_ckpt_job_settings(accel_ctx *ctx)
{
	const char *type = optim_type(ctx), *sched = "constant";
	uint32_t ns = accelp_train_optim_state_count(ctx->train);
	json_t *states = json_array();
	for (uint32_t k = 0; states && k < ns && k < 2; k++)
		json_array_append_new(states, json_string(accel_ckpt_optim_state_name(type, ns, k)));
	if (accel_config_string(ctx, "scheduler.type", &sched) != ACCEL_OK || !sched)
		sched = "constant";
	return json_pack("{s:{s:s,s:o},s:I,s:{s:s,s:f,s:I,s:I,s:f}}", "optimizer", "type", type,
	                 "state", states, "gradient_accumulation_steps",
	                 cfg_int(ctx, "gradient_accumulation_steps", 1), "lr_schedule", "type",
	                 sched, "lr", cfg_double(ctx, "optimizer.params.lr"), "warmup_steps",
	                 cfg_int(ctx, "scheduler.warmup_steps", 0), "total_steps",
	                 cfg_int(ctx, "scheduler.total_steps", 0), "min_lr",
	                 cfg_double(ctx, "scheduler.min_lr"));
}

/* "adamw (state exp_avg, exp_avg_sq)" */
static void describe(json_t *o, char *buf, size_t cap)
{
	json_t *st = json_object_get(o, "state"), *e;
	size_t i, n = (size_t)snprintf(buf, cap, "'%s' (", json_string_value(json_object_get(o, "type")));
	if (!json_array_size(st))
		n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "no state");
	json_array_foreach(st, i, e)
		if (n < cap)
			n += (size_t)snprintf(buf + n, cap - n, i ? ", %s" : "state %s",
			                      json_string_value(e));
	if (n < cap)
		snprintf(buf + n, cap - n, ")");
}

static int has_state(json_t *st, const char *name)
{
	json_t *e;
	size_t i;
	json_array_foreach(st, i, e)
		if (json_is_string(e) && !strcmp(json_string_value(e), name))
			return 1;
	return 0;
}

int accelp_ckpt_check_resume(accel_ctx *ctx, const accelp_ckpt_manifest *m, const char **fresh,
                             int *ret_changed)
{
	json_t *root = m->root, *job = accelp_ckpt_job_settings(ctx);
	json_t *so = json_object_get(root, "optimizer"), *jo = json_object_get(job, "optimizer");
	int rc = ACCEL_OK, main = ctx->world.rank == 0;
	char a[256], b[256];
	*ret_changed = 0;
	if (!job)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	if (so && (!json_is_string(json_object_get(so, "type")) ||
	           !json_is_array(json_object_get(so, "state")))) {
		rc = accelp_ckpt_bad(ctx, "%s: optimizer: not {\"type\": string, \"state\": [names]}",
		                     m->path);
		goto out;
	}
	if (so && !json_equal(so, jo)) {
		int32_t allow = 0;
		describe(so, a, sizeof(a));
		describe(jo, b, sizeof(b));
		if (accel_config_bool(ctx, "checkpoint.allow_optimizer_change", &allow) != ACCEL_OK ||
		    !allow) {
			rc = accelp_ckpt_bad(ctx, "%s: saved with optimizer %s; this job's is %s: set "
			                     "checkpoint.allow_optimizer_change=true to resume with it "
			                     "(the saved optimizer state is dropped, the new one starts "
			                     "from zero)", m->path, a, b);
			goto out;
		}
		/* what the new optimizer keeps and the checkpoint lacks reads as zeros */
		json_t *sst = json_object_get(so, "state"), *jst = json_object_get(jo, "state"), *e;
		size_t i, nf = 0;
		char dropped[256] = "", fresh_list[256] = "";
		json_array_foreach(jst, i, e)
			if (!has_state(sst, json_string_value(e)) && nf < 2) {
				fresh[nf++] = accel_ckpt_optim_state_name(optim_type(ctx),
				                                          (uint32_t)json_array_size(jst), (uint32_t)i);
				snprintf(fresh_list + strlen(fresh_list), sizeof(fresh_list) - strlen(fresh_list),
				         "%s%s", *fresh_list ? ", " : "", json_string_value(e));
			}
		json_array_foreach(sst, i, e)
			if (!has_state(jst, json_string_value(e)))
				snprintf(dropped + strlen(dropped), sizeof(dropped) - strlen(dropped), "%soptim/%s/*",
				         *dropped ? ", " : "", json_string_value(e));
		*ret_changed = 1;
		if (main)
			accelp_log(ACCEL_LOG_WARN, "accel_load_state: %s: saved with optimizer %s; this "
			           "job's is %s (checkpoint.allow_optimizer_change): dropping %s%s%s%s",
			           m->dir, a, b, *dropped ? dropped : "no saved state",
			           *fresh_list ? "; " : "", fresh_list,
			           *fresh_list ? " start from zero" : "");
	}
	json_t *sg = json_object_get(root, "gradient_accumulation_steps");
	json_t *jg = json_object_get(job, "gradient_accumulation_steps");
	if (main && json_is_integer(sg) && !json_equal(sg, jg))
		accelp_log(ACCEL_LOG_WARN, "accel_load_state: %s: saved with "
		           "gradient_accumulation_steps %" JSON_INTEGER_FORMAT "; this job uses %"
		           JSON_INTEGER_FORMAT ": an optimizer step now takes %" JSON_INTEGER_FORMAT
		           " micro-batches, so the batch of a step changes from here on", m->dir,
		           json_integer_value(sg), json_integer_value(jg), json_integer_value(jg));
	json_t *sl = json_object_get(root, "lr_schedule"), *jl = json_object_get(job, "lr_schedule");
	if (main && json_is_object(sl) && !json_equal(sl, jl)) {
		char *x = json_dumps(sl, JSON_COMPACT | JSON_SORT_KEYS);
		char *y = json_dumps(jl, JSON_COMPACT | JSON_SORT_KEYS);
		accelp_log(ACCEL_LOG_WARN, "accel_load_state: %s: saved with learning-rate schedule "
		           "%s; this job's is %s: the learning rate follows the new schedule from "
		           "step %" PRId64 " on", m->dir, x ? x : "?", y ? y : "?", m->step);
		free(x);
		free(y);
	}
out:
	json_decref(job);
	return rc;
}
