/* SPDX-License-Identifier: MIT */
/* tests/progs/comm-check.c: see comm-check.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm-check.h"
#include "backends/common/half.h"

#define GUARD 64
#define GUARD_BYTE 0xa5
#define JUNK_BYTE 0xcc

static const uint32_t k_red_dtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16,
                                        ACCEL_DTYPE_BF16, ACCEL_DTYPE_I32, ACCEL_DTYPE_I64};
static const uint32_t k_copy_dtypes[] = {ACCEL_DTYPE_F32, ACCEL_DTYPE_F64, ACCEL_DTYPE_F16,
                                         ACCEL_DTYPE_BF16, ACCEL_DTYPE_I32, ACCEL_DTYPE_I64,
                                         ACCEL_DTYPE_U8};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
static const char *const k_red_names[] = {"sum", "avg", "max", "min"};

/* Cheap 64-bit mixer (one multiply); good enough to decorrelate inputs. */
static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x9e3779b97f4a7c15ull;
	return x ^ (x >> 29);
}

static inline uint64_t key(int rank, uint64_t idx, uint32_t seed)
{
	return ((uint64_t)seed << 40) ^ ((uint64_t)(unsigned)rank << 56) ^ idx;
}

/* Values of (dtype, rank, seed) at indices first .. first+n-1.  Floats are
 * not dyadic (x 1e-3), so sums depend on the order of the additions and a
 * reduction in the wrong order shows up. */
static void gen_block(uint32_t dt, int rank, uint32_t seed, uint64_t first, uint64_t n, void *out)
{
	uint64_t k0 = key(rank, first, seed);
	switch (dt) {
	case ACCEL_DTYPE_F32: {
		float *o = out;
		for (uint64_t i = 0; i < n; i++)
			o[i] = (float)((int32_t)(mix(k0 + i) % 2000001u) - 1000000) * 1e-3f;
		break;
	}
	case ACCEL_DTYPE_F64: {
		double *o = out;
		for (uint64_t i = 0; i < n; i++)
			o[i] = (double)((int64_t)(mix(k0 + i) % 2000000001u) - 1000000000) * 1e-7;
		break;
	}
	case ACCEL_DTYPE_F16:
	case ACCEL_DTYPE_BF16: {
		uint16_t *o = out;
		for (uint64_t i = 0; i < n; i++) {
			float f = (float)((int32_t)(mix(k0 + i) % 20001u) - 10000) * 1e-3f;
			o[i] = dt == ACCEL_DTYPE_F16 ? accel_f32_to_f16(f) : accel_f32_to_bf16(f);
		}
		break;
	}
	case ACCEL_DTYPE_I32: {
		int32_t *o = out;
		for (uint64_t i = 0; i < n; i++)
			o[i] = (int32_t)(uint32_t)mix(k0 + i);
		break;
	}
	case ACCEL_DTYPE_I64: {
		int64_t *o = out;
		for (uint64_t i = 0; i < n; i++)
			o[i] = (int64_t)mix(k0 + i);
		break;
	}
	default: {
		uint8_t *o = out;
		for (uint64_t i = 0; i < n; i++)
			o[i] = (uint8_t)mix(k0 + i);
		break;
	}
	}
}

void comm_check_value(uint32_t dtype, int rank, uint64_t idx, uint32_t seed, void *out)
{
	gen_block(dtype, rank, seed, idx, 1, out);
}

static void fill(uint32_t dt, int rank, uint32_t seed, uint64_t first_idx, void *buf, uint64_t n)
{
	gen_block(dt, rank, seed, first_idx, n, buf);
}

#define RBLK 4096   /* elements per reference block */

#define COMBINE(t, x, op)                                                 \
	((op) == ACCEL_RED_MAX ? ((t) > (x) ? (t) : (x))                  \
	 : (op) == ACCEL_RED_MIN ? ((t) < (x) ? (t) : (x))                \
	                         : (t) + (x))

/* The reduction over all ranks of elements first .. first+n-1 (n <= RBLK),
 * as the contract defines it: rank order, f16/bf16 in f32 rounded once,
 * AVG = sum / world (integers truncate), integer sums wrap. */
static void expect_reduce_block(uint32_t dt, uint32_t op, int world, uint32_t seed, uint64_t first,
                                uint64_t n, void *out)
{
	static double acc_d[RBLK], val_d[RBLK];
	static float acc_f[RBLK], val_f[RBLK];
	static int64_t acc_i[RBLK], val_i[RBLK];
	static uint16_t val_h[RBLK];
	static int32_t val_i32[RBLK];
	for (int q = 0; q < world; q++) {
		switch (dt) {
		case ACCEL_DTYPE_F32:
			gen_block(dt, q, seed, first, n, val_f);
			for (uint64_t i = 0; i < n; i++)
				acc_f[i] = q ? COMBINE(acc_f[i], val_f[i], op) : val_f[i];
			break;
		case ACCEL_DTYPE_F16:
		case ACCEL_DTYPE_BF16:
			gen_block(dt, q, seed, first, n, val_h);
			for (uint64_t i = 0; i < n; i++) {
				float x = dt == ACCEL_DTYPE_F16 ? accel_f16_to_f32(val_h[i])
				                                : accel_bf16_to_f32(val_h[i]);
				acc_f[i] = q ? COMBINE(acc_f[i], x, op) : x;
			}
			break;
		case ACCEL_DTYPE_F64:
			gen_block(dt, q, seed, first, n, val_d);
			for (uint64_t i = 0; i < n; i++)
				acc_d[i] = q ? COMBINE(acc_d[i], val_d[i], op) : val_d[i];
			break;
		case ACCEL_DTYPE_I32:
			gen_block(dt, q, seed, first, n, val_i32);
			for (uint64_t i = 0; i < n; i++) {
				int32_t t = (int32_t)acc_i[i], x = val_i32[i];
				t = !q ? x
				    : op == ACCEL_RED_MAX ? (t > x ? t : x)
				    : op == ACCEL_RED_MIN ? (t < x ? t : x)
				                          : (int32_t)((uint32_t)t + (uint32_t)x);
				acc_i[i] = t;
			}
			break;
		case ACCEL_DTYPE_I64:
			gen_block(dt, q, seed, first, n, val_i);
			for (uint64_t i = 0; i < n; i++) {
				int64_t t = acc_i[i], x = val_i[i];
				acc_i[i] = !q ? x
				           : op == ACCEL_RED_MAX ? (t > x ? t : x)
				           : op == ACCEL_RED_MIN ? (t < x ? t : x)
				                                 : (int64_t)((uint64_t)t + (uint64_t)x);
			}
			break;
		default:
			break;
		}
	}
	for (uint64_t i = 0; i < n; i++) {
		switch (dt) {
		case ACCEL_DTYPE_F32: {
			float t = op == ACCEL_RED_AVG ? acc_f[i] / (float)world : acc_f[i];
			((float *)out)[i] = t;
			break;
		}
		case ACCEL_DTYPE_F16:
		case ACCEL_DTYPE_BF16: {
			float t = op == ACCEL_RED_AVG ? acc_f[i] / (float)world : acc_f[i];
			((uint16_t *)out)[i] = dt == ACCEL_DTYPE_F16 ? accel_f32_to_f16(t) : accel_f32_to_bf16(t);
			break;
		}
		case ACCEL_DTYPE_F64:
			((double *)out)[i] = op == ACCEL_RED_AVG ? acc_d[i] / (double)world : acc_d[i];
			break;
		case ACCEL_DTYPE_I32: {
			int32_t t = (int32_t)acc_i[i];
			((int32_t *)out)[i] = op == ACCEL_RED_AVG ? t / world : t;
			break;
		}
		case ACCEL_DTYPE_I64:
			((int64_t *)out)[i] = op == ACCEL_RED_AVG ? acc_i[i] / world : acc_i[i];
			break;
		default:
			break;
		}
	}
}

typedef struct bufs {
	char *a, *b;          /* each GUARD + cap + GUARD bytes */
	uint64_t cap;
} bufs;

static void guard_set(char *base, uint64_t used)
{
	memset(base, GUARD_BYTE, GUARD);
	memset(base + GUARD + used, GUARD_BYTE, GUARD);
}

static int guard_ok(const char *base, uint64_t used)
{
	for (int i = 0; i < GUARD; i++)
		if ((unsigned char)base[i] != GUARD_BYTE ||
		    (unsigned char)base[GUARD + used + (uint64_t)i] != GUARD_BYTE)
			return 0;
	return 1;
}

static accel_view mkview(uint32_t dt, void *data, uint64_t n)
{
	accel_view v = {.struct_size = sizeof(accel_view), .dtype = dt, .device = ACCEL_DEVICE_CPU,
	                .device_index = 0, .data = data, .numel = n};
	return v;
}

static void show(uint32_t dt, const void *p, char *buf, size_t cap)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: {
		float v;
		memcpy(&v, p, 4);
		snprintf(buf, cap, "%.9g", (double)v);
		break;
	}
	case ACCEL_DTYPE_F64: {
		double v;
		memcpy(&v, p, 8);
		snprintf(buf, cap, "%.17g", v);
		break;
	}
	case ACCEL_DTYPE_F16:
	case ACCEL_DTYPE_BF16: {
		uint16_t v;
		memcpy(&v, p, 2);
		snprintf(buf, cap, "0x%04x (%g)", v,
		         (double)(dt == ACCEL_DTYPE_F16 ? accel_f16_to_f32(v) : accel_bf16_to_f32(v)));
		break;
	}
	case ACCEL_DTYPE_I32: {
		int32_t v;
		memcpy(&v, p, 4);
		snprintf(buf, cap, "%d", (int)v);
		break;
	}
	case ACCEL_DTYPE_I64: {
		int64_t v;
		memcpy(&v, p, 8);
		snprintf(buf, cap, "%lld", (long long)v);
		break;
	}
	default:
		snprintf(buf, cap, "0x%02x", *(const unsigned char *)p);
		break;
	}
}

#define CASE_FMT "[rank %d] FAIL %s %s %s %s count=%llu: "

typedef struct kase {
	const char *op;
	uint32_t dt, red;
	const char *placement;
	uint64_t count;
} kase;

static int fail(const comm_check *cc, const kase *k, const char *detail)
{
	fprintf(stderr, CASE_FMT "%s\n", cc->rank, k->op, accel_abi_dtype_name(k->dt),
	        k->red < 4 ? k_red_names[k->red] : "-", k->placement, (unsigned long long)k->count,
	        detail);
	return 1;
}

/* Expected values of elements first .. first+n-1 (n <= RBLK) of the result. */
typedef void (*exp_fn)(const comm_check *cc, const kase *k, uint32_t seed, uint64_t first,
                       uint64_t n, void *out);

static int compare(const comm_check *cc, const kase *k, uint32_t seed, const char *got, uint64_t n,
                   exp_fn fn)
{
	static unsigned char want[RBLK * 8];
	size_t es = accel_abi_dtype_size(k->dt);
	for (uint64_t base = 0; base < n; base += RBLK) {
		uint64_t m = n - base < RBLK ? n - base : RBLK;
		fn(cc, k, seed, base, m, want);
		if (memcmp(got + base * es, want, m * es) == 0)
			continue;
		for (uint64_t i = 0; i < m; i++) {
			if (memcmp(got + (base + i) * es, want + i * es, es) == 0)
				continue;
			char a[64], b[64], d[200];
			show(k->dt, got + (base + i) * es, a, sizeof(a));
			show(k->dt, want + i * es, b, sizeof(b));
			snprintf(d, sizeof(d), "element %llu is %s, expected %s",
			         (unsigned long long)(base + i), a, b);
			return fail(cc, k, d);
		}
	}
	return 0;
}

static void exp_allreduce(const comm_check *cc, const kase *k, uint32_t seed, uint64_t first,
                          uint64_t n, void *out)
{
	expect_reduce_block(k->dt, k->red, cc->world, seed, first, n, out);
}
static void exp_reduce_scatter(const comm_check *cc, const kase *k, uint32_t seed, uint64_t first,
                               uint64_t n, void *out)
{
	expect_reduce_block(k->dt, k->red, cc->world, seed, (uint64_t)cc->rank * k->count + first, n,
	                    out);
}
static void exp_allgather(const comm_check *cc, const kase *k, uint32_t seed, uint64_t first,
                          uint64_t n, void *out)
{
	size_t es = accel_abi_dtype_size(k->dt);
	uint64_t cnt = k->count ? k->count : 1;
	(void)cc;
	for (uint64_t done = 0; done < n;) {
		uint64_t idx = first + done;
		uint64_t q = idx / cnt, off = idx % cnt;
		uint64_t seg = cnt - off < n - done ? cnt - off : n - done;
		gen_block(k->dt, (int)q, seed, off, seg, (char *)out + done * es);
		done += seg;
	}
}
static int g_root;
static void exp_broadcast(const comm_check *cc, const kase *k, uint32_t seed, uint64_t first,
                          uint64_t n, void *out)
{
	(void)cc;
	gen_block(k->dt, g_root, seed, first, n, out);
}

static int status_fail(const comm_check *cc, const kase *k, int st)
{
	char d[1200];
	snprintf(d, sizeof(d), "status %d: %s", st, cc->ops->errmsg(cc->ctx));
	cc->ops->clear(cc->ctx);
	return fail(cc, k, d);
}

static uint32_t g_seed = 1;

static int check_allreduce(comm_check *cc, bufs *b, uint32_t dt, uint32_t red, int inplace,
                           uint64_t n)
{
	kase k = {"allreduce", dt, red, inplace ? "in-place" : "out-of-place", n};
	size_t es = accel_abi_dtype_size(dt);
	uint32_t seed = g_seed++;
	char *s = b->a + GUARD, *r = inplace ? s : b->b + GUARD;
	guard_set(b->a, n * es);
	guard_set(b->b, n * es);
	fill(dt, cc->rank, seed, 0, s, n);
	if (!inplace)
		memset(r, JUNK_BYTE, n * es);
	accel_view vs = mkview(dt, n ? s : NULL, n), vr = mkview(dt, n ? r : NULL, n);
	int st = cc->ops->allreduce(cc->ctx, &vs, &vr, red);
	if (st)
		return status_fail(cc, &k, st);
	if (compare(cc, &k, seed, r, n, exp_allreduce))
		return 1;
	if (!guard_ok(b->a, n * es) || !guard_ok(b->b, n * es))
		return fail(cc, &k, "wrote outside the buffers");
	return 0;
}

/* placement 0: separate buffers; 1: recv = send + rank * n (in place, the
 * NCCL convention); 2: recv == send. */
static int check_reduce_scatter(comm_check *cc, bufs *b, uint32_t dt, uint32_t red, int placement,
                                uint64_t n)
{
	static const char *const pn[] = {"out-of-place", "in-place(rank block)", "in-place(send==recv)"};
	kase k = {"reduce_scatter", dt, red, pn[placement], n};
	size_t es = accel_abi_dtype_size(dt);
	uint64_t sn = n * (uint64_t)cc->world;
	uint32_t seed = g_seed++;
	char *s = b->a + GUARD;
	char *r = placement == 0 ? b->b + GUARD : placement == 1 ? s + (uint64_t)cc->rank * n * es : s;
	guard_set(b->a, sn * es);
	guard_set(b->b, n * es);
	fill(dt, cc->rank, seed, 0, s, sn);
	if (placement == 0)
		memset(r, JUNK_BYTE, n * es);
	accel_view vs = mkview(dt, sn ? s : NULL, sn), vr = mkview(dt, n ? r : NULL, n);
	int st = cc->ops->reduce_scatter(cc->ctx, &vs, &vr, red);
	if (st)
		return status_fail(cc, &k, st);
	if (compare(cc, &k, seed, r, n, exp_reduce_scatter))
		return 1;
	if (!guard_ok(b->a, sn * es) || !guard_ok(b->b, n * es))
		return fail(cc, &k, "wrote outside the buffers");
	return 0;
}

/* placement 0: separate; 1: send = recv + rank * n; 2: send == recv. */
static int check_allgather(comm_check *cc, bufs *b, uint32_t dt, int placement, uint64_t n)
{
	static const char *const pn[] = {"out-of-place", "in-place(rank block)", "in-place(send==recv)"};
	kase k = {"allgather", dt, 99, pn[placement], n};
	size_t es = accel_abi_dtype_size(dt);
	uint64_t rn = n * (uint64_t)cc->world;
	uint32_t seed = g_seed++;
	char *r = b->b + GUARD;
	char *s = placement == 0 ? b->a + GUARD : placement == 1 ? r + (uint64_t)cc->rank * n * es : r;
	guard_set(b->a, n * es);
	guard_set(b->b, rn * es);
	memset(r, JUNK_BYTE, rn * es);
	fill(dt, cc->rank, seed, 0, s, n);
	accel_view vs = mkview(dt, n ? s : NULL, n), vr = mkview(dt, rn ? r : NULL, rn);
	int st = cc->ops->allgather(cc->ctx, &vs, &vr);
	if (st)
		return status_fail(cc, &k, st);
	if (compare(cc, &k, seed, r, rn, exp_allgather))
		return 1;
	if (!guard_ok(b->a, n * es) || !guard_ok(b->b, rn * es))
		return fail(cc, &k, "wrote outside the buffers");
	return 0;
}

static int check_broadcast(comm_check *cc, bufs *b, uint32_t dt, int root, uint64_t n)
{
	char pl[32];
	snprintf(pl, sizeof(pl), "root=%d", root);
	kase k = {"broadcast", dt, 99, pl, n};
	size_t es = accel_abi_dtype_size(dt);
	uint32_t seed = g_seed++;
	char *p = b->a + GUARD;
	guard_set(b->a, n * es);
	if (cc->rank == root)
		fill(dt, cc->rank, seed, 0, p, n);
	else
		memset(p, JUNK_BYTE, n * es);
	accel_view v = mkview(dt, n ? p : NULL, n);
	int st = cc->ops->broadcast(cc->ctx, &v, root);
	if (st)
		return status_fail(cc, &k, st);
	g_root = root;
	if (compare(cc, &k, seed, p, n, exp_broadcast))
		return 1;
	if (!guard_ok(b->a, n * es))
		return fail(cc, &k, "wrote outside the buffer");
	return 0;
}

int comm_check_matrix(comm_check *cc)
{
	bufs b = {0};
	int failures = 0;
	uint64_t maxn = 0;
	for (int i = 0; i < cc->n_sizes; i++)
		if (cc->sizes[i] > maxn)
			maxn = cc->sizes[i];
	b.cap = maxn * (uint64_t)cc->world * 8;
	uint64_t total = b.cap + 2 * GUARD;
	if (cc->use_mem) {
		void *pa = NULL, *pb = NULL;
		int st = cc->ops->mem_alloc(cc->ctx, total, &pa);
		if (!st)
			st = cc->ops->mem_alloc(cc->ctx, total, &pb);
		if (st || !pa || !pb) {
			fprintf(stderr, "[rank %d] FAIL mem_alloc(%llu): %d %s\n", cc->rank,
			        (unsigned long long)total, st, cc->ops->errmsg(cc->ctx));
			return 1;
		}
		b.a = pa;
		b.b = pb;
	} else {
		b.a = malloc(total);
		b.b = malloc(total);
		if (!b.a || !b.b) {
			fprintf(stderr, "[rank %d] FAIL out of memory\n", cc->rank);
			free(b.a);
			free(b.b);
			return 1;
		}
	}

	for (int si = 0; si < cc->n_sizes; si++) {
		uint64_t n = cc->sizes[si];
		/* Every combination up to 100003 elements; at 300007 every reduction
		 * only when all_reds_large (else sum and min); at a million and more
		 * sum for every dtype and max for f32 (the kernels are the same
		 * per dtype at every size; large sizes test the pipeline). */
		int large = n >= 300000, huge = n >= 1000000;
		for (size_t di = 0; di < NELEM(k_red_dtypes); di++) {
			uint32_t dt = k_red_dtypes[di];
			for (uint32_t red = 0; red < 4; red++) {
				if (huge && red != ACCEL_RED_SUM && !(red == ACCEL_RED_MAX && dt == ACCEL_DTYPE_F32))
					continue;
				if (large && !huge && !cc->all_reds_large && red != ACCEL_RED_SUM &&
				    red != ACCEL_RED_MIN)
					continue;
				for (int ip = 0; ip < 2; ip++)
					failures += check_allreduce(cc, &b, dt, red, ip, n);
				for (int pl = 0; pl < 3; pl++)
					failures += check_reduce_scatter(cc, &b, dt, red, pl, n);
			}
		}
		for (size_t di = 0; di < NELEM(k_copy_dtypes); di++) {
			uint32_t dt = k_copy_dtypes[di];
			for (int pl = 0; pl < 3; pl++)
				failures += check_allgather(cc, &b, dt, pl, n);
			failures += check_broadcast(cc, &b, dt, 0, n);
			failures += check_broadcast(cc, &b, dt, cc->world - 1, n);
		}
	}
	if (cc->use_mem) {
		cc->ops->mem_free(cc->ctx, b.a);
		cc->ops->mem_free(cc->ctx, b.b);
	} else {
		free(b.a);
		free(b.b);
	}
	return failures;
}
