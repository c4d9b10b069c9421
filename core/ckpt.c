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
#include "ckpt_manifest.h"
#include "ctx-impl.h"
#include "log.h"
#include "ops.h"
#include "safetensors.h"
#include "sampler.h"
#include "train.h"

#define CKPT_FORMAT_VERSION ACCELP_CKPT_FORMAT_VERSION
#define PATH_CAP 4096
/* safetensors metadata key: this file's tensor slices, as JSON */
#define SLICES_META "accel.slices"
/* and its blobs' checksums: JSON object of key -> xxh64 hex */
#define BLOBS_META "accel.blobs"

/* One tensor slice written to this rank's file. */
typedef struct ckpt_rec {
	char *name, *key;
	uint32_t dtype, ndim;
	uint64_t shape[ACCEL_CKPT_MAX_DIMS];
	uint64_t offset, count, xxh64;
	const void *data;         /* the slice's bytes, until commit (hashed then) */
} ckpt_rec;

struct accel_ckpt_writer {
	accel_st_writer *st;
	accel_err *err;
	void **copies;            /* blob copies, borrowed by st until commit */
	uint32_t n_copies, cap_copies;
	ckpt_rec *recs;
	uint32_t n_recs, cap_recs;
	json_t *blobs;            /* key -> xxh64 of each blob */
};

struct accel_ckpt_reader {
	accel_st_reader *st;      /* this rank's file; NULL at another world size */
	accel_err *err;
	accelp_ckpt_manifest *m;
	int file;                 /* st's index in m->files */
	int saved_world, world;
	const char *strategy;     /* this job's strategy (the saving one's: m->strategy) */
};

/* ---- streams (host->ckpt_*) --------------------------------------------------------- */

static void *keep_copy(accel_ckpt_writer *w, const void *data, uint64_t bytes, accel_err *err);

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
	void *copy = keep_copy(w, data, bytes, err);
	if (!copy)
		return err->code;
	char hex[20];
	snprintf(hex, sizeof(hex), "%016" PRIx64, XXH64(copy, (size_t)bytes, 0));
	if ((!w->blobs && !(w->blobs = json_object())) ||
	    json_object_set_new(w->blobs, full, json_string(hex)))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	uint64_t shape[1] = {bytes};
	return accelp_st_writer_add(w->st, full, ACCEL_DTYPE_U8, 1, shape, copy, err);
}

/* A copy of `bytes` at `data` the writer frees after commit; NULL on failure
 * (recorded). */
static void *keep_copy(accel_ckpt_writer *w, const void *data, uint64_t bytes, accel_err *err)
{
	if (w->n_copies == w->cap_copies) {
		uint32_t cap = w->cap_copies ? 2 * w->cap_copies : 16;
		void **c = realloc(w->copies, cap * sizeof(*c));
		if (!c) {
			accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			return NULL;
		}
		w->copies = c;
		w->cap_copies = cap;
	}
	void *copy = malloc(bytes ? (size_t)bytes : 1);
	if (!copy) {
		accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory copying %" PRIu64 " bytes of "
		               "checkpoint state", bytes);
		return NULL;
	}
	memcpy(copy, data, (size_t)bytes);
	w->copies[w->n_copies++] = copy;
	return copy;
}

/* Record slice `s` (data already in the file as `key`) for the manifest. */
static int add_rec(accel_ckpt_writer *w, const accel_ckpt_slice_v1 *s, const char *key,
                   const void *data, accel_err *err)
{
	if (w->n_recs == w->cap_recs) {
		uint32_t cap = w->cap_recs ? 2 * w->cap_recs : 16;
		ckpt_rec *r = realloc(w->recs, cap * sizeof(*r));
		if (!r)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		w->recs = r;
		w->cap_recs = cap;
	}
	ckpt_rec *r = &w->recs[w->n_recs];
	memset(r, 0, sizeof(*r));
	r->name = strdup(s->name);
	r->key = strdup(key);
	if (!r->name || !r->key) {
		free(r->name);
		free(r->key);
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	}
	r->dtype = s->dtype;
	r->ndim = s->ndim;
	for (uint32_t d = 0; d < s->ndim; d++)
		r->shape[d] = s->shape[d];
	r->offset = s->offset;
	r->count = s->count;
	r->data = data;   /* hashed during commit, while the file is written */
	w->n_recs++;
	return ACCEL_OK;
}

int accelp_ckpt_write_tensor(accel_ckpt_writer *w, const char *plugin,
                             const accel_ckpt_slice_v1 *s, int borrow, accel_err *err)
{
	char key[600], shp[256];
	if (!w)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: ckpt_write_tensor outside save_state",
		                      plugin);
	if (!s || s->struct_size < offsetof(accel_ckpt_slice_v1, data) + sizeof(s->data) ||
	    !s->name || !*s->name || (s->ndim && !s->shape) || (s->count && !s->data))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_write_tensor: NULL slice, "
		                      "name, shape or data, or a slice struct_size too small", plugin);
	if (s->ndim > ACCEL_CKPT_MAX_DIMS || !accelp_st_dtype_name(s->dtype))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_write_tensor('%s'): %u "
		                      "dims (at most %d) or dtype %u with no safetensors name", plugin,
		                      s->name, s->ndim, ACCEL_CKPT_MAX_DIMS, s->dtype);
	if (!strchr(s->name, '/') || strchr(s->name, '@') || strlen(s->name) > 500 ||
	    (!borrow && (!strncmp(s->name, "param/", 6) || !strncmp(s->name, "sampler/", 8))))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_write_tensor: '%s' is not "
		                      "a canonical tensor name (master/<param>, optim/<state>/<param>; "
		                      "no '@'; param/ is the core's)", plugin, s->name);
	uint64_t numel = 1;
	for (uint32_t d = 0; d < s->ndim; d++)
		numel *= s->shape[d];
	if (s->offset > numel || s->count > numel - s->offset)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_write_tensor('%s'): "
		                      "elements [%" PRIu64 ", %" PRIu64 ") lie outside its shape %s",
		                      plugin, s->name, s->offset, s->offset + s->count,
		                      accelp_ckpt_shape_str(s->shape, s->ndim, shp, sizeof(shp)));
	if (!s->count)
		return ACCEL_OK;   /* nothing of it here */
	const void *data = s->data;
	if (!borrow && !(s->flags & ACCEL_CKPT_BORROW) &&
	    !(data = keep_copy(w, s->data, s->count * accel_dtype_size(s->dtype), err)))
		return err->code;
	int rc;
	if (s->count == numel) {
		snprintf(key, sizeof(key), "%s", s->name);
		rc = accelp_st_writer_add(w->st, key, s->dtype, s->ndim, s->shape, data, err);
	} else {
		snprintf(key, sizeof(key), "%s@%" PRIu64, s->name, s->offset);
		uint64_t shape[1] = {s->count};
		rc = accelp_st_writer_add(w->st, key, s->dtype, 1, shape, data, err);
	}
	return rc ? rc : add_rec(w, s, key, data, err);
}

/* The writer's slices as JSON text (malloc'ed; NULL: out of memory); with
 * hashes 0 every xxh64 is a placeholder of the same length. */
static char *slices_json(const accel_ckpt_writer *w, int hashes)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < w->n_recs; i++) {
		const ckpt_rec *r = &w->recs[i];
		json_t *shape = json_array();
		char hex[20];
		for (uint32_t d = 0; shape && d < r->ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)r->shape[d]));
		uint64_t h = hashes ? XXH64(r->data, (size_t)(r->count * accel_dtype_size(r->dtype)), 0)
		                    : 0;
		snprintf(hex, sizeof(hex), "%016" PRIx64, h);
		json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:I,s:I,s:s}", "name", r->name, "key", r->key,
		                      "dtype", accelp_st_dtype_name(r->dtype), "shape", shape,
		                      "offset", (json_int_t)r->offset, "count", (json_int_t)r->count,
		                      "xxh64", hex);
		if (!o || json_array_append_new(a, o)) {
			json_decref(a);
			a = NULL;
		}
	}
	char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
	json_decref(a);
	return text;
}

/* slices_json with the hashes: what commit puts in the header once it has
 * computed them (on its hashing thread, while the data is written) */
static char *slices_late(void *arg)
{
	return slices_json(arg, 1);
}

/* The writer's slices, into the file's metadata: a placeholder now, the
 * real checksums during commit. */
static int set_slices_meta(accel_ckpt_writer *w, accel_err *err)
{
	char *text = slices_json(w, 0);
	int rc;
	if (!text)
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	else if (!(rc = accelp_st_writer_set_metadata(w->st, SLICES_META, text, err)))
		rc = accelp_st_writer_late_metadata(w->st, SLICES_META, slices_late, w, err);
	free(text);
	if (!rc && w->blobs) {
		text = json_dumps(w->blobs, JSON_COMPACT | JSON_SORT_KEYS);
		rc = text ? accelp_st_writer_set_metadata(w->st, BLOBS_META, text, err)
		          : accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		free(text);
	}
	return rc;
}

static void writer_clear(accel_ckpt_writer *w)
{
	accelp_st_writer_free(w->st);
	for (uint32_t i = 0; i < w->n_copies; i++)
		free(w->copies[i]);
	free(w->copies);
	for (uint32_t i = 0; i < w->n_recs; i++) {
		free(w->recs[i].name);
		free(w->recs[i].key);
	}
	free(w->recs);
	json_decref(w->blobs);
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
	if (!r->st)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: blob '%s' is per-rank state "
		                      "saved by a job of %d processes; this job has %d: a plugin's "
		                      "blobs load only at the world size that saved them (state that "
		                      "must reshard is written as tensors: host->ckpt_write_tensor)",
		                      r->m->path, full, r->saved_world, r->world);
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
	if ((rc = accelp_st_reader_read(r->st, t, 0, bytes, buf, err)))
		return rc;
	return accelp_ckpt_manifest_verify_blob(r->m, (uint32_t)r->file, t->name, buf, bytes, err);
}

int accelp_ckpt_tensor_info(accel_ckpt_reader *r, const char *plugin, const char *name,
                            accel_ckpt_tensor_info_v1 *ret, accel_err *err)
{
	if (!r)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: ckpt_tensor_info outside load_state",
		                      plugin);
	if (!name || !ret || ret->struct_size < sizeof(uint32_t))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_tensor_info: NULL name "
		                      "or ret, or ret->struct_size not set", plugin);
	const accelp_ckpt_tensor *t = accelp_ckpt_manifest_find(r->m, name);
	if (!t)
		return ACCEL_ERR_NOT_FOUND;
	accel_ckpt_tensor_info_v1 in = {.struct_size = ret->struct_size, .dtype = t->dtype,
	                                .ndim = t->ndim, .numel = t->numel};
	for (uint32_t d = 0; d < t->ndim; d++)
		in.shape[d] = t->shape[d];
	uint32_t size = ret->struct_size < sizeof(in) ? ret->struct_size : (uint32_t)sizeof(in);
	memcpy(ret, &in, size);
	return ACCEL_OK;
}

int accelp_ckpt_read_tensor(accel_ckpt_reader *r, const char *plugin, const char *name,
                            uint32_t dtype, uint64_t offset, uint64_t count, void *buf,
                            accel_err *err)
{
	if (!r)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: ckpt_read_tensor outside load_state",
		                      plugin);
	if (!name || (count && !buf))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: ckpt_read_tensor: NULL name or "
		                      "buf", plugin);
	const accelp_ckpt_tensor *t = accelp_ckpt_manifest_find(r->m, name);
	if (!t && r->strategy && strcmp(r->strategy, r->m->strategy))
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: no tensor '%s', which this "
		                      "job's strategy '%s' (plugin %s) reads: the checkpoint was saved "
		                      "under strategy '%s', which did not write it (another optimizer "
		                      "or model?)", r->m->path, name, r->strategy, plugin,
		                      r->m->strategy);
	if (!t)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: no tensor '%s' (plugin %s reads "
		                      "it; was the checkpoint saved with it?)", r->m->path, name, plugin);
	if (t->dtype != dtype)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: tensor '%s' was saved as %s; "
		                      "plugin %s reads it as %s", r->m->path, name,
		                      accel_dtype_name(t->dtype), plugin, accel_dtype_name(dtype));
	if (offset > t->numel || count > t->numel - offset)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: plugin %s reads elements [%"
		                      PRIu64 ", %" PRIu64 ") of tensor '%s', which has %" PRIu64
		                      " (does its shape differ from the model's?)", r->m->path, plugin,
		                      offset, offset + count, name, t->numel);
	return accelp_ckpt_manifest_read(r->m, t, offset, count, buf, err);
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

/* sums: the file's size, XXH64 and header XXH64 from the writer (zeros
 * when it could not compute them: commit() then reads the file). */
static void writer_sums(const accel_ckpt_writer *w, int64_t *sums)
{
	uint64_t v[3];
	if (accelp_st_writer_hashes(w->st, &v[0], &v[1], &v[2]) == ACCEL_OK)
		memcpy(sums, v, sizeof(v));
}

static int save_params(accel_ctx *ctx, const char *path, int64_t *sums)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	accel_ckpt_writer cw = {.err = err};
	void **stage = calloc(m->n_params ? m->n_params : 1, sizeof(void *));
	int rc;
	if (!stage)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	if ((rc = accelp_st_writer_new(path, &cw.st, err)) ||
	    (rc = accelp_st_writer_set_metadata(cw.st, "format", "pt", err)))
		goto out;
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		accel_view data, grad;
		if ((rc = accelp_train_param_view(ctx->train, i, &data, &grad)))
			goto out;
		size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
		const void *src = data.data;
		/* host memory of the right dtype is written as it is (no step runs
		 * during the save); device memory is staged */
		if (data.device != ACCEL_DEVICE_CPU || data.dtype != p->dtype || !data.data ||
		    data.numel != p->numel) {
			if (!(stage[i] = malloc(bytes ? bytes : 1))) {
				rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory staging '%s'",
				                    p->name);
				goto out;
			}
			accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, stage[i], p->numel};
			if ((rc = accelp_ops_copy(&hv, &data, err)))
				goto out;
			src = stage[i];
		}
		char name[600];
		uint64_t shape[ACCEL_CKPT_MAX_DIMS];
		for (uint32_t d = 0; d < p->ndim; d++)
			shape[d] = (uint64_t)p->shape[d];
		snprintf(name, sizeof(name), "param/%s", p->name);
		accel_ckpt_slice_v1 sl = {sizeof(sl), p->dtype, p->ndim, ACCEL_CKPT_BORROW, name, shape,
		                          0, p->numel, src};
		if ((rc = accelp_ckpt_write_tensor(&cw, "core", &sl, 1, err)))
			goto out;
	}
	accelp_st_writer_skip_dir_sync(cw.st);   /* commit() fsyncs the directory */
	if (!(rc = set_slices_meta(&cw, err)) && !(rc = accelp_st_writer_commit(cw.st, err)))
		writer_sums(&cw, sums);
out:
	writer_clear(&cw);
	for (uint32_t i = 0; i < m->n_params; i++)
		free(stage[i]);
	free(stage);
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
	if (crash_here(ctx, "mid-file"))
		accelp_st_writer_crash_midway(cw.st, CRASH_EXIT);
	accelp_st_writer_skip_dir_sync(cw.st);   /* commit() fsyncs the directory */
	if (!(rc = set_slices_meta(&cw, err)) && !(rc = accelp_st_writer_commit(cw.st, err)))
		writer_sums(&cw, sums);
out:
	writer_clear(&cw);
	return rc;
}

/* Merge the slices file `name` lists in its metadata into `tensors`. */
static int add_slices(accel_ctx *ctx, json_t *tensors, json_t *files, const char *dir,
                      const char *name)
{
	char path[PATH_CAP], shp[256];
	accel_st_reader *r = NULL;
	json_error_t je;
	pjoin(path, sizeof(path), dir, name);
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
	pjoin(path, sizeof(path), dir, name);
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

static const char *strategy_name(const accel_ctx *ctx)
{
	return ctx->n_active ? ctx->active[0].vt->desc->name : "none";
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
	json_object_set_new(root, "tensors", tensors);
	tensors = NULL;
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
	pjoin(path, sizeof(path), tmp, "manifest.json");
	rc = write_text_file(path, text, err);
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
	if (fsync_path(tmp, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
	crash_point(ctx, "before-rename");
	if (rename(tmp, dir) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "renaming %s to %s: %s", tmp, dir,
		                      strerror(errno));
	parent_of(dir, parent, sizeof(parent));
	if (fsync_path(parent, 1) != 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: fsync: %s", parent, strerror(errno));
	crash_point(ctx, "before-latest");
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

/* ---- weights only ----------------------------------------------------------------- */

/* Rank 0: every parameter under its own name, one tensor staged at a time. */
static int write_model(accel_ctx *ctx, const char *file)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	accel_st_writer *w = NULL;
	void *stage = NULL;
	int rc;
	if ((rc = accelp_st_writer_new(file, &w, err)) ||
	    (rc = accelp_st_writer_set_metadata(w, "format", "pt", err)))
		goto out;
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		uint64_t shape[ACCEL_CKPT_MAX_DIMS];
		for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
			shape[d] = (uint64_t)p->shape[d];
		if ((rc = accelp_st_writer_add(w, p->name, p->dtype, p->ndim, shape, NULL, err)))
			goto out;
	}
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		accel_view data, grad;
		if ((rc = accelp_train_param_view(ctx->train, i, &data, &grad)))
			goto out;
		if (!data.data && p->numel) {
			rc = accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "accel_save_model: parameter '%s' "
			                    "is not held whole on rank 0 by strategy '%s'", p->name,
			                    strategy_name(ctx));
			goto out;
		}
		size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
		free(stage);
		if (!(stage = malloc(bytes ? bytes : 1))) {
			rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory staging '%s'", p->name);
			goto out;
		}
		accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, stage, p->numel};
		if ((rc = accelp_ops_copy(&hv, &data, err)) ||
		    (rc = accelp_st_writer_write(w, p->name, stage, bytes, err)))
			goto out;
	}
	rc = accelp_st_writer_commit(w, err);
out:
	free(stage);
	accelp_st_writer_free(w);
	return rc;
}

int accel_save_model(accel_ctx *ctx, const char *file)
{
	int rc = check_ready(ctx, file, "accel_save_model");
	if (rc)
		return rc;
	if (ctx->world.rank == 0)
		rc = write_model(ctx, file);
	return agree(ctx, rc, "accel_save_model");
}

/* ---- automatic checkpoint naming (project_dir, total_limit, iteration) ------------- */

/* project_dir/checkpoints into buf; ACCEL_ERR_INVALID_ARG when automatic
 * naming is off. */
static int auto_root(accel_ctx *ctx, const char *fn, char *buf, size_t cap)
{
	int32_t on = 0;
	const char *pd = ".";
	if (accel_config_bool(ctx, "automatic_checkpoint_naming", &on) != ACCEL_OK || !on)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: no directory given (pass "
		                      "one, or set automatic_checkpoint_naming=true to use "
		                      "project_dir/checkpoints/checkpoint_<n>)", fn);
	if (accel_config_string(ctx, "project_dir", &pd) != ACCEL_OK || !pd || !*pd)
		pd = ".";
	if (snprintf(buf, cap, "%s/checkpoints", pd) >= (int)cap - 64)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: project_dir too long", fn);
	return ACCEL_OK;
}

static int64_t next_iteration(accel_ctx *ctx)
{
	if (!ctx->ckpt_iteration_set) {
		int64_t it = 0;
		if (accel_config_int(ctx, "iteration", &it) != ACCEL_OK)
			it = 0;
		ctx->ckpt_iteration = it;
		ctx->ckpt_iteration_set = 1;
	}
	return ctx->ckpt_iteration;
}

/* n of "checkpoint_<n>", or -1. */
static int64_t auto_number(const char *name)
{
	if (strncmp(name, "checkpoint_", 11) || !name[11])
		return -1;
	int64_t n = 0;
	for (const char *p = name + 11; *p; p++) {
		if (*p < '0' || *p > '9' || n > INT64_MAX / 10 - 10)
			return -1;
		n = n * 10 + (*p - '0');
	}
	return n;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Rank 0, after committing checkpoint_<keep>: keep the newest total_limit
 * committed checkpoint_<n> (with a manifest) under root, the one just
 * committed always among them (numbering may have been restarted lower
 * with `iteration`); remove the others. */
static void prune(accel_ctx *ctx, const char *root, int64_t keep)
{
	int64_t limit = 0;
	if (accel_config_int(ctx, "total_limit", &limit) != ACCEL_OK || limit < 1)
		return;
	DIR *d = opendir(root);
	if (!d)
		return;
	int64_t *nums = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	char path[PATH_CAP], mpath[PATH_CAP];
	struct stat sb;
	while ((e = readdir(d))) {
		int64_t k = auto_number(e->d_name);
		pjoin(path, sizeof(path), root, e->d_name);
		pjoin(mpath, sizeof(mpath), path, "manifest.json");
		if (k < 0 || k == keep || stat(mpath, &sb) != 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *t = realloc(nums, cap * sizeof(*t));
			if (!t)
				break;
			nums = t;
		}
		nums[n++] = k;
	}
	closedir(d);
	if (n)
		qsort(nums, n, sizeof(*nums), cmp_i64);
	/* `keep` is one of the limit kept: the others are the newest limit - 1 */
	for (size_t i = 0; n > (size_t)limit - 1 && i < n - ((size_t)limit - 1); i++) {
		char name[64];
		snprintf(name, sizeof(name), "checkpoint_%" PRId64, nums[i]);
		pjoin(path, sizeof(path), root, name);
		/* the manifest first: a half-removed directory is no checkpoint */
		pjoin(mpath, sizeof(mpath), path, "manifest.json");
		unlink(mpath);
		remove_tree(path);
		if (stat(path, &sb) == 0)
			accelp_log(ACCEL_LOG_WARN, "total_limit %" PRId64 ": could not remove %s",
			           limit, path);
		else
			accelp_log(ACCEL_LOG_DEBUG, "total_limit %" PRId64 ": removed %s", limit, path);
	}
	free(nums);
}

static int save_state_at(accel_ctx *ctx, const char *dir_arg);

int accel_save_state(accel_ctx *ctx, const char *dir_arg)
{
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (dir_arg)
		return save_state_at(ctx, dir_arg);
	char root[PATH_CAP], dir[PATH_CAP];
	struct stat sb;
	int rc = auto_root(ctx, "accel_save_state", root, sizeof(root));
	if (rc)
		return rc;
	if (ctx->world.rank == 0 && stat(root, &sb) != 0) {
		char pd[PATH_CAP];
		parent_of(root, pd, sizeof(pd));
		mkdir(pd, 0755);
		if (mkdir(root, 0755) != 0 && errno != EEXIST)
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_IO, "accel_save_state: creating %s: %s",
			                    root, strerror(errno));
	}
	if ((rc = agree(ctx, rc, "accel_save_state")))
		return rc;
	if (snprintf(dir, sizeof(dir), "%s/checkpoint_%" PRId64, root, next_iteration(ctx)) >=
	    (int)sizeof(dir))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_save_state: "
		                      "project_dir too long");
	if ((rc = save_state_at(ctx, dir)))
		return rc;
	int64_t done = ctx->ckpt_iteration++;
	if (ctx->world.rank == 0)
		prune(ctx, root, done);
	return ACCEL_OK;
}

static int save_state_at(accel_ctx *ctx, const char *dir_arg)
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
	crash_point(ctx, "before-files");
	snprintf(name, sizeof(name), "rank%d.safetensors", rank);
	pjoin(path, sizeof(path), tmp, name);
	/* each rank's file sums, for rank 0's manifest (rank 0 need not read
	 * every file back to checksum it) */
	int W = ctx->world.world_size;
	int64_t *sums = calloc(3 * (size_t)(W + 1), sizeof(*sums));
	if (!sums)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	rc = save_rank(ctx, path, sums + 3 * rank);
	if (!rc && rank == 0) {
		pjoin(path, sizeof(path), tmp, "model.safetensors");
		rc = save_params(ctx, path, sums + 3 * W);
	}
	crash_point(ctx, "before-barrier");
	if (crash_here(ctx, "stall-before-barrier")) {
		fprintf(stderr, "accel: ACCEL_TEST_CKPT_CRASH: rank %d stalls before the barrier\n",
		        ctx->world.rank);
		sleep(3600);
	}
	/* the barrier: every rank's files are written and fsynced */
	if ((rc = agree(ctx, rc, "accel_save_state"))) {
		free(sums);
		if (rank == 0)
			remove_tree(tmp);
		return rc;
	}
	rc = accel_allreduce(ctx, sums, sums, 3 * (uint64_t)(W + 1), ACCEL_DTYPE_I64,
	                     ACCEL_RED_SUM);
	if (rank == 0 && (rc || (rc = commit(ctx, dir, tmp, sums))) && stat(tmp, &sb) == 0)
		remove_tree(tmp);
	free(sums);
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
	    strcmp(m->strategy, name))
		return 0;
	*ret_rc = bad(ctx, "%s: no state of plugin '%s', which this job runs (the checkpoint was "
	              "saved without it)", m->path, name);
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
			           strategy_name(ctx), n, name, list, n > 4 ? ", ..." : "");
		else
			accelp_log(ACCEL_LOG_INFO, "accel_load_state: %s: saved under strategy '%s'; "
			           "this job runs '%s', which reads the canonical tensors (plugin '%s' "
			           "saved no blobs)", m->dir, m->strategy, strategy_name(ctx), name);
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
static int check_model(accel_ctx *ctx, const accelp_ckpt_manifest *m)
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
			return bad(ctx, "%s: no tensor '%s' (the model has parameter '%s' %s %s)", m->path,
			           name, p->name, accel_dtype_name(p->dtype),
			           accelp_ckpt_shape_str(ps, p->ndim, s2, sizeof(s2)));
		if (t->dtype != p->dtype || !same_shape(t, p))
			return bad(ctx, "%s: tensor '%s' is %s %s; the model's parameter '%s' is %s %s",
			           m->path, name, accel_dtype_name(t->dtype),
			           accelp_ckpt_shape_str(t->shape, t->ndim, s1, sizeof(s1)), p->name,
			           accel_dtype_name(p->dtype),
			           accelp_ckpt_shape_str(ps, p->ndim, s2, sizeof(s2)));
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
			if (!same_shape(t, p)) {
				uint64_t ps[ACCEL_CKPT_MAX_DIMS];
				for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
					ps[d] = (uint64_t)p->shape[d];
				return bad(ctx, "%s: tensor '%s' has shape %s; the model's parameter '%s' has "
				           "shape %s", m->path, t->name,
				           accelp_ckpt_shape_str(t->shape, t->ndim, s1, sizeof(s1)), p->name,
				           accelp_ckpt_shape_str(ps, p->ndim, s2, sizeof(s2)));
			}
		}
	}
	return ACCEL_OK;
}

/* Checks that need no change to the job: manifest against the job, files. */
static int check_checkpoint(accel_ctx *ctx, accelp_ckpt_manifest *m)
{
	int rc = ACCEL_OK;
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		accel_active *a = &ctx->active[i];
		if (a->inited && a->vt->load_state)
			plugin_version(ctx, m, a, &rc);
		if (rc)
			return rc;
	}
	if (m->samplers != (int64_t)ctx->n_samplers)
		return bad(ctx, "%s: %" PRId64 " samplers saved; this job has %u (create the same "
		           "samplers before loading)", m->path, m->samplers, ctx->n_samplers);
	char name[64];
	if (accelp_ckpt_manifest_file_index(m, "model.safetensors") < 0 ||
	    accelp_ckpt_manifest_file_index(m, "rank0.safetensors") < 0)
		return bad(ctx, "%s: files lists no model.safetensors or rank0.safetensors", m->path);
	for (int64_t r = 0; r < m->world_size; r++) {
		snprintf(name, sizeof(name), "rank%" PRId64 ".safetensors", r);
		if (accelp_ckpt_manifest_file_index(m, name) < 0)
			return bad(ctx, "%s: saved by %" PRId64 " processes but files lists no %s", m->path,
			           m->world_size, name);
	}
	if ((rc = accelp_ckpt_manifest_check_files(m, &ctx->err)))
		return rc;
	if ((rc = check_model(ctx, m)))
		return rc;
	/* every file's header; the data is checked slice by slice and blob by
	 * blob as it is read (one pass over the bytes) */
	for (uint32_t i = 0; i < m->n_files; i++)
		if ((rc = accelp_ckpt_manifest_verify_header(m, i, &ctx->err)))
			return rc;
	if (ctx->world.rank == 0 && strcmp(m->strategy, strategy_name(ctx)))
		log_skipped(ctx, m);
	return ACCEL_OK;
}

static int load_params(accel_ctx *ctx, accelp_ckpt_manifest *m)
{
	accel_err *err = &ctx->err;
	const accel_model_v1 *model = accelp_train_model(ctx->train);
	void *stage = NULL;
	int rc = ACCEL_OK;
	for (uint32_t i = 0; !rc && i < model->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(model, i);
		char name[600];
		snprintf(name, sizeof(name), "param/%s", p->name);
		const accelp_ckpt_tensor *t = accelp_ckpt_manifest_find(m, name);
		if (!t) {   /* check_model saw it */
			rc = bad(ctx, "%s: no tensor '%s'", m->path, name);
			break;
		}
		accel_view data, grad;
		if ((rc = accelp_train_param_view(ctx->train, i, &data, &grad)))
			break;
		if (data.device == ACCEL_DEVICE_CPU && data.dtype == p->dtype && data.data &&
		    data.numel == p->numel) {   /* straight into the parameter */
			if ((rc = accelp_ckpt_manifest_read(m, t, 0, p->numel, data.data, err)))
				break;
			continue;
		}
		free(stage);
		size_t bytes = (size_t)p->numel * accel_dtype_size(p->dtype);
		if (!(stage = malloc(bytes ? bytes : 1))) {
			rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			break;
		}
		accel_view hv = {sizeof(hv), p->dtype, ACCEL_DEVICE_CPU, 0, stage, p->numel};
		if ((rc = accelp_ckpt_manifest_read(m, t, 0, p->numel, stage, err)) ||
		    (rc = accelp_ops_copy(&data, &hv, err)))
			break;
	}
	free(stage);
	return rc;
}

static int load_rank(accel_ctx *ctx, accelp_ckpt_manifest *m)
{
	accel_err *err = &ctx->err;
	accel_ckpt_reader cr = {.err = err, .m = m, .saved_world = (int)m->world_size,
	                        .world = ctx->world.world_size, .strategy = strategy_name(ctx)};
	accel_st_reader *r0 = NULL;
	char name[64], path[PATH_CAP];
	int rc = ACCEL_OK;
	if (m->world_size == ctx->world.world_size) {
		snprintf(name, sizeof(name), "rank%d.safetensors", ctx->world.rank);
		cr.file = accelp_ckpt_manifest_file_index(m, name);
		pjoin(path, sizeof(path), m->dir, name);
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
			goto out;
		}
	}
	/* the samplers' states are global (consumed counts all ranks'): rank 0's */
	pjoin(path, sizeof(path), m->dir, "rank0.safetensors");
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

int accel_load_state(accel_ctx *ctx, const char *dir)
{
	accelp_ckpt_manifest *m = NULL;
	char root[PATH_CAP], auto_dir[PATH_CAP], base[PATH_CAP];
	int rc;
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!dir) {   /* the newest automatic checkpoint: what checkpoints/latest names */
		if ((rc = auto_root(ctx, "accel_load_state", root, sizeof(root))))
			return rc;
		char lpath[PATH_CAP], line[512] = "";
		pjoin(lpath, sizeof(lpath), root, "latest");
		FILE *f = fopen(lpath, "r");
		if (!f)
			return bad(ctx, "accel_load_state: cannot read %s: %s (no checkpoint was "
			           "committed there)", lpath, strerror(errno));
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
		line[strcspn(line, "\r\n")] = '\0';
		if (!*line || strchr(line, '/'))
			return bad(ctx, "%s: does not name a checkpoint directory", lpath);
		pjoin(auto_dir, sizeof(auto_dir), root, line);
		dir = auto_dir;
	}
	if ((rc = check_ready(ctx, dir, "accel_load_state")))
		return rc;
	if (!(rc = accelp_ckpt_manifest_open(dir, &m, &ctx->err)))
		rc = check_checkpoint(ctx, m);
	if ((rc = agree(ctx, rc, "accel_load_state (checking the checkpoint)")))
		goto out;
	rc = load_params(ctx, m);
	if (!rc)
		rc = load_rank(ctx, m);
	if (!rc)
		rc = accelp_train_set_step_count(ctx->train, (uint64_t)m->step,
		                                 (uint32_t)m->micro_step);
	rc = agree(ctx, rc, "accel_load_state");
	if (!rc) {   /* the next automatic checkpoint follows the loaded one */
		int64_t k = auto_number(base_of(dir, base, sizeof(base)));
		int32_t on = 0;
		if (k >= 0 && accel_config_bool(ctx, "automatic_checkpoint_naming", &on) == ACCEL_OK &&
		    on) {
			ctx->ckpt_iteration = k + 1;
			ctx->ckpt_iteration_set = 1;
		}
	}
out:
	accelp_ckpt_manifest_free(m);
	return rc;
}
