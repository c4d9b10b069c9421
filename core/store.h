/* SPDX-License-Identifier: MIT */
/* core/store.h: the rendezvous key-value store (private).
 *
 * Rank 0 hosts a small TCP server at master addr:port (a thread inside the
 * rank-0 process); every rank (rank 0 included) connects as a client.  Used
 * to bootstrap comm backends (shm segment names, NCCL unique ids) and for
 * out-of-band barriers.  Every call has a timeout; a rank that cannot reach
 * the server within it fails with the address it tried.  docs/launch.md
 * describes the wire protocol.
 *
 * Errors (the message goes to err; outputs are untouched on failure):
 *   ACCEL_ERR_TIMEOUT    a get/wait/barrier ran out of time; the message
 *                        names the key(s) never set or the ranks missing
 *   ACCEL_ERR_NOT_FOUND  get with timeout_ms == 0 of a key that is not set
 *   ACCEL_ERR_PEER       a barrier cannot complete: a rank it waits for
 *                        closed its store connection (exited or crashed)
 *   ACCEL_ERR_COMM       cannot connect, or the connection to rank 0 was
 *                        lost; every later call on this store fails alike
 *   ACCEL_ERR_STATE/CONFIG  at connect: rank already connected, world sizes
 *                        disagree (two jobs on one port?)
 *   ACCEL_ERR_INVALID_ARG bad arguments, add on a non-integer value
 *
 * Threads: every call may be made from any thread at the same time.  A call
 * blocked in get/wait/barrier does not hold up the others: each concurrent
 * call uses its own connection (opened on demand, kept for reuse).
 * accelp_store_free must not race with other calls. */
#ifndef ACCEL_CORE_STORE_H
#define ACCEL_CORE_STORE_H

#include <stdint.h>

#include "error.h"

typedef struct accel_store accel_store;

/* Connect (rank 0 also starts the server first).  `addr` is a host name or
 * IPv4/IPv6 literal; `timeout_ms` (> 0) bounds the connect (retried with
 * backoff while refused) and is the default for later calls.  Rank 0's
 * server listens on the loopback address when `addr` is a loopback name,
 * else on every interface (IPv6 dual-stack, or IPv4).  Rank 0 may pass port
 * 0: the server then listens on a free port the kernel picks, which
 * accelp_store_port() tells (to be sent to the other ranks by other means).
 * Owned. */
int accelp_store_new(const char *addr, int port, int rank, int world_size, int64_t timeout_ms,
                    accel_store **ret_store, accel_err *err);
/* The same, with TCP keepalive on the store's connections (keepalive_ms
 * without an answer from a peer's node and its connection is dead; 0: off,
 * as in accelp_store_new): config comm.keepalive_s. */
int accelp_store_new_keepalive(const char *addr, int port, int rank, int world_size,
                              int64_t timeout_ms, int64_t keepalive_ms, accel_store **ret_store,
                              accel_err *err);
/* Rank 0 of a job whose ranks learn the store's address by other means
 * (MPI): the server listens on every interface on a free port the kernel
 * picks (accelp_store_port() tells it), and rank 0 connects over loopback
 * (127.0.0.1).  A nonzero `token` is the job's: a connection that does not
 * present it is refused before it counts as a rank ("belongs to another
 * job"), so a rank of another job that reaches this port takes no rank's
 * place.  The other ranks use accelp_store_join. */
int accelp_store_new_host(int world_size, int64_t timeout_ms, int64_t keepalive_ms,
                         uint64_t token, accel_store **ret_store, accel_err *err);
/* Rank 1.. of such a job: connect to addr:port and present `token`, all
 * within `within_ms` (> 0; no extra time for a slow reply); timeout_ms is
 * the default of later calls.  A host name that resolves slowly is not
 * bounded (getaddrinfo). */
int accelp_store_join(const char *addr, int port, int rank, int world_size, int64_t within_ms,
                     int64_t timeout_ms, int64_t keepalive_ms, uint64_t token,
                     accel_store **ret_store, accel_err *err);
/* The port of the store (on rank 0 the one its server listens on). */
int accelp_store_port(const accel_store *st);
/* Free a store the job decided not to use (not every rank could connect):
 * like accelp_store_free, but rank 0's server stops within a second instead
 * of waiting for ranks that never connected.  NULL-safe, returns NULL. */
accel_store *accelp_store_abandon(accel_store *st);

/* Close the connection; rank 0 stops the server after the other ranks have
 * disconnected, or at the latest after the store's timeout (with a warning
 * naming the ranks still connected), or 1 s after accelp_store_fail.
 * NULL-safe, returns NULL. */
accel_store *accelp_store_free(accel_store *st);

/* This rank failed and is leaving the job (`why`, at most 400 bytes, is
 * kept): the store fails every get, wait and barrier that is waiting or
 * comes later for something not yet there with "rank R failed: why"
 * (ACCEL_ERR_PEER), sets "accel/job/failed", and on rank 0 stops 1 s after
 * accelp_store_free instead of waiting for the others.  Best effort (2 s at
 * most); returns the status of the report. */
int accelp_store_fail(accel_store *st, const char *why);

/* Set key (at most 4096 bytes) to a value of up to 64 MiB (value may be
 * NULL when len is 0); wakes the ranks waiting for it.  Setting again
 * replaces the value. */
int accelp_store_set(accel_store *st, const char *key, const void *value, uint64_t len,
                    accel_err *err);
/* Wait up to timeout_ms (<0: the store's default; 0: do not wait) for `key`;
 * copy at most cap bytes; *ret_len (optional) is the full length. */
int accelp_store_get(accel_store *st, const char *key, void *buf, uint64_t cap,
                    uint64_t *ret_len, int64_t timeout_ms, accel_err *err);
/* Atomically add delta to the integer at key (0 if absent); returns the new
 * value.  The value is stored as decimal text, so get reads it as "42". */
int accelp_store_add(accel_store *st, const char *key, int64_t delta, int64_t *ret_value,
                    accel_err *err);
/* Wait until every key in keys[0..n) exists (timeout_ms as for get). */
int accelp_store_wait(accel_store *st, const char *const *keys, uint32_t n, int64_t timeout_ms,
                     accel_err *err);
/* All world_size ranks arrive at barrier `name` (names are single-use per
 * job; add a counter).  On timeout the error names the ranks missing; when
 * a missing rank has left the store the barrier fails at once
 * (ACCEL_ERR_PEER) instead of waiting for the timeout. */
int accelp_store_barrier(accel_store *st, const char *name, int64_t timeout_ms, accel_err *err);

/* For launchers: tell the store at addr:port (a job of world_size ranks)
 * that rank `rank`'s process ended, `how` ("exited with status 0").  If
 * that rank never connected, the job cannot complete: the server fails
 * every request waiting on the job with a message naming the rank, refuses
 * later waits for keys that are not set, and sets the key
 * "accel/job/failed" to the message (see docs/launch.md).  A rank that did
 * connect is accounted for by its connection; the report is then ignored.
 * Connects as an observer, retrying while refused up to timeout_ms. */
int accelp_store_report_exit(const char *addr, int port, int world_size, int rank, const char *how,
                            int64_t timeout_ms, accel_err *err);

/* For launchers, once rank 0 (the store's host) has ended while other ranks
 * run: listen on the store's address and port in its place and answer every
 * connecting rank with ACCEL_ERR_PEER and `why`, so that a rank still
 * joining fails with that message instead of retrying a refused connection
 * until its timeout.  ACCEL_ERR_SYSTEM when the port cannot be bound. */
typedef struct accel_store_refusal accel_store_refusal;
int accelp_store_refusal_start(const char *addr, int port, int world_size, const char *why,
                              accel_store_refusal **ret, accel_err *err);
accel_store_refusal *accelp_store_refusal_stop(accel_store_refusal *r);   /* NULL-safe */

#endif
