/* SPDX-License-Identifier: MIT */
/* bench/optim.c: one thread, one AdamW step over N f32 parameters with
 * accel's kernel (core/optim.c), next to a STREAM-style triad over arrays
 * of the same length measured in the same process, so the step can be
 * read as a fraction of the bandwidth this machine gives one core.
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

static void *alloc(size_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes))
		return NULL;
	memset(p, 0, bytes);   /* fault every page in before timing */
	return p;
}

static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s,
                  uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		a[i] = b[i] + s * c[i];
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
	        "usage: bench-optim [--n N] [--min-time S] [--rounds R] [--kernel auto|generic|avx2-fma]\n"
	        "                   [--gdtype f32|bf16|f16]\n"
	        "One-thread AdamW step (accel) and STREAM triad on N f32 elements (default\n"
	        "16777216); each round times every call for S seconds (default 0.5) per\n"
	        "benchmark, R rounds (default 3) alternate them.  JSON lines on stdout.\n");
}

int main(int argc, char **argv)
{
	uint64_t n = UINT64_C(16) << 20;
	double min_time = 0.5;
	int rounds = 3;
	const char *kernel = "auto";
	uint32_t gdt = ACCEL_DTYPE_F32;
	char mach[256];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--n") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 0);
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
	if (!n || rounds < 1 || !(min_time > 0) ||
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
	float *p = alloc(n * 4), *m = alloc(n * 4), *v = alloc(n * 4);
	void *g = alloc(n * gb);
	float *a = alloc(n * 4), *b = alloc(n * 4), *c = alloc(n * 4);
	if (!p || !m || !v || !g || !a || !b || !c) {
		fprintf(stderr, "bench-optim: cannot allocate %.1f GiB\n",
		        (double)n * (24 + gb) / (1 << 30));
		return 1;
	}
	uint64_t s = 12345;
	for (uint64_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		float x = (float)((double)(s >> 40) * 0x1p-24 - 0.5);
		p[i] = x;
		b[i] = x;
		c[i] = 1 - x;
		if (gdt == ACCEL_DTYPE_F32)
			((float *)g)[i] = 0.01f * x;
		else if (gdt == ACCEL_DTYPE_BF16)
			((uint16_t *)g)[i] = accel_f32_to_bf16(0.01f * x);
		else
			((uint16_t *)g)[i] = accel_f32_to_f16(0.01f * x);
	}

	timing ta = {0}, tt = {0};
	float *state[2] = {m, v};
	uint64_t t = 0;
	/* Untimed warm-up of both. */
	if (accelp_optim_step_range(opt, NULL, ++t, 1e-3, p, g, gdt, state, n, 1.0, &err)) {
		fprintf(stderr, "bench-optim: %s\n", err.msg);
		return 1;
	}
	triad(a, b, c, 3.0f, n);
	for (int r = 0; r < rounds; r++) {
		double end = now() + min_time;
		int calls = 0;
		while (now() < end || calls < 3) {
			double t0 = now();
			accelp_optim_step_range(opt, NULL, ++t, 1e-3, p, g, gdt, state, n, 1.0, &err);
			if (add_time(&ta, now() - t0))
				return 1;
			calls++;
		}
		end = now() + min_time;
		calls = 0;
		while (now() < end || calls < 3) {
			double t0 = now();
			triad(a, b, c, 3.0f, n);
			if (add_time(&tt, now() - t0))
				return 1;
			calls++;
		}
	}
	/* Keep the results observable. */
	volatile float sink = p[n / 2] + a[n / 3];
	(void)sink;

	double amin, amed, tmin, tmed;
	summary(&ta, &amin, &amed);
	summary(&tt, &tmin, &tmed);
	double abytes = (double)n * (24 + (double)gb), tbytes = (double)n * 12;
	double agbs = abytes / amin / 1e9, tgbs = tbytes / tmin / 1e9;
	machine(mach, sizeof(mach));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	printf("{\"bench\":\"optim\",\"impl\":\"accel\",\"op\":\"adamw\",\"machine\":\"%s\","
	       "\"cpus\":%ld,\"threads\":1,\"kernel\":\"%s\",\"grad_dtype\":\"%s\",\"n\":%llu,"
	       "\"calls\":%zu,\"time_ms\":%.3f,\"time_ms_median\":%.3f,\"gparam_s\":%.4f,"
	       "\"bytes_per_param\":%zu,\"GBps\":%.3f}\n",
	       mach, cpus, accelp_optim_get_kernel(opt), accel_dtype_name(gdt),
	       (unsigned long long)n, ta.n, amin * 1e3, amed * 1e3, (double)n / amin / 1e9,
	       24 + gb, agbs);
	printf("{\"bench\":\"optim\",\"impl\":\"triad\",\"op\":\"triad\",\"machine\":\"%s\","
	       "\"cpus\":%ld,\"threads\":1,\"n\":%llu,\"calls\":%zu,\"time_ms\":%.3f,"
	       "\"time_ms_median\":%.3f,\"bytes_per_elem\":12,\"GBps\":%.3f}\n",
	       mach, cpus, (unsigned long long)n, tt.n, tmin * 1e3, tmed * 1e3, tgbs);
	printf("{\"bench\":\"optim\",\"impl\":\"accel\",\"op\":\"adamw-vs-triad\",\"machine\":\"%s\","
	       "\"peer\":\"triad\",\"ratio\":%.3f}\n", mach, agbs / tgbs);
	fflush(stdout);
	free(ta.t);
	free(tt.t);
	free(p);
	free(m);
	free(v);
	free(g);
	free(a);
	free(b);
	free(c);
	accelp_optim_free(opt);
	return 0;
}
