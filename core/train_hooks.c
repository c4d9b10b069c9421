/* SPDX-License-Identifier: MIT */
/* core/train_hooks.c: the unit hooks (accel_unit_pre_forward and the
 * others, dispatched to every active plugin) and the micro-step's
 * contract with the strategy: gradient accumulation (sync_step,
 * accel_set_grad_overwrite, accel_set_grad_enabled, check_reduce) and the
 * callbacks of host->req_on_done(). */
#include <stdlib.h>

#include "accel/accel.h"
#include "ctx-impl.h"
#include "train-impl.h"
#include "train.h"
#include "train_shared.h"

/* ---- unit hooks ------------------------------------------------------------------ */

enum hook { PRE_FORWARD, POST_FORWARD, PRE_BACKWARD, POST_BACKWARD };
static const char *const hook_names[] = {"accel_unit_pre_forward", "accel_unit_post_forward",
                                         "accel_unit_pre_backward", "accel_unit_post_backward"};

static int run_hook(accel_ctx *ctx, uint32_t unit, enum hook which)
{
	accel_train *t = NULL;
	int r;
	if ((r = accelp_train_need(ctx, hook_names[which], &t)))
		return r;
	if (!t->prepared)
		return terr(t, ACCEL_ERR_STATE, "%s(%u): call accel_prepare() first",
		            hook_names[which], unit);
	if (unit >= t->n_units)
		return terr(t, ACCEL_ERR_INVALID_ARG, "%s: unit index %u out of range (model has "
		            "%u units)", hook_names[which], unit, t->n_units);
	if (t->grad_disabled && (which == PRE_BACKWARD || which == POST_BACKWARD))
		return terr(t, ACCEL_ERR_STATE, "%s(unit '%s'): gradients are disabled "
		            "(accel_set_grad_enabled(ctx, 0)): a forward-only pass has no "
		            "backward; enable them before a training pass", hook_names[which],
		            t->units[unit].name);
	/* Nested like layers: the strategy materializes parameters first in the
	 * pre hooks and releases them last in the post hooks, so hook plugins
	 * always see them; post hooks run in reverse activation order. */
	int post = which == POST_FORWARD || which == POST_BACKWARD;
	for (uint32_t k = 0; k < ctx->n_active; k++) {
		uint32_t i = post ? ctx->n_active - 1 - k : k;
		accel_active *a = &ctx->active[i];
		int (*fn)(void *, uint32_t) = NULL;
		if (!a->inited)
			continue;
		switch (which) {
		case PRE_FORWARD: fn = a->vt->pre_forward; break;
		case POST_FORWARD: fn = a->vt->post_forward; break;
		case PRE_BACKWARD: fn = a->vt->pre_backward; break;
		case POST_BACKWARD: fn = a->vt->post_backward; break;
		}
		if (fn && (r = fn(a->state, unit))) {
			if (!ctx->err.code)
				terr(t, r, "%s(unit '%s'): plugin '%s' failed with %s", hook_names[which],
				     t->units[unit].name, a->host.name, accel_status_str(r));
			return ctx->err.code;
		}
	}
	return ACCEL_OK;
}

int accel_unit_pre_forward(accel_ctx *ctx, uint32_t unit)
{
	return run_hook(ctx, unit, PRE_FORWARD);
}

int accel_unit_post_forward(accel_ctx *ctx, uint32_t unit)
{
	return run_hook(ctx, unit, POST_FORWARD);
}

int accel_unit_pre_backward(accel_ctx *ctx, uint32_t unit)
{
	return run_hook(ctx, unit, PRE_BACKWARD);
}

int accel_unit_post_backward(accel_ctx *ctx, uint32_t unit)
{
	return run_hook(ctx, unit, POST_BACKWARD);
}

/* ---- accumulation ---------------------------------------------------------------- */

int32_t accelp_train_sync_step(accel_train *t)
{
	return !t || t->micro + 1 >= t->gas;
}

int accel_sync_gradients(const accel_ctx *ctx)
{
	return accelp_train_sync_step(accelp_train_get(ctx)) ? 1 : 0;
}

int accel_set_grad_overwrite(accel_ctx *ctx, int on)
{
	accel_train *t = NULL;
	int r;
	if ((r = accelp_train_need(ctx, "accel_set_grad_overwrite", &t)))
		return r;
	if (t->prepared)
		return terr(t, ACCEL_ERR_STATE, "accel_set_grad_overwrite: call it before "
		            "accel_prepare() (switching later would add to gradients that were "
		            "not zeroed)");
	t->grad_overwrite = on ? 1 : 0;
	return ACCEL_OK;
}

int accel_set_grad_enabled(accel_ctx *ctx, int on)
{
	accel_train *t = NULL;
	int r;
	if ((r = accelp_train_need(ctx, "accel_set_grad_enabled", &t)))
		return r;
	t->grad_disabled = on ? 0 : 1;
	return ACCEL_OK;
}

int accel_grad_enabled(const accel_ctx *ctx)
{
	return accelp_train_grad_enabled(accelp_train_get(ctx)) ? 1 : 0;
}

int32_t accelp_train_grad_enabled(const accel_train *t)
{
	return !t || !t->grad_disabled;
}

int accelp_train_check_reduce(accel_train *t, const char *who, const char *call)
{
	if (!t || accelp_train_sync_step(t))
		return ACCEL_OK;
	accel_active *s = t->ctx->n_active ? &t->ctx->active[0] : NULL;
	if (s && (s->caps & ACCEL_CAP_MICRO_REDUCE))
		return ACCEL_OK;
	return terr(t, ACCEL_ERR_STATE, "%s: %s on micro-step %u of %u, which is not a sync step, "
	            "under strategy '%s' without ACCEL_CAP_MICRO_REDUCE: a strategy reduces "
	            "gradients only when host->sync_step() is nonzero unless its descriptor "
	            "declares that it reduces on every micro-step", who ? who : "?", call,
	            t->micro + 1, t->gas, s ? s->host.name : "?");
}

int accelp_train_req_on_done(accel_train *t, accel_req *req, int (*fn)(void *arg), void *arg)
{
	if (!t)
		return ACCEL_ERR_STATE;
	if (!req || !fn)
		return terr(t, ACCEL_ERR_INVALID_ARG, "req_on_done: %s is NULL", req ? "fn" : "req");
	if (t->n_req_cbs == t->cap_req_cbs) {
		uint32_t cap = t->cap_req_cbs ? 2 * t->cap_req_cbs : 16;
		struct req_cb *n = realloc(t->req_cbs, cap * sizeof(*n));
		if (!n)
			return terr(t, ACCEL_ERR_NOMEM, "out of memory");
		t->req_cbs = n;
		t->cap_req_cbs = cap;
	}
	t->req_cbs[t->n_req_cbs++] = (struct req_cb){req, fn, arg};
	return ACCEL_OK;
}

int accelp_train_req_done(accel_train *t, accel_req *req)
{
	int r = ACCEL_OK;
	if (!t || !req)
		return ACCEL_OK;
	/* `req` is already released, so its address may come back for a request
	 * that a callback issues: its n callbacks are taken out before they run,
	 * so one registered from inside a callback (on a new request that
	 * happens to have the same address, appended after them) is not taken
	 * for one of these.  They run in registration order; fn may wait on
	 * other requests (and so re-enter here) or register new callbacks.
	 * Without memory for all n, they are taken out and run one at a time:
	 * the first match is still one of the n. */
	uint32_t n = 0;
	for (uint32_t i = 0; i < t->n_req_cbs; i++)
		n += t->req_cbs[i].req == req;
	if (!n)
		return ACCEL_OK;
	struct req_cb one, *cbs = n == 1 ? NULL : malloc(n * sizeof(*cbs));
	uint32_t cap = cbs ? n : 1;
	if (!cbs)
		cbs = &one;
	for (uint32_t done = 0; done < n;) {
		uint32_t k = 0, m = 0;
		for (uint32_t i = 0; i < t->n_req_cbs; i++) {
			if (m < cap && t->req_cbs[i].req == req)
				cbs[m++] = t->req_cbs[i];
			else
				t->req_cbs[k++] = t->req_cbs[i];
		}
		t->n_req_cbs = k;
		if (!m)
			break;
		for (uint32_t i = 0; i < m; i++) {
			int rc = cbs[i].fn(cbs[i].arg);
			if (rc && !r) {
				r = rc > 0 ? ACCEL_ERR_PLUGIN : rc;
				if (!t->ctx->err.code)
					terr(t, r, "a req_on_done callback failed with %s and no message",
					     accel_status_str(r));
			}
		}
		done += m;
	}
	if (cbs != &one)
		free(cbs);
	return r;
}

void accelp_train_drop_callbacks(accel_train *t)
{
	if (t)
		t->n_req_cbs = 0;
}

void accelp_train_drop_callbacks_of(accel_train *t, const accel_req *req)
{
	uint32_t k = 0;
	for (uint32_t i = 0; t && i < t->n_req_cbs; i++)
		if (t->req_cbs[i].req != req)
			t->req_cbs[k++] = t->req_cbs[i];
	if (t)
		t->n_req_cbs = k;
}

int accel_grad_accumulate(const accel_ctx *ctx)
{
	const accel_train *t = accelp_train_get(ctx);
	if (!t || !t->grad_overwrite)
		return 1;
	return t->micro > 0 ? 1 : 0;
}
