/* SPDX-License-Identifier: MIT */
/* core/train_step.c: accel_step (reduce, gradient statistics on the host
 * or the device, clipping, loss scale, the plugins' step hooks), the step
 * counters, accel_last_step, and the optimizer and learning rate the
 * strategy's optim_step / optim_step_n apply. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ctx-impl.h"
#include "device.h"
#include "loader.h"
#include "log.h"
#include "lrsched.h"
#include "mem.h"
#include "ops.h"
#include "optim.h"
#include "optim_pool.h"
#include "restart.h"
#include "train-impl.h"
#include "train.h"
#include "train_shared.h"

/* t->optim: optimizer.* (core/optim.c) and scheduler.* (core/lrsched.c). */
typedef struct optim_state {
	accel_optim *optim;
	accel_sched *sched;
} optim_state;

/* ---- step counters --------------------------------------------------------------- */

uint64_t accelp_train_step_count(const accel_train *t)
{
	return t ? t->step : 0;
}

uint32_t accelp_train_micro_step(const accel_train *t)
{
	return t ? t->micro : 0;
}

int accelp_train_set_step_count(accel_train *t, uint64_t step, uint32_t micro_step)
{
	if (!t)
		return ACCEL_ERR_INVALID_ARG;
	if (micro_step >= t->gas)
		return terr(t, ACCEL_ERR_CHECKPOINT, "checkpoint micro-step %u does not fit "
		            "gradient_accumulation_steps = %u", micro_step, t->gas);
	t->step = step;
	t->micro = micro_step;
	return accelp_train_sched_update(t);
}

static accel_active *precision_plugin(accel_ctx *ctx)
{
	for (uint32_t i = 1; i < ctx->n_active; i++)
		if (ctx->active[i].inited && ctx->active[i].vt->desc->role == ACCEL_ROLE_PRECISION)
			return &ctx->active[i];
	return NULL;
}

static int loss_scale_of(accel_train *t, double *ret)
{
	accel_active *a = precision_plugin(t->ctx);
	double s = 1.0;
	int r;
	if (a && a->vt->loss_scale) {
		if ((r = a->vt->loss_scale(a->state, &s))) {
			if (!t->ctx->err.code)
				terr(t, r, "plugin '%s': loss_scale failed with %s", a->host.name,
				     accel_status_str(r));
			return t->ctx->err.code;
		}
		if (!(s > 0) || isinf(s))
			return terr(t, ACCEL_ERR_INTERNAL, "plugin '%s' returned loss scale %g; it "
			            "must be finite and > 0", a->host.name, s);
	}
	*ret = s;
	return ACCEL_OK;
}

double accel_loss_scale(accel_ctx *ctx)
{
	accel_train *t = accelp_train_get(ctx);
	double s = 1.0;
	if (t && loss_scale_of(t, &s))
		return 1.0;
	return s;
}

double accel_get_lr(const accel_ctx *ctx)
{
	accel_train *t = accelp_train_get(ctx);
	return t ? t->lr : 0.0;
}

uint64_t accel_get_step(const accel_ctx *ctx)
{
	accel_train *t = accelp_train_get(ctx);
	return t ? t->step : 0;
}

/* Plugin failures without a message still get one that names the plugin. */
static int plugin_fail(accel_train *t, accel_active *a, const char *slot, int r)
{
	if (!t->ctx->err.code)
		terr(t, r, "accel_step: plugin '%s' failed in %s with %s and no message",
		     a->host.name, slot, accel_status_str(r));
	return t->ctx->err.code ? t->ctx->err.code : r;
}

/* Gradient statistics are needed for clipping, for a loss scaler (it
 * skips steps on overflow), for any hook plugin's pre_step (it receives
 * them in accel_step_info_v1), and when the user asked (track_grad_norm). */
static int need_grad_stats(const accel_train *t)
{
	const accel_ctx *ctx = t->ctx;
	if (t->max_grad_norm > 0 || t->track_grad_norm)
		return 1;
	for (uint32_t i = 1; i < ctx->n_active; i++) {
		const accel_active *a = &ctx->active[i];
		if (a->inited && (a->vt->pre_step || a->vt->loss_scale))
			return 1;
	}
	return 0;
}

/* Whether the statistics can stay on the device (docs/streams.md,
 * "Clipping on the device"): nothing reads them on the host during the
 * step (no loss scaler, no pre_step hook), the strategy has
 * grad_stats_device, every trainable parameter is on one device, and that
 * device's module has device ABI 1.2.  Decided at the first sync step;
 * *ret_why says why not (logged once, at debug level). */
static int stats_can_stay(const accel_train *t, const accel_active *s, const char **ret_why)
{
	const accel_ctx *ctx = t->ctx;
	int32_t dev = ACCEL_DEVICE_CPU, idx = 0;
	uint32_t n = 0;
	for (uint32_t i = 1; i < ctx->n_active; i++) {
		const accel_active *a = &ctx->active[i];
		if (a->inited && (a->vt->pre_step || a->vt->loss_scale)) {
			*ret_why = "a plugin reads them in its step hooks";
			return 0;
		}
		/* a post_step hook built before ABI 1.5 expects grad_norm and
		 * nonfinite in its info (1.5 documents them as NaN and 0 there) */
		if (a->inited && a->vt->post_step && (!a->module || a->module->abi_minor < 5)) {
			*ret_why = "a plugin built before ABI 1.5 reads them in post_step";
			return 0;
		}
	}
	if (!s->vt->grad_stats_device) {
		*ret_why = "the strategy has no grad_stats_device (plugin ABI 1.5)";
		return 0;
	}
	for (uint32_t i = 0; i < t->n_params; i++) {
		const param_rec *p = &t->params[i];
		if (p->frozen)
			continue;
		if (n++ == 0) {
			dev = p->device;
			idx = p->device_index;
		} else if (p->device != dev || p->device_index != idx) {
			*ret_why = "the parameters are on more than one device";
			return 0;
		}
	}
	if (!n || dev == ACCEL_DEVICE_CPU) {
		*ret_why = "the parameters are in host memory";
		return 0;
	}
	if (!accelp_ops_device_stats_ok(dev, idx)) {
		*ret_why = "the device module predates device ABI 1.2";
		return 0;
	}
	return 1;
}

/* The sum of squares of this step on the device: stats[0] = 0, then the
 * strategy's grad_stats_device, on the context's stream.  A step that
 * starts here leaves no earlier step's figures to read (accel_last_step).
 * ACCEL_ERR_UNSUPPORTED, with no new error recorded, when the strategy
 * declines. */
static int sumsq_on_device(accel_train *t, accel_active *s)
{
	accel_ctx *ctx = t->ctx;
	int r, had = ctx->err.code;
	if (t->last_on_device) {
		t->last_on_device = 0;
		t->last.grad_norm = NAN;
		t->last.clip_coef = NAN;
	}
	if (!t->dev_stats &&
	    (r = accelp_mem_alloc(ctx, ACCEL_MEM_BUFFERS, t->dev_stats_device, t->dev_stats_index,
	                          ACCEL_DEVICE_STATS_DOUBLES * sizeof(double), 0,
	                          (void **)&t->dev_stats)))
		return r;
	accel_view v0 = {sizeof(v0), ACCEL_DTYPE_F64, t->dev_stats_device, t->dev_stats_index,
	                 t->dev_stats, 1};
	void *prev = accelp_device_stream_swap(ctx->stream);
	r = accelp_ops_fill(&v0, 0.0, &ctx->err);
	accelp_device_stream_swap(prev);
	if (r)
		return r;
	r = s->vt->grad_stats_device(s->state, t->dev_stats_device, t->dev_stats_index,
	                             t->dev_stats);
	if (r == ACCEL_ERR_UNSUPPORTED && ctx->err.code == had)
		return r;
	if (r)
		return plugin_fail(t, s, "grad_stats_device", r);
	return ACCEL_OK;
}

/* The norm, the clipping coefficient and the optimizer's factor from
 * stats[0] (accel_device_v1.clip_scale), on the context's stream. */
static int clip_on_device(accel_train *t, double unscale)
{
	accel_ctx *ctx = t->ctx;
	void *prev = accelp_device_stream_swap(ctx->stream);
	int r = accelp_ops_device_clip_scale(t->dev_stats_device, t->dev_stats_index, t->dev_stats,
	                                    t->max_grad_norm, unscale, &ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

int accel_step(accel_ctx *ctx)
{
	accel_train *t = NULL;
	accel_active *s;
	accel_step_info_v1 info;
	double sumsq = 0, loss_scale, unscale, norm, coef = 1.0;
	uint64_t nonfinite = 0;
	int r, stats, on_device;

	if ((r = accelp_train_need(ctx, "accel_step", &t)))
		return r;
	if (!t->prepared)
		return terr(t, ACCEL_ERR_STATE, "accel_step: call accel_prepare() first");
	if (t->grad_disabled)
		return terr(t, ACCEL_ERR_STATE, "accel_step: gradients are disabled "
		            "(accel_set_grad_enabled(ctx, 0)); a forward-only pass is not a "
		            "micro-step: enable gradients before training again");
	/* micro_step_end: the strategy first, then the hooks; on a sync step
	 * before the reduction (a ZeRO-2/3 strategy folds the micro-step's
	 * reduce-scatters into its shard there). */
	uint32_t sync = accelp_train_sync_step(t) ? 1 : 0;
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->inited && a->vt->micro_step_end &&
		    (r = a->vt->micro_step_end(a->state, sync)))
			return plugin_fail(t, a, "micro_step_end", r);
	}
	if (!sync) {
		t->micro++;
		return ACCEL_OK;
	}
	s = accelp_train_strategy(t);
	if ((r = s->vt->reduce(s->state)))
		return plugin_fail(t, s, "reduce", r);
	/* The statistics are a full pass over the gradients: only when
	 * something uses them (docs/api.md, "Gradient statistics").  When
	 * nothing reads them on the host they stay on the device, and so does
	 * the clipping factor (docs/streams.md): no host round trip. */
	stats = need_grad_stats(t);
	on_device = 0;
	if (stats && t->dev_stats_mode == 0) {
		const char *why = NULL;
		t->dev_stats_mode = stats_can_stay(t, s, &why) ? 1 : -1;
		if (t->dev_stats_mode > 0) {
			const param_rec *p0 = NULL;
			for (uint32_t i = 0; i < t->n_params && !p0; i++)
				if (!t->params[i].frozen)
					p0 = &t->params[i];
			t->dev_stats_device = p0->device;
			t->dev_stats_index = p0->device_index;
		}
		accelp_log(ACCEL_LOG_DEBUG, "gradient statistics and clipping: %s%s%s",
		          t->dev_stats_mode > 0 ? "on the device" : "on the host (",
		          t->dev_stats_mode > 0 ? "" : why, t->dev_stats_mode > 0 ? "" : ")");
	}
	if (stats && t->dev_stats_mode > 0) {
		int had = ctx->err.code;
		r = sumsq_on_device(t, s);
		if (r == ACCEL_ERR_UNSUPPORTED && ctx->err.code == had) {
			accelp_log(ACCEL_LOG_DEBUG, "gradient statistics and clipping: on the host (the "
			          "strategy's gradients are not all on the parameters' device)");
			t->dev_stats_mode = -1;
		} else if (r) {
			return r;
		} else {
			on_device = 1;
		}
	}
	if (stats && !on_device && (r = s->vt->grad_stats(s->state, &sumsq, &nonfinite)))
		return plugin_fail(t, s, "grad_stats", r);
	if ((r = loss_scale_of(t, &loss_scale)))
		return r;
	/* Gradients hold loss_scale * (sum over micro-steps of the rank mean);
	 * the step applies their mean over micro-steps, unscaled. */
	unscale = 1.0 / (loss_scale * (double)t->gas);
	if (on_device && (r = clip_on_device(t, unscale)))
		return r;
	/* As torch computes it: +inf when some element is infinite (then
	 * clipping's coef is 0, finite gradients become 0 and only the
	 * infinite ones NaN), NaN when some element is NaN.  On the device:
	 * the same arithmetic there (accel_device_v1.clip_scale), read on the
	 * host only by accel_last_step(). */
	norm = stats && !on_device ? sqrt(sumsq) * unscale : NAN;
	if (t->max_grad_norm > 0 && !on_device) {
		/* torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1. */
		coef = t->max_grad_norm / (norm + 1e-6);
		if (coef > 1.0)
			coef = 1.0;
	}
	info = (accel_step_info_v1){
		.struct_size = sizeof(info),
		.skip = 0,
		.step = t->step,
		.lr = t->lr,
		.loss_scale = loss_scale,
		.grad_norm = norm,
		.grad_scale = coef * unscale,
		.nonfinite = nonfinite,
		.flags = t->grad_overwrite ? ACCEL_STEP_KEEP_GRADS : 0,
		.grad_scale_dev = on_device ? t->dev_stats + 3 : NULL,
	};
	if (on_device)
		info.grad_scale = unscale;
	for (uint32_t i = 1; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->inited && a->vt->pre_step && (r = a->vt->pre_step(a->state, &info)))
			return plugin_fail(t, a, "pre_step", r);
	}
	if (nonfinite && !info.skip)
		accelp_log(ACCEL_LOG_WARN, "step %llu: %llu non-finite gradient elements and no "
		          "plugin skipped the step; parameters will become non-finite",
		          (unsigned long long)t->step + 1, (unsigned long long)nonfinite);
	t->in_step = 1;
	t->step_info = &info;
	r = s->vt->step(s->state, &info);
	t->in_step = 0;
	t->step_info = NULL;
	if (r)
		return plugin_fail(t, s, "step", r);
	for (uint32_t i = 1; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->inited && a->vt->post_step && (r = a->vt->post_step(a->state, &info)))
			return plugin_fail(t, a, "post_step", r);
	}
	t->micro = 0;
	if (!info.skip)
		t->step++;
	accelp_restart_note_step(ctx, t->step);
	t->last = (accel_step_report){
		.struct_size = sizeof(t->last),
		.skipped = info.skip ? 1 : 0,
		.step = t->step,
		.lr = info.lr,
		.grad_norm = norm,
		.clip_coef = coef,
		.loss_scale = loss_scale,
		.nonfinite = nonfinite,
		.has_grad_norm = (uint32_t)stats,
	};
	t->have_last = 1;
	t->last_on_device = on_device;
	return accelp_train_sched_update(t);
}

/* The last step's norm and clipping coefficient (stats[1], stats[2]) from
 * the device, after the context's stream ran them. */
static int read_dev_stats(accel_train *t, double v[2])
{
	accel_ctx *ctx = t->ctx;
	const accel_device_v1 *d;
	char buf[1024] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	int r;
	if ((r = accelp_device_for("accel_last_step", t->dev_stats_device, t->dev_stats_index, &d,
	                           &ctx->err)))
		return r;
	/* the whole device: the step ran on the stream set then, which the
	 * program may have changed since */
	if ((r = d->sync(t->dev_stats_index, &de)) ||
	    (r = d->memcpy(v, t->dev_stats + 1, 2 * sizeof(double), ACCEL_DEVICE_D2H,
	                   t->dev_stats_index, &de)))
		return accelp_device_fail(&ctx->err, r, "accel_last_step", buf);
	if (!isfinite(v[0]))
		accelp_log(ACCEL_LOG_WARN, "step %llu: the gradient norm is %g: some gradient is "
		          "%s, and the parameters will become non-finite (statistics on the device: "
		          "non-finite elements are not counted)", (unsigned long long)t->last.step,
		          v[0], isnan(v[0]) ? "NaN" : "infinite");
	return ACCEL_OK;
}

int accel_last_step(const accel_ctx *ctx, accel_step_report *ret_report)
{
	accel_train *t = accelp_train_get(ctx);
	if (!t || !ret_report)
		return ACCEL_ERR_INVALID_ARG;
	if (!t->have_last)
		return cerr(ctx, ACCEL_ERR_STATE, "accel_last_step: no optimizer step has run yet");
	if (t->last_on_device) {
		/* the norm and coefficient of the last step are on the device:
		 * wait for the stream and read them (the one host sync, on
		 * request, like reading torch's total_norm) */
		double v[2];
		int r = read_dev_stats(t, v);
		if (r)
			return r;
		t->last.grad_norm = v[0];
		t->last.clip_coef = t->max_grad_norm > 0 ? v[1] : 1.0;
		t->last_on_device = 0;
	}
	uint32_t n = ret_report->struct_size;
	if (n < sizeof(uint32_t))
		return cerr(ctx, ACCEL_ERR_INVALID_ARG, "accel_last_step: set report->struct_size");
	if (n > sizeof(t->last))
		n = sizeof(t->last);
	memcpy((char *)ret_report + sizeof(uint32_t), (const char *)&t->last + sizeof(uint32_t),
	       n - sizeof(uint32_t));
	return ACCEL_OK;
}

/* ---- optimizer and learning rate ---------------------------------------------------
 * optimizer.* is read once into an accel_optim (core/optim.c), scheduler.*
 * into an accel_sched (core/lrsched.c).  Strategies call optim_step per
 * range; the kernel gets the range's group, this step's count and rate. */

int accelp_train_optim_new(accel_train *t)
{
	optim_state *o = calloc(1, sizeof(*o));
	int r;
	if (!o)
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	t->optim = o;
	if ((r = accelp_optim_new_from_config(t->ctx->cfg, &o->optim, &t->ctx->err)) ||
	    (r = accelp_sched_new_from_config(t->ctx->cfg, &o->sched, &t->ctx->err)))
		return r;
	return accelp_train_sched_update(t);
}

void accelp_train_optim_free(accel_train *t)
{
	optim_state *o = t->optim;
	if (o) {
		accelp_optim_free(o->optim);
		accel_sched_free(o->sched);
	}
	free(o);
	t->optim = NULL;
}

int accelp_train_sched_update(accel_train *t)
{
	optim_state *o = t->optim;
	if (o && o->sched)
		t->lr = accel_sched_lr(o->sched, t->step);
	return ACCEL_OK;
}

uint32_t accelp_train_optim_state_count(accel_train *t)
{
	optim_state *o = t ? t->optim : NULL;
	return o ? accelp_optim_state_count(o->optim) : 0;
}

/* optimizer.no_decay suffixes -> group 1 (core/optim.c decides). */
uint32_t accelp_train_param_group(accel_train *t, const char *name)
{
	optim_state *o = t->optim;
	return o && o->optim ? accelp_optim_group_of(o->optim, name) : 0;
}

/* The checks of one optim_step range (optim_step and each range of
 * optim_step_n): `who` names the call in messages.  *ret_p and *ret_gsd
 * (the gradient factor in device memory, or NULL) on success. */
static int optim_args_check(accel_train *t, const accel_optim_args_v1 *a, const char *who,
                            param_rec **ret_p, const double **ret_gsd)
{
	param_rec *p;
	if (!t->in_step)
		return terr(t, ACCEL_ERR_STATE, "%s called outside accel_step()", who);
	if (a->struct_size < ACCEL_ABI_END(accel_optim_args_v1, grad_scale) ||
	    a->param >= t->n_params)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s: bad arguments (struct_size %u, "
		            "param %u of %u)", who, a->struct_size, a->param, t->n_params);
	p = &t->params[a->param];
	if (p->frozen)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s('%s'): the parameter is frozen", who,
		            p->name);
	if (a->master.dtype != ACCEL_DTYPE_F32 || a->master.numel != a->grad.numel ||
	    a->offset > p->numel || a->master.numel > p->numel - a->offset)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s('%s'): range [%llu, +%llu) with "
		            "%s master and %llu gradients does not fit the parameter (%llu elements; "
		            "master must be f32 and as long as the gradient)", who, p->name,
		            (unsigned long long)a->offset, (unsigned long long)a->master.numel,
		            accel_dtype_name(a->master.dtype) ? accel_dtype_name(a->master.dtype)
		                                              : "?",
		            (unsigned long long)a->grad.numel, (unsigned long long)p->numel);
	if (a->master.device != a->grad.device || a->master.device_index != a->grad.device_index)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s('%s'): master and gradient are on "
		            "different devices", who, p->name);
	const double *gsd = ACCEL_STRUCT_HAS(a, accel_optim_args_v1, grad_scale_dev)
	                    ? a->grad_scale_dev : NULL;
	const accel_step_info_v1 *si = t->step_info;
	if (!gsd && si && si->grad_scale_dev)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s('%s'): this step's gradient factor "
		            "is in device memory (info->grad_scale_dev, after grad_stats_device) but "
		            "the strategy did not pass it: the update would not be clipped", who,
		            p->name);
	if (gsd && a->master.device == ACCEL_DEVICE_CPU)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s('%s'): grad_scale_dev (a factor in "
		            "device memory) for parameters in host memory", who, p->name);
	*ret_p = p;
	*ret_gsd = gsd;
	return ACCEL_OK;
}

int accelp_train_optim_step(accel_train *t, const accel_optim_args_v1 *a)
{
	optim_state *o;
	param_rec *p;
	const double *gsd;
	uint32_t ns;
	int r;
	if (!t || !a)
		return ACCEL_ERR_INVALID_ARG;
	o = t->optim;
	if ((r = optim_args_check(t, a, "optim_step", &p, &gsd)))
		return r;
	ns = accelp_optim_state_count(o->optim);
	/* Device ranges: the device module's fused kernel, enqueued (no wait). */
	if (a->master.device != ACCEL_DEVICE_CPU) {
		accel_optim_range q = {a->master.data, a->grad.data, {NULL, NULL}, a->master.numel};
		for (uint32_t k = 0; k < ns && k < ACCEL_OPTIM_MAX_STATE; k++)
			q.state[k] = a->state[k];
		return accelp_optim_step_ranges(o->optim, accelp_optim_get_group(o->optim, p->group),
		                               t->step + 1, t->lr, a->master.device,
		                               a->master.device_index, &q, 1, a->grad.dtype,
		                               a->grad_scale, gsd, &t->ctx->err);
	}
	return accelp_optim_step_range(o->optim, accelp_optim_get_group(o->optim, p->group),
	                              t->step + 1, t->lr, a->master.data, a->grad.data,
	                              a->grad.dtype, ns ? (float *const *)a->state : NULL,
	                              a->master.numel, a->grad_scale, &t->ctx->err);
}

int accelp_train_optim_step_n(accel_train *t, const accel_optim_args_v1 *args, uint32_t n,
                             uint32_t n_threads)
{
	accel_optim_task *tasks = NULL;
	accel_ctx *ctx;
	int r;
	if (!t)
		return ACCEL_ERR_INVALID_ARG;
	ctx = t->ctx;
	if (n && !args)
		return terr(t, ACCEL_ERR_INVALID_ARG, "optim_step_n: args is NULL with n = %u", n);
	if (!t->in_step)
		return terr(t, ACCEL_ERR_STATE, "optim_step_n called outside accel_step()");
	if (!n)
		return ACCEL_OK;
	if (!(tasks = calloc(n, sizeof(*tasks))))
		return terr(t, ACCEL_ERR_NOMEM, "optim_step_n: out of memory");
	const accel_optim *optim = ((optim_state *)t->optim)->optim;
	uint32_t ns = accelp_optim_state_count(optim);
	for (uint32_t i = 0; i < n; i++) {
		const accel_optim_args_v1 *a = &args[i];
		param_rec *p;
		const double *gsd;
		char who[48];
		snprintf(who, sizeof(who), "optim_step_n (range %u of %u)", i, n);
		if ((r = optim_args_check(t, a, who, &p, &gsd)))
			goto out;
		if (a->master.device != ACCEL_DEVICE_CPU) {
			r = terr(t, ACCEL_ERR_INVALID_ARG, "%s('%s'): master and gradient are on device "
			         "%d:%d; optim_step_n takes host (ACCEL_DEVICE_CPU) views only: step "
			         "device ranges with optim_step", who, p->name, a->master.device,
			         a->master.device_index);
			goto out;
		}
		accel_optim_task *q = &tasks[i];
		q->grp = accelp_optim_get_group(optim, p->group);
		q->param = a->master.data;
		q->grad = a->grad.data;
		q->gdtype = a->grad.dtype;
		for (uint32_t k = 0; k < ns && k < ACCEL_OPTIM_MAX_STATE; k++)
			q->state[k] = a->state[k];
		q->numel = a->master.numel;
		q->grad_scale = a->grad_scale;
	}
	if (!n_threads)
		n_threads = accelp_optim_pool_default_threads(ctx->world.local_world_size);
	if (!ctx->optim_pool && (r = accelp_optim_pool_new(&ctx->optim_pool))) {
		r = terr(t, r, "optim_step_n: cannot create the optimizer thread pool (%s)",
		         accel_status_str(r));
		goto out;
	}
	r = accelp_optim_pool_step(ctx->optim_pool, optim, t->step + 1, t->lr, tasks, n, n_threads,
	                           &ctx->err);
out:
	free(tasks);
	return r;
}
