/* SPDX-License-Identifier: MIT */
/* core/safetensors_write.c: the safetensors writer (see safetensors.h): the
 * tensors laid out and the header built, data given or streamed into a
 * temporary beside the target, then the commit: written, checksummed from
 * the caller's buffers on a thread meanwhile, fsynced and renamed over the
 * target. */
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
#include "safetensors-impl.h"

/* Full pwrite, retrying short transfers and EINTR.  Return 0 on success, -1
 * with errno set. */
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
	if (!accelp_st_shape_size(ndim, shape, accel_dtype_size(dtype), &numel, &nbytes))
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
