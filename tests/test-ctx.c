/* SPDX-License-Identifier: MIT */
/* tests/test-ctx.c: context creation, selection errors, the host table's
 * memory accounting and CPU ops, and world-1 collectives. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel-build-config.h"
#include "accel/accel.h"
#include "comm.h"
#include "ctx-impl.h"
#include "device.h"
#include "free-port.h"
#include "mem.h"
#include "ops.h"

static accel_ctx *ctx_json(const char *json, int expect)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&o, &ctx);
	ck_assert_msg(r == expect, "accel_ctx_new: %s (%s), expected %s", accel_status_str(r),
	              ctx ? accel_errmsg(ctx) : "", accel_status_str(expect));
	ck_assert_ptr_nonnull(ctx);
	return ctx;
}

START_TEST(default_context)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	ck_assert_int_eq(accel_rank(ctx), 0);
	ck_assert_int_eq(accel_world_size(ctx), 1);
	ck_assert_int_eq(accel_is_main(ctx), 1);
	const char *s;
	ck_assert_int_eq(accel_config_string(ctx, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "ddp");
	ck_assert_str_eq(accel_errmsg(ctx), "");
	ck_assert_int_eq(accel_wait_for_everyone(ctx), ACCEL_OK);
	ck_assert_ptr_null(accel_ctx_free(ctx));
	ck_assert_ptr_null(accel_ctx_free(NULL));
}
END_TEST

START_TEST(unknown_strategy)
{
	accel_ctx *ctx = ctx_json("{\"strategy\": \"ddq\"}", ACCEL_ERR_NOT_FOUND);
	ck_assert_msg(strstr(accel_errmsg(ctx), "ddq") != NULL, "%s", accel_errmsg(ctx));
	ck_assert_msg(strstr(accel_errmsg(ctx), "ddp") != NULL, "no suggestion: %s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

/* One rank of a two-process job started by hand (no launcher): creates
 * its context from `json` and writes "<status> <seconds> <message>". */
static pid_t start_rank(int rank, int port, const char *json, int *ret_fd)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		char v[32];
		snprintf(v, sizeof(v), "%d", rank);
		setenv("ACCEL_RANK", v, 1);
		setenv("ACCEL_LOCAL_RANK", v, 1);
		setenv("ACCEL_WORLD_SIZE", "2", 1);
		setenv("ACCEL_LOCAL_WORLD_SIZE", "2", 1);
		setenv("ACCEL_MASTER_ADDR", "127.0.0.1", 1);
		snprintf(v, sizeof(v), "%d", port);
		setenv("ACCEL_MASTER_PORT", v, 1);
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
		accel_ctx *ctx = NULL;
		int r = accel_ctx_new(&o, &ctx);
		clock_gettime(CLOCK_MONOTONIC, &b);
		dprintf(p[1], "%d %.3f %s", r,
		        (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9,
		        accel_errmsg(ctx));
		accel_ctx_free(ctx);
		_exit(0);
	}
	close(p[1]);
	*ret_fd = p[0];
	return pid;
}

/* A plugin missing on one rank only (a node without it): the others hear
 * why at once through the store, not after comm.timeout_s. */
START_TEST(plugin_missing_on_one_rank)
{
	int port = free_port(), fd0, fd1;
	pid_t p0 = start_rank(0, port, "{\"comm\": {\"timeout_s\": 30}}", &fd0);
	pid_t p1 = start_rank(1, port, "{\"comm\": {\"timeout_s\": 30}, \"plugins\": [\"nosuch\"]}",
	                      &fd1);
	char out[2][4096];
	int fds[2] = {fd0, fd1};
	for (int k = 0; k < 2; k++) {
		size_t len = 0;
		ssize_t n;
		while (len + 1 < sizeof(out[k]) &&
		       (n = read(fds[k], out[k] + len, sizeof(out[k]) - 1 - len)) > 0)
			len += (size_t)n;
		out[k][len] = '\0';
		close(fds[k]);
	}
	waitpid(p0, NULL, 0);
	waitpid(p1, NULL, 0);
	int st;
	double took;
	ck_assert_msg(sscanf(out[1], "%d %lf", &st, &took) == 2, "rank 1: %s", out[1]);
	ck_assert_msg(st == ACCEL_ERR_NOT_FOUND && strstr(out[1], "no plugin named 'nosuch'"),
	              "rank 1: %s", out[1]);
	ck_assert_msg(sscanf(out[0], "%d %lf", &st, &took) == 2, "rank 0: %s", out[0]);
	ck_assert_msg(st != ACCEL_OK && strstr(out[0], "rank 1 failed: no plugin named 'nosuch'"),
	              "rank 0: %s", out[0]);
	ck_assert_msg(took < 10.0, "rank 0 heard after %.1f s: %s", took, out[0]);
}
END_TEST

START_TEST(unknown_key)
{
	accel_ctx *ctx = ctx_json("{\"gradient_acumulation_steps\": 2}", ACCEL_ERR_CONFIG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "gradient_accumulation_steps") != NULL, "%s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(world1_collectives)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	float a[5] = {1, 2, 3, 4, 5}, b[5];
	ck_assert_int_eq(accel_allreduce(ctx, a, b, 5, ACCEL_DTYPE_F32, ACCEL_RED_SUM), ACCEL_OK);
	for (int i = 0; i < 5; i++)
		ck_assert_float_eq(b[i], a[i]);
	ck_assert_int_eq(accel_allreduce(ctx, a, a, 5, ACCEL_DTYPE_F32, ACCEL_RED_AVG), ACCEL_OK);
	ck_assert_float_eq(a[4], 5.0f);
	int64_t g[3];
	int64_t one = 7;
	ck_assert_int_eq(accel_allgather(ctx, &one, g, 1, ACCEL_DTYPE_I64), ACCEL_OK);
	ck_assert_int_eq(g[0], 7);
	ck_assert_int_eq(accel_broadcast(ctx, a, 5, ACCEL_DTYPE_F32, 0), ACCEL_OK);
	/* root out of range is an error, not a crash */
	ck_assert_int_ne(accel_broadcast(ctx, a, 5, ACCEL_DTYPE_F32, 3), ACCEL_OK);
	ck_assert_str_ne(accel_errmsg(ctx), "");
	accel_ctx_free(ctx);
}
END_TEST

/* The device backend is brought up by the first collective on a cuda
 * buffer.  When that fails (here: a GPU that does not exist, or no nccl
 * module at all), later calls repeat the first reason instead of retrying:
 * the bootstrap is collective and the ranks would no longer agree on it. */
START_TEST(failed_device_backend_is_not_retried)
{
#if !ACCEL_HAVE_NCCL
	/* this build has no nccl module: selecting it is refused up front,
	 * naming the backend and where it was looked for */
	accel_ctx *nctx = ctx_json("{\"backend\": \"nccl\"}", ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(accel_errmsg(nctx), "no comm backend named 'nccl'"));
	accel_ctx_free(nctx);
	return;
#endif
	accel_ctx *ctx = ctx_json("{\"backend\": \"nccl\"}", ACCEL_OK);
	float x[4] = {0};
	accel_view v = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 99, x, 4};
	accel_req *req = NULL;
	int r1 = accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req);
	ck_assert_int_ne(r1, ACCEL_OK);
	char first[512];
	snprintf(first, sizeof(first), "%s", accel_errmsg(ctx));
	ck_assert_str_ne(first, "");
	accelp_err_clear(&ctx->err);
	int r2 = accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req);
	ck_assert_int_eq(r2, r1);
	const char *again = accel_errmsg(ctx);
	ck_assert_msg(strstr(again, "failed to start earlier and is not retried") &&
	              strstr(again, first),
	              "second call: %s (first: %s)", again, first);
	/* host buffers still work */
	accelp_err_clear(&ctx->err);
	float a[2] = {1, 2}, b[2];
	ck_assert_int_eq(accel_allreduce(ctx, a, b, 2, ACCEL_DTYPE_F32, ACCEL_RED_SUM), ACCEL_OK);
	accel_ctx_free(ctx);
}
END_TEST

/* backend auto takes mpi only when an MPI launcher (or srun) started the
 * process: MPI variables inherited from an outer environment (a shell in
 * `srun --pty`, then `accel launch`) do not make it pick mpi. */
START_TEST(auto_backend_ignores_inherited_mpi_variables)
{
	setenv("PMIX_RANK", "0", 1);
	setenv("ACCEL_RANK", "0", 1);
	setenv("ACCEL_WORLD_SIZE", "1", 1);
	accel_ctx *ctx = ctx_json("{\"backend\": \"auto\"}", ACCEL_OK);
	ck_assert_str_eq(ctx->launcher, "accel launch");
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "shm");
	accel_ctx_free(ctx);
	unsetenv("PMIX_RANK");
	unsetenv("ACCEL_RANK");
	unsetenv("ACCEL_WORLD_SIZE");
}
END_TEST

/* Under backend nccl, host buffers still go to shm (or mpi): their config
 * sections are in use, not "set for a backend that is not selected". */
START_TEST(cpu_backend_sections_under_nccl)
{
#if !ACCEL_HAVE_NCCL
	/* no nccl module in this build: the selection fails first, on the
	 * backend, not on the shm section */
	accel_ctx *nctx = ctx_json("{\"backend\": \"nccl\", \"shm\": {\"small_kb\": 32}}",
	                           ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(accel_errmsg(nctx), "no comm backend named 'nccl'"));
	accel_ctx_free(nctx);
	return;
#endif
	accel_ctx *ctx = ctx_json("{\"backend\": \"nccl\", \"shm\": {\"small_kb\": 32}}",
	                          ACCEL_OK);
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "shm");
	accel_ctx_free(ctx);
}
END_TEST

/* A request is released by its wait: waiting (or testing) it again is an
 * error that says so, not a use of freed memory; requests never waited for
 * are released with the context (the sanitizer build checks for leaks). */
START_TEST(request_waited_twice)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	float a[4] = {1, 2, 3, 4};
	accel_view v = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, a, 4};
	accel_req *req = NULL;
	ck_assert_int_eq(accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req), ACCEL_OK);
	int32_t done = 0;
	ck_assert_int_eq(accelp_comm_test(ctx->comm, req, &done), ACCEL_OK);
	ck_assert_int_eq(accelp_comm_wait(ctx->comm, req), ACCEL_OK);
	ck_assert_int_eq(accelp_comm_wait(ctx->comm, req), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "is not a collective in flight"), "%s",
	              accel_errmsg(ctx));
	accelp_err_clear(&ctx->err);
	ck_assert_int_eq(accelp_comm_test(ctx->comm, req, &done), ACCEL_ERR_INVALID_ARG);
	accelp_err_clear(&ctx->err);
	/* issued, never waited */
	ck_assert_int_eq(accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req), ACCEL_OK);
	ck_assert_int_eq(accelp_comm_barrier(ctx->comm, &req), ACCEL_OK);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(mem_accounting)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	void *p, *q;
	ck_assert_int_eq(accelp_mem_alloc(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CPU, 0, 1000,
	                                 ACCEL_MEMF_ZERO, &p), ACCEL_OK);
	ck_assert_int_eq((uintptr_t)p % 64, 0);
	ck_assert_int_eq(((unsigned char *)p)[999], 0);
	ck_assert_int_eq(accelp_mem_alloc(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CPU, 0, 24,
	                                 ACCEL_MEMF_COMM, &q), ACCEL_OK);
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CPU), 1024);
	accelp_mem_release(ctx, p);
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CPU), 24);
	ck_assert_uint_eq(accelp_mem_peak(ctx, ACCEL_MEM_GRADS, ACCEL_DEVICE_CPU), 1024);
	ck_assert_int_eq(accelp_mem_alloc(ctx, 99, ACCEL_DEVICE_CPU, 0, 8, 0, &p),
	                 ACCEL_ERR_INVALID_ARG);
	accel_ctx_free(ctx); /* frees q */
}
END_TEST

/* accel_memory_stats: host->mem_alloc of a plugin (the strategy's host
 * handle) per category and for all, current and peak; bad arguments. */
START_TEST(memory_stats)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	const accel_host_v1 *H = accelp_host_table();
	accel_host *h = &ctx->active[0].host;
	uint64_t cur = 1, peak = 1, base_cur = 0, base_peak = 0;
	/* what the core and ddp hold before (nothing is expected, but the
	 * test does not depend on it) */
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_ALL, ACCEL_DEVICE_CPU, 0, &base_cur,
	                                    &base_peak), ACCEL_OK);
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU, 0, &cur,
	                                    &peak), ACCEL_OK);
	ck_assert_uint_eq(cur, 0);
	ck_assert_uint_eq(peak, 0);
	void *a = NULL, *b = NULL, *c = NULL;
	ck_assert_int_eq(H->mem_alloc(h, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU, 0, 4000, 0, &a),
	                 ACCEL_OK);
	ck_assert_int_eq(H->mem_alloc(h, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU, 0, 1000,
	                              ACCEL_MEMF_ZERO, &b), ACCEL_OK);
	ck_assert_int_eq(H->mem_alloc(h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, 300, 0, &c),
	                 ACCEL_OK);
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU, 0, &cur,
	                                    &peak), ACCEL_OK);
	ck_assert_uint_eq(cur, 5000);
	ck_assert_uint_eq(peak, 5000);
	H->mem_free(h, a);
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU, 0, &cur,
	                                    &peak), ACCEL_OK);
	ck_assert_uint_eq(cur, 1000);
	ck_assert_uint_eq(peak, 5000);
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0, &cur, NULL),
	                 ACCEL_OK);
	ck_assert_uint_eq(cur, 300);
	/* all categories: the sum now, and the peak of the sum */
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_ALL, ACCEL_DEVICE_CPU, 0, &cur, &peak),
	                 ACCEL_OK);
	ck_assert_uint_eq(cur, base_cur + 1300);
	ck_assert_uint_eq(peak, (base_peak > base_cur + 5300 ? base_peak : base_cur + 5300));
	/* a CUDA device nothing was allocated on */
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_ALL, ACCEL_DEVICE_CUDA, 3, &cur, &peak),
	                 ACCEL_OK);
	ck_assert_uint_eq(cur, 0);
	ck_assert_uint_eq(peak, 0);
	/* the internal per-kind counters agree */
	ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU), 1000);
	ck_assert_uint_eq(accelp_mem_peak(ctx, ACCEL_MEM_OPTIMIZER, ACCEL_DEVICE_CPU), 5000);
	H->mem_free(h, b);
	H->mem_free(h, c);
	ck_assert_int_eq(accel_memory_stats(ctx, ACCEL_MEM_ALL, ACCEL_DEVICE_CPU, 0, &cur, &peak),
	                 ACCEL_OK);
	ck_assert_uint_eq(cur, base_cur);

	static const struct {
		uint32_t category;
		int32_t device, index;
		int null_out;
		const char *msg;
	} bad[] = {
		{ACCEL_MEM_CATEGORY_COUNT, ACCEL_DEVICE_CPU, 0, 0,
		 "accel_memory_stats: unknown category 6 (ACCEL_MEM_PARAMS .. ACCEL_MEM_OFFLOAD"},
		{ACCEL_MEM_PARAMS, 7, 0, 0,
		 "accel_memory_stats: unknown device 7 (ACCEL_DEVICE_CPU or ACCEL_DEVICE_CUDA)"},
		{ACCEL_MEM_PARAMS, ACCEL_DEVICE_CPU, 1, 0,
		 "accel_memory_stats: device index 1 for the CPU (host memory is index 0)"},
		{ACCEL_MEM_PARAMS, ACCEL_DEVICE_CUDA, -1, 0,
		 "accel_memory_stats: device index -1 for a CUDA device"},
		{ACCEL_MEM_PARAMS, ACCEL_DEVICE_CPU, 0, 1,
		 "accel_memory_stats: ret_current and ret_peak are both NULL"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cur = peak = 77;
		int r = accel_memory_stats(ctx, bad[i].category, bad[i].device, bad[i].index,
		                           bad[i].null_out ? NULL : &cur,
		                           bad[i].null_out ? NULL : &peak);
		ck_assert_int_eq(r, ACCEL_ERR_INVALID_ARG);
		ck_assert_msg(strstr(accel_errmsg(ctx), bad[i].msg), "row %zu: %s", i,
		              accel_errmsg(ctx));
		ck_assert_uint_eq(cur, 77);  /* outputs untouched on failure */
		accel_clear_error(ctx);
	}
	ck_assert_int_eq(accel_memory_stats(NULL, ACCEL_MEM_ALL, ACCEL_DEVICE_CPU, 0, &cur, &peak),
	                 ACCEL_ERR_INVALID_ARG);
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(cpu_ops)
{
	accel_err e = {0};
	float x[6] = {1, -2, 3, -4, 5, INFINITY};
	uint16_t h[6];
	accel_view vx = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, x, 5};
	accel_view vh = {sizeof(accel_view), ACCEL_DTYPE_BF16, ACCEL_DEVICE_CPU, 0, h, 5};
	double s;
	ck_assert_int_eq(accelp_ops_sumsq(&vx, &s, &e), ACCEL_OK);
	ck_assert_double_eq(s, 55.0);
	ck_assert_int_eq(accelp_ops_copy(&vh, &vx, &e), ACCEL_OK);
	ck_assert_uint_eq(h[2], 0x4040); /* 3.0 in bf16 */
	ck_assert_int_eq(accelp_ops_axpy(&vx, 2.0, &vh, &e), ACCEL_OK);
	ck_assert_float_eq(x[3], -12.0f);
	ck_assert_int_eq(accelp_ops_scale(&vx, 0.5, &e), ACCEL_OK);
	ck_assert_float_eq(x[0], 1.5f);
	uint64_t nf;
	vx.numel = 6;
	ck_assert_int_eq(accelp_ops_nonfinite(&vx, &nf, &e), ACCEL_OK);
	ck_assert_uint_eq(nf, 1);
	ck_assert_int_eq(accelp_ops_fill(&vx, 0.0, &e), ACCEL_OK);
	ck_assert_float_eq(x[5], 0.0f);
	accel_view bad = vx;
	bad.device = ACCEL_DEVICE_CUDA;
	/* no CUDA build, module or GPU: unsupported; with a GPU, the module
	 * refuses the host pointer */
	int fr = accelp_ops_fill(&bad, 1.0, &e);
	ck_assert_msg(fr == ACCEL_ERR_UNSUPPORTED || fr == ACCEL_ERR_INVALID_ARG, "%d: %s", fr, e.msg);
	ck_assert_ptr_nonnull(strstr(e.msg, "device"));
	accel_view mism = vh;
	mism.numel = 3;
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_ops_copy(&mism, &vx, &e), ACCEL_ERR_INVALID_ARG);
}
END_TEST

/* The stream model on a context without a device (docs/streams.md): the
 * only stream is NULL, setting another says there is no device (and why),
 * asynchronous copies of host memory are plain copies, device views and
 * pinned memory are refused with the same reasons, waiting for the stream
 * is a no-op, and the host table's minor-4 members behave as their host
 * counterparts (wait_stream of a host collective is a host wait). */
/* Host waits on stream work (ABI 1.6) for a context whose stream is NULL
 * before any device module was loaded: stream_sync returns at once, an
 * event is complete when recorded; NULL arguments are refused. */
START_TEST(events_without_a_device)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	const accel_host_v1 *H = accelp_host_table();
	accel_host *h = &ctx->active[0].host;
	uint32_t n = 0;
	ck_assert(ACCEL_HOST_HAS(H, stream_sync) && ACCEL_HOST_HAS(H, event_free));
	if (accelp_device_module_path(ACCEL_DEVICE_CUDA, &n)) {
		/* another test of this process loaded the module (forked: not expected) */
		accel_ctx_free(ctx);
		return;
	}
	ck_assert_int_eq(H->stream_sync(h), ACCEL_OK);
	void *ev = NULL, *ev2 = NULL;
	ck_assert_int_eq(H->event_record(h, &ev), ACCEL_OK);
	ck_assert_ptr_nonnull(ev);
	ck_assert_int_eq(H->event_record(h, &ev2), ACCEL_OK);
	ck_assert_ptr_ne(ev, ev2);   /* each owned on its own */
	int32_t done = 0;
	ck_assert_int_eq(H->event_query(h, ev, &done), ACCEL_OK);
	ck_assert_int_eq(done, 1);
	ck_assert_int_eq(H->event_sync(h, ev), ACCEL_OK);
	H->event_free(h, ev);
	H->event_free(h, NULL);
	static const struct {
		int which;
		const char *msg;
	} bad[] = {
		{0, "event_record: ret_event is NULL"},
		{1, "event_sync: event is NULL"},
		{2, "event_query: event is NULL"},
		{3, "event_query: ret_done is NULL"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = bad[i].which == 0   ? H->event_record(h, NULL)
		        : bad[i].which == 1 ? H->event_sync(h, NULL)
		        : bad[i].which == 2 ? H->event_query(h, NULL, &done)
		                            : H->event_query(h, ev2, NULL);
		ck_assert_int_eq(r, ACCEL_ERR_INVALID_ARG);
		ck_assert_msg(strstr(accel_errmsg(ctx), bad[i].msg), "row %zu: %s", i,
		              accel_errmsg(ctx));
		accel_clear_error(ctx);
	}
	H->event_free(h, ev2);
	/* still nothing loaded: none of this needed a device */
	ck_assert_ptr_null(accelp_device_module_path(ACCEL_DEVICE_CUDA, &n));
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(streams_without_a_device)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	const accel_device_v1 *dev = NULL;
	accel_err de = {0};
	int have_gpu = accelp_device_get(ACCEL_DEVICE_CUDA, &dev, &de) == ACCEL_OK;
	/* what a machine without a device says, by build */
	const char *why = !ACCEL_HAVE_CUDA ? "this build of accel has no CUDA support"
	                  : strstr(de.msg, "ACCEL_DEVICE_PATH") ? "is not in ACCEL_DEVICE_PATH"
	                                                        : "no usable CUDA device";
	ck_assert_ptr_null(accel_get_stream(ctx));
	ck_assert_ptr_null(accel_get_stream(NULL));
	ck_assert_int_eq(accel_set_stream(NULL, NULL), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accel_set_stream(ctx, NULL), ACCEL_OK);
	ck_assert_int_eq(accel_stream_synchronize(ctx), ACCEL_OK);
	if (!have_gpu) {
		int dummy;
		ck_assert_int_eq(accel_set_stream(ctx, &dummy), ACCEL_ERR_UNSUPPORTED);
		ck_assert_msg(!strncmp(accel_errmsg(ctx), "accel_set_stream: there is no CUDA device "
		                       "to run it (", 43) && strstr(accel_errmsg(ctx), why),
		              "%s (expected: %s)", accel_errmsg(ctx), why);
		ck_assert_ptr_null(accel_get_stream(ctx));   /* unchanged */
		accel_clear_error(ctx);
	}

	/* host to host: a plain copy, done on return */
	float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
	accel_view va = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, a, 6};
	accel_view vb = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, b, 6};
	ck_assert_int_eq(accel_copy_async(ctx, &vb, &va), ACCEL_OK);
	ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
	/* the errors, by table */
	static const struct {
		uint32_t dtype;
		uint64_t numel;
		int null_data;
		int code;
		const char *msg;
	} bad[] = {
		{ACCEL_DTYPE_I32, 6, 0, ACCEL_ERR_INVALID_ARG,
		 "accel_copy_async: dst is 6 x i32 but src 6 x f32; an asynchronous copy moves bytes"},
		{ACCEL_DTYPE_F32, 5, 0, ACCEL_ERR_INVALID_ARG,
		 "accel_copy_async: dst is 5 x f32 but src 6 x f32"},
		{ACCEL_DTYPE_F32, 6, 1, ACCEL_ERR_INVALID_ARG,
		 "accel_copy_async: dst has 6 elements but a NULL data pointer"},
		{99, 6, 0, ACCEL_ERR_INVALID_ARG, "accel_copy_async: dst has invalid dtype 99"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		accel_view d = vb;
		d.dtype = bad[i].dtype;
		d.numel = bad[i].numel;
		d.data = bad[i].null_data ? NULL : b;
		ck_assert_int_eq(accel_copy_async(ctx, &d, &va), bad[i].code);
		ck_assert_msg(strstr(accel_errmsg(ctx), bad[i].msg), "case %zu: %s", i,
		              accel_errmsg(ctx));
		accel_clear_error(ctx);
	}
	ck_assert_int_eq(accel_copy_async(ctx, NULL, &va), ACCEL_ERR_INVALID_ARG);
	ck_assert_str_eq(accel_errmsg(ctx), "accel_copy_async: dst is NULL");
	accel_clear_error(ctx);
	if (!have_gpu) {
		/* a device side: the same reason as everywhere else */
		accel_view dv = vb;
		dv.device = ACCEL_DEVICE_CUDA;
		ck_assert_int_eq(accel_copy_async(ctx, &dv, &va), ACCEL_ERR_UNSUPPORTED);
		ck_assert_msg(strstr(accel_errmsg(ctx), "accel_copy_async: CUDA device 0 needs the "
		                     "cuda device module") && strstr(accel_errmsg(ctx), why),
		              "%s", accel_errmsg(ctx));
		accel_clear_error(ctx);
		void *p = (void *)&dv;
		ck_assert_int_eq(accel_pinned_alloc(ctx, 4096, &p), ACCEL_ERR_UNSUPPORTED);
		ck_assert_ptr_eq(p, (void *)&dv);   /* untouched */
		ck_assert_msg(strstr(accel_errmsg(ctx), "pinned host memory") &&
		              strstr(accel_errmsg(ctx), why), "%s", accel_errmsg(ctx));
		ck_assert_uint_eq(accelp_mem_current(ctx, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU), 0);
		accel_clear_error(ctx);
	}
	accel_pinned_free(ctx, NULL);

	/* the host table (ABI minor 4) */
	const accel_host_v1 *H = accelp_host_table();
	accel_host *h = &ctx->active[0].host;
	ck_assert(ACCEL_HOST_HAS(H, stream) && ACCEL_HOST_HAS(H, wait_stream) &&
	          ACCEL_HOST_HAS(H, op_copy_async));
	ck_assert_ptr_null(H->stream(h));
	float c[4] = {1, 2, 3, 4};
	accel_view vc = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, c, 4};
	accel_req *req = NULL;
	ck_assert_int_eq(H->allreduce(h, &vc, &vc, ACCEL_RED_SUM, &req), ACCEL_OK);
	ck_assert_int_eq(H->wait_stream(h, req), ACCEL_OK);   /* waited on the host */
	ck_assert_float_eq(c[3], 4.0f);
	ck_assert_int_eq(H->wait_stream(h, req), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "wait_stream: ") &&
	              strstr(accel_errmsg(ctx), "is not a collective in flight"), "%s",
	              accel_errmsg(ctx));
	accel_clear_error(ctx);
	memset(b, 0, sizeof(b));
	ck_assert_int_eq(H->op_copy_async(h, &vb, &va), ACCEL_OK);
	ck_assert_float_eq(b[5], 6.0f);
	va.numel = 2;
	ck_assert_int_eq(H->op_copy_async(h, &vb, &va), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "op_copy_async: dst is 6 x f32 but src 2 x f32"),
	              "%s", accel_errmsg(ctx));
	accel_ctx_free(ctx);
}
END_TEST

START_TEST(extension_lookup)
{
	accel_ctx *ctx = ctx_json("{}", ACCEL_OK);
	/* ddp offers its debug interface; unknown names and plugins are errors */
	ck_assert_ptr_nonnull(accel_plugin_extension(ctx, "ddp", "ddp.debug", 1));
	ck_assert_ptr_null(accel_plugin_extension(ctx, "ddp", "no.such", 1));
	ck_assert_int_eq(accel_errcode(ctx), ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(accel_errmsg(ctx), "no.such"));
	accel_clear_error(ctx);
	ck_assert_ptr_null(accel_plugin_extension(ctx, "zero", "x", 1));
	ck_assert_ptr_nonnull(strstr(accel_errmsg(ctx), "zero"));
	accel_ctx_free(ctx);
}
END_TEST

static Suite *ctx_suite(void)
{
	Suite *s = suite_create("ctx");
	TCase *tc = tcase_create("ctx");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, default_context);
	tcase_add_test(tc, unknown_strategy);
	tcase_add_test(tc, unknown_key);
	tcase_add_test(tc, world1_collectives);
	tcase_add_test(tc, failed_device_backend_is_not_retried);
	tcase_add_test(tc, plugin_missing_on_one_rank);
	tcase_add_test(tc, auto_backend_ignores_inherited_mpi_variables);
	tcase_add_test(tc, cpu_backend_sections_under_nccl);
	tcase_add_test(tc, request_waited_twice);
	tcase_add_test(tc, mem_accounting);
	tcase_add_test(tc, memory_stats);
	tcase_add_test(tc, cpu_ops);
	tcase_add_test(tc, extension_lookup);
	tcase_add_test(tc, streams_without_a_device);
	tcase_add_test(tc, events_without_a_device);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ctx_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
