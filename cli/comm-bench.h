/* SPDX-License-Identifier: MIT */
/* cli/comm-bench.h: what `accel bench comm` and its peers (bench/
 * mpi_allreduce.c, bench/gloo_allreduce.py) share, so every peer measures
 * and reports the same way (header-only, no dependency).
 *
 * Method (the one nccl-tests uses, with a median instead of a mean because
 * the machines this runs on are shared and noisy):
 *  - sizes from --min-bytes to --max-bytes, doubling;
 *  - `bytes` is the size of the larger buffer: the buffer for all-reduce and
 *    broadcast, the send buffer (world x result) for reduce-scatter, the
 *    receive buffer (world x input) for all-gather;
 *  - per size: `warmup` untimed calls, then `iters` timed calls one by one;
 *    time = the median call, and the job's time is the slowest rank's;
 *  - algbw = bytes / time; busbw = algbw x factor, the factor being what
 *    each rank must at least send over its link: all-reduce 2(n-1)/n,
 *    reduce-scatter and all-gather (n-1)/n, broadcast 1;
 *  - "inplace" says whether send and receive were one buffer (--inplace;
 *    always for gloo's all-reduce and for broadcast). */
#ifndef ACCEL_BENCH_COMM_BENCH_H
#define ACCEL_BENCH_COMM_BENCH_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/types.h"
#include "backends/common/half.h"

#define CB_OP_ALLREDUCE      0
#define CB_OP_REDUCE_SCATTER 1
#define CB_OP_ALLGATHER      2
#define CB_OP_BROADCAST      3
#define CB_OP_COUNT          4

static const char *const cb_op_names[CB_OP_COUNT] = {"allreduce", "reduce_scatter", "allgather",
                                                     "broadcast"};

/* "allreduce" -> CB_OP_ALLREDUCE; "all" -> CB_OP_COUNT; -1 unknown. */
static inline int cb_op_parse(const char *s)
{
	if (!strcmp(s, "all"))
		return CB_OP_COUNT;
	for (int i = 0; i < CB_OP_COUNT; i++)
		if (!strcmp(s, cb_op_names[i]))
			return i;
	return -1;
}

/* "8", "64K", "256M", "1G" (powers of 1024; a trailing B or iB is allowed).
 * Returns 0 on success. */
static inline int cb_parse_bytes(const char *s, uint64_t *ret)
{
	char *end = NULL;
	if (!s || *s < '0' || *s > '9')   /* no sign, no spaces */
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno == ERANGE)
		return -1;
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	default: break;
	}
	if (mul > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v > UINT64_MAX / mul)
		return -1;
	*ret = (uint64_t)v * mul;
	return 0;
}

static inline double cb_bus_factor(int op, int world)
{
	double n = world;
	switch (op) {
	case CB_OP_ALLREDUCE: return world > 1 ? 2.0 * (n - 1) / n : 0.0;
	case CB_OP_REDUCE_SCATTER:
	case CB_OP_ALLGATHER: return world > 1 ? (n - 1) / n : 0.0;
	default: return 1.0;
	}
}

/* Element counts for a requested size: *ret_count is the count of the call
 * (all-reduce/broadcast: the buffer; reduce-scatter: each rank's result;
 * all-gather: each rank's input), *ret_bytes the reported size.  Returns 0
 * when the size is too small for this op at this world size. */
static inline int cb_counts(int op, uint64_t bytes, size_t elem, int world, uint64_t *ret_count,
                            uint64_t *ret_bytes)
{
	uint64_t n = bytes / elem;
	if (op == CB_OP_REDUCE_SCATTER || op == CB_OP_ALLGATHER) {
		uint64_t per = n / (uint64_t)world;
		if (per == 0)
			return 0;
		*ret_count = per;
		*ret_bytes = per * (uint64_t)world * elem;
		return 1;
	}
	if (n == 0)
		return 0;
	*ret_count = n;
	*ret_bytes = n * elem;
	return 1;
}

static inline double cb_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int cb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v). */
static inline double cb_median(double *v, int n)
{
	if (n <= 0)
		return 0.0;
	qsort(v, (size_t)n, sizeof(double), cb_cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- inputs and their check ---------------------------------------------------
 * Element i of rank r's input is (i % 5) + (r % 3): small integers, so every
 * result is exact in every dtype (up to ~40 ranks for bf16) whatever order
 * the backend adds in. */

static inline double cb_value(int rank, uint64_t i)
{
	return (double)(i % 5) + (double)(rank % 3);
}

static inline size_t cb_dtype_size(uint32_t dt)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: case ACCEL_DTYPE_I32: return 4;
	case ACCEL_DTYPE_F64: case ACCEL_DTYPE_I64: return 8;
	case ACCEL_DTYPE_F16: case ACCEL_DTYPE_BF16: return 2;
	default: return 0;
	}
}

/* "f32" ... -> ACCEL_DTYPE_*, ACCEL_DTYPE_INVALID when not benchmarkable. */
static inline uint32_t cb_dtype_parse(const char *s)
{
	static const struct { const char *n; uint32_t t; } t[] = {
		{"f32", ACCEL_DTYPE_F32}, {"f64", ACCEL_DTYPE_F64}, {"f16", ACCEL_DTYPE_F16},
		{"bf16", ACCEL_DTYPE_BF16}, {"i32", ACCEL_DTYPE_I32}, {"i64", ACCEL_DTYPE_I64}};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(s, t[i].n))
			return t[i].t;
	return ACCEL_DTYPE_INVALID;
}

static inline void cb_put(void *buf, uint32_t dt, uint64_t i, double v)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
	case ACCEL_DTYPE_F64: ((double *)buf)[i] = v; break;
	case ACCEL_DTYPE_F16: ((uint16_t *)buf)[i] = accel_f32_to_f16((float)v); break;
	case ACCEL_DTYPE_BF16: ((uint16_t *)buf)[i] = accel_f32_to_bf16((float)v); break;
	case ACCEL_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case ACCEL_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
	default: break;
	}
}

static inline double cb_get(const void *buf, uint32_t dt, uint64_t i)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: return ((const float *)buf)[i];
	case ACCEL_DTYPE_F64: return ((const double *)buf)[i];
	case ACCEL_DTYPE_F16: return accel_f16_to_f32(((const uint16_t *)buf)[i]);
	case ACCEL_DTYPE_BF16: return accel_bf16_to_f32(((const uint16_t *)buf)[i]);
	case ACCEL_DTYPE_I32: return ((const int32_t *)buf)[i];
	case ACCEL_DTYPE_I64: return (double)((const int64_t *)buf)[i];
	default: return 0.0;
	}
}

/* Fill this rank's input for `op` (count as from cb_counts()). */
static inline void cb_fill(int op, uint32_t dt, void *send, uint64_t count, int rank, int world)
{
	uint64_t n = op == CB_OP_REDUCE_SCATTER ? count * (uint64_t)world : count;
	for (uint64_t i = 0; i < n; i++)
		cb_put(send, dt, i, cb_value(rank, i));
}

/* Check the output of `op` (SUM reduction, broadcast from rank 0); returns
 * 1 when right, -1 (and the first bad index in *ret_bad) when not. */
static inline int cb_check(int op, uint32_t dt, const void *recv, uint64_t count, int rank,
                           int world, uint64_t *ret_bad)
{
	uint64_t n = op == CB_OP_ALLGATHER ? count * (uint64_t)world : count;
	for (uint64_t i = 0; i < n; i++) {
		double e = 0.0;
		if (op == CB_OP_ALLREDUCE || op == CB_OP_REDUCE_SCATTER) {
			uint64_t j = op == CB_OP_REDUCE_SCATTER ? (uint64_t)rank * count + i : i;
			for (int r = 0; r < world; r++)
				e += cb_value(r, j);
		} else if (op == CB_OP_ALLGATHER) {
			e = cb_value((int)(i / count), i % count);
		} else {
			e = cb_value(0, i);
		}
		if (cb_get(recv, dt, i) != e) {
			*ret_bad = i;
			return -1;
		}
	}
	return 1;
}

typedef struct cb_row {
	const char *op;
	const char *dtype;
	uint64_t bytes;
	uint64_t count;
	double time_us;       /* median, slowest rank */
	double mean_us;       /* mean, slowest rank */
	int world;
	const char *backend;
	const char *buffers;
	const char *host;
	int iters;
	int checked;          /* 1: results verified, 0: not checked, -1: wrong */
	int inplace;          /* send and receive were one buffer */
} cb_row;

static inline double cb_algbw(const cb_row *r)
{
	return r->time_us > 0 ? (double)r->bytes / (r->time_us * 1e-6) / 1e9 : 0.0;
}

static inline void cb_json(FILE *f, const cb_row *r, int op)
{
	double alg = cb_algbw(r);
	fprintf(f,
	        "{\"bench\":\"comm\",\"op\":\"%s\",\"dtype\":\"%s\",\"bytes\":%llu,\"count\":%llu,"
	        "\"time_us\":%.3f,\"mean_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
	        "\"world\":%d,\"backend\":\"%s\",\"buffers\":\"%s\",\"iters\":%d,\"check\":\"%s\","
	        "\"inplace\":%s,\"host\":\"%s\"}\n",
	        r->op, r->dtype, (unsigned long long)r->bytes, (unsigned long long)r->count,
	        r->time_us, r->mean_us, alg, alg * cb_bus_factor(op, r->world), r->world, r->backend,
	        r->buffers, r->iters, r->checked > 0 ? "ok" : r->checked < 0 ? "WRONG" : "off",
	        r->inplace ? "true" : "false", r->host);
	fflush(f);
}

static inline void cb_table_header(FILE *f, const char *backend, const char *buffers, int world,
                                   const char *host, int inplace)
{
	fprintf(f, "# comm benchmark: backend %s, %s buffers (%s), %d ranks, host %s\n", backend,
	        buffers, inplace ? "in place" : "out of place", world, host);
	fprintf(f, "# %-14s %12s %12s %5s %12s %12s %10s %10s %6s\n", "op", "bytes", "count", "type",
	        "time(us)", "mean(us)", "algbw", "busbw", "check");
	fprintf(f, "# %-14s %12s %12s %5s %12s %12s %10s %10s %6s\n", "", "", "", "", "median",
	        "", "(GB/s)", "(GB/s)", "");
}

static inline void cb_table_row(FILE *f, const cb_row *r, int op)
{
	double alg = cb_algbw(r);
	fprintf(f, "  %-14s %12llu %12llu %5s %12.2f %12.2f %10.3f %10.3f %6s\n", r->op,
	        (unsigned long long)r->bytes, (unsigned long long)r->count, r->dtype, r->time_us,
	        r->mean_us, alg, alg * cb_bus_factor(op, r->world),
	        r->checked > 0 ? "ok" : r->checked < 0 ? "WRONG" : "off");
	fflush(f);
}

#endif
