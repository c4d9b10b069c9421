/* SPDX-License-Identifier: MIT */
/* tests/test-zero-nvme.c: the zero plugin's swap files
 * (plugins/zero/zero_nvme.c) on a fake host (tests/zero-fake-host.h):
 * random data through many outstanding writes and reads of odd sizes, for
 * several aio settings, with io_uring and with the pread/pwrite threads,
 * on /dev/shm (tmpfs) and on the temporary directory's file system; the
 * refusals of misaligned transfers and bad aio settings; preflight
 * refusals (missing, not a directory, unwritable, too small); the
 * directory empty while a swap is open, after close and after a child
 * holding one is SIGKILLed, with O_TMPFILE and with the named file
 * unlinked at once that replaces it where a file system refuses it.
 *
 * `test-zero-nvme --ns` runs the cases that need a private mount namespace
 * (root, or unprivileged user namespaces; exit 77 without): the buffered
 * fallback on ramfs, which refuses O_DIRECT (tmpfs takes it since Linux
 * 6.6), a read-only directory (root ignores chmod) and a full file system. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zero-fake-host.h"
#include "zero_nvme.h"

#define KEY "zero_optimization.offload_optimizer.nvme_path"

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

static void mkdir_in(char *buf, size_t cap, const char *parent)
{
	snprintf(buf, cap, "%s/zero-nvme-XXXXXX", parent);
	ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp under %s: %s", parent, strerror(errno));
}

static const char *tmp_parent(void)
{
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

static uint64_t rng_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 17;
}

static void *abuf(size_t bytes)
{
	void *p = NULL;
	ck_assert_int_eq(posix_memalign(&p, 4096, bytes), 0);
	return p;
}

/* Many transfers in flight: `nx` regions of 1..`maxpages` pages at random
 * places of a swap, written with random data, waited in another order,
 * read back (some in flight together), compared. */
static void round_trip(fake_host *fh, const char *dir, const zero_aio_opts *o, int nx,
                       int maxpages, int expect_direct)
{
	accel_host *h = fake_h(fh);
	uint64_t page = 4096, slots = (uint64_t)nx * (uint64_t)maxpages;
	zero_swap *sw = NULL;
	int rc = zero_swap_open(&fh->H, h, dir, "test", slots * page - 123, o, &sw);
	ck_assert_msg(rc == 0, "open under %s: %s", dir, fh->last_err);
	ck_assert_uint_eq(zero_swap_align(sw), 4096);
	if (expect_direct >= 0)
		ck_assert_int_eq(zero_swap_direct(sw), expect_direct);
	ck_assert_int_eq(dir_entries(dir), 0);   /* unlinked from the start */

	uint64_t seed = 42;
	uint64_t *off = calloc((size_t)nx, 8), *len = calloc((size_t)nx, 8);
	uint64_t *tw = calloc((size_t)nx, 8), *tr = calloc((size_t)nx, 8);
	unsigned char **src = calloc((size_t)nx, sizeof(*src)), **dst = calloc((size_t)nx, sizeof(*dst));
	uint64_t total = 0;
	for (int i = 0; i < nx; i++) {
		/* region i in its own slot range, at an odd page inside it */
		uint64_t pages = 1 + rng_next(&seed) % (uint64_t)maxpages;
		uint64_t start = (uint64_t)i * (uint64_t)maxpages + rng_next(&seed) % ((uint64_t)maxpages - pages + 1);
		off[i] = start * page;
		len[i] = pages * page;
		src[i] = abuf(len[i]);
		dst[i] = abuf(len[i]);
		for (uint64_t k = 0; k < len[i]; k++)
			src[i][k] = (unsigned char)rng_next(&seed);
		memset(dst[i], 0, len[i]);
		total += len[i];
	}
	for (int i = 0; i < nx; i++) {
		rc = zero_swap_write(sw, off[i], src[i], len[i], &tw[i]);
		ck_assert_msg(rc == 0, "%s", fh->last_err);
	}
	/* waited for in reverse order */
	for (int i = nx - 1; i >= 0; i--)
		ck_assert_int_eq(zero_swap_wait(sw, tw[i]), 0);
	for (int i = 0; i < nx; i++)
		ck_assert_int_eq(zero_swap_read(sw, off[i], dst[i], len[i], &tr[i]), 0);
	/* half waited one by one, the rest together */
	for (int i = 0; i < nx / 2; i++)
		ck_assert_int_eq(zero_swap_wait(sw, tr[i]), 0);
	ck_assert_int_eq(zero_swap_wait_all(sw), 0);
	for (int i = 0; i < nx; i++)
		ck_assert_msg(!memcmp(src[i], dst[i], len[i]), "region %d (%llu bytes at %llu) differs",
		              i, (unsigned long long)len[i], (unsigned long long)off[i]);
	/* a ticket waited for is gone */
	fake_clear_error(fh);
	ck_assert_int_eq(zero_swap_wait(sw, tw[0]), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(fh->last_err, "no transfer"));
	zero_swap_stats s;
	zero_swap_get_stats(sw, &s);
	ck_assert_uint_eq(s.bytes_written, total);
	ck_assert_uint_eq(s.bytes_read, total);
	/* the last page of the (rounded-up) file is there */
	unsigned char *last = abuf(page);
	uint64_t t;
	ck_assert_int_eq(zero_swap_read(sw, (slots - 1) * page, last, page, &t), 0);
	ck_assert_int_eq(zero_swap_wait(sw, t), 0);
	free(last);
	sw = zero_swap_close(sw);
	ck_assert_ptr_null(sw);
	ck_assert_int_eq(dir_entries(dir), 0);
	for (int i = 0; i < nx; i++) {
		free(src[i]);
		free(dst[i]);
	}
	free(src);
	free(dst);
	free(off);
	free(len);
	free(tw);
	free(tr);
}

static const struct {
	const char *what;
	uint64_t block_size;
	uint32_t queue_depth, thread_count;
	int32_t single_submit, overlap_events;
	int no_uring;
} aio_rows[] = {
	{"defaults", 1048576, 8, 1, 0, 1, 0},
	{"one page at a time", 4096, 1, 1, 0, 1, 0},
	{"3 rings, single submit", 8192, 4, 3, 1, 1, 0},
	{"no overlap of events", 12288, 16, 2, 0, 0, 0},
	{"pread/pwrite threads", 8192, 4, 2, 0, 1, 1},
};

static void aio_row(size_t i, zero_aio_opts *o)
{
	zero_aio_opts_default(o);
	o->block_size = aio_rows[i].block_size;
	o->queue_depth = aio_rows[i].queue_depth;
	o->thread_count = aio_rows[i].thread_count;
	o->single_submit = aio_rows[i].single_submit;
	o->overlap_events = aio_rows[i].overlap_events;
	if (aio_rows[i].no_uring)
		setenv("ACCEL_ZERO_NVME_NO_URING", "1", 1);
	else
		unsetenv("ACCEL_ZERO_NVME_NO_URING");
}

/* /dev/shm (tmpfs) and the temporary directory, every aio row. */
START_TEST(round_trips)
{
	const char *parents[] = {"/dev/shm", tmp_parent()};
	for (int pi = 0; pi < 2; pi++) {
		if (pi == 0 && access("/dev/shm", W_OK))
			continue;
		char dir[512];
		mkdir_in(dir, sizeof(dir), parents[pi]);
		for (size_t i = 0; i < sizeof(aio_rows) / sizeof(aio_rows[0]); i++) {
			fake_host fh;
			fake_host_init(&fh, 2);
			zero_aio_opts o;
			aio_row(i, &o);
			round_trip(&fh, dir, &o, 150, 40, -1);
			/* no warning on these file systems: O_DIRECT taken, or the
			 * one fallback warning (tmpfs before Linux 6.6) */
			ck_assert_msg(fh.nwarn <= 1, "%s: %s", aio_rows[i].what, fh.warnings);
			if (fh.nwarn)
				ck_assert_ptr_nonnull(strstr(fh.warnings, "does not take O_DIRECT"));
		}
		unsetenv("ACCEL_ZERO_NVME_NO_URING");
		ck_assert_int_eq(rmdir(dir), 0);
	}
}
END_TEST

/* Misaligned or out-of-range transfers and bad aio settings, by name. */
START_TEST(refusals)
{
	char dir[512];
	mkdir_in(dir, sizeof(dir), tmp_parent());
	fake_host fh;
	fake_host_init(&fh, 2);
	accel_host *h = fake_h(&fh);
	static const struct {
		uint64_t bs;
		uint32_t qd, tc;
		const char *msg;
	} bad[] = {
		{1000, 8, 1, "zero_optimization.aio.block_size: 1000; it must be a multiple of 4096"},
		{0, 8, 1, "zero_optimization.aio.block_size: 0"},
		{4096, 0, 1, "zero_optimization.aio.queue_depth: 0; it must be 1 to 4096"},
		{4096, 8, 0, "zero_optimization.aio.thread_count: 0; it must be 1 to 64"},
		{4096, 8, 65, "zero_optimization.aio.thread_count: 65"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		zero_aio_opts o;
		zero_aio_opts_default(&o);
		o.block_size = bad[i].bs;
		o.queue_depth = bad[i].qd;
		o.thread_count = bad[i].tc;
		zero_swap *sw = NULL;
		fake_clear_error(&fh);
		ck_assert_int_eq(zero_swap_open(&fh.H, h, dir, "t", 1 << 20, &o, &sw), ACCEL_ERR_CONFIG);
		ck_assert_ptr_null(sw);
		ck_assert_msg(strstr(fh.last_err, bad[i].msg), "row %zu: \"%s\"", i, fh.last_err);
	}
	zero_swap *sw = NULL;
	ck_assert_int_eq(zero_swap_open(&fh.H, h, dir, "optimizer state, rank 1", 1 << 20, NULL, &sw), 0);
	char *b = abuf(8192);
	uint64_t t;
	static const struct {
		uint64_t off, len;
		size_t bufoff;
		const char *msg;
	} tx[] = {
		{100, 4096, 0, "read of 4096 bytes at offset 100"},
		{4096, 4000, 0, "read of 4000 bytes at offset 4096"},
		{0, 4096, 64, "must be non-zero multiples of 4096"},
		{0, 0, 0, "read of 0 bytes"},
		{(1 << 20) - 4096, 8192, 0, "past the swap's 1048576 bytes"},
	};
	for (size_t i = 0; i < sizeof(tx) / sizeof(tx[0]); i++) {
		fake_clear_error(&fh);
		ck_assert_int_eq(zero_swap_read(sw, tx[i].off, b + tx[i].bufoff, tx[i].len, &t),
		                 ACCEL_ERR_INVALID_ARG);
		ck_assert_msg(strstr(fh.last_err, tx[i].msg), "row %zu: \"%s\"", i, fh.last_err);
		ck_assert_ptr_nonnull(strstr(fh.last_err, "optimizer state, rank 1"));
	}
	fake_clear_error(&fh);
	ck_assert_int_eq(zero_swap_wait(sw, 12345), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(fh.last_err, "no transfer 12345 in flight"));
	/* transfers left in flight are finished by close */
	memset(b, 7, 8192);
	ck_assert_int_eq(zero_swap_write(sw, 0, b, 8192, &t), 0);
	sw = zero_swap_close(sw);
	ck_assert_ptr_null(zero_swap_close(NULL));
	free(b);
	ck_assert_int_eq(dir_entries(dir), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	fake_host_fini(&fh);
}
END_TEST

/* Each preflight refusal names the key, the path and what to do. */
START_TEST(preflight)
{
	char dir[512], file[600];
	mkdir_in(dir, sizeof(dir), tmp_parent());
	snprintf(file, sizeof(file), "%s/plain-file", dir);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	struct statvfs vs;
	ck_assert_int_eq(statvfs(dir, &vs), 0);
	uint64_t free_bytes = (uint64_t)vs.f_bavail * vs.f_frsize;
	char missing[600];
	snprintf(missing, sizeof(missing), "%s/not-there", dir);
	static char unwritable[600];
	/* root ignores permissions: a directory of sysfs is unwritable to all */
	if (geteuid() == 0) {
		snprintf(unwritable, sizeof(unwritable), "/sys/kernel");
	} else {
		snprintf(unwritable, sizeof(unwritable), "%s/ro", dir);
		ck_assert_int_eq(mkdir(unwritable, 0555), 0);
	}
	const struct {
		const char *path;
		uint64_t bytes;
		const char *msg;
	} rows[] = {
		{dir, 1 << 20, NULL},
		{missing, 1, ": no such directory: create it (mkdir -p "},
		{file, 1, " is not a directory: set " KEY " to a directory"},
		{unwritable, 1, " is not writable by this process (creating a file there: "},
		{dir, free_bytes + (UINT64_C(64) << 30), " GiB free but the swap needs "},
		{"", 1, KEY ": no directory given"},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		fake_host fh;
		fake_host_init(&fh, 2);
		int r = zero_nvme_preflight(&fh.H, fake_h(&fh), KEY, rows[i].path, rows[i].bytes);
		if (!rows[i].msg) {
			ck_assert_msg(r == 0, "%s", fh.last_err);
			continue;
		}
		ck_assert_msg(r == ACCEL_ERR_CONFIG, "row %zu: status %d", i, r);
		ck_assert_msg(strstr(fh.last_err, rows[i].msg), "row %zu: \"%s\"", i, fh.last_err);
		ck_assert_msg(!strncmp(fh.last_err, KEY ": ", strlen(KEY) + 2), "row %zu: \"%s\"", i,
		              fh.last_err);
		if (*rows[i].path)
			ck_assert_msg(strstr(fh.last_err, rows[i].path), "row %zu: \"%s\"", i, fh.last_err);
	}
	if (geteuid() != 0)
		rmdir(unwritable);
	unlink(file);
	ck_assert_int_eq(dir_entries(dir), 0);   /* the writability probe left nothing */
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Where O_TMPFILE is refused: a named file unlinked at once (forced with
 * ACCEL_ZERO_NVME_NO_TMPFILE); the same round trip, the directory empty
 * while the swap is open (round_trip checks) and after. */
START_TEST(named_unlinked)
{
	char dir[512];
	mkdir_in(dir, sizeof(dir), tmp_parent());
	setenv("ACCEL_ZERO_NVME_NO_TMPFILE", "1", 1);
	fake_host fh;
	fake_host_init(&fh, 2);
	zero_aio_opts o;
	aio_row(0, &o);
	round_trip(&fh, dir, &o, 20, 10, -1);
	ck_assert_int_eq(zero_nvme_preflight(&fh.H, fake_h(&fh), KEY, dir, 4096), 0);
	unsetenv("ACCEL_ZERO_NVME_NO_TMPFILE");
	ck_assert_int_eq(dir_entries(dir), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	fake_host_fini(&fh);
}
END_TEST

/* A process holding an open swap is killed: nothing is left behind (with
 * O_TMPFILE, and with the named file unlinked at once). */
static void kill_child(int tmpfile)
{
	char dir[512];
	mkdir_in(dir, sizeof(dir), access("/dev/shm", W_OK) ? tmp_parent() : "/dev/shm");
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (!tmpfile)
			setenv("ACCEL_ZERO_NVME_NO_TMPFILE", "1", 1);
		fake_host fh;
		fake_host_init(&fh, 2);
		zero_swap *sw = NULL;
		if (zero_swap_open(&fh.H, fake_h(&fh), dir, "child", 8 << 20, NULL, &sw))
			_exit(1);
		char *b = abuf(8 << 20);
		memset(b, 1, 8 << 20);
		uint64_t t;
		if (zero_swap_write(sw, 0, b, 8 << 20, &t) || zero_swap_wait(sw, t))
			_exit(2);
		/* and one left in flight */
		if (zero_swap_write(sw, 0, b, 8 << 20, &t))
			_exit(3);
		ssize_t w = write(p[1], "k", 1);
		(void)w;
		for (;;)
			pause();
	}
	close(p[1]);
	char c = 0;
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	ck_assert_int_eq(dir_entries(dir), 0);   /* open, and already nothing to see */
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	close(p[0]);
	ck_assert_int_eq(dir_entries(dir), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}

START_TEST(killed_child)
{
	kill_child(1);
	kill_child(0);
}
END_TEST

/* ---- in a private mount namespace (--ns) ------------------------------------------ */

static int ns_ready = -1;

/* Enter a private mount namespace: as root directly, else through a user
 * namespace.  0 when not permitted here. */
static int enter_ns(void)
{
	if (ns_ready >= 0)
		return ns_ready;
	uid_t uid = geteuid();
	gid_t gid = getegid();
	if (unshare(CLONE_NEWNS) != 0) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
			return ns_ready = 0;
		char m[64];
		int fd = open("/proc/self/setgroups", O_WRONLY);
		if (fd >= 0) {
			ssize_t w = write(fd, "deny", 4);
			(void)w;
			close(fd);
		}
		snprintf(m, sizeof(m), "0 %u 1", (unsigned)uid);
		fd = open("/proc/self/uid_map", O_WRONLY);
		if (fd < 0 || write(fd, m, strlen(m)) < 0)
			return ns_ready = 0;
		close(fd);
		snprintf(m, sizeof(m), "0 %u 1", (unsigned)gid);
		fd = open("/proc/self/gid_map", O_WRONLY);
		if (fd < 0 || write(fd, m, strlen(m)) < 0)
			return ns_ready = 0;
		close(fd);
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		return ns_ready = 0;
	return ns_ready = 1;
}

static void ns_mount(char *dir, size_t cap, const char *fstype, unsigned long flags,
                     const char *data)
{
	mkdir_in(dir, cap, tmp_parent());
	ck_assert_msg(mount("none", dir, fstype, flags, data) == 0, "mount %s on %s: %s", fstype,
	              dir, strerror(errno));
}

/* ramfs refuses O_DIRECT: buffered I/O, one warning naming the path. */
START_TEST(ns_fallback)
{
	ck_assert(enter_ns());
	char dir[512];
	ns_mount(dir, sizeof(dir), "ramfs", 0, NULL);
	for (size_t i = 0; i < sizeof(aio_rows) / sizeof(aio_rows[0]); i += 2) {
		fake_host fh;
		fake_host_init(&fh, 2);
		zero_aio_opts o;
		aio_row(i, &o);
		round_trip(&fh, dir, &o, 40, 20, 0);
		ck_assert_int_eq(fh.nwarn, 1);
		ck_assert_ptr_nonnull(strstr(fh.warnings, "does not take O_DIRECT"));
		ck_assert_ptr_nonnull(strstr(fh.warnings, dir));
		ck_assert_ptr_nonnull(strstr(fh.warnings, "buffered I/O instead"));
	}
	unsetenv("ACCEL_ZERO_NVME_NO_URING");
	ck_assert_int_eq(umount(dir), 0);
	rmdir(dir);
}
END_TEST

/* A read-only mount: refused by the preflight, whoever runs the test. */
START_TEST(ns_readonly)
{
	ck_assert(enter_ns());
	char dir[512];
	ns_mount(dir, sizeof(dir), "tmpfs", MS_RDONLY, "size=1m");
	fake_host fh;
	fake_host_init(&fh, 2);
	ck_assert_int_eq(zero_nvme_preflight(&fh.H, fake_h(&fh), KEY, dir, 4096), ACCEL_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(fh.last_err, "is not writable by this process (creating a "
	                                          "file there: Read-only file system)"));
	ck_assert_ptr_nonnull(strstr(fh.last_err, dir));
	ck_assert_int_eq(umount(dir), 0);
	rmdir(dir);
}
END_TEST

/* A full file system: the preflight says so before; a swap opened without
 * it fails at open (the file is allocated there), not mid-step. */
START_TEST(ns_full)
{
	ck_assert(enter_ns());
	char dir[512];
	ns_mount(dir, sizeof(dir), "tmpfs", 0, "size=1m");
	fake_host fh;
	fake_host_init(&fh, 2);
	ck_assert_int_eq(zero_nvme_preflight(&fh.H, fake_h(&fh), KEY, dir, 4 << 20),
	                 ACCEL_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(fh.last_err, "GiB free but the swap needs 0.00 GiB (4194304 "
	                                          "bytes): free space there or set " KEY));
	fake_clear_error(&fh);
	zero_swap *sw = NULL;
	ck_assert_int_eq(zero_swap_open(&fh.H, fake_h(&fh), dir, "t", 4 << 20, NULL, &sw),
	                 ACCEL_ERR_IO);
	ck_assert_ptr_null(sw);
	ck_assert_ptr_nonnull(strstr(fh.last_err, "has no room for 4194304 bytes"));
	ck_assert_int_eq(dir_entries(dir), 0);
	ck_assert_int_eq(umount(dir), 0);
	rmdir(dir);
}
END_TEST

static Suite *zero_nvme_suite(int ns)
{
	Suite *s = suite_create("zero_nvme");
	TCase *tc = tcase_create(ns ? "namespace" : "swap");
	tcase_set_timeout(tc, 120);
	if (ns) {
		tcase_add_test(tc, ns_fallback);
		tcase_add_test(tc, ns_readonly);
		tcase_add_test(tc, ns_full);
	} else {
		tcase_add_test(tc, round_trips);
		tcase_add_test(tc, refusals);
		tcase_add_test(tc, preflight);
		tcase_add_test(tc, named_unlinked);
		tcase_add_test(tc, killed_child);
	}
	suite_add_tcase(s, tc);
	return s;
}

/* Whether a child may enter a private mount namespace and mount there. */
static int ns_probe(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return 0;
	if (pid == 0) {
		char dir[512];
		snprintf(dir, sizeof(dir), "%s/zero-nvme-probe-XXXXXX", tmp_parent());
		if (!mkdtemp(dir))
			_exit(1);
		int ok = enter_ns() && mount("none", dir, "ramfs", 0, NULL) == 0;
		if (ok)
			umount(dir);
		rmdir(dir);
		_exit(ok ? 0 : 1);
	}
	int st;
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
	int ns = argc > 1 && !strcmp(argv[1], "--ns");
	if (ns && !ns_probe()) {
		printf("skipped: no private mount namespace here (needs root or unprivileged user "
		       "namespaces)\n");
		return 77;
	}
	SRunner *sr = srunner_create(zero_nvme_suite(ns));
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
