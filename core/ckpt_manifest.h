/* SPDX-License-Identifier: MIT */
/* core/ckpt_manifest.h: a checkpoint's manifest.json (format version 2),
 * parsed and checked, and reads of any element range of a saved tensor from
 * its slices (private; docs/checkpoints.md).  Used by accel_load_state, the
 * CLI (`accel checkpoint show`, `accel merge-weights`) and the fuzz target.
 *
 * Parsing checks everything that does not need the files: JSON shape, the
 * format version, types, file names (plain names inside the directory),
 * dtypes, shapes, and that each tensor's slices cover its elements exactly
 * once.  Errors (ACCEL_ERR_CHECKPOINT) name the manifest and the key. */
#ifndef ACCEL_CORE_CKPT_MANIFEST_H
#define ACCEL_CORE_CKPT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "safetensors.h"

#define ACCELP_CKPT_FORMAT_VERSION 2
#define ACCELP_CKPT_MAX_DIMS 8
/* the manifest's own checksum: XXH64 (seed 0) of the manifest without this
 * key, dumped by jansson compact with sorted keys (its canonical content) */
#define ACCELP_CKPT_SELF_KEY "manifest_xxh64"

typedef struct accelp_ckpt_file {
	const char *name;         /* "rank1.safetensors" (borrowed from the JSON) */
	uint64_t size, xxh64;
	uint64_t header_xxh64;    /* of the first 8 + header-length bytes        */
	void *blobs;              /* json_t object: blob key -> xxh64 hex, or NULL */
	int rank;                 /* rank<r>.safetensors: r; otherwise -1        */
	accel_st_reader *st;      /* opened on first read                        */
} accelp_ckpt_file;

typedef struct accelp_ckpt_slice {
	uint32_t file;            /* index into files                            */
	const char *key;          /* safetensors key inside that file            */
	uint64_t offset, count;   /* elements of the flattened tensor            */
	uint64_t xxh64;           /* of the slice's bytes                        */
	int verified;             /* checksum checked already                    */
} accelp_ckpt_slice;

typedef struct accelp_ckpt_tensor {
	const char *name;
	uint32_t dtype, ndim;
	uint64_t shape[ACCELP_CKPT_MAX_DIMS];
	uint64_t numel;
	accelp_ckpt_slice *slices; /* sorted by offset, covering [0, numel)      */
	uint32_t n_slices;
} accelp_ckpt_tensor;

typedef struct accelp_ckpt_manifest {
	char *dir;                /* the checkpoint directory                    */
	char *path;               /* dir/manifest.json                           */
	void *root;               /* json_t, owns the strings above              */
	int64_t version, world_size, step, micro_step, samplers, rngs;
	const char *strategy, *accel_version;
	int unsealed;             /* no manifest_xxh64 (an older accel): warn    */
	uint64_t self_xxh64;      /* the verified manifest_xxh64 (0: unsealed)   */
	accelp_ckpt_file *files;
	uint32_t n_files;
	accelp_ckpt_tensor *tensors; /* sorted by name                           */
	uint32_t n_tensors;
} accelp_ckpt_manifest;

/* Parse manifest text (`len` bytes); `dir` names the directory in messages
 * and in later reads.  Owned. */
int accelp_ckpt_manifest_parse(const char *text, size_t len, const char *dir,
                               accelp_ckpt_manifest **ret, accel_err *err);
/* The canonical checksum of a manifest's JSON (a json_t *; the key
 * ACCELP_CKPT_SELF_KEY left out).  ACCEL_ERR_NOMEM. */
int accelp_ckpt_manifest_hash(void *root_json, uint64_t *ret_hash);
/* Read dir/manifest.json: "no such checkpoint directory", "missing: not a
 * committed checkpoint", "not valid JSON", then parse. */
int accelp_ckpt_manifest_open(const char *dir, accelp_ckpt_manifest **ret, accel_err *err);
accelp_ckpt_manifest *accelp_ckpt_manifest_free(accelp_ckpt_manifest *m);

const accelp_ckpt_tensor *accelp_ckpt_manifest_find(const accelp_ckpt_manifest *m,
                                                    const char *name);
int accelp_ckpt_manifest_file_index(const accelp_ckpt_manifest *m, const char *name);

/* Every listed file exists with its size: a missing or short file is named
 * with the first tensor it holds a slice of (a rank's shard). */
int accelp_ckpt_manifest_check_files(const accelp_ckpt_manifest *m, accel_err *err);
/* The header checksum of files[i] (cheap: the header only). */
int accelp_ckpt_manifest_verify_header(const accelp_ckpt_manifest *m, uint32_t i,
                                       accel_err *err);
/* Blob `key` of files[i]: its bytes' checksum against the manifest. */
int accelp_ckpt_manifest_verify_blob(const accelp_ckpt_manifest *m, uint32_t i, const char *key,
                                     const void *data, uint64_t bytes, accel_err *err);
/* Whole-file size and xxh64 of files[i] against the manifest. */
int accelp_ckpt_manifest_verify_file(const accelp_ckpt_manifest *m, uint32_t i, accel_err *err);
/* Every slice's checksum (reads everything; `accel checkpoint show --verify`). */
int accelp_ckpt_manifest_verify_slices(accelp_ckpt_manifest *m, accel_err *err);

/* Copy elements [offset, offset + count) of tensor `t` (of this manifest)
 * into `buf`, from whichever slices hold them; each slice's checksum is
 * checked the first time it is read. */
int accelp_ckpt_manifest_read(accelp_ckpt_manifest *m, const accelp_ckpt_tensor *t,
                              uint64_t offset, uint64_t count, void *buf, accel_err *err);

/* Size and XXH64 (seed 0) of a file, read in 1 MiB chunks. */
int accelp_ckpt_hash_file(const char *path, uint64_t *ret_size, uint64_t *ret_hash,
                          accel_err *err);

/* XXH64 of a safetensors file's first 8 + header-length bytes. */
int accelp_ckpt_hash_header(const char *path, uint64_t *ret_hash, accel_err *err);

/* "[16, 784]" into buf. */
const char *accelp_ckpt_shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap);

#endif
