/* SPDX-License-Identifier: MIT */
/* core/store.h: the rendezvous key-value store (private).
 *
 * Rank 0 hosts a small TCP server at master addr:port (a thread inside the
 * rank-0 process); every rank (rank 0 included) connects as a client.  Used
 * to bootstrap comm backends (shm segment names, NCCL unique ids) and for
 * out-of-band barriers.  Every call has a timeout; a rank that cannot reach
 * the server within it fails with the address it tried. */
#ifndef ACCEL_CORE_STORE_H
#define ACCEL_CORE_STORE_H

#include <stdint.h>

#include "error.h"

typedef struct accel_store accel_store;

/* Connect (rank 0 also starts the server first).  `addr` is a host name or
 * IPv4/IPv6 literal; `timeout_ms` bounds the connect (with retries) and is
 * the default for later calls.  Owned. */
int accel_store_new(const char *addr, int port, int rank, int world_size, int64_t timeout_ms,
                    accel_store **ret_store, accel_err *err);
/* Close the connection; rank 0 stops the server after the other ranks have
 * disconnected or after a grace period.  NULL-safe, returns NULL. */
accel_store *accel_store_free(accel_store *st);

int accel_store_set(accel_store *st, const char *key, const void *value, uint64_t len,
                    accel_err *err);
/* Wait up to timeout_ms (<0: the store's default) for `key`; copy at most cap
 * bytes; *ret_len is the full length. */
int accel_store_get(accel_store *st, const char *key, void *buf, uint64_t cap,
                    uint64_t *ret_len, int64_t timeout_ms, accel_err *err);
/* Atomically add delta to the integer at key (0 if absent); returns the new value. */
int accel_store_add(accel_store *st, const char *key, int64_t delta, int64_t *ret_value,
                    accel_err *err);
/* Wait until every key in keys[0..n) exists. */
int accel_store_wait(accel_store *st, const char *const *keys, uint32_t n, int64_t timeout_ms,
                     accel_err *err);
/* All world_size ranks arrive at barrier `name` (names are single-use per
 * job; add a counter).  On timeout the error names the ranks missing. */
int accel_store_barrier(accel_store *st, const char *name, int64_t timeout_ms, accel_err *err);

#endif
