/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_files.c: the files train_mlp writes and reads
 * besides accel's.  Output paths are checked before any work (a bad one is
 * a usage error, not a failure after an hour of training); the parameters
 * and the data set are written as safetensors (st_write.c), gathered unit
 * by unit under sharded strategies; --resume names the checkpoint to load.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_write.h"
#include "train_mlp.h"

/* "./a//b/" -> "a/b": the same directory spelled one way. */
static void norm_path(char *p)
{
	char *o = p;
	const char *i = p;
	while (i[0] == '.' && i[1] == '/')
		for (i += 2; *i == '/';)
			i++;
	for (; *i; i++)
		if (!(*i == '/' && o > p && o[-1] == '/'))
			*o++ = *i;
	while (o > p + 1 && o[-1] == '/')
		o--;
	*o = '\0';
}

/* An output path that cannot work, said before any work: an existing
 * path of the wrong kind, or a parent directory that is missing or not
 * writable.  `dir`: 1 the path is a directory to create or reuse, 2 a
 * stream that may also be a pipe or a device (else a regular file);
 * `made_dir`: a directory the program creates before it writes `path`. */
int train_bad_output(const char *path, const char *opt, int dir, const char *made_dir)
{
	if (!path)
		return 0;
	struct stat st;
	int exists = stat(path, &st) == 0;
	/* dir 2: a stream (the metrics), which may also be a pipe or a device */
	if (exists && dir == 2 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)))
		return 0;
	if (exists && (dir == 1 ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
		fprintf(stderr, "train_mlp: %s %s: it exists and is not a %s\n", opt, path,
		        dir == 1 ? "directory" : "regular file");
		return 1;
	}
	/* files go into an existing directory itself; a new one, or a
	 * replaced file, into its parent */
	if (exists && dir == 1) {
		if (access(path, W_OK | X_OK) == 0)
			return 0;
		fprintf(stderr, "train_mlp: %s %s: cannot write in it: %s\n", opt, path,
		        strerror(errno));
		return 1;
	}
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", path);
	norm_path(parent);
	char *slash = strrchr(parent, '/');
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else if (slash == parent)
		parent[1] = '\0';
	else
		*slash = '\0';
	/* a file in the --save-init directory, which is made after the checks */
	if (made_dir) {
		char md[4096];
		snprintf(md, sizeof(md), "%s", made_dir);
		norm_path(md);
		if (!strcmp(parent, md))
			return train_bad_output(made_dir, "--save-init", 1, NULL);
	}
	if (access(parent, W_OK | X_OK) != 0) {
		fprintf(stderr, "train_mlp: %s %s: cannot write in %s: %s\n", opt, path, parent,
		        strerror(errno));
		return 1;
	}
	return 0;
}

/* --save-final-ranks PREFIX: rank 0's file stands for all of them (they
 * share the directory); a prefix that leaves no room for the suffix is
 * refused here rather than cut short at the end. */
int train_bad_ranks_output(const char *prefix, const char *made_dir)
{
	char path[4096];
	if (!prefix)
		return 0;
	if (strlen(prefix) > sizeof(path) - 64) {
		fprintf(stderr, "train_mlp: --save-final-ranks: the prefix is longer than %zu bytes\n",
		        sizeof(path) - 64);
		return 1;
	}
	snprintf(path, sizeof(path), "%s.rank0.safetensors", prefix);
	return train_bad_output(path, "--save-final-ranks", 0, made_dir);
}

/* Full parameters to a safetensors file, written by the main process, or
 * by every process when `every_rank` (each to its own path).  The unit
 * hooks make sharded strategies gather each unit's parameters; every
 * process calls this either way, since the gathering is collective. */
static int save_params_pass(trainer *t, const char *path, const char *const *meta, int n_meta,
                            int every_rank)
{
	int writer = every_rank || accel_is_main(t->ctx), rc, ret = -1,
	    n = 2 * t->shape.n_layers;
	st_tensor *ts = calloc((size_t)n, sizeof(*ts));
	float **copies = calloc((size_t)n, sizeof(*copies));
	char (*names)[32] = calloc((size_t)n, sizeof(*names));
	char err[512];
	if (!ts || !copies || !names) {
		fprintf(stderr, "train_mlp: out of memory\n");
		goto out;
	}
	for (int l = 0; l < t->shape.n_layers; l++) {
		if ((rc = accel_unit_pre_forward(t->ctx, t->unit[l]))) {
			train_fail(t, "gathering parameters", rc);
			goto out;
		}
		for (int j = 0; j < 2 && writer; j++) {
			uint32_t p = j ? t->bias[l] : t->weight[l];
			int k = 2 * l + j;
			size_t numel = (size_t)accel_param_numel(t->ctx, p);
			const float *src = accel_param_data(t->ctx, p);
			copies[k] = malloc(numel * sizeof(float));
			if (!src || !copies[k]) {
				fprintf(stderr, "train_mlp: %s: cannot copy %s\n", path,
				        accel_param_name(t->ctx, p));
				accel_unit_post_forward(t->ctx, t->unit[l]);
				goto out;
			}
			if (t->gpu && mlp_cuda_to_host(t->gpu, copies[k], src, numel)) {
				train_gpu_fail(t, "copying the parameters to the host");
				accel_unit_post_forward(t->ctx, t->unit[l]);
				goto out;
			} else if (!t->gpu && t->prec != MLP_F32) {
				mlp_widen(copies[k], (const uint16_t *)src, numel, t->prec);
			} else if (!t->gpu) {
				memcpy(copies[k], src, numel * sizeof(float));
			}
			snprintf(names[k], sizeof(names[k]), "%s", accel_param_name(t->ctx, p));
			ts[k] = (st_tensor){.name = names[k], .dtype = "F32", .data = copies[k],
			                    .nbytes = numel * sizeof(float)};
			if (j == 0) {
				ts[k].ndim = 2;
				ts[k].shape[0] = t->shape.dims[l + 1];
				ts[k].shape[1] = t->shape.dims[l];
			} else {
				ts[k].ndim = 1;
				ts[k].shape[0] = t->shape.dims[l + 1];
			}
		}
		if ((rc = accel_unit_post_forward(t->ctx, t->unit[l]))) {
			train_fail(t, "releasing parameters", rc);
			goto out;
		}
	}
	if (writer && st_write(path, ts, n, meta, n_meta, err, sizeof(err))) {
		fprintf(stderr, "train_mlp: %s\n", err);
		goto out;
	}
	ret = 0;
out:
	for (int k = 0; copies && k < n; k++)
		free(copies[k]);
	free(copies);
	free(ts);
	free(names);
	return ret;
}

/* save_params_pass in a forward-only pass (the gathers are not for a
 * backward). */
int train_save_params(trainer *t, const char *path, const char *const *meta, int n_meta,
                      int every_rank)
{
	int rc;
	FORWARD_ONLY(t, rc, save_params_pass(t, path, meta, n_meta, every_rank));
	return rc;
}

int train_save_data(const char *dir, const mlp_data *d, const char *const *meta, int n_meta)
{
	char path[4096], err[512];
	snprintf(path, sizeof(path), "%s/data.safetensors", dir);
	/* i64 first so both tensors stay aligned to their element size. */
	st_tensor ts[2] = {
		{.name = "y", .dtype = "I64", .ndim = 1, .shape = {d->n}, .data = d->y,
		 .nbytes = (size_t)d->n * sizeof(int64_t)},
		{.name = "x", .dtype = "F32", .ndim = 2, .shape = {d->n, d->dim}, .data = d->x,
		 .nbytes = (size_t)d->n * (size_t)d->dim * sizeof(float)},
	};
	if (st_write(path, ts, 2, meta, n_meta, err, sizeof(err))) {
		fprintf(stderr, "train_mlp: %s\n", err);
		return -1;
	}
	return 0;
}

int train_make_dir(const char *dir)
{
	if (mkdir(dir, 0777) && errno != EEXIST) {
		fprintf(stderr, "train_mlp: cannot create directory %s: %s\n", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* --resume DIR, or "latest": the newest committed checkpoint of the
 * project directory (what its "latest" names, unless a save's update of
 * it failed: accel_latest_checkpoint). */
int train_resume_dir(accel_ctx *ctx, const options *o, char *buf, size_t cap)
{
	if (strcmp(o->resume, "latest")) {
		snprintf(buf, cap, "%s", o->resume);
		return 0;
	}
	if (accel_latest_checkpoint(ctx, o->project_dir, buf, cap) != ACCEL_OK) {
		fprintf(stderr, "train_mlp: --resume latest: %s\n", accel_errmsg(ctx));
		return -1;
	}
	return 0;
}
