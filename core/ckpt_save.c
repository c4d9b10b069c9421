/* SPDX-License-Identifier: MIT */
/* core/ckpt_save.c: writing a checkpoint and committing it atomically
 * (docs/checkpoints.md, "Atomic commit"): every rank writes its files into
 * "<dir>.tmp-<job>"; after all have, rank 0 writes the manifest from their
 * headers and the checksums they computed, renames the directory into
 * place and points "latest" at it.  Crash injection for the tests. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"
#include "ckpt.h"
#include "ckpt_manifest.h"
#include "ops.h"
#include "safetensors.h"
#include "sampler.h"
#include "train.h"

/* ---- crash injection (tests only) ----------------------------------------------------
 * ACCEL_TEST_CKPT_CRASH=<point>[@<rank>] makes the rank (any rank without
 * @) _exit(CRASH_EXIT) at that point of a save (docs/testing.md):
 * before-files, mid-file (halfway through its rank file), before-barrier,
 * before-rename (rank 0: manifest written), before-latest (rank 0: renamed);
 * stall-before-barrier sleeps there instead (the others' barrier times out). */
#define CRASH_EXIT 86

static int crash_here(const accel_ctx *ctx, const char *point)
{
	const char *e = getenv("ACCEL_TEST_CKPT_CRASH");
	size_t n = strlen(point);
	if (!e || strncmp(e, point, n) || (e[n] && e[n] != '@'))
		return 0;
	return !e[n] || atoi(e + n + 1) == ctx->world.rank;
}

static void crash_point(const accel_ctx *ctx, const char *point)
{
	if (!crash_here(ctx, point))
		return;
	fprintf(stderr, "accel: ACCEL_TEST_CKPT_CRASH: rank %d exits at '%s'\n", ctx->world.rank,
	        point);
	_exit(CRASH_EXIT);
}

/* sums: the file's size, XXH64 and header XXH64 from the writer (zeros
 * when it could not compute them: commit() then reads the file). */
static void writer_sums(const accel_ckpt_writer *w, int64_t *sums)
{
	uint64_t v[3];
	if (accelp_st_writer_hashes(w->st, &v[0], &v[1], &v[2]) == ACCEL_OK)
		memcpy(sums, v, sizeof(v));
}

typedef struct params_out {
	accel_ckpt_writer cw;
	void **stage;             /* per parameter, until commit (borrowed) */
	uint32_t *rec;            /* streamed: each parameter's declared tensor */
	void *buf;                /* streamed: one parameter staged at a time */
} params_out;

/* One param/<name> tensor: host memory of the right dtype that stays bound
 * is written as it is (no step runs during the save); device memory and a
 * materialized unit's views (released before the commit) are staged. */
static int save_param(accel_ctx *ctx, uint32_t i, const accel_view *data, int transient,
                      void *arg)
{
	params_out *o = arg;
	accel_err *err = &ctx->err;
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(accelp_train_model(ctx->train), i);
	size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
	const void *src = data->data;
	int rc;
	if (transient || data->device != ACCEL_DEVICE_CPU || data->dtype != p->dtype ||
	    !data->data || data->numel != p->numel) {
		if (!(o->stage[i] = malloc(bytes ? bytes : 1)))
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory staging '%s'", p->name);
		accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, o->stage[i], p->numel};
		if ((rc = accelp_ops_copy(&hv, data, err)))
			return rc;
		src = o->stage[i];
	}
	char name[600];
	uint64_t shape[ACCEL_CKPT_MAX_DIMS];
	for (uint32_t d = 0; d < p->ndim; d++)
		shape[d] = (uint64_t)p->shape[d];
	snprintf(name, sizeof(name), "param/%s", p->name);
	accel_ckpt_slice_v1 sl = {sizeof(sl), p->dtype, p->ndim, ACCEL_CKPT_BORROW, name, shape,
	                          0, p->numel, src};
	return accelp_ckpt_write_tensor(&o->cw, "core", &sl, 1, err);
}

/* A materialized parameter (valid during the call): streamed into the file
 * at once, through a staging buffer unless it is host memory of its dtype,
 * so rank 0 holds one parameter of the unit beyond what the strategy
 * gathered. */
static int stream_param(accel_ctx *ctx, uint32_t i, const accel_view *data, int transient,
                        void *arg)
{
	params_out *o = arg;
	accel_err *err = &ctx->err;
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(accelp_train_model(ctx->train), i);
	size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
	const void *src = data->data;
	int rc;
	(void)transient;
	if (!p->numel)
		return ACCEL_OK;   /* declared nothing: a tensor of no elements has no slice */
	if (data->device != ACCEL_DEVICE_CPU || data->dtype != p->dtype || !data->data ||
	    data->numel != p->numel) {
		free(o->buf);
		if (!(o->buf = malloc(bytes)))
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory staging '%s'", p->name);
		accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, o->buf, p->numel};
		if ((rc = accelp_ops_copy(&hv, data, err)))
			return rc;
		src = o->buf;
	}
	return accelp_ckpt_stream_tensor(&o->cw, o->rec[i], src, bytes, err);
}

/* Rank 0 under a strategy that shards parameters: every param/ tensor
 * declared, then streamed unit by unit as the walk gathers them; the file's
 * checksum is computed from the file (writer_sums finds none). */
static int declare_params(accel_ctx *ctx, params_out *o)
{
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	accel_err *err = &ctx->err;
	int rc = ACCEL_OK;
	if (!(o->rec = calloc(m->n_params ? m->n_params : 1, sizeof(*o->rec))))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; !rc && i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		char name[600];
		uint64_t shape[ACCEL_CKPT_MAX_DIMS];
		if (!p->numel)
			continue;
		for (uint32_t d = 0; d < p->ndim; d++)
			shape[d] = (uint64_t)p->shape[d];
		snprintf(name, sizeof(name), "param/%s", p->name);
		accel_ckpt_slice_v1 sl = {sizeof(sl), p->dtype, p->ndim, 0, name, shape, 0, p->numel,
		                          NULL};
		rc = accelp_ckpt_declare_tensor(&o->cw, &sl, &o->rec[i], err);
	}
	return rc ? rc : accelp_ckpt_set_slices_meta(&o->cw, err);
}

/* model.safetensors (param/<name>) into `path` on rank 0.  Under a strategy
 * that shards parameters every rank calls it (path NULL but on rank 0):
 * the units are gathered collectively. */
static int save_params(accel_ctx *ctx, const char *path, int64_t *sums)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	params_out o = {.cw = {.err = err}};
	int rc;
	if (!path)
		return accelp_ckpt_each_param(ctx, "accel_save_state", 0, NULL, NULL);
	int streamed = accelp_ckpt_params_sharded(ctx);
	if (!(o.stage = calloc(m->n_params ? m->n_params : 1, sizeof(void *))))
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	else if (!(rc = accelp_st_writer_new(path, &o.cw.st, err)) &&
	         !(rc = accelp_st_writer_set_metadata(o.cw.st, "format", "pt", err)) && streamed)
		rc = declare_params(ctx, &o);
	/* a sharding strategy's gathers run on every rank even after a failure here */
	int walk = accelp_ckpt_each_param(ctx, "accel_save_state", 0,
	                                  rc ? NULL : streamed ? stream_param : save_param, &o);
	if (!rc && !(rc = walk)) {
		accelp_st_writer_skip_dir_sync(o.cw.st);   /* commit() fsyncs the directory */
		if ((streamed || !(rc = accelp_ckpt_set_slices_meta(&o.cw, err))) &&
		    !(rc = accelp_st_writer_commit(o.cw.st, err)))
			writer_sums(&o.cw, sums);
	}
	accelp_ckpt_writer_clear(&o.cw);
	for (uint32_t i = 0; o.stage && i < m->n_params; i++)
		free(o.stage[i]);
	free(o.stage);
	free(o.rec);
	free(o.buf);
	return rc;
}

static int save_rank(accel_ctx *ctx, const char *path, int64_t *sums)
{
	accel_err *err = &ctx->err;
	accel_ckpt_writer cw = {.err = err};
	int rc;
	char buf[64];
	if ((rc = accelp_st_writer_new(path, &cw.st, err)))
		return rc;
	snprintf(buf, sizeof(buf), "%d", ctx->world.rank);
	if ((rc = accelp_st_writer_set_metadata(cw.st, "rank", buf, err)))
		goto out;
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (!a->inited || !a->vt->save_state)
			continue;
		a->host.ckpt = &cw;
		rc = a->vt->save_state(a->state, (accel_ckpt_writer *)&cw);
		a->host.ckpt = NULL;
		if (rc) {
			if (!ctx->err.code)
				accelp_err_set(err, rc, "%s: save_state failed (%s)", a->host.name,
				               accel_status_str(rc));
			goto out;
		}
	}
	for (uint32_t i = 0; i < ctx->n_samplers; i++) {
		accel_sampler_state st = {.struct_size = sizeof(st)};
		if ((rc = accel_sampler_get_state(ctx->samplers[i], &st)))
			goto out;
		snprintf(buf, sizeof(buf), "%u", i);
		if ((rc = accelp_ckpt_write(&cw, "sampler", buf, &st, sizeof(st), err)))
			goto out;
	}
	for (uint32_t i = 0; i < ctx->n_rngs; i++) {
		const accel_rng *g = ctx->rngs[i];
		accelp_ckpt_rng st = {{g->key[0], g->key[1]}, g->lane, g->reserved, accel_rng_tell(g)};
		snprintf(buf, sizeof(buf), "%u", i);
		if ((rc = accelp_ckpt_write(&cw, "rng", buf, &st, sizeof(st), err)))
			goto out;
	}
	if (crash_here(ctx, "mid-file"))
		accelp_st_writer_crash_midway(cw.st, CRASH_EXIT);
	accelp_st_writer_skip_dir_sync(cw.st);   /* commit() fsyncs the directory */
	if (!(rc = accelp_ckpt_set_slices_meta(&cw, err)) && !(rc = accelp_st_writer_commit(cw.st, err)))
		writer_sums(&cw, sums);
out:
	accelp_ckpt_writer_clear(&cw);
	return rc;
}

/* Merge the slices file `name` lists in its metadata into `tensors`. */
static int add_slices(accel_ctx *ctx, json_t *tensors, json_t *files, const char *dir,
                      const char *name)
{
	char path[PATH_CAP], shp[256];
	accel_st_reader *r = NULL;
	json_error_t je;
	accelp_ckpt_pjoin(path, sizeof(path), dir, name);
	int rc = accelp_st_reader_new(path, &r, &ctx->err);
	if (rc)
		return rc;
	const char *btext = accelp_st_reader_metadata(r, BLOBS_META);
	if (btext) {
		json_t *b = json_loads(btext, 0, &je);
		if (!json_is_object(b) || json_object_set_new(json_object_get(files, name), "blobs", b)) {
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s: metadata %s is not a "
			                    "JSON object", path, BLOBS_META);
			accelp_st_reader_free(r);
			return rc;
		}
	}
	const char *text = accelp_st_reader_metadata(r, SLICES_META);
	json_t *a = text ? json_loads(text, 0, &je) : json_array();
	size_t i;
	json_t *o;
	if (!json_is_array(a)) {
		rc = accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s: metadata %s is not a JSON "
		                    "array", path, SLICES_META);
		goto out;
	}
	json_array_foreach(a, i, o) {
		const char *tn = json_string_value(json_object_get(o, "name"));
		json_t *shape = json_object_get(o, "shape"), *dt = json_object_get(o, "dtype");
		if (!tn || !json_is_array(shape) || !json_is_string(dt)) {
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s: metadata %s: entry %zu "
			                    "is malformed", path, SLICES_META, i);
			goto out;
		}
		json_t *t = json_object_get(tensors, tn);
		if (!t) {
			t = json_pack("{s:O,s:O,s:[]}", "dtype", dt, "shape", shape, "slices");
			if (!t || json_object_set_new(tensors, tn, t)) {
				rc = accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
				goto out;
			}
		} else if (!json_equal(json_object_get(t, "dtype"), dt) ||
		           !json_equal(json_object_get(t, "shape"), shape)) {
			char *s1 = json_dumps(json_object_get(t, "shape"), JSON_COMPACT);
			char *s2 = json_dumps(shape, JSON_COMPACT);
			snprintf(shp, sizeof(shp), "%s", s2 ? s2 : "?");
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "tensor '%s' is %s %s in %s "
			                    "and %s %s in an earlier file: every rank must write a tensor "
			                    "with the same dtype and global shape", tn,
			                    json_string_value(dt), shp, path,
			                    json_string_value(json_object_get(t, "dtype")), s1 ? s1 : "?");
			free(s1);
			free(s2);
			goto out;
		}
		json_t *sl = json_pack("{s:s,s:O,s:O,s:O,s:O}", "file", name, "key",
		                       json_object_get(o, "key"), "offset", json_object_get(o, "offset"),
		                       "count", json_object_get(o, "count"), "xxh64",
		                       json_object_get(o, "xxh64"));
		if (!sl || json_array_append_new(json_object_get(t, "slices"), sl)) {
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s: metadata %s: entry %zu "
			                    "is malformed", path, SLICES_META, i);
			goto out;
		}
	}
out:
	json_decref(a);
	accelp_st_reader_free(r);
	return rc;
}

/* sums: what the writing rank computed (size 0: not known, read the file) */
static int add_file(accel_ctx *ctx, json_t *files, const char *dir, const char *name,
                    const int64_t *sums)
{
	char path[PATH_CAP], hex[20];
	uint64_t size = (uint64_t)sums[0], hash = (uint64_t)sums[1], hh = (uint64_t)sums[2];
	accelp_ckpt_pjoin(path, sizeof(path), dir, name);
	int rc = ACCEL_OK;
	struct stat sb;
	if (!size || stat(path, &sb) != 0 || (uint64_t)sb.st_size != size) {
		rc = accelp_ckpt_hash_file(path, &size, &hash, &ctx->err);
		if (!rc)
			rc = accelp_ckpt_hash_header(path, &hh, &ctx->err);
	}
	if (rc)
		return rc;
	char hhex[20];
	snprintf(hex, sizeof(hex), "%016" PRIx64, hash);
	snprintf(hhex, sizeof(hhex), "%016" PRIx64, hh);
	json_t *o = json_pack("{s:I,s:s,s:s}", "size", (json_int_t)size, "xxh64", hex,
	                      "header_xxh64", hhex);
	if (!o || json_object_set_new(files, name, o))
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	return ACCEL_OK;
}

/* sums: 3 per rank file, then 3 for model.safetensors (writer_sums) */
static int write_manifest(accel_ctx *ctx, const char *tmp, const int64_t *sums)
{
	accel_err *err = &ctx->err;
	json_t *root = json_object(), *plugins = json_array(), *files = json_object();
	json_t *tensors = json_object();
	char path[PATH_CAP];
	int rc = ACCEL_OK;
	if (!root || !plugins || !files || !tensors) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		const accel_plugin_desc_v1 *d = ctx->active[i].vt->desc;
		json_array_append_new(plugins, json_pack("{s:s,s:I}", "name", d->name, "state_version",
		                                         (json_int_t)d->state_version));
	}
	if ((rc = add_file(ctx, files, tmp, "model.safetensors",
	                   sums + 3 * ctx->world.world_size)) ||
	    (rc = add_slices(ctx, tensors, files, tmp, "model.safetensors")))
		goto out;
	for (int r = 0; r < ctx->world.world_size; r++) {
		char name[64];
		snprintf(name, sizeof(name), "rank%d.safetensors", r);
		if ((rc = add_file(ctx, files, tmp, name, sums + 3 * r)) ||
		    (rc = add_slices(ctx, tensors, files, tmp, name)))
			goto out;
	}
	uint64_t step = accelp_train_step_count(ctx->train);
	json_object_set_new(root, "format", json_string("accel-checkpoint"));
	json_object_set_new(root, "format_version", json_integer(CKPT_FORMAT_VERSION));
	json_object_set_new(root, "accel_version", json_string(ACCEL_VERSION_STRING));
	json_object_set_new(root, "world_size", json_integer(ctx->world.world_size));
	json_object_set_new(root, "strategy", json_string(accelp_ckpt_strategy_name(ctx)));
	json_object_set_new(root, "plugins", plugins);
	plugins = NULL;
	json_object_set_new(root, "step", json_integer((json_int_t)step));
	json_object_set_new(root, "micro_step",
	                    json_integer(accelp_train_micro_step(ctx->train)));
	json_object_set_new(root, "scheduler", json_pack("{s:I,s:f}", "step", (json_int_t)step,
	                                                 "lr", accel_get_lr(ctx)));
	json_object_set_new(root, "samplers", json_integer(ctx->n_samplers));
	json_object_set_new(root, "rngs", json_integer(ctx->n_rngs));
	json_t *settings = accelp_ckpt_job_settings(ctx);
	if (!settings || json_object_update(root, settings)) {
		json_decref(settings);
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	json_decref(settings);
	json_object_set_new(root, "files", files);
	files = NULL;
	json_object_set_new(root, "tensors", tensors);
	tensors = NULL;
	/* the manifest's own checksum over its canonical content */
	uint64_t self;
	char hex[20];
	if (accelp_ckpt_manifest_hash(root, &self)) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	snprintf(hex, sizeof(hex), "%016" PRIx64, self);
	json_object_set_new(root, ACCELP_CKPT_SELF_KEY, json_string(hex));
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	/* what a reader will check (the slices cover every tensor exactly once) */
	accelp_ckpt_manifest *check = NULL;
	rc = accelp_ckpt_manifest_parse(text, strlen(text), tmp, &check, err);
	accelp_ckpt_manifest_free(check);
	if (rc) {
		free(text);
		goto out;
	}
	size_t len = strlen(text);
	char *nl = realloc(text, len + 2);
	if (nl) {
		text = nl;
		memcpy(text + len, "\n", 2);
	}
	accelp_ckpt_pjoin(path, sizeof(path), tmp, "manifest.json");
	rc = accelp_ckpt_write_text(path, text, err);
	free(text);
out:
	json_decref(root);
	json_decref(plugins);
	json_decref(files);
	json_decref(tensors);
	return rc;
}

/* Rank 0, after every rank's files are durable: manifest, rename, latest. */
static int commit(accel_ctx *ctx, const char *dir, const char *tmp, const int64_t *sums)
{
	accel_err *err = &ctx->err;
	char parent[PATH_CAP], base[PATH_CAP], path[PATH_CAP], ptmp[PATH_CAP];
	int rc;
	if ((rc = write_manifest(ctx, tmp, sums)))
		return rc;
	if (accelp_ckpt_fsync_path(tmp, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
	crash_point(ctx, "before-rename");
	if (rename(tmp, dir) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "renaming %s to %s: %s", tmp, dir,
		                      strerror(errno));
	accelp_ckpt_parent_of(dir, parent, sizeof(parent));
	if (accelp_ckpt_fsync_path(parent, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", parent, strerror(errno));
	crash_point(ctx, "before-latest");
	const char *b = accelp_ckpt_base_of(dir, base, sizeof(base));
	char line[PATH_CAP + 2];
	snprintf(line, sizeof(line), "%s\n", b);
	char lname[96];
	snprintf(lname, sizeof(lname), "latest.tmp-%s", ctx->job_id);
	accelp_ckpt_pjoin(ptmp, sizeof(ptmp), parent, lname);
	accelp_ckpt_pjoin(path, sizeof(path), parent, "latest");
	if ((rc = accelp_ckpt_write_text(ptmp, line, err)))
		return rc;
	if (rename(ptmp, path) != 0) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "renaming %s to %s: %s", ptmp, path,
		                    strerror(errno));
		unlink(ptmp);
		return rc;
	}
	if (accelp_ckpt_fsync_path(parent, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", parent, strerror(errno));
	return ACCEL_OK;
}


int accelp_ckpt_save_at(accel_ctx *ctx, const char *dir_arg)
{
	char tmp[PATH_CAP], path[PATH_CAP], name[96], dir[PATH_CAP];
	struct stat sb;
	int rc = accelp_ckpt_check_ready(ctx, dir_arg, "accel_save_state");
	if (rc)
		return rc;
	/* accumulated gradients are not saved: only between optimizer steps */
	if (accelp_train_micro_step(ctx->train))
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE, "accel_save_state(\"%s\") after "
		                      "micro-step %u of a gradient accumulation: the gradients "
		                      "accumulated so far are not saved; save after the step's last "
		                      "micro-step (when accel_sync_gradients() was 1)", dir_arg,
		                      accelp_train_micro_step(ctx->train));
	/* "a/b/" names the directory "a/b": its temporary one is "a/b.tmp-..." */
	snprintf(dir, sizeof(dir), "%s", dir_arg);
	for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/';)
		dir[--n] = '\0';
	int rank = ctx->world.rank;
	snprintf(name, sizeof(name), ".tmp-%s", ctx->job_id);
	if (snprintf(tmp, sizeof(tmp), "%s%s", dir, name) >= (int)sizeof(tmp))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_save_state: "
		                      "directory name too long");
	if (rank == 0) {
		accelp_ckpt_project_before_save(ctx, dir);
		if (stat(dir, &sb) == 0)
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_save_state: %s already "
			                    "exists; save into a new directory (checkpoints are never "
			                    "overwritten)", dir);
		else {
			accelp_ckpt_remove_tree(tmp);   /* a stale one of this job */
			if (mkdir(tmp, 0755) != 0)
				rc = accelp_err_set(&ctx->err, ACCEL_ERR_IO, "accel_save_state: creating "
				                    "%s: %s", tmp, strerror(errno));
		}
	}
	if ((rc = accelp_ckpt_agree(ctx, rc, "accel_save_state")))
		return rc;
	crash_point(ctx, "before-files");
	snprintf(name, sizeof(name), "rank%d.safetensors", rank);
	accelp_ckpt_pjoin(path, sizeof(path), tmp, name);
	/* each rank's file sums, for rank 0's manifest (rank 0 need not read
	 * every file back to checksum it) */
	int W = ctx->world.world_size;
	int64_t *sums = calloc(3 * (size_t)(W + 1), sizeof(*sums));
	if (!sums)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	rc = save_rank(ctx, path, sums + 3 * rank);
	accelp_ckpt_pjoin(path, sizeof(path), tmp, "model.safetensors");
	if (accelp_ckpt_params_sharded(ctx)) {
		/* the parameters are gathered unit by unit on every rank: all go
		 * in or none */
		if (!(rc = accelp_ckpt_agree(ctx, rc, "accel_save_state")))
			rc = save_params(ctx, rank == 0 ? path : NULL, sums + 3 * W);
	} else if (!rc && rank == 0) {
		rc = save_params(ctx, path, sums + 3 * W);
	}
	crash_point(ctx, "before-barrier");
	if (crash_here(ctx, "stall-before-barrier")) {
		fprintf(stderr, "accel: ACCEL_TEST_CKPT_CRASH: rank %d stalls before the barrier\n",
		        ctx->world.rank);
		sleep(3600);
	}
	/* the barrier: every rank's files are written and fsynced */
	if ((rc = accelp_ckpt_agree(ctx, rc, "accel_save_state"))) {
		free(sums);
		if (rank == 0)
			accelp_ckpt_remove_tree(tmp);
		return rc;
	}
	rc = accel_allreduce(ctx, sums, sums, 3 * (uint64_t)(W + 1), ACCEL_DTYPE_I64,
	                     ACCEL_RED_SUM);
	if (rank == 0 && (rc || (rc = commit(ctx, dir, tmp, sums))) && stat(tmp, &sb) == 0)
		accelp_ckpt_remove_tree(tmp);
	free(sums);
	return accelp_ckpt_agree(ctx, rc, "accel_save_state (rank 0's commit)");
}
