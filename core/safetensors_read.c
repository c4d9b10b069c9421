/* SPDX-License-Identifier: MIT */
/* core/safetensors_read.c: the safetensors reader (see safetensors.h): the
 * header validated against the file when it is opened, then lookups by
 * name and reads of element ranges with pread. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "accel/accel.h"
#include "error.h"
#include "safetensors-impl.h"

static void shape_str(char *buf, size_t cap, uint32_t ndim, const uint64_t *shape)
{
	size_t len = 0;
	len += (size_t)snprintf(buf + len, cap - len, "[");
	for (uint32_t i = 0; i < ndim && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%" PRIu64, i ? ", " : "", shape[i]);
	if (len < cap)
		snprintf(buf + len, cap - len, "]");
}

/* Full pread, retrying short transfers and EINTR.  Return 0 on success, -1
 * with errno set (errno 0: end of file reached early). */
static int pread_full(int fd, void *buf, uint64_t n, uint64_t off)
{
	char *p = buf;
	while (n > 0) {
		size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
		ssize_t got = pread(fd, p, chunk, (off_t)off);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (got == 0) {
			errno = 0;
			return -1;
		}
		p += got;
		n -= (uint64_t)got;
		off += (uint64_t)got;
	}
	return 0;
}

static uint64_t get_le64(const unsigned char *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | b[i];
	return v;
}

typedef struct rtensor {
	accel_st_tensor info;
	char *name;
} rtensor;

typedef struct meta_kv {
	char *key, *value;
} meta_kv;

struct accel_st_reader {
	char *path;
	int fd;
	uint64_t data_start;
	uint64_t data_size;
	rtensor *t;           /* by offset */
	uint32_t n;
	rtensor **by_name;
	meta_kv *meta;        /* by key */
	uint32_t nmeta;
};

accel_st_reader *accelp_st_reader_free(accel_st_reader *r)
{
	if (!r)
		return NULL;
	if (r->fd >= 0)
		close(r->fd);
	for (uint32_t i = 0; i < r->n; i++)
		free(r->t[i].name);
	free(r->t);
	free(r->by_name);
	for (uint32_t i = 0; i < r->nmeta; i++) {
		free(r->meta[i].key);
		free(r->meta[i].value);
	}
	free(r->meta);
	free(r->path);
	free(r);
	return NULL;
}

static int cmp_roffset(const void *a, const void *b)
{
	const rtensor *x = a, *y = b;
	if (x->info.offset != y->info.offset)
		return x->info.offset < y->info.offset ? -1 : 1;
	/* Empty tensors sort before a non-empty one at the same offset. */
	if (x->info.nbytes != y->info.nbytes)
		return x->info.nbytes < y->info.nbytes ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_rname(const void *a, const void *b)
{
	const rtensor *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

static int cmp_meta(const void *a, const void *b)
{
	return strcmp(((const meta_kv *)a)->key, ((const meta_kv *)b)->key);
}

#define BAD(...) do { rc = accelp_err_set(err, ACCEL_ERR_CHECKPOINT, __VA_ARGS__); goto fail; } while (0)

static int parse_metadata(accel_st_reader *r, json_t *obj, accel_err *err)
{
	int rc = ACCEL_OK;
	if (!json_is_object(obj))
		BAD("%s: not a safetensors file: \"__metadata__\" must be an object of strings",
		    r->path);
	r->meta = calloc(json_object_size(obj) + 1, sizeof(*r->meta));
	if (!r->meta)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", r->path);
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v) {
		if (!json_is_string(v))
			BAD("%s: not a safetensors file: \"__metadata__\".\"%s\" is not a string", r->path,
			    k);
		meta_kv *m = &r->meta[r->nmeta];
		m->key = strdup(k);
		m->value = strdup(json_string_value(v));
		r->nmeta++;
		if (!m->key || !m->value)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", r->path);
	}
	if (r->nmeta)
		qsort(r->meta, r->nmeta, sizeof(*r->meta), cmp_meta);
fail:
	return rc;
}

/* One header entry into r->t[r->n]. */
static int parse_entry(accel_st_reader *r, const char *name, json_t *e, accel_err *err)
{
	int rc = ACCEL_OK;
	const char *k;
	json_t *v, *jd = NULL, *js = NULL, *jo = NULL;
	if (!json_is_object(e))
		BAD("%s: tensor \"%s\": header entry is not an object", r->path, name);
	json_object_foreach(e, k, v) {
		if (!strcmp(k, "dtype"))
			jd = v;
		else if (!strcmp(k, "shape"))
			js = v;
		else if (!strcmp(k, "data_offsets"))
			jo = v;
		else
			BAD("%s: tensor \"%s\": unexpected key \"%s\" (expected dtype, shape, "
			    "data_offsets)", r->path, name, k);
	}
	if (!jd || !js || !jo)
		BAD("%s: tensor \"%s\": missing \"%s\"", r->path, name,
		    !jd ? "dtype" : !js ? "shape" : "data_offsets");

	rtensor *t = &r->t[r->n];
	memset(t, 0, sizeof(*t));
	if (!json_is_string(jd))
		BAD("%s: tensor \"%s\": dtype is not a string", r->path, name);
	t->info.dtype = accelp_st_dtype_parse(json_string_value(jd));
	if (t->info.dtype == ACCEL_DTYPE_INVALID)
		BAD("%s: tensor \"%s\": unknown dtype \"%s\" (accel reads F64, F32, F16, BF16, "
		    "F8_E4M3, F8_E5M2, I64, I32, U8)", r->path, name, json_string_value(jd));

	if (!json_is_array(js))
		BAD("%s: tensor \"%s\": shape is not an array", r->path, name);
	if (json_array_size(js) > ACCEL_ST_MAX_DIMS)
		BAD("%s: tensor \"%s\": shape has %zu dims, accel reads at most %d", r->path, name,
		    json_array_size(js), ACCEL_ST_MAX_DIMS);
	t->info.ndim = (uint32_t)json_array_size(js);
	for (uint32_t d = 0; d < t->info.ndim; d++) {
		json_t *x = json_array_get(js, d);
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			BAD("%s: tensor \"%s\": shape[%u] is not a non-negative integer", r->path, name, d);
		t->info.shape[d] = (uint64_t)json_integer_value(x);
	}
	if (!accelp_st_shape_size(t->info.ndim, t->info.shape, accel_dtype_size(t->info.dtype),
	                          &t->info.numel, &t->info.nbytes))
		BAD("%s: tensor \"%s\": shape overflows", r->path, name);

	if (!json_is_array(jo) || json_array_size(jo) != 2 ||
	    !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)) ||
	    json_integer_value(json_array_get(jo, 0)) < 0 ||
	    json_integer_value(json_array_get(jo, 1)) < 0)
		BAD("%s: tensor \"%s\": data_offsets must be [begin, end], two non-negative integers",
		    r->path, name);
	uint64_t b = (uint64_t)json_integer_value(json_array_get(jo, 0));
	uint64_t en = (uint64_t)json_integer_value(json_array_get(jo, 1));
	if (en < b)
		BAD("%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
		    r->path, name, b, en);
	if (en > r->data_size)
		BAD("%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] out of range: the data "
		    "buffer has %" PRIu64 " bytes (file truncated?)",
		    r->path, name, b, en, r->data_size);
	if (en - b != t->info.nbytes) {
		char sh[256];
		shape_str(sh, sizeof(sh), t->info.ndim, t->info.shape);
		BAD("%s: tensor \"%s\": wrong size: shape %s of %s is %" PRIu64 " bytes but "
		    "data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64,
		    r->path, name, sh, json_string_value(jd), t->info.nbytes, b, en, en - b);
	}
	t->info.offset = b;
	t->name = strdup(name);
	if (!t->name)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", r->path);
	t->info.name = t->name;
	r->n++;
fail:
	return rc;
}

int accelp_st_reader_new(const char *path, accel_st_reader **ret_reader, accel_err *err)
{
	accel_st_reader *r = NULL;
	char *hdr = NULL;
	json_t *root = NULL;
	int rc = ACCEL_OK;
	unsigned char lenbuf[8];
	struct stat st;

	if (!path || !*path || !ret_reader)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "safetensors reader: no path given");
	r = calloc(1, sizeof(*r));
	if (!r || !(r->path = strdup(path)))
		goto nomem;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer (it is then
	 * refused as not a regular file); regular files ignore the flag. */
	r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (r->fd < 0) {
		rc = accelp_err_set(err, errno == ENOENT ? ACCEL_ERR_NOT_FOUND : ACCEL_ERR_IO,
		                   "%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(r->fd, &st)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode))
		BAD("%s: not a regular file", path);
	uint64_t fsize = (uint64_t)st.st_size;
	if (fsize < 8)
		BAD("%s: truncated: %" PRIu64 " bytes, shorter than the 8-byte header length", path,
		    fsize);
	if (pread_full(r->fd, lenbuf, 8, 0)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: reading: %s", path,
		                   errno ? strerror(errno) : "unexpected end of file");
		goto fail;
	}
	uint64_t hlen = get_le64(lenbuf);
	if (hlen < 2 || hlen > ACCEL_ST_MAX_HEADER)
		BAD("%s: bad header length %" PRIu64 " (must be 2..%u; is this a safetensors file?)",
		    path, hlen, ACCEL_ST_MAX_HEADER);
	if (hlen > fsize - 8)
		BAD("%s: truncated: the header length says %" PRIu64 " bytes but only %" PRIu64
		    " follow", path, hlen, fsize - 8);
	r->data_start = 8 + hlen;
	r->data_size = fsize - r->data_start;

	hdr = malloc(hlen);
	if (!hdr)
		goto nomem;
	if (pread_full(r->fd, hdr, hlen, 8)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: reading the header: %s", path,
		                   errno ? strerror(errno) : "unexpected end of file");
		goto fail;
	}
	if (hdr[0] != '{')
		BAD("%s: bad header: does not start with '{' (is this a safetensors file?)", path);
	json_error_t jerr;
	root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		BAD("%s: bad header JSON at byte %d (line %d, column %d): %s", path, jerr.position + 8,
		    jerr.line, jerr.column, jerr.text);
	if (!json_is_object(root))
		BAD("%s: bad header: not a JSON object", path);

	size_t count = json_object_size(root);
	r->t = calloc(count + 1, sizeof(*r->t));
	if (!r->t)
		goto nomem;
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v) {
		if (!strcmp(k, METADATA_KEY)) {
			if ((rc = parse_metadata(r, v, err)))
				goto fail;
		} else if ((rc = parse_entry(r, k, v, err))) {
			goto fail;
		}
	}

	/* Coverage: in offset order each tensor starts where the previous ended,
	 * and the last ends at the end of the file. */
	if (r->n)
		qsort(r->t, r->n, sizeof(*r->t), cmp_roffset);
	for (uint32_t i = 0; i < r->n; i++)
		r->t[i].info.name = r->t[i].name;
	uint64_t pos = 0;
	for (uint32_t i = 0; i < r->n; i++) {
		const accel_st_tensor *t = &r->t[i].info;
		if (t->offset < pos) {
			const accel_st_tensor *p = &r->t[i - 1].info;
			BAD("%s: tensors \"%s\" [%" PRIu64 ", %" PRIu64 ") and \"%s\" [%" PRIu64 ", %" PRIu64
			    ") overlap", path, p->name, p->offset, p->offset + p->nbytes, t->name,
			    t->offset, t->offset + t->nbytes);
		}
		if (t->offset > pos)
			BAD("%s: bytes [%" PRIu64 ", %" PRIu64 ") of the data buffer belong to no tensor "
			    "(gap before \"%s\")", path, pos, t->offset, t->name);
		pos = t->offset + t->nbytes;
	}
	if (pos != r->data_size)
		BAD("%s: the data buffer has %" PRIu64 " bytes but the tensors cover %" PRIu64
		    " (trailing bytes after the last tensor)", path, r->data_size, pos);

	r->by_name = malloc((r->n ? r->n : 1) * sizeof(*r->by_name));
	if (!r->by_name)
		goto nomem;
	for (uint32_t i = 0; i < r->n; i++)
		r->by_name[i] = &r->t[i];
	if (r->n)
		qsort(r->by_name, r->n, sizeof(*r->by_name), cmp_rname);

	json_decref(root);
	free(hdr);
	*ret_reader = r;
	return ACCEL_OK;
nomem:
	rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", path ? path : "safetensors");
fail:
	json_decref(root);
	free(hdr);
	accelp_st_reader_free(r);
	return rc;
}

#undef BAD

const char *accelp_st_reader_path(const accel_st_reader *r)
{
	return r ? r->path : NULL;
}

uint32_t accelp_st_reader_count(const accel_st_reader *r)
{
	return r ? r->n : 0;
}

const accel_st_tensor *accelp_st_reader_get(const accel_st_reader *r, uint32_t i)
{
	return r && i < r->n ? &r->t[i].info : NULL;
}

int accelp_st_reader_find(const accel_st_reader *r, const char *name,
                         const accel_st_tensor **ret_tensor, accel_err *err)
{
	if (!r || !name || !ret_tensor)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "safetensors find: NULL argument");
	rtensor key = {.name = (char *)name}, *kp = &key, **hit;
	hit = r->n ? bsearch(&kp, r->by_name, r->n, sizeof(*r->by_name), cmp_rname) : NULL;
	if (!hit)
		return accelp_err_set(err, ACCEL_ERR_NOT_FOUND, "%s: no tensor named \"%s\"", r->path,
		                     name);
	*ret_tensor = &(*hit)->info;
	return ACCEL_OK;
}

const char *accelp_st_reader_metadata(const accel_st_reader *r, const char *key)
{
	if (!r || !key)
		return NULL;
	meta_kv k = {.key = (char *)key}, *hit;
	hit = r->nmeta ? bsearch(&k, r->meta, r->nmeta, sizeof(*r->meta), cmp_meta) : NULL;
	return hit ? hit->value : NULL;
}

uint32_t accelp_st_reader_metadata_count(const accel_st_reader *r)
{
	return r ? r->nmeta : 0;
}

const char *accelp_st_reader_metadata_key(const accel_st_reader *r, uint32_t i,
                                         const char **ret_value)
{
	if (!r || i >= r->nmeta)
		return NULL;
	if (ret_value)
		*ret_value = r->meta[i].value;
	return r->meta[i].key;
}

int accelp_st_reader_read(accel_st_reader *r, const accel_st_tensor *t, uint64_t first,
                         uint64_t count, void *buf, accel_err *err)
{
	if (!r || !t)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "safetensors read: NULL argument");
	/* t must be one of ours: it carries the offsets we validated. */
	if (r->n == 0 || t < &r->t[0].info || t > &r->t[r->n - 1].info)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: read of a tensor that belongs to another reader", r->path);
	if (first > t->numel || count > t->numel - first)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: tensor \"%s\": elements [%" PRIu64 ", %" PRIu64
		                     ") outside its %" PRIu64,
		                     r->path, t->name, first, first + count, t->numel);
	if (count == 0)
		return ACCEL_OK;
	if (!buf)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: tensor \"%s\": buffer is NULL",
		                     r->path, t->name);
	size_t es = accel_dtype_size(t->dtype);
	if (pread_full(r->fd, buf, count * es, r->data_start + t->offset + first * es))
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: reading tensor \"%s\": %s", r->path,
		                     t->name, errno ? strerror(errno) : "file shrank since it was opened");
	return ACCEL_OK;
}
