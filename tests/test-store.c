/* SPDX-License-Identifier: MIT */
/* tests/test-store.c: the rendezvous store with real processes: set/get/add/
 * wait/barrier across forked ranks, timeouts and their messages, a rank that
 * never comes, one that dies, an address nobody listens on. */
#include <check.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/sock.h"
#include "free-port.h"
#include "store.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A rank body: returns 0 on success; a failure message goes to stderr.  It
 * may write up to OUT_MAX bytes of result to `out` for the parent to check. */
typedef int (*rank_fn)(int rank, int world, int port, char *out);

#define OUT_MAX 1024
#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), 1)

typedef struct ranks {
	pid_t pid[16];
	int pipe[16];
	int n;
} ranks;

static void spawn(ranks *rs, int rank, int world, int port, rank_fn fn)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		char out[OUT_MAX] = {0};
		int rc = fn(rank, world, port, out);
		ssize_t w = write(p[1], out, strlen(out));
		(void)w;
		_exit(rc);
	}
	close(p[1]);
	rs->pid[rs->n] = pid;
	rs->pipe[rs->n] = p[0];
	rs->n++;
}

/* Wait for child k; returns its exit code and copies its result. */
static int join(ranks *rs, int k, char *out, size_t cap)
{
	size_t len = 0;
	ssize_t r;
	while (len + 1 < cap && (r = read(rs->pipe[k], out + len, cap - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = '\0';
	close(rs->pipe[k]);
	int st;
	ck_assert_int_eq(waitpid(rs->pid[k], &st, 0), rs->pid[k]);
	ck_assert_msg(WIFEXITED(st), "rank process %d died by signal %d", k, WTERMSIG(st));
	return WEXITSTATUS(st);
}

/* ---- every op across 4 ranks ------------------------------------------------ */

static int basic_rank(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 10000, &st, &err))
		return FAIL("rank %d: new: %s", rank, err.msg);
	char key[32], val[64];
	snprintf(key, sizeof(key), "k%d", rank);
	snprintf(val, sizeof(val), "value of rank %d", rank);
	if (accelp_store_set(st, key, val, strlen(val), &err))
		return FAIL("set: %s", err.msg);
	int64_t ticket;
	if (accelp_store_add(st, "ticket", 1, &ticket, &err))
		return FAIL("add: %s", err.msg);
	/* a blocking get of every other rank's key */
	for (int r = 0; r < world; r++) {
		char k[32], buf[64] = {0}, want[64];
		uint64_t len = 0;
		snprintf(k, sizeof(k), "k%d", r);
		snprintf(want, sizeof(want), "value of rank %d", r);
		if (accelp_store_get(st, k, buf, sizeof(buf) - 1, &len, 5000, &err))
			return FAIL("get %s: %s", k, err.msg);
		if (strcmp(buf, want) || len != strlen(want))
			return FAIL("rank %d got '%s' (%llu bytes) for %s", rank, buf,
			            (unsigned long long)len, k);
	}
	const char *keys[] = {"k0", "k1", "k2", "k3"};
	if (accelp_store_wait(st, keys, 4, 5000, &err))
		return FAIL("wait: %s", err.msg);
	if (accelp_store_barrier(st, "b1", 5000, &err))
		return FAIL("barrier: %s", err.msg);
	/* after the barrier every add has happened */
	char buf[32] = {0};
	uint64_t len;
	if (accelp_store_get(st, "ticket", buf, sizeof(buf) - 1, &len, 0, &err))
		return FAIL("get ticket: %s", err.msg);
	if (strcmp(buf, "4"))
		return FAIL("ticket is '%s' after the barrier, want 4", buf);
	/* a truncated copy still reports the full length */
	char small[4] = {0};
	if (accelp_store_get(st, "k0", small, 3, &len, 0, &err) || len != 15 || memcmp(small, "val", 3))
		return FAIL("short get: len %llu '%s' %s", (unsigned long long)len, small, err.msg);
	/* an empty value */
	if (rank == 0 && accelp_store_set(st, "empty", NULL, 0, &err))
		return FAIL("set empty: %s", err.msg);
	if (accelp_store_get(st, "empty", buf, sizeof(buf), &len, 5000, &err) || len != 0)
		return FAIL("get empty: %s", err.msg);
	if (accelp_store_barrier(st, "b2", 5000, &err))
		return FAIL("barrier 2: %s", err.msg);
	st = accelp_store_free(st);
	snprintf(out, OUT_MAX, "%lld", (long long)ticket);
	return 0;
}

START_TEST(four_ranks_every_op)
{
	int port = free_port();
	ranks rs = {0};
	for (int r = 0; r < 4; r++)
		spawn(&rs, r, 4, port, basic_rank);
	int seen[5] = {0};
	for (int k = 0; k < 4; k++) {
		char out[256];
		ck_assert_int_eq(join(&rs, k, out, sizeof(out)), 0);
		int t = atoi(out);
		ck_assert_int_ge(t, 1);
		ck_assert_int_le(t, 4);
		seen[t]++;
	}
	/* add is atomic: every rank drew a different ticket */
	for (int t = 1; t <= 4; t++)
		ck_assert_int_eq(seen[t], 1);
}
END_TEST

/* ---- a get that waits for a later set ------------------------------------- */

static int late_setter(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 10000, &st, &err))
		return FAIL("new: %s", err.msg);
	if (rank == 0) {
		usleep(300000);
		if (accelp_store_set(st, "late", "xyz", 3, &err))
			return FAIL("set: %s", err.msg);
	} else {
		char buf[8] = {0};
		uint64_t len;
		double t0 = now_s();
		if (accelp_store_get(st, "late", buf, 7, &len, 5000, &err))
			return FAIL("get: %s", err.msg);
		snprintf(out, OUT_MAX, "%s %.3f", buf, now_s() - t0);
	}
	if (accelp_store_barrier(st, "done", 5000, &err))
		return FAIL("barrier: %s", err.msg);
	accelp_store_free(st);
	return 0;
}

START_TEST(get_waits_for_set)
{
	int port = free_port();
	ranks rs = {0};
	spawn(&rs, 0, 2, port, late_setter);
	spawn(&rs, 1, 2, port, late_setter);
	char out[256];
	ck_assert_int_eq(join(&rs, 0, out, sizeof(out)), 0);
	ck_assert_int_eq(join(&rs, 1, out, sizeof(out)), 0);
	char val[8];
	double waited;
	ck_assert_int_eq(sscanf(out, "%7s %lf", val, &waited), 2);
	ck_assert_str_eq(val, "xyz");
	ck_assert_msg(waited > 0.1 && waited < 4.0, "waited %.3f s", waited);
}
END_TEST

/* ---- timeouts in one process (world of 1) -------------------------------- */

START_TEST(timeouts_and_messages)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 1, 2000, &st, &err), ACCEL_OK);
	char buf[16];
	uint64_t len = 99;

	double t0 = now_s();
	ck_assert_int_eq(accelp_store_get(st, "nope", buf, sizeof(buf), &len, 300, &err),
	                 ACCEL_ERR_TIMEOUT);
	double dt = now_s() - t0;
	ck_assert_msg(dt >= 0.29 && dt < 2.0, "get timeout took %.3f s", dt);
	ck_assert_str_eq(err.msg, "store get 'nope' (rank 0): timed out after 0.3 s; no rank set "
	                 "the key");
	ck_assert_uint_eq(len, 99); /* outputs untouched on failure */

	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_get(st, "nope", buf, sizeof(buf), &len, 0, &err),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_str_eq(err.msg, "store get 'nope' (rank 0): the key is not set");

	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_set(st, "a", "1", 1, &err), ACCEL_OK);
	const char *keys[] = {"a", "b", "c"};
	ck_assert_int_eq(accelp_store_wait(st, keys, 3, 200, &err), ACCEL_ERR_TIMEOUT);
	ck_assert_str_eq(err.msg, "store wait (rank 0): timed out after 0.2 s; keys never set: "
	                 "'b', 'c'");

	/* add: counts from 0, keeps a decimal string, refuses non-integers */
	accelp_err_clear(&err);
	int64_t v = 0;
	ck_assert_int_eq(accelp_store_add(st, "n", 5, &v, &err), ACCEL_OK);
	ck_assert_int_eq(v, 5);
	ck_assert_int_eq(accelp_store_add(st, "n", -7, &v, &err), ACCEL_OK);
	ck_assert_int_eq(v, -2);
	ck_assert_int_eq(accelp_store_get(st, "n", buf, sizeof(buf), &len, 0, &err), ACCEL_OK);
	ck_assert_uint_eq(len, 2);
	ck_assert_int_eq(memcmp(buf, "-2", 2), 0);
	ck_assert_int_eq(accelp_store_set(st, "s", "abc", 3, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_store_add(st, "s", 1, &v, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_str_eq(err.msg, "store add 's' (rank 0): the key holds a value that is not a "
	                 "decimal integer");

	/* a barrier of one completes at once; the name is single-use until then */
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_barrier(st, "solo", 1000, &err), ACCEL_OK);
	/* the connection still works after failures */
	ck_assert_int_eq(accelp_store_set(st, "after", "ok", 2, &err), ACCEL_OK);
	st = accelp_store_free(st);
	ck_assert_ptr_null(st);
	ck_assert_ptr_null(accelp_store_free(NULL));
}
END_TEST

/* ---- bad arguments --------------------------------------------------------- */

START_TEST(bad_arguments)
{
	accel_err err = {0};
	accel_store *st = (accel_store *)0x1;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", 0, 1, 2, 1000, &st, &err),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_str_eq(err.msg, "rendezvous store: port 0 is not in 1..65535");
	accelp_err_clear(&err);
	/* rank 0 may ask for a free port (0), nothing below */
	ck_assert_int_eq(accelp_store_new("127.0.0.1", -1, 0, 1, 1000, &st, &err),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_str_eq(err.msg, "rendezvous store: port -1 is not in 0..65535");
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_new("127.0.0.1", 1234, 4, 4, 1000, &st, &err),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_str_eq(err.msg, "rendezvous store: rank 4 is not in 0..3");
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_new(NULL, 1234, 0, 1, 1000, &st, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_eq(st, (accel_store *)0x1);
	ck_assert_int_eq(accelp_store_set(NULL, "k", "v", 1, &err), ACCEL_ERR_INVALID_ARG);
}
END_TEST

/* ---- nobody listening ------------------------------------------------------ */

START_TEST(unreachable_store)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	double t0 = now_s();
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 3, 4, 500, &st, &err), ACCEL_ERR_COMM);
	double dt = now_s() - t0;
	char want[256];
	snprintf(want, sizeof(want), "cannot reach the rendezvous store at 127.0.0.1:%d (rank 3): "
	         "connection refused after 0.5 s", port);
	ck_assert_str_eq(err.msg, want);
	ck_assert_ptr_null(st);
	ck_assert_msg(dt >= 0.45 && dt < 3.0, "gave up after %.3f s", dt);
}
END_TEST

/* ---- the port is taken ----------------------------------------------------- */

START_TEST(port_in_use)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	int port = ntohs(sa.sin_port);
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 2, 500, &st, &err), ACCEL_ERR_SYSTEM);
	char want[256];
	snprintf(want, sizeof(want), "cannot start the rendezvous store at 127.0.0.1:%d (rank 0): "
	         "address already in use", port);
	ck_assert_msg(!strncmp(err.msg, want, strlen(want)), "message: %s", err.msg);
	ck_assert_ptr_nonnull(strstr(err.msg, "pick another master port"));
	close(fd);
}
END_TEST

/* ---- a barrier that a rank never reaches ---------------------------------- */

static int barrier_without_2(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 1500, &st, &err))
		return FAIL("new: %s", err.msg);
	double t0 = now_s();
	int rc = accelp_store_barrier(st, "step-1", 600, &err);
	snprintf(out, OUT_MAX, "%d %.3f|%.900s", rc, now_s() - t0, err.msg);
	accelp_store_free(st);
	return 0;
}

START_TEST(barrier_names_missing_rank)
{
	int port = free_port();
	ranks rs = {0};
	spawn(&rs, 0, 3, port, barrier_without_2);
	spawn(&rs, 1, 3, port, barrier_without_2);
	for (int k = 0; k < 2; k++) {
		char out[1024];
		ck_assert_int_eq(join(&rs, k, out, sizeof(out)), 0);
		int rc;
		double dt;
		ck_assert_int_eq(sscanf(out, "%d %lf|", &rc, &dt), 2);
		ck_assert_int_eq(rc, ACCEL_ERR_TIMEOUT);
		ck_assert_msg(dt >= 0.55 && dt < 3.0, "timed out after %.3f s", dt);
		char want[256];
		snprintf(want, sizeof(want), "store barrier 'step-1' (rank %d): timed out after 0.6 s; "
		         "missing ranks: 2 (of 3); never connected to the store: 2", k);
		ck_assert_str_eq(strchr(out, '|') + 1, want);
	}
}
END_TEST

/* ---- a rank that dies before the barrier ----------------------------------- */

static int dies_or_waits(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 10000, &st, &err))
		return FAIL("new: %s", err.msg);
	if (accelp_store_barrier(st, "connected", 10000, &err))
		return FAIL("first barrier: %s", err.msg);
	if (rank == 2) {
		usleep(200000);
		raise(SIGKILL); /* no goodbye */
	}
	double t0 = now_s();
	int rc = accelp_store_barrier(st, "step-2", 10000, &err);
	snprintf(out, OUT_MAX, "%d %.3f|%.900s", rc, now_s() - t0, err.msg);
	accelp_store_free(st);
	return 0;
}

START_TEST(barrier_fails_fast_when_rank_dies)
{
	int port = free_port();
	ranks rs = {0};
	for (int r = 0; r < 3; r++)
		spawn(&rs, r, 3, port, dies_or_waits);
	for (int k = 0; k < 2; k++) {
		char out[1024];
		ck_assert_int_eq(join(&rs, k, out, sizeof(out)), 0);
		int rc;
		double dt;
		ck_assert_int_eq(sscanf(out, "%d %lf|", &rc, &dt), 2);
		ck_assert_int_eq(rc, ACCEL_ERR_PEER);
		/* well before the 10 s timeout */
		ck_assert_msg(dt < 3.0, "noticed after %.3f s", dt);
		char want[256];
		snprintf(want, sizeof(want), "store barrier 'step-2' (rank %d): a rank left the job "
		         "before reaching it; missing ranks: 2 (of 3); left the store: 2 (exited or "
		         "crashed)", k);
		ck_assert_str_eq(strchr(out, '|') + 1, want);
	}
	int st;
	ck_assert_int_eq(waitpid(rs.pid[2], &st, 0), rs.pid[2]);
	close(rs.pipe[2]);
	ck_assert(WIFSIGNALED(st));
}
END_TEST

/* ---- rank 0 (the server) dies ---------------------------------------------- */

static int server_dies(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 10000, &st, &err))
		return FAIL("new: %s", err.msg);
	if (accelp_store_barrier(st, "up", 10000, &err))
		return FAIL("barrier: %s", err.msg);
	if (rank == 0) {
		usleep(200000);
		_exit(0); /* the store thread dies with the process */
	}
	char buf[8];
	uint64_t len;
	double t0 = now_s();
	int rc = accelp_store_get(st, "never", buf, sizeof(buf), &len, 10000, &err);
	snprintf(out, OUT_MAX, "%d %.3f|%.900s", rc, now_s() - t0, err.msg);
	/* later calls fail at once with the same story */
	accel_err e2 = {0};
	int rc2 = accelp_store_set(st, "x", "y", 1, &e2);
	if (rc2 != ACCEL_ERR_COMM || strcmp(e2.msg, err.msg))
		return FAIL("second call: %d %s", rc2, e2.msg);
	accelp_store_free(st);
	return 0;
}

START_TEST(server_death_is_reported)
{
	int port = free_port();
	ranks rs = {0};
	spawn(&rs, 0, 2, port, server_dies);
	spawn(&rs, 1, 2, port, server_dies);
	char out[1024];
	ck_assert_int_eq(join(&rs, 0, out, sizeof(out)), 0);
	ck_assert_int_eq(join(&rs, 1, out, sizeof(out)), 0);
	int rc;
	double dt;
	ck_assert_int_eq(sscanf(out, "%d %lf|", &rc, &dt), 2);
	ck_assert_int_eq(rc, ACCEL_ERR_COMM);
	ck_assert_msg(dt < 3.0, "noticed after %.3f s", dt);
	char want[256];
	snprintf(want, sizeof(want), "lost the connection to the rendezvous store at 127.0.0.1:%d "
	         "(rank 1): connection reset by peer; rank 0 hosts the store: did it exit?", port);
	ck_assert_str_eq(strchr(out, '|') + 1, want);
}
END_TEST

/* ---- two processes claim the same rank; world sizes disagree -------------- */

static int plain_rank0(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 3000, &st, &err))
		return FAIL("new: %s", err.msg);
	usleep(1500000);
	accelp_store_free(st);
	return 0;
}

START_TEST(duplicate_rank_and_world_mismatch)
{
	int port = free_port();
	ranks rs = {0};
	spawn(&rs, 0, 3, port, plain_rank0);
	accel_err err = {0};
	accel_store *a = NULL, *b = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 1, 3, 3000, &a, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 1, 3, 3000, &b, &err), ACCEL_ERR_STATE);
	ck_assert_str_eq(err.msg, "rank 1 is already connected to the rendezvous store: are two "
	                 "processes using the same rank, or is another job on this port?");
	ck_assert_ptr_null(b);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 2, 5, 3000, &b, &err), ACCEL_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "rank 2 was started with world size 5 but the "
	                             "rendezvous store (rank 0) has world size 3"));
	a = accelp_store_free(a);
	char out[256];
	ck_assert_int_eq(join(&rs, 0, out, sizeof(out)), 0);
}
END_TEST

/* ---- many threads share one client ----------------------------------------- */

static void *adder(void *arg)
{
	accel_store *st = arg;
	accel_err err = {0};
	for (int i = 0; i < 200; i++) {
		int64_t v;
		if (accelp_store_add(st, "shared", 1, &v, &err) != ACCEL_OK)
			return (void *)1;
	}
	return NULL;
}

START_TEST(thread_safe_client)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("localhost", port, 0, 1, 5000, &st, &err), ACCEL_OK);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, adder, st), 0);
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(t[i], &r);
		ck_assert_ptr_null(r);
	}
	int64_t v;
	ck_assert_int_eq(accelp_store_add(st, "shared", 0, &v, &err), ACCEL_OK);
	ck_assert_int_eq(v, 800);
	accelp_store_free(st);
}
END_TEST

/* A thread blocked in get must not keep another thread of the same rank
 * from setting the key it waits for. */
static void *set_later(void *arg)
{
	accel_store *st = arg;
	accel_err err = {0};
	usleep(200000);
	if (accelp_store_set(st, "from-thread", "42", 2, &err) != ACCEL_OK)
		return (void *)1;
	return NULL;
}

START_TEST(blocked_get_leaves_other_threads_free)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 1, 5000, &st, &err), ACCEL_OK);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, set_later, st), 0);
	char buf[8] = {0};
	uint64_t len = 0;
	double t0 = now_s();
	ck_assert_int_eq(accelp_store_get(st, "from-thread", buf, 7, &len, 5000, &err), ACCEL_OK);
	double dt = now_s() - t0;
	void *r;
	pthread_join(t, &r);
	ck_assert_ptr_null(r);
	ck_assert_str_eq(buf, "42");
	ck_assert_uint_eq(len, 2);
	ck_assert_msg(dt > 0.1 && dt < 2.0, "get returned after %.3f s", dt);
	accelp_store_free(st);
}
END_TEST

/* ---- IPv6 loopback ----------------------------------------------------------- */

static int v6_rank(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("::1", port, rank, world, 5000, &st, &err))
		return FAIL("new: %s", err.msg);
	if (accelp_store_barrier(st, "v6", 5000, &err))
		return FAIL("barrier: %s", err.msg);
	accelp_store_free(st);
	return 0;
}

/* A free port on ::1, or 0 where IPv6 loopback cannot be bound. */
static int v6_free_port(void)
{
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	socklen_t sl = sizeof(sa);
	int port = 0;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin6_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Run by `test-store --ipv6` (meson test store-ipv6), which exits 77 before
 * it gets here where IPv6 loopback is not available. */
START_TEST(ipv6_loopback)
{
	int port = v6_free_port();
	ck_assert_int_gt(port, 0);
	ranks rs = {0};
	spawn(&rs, 0, 2, port, v6_rank);
	spawn(&rs, 1, 2, port, v6_rank);
	char out[256];
	ck_assert_int_eq(join(&rs, 0, out, sizeof(out)), 0);
	ck_assert_int_eq(join(&rs, 1, out, sizeof(out)), 0);
}
END_TEST

/* ---- a port the kernel picks (the store of a job started by mpirun) -------- */

#define JOB_TOKEN UINT64_C(0x5eed0fa11ce0b0e5)

static int eph_rank(int rank, int world, int port, char *out)
{
	accel_err err = {0};
	accel_store *st = NULL;
	char buf[16] = {0};
	uint64_t len = 0;
	/* without the job's token: refused before it counts as rank 1 */
	if (accelp_store_new("127.0.0.1", port, rank, world, 5000, &st, &err) != ACCEL_ERR_CONFIG ||
	    !strstr(err.msg, "belongs to another job"))
		return FAIL("rank %d without the token: '%s'", rank, err.msg);
	accelp_err_clear(&err);
	/* with a wrong one too */
	if (accelp_store_join("127.0.0.1", port, rank, world, 5000, 5000, 0, JOB_TOKEN + 1, &st,
	                     &err) != ACCEL_ERR_CONFIG)
		return FAIL("rank %d with a wrong token: '%s'", rank, err.msg);
	accelp_err_clear(&err);
	/* any loopback address: the server listens on every interface */
	if (accelp_store_join("127.0.0.2", port, rank, world, 5000, 5000, 0, JOB_TOKEN, &st, &err))
		return FAIL("rank %d: join: %s", rank, err.msg);
	if (accelp_store_get(st, "from0", buf, sizeof(buf) - 1, &len, 5000, &err) ||
	    strcmp(buf, "hello"))
		return FAIL("rank %d: get: '%s' %s", rank, buf, err.msg);
	if (accelp_store_barrier(st, "b", 5000, &err))
		return FAIL("rank %d: barrier: %s", rank, err.msg);
	accelp_store_free(st);
	return 0;
}

static int connects(int family, const char *ip, int port)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, ip, &a->sin_addr);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		inet_pton(AF_INET6, ip, &a->sin6_addr);
		sl = sizeof(*a);
	}
	int fd = socket(family, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	int ok = connect(fd, (struct sockaddr *)&ss, sl) == 0;
	close(fd);
	return ok;
}

/* A client that retries a port nothing listens on yet can be connected to
 * itself (the kernel picked that port as its source: seen after 38970
 * tries at a launcher's port + 1); sock_is_self tells, so that sock_connect
 * and the node launchers drop it instead of talking to themselves and
 * keeping the server from binding the port.  Made here on purpose: a
 * socket bound to a port and connected to that same address. */
START_TEST(self_connection_is_told)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	              "connect to itself: %s", strerror(errno));
	ck_assert_int_eq(sock_is_self(fd), 1);
	close(fd);
	/* an ordinary connection over loopback is not */
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_port = 0;
	sl = sizeof(sa);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	int afd = accept(lfd, NULL, NULL);
	ck_assert_int_ge(afd, 0);
	ck_assert_int_eq(sock_is_self(fd), 0);
	ck_assert_int_eq(sock_is_self(afd), 0);
	close(afd);
	close(fd);
	close(lfd);
	/* nor is a socket that is not connected */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(sock_is_self(fd), 0);
	close(fd);
}
END_TEST

START_TEST(free_port_chosen_by_the_kernel)
{
	accel_err err = {0};
	accel_store *st = NULL;
	/* every interface, a free port, rank 0 connected over loopback */
	ck_assert_int_eq(accelp_store_new_host(2, 5000, 0, JOB_TOKEN, &st, &err), ACCEL_OK);
	int port = accelp_store_port(st);
	ck_assert_int_gt(port, 0);
	/* a launcher's exit report (an observer) without the token is refused
	 * too: it must not mark rank 1 as gone before it joins */
	ck_assert_int_eq(accelp_store_report_exit("127.0.0.1", port, 2, 1, "exited with status 0",
	                                         2000, &err),
	                 ACCEL_ERR_CONFIG);
	ck_assert_msg(strstr(err.msg, "belongs to another job"), "%s", err.msg);
	accelp_err_clear(&err);
	ranks rs = {0};
	spawn(&rs, 1, 2, port, eph_rank);
	ck_assert_int_eq(accelp_store_set(st, "from0", "hello", 5, &err), ACCEL_OK);
	ck_assert_msg(accelp_store_barrier(st, "b", 5000, &err) == ACCEL_OK, "%s", err.msg);
	char out[64];
	ck_assert_int_eq(join(&rs, 0, out, sizeof(out)), 0);
	st = accelp_store_free(st);

	/* port 0 on a loopback name that has an IPv6 and an IPv4 address: both
	 * listeners take the same port */
	ck_assert_int_eq(accelp_store_new("localhost", 0, 0, 1, 5000, &st, &err), ACCEL_OK);
	port = accelp_store_port(st);
	ck_assert_int_gt(port, 0);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	ck_assert_int_eq(getaddrinfo("localhost", NULL, &hints, &res), 0);
	int v4 = 0, v6 = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		v4 |= ai->ai_family == AF_INET;
		v6 |= ai->ai_family == AF_INET6;
	}
	freeaddrinfo(res);
	/* ::1 only where IPv6 loopback works: /etc/hosts may name it when
	 * IPv6 is off, and the server then rightly serves IPv4 alone */
	int pf = v6 ? socket(AF_INET6, SOCK_STREAM, 0) : -1;
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	if (pf < 0 || bind(pf, (struct sockaddr *)&s6, sizeof(s6)) < 0)
		v6 = 0;
	if (pf >= 0)
		close(pf);
	if (v4)
		ck_assert_msg(connects(AF_INET, "127.0.0.1", port) == 1, "127.0.0.1:%d refused", port);
	if (v6)
		ck_assert_msg(connects(AF_INET6, "::1", port) == 1, "[::1]:%d refused", port);
	st = accelp_store_free(st);
}
END_TEST

/* A store the job gives up on (a rank could not connect) stops at once,
 * not after its timeout waiting for the rank that never came. */
START_TEST(abandon_does_not_wait_for_missing_ranks)
{
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new_host(3, 30000, 0, 7, &st, &err), ACCEL_OK);
	double t0 = now_s();
	ck_assert_ptr_null(accelp_store_abandon(st));
	double dt = now_s() - t0;
	ck_assert_msg(dt < 3.0, "abandon took %.2f s", dt);
	ck_assert_ptr_null(accelp_store_abandon(NULL));
}
END_TEST

/* accelp_store_join bounds the connect and the reply together, with no
 * slack: a port where something accepts and never answers costs the join
 * time, not the usual 5 s more. */
START_TEST(join_is_bounded)
{
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	socklen_t sl = sizeof(sa);
	getsockname(lfd, (struct sockaddr *)&sa, &sl);
	int port = ntohs(sa.sin_port);
	accel_err err = {0};
	accel_store *st = NULL;
	double t0 = now_s();
	int rc = accelp_store_join("127.0.0.1", port, 1, 2, 500, 60000, 0, 9, &st, &err);
	double dt = now_s() - t0;
	ck_assert_int_eq(rc, ACCEL_ERR_TIMEOUT);
	ck_assert_ptr_null(st);
	ck_assert_msg(dt >= 0.4 && dt < 2.0, "join within 0.5 s took %.2f s: %s", dt, err.msg);
	ck_assert_msg(strstr(err.msg, "no reply from the rendezvous store"), "%s", err.msg);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_join("127.0.0.1", port, 1, 2, 0, 1000, 0, 9, &st, &err),
	                 ACCEL_ERR_INVALID_ARG);
	close(lfd);
	/* nobody listening: refused is final for a join (the server listens
	 * before it sends its address), no retrying until the time is up */
	accelp_err_clear(&err);
	t0 = now_s();
	rc = accelp_store_join("127.0.0.1", port, 1, 2, 3000, 60000, 0, 9, &st, &err);
	dt = now_s() - t0;
	ck_assert_int_eq(rc, ACCEL_ERR_COMM);
	ck_assert_msg(dt < 1.0 && strstr(err.msg, "connection refused"),
	              "a refused join took %.2f s: %s", dt, err.msg);
}
END_TEST

/* INT64_MAX as a timeout means "no limit": deadlines saturate instead of
 * overflowing (found by tests/fuzz/fuzz-store: a barrier request with that
 * timeout overflowed the server's deadline; UBSan in make test-asan). */
START_TEST(huge_timeouts_mean_forever)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 1, INT64_MAX, &st, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_store_set(st, "k", "v", 1, &err), ACCEL_OK);
	char buf[4];
	uint64_t len = 0;
	ck_assert_int_eq(accelp_store_get(st, "k", buf, sizeof(buf), &len, INT64_MAX, &err), ACCEL_OK);
	ck_assert_uint_eq(len, 1);
	const char *keys[] = {"k"};
	ck_assert_int_eq(accelp_store_wait(st, keys, 1, INT64_MAX, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_store_barrier(st, "b", INT64_MAX, &err), ACCEL_OK);
	ck_assert_msg(err.code == ACCEL_OK, "%s", err.msg);
	accelp_store_free(st);
}
END_TEST

/* The launcher reports a rank that exited before it ever connected: waits
 * that need the whole job fail at once, naming it; a report about a rank
 * that did connect changes nothing. */
typedef struct parked_get {
	accel_store *st;
	int rc;
	double took;
	char msg[ACCEL_ERRMSG_MAX];
} parked_get;

static void *park_get(void *arg)
{
	parked_get *g = arg;
	accel_err e = {0};
	char buf[8];
	double t0 = now_s();
	g->rc = accelp_store_get(g->st, "never-set", buf, sizeof(buf), NULL, 20000, &e);
	g->took = now_s() - t0;
	snprintf(g->msg, sizeof(g->msg), "%s", e.msg);
	return NULL;
}

START_TEST(exit_report_fails_waiters)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	/* (3 s: how long rank 0's store waits at free for rank 1, which never comes) */
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 3, 3000, &st, &err), ACCEL_OK);
	/* rank 0 is connected: a report about it is ignored */
	ck_assert_int_eq(accelp_store_report_exit("127.0.0.1", port, 3, 0, "exited with status 0",
	                                         2000, &err), ACCEL_OK);
	char buf[400];
	uint64_t len = 0;
	ck_assert_int_eq(accelp_store_get(st, "accel/job/failed", buf, sizeof(buf), &len, 0, &err),
	                 ACCEL_ERR_NOT_FOUND);
	accelp_err_clear(&err);

	parked_get g = {.st = st};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, park_get, &g), 0);
	usleep(200000);
	ck_assert_int_eq(accelp_store_report_exit("127.0.0.1", port, 3, 2, "exited with status 0",
	                                         2000, &err), ACCEL_OK);
	pthread_join(t, NULL);
	ck_assert_int_eq(g.rc, ACCEL_ERR_PEER);
	ck_assert_str_eq(g.msg, "store get 'never-set' (rank 0) cannot complete: rank 2 exited with "
	                 "status 0 before it joined the job (it never connected to the rendezvous "
	                 "store)");
	ck_assert_msg(g.took < 5.0, "the parked get took %.1f s", g.took);

	/* later waits fail at once; set keys are still served */
	ck_assert_int_eq(accelp_store_get(st, "accel/job/failed", buf, sizeof(buf) - 1, &len, 0, &err),
	                 ACCEL_OK);
	buf[len] = '\0';
	ck_assert_str_eq(buf, "rank 2 exited with status 0 before it joined the job (it never "
	                 "connected to the rendezvous store)");
	double t0 = now_s();
	ck_assert_int_eq(accelp_store_barrier(st, "b", 20000, &err), ACCEL_ERR_PEER);
	ck_assert_msg(strstr(err.msg, "exited before joining the job: 2"), "%s", err.msg);
	accelp_err_clear(&err);
	const char *keys[] = {"nope"};
	ck_assert_int_eq(accelp_store_wait(st, keys, 1, 20000, &err), ACCEL_ERR_PEER);
	ck_assert_msg(now_s() - t0 < 5.0, "later waits took %.1f s", now_s() - t0);
	accelp_err_clear(&err);
	/* bad reports */
	ck_assert_int_eq(accelp_store_report_exit("127.0.0.1", port, 3, 3, "x", 2000, &err),
	                 ACCEL_ERR_INVALID_ARG);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_store_report_exit("127.0.0.1", port, 4, 1, "x", 2000, &err),
	                 ACCEL_ERR_CONFIG);
	accelp_store_free(st);
}
END_TEST

/* A rank whose context could not be created reports it (accelp_store_fail):
 * the others' waits fail at once with its reason, not at their timeouts. */
START_TEST(failed_rank_fails_waiters)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st0 = NULL, *st1 = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 2, 20000, &st0, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 1, 2, 20000, &st1, &err), ACCEL_OK);
	parked_get g = {.st = st0};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, park_get, &g), 0);
	usleep(200000);
	ck_assert_int_eq(accelp_store_fail(st1, "backend 'nccl' found no GPU"), ACCEL_OK);
	pthread_join(t, NULL);
	ck_assert_int_eq(g.rc, ACCEL_ERR_PEER);
	ck_assert_str_eq(g.msg, "store get 'never-set' (rank 0) cannot complete: rank 1 failed: "
	                 "backend 'nccl' found no GPU");
	ck_assert_msg(g.took < 5.0, "the parked get took %.1f s", g.took);
	double t0 = now_s();
	ck_assert_int_eq(accelp_store_barrier(st0, "b", 20000, &err), ACCEL_ERR_PEER);
	accelp_err_clear(&err);
	ck_assert_msg(now_s() - t0 < 5.0, "the barrier took %.1f s", now_s() - t0);
	accelp_store_free(st1);
	t0 = now_s();
	accelp_store_free(st0);
	ck_assert_msg(now_s() - t0 < 5.0, "rank 0's store took %.1f s to stop", now_s() - t0);
}
END_TEST

/* A rank that is gone without saying goodbye (crashed, killed, exited
 * without accel_ctx_free) fails the others' gets at once and records why
 * under accel/job/failed, without a launcher reporting anything. */
static int connects_then_vanishes(int rank, int world, int port, char *out)
{
	(void)out;
	accel_err err = {0};
	accel_store *st = NULL;
	if (accelp_store_new("127.0.0.1", port, rank, world, 20000, &st, &err))
		return FAIL("new: %s", err.msg);
	usleep(300000);
	_exit(0); /* no accelp_store_free: no BYE */
}

START_TEST(vanished_rank_fails_waiters)
{
	int port = free_port();
	ranks rs = {0};
	spawn(&rs, 1, 2, port, connects_then_vanishes);
	accel_err err = {0};
	accel_store *st0 = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 2, 20000, &st0, &err), ACCEL_OK);
	parked_get g = {.st = st0};
	park_get(&g);
	const char *why = "rank 1 lost its connection to the rendezvous store without leaving "
	                  "the job (it crashed, was killed, or exited without accel_ctx_free)";
	char want[512];
	ck_assert_int_eq(g.rc, ACCEL_ERR_PEER);
	snprintf(want, sizeof(want), "store get 'never-set' (rank 0) cannot complete: %s", why);
	ck_assert_str_eq(g.msg, want);
	ck_assert_msg(g.took < 5.0, "the parked get took %.1f s", g.took);
	char buf[400];
	uint64_t len = 0;
	ck_assert_int_eq(accelp_store_get(st0, "accel/job/failed", buf, sizeof(buf) - 1, &len, 1000,
	                                 &err), ACCEL_OK);
	buf[len] = 0;
	ck_assert_str_eq(buf, why);
	char out[64];
	ck_assert_int_eq(join(&rs, 0, out, sizeof(out)), 0);
	double t0 = now_s();
	accelp_store_free(st0);
	ck_assert_msg(now_s() - t0 < 5.0, "rank 0's store took %.1f s to stop", now_s() - t0);
}
END_TEST

/* Rank 0 hosts the store; when its own context fails, the ranks waiting in
 * the store hear why at once, and rank 0 stops the store without waiting
 * for them until the timeout. */
START_TEST(rank0_failure_reaches_waiters)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st0 = NULL, *st1 = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 2, 20000, &st0, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 1, 2, 20000, &st1, &err), ACCEL_OK);
	parked_get g = {.st = st1};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, park_get, &g), 0);
	usleep(200000);
	ck_assert_int_eq(accelp_store_fail(st0, "config: bad value"), ACCEL_OK);
	double t0 = now_s();
	accelp_store_free(st0); /* rank 1 is still connected */
	double took = now_s() - t0;
	pthread_join(t, NULL);
	ck_assert_int_eq(g.rc, ACCEL_ERR_PEER);
	ck_assert_str_eq(g.msg, "store get 'never-set' (rank 1) cannot complete: rank 0 failed: "
	                 "config: bad value");
	ck_assert_msg(took < 5.0, "rank 0's store took %.1f s to stop (timeout 20 s)", took);
	accelp_store_free(st1);
}
END_TEST

/* ---- a client that does not follow the protocol ------------------------------ */

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static int send_all_raw(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A raw connection that introduced itself as `rank` of `world`. */
static int raw_client(int port, int rank, int world)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	unsigned char b[25], r[8];
	put32(b, 21);
	b[4] = 1; /* HELLO */
	put32(b + 5, 0x41435354u);
	put32(b + 9, 1);
	put32(b + 13, (uint32_t)rank);
	put32(b + 17, (uint32_t)world);
	put32(b + 21, 0);
	ck_assert_int_eq(send_all_raw(fd, b, sizeof(b)), 0);
	ck_assert_int_eq(recv(fd, r, sizeof(r), MSG_WAITALL), (ssize_t)sizeof(r));
	return fd;
}

/* GET frame for key k with timeout t ms. */
static size_t get_frame(unsigned char *b, const char *k, int64_t t)
{
	uint32_t kl = (uint32_t)strlen(k);
	put32(b, 1 + 8 + 4 + kl);
	b[4] = 3; /* GET */
	put32(b + 5, (uint32_t)((uint64_t)t >> 32));
	put32(b + 9, (uint32_t)t);
	put32(b + 13, kl);
	memcpy(b + 17, k, kl);
	return 17 + kl;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

/* Requests sent without reading the replies are answered one at a time:
 * the store does not queue a reply per request (64 replies of 4 MiB here
 * were 256 MiB of rank 0's memory). */
START_TEST(unread_replies_are_not_queued)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 2, 20000, &st, &err), ACCEL_OK);
	size_t vl = 4u << 20;
	void *v = calloc(1, vl);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(accelp_store_set(st, "big", v, vl, &err), ACCEL_OK);
	free(v);
	long before = rss_kb();
	int fd = raw_client(port, 1, 2);
	unsigned char fr[64];
	size_t fl = get_frame(fr, "big", 0);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(send_all_raw(fd, fr, fl), 0);
	usleep(500000);
	long grew = rss_kb() - before;
	ck_assert_msg(grew < 64 * 1024, "rank 0 grew by %ld MiB", grew / 1024);
	/* the store still serves the others */
	int64_t val;
	ck_assert_int_eq(accelp_store_add(st, "ctr", 1, &val, &err), ACCEL_OK);
	close(fd);
	accelp_store_free(st);
}
END_TEST

/* A client that sends on while its request is parked is dropped once it
 * has sent more than the largest frame, instead of being buffered without
 * end. */
START_TEST(client_sending_while_parked_is_dropped)
{
	int port = free_port();
	accel_err err = {0};
	accel_store *st = NULL;
	ck_assert_int_eq(accelp_store_new("127.0.0.1", port, 0, 2, 20000, &st, &err), ACCEL_OK);
	int fd = raw_client(port, 1, 2);
	unsigned char fr[64];
	size_t fl = get_frame(fr, "never", 60000);
	ck_assert_int_eq(send_all_raw(fd, fr, fl), 0);
	usleep(100000);
	char *junk = calloc(1, 1 << 20);
	ck_assert_ptr_nonnull(junk);
	int sent = 0;
	for (; sent < 96; sent++)
		if (send_all_raw(fd, junk, 1 << 20) < 0)
			break;
	free(junk);
	/* dropped: the connection ends (EOF or reset), with no reply */
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	ck_assert_msg(poll(&pf, 1, 5000) == 1, "the store kept the connection after %d MiB", sent);
	char b[8];
	ck_assert_int_le(recv(fd, b, sizeof(b), 0), 0);
	close(fd);
	int64_t val;
	ck_assert_int_eq(accelp_store_add(st, "ctr", 1, &val, &err), ACCEL_OK);
	accelp_store_free(st);
}
END_TEST

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, four_ranks_every_op);
	tcase_add_test(tc, get_waits_for_set);
	tcase_add_test(tc, timeouts_and_messages);
	tcase_add_test(tc, bad_arguments);
	tcase_add_test(tc, unreachable_store);
	tcase_add_test(tc, port_in_use);
	tcase_add_test(tc, barrier_names_missing_rank);
	tcase_add_test(tc, barrier_fails_fast_when_rank_dies);
	tcase_add_test(tc, server_death_is_reported);
	tcase_add_test(tc, duplicate_rank_and_world_mismatch);
	tcase_add_test(tc, thread_safe_client);
	tcase_add_test(tc, blocked_get_leaves_other_threads_free);
	tcase_add_test(tc, free_port_chosen_by_the_kernel);
	tcase_add_test(tc, self_connection_is_told);
	tcase_add_test(tc, abandon_does_not_wait_for_missing_ranks);
	tcase_add_test(tc, join_is_bounded);
	tcase_add_test(tc, huge_timeouts_mean_forever);
	tcase_add_test(tc, exit_report_fails_waiters);
	tcase_add_test(tc, failed_rank_fails_waiters);
	tcase_add_test(tc, vanished_rank_fails_waiters);
	tcase_add_test(tc, rank0_failure_reaches_waiters);
	tcase_add_test(tc, unread_replies_are_not_queued);
	tcase_add_test(tc, client_sending_while_parked_is_dropped);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	Suite *suite;
	if (argc == 1) {
		suite = store_suite();
	} else if (argc == 2 && !strcmp(argv[1], "--ipv6")) {
		/* IPv6 loopback is an outside prerequisite: a SKIP of its own. */
		if (!v6_free_port()) {
			printf("skipped: no IPv6 loopback on this machine (cannot bind [::1])\n");
			return 77;
		}
		suite = suite_create("store-ipv6");
		TCase *tc = tcase_create("ipv6");
		tcase_set_timeout(tc, 60);
		tcase_add_test(tc, ipv6_loopback);
		suite_add_tcase(suite, tc);
	} else {
		fprintf(stderr, "usage: test-store [--ipv6]\n");
		return 2;
	}
	SRunner *sr = srunner_create(suite);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
