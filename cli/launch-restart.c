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
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

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

void accelp_launch_state_reset(const char *path)
{
	char zero[ACCELP_RESTART_PEER_LEN] = {0};
	_Static_assert(ACCELP_RESTART_PEER_LEN >= ACCELP_RESTART_STEP_LEN, "zero too short");
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t w = pwrite(fd, zero, ACCELP_RESTART_STEP_LEN, ACCELP_RESTART_STEP_OFF);
	w = pwrite(fd, zero, ACCELP_RESTART_PEER_LEN, ACCELP_RESTART_PEER_OFF);
	(void)w;
	close(fd);
}

void accelp_launch_state_peers(const char *path, unsigned char *marks, int n)
{
	memset(marks, 0, (size_t)n);
	if (n > ACCELP_RESTART_PEER_LEN)
		n = ACCELP_RESTART_PEER_LEN;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t r = pread(fd, marks, (size_t)n, ACCELP_RESTART_PEER_OFF);
	for (ssize_t i = 0; i < n; i++)
		marks[i] = i < r && marks[i] == '1';
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

/* The launcher's own stop signals while a filter runs: noted here, acted on
 * by the wait loop (the filter is in a process group of its own, so a
 * Ctrl-C at the terminal reaches only the launcher). */
static volatile sig_atomic_t filter_sig;

static void on_filter_signal(int sig)
{
	if (!filter_sig)
		filter_sig = sig;
}

static const int filter_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_FILTER_SIGNALS ((int)(sizeof(filter_signals) / sizeof(filter_signals[0])))

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int accelp_launch_filter(const char *cmd, int slot, int restart, const launch_result *res,
                         double timeout_s, int *ret_signal)
{
	char s_slot[16], s_restart[16], s_rank[16];
	snprintf(s_slot, sizeof(s_slot), "%d", slot);
	snprintf(s_restart, sizeof(s_restart), "%d", restart);
	snprintf(s_rank, sizeof(s_rank), "%d", res->failed_rank);
	fflush(stdout);
	fflush(stderr);
	/* Handlers before the fork, so that no signal falls between; exec
	 * gives the filter the default action back (ignored ones stay
	 * ignored, in both). */
	struct sigaction sa, old[N_FILTER_SIGNALS];
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_filter_signal;
	sigemptyset(&sa.sa_mask);
	filter_sig = 0;
	for (int k = 0; k < N_FILTER_SIGNALS; k++) {
		sigaction(filter_signals[k], NULL, &old[k]);
		if (old[k].sa_handler != SIG_IGN)
			sigaction(filter_signals[k], &sa, NULL);
	}
	int rc = ACCELP_FILTER_ERROR, e = 0;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		e = errno;
		goto out;
	}
	if (pid == 0) {
		setpgid(0, 0);
#ifdef __linux__
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
#endif
		(void)parent;
		/* not the terminal: a background process group reading it would
		 * stop (SIGTTIN) until the timeout */
		int dn = open("/dev/null", O_RDONLY);
		if (dn >= 0 && dn != 0) {
			dup2(dn, 0);
			close(dn);
		}
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
	setpgid(pid, pid); /* also here: whichever runs first wins the race */
	/* Poll the child every 10 ms: simpler than a SIGCHLD pipe, and a
	 * filter runs once per slot and restart. */
	double deadline = timeout_s > 0 ? mono_s() + timeout_s : 0;
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			rc = st;
			break;
		}
		if (r < 0 && errno != EINTR) {
			e = errno;
			break;
		}
		int late = deadline > 0 && mono_s() >= deadline;
		if (late || filter_sig) {
			/* the shell and whatever it started */
			if (kill(-pid, SIGKILL) < 0)
				kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			if (filter_sig) {
				*ret_signal = filter_sig;
				rc = ACCELP_FILTER_SIGNAL;
			} else {
				rc = ACCELP_FILTER_TIMEOUT;
			}
			break;
		}
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
out:
	for (int k = 0; k < N_FILTER_SIGNALS; k++)
		if (old[k].sa_handler != SIG_IGN)
			sigaction(filter_signals[k], &old[k], NULL);
	if (rc == ACCELP_FILTER_ERROR)
		errno = e;
	return rc;
}
