/* SPDX-License-Identifier: MIT */
/* bench/optim.c: one AdamW step over N f32 parameters with accel's kernel
 * (core/optim.c) on T threads, next to a STREAM-style triad over arrays of
 * the same length on the same T threads, measured in the same process, so
 * the step can be read as a fraction of the bandwidth those threads get.
 *
 * Threads: the AdamW step runs on the core's optimizer pool
 * (core/optim_pool.c, what host->optim_step_n uses: the caller and T - 1
 * workers take 64 Ki-element pieces in turn); with --pool team, on this
 * program's own team instead, each thread stepping one fixed slice (to
 * tell the pool's cost from the kernel's).  The triad always runs on the
 * team: T threads (the caller and T - 1 workers, started once), each on
 * its own slice.  Every thread first touches the slice of every array the
 * team gives it, so pages are placed where they are used.  Elements are
 * independent, so the bits do not depend on the split.
 *
 * Method (the machines are shared and noisy): every call is timed on its
 * own, AdamW and triad take turns for --min-time seconds each per round;
 * a result is the fastest call (other processes only ever make calls
 * slower) with the median alongside.
 *   AdamW  reads p, g, m, v and writes p, m, v: 28 bytes per parameter with
 *          f32 gradients (24 with bf16/f16), counted as moved
 *   triad  a[i] = b[i] + s * c[i]: 12 bytes per element, STREAM's count
 *          (the write-allocate read of a[] is not counted, as in STREAM)
 * One JSON line per result on stdout; bench/optim-peers.sh adds PyTorch. */
#if defined(__GNUC__) && !defined(__clang__)
/* The triad must be vectorised too, at the -O2 of debugoptimized builds. */
#pragma GCC optimize("tree-loop-vectorize", "vect-cost-model=dynamic")
#endif

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "error.h"
#include "backends/common/half.h"
#include "optim.h"
#include "optim_pool.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_dbl(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

static void machine(char *buf, size_t cap)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	snprintf(buf, cap, "unknown");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "model name", 10)) {
			char *p = strchr(line, ':');
			if (p) {
				p += 1 + strspn(p + 1, " \t");
				p[strcspn(p, "\n")] = '\0';
				snprintf(buf, cap, "%s", p);
			}
			break;
		}
	if (f)
		fclose(f);
}

/* Pages are touched by the thread that uses them (first_touch), not here. */
static void *alloc(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes))
		return NULL;
	return p;
}

static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s,
                  uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		a[i] = b[i] + s * c[i];
}

/* ---- a team of threads: the caller is thread 0 ---- */

typedef struct team team;
typedef void (*team_fn)(team *tm, int idx);
struct team {
	int n;
	pthread_t *th;
	pthread_barrier_t start, done;
	team_fn fn;
	int quit;
	void *arg;
};

typedef struct worker_arg {
	team *tm;
	int idx;
} worker_arg;

static void *worker(void *varg)
{
	worker_arg *w = varg;
	for (;;) {
		pthread_barrier_wait(&w->tm->start);
		if (w->tm->quit)
			break;
		w->tm->fn(w->tm, w->idx);
		pthread_barrier_wait(&w->tm->done);
	}
	return NULL;
}

/* fn(tm, i) on every thread i of the team at once; returns when all did. */
static void team_run(team *tm, team_fn fn)
{
	tm->fn = fn;
	if (tm->n > 1)
		pthread_barrier_wait(&tm->start);
	fn(tm, 0);
	if (tm->n > 1)
		pthread_barrier_wait(&tm->done);
}

static worker_arg *g_wargs;

static int team_start(team *tm, int n)
{
	tm->n = n;
	if (n == 1)
		return 0;
	tm->th = calloc((size_t)n, sizeof(*tm->th));
	g_wargs = calloc((size_t)n, sizeof(*g_wargs));
	if (!tm->th || !g_wargs)
		return -1;
	pthread_barrier_init(&tm->start, NULL, (unsigned)n);
	pthread_barrier_init(&tm->done, NULL, (unsigned)n);
	for (int i = 1; i < n; i++) {
		g_wargs[i] = (worker_arg){tm, i};
		if (pthread_create(&tm->th[i], NULL, worker, &g_wargs[i]))
			return -1;
	}
	return 0;
}

static void team_stop(team *tm)
{
	if (tm->n > 1) {
		tm->quit = 1;
		pthread_barrier_wait(&tm->start);
		for (int i = 1; i < tm->n; i++)
			pthread_join(tm->th[i], NULL);
		pthread_barrier_destroy(&tm->start);
		pthread_barrier_destroy(&tm->done);
	}
	free(tm->th);
	free(g_wargs);
}

/* Thread idx's slice [lo, hi) of n elements; boundaries on multiples of 16
 * elements (whole cache lines of f32, and where the kernel's vector loop
 * would be). */
static void slice(uint64_t n, int nt, int idx, uint64_t *lo, uint64_t *hi)
{
	uint64_t per = (n + (uint64_t)nt - 1) / (uint64_t)nt;
	per = (per + 15) / 16 * 16;
	uint64_t a = per * (uint64_t)idx;
	*lo = a < n ? a : n;
	*hi = *lo + per < n ? *lo + per : n;
}

/* What the team works on. */
typedef struct job {
	uint64_t n;
	float *p, *m, *v, *a, *b, *c;
	void *g;
	uint32_t gdt;
	const accel_optim *opt;
	uint64_t t;
	int failed;
} job;

static float value_at(uint64_t i)
{
	uint64_t z = i * 0x9e3779b97f4a7c15ull + 12345;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (float)((double)(z >> 40) * 0x1p-24 - 0.5);
}

static void first_touch(team *tm, int idx)
{
	job *j = tm->arg;
	uint64_t lo, hi;
	slice(j->n, tm->n, idx, &lo, &hi);
	size_t gb = accel_dtype_size(j->gdt);
	memset(j->m + lo, 0, (hi - lo) * 4);
	memset(j->v + lo, 0, (hi - lo) * 4);
	memset(j->a + lo, 0, (hi - lo) * 4);
	for (uint64_t i = lo; i < hi; i++) {
		float x = value_at(i);
		j->p[i] = x;
		j->b[i] = x;
		j->c[i] = 1 - x;
		if (j->gdt == ACCEL_DTYPE_F32)
			((float *)j->g)[i] = 0.01f * x;
		else if (j->gdt == ACCEL_DTYPE_BF16)
			((uint16_t *)j->g)[i] = accel_f32_to_bf16(0.01f * x);
		else
			((uint16_t *)j->g)[i] = accel_f32_to_f16(0.01f * x);
	}
	(void)gb;
}

static void triad_part(team *tm, int idx)
{
	job *j = tm->arg;
	uint64_t lo, hi;
	slice(j->n, tm->n, idx, &lo, &hi);
	triad(j->a + lo, j->b + lo, j->c + lo, 3.0f, hi - lo);
}

static void adamw_part(team *tm, int idx)
{
	job *j = tm->arg;
	uint64_t lo, hi;
	accel_err err = {0};
	slice(j->n, tm->n, idx, &lo, &hi);
	size_t gb = accel_dtype_size(j->gdt);
	float *state[2] = {j->m + lo, j->v + lo};
	if (hi > lo && accelp_optim_step_range(j->opt, NULL, j->t, 1e-3, j->p + lo,
	                                       (char *)j->g + lo * gb, j->gdt, state, hi - lo, 1.0,
	                                       &err)) {
		fprintf(stderr, "bench-optim: thread %d: %s\n", idx, err.msg);
		j->failed = 1;
	}
}

/* The CPUs this process may run on. */
static int affinity_cpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

typedef struct timing {
	double *t;
	size_t n, cap;
} timing;

static int add_time(timing *tm, double t)
{
	if (tm->n == tm->cap) {
		size_t cap = tm->cap ? 2 * tm->cap : 256;
		double *nt = realloc(tm->t, cap * sizeof(double));
		if (!nt)
			return -1;
		tm->t = nt;
		tm->cap = cap;
	}
	tm->t[tm->n++] = t;
	return 0;
}

static void summary(timing *tm, double *ret_min, double *ret_median)
{
	qsort(tm->t, tm->n, sizeof(double), cmp_dbl);
	*ret_min = tm->t[0];
	*ret_median = tm->t[tm->n / 2];
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: bench-optim [--n N] [--threads T] [--pool core|team] [--min-time S]\n"
	        "                   [--rounds R] [--kernel auto|generic|avx2-fma]\n"
	        "                   [--gdtype f32|bf16|f16]\n"
	        "AdamW step (accel) and STREAM triad on N f32 elements (default 16777216) on T\n"
	        "threads (default 1; 0: every CPU this process may use); each round times every\n"
	        "call for S seconds (default 0.5) per benchmark, R rounds (default 3) alternate\n"
	        "them.  --pool: AdamW on the core's optimizer pool (default) or on fixed\n"
	        "slices of this program's threads.  JSON lines on stdout.\n");
}

int main(int argc, char **argv)
{
	uint64_t n = UINT64_C(16) << 20;
	double min_time = 0.5;
	int rounds = 3, threads = 1;
	const char *kernel = "auto", *pool_kind = "core";
	uint32_t gdt = ACCEL_DTYPE_F32;
	char mach[256];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--n") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pool") && i + 1 < argc)
			pool_kind = argv[++i];
		else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
			min_time = atof(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--kernel") && i + 1 < argc)
			kernel = argv[++i];
		else if (!strcmp(argv[i], "--gdtype") && i + 1 < argc)
			gdt = accel_dtype_parse(argv[++i]);
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (threads == 0)
		threads = affinity_cpus();
	int use_pool = !strcmp(pool_kind, "core");
	if (!use_pool && strcmp(pool_kind, "team")) {
		fprintf(stderr, "bench-optim: --pool is core or team, not '%s'\n", pool_kind);
		return 2;
	}
	if (!n || rounds < 1 || !(min_time > 0) || threads < 1 || threads > 4096 ||
	    (gdt != ACCEL_DTYPE_F32 && gdt != ACCEL_DTYPE_BF16 && gdt != ACCEL_DTYPE_F16)) {
		usage(stderr);
		return 2;
	}

	accel_err err = {0};
	accel_optim_opts o;
	accel_optim *opt = NULL;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	if (accelp_optim_new(&o, &opt, &err) || accelp_optim_set_kernel(opt, kernel, &err)) {
		fprintf(stderr, "bench-optim: %s\n", err.msg);
		return 1;
	}
	size_t gb = accel_dtype_size(gdt);
	job j = {.n = n, .gdt = gdt, .opt = opt};
	j.p = alloc(n * 4);
	j.m = alloc(n * 4);
	j.v = alloc(n * 4);
	j.g = alloc(n * gb);
	j.a = alloc(n * 4);
	j.b = alloc(n * 4);
	j.c = alloc(n * 4);
	if (!j.p || !j.m || !j.v || !j.g || !j.a || !j.b || !j.c) {
		fprintf(stderr, "bench-optim: cannot allocate %.1f GiB\n",
		        (double)n * (24 + gb) / (1 << 30));
		return 1;
	}
	team tm = {.arg = &j};
	if (team_start(&tm, threads)) {
		fprintf(stderr, "bench-optim: cannot start %d threads\n", threads);
		return 1;
	}
	team_run(&tm, first_touch);
	accel_optim_pool *pool = NULL;
	if (use_pool && accelp_optim_pool_new(&pool)) {
		fprintf(stderr, "bench-optim: cannot create the optimizer pool\n");
		return 1;
	}
	accel_optim_task task = {.param = j.p, .grad = j.g, .gdtype = gdt, .numel = n,
	                         .grad_scale = 1.0, .state = {j.m, j.v}};

	timing ta = {0}, tt = {0};
	/* Untimed warm-up of both (starts the pool's workers). */
	j.t = 1;
	if (use_pool) {
		if (accelp_optim_pool_step(pool, opt, j.t, 1e-3, &task, 1, (uint32_t)threads, &err)) {
			fprintf(stderr, "bench-optim: %s\n", err.msg);
			return 1;
		}
	} else {
		team_run(&tm, adamw_part);
	}
	if (j.failed)
		return 1;
	team_run(&tm, triad_part);
	for (int r = 0; r < rounds; r++) {
		double end = now() + min_time;
		int calls = 0;
		while (now() < end || calls < 3) {
			double t0 = now();
			j.t++;
			if (use_pool)
				j.failed |= accelp_optim_pool_step(pool, opt, j.t, 1e-3, &task, 1,
				                                   (uint32_t)threads, &err) != 0;
			else
				team_run(&tm, adamw_part);
			if (add_time(&ta, now() - t0))
				return 1;
			calls++;
		}
		end = now() + min_time;
		calls = 0;
		while (now() < end || calls < 3) {
			double t0 = now();
			team_run(&tm, triad_part);
			if (add_time(&tt, now() - t0))
				return 1;
			calls++;
		}
	}
	team_stop(&tm);
	pool = accelp_optim_pool_free(pool);
	if (j.failed) {
		fprintf(stderr, "bench-optim: %s\n", err.msg[0] ? err.msg : "a step failed");
		return 1;
	}
	/* Keep the results observable. */
	volatile float sink = j.p[n / 2] + j.a[n / 3];
	(void)sink;

	double amin, amed, tmin, tmed;
	summary(&ta, &amin, &amed);
	summary(&tt, &tmin, &tmed);
	double abytes = (double)n * (24 + (double)gb), tbytes = (double)n * 12;
	double agbs = abytes / amin / 1e9, tgbs = tbytes / tmin / 1e9;
	machine(mach, sizeof(mach));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	printf("{\"bench\":\"optim\",\"impl\":\"accel\",\"op\":\"adamw\",\"machine\":\"%s\","
	       "\"cpus\":%ld,\"threads\":%d,\"pool\":\"%s\",\"kernel\":\"%s\",\"grad_dtype\":\"%s\","
	       "\"n\":%llu,"
	       "\"calls\":%zu,\"time_ms\":%.3f,\"time_ms_median\":%.3f,\"gparam_s\":%.4f,"
	       "\"bytes_per_param\":%zu,\"GBps\":%.3f}\n",
	       mach, cpus, threads, pool_kind, accelp_optim_get_kernel(opt), accel_dtype_name(gdt),
	       (unsigned long long)n, ta.n, amin * 1e3, amed * 1e3, (double)n / amin / 1e9,
	       24 + gb, agbs);
	printf("{\"bench\":\"optim\",\"impl\":\"triad\",\"op\":\"triad\",\"machine\":\"%s\","
	       "\"cpus\":%ld,\"threads\":%d,\"n\":%llu,\"calls\":%zu,\"time_ms\":%.3f,"
	       "\"time_ms_median\":%.3f,\"bytes_per_elem\":12,\"GBps\":%.3f}\n",
	       mach, cpus, threads, (unsigned long long)n, tt.n, tmin * 1e3, tmed * 1e3, tgbs);
	printf("{\"bench\":\"optim\",\"impl\":\"accel\",\"op\":\"adamw-vs-triad\",\"machine\":\"%s\","
	       "\"threads\":%d,\"peer\":\"triad\",\"ratio\":%.3f}\n", mach, threads, agbs / tgbs);
	fflush(stdout);
	free(ta.t);
	free(tt.t);
	free(j.p);
	free(j.m);
	free(j.v);
	free(j.g);
	free(j.a);
	free(j.b);
	free(j.c);
	accelp_optim_free(opt);
	return 0;
}
