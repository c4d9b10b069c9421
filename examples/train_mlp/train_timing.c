/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_timing.c: the clock, and the timing of the
 * optimizer steps after --warmup: wall time per step, the phases of the
 * micro-steps, process CPU time, printed by --json as one line in the
 * field names of bench/torch_ddp_mlp.py (docs/benchmarks.md, train_mlp).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "blas.h"
#include "train_mlp.h"

double train_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double train_cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const tm_phase_names[TM_PHASES] = {"data", "forward", "loss", "backward",
                                                      "step"};

/* Timing starts when the device has finished the work before it. */
int train_timing_start(trainer *t, timing *tm)
{
	if (t->gpu && mlp_cuda_sync(t->gpu))
		return train_gpu_fail(t, "waiting for the warm-up steps");
	tm->on = 1;
	tm->t0 = tm->last = train_now();
	tm->cpu0 = train_cpu_now();
	return 0;
}

void train_timing_step(timing *tm)
{
	double tn = train_now();
	tm->step_s[tm->n++] = tn - tm->last;
	tm->last = tn;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* One line of JSON on stdout, from every process (rank 0's is the one to
 * quote: the ranks run in lock-step); the field names match
 * bench/torch_ddp_mlp.py. */
void train_timing_json(const trainer *t, timing *tm, const options *o, int rank, int world,
                       const char *dims, double elapsed, double cpu)
{
	char host[256] = "unknown";
	long n = tm->n > 0 ? tm->n : 1;
	double micro = tm->micro > 0 ? (double)tm->micro : 1;
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = 0;
	qsort(tm->step_s, (size_t)tm->n, sizeof(double), cmp_double);
	double med = tm->n == 0 ? 0
	             : tm->n % 2 ? tm->step_s[tm->n / 2]
	                         : 0.5 * (tm->step_s[tm->n / 2 - 1] + tm->step_s[tm->n / 2]);
	printf("{\"bench\":\"train_mlp\",\"impl\":\"accel\",\"world\":%d,\"rank\":%d,"
	       "\"batch_per_rank\":%ld,"
	       "\"dims\":\"%s\",\"steps\":%ld,\"warmup\":%ld,\"micro_steps\":%ld,"
	       "\"ms_per_step\":%.3f,\"ms_per_step_median\":%.3f,\"samples_per_s\":%.1f,"
	       "\"cpu_ms_per_step\":%.3f",
	       world, rank, o->batch / world, dims, tm->n, o->warmup, tm->micro, 1e3 * elapsed / (double)n,
	       1e3 * med, (double)tm->micro * (double)o->batch / elapsed, 1e3 * cpu / (double)n);
	for (int k = 0; k < TM_PHASES; k++)
		printf(",\"ms_%s\":%.3f", tm_phase_names[k], 1e3 * tm->phase[k] / micro);
	/* CLOCK_MONOTONIC bounds of the timed steps, to cut a profile recorded
	 * with the same clock (bench/overhead.sh: perf record -k monotonic). */
	printf(",\"t_start\":%.6f,\"t_end\":%.6f", tm->t0, tm->last);
	if (t->gpu)   /* the GPU's step times are wall times between device syncs */
		printf(",\"device\":\"cuda:%d\",\"dtype\":\"%s\",\"gemm\":\"%s\",\"stream\":\"%s\"",
		       (int)t->dev_index, accel_dtype_name(t->dtype),
		       mlp_cuda_name(t->gpu), mlp_cuda_stream(t->gpu) ? "own" : "legacy");
	else
		printf(",\"device\":\"cpu\",\"dtype\":\"%s\",\"blas\":\"%s\"",
		       accel_dtype_name(t->dtype), blas_name());
	printf(",\"host\":\"%s\"}\n", host);
	fflush(stdout);
}
