/* SPDX-License-Identifier: MIT */
/* core/train.c: the training state's lifetime and the model registry
 * (accel_model_add, unit kinds, shared parameters; the user API's
 * @api-train section), and the helpers the other core/train_*.c share
 * (core/train_shared.h).
 *
 * The strategy plugin owns all tensor memory; core/train_prepare.c freezes
 * the registry into the model it sees and records where it binds each
 * parameter, core/train_hooks.c dispatches the unit hooks and keeps the
 * accumulation contract, core/train_step.c runs accel_step and the
 * optimizer (arithmetic in core/optim.c, schedule in core/lrsched.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "config.h"
#include "ctx-impl.h"
#include "log.h"
#include "mem.h"
#include "train-impl.h"
#include "train.h"
#include "train_shared.h"

#define MAX_NDIM 8

/* ---- lifetime ------------------------------------------------------------- */

static int cfg_get_int(accel_ctx *ctx, const char *key, int64_t def, int64_t *ret)
{
	int r = accelp_config_get_int(ctx->cfg, key, ret);
	if (r == ACCEL_ERR_NOT_FOUND) {
		*ret = def;
		return ACCEL_OK;
	}
	if (r)
		return accelp_err_set(&ctx->err, r, "config key '%s' must be an integer", key);
	return ACCEL_OK;
}

static int cfg_get_double(accel_ctx *ctx, const char *key, double def, double *ret)
{
	int r = accelp_config_get_double(ctx->cfg, key, ret);
	if (r == ACCEL_ERR_NOT_FOUND) {
		*ret = def;
		return ACCEL_OK;
	}
	if (r)
		return accelp_err_set(&ctx->err, r, "config key '%s' must be a number", key);
	return ACCEL_OK;
}

static const char *source(accel_ctx *ctx, const char *key)
{
	const char *s = accelp_config_source(ctx->cfg, key);
	return s ? s : "default";
}

int accelp_train_new(accel_ctx *ctx, accel_train **ret_train)
{
	accel_train *t = NULL;
	int64_t gas, seed;
	double max_norm;
	int r;

	if (!ctx || !ret_train)
		return ACCEL_ERR_INVALID_ARG;
	if ((r = cfg_get_int(ctx, "gradient_accumulation_steps", 1, &gas)) ||
	    (r = cfg_get_double(ctx, "max_grad_norm", 0.0, &max_norm)) ||
	    (r = cfg_get_int(ctx, "seed", 42, &seed)))
		return r;
	if (gas < 1 || gas > INT32_MAX)
		return accelp_err_set(&ctx->err, ACCEL_ERR_CONFIG,
		                     "gradient_accumulation_steps = %lld (%s): must be >= 1",
		                     (long long)gas, source(ctx, "gradient_accumulation_steps"));
	if (!(max_norm >= 0) || isinf(max_norm))
		return accelp_err_set(&ctx->err, ACCEL_ERR_CONFIG,
		                     "max_grad_norm = %g (%s): must be a finite number >= 0 "
		                     "(0 disables clipping)", max_norm,
		                     source(ctx, "max_grad_norm"));
	t = calloc(1, sizeof(*t));
	if (!t)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	t->ctx = ctx;
	t->gas = (uint32_t)gas;
	t->max_grad_norm = max_norm;
	t->seed = (uint64_t)seed;
	r = accelp_config_get_bool(ctx->cfg, "track_grad_norm", &t->track_grad_norm);
	if (r == ACCEL_ERR_NOT_FOUND)
		t->track_grad_norm = 0;
	else if (r) {
		r = accelp_err_set(&ctx->err, r, "config key 'track_grad_norm' must be true or false");
		goto fail;
	}
	if ((r = accelp_train_optim_new(t)))
		goto fail;
	if ((r = accelp_train_metrics_new(t)))
		goto fail;
	*ret_train = t;
	return ACCEL_OK;

fail:
	accelp_train_free(t);
	return r;
}

accel_train *accelp_train_free(accel_train *t)
{
	if (!t)
		return NULL;
	if (t->prepared && t->micro > 0)
		accelp_log(ACCEL_LOG_WARN, "the last %u micro-step%s of gradients since optimizer step "
		          "%llu never reached an update (gradient_accumulation_steps = %u does not "
		          "divide the micro-batches the program ran); they are dropped",
		          t->micro, t->micro == 1 ? "" : "s", (unsigned long long)t->step, t->gas);
	accelp_train_metrics_free(t);
	accelp_train_optim_free(t);
	if (t->dev_stats)
		accelp_mem_release(t->ctx, t->dev_stats);
	for (uint32_t i = 0; i < t->n_params; i++) {
		free(t->params[i].name);
		free(t->params[i].init_data);
	}
	for (uint32_t i = 0; i < t->n_units; i++) {
		free(t->units[i].name);
		free(t->units[i].kind);
		free(t->units[i].uses);
	}
	free(t->params);
	free(t->units);
	free(t->pinfo);
	free(t->pinfo_minor2);
	free(t->uinfo_minor5);
	free(t->uinfo);
	free(t->req_cbs);
	free(t);
	return NULL;
}

/* ---- registry ------------------------------------------------------------------ */

accel_train *accelp_train_get(const accel_ctx *ctx)
{
	return ctx ? ctx->train : NULL;
}

int accelp_train_need(const accel_ctx *ctx, const char *fn, accel_train **ret)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!ctx->train)
		return cerr(ctx, ACCEL_ERR_STATE, "%s: the context was not created successfully (%s)",
		            fn, ctx->err.code ? ctx->err.msg : "no training state");
	*ret = ctx->train;
	return ACCEL_OK;
}

accel_active *accelp_train_strategy(accel_train *t)
{
	return t->ctx->n_active ? &t->ctx->active[0] : NULL;
}

static int valid_name(const char *s)
{
	if (!s || !*s || strlen(s) > 255)
		return 0;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\')
			return 0;
	return 1;
}

static int find_param(const accel_train *t, const char *name)
{
	for (uint32_t i = 0; i < t->n_params; i++)
		if (!strcmp(t->params[i].name, name))
			return (int)i;
	return -1;
}

static int find_unit(const accel_train *t, const char *name)
{
	for (uint32_t i = 0; i < t->n_units; i++)
		if (!strcmp(t->units[i].name, name))
			return (int)i;
	return -1;
}

static int check_init(accel_train *t, const char *name, const accel_init *in, uint64_t numel)
{
	if (in->struct_size < offsetof(accel_init, user) + sizeof(in->user))
		return terr(t, ACCEL_ERR_INVALID_ARG,
		            "parameter '%s': init.struct_size %u is too small (use the "
		            "accel_init_* helpers or set struct_size = sizeof(accel_init))",
		            name, in->struct_size);
	switch (in->kind) {
	case ACCEL_INIT_ZEROS:
		return ACCEL_OK;
	case ACCEL_INIT_CONST:
		if (!isfinite(in->a))
			return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': constant init value %g "
			            "is not finite", name, in->a);
		return ACCEL_OK;
	case ACCEL_INIT_UNIFORM:
		if (!isfinite(in->a) || !isfinite(in->b) || !(in->a <= in->b))
			return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': uniform init needs "
			            "finite lo <= hi (got [%g, %g))", name, in->a, in->b);
		return ACCEL_OK;
	case ACCEL_INIT_NORMAL:
		if (!isfinite(in->a) || !isfinite(in->b) || in->b < 0)
			return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': normal init needs a "
			            "finite mean and std >= 0 (got mean %g, std %g)", name, in->a,
			            in->b);
		return ACCEL_OK;
	case ACCEL_INIT_DATA:
		if (!in->data && numel)
			return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': init data is NULL", name);
		if (in->data_dtype != ACCEL_DTYPE_F32 && in->data_dtype != ACCEL_DTYPE_F64 &&
		    in->data_dtype != ACCEL_DTYPE_F16 && in->data_dtype != ACCEL_DTYPE_BF16)
			return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': init data dtype %u "
			            "is not one of f32, f64, f16, bf16", name, in->data_dtype);
		return ACCEL_OK;
	case ACCEL_INIT_FN:
		if (!in->fn)
			return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': init callback is NULL",
			            name);
		return ACCEL_OK;
	default:
		return terr(t, ACCEL_ERR_INVALID_ARG, "parameter '%s': unknown init kind %u", name,
		            in->kind);
	}
}

/* The optional dtypes of accel_param_desc (0: the default). */
static int check_dtype(accel_train *t, const char *name, const char *what, uint32_t dtype,
                       int fp8_ok)
{
	if (dtype == ACCEL_DTYPE_INVALID || dtype == ACCEL_DTYPE_F32 ||
	    dtype == ACCEL_DTYPE_F16 || dtype == ACCEL_DTYPE_BF16)
		return ACCEL_OK;
	if (fp8_ok && (dtype == ACCEL_DTYPE_F8E4M3 || dtype == ACCEL_DTYPE_F8E5M2))
		return ACCEL_OK;
	return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): %s %s is not one of f32, "
	            "f16, bf16%s (or 0 for the default)", name ? name : "(null)", what,
	            accel_dtype_name(dtype) ? accel_dtype_name(dtype) : "(invalid)",
	            fp8_ok ? ", f8e4m3, f8e5m2" : "");
}

int accel_model_add(accel_ctx *ctx, const accel_param_desc *d, uint32_t *ret_param)
{
	accel_train *t = NULL;
	param_rec *p;
	uint64_t numel = 1;
	int r, u;

	if ((r = accelp_train_need(ctx, "accel_model_add", &t)))
		return r;
	if (!d)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add: desc is NULL");
	if (d->struct_size < offsetof(accel_param_desc, init) + sizeof(d->init))
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add: desc.struct_size %u is too "
		            "small (set it to sizeof(accel_param_desc))", d->struct_size);
	if (t->prepared || t->preparing)
		return terr(t, ACCEL_ERR_STATE, "accel_model_add('%s'): the model is frozen by "
		            "accel_prepare(); register every parameter before it",
		            d->name ? d->name : "(null)");
	if (!valid_name(d->name))
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add: parameter name %s%s%s is "
		            "empty, too long or has control/quote characters",
		            d->name ? "'" : "", d->name ? d->name : "NULL", d->name ? "'" : "");
	if (!valid_name(d->unit))
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): unit name is missing "
		            "or invalid", d->name);
	if (find_param(t, d->name) >= 0)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add: parameter '%s' is already "
		            "registered (names must be unique)", d->name);
	if (d->dtype != ACCEL_DTYPE_F32 && d->dtype != ACCEL_DTYPE_F16 &&
	    d->dtype != ACCEL_DTYPE_BF16)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): dtype %s is not a "
		            "training dtype (use f32, f16 or bf16)", d->name,
		            accel_dtype_name(d->dtype) ? accel_dtype_name(d->dtype) : "(invalid)");
	uint32_t grad_dtype = d->dtype, reduce_dtype = 0, compute_dtype = d->dtype;
	if (ACCEL_STRUCT_HAS(d, accel_param_desc, compute_dtype)) {
		if ((r = check_dtype(t, d->name, "grad_dtype", d->grad_dtype, 0)) ||
		    (r = check_dtype(t, d->name, "reduce_dtype", d->reduce_dtype, 0)) ||
		    (r = check_dtype(t, d->name, "compute_dtype", d->compute_dtype, 1)))
			return r;
		grad_dtype = d->grad_dtype ? d->grad_dtype : d->dtype;
		reduce_dtype = d->reduce_dtype;
		compute_dtype = d->compute_dtype ? d->compute_dtype : d->dtype;
	}
	if (!reduce_dtype)
		reduce_dtype = grad_dtype;
	if (d->ndim > MAX_NDIM)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): ndim %u > %d",
		            d->name, d->ndim, MAX_NDIM);
	if (d->ndim && !d->shape)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): shape is NULL",
		            d->name);
	for (uint32_t i = 0; i < d->ndim; i++) {
		if (d->shape[i] <= 0)
			return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): shape[%u] = %lld "
			            "must be > 0", d->name, i, (long long)d->shape[i]);
		if ((uint64_t)d->shape[i] > (UINT64_C(1) << 48) / numel)
			return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): too many "
			            "elements", d->name);
		numel *= (uint64_t)d->shape[i];
	}
	if (d->device != ACCEL_DEVICE_CPU && d->device != ACCEL_DEVICE_CUDA)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): unknown device %d",
		            d->name, d->device);
	if (d->init && (r = check_init(t, d->name, d->init, numel)))
		return r;

	u = find_unit(t, d->unit);
	if (u >= 0 && (uint32_t)u != t->n_units - 1)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): unit '%s' was "
		            "registered before unit '%s'; a unit's parameters must be registered "
		            "one after the other", d->name, d->unit, t->units[t->n_units - 1].name);
	const char *kind = ACCEL_STRUCT_HAS(d, accel_param_desc, unit_kind) ? d->unit_kind : NULL;
	if (kind && !valid_name(kind))
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): unit_kind of unit '%s' "
		            "is empty, too long or has control/quote characters", d->name, d->unit);
	if (kind && u >= 0 && t->units[u].kind && strcmp(t->units[u].kind, kind))
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_model_add('%s'): unit_kind '%s' differs "
		            "from unit '%s''s kind '%s'; give every parameter of a unit the same "
		            "kind (or NULL)", d->name, kind, d->unit, t->units[u].kind);
	char *kind_copy = NULL;
	if (kind && (u < 0 || !t->units[u].kind) && !(kind_copy = strdup(kind)))
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");

	/* Grow both arrays first so that nothing below can fail half-way. */
	if (t->n_params == t->cap_params) {
		uint32_t cap = t->cap_params ? t->cap_params * 2 : 16;
		param_rec *np = realloc(t->params, cap * sizeof(*np));
		if (!np) {
			free(kind_copy);
			return terr(t, ACCEL_ERR_NOMEM, "out of memory");
		}
		t->params = np;
		t->cap_params = cap;
	}
	if (u < 0 && t->n_units == t->cap_units) {
		uint32_t cap = t->cap_units ? t->cap_units * 2 : 16;
		unit_rec *nu = realloc(t->units, cap * sizeof(*nu));
		if (!nu) {
			free(kind_copy);
			return terr(t, ACCEL_ERR_NOMEM, "out of memory");
		}
		t->units = nu;
		t->cap_units = cap;
	}
	p = &t->params[t->n_params];
	memset(p, 0, sizeof(*p));
	p->name = strdup(d->name);
	if (!p->name) {
		free(kind_copy);
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	}
	if (d->init) {
		p->init = *d->init;
		p->init.struct_size = sizeof(p->init);
	} else {
		p->init = (accel_init){.struct_size = sizeof(accel_init), .kind = ACCEL_INIT_ZEROS};
	}
	if (p->init.kind == ACCEL_INIT_DATA) {
		size_t bytes = (size_t)numel * accel_dtype_size(p->init.data_dtype);
		p->init_data = malloc(bytes ? bytes : 1);
		if (!p->init_data) {
			free(p->name);
			free(kind_copy);
			return terr(t, ACCEL_ERR_NOMEM, "accel_model_add('%s'): out of memory copying "
			            "%zu bytes of initial values", d->name, bytes);
		}
		memcpy(p->init_data, d->init->data, bytes);
		p->init.data = p->init_data;
	}
	if (u < 0) {
		unit_rec *ur = &t->units[t->n_units];
		memset(ur, 0, sizeof(*ur));
		ur->name = strdup(d->unit);
		if (!ur->name) {
			free(p->name);
			free(p->init_data);
			free(kind_copy);
			return terr(t, ACCEL_ERR_NOMEM, "out of memory");
		}
		ur->first_param = t->n_params;
		u = (int)t->n_units++;
	}
	if (kind_copy)
		t->units[u].kind = kind_copy;
	t->units[u].n_params++;
	t->units[u].numel += numel;
	p->dtype = d->dtype;
	p->grad_dtype = grad_dtype;
	p->reduce_dtype = reduce_dtype;
	p->compute_dtype = compute_dtype;
	p->unit = (uint32_t)u;
	p->group = accelp_train_param_group(t, d->name);
	p->ndim = d->ndim;
	for (uint32_t i = 0; i < d->ndim; i++)
		p->shape[i] = d->shape[i];
	p->numel = numel;
	p->device = d->device;
	p->device_index = d->device_index;
	p->frozen = d->frozen ? 1 : 0;
	if (ret_param)
		*ret_param = t->n_params;
	t->n_params++;
	return ACCEL_OK;
}

int accel_model_add_param(accel_ctx *ctx, const char *unit, const char *name, uint32_t dtype,
                          uint32_t ndim, const int64_t *shape, const accel_init *init,
                          uint32_t *ret_param)
{
	accel_param_desc d = {
		.struct_size = sizeof(d),
		.dtype = dtype,
		.unit = unit,
		.name = name,
		.ndim = ndim,
		.shape = shape,
		.device = ACCEL_DEVICE_CPU,
		.init = init,
	};
	return accel_model_add(ctx, &d, ret_param);
}

accel_init accel_init_const(double value)
{
	return (accel_init){.struct_size = sizeof(accel_init), .kind = ACCEL_INIT_CONST, .a = value};
}

accel_init accel_init_uniform(double lo, double hi)
{
	return (accel_init){.struct_size = sizeof(accel_init), .kind = ACCEL_INIT_UNIFORM,
	                    .a = lo, .b = hi};
}

accel_init accel_init_normal(double mean, double std)
{
	return (accel_init){.struct_size = sizeof(accel_init), .kind = ACCEL_INIT_NORMAL,
	                    .a = mean, .b = std};
}

accel_init accel_init_data(const float *values)
{
	return (accel_init){.struct_size = sizeof(accel_init), .kind = ACCEL_INIT_DATA,
	                    .data = values, .data_dtype = ACCEL_DTYPE_F32};
}

accel_init accel_init_callback(accel_init_fn fn, void *user)
{
	return (accel_init){.struct_size = sizeof(accel_init), .kind = ACCEL_INIT_FN, .fn = fn,
	                    .user = user};
}

int accel_model_find_param(const accel_ctx *ctx, const char *name, uint32_t *ret_param)
{
	accel_train *t = accelp_train_get(ctx);
	int i = (t && name) ? find_param(t, name) : -1;
	if (i < 0)
		return ACCEL_ERR_NOT_FOUND;
	if (ret_param)
		*ret_param = (uint32_t)i;
	return ACCEL_OK;
}

int accel_model_find_unit(const accel_ctx *ctx, const char *name, uint32_t *ret_unit)
{
	accel_train *t = accelp_train_get(ctx);
	int i = (t && name) ? find_unit(t, name) : -1;
	if (i < 0)
		return ACCEL_ERR_NOT_FOUND;
	if (ret_unit)
		*ret_unit = (uint32_t)i;
	return ACCEL_OK;
}

uint32_t accel_model_n_params(const accel_ctx *ctx)
{
	accel_train *t = accelp_train_get(ctx);
	return t ? t->n_params : 0;
}

uint32_t accel_model_n_units(const accel_ctx *ctx)
{
	accel_train *t = accelp_train_get(ctx);
	return t ? t->n_units : 0;
}

uint64_t accel_param_numel(const accel_ctx *ctx, uint32_t param)
{
	accel_train *t = accelp_train_get(ctx);
	return (t && param < t->n_params) ? t->params[param].numel : 0;
}

const char *accel_param_name(const accel_ctx *ctx, uint32_t param)
{
	accel_train *t = accelp_train_get(ctx);
	return (t && param < t->n_params) ? t->params[param].name : NULL;
}

const char *accel_unit_name(const accel_ctx *ctx, uint32_t unit)
{
	accel_train *t = accelp_train_get(ctx);
	return (t && unit < t->n_units) ? t->units[unit].name : NULL;
}

int accel_unit_set_kind(accel_ctx *ctx, const char *unit, const char *kind)
{
	accel_train *t = NULL;
	int r, u;
	if ((r = accelp_train_need(ctx, "accel_unit_set_kind", &t)))
		return r;
	if (!unit)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_set_kind: unit is NULL");
	if (t->prepared || t->preparing)
		return terr(t, ACCEL_ERR_STATE, "accel_unit_set_kind('%s'): the model is frozen by "
		            "accel_prepare(); set unit kinds before it", unit);
	if ((u = find_unit(t, unit)) < 0)
		return terr(t, ACCEL_ERR_NOT_FOUND, "accel_unit_set_kind: no unit '%s' is "
		            "registered; register its parameters (accel_model_add) first", unit);
	if (kind && !valid_name(kind))
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_set_kind('%s'): the kind is empty, "
		            "too long or has control/quote characters", unit);
	char *copy = NULL;
	if (kind && !(copy = strdup(kind)))
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	free(t->units[u].kind);
	t->units[u].kind = copy;
	return ACCEL_OK;
}

const char *accel_unit_kind(const accel_ctx *ctx, uint32_t unit)
{
	accel_train *t = accelp_train_get(ctx);
	return (t && unit < t->n_units) ? t->units[unit].kind : NULL;
}

int accel_unit_use_param(accel_ctx *ctx, const char *unit, uint32_t param)
{
	accel_train *t = NULL;
	int r, u;
	if ((r = accelp_train_need(ctx, "accel_unit_use_param", &t)))
		return r;
	if (!unit)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_use_param: unit is NULL");
	if (t->prepared || t->preparing)
		return terr(t, ACCEL_ERR_STATE, "accel_unit_use_param('%s', %u): the model is frozen "
		            "by accel_prepare(); declare shared parameters before it", unit, param);
	if ((u = find_unit(t, unit)) < 0)
		return terr(t, ACCEL_ERR_NOT_FOUND, "accel_unit_use_param: no unit '%s' is "
		            "registered; register its own parameters (accel_model_add) first", unit);
	if (param >= t->n_params)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_use_param('%s'): parameter index "
		            "%u out of range (the model has %u)", unit, param, t->n_params);
	const param_rec *p = &t->params[param];
	if (p->unit == (uint32_t)u)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_use_param('%s'): parameter '%s' "
		            "belongs to unit '%s' already; declare only a use by another unit", unit,
		            p->name, unit);
	if (p->unit > (uint32_t)u)
		return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_use_param('%s'): parameter '%s' "
		            "belongs to unit '%s', which comes later in forward order; a shared "
		            "parameter is registered by the first unit that uses it", unit, p->name,
		            t->units[p->unit].name);
	unit_rec *ur = &t->units[u];
	for (uint32_t i = 0; i < ur->n_uses; i++)
		if (ur->uses[i] == param)
			return terr(t, ACCEL_ERR_INVALID_ARG, "accel_unit_use_param('%s'): unit "
			            "already uses parameter '%s'", unit, p->name);
	uint32_t *n = realloc(ur->uses, (ur->n_uses + 1) * sizeof(*n));
	if (!n)
		return terr(t, ACCEL_ERR_NOMEM, "out of memory");
	n[ur->n_uses++] = param;
	ur->uses = n;
	return ACCEL_OK;
}

const uint32_t *accel_unit_shared_params(const accel_ctx *ctx, uint32_t unit, uint32_t *ret_n)
{
	accel_train *t = accelp_train_get(ctx);
	const unit_rec *u = (t && unit < t->n_units) ? &t->units[unit] : NULL;
	if (ret_n)
		*ret_n = u ? u->n_uses : 0;
	return u && u->n_uses ? u->uses : NULL;
}
