/* SPDX-License-Identifier: MIT */
/* tests/test-shard-setup.c: plugins/shard/shard_setup.c, the set-up zero
 * and fsdp share, against a host table of a few members and a model built
 * here: the cut of units into runs (table-driven: split rule, dtype and
 * device changes, and each refusal with its message), the per-run offsets
 * and bucket runs, the largest parameter, and the starts of init and
 * wrap. */
#include <check.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shard_setup.h"

#define MAXP 8
#define MAXU 8

typedef struct fake {
	accel_host_v1 H;
	accel_model_v1 model;
	accel_param_info_v1 params[MAXP];
	accel_unit_info_v1 units[MAXU];
	char pnames[MAXP][16], unames[MAXU][16];
	uint32_t n_state;
	int model_none;
	char err[1024];
	int32_t code;
} fake;

static fake F;

static int f_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	va_list ap;
	(void)h;
	va_start(ap, fmt);
	vsnprintf(F.err, sizeof(F.err), fmt, ap);
	va_end(ap);
	F.code = code;
	return code;
}

static int f_world(accel_host *h, accel_world_v1 *w)
{
	(void)h;
	w->rank = 2;
	w->world_size = 3;
	return ACCEL_OK;
}

static const accel_model_v1 *f_model(accel_host *h)
{
	(void)h;
	return F.model_none ? NULL : &F.model;
}

static uint32_t f_state_count(accel_host *h)
{
	(void)h;
	return F.n_state;
}

static int f_rs(accel_host *h, const accel_bucket_v1 *b, const accel_view *shard, uint32_t flags,
                accel_req **ret_req)
{
	(void)h, (void)b, (void)shard, (void)flags, (void)ret_req;
	return ACCEL_ERR_INTERNAL;
}

static int f_read(accel_host *h, accel_ckpt_reader *r, const char *name, uint32_t dtype,
                  uint64_t offset, uint64_t count, void *buf)
{
	(void)h, (void)r, (void)name, (void)dtype, (void)offset, (void)count, (void)buf;
	return ACCEL_ERR_INTERNAL;
}

/* The host: error, world, model, optim_state_count, and the two ABI 1.4
 * members shard_init_world looks for (never called). */
static void fake_init(void)
{
	memset(&F, 0, sizeof(F));
	F.H.struct_size = sizeof(F.H);
	F.H.error = f_error;
	F.H.world = f_world;
	F.H.model = f_model;
	F.H.optim_state_count = f_state_count;
	F.H.ckpt_read_tensor = f_read;
	F.H.reduce_scatter_bucket = f_rs;
	F.model.struct_size = sizeof(F.model);
	F.model.params = F.params;
	F.model.units = F.units;
	F.model.param_info_size = sizeof(F.params[0]);
	F.model.unit_info_size = sizeof(F.units[0]);
}

static accel_host *hh(void)
{
	return (accel_host *)&F;
}

/* A model of units given as parameter counts; parameter k has numel[k]
 * elements, dtype dt[k] (0: f32), trainable unless frozen[k]. */
typedef struct layout {
	uint32_t n_units;
	uint32_t unit_params[MAXU];
	uint64_t numel[MAXP];
	uint32_t dt[MAXP];
	uint32_t frozen[MAXP];
	int32_t first_param_fix;   /* nonzero: unit 1 starts one parameter later */
	uint32_t extra_params;     /* parameters in no unit */
} layout;

static void build(const layout *l)
{
	uint32_t p = 0;
	fake_init();
	for (uint32_t u = 0; u < l->n_units; u++) {
		accel_unit_info_v1 *ui = &F.units[u];
		snprintf(F.unames[u], sizeof(F.unames[u]), "u%u", u);
		ui->struct_size = sizeof(*ui);
		ui->name = F.unames[u];
		ui->first_param = p + (u == 1 && l->first_param_fix ? 1 : 0);
		ui->n_params = l->unit_params[u];
		for (uint32_t k = 0; k < ui->n_params; k++)
			ui->numel += l->numel[p + k];
		p += l->unit_params[u];
	}
	p += l->extra_params;
	for (uint32_t k = 0; k < p; k++) {
		accel_param_info_v1 *pi = &F.params[k];
		snprintf(F.pnames[k], sizeof(F.pnames[k]), "p%u", k);
		pi->struct_size = sizeof(*pi);
		pi->name = F.pnames[k];
		pi->index = k;
		pi->numel = l->numel[k] ? l->numel[k] : 1;
		pi->dtype = l->dt[k] ? l->dt[k] : ACCEL_DTYPE_F32;
		pi->device = ACCEL_DEVICE_CPU;
		pi->requires_grad = !l->frozen[k];
	}
	F.model.n_params = p;
	F.model.n_units = l->n_units;
}

/* Split rule of the cases: a run closes at `target` elements (0: one unit
 * per run), zero's rule. */
static int split_at(void *ctx, uint32_t u, const shard_span *cur)
{
	uint64_t target = *(const uint64_t *)ctx;
	(void)u;
	return cur->numel >= target || target == 0;
}

static const struct {
	const char *what;
	layout l;
	uint64_t target;
	int32_t want_code;
	const char *want_msg;      /* substring of the message (errors) */
	uint32_t n;                /* spans (success) */
	uint32_t first_unit[MAXU], n_units[MAXU], first_param[MAXU];
	uint64_t numel[MAXU];
	uint32_t unit_span[MAXU];
} cut_cases[] = {
	{.what = "runs close at the target",
	 .l = {.n_units = 3, .unit_params = {1, 1, 1}, .numel = {100, 200, 50}}, .target = 250,
	 .n = 2, .first_unit = {0, 2}, .n_units = {2, 1}, .first_param = {0, 2},
	 .numel = {300, 50}, .unit_span = {0, 0, 1}},
	{.what = "target 0: one unit each",
	 .l = {.n_units = 3, .unit_params = {2, 1, 1}, .numel = {10, 20, 30, 40}}, .target = 0,
	 .n = 3, .first_unit = {0, 1, 2}, .n_units = {1, 1, 1}, .first_param = {0, 2, 3},
	 .numel = {30, 30, 40}, .unit_span = {0, 1, 2}},
	{.what = "a dtype change opens a run",
	 .l = {.n_units = 3, .unit_params = {1, 1, 1}, .numel = {5, 5, 5},
	       .dt = {0, ACCEL_DTYPE_BF16, 0}}, .target = 1000,
	 .n = 3, .first_unit = {0, 1, 2}, .n_units = {1, 1, 1}, .first_param = {0, 1, 2},
	 .numel = {5, 5, 5}, .unit_span = {0, 1, 2}},
	{.what = "one run",
	 .l = {.n_units = 3, .unit_params = {1, 2, 1}, .numel = {5, 6, 7, 8}}, .target = 1000,
	 .n = 1, .first_unit = {0}, .n_units = {3}, .first_param = {0}, .numel = {26},
	 .unit_span = {0, 0, 0}},
	{.what = "a unit out of order",
	 .l = {.n_units = 2, .unit_params = {1, 1}, .numel = {5, 5, 5}, .first_param_fix = 1,
	       .extra_params = 1},
	 .want_code = ACCEL_ERR_UNSUPPORTED,
	 .want_msg = "unit 'u1' starts at parameter 2, expected 1: test needs units that cover "
	             "the parameters in registration order"},
	{.what = "a unit without parameters",
	 .l = {.n_units = 3, .unit_params = {1, 0, 1}, .numel = {5, 5}},
	 .want_code = ACCEL_ERR_UNSUPPORTED, .want_msg = "unit 'u1' has no parameters"},
	{.what = "a parameter in no unit",
	 .l = {.n_units = 2, .unit_params = {1, 1}, .numel = {5, 5, 5}, .extra_params = 1},
	 .want_code = ACCEL_ERR_UNSUPPORTED,
	 .want_msg = "the units hold 2 of the 3 parameters; test needs every parameter in a unit "
	             "(accel_unit_begin)"},
	{.what = "no units", .l = {.n_units = 0, .numel = {5}, .extra_params = 1},
	 .want_code = ACCEL_ERR_UNSUPPORTED, .want_msg = "the units hold 0 of the 1 parameters"},
	{.what = "a unit of two dtypes",
	 .l = {.n_units = 2, .unit_params = {2, 1}, .numel = {5, 5, 5},
	       .dt = {0, ACCEL_DTYPE_BF16}},
	 .want_code = ACCEL_ERR_UNSUPPORTED,
	 .want_msg = "unit 'u0' mixes parameters of different dtypes or devices ('p0' and 'p1'); "
	             "test keeps it flat: register them in separate units"},
};

START_TEST(test_cut_spans)
{
	shard_span spans[MAXU];
	uint32_t unit_span[MAXU], n = 99;
	uint64_t target = cut_cases[_i].target;
	build(&cut_cases[_i].l);
	memset(spans, 0, sizeof(spans));
	int r = shard_cut_spans(&F.H, hh(), &F.model, "test", "test keeps it flat", split_at, &target,
	                        spans, unit_span, &n);
	ck_assert_msg(r == cut_cases[_i].want_code, "%s: status %d, want %d (%s)",
	              cut_cases[_i].what, r, cut_cases[_i].want_code, F.err);
	if (r) {
		ck_assert_msg(strstr(F.err, cut_cases[_i].want_msg), "%s: message '%s' lacks '%s'",
		              cut_cases[_i].what, F.err, cut_cases[_i].want_msg);
		ck_assert_uint_eq(n, 99);
		return;
	}
	ck_assert_uint_eq(n, cut_cases[_i].n);
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_uint_eq(spans[i].first_unit, cut_cases[_i].first_unit[i]);
		ck_assert_uint_eq(spans[i].n_units, cut_cases[_i].n_units[i]);
		ck_assert_uint_eq(spans[i].first_param, cut_cases[_i].first_param[i]);
		ck_assert_uint_eq(spans[i].numel, cut_cases[_i].numel[i]);
		ck_assert_uint_eq(spans[i].dtype, F.params[spans[i].first_param].dtype);
		ck_assert_uint_eq(spans[i].grad_dtype, F.params[spans[i].first_param].dtype);
		ck_assert_int_eq(spans[i].device, ACCEL_DEVICE_CPU);
	}
	for (uint32_t u = 0; u < F.model.n_units; u++)
		ck_assert_uint_eq(unit_span[u], cut_cases[_i].unit_span[u]);
}
END_TEST

/* SHARD_SPAN_COPY fills a plugin's record with members of those names. */
START_TEST(test_span_copy)
{
	struct {
		uint32_t first_unit, n_units, first_param, n_params, dtype, grad_dtype;
		int32_t device, device_index;
		uint64_t numel;
		int other;
	} rec = {.other = 7};
	shard_span sp = {1, 2, 3, 4, ACCEL_DTYPE_BF16, ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 5, 600};
	SHARD_SPAN_COPY(&rec, &sp);
	ck_assert_uint_eq(rec.first_unit, 1);
	ck_assert_uint_eq(rec.n_units, 2);
	ck_assert_uint_eq(rec.first_param, 3);
	ck_assert_uint_eq(rec.n_params, 4);
	ck_assert_uint_eq(rec.dtype, ACCEL_DTYPE_BF16);
	ck_assert_uint_eq(rec.grad_dtype, ACCEL_DTYPE_F32);
	ck_assert_int_eq(rec.device, ACCEL_DEVICE_CUDA);
	ck_assert_int_eq(rec.device_index, 5);
	ck_assert_uint_eq(rec.numel, 600);
	ck_assert_int_eq(rec.other, 7);
}
END_TEST

START_TEST(test_param_runs)
{
	layout l = {.n_units = 1, .unit_params = {4}, .numel = {3, 4, 5, 6},
	            .frozen = {0, 1, 0, 0}};
	uint64_t at[4];
	accel_bucket_entry_v1 e[4];
	uint32_t ne = 0;
	build(&l);
	/* parameters 1..3: frozen p1 has no run; offsets from the first */
	shard_param_runs(&F.model, 1, 3, at, e, &ne);
	ck_assert_uint_eq(at[0], 0);
	ck_assert_uint_eq(at[1], 4);
	ck_assert_uint_eq(at[2], 9);
	ck_assert_uint_eq(ne, 2);
	ck_assert_uint_eq(e[0].param, 2);
	ck_assert_uint_eq(e[0].param_offset, 0);
	ck_assert_uint_eq(e[0].bucket_offset, 4);
	ck_assert_uint_eq(e[0].numel, 5);
	ck_assert_uint_eq(e[1].param, 3);
	ck_assert_uint_eq(e[1].bucket_offset, 9);
	ck_assert_uint_eq(e[1].numel, 6);
	ck_assert_uint_eq(shard_largest_param(&F.model), 6);
	F.model.n_params = 0;
	ck_assert_uint_eq(shard_largest_param(&F.model), 1);
}
END_TEST

START_TEST(test_init_world)
{
	accel_world_v1 w;
	uint32_t W = 0, rank = 0;
	fake_init();
	memset(&w, 0, sizeof(w));
	ck_assert_int_eq(shard_init_world(&F.H, hh(), &w, &W, &rank), ACCEL_OK);
	ck_assert_uint_eq(w.struct_size, sizeof(w));
	ck_assert_uint_eq(W, 3);
	ck_assert_uint_eq(rank, 2);
	/* a host table from before ABI 1.4 */
	F.H.struct_size = (uint32_t)offsetof(accel_host_v1, reduce_scatter_bucket);
	W = rank = 77;
	ck_assert_int_eq(shard_init_world(&F.H, hh(), &w, &W, &rank), ACCEL_ERR_ABI);
	ck_assert_str_eq(F.err, "the host table is older than this plugin (needs ABI 1.4)");
	ck_assert_uint_eq(W, 77);
}
END_TEST

START_TEST(test_wrap_begin)
{
	const accel_model_v1 *m = NULL;
	uint32_t n_state = 0;
	fake_init();
	F.n_state = 2;
	ck_assert_int_eq(shard_wrap_begin(&F.H, hh(), "test", 4, &m, &n_state), ACCEL_OK);
	ck_assert_ptr_eq(m, &F.model);
	ck_assert_uint_eq(n_state, 2);
	ck_assert_int_eq(shard_wrap_begin(&F.H, hh(), "test", 4, &m, &n_state), ACCEL_ERR_STATE);
	ck_assert_str_eq(F.err, "wrap called twice");
	m = NULL;
	F.model_none = 1;
	ck_assert_int_eq(shard_wrap_begin(&F.H, hh(), "test", 4, &m, &n_state), ACCEL_ERR_STATE);
	ck_assert_str_eq(F.err, "wrap: the host has no model");
	m = NULL;
	F.model_none = 0;
	F.n_state = 5;
	ck_assert_int_eq(shard_wrap_begin(&F.H, hh(), "test", 4, &m, &n_state),
	                 ACCEL_ERR_UNSUPPORTED);
	ck_assert_str_eq(F.err, "the optimizer keeps 5 state arrays; test supports up to 4");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shard-setup");
	TCase *tc = tcase_create("setup");
	tcase_add_loop_test(tc, test_cut_spans, 0, (int)(sizeof(cut_cases) / sizeof(cut_cases[0])));
	tcase_add_test(tc, test_span_copy);
	tcase_add_test(tc, test_param_runs);
	tcase_add_test(tc, test_init_world);
	tcase_add_test(tc, test_wrap_begin);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
