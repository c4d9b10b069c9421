/* SPDX-License-Identifier: MIT */
/* tests/test-mpi.c: the mpi comm backend under mpirun (2 ranks in CI).
 *
 * Not a Check suite: Check forks every test, and a forked child of an MPI
 * process cannot use MPI.  This program runs on every rank, loads
 * comm-mpi.so the way the core does (dlopen + accel_comm_entry_v1) with a
 * minimal host table, and checks every op x dtype x reduction, in place and
 * out of place, blocking and asynchronous, split into several MPI calls or
 * not, against a reference computed from the inputs every rank can generate
 * itself.  Then the failure paths: bad arguments, a world-size mismatch, a
 * timeout (one rank late) and fail-fast after it.  When libaccel's public
 * collectives work, the same checks run once more through accel_ctx_new()
 * + accel_allreduce() etc. with backend "mpi".
 *
 * Modes (argv[1]):
 *   (none)          the program initializes MPI (THREAD_MULTIPLE) itself;
 *                   both progress modes are tested
 *   --own-init      the backend initializes MPI; it must be finalized at exit
 *   --init-single   the program calls MPI_Init (no threads); the backend
 *                   must fall back to progress inside test/wait
 *   --init-timeout  rank 1 creates its context late: rank 0's init fails
 *                   within its timeout instead of blocking
 *   --core-timeout  through libaccel without ACCEL_MASTER_ADDR: rank 1 comes
 *                   late to an all-reduce; rank 0's timeout names it (rank 0
 *                   hosts a store, comm.mpi_store), and says MPI cannot tell
 *                   with comm.mpi_store=false; backend shm, which needs the
 *                   store while it starts, fails at once saying how to get one
 *   --store-remote  as the first half of --core-timeout, with rank 0 under
 *                   another host name (tests/test-mpi-host.sh): rank 1 must
 *                   reach the store by that name (a loopback address here)
 *   --store-unreachable  rank 0's host name is an address nobody reaches:
 *                   rank 1 cannot connect, every rank drops the store with a
 *                   warning, and the job runs as without one
 * Exit status 0 only if every check passed on every rank. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <mpi.h>

#include "accel/accel.h"
#include "accel/comm.h"
#include "backends/common/half.h"

static int g_rank, g_world, g_failures;

#include "rank-check.h"


/* ---- a minimal host ------------------------------------------------------------ */

struct accel_host {
	int err_code;
	char err[4096];
	char log[16384];
	int32_t progress_thread;
	int64_t chunk;      /* 0: not configured */
	const char *store_dir;  /* file store shared by the ranks, or NULL */
};

static void h_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (getenv("ACCEL_TEST_VERBOSE"))
		fprintf(stderr, "[rank %d] log %d: %s\n", g_rank, level, line);
	if (h) {
		size_t n = strlen(h->log);
		snprintf(h->log + n, sizeof(h->log) - n, "%s\n", line);
	}
}

static int h_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	va_list ap;
	if (!h || h->err_code)
		return code;
	h->err_code = code;
	va_start(ap, fmt);
	vsnprintf(h->err, sizeof(h->err), fmt, ap);
	va_end(ap);
	if (getenv("ACCEL_TEST_VERBOSE"))
		fprintf(stderr, "[rank %d] error %d: %s\n", g_rank, code, h->err);
	return code;
}

static int h_cfg_bool(accel_host *h, const char *key, int32_t *ret)
{
	if (!strcmp(key, "progress_thread")) {
		*ret = h->progress_thread;
		return ACCEL_OK;
	}
	return ACCEL_ERR_NOT_FOUND;
}

static int h_cfg_int(accel_host *h, const char *key, int64_t *ret)
{
	if (!strcmp(key, "chunk_elements") && h->chunk > 0) {
		*ret = h->chunk;
		return ACCEL_OK;
	}
	return ACCEL_ERR_NOT_FOUND;
}

#include "file-store.h"

static accel_host_v1 g_host_table;
static char g_store_dir[64];  /* main mode: a file store, so timeouts can
                                 name the missing rank */

static const accel_comm_v1 *load_backend(void)
{
	char path[4096];
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	snprintf(path, sizeof(path), "%s/backends/mpi/comm-mpi.so", bd ? bd : ".");
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr, "[rank %d] cannot load %s: %s\n", g_rank, path, dlerror());
		return NULL;
	}
	const accel_comm_v1 *(*entry)(const accel_host_v1 *) =
		(const accel_comm_v1 *(*)(const accel_host_v1 *))dlsym(dl, ACCEL_COMM_ENTRY_V1);
	if (!entry) {
		fprintf(stderr, "[rank %d] %s has no %s\n", g_rank, path, ACCEL_COMM_ENTRY_V1);
		return NULL;
	}
	g_host_table.struct_size = sizeof(g_host_table);
	g_host_table.abi_major = ACCEL_ABI_MAJOR;
	g_host_table.abi_minor = ACCEL_ABI_MINOR;
	g_host_table.accel_version = "test";
	g_host_table.log = h_log;
	g_host_table.error = h_error;
	g_host_table.cfg_bool = h_cfg_bool;
	g_host_table.cfg_int = h_cfg_int;
	return entry(&g_host_table);
}

static const accel_comm_v1 *B;

typedef struct inst {
	accel_host h;
	void *st;
} inst;

static int inst_open(inst *in, int progress_thread, int64_t chunk, int64_t timeout_ms,
                     int world_override)
{
	memset(in, 0, sizeof(*in));
	in->h.progress_thread = progress_thread;
	in->h.chunk = chunk;
	in->h.store_dir = g_store_dir;
	accel_comm_init_v1 a = {
		.struct_size = sizeof(a),
		.rank = g_rank,
		.world_size = world_override ? world_override : g_world,
		.local_rank = g_rank,
		.local_world_size = g_world,
		.node_rank = 0,
		.num_nodes = 1,
		.device_index = -1,
		.timeout_ms = timeout_ms,
		.job_id = "test-mpi",
	};
	return B->init(&g_host_table, &in->h, &a, &in->st);
}

static void inst_close(inst *in)
{
	if (in->st)
		B->fini(in->st);
	in->st = NULL;
}

static void clear_err(inst *in)
{
	in->h.err_code = 0;
	in->h.err[0] = '\0';
}

/* ---- values ---------------------------------------------------------------------- */

static const uint32_t k_red_dtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16,
                                        ACCEL_DTYPE_BF16, ACCEL_DTYPE_I32, ACCEL_DTYPE_I64};
static const uint32_t k_all_dtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64,    ACCEL_DTYPE_F16,
                                        ACCEL_DTYPE_BF16, ACCEL_DTYPE_I32,   ACCEL_DTYPE_I64,
                                        ACCEL_DTYPE_U8,   ACCEL_DTYPE_F8E4M3};
static const char *const k_red_names[] = {"sum", "avg", "max", "min"};

static int is_int(uint32_t dt)
{
	return dt == ACCEL_DTYPE_I32 || dt == ACCEL_DTYPE_I64 || dt == ACCEL_DTYPE_U8 ||
	       dt == ACCEL_DTYPE_F8E4M3;
}

/* Element i of rank r's input: small integers, exact in every float type,
 * so sums are exact whatever order MPI combines them in. */
static double val(int r, uint64_t i, uint32_t dt)
{
	if (dt == ACCEL_DTYPE_U8 || dt == ACCEL_DTYPE_F8E4M3)
		return (double)((i * 37 + (uint64_t)r * 101 + 5) % 256);
	if (is_int(dt))
		return (double)((int64_t)((i * 131 + (uint64_t)r * 17 + 3) % 1001) - 500);
	return (double)((int64_t)((i * 7 + (uint64_t)r * 3) % 11) - 5);
}

static void put(void *buf, uint32_t dt, uint64_t i, double v)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
	case ACCEL_DTYPE_F64: ((double *)buf)[i] = v; break;
	case ACCEL_DTYPE_F16: ((uint16_t *)buf)[i] = accel_f32_to_f16((float)v); break;
	case ACCEL_DTYPE_BF16: ((uint16_t *)buf)[i] = accel_f32_to_bf16((float)v); break;
	case ACCEL_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case ACCEL_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
	default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	}
}

static double get(const void *buf, uint32_t dt, uint64_t i)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: return ((const float *)buf)[i];
	case ACCEL_DTYPE_F64: return ((const double *)buf)[i];
	case ACCEL_DTYPE_F16: return accel_f16_to_f32(((const uint16_t *)buf)[i]);
	case ACCEL_DTYPE_BF16: return accel_bf16_to_f32(((const uint16_t *)buf)[i]);
	case ACCEL_DTYPE_I32: return ((const int32_t *)buf)[i];
	case ACCEL_DTYPE_I64: return (double)((const int64_t *)buf)[i];
	default: return ((const uint8_t *)buf)[i];
	}
}

/* The expected reduction of element i over all ranks, rounded the way the
 * backend rounds (AVG: the exact sum divided once in the type's precision). */
static double ref_reduce(uint64_t i, uint32_t dt, uint32_t red)
{
	double acc = val(0, i, dt);
	for (int r = 1; r < g_world; r++) {
		double v = val(r, i, dt);
		if (red == ACCEL_RED_MAX)
			acc = v > acc ? v : acc;
		else if (red == ACCEL_RED_MIN)
			acc = v < acc ? v : acc;
		else
			acc += v;
	}
	if (red != ACCEL_RED_AVG)
		return acc;
	if (dt == ACCEL_DTYPE_I32 || dt == ACCEL_DTYPE_I64)
		return (double)((int64_t)acc / g_world);
	if (dt == ACCEL_DTYPE_F64)
		return acc / g_world;
	return (double)((float)acc / (float)g_world);
}

/* Compare n elements of got with exp (both of dtype dt) bit for bit. */
static int same(const char *what, const void *got, const void *exp, uint32_t dt, uint64_t n)
{
	size_t es = accel_abi_dtype_size(dt);
	for (uint64_t i = 0; i < n; i++) {
		if (memcmp((const char *)got + i * es, (const char *)exp + i * es, es)) {
			CHECK(0, "%s: element %llu is %g, expected %g", what, (unsigned long long)i,
			      get(got, dt, i), get(exp, dt, i));
			return 0;
		}
	}
	return 1;
}

static accel_view view(uint32_t dt, void *data, uint64_t n)
{
	accel_view v = {sizeof(accel_view), dt, ACCEL_DEVICE_CPU, 0, data, n};
	return v;
}

/* Wait for *preq (read after the issuing call in `rc` has run). */
static int run_wait(inst *in, int rc, accel_comm_req **preq, const char *what)
{
	if (rc != ACCEL_OK) {
		CHECK(0, "%s: issue failed (%d): %s", what, rc, in->h.err);
		return rc;
	}
	rc = B->wait(in->st, *preq);
	CHECK(rc == ACCEL_OK, "%s: wait failed (%d): %s", what, rc, in->h.err);
	return rc;
}

/* ---- every op x dtype x reduction ----------------------------------------------- */

static void check_allreduce(inst *in, uint32_t dt, uint32_t red, uint64_t n, int in_place)
{
	size_t es = accel_abi_dtype_size(dt);
	char what[160];
	snprintf(what, sizeof(what), "allreduce %s %s n=%llu %s", accel_abi_dtype_name(dt),
	         k_red_names[red], (unsigned long long)n, in_place ? "in place" : "out of place");
	char *send = malloc(n * es + 1), *recv = malloc(n * es + 1), *exp = malloc(n * es + 1);
	for (uint64_t i = 0; i < n; i++) {
		put(send, dt, i, val(g_rank, i, dt));
		put(exp, dt, i, ref_reduce(i, dt, red));
	}
	memset(recv, 0x5a, n * es);
	accel_view s = view(dt, send, n), r = view(dt, in_place ? send : recv, n);
	accel_comm_req *req = NULL;
	clear_err(in);
	if (run_wait(in, B->allreduce(in->st, &s, &r, red, &req), &req, what) == ACCEL_OK)
		same(what, in_place ? send : recv, exp, dt, n);
	free(send);
	free(recv);
	free(exp);
}

/* The placements of reduce_scatter and allgather: separate buffers, in
 * place with the own block at the buffer's start (send == recv), and in
 * place with it at block `rank` (NCCL's and MPI_IN_PLACE's form). */
enum { PLACE_APART, PLACE_SAME, PLACE_RANK_BLOCK, N_PLACES };
static const char *const k_place_names[] = {"out of place", "in place (send == recv)",
                                            "in place (rank block)"};

static void check_reduce_scatter(inst *in, uint32_t dt, uint32_t red, uint64_t n, int place)
{
	size_t es = accel_abi_dtype_size(dt);
	uint64_t total = n * (uint64_t)g_world;
	char what[160];
	snprintf(what, sizeof(what), "reduce_scatter %s %s n=%llu %s", accel_abi_dtype_name(dt),
	         k_red_names[red], (unsigned long long)n, k_place_names[place]);
	char *send = malloc(total * es + 1), *recv = malloc(n * es + 1), *exp = malloc(n * es + 1);
	for (uint64_t i = 0; i < total; i++)
		put(send, dt, i, val(g_rank, i, dt));
	for (uint64_t i = 0; i < n; i++)
		put(exp, dt, i, ref_reduce((uint64_t)g_rank * n + i, dt, red));
	char *out = place == PLACE_APART ? recv
	            : place == PLACE_SAME ? send
	                                  : send + (uint64_t)g_rank * n * es;
	accel_view s = view(dt, send, total), r = view(dt, out, n);
	accel_comm_req *req = NULL;
	clear_err(in);
	if (run_wait(in, B->reduce_scatter(in->st, &s, &r, red, &req), &req, what) == ACCEL_OK)
		same(what, out, exp, dt, n);
	free(send);
	free(recv);
	free(exp);
}

static void check_allgather(inst *in, uint32_t dt, uint64_t n, int place)
{
	size_t es = accel_abi_dtype_size(dt);
	uint64_t total = n * (uint64_t)g_world;
	char what[160];
	snprintf(what, sizeof(what), "allgather %s n=%llu %s", accel_abi_dtype_name(dt),
	         (unsigned long long)n, k_place_names[place]);
	char *send = malloc(n * es + 1), *recv = malloc(total * es + 1), *exp = malloc(total * es + 1);
	memset(recv, 0x5a, total * es);
	char *own = place == PLACE_APART ? send
	            : place == PLACE_SAME ? recv
	                                  : recv + (uint64_t)g_rank * n * es;
	for (uint64_t i = 0; i < n; i++)
		put(own, dt, i, val(g_rank, i, dt));
	for (int r = 0; r < g_world; r++)
		for (uint64_t i = 0; i < n; i++)
			put(exp, dt, (uint64_t)r * n + i, val(r, i, dt));
	accel_view s = view(dt, own, n), r = view(dt, recv, total);
	accel_comm_req *req = NULL;
	clear_err(in);
	if (run_wait(in, B->allgather(in->st, &s, &r, &req), &req, what) == ACCEL_OK)
		same(what, recv, exp, dt, total);
	free(send);
	free(recv);
	free(exp);
}

static void check_broadcast(inst *in, uint32_t dt, uint64_t n, int root)
{
	size_t es = accel_abi_dtype_size(dt);
	char what[160];
	snprintf(what, sizeof(what), "broadcast %s n=%llu root=%d", accel_abi_dtype_name(dt),
	         (unsigned long long)n, root);
	char *buf = malloc(n * es + 1), *exp = malloc(n * es + 1);
	for (uint64_t i = 0; i < n; i++) {
		put(buf, dt, i, val(g_rank, i, dt));
		put(exp, dt, i, val(root, i, dt));
	}
	accel_view b = view(dt, buf, n);
	accel_comm_req *req = NULL;
	clear_err(in);
	if (run_wait(in, B->broadcast(in->st, &b, root, &req), &req, what) == ACCEL_OK)
		same(what, buf, exp, dt, n);
	free(buf);
	free(exp);
}

static void check_all_ops(inst *in, const uint64_t *counts, size_t n_counts)
{
	for (size_t c = 0; c < n_counts; c++) {
		uint64_t n = counts[c];
		for (size_t d = 0; d < sizeof(k_red_dtypes) / sizeof(k_red_dtypes[0]); d++)
			for (uint32_t red = 0; red < 4; red++)
				for (int pl = 0; pl < N_PLACES; pl++) {
					if (pl < 2)
						check_allreduce(in, k_red_dtypes[d], red, n, pl);
					check_reduce_scatter(in, k_red_dtypes[d], red, n, pl);
				}
		for (size_t d = 0; d < sizeof(k_all_dtypes) / sizeof(k_all_dtypes[0]); d++) {
			for (int pl = 0; pl < N_PLACES; pl++)
				check_allgather(in, k_all_dtypes[d], n, pl);
			check_broadcast(in, k_all_dtypes[d], n, 0);
			check_broadcast(in, k_all_dtypes[d], n, g_world - 1);
		}
	}
	accel_comm_req *req = NULL;
	clear_err(in);
	run_wait(in, B->barrier(in->st, &req), &req, "barrier");
}

/* Several ops in flight at once, polled with test() and waited in reverse
 * order (a request's completion must not depend on the order of waits). */
static void check_async(inst *in)
{
	enum { N = 4099 };
	float *a = malloc(N * sizeof(float)), *ea = malloc(N * sizeof(float));
	double *rs_in = malloc((size_t)N * g_world * sizeof(double)), *rs_out = malloc(N * sizeof(double));
	int32_t *ag_in = malloc(N * sizeof(int32_t)), *ag_out = malloc((size_t)N * g_world * sizeof(int32_t));
	uint16_t *bc = malloc(N * sizeof(uint16_t));
	for (uint64_t i = 0; i < N; i++) {
		a[i] = (float)val(g_rank, i, ACCEL_DTYPE_F32);
		ea[i] = (float)ref_reduce(i, ACCEL_DTYPE_F32, ACCEL_RED_SUM);
		ag_in[i] = (int32_t)val(g_rank, i, ACCEL_DTYPE_I32);
		bc[i] = accel_f32_to_bf16((float)val(g_rank, i, ACCEL_DTYPE_BF16));
	}
	for (uint64_t i = 0; i < (uint64_t)N * g_world; i++)
		rs_in[i] = val(g_rank, i, ACCEL_DTYPE_F64);
	accel_view va = view(ACCEL_DTYPE_F32, a, N);
	accel_view vrs_in = view(ACCEL_DTYPE_F64, rs_in, (uint64_t)N * g_world),
	           vrs_out = view(ACCEL_DTYPE_F64, rs_out, N);
	accel_view vag_in = view(ACCEL_DTYPE_I32, ag_in, N),
	           vag_out = view(ACCEL_DTYPE_I32, ag_out, (uint64_t)N * g_world);
	accel_view vbc = view(ACCEL_DTYPE_BF16, bc, N);
	accel_comm_req *req[5] = {0};
	clear_err(in);
	int rc = B->allreduce(in->st, &va, &va, ACCEL_RED_SUM, &req[0]);
	rc |= B->reduce_scatter(in->st, &vrs_in, &vrs_out, ACCEL_RED_MAX, &req[1]);
	rc |= B->allgather(in->st, &vag_in, &vag_out, &req[2]);
	rc |= B->broadcast(in->st, &vbc, g_world - 1, &req[3]);
	rc |= B->barrier(in->st, &req[4]);
	CHECK(rc == ACCEL_OK, "async: issuing failed: %s", in->h.err);
	if (rc != ACCEL_OK)
		return;
	int32_t done = 0;
	for (int spin = 0; spin < 200000 && !done; spin++) {
		rc = B->test(in->st, req[4], &done);
		CHECK(rc == ACCEL_OK, "async: test failed: %s", in->h.err);
		if (rc)
			break;
		if (!done)
			usleep(50);
	}
	CHECK(done == 1, "async: the barrier never tested done");
	for (int k = 4; k >= 0; k--)
		CHECK(B->wait(in->st, req[k]) == ACCEL_OK, "async: wait %d failed: %s", k, in->h.err);
	same("async allreduce", a, ea, ACCEL_DTYPE_F32, N);
	for (uint64_t i = 0; i < N; i++) {
		double e = ref_reduce((uint64_t)g_rank * N + i, ACCEL_DTYPE_F64, ACCEL_RED_MAX);
		if (rs_out[i] != e) {
			CHECK(0, "async reduce_scatter: element %llu is %g, expected %g",
			      (unsigned long long)i, rs_out[i], e);
			break;
		}
	}
	for (uint64_t i = 0; i < (uint64_t)N * g_world; i++) {
		int32_t e = (int32_t)val((int)(i / N), i % N, ACCEL_DTYPE_I32);
		if (ag_out[i] != e) {
			CHECK(0, "async allgather: element %llu is %d, expected %d",
			      (unsigned long long)i, ag_out[i], e);
			break;
		}
	}
	for (uint64_t i = 0; i < N; i++) {
		uint16_t e = accel_f32_to_bf16((float)val(g_world - 1, i, ACCEL_DTYPE_BF16));
		if (bc[i] != e) {
			CHECK(0, "async broadcast: element %llu differs", (unsigned long long)i);
			break;
		}
	}
	/* A released request is refused by the core, not passed on (the
	 * backend asserts it; test-ctx's request_waited_twice). */
	free(a);
	free(ea);
	free(rs_in);
	free(rs_out);
	free(ag_in);
	free(ag_out);
	free(bc);
}

/* Bad arguments, through the core with backend mpi: a clear error naming
 * the problem, from core/comm_check.c, before the backend is called (it
 * only asserts them); the collectives after them still run (suite_core). */
static void check_core_bad_args(accel_ctx *ctx)
{
	float a[8] = {0};
	uint8_t u[8] = {0};
	int rc;
#define EXPECT(call, code, text)                                                          \
	do {                                                                              \
		accel_clear_error(ctx);                                                   \
		rc = (call);                                                              \
		CHECK(rc == (code) && strstr(accel_errmsg(ctx), text),                    \
		      "%s: rc %d (want %d), message '%s' (want '%s')", #call, rc, code,   \
		      accel_errmsg(ctx), text);                                           \
	} while (0)
	EXPECT(accel_allreduce(ctx, a, a, 8, ACCEL_DTYPE_F32, 9), ACCEL_ERR_INVALID_ARG,
	       "unknown reduction 9");
	EXPECT(accel_allreduce(ctx, u, u, 8, ACCEL_DTYPE_U8, ACCEL_RED_SUM), ACCEL_ERR_UNSUPPORTED,
	       "reductions over u8");
	EXPECT(accel_allreduce(ctx, a, a + 1, 7, ACCEL_DTYPE_F32, ACCEL_RED_SUM),
	       ACCEL_ERR_INVALID_ARG, "overlap");
	EXPECT(accel_allreduce(ctx, NULL, a, 8, ACCEL_DTYPE_F32, ACCEL_RED_SUM),
	       ACCEL_ERR_INVALID_ARG, "NULL data pointer");
	EXPECT(accel_broadcast(ctx, a, 8, ACCEL_DTYPE_F32, g_world), ACCEL_ERR_INVALID_ARG, "root");
	EXPECT(accel_broadcast(ctx, a, 8, ACCEL_DTYPE_F32, -1), ACCEL_ERR_INVALID_ARG, "root");
	EXPECT(accel_broadcast(ctx, a, 8, 77, 0), ACCEL_ERR_INVALID_ARG, "dtype 77");
	accel_clear_error(ctx);
#undef EXPECT
}

/* Rank 0 gives up after 300 ms; the others arrive after 1 s.  Rank 0 must
 * get ACCEL_ERR_TIMEOUT naming the op and its sequence number, then fail
 * fast; the late ranks must still complete (rank 0's fini drains). */
/* poll_only: rank 0 never calls wait(), only test(): the timeout must
 * reach it there too (in both progress modes); 2 (with a store): a second
 * collective queued behind the one that times out is waited first. */
static void check_timeout(int progress_thread, int poll_only)
{
	inst in;
	int rc = inst_open(&in, progress_thread, 0, g_rank == 0 ? 300 : 60000, 0);
	CHECK(rc == ACCEL_OK, "timeout test: init failed: %s", in.h.err);
	if (rc)
		return;
	enum { N = 1000 };
	float *x = malloc(N * sizeof(float)), *e = malloc(N * sizeof(float));
	for (uint64_t i = 0; i < N; i++) {
		x[i] = (float)val(g_rank, i, ACCEL_DTYPE_F32);
		e[i] = (float)ref_reduce(i, ACCEL_DTYPE_F32, ACCEL_RED_SUM);
	}
	accel_view v = view(ACCEL_DTYPE_F32, x, N);
	accel_comm_req *req = NULL;
	clear_err(&in);
	if (g_rank == 0) {
		rc = B->allreduce(in.st, &v, &v, ACCEL_RED_SUM, &req);
		CHECK(rc == ACCEL_OK, "timeout test: issue failed: %s", in.h.err);
		if (g_store_dir[0] && poll_only == 2) {
			/* a second collective queued behind the one that times out,
			 * waited first: it fails fast, naming the late rank too */
			accel_comm_req *req2 = NULL;
			float y = 1.0f;
			accel_view vy = view(ACCEL_DTYPE_F32, &y, 1);
			rc = B->allreduce(in.st, &vy, &vy, ACCEL_RED_SUM, &req2);
			CHECK(rc == ACCEL_OK, "timeout test: second issue failed: %s", in.h.err);
			rc = B->wait(in.st, req2);
			CHECK(rc == ACCEL_ERR_TIMEOUT && strstr(in.h.err, "allreduce #2") &&
			      strstr(in.h.err, "earlier collective failed") &&
			      strstr(in.h.err, "[at #1: rank 1 did not report reaching it"),
			      "queued behind a timeout: rc %d, '%s'", rc, in.h.err);
			clear_err(&in);
			rc = B->wait(in.st, req);
			CHECK(rc == ACCEL_ERR_TIMEOUT, "timeout test: wait returned %d", rc);
		} else if (poll_only) {
			int32_t done = 0;
			time_t t0 = time(NULL);
			while ((rc = B->test(in.st, req, &done)) == ACCEL_OK && !done &&
			       time(NULL) - t0 < 20)
				usleep(1000);
			CHECK(rc == ACCEL_ERR_TIMEOUT && done == 1,
			      "timeout seen by test() alone (progress_thread=%d): rc %d, done %d",
			      progress_thread, rc, done);
			B->wait(in.st, req);  /* releases it; the same error */
		} else {
			rc = B->wait(in.st, req);
			CHECK(rc == ACCEL_ERR_TIMEOUT, "timeout test: wait returned %d, not TIMEOUT",
			      rc);
		}
		/* with a store (main mode) the late rank is named; without one
		 * the message says MPI cannot tell */
		CHECK(strstr(in.h.err, "allreduce #1 (f32, 1000 elements)") &&
		      strstr(in.h.err, "rank 0") &&
		      (g_store_dir[0] ? strstr(in.h.err, "rank 1 did not report reaching it") != NULL
		                      : strstr(in.h.err, "cannot tell which ranks") != NULL),
		      "timeout message: '%s'", in.h.err);
		clear_err(&in);
		rc = B->allreduce(in.st, &v, &v, ACCEL_RED_SUM, &req);
		CHECK(rc == ACCEL_ERR_TIMEOUT && strstr(in.h.err, "earlier collective failed") &&
		      strstr(in.h.err, poll_only == 2 ? "#3" : "#2") &&
		      (!g_store_dir[0] || strstr(in.h.err, "rank 1 did not report reaching it")),
		      "fail fast after a timeout: rc %d, '%s'", rc, in.h.err);
		inst_close(&in);  /* drains the late allreduce */
	} else {
		sleep(1);
		rc = B->allreduce(in.st, &v, &v, ACCEL_RED_SUM, &req);
		if (run_wait(&in, rc, &req, "late allreduce") == ACCEL_OK)
			same("late allreduce", x, e, ACCEL_DTYPE_F32, N);
		inst_close(&in);
	}
	free(x);
	free(e);
}

/* A rank whose peers do not create their context in time: init fails
 * within its timeout naming that, instead of blocking in MPI_Comm_dup.
 * Its dup stays running (MPI cannot cancel it); it keeps MPI progressing
 * until the late rank's dup has matched it, so the late rank's init
 * succeeds and the job ends cleanly (mode --init-timeout, alone). */
static void check_init_timeout(void)
{
	inst in;
	if (g_rank == 0) {
		time_t t0 = time(NULL);
		int rc = inst_open(&in, 1, 0, 300, 0);
		CHECK(rc == ACCEL_ERR_TIMEOUT &&
		      strstr(in.h.err, "did not create their accel context") &&
		      time(NULL) - t0 < 5,
		      "init without peers: rc %d, '%s'", rc, in.h.err);
		if (rc == ACCEL_OK)
			inst_close(&in);
		while (time(NULL) - t0 < 4) {
			int flag = 0;
			MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
			           MPI_STATUS_IGNORE);
			usleep(1000);
		}
	} else {
		sleep(1);
		int rc = inst_open(&in, 1, 0, 60000, 0);
		CHECK(rc == ACCEL_OK, "late init: %s", in.h.err);
		if (rc == ACCEL_OK)
			inst_close(&in);
	}
}

static void check_world_mismatch(void)
{
	inst in;
	int rc = inst_open(&in, 1, 0, 10000, g_world + 1);
	CHECK(rc == ACCEL_ERR_CONFIG && strstr(in.h.err, "mpirun") && in.st == NULL,
	      "world mismatch: rc %d, '%s'", rc, in.h.err);
	inst_close(&in);
}

/* Values the ordinary checks do not reach: an f16 average whose sum
 * overflows f16 (reduced in f32 and rounded once, it must come back as the
 * average), and NaN in max/min on either rank (propagated, as shm does). */
static void check_special(inst *in)
{
	uint16_t h[3] = {accel_f32_to_f16(40000.0f), accel_f32_to_f16(-40000.0f),
	                 accel_f32_to_f16(1.0f)};
	uint16_t hrs[2 * 2];  /* reduce_scatter: world 2 blocks of 2 */
	for (int i = 0; i < 4; i++)
		hrs[i] = accel_f32_to_f16(i % 2 ? -40000.0f : 40000.0f);
	accel_view v = view(ACCEL_DTYPE_F16, h, 3);
	accel_comm_req *req = NULL;
	clear_err(in);
	if (run_wait(in, B->allreduce(in->st, &v, &v, ACCEL_RED_AVG, &req), &req,
	             "f16 avg near the top of the range") == ACCEL_OK)
		CHECK(accel_f16_to_f32(h[0]) == 40000.0f && accel_f16_to_f32(h[1]) == -40000.0f &&
		      accel_f16_to_f32(h[2]) == 1.0f,
		      "f16 avg of 40000 on every rank: %g %g %g (a sum rounded to f16 overflows)",
		      accel_f16_to_f32(h[0]), accel_f16_to_f32(h[1]), accel_f16_to_f32(h[2]));
	if (g_world == 2) {
		uint16_t out[2];
		accel_view s = view(ACCEL_DTYPE_F16, hrs, 4), r = view(ACCEL_DTYPE_F16, out, 2);
		clear_err(in);
		if (run_wait(in, B->reduce_scatter(in->st, &s, &r, ACCEL_RED_AVG, &req), &req,
		             "f16 reduce_scatter avg") == ACCEL_OK)
			CHECK(accel_f16_to_f32(out[0]) == 40000.0f &&
			      accel_f16_to_f32(out[1]) == -40000.0f,
			      "f16 reduce_scatter avg: %g %g", accel_f16_to_f32(out[0]),
			      accel_f16_to_f32(out[1]));
	}
	static const uint32_t fdt[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16,
	                               ACCEL_DTYPE_BF16};
	for (size_t d = 0; d < 4; d++) {
		for (uint32_t red = ACCEL_RED_MAX; red <= ACCEL_RED_MIN; red++) {
			/* element 0: NaN on rank 0; 1: NaN on the last rank; 2: none */
			char buf[3 * 8];
			for (uint64_t i = 0; i < 3; i++)
				put(buf, fdt[d], i, (double)(g_rank + 1));
			if (g_rank == 0)
				put(buf, fdt[d], 0, NAN);
			if (g_rank == g_world - 1)
				put(buf, fdt[d], 1, NAN);
			accel_view nv = view(fdt[d], buf, 3);
			char what[64];
			snprintf(what, sizeof(what), "%s %s with NaN", accel_abi_dtype_name(fdt[d]),
			         k_red_names[red]);
			clear_err(in);
			if (run_wait(in, B->allreduce(in->st, &nv, &nv, red, &req), &req, what) !=
			    ACCEL_OK)
				continue;
			double a = get(buf, fdt[d], 0), b = get(buf, fdt[d], 1), c = get(buf, fdt[d], 2);
			double want = red == ACCEL_RED_MAX ? g_world : 1;
			CHECK(a != a && b != b && c == want, "%s: %g %g %g (NaN, NaN, %g expected)", what,
			      a, b, c, want);
		}
	}
}

static void suite_backend(int progress_thread, int64_t chunk)
{
	inst in;
	int rc = inst_open(&in, progress_thread, chunk, 60000, 0);
	CHECK(rc == ACCEL_OK, "init (progress_thread=%d chunk=%lld) failed: %s", progress_thread,
	      (long long)chunk, in.h.err);
	if (rc)
		return;
	static const uint64_t small[] = {0, 1, 7, 1000};
	static const uint64_t chunked[] = {1, 23, 1000};
	if (chunk > 0)
		check_all_ops(&in, chunked, 3);
	else
		check_all_ops(&in, small, 4);
	check_async(&in);
	check_special(&in);
	if (chunk == 0) {
		/* One large message (past the eager limits). */
		check_allreduce(&in, ACCEL_DTYPE_F32, ACCEL_RED_SUM, 1u << 20, 0);
		check_allreduce(&in, ACCEL_DTYPE_BF16, ACCEL_RED_AVG, 1u << 19, 1);
		check_allgather(&in, ACCEL_DTYPE_F32, 1u << 18, 1);
		check_reduce_scatter(&in, ACCEL_DTYPE_F16, ACCEL_RED_MAX, 1u << 18, 0);
	}
	inst_close(&in);
}

/* ---- through libaccel's public API -------------------------------------------------- */

static void suite_core(void)
{
	/* Under mpirun the core needs no master address when the backend is
	 * mpi (it then makes a store over MPI, comm.mpi_store): no
	 * ACCEL_MASTER_ADDR/PORT are given here on purpose. */
	unsetenv("ACCEL_MASTER_ADDR");
	unsetenv("ACCEL_MASTER_PORT");
	static const char *const sets[] = {"backend=mpi", NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets, .skip_env = 0};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	CHECK(rc == ACCEL_OK, "core: accel_ctx_new with backend=mpi failed (%s): %s",
	      accel_status_str(rc), ctx ? accel_errmsg(ctx) : "");
	if (rc != ACCEL_OK) {
		accel_ctx_free(ctx);
		return;
	}
	check_core_bad_args(ctx);
	const char *be = NULL;
	CHECK(accel_config_string(ctx, "backend", &be) == ACCEL_OK && be && !strcmp(be, "mpi"),
	      "core: backend is '%s', not mpi", be ? be : "(unset)");
	CHECK(accel_rank(ctx) == g_rank && accel_world_size(ctx) == g_world,
	      "core: rank/world %d/%d, MPI says %d/%d", accel_rank(ctx), accel_world_size(ctx),
	      g_rank, g_world);
	enum { N = 777 };
	for (size_t d = 0; d < sizeof(k_red_dtypes) / sizeof(k_red_dtypes[0]); d++) {
		uint32_t dt = k_red_dtypes[d];
		size_t es = accel_abi_dtype_size(dt);
		for (uint32_t red = 0; red < 4; red++) {
			char *s = malloc(N * es * g_world), *r = malloc(N * es * g_world),
			     *e = malloc(N * es * g_world);
			char what[96];
			for (uint64_t i = 0; i < N; i++) {
				put(s, dt, i, val(g_rank, i, dt));
				put(e, dt, i, ref_reduce(i, dt, red));
			}
			snprintf(what, sizeof(what), "core allreduce %s %s", accel_abi_dtype_name(dt),
			         k_red_names[red]);
			rc = accel_allreduce(ctx, s, r, N, dt, red);
			CHECK(rc == ACCEL_OK, "%s: %s", what, accel_errmsg(ctx));
			if (rc == ACCEL_OK)
				same(what, r, e, dt, N);
			for (uint64_t i = 0; i < (uint64_t)N * g_world; i++)
				put(s, dt, i, val(g_rank, i, dt));
			for (uint64_t i = 0; i < N; i++)
				put(e, dt, i, ref_reduce((uint64_t)g_rank * N + i, dt, red));
			snprintf(what, sizeof(what), "core reduce_scatter %s %s", accel_abi_dtype_name(dt),
			         k_red_names[red]);
			rc = accel_reduce_scatter(ctx, s, r, N, dt, red);
			CHECK(rc == ACCEL_OK, "%s: %s", what, accel_errmsg(ctx));
			if (rc == ACCEL_OK)
				same(what, r, e, dt, N);
			free(s);
			free(r);
			free(e);
		}
	}
	for (size_t d = 0; d < sizeof(k_all_dtypes) / sizeof(k_all_dtypes[0]); d++) {
		uint32_t dt = k_all_dtypes[d];
		size_t es = accel_abi_dtype_size(dt);
		char *s = malloc(N * es), *r = malloc(N * es * g_world), *e = malloc(N * es * g_world);
		for (uint64_t i = 0; i < N; i++)
			put(s, dt, i, val(g_rank, i, dt));
		for (int q = 0; q < g_world; q++)
			for (uint64_t i = 0; i < N; i++)
				put(e, dt, (uint64_t)q * N + i, val(q, i, dt));
		rc = accel_allgather(ctx, s, r, N, dt);
		CHECK(rc == ACCEL_OK, "core allgather %s: %s", accel_abi_dtype_name(dt),
		      accel_errmsg(ctx));
		if (rc == ACCEL_OK)
			same("core allgather", r, e, dt, (uint64_t)N * g_world);
		for (uint64_t i = 0; i < N; i++)
			put(e, dt, i, val(g_world - 1, i, dt));
		rc = accel_broadcast(ctx, s, N, dt, g_world - 1);
		CHECK(rc == ACCEL_OK, "core broadcast %s: %s", accel_abi_dtype_name(dt),
		      accel_errmsg(ctx));
		if (rc == ACCEL_OK)
			same("core broadcast", s, e, dt, N);
		free(s);
		free(r);
		free(e);
	}
	CHECK(accel_wait_for_everyone(ctx) == ACCEL_OK, "core barrier: %s", accel_errmsg(ctx));
	if (g_rank == 0)
		printf("core: public collectives through backend mpi checked\n");
	accel_ctx_free(ctx);
}

/* Through the core, started by mpirun with no ACCEL_MASTER_ADDR/PORT: rank
 * 1 comes 4 s late to an all-reduce with comm.timeout_s 2 (the join of the
 * store takes up to half of that, 192.0.2.1 may drop the connect).  With
 * comm.mpi_store (the default) rank 0 hosts a rendezvous store it announced
 * over MPI, so its timeout names rank 1; without it the message says MPI
 * cannot tell.  Rank 1's late all-reduce still completes: rank 0's timed-out
 * request stays posted in MPI. */
enum { CT_NO_STORE, CT_STORE, CT_STORE_REMOTE, CT_STORE_UNREACHABLE };

/* Capture this process's stderr (accel's log) into a file while on. */
static int g_cap_fd = -1, g_saved_fd = -1;
static char g_cap_path[64];

static void capture_start(void)
{
	strcpy(g_cap_path, "/tmp/accel-test-mpi-log-XXXXXX");
	fflush(stderr);
	g_cap_fd = mkstemp(g_cap_path);
	g_saved_fd = g_cap_fd >= 0 ? dup(2) : -1;
	if (g_saved_fd >= 0)
		dup2(g_cap_fd, 2);
}

/* Stop capturing; returns what was logged (malloc'ed) and echoes it. */
static char *capture_stop(void)
{
	char *log = calloc(1, 65536);
	fflush(stderr);
	if (g_saved_fd >= 0) {
		dup2(g_saved_fd, 2);
		close(g_saved_fd);
	}
	if (g_cap_fd >= 0) {
		ssize_t n = pread(g_cap_fd, log, 65535, 0);
		if (n < 0)
			n = 0;
		log[n] = '\0';
		close(g_cap_fd);
		unlink(g_cap_path);
		fputs(log, stderr);
	}
	g_cap_fd = g_saved_fd = -1;
	return log;
}

static void check_core_timeout(int kind)
{
	int use_store = kind == CT_STORE || kind == CT_STORE_REMOTE;
	setenv("ACCEL_LOG_ALL_RANKS", "1", 1);   /* read at the first context */
	unsetenv("ACCEL_MASTER_ADDR");
	unsetenv("ACCEL_MASTER_PORT");
	unsetenv("MASTER_ADDR");
	unsetenv("MASTER_PORT");
	const char *sets[] = {"backend=mpi", "comm.timeout_s=2", "log_level=debug",
	                      kind == CT_NO_STORE ? "comm.mpi_store=false" : NULL, NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	accel_ctx *ctx = NULL;
	capture_start();
	int rc = accel_ctx_new(&o, &ctx);
	char *log = capture_stop();
	CHECK(rc == ACCEL_OK, "core timeout (kind %d): accel_ctx_new: %s", kind,
	      ctx ? accel_errmsg(ctx) : accel_status_str(rc));
	if (kind == CT_STORE_REMOTE && g_rank == 1)
		CHECK(strstr(log, "connected to rank 0's rendezvous store at 127.0.0.2:") &&
		      strstr(log, "(rank 0's host name)"),
		      "rank 1 did not reach the store by rank 0's host name 127.0.0.2; log: %s", log);
	if (kind == CT_STORE_UNREACHABLE) {
		if (g_rank == 1)
			/* "cannot reach ..." or, behind a proxy that accepts every
			 * connection, "no reply from ..." */
			CHECK(strstr(log, "warn: no rendezvous store in this job: ") &&
			      strstr(log, " the rendezvous store at 192.0.2.1:"),
			      "rank 1 did not say why it has no store; log: %s", log);
		else
			CHECK(strstr(log, "warn: the job runs without a rendezvous store: rank 1 could "
			                  "not reach rank 0's store on 192.0.2.1:") &&
			      strstr(log, "comm.mpi_store=false"),
			      "rank 0 did not warn naming rank 1; log: %s", log);
		CHECK(!strstr(log, "have not finished with it"),
		      "dropping the store warned about ranks that never came; log: %s", log);
	}
	if (kind != CT_NO_STORE && kind != CT_STORE_UNREACHABLE)
		CHECK(!strstr(log, "warn:"), "warnings while making the store; log: %s", log);
	free(log);
	/* MPI may still write the timed-out all-reduce's buffer until the
	 * context is freed (comm ABI): it lives until after accel_ctx_free */
	float x = 1.0f;
	if (rc == ACCEL_OK) {
		if (g_rank == 1)
			sleep(4);
		time_t t0 = time(NULL);
		rc = accel_allreduce(ctx, &x, &x, 1, ACCEL_DTYPE_F32, ACCEL_RED_SUM);
		const char *msg = accel_errmsg(ctx);
		if (g_rank == 0) {
			CHECK(rc == ACCEL_ERR_TIMEOUT && time(NULL) - t0 < 10,
			      "core timeout (store %d): rank 0 got %s after %lds: %s", use_store,
			      accel_status_str(rc), (long)(time(NULL) - t0), msg);
			if (use_store)
				CHECK(strstr(msg, "rank 1 did not report reaching it") &&
				      strstr(msg, "asked through the rendezvous store"),
				      "core timeout with the store of comm.mpi_store: the message does "
				      "not name rank 1: %s", msg);
			else
				CHECK(strstr(msg, "MPI cannot tell which ranks are missing") &&
				      !strstr(msg, "rank 1 did not report"),
				      "core timeout with comm.mpi_store=false: %s", msg);
		} else {
			CHECK(rc == ACCEL_OK && x == 2.0f, "core timeout: the late rank's all-reduce: "
			      "%s, %g", rc ? msg : "ok", (double)x);
		}
	}
	accel_ctx_free(ctx);
	MPI_Barrier(MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("core timeout (kind %d: with%s a store) checked\n", kind,
		       use_store ? "" : "out");
}

/* shm needs the store while it starts, before the one comm.mpi_store makes
 * over MPI could exist: without ACCEL_MASTER_ADDR it must fail at once,
 * saying how to give it one. */
static void check_shm_needs_store(void)
{
	static const char *const sets[] = {"backend=shm", "comm.timeout_s=5", NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	accel_ctx *ctx = NULL;
	time_t t0 = time(NULL);
	int rc = accel_ctx_new(&o, &ctx);
	const char *msg = ctx ? accel_errmsg(ctx) : "";
	CHECK(rc == ACCEL_ERR_CONFIG && strstr(msg, "needs the rendezvous store") &&
	      strstr(msg, "ACCEL_MASTER_ADDR") && strstr(msg, "or use backend mpi") &&
	      time(NULL) - t0 < 4,
	      "backend shm under mpirun without a master address: %s, '%s'", accel_status_str(rc),
	      msg);
	accel_ctx_free(ctx);
	MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- main ------------------------------------------------------------------------------ */

static int finish(void)
{
	int total = 0;
	MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("%s: %d failed check(s) over %d ranks\n", total ? "FAIL" : "PASS", total,
		       g_world);
	return total ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int rc, level = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	B = NULL;
	if (!strcmp(mode, "--own-init")) {
		/* The backend initializes MPI; learn rank/world from the launcher's
		 * environment as the core does. */
		const char *r = getenv("OMPI_COMM_WORLD_RANK"), *w = getenv("OMPI_COMM_WORLD_SIZE");
		g_rank = r ? atoi(r) : 0;
		g_world = w ? atoi(w) : 1;
		B = load_backend();
		if (!B)
			return 1;
		int ini = 1;
		MPI_Initialized(&ini);
		CHECK(ini == 0, "MPI initialized before the backend");
		for (int k = 0; k < 2; k++) {
			inst in;
			rc = inst_open(&in, 1, 0, 60000, 0);
			CHECK(rc == ACCEL_OK, "own-init instance %d: %s", k, in.h.err);
			if (rc)
				return 1;
			CHECK(strstr(in.h.log, "MPI_THREAD_MULTIPLE, progress thread") != NULL,
			      "own-init: expected the progress thread at MPI_THREAD_MULTIPLE; log: %s",
			      in.h.log);
			check_allreduce(&in, ACCEL_DTYPE_BF16, ACCEL_RED_SUM, 4096, 0);
			check_allgather(&in, ACCEL_DTYPE_I64, 333, 1);
			inst_close(&in);
			int fin = 1;
			MPI_Finalized(&fin);
			CHECK(fin == 0, "MPI finalized by fini(); it must stay up for later contexts");
		}
		/* finalized at exit by the backend: mpirun fails the job otherwise */
		return finish();
	}

	if (!strcmp(mode, "--init-single"))
		rc = MPI_Init(&argc, &argv);
	else
		rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
	if (rc != MPI_SUCCESS)
		return 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_world);
	B = load_backend();
	if (!B) {
		MPI_Abort(MPI_COMM_WORLD, 1);
		return 1;
	}
	CHECK(B->probe && B->probe(&g_host_table, NULL) == 1,
	      "probe: not detected as started by an MPI launcher");

	if (!strcmp(mode, "--init-timeout")) {
		check_init_timeout();
	} else if (!strcmp(mode, "--core-timeout")) {
		check_core_timeout(CT_STORE);
		check_core_timeout(CT_NO_STORE);
		check_shm_needs_store();
	} else if (!strcmp(mode, "--store-remote")) {
		check_core_timeout(CT_STORE_REMOTE);
	} else if (!strcmp(mode, "--store-unreachable")) {
		check_core_timeout(CT_STORE_UNREACHABLE);
	} else if (!strcmp(mode, "--init-single")) {
		MPI_Query_thread(&level);
		inst in;
		rc = inst_open(&in, 1, 0, 60000, 0);
		CHECK(rc == ACCEL_OK, "init-single: %s", in.h.err);
		if (rc == ACCEL_OK) {
			if (level != MPI_THREAD_MULTIPLE)
				CHECK(strstr(in.h.log, "progress inside test/wait") != NULL,
				      "init-single: expected the no-thread fallback; log: %s", in.h.log);
			static const uint64_t counts[] = {5, 1000};
			check_all_ops(&in, counts, 2);
			check_async(&in);
			inst_close(&in);
		}
	} else {
		if (level != MPI_THREAD_MULTIPLE && g_rank == 0)
			printf("note: MPI gave %d, not MPI_THREAD_MULTIPLE\n", level);
		for (int pt = 1; pt >= 0 && !getenv("ACCEL_TEST_QUICK"); pt--) {
			suite_backend(pt, 0);
			suite_backend(pt, 5);   /* all-reduce, broadcast and 16-bit reduce-scatter
			                            in 5-element MPI calls */
			if (g_rank == 0)
				printf("backend checks (progress_thread=%d) done\n", pt);
		}
		check_world_mismatch();
		for (int pt = 1; pt >= 0; pt--)
			for (int poll = 0; poll < 2; poll++)
				check_timeout(pt, poll);
		/* once more with a rendezvous store: the timeout names the rank */
		if (g_rank == 0 && !mkdtemp(strcpy(g_store_dir, "/tmp/accel-test-mpi-XXXXXX")))
			g_store_dir[0] = '\0';
		MPI_Bcast(g_store_dir, sizeof(g_store_dir), MPI_CHAR, 0, MPI_COMM_WORLD);
		if (g_store_dir[0]) {
			g_host_table.store_set = fs_set;
			g_host_table.store_get = fs_get;
			g_host_table.store_add = fs_add;
			check_timeout(1, 0);
			check_timeout(0, 1);
			check_timeout(1, 2);
			g_host_table.store_set = NULL;
			g_host_table.store_get = NULL;
			g_host_table.store_add = NULL;
			MPI_Barrier(MPI_COMM_WORLD);
			if (g_rank == 0) {
				char cmd[128];
				snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_store_dir);
				CHECK(system(cmd) == 0, "cannot remove %s", g_store_dir);
			}
			g_store_dir[0] = '\0';
		}
		if (g_rank == 0)
			printf("failure-path checks done\n");
		suite_core();
	}
	/* a context freed after the program's MPI_Finalize makes no MPI call
	 * (Open MPI would abort the job) and says why it leaves its objects */
	inst late;
	int late_ok = mode[0] == '\0' && inst_open(&late, 1, 0, 60000, 0) == ACCEL_OK;
	rc = finish();
	MPI_Finalize();
	if (late_ok) {
		inst_close(&late);
		if (!strstr(late.h.log, "MPI was finalized before the accel context was freed")) {
			fprintf(stderr, "[rank %d] FAIL: fini after MPI_Finalize did not say so; "
			        "log: %s\n", g_rank, late.h.log);
			rc = 1;
		}
	}
	return rc;
}
