/* SPDX-License-Identifier: MIT */
/* tests/progs/comm-ranks.c: one rank of the collective tests that
 * tests/test-comm.c starts with `accel launch -n N`.
 *
 *   comm-ranks matrix OUTDIR 0 MAXN every op/dtype/reduction/placement/size
 *                                   up to MAXN elements
 *                                   through libaccel: the core comm layer
 *                                   with requests (ordinary and
 *                                   backend-allocated buffers), then the
 *                                   public blocking calls
 *   comm-ranks kill OUTDIR VICTIM   VICTIM kills itself (SIGKILL) in the
 *                                   middle of a large allreduce; the others
 *                                   write what they saw to OUTDIR
 *   comm-ranks leave OUTDIR VICTIM  VICTIM frees its context and exits 0
 *   comm-ranks early OUTDIR VICTIM  VICTIM exits 0 before accel_ctx_new; the
 *                                   others report how their accel_ctx_new failed
 *                                   while the others wait in an allreduce
 *   comm-ranks mismatch OUTDIR VICTIM  VICTIM issues an allgather where the
 *                                   others issue an allreduce; all report
 *   comm-ranks vanish OUTDIR VICTIM VICTIM takes this network namespace's
 *                                   loopback down (`ip link set lo down`;
 *                                   run it inside `unshare -rn`) and sleeps:
 *                                   its node has vanished for the others,
 *                                   who report how their allreduce failed
 *   comm-ranks stall OUTDIR VICTIM  VICTIM stops itself (SIGSTOP) 100 ms into
 *                                   twenty 64 MiB broadcasts (so it stops
 *                                   mid-transfer on a fast machine too),
 *                                   after writing its
 *                                   pid to OUTDIR/stalled; the test sends
 *                                   SIGCONT later; all report
 *   comm-ranks stats OUTDIR 0       accel_comm_stats(): each collective's
 *                                   byte and call counts move by exactly
 *                                   what a known sequence hands over
 *   comm-ranks late OUTDIR VICTIM   VICTIM sleeps 3 s before the allreduce
 *                                   the others wait in (run it with a short
 *                                   comm.timeout_s); all report
 *
 * Each rank writes OUTDIR/<mode>-<rank> ("<status> <seconds> <message>")
 * before it exits; exit status 0 when every check passed. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "comm-check.h"
#include "comm.h"
#include "ctx-impl.h"

static const char *g_out;
static int g_rank;

/* Written aside and renamed into place: the launcher may stop this rank
 * at any moment once another failed, and a report must be whole or
 * absent (an empty one, cut off after fopen, failed the test's parse). */
static void report(const char *mode, int st, double secs, const char *msg)
{
	char path[1024], tmp[1040];
	snprintf(path, sizeof(path), "%s/%s-%d", g_out, mode, g_rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (f) {
		fprintf(f, "%d %.3f %s", st, secs, msg);
		if (fclose(f) == 0)
			rename(tmp, path);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the core layer, with requests ---- */

static int c_wait(accel_ctx *ctx, int st, accel_req **req)
{
	return st ? st : accelp_comm_wait(ctx->comm, *req);
}
static int c_allreduce(void *p, const accel_view *s, const accel_view *r, uint32_t op)
{
	accel_ctx *ctx = p;
	accel_req *req = NULL;
	int st = accelp_comm_allreduce(ctx->comm, s, r, op, &req);
	return c_wait(ctx, st, &req);
}
static int c_reduce_scatter(void *p, const accel_view *s, const accel_view *r, uint32_t op)
{
	accel_ctx *ctx = p;
	accel_req *req = NULL;
	int st = accelp_comm_reduce_scatter(ctx->comm, s, r, op, &req);
	return c_wait(ctx, st, &req);
}
static int c_allgather(void *p, const accel_view *s, const accel_view *r)
{
	accel_ctx *ctx = p;
	accel_req *req = NULL;
	int st = accelp_comm_allgather(ctx->comm, s, r, &req);
	return c_wait(ctx, st, &req);
}
static int c_broadcast(void *p, const accel_view *b, int root)
{
	accel_ctx *ctx = p;
	accel_req *req = NULL;
	int st = accelp_comm_broadcast(ctx->comm, b, root, &req);
	return c_wait(ctx, st, &req);
}
static const char *c_errmsg(void *p)
{
	return accel_errmsg(p);
}
static void c_clear(void *p)
{
	accel_clear_error(p);
}
static int c_alloc(void *p, uint64_t bytes, void **ret)
{
	accel_ctx *ctx = p;
	return accelp_comm_mem_alloc(ctx->comm, ACCEL_DEVICE_CPU, 0, bytes, ret);
}
static void c_free(void *p, void *ptr)
{
	accel_ctx *ctx = p;
	accelp_comm_mem_free(ctx->comm, ptr);
}
static const comm_check_ops k_core_ops = {
	c_allreduce, c_reduce_scatter, c_allgather, c_broadcast, c_errmsg, c_clear, c_alloc, c_free,
};

/* ---- the public blocking API ---- */

static int p_allreduce(void *p, const accel_view *s, const accel_view *r, uint32_t op)
{
	return accel_allreduce(p, s->data, r->data, s->numel, s->dtype, op);
}
static int p_reduce_scatter(void *p, const accel_view *s, const accel_view *r, uint32_t op)
{
	return accel_reduce_scatter(p, s->data, r->data, r->numel, s->dtype, op);
}
static int p_allgather(void *p, const accel_view *s, const accel_view *r)
{
	return accel_allgather(p, s->data, r->data, s->numel, s->dtype);
}
static int p_broadcast(void *p, const accel_view *b, int root)
{
	return accel_broadcast(p, b->data, b->numel, b->dtype, root);
}
static const comm_check_ops k_public_ops = {
	p_allreduce, p_reduce_scatter, p_allgather, p_broadcast, c_errmsg, c_clear, NULL, NULL,
};

static int mode_matrix(accel_ctx *ctx, uint64_t maxn)
{
	static const uint64_t all[] = {0, 1, 7, 1000, 16385, 100003, 300007, 1048589};
	uint64_t sizes[8];
	int n_sizes = 0;
	for (int i = 0; i < 8; i++)
		if (all[i] <= maxn)
			sizes[n_sizes++] = all[i];
	int world = accel_world_size(ctx);
	comm_check cc = {.ops = &k_core_ops, .ctx = ctx, .rank = g_rank, .world = world,
	                 .sizes = sizes, .n_sizes = n_sizes, .all_reds_large = world == 2};
	int failures = comm_check_matrix(&cc);
	void *probe = NULL;
	if (accelp_comm_mem_alloc(ctx->comm, ACCEL_DEVICE_CPU, 0, 64, &probe) == ACCEL_OK && probe) {
		accelp_comm_mem_free(ctx->comm, probe);
		cc.use_mem = 1;
		failures += comm_check_matrix(&cc);
	}
	cc.ops = &k_public_ops;
	cc.use_mem = 0;
	if (cc.n_sizes > 5)  /* the public calls are thin wrappers: small sizes suffice */
		cc.n_sizes = 5;
	failures += comm_check_matrix(&cc);
	char msg[128];
	snprintf(msg, sizeof(msg), "%d failures, backend %s", failures,
	         accelp_comm_backend_name(ctx->comm));
	report("matrix", failures ? ACCEL_ERR_COMM : ACCEL_OK, 0, msg);
	return failures ? 1 : 0;
}

static int mode_kill(accel_ctx *ctx, int victim)
{
	enum { N = 16 << 20 };
	float *x = calloc(N, sizeof(float));
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_F32, .device = ACCEL_DEVICE_CPU,
	                .data = x, .numel = N};
	accel_req *req = NULL;
	/* The launcher stops the survivors (SIGTERM) as soon as the victim dies;
	 * let them live long enough to see and report the failure themselves
	 * (it SIGKILLs after its grace period). */
	if (g_rank != victim)
		signal(SIGTERM, SIG_IGN);
	if (accelp_comm_barrier(ctx->comm, NULL))
		return 1;
	double t0 = now_s();
	int st = accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req);
	if (g_rank == victim) {
		usleep(3000);
		raise(SIGKILL);
	}
	if (!st)
		st = accelp_comm_wait(ctx->comm, req);
	report("kill", st, now_s() - t0, accel_errmsg(ctx));
	free(x);
	return 0;
}

static int mode_leave(accel_ctx **pctx, int victim)
{
	if (g_rank == victim) {
		if (accel_wait_for_everyone(*pctx))
			return 1;
		*pctx = accel_ctx_free(*pctx);
		report("leave", 0, 0, "left");
		return 0;
	}
	float x[4] = {1, 2, 3, 4};
	if (accel_wait_for_everyone(*pctx))
		return 1;
	double t0 = now_s();
	int st = accel_allreduce(*pctx, x, x, 4, ACCEL_DTYPE_F32, ACCEL_RED_SUM);
	report("leave", st, now_s() - t0, accel_errmsg(*pctx));
	return 0;
}

static int mode_mismatch(accel_ctx *ctx, int victim)
{
	float x[8] = {0}, y[8 * 16];  /* up to 16 ranks */
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_F32, .device = ACCEL_DEVICE_CPU,
	                .data = x, .numel = 8};
	accel_view g = v;
	g.data = y;
	g.numel = 8 * (uint64_t)accel_world_size(ctx);
	if (accel_wait_for_everyone(ctx))
		return 1;
	double t0 = now_s();
	accel_req *req = NULL;
	int st = g_rank == victim ? accelp_comm_allgather(ctx->comm, &v, &g, &req)
	                          : accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req);
	if (!st)
		st = accelp_comm_wait(ctx->comm, req);
	report("mismatch", st, now_s() - t0, accel_errmsg(ctx));
	return 0;
}

static int mode_late(accel_ctx *ctx, int victim)
{
	float x[4] = {1, 2, 3, 4};
	if (accel_wait_for_everyone(ctx))
		return 1;
	if (g_rank == victim)
		sleep(3);  /* then it tries the same all-reduce and reports too */
	double t0 = now_s();
	int st = accel_allreduce(ctx, x, x, 4, ACCEL_DTYPE_F32, ACCEL_RED_SUM);
	report("late", st, now_s() - t0, accel_errmsg(ctx));
	return 0;
}

static void *stop_later(void *arg)
{
	(void)arg;
	usleep(100000);
	char path[1024];
	snprintf(path, sizeof(path), "%s/stalled", g_out);
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	raise(SIGSTOP);  /* the whole process, in the middle of a transfer */
	return NULL;
}

static int mode_stall(accel_ctx *ctx, int victim)
{
	enum { N = 16 << 20 };
	float *x = calloc(N, sizeof(float));
	pthread_t t;
	if (!x || accel_wait_for_everyone(ctx))
		return 1;
	if (g_rank == victim && pthread_create(&t, NULL, stop_later, NULL) != 0)
		return 1;
	double t0 = now_s();
	int st = ACCEL_OK;
	/* broadcasts from rank 0 stream into the stopped rank until its
	 * receive window is full (an all-reduce round waits for its data) */
	for (int i = 0; i < 20 && st == ACCEL_OK; i++)
		st = accel_broadcast(ctx, x, N, ACCEL_DTYPE_F32, 0);
	if (g_rank == victim)
		pthread_join(t, NULL);
	report("stall", st, now_s() - t0, st ? accel_errmsg(ctx) : "ok");
	free(x);
	return st ? 1 : 0;
}

static int mode_vanish(accel_ctx *ctx, int victim)
{
	float x[4] = {1, 2, 3, 4};
	if (g_rank != victim)
		signal(SIGTERM, SIG_IGN);  /* report before the launcher stops us */
	if (accel_wait_for_everyone(ctx))
		return 1;
	if (g_rank == victim) {
		if (system("ip link set lo down") != 0) {
			report("vanish", ACCEL_ERR_INTERNAL, 0, "ip link set lo down failed");
			return 1;
		}
		sleep(120);  /* alive, unreachable: the launcher stops it */
		return 0;
	}
	double t0 = now_s();
	int st = accel_allreduce(ctx, x, x, 4, ACCEL_DTYPE_F32, ACCEL_RED_SUM);
	report("vanish", st, now_s() - t0, accel_errmsg(ctx));
	return st ? 1 : 0;  /* so that the launcher stops the victim */
}

/* accel_comm_stats(): one collective of each kind with sizes and dtypes
 * chosen so that every kind moves by a different, known amount; a request
 * of the core layer counts like a public call, a group's like the world's. */
static int mode_stats(accel_ctx *ctx)
{
	char msg[512] = "ok";
	int st = ACCEL_OK, w = accel_world_size(ctx);
	if (w > 8)
		return 2;
	uint64_t b0[ACCEL_COLL_COUNT], c0[ACCEL_COLL_COUNT], b1, c1;
	float x[1000] = {0}, y[1000];
	double gs[100] = {0}, g[100 * 8];
	uint16_t h[50] = {0};
	for (uint32_t k = 0; k < ACCEL_COLL_COUNT; k++)
		if ((st = accel_comm_stats(ctx, k, &b0[k], &c0[k])))
			goto out;
	/* allreduce 1000 f32: 4000 bytes, twice (public + core request) */
	if ((st = accel_allreduce(ctx, x, y, 1000, ACCEL_DTYPE_F32, ACCEL_RED_SUM)))
		goto out;
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, x, 1000};
	accel_req *q = NULL;
	if ((st = accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &q)) ||
	    (st = accelp_comm_wait(ctx->comm, q)))
		goto out;
	/* reduce_scatter 300 f32 per rank: w*1200 bytes sent */
	if ((st = accel_reduce_scatter(ctx, x, y, 300, ACCEL_DTYPE_F32, ACCEL_RED_SUM)))
		goto out;
	/* allgather 100 f64 per rank: 800 bytes */
	if ((st = accel_allgather(ctx, gs, g, 100, ACCEL_DTYPE_F64)))
		goto out;
	/* broadcast 50 bf16: 100 bytes */
	if ((st = accel_broadcast(ctx, h, 50, ACCEL_DTYPE_BF16, 0)))
		goto out;
	if ((st = accel_wait_for_everyone(ctx)))
		goto out;
	static const uint64_t want_b[ACCEL_COLL_COUNT] = {8000, 0, 800, 100, 0};
	static const uint64_t want_c[ACCEL_COLL_COUNT] = {2, 1, 1, 1, 1};
	uint64_t tb = 0, tc = 0, ab, ac;
	for (uint32_t k = 0; k < ACCEL_COLL_COUNT; k++) {
		uint64_t wb = k == ACCEL_COLL_REDUCE_SCATTER ? 1200u * (uint64_t)w : want_b[k];
		if ((st = accel_comm_stats(ctx, k, &b1, &c1)))
			goto out;
		tb += b1;
		tc += c1;
		if (b1 - b0[k] != wb || c1 - c0[k] != want_c[k]) {
			snprintf(msg, sizeof(msg), "collective %u: +%llu bytes in +%llu calls, expected "
			         "+%llu in +%llu", k, (unsigned long long)(b1 - b0[k]),
			         (unsigned long long)(c1 - c0[k]), (unsigned long long)wb,
			         (unsigned long long)want_c[k]);
			st = ACCEL_ERR_INTERNAL;
			goto out;
		}
	}
	if ((st = accel_comm_stats(ctx, ACCEL_COLL_ALL, &ab, &ac)))
		goto out;
	if (ab != tb || ac != tc) {
		snprintf(msg, sizeof(msg), "ACCEL_COLL_ALL %llu/%llu != the sum %llu/%llu",
		         (unsigned long long)ab, (unsigned long long)ac, (unsigned long long)tb,
		         (unsigned long long)tc);
		st = ACCEL_ERR_INTERNAL;
		goto out;
	}
	/* bad arguments name themselves */
	if (accel_comm_stats(ctx, 7, &b1, NULL) != ACCEL_ERR_INVALID_ARG ||
	    !strstr(accel_errmsg(ctx), "unknown collective 7")) {
		snprintf(msg, sizeof(msg), "kind 7 not refused: %s", accel_errmsg(ctx));
		st = ACCEL_ERR_INTERNAL;
		goto out;
	}
	accel_clear_error(ctx);
	if (accel_comm_stats(ctx, 0, NULL, NULL) != ACCEL_ERR_INVALID_ARG ||
	    !strstr(accel_errmsg(ctx), "both outputs are NULL")) {
		snprintf(msg, sizeof(msg), "NULL outputs not refused: %s", accel_errmsg(ctx));
		st = ACCEL_ERR_INTERNAL;
		goto out;
	}
	accel_clear_error(ctx);
out:
	if (st && !strcmp(msg, "ok"))
		snprintf(msg, sizeof(msg), "%s", accel_errmsg(ctx));
	report("stats", st, 0, msg);
	return st ? 1 : 0;
}

int main(int argc, char **argv)
{
	accel_ctx *ctx = NULL;
	if (argc < 3) {
		fprintf(stderr, "usage: comm-ranks matrix|kill|leave|early|mismatch|late|vanish|stall|stats OUTDIR [VICTIM]\n");
		return 2;
	}
	g_out = argv[2];
	if (!strcmp(argv[1], "early")) {
		const char *r = getenv("ACCEL_RANK");
		g_rank = r ? atoi(r) : -1;
		if (g_rank == (argc > 3 ? atoi(argv[3]) : 1))
			return 0;
		double t0 = now_s();
		int st = accel_ctx_new(NULL, &ctx);
		report("early", st, now_s() - t0, ctx ? accel_errmsg(ctx) : accel_status_str(st));
		accel_ctx_free(ctx);
		return st ? 1 : 0;
	}
	int st = accel_ctx_new(NULL, &ctx);
	if (st) {
		fprintf(stderr, "accel_ctx_new: %s\n", ctx ? accel_errmsg(ctx) : accel_status_str(st));
		accel_ctx_free(ctx);
		return 3;
	}
	g_rank = accel_rank(ctx);
	int victim = argc > 3 ? atoi(argv[3]) : 1;
	int rc;
	if (!strcmp(argv[1], "matrix"))
		rc = mode_matrix(ctx, argc > 4 ? strtoull(argv[4], NULL, 10) : 1048589);
	else if (!strcmp(argv[1], "kill"))
		rc = mode_kill(ctx, victim);
	else if (!strcmp(argv[1], "leave"))
		rc = mode_leave(&ctx, victim);
	else if (!strcmp(argv[1], "mismatch"))
		rc = mode_mismatch(ctx, victim);
	else if (!strcmp(argv[1], "late"))
		rc = mode_late(ctx, victim);
	else if (!strcmp(argv[1], "vanish"))
		rc = mode_vanish(ctx, victim);
	else if (!strcmp(argv[1], "stall"))
		rc = mode_stall(ctx, victim);
	else if (!strcmp(argv[1], "stats"))
		rc = mode_stats(ctx);
	else
		rc = 2;
	accel_ctx_free(ctx);
	return rc;
}
