/* SPDX-License-Identifier: MIT */
/* core/select.c: the selection rules (the set-up that uses them is
 * core/setup.c). */
#include <stdio.h>
#include <string.h>

#include "accel-build-config.h"
#include "ctx-impl.h"
#include "log.h"
#include "select.h"

static int add(accel_select *sel, const char *name, const char *why, accel_err *err)
{
	if (accelp_select_has(sel, name))
		return ACCEL_OK;
	if (sel->n == ACCEL_SELECT_MAX)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "more than %d plugins selected (at '%s', from %s)",
		                     ACCEL_SELECT_MAX, name, why);
	sel->why[sel->n] = why;
	sel->names[sel->n++] = name;
	return ACCEL_OK;
}

int accelp_select_has(const accel_select *sel, const char *name)
{
	for (uint32_t i = 0; i < sel->n; i++)
		if (!strcmp(sel->names[i], name))
			return 1;
	return 0;
}

int accelp_select_from_config(const accel_config *cfg, accel_select *ret_sel, accel_err *err)
{
	accel_select sel = {.n = 0};
	const char *s = NULL;
	int r;
	if (accelp_config_peek_string(cfg, "strategy", &s) != ACCEL_OK || !s)
		s = "ddp";
	if ((r = add(&sel, s, "strategy", err)))
		return r;
	for (uint32_t i = 0; accelp_config_peek_strlist(cfg, "plugins", i, &s) == ACCEL_OK; i++) {
		/* said twice, or the strategy again: a slip worth naming, not
		 * something to fix up quietly */
		if (accelp_select_has(&sel, s))
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     strcmp(s, sel.names[0])
			                         ? "'%s' is listed more than once in plugins (%s)"
			                         : "'%s' is listed in plugins (%s) but is the strategy; "
			                           "list only hook plugins there",
			                     s, accelp_config_source(cfg, "plugins"));
		if ((r = add(&sel, s, "plugins", err)))
			return r;
	}
	if (accelp_config_peek_string(cfg, "mixed_precision", &s) == ACCEL_OK && s) {
		/* Accelerate's mixed_precision implies the plugin doing the work. */
		if (!strcmp(s, "fp16") && (r = add(&sel, "scaler", "mixed_precision=fp16", err)))
			return r;
		if (!strcmp(s, "fp8") && (r = add(&sel, "fp8", "mixed_precision=fp8", err)))
			return r;
	}
	if (accelp_config_peek_string(cfg, "backend", &sel.backend) != ACCEL_OK || !sel.backend)
		sel.backend = "auto";
	*ret_sel = sel;
	return ACCEL_OK;
}

/* A loaded module of that kind and name, usable here or not (its
 * requirements unmet), or NULL. */
static const accel_module *loaded_named(const accel_loader *ld, int kind, const char *name)
{
	for (uint32_t i = 0; i < accelp_loader_count(ld); i++) {
		const accel_module *m = accelp_loader_get(ld, i);
		if (m->kind == kind && m->name && !strcmp(m->name, name) &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE))
			return m;
	}
	return NULL;
}

/* Does comm module m serve buffers on `device`? */
static int serves(const accel_module *m, int device)
{
	return (m->devices & (1u << (unsigned)device)) != 0;
}

int accelp_select_backend_active(const accel_loader *ld, const char *backend, const char *name)
{
	if (!strcmp(backend, name))
		return 1;
	const accel_module *m = loaded_named(ld, ACCEL_MODULE_COMM, name);
	if (!m)
		return 0;
	/* auto may pick any loaded backend at run time (docs/comm.md) */
	if (!strcmp(backend, "auto"))
		return 1;
	/* a backend for device buffers only leaves host buffers to the one
	 * auto picks */
	const accel_module *b = loaded_named(ld, ACCEL_MODULE_COMM, backend);
	/* a backend that is not here at all: its absence is the error to
	 * report (at selection), not the other backends' sections */
	if (!b)
		return 1;
	return !serves(b, ACCEL_DEVICE_CPU) && serves(m, ACCEL_DEVICE_CPU);
}

uint32_t accelp_select_comm_scope(const accel_module *m)
{
	uint32_t s = m->comm->desc->scope & (ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES);
	return s ? s : ACCEL_COMM_SCOPE_DEFAULT;
}

static void note(char *why, size_t cap, size_t *used, const char *name, const char *what)
{
	if (*used >= cap)
		return;
	int n = snprintf(why + *used, cap - *used, "%s%s: %s", *used ? "; " : "", name, what);
	if (n > 0)
		*used += (size_t)n;
}

int accelp_select_comm_auto(const accel_loader *ld, int device, int32_t num_nodes,
                           accel_select_probe_fn probe, void *probe_arg,
                           const accel_module **ret_module, char *why, size_t cap,
                           int *ret_broken)
{
	const accel_module *best = NULL;
	size_t used = 0;
	int broken = 0;
	uint32_t need = num_nodes > 1 ? ACCEL_COMM_SCOPE_NODES : ACCEL_COMM_SCOPE_NODE;
	if (cap)
		why[0] = '\0';
	for (uint32_t i = 0; i < accelp_loader_count(ld); i++) {
		const accel_module *m = accelp_loader_get(ld, i);
		if (m->kind != ACCEL_MODULE_COMM || !m->name || m->status == ACCEL_MODULE_SHADOWED)
			continue;
		if (m->status == ACCEL_MODULE_BROKEN) {
			/* a broken file's descriptor is not to be trusted (nor may it
			 * have one): it is named for every device, so that a backend
			 * that should have served is never replaced in silence */
			char what[ACCEL_ERRMSG_MAX];
			snprintf(what, sizeof(what), "comm backend '%s' cannot be used: %s", m->name,
			         m->reason ? m->reason : "it cannot be loaded");
			broken++;
			note(why, cap, &used, m->name, what);
			continue;
		}
		if (!serves(m, device))
			continue;   /* not a candidate at all: not worth a word */
		if (m->status == ACCEL_MODULE_UNAVAILABLE) {
			note(why, cap, &used, m->name, m->cause ? m->cause : "requirements unmet here");
			continue;
		}
		if (!(accelp_select_comm_scope(m) & need)) {
			note(why, cap, &used, m->name,
			     num_nodes > 1 ? "serves one node only" : "serves jobs across nodes only");
			continue;
		}
		if (m->comm->probe && probe && !probe(probe_arg, m)) {
			note(why, cap, &used, m->name, "its probe says it cannot serve this job");
			continue;
		}
		int32_t p = m->comm->desc->preference, bp = best ? best->comm->desc->preference : 0;
		if (!best || p > bp || (p == bp && strcmp(m->name, best->name) < 0))
			best = m;
	}
	if (ret_broken)
		*ret_broken = broken;
	if (!best)
		return ACCEL_ERR_NOT_FOUND;
	*ret_module = best;
	return ACCEL_OK;
}

static int add_module_schema(accel_config *cfg, const accel_module *m, unsigned flags,
                             accel_err *err)
{
	if (m->kind == ACCEL_MODULE_PLUGIN && m->plugin->desc->config_section)
		return accelp_config_add_schema(cfg, m->plugin->desc->config_section, m->name,
		                               m->plugin->desc->params, m->plugin->desc->n_params,
		                               flags, err);
	if (m->kind == ACCEL_MODULE_COMM && m->comm->desc->config_section)
		return accelp_config_add_schema(cfg, m->comm->desc->config_section, m->name,
		                               m->comm->desc->params, m->comm->desc->n_params,
		                               flags | ACCEL_SCHEMA_BACKEND, err);
	return ACCEL_OK;
}

int accelp_select_register_schemas(accel_config *cfg, const accel_loader *ld,
                                  const accel_select *sel, accel_err *err)
{
	/* The selected modules first, so that a clash with a module that is
	 * merely installed is that module's problem: it is skipped with a
	 * warning (its settings then count as unknown keys), while a clash
	 * between selected ones is an error naming the file. */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < accelp_loader_count(ld); i++) {
			const accel_module *m = accelp_loader_get(ld, i);
			if (m->status == ACCEL_MODULE_BROKEN || m->status == ACCEL_MODULE_SHADOWED)
				continue;
			int selected = m->kind == ACCEL_MODULE_PLUGIN
			                   ? accelp_select_has(sel, m->name)
			                   : accelp_select_backend_active(ld, sel->backend, m->name);
			if (selected != (pass == 0))
				continue;
			accel_err e;
			accelp_err_clear(&e);
			int r = add_module_schema(cfg, m, selected ? ACCEL_SCHEMA_SELECTED : 0, &e);
			if (!r)
				continue;
			if (r == ACCEL_ERR_NOMEM)
				return accelp_err_set(err, r, "%s", e.msg);
			if (selected)
				return accelp_err_set(err, r, "%s (file %s)", e.msg, m->path);
			accelp_log(ACCEL_LOG_WARN, "%s (file %s); it is not selected, so its settings "
			          "are ignored", e.msg, m->path);
		}
	return ACCEL_OK;
}

/* The module a selected plugin name stands for, also when this machine
 * lacks its requirements (then r is UNSUPPORTED and *ret is still set). */
static int find_plugin(accel_loader *ld, const char *name, const accel_module **ret,
                       accel_err *err)
{
	int r = accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, name, ret, err);
	if (r == ACCEL_ERR_UNSUPPORTED)
		*ret = loaded_named(ld, ACCEL_MODULE_PLUGIN, name);
	return r;
}

int accelp_select_modules(const accel_select *sel, accel_loader *ld, int allow_unmet,
                         const accel_module **ret_mods, accel_err *err)
{
	for (uint32_t i = 0; i < sel->n; i++) {
		const accel_module *m = NULL;
		int r = find_plugin(ld, sel->names[i], &m, err);
		if (r == ACCEL_ERR_NOT_FOUND && sel->why[i] && !strncmp(sel->why[i], "mixed_", 6)) {
			/* a plugin the user never named: say what asked for it */
			accel_err e = *err;
			accelp_err_clear(err);
			return accelp_err_set(err, r, "%s needs the '%s' plugin: %s", sel->why[i],
			                     sel->names[i], e.msg);
		}
		if (r && !(r == ACCEL_ERR_UNSUPPORTED && allow_unmet && m))
			return r;
		if (r)
			accelp_err_clear(err);
		uint32_t role = m->plugin->desc->role;
		if (i == 0 && role != ACCEL_ROLE_STRATEGY)
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "strategy '%s' (%s) is not a sharding strategy; list hook "
			                     "plugins under \"plugins\"", m->name, m->path);
		if (i > 0 && role == ACCEL_ROLE_STRATEGY)
			return accelp_err_set(err, ACCEL_ERR_CONFIG,
			                     "plugin '%s' (%s) is a sharding strategy; select it with "
			                     "\"strategy\" (only one strategy can be active; '%s' is)",
			                     m->name, m->path, sel->names[0]);
		for (uint32_t j = 1; j < i; j++)
			if (role != ACCEL_ROLE_OTHER && ret_mods[j]->plugin->desc->role == role)
				return accelp_err_set(err, ACCEL_ERR_CONFIG,
				                     "plugins '%s' and '%s' both have the %s role; "
				                     "select one", ret_mods[j]->name, m->name,
				                     accelp_loader_role_name(role));
		ret_mods[i] = m;
		/* A reduce hook must serve the way the strategy reduces.  With
		 * per-instance caps (ABI minor 6) that is known only after init:
		 * the context checks it then (core/ctx.c). */
		const accel_plugin_v1 *svt = ret_mods[0]->plugin;
		if (role == ACCEL_ROLE_REDUCE_HOOK && !svt->instance_caps) {
			int r2 = accelp_select_check_reduce_hook(ret_mods[0], svt->desc->caps, m, err);
			if (r2)
				return r2;
		}
	}
	return ACCEL_OK;
}

int accelp_select_check_reduce_hook(const accel_module *strat, uint32_t strat_caps,
                                   const accel_module *hook, accel_err *err)
{
	const accel_plugin_v1 *vt = hook->plugin;
	int scatter = (strat_caps & ACCEL_CAP_REDUCE_SCATTER) != 0;
	if (scatter ? vt->reduce_scatter_bucket != NULL
	            : vt->reduce_bucket != NULL || vt->reduce_bucket_v2 != NULL)
		return ACCEL_OK;
	return accelp_err_set(err, ACCEL_ERR_CONFIG,
	                     "reduce hook '%s' (%s) has no %s, and strategy '%s' reduces "
	                     "gradients with %s: select a hook that supports it or none",
	                     hook->name, hook->path,
	                     scatter ? "reduce_scatter_bucket" : "all-reduce slot", strat->name,
	                     scatter ? "reduce-scatter" : "all-reduce");
}
