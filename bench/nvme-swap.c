/* SPDX-License-Identifier: MIT */
/* bench/nvme-swap.c: the NVMe-offloaded optimizer step (plugins/zero's
 * zero_store with its swap file, zero_nvme) next to the raw O_DIRECT
 * sequential write and read bandwidth of the same directory, measured in
 * the same run.
 *
 * Method (the machines are shared and noisy; a result is the fastest of
 * --rounds rounds, other processes only ever make things slower):
 *   raw    like `dd bs=1M oflag=direct` then `iflag=direct`: one file of the
 *          swap's size, written with 1 MiB pwrite()s and read back with 1
 *          MiB pread()s, O_DIRECT, one request at a time.  read+write is
 *          the bytes of both over the time of both.  raw-odirect-qd: the
 *          same with queue_depth x thread_count threads each taking every
 *          n-th block, as many requests in flight as the swap keeps (the
 *          fairer ceiling: dd's one request at a time is not).
 *   step   zero_store_step() of a store with placement nvme over --params
 *          f32 parameters with AdamW (the core's kernel, core/optim.c, on
 *          --threads threads), sub-groups of --sub-group elements,
 *          --buffers buffers: every sub-group is read, stepped and written
 *          back, the next read and the previous write overlapping the step.
 *          Bytes swapped per second: (bytes read + bytes written) / the
 *          step's wall time, everything the step waited for included.
 *   cpu    the same step with masters and state in memory (placement cpu),
 *          for what the arithmetic alone costs.
 * The host table here is the bench's own (the store's contract is the host
 * table, not the core): mem_alloc is malloc, op_copy the core's, optim_step
 * the core's AdamW kernel, optim_step_n the core's thread pool
 * (core/optim_pool.c, what host->optim_step_n runs) on --threads threads.
 * One JSON line per result on stdout. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "accel/plugin.h"
#include "error.h"
#include "ops.h"
#include "optim.h"
#include "optim_pool.h"
#include "zero_store.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static const char *fs_name(const char *dir)
{
	struct statfs s;
	if (statfs(dir, &s))
		return "unknown";
	switch ((unsigned long)s.f_type) {
	case 0xEF53UL: return "ext4";
	case 0x58465342UL: return "xfs";
	case 0x9123683EUL: return "btrfs";
	case 0x01021994UL: return "tmpfs";
	case 0x794c7630UL: return "overlay";
	case 0x858458f6UL: return "ramfs";
	case 0x6969UL: return "nfs";
	case 0x65735546UL: return "fuse";
	default: return "other";
	}
}

/* ---- the bench's host table ------------------------------------------------ */

typedef struct bench_host {
	accel_model_v1 model;
	accel_param_info_v1 param;
	accel_optim *opt;
	accel_optim_pool *pool;
	uint64_t t;
	uint32_t threads;
	char err[1024];
} bench_host;

static bench_host B;

static void h_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	if (level > ACCEL_LOG_WARN && !getenv("BENCH_VERBOSE"))
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "bench-nvme-swap: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

static int h_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!B.err[0])
		vsnprintf(B.err, sizeof(B.err), fmt, ap);
	va_end(ap);
	return code;
}

static const accel_model_v1 *h_model(accel_host *h)
{
	return &B.model;
}

static int h_mem_alloc(accel_host *h, uint32_t category, int32_t device, int32_t device_index,
                       uint64_t bytes, uint32_t flags, void **ret_ptr)
{
	size_t sz = (size_t)((bytes + 63) & ~(uint64_t)63);
	void *p = aligned_alloc(64, sz ? sz : 64);
	if (!p)
		return h_error(h, ACCEL_ERR_NOMEM, "out of memory (%llu bytes)",
		               (unsigned long long)bytes);
	memset(p, 0, sz);   /* zeroed, and every page faulted in before timing */
	*ret_ptr = p;
	return ACCEL_OK;
}

static void h_mem_free(accel_host *h, void *p)
{
	free(p);
}

static int h_op_copy(accel_host *h, const accel_view *dst, const accel_view *src)
{
	accel_err e = {0};
	int r = accelp_ops_copy(dst, src, &e);
	return r ? h_error(h, r, "%s", e.msg) : ACCEL_OK;
}

static uint32_t h_state_count(accel_host *h)
{
	return 2;
}

static int h_optim_step(accel_host *h, const accel_optim_args_v1 *a)
{
	accel_err e = {0};
	float *st[2] = {a->state[0], a->state[1]};
	int r = accelp_optim_step_range(B.opt, NULL, B.t, 1e-3, a->master.data, a->grad.data,
	                               a->grad.dtype, st, a->master.numel, a->grad_scale, &e);
	return r ? h_error(h, r, "%s", e.msg) : ACCEL_OK;
}

/* The core's thread pool (core/optim_pool.c), as host->optim_step_n runs it. */
static int h_optim_step_n(accel_host *h, const accel_optim_args_v1 *args, uint32_t n,
                          uint32_t n_threads)
{
	accel_optim_task *t = calloc(n ? n : 1, sizeof(*t));
	if (!t)
		return h_error(h, ACCEL_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		t[i].param = args[i].master.data;
		t[i].grad = args[i].grad.data;
		t[i].gdtype = args[i].grad.dtype;
		t[i].state[0] = args[i].state[0];
		t[i].state[1] = args[i].state[1];
		t[i].numel = args[i].master.numel;
		t[i].grad_scale = args[i].grad_scale;
	}
	accel_err e = {0};
	int r = accelp_optim_pool_step(B.pool, B.opt, B.t, 1e-3, t, n,
	                              n_threads ? n_threads : B.threads, &e);
	free(t);
	return r ? h_error(h, r, "%s", e.msg) : ACCEL_OK;
}

static accel_host_v1 host_table(void)
{
	accel_host_v1 H;
	memset(&H, 0, sizeof(H));
	H.struct_size = sizeof(H);
	H.abi_major = ACCEL_ABI_MAJOR;
	H.abi_minor = ACCEL_ABI_MINOR;
	H.accel_version = "bench";
	H.log = h_log;
	H.error = h_error;
	H.model = h_model;
	H.mem_alloc = h_mem_alloc;
	H.mem_free = h_mem_free;
	H.op_copy = h_op_copy;
	H.optim_state_count = h_state_count;
	H.optim_step = h_optim_step;
	H.optim_step_n = h_optim_step_n;
	return H;
}

/* ---- raw O_DIRECT ------------------------------------------------------------------ */

typedef struct raw_job {
	int fd;
	void *buf;
	uint64_t n, first, stride;
	int write, r;
} raw_job;

static void *raw_thread(void *arg)
{
	raw_job *j = arg;
	const size_t bs = 1 << 20;
	for (uint64_t i = j->first; i < j->n; i += j->stride) {
		ssize_t x = j->write ? pwrite(j->fd, j->buf, bs, (off_t)(i * bs))
		                     : pread(j->fd, j->buf, bs, (off_t)(i * bs));
		if (x != (ssize_t)bs) {
			fprintf(stderr, "bench-nvme-swap: raw %s: %s\n", j->write ? "write" : "read",
			        x < 0 ? strerror(errno) : "short");
			j->r = -1;
			return NULL;
		}
	}
	return NULL;
}

/* Sequential 1 MiB O_DIRECT writes of a new file then reads of it; with
 * qd > 1, qd threads take every qd-th block (qd requests in flight). */
static int raw_rw(const char *dir, uint64_t bytes, uint32_t qd, double *ret_w, double *ret_r)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/bench-nvme-swap-raw-%ld", dir, (long)getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
	if (fd < 0) {
		fprintf(stderr, "bench-nvme-swap: %s: %s (the raw measurement needs O_DIRECT)\n", path,
		        strerror(errno));
		return -1;
	}
	unlink(path);   /* gone whatever happens */
	const size_t bs = 1 << 20;
	uint64_t n = (bytes + bs - 1) / bs;
	raw_job j[64];
	pthread_t th[64];
	if (qd > 64)
		qd = 64;
	for (uint32_t t = 0; t < qd; t++) {
		j[t] = (raw_job){fd, NULL, n, t, qd, 1, 0};
		if (posix_memalign(&j[t].buf, 4096, bs))
			return -1;
		memset(j[t].buf, 0x5a, bs);
	}
	for (int w = 1; w >= 0; w--) {
		double t0 = now();
		for (uint32_t t = 0; t < qd; t++) {
			j[t].write = w;
			if (t && pthread_create(&th[t], NULL, raw_thread, &j[t]))
				return -1;
		}
		raw_thread(&j[0]);
		for (uint32_t t = 1; t < qd; t++)
			pthread_join(th[t], NULL);
		*(w ? ret_w : ret_r) = now() - t0;
		for (uint32_t t = 0; t < qd; t++)
			if (j[t].r)
				return -1;
	}
	close(fd);
	for (uint32_t t = 0; t < qd; t++)
		free(j[t].buf);
	return 0;
}

/* ---- the store --------------------------------------------------------------------- */

typedef struct run {
	double best;              /* fastest step (s)                  */
	double io_wait;           /* its time waiting for swap I/O     */
	uint64_t bytes;           /* swapped in + out in that step     */
	int direct;
} run;

static int store_steps(const accel_host_v1 *H, uint32_t place, const char *dir,
                       const zero_store_opts *base, float *work, float *grad, uint64_t n,
                       int steps, run *ret)
{
	zero_piece pc = {0};
	pc.param = 0;
	pc.grad_dtype = ACCEL_DTYPE_F32;
	pc.numel = n;
	pc.work = work;
	pc.grad = grad;
	zero_store_opts o = *base;
	o.place = place;
	o.nvme_path = dir;
	zero_store *st = NULL;
	B.err[0] = '\0';
	if (zero_store_new(H, NULL, &o, &pc, 1, &st)) {
		fprintf(stderr, "bench-nvme-swap: %s\n", B.err);
		return -1;
	}
	/* masters = the working weights */
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, work, n};
	if (zero_store_write(st, 0, 0, &v)) {
		fprintf(stderr, "bench-nvme-swap: %s\n", B.err);
		zero_store_free(st);
		return -1;
	}
	ret->best = 1e30;
	for (int s = 0; s <= steps; s++) {   /* step 0: warm-up, untimed */
		zero_store_stats a, b;
		zero_store_get_stats(st, &a);
		B.t = (uint64_t)s + 1;
		if (zero_store_step(st, 1.0, NULL)) {
			fprintf(stderr, "bench-nvme-swap: %s\n", B.err);
			zero_store_free(st);
			return -1;
		}
		zero_store_get_stats(st, &b);
		double t = b.step_seconds - a.step_seconds;
		if (s > 0 && t < ret->best) {
			ret->best = t;
			ret->io_wait = b.io_wait_seconds - a.io_wait_seconds;
			ret->bytes = (b.bytes_swapped_in - a.bytes_swapped_in) +
			             (b.bytes_swapped_out - a.bytes_swapped_out);
		}
	}
	zero_store_free(st);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: bench-nvme-swap [--dir D] [--params N] [--sub-group S] [--buffers B]\n"
	        "                       [--threads T] [--steps K] [--rounds R] [--block-size B]\n"
	        "                       [--queue-depth Q] [--thread-count C] [--no-cpu]\n"
	        "NVMe-offloaded AdamW step over N f32 parameters (default 100000000) with its\n"
	        "swap file under D (default /var/tmp), sub-groups of S elements (16777216),\n"
	        "B buffers (4), T optimizer threads (the CPUs), K timed steps (3) per round,\n"
	        "R rounds (2); aio block size, queue depth and thread count as in\n"
	        "zero_optimization.aio (1048576, 8, 1).  Next to raw O_DIRECT sequential\n"
	        "write and read of D; --no-cpu skips the in-memory step.  JSON lines on stdout.\n");
}

int main(int argc, char **argv)
{
	const char *dir = "/var/tmp";
	uint64_t n = 100000000, sg = UINT64_C(1) << 24;
	uint32_t buffers = 4, threads = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	int steps = 3, rounds = 2, cpu = 1;
	zero_aio_opts aio;
	zero_aio_opts_default(&aio);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-cpu")) {
			cpu = 0;
			continue;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			usage(stderr);
			return 2;
		}
		i++;
		if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--params"))
			n = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--sub-group"))
			sg = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--buffers"))
			buffers = (uint32_t)atoi(v);
		else if (!strcmp(a, "--threads"))
			threads = (uint32_t)atoi(v);
		else if (!strcmp(a, "--steps"))
			steps = atoi(v);
		else if (!strcmp(a, "--rounds"))
			rounds = atoi(v);
		else if (!strcmp(a, "--block-size"))
			aio.block_size = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--queue-depth"))
			aio.queue_depth = (uint32_t)atoi(v);
		else if (!strcmp(a, "--thread-count"))
			aio.thread_count = (uint32_t)atoi(v);
		else {
			usage(stderr);
			return 2;
		}
	}
	if (!n || !sg || buffers < 2 || !threads || steps < 1 || rounds < 1) {
		usage(stderr);
		return 2;
	}

	accel_err err = {0};
	accel_optim_opts oo;
	accelp_optim_opts_init(&oo, ACCEL_OPTIM_ADAMW);
	if (accelp_optim_new(&oo, &B.opt, &err) || accelp_optim_pool_new(&B.pool)) {
		fprintf(stderr, "bench-nvme-swap: %s\n", err.msg);
		return 1;
	}
	B.threads = threads;
	B.param.struct_size = sizeof(B.param);
	B.param.dtype = ACCEL_DTYPE_F32;
	B.param.name = "w";
	B.param.numel = n;
	B.param.requires_grad = 1;
	B.model.struct_size = sizeof(B.model);
	B.model.n_params = 1;
	B.model.params = &B.param;
	B.model.total_numel = n;
	B.model.param_info_size = sizeof(B.param);
	accel_host_v1 H = host_table();

	float *work = NULL, *grad = NULL;
	if (h_mem_alloc(NULL, 0, 0, 0, n * 4, 0, (void **)&work) ||
	    h_mem_alloc(NULL, 0, 0, 0, n * 4, 0, (void **)&grad)) {
		fprintf(stderr, "bench-nvme-swap: cannot allocate %.1f GiB\n", (double)n * 8 / (1 << 30));
		return 1;
	}
	uint64_t s = 12345;
	for (uint64_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		float x = (float)((double)(s >> 40) * 0x1p-24 - 0.5);
		work[i] = x;
		grad[i] = 0.01f * x;
	}

	zero_store_opts o;
	memset(&o, 0, sizeof(o));
	o.n_state = 2;
	o.device = ACCEL_DEVICE_CPU;
	o.sub_group_size = sg;
	o.n_threads = threads;
	o.buffer_count = buffers;
	o.nvme_key = "--dir";
	o.aio = aio;
	uint64_t sgn = sg < n ? sg : n;
	uint64_t swap_bytes = (n + sgn - 1) / sgn * ((3 * sgn * 4 + 4095) / 4096 * 4096);

	/* raw[0]: one request at a time (dd); raw[1]: queue_depth requests in
	 * flight, as the swap keeps them */
	double bw[2] = {1e30, 1e30}, br[2] = {1e30, 1e30};
	run nv = {1e30, 0, 0, 0}, cp = {1e30, 0, 0, 0};
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 2; k++) {
			double tw = 0, tr = 0;
			if (raw_rw(dir, swap_bytes, k ? aio.queue_depth * aio.thread_count : 1, &tw, &tr))
				return 1;
			bw[k] = tw < bw[k] ? tw : bw[k];
			br[k] = tr < br[k] ? tr : br[k];
		}
		run x;
		if (store_steps(&H, ZERO_PLACE_NVME, dir, &o, work, grad, n, steps, &x))
			return 1;
		if (x.best < nv.best)
			nv = x;
		if (cpu) {
			if (store_steps(&H, ZERO_PLACE_CPU, dir, &o, work, grad, n, steps, &x))
				return 1;
			if (x.best < cp.best)
				cp = x;
		}
	}

	char mach[256];
	machine(mach, sizeof(mach));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	const char *fs = fs_name(dir);
	uint64_t raw_bytes = (swap_bytes + (1 << 20) - 1) >> 20 << 20;
	double rwg[2];
	for (int k = 0; k < 2; k++) {
		uint32_t qd = k ? aio.queue_depth * aio.thread_count : 1;
		const char *impl = k ? "raw-odirect-qd" : "raw-odirect";
		double wg = (double)raw_bytes / bw[k] / 1e9, rg = (double)raw_bytes / br[k] / 1e9;
		rwg[k] = 2.0 * (double)raw_bytes / (bw[k] + br[k]) / 1e9;
		printf("{\"bench\":\"nvme-swap\",\"impl\":\"%s\",\"op\":\"write\",\"machine\":\"%s\","
		       "\"cpus\":%ld,\"dir\":\"%s\",\"fs\":\"%s\",\"bytes\":%llu,\"block\":1048576,"
		       "\"in_flight\":%u,\"time_s\":%.3f,\"GBps\":%.3f}\n",
		       impl, mach, cpus, dir, fs, (unsigned long long)raw_bytes, qd, bw[k], wg);
		printf("{\"bench\":\"nvme-swap\",\"impl\":\"%s\",\"op\":\"read\",\"machine\":\"%s\","
		       "\"cpus\":%ld,\"dir\":\"%s\",\"fs\":\"%s\",\"bytes\":%llu,\"block\":1048576,"
		       "\"in_flight\":%u,\"time_s\":%.3f,\"GBps\":%.3f}\n",
		       impl, mach, cpus, dir, fs, (unsigned long long)raw_bytes, qd, br[k], rg);
		printf("{\"bench\":\"nvme-swap\",\"impl\":\"%s\",\"op\":\"read+write\","
		       "\"machine\":\"%s\",\"cpus\":%ld,\"dir\":\"%s\",\"fs\":\"%s\",\"bytes\":%llu,"
		       "\"in_flight\":%u,\"time_s\":%.3f,\"GBps\":%.3f}\n",
		       impl, mach, cpus, dir, fs, 2 * (unsigned long long)raw_bytes, qd, bw[k] + br[k],
		       rwg[k]);
	}
	double sg_gbs = (double)nv.bytes / nv.best / 1e9;
	printf("{\"bench\":\"nvme-swap\",\"impl\":\"accel\",\"op\":\"step-nvme\",\"machine\":\"%s\","
	       "\"cpus\":%ld,\"dir\":\"%s\",\"fs\":\"%s\",\"params\":%llu,\"sub_group\":%llu,"
	       "\"buffers\":%u,\"threads\":%u,\"block_size\":%llu,\"queue_depth\":%u,"
	       "\"thread_count\":%u,\"bytes_swapped\":%llu,\"step_ms\":%.1f,\"io_wait_ms\":%.1f,"
	       "\"GBps\":%.3f}\n",
	       mach, cpus, dir, fs, (unsigned long long)n, (unsigned long long)sgn, buffers, threads,
	       (unsigned long long)aio.block_size, aio.queue_depth, aio.thread_count,
	       (unsigned long long)nv.bytes, nv.best * 1e3, nv.io_wait * 1e3, sg_gbs);
	if (cpu)
		printf("{\"bench\":\"nvme-swap\",\"impl\":\"accel\",\"op\":\"step-cpu\",\"machine\":\"%s\","
		       "\"cpus\":%ld,\"params\":%llu,\"sub_group\":%llu,\"threads\":%u,\"step_ms\":%.1f}\n",
		       mach, cpus, (unsigned long long)n, (unsigned long long)sgn, threads, cp.best * 1e3);
	printf("{\"bench\":\"nvme-swap\",\"impl\":\"accel\",\"op\":\"step-vs-raw\",\"machine\":\"%s\","
	       "\"dir\":\"%s\",\"fs\":\"%s\",\"peer\":\"raw O_DIRECT read+write, 1 MiB, 1 in "
	       "flight (dd)\",\"ratio\":%.3f}\n",
	       mach, dir, fs, sg_gbs / rwg[0]);
	printf("{\"bench\":\"nvme-swap\",\"impl\":\"accel\",\"op\":\"step-vs-raw-qd\",\"machine\":\"%s\","
	       "\"dir\":\"%s\",\"fs\":\"%s\",\"peer\":\"raw O_DIRECT read+write, 1 MiB, %u in "
	       "flight\",\"ratio\":%.3f}\n",
	       mach, dir, fs, aio.queue_depth * aio.thread_count, sg_gbs / rwg[1]);
	fflush(stdout);
	free(work);
	free(grad);
	accelp_optim_pool_free(B.pool);
	accelp_optim_free(B.opt);
	return 0;
}
