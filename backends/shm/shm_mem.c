/* SPDX-License-Identifier: MIT */
/* backends/shm/shm_mem.c: backend-allocated buffers (mem_alloc/mem_free).
 *
 * Every rank allocates the same sizes in the same order, so the i-th
 * allocation of every rank is "the same buffer".  The i-th allocation is one
 * shared-memory object holding all ranks' copies side by side
 * (header page, then copy 0, copy 1, ...), named after the communicator
 * plus "-m<i>".  mem_alloc is not collective, so whichever rank comes first
 * creates the object (O_EXCL) and sizes it; the others open it; the last
 * of the world to map it unlinks the name.  A rank's pointer is its own
 * copy; a collective whose buffers lie in these objects reads and writes
 * the peers' copies directly (shm_coll.c), with no staging copy. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm-impl.h"

typedef struct alloc_hdr {
	uint64_t magic;
	uint64_t bytes;
	uint64_t stride;
	int32_t world;
	_Atomic int32_t ready;
	_Atomic int32_t attached;
} alloc_hdr;

#define ALLOC_MAGIC 0x316d656d6363616eull

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* The comm thread looks allocations up (for queued collectives) while the
 * caller's thread may add one: mem_alloc publishes a new head with a
 * release store, readers load it with acquire.  (mem_free unlinks only
 * after draining the queue, when the comm thread looks at nothing.) */
static const shm_alloc *allocs_head(const shm_comm *c)
{
	return __atomic_load_n(&c->allocs, __ATOMIC_ACQUIRE);
}

const shm_alloc *shm_mem_find(const shm_comm *c, const void *p, uint64_t bytes, uint64_t *ret_off)
{
	const char *cp = p;
	if (!p)
		return NULL;
	for (const shm_alloc *a = allocs_head(c); a; a = a->next) {
		const char *mine = a->base + (uint64_t)c->rank * a->stride;
		if (cp >= mine && cp < mine + a->stride && (uint64_t)(cp - mine) + bytes <= a->bytes) {
			*ret_off = (uint64_t)(cp - mine);
			return a;
		}
	}
	return NULL;
}

const shm_alloc *shm_mem_by_index(const shm_comm *c, int32_t index)
{
	for (const shm_alloc *a = allocs_head(c); a; a = a->next)
		if (a->index == index)
			return a;
	return NULL;
}

/* A rank that created allocation `index` and could not complete it (no
 * room in /dev/shm, a failed mmap); -1 when none did. */
static int32_t alloc_failed_by(const shm_comm *c, int32_t index)
{
	for (int32_t q = 0; q < c->world; q++)
		if (atomic_load_explicit(&c->ranks[q].alloc_failed, memory_order_acquire) == index + 1)
			return q;
	return -1;
}

/* While waiting for the rank that creates allocation `index`: has that rank
 * failed to complete it, or has a rank died (or left), or failed?  Then the
 * allocation will never be completed; `why` says which.  The creator can be
 * any rank (the first to get there), so every peer is checked, at most
 * every 10 ms. */
static int alloc_doomed(shm_comm *c, int32_t index, uint64_t *next_check, char *why, size_t cap)
{
	uint64_t now = shm_now_ns();
	if (now < *next_check)
		return 0;
	*next_check = now + 10000000ull;
	int32_t f = alloc_failed_by(c, index);
	if (f >= 0) {
		shm_fmt(why, cap, "rank %d, which created it, could not complete it (its own error "
		        "says why)", (int)f);
		return 1;
	}
	if (atomic_load_explicit(&c->hdr->abort_code, memory_order_acquire)) {
		shm_fmt(why, cap, "a rank failed: %s", c->hdr->abort_msg);
		return 1;
	}
	/* a dead process first: a rank that left may have left because of it */
	for (int pass = 0; pass < 2; pass++)
		for (int32_t q = 0; q < c->world; q++)
			if (q != c->rank &&
			    (pass || atomic_load_explicit(&c->ranks[q].state, memory_order_acquire) !=
			                 SHM_RANK_LEFT) &&
			    shm_peer_dead(c, q, why, cap))
				return 1;
	return 0;
}

/* Wait until the creator has sized the object: 0, or -1 with the cause in
 * why (the deadline passed, or alloc_doomed). */
static int wait_sized(shm_comm *c, int32_t index, int fd, uint64_t deadline, struct stat *sb,
                      char *why, size_t cap)
{
	unsigned us = 20;
	uint64_t next_check = 0;
	for (;;) {
		if (fstat(fd, sb) != 0) {
			shm_fmt(why, cap, "cannot stat it: %s", strerror(errno));
			return -1;
		}
		if ((uint64_t)sb->st_size != 0)
			return 0;
		if (alloc_doomed(c, index, &next_check, why, cap))
			return -1;
		if (shm_now_ns() >= deadline) {
			shm_fmt(why, cap, "the rank that created it did not size it within %lld ms",
			        (long long)c->timeout_ms);
			return -1;
		}
		usleep(us);
		if (us < 1000)
			us *= 2;
	}
}

int shm_mem_alloc(void *state, int32_t device, int32_t device_index, uint64_t bytes, void **ret_ptr)
{
	shm_comm *c = state;
	const accel_host_v1 *host = c->host;
	shm_alloc *a = NULL;
	int fd = -1, st = ACCEL_OK;

	if (device != ACCEL_DEVICE_CPU)
		return host->error(c->h, ACCEL_ERR_UNSUPPORTED,
		                   "allocates host memory only (asked for device %d:%d)", (int)device,
		                   (int)device_index);
	if (bytes > (UINT64_C(1) << 46))
		return host->error(c->h, ACCEL_ERR_NOMEM, "mem_alloc: %llu bytes is too large",
		                   (unsigned long long)bytes);
	a = calloc(1, sizeof(*a));
	if (!a)
		return host->error(c->h, ACCEL_ERR_NOMEM, "out of memory");
	a->index = c->n_allocs;
	a->bytes = bytes;
	a->stride = round_up(bytes ? bytes : 1, SHM_PAGE);
	a->map_bytes = (size_t)(SHM_PAGE + (uint64_t)c->world * a->stride);

	if (c->world == 1 || !c->name[0]) {
		void *m = mmap(NULL, a->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			st = host->error(c->h, ACCEL_ERR_NOMEM, "cannot map %llu bytes: %s",
			                 (unsigned long long)a->map_bytes, strerror(errno));
			goto fail;
		}
		a->map = m;
		a->unlinked = 1;
	} else {
		shm_fmt(a->name, sizeof(a->name), "%s-m%d", c->name, (int)a->index);
		int created = 0;
		fd = shm_open(a->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0) {
			created = 1;
			/* The name is free again after a creator failed and removed
			 * it: this is a fresh object the others will never join. */
			int32_t f = alloc_failed_by(c, a->index);
			if (f >= 0) {
				st = host->error(c->h, ACCEL_ERR_PEER,
				                 "mem_alloc #%d: rank %d, which created it first, could not "
				                 "complete it (its own error says why)", (int)a->index, (int)f);
				shm_unlink(a->name);
				goto fail;
			}
			int fe = ftruncate(fd, (off_t)a->map_bytes) == 0 ? 0 : errno;
			if (!fe) {
				fe = posix_fallocate(fd, 0, (off_t)a->map_bytes);
				if (fe == EOPNOTSUPP || fe == EINVAL)
					fe = 0;
			}
			if (fe) {
				st = host->error(c->h, fe == ENOSPC ? ACCEL_ERR_NOMEM : ACCEL_ERR_SYSTEM,
				                 "mem_alloc #%d: cannot reserve %llu bytes (%d copies of %llu) "
				                 "in /dev/shm: %s",
				                 (int)a->index, (unsigned long long)a->map_bytes, (int)c->world,
				                 (unsigned long long)bytes, strerror(fe));
				goto fail_created;
			}
		} else if (errno == EEXIST) {
			fd = shm_open(a->name, O_RDWR | O_CLOEXEC, 0600);
		}
		if (fd < 0) {
			st = host->error(c->h, ACCEL_ERR_SYSTEM, "mem_alloc #%d: cannot open %s: %s",
			                 (int)a->index, a->name, strerror(errno));
			goto fail;
		}
		if (!created) {
			struct stat sb;
			char why[SHM_MSG_MAX];
			uint64_t deadline = shm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
			if (wait_sized(c, a->index, fd, deadline, &sb, why, sizeof(why)) != 0) {
				st = host->error(c->h, shm_now_ns() >= deadline ? ACCEL_ERR_TIMEOUT
				                                                : ACCEL_ERR_PEER,
				                 "mem_alloc #%d: %s will not be completed: %s", (int)a->index,
				                 a->name, why);
				goto fail;
			}
			if ((uint64_t)sb.st_size != a->map_bytes) {
				st = host->error(c->h, ACCEL_ERR_INVALID_ARG,
				                 "mem_alloc #%d: this rank asked for %llu bytes but another "
				                 "rank allocated a different size (segment of %lld bytes): every "
				                 "rank must allocate the same sizes in the same order",
				                 (int)a->index, (unsigned long long)bytes, (long long)sb.st_size);
				goto fail;
			}
		}
		void *m = mmap(NULL, a->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			st = host->error(c->h, ACCEL_ERR_NOMEM, "mem_alloc #%d: cannot map %llu bytes: %s",
			                 (int)a->index, (unsigned long long)a->map_bytes, strerror(errno));
			if (created)
				goto fail_created;
			goto fail;
		}
		a->map = m;
		close(fd);
		fd = -1;
		alloc_hdr *h = m;
		if (created) {
			h->magic = ALLOC_MAGIC;
			h->bytes = bytes;
			h->stride = a->stride;
			h->world = c->world;
			atomic_store_explicit(&h->ready, 1, memory_order_release);
		} else {
			uint64_t deadline = shm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
			uint64_t next_check = 0;
			char why[SHM_MSG_MAX];
			while (!atomic_load_explicit(&h->ready, memory_order_acquire)) {
				if (alloc_doomed(c, a->index, &next_check, why, sizeof(why))) {
					st = host->error(c->h, ACCEL_ERR_PEER,
					                 "mem_alloc #%d: %s will not be initialized: %s",
					                 (int)a->index, a->name, why);
					goto fail;
				}
				if (shm_now_ns() >= deadline) {
					st = host->error(c->h, ACCEL_ERR_TIMEOUT,
					                 "mem_alloc #%d: %s was not initialized within %lld ms",
					                 (int)a->index, a->name, (long long)c->timeout_ms);
					goto fail;
				}
				usleep(50);
			}
			if (h->magic != ALLOC_MAGIC || h->bytes != bytes || h->world != c->world) {
				st = host->error(c->h, ACCEL_ERR_INVALID_ARG,
				                 "mem_alloc #%d: this rank asked for %llu bytes, another rank "
				                 "for %llu: every rank must allocate the same sizes in the same "
				                 "order",
				                 (int)a->index, (unsigned long long)bytes,
				                 (unsigned long long)h->bytes);
				goto fail;
			}
		}
		if (atomic_fetch_add(&h->attached, 1) + 1 == c->world) {
			shm_unlink(a->name);
			a->unlinked = 1;
		}
	}
	a->base = (char *)a->map + SHM_PAGE;
	a->next = c->allocs;
	__atomic_store_n(&c->allocs, a, __ATOMIC_RELEASE);
	c->n_allocs++;
	*ret_ptr = a->base + (uint64_t)c->rank * a->stride;
	return ACCEL_OK;

fail_created:
	/* The ranks waiting for this rank to complete the object it created
	 * hear so at once (alloc_doomed), not at their timeout. */
	atomic_store_explicit(&c->ranks[c->rank].alloc_failed, a->index + 1, memory_order_release);
fail:
	/* The ranks can no longer agree on this allocation: the name must not
	 * outlive the job (the others fail alike, or already did). */
	if (a->name[0])
		shm_unlink(a->name);
	if (fd >= 0)
		close(fd);
	if (a->map)
		munmap(a->map, a->map_bytes);
	free(a);
	/* The index is consumed even on failure, so later allocations of the
	 * ranks stay aligned with each other. */
	c->n_allocs++;
	return st;
}

/* Unmap a; `closing`: fini, the last chance to remove the name. */
static void release(shm_comm *c, shm_alloc *a, int closing)
{
	if (!a->unlinked && a->name[0]) {
		/* Some rank has not mapped it yet.  mem_free is not collective:
		 * a rank may free its copy before a slower peer has even
		 * allocated it, so the name stays for that peer (the last to map
		 * it removes it) until this rank's fini, which removes it so that
		 * it cannot outlive the job. */
		alloc_hdr *h = a->map;
		if (atomic_load(&h->attached) < c->world) {
			if (closing) {
				shm_unlink(a->name);
			} else {
				if (c->n_stale == c->cap_stale) {
					size_t cap = c->cap_stale ? 2 * c->cap_stale : 8;
					void *p = realloc(c->stale, cap * sizeof(*c->stale));
					if (p) {
						c->stale = p;
						c->cap_stale = cap;
					}
				}
				if (c->n_stale < c->cap_stale)
					memcpy(c->stale[c->n_stale++], a->name, sizeof(a->name));
				else
					shm_unlink(a->name);  /* out of memory: as at fini */
			}
		}
	}
	munmap(a->map, a->map_bytes);
	free(a);
}

void shm_mem_free(void *state, void *ptr)
{
	shm_comm *c = state;
	if (!c || !ptr)
		return;
	/* Collectives in flight may use the buffer: let them finish (or fail)
	 * first rather than unmap memory under the comm thread. */
	shm_drain(c);
	for (shm_alloc **pp = &c->allocs; *pp; pp = &(*pp)->next) {
		shm_alloc *a = *pp;
		if (a->base + (uint64_t)c->rank * a->stride == (char *)ptr) {
			*pp = a->next;
			release(c, a, 0);
			return;
		}
	}
	c->host->log(c->h, ACCEL_LOG_ERROR, "mem_free: %p was not allocated by shm mem_alloc", ptr);
}

void shm_mem_close_all(shm_comm *c)
{
	while (c->allocs) {
		shm_alloc *a = c->allocs;
		c->allocs = a->next;
		release(c, a, 1);
	}
	/* gone already when the late ranks mapped them: ENOENT, harmless */
	for (size_t i = 0; i < c->n_stale; i++)
		shm_unlink(c->stale[i]);
	free(c->stale);
	c->stale = NULL;
	c->n_stale = c->cap_stale = 0;
}
