/* SPDX-License-Identifier: MIT */
/*
 * accel/comm.h: the communication backend ABI, version 1.
 *
 * A comm backend is a shared object that exports exactly one symbol:
 *
 *     ACCEL_EXPORT const accel_comm_v1 *
 *     accel_comm_entry_v1(const accel_host_v1 *host);
 *
 * It is found, loaded and checked like a plugin (see accel/plugin.h for the
 * rules on errors, ownership, struct_size and globals).
 *
 * The host table a backend gets (accel_comm_host_v1, ABI minor 3): the same
 * struct type and layout as a plugin's accel_host_v1, so a backend built
 * against minor 2 finds log/error/cfg_* /store_* at the same offsets, but a
 * separate instance in which only these members are filled:
 *     log, error, world, cfg_bool/int/double/string/strlist,
 *     store_set/get/add,
 *     allgather, broadcast, barrier: blocking only (ret_req must be NULL,
 *       else ACCEL_ERR_INVALID_ARG), on host buffers, for a device backend's
 *       init() (nccl broadcasts its unique id so in a job without a store).
 *       They run on the job's host backend: from a host backend's init()
 *       (no communicator yet) they fail with ACCEL_ERR_STATE, and a host
 *       backend must not call them from its own ops.
 *     stream (ABI minor 4): the context's compute stream; a device backend
 *       orders each collective after the work queued on it before the
 *       call (see docs/streams.md).  Check ACCEL_HOST_HAS(host, stream);
 *       without it, order after the legacy default stream.
 * Every other member (model, param_*, mem_*, op_*, optim_*, allreduce,
 * reduce_scatter, wait, test, reduce_bucket*, sync_step, ckpt_*, the groups
 * of minor 3, and whatever later minors append) is NULL there: those are
 * built on the backend.  ACCEL_HOST_HAS() tells which are present.
 *
 * Semantics every backend implements:
 *  - Ops: allreduce, reduce_scatter, allgather, broadcast, barrier; reductions
 *    ACCEL_RED_SUM/AVG/MAX/MIN over F32, F64, F16, BF16, I32, I64 (AVG on
 *    integers truncates toward zero).  In place when send->data ==
 *    recv->data; reduce_scatter also when recv->data is send's block
 *    `rank` (send + rank x recv count) and allgather when send->data is
 *    recv's block `rank` (NCCL's in-place form, which MPI_IN_PLACE
 *    all-gather shares); the core refuses every other overlap.  After an
 *    in-place reduce_scatter only the result block is defined.  Element
 *    counts may be 0 and need not divide by the world.
 *  - Asynchrony: every op returns at once with a request; requests complete
 *    in issue order; the caller must not touch the buffers until wait() or
 *    a successful test() says done.  Ops are issued in the same order on all
 *    ranks (the core guarantees this); each gets a sequence number 1, 2, ...
 *  - Timeouts and dead peers: an op that cannot finish within
 *    accel_comm_init_v1.timeout_ms, or whose peer process died, fails with
 *    ACCEL_ERR_TIMEOUT or ACCEL_ERR_PEER and a message that names the op,
 *    its sequence number, and the ranks that never arrived.  Never a silent
 *    hang.  After such a failure every later op fails fast.  A transport
 *    that cannot cancel a collective (MPI) may still write into the
 *    buffers of a timed-out op until fini, and after it if the op never
 *    completes (fini then logs a warning): keep them while MPI is in use.
 *  - Threading: ops, wait and test are called from one thread at a time
 *    (the training thread); the backend may use threads or streams inside.
 *  - Sub-communicators (ABI minor 3, optional split slot): a state returned
 *    by split() is a communicator of its own for the same vtable: its
 *    ranks are 0 .. size-1 in the order the split gave, it has its own
 *    sequence numbers, and fini() frees it.  The parent stays usable and
 *    may be freed before or after its groups.  Messages of a group's ops
 *    name ranks by their WORLD rank (split args->ranks), so a user can
 *    find the process.
 */
#ifndef ACCEL_COMM_H
#define ACCEL_COMM_H

#include "accel/plugin.h"
#include "accel/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An outstanding operation, owned by the backend, released by wait(). */
typedef struct accel_comm_req accel_comm_req;

/* Scope bits (accel_comm_desc_v1.scope): where the ranks a backend can
 * connect may live. */
#define ACCEL_COMM_SCOPE_NODE  (1u << 0) /* processes of one node            */
#define ACCEL_COMM_SCOPE_NODES (1u << 1) /* processes on several nodes       */
/* What backend "auto" assumes of a backend that states no scope (built
 * against minor 2, or scope 0): it is not ruled out by the job's shape. */
#define ACCEL_COMM_SCOPE_DEFAULT (ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES)

/* Preference scores of the built-in backends (accel_comm_desc_v1.preference),
 * so a third-party backend can place itself among them.  Higher wins among
 * the backends that can serve a job (docs/comm.md, "backend auto"). */
#define ACCEL_COMM_PREF_FALLBACK 10   /* tcp: works everywhere, slowest      */
#define ACCEL_COMM_PREF_NODE     50   /* shm: one node                       */
#define ACCEL_COMM_PREF_LAUNCHER 100  /* mpi: only where its probe says the
                                         job was started by its launcher;
                                         nccl: device buffers               */

typedef struct accel_comm_desc_v1 {
	uint32_t struct_size;        /* sizeof(accel_comm_desc_v1)                   */
	uint32_t devices;            /* bit (1u << ACCEL_DEVICE_*) per buffer device it
	                                serves                                       */
	const char *name;            /* "shm", "mpi", "nccl": what `backend` selects  */
	const char *version;         /* "MAJOR.MINOR.PATCH"                           */
	const char *summary;         /* one line for `accel plugins list`            */
	uint32_t requires;           /* ACCEL_REQ_* bits (see plugin.h)               */
	uint32_t reserved;
	const char *config_section;  /* JSON object with its keys, NULL if none       */
	const accel_param_schema_v1 *params;
	uint32_t n_params;
	uint32_t reserved2;
	/* ABI minor 3 (a backend of an older minor reads as scope 0 and
	 * preference 0: see ACCEL_COMM_SCOPE_DEFAULT): */
	uint32_t scope;              /* ACCEL_COMM_SCOPE_* bits; 0: not stated        */
	int32_t preference;          /* backend "auto" picks the highest among the
	                                backends whose probe() accepts the job, that
	                                serve the buffers' device and whose scope
	                                covers the job; ties go to the smaller name.
	                                See ACCEL_COMM_PREF_*.                        */
	uint32_t reserved3[4];       /* 0                                             */
} accel_comm_desc_v1;

/* What cleanup() gets (ABI minor 3): the processes of one job on this
 * node, all of which have exited. */
typedef struct accel_comm_cleanup_v1 {
	uint32_t struct_size;      /* sizeof(accel_comm_cleanup_v1) of the core     */
	int32_t n_ranks;           /* ranks the launcher ran on this node           */
	const char *job_id;        /* accel_comm_init_v1.job_id of those ranks      */
	const int32_t *ranks;      /* n_ranks world ranks                           */
	const int64_t *pids;       /* their process ids, by the same index          */
	int64_t started_unix;      /* when the first of them started (seconds since
	                              the epoch): an object older than that is not
	                              this job's                                    */
	/* (may be NULL) Report one thing removed, as one sentence without the
	 * final period ("removed /dev/shm/x, shared memory that rank 0 created
	 * and the job left behind"); the launcher prints it. */
	void (*note)(void *note_arg, const char *text);
	void *note_arg;
} accel_comm_cleanup_v1;

/* A rank given this colour by group_split() joins no group. */
#define ACCEL_COMM_SPLIT_NONE (-1)

/* What split() gets (ABI minor 3).  The core has already agreed on the
 * membership: it all-gathered every parent rank's (color, key) over the
 * parent and ordered each colour's members by (key, parent rank). */
typedef struct accel_comm_split_v1 {
	uint32_t struct_size;      /* sizeof(accel_comm_split_v1) of the core        */
	int32_t color;             /* this rank's colour, or ACCEL_COMM_SPLIT_NONE   */
	int32_t key;               /* this rank's ordering key                       */
	int32_t rank;              /* this rank in the new group; -1 with NONE       */
	int32_t size;              /* members of the new group; 0 with NONE          */
	int32_t reserved;
	const int32_t *ranks;      /* `size` WORLD ranks of the members, by new rank
	                              (borrowed for the call: copy what you keep);
	                              NULL with NONE                                 */
	const int32_t *parent_ranks; /* the same members as ranks of the parent     */
	const char *tag;           /* the same on every member and unique among the
	                              groups of one context: "<parent tag>.<n>c<colour>"
	                              ("1c0", "1c0.2c1"); [0-9c.] only, so it can
	                              name OS objects and store keys               */
	const char *job_id;        /* accel_comm_init_v1.job_id                      */
	int64_t timeout_ms;        /* accel_comm_init_v1.timeout_ms                  */
	int32_t num_nodes;         /* nodes the members span                         */
	int32_t local_size;        /* members on this rank's node                    */
} accel_comm_split_v1;

/* How the job is laid out; given to init(). */
typedef struct accel_comm_init_v1 {
	uint32_t struct_size;
	int32_t rank;
	int32_t world_size;
	int32_t local_rank;
	int32_t local_world_size;
	int32_t node_rank;
	int32_t num_nodes;
	int32_t device_index;      /* CUDA ordinal for device backends, else -1   */
	int64_t timeout_ms;        /* per-collective limit (config comm.timeout_s) */
	const char *job_id;        /* unique per launch (shared by all ranks); use it
	                              to name OS objects such as shm segments       */
	/* ABI minor 2 (read only when struct_size covers it): */
	const char *master_addr;   /* host of the rendezvous store as the core found
	                              it (ACCEL_MASTER_ADDR, else MASTER_ADDR, else
	                              under srun the first node of the step, else
	                              127.0.0.1 on a job known to be on one node);
	                              NULL when it found none (mpirun across nodes
	                              without ACCEL_MASTER_ADDR)                  */
	int64_t keepalive_ms;      /* config comm.keepalive_s: a backend with its own
	                              connections between nodes treats one whose
	                              node answers nothing for this long as dead
	                              (TCP keepalive); 0: off                     */
} accel_comm_init_v1;

/* Nonzero when `args` (an accel_comm_init_v1 *) carries `member`: a core of
 * an older minor passes a shorter struct.  Every member up to job_id is
 * there from minor 0 on. */
#define ACCEL_COMM_INIT_HAS(args, member)                                                 \
	((args)->struct_size >= offsetof(accel_comm_init_v1, member) +                       \
	                            sizeof(((const accel_comm_init_v1 *)0)->member))

typedef struct accel_comm_v1 {
	uint32_t struct_size;      /* sizeof(accel_comm_v1) the backend was built with */
	uint32_t abi_minor;
	const accel_comm_desc_v1 *desc;   /* (required) static */

	/* (required) Connect to the other ranks (may use host->store_*), return
	 * the backend's state.  Collective: all ranks call it. */
	int (*init)(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
	            void **ret_state);
	/* (required) Tear down; free OS resources (segments, streams, comms).
	 * Must also work after a failed op. */
	void (*fini)(void *state);
	/* (optional) Nonzero when this backend can serve the current job (e.g.
	 * mpi: started under an MPI launcher).  Used by backend "auto". */
	int32_t (*probe)(const accel_host_v1 *host, accel_host *h);

	/* (optional) Memory collectives can run on without staging (shared
	 * memory, device memory).  Not collective: every rank allocates the same
	 * sizes in the same order.  NULL: the core uses ordinary memory. */
	int (*mem_alloc)(void *state, int32_t device, int32_t device_index, uint64_t bytes,
	                 void **ret_ptr);
	void (*mem_free)(void *state, void *ptr);

	/* (required) The collectives; see the semantics above and the host
	 * table's documentation of the same calls in plugin.h. */
	int (*allreduce)(void *state, const accel_view *send, const accel_view *recv,
	                 uint32_t op, accel_comm_req **ret_req);
	int (*reduce_scatter)(void *state, const accel_view *send, const accel_view *recv,
	                      uint32_t op, accel_comm_req **ret_req);
	int (*allgather)(void *state, const accel_view *send, const accel_view *recv,
	                 accel_comm_req **ret_req);
	int (*broadcast)(void *state, const accel_view *buf, int32_t root,
	                 accel_comm_req **ret_req);
	int (*barrier)(void *state, accel_comm_req **ret_req);
	/* (required) Block until `req` is done or failed; releases it. */
	int (*wait)(void *state, accel_comm_req *req);
	/* (required) *ret_done = 1 when done (then call wait() to release it). */
	int (*test)(void *state, accel_comm_req *req, int32_t *ret_done);

	/* ---- ABI minor 3 (NULL in older backends: read as absent) ---- */
	/* (optional) Make a sub-communicator.  Collective over the parent
	 * `state`: every rank of the parent calls it once, in the same order as
	 * its other ops on the parent (the core calls it right after a
	 * blocking all-gather of the colours on the parent, so every op issued
	 * on a host backend's parent before it has completed on this rank).
	 * A member (args->color != NONE) returns a
	 * new state for args->ranks, usable with this vtable's collectives,
	 * wait and test (args->rank, args->size as its rank and world) and
	 * freed with fini(); a rank with colour NONE returns ACCEL_OK with
	 * *ret_state NULL.  May use host->store_*: args->tag is unique among
	 * one context's groups, so keys unique in the job come from the
	 * parent communicator's own keys plus the tag (a program may create
	 * a second context that splits the same way).  NULL: groups are
	 * refused with ACCEL_ERR_UNSUPPORTED naming the backend. */
	int (*split)(void *state, const accel_comm_split_v1 *args, void **ret_state);
	/* (optional) Remove what a job of this backend may have left in the
	 * system when its ranks died without fini() (shared-memory names,
	 * files).  Called by the launcher (accel launch, through libaccel) on
	 * each node once every rank it started there has exited, after a job
	 * in which some rank failed; see accel_comm_cleanup_v1.  `h` is a host
	 * handle without a context: only host->log and host->error work.
	 * Returns ACCEL_OK also when there was nothing to remove. */
	int (*cleanup)(const accel_host_v1 *host, accel_host *h,
	               const accel_comm_cleanup_v1 *args);

	/* ---- ABI minor 4: device streams (NULL in older backends) ---- */
	/* (optional; a backend for device buffers) wait() without blocking the
	 * host: make `stream` (a cudaStream_t of the backend's device as
	 * void *; NULL: the legacy default stream) wait on the device until
	 * `req` has completed, then release req as wait() does, whatever
	 * happened.  Returns an error the backend already knows of (a failed
	 * or timed-out communicator); a failure of req after the call is
	 * reported by a later call on the communicator, and the backend must
	 * still end a collective that cannot finish by its deadline (abort
	 * it), so the waiting stream and whoever synchronises with it never
	 * hang without a message.  NULL: the core waits on the host instead. */
	int (*wait_stream)(void *state, accel_comm_req *req, void *stream);
} accel_comm_v1;

/* The host table of comm backends: see the top of this file for which
 * members are filled. */
typedef accel_host_v1 accel_comm_host_v1;

/* Nonzero when the comm vtable / descriptor `p` of a backend carries
 * `member` (the core pads older ones with zeros before it reads them; this
 * is for readers of a raw table). */
#define ACCEL_COMM_HAS(p, type, member)                                                   \
	((p)->struct_size >= offsetof(type, member) + sizeof(((const type *)0)->member))

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host);

#define ACCEL_COMM_ENTRY_V1 "accel_comm_entry_v1"

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_COMM_H */
