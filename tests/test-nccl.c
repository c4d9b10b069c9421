/* SPDX-License-Identifier: MIT */
/* tests/test-nccl.c: the nccl comm backend.
 *
 * Without arguments: a Check suite for everything that needs no GPU: the
 * unique-id bootstrap through a fake store, the translation of NCCL/CUDA
 * errors into statuses and messages, the dtype/reduction mapping, and
 * loading the module; and what init says without a GPU (the process hides
 * the machine's GPUs first, CUDA_VISIBLE_DEVICES empty, so that check runs
 * on a GPU machine too).
 *
 * With --gpu: the collectives on real GPUs (one rank per GPU, at most two,
 * one process each, bootstrapped through a file-based store), and the
 * stream model (ABI minor 4): a collective issued after a write queued on
 * the host's stream (behind a 200 ms host function) sees the written
 * values, and a request waited for with wait_stream() leaves the host free
 * (the calls return long before the stream has run) while the stream sees
 * the result.  Without a GPU it prints "skipped: no GPU" and exits 77,
 * which meson reports as SKIP. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/comm.h"
#include "backends/common/coll-missing.h"
#include "backends/nccl/nccl-impl.h"
#include "backends/common/half.h"

/* ---- a fake store for the bootstrap ------------------------------------------- */

#define FAKE_KEYS 16

typedef struct fake_store {
	char keys[FAKE_KEYS][64];
	unsigned char vals[FAKE_KEYS][256];
	uint64_t lens[FAKE_KEYS];
	int n;
	int calls;             /* store calls of any kind */
	int fail_add;          /* add returns this status when nonzero */
	int uid_result;        /* ncclResult_t the fake ncclGetUniqueId returns */
	int uid_calls;
	int64_t last_timeout;
	/* a job without a store: the id goes by broadcast over a fake wire */
	int no_store;
	int bcast_rank;        /* the rank making the next fake_bcast call */
	int bcast_calls;
	int bcast_fail;        /* fake_bcast returns this status when nonzero */
	int garble;            /* the wire delivers something else */
	unsigned char wire[256];
	uint64_t wire_len;
} fake_store;

static int fake_find(fake_store *fs, const char *key)
{
	for (int i = 0; i < fs->n; i++)
		if (!strcmp(fs->keys[i], key))
			return i;
	return -1;
}

static int fake_uid(void *ctx, ncclUniqueId *ret_id)
{
	fake_store *fs = ctx;
	fs->uid_calls++;
	if (fs->uid_result != ncclSuccess)
		return fs->uid_result;
	for (size_t i = 0; i < sizeof(ret_id->internal); i++)
		ret_id->internal[i] = (char)(i * 3 + (size_t)fs->uid_calls);
	return ncclSuccess;
}

static int fake_set(void *ctx, const char *key, const void *value, uint64_t len)
{
	fake_store *fs = ctx;
	fs->calls++;
	int i = fake_find(fs, key);
	if (i < 0) {
		ck_assert_int_lt(fs->n, FAKE_KEYS);
		i = fs->n++;
		snprintf(fs->keys[i], sizeof(fs->keys[i]), "%s", key);
	}
	ck_assert_uint_le(len, sizeof(fs->vals[i]));
	memcpy(fs->vals[i], value, len);
	fs->lens[i] = len;
	return ACCEL_OK;
}

static int fake_get(void *ctx, const char *key, void *buf, uint64_t cap, uint64_t *ret_len,
                    int64_t timeout_ms)
{
	fake_store *fs = ctx;
	fs->calls++;
	fs->last_timeout = timeout_ms;
	int i = fake_find(fs, key);
	if (i < 0)
		return ACCEL_ERR_TIMEOUT;
	memcpy(buf, fs->vals[i], fs->lens[i] < cap ? fs->lens[i] : cap);
	*ret_len = fs->lens[i];
	return ACCEL_OK;
}

static int fake_add(void *ctx, const char *key, int64_t delta, int64_t *ret_value)
{
	fake_store *fs = ctx;
	fs->calls++;
	if (fs->fail_add)
		return fs->fail_add;
	int i = fake_find(fs, key);
	int64_t v = 0;
	if (i >= 0)
		memcpy(&v, fs->vals[i], sizeof(v));
	v += delta;
	fake_set(ctx, key, &v, sizeof(v));
	fs->calls--;
	*ret_value = v;
	return ACCEL_OK;
}

static int fake_has_store(void *ctx)
{
	fake_store *fs = ctx;
	return fs->no_store ? ACCEL_ERR_UNSUPPORTED : ACCEL_OK;
}

/* Rank 0's call puts its bytes on the wire, every other rank's takes them. */
static int fake_bcast(void *ctx, void *buf, uint64_t len)
{
	fake_store *fs = ctx;
	fs->bcast_calls++;
	if (fs->bcast_fail)
		return fs->bcast_fail;
	ck_assert_uint_le(len, sizeof(fs->wire));
	if (fs->bcast_rank == 0) {
		memcpy(fs->wire, buf, len);
		fs->wire_len = len;
	} else {
		ck_assert_uint_eq(len, fs->wire_len);
		if (fs->garble)
			memset(buf, 'x', len);
		else
			memcpy(buf, fs->wire, len);
	}
	return ACCEL_OK;
}

static const nccl_boot_ops fake_ops = {fake_uid, fake_set, fake_get, fake_add, fake_has_store,
                                       fake_bcast};

START_TEST(test_bootstrap_two_ranks)
{
	fake_store fs = {0};
	ncclUniqueId a, b, c, d;
	char msg[1024] = "";
	/* rank 0 publishes, rank 1 reads the same bytes */
	ck_assert_int_eq(accel_nccl_bootstrap(&fake_ops, &fs, 0, 2, 5000, &a, NULL, msg, sizeof(msg)),
	                 ACCEL_OK);
	ck_assert_int_ge(fake_find(&fs, "nccl/uid/1"), 0);
	ck_assert_int_eq(accel_nccl_bootstrap(&fake_ops, &fs, 1, 2, 5000, &b, NULL, msg, sizeof(msg)),
	                 ACCEL_OK);
	ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
	ck_assert_int_eq(fs.uid_calls, 1);
	ck_assert_int_eq(fs.last_timeout, 5000);
	/* a second communicator gets its own key and id */
	ck_assert_int_eq(accel_nccl_bootstrap(&fake_ops, &fs, 0, 2, 5000, &c, NULL, msg, sizeof(msg)),
	                 ACCEL_OK);
	ck_assert_int_ge(fake_find(&fs, "nccl/uid/2"), 0);
	ck_assert_int_eq(accel_nccl_bootstrap(&fake_ops, &fs, 1, 2, 5000, &d, NULL, msg, sizeof(msg)),
	                 ACCEL_OK);
	ck_assert_int_eq(memcmp(&c, &d, sizeof(c)), 0);
	ck_assert_int_ne(memcmp(&a, &c, sizeof(a)), 0);
}
END_TEST

START_TEST(test_bootstrap_world_one_needs_no_store)
{
	fake_store fs = {0};
	ncclUniqueId id;
	char msg[256] = "";
	ck_assert_int_eq(accel_nccl_bootstrap(&fake_ops, &fs, 0, 1, 1000, &id, NULL, msg, sizeof(msg)),
	                 ACCEL_OK);
	ck_assert_int_eq(fs.calls, 0);
	ck_assert_int_eq(fs.uid_calls, 1);
}
END_TEST

START_TEST(test_bootstrap_rank0_missing)
{
	fake_store fs = {0};
	ncclUniqueId id;
	char msg[1024] = "";
	int rc = accel_nccl_bootstrap(&fake_ops, &fs, 1, 2, 2500, &id, NULL, msg, sizeof(msg));
	ck_assert_int_eq(rc, ACCEL_ERR_TIMEOUT);
	ck_assert_msg(strstr(msg, "rank 1") && strstr(msg, "rank 0 did not publish") &&
	              strstr(msg, "'nccl/uid/1'") && strstr(msg, "2.5 s") &&
	              strstr(msg, "backend \"nccl\""),
	              "message: %s", msg);
	ck_assert_int_eq(fs.uid_calls, 0);
}
END_TEST

START_TEST(test_bootstrap_wrong_length)
{
	fake_store fs = {0};
	ncclUniqueId id;
	char msg[1024] = "";
	int64_t one = 1, v;
	fake_add(&fs, "nccl/count/0", 1, &v);  /* as if rank 0 had run */
	(void)one;
	fake_set(&fs, "nccl/uid/1", "hello", 5);
	int rc = accel_nccl_bootstrap(&fake_ops, &fs, 1, 2, 1000, &id, NULL, msg, sizeof(msg));
	ck_assert_int_eq(rc, ACCEL_ERR_COMM);
	ck_assert_msg(strstr(msg, "holds 5 bytes") && strstr(msg, "not an NCCL id (128 bytes)"),
	              "message: %s", msg);
}
END_TEST

START_TEST(test_bootstrap_uid_failure)
{
	fake_store fs = {0};
	fs.uid_result = ncclSystemError;
	ncclUniqueId id;
	char msg[1024] = "";
	int rc = accel_nccl_bootstrap(&fake_ops, &fs, 0, 2, 1000, &id, NULL, msg, sizeof(msg));
	ck_assert_int_eq(rc, ACCEL_ERR_NCCL);
	ck_assert_msg(strstr(msg, "ncclGetUniqueId failed") && strstr(msg, "ncclSystemError") &&
	              strstr(msg, "NCCL_SOCKET_IFNAME"),
	              "message: %s", msg);
	ck_assert_int_lt(fake_find(&fs, "nccl/uid/1"), 0);  /* nothing published */
}
END_TEST

START_TEST(test_bootstrap_store_down)
{
	fake_store fs = {0};
	fs.fail_add = ACCEL_ERR_SYSTEM;
	ncclUniqueId id;
	char msg[1024] = "";
	int rc = accel_nccl_bootstrap(&fake_ops, &fs, 1, 4, 1000, &id, NULL, msg, sizeof(msg));
	ck_assert_int_eq(rc, ACCEL_ERR_SYSTEM);
	ck_assert_msg(strstr(msg, "rendezvous store") && strstr(msg, "rank 1"), "message: %s", msg);
	rc = accel_nccl_bootstrap(&fake_ops, &fs, 4, 4, 1000, &id, NULL, msg, sizeof(msg));
	ck_assert_int_eq(rc, ACCEL_ERR_INVALID_ARG);
}
END_TEST

/* ---- without a store: the id is broadcast over the host backend ---------------- */

static int boot_rank(fake_store *fs, int rank, int world, ncclUniqueId *id, int *via_store,
                     char *msg, size_t cap)
{
	fs->bcast_rank = rank;
	return accel_nccl_bootstrap(&fake_ops, fs, rank, world, 1000, id, via_store, msg, cap);
}

START_TEST(test_bootstrap_without_store_broadcasts)
{
	fake_store fs = {.no_store = 1};
	ncclUniqueId id[3];
	char msg[1024] = "";
	int via = -1;
	for (int r = 0; r < 3; r++) {
		ck_assert_int_eq(boot_rank(&fs, r, 3, &id[r], &via, msg, sizeof(msg)), ACCEL_OK);
		ck_assert_int_eq(via, 0);
	}
	ck_assert_int_eq(memcmp(&id[0], &id[1], sizeof(id[0])), 0);
	ck_assert_int_eq(memcmp(&id[0], &id[2], sizeof(id[0])), 0);
	ck_assert_int_eq(fs.uid_calls, 1);     /* rank 0 only */
	ck_assert_int_eq(fs.bcast_calls, 3);   /* one broadcast, every rank in it */
	ck_assert_int_eq(fs.calls, 0);         /* no store call */
	/* with a store the same ranks never broadcast */
	fake_store st = {0};
	ck_assert_int_eq(boot_rank(&st, 0, 2, &id[0], &via, msg, sizeof(msg)), ACCEL_OK);
	ck_assert_int_eq(via, 1);
	ck_assert_int_eq(boot_rank(&st, 1, 2, &id[1], &via, msg, sizeof(msg)), ACCEL_OK);
	ck_assert_int_eq(memcmp(&id[0], &id[1], sizeof(id[0])), 0);
	ck_assert_int_eq(st.bcast_calls, 0);
}
END_TEST

START_TEST(test_bootstrap_without_store_rank0_uid_fails)
{
	fake_store fs = {.no_store = 1, .uid_result = ncclSystemError};
	ncclUniqueId id;
	char msg[1024] = "";
	/* rank 0 still broadcasts (its failure), so the others do not wait */
	ck_assert_int_eq(boot_rank(&fs, 0, 2, &id, NULL, msg, sizeof(msg)), ACCEL_ERR_NCCL);
	ck_assert_msg(strstr(msg, "ncclGetUniqueId failed") && strstr(msg, "ncclSystemError"),
	              "message: %s", msg);
	ck_assert_int_eq(boot_rank(&fs, 1, 2, &id, NULL, msg, sizeof(msg)), ACCEL_ERR_NCCL);
	ck_assert_msg(strstr(msg, "rank 1") && strstr(msg, "rank 0 could not create") &&
	              strstr(msg, "ncclSystemError"), "message: %s", msg);
	ck_assert_int_eq(fs.bcast_calls, 2);
}
END_TEST

START_TEST(test_bootstrap_without_store_failures)
{
	ncclUniqueId id;
	char msg[1024] = "";
	/* the host broadcast fails: its status comes back, with what it was for */
	fake_store a = {.no_store = 1, .bcast_fail = ACCEL_ERR_TIMEOUT};
	ck_assert_int_eq(boot_rank(&a, 1, 2, &id, NULL, msg, sizeof(msg)), ACCEL_ERR_TIMEOUT);
	ck_assert_msg(strstr(msg, "rank 1") && strstr(msg, "broadcast of NCCL's unique id") &&
	              strstr(msg, "no rendezvous store"), "message: %s", msg);
	/* the broadcast carried something else: collectives out of step */
	fake_store b = {.no_store = 1, .garble = 1};
	ck_assert_int_eq(boot_rank(&b, 0, 2, &id, NULL, msg, sizeof(msg)), ACCEL_OK);
	ck_assert_int_eq(boot_rank(&b, 1, 2, &id, NULL, msg, sizeof(msg)), ACCEL_ERR_COMM);
	ck_assert_msg(strstr(msg, "carried something else") && strstr(msg, "different order"),
	              "message: %s", msg);
	/* no store and no broadcast channel */
	fake_store c = {.no_store = 1};
	nccl_boot_ops ops = fake_ops;
	ops.bcast = NULL;
	ck_assert_int_eq(accel_nccl_bootstrap(&ops, &c, 1, 2, 1000, &id, NULL, msg, sizeof(msg)),
	                 ACCEL_ERR_CONFIG);
	ck_assert_msg(strstr(msg, "no rendezvous store") && strstr(msg, "ACCEL_MASTER_ADDR"),
	              "message: %s", msg);
	/* one process needs neither */
	fake_store d = {.no_store = 1};
	ck_assert_int_eq(boot_rank(&d, 0, 1, &id, NULL, msg, sizeof(msg)), ACCEL_OK);
	ck_assert_int_eq(d.bcast_calls, 0);
}
END_TEST

/* The real ncclGetUniqueId needs a network interface but no GPU; NCCL
 * falls back to loopback when there is no other, so it must succeed on
 * any machine that runs this suite. */
static int real_uid(void *ctx, ncclUniqueId *ret_id)
{
	(void)ctx;
	return (int)ncclGetUniqueId(ret_id);
}

START_TEST(test_bootstrap_real_unique_id)
{
	fake_store fs = {0};
	nccl_boot_ops ops = fake_ops;
	ops.unique_id = real_uid;
	ncclUniqueId a, b;
	char msg[1024] = "";
	int rc = accel_nccl_bootstrap(&ops, &fs, 0, 2, 1000, &a, NULL, msg, sizeof(msg));
	ck_assert_msg(rc == ACCEL_OK, "rank 0 with the real ncclGetUniqueId: status %d (%s)", rc,
	              msg);
	ck_assert_int_eq(accel_nccl_bootstrap(&ops, &fs, 1, 2, 1000, &b, NULL, msg, sizeof(msg)),
	                 ACCEL_OK);
	ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
	ncclUniqueId zero;
	memset(&zero, 0, sizeof(zero));
	ck_assert_int_ne(memcmp(&a, &zero, sizeof(a)), 0);
}
END_TEST

START_TEST(test_error_nccl)
{
	static const struct {
		ncclResult_t r;
		const char *name, *hint;
	} cases[] = {
		{ncclUnhandledCudaError, "ncclUnhandledCudaError", "nvidia-smi"},
		{ncclSystemError, "ncclSystemError", "/dev/shm"},
		{ncclInternalError, "ncclInternalError", "NCCL_DEBUG=INFO"},
		{ncclInvalidArgument, "ncclInvalidArgument", "same count and dtype"},
		{ncclInvalidUsage, "ncclInvalidUsage", "cannot share a GPU"},
		{ncclRemoteError, "ncclRemoteError", "another rank's log"},
	};
	char buf[1024];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = accel_nccl_describe_nccl(cases[i].r, "ncclAllReduce", "peer 3 closed",
		                                  buf, sizeof(buf));
		/* a peer's failure is the comm ABI's dead peer */
		ck_assert_int_eq(rc, cases[i].r == ncclRemoteError ? ACCEL_ERR_PEER : ACCEL_ERR_NCCL);
		ck_assert_msg(strstr(buf, "ncclAllReduce failed: ") &&
		              strstr(buf, ncclGetErrorString(cases[i].r)) &&
		              strstr(buf, cases[i].name) && strstr(buf, ": peer 3 closed.") &&
		              strstr(buf, cases[i].hint),
		              "case %zu: %s", i, buf);
	}
	/* no detail: no dangling separator */
	accel_nccl_describe_nccl(ncclInternalError, "ncclCommInitRank", NULL, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "(ncclInternalError). ") != NULL, "%s", buf);
	accel_nccl_describe_nccl(ncclInternalError, NULL, "", buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "an NCCL call failed") != NULL, "%s", buf);
	/* truncation is safe */
	char small[16];
	accel_nccl_describe_nccl(ncclSystemError, "ncclAllReduce", "x", small, sizeof(small));
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

START_TEST(test_error_cuda)
{
	static const struct {
		cudaError_t e;
		const char *name, *hint;
	} cases[] = {
		{cudaErrorNoDevice, "cudaErrorNoDevice", "CUDA_VISIBLE_DEVICES"},
		{cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", "update the driver"},
		{cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "local rank"},
		{cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
		{cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "compute-sanitizer"},
	};
	char buf[1024];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = accel_nccl_describe_cuda(cases[i].e, "cudaMalloc", buf, sizeof(buf));
		ck_assert_int_eq(rc, ACCEL_ERR_CUDA);
		ck_assert_msg(strstr(buf, "cudaMalloc failed: ") &&
		              strstr(buf, cudaGetErrorString(cases[i].e)) &&
		              strstr(buf, cases[i].name) && strstr(buf, cases[i].hint),
		              "case %zu: %s", i, buf);
	}
}
END_TEST

START_TEST(test_dtype_map)
{
	ncclDataType_t t;
	ncclRedOp_t op;
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_F32, 1, &t) && t == ncclFloat32);
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_F64, 1, &t) && t == ncclFloat64);
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_F16, 1, &t) && t == ncclFloat16);
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_BF16, 1, &t) && t == ncclBfloat16);
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_I32, 1, &t) && t == ncclInt32);
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_I64, 1, &t) && t == ncclInt64);
	ck_assert(!accel_nccl_dtype(ACCEL_DTYPE_U8, 1, &t));
	ck_assert(!accel_nccl_dtype(ACCEL_DTYPE_F8E4M3, 1, &t));
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_F8E5M2, 0, &t) && t == ncclUint8);
	ck_assert(accel_nccl_dtype(ACCEL_DTYPE_U8, 0, &t) && t == ncclUint8);
	ck_assert(!accel_nccl_dtype(ACCEL_DTYPE_INVALID, 0, &t));
	ck_assert(!accel_nccl_dtype(99, 0, &t));
	ck_assert(accel_nccl_redop(ACCEL_RED_SUM, &op) && op == ncclSum);
	ck_assert(accel_nccl_redop(ACCEL_RED_AVG, &op) && op == ncclAvg);
	ck_assert(accel_nccl_redop(ACCEL_RED_MAX, &op) && op == ncclMax);
	ck_assert(accel_nccl_redop(ACCEL_RED_MIN, &op) && op == ncclMin);
	ck_assert(!accel_nccl_redop(4, &op));
	for (uint32_t d = 1; d < ACCEL_DTYPE_COUNT; d++)
		ck_assert_uint_gt(accel_abi_dtype_size(d), 0);
	ck_assert_uint_eq(accel_abi_dtype_size(ACCEL_DTYPE_BF16), 2);
	ck_assert_str_eq(accel_abi_dtype_name(ACCEL_DTYPE_BF16), "bf16");
}
END_TEST

/* ---- the module through a minimal host ----------------------------------------- */

struct accel_host {
	int err_code;
	char err[2048];
	int rank;
	const char *store_dir;   /* --gpu: file store shared by the ranks */
};

static void h_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	(void)h;
	if (!getenv("ACCEL_TEST_VERBOSE"))
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "log %d: ", level);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
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
		fprintf(stderr, "[rank %d] error %d: %s\n", h->rank, code, h->err);
	return code;
}

#include "file-store.h"

static accel_host_v1 g_host;
static void *g_user_stream;   /* what the fake host's stream() returns */

static void *h_stream(accel_host *h)
{
	(void)h;
	return g_user_stream;
}

static const accel_comm_v1 *load_nccl(void **ret_dl)
{
	char path[4096];
	const char *bd = getenv("ACCEL_TEST_BUILDDIR");
	snprintf(path, sizeof(path), "%s/backends/nccl/comm-nccl.so", bd ? bd : ".");
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
		return NULL;
	}
	*ret_dl = dl;
	g_host.struct_size = sizeof(g_host);
	g_host.abi_major = ACCEL_ABI_MAJOR;
	g_host.abi_minor = ACCEL_ABI_MINOR;
	g_host.accel_version = "test";
	g_host.log = h_log;
	g_host.error = h_error;
	g_host.store_set = fs_set;
	g_host.store_get = fs_get;
	g_host.store_add = fs_add;
	g_host.stream = h_stream;
	const accel_comm_v1 *(*entry)(const accel_host_v1 *) =
		(const accel_comm_v1 *(*)(const accel_host_v1 *))dlsym(dl, ACCEL_COMM_ENTRY_V1);
	return entry ? entry(&g_host) : NULL;
}

/* ---- naming the ranks that never arrived (backends/common/coll-missing.h) ---- */

static char *tmp_store(void)
{
	static char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/accel-test-missing-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	return dir;
}

static void rm_store(const char *dir)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void CUDART_CB sleep_200ms(void *arg)
{
	(void)arg;
	usleep(200000);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* World 4, op #7 timed out on rank 0: rank 1 reached it too, rank 2 is
 * stuck at #5 and rank 3 never wrote anything. */
START_TEST(test_missing_ranks_named)
{
	char *dir = tmp_store();
	accel_host h = {.rank = 0, .store_dir = dir};
	g_host.store_set = fs_set;
	g_host.store_get = fs_get;
	ck_assert_int_eq(fs_set(&h, "nccl/abc/reached/1", "7", 1), ACCEL_OK);
	ck_assert_int_eq(fs_set(&h, "nccl/abc/reached/2", "5", 1), ACCEL_OK);
	char buf[256];
	double t0 = now_s();
	int n = coll_missing_ranks(&g_host, &h, "nccl/abc", 0, 4, 7, 300, buf, sizeof(buf));
	double took = now_s() - t0;
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(buf,
	                 "rank 3 did not report reaching it within 0.3 s; rank 2 is still at #5");
	ck_assert_msg(took >= 0.25 && took < 2.0, "waited %.2f s (grace: the op's timeout, 0.3 s)",
	              took);
	ck_assert_int_eq(h.err_code, 0);  /* probes record no error */
	/* this rank's own record is there for the others */
	char v[16] = "";
	uint64_t len = 0;
	ck_assert_int_eq(fs_get(&h, "nccl/abc/reached/0", v, sizeof(v) - 1, &len, 0), ACCEL_OK);
	ck_assert_str_eq(v, "7");
	/* two absent ranks are listed together */
	n = coll_missing_ranks(&g_host, &h, "nccl/def", 2, 4, 3, 100, buf, sizeof(buf));
	ck_assert_int_eq(n, 3);
	ck_assert_str_eq(buf, "ranks 0, 1, 3 did not report reaching it within 0.1 s");
	rm_store(dir);
}
END_TEST

/* Every rank reached the op: nobody to name, and no waiting for the grace
 * period once all records are in.  A rank that records late (another
 * process, 0.2 s after) is still counted. */
START_TEST(test_missing_ranks_all_arrived)
{
	char *dir = tmp_store();
	accel_host h = {.rank = 1, .store_dir = dir};
	g_host.store_set = fs_set;
	g_host.store_get = fs_get;
	ck_assert_int_eq(fs_set(&h, "ns/reached/0", "9", 1), ACCEL_OK);
	pid_t p = fork();
	if (p == 0) {
		accel_host hc = {.rank = 2, .store_dir = dir};
		usleep(200000);
		_exit(fs_set(&hc, "ns/reached/2", "12", 2) == ACCEL_OK ? 0 : 1);
	}
	char buf[128];
	double t0 = now_s();
	int n = coll_missing_ranks(&g_host, &h, "ns", 1, 3, 9, 60000, buf, sizeof(buf));
	double took = now_s() - t0;
	int ws = 0;
	waitpid(p, &ws, 0);
	ck_assert_int_eq(n, 0);
	ck_assert_str_eq(buf, "");
	ck_assert_msg(took >= 0.15 && took < 1.5, "took %.2f s", took);
	rm_store(dir);
}
END_TEST

/* No store to ask: -1 and an empty text, so the caller says it cannot tell. */
START_TEST(test_missing_ranks_store_down)
{
	accel_host h = {.rank = 0, .store_dir = "/nonexistent/dir"};
	g_host.store_set = fs_set;
	g_host.store_get = fs_get;
	char buf[64] = "x";
	ck_assert_int_eq(coll_missing_ranks(&g_host, &h, "ns", 0, 2, 1, 100, buf, sizeof(buf)), -1);
	ck_assert_str_eq(buf, "");
	accel_host_v1 none = g_host;
	none.store_set = NULL;
	ck_assert_int_eq(coll_missing_ranks(&none, &h, "ns", 0, 2, 1, 100, buf, sizeof(buf)), -1);
	/* world 1: nobody can be missing */
	ck_assert_int_eq(coll_missing_ranks(&g_host, &h, "ns", 0, 1, 1, 100, buf, sizeof(buf)), -1);
}
END_TEST

/* The text of a timed-out collective, as the training thread builds it
 * after the watchdog aborted a stream-waited one (and after its own
 * timeouts): the store's answer names the missing rank. */
START_TEST(test_timeout_text_names_ranks)
{
	char *dir = tmp_store();
	accel_host h = {.rank = 0, .store_dir = dir};
	g_host.store_set = fs_set;
	g_host.store_get = fs_get;
	char missing[256], msg[1024];
	int n = coll_missing_ranks(&g_host, &h, "nccl/w", 0, 2, 4, 100, missing, sizeof(missing));
	ck_assert_int_eq(n, 1);
	accel_nccl_timeout_text(msg, sizeof(msg), "allreduce #4 (1024 x f32)", 1, 0.1,
	                        "rank 0 of 2", n, missing, 0);
	ck_assert_str_eq(msg, "allreduce #4 (1024 x f32), waited for on a stream, did not complete "
	                      "within 0.1 s on rank 0 of 2: rank 1 did not report reaching it "
	                      "within 0.1 s (asked through the rendezvous store). The "
	                      "communicator was aborted");
	rm_store(dir);
	/* on the host's watch, every rank there */
	accel_nccl_timeout_text(msg, sizeof(msg), "barrier #2", 0, 300.0, "rank 1 of 4", 0, "", 0);
	ck_assert_ptr_nonnull(strstr(msg, "barrier #2 did not complete within 300.0 s on rank 1 "
	                                  "of 4: every rank reached it"));
	/* no store: says so and what to do */
	accel_nccl_timeout_text(msg, sizeof(msg), "allgather #9", 1, 5.0, "rank 0 of 2", -1, "", 1);
	ck_assert_ptr_nonnull(strstr(msg, "waited for on a stream, did not complete within 5.0 s"));
	ck_assert_ptr_nonnull(strstr(msg, "no rendezvous store to ask which are missing"));
	ck_assert_ptr_null(strstr(msg, "asked through"));
	accel_nccl_timeout_text(msg, sizeof(msg), "allgather #9", 0, 5.0, "rank 0 of 2", -1, "", 0);
	ck_assert_ptr_nonnull(strstr(msg, "the store could not tell which are missing"));
	/* a short buffer is cut, terminated */
	char small[16];
	accel_nccl_timeout_text(small, sizeof(small), "allreduce #1", 0, 1.0, "rank 0 of 2", 0, "",
	                        0);
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

START_TEST(test_module_descriptor)
{
	void *dl = NULL;
	const accel_comm_v1 *B = load_nccl(&dl);
	ck_assert_ptr_nonnull(B);
	ck_assert_uint_ge(B->struct_size, sizeof(accel_comm_v1));
	ck_assert_str_eq(B->desc->name, "nccl");
	ck_assert_uint_eq(B->desc->devices, 1u << ACCEL_DEVICE_CUDA);
	ck_assert_uint_eq(B->desc->requires & ACCEL_REQ_CUDA, ACCEL_REQ_CUDA);
	ck_assert(B->init && B->fini && B->allreduce && B->reduce_scatter && B->allgather &&
	          B->broadcast && B->barrier && B->wait && B->test && B->probe && B->mem_alloc &&
	          B->mem_free && B->split);
	/* ABI 1.4: streams wait on its requests */
	ck_assert(ACCEL_COMM_HAS(B, accel_comm_v1, wait_stream) && B->wait_stream);
	/* ABI 1.3: what backend auto reads */
	ck_assert_uint_eq(B->desc->scope, ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES);
	ck_assert_int_eq(B->desc->preference, ACCEL_COMM_PREF_LAUNCHER);
	/* a host of another ABI major is refused with a message */
	accel_host_v1 old = g_host;
	old.abi_major = 2;
	const accel_comm_v1 *(*entry)(const accel_host_v1 *) =
		(const accel_comm_v1 *(*)(const accel_host_v1 *))dlsym(dl, ACCEL_COMM_ENTRY_V1);
	ck_assert_ptr_null(entry(&old));
}
END_TEST

/* On a machine without a GPU, init fails with a message, never a crash. */
START_TEST(test_init_without_gpu)
{
	void *dl = NULL;
	const accel_comm_v1 *B = load_nccl(&dl);
	ck_assert_ptr_nonnull(B);
	int n = 0;
	/* main() hid the GPUs (CUDA_VISIBLE_DEVICES empty), so this runs on a
	 * machine with one too */
	ck_assert_msg(cudaGetDeviceCount(&n) != cudaSuccess || n == 0,
	              "%d GPU(s) visible with CUDA_VISIBLE_DEVICES='%s'", n,
	              getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
	ck_assert_int_eq(B->probe(&g_host, NULL), 0);
	accel_host h = {.rank = 0, .store_dir = "/nonexistent"};
	accel_comm_init_v1 a = {.struct_size = sizeof(a), .rank = 0, .world_size = 1,
	                        .local_rank = 0, .local_world_size = 1, .num_nodes = 1,
	                        .device_index = -1, .timeout_ms = 1000, .job_id = "t"};
	void *st = (void *)&h;
	int rc = B->init(&g_host, &h, &a, &st);
	ck_assert_msg(rc == ACCEL_ERR_CUDA || rc == ACCEL_ERR_CONFIG, "rc %d: %s", rc, h.err);
	ck_assert_ptr_eq(st, (void *)&h);  /* ret_state untouched on failure */
	ck_assert_msg(strstr(h.err, "cuda") || strstr(h.err, "GPU"), "%s", h.err);
}
END_TEST

static Suite *nccl_suite(void)
{
	Suite *s = suite_create("nccl");
	TCase *tc = tcase_create("no-gpu");
	tcase_add_test(tc, test_bootstrap_two_ranks);
	tcase_add_test(tc, test_bootstrap_world_one_needs_no_store);
	tcase_add_test(tc, test_bootstrap_rank0_missing);
	tcase_add_test(tc, test_bootstrap_wrong_length);
	tcase_add_test(tc, test_bootstrap_uid_failure);
	tcase_add_test(tc, test_bootstrap_store_down);
	tcase_add_test(tc, test_bootstrap_real_unique_id);
	tcase_add_test(tc, test_bootstrap_without_store_broadcasts);
	tcase_add_test(tc, test_bootstrap_without_store_rank0_uid_fails);
	tcase_add_test(tc, test_bootstrap_without_store_failures);
	tcase_add_test(tc, test_error_nccl);
	tcase_add_test(tc, test_error_cuda);
	tcase_add_test(tc, test_dtype_map);
	tcase_add_test(tc, test_missing_ranks_named);
	tcase_add_test(tc, test_missing_ranks_all_arrived);
	tcase_add_test(tc, test_missing_ranks_store_down);
	tcase_add_test(tc, test_timeout_text_names_ranks);
	tcase_add_test(tc, test_module_descriptor);
	tcase_add_test(tc, test_init_without_gpu);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- --gpu: collectives on real devices ----------------------------------------------- */

static int g_failures;


static int g_rank, g_world;

#include "rank-check.h"

static size_t dsz(uint32_t dt)
{
	return accel_abi_dtype_size(dt);
}

static double val(int r, uint64_t i, uint32_t dt)
{
	if (dt == ACCEL_DTYPE_U8 || dt == ACCEL_DTYPE_F8E4M3)
		return (double)((i * 37 + (uint64_t)r * 101 + 5) % 256);
	if (dt == ACCEL_DTYPE_I32 || dt == ACCEL_DTYPE_I64)
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

static double ref_reduce(uint64_t i, uint32_t dt, uint32_t red)
{
	double acc = val(0, i, dt);
	for (int r = 1; r < g_world; r++) {
		double v = val(r, i, dt);
		acc = red == ACCEL_RED_MAX ? (v > acc ? v : acc)
		    : red == ACCEL_RED_MIN ? (v < acc ? v : acc) : acc + v;
	}
	if (red != ACCEL_RED_AVG)
		return acc;
	if (dt == ACCEL_DTYPE_I32 || dt == ACCEL_DTYPE_I64)
		return (double)((int64_t)acc / g_world);
	return acc / g_world;  /* exact for these inputs and world <= 2 */
}

typedef struct gpu_inst {
	accel_host h;
	void *st;
} gpu_inst;

static const accel_comm_v1 *GB;

static void *dev_alloc(gpu_inst *in, uint64_t bytes)
{
	void *p = NULL;
	int rc = GB->mem_alloc(in->st, ACCEL_DEVICE_CUDA, g_rank, bytes, &p);
	CHECK(rc == ACCEL_OK && p, "mem_alloc %llu: %s", (unsigned long long)bytes, in->h.err);
	return p;
}

static accel_view dview(uint32_t dt, void *p, uint64_t n)
{
	accel_view v = {sizeof(accel_view), dt, ACCEL_DEVICE_CUDA, g_rank, p, n};
	return v;
}

/* ip: 0 separate buffers; 1 in place, send == recv; 2 in place with the
 * rank's block at slot rank (NCCL's form; reduce_scatter and allgather). */
static void gpu_check_op(gpu_inst *in, int kind, uint32_t dt, uint32_t red, uint64_t n, int ip)
{
	size_t es = dsz(dt);
	uint64_t w = (uint64_t)g_world;
	uint64_t nin = kind == 2 ? n * w : n, nout = kind == 3 ? n * w : n;
	uint64_t cap = (nin > nout ? nin : nout);
	char *hin = calloc(cap, es), *hexp = calloc(cap, es), *hout = calloc(cap, es);
	char *whole = dev_alloc(in, cap * es), *din = whole, *dout = whole;
	if (ip == 0)
		dout = dev_alloc(in, cap * es);
	else if (ip == 2 && kind == 2)
		dout = whole + (size_t)g_rank * n * es;
	else if (ip == 2 && kind == 3)
		din = whole + (size_t)g_rank * n * es;
	for (uint64_t i = 0; i < nin; i++)
		put(hin, dt, i, val(g_rank, i, dt));
	for (uint64_t i = 0; i < nout; i++) {
		if (kind == 1)
			put(hexp, dt, i, ref_reduce(i, dt, red));
		else if (kind == 2)
			put(hexp, dt, i, ref_reduce((uint64_t)g_rank * n + i, dt, red));
		else if (kind == 3)
			put(hexp, dt, i, val((int)(i / n), i % n, dt));
		else
			put(hexp, dt, i, val(0, i, dt));
	}
	cudaMemcpy(din, hin, nin * es, cudaMemcpyHostToDevice);
	accel_view vi = dview(dt, din, nin), vo = dview(dt, dout, nout);
	accel_comm_req *req = NULL;
	in->h.err_code = 0;
	int rc = kind == 1 ? GB->allreduce(in->st, &vi, &vo, red, &req)
	       : kind == 2 ? GB->reduce_scatter(in->st, &vi, &vo, red, &req)
	       : kind == 3 ? GB->allgather(in->st, &vi, &vo, &req)
	                   : GB->broadcast(in->st, &vi, 0, &req);
	if (rc == ACCEL_OK)
		rc = GB->wait(in->st, req);
	CHECK(rc == ACCEL_OK, "op %d %s n=%llu: %s", kind, accel_abi_dtype_name(dt),
	       (unsigned long long)n, in->h.err);
	if (rc == ACCEL_OK) {
		cudaMemcpy(hout, kind == 4 ? din : dout, nout * es, cudaMemcpyDeviceToHost);
		for (uint64_t i = 0; i < nout; i++)
			if (memcmp(hout + i * es, hexp + i * es, es)) {
				CHECK(0, "op %d %s red %u n=%llu %s: element %llu differs", kind,
				       accel_abi_dtype_name(dt), red, (unsigned long long)n,
				       ip == 2 ? "in place (rank block)" : ip ? "in place" : "out of place",
				       (unsigned long long)i);
				break;
			}
	}
	GB->mem_free(in->st, whole);
	if (!ip)
		GB->mem_free(in->st, dout);
	free(hin);
	free(hexp);
	free(hout);
}

/* A communicator of its own for a timeout scenario (rank 0 gives up after
 * ms0, the others after ms_rest) and a 1024-float device buffer. */
typedef struct gpu_timeout {
	gpu_inst in;
	float *x;
	accel_view v;
} gpu_timeout;

static int timeout_open(gpu_timeout *t, accel_comm_init_v1 *a, const char *dir, int64_t ms0,
                        int64_t ms_rest)
{
	memset(t, 0, sizeof(*t));
	t->in.h.rank = g_rank;
	t->in.h.store_dir = dir;
	a->timeout_ms = g_rank == 0 ? ms0 : ms_rest;
	int rc = GB->init(&g_host, &t->in.h, a, &t->in.st);
	CHECK(rc == ACCEL_OK, "init for a timeout test: %s", t->in.h.err);
	if (rc != ACCEL_OK)
		return 0;
	t->x = dev_alloc(&t->in, 4096);
	t->v = dview(ACCEL_DTYPE_F32, t->x, 1024);
	t->in.h.err_code = 0;
	return 1;
}

static void timeout_close(gpu_timeout *t)
{
	GB->mem_free(t->in.st, t->x);
	GB->fini(t->in.st);
}

static int gpu_rank_main(const char *dir)
{
	void *dl = NULL;
	GB = load_nccl(&dl);
	if (!GB)
		return 1;
	gpu_inst in = {.h = {.rank = g_rank, .store_dir = dir}};
	accel_comm_init_v1 a = {.struct_size = sizeof(a), .rank = g_rank, .world_size = g_world,
	                        .local_rank = g_rank, .local_world_size = g_world, .num_nodes = 1,
	                        .device_index = g_rank, .timeout_ms = 60000, .job_id = "t"};
	int rc = GB->init(&g_host, &in.h, &a, &in.st);
	CHECK(rc == ACCEL_OK, "init: %s", in.h.err);
	if (rc)
		return 1;
	static const uint32_t rdt[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16,
	                               ACCEL_DTYPE_BF16, ACCEL_DTYPE_I32, ACCEL_DTYPE_I64};
	static const uint64_t counts[] = {0, 1, 1000, 1u << 20};
	for (size_t c = 0; c < 4; c++)
		for (size_t d = 0; d < 6; d++)
			for (uint32_t red = 0; red < 4; red++)
				for (int ip = 0; ip < 3; ip++) {
					if (ip < 2)
						gpu_check_op(&in, 1, rdt[d], red, counts[c], ip);
					gpu_check_op(&in, 2, rdt[d], red, counts[c], ip);
				}
	for (size_t c = 0; c < 4; c++)
		for (size_t d = 0; d < 6; d++)
			for (int ip = 0; ip < 3; ip++)
				gpu_check_op(&in, 3, rdt[d], 0, counts[c], ip);
	gpu_check_op(&in, 4, ACCEL_DTYPE_U8, 0, 4097, 1);
	gpu_check_op(&in, 4, ACCEL_DTYPE_BF16, 0, 4097, 1);
	/* async: several in flight, waited in reverse order */
	enum { N = 1 << 16 };
	float *d[4];
	accel_comm_req *req[5];
	for (int k = 0; k < 4; k++)
		d[k] = dev_alloc(&in, N * sizeof(float));
	float *h = malloc(N * sizeof(float));
	for (int i = 0; i < N; i++)
		h[i] = (float)val(g_rank, (uint64_t)i, ACCEL_DTYPE_F32);
	for (int k = 0; k < 4; k++)
		cudaMemcpy(d[k], h, N * sizeof(float), cudaMemcpyHostToDevice);
	in.h.err_code = 0;
	for (int k = 0; k < 4; k++) {
		accel_view v = dview(ACCEL_DTYPE_F32, d[k], N);
		CHECK(GB->allreduce(in.st, &v, &v, ACCEL_RED_SUM, &req[k]) == ACCEL_OK, "async: %s",
		       in.h.err);
	}
	CHECK(GB->barrier(in.st, &req[4]) == ACCEL_OK, "barrier: %s", in.h.err);
	int32_t done = 0;
	for (int spin = 0; spin < 100000 && !done; spin++) {
		CHECK(GB->test(in.st, req[4], &done) == ACCEL_OK, "test: %s", in.h.err);
		if (!done)
			usleep(100);
	}
	CHECK(done, "barrier never finished");
	for (int k = 4; k >= 0; k--)
		CHECK(GB->wait(in.st, req[k]) == ACCEL_OK, "wait %d: %s", k, in.h.err);
	for (int k = 0; k < 4; k++) {
		cudaMemcpy(h, d[k], N * sizeof(float), cudaMemcpyDeviceToHost);
		for (int i = 0; i < N; i++)
			if (h[i] != (float)ref_reduce((uint64_t)i, ACCEL_DTYPE_F32, ACCEL_RED_SUM)) {
				CHECK(0, "async allreduce %d: element %d is %g", k, i, h[i]);
				break;
			}
		GB->mem_free(in.st, d[k]);
	}
	free(h);
	/* bad arguments are refused with a message */
	accel_view host = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, &done, 1};
	accel_comm_req *r0 = NULL;
	in.h.err_code = 0;
	rc = GB->allreduce(in.st, &host, &host, ACCEL_RED_SUM, &r0);
	CHECK(rc == ACCEL_ERR_UNSUPPORTED && strstr(in.h.err, "this rank's GPU"), "cpu view: %d %s",
	       rc, in.h.err);
	/* a host pointer labelled cuda would fault NCCL's kernel: refused */
	float hbuf[4] = {0};
	accel_view lie = dview(ACCEL_DTYPE_F32, hbuf, 4);
	in.h.err_code = 0;
	rc = GB->allreduce(in.st, &lie, &lie, ACCEL_RED_SUM, &r0);
	CHECK(rc == ACCEL_ERR_INVALID_ARG && strstr(in.h.err, "ordinary host memory"),
	       "host pointer labelled cuda: %d %s", rc, in.h.err);
	/* the communicator still works after a refused call */
	float *one = dev_alloc(&in, sizeof(float));
	accel_view v1 = dview(ACCEL_DTYPE_F32, one, 1);
	in.h.err_code = 0;
	rc = GB->allreduce(in.st, &v1, &v1, ACCEL_RED_SUM, &r0);
	if (rc == ACCEL_OK)
		rc = GB->wait(in.st, r0);
	CHECK(rc == ACCEL_OK, "allreduce after a refused call: %s", in.h.err);
	GB->mem_free(in.st, one);

	/* streams: ordered after the host's stream; waited for by a stream */
	{
		enum { SN = 1 << 18 };
		cudaStream_t us = NULL;
		/* out of place: at world 1 an in-place sum changes nothing, so only
		 * the copy into rd shows whether the collective ran after the
		 * memset queued before it (a stale read leaves rd 0) */
		float *sd = dev_alloc(&in, SN * sizeof(float)), *sh = NULL;
		float *rd = dev_alloc(&in, SN * sizeof(float));
		CHECK(cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking) == cudaSuccess &&
		      cudaMallocHost((void **)&sh, SN * sizeof(float)) == cudaSuccess,
		      "stream and pinned buffer");
		cudaMemset(sd, 0, SN * sizeof(float));
		cudaMemset(rd, 0, SN * sizeof(float));
		cudaDeviceSynchronize();
		g_user_stream = us;
		accel_view sv = dview(ACCEL_DTYPE_F32, sd, SN), rv = dview(ACCEL_DTYPE_F32, rd, SN);
		/* every byte 0x3f: each float is 0x3f3f3f3f; the sum over the
		 * ranks is exact (world 1 or 2) */
		float one_val;
		uint32_t bits = 0x3f3f3f3fu;
		memcpy(&one_val, &bits, 4);
		float want = one_val * (float)g_world;
		double t0 = now_s();
		cudaLaunchHostFunc(us, sleep_200ms, NULL);
		cudaMemsetAsync(sd, 0x3f, SN * sizeof(float), us);
		in.h.err_code = 0;
		rc = GB->allreduce(in.st, &sv, &rv, ACCEL_RED_SUM, &r0);
		if (rc == ACCEL_OK)
			rc = GB->wait_stream(in.st, r0, us);
		double took = now_s() - t0;
		CHECK(rc == ACCEL_OK, "allreduce + wait_stream on a user stream: %s", in.h.err);
		CHECK(took < 0.15, "allreduce + wait_stream took %.3f s: the host waited for the "
		      "stream", took);
		cudaMemcpyAsync(sh, rd, SN * sizeof(float), cudaMemcpyDeviceToHost, us);
		CHECK(cudaStreamSynchronize(us) == cudaSuccess, "stream sync");
		uint64_t bad = 0;
		for (int i = 0; i < SN; i++)
			bad += sh[i] != want;
		CHECK(bad == 0, "stream-ordered allreduce: %llu of %d elements differ (first %g, "
		      "want %g)", (unsigned long long)bad, SN, (double)sh[0], (double)want);
		/* a host wait of a collective ordered after the stream works too */
		cudaMemset(sd, 0, SN * sizeof(float));
		cudaMemset(rd, 0, SN * sizeof(float));
		cudaDeviceSynchronize();
		cudaLaunchHostFunc(us, sleep_200ms, NULL);
		cudaMemsetAsync(sd, 0x3f, SN * sizeof(float), us);
		rc = GB->allreduce(in.st, &sv, &rv, ACCEL_RED_SUM, &r0);
		if (rc == ACCEL_OK)
			rc = GB->wait(in.st, r0);
		CHECK(rc == ACCEL_OK, "allreduce after the stream, host wait: %s", in.h.err);
		cudaMemcpy(sh, rd, SN * sizeof(float), cudaMemcpyDeviceToHost);
		bad = 0;
		for (int i = 0; i < SN; i++)
			bad += sh[i] != want;
		CHECK(bad == 0, "host-waited allreduce after the stream: %llu elements differ",
		      (unsigned long long)bad);
		g_user_stream = NULL;
		cudaFreeHost(sh);
		cudaStreamDestroy(us);
		GB->mem_free(in.st, sd);
		GB->mem_free(in.st, rd);
	}

	/* groups (ncclCommSplit): every rank alone (colour rank), then the
	 * whole world in one group, then colour NONE everywhere */
	{
		enum { GN = 1000 };
		int32_t me[1] = {g_rank}, all[2] = {0, 1};
		float *gd = dev_alloc(&in, GN * sizeof(float)), *gh = malloc(GN * sizeof(float));
		accel_view gv = dview(ACCEL_DTYPE_F32, gd, GN);
		for (int pass = 0; pass < 3; pass++) {
			char tag[16];
			snprintf(tag, sizeof(tag), "%dc%d", pass + 1, pass == 0 ? g_rank : 0);
			accel_comm_split_v1 sa = {
				.struct_size = sizeof(sa), .color = pass == 2 ? ACCEL_COMM_SPLIT_NONE
				                                             : pass == 0 ? g_rank : 0,
				.rank = pass == 0 ? 0 : pass == 1 ? g_rank : -1,
				.size = pass == 0 ? 1 : pass == 1 ? g_world : 0,
				.ranks = pass == 0 ? me : pass == 1 ? all : NULL,
				.parent_ranks = pass == 0 ? me : pass == 1 ? all : NULL, .tag = tag,
				.job_id = "t", .timeout_ms = 60000, .num_nodes = 1,
				.local_size = pass == 0 ? 1 : g_world};
			void *gs = (void *)&sa;
			in.h.err_code = 0;
			rc = GB->split(in.st, &sa, &gs);
			CHECK(rc == ACCEL_OK, "split %s: %s", tag, in.h.err);
			if (rc)
				break;
			if (pass == 2) {
				CHECK(gs == NULL, "colour NONE got a communicator");
				break;
			}
			for (int i = 0; i < GN; i++)
				gh[i] = (float)val(g_rank, (uint64_t)i, ACCEL_DTYPE_F32);
			cudaMemcpy(gd, gh, GN * sizeof(float), cudaMemcpyHostToDevice);
			rc = GB->allreduce(gs, &gv, &gv, ACCEL_RED_SUM, &r0);
			if (rc == ACCEL_OK)
				rc = GB->wait(gs, r0);
			CHECK(rc == ACCEL_OK, "group %s allreduce: %s", tag, in.h.err);
			cudaMemcpy(gh, gd, GN * sizeof(float), cudaMemcpyDeviceToHost);
			for (int i = 0; i < GN; i++) {
				float want = pass == 0 ? (float)val(g_rank, (uint64_t)i, ACCEL_DTYPE_F32)
				                       : (float)ref_reduce((uint64_t)i, ACCEL_DTYPE_F32,
				                                           ACCEL_RED_SUM);
				if (gh[i] != want) {
					CHECK(0, "group %s: element %d is %g, want %g", tag, i, gh[i], want);
					break;
				}
			}
			GB->fini(gs);
		}
		free(gh);
		GB->mem_free(in.st, gd);
	}
	GB->fini(in.st);

	/* timeout: rank 0 gives up after 0.5 s; rank 1 comes 2 s late */
	gpu_timeout t;
	if (g_world > 1 && timeout_open(&t, &a, dir, 500, 3000)) {
		if (g_rank != 0)
			sleep(2);
		rc = GB->allreduce(t.in.st, &t.v, &t.v, ACCEL_RED_SUM, &r0);
		if (rc == ACCEL_OK)
			rc = GB->wait(t.in.st, r0);
		if (g_rank == 0) {
			CHECK(rc == ACCEL_ERR_TIMEOUT && strstr(t.in.h.err, "allreduce #1") &&
			       strstr(t.in.h.err, "rank 1 did not report reaching it") &&
			       strstr(t.in.h.err, "aborted"),
			       "timeout: %d %s", rc, t.in.h.err);
			t.in.h.err_code = 0;
			rc = GB->allreduce(t.in.st, &t.v, &t.v, ACCEL_RED_SUM, &r0);
			CHECK(rc == ACCEL_ERR_TIMEOUT && strstr(t.in.h.err, "earlier NCCL call failed"),
			       "fail fast: %d %s", rc, t.in.h.err);
		} else {
			CHECK(rc != ACCEL_OK, "late rank: the collective of an aborted peer "
			       "cannot succeed");
		}
		timeout_close(&t);
	}

	/* timeout seen by test() alone, once the ranks are connected: rank 0
	 * polls allreduce #2 while rank 1 comes 4 s late */
	if (g_world > 1 && timeout_open(&t, &a, dir, 2000, 8000)) {
		rc = GB->allreduce(t.in.st, &t.v, &t.v, ACCEL_RED_SUM, &r0);
		if (rc == ACCEL_OK)
			rc = GB->wait(t.in.st, r0);
		CHECK(rc == ACCEL_OK, "warm-up allreduce: %s", t.in.h.err);
		if (g_rank != 0)
			sleep(4);
		t.in.h.err_code = 0;
		rc = GB->allreduce(t.in.st, &t.v, &t.v, ACCEL_RED_SUM, &r0);
		int32_t fin = 0;
		double t0 = (double)time(NULL);
		while (rc == ACCEL_OK && !fin && (double)time(NULL) - t0 < 30)
			if ((rc = GB->test(t.in.st, r0, &fin)) == ACCEL_OK && !fin)
				usleep(1000);
		if (g_rank == 0)
			CHECK(rc == ACCEL_ERR_TIMEOUT && strstr(t.in.h.err, "allreduce #2") &&
			       strstr(t.in.h.err, "rank 1 did not report reaching it"),
			       "timeout by test(): %d %s", rc, t.in.h.err);
		GB->wait(t.in.st, r0);
		timeout_close(&t);
	}
	return g_failures ? 1 : 0;
}

static int gpu_main(void)
{
	/* Count GPUs in a child so this process never initializes CUDA before
	 * forking the ranks. */
	pid_t p = fork();
	if (p == 0) {
		int n = 0;
		if (cudaGetDeviceCount(&n) != cudaSuccess)
			n = 0;
		_exit(n > 100 ? 100 : n);
	}
	int ws = 0;
	waitpid(p, &ws, 0);
	int ngpu = WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
	if (ngpu == 0) {
		printf("skipped: no GPU\n");
		return 77;
	}
	g_world = ngpu >= 2 ? 2 : 1;
	char dir[] = "/tmp/accel-test-nccl-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	pid_t kids[2];
	for (int r = 0; r < g_world; r++) {
		kids[r] = fork();
		if (kids[r] == 0) {
			g_rank = r;
			_exit(gpu_rank_main(dir));
		}
	}
	int failed = 0;
	for (int r = 0; r < g_world; r++) {
		waitpid(kids[r], &ws, 0);
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
			fprintf(stderr, "rank %d failed (status 0x%x)\n", r, ws);
			failed = 1;
		}
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "note: could not remove %s\n", dir);
	printf("%s: nccl collectives on %d GPU(s)\n", failed ? "FAIL" : "PASS", g_world);
	return failed;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--gpu"))
		return gpu_main();
	/* Without --gpu nothing here needs a GPU, and init_without_gpu checks
	 * what a machine without one reports: hide this machine's GPUs before
	 * any CUDA call, so that check runs (not passes unrun) where there is
	 * one. */
	if (setenv("CUDA_VISIBLE_DEVICES", "", 1))
		return 1;
	SRunner *sr = srunner_create(nccl_suite());
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
