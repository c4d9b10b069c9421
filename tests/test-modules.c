/* SPDX-License-Identifier: MIT */
/* tests/test-modules.c: a dlopen smoke test of every module this build made
 * (the plugins and comm backends on ACCEL_PLUGIN_PATH): each loads through
 * the real loader and host table, has the kind and name its file says, and
 * is usable, or unavailable only for a requirement this machine lacks. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctx-impl.h"
#include "cuda_probe.h"
#include "loader.h"

START_TEST(every_built_module_loads)
{
	const char *path = getenv("ACCEL_PLUGIN_PATH");
	ck_assert_msg(path && *path, "ACCEL_PLUGIN_PATH is not set (run through meson test)");
	char *dirs = strdup(path);
	uint32_t avail;
	int32_t cc;
	accelp_cuda_info cuda;
	accelp_cuda_probe(&cuda);
	accelp_cuda_offered(&cuda, &avail, &cc);
	int n = 0;
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		DIR *dh = opendir(d);
		ck_assert_msg(dh != NULL, "module directory %s is missing", d);
		for (struct dirent *e; (e = readdir(dh));) {
			size_t len = strlen(e->d_name);
			if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0)
				continue;
			char file[4096];
			snprintf(file, sizeof(file), "%s/%s", d, e->d_name);
			accel_loader *ld = NULL;
			accel_err err = {0};
			const accel_module *m = NULL;
			ck_assert_int_eq(accelp_loader_new(accelp_host_table(), &ld, &err), ACCEL_OK);
			accelp_loader_set_available(ld, avail, cc);
			ck_assert_int_eq(accelp_loader_load_file(ld, file, &m, &err), ACCEL_OK);
			ck_assert_ptr_nonnull(m);
			int comm = strncmp(e->d_name, "comm-", 5) == 0;
			ck_assert_msg(m->status == ACCEL_MODULE_OK ||
			              (m->status == ACCEL_MODULE_UNAVAILABLE && m->reason &&
			               strstr(m->reason, "needs") != NULL),
			              "%s: status %d: %s", file, m->status,
			              m->reason ? m->reason : "(no reason)");
			ck_assert_int_eq(m->kind, comm ? ACCEL_MODULE_COMM : ACCEL_MODULE_PLUGIN);
			/* file comm-shm.so holds backend "shm", ddp.so plugin "ddp" */
			char stem[256];
			snprintf(stem, sizeof(stem), "%.*s", (int)(len - 3 - (comm ? 5 : 0)),
			         e->d_name + (comm ? 5 : 0));
			ck_assert_str_eq(m->name, stem);
			if (comm)
				ck_assert_ptr_nonnull(m->comm->allreduce);
			else
				ck_assert_ptr_nonnull(m->plugin->init);
			accelp_loader_free(ld);
			n++;
		}
		closedir(dh);
	}
	free(dirs);
	ck_assert_msg(n >= 2, "only %d modules found on ACCEL_PLUGIN_PATH", n);
}
END_TEST

static Suite *modules_suite(void)
{
	Suite *s = suite_create("modules");
	TCase *tc = tcase_create("dlopen");
	tcase_add_test(tc, every_built_module_loads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(modules_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
