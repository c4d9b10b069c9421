/* SPDX-License-Identifier: MIT */
/* tests/test-loader.c: the plugin loader against the fixtures of
 * tests/fixtures/: each broken file gets the exact status and a one-line
 * reason naming its path and cause; good files load with their schema;
 * requirements, duplicates, search order and lookups with suggestions. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel-build-config.h"
#include "accel/accel.h"
#include "comm.h"
#include "ctx-impl.h"
#include "loader.h"
#include "log.h"

/* ---- a host table of our own: entry functions only use log and error ---- */

static void t_log(accel_host *h, int32_t level, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static void t_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	(void)h;
	va_list ap;
	va_start(ap, fmt);
	accelp_logv(level, fmt, ap);
	va_end(ap);
}

static int t_error(accel_host *h, int32_t code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int t_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!h)
		accelp_loader_entry_error(msg);
	return code;
}

static const accel_host_v1 t_host = {
	.struct_size = sizeof(accel_host_v1),
	.abi_major = ACCEL_ABI_MAJOR,
	.abi_minor = ACCEL_ABI_MINOR,
	.accel_version = ACCEL_VERSION_STRING,
	.log = t_log,
	.error = t_error,
};

/* ---- helpers ---------------------------------------------------------------- */

/* Short enough that every path built from them fits PATH_MAX. */
static char fixdir[1024];
static char tmpdir[1024];

static void setup_keep_path(void)
{
	const char *b = getenv("ACCEL_TEST_BUILDDIR");
	ck_assert_msg(b != NULL, "ACCEL_TEST_BUILDDIR is not set (run through meson test)");
	snprintf(fixdir, sizeof(fixdir), "%s/tests/fixtures", b);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/accel-test-loader-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void setup(void)
{
	setup_keep_path();
	/* Only the directories a test adds may be searched. */
	unsetenv("ACCEL_PLUGIN_PATH");
}

static void rm_tree(const char *dir)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	int r = system(cmd);
	(void)r;
}

static void teardown(void)
{
	if (tmpdir[0])
		rm_tree(tmpdir);
}

static const char *fx(const char *file)
{
	static char p[4][2048];
	static int k;
	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", fixdir, file);
	return p[k];
}

/* tmpdir/sub/ with symlinks to the named fixtures; returns the dir. */
static const char *scenario(const char *sub, ...)
{
	static char d[4][2048];
	static int k;
	k = (k + 1) % 4;
	snprintf(d[k], sizeof(d[k]), "%s/%s", tmpdir, sub);
	ck_assert_int_eq(mkdir(d[k], 0755), 0);
	va_list ap;
	va_start(ap, sub);
	for (const char *f; (f = va_arg(ap, const char *));) {
		char link[PATH_MAX];
		snprintf(link, sizeof(link), "%s/%s", d[k], f);
		ck_assert_int_eq(symlink(fx(f), link), 0);
	}
	va_end(ap);
	return d[k];
}

static accel_loader *new_loader(void)
{
	accel_loader *ld = NULL;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_new(&t_host, &ld, &err), ACCEL_OK);
	ck_assert_ptr_nonnull(ld);
	return ld;
}

static const accel_module *load1(accel_loader *ld, const char *file)
{
	const accel_module *m = NULL;
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_load_file(ld, fx(file), &m, &err), ACCEL_OK);
	ck_assert_int_eq(err.code, ACCEL_OK);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m->path, fx(file));
	return m;
}

/* A broken or unavailable module's reason: one line, "<path>: <cause>". */
static void assert_reason(const accel_module *m, int status, const char *cause)
{
	ck_assert_msg(m->status == status, "%s: status %s, expected %s (reason: %s)", m->path,
	              accelp_loader_status_name(m->status), accelp_loader_status_name(status),
	              m->reason ? m->reason : "none");
	ck_assert_ptr_nonnull(m->reason);
	ck_assert_ptr_null(strchr(m->reason, '\n'));
	size_t n = strlen(m->path);
	ck_assert_msg(!strncmp(m->reason, m->path, n) && !strncmp(m->reason + n, ": ", 2),
	              "reason does not start with the path: %s", m->reason);
	ck_assert_ptr_eq(m->cause, m->reason + n + 2);
	ck_assert_msg(strstr(m->cause, cause) != NULL, "reason '%s' lacks '%s'", m->reason, cause);
}

static long file_size(const char *path)
{
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	return (long)st.st_size;
}

/* stderr (where the logger writes) into tmpdir/stderr.txt between
 * capture_begin() and capture_end(), which returns the text. */
static int saved_stderr = -1;
static char captured[8192];

static void capture_begin(void)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/stderr.txt", tmpdir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	fflush(stderr);
	saved_stderr = dup(STDERR_FILENO);
	ck_assert_int_ge(saved_stderr, 0);
	ck_assert_int_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	close(fd);
}

static const char *capture_end(void)
{
	char p[PATH_MAX];
	fflush(stderr);
	ck_assert_int_eq(dup2(saved_stderr, STDERR_FILENO), STDERR_FILENO);
	close(saved_stderr);
	snprintf(p, sizeof(p), "%s/stderr.txt", tmpdir);
	FILE *fp = fopen(p, "r");
	ck_assert_ptr_nonnull(fp);
	size_t n = fread(captured, 1, sizeof(captured) - 1, fp);
	captured[n] = '\0';
	fclose(fp);
	return captured;
}

/* ---- good modules ------------------------------------------------------------ */

START_TEST(good_plugin_loads_with_schema)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "good.so");
	ck_assert_int_eq(m->status, ACCEL_MODULE_OK);
	ck_assert_ptr_null(m->reason);
	ck_assert_ptr_null(m->cause);
	ck_assert_int_eq(m->kind, ACCEL_MODULE_PLUGIN);
	ck_assert_int_eq(m->abi_major, 1);
	ck_assert_uint_eq(m->abi_minor, ACCEL_ABI_MINOR);
	ck_assert_str_eq(m->name, "good");
	ck_assert_str_eq(m->version, "1.2.3");
	ck_assert_str_eq(m->summary, "test fixture good");
	ck_assert_str_eq(m->origin, "file");
	ck_assert_uint_eq(m->role, ACCEL_ROLE_STRATEGY);
	ck_assert_uint_eq(m->caps, ACCEL_CAP_CPU);
	ck_assert_uint_eq(m->requires, 0);
	ck_assert_uint_eq(m->state_version, 1);
	ck_assert_ptr_nonnull(m->plugin);
	ck_assert_ptr_null(m->comm);
	ck_assert_ptr_nonnull(m->handle);
	ck_assert_str_eq(m->plugin->desc->name, "good");
	/* Copies in this core's layout; the schema is the normalized one. */
	ck_assert_uint_eq(m->plugin->struct_size, sizeof(accel_plugin_v1));
	ck_assert_ptr_eq(m->plugin->desc->params, m->params);
	ck_assert_uint_eq(m->plugin->desc->n_params, m->n_params);
	ck_assert_str_eq(m->config_section, "good");

	ck_assert_uint_eq(m->n_params, 7);
	const accel_param_schema_v1 *p = m->params;
	ck_assert_uint_eq(p[0].struct_size, sizeof(accel_param_schema_v1));
	ck_assert_str_eq(p[0].key, "overlap");
	ck_assert_uint_eq(p[0].type, ACCEL_CFG_BOOL);
	ck_assert_str_eq(p[0].default_json, "true");
	ck_assert_str_eq(p[1].key, "bucket_cap_mb");
	ck_assert_uint_eq(p[1].type, ACCEL_CFG_INT);
	ck_assert_str_eq(p[1].default_json, "25");
	ck_assert_double_eq(p[1].min, 1);
	ck_assert_double_eq(p[1].max, 4096);
	ck_assert_str_eq(p[1].help, "Bucket size in MiB.");
	ck_assert_uint_eq(p[2].type, ACCEL_CFG_DOUBLE);
	ck_assert_str_eq(p[3].default_json, "\"x\"");
	ck_assert_str_eq(p[4].key, "offload.device");
	ck_assert_uint_eq(p[4].type, ACCEL_CFG_ENUM);
	ck_assert_str_eq(p[4].choices, "none|cpu|nvme");
	ck_assert_uint_eq(p[5].type, ACCEL_CFG_STRLIST);
	ck_assert_str_eq(p[6].key, "no_default");
	ck_assert_ptr_null(p[6].default_json);

	/* The same file again is the same record, not a duplicate. */
	const accel_module *again = NULL;
	ck_assert_int_eq(accelp_loader_load_file(ld, fx("good.so"), &again, NULL), ACCEL_OK);
	ck_assert_ptr_eq(again, m);
	ck_assert_uint_eq(accelp_loader_count(ld), 1);

	/* A plugin the loader found can be initialized through its vtable. */
	void *state = NULL;
	ck_assert_int_eq(m->plugin->init(&t_host, NULL, &state), ACCEL_OK);
	ck_assert_ptr_nonnull(state);
	m->plugin->fini(state);
	ck_assert_ptr_null(accelp_loader_free(ld));
}
END_TEST

START_TEST(good_comm_backend_loads)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "comm-good.so");
	ck_assert_int_eq(m->status, ACCEL_MODULE_OK);
	ck_assert_int_eq(m->kind, ACCEL_MODULE_COMM);
	ck_assert_str_eq(m->name, "fx_comm");
	ck_assert_str_eq(m->version, "0.0.1");
	ck_assert_uint_eq(m->devices, 1u << ACCEL_DEVICE_CPU);
	ck_assert_uint_eq(m->role, 0);
	ck_assert_ptr_nonnull(m->comm);
	ck_assert_ptr_null(m->plugin);
	ck_assert_str_eq(m->config_section, "fx_comm");
	ck_assert_uint_eq(m->n_params, 1);
	ck_assert_str_eq(m->params[0].key, "timeout_s");
	ck_assert_double_eq(m->params[0].max, 86400);

	accel_err err;
	accelp_err_clear(&err);
	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_COMM, "fx_comm", &f, &err), ACCEL_OK);
	ck_assert_ptr_eq(f, m);
	ck_assert_int_eq(accelp_loader_find(ld, 0, "fx_comm", &f, &err), ACCEL_OK);
	ck_assert_ptr_eq(f, m);
	/* Plugins and comm backends are separate name spaces. */
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "fx_comm", &f, &err),
	                 ACCEL_ERR_NOT_FOUND);
	accelp_loader_free(ld);
}
END_TEST

/* ---- broken files: exact status and one-line reason ------------------------------ */

START_TEST(not_an_elf)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "not-elf.so");
	assert_reason(m, ACCEL_MODULE_BROKEN, "not an ELF shared object (starts with \"This is not \")");
	ck_assert_int_eq(m->kind, 0);
	ck_assert_ptr_null(m->name);
	ck_assert_ptr_null(m->handle);
	accelp_loader_free(ld);
}
END_TEST

START_TEST(truncated)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "truncated.so");
	char want[128];
	long half = file_size(fx("truncated.so"));
	ck_assert_int_eq(half, file_size(fx("good.so")) / 2);
	snprintf(want, sizeof(want), "truncated: file is %ld bytes, its ", half);
	assert_reason(m, ACCEL_MODULE_BROKEN, want);
	ck_assert_ptr_null(m->handle);
	accelp_loader_free(ld);
}
END_TEST

START_TEST(missing_entry)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "no-entry.so");
	assert_reason(m, ACCEL_MODULE_BROKEN,
	              "missing entry symbol: exports neither accel_plugin_entry_v1 nor "
	              "accel_comm_entry_v1");
	ck_assert_int_eq(m->abi_major, 0);
	ck_assert_ptr_null(m->name);
	accelp_loader_free(ld);
}
END_TEST

START_TEST(wrong_abi_major)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "abi-v9.so");
	assert_reason(m, ACCEL_MODULE_BROKEN, "built for plugin ABI v9; this accel supports v1");
	ck_assert_int_eq(m->abi_major, 9);
	ck_assert_ptr_null(m->plugin);
	accelp_loader_free(ld);
}
END_TEST

START_TEST(struct_size_too_small)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "small-struct.so");
	char want[256];
	snprintf(want, sizeof(want),
	         "struct_size too small: accel_plugin_v1.struct_size is %zu, a v1 strategy needs "
	         "at least %zu (through step)", offsetof(accel_plugin_v1, init),
	         offsetof(accel_plugin_v1, step) + sizeof(void *));
	assert_reason(m, ACCEL_MODULE_BROKEN, want);
	ck_assert_ptr_null(m->plugin);
	accelp_loader_free(ld);
}
END_TEST

/* A hook whose vtable ends after fini is valid; what lies past its
 * struct_size (a post_step pointer here) must read as NULL. */
START_TEST(short_hook_is_normalized)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "short-hook.so");
	ck_assert_msg(m->status == ACCEL_MODULE_OK, "%s", m->reason);
	const accel_plugin_v1 *vt = m->plugin;
	ck_assert_ptr_nonnull(vt);
	ck_assert_uint_eq(vt->struct_size, sizeof(accel_plugin_v1));
	ck_assert_ptr_nonnull(vt->init);
	ck_assert_ptr_nonnull(vt->fini);
	ck_assert_ptr_null(vt->validate);
	ck_assert_ptr_null(vt->post_step);
	ck_assert_ptr_null(vt->extension);
	ck_assert_str_eq(vt->desc->name, "short-hook");
	ck_assert_uint_eq(vt->desc->struct_size, sizeof(accel_plugin_desc_v1));
	accelp_loader_free(ld);
}
END_TEST

START_TEST(null_required_slot)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "null-slot.so");
	assert_reason(m, ACCEL_MODULE_BROKEN, "strategy 'null-slot': required slot step is NULL");
	ck_assert_str_eq(m->name, "null-slot");
	const accel_module *c = load1(ld, "comm-null-wait.so");
	assert_reason(c, ACCEL_MODULE_BROKEN, "comm backend 'fx_comm': required slot wait is NULL");
	accelp_loader_free(ld);
}
END_TEST

START_TEST(entry_returns_null_with_text)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "entry-null.so");
	char want[128];
	snprintf(want, sizeof(want),
	         "accel_plugin_entry_v1 returned NULL: needs host ABI minor %d, this host has %d",
	         ACCEL_ABI_MINOR + 1, ACCEL_ABI_MINOR);
	assert_reason(m, ACCEL_MODULE_BROKEN, want);
	/* The capture ends with the entry call: later errors do not stick. */
	accelp_loader_entry_error("outside any entry");
	ck_assert_ptr_null(strstr(m->reason, "outside"));
	accelp_loader_free(ld);
}
END_TEST

START_TEST(bad_schema_and_name)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "bad-schema.so");
	assert_reason(m, ACCEL_MODULE_BROKEN,
	              "schema entry 0 ('bad_schema.steps', int): default \"ten\" is not an integer");
	const accel_module *n = load1(ld, "bad-name.so");
	assert_reason(n, ACCEL_MODULE_BROKEN,
	              "plugin name \"Bad Name\" is not 1-63 characters of [a-z0-9_-]");
	ck_assert_ptr_null(n->name);
	accelp_loader_free(ld);
}
END_TEST

/* dlopen() failures keep the dynamic linker's text, without the path twice. */
START_TEST(unresolved_symbol)
{
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "undefined-sym.so");
	assert_reason(m, ACCEL_MODULE_BROKEN, "cannot load: ");
	ck_assert_ptr_nonnull(strstr(m->cause, "undefined symbol: fx_not_defined_anywhere"));
	ck_assert_ptr_null(strstr(m->cause, "undefined-sym.so"));
	ck_assert_ptr_null(m->handle);
	accelp_loader_free(ld);
}
END_TEST

START_TEST(missing_file)
{
	accel_loader *ld = new_loader();
	const accel_module *m = NULL;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/nothing-here.so", tmpdir);
	ck_assert_int_eq(accelp_loader_load_file(ld, p, &m, NULL), ACCEL_OK);
	assert_reason(m, ACCEL_MODULE_BROKEN, "cannot open: No such file or directory");
	accelp_loader_free(ld);
}
END_TEST

/* ---- requirements ----------------------------------------------------------------- */

START_TEST(needs_cuda_unavailable)
{
	accel_loader *ld = new_loader();
	accelp_loader_set_available(ld, 0, 0);
	const accel_module *m = load1(ld, "needs-cuda.so");
	assert_reason(m, ACCEL_MODULE_UNAVAILABLE,
	              "plugin 'needs-cuda' needs CUDA (no CUDA device module or no GPU)");
	ck_assert_uint_eq(m->requires, ACCEL_REQ_CUDA);
	ck_assert_int_eq(m->min_cuda_cc, 80);
	ck_assert_ptr_nonnull(m->plugin);

	accel_err err;
	accelp_err_clear(&err);
	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "needs-cuda", &f, &err),
	                 ACCEL_ERR_UNSUPPORTED);
	ck_assert_ptr_null(f);
	ck_assert_ptr_nonnull(strstr(err.msg, fx("needs-cuda.so")));
	ck_assert_ptr_nonnull(strstr(err.msg, "needs CUDA (no CUDA device module or no GPU)"));

	/* A GPU that is too old. */
	accelp_loader_set_available(ld, ACCEL_REQ_CUDA, 75);
	assert_reason(m, ACCEL_MODULE_UNAVAILABLE,
	              "needs a GPU of compute capability >= 8.0 (best here: 7.5)");
	/* Good enough: usable, reason gone. */
	accelp_loader_set_available(ld, ACCEL_REQ_CUDA, 90);
	ck_assert_int_eq(m->status, ACCEL_MODULE_OK);
	ck_assert_ptr_null(m->reason);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "needs-cuda", &f, &err),
	                 ACCEL_OK);
	ck_assert_ptr_eq(f, m);

	char buf[64];
	ck_assert_str_eq(accelp_loader_requires_str(m->requires, m->min_cuda_cc, buf, sizeof(buf)),
	                 "CUDA (cc >= 8.0)");
	ck_assert_str_eq(accelp_loader_requires_str(0, 0, buf, sizeof(buf)), "none");
	ck_assert_str_eq(accelp_loader_requires_str(ACCEL_REQ_MPI | ACCEL_REQ_NCCL, 0, buf,
	                                            sizeof(buf)), "NCCL, MPI");
	accelp_loader_free(ld);
}
END_TEST

/* ACCEL_REQ_MPI is met by a loaded comm backend named "mpi", whichever
 * is loaded first. */
START_TEST(needs_mpi_follows_backend)
{
	accel_loader *ld = new_loader();
	accelp_loader_set_available(ld, 0, 0);
	const accel_module *m = load1(ld, "needs-mpi.so");
	assert_reason(m, ACCEL_MODULE_UNAVAILABLE,
	              "plugin 'needs-mpi' needs MPI (no usable mpi comm backend)");
	const accel_module *c = load1(ld, "comm-mpi.so");
	ck_assert_int_eq(c->status, ACCEL_MODULE_OK);
	ck_assert_str_eq(c->name, "mpi");
	ck_assert_msg(m->status == ACCEL_MODULE_OK, "%s", m->reason);
	ck_assert_ptr_null(m->reason);
	accelp_loader_free(ld);

	/* Backend first, then the plugin, through a scan of two directories. */
	const char *d1 = scenario("backend", "comm-mpi.so", (const char *)NULL);
	const char *d2 = scenario("plugin", "needs-mpi.so", (const char *)NULL);
	ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d2, "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d1, "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_get(ld, 0)->status, ACCEL_MODULE_OK);
	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "needs-mpi", &f, &err),
	                 ACCEL_OK);
	accelp_loader_free(ld);
}
END_TEST

/* ---- duplicates ----------------------------------------------------------------- */

START_TEST(duplicate_names)
{
	const char *d = scenario("dups", "dup-a.so", "dup-b.so", "good.so", (const char *)NULL);
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d, "plugin_dirs", &err), ACCEL_OK);
	accelp_log_set_level(ACCEL_LOG_INFO);
	capture_begin();
	ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
	/* no notice: neither file comes first, the lookup is the error */
	ck_assert_str_eq(capture_end(), "");
	ck_assert_uint_eq(accelp_loader_count(ld), 3);
	/* By name within a directory. */
	const accel_module *a = accelp_loader_get(ld, 0), *b = accelp_loader_get(ld, 1);
	char pa[PATH_MAX], pb[PATH_MAX];
	snprintf(pa, sizeof(pa), "%s/dup-a.so", d);
	snprintf(pb, sizeof(pb), "%s/dup-b.so", d);
	ck_assert_str_eq(a->path, pa);
	ck_assert_str_eq(b->path, pb);
	ck_assert_str_eq(a->origin, "plugin_dirs");
	ck_assert_int_eq(a->status, ACCEL_MODULE_OK);
	char cause[2 * PATH_MAX];
	snprintf(cause, sizeof(cause), "plugin 'dup' is also provided by %s in the same directory; "
	         "remove or rename one", pa);
	assert_reason(b, ACCEL_MODULE_SHADOWED, cause);
	ck_assert_str_eq(b->cause, cause);
	ck_assert_str_eq(b->shadowed_by, pa);
	ck_assert_int_eq(b->same_dir, 1);
	ck_assert_ptr_null(a->shadowed_by);

	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "dup", &f, &err),
	                 ACCEL_ERR_PLUGIN);
	ck_assert_ptr_null(f);
	ck_assert_ptr_nonnull(strstr(err.msg, pa));
	ck_assert_ptr_nonnull(strstr(err.msg, pb));
	char want[3 * PATH_MAX];
	snprintf(want, sizeof(want), "two plugins are named 'dup': %s and %s, in one directory; "
	         "remove or rename one", pa, pb);
	ck_assert_str_eq(err.msg, want);
	/* Other names are unaffected. */
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "good", &f, &err), ACCEL_OK);
	ck_assert_str_eq(f->name, "good");
	accelp_loader_free(ld);
}
END_TEST

/* Like PATH: the same name in a later directory is shadowed with a
 * one-line notice, and the earlier file is the one used. */
START_TEST(search_order_decides_the_winner)
{
	const char *d1 = scenario("first", "dup-b.so", (const char *)NULL);
	const char *d2 = scenario("second", "dup-a.so", (const char *)NULL);
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d1, "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d2, "ACCEL_PLUGIN_PATH", &err), ACCEL_OK);
	accelp_log_set_level(ACCEL_LOG_INFO);
	capture_begin();
	ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
	const char *log = capture_end();
	ck_assert_uint_eq(accelp_loader_count(ld), 2);
	const accel_module *first = accelp_loader_get(ld, 0), *second = accelp_loader_get(ld, 1);
	ck_assert_ptr_nonnull(strstr(first->path, "/first/dup-b.so"));
	ck_assert_int_eq(first->status, ACCEL_MODULE_OK);
	ck_assert_ptr_null(first->shadowed_by);
	char cause[2 * PATH_MAX];
	snprintf(cause, sizeof(cause), "plugin 'dup' is shadowed by %s, which comes earlier in "
	         "the search order", first->path);
	assert_reason(second, ACCEL_MODULE_SHADOWED, cause);
	ck_assert_str_eq(second->cause, cause);
	ck_assert_str_eq(second->origin, "ACCEL_PLUGIN_PATH");
	ck_assert_str_eq(second->shadowed_by, first->path);
	ck_assert_int_eq(second->same_dir, 0);
	/* The notice: one line, at info, with both paths. */
	char notice[3 * PATH_MAX];
	snprintf(notice, sizeof(notice), "[accel] info: %s\n", second->reason);
	ck_assert_str_eq(log, notice);
	/* The name is found, and it is the earlier file. */
	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "dup", &f, &err), ACCEL_OK);
	ck_assert_ptr_eq(f, first);
	ck_assert_int_eq(err.code, ACCEL_OK);
	/* Below the info level, no notice. */
	accelp_loader_free(ld);
	ld = new_loader();
	ck_assert_int_eq(accelp_loader_add_dir(ld, d1, "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d2, "ACCEL_PLUGIN_PATH", &err), ACCEL_OK);
	accelp_log_set_level(ACCEL_LOG_WARN);
	capture_begin();
	ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
	ck_assert_str_eq(capture_end(), "");
	ck_assert_int_eq(accelp_loader_get(ld, 1)->status, ACCEL_MODULE_SHADOWED);
	accelp_loader_free(ld);
}
END_TEST

/* ---- directories and scanning ------------------------------------------------------ */

START_TEST(scan_fixture_dir)
{
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	char missing[PATH_MAX];
	snprintf(missing, sizeof(missing), "%s/does-not-exist", tmpdir);
	ck_assert_int_eq(accelp_loader_add_dir(ld, missing, "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_dir(ld, fixdir, "plugin_dirs", &err), ACCEL_OK);
	/* The same directory twice (with a trailing slash): files load once. */
	char again[PATH_MAX + 1];
	snprintf(again, sizeof(again), "%s/", fixdir);
	ck_assert_int_eq(accelp_loader_add_dir(ld, again, "--plugin-dir", &err), ACCEL_OK);
	accelp_loader_set_available(ld, 0, 0);
	ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
	ck_assert_int_eq(err.code, ACCEL_OK);

	ck_assert_uint_eq(accelp_loader_dir_count(ld), 3);
	const char *origin = NULL;
	int exists = -1;
	ck_assert_str_eq(accelp_loader_dir(ld, 0, &origin, &exists), missing);
	ck_assert_str_eq(origin, "plugin_dirs");
	ck_assert_int_eq(exists, 0);
	ck_assert_str_eq(accelp_loader_dir(ld, 2, &origin, &exists), fixdir);
	ck_assert_str_eq(origin, "--plugin-dir");
	ck_assert_int_eq(exists, 1);
	ck_assert_ptr_null(accelp_loader_dir(ld, 3, NULL, NULL));

	/* Every *.so of the fixture directory, each once, by name. */
	const char *expect[][2] = {
		{"abi-v9.so", "broken"},     {"bad-name.so", "broken"},
		{"bad-schema.so", "broken"}, {"comm-broken-nccl.so", "broken"},
		{"comm-good.so", "ok"},
		{"comm-mpi.so", "ok"},       {"comm-null-wait.so", "broken"},
		{"dup-a.so", "ok"},
		{"dup-b.so", "shadowed"},    {"entry-null.so", "broken"},
		{"fractional-range.so", "broken"},
		{"good.so", "ok"},           {"init-fails.so", "ok"},
		{"init-null-key.so", "ok"},  {"init-positive.so", "ok"},
		{"needs-cuda.so", "unavailable"}, {"needs-mpi.so", "ok"},
		{"no-entry.so", "broken"},
		{"not-elf.so", "broken"},    {"null-slot.so", "broken"},
		{"other-major.so", "broken"},
		{"plugin-named-fx-comm.so", "broken"},
		{"section-clash.so", "ok"},
		{"short-hook.so", "ok"},     {"small-struct.so", "broken"},
		{"truncated.so", "broken"},  {"undefined-sym.so", "broken"},
	};
	size_t n = sizeof(expect) / sizeof(expect[0]);
	ck_assert_uint_eq(accelp_loader_count(ld), n);
	for (uint32_t i = 0; i < n; i++) {
		const accel_module *m = accelp_loader_get(ld, i);
		ck_assert_str_eq(m->path, fx(expect[i][0]));
		ck_assert_msg(!strcmp(accelp_loader_status_name(m->status), expect[i][1]),
		              "%s: %s, expected %s (%s)", m->path, accelp_loader_status_name(m->status),
		              expect[i][1], m->reason ? m->reason : "");
		ck_assert_int_eq(m->reason == NULL, m->status == ACCEL_MODULE_OK);
	}
	ck_assert_ptr_null(accelp_loader_get(ld, (uint32_t)n));
	/* Scanning again loads nothing new. */
	ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
	ck_assert_uint_eq(accelp_loader_count(ld), n);
	accelp_loader_free(ld);
}
END_TEST

START_TEST(default_dirs)
{
	setenv("ACCEL_PLUGIN_PATH", "/nonexistent/a::/nonexistent/b/", 1);
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, "/nonexistent/c", "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_default_dirs(ld, &err), ACCEL_OK);
	ck_assert_uint_eq(accelp_loader_dir_count(ld), 4);
	const char *origin;
	int exists;
	ck_assert_str_eq(accelp_loader_dir(ld, 0, &origin, &exists), "/nonexistent/c");
	ck_assert_str_eq(accelp_loader_dir(ld, 1, &origin, &exists), "/nonexistent/a");
	ck_assert_str_eq(origin, "ACCEL_PLUGIN_PATH");
	ck_assert_int_eq(exists, 0);
	ck_assert_str_eq(accelp_loader_dir(ld, 2, &origin, &exists), "/nonexistent/b");
	ck_assert_str_eq(accelp_loader_dir(ld, 3, &origin, &exists), ACCEL_PLUGINDIR);
	ck_assert_str_eq(origin, "install");
	/* Empty names are refused, naming the origin. */
	ck_assert_int_eq(accelp_loader_add_dir(ld, "", "plugin_dirs", &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "plugin_dirs"));
	accelp_loader_free(ld);
}
END_TEST

/* ---- lookups -------------------------------------------------------------------------- */

START_TEST(find_missing_suggests)
{
	const char *d = scenario("some", "good.so", "comm-good.so", (const char *)NULL);
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d, "plugin_dirs", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_dir(ld, "/nonexistent/x", "install", &err), ACCEL_OK);
	/* find() scans by itself. */
	const accel_module *f = (const accel_module *)&err;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "goood", &f, &err),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_eq(f, (const accel_module *)&err); /* untouched on failure */
	char want[PATH_MAX * 2];
	snprintf(want, sizeof(want),
	         "no plugin named 'goood' in %s (plugin_dirs), /nonexistent/x (install, missing) "
	         "(available: good); did you mean 'good'?", d);
	ck_assert_str_eq(err.msg, want);

	/* Nothing close: no suggestion. */
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "zero", &f, &err),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_null(strstr(err.msg, "did you mean"));
	ck_assert_ptr_nonnull(strstr(err.msg, "(available: good)"));

	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_COMM, "fx_com", &f, &err),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(err.msg, "no comm backend named 'fx_com'"));
	ck_assert_ptr_nonnull(strstr(err.msg, "did you mean 'fx_comm'?"));
	accelp_loader_free(ld);

	/* No directories at all. */
	ld = new_loader();
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "ddp", &f, &err),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(err.msg, "no plugin directories are configured"));
	accelp_loader_free(ld);
}
END_TEST

START_TEST(find_broken_says_why)
{
	const char *d = scenario("broken", "null-slot.so", "abi-v9.so", "good.so",
	                         (const char *)NULL);
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d, "plugin_dirs", &err), ACCEL_OK);
	const accel_module *f = NULL;
	/* Named in its descriptor. */
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "null-slot", &f, &err),
	                 ACCEL_ERR_PLUGIN);
	ck_assert_ptr_nonnull(strstr(err.msg, "required slot step is NULL"));
	ck_assert_ptr_nonnull(strstr(err.msg, "/broken/null-slot.so"));
	/* Known only by its file name. */
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "abi-v9", &f, &err),
	                 ACCEL_ERR_PLUGIN);
	ck_assert_ptr_nonnull(strstr(err.msg, "built for plugin ABI v9"));
	ck_assert_ptr_nonnull(strstr(err.msg, "/broken/abi-v9.so"));
	accelp_loader_free(ld);
}
END_TEST

START_TEST(bad_arguments)
{
	accel_err err;
	accelp_err_clear(&err);
	accel_loader *ld = NULL;
	ck_assert_int_eq(accelp_loader_new(NULL, &ld, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_null(ld);
	ck_assert_ptr_null(accelp_loader_free(NULL));
	ld = new_loader();
	const accel_module *f;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_find(ld, 7, "x", &f, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_int_eq(accelp_loader_load_file(ld, "", NULL, NULL), ACCEL_ERR_INVALID_ARG);
	ck_assert_uint_eq(accelp_loader_count(NULL), 0);
	ck_assert_ptr_null(accelp_loader_get(ld, 0));
	accelp_loader_free(ld);
}
END_TEST

/* ---- through the real host table and a context ------------------------------------- */

START_TEST(real_host_forwards_entry_errors)
{
	accel_loader *ld = NULL;
	ck_assert_int_eq(accelp_loader_new(accelp_host_table(), &ld, NULL), ACCEL_OK);
	const accel_module *m = NULL;
	ck_assert_int_eq(accelp_loader_load_file(ld, fx("entry-null.so"), &m, NULL), ACCEL_OK);
	char want[96];
	snprintf(want, sizeof(want), "accel_plugin_entry_v1 returned NULL: needs host ABI minor %d",
	         ACCEL_ABI_MINOR + 1);
	assert_reason(m, ACCEL_MODULE_BROKEN, want);
	accelp_loader_free(ld);
}
END_TEST

/* accel_ctx_new on a JSON config (plugin_dirs and selection), without the
 * environment's configuration; the status, and the context in *ret_ctx. */
static int ctx_json(const char *json, accel_ctx **ret_ctx)
{
	accel_opts opts;
	memset(&opts, 0, sizeof(opts));
	opts.struct_size = sizeof(opts);
	opts.config_json = json;
	opts.skip_env = 1;
	*ret_ctx = NULL;
	int r = accel_ctx_new(&opts, ret_ctx);
	ck_assert_ptr_nonnull(*ret_ctx);
	return r;
}

/* The same, freed: the status, and the message in msg. */
static int ctx_status(const char *json, char *msg, size_t cap)
{
	accel_ctx *ctx;
	int r = ctx_json(json, &ctx);
	snprintf(msg, cap, "%s", accel_errmsg(ctx));
	accel_ctx_free(ctx);
	return r;
}

#define ASSERT_HAS(msg, s) ck_assert_msg(strstr((msg), (s)) != NULL, "'%s' lacks '%s'", (msg), (s))

START_TEST(init_failure_names_path_and_text)
{
	const char *d = scenario("ctx", "good.so", "init-fails.so", (const char *)NULL);
	char json[PATH_MAX + 256];
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"plugins\": [\"init-fails\"]}",
	         d);
	/* The comm backend comes from ACCEL_PLUGIN_PATH (the built modules). */
	char msg[ACCEL_ERRMSG_MAX];
	int r = ctx_status(json, msg, sizeof(msg));
	ck_assert_msg(r == ACCEL_ERR_CONFIG, "status %s, message: %s", accel_status_str(r), msg);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/init-fails.so", d);
	ASSERT_HAS(msg, path);
	ASSERT_HAS(msg, "the frobnicator is not configured (set init_fails.frob)");
	ASSERT_HAS(msg, "init-fails");
}
END_TEST


/* A broken module that comes first in the search order is the one asked
 * for (an override the user put there): its reason, not a silent fall
 * back to a later file of the same name. */
START_TEST(broken_override_is_not_replaced)
{
	const char *d = scenario("later", "good.so", (const char *)NULL);
	char over[PATH_MAX], json[2 * PATH_MAX + 128], msg[ACCEL_ERRMSG_MAX];
	snprintf(over, sizeof(over), "%s/override", fixdir);
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\", \"%s\"], \"strategy\": \"good\"}",
	         over, d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_PLUGIN);
	ASSERT_HAS(msg, "plugin 'good' cannot be used: ");
	ASSERT_HAS(msg, "/override/good.so: ");
	ASSERT_HAS(msg, "required slot step is NULL");
	ASSERT_HAS(msg, "/later/good.so, a later file of that name, is not used in its place");
}
END_TEST

/* A schema clash with a module that is only installed is a warning (that
 * module's keys are unknown); with a selected one, an error naming it. */
START_TEST(schema_clash_of_an_unselected_module)
{
	const char *d = scenario("clash", "good.so", "section-clash.so", (const char *)NULL);
	char json[PATH_MAX + 256], msg[ACCEL_ERRMSG_MAX];
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\"}", d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_OK);
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"plugins\": [\"section-clash\"]}", d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_PLUGIN);
	ASSERT_HAS(msg, "plugin 'section-clash' declares config section 'good', which overlaps "
	                "section 'good' of plugin 'good' (file ");
	ASSERT_HAS(msg, "/clash/section-clash.so)");
}
END_TEST

/* What init returns and what it asks of the host, checked. */
START_TEST(init_results_are_checked)
{
	const char *d = scenario("init", "good.so", "init-positive.so", "init-null-key.so",
	                         (const char *)NULL);
	char json[PATH_MAX + 256], msg[ACCEL_ERRMSG_MAX];
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"plugins\": [\"init-positive\"]}",
	         d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_PLUGIN);
	ASSERT_HAS(msg, "plugin 'init-positive' (");
	ASSERT_HAS(msg, "init returned 1, which is not an accel status");
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"plugins\": [\"init-null-key\"]}",
	         d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_INVALID_ARG);
	ASSERT_HAS(msg, "init-null-key: host->cfg_int: key is NULL");
	/* a hook named as the strategy, a strategy listed in plugins, a name twice */
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"init-positive\"}",
	         d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_CONFIG);
	ASSERT_HAS(msg, "strategy 'init-positive' (");
	ASSERT_HAS(msg, "is not a sharding strategy");
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"plugins\": [\"good\"]}", d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_CONFIG);
	ASSERT_HAS(msg, "'good' is listed in plugins (<config_json>:1:");
	ASSERT_HAS(msg, "but is the strategy");
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", "
	         "\"plugins\": [\"init-positive\", \"init-positive\"]}", d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_CONFIG);
	ASSERT_HAS(msg, "'init-positive' is listed more than once in plugins");
}
END_TEST

/* `backend` may name any installed comm backend (the fixture's init
 * refuses to start, which shows it was the one brought up); a name no
 * backend has gets the loader's suggestion. */
START_TEST(third_party_backend_is_selectable)
{
	const char *d = scenario("be", "good.so", "comm-good.so", (const char *)NULL);
	char json[PATH_MAX + 256], msg[ACCEL_ERRMSG_MAX];
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"backend\": \"fx_comm\"}", d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_UNSUPPORTED);
	ASSERT_HAS(msg, "fixture backend cannot communicate");
	snprintf(json, sizeof(json),
	         "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\", \"backend\": \"fx_comn\"}", d);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_NOT_FOUND);
	ASSERT_HAS(msg, "backend 'fx_comn' (from <config_json>:1:");
	ASSERT_HAS(msg, "no comm backend named 'fx_comn'");
	ASSERT_HAS(msg, "did you mean 'fx_comm'?");
}
END_TEST

/* A lookup of either kind (accel plugins info NAME): a broken plugin does
 * not hide a usable comm backend of the same name. */
START_TEST(broken_plugin_does_not_hide_a_backend)
{
	const char *d = scenario("either", "plugin-named-fx-comm.so", "comm-good.so",
	                         (const char *)NULL);
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d, "plugin_dirs", &err), ACCEL_OK);
	const accel_module *m = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, 0, "fx_comm", &m, &err), ACCEL_OK);
	ck_assert_int_eq(m->kind, ACCEL_MODULE_COMM);
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "fx_comm", &m, &err),
	                 ACCEL_ERR_PLUGIN);
	ck_assert_msg(strstr(err.msg, "required slot step is NULL") != NULL, "%s", err.msg);
	accelp_loader_free(ld);
}
END_TEST

/* The built ddp.so, found on ACCEL_PLUGIN_PATH, into ret_path. */
static void builtin_module(const char *file, char *ret_path, size_t cap)
{
	const char *env = getenv("ACCEL_PLUGIN_PATH");
	ck_assert_msg(env != NULL, "ACCEL_PLUGIN_PATH is not set (run through meson test)");
	char *copy = strdup(env), *save = NULL;
	ck_assert_ptr_nonnull(copy);
	ret_path[0] = '\0';
	for (char *d = strtok_r(copy, ":", &save); d && !ret_path[0]; d = strtok_r(NULL, ":", &save)) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s", d, file);
		if (access(p, R_OK) == 0)
			snprintf(ret_path, cap, "%s", p);
	}
	free(copy);
	ck_assert_msg(ret_path[0], "no %s in ACCEL_PLUGIN_PATH=%s", file, env);
}

static void copy_file(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(out);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
	fclose(in);
	ck_assert_int_eq(fclose(out), 0);
}

/* A newer ddp.so dropped into plugin_dirs overrides the built-in one: the
 * context runs the copy, the built one is listed as shadowed by it, and a
 * notice says so. */
START_TEST(plugin_dirs_override_a_builtin_strategy)
{
	char builtin[PATH_MAX], newer[PATH_MAX], json[PATH_MAX + 64];
	builtin_module("ddp.so", builtin, sizeof(builtin));
	snprintf(newer, sizeof(newer), "%s/newer", tmpdir);
	ck_assert_int_eq(mkdir(newer, 0755), 0);
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\"]}", newer);
	strncat(newer, "/ddp.so", sizeof(newer) - strlen(newer) - 1);
	copy_file(builtin, newer);

	unsetenv("ACCEL_LOG_LEVEL");
	accelp_log_set_level(ACCEL_LOG_INFO);
	accel_ctx *ctx;
	capture_begin();
	int r = ctx_json(json, &ctx);
	const char *log = capture_end();
	ck_assert_msg(r == ACCEL_OK, "%s", accel_errmsg(ctx));
	ck_assert_str_eq(ctx->active[0].module->name, "ddp");
	ck_assert_str_eq(ctx->active[0].module->path, newer);
	ck_assert_str_eq(ctx->active[0].module->origin, "plugin_dirs");
	const accel_module *shadowed = NULL;
	for (uint32_t i = 0; i < accelp_loader_count(ctx->loader); i++)
		if (!strcmp(accelp_loader_get(ctx->loader, i)->path, builtin))
			shadowed = accelp_loader_get(ctx->loader, i);
	ck_assert_ptr_nonnull(shadowed);
	ck_assert_int_eq(shadowed->status, ACCEL_MODULE_SHADOWED);
	ck_assert_str_eq(shadowed->shadowed_by, newer);
	ck_assert_int_eq(shadowed->same_dir, 0);
	char notice[3 * PATH_MAX];
	snprintf(notice, sizeof(notice), "info: %s: plugin 'ddp' is shadowed by %s, which comes "
	         "earlier in the search order\n", builtin, newer);
	ck_assert_msg(strstr(log, notice) != NULL, "log '%s' lacks '%s'", log, notice);
	accel_ctx_free(ctx);
}
END_TEST

/* backend auto with a broken nccl first in the search order: the context
 * starts (host buffers do not need it) with a warning, and a collective on
 * a CUDA buffer names the broken file rather than "not built". */
START_TEST(auto_reports_a_broken_device_backend)
{
	const char *d = scenario("bnccl", "good.so", "comm-broken-nccl.so", (const char *)NULL);
	char json[PATH_MAX + 256];
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\"], \"strategy\": \"good\"}", d);
	accel_ctx *ctx;
	ck_assert_int_eq(ctx_json(json, &ctx), ACCEL_OK);
	float x[4] = {0};
	ck_assert_int_eq(accel_allreduce(ctx, x, x, 4, ACCEL_DTYPE_F32, ACCEL_RED_SUM), ACCEL_OK);
	accel_view v = {sizeof(accel_view), ACCEL_DTYPE_F32, ACCEL_DEVICE_CUDA, 0, x, 4};
	accel_req *req = NULL;
	ck_assert_int_eq(accelp_comm_allreduce(ctx->comm, &v, &v, ACCEL_RED_SUM, &req),
	                 ACCEL_ERR_UNSUPPORTED);
	const char *msg = accel_errmsg(ctx);
	ck_assert_msg(strstr(msg, "nccl: comm backend 'nccl' cannot be used: ") &&
	              strstr(msg, "comm-broken-nccl.so"), "%s", msg);
	accel_ctx_free(ctx);
}
END_TEST

/* ACCEL_HOST_REQUIRE / ACCEL_HOST_HAS (accel/plugin.h): the check every
 * entry starts with, against host tables of other sizes and majors. */
static char req_msg[512];
static int req_calls;

static int req_error(accel_host *h, int32_t code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int req_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	va_list ap;
	(void)h;
	req_calls++;
	va_start(ap, fmt);
	vsnprintf(req_msg, sizeof(req_msg), fmt, ap);
	va_end(ap);
	return code;
}

START_TEST(host_require_checks_size_and_major)
{
	accel_host_v1 host = *accelp_host_table();
	host.error = req_error;
	req_calls = 0;
	ck_assert(ACCEL_HOST_REQUIRE(&host, "x", reduce_bucket_mean));
	ck_assert(ACCEL_HOST_HAS(&host, reduce_bucket_mean));
	ck_assert_int_eq(req_calls, 0);
	ck_assert(!ACCEL_HOST_REQUIRE((const accel_host_v1 *)NULL, "x", reduce_bucket));

	/* A 1.0 host: its table ends before the first minor-1 member. */
	host.struct_size = (uint32_t)offsetof(accel_host_v1, reduce_bucket_mean);
	host.abi_minor = 0;
	ck_assert(!ACCEL_HOST_HAS(&host, reduce_bucket_mean));
	ck_assert(ACCEL_HOST_HAS(&host, store_add));
	ck_assert(ACCEL_HOST_REQUIRE(&host, "x", store_add));
	ck_assert(!ACCEL_HOST_REQUIRE(&host, "mystrategy", reduce_bucket_mean));
	ck_assert_int_eq(req_calls, 1);
	ck_assert_msg(strstr(req_msg, "mystrategy needs accel ABI 1.x with host member "
	                              "reduce_bucket_mean; this host is ABI 1.0") != NULL,
	              "%s", req_msg);

	/* Covered by the size but not filled in. */
	host = *accelp_host_table();
	host.error = req_error;
	host.reduce_bucket_mean = NULL;
	ck_assert(!ACCEL_HOST_HAS(&host, reduce_bucket_mean));
	ck_assert(!ACCEL_HOST_REQUIRE(&host, "x", reduce_bucket_mean));
	ck_assert_int_eq(req_calls, 2);

	/* Another major: refused, and error() (whose place in that layout is
	 * unknown) is not called. */
	host = *accelp_host_table();
	host.error = req_error;
	host.abi_major = ACCEL_ABI_MAJOR + 1;
	ck_assert(!ACCEL_HOST_REQUIRE(&host, "x", store_add));
	ck_assert_int_eq(req_calls, 2);
}
END_TEST

/* Built against a types.h edited to major 2: its entry refuses our host
 * without a word; the loader finds the major it accepts and names it. */
START_TEST(other_major_is_named)
{
	const char *want = "accel_plugin_entry_v1 returned NULL: the plugin was built against "
	                   "accel headers of ABI major 2 (its entry accepts only a host of major "
	                   "2); this accel is ABI 1.";
	accel_loader *ld = new_loader();
	const accel_module *m = load1(ld, "other-major.so");
	assert_reason(m, ACCEL_MODULE_BROKEN, want);
	ASSERT_HAS(m->reason, "rebuild it against this accel's headers (pkg-config --cflags accel)");
	ck_assert_int_eq(m->abi_major, 2);
	ck_assert_ptr_null(m->plugin);
	accelp_loader_free(ld);
	/* the same through the core's own host table */
	ck_assert_int_eq(accelp_loader_new(accelp_host_table(), &ld, NULL), ACCEL_OK);
	m = NULL;
	ck_assert_int_eq(accelp_loader_load_file(ld, fx("other-major.so"), &m, NULL), ACCEL_OK);
	assert_reason(m, ACCEL_MODULE_BROKEN, want);
	/* and selecting it by its file's name says the same */
	accelp_loader_free(ld);
	const char *d = scenario("major", "other-major.so", (const char *)NULL);
	ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, d, "plugin_dirs", &err), ACCEL_OK);
	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "other-major", &f, &err),
	                 ACCEL_ERR_PLUGIN);
	ASSERT_HAS(err.msg, "plugin 'other-major' cannot be used: ");
	ASSERT_HAS(err.msg, "/major/other-major.so: accel_plugin_entry_v1 returned NULL: the "
	                    "plugin was built against accel headers of ABI major 2");
	accelp_loader_free(ld);
}
END_TEST

/* Names like modules that the scan cannot open: a dangling link, a loop
 * of links, a folder.  Looking one up says what it is (not "no plugin
 * named"); the scan warns once per job (global rank 0, or a process not
 * started by a launcher; not the first rank of another node), and a file
 * that holds a module of another name is pointed out. */
START_TEST(find_skipped_says_what)
{
	const char *d = scenario("skips", "good.so", (const char *)NULL);
	char p[PATH_MAX], q[PATH_MAX];
	snprintf(p, sizeof(p), "%s/gone.so", d);
	ck_assert_int_eq(symlink("/nonexistent/gone.so", p), 0);
	snprintf(p, sizeof(p), "%s/loop-a.so", d);
	snprintf(q, sizeof(q), "%s/loop-b.so", d);
	ck_assert_int_eq(symlink(q, p), 0);
	ck_assert_int_eq(symlink(p, q), 0);
	snprintf(p, sizeof(p), "%s/folder.so", d);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	/* a copy (a link would be the same file as good.so, loaded once) */
	char cmd[2 * PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s/renamed.so'", fx("good.so"), d);
	ck_assert_int_eq(system(cmd), 0);

	accelp_log_set_level(ACCEL_LOG_WARN);
	static const char *const rank_vars[] = {"ACCEL_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
	                                        "PMI_RANK", "SLURM_PROCID", "ACCEL_LOCAL_RANK"};
	for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
		unsetenv(rank_vars[i]);
	/* {rank variable, rank, local rank, warns}: 2 nodes of 2 ranks, then
	 * rank 0 and 1 of an MPI launcher, then no launcher at all */
	static const struct {
		const char *var, *rank, *local;
		int warns;
	} who[] = {
		{"ACCEL_RANK", "0", "0", 1}, {"ACCEL_RANK", "1", "1", 0},
		{"ACCEL_RANK", "2", "0", 0}, {"ACCEL_RANK", "3", "1", 0},
		{"OMPI_COMM_WORLD_RANK", "0", NULL, 1}, {"OMPI_COMM_WORLD_RANK", "1", NULL, 0},
		{NULL, NULL, NULL, 1},
	};
	for (size_t w = 0; w < sizeof(who) / sizeof(who[0]); w++) {
		for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
			unsetenv(rank_vars[i]);
		if (who[w].var)
			setenv(who[w].var, who[w].rank, 1);
		if (who[w].local)
			setenv("ACCEL_LOCAL_RANK", who[w].local, 1);
		accel_loader *ld = new_loader();
		accel_err err;
		accelp_err_clear(&err);
		ck_assert_int_eq(accelp_loader_add_dir(ld, d, "plugin_dirs", &err), ACCEL_OK);
		capture_begin();
		ck_assert_int_eq(accelp_loader_scan(ld, &err), ACCEL_OK);
		const char *out = capture_end();
		if (!who[w].warns) {
			ck_assert_msg(!strcmp(out, ""), "rank %s (%s) warned: %s", who[w].rank,
			              who[w].var, out);
		} else {
			char want[4 * PATH_MAX];
			snprintf(want, sizeof(want),
			         "[accel] warn: plugin directory %s: folder.so is skipped: a directory, "
			         "not a module file\n"
			         "[accel] warn: plugin directory %s: gone.so is skipped: a symbolic link "
			         "whose target does not exist\n"
			         "[accel] warn: plugin directory %s: loop-a.so is skipped: a loop of "
			         "symbolic links\n"
			         "[accel] warn: plugin directory %s: loop-b.so is skipped: a loop of "
			         "symbolic links\n", d, d, d, d);
			/* readdir order is the directory's: compare sorted lines */
			static char got[8192], exp[4 * PATH_MAX];
			snprintf(got, sizeof(got), "%s", out);
			snprintf(exp, sizeof(exp), "%s", want);
			ck_assert_uint_eq(strlen(got), strlen(exp));
			for (char *line = strtok(exp, "\n"); line; line = strtok(NULL, "\n"))
				ck_assert_msg(strstr(out, line) != NULL, "'%s' lacks '%s'", out, line);
		}
		static const char *const cases[][2] = {
			{"gone", "gone.so exists but is not a module that can be loaded: a symbolic link "
			         "whose target does not exist"},
			{"loop-a", "loop-a.so exists but is not a module that can be loaded: a loop of "
			           "symbolic links"},
			{"folder", "folder.so exists but is not a module that can be loaded: a directory, "
			           "not a module file"},
		};
		for (size_t i = 0; i < 3; i++) {
			const accel_module *f = NULL;
			accelp_err_clear(&err);
			ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, cases[i][0], &f, &err),
			                 ACCEL_ERR_PLUGIN);
			char want[PATH_MAX + 256];
			snprintf(want, sizeof(want), "plugin '%s' cannot be used: %s/%s", cases[i][0], d,
			         cases[i][1]);
			ck_assert_str_eq(err.msg, want);
		}
		/* a file named for one module that declares another (the copy
		 * comes after good.so by name, so it is the shadowed one) */
		const accel_module *f = NULL;
		accelp_err_clear(&err);
		ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "renamed", &f, &err),
		                 ACCEL_ERR_NOT_FOUND);
		char want[PATH_MAX + 256];
		snprintf(want, sizeof(want), "; %s/renamed.so exists but declares the plugin name "
		         "'good' (a module is selected by the name it declares)", d);
		ASSERT_HAS(err.msg, want);
		ASSERT_HAS(err.msg, "no plugin named 'renamed' in ");
		accelp_loader_free(ld);
	}
	for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++)
		unsetenv(rank_vars[i]);
}
END_TEST

/* plugin_dirs naming a file (a module's path for its folder) or a folder
 * that is not there: a config error at set-up, saying what it is and
 * what to write instead; ACCEL_PLUGIN_PATH's file is not "missing". */
START_TEST(plugin_dirs_file_or_missing)
{
	static char json[2 * PATH_MAX + 256];
	char msg[ACCEL_ERRMSG_MAX];
	static char want[4 * PATH_MAX + 1024];
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\"]}", fx("good.so"));
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_CONFIG);
	snprintf(want, sizeof(want),
	         "plugin_dirs[0] (from <config_json>:1:18) is '%s', which is a file, not a "
	         "directory: a module's path; plugin_dirs lists the folders that hold modules, so "
	         "name its folder, \"%s\"", fx("good.so"), fixdir);
	ck_assert_str_eq(msg, want);

	char missing[1200];
	snprintf(missing, sizeof(missing), "%s/no-such/plugins", tmpdir);
	snprintf(json, sizeof(json), "{\"plugin_dirs\": [\"%s\", \"%s\"]}", fixdir, missing);
	ck_assert_int_eq(ctx_status(json, msg, sizeof(msg)), ACCEL_ERR_CONFIG);
	snprintf(want, sizeof(want),
	         "plugin_dirs[1] (from <config_json>:1:%zu) is '%s', which does not exist (the "
	         "nearest folder above it that does is %s): fix the name, create the folder or "
	         "remove the entry", 18 + strlen(fixdir) + 4, missing, tmpdir);
	ck_assert_str_eq(msg, want);

	/* a file on ACCEL_PLUGIN_PATH: named as a file when nothing is found */
	accel_loader *ld = new_loader();
	accel_err err;
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_loader_add_dir(ld, fx("good.so"), "ACCEL_PLUGIN_PATH", &err),
	                 ACCEL_OK);
	ck_assert_int_eq(accelp_loader_add_dir(ld, missing, "install", &err), ACCEL_OK);
	const accel_module *f = NULL;
	ck_assert_int_eq(accelp_loader_find(ld, ACCEL_MODULE_PLUGIN, "good", &f, &err),
	                 ACCEL_ERR_NOT_FOUND);
	snprintf(want, sizeof(want), "no plugin named 'good' in %s (ACCEL_PLUGIN_PATH, a file, not "
	         "a directory), %s (install, missing) (available: none)", fx("good.so"), missing);
	ck_assert_str_eq(err.msg, want);
	ck_assert_ptr_null(accelp_loader_dir_problem(fixdir));
	ck_assert_str_eq(accelp_loader_dir_problem(missing), "missing");
	accelp_loader_free(ld);
}
END_TEST

static Suite *loader_suite(void)
{
	Suite *s = suite_create("loader");
	TCase *tc = tcase_create("fixtures");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, good_plugin_loads_with_schema);
	tcase_add_test(tc, good_comm_backend_loads);
	tcase_add_test(tc, not_an_elf);
	tcase_add_test(tc, truncated);
	tcase_add_test(tc, missing_entry);
	tcase_add_test(tc, wrong_abi_major);
	tcase_add_test(tc, struct_size_too_small);
	tcase_add_test(tc, short_hook_is_normalized);
	tcase_add_test(tc, null_required_slot);
	tcase_add_test(tc, entry_returns_null_with_text);
	tcase_add_test(tc, bad_schema_and_name);
	tcase_add_test(tc, unresolved_symbol);
	tcase_add_test(tc, missing_file);
	tcase_add_test(tc, needs_cuda_unavailable);
	tcase_add_test(tc, needs_mpi_follows_backend);
	tcase_add_test(tc, duplicate_names);
	tcase_add_test(tc, search_order_decides_the_winner);
	tcase_add_test(tc, scan_fixture_dir);
	tcase_add_test(tc, default_dirs);
	tcase_add_test(tc, find_missing_suggests);
	tcase_add_test(tc, find_broken_says_why);
	tcase_add_test(tc, bad_arguments);
	tcase_add_test(tc, real_host_forwards_entry_errors);
	tcase_add_test(tc, host_require_checks_size_and_major);
	tcase_add_test(tc, other_major_is_named);
	tcase_add_test(tc, find_skipped_says_what);
	suite_add_tcase(s, tc);
	TCase *tcx = tcase_create("context");
	tcase_add_checked_fixture(tcx, setup_keep_path, teardown);
	tcase_add_test(tcx, init_failure_names_path_and_text);
	tcase_add_test(tcx, broken_override_is_not_replaced);
	tcase_add_test(tcx, schema_clash_of_an_unselected_module);
	tcase_add_test(tcx, init_results_are_checked);
	tcase_add_test(tcx, third_party_backend_is_selectable);
	tcase_add_test(tcx, broken_plugin_does_not_hide_a_backend);
	tcase_add_test(tcx, auto_reports_a_broken_device_backend);
	tcase_add_test(tcx, plugin_dirs_override_a_builtin_strategy);
	tcase_add_test(tcx, plugin_dirs_file_or_missing);
	suite_add_tcase(s, tcx);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(loader_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
