/* SPDX-License-Identifier: MIT */
/* core/lrsched.c: learning-rate schedules.  (Not "sched.c": a
 * core/sched.h would shadow the system <sched.h> that <pthread.h> includes.)
 *
 * The arithmetic follows transformers' lambdas operation for operation
 * (factor in double, then base_lr * factor), so with min_lr = 0 the rates
 * are bit-identical to get_linear_schedule_with_warmup and
 * get_cosine_schedule_with_warmup.  Two deliberate differences: the cosine
 * progress is clamped at 1, so the rate stays at min_lr after total_steps
 * instead of rising again, and warmup_steps > total_steps is refused
 * (transformers silently gives 0 after such a warm-up). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctx-impl.h"
#include "log.h"
#include "lrsched.h"

#define PI 3.14159265358979323846

struct accel_sched {
	accel_sched_opts o;
};

static const char *const type_names[] = {
	[ACCEL_SCHED_CONSTANT] = "constant",
	[ACCEL_SCHED_LINEAR] = "linear",
	[ACCEL_SCHED_COSINE] = "cosine",
};
#define N_TYPES (sizeof(type_names) / sizeof(type_names[0]))

int accel_sched_type_parse(const char *name)
{
	if (!name)
		return -1;
	for (uint32_t i = 0; i < N_TYPES; i++)
		if (!strcmp(name, type_names[i]))
			return (int)i;
	return -1;
}

const char *accel_sched_type_name(uint32_t type)
{
	return type < N_TYPES ? type_names[type] : NULL;
}

/* Checks shared by both constructors; `prefix` names the members the way
 * the caller knows them ("opts." or "scheduler."). */
static int check_opts(const accel_sched_opts *o, int from_config, accel_err *err)
{
	const char *pre = from_config ? "scheduler." : "accel_sched_opts.";
	const char *lr_name = from_config ? "optimizer.params.lr" : "accel_sched_opts.lr";
	if (o->type >= N_TYPES)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "schedule: %stype %u is not one of constant (0), linear (1), "
		                     "cosine (2)", pre, o->type);
	if (!isfinite(o->lr) || o->lr < 0.0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "schedule: %s must be a finite number >= 0, got %g", lr_name, o->lr);
	if (!isfinite(o->min_lr) || o->min_lr < 0.0 || o->min_lr > o->lr)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "schedule: %smin_lr must be in [0, %s] = [0, %g], got %g",
		                     pre, lr_name, o->lr, o->min_lr);
	if (o->type != ACCEL_SCHED_CONSTANT &&
	    (o->total_steps == 0 || o->total_steps < o->warmup_steps))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "schedule: a %s schedule needs %stotal_steps > 0 and >= "
		                     "%swarmup_steps, got total_steps %llu and warmup_steps %llu%s",
		                     type_names[o->type], pre, pre,
		                     (unsigned long long)o->total_steps,
		                     (unsigned long long)o->warmup_steps,
		                     o->total_steps == 0 ? " (total_steps is not set: give the "
		                                           "number of optimizer steps of the run)" : "");
	return ACCEL_OK;
}

int accelp_sched_create(const accel_sched_opts *opts, accel_sched **ret_sched, accel_err *err)
{
	accel_sched *s;
	int rc;

	if (!opts || !ret_sched)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "schedule: %s is NULL",
		                     !opts ? "opts" : "ret_sched");
	if (opts->struct_size < sizeof(accel_sched_opts))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "schedule: opts.struct_size is %u, expected %zu",
		                     opts->struct_size, sizeof(accel_sched_opts));
	if ((rc = check_opts(opts, 0, err)))
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "schedule: out of memory");
	s->o = *opts;
	s->o.struct_size = sizeof(s->o);
	*ret_sched = s;
	return ACCEL_OK;
}

static const char *source_of(const accel_config *cfg, const char *key)
{
	const char *src = accelp_config_source(cfg, key);
	return src ? src : "unset";
}

/* An integer key that must be >= 0; unset keeps *value. */
static int config_count(const accel_config *cfg, const char *key, uint64_t *value,
                        accel_err *err)
{
	int64_t v;
	int rc = accelp_config_get_int(cfg, key, &v);
	if (rc == ACCEL_ERR_NOT_FOUND)
		return ACCEL_OK;
	if (rc)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "schedule: %s (from %s) is not an integer",
		                     key, source_of(cfg, key));
	if (v < 0)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "schedule: %s (from %s) must be >= 0, got %lld",
		                     key, source_of(cfg, key), (long long)v);
	*value = (uint64_t)v;
	return ACCEL_OK;
}

int accelp_sched_new_from_config(const accel_config *cfg, accel_sched **ret_sched,
                                accel_err *err)
{
	accel_sched_opts o = {.struct_size = sizeof(o), .type = ACCEL_SCHED_CONSTANT};
	const char *type = NULL;
	int rc;

	if (!cfg || !ret_sched)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "schedule: %s is NULL",
		                     !cfg ? "cfg" : "ret_sched");
	rc = accelp_config_get_string(cfg, "scheduler.type", &type);
	if (rc == ACCEL_OK) {
		int t = accel_sched_type_parse(type);
		if (t < 0)
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "schedule: scheduler.type \"%s\" (from %s) is not one of "
			                     "constant, linear, cosine", type,
			                     source_of(cfg, "scheduler.type"));
		o.type = (uint32_t)t;
	} else if (rc != ACCEL_ERR_NOT_FOUND) {
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "schedule: scheduler.type (from %s) must be a string",
		                     source_of(cfg, "scheduler.type"));
	}
	if ((rc = config_count(cfg, "scheduler.warmup_steps", &o.warmup_steps, err)) ||
	    (rc = config_count(cfg, "scheduler.total_steps", &o.total_steps, err)))
		return rc;
	rc = accelp_config_get_double(cfg, "scheduler.min_lr", &o.min_lr);
	if (rc && rc != ACCEL_ERR_NOT_FOUND)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "schedule: scheduler.min_lr (from %s) must be a number",
		                     source_of(cfg, "scheduler.min_lr"));
	rc = accelp_config_get_double(cfg, "optimizer.params.lr", &o.lr);
	if (rc == ACCEL_ERR_NOT_FOUND)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "schedule: optimizer.params.lr is not set; the schedule "
		                     "scales it");
	if (rc)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "schedule: optimizer.params.lr (from %s) must be a number",
		                     source_of(cfg, "optimizer.params.lr"));
	if ((rc = check_opts(&o, 1, err))) {
		/* Say where the offending values came from. */
		char msg[ACCEL_ERRMSG_MAX];
		snprintf(msg, sizeof(msg), "%s", err ? err->msg : "");
		if (err && err->code == rc) {
			accelp_err_clear(err);
			accelp_err_set(err, ACCEL_ERR_CONFIG,
			              "%s [scheduler.type from %s, warmup_steps from %s, "
			              "total_steps from %s, min_lr from %s, optimizer.params.lr from %s]",
			              msg, source_of(cfg, "scheduler.type"),
			              source_of(cfg, "scheduler.warmup_steps"),
			              source_of(cfg, "scheduler.total_steps"),
			              source_of(cfg, "scheduler.min_lr"),
			              source_of(cfg, "optimizer.params.lr"));
		}
		return ACCEL_ERR_CONFIG;
	}
	return accelp_sched_create(&o, ret_sched, err);
}

int accel_sched_new(accel_ctx *ctx, const accel_sched_opts *opts, accel_sched **ret_sched)
{
	accel_err local = {0};
	accel_err *err = ctx ? &ctx->err : &local;
	int rc;

	if (opts)
		rc = accelp_sched_create(opts, ret_sched, err);
	else if (!ctx)
		rc = accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                   "accel_sched_new: give opts, or a context to read the "
		                   "configuration from");
	else if (!ctx->cfg)
		rc = accelp_err_set(err, ACCEL_ERR_STATE,
		                   "accel_sched_new: the context has no configuration");
	else
		rc = accelp_sched_new_from_config(ctx->cfg, ret_sched, err);
	if (rc && !ctx)
		accelp_log(ACCEL_LOG_ERROR, "%s", local.msg);
	return rc;
}

accel_sched *accel_sched_free(accel_sched *sched)
{
	free(sched);
	return NULL;
}

const accel_sched_opts *accelp_sched_get_opts(const accel_sched *sched)
{
	return sched ? &sched->o : NULL;
}

/* The decay factor f in [0, 1] after the warm-up (lr = min_lr + (lr - min_lr) f). */
static double decay(const accel_sched_opts *o, uint64_t step)
{
	if (o->type == ACCEL_SCHED_CONSTANT)
		return 1.0;
	if (step >= o->total_steps)
		return 0.0;
	/* As transformers: float(T - t) / float(max(1, T - W)) and
	 * float(t - W) / float(max(1, T - W)); here W <= t < T, so T - W >= 1. */
	double span = (double)(o->total_steps - o->warmup_steps);
	if (o->type == ACCEL_SCHED_LINEAR)
		return (double)(o->total_steps - step) / span;
	double progress = (double)(step - o->warmup_steps) / span;
	return 0.5 * (1.0 + cos(PI * 0.5 * 2.0 * progress));
}

double accel_sched_lr(const accel_sched *sched, uint64_t step)
{
	if (!sched)
		return NAN;
	const accel_sched_opts *o = &sched->o;
	if (step < o->warmup_steps)
		return o->lr * ((double)step / (double)o->warmup_steps);
	double f = decay(o, step);
	if (o->min_lr == 0.0)
		return o->lr * f;
	return o->min_lr + (o->lr - o->min_lr) * f;
}

double accelp_sched_factor(const accel_sched *sched, uint64_t step)
{
	if (!sched)
		return NAN;
	const accel_sched_opts *o = &sched->o;
	if (o->lr == 0.0) {
		/* No rate to divide by: the shape alone (floor 0). */
		if (step < o->warmup_steps)
			return (double)step / (double)o->warmup_steps;
		return decay(o, step);
	}
	return accel_sched_lr(sched, step) / o->lr;
}
