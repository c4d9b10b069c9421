/* SPDX-License-Identifier: MIT */
/* core/restart.c: a rank's side of `accel launch --max-restarts`
 * (core/restart.h, docs/launch.md "Automatic restart"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "ctx-impl.h"
#include "log.h"
#include "restart.h"

struct accelp_restart {
	long count;        /* ACCEL_RESTART_COUNT, 0 when unset */
	char *resume;      /* ACCEL_RESUME: "latest" or a checkpoint directory; NULL */
	char *root;        /* ACCEL_RESUME_ROOT; NULL: project_dir/checkpoints */
	int state_fd;      /* rank 0's ACCEL_LAUNCH_STATE, -1 */
	char *state_path;  /* ACCEL_LAUNCH_STATE (every rank), NULL */
	int peer_noted;    /* accelp_restart_note_peer wrote its mark */
	uint64_t noted;    /* the step last written */
	int step_failed;   /* a write failed: said once, then no more */
};

static int bad_env(accel_ctx *ctx, const char *name, const char *val, const char *why)
{
	return accelp_err_set(&ctx->err, ACCEL_ERR_CONFIG, "environment variable %s='%s': %s",
	                      name, val, why);
}

int accelp_restart_init(accel_ctx *ctx, int skip_env)
{
	if (skip_env)
		return ACCEL_OK;
	const char *cnt = getenv(ACCEL_ENV_RESTART_COUNT), *res = getenv(ACCEL_ENV_RESUME);
	const char *root = getenv(ACCEL_ENV_RESUME_ROOT), *st = getenv(ACCEL_ENV_LAUNCH_STATE);
	if (!cnt && !(res && *res) && !st)
		return ACCEL_OK;
	accelp_restart *r = calloc(1, sizeof(*r));
	if (!r)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	r->state_fd = -1;
	ctx->restart = r;
	if (cnt) {
		char *end;
		errno = 0;
		long v = strtol(cnt, &end, 10);
		if (!*cnt || *end || errno || v < 0 || v > 1000000)
			return bad_env(ctx, ACCEL_ENV_RESTART_COUNT, cnt,
			               "expected the number of restarts so far, 0..1000000");
		r->count = v;
	}
	if (res && *res) {
		if (strlen(res) > PATH_MAX - 64)
			return bad_env(ctx, ACCEL_ENV_RESUME, res, "too long for a directory name");
		if (!(r->resume = strdup(res)))
			return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
		if (root && *root) {
			if (strlen(root) > PATH_MAX - 64)
				return bad_env(ctx, ACCEL_ENV_RESUME_ROOT, root, "too long for a directory name");
			if (!(r->root = strdup(root)))
				return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
		}
	}
	if (st && *st && !(r->state_path = strdup(st)))
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	/* Only rank 0 writes the records; a file that cannot be opened costs
	 * the launcher its report of steps lost, not the job. */
	if (st && *st && ctx->world.rank == 0) {
		r->state_fd = open(st, O_WRONLY | O_CLOEXEC);
		if (r->state_fd < 0)
			accelp_log(ACCEL_LOG_WARN, "%s='%s': cannot open it (%s): accel launch will not "
			           "know the steps done or the checkpoints saved", ACCEL_ENV_LAUNCH_STATE,
			           st, strerror(errno));
	}
	return ACCEL_OK;
}

void accelp_restart_free(accel_ctx *ctx)
{
	accelp_restart *r = ctx ? ctx->restart : NULL;
	if (!r)
		return;
	if (r->state_fd >= 0)
		close(r->state_fd);
	free(r->resume);
	free(r->root);
	free(r->state_path);
	free(r);
	ctx->restart = NULL;
}

/* 1 and the checkpoint in buf; 0 when "latest" names none (no file);
 * an error status otherwise. */
static int resolve(accel_ctx *ctx, char *buf, size_t cap, char *root, size_t rcap)
{
	accelp_restart *r = ctx->restart;
	if (!r || !r->resume)
		return 0;
	if (strcmp(r->resume, "latest") != 0) {
		snprintf(buf, cap, "%s", r->resume);
		snprintf(root, rcap, "%s", r->resume);
		return 1;
	}
	if (r->root) {
		snprintf(root, rcap, "%s", r->root);
	} else {
		const char *pd = ".";
		if (accel_config_string(ctx, "project_dir", &pd) != ACCEL_OK || !pd || !*pd)
			pd = ".";
		snprintf(root, rcap, "%s/checkpoints", pd);
	}
	char lpath[PATH_MAX + 16], line[512] = "";
	snprintf(lpath, sizeof(lpath), "%s/latest", root);
	FILE *f = fopen(lpath, "r");
	if (!f) {
		if (errno == ENOENT)
			return 0;
		return accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s=latest: cannot read %s: %s",
		                      ACCEL_ENV_RESUME, lpath, strerror(errno));
	}
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	line[strcspn(line, "\r\n")] = '\0';
	if (!*line || strchr(line, '/') || !strcmp(line, ".") || !strcmp(line, ".."))
		return accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s=latest: %s does not name a "
		                      "checkpoint directory ('%s')", ACCEL_ENV_RESUME, lpath, line);
	if (snprintf(buf, cap, "%s/%s", root, line) >= (int)cap)
		return accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s=latest: %s/%s: name too "
		                      "long", ACCEL_ENV_RESUME, root, line);
	return 1;
}

int accelp_restart_dir(accel_ctx *ctx, char *buf, size_t cap)
{
	char root[PATH_MAX];
	return resolve(ctx, buf, cap, root, sizeof(root)) == 1;
}

int accelp_restart_resume(accel_ctx *ctx)
{
	accelp_restart *r = ctx->restart;
	if (!r || !r->resume)
		return ACCEL_OK;
	char dir[PATH_MAX], root[PATH_MAX];
	int found = resolve(ctx, dir, sizeof(dir), root, sizeof(root));
	/* every rank must take the same path: a rank that cannot read the
	 * file, or finds none where another finds one, fails them all */
	int32_t v[2] = {found, -found};
	int rc = accel_allreduce(ctx, v, v, 2, ACCEL_DTYPE_I32, ACCEL_RED_MAX);
	if (rc)
		return rc;
	if (found < 0)
		return found;
	if (v[0] != -v[1])
		return accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s=%s: some ranks find a "
		                      "checkpoint in %s and others do not: the checkpoint directory "
		                      "must be on a file system every rank sees", ACCEL_ENV_RESUME,
		                      r->resume, root);
	if (v[0] < 0)
		return accelp_err_set(&ctx->err, ACCEL_ERR_CHECKPOINT, "%s=%s: another rank could not "
		                      "read %s/latest (see its message)", ACCEL_ENV_RESUME, r->resume,
		                      root);
	if (!found) {
		if (ctx->world.rank == 0)
			accelp_log(ACCEL_LOG_INFO, "%s=latest (restart %ld): no checkpoint in %s (no "
			           "'latest' file): starting from the beginning", ACCEL_ENV_RESUME,
			           r->count, root);
		return ACCEL_OK;
	}
	if ((rc = accel_load_state(ctx, dir)))
		return rc;
	accelp_restart_note_step(ctx, accel_get_step(ctx));
	if (ctx->world.rank == 0)
		accelp_log(ACCEL_LOG_INFO, "%s=%s (restart %ld): resumed from %s at step %" PRIu64,
		           ACCEL_ENV_RESUME, r->resume, r->count, dir, accel_get_step(ctx));
	return ACCEL_OK;
}

/* A NUL-padded record written in place (one pwrite: the launcher reads
 * the file only once every rank has exited). */
static int put_record(int fd, off_t off, size_t len, const char *text)
{
	char buf[ACCELP_RESTART_SAVE_LEN];
	memset(buf, 0, len);
	snprintf(buf, len, "%s", text);
	return pwrite(fd, buf, len, off) == (ssize_t)len ? 0 : -1;
}

void accelp_restart_note_step(accel_ctx *ctx, uint64_t step)
{
	accelp_restart *r = ctx ? ctx->restart : NULL;
	if (!r || r->state_fd < 0 || r->step_failed || (step == r->noted && step))
		return;
	char line[64];
	snprintf(line, sizeof(line), "%" PRIu64 "\n", step);
	if (put_record(r->state_fd, ACCELP_RESTART_STEP_OFF, ACCELP_RESTART_STEP_LEN, line) < 0) {
		r->step_failed = 1;
		accelp_log(ACCEL_LOG_WARN, "writing the step to %s failed: %s: accel launch will not "
		           "know the steps done", ACCEL_ENV_LAUNCH_STATE, strerror(errno));
		return;
	}
	r->noted = step;
}

void accelp_restart_note_saved(accel_ctx *ctx, const char *dir, uint64_t step)
{
	accelp_restart *r = ctx ? ctx->restart : NULL;
	if (!r || r->state_fd < 0 || !dir)
		return;
	char abs[PATH_MAX], line[ACCELP_RESTART_SAVE_LEN];
	if (!realpath(dir, abs))
		snprintf(abs, sizeof(abs), "%s", dir);
	if (snprintf(line, sizeof(line), "%" PRIu64 " %s\n", step, abs) >= (int)sizeof(line) - 1 ||
	    put_record(r->state_fd, ACCELP_RESTART_SAVE_OFF, ACCELP_RESTART_SAVE_LEN, line) < 0)
		accelp_log(ACCEL_LOG_WARN, "recording checkpoint %s in %s failed: accel launch will "
		           "not name it", dir, ACCEL_ENV_LAUNCH_STATE);
	accelp_restart_note_step(ctx, step);
}

void accelp_restart_note_peer(accel_ctx *ctx)
{
	accelp_restart *r = ctx ? ctx->restart : NULL;
	int lr = ctx ? ctx->world.local_rank : -1;
	if (!r || !r->state_path || r->peer_noted || lr < 0 || lr >= ACCELP_RESTART_PEER_LEN)
		return;
	r->peer_noted = 1;
	/* opened here, on the way out, by any rank: one byte of its own */
	int fd = open(r->state_path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || pwrite(fd, "1", 1, ACCELP_RESTART_PEER_OFF + lr) != 1)
		accelp_log(ACCEL_LOG_DEBUG, "marking this rank's failure as a lost peer's in %s "
		           "failed: %s", ACCEL_ENV_LAUNCH_STATE, strerror(errno));
	if (fd >= 0)
		close(fd);
}
