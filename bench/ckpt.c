/* SPDX-License-Identifier: MIT */
/* bench/ckpt.c: accel_save_state and accel_load_state bandwidth on a model
 * of TENSORS equal f32 parameters, MB MiB in all, after one optimizer step
 * (so the optimizer state is there: AdamW saves weights + master + 2 state
 * arrays).  Run directly or under `accel launch -n K`; bench/ckpt.sh runs
 * it next to a raw sequential write and read of the same bytes.
 *
 * Usage: bench-ckpt DIR [MB] [TENSORS] [OPTIMIZER] [ORDER]
 *   (64, 16, adamw, save-first).  ORDER raw-first times the raw peers
 *   before the save (sized by an untimed save, removed first): a disk that
 *   is slower right after a large write then penalizes each side alike
 *   when bench/ckpt.sh alternates the order.  Every timed phase starts
 *   after a sync(), SETTLE seconds (environment; default 2) and a
 *   barrier.
 * Prints one JSON line on rank 0: bytes (all files of the checkpoint),
 * save_s, load_s and GB/s (1e9 bytes per second, wall time on rank 0 from
 * a barrier before the call to its return), and, in the same run, the raw
 * peers on the same number of bytes: every rank writes its share
 * (bytes / world) sequentially to DIR/raw.<rank> in 8 MiB write()s from
 * memory, starting the writeback of every 32 MiB as accel's writer does,
 * and fsyncs it (raw_write), then read()s it back into a buffer of
 * that size it allocates first (raw_read), as a load fills fresh memory. */
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "accel/accel.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned long long dir_bytes(const char *dir)
{
	unsigned long long n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096];
	struct stat sb;
	while (d && (e = readdir(d))) {
		if (snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) >= (int)sizeof(p))
			continue;
		if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
			n += (unsigned long long)sb.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

/* Remove a directory of plain files. */
static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096];
	while (d && (e = readdir(d)))
		if (snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) < (int)sizeof(p) &&
		    e->d_name[0] != '.')
			unlink(p);
	if (d)
		closedir(d);
	rmdir(dir);
}

static int barrier(accel_ctx *ctx)
{
	int32_t x = 0;
	return accel_allreduce(ctx, &x, &x, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX);
}

#define CHUNK (8u << 20)
#define KICK (32u << 20)

/* Write `n` bytes of `buf` to `path` and fsync; read them back into a fresh
 * buffer.  Seconds of each into *ret_w, *ret_r. */
static int raw_io(const char *path, const char *buf, size_t n, double *ret_w, double *ret_r)
{
	double t0 = now();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	size_t kicked = 0;
	for (size_t off = 0; off < n;) {
		size_t k = n - off < CHUNK ? n - off : CHUNK;
		ssize_t w = write(fd, buf + off, k);
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
		/* start the writeback of every 32 MiB written, as accel's writer
		 * does (sync_file_range), so both pay the same for durability */
		if (off - kicked >= KICK || off == n) {
			(void)sync_file_range(fd, (off_t)kicked, (off_t)(off - kicked),
			                      SYNC_FILE_RANGE_WRITE);
			kicked = off;
		}
	}
	if (fsync(fd) || close(fd))
		return -1;
	double t1 = now();
	char *in = malloc(n ? n : 1);
	if (!in || (fd = open(path, O_RDONLY)) < 0) {
		free(in);
		return -1;
	}
	for (size_t off = 0; off < n;) {
		ssize_t r = read(fd, in + off, n - off < CHUNK ? n - off : CHUNK);
		if (r <= 0)
			break;
		off += (size_t)r;
	}
	close(fd);
	*ret_r = now() - t1;
	*ret_w = t1 - t0;
	unlink(path);
	free(in);
	return 0;
}

static int fail(accel_ctx *ctx, const char *what, int rc)
{
	fprintf(stderr, "bench-ckpt: %s: %s\n", what, ctx ? accel_errmsg(ctx) : accel_status_str(rc));
	accel_ctx_free(ctx);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 6) {
		fprintf(stderr, "usage: bench-ckpt DIR [MB] [TENSORS] [OPTIMIZER] [save-first|raw-first]\n");
		return 2;
	}
	int raw_first = argc > 5 && !strcmp(argv[5], "raw-first");
	const char *dir = argv[1];
	long mb = argc > 2 ? atol(argv[2]) : 64, nt = argc > 3 ? atol(argv[3]) : 16;
	const char *opt = argc > 4 ? argv[4] : "adamw";
	if (mb < 1 || nt < 1) {
		fprintf(stderr, "bench-ckpt: MB and TENSORS must be >= 1\n");
		return 2;
	}
	char set_opt[64];
	snprintf(set_opt, sizeof(set_opt), "optimizer.type=%s", opt);
	const char *sets[] = {set_opt, NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	if (rc)
		return fail(ctx, "accel_ctx_new", rc);
	int64_t numel = (int64_t)mb * 1024 * 1024 / 4 / nt;
	accel_init u = accel_init_uniform(-1, 1);
	for (long i = 0; i < nt; i++) {
		char name[32];
		snprintf(name, sizeof(name), "t%ld", i);
		if ((rc = accel_model_add_param(ctx, "u", name, ACCEL_DTYPE_F32, 1, &numel, &u, NULL)))
			return fail(ctx, "accel_model_add_param", rc);
	}
	if ((rc = accel_prepare(ctx)))
		return fail(ctx, "accel_prepare", rc);
	for (long i = 0; i < nt; i++) {
		float *g = accel_param_grad(ctx, (uint32_t)i);
		for (int64_t k = 0; k < numel; k++)
			g[k] = 1e-3f * (float)(k % 97);
	}
	if ((rc = accel_unit_post_backward(ctx, 0)) || (rc = accel_step(ctx)))
		return fail(ctx, "accel_step", rc);
	char ck[4096], raw[4096];
	snprintf(ck, sizeof(ck), "%s/ckpt", dir);
	snprintf(raw, sizeof(raw), "%s/raw.%d", dir, accel_rank(ctx));
	/* the raw peers write the same bytes, split over the ranks: known from
	 * a save; with raw-first, an untimed one removed before the rounds */
	double bytes = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0, rw = 0, rr = 0;
	if (raw_first) {
		char sz[4096];
		snprintf(sz, sizeof(sz), "%s/sizing", dir);
		if ((rc = accel_save_state(ctx, sz)))
			return fail(ctx, "accel_save_state (sizing)", rc);
		bytes = (double)dir_bytes(sz);
		if ((rc = barrier(ctx)))
			return fail(ctx, "barrier", rc);
		if (accel_rank(ctx) == 0)
			remove_dir(sz);
	}
	const char *st = getenv("SETTLE");
	double settle = st ? atof(st) : 2.0;
	for (int phase = 0; phase < 2; phase++) {
		/* each timed phase starts with nothing dirty (sync) on every rank,
		 * after SETTLE seconds for a virtual disk's host to drain what
		 * the previous phase wrote */
		sync();
		if (settle > 0)
			usleep((useconds_t)(settle * 1e6));
		if ((rc = barrier(ctx)))
			return fail(ctx, "barrier", rc);
		if (phase == raw_first) {
			t0 = now();
			if ((rc = accel_save_state(ctx, ck)))
				return fail(ctx, "accel_save_state", rc);
			t1 = now();
			if ((rc = barrier(ctx)))
				return fail(ctx, "barrier", rc);
			t2 = now();
			if ((rc = accel_load_state(ctx, ck)))
				return fail(ctx, "accel_load_state", rc);
			t3 = now();
			bytes = (double)dir_bytes(ck);
			continue;
		}
		size_t share = (size_t)(bytes / accel_world_size(ctx)) + 1;
		char *src = malloc(share);
		if (!src)
			return fail(ctx, "out of memory", ACCEL_ERR_NOMEM);
		for (size_t k = 0; k < share; k++)
			src[k] = (char)(k * 131u >> 3);
		sync();
		if ((rc = barrier(ctx)))
			return fail(ctx, "barrier", rc);
		if (raw_io(raw, src, share, &rw, &rr)) {
			perror("bench-ckpt: raw write/read");
			return 1;
		}
		free(src);
	}
	/* slowest rank's times: the job's */
	double slow[2] = {rw, rr};
	if ((rc = accel_allreduce(ctx, slow, slow, 2, ACCEL_DTYPE_F64, ACCEL_RED_MAX)))
		return fail(ctx, "allreduce", rc);
	if (accel_rank(ctx) == 0) {
		double sg = bytes / (t1 - t0) / 1e9, lg = bytes / (t3 - t2) / 1e9;
		double wg = bytes / slow[0] / 1e9, rg = bytes / slow[1] / 1e9;
		printf("{\"bench\":\"ckpt\",\"processes\":%d,\"first\":\"%s\","
		       "\"optimizer\":\"%s\",\"model_mib\":%ld,"
		       "\"tensors\":%ld,\"bytes\":%.0f,\"save_s\":%.4f,\"save_gbs\":%.3f,"
		       "\"load_s\":%.4f,\"load_gbs\":%.3f,\"raw_write_gbs\":%.3f,"
		       "\"raw_read_gbs\":%.3f,\"save_vs_raw\":%.3f,\"load_vs_raw\":%.3f}\n",
		       accel_world_size(ctx), raw_first ? "raw" : "save", opt, mb, nt, bytes, t1 - t0,
		       sg, t3 - t2, lg, wg, rg,
		       sg / wg, lg / rg);
	}
	accel_ctx_free(ctx);
	return 0;
}
