/* SPDX-License-Identifier: MIT */
/* tests/test-tcp.c: the tcp comm backend, end to end under `accel launch`.
 *
 * Each test starts `accel launch` (or, for the two-node job, two of them
 * with --nnodes 2 on this machine) running tests/progs/comm-ranks, whose
 * ranks check every op x dtype x reduction x placement x size against a
 * sequential reference through libaccel, or play one failure, and write
 * what they saw to OUTDIR/<mode>-<rank>:
 *  - the matrix on 1, 2, 3 and 4 ranks with backend tcp (and on 3 with
 *    4 KiB rounds and no one-exchange small ops), and on 2 nodes x
 *    2 ranks with backend auto (which must pick tcp); on 2 ranks started
 *    as srun starts them, without MASTER_ADDR (the master address from
 *    the Slurm node list);
 *  - kill -9 of a rank in the middle of a 64 MiB all-reduce, a rank that
 *    frees its context and leaves, a rank that issues another collective,
 *    a rank that comes late past comm.timeout_s: the others fail naming
 *    that rank (pid and address), within seconds (kill -9 also across two
 *    launchers); a late rank 0 reads why
 *    the others left (their notes in the store);
 *  - ranks with different tcp.chunk_kb, tcp.addr that is not an address of
 *    this machine, backend shm on two nodes, and auto on two nodes without
 *    the tcp module: accel_ctx_new fails saying so. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "accel/types.h"
#include "free-port.h"
#include "launch-ranks.h"

static char g_root[128];

static void outdir_new(char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/run-XXXXXX", g_root);
	if (!mkdtemp(buf))
		ck_abort_msg("mkdtemp %s: %s", buf, strerror(errno));
}

/* argv of `accel launch -n N [--set k=v]... [node options] -- comm-ranks
 * MODE OUT VICTIM MAXN`, into argv (at least 40 entries); strings in store. */
typedef struct launch_args {
	const char *argv[40];
	char np[16], vic[16], prog[1024], port[16], node[16];
} launch_args;

static void build_argv(launch_args *a, int n, const char *const *sets, int node_rank, int port,
                       const char *mode, const char *out, int victim, const char *maxn)
{
	const char *cli = getenv("ACCEL_CLI");
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	ck_assert_msg(cli && *cli && bd, "ACCEL_CLI / ACCEL_TEST_BUILDDIR not set (run through meson test)");
	snprintf(a->prog, sizeof(a->prog), "%s/tests/comm-ranks", bd);
	snprintf(a->np, sizeof(a->np), "%d", n);
	snprintf(a->vic, sizeof(a->vic), "%d", victim);
	snprintf(a->port, sizeof(a->port), "%d", port);
	snprintf(a->node, sizeof(a->node), "%d", node_rank);
	int k = 0;
	a->argv[k++] = cli;
	a->argv[k++] = "launch";
	a->argv[k++] = "-n";
	a->argv[k++] = a->np;
	a->argv[k++] = "--grace-s";
	a->argv[k++] = "5";
	for (int i = 0; sets && sets[i]; i++) {
		a->argv[k++] = "--set";
		a->argv[k++] = sets[i];
	}
	if (node_rank >= 0) {
		a->argv[k++] = "--nnodes";
		a->argv[k++] = "2";
		a->argv[k++] = "--node-rank";
		a->argv[k++] = a->node;
		a->argv[k++] = "--master-addr";
		a->argv[k++] = "127.0.0.1";
		a->argv[k++] = "--master-port";
		a->argv[k++] = a->port;
	}
	a->argv[k++] = "--";
	a->argv[k++] = a->prog;
	a->argv[k++] = mode;
	a->argv[k++] = out;
	a->argv[k++] = a->vic;
	a->argv[k++] = maxn;
	a->argv[k] = NULL;
}

/* One launcher with n ranks; its wait status (-1: timed out). */
static int launch(int n, const char *const *sets, const char *mode, const char *out, int victim,
                  const char *maxn, int limit_s)
{
	launch_args a;
	char log[600];
	build_argv(&a, n, sets, -1, 0, mode, out, victim, maxn);
	snprintf(log, sizeof(log), "%s/launch.log", out);
	return lr_reap(lr_spawn(a.argv, log), limit_s);
}

static void show_logs(const char *out)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/launch.log", out);
	lr_print_log(path);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/node%d.log", out, i);
		lr_print_log(path);
	}
}

/* Every one of n ranks reported a clean matrix on backend tcp. */
static void expect_matrix_reports(const char *out, int n)
{
	char buf[512];
	for (int r = 0; r < n; r++) {
		ck_assert_msg(lr_read_report(out, "matrix", r, buf, sizeof(buf)) == 0,
		              "rank %d wrote no report", r);
		ck_assert_msg(!strncmp(buf, "0 ", 2) && strstr(buf, "backend tcp"), "rank %d: %s", r,
		              buf);
	}
}

static const char *const k_tcp[] = {"backend=tcp", NULL};

static void matrix_with(int n, const char *const *sets, const char *maxn)
{
	char out[256];
	outdir_new(out, sizeof(out));
	int status = launch(n, sets, "matrix", out, 0, maxn, 280);
	if (status != 0)
		show_logs(out);
	ck_assert_msg(status == 0, "accel launch -n %d comm-ranks matrix: status %d", n, status);
	expect_matrix_reports(out, n);
}

static void matrix(int n, const char *maxn)
{
	matrix_with(n, k_tcp, maxn);
}

START_TEST(matrix_1) { matrix(1, "100003"); }
END_TEST
START_TEST(matrix_2) { matrix(2, "1048589"); }
END_TEST
START_TEST(matrix_3) { matrix(3, "300007"); }
END_TEST
START_TEST(matrix_4) { matrix(4, "100003"); }
END_TEST
/* 4 KiB rounds and no one-exchange small ops: many rounds per op, every
 * broadcast chunked along the chain */
START_TEST(matrix_3_small_rounds)
{
	static const char *const sets[] = {"backend=tcp", "tcp.chunk_kb=4", "tcp.small_kb=0", NULL};
	matrix_with(3, sets, "100003");
}
END_TEST

/* Two launchers (--nnodes 2, two ranks each) on this machine running mode;
 * their wait statuses (-1: ran past limit0_s for node 0, 60 s for node 1). */
static void two_launchers(const char *out, const char *mode, int victim, const char *maxn,
                          int limit0_s, int *st0, int *st1)
{
	char log[2][600];
	launch_args a[2];
	pid_t pid[2];
	int port = free_port();
	for (int i = 0; i < 2; i++) {
		build_argv(&a[i], 2, NULL, i, port, mode, out, victim, maxn);
		snprintf(log[i], sizeof(log[i]), "%s/node%d.log", out, i);
		pid[i] = lr_spawn(a[i].argv, log[i]);
	}
	*st0 = lr_reap(pid[0], limit0_s);
	*st1 = lr_reap(pid[1], 60);
}

/* Two launchers, --nnodes 2, two ranks each, on this machine: backend auto
 * must take tcp (shm cannot span nodes), and every rank checks the matrix. */
START_TEST(two_nodes_auto)
{
	char out[256];
	int st0, st1;
	outdir_new(out, sizeof(out));
	two_launchers(out, "matrix", 0, "100003", 280, &st0, &st1);
	if (st0 != 0 || st1 != 0)
		show_logs(out);
	ck_assert_msg(st0 == 0 && st1 == 0, "node 0: status %d, node 1: status %d", st0, st1);
	expect_matrix_reports(out, 4);
}
END_TEST

/* What every rank but the victim reported: status want, within limit_s,
 * the message holding every string of needles. */
static void expect_others(const char *out, const char *mode, int n, int victim, int want,
                          double limit_s, const char *const *needles)
{
	for (int r = 0; r < n; r++) {
		char buf[4096];
		int st;
		double took;
		if (r == victim)
			continue;
		if (lr_read_report(out, mode, r, buf, sizeof(buf)) != 0) {
			show_logs(out);
			ck_abort_msg("rank %d wrote no report", r);
		}
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st == want, "rank %d: status %d, want %d: %s", r, st, want, buf);
		for (int i = 0; needles[i]; i++)
			ck_assert_msg(strstr(buf, needles[i]), "rank %d: no '%s' in: %s", r, needles[i],
			              buf);
		ck_assert_msg(took < limit_s, "rank %d took %.1f s: %s", r, took, buf);
	}
}

START_TEST(kill9_mid_collective)
{
	char out[256];
	outdir_new(out, sizeof(out));
	int status = launch(3, k_tcp, "kill", out, 1, "0", 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status %d", status);
	const char *want[] = {"allreduce #", "rank 1 (pid ", "is gone", NULL};
	expect_others(out, "kill", 3, 1, ACCEL_ERR_PEER, 4.0, want);
}
END_TEST

/* The same across two launchers (--nnodes 2): rank 3, on node 1, dies;
 * the ranks of both nodes fail naming it, and node 1's launcher fails. */
START_TEST(two_nodes_kill9)
{
	char out[256];
	int st0, st1;
	outdir_new(out, sizeof(out));
	two_launchers(out, "kill", 3, "0", 120, &st0, &st1);
	ck_assert_msg(st0 != -1 && st1 != -1, "a launcher did not finish");
	ck_assert_msg(WIFEXITED(st1) && WEXITSTATUS(st1) != 0, "node 1: status %d", st1);
	const char *want[] = {"allreduce #", "rank 3 (pid ", NULL};
	expect_others(out, "kill", 4, 3, ACCEL_ERR_PEER, 4.0, want);
}
END_TEST

START_TEST(rank_leaves)
{
	char out[256];
	outdir_new(out, sizeof(out));
	int status = launch(3, k_tcp, "leave", out, 1, "0", 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	const char *want[] = {"allreduce #", "rank 1 (pid ", "left the job", NULL};
	expect_others(out, "leave", 3, 1, ACCEL_ERR_PEER, 4.0, want);
}
END_TEST

START_TEST(mismatched_collectives)
{
	char out[256];
	outdir_new(out, sizeof(out));
	int status = launch(3, k_tcp, "mismatch", out, 2, "0", 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	const char *want[] = {"collective mismatch", "allreduce #", "allgather #", NULL};
	expect_others(out, "mismatch", 3, -1, ACCEL_ERR_COMM, 4.0, want);
}
END_TEST

START_TEST(late_rank_times_out)
{
	static const char *const sets[] = {"backend=tcp", "comm.timeout_s=1", NULL};
	char out[256];
	outdir_new(out, sizeof(out));
	int status = launch(3, sets, "late", out, 2, "0", 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	const char *want[] = {"allreduce #", "within 1.0 s", "rank 2 (pid ", "never arrived", NULL};
	expect_others(out, "late", 3, 2, ACCEL_ERR_TIMEOUT, 2.9, want);
}
END_TEST

/* Launch comm-ranks with sets (on two nodes or one); 1 when the launch
 * failed (its node-0 or only log into buf), 0 when it did not. */
static int start_failure_log(const char *const *sets, int two_nodes, char *buf, size_t cap)
{
	char out[256], path[600];
	outdir_new(out, sizeof(out));
	int status;
	if (two_nodes) {
		launch_args a[2];
		pid_t pid[2];
		int port = free_port();
		for (int i = 0; i < 2; i++) {
			build_argv(&a[i], 1, sets, i, port, "matrix", out, 0, "0");
			snprintf(path, sizeof(path), "%s/node%d.log", out, i);
			pid[i] = lr_spawn(a[i].argv, path);
		}
		status = lr_reap(pid[0], 60);
		lr_reap(pid[1], 30);
		snprintf(path, sizeof(path), "%s/node0.log", out);
	} else {
		status = launch(2, sets, "matrix", out, 0, "0", 60);
		snprintf(path, sizeof(path), "%s/launch.log", out);
	}
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (f) {
		size_t n = fread(buf, 1, cap - 1, f);
		buf[n] = '\0';
		fclose(f);
	}
	return status != -1 && status != 0;
}

/* accel_ctx_new fails on every rank; the log says why. */
static void expect_start_failure(const char *const *sets, int two_nodes, const char *needle)
{
	char buf[16384];
	ck_assert_msg(start_failure_log(sets, two_nodes, buf, sizeof(buf)),
	              "the launch did not fail:\n%s", buf);
	ck_assert_msg(strstr(buf, needle), "no '%s' in:\n%s", needle, buf);
}

/* The late rank is rank 0, which hosts the store: the others time out,
 * record why in the store as they free their contexts, and rank 0, when it
 * comes, reports that instead of a crash.  tcp.small_kb=0: with the
 * one-exchange form the others' whole inputs would already wait in rank
 * 0's sockets, and its all-reduce would complete (correctly) on its own. */
START_TEST(late_rank_reads_why)
{
	static const char *const sets[] = {"backend=tcp", "comm.timeout_s=1", "tcp.small_kb=0",
	                                   NULL};
	char out[256], buf[4096];
	int st;
	double took;
	outdir_new(out, sizeof(out));
	int status = launch(3, sets, "late", out, 0, "0", 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	if (lr_read_report(out, "late", 0, buf, sizeof(buf)) != 0) {
		show_logs(out);
		ck_abort_msg("rank 0 wrote no report");
	}
	ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
	ck_assert_msg(st == ACCEL_ERR_PEER, "rank 0: %s", buf);
	ck_assert_msg(strstr(buf, "closed its connection: it freed its context after a collective "
	                          "failed there") && strstr(buf, "rank 0 (pid ") &&
	              strstr(buf, "never arrived"), "rank 0: %s", buf);
}
END_TEST

/* Rank 1 has other tcp settings than rank 0: the bootstrap fails on both,
 * naming the values, instead of misreading the streams. */
START_TEST(settings_differ)
{
	const char *cli = getenv("ACCEL_CLI");
	char out[256], log[600], buf[16384];
	outdir_new(out, sizeof(out));
	snprintf(log, sizeof(log), "%s/launch.log", out);
	const char *argv[] = {cli, "launch", "-n", "2", "--set", "backend=tcp", "--", "/bin/sh", "-c",
	                      "[ \"$ACCEL_RANK\" = 1 ] && export ACCEL_TCP_CHUNK_KB=4; "
	                      "exec \"$0\" matrix \"$1\" 0 0", NULL, NULL, NULL};
	char prog[1024];
	snprintf(prog, sizeof(prog), "%s/tests/comm-ranks", getenv("ACCEL_TEST_BUILDDIR"));
	argv[10] = prog;
	argv[11] = out;
	int status = lr_reap(lr_spawn(argv, log), 60);
	ck_assert_msg(status != -1 && status != 0, "status %d", status);
	FILE *f = fopen(log, "r");
	ck_assert_msg(f != NULL, "%s", log);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	ck_assert_msg(strstr(buf, "uses tcp.chunk_kb 4 and tcp.small_kb 4, this rank 1024 and 16") ||
	              strstr(buf, "uses tcp.chunk_kb 1024 and tcp.small_kb 16, this rank 4 and 4"),
	              "no settings message in:\n%s", buf);
}
END_TEST

/* backend auto on two nodes without the tcp module: the error says why
 * each installed backend was passed over. */
START_TEST(auto_needs_tcp)
{
	const char *keep = getenv("ACCEL_PLUGIN_PATH");
	char *saved = keep ? strdup(keep) : NULL, path[4096];
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	snprintf(path, sizeof(path), "%s/backends/shm:%s/plugins/ddp", bd, bd);
	setenv("ACCEL_PLUGIN_PATH", path, 1);
	static const char *const sets[] = {NULL};
	char log[16384];
	int ok = start_failure_log(sets, 1, log, sizeof(log));
	if (saved)
		setenv("ACCEL_PLUGIN_PATH", saved, 1);
	else
		unsetenv("ACCEL_PLUGIN_PATH");
	free(saved);
	ck_assert_msg(ok, "the launch did not fail:\n%s", log);
	ck_assert_msg(strstr(log, "no comm backend can carry host buffers of this job (2 ranks on "
	                          "2 nodes): shm: serves one node only"),
	              "no explanation in:\n%s", log);
}
END_TEST

START_TEST(addr_not_local)
{
	/* 192.0.2.1 is TEST-NET-1: never an address of this machine */
	static const char *const sets[] = {"backend=tcp", "tcp.addr=192.0.2.1", NULL};
	expect_start_failure(sets, 0, "cannot listen on 192.0.2.1");
}
END_TEST

START_TEST(shm_across_nodes)
{
	static const char *const sets[] = {"backend=shm", NULL};
	expect_start_failure(sets, 1, "backend shm (from --set backend=shm (accel launch)) works within one node");
}
END_TEST

/* Two ranks started the way srun starts them (Slurm's variables, one rank
 * per "node", no accel launch), with no MASTER_ADDR: the core takes the
 * store's host from the step's node list and hands it to the backend
 * (accel_comm_init_v1.master_addr), which finds its interface from it. */
START_TEST(slurm_master_from_nodelist)
{
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	ck_assert_msg(bd != NULL, "ACCEL_TEST_BUILDDIR not set (run through meson test)");
	char out[256], prog[1024], port[16], log[2][600];
	pid_t pid[2];
	outdir_new(out, sizeof(out));
	snprintf(prog, sizeof(prog), "%s/tests/comm-ranks", bd);
	snprintf(port, sizeof(port), "%d", free_port());
	for (int i = 0; i < 2; i++) {
		snprintf(log[i], sizeof(log[i]), "%s/node%d.log", out, i);
		fflush(NULL);
		pid[i] = fork();
		ck_assert_int_ge(pid[i], 0);
		if (pid[i] == 0) {
			static const char *const drop[] = {
				"ACCEL_RANK", "ACCEL_LOCAL_RANK", "ACCEL_WORLD_SIZE", "ACCEL_LOCAL_WORLD_SIZE",
				"ACCEL_NODE_RANK", "ACCEL_MASTER_ADDR", "ACCEL_MASTER_PORT", "ACCEL_CONFIG",
				"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
				"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", NULL};
			for (int k = 0; drop[k]; k++)
				unsetenv(drop[k]);
			char id[4];
			snprintf(id, sizeof(id), "%d", i);
			setenv("SLURM_PROCID", id, 1);
			setenv("SLURM_NODEID", id, 1);
			setenv("SLURM_LOCALID", "0", 1);
			setenv("SLURM_STEP_NUM_TASKS", "2", 1);
			setenv("SLURM_STEP_NUM_NODES", "2", 1);
			setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)", 1);
			setenv("SLURM_JOB_ID", "4242", 1);
			setenv("SLURM_STEP_ID", "0", 1);
			setenv("SLURM_STEP_NODELIST", "127.0.0.1", 1);
			setenv("ACCEL_MASTER_PORT", port, 1);
			setenv("ACCEL_SET", "backend=tcp", 1);
			const char *argv[] = {prog, "matrix", out, "0", "1000", NULL};
			int fd = open(log[i], O_CREAT | O_WRONLY | O_TRUNC, 0600);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
			execv(prog, (char *const *)argv);
			_exit(99);
		}
	}
	int st0 = lr_reap(pid[0], 200), st1 = lr_reap(pid[1], 60);
	if (st0 != 0 || st1 != 0)
		show_logs(out);
	ck_assert_msg(st0 == 0 && st1 == 0, "rank 0: status %d, rank 1: status %d", st0, st1);
	expect_matrix_reports(out, 2);
}
END_TEST

static Suite *tcp_suite(void)
{
	Suite *s = suite_create("tcp");
	TCase *tc = tcase_create("matrix");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, matrix_1);
	tcase_add_test(tc, matrix_2);
	tcase_add_test(tc, matrix_3);
	tcase_add_test(tc, matrix_4);
	tcase_add_test(tc, matrix_3_small_rounds);
	tcase_add_test(tc, two_nodes_auto);
	tcase_add_test(tc, slurm_master_from_nodelist);
	suite_add_tcase(s, tc);
	tc = tcase_create("faults");
	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, kill9_mid_collective);
	tcase_add_test(tc, two_nodes_kill9);
	tcase_add_test(tc, rank_leaves);
	tcase_add_test(tc, mismatched_collectives);
	tcase_add_test(tc, late_rank_times_out);
	tcase_add_test(tc, late_rank_reads_why);
	tcase_add_test(tc, settings_differ);
	tcase_add_test(tc, auto_needs_tcp);
	tcase_add_test(tc, addr_not_local);
	tcase_add_test(tc, shm_across_nodes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	snprintf(g_root, sizeof(g_root), "/tmp/accel-test-tcp-XXXXXX");
	if (!mkdtemp(g_root)) {
		perror("mkdtemp");
		return 1;
	}
	SRunner *sr = srunner_create(tcp_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	lr_rm_tree(g_root);
	return failed ? 1 : 0;
}
