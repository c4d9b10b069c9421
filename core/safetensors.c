/* SPDX-License-Identifier: MIT */
/* core/safetensors.c: safetensors reader and writer (see safetensors.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "accel/accel.h"
#include "error.h"
#include "safetensors.h"

/* Tensor bytes are copied to and from the file as they are in memory; the
 * format is little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define METADATA_KEY "__metadata__"

static const char *const st_names[ACCEL_DTYPE_COUNT] = {
	[ACCEL_DTYPE_F32] = "F32",
	[ACCEL_DTYPE_F64] = "F64",
	[ACCEL_DTYPE_F16] = "F16",
	[ACCEL_DTYPE_BF16] = "BF16",
	[ACCEL_DTYPE_F8E4M3] = "F8_E4M3",
	[ACCEL_DTYPE_F8E5M2] = "F8_E5M2",
	[ACCEL_DTYPE_I32] = "I32",
	[ACCEL_DTYPE_I64] = "I64",
	[ACCEL_DTYPE_U8] = "U8",
};

const char *accelp_st_dtype_name(uint32_t dtype)
{
	return dtype < ACCEL_DTYPE_COUNT ? st_names[dtype] : NULL;
}

uint32_t accelp_st_dtype_parse(const char *name)
{
	if (!name)
		return ACCEL_DTYPE_INVALID;
	for (uint32_t i = 1; i < ACCEL_DTYPE_COUNT; i++)
		if (st_names[i] && !strcmp(name, st_names[i]))
			return i;
	return ACCEL_DTYPE_INVALID;
}

/* numel and byte size of a shape; 0 on overflow of uint64 (a 0 in the shape
 * gives numel 0 and returns 1). */
static int shape_size(uint32_t ndim, const uint64_t *shape, size_t esize, uint64_t *ret_numel,
                      uint64_t *ret_nbytes)
{
	uint64_t n = 1;
	for (uint32_t i = 0; i < ndim; i++) {
		if (shape[i] != 0 && n > UINT64_MAX / shape[i])
			return 0;
		n *= shape[i];
	}
	if (esize && n > UINT64_MAX / esize)
		return 0;
	*ret_numel = n;
	*ret_nbytes = n * esize;
	return 1;
}

static void shape_str(char *buf, size_t cap, uint32_t ndim, const uint64_t *shape)
{
	size_t len = 0;
	len += (size_t)snprintf(buf + len, cap - len, "[");
	for (uint32_t i = 0; i < ndim && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%" PRIu64, i ? ", " : "", shape[i]);
	if (len < cap)
		snprintf(buf + len, cap - len, "]");
}

/* Full pread/pwrite, retrying short transfers and EINTR.  Return 0 on
 * success, -1 with errno set (errno 0: end of file reached early). */
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

static int pwrite_full(int fd, const void *buf, uint64_t n, uint64_t off)
{
	const char *p = buf;
	while (n > 0) {
		size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
		ssize_t put = pwrite(fd, p, chunk, (off_t)off);
		if (put < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += put;
		n -= (uint64_t)put;
		off += (uint64_t)put;
	}
	return 0;
}

/* Write n bytes at off and start their writeback at once (Linux:
 * sync_file_range), in pieces of KICK_BYTES: the disk works while the next
 * piece is copied and while the file is hashed, so the final fsync finds
 * little left to do.  The fsync alone makes the bytes durable. */
#define KICK_BYTES (32u << 20)
static int pwrite_kick(int fd, const void *buf, uint64_t n, uint64_t off)
{
	const char *p = buf;
	while (n > 0) {
		uint64_t k = n > KICK_BYTES ? KICK_BYTES : n;
		if (pwrite_full(fd, p, k, off))
			return -1;
#ifdef SYNC_FILE_RANGE_WRITE
		(void)sync_file_range(fd, (off_t)off, (off_t)k, SYNC_FILE_RANGE_WRITE);
#endif
		p += k;
		n -= k;
		off += k;
	}
	return 0;
}

static void put_le64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | b[i];
	return v;
}

/* ============================== writer ==================================== */

typedef struct wtensor {
	char *name;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t shape[ACCEL_ST_MAX_DIMS];
	uint64_t nbytes;
	const void *data;     /* borrowed, or NULL: streamed */
	uint64_t offset;      /* set when the header is fixed */
	uint64_t written;     /* streamed bytes so far */
	uint32_t seq;         /* order of add, for the stable layout sort */
} wtensor;

struct accel_st_writer {
	char *path;
	char *tmp_path;
	int fd;
	int frozen;           /* header written */
	int committed;
	uint64_t data_start;  /* 8 + header length */
	wtensor *t;
	uint32_t n, cap;
	wtensor **by_name;    /* sorted by name once frozen */
	json_t *meta;         /* object of strings */
	int crash_exit;       /* tests: _exit(crash_exit) halfway through commit */
	int no_dir_sync;      /* commit does not fsync the directory */
	unsigned char *hdr;   /* the header as written (8 + padded bytes) */
	uint64_t hdr_len;
	int hashed;           /* commit computed the hashes below */
	uint64_t file_size, file_hash, hdr_hash;
	/* metadata value computed during commit (accelp_st_writer_late_metadata) */
	char *late_key;
	char *(*late_fn)(void *arg);
	void *late_arg;
	int late_failed, hdr_changed;
};

/* The mode the file at `path` gets: the one it has when it exists, else
 * 0666 less the umask.  The umask is read from /proc, not with umask(2),
 * which would change it for every thread for a moment (a file another
 * thread created then would be world-writable). */
static mode_t new_file_mode(const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		return st.st_mode & 07777;
	unsigned um = 022;
	FILE *f = fopen("/proc/self/status", "re");
	if (f) {
		char line[256];
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "Umask: %o", &um) == 1)
				break;
		fclose(f);
	}
	return (mode_t)(0666 & ~um);
}

int accelp_st_writer_new(const char *path, accel_st_writer **ret_writer, accel_err *err)
{
	accel_st_writer *w = NULL;
	if (!path || !*path || !ret_writer)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "safetensors writer: no path given");
	w = calloc(1, sizeof(*w));
	if (!w)
		goto nomem;
	w->fd = -1;
	w->path = strdup(path);
	size_t tlen = strlen(path) + sizeof(".tmp-XXXXXX");
	w->tmp_path = malloc(tlen);
	w->meta = json_object();
	if (!w->path || !w->tmp_path || !w->meta)
		goto nomem;
	/* The temporary lives beside the target so the final rename stays on one
	 * file system and is atomic. */
	snprintf(w->tmp_path, tlen, "%s.tmp-XXXXXX", path);
	w->fd = mkostemp(w->tmp_path, O_CLOEXEC);
	if (w->fd < 0) {
		int e = errno;
		accelp_err_set(err, ACCEL_ERR_IO, "%s: cannot create a temporary file beside it: %s",
		              path, strerror(e));
		free(w->tmp_path);
		w->tmp_path = NULL;
		accelp_st_writer_free(w);
		return ACCEL_ERR_IO;
	}
	/* mkostemp makes 0600: an overwritten file keeps its mode, a new one
	 * is as readable as any file the user creates (umask applies). */
	(void)fchmod(w->fd, new_file_mode(path));
	*ret_writer = w;
	return ACCEL_OK;
nomem:
	accelp_st_writer_free(w);
	return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", path);
}

accel_st_writer *accelp_st_writer_free(accel_st_writer *w)
{
	if (!w)
		return NULL;
	if (w->fd >= 0)
		close(w->fd);
	if (!w->committed && w->tmp_path)
		unlink(w->tmp_path);
	for (uint32_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	free(w->t);
	free(w->by_name);
	json_decref(w->meta);
	free(w->hdr);
	free(w->late_key);
	free(w->tmp_path);
	free(w->path);
	free(w);
	return NULL;
}

static int writer_usable(accel_st_writer *w, const char *what, int need_open, accel_err *err)
{
	if (!w)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "safetensors %s: writer is NULL", what);
	if (w->committed)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: %s after commit", w->path, what);
	if (need_open && w->frozen)
		return accelp_err_set(err, ACCEL_ERR_STATE,
		                     "%s: %s after data was written (describe every tensor first)",
		                     w->path, what);
	if (w->fd < 0)
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: %s on a failed writer", w->path, what);
	return ACCEL_OK;
}

int accelp_st_writer_set_metadata(accel_st_writer *w, const char *key, const char *value,
                                 accel_err *err)
{
	int rc = writer_usable(w, "set_metadata", 1, err);
	if (rc)
		return rc;
	if (!key || !value)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: metadata key or value is NULL",
		                     w->path);
	json_t *s = json_string(value);
	if (!s)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: metadata \"%s\": value is not valid UTF-8", w->path, key);
	if (json_object_set_new(w->meta, key, s))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: metadata key \"%s\" is not valid UTF-8", w->path, key);
	return ACCEL_OK;
}

int accelp_st_writer_add(accel_st_writer *w, const char *name, uint32_t dtype, uint32_t ndim,
                        const uint64_t *shape, const void *data, accel_err *err)
{
	int rc = writer_usable(w, "add", 1, err);
	if (rc)
		return rc;
	if (!name || !*name || !strcmp(name, METADATA_KEY))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: invalid tensor name \"%s\"",
		                     w->path, name ? name : "(null)");
	if (!accelp_st_dtype_name(dtype))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: tensor \"%s\": unknown dtype %u",
		                     w->path, name, dtype);
	if (ndim > ACCEL_ST_MAX_DIMS || (ndim && !shape))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: tensor \"%s\": %u dims (at most %d, shape required)", w->path,
		                     name, ndim, ACCEL_ST_MAX_DIMS);
	/* JSON integers are int64: a larger dimension (possible in a tensor
	 * with a zero dimension, whose size is 0) would be written negative. */
	for (uint32_t i = 0; i < ndim; i++)
		if (shape[i] > (uint64_t)INT64_MAX)
			return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
			                     "%s: tensor \"%s\": shape[%u] = %" PRIu64 " is larger than "
			                     "2^63-1", w->path, name, i, shape[i]);
	uint64_t numel, nbytes;
	if (!shape_size(ndim, shape, accel_dtype_size(dtype), &numel, &nbytes))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: tensor \"%s\": shape overflows",
		                     w->path, name);
	/* Names are checked for UTF-8 now rather than when the header is built. */
	json_t *probe = json_string(name);
	if (!probe)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: tensor name is not valid UTF-8", w->path);
	json_decref(probe);
	if (w->n == w->cap) {
		uint32_t ncap = w->cap ? 2 * w->cap : 16;
		wtensor *nt = realloc(w->t, ncap * sizeof(*nt));
		if (!nt)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", w->path);
		w->t = nt;
		w->cap = ncap;
	}
	wtensor *t = &w->t[w->n];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	if (!t->name)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", w->path);
	t->dtype = dtype;
	t->ndim = ndim;
	for (uint32_t i = 0; i < ndim; i++)
		t->shape[i] = shape[i];
	t->nbytes = nbytes;
	t->data = data;
	t->seq = w->n;
	w->n++;
	return ACCEL_OK;
}

static int cmp_layout(const void *a, const void *b)
{
	const wtensor *x = a, *y = b;
	size_t sx = accel_dtype_size(x->dtype), sy = accel_dtype_size(y->dtype);
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_wname(const void *a, const void *b)
{
	const wtensor *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* Lay tensors out, build and write the header.  Called once. */
static int build_header(accel_st_writer *w, unsigned char **ret_hdr, size_t *ret_padded,
                        accel_err *err);

static int writer_freeze(accel_st_writer *w, accel_err *err)
{
	unsigned char *hdr = NULL;
	int rc = ACCEL_OK;

	/* Largest element size first keeps every tensor aligned to its element
	 * size in the buffer (all sizes are powers of two). */
	if (w->n) /* qsort of a NULL array is undefined even with 0 elements */
		qsort(w->t, w->n, sizeof(*w->t), cmp_layout);
	w->by_name = malloc((w->n ? w->n : 1) * sizeof(*w->by_name));
	if (!w->by_name)
		goto nomem;
	for (uint32_t i = 0; i < w->n; i++)
		w->by_name[i] = &w->t[i];
	if (w->n)
		qsort(w->by_name, w->n, sizeof(*w->by_name), cmp_wname);
	for (uint32_t i = 1; i < w->n; i++)
		if (!strcmp(w->by_name[i - 1]->name, w->by_name[i]->name)) {
			rc = accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: tensor \"%s\" added twice",
			                   w->path, w->by_name[i]->name);
			goto fail;
		}

	uint64_t off = 0;
	for (uint32_t i = 0; i < w->n; i++) {
		wtensor *t = &w->t[i];
		if (t->nbytes > (uint64_t)INT64_MAX - off) {   /* JSON offsets are int64 */
			rc = accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
			                   "%s: total data size overflows (at tensor \"%s\")", w->path,
			                   t->name);
			goto fail;
		}
		t->offset = off;
		off += t->nbytes;
	}
	size_t padded = 0;
	if ((rc = build_header(w, &hdr, &padded, err)))
		goto fail;
	if (pwrite_full(w->fd, hdr, 8 + padded, 0)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: writing the header: %s", w->tmp_path,
		                   strerror(errno));
		goto fail;
	}
	w->data_start = 8 + padded;
	w->frozen = 1;
	w->hdr = (unsigned char *)hdr;   /* kept for the file's checksum */
	w->hdr_len = 8 + padded;
	hdr = NULL;
	goto out;
nomem:
	rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory building the header", w->path);
fail:
	/* A writer that failed here cannot be resumed. */
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
out:
	free(hdr);
	return rc;
}

/* The header (8-byte length + JSON padded with spaces to a multiple of 8)
 * from the tensors' laid-out offsets and the metadata; *ret_padded is the
 * JSON's padded length. */
static int build_header(accel_st_writer *w, unsigned char **ret_hdr, size_t *ret_padded,
                        accel_err *err)
{
	json_t *root = json_object(), *entry = NULL;
	char *text = NULL;
	unsigned char *hdr = NULL;
	int rc = ACCEL_OK;
	if (!root || (json_object_size(w->meta) && json_object_set(root, METADATA_KEY, w->meta)))
		goto nomem;
	for (uint32_t i = 0; i < w->n; i++) {
		wtensor *t = &w->t[i];
		json_t *shape = json_array();
		entry = json_object();
		if (!shape || !entry) {
			json_decref(shape);
			goto nomem;
		}
		for (uint32_t d = 0; d < t->ndim; d++)
			if (json_array_append_new(shape, json_integer((json_int_t)t->shape[d]))) {
				json_decref(shape);
				goto nomem;
			}
		json_t *offs = json_pack("[II]", (json_int_t)t->offset,
		                         (json_int_t)(t->offset + t->nbytes));
		/* json_object_set_new takes the value's reference even when it fails. */
		if (json_object_set_new(entry, "dtype", json_string(accelp_st_dtype_name(t->dtype))) ||
		    json_object_set_new(entry, "shape", shape) ||
		    json_object_set_new(entry, "data_offsets", offs))
			goto nomem;
		json_t *done = entry;
		entry = NULL;
		if (json_object_set_new(root, t->name, done))
			goto nomem;
	}

	text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!text)
		goto nomem;
	size_t len = strlen(text);
	size_t padded = (len + 7) & ~(size_t)7;
	if (padded > ACCEL_ST_MAX_HEADER) {
		rc = accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                   "%s: header would be %zu bytes, more than readers accept (%u)",
		                   w->path, padded, ACCEL_ST_MAX_HEADER);
		goto out;
	}
	hdr = malloc(8 + padded);
	if (!hdr)
		goto nomem;
	put_le64(hdr, padded);
	memcpy(hdr + 8, text, len);
	memset(hdr + 8 + len, ' ', padded - len);
	*ret_hdr = hdr;
	*ret_padded = padded;
	hdr = NULL;
	goto out;
nomem:
	rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory building the header", w->path);
out:
	json_decref(entry);
	json_decref(root);
	free(text);
	free(hdr);
	return rc;
}

int accelp_st_writer_write(accel_st_writer *w, const char *name, const void *chunk, uint64_t nbytes,
                          accel_err *err)
{
	int rc = writer_usable(w, "write", 0, err);
	if (rc)
		return rc;
	if (!w->frozen && (rc = writer_freeze(w, err)))
		return rc;
	wtensor key = {.name = (char *)name}, *kp = &key, **hit = NULL;
	if (name)
		hit = w->n ? bsearch(&kp, w->by_name, w->n, sizeof(*w->by_name), cmp_wname) : NULL;
	if (!hit)
		return accelp_err_set(err, ACCEL_ERR_NOT_FOUND, "%s: write to unknown tensor \"%s\"",
		                     w->path, name ? name : "(null)");
	wtensor *t = *hit;
	if (t->data)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: tensor \"%s\" was added with its data; it cannot be streamed",
		                     w->path, t->name);
	if (nbytes > t->nbytes - t->written)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "%s: tensor \"%s\": %" PRIu64 " more bytes would exceed its %" PRIu64
		                     " (already %" PRIu64 ")",
		                     w->path, t->name, nbytes, t->nbytes, t->written);
	if (nbytes && !chunk)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: tensor \"%s\": chunk is NULL",
		                     w->path, t->name);
	if (pwrite_kick(w->fd, chunk, nbytes, w->data_start + t->offset + t->written))
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: writing tensor \"%s\": %s", w->tmp_path,
		                     t->name, strerror(errno));
	t->written += nbytes;
	return ACCEL_OK;
}

static int fsync_dir_of(const char *path, accel_err *err)
{
	char *dir = strdup(path);
	if (!dir)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = ACCEL_OK;
	if (fd < 0 || fsync(fd))
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: syncing directory %s: %s", path, dir,
		                   strerror(errno));
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/* offsets of the tensors in file order, for hashing from memory */
static int by_offset_w(const void *a, const void *b)
{
	const wtensor *x = *(const wtensor *const *)a, *y = *(const wtensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* XXH64 of the file as committed, from the caller's buffers: when every
 * tensor's data was given to add (none streamed). */
static void hash_from_memory(accel_st_writer *w)
{
	wtensor **order = malloc((w->n ? w->n : 1) * sizeof(*order));
	XXH64_state_t *st = XXH64_createState();
	uint64_t size = w->hdr_len;
	if (!order || !st || !w->hdr)
		goto out;
	for (uint32_t i = 0; i < w->n; i++) {
		if (!w->t[i].data && w->t[i].nbytes)
			goto out;
		order[i] = &w->t[i];
	}
	qsort(order, w->n, sizeof(*order), by_offset_w);
	XXH64_reset(st, 0);
	XXH64_update(st, w->hdr, (size_t)w->hdr_len);
	for (uint32_t i = 0; i < w->n; i++) {
		if (order[i]->offset != size - w->hdr_len)
			goto out;   /* a gap: not what the file holds */
		if (order[i]->nbytes)
			XXH64_update(st, order[i]->data, (size_t)order[i]->nbytes);
		size += order[i]->nbytes;
	}
	w->file_size = size;
	w->file_hash = XXH64_digest(st);
	w->hdr_hash = XXH64(w->hdr, (size_t)w->hdr_len, 0);
	w->hashed = 1;
out:
	if (st)
		XXH64_freeState(st);
	free(order);
}

int accelp_st_writer_hashes(const accel_st_writer *w, uint64_t *ret_size, uint64_t *ret_hash,
                            uint64_t *ret_header_hash)
{
	if (!w || !w->committed || !w->hashed)
		return ACCEL_ERR_STATE;
	*ret_size = w->file_size;
	*ret_hash = w->file_hash;
	*ret_header_hash = w->hdr_hash;
	return ACCEL_OK;
}

void accelp_st_writer_skip_dir_sync(accel_st_writer *w)
{
	if (w)
		w->no_dir_sync = 1;
}

void accelp_st_writer_crash_midway(accel_st_writer *w, int exit_status)
{
	if (w)
		w->crash_exit = exit_status;
}

/* The late metadata value (fn's), into the header, which keeps its length
 * (the caller's placeholder is as long as the value); then the checksums.
 * Runs on the hashing thread: it touches only meta, hdr and the hashes. */
static void *hash_thread(void *arg)
{
	accel_st_writer *w = arg;
	if (w->late_fn) {
		char *v = w->late_fn(w->late_arg);
		unsigned char *hdr = NULL;
		size_t padded = 0;
		accel_err e = {0};
		if (!v || json_object_set_new(w->meta, w->late_key, json_string(v)) ||
		    build_header(w, &hdr, &padded, &e)) {
			free(hdr);
			w->late_failed = 1;   /* out of memory */
		} else if (8 + padded != w->hdr_len) {
			free(hdr);
			w->late_failed = 2;   /* not the placeholder's length */
		} else {
			free(w->hdr);
			w->hdr = hdr;
			w->hdr_changed = 1;
		}
		free(v);
		if (w->late_failed)
			return NULL;
	}
	hash_from_memory(w);
	return NULL;
}

int accelp_st_writer_late_metadata(accel_st_writer *w, const char *key,
                                   char *(*fn)(void *arg), void *arg, accel_err *err)
{
	int rc = writer_usable(w, "late_metadata", 0, err);
	if (rc)
		return rc;
	if (w->frozen || !json_object_get(w->meta, key))
		return accelp_err_set(err, ACCEL_ERR_STATE, "%s: late metadata '%s' needs its "
		                      "placeholder set, before the header is written", w->path, key);
	free(w->late_key);
	if (!(w->late_key = strdup(key)))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	w->late_fn = fn;
	w->late_arg = arg;
	return ACCEL_OK;
}

int accelp_st_writer_commit(accel_st_writer *w, accel_err *err)
{
	int rc = writer_usable(w, "commit", 0, err);
	if (rc)
		return rc;
	if (!w->frozen && (rc = writer_freeze(w, err)))
		return rc;
	/* The file's checksum, from the caller's buffers, on a thread while
	 * this one writes them (both only read them); inline when no thread
	 * starts. */
	pthread_t hasher;
	int hashing = pthread_create(&hasher, NULL, hash_thread, w) == 0;
	for (uint32_t i = 0; i < w->n; i++) {
		wtensor *t = &w->t[i];
		if (w->crash_exit && i == (w->n + 1) / 2) {
			fprintf(stderr, "%s: test crash halfway through the file (%u of %u tensors "
			        "written)\n", w->tmp_path, i, w->n);
			_exit(w->crash_exit);
		}
		if (t->data) {
			if (pwrite_kick(w->fd, t->data, t->nbytes, w->data_start + t->offset)) {
				rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: writing tensor \"%s\": %s",
				                   w->tmp_path, t->name, strerror(errno));
				goto fail;
			}
		} else if (t->written != t->nbytes) {
			rc = accelp_err_set(err, ACCEL_ERR_STATE,
			                   "%s: tensor \"%s\" is incomplete: %" PRIu64 " of %" PRIu64
			                   " bytes written",
			                   w->path, t->name, t->written, t->nbytes);
			goto fail;
		}
	}
	/* The file length must match even when the last tensors are empty. */
	uint64_t end = w->data_start + (w->n ? w->t[w->n - 1].offset + w->t[w->n - 1].nbytes : 0);
	if (hashing)
		pthread_join(hasher, NULL);
	else
		hash_thread(w);   /* while the disk writes (the kicked writeback) */
	hashing = 0;
	if (w->late_failed == 1) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory computing metadata '%s'",
		                    w->path, w->late_key);
		goto fail;
	}
	if (w->late_failed) {
		rc = accelp_err_set(err, ACCEL_ERR_STATE, "%s: metadata '%s' is not as long as its "
		                    "placeholder: the header would change length", w->path,
		                    w->late_key);
		goto fail;
	}
	if (w->hdr_changed && pwrite_full(w->fd, w->hdr, w->hdr_len, 0)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: writing the header: %s", w->tmp_path,
		                   strerror(errno));
		goto fail;
	}
	if (ftruncate(w->fd, (off_t)end) || fsync(w->fd)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: flushing: %s", w->tmp_path, strerror(errno));
		goto fail;
	}
	if (close(w->fd)) {
		w->fd = -1;
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: closing: %s", w->tmp_path, strerror(errno));
		goto fail;
	}
	w->fd = -1;
	if (rename(w->tmp_path, w->path)) {
		rc = accelp_err_set(err, ACCEL_ERR_IO, "%s: renaming %s over it: %s", w->path,
		                   w->tmp_path, strerror(errno));
		goto fail;
	}
	w->committed = 1;
	return w->no_dir_sync ? ACCEL_OK : fsync_dir_of(w->path, err);
fail:
	if (hashing)
		pthread_join(hasher, NULL);
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	return rc;
}

/* ============================== reader ==================================== */

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
	if (!shape_size(t->info.ndim, t->info.shape, accel_dtype_size(t->info.dtype), &t->info.numel,
	                &t->info.nbytes))
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
