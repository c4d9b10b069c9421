/* SPDX-License-Identifier: MIT */
/* tests/test-comm-select.c: backend "auto" chosen from the descriptors
 * (scope, preference, probe; docs/comm.md), third-party and ABI-1.2
 * backends among the built-in ones, the host table comm backends get
 * (accel_comm_host_v1), and groups on a backend without a split slot.
 * World of one; the fixtures are tests/fixtures/fixture-comm.c built with
 * -DFIX_COMM_WORKS. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/accel.h"
#include "accel/comm.h"
#include "comm.h"
#include "ctx-impl.h"
#include "select.h"

static char fixdir[1024], tmpdir[1024], path_env[8192];

static void setup(void)
{
	const char *b = getenv("ACCEL_TEST_BUILDDIR");
	ck_assert_msg(b != NULL, "ACCEL_TEST_BUILDDIR is not set (run through meson test)");
	snprintf(fixdir, sizeof(fixdir), "%s/tests/fixtures/select", b);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/accel-test-comm-select-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	const char *p = getenv("ACCEL_PLUGIN_PATH");
	snprintf(path_env, sizeof(path_env), "%s", p ? p : "");
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	int r = system(cmd);
	(void)r;
	setenv("ACCEL_PLUGIN_PATH", path_env, 1);
}

/* tmpdir/sub holding symlinks to the named fixtures; returns its path. */
static const char *scenario(const char *sub, const char *const *files)
{
	static char d[2048];
	snprintf(d, sizeof(d), "%s/%s", tmpdir, sub);
	ck_assert_int_eq(mkdir(d, 0755), 0);
	for (; *files; files++) {
		char link[PATH_MAX], target[PATH_MAX];
		snprintf(link, sizeof(link), "%s/%s", d, *files);
		snprintf(target, sizeof(target), "%s/%s", fixdir, *files);
		ck_assert_int_eq(symlink(target, link), 0);
	}
	return d;
}

static accel_ctx *ctx_in(const char *dir, int want)
{
	char json[PATH_MAX + 64];
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\"]}", dir);
	accel_opts opts;
	memset(&opts, 0, sizeof(opts));
	opts.struct_size = sizeof(opts);
	opts.config_json = json;
	opts.skip_env = 1;
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&opts, &ctx);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_msg(r == want, "accel_ctx_new: %s: %s", accel_status_str(r), accel_errmsg(ctx));
	return ctx;
}

static const accel_module *module(accel_ctx *ctx, const char *name)
{
	for (uint32_t i = 0; i < accelp_loader_count(ctx->loader); i++) {
		const accel_module *m = accelp_loader_get(ctx->loader, i);
		if (m->kind == ACCEL_MODULE_COMM && m->name && !strcmp(m->name, name))
			return m;
	}
	ck_abort_msg("no comm module %s", name);
	return NULL;
}

/* A third-party backend with a higher preference than every built-in one
 * is auto's choice (its ops work); of two equal ones the smaller name
 * wins; one whose probe says no is passed over whatever its preference. */
START_TEST(auto_picks_the_highest_preference)
{
	const char *d = scenario("auto", (const char *const[]){"comm-fx-tie.so", "comm-fx-auto.so",
	                                                         "comm-fx-noprobe.so", NULL});
	accel_ctx *ctx = ctx_in(d, ACCEL_OK);
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "fx_auto");
	float x[3] = {1, 2, 3}, y[3] = {0};
	ck_assert_int_eq(accel_allreduce(ctx, x, y, 3, ACCEL_DTYPE_F32, ACCEL_RED_SUM), ACCEL_OK);
	ck_assert(y[0] == 1 && y[1] == 2 && y[2] == 3);
	ck_assert_int_eq(module(ctx, "fx_noprobe")->comm->desc->preference, 2000);
	accel_ctx_free(ctx);
}
END_TEST

/* A backend built against ABI 1.2 has no scope and no preference: auto
 * reads the documented defaults (scope node and nodes, preference 0), not
 * what lies past its struct_size; shm (preference 50) wins on one node,
 * and where it is the only backend it is used. */
START_TEST(abi12_backend_gets_defaults)
{
	const char *d = scenario("old", (const char *const[]){"comm-fx-old.so", NULL});
	accel_ctx *ctx = ctx_in(d, ACCEL_OK);
	const accel_module *m = module(ctx, "fx_old");
	ck_assert_int_eq(m->comm->desc->preference, 0);
	ck_assert_uint_eq(m->comm->desc->scope, 0);
	ck_assert_uint_eq(accelp_select_comm_scope(m), ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES);
	ck_assert_ptr_null(m->comm->split);
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "shm");
	accel_ctx_free(ctx);

	/* alone (and the strategy): it serves the job */
	const char *b = getenv("ACCEL_TEST_BUILDDIR");
	char p[2048];
	snprintf(p, sizeof(p), "%s/plugins/ddp", b);
	setenv("ACCEL_PLUGIN_PATH", p, 1);
	ctx = ctx_in(d, ACCEL_OK);
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "fx_old");
	/* groups: refused by name, before any rank would wait */
	accel_group *g = NULL;
	ck_assert_int_eq(accelp_comm_group_split(ctx->comm, NULL, 0, 0, &g), ACCEL_ERR_UNSUPPORTED);
	const char *msg = accel_errmsg(ctx);
	ck_assert_msg(strstr(msg, "comm backend 'fx_old'") && strstr(msg, "no split slot") &&
	              strstr(msg, "ABI 1.2"), "%s", msg);
	accel_ctx_free(ctx);
}
END_TEST

/* The table comm backends get: the plugin table's type and size, only log,
 * error, world, cfg_*, store_* and blocking host allgather/broadcast/barrier
 * filled (the fixture's init checks the same from inside a backend). */
START_TEST(comm_host_table_is_narrow)
{
	const accel_host_v1 *full = accelp_host_table(), *t = accelp_comm_host_table();
	ck_assert_ptr_ne(full, t);
	ck_assert_uint_eq(t->struct_size, full->struct_size);
	ck_assert_uint_eq(t->abi_major, ACCEL_ABI_MAJOR);
	ck_assert_uint_eq(t->abi_minor, ACCEL_ABI_MINOR);
	ck_assert(t->log == full->log && t->error == full->error && t->world == full->world);
	ck_assert(t->cfg_bool == full->cfg_bool && t->cfg_int == full->cfg_int &&
	          t->cfg_double == full->cfg_double && t->cfg_string == full->cfg_string &&
	          t->cfg_strlist == full->cfg_strlist);
	ck_assert(t->store_set == full->store_set && t->store_get == full->store_get &&
	          t->store_add == full->store_add);
	ck_assert(t->allgather && t->broadcast && t->barrier);
	ck_assert(t->allgather != full->allgather);   /* the blocking-only wrappers */
	ck_assert(!t->model && !t->param_bind && !t->param_init && !t->mem_alloc && !t->mem_free);
	ck_assert(!t->op_copy && !t->op_fill && !t->op_scale && !t->op_axpy && !t->op_sumsq &&
	          !t->op_nonfinite);
	ck_assert(!t->optim_state_count && !t->optim_step);
	ck_assert(!t->allreduce && !t->reduce_scatter && !t->wait && !t->test);
	ck_assert(!t->reduce_bucket && !t->reduce_bucket_mean && !t->sync_step);
	ck_assert(!t->ckpt_write && !t->ckpt_size && !t->ckpt_read);
	ck_assert(!ACCEL_HOST_HAS(t, group_split) && ACCEL_HOST_HAS(full, group_split));
	ck_assert(!t->group_allreduce && !t->group_barrier && !t->group_free);
	/* ABI minor 4: the compute stream (a device backend orders collectives
	 * after it), but no device waits or copies */
	ck_assert(t->stream == full->stream && t->stream);
	ck_assert(!t->wait_stream && !t->op_copy_async);
	/* every member past the last one known here is NULL too */
	const char *p = (const char *)t;
	for (size_t off = offsetof(accel_host_v1, op_copy_async) + sizeof(t->op_copy_async);
	     off < sizeof(*t); off++)
		ck_assert_int_eq(p[off], 0);

	/* a backend that starts through it (the fixture refuses any other) */
	const char *d = scenario("table", (const char *const[]){"comm-fx-auto.so", NULL});
	accel_ctx *ctx = ctx_in(d, ACCEL_OK);
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "fx_auto");
	/* its host calls are blocking only */
	struct accel_host h = {.ctx = ctx, .name = "fx_auto"};
	accel_req *req = NULL;
	int32_t v = 7;
	accel_view bv = {sizeof(accel_view), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, &v, 1};
	ck_assert_int_eq(t->broadcast(&h, &bv, 0, &req), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "blocking only"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	ck_assert_int_eq(t->broadcast(&h, &bv, 0, NULL), ACCEL_OK);
	ck_assert_int_eq(v, 7);
	accel_ctx_free(ctx);
}
END_TEST

/* Colours and groups at world one on shm: NONE, a singleton group whose
 * collectives work, a split of it, a bad colour, a freed group. */
START_TEST(groups_at_world_one)
{
	const char *d = scenario("one", (const char *const[]){NULL});
	accel_ctx *ctx = ctx_in(d, ACCEL_OK);
	ck_assert_str_eq(accelp_comm_backend_name(ctx->comm), "shm");
	accel_group *none = (accel_group *)&none, *g = NULL, *gg = NULL;
	ck_assert_int_eq(accelp_comm_group_split(ctx->comm, NULL, ACCEL_COMM_SPLIT_NONE, 0, &none),
	                 ACCEL_OK);
	ck_assert_ptr_null(none);
	ck_assert_int_eq(accelp_comm_group_split(ctx->comm, NULL, 4, 0, &g), ACCEL_OK);
	ck_assert_int_eq(accelp_comm_group_split(ctx->comm, g, 0, 0, &gg), ACCEL_OK);
	int32_t r = -1, n = 0, w = -1;
	ck_assert_int_eq(accelp_comm_group_info(ctx->comm, gg, &r, &n), ACCEL_OK);
	ck_assert_int_eq(accelp_comm_group_world_rank(ctx->comm, gg, 0, &w), ACCEL_OK);
	ck_assert(r == 0 && n == 1 && w == 0);
	ck_assert_int_eq(accelp_comm_group_world_rank(ctx->comm, gg, 1, &w), ACCEL_ERR_INVALID_ARG);
	accel_clear_error(ctx);
	double x[2] = {1.5, -2}, y[2] = {0};
	accel_view vx = {sizeof(accel_view), ACCEL_DTYPE_F64, ACCEL_DEVICE_CPU, 0, x, 2};
	accel_view vy = {sizeof(accel_view), ACCEL_DTYPE_F64, ACCEL_DEVICE_CPU, 0, y, 2};
	ck_assert_int_eq(accelp_comm_group_allreduce(ctx->comm, gg, &vx, &vy, ACCEL_RED_MAX, NULL),
	                 ACCEL_OK);
	ck_assert(y[0] == 1.5 && y[1] == -2);
	/* counts are the group's: send must be size x recv; the group is named
	 * by its tag: the second split of the world (the first was NONE) */
	vy.numel = 1;
	ck_assert_int_eq(accelp_comm_group_reduce_scatter(ctx->comm, g, &vx, &vy, ACCEL_RED_SUM, NULL),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "on group 2c4 (world rank 0)"), "%s",
	              accel_errmsg(ctx));
	accel_clear_error(ctx);
	ck_assert_int_eq(accelp_comm_group_split(ctx->comm, NULL, -5, 0, &g), ACCEL_ERR_INVALID_ARG);
	accel_clear_error(ctx);
	accelp_comm_group_free(ctx->comm, gg);
	ck_assert_int_eq(accelp_comm_group_barrier(ctx->comm, gg, NULL), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "not a group of this context"), "%s",
	              accel_errmsg(ctx));
	accel_clear_error(ctx);
	/* g left to the context */
	accel_ctx_free(ctx);
}
END_TEST

static Suite *comm_select_suite(void)
{
	Suite *s = suite_create("comm-select");
	TCase *tc = tcase_create("select");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, auto_picks_the_highest_preference);
	tcase_add_test(tc, abi12_backend_gets_defaults);
	tcase_add_test(tc, comm_host_table_is_narrow);
	tcase_add_test(tc, groups_at_world_one);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(comm_select_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
