/* SPDX-License-Identifier: MIT */
/* cli/launch-restart.c: what `accel launch --max-restarts` does between
 * attempts (docs/launch.md, "Automatic restart"): the state file rank 0
 * records its steps and checkpoints in (core/restart.h), and the
 * --restart-filter command run for each slot. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"
#include "restart.h"

extern char **environ;

int accelp_launch_state_create(char **ret_path)
{
	const char *tmp = getenv("TMPDIR");
	char *path = NULL;
	*ret_path = NULL;
	if (asprintf(&path, "%s/accel-launch-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
		return ENOMEM;
	int fd = mkstemp(path);
	if (fd < 0) {
		int e = errno;
		free(path);
		return e;
	}
	int e = 0;
	if (ftruncate(fd, ACCELP_RESTART_FILE_SIZE) < 0)
		e = errno;
	close(fd);
	if (e) {
		unlink(path);
		free(path);
		return e;
	}
	*ret_path = path;
	return 0;
}

void accelp_launch_state_reset_step(const char *path)
{
	char zero[ACCELP_RESTART_STEP_LEN] = {0};
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t w = pwrite(fd, zero, sizeof(zero), ACCELP_RESTART_STEP_OFF);
	(void)w;
	close(fd);
}

/* One NUL-padded record: its text up to the newline. */
static int read_record(int fd, off_t off, size_t len, char *buf)
{
	ssize_t r = pread(fd, buf, len, off);
	if (r < 0)
		return -1;
	buf[r < (ssize_t)len ? r : (ssize_t)len - 1] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

void accelp_launch_state_read(const char *path, launch_state *st)
{
	char buf[ACCELP_RESTART_SAVE_LEN];
	st->step = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char *end;
	if (read_record(fd, ACCELP_RESTART_STEP_OFF, ACCELP_RESTART_STEP_LEN, buf) == 0 && buf[0]) {
		long long v = strtoll(buf, &end, 10);
		if (!*end && v >= 0)
			st->step = v;
	}
	if (read_record(fd, ACCELP_RESTART_SAVE_OFF, ACCELP_RESTART_SAVE_LEN, buf) == 0 && buf[0]) {
		long long v = strtoll(buf, &end, 10);
		if (*end == ' ' && end[1] == '/' && v >= 0 && strlen(end + 1) < sizeof(st->ckpt_dir)) {
			st->ckpt_step = v;
			snprintf(st->ckpt_dir, sizeof(st->ckpt_dir), "%s", end + 1);
		}
	}
	close(fd);
}

int accelp_launch_filter(const char *cmd, int slot, int restart, const launch_result *res)
{
	char s_slot[16], s_restart[16], s_rank[16];
	snprintf(s_slot, sizeof(s_slot), "%d", slot);
	snprintf(s_restart, sizeof(s_restart), "%d", restart);
	snprintf(s_rank, sizeof(s_rank), "%d", res->failed_rank);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		setenv("ACCEL_RESTART_SLOT", s_slot, 1);
		setenv("ACCEL_RESTART_COUNT", s_restart, 1);
		setenv("ACCEL_RESTART_FAILED_RANK", s_rank, 1);
		setenv("ACCEL_RESTART_REASON", res->reason, 1);
		/* CMD sees the three values as $1 $2 $3 */
		char *const argv[] = {"sh", "-c", (char *)cmd, "accel-restart-filter", s_slot,
		                      s_restart, s_rank, NULL};
		execve("/bin/sh", argv, environ);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return st;
}
