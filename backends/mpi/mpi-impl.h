/* SPDX-License-Identifier: MIT */
/* backends/mpi/mpi-impl.h: pieces of the mpi comm backend shared between its
 * files (private to the module; hidden visibility). */
#ifndef ACCEL_MPI_IMPL_H
#define ACCEL_MPI_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "accel/comm.h"
#include "accel/types.h"

/* NaN-propagating MAX/MIN for f32 and f64 (f16/bf16 reduce as f32).
 * Created once per backend instance (MPI_Op_create) and freed in fini. */
typedef struct mpi_ops {
	MPI_Op op[2][2];   /* [f32, f64][MAX, MIN] */
	int created;
} mpi_ops;

/* The MPI datatype that carries one element of `dtype` (16-bit floats travel
 * as MPI_UINT16_T, fp8 and u8 as MPI_UINT8_T).  MPI_DATATYPE_NULL if unknown. */
MPI_Datatype accel_mpi_datatype(uint32_t dtype);

/* Create / free the operators.  Returns an MPI error code. */
int accel_mpi_ops_create(mpi_ops *ops);
void accel_mpi_ops_free(mpi_ops *ops);

/* The MPI_Op for reduction `red` on `dtype`; for f16/bf16 the op on their
 * f32 staging.  AVG is SUM; the division comes afterwards
 * (accel_mpi_avg_finish, or accel_mpi_narrow for the halves). */
MPI_Op accel_mpi_op(const mpi_ops *ops, uint32_t dtype, uint32_t red);

/* f16 or bf16: reduced through f32 staging. */
int accel_mpi_is_half(uint32_t dtype);
/* n f16/bf16 elements at src to f32 at dst. */
void accel_mpi_widen(const void *src, uint32_t dtype, float *dst, uint64_t n);
/* n f32 sums at src, divided by `world` when world > 1 (AVG; pass 1 for
 * the others), rounded once to f16/bf16 at dst. */
void accel_mpi_narrow(const float *src, uint32_t dtype, void *dst, uint64_t n, int world);

/* Divide `numel` elements of `dtype` (f32, f64, i32, i64) at `data` by
 * `world` in place: floats in their own precision, integers with C division
 * (truncation toward zero). */
void accel_mpi_avg_finish(void *data, uint32_t dtype, uint64_t numel, int world);

/* ---- the backend's state (mpi_comm.c, mpi_progress.c, mpi_init.c) ---------- */

#define MSG_MAX 768
/* f32 elements of the staging buffer for f16/bf16 reductions (16 MiB) */
#define HALF_STAGE_ELEMS (UINT64_C(1) << 22)

#define REQ_QUEUED  0
#define REQ_RUNNING 1
#define REQ_DONE    2
#define REQ_FAILED  3

/* How long (ms) fini() gives timed-out requests to complete after all:
 * a late peer then still finishes, and MPI can be cleaned up. */
#define DRAIN_MAX_MS 10000
/* How long wait() watches a request before it sleeps on the condition. */
#define WAIT_SPIN_NS 50000

struct accel_comm_req {
	accel_comm_req *next;     /* live requests, in issue order           */
	int kind;                 /* OP_*                                     */
	int state;                /* REQ_*; under st->lock in thread mode     */
	uint64_t seq;
	uint32_t dtype, red;
	size_t esz;
	const char *sendp;        /* NULL: in place                          */
	char *recvp;
	char *result_at;          /* reduce_scatter in place at block `rank`:
	                             where the result goes after MPI leaves it
	                             at recvp; NULL otherwise                */
	int own_in_slot;          /* allgather in place: own block already at
	                             slot `rank` (MPI_IN_PLACE's form)       */
	int half;                 /* an f16/bf16 reduction: through st->stage */
	int timed_out;            /* failed by its own deadline (not fail-fast) */
	uint64_t count;           /* allreduce/broadcast: all elements;
	                             reduce_scatter: elements per rank result;
	                             allgather: elements each rank sends     */
	int32_t root;
	MPI_Datatype type;
	MPI_Op op;
	uint64_t off, cur;        /* elements issued before / in this call    */
	int issued;               /* an MPI request is active in mreq         */
	MPI_Request mreq;
	int64_t deadline_ns;      /* 0: not timed yet                         */
	int status;               /* ACCEL_OK or the failure                 */
	char msg[MSG_MAX];
};

#include "backends/common/coll-reqs.h"  /* needs struct accel_comm_req */

typedef struct abandoned {
	MPI_Request mreq;
	uint64_t seq;
	int kind;
} abandoned;

typedef struct mpi_state {
	const accel_host_v1 *host;
	accel_host *h;
	MPI_Comm comm;
	int rank, world;
	int32_t *wranks;          /* a group's members by world rank; NULL: the world */
	char who[96];             /* "rank 1 of 4" / "world rank 3 (1 of 2 in group 1c1)" */
	int64_t timeout_ms;       /* <= 0: no limit */
	uint64_t chunk;           /* max elements per MPI call (allreduce, broadcast) */
	int thread_level;
	mpi_ops ops;
	char ns[128];             /* store namespace for naming missing ranks */
	uint64_t timeout_seq;     /* the first request that timed out (set by
	                             the driver in req_finished, under lock) */
	int named;                /* the store was asked (training thread) */
	char missing[256];        /* what it said, "" when it could not tell */
	float *stage;             /* f16/bf16 reductions: f32 staging, used by
	                             the thread that drives the queue */
	uint64_t stage_cap;       /* elements */

	int use_thread;
	int thread_started;
	int sync_inited;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work;      /* the worker waits for requests       */
	pthread_cond_t done;      /* wait() waits for a request to finish */
	int stop;
	int sleeping;             /* the worker waits on `work` */

	coll_reqs live;               /* issued, not yet released */
	accel_comm_req *cursor;       /* first request not finished           */
	uint64_t seq;

	int failed;               /* first failure: every later op fails fast */
	int fail_code;
	char fail_msg[MSG_MAX];

	abandoned *lost;          /* timed-out MPI requests, drained in fini */
	uint32_t n_lost, cap_lost;
	int lost_untracked;       /* one could not be recorded (no memory) */

	int abandon;              /* the process is exiting: the worker stops
	                             calling MPI at once (atomic) */
	struct mpi_state *next_live;  /* live instances (g_live, under
	                                 g_mpi_lock) */
} mpi_state;

/* ---- mpi_progress.c: the queue of requests ------------------------------------ */

/* MPI's message for error code rc into buf. */
void accel_mpi_errstr(int rc, char *buf, size_t cap);
/* "allreduce #3 (f32, 1024 elements)": r for messages. */
void accel_mpi_req_describe(const accel_comm_req *r, char *buf, size_t cap);
/* One more turn of a polling loop: spins first, then yields the CPU. */
void accel_mpi_backoff(uint32_t *spins);
/* The progress thread (st->use_thread): runs the queue in issue order until
 * st->stop and the queue is empty, or st->abandon. */
void *accel_mpi_progress_main(void *arg);
/* Caller mode: drive the queue on this thread.  With `until` set, block
 * (timed) until that request finished; otherwise make what progress is
 * possible without waiting. */
void accel_mpi_progress(mpi_state *st, accel_comm_req *until);

/* ---- mpi_comm.c: issuing and completion ---------------------------------------- */

/* Record and return the error of `op` issued after an earlier collective
 * failed (with what the store said about a timeout, once asked). */
int accel_mpi_fail_fast_now(mpi_state *st, const char *op);

/* ---- mpi_init.c: the life cycle (accel_comm_v1 init, split, fini) -------------- */

int accel_mpi_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                   void **ret_state);
int accel_mpi_split(void *state, const accel_comm_split_v1 *args, void **ret_state);
void accel_mpi_fini(void *state);

#endif
