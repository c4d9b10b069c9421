/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_nvme.c: swap files for NVMe offload (zero_nvme.h).
 *
 * Why it is built this way:
 *  - A transfer is cut into block_size requests that go round-robin to
 *    thread_count rings.  Each ring has a thread of its own that submits
 *    the ring's queued requests (at most queue_depth in flight) and reaps
 *    their completions, so a transfer keeps moving while the training
 *    thread is busy stepping: a caller that only submitted from its own
 *    thread would leave everything past the first queue_depth requests
 *    waiting until its next call.  The thread sleeps in io_uring_wait_cqe;
 *    an eventfd read kept armed on the ring wakes it for new requests.
 *  - The file is unlinked from the start (O_TMPFILE, else created and
 *    unlinked at once), so no exit, failure or SIGKILL can leave it behind.
 *  - O_DIRECT is asked for first; a file system that refuses it at open or
 *    at the first write (probed in zero_swap_open, so never mid-step) gets
 *    buffered I/O and one warning.  Alignment stays 4096 either way, so the
 *    callers' arithmetic does not depend on the file system.
 *  - Where io_uring cannot be set up (a seccomp profile that blocks it, as
 *    container runtimes' defaults do), the same threads run pread/pwrite,
 *    with one warning; so does a build without liburing (meson -During).
 *    ACCEL_ZERO_NVME_NO_URING=1 chooses that path (tests, and hosts whose
 *    io_uring misbehaves); ACCEL_ZERO_NVME_NO_TMPFILE=1 the named file
 *    unlinked at once in place of O_TMPFILE (the same reasons). */
#include "accel-build-config.h"

#include <errno.h>
#include <fcntl.h>
#if ACCEL_HAVE_URING
#include <liburing.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "zero_nvme.h"

#define SWAP_ALIGN UINT64_C(4096)
#define EFD_TAG ((uint64_t)1)   /* user_data of the eventfd read (requests are pointers) */

typedef struct xfer {
	uint64_t ticket;
	uint64_t offset, len;
	int write;
	uint32_t left;       /* requests not complete yet                     */
	int err;             /* first errno of a request, -1: short (EOF)     */
	uint64_t err_off;    /* where that request was                        */
	struct xfer *next;
} xfer;

typedef struct req {
	xfer *x;
	uint64_t off;
	char *buf;
	uint32_t len, done;
	struct req *next;
} req;

typedef struct ring {
	zero_swap *sw;
#if ACCEL_HAVE_URING
	struct io_uring uring;
#endif
	int have_uring;
	int efd;
	uint64_t efd_val;
	pthread_t thr;
	int started;
	pthread_cond_t cv;   /* pread/pwrite mode: new work                   */
	req *head, *tail;    /* queued, not submitted (under sw->mu)          */
	uint32_t inflight;
} ring;

struct zero_swap {
	const accel_host_v1 *H;
	accel_host *h;
	char *dir, *tag;
	int fd;
	int direct;
	int uring;
	uint64_t size;
	zero_aio_opts o;
	pthread_mutex_t mu;
	pthread_cond_t done;
	int mu_init;
	xfer *xfers;
	uint64_t next_ticket;
	uint32_t nring;
	uint64_t rr;         /* requests handed out, round-robin over the rings */
	ring *rings;
	int stop;
	zero_swap_stats stats;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zero_aio_opts_default(zero_aio_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->block_size = 1048576;
	o->queue_depth = 8;
	o->thread_count = 1;
	o->single_submit = 0;
	o->overlap_events = 1;
}

/* ---- preflight ---------------------------------------------------------------- */

/* Open an unlinked file under dir: O_TMPFILE, else a named file unlinked at
 * once.  Returns the fd or -1 with errno set. */
static int open_unlinked(const char *dir, int flags)
{
	const char *no = getenv("ACCEL_ZERO_NVME_NO_TMPFILE");
	int fd = -1;
	if (no && *no && strcmp(no, "0")) {
		errno = EOPNOTSUPP;   /* as a file system without O_TMPFILE says */
	} else {
		fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC | flags, 0600);
		if (fd >= 0)
			return fd;
	}
	/* O_TMPFILE not supported by this file system (or this kernel) */
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT)
		return -1;
	char path[4096];
	for (int tries = 0; tries < 100; tries++) {
		static unsigned seq;
		snprintf(path, sizeof(path), "%s/.accel-swap-%ld-%u", dir, (long)getpid(),
		         __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
		fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | flags, 0600);
		if (fd >= 0) {
			unlink(path);
			return fd;
		}
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

int zero_nvme_preflight(const accel_host_v1 *H, accel_host *h, const char *key,
                        const char *dir, uint64_t bytes)
{
	struct stat sb;
	struct statvfs vs;
	if (!key)
		key = "zero_optimization.offload_optimizer.nvme_path";
	if (!dir || !*dir)
		return H->error(h, ACCEL_ERR_CONFIG,
		                "%s: no directory given: set it to a directory on a fast local disk",
		                key);
	if (stat(dir, &sb)) {
		if (errno == ENOENT || errno == ENOTDIR)
			return H->error(h, ACCEL_ERR_CONFIG,
			                "%s: %s: no such directory: create it (mkdir -p %s) or set %s to "
			                "an existing directory", key, dir, dir, key);
		return H->error(h, ACCEL_ERR_CONFIG, "%s: %s: cannot look at it: %s: fix the path "
		                "or its permissions", key, dir, strerror(errno));
	}
	if (!S_ISDIR(sb.st_mode))
		return H->error(h, ACCEL_ERR_CONFIG,
		                "%s: %s is not a directory: set %s to a directory (the swap files "
		                "are created inside it)", key, dir, key);
	/* Writable: try it (access() would say yes to root on a read-only
	 * mount's ACLs and no to nothing). */
	int fd = open_unlinked(dir, 0);
	if (fd < 0)
		return H->error(h, ACCEL_ERR_CONFIG,
		                "%s: %s is not writable by this process (creating a file there: %s): "
		                "give this user write access or set %s to a writable directory",
		                key, dir, strerror(errno), key);
	close(fd);
	if (statvfs(dir, &vs))
		return H->error(h, ACCEL_ERR_CONFIG, "%s: %s: cannot read its free space: %s", key, dir,
		                strerror(errno));
	uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
	if (avail < bytes)
		return H->error(h, ACCEL_ERR_CONFIG,
		                "%s: %s has %.2f GiB free but the swap needs %.2f GiB (%llu bytes): "
		                "free space there or set %s to a larger disk", key, dir,
		                (double)avail / 1073741824.0, (double)bytes / 1073741824.0,
		                (unsigned long long)bytes, key);
	return ACCEL_OK;
}

/* ---- completing requests (under sw->mu) ------------------------------------------- */

static void req_finish(zero_swap *sw, req *q, int err)
{
	xfer *x = q->x;
	if (err && !x->err) {
		x->err = err;
		x->err_off = q->off + q->done;
	}
	if (--x->left == 0)
		pthread_cond_broadcast(&sw->done);
	free(q);
}

/* A request's result `res` (bytes or -errno): done, failed, or requeued
 * for the rest of a short transfer.  Returns 1 when requeued. */
static int req_result(zero_swap *sw, ring *r, req *q, long res)
{
	if (res == -EAGAIN || res == -EINTR) {
		q->next = r->head;
		r->head = q;
		if (!r->tail)
			r->tail = q;
		return 1;
	}
	if (res < 0) {
		req_finish(sw, q, (int)-res);
		return 0;
	}
	if (res == 0) {
		req_finish(sw, q, -1);
		return 0;
	}
	q->done += (uint32_t)res;
	if (q->done < q->len) {
		q->next = r->head;
		r->head = q;
		if (!r->tail)
			r->tail = q;
		return 1;
	}
	req_finish(sw, q, 0);
	return 0;
}

static req *pop(ring *r)
{
	req *q = r->head;
	if (q) {
		r->head = q->next;
		if (!r->head)
			r->tail = NULL;
		q->next = NULL;
	}
	return q;
}

/* ---- the ring threads ---------------------------------------------------------------- */
#if ACCEL_HAVE_URING

static void arm_efd(ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
	if (!sqe)
		return;   /* cannot happen: one entry is kept for it */
	io_uring_prep_read(sqe, r->efd, &r->efd_val, sizeof(r->efd_val), 0);
	io_uring_sqe_set_data64(sqe, EFD_TAG);
}

static void *uring_thread(void *arg)
{
	ring *r = arg;
	zero_swap *sw = r->sw;
	uint32_t qd = sw->o.queue_depth;
	arm_efd(r);
	io_uring_submit(&r->uring);
	for (;;) {
		pthread_mutex_lock(&sw->mu);
		if (sw->stop && !r->head && !r->inflight) {
			pthread_mutex_unlock(&sw->mu);
			break;
		}
		unsigned queued = 0;
		if (sw->o.overlap_events || !r->inflight) {
			while (r->head && r->inflight < qd) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
				if (!sqe)
					break;
				req *q = pop(r);
				uint32_t n = q->len - q->done;
				if (q->x->write)
					io_uring_prep_write(sqe, sw->fd, q->buf + q->done, n, q->off + q->done);
				else
					io_uring_prep_read(sqe, sw->fd, q->buf + q->done, n, q->off + q->done);
				io_uring_sqe_set_data(sqe, q);
				r->inflight++;
				queued++;
				if (sw->o.single_submit)
					io_uring_submit(&r->uring);
			}
		}
		pthread_mutex_unlock(&sw->mu);
		if (queued && !sw->o.single_submit)
			io_uring_submit(&r->uring);

		struct io_uring_cqe *cqe;
		int e = io_uring_wait_cqe(&r->uring, &cqe);
		if (e == -EINTR || e == -EAGAIN)
			continue;
		if (e < 0) {
			/* the ring itself failed: fail what this ring holds */
			pthread_mutex_lock(&sw->mu);
			req *q;
			while ((q = pop(r)))
				req_finish(sw, q, -e);
			pthread_mutex_unlock(&sw->mu);
			if (r->inflight)
				continue;
			break;
		}
		unsigned head, seen = 0;
		int rearm = 0;
		pthread_mutex_lock(&sw->mu);
		io_uring_for_each_cqe(&r->uring, head, cqe) {
			seen++;
			if (io_uring_cqe_get_data64(cqe) == EFD_TAG) {
				rearm = 1;
				continue;
			}
			r->inflight--;
			req_result(sw, r, io_uring_cqe_get_data(cqe), cqe->res);
		}
		pthread_mutex_unlock(&sw->mu);
		io_uring_cq_advance(&r->uring, seen);
		if (rearm) {
			arm_efd(r);
			io_uring_submit(&r->uring);
		}
	}
	return NULL;
}

#endif

/* pread/pwrite when io_uring is not there. */
static void *sync_thread(void *arg)
{
	ring *r = arg;
	zero_swap *sw = r->sw;
	pthread_mutex_lock(&sw->mu);
	for (;;) {
		while (!r->head && !sw->stop)
			pthread_cond_wait(&r->cv, &sw->mu);
		req *q = pop(r);
		if (!q)
			break;   /* stop, nothing left */
		pthread_mutex_unlock(&sw->mu);
		uint32_t n = q->len - q->done;
		ssize_t res = q->x->write ? pwrite(sw->fd, q->buf + q->done, n, (off_t)(q->off + q->done))
		                          : pread(sw->fd, q->buf + q->done, n, (off_t)(q->off + q->done));
		long v = res < 0 ? -(long)errno : (long)res;
		pthread_mutex_lock(&sw->mu);
		req_result(sw, r, q, v);
	}
	pthread_mutex_unlock(&sw->mu);
	return NULL;
}

/* ---- open and close -------------------------------------------------------------------- */

static int check_opts(const accel_host_v1 *H, accel_host *h, const zero_aio_opts *o)
{
	if (!o->block_size || o->block_size % SWAP_ALIGN || o->block_size > (UINT64_C(1) << 30))
		return H->error(h, ACCEL_ERR_CONFIG,
		                "zero_optimization.aio.block_size: %llu; it must be a multiple of "
		                "4096 between 4096 and 1 GiB (DeepSpeed's default: 1048576)",
		                (unsigned long long)o->block_size);
	if (!o->queue_depth || o->queue_depth > 4096)
		return H->error(h, ACCEL_ERR_CONFIG,
		                "zero_optimization.aio.queue_depth: %u; it must be 1 to 4096 "
		                "(DeepSpeed's default: 8)", o->queue_depth);
	if (!o->thread_count || o->thread_count > 64)
		return H->error(h, ACCEL_ERR_CONFIG,
		                "zero_optimization.aio.thread_count: %u; it must be 1 to 64 "
		                "(DeepSpeed's default: 1)", o->thread_count);
	return ACCEL_OK;
}

zero_swap *zero_swap_close(zero_swap *sw)
{
	if (!sw)
		return NULL;
	if (sw->rings) {
		if (sw->mu_init) {
			pthread_mutex_lock(&sw->mu);
			sw->stop = 1;
			for (uint32_t i = 0; i < sw->nring; i++)
				pthread_cond_signal(&sw->rings[i].cv);
			pthread_mutex_unlock(&sw->mu);
		}
		for (uint32_t i = 0; i < sw->nring; i++) {
			ring *r = &sw->rings[i];
			if (r->started) {
				if (r->efd >= 0) {
					uint64_t one = 1;
					ssize_t w = write(r->efd, &one, sizeof(one));
					(void)w;
				}
				pthread_join(r->thr, NULL);
			}
#if ACCEL_HAVE_URING
			if (r->have_uring)
				io_uring_queue_exit(&r->uring);
#endif
			if (r->efd >= 0)
				close(r->efd);
			pthread_cond_destroy(&r->cv);
		}
		free(sw->rings);
	}
	while (sw->xfers) {
		xfer *x = sw->xfers;
		sw->xfers = x->next;
		free(x);
	}
	if (sw->fd >= 0)
		close(sw->fd);
	if (sw->mu_init) {
		pthread_mutex_destroy(&sw->mu);
		pthread_cond_destroy(&sw->done);
	}
	free(sw->dir);
	free(sw->tag);
	free(sw);
	return NULL;
}

/* O_DIRECT at open and at the first write; buffered after one warning
 * where either is refused with EINVAL. */
static int open_file(zero_swap *sw)
{
	const accel_host_v1 *H = sw->H;
	int why = 0;
	sw->fd = open_unlinked(sw->dir, O_DIRECT);
	if (sw->fd < 0 && errno == EINVAL) {
		why = EINVAL;
		sw->fd = open_unlinked(sw->dir, 0);
	}
	if (sw->fd < 0)
		return H->error(sw->h, ACCEL_ERR_IO,
		                "zero NVMe swap (%s): cannot create a file under %s: %s: check that "
		                "the directory is writable", sw->tag, sw->dir, strerror(errno));
	sw->direct = !why;
	if (fallocate(sw->fd, 0, 0, (off_t)sw->size)) {
		int e = errno;
		if (e == ENOSPC)
			return H->error(sw->h, ACCEL_ERR_IO,
			                "zero NVMe swap (%s): %s has no room for %llu bytes: free space "
			                "there or point nvme_path at a larger disk", sw->tag, sw->dir,
			                (unsigned long long)sw->size);
		if (ftruncate(sw->fd, (off_t)sw->size))
			return H->error(sw->h, ACCEL_ERR_IO,
			                "zero NVMe swap (%s): cannot size the file under %s to %llu "
			                "bytes: %s", sw->tag, sw->dir, (unsigned long long)sw->size,
			                strerror(errno));
	}
	if (sw->direct) {
		/* the first I/O: some file systems take O_DIRECT at open and refuse
		 * it at the first transfer */
		void *probe = NULL;
		if (posix_memalign(&probe, SWAP_ALIGN, SWAP_ALIGN))
			return H->error(sw->h, ACCEL_ERR_NOMEM, "zero NVMe swap: out of memory");
		memset(probe, 0, SWAP_ALIGN);
		ssize_t w = pwrite(sw->fd, probe, SWAP_ALIGN, 0);
		int e = errno;
		free(probe);
		if (w < 0 && e == EINVAL) {
			int fl = fcntl(sw->fd, F_GETFL);
			if (fl < 0 || fcntl(sw->fd, F_SETFL, fl & ~O_DIRECT))
				return H->error(sw->h, ACCEL_ERR_IO,
				                "zero NVMe swap (%s): %s refuses O_DIRECT writes and the file "
				                "cannot be switched to buffered I/O: %s", sw->tag, sw->dir,
				                strerror(errno));
			sw->direct = 0;
			why = EINVAL;
		} else if (w != (ssize_t)SWAP_ALIGN) {
			return H->error(sw->h, ACCEL_ERR_IO,
			                "zero NVMe swap (%s): the first write under %s failed: %s", sw->tag,
			                sw->dir, w < 0 ? strerror(e) : "short write");
		}
	}
	if (!sw->direct)
		H->log(sw->h, ACCEL_LOG_WARN,
		       "zero NVMe swap (%s): %s does not take O_DIRECT (%s): buffered I/O instead, "
		       "which goes through the page cache; for full speed set nvme_path to a "
		       "directory on a local file system with O_DIRECT (ext4, xfs)", sw->tag, sw->dir,
		       strerror(why));
	return ACCEL_OK;
}

int zero_swap_open(const accel_host_v1 *H, accel_host *h, const char *dir, const char *tag,
                   uint64_t bytes, const zero_aio_opts *o, zero_swap **ret_swap)
{
	zero_swap *sw = NULL;
	zero_aio_opts def;
	int r;
	if (!H || !dir || !ret_swap)
		return H ? H->error(h, ACCEL_ERR_INVALID_ARG, "zero_swap_open: NULL directory or "
		                    "ret_swap")
		         : ACCEL_ERR_INVALID_ARG;
	if (!o) {
		zero_aio_opts_default(&def);
		o = &def;
	}
	if ((r = check_opts(H, h, o)))
		return r;
	if (!(sw = calloc(1, sizeof(*sw))))
		return H->error(h, ACCEL_ERR_NOMEM, "zero NVMe swap: out of memory");
	sw->H = H;
	sw->h = h;
	sw->fd = -1;
	sw->o = *o;
	sw->size = (bytes + SWAP_ALIGN - 1) / SWAP_ALIGN * SWAP_ALIGN;
	if (!sw->size)
		sw->size = SWAP_ALIGN;
	sw->next_ticket = 1;
	if (!(sw->dir = strdup(dir)) || !(sw->tag = strdup(tag ? tag : "swap"))) {
		r = H->error(h, ACCEL_ERR_NOMEM, "zero NVMe swap: out of memory");
		goto fail;
	}
	if (pthread_mutex_init(&sw->mu, NULL)) {
		r = H->error(h, ACCEL_ERR_SYSTEM, "zero NVMe swap: pthread_mutex_init failed");
		goto fail;
	}
	if (pthread_cond_init(&sw->done, NULL)) {
		pthread_mutex_destroy(&sw->mu);
		r = H->error(h, ACCEL_ERR_SYSTEM, "zero NVMe swap: pthread_cond_init failed");
		goto fail;
	}
	sw->mu_init = 1;
	if ((r = open_file(sw)))
		goto fail;

	sw->nring = o->thread_count;
	if (!(sw->rings = calloc(sw->nring, sizeof(*sw->rings)))) {
		r = H->error(h, ACCEL_ERR_NOMEM, "zero NVMe swap: out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < sw->nring; i++) {
		sw->rings[i].efd = -1;
		pthread_cond_init(&sw->rings[i].cv, NULL);
	}
	const char *no = getenv("ACCEL_ZERO_NVME_NO_URING");
	int want_uring = !(no && *no && strcmp(no, "0"));
	int uring_err = ENOSYS;
	sw->uring = 0;
#if ACCEL_HAVE_URING
	sw->uring = want_uring;
	for (uint32_t i = 0; i < sw->nring && sw->uring; i++) {
		ring *rg = &sw->rings[i];
		rg->sw = sw;
		int e = io_uring_queue_init(o->queue_depth + 1, &rg->uring, 0);
		if (e < 0) {
			uring_err = -e;
			sw->uring = 0;
			break;
		}
		rg->have_uring = 1;
		if ((rg->efd = eventfd(0, EFD_CLOEXEC)) < 0) {
			r = H->error(h, ACCEL_ERR_SYSTEM, "zero NVMe swap: eventfd: %s", strerror(errno));
			goto fail;
		}
	}
	if (!sw->uring) {
		for (uint32_t i = 0; i < sw->nring; i++) {
			ring *rg = &sw->rings[i];
			if (rg->have_uring)
				io_uring_queue_exit(&rg->uring);
			rg->have_uring = 0;
			if (rg->efd >= 0)
				close(rg->efd);
			rg->efd = -1;
		}
	}
#else
	if (want_uring)
		H->log(h, ACCEL_LOG_DEBUG, "zero NVMe swap (%s): this build has no liburing", sw->tag);
	want_uring = 0;
#endif
	if (!sw->uring && want_uring)
		H->log(h, ACCEL_LOG_WARN,
		       "zero NVMe swap (%s): io_uring is not available here (%s): swap I/O "
		       "through pread/pwrite on %u thread(s) instead (a container's seccomp "
		       "profile may block io_uring)", sw->tag, strerror(uring_err), sw->nring);
	for (uint32_t i = 0; i < sw->nring; i++) {
		ring *rg = &sw->rings[i];
		rg->sw = sw;
#if ACCEL_HAVE_URING
		void *(*fn)(void *) = sw->uring ? uring_thread : sync_thread;
#else
		void *(*fn)(void *) = sync_thread;
#endif
		if (pthread_create(&rg->thr, NULL, fn, rg)) {
			r = H->error(h, ACCEL_ERR_SYSTEM, "zero NVMe swap: cannot start an I/O thread");
			goto fail;
		}
		rg->started = 1;
	}
	H->log(h, ACCEL_LOG_DEBUG,
	       "zero NVMe swap (%s): %llu bytes under %s (unlinked), %s, %s, %u ring(s) x queue "
	       "depth %u, blocks of %llu bytes%s%s", sw->tag, (unsigned long long)sw->size, sw->dir,
	       sw->direct ? "O_DIRECT" : "buffered", sw->uring ? "io_uring" : "pread/pwrite",
	       sw->nring, o->queue_depth, (unsigned long long)o->block_size,
	       o->single_submit ? ", single submit" : "",
	       o->overlap_events ? "" : ", no overlap of events");
	*ret_swap = sw;
	return ACCEL_OK;
fail:
	zero_swap_close(sw);
	return r;
}

uint64_t zero_swap_align(const zero_swap *sw)
{
	(void)sw;
	return SWAP_ALIGN;
}

int zero_swap_direct(const zero_swap *sw)
{
	return sw ? sw->direct : 0;
}

/* ---- transfers -------------------------------------------------------------------------- */

static int start(zero_swap *sw, int is_write, uint64_t offset, void *buf, uint64_t len,
                 uint64_t *ret_ticket)
{
	const accel_host_v1 *H = sw ? sw->H : NULL;
	const char *what = is_write ? "write" : "read";
	if (!sw || !ret_ticket)
		return ACCEL_ERR_INVALID_ARG;
	if (offset % SWAP_ALIGN || len % SWAP_ALIGN || (uintptr_t)buf % SWAP_ALIGN || !buf || !len)
		return H->error(sw->h, ACCEL_ERR_INVALID_ARG,
		                "zero NVMe swap (%s): %s of %llu bytes at offset %llu from %p: offset, "
		                "length and buffer must be non-zero multiples of %llu", sw->tag, what,
		                (unsigned long long)len, (unsigned long long)offset, buf,
		                (unsigned long long)SWAP_ALIGN);
	if (offset > sw->size || len > sw->size - offset)
		return H->error(sw->h, ACCEL_ERR_INVALID_ARG,
		                "zero NVMe swap (%s): %s of [%llu, %llu) past the swap's %llu bytes",
		                sw->tag, what, (unsigned long long)offset,
		                (unsigned long long)(offset + len), (unsigned long long)sw->size);
	uint64_t bs = sw->o.block_size;
	uint64_t nreq = (len + bs - 1) / bs;
	xfer *x = calloc(1, sizeof(*x));
	req **qs = calloc(nreq, sizeof(*qs));
	int ok = x && qs;
	for (uint64_t i = 0; ok && i < nreq; i++) {
		if (!(qs[i] = calloc(1, sizeof(req))))
			ok = 0;
	}
	if (!ok) {
		for (uint64_t i = 0; qs && i < nreq; i++)
			free(qs[i]);
		free(qs);
		free(x);
		return H->error(sw->h, ACCEL_ERR_NOMEM, "zero NVMe swap: out of memory");
	}
	x->offset = offset;
	x->len = len;
	x->write = is_write;
	x->left = (uint32_t)nreq;
	pthread_mutex_lock(&sw->mu);
	x->ticket = sw->next_ticket++;
	x->next = sw->xfers;
	sw->xfers = x;
	uint32_t woke = 0;
	for (uint64_t i = 0; i < nreq; i++) {
		req *q = qs[i];
		q->x = x;
		q->off = offset + i * bs;
		q->buf = (char *)buf + i * bs;
		q->len = (uint32_t)(len - i * bs < bs ? len - i * bs : bs);
		ring *r = &sw->rings[sw->rr++ % sw->nring];
		if (r->tail)
			r->tail->next = q;
		else
			r->head = q;
		r->tail = q;
	}
	/* wake every ring that got work (all of them when nreq >= nring) */
	woke = nreq < sw->nring ? (uint32_t)nreq : sw->nring;
	uint32_t first = (uint32_t)((sw->rr - nreq) % sw->nring);   /* the first one's ring */
	pthread_mutex_unlock(&sw->mu);
	free(qs);
	for (uint32_t i = 0; i < woke; i++) {
		ring *r = &sw->rings[(first + i) % sw->nring];
		if (sw->uring) {
			uint64_t one = 1;
			ssize_t w = write(r->efd, &one, sizeof(one));
			(void)w;
		} else {
			pthread_mutex_lock(&sw->mu);
			pthread_cond_signal(&r->cv);
			pthread_mutex_unlock(&sw->mu);
		}
	}
	*ret_ticket = x->ticket;
	return ACCEL_OK;
}

int zero_swap_write(zero_swap *sw, uint64_t offset, const void *buf, uint64_t len,
                    uint64_t *ret_ticket)
{
	return start(sw, 1, offset, (void *)(uintptr_t)buf, len, ret_ticket);
}

int zero_swap_read(zero_swap *sw, uint64_t offset, void *buf, uint64_t len,
                   uint64_t *ret_ticket)
{
	return start(sw, 0, offset, buf, len, ret_ticket);
}

/* Wait for x (under sw->mu), unlink and free it; its error as a status. */
static int finish(zero_swap *sw, xfer *x)
{
	while (x->left)
		pthread_cond_wait(&sw->done, &sw->mu);
	for (xfer **pp = &sw->xfers; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	int err = x->err;
	uint64_t off = x->err_off, len = x->len;
	int is_write = x->write;
	free(x);
	if (!err) {
		if (is_write)
			sw->stats.bytes_written += len;
		else
			sw->stats.bytes_read += len;
		return ACCEL_OK;
	}
	return sw->H->error(sw->h, ACCEL_ERR_IO,
	                    "zero NVMe swap (%s): %s at offset %llu of the swap file under %s "
	                    "failed: %s", sw->tag, is_write ? "write" : "read",
	                    (unsigned long long)off, sw->dir,
	                    err < 0 ? "short transfer (end of file)" : strerror(err));
}

int zero_swap_wait(zero_swap *sw, uint64_t ticket)
{
	if (!sw)
		return ACCEL_ERR_INVALID_ARG;
	double t0 = now_s();
	pthread_mutex_lock(&sw->mu);
	xfer *x = sw->xfers;
	while (x && x->ticket != ticket)
		x = x->next;
	if (!x) {
		pthread_mutex_unlock(&sw->mu);
		return sw->H->error(sw->h, ACCEL_ERR_INVALID_ARG,
		                    "zero NVMe swap (%s): no transfer %llu in flight (waited for "
		                    "already, or never started)", sw->tag, (unsigned long long)ticket);
	}
	int r = finish(sw, x);
	sw->stats.wait_seconds += now_s() - t0;
	pthread_mutex_unlock(&sw->mu);
	return r;
}

int zero_swap_wait_all(zero_swap *sw)
{
	if (!sw)
		return ACCEL_ERR_INVALID_ARG;
	int r = ACCEL_OK;
	double t0 = now_s();
	pthread_mutex_lock(&sw->mu);
	while (sw->xfers) {
		int r2 = finish(sw, sw->xfers);
		r = r ? r : r2;
	}
	sw->stats.wait_seconds += now_s() - t0;
	pthread_mutex_unlock(&sw->mu);
	return r;
}

void zero_swap_get_stats(const zero_swap *sw, zero_swap_stats *ret)
{
	if (!ret)
		return;
	if (!sw) {
		memset(ret, 0, sizeof(*ret));
		return;
	}
	pthread_mutex_lock((pthread_mutex_t *)(uintptr_t)&sw->mu);
	*ret = sw->stats;
	pthread_mutex_unlock((pthread_mutex_t *)(uintptr_t)&sw->mu);
}
