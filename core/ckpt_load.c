/* SPDX-License-Identifier: MIT */
/* core/ckpt_load.c: loading a checkpoint (docs/checkpoints.md,
 * "Loading"): every check against the job before anything changes, then
 * the parameters, each plugin's state (at any saving world size; under
 * another strategy every plugin reads the canonical tensors), the samplers
 * and the step. */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_impl.h"
#include "ckpt.h"
#include "ckpt_manifest.h"
#include "log.h"
#include "ops.h"
#include "safetensors.h"
#include "sampler.h"
#include "train.h"


int accelp_ckpt_bad(accel_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_err_setv(&ctx->err, ACCEL_ERR_CHECKPOINT, fmt, ap);
	va_end(ap);
	return ACCEL_ERR_CHECKPOINT;
}

/* Whether the manifest's plugins list `name`. */
static int listed(const accelp_ckpt_manifest *m, const char *name)
{
	json_t *p;
	size_t i;
	json_array_foreach(json_object_get(m->root, "plugins"), i, p) {
		json_t *n = json_object_get(p, "name");
		if (json_is_string(n) && !strcmp(json_string_value(n), name))
			return 1;
	}
	return 0;
}

/* A plugin's own message about its state names its tensors, not the
 * checkpoint (it is never told the path): put the directory in front. */
static void name_dir(accel_err *err, const char *dir)
{
	char msg[ACCEL_ERRMSG_MAX];
	/* the core's own messages (the host's ckpt_read_tensor) name its files */
	int n = snprintf(msg, sizeof(msg), "%s/", dir);
	if (!err->code || n < 0 || (size_t)n >= sizeof(msg) || strstr(err->msg, msg))
		return;
	/* (cut at the buffer's end, as every message is) */
	n = snprintf(msg, sizeof(msg), "checkpoint %s: ", dir);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return;
	size_t keep = strnlen(err->msg, sizeof(err->msg) - 1);
	if (keep > sizeof(msg) - 1 - (size_t)n)
		keep = sizeof(msg) - 1 - (size_t)n;
	memcpy(msg + n, err->msg, keep);
	msg[(size_t)n + keep] = '\0';
	memcpy(err->msg, msg, sizeof(msg));
}

/* The state version handed to active plugin `a`'s load_state: the one
 * the manifest lists for it; 0 for the strategy when the checkpoint was
 * saved under another one (no state of its own: it reads the canonical
 * tensors); otherwise an error. */
static uint32_t plugin_version(accel_ctx *ctx, const accelp_ckpt_manifest *m,
                               const accel_active *a, int *ret_rc)
{
	json_t *plugins = json_object_get(m->root, "plugins"), *p;
	const char *name = a->vt->desc->name;
	size_t i;
	json_array_foreach(plugins, i, p) {
		json_t *n = json_object_get(p, "name"), *v = json_object_get(p, "state_version");
		if (json_is_string(n) && !strcmp(json_string_value(n), name) && json_is_integer(v))
			return (uint32_t)json_integer_value(v);
	}
	if (a == &ctx->active[0] && a->vt->desc->role == ACCEL_ROLE_STRATEGY &&
	    !strcmp(m->strategy, name))
		/* its own checkpoint lists it: an edited manifest (the checksum
		 * passed: an older accel's) */
		*ret_rc = accelp_ckpt_bad(ctx, "%s: no state of plugin '%s', the strategy that saved "
		                          "the checkpoint (plugins does not list it)", m->path, name);
	/* another strategy, or a plugin switched on since the save (a reduce
	 * hook added mid-run): state_version 0, "no state", and it starts as
	 * it would without a checkpoint (docs/abi.md) */
	return 0;
}

/* Rank 0, loading under another strategy: name the saved plugins this job
 * does not run, whose blobs are not read. */
static void log_skipped(accel_ctx *ctx, const accelp_ckpt_manifest *m)
{
	json_t *plugins = json_object_get(m->root, "plugins"), *p;
	size_t i;
	json_array_foreach(plugins, i, p) {
		const char *name = json_string_value(json_object_get(p, "name"));
		int active = 0;
		for (uint32_t k = 0; name && k < ctx->n_active; k++)
			active |= !strcmp(ctx->active[k].vt->desc->name, name);
		if (!name || active)
			continue;
		char list[512] = "";
		size_t len = strlen(name), used = 0;
		uint64_t n = 0;
		for (uint32_t f = 0; f < m->n_files; f++) {
			const char *key;
			json_t *v;
			json_object_foreach((json_t *)m->files[f].blobs, key, v) {
				if (strncmp(key, name, len) || key[len] != '/')
					continue;
				if (n++ < 4 && used < sizeof(list) - 64)
					used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s:%s",
					                         n > 1 ? ", " : "", m->files[f].name, key);
			}
		}
		if (n)
			accelp_log(ACCEL_LOG_INFO, "accel_load_state: %s: saved under strategy '%s'; "
			           "this job runs '%s': skipping %" PRIu64 " blobs of plugin '%s', which "
			           "this job does not run (%s%s)", m->dir, m->strategy,
			           accelp_ckpt_strategy_name(ctx), n, name, list, n > 4 ? ", ..." : "");
		else
			accelp_log(ACCEL_LOG_INFO, "accel_load_state: %s: saved under strategy '%s'; "
			           "this job runs '%s', which reads the canonical tensors (plugin '%s' "
			           "saved no blobs)", m->dir, m->strategy, accelp_ckpt_strategy_name(ctx), name);
	}
}

static int same_shape(const accelp_ckpt_tensor *t, const accel_param_info_v1 *p)
{
	if (t->ndim != p->ndim)
		return 0;
	for (uint32_t d = 0; d < p->ndim; d++)
		if (t->shape[d] != (uint64_t)p->shape[d])
			return 0;
	return 1;
}

/* The tensors of parameter p in the manifest (param/, master/, optim/.../)
 * have its shape; param/ also its dtype. */
static int check_model(accel_ctx *ctx, const accelp_ckpt_manifest *m, const char **fresh)
{
	const accel_model_v1 *model = accelp_train_model(ctx->train);
	char s1[256], s2[256];
	for (uint32_t i = 0; i < model->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(model, i);
		uint64_t ps[ACCEL_CKPT_MAX_DIMS];
		for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
			ps[d] = (uint64_t)p->shape[d];
		char name[600];
		snprintf(name, sizeof(name), "param/%s", p->name);
		const accelp_ckpt_tensor *t = accelp_ckpt_manifest_find(m, name);
		if (!t)
			return accelp_ckpt_bad(ctx, "%s: no tensor '%s' (the model has parameter '%s' %s %s)", m->path,
			                       name, p->name, accel_dtype_name(p->dtype),
			                       accelp_ckpt_shape_str(ps, p->ndim, s2, sizeof(s2)));
		if (t->dtype != p->dtype || !same_shape(t, p))
			return accelp_ckpt_bad(ctx, "%s: tensor '%s' is %s %s; the model's parameter '%s' is %s %s",
			                       m->path, name, accel_dtype_name(t->dtype),
			                       accelp_ckpt_shape_str(t->shape, t->ndim, s1, sizeof(s1)), p->name,
			                       accel_dtype_name(p->dtype),
			                       accelp_ckpt_shape_str(ps, p->ndim, s2, sizeof(s2)));
	}
	/* what every strategy reads of the job's optimizer: its state under the
	 * canonical names (docs/abi.md#checkpoint-tensors), checked here, before
	 * anything changes.  Not where the saving strategy is the job's and
	 * wrote no canonical state: it kept its state as blobs (a strategy
	 * built before ABI 1.4), which it reads back itself. */
	const char *type = "adamw", *states[2] = {NULL, NULL};
	uint32_t ns = accelp_train_optim_state_count(ctx->train);
	if (accel_config_string(ctx, "optimizer.type", &type) != ACCEL_OK || !type)
		type = "adamw";
	for (uint32_t k = 0; k < ns && k < 2; k++)
		states[k] = accel_ckpt_optim_state_name(type, ns, k);
	const char *strat = accelp_ckpt_strategy_name(ctx);
	int canonical = 0;
	for (uint32_t k = 0; k < m->n_tensors && !canonical; k++)
		canonical = !strncmp(m->tensors[k].name, "master/", 7) ||
		            !strncmp(m->tensors[k].name, "optim/", 6);
	for (uint32_t i = 0; (canonical || strcmp(strat, m->strategy)) && i < model->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(model, i);
		for (uint32_t k = 0; p->requires_grad && k < 2 && states[k]; k++) {
			char name[600];
			snprintf(name, sizeof(name), "optim/%s/%s", states[k], p->name);
			if (accelp_ckpt_manifest_find(m, name) ||
			    (fresh[0] && !strcmp(fresh[0], states[k])) ||
			    (fresh[1] && !strcmp(fresh[1], states[k])))
				continue;
			if (strcmp(strat, m->strategy))
				return accelp_ckpt_bad(ctx, "%s: no tensor '%s', which this job's strategy "
				                       "'%s' reads: the checkpoint was saved under strategy "
				                       "'%s', which did not write it (another optimizer or "
				                       "model?)", m->path, name, strat, m->strategy);
			return accelp_ckpt_bad(ctx, "%s: no tensor '%s': this job's optimizer '%s' keeps "
			                       "state '%s' (was the checkpoint saved with another "
			                       "optimizer?)", m->path, name, type, states[k]);
		}
	}
	/* every master/ and optim/<state>/ tensor names a parameter of that shape */
	for (uint32_t k = 0; k < m->n_tensors; k++) {
		const accelp_ckpt_tensor *t = &m->tensors[k];
		const char *pn = NULL;
		if (!strncmp(t->name, "master/", 7))
			pn = t->name + 7;
		else if (!strncmp(t->name, "optim/", 6) && strchr(t->name + 6, '/'))
			pn = strchr(t->name + 6, '/') + 1;
		if (!pn)
			continue;
		for (uint32_t i = 0; i < model->n_params; i++) {
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(model, i);
			if (strcmp(p->name, pn))
				continue;
			/* f32 by the ABI (docs/abi.md#checkpoint-tensors): said here,
			 * before anything changes, not by the strategy mid-load */
			if (t->dtype != ACCEL_DTYPE_F32)
				return accelp_ckpt_bad(ctx, "%s: tensor '%s' is %s; master weights and "
				                       "optimizer state are f32 (the checkpoint is damaged, "
				                       "or not written by accel)", m->path, t->name,
				                       accel_dtype_name(t->dtype));
			if (!same_shape(t, p)) {
				uint64_t ps[ACCEL_CKPT_MAX_DIMS];
				for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
					ps[d] = (uint64_t)p->shape[d];
				return accelp_ckpt_bad(ctx, "%s: tensor '%s' has shape %s; the model's parameter '%s' has "
				                       "shape %s", m->path, t->name,
				                       accelp_ckpt_shape_str(t->shape, t->ndim, s1, sizeof(s1)), p->name,
				                       accelp_ckpt_shape_str(ps, p->ndim, s2, sizeof(s2)));
			}
		}
	}
	return ACCEL_OK;
}

/* The rank file a rank reads its registered generators from: its own at
 * the saving world size, rank 0's at another (docs/rng.md). */
static void rng_file(const accel_ctx *ctx, const accelp_ckpt_manifest *m, char *name, size_t cap)
{
	snprintf(name, cap, "rank%d.safetensors",
	         m->world_size == ctx->world.world_size ? ctx->world.rank : 0);
}

/* Every registered generator was saved with this job's key (and, at the
 * saving world size, lane): checked before anything changes.  Their saved
 * positions into ret_pos[0 .. n_rngs), for the load to seek to. */
static int check_rngs(accel_ctx *ctx, accelp_ckpt_manifest *m, uint64_t *ret_pos)
{
	char name[64], path[PATH_CAP];
	accel_err *err = &ctx->err;
	if (!ctx->n_rngs)
		return ACCEL_OK;
	rng_file(ctx, m, name, sizeof(name));
	accelp_ckpt_pjoin(path, sizeof(path), m->dir, name);
	accel_ckpt_reader r = {.err = err, .m = m, .file = accelp_ckpt_manifest_file_index(m, name)};
	int rc = accelp_st_reader_new(path, &r.st, err);
	for (uint32_t i = 0; !rc && i < ctx->n_rngs; i++) {
		accelp_ckpt_rng st;
		const accel_rng *g = ctx->rngs[i];
		char buf[32];
		snprintf(buf, sizeof(buf), "%u", i);
		if ((rc = accelp_ckpt_read(&r, "rng", buf, &st, sizeof(st), err)))
			break;
		if (st.key[0] != g->key[0] || st.key[1] != g->key[1] || st.reserved != g->reserved ||
		    (m->world_size == ctx->world.world_size && st.lane != g->lane))
			rc = accelp_ckpt_bad(ctx, "%s: generator %u (accel_rng_register order) was saved "
			                     "with key %08x%08x lane %u; this job's has key %08x%08x lane %u: "
			                     "make it the same way (seed, kind, id) as the saving job did",
			                     path, i, st.key[1], st.key[0], st.lane, g->key[1], g->key[0],
			                     g->lane);
		else
			ret_pos[i] = st.pos;
	}
	accelp_st_reader_free(r.st);
	return rc;
}

/* Checks that need no change to the job: manifest against the job, files;
 * the registered generators' saved positions into rng_pos. */
static int check_checkpoint(accel_ctx *ctx, accelp_ckpt_manifest *m, uint64_t *rng_pos,
                            const char **fresh)
{
	int rc = ACCEL_OK, changed = 0;
	if (m->unsealed && ctx->world.rank == 0)
		accelp_log(ACCEL_LOG_WARN, "accel_load_state: %s has no %s (an accel before the "
		           "manifest checksum wrote it): its fields are checked, but an edit of them "
		           "cannot be detected; a new save writes one", m->path, ACCELP_CKPT_SELF_KEY);
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->inited && a->vt->load_state && !listed(m, a->vt->desc->name) && !rc &&
		    ctx->world.rank == 0 && i > 0)
			accelp_log(ACCEL_LOG_INFO, "accel_load_state: %s: no state of plugin '%s', which "
			           "this job runs (the checkpoint was saved without it): its load_state "
			           "gets state_version 0 and it starts as without a checkpoint", m->dir,
			           a->vt->desc->name);
		if (a->inited && a->vt->load_state)
			plugin_version(ctx, m, a, &rc);
		if (rc)
			return rc;
	}
	if ((rc = accelp_ckpt_check_resume(ctx, m, fresh, &changed)))
		return rc;
	if (m->samplers != (int64_t)ctx->n_samplers)
		return accelp_ckpt_bad(ctx, "%s: %" PRId64 " samplers saved; this job has %u (create the same "
		                       "samplers before loading)", m->path, m->samplers, ctx->n_samplers);
	if (m->rngs != (int64_t)ctx->n_rngs)
		return accelp_ckpt_bad(ctx, "%s: %" PRId64 " generators saved; this job registered %u "
		                       "(accel_rng_register the same streams, in the same order, before "
		                       "loading)", m->path, m->rngs, ctx->n_rngs);
	char name[64];
	if (accelp_ckpt_manifest_file_index(m, "model.safetensors") < 0 ||
	    accelp_ckpt_manifest_file_index(m, "rank0.safetensors") < 0)
		return accelp_ckpt_bad(ctx, "%s: files lists no model.safetensors or rank0.safetensors", m->path);
	for (int64_t r = 0; r < m->world_size; r++) {
		snprintf(name, sizeof(name), "rank%" PRId64 ".safetensors", r);
		if (accelp_ckpt_manifest_file_index(m, name) < 0)
			return accelp_ckpt_bad(ctx, "%s: saved by %" PRId64 " processes but files lists no %s", m->path,
			                       m->world_size, name);
	}
	if ((rc = accelp_ckpt_manifest_check_files(m, &ctx->err)))
		return rc;
	if ((rc = check_model(ctx, m, fresh)))
		return rc;
	/* every file's header; the data is checked slice by slice and blob by
	 * blob as it is read (one pass over the bytes) */
	for (uint32_t i = 0; i < m->n_files; i++)
		if ((rc = accelp_ckpt_manifest_verify_header(m, i, &ctx->err)))
			return rc;
	if ((rc = check_rngs(ctx, m, rng_pos)))
		return rc;
	if (ctx->world.rank == 0 && strcmp(m->strategy, accelp_ckpt_strategy_name(ctx)))
		log_skipped(ctx, m);
	return ACCEL_OK;
}

typedef struct params_in {
	accelp_ckpt_manifest *m;
	void *stage;
} params_in;

/* One param/<name> tensor into the parameter's bound view: host memory of
 * the right dtype directly, anything else through a staging buffer. */
static int load_param(accel_ctx *ctx, uint32_t i, const accel_view *data, int transient,
                      void *arg)
{
	params_in *in = arg;
	accel_err *err = &ctx->err;
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(accelp_train_model(ctx->train), i);
	char name[600];
	(void)transient;
	snprintf(name, sizeof(name), "param/%s", p->name);
	const accelp_ckpt_tensor *t = accelp_ckpt_manifest_find(in->m, name);
	if (!t)   /* check_model saw it */
		return accelp_ckpt_bad(ctx, "%s: no tensor '%s'", in->m->path, name);
	if (data->device == ACCEL_DEVICE_CPU && data->dtype == p->dtype && data->data &&
	    data->numel == p->numel)   /* straight into the parameter */
		return accelp_ckpt_manifest_read(in->m, t, 0, p->numel, data->data, err);
	free(in->stage);
	size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
	if (!(in->stage = malloc(bytes ? bytes : 1)))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, in->stage, p->numel};
	int rc = accelp_ckpt_manifest_read(in->m, t, 0, p->numel, in->stage, err);
	return rc ? rc : accelp_ops_copy(data, &hv, err);
}

/* Every rank reads every param/ tensor; a strategy that shards parameters
 * takes back its owned range of each materialized unit (WRITEBACK). */
static int load_params(accel_ctx *ctx, accelp_ckpt_manifest *m)
{
	params_in in = {.m = m};
	int rc = accelp_ckpt_each_param(ctx, "accel_load_state", ACCEL_MATERIALIZE_WRITEBACK,
	                                load_param, &in);
	free(in.stage);
	return rc;
}

static int load_rank(accel_ctx *ctx, accelp_ckpt_manifest *m, const char **fresh)
{
	accel_err *err = &ctx->err;
	accel_ckpt_reader cr = {.err = err, .m = m, .saved_world = (int)m->world_size,
	                        .world = ctx->world.world_size,
	                        .strategy = accelp_ckpt_strategy_name(ctx),
	                        .fresh = {fresh[0], fresh[1]},
	                        .model = accelp_train_model(ctx->train)};
	accel_st_reader *r0 = NULL;
	char name[64], path[PATH_CAP];
	int rc = ACCEL_OK;
	if (m->world_size == ctx->world.world_size) {
		snprintf(name, sizeof(name), "rank%d.safetensors", ctx->world.rank);
		cr.file = accelp_ckpt_manifest_file_index(m, name);
		accelp_ckpt_pjoin(path, sizeof(path), m->dir, name);
		if ((rc = accelp_st_reader_new(path, &cr.st, err)))
			return rc;
	}
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (!a->inited || !a->vt->load_state)
			continue;
		uint32_t v = plugin_version(ctx, m, a, &rc);
		if (rc)
			goto out;
		a->host.ckpt = &cr;
		rc = a->vt->load_state(a->state, (accel_ckpt_reader *)&cr, v);
		a->host.ckpt = NULL;
		if (rc) {
			if (!ctx->err.code)
				accelp_err_set(err, rc, "%s: load_state from %s failed (%s)", a->host.name,
				               m->dir, accel_status_str(rc));
			else
				name_dir(err, m->dir);
			goto out;
		}
	}
	/* the samplers' states are global (consumed counts all ranks'): rank 0's */
	accelp_ckpt_pjoin(path, sizeof(path), m->dir, "rank0.safetensors");
	if (ctx->n_samplers && (rc = accelp_st_reader_new(path, &r0, err)))
		goto out;
	accel_ckpt_reader c0 = {.st = r0, .err = err, .m = m,
	                        .file = accelp_ckpt_manifest_file_index(m, "rank0.safetensors")};
	for (uint32_t i = 0; i < ctx->n_samplers; i++) {
		accel_sampler_state st;
		char buf[32];
		snprintf(buf, sizeof(buf), "%u", i);
		if ((rc = accelp_ckpt_read(&c0, "sampler", buf, &st, sizeof(st), err)))
			goto out;
		if ((rc = accel_sampler_restore(ctx->samplers[i], &st)))
			goto out;
	}
out:
	accelp_st_reader_free(r0);
	accelp_st_reader_free(cr.st);
	return rc;
}


/* Load checkpoint `dir` (collective): check it against the job, then the
 * parameters, every plugin's state, the samplers and the step. */
int accelp_ckpt_load_at(accel_ctx *ctx, const char *dir)
{
	accelp_ckpt_manifest *m = NULL;
	const char *fresh[2] = {NULL, NULL};
	uint64_t *rng_pos = calloc(ctx->n_rngs ? ctx->n_rngs : 1, sizeof(*rng_pos));
	int rc = rng_pos ? ACCEL_OK : accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	if (!rc && !(rc = accelp_ckpt_manifest_open(dir, &m, &ctx->err)))
		rc = check_checkpoint(ctx, m, rng_pos, fresh);
	if ((rc = accelp_ckpt_agree(ctx, rc, "accel_load_state (checking the checkpoint)")))
		goto out;
	rc = load_params(ctx, m);
	if (!rc)
		rc = load_rank(ctx, m, fresh);
	/* the program's generators, read by check_rngs: each rank's own
	 * position at the saving world size; at another, rank 0's in every
	 * rank's own lane (docs/rng.md) */
	for (uint32_t i = 0; !rc && i < ctx->n_rngs; i++)
		accel_rng_seek(ctx->rngs[i], rng_pos[i]);
	if (!rc)
		rc = accelp_train_set_step_count(ctx->train, (uint64_t)m->step,
		                                 (uint32_t)m->micro_step);
	rc = accelp_ckpt_agree(ctx, rc, "accel_load_state");
out:
	accelp_ckpt_manifest_free(m);
	free(rng_pos);
	return rc;
}
