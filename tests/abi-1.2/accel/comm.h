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
 * rules on errors, ownership, struct_size and globals) and uses the same host
 * table: logging, errors, configuration of its own config_section, and the
 * rendezvous store for bootstrap (shared-memory segment names, NCCL ids).
 * Of the host table a backend must not call the collectives, reduce_bucket,
 * optim_*, model, param_* or ckpt_* members: they are built on the backend.
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
} accel_comm_desc_v1;

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
} accel_comm_v1;

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host);

#define ACCEL_COMM_ENTRY_V1 "accel_comm_entry_v1"

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_COMM_H */
