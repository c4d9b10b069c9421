/* SPDX-License-Identifier: MIT */
/* cli/self-launch.c: `accel launch -n N -- accel WORKER...` from inside
 * accel, with a deadline.  The launcher does the rank environment, the
 * rendezvous and the clean-up of a failed rank, so a self-check runs the
 * same path a user's job does. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "self-launch.h"

#define OUT_CAP (1u << 20)

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *accelp_cli_self_path(void)
{
	static char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	if (n <= 0)
		return "accel";
	path[n] = '\0';
	return path;
}

int accelp_cli_self_launch(const accel_cli_job *job, char **ret_output, int *ret_status,
                           int *ret_timed_out, char *why, size_t cap)
{
	const char *self = accelp_cli_self_path();
	char nbuf[16];
	const char *argv[256];
	size_t k = 0;
	int fds[2];
	char *out = NULL;
	size_t len = 0;
	int status = 0, timed_out = 0;

	snprintf(nbuf, sizeof(nbuf), "%d", job->nproc);
	argv[k++] = self;
	argv[k++] = "launch";
	argv[k++] = "-n";
	argv[k++] = nbuf;
	if (job->config) {
		argv[k++] = "--config";
		argv[k++] = job->config;
	}
	for (size_t i = 0; job->sets && job->sets[i] && k < 200; i++) {
		argv[k++] = "--set";
		argv[k++] = job->sets[i];
	}
	argv[k++] = "--";
	argv[k++] = self;
	for (size_t i = 0; job->worker && job->worker[i] && k < 254; i++)
		argv[k++] = job->worker[i];
	argv[k] = NULL;

	if (!(out = malloc(OUT_CAP + 1))) {
		snprintf(why, cap, "out of memory");
		return -1;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		snprintf(why, cap, "pipe: %s", strerror(errno));
		free(out);
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(why, cap, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		free(out);
		return -1;
	}
	if (pid == 0) {
		/* its own process group: a stop reaches the launcher's ranks too */
		setpgid(0, 0);
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		execv(self, (char *const *)argv);
		dprintf(STDERR_FILENO, "accel: cannot run %s: %s\n", self, strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	close(fds[1]);
	double deadline = mono() + job->timeout_s, kill_at = 0, give_up_at = 0;
	for (;;) {
		double now = mono();
		if (give_up_at && now >= give_up_at)
			break;   /* a rank outside the group still holds the pipe */
		if (!timed_out && now >= deadline) {
			timed_out = 1;
			kill(-pid, SIGTERM);
			kill_at = now + 5;
		} else if (timed_out && kill_at && now >= kill_at) {
			kill(-pid, SIGKILL);
			kill_at = 0;
			give_up_at = now + 2;
		}
		struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
		int r = poll(&pfd, 1, 200);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		char buf[4096];
		ssize_t n = read(fds[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;   /* every writer is gone */
		size_t take = (size_t)n;
		if (len + take > OUT_CAP)
			take = OUT_CAP - len;
		memcpy(out + len, buf, take);
		len += take;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	out[len] = '\0';
	*ret_output = out;
	*ret_status = WIFEXITED(status) ? WEXITSTATUS(status)
	              : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
	*ret_timed_out = timed_out;
	return 0;
}
