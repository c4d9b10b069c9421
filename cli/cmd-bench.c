/* SPDX-License-Identifier: MIT */
/* cli/cmd-bench.c: `accel bench`: benchmarks that run on the library itself.
 *
 * `accel bench comm` measures the selected comm backend the way nccl-tests
 * measures NCCL (method and formulas in cli/comm-bench.h), on user memory
 * or on memory from the backend's allocator, and prints on rank 0 a table
 * (a row per size as it is measured) followed by one JSON line per row;
 * --json or --table print only one of the two.  Run it on several ranks with
 * `accel launch -n N -- accel bench comm ...` (or under mpirun with backend
 * mpi).  bench/comm-peers.sh runs it next to OpenMPI and PyTorch gloo. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "comm-bench.h"
#include "cli.h"
#include "comm.h"
#include "ctx-impl.h"
#include "mem.h"
#include "probe.h"

#define MAX_SETS 64
/* The largest message size (1 TiB): far beyond any machine's buffers, far below
 * where the buffer size arithmetic could overflow. */
#define BENCH_MAX_BYTES (1ull << 40)

static const char *const bench_help =
	"Usage: accel bench COMMAND [OPTIONS]\n"
	"\n"
	"Commands:\n"
	"  comm      time collectives of the selected comm backend (like nccl-tests)\n"
	"\n"
	"'accel bench COMMAND --help' describes a command.\n";

static const char *const comm_help =
	"Usage: accel launch -n N -- accel bench comm [OPTIONS]\n"
	"\n"
	"Time all-reduce, reduce-scatter, all-gather and broadcast of the comm backend\n"
	"the configuration selects, for sizes doubling from --min-bytes to --max-bytes.\n"
	"Per size: --warmup untimed calls, then --iters timed calls; the reported time\n"
	"is the median call of the slowest rank.  algbw = bytes / time; busbw = algbw\n"
	"x 2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter, all-gather), 1 (broadcast),\n"
	"as nccl-tests reports them.  `bytes` is the larger buffer of the call.\n"
	"\n"
	"Options:\n"
	"  --op OP           allreduce|reduce_scatter|allgather|broadcast|all (default\n"
	"                    allreduce)\n"
	"  --dtype T         f32|f64|f16|bf16|i32|i64 (default f32; sum reduction)\n"
	"  --min-bytes B     smallest size (default 8; K, M, G suffixes are powers of 1024)\n"
	"  --max-bytes B     largest size (default 256M; at most 1024G)\n"
	"  --iters N         timed calls per size (default 20)\n"
	"  --warmup N        untimed calls per size first (default 5)\n"
	"  --buffers KIND    user: ordinary memory (default); backend: memory from the\n"
	"                    comm backend's allocator (shared memory for shm), which\n"
	"                    collectives use without staging copies\n"
	"  --device D        cpu (default) or cuda: buffers in GPU memory of this rank's\n"
	"                    device (the local rank), from the device backend's\n"
	"                    allocator (cudaMalloc in nccl); with --set backend=nccl\n"
	"  --inplace         send and receive in one buffer (default: two buffers)\n"
	"  --no-check        do not verify the results after timing\n"
	"  --json            only the JSON lines, one per size (for scripts)\n"
	"  --table           only the table\n"
	"                    (default: the table, a row per size as it is measured,\n"
	"                    then the same rows as JSON lines)\n"
	"  --config F        accel config file (default: as for any accel program)\n"
	"  --set KEY=VALUE   config override, repeatable (e.g. --set backend=shm)\n"
	"  -h, --help        this help\n"
	"\n"
	"Exit status: 0 when every call succeeded and every checked result was right;\n"
	"1 when a call failed or a result was wrong; 2 on bad usage, or when no size in\n"
	"the range holds a whole element per rank.\n";

typedef struct comm_opts {
	int op;             /* CB_OP_* or CB_OP_COUNT for all */
	uint32_t dtype;
	const char *dtype_name;
	uint64_t min_bytes, max_bytes;
	int iters, warmup;
	int backend_buffers, buffers_given;
	int cuda;           /* --device cuda */
	int inplace, check, json, table;
	const char *config;
	const char *sets[MAX_SETS + 1];
	int n_sets;
} comm_opts;

static int parse_int(const char *s, int min, int *ret)
{
	char *end = NULL;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < min || v > 100000000)
		return -1;
	*ret = (int)v;
	return 0;
}

static int parse_comm(int argc, char **argv, comm_opts *o)
{
	static const char *const sub = "bench comm";
	memset(o, 0, sizeof(*o));
	o->op = CB_OP_ALLREDUCE;
	o->dtype = ACCEL_DTYPE_F32;
	o->dtype_name = "f32";
	o->min_bytes = 8;
	o->max_bytes = 256ull << 20;
	o->iters = 20;
	o->warmup = 5;
	o->check = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(comm_help, stdout);
			return 1;
		}
		if (!strcmp(a, "--json")) {
			o->json = 1;
			continue;
		}
		if (!strcmp(a, "--table")) {
			o->table = 1;
			continue;
		}
		if (!strcmp(a, "--inplace")) {
			o->inplace = 1;
			continue;
		}
		if (!strcmp(a, "--no-check")) {
			o->check = 0;
			continue;
		}
		/* the rest take a value: --opt V or --opt=V */
		static const char *const valued[] = {"--op", "--dtype", "--min-bytes", "--max-bytes",
		                                     "--iters", "--warmup", "--buffers", "--config",
		                                     "--set", "--device"};
		const char *eq = strchr(a, '='), *v;
		char name[32];
		size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
		int known = 0;
		for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]) && !known; k++)
			known = strlen(valued[k]) == nlen && !strncmp(valued[k], a, nlen);
		if (!known)
			return accelp_cli_usage_error(sub, a[0] == '-' ? "unknown option '%.*s'"
			                                              : "unexpected argument '%.*s'",
			                              (int)nlen, a);
		snprintf(name, sizeof(name), "%.*s", (int)nlen, a);
		if (eq) {
			v = eq + 1;
		} else {
			if (i + 1 >= argc)
				return accelp_cli_usage_error(sub, "%s needs a value", a);
			v = argv[++i];
		}
		if (!strcmp(name, "--op")) {
			if ((o->op = cb_op_parse(v)) < 0)
				return accelp_cli_usage_error(sub, "unknown --op '%s' (allreduce, "
				                              "reduce_scatter, allgather, broadcast, all)", v);
		} else if (!strcmp(name, "--dtype")) {
			o->dtype = cb_dtype_parse(v);
			o->dtype_name = v;
			if (o->dtype == ACCEL_DTYPE_INVALID)
				return accelp_cli_usage_error(sub, "unknown --dtype '%s' (f32, f64, f16, "
				                              "bf16, i32, i64)", v);
		} else if (!strcmp(name, "--min-bytes")) {
			if (cb_parse_bytes(v, &o->min_bytes) || o->min_bytes == 0)
				return accelp_cli_usage_error(sub, "--min-bytes '%s' is not a size >= 1 "
				                              "(e.g. 8, 64K, 1M)", v);
		} else if (!strcmp(name, "--max-bytes")) {
			if (cb_parse_bytes(v, &o->max_bytes) || o->max_bytes == 0)
				return accelp_cli_usage_error(sub, "--max-bytes '%s' is not a size >= 1 "
				                              "(e.g. 64M, 1G)", v);
		} else if (!strcmp(name, "--iters")) {
			if (parse_int(v, 1, &o->iters))
				return accelp_cli_usage_error(sub, "--iters '%s' is not an integer from 1 to 100000000", v);
		} else if (!strcmp(name, "--warmup")) {
			if (parse_int(v, 0, &o->warmup))
				return accelp_cli_usage_error(sub, "--warmup '%s' is not an integer from 0 to 100000000", v);
		} else if (!strcmp(name, "--buffers")) {
			if (!strcmp(v, "user"))
				o->backend_buffers = 0;
			else if (!strcmp(v, "backend"))
				o->backend_buffers = 1;
			else
				return accelp_cli_usage_error(sub, "--buffers '%s' is not user or backend", v);
			o->buffers_given = 1;
		} else if (!strcmp(name, "--device")) {
			if (!strcmp(v, "cpu"))
				o->cuda = 0;
			else if (!strcmp(v, "cuda"))
				o->cuda = 1;
			else
				return accelp_cli_usage_error(sub, "--device '%s' is not cpu or cuda", v);
		} else if (!strcmp(name, "--config")) {
			o->config = v;
		} else if (!strcmp(name, "--set")) {
			if (!strchr(v, '=') || v[0] == '=')
				return accelp_cli_usage_error(sub, "--set '%s' is not KEY=VALUE", v);
			if (o->n_sets == MAX_SETS)
				return accelp_cli_usage_error(sub, "more than %d --set options", MAX_SETS);
			o->sets[o->n_sets++] = v;
		} else {
			return accelp_cli_usage_error(sub, "unknown option '%s'", name);
		}
	}
	if (o->json && o->table)
		return accelp_cli_usage_error(sub, "--json and --table exclude each other (without "
		                              "either, both are printed)");
	if (o->cuda && o->buffers_given)
		return accelp_cli_usage_error(sub, "--buffers is for --device cpu; with --device cuda "
		                              "the buffers come from the device backend's allocator");
	if (o->max_bytes > BENCH_MAX_BYTES || o->min_bytes > BENCH_MAX_BYTES)
		return accelp_cli_usage_error(sub, "--%s-bytes (%llu) is above the largest size, 1024G",
		                              o->max_bytes > BENCH_MAX_BYTES ? "max" : "min",
		                              (unsigned long long)(o->max_bytes > BENCH_MAX_BYTES
		                                                       ? o->max_bytes
		                                                       : o->min_bytes));
	if (o->max_bytes < o->min_bytes)
		return accelp_cli_usage_error(sub, "--max-bytes (%llu) is below --min-bytes (%llu)",
		                              (unsigned long long)o->max_bytes,
		                              (unsigned long long)o->min_bytes);
	return 0;
}

/* Where the buffers live: host memory, or GPU memory that the benchmark
 * fills and checks through a host copy (`stage`) with the CUDA runtime's
 * cudaMemcpy, looked up at run time (the CLI does not link CUDA). */
typedef struct bench_mem {
	int32_t device, device_index;
	accel_cli_memcpy_fn copy;   /* --device cuda */
	accel_cli_error_name_fn error_name;
	void *stage;                /* --device cuda: host copy of one buffer */
} bench_mem;

/* A buffer of `bytes` from the backend (ACCEL_MEMF_COMM memory) or malloc. */
typedef struct bench_buf {
	void *p;
	int from_backend;
} bench_buf;

static int buf_alloc(accel_ctx *ctx, const bench_mem *m, int backend, uint64_t bytes,
                     bench_buf *b)
{
	b->p = NULL;
	b->from_backend = 0;
	if (m->device != ACCEL_DEVICE_CPU) {
		/* the device backend's memory (nccl), or, for device buffers
		 * staged through a host backend, the device module's */
		int rc = accelp_mem_alloc(ctx, ACCEL_MEM_BUFFERS, m->device, m->device_index, bytes,
		                         ACCEL_MEMF_COMM, &b->p);
		if (rc == ACCEL_OK)
			b->from_backend = 2;
		return rc;
	}
	if (backend) {
		int rc = accelp_comm_mem_alloc(ctx->comm, m->device, m->device_index, bytes, &b->p);
		if (rc != ACCEL_OK)
			return rc;
		if (!b->p)
			return accel_set_error(ctx, ACCEL_ERR_UNSUPPORTED,
			                       "backend '%s' has no memory allocator, so "
			                       "--buffers backend is not available; use --buffers user",
			                       accelp_comm_backend_name(ctx->comm));
		b->from_backend = 1;
		return ACCEL_OK;
	}
	b->p = aligned_alloc(64, (bytes + 63) / 64 * 64);
	if (!b->p)
		return accel_set_error(ctx, ACCEL_ERR_NOMEM, "cannot allocate %llu bytes",
		                       (unsigned long long)bytes);
	return ACCEL_OK;
}

static void buf_free(accel_ctx *ctx, bench_buf *b)
{
	if (b->p && b->from_backend == 2)
		accelp_mem_release(ctx, b->p);
	else if (b->p && b->from_backend)
		accelp_comm_mem_free(ctx->comm, b->p);
	else
		free(b->p);
	b->p = NULL;
}

static accel_view cpu_view(uint32_t dtype, void *data, uint64_t numel)
{
	accel_view v = {sizeof(accel_view), dtype, ACCEL_DEVICE_CPU, 0, data, numel};
	return v;
}

static accel_view mem_view(const bench_mem *m, uint32_t dtype, void *data, uint64_t numel)
{
	accel_view v = {sizeof(accel_view), dtype, m->device, m->device_index, data, numel};
	return v;
}

/* Write the n elements cb_fill(op, ...) makes into dst (host or device). */
static int put_input(accel_ctx *ctx, const bench_mem *m, int op, uint32_t dt, void *dst,
                     uint64_t count, int rank, int world)
{
	if (!m->copy) {
		cb_fill(op, dt, dst, count, rank, world);
		return ACCEL_OK;
	}
	uint64_t n = op == CB_OP_REDUCE_SCATTER ? count * (uint64_t)world : count;
	cb_fill(op, dt, m->stage, count, rank, world);
	int e = m->copy(dst, m->stage, n * cb_dtype_size(dt), ACCEL_CLI_MEMCPY_DEFAULT);
	return e ? accel_set_error(ctx, ACCEL_ERR_CUDA, "cudaMemcpy to the GPU failed (%s)",
	                           m->error_name(e))
	         : ACCEL_OK;
}

/* The result at src as host memory (src itself, or the stage). */
static int get_output(accel_ctx *ctx, const bench_mem *m, int op, uint32_t dt, void *src,
                      uint64_t count, int world, void **ret)
{
	*ret = src;
	if (!m->copy)
		return ACCEL_OK;
	uint64_t n = op == CB_OP_ALLGATHER ? count * (uint64_t)world : count;
	int e = m->copy(m->stage, src, n * cb_dtype_size(dt), ACCEL_CLI_MEMCPY_DEFAULT);
	*ret = m->stage;
	return e ? accel_set_error(ctx, ACCEL_ERR_CUDA, "cudaMemcpy from the GPU failed (%s)",
	                           m->error_name(e))
	         : ACCEL_OK;
}

/* One blocking call of `op`. */
static int run_op(accel_ctx *ctx, const bench_mem *m, int op, uint32_t dt, void *send,
                  void *recv, uint64_t count, int inplace)
{
	accel_comm *c = ctx->comm;
	accel_req *req = NULL;
	uint64_t w = (uint64_t)ctx->world.world_size;
	int rc;
	switch (op) {
	case CB_OP_ALLREDUCE: {
		accel_view s = mem_view(m, dt, send, count),
		           r = mem_view(m, dt, inplace ? send : recv, count);
		rc = accelp_comm_allreduce(c, &s, &r, ACCEL_RED_SUM, &req);
		break;
	}
	case CB_OP_REDUCE_SCATTER: {
		accel_view s = mem_view(m, dt, send, count * w),
		           r = mem_view(m, dt, inplace ? send : recv, count);
		rc = accelp_comm_reduce_scatter(c, &s, &r, ACCEL_RED_SUM, &req);
		break;
	}
	case CB_OP_ALLGATHER: {
		accel_view s = mem_view(m, dt, inplace ? recv : send, count),
		           r = mem_view(m, dt, recv, count * w);
		rc = accelp_comm_allgather(c, &s, &r, &req);
		break;
	}
	default: {
		accel_view b = mem_view(m, dt, recv, count);
		rc = accelp_comm_broadcast(c, &b, 0, &req);
		break;
	}
	}
	if (rc == ACCEL_OK && req)
		rc = accelp_comm_wait(c, req);
	return rc;
}

/* Median and mean of this rank's calls -> the slowest rank's; the check
 * result -> the worst rank's. */
static int agree(accel_ctx *ctx, double *med_mean, int32_t *checked)
{
	double t[2] = {med_mean[0], med_mean[1]};
	int32_t ck = *checked;
	accel_view vt = cpu_view(ACCEL_DTYPE_F64, t, 2), vc = cpu_view(ACCEL_DTYPE_I32, &ck, 1);
	accel_req *req = NULL;
	int rc = accelp_comm_allreduce(ctx->comm, &vt, &vt, ACCEL_RED_MAX, &req);
	if (rc == ACCEL_OK && req)
		rc = accelp_comm_wait(ctx->comm, req);
	req = NULL;
	if (rc == ACCEL_OK)
		rc = accelp_comm_allreduce(ctx->comm, &vc, &vc, ACCEL_RED_MIN, &req);
	if (rc == ACCEL_OK && req)
		rc = accelp_comm_wait(ctx->comm, req);
	if (rc == ACCEL_OK) {
		med_mean[0] = t[0];
		med_mean[1] = t[1];
		*checked = ck;
	}
	return rc;
}

/* --device cuda: the runtime's copies, this rank's GPU, and a host stage of
 * cap bytes for the device buffers' contents. */
static int cuda_setup(accel_ctx *ctx, bench_mem *mem, uint64_t cap)
{
	char why[256];
	mem->device = ACCEL_DEVICE_CUDA;
	accel_cli_cudart rt;
	if (accelp_cli_cudart_open(&rt, why, sizeof(why)))
		return accel_set_error(ctx, ACCEL_ERR_UNSUPPORTED, "--device cuda needs the CUDA "
		                       "runtime library (libcudart): %s", why);
	mem->copy = rt.memcpy;
	mem->error_name = rt.error_name;
	/* this rank's GPU for the copies too (else every rank would make a
	 * context on GPU 0) */
	int e = rt.set_device(mem->device_index);
	if (e) {
		const char *name = rt.error_name(e);
		return accel_set_error(ctx, ACCEL_ERR_CUDA, "cudaSetDevice(%d) failed (%s): is there "
		                       "a GPU for local rank %d? (nvidia-smi)", mem->device_index,
		                       name ? name : "?", mem->device_index);
	}
	if (!(mem->stage = calloc(1, cap)))
		return accel_set_error(ctx, ACCEL_ERR_NOMEM, "cannot allocate %llu bytes",
		                       (unsigned long long)cap);
	return ACCEL_OK;
}

/* One op at one size: warm-up, o->iters timed calls, the check; the
 * slowest rank's median and mean (us) into mm, the worst rank's check
 * result into *checked. */
static int measure(accel_ctx *ctx, bench_mem *mem, const comm_opts *o, int op, uint64_t count,
                   uint64_t bytes, bench_buf *send, bench_buf *recv, double *times, double mm[2],
                   int32_t *checked)
{
	int rank = accel_rank(ctx), world = accel_world_size(ctx), rc;
	if ((rc = put_input(ctx, mem, op, o->dtype, send->p, count, rank, world)))
		return rc;
	if ((op == CB_OP_BROADCAST || (op == CB_OP_ALLGATHER && o->inplace)) &&
	    (rc = put_input(ctx, mem, CB_OP_ALLREDUCE, o->dtype, recv->p, count, rank, world)))
		return rc;
	for (int k = 0; k < o->warmup; k++)
		if ((rc = run_op(ctx, mem, op, o->dtype, send->p, recv->p, count, o->inplace)))
			return rc;
	double sum = 0.0;
	for (int k = 0; k < o->iters; k++) {
		double t0 = cb_now_s();
		if ((rc = run_op(ctx, mem, op, o->dtype, send->p, recv->p, count, o->inplace)))
			return rc;
		times[k] = (cb_now_s() - t0) * 1e6;
		sum += times[k];
	}
	mm[0] = cb_median(times, o->iters);
	mm[1] = sum / o->iters;
	*checked = 0;
	if (o->check) {
		uint64_t bad = 0;
		void *res = recv->p;
		if (o->inplace && op != CB_OP_BROADCAST) {
			/* the timed calls worked on the last result again: one more
			 * call from the input, checked (the result is where the input
			 * was: send, or recv for the all-gather, whose input is
			 * recv's first block) */
			void *in = op == CB_OP_ALLGATHER ? recv->p : send->p;
			if ((rc = put_input(ctx, mem, op, o->dtype, in, count, rank, world)) ||
			    (rc = run_op(ctx, mem, op, o->dtype, send->p, recv->p, count, 1)))
				return rc;
			res = in;
		}
		if ((rc = get_output(ctx, mem, op, o->dtype, res, count, world, &res)))
			return rc;
		*checked = cb_check(op, o->dtype, res, count, rank, world, &bad);
		if (*checked < 0)
			fprintf(stderr, "accel bench comm: rank %d: %s of %llu bytes: element %llu is "
			        "wrong\n", rank, cb_op_names[op], (unsigned long long)bytes,
			        (unsigned long long)bad);
	}
	return agree(ctx, mm, checked);
}

static int bench_comm(int argc, char **argv)
{
	comm_opts o;
	accel_ctx *ctx = NULL;
	bench_buf send = {0}, recv = {0};
	bench_mem mem = {.device = ACCEL_DEVICE_CPU};
	double *times = NULL;
	FILE *jlines = NULL;   /* rank 0, default output: the JSON lines, printed last */
	char *jtext = NULL;
	size_t jlen = 0;
	char host[256] = "";
	int rc = parse_comm(argc, argv, &o), status = 1;
	if (rc)
		return rc == 1 ? 0 : rc;

	accel_opts ao = {.struct_size = sizeof(ao), .config_path = o.config,
	                 .sets = o.n_sets ? o.sets : NULL};
	rc = accel_ctx_new(&ao, &ctx);
	if (rc != ACCEL_OK) {
		fprintf(stderr, "accel bench comm: %s\n",
		        ctx && *accel_errmsg(ctx) ? accel_errmsg(ctx) : accel_status_str(rc));
		goto out;
	}
	int rank = accel_rank(ctx), world = accel_world_size(ctx);
	const char *backend = accelp_comm_backend_name(ctx->comm);
	const char *buffers = o.backend_buffers ? "backend" : "user";
	gethostname(host, sizeof(host) - 1);
	size_t es = cb_dtype_size(o.dtype);
	uint64_t cap = o.max_bytes + (uint64_t)world * es;
	if (o.cuda) {
		mem.device_index = ctx->world.local_rank;
		o.backend_buffers = 1;
		buffers = "device";
		if ((rc = cuda_setup(ctx, &mem, cap)))
			goto fail;
	}
	if ((rc = buf_alloc(ctx, &mem, o.backend_buffers, cap, &send)) ||
	    (rc = buf_alloc(ctx, &mem, o.backend_buffers, cap, &recv)))
		goto fail;
	if (o.cuda) {
		int e = mem.copy(recv.p, mem.stage, cap, ACCEL_CLI_MEMCPY_DEFAULT);
		if (e) {
			rc = accel_set_error(ctx, ACCEL_ERR_CUDA, "cudaMemcpy to the GPU failed (%s)",
			                     mem.error_name(e));
			goto fail;
		}
		/* the stage is the device buffers' host copy from here on */
	} else {
		memset(recv.p, 0, cap);
	}
	times = malloc(sizeof(double) * (size_t)o.iters);
	if (!times) {
		rc = accel_set_error(ctx, ACCEL_ERR_NOMEM, "out of memory for the timing samples");
		goto fail;
	}
	char dev_backend[96];
	if (o.cuda) {
		/* the backend the device buffers go through: nccl, or the host
		 * backend they are staged through */
		int staged;
		const char *name = accelp_comm_device_backend_name(ctx->comm, &staged);
		snprintf(dev_backend, sizeof(dev_backend), "%s%s", name,
		         staged ? " (staged through pinned host memory)" : "");
		backend = dev_backend;
	}
	if (rank == 0 && !o.json)
		cb_table_header(stdout, backend, buffers, world, host, o.inplace);
	if (rank == 0 && !o.json && !o.table && !(jlines = open_memstream(&jtext, &jlen))) {
		rc = accel_set_error(ctx, ACCEL_ERR_NOMEM, "out of memory for the JSON lines");
		goto fail;
	}

	int first = o.op == CB_OP_COUNT ? 0 : o.op, last = o.op == CB_OP_COUNT ? CB_OP_COUNT - 1 : o.op;
	int wrong = 0, rows = 0;
	for (int op = first; op <= last; op++) {
		for (uint64_t b = o.min_bytes; b <= o.max_bytes; b = b > UINT64_MAX / 2 ? UINT64_MAX : b * 2) {
			uint64_t count, bytes;
			if (!cb_counts(op, b, es, world, &count, &bytes))
				continue;
			double mm[2];
			int32_t checked = 0;
			if ((rc = measure(ctx, &mem, &o, op, count, bytes, &send, &recv, times, mm,
			                  &checked)))
				goto fail;
			if (checked < 0)
				wrong = 1;
			cb_row row = {cb_op_names[op], o.dtype_name, bytes, count, mm[0], mm[1], world,
			              backend, buffers, host, o.iters, checked, o.inplace};
			rows++;
			if (rank == 0) {
				if (o.json)
					cb_json(stdout, &row, op);
				else
					cb_table_row(stdout, &row, op);
				if (jlines)
					cb_json(jlines, &row, op);
			}
			if (b == UINT64_MAX)
				break;
		}
	}
	if (!rows) {
		/* every size was below one element per rank (or not a whole number
		 * of elements): nothing was measured */
		if (rank == 0)
			fprintf(stderr, "accel bench comm: no size from %llu to %llu bytes fits %s of "
			        "%s on %d ranks (each rank needs at least one whole element); raise "
			        "--max-bytes\n", (unsigned long long)o.min_bytes,
			        (unsigned long long)o.max_bytes,
			        o.op == CB_OP_COUNT ? "the ops" : cb_op_names[o.op], o.dtype_name, world);
		status = 2;
		goto out;
	}
	status = wrong ? 1 : 0;
	goto out;
fail:
	fprintf(stderr, "accel bench comm: %s\n",
	        *accel_errmsg(ctx) ? accel_errmsg(ctx) : accel_status_str(rc));
	status = 1;
out:
	if (jlines) {
		/* the rows measured, also after a failure */
		fclose(jlines);
		if (jlen) {
			fputs("\n", stdout);
			fputs(jtext, stdout);
			fflush(stdout);
		}
	}
	free(jtext);
	free(times);
	free(mem.stage);
	if (ctx) {
		buf_free(ctx, &send);
		buf_free(ctx, &recv);
	}
	accel_ctx_free(ctx);
	return status;
}

int accelp_cli_bench(int argc, char **argv)
{
	if (argc < 2)
		return accelp_cli_usage_error("bench", "which benchmark? (comm)");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fputs(bench_help, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "comm"))
		return bench_comm(argc - 1, argv + 1);
	return accelp_cli_usage_error("bench", "unknown benchmark '%s' (comm)", argv[1]);
}
