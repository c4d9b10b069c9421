/* SPDX-License-Identifier: MIT */
/* core/ckpt_naming.c: automatic checkpoint naming (project_dir,
 * checkpoints/checkpoint_<n>, iteration), total_limit and "latest"
 * (docs/checkpoints.md, "Automatic naming and weights only"). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_impl.h"
#include "log.h"

/* project_dir/checkpoints into buf; ACCEL_ERR_INVALID_ARG when automatic
 * naming is off. */
int accelp_ckpt_auto_root(accel_ctx *ctx, const char *fn, char *buf, size_t cap)
{
	int32_t on = 0;
	const char *pd = ".";
	if (accel_config_bool(ctx, "automatic_checkpoint_naming", &on) != ACCEL_OK || !on)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: no directory given (pass "
		                      "one, or set automatic_checkpoint_naming=true to use "
		                      "project_dir/checkpoints/checkpoint_<n>)", fn);
	if (accel_config_string(ctx, "project_dir", &pd) != ACCEL_OK || !pd || !*pd)
		pd = ".";
	if (snprintf(buf, cap, "%s/checkpoints", pd) >= (int)cap - 64)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: project_dir too long", fn);
	return ACCEL_OK;
}

int64_t accelp_ckpt_next_iteration(accel_ctx *ctx)
{
	if (!ctx->ckpt_iteration_set) {
		int64_t it = 0;
		if (accel_config_int(ctx, "iteration", &it) != ACCEL_OK)
			it = 0;
		ctx->ckpt_iteration = it;
		ctx->ckpt_iteration_set = 1;
	}
	return ctx->ckpt_iteration;
}

/* n of "checkpoint_<n>", or -1. */
int64_t accelp_ckpt_auto_number(const char *name)
{
	if (strncmp(name, "checkpoint_", 11) || !name[11])
		return -1;
	int64_t n = 0;
	for (const char *p = name + 11; *p; p++) {
		if (*p < '0' || *p > '9' || n > INT64_MAX / 10 - 10)
			return -1;
		n = n * 10 + (*p - '0');
	}
	return n;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The checkpoints of an abandoned timeline (checkpoint_<n>.abandoned-<time>)
 * count against total_limit with the `kept` current ones and go first,
 * the earliest abandoned first; each removal is a warning naming it. */
static void prune_abandoned(const char *root, int64_t limit, size_t kept)
{
	DIR *d = opendir(root);
	char **names = NULL, path[PATH_CAP];
	size_t n = 0, cap = 0;
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char *at = strstr(e->d_name, ".abandoned-");
		if (!at || strncmp(e->d_name, "checkpoint_", 11))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			char **t = realloc(names, cap * sizeof(*t));
			if (!t)
				break;
			names = t;
		}
		if (!(names[n] = strdup(e->d_name)))
			break;
		n++;
	}
	closedir(d);
	/* by the time they were moved aside (the suffix), then by name */
	for (size_t i = 0; i < n; i++) {
		char *at = strstr(names[i], ".abandoned-");
		size_t len = strlen(names[i]), tail = strlen(at);
		char *r = malloc(len + 2);
		if (!r)
			continue;
		snprintf(r, len + 2, "%s|%.*s", at, (int)(len - tail), names[i]);
		free(names[i]);
		names[i] = r;
	}
	if (n)
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (kept + (n - i) > (size_t)limit) {
			char *bar = strchr(names[i], '|'), name[600];
			snprintf(name, sizeof(name), "%s%.*s", bar + 1, (int)(bar - names[i]), names[i]);
			accelp_ckpt_pjoin(path, sizeof(path), root, name);
			accelp_ckpt_remove_tree(path);
			accelp_log(ACCEL_LOG_WARN, "total_limit %" PRId64 ": removed %s, a checkpoint of "
			           "an abandoned timeline", limit, path);
		}
		free(names[i]);
	}
	free(names);
}

/* Rank 0, after committing checkpoint_<keep>: keep the newest total_limit
 * committed checkpoint_<n> (with a manifest) under root, the one just
 * committed always among them (numbering may have been restarted lower
 * with `iteration`); remove the others. */
void accelp_ckpt_prune(accel_ctx *ctx, const char *root, int64_t keep)
{
	int64_t limit = 0;
	if (accel_config_int(ctx, "total_limit", &limit) != ACCEL_OK || limit < 1)
		return;
	DIR *d = opendir(root);
	if (!d)
		return;
	int64_t *nums = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	char path[PATH_CAP], mpath[PATH_CAP];
	struct stat sb;
	while ((e = readdir(d))) {
		int64_t k = accelp_ckpt_auto_number(e->d_name);
		accelp_ckpt_pjoin(path, sizeof(path), root, e->d_name);
		accelp_ckpt_pjoin(mpath, sizeof(mpath), path, "manifest.json");
		if (k < 0 || k == keep || stat(mpath, &sb) != 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *t = realloc(nums, cap * sizeof(*t));
			if (!t)
				break;
			nums = t;
		}
		nums[n++] = k;
	}
	closedir(d);
	if (n)
		qsort(nums, n, sizeof(*nums), cmp_i64);
	/* `keep` is one of the limit kept: the others are the newest limit - 1 */
	for (size_t i = 0; n > (size_t)limit - 1 && i < n - ((size_t)limit - 1); i++) {
		char name[64];
		snprintf(name, sizeof(name), "checkpoint_%" PRId64, nums[i]);
		accelp_ckpt_pjoin(path, sizeof(path), root, name);
		/* the manifest first: a half-removed directory is no checkpoint */
		accelp_ckpt_pjoin(mpath, sizeof(mpath), path, "manifest.json");
		unlink(mpath);
		accelp_ckpt_remove_tree(path);
		if (stat(path, &sb) == 0)
			accelp_log(ACCEL_LOG_WARN, "total_limit %" PRId64 ": could not remove %s",
			           limit, path);
		else
			accelp_log(ACCEL_LOG_DEBUG, "total_limit %" PRId64 ": removed %s", limit, path);
	}
	free(nums);
	prune_abandoned(root, limit, n > (size_t)limit - 1 ? (size_t)limit : n + 1);
}


/* The directory checkpoints/latest names, into buf (PATH_CAP bytes); a
 * newer committed checkpoint_<n> wins (a save whose `latest` update
 * failed). */
int accelp_ckpt_latest(accel_ctx *ctx, char *buf, size_t cap)
{
	char root[PATH_CAP];
	int rc = accelp_ckpt_auto_root(ctx, "accel_load_state", root, sizeof(root));
	if (rc)
		return rc;
	return accelp_ckpt_find_latest(&ctx->err, root, buf, cap);
}
