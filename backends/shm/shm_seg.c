/* SPDX-License-Identifier: MIT */
/* backends/shm/shm_seg.c: creating, joining and removing the control
 * segment.
 *
 * Rank 0 creates a POSIX shared-memory object named
 * "/accel-shm-<rank 0 pid>-<job id>-<instance>", reserves its memory
 * (posix_fallocate, so a full /dev/shm is an error now and not a SIGBUS
 * later), initializes it and publishes the name through the rendezvous
 * store.  The others read the name, map the object and count themselves
 * in; the rank that completes the count unlinks the name.  From then on the
 * memory lives only as long as some rank maps it, so nothing is left in
 * /dev/shm whatever happens to the processes.  The window in which a crash
 * can leave a name behind is the bootstrap itself; names embed the pid of
 * the creator, and rank 0 of any later job removes names whose creator is
 * gone (stale_sweep()).
 *
 * `instance` numbers the communicators of one job (a program may create
 * several contexts): every rank adds 1 to a store counter, and since init is
 * collective the i-th communicator's ranks all draw values in
 * [i*world + 1, (i+1)*world]. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/store-keys.h"
#include "shm-impl.h"

#define STALE_MIN_AGE_S 60

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

typedef struct layout {
	uint64_t off_ranks, off_wake, off_small, off_stage, total;
} layout;

static void compute_layout(const shm_comm *c, layout *l)
{
	uint64_t w = (uint64_t)c->world;
	l->off_ranks = SHM_PAGE;
	l->off_wake = l->off_ranks + w * sizeof(shm_rank);
	l->off_small = round_up(l->off_wake + w * sizeof(shm_wake), SHM_PAGE);
	l->off_stage = round_up(l->off_small + w * 2 * c->small_bytes, SHM_PAGE);
	l->total = round_up(l->off_stage + w * c->stage_rank_bytes, SHM_PAGE);
}

static void attach_pointers(shm_comm *c, const layout *l)
{
	char *m = c->map;
	c->hdr = (shm_hdr *)m;
	c->ranks = (shm_rank *)(m + l->off_ranks);
	c->wake = (shm_wake *)(m + l->off_wake);
	c->small = m + l->off_small;
	c->stage = m + l->off_stage;
}

static void init_header(shm_comm *c, const layout *l)
{
	shm_hdr *h = c->hdr;
	h->magic = SHM_MAGIC;
	h->version = SHM_LAYOUT_VERSION;
	h->world = c->world;
	h->total_bytes = l->total;
	h->small_bytes = c->small_bytes;
	h->chunk_bytes = c->chunk_bytes;
	h->depth = c->depth;
	h->creator_pid = (int32_t)getpid();
}

/* Job ids come from the launcher; keep what is safe in a file name. */
static void job_tag(const char *job_id, char *buf, size_t cap)
{
	size_t n = 0;
	for (const char *p = job_id ? job_id : ""; *p && n + 1 < cap && n < 40; p++) {
		char ch = *p;
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		         ch == '_' || ch == '-';
		buf[n++] = ok ? ch : '_';
	}
	if (n == 0 && cap > 3) {
		memcpy(buf, "job", 3);
		n = 3;
	}
	buf[n] = '\0';
}

/* Remove /dev/shm/accel-shm-<pid>-* whose creator is gone: what a job killed
 * during its bootstrap left behind.  Only our own files, only old ones (a
 * process in another pid namespace may look dead from here). */
static void stale_sweep(shm_comm *c)
{
	DIR *d = opendir("/dev/shm");
	if (!d)
		return;
	struct dirent *e;
	time_t now = time(NULL);
	while ((e = readdir(d)) != NULL) {
		const char *prefix = "accel-shm-";
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		char *end;
		long pid = strtol(e->d_name + strlen(prefix), &end, 10);
		if (pid <= 0 || *end != '-' || pid == (long)getpid())
			continue;
		char path[300];
		struct stat sb;
		shm_fmt(path, sizeof(path), "/dev/shm/%s", e->d_name);
		if (stat(path, &sb) != 0 || sb.st_uid != geteuid() || now - sb.st_ctime < STALE_MIN_AGE_S)
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char name[300];
		shm_fmt(name, sizeof(name), "/%s", e->d_name);
		if (shm_unlink(name) == 0)
			c->host->log(c->h, ACCEL_LOG_INFO,
			             "removed stale shared-memory segment %s left by process %ld, which is gone",
			             path, pid);
	}
	closedir(d);
}

static int store_key(const shm_comm *c, char *buf, size_t cap, int64_t inst)
{
	return shm_fmt(buf, cap, ACCEL_STORE_FMT_SHM_SEGMENT, c->ns, (long long)inst);
}

/* Rank 0, the segment's creator, verifiably died: its pid is in our pid
 * namespace and no longer exists. */
static uint64_t pid_namespace(void);
static int rank0_gone(const shm_comm *c)
{
	int32_t pid0 = c->hdr->creator_pid;
	uint64_t ns0 = c->ranks[0].pidns;
	return pid0 > 0 && ns0 && ns0 == pid_namespace() && kill(pid0, 0) == -1 && errno == ESRCH;
}

static int wait_all_attached(shm_comm *c, char *err, size_t cap)
{
	uint64_t deadline = shm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
	uint64_t next_probe = shm_now_ns() + 100000000ull;
	unsigned sleep_us = 50;
	while (atomic_load_explicit(&c->hdr->attached, memory_order_acquire) < c->world) {
		/* a rank that exited before joining never attaches: its launcher
		 * told the store, which says so under accel/job/failed */
		if (shm_now_ns() >= next_probe) {
			char why[400];
			uint64_t len = 0;
			next_probe = shm_now_ns() + 100000000ull;
			if (c->host->store_get(c->h, ACCEL_STORE_KEY_JOB_FAILED, why, sizeof(why) - 1, &len, 0) ==
			    ACCEL_OK) {
				why[len < sizeof(why) ? len : sizeof(why) - 1] = '\0';
				shm_fmt(err, cap, "the ranks cannot all attach to the shared segment: %s", why);
				return ACCEL_ERR_PEER;
			}
		}
		if (atomic_load_explicit(&c->hdr->abort_code, memory_order_acquire)) {
			shm_fmt(err, cap, "a rank failed while joining: %s", c->hdr->abort_msg);
			return ACCEL_ERR_COMM;
		}
		/* rank 0 is known to everybody; if it dies nobody can finish (its
		 * pid means something only in our pid namespace; from another one
		 * the timeout and the store's verdict tell) */
		if (c->rank != 0 && rank0_gone(c)) {
			int32_t pid0 = c->hdr->creator_pid;
			shm_fmt(err, cap, "rank %d (pid %d) died while the ranks attached", shm_wr(c, 0),
			        (int)pid0);
			return ACCEL_ERR_PEER;
		}
		if (shm_now_ns() >= deadline) {
			char list[200];
			size_t len = 0;
			int n = 0;
			list[0] = '\0';
			for (int32_t q = 0; q < c->world; q++) {
				if (atomic_load(&c->ranks[q].state) != SHM_RANK_NONE)
					continue;
				n++;
				if (len < sizeof(list)) {
					int w = shm_fmt(list + len, sizeof(list) - len, "%s%d", n > 1 ? ", " : "",
					                 shm_wr(c, q));
					len += w > 0 ? (size_t)w : 0;
				}
			}
			shm_fmt(err, cap,
			         "%s %s did not attach to the shared segment within %lld ms (started? same "
			         "node?)",
			         n == 1 ? "rank" : "ranks", list, (long long)c->timeout_ms);
			return ACCEL_ERR_TIMEOUT;
		}
		usleep(sleep_us);
		if (sleep_us < 2000)
			sleep_us *= 2;
	}
	return ACCEL_OK;
}

static uint64_t pid_namespace(void)
{
	struct stat sb;
	return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

static void open_pidfds(shm_comm *c)
{
	uint64_t ns = c->ranks[c->rank].pidns;
	for (int32_t q = 0; q < c->world; q++) {
		c->pids[q] = atomic_load(&c->ranks[q].pid);
		c->pidfds[q] = -1;
		c->pid_visible[q] = 0;
		if (q == c->rank || c->pids[q] <= 0)
			continue;
		/* A pid means something only in our own pid namespace; a peer in
		 * another one is caught by the timeout and the LEFT state alone.
		 * (A peer that already died is visible: kill() says ESRCH.) */
		if (ns && c->ranks[q].pidns == ns)
			c->pid_visible[q] = 1;
		else if (!ns || !c->ranks[q].pidns)
			c->pid_visible[q] = kill(c->pids[q], 0) == 0 || errno == EPERM;
#ifdef SYS_pidfd_open
		if (c->pid_visible[q]) {
			long fd = syscall(SYS_pidfd_open, (pid_t)c->pids[q], 0);
			if (fd >= 0) {
				fcntl((int)fd, F_SETFD, FD_CLOEXEC);
				c->pidfds[q] = (int)fd;
			}
		}
#endif
	}
}

int shm_seg_open(shm_comm *c, const char *job_id)
{
	const accel_host_v1 *host = c->host;
	layout l;
	int fd = -1, st = ACCEL_OK, created = 0;
	char err[600];
	err[0] = '\0';

	compute_layout(c, &l);
	c->map_bytes = (size_t)l.total;
	c->pids = calloc((size_t)c->world, sizeof(*c->pids));
	c->pidfds = calloc((size_t)c->world, sizeof(*c->pidfds));
	c->pid_visible = calloc((size_t)c->world, sizeof(*c->pid_visible));
	if (!c->pids || !c->pidfds || !c->pid_visible)
		return host->error(c->h, ACCEL_ERR_NOMEM, "out of memory");
	for (int32_t q = 0; q < c->world; q++)
		c->pidfds[q] = -1;

	if (c->world == 1) {
		/* Nobody to share with: anonymous memory, no name at all. */
		void *m = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return host->error(c->h, ACCEL_ERR_SYSTEM, "cannot map %zu bytes: %s", c->map_bytes,
			                   strerror(errno));
		c->map = m;
		attach_pointers(c, &l);
		init_header(c, &l);
		atomic_store(&c->ranks[0].pid, (int32_t)getpid());
		c->ranks[0].pidns = pid_namespace();
		atomic_store(&c->ranks[0].cpu, -1);
		atomic_store(&c->ranks[0].state, SHM_RANK_ATTACHED);
		atomic_store(&c->hdr->attached, 1);
		atomic_store(&c->hdr->unlinked, 1);
		atomic_store(&c->hdr->ready, 1);
		c->pids[0] = (int32_t)getpid();
		return ACCEL_OK;
	}

	if (!host->store_add || !host->store_set || !host->store_get)
		return host->error(c->h, ACCEL_ERR_UNSUPPORTED,
		                   "the host offers no rendezvous store; shm needs it to join %d ranks",
		                   (int)c->world);
	int64_t ticket = 0;
	char ikey[200];
	shm_fmt(ikey, sizeof(ikey), ACCEL_STORE_FMT_SHM_INSTANCES, c->ns);
	st = host->store_add(c->h, ikey, 1, &ticket);
	if (st)
		return host->error(c->h, st,
		                   "cannot reach the rendezvous store to join the other ranks (launch "
		                   "with `accel launch`, or set ACCEL_MASTER_ADDR/ACCEL_MASTER_PORT)");
	int64_t inst = (ticket - 1) / c->world;
	c->inst = inst;
	char key[240], tag[48];
	store_key(c, key, sizeof(key), inst);
	job_tag(job_id, tag, sizeof(tag));

	if (c->rank == 0) {
		stale_sweep(c);
		shm_fmt(c->name, sizeof(c->name), "/accel-shm-%d-%s%s-%lld", (int)getpid(), tag,
		         c->gname, (long long)inst);
		fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
		if (fd < 0) {
			st = host->error(c->h, ACCEL_ERR_SYSTEM, "cannot create shared memory %s: %s",
			                 c->name, strerror(errno));
			c->name[0] = '\0';
			goto fail;
		}
		created = 1;
		if (ftruncate(fd, (off_t)l.total) != 0) {
			st = host->error(c->h, ACCEL_ERR_SYSTEM, "cannot size shared memory %s to %llu bytes: %s",
			                 c->name, (unsigned long long)l.total, strerror(errno));
			goto fail;
		}
		int fe = posix_fallocate(fd, 0, (off_t)l.total);
		if (fe != 0 && fe != EOPNOTSUPP && fe != EINVAL) {
			uint64_t slots = l.off_stage - l.off_small, ring = l.total - l.off_stage;
			st = host->error(c->h, fe == ENOSPC ? ACCEL_ERR_NOMEM : ACCEL_ERR_SYSTEM,
			                 "cannot reserve %llu bytes of shared memory for %d ranks in /dev/shm "
			                 "(%llu B of one-shot slots: 2 x shm.small_kb per rank; %llu B of "
			                 "staging: shm.depth x world x shm.chunk_kb per rank): %s (free space with "
			                 "`df /dev/shm`, or lower %s)",
			                 (unsigned long long)l.total, (int)c->world,
			                 (unsigned long long)slots, (unsigned long long)ring, strerror(fe),
			                 slots >= ring ? "shm.small_kb" : "shm.chunk_kb or shm.depth");
			goto fail;
		}
	} else {
		char name[sizeof(c->name)];
		uint64_t len = 0;
		st = host->store_get(c->h, key, name, sizeof(name) - 1, &len, c->timeout_ms);
		if (st)
			goto fail_quiet;   /* the store reported what timed out */
		if (len >= sizeof(name) || len == 0) {
			st = host->error(c->h, ACCEL_ERR_COMM, "store key %s holds no segment name", key);
			goto fail;
		}
		name[len] = '\0';
		shm_fmt(c->name, sizeof(c->name), "%s", name);
		fd = shm_open(c->name, O_RDWR | O_CLOEXEC, 0600);
		if (fd < 0) {
			int e = errno;
			/* gone already: the job's verdict, when a failed rank left one,
			 * says why rank 0 removed it */
			char why[400], note[480] = "";
			uint64_t wl = 0;
			if (e == ENOENT && host->store_get(c->h, ACCEL_STORE_KEY_JOB_FAILED, why, sizeof(why) - 1,
			                                   &wl, 0) == ACCEL_OK) {
				why[wl < sizeof(why) ? wl : sizeof(why) - 1] = '\0';
				shm_fmt(note, sizeof(note), "; the job failed: %s", why);
			}
			st = host->error(c->h, e == ENOENT ? ACCEL_ERR_PEER : ACCEL_ERR_SYSTEM,
			                 "cannot open shared memory %s created by rank 0: %s%s%s", c->name,
			                 strerror(e),
			                 e == ENOENT ? " (rank 0 gave up or died, or it runs on another "
			                               "node: shm serves one node)"
			                             : "",
			                 note);
			c->name[0] = '\0';
			goto fail;
		}
		struct stat sb;
		if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != l.total) {
			st = host->error(c->h, ACCEL_ERR_CONFIG,
			                 "rank 0's shared segment has %lld bytes, this rank expects %llu: the "
			                 "ranks disagree on world size or shm settings (shm.small_kb, "
			                 "shm.chunk_kb, shm.depth)",
			                 (long long)sb.st_size, (unsigned long long)l.total);
			c->name[0] = '\0';
			goto fail;
		}
	}

	c->map = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		st = host->error(c->h, ACCEL_ERR_SYSTEM, "cannot map shared memory %s: %s", c->name,
		                 strerror(errno));
		goto fail;
	}
	close(fd);
	fd = -1;
	attach_pointers(c, &l);

	if (c->rank == 0) {
		init_header(c, &l);
		for (int32_t q = 0; q < c->world; q++)
			atomic_store(&c->ranks[q].cpu, -1);
		c->ranks[0].pidns = pid_namespace();
		atomic_store(&c->ranks[0].pid, (int32_t)getpid());
		atomic_store(&c->ranks[0].state, SHM_RANK_ATTACHED);
		atomic_store(&c->hdr->attached, 1);
		atomic_store_explicit(&c->hdr->ready, 1, memory_order_release);
		st = host->store_set(c->h, key, c->name, strlen(c->name));
		if (st)
			goto fail_quiet;
	} else {
		shm_hdr *h = c->hdr;
		if (!atomic_load_explicit(&h->ready, memory_order_acquire) || h->magic != SHM_MAGIC ||
		    h->version != SHM_LAYOUT_VERSION) {
			shm_fmt(err, sizeof(err), "rank %d: shared segment %s is not an accel shm segment "
			        "of layout %u", (int)c->rank, c->name, SHM_LAYOUT_VERSION);
			st = host->error(c->h, ACCEL_ERR_ABI, "%s", err);
			goto fail;
		}
		if (h->world != c->world || h->small_bytes != c->small_bytes ||
		    h->chunk_bytes != c->chunk_bytes || h->depth != c->depth) {
			shm_fmt(err, sizeof(err),
			        "rank 0 set up shm for world %d (small %llu B, chunk %llu B, depth %u), "
			        "rank %d for world %d (small %llu B, chunk %llu B, depth %u): give "
			        "every rank the same configuration",
			        (int)h->world, (unsigned long long)h->small_bytes,
			        (unsigned long long)h->chunk_bytes, h->depth, (int)c->rank, (int)c->world,
			        (unsigned long long)c->small_bytes, (unsigned long long)c->chunk_bytes,
			        c->depth);
			st = host->error(c->h, ACCEL_ERR_CONFIG, "%s", err);
			goto fail;
		}
		/* Claim the rank's slot atomically: of two processes started with
		 * the same rank, exactly one gets it. */
		int32_t none = SHM_RANK_NONE;
		if (!atomic_compare_exchange_strong(&c->ranks[c->rank].state, &none,
		                                    SHM_RANK_ATTACHED)) {
			shm_fmt(err, sizeof(err),
			        "two processes claim rank %d of the shared segment (pid %d and %d): "
			        "check ACCEL_RANK of each process",
			        (int)c->rank, (int)atomic_load(&c->ranks[c->rank].pid), (int)getpid());
			st = host->error(c->h, ACCEL_ERR_CONFIG, "%s", err);
			goto fail;
		}
		c->ranks[c->rank].pidns = pid_namespace();
		atomic_store_explicit(&c->ranks[c->rank].pid, (int32_t)getpid(), memory_order_release);
		int32_t n = atomic_fetch_add(&h->attached, 1) + 1;
		if (n == c->world && shm_unlink(c->name) == 0)
			atomic_store(&h->unlinked, 1);
	}

	st = wait_all_attached(c, err, sizeof(err));
	if (st) {
		host->error(c->h, st, "bootstrap: %s", err);
		goto fail;
	}
	if (c->rank == 0 && !atomic_load(&c->hdr->unlinked)) {
		/* normally the last attacher did it */
		if (shm_unlink(c->name) == 0 || errno == ENOENT)
			atomic_store(&c->hdr->unlinked, 1);
	}
	open_pidfds(c);
	host->log(c->h, ACCEL_LOG_DEBUG,
	          "%d ranks attached to %s (%llu KiB: %llu B one-shot slots, %u x %llu B "
	          "pipeline chunks); name unlinked",
	          (int)c->world, c->name, (unsigned long long)(l.total >> 10),
	          (unsigned long long)c->small_bytes, c->depth, (unsigned long long)c->chunk_bytes);
	return ACCEL_OK;

fail:
fail_quiet:
	if (fd >= 0)
		close(fd);
	if (c->map && c->hdr) {
		/* Let ranks already attached fail fast instead of timing out. */
		char why[64];
		shm_fmt(why, sizeof(why), "rank %d failed to join the shared segment", (int)c->rank);
		shm_abort(c, st ? st : ACCEL_ERR_COMM, err[0] ? err : why);
	}
	if (created && c->name[0])
		shm_unlink(c->name);
	return st ? st : ACCEL_ERR_COMM;
}

void shm_seg_leave(shm_comm *c)
{
	if (!c->hdr)
		return;
	atomic_store_explicit(&c->ranks[c->rank].state, SHM_RANK_LEFT, memory_order_seq_cst);
	for (int32_t q = 0; q < c->world; q++)
		if (q != c->rank)
			shm_wake_rank(c, q);
}

void shm_seg_close(shm_comm *c)
{
	if (c->map) {
		/* Bootstrap never completed: do not leave the name behind.  Rank 0
		 * created it and removes it; another rank when the bootstrap was
		 * aborted (by itself or another: rank 0 may be stopped by its
		 * launcher before it sees the abort) or rank 0 died.  Not merely
		 * because this rank is leaving: rank 0 and the ranks still to
		 * come are then waiting for the others, and a late rank that finds
		 * the name gone reads the job's verdict from the store. */
		int unlink_it = !atomic_load(&c->hdr->unlinked) && c->name[0] &&
		                (c->rank == 0 || atomic_load(&c->hdr->abort_code) || rank0_gone(c));
		munmap(c->map, c->map_bytes);
		c->map = NULL;
		c->hdr = NULL;
		if (unlink_it)
			shm_unlink(c->name);
	}
	if (c->pidfds)
		for (int32_t q = 0; q < c->world; q++)
			if (c->pidfds[q] >= 0)
				close(c->pidfds[q]);
	free(c->pids);
	free(c->pidfds);
	free(c->pid_visible);
	c->pids = NULL;
	c->pidfds = NULL;
	c->pid_visible = NULL;
}

/* After a failed job: the names its ranks created and nobody removed (the
 * bootstrap never finished).  A name is this job's when its creator pid is
 * one of the job's ranks and it is no older than the job; only our own. */
int shm_seg_cleanup(const accel_host_v1 *host, accel_host *h, const accel_comm_cleanup_v1 *args)
{
	(void)host;
	(void)h;
	if (!args || args->struct_size < offsetof(accel_comm_cleanup_v1, note_arg) + sizeof(void *))
		return ACCEL_OK;
	DIR *d = opendir("/dev/shm");
	if (!d)
		return ACCEL_OK;
	const char *prefix = "accel-shm-";
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		char *end;
		long pid = strtol(e->d_name + strlen(prefix), &end, 10);
		if (pid <= 0 || *end != '-')
			continue;
		int ours = -1;
		for (int32_t i = 0; i < args->n_ranks && ours < 0; i++)
			if (args->pids && args->pids[i] == (int64_t)pid)
				ours = i;
		char path[320];
		struct stat sb;
		shm_fmt(path, sizeof(path), "/dev/shm/%s", e->d_name);
		if (ours < 0 || stat(path, &sb) != 0 || sb.st_uid != geteuid() ||
		    (int64_t)sb.st_ctime < args->started_unix)
			continue;
		if (shm_unlink(path + strlen("/dev/shm")) == 0 && args->note) {
			char msg[480];
			shm_fmt(msg, sizeof(msg),
			        "removed %s, shared memory that rank %d created and the job left behind",
			        path, args->ranks ? (int)args->ranks[ours] : ours);
			args->note(args->note_arg, msg);
		}
	}
	closedir(d);
	return ACCEL_OK;
}
