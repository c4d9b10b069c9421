/* SPDX-License-Identifier: MIT */
/*
 * core/safetensors.h: reading and writing the safetensors format (private).
 *
 * The format (as defined by the safetensors project, read by PyTorch through
 * `safetensors.torch.load_file` and by every Hugging Face loader):
 *
 *     u64 little-endian N | N bytes of UTF-8 JSON header | data buffer
 *
 * The header is one JSON object: each tensor name maps to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} with the
 * offsets in bytes relative to the start of the data buffer; the optional key
 * "__metadata__" maps to an object of string values.  The header is padded
 * with spaces so the buffer starts 8-byte aligned.  Tensors are row-major,
 * little-endian, contiguous, do not overlap, and together cover the whole
 * buffer.  dtypes accel reads and writes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2
 * I64 I32 U8 (the ACCEL_DTYPE_* set).
 *
 * Writer: describe tensors (name, dtype, shape, and either a pointer to the
 * data or NULL to stream it later in chunks), then commit.  The file is
 * written as a temporary in the target's directory, fsynced, renamed over the
 * target, and the directory fsynced: a crash leaves either the old file or
 * the new one, never a half-written one.  Memory use is the header only; the
 * data comes from the caller's buffers.  Tensors are laid out by element size
 * (largest first, then in the order added) so every tensor starts aligned to
 * its element size, as the reference implementation does.
 *
 * Reader: pread-based (no mmap, so a file truncated under us is an error, not
 * a SIGBUS).  Opening validates the whole header against the file: length,
 * JSON, keys, dtypes, shapes, that shape x dtype size equals each tensor's
 * byte span, that offsets lie in the buffer, do not overlap and leave no gap,
 * and that the buffer ends where the file ends.  Errors name the file and the
 * exact problem.  Reads copy a tensor or an element range of it into the
 * caller's buffer, so memory stays bounded for any file size.
 *
 * Error codes: ACCEL_ERR_IO (open/read/write/fsync/rename failed; errno text
 * included), ACCEL_ERR_CHECKPOINT (the file is not valid safetensors),
 * ACCEL_ERR_NOT_FOUND (no tensor of that name), ACCEL_ERR_INVALID_ARG (bad
 * call: unknown dtype, duplicate name, range outside the tensor),
 * ACCEL_ERR_STATE (call out of order), ACCEL_ERR_NOMEM.
 *
 * Neither object is thread-safe; one thread at a time per object.
 */
#ifndef ACCEL_CORE_SAFETENSORS_H
#define ACCEL_CORE_SAFETENSORS_H

#include <stdint.h>

#include "accel/types.h"
#include "error.h"

/* Largest rank of a tensor; the header is limited to this many dims. */
#define ACCEL_ST_MAX_DIMS 16
/* Largest header accepted (same bound as the reference reader). */
#define ACCEL_ST_MAX_HEADER (100u * 1000u * 1000u)

/* Format dtype name ("F32", "BF16", "F8_E4M3") of an ACCEL_DTYPE_*, NULL if
 * the format has none; and the reverse (ACCEL_DTYPE_INVALID if unknown). */
const char *accelp_st_dtype_name(uint32_t dtype);
uint32_t accelp_st_dtype_parse(const char *name);

/* What the reader knows about one tensor.  Borrowed from the reader. */
typedef struct accel_st_tensor {
	const char *name;
	uint32_t dtype;                      /* ACCEL_DTYPE_*                       */
	uint32_t ndim;                       /* 0 for a scalar                      */
	uint64_t shape[ACCEL_ST_MAX_DIMS];
	uint64_t numel;                      /* product of shape (1 for a scalar)   */
	uint64_t nbytes;                     /* numel * dtype size                  */
	uint64_t offset;                     /* begin, relative to the data buffer  */
} accel_st_tensor;

/* ---- writer ------------------------------------------------------------------ */

typedef struct accel_st_writer accel_st_writer;

/* Start writing `path` (its temporary file is created now, so a bad directory
 * fails here).  Owned; free it after commit, or free it without commit to
 * abandon the file (the temporary is removed, an existing `path` is untouched). */
int accelp_st_writer_new(const char *path, accel_st_writer **ret_writer, accel_err *err);
accel_st_writer *accelp_st_writer_free(accel_st_writer *w);

/* Add a "__metadata__" entry (string to string).  Before the first write. */
int accelp_st_writer_set_metadata(accel_st_writer *w, const char *key, const char *value,
                                 accel_err *err);

/* Describe a tensor.  `name` and `shape` are copied.  `data` (optional) is
 * borrowed until commit: numel x dtype size bytes, row-major; with NULL the
 * bytes must be supplied with accelp_st_writer_write before commit.  Names are
 * non-empty, not "__metadata__", and unique (a duplicate is reported by the
 * first write or by commit, which then fail).  Before the first write. */
int accelp_st_writer_add(accel_st_writer *w, const char *name, uint32_t dtype, uint32_t ndim,
                        const uint64_t *shape, const void *data, accel_err *err);

/* Append the next `nbytes` of the data of tensor `name` (added with data ==
 * NULL).  Chunks of one tensor come in order; tensors may be interleaved.
 * The first call fixes the header and writes it; no tensors or metadata can
 * be added after it. */
int accelp_st_writer_write(accel_st_writer *w, const char *name, const void *chunk, uint64_t nbytes,
                          accel_err *err);

/* Write the remaining data, check every streamed tensor is complete, fsync,
 * rename over the target, fsync the directory.  After success the writer only
 * accepts free. */
int accelp_st_writer_commit(accel_st_writer *w, accel_err *err);

/* After a commit in which every tensor's data was given to add (none
 * streamed): the file's size, XXH64 (seed 0) and the XXH64 of its first 8 +
 * header-length bytes, computed from memory.  ACCEL_ERR_STATE (no error
 * recorded) otherwise. */
int accelp_st_writer_hashes(const accel_st_writer *w, uint64_t *ret_size, uint64_t *ret_hash,
                            uint64_t *ret_header_hash);

/* Metadata `key` whose value is known only once the data is final: commit
 * calls fn(arg) (on another thread, while it writes the tensors; fn reads
 * the tensors' buffers only) and puts the string it returns (malloc'ed;
 * NULL: out of memory) in place of the value set for `key` before, a
 * placeholder as long as the value (the header must keep its padded
 * length: ACCEL_ERR_STATE otherwise), then rewrites the header.
 * Before the header is written (the first write or commit). */
int accelp_st_writer_late_metadata(accel_st_writer *w, const char *key,
                                   char *(*fn)(void *arg), void *arg, accel_err *err);

/* Commit without fsyncing the directory after the rename: for a file
 * inside a directory the caller fsyncs itself afterwards (a checkpoint's
 * temporary directory, fsynced before it is renamed into place). */
void accelp_st_writer_skip_dir_sync(accel_st_writer *w);

/* Tests only (crash injection, docs/testing.md): commit writes the first
 * half of the tensors' data, then the process _exits with `exit_status`
 * (0: off), leaving the temporary file half written. */
void accelp_st_writer_crash_midway(accel_st_writer *w, int exit_status);

/* ---- reader ------------------------------------------------------------------ */

typedef struct accel_st_reader accel_st_reader;

/* Open and validate `path`.  Owned. */
int accelp_st_reader_new(const char *path, accel_st_reader **ret_reader, accel_err *err);
accel_st_reader *accelp_st_reader_free(accel_st_reader *r);

/* Path given to _new (borrowed). */
const char *accelp_st_reader_path(const accel_st_reader *r);
/* Tensors in data-buffer order (increasing offset); borrowed. */
uint32_t accelp_st_reader_count(const accel_st_reader *r);
const accel_st_tensor *accelp_st_reader_get(const accel_st_reader *r, uint32_t i);
/* Find by name (binary search).  ACCEL_ERR_NOT_FOUND names the file. */
int accelp_st_reader_find(const accel_st_reader *r, const char *name,
                         const accel_st_tensor **ret_tensor, accel_err *err);
/* Metadata: value of `key` or NULL; and iteration over (key, value) pairs in
 * key order.  Borrowed. */
const char *accelp_st_reader_metadata(const accel_st_reader *r, const char *key);
uint32_t accelp_st_reader_metadata_count(const accel_st_reader *r);
const char *accelp_st_reader_metadata_key(const accel_st_reader *r, uint32_t i,
                                         const char **ret_value);

/* Copy elements [first, first + count) of tensor `t` (from this reader) into
 * `buf` (count x dtype size bytes).  count == 0 is a no-op. */
int accelp_st_reader_read(accel_st_reader *r, const accel_st_tensor *t, uint64_t first,
                         uint64_t count, void *buf, accel_err *err);

#endif
