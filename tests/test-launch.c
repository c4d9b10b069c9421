/* SPDX-License-Identifier: MIT */
/* tests/test-launch.c: `accel launch` end to end, running $ACCEL_CLI with
 * the little programs in tests/progs/: environment, output prefixes, log
 * files, exit codes, failure handling and its timing, signal forwarding,
 * bad usage, and the store reached from launched ranks. */
#include <check.h>
#include <errno.h>
#include <glob.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef LAUNCH_PROGS_DIR
#error "LAUNCH_PROGS_DIR must name the build directory of tests/progs"
#endif

static char prog[4096], store_prog[4096];
/* A signal the next start() has the launcher begin with ignored (nohup). */
static int start_ignoring;
/* finish() pauses this long after each read of stdout (a slow reader). */
static int slow_read_us;

static const char *cli(void)
{
	const char *c = getenv("ACCEL_CLI");
	ck_assert_msg(c && *c, "ACCEL_CLI is not set (run through meson test)");
	return c;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct run {
	pid_t pid;
	int out_fd, err_fd;
	char *out, *err;
	size_t out_len, err_len;
	int status;   /* exit code, or 128+signal */
	double secs;
	double t0;
} run;

/* Start `accel launch ARGS...` (argv after "launch", NULL-terminated). */
static void start(run *r, const char *const *args)
{
	const char *argv[64];
	int n = 0;
	argv[n++] = cli();
	argv[n++] = "launch";
	for (; *args && n < 62; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	int o[2], e[2];
	ck_assert_int_eq(pipe2(o, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(e, O_CLOEXEC), 0);
	memset(r, 0, sizeof(*r));
	r->t0 = now_s();
	r->pid = fork();
	ck_assert_int_ge(r->pid, 0);
	if (r->pid == 0) {
		dup2(o[1], 1);
		dup2(e[1], 2);
		/* only 0-2 go to the launcher, so the ranks' OPEN_FDS shows its leaks */
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		/* the launcher keeps a signal it inherits ignored (nohup): start
		 * it with the ones the tests send at their default, whatever the
		 * test runner was started with */
		int sigs[] = {SIGHUP, SIGINT, SIGTERM};
		for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++)
			signal(sigs[k], sigs[k] == start_ignoring ? SIG_IGN : SIG_DFL);
		execv(argv[0], (char *const *)argv);
		_exit(99);
	}
	close(o[1]);
	close(e[1]);
	r->out_fd = o[0];
	r->err_fd = e[0];
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	ck_assert_ptr_nonnull(*buf);
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* Read both outputs to EOF and reap; bounded by `limit_s`. */
static void finish(run *r, double limit_s)
{
	struct pollfd pf[2] = {{.fd = r->out_fd, .events = POLLIN}, {.fd = r->err_fd, .events = POLLIN}};
	append(&r->out, &r->out_len, "", 0);
	append(&r->err, &r->err_len, "", 0);
	while (pf[0].fd >= 0 || pf[1].fd >= 0) {
		int left = (int)((r->t0 + limit_s - now_s()) * 1000);
		ck_assert_msg(left > 0, "accel launch still running after %.0f s; stderr so far:\n%s",
		              limit_s, r->err);
		if (poll(pf, 2, left) < 0 && errno != EINTR)
			ck_abort_msg("poll: %s", strerror(errno));
		for (int k = 0; k < 2; k++) {
			if (pf[k].fd < 0 || !(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char buf[8192];
			ssize_t n = read(pf[k].fd, buf, sizeof(buf));
			if (n > 0) {
				if (k == 0 && slow_read_us)
					usleep((useconds_t)slow_read_us);
				if (k == 0)
					append(&r->out, &r->out_len, buf, (size_t)n);
				else
					append(&r->err, &r->err_len, buf, (size_t)n);
			} else if (n == 0 || errno != EINTR) {
				close(pf[k].fd);
				pf[k].fd = -1;
			}
		}
	}
	int st;
	ck_assert_int_eq(waitpid(r->pid, &st, 0), r->pid);
	r->secs = now_s() - r->t0;
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void launch(run *r, const char *const *args)
{
	start(r, args);
	finish(r, 30);
}

static void run_free(run *r)
{
	free(r->out);
	free(r->err);
}

#define HAS(hay, needle) \
	ck_assert_msg(strstr((hay), (needle)) != NULL, "expected '%s' in:\n%s", (needle), (hay))
#define HASNT(hay, needle) \
	ck_assert_msg(strstr((hay), (needle)) == NULL, "did not expect '%s' in:\n%s", (needle), (hay))

static char *tmpdir(void)
{
	char *d = strdup("/tmp/accel-launch-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

static int file_exists(const char *dir, const char *name)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* Remove a directory from tmpdir() and free its name. */
static void tmpdir_free(char *d)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	ck_assert_int_eq(system(cmd), 0);
	free(d);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	char *buf = calloc(1, 1 << 16);
	size_t n = fread(buf, 1, (1 << 16) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* The pids recorded as DIR/pid-R must all be gone (no process outlives the
 * launcher). */
static void assert_all_gone(const char *dir, int n)
{
	for (int r = 0; r < n; r++) {
		char p[4096];
		snprintf(p, sizeof(p), "%s/pid-%d", dir, r);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		long pid = 0;
		ck_assert_int_eq(fscanf(f, "%ld", &pid), 1);
		fclose(f);
		/* gone, or a zombie waiting for its new parent (an orphan's) */
		int alive = 1;
		for (int tries = 0; tries < 100 && alive; tries++) {
			alive = kill((pid_t)pid, 0) == 0;
			if (alive) {
				char sp[64], st[512] = "";
				snprintf(sp, sizeof(sp), "/proc/%ld/stat", pid);
				FILE *sf = fopen(sp, "r");
				if (sf) {
					if (!fgets(st, sizeof(st), sf))
						st[0] = '\0';
					fclose(sf);
				}
				const char *rp = strrchr(st, ')');
				if (rp && rp[1] == ' ' && rp[2] == 'Z')
					alive = 0;
				else
					usleep(20000);
			}
		}
		ck_assert_msg(!alive, "process %ld (rank %d) outlived the launcher", pid, r);
	}
}

/* The value of "[rank R] NAME=" in out. */
static char *value_of(const char *out, int rank, const char *name)
{
	char key[128];
	snprintf(key, sizeof(key), "[rank %d] %s=", rank, name);
	const char *p = strstr(out, key);
	ck_assert_msg(p != NULL, "no %s in:\n%s", key, out);
	p += strlen(key);
	size_t n = strcspn(p, "\n");
	return strndup(p, n);
}

/* ---- usage ------------------------------------------------------------------- */

START_TEST(help)
{
	run r;
	launch(&r, (const char *[]){"--help", NULL});
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "Usage: accel launch [OPTIONS] [--] PROGRAM [ARGS...]");
	HAS(r.out, "--grace-s");
	HAS(r.out, "Exit status:");
	run_free(&r);
}
END_TEST

static void expect_usage(const char *const *args, const char *msg)
{
	run r;
	launch(&r, args);
	ck_assert_msg(r.status == 2, "exit %d for %s; stderr:\n%s", r.status, msg, r.err);
	HAS(r.err, msg);
	HAS(r.err, "Try 'accel launch --help'.");
	ck_assert_str_eq(r.out, "");
	run_free(&r);
}

START_TEST(bad_usage)
{
	expect_usage((const char *[]){"-n", "0", "--", prog, "env", NULL},
	             "accel launch: -n/--nproc-per-node '0': expected a whole number of processes");
	expect_usage((const char *[]){"-n", "two", prog, NULL}, "-n/--nproc-per-node 'two'");
	expect_usage((const char *[]){"-n", "2", NULL}, "no PROGRAM given");
	expect_usage((const char *[]){"-n", "2", "--", NULL}, "no PROGRAM given");
	expect_usage((const char *[]){"--master-port", "70000", prog, NULL},
	             "--master-port '70000': expected a port number, 1..65535");
	expect_usage((const char *[]){"--master-port=0", prog, NULL}, "--master-port '0'");
	expect_usage((const char *[]){"--frobnicate", prog, NULL}, "unknown option '--frobnicate'");
	expect_usage((const char *[]){"--nnodes", "2", "--master-addr", "h", "--master-port", "5",
	                              prog, NULL},
	             "--node-rank is required with --nnodes 2");
	expect_usage((const char *[]){"--nnodes", "2", "--node-rank", "1", "--master-port", "5",
	                              prog, NULL},
	             "--master-addr is required with --nnodes > 1");
	expect_usage((const char *[]){"--nnodes", "2", "--node-rank", "1", "--master-addr", "h",
	                              prog, NULL},
	             "--master-port is required with --nnodes > 1");
	expect_usage((const char *[]){"--nnodes", "2", "--node-rank", "2", "--master-addr", "h",
	                              "--master-port", "5", prog, NULL},
	             "--node-rank 2 is not below --nnodes 2");
	expect_usage((const char *[]){"--config", "/nonexistent/x.json", prog, NULL},
	             "--config '/nonexistent/x.json': No such file or directory");
	expect_usage((const char *[]){"--config", "/", prog, NULL}, "--config '/': not a regular file");
	expect_usage((const char *[]){"--set", "novalue", prog, NULL},
	             "--set 'novalue': expected KEY=VALUE");
	expect_usage((const char *[]){"--grace-s", "-1", prog, NULL}, "--grace-s '-1'");
	expect_usage((const char *[]){"--job-id", "a/b", prog, NULL}, "--job-id 'a/b'");
	expect_usage((const char *[]){"--log-dir", NULL}, "option '--log-dir' needs a value");
}
END_TEST

/* The option table (cli/launch-args.c) treats every option alike: each row
 * is one kind of edge, and the message names the option and its value. */
START_TEST(option_edges)
{
	static const struct {
		const char *args[6];
		const char *msg;
	} rows[] = {
		/* a value that is not a number, or out of range, for each kind */
		{{"-nfour", "P"}, "-n/--nproc-per-node 'four': expected a whole number of processes"},
		{{"-n=3", "P"}, "-n/--nproc-per-node '=3'"},
		{{"-n", "1025", "P"}, "-n/--nproc-per-node '1025': expected a whole number of processes, "
		                      "1..1024"},
		{{"--nnodes=0", "P"}, "--nnodes '0': expected a whole number of nodes, 1..65536"},
		{{"--node-rank", "-1", "P"}, "--node-rank '-1': expected a node index, 0..65535"},
		{{"--master-port", "12x", "P"}, "--master-port '12x': expected a port number, 1..65535"},
		{{"--max-restarts", "1000001", "P"}, "--max-restarts '1000001': expected a whole number "
		                                     "of restarts, 0..1000000"},
		{{"--min-nproc", "0", "P"}, "--min-nproc '0': expected a whole number of processes, "
		                            "1..1024"},
		{{"--min-nodes", "", "P"}, "--min-nodes '': expected a whole number of nodes, 1..65536"},
		{{"--grace-s=abc", "P"}, "--grace-s 'abc': expected seconds, 0..3600"},
		{{"--grace-s", "3601", "P"}, "--grace-s '3601': expected seconds, 0..3600"},
		{{"--restart-filter-timeout", "0.05", "P"}, "--restart-filter-timeout '0.05': expected "
		                                            "seconds, 0.1..86400"},
		/* strings: checked, or refused when empty */
		{{"--master-addr", "a b", "P"}, "--master-addr 'a b': expected a host name or IP address"},
		{{"--master-addr=", "P"}, "--master-addr '': expected a host name or IP address"},
		{{"--job-id", "", "P"}, "--job-id '': use 1..63 characters of [A-Za-z0-9._-]"},
		{{"--set", "=v", "P"}, "--set '=v': expected KEY=VALUE"},
		{{"--set", "a=1\nb=2", "P"}, "a value cannot contain a newline"},
		{{"--log-dir=", "P"}, "--log-dir: empty directory name"},
		{{"--restart-filter", "", "P"}, "--restart-filter: empty command"},
		/* a missing value, as the option was written */
		{{"-n"}, "option '-n' needs a value"},
		{{"--nproc-per-node"}, "option '--nproc-per-node' needs a value"},
		{{"--restart-filter-timeout"}, "option '--restart-filter-timeout' needs a value"},
		{{"--set"}, "option '--set' needs a value"},
		/* a value given to an option that takes none */
		{{"--tee=1", "P"}, "option '--tee' takes no value (got '--tee=1')"},
		{{"--dry-run=yes", "P"}, "option '--dry-run' takes no value"},
		{{"--help=1"}, "option '--help' takes no value"},
		/* unknown: no prefix matching, no short form that is not there */
		{{"-x", "P"}, "unknown option '-x'"},
		{{"-h5"}, "unknown option '-h5'"},
		{{"--nproc", "2", "P"}, "unknown option '--nproc'"},
		{{"--restart-filter-timeou=5", "P"}, "unknown option '--restart-filter-timeou=5'"},
		/* options checked against each other */
		{{"--restart-filter-timeout", "5", "P"}, "--restart-filter-timeout applies to "
		                                         "--restart-filter"},
		{{"--min-nproc", "1", "P"}, "--min-nproc applies to restarts"},
		/* `--` ends the options; nothing after it is PROGRAM */
		{{"--dry-run", "--"}, "no PROGRAM given"},
		{{"--", ""}, "PROGRAM is an empty string"},
	};
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		const char *args[7] = {0}; /* "P": PROGRAM (tests/progs/launch-prog) */
		for (int a = 0; a < 6 && rows[k].args[a]; a++)
			args[a] = !strcmp(rows[k].args[a], "P") ? prog : rows[k].args[a];
		expect_usage(args, rows[k].msg);
	}
}
END_TEST

/* Every option is in --help with the value it takes, and `--` lets PROGRAM
 * (or an argument of it) look like an option. */
START_TEST(help_lists_every_option)
{
	static const char *const lines[] = {
		"\n  -n, --nproc-per-node N  processes on this node (default 1)\n",
		"\n      --nnodes M          ", "\n      --node-rank R       ",
		"\n      --master-addr A     ", "\n      --master-port P     ",
		"\n      --job-id ID         ", "\n      --config F          ",
		"\n      --set KEY=VALUE     ", "\n      --tee               ",
		"\n      --log-dir D         ", "\n      --grace-s S         ",
		"\n      --max-restarts N    ", "\n      --min-nproc M       ",
		"\n      --min-nodes K       ", "\n      --restart-filter CMD  before",
		"\n      --restart-filter-timeout S  seconds CMD may take (default 60); past it\n"
		"                          its process group is killed and the job does not\n"
		"                          restart\n",
		"\n      --dry-run           ", "\n  -h, --help              show this help\n",
	};
	run r;
	launch(&r, (const char *[]){"-h", NULL});
	ck_assert_int_eq(r.status, 0);
	for (size_t k = 0; k < sizeof(lines) / sizeof(lines[0]); k++)
		HAS(r.out, lines[k]);
	run_free(&r);

	launch(&r, (const char *[]){"--dry-run", "--job-id", "j", "--master-port", "5000", "--",
	                            "--help", "-n", "2", NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	HAS(r.out, "dry run: 1 process on node 0 of 1");
	HAS(r.out, "  command: --help -n 2\n");
	HASNT(r.out, "Usage:");
	run_free(&r);
}
END_TEST

/* ---- environment --------------------------------------------------------- */

START_TEST(environment)
{
	char *d = tmpdir();
	char cfg[4200];
	snprintf(cfg, sizeof(cfg), "%s/c.json", d);
	FILE *f = fopen(cfg, "w");
	fputs("{}\n", f);
	fclose(f);
	/* a relative --config path becomes absolute */
	ck_assert_int_eq(chdir(d), 0);
	setenv("INHERITED_VAR", "kept", 1);
	setenv("ACCEL_RANK", "77", 1); /* stale values from outside are replaced */
	run r;
	launch(&r, (const char *[]){"-n", "3", "--config", "c.json", "--set", "a=1", "--set",
	                            "zero.stage=3", "--", prog, "env", NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	char *port0 = value_of(r.out, 0, "ACCEL_MASTER_PORT");
	char *job0 = value_of(r.out, 0, "ACCEL_JOB_ID");
	int port = atoi(port0);
	ck_assert_int_gt(port, 0);
	ck_assert_int_le(port, 65535);
	ck_assert_uint_ge(strlen(job0), 8);
	char cfg_real[4200];
	ck_assert_ptr_nonnull(realpath(cfg, cfg_real));
	for (int k = 0; k < 3; k++) {
		char want[16];
		snprintf(want, sizeof(want), "%d", k);
		struct {
			const char *name, *value;
		} ex[] = {
			{"ACCEL_RANK", want},          {"ACCEL_LOCAL_RANK", want},
			{"ACCEL_WORLD_SIZE", "3"},     {"ACCEL_LOCAL_WORLD_SIZE", "3"},
			{"ACCEL_NODE_RANK", "0"},      {"ACCEL_NUM_NODES", "1"},
			{"ACCEL_MASTER_ADDR", "127.0.0.1"}, {"ACCEL_MASTER_PORT", port0},
			{"ACCEL_JOB_ID", job0},        {"ACCEL_CONFIG", cfg_real},
			{"ACCEL_SET", "a=1|zero.stage=3"}, {"RANK", want},
			{"WORLD_SIZE", "3"},           {"LOCAL_RANK", want},
			{"LOCAL_WORLD_SIZE", "3"},     {"MASTER_ADDR", "127.0.0.1"},
			{"MASTER_PORT", port0},        {"INHERITED_VAR", "kept"},
			{"OPEN_FDS", ""},              {"STDIN_EOF", "1"},
		};
		for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
			char *v = value_of(r.out, k, ex[i].name);
			ck_assert_msg(!strcmp(v, ex[i].value), "rank %d: %s='%s', want '%s'", k,
			              ex[i].name, v, ex[i].value);
			free(v);
		}
	}
	run_free(&r);
	/* two launches get different job ids; no --set, no ACCEL_SET */
	run r2;
	launch(&r2, (const char *[]){"--", prog, "env", NULL});
	ck_assert_int_eq(r2.status, 0);
	char *j2 = value_of(r2.out, 0, "ACCEL_JOB_ID");
	char *s2 = value_of(r2.out, 0, "ACCEL_SET");
	ck_assert_str_ne(j2, job0);
	ck_assert_str_eq(s2, "(unset)");
	free(j2);
	free(s2);
	free(port0);
	free(job0);
	run_free(&r2);
	unlink(cfg);
	rmdir(d);
	free(d);
}
END_TEST

START_TEST(dry_run_multi_node)
{
	char *d = tmpdir();
	char marker[4200];
	snprintf(marker, sizeof(marker), "%s/started", d);
	run a, b;
	launch(&a, (const char *[]){"--dry-run", "--nnodes", "2", "--node-rank", "1", "-n", "2",
	                            "--master-addr", "10.0.0.1", "--master-port", "29500", "--set",
	                            "x=1", "--set", "y=two words", "--", prog, "touch", marker,
	                            NULL});
	ck_assert_msg(a.status == 0, "exit %d:\n%s", a.status, a.err);
	HAS(a.out, "accel launch: dry run: 2 processes on node 1 of 2, world size 4");
	HAS(a.out, "rank 2:\n  ACCEL_RANK=2\n  ACCEL_LOCAL_RANK=0\n  ACCEL_WORLD_SIZE=4\n"
	           "  ACCEL_LOCAL_WORLD_SIZE=2\n  ACCEL_NODE_RANK=1\n  ACCEL_NUM_NODES=2\n"
	           "  ACCEL_MASTER_ADDR=10.0.0.1\n  ACCEL_MASTER_PORT=29500\n");
	HAS(a.out, "rank 3:\n  ACCEL_RANK=3\n  ACCEL_LOCAL_RANK=1\n");
	HAS(a.out, "  ACCEL_SET=$'x=1\\ny=two words'\n");
	HAS(a.out, "  RANK=3\n  WORLD_SIZE=4\n  LOCAL_RANK=1\n");
	char cmd[8400];
	snprintf(cmd, sizeof(cmd), "  command: %s touch %s\n", prog, marker);
	HAS(a.out, cmd);
	HASNT(a.out, "rank 0:");
	ck_assert(!file_exists(d, "started")); /* nothing ran */
	/* node 0 derives the same job id from the master address and port */
	launch(&b, (const char *[]){"--dry-run", "--nnodes", "2", "--node-rank", "0", "-n", "2",
	                            "--master-addr", "10.0.0.1", "--master-port", "29500", "--",
	                            prog, "env", NULL});
	ck_assert_int_eq(b.status, 0);
	const char *ja = strstr(a.out, "ACCEL_JOB_ID="), *jb = strstr(b.out, "ACCEL_JOB_ID=");
	ck_assert_ptr_nonnull(ja);
	ck_assert_ptr_nonnull(jb);
	ck_assert_int_eq(strcspn(ja, "\n"), strcspn(jb, "\n"));
	ck_assert_int_eq(strncmp(ja, jb, strcspn(ja, "\n")), 0);
	HAS(b.out, "rank 0:\n  ACCEL_RANK=0\n");
	run_free(&a);
	run_free(&b);
	/* accel variables the ranks inherit unchanged are shown too; those the
	 * launcher sets are not listed twice */
	setenv("ACCEL_LOG_LEVEL", "debug", 1);
	setenv("ACCEL_RANK", "7", 1);
	launch(&a, (const char *[]){"--dry-run", "-n", "1", "--", prog, "env", NULL});
	unsetenv("ACCEL_LOG_LEVEL");
	unsetenv("ACCEL_RANK");
	ck_assert_int_eq(a.status, 0);
	const char *inh = strstr(a.out, "inherited by every rank:\n"), *r0 = strstr(a.out, "rank 0:\n"),
	           *ll = strstr(a.out, "\n  ACCEL_LOG_LEVEL=debug\n");
	ck_assert_msg(inh && r0 && ll && inh < ll && ll < r0, "no inherited ACCEL_LOG_LEVEL:\n%s",
	              a.out);
	HASNT(a.out, "ACCEL_RANK=7");
	run_free(&a);
	rmdir(d);
	free(d);
}
END_TEST

/* ---- output ---------------------------------------------------------------- */

START_TEST(line_prefixes)
{
	run r;
	launch(&r, (const char *[]){"-n", "2", "--", prog, "lines", "3", NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	for (int k = 0; k < 2; k++) {
		char want[128];
		for (int i = 0; i < 3; i++) {
			snprintf(want, sizeof(want), "[rank %d] line %d of rank %d\n", k, i, k);
			HAS(r.out, want);
		}
		snprintf(want, sizeof(want), "[rank %d] partial-%d\n", k, k); /* flushed at exit */
		HAS(r.out, want);
		snprintf(want, sizeof(want), "[rank %d] err line of rank %d\n", k, k);
		HAS(r.err, want);
		HASNT(r.out, "err line");
	}
	/* every stdout line is whole and prefixed */
	int lines = 0;
	for (const char *p = r.out; *p; lines++) {
		ck_assert_msg(!strncmp(p, "[rank ", 6), "unprefixed line: %.40s", p);
		const char *nl = strchr(p, '\n');
		ck_assert_ptr_nonnull(nl);
		p = nl + 1;
	}
	ck_assert_int_eq(lines, 8);
	run_free(&r);
}
END_TEST

START_TEST(log_dir_and_tee)
{
	char *d = tmpdir();
	char logs[4200];
	snprintf(logs, sizeof(logs), "%s/logs/sub", d); /* created with parents */
	run r;
	launch(&r, (const char *[]){"-n", "2", "--log-dir", logs, "--", prog, "lines", "2", NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	ck_assert_str_eq(r.out, ""); /* only launcher messages, on stderr */
	HAS(r.err, "accel launch: writing rank output to");
	HASNT(r.err, "[rank");
	for (int k = 0; k < 2; k++) {
		char path[4300], want[128];
		snprintf(path, sizeof(path), "%s/rank-%d.log", logs, k);
		char *log = read_file(path);
		snprintf(want, sizeof(want), "line 0 of rank %d\nline 1 of rank %d\n", k, k);
		HAS(log, want);
		snprintf(want, sizeof(want), "err line of rank %d\n", k);
		HAS(log, want);
		snprintf(want, sizeof(want), "partial-%d\n", k);
		HAS(log, want);
		HASNT(log, "[rank");
		free(log);
	}
	run_free(&r);
	/* --tee: the terminal gets prefixed lines and the files are written */
	char tee[4200];
	snprintf(tee, sizeof(tee), "%s/tee", d);
	launch(&r, (const char *[]){"-n", "2", "--tee", "--log-dir", tee, "--", prog, "lines", "1",
	                            NULL});
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "[rank 1] line 0 of rank 1\n");
	char path[4300];
	snprintf(path, sizeof(path), "%s/rank-1.log", tee);
	char *log = read_file(path);
	HAS(log, "line 0 of rank 1\n");
	free(log);
	run_free(&r);
	/* --tee alone writes under ./accel-logs/<job id>/ */
	char cwd[4200];
	ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
	ck_assert_int_eq(chdir(d), 0);
	launch(&r, (const char *[]){"-n", "2", "--tee", "--", prog, "lines", "1", NULL});
	ck_assert_int_eq(chdir(cwd), 0);
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	HAS(r.out, "[rank 0] line 0 of rank 0\n");
	HAS(r.err, "accel launch: writing rank output to accel-logs/");
	char pat[4300];
	snprintf(pat, sizeof(pat), "%s/accel-logs/*/rank-0.log", d);
	glob_t gl;
	ck_assert_msg(glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc == 1, "no %s", pat);
	log = read_file(gl.gl_pathv[0]);
	HAS(log, "line 0 of rank 0\n");
	free(log);
	globfree(&gl);
	run_free(&r);
	/* an unwritable log directory is refused before anything starts */
	launch(&r, (const char *[]){"--log-dir", "/proc/forbidden/x", "--", prog, "env", NULL});
	ck_assert_int_eq(r.status, 1);
	HAS(r.err, "accel launch: cannot create the log directory '/proc/forbidden/x'");
	ck_assert_str_eq(r.out, "");
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

/* ---- exit codes and failures ----------------------------------------------- */

START_TEST(all_succeed)
{
	run r;
	launch(&r, (const char *[]){"-n", "4", "--", prog, "sleep", "0.1", NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	ck_assert_str_eq(r.err, "");
	run_free(&r);
}
END_TEST

START_TEST(one_rank_exits_3)
{
	char *d = tmpdir();
	run r;
	launch(&r, (const char *[]){"-n", "3", "--", prog, "exit", "2", "3", d, NULL});
	ck_assert_msg(r.status == 1, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 2 failed: exit code 3\n");
	HAS(r.err, "accel launch: stopping the other 2 ranks (SIGTERM, then SIGKILL after 5 s)\n");
	HAS(r.err, "accel launch: last 10 lines of rank 2:\n  [rank 2] tail line 2\n");
	HAS(r.err, "  [rank 2] tail line 11\n");
	HASNT(r.err, "  [rank 2] tail line 1\n");
	/* the others were stopped by SIGTERM, not reported as failures */
	HASNT(r.err, "rank 0 failed");
	HASNT(r.err, "rank 1 failed");
	HASNT(r.err, "did not stop within"); /* ... without needing SIGKILL */
	ck_assert_msg(r.secs < 5.0, "took %.2f s; the others sleep 60 s", r.secs);
	assert_all_gone(d, 3);
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

/* Shared memory that a rank created under the shm backend's naming
 * (accel-shm-<its pid>-...) and the job left behind is removed by the
 * launcher once every rank has exited; a name of another pid is not. */
START_TEST(leftover_shared_memory_is_removed)
{
	int other = shm_open("/accel-shm-1-lt-0", O_CREAT | O_RDWR, 0600);
	ck_assert_int_ge(other, 0);
	close(other);
	run r;
	launch(&r, (const char *[]){"-n", "1", "--", prog, "shmleft", NULL});
	ck_assert_msg(r.status == 1, "exit %d:\n%s", r.status, r.err);
	const char *c = strstr(r.out, "created /accel-shm-");
	ck_assert_msg(c != NULL, "%s", r.out);
	int pid = atoi(c + strlen("created /accel-shm-"));
	char want[200], path[100];
	snprintf(path, sizeof(path), "/dev/shm/accel-shm-%d-lt-0", pid);
	snprintf(want, sizeof(want), "accel launch: removed %s, shared memory that rank 0 created and "
	         "the job left behind\n", path);
	HAS(r.err, want);
	ck_assert_msg(access(path, F_OK) != 0, "%s is still there", path);
	ck_assert_msg(access("/dev/shm/accel-shm-1-lt-0", F_OK) == 0, "removed another pid's name");
	shm_unlink("/accel-shm-1-lt-0");
	run_free(&r);
}
END_TEST

/* Run `accel launch -n 2 -- PROG ARGS | head -n 1` through the shell (the
 * launcher's stderr dropped); expect the launcher to end with SIGPIPE's
 * status within limit_s. */
static void closed_stdout_case(const char *prog_args, double limit_s, const char *why_slow)
{
	char *d = tmpdir();
	const char *cli = getenv("ACCEL_CLI");
	char cmd[9000], stf[4200];
	snprintf(stf, sizeof(stf), "%s/status", d);
	snprintf(cmd, sizeof(cmd), "( timeout 30 '%s' launch -n 2 -- '%s' %s "
	         "2>/dev/null; echo $? > '%s' ) | head -n 1 > /dev/null", cli, prog, prog_args, stf);
	double t0 = now_s();
	ck_assert_int_eq(system(cmd), 0);
	double secs = now_s() - t0;
	FILE *f = fopen(stf, "r");
	ck_assert_ptr_nonnull(f);
	int st = -1;
	ck_assert_int_eq(fscanf(f, "%d", &st), 1);
	fclose(f);
	ck_assert_msg(st == 128 + SIGPIPE, "launch exited %d, expected %d (SIGPIPE)", st,
	              128 + SIGPIPE);
	ck_assert_msg(secs < limit_s, "took %.1f s%s", secs, why_slow);
	tmpdir_free(d);
}

/* `accel launch ... | head -n 1`: once our stdout is a closed pipe, a rank
 * still writing gets SIGPIPE, as it would writing to that pipe itself, and
 * the job ends instead of running on with its output dropped. */
START_TEST(closed_stdout_pipe_ends_the_job)
{
	closed_stdout_case("lines 1000000000", 10.0, "");
}
END_TEST

/* The launcher's CPU time so far (user + system), in seconds. */
static double cpu_of(pid_t pid)
{
	char p[64], st[1024] = "";
	snprintf(p, sizeof(p), "/proc/%ld/stat", (long)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0.0;
	if (!fgets(st, sizeof(st), f))
		st[0] = '\0';
	fclose(f);
	const char *rp = strrchr(st, ')');
	unsigned long ut = 0, stime = 0;
	/* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (!rp || sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
	                  &stime) != 2)
		return 0.0;
	return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The launcher's stdout is a pipe nobody reads (a pager left on its first
 * page): a rank that fails after the pipe filled is still reported and the
 * others stopped at once, not when the reader wakes up; and the launcher
 * waits for the reader without spinning. */
START_TEST(stalled_stdout_does_not_stall_the_launcher)
{
	run r;
	start(&r, (const char *[]){"-n", "2", "--grace-s", "0.2", "--", prog, "flood", "0", "1",
	                           "3", "1", NULL});
	append(&r.err, &r.err_len, "", 0);
	while (!strstr(r.err, "stopping the other 1 rank")) {
		int left = (int)((r.t0 + 10.0 - now_s()) * 1000);
		ck_assert_msg(left > 0, "no failure report within 10 s while stdout was not read; "
		              "stderr so far:\n%s", r.err);
		struct pollfd pf = {.fd = r.err_fd, .events = POLLIN};
		if (poll(&pf, 1, left) <= 0)
			continue;
		char buf[4096];
		ssize_t n = read(r.err_fd, buf, sizeof(buf));
		ck_assert_msg(n > 0, "stderr closed early:\n%s", r.err);
		append(&r.err, &r.err_len, buf, (size_t)n);
	}
	ck_assert_msg(now_s() - r.t0 < 6.0, "reported after %.1f s", now_s() - r.t0);
	/* every rank has gone; the launcher waits for its reader, idle */
	usleep(300000);
	double c0 = cpu_of(r.pid);
	usleep(1000000);
	double used = cpu_of(r.pid) - c0;
	ck_assert_msg(used < 0.5, "the launcher used %.2f s of CPU in 1 s while waiting", used);
	finish(&r, 30);
	ck_assert_msg(r.status == 1, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 1 failed: exit code 3\n");
	HAS(r.out, "[rank 0] flood line 000000 of rank 0");
	run_free(&r);
}
END_TEST

static int count_of(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* Ranks that exit with much output still in their pipes (more than the
 * launcher's stdout takes while its reader is slow): every line arrives,
 * however long the reader takes, and nothing is mistaken for a leftover
 * process holding the pipes. */
START_TEST(output_left_in_the_pipes_is_delivered)
{
	run r;
	start(&r, (const char *[]){"-n", "2", "--", prog, "flood", "15000", NULL});
	usleep(1000000); /* longer than the launcher lingers for leftover processes */
	slow_read_us = 5000; /* and then slowly: about 2 s for the 1.5 MB */
	finish(&r, 30);
	slow_read_us = 0;
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	ck_assert_int_eq(count_of(r.out, "[rank 0] flood line "), 15000);
	ck_assert_int_eq(count_of(r.out, "[rank 1] flood line "), 15000);
	HAS(r.out, "[rank 1] flood line 014999 of rank 1");
	HASNT(r.err, "still hold its output");
	run_free(&r);
}
END_TEST

/* One rank exits 0 at once (the launcher starts a child to tell the store)
 * and the launcher's stdout is closed (| head): the flooding rank dies of
 * SIGPIPE promptly; the reporting child does not keep its pipe open. */
START_TEST(closed_stdout_after_an_early_exit)
{
	closed_stdout_case("flood 0 1 0", 5.0, " (the reporter holds the pipe for 10 s)");
}
END_TEST

/* A log file that cannot be written (a full disk) is reported and fails
 * the launch; the other rank's log is complete. */
START_TEST(log_write_failure_is_reported)
{
	char *d = tmpdir();
	char logs[4200], link[4300];
	snprintf(logs, sizeof(logs), "%s/logs", d);
	ck_assert_int_eq(mkdir(logs, 0755), 0);
	snprintf(link, sizeof(link), "%s/rank-0.log", logs);
	ck_assert_int_eq(symlink("/dev/full", link), 0);
	run r;
	launch(&r, (const char *[]){"-n", "2", "--log-dir", logs, "--", prog, "lines", "3", NULL});
	ck_assert_msg(r.status == 1, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: writing the log of rank 0 (");
	HAS(r.err, "No space left on device");
	HASNT(r.err, "log of rank 1");
	snprintf(link, sizeof(link), "%s/rank-1.log", logs);
	char *log = read_file(link);
	HAS(log, "line 2 of rank 1\n");
	free(log);
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

/* The state letter of /proc/PID/stat (R, S, Z, ...), or 0 when it is gone. */
static char proc_state(long pid)
{
	char sp[64], st[512] = "";
	snprintf(sp, sizeof(sp), "/proc/%ld/stat", pid);
	FILE *sf = fopen(sp, "r");
	if (!sf)
		return 0;
	if (!fgets(st, sizeof(st), sf))
		st[0] = '\0';
	fclose(sf);
	const char *rp = strrchr(st, ')');
	return rp && rp[1] == ' ' ? rp[2] : 0;
}

/* The number (a pid, a port) a rank wrote to DIR/NAME, waiting up to
 * limit_s for the file. */
static long wait_for_pid(const char *dir, const char *name, double limit_s)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	double t0 = now_s();
	for (;;) {
		FILE *f = fopen(p, "r");
		long pid = 0;
		if (f) {
			int got = fscanf(f, "%ld", &pid);
			fclose(f);
			if (got == 1 && pid > 0)
				return pid;
		}
		ck_assert_msg(now_s() - t0 < limit_s, "no pid in %s after %.0f s", p, limit_s);
		usleep(20000);
	}
}

/* Two ranks fail at (nearly) the same time: each gets its own failed: line,
 * and the one that ended on its own is not counted among the ranks the
 * launcher stops.  The launcher is paused while both exit, so that it finds
 * both already gone when it handles the first.  Every step waits for what
 * it needs (the ranks started, both exited: zombies the stopped launcher
 * has not reaped), not a fixed time: with sleeps (0.2 s to start, 1.3 s to
 * exit) a launcher stopped before it had started its ranks, on a loaded
 * machine, let rank 0's failure be handled while rank 1 still ran. */
START_TEST(simultaneous_failures_are_each_reported)
{
	char *d = tmpdir();
	char log[4200], script[9000], go[4200];
	snprintf(log, sizeof(log), "%s/out", d);
	snprintf(go, sizeof(go), "%s/go", d);
	snprintf(script, sizeof(script),
	         "echo $$ > '%s'/pid-$ACCEL_RANK.tmp && mv '%s'/pid-$ACCEL_RANK.tmp "
	         "'%s'/pid-$ACCEL_RANK; if [ $ACCEL_RANK = 2 ]; then exec sleep 60; fi; "
	         "while [ ! -e '%s' ]; do sleep 0.02; done; exit 3", d, d, d, go);
	const char *cli = getenv("ACCEL_CLI");
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		if (fd < 0)
			_exit(99);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(cli, cli, "launch", "-n", "3", "--", "sh", "-c", script, (char *)NULL);
		_exit(99);
	}
	long rank_pid[3];
	for (int k = 0; k < 3; k++) {
		char name[32];
		snprintf(name, sizeof(name), "pid-%d", k);
		rank_pid[k] = wait_for_pid(d, name, 30);
	}
	kill(pid, SIGSTOP);
	int fd = open(go, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	/* ranks 0 and 1 exit meanwhile: zombies until the launcher reaps them */
	double t0 = now_s();
	for (int k = 0; k < 2; k++)
		while (proc_state(rank_pid[k]) != 'Z') {
			ck_assert_msg(now_s() - t0 < 30, "rank %d (pid %ld) did not exit within 30 s",
			              k, rank_pid[k]);
			usleep(20000);
		}
	kill(pid, SIGCONT);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	char *out = read_file(log);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d:\n%s", status, out);
	HAS(out, "accel launch: rank 0 failed: exit code 3\n");
	HAS(out, "accel launch: rank 1 failed: exit code 3\n");
	HAS(out, "accel launch: stopping the other 1 rank (SIGTERM");
	free(out);
	tmpdir_free(d);
}
END_TEST

START_TEST(rank_killed_by_sigkill)
{
	char *d = tmpdir();
	run r;
	launch(&r, (const char *[]){"-n", "4", "--", prog, "kill", "1", d, NULL});
	ck_assert_msg(r.status == 128 + SIGKILL, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 1 failed: killed by signal SIGKILL (9)\n");
	HAS(r.err, "accel launch: last 1 line of rank 1:\n  [rank 1] about to die\n");
	ck_assert_msg(r.secs < 10.0, "a kill -9 case took %.2f s", r.secs);
	assert_all_gone(d, 4);
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

/* SIGXFSZ is what a write past `ulimit -f` gets: the report says so. */
START_TEST(rank_killed_by_sigxfsz)
{
	run r;
	launch(&r, (const char *[]){"-n", "1", "--", "/bin/sh", "-c", "kill -XFSZ $$", NULL});
	ck_assert_msg(r.status == 128 + SIGXFSZ, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 0 failed: killed by signal SIGXFSZ (25)");
	HAS(r.err, ": a file-size limit (ulimit -f) stopped it\n");
	run_free(&r);
}
END_TEST

/* The first rank to fail printed nothing (it stopped because rank 0 told
 * it to); the summary also shows the rank the launcher stopped that wrote
 * the reason on stderr. */
START_TEST(summary_shows_the_rank_with_the_reason)
{
	run r;
	launch(&r, (const char *[]){"-n", "3", "--", prog, "refuse", "0", NULL});
	ck_assert_msg(r.status == 1, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 1 printed nothing\n");
	HAS(r.err, "accel launch: last 1 line of rank 0 (stopped by the launcher; it wrote on "
	           "stderr):\n  [rank 0] refuse: --out /nonexistent/x: cannot write in "
	           "/nonexistent\n");
	/* rank 2 wrote nothing: not shown */
	HASNT(r.err, "of rank 2");
	run_free(&r);
}
END_TEST

START_TEST(stubborn_ranks_get_sigkill_after_grace)
{
	char *d = tmpdir();
	run r;
	launch(&r, (const char *[]){"-n", "3", "--grace-s", "1", "--", prog, "stubborn", "0", d,
	                            NULL});
	ck_assert_msg(r.status == 1, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 0 failed: exit code 1\n");
	HAS(r.err, "accel launch: ranks 1, 2 did not stop within 1 s: sending SIGKILL\n");
	HAS(r.err, "accel launch: rank 0 printed nothing\n");
	ck_assert_msg(r.secs > 1.2 && r.secs < 6.0, "took %.2f s with a 1 s grace", r.secs);
	assert_all_gone(d, 3);
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

START_TEST(program_not_found)
{
	run r;
	launch(&r, (const char *[]){"-n", "2", "--", "/nonexistent/program", "x", NULL});
	ck_assert_msg(r.status == 127, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: cannot run '/nonexistent/program' (rank 0): No such file or "
	           "directory\n");
	run_free(&r);
	/* a file without execute permission */
	char *d = tmpdir();
	char path[4200], want[4400];
	snprintf(path, sizeof(path), "%s/not-executable", d);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("data\n", f);
	fclose(f);
	chmod(path, 0644);
	launch(&r, (const char *[]){"--", path, NULL});
	ck_assert_msg(r.status == 126, "exit %d:\n%s", r.status, r.err);
	snprintf(want, sizeof(want), "accel launch: cannot run '%s' (rank 0): Permission denied\n",
	         path);
	HAS(r.err, want);
	run_free(&r);
	unlink(path);
	rmdir(d);
	free(d);
}
END_TEST

START_TEST(leftover_children_are_stopped)
{
	char *d = tmpdir();
	run r;
	launch(&r, (const char *[]){"-n", "2", "--", prog, "orphan", d, NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s", r.status, r.err);
	HAS(r.err, "accel launch: rank 0 exited but processes it started still hold its output; "
	           "sending them SIGTERM\n");
	ck_assert_msg(r.secs < 5.0, "took %.2f s", r.secs);
	assert_all_gone(d, 2);
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

/* ---- signals --------------------------------------------------------------- */

static void wait_for_files(const char *dir, const char *prefix, int n, double limit_s)
{
	double t0 = now_s();
	for (;;) {
		int k = 0;
		for (int rr = 0; rr < n; rr++) {
			char name[64];
			snprintf(name, sizeof(name), "%s-%d", prefix, rr);
			k += file_exists(dir, name);
		}
		if (k == n)
			return;
		ck_assert_msg(now_s() - t0 < limit_s, "only %d of %d ranks wrote %s-R", k, n, prefix);
		usleep(20000);
	}
}

static void forward_case(int sig, int expect_exit)
{
	char *d = tmpdir();
	run r;
	start(&r, (const char *[]){"-n", "3", "--", prog, "trap", d, NULL});
	wait_for_files(d, "ready", 3, 10);
	double t0 = now_s();
	ck_assert_int_eq(kill(r.pid, sig), 0);
	finish(&r, 30);
	ck_assert_msg(r.status == expect_exit, "exit %d:\n%s", r.status, r.err);
	ck_assert_msg(now_s() - t0 < 3.0, "stopping took %.2f s", now_s() - t0);
	for (int k = 0; k < 3; k++) {
		char name[32];
		snprintf(name, sizeof(name), "term-%d", k);
		ck_assert_msg(file_exists(d, name), "rank %d did not get SIGTERM", k);
	}
	HASNT(r.err, "failed");
	run_free(&r);
	tmpdir_free(d);
}

/* Started with SIGHUP ignored (nohup): a hangup neither stops the job nor
 * reaches the ranks, which inherit it ignored; SIGTERM still works. */
START_TEST(ignored_sighup_stays_ignored)
{
	char *d = tmpdir();
	run r;
	start_ignoring = SIGHUP;
	start(&r, (const char *[]){"-n", "2", "--", prog, "trap", d, NULL});
	start_ignoring = 0;
	wait_for_files(d, "ready", 2, 10);
	ck_assert_int_eq(kill(r.pid, SIGHUP), 0);
	char p[4200];
	snprintf(p, sizeof(p), "%s/ready-1", d);
	char *pid = read_file(p);
	ck_assert_int_eq(kill((pid_t)atol(pid), SIGHUP), 0);
	free(pid);
	usleep(300000);
	int st;
	ck_assert_msg(waitpid(r.pid, &st, WNOHANG) == 0, "the launcher ended on an ignored SIGHUP");
	ck_assert_int_eq(kill(r.pid, SIGTERM), 0);
	finish(&r, 30);
	ck_assert_msg(r.status == 128 + SIGTERM, "exit %d:\n%s", r.status, r.err);
	HASNT(r.err, "SIGHUP");
	HASNT(r.err, "failed");
	for (int k = 0; k < 2; k++) {
		char name[32];
		snprintf(name, sizeof(name), "term-%d", k);
		ck_assert_msg(file_exists(d, name), "rank %d did not live to get SIGTERM", k);
	}
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

START_TEST(sigterm_is_forwarded)
{
	forward_case(SIGTERM, 128 + SIGTERM);
}
END_TEST

/* The ranks' handler catches only SIGTERM: they die of the forwarded
 * signal, and the launcher exits as a process killed by it would. */
static void signal_kills_ranks(int sig, const char *name)
{
	char *d = tmpdir(), want[96];
	run r;
	start(&r, (const char *[]){"-n", "2", "--", prog, "trap", d, NULL});
	wait_for_files(d, "ready", 2, 10);
	ck_assert_int_eq(kill(r.pid, sig), 0);
	finish(&r, 30);
	ck_assert_msg(r.status == 128 + sig, "exit %d:\n%s", r.status, r.err);
	snprintf(want, sizeof(want), "accel launch: received %s: forwarding it to 2 ranks", name);
	HAS(r.err, want);
	ck_assert(!file_exists(d, "term-0"));
	HASNT(r.err, "failed");
	run_free(&r);
	tmpdir_free(d);
}

START_TEST(sigint_is_forwarded)
{
	signal_kills_ranks(SIGINT, "SIGINT");
}
END_TEST

START_TEST(sighup_is_forwarded)
{
	signal_kills_ranks(SIGHUP, "SIGHUP");   /* a closed terminal */
}
END_TEST

/* ---- the store, reached from launched ranks --------------------------------- */

START_TEST(store_through_launcher)
{
	run r;
	launch(&r, (const char *[]){"-n", "4", "--", store_prog, NULL});
	ck_assert_msg(r.status == 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
	for (int k = 0; k < 4; k++) {
		char want[64];
		snprintf(want, sizeof(want), "[rank %d] store ok rank=%d world=4 count=10\n", k, k);
		HAS(r.out, want);
	}
	run_free(&r);
}
END_TEST

/* The port the launcher chose for the store is held until rank 0 binds it:
 * another process asking for that port meanwhile (here: while rank 0 has
 * not even started the store) is refused.  Without the hold, a port the
 * launcher had chosen and released could be taken by any process in the
 * time rank 0 took to start, which then failed "address already in use". */
START_TEST(store_port_held_until_rank0_binds_it)
{
	char *d = tmpdir();
	char script[9000];
	snprintf(script, sizeof(script),
	         "echo $ACCEL_MASTER_PORT > '%s'/port.tmp && mv '%s'/port.tmp '%s'/port; "
	         "while [ ! -e '%s'/go ]; do sleep 0.02; done; exec '%s'", d, d, d, d, store_prog);
	run r;
	start(&r, (const char *[]){"-n", "1", "--", "sh", "-c", script, NULL});
	long port = wait_for_pid(d, "port", 30);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int bound = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, e = errno;
	close(fd);
	char go[4200];
	snprintf(go, sizeof(go), "%s/go", d);
	fd = open(go, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	finish(&r, 30);
	ck_assert_msg(!bound, "another process bound the store's port %ld before rank 0 did", port);
	ck_assert_msg(e == EADDRINUSE, "binding the store's port %ld: %s", port, strerror(e));
	ck_assert_msg(r.status == 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
	HAS(r.out, "[rank 0] store ok rank=0 world=1 count=");
	run_free(&r);
	tmpdir_free(d);
}
END_TEST

/* Two launchers on this machine act as two nodes of one job. */
static void two_nodes(run *a, run *b, const char *extra)
{
	char port[16];
	/* held as the launcher holds the port it chooses (bound with
	 * SO_REUSEADDR, not listening) until the job ends: rank 0's store binds
	 * over it, a test running beside this one cannot take it meanwhile */
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(port, sizeof(port), "%d", ntohs(sa.sin_port));
	const char *n0[] = {"--nnodes", "2", "--node-rank", "0", "-n", "2", "--master-addr",
	                    "127.0.0.1", "--master-port", port, "--grace-s", "2", "--", store_prog,
	                    extra ? "die" : NULL, extra, NULL};
	const char *n1[] = {"--nnodes=2", "--node-rank=1", "-n2", "--master-addr=127.0.0.1",
	                    "--master-port", port, "--grace-s", "2", "--", store_prog,
	                    extra ? "die" : NULL, extra, NULL};
	start(b, n1); /* the clients retry until rank 0's store is up */
	usleep(100000);
	start(a, n0);
	finish(a, 30);
	finish(b, 30);
	close(fd);
}

START_TEST(two_nodes_meet_in_the_store)
{
	run a, b;
	two_nodes(&a, &b, NULL);
	ck_assert_msg(a.status == 0 && b.status == 0, "exit %d/%d:\n%s\n%s", a.status, b.status,
	              a.err, b.err);
	/* same derived job id on both nodes: the ranks read each other's keys */
	HAS(a.out, "[rank 0] store ok rank=0 world=4 count=10\n");
	HAS(a.out, "[rank 1] store ok rank=1 world=4 count=10\n");
	HAS(b.out, "[rank 2] store ok rank=2 world=4 count=10\n");
	HAS(b.out, "[rank 3] store ok rank=3 world=4 count=10\n");
	run_free(&a);
	run_free(&b);
}
END_TEST

START_TEST(failure_on_one_node_stops_the_other)
{
	run a, b;
	two_nodes(&a, &b, "3");
	/* node 1 sees its rank 3 die; node 0's ranks learn it from the store */
	ck_assert_int_eq(b.status, 1);
	HAS(b.err, "accel launch: rank 3 failed: exit code 3\n");
	HAS(b.err, "  [rank 3] rank 3 dies now\n");
	ck_assert_int_eq(a.status, 1);
	HAS(a.err, "failed: exit code 1\n");
	HAS(a.err, "store barrier 'end' (rank ");
	/* which others are missing depends on timing; rank 3 is always among
	 * the ranks that left */
	HAS(a.err, "a rank left the job before reaching it; missing ranks: ");
	HAS(a.err, "3 (exited or crashed)\n");
	ck_assert_msg(a.secs < 10.0 && b.secs < 10.0, "took %.2f / %.2f s", a.secs, b.secs);
	run_free(&a);
	run_free(&b);
}
END_TEST

static Suite *launch_suite(void)
{
	Suite *s = suite_create("launch");
	TCase *tc = tcase_create("launch");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, help);
	tcase_add_test(tc, bad_usage);
	tcase_add_test(tc, option_edges);
	tcase_add_test(tc, help_lists_every_option);
	tcase_add_test(tc, environment);
	tcase_add_test(tc, dry_run_multi_node);
	tcase_add_test(tc, line_prefixes);
	tcase_add_test(tc, log_dir_and_tee);
	tcase_add_test(tc, all_succeed);
	tcase_add_test(tc, one_rank_exits_3);
	tcase_add_test(tc, rank_killed_by_sigkill);
	tcase_add_test(tc, rank_killed_by_sigxfsz);
	tcase_add_test(tc, leftover_shared_memory_is_removed);
	tcase_add_test(tc, closed_stdout_pipe_ends_the_job);
	tcase_add_test(tc, stalled_stdout_does_not_stall_the_launcher);
	tcase_add_test(tc, output_left_in_the_pipes_is_delivered);
	tcase_add_test(tc, closed_stdout_after_an_early_exit);
	tcase_add_test(tc, log_write_failure_is_reported);
	tcase_add_test(tc, simultaneous_failures_are_each_reported);
	tcase_add_test(tc, stubborn_ranks_get_sigkill_after_grace);
	tcase_add_test(tc, summary_shows_the_rank_with_the_reason);
	tcase_add_test(tc, program_not_found);
	tcase_add_test(tc, leftover_children_are_stopped);
	tcase_add_test(tc, ignored_sighup_stays_ignored);
	tcase_add_test(tc, sigterm_is_forwarded);
	tcase_add_test(tc, sigint_is_forwarded);
	tcase_add_test(tc, sighup_is_forwarded);
	tcase_add_test(tc, store_through_launcher);
	tcase_add_test(tc, store_port_held_until_rank0_binds_it);
	tcase_add_test(tc, two_nodes_meet_in_the_store);
	tcase_add_test(tc, failure_on_one_node_stops_the_other);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	snprintf(prog, sizeof(prog), "%s/launch-prog", LAUNCH_PROGS_DIR);
	snprintf(store_prog, sizeof(store_prog), "%s/launch-store", LAUNCH_PROGS_DIR);
	SRunner *sr = srunner_create(launch_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
