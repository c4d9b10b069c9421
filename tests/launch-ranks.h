/* SPDX-License-Identifier: MIT */
/* tests/launch-ranks.h: starting `accel launch` from a Check test and
 * reading what its ranks reported (tests/progs/comm-ranks.c writes
 * OUTDIR/<mode>-<rank>), and removing the test's temporary directory.
 * Check-based tests only. */
#ifndef ACCEL_TESTS_LAUNCH_RANKS_H
#define ACCEL_TESTS_LAUNCH_RANKS_H

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Fork and exec argv (argv[0] a path), stdout and stderr to the file log. */
static pid_t lr_spawn(const char *const *argv, const char *log)
{
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], (char *const *)argv);
		_exit(99);
	}
	return pid;
}

/* Its wait status, or -1 when it ran past limit_s (then TERM, 6 s, KILL). */
static int lr_reap(pid_t pid, int limit_s)
{
	time_t deadline = time(NULL) + limit_s;
	int status;
	for (;;) {
		pid_t p = waitpid(pid, &status, WNOHANG);
		if (p == pid)
			return status;
		if (time(NULL) > deadline) {
			kill(pid, SIGTERM);
			sleep(6);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(20000);
	}
}

/* The start of file `path` (up to cap - 1 bytes) into buf, NUL-ended; -1
 * (and an empty buf) when it cannot be opened. */
static int lr_read_file(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		buf[0] = '\0';
		return -1;
	}
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	return 0;
}

static void lr_print_log(const char *path)
{
	char buf[8192];
	if (lr_read_file(path, buf, sizeof(buf)) == 0)
		fprintf(stderr, "--- %s ---\n%s\n---\n", path, buf);
}

/* OUTDIR/<mode>-<rank> into buf; -1 when there is none. */
static int lr_read_report(const char *dir, const char *mode, int rank, char *buf, size_t cap)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s-%d", dir, mode, rank);
	return lr_read_file(path, buf, cap);
}

static int lr_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

/* Remove a test's temporary directory and everything below it. */
static void lr_rm_tree(const char *root)
{
	nftw(root, lr_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
