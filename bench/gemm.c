/* SPDX-License-Identifier: MIT */
/*
 * bench/gemm.c: single-thread SGEMM throughput of the CBLAS-compatible
 * libraries Debian ships, on the GEMMs of examples/train_mlp.
 *
 * Every library is loaded with dlopen(RTLD_LOCAL) into this one process, so
 * they are measured in the same run on the same buffers (OpenBLAS and BLIS
 * both define cblas_sgemm and could not be linked together).  Which
 * libraries are tried is decided at build time: meson passes the candidate
 * file names of those it found (GEMM_LIBS).  Each library is limited to one
 * thread (openblas_set_num_threads, bli_thread_set_num_threads,
 * omp_set_num_threads for oneDNN's OpenMP runtime) because train_mlp runs one
 * process per core.
 *
 * For a model with layer sizes d0-d1-...-dL and batch B, one training step
 * does per layer l (in = d(l), out = d(l+1)), all row-major:
 *   fwd   Y[B,out]  = X[B,in] . W[out,in]^T     M=B   N=out K=in
 *   dX    dX[B,in]  = dY[B,out] . W[out,in]     M=B   N=in  K=out  (not for l = 0)
 *   dW    dW[out,in]+= dY[B,out]^T . X[B,in]    M=out N=in  K=B
 * Each call is timed on its own, --reps turns of --min-time seconds per
 * library; GFLOP/s are reported for the fastest call ("gflops") and the
 * median call; "step" adds the fastest times of all GEMMs of a step.
 *
 * Output: one JSON line per (library, GEMM) with the peer (OpenBLAS, Debian's
 * default BLAS) measured in the same run and the ratio; human-readable
 * table on stderr.  Exit status 1 if a library computes a wrong result.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef GEMM_LIBS
#define GEMM_LIBS ""
#endif

/* CBLAS constants (identical in every cblas.h). */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
typedef int (*dnnl_sgemm_fn)(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *b, int64_t ldb,
                             float beta, float *c, int64_t ldc);
typedef void (*set_threads_fn)(int);
typedef void (*bli_set_threads_fn)(int64_t);

typedef struct lib {
	char name[32];
	char file[128];
	void *handle;
	cblas_sgemm_fn cblas;
	dnnl_sgemm_fn dnnl;
	double best[64], median[64];
	int ok;
} lib;

typedef struct gemm {
	char label[32];
	int ta, tb;              /* 1: transposed */
	int m, n, k;
} gemm;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run(const lib *l, const gemm *g, const float *a, const float *b, float *c,
                float beta)
{
	int lda = g->ta ? g->m : g->k;
	int ldb = g->tb ? g->k : g->n;
	if (l->dnnl)
		l->dnnl(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, 1.0f, a, lda, b, ldb,
		        beta, c, g->n);
	else
		l->cblas(CBLAS_ROW_MAJOR, g->ta ? CBLAS_TRANS : CBLAS_NO_TRANS,
		         g->tb ? CBLAS_TRANS : CBLAS_NO_TRANS, g->m, g->n, g->k, 1.0f, a, lda, b, ldb,
		         beta, c, g->n);
}

static int load(lib *l, const char *name, const char *file)
{
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->file, sizeof(l->file), "%s", file);
	l->handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	if (!l->handle) {
		fprintf(stderr, "gemm: %s: cannot load %s: %s\n", name, file, dlerror());
		return -1;
	}
	if (!strcmp(name, "dnnl")) {
		l->dnnl = (dnnl_sgemm_fn)dlsym(l->handle, "dnnl_sgemm");
		set_threads_fn omp = (set_threads_fn)dlsym(l->handle, "omp_set_num_threads");
		if (omp)
			omp(1);
		else
			fprintf(stderr, "gemm: dnnl: omp_set_num_threads not found; threads not limited\n");
	} else {
		l->cblas = (cblas_sgemm_fn)dlsym(l->handle, "cblas_sgemm");
		set_threads_fn ob = (set_threads_fn)dlsym(l->handle, "openblas_set_num_threads");
		bli_set_threads_fn bl = (bli_set_threads_fn)dlsym(l->handle, "bli_thread_set_num_threads");
		if (ob)
			ob(1);
		else if (bl)
			bl(1);
		set_threads_fn omp = (set_threads_fn)dlsym(l->handle, "omp_set_num_threads");
		if (omp)
			omp(1);
	}
	if (!l->cblas && !l->dnnl) {
		fprintf(stderr, "gemm: %s: %s has no sgemm entry point\n", name, file);
		return -1;
	}
	return 0;
}

static float frand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* Compare sampled entries of C (computed with beta = 0) with a double
 * precision dot product. */
static int verify(const gemm *g, const float *a, const float *b, const float *c)
{
	uint64_t s = 99;
	for (int t = 0; t < 200; t++) {
		s = s * 6364136223846793005ull + 1;
		int i = (int)((s >> 33) % (uint64_t)g->m);
		s = s * 6364136223846793005ull + 1;
		int j = (int)((s >> 33) % (uint64_t)g->n);
		double ref = 0, mag = 0;
		for (int p = 0; p < g->k; p++) {
			double x = g->ta ? a[(size_t)p * g->m + i] : a[(size_t)i * g->k + p];
			double y = g->tb ? b[(size_t)j * g->k + p] : b[(size_t)p * g->n + j];
			ref += x * y;
			mag += fabs(x * y);
		}
		double got = c[(size_t)i * g->n + j];
		if (fabs(got - ref) > 1e-5 * mag + 1e-6)
			return -1;
	}
	return 0;
}

static int cmp_dbl(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return a < b ? -1 : a > b;
}

static void machine(char *buf, size_t cap)
{
	snprintf(buf, cap, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
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

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: bench-gemm [--batch B] [--dims D0,D1,...] [--min-time S] [--reps R]\n"
	        "                  [--lib NAME]...\n"
	        "Single-thread SGEMM GFLOP/s of each BLAS found at build time on the GEMMs of\n"
	        "one training step of an MLP (default: train_mlp's 784,1024,1024,10, batch 128).\n"
	        "libraries built in: %s\n",
	        GEMM_LIBS);
}

int main(int argc, char **argv)
{
	int batch = 128, dims[16] = {784, 1024, 1024, 10}, ndims = 4, reps = 5;
	double min_time = 0.25;
	const char *only[8];
	int nonly = 0;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--batch") && v) {
			batch = atoi(v), i++;
		} else if (!strcmp(argv[i], "--min-time") && v) {
			min_time = atof(v), i++;
		} else if (!strcmp(argv[i], "--reps") && v) {
			reps = atoi(v), i++;
		} else if (!strcmp(argv[i], "--lib") && v && nonly < 8) {
			only[nonly++] = v, i++;
		} else if (!strcmp(argv[i], "--dims") && v) {
			ndims = 0;
			for (const char *p = v; *p && ndims < 16; ndims++) {
				dims[ndims] = atoi(p);
				p += strcspn(p, ",");
				p += *p == ',';
			}
			i++;
		} else {
			fprintf(stderr, "bench-gemm: unknown or incomplete option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (batch < 1 || ndims < 2 || reps < 1 || reps > 100 || !(min_time > 0)) {
		fprintf(stderr, "bench-gemm: need --batch >= 1, >= 2 dims, 1..100 reps, min-time > 0\n");
		return 2;
	}
	for (int i = 0; i < ndims; i++)
		if (dims[i] < 1) {
			fprintf(stderr, "bench-gemm: bad dimension %d\n", dims[i]);
			return 2;
		}

	/* The GEMMs of one step. */
	gemm g[64];
	int ng = 0;
	for (int l = 0; l + 1 < ndims && ng + 3 <= 64; l++) {
		int in = dims[l], out = dims[l + 1];
		g[ng++] = (gemm){.ta = 0, .tb = 1, .m = batch, .n = out, .k = in};
		snprintf(g[ng - 1].label, sizeof(g[0].label), "fc%d.fwd", l);
		if (l > 0) {
			g[ng++] = (gemm){.ta = 0, .tb = 0, .m = batch, .n = in, .k = out};
			snprintf(g[ng - 1].label, sizeof(g[0].label), "fc%d.dX", l);
		}
		g[ng++] = (gemm){.ta = 1, .tb = 0, .m = out, .n = in, .k = batch};
		snprintf(g[ng - 1].label, sizeof(g[0].label), "fc%d.dW", l);
	}

	/* Libraries: "name=file;name=file" from the build. */
	lib libs[8];
	int nl = 0;
	char spec[512];
	snprintf(spec, sizeof(spec), "%s", GEMM_LIBS);
	for (char *save = NULL, *tok = strtok_r(spec, ";", &save); tok && nl < 8;
	     tok = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq = '\0';
		int want = nonly == 0;
		for (int i = 0; i < nonly; i++)
			want |= !strcmp(only[i], tok);
		if (!want)
			continue;
		memset(&libs[nl], 0, sizeof(libs[nl]));
		if (load(&libs[nl], tok, eq + 1) == 0)
			nl++;
	}
	if (nl == 0) {
		fprintf(stderr, "bench-gemm: no BLAS library to measure (built with: %s)\n", GEMM_LIBS);
		return 1;
	}

	size_t maxa = 0, maxb = 0, maxc = 0;
	for (int i = 0; i < ng; i++) {
		size_t a = (size_t)g[i].m * g[i].k, b = (size_t)g[i].k * g[i].n,
		       c = (size_t)g[i].m * g[i].n;
		maxa = a > maxa ? a : maxa;
		maxb = b > maxb ? b : maxb;
		maxc = c > maxc ? c : maxc;
	}
	float *A = malloc(maxa * 4), *B = malloc(maxb * 4), *C = malloc(maxc * 4);
	if (!A || !B || !C) {
		fprintf(stderr, "bench-gemm: out of memory\n");
		return 1;
	}
	uint64_t seed = 1;
	for (size_t i = 0; i < maxa; i++)
		A[i] = frand(&seed);
	for (size_t i = 0; i < maxb; i++)
		B[i] = frand(&seed);

	int bad = 0;
	for (int li = 0; li < nl; li++) {
		lib *l = &libs[li];
		l->ok = 1;
		for (int gi = 0; gi < ng; gi++) {
			run(l, &g[gi], A, B, C, 0.0f);
			if (verify(&g[gi], A, B, C)) {
				fprintf(stderr, "bench-gemm: %s computes a wrong %s\n", l->name, g[gi].label);
				l->ok = 0;
				bad = 1;
			}
		}
	}
	/* Every call is timed on its own: the fastest call is what the library
	 * can do (robust to the other processes of a shared machine, which
	 * only ever make calls slower), the median what a busy machine gave.
	 * Libraries take turns per GEMM so a slow phase hits all of them. */
	size_t tcap = 1u << 20;
	double *t[8];
	size_t nt[8];
	for (int li = 0; li < nl; li++)
		if (!(t[li] = malloc(tcap * sizeof(double)))) {
			fprintf(stderr, "bench-gemm: out of memory\n");
			return 1;
		}
	for (int gi = 0; gi < ng; gi++) {
		double flop = 2.0 * g[gi].m * g[gi].n * g[gi].k;
		for (int li = 0; li < nl; li++)
			nt[li] = 0;
		for (int r = 0; r < reps; r++)
			for (int li = 0; li < nl; li++) {
				/* beta = 1 as in the dW accumulation; C is scratch. */
				run(&libs[li], &g[gi], A, B, C, 1.0f);
				double t0 = now(), t1 = t0;
				while (t1 - t0 < min_time && nt[li] < tcap) {
					double ta = now();
					run(&libs[li], &g[gi], A, B, C, 1.0f);
					t1 = now();
					t[li][nt[li]++] = t1 - ta;
				}
			}
		for (int li = 0; li < nl; li++) {
			qsort(t[li], nt[li], sizeof(double), cmp_dbl);
			libs[li].best[gi] = flop / t[li][0] / 1e9;
			libs[li].median[gi] = flop / t[li][nt[li] / 2] / 1e9;
		}
	}
	for (int li = 0; li < nl; li++)
		free(t[li]);

	char mach[256];
	machine(mach, sizeof(mach));
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int peer = 0;
	for (int li = 0; li < nl; li++)
		if (!strcmp(libs[li].name, "openblas"))
			peer = li;
	double step_flop = 0;
	for (int gi = 0; gi < ng; gi++)
		step_flop += 2.0 * g[gi].m * g[gi].n * g[gi].k;

	fprintf(stderr, "%-10s", "GFLOP/s");
	for (int gi = 0; gi < ng; gi++)
		fprintf(stderr, " %9s", g[gi].label);
	fprintf(stderr, " %9s\n", "step");
	for (int li = 0; li < nl; li++) {
		const lib *l = &libs[li];
		double step_t = 0, peer_t = 0;
		fprintf(stderr, "%-10s", l->name);
		for (int gi = 0; gi < ng; gi++) {
			double flop = 2.0 * g[gi].m * g[gi].n * g[gi].k;
			step_t += flop / (l->best[gi] * 1e9);
			peer_t += flop / (libs[peer].best[gi] * 1e9);
			fprintf(stderr, " %9.1f", l->best[gi]);
			printf("{\"bench\":\"gemm\",\"machine\":\"%s\",\"cpus\":%ld,\"threads\":1,"
			       "\"lib\":\"%s\",\"file\":\"%s\",\"gemm\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,"
			       "\"trans_a\":%d,\"trans_b\":%d,\"gflops\":%.2f,\"gflops_median\":%.2f,"
			       "\"peer\":\"%s\",\"peer_gflops\":%.2f,\"ratio\":%.3f,\"correct\":%s}\n",
			       mach, ncpu, l->name, l->file, g[gi].label, g[gi].m, g[gi].n, g[gi].k,
			       g[gi].ta, g[gi].tb, l->best[gi], l->median[gi], libs[peer].name,
			       libs[peer].best[gi], l->best[gi] / libs[peer].best[gi],
			       l->ok ? "true" : "false");
		}
		fprintf(stderr, " %9.1f\n", step_flop / step_t / 1e9);
		printf("{\"bench\":\"gemm\",\"machine\":\"%s\",\"cpus\":%ld,\"threads\":1,\"lib\":\"%s\","
		       "\"gemm\":\"step\",\"batch\":%d,\"step_ms\":%.3f,\"gflops\":%.2f,\"peer\":\"%s\","
		       "\"peer_step_ms\":%.3f,\"ratio\":%.3f,\"correct\":%s}\n",
		       mach, ncpu, l->name, batch, step_t * 1e3, step_flop / step_t / 1e9,
		       libs[peer].name, peer_t * 1e3, peer_t / step_t, l->ok ? "true" : "false");
	}
	fflush(stdout);
	free(A);
	free(B);
	free(C);
	/* Libraries stay loaded: unloading OpenMP runtimes at exit is fragile. */
	return bad;
}
