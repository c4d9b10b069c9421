/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/st_write.h: a minimal safetensors writer for the
 * example's own files (initial weights, data set, final weights).
 *
 * Format: u64 little-endian header length, JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {...}} padded with spaces to a multiple of 8, then the tensors' bytes in
 * the given order.  Put 8-byte dtypes first to keep every tensor aligned.
 * Written to a temporary file, fsynced and renamed, so a crash never leaves
 * a half-written file. */
#ifndef TRAIN_MLP_ST_WRITE_H
#define TRAIN_MLP_ST_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_tensor {
	const char *name;        /* plain ASCII without quotes or backslashes */
	const char *dtype;       /* "F32", "I64", ...                          */
	int ndim;
	int64_t shape[8];
	const void *data;
	size_t nbytes;           /* must equal prod(shape) x dtype size        */
} st_tensor;

/* meta: n_meta (key, value) pairs, same character rules as names.
 * Returns 0, or -1 with a message in err. */
int st_write(const char *path, const st_tensor *t, int n, const char *const *meta, int n_meta,
             char *err, size_t errlen);

#endif
