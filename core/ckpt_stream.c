/* SPDX-License-Identifier: MIT */
/* core/ckpt_stream.c: the checkpoint streams behind host->ckpt_*
 * (docs/checkpoints.md, docs/abi.md#checkpoint-tensors): a save's writer
 * collects each rank file's tensor slices and blobs, a load's reader finds
 * them through the manifest. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt_impl.h"
#include "ckpt.h"

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

int accelp_ckpt_declare_tensor(accel_ckpt_writer *w, const accel_ckpt_slice_v1 *s,
                               uint32_t *ret_index, accel_err *err)
{
	if (!w || !s || !s->name || (s->ndim && !s->shape) || s->offset ||
	    s->ndim > ACCEL_CKPT_MAX_DIMS)
		return accelp_err_set(err, ACCEL_ERR_INTERNAL, "declare_tensor: bad arguments");
	int rc = accelp_st_writer_add(w->st, s->name, s->dtype, s->ndim, s->shape, NULL, err);
	if (rc || (rc = add_rec(w, s, s->name, NULL, err)))
		return rc;
	*ret_index = w->n_recs - 1;
	return ACCEL_OK;
}

int accelp_ckpt_stream_tensor(accel_ckpt_writer *w, uint32_t index, const void *data,
                              uint64_t bytes, accel_err *err)
{
	if (!w || index >= w->n_recs || w->recs[index].data ||
	    bytes != w->recs[index].count * accel_dtype_size(w->recs[index].dtype))
		return accelp_err_set(err, ACCEL_ERR_INTERNAL, "stream_tensor: bad arguments");
	ckpt_rec *r = &w->recs[index];
	int rc = accelp_st_writer_write(w->st, r->key, data, bytes, err);
	if (!rc)
		r->xxh64 = XXH64(data, (size_t)bytes, 0);
	return rc;
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
		uint64_t h = !hashes ? 0
		             : r->data ? XXH64(r->data, (size_t)(r->count * accel_dtype_size(r->dtype)), 0)
		                       : r->xxh64;
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
int accelp_ckpt_set_slices_meta(accel_ckpt_writer *w, accel_err *err)
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

void accelp_ckpt_writer_clear(accel_ckpt_writer *w)
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

/* optim/<state>/<param> of a state the job's new optimizer keeps and the
 * checkpoint lacks (checkpoint.allow_optimizer_change): the parameter, or
 * NULL. */
static const accel_param_info_v1 *fresh_param(const accel_ckpt_reader *r, const char *name)
{
	if (!r->model || strncmp(name, "optim/", 6))
		return NULL;
	for (int k = 0; k < 2 && r->fresh[k]; k++) {
		size_t n = strlen(r->fresh[k]);
		if (strncmp(name + 6, r->fresh[k], n) || name[6 + n] != '/')
			continue;
		for (uint32_t i = 0; i < r->model->n_params; i++)
			if (!strcmp(ACCEL_MODEL_PARAM(r->model, i)->name, name + 7 + n))
				return ACCEL_MODEL_PARAM(r->model, i);
	}
	return NULL;
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
	const accel_param_info_v1 *fp = t ? NULL : fresh_param(r, name);
	if (fp) {   /* a fresh optimizer state: f32 zeros of the parameter's shape */
		accel_ckpt_tensor_info_v1 z = {.struct_size = ret->struct_size,
		                               .dtype = ACCEL_DTYPE_F32, .ndim = fp->ndim,
		                               .numel = fp->numel};
		for (uint32_t d = 0; d < fp->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
			z.shape[d] = (uint64_t)fp->shape[d];
		uint32_t size = ret->struct_size < sizeof(z) ? ret->struct_size : (uint32_t)sizeof(z);
		memcpy(ret, &z, size);
		return ACCEL_OK;
	}
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
	const accel_param_info_v1 *fp = t ? NULL : fresh_param(r, name);
	if (fp && dtype == ACCEL_DTYPE_F32 && offset <= fp->numel && count <= fp->numel - offset) {
		memset(buf, 0, count * sizeof(float));
		return ACCEL_OK;
	}
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

