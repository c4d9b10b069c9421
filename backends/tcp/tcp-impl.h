/* SPDX-License-Identifier: MIT */
/* backends/tcp/tcp-impl.h: pieces of the tcp comm backend shared between its
 * files (private to the module; hidden visibility). */
#ifndef ACCEL_TCP_IMPL_H
#define ACCEL_TCP_IMPL_H

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/comm.h"
#include "backends/common/store-keys.h"

#define TCP_MSG_MAX 1024
/* how long an exchange polls without sleeping first */
#define TCP_SPIN_NS 50000

/* "ACTC": the first word of every hello and op header */
#define TCP_MAGIC 0x43544341u
#define TCP_PROTO 2u
/* The kind of the farewell header fini sends. */
#define OP_BYE 0x42594531

/* The header of an op, and the farewell of fini (kind OP_BYE). */
typedef struct op_hdr {
	uint32_t magic, kind;
	uint64_t seq, count;
	uint32_t dtype, arg;      /* reduction, or broadcast root */
} op_hdr;

/* One connection per pair of ranks (a full mesh). */
typedef struct tcp_peer {
	int fd;                   /* -1 for this rank itself */
	char where[128];          /* "pid 1234 on node7, 10.0.0.2:41234": for messages */
} tcp_peer;

#define REQ_QUEUED  0
#define REQ_RUNNING 1
#define REQ_DONE    2
#define REQ_FAILED  3

struct accel_comm_req {
	accel_comm_req *next;     /* live requests, in issue order */
	int kind;                 /* OP_* */
	int state;                /* REQ_*, under st->lock */
	uint64_t seq;
	uint32_t dtype, red;
	size_t esz;
	const char *src;          /* the input (allreduce, reduce_scatter,
	                             allgather: this rank's block) */
	char *dst;                /* the output; broadcast: the buffer */
	uint64_t count;           /* allreduce/broadcast: all elements;
	                             reduce_scatter: elements of each result;
	                             allgather: elements each rank sends */
	int32_t root;
	op_hdr hdr;               /* what this rank sends at the op's start */
	const char *group;        /* " on group <tag>" for messages, "" for the world
	                             (the state's, which outlives the request) */
	int status;
	char msg[TCP_MSG_MAX];
};

#include "backends/common/coll-reqs.h"  /* needs struct accel_comm_req */

typedef struct xfer xfer;

/* One transfer of an exchange.  The transfers of one peer and direction
 * run in array order. */
struct xfer {
	int32_t peer;
	int send;
	char *p;
	uint64_t len, done;
};

typedef struct tcp_state {
	const accel_host_v1 *host;
	accel_host *h;
	int32_t rank, world;
	int64_t timeout_ms;       /* <= 0: no limit */
	uint64_t chunk_bytes;     /* bytes per peer and pipeline round */
	int64_t spin_ns;          /* polling without sleeping at the start of an
	                             exchange (0 with more local ranks than CPUs) */
	int64_t comm_no;          /* this communicator's number in the job */
	char ns[128];             /* its store keys: "tcp/<comm_no>", or a group's
	                             "<parent's>/g<tag>" */
	int32_t *wranks;          /* a group's members by world rank; NULL: the world */
	char self[96];            /* "rank 1 of 4" / "world rank 3 (1 of 2 in group 1c1)" */
	char group[104];          /* " on group 1c1", or "" */
	char master_addr[256];    /* from init, for a group's bootstrap ("": none) */
	int32_t num_nodes;        /* from init (-1: unknown) */
	tcp_peer *peers;          /* world entries */
	int listen_fd;

	char *stage;              /* (world - 1) x chunk: the peers' slices */
	const void **in_ptrs;     /* world entries, for coll_reduce */
	op_hdr *hdrs;             /* world entries: the peers' headers of an op */
	uint64_t small_bytes;     /* all-reduces up to this go in one exchange */
	int64_t keepalive_ms;     /* comm.keepalive_s: a silent peer node is dead
	                             after this (keepalive, TCP_USER_TIMEOUT); 0: off */
	char *small_buf;          /* header + payload of such an all-reduce */
	/* scratch of the one op that runs at a time (the comm thread's, or a
	 * caller's in wait(): run_cursor hands the cursor to one of them) */
	xfer *xs;                 /* 4 x world transfers */
	int *cur;                 /* 2 x world: each peer's current send, receive */
	struct pollfd *pf;        /* world entries */
	int32_t *who;             /* world entries: the peer of each pf entry */
	int64_t *unacked_since;   /* world entries: since when tcp_exchange() has seen
	                             data in flight to the peer (0: not seen) */

	pthread_t thread;
	int thread_started;
	int sync_inited;          /* lock and conditions initialized */
	pthread_mutex_t lock;
	pthread_cond_t work;      /* the comm thread waits for requests */
	pthread_cond_t done;      /* wait() waits for a request to finish */
	int stop;                 /* fini: the thread ends (atomic) */

	coll_reqs live;               /* issued, not released */
	accel_comm_req *cursor;       /* first request not finished */
	uint64_t seq;

	int init_failed;          /* init failed after (part of) the mesh was up */
	int failed;               /* first failure: every later op fails fast */
	int fail_code;
	char fail_msg[TCP_MSG_MAX];
} tcp_state;

/* The world rank of rank q of this communicator (messages name those). */
static inline int tcp_wr(const tcp_state *st, int32_t q)
{
	return st->wranks && q >= 0 && q < st->world ? (int)st->wranks[q] : (int)q;
}

/* tcp_boot.c: the listening socket, the address published in the store and
 * the full mesh.  Records errors through the host; returns the status. */
int tcp_boot(tcp_state *st, const accel_comm_init_v1 *args, const char *addr);
/* A store probe (no wait, no error recorded): key's value into buf, NUL
 * terminated and cut to cap.  ACCEL_OK, ACCEL_ERR_NOT_FOUND, or the
 * store's status (ACCEL_ERR_UNSUPPORTED without a store). */
int tcp_store_probe(const tcp_state *st, const char *key, char *buf, size_t cap);
/* tcp_store_probe() of rank's note (tcp_note_gone). */
int tcp_gone_probe(const tcp_state *st, int32_t rank, char *buf, size_t cap);
/* Record under tcp/<n>/gone/<rank> why this rank closes its connections
 * out of step with the others (peers report it instead of a crash). */
void tcp_note_gone(tcp_state *st, const char *note);

/* tcp_exchange.c: the exchange loop and the messages of the ops that fail
 * there. */
/* "allreduce #3 (f32, 1024 elements, sum)": what header m asks for. */
void tcp_hdr_describe(const op_hdr *m, char *buf, size_t cap);
/* The header r opens with (what the peers compare) into m. */
void tcp_req_hdr(const accel_comm_req *r, op_hdr *m);
/* tcp_hdr_describe() of r's header. */
void tcp_req_describe(const accel_comm_req *r, char *buf, size_t cap);
/* Fail r with `code`: r->msg is r's description, its group and the text of
 * fmt.  Returns code. */
int tcp_req_fail(accel_comm_req *r, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
/* Move every transfer of x[0..n) for r (recv_only: every receive; sends may
 * be left unfinished, for a later call with the same x), or fail r: a
 * peer's connection closed or its node went silent (ACCEL_ERR_PEER), the
 * deadline (0: none) passed (ACCEL_ERR_TIMEOUT; `arriving`: the peers still
 * owing data are named as never having arrived at the op, else as stalled
 * in it), or fini asked the thread to stop (ACCEL_ERR_STATE).  Uses st's
 * scratch (cur, pf, who, unacked_since): one exchange at a time. */
int tcp_exchange(tcp_state *st, accel_comm_req *r, xfer *x, int n, int64_t deadline,
                 int arriving, int recv_only);

/* tcp_ops.c: the ops' algorithms. */
/* Run r to its end on this thread (the comm thread, or a caller in wait()
 * that took the cursor): its header exchange, then its algorithm, within
 * comm.timeout_s.  Returns the status; on failure r->msg says why. */
int tcp_ops_run(tcp_state *st, accel_comm_req *r);

#endif
