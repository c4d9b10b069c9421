/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_nvme.h: swap files for ZeRO's NVMe offload (private to
 * the zero plugin).
 *
 * A swap is one file under the configured nvme_path holding a region of
 * optimizer state (or, at stage 3, parameters) that is swapped in, stepped
 * and swapped out one sub-group at a time.  I/O goes through io_uring
 * (liburing) with O_DIRECT on aligned buffers; where the file system has no
 * O_DIRECT (tmpfs, some overlay file systems) the swap falls back to
 * buffered I/O and says so once, at warn level, naming the path.
 *
 * The file never outlives the process: it is created unlinked (O_TMPFILE,
 * or created and unlinked at once where O_TMPFILE is refused), so neither a
 * normal exit, a failure nor a kill leaves it in nvme_path.
 *
 * Every function that can fail reports through host->error (what, the
 * path, what to do) and returns its status. */
#ifndef ACCEL_ZERO_NVME_H
#define ACCEL_ZERO_NVME_H

#include <stdint.h>

#include "accel/plugin.h"

/* zero_optimization.aio.* (DeepSpeed's `aio` section and defaults). */
typedef struct zero_aio_opts {
	uint64_t block_size;     /* bytes per submitted I/O request (1048576)   */
	uint32_t queue_depth;    /* requests in flight per ring (8)             */
	uint32_t thread_count;   /* rings, each on its own thread of submission
	                            (1)                                          */
	int32_t single_submit;   /* 1: submit requests one at a time (false)    */
	int32_t overlap_events;  /* 1: submit new requests while earlier ones
	                            complete (true)                             */
} zero_aio_opts;

void zero_aio_opts_default(zero_aio_opts *o);

typedef struct zero_swap zero_swap;

/* Check before anything is allocated that `dir` exists, is a directory,
 * is writable by this process and has at least `bytes` free (statvfs);
 * `key` is the config key that named it, for the message
 * ("zero_optimization.offload_optimizer.nvme_path: /x: no such directory"). */
int zero_nvme_preflight(const accel_host_v1 *H, accel_host *h, const char *key,
                        const char *dir, uint64_t bytes);

/* Open a swap of `bytes` (rounded up to the alignment) under `dir`.  `tag`
 * names it in messages ("optimizer state, rank 1"). */
int zero_swap_open(const accel_host_v1 *H, accel_host *h, const char *dir, const char *tag,
                   uint64_t bytes, const zero_aio_opts *o, zero_swap **ret_swap);

/* Alignment (bytes) that buffers, offsets and lengths of this swap's I/O
 * must have: 4096 with O_DIRECT, also kept when buffered. */
uint64_t zero_swap_align(const zero_swap *sw);
/* 1 when O_DIRECT is in use, 0 after the buffered fallback. */
int zero_swap_direct(const zero_swap *sw);

/* Start writing `len` bytes of `buf` at `offset` (or reading them into
 * buf) and return at once; *ret_ticket identifies the transfer.  buf must
 * stay untouched until zero_swap_wait() of that ticket returned. */
int zero_swap_write(zero_swap *sw, uint64_t offset, const void *buf, uint64_t len,
                    uint64_t *ret_ticket);
int zero_swap_read(zero_swap *sw, uint64_t offset, void *buf, uint64_t len,
                   uint64_t *ret_ticket);
/* Block until transfer `ticket` is complete (a short or failed transfer is
 * an error naming the path, the offset and errno's text). */
int zero_swap_wait(zero_swap *sw, uint64_t ticket);
/* Block until every transfer started is complete. */
int zero_swap_wait_all(zero_swap *sw);

/* Bytes moved and seconds spent waiting, for the benchmark and the log. */
typedef struct zero_swap_stats {
	uint64_t bytes_read, bytes_written;
	double wait_seconds;
} zero_swap_stats;
void zero_swap_get_stats(const zero_swap *sw, zero_swap_stats *ret);

/* Wait for what is in flight, close the file (it is already unlinked) and
 * free the swap.  NULL is a no-op; returns NULL. */
zero_swap *zero_swap_close(zero_swap *sw);

#endif
