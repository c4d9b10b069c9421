/* SPDX-License-Identifier: MIT */
/* core/train_prepare.c: accel_prepare and what it hands the strategy: the
 * frozen model (params[] and units[] at each ABI minor's stride), the
 * bindings of working values and gradients (param_bind, param_view,
 * accel_param_data/grad), and the initial values (param_init). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ckpt_impl.h"
#include "ctx-impl.h"
#include "loader.h"
#include "log.h"
#include "ops.h"
#include "restart.h"
#include "train-impl.h"
#include "train.h"
#include "train_shared.h"

#define INIT_CHUNK 65536u  /* f32 staging elements for non-f32 / device inits */

static uint32_t model_n_uses(const accel_train *t)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < t->n_units; i++)
		n += t->units[i].n_uses;
	return n;
}

/* ---- the frozen model the strategy sees ------------------------------------------ */

static int build_model(accel_train *t)
{
	uint32_t n_groups = 1;
	t->pinfo = calloc(t->n_params ? t->n_params : 1, sizeof(*t->pinfo));
	t->uinfo = calloc(t->n_units ? t->n_units : 1, sizeof(*t->uinfo));
	if (!t->pinfo || !t->uinfo)
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	t->model = (accel_model_v1){.struct_size = sizeof(accel_model_v1),
	                            .n_params = t->n_params, .n_units = t->n_units,
	                            .params = t->pinfo, .units = t->uinfo,
	                            .param_info_size = sizeof(accel_param_info_v1),
	                            .unit_info_size = sizeof(accel_unit_info_v1)};
	for (uint32_t i = 0; i < t->n_params; i++) {
		param_rec *p = &t->params[i];
		t->pinfo[i] = (accel_param_info_v1){
			.struct_size = sizeof(accel_param_info_v1),
			.dtype = p->dtype,
			.name = p->name,
			.index = i,
			.unit = p->unit,
			.group = p->group,
			.ndim = p->ndim,
			.shape = p->shape,
			.numel = p->numel,
			.device = p->device,
			.device_index = p->device_index,
			.requires_grad = !p->frozen,
			.grad_dtype = p->grad_dtype,
			.reduce_dtype = p->reduce_dtype,
			.compute_dtype = p->compute_dtype,
		};
		if (p->group + 1 > n_groups)
			n_groups = p->group + 1;
		t->model.total_numel += p->numel;
	}
	for (uint32_t i = 0; i < t->n_units; i++) {
		unit_rec *u = &t->units[i];
		t->uinfo[i] = (accel_unit_info_v1){
			.struct_size = sizeof(accel_unit_info_v1),
			.first_param = u->first_param,
			.n_params = u->n_params,
			.name = u->name,
			.numel = u->numel,
			.kind = u->kind,
			.n_uses = u->n_uses,
			.uses = u->uses,
		};
	}
	t->model.n_groups = n_groups;
	/* A plugin built before minor 3 indexes params[] at that minor's
	 * stride: it gets a copy laid out so, each entry's struct_size saying
	 * what it holds. */
	size_t old = ACCEL_PARAM_INFO_V1_SIZE_MINOR2;
	t->pinfo_minor2 = calloc(t->n_params ? t->n_params : 1, old);
	if (!t->pinfo_minor2)
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < t->n_params; i++) {
		accel_param_info_v1 *e = (accel_param_info_v1 *)(void *)(t->pinfo_minor2 + i * old);
		memcpy(e, &t->pinfo[i], old);
		e->struct_size = (uint32_t)old;
	}
	/* A plugin built before minor 6 indexes units[] at that minor's
	 * stride (no kind): the same, for units. */
	size_t uold = ACCEL_UNIT_INFO_V1_SIZE_MINOR5;
	t->uinfo_minor5 = calloc(t->n_units ? t->n_units : 1, uold);
	if (!t->uinfo_minor5)
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < t->n_units; i++) {
		accel_unit_info_v1 *e = (accel_unit_info_v1 *)(void *)(t->uinfo_minor5 + i * uold);
		memcpy(e, &t->uinfo[i], uold);
		e->struct_size = (uint32_t)uold;
	}
	t->model_minor5 = t->model;
	t->model_minor5.struct_size = (uint32_t)offsetof(accel_model_v1, unit_info_size);
	t->model_minor5.unit_info_size = 0;
	t->model_minor5.units = (const accel_unit_info_v1 *)(const void *)t->uinfo_minor5;
	t->model_minor2 = t->model_minor5;
	t->model_minor2.struct_size = (uint32_t)offsetof(accel_model_v1, param_info_size);
	t->model_minor2.param_info_size = 0;
	t->model_minor2.params = (const accel_param_info_v1 *)(const void *)t->pinfo_minor2;
	return ACCEL_OK;
}

const accel_model_v1 *accelp_train_model(accel_train *t)
{
	return (t && (t->preparing || t->prepared)) ? &t->model : NULL;
}

const accel_model_v1 *accelp_train_model_for(accel_train *t, uint32_t abi_minor)
{
	const accel_model_v1 *m = accelp_train_model(t);
	if (!m || abi_minor >= 6)
		return m;
	return abi_minor < 3 ? &t->model_minor2 : &t->model_minor5;
}

int accelp_train_prepared(const accel_train *t)
{
	return t && t->prepared;
}

static int shards_params(accel_train *t)
{
	accel_active *s = accelp_train_strategy(t);
	return s && (s->caps & ACCEL_CAP_SHARD_PARAMS);
}

int accel_prepare(accel_ctx *ctx)
{
	accel_train *t = NULL;
	accel_active *s;
	int r;

	if ((r = accelp_train_need(ctx, "accel_prepare", &t)))
		return r;
	if (t->prepared)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: already called for this context");
	if (t->prepare_failed)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: an earlier call failed; free the "
		            "context and start again");
	if (!t->n_params)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: the model has no parameters; "
		            "register them with accel_model_add_param() first");
	s = accelp_train_strategy(t);
	if (!s || !s->inited)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: no strategy plugin is active");
	/* A strategy built before minor 3 knows one dtype per parameter: it
	 * would hand out a gradient buffer of the working dtype. */
	for (uint32_t i = 0; s->module && s->module->abi_minor < 3 && i < t->n_params; i++) {
		const param_rec *p = &t->params[i];
		if (p->grad_dtype != p->dtype || p->reduce_dtype != p->dtype)
			return terr(t, ACCEL_ERR_UNSUPPORTED, "accel_prepare: parameter '%s' has %s %s "
			            "apart from its working dtype %s, but strategy '%s' (%s) was built "
			            "against accel ABI 1.%u, which has one dtype per parameter: rebuild "
			            "it against ABI 1.3 or register the parameter without it", p->name,
			            p->grad_dtype != p->dtype ? "grad_dtype" : "reduce_dtype",
			            accel_dtype_name(p->grad_dtype != p->dtype ? p->grad_dtype
			                                                       : p->reduce_dtype),
			            accel_dtype_name(p->dtype), s->host.name, s->module->path,
			            s->module->abi_minor);
	}
	uint32_t n_uses = model_n_uses(t);
	if (n_uses && (!(s->caps & ACCEL_CAP_SHARED_PARAMS) ||
	               (s->module && s->module->abi_minor < 7))) {
		uint32_t u = 0;
		while (!t->units[u].n_uses)
			u++;
		return terr(t, ACCEL_ERR_UNSUPPORTED, "accel_prepare: unit '%s' uses parameter "
		            "'%s' of unit '%s' (accel_unit_use_param, a shared/tied parameter), but "
		            "strategy '%s' does not declare that it handles shared parameters "
		            "(ACCEL_CAP_SHARED_PARAMS, ABI 1.7)%s: choose a strategy that does "
		            "(ddp, zero, fsdp) or give each unit its own copy", t->units[u].name,
		            t->params[t->units[u].uses[0]].name,
		            t->units[t->params[t->units[u].uses[0]].unit].name, s->host.name,
		            s->module && s->module->abi_minor < 7 ? "; it was built before ABI 1.7"
		                                                  : "");
	}
	if ((r = build_model(t)))
		return r;
	t->preparing = 1;
	accelp_log(ACCEL_LOG_DEBUG, "prepare: %u parameters (%llu elements) in %u units, "
	          "%u optimizer groups, strategy %s", t->n_params,
	          (unsigned long long)t->model.total_numel, t->n_units, t->model.n_groups,
	          s->host.name);
	/* the project directory, before the first step: not at the first save */
	if ((r = accelp_ckpt_project_prepare(ctx))) {
		t->preparing = 0;
		t->prepare_failed = 1;
		return r;
	}
	r = s->vt->wrap(s->state);
	t->preparing = 0;
	if (r) {
		t->prepare_failed = 1;
		if (!ctx->err.code)
			terr(t, r, "accel_prepare: strategy '%s' failed to wrap the model (%s) and "
			     "gave no message", s->host.name, accel_status_str(r));
		return ctx->err.code;
	}
	if (!shards_params(t)) {
		for (uint32_t i = 0; i < t->n_params; i++) {
			param_rec *p = &t->params[i];
			if (!p->data || (!p->frozen && !p->grad)) {
				t->prepare_failed = 1;
				return terr(t, ACCEL_ERR_INTERNAL, "accel_prepare: strategy '%s' did not "
				            "bind the %s of parameter '%s' (a strategy without "
				            "ACCEL_CAP_SHARD_PARAMS must bind every parameter in wrap)",
				            s->host.name, p->data ? "gradient" : "data", p->name);
			}
		}
	}
	t->prepared = 1;
	t->micro = 0;
	if ((r = accelp_train_sched_update(t)))
		return r;
	/* a restarted job (ACCEL_RESUME) goes on from its checkpoint */
	return accelp_restart_resume(ctx);
}

/* ---- bindings -------------------------------------------------------------------- */

int accelp_train_param_bind(accel_train *t, uint32_t param, void *data, void *grad)
{
	if (!t)
		return ACCEL_ERR_INVALID_ARG;
	if (!t->preparing && !t->prepared)
		return terr(t, ACCEL_ERR_STATE, "param_bind(%u) called before accel_prepare()", param);
	if (param >= t->n_params)
		return terr(t, ACCEL_ERR_INVALID_ARG, "param_bind: parameter index %u out of range "
		            "(model has %u)", param, t->n_params);
	if (grad && t->params[param].frozen)
		return terr(t, ACCEL_ERR_INVALID_ARG, "param_bind: parameter '%s' is frozen and "
		            "has no gradient", t->params[param].name);
	t->params[param].data = data;
	t->params[param].grad = grad;
	return ACCEL_OK;
}

static void *param_ptr(accel_ctx *ctx, uint32_t param, int grad)
{
	accel_train *t = accelp_train_get(ctx);
	void *ptr;
	if (!t || param >= t->n_params) {
		if (ctx)
			accelp_log(ACCEL_LOG_DEBUG, "accel_param_%s: parameter index %u out of range",
			          grad ? "grad" : "data", param);
		return NULL;
	}
	if (!t->prepared) {
		accelp_log(ACCEL_LOG_DEBUG, "accel_param_%s('%s'): called before accel_prepare()",
		          grad ? "grad" : "data", t->params[param].name);
		return NULL;
	}
	ptr = grad ? t->params[param].grad : t->params[param].data;
	if (!ptr && (!grad || !t->params[param].frozen))
		accelp_log(ACCEL_LOG_DEBUG, "accel_param_%s('%s'): not materialized; strategy %s "
		          "holds unit '%s' only between accel_unit_pre_forward/pre_backward and "
		          "the matching post hook", grad ? "grad" : "data", t->params[param].name,
		          accelp_train_strategy(t)->host.name,
		          t->units[t->params[param].unit].name);
	return ptr;
}

void *accel_param_data(accel_ctx *ctx, uint32_t param)
{
	return param_ptr(ctx, param, 0);
}

void *accel_param_grad(accel_ctx *ctx, uint32_t param)
{
	return param_ptr(ctx, param, 1);
}

uint32_t accel_param_grad_dtype(const accel_ctx *ctx, uint32_t param)
{
	accel_train *t = accelp_train_get(ctx);
	return (t && param < t->n_params) ? t->params[param].grad_dtype : ACCEL_DTYPE_INVALID;
}

int accelp_train_param_view(accel_train *t, uint32_t param, accel_view *ret_data,
                           accel_view *ret_grad)
{
	if (!t)
		return ACCEL_ERR_INVALID_ARG;
	if (!t->preparing && !t->prepared)
		return terr(t, ACCEL_ERR_STATE, "param_view(%u) called before accel_prepare()", param);
	if (param >= t->n_params)
		return terr(t, ACCEL_ERR_INVALID_ARG, "param_view: parameter index %u out of range "
		            "(model has %u)", param, t->n_params);
	const param_rec *p = &t->params[param];
	if (ret_data)
		*ret_data = (accel_view){sizeof(accel_view), p->dtype, p->device, p->device_index,
		                         p->data, p->data ? p->numel : 0};
	if (ret_grad)
		*ret_grad = (accel_view){sizeof(accel_view), p->grad_dtype, p->device,
		                         p->device_index, p->grad, p->grad ? p->numel : 0};
	return ACCEL_OK;
}

/* ---- initial values ------------------------------------------------------------- */

/* Counter-based generator: a pure function of (seed, name, element), so any
 * range on any rank gets the same values (splitmix64 finalizer over a key
 * made from the seed and an FNV-1a hash of the name). */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * UINT64_C(0x100000001b3);
	return mix64(h ^ mix64(seed + UINT64_C(0x9e3779b97f4a7c15)));
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double counter_uniform(uint64_t key, uint64_t ctr)
{
	uint64_t x = mix64(key + ctr * UINT64_C(0x9e3779b97f4a7c15));
	return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static int produce_f32(accel_train *t, uint32_t param, uint64_t offset, uint64_t count,
                       float *out)
{
	param_rec *p = &t->params[param];
	uint64_t key;
	switch (p->init.kind) {
	case ACCEL_INIT_ZEROS:
		memset(out, 0, count * sizeof(float));
		return ACCEL_OK;
	case ACCEL_INIT_CONST:
		for (uint64_t i = 0; i < count; i++)
			out[i] = (float)p->init.a;
		return ACCEL_OK;
	case ACCEL_INIT_UNIFORM:
		key = name_key(t->seed, p->name);
		for (uint64_t i = 0; i < count; i++)
			out[i] = (float)(p->init.a + (p->init.b - p->init.a) *
			                              counter_uniform(key, offset + i));
		return ACCEL_OK;
	case ACCEL_INIT_NORMAL:
		key = name_key(t->seed, p->name);
		for (uint64_t i = 0; i < count; i++) {
			/* Box-Muller with two draws per element keeps every element a
			 * function of its own index. */
			double u1 = counter_uniform(key, 2 * (offset + i));
			double u2 = counter_uniform(key, 2 * (offset + i) + 1);
			double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
			out[i] = (float)(p->init.a + p->init.b * z);
		}
		return ACCEL_OK;
	case ACCEL_INIT_DATA: {
		size_t es = accel_dtype_size(p->init.data_dtype);
		accel_view src = {sizeof(src), p->init.data_dtype, ACCEL_DEVICE_CPU, 0,
		                  (char *)p->init_data + offset * es, count};
		accel_view dst = {sizeof(dst), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, out, count};
		return accelp_ops_copy(&dst, &src, &t->ctx->err);
	}
	case ACCEL_INIT_FN: {
		int rc = p->init.fn(p->init.user, p->name, offset, count, out);
		if (rc)
			return terr(t, ACCEL_ERR_INVALID_ARG, "init callback for parameter '%s' "
			            "returned %d for elements [%llu, %llu)", p->name, rc,
			            (unsigned long long)offset, (unsigned long long)(offset + count));
		return ACCEL_OK;
	}
	}
	return terr(t, ACCEL_ERR_INTERNAL, "parameter '%s': bad init kind", p->name);
}

int accelp_train_param_init(accel_train *t, uint32_t param, uint64_t offset,
                           const accel_view *dst)
{
	float *tmp = NULL;
	int r = ACCEL_OK;

	if (!t)
		return ACCEL_ERR_INVALID_ARG;
	if (param >= t->n_params)
		return terr(t, ACCEL_ERR_INVALID_ARG, "param_init: parameter index %u out of range "
		            "(model has %u)", param, t->n_params);
	if (!dst || dst->struct_size < sizeof(accel_view) || (!dst->data && dst->numel))
		return terr(t, ACCEL_ERR_INVALID_ARG, "param_init('%s'): bad destination view",
		            t->params[param].name);
	if (offset > t->params[param].numel || dst->numel > t->params[param].numel - offset)
		return terr(t, ACCEL_ERR_INVALID_ARG, "param_init('%s'): range [%llu, %llu) is "
		            "outside its %llu elements", t->params[param].name,
		            (unsigned long long)offset, (unsigned long long)(offset + dst->numel),
		            (unsigned long long)t->params[param].numel);
	if (!dst->numel)
		return ACCEL_OK;
	if (dst->dtype == ACCEL_DTYPE_F32 && dst->device == ACCEL_DEVICE_CPU)
		return produce_f32(t, param, offset, dst->numel, dst->data);

	size_t chunk = dst->numel < INIT_CHUNK ? (size_t)dst->numel : INIT_CHUNK;
	tmp = malloc(chunk * sizeof(float));
	if (!tmp)
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	size_t es = accel_dtype_size(dst->dtype);
	for (uint64_t done = 0; done < dst->numel; done += chunk) {
		uint64_t n = dst->numel - done < chunk ? dst->numel - done : chunk;
		accel_view src = {sizeof(src), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, tmp, n};
		accel_view part = *dst;
		part.struct_size = sizeof(part);
		part.data = (char *)dst->data + done * es;
		part.numel = n;
		if ((r = produce_f32(t, param, offset + done, n, tmp)) ||
		    (r = accelp_ops_copy(&part, &src, &t->ctx->err)))
			break;
	}
	free(tmp);
	return r;
}
