/* SPDX-License-Identifier: MIT */
/* bench/memfloor.c: the memory-traffic floor of a shared-memory collective
 * on this machine.  NP threads of one process play NP ranks whose buffers
 * are all directly addressable (no staging, no flags, no waiting beyond one
 * barrier per call), and move exactly the bytes the collective must move:
 *
 *   allreduce  NP send and NP receive buffers of N bytes (f32 sum; with
 *              --inplace one buffer per rank): thread t sums its 1/NP slice
 *              across all send buffers and writes the result into all
 *              receive buffers -- the zero-copy algorithm of the shm backend
 *              on backend buffers, minus its synchronisation;
 *   allgather  NP send buffers of N/NP bytes, NP receive buffers of N bytes:
 *              thread t copies every rank's block straight into its own
 *              receive buffer.
 *
 * No real collective between processes can move less memory than this, so
 * the time is a lower bound for accel's shm backend and for Open MPI and
 * gloo alike.  Prints one JSON line per op and size in the format of
 * `accel bench comm` with "backend":"floor" (bench/comm-peers.sh adds it to
 * its table).
 *
 * Usage: memfloor [--np N] [--op allreduce|allgather|all] [--min-bytes B]
 *                 [--max-bytes B] [--iters I] [--warmup W] [--inplace]  */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_ALLREDUCE = 1, OP_ALLGATHER = 2 };

typedef struct job {
	int np, op;
	size_t bytes;            /* the collective's N */
	float **buf;             /* allreduce: np send buffers of bytes */
	float **out;             /* allreduce: np receive buffers (== buf in place) */
	char **send, **recv;     /* allgather: np x bytes/np, np x bytes */
	pthread_barrier_t bar;
	int iters;
	double *times;           /* per iteration, written by thread 0 */
} job;

typedef struct targ {
	job *j;
	int t;
} targ;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void slice(size_t n, int np, int t, size_t *lo, size_t *hi)
{
	size_t per = (n / (size_t)np + 15) / 16 * 16;   /* 64-byte slices of f32 */
	*lo = per * (size_t)t < n ? per * (size_t)t : n;
	*hi = *lo + per < n ? *lo + per : n;
	if (t == np - 1)
		*hi = n;
}

static void allreduce_part(const job *j, int t)
{
	size_t n = j->bytes / sizeof(float), lo, hi;
	slice(n, j->np, t, &lo, &hi);
	if (j->np == 2) {
		const float *a = j->buf[0], *b = j->buf[1];
		float *x = j->out[0], *y = j->out[1];
		for (size_t i = lo; i < hi; i++) {
			float s = a[i] + b[i];
			x[i] = s;
			y[i] = s;
		}
		return;
	}
	for (size_t i = lo; i < hi; i++) {
		float s = j->buf[0][i];
		for (int q = 1; q < j->np; q++)
			s += j->buf[q][i];
		for (int q = 0; q < j->np; q++)
			j->out[q][i] = s;
	}
}

static void allgather_part(const job *j, int t)
{
	size_t blk = j->bytes / (size_t)j->np;
	for (int k = 0; k < j->np; k++) {
		int q = (t + k) % j->np;
		memcpy(j->recv[t] + (size_t)q * blk, j->send[q], blk);
	}
}

static void *worker(void *arg)
{
	targ *a = arg;
	job *j = a->j;
	for (int it = 0; it < j->iters; it++) {
		pthread_barrier_wait(&j->bar);
		double t0 = now_s();
		if (j->op == OP_ALLREDUCE)
			allreduce_part(j, a->t);
		else
			allgather_part(j, a->t);
		pthread_barrier_wait(&j->bar);
		if (a->t == 0)
			j->times[it] = now_s() - t0;
	}
	return NULL;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

static int parse_bytes(const char *s, size_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	if (*end)
		return -1;
	*ret = (size_t)v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: memfloor [--np N] [--op allreduce|allgather|all] [--min-bytes B] "
	           "[--max-bytes B] [--iters I] [--warmup W] [--inplace]\n"
	           "The memory-traffic floor of an NP-rank shared-memory collective: NP threads "
	           "move exactly\nthe bytes it must move, with direct access to every buffer. "
	           "JSON lines like accel bench comm.\n");
}

int main(int argc, char **argv)
{
	int np = 2, ops = OP_ALLREDUCE | OP_ALLGATHER, iters = 20, warmup = 5, inplace = 0;
	size_t min_b = 8, max_b = (size_t)64 << 20;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--inplace")) {
			inplace = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "memfloor: %s needs a value\n", argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--np"))
			np = atoi(v);
		else if (!strcmp(argv[i], "--iters"))
			iters = atoi(v);
		else if (!strcmp(argv[i], "--warmup"))
			warmup = atoi(v);
		else if (!strcmp(argv[i], "--op"))
			ops = !strcmp(v, "allreduce") ? OP_ALLREDUCE : !strcmp(v, "allgather") ? OP_ALLGATHER
			      : !strcmp(v, "all") ? OP_ALLREDUCE | OP_ALLGATHER : 0;
		else if (!strcmp(argv[i], "--min-bytes") ? parse_bytes(v, &min_b)
		         : !strcmp(argv[i], "--max-bytes") ? parse_bytes(v, &max_b) : 1) {
			fprintf(stderr, "memfloor: bad option or value '%s %s'\n", argv[i], v);
			usage(stderr);
			return 2;
		}
		i++;
	}
	if (np < 1 || np > 64 || iters < 1 || warmup < 0 || !ops || min_b < 4 || max_b < min_b) {
		fprintf(stderr, "memfloor: bad arguments (--np 1..64, --iters >= 1, --op allreduce|"
		                "allgather|all, 4 <= min-bytes <= max-bytes)\n");
		return 2;
	}
	for (int op = OP_ALLREDUCE; op <= OP_ALLGATHER; op <<= 1) {
		if (!(ops & op))
			continue;
		for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) {
			job j = {.np = np, .op = op, .bytes = bytes, .iters = iters + warmup};
			j.times = calloc((size_t)j.iters, sizeof(double));
			j.buf = calloc((size_t)np, sizeof(float *));
			j.out = calloc((size_t)np, sizeof(float *));
			j.send = calloc((size_t)np, sizeof(char *));
			j.recv = calloc((size_t)np, sizeof(char *));
			if (!j.times || !j.buf || !j.out || !j.send || !j.recv) {
				fprintf(stderr, "memfloor: out of memory\n");
				return 1;
			}
			for (int q = 0; q < np; q++) {
				if (op == OP_ALLREDUCE) {
					j.buf[q] = aligned_alloc(64, (bytes + 63) / 64 * 64);
					j.out[q] = inplace ? j.buf[q] : aligned_alloc(64, (bytes + 63) / 64 * 64);
					if (!j.buf[q] || !j.out[q])
						return 1;
					memset(j.buf[q], 0, bytes);
					memset(j.out[q], 0, bytes);
				} else {
					size_t blk = bytes / (size_t)np;
					j.send[q] = aligned_alloc(64, (blk + 63) / 64 * 64 + 64);
					j.recv[q] = aligned_alloc(64, (bytes + 63) / 64 * 64);
					if (!j.send[q] || !j.recv[q])
						return 1;
					memset(j.send[q], q + 1, blk);
					memset(j.recv[q], 0, bytes);
				}
			}
			pthread_barrier_init(&j.bar, NULL, (unsigned)np);
			pthread_t *th = calloc((size_t)np, sizeof(pthread_t));
			targ *ta = calloc((size_t)np, sizeof(targ));
			for (int t = 0; t < np; t++) {
				ta[t] = (targ){&j, t};
				if (t && pthread_create(&th[t], NULL, worker, &ta[t])) {
					fprintf(stderr, "memfloor: cannot start a thread\n");
					return 1;
				}
			}
			worker(&ta[0]);
			for (int t = 1; t < np; t++)
				pthread_join(th[t], NULL);
			pthread_barrier_destroy(&j.bar);
			qsort(j.times + warmup, (size_t)iters, sizeof(double), cmp_d);
			double best = j.times[warmup], med = j.times[warmup + iters / 2];
			double algbw = (double)bytes / best / 1e9;
			double factor = op == OP_ALLREDUCE ? 2.0 * (np - 1) / np : (double)(np - 1) / np;
			printf("{\"bench\":\"comm\",\"op\":\"%s\",\"dtype\":\"f32\",\"bytes\":%zu,"
			       "\"count\":%zu,\"time_us\":%.3f,\"mean_us\":%.3f,\"algbw_GBps\":%.4f,"
			       "\"busbw_GBps\":%.4f,\"world\":%d,\"backend\":\"floor\",\"buffers\":"
			       "\"direct\",\"inplace\":%s,\"iters\":%d,\"check\":\"n/a\"}\n",
			       op == OP_ALLREDUCE ? "allreduce" : "allgather", bytes,
			       bytes / sizeof(float), med * 1e6, best * 1e6, algbw, algbw * factor, np,
			       inplace ? "true" : "false", iters);
			fflush(stdout);
			for (int q = 0; q < np; q++) {
				if (j.out[q] != j.buf[q])
					free(j.out[q]);
				free(j.buf[q]);
				free(j.send[q]);
				free(j.recv[q]);
			}
			free(j.buf);
			free(j.out);
			free(j.send);
			free(j.recv);
			free(j.times);
			free(th);
			free(ta);
		}
	}
	return 0;
}
