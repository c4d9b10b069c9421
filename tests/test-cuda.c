/* SPDX-License-Identifier: MIT */
/* tests/test-cuda.c: the cuda device module (backends/cuda) against the CPU.
 *
 * - every op (copy/convert among f32/f64/f16/bf16, fill, scale, axpy,
 *   sumsq, nonfinite) on random data with NaN, infinities, subnormals and
 *   values that overflow f16, at odd lengths and at odd element offsets,
 *   against the CPU op on the same data: the same bits (NaN: any NaN where
 *   the conversion may drop the payload), sumsq to 1e-12 relative;
 * - copy f32 -> bf16 / f16 against the independent reference of
 *   tests/half-ref.h on every rounding boundary (as tests/test-ops.c);
 * - the fused multi-tensor SGD and AdamW step against the CPU optimizer
 *   (accelp_optim_step_ranges on the host) for every option combination of
 *   tests/test-optim.c, 25 steps, at most 2 ulp apart per value (observed:
 *   0), with ranges at odd offsets and more ranges than one launch takes;
 * - device and pinned memory through accelp_mem_alloc, accounted;
 * - argument errors;
 * - the stream model (docs/streams.md), with CUDA_LAUNCH_BLOCKING unset so
 *   that ordering is real: ops on the context's stream (behind a 200 ms
 *   host function on a non-blocking stream, so a copy on the legacy
 *   stream still sees the old values and accel_stream_synchronize the
 *   new ones), asynchronous copies host -> device -> device -> host through
 *   pinned memory (and to a second GPU where there is one), a collective
 *   issued after a fill on the stream that sees the filled values without
 *   a host sync, staged (shm) and through nccl, a stream-waited request,
 *   and ddp on a non-default stream giving the bits of the default one.
 *
 * On the GPU every test says on stderr (flushed) when it starts and ends
 * each length or option set, with the seconds since it began, and the
 * module runs with CUDA_LAUNCH_BLOCKING=1 (every op waits for its kernels
 * and reports their faults), so a run cut off by a timeout names the case
 * it was in.  The comparisons loop in plain C and assert once per array:
 * a Check assertion costs about half a microsecond of bookkeeping, and one
 * per element made the optimizer tests take over 1000 s.
 *
 * Without a CUDA GPU (driver probe of core/select.c) the program prints
 * "skipped: no GPU" and exits 77.  With --no-gpu (unit suite) it checks
 * instead what a machine without a GPU reports: CUDA views, allocations and
 * optimizer steps fail with ACCEL_ERR_UNSUPPORTED and say why, also when
 * the module file is missing. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "accel/accel.h"
#include "ctx-impl.h"
#include "device.h"
#include "backends/common/half.h"
#include "mem.h"
#include "ops.h"
#include "optim.h"
#include "cuda_probe.h"
#include "select.h"
#include "half-ref.h"

/* ---- helpers ------------------------------------------------------------------ */

static double t_begin;
static pid_t runner_pid;   /* the Check runner (main) */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One progress line on stderr, with the seconds since the test began. */
static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void progress(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "[test-cuda %7.2f s] ", now() - t_begin);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

/* Runs in each test's process (checked fixture): the clock starts, and on
 * Linux the process dies with the runner.  Check puts a test process in a
 * process group of its own, so a runner killed by the harness's timeout
 * would otherwise leave it running on the GPU. */
static void test_setup(void)
{
	t_begin = now();
#ifdef __linux__
	if (getpid() != runner_pid) {   /* forked (not CK_FORK=no) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != runner_pid)   /* it died before the line above */
			_exit(1);
	}
#endif
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static double unif(uint64_t *s)
{
	return (double)(splitmix(s) >> 11) * 0x1p-53;
}

/* A value worth testing: mostly ordinary, some special. */
static double value(uint64_t *s, int specials)
{
	double u = unif(s), x = (unif(s) - 0.5) * 8;
	if (!specials || u < 0.85)
		return x;
	switch ((int)((u - 0.85) / 0.15 * 8)) {
	case 0: return NAN;
	case 1: return INFINITY;
	case 2: return -INFINITY;
	case 3: return x * 1e-41;      /* f32 subnormal */
	case 4: return x * 1e-6;       /* f16 subnormal */
	case 5: return x * 3e4;        /* beyond f16 */
	case 6: return -0.0;
	default: return x * 1e300;     /* beyond f32 */
	}
}

static const accel_device_v1 *dev(void)
{
	const accel_device_v1 *d = NULL;
	accel_err e = {0};
	ck_assert_msg(accelp_device_get(ACCEL_DEVICE_CUDA, &d, &e) == ACCEL_OK, "%s", e.msg);
	return d;
}

static void *dmalloc(uint64_t bytes)
{
	char buf[512] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	void *p = NULL;
	ck_assert_msg(dev()->mem_alloc(ACCEL_DEVICE_MEM_DEVICE, 0, bytes, 1, &p, &de) == ACCEL_OK,
	              "%s", buf);
	return p;
}

static void dfree(void *p)
{
	char buf[512] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	ck_assert_msg(dev()->mem_free(ACCEL_DEVICE_MEM_DEVICE, p, &de) == ACCEL_OK, "%s", buf);
}

static void xfer(void *dst, const void *src, uint64_t bytes, uint32_t dir)
{
	char buf[512] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	ck_assert_msg(dev()->memcpy(dst, src, bytes, dir, 0, &de) == ACCEL_OK, "%s", buf);
}

static accel_view view(int32_t device, uint32_t dt, void *base, uint64_t off, uint64_t n)
{
	accel_view v = {sizeof(v), dt, device, 0,
	                (char *)base + off * accel_dtype_size(dt), n};
	return v;
}

static void fill_random(void *p, uint32_t dt, uint64_t n, uint64_t *seed, int specials)
{
	for (uint64_t i = 0; i < n; i++) {
		double v = value(seed, specials);
		switch (dt) {
		case ACCEL_DTYPE_F32: ((float *)p)[i] = (float)v; break;
		case ACCEL_DTYPE_F64: ((double *)p)[i] = v; break;
		case ACCEL_DTYPE_F16: ((uint16_t *)p)[i] = accel_f32_to_f16((float)v); break;
		default: ((uint16_t *)p)[i] = accel_f32_to_bf16((float)v); break;
		}
	}
}

static int is_nan(const void *p, uint32_t dt, uint64_t i)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: return isnan(((const float *)p)[i]);
	case ACCEL_DTYPE_F64: return isnan(((const double *)p)[i]);
	case ACCEL_DTYPE_F16: return (((const uint16_t *)p)[i] & 0x7fffu) > 0x7c00u;
	default: return (((const uint16_t *)p)[i] & 0x7fffu) > 0x7f80u;
	}
}

/* Same bits, or (nan_any) both NaN. */
static void same(const char *what, const void *cpu, const void *gpu, uint32_t dt, uint64_t n,
                 int nan_any)
{
	size_t es = accel_dtype_size(dt);
	for (uint64_t i = 0; i < n; i++) {
		const char *a = (const char *)cpu + i * es, *b = (const char *)gpu + i * es;
		if (!memcmp(a, b, es) || (nan_any && is_nan(cpu, dt, i) && is_nan(gpu, dt, i)))
			continue;
		uint64_t ua = 0, ub = 0;
		memcpy(&ua, a, es);
		memcpy(&ub, b, es);
		ck_abort_msg("%s: element %llu differs: cpu bits 0x%llx, gpu 0x%llx", what,
		             (unsigned long long)i, (unsigned long long)ua, (unsigned long long)ub);
	}
}

static const uint32_t fdts[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16,
                                ACCEL_DTYPE_BF16};
static const uint64_t lengths[] = {1, 2, 3, 5, 31, 1000, 4097, 300001};
static const uint64_t offsets[] = {0, 1, 3};
#define NLEN (sizeof(lengths) / sizeof(lengths[0]))
#define NOFF (sizeof(offsets) / sizeof(offsets[0]))

/* A case's buffers: host a/b (source, CPU result), device da/db, and the
 * device result brought back in r.  Each holds n + 3 elements of 8 bytes. */
typedef struct bufs {
	void *a, *b, *r, *da, *db;
	uint64_t cap;
} bufs;

static bufs bufs_new(uint64_t n)
{
	bufs b = {malloc((n + 3) * 8), malloc((n + 3) * 8), malloc((n + 3) * 8),
	          dmalloc((n + 3) * 8), dmalloc((n + 3) * 8), (n + 3) * 8};
	return b;
}

static void bufs_free(bufs *b)
{
	free(b->a);
	free(b->b);
	free(b->r);
	dfree(b->da);
	dfree(b->db);
}

/* ---- ops ------------------------------------------------------------------------ */

START_TEST(copy_matches_cpu)
{
	uint64_t seed = 1;
	accel_err e = {0};
	for (size_t li = 0; li < NLEN; li++) {
		uint64_t n = lengths[li];
		bufs B = bufs_new(n);
		progress("copy: length %llu ...", (unsigned long long)n);
		for (size_t oi = 0; oi < NOFF; oi++)
			for (size_t s = 0; s < 4; s++)
				for (size_t d = 0; d < 4; d++) {
					uint64_t off = offsets[oi], doff = offsets[(oi + 1) % NOFF];
					uint32_t sdt = fdts[s], ddt = fdts[d];
					size_t ss = accel_dtype_size(sdt), ds = accel_dtype_size(ddt);
					char what[128];
					snprintf(what, sizeof(what), "copy %s -> %s, %llu at +%llu/+%llu",
					         accel_dtype_name(sdt), accel_dtype_name(ddt),
					         (unsigned long long)n, (unsigned long long)off,
					         (unsigned long long)doff);
					fill_random((char *)B.a + off * ss, sdt, n, &seed, 1);
					accel_view hs = view(ACCEL_DEVICE_CPU, sdt, B.a, off, n);
					accel_view hd = view(ACCEL_DEVICE_CPU, ddt, B.b, doff, n);
					accel_view ds_ = view(ACCEL_DEVICE_CUDA, sdt, B.da, off, n);
					accel_view dd = view(ACCEL_DEVICE_CUDA, ddt, B.db, doff, n);
					accel_view hr = view(ACCEL_DEVICE_CPU, ddt, B.r, doff, n);
					ck_assert_int_eq(accelp_ops_copy(&hd, &hs, &e), ACCEL_OK);
					/* up, convert on the device, down: through the routed ops */
					ck_assert_msg(accelp_ops_copy(&ds_, &hs, &e) == ACCEL_OK, "%s", e.msg);
					ck_assert_msg(accelp_ops_copy(&dd, &ds_, &e) == ACCEL_OK, "%s", e.msg);
					ck_assert_msg(accelp_ops_copy(&hr, &dd, &e) == ACCEL_OK, "%s", e.msg);
					/* NaN through f64 may keep or drop its payload (x86 keeps
					 * it, the GPU makes it canonical) */
					same(what, (char *)B.b + doff * ds, (char *)B.r + doff * ds, ddt, n,
					     sdt == ACCEL_DTYPE_F64 || ddt == ACCEL_DTYPE_F64);
				}
		bufs_free(&B);
		progress("copy: length %llu done", (unsigned long long)n);
	}
}
END_TEST

/* f32 -> bf16 / f16 on the device against the reference of
 * tests/half-ref.h (the probes of tests/test-ops.c): up, converted by the
 * device kernel, down. */
START_TEST(copy_rounds_like_reference)
{
	static const struct {
		const half_fmt *fmt;
		uint32_t dtype;
	} fmts[] = {{&half_fmt_bf16, ACCEL_DTYPE_BF16}, {&half_fmt_f16, ACCEL_DTYPE_F16}};
	accel_err e = {0};
	for (size_t k = 0; k < 2; k++) {
		const half_fmt *f = fmts[k].fmt;
		size_t n = 0;
		half_probe *p = half_ref_probes(f, (size_t)1 << 20, &n);
		ck_assert_msg(p != NULL, "%s: building the probes failed (see stderr)", f->name);
		progress("copy f32 -> %s: %zu probes ...", f->name, n);
		float *x = malloc(n * sizeof(*x));
		uint16_t *out = malloc(n * sizeof(*out));
		ck_assert(x && out);
		for (size_t i = 0; i < n; i++)
			x[i] = p[i].x;
		void *dx = dmalloc(n * sizeof(float)), *dh = dmalloc(n * 2);
		accel_view hx = view(ACCEL_DEVICE_CPU, ACCEL_DTYPE_F32, x, 0, n);
		accel_view dxv = view(ACCEL_DEVICE_CUDA, ACCEL_DTYPE_F32, dx, 0, n);
		accel_view dhv = view(ACCEL_DEVICE_CUDA, fmts[k].dtype, dh, 0, n);
		accel_view ho = view(ACCEL_DEVICE_CPU, fmts[k].dtype, out, 0, n);
		ck_assert_msg(accelp_ops_copy(&dxv, &hx, &e) == ACCEL_OK, "%s", e.msg);
		ck_assert_msg(accelp_ops_copy(&dhv, &dxv, &e) == ACCEL_OK, "%s", e.msg);
		ck_assert_msg(accelp_ops_copy(&ho, &dhv, &e) == ACCEL_OK, "%s", e.msg);
		char msg[256];
		size_t bad = half_ref_compare(f, p, out, n, msg, sizeof(msg));
		ck_assert_msg(bad == 0, "device: %zu of %zu conversions wrong; first: %s", bad, n, msg);
		dfree(dx);
		dfree(dh);
		free(p);
		free(x);
		free(out);
		progress("copy f32 -> %s done", f->name);
	}
}
END_TEST

START_TEST(fill_scale_axpy_match_cpu)
{
	static const double fills[] = {0.0, -0.0, 1.5, 1e-41, 7e4, -3e39, NAN, INFINITY};
	static const double alphas[] = {0.37, -3.0, 1e30, 0.0};
	uint64_t seed = 2;
	accel_err e = {0};
	for (size_t li = 0; li < NLEN; li++) {
		uint64_t n = lengths[li];
		bufs B = bufs_new(n);
		progress("fill/scale/axpy: length %llu ...", (unsigned long long)n);
		for (size_t oi = 0; oi < NOFF; oi++)
			for (size_t d = 0; d < 4; d++) {
				uint64_t off = offsets[oi];
				uint32_t dt = fdts[d];
				size_t es = accel_dtype_size(dt);
				char what[128];
				accel_view h = view(ACCEL_DEVICE_CPU, dt, B.b, off, n);
				accel_view dv = view(ACCEL_DEVICE_CUDA, dt, B.db, off, n);
				accel_view hr = view(ACCEL_DEVICE_CPU, dt, B.r, off, n);
				for (size_t f = 0; f < sizeof(fills) / sizeof(fills[0]); f++) {
					snprintf(what, sizeof(what), "fill %s %g, %llu at +%llu",
					         accel_dtype_name(dt), fills[f], (unsigned long long)n,
					         (unsigned long long)off);
					ck_assert_int_eq(accelp_ops_fill(&h, fills[f], &e), ACCEL_OK);
					ck_assert_msg(accelp_ops_fill(&dv, fills[f], &e) == ACCEL_OK, "%s", e.msg);
					ck_assert_int_eq(accelp_ops_copy(&hr, &dv, &e), ACCEL_OK);
					same(what, (char *)B.b + off * es, (char *)B.r + off * es, dt, n, 0);
				}
				for (size_t a = 0; a < sizeof(alphas) / sizeof(alphas[0]); a++) {
					snprintf(what, sizeof(what), "scale %s by %g, %llu at +%llu",
					         accel_dtype_name(dt), alphas[a], (unsigned long long)n,
					         (unsigned long long)off);
					fill_random((char *)B.b + off * es, dt, n, &seed, 1);
					ck_assert_int_eq(accelp_ops_copy(&dv, &h, &e), ACCEL_OK);
					ck_assert_int_eq(accelp_ops_scale(&h, alphas[a], &e), ACCEL_OK);
					ck_assert_msg(accelp_ops_scale(&dv, alphas[a], &e) == ACCEL_OK, "%s",
					              e.msg);
					ck_assert_int_eq(accelp_ops_copy(&hr, &dv, &e), ACCEL_OK);
					/* NaN * a: x86 keeps the payload, the GPU makes it canonical */
					same(what, (char *)B.b + off * es, (char *)B.r + off * es, dt, n, 1);
				}
				for (size_t x = 0; x < 4; x++) {
					uint32_t xdt = fdts[x];
					uint64_t xoff = offsets[(oi + 2) % NOFF];
					size_t xs = accel_dtype_size(xdt);
					snprintf(what, sizeof(what), "axpy y %s += 0.37 x %s, %llu at +%llu/+%llu",
					         accel_dtype_name(dt), accel_dtype_name(xdt),
					         (unsigned long long)n, (unsigned long long)off,
					         (unsigned long long)xoff);
					fill_random((char *)B.b + off * es, dt, n, &seed, 1);
					fill_random((char *)B.a + xoff * xs, xdt, n, &seed, 1);
					accel_view hx = view(ACCEL_DEVICE_CPU, xdt, B.a, xoff, n);
					accel_view dx = view(ACCEL_DEVICE_CUDA, xdt, B.da, xoff, n);
					ck_assert_int_eq(accelp_ops_copy(&dv, &h, &e), ACCEL_OK);
					ck_assert_int_eq(accelp_ops_copy(&dx, &hx, &e), ACCEL_OK);
					ck_assert_int_eq(accelp_ops_axpy(&h, 0.37, &hx, &e), ACCEL_OK);
					ck_assert_msg(accelp_ops_axpy(&dv, 0.37, &dx, &e) == ACCEL_OK, "%s",
					              e.msg);
					ck_assert_int_eq(accelp_ops_copy(&hr, &dv, &e), ACCEL_OK);
					/* NaN + NaN: which payload survives is the hardware's choice */
					same(what, (char *)B.b + off * es, (char *)B.r + off * es, dt, n, 1);
				}
			}
		bufs_free(&B);
		progress("fill/scale/axpy: length %llu done", (unsigned long long)n);
	}
}
END_TEST

START_TEST(reductions_match_cpu)
{
	uint64_t seed = 3;
	accel_err e = {0};
	double worst = 0;
	for (size_t li = 0; li < NLEN; li++) {
		uint64_t n = lengths[li];
		bufs B = bufs_new(n);
		progress("reductions: length %llu ...", (unsigned long long)n);
		for (size_t oi = 0; oi < NOFF; oi++)
			for (size_t d = 0; d < 4; d++)
				for (int specials = 0; specials < 2; specials++) {
					uint64_t off = offsets[oi];
					uint32_t dt = fdts[d];
					accel_view h = view(ACCEL_DEVICE_CPU, dt, B.b, off, n);
					accel_view dv = view(ACCEL_DEVICE_CUDA, dt, B.db, off, n);
					fill_random((char *)B.b + off * accel_dtype_size(dt), dt, n, &seed,
					            specials);
					ck_assert_int_eq(accelp_ops_copy(&dv, &h, &e), ACCEL_OK);
					double sc = 0, sg = -1;
					uint64_t nc = 0, ng = 1u << 31;
					ck_assert_int_eq(accelp_ops_sumsq(&h, &sc, &e), ACCEL_OK);
					ck_assert_msg(accelp_ops_sumsq(&dv, &sg, &e) == ACCEL_OK, "%s", e.msg);
					ck_assert_int_eq(accelp_ops_nonfinite(&h, &nc, &e), ACCEL_OK);
					ck_assert_msg(accelp_ops_nonfinite(&dv, &ng, &e) == ACCEL_OK, "%s", e.msg);
					ck_assert_msg(nc == ng, "nonfinite %s n %llu +%llu: cpu %llu, gpu %llu",
					              accel_dtype_name(dt), (unsigned long long)n,
					              (unsigned long long)off, (unsigned long long)nc,
					              (unsigned long long)ng);
					if (!isfinite(sc)) {
						ck_assert_msg(isnan(sc) ? isnan(sg) : sg == sc, "sumsq %s: cpu %g, "
						              "gpu %g", accel_dtype_name(dt), sc, sg);
						continue;
					}
					/* f64 sums of n positive terms in another order: within
					 * n * 2^-53 relative; 1e-12 is ~100x the largest seen */
					double rel = fabs(sg - sc) / (sc > 0 ? sc : 1);
					if (rel > worst)
						worst = rel;
					ck_assert_msg(rel <= 1e-12, "sumsq %s n %llu +%llu: cpu %.17g, gpu %.17g",
					              accel_dtype_name(dt), (unsigned long long)n,
					              (unsigned long long)off, sc, sg);
				}
		bufs_free(&B);
		progress("reductions: length %llu done", (unsigned long long)n);
	}
	fprintf(stderr, "sumsq: largest relative difference %.3g (tolerance 1e-12)\n", worst);
}
END_TEST

/* Device ABI 1.2: sumsq_acc adds to stats[0] exactly what the host's
 * `total += sumsq(view)` adds (the same f64 sums, the same additions, in
 * the same order), and clip_scale gives the core's norm, coefficient and
 * factor bit for bit, NaN and Inf sums included. */
START_TEST(stats_on_device_match_host)
{
	uint64_t seed = 11;
	accel_err e = {0};
	double *stats = dmalloc(ACCEL_DEVICE_STATS_DOUBLES * sizeof(double));
	double total = 0, got[4];
	for (int pass = 0; pass < 2; pass++) {   /* pass 1: with NaN/Inf */
		total = 0;
		xfer(stats, &total, sizeof(double), ACCEL_DEVICE_H2D);
		for (size_t li = 0; li < NLEN; li++)
			for (size_t d = 0; d < 4; d++) {
				uint64_t n = lengths[li], off = offsets[(li + d) % NOFF];
				uint32_t dt = fdts[d];
				bufs B = bufs_new(n);
				accel_view h = view(ACCEL_DEVICE_CPU, dt, B.b, off, n);
				accel_view dv = view(ACCEL_DEVICE_CUDA, dt, B.db, off, n);
				fill_random((char *)B.b + off * accel_dtype_size(dt), dt, n, &seed,
				            pass && li == NLEN - 1);
				ck_assert_int_eq(accelp_ops_copy(&dv, &h, &e), ACCEL_OK);
				double sq = 0;
				ck_assert_msg(accelp_ops_sumsq(&dv, &sq, &e) == ACCEL_OK, "%s", e.msg);
				total += sq;
				ck_assert_msg(accelp_ops_device_sumsq_acc(&dv, stats, &e) == ACCEL_OK, "%s",
				              e.msg);
				ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
				bufs_free(&B);
			}
		xfer(got, stats, sizeof(double), ACCEL_DEVICE_D2H);
		ck_assert_msg(!memcmp(&got[0], &total, sizeof(double)) ||
		              (isnan(got[0]) && isnan(total)),
		              "sumsq_acc: %.17g on the device, %.17g on the host", got[0], total);
	}
	static const double cases[][3] = {   /* sum of squares, max_norm, unscale */
		{1234.5678, 1.0, 1.0},  {1e-30, 1.0, 1.0},    {4.0, 0.0, 0.5},
		{3e6, 0.5, 0.25},       {0.0, 1.0, 0.125},   {INFINITY, 1.0, 1.0},
		{NAN, 1.0, 1.0},        {2.0, 3.0, 1.0 / 3.0}};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		double ss = cases[c][0], mx = cases[c][1], un = cases[c][2];
		xfer(stats, &ss, sizeof(double), ACCEL_DEVICE_H2D);
		ck_assert_msg(accelp_ops_device_clip_scale(ACCEL_DEVICE_CUDA, 0, stats, mx, un, &e) ==
		              ACCEL_OK, "%s", e.msg);
		xfer(got, stats, sizeof(got), ACCEL_DEVICE_D2H);
		/* core/train_step.c's arithmetic */
		double want[4] = {ss, sqrt(ss) * un, 1.0, 0};
		if (mx > 0) {
			want[2] = mx / (want[1] + 1e-6);
			if (want[2] > 1.0)
				want[2] = 1.0;
		}
		want[3] = want[2] * un;
		for (int k = 1; k < 4; k++)
			ck_assert_msg(!memcmp(&got[k], &want[k], sizeof(double)) ||
			              (isnan(got[k]) && isnan(want[k])),
			              "clip_scale case %zu slot %d: device %.17g, host %.17g", c, k,
			              got[k], want[k]);
	}
	/* a CPU view is refused by name */
	float x[2] = {1, 2};
	accel_view hv = view(ACCEL_DEVICE_CPU, ACCEL_DTYPE_F32, x, 0, 2);
	ck_assert_int_eq(accelp_ops_device_sumsq_acc(&hv, stats, &e), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(e.msg, "sumsq_acc: a CPU view"), "%s", e.msg);
	dfree(stats);
}
END_TEST

/* ---- the fused optimizer step ----------------------------------------------------------- */

static int64_t ordered(float f)
{
	int32_t i;
	memcpy(&i, &f, 4);
	return i < 0 ? (int64_t)INT32_MIN - i : i;
}

static uint64_t ulps(float a, float b)
{
	if (isnan(a) && isnan(b))
		return 0;
	if (isnan(a) || isnan(b))
		return UINT64_MAX;
	int64_t d = ordered(a) - ordered(b);
	return (uint64_t)(d < 0 ? -d : d);
}

static uint64_t worst_ulps;

/* 170 ranges (more than one launch takes) of assorted sizes, every other one
 * starting at an odd element offset; range 5 spans 17 blocks. */
#define NR 170
static uint64_t rsize(int r)
{
	static const uint64_t sizes[] = {1, 3, 4096, 5000, 17, 333, 4, 1023, 8, 4097};
	return r == 5 ? 65537 : sizes[r % 10];
}

/* Array k (0 parameters, 1 and 2 the states) after step t: at most 2 ulp
 * apart per value, in the ranges (not the gaps between them).  The loop
 * asserts once (see the top of the file). */
static void compare(const char *what, uint64_t t, uint32_t k, const float *cpu,
                    const float *gpu, const uint64_t *start)
{
	int bad_r = -1;
	uint64_t bad_i = 0, bad_u = 0;
	for (int r = 0; r < NR; r++)
		for (uint64_t i = start[r]; i < start[r] + rsize(r); i++) {
			uint64_t u = ulps(cpu[i], gpu[i]);
			if (u > worst_ulps)
				worst_ulps = u;
			if (u > 2 && bad_r < 0) {
				bad_r = r;
				bad_i = i;
				bad_u = u;
			}
		}
	ck_assert_msg(bad_r < 0, "%s: step %llu, %s of range %d element %llu: cpu %.9g, gpu %.9g "
	              "(%llu ulp; the first value more than 2 ulp apart)", what,
	              (unsigned long long)t, k == 0 ? "param" : k == 1 ? "state0" : "state1",
	              bad_r, (unsigned long long)(bad_i - (bad_r >= 0 ? start[bad_r] : 0)),
	              (double)cpu[bad_i], (double)gpu[bad_i], (unsigned long long)bad_u);
}

static void optim_case(const accel_optim_opts *o, uint32_t gdt, double grad_scale,
                       const char *what)
{
	accel_optim *opt = NULL;
	accel_err e = {0};
	ck_assert_msg(accelp_optim_new(o, &opt, &e) == ACCEL_OK, "%s", e.msg);
	uint32_t ns = accelp_optim_state_count(opt);
	uint64_t start[NR], total = 0, seed = 7;
	accel_optim_range hr[NR], dr[NR];
	for (int r = 0; r < NR; r++) {
		total += r & 1;
		start[r] = total;
		total += rsize(r) + 4;
	}
	size_t gs = accel_dtype_size(gdt);
	float *hp = malloc(total * 4), *hs[2] = {calloc(total, 4), calloc(total, 4)};
	float *back = malloc(total * 4);
	void *hg = malloc(total * gs);
	float *dp = dmalloc(total * 4), *ds[2] = {dmalloc(total * 4), dmalloc(total * 4)};
	void *dg = dmalloc(total * gs);
	/* odd steps read the factor from device memory (grad_scale_dev, device
	 * ABI 1.2: what a clipped step on the device passes): the same bits */
	double *dgs = dmalloc(sizeof(double));
	xfer(dgs, &grad_scale, sizeof(double), ACCEL_DEVICE_H2D);
	for (uint64_t i = 0; i < total; i++)
		hp[i] = (float)value(&seed, 0);
	xfer(dp, hp, total * 4, ACCEL_DEVICE_H2D);
	for (int r = 0; r < NR; r++) {
		uint64_t a = start[r];
		hr[r] = (accel_optim_range){hp + a, (char *)hg + a * gs,
		                            {ns ? hs[0] + a : NULL, ns > 1 ? hs[1] + a : NULL},
		                            rsize(r)};
		dr[r] = (accel_optim_range){dp + a, (char *)dg + a * gs,
		                            {ns ? ds[0] + a : NULL, ns > 1 ? ds[1] + a : NULL},
		                            rsize(r)};
	}
	const accel_optim_group *grp = accelp_optim_get_group(opt, ACCEL_OPTIM_GROUP_DECAY);
	for (uint64_t t = 1; t <= 25; t++) {
		double lr = o->lr * (1.0 - 0.02 * (double)t);   /* a schedule */
		for (uint64_t i = 0; i < total; i++) {
			float g = (float)value(&seed, 0);
			if (gdt == ACCEL_DTYPE_F32)
				((float *)hg)[i] = g;
			else if (gdt == ACCEL_DTYPE_F16)
				((uint16_t *)hg)[i] = accel_f32_to_f16(g);
			else
				((uint16_t *)hg)[i] = accel_f32_to_bf16(g);
		}
		xfer(dg, hg, total * gs, ACCEL_DEVICE_H2D);
		ck_assert_msg(accelp_optim_step_ranges(opt, grp, t, lr, ACCEL_DEVICE_CPU, 0, hr, NR, gdt,
		                                      grad_scale, NULL, &e) == ACCEL_OK, "%s", e.msg);
		/* on the device path the host value is not the factor: a wrong one
		 * here shows when grad_scale_dev is ignored */
		ck_assert_msg(accelp_optim_step_ranges(opt, grp, t, lr, ACCEL_DEVICE_CUDA, 0, dr, NR,
		                                      gdt, (t & 1) ? 1e30 : grad_scale,
		                                      (t & 1) ? dgs : NULL, &e) == ACCEL_OK,
		              "%s", e.msg);
		for (uint32_t k = 0; k <= ns; k++) {
			xfer(back, k ? ds[k - 1] : dp, total * 4, ACCEL_DEVICE_D2H);
			compare(what, t, k, k ? hs[k - 1] : hp, back, start);
		}
	}
	free(hp);
	free(hs[0]);
	free(hs[1]);
	free(back);
	free(hg);
	dfree(dp);
	dfree(ds[0]);
	dfree(ds[1]);
	dfree(dg);
	dfree(dgs);
	accelp_optim_free(opt);
}

static const uint32_t gdtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F16, ACCEL_DTYPE_BF16};
static const double scales[] = {1.0, 0.37};

START_TEST(sgd_matches_cpu)
{
	static const double moms[] = {0, 0.9}, damps[] = {0, 0.5}, wds[] = {0, 1e-2};
	int cases = 0;
	worst_ulps = 0;
	for (size_t a = 0; a < 2; a++)
		for (size_t b = 0; b < 2; b++)
			for (int nest = 0; nest < 2; nest++)
				for (size_t w = 0; w < 2; w++)
					for (size_t d = 0; d < 3; d++)
						for (size_t s = 0; s < 2; s++) {
							if ((damps[b] != 0 && moms[a] == 0) ||
							    (nest && (moms[a] == 0 || damps[b] != 0)))
								continue;
							accel_optim_opts o;
							accelp_optim_opts_init(&o, ACCEL_OPTIM_SGD);
							o.lr = 0.05;
							o.momentum = moms[a];
							o.dampening = damps[b];
							o.nesterov = nest;
							o.weight_decay = wds[w];
							char what[160];
							snprintf(what, sizeof(what), "sgd momentum %g dampening %g "
							         "nesterov %d wd %g grad %s scale %g", moms[a], damps[b],
							         nest, wds[w], accel_dtype_name(gdtypes[d]), scales[s]);
							double t0 = now();
							progress("[%d/48] %s ...", cases + 1, what);
							optim_case(&o, gdtypes[d], scales[s], what);
							progress("[%d/48] done in %.2f s", cases + 1, now() - t0);
							cases++;
						}
	ck_assert_int_eq(cases, 48);
	fprintf(stderr, "sgd: %d option sets x 25 steps, largest difference %llu ulp (tolerance 2 "
	        "ulp)\n", cases,
	        (unsigned long long)worst_ulps);
}
END_TEST

START_TEST(adamw_matches_cpu)
{
	static const double betas[][2] = {{0.9, 0.999}, {0.8, 0.95}};
	static const double epss[] = {1e-8, 1e-3}, wds[] = {0, 1e-2, 0.1};
	int cases = 0;
	worst_ulps = 0;
	for (size_t b = 0; b < 2; b++)
		for (size_t e = 0; e < 2; e++)
			for (size_t w = 0; w < 3; w++)
				for (size_t d = 0; d < 3; d++)
					for (size_t s = 0; s < 2; s++) {
						accel_optim_opts o;
						accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
						o.lr = 1e-2;
						o.beta1 = betas[b][0];
						o.beta2 = betas[b][1];
						o.eps = epss[e];
						o.weight_decay = wds[w];
						char what[160];
						snprintf(what, sizeof(what), "adamw betas (%g, %g) eps %g wd %g "
						         "grad %s scale %g", o.beta1, o.beta2, o.eps, o.weight_decay,
						         accel_dtype_name(gdtypes[d]), scales[s]);
						double t0 = now();
						progress("[%d/72] %s ...", cases + 1, what);
						optim_case(&o, gdtypes[d], scales[s], what);
						progress("[%d/72] done in %.2f s", cases + 1, now() - t0);
						cases++;
					}
	ck_assert_int_eq(cases, 72);
	fprintf(stderr, "adamw: %d option sets x 25 steps, largest difference %llu ulp (tolerance "
	        "2 ulp)\n", cases,
	        (unsigned long long)worst_ulps);
}
END_TEST

/* ---- memory and errors -------------------------------------------------------------- */

START_TEST(device_memory_accounted)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = "{}", .skip_env = 1};
	accel_ctx *ctx = NULL;
	void *p = NULL, *h = NULL;
	ck_assert_int_eq(accel_ctx_new(&o, &ctx), ACCEL_OK);
	ck_assert_msg(accelp_mem_alloc(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CUDA, 0, 1000,
	                              ACCEL_MEMF_ZERO, &p) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CUDA), 1000);
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CPU), 0);
	ck_assert_msg(accelp_mem_alloc(ctx, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, 4000,
	                              ACCEL_MEMF_PINNED | ACCEL_MEMF_ZERO, &h) == ACCEL_OK, "%s",
	              accel_errmsg(ctx));
	ck_assert_uint_eq(((unsigned char *)h)[3999], 0);
	/* zero-filled on the device: sumsq 0; then fill and read back */
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, p, 250};
	accel_view hv = {sizeof(hv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, h, 250};
	double s = -1;
	ck_assert_int_eq(accelp_ops_sumsq(&v, &s, &ctx->err), ACCEL_OK);
	ck_assert_double_eq(s, 0.0);
	ck_assert_int_eq(accelp_ops_fill(&v, 2.0, &ctx->err), ACCEL_OK);
	ck_assert_int_eq(accelp_ops_sumsq(&v, &s, &ctx->err), ACCEL_OK);
	ck_assert_double_eq(s, 1000.0);
	ck_assert_int_eq(accelp_ops_copy(&hv, &v, &ctx->err), ACCEL_OK);
	ck_assert_float_eq(((float *)h)[249], 2.0f);
	accelp_mem_release(ctx, p);
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CUDA), 0);
	ck_assert_uint_eq(accelp_mem_peak(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CUDA), 1000);
	accel_ctx_free(ctx);   /* frees h */
}
END_TEST

START_TEST(argument_errors)
{
	accel_err e = {0};
	float *d = dmalloc(64), h[16] = {0};
	accel_view dv = {sizeof(dv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, d, 16};
	accel_view hv = {sizeof(hv), ACCEL_DTYPE_BF16, ACCEL_DEVICE_CPU, 0, h, 16};
	accel_view hostmem = dv;
	hostmem.data = h;
	ck_assert_int_eq(accelp_ops_scale(&hostmem, 2.0, &e), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(e.msg, "ordinary host memory"), "%s", e.msg);
	accelp_err_clear(&e);
	accel_view bad = dv;
	bad.device_index = 999;
	ck_assert_int_eq(accelp_ops_fill(&bad, 1.0, &e), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(e.msg, "CUDA device 999 does not exist"), "%s", e.msg);
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_ops_copy(&dv, &hv, &e), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "keeps the dtype"), "%s", e.msg);
	accelp_err_clear(&e);
	hv.dtype = ACCEL_DTYPE_F32;
	ck_assert_int_eq(accelp_ops_axpy(&dv, 1.0, &hv, &e), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "both must be on one device"), "%s", e.msg);
	accelp_err_clear(&e);
	accel_optim_opts o;
	accel_optim *opt = NULL;
	accelp_optim_opts_init(&o, ACCEL_OPTIM_ADAMW);
	ck_assert_int_eq(accelp_optim_new(&o, &opt, &e), ACCEL_OK);
	accel_optim_range r = {d, d + 4, {d + 8, NULL}, 4};
	ck_assert_int_eq(accelp_optim_step_ranges(opt, NULL, 1, 1e-3, ACCEL_DEVICE_CUDA, 0, &r, 1,
	                                         ACCEL_DTYPE_F32, 1.0, NULL, &e),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(e.msg, "range 0 has a NULL"), "%s", e.msg);
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_optim_step_ranges(opt, NULL, 0, 1e-3, ACCEL_DEVICE_CUDA, 0, &r, 1,
	                                         ACCEL_DTYPE_F32, 1.0, NULL, &e),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(e.msg, "step count t is 0"), "%s", e.msg);
	accelp_optim_free(opt);
	dfree(d);
}
END_TEST

/* ---- streams (docs/streams.md) -------------------------------------------------------- */

/* CUDA_LAUNCH_BLOCKING=1 (set in main for the op tests) would order every
 * stream after every launch: these tests run without it.  Lazy module
 * loading (CUDA's default since 12.2) would too, once per kernel: loading a
 * kernel at its first launch may synchronise the context, which waited for
 * the stream's 200 ms host function and let the fill finish before the
 * "not yet" read (seen on an H200).  Each test runs in a process of its own
 * (Check forks), before the first CUDA call there. */
static void streams_setup(void)
{
	test_setup();
	unsetenv("CUDA_LAUNCH_BLOCKING");
	setenv("CUDA_MODULE_LOADING", "EAGER", 1);
}

/* A host function for a stream: sleeps 200 ms, then sets *arg (an
 * atomic_int, when not NULL), so the host can tell whether it has run. */
static void CUDART_CB sleep_200ms(void *arg)
{
	usleep(200000);
	if (arg)
		atomic_store((atomic_int *)arg, 1);
}

static accel_ctx *gpu_ctx(const char *json)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&o, &ctx);
	ck_assert_msg(r == ACCEL_OK, "%s: %s", json, ctx ? accel_errmsg(ctx) : "no context");
	return ctx;
}

static cudaStream_t new_stream(void)
{
	cudaStream_t st = NULL;
	ck_assert_int_eq(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
	return st;
}

/* How many of n floats differ from want (one assertion per array). */
static uint64_t count_not(const float *x, uint64_t n, float want)
{
	uint64_t bad = 0;
	for (uint64_t i = 0; i < n; i++)
		bad += x[i] != want;
	return bad;
}

START_TEST(ops_run_on_the_context_stream)
{
	enum { N = 1 << 20 };
	accel_ctx *ctx = gpu_ctx("{}");
	cudaStream_t st = new_stream();
	float *x = dmalloc(N * sizeof(float)), *h = malloc(N * sizeof(float));
	ck_assert_int_eq(cudaMemset(x, 0, N * sizeof(float)), cudaSuccess);
	ck_assert_msg(accel_set_stream(ctx, st) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_ptr_eq(accel_get_stream(ctx), st);
	const accel_host_v1 *H = accelp_host_table();
	accel_host *hh = &ctx->active[0].host;
	ck_assert_ptr_eq(H->stream(hh), st);
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, x, N};
	/* the fill kernel launched once before (loaded however CUDA loads) */
	ck_assert_msg(H->op_fill(hh, &v, 1.0) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	ck_assert_int_eq(cudaMemset(x, 0, N * sizeof(float)), cudaSuccess);
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_msg(H->op_fill(hh, &v, 3.0) == ACCEL_OK, "%s", accel_errmsg(ctx));
	/* the legacy stream does not wait for a non-blocking one: still 0 */
	ck_assert_int_eq(cudaMemcpy(h, x, N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	ck_assert_uint_eq(count_not(h, N, 0.0f), 0);
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	ck_assert_int_eq(cudaMemcpy(h, x, N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	ck_assert_uint_eq(count_not(h, N, 3.0f), 0);
	/* a blocking op on the stream (sumsq) waits for what is before it */
	double ss = 0;
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_int_eq(H->op_scale(hh, &v, 2.0), ACCEL_OK);
	ck_assert_int_eq(H->op_sumsq(hh, &v, &ss), ACCEL_OK);
	ck_assert_double_eq(ss, 36.0 * N);
	/* back to the default */
	ck_assert_int_eq(accel_set_stream(ctx, NULL), ACCEL_OK);
	ck_assert_ptr_null(accel_get_stream(ctx));
	accel_ctx_free(ctx);
	cudaStreamDestroy(st);
	dfree(x);
	free(h);
}
END_TEST

START_TEST(async_copies_round_trip)
{
	enum { N = 300001 };   /* odd */
	accel_ctx *ctx = gpu_ctx("{}");
	cudaStream_t st = new_stream();
	ck_assert_int_eq(accel_set_stream(ctx, st), ACCEL_OK);
	uint32_t *pin = NULL, *back = NULL;
	ck_assert_msg(accel_pinned_alloc(ctx, N * 4, (void **)&pin) == ACCEL_OK, "%s",
	              accel_errmsg(ctx));
	ck_assert_int_eq(accel_pinned_alloc(ctx, N * 4, (void **)&back), ACCEL_OK);
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU), 2 * N * 4);
	for (uint32_t i = 0; i < N; i++)
		pin[i] = i * 2654435761u;
	memset(back, 0, N * 4);
	void *a = dmalloc(N * 4), *b = dmalloc(N * 4);
	accel_view hp = {sizeof(accel_view), ACCEL_DTYPE_U8, ACCEL_DEVICE_CPU, 0, pin, N * 4};
	accel_view hb = hp, da = hp, db = hp;
	hb.data = back;
	da.device = db.device = ACCEL_DEVICE_CUDA;
	da.data = a;
	db.data = b;
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_int_eq(accel_copy_async(ctx, &da, &hp), ACCEL_OK);
	ck_assert_int_eq(accel_copy_async(ctx, &db, &da), ACCEL_OK);
	ck_assert_int_eq(accel_copy_async(ctx, &hb, &db), ACCEL_OK);
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	ck_assert_int_eq(memcmp(pin, back, N * 4), 0);
	int ndev = 0;
	cudaGetDeviceCount(&ndev);
	if (ndev >= 2) {
		/* across devices: the stream is device 0's, so the peer copy goes
		 * 0 -> 1 on a stream of device 1 */
		ck_assert_int_eq(cudaSetDevice(1), cudaSuccess);
		cudaStream_t s1 = new_stream();
		void *c = NULL;
		ck_assert_int_eq(cudaMalloc(&c, N * 4), cudaSuccess);   /* on device 1 */
		accel_view dc = da;
		dc.device_index = 1;
		dc.data = c;
		ck_assert_int_eq(accel_set_stream(ctx, s1), ACCEL_OK);
		memset(back, 0, N * 4);
		ck_assert_msg(accel_copy_async(ctx, &dc, &da) == ACCEL_OK, "%s", accel_errmsg(ctx));
		ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
		ck_assert_int_eq(cudaMemcpy(back, c, N * 4, cudaMemcpyDeviceToHost), cudaSuccess);
		ck_assert_int_eq(memcmp(pin, back, N * 4), 0);
		/* a stream of device 1 for a copy that runs on device 0: refused */
		ck_assert_int_eq(accel_copy_async(ctx, &db, &hp), ACCEL_ERR_INVALID_ARG);
		ck_assert_msg(strstr(accel_errmsg(ctx), "belongs to device 1"), "%s", accel_errmsg(ctx));
		ck_assert_int_eq(accel_set_stream(ctx, NULL), ACCEL_OK);
		cudaFree(c);
		cudaStreamDestroy(s1);
		cudaSetDevice(0);
	}
	accel_pinned_free(ctx, pin);
	accel_pinned_free(ctx, back);
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU), 0);
	accel_ctx_free(ctx);
	cudaStreamDestroy(st);
	dfree(a);
	dfree(b);
}
END_TEST

/* Host waits on stream work (plugin ABI 1.6, device ABI 1.3): an event
 * recorded behind a 200 ms host function is not done until that ran;
 * event_sync and stream_sync wait for the fill queued before them; on the
 * legacy default stream an event covers every device. */
START_TEST(events_follow_the_stream)
{
	enum { N = 1 << 16 };
	accel_ctx *ctx = gpu_ctx("{}");
	cudaStream_t st = new_stream();
	const accel_host_v1 *H = accelp_host_table();
	accel_host *hh = &ctx->active[0].host;
	float *x = dmalloc(N * sizeof(float)), *h = malloc(N * sizeof(float));
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	ck_assert_int_eq(accel_set_stream(ctx, st), ACCEL_OK);
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, x, N};
	void *ev = NULL;
	int32_t done = 1;
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_int_eq(H->op_fill(hh, &v, 3.0), ACCEL_OK);
	ck_assert_msg(H->event_record(hh, &ev) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_int_eq(H->event_query(hh, ev, &done), ACCEL_OK);
	ck_assert_int_eq(done, 0);   /* the host function sleeps 200 ms */
	ck_assert_int_eq(H->event_sync(hh, ev), ACCEL_OK);
	ck_assert_int_eq(H->event_query(hh, ev, &done), ACCEL_OK);
	ck_assert_int_eq(done, 1);
	ck_assert_int_eq(cudaMemcpy(h, x, N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	ck_assert_uint_eq(count_not(h, N, 3.0f), 0);
	H->event_free(hh, ev);
	/* stream_sync: the whole stream */
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_int_eq(H->op_fill(hh, &v, 4.0), ACCEL_OK);
	ck_assert_int_eq(H->stream_sync(hh), ACCEL_OK);
	ck_assert_int_eq(cudaMemcpy(h, x, N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	ck_assert_uint_eq(count_not(h, N, 4.0f), 0);
	/* the legacy default stream */
	ck_assert_int_eq(accel_set_stream(ctx, NULL), ACCEL_OK);
	ck_assert_int_eq(H->op_fill(hh, &v, 5.0), ACCEL_OK);
	ck_assert_int_eq(H->event_record(hh, &ev), ACCEL_OK);
	ck_assert_int_eq(H->event_sync(hh, ev), ACCEL_OK);
	ck_assert_int_eq(H->event_query(hh, ev, &done), ACCEL_OK);
	ck_assert_int_eq(done, 1);
	H->event_free(hh, ev);
	ck_assert_int_eq(cudaMemcpy(h, x, N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	ck_assert_uint_eq(count_not(h, N, 5.0f), 0);
	accel_ctx_free(ctx);
	cudaStreamDestroy(st);
	dfree(x);
	free(h);
}
END_TEST

/* backend: "shm" stages device buffers through pinned memory; "nccl" runs
 * the collective on its own stream.  Either way the collective must see
 * the fill queued before it on the context's stream, behind a 200 ms host
 * function, without the program synchronising.  At world 1 a sum changes
 * nothing, so the collective reads x and writes a separate y (zero before):
 * a collective that ran before the fill leaves y 0. */
static void collective_after_fill(const char *json)
{
	enum { N = 1 << 18 };
	accel_ctx *ctx = gpu_ctx(json);
	cudaStream_t st = new_stream();
	float *x = dmalloc(N * sizeof(float)), *y = dmalloc(N * sizeof(float));
	float *h = malloc(N * sizeof(float));
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);   /* dmalloc zeroed both */
	ck_assert_int_eq(accel_set_stream(ctx, st), ACCEL_OK);
	const accel_host_v1 *H = accelp_host_table();
	accel_host *hh = &ctx->active[0].host;
	accel_view vx = {sizeof(vx), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, x, N};
	accel_view vy = vx;
	vy.data = y;
	/* waited for on the host: y is complete when wait() returns, for any
	 * stream (read on the legacy one, no sync) */
	accel_req *req = NULL;
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_int_eq(H->op_fill(hh, &vx, 5.0), ACCEL_OK);
	ck_assert_msg(H->allreduce(hh, &vx, &vy, ACCEL_RED_SUM, &req) == ACCEL_OK, "%s: %s", json,
	              accel_errmsg(ctx));
	ck_assert_msg(H->wait(hh, req) == ACCEL_OK, "%s: %s", json, accel_errmsg(ctx));
	ck_assert_int_eq(cudaMemcpy(h, y, N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	ck_assert_msg(count_not(h, N, 5.0f) == 0, "%s: host-waited allreduce: y[0] %g (5 "
	              "expected; 0: it ran before the fill)", json, (double)h[0]);
	/* waited for by the stream; the scale after it on the stream sees the
	 * reduced values */
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	ck_assert_int_eq(cudaMemset(y, 0, N * sizeof(float)), cudaSuccess);
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	req = NULL;
	ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, NULL), cudaSuccess);
	ck_assert_int_eq(H->op_fill(hh, &vx, 7.0), ACCEL_OK);
	ck_assert_msg(H->allreduce(hh, &vx, &vy, ACCEL_RED_SUM, &req) == ACCEL_OK, "%s: %s", json,
	              accel_errmsg(ctx));
	ck_assert_msg(H->wait_stream(hh, req) == ACCEL_OK, "%s: %s", json, accel_errmsg(ctx));
	ck_assert_int_eq(H->op_scale(hh, &vy, 2.0), ACCEL_OK);
	accel_view hv = vy;
	hv.device = ACCEL_DEVICE_CPU;
	hv.data = h;
	memset(h, 0, N * sizeof(float));
	ck_assert_int_eq(accel_copy_async(ctx, &hv, &vy), ACCEL_OK);
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	ck_assert_msg(count_not(h, N, 14.0f) == 0, "%s: stream-waited allreduce: y[0] %g (14 "
	              "expected; 0: it ran before the fill, 7: the scale ran before it)", json,
	              (double)h[0]);
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	accel_ctx_free(ctx);
	cudaStreamDestroy(st);
	dfree(x);
	dfree(y);
	free(h);
}

START_TEST(collective_after_fill_staged)
{
	collective_after_fill("{\"backend\": \"shm\"}");
}
END_TEST

START_TEST(collective_after_fill_nccl)
{
	collective_after_fill("{\"backend\": \"nccl\"}");
}
END_TEST

/* ddp with its gradient buckets on the device: 4 steps of AdamW with the
 * same gradients, on a non-blocking stream and on the default stream, give
 * the same bits.  The gradients are written on the stream behind a host
 * function, so a step not ordered after them would differ. */
static void ddp_run(const char *json, int use_stream, int check_async, float *ret_w, uint64_t n)
{
	accel_ctx *ctx = gpu_ctx(json);
	cudaStream_t st = use_stream ? new_stream() : NULL;
	int64_t shape[1] = {(int64_t)n};
	accel_init init = accel_init_uniform(-1, 1);
	accel_param_desc d = {.struct_size = sizeof(d), .dtype = ACCEL_DTYPE_F32, .unit = "u0",
	                      .name = "w", .ndim = 1, .shape = shape,
	                      .device = ACCEL_DEVICE_CUDA, .device_index = 0, .init = &init};
	ck_assert_int_eq(accel_model_add(ctx, &d, NULL), ACCEL_OK);
	ck_assert_msg(accel_prepare(ctx) == ACCEL_OK, "%s", accel_errmsg(ctx));
	if (st)
		ck_assert_int_eq(accel_set_stream(ctx, st), ACCEL_OK);
	/* pinned, one per step: each copy stays queued behind the host
	 * function until the stream runs it */
	float *gs[4];
	atomic_int slept[4];
	double want_sumsq = 0;
	for (int step = 0; step < 4; step++) {
		float *g = NULL;
		ck_assert_int_eq(cudaMallocHost((void **)&g, n * sizeof(float)), cudaSuccess);
		gs[step] = g;
		atomic_init(&slept[step], 0);
		want_sumsq = 0;
		for (uint64_t i = 0; i < n; i++) {
			g[i] = (float)((double)((i * 7 + (uint64_t)step * 3) % 11) - 5.0) * 0.1f;
			want_sumsq += (double)g[i] * g[i];
		}
		float *grad = accel_param_grad(ctx, 0);
		ck_assert_ptr_nonnull(grad);
		ck_assert_int_eq(accel_unit_pre_forward(ctx, 0), ACCEL_OK);
		ck_assert_int_eq(accel_unit_post_forward(ctx, 0), ACCEL_OK);
		ck_assert_int_eq(accel_unit_pre_backward(ctx, 0), ACCEL_OK);
		if (st)
			ck_assert_int_eq(cudaLaunchHostFunc(st, sleep_200ms, &slept[step]), cudaSuccess);
		ck_assert_int_eq(cudaMemcpyAsync(grad, g, n * sizeof(float), cudaMemcpyHostToDevice,
		                                 st ? st : 0), cudaSuccess);
		ck_assert_int_eq(accel_unit_post_backward(ctx, 0), ACCEL_OK);
		ck_assert_msg(accel_step(ctx) == ACCEL_OK, "%s", accel_errmsg(ctx));
		/* the whole step, clipping included, was enqueued behind the
		 * 200 ms host function: accel_step returned before that function
		 * ran, so it never waited for the device (no host round trip in
		 * the step; a step that read the norm on the host would have
		 * waited for it).  From the second step: the first allocates
		 * (cudaMalloc may wait). */
		if (check_async && step > 0)
			ck_assert_msg(!atomic_load(&slept[step]), "%s: step %d: the stream's host "
			              "function had run when accel_step() returned: the step waited on "
			              "the host", json, step);
	}
	if (check_async) {
		/* the last step's norm and coefficient, read back on request */
		accel_step_report rep = {.struct_size = sizeof(rep)};
		ck_assert_msg(accel_last_step(ctx, &rep) == ACCEL_OK, "%s", accel_errmsg(ctx));
		double want = sqrt(want_sumsq), coef = 1.0 / (want + 1e-6);
		ck_assert_msg(rep.has_grad_norm && fabs(rep.grad_norm - want) <= 1e-12 * want &&
		              fabs(rep.clip_coef - (coef < 1 ? coef : 1)) <= 1e-12,
		              "%s: last step: norm %.17g (want %.17g), coef %.17g", json, rep.grad_norm,
		              want, rep.clip_coef);
	}
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	ck_assert_int_eq(cudaMemcpy(ret_w, accel_param_data(ctx, 0), n * sizeof(float),
	                            cudaMemcpyDeviceToHost), cudaSuccess);
	accel_ctx_free(ctx);
	if (st)
		cudaStreamDestroy(st);
	for (int step = 0; step < 4; step++)
		cudaFreeHost(gs[step]);
}

static void ddp_stream_case(const char *json, int check_async)
{
	enum { N = 100003 };
	float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
	ddp_run(json, 0, 0, a, N);
	ddp_run(json, 1, check_async, b, N);
	uint64_t diff = 0;
	for (uint64_t i = 0; i < N; i++)
		diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
	ck_assert_msg(diff == 0, "%s: %llu of %d weights differ between the default stream and a "
	              "non-blocking one", json, (unsigned long long)diff, N);
	free(a);
	free(b);
}

START_TEST(ddp_on_a_stream_staged)
{
	/* staged through host memory: the host waits for the buckets */
	ddp_stream_case("{\"backend\": \"shm\", \"max_grad_norm\": 1.0}", 0);
}
END_TEST

START_TEST(ddp_on_a_stream_nccl)
{
	ddp_stream_case("{\"backend\": \"nccl\", \"max_grad_norm\": 1.0}", 1);
}
END_TEST

/* ---- without a GPU (unit suite, --no-gpu) ------------------------------------------------ */

START_TEST(no_gpu_is_reported)
{
	accel_err e = {0};
	float x[4] = {0};
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, x, 4};
	ck_assert_int_eq(accelp_ops_fill(&v, 1.0, &e), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "fill: CUDA device 0 needs the cuda device module") &&
	              strstr(e.msg, "no usable CUDA device"), "%s", e.msg);
	/* remembered: the same answer, without loading again */
	accelp_err_clear(&e);
	uint64_t nf;
	ck_assert_int_eq(accelp_ops_nonfinite(&v, &nf, &e), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "nonfinite: CUDA device 0") &&
	              strstr(e.msg, "no usable CUDA device"), "%s", e.msg);
	/* allocations and optimizer steps say the same */
	accel_opts o = {.struct_size = sizeof(o), .config_json = "{}", .skip_env = 1};
	accel_ctx *ctx = NULL;
	void *p = NULL;
	ck_assert_int_eq(accel_ctx_new(&o, &ctx), ACCEL_OK);
	ck_assert_int_eq(accelp_mem_alloc(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CUDA, 0, 64, 0, &p),
	                 ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(accel_errmsg(ctx), "mem_alloc: CUDA device 0"), "%s",
	              accel_errmsg(ctx));
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CUDA), 0);
	accel_ctx_free(ctx);
	accel_optim_opts oo;
	accel_optim *opt = NULL;
	accelp_optim_opts_init(&oo, ACCEL_OPTIM_SGD);
	ck_assert_int_eq(accelp_optim_new(&oo, &opt, &e), ACCEL_OK);
	accel_optim_range r = {x, x + 2, {NULL, NULL}, 2};
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_optim_step_ranges(opt, NULL, 1, 0.1, ACCEL_DEVICE_CUDA, 0, &r, 1,
	                                         ACCEL_DTYPE_F32, 1.0, NULL, &e),
	                 ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "optimizer step: CUDA device 0"), "%s", e.msg);
	accelp_optim_free(opt);
}
END_TEST

START_TEST(missing_module_is_reported)
{
	accel_err e = {0};
	float x[4] = {0};
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, x, 4};
	ck_assert_int_eq(setenv("ACCEL_DEVICE_PATH", "/nonexistent-a:/nonexistent-b", 1), 0);
	ck_assert_int_eq(accelp_ops_scale(&v, 2.0, &e), ACCEL_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "device-cuda.so) is not in ACCEL_DEVICE_PATH "
	                            "(/nonexistent-a:/nonexistent-b)"), "%s", e.msg);
}
END_TEST

static Suite *no_gpu_suite(void)
{
	Suite *s = suite_create("cuda-no-gpu");
	TCase *tc = tcase_create("errors");
	tcase_add_test(tc, no_gpu_is_reported);
	tcase_add_test(tc, missing_module_is_reported);
	suite_add_tcase(s, tc);
	return s;
}

/* Timeouts (seconds per test): about 3x the expected time.  The host part
 * of an optimizer test takes 4 s (sgd) and 10 s (adamw) on a slow 2-core
 * machine, the ~3000 steps' copies a few seconds more; the ops tests
 * together took under 45 s on an H100 machine, mostly CUDA start-up and
 * round trips, and 1.3 s on the host. */
#define OPS_TIMEOUT   60
#define OPTIM_TIMEOUT 60
#define API_TIMEOUT   30

static Suite *cuda_suite(void)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("ops");
	tcase_add_checked_fixture(tc, test_setup, NULL);
	tcase_set_timeout(tc, OPS_TIMEOUT);
	tcase_add_test(tc, copy_matches_cpu);
	tcase_add_test(tc, copy_rounds_like_reference);
	tcase_add_test(tc, fill_scale_axpy_match_cpu);
	tcase_add_test(tc, reductions_match_cpu);
	tcase_add_test(tc, stats_on_device_match_host);
	suite_add_tcase(s, tc);
	tc = tcase_create("optim");
	tcase_add_checked_fixture(tc, test_setup, NULL);
	tcase_set_timeout(tc, OPTIM_TIMEOUT);
	tcase_add_test(tc, sgd_matches_cpu);
	tcase_add_test(tc, adamw_matches_cpu);
	suite_add_tcase(s, tc);
	tc = tcase_create("api");
	tcase_add_checked_fixture(tc, test_setup, NULL);
	tcase_set_timeout(tc, API_TIMEOUT);
	tcase_add_test(tc, device_memory_accounted);
	tcase_add_test(tc, argument_errors);
	suite_add_tcase(s, tc);
	tc = tcase_create("streams");
	tcase_add_checked_fixture(tc, streams_setup, NULL);
	tcase_set_timeout(tc, API_TIMEOUT);
	tcase_add_test(tc, ops_run_on_the_context_stream);
	tcase_add_test(tc, async_copies_round_trip);
	tcase_add_test(tc, events_follow_the_stream);
	tcase_add_test(tc, collective_after_fill_staged);
	tcase_add_test(tc, collective_after_fill_nccl);
	tcase_add_test(tc, ddp_on_a_stream_staged);
	tcase_add_test(tc, ddp_on_a_stream_nccl);
	suite_add_tcase(s, tc);
	return s;
}

/* The driver probe runs in a child: CUDA initialised before Check forks
 * its test processes would not work in them. */
static int have_gpu(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		accelp_cuda_info info;
		uint32_t req = 0;
		int32_t cc = 0;
		accelp_cuda_probe(&info);
		accelp_cuda_offered(&info, &req, &cc);
		_exit((req & ACCEL_REQ_CUDA) ? 0 : 1);
	}
	int st = 0;
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* No arguments: the GPU tests (exit 77 without a GPU).  --no-gpu: what a
 * machine without one reports; on a machine with one, its GPUs are hidden
 * from this process first (CUDA_VISIBLE_DEVICES empty, before any CUDA
 * call), so the same checks run there: never a skip. */
int main(int argc, char **argv)
{
	int no_gpu = argc > 1 && !strcmp(argv[1], "--no-gpu");
	if (no_gpu && setenv("CUDA_VISIBLE_DEVICES", "", 1))
		return EXIT_FAILURE;
	int gpu = have_gpu();
	if (!no_gpu && !gpu) {
		printf("skipped: no GPU\n");
		return 77;
	}
	if (no_gpu && gpu) {
		printf("FAIL: a GPU is visible with CUDA_VISIBLE_DEVICES empty; the no-GPU "
		       "checks cannot run\n");
		return EXIT_FAILURE;
	}
	/* before any CUDA call: every op waits for its kernels (see the top) */
	if (!no_gpu && setenv("CUDA_LAUNCH_BLOCKING", "1", 0))
		return EXIT_FAILURE;
	runner_pid = getpid();
	SRunner *sr = srunner_create(no_gpu ? no_gpu_suite() : cuda_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
