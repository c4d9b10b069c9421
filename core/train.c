/* SPDX-License-Identifier: MIT */
/* core/train.c: the model registry, accel_prepare, unit hooks, gradient
 * accumulation and accel_step (the user API's @api-train section).
 *
 * The strategy plugin owns all tensor memory; this file only remembers what
 * the user registered, where the strategy says each parameter lives
 * (param_bind), and the step counters.  The optimizer arithmetic lives in
 * core/optim.c, the learning-rate schedule in core/lrsched.c. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "config.h"
#include "device.h"
#include "ctx-impl.h"
#include "loader.h"
#include "log.h"
#include "lrsched.h"
#include "mem.h"
#include "optim.h"
#include "ops.h"
#include "train-impl.h"
#include "train.h"
#include "optim_pool.h"

#define MAX_NDIM 8
#define INIT_CHUNK 65536u  /* f32 staging elements for non-f32 / device inits */

/* t->optim: optimizer.* (core/optim.c) and scheduler.* (core/lrsched.c). */
typedef struct optim_state {
	accel_optim *optim;
	accel_sched *sched;
} optim_state;

static int terr(accel_train *t, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int terr(accel_train *t, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_err_setv(&t->ctx->err, code, fmt, ap);
	va_end(ap);
	return code;
}

static int cerr(const accel_ctx *ctx, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int cerr(const accel_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;
	if (!ctx)
		return code;
	va_start(ap, fmt);
	/* The error record is the one mutable part of a const context. */
	accelp_err_setv((accel_err *)&ctx->err, code, fmt, ap);
	va_end(ap);
	return code;
}

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

static accel_train *get_train(const accel_ctx *ctx)
{
	return ctx ? ctx->train : NULL;
}

static int need_train(const accel_ctx *ctx, const char *fn, accel_train **ret)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!ctx->train)
		return cerr(ctx, ACCEL_ERR_STATE, "%s: the context was not created successfully (%s)",
		            fn, ctx->err.code ? ctx->err.msg : "no training state");
	*ret = ctx->train;
	return ACCEL_OK;
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

/* optimizer.no_decay suffixes -> group 1 (core/optim.c decides). */
static uint32_t param_group(accel_train *t, const char *name)
{
	optim_state *o = t->optim;
	return o && o->optim ? accelp_optim_group_of(o->optim, name) : 0;
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

	if ((r = need_train(ctx, "accel_model_add", &t)))
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
	p->group = param_group(t, d->name);
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
	accel_train *t = get_train(ctx);
	int i = (t && name) ? find_param(t, name) : -1;
	if (i < 0)
		return ACCEL_ERR_NOT_FOUND;
	if (ret_param)
		*ret_param = (uint32_t)i;
	return ACCEL_OK;
}

int accel_model_find_unit(const accel_ctx *ctx, const char *name, uint32_t *ret_unit)
{
	accel_train *t = get_train(ctx);
	int i = (t && name) ? find_unit(t, name) : -1;
	if (i < 0)
		return ACCEL_ERR_NOT_FOUND;
	if (ret_unit)
		*ret_unit = (uint32_t)i;
	return ACCEL_OK;
}

uint32_t accel_model_n_params(const accel_ctx *ctx)
{
	accel_train *t = get_train(ctx);
	return t ? t->n_params : 0;
}

uint32_t accel_model_n_units(const accel_ctx *ctx)
{
	accel_train *t = get_train(ctx);
	return t ? t->n_units : 0;
}

uint64_t accel_param_numel(const accel_ctx *ctx, uint32_t param)
{
	accel_train *t = get_train(ctx);
	return (t && param < t->n_params) ? t->params[param].numel : 0;
}

const char *accel_param_name(const accel_ctx *ctx, uint32_t param)
{
	accel_train *t = get_train(ctx);
	return (t && param < t->n_params) ? t->params[param].name : NULL;
}

const char *accel_unit_name(const accel_ctx *ctx, uint32_t unit)
{
	accel_train *t = get_train(ctx);
	return (t && unit < t->n_units) ? t->units[unit].name : NULL;
}

int accel_unit_set_kind(accel_ctx *ctx, const char *unit, const char *kind)
{
	accel_train *t = NULL;
	int r, u;
	if ((r = need_train(ctx, "accel_unit_set_kind", &t)))
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
	accel_train *t = get_train(ctx);
	return (t && unit < t->n_units) ? t->units[unit].kind : NULL;
}

int accel_unit_use_param(accel_ctx *ctx, const char *unit, uint32_t param)
{
	accel_train *t = NULL;
	int r, u;
	if ((r = need_train(ctx, "accel_unit_use_param", &t)))
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
	accel_train *t = get_train(ctx);
	const unit_rec *u = (t && unit < t->n_units) ? &t->units[unit] : NULL;
	if (ret_n)
		*ret_n = u ? u->n_uses : 0;
	return u && u->n_uses ? u->uses : NULL;
}

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

static accel_active *strategy(accel_train *t)
{
	return t->ctx->n_active ? &t->ctx->active[0] : NULL;
}

static int shards_params(accel_train *t)
{
	accel_active *s = strategy(t);
	return s && (s->caps & ACCEL_CAP_SHARD_PARAMS);
}

int accel_prepare(accel_ctx *ctx)
{
	accel_train *t = NULL;
	accel_active *s;
	int r;

	if ((r = need_train(ctx, "accel_prepare", &t)))
		return r;
	if (t->prepared)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: already called for this context");
	if (t->prepare_failed)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: an earlier call failed; free the "
		            "context and start again");
	if (!t->n_params)
		return terr(t, ACCEL_ERR_STATE, "accel_prepare: the model has no parameters; "
		            "register them with accel_model_add_param() first");
	s = strategy(t);
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
	return accelp_train_sched_update(t);
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
	accel_train *t = get_train(ctx);
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
		          strategy(t)->host.name, t->units[t->params[param].unit].name);
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
	accel_train *t = get_train(ctx);
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

/* ---- unit hooks ------------------------------------------------------------------ */

enum hook { PRE_FORWARD, POST_FORWARD, PRE_BACKWARD, POST_BACKWARD };
static const char *const hook_names[] = {"accel_unit_pre_forward", "accel_unit_post_forward",
                                         "accel_unit_pre_backward", "accel_unit_post_backward"};

static int run_hook(accel_ctx *ctx, uint32_t unit, enum hook which)
{
	accel_train *t = NULL;
	int r;
	if ((r = need_train(ctx, hook_names[which], &t)))
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

/* ---- accumulation and step ---------------------------------------------------------- */

int32_t accelp_train_sync_step(accel_train *t)
{
	return !t || t->micro + 1 >= t->gas;
}

int accel_sync_gradients(const accel_ctx *ctx)
{
	return accelp_train_sync_step(get_train(ctx)) ? 1 : 0;
}

int accel_set_grad_overwrite(accel_ctx *ctx, int on)
{
	accel_train *t = NULL;
	int r;
	if ((r = need_train(ctx, "accel_set_grad_overwrite", &t)))
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
	if ((r = need_train(ctx, "accel_set_grad_enabled", &t)))
		return r;
	t->grad_disabled = on ? 0 : 1;
	return ACCEL_OK;
}

int accel_grad_enabled(const accel_ctx *ctx)
{
	return accelp_train_grad_enabled(get_train(ctx)) ? 1 : 0;
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
	const accel_train *t = get_train(ctx);
	if (!t || !t->grad_overwrite)
		return 1;
	return t->micro > 0 ? 1 : 0;
}

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
	accel_train *t = get_train(ctx);
	double s = 1.0;
	if (t && loss_scale_of(t, &s))
		return 1.0;
	return s;
}

double accel_get_lr(const accel_ctx *ctx)
{
	accel_train *t = get_train(ctx);
	return t ? t->lr : 0.0;
}

uint64_t accel_get_step(const accel_ctx *ctx)
{
	accel_train *t = get_train(ctx);
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

	if ((r = need_train(ctx, "accel_step", &t)))
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
	s = strategy(t);
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
	accel_train *t = get_train(ctx);
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
