/* SPDX-License-Identifier: MIT */
/* tests/test-zero-store.c: the zero plugin's optimizer shard store
 * (plugins/zero/zero_store.c) on a fake host (tests/zero-fake-host.h):
 * the same pieces, gradients and 5 AdamW steps give bit-identical masters,
 * optimizer state and working weights for every placement (device, cpu,
 * nvme), sub_group_size, device (host or a fake GPU whose asynchronous
 * copies run only when waited for) and host table (ABI 1.6, or 1.5
 * without optim_step_n and events), and equal an element-by-element
 * reference; where memory goes, by category; checkpoint ranges across
 * pieces and sub-groups; refusals. */
#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zero-fake-host.h"
#include "zero_store.h"

#define N_PIECES 4
#define N_STEPS 5
#define SG_HUGE (UINT64_C(1) << 40)

/* the shard: parameter, its dtype and size, the run owned, its gradient dtype */
static const struct {
	const char *name;
	uint32_t dtype;
	uint64_t numel, offset, run;
	uint32_t gdtype;
} shard[N_PIECES] = {
	{"a", ACCEL_DTYPE_F32, 5000, 1200, 3800, ACCEL_DTYPE_F32},
	{"b", ACCEL_DTYPE_BF16, 7000, 0, 7000, ACCEL_DTYPE_BF16},
	{"c", ACCEL_DTYPE_F16, 2600, 0, 2600, ACCEL_DTYPE_F32},
	{"d", ACCEL_DTYPE_F32, 1500, 0, 900, ACCEL_DTYPE_F16},
};

static uint64_t total(void)
{
	uint64_t n = 0;
	for (int i = 0; i < N_PIECES; i++)
		n += shard[i].run;
	return n;
}

static float rnd(uint64_t seed, uint64_t i)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 29;
	return (float)((double)(x >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static char tmpdir[256];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "%s/zero-store-XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

typedef struct cfg {
	uint32_t place;
	int32_t dev;          /* ACCEL_DEVICE_CPU or _CUDA (fake) */
	int minimal;          /* host of ABI 1.5 */
	uint64_t sg;
	int miw;              /* master_is_work for the f32 pieces (device placement) */
	uint32_t nbuf;        /* NVMe buffer_count */
	int scale_dev;        /* grad_scale_dev (device placement on the GPU) */
} cfg;

typedef struct result {
	float *arr[3];        /* masters, state 0, state 1 */
	void *work[N_PIECES];
	uint64_t async_copies;
	uint64_t optim_n_calls;   /* host->optim_step_n calls */
} result;

typedef struct rig {
	fake_host fh;
	zero_piece pc[N_PIECES];
	zero_store_opts o;
	zero_store *st;
} rig;

static void rig_init(rig *g, const cfg *c)
{
	memset(g, 0, sizeof(*g));
	fake_host_init(&g->fh, 2);
	if (c->minimal)
		fake_host_minimal(&g->fh);
	accel_host *h = fake_h(&g->fh);
	for (int i = 0; i < N_PIECES; i++) {
		fake_add_param(&g->fh, shard[i].name, shard[i].dtype, shard[i].numel, c->dev);
		zero_piece *p = &g->pc[i];
		p->param = (uint32_t)i;
		p->grad_dtype = shard[i].gdtype;
		p->param_offset = shard[i].offset;
		p->numel = shard[i].run;
		ck_assert_int_eq(fake_mem_alloc(h, ACCEL_MEM_PARAMS, c->dev, 0,
		                                shard[i].run * accel_abi_dtype_size(shard[i].dtype), 0,
		                                &p->work), 0);
		void *gr = NULL;
		ck_assert_int_eq(fake_mem_alloc(h, ACCEL_MEM_GRADS, c->dev, 0,
		                                shard[i].run * accel_abi_dtype_size(shard[i].gdtype), 0,
		                                &gr), 0);
		p->grad = gr;
		p->master_is_work = c->miw && shard[i].dtype == ACCEL_DTYPE_F32;
	}
	g->o.place = c->place;
	g->o.n_state = 2;
	g->o.device = c->dev;
	g->o.sub_group_size = c->sg;
	g->o.pin_memory = 1;
	g->o.buffer_count = c->nbuf ? c->nbuf : 4;
	g->o.nvme_path = tmpdir;
	g->o.nvme_key = "zero_optimization.offload_optimizer.nvme_path";
	zero_aio_opts_default(&g->o.aio);
	g->o.aio.block_size = 8192;   /* several requests per sub-group */
	g->o.aio.queue_depth = 4;
}

static void rig_free(rig *g)
{
	accel_host *h = fake_h(&g->fh);
	g->st = zero_store_free(g->st);
	for (int i = 0; i < N_PIECES; i++) {
		fake_mem_free(h, g->pc[i].work);
		fake_mem_free(h, (void *)(uintptr_t)g->pc[i].grad);
	}
	ck_assert_int_eq(g->fh.nalloc, 0);   /* the store freed all it took */
	fake_host_fini(&g->fh);
}

/* Each step updated each element of the shard once, and nothing else. */
static void check_touched(rig *g)
{
	for (int i = 0; i < N_PIECES; i++) {
		/* one assertion per parameter: Check's asserts cost a write each */
		uint64_t bad = shard[i].numel;
		for (uint64_t j = 0; j < shard[i].numel && bad == shard[i].numel; j++) {
			int own = j >= shard[i].offset && j < shard[i].offset + shard[i].run;
			if (g->fh.touched[i][j] != own)
				bad = j;
		}
		ck_assert_msg(bad == shard[i].numel, "parameter %s element %llu updated %d times",
		              shard[i].name, (unsigned long long)bad,
		              bad < shard[i].numel ? g->fh.touched[i][bad] : 0);
		memset(g->fh.touched[i], 0, shard[i].numel);
	}
}

/* initial masters: rnd(1, i) over the store's space */
static void write_masters(rig *g)
{
	uint64_t n = total();
	float *m = malloc(n * 4);
	ck_assert_ptr_nonnull(m);
	for (uint64_t i = 0; i < n; i++)
		m[i] = rnd(1, i);
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, m, n};
	ck_assert_int_eq(zero_store_write(g->st, 0, 0, &v), 0);
	free(m);
	ck_assert_int_eq(zero_store_refresh_work(g->st), 0);
}

static void fill_grads(rig *g, int step)
{
	uint64_t at = 0;
	for (int i = 0; i < N_PIECES; i++) {
		for (uint64_t j = 0; j < shard[i].run; j++)
			fake_store((void *)(uintptr_t)g->pc[i].grad, shard[i].gdtype, j,
			           0.5f * (float)(step + 1) * rnd(100 + (uint64_t)step, at + j));
		at += shard[i].run;
	}
}

static double scale_of(int step)
{
	return 1.0 / (double)(step + 2);
}

static void run_cfg(const cfg *c, result *res)
{
	rig g;
	rig_init(&g, c);
	accel_host *h = fake_h(&g.fh);
	int rc = zero_store_new(&g.fh.H, h, &g.o, g.pc, N_PIECES, &g.st);
	ck_assert_msg(rc == 0, "zero_store_new: %s", g.fh.last_err);
	ck_assert_uint_eq(zero_store_numel(g.st), total());
	write_masters(&g);
	double *sdev = NULL;
	if (c->scale_dev)
		ck_assert_int_eq(fake_mem_alloc(h, ACCEL_MEM_BUFFERS, c->dev, 0, 8, 0, (void **)&sdev), 0);
	for (int s = 0; s < N_STEPS; s++) {
		fill_grads(&g, s);
		g.fh.t = (uint64_t)s + 1;
		if (sdev)
			*sdev = scale_of(s);
		rc = zero_store_step(g.st, sdev ? 99.0 : scale_of(s), sdev);
		ck_assert_msg(rc == 0, "step %d: %s", s, g.fh.last_err);
		check_touched(&g);
	}
	ck_assert_uint_eq(g.fh.nq, g.fh.ran);   /* nothing left queued */
	zero_store_stats stats;
	zero_store_get_stats(g.st, &stats);
	ck_assert_uint_eq(stats.steps, N_STEPS);
	if (c->place == ZERO_PLACE_NVME) {
		/* every sub-group in and out once a step (and once more for the
		 * masters' write, refresh_work and the reads below) */
		ck_assert_uint_ge(stats.bytes_swapped_in, (uint64_t)N_STEPS * total() * 12);
		ck_assert_uint_ge(stats.bytes_swapped_out, (uint64_t)N_STEPS * total() * 12);
	} else {
		ck_assert_uint_eq(stats.bytes_swapped_in, 0);
	}
	uint64_t n = total();
	for (int a = 0; a < 3; a++) {
		res->arr[a] = malloc(n * 4);
		ck_assert_ptr_nonnull(res->arr[a]);
		accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, res->arr[a], n};
		ck_assert_int_eq(zero_store_read(g.st, (uint32_t)a, 0, &v), 0);
	}
	for (int i = 0; i < N_PIECES; i++) {
		size_t b = shard[i].run * accel_abi_dtype_size(shard[i].dtype);
		res->work[i] = malloc(b);
		memcpy(res->work[i], g.pc[i].work, b);
	}
	res->async_copies = g.fh.async_copies;
	res->optim_n_calls = g.fh.optim_n_calls;
	if (sdev)
		fake_mem_free(h, sdev);
	rig_free(&g);
	if (c->place == ZERO_PLACE_NVME)
		ck_assert_int_eq(dir_entries(tmpdir), 0);
}

static void result_free(result *r)
{
	for (int a = 0; a < 3; a++)
		free(r->arr[a]);
	for (int i = 0; i < N_PIECES; i++)
		free(r->work[i]);
}

/* The reference: every element stepped on its own, in a plain loop. */
static void reference(result *r)
{
	uint64_t n = total();
	fake_host fh;
	fake_host_init(&fh, 2);
	for (int a = 0; a < 3; a++)
		r->arr[a] = calloc(n, 4);
	for (uint64_t i = 0; i < n; i++)
		r->arr[0][i] = rnd(1, i);
	uint64_t at = 0;
	for (int p = 0; p < N_PIECES; p++) {
		for (uint64_t j = 0; j < shard[p].run; j++) {
			uint64_t i = at + j;
			for (int s = 0; s < N_STEPS; s++) {
				/* the gradient as stored in its dtype */
				uint16_t hb;
				float g = 0.5f * (float)(s + 1) * rnd(100 + (uint64_t)s, i);
				if (shard[p].gdtype != ACCEL_DTYPE_F32) {
					fake_store(&hb, shard[p].gdtype, 0, g);
					g = fake_load(&hb, shard[p].gdtype, 0);
				}
				fh.t = (uint64_t)s + 1;
				fake_update(&fh, &r->arr[0][i], g * (float)scale_of(s), &r->arr[1][i],
				            &r->arr[2][i]);
			}
		}
		size_t es = accel_abi_dtype_size(shard[p].dtype);
		r->work[p] = malloc(shard[p].run * es);
		for (uint64_t j = 0; j < shard[p].run; j++)
			fake_store(r->work[p], shard[p].dtype, j, r->arr[0][at + j]);
		at += shard[p].run;
	}
}

static void assert_same(const result *a, const result *b, const char *what)
{
	uint64_t n = total();
	static const char *const names[3] = {"masters", "exp_avg", "exp_avg_sq"};
	for (int k = 0; k < 3; k++) {
		uint64_t bad = n;
		for (uint64_t i = 0; i < n && bad == n; i++)
			if (memcmp(&a->arr[k][i], &b->arr[k][i], 4))
				bad = i;
		ck_assert_msg(bad == n, "%s: %s differ first at element %llu: %.9g vs %.9g", what,
		              names[k], (unsigned long long)bad, bad < n ? a->arr[k][bad] : 0.0,
		              bad < n ? b->arr[k][bad] : 0.0);
	}
	for (int i = 0; i < N_PIECES; i++)
		ck_assert_msg(!memcmp(a->work[i], b->work[i],
		                      shard[i].run * accel_abi_dtype_size(shard[i].dtype)),
		              "%s: working weights of %s differ", what, shard[i].name);
}

static void cfg_name(const cfg *c, char *buf, size_t cap)
{
	snprintf(buf, cap, "place %s, %s, %s host, sub_group %llu, master_is_work %d, buffers %u%s",
	         c->place == ZERO_PLACE_DEVICE ? "device" : c->place == ZERO_PLACE_CPU ? "cpu" : "nvme",
	         c->dev == ACCEL_DEVICE_CPU ? "cpu" : "fake gpu", c->minimal ? "1.5" : "1.6",
	         (unsigned long long)c->sg, c->miw, c->nbuf, c->scale_dev ? ", grad_scale_dev" : "");
}

/* Every placement, sub-group size, device and host: the same bits as the
 * element-by-element reference. */
START_TEST(parity)
{
	make_tmpdir();
	result ref;
	reference(&ref);
	/* the reference's values moved: the test is not vacuous */
	ck_assert_float_ne(ref.arr[0][0], rnd(1, 0));
	ck_assert_float_ne(ref.arr[2][total() - 1], 0.0f);

	const uint64_t sgs[] = {1000, 4096, SG_HUGE};
	cfg cs[64];
	int nc = 0;
	for (int dev = 0; dev < 2; dev++)
		for (int minimal = 0; minimal < 2; minimal++) {
			int32_t d = dev ? ACCEL_DEVICE_CUDA : ACCEL_DEVICE_CPU;
			for (int miw = 0; miw < 2; miw++)
				cs[nc++] = (cfg){ZERO_PLACE_DEVICE, d, minimal, 0, miw, 0,
				                 dev && !minimal && miw};
			for (int s = 0; s < 3; s++) {
				cs[nc++] = (cfg){ZERO_PLACE_CPU, d, minimal, sgs[s], 0, 0, 0};
				cs[nc++] = (cfg){ZERO_PLACE_NVME, d, minimal, sgs[s], 0, s == 0 ? 2u : 4u, 0};
			}
		}
	cs[nc++] = (cfg){ZERO_PLACE_NVME, ACCEL_DEVICE_CPU, 0, 1000, 0, 3, 0};
	cs[nc++] = (cfg){ZERO_PLACE_NVME, ACCEL_DEVICE_CUDA, 0, 4096, 0, 3, 0};
	for (int i = 0; i < nc; i++) {
		char name[256];
		cfg_name(&cs[i], name, sizeof(name));
		result r;
		run_cfg(&cs[i], &r);
		assert_same(&ref, &r, name);
		/* on a GPU with events, the offloaded step's copies are asynchronous */
		if (cs[i].dev == ACCEL_DEVICE_CUDA && cs[i].place != ZERO_PLACE_DEVICE)
			ck_assert_msg(cs[i].minimal ? r.async_copies == 0 : r.async_copies > 0, "%s", name);
		/* the host's threads (optim_step_n) wherever the step runs on the
		 * host and the host has them: once a step on the device
		 * placement, once per sub-group offloaded */
		uint64_t want = 0;
		if (!cs[i].minimal && cs[i].place == ZERO_PLACE_DEVICE && cs[i].dev == ACCEL_DEVICE_CPU)
			want = N_STEPS;
		if (!cs[i].minimal && cs[i].place != ZERO_PLACE_DEVICE) {
			uint64_t sg = cs[i].sg < total() ? cs[i].sg : total();
			want = N_STEPS * ((total() + sg - 1) / sg);
		}
		ck_assert_msg(r.optim_n_calls == want, "%s: %llu optim_step_n calls, not %llu", name,
		              (unsigned long long)r.optim_n_calls, (unsigned long long)want);
		result_free(&r);
	}
	result_free(&ref);
	rmdir(tmpdir);
}
END_TEST

/* Where memory goes (categories, device, pinned). */
START_TEST(categories)
{
	make_tmpdir();
	static const struct {
		uint32_t place;
		int32_t dev;
		int pin;
		int master_dev, optim_dev, offload_host, offload_pinned;
		uint64_t sg;   /* 0: 4096 (4 sub-groups) */
	} rows[] = {
		/* device: masters (3 non-f32 or not master_is_work pieces: 2 with
		 * miw on a and d) and 2 state arrays where the parameters are */
		{ZERO_PLACE_DEVICE, ACCEL_DEVICE_CUDA, 1, 1, 2, 0, 0, 0},
		{ZERO_PLACE_DEVICE, ACCEL_DEVICE_CPU, 1, 1, 2, 0, 0, 0},
		/* cpu on a GPU: masters + 2 states + 2x2 staging, pinned */
		{ZERO_PLACE_CPU, ACCEL_DEVICE_CUDA, 1, 0, 0, 7, 7, 0},
		{ZERO_PLACE_CPU, ACCEL_DEVICE_CUDA, 0, 0, 0, 7, 0, 0},
		/* cpu with host parameters: nothing to pin, no staging */
		{ZERO_PLACE_CPU, ACCEL_DEVICE_CPU, 1, 0, 0, 3, 0, 0},
		/* nvme: 4 swap buffers (+ 4 staging on a GPU), no masters in memory */
		{ZERO_PLACE_NVME, ACCEL_DEVICE_CPU, 1, 0, 0, 4, 0, 0},
		{ZERO_PLACE_NVME, ACCEL_DEVICE_CUDA, 1, 0, 0, 8, 4, 0},
		/* one sub-group: one swap buffer (min(buffer_count, sub-groups),
		 * as zero_estimate.c counts them) */
		{ZERO_PLACE_NVME, ACCEL_DEVICE_CPU, 1, 0, 0, 1, 0, SG_HUGE},
		{ZERO_PLACE_CPU, ACCEL_DEVICE_CUDA, 1, 0, 0, 7, 7, SG_HUGE},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		cfg c = {rows[i].place, rows[i].dev, 0, rows[i].sg ? rows[i].sg : 4096,
		         rows[i].place == ZERO_PLACE_DEVICE, 4, 0};
		rig g;
		rig_init(&g, &c);
		g.o.pin_memory = rows[i].pin;
		ck_assert_int_eq(zero_store_new(&g.fh.H, fake_h(&g.fh), &g.o, g.pc, N_PIECES, &g.st), 0);
		int dev = rows[i].dev;
		ck_assert_msg(fake_count(&g.fh, ACCEL_MEM_MASTER, dev, 0) == rows[i].master_dev,
		              "row %zu: %d master allocations", i,
		              fake_count(&g.fh, ACCEL_MEM_MASTER, dev, 0));
		ck_assert_int_eq(fake_count(&g.fh, ACCEL_MEM_OPTIMIZER, dev, 0), rows[i].optim_dev);
		ck_assert_msg(fake_count(&g.fh, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0) ==
		                      rows[i].offload_host,
		              "row %zu: %d offload allocations", i,
		              fake_count(&g.fh, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0));
		ck_assert_int_eq(fake_count(&g.fh, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU,
		                            ACCEL_MEMF_PINNED), rows[i].offload_pinned);
		if (rows[i].place == ZERO_PLACE_DEVICE) {
			/* the masters of b and c only: a and d are their own */
			for (int k = 0; k < g.fh.nalloc; k++)
				if (g.fh.allocs[k].cat == ACCEL_MEM_MASTER)
					ck_assert_uint_eq(g.fh.allocs[k].bytes, (7000 + 2600) * 4);
		}
		if (rows[i].place == ZERO_PLACE_NVME)
			ck_assert_int_eq(dir_entries(tmpdir), 0);   /* unlinked while open */
		rig_free(&g);
	}
	rmdir(tmpdir);
}
END_TEST

/* Checkpoint ranges: written in pieces that straddle pieces and sub-groups,
 * in other dtypes and from the (fake) GPU, read back the same way. */
START_TEST(ranges)
{
	make_tmpdir();
	static const cfg cs[] = {
		{ZERO_PLACE_DEVICE, ACCEL_DEVICE_CUDA, 0, 0, 1, 0, 0},
		{ZERO_PLACE_DEVICE, ACCEL_DEVICE_CPU, 0, 0, 0, 0, 0},
		{ZERO_PLACE_CPU, ACCEL_DEVICE_CUDA, 0, 1000, 0, 0, 0},
		{ZERO_PLACE_NVME, ACCEL_DEVICE_CPU, 0, 1000, 0, 3, 0},
		{ZERO_PLACE_NVME, ACCEL_DEVICE_CUDA, 1, 4096, 0, 2, 0},
	};
	uint64_t n = total();
	static const uint64_t cuts[] = {0, 1, 999, 3800, 3801, 9000, 12000, 13399, 14300};
	for (size_t ci = 0; ci < sizeof(cs) / sizeof(cs[0]); ci++) {
		rig g;
		rig_init(&g, &cs[ci]);
		accel_host *h = fake_h(&g.fh);
		ck_assert_int_eq(zero_store_new(&g.fh.H, h, &g.o, g.pc, N_PIECES, &g.st), 0);
		for (uint32_t a = 0; a < 3; a++) {
			/* write: f32 from the host, then bf16 from the GPU for one stretch */
			float *src = malloc(n * 4), *back = malloc(n * 4);
			for (uint64_t i = 0; i < n; i++)
				src[i] = rnd(7 + a, i);
			for (size_t k = 0; k + 1 < sizeof(cuts) / sizeof(cuts[0]); k++) {
				accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, src + cuts[k],
				                cuts[k + 1] - cuts[k]};
				ck_assert_msg(zero_store_write(g.st, a, cuts[k], &v) == 0, "%s", g.fh.last_err);
			}
			uint64_t lo = 3000, cnt = 2500;   /* across pieces a|b and sub-groups */
			uint16_t *bf;
			ck_assert_int_eq(fake_mem_alloc(h, ACCEL_MEM_BUFFERS, cs[ci].dev, 0, cnt * 2, 0,
			                                (void **)&bf), 0);
			for (uint64_t i = 0; i < cnt; i++) {
				bf[i] = accel_f32_to_bf16(src[lo + i] * 3.0f);
				src[lo + i] = accel_bf16_to_f32(bf[i]);
			}
			accel_view bv = {sizeof(bv), ACCEL_DTYPE_BF16, cs[ci].dev, 0, bf, cnt};
			ck_assert_msg(zero_store_write(g.st, a, lo, &bv) == 0, "%s", g.fh.last_err);
			/* read back in other cuts */
			static const uint64_t rc[] = {0, 500, 4000, 4001, 11111, 14300};
			for (size_t k = 0; k + 1 < sizeof(rc) / sizeof(rc[0]); k++) {
				accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, back + rc[k],
				                rc[k + 1] - rc[k]};
				ck_assert_int_eq(zero_store_read(g.st, a, rc[k], &v), 0);
			}
			ck_assert_msg(!memcmp(src, back, n * 4), "config %zu array %u", ci, a);
			/* read into f16 on the GPU */
			uint16_t *hv;
			ck_assert_int_eq(fake_mem_alloc(h, ACCEL_MEM_BUFFERS, cs[ci].dev, 0, 100 * 2, 0,
			                                (void **)&hv), 0);
			accel_view fv = {sizeof(fv), ACCEL_DTYPE_F16, cs[ci].dev, 0, hv, 100};
			ck_assert_int_eq(zero_store_read(g.st, a, 3750, &fv), 0);
			for (int i = 0; i < 100; i++)
				ck_assert_uint_eq(hv[i], accel_f32_to_f16(src[3750 + i]));
			fake_mem_free(h, hv);
			fake_mem_free(h, bf);
			free(src);
			free(back);
		}
		/* master_is_work: writing a's masters wrote its working weights */
		if (cs[ci].miw) {
			float m;
			accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, &m, 1};
			ck_assert_int_eq(zero_store_read(g.st, 0, 10, &v), 0);
			ck_assert_float_eq(((float *)g.pc[0].work)[10], m);
		}
		/* out of range */
		float x[2];
		accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, x, 2};
		fake_clear_error(&g.fh);
		ck_assert_int_eq(zero_store_read(g.st, 0, n - 1, &v), ACCEL_ERR_INVALID_ARG);
		ck_assert_ptr_nonnull(strstr(g.fh.last_err, "past the store's 14300"));
		fake_clear_error(&g.fh);
		ck_assert_int_eq(zero_store_write(g.st, 3, 0, &v), ACCEL_ERR_INVALID_ARG);
		ck_assert_ptr_nonnull(strstr(g.fh.last_err, "array 3"));
		rig_free(&g);
	}
	rmdir(tmpdir);
}
END_TEST

/* Refusals, each with its message. */
START_TEST(refusals)
{
	static const struct {
		const char *what;
		uint32_t place, nbuf, n_state;
		int miw_piece;         /* piece given master_is_work, -1 none */
		int bad_param;
		uint64_t bad_numel;
		int no_path;
		int step_dev;          /* step with grad_scale_dev */
		int code;
		const char *msg;
	} rows[] = {
		{"placement 7", 7, 4, 2, -1, 0, 0, 0, 0, ACCEL_ERR_INVALID_ARG, "placement 7 is not"},
		{"5 states", ZERO_PLACE_CPU, 4, 5, -1, 0, 0, 0, 0, ACCEL_ERR_INVALID_ARG,
		 "5 optimizer state arrays; at most 4"},
		{"miw offloaded", ZERO_PLACE_CPU, 4, 2, 0, 0, 0, 0, 0, ACCEL_ERR_INVALID_ARG,
		 "master_is_work needs device placement"},
		{"miw bf16", ZERO_PLACE_DEVICE, 4, 2, 1, 0, 0, 0, 0, ACCEL_ERR_INVALID_ARG,
		 "(b): master_is_work needs device placement and an f32 parameter"},
		{"param 9", ZERO_PLACE_CPU, 4, 2, -1, 9, 0, 0, 0, ACCEL_ERR_INVALID_ARG,
		 "names parameter 9 of a model of 4"},
		{"past the end", ZERO_PLACE_CPU, 4, 2, -1, 0, 4000, 0, 0, ACCEL_ERR_INVALID_ARG,
		 "runs past the parameter's 5000 elements"},
		{"no path", ZERO_PLACE_NVME, 4, 2, -1, 0, 0, 1, 0, ACCEL_ERR_CONFIG,
		 "zero_optimization.offload_optimizer.nvme_path: NVMe offload needs a directory"},
		{"1 buffer", ZERO_PLACE_NVME, 1, 2, -1, 0, 0, 0, 0, ACCEL_ERR_CONFIG,
		 "buffer_count: 1; NVMe offload needs at least 2"},
		{"scale dev offloaded", ZERO_PLACE_CPU, 4, 2, -1, 0, 0, 0, 1, ACCEL_ERR_INVALID_ARG,
		 "grad_scale_dev) needs the optimizer on the GPU; this store's placement is cpu"},
	};
	make_tmpdir();
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		cfg c = {rows[i].place, ACCEL_DEVICE_CUDA, 0, 1000, 0, rows[i].nbuf, 0};
		rig g;
		rig_init(&g, &c);
		g.o.place = rows[i].place;
		g.o.n_state = rows[i].n_state;
		if (rows[i].miw_piece >= 0)
			g.pc[rows[i].miw_piece].master_is_work = 1;
		if (rows[i].bad_param)
			g.pc[2].param = (uint32_t)rows[i].bad_param;
		if (rows[i].bad_numel)
			g.pc[0].numel = rows[i].bad_numel;
		if (rows[i].no_path)
			g.o.nvme_path = NULL;
		int r = zero_store_new(&g.fh.H, fake_h(&g.fh), &g.o, g.pc, N_PIECES, &g.st);
		if (rows[i].step_dev) {
			ck_assert_int_eq(r, 0);
			double d = 1;
			r = zero_store_step(g.st, 1.0, &d);
		} else {
			ck_assert_ptr_null(g.st);
		}
		ck_assert_msg(r == rows[i].code, "%s: status %d", rows[i].what, r);
		ck_assert_msg(strstr(g.fh.last_err, rows[i].msg), "%s: message \"%s\"", rows[i].what,
		              g.fh.last_err);
		rig_free(&g);
	}
	/* a missing nvme_path: refused by the preflight before any memory is
	 * taken, on a (fake) GPU too */
	cfg c = {ZERO_PLACE_NVME, ACCEL_DEVICE_CUDA, 0, 1000, 0, 4, 0};
	rig g;
	rig_init(&g, &c);
	char missing[300];
	snprintf(missing, sizeof(missing), "%s/not-there", tmpdir);
	g.o.nvme_path = missing;
	int before = g.fh.nalloc;
	ck_assert_int_eq(zero_store_new(&g.fh.H, fake_h(&g.fh), &g.o, g.pc, N_PIECES, &g.st),
	                 ACCEL_ERR_CONFIG);
	ck_assert_int_eq(g.fh.nalloc, before);
	ck_assert_ptr_nonnull(strstr(g.fh.last_err, "zero_optimization.offload_optimizer.nvme_path: "));
	ck_assert_ptr_nonnull(strstr(g.fh.last_err, "/not-there: no such directory"));
	rig_free(&g);
	ck_assert_int_eq(dir_entries(tmpdir), 0);
	rmdir(tmpdir);
}
END_TEST

/* Working weights replaced (zero_store_set_pieces): the step writes the new ones. */
START_TEST(set_pieces)
{
	cfg c = {ZERO_PLACE_CPU, ACCEL_DEVICE_CPU, 0, 1000, 0, 0, 0};
	rig g;
	rig_init(&g, &c);
	accel_host *h = fake_h(&g.fh);
	ck_assert_int_eq(zero_store_new(&g.fh.H, h, &g.o, g.pc, N_PIECES, &g.st), 0);
	write_masters(&g);
	zero_piece np[N_PIECES];
	memcpy(np, g.pc, sizeof(np));
	void *neww = NULL;
	ck_assert_int_eq(fake_mem_alloc(h, ACCEL_MEM_PARAMS, ACCEL_DEVICE_CPU, 0, 7000 * 2,
	                                ACCEL_MEMF_ZERO, &neww), 0);
	np[1].work = neww;
	ck_assert_int_eq(zero_store_set_pieces(g.st, np, N_PIECES), 0);
	fill_grads(&g, 0);
	ck_assert_int_eq(zero_store_step(g.st, 1.0, NULL), 0);
	check_touched(&g);
	float m;
	accel_view v = {sizeof(v), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, &m, 1};
	ck_assert_int_eq(zero_store_read(g.st, 0, 3800 + 17, &v), 0);
	ck_assert_uint_eq(((uint16_t *)neww)[17], accel_f32_to_bf16(m));
	ck_assert_float_ne(m, rnd(1, 3800 + 17));
	/* a different piece is refused */
	np[2].numel = 5;
	fake_clear_error(&g.fh);
	ck_assert_int_eq(zero_store_set_pieces(g.st, np, N_PIECES), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(g.fh.last_err, "piece 2 is not the piece it replaces"));
	ck_assert_int_eq(zero_store_set_pieces(g.st, np, 3), ACCEL_ERR_INVALID_ARG);
	fake_mem_free(h, neww);
	rig_free(&g);
}
END_TEST

/* A shard of nothing (a rank whose slice is padding) steps and frees. */
START_TEST(empty)
{
	for (uint32_t place = 0; place <= ZERO_PLACE_NVME; place++) {
		fake_host fh;
		fake_host_init(&fh, 2);
		zero_store_opts o = {0};
		o.place = place;
		o.n_state = 2;
		o.buffer_count = 4;
		o.nvme_path = "/nonexistent-dir";   /* never opened: nothing to swap */
		zero_aio_opts_default(&o.aio);
		zero_store *st = NULL;
		ck_assert_int_eq(zero_store_new(&fh.H, fake_h(&fh), &o, NULL, 0, &st), 0);
		ck_assert_uint_eq(zero_store_numel(st), 0);
		ck_assert_int_eq(zero_store_step(st, 1.0, NULL), 0);
		ck_assert_int_eq(zero_store_refresh_work(st), 0);
		st = zero_store_free(st);
		ck_assert_int_eq(fh.nalloc, 0);
		fake_host_fini(&fh);
	}
}
END_TEST

static Suite *zero_store_suite(void)
{
	Suite *s = suite_create("zero_store");
	TCase *tc = tcase_create("store");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, parity);
	tcase_add_test(tc, categories);
	tcase_add_test(tc, ranges);
	tcase_add_test(tc, refusals);
	tcase_add_test(tc, set_pieces);
	tcase_add_test(tc, empty);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(zero_store_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
