/* SPDX-License-Identifier: MIT */
/* core/ckpt_manifest.c: parse and check a checkpoint manifest (format
 * version 2) and read element ranges of saved tensors from their slices
 * (core/ckpt_manifest.h, docs/checkpoints.md). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "accel/accel.h"
#include "ckpt_manifest.h"

#define PATH_CAP 4096

static int bad(accel_err *err, const char *fmt, ...) ACCEL_PRINTF(2, 3);
static int bad(accel_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_err_setv(err, ACCEL_ERR_CHECKPOINT, fmt, ap);
	va_end(ap);
	return ACCEL_ERR_CHECKPOINT;
}

const char *accelp_ckpt_shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap)
{
	size_t n = 0;
	n += (size_t)snprintf(buf, cap, "[");
	for (uint32_t d = 0; d < ndim && n < cap; d++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, d ? ", " : "", shape[d]);
	if (n < cap)
		snprintf(buf + n, cap - n, "]");
	return buf;
}

int accelp_ckpt_hash_file(const char *path, uint64_t *ret_size, uint64_t *ret_hash,
                          accel_err *err)
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

int accelp_ckpt_hash_header(const char *path, uint64_t *ret_hash, accel_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(errno));
	unsigned char len8[8];
	char *buf = NULL;
	int rc = ACCEL_OK;
	uint64_t n = 0;
	if (fread(len8, 1, 8, f) != 8) {
		rc = accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: shorter than a safetensors header",
		                    path);
		goto out;
	}
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	if (n > ACCEL_ST_MAX_HEADER) {
		rc = accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: header length %" PRIu64 " is "
		                    "implausible", path, n);
		goto out;
	}
	if (!(buf = malloc(8 + n))) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto out;
	}
	memcpy(buf, len8, 8);
	if (fread(buf + 8, 1, n, f) != n) {
		rc = accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: header cut short", path);
		goto out;
	}
	*ret_hash = XXH64(buf, 8 + n, 0);
out:
	free(buf);
	fclose(f);
	return rc;
}

/* ---- parsing ----------------------------------------------------------------------- */

static int get_u64(json_t *o, const char *key, uint64_t *ret)
{
	json_t *j = json_object_get(o, key);
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return -1;
	*ret = (uint64_t)json_integer_value(j);
	return 0;
}

static int parse_hex(json_t *j, uint64_t *ret)
{
	const char *s = json_string_value(j);
	if (!s || strlen(s) != 16)
		return -1;
	uint64_t v = 0;
	for (int i = 0; i < 16; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			return -1;
		v = v << 4 | (uint64_t)d;
	}
	*ret = v;
	return 0;
}

/* A plain file name inside the checkpoint directory. */
static int plain_name(const char *s)
{
	return s && *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") &&
	       strlen(s) < 256;
}

static int by_offset(const void *a, const void *b)
{
	const accelp_ckpt_slice *x = a, *y = b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int by_name(const void *a, const void *b)
{
	const accelp_ckpt_tensor *x = a, *y = b;
	return strcmp(x->name, y->name);
}

static int parse_files(accelp_ckpt_manifest *m, json_t *files, accel_err *err)
{
	size_t n = json_object_size(files);
	m->files = calloc(n ? n : 1, sizeof(*m->files));
	if (!m->files)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	const char *key;
	json_t *v;
	json_object_foreach(files, key, v) {
		accelp_ckpt_file *f = &m->files[m->n_files];
		if (!plain_name(key))
			return bad(err, "%s: files: '%s' is not a file name inside the checkpoint "
			           "directory", m->path, key);
		if (get_u64(v, "size", &f->size) || parse_hex(json_object_get(v, "xxh64"), &f->xxh64) ||
		    parse_hex(json_object_get(v, "header_xxh64"), &f->header_xxh64))
			return bad(err, "%s: files: %s: no size, xxh64 and header_xxh64 (16 hex digits)",
			           m->path, key);
		json_t *jb = json_object_get(v, "blobs");
		if (jb && !json_is_object(jb))
			return bad(err, "%s: files: %s: blobs is not an object", m->path, key);
		f->blobs = jb;
		f->name = key;
		int r = -1, k = 0;
		if (sscanf(key, "rank%d.safetensors%n", &r, &k) == 1 && key[k] == '\0' && r >= 0)
			f->rank = r;
		else
			f->rank = -1;
		m->n_files++;
	}
	return ACCEL_OK;
}

static int parse_tensor(accelp_ckpt_manifest *m, const char *name, json_t *v,
                        accelp_ckpt_tensor *t, accel_err *err)
{
	json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape");
	json_t *jl = json_object_get(v, "slices");
	t->name = name;
	if (!*name)
		return bad(err, "%s: tensors: an empty tensor name", m->path);
	t->dtype = json_is_string(jd) ? accelp_st_dtype_parse(json_string_value(jd))
	                              : ACCEL_DTYPE_INVALID;
	if (t->dtype == ACCEL_DTYPE_INVALID)
		return bad(err, "%s: tensor '%s': dtype missing or unknown", m->path, name);
	if (!json_is_array(js) || json_array_size(js) > ACCELP_CKPT_MAX_DIMS)
		return bad(err, "%s: tensor '%s': shape is not an array of at most %d sizes", m->path,
		           name, ACCELP_CKPT_MAX_DIMS);
	t->ndim = (uint32_t)json_array_size(js);
	t->numel = 1;
	for (uint32_t d = 0; d < t->ndim; d++) {
		json_t *e = json_array_get(js, d);
		if (!json_is_integer(e) || json_integer_value(e) < 0 ||
		    json_integer_value(e) > (json_int_t)1 << 40)
			return bad(err, "%s: tensor '%s': shape[%u] is not a size", m->path, name, d);
		t->shape[d] = (uint64_t)json_integer_value(e);
		if (t->shape[d] && t->numel > ((uint64_t)1 << 50) / t->shape[d])
			return bad(err, "%s: tensor '%s': too many elements", m->path, name);
		t->numel *= t->shape[d];
	}
	if (!json_is_array(jl))
		return bad(err, "%s: tensor '%s': no slices", m->path, name);
	size_t ns = json_array_size(jl);
	t->slices = calloc(ns ? ns : 1, sizeof(*t->slices));
	if (!t->slices)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < ns; i++) {
		json_t *s = json_array_get(jl, i);
		accelp_ckpt_slice *sl = &t->slices[i];
		json_t *jf = json_object_get(s, "file"), *jk = json_object_get(s, "key");
		int fi = json_is_string(jf) ? accelp_ckpt_manifest_file_index(m, json_string_value(jf))
		                            : -1;
		if (fi < 0)
			return bad(err, "%s: tensor '%s': slice %zu names no file of the manifest's "
			           "files", m->path, name, i);
		if (!json_is_string(jk) || get_u64(s, "offset", &sl->offset) ||
		    get_u64(s, "count", &sl->count) || parse_hex(json_object_get(s, "xxh64"), &sl->xxh64))
			return bad(err, "%s: tensor '%s': slice %zu: key, offset, count or xxh64 "
			           "missing or of the wrong type", m->path, name, i);
		sl->file = (uint32_t)fi;
		sl->key = json_string_value(jk);
		t->n_slices++;
	}
	qsort(t->slices, t->n_slices, sizeof(*t->slices), by_offset);
	uint64_t at = 0;
	for (uint32_t i = 0; i < t->n_slices; i++) {
		const accelp_ckpt_slice *sl = &t->slices[i];
		if (sl->offset != at || sl->count == 0 || sl->count > t->numel - at)
			return bad(err, "%s: tensor '%s': its slices do not cover its %" PRIu64
			           " elements exactly once (a slice starts at element %" PRIu64
			           " with %" PRIu64 "; element %" PRIu64 " expected)", m->path, name,
			           t->numel, sl->offset, sl->count, at);
		at += sl->count;
	}
	if (at != t->numel)
		return bad(err, "%s: tensor '%s': its slices hold %" PRIu64 " of its %" PRIu64
		           " elements", m->path, name, at, t->numel);
	return ACCEL_OK;
}

/* ---- the manifest's own checksum and its fields ------------------------------------- */

int accelp_ckpt_manifest_hash(void *root_json, uint64_t *ret_hash)
{
	json_t *root = root_json;
	json_t *own = json_object_get(root, ACCELP_CKPT_SELF_KEY);
	if (own)
		json_incref(own);
	json_object_del(root, ACCELP_CKPT_SELF_KEY);
	char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	if (own)
		json_object_set_new(root, ACCELP_CKPT_SELF_KEY, own);
	if (!text)
		return ACCEL_ERR_NOMEM;
	*ret_hash = XXH64(text, strlen(text), 0);
	free(text);
	return ACCEL_OK;
}

/* manifest_xxh64, before any other field is used: a one-character edit of
 * `step` is refused like a flipped byte of a tensor file.  A manifest
 * without one (an accel before 0.1.0's checksum) is read, with m->unsealed
 * set for the caller to warn. */
static int check_self(accelp_ckpt_manifest *m, json_t *root, accel_err *err)
{
	json_t *j = json_object_get(root, ACCELP_CKPT_SELF_KEY);
	uint64_t want, got;
	if (!j) {
		m->unsealed = 1;
		return ACCEL_OK;
	}
	if (parse_hex(j, &want))
		return bad(err, "%s: %s is not 16 hex digits", m->path, ACCELP_CKPT_SELF_KEY);
	if (accelp_ckpt_manifest_hash(root, &got))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	if (got != want)
		return bad(err, "%s: its content has checksum xxh64 %016" PRIx64 "; its %s says %016"
		           PRIx64 " (the manifest was edited or is corrupt: checkpoints are not edited "
		           "by hand)", m->path, got, ACCELP_CKPT_SELF_KEY, want);
	m->self_xxh64 = got;
	return ACCEL_OK;
}

/* "manifest.json: step: -5 is not a step" */
static int bad_field(accelp_ckpt_manifest *m, const char *key, json_t *j, const char *what,
                     accel_err *err)
{
	if (!j)
		return bad(err, "%s: %s missing (it must be there: %s)", m->path, key, what);
	char *v = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
	int rc = bad(err, "%s: %s: %s %s", m->path, key, v ? v : "?", what);
	free(v);
	return rc;
}

/* An integer in [lo, hi]: required, or 0 when absent (older manifests). */
static int field_int(accelp_ckpt_manifest *m, json_t *root, const char *key, int required,
                     int64_t lo, int64_t hi, const char *what, int64_t *ret, accel_err *err)
{
	json_t *j = json_object_get(root, key);
	if (!j && !required) {
		*ret = 0;
		return ACCEL_OK;
	}
	if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
		return bad_field(m, key, j, what, err);
	*ret = json_integer_value(j);
	return ACCEL_OK;
}

static int check_fields(accelp_ckpt_manifest *m, json_t *root, accel_err *err)
{
	json_t *j;
	int rc;
	if ((rc = field_int(m, root, "world_size", 1, 1, 1 << 20, "is not a process count "
	                    "(1 to 1048576)", &m->world_size, err)) ||
	    (rc = field_int(m, root, "step", 1, 0, INT64_MAX / 2, "is not a step",
	                    &m->step, err)) ||
	    (rc = field_int(m, root, "micro_step", 0, 0, UINT32_MAX, "is not a micro-step",
	                    &m->micro_step, err)) ||
	    (rc = field_int(m, root, "samplers", 0, 0, UINT32_MAX, "is not a number of samplers",
	                    &m->samplers, err)) ||
	    (rc = field_int(m, root, "rngs", 0, 0, UINT32_MAX, "is not a number of generators",
	                    &m->rngs, err)))
		return rc;
	if (!json_is_string(j = json_object_get(root, "strategy")) || !*json_string_value(j))
		return bad_field(m, "strategy", j, "is not a plugin name", err);
	m->strategy = json_string_value(j);
	if (!json_is_array(j = json_object_get(root, "plugins")))
		return bad_field(m, "plugins", j, "is not an array of plugins", err);
	size_t i;
	json_t *p;
	json_array_foreach(j, i, p) {
		json_t *n = json_object_get(p, "name"), *v = json_object_get(p, "state_version");
		char key[64];
		snprintf(key, sizeof(key), "plugins[%zu]", i);
		if (!json_is_string(n) || !json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > UINT32_MAX)
			return bad_field(m, key, p, "is not {\"name\": string, \"state_version\": "
			                 "0 to 4294967295}", err);
	}
	if (!json_is_object(j = json_object_get(root, "files")))
		return bad_field(m, "files", j, "is not an object of files", err);
	if (!json_is_object(j = json_object_get(root, "tensors")))
		return bad_field(m, "tensors", j, "is not an object of tensors", err);
	if ((j = json_object_get(root, "accel_version")) && !json_is_string(j))
		return bad_field(m, "accel_version", j, "is not a version string", err);
	m->accel_version = json_string_value(j);
	return ACCEL_OK;
}

int accelp_ckpt_manifest_parse(const char *text, size_t len, const char *dir,
                               accelp_ckpt_manifest **ret, accel_err *err)
{
	json_error_t je;
	int rc = ACCEL_OK;
	accelp_ckpt_manifest *m = calloc(1, sizeof(*m));
	if (!m)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	size_t pl = strlen(dir) + sizeof("/manifest.json");
	m->dir = strdup(dir);
	m->path = malloc(pl);
	if (!m->dir || !m->path) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	snprintf(m->path, pl, "%s/manifest.json", dir);
	json_t *root = json_loadb(text, len, 0, &je);
	m->root = root;
	if (!root) {
		rc = bad(err, "%s:%d: not valid JSON: %s", m->path, je.line, je.text);
		goto fail;
	}
	json_t *jv = json_object_get(root, "format_version");
	if (!json_is_integer(jv)) {
		rc = bad(err, "%s: no format_version: not an accel checkpoint manifest", m->path);
		goto fail;
	}
	m->version = json_integer_value(jv);
	if (m->version != ACCELP_CKPT_FORMAT_VERSION) {
		rc = bad(err, "%s: format_version %" PRId64 "; this accel (%s) reads version %d (%s)",
		         m->path, m->version, ACCEL_VERSION_STRING, ACCELP_CKPT_FORMAT_VERSION,
		         m->version > ACCELP_CKPT_FORMAT_VERSION
		                 ? "a newer accel wrote it?"
		                 : "an older accel wrote it: resume with that accel, or train again");
		goto fail;
	}
	if ((rc = check_self(m, root, err)) || (rc = check_fields(m, root, err)))
		goto fail;
	json_t *jfiles = json_object_get(root, "files"), *jt = json_object_get(root, "tensors");
	if ((rc = parse_files(m, jfiles, err)))
		goto fail;
	size_t nt = json_object_size(jt);
	m->tensors = calloc(nt ? nt : 1, sizeof(*m->tensors));
	if (!m->tensors) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	const char *key;
	json_t *v;
	json_object_foreach(jt, key, v) {
		rc = parse_tensor(m, key, v, &m->tensors[m->n_tensors], err);
		m->n_tensors++;
		if (rc)
			goto fail;
	}
	qsort(m->tensors, m->n_tensors, sizeof(*m->tensors), by_name);
	*ret = m;
	return ACCEL_OK;
fail:
	accelp_ckpt_manifest_free(m);
	return rc;
}

int accelp_ckpt_manifest_open(const char *dir, accelp_ckpt_manifest **ret, accel_err *err)
{
	char path[PATH_CAP];
	struct stat sb;
	if (snprintf(path, sizeof(path), "%s/manifest.json", dir) >= (int)sizeof(path))
		return bad(err, "%s: path too long", dir);
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return bad(err, "%s: no such checkpoint directory", dir);
	FILE *f = fopen(path, "rb");
	if (!f)
		return bad(err, "%s: missing: %s is not a committed checkpoint (a save that did not "
		           "finish leaves no manifest)", path, dir);
	char *text = NULL;
	size_t len = 0, cap = 0;
	int rc = ACCEL_OK;
	for (;;) {
		if (len == cap) {
			cap = cap ? 2 * cap : 1 << 16;
			if (cap > (size_t)1 << 30) {
				rc = bad(err, "%s: larger than 1 GiB", path);
				break;
			}
			char *t = realloc(text, cap);
			if (!t) {
				rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
				break;
			}
			text = t;
		}
		size_t k = fread(text + len, 1, cap - len, f);
		len += k;
		if (k == 0) {
			if (ferror(f))
				rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: read error", path);
			break;
		}
	}
	fclose(f);
	if (!rc)
		rc = accelp_ckpt_manifest_parse(text ? text : "", len, dir, ret, err);
	free(text);
	return rc;
}

accelp_ckpt_manifest *accelp_ckpt_manifest_free(accelp_ckpt_manifest *m)
{
	if (!m)
		return NULL;
	for (uint32_t i = 0; i < m->n_files; i++)
		accelp_st_reader_free(m->files[i].st);
	for (uint32_t i = 0; i < m->n_tensors; i++)
		free(m->tensors[i].slices);
	free(m->files);
	free(m->tensors);
	json_decref(m->root);
	free(m->dir);
	free(m->path);
	free(m);
	return NULL;
}

const accelp_ckpt_tensor *accelp_ckpt_manifest_find(const accelp_ckpt_manifest *m,
                                                    const char *name)
{
	accelp_ckpt_tensor key = {.name = name};
	return bsearch(&key, m->tensors, m->n_tensors, sizeof(key), by_name);
}

int accelp_ckpt_manifest_file_index(const accelp_ckpt_manifest *m, const char *name)
{
	for (uint32_t i = 0; i < m->n_files; i++)
		if (!strcmp(m->files[i].name, name))
			return (int)i;
	return -1;
}

/* ---- files and reads ----------------------------------------------------------------- */

static void file_path(const accelp_ckpt_manifest *m, uint32_t i, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s", m->dir, m->files[i].name);
}

/* " : it holds rank 1's shard: 'master/w' elements [a, b) of n" or "". */
static void holder(const accelp_ckpt_manifest *m, uint32_t fi, char *buf, size_t cap)
{
	buf[0] = '\0';
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const accelp_ckpt_tensor *t = &m->tensors[i];
		for (uint32_t k = 0; k < t->n_slices; k++) {
			const accelp_ckpt_slice *s = &t->slices[k];
			if (s->file != fi)
				continue;
			char who[48] = "";
			if (m->files[fi].rank >= 0)
				snprintf(who, sizeof(who), "rank %d's shard: ", m->files[fi].rank);
			snprintf(buf, cap, "; it holds %stensor '%s' elements [%" PRIu64 ", %" PRIu64
			         ") of %" PRIu64 "%s", who, t->name, s->offset, s->offset + s->count,
			         t->numel, t->n_slices > 1 || m->n_tensors > 1 ? ", and more" : "");
			return;
		}
	}
}

int accelp_ckpt_manifest_check_files(const accelp_ckpt_manifest *m, accel_err *err)
{
	char path[PATH_CAP], held[1024];
	struct stat sb;
	for (uint32_t i = 0; i < m->n_files; i++) {
		file_path(m, i, path, sizeof(path));
		if (stat(path, &sb) != 0) {
			holder(m, i, held, sizeof(held));
			return bad(err, "%s: missing (the manifest lists it: %" PRIu64 " bytes)%s", path,
			           m->files[i].size, held);
		}
		if ((uint64_t)sb.st_size != m->files[i].size) {
			holder(m, i, held, sizeof(held));
			return bad(err, "%s: %" PRIu64 " bytes; the manifest expects %" PRIu64 " (truncated "
			           "or replaced)%s", path, (uint64_t)sb.st_size, m->files[i].size, held);
		}
	}
	return ACCEL_OK;
}

int accelp_ckpt_manifest_verify_header(const accelp_ckpt_manifest *m, uint32_t i,
                                       accel_err *err)
{
	char path[PATH_CAP];
	uint64_t hash;
	file_path(m, i, path, sizeof(path));
	int rc = accelp_ckpt_hash_header(path, &hash, err);
	if (rc == ACCEL_ERR_IO)
		return bad(err, "%s: missing (the manifest lists it: %" PRIu64 " bytes)", path,
		           m->files[i].size);
	if (rc)
		return rc;
	if (hash != m->files[i].header_xxh64)
		return bad(err, "%s: header checksum xxh64 %016" PRIx64 "; the manifest expects %016"
		           PRIx64 " (the file is corrupt)", path, hash, m->files[i].header_xxh64);
	return ACCEL_OK;
}

int accelp_ckpt_manifest_verify_blob(const accelp_ckpt_manifest *m, uint32_t i, const char *key,
                                     const void *data, uint64_t bytes, accel_err *err)
{
	uint64_t want, got = XXH64(data, (size_t)bytes, 0);
	if (parse_hex(json_object_get(m->files[i].blobs, key), &want))
		return bad(err, "%s/%s: blob '%s' has no checksum in the manifest", m->dir,
		           m->files[i].name, key);
	if (got != want)
		return bad(err, "%s/%s: blob '%s': checksum xxh64 %016" PRIx64 "; the manifest expects "
		           "%016" PRIx64 " (the file is corrupt)", m->dir, m->files[i].name, key, got,
		           want);
	return ACCEL_OK;
}

int accelp_ckpt_manifest_verify_file(const accelp_ckpt_manifest *m, uint32_t i, accel_err *err)
{
	char path[PATH_CAP];
	uint64_t size, hash;
	struct stat sb;
	file_path(m, i, path, sizeof(path));
	if (stat(path, &sb) != 0)
		return bad(err, "%s: missing (the manifest lists it: %" PRIu64 " bytes)", path,
		           m->files[i].size);
	int rc = accelp_ckpt_hash_file(path, &size, &hash, err);
	if (rc)
		return rc;
	if (size != m->files[i].size)
		return bad(err, "%s: %" PRIu64 " bytes; the manifest expects %" PRIu64 " (truncated "
		           "or replaced)", path, size, m->files[i].size);
	if (hash != m->files[i].xxh64)
		return bad(err, "%s: checksum xxh64 %016" PRIx64 "; the manifest expects %016" PRIx64
		           " (the file is corrupt)", path, hash, m->files[i].xxh64);
	return ACCEL_OK;
}

/* The slice's safetensors entry, checked against the manifest. */
static int slice_entry(accelp_ckpt_manifest *m, const accelp_ckpt_tensor *t,
                       const accelp_ckpt_slice *s, const accel_st_tensor **ret, accel_err *err)
{
	accelp_ckpt_file *f = &m->files[s->file];
	char path[PATH_CAP];
	file_path(m, s->file, path, sizeof(path));
	int rc;
	if (!f->st) {
		struct stat sb;
		if (stat(path, &sb) != 0)
			return bad(err, "%s: missing (the manifest lists it: %" PRIu64 " bytes); it holds "
			           "tensor '%s' elements [%" PRIu64 ", %" PRIu64 ") of %" PRIu64, path,
			           f->size, t->name, s->offset, s->offset + s->count, t->numel);
		if ((rc = accelp_st_reader_new(path, &f->st, err)))
			return rc;
	}
	const accel_st_tensor *e;
	if (accelp_st_reader_find(f->st, s->key, &e, NULL) != ACCEL_OK)
		return bad(err, "%s: no tensor '%s' (the manifest's slice of '%s' at element %" PRIu64
		           ")", path, s->key, t->name, s->offset);
	if (e->dtype != t->dtype || e->numel != s->count)
		return bad(err, "%s: '%s' is %s of %" PRIu64 " elements; the manifest's slice of '%s' "
		           "expects %s of %" PRIu64, path, s->key, accel_dtype_name(e->dtype), e->numel,
		           t->name, accel_dtype_name(t->dtype), s->count);
	*ret = e;
	return ACCEL_OK;
}

static int read_slice_checked(accelp_ckpt_manifest *m, const accelp_ckpt_tensor *t,
                              accelp_ckpt_slice *s, const accel_st_tensor *e, void *buf,
                              accel_err *err)
{
	int rc = accelp_st_reader_read(m->files[s->file].st, e, 0, s->count, buf, err);
	if (rc)
		return rc;
	uint64_t h = XXH64(buf, (size_t)(s->count * accel_dtype_size(t->dtype)), 0);
	if (h != s->xxh64)
		return bad(err, "%s/%s: tensor '%s' elements [%" PRIu64 ", %" PRIu64 ") (key '%s'): "
		           "checksum xxh64 %016" PRIx64 "; the manifest expects %016" PRIx64 " (the "
		           "file or the manifest is corrupt)", m->dir, m->files[s->file].name, t->name,
		           s->offset, s->offset + s->count, s->key, h, s->xxh64);
	s->verified = 1;
	return ACCEL_OK;
}

int accelp_ckpt_manifest_read(accelp_ckpt_manifest *m, const accelp_ckpt_tensor *t,
                              uint64_t offset, uint64_t count, void *buf, accel_err *err)
{
	if (offset > t->numel || count > t->numel - offset)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: elements [%" PRIu64 ", %" PRIu64
		                      ") of tensor '%s', which has %" PRIu64, m->path, offset,
		                      offset + count, t->name, t->numel);
	size_t es = accel_dtype_size(t->dtype);
	char *out = buf;
	void *tmp = NULL;
	int rc = ACCEL_OK;
	/* slices are sorted and contiguous: find the first one holding `offset` */
	uint32_t lo = 0, hi = t->n_slices;
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (t->slices[mid].offset <= offset)
			lo = mid;
		else
			hi = mid;
	}
	for (uint32_t i = lo; count && i < t->n_slices; i++) {
		accelp_ckpt_slice *s = (accelp_ckpt_slice *)&t->slices[i];
		uint64_t b = offset > s->offset ? offset : s->offset;
		uint64_t e_end = s->offset + s->count, end = offset + count;
		if (end < e_end)
			e_end = end;
		if (b >= e_end)
			continue;
		const accel_st_tensor *e;
		if ((rc = slice_entry(m, t, s, &e, err)))
			break;
		char *dst = out + (b - offset) * es;
		if (s->verified) {
			rc = accelp_st_reader_read(m->files[s->file].st, e, b - s->offset, e_end - b, dst,
			                           err);
		} else if (b == s->offset && e_end == s->offset + s->count) {
			rc = read_slice_checked(m, t, s, e, dst, err);
		} else {
			free(tmp);
			if (!(tmp = malloc(s->count * es + 1))) {
				rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory reading '%s'", t->name);
				break;
			}
			if (!(rc = read_slice_checked(m, t, s, e, tmp, err)))
				memcpy(dst, (char *)tmp + (b - s->offset) * es, (size_t)((e_end - b) * es));
		}
		if (rc)
			break;
	}
	free(tmp);
	return rc;
}

int accelp_ckpt_manifest_verify_slices(accelp_ckpt_manifest *m, accel_err *err)
{
	void *buf = NULL;
	size_t cap = 0;
	int rc = ACCEL_OK;
	for (uint32_t i = 0; !rc && i < m->n_tensors; i++) {
		accelp_ckpt_tensor *t = &m->tensors[i];
		for (uint32_t k = 0; !rc && k < t->n_slices; k++) {
			accelp_ckpt_slice *s = &t->slices[k];
			size_t bytes = (size_t)(s->count * accel_dtype_size(t->dtype));
			if (bytes > cap) {
				free(buf);
				cap = bytes;
				if (!(buf = malloc(cap))) {
					rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
					break;
				}
			}
			const accel_st_tensor *e;
			s->verified = 0;
			if (!(rc = slice_entry(m, t, s, &e, err)))
				rc = read_slice_checked(m, t, s, e, buf, err);
		}
	}
	free(buf);
	return rc;
}
