/* SPDX-License-Identifier: MIT */
/* core/ckpt_project.c: the project directory of a job's checkpoints
 * (docs/checkpoints.md, "The project directory"): checked at accel_prepare
 * (a directory, writable, room for one checkpoint), held by one job at a
 * time (flock on <project_dir>/.accel-lock, released by the kernel when
 * the holder dies), cleaned of what dead jobs left (*.tmp-*), the newer
 * checkpoints of an abandoned timeline moved aside when a resumed job saves
 * its first one, and "latest" found even when its update failed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_impl.h"
#include "config.h"
#include "log.h"
#include "train.h"

#define LOCK_NAME ".accel-lock"

/* The project directory when checkpoints are in play: project_dir when
 * automatic naming is on or the configuration sets it (not its default). */
static int project_dir(accel_ctx *ctx, char *buf, size_t cap)
{
	int32_t on = 0;
	const char *pd = NULL, *src = accelp_config_source(ctx->cfg, "project_dir");
	if (accel_config_bool(ctx, "automatic_checkpoint_naming", &on) != ACCEL_OK)
		on = 0;
	if (!on && (!src || !strncmp(src, "default", 7)))
		return 0;
	if (accel_config_string(ctx, "project_dir", &pd) != ACCEL_OK || !pd || !*pd)
		pd = ".";
	return snprintf(buf, cap, "%s", pd) < (int)cap - 64;
}

/* Bytes of one checkpoint of this job: the working weights (model.safetensors)
 * and the f32 master weights and optimizer state of every trainable
 * parameter (the rank files). */
static uint64_t estimate_bytes(accel_ctx *ctx)
{
	const accel_model_v1 *m = accelp_train_model(ctx->train);
	uint64_t b = 0, per = 1 + accelp_train_optim_state_count(ctx->train);
	for (uint32_t i = 0; m && i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		b += p->numel * accel_dtype_size(p->dtype);
		if (p->requires_grad)
			b += p->numel * 4 * per;
	}
	return b;
}

static const char *why(int e)
{
	return e == EROFS ? " (a read-only file system)"
	       : e == EACCES || e == EPERM ? " (forbidden: this user may not write there)"
	       : e == ENOSPC ? " (no space left)" : "";
}

/* mkdir -p */
static int make_dirs(const char *path)
{
	char buf[PATH_CAP];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Rank 0: check the directory, take its lock. */
static int take(accel_ctx *ctx, const char *pd)
{
	accel_err *err = &ctx->err;
	char path[PATH_CAP], host[256] = "?", line[512];
	struct stat sb;
	struct statvfs vf;
	if (stat(pd, &sb) == 0 && !S_ISDIR(sb.st_mode))
		return accelp_err_set(err, ACCEL_ERR_IO, "accel_prepare: project directory %s is not "
		                      "a directory (project_dir): checkpoints could not be saved "
		                      "there; name a directory", pd);
	if (make_dirs(pd) != 0) {
		int e = errno;
		return accelp_err_set(err, ACCEL_ERR_IO, "accel_prepare: cannot create project "
		                      "directory %s: %s%s; checkpoints could not be saved there: name "
		                      "another project_dir", pd, strerror(e), why(e));
	}
	accelp_ckpt_pjoin(path, sizeof(path), pd, LOCK_NAME);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		return accelp_err_set(err, ACCEL_ERR_IO, "accel_prepare: project directory %s is not "
		                      "writable: creating %s: %s%s; checkpoints could not be saved "
		                      "there: name another project_dir", pd, LOCK_NAME, strerror(e),
		                      why(e));
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		ssize_t k = e == EWOULDBLOCK ? pread(fd, line, sizeof(line) - 1, 0) : -1;
		close(fd);
		if (e != EWOULDBLOCK)
			return accelp_err_set(err, ACCEL_ERR_IO, "accel_prepare: locking %s: %s", path,
			                      strerror(e));
		line[k > 0 ? k : 0] = '\0';
		line[strcspn(line, "\n")] = '\0';
		char job[128] = "?", hst[256] = "?";
		long pid = 0;
		if (sscanf(line, "job %127s pid %ld host %255s", job, &pid, hst) != 3)
			snprintf(job, sizeof(job), "?");
		return accelp_err_set(err, ACCEL_ERR_STATE, "accel_prepare: project directory %s is "
		                      "in use by job %s (pid %ld on host %s): one job per project "
		                      "directory; wait for it to end, or give this job another "
		                      "project_dir", pd, job, pid, hst);
	}
	gethostname(host, sizeof(host) - 1);
	int n = snprintf(line, sizeof(line), "job %s pid %ld host %s\n", ctx->job_id,
	                 (long)getpid(), host);
	if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
		int e = errno;
		close(fd);
		return accelp_err_set(err, ACCEL_ERR_IO, "accel_prepare: project directory %s: "
		                      "writing %s: %s%s", pd, LOCK_NAME, strerror(e), why(e));
	}
	/* room for one checkpoint (ACCEL_TEST_CKPT_FREE_BYTES stands in for
	 * the free space in the tests) */
	uint64_t need = estimate_bytes(ctx), avail = UINT64_MAX;
	const char *fake = getenv("ACCEL_TEST_CKPT_FREE_BYTES");
	if (fake)
		avail = strtoull(fake, NULL, 10);
	else if (fstatvfs(fd, &vf) == 0)
		avail = (uint64_t)vf.f_bavail * vf.f_frsize;
	if (avail < need) {
		close(fd);
		return accelp_err_set(err, ACCEL_ERR_IO, "accel_prepare: project directory %s has %"
		                      PRIu64 " bytes free; one checkpoint of this model needs about %"
		                      PRIu64 " (its weights, f32 master weights and optimizer state): "
		                      "free space there or name another project_dir", pd, avail, need);
	}
	ctx->ckpt_lock_fd = fd + 1;
	free(ctx->ckpt_project);
	ctx->ckpt_project = realpath(pd, NULL);
	return ACCEL_OK;
}

int accelp_ckpt_project_prepare(accel_ctx *ctx)
{
	char pd[PATH_CAP];
	int rc = ACCEL_OK;
	if (!project_dir(ctx, pd, sizeof(pd)))
		return ACCEL_OK;
	if (ctx->world.rank == 0 && !ctx->ckpt_lock_fd)
		rc = take(ctx, pd);
	return accelp_ckpt_agree(ctx, rc, "accel_prepare (the project directory)");
}

void accelp_ckpt_project_release(accel_ctx *ctx)
{
	if (ctx->ckpt_lock_fd)
		close(ctx->ckpt_lock_fd - 1);   /* releases the flock */
	ctx->ckpt_lock_fd = 0;
	free(ctx->ckpt_project);
	ctx->ckpt_project = NULL;
	free(ctx->ckpt_resumed_root);
	ctx->ckpt_resumed_root = NULL;
}

/* Whether `dir` (a real path) is the locked project directory or its
 * checkpoints/. */
static int held(const accel_ctx *ctx, const char *dir)
{
	size_t n = ctx->ckpt_project ? strlen(ctx->ckpt_project) : 0;
	return n && !strncmp(dir, ctx->ckpt_project, n) &&
	       (!dir[n] || !strcmp(dir + n, "/checkpoints"));
}

/* ---- at a save (rank 0) ------------------------------------------------------------ */

void accelp_ckpt_project_before_save(accel_ctx *ctx, const char *dir)
{
	char parent[PATH_CAP], path[PATH_CAP];
	accelp_ckpt_parent_of(dir, parent, sizeof(parent));
	char *real = realpath(parent, NULL);
	if (!real)
		return;
	DIR *d = NULL;
	struct dirent *e;
	/* leftovers: no save runs now in a directory this job holds */
	if (held(ctx, real) && (d = opendir(real))) {
		while ((e = readdir(d))) {
			if (!strstr(e->d_name, ".tmp-") || (strncmp(e->d_name, "checkpoint_", 11) &&
			                                    strncmp(e->d_name, "latest.tmp-", 11)))
				continue;
			accelp_ckpt_pjoin(path, sizeof(path), real, e->d_name);
			struct stat sb;
			if (lstat(path, &sb) != 0)
				continue;
			if (S_ISDIR(sb.st_mode))
				accelp_ckpt_remove_tree(path);
			else
				unlink(path);
			accelp_log(ACCEL_LOG_INFO, "accel_save_state: removed %s, left by a job that "
			           "ended before committing it", path);
		}
		closedir(d);
	}
	/* the abandoned timeline: the first save after resuming checkpoint_<n>
	 * moves the newer checkpoint_<k> of that directory aside */
	if (ctx->ckpt_resumed_root && !strcmp(ctx->ckpt_resumed_root, real) && (d = opendir(real))) {
		char stamp[32], to[PATH_CAP + 64], list[1024] = "";
		size_t used = 0, n = 0;
		time_t now = time(NULL);
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
		while ((e = readdir(d))) {
			int64_t k = accelp_ckpt_auto_number(e->d_name);
			if (k <= ctx->ckpt_resumed_n)
				continue;
			accelp_ckpt_pjoin(path, sizeof(path), real, e->d_name);
			snprintf(to, sizeof(to), "%s.abandoned-%s", path, stamp);
			if (rename(path, to) != 0) {
				accelp_log(ACCEL_LOG_WARN, "accel_save_state: could not move %s aside to %s: "
				           "%s", path, to, strerror(errno));
				continue;
			}
			if (used < sizeof(list) - 300)
				used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", n ? ", " : "",
				                         e->d_name);
			n++;
		}
		closedir(d);
		if (n)
			accelp_log(ACCEL_LOG_WARN, "accel_save_state: this job resumed from checkpoint_%"
			           PRId64 " in %s; the newer checkpoints of the timeline it abandoned (%s) "
			           "are moved aside as <name>.abandoned-%s (kept; total_limit prunes them "
			           "first)", ctx->ckpt_resumed_n, real, list, stamp);
		free(ctx->ckpt_resumed_root);
		ctx->ckpt_resumed_root = NULL;
	}
	free(real);
}

void accelp_ckpt_project_loaded(accel_ctx *ctx, const char *dir)
{
	char parent[PATH_CAP], base[PATH_CAP];
	free(ctx->ckpt_resumed_root);
	ctx->ckpt_resumed_root = NULL;
	int64_t k = accelp_ckpt_auto_number(accelp_ckpt_base_of(dir, base, sizeof(base)));
	if (k < 0)
		return;
	accelp_ckpt_parent_of(dir, parent, sizeof(parent));
	ctx->ckpt_resumed_root = realpath(parent, NULL);
	ctx->ckpt_resumed_n = k;
}

/* ---- latest ------------------------------------------------------------------------ */

static int committed(const char *root, const char *name)
{
	char path[PATH_CAP], m[PATH_CAP];
	struct stat sb;
	accelp_ckpt_pjoin(path, sizeof(path), root, name);
	accelp_ckpt_pjoin(m, sizeof(m), path, "manifest.json");
	return stat(m, &sb) == 0 && S_ISREG(sb.st_mode);
}

int accelp_ckpt_find_latest(accel_err *err, const char *root, char *buf, size_t cap)
{
	char lpath[PATH_CAP], line[512] = "", name[512] = "";
	int64_t best = -1;
	DIR *d = opendir(root);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		int64_t k = accelp_ckpt_auto_number(e->d_name);
		if (k > best && committed(root, e->d_name))
			best = k;
	}
	if (d)
		closedir(d);
	accelp_ckpt_pjoin(lpath, sizeof(lpath), root, "latest");
	FILE *f = fopen(lpath, "r");
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
		line[strcspn(line, "\r\n")] = '\0';
	}
	int named = *line && !strchr(line, '/') && strcmp(line, ".") && strcmp(line, "..") &&
	            committed(root, line);
	int64_t lk = named ? accelp_ckpt_auto_number(line) : -1;
	if (named && (lk < 0 || lk >= best))
		snprintf(name, sizeof(name), "%s", line);
	else if (best >= 0) {
		snprintf(name, sizeof(name), "checkpoint_%" PRId64, best);
		accelp_log(ACCEL_LOG_WARN, "%s %s%s%s; checkpoint_%" PRId64 " is the newest committed "
		           "checkpoint there: using it", lpath, !f ? "is missing" : "names ",
		           !f ? "" : *line ? line : "nothing",
		           !f ? "" : named ? ", an older one" : ", which is no committed checkpoint",
		           best);
	} else if (!f)
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "cannot read %s: %s (no checkpoint "
		                      "was committed there)", lpath, strerror(errno));
	else
		return accelp_err_set(err, ACCEL_ERR_CHECKPOINT, "%s: does not name a committed "
		                      "checkpoint directory ('%s'), and %s holds no committed "
		                      "checkpoint_<n>", lpath, line, root);
	if (snprintf(buf, cap, "%s/%s", root, name) >= (int)cap)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "%s: path too long", root);
	return ACCEL_OK;
}

int accel_latest_checkpoint(accel_ctx *ctx, const char *root, char *buf, size_t cap)
{
	char tmp[PATH_CAP];
	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!root || !*root || !buf || !cap)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_latest_checkpoint: "
		                      "root, buf or cap is NULL or empty");
	int rc = accelp_ckpt_find_latest(&ctx->err, root, tmp, sizeof(tmp));
	if (rc)
		return rc;
	if (strlen(tmp) >= cap)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_latest_checkpoint: "
		                      "%s does not fit in %zu bytes", tmp, cap);
	memcpy(buf, tmp, strlen(tmp) + 1);
	return ACCEL_OK;
}
