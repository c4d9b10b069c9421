/* SPDX-License-Identifier: MIT */
/* core/ckpt.c: accel_save_state, accel_load_state and accel_save_model
 * (docs/checkpoints.md), and what the checkpoint files share.  A
 * checkpoint is a directory: manifest.json, model.safetensors (rank 0's
 * parameters, "param/<name>") and rank<r>.safetensors (each rank's slices
 * of the plugins' tensors, their blobs "<plugin>/<blob>", the samplers'
 * states).  The parts: ckpt_stream.c (host->ckpt_*), ckpt_save.c (writing
 * and the atomic commit), ckpt_load.c (checking and loading, resharding),
 * ckpt_naming.c (automatic names, total_limit, latest), ckpt_fs.c,
 * ckpt_manifest.c (the manifest reader). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "ckpt_impl.h"
#include "ops.h"
#include "safetensors.h"
#include "train.h"
#include "restart.h"

int accelp_ckpt_check_ready(accel_ctx *ctx, const char *dir, const char *fn)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!dir || !*dir)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: no directory given", fn);
	if (strlen(dir) > PATH_CAP - 64)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: directory name too long",
		                      fn);
	if (!ctx->train || !accelp_train_prepared(ctx->train))
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE, "%s(\"%s\") before accel_prepare()",
		                      fn, dir);
	/* the same on every rank (one strategy): refused before anything is written */
	return accelp_ckpt_params_usable(ctx, fn);
}

/* Every rank learns the worst status (as a positive number: statuses are
 * negative); a rank that succeeded reports the failure of another. */
int accelp_ckpt_agree(accel_ctx *ctx, int rc, const char *what)
{
	int32_t bad = rc ? -rc : 0;
	int r = accel_allreduce(ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX);
	if (r)
		return rc ? rc : r;
	if (bad && !rc)
		return accelp_err_set(&ctx->err, -bad, "%s failed on another rank (see its message)",
		                      what);
	return rc;
}

const char *accelp_ckpt_strategy_name(const accel_ctx *ctx)
{
	return ctx->n_active ? ctx->active[0].vt->desc->name : "none";
}

/* ---- weights only ----------------------------------------------------------------- */

typedef struct model_out {
	accel_st_writer *w;
	void *stage;
} model_out;

static int write_param(accel_ctx *ctx, uint32_t i, const accel_view *data, int transient,
                       void *arg)
{
	model_out *o = arg;
	accel_err *err = &ctx->err;
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(accelp_train_model(ctx->train), i);
	(void)transient;
	if (!data->data && p->numel)
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "accel_save_model: parameter '%s' "
		                      "is not held whole on rank 0 by strategy '%s'", p->name,
		                      accelp_ckpt_strategy_name(ctx));
	size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
	free(o->stage);
	if (!(o->stage = malloc(bytes ? bytes : 1)))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory staging '%s'", p->name);
	accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, o->stage, p->numel};
	int rc = accelp_ops_copy(&hv, data, err);
	return rc ? rc : accelp_st_writer_write(o->w, p->name, o->stage, bytes, err);
}

/* Rank 0 writes every parameter under its own name, one tensor staged at a
 * time (file NULL on the other ranks, which take part in the gathers of a
 * strategy that shards parameters: one unit at a time). */
static int write_model(accel_ctx *ctx, const char *file)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	model_out o = {0};
	int rc = ACCEL_OK;
	if (file && !(rc = accelp_st_writer_new(file, &o.w, err)) &&
	    !(rc = accelp_st_writer_set_metadata(o.w, "format", "pt", err))) {
		for (uint32_t i = 0; !rc && i < m->n_params; i++) {
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
			uint64_t shape[ACCEL_CKPT_MAX_DIMS];
			for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
				shape[d] = (uint64_t)p->shape[d];
			rc = accelp_st_writer_add(o.w, p->name, p->dtype, p->ndim, shape, NULL, err);
		}
	}
	/* the tensors are streamed in the order the walk visits them */
	int walk = accelp_ckpt_each_param(ctx, "accel_save_model", 0,
	                                  file && !rc ? write_param : NULL, &o);
	if (!rc && !(rc = walk) && file)
		rc = accelp_st_writer_commit(o.w, err);
	free(o.stage);
	accelp_st_writer_free(o.w);
	return rc;
}

int accel_save_model(accel_ctx *ctx, const char *file)
{
	int rc = accelp_ckpt_check_ready(ctx, file, "accel_save_model");
	if (rc)
		return rc;
	if (ctx->world.rank == 0)
		rc = write_model(ctx, file);
	else if (accelp_ckpt_params_sharded(ctx))
		rc = write_model(ctx, NULL);
	return accelp_ckpt_agree(ctx, rc, "accel_save_model");
}

int accel_save_state(accel_ctx *ctx, const char *dir_arg)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (dir_arg) {
		int r = accelp_ckpt_save_at(ctx, dir_arg);
		if (!r)
			accelp_restart_note_saved(ctx, dir_arg, accel_get_step(ctx));
		return r;
	}
	char root[PATH_CAP], dir[PATH_CAP];
	struct stat sb;
	int rc = accelp_ckpt_auto_root(ctx, "accel_save_state", root, sizeof(root));
	if (rc)
		return rc;
	if (ctx->world.rank == 0 && stat(root, &sb) != 0) {
		char pd[PATH_CAP];
		accelp_ckpt_parent_of(root, pd, sizeof(pd));
		mkdir(pd, 0755);
		if (mkdir(root, 0755) != 0 && errno != EEXIST)
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_IO, "accel_save_state: creating %s: %s",
			                    root, strerror(errno));
	}
	if ((rc = accelp_ckpt_agree(ctx, rc, "accel_save_state")))
		return rc;
	if (snprintf(dir, sizeof(dir), "%s/checkpoint_%" PRId64, root, accelp_ckpt_next_iteration(ctx)) >=
	    (int)sizeof(dir))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_save_state: "
		                      "project_dir too long");
	if ((rc = accelp_ckpt_save_at(ctx, dir))) {
		/* failed after its rename (fsync of the parent, `latest`): the
		 * name is taken, so the next save takes the next one */
		if (stat(dir, &sb) == 0)
			ctx->ckpt_iteration++;
		return rc;
	}
	int64_t done = ctx->ckpt_iteration++;
	accelp_restart_note_saved(ctx, dir, accel_get_step(ctx));
	if (ctx->world.rank == 0)
		accelp_ckpt_prune(ctx, root, done);
	return ACCEL_OK;
}

int accel_load_state(accel_ctx *ctx, const char *dir)
{
	char auto_dir[PATH_CAP], base[PATH_CAP];
	int rc;
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!dir && accelp_restart_dir(ctx, auto_dir, sizeof(auto_dir))) {
		dir = auto_dir;   /* a restarted job: the checkpoint accel_prepare resumed */
	} else if (!dir) {   /* the newest automatic checkpoint: what checkpoints/latest names */
		if ((rc = accelp_ckpt_latest(ctx, auto_dir, sizeof(auto_dir))))
			return rc;
		dir = auto_dir;
	}
	if ((rc = accelp_ckpt_check_ready(ctx, dir, "accel_load_state")) ||
	    (rc = accelp_ckpt_load_at(ctx, dir)))
		return rc;
	accelp_ckpt_project_loaded(ctx, dir);
	/* the next automatic checkpoint follows the loaded one */
	int64_t k = accelp_ckpt_auto_number(accelp_ckpt_base_of(dir, base, sizeof(base)));
	int32_t on = 0;
	if (k >= 0 && accel_config_bool(ctx, "automatic_checkpoint_naming", &on) == ACCEL_OK && on) {
		ctx->ckpt_iteration = k + 1;
		ctx->ckpt_iteration_set = 1;
	}
	return ACCEL_OK;
}

/* ---- the program's generators ------------------------------------------------------ */

int accel_rng_register(accel_ctx *ctx, accel_rng *rng)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!rng)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_rng_register: rng is NULL");
	for (uint32_t i = 0; i < ctx->n_rngs; i++)
		if (ctx->rngs[i] == rng)
			return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_rng_register: this "
			                      "generator is registered already (as number %u)", i);
	accel_rng **list = realloc(ctx->rngs, (ctx->n_rngs + 1) * sizeof(*list));
	if (!list)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	ctx->rngs = list;
	ctx->rngs[ctx->n_rngs++] = rng;
	return ACCEL_OK;
}
