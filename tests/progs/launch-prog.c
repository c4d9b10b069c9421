/* SPDX-License-Identifier: MIT */
/* tests/progs/launch-prog.c: a rank program for the `accel launch` tests.
 *
 *   launch-prog env                 print the launcher's variables, open fds
 *   launch-prog lines N             N lines on stdout, one on stderr, then a
 *                                   last stdout line without '\n'
 *   launch-prog exit R C            rank R prints 12 lines and exits C after
 *                                   0.2 s; the others sleep 60 s
 *   launch-prog kill R              rank R prints a line and SIGKILLs itself
 *   launch-prog refuse R            rank R writes its reason on stderr, ignores
 *                                   SIGTERM and exits 2 after 0.6 s; rank R+1
 *                                   exits 2 after 0.2 s without a word (as a rank
 *                                   told of a problem by an all-reduce); the
 *                                   others sleep 60 s
 *   launch-prog stubborn R DIR      rank R exits 1 after 0.3 s; the others
 *                                   ignore SIGTERM and sleep 60 s
 *   launch-prog trap DIR            record SIGTERM in DIR/term-R and exit 0
 *   launch-prog sleep S             sleep S seconds, exit 0
 *   launch-prog touch FILE          create FILE
 *   launch-prog orphan DIR          leave a child behind (holding stdout) and
 *                                   exit 0; the child's pid is DIR/pid-R
 *   launch-prog flood N [R C [S]]   every rank but R writes N numbered lines
 *                                   (0: without end) into a 1 MiB stdout
 *                                   pipe and exits 0; rank R exits C after S
 *                                   seconds (default 0)
 *   launch-prog shmleft             create /dev/shm/accel-shm-<pid>-lt-0 (the
 *                                   shm backend's naming) and exit 1
 * Every mode that sleeps writes its pid to DIR/pid-R when DIR is given, so
 * the test can check that nothing outlived the launcher. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int rank;
static const char *dir;

static void nap(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) < 0)
		;
}

static void mark(const char *what)
{
	if (!dir)
		return;
	char path[4096], tmp[4200];
	snprintf(path, sizeof(path), "%s/%s-%d", dir, what, rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%ld\n", (long)getpid());
	fclose(f);
	rename(tmp, path);
}

static void on_term(int sig)
{
	(void)sig;
	mark("term");
	_exit(0);
}

static void show(const char *name)
{
	const char *v = getenv(name);
	printf("%s=", name);
	for (; v && *v; v++)
		putchar(*v == '\n' ? '|' : *v);
	printf("%s\n", v ? "" : "(unset)");
}

int main(int argc, char **argv)
{
	const char *r = getenv("ACCEL_RANK");
	rank = r ? atoi(r) : -1;
	if (argc < 2)
		return 64;
	const char *mode = argv[1];
	if (!strcmp(mode, "env")) {
		static const char *const names[] = {
			"ACCEL_RANK", "ACCEL_LOCAL_RANK", "ACCEL_WORLD_SIZE", "ACCEL_LOCAL_WORLD_SIZE",
			"ACCEL_NODE_RANK", "ACCEL_NUM_NODES", "ACCEL_MASTER_ADDR", "ACCEL_MASTER_PORT",
			"ACCEL_JOB_ID", "ACCEL_CONFIG", "ACCEL_SET", "RANK", "WORLD_SIZE", "LOCAL_RANK",
			"LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "INHERITED_VAR"};
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			show(names[i]);
		/* descriptors beyond 0-2 that the launcher let through */
		DIR *d = opendir("/proc/self/fd");
		printf("OPEN_FDS=");
		if (d) {
			struct dirent *e;
			while ((e = readdir(d)))
				if (e->d_name[0] != '.' && atoi(e->d_name) > 2 && atoi(e->d_name) != dirfd(d))
					printf("%s,", e->d_name);
			closedir(d);
		}
		printf("\nSTDIN_EOF=%d\n", (int)read(0, (char[1]){0}, 1) == 0);
		return 0;
	}
	if (!strcmp(mode, "lines") && argc > 2) {
		int n = atoi(argv[2]);
		for (int i = 0; i < n; i++)
			printf("line %d of rank %d\n", i, rank);
		fflush(stdout);
		fprintf(stderr, "err line of rank %d\n", rank);
		printf("partial-%d", rank);
		return 0;
	}
	if (!strcmp(mode, "exit") && argc > 3) {
		dir = argc > 4 ? argv[4] : NULL;
		mark("pid");
		if (rank == atoi(argv[2])) {
			for (int i = 0; i < 12; i++)
				printf("tail line %d\n", i);
			fflush(stdout);
			nap(0.2);
			return atoi(argv[3]);
		}
		nap(60);
		return 0;
	}
	if (!strcmp(mode, "refuse") && argc > 2) {
		if (rank == atoi(argv[2])) {
			signal(SIGTERM, SIG_IGN);
			fprintf(stderr, "refuse: --out /nonexistent/x: cannot write in /nonexistent\n");
			nap(0.6);
		} else if (rank == atoi(argv[2]) + 1) {
			nap(0.2);
		} else {
			nap(60);
			return 0;
		}
		return 2;
	}
	if (!strcmp(mode, "kill") && argc > 2) {
		dir = argc > 3 ? argv[3] : NULL;
		mark("pid");
		if (rank == atoi(argv[2])) {
			printf("about to die\n");
			fflush(stdout);
			nap(0.2);
			raise(SIGKILL);
		}
		nap(60);
		return 0;
	}
	if (!strcmp(mode, "stubborn") && argc > 3) {
		dir = argv[3];
		if (rank == atoi(argv[2])) {
			nap(0.3);
			return 1;
		}
		signal(SIGTERM, SIG_IGN);
		mark("pid");
		nap(60);
		return 0;
	}
	if (!strcmp(mode, "trap") && argc > 2) {
		dir = argv[2];
		signal(SIGTERM, on_term);
		mark("ready");
		nap(60);
		return 3;
	}
	if (!strcmp(mode, "sleep") && argc > 2) {
		nap(atof(argv[2]));
		return 0;
	}
	if (!strcmp(mode, "orphan") && argc > 2) {
		dir = argv[2];
		pid_t pid = fork();
		if (pid == 0) {
			mark("pid");
			nap(60);
			_exit(0);
		}
		nap(0.1);
		printf("parent of %ld done\n", (long)pid);
		return pid < 0;
	}
	if (!strcmp(mode, "flood") && argc > 2) {
		long n = atol(argv[2]);
		if (argc > 4 && rank == atoi(argv[3])) {
			if (argc > 5)
				nap(atof(argv[5]));
			return atoi(argv[4]);
		}
#ifdef F_SETPIPE_SZ
		fcntl(1, F_SETPIPE_SZ, 1 << 20); /* more than the launcher may hold back */
#endif
		for (long i = 0; n <= 0 || i < n; i++)
			printf("flood line %06ld of rank %d, padded to fifty bytes\n", i, rank);
		return 0;
	}
	if (!strcmp(mode, "shmleft")) {
		char name[64];
		snprintf(name, sizeof(name), "/accel-shm-%d-lt-0", (int)getpid());
		int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
		if (fd < 0)
			return 2;
		close(fd);
		printf("created %s\n", name);
		return 1;
	}
	if (!strcmp(mode, "touch") && argc > 2) {
		int fd = open(argv[2], O_WRONLY | O_CREAT, 0644);
		return fd < 0;
	}
	return 64;
}
