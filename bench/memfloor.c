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
 * gloo alike.  Sizes, timing and the JSON lines are cli/comm-bench.h's,
 * as for every peer, with "backend":"floor", "buffers":"direct" and
 * "inplace"; bench/comm-peers.sh adds it to its table.
 *
 * Usage: memfloor [--np N] [--op allreduce|allgather|all] [--min-bytes B]
 *                 [--max-bytes B] [--iters I] [--warmup W] [--inplace]  */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/comm-bench.h"

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
		double t0 = cb_now_s();
		if (j->op == OP_ALLREDUCE)
			allreduce_part(j, a->t);
		else
			allgather_part(j, a->t);
		pthread_barrier_wait(&j->bar);
		if (a->t == 0)
			j->times[it] = cb_now_s() - t0;
	}
	return NULL;
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
	uint64_t min_b = 8, max_b = (uint64_t)64 << 20;
	char host[256] = "";
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
		else if (!strcmp(argv[i], "--op")) {
			int op = cb_op_parse(v);
			ops = op == CB_OP_ALLREDUCE ? OP_ALLREDUCE : op == CB_OP_ALLGATHER ? OP_ALLGATHER
			      : op == CB_OP_COUNT ? OP_ALLREDUCE | OP_ALLGATHER : 0;
		} else if (!strcmp(argv[i], "--min-bytes") ? cb_parse_bytes(v, &min_b)
		           : !strcmp(argv[i], "--max-bytes") ? cb_parse_bytes(v, &max_b) : 1) {
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
	gethostname(host, sizeof(host) - 1);
	for (int op = OP_ALLREDUCE; op <= OP_ALLGATHER; op <<= 1) {
		if (!(ops & op))
			continue;
		for (uint64_t bytes = min_b; bytes <= max_b; bytes *= 2) {
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
			double mean = 0;
			for (int it = warmup; it < j.iters; it++)
				mean += j.times[it] / iters;
			cb_row row = {
				.op = cb_op_names[op == OP_ALLREDUCE ? CB_OP_ALLREDUCE : CB_OP_ALLGATHER],
				.dtype = "f32",
				.bytes = bytes,
				.count = bytes / sizeof(float),
				.time_us = cb_median(j.times + warmup, iters) * 1e6,
				.mean_us = mean * 1e6,
				.world = np,
				.backend = "floor",
				.buffers = "direct",
				.host = host,
				.iters = iters,
				.checked = 0,
				.inplace = inplace,
			};
			cb_json(stdout, &row, op == OP_ALLREDUCE ? CB_OP_ALLREDUCE : CB_OP_ALLGATHER);
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
