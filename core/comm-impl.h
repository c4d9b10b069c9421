/* SPDX-License-Identifier: MIT */
/* core/comm-impl.h: the communicator's insides, shared by the files of the
 * core comm layer (private):
 *   comm.c       the communicator's life cycle, its backends (bring-up,
 *                routing a buffer to one), backend memory, accel_comm_stats
 *   comm_check.c the checks of a collective's arguments and their messages
 *   comm_coll.c  issuing collectives, their requests, wait/test, the trace
 *                and the report of a timeout or lost peer to the store
 *   comm_group.c groups (sub-communicators): split, info, free
 * comm.h is what the rest of the core sees. */
#ifndef ACCEL_CORE_COMM_IMPL_H
#define ACCEL_CORE_COMM_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "comm_stage.h"

#define GROUP_TAG_MAX 96

typedef struct comm_backend {
	const accel_module *module;
	const accel_comm_v1 *vt;
	void *state;            /* the world's */
	struct accel_host host;
	int up;
	int failed;             /* init failed: not retried (see accelp_comm_route()) */
	int starting;           /* inside init(): a device call from it is refused */
	int fail_code;
	char fail_msg[ACCEL_ERRMSG_MAX];
} comm_backend;

struct accel_group {
	accel_comm *comm;
	char tag[GROUP_TAG_MAX];    /* "" for the world; see accel_comm_split_v1.tag */
	char what[200];             /* "group 1c0 (world ranks 1, 3)"; "" for the world */
	int32_t rank, size;
	int32_t *wranks;            /* size world ranks; NULL for the world (identity) */
	int32_t *nodes;             /* size node ranks; NULL for the world */
	void *cpu_state;            /* this group's state of comm->cpu */
	void *dev_state;            /* of comm->dev; NULL when it was not up at the split */
	uint64_t seq;               /* collectives issued on the group */
	uint32_t n_splits;          /* splits of this group so far (names children) */
	struct accel_group *next;   /* accel_comm.groups */
};

struct accel_req {
	comm_backend *be;
	void *state;            /* the backend state it was issued on */
	accel_group *g;
	accel_comm_req *breq;   /* NULL: already complete */
	const char *op;
	uint64_t seq;
	int64_t t_issue_ns;     /* CLOCK_MONOTONIC when the backend took it */
	struct accel_req *prev, *next;   /* in accel_comm.live */
	comm_staged stage;      /* a device buffer staged through host memory */
};

typedef struct comm_alloc {
	void *ptr;
	comm_backend *be;
} comm_alloc;

struct accel_comm {
	accel_ctx *ctx;
	comm_backend cpu;
	comm_backend dev;
	const char *dev_name;   /* device backend to bring up on first use, or NULL */
	/* A host backend named in the config and no device backend: CUDA
	 * buffers are staged through pinned host memory (comm_stage.h). */
	int stage_device;
	comm_stage_pool *stage;
	char dev_why[ACCEL_ERRMSG_MAX]; /* without one: why none can be used, or "" */
	accel_group world;
	int reported;           /* a collective timed out or lost a peer: told the store */
	accel_group *groups;    /* every group split and not freed */
	comm_alloc *allocs;
	size_t n_allocs, cap_allocs;
	/* Requests issued and not yet waited: wait() and test() accept only
	 * these (a request waited twice is an error, not a use after free), and
	 * the ones never waited are released with the communicator. */
	pthread_mutex_t live_mu;
	accel_req *live;
	/* ACCEL_TEST_COMM_TRACE=PREFIX: PREFIX.<rank> gets one line per
	 * collective, "SEQ OP ISSUE_NS DONE_NS" (CLOCK_MONOTONIC when the
	 * backend took it and when its wait returned), so tests can check
	 * what overlapped with what (docs/testing.md). */
	FILE *trace;
	/* accel_comm_stats(): bytes this rank handed to each kind of
	 * collective and how many it issued (training thread only, like the
	 * collectives themselves). */
	uint64_t stat_bytes[ACCEL_COLL_COUNT];
	uint64_t stat_calls[ACCEL_COLL_COUNT];
};

/* " on group 1c0 (world ranks 1, 3)" or "" for the world. */
static inline const char *accelp_comm_on_group(const accel_group *g)
{
	return g->what;
}

/* ---- comm.c ------------------------------------------------------------------------ */
/* The backend and its state (the world's or g's) that serve a collective
 * `op` on buffer v: the host backend for host buffers and for staged device
 * buffers (c->stage created on first use), else the device backend, brought
 * up on the first device collective on the world.  Errors go to ctx->err. */
int accelp_comm_route(accel_comm *c, accel_group *g, const accel_view *v, const char *op,
                      comm_backend **ret_be, void **ret_state);

/* ---- comm_check.c ------------------------------------------------------------------ */
/* One view of collective `op` (`which`: "send", "recv", "buffer"): its
 * struct_size, dtype (a reducible one with `reduce`), data and size. */
int accelp_comm_check_view(accel_comm *c, accel_group *g, const accel_view *v, const char *op,
                           const char *which, int reduce);
/* Send and recv of `op`: each view, the same dtype and device, the element
 * counts want_send and want_recv, and no overlap but the in-place forms. */
int accelp_comm_check_pair(accel_comm *c, accel_group *g, const accel_view *s,
                           const accel_view *d, const char *op, int reduce, uint64_t want_send,
                           uint64_t want_recv);
/* A known reduction (ACCEL_RED_*); `what` names the collective. */
int accelp_comm_check_op(accel_comm *c, uint32_t op, const char *what);

/* ---- comm_coll.c ------------------------------------------------------------------- */
/* Take q off c->live; the caller holds c->live_mu. */
void accelp_comm_req_unlink_locked(accel_comm *c, accel_req *q);

/* ---- comm_group.c ------------------------------------------------------------------ */
/* The group a caller means: NULL is the world; anything else must be one
 * of this communicator's groups. */
int accelp_comm_group_of(accel_comm *c, accel_group *g, const char *op, accel_group **ret);

#endif
