/* SPDX-License-Identifier: MIT */
/*
 * backends/common/coll-missing.h: naming the ranks that never arrived at a
 * collective, for backends whose transport cannot tell (NCCL, MPI).
 *
 * After op #seq timed out, the rank records in the job's rendezvous store
 * that it reached #seq ("<ns>/reached/<rank>" = "<seq>"), then watches the
 * others' records for a short grace period: every rank that is waiting in
 * the same op times out at about the same time and records it too.  The
 * ranks with no record (dead, hung, or busy elsewhere) or a record of an
 * earlier op are the ones that never arrived, as far as the store can
 * tell: a rank records when its own wait() or test() sees the timeout, so
 * one that issued the op and then computed for longer than the grace
 * period is listed too; the text says "did not report reaching it".  The
 * others' records are read with probes (timeout 0), which record no error
 * in the host.  Header-only, like coll.h: each backend is a module
 * of its own.
 */
#ifndef ACCEL_BACKENDS_COLL_MISSING_H
#define ACCEL_BACKENDS_COLL_MISSING_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "accel/comm.h"
#include "backends/common/store-keys.h"
#include "backends/common/coll.h"
#include "backends/common/mono.h"

/* How long to wait for the other ranks' records: at most this, and at most
 * the op's own timeout. */
#define COLL_MISSING_GRACE_MS 2000
#define COLL_MISSING_POLL_MS  20

/* `ns`: this communicator's namespace in the store, the same on every rank
 * ("nccl/3").  Writes "rank 2 did not report reaching it within 2.0 s" /
 * "ranks 1, 3 did not report reaching it within 2.0 s; rank 2 is still at
 * #5" into buf and returns how many ranks it names;
 * 0 when every rank reached the op (the hang is elsewhere: NCCL, the
 * network); -1 when the store cannot tell (buf is then empty). */
static inline int coll_missing_ranks_map(const accel_host_v1 *host, accel_host *h,
                                         const char *ns, int32_t rank, int32_t world,
                                         const int32_t *wranks, uint64_t seq,
                                         int64_t timeout_ms, char *buf, size_t cap);

static inline int coll_missing_ranks(const accel_host_v1 *host, accel_host *h, const char *ns,
                                     int32_t rank, int32_t world, uint64_t seq,
                                     int64_t timeout_ms, char *buf, size_t cap)
{
	return coll_missing_ranks_map(host, h, ns, rank, world, NULL, seq, timeout_ms, buf, cap);
}

/* The same for a group (a sub-communicator): ranks are the group's in the
 * store records, and the text names them by world rank, wranks[r] (NULL:
 * the identity). */
static inline int coll_missing_ranks_map(const accel_host_v1 *host, accel_host *h,
                                         const char *ns, int32_t rank, int32_t world,
                                         const int32_t *wranks, uint64_t seq,
                                         int64_t timeout_ms, char *buf, size_t cap)
{
	char key[160], val[32];
	uint64_t len = 0;
	buf[0] = '\0';
	if (!host->store_set || !host->store_get || world < 2 || cap < 2)
		return -1;
	snprintf(key, sizeof(key), ACCEL_STORE_FMT_REACHED, ns, rank);
	/* A probe first: it records no error, so without a store (or with
	 * its host gone) the caller's own message is what the user sees. */
	int pr = host->store_get(h, key, val, sizeof(val) - 1, &len, 0);
	if (pr != ACCEL_OK && pr != ACCEL_ERR_NOT_FOUND)
		return -1;
	int n = snprintf(val, sizeof(val), "%llu", (unsigned long long)seq);
	if (host->store_set(h, key, val, (uint64_t)n) != ACCEL_OK)
		return -1;
	/* at[r]: 0 unknown yet, else the op rank r reached (seq + 1 stored, so
	 * that a record of op 0 is not "unknown") */
	uint64_t *at = calloc((size_t)world, sizeof(*at));
	if (!at)
		return -1;
	int64_t grace = timeout_ms > 0 && timeout_ms < COLL_MISSING_GRACE_MS ? timeout_ms
	                                                                     : COLL_MISSING_GRACE_MS;
	int64_t deadline = mono_deadline_ns(grace);
	int unknown = world - 1;
	at[rank] = seq + 1;
	for (;;) {
		for (int32_t r = 0; r < world; r++) {
			if (at[r] > seq)
				continue;  /* reached it */
			snprintf(key, sizeof(key), ACCEL_STORE_FMT_REACHED, ns, r);
			int st = host->store_get(h, key, val, sizeof(val) - 1, &len, 0);
			if (st == ACCEL_ERR_NOT_FOUND)
				continue;
			if (st != ACCEL_OK) {
				free(at);
				return -1;
			}
			val[len < sizeof(val) ? len : sizeof(val) - 1] = '\0';
			uint64_t v = strtoull(val, NULL, 10) + 1;
			if (at[r] == 0)
				unknown--;
			at[r] = v;
		}
		int behind = 0;
		for (int32_t r = 0; r < world; r++)
			behind += at[r] != 0 && at[r] <= seq;
		if ((unknown == 0 && behind == 0) || mono_ns() >= deadline)
			break;
		struct timespec ts = {0, COLL_MISSING_POLL_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	/* "ranks 1, 3 did not report reaching it within 2.0 s" then "; rank 2 is still at #5" */
	size_t used = 0;
	int named = 0, absent = 0;
	for (int32_t r = 0; r < world; r++)
		absent += at[r] == 0;
	for (int32_t r = 0; r < world && used < cap; r++) {
		if (at[r] != 0)
			continue;
		used += (size_t)snprintf(buf + used, cap - used, "%s%d",
		                         named ? ", " : absent > 1 ? "ranks " : "rank ",
		                         wranks ? wranks[r] : r);
		named++;
	}
	if (named && used < cap)
		used += (size_t)snprintf(buf + used, cap - used,
		                         " did not report reaching it within %.1f s",
		                         (double)grace / 1000.0);
	for (int32_t r = 0; r < world && used < cap; r++) {
		if (at[r] == 0 || at[r] > seq)
			continue;
		used += (size_t)snprintf(buf + used, cap - used, "%srank %d is still at #%llu",
		                         named ? "; " : "", wranks ? wranks[r] : r,
		                         (unsigned long long)(at[r] - 1));
		named++;
	}
	free(at);
	return named;
}

#endif /* ACCEL_BACKENDS_COLL_MISSING_H */
