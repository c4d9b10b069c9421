/* SPDX-License-Identifier: MIT */
/* tests/test-setup.c: the set-up a context and the CLI share (core/setup.c):
 * the order and origin of the plugin directories, the configuration layers
 * and their sources, what a config that cannot be read does with and
 * without config_optional, where a failed set-up stopped, and that the
 * loader offers CUDA exactly as the probe says. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel-build-config.h"
#include "setup.h"

static char tmpdir[256];   /* short: every path built from it fits */

static void setup_tmp(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/accel-test-setup-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	unsetenv("ACCEL_CONFIG");
	ck_assert_int_eq(chdir(tmpdir), 0);   /* no ./accel.json of the caller's */
	setenv("HOME", tmpdir, 1);
	unsetenv("XDG_CONFIG_HOME");
}

static void teardown_tmp(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	int r = system(cmd);
	(void)r;
}

static const char *write_file(const char *name, const char *text)
{
	static char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	return p;
}

#define ASSERT_HAS(s, want) ck_assert_msg(strstr((s), (want)) != NULL, "'%s' lacks '%s'", (s), (want))

/* --plugin-dir, then plugin_dirs, then ACCEL_PLUGIN_PATH, then install. */
START_TEST(directories_in_search_order)
{
	setenv("ACCEL_PLUGIN_PATH", "/env/a:/env/b", 1);
	const char *extra[] = {"/cli/x"};
	/* plugin_dirs must exist (a missing one is a config error) */
	char cfg_p[PATH_MAX], cfg_q[PATH_MAX], json[3 * PATH_MAX];
	snprintf(cfg_p, sizeof(cfg_p), "%s/p", tmpdir);
	snprintf(cfg_q, sizeof(cfg_q), "%s/q", tmpdir);
	ck_assert_int_eq(mkdir(cfg_p, 0755), 0);
	ck_assert_int_eq(mkdir(cfg_q, 0755), 0);
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\", \"%s/\"]}", cfg_p, cfg_q);
	accelp_setup_opts so = {
		.config_json = json,
		.skip_env = 1,
		.extra_dirs = extra,
		.n_extra_dirs = 1,
	};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_OK);
	ck_assert_int_eq(s.failed_at, ACCELP_SETUP_OK);
	const char *const want[][2] = {
		{"/cli/x", "--plugin-dir"}, {cfg_p, "plugin_dirs"}, {cfg_q, "plugin_dirs"},
		{"/env/a", "ACCEL_PLUGIN_PATH"}, {"/env/b", "ACCEL_PLUGIN_PATH"},
		{ACCEL_PLUGINDIR, "install"},
	};
	ck_assert_uint_eq(accelp_loader_dir_count(s.loader), 6);
	for (uint32_t i = 0; i < 6; i++) {
		const char *origin = NULL;
		ck_assert_str_eq(accelp_loader_dir(s.loader, i, &origin, NULL), want[i][0]);
		ck_assert_str_eq(origin, want[i][1]);
	}
	ck_assert_ptr_null(s.config_file);
	accelp_setup_fini(&s);
	ck_assert_ptr_null(s.loader);
	ck_assert_ptr_null(s.cfg);
}
END_TEST

/* File < environment < sets, each value with its source; resolve. */
START_TEST(layers_and_sources)
{
	unsetenv("ACCEL_PLUGIN_PATH");
	const char *file = write_file("c.json", "{\"seed\": 1, \"gradient_accumulation_steps\": 2}\n");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", file);
	setenv("ACCEL_SEED", "5", 1);
	setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "3", 1);
	const char *sets[] = {"gradient_accumulation_steps=4", NULL};
	accelp_setup_opts so = {
		.config_path = path,
		.config_path_from = "--config",
		.sets = sets,
		.sets_origin = "test sets",
		.resolve = 1,
		.module_errors_first = 1,
	};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	/* no plugin directory holds ddp: module_errors_first does not make a
	 * resolved config fail, only the module step does */
	ck_assert_msg(accelp_setup_run(&so, &s, &err) == ACCEL_OK, "%s", err.msg);
	ck_assert_str_eq(s.config_file, path);
	ck_assert_str_eq(s.config_from, "--config");
	int64_t v;
	ck_assert_int_eq(accelp_config_get_int(s.cfg, "seed", &v), ACCEL_OK);
	ck_assert_int_eq(v, 5);
	ck_assert_str_eq(accelp_config_source(s.cfg, "seed"), "env ACCEL_SEED");
	ck_assert_int_eq(accelp_config_get_int(s.cfg, "gradient_accumulation_steps", &v), ACCEL_OK);
	ck_assert_int_eq(v, 4);
	ck_assert_str_eq(accelp_config_source(s.cfg, "gradient_accumulation_steps"),
	                 "test sets gradient_accumulation_steps=4");
	ck_assert_uint_eq(s.sel.n, 1);
	ck_assert_str_eq(s.sel.names[0], "ddp");
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_modules(&s, 0, &err), ACCEL_ERR_NOT_FOUND);
	ASSERT_HAS(err.msg, "no plugin named 'ddp'");
	accelp_setup_fini(&s);

	/* skip_env: the file's value */
	so.skip_env = 1;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(s.cfg, "seed", &v), ACCEL_OK);
	ck_assert_int_eq(v, 1);
	accelp_setup_fini(&s);
	unsetenv("ACCEL_SEED");
	unsetenv("ACCEL_GRADIENT_ACCUMULATION_STEPS");
}
END_TEST

/* A config that cannot be read: an error where it is needed (a context,
 * accel config), kept aside where it is not (accel plugins, accel env). */
START_TEST(unreadable_config)
{
	unsetenv("ACCEL_PLUGIN_PATH");
	char missing[PATH_MAX];
	snprintf(missing, sizeof(missing), "%s/missing.json", tmpdir);
	setenv("ACCEL_CONFIG", missing, 1);
	accelp_setup_opts so = {.config_optional = 0};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_IO);
	ck_assert_int_eq(s.failed_at, ACCELP_SETUP_CONFIG);
	ASSERT_HAS(err.msg, missing);
	ck_assert_str_eq(s.config_from, "ACCEL_CONFIG");
	ck_assert_ptr_null(s.loader);
	accelp_setup_fini(&s);

	so.config_optional = 1;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_OK);
	ck_assert_int_eq(err.code, ACCEL_OK);
	ck_assert_int_eq(s.config_err.code, ACCEL_ERR_IO);
	ASSERT_HAS(s.config_err.msg, missing);
	ck_assert_str_eq(s.config_file, missing);
	ck_assert_ptr_nonnull(s.loader);
	ck_assert_uint_eq(accelp_loader_dir_count(s.loader), 1);   /* install only */
	accelp_setup_fini(&s);
	unsetenv("ACCEL_CONFIG");

	/* plugin_dirs that is not a list of names: its directories are not
	 * searched, and the message says where it came from */
	const char *bad = write_file("bad.json", "{\"plugin_dirs\": \"/one/dir\"}\n");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", bad);
	so.config_path = path;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_OK);
	ASSERT_HAS(s.config_err.msg, "plugin_dirs (");
	ASSERT_HAS(s.config_err.msg, "bad.json:1:");
	ASSERT_HAS(s.config_err.msg, ") must be a list of directory names");
	ck_assert_uint_eq(accelp_loader_dir_count(s.loader), 1);
	accelp_setup_fini(&s);
	so.config_optional = 0;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(s.failed_at, ACCELP_SETUP_LOADER);
	ASSERT_HAS(err.msg, "must be a list of directory names");
	accelp_setup_fini(&s);

	/* an empty name */
	so.config_path = NULL;
	so.config_json = "{\"plugin_dirs\": [\"/\", \"\"]}";
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(err.msg, "plugin_dirs[1] (from <config_json>:1:23) is an empty string; "
	                          "name a directory (\".\" for the current one)");
	accelp_setup_fini(&s);

	/* every bad entry, each at its own position, in the config's error
	 * list (what `accel config validate` prints one per line) */
	so.config_json = "{\"plugin_dirs\": [\"/nonexistent-a/x\", \"/\", \"\",\n"
	                 "  \"/nonexistent-b\"]}";
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(s.failed_at, ACCELP_SETUP_LOADER);
	ck_assert_uint_eq(accelp_config_error_count(s.cfg), 3);
	ck_assert_str_eq(accelp_config_error_get(s.cfg, 0),
	                 "plugin_dirs[0] (from <config_json>:1:18) is '/nonexistent-a/x', which does "
	                 "not exist (the nearest folder above it that does is /): fix the name, "
	                 "create the folder or remove the entry");
	ck_assert_str_eq(accelp_config_error_get(s.cfg, 1),
	                 "plugin_dirs[2] (from <config_json>:1:43) is an empty string; name a "
	                 "directory (\".\" for the current one)");
	ck_assert_str_eq(accelp_config_error_get(s.cfg, 2),
	                 "plugin_dirs[3] (from <config_json>:2:3) is '/nonexistent-b', which does "
	                 "not exist (the nearest folder above it that does is /): fix the name, "
	                 "create the folder or remove the entry");
	char want[3 * ACCEL_ERRMSG_MAX];
	snprintf(want, sizeof(want), "%s; also: %s; also: %s", accelp_config_error_get(s.cfg, 0),
	         accelp_config_error_get(s.cfg, 1), accelp_config_error_get(s.cfg, 2));
	ck_assert_str_eq(err.msg, want);
	accelp_setup_fini(&s);

	/* past the limit: ACCEL_CONFIG_ERRORS_MAX recorded, the rest counted */
	static char many[16384];
	size_t used = (size_t)snprintf(many, sizeof(many), "{\"plugin_dirs\": [");
	for (int i = 0; i < ACCEL_CONFIG_ERRORS_MAX + 5; i++)
		used += (size_t)snprintf(many + used, sizeof(many) - used, "%s\"/nonexistent/%d\"",
		                         i ? ", " : "", i);
	snprintf(many + used, sizeof(many) - used, "]}");
	so.config_json = many;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_CONFIG);
	ck_assert_uint_eq(accelp_config_error_count(s.cfg), ACCEL_CONFIG_ERRORS_MAX);
	ck_assert_uint_eq(accelp_config_error_more(s.cfg), 5);
	ASSERT_HAS(err.msg, "plugin_dirs[0] (from <config_json>:1:18) is '/nonexistent/0'");
	ASSERT_HAS(err.msg, "more problems; `accel config validate` lists them)");
	accelp_setup_fini(&s);
}
END_TEST

/* A bad key: resolve fails; with module_errors_first a selected plugin that
 * cannot be used is the error instead. */
START_TEST(resolve_failure)
{
	unsetenv("ACCEL_PLUGIN_PATH");
	accelp_setup_opts so = {.config_json = "{\"seeed\": 1}", .skip_env = 1, .resolve = 1};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(s.failed_at, ACCELP_SETUP_RESOLVE);
	ck_assert_str_eq(err.msg, "unknown key 'seeed' at <config_json>:1:2; did you mean 'seed'?");
	/* the selection is there for the module step */
	ck_assert_str_eq(s.sel.names[0], "ddp");
	accelp_setup_fini(&s);

	so.module_errors_first = 1;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_ERR_NOT_FOUND);
	ASSERT_HAS(err.msg, "no plugin named 'ddp'");
	accelp_setup_fini(&s);
}
END_TEST

/* The loader offers CUDA exactly when the probe says so (what accel env
 * prints and what needs-cuda modules are checked against). */
START_TEST(cuda_offer_follows_the_probe)
{
	unsetenv("ACCEL_PLUGIN_PATH");
	accelp_setup_opts so = {.skip_env = 1, .report_cuda = 1};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_setup_run(&so, &s, &err), ACCEL_OK);
	uint32_t bits;
	int32_t cc;
	accelp_cuda_offered(&s.cuda, &bits, &cc);
	int gpu = ACCEL_HAVE_CUDA && s.cuda.n_gpus > 0;
	ck_assert_uint_eq(bits, gpu ? ACCEL_REQ_CUDA : 0u);
	ck_assert_int_eq(cc, gpu ? s.cuda.best_cc : 0);
	if (s.cuda.n_gpus < 0)
		ck_assert_msg(s.cuda.driver_error[0] != '\0', "no GPU count and no reason");
	accelp_setup_fini(&s);
}
END_TEST

static Suite *setup_suite(void)
{
	Suite *s = suite_create("setup");
	TCase *tc = tcase_create("setup");
	tcase_add_checked_fixture(tc, setup_tmp, teardown_tmp);
	tcase_add_test(tc, directories_in_search_order);
	tcase_add_test(tc, layers_and_sources);
	tcase_add_test(tc, unreadable_config);
	tcase_add_test(tc, resolve_failure);
	tcase_add_test(tc, cuda_offer_follows_the_probe);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(setup_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
