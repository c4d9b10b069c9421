/* SPDX-License-Identifier: MIT */
/* bench/optim-cuda.c: the cuda device module's fused multi-tensor AdamW
 * step (accelp_optim_step_ranges on ACCEL_DEVICE_CUDA) on N f32 parameters
 * in T tensors, next to the device-to-device copy bandwidth (cudaMemcpy
 * through the module) measured in the same process.
 *
 * Method: a timed batch is `--steps` back-to-back steps (or copies)
 * followed by one device synchronisation; the result is the fastest batch
 * over `--rounds` rounds (each round runs the step batch then the copy
 * batch), in milliseconds per step.  AdamW moves 28 bytes per parameter
 * with f32 gradients (reads p, g, m, v; writes p, m, v); a copy of B bytes
 * moves 2B.  One JSON line per result (bench/optim-cuda.sh adds
 * torch.optim.AdamW(fused=True) as the peer and prints the ratios).
 *
 *   bench-optim-cuda [--n 100000000] [--tensors 100] [--steps 20]
 *                    [--rounds 5] [--machine NAME]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"
#include "device.h"
#include "ops.h"
#include "optim.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const accel_device_v1 *D;
static char dmsg[1024];
static accel_device_err_v1 de = {sizeof(accel_device_err_v1), sizeof(dmsg), dmsg};

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "bench-optim-cuda: %s: %s\n", what, msg);
	exit(1);
}

static void *dalloc(uint64_t bytes)
{
	void *p = NULL;
	if (D->mem_alloc(ACCEL_DEVICE_MEM_DEVICE, 0, bytes, 1, &p, &de))
		die("mem_alloc", dmsg);
	return p;
}

int main(int argc, char **argv)
{
	uint64_t n = 100000000;
	uint32_t tensors = 100, steps = 20, rounds = 5;
	const char *mach = "unknown";
	static const struct option longs[] = {
		{"n", required_argument, 0, 'n'},       {"tensors", required_argument, 0, 't'},
		{"steps", required_argument, 0, 's'},   {"rounds", required_argument, 0, 'r'},
		{"machine", required_argument, 0, 'm'}, {0, 0, 0, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 'n': n = strtoull(optarg, NULL, 10); break;
		case 't': tensors = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 's': steps = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'r': rounds = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'm': mach = optarg; break;
		default:
			fprintf(stderr, "usage: %s [--n N] [--tensors T] [--steps S] [--rounds R] "
			        "[--machine NAME]\n", argv[0]);
			return 2;
		}
	}
	if (!n || !tensors || !steps || !rounds || n < tensors) {
		fprintf(stderr, "bench-optim-cuda: --n, --tensors, --steps, --rounds must be > 0 and "
		        "n >= tensors\n");
		return 2;
	}

	accel_err err = {0};
	int r = accelp_device_get(ACCEL_DEVICE_CUDA, &D, &err);
	if (r == ACCEL_ERR_UNSUPPORTED && strstr(err.msg, "no usable CUDA device")) {
		printf("skipped: no GPU (%s)\n", err.msg);
		return 77;
	}
	if (r)
		die("cuda device module", err.msg);

	/* T tensors of n/T elements (the first ones one larger), each its own
	 * allocation as torch's parameters are. */
	accel_optim_range *rg = calloc(tensors, sizeof(*rg));
	if (!rg)
		die("calloc", "out of memory");
	for (uint32_t i = 0; i < tensors; i++) {
		uint64_t k = n / tensors + (i < n % tensors);
		rg[i].numel = k;
		rg[i].param = dalloc(k * 4);
		rg[i].grad = dalloc(k * 4);
		rg[i].state[0] = dalloc(k * 4);
		rg[i].state[1] = dalloc(k * 4);
		/* non-zero parameters and gradients, through the device ops */
		accel_view gv = {sizeof(gv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0,
		                 (void *)rg[i].grad, k};
		accel_view pv = gv;
		pv.data = rg[i].param;
		if (accelp_ops_fill(&gv, 0.01, &err) || accelp_ops_fill(&pv, 0.5, &err))
			die("fill", err.msg);
	}
	/* the copy peer: as many bytes as the four AdamW arrays of 1/4 of the
	 * parameters, at least 256 MiB, one buffer each way */
	uint64_t cbytes = n * 4 < ((uint64_t)256 << 20) ? (uint64_t)256 << 20 : n * 4;
	void *ca = dalloc(cbytes), *cb = dalloc(cbytes);

	accel_optim_opts oo;
	accel_optim *opt = NULL;
	accelp_optim_opts_init(&oo, ACCEL_OPTIM_ADAMW);
	if (accelp_optim_new(&oo, &opt, &err))
		die("optimizer", err.msg);

	double best_step = 1e30, best_copy = 1e30;
	uint64_t t = 1;
	/* warm-up: one step, one copy */
	if (accelp_optim_step_ranges(opt, NULL, t++, 1e-3, ACCEL_DEVICE_CUDA, 0, rg, tensors,
	                            ACCEL_DTYPE_F32, 1.0, NULL, &err))
		die("step", err.msg);
	if (D->memcpy(cb, ca, cbytes, ACCEL_DEVICE_D2D, 0, &de) || D->sync(0, &de))
		die("copy", dmsg);
	for (uint32_t round = 0; round < rounds; round++) {
		double t0 = now();
		for (uint32_t s = 0; s < steps; s++)
			if (accelp_optim_step_ranges(opt, NULL, t++, 1e-3, ACCEL_DEVICE_CUDA, 0, rg,
			                            tensors, ACCEL_DTYPE_F32, 1.0, NULL, &err))
				die("step", err.msg);
		if (D->sync(0, &de))
			die("sync", dmsg);
		double dt = (now() - t0) / steps;
		if (dt < best_step)
			best_step = dt;
		t0 = now();
		for (uint32_t s = 0; s < steps; s++)
			if (D->memcpy((s & 1) ? ca : cb, (s & 1) ? cb : ca, cbytes, ACCEL_DEVICE_D2D, 0,
			              &de))
				die("copy", dmsg);
		if (D->sync(0, &de))
			die("sync", dmsg);
		dt = (now() - t0) / steps;
		if (dt < best_copy)
			best_copy = dt;
	}
	double agbs = 28.0 * (double)n / best_step / 1e9;
	double cgbs = 2.0 * (double)cbytes / best_copy / 1e9;
	printf("{\"bench\":\"optim-cuda\",\"impl\":\"accel\",\"op\":\"adamw\",\"machine\":\"%s\","
	       "\"n\":%llu,\"tensors\":%u,\"grad_dtype\":\"f32\",\"steps\":%u,\"rounds\":%u,"
	       "\"time_ms\":%.4f,\"gparam_s\":%.3f,\"bytes_per_param\":28,\"GBps\":%.1f}\n",
	       mach, (unsigned long long)n, tensors, steps, rounds, best_step * 1e3,
	       (double)n / best_step / 1e9, agbs);
	printf("{\"bench\":\"optim-cuda\",\"impl\":\"cuda\",\"op\":\"d2d-copy\",\"machine\":\"%s\","
	       "\"bytes\":%llu,\"steps\":%u,\"rounds\":%u,\"time_ms\":%.4f,\"GBps\":%.1f,"
	       "\"counts\":\"read+write\"}\n",
	       mach, (unsigned long long)cbytes, steps, rounds, best_copy * 1e3, cgbs);
	printf("{\"bench\":\"optim-cuda\",\"impl\":\"accel\",\"op\":\"adamw-vs-copy\","
	       "\"machine\":\"%s\",\"peer\":\"cudaMemcpy d2d\",\"ratio\":%.3f}\n", mach, agbs / cgbs);
	fflush(stdout);
	accelp_optim_free(opt);
	return 0;
}
