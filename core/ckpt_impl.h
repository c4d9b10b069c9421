/* SPDX-License-Identifier: MIT */
/* core/ckpt_impl.h: what the checkpoint sources share (private; core/ckpt.c
 * lists the parts, docs/checkpoints.md describes the format). */
#ifndef ACCEL_CORE_CKPT_IMPL_H
#define ACCEL_CORE_CKPT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "accel/plugin.h"
#include "ckpt_manifest.h"
#include "ctx-impl.h"
#include "error.h"
#include "safetensors.h"

#define CKPT_FORMAT_VERSION ACCELP_CKPT_FORMAT_VERSION
#define PATH_CAP 4096
/* safetensors metadata key: this file's tensor slices, as JSON */
#define SLICES_META "accel.slices"
/* and its blobs' checksums: JSON object of key -> xxh64 hex */
#define BLOBS_META "accel.blobs"

typedef struct ckpt_rec {
	char *name, *key;
	uint32_t dtype, ndim;
	uint64_t shape[ACCEL_CKPT_MAX_DIMS];
	uint64_t offset, count, xxh64;  /* xxh64: of a streamed slice, as it came */
	const void *data;         /* the slice's bytes, until commit (hashed then);
	                             NULL: streamed (accelp_ckpt_stream_tensor) */
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
	/* optimizer states the job keeps but the checkpoint lacks, accepted by
	 * checkpoint.allow_optimizer_change: read as zeros (NULL: none) */
	const char *fresh[2];
	const accel_model_v1 *model;
};


/* ckpt.c: shared by save and load */
/* ACCEL_OK when ctx is prepared and dir a usable name (fn names the call). */
int accelp_ckpt_check_ready(accel_ctx *ctx, const char *dir, const char *fn);
/* Every rank learns the worst status; a rank that succeeded reports the
 * failure of another (collective). */
int accelp_ckpt_agree(accel_ctx *ctx, int rc, const char *what);
/* The job's strategy plugin's name ("none" without one). */
const char *accelp_ckpt_strategy_name(const accel_ctx *ctx);

/* ckpt_stream.c: the writer's slices into its file's metadata (the
 * checksums computed during commit); free what the writer holds. */
int accelp_ckpt_set_slices_meta(accel_ckpt_writer *w, accel_err *err);
void accelp_ckpt_writer_clear(accel_ckpt_writer *w);

/* ckpt_save.c: save into dir (collective; dir is new). */
int accelp_ckpt_save_at(accel_ctx *ctx, const char *dir);

/* core/ckpt_params.c: whether the strategy shards parameters (its instance
 * caps have ACCEL_CAP_SHARD_PARAMS): then reading or writing the working
 * weights is collective. */
int accelp_ckpt_params_sharded(const accel_ctx *ctx);
/* ACCEL_ERR_UNSUPPORTED, naming the strategy, when it shards parameters
 * but has no materialize slot (`who` names the call; a name with "load" in
 * it says the weights cannot be loaded, else saved). */
int accelp_ckpt_params_usable(accel_ctx *ctx, const char *who);
/* fn(ctx, param, data, transient, arg) for every parameter: data is its
 * bound view; transient 1 when it is valid only during the call (a
 * materialized unit, released after).  Not sharded: parameters in index
 * order, fn NULL does nothing.  Sharded: unit by unit in unit order,
 * materialize(u, GATHER), fn on the unit's parameters, materialize(u,
 * RELEASE | release_flags) (ACCEL_MATERIALIZE_WRITEBACK after writing into
 * the views); collective, so every rank calls it, with fn NULL on a rank
 * that only takes part.  After fn fails the walk goes on without it (the
 * other ranks are in the same gathers) and returns fn's status.  Without a
 * materialize slot: ACCEL_ERR_UNSUPPORTED naming the strategy. */
typedef int (*accelp_ckpt_param_fn)(accel_ctx *ctx, uint32_t param, const accel_view *data,
                                    int transient, void *arg);
int accelp_ckpt_each_param(accel_ctx *ctx, const char *who, uint32_t release_flags,
                           accelp_ckpt_param_fn fn, void *arg);

/* ckpt_load.c: load dir (collective); record ACCEL_ERR_CHECKPOINT with a
 * message and return it. */
int accelp_ckpt_load_at(accel_ctx *ctx, const char *dir);
int accelp_ckpt_bad(accel_ctx *ctx, const char *fmt, ...) ACCEL_PRINTF(2, 3);

/* ckpt_naming.c: project_dir/checkpoints into buf (ACCEL_ERR_INVALID_ARG
 * when automatic naming is off); the next checkpoint_<n>'s n; n of a name
 * "checkpoint_<n>" or -1; remove the oldest beyond total_limit (rank 0,
 * after committing checkpoint_<keep>); the directory "latest" names. */
int accelp_ckpt_auto_root(accel_ctx *ctx, const char *fn, char *buf, size_t cap);
int64_t accelp_ckpt_next_iteration(accel_ctx *ctx);
int64_t accelp_ckpt_auto_number(const char *name);
void accelp_ckpt_prune(accel_ctx *ctx, const char *root, int64_t keep);
int accelp_ckpt_latest(accel_ctx *ctx, char *buf, size_t cap);

/* ckpt_resume.c: the saving job's settings the manifest records
 * (optimizer, gradient_accumulation_steps, lr_schedule; owned JSON, NULL
 * when out of memory); the checks of a load against them: refuse another
 * optimizer unless checkpoint.allow_optimizer_change, then name what is
 * dropped and fill fresh[0..1] with the states that start from zero; warn
 * of another accumulation or schedule (rank 0).  *ret_changed: the
 * optimizer changed. */
json_t *accelp_ckpt_job_settings(accel_ctx *ctx);
int accelp_ckpt_check_resume(accel_ctx *ctx, const accelp_ckpt_manifest *m, const char **fresh,
                             int *ret_changed);

/* ckpt_project.c: at accel_prepare (collective): check and lock the
 * project directory when checkpoints are in play (automatic naming, or
 * project_dir set); at context free: release it.  Rank 0 before a save
 * into dir: remove leftovers (*.tmp-*) in a directory this job holds, move
 * the abandoned timeline aside after a resume.  After a load of dir:
 * remember it.  The newest committed checkpoint of root (what latest names
 * unless a newer committed checkpoint_<n> exists) into buf. */
int accelp_ckpt_project_prepare(accel_ctx *ctx);
void accelp_ckpt_project_release(accel_ctx *ctx);
void accelp_ckpt_project_before_save(accel_ctx *ctx, const char *dir);
void accelp_ckpt_project_loaded(accel_ctx *ctx, const char *dir);
int accelp_ckpt_find_latest(accel_err *err, const char *root, char *buf, size_t cap);

/* ckpt_fs.c */
void accelp_ckpt_pjoin(char *buf, size_t cap, const char *dir, const char *name);
int accelp_ckpt_fsync_path(const char *path, int dir);
void accelp_ckpt_parent_of(const char *path, char *buf, size_t cap);
const char *accelp_ckpt_base_of(const char *path, char *buf, size_t cap);
void accelp_ckpt_remove_tree(const char *dir);
int accelp_ckpt_write_text(const char *path, const char *text, accel_err *err);

/* A registered generator in a checkpoint: blob "rng/<i>" of each rank's
 * file, little-endian as written on the supported (x86-64, aarch64)
 * hosts. */
typedef struct accelp_ckpt_rng {
	uint32_t key[2];
	uint32_t lane;
	uint32_t reserved;
	uint64_t pos;
} accelp_ckpt_rng;

#endif
