/* SPDX-License-Identifier: MIT */
/* tests/test-checkpoint-api.c: the checkpoint API at world size 1
 * (core/ckpt.c, core/ckpt_manifest.c, docs/checkpoints.md): automatic
 * checkpoint naming with project_dir / iteration / total_limit,
 * accel_load_state(ctx, NULL), accel_save_model, and the manifest parser's
 * refusals. */
#include <dirent.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/accel.h"
#include "ckpt_manifest.h"
#include "safetensors.h"

static char tmpdir[256];

static void make_tmp(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "%s/accel-ckpt-api-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static accel_ctx *ctx_json(const char *json)
{
	accel_opts o = {.struct_size = sizeof(o), .config_json = json, .skip_env = 1};
	accel_ctx *ctx = NULL;
	int r = accel_ctx_new(&o, &ctx);
	ck_assert_msg(r == ACCEL_OK, "accel_ctx_new(%s): %s", json, ctx ? accel_errmsg(ctx) : "");
	return ctx;
}

/* w (2x3) and b (3), SGD with momentum (one state tensor per parameter). */
static accel_ctx *model(const char *extra)
{
	char json[1024];
	snprintf(json, sizeof(json), "{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": 0.1, "
	         "\"momentum\": 0.9}}, \"project_dir\": \"%s\"%s}", tmpdir, extra);
	accel_ctx *ctx = ctx_json(json);
	accel_init u = accel_init_uniform(-1, 1);
	int64_t ws[2] = {2, 3}, bs[1] = {3};
	ck_assert_int_eq(accel_model_add_param(ctx, "l", "w", ACCEL_DTYPE_F32, 2, ws, &u, NULL),
	                 ACCEL_OK);
	ck_assert_int_eq(accel_model_add_param(ctx, "l", "b", ACCEL_DTYPE_F32, 1, bs, &u, NULL),
	                 ACCEL_OK);
	ck_assert_msg(accel_prepare(ctx) == ACCEL_OK, "%s", accel_errmsg(ctx));
	return ctx;
}

static void train_step(accel_ctx *ctx, float g)
{
	for (uint32_t p = 0; p < 2; p++) {
		float *gr = accel_param_grad(ctx, p);
		for (int i = 0; i < (p ? 3 : 6); i++)
			gr[i] = g * (float)(i + 1);
	}
	ck_assert_int_eq(accel_unit_post_backward(ctx, 0), ACCEL_OK);
	ck_assert_msg(accel_step(ctx) == ACCEL_OK, "%s", accel_errmsg(ctx));
}

static int exists(const char *rel)
{
	char p[600];
	struct stat sb;
	snprintf(p, sizeof(p), "%s/%s", tmpdir, rel);
	return stat(p, &sb) == 0;
}

static void read_latest(char *buf, size_t cap)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/checkpoints/latest", tmpdir);
	FILE *f = fopen(p, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(buf, (int)cap, f));
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
}

START_TEST(automatic_naming)
{
	make_tmp();
	const char *cfg = ", \"automatic_checkpoint_naming\": true, \"total_limit\": 2, "
	                  "\"iteration\": 3";
	accel_ctx *ctx = model(cfg);
	float want_w[6];
	for (int k = 0; k < 3; k++) {
		train_step(ctx, 0.5f + (float)k);
		ck_assert_msg(accel_save_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	}
	memcpy(want_w, accel_param_data(ctx, 0), sizeof(want_w));
	/* checkpoint_3 .. _5 written; total_limit 2 removed _3 after _5 committed */
	ck_assert(!exists("checkpoints/checkpoint_3"));
	ck_assert(exists("checkpoints/checkpoint_4/manifest.json"));
	ck_assert(exists("checkpoints/checkpoint_5/manifest.json"));
	char latest[64];
	read_latest(latest, sizeof(latest));
	ck_assert_str_eq(latest, "checkpoint_5");
	/* one more step in the first run, for the resumed run to match */
	train_step(ctx, 2.0f);
	float after_w[6];
	memcpy(after_w, accel_param_data(ctx, 0), sizeof(after_w));
	accel_ctx_free(ctx);

	/* a new job loads the latest and continues the numbering at 6 */
	ctx = model(cfg);
	ck_assert_msg(accel_load_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_uint_eq(accel_get_step(ctx), 3);
	ck_assert_mem_eq(accel_param_data(ctx, 0), want_w, sizeof(want_w));
	train_step(ctx, 2.0f);   /* momentum restored: bitwise the first run's step */
	ck_assert_mem_eq(accel_param_data(ctx, 0), after_w, sizeof(after_w));
	ck_assert_msg(accel_save_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert(exists("checkpoints/checkpoint_6/manifest.json"));
	ck_assert(!exists("checkpoints/checkpoint_4"));
	ck_assert(exists("checkpoints/checkpoint_5"));
	read_latest(latest, sizeof(latest));
	ck_assert_str_eq(latest, "checkpoint_6");
	accel_ctx_free(ctx);

	/* numbering restarted lower: the checkpoint just committed is kept */
	ctx = model(", \"automatic_checkpoint_naming\": true, \"total_limit\": 1");
	ck_assert_msg(accel_save_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert(exists("checkpoints/checkpoint_0/manifest.json"));
	ck_assert(!exists("checkpoints/checkpoint_5"));
	ck_assert(!exists("checkpoints/checkpoint_6"));
	read_latest(latest, sizeof(latest));
	ck_assert_str_eq(latest, "checkpoint_0");
	accel_ctx_free(ctx);
	rm_tmp();
}
END_TEST

/* entries of checkpoints/ whose name starts with `prefix` */
static int count_prefix(const char *prefix)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/checkpoints", tmpdir);
	DIR *d = opendir(p);
	struct dirent *e;
	int n = 0;
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/* Resuming an older checkpoint: the first save moves the newer ones aside
 * (checkpoint_<n>.abandoned-<time>), total_limit prunes them first. */
START_TEST(abandoned_timeline)
{
	make_tmp();
	const char *cfg = ", \"automatic_checkpoint_naming\": true, \"total_limit\": 3";
	accel_ctx *ctx = model(cfg);
	for (int k = 0; k < 4; k++) {
		train_step(ctx, 0.5f + (float)k);
		ck_assert_msg(accel_save_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	}
	ck_assert(!exists("checkpoints/checkpoint_0"));   /* 1, 2, 3 kept */
	accel_ctx_free(ctx);
	ctx = model(cfg);
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/checkpoints/checkpoint_1", tmpdir);
	ck_assert_msg(accel_load_state(ctx, dir) == ACCEL_OK, "%s", accel_errmsg(ctx));
	train_step(ctx, 3.0f);
	/* checkpoint_2: 2 and 3 moved aside; 1 and the new 2 kept with one
	 * abandoned (the limit is 3): the earlier abandoned, _2, goes first */
	ck_assert_msg(accel_save_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert(exists("checkpoints/checkpoint_2/manifest.json"));
	ck_assert(exists("checkpoints/checkpoint_1/manifest.json"));
	ck_assert_int_eq(count_prefix("checkpoint_2.abandoned-"), 0);
	ck_assert_int_eq(count_prefix("checkpoint_3.abandoned-"), 1);
	ck_assert(!exists("checkpoints/checkpoint_3"));
	/* the new checkpoint_2 is the resumed timeline's: step 2 */
	char latest[64];
	read_latest(latest, sizeof(latest));
	ck_assert_str_eq(latest, "checkpoint_2");
	/* checkpoint_3 of the new timeline: three current ones, no room left */
	train_step(ctx, 3.5f);
	ck_assert_msg(accel_save_state(ctx, NULL) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert(exists("checkpoints/checkpoint_3/manifest.json"));
	ck_assert_int_eq(count_prefix("checkpoint_3.abandoned-"), 0);
	ck_assert_int_eq(count_prefix("checkpoint_"), 3);
	accel_ctx_free(ctx);
	rm_tmp();
}
END_TEST

START_TEST(no_directory_without_automatic_naming)
{
	make_tmp();
	accel_ctx *ctx = model("");
	ck_assert_int_eq(accel_save_state(ctx, NULL), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "accel_save_state: no directory given (pass one, or "
	                     "set automatic_checkpoint_naming=true"), "%s", accel_errmsg(ctx));
	accel_clear_error(ctx);
	ck_assert_int_eq(accel_load_state(ctx, NULL), ACCEL_ERR_INVALID_ARG);
	accel_clear_error(ctx);
	accel_ctx_free(ctx);
	/* automatic naming on, nothing saved yet */
	ctx = model(", \"automatic_checkpoint_naming\": true");
	ck_assert_int_eq(accel_load_state(ctx, NULL), ACCEL_ERR_CHECKPOINT);
	ck_assert_msg(strstr(accel_errmsg(ctx), "checkpoints/latest: No such file") &&
	              strstr(accel_errmsg(ctx), "no checkpoint was committed there"), "%s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);
	rm_tmp();
}
END_TEST

START_TEST(save_model)
{
	make_tmp();
	accel_ctx *ctx = model("");
	train_step(ctx, 1.0f);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.safetensors", tmpdir);
	ck_assert_msg(accel_save_model(ctx, path) == ACCEL_OK, "%s", accel_errmsg(ctx));
	accel_st_reader *r = NULL;
	accel_err err = {0};
	ck_assert_int_eq(accelp_st_reader_new(path, &r, &err), ACCEL_OK);
	ck_assert_uint_eq(accelp_st_reader_count(r), 2);
	ck_assert_str_eq(accelp_st_reader_metadata(r, "format"), "pt");
	const char *names[2] = {"w", "b"};
	for (uint32_t p = 0; p < 2; p++) {
		const accel_st_tensor *t;
		float got[6];
		ck_assert_int_eq(accelp_st_reader_find(r, names[p], &t, &err), ACCEL_OK);
		ck_assert_uint_eq(t->dtype, ACCEL_DTYPE_F32);
		ck_assert_uint_eq(t->ndim, p ? 1 : 2);
		ck_assert_int_eq(accelp_st_reader_read(r, t, 0, t->numel, got, &err), ACCEL_OK);
		ck_assert_mem_eq(got, accel_param_data(ctx, p), t->numel * 4);
	}
	accelp_st_reader_free(r);
	/* an unwritable place: every rank gets the error, no file appears */
	ck_assert_int_eq(accel_save_model(ctx, "/nonexistent-dir/m.safetensors"), ACCEL_ERR_IO);
	accel_clear_error(ctx);
	accel_ctx_free(ctx);
	rm_tmp();
}
END_TEST

/* ---- the manifest parser's refusals ------------------------------------------------ */

static void refuse(const char *tensors, const char *files, const char *needle)
{
	char text[4096];
	snprintf(text, sizeof(text), "{\"format_version\": 2, \"world_size\": 1, \"strategy\": "
	         "\"ddp\", \"plugins\": [], \"step\": 1, \"files\": {%s}, \"tensors\": {%s}}",
	         files, tensors);
	accelp_ckpt_manifest *m = NULL;
	accel_err err = {0};
	int r = accelp_ckpt_manifest_parse(text, strlen(text), "c", &m, &err);
	ck_assert_msg(r == ACCEL_ERR_CHECKPOINT, "%s: accepted", tensors);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
}

#define F0 "\"rank0.safetensors\": {\"size\": 10, \"xxh64\": \"0000000000000001\", " \
	"\"header_xxh64\": \"0000000000000002\"}"
#define SL(off, cnt) "{\"file\": \"rank0.safetensors\", \"key\": \"k\", \"offset\": " #off \
	", \"count\": " #cnt ", \"xxh64\": \"00000000000000ff\"}"

START_TEST(manifest_refusals)
{
	accelp_ckpt_manifest *m = NULL;
	accel_err err = {0};
	char text[2048];
	snprintf(text, sizeof(text), "{\"format_version\": 2, \"world_size\": 1, \"strategy\": "
	         "\"ddp\", \"plugins\": [], \"step\": 1, \"files\": {" F0 "}, \"tensors\": "
	         "{\"master/w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"slices\": [" SL(4, 2) ", "
	         SL(0, 4) "]}}}");
	ck_assert_int_eq(accelp_ckpt_manifest_parse(text, strlen(text), "c", &m, &err), ACCEL_OK);
	const accelp_ckpt_tensor *t = accelp_ckpt_manifest_find(m, "master/w");
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t->numel, 6);
	ck_assert_uint_eq(t->n_slices, 2);
	ck_assert_uint_eq(t->slices[0].offset, 0);   /* sorted */
	ck_assert_uint_eq(t->slices[1].xxh64, 0xff);
	ck_assert_ptr_null(accelp_ckpt_manifest_find(m, "master/x"));
	accelp_ckpt_manifest_free(m);

	refuse("\"w\": {\"dtype\": \"F32\", \"shape\": [6], \"slices\": [" SL(0, 4) ", " SL(3, 3)
	       "]}", F0, "c/manifest.json: tensor 'w': its slices do not cover its 6 elements "
	       "exactly once (a slice starts at element 3 with 3; element 4 expected)");
	refuse("\"w\": {\"dtype\": \"F32\", \"shape\": [6], \"slices\": [" SL(0, 4) "]}", F0,
	       "tensor 'w': its slices hold 4 of its 6 elements");
	refuse("\"w\": {\"dtype\": \"Q7\", \"shape\": [6], \"slices\": []}", F0,
	       "tensor 'w': dtype missing or unknown");
	refuse("\"w\": {\"dtype\": \"F32\", \"shape\": [6], \"slices\": [{\"file\": \"x\"}]}", F0,
	       "tensor 'w': slice 0 names no file of the manifest's files");
	refuse("", "\"../rank0.safetensors\": {\"size\": 1, \"xxh64\": \"0000000000000001\", "
	       "\"header_xxh64\": \"0000000000000002\"}",
	       "files: '../rank0.safetensors' is not a file name inside the checkpoint directory");
	refuse("", "\"rank0.safetensors\": {\"size\": 1, \"xxh64\": \"xyz\"}",
	       "files: rank0.safetensors: no size, xxh64 and header_xxh64 (16 hex digits)");
	refuse("\"w\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 1099511627776], "
	       "\"slices\": []}", F0, "tensor 'w': too many elements");

	const char *v3 = "{\"format_version\": 3}";
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_ckpt_manifest_parse(v3, strlen(v3), "c", &m, &err),
	                 ACCEL_ERR_CHECKPOINT);
	ck_assert_msg(strstr(err.msg, "format_version 3; this accel (" ACCEL_VERSION_STRING
	                     ") reads version 2 (a newer accel wrote it?)"), "%s", err.msg);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_ckpt_manifest_parse("[1", 2, "c", &m, &err), ACCEL_ERR_CHECKPOINT);
	ck_assert_msg(strstr(err.msg, "c/manifest.json:1: not valid JSON"), "%s", err.msg);
}
END_TEST

/* Registered generators resume where they were; the count and the way
 * they were made are checked. */
START_TEST(generators)
{
	make_tmp();
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/c", tmpdir);
	accel_ctx *ctx = model("");
	accel_rng data, drop;
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_DATA, 7, &data), ACCEL_OK);
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_RANK, 1, &drop), ACCEL_OK);
	ck_assert_int_eq(accel_rng_register(ctx, &data), ACCEL_OK);
	ck_assert_int_eq(accel_rng_register(ctx, &drop), ACCEL_OK);
	ck_assert_int_eq(accel_rng_register(ctx, &drop), ACCEL_ERR_INVALID_ARG);
	ck_assert_msg(strstr(accel_errmsg(ctx), "registered already (as number 1)"), "%s",
	              accel_errmsg(ctx));
	ck_assert_int_eq(accel_rng_register(ctx, NULL), ACCEL_ERR_INVALID_ARG);
	for (int i = 0; i < 5; i++)
		(void)accel_rng_u32(&data);
	(void)accel_rng_normal(&drop);
	train_step(ctx, 1.0f);
	ck_assert_msg(accel_save_state(ctx, dir) == ACCEL_OK, "%s", accel_errmsg(ctx));
	/* what the uninterrupted run draws next */
	uint32_t want_data = accel_rng_u32(&data);
	float want_drop = accel_rng_normal(&drop);
	accel_ctx_free(ctx);

	ctx = model("");
	accel_rng d2, r2;
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_DATA, 7, &d2), ACCEL_OK);
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_RANK, 1, &r2), ACCEL_OK);
	ck_assert_int_eq(accel_rng_register(ctx, &d2), ACCEL_OK);
	ck_assert_int_eq(accel_rng_register(ctx, &r2), ACCEL_OK);
	ck_assert_msg(accel_load_state(ctx, dir) == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_uint_eq(accel_rng_tell(&d2), 5);
	ck_assert_uint_eq(accel_rng_tell(&r2), 2);
	ck_assert_uint_eq(accel_rng_u32(&d2), want_data);
	ck_assert_float_eq(accel_rng_normal(&r2), want_drop);
	accel_ctx_free(ctx);

	/* one generator fewer: refused before anything changes */
	ctx = model("");
	ck_assert_int_eq(accel_rng_register(ctx, &d2), ACCEL_OK);
	ck_assert_int_eq(accel_load_state(ctx, dir), ACCEL_ERR_CHECKPOINT);
	ck_assert_msg(strstr(accel_errmsg(ctx), "2 generators saved; this job registered 1"), "%s",
	              accel_errmsg(ctx));
	ck_assert_uint_eq(accel_get_step(ctx), 0);
	accel_ctx_free(ctx);

	/* made another way (another id): named, before anything changes */
	ctx = model("");
	float w0[6];
	memcpy(w0, accel_param_data(ctx, 0), sizeof(w0));
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_DATA, 7, &d2), ACCEL_OK);
	ck_assert_int_eq(accel_rng_seed_stream(ctx, ACCEL_RNG_RANK, 9, &r2), ACCEL_OK);
	ck_assert_int_eq(accel_rng_register(ctx, &d2), ACCEL_OK);   /* the right one */
	ck_assert_int_eq(accel_rng_register(ctx, &r2), ACCEL_OK);   /* another id */
	ck_assert_int_eq(accel_load_state(ctx, dir), ACCEL_ERR_CHECKPOINT);
	ck_assert_mem_eq(accel_param_data(ctx, 0), w0, sizeof(w0));
	ck_assert_uint_eq(accel_get_step(ctx), 0);
	ck_assert_uint_eq(accel_rng_tell(&d2), 0);
	ck_assert_msg(strstr(accel_errmsg(ctx), "rank0.safetensors: generator 1 (accel_rng_register "
	                     "order) was saved with key"), "%s", accel_errmsg(ctx));
	ck_assert_msg(strstr(accel_errmsg(ctx), "make it the same way (seed, kind, id)"), "%s",
	              accel_errmsg(ctx));
	accel_ctx_free(ctx);
	rm_tmp();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("checkpoint-api");
	TCase *tc = tcase_create("api");
	tcase_add_test(tc, automatic_naming);
	tcase_add_test(tc, abandoned_timeline);
	tcase_add_test(tc, no_directory_without_automatic_naming);
	tcase_add_test(tc, save_model);
	tcase_add_test(tc, manifest_refusals);
	tcase_add_test(tc, generators);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
