/* SPDX-License-Identifier: MIT */
/* backends/shm/shm-impl.h: internals of the shared-memory comm backend.
 *
 * One control segment per communicator, mapped by every rank:
 *
 *   page 0        shm_hdr: layout, attach count, sleeper count, abort record
 *   ranks         world x shm_rank (256 B): what each rank posts (sequence
 *                 number, op descriptor, phase counter) and who it is (pid,
 *                 state).  Written only by its owner.
 *   wake          world x 64 B: the futex word each rank sleeps on; bumped
 *                 by whoever advances a counter while someone sleeps.
 *   small slots   world x 2 x small_bytes: one-shot collectives (double
 *                 buffered by the parity of the sequence number).
 *   stage         world x depth x world x chunk_bytes: the ring of
 *                 staging buffers of the pipelined algorithms.
 *
 * docs/comm.md describes the protocol. */
#ifndef ACCEL_SHM_IMPL_H
#define ACCEL_SHM_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/comm.h"
#include "backends/common/coll-reduce.h"
#include "backends/common/mono.h"

#define SHM_MAGIC 0x316d6873636361ull   /* "accshm1" */
#define SHM_LAYOUT_VERSION 2u
#define SHM_PAGE 4096u
#define SHM_LINE 64u
#define SHM_MSG_MAX 512

/* Collective kinds, as posted in the segment. */
#define SHM_OP_ALLREDUCE 1u
#define SHM_OP_REDUCE_SCATTER 2u
#define SHM_OP_ALLGATHER 3u
#define SHM_OP_BROADCAST 4u
#define SHM_OP_BARRIER 5u
#define SHM_OP_KIND_MASK 0xffu
/* Flag or-ed into the posted kind: this rank's send and recv overlap in a
 * way that forbids reading them from another rank while it writes. */
#define SHM_OPF_ALIAS (1u << 16)

/* shm_rank.state */
#define SHM_RANK_NONE 0
#define SHM_RANK_ATTACHED 1
#define SHM_RANK_LEFT 2       /* called fini (freed its context) */

typedef struct shm_hdr {
	uint64_t magic;
	uint32_t version;
	int32_t world;
	uint64_t total_bytes;
	uint64_t small_bytes;
	uint64_t chunk_bytes;
	uint32_t depth;
	uint32_t reserved;
	_Atomic int32_t ready;        /* rank 0 finished initializing the header */
	_Atomic int32_t attached;     /* ranks that mapped the segment */
	_Atomic int32_t unlinked;     /* the name is gone from the file system */
	int32_t creator_pid;
	_Alignas(64) _Atomic uint32_t nsleepers;   /* waiters blocked on their futex */
	_Alignas(64) _Atomic int32_t abort_claim;  /* CAS 0 -> 1 by the first to fail */
	_Atomic int32_t abort_code;   /* set (release) once abort_msg is written */
	int32_t abort_rank;
	char abort_msg[SHM_MSG_MAX];
} shm_hdr;

/* What a rank posts for the op it is running.  Peers read the descriptor
 * under a sequence lock: dver is odd while the owner rewrites it, and dseq
 * says which op it describes (the owner writes the descriptor of op s+1
 * before it publishes seq = s+1). */
typedef struct shm_rank {
	_Alignas(64) _Atomic uint64_t seq;   /* last op posted (1, 2, ...) */
	_Atomic uint64_t sig;                /* phase counter inside ops   */
	_Atomic uint32_t dver;               /* descriptor version (seqlock) */
	_Atomic uint32_t code;               /* kind | alias flag << 8 | dtype << 16 | redop << 24 */
	_Atomic int32_t root;
	_Atomic int32_t send_alloc;          /* backend allocation index or -1 */
	_Atomic uint64_t count;
	_Atomic int32_t recv_alloc;
	_Atomic uint32_t dseq;               /* low 32 bits of the seq described */
	_Atomic uint64_t send_off, recv_off; /* byte offset inside that copy */
	_Alignas(64) _Atomic int32_t pid;
	_Atomic int32_t state;                /* SHM_RANK_* */
	_Atomic uint32_t sleeping;            /* its waiter is in FUTEX_WAIT */
	_Atomic int32_t cpu;                  /* CPU it last waited on (-1: unknown) */
	uint64_t pidns;                       /* inode of its pid namespace (0: unknown) */
	_Atomic int32_t alloc_failed;         /* 1 + index of a mem_alloc it created and
	                                         could not complete (0: none) */
	char pad[256 - 64 - 28];
} shm_rank;
_Static_assert(sizeof(shm_rank) == 256, "shm_rank layout");

typedef struct shm_wake {
	_Alignas(64) _Atomic uint32_t word;
	char pad[60];
} shm_wake;

/* One backend-allocated buffer: a segment holding every rank's copy. */
typedef struct shm_alloc {
	struct shm_alloc *next;
	int32_t index;
	uint64_t bytes;           /* what the caller asked for */
	uint64_t stride;          /* distance between ranks' copies */
	void *map;                /* whole segment (header page + copies) */
	size_t map_bytes;
	char *base;               /* copy 0 (map + SHM_PAGE) */
	int unlinked;
	char name[128];
} shm_alloc;

/* A collective as issued. */
typedef struct shm_op {
	uint32_t kind;
	uint32_t dtype;
	uint32_t redop;
	int32_t root;
	uint64_t count;           /* see shm_op_count() */
	accel_view send, recv;
	uint64_t seq;
	int posted;               /* the arrival was posted already (inline start) */
	uint64_t issued_ns;       /* when the caller issued it                    */
	uint64_t deadline_ns;     /* 0: timeout counted from when it starts to run */
} shm_op;

struct accel_comm_req {
	shm_op op;
	_Atomic int state;        /* REQ_* */
	int status;
	char msg[SHM_MSG_MAX];
	struct accel_comm_req *next;      /* queue link */
	struct accel_comm_req *all_next;  /* list of live requests */
	struct accel_comm_req *all_prev;
};

#define REQ_QUEUED 0
#define REQ_DONE 1
#define REQ_FAILED 2

#include "backends/common/coll-reqs.h"  /* needs struct accel_comm_req */

typedef struct shm_comm {
	const accel_host_v1 *host;
	accel_host *h;
	int32_t rank, world;
	int64_t timeout_ms;
	/* groups (split): the members' world ranks by rank here, for messages
	 * (NULL: the world itself); the store namespace of the bootstrap
	 * ("accel/shm", or "<parent's ns>/<parent's inst>/g<tag>") and what the segment's name
	 * carries for the group ("" or "-g<tag>") */
	int32_t *wranks;
	char ns[160];
	char gname[104];
	int64_t inst;               /* this communicator's number under ns */

	/* tunables (config section "shm") */
	int64_t spin_ns;            /* busy-poll, then */
	int64_t yield_ns;           /* poll with sched_yield, then sleep on the futex */
	uint64_t small_bytes;       /* one-shot limit = slot size */
	uint64_t chunk_bytes;       /* pipeline slice per rank and round */
	uint32_t depth;             /* staging buffers in the ring */
	uint64_t stall_ns;          /* a peer whose phase counter stood still this long
	                               inside an op is not running (shm_wait()) */
	uint64_t stream_bytes;      /* results from this size on are written into user
	                               buffers with streaming stores (0: never) */
	int oversubscribed;         /* more local ranks than CPUs */
	int ncpus;                  /* CPUs this process may run on */
	int loadavg_fd;             /* /proc/loadavg (-1: unavailable), see shm_cpus_busy() */
	uint64_t busy_read_ns;      /* when shm_cpus_busy() last read it (0: never) */
	int busy;                   /* what it found then */
	uint64_t n_busy;            /* large ops run without polling (CPUs busy) */
	uint64_t last_move_ns;      /* see move_away() in shm_wait.c */
	uint64_t lazy_probe_ns;     /* last liveness probe from test() (lazy_finish) */
	uint64_t n_moves;

	/* the control segment */
	char name[128];             /* "" when anonymous (world 1) */
	void *map;
	size_t map_bytes;
	shm_hdr *hdr;
	shm_rank *ranks;
	shm_wake *wake;
	char *small;                /* world x 2 x small_bytes */
	char *stage;                /* world x depth x world x chunk_bytes */
	uint64_t stage_rank_bytes;  /* depth x world x chunk_bytes */

	/* liveness of peers */
	int32_t *pids;
	int *pidfds;                /* -1 where unavailable */
	int *pid_visible;           /* kill(pid, 0) worked at init */

	/* execution state (touched by whoever runs ops: inline caller or thread) */
	const void **in_ptrs;       /* world entries, scratch for coll_reduce */
	void **out_ptrs;            /* world entries */
	uint64_t *zc_soff, *zc_roff; /* world entries: peers' offsets (zero-copy) */
	uint64_t phase;             /* last phase posted in sig */
	uint64_t round;             /* pipeline rounds run (selects the stage buffer) */
	uint64_t *reuse;            /* depth entries: phase after which a buffer is free */

	/* issue side (training thread) */
	uint64_t next_seq;

	/* sticky failure: the first to fail claims, writes fail_msg, then sets
	 * failed (release) */
	_Atomic int fail_claim;
	_Atomic int failed;
	char fail_msg[SHM_MSG_MAX];

	/* backend-allocated buffers */
	shm_alloc *allocs;
	int32_t n_allocs;
	/* Names of allocations freed here before every rank mapped them: kept
	 * for the late ranks, removed by fini (shm_mem_close_all). */
	char (*stale)[128];
	size_t n_stale, cap_stale;

	/* the comm thread */
	pthread_t thread;
	int thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cv_work;
	pthread_cond_t cv_done;
	coll_reqs q;                      /* issued, not yet run (FIFO) */
	_Atomic int queued;         /* in the queue or running from it, not finished */
	int exec_busy;              /* an op from the queue is running (thread or a
	                               waiting caller that took it); under mu */
	struct accel_comm_req *lazy; /* posted inline, finished by wait/test/next op */
	/* how ops ran, for the debug log at fini */
	uint64_t n_inline, n_lazy, n_lazy_queued, n_by_caller, n_by_thread;
	int stop;
	_Atomic int closing;        /* fini: abandon waits */
	struct accel_comm_req *live;      /* every request not yet released */
	struct accel_comm_req *free_reqs; /* cache */
	int n_free_reqs;
} shm_comm;

/* The world rank of rank q of this communicator (messages name those). */
static inline int shm_wr(const shm_comm *c, int32_t q)
{
	return c->wranks && q >= 0 && q < c->world ? (int)c->wranks[q] : (int)q;
}

/* ---- shm_seg.c: control segment ---- */
int shm_seg_open(shm_comm *c, const char *job_id);
/* The launcher's clean-up after a failed job (comm.h, cleanup slot). */
int shm_seg_cleanup(const accel_host_v1 *host, accel_host *h, const accel_comm_cleanup_v1 *args);
void shm_seg_close(shm_comm *c);
/* Mark this rank as gone and wake everyone (fini). */
void shm_seg_leave(shm_comm *c);

/* ---- shm.c ---- */
/* Finish everything issued so far (blocking); for mem_free. */
void shm_drain(shm_comm *c);

/* ---- shm_mem.c: backend-allocated buffers ---- */
int shm_mem_alloc(void *state, int32_t device, int32_t device_index, uint64_t bytes,
                  void **ret_ptr);
void shm_mem_free(void *state, void *ptr);
void shm_mem_close_all(shm_comm *c);
/* The allocation holding [p, p + bytes) of this rank's copy, or NULL. */
const shm_alloc *shm_mem_find(const shm_comm *c, const void *p, uint64_t bytes,
                              uint64_t *ret_off);
const shm_alloc *shm_mem_by_index(const shm_comm *c, int32_t index);

/* ---- shm_wait.c: waiting, liveness, failures ---- */
/* snprintf for messages: truncation is accepted (and not warned about). */
int shm_fmt(char *buf, size_t cap, const char *fmt, ...) ACCEL_PRINTF(3, 4);
/* The monotonic clock (backends/common/mono.h) in unsigned nanoseconds. */
static inline uint64_t shm_now_ns(void)
{
	return (uint64_t)mono_ns();
}
/* Publish a new value of this rank's seq or sig and wake sleepers. */
void shm_post_seq(shm_comm *c, uint64_t seq);
void shm_post_sig(shm_comm *c, uint64_t sig);
/* Bump rank q's futex word and wake its waiter. */
void shm_wake_rank(shm_comm *c, int32_t q);
/* Wait until every rank (which < 0) or rank `which` has seq >= target
 * (use_sig 0) or sig >= target (use_sig 1).  On failure fills msg and
 * returns the status.  `deadline_ns` bounds the wait; `spin_ns` the busy
 * phase.  Never blocks forever. */
int shm_wait(shm_comm *c, const shm_op *op, int use_sig, uint64_t target, int32_t which,
             uint64_t deadline_ns, int64_t spin_ns, char *msg, size_t cap);
/* Record a failure in the segment so every rank fails fast. */
void shm_abort(shm_comm *c, int code, const char *msg);
/* Check the abort record; nonzero status (with msg) when set. */
int shm_check_abort(shm_comm *c, const shm_op *op, char *msg, size_t cap);
void shm_op_describe(const shm_comm *c, const shm_op *op, char *buf, size_t cap);
/* Is rank q's process gone? Fills why. */
int shm_peer_dead(shm_comm *c, int32_t q, char *why, size_t cap);

/* ---- shm_coll.c: the algorithms ---- */
/* Is this op run by the one-shot (small) algorithm? */
int shm_coll_is_small(const shm_comm *c, const shm_op *op);
/* Post the arrival (and, for small ops, the data). */
void shm_coll_post(shm_comm *c, shm_op *op);
/* Test (no waiting) whether every rank has posted op->seq. */
int shm_coll_arrived(shm_comm *c, const shm_op *op);
/* Run the op to completion (posting first if not posted); on_thread: run
 * by the comm thread (shorter spinning). */
int shm_coll_run(shm_comm *c, shm_op *op, int on_thread, char *msg, size_t cap);
#define SHM_THREAD_SPIN_NS 20000
/* More threads of this machine are runnable than this process has CPUs
 * (/proc/loadavg, read at most every SHM_BUSY_READ_NS); 0 when that
 * cannot be read.  Called by whoever runs ops (one at a time). */
#define SHM_BUSY_READ_NS 10000000ull
/* Ops from this payload (per rank: all-gather's send block) on do not
 * poll while the CPUs are busy: ops that outlast a scheduler time slice.
 * Shorter ones mostly run with both ranks on a CPU, and wake-ups cost
 * them more than polling: at 1-16 MiB, with a load of 7 on the 2 vCPUs,
 * not polling made every op 1.5-3x slower (the 16 MiB all-reduce 7.8
 * against 3.6 ms). */
#define SHM_BUSY_MIN_BYTES (32u << 20)
int shm_cpus_busy(shm_comm *c);

#endif
