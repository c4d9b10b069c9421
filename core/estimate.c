/* SPDX-License-Identifier: MIT */
/* core/estimate.c: a strategy plugin's memory estimate without a job
 * (estimate.h; `accel estimate-memory`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ctx-impl.h"
#include "estimate.h"
#include "loader.h"
#include "mem.h"
#include "optim.h"
#include "select.h"
#include "setup.h"

uint32_t accelp_estimate_dtype_of(const char *mp)
{
	if (!mp)
		return ACCEL_DTYPE_INVALID;
	if (!strcmp(mp, "no"))
		return ACCEL_DTYPE_F32;
	if (!strcmp(mp, "fp16"))
		return ACCEL_DTYPE_F16;
	/* fp8 computes its GEMMs in fp8 from bf16 working weights (the
	 * recipe's scaled copies are the fp8 plugin's buffers, not weights) */
	if (!strcmp(mp, "bf16") || !strcmp(mp, "fp8"))
		return ACCEL_DTYPE_BF16;
	return ACCEL_DTYPE_INVALID;
}

/* The model description must be one a strategy can trust without
 * checking: counts that add up, dtypes that exist. */
static int check_in(const accel_estimate_in_v1 *in, accel_err *err)
{
	if (in->world_size < 1)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: world size %d; it must be at "
		                     "least 1", (int)in->world_size);
	if (in->local_world_size < 1 || in->local_world_size > in->world_size)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: %d ranks per node for a world "
		                     "of %d; it must be 1 .. the world size",
		                     (int)in->local_world_size, (int)in->world_size);
	if (in->device != ACCEL_DEVICE_CPU && in->device != ACCEL_DEVICE_CUDA)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: unknown device kind %d",
		                     (int)in->device);
	if (in->n_params && !in->numel)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: %u parameters but no "
		                     "element counts", in->n_params);
	if (in->n_units && !in->unit_numel)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: %u units but no element "
		                     "counts", in->n_units);
	uint64_t sum = 0;
	for (uint32_t i = 0; i < in->n_params; i++) {
		if (in->numel[i] > UINT64_MAX - sum)
			return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: the parameters' element "
			                     "counts overflow 64 bits");
		sum += in->numel[i];
		if (in->dtype && !accel_abi_dtype_size(in->dtype[i]))
			return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: parameter %u has an "
			                     "unknown dtype %u", i, in->dtype[i]);
	}
	if (in->n_params && sum != in->total_numel)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: total_numel %llu is not the "
		                     "sum of the %u parameters' counts (%llu)",
		                     (unsigned long long)in->total_numel, in->n_params,
		                     (unsigned long long)sum);
	if (!in->total_numel)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: the model has no elements");
	uint64_t usum = 0;
	for (uint32_t u = 0; u < in->n_units; u++) {
		if (in->unit_numel[u] > UINT64_MAX - usum)
			return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: the units' element counts "
			                     "overflow 64 bits");
		usum += in->unit_numel[u];
	}
	if (in->n_units && usum != in->total_numel)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: the units hold %llu elements, "
		                     "the parameters %llu", (unsigned long long)usum,
		                     (unsigned long long)in->total_numel);
	return ACCEL_OK;
}

/* The selection whose sections are declared active: the strategy asked
 * about first, then what the configuration selects, then every other
 * installed strategy.  One config serves every row of `accel
 * estimate-memory`: its zero_optimization section is no error on the
 * ddp row, and is still checked against zero's schema. */
static int selection(const accel_config *cfg, const accel_loader *ld, const char *strategy,
                     accel_select *ret, accel_err *err)
{
	accel_select sel;
	int r = accelp_select_from_config(cfg, &sel, err);
	if (r)
		return r;
	accel_select want = {.n = 1, .backend = sel.backend};
	want.names[0] = strategy;
	want.why[0] = "estimate-memory";
	for (uint32_t i = 0; i < sel.n && want.n < ACCEL_SELECT_MAX; i++)
		if (!accelp_select_has(&want, sel.names[i])) {
			want.names[want.n] = sel.names[i];
			want.why[want.n++] = sel.why[i];
		}
	for (uint32_t i = 0; i < accelp_loader_count(ld) && want.n < ACCEL_SELECT_MAX; i++) {
		const accel_module *m = accelp_loader_get(ld, i);
		if (m->kind == ACCEL_MODULE_PLUGIN && m->name && m->role == ACCEL_ROLE_STRATEGY &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE) &&
		    !accelp_select_has(&want, m->name)) {
			want.names[want.n] = m->name;
			want.why[want.n++] = "estimate-memory";
		}
	}
	*ret = want;
	return ACCEL_OK;
}

/* What the plugin returned, made safe to pass on (as ctx.c does for
 * init/validate): a positive value is a plugin bug, and a message recorded
 * by a call that then returned OK does not stand. */
static int call_estimate(accel_ctx *ctx, const accel_module *m, accel_host *h,
                         const accel_estimate_in_v1 *in, accel_estimate_out_v1 *out,
                         accel_err *err)
{
	int r = m->plugin->estimate_memory(accelp_host_table(), h, in, out);
	if (r > 0)
		return accelp_err_set(err, ACCEL_ERR_PLUGIN, "strategy '%s' (%s): estimate_memory "
		                     "returned %d, which is not an accel status", m->name, m->path, r);
	if (r == ACCEL_OK)
		return ACCEL_OK;
	if (ctx->err.code)
		return accelp_err_set(err, r, "strategy '%s' (%s): no estimate: %s", m->name, m->path,
		                     ctx->err.msg);
	return accelp_err_set(err, r, "strategy '%s' (%s): estimate_memory failed with %s and no "
	                     "message", m->name, m->path, accel_status_str(r));
}

int accelp_estimate_memory(const accelp_estimate_opts *o, accelp_estimate_result *ret,
                          accel_err *err)
{
	accelp_setup s;
	accel_ctx *ctx = NULL;
	accel_optim *optim = NULL;
	const accel_module *mods[ACCEL_SELECT_MAX];
	int r;

	memset(&s, 0, sizeof(s));
	if (!o || !o->setup || !o->strategy || !*o->strategy || !ret)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "accelp_estimate_memory: opts, setup, strategy and ret are required");
	accel_estimate_in_v1 in = o->in;
	in.struct_size = sizeof(in);
	if ((r = check_in(&in, err)))
		return r;

	accelp_setup_opts so = *o->setup;
	so.resolve = 0;
	so.module_errors_first = 0;
	so.config_optional = 0;
	if ((r = accelp_setup_run(&so, &s, err)))
		goto out;
	for (const char *const *p = o->overrides; p && *p; p++)
		if ((r = accelp_config_set(s.cfg, *p, o->overrides_origin ? o->overrides_origin
		                                                         : "estimate-memory variant",
		                          err)))
			goto out;

	/* The strategy first: one that is not installed is the story, not the
	 * "unknown key" its section would otherwise be. */
	accel_select one = {.n = 1, .backend = "auto"};
	one.names[0] = o->strategy;
	one.why[0] = "estimate-memory";
	if ((r = accelp_select_modules(&one, s.loader, 1, mods, err)))
		goto out;
	const accel_module *m = mods[0];

	/* Without the slot the configuration does not matter (the variant's
	 * keys may not even be the plugin's). */
	if (!m->plugin->estimate_memory) {
		if (m->abi_minor >= 6)
			r = accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "strategy '%s' (%s) gives no "
			                  "memory estimate: it has no estimate_memory slot", m->name,
			                  m->path);
		else
			r = accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "strategy '%s' (%s) gives no "
			                  "memory estimate: it was built against plugin ABI 1.%u, before "
			                  "the estimate_memory slot (1.6)", m->name, m->path,
			                  m->abi_minor);
		goto out;
	}

	accel_select sel;
	if ((r = selection(s.cfg, s.loader, o->strategy, &sel, err)) ||
	    (r = accelp_select_register_schemas(s.cfg, s.loader, &sel, err)) ||
	    (r = accelp_config_resolve(s.cfg, err)))
		goto out;

	if (!in.default_dtype) {
		const char *mp = "no";
		(void)accelp_config_get_string(s.cfg, "mixed_precision", &mp);
		in.default_dtype = accelp_estimate_dtype_of(mp);
		if (!in.default_dtype) {
			r = accelp_err_set(err, ACCEL_ERR_CONFIG, "mixed_precision '%s' (%s) gives no "
			                  "working dtype", mp, accelp_config_source(s.cfg,
			                                                            "mixed_precision"));
			goto out;
		}
	} else if (!accel_abi_dtype_size(in.default_dtype)) {
		r = accelp_err_set(err, ACCEL_ERR_CONFIG, "estimate: unknown working dtype %u",
		                  in.default_dtype);
		goto out;
	}
	if (in.n_state == UINT32_MAX) {
		if ((r = accelp_optim_new_from_config(s.cfg, &optim, err)))
			goto out;
		in.n_state = accelp_optim_state_count(optim);
	}

	/* The context available() sees before init: configuration, world, an
	 * error slot; memory accounting so that a plugin allocating here is a
	 * leak we free, not a crash.  No model, no comm backend. */
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx || accelp_mem_new(&ctx->mem)) {
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	accelp_err_clear(&ctx->err);
	ctx->cfg = s.cfg;
	ctx->loader = s.loader;
	ctx->stream_device = -1;
	ctx->world = (accel_world_v1){
		.struct_size = sizeof(accel_world_v1),
		.rank = 0,
		.world_size = in.world_size,
		.local_rank = 0,
		.local_world_size = in.local_world_size,
		.node_rank = 0,
		.num_nodes = (in.world_size + in.local_world_size - 1) / in.local_world_size,
	};
	accel_host h = {.ctx = ctx, .module = m, .name = m->name,
	                .section = m->plugin->desc->config_section};
	memset(&ret->out, 0, sizeof(ret->out));
	ret->out.struct_size = sizeof(ret->out);
	if ((r = call_estimate(ctx, m, &h, &in, &ret->out, err)))
		goto out;
	ret->out.variant[sizeof(ret->out.variant) - 1] = '\0';
	ret->dtype = in.default_dtype;
	ret->n_state = in.n_state;
	snprintf(ret->plugin_path, sizeof(ret->plugin_path), "%s", m->path);

out:
	if (ctx) {
		ctx->mem = accelp_mem_free_all(ctx->mem, ctx);
		free(ctx);
	}
	accelp_optim_free(optim);
	accelp_setup_fini(&s);
	return r;
}
