/* SPDX-License-Identifier: MIT */
/* core/ckpt.c: accel_save_state / accel_load_state and the checkpoint
 * streams behind host->ckpt_* (docs/checkpoints.md).
 *
 * A checkpoint is a directory: manifest.json, model.safetensors (rank 0's
 * parameters, "param/<name>") and rank<r>.safetensors (each plugin's blobs
 * as "<plugin>/<blob>" U8 tensors, the samplers' states).  Every rank writes
 * into "<dir>.tmp-<job>"; after all have finished, rank 0 checksums the
 * files, writes the manifest and renames the directory into place, then
 * points "latest" in the parent at it. */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt.h"
#include "ctx-impl.h"
#include "ops.h"
#include "safetensors.h"
#include "sampler.h"
#include "train.h"

#define CKPT_FORMAT_VERSION 1
#define PATH_CAP 4096

struct accel_ckpt_writer {
	accel_st_writer *st;
	accel_err *err;
	void **copies;            /* blob copies, borrowed by st until commit */
	uint32_t n_copies, cap_copies;
};

struct accel_ckpt_reader {
	accel_st_reader *st;
	accel_err *err;
};

/* ---- streams (host->ckpt_*) --------------------------------------------------------- */

static int blob_name(char *buf, size_t cap, const char *plugin, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", plugin, name);
	return n > 0 && (size_t)n < cap;
}

int accelp_ckpt_write(accel_ckpt_writer *w, const char *plugin, const char *name,
                      const void *data, uint64_t bytes, accel_err *err)
{
	char full[600];
	if (!w)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: ckpt_write outside save_state", plugin);
	if (!name || !*name || (bytes && !data))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_write: NULL or empty name "
		                      "or data", plugin);
	if (!blob_name(full, sizeof(full), plugin, name))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_write: blob name '%s' is "
		                      "too long", plugin, name);
	if (w->n_copies == w->cap_copies) {
		uint32_t cap = w->cap_copies ? 2 * w->cap_copies : 16;
		void **c = realloc(w->copies, cap * sizeof(*c));
		if (!c)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		w->copies = c;
		w->cap_copies = cap;
	}
	void *copy = malloc(bytes ? bytes : 1);
	if (!copy)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory copying blob '%s'", full);
	memcpy(copy, data, bytes);
	w->copies[w->n_copies++] = copy;
	uint64_t shape[1] = {bytes};
	return accelp_st_writer_add(w->st, full, ACCEL_DTYPE_U8, 1, shape, copy, err);
}

static int find_blob(accel_ckpt_reader *r, const char *plugin, const char *name,
                     const accel_st_tensor **ret, accel_err *err)
{
	char full[600];
	if (!r)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: ckpt_read outside load_state", plugin);
	if (!name || !blob_name(full, sizeof(full), plugin, name))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_read: bad blob name",
		                      plugin);
	if (accelp_st_reader_find(r->st, full, ret, NULL) != ACCEL_OK)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: no blob '%s' (written by "
		                      "this plugin's save_state?)", accelp_st_reader_path(r->st), full);
	return ACCEL_OK;
}

int accelp_ckpt_size(accel_ckpt_reader *r, const char *plugin, const char *name,
                     uint64_t *ret_bytes, accel_err *err)
{
	const accel_st_tensor *t;
	int rc = find_blob(r, plugin, name, &t, err);
	if (rc)
		return rc;
	if (ret_bytes)
		*ret_bytes = t->numel;
	return ACCEL_OK;
}

int accelp_ckpt_read(accel_ckpt_reader *r, const char *plugin, const char *name, void *buf,
                     uint64_t bytes, accel_err *err)
{
	const accel_st_tensor *t;
	int rc = find_blob(r, plugin, name, &t, err);
	if (rc)
		return rc;
	if (t->dtype != ACCEL_DTYPE_U8 || t->numel != bytes)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: blob '%s/%s' holds %" PRIu64
		                      " bytes; %" PRIu64 " expected", accelp_st_reader_path(r->st),
		                      plugin, name, t->numel, bytes);
	return accelp_st_reader_read(r->st, t, 0, bytes, buf, err);
}

/* ---- files ------------------------------------------------------------------------- */

/* buf = dir + "/" + name (check_ready bounds dir, names are short). */
static void pjoin(char *buf, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= cap)
		buf[0] = '\0';
}

static int fsync_path(const char *path, int dir)
{
	int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	close(fd);
	return r;
}

static void parent_of(const char *path, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", path);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	char *s = strrchr(buf, '/');
	if (!s)
		snprintf(buf, cap, ".");
	else if (s == buf)
		buf[1] = '\0';
	else
		*s = '\0';
}

static const char *base_of(const char *path, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", path);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	char *s = strrchr(buf, '/');
	return s ? s + 1 : buf;
}

/* Remove a directory of plain files (a failed save's temporary one). */
static void remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char p[PATH_CAP];
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			pjoin(p, sizeof(p), dir, e->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

/* Size and XXH64 of a file, read in chunks. */
static int hash_file(const char *path, uint64_t *ret_size, uint64_t *ret_hash, accel_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(errno));
	XXH64_state_t *st = XXH64_createState();
	char *buf = malloc(1 << 20);
	uint64_t size = 0;
	int rc = ACCEL_OK;
	if (!st || !buf) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory hashing %s", path);
		goto out;
	}
	XXH64_reset(st, 0);
	size_t n;
	while ((n = fread(buf, 1, 1 << 20, f)) > 0) {
		XXH64_update(st, buf, n);
		size += n;
	}
	if (ferror(f)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: read error", path);
		goto out;
	}
	*ret_size = size;
	*ret_hash = XXH64_digest(st);
out:
	free(buf);
	if (st)
		XXH64_freeState(st);
	fclose(f);
	return rc;
}

static int write_text_file(const char *path, const char *text, accel_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(errno));
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t k = write(fd, text + off, len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			int e = errno;
			close(fd);
			return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(e));
		}
		off += (size_t)k;
	}
	if (fsync(fd) != 0 || close(fd) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(errno));
	return ACCEL_OK;
}

/* ---- save ---------------------------------------------------------------------------- */

static int check_ready(accel_ctx *ctx, const char *dir, const char *fn)
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
	return ACCEL_OK;
}

/* Every rank learns the worst status (as a positive number: statuses are
 * negative); a rank that succeeded reports the failure of another. */
static int agree(accel_ctx *ctx, int rc, const char *what)
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

static int save_params(accel_ctx *ctx, const char *path)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	accel_st_writer *w = NULL;
	void **stage = calloc(m->n_params ? m->n_params : 1, sizeof(void *));
	int rc;
	if (!stage)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	if ((rc = accelp_st_writer_new(path, &w, err)) ||
	    (rc = accelp_st_writer_set_metadata(w, "format", "pt", err)))
		goto out;
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		accel_view data, grad;
		if ((rc = accelp_train_param_view(ctx->train, i, &data, &grad)))
			goto out;
		size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
		if (!(stage[i] = malloc(bytes ? bytes : 1))) {
			rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory staging '%s'", p->name);
			goto out;
		}
		accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, stage[i], p->numel};
		if ((rc = accelp_ops_copy(&hv, &data, err)))
			goto out;
		char name[600];
		uint64_t shape[8];
		for (uint32_t d = 0; d < p->ndim; d++)
			shape[d] = (uint64_t)p->shape[d];
		snprintf(name, sizeof(name), "param/%s", p->name);
		if ((rc = accelp_st_writer_add(w, name, p->dtype, p->ndim, shape, stage[i], err)))
			goto out;
	}
	rc = accelp_st_writer_commit(w, err);
out:
	accelp_st_writer_free(w);
	for (uint32_t i = 0; i < m->n_params; i++)
		free(stage[i]);
	free(stage);
	return rc;
}

static int save_rank(accel_ctx *ctx, const char *path)
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
	rc = accelp_st_writer_commit(cw.st, err);
out:
	accelp_st_writer_free(cw.st);
	for (uint32_t i = 0; i < cw.n_copies; i++)
		free(cw.copies[i]);
	free(cw.copies);
	return rc;
}

static int add_file(accel_ctx *ctx, json_t *files, const char *dir, const char *name)
{
	char path[PATH_CAP], hex[20];
	uint64_t size, hash;
	pjoin(path, sizeof(path), dir, name);
	int rc = hash_file(path, &size, &hash, &ctx->err);
	if (rc)
		return rc;
	snprintf(hex, sizeof(hex), "%016" PRIx64, hash);
	json_t *o = json_pack("{s:I,s:s}", "size", (json_int_t)size, "xxh64", hex);
	if (!o || json_object_set_new(files, name, o))
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	return ACCEL_OK;
}

static const char *strategy_name(const accel_ctx *ctx)
{
	return ctx->n_active ? ctx->active[0].vt->desc->name : "none";
}

static int write_manifest(accel_ctx *ctx, const char *tmp)
{
	accel_err *err = &ctx->err;
	json_t *root = json_object(), *plugins = json_array(), *files = json_object();
	char path[PATH_CAP];
	int rc = ACCEL_OK;
	if (!root || !plugins || !files) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		const accel_plugin_desc_v1 *d = ctx->active[i].vt->desc;
		json_array_append_new(plugins, json_pack("{s:s,s:I}", "name", d->name, "state_version",
		                                         (json_int_t)d->state_version));
	}
	if ((rc = add_file(ctx, files, tmp, "model.safetensors")))
		goto out;
	for (int r = 0; r < ctx->world.world_size; r++) {
		char name[64];
		snprintf(name, sizeof(name), "rank%d.safetensors", r);
		if ((rc = add_file(ctx, files, tmp, name)))
			goto out;
	}
	uint64_t step = accelp_train_step_count(ctx->train);
	json_object_set_new(root, "format", json_string("accel-checkpoint"));
	json_object_set_new(root, "format_version", json_integer(CKPT_FORMAT_VERSION));
	json_object_set_new(root, "accel_version", json_string(ACCEL_VERSION_STRING));
	json_object_set_new(root, "world_size", json_integer(ctx->world.world_size));
	json_object_set_new(root, "strategy", json_string(strategy_name(ctx)));
	json_object_set_new(root, "plugins", plugins);
	plugins = NULL;
	json_object_set_new(root, "step", json_integer((json_int_t)step));
	json_object_set_new(root, "micro_step",
	                    json_integer(accelp_train_micro_step(ctx->train)));
	json_object_set_new(root, "scheduler", json_pack("{s:I,s:f}", "step", (json_int_t)step,
	                                                 "lr", accel_get_lr(ctx)));
	json_object_set_new(root, "samplers", json_integer(ctx->n_samplers));
	json_object_set_new(root, "files", files);
	files = NULL;
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	size_t len = strlen(text);
	char *nl = realloc(text, len + 2);
	if (nl) {
		text = nl;
		memcpy(text + len, "\n", 2);
	}
	pjoin(path, sizeof(path), tmp, "manifest.json");
	rc = write_text_file(path, text, err);
	free(text);
out:
	json_decref(root);
	json_decref(plugins);
	json_decref(files);
	return rc;
}

/* Rank 0, after every rank's files are durable: manifest, rename, latest. */
static int commit(accel_ctx *ctx, const char *dir, const char *tmp)
{
	accel_err *err = &ctx->err;
	char parent[PATH_CAP], base[PATH_CAP], path[PATH_CAP], ptmp[PATH_CAP];
	int rc;
	if ((rc = write_manifest(ctx, tmp)))
		return rc;
	if (fsync_path(tmp, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
	if (rename(tmp, dir) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "renaming %s to %s: %s", tmp, dir,
		                      strerror(errno));
	parent_of(dir, parent, sizeof(parent));
	if (fsync_path(parent, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", parent, strerror(errno));
	const char *b = base_of(dir, base, sizeof(base));
	char line[PATH_CAP + 2];
	snprintf(line, sizeof(line), "%s\n", b);
	char lname[96];
	snprintf(lname, sizeof(lname), "latest.tmp-%s", ctx->job_id);
	pjoin(ptmp, sizeof(ptmp), parent, lname);
	pjoin(path, sizeof(path), parent, "latest");
	if ((rc = write_text_file(ptmp, line, err)))
		return rc;
	if (rename(ptmp, path) != 0) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "renaming %s to %s: %s", ptmp, path,
		                    strerror(errno));
		unlink(ptmp);
		return rc;
	}
	if (fsync_path(parent, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", parent, strerror(errno));
	return ACCEL_OK;
}

int accel_save_state(accel_ctx *ctx, const char *dir_arg)
{
	char tmp[PATH_CAP], path[PATH_CAP], name[96], dir[PATH_CAP];
	struct stat sb;
	int rc = check_ready(ctx, dir_arg, "accel_save_state");
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
		if (stat(dir, &sb) == 0)
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_save_state: %s already "
			                    "exists; save into a new directory (checkpoints are never "
			                    "overwritten)", dir);
		else {
			remove_tree(tmp);   /* a stale one of this job */
			if (mkdir(tmp, 0755) != 0)
				rc = accelp_err_set(&ctx->err, ACCEL_ERR_IO, "accel_save_state: creating "
				                    "%s: %s", tmp, strerror(errno));
		}
	}
	if ((rc = agree(ctx, rc, "accel_save_state")))
		return rc;
	snprintf(name, sizeof(name), "rank%d.safetensors", rank);
	pjoin(path, sizeof(path), tmp, name);
	rc = save_rank(ctx, path);
	if (!rc && rank == 0) {
		pjoin(path, sizeof(path), tmp, "model.safetensors");
		rc = save_params(ctx, path);
	}
	/* the barrier: every rank's files are written and fsynced */
	if ((rc = agree(ctx, rc, "accel_save_state"))) {
		if (rank == 0)
			remove_tree(tmp);
		return rc;
	}
	if (rank == 0 && (rc = commit(ctx, dir, tmp)) && stat(tmp, &sb) == 0)
		remove_tree(tmp);
	return agree(ctx, rc, "accel_save_state (rank 0's commit)");
}

/* ---- load ---------------------------------------------------------------------------- */

static int bad(accel_ctx *ctx, const char *fmt, ...) ACCEL_PRINTF(2, 3);
static int bad(accel_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_err_setv(&ctx->err, ACCEL_ERR_CHECKPOINT, fmt, ap);
	va_end(ap);
	return ACCEL_ERR_CHECKPOINT;
}

static int verify_file(accel_ctx *ctx, const char *dir, json_t *files, const char *name)
{
	char path[PATH_CAP], hex[20];
	json_t *o = json_object_get(files, name);
	json_t *js = json_object_get(o, "size"), *jh = json_object_get(o, "xxh64");
	pjoin(path, sizeof(path), dir, name);
	if (!json_is_integer(js) || !json_is_string(jh))
		return bad(ctx, "%s/manifest.json: no size and xxh64 for %s", dir, name);
	uint64_t size, hash;
	struct stat sb;
	if (stat(path, &sb) != 0)
		return bad(ctx, "%s: missing (the manifest lists it: %" PRIu64 " bytes)", path,
		           (uint64_t)json_integer_value(js));
	int rc = hash_file(path, &size, &hash, &ctx->err);
	if (rc)
		return rc;
	if (size != (uint64_t)json_integer_value(js))
		return bad(ctx, "%s: %" PRIu64 " bytes; the manifest expects %" PRIu64 " (truncated "
		           "or replaced)", path, size, (uint64_t)json_integer_value(js));
	snprintf(hex, sizeof(hex), "%016" PRIx64, hash);
	if (strcmp(hex, json_string_value(jh)))
		return bad(ctx, "%s: checksum xxh64 %s; the manifest expects %s (the file is "
		           "corrupt)", path, hex, json_string_value(jh));
	return ACCEL_OK;
}

/* Read and check the manifest against the running job; *ret_root owned. */
static int read_manifest(accel_ctx *ctx, const char *dir, json_t **ret_root)
{
	char path[PATH_CAP];
	json_error_t je;
	struct stat sb;
	pjoin(path, sizeof(path), dir, "manifest.json");
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return bad(ctx, "%s: no such checkpoint directory", dir);
	if (stat(path, &sb) != 0)
		return bad(ctx, "%s: missing: %s is not a committed checkpoint (a save that did not "
		           "finish leaves no manifest)", path, dir);
	json_t *root = json_load_file(path, 0, &je);
	if (!root)
		return bad(ctx, "%s:%d: not valid JSON: %s", path, je.line, je.text);
	json_t *jv = json_object_get(root, "format_version");
	json_t *jw = json_object_get(root, "world_size");
	json_t *jst = json_object_get(root, "strategy");
	json_t *jp = json_object_get(root, "plugins");
	int rc;
	if (!json_is_integer(jv)) {
		rc = bad(ctx, "%s: no format_version: not an accel checkpoint manifest", path);
		goto fail;
	}
	if (json_integer_value(jv) != CKPT_FORMAT_VERSION) {
		rc = bad(ctx, "%s: format_version %" JSON_INTEGER_FORMAT "; this accel (%s) reads "
		         "version %d (a newer accel wrote it?)", path, json_integer_value(jv),
		         ACCEL_VERSION_STRING, CKPT_FORMAT_VERSION);
		goto fail;
	}
	if (!json_is_integer(jw) || !json_is_string(jst) || !json_is_array(jp) ||
	    !json_is_integer(json_object_get(root, "step")) ||
	    !json_is_object(json_object_get(root, "files"))) {
		rc = bad(ctx, "%s: world_size, strategy, plugins, step or files missing or of the "
		         "wrong type", path);
		goto fail;
	}
	if (json_integer_value(jw) != ctx->world.world_size) {
		rc = bad(ctx, "%s: saved by %" JSON_INTEGER_FORMAT " processes; this job has %d: "
		         "loading at another world size (resharding) is not supported yet: resume "
		         "with %" JSON_INTEGER_FORMAT " processes", path, json_integer_value(jw),
		         ctx->world.world_size, json_integer_value(jw));
		goto fail;
	}
	if (strcmp(json_string_value(jst), strategy_name(ctx))) {
		rc = bad(ctx, "%s: saved with strategy '%s'; this job runs '%s': loading under "
		         "another strategy (resharding) is not supported yet", path,
		         json_string_value(jst), strategy_name(ctx));
		goto fail;
	}
	*ret_root = root;
	return ACCEL_OK;
fail:
	json_decref(root);
	return rc;
}

static uint32_t plugin_version(accel_ctx *ctx, json_t *plugins, const char *name,
                               const char *path, int *ret_rc)
{
	size_t i;
	json_t *p;
	json_array_foreach(plugins, i, p) {
		json_t *n = json_object_get(p, "name"), *v = json_object_get(p, "state_version");
		if (json_is_string(n) && !strcmp(json_string_value(n), name) && json_is_integer(v))
			return (uint32_t)json_integer_value(v);
	}
	*ret_rc = bad(ctx, "%s: no state of plugin '%s', which this job runs (the checkpoint was "
	              "saved without it)", path, name);
	return 0;
}

static int load_params(accel_ctx *ctx, const char *path)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	accel_st_reader *r = NULL;
	void *stage = NULL;
	int rc = accelp_st_reader_new(path, &r, err);
	for (uint32_t i = 0; !rc && i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		const accel_st_tensor *t;
		char name[600];
		snprintf(name, sizeof(name), "param/%s", p->name);
		if (accelp_st_reader_find(r, name, &t, NULL) != ACCEL_OK) {
			rc = bad(ctx, "%s: no tensor '%s' (the model has this parameter)", path, name);
			break;
		}
		int same = t->dtype == p->dtype && t->ndim == p->ndim;
		for (uint32_t d = 0; same && d < p->ndim; d++)
			same = t->shape[d] == (uint64_t)p->shape[d];
		if (!same) {
			rc = bad(ctx, "%s: tensor '%s' is %s of %" PRIu64 " elements in %u dims; the model "
			         "has %s of %" PRIu64 " elements in %u dims", path, name,
			         accel_dtype_name(t->dtype), t->numel, t->ndim, accel_dtype_name(p->dtype),
			         p->numel, p->ndim);
			break;
		}
		accel_view data, grad;
		if ((rc = accelp_train_param_view(ctx->train, i, &data, &grad)))
			break;
		free(stage);
		size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
		if (!(stage = malloc(bytes ? bytes : 1))) {
			rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			break;
		}
		accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, stage, p->numel};
		if ((rc = accelp_st_reader_read(r, t, 0, p->numel, stage, err)) ||
		    (rc = accelp_ops_copy(&data, &hv, err)))
			break;
	}
	free(stage);
	accelp_st_reader_free(r);
	return rc;
}

static int load_rank(accel_ctx *ctx, const char *path, json_t *plugins, const char *mpath)
{
	accel_err *err = &ctx->err;
	accel_ckpt_reader cr = {.err = err};
	int rc = accelp_st_reader_new(path, &cr.st, err);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (!a->inited || !a->vt->load_state)
			continue;
		uint32_t v = plugin_version(ctx, plugins, a->vt->desc->name, mpath, &rc);
		if (rc)
			goto out;
		a->host.ckpt = &cr;
		rc = a->vt->load_state(a->state, (accel_ckpt_reader *)&cr, v);
		a->host.ckpt = NULL;
		if (rc) {
			if (!ctx->err.code)
				accelp_err_set(err, rc, "%s: load_state from %s failed (%s)", a->host.name,
				               path, accel_status_str(rc));
			goto out;
		}
	}
	for (uint32_t i = 0; i < ctx->n_samplers; i++) {
		accel_sampler_state st;
		char buf[32];
		snprintf(buf, sizeof(buf), "%u", i);
		if ((rc = accelp_ckpt_read(&cr, "sampler", buf, &st, sizeof(st), err)))
			goto out;
		if ((rc = accel_sampler_restore(ctx->samplers[i], &st)))
			goto out;
	}
out:
	accelp_st_reader_free(cr.st);
	return rc;
}

int accel_load_state(accel_ctx *ctx, const char *dir)
{
	char path[PATH_CAP], mpath[PATH_CAP];
	json_t *root = NULL;
	int rc = check_ready(ctx, dir, "accel_load_state");
	if (rc)
		return rc;
	pjoin(mpath, sizeof(mpath), dir, "manifest.json");
	snprintf(path, sizeof(path), "rank%d.safetensors", ctx->world.rank);
	if (!(rc = read_manifest(ctx, dir, &root))) {
		json_t *files = json_object_get(root, "files");
		json_t *js = json_object_get(root, "samplers");
		if (json_integer_value(js) != (json_int_t)ctx->n_samplers)
			rc = bad(ctx, "%s: %" JSON_INTEGER_FORMAT " samplers saved; this job has %u "
			         "(create the same samplers before loading)", mpath,
			         json_integer_value(js), ctx->n_samplers);
		if (!rc)
			rc = verify_file(ctx, dir, files, "model.safetensors");
		if (!rc)
			rc = verify_file(ctx, dir, files, path);
	}
	if ((rc = agree(ctx, rc, "accel_load_state (checking the checkpoint)")))
		goto out;
	pjoin(path, sizeof(path), dir, "model.safetensors");
	rc = load_params(ctx, path);
	if (!rc) {
		char name[64];
		snprintf(name, sizeof(name), "rank%d.safetensors", ctx->world.rank);
		pjoin(path, sizeof(path), dir, name);
		rc = load_rank(ctx, path, json_object_get(root, "plugins"), mpath);
	}
	if (!rc)
		rc = accelp_train_set_step_count(
			ctx->train, (uint64_t)json_integer_value(json_object_get(root, "step")),
			(uint32_t)json_integer_value(json_object_get(root, "micro_step")));
	rc = agree(ctx, rc, "accel_load_state");
out:
	json_decref(root);
	return rc;
}
