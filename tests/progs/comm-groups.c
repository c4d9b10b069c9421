/* SPDX-License-Identifier: MIT */
/* tests/progs/comm-groups.c: one rank of the group (sub-communicator) tests,
 * through the host table's group_* members (what a plugin calls), on the
 * backend the job selects.  Started by `accel launch -n 4` (shm and tcp,
 * tests/test-comm-groups.sh) or `mpirun -n 4` (tests/meson.build, suite mpi).
 *
 *   comm-groups values        world of 4: split by rank % 2 (key -rank, so
 *                             the order is reversed), by node and across
 *                             nodes (HYBRID_SHARD's two splits), a split of
 *                             a split with a rank of colour NONE; every
 *                             collective on every group, blocking and with a
 *                             request, small and large, checked against
 *                             values computed from the members' world ranks
 *   comm-groups late VICTIM   in the rank % 2 groups, VICTIM comes to a group
 *                             all-reduce 4 s late (run with comm.timeout_s
 *                             2): its partner's error names the all-reduce,
 *                             the group's sequence number and VICTIM by its
 *                             world rank; the other group is unaffected
 *   comm-groups dead VICTIM   as late, but VICTIM dies (SIGKILL) instead:
 *                             its partner's error says it is dead (shm) or
 *                             gone (tcp)
 *
 * Exit status 0 when every check passed on this rank; failures are printed
 * to stderr with the rank. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "accel/comm.h"
#include "comm.h"
#include "ctx-impl.h"

static int g_rank, g_fail;
static accel_ctx *g_ctx;
static const accel_host_v1 *H;
static struct accel_host g_h;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "[rank %d] %s:%d: ", g_rank, __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			g_fail++;                                              \
		}                                                              \
	} while (0)

static accel_view view(uint32_t dt, void *p, uint64_t n)
{
	accel_view v = {sizeof(accel_view), dt, ACCEL_DEVICE_CPU, 0, p, n};
	return v;
}

/* Issue through a request (test until done, then wait) or blocking. */
static int done(int st, accel_req **reqp, int async)
{
	if (st || !async)
		return st;
	accel_req *req = *reqp;   /* read after the call that wrote it */
	int32_t d = 0;
	for (int i = 0; i < 100000000 && !d && st == ACCEL_OK; i++)
		st = H->test(&g_h, req, &d);
	int w = H->wait(&g_h, req);
	return st ? st : w;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *err(void)
{
	return accel_errmsg(g_ctx);
}

/* Every collective on g; wr: its members' world ranks. */
static void check_group(accel_group *g, const char *name, uint64_t n, int async)
{
	int32_t rank = -1, size = 0;
	CHECK(H->group_info(&g_h, g, &rank, &size) == ACCEL_OK, "%s: info: %s", name, err());
	int32_t *wr = calloc((size_t)size, sizeof(*wr));
	for (int32_t i = 0; i < size; i++)
		CHECK(H->group_world_rank(&g_h, g, i, &wr[i]) == ACCEL_OK, "%s: world_rank", name);
	CHECK(wr[rank] == g_rank, "%s: my world rank %d, group says %d", name, g_rank, wr[rank]);
	accel_req *req = NULL;
	accel_req **rq = async ? &req : NULL;
	int st;

	/* allreduce SUM f32, in place */
	float *x = malloc(n * sizeof(float));
	for (uint64_t i = 0; i < n; i++)
		x[i] = (float)g_rank + (float)(i % 7) * 0.5f;
	accel_view vx = view(ACCEL_DTYPE_F32, x, n);
	st = done(H->group_allreduce(&g_h, g, &vx, &vx, ACCEL_RED_SUM, rq), &req, async);
	CHECK(st == ACCEL_OK, "%s: allreduce: %s", name, err());
	for (uint64_t i = 0; i < n && st == ACCEL_OK; i++) {
		float want = 0;
		for (int32_t k = 0; k < size; k++)
			want += (float)wr[k] + (float)(i % 7) * 0.5f;
		if (x[i] != want) {
			CHECK(0, "%s: allreduce[%llu] = %g, want %g", name, (unsigned long long)i, x[i],
			      want);
			break;
		}
	}
	/* allreduce MAX i32 and AVG f64, out of place */
	int32_t *a = malloc(n * sizeof(int32_t)), *b = malloc(n * sizeof(int32_t));
	for (uint64_t i = 0; i < n; i++)
		a[i] = g_rank * 10 + (int32_t)(i % 5);
	accel_view va = view(ACCEL_DTYPE_I32, a, n), vb = view(ACCEL_DTYPE_I32, b, n);
	st = done(H->group_allreduce(&g_h, g, &va, &vb, ACCEL_RED_MAX, rq), &req, async);
	int32_t wmax = wr[0];
	for (int32_t k = 1; k < size; k++)
		wmax = wr[k] > wmax ? wr[k] : wmax;
	CHECK(st == ACCEL_OK && b[0] == wmax * 10 && b[n - 1] == wmax * 10 + (int32_t)((n - 1) % 5),
	      "%s: allreduce max: %s (%d)", name, st ? err() : "values", b[0]);
	double d[3] = {g_rank, 2.0 * g_rank, 1.0}, davg[3];
	accel_view vd = view(ACCEL_DTYPE_F64, d, 3), vdo = view(ACCEL_DTYPE_F64, davg, 3);
	st = done(H->group_allreduce(&g_h, g, &vd, &vdo, ACCEL_RED_AVG, rq), &req, async);
	double mean = 0;
	for (int32_t k = 0; k < size; k++)
		mean += wr[k];
	mean /= size;
	CHECK(st == ACCEL_OK && fabs(davg[0] - mean) < 1e-12 && fabs(davg[1] - 2 * mean) < 1e-12 &&
	      davg[2] == 1.0, "%s: allreduce avg: %s (%g, want %g)", name, st ? err() : "values",
	      davg[0], mean);

	/* reduce_scatter SUM f32: block k of rank w holds w * 100 + k */
	float *s = malloc(n * (size_t)size * sizeof(float)), *r = malloc(n * sizeof(float));
	for (int32_t k = 0; k < size; k++)
		for (uint64_t i = 0; i < n; i++)
			s[(uint64_t)k * n + i] = (float)(g_rank * 100 + k) + (float)(i % 3);
	accel_view vs = view(ACCEL_DTYPE_F32, s, n * (uint64_t)size), vr = view(ACCEL_DTYPE_F32, r, n);
	st = done(H->group_reduce_scatter(&g_h, g, &vs, &vr, ACCEL_RED_SUM, rq), &req, async);
	float wsum = 0;
	for (int32_t k = 0; k < size; k++)
		wsum += (float)(wr[k] * 100 + rank);
	CHECK(st == ACCEL_OK && r[0] == wsum && r[n - 1] == wsum + (float)size * (float)((n - 1) % 3),
	      "%s: reduce_scatter: %s (%g, want %g)", name, st ? err() : "values", r[0], wsum);

	/* allgather i32: block k comes from member k */
	int32_t *ga = malloc(n * (size_t)size * sizeof(int32_t));
	for (uint64_t i = 0; i < n; i++)
		a[i] = g_rank * 1000 + (int32_t)(i % 11);
	accel_view vga = view(ACCEL_DTYPE_I32, ga, n * (uint64_t)size);
	st = done(H->group_allgather(&g_h, g, &va, &vga, rq), &req, async);
	CHECK(st == ACCEL_OK, "%s: allgather: %s", name, err());
	for (int32_t k = 0; k < size && st == ACCEL_OK; k++)
		if (ga[(uint64_t)k * n] != wr[k] * 1000 ||
		    ga[(uint64_t)k * n + n - 1] != wr[k] * 1000 + (int32_t)((n - 1) % 11)) {
			CHECK(0, "%s: allgather block %d starts %d, want %d", name, k, ga[(uint64_t)k * n],
			      wr[k] * 1000);
			break;
		}

	/* broadcast from the last member (root in group ranks) */
	int32_t root = size - 1;
	for (uint64_t i = 0; i < n; i++)
		a[i] = rank == root ? g_rank * 7 + (int32_t)(i % 13) : -1;
	st = done(H->group_broadcast(&g_h, g, &va, root, rq), &req, async);
	CHECK(st == ACCEL_OK && a[0] == wr[root] * 7 && a[n - 1] == wr[root] * 7 + (int32_t)((n - 1) % 13),
	      "%s: broadcast: %s (%d, want %d)", name, st ? err() : "values", a[0], wr[root] * 7);
	st = done(H->group_barrier(&g_h, g, rq), &req, async);
	CHECK(st == ACCEL_OK, "%s: barrier: %s", name, err());

	/* a root outside the group is refused here, before any rank waits */
	CHECK(H->group_broadcast(&g_h, g, &va, size, NULL) == ACCEL_ERR_INVALID_ARG &&
	      strstr(err(), "is not a rank"), "%s: bad root: %s", name, err());
	accel_clear_error(g_ctx);
	free(x);
	free(a);
	free(b);
	free(s);
	free(r);
	free(ga);
	free(wr);
}

static accel_group *split(accel_group *parent, int32_t color, int32_t key, const char *what)
{
	accel_group *g = (accel_group *)1;
	int st = H->group_split(&g_h, parent, color, key, &g);
	CHECK(st == ACCEL_OK, "split %s: %s", what, err());
	return st ? NULL : g;
}

static int mode_values(void)
{
	accel_world_v1 w;
	H->world(&g_h, &w);
	CHECK(w.world_size == 4, "world of %d, the test wants 4", w.world_size);
	/* colours below NONE are refused on every rank, before any exchange */
	accel_group *bad = NULL;
	CHECK(H->group_split(&g_h, NULL, -2, 0, &bad) == ACCEL_ERR_INVALID_ARG &&
	      strstr(err(), "colour -2"), "colour -2: %s", err());
	accel_clear_error(g_ctx);

	/* by rank % 2, ordered by -rank: even = world [2, 0], odd = [3, 1] */
	accel_group *par = split(NULL, g_rank % 2, -g_rank, "rank % 2");
	int32_t pr = -1, ps = 0, w0 = -1;
	H->group_info(&g_h, par, &pr, &ps);
	H->group_world_rank(&g_h, par, 0, &w0);
	CHECK(ps == 2 && pr == (g_rank < 2 ? 1 : 0) && w0 == (g_rank % 2 ? 3 : 2),
	      "rank %% 2: rank %d of %d, rank 0 is world %d", pr, ps, w0);
	/* HYBRID_SHARD: within the node, and across nodes */
	accel_group *node = split(NULL, w.node_rank, w.local_rank, "within the node");
	accel_group *across = split(NULL, w.local_rank, w.node_rank, "across nodes");
	int32_t ns = 0, as = 0;
	H->group_info(&g_h, node, NULL, &ns);
	H->group_info(&g_h, across, NULL, &as);
	CHECK(ns == w.local_world_size && as == w.num_nodes, "node group %d (want %d), across %d "
	      "(want %d)", ns, w.local_world_size, as, w.num_nodes);
	/* a split of a split; world rank 3 takes no part */
	accel_group *sub = split(par, g_rank == 3 ? ACCEL_COMM_SPLIT_NONE : 5, 0, "of a split");
	CHECK((g_rank == 3) == (sub == NULL), "NONE: group %p on rank %d", (void *)sub, g_rank);
	const uint64_t sizes[2] = {5, 70001};  /* one-shot and pipelined paths */
	for (int k = 0; k < 2; k++)
		for (int async = 0; async < 2; async++) {
			check_group(par, "rank % 2", sizes[k], async);
			check_group(node, "within the node", sizes[k], async);
			check_group(across, "across nodes", sizes[k], async);
			if (sub)
				check_group(sub, "split of a split", sizes[k], async);
			check_group(NULL, "world", sizes[k], async);
		}
	if (sub) {
		int32_t sr = -1, ss = 0, sw = -1;
		H->group_info(&g_h, sub, &sr, &ss);
		H->group_world_rank(&g_h, sub, 0, &sw);
		CHECK(ss == (g_rank % 2 ? 1 : 2) && sw == (g_rank % 2 ? 1 : 2),
		      "split of a split: size %d, rank 0 is world %d", ss, sw);
	}
	/* a request left in flight is released by group_free */
	float y[4] = {1, 2, 3, 4};
	accel_view vy = view(ACCEL_DTYPE_F32, y, 4);
	accel_req *req = NULL;
	CHECK(H->group_allreduce(&g_h, par, &vy, &vy, ACCEL_RED_SUM, &req) == ACCEL_OK, "%s", err());
	H->group_free(&g_h, sub);
	H->group_free(&g_h, par);
	H->group_free(&g_h, node);
	H->group_free(&g_h, across);
	/* a freed group is refused, not used */
	CHECK(H->group_barrier(&g_h, par, NULL) == ACCEL_ERR_INVALID_ARG, "freed group: %s", err());
	accel_clear_error(g_ctx);
	CHECK(accel_wait_for_everyone(g_ctx) == ACCEL_OK, "final barrier: %s", err());
	return g_fail ? 1 : 0;
}

static int mode_late(int victim, int die)
{
	if (die && g_rank != victim)
		signal(SIGTERM, SIG_IGN);  /* report before the launcher stops us */
	accel_group *par = split(NULL, g_rank % 2, g_rank, "rank % 2");
	if (!par)
		return 1;
	float x[4] = {1, 2, 3, 4};
	accel_view vx = view(ACCEL_DTYPE_F32, x, 4);
	/* one collective that works, so the failing one is #2 of the group;
	 * then every group is up before anything fails (a backend may abandon
	 * a bootstrap still waiting when the job is known to have failed) */
	CHECK(H->group_barrier(&g_h, par, NULL) == ACCEL_OK, "barrier: %s", err());
	CHECK(accel_wait_for_everyone(g_ctx) == ACCEL_OK, "world barrier: %s", err());
	int partner = victim ^ 2;   /* the other member of victim's group */
	double t0 = now_s();
	if (g_rank == victim) {
		if (die)
			raise(SIGKILL);
		sleep(4);
	}
	int st = H->group_allreduce(&g_h, par, &vx, &vx, ACCEL_RED_SUM, NULL);
	char want[32];
	snprintf(want, sizeof(want), "rank %d", victim);
	if (g_rank == partner) {
		const char *m = err();
		CHECK(st == (die ? ACCEL_ERR_PEER : ACCEL_ERR_TIMEOUT), "partner got %s: %s",
		      accel_status_str(st), m);
		CHECK(strstr(m, "allreduce") && strstr(m, "#2") && strstr(m, want) &&
		      strstr(m, "group 1c"), "the message does not name allreduce #2, the group and "
		      "world rank %d: %s", victim, m);
		/* the group's members, not its ranks: world rank 1 is rank 1 of
		 * the odd group only by accident, 3 never is */
		fprintf(stderr, "[rank %d] saw: %s\n", g_rank, m);
	} else if (g_rank != victim) {
		CHECK(st == ACCEL_OK && x[0] == 2.0f, "unaffected group: %s", err());
	}
	accel_clear_error(g_ctx);
	/* the world still works, and nobody leaves (rank 0 hosts the store the
	 * partner asked) before everyone is done */
	if (!die) {
		/* within comm.timeout_s (2 s) of each other: the partner spent its
		 * timeout and up to 2 s asking the store, the victim 4 s asleep */
		double left = t0 + 6.0 - now_s();
		if (left > 0)
			usleep((useconds_t)(left * 1e6));
		CHECK(accel_wait_for_everyone(g_ctx) == ACCEL_OK, "world barrier: %s", err());
	}
	return g_fail ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: comm-groups values|late|dead [VICTIM]\n");
		return 2;
	}
	int st = accel_ctx_new(NULL, &g_ctx);
	if (st) {
		fprintf(stderr, "accel_ctx_new: %s\n", g_ctx ? accel_errmsg(g_ctx) : accel_status_str(st));
		accel_ctx_free(g_ctx);
		return 3;
	}
	g_rank = accel_rank(g_ctx);
	H = accelp_host_table();
	g_h = (struct accel_host){.ctx = g_ctx, .name = "comm-groups"};
	int victim = argc > 2 ? atoi(argv[2]) : 3;
	int rc = 2;
	if (!strcmp(argv[1], "values"))
		rc = mode_values();
	else if (!strcmp(argv[1], "late"))
		rc = mode_late(victim, 0);
	else if (!strcmp(argv[1], "dead"))
		rc = mode_late(victim, 1);
	if (rc == 0)
		fprintf(stderr, "[rank %d] comm-groups %s: ok (backend %s)\n", g_rank, argv[1],
		        accelp_comm_backend_name(g_ctx->comm));
	accel_ctx_free(g_ctx);
	return rc;
}
