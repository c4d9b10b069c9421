/* SPDX-License-Identifier: MIT */
/* tests/progs/launch-store.c: a rank program for the `accel launch` tests
 * that finds its place with accelp_world_from_env() and meets the other
 * ranks through the rendezvous store, the way the core bootstraps. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "world.h"

/* The store is closed on the failure path too, so a leak checker sees an
 * expected failure as a failure, not as a leak. */
static accel_store *st;

#define CHECK(cond, ...)                                       \
	do {                                                       \
		if (!(cond)) {                                         \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			st = accelp_store_free(st);                         \
			return 1;                                          \
		}                                                      \
	} while (0)

/* launch-store [die R]: with "die R", rank R exits 3 after the first
 * barrier without closing its store; the others must then fail at the last
 * barrier with a message naming it, instead of hanging. */
int main(int argc, char **argv)
{
	int die = argc > 2 && !strcmp(argv[1], "die") ? atoi(argv[2]) : -1;
	accel_err err = {0};
	accel_world_v1 w;
	char job[ACCEL_WORLD_JOB_ID_MAX], addr[ACCEL_WORLD_ADDR_MAX];
	int port;
	const char *launcher;
	int rc = accelp_world_from_env(&w, job, sizeof(job), addr, sizeof(addr), &port, &launcher,
	                              &err);
	CHECK(rc == ACCEL_OK, "world: %s", err.msg);
	CHECK(!strcmp(launcher, "accel launch"), "launcher '%s'", launcher);
	CHECK(w.local_rank == w.rank % w.local_world_size, "local rank %d", w.local_rank);
	rc = accelp_store_new(addr, port, w.rank, w.world_size, 10000, &st, &err);
	CHECK(rc == ACCEL_OK, "store: %s", err.msg);
	char key[128], val[64];
	snprintf(key, sizeof(key), "%s/rank/%d", job, w.rank);
	snprintf(val, sizeof(val), "hello from %d", w.rank);
	CHECK(accelp_store_set(st, key, val, strlen(val), &err) == ACCEL_OK, "set: %s", err.msg);
	int64_t v;
	CHECK(accelp_store_add(st, "count", w.rank + 1, &v, &err) == ACCEL_OK, "add: %s", err.msg);
	CHECK(accelp_store_barrier(st, "after-set", -1, &err) == ACCEL_OK, "barrier: %s", err.msg);
	if (w.rank == die) {
		printf("rank %d dies now\n", w.rank);
		fflush(stdout);
		_exit(3);
	}
	for (int r = 0; r < w.world_size; r++) {
		char buf[64] = {0}, want[64];
		uint64_t len;
		snprintf(key, sizeof(key), "%s/rank/%d", job, r);
		snprintf(want, sizeof(want), "hello from %d", r);
		CHECK(accelp_store_get(st, key, buf, sizeof(buf) - 1, &len, 0, &err) == ACCEL_OK,
		      "get: %s", err.msg);
		CHECK(!strcmp(buf, want), "rank %d read '%s' for rank %d", w.rank, buf, r);
	}
	char cnt[32] = {0};
	uint64_t len;
	CHECK(accelp_store_get(st, "count", cnt, sizeof(cnt) - 1, &len, 0, &err) == ACCEL_OK,
	      "get count: %s", err.msg);
	long want = (long)w.world_size * (w.world_size + 1) / 2;
	CHECK(atol(cnt) == want, "count %s, want %ld", cnt, want);
	if (accelp_store_barrier(st, "end", -1, &err) != ACCEL_OK && die >= 0) {
		/* The rank that died is the failure the launcher should report
		 * first: leave its exit time to be reaped before this consequence. */
		usleep(300000);
	}
	CHECK(err.code == ACCEL_OK, "barrier: %s", err.msg);
	st = accelp_store_free(st);
	printf("store ok rank=%d world=%d count=%s\n", w.rank, w.world_size, cnt);
	return 0;
}
