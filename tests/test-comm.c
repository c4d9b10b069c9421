/* SPDX-License-Identifier: MIT */
/* tests/test-comm.c: collectives — the shm backend and the core comm layer.
 *
 * Part 1 drives comm-shm.so directly: a harness forks N processes, each
 * loads the module the way the core does (dlopen + accel_comm_entry_v1)
 * with a minimal host table whose rendezvous store is a directory of
 * files.  Every op x dtype x reduction x in/out of place x size is checked
 * bit for bit against a sequential reference that every rank computes from
 * the inputs (which are a function of rank and index), on 2, 3 and 4 ranks,
 * on ordinary and on backend-allocated buffers; then the failure paths:
 * kill -9 of a rank in the middle of a collective, a rank that leaves early,
 * timeouts, mismatched collectives, bad arguments, and /dev/shm leftovers.
 *
 * Part 2 runs the same checks through libaccel (accel_ctx_new, accel_comm_*
 * and the public accel_allreduce...) in N processes started by
 * `accel launch -n N` (tests/progs/comm-check.c); a launcher or context
 * that cannot start ranks fails them. */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "accel/accel.h"
#include "accel/comm.h"
#include "backends/common/half.h"
#include "comm.h"
#include "ctx-impl.h"
#include "cuda_probe.h"

#include "launch-ranks.h"
#include "progs/comm-check.h"

/* ---- the harness: a minimal host ------------------------------------------------ */

typedef struct harness_host {
	int err_code;
	char err[4096];
} harness_host;

static int g_rank, g_world;
static char g_root[128];          /* per test-program temp directory */
static char g_store[320];         /* store directory of the current world */
static int64_t g_cfg_small_kb = -1, g_cfg_chunk_kb = -1, g_cfg_spin_us = -1;
static int64_t g_cfg_stream_kb = -1;
/* rank g_odd_rank (>= 0) reads these small_kb/chunk_kb instead */
static int g_odd_rank = -1;
static int64_t g_odd_small_kb, g_odd_chunk_kb;
/* rank g_late_rank (>= 0) sleeps g_late_ms before its init */
static int g_late_rank = -1, g_late_ms;
/* below run_world()'s limits, so a stuck collective reports itself */
static int64_t g_timeout_ms = 30000;

static void h_log(accel_host *h, int32_t level, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static void h_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	(void)h;
	if (level > ACCEL_LOG_WARN && !getenv("ACCEL_TEST_VERBOSE"))
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[rank %d] log %d: ", g_rank, (int)level);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int h_error(accel_host *h, int32_t code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int h_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	harness_host *hh = (harness_host *)h;
	va_list ap;
	if (!hh || hh->err_code)
		return code;
	hh->err_code = code;
	va_start(ap, fmt);
	vsnprintf(hh->err, sizeof(hh->err), fmt, ap);
	va_end(ap);
	if (getenv("ACCEL_TEST_VERBOSE"))
		fprintf(stderr, "[rank %d] error %d: %s\n", g_rank, (int)code, hh->err);
	return code;
}

static int h_world(accel_host *h, accel_world_v1 *w)
{
	(void)h;
	w->rank = g_rank;
	w->world_size = g_world;
	w->local_rank = g_rank;
	w->local_world_size = g_world;
	w->node_rank = 0;
	w->num_nodes = 1;
	return ACCEL_OK;
}

static int h_cfg_int(accel_host *h, const char *key, int64_t *ret)
{
	(void)h;
	int64_t v = -1;
	if (!strcmp(key, "small_kb"))
		v = g_rank == g_odd_rank ? g_odd_small_kb : g_cfg_small_kb;
	else if (!strcmp(key, "chunk_kb"))
		v = g_rank == g_odd_rank ? g_odd_chunk_kb : g_cfg_chunk_kb;
	else if (!strcmp(key, "spin_us"))
		v = g_cfg_spin_us;
	else if (!strcmp(key, "stream_kb"))
		v = g_cfg_stream_kb;
	if (v < 0)
		return ACCEL_ERR_NOT_FOUND;
	*ret = v;
	return ACCEL_OK;
}

#define FILE_STORE_DIR(h) ((void)(h), g_store)
#include "file-store.h"

static accel_host_v1 g_host_table;
static const accel_comm_v1 *B;

static const accel_comm_v1 *load_backend(void)
{
	char path[4096];
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	snprintf(path, sizeof(path), "%s/backends/shm/comm-shm.so", bd ? bd : ".");
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
		return NULL;
	}
	const accel_comm_v1 *(*entry)(const accel_host_v1 *) =
		(const accel_comm_v1 *(*)(const accel_host_v1 *))dlsym(dl, ACCEL_COMM_ENTRY_V1);
	if (!entry)
		return NULL;
	g_host_table.struct_size = sizeof(g_host_table);
	g_host_table.abi_major = ACCEL_ABI_MAJOR;
	g_host_table.abi_minor = ACCEL_ABI_MINOR;
	g_host_table.accel_version = "test";
	g_host_table.log = h_log;
	g_host_table.error = h_error;
	g_host_table.world = h_world;
	g_host_table.cfg_int = h_cfg_int;
	g_host_table.store_set = fs_set;
	g_host_table.store_get = fs_get;
	g_host_table.store_add = fs_add;
	return entry(&g_host_table);
}

/* One rank's view of the world under test. */
typedef struct rank_env {
	harness_host hh;
	void *st;
	int failures;
} rank_env;

typedef void (*rank_fn)(rank_env *env, void *arg);

#define FAIL(env, ...)                                                                    \
	do {                                                                              \
		fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);   \
		fprintf(stderr, __VA_ARGS__);                                             \
		fputc('\n', stderr);                                                      \
		(env)->failures++;                                                        \
	} while (0)

static void clear_err(rank_env *env)
{
	env->hh.err_code = 0;
	env->hh.err[0] = '\0';
}

/* Write what a rank saw, for the parent to assert on. */
static void report(const char *name, const char *fmt, ...) ACCEL_PRINTF(2, 3);
static void report(const char *name, const char *fmt, ...)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s-%d", g_store, name, g_rank);
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

static int read_report(const char *name, int rank, char *buf, size_t cap)
{
	return lr_read_report(g_store, name, rank, buf, cap);
}

typedef struct world_result {
	int n;
	pid_t pid[16];
	int status[16];     /* waitpid status */
	int timed_out;
} world_result;

static int g_world_counter;

/* Fork n ranks running fn; wait (at most limit_s) and fill res.  The store
 * directory stays until the next run so the caller can read reports. */
static void run_world(int n, rank_fn fn, void *arg, int limit_s, world_result *res)
{
	static char job[64];
	memset(res, 0, sizeof(*res));
	res->n = n;
	/* A directory nobody used before: pids repeat, and a store that still
	 * holds an earlier job's keys sends ranks to the wrong segment. */
	snprintf(g_store, sizeof(g_store), "%s/world-XXXXXX", g_root);
	if (!mkdtemp(g_store))
		ck_abort_msg("mkdtemp %s: %s", g_store, strerror(errno));
	snprintf(job, sizeof(job), "t%d-%d", (int)getpid(), g_world_counter++);
	fflush(NULL);
	for (int r = 0; r < n; r++) {
		pid_t pid = fork();
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			g_rank = r;
			g_world = n;
			rank_env env;
			memset(&env, 0, sizeof(env));
			if (r == 0) {
				char pid0[32];
				snprintf(pid0, sizeof(pid0), "%d", (int)getpid());
				fs_set(NULL, "test/pid0", pid0, strlen(pid0));
			}
			accel_comm_init_v1 a = {
				.struct_size = sizeof(a),
				.rank = r,
				.world_size = n,
				.local_rank = r,
				.local_world_size = n,
				.node_rank = 0,
				.num_nodes = 1,
				.device_index = -1,
				.timeout_ms = g_timeout_ms,
				.job_id = job,
			};
			if (r == g_late_rank)
				usleep((useconds_t)g_late_ms * 1000);
			int st = B->init(&g_host_table, (accel_host *)&env.hh, &a, &env.st);
			if (st) {
				fprintf(stderr, "[rank %d] init failed: %d %s\n", r, st, env.hh.err);
				report("init", "%d %s", st, env.hh.err);
				_exit(2);
			}
			fn(&env, arg);
			if (env.st)
				B->fini(env.st);
			fflush(NULL);
			_exit(env.failures ? 1 : 0);
		}
		res->pid[r] = pid;
	}
	time_t deadline = time(NULL) + limit_s;
	int left = n;
	while (left > 0) {
		int status;
		pid_t p = waitpid(-1, &status, WNOHANG);
		if (p > 0) {
			for (int r = 0; r < n; r++)
				if (res->pid[r] == p) {
					res->status[r] = status;
					left--;
				}
			continue;
		}
		if (time(NULL) > deadline) {
			res->timed_out = 1;
			for (int r = 0; r < n; r++)
				kill(res->pid[r], SIGKILL);
			while (waitpid(-1, &status, 0) > 0)
				;
			break;
		}
		usleep(2000);
	}
}

static void assert_all_ok(const world_result *res)
{
	ck_assert_msg(!res->timed_out, "the ranks did not finish in time");
	for (int r = 0; r < res->n; r++)
		ck_assert_msg(WIFEXITED(res->status[r]) && WEXITSTATUS(res->status[r]) == 0,
		              "rank %d: %s %d", r, WIFEXITED(res->status[r]) ? "exit" : "signal",
		              WIFEXITED(res->status[r]) ? WEXITSTATUS(res->status[r])
		                                        : WTERMSIG(res->status[r]));
}

/* Entries of /dev/shm created by the job whose rank 0 had pid `pid0`. */
static int shm_leftovers(long pid0, char *names, size_t cap)
{
	char prefix[64];
	int n = 0;
	size_t len = 0;
	snprintf(prefix, sizeof(prefix), "accel-shm-%ld-", pid0);
	names[0] = '\0';
	DIR *d = opendir("/dev/shm");
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		n++;
		if (len < cap)
			len += (size_t)snprintf(names + len, cap - len, "%s ", e->d_name);
	}
	closedir(d);
	return n;
}

/* ---- values and the reference ------------------------------------------------------- */

/* ---- the op matrix (run by every rank) ------------------------------------------------ */

typedef struct matrix_arg {
	int use_mem;          /* backend-allocated buffers */
	const uint64_t *sizes;
	int n_sizes;
	int all_reds_large;   /* every reduction also at the large sizes */
} matrix_arg;

static int b_allreduce(void *ctx, const accel_view *s, const accel_view *r, uint32_t op)
{
	rank_env *env = ctx;
	accel_comm_req *req = NULL;
	int st = B->allreduce(env->st, s, r, op, &req);
	return st ? st : B->wait(env->st, req);
}
static int b_reduce_scatter(void *ctx, const accel_view *s, const accel_view *r, uint32_t op)
{
	rank_env *env = ctx;
	accel_comm_req *req = NULL;
	int st = B->reduce_scatter(env->st, s, r, op, &req);
	return st ? st : B->wait(env->st, req);
}
static int b_allgather(void *ctx, const accel_view *s, const accel_view *r)
{
	rank_env *env = ctx;
	accel_comm_req *req = NULL;
	int st = B->allgather(env->st, s, r, &req);
	return st ? st : B->wait(env->st, req);
}
static int b_broadcast(void *ctx, const accel_view *buf, int root)
{
	rank_env *env = ctx;
	accel_comm_req *req = NULL;
	int st = B->broadcast(env->st, buf, root, &req);
	return st ? st : B->wait(env->st, req);
}
static const char *b_errmsg(void *ctx)
{
	return ((rank_env *)ctx)->hh.err;
}
static void b_clear(void *ctx)
{
	clear_err(ctx);
}
static int b_alloc(void *ctx, uint64_t bytes, void **ret)
{
	rank_env *env = ctx;
	return B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, bytes, ret);
}
static void b_free(void *ctx, void *p)
{
	rank_env *env = ctx;
	B->mem_free(env->st, p);
}

static const comm_check_ops k_backend_ops = {
	b_allreduce, b_reduce_scatter, b_allgather, b_broadcast, b_errmsg, b_clear, b_alloc, b_free,
};

static void rank_matrix(rank_env *env, void *varg)
{
	const matrix_arg *a = varg;
	comm_check cc = {
		.ops = &k_backend_ops,
		.ctx = env,
		.rank = g_rank,
		.world = g_world,
		.use_mem = a->use_mem,
		.sizes = a->sizes,
		.n_sizes = a->n_sizes,
		.all_reds_large = a->all_reds_large,
	};
	env->failures += comm_check_matrix(&cc);
}

/* Around the one-shot limit (64 KiB), pipelined, and several MiB (not
 * divisible by the world, nor by the pipeline chunk).  Three and four
 * ranks on two cores are slow, so they stop at 300007 elements (still
 * several MiB for reduce-scatter and all-gather). */
static const uint64_t k_sizes[] = {0, 1, 7, 1000, 16385, 100003, 300007, 1048589};

static void matrix_test(int world, int use_mem)
{
	matrix_arg a = {.use_mem = use_mem, .sizes = k_sizes,
	                .n_sizes = world == 2 ? 8 : 7,
	                .all_reds_large = world == 2};
	world_result res;
	run_world(world, rank_matrix, &a, 280, &res);
	assert_all_ok(&res);
	char names[512];
	ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0, "left in /dev/shm: %s",
	              names);
}

/* Streaming stores for every pipelined all-gather result (shm.stream_kb
 * 1; by default only results of 32 MiB and more, which the matrix does not
 * reach): odd counts put rank 1's block at unaligned addresses, so the
 * copy's head and tail are checked too, guard bytes included. */
static const uint64_t k_stream_sizes[] = {16385, 100003, 1048589};

START_TEST(matrix_stream_2)
{
	g_cfg_stream_kb = 1;
	matrix_arg a = {.use_mem = 0, .sizes = k_stream_sizes, .n_sizes = 3};
	world_result res;
	run_world(2, rank_matrix, &a, 280, &res);
	g_cfg_stream_kb = -1;
	assert_all_ok(&res);
}
END_TEST

START_TEST(matrix_2) { matrix_test(2, 0); }
END_TEST
START_TEST(matrix_3) { matrix_test(3, 0); }
END_TEST
START_TEST(matrix_4) { matrix_test(4, 0); }
END_TEST
START_TEST(matrix_mem_2) { matrix_test(2, 1); }
END_TEST
START_TEST(matrix_mem_3) { matrix_test(3, 1); }
END_TEST
START_TEST(matrix_mem_4) { matrix_test(4, 1); }
END_TEST

/* ---- failures ------------------------------------------------------------------------- */

static accel_view fview(void *p, uint64_t n)
{
	accel_view v = {.struct_size = sizeof(accel_view), .dtype = ACCEL_DTYPE_F32,
	                .device = ACCEL_DEVICE_CPU, .data = p, .numel = n};
	return v;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int small_allreduce(rank_env *env, float *x, uint64_t n)
{
	accel_view v = fview(x, n);
	accel_comm_req *req = NULL;
	int st = B->allreduce(env->st, &v, &v, ACCEL_RED_SUM, &req);
	return st ? st : B->wait(env->st, req);
}

#define BIG (16u << 20)   /* 64 MiB of f32 */

static void rank_kill9(rank_env *env, void *arg)
{
	int victim = *(int *)arg;
	float x[4] = {1, 2, 3, 4};
	if (small_allreduce(env, x, 4) || x[0] != (float)g_world)
		FAIL(env, "warm-up allreduce: %s", env->hh.err);
	float *big = calloc(BIG, sizeof(float));
	accel_view v = fview(big, BIG);
	accel_comm_req *req = NULL;
	double t0 = now_s();
	int st = B->allreduce(env->st, &v, &v, ACCEL_RED_SUM, &req);
	if (st) {
		FAIL(env, "issue: %s", env->hh.err);
		return;
	}
	if (g_rank == victim) {
		usleep(3000);   /* let the comm thread get into the pipeline */
		raise(SIGKILL);
	}
	st = B->wait(env->st, req);
	double took = now_s() - t0;
	report("kill9", "%d %.3f %s", st, took, env->hh.err);
	clear_err(env);
	/* afterwards every op fails at once */
	double t1 = now_s();
	int st2 = small_allreduce(env, x, 4);
	report("after", "%d %.3f %s", st2, now_s() - t1, env->hh.err);
	free(big);
}

START_TEST(kill9_mid_collective)
{
	int victim = 2;
	world_result res;
	g_timeout_ms = 30000;
	run_world(4, rank_kill9, &victim, 60, &res);
	ck_assert(!res.timed_out);
	ck_assert_msg(WIFSIGNALED(res.status[victim]) && WTERMSIG(res.status[victim]) == SIGKILL,
	              "the victim was not killed");
	for (int r = 0; r < 4; r++) {
		if (r == victim)
			continue;
		char buf[4096], want[64];
		int st;
		double took;
		ck_assert_msg(WIFEXITED(res.status[r]) && WEXITSTATUS(res.status[r]) == 0, "rank %d", r);
		ck_assert_int_eq(read_report("kill9", r, buf, sizeof(buf)), 0);
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st == ACCEL_ERR_PEER, "rank %d: status %d: %s", r, st, buf);
		snprintf(want, sizeof(want), "rank %d (pid %d) is dead", victim, (int)res.pid[victim]);
		ck_assert_msg(strstr(buf, want) != NULL, "rank %d: no '%s' in: %s", r, want, buf);
		ck_assert_msg(strstr(buf, "allreduce #2 (f32, 16777216 elements, sum)") != NULL,
		              "rank %d: op and sequence number missing: %s", r, buf);
		ck_assert_msg(took < 5.0, "rank %d needed %.1f s to notice", r, took);
		ck_assert_int_eq(read_report("after", r, buf, sizeof(buf)), 0);
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st == ACCEL_ERR_PEER && took < 0.1, "rank %d after the failure: %s", r, buf);
		ck_assert_msg(strstr(buf, "failed earlier") != NULL, "rank %d: %s", r, buf);
	}
	char names[512];
	ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0, "left in /dev/shm: %s",
	              names);
}
END_TEST

static void rank_leave(rank_env *env, void *arg)
{
	int how = *(int *)arg;   /* 0: fini and exit 0, 1: _exit(0) without fini */
	if (g_rank == 1) {
		if (how == 1)
			/* exit_group directly: sanitizer runtimes intercept _exit() to run
			 * their leak check, which can stall a forked child whose comm
			 * thread is still running, and the test is about leaving. */
			syscall(SYS_exit_group, 0);
		B->fini(env->st);
		env->st = NULL;
		return;
	}
	float x[2] = {1, 1};
	double t0 = now_s();
	int st = small_allreduce(env, x, 2);
	report("leave", "%d %.3f %s", st, now_s() - t0, env->hh.err);
}

static void leave_test(int how)
{
	world_result res;
	g_timeout_ms = 30000;
	run_world(3, rank_leave, &how, 60, &res);
	assert_all_ok(&res);
	for (int r = 0; r < 3; r += 2) {
		char buf[4096], want[96];
		int st;
		double took;
		ck_assert_int_eq(read_report("leave", r, buf, sizeof(buf)), 0);
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st == ACCEL_ERR_PEER, "rank %d: %s", r, buf);
		if (how == 0)
			snprintf(want, sizeof(want), "rank 1 (pid %d) left the job", (int)res.pid[1]);
		else
			snprintf(want, sizeof(want), "rank 1 (pid %d) is dead", (int)res.pid[1]);
		ck_assert_msg(strstr(buf, want) != NULL, "rank %d: no '%s' in: %s", r, want, buf);
		ck_assert_msg(took < 5.0, "rank %d needed %.1f s", r, took);
	}
	char names[512];
	ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0, "left in /dev/shm: %s",
	              names);
}

START_TEST(rank_leaves_early) { leave_test(0); }
END_TEST
START_TEST(rank_exits_without_fini) { leave_test(1); }
END_TEST

static void rank_late(rank_env *env, void *arg)
{
	(void)arg;
	float x[2] = {1, 1};
	if (g_rank == 1)
		usleep(1500000);
	double t0 = now_s();
	int st = small_allreduce(env, x, 2);
	report("late", "%d %.3f %s", st, now_s() - t0, env->hh.err);
}

/* Ranks waiting for a late one must sleep, not spin: 4 ranks on this
 * 2-CPU machine, rank 3 1.5 s late for a small all-reduce (one-shot) and
 * again for a 4 MiB one (staged, pipelined); every waiting rank reports the
 * CPU time its process (training and comm threads) used during each wait. */
static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static void rank_sleepy_wait(rank_env *env, void *arg)
{
	(void)arg;
	const uint64_t big = 1u << 20;   /* 4 MiB of f32 */
	float *x = calloc(big, sizeof(float));
	double cpu[2], wall[2];
	int st = x ? ACCEL_OK : ACCEL_ERR_NOMEM;
	for (int k = 0; k < 2 && !st; k++) {
		uint64_t n = k == 0 ? 2 : big;
		if (g_rank == 3)
			usleep(1500000);
		double c0 = cpu_s(), t0 = now_s();
		st = small_allreduce(env, x, n);
		cpu[k] = cpu_s() - c0;
		wall[k] = now_s() - t0;
	}
	report("sleepy", "%d %.3f %.3f %.3f %.3f %s", st, cpu[0], wall[0], cpu[1], wall[1],
	       env->hh.err);
	free(x);
}

START_TEST(waiting_ranks_sleep)
{
	world_result res;
	g_timeout_ms = 30000;
	run_world(4, rank_sleepy_wait, NULL, 60, &res);
	assert_all_ok(&res);
	for (int r = 0; r < 3; r++) {
		char buf[4096];
		int st;
		double cpu[2], wall[2];
		ck_assert_int_eq(read_report("sleepy", r, buf, sizeof(buf)), 0);
		ck_assert_msg(sscanf(buf, "%d %lf %lf %lf %lf", &st, &cpu[0], &wall[0], &cpu[1],
		                     &wall[1]) == 5 && st == ACCEL_OK, "rank %d: %s", r, buf);
		for (int k = 0; k < 2; k++) {
			ck_assert_msg(wall[k] > 1.0, "rank %d did not wait (%.2f s): %s", r, wall[k], buf);
			/* spinning through the wait would cost about its length */
			ck_assert_msg(cpu[k] < 0.25 * wall[k],
			              "rank %d used %.2f s of CPU while waiting %.2f s for %s: %s", r,
			              cpu[k], wall[k], k ? "the 4 MiB all-reduce" : "the small one", buf);
		}
	}
}
END_TEST

START_TEST(timeout_names_missing_rank)
{
	world_result res;
	g_timeout_ms = 300;
	run_world(2, rank_late, NULL, 30, &res);
	g_timeout_ms = 30000;
	assert_all_ok(&res);
	char buf[4096];
	int st;
	double took;
	ck_assert_int_eq(read_report("late", 0, buf, sizeof(buf)), 0);
	ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
	ck_assert_msg(st == ACCEL_ERR_TIMEOUT, "%s", buf);
	ck_assert_msg(strstr(buf, "allreduce #1 (f32, 2 elements, sum): rank 1 never arrived within 0.3 s"),
	              "%s", buf);
	ck_assert_msg(took >= 0.25 && took < 2.0, "timed out after %.2f s", took);
	/* the late rank fails at once, told why */
	ck_assert_int_eq(read_report("late", 1, buf, sizeof(buf)), 0);
	ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
	ck_assert_msg(st == ACCEL_ERR_TIMEOUT && took < 0.5, "%s", buf);
	ck_assert_msg(strstr(buf, "rank 0 failed") || strstr(buf, "left the job"), "%s", buf);
}
END_TEST

/* A rank whose settings differ from rank 0's although the segment sizes
 * agree (small_kb 80 + chunk_kb 60 against 64 + 64 on two ranks: 1280 KiB
 * either way) fails after mapping it; rank 0, waiting for it, must be told
 * which rank and why, not just that "a rank failed to join". */
static void rank_nothing(rank_env *env, void *arg)
{
	(void)env;
	(void)arg;
}

START_TEST(join_mismatch_names_rank)
{
	world_result res;
	g_odd_rank = 1;
	g_odd_small_kb = 80;
	g_odd_chunk_kb = 60;
	g_late_rank = 1;  /* rank 0 waits in the bootstrap when rank 1 fails */
	g_late_ms = 300;
	run_world(2, rank_nothing, NULL, 30, &res);
	g_odd_rank = g_late_rank = -1;
	ck_assert_msg(!res.timed_out, "the ranks did not finish in time");
	char buf[4096];
	ck_assert_int_eq(read_report("init", 1, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "rank 1 for world 2 (small 81920 B, chunk 61440 B"), "%s", buf);
	ck_assert_int_eq(read_report("init", 0, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "a rank failed while joining: rank 0 set up shm for world 2") &&
	                  strstr(buf, "rank 1 for world 2 (small 81920 B"),
	              "rank 0 was not told which rank failed and why: %s", buf);
	char names[512];
	ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0, "left behind: %s",
	              names);
}
END_TEST

/* A timeout near INT64_MAX ms means "no limit": the bootstrap waits for a
 * rank 1 s late instead of timing out at once (now + timeout in ns wrapped). */
START_TEST(huge_timeout_waits)
{
	world_result res;
	g_timeout_ms = INT64_MAX;
	g_late_rank = 1;
	g_late_ms = 1000;
	run_world(2, rank_nothing, NULL, 30, &res);
	g_late_rank = -1;
	g_timeout_ms = 30000;
	assert_all_ok(&res);
}
END_TEST

/* test() on a small op that a peer never joins: it must report done
 * (failed) when the peer dies, or at the op's deadline, counted from
 * issue; it used to stay not-done forever (the inline op's lazy finish only
 * looked at arrivals).  how 0: rank 1 dies; 1: rank 1 sleeps past the
 * timeout. */
static void rank_test_poll(rank_env *env, void *arg)
{
	int how = *(int *)arg;
	if (g_rank == 1) {
		usleep(200000);
		if (how == 0)
			syscall(SYS_exit_group, 0);
		usleep(1500000);
		return;
	}
	float x[2] = {1, 1};
	accel_view v = fview(x, 2);
	accel_comm_req *req = NULL;
	double t0 = now_s();
	int st = B->allreduce(env->st, &v, &v, ACCEL_RED_SUM, &req);
	int32_t done = 0;
	while (!st && !done && now_s() - t0 < 10.0) {
		st = B->test(env->st, req, &done);
		usleep(1000);
	}
	double took = now_s() - t0;
	if (!st && done)
		st = B->wait(env->st, req);
	report("testpoll", "%d %d %.3f %s", st, (int)done, took, env->hh.err);
}

static void test_poll(int how)
{
	world_result res;
	g_timeout_ms = how == 0 ? 30000 : 600;
	run_world(2, rank_test_poll, &how, 30, &res);
	g_timeout_ms = 30000;
	assert_all_ok(&res);
	char buf[4096];
	int st, done;
	double took;
	ck_assert_int_eq(read_report("testpoll", 0, buf, sizeof(buf)), 0);
	ck_assert_msg(sscanf(buf, "%d %d %lf", &st, &done, &took) == 3, "%s", buf);
	ck_assert_msg(done == 1, "test() never reported done: %s", buf);
	if (how == 0) {
		ck_assert_msg(st == ACCEL_ERR_PEER && strstr(buf, "is dead"), "%s", buf);
		ck_assert_msg(took < 3.0, "test() saw the dead peer after %.2f s", took);
	} else {
		ck_assert_msg(st == ACCEL_ERR_TIMEOUT && strstr(buf, "never arrived within 0.6 s"),
		              "%s", buf);
		ck_assert_msg(took >= 0.55 && took < 1.5, "timed out after %.2f s", took);
	}
}

START_TEST(test_poll_sees_dead_peer) { test_poll(0); }
END_TEST
START_TEST(test_poll_times_out) { test_poll(1); }
END_TEST

/* mem_alloc when the rank that created the allocation dies before it is
 * complete: rank 1 plays such a creator (it opens the allocation's name the
 * way the backend does, "<segment name>-m0", and dies before sizing it);
 * rank 0's mem_alloc must fail at once naming rank 1, not after the
 * timeout, and remove the name. */
static void rank_alloc_creator_dies(rank_env *env, void *arg)
{
	(void)arg;
	if (g_rank == 1) {
		char seg[256] = {0}, name[300];
		uint64_t len = 0;
		if (fs_get(NULL, "accel/shm/0/segment", seg, sizeof(seg) - 1, &len, 5000) ||
		    len >= sizeof(seg)) {
			FAIL(env, "no segment name in the store");
			return;
		}
		snprintf(name, sizeof(name), "%s-m0", seg);
		if (shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) < 0) {
			FAIL(env, "shm_open %s: %s", name, strerror(errno));
			return;
		}
		syscall(SYS_exit_group, 0);
	}
	usleep(300000);   /* rank 1 got there first */
	void *p = NULL;
	double t0 = now_s();
	int st = B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, 4096, &p);
	report("allocdie", "%d %.3f %s", st, now_s() - t0, env->hh.err);
}

START_TEST(mem_alloc_creator_dies)
{
	world_result res;
	run_world(2, rank_alloc_creator_dies, NULL, 60, &res);
	assert_all_ok(&res);
	char buf[4096], want[64];
	int st;
	double took;
	ck_assert_int_eq(read_report("allocdie", 0, buf, sizeof(buf)), 0);
	ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
	snprintf(want, sizeof(want), "rank 1 (pid %d) is dead", (int)res.pid[1]);
	ck_assert_msg(st == ACCEL_ERR_PEER && strstr(buf, want) && strstr(buf, "mem_alloc #0"),
	              "%s", buf);
	ck_assert_msg(took < 3.0, "mem_alloc failed after %.1f s", took);
	char names[512];
	ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0, "left in /dev/shm: %s",
	              names);
}
END_TEST

static void rank_mismatch(rank_env *env, void *arg)
{
	int kind = *(int *)arg;
	float x[16] = {0};
	accel_comm_req *req = NULL;
	int st;
	if (kind == 0) {   /* different counts */
		accel_view v = fview(x, g_rank == 0 ? 10 : 11);
		st = B->allreduce(env->st, &v, &v, ACCEL_RED_SUM, &req);
	} else {           /* different ops */
		accel_view v = fview(x, 10);
		st = g_rank == 0 ? B->allreduce(env->st, &v, &v, ACCEL_RED_SUM, &req)
		                 : B->broadcast(env->st, &v, 0, &req);
	}
	if (!st)
		st = B->wait(env->st, req);
	report("mismatch", "%d %s", st, env->hh.err);
}

START_TEST(mismatched_collectives)
{
	for (int kind = 0; kind < 2; kind++) {
		world_result res;
		run_world(2, rank_mismatch, &kind, 30, &res);
		assert_all_ok(&res);
		for (int r = 0; r < 2; r++) {
			char buf[4096];
			int st;
			ck_assert_int_eq(read_report("mismatch", r, buf, sizeof(buf)), 0);
			ck_assert_msg(sscanf(buf, "%d", &st) == 1, "%s", buf);
			ck_assert_msg(st == ACCEL_ERR_COMM, "rank %d: %s", r, buf);
			ck_assert_msg(strstr(buf, "mismatch") != NULL, "rank %d: %s", r, buf);
			ck_assert_msg(strstr(buf, kind == 0 ? "11 elements" : "broadcast") != NULL, "rank %d: %s",
			              r, buf);
		}
	}
}
END_TEST

static void expect_error(rank_env *env, int st, int want, const char *needle)
{
	if (st != want)
		FAIL(env, "status %d, expected %d (%s)", st, want, env->hh.err);
	else if (!strstr(env->hh.err, needle))
		FAIL(env, "message '%s' lacks '%s'", env->hh.err, needle);
	clear_err(env);
}

/* Arguments the core refuses (core_refuses_bad_arguments) never reach a
 * backend; it asserts them instead of checking them again.  Each such call
 * made straight to the backend must stop the process on the assertion
 * (run in a child of the rank; builds with NDEBUG compile the assertions
 * out, and skip this). */
enum { N_BAD_CALLS = 12 };

static int bad_call(rank_env *env, int i)
{
	float x[8] = {0};
	accel_comm_req *req = NULL;
	accel_view v = fview(x, 8), w = fview(x, 3), u8 = v, bogus = v, dev = v, old = v;
	accel_view nul = fview(NULL, 5);
	u8.dtype = ACCEL_DTYPE_U8;
	bogus.dtype = 77;
	dev.device = ACCEL_DEVICE_CUDA;
	old.struct_size = 8;
	switch (i) {
	case 0: return B->allreduce(env->st, NULL, &v, ACCEL_RED_SUM, &req);
	case 1: return B->allreduce(env->st, &v, &w, ACCEL_RED_SUM, &req);
	case 2: return B->allreduce(env->st, &v, &v, 7, &req);
	case 3: return B->allreduce(env->st, &u8, &u8, ACCEL_RED_SUM, &req);
	case 4: return B->allgather(env->st, &bogus, &bogus, &req);
	case 5: return B->allreduce(env->st, &dev, &dev, ACCEL_RED_SUM, &req);
	case 6: return B->broadcast(env->st, &nul, 0, &req);
	case 7: return B->broadcast(env->st, &v, g_world, &req);
	case 8: return B->reduce_scatter(env->st, &v, &w, ACCEL_RED_SUM, &req);
	case 9: return B->allgather(env->st, &w, &w, &req);
	case 10: return B->allreduce(env->st, &old, &old, ACCEL_RED_SUM, &req);
	default: return B->wait(env->st, NULL);
	}
}

static void rank_bad_args(rank_env *env, void *arg)
{
	(void)arg;
#ifndef NDEBUG
	for (int i = 0; i < N_BAD_CALLS; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);   /* the assertion's own text */
			if (null >= 0)
				dup2(null, 2);
			bad_call(env, i);
			_exit(0);
		}
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			FAIL(env, "bad call %d: fork/waitpid: %s", i, strerror(errno));
		else if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
			FAIL(env, "bad call %d reached the backend and went on (status 0x%x); it must "
			     "stop on the backend's assertion", i, st);
	}
#endif
	/* not a collective's argument: the core routes device buffers to the
	 * device backend, but shm still says what it serves */
	void *p = NULL;
	expect_error(env, B->mem_alloc(env->st, ACCEL_DEVICE_CUDA, 0, 64, &p), ACCEL_ERR_UNSUPPORTED,
	             "host memory only");
	/* none of that poisoned the communicator */
	float y[3] = {1, 2, 3};
	if (small_allreduce(env, y, 3) || y[2] != 6.0f)
		FAIL(env, "allreduce after bad calls: %s", env->hh.err);
}

START_TEST(bad_arguments)
{
	world_result res;
	run_world(2, rank_bad_args, NULL, 30, &res);
	assert_all_ok(&res);
}
END_TEST

/* Bad arguments through the core (a context of one rank on shm): each is
 * refused with a message naming the call and the argument, before any
 * backend sees it, and the communicator works after them. */
typedef struct bad_case {
	int op;                  /* 0 allreduce, 1 reduce_scatter, 2 allgather, 3 broadcast,
	                            4 wait(NULL) */
	int send, recv;          /* 0 NULL, else the index of a view below */
	uint32_t red;
	int32_t root;
	int code;
	const char *needle;
} bad_case;

START_TEST(core_refuses_bad_arguments)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = "{\"backend\": \"shm\"}",
	                .skip_env = 1};
	accel_ctx *ctx = NULL;
	ck_assert_int_eq(accel_ctx_new(&o, &ctx), ACCEL_OK);
	float x[9] = {0};
	accelp_cuda_info probe;
	uint32_t offered = 0;
	int32_t cc = 0;
	accelp_cuda_probe(&probe);
	accelp_cuda_offered(&probe, &offered, &cc);
	int gpu = (offered & ACCEL_REQ_CUDA) != 0;
	/* 1: 8 floats, 2: 3 floats, 3: u8, 4: dtype 77, 5: on cuda:0, 6: NULL
	 * data, 7: struct_size 8, 8: x + 1 (overlaps 1) */
	accel_view vs[9];
	vs[1] = fview(x, 8);
	vs[2] = fview(x, 3);
	vs[3] = vs[1];
	vs[3].dtype = ACCEL_DTYPE_U8;
	vs[4] = vs[1];
	vs[4].dtype = 77;
	vs[5] = vs[1];
	vs[5].device = ACCEL_DEVICE_CUDA;
	vs[6] = fview(NULL, 5);
	vs[7] = vs[1];
	vs[7].struct_size = 8;
	vs[8] = fview(x + 1, 8);
	static const bad_case cases[] = {
		{0, 0, 1, ACCEL_RED_SUM, 0, ACCEL_ERR_INVALID_ARG, "allreduce: send is NULL"},
		{0, 1, 2, ACCEL_RED_SUM, 0, ACCEL_ERR_INVALID_ARG, "recv 3; expected 8 and 8"},
		{0, 1, 1, 7, 0, ACCEL_ERR_INVALID_ARG, "unknown reduction 7"},
		{0, 3, 3, ACCEL_RED_SUM, 0, ACCEL_ERR_UNSUPPORTED, "reductions over u8"},
		{2, 4, 4, 0, 0, ACCEL_ERR_INVALID_ARG, "invalid dtype 77"},
		/* a named host backend stages device buffers, which needs a GPU */
		{0, 5, 5, ACCEL_RED_SUM, 0, ACCEL_ERR_UNSUPPORTED, "a collective on device buffers: "},
		{3, 6, 0, 0, 0, ACCEL_ERR_INVALID_ARG, "NULL data pointer"},
		{3, 1, 0, 0, 1, ACCEL_ERR_INVALID_ARG, "root 1 is not a rank (world size 1)"},
		{1, 1, 2, ACCEL_RED_SUM, 0, ACCEL_ERR_INVALID_ARG, "expected 3 and 3"},
		{2, 2, 1, 0, 0, ACCEL_ERR_INVALID_ARG, "expected 3 and 3"},
		{0, 7, 7, ACCEL_RED_SUM, 0, ACCEL_ERR_INVALID_ARG, "struct_size is 8"},
		{0, 1, 8, ACCEL_RED_SUM, 0, ACCEL_ERR_INVALID_ARG, "overlap"},
		{4, 0, 0, 0, 0, ACCEL_ERR_INVALID_ARG, "wait: request is NULL"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const bad_case *k = &cases[i];
		const accel_view *s = k->send ? &vs[k->send] : NULL, *r = k->recv ? &vs[k->recv] : NULL;
		accel_req *req = NULL;
		int rc;
		accel_clear_error(ctx);
		switch (k->op) {
		case 0: rc = accelp_comm_allreduce(ctx->comm, s, r, k->red, &req); break;
		case 1: rc = accelp_comm_reduce_scatter(ctx->comm, s, r, k->red, &req); break;
		case 2: rc = accelp_comm_allgather(ctx->comm, s, r, &req); break;
		case 3: rc = accelp_comm_broadcast(ctx->comm, s, k->root, &req); break;
		default: rc = accelp_comm_wait(ctx->comm, NULL); break;
		}
		if (i == 5 && gpu)   /* staged for real: x is host memory, refused */
			ck_assert_msg(rc != ACCEL_OK, "case 5 on a GPU: a host pointer in a CUDA view "
			              "was accepted");
		else
			ck_assert_msg(rc == k->code && strstr(accel_errmsg(ctx), k->needle),
			              "case %zu: status %d (want %d), message '%s' (want '%s')", i, rc,
			              k->code, accel_errmsg(ctx), k->needle);
		ck_assert_ptr_null(req);
	}
	accel_clear_error(ctx);
	float y[2] = {1, 2};
	ck_assert_int_eq(accel_allreduce(ctx, y, y, 2, ACCEL_DTYPE_F32, ACCEL_RED_SUM), ACCEL_OK);
	ck_assert(y[0] == 1.0f && y[1] == 2.0f);
	accel_ctx_free(ctx);
}
END_TEST

/* Many ops in flight at once, small and large, waited in issue order and
 * in reverse; test() polled. */
static void rank_async(rank_env *env, void *arg)
{
	(void)arg;
	enum { N = 40 };
	accel_comm_req *req[N];
	float *buf[N];
	uint64_t cnt[N];
	for (int i = 0; i < N; i++) {
		cnt[i] = (i % 5 == 0) ? 300000 + (uint64_t)i : (uint64_t)(i * 37 + 1);
		buf[i] = malloc(cnt[i] * sizeof(float));
		for (uint64_t j = 0; j < cnt[i]; j++)
			buf[i][j] = (float)(g_rank + 1) * (float)(j % 1000) + (float)i;
		accel_view v = fview(buf[i], cnt[i]);
		int st = (i % 7 == 3) ? B->broadcast(env->st, &v, i % g_world, &req[i])
		                      : B->allreduce(env->st, &v, &v, ACCEL_RED_SUM, &req[i]);
		if (st)
			FAIL(env, "issue %d: %s", i, env->hh.err);
	}
	int32_t done = 0;
	for (int spins = 0; spins < 100000 && !done; spins++) {
		if (B->test(env->st, req[N - 1], &done))
			FAIL(env, "test: %s", env->hh.err);
		if (!done)
			usleep(100);
	}
	if (!done)
		FAIL(env, "the last request never completed");
	for (int k = 0; k < N; k++) {
		int i = (k < N / 2) ? k : N - 1 - (k - N / 2);
		if (B->wait(env->st, req[i]))
			FAIL(env, "wait %d: %s", i, env->hh.err);
	}
	float ranksum = (float)(g_world * (g_world + 1) / 2);
	for (int i = 0; i < N; i++) {
		for (uint64_t j = 0; j < cnt[i]; j++) {
			float want = (i % 7 == 3) ? (float)(i % g_world + 1) * (float)(j % 1000) + (float)i
			                          : ranksum * (float)(j % 1000) + (float)(i * g_world);
			if (buf[i][j] != want) {
				FAIL(env, "op %d element %llu: %g, expected %g", i, (unsigned long long)j,
				     (double)buf[i][j], (double)want);
				break;
			}
		}
		free(buf[i]);
	}
}

START_TEST(async_many_in_flight)
{
	world_result res;
	run_world(3, rank_async, NULL, 60, &res);
	assert_all_ok(&res);
}
END_TEST

/* World 1: every op is the identity, in place or not; memory works. */
static void rank_single(rank_env *env, void *arg)
{
	(void)arg;
	static const uint64_t sizes[] = {0, 1, 7, 100003};
	comm_check cc = {.ops = &k_backend_ops, .ctx = env, .rank = 0, .world = 1,
	                 .sizes = sizes, .n_sizes = 4, .all_reds_large = 1};
	env->failures += comm_check_matrix(&cc);
	cc.use_mem = 1;
	env->failures += comm_check_matrix(&cc);
	accel_comm_req *req = NULL;
	if (B->barrier(env->st, &req) || B->wait(env->st, req))
		FAIL(env, "barrier: %s", env->hh.err);
}

START_TEST(world_of_one)
{
	world_result res;
	run_world(1, rank_single, NULL, 60, &res);
	assert_all_ok(&res);
}
END_TEST

/* 16-bit floats at the edges: subnormals, the largest finite values (whose
 * sums overflow to infinity), infinities of both signs (whose sum is NaN),
 * NaN, signed zeros; one-shot, pipelined and zero-copy paths; sum and max.
 * Expected: the f32 sum or max in rank order rounded once (backends/common/half.h),
 * any NaN where an input is NaN or infinities cancel. */
static const uint16_t k_f16_special[] = {0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00,
                                         0x7e00, 0x8000, 0x0000, 0x3c00, 0x3555, 0x0200, 0x7bfe,
                                         0x8001, 0xbc00, 0x4000};
static const uint16_t k_bf16_special[] = {0x0001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
                                          0x7fc0, 0x8000, 0x0000, 0x3f80, 0x3eab, 0x0040, 0x7f7e,
                                          0x8001, 0xbf80, 0x4000};
#define N_SPECIAL (sizeof(k_f16_special) / sizeof(k_f16_special[0]))

static uint16_t special_in(uint32_t dt, int rank, uint64_t i)
{
	const uint16_t *t = dt == ACCEL_DTYPE_F16 ? k_f16_special : k_bf16_special;
	return t[(i + (uint64_t)rank * (i / N_SPECIAL + 1)) % N_SPECIAL];
}

static float special_f(uint32_t dt, uint16_t h)
{
	return dt == ACCEL_DTYPE_F16 ? accel_f16_to_f32(h) : accel_bf16_to_f32(h);
}

static int is_nan16(uint32_t dt, uint16_t h)
{
	return dt == ACCEL_DTYPE_F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
	                             : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

static void rank_special(rank_env *env, void *arg)
{
	(void)arg;
	static const uint64_t sizes[] = {1000, 300007};
	uint16_t *mem = NULL;
	uint64_t cap = 300007;
	if (B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, cap * 2 * 2, (void **)&mem)) {
		FAIL(env, "mem_alloc: %s", env->hh.err);
		return;
	}
	uint16_t *heap = malloc(cap * 2 * 2);
	for (int use_mem = 0; use_mem < 2; use_mem++)
	for (int dti = 0; dti < 2; dti++)
	for (int si = 0; si < 2; si++)
	for (uint32_t red = ACCEL_RED_SUM; red <= ACCEL_RED_MAX; red += 2) {
		uint32_t dt = dti ? ACCEL_DTYPE_BF16 : ACCEL_DTYPE_F16;
		uint64_t n = sizes[si];
		uint16_t *s = use_mem ? mem : heap, *r = s + cap;
		for (uint64_t i = 0; i < n; i++)
			s[i] = special_in(dt, g_rank, i);
		accel_view vs = {sizeof(accel_view), dt, ACCEL_DEVICE_CPU, 0, s, n};
		accel_view vr = {sizeof(accel_view), dt, ACCEL_DEVICE_CPU, 0, r, n};
		accel_comm_req *req = NULL;
		if (B->allreduce(env->st, &vs, &vr, red, &req) || B->wait(env->st, req)) {
			FAIL(env, "allreduce: %s", env->hh.err);
			return;
		}
		for (uint64_t i = 0; i < n; i++) {
			float acc = 0;
			int nan = 0;
			for (int q = 0; q < g_world; q++) {
				uint16_t h = special_in(dt, q, i);
				float x = special_f(dt, h);
				nan |= is_nan16(dt, h);
				acc = q == 0 ? x : red == ACCEL_RED_SUM ? acc + x : (acc > x ? acc : x);
			}
			nan |= acc != acc;
			uint16_t want = dt == ACCEL_DTYPE_F16 ? accel_f32_to_f16(acc) : accel_f32_to_bf16(acc);
			if (nan ? !is_nan16(dt, r[i]) : r[i] != want) {
				FAIL(env, "%s %s %s n=%llu element %llu: 0x%04x, expected %s0x%04x",
				     use_mem ? "mem" : "heap", dti ? "bf16" : "f16",
				     red == ACCEL_RED_SUM ? "sum" : "max", (unsigned long long)n,
				     (unsigned long long)i, r[i], nan ? "a NaN like " : "", want);
				break;
			}
		}
	}
	free(heap);
	B->mem_free(env->st, mem);
}

START_TEST(half_special_values)
{
	for (int world = 2; world <= 3; world++) {
		world_result res;
		run_world(world, rank_special, NULL, 60, &res);
		assert_all_ok(&res);
	}
}
END_TEST

/* The segment names are gone from /dev/shm as soon as every rank mapped
 * them, while the job still runs. */
static void rank_unlinked(rank_env *env, void *arg)
{
	(void)arg;
	char pid0[32], names[512];
	uint64_t len = 0;
	accel_comm_req *req = NULL;
	if (fs_get(NULL, "test/pid0", pid0, sizeof(pid0) - 1, &len, 5000)) {
		FAIL(env, "no pid0");
		return;
	}
	pid0[len] = '\0';
	if (B->barrier(env->st, &req) || B->wait(env->st, req))
		FAIL(env, "barrier: %s", env->hh.err);
	if (shm_leftovers(atol(pid0), names, sizeof(names)))
		FAIL(env, "after init: %s", names);
	if (B->barrier(env->st, &req) || B->wait(env->st, req))
		FAIL(env, "barrier: %s", env->hh.err);
	void *p = NULL, *q = NULL;
	if (B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, 1 << 20, &p) ||
	    B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, 100, &q))
		FAIL(env, "mem_alloc: %s", env->hh.err);
	if (B->barrier(env->st, &req) || B->wait(env->st, req))
		FAIL(env, "barrier: %s", env->hh.err);
	if (shm_leftovers(atol(pid0), names, sizeof(names)))
		FAIL(env, "after mem_alloc: %s", names);
	/* rank r's copy is rank r's alone */
	memset(p, g_rank + 1, 1 << 20);
	if (B->barrier(env->st, &req) || B->wait(env->st, req))
		FAIL(env, "barrier: %s", env->hh.err);
	if (((unsigned char *)p)[12345] != g_rank + 1)
		FAIL(env, "another rank wrote into this rank's copy");
	B->mem_free(env->st, p);
	B->mem_free(env->st, q);
}

/* mem_free is not collective: a rank that freed its copy of an allocation
 * no longer maps the others'.  A broadcast from the root's copy into that
 * rank's own memory must still be right (and take the same path on every
 * rank: one rank copying directly while the other used the staging ring
 * gave it stale data and left every later collective out of step). */
static void rank_bcast_after_free(rank_env *env, void *arg)
{
	uint64_t n = (uint64_t)(uintptr_t)arg;
	float *mem = NULL, *own = malloc(n * sizeof(float)), *x = malloc((1u << 20) * sizeof(float));
	/* rank 1 creates the allocation and frees its copy before rank 0
	 * allocates: rank 0 maps the object rank 1 left named for it, and no
	 * name is left after the job.  (A free used to remove the name at
	 * once; a rank between its failed O_EXCL create and its open then
	 * failed with ENOENT, seen once under ASan.) */
	if (g_rank == 0)
		usleep(300000);
	if (!own || !x || B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, n * sizeof(float), (void **)&mem)) {
		FAIL(env, "allocation: %s", env->hh.err);
		goto out;
	}
	if (g_rank == 1) {
		B->mem_free(env->st, mem);
		mem = NULL;
	}
	for (uint64_t i = 0; i < n; i++)
		(g_rank == 0 ? mem : own)[i] = g_rank == 0 ? (float)i : -1.0f;
	accel_view v = fview(g_rank == 0 ? mem : own, n);
	if (b_broadcast(env, &v, 0)) {
		FAIL(env, "broadcast: %s", env->hh.err);
		goto out;
	}
	uint64_t wrong = 0;
	for (uint64_t i = 0; g_rank == 1 && i < n; i++)
		wrong += own[i] != (float)i;
	if (wrong)
		FAIL(env, "broadcast of %llu floats: %llu wrong", (unsigned long long)n,
		     (unsigned long long)wrong);
	/* the ranks are still in step: a pipelined all-reduce is right */
	for (uint64_t i = 0; i < (1u << 20); i++)
		x[i] = (float)(g_rank + 1);
	if (small_allreduce(env, x, 1u << 20)) {
		FAIL(env, "allreduce after the broadcast: %s", env->hh.err);
		goto out;
	}
	wrong = 0;
	for (uint64_t i = 0; i < (1u << 20); i++)
		wrong += x[i] != 3.0f;
	if (wrong)
		FAIL(env, "allreduce after the broadcast: %llu of %u wrong", (unsigned long long)wrong,
		     1u << 20);
out:
	if (mem)
		B->mem_free(env->st, mem);
	free(own);
	free(x);
}

START_TEST(broadcast_after_a_peer_freed_its_copy)
{
	static const uint64_t sizes[] = {25600, 262144}; /* one round, several */
	for (int k = 0; k < 2; k++) {
		world_result res;
		run_world(2, rank_bcast_after_free, (void *)(uintptr_t)sizes[k], 60, &res);
		assert_all_ok(&res);
		char names[512];
		ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0,
		              "left in /dev/shm: %s", names);
	}
}
END_TEST

START_TEST(no_names_left_in_dev_shm)
{
	world_result res;
	run_world(4, rank_unlinked, NULL, 60, &res);
	assert_all_ok(&res);
}
END_TEST

/* mem_alloc when the rank that created the allocation could not complete
 * it (here: a file size limit makes its ftruncate fail, as a full /dev/shm
 * would): it removes the name, and a rank that comes later must not create
 * a fresh object nobody else will join; it fails at once naming the
 * creator.  The communicator stays usable. */
static void rank_alloc_creator_fails(rank_env *env, void *arg)
{
	(void)arg;
	void *p = NULL;
	if (g_rank == 1) {
		struct rlimit rl = {64 << 10, 64 << 10};
		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			FAIL(env, "setrlimit: %s", strerror(errno));
	} else {
		usleep(300000); /* rank 1 gets there first */
	}
	double t0 = now_s();
	int st = B->mem_alloc(env->st, ACCEL_DEVICE_CPU, 0, 1 << 20, &p);
	report("allocfail", "%d %.3f %s", st, now_s() - t0, env->hh.err);
	accel_comm_req *req = NULL;
	if (B->barrier(env->st, &req) || B->wait(env->st, req))
		FAIL(env, "barrier after the failed mem_alloc: %s", env->hh.err);
}

START_TEST(mem_alloc_creator_fails)
{
	world_result res;
	run_world(2, rank_alloc_creator_fails, NULL, 60, &res);
	assert_all_ok(&res);
	char buf[4096];
	int st;
	double took;
	ck_assert_int_eq(read_report("allocfail", 1, buf, sizeof(buf)), 0);
	ck_assert_msg(sscanf(buf, "%d", &st) == 1 && st != ACCEL_OK &&
	              strstr(buf, "cannot reserve"), "rank 1: %s", buf);
	ck_assert_int_eq(read_report("allocfail", 0, buf, sizeof(buf)), 0);
	ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
	ck_assert_msg(st == ACCEL_ERR_PEER && strstr(buf, "rank 1, which created it first, could "
	              "not complete it"), "rank 0: %s", buf);
	ck_assert_msg(took < 3.0, "mem_alloc failed after %.1f s", took);
	char names[512];
	ck_assert_msg(shm_leftovers(res.pid[0], names, sizeof(names)) == 0, "left in /dev/shm: %s",
	              names);
}
END_TEST

/* ---- part 2: through libaccel under `accel launch` ------------------------------------ */

/* Run `accel launch -n N [extra] -- comm-ranks MODE OUTDIR [VICTIM]`, output
 * to OUTDIR/launch.log; returns the launcher's wait status (or -1 on
 * timeout, after killing it). */
static int launch_ranks(int n, const char *mode, const char *outdir, int victim, int limit_s)
{
	const char *cli = getenv("ACCEL_CLI");
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	char prog[4096], np[16], vic[16], log[600];
	ck_assert_msg(cli && *cli && bd, "ACCEL_CLI / ACCEL_TEST_BUILDDIR not set (run through meson test)");
	snprintf(prog, sizeof(prog), "%s/tests/comm-ranks", bd);
	snprintf(np, sizeof(np), "%d", n);
	snprintf(vic, sizeof(vic), "%d", victim);
	snprintf(log, sizeof(log), "%s/launch.log", outdir);
	/* 8 ranks on a 2-CPU machine: small sizes, but every preemption race */
	const char *maxn = n == 2 ? "1048589" : n <= 4 ? "300007" : "16385";
	const char *argv[] = {cli,  "launch", "-n", np,     "--grace-s", "5", "--",
	                      prog, mode,     outdir, vic,  maxn,        NULL};
	return lr_reap(lr_spawn(argv, log), limit_s);
}

static void print_log(const char *outdir)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/launch.log", outdir);
	lr_print_log(path);
}

static void outdir_new(char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/launch-XXXXXX", g_root);
	if (!mkdtemp(buf))
		ck_abort_msg("mkdtemp %s: %s", buf, strerror(errno));
	snprintf(g_store, sizeof(g_store), "%s", buf);   /* read_report() looks here */
}

static void launch_matrix(int n)
{
	char out[256], buf[512];
	outdir_new(out, sizeof(out));
	int status = launch_ranks(n, "matrix", out, 0, 280);
	if (status != 0)
		print_log(out);
	ck_assert_msg(status == 0, "accel launch -n %d comm-ranks matrix: status %d", n, status);
	for (int r = 0; r < n; r++) {
		ck_assert_msg(read_report("matrix", r, buf, sizeof(buf)) == 0, "rank %d wrote no report", r);
		ck_assert_msg(!strncmp(buf, "0 ", 2) && strstr(buf, "backend shm"), "rank %d: %s", r, buf);
	}
}

START_TEST(launch_matrix_2) { launch_matrix(2); }
END_TEST
START_TEST(launch_matrix_3) { launch_matrix(3); }
END_TEST
START_TEST(launch_matrix_4) { launch_matrix(4); }
END_TEST
START_TEST(launch_matrix_8) { launch_matrix(8); }
END_TEST

START_TEST(launch_kill9)
{
	char out[256], log[600], text[16384] = "";
	const int n = 4, victim = 2;
	outdir_new(out, sizeof(out));
	double t0 = now_s();
	int status = launch_ranks(n, "kill", out, victim, 120);
	double lt = now_s() - t0;
	ck_assert_msg(status != -1, "accel launch did not finish");
	/* the launcher reports the killed rank and fails, within seconds of
	 * the kill (comm-ranks' victim kills itself about 0.3 s in) */
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status %d", status);
	ck_assert_msg(lt < 10.0, "accel launch took %.1f s", lt);
	snprintf(log, sizeof(log), "%s/launch.log", out);
	ck_assert_msg(lr_read_file(log, text, sizeof(text)) == 0, "no launch log");
	char who[64];
	snprintf(who, sizeof(who), "rank %d", victim);
	ck_assert_msg(strstr(text, who) && strstr(text, "killed by signal SIGKILL (9)"),
	              "the launcher does not name rank %d and its signal:\n%s", victim, text);
	/* /dev/shm: the segment's name is gone once every rank attached,
	 * before the kill (kill9_mid_collective checks it; a crash before
	 * that is test-launch's leftover_shared_memory_is_removed) */
	for (int r = 0; r < n; r++) {
		char buf[4096], want[64];
		int st;
		double took;
		if (r == victim)
			continue;
		if (read_report("kill", r, buf, sizeof(buf)) != 0) {
			print_log(out);
			ck_abort_msg("rank %d wrote no report", r);
		}
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st == ACCEL_ERR_PEER, "rank %d: %s", r, buf);
		snprintf(want, sizeof(want), "rank %d (pid ", victim);
		ck_assert_msg(strstr(buf, want) && strstr(buf, "is dead"), "rank %d: %s", r, buf);
		ck_assert_msg(strstr(buf, "allreduce #"), "rank %d: %s", r, buf);
		/* the dead rank is named, not every rank still behind it */
		ck_assert_msg(!strstr(buf, "ranks "), "rank %d: %s", r, buf);
		ck_assert_msg(took < 4.0, "rank %d took %.1f s", r, took);
	}
}
END_TEST

START_TEST(launch_rank_leaves)
{
	char out[256];
	const int n = 3, victim = 1;
	outdir_new(out, sizeof(out));
	int status = launch_ranks(n, "leave", out, victim, 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	for (int r = 0; r < n; r++) {
		char buf[4096];
		int st;
		double took;
		if (read_report("leave", r, buf, sizeof(buf)) != 0) {
			print_log(out);
			ck_abort_msg("rank %d wrote no report", r);
		}
		if (r == victim)
			continue;
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st == ACCEL_ERR_PEER && strstr(buf, "rank 1 (pid ") && strstr(buf, "left the job"),
		              "rank %d: %s", r, buf);
		ck_assert_msg(took < 4.0, "rank %d took %.1f s", r, took);
	}
}
END_TEST

/* A rank that exits 0 before it ever joins (before accel_ctx_new): the
 * launcher tells the rendezvous store (or, for rank 0, which hosts it,
 * answers on its port), and the others' bootstrap fails at once naming it,
 * instead of after comm.timeout_s (300 s by default). */
static void early_test(int victim, const char *want)
{
	char out[256];
	const int n = 3;
	outdir_new(out, sizeof(out));
	int status = launch_ranks(n, "early", out, victim, 120);
	ck_assert_msg(status != -1, "accel launch did not finish");
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status %d", status);
	/* The first rank to fail makes the launcher stop the other, which may
	 * then have no report; every report there is names the rank. */
	int reports = 0;
	for (int r = 0; r < n; r++) {
		char buf[4096];
		int st;
		double took;
		if (r == victim || read_report("early", r, buf, sizeof(buf)) != 0)
			continue;
		reports++;
		ck_assert_msg(sscanf(buf, "%d %lf", &st, &took) == 2, "%s", buf);
		ck_assert_msg(st != ACCEL_OK && strstr(buf, want), "rank %d: %s", r, buf);
		ck_assert_msg(took < 15.0, "rank %d took %.1f s", r, took);
	}
	if (!reports)
		print_log(out);
	ck_assert_msg(reports > 0, "no rank reported how its accel_ctx_new failed");
}

START_TEST(launch_rank_exits_before_joining)
{
	early_test(1, "rank 1 exited with status 0 before it joined the job");
}
END_TEST
START_TEST(launch_rank0_exits_before_joining)
{
	early_test(0, "rank 0 exited with status 0 while other ranks still run; it hosted the "
	              "rendezvous store");
}
END_TEST

/* accel_comm_stats() at 2 ranks: every kind of collective moves by what
 * tests/progs/comm-ranks.c's "stats" mode hands over. */
START_TEST(launch_comm_stats_2)
{
	char out[256], buf[1024];
	outdir_new(out, sizeof(out));
	int status = launch_ranks(2, "stats", out, 0, 120);
	if (status != 0)
		print_log(out);
	ck_assert_msg(status == 0, "accel launch -n 2 comm-ranks stats: status %d", status);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(read_report("stats", r, buf, sizeof(buf)) == 0, "rank %d wrote no report", r);
		ck_assert_msg(!strncmp(buf, "0 ", 2), "rank %d: %s", r, buf);
	}
}
END_TEST

static Suite *comm_suite(void)
{
	Suite *s = suite_create("comm");
	/* one case per world so that CK_RUN_CASE can pick one */
	const struct {
		const char *name;
		const TTest *test;
	} matrix[] = {
		{"shm-matrix-2", matrix_2},         {"shm-matrix-3", matrix_3},
		{"shm-matrix-4", matrix_4},         {"shm-matrix-mem-2", matrix_mem_2},
		{"shm-matrix-mem-3", matrix_mem_3}, {"shm-matrix-mem-4", matrix_mem_4},
	};
	TCase *tc;
	for (size_t i = 0; i < sizeof(matrix) / sizeof(matrix[0]); i++) {
		tc = tcase_create(matrix[i].name);
		tcase_set_timeout(tc, 300);
		tcase_add_test(tc, matrix[i].test);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("shm-matrix-stream-2");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, matrix_stream_2);
	suite_add_tcase(s, tc);

	tc = tcase_create("shm-behaviour");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, world_of_one);
	tcase_add_test(tc, async_many_in_flight);
	tcase_add_test(tc, half_special_values);
	tcase_add_test(tc, no_names_left_in_dev_shm);
	tcase_add_test(tc, broadcast_after_a_peer_freed_its_copy);
	tcase_add_test(tc, bad_arguments);
	tcase_add_test(tc, core_refuses_bad_arguments);
	tcase_add_test(tc, mismatched_collectives);
	tcase_add_test(tc, timeout_names_missing_rank);
	tcase_add_test(tc, join_mismatch_names_rank);
	tcase_add_test(tc, huge_timeout_waits);
	tcase_add_test(tc, waiting_ranks_sleep);
	tcase_add_test(tc, rank_leaves_early);
	tcase_add_test(tc, rank_exits_without_fini);
	tcase_add_test(tc, test_poll_sees_dead_peer);
	tcase_add_test(tc, test_poll_times_out);
	tcase_add_test(tc, mem_alloc_creator_dies);
	tcase_add_test(tc, mem_alloc_creator_fails);
	tcase_add_test(tc, kill9_mid_collective);
	suite_add_tcase(s, tc);

	tc = tcase_create("launch");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, launch_matrix_2);
	tcase_add_test(tc, launch_comm_stats_2);
	tcase_add_test(tc, launch_matrix_3);
	tcase_add_test(tc, launch_matrix_4);
	tcase_add_test(tc, launch_matrix_8);
	tcase_add_test(tc, launch_kill9);
	tcase_add_test(tc, launch_rank_leaves);
	tcase_add_test(tc, launch_rank_exits_before_joining);
	tcase_add_test(tc, launch_rank0_exits_before_joining);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	snprintf(g_root, sizeof(g_root), "/tmp/accel-test-comm-XXXXXX");
	if (!mkdtemp(g_root)) {
		perror("mkdtemp");
		return 1;
	}
	B = load_backend();
	if (!B) {
		fprintf(stderr, "comm-shm.so could not be loaded\n");
		return 1;
	}
	SRunner *sr = srunner_create(comm_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	lr_rm_tree(g_root);
	return failed ? 1 : 0;
}
