/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_coll.c: the nccl backend's collectives: requests (a CUDA
 * event recorded after the collective), the checks of a call's views, issuing
 * on the instance's stream after the caller's work, and completion: wait,
 * wait_stream (handed to the watchdog, nccl_watch.c) and test. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "nccl-comm.h"

/* ---- requests ------------------------------------------------------------------------ */

static accel_comm_req *req_get(nccl_state *st, int *rc)
{
	accel_comm_req *r = st->spare;
	if (r) {
		st->spare = r->next;
		r->next = NULL;
		return r;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		/* this rank cannot take part: the others would pair their next
		 * collective with the wrong one, so the communicator is done */
		*rc = nccl_set_failed(st, ACCEL_ERR_NOMEM, "out of memory for a request (rank %d)",
		                      st->rank);
		return NULL;
	}
	cudaError_t e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		free(r);
		*rc = nccl_cuda_fail(st, e, "cudaEventCreateWithFlags");
		return NULL;
	}
	return r;
}

void nccl_req_put(nccl_state *st, accel_comm_req *r)
{
	r->next = st->spare;
	st->spare = r;
}

static int req_unlink(nccl_state *st, accel_comm_req *r)
{
	accel_comm_req **pp = &st->live;
	for (; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			r->next = NULL;
			return 1;
		}
	}
	return 0;
}

static inline int req_known(const nccl_state *st, const accel_comm_req *r)
{
	for (const accel_comm_req *p = st->live; p; p = p->next)
		if (p == r)
			return 1;
	return 0;
}

/* ---- argument checks ---------------------------------------------------------------- */

static const char *memory_type_name(enum cudaMemoryType t)
{
	switch (t) {
	case cudaMemoryTypeUnregistered: return "ordinary host memory";
	case cudaMemoryTypeHost: return "pinned host memory";
	case cudaMemoryTypeDevice: return "device memory";
	case cudaMemoryTypeManaged: return "managed memory";
	default: return "memory of an unknown kind";
	}
}

/* What the core does not check: the view is on this rank's GPU, and its
 * pointer is device memory there (the rest of it the core checked). */
static int check_view(nccl_state *st, const char *op, const char *which, const accel_view *v)
{
	coll_assert_view(v, -1);
	if (v->device != ACCEL_DEVICE_CUDA || v->device_index != st->device)
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "%s: %s buffer is on %s:%d but this rank's NCCL "
		                       "communicator is on cuda:%d; the nccl backend serves this "
		                       "rank's GPU only",
		                       op, which, v->device == ACCEL_DEVICE_CUDA ? "cuda" : "cpu",
		                       v->device_index, st->device);
	if (v->numel == 0)
		return ACCEL_OK;
	/* The label is the caller's word; NCCL does not check pointers, and a
	 * host pointer would fault its kernel and take the CUDA context down.
	 * Since CUDA 11 host memory is cudaSuccess with type Unregistered. */
	struct cudaPointerAttributes at;
	memset(&at, 0, sizeof(at));
	cudaError_t e = cudaPointerGetAttributes(&at, v->data);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return st->host->error(st->h, ACCEL_ERR_INVALID_ARG,
		                       "%s: %s buffer %p: CUDA does not know this pointer (%s)", op,
		                       which, v->data, cudaGetErrorName(e));
	}
	if ((at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) ||
	    (at.type == cudaMemoryTypeDevice && at.device != st->device)) {
		char where[32] = "";
		if (at.type == cudaMemoryTypeDevice)
			snprintf(where, sizeof(where), " of cuda:%d", at.device);
		return st->host->error(st->h, ACCEL_ERR_INVALID_ARG,
		                       "%s: %s buffer %p is labelled cuda:%d but is %s%s; "
		                       "collectives on cuda views need device memory of this "
		                       "rank's GPU (cudaMalloc, or accelp_comm_mem_alloc)",
		                       op, which, v->data, v->device_index, memory_type_name(at.type),
		                       where);
	}
	return ACCEL_OK;
}

/* The two views of an op on this rank's GPU; sets *place (COLL_*). */
static int check_pair(nccl_state *st, int kind, const accel_view *send, const accel_view *recv,
                      int *place)
{
	const char *op = coll_op_name(kind);
	int rc;
	coll_assert_pair(kind, st->world, send, recv, -1);
	if ((rc = check_view(st, op, "send", send)) || (rc = check_view(st, op, "recv", recv)))
		return rc;
	*place = coll_place(kind, st->rank, send, recv);
	return ACCEL_OK;
}

static int check_reduce(nccl_state *st, const char *op, uint32_t dtype, uint32_t red,
                        ncclDataType_t *ret_type, ncclRedOp_t *ret_op)
{
	coll_assert_reduction(dtype, red);
	/* what this NCCL reduces (bf16 needs NCCL 2.10) */
	if (!accel_nccl_dtype(dtype, 1, ret_type))
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "%s: cannot reduce %s; reductions take f32, f64, f16, bf16, "
		                       "i32 or i64",
		                       op, accel_abi_dtype_name(dtype));
	if (!accel_nccl_redop(red, ret_op))
		return st->host->error(st->h, ACCEL_ERR_INTERNAL,
		                       "%s: no NCCL operation for reduction %u", op, red);
	return ACCEL_OK;
}

static int fail_fast(nccl_state *st, int kind)
{
	return st->host->error(st->h, st->fail_code,
	                       "%s #%llu not run: an earlier NCCL call failed (%.*s)",
	                       coll_op_name(kind), (unsigned long long)st->seq + 1, MSG_MAX / 2,
	                       st->fail_msg);
}

/* ---- issuing ----------------------------------------------------------------------------- */

typedef struct launch {
	int kind;
	const void *send;
	void *recv;
	uint64_t count;           /* NCCL's count for the call */
	ncclDataType_t type;
	ncclRedOp_t op;
	int root;
	uint32_t dtype;
	/* ABI in-place conventions that differ from NCCL's (see below) */
	size_t block_bytes;       /* bytes of one rank's block */
	int copy_before;          /* allgather in place: move own block to slot rank */
	int copy_after;           /* reduce_scatter in place: move result to start */
} launch;

static int issue(nccl_state *st, const launch *L, accel_comm_req **ret_req)
{
	int rc = ACCEL_OK, prev = -1, entered = 0;
	accel_comm_req *r = NULL;
	char *base = L->recv;
	char what[96], name[128];
	uint64_t seq = st->seq + 1;
	int64_t deadline = mono_deadline_ns(st->timeout_ms);  /* counted from issue */
	if (st->failed)
		return fail_fast(st, L->kind);
	if ((rc = nccl_enter_device(st, &prev)))
		return rc;
	nccl_watch_reap(st);   /* a stream-waited collective may have failed meanwhile */
	if (st->failed) {
		nccl_leave_device(st, prev);
		return fail_fast(st, L->kind);
	}
	/* the names NCCL_TRY reports: "ncclAllReduce for allreduce #7 (...)" */
	coll_describe(what, sizeof(what), L->kind, seq, L->dtype, L->count);
	snprintf(name, sizeof(name), "%s for %s",
	         L->kind == OP_ALLREDUCE || L->kind == OP_BARRIER ? "ncclAllReduce"
	         : L->kind == OP_REDUCE_SCATTER                  ? "ncclReduceScatter"
	         : L->kind == OP_ALLGATHER                       ? "ncclAllGather"
	                                                         : "ncclBroadcast",
	         what);
	if (!(r = req_get(st, &rc)))
		goto out;
	/* after the work queued on the context's stream before this call */
	void *user = ACCEL_HOST_HAS(st->host, stream) ? st->host->stream(st->h) : NULL;
	CUDA_TRY(st, cudaEventRecord(st->dep_ev, user ? (cudaStream_t)user : cudaStreamLegacy),
	         out);
	CUDA_TRY(st, cudaStreamWaitEvent(st->stream, st->dep_ev, 0), out);
	if (L->copy_before && st->rank > 0 && L->block_bytes)
		CUDA_TRY(st, cudaMemcpyAsync(base + (size_t)st->rank * L->block_bytes, base,
		                             L->block_bytes, cudaMemcpyDeviceToDevice, st->stream),
		         out);
	if (nccl_comm_enter(st)) {   /* the watchdog aborted it since nccl_watch_reap */
		nccl_watch_reap(st);
		rc = st->failed ? fail_fast(st, L->kind)
		                : nccl_set_failed(st, ACCEL_ERR_NCCL,
		                                  "%s not run: the communicator was aborted", what);
		goto out;
	}
	entered = 1;
	switch (L->kind) {
	case OP_ALLREDUCE:
		NCCL_TRY(st, name, seq,
		         ncclAllReduce(L->send, L->recv, L->count, L->type, L->op, st->comm, st->stream),
		         out);
		break;
	case OP_REDUCE_SCATTER:
		NCCL_TRY(st, name, seq,
		         ncclReduceScatter(L->send, L->recv, L->count, L->type, L->op, st->comm,
		                           st->stream),
		         out);
		break;
	case OP_ALLGATHER:
		NCCL_TRY(st, name, seq,
		         ncclAllGather(L->send, L->recv, L->count, L->type, st->comm, st->stream), out);
		break;
	case OP_BROADCAST:
		NCCL_TRY(st, name, seq,
		         ncclBroadcast(L->recv, L->recv, L->count, L->type, L->root, st->comm,
		                       st->stream),
		         out);
		break;
	case OP_BARRIER:
		NCCL_TRY(st, name, seq,
		         ncclAllReduce(st->scratch, st->scratch, 1, ncclFloat32, ncclSum, st->comm,
		                       st->stream),
		         out);
		break;
	default:
		rc = st->host->error(st->h, ACCEL_ERR_INTERNAL, "unknown op %d", L->kind);
		goto out;
	}
	nccl_comm_leave(st);
	entered = 0;
	if (L->copy_after && st->rank > 0 && L->block_bytes)
		CUDA_TRY(st, cudaMemcpyAsync((char *)L->send, L->recv, L->block_bytes,
		                             cudaMemcpyDeviceToDevice, st->stream),
		         out);
	CUDA_TRY(st, cudaEventRecord(r->ev, st->stream), out);
	r->seq = ++st->seq;
	r->kind = L->kind;
	r->dtype = L->dtype;
	r->count = L->count;
	r->deadline_ns = deadline;
	r->next = st->live;
	st->live = r;
	*ret_req = r;
	r = NULL;
out:
	if (entered)
		nccl_comm_leave(st);
	if (r)
		nccl_req_put(st, r);
	nccl_leave_device(st, prev);
	return rc;
}

int nccl_allreduce(void *state, const accel_view *send, const accel_view *recv,
                          uint32_t red, accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_ALLREDUCE};
	int rc, place;
	assert(ret_req);
	if ((rc = check_pair(st, OP_ALLREDUCE, send, recv, &place)) ||
	    (rc = check_reduce(st, "allreduce", send->dtype, red, &L.type, &L.op)))
		return rc;
	L.send = send->data;
	L.recv = recv->data;
	L.count = recv->numel;
	L.dtype = send->dtype;
	return issue(st, &L, ret_req);
}

int nccl_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                               uint32_t red, accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_REDUCE_SCATTER};
	int rc, place;
	assert(ret_req);
	if ((rc = check_pair(st, OP_REDUCE_SCATTER, send, recv, &place)) ||
	    (rc = check_reduce(st, "reduce_scatter", send->dtype, red, &L.type, &L.op)))
		return rc;
	L.send = send->data;
	L.recv = recv->data;
	L.count = recv->numel;
	L.dtype = send->dtype;
	if (place == COLL_SAME) {
		/* In place with the result at the start of the buffer.  NCCL's in
		 * place (COLL_RANK_BLOCK, passed as it is): recvbuff == sendbuff +
		 * rank * count.  Use NCCL's form, then move the block to the start
		 * (disjoint for rank > 0). */
		L.block_bytes = recv->numel * accel_abi_dtype_size(send->dtype);
		L.recv = (char *)send->data + (size_t)st->rank * L.block_bytes;
		L.copy_after = 1;
	}
	return issue(st, &L, ret_req);
}

int nccl_allgather(void *state, const accel_view *send, const accel_view *recv,
                          accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_ALLGATHER};
	int rc, place;
	assert(ret_req);
	if ((rc = check_pair(st, OP_ALLGATHER, send, recv, &place)))
		return rc;
	if (!accel_nccl_dtype(send->dtype, 0, &L.type))
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED, "allgather: dtype %s",
		                       accel_abi_dtype_name(send->dtype));
	L.send = send->data;
	L.recv = recv->data;
	L.count = send->numel;
	L.dtype = send->dtype;
	if (place == COLL_SAME) {
		/* In place with the own block at the start; NCCL's in place
		 * (COLL_RANK_BLOCK, passed as it is) wants it at slot rank. */
		L.block_bytes = send->numel * accel_abi_dtype_size(send->dtype);
		L.send = (char *)recv->data + (size_t)st->rank * L.block_bytes;
		L.copy_before = 1;
	}
	return issue(st, &L, ret_req);
}

int nccl_broadcast(void *state, const accel_view *buf, int32_t root,
                          accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_BROADCAST};
	int rc;
	assert(ret_req);
	assert(root >= 0 && root < st->world);
	if ((rc = check_view(st, "broadcast", "buffer", buf)))
		return rc;
	if (!accel_nccl_dtype(buf->dtype, 0, &L.type))
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED, "broadcast: dtype %s",
		                       accel_abi_dtype_name(buf->dtype));
	L.recv = buf->data;
	L.count = buf->numel;
	L.root = root;
	L.dtype = buf->dtype;
	return issue(st, &L, ret_req);
}

int nccl_barrier(void *state, accel_comm_req **ret_req)
{
	nccl_state *st = state;
	launch L = {.kind = OP_BARRIER, .dtype = ACCEL_DTYPE_F32, .count = 1};
	assert(ret_req);
	return issue(st, &L, ret_req);
}

/* ---- completion -------------------------------------------------------------------------- */

/* The oldest request still running: where the stream is stuck. */
static accel_comm_req *oldest_running(nccl_state *st, accel_comm_req *r)
{
	accel_comm_req *old = r;
	for (accel_comm_req *p = st->live; p; p = p->next)
		if (p->seq < old->seq && cudaEventQuery(p->ev) == cudaErrorNotReady)
			old = p;
	(void)cudaGetLastError();
	return old;
}

/* One check of r: 1 done, 0 not yet, <0 failed (recorded).  Enforces the
 * deadline, so test() alone also ends a hang. */
static int req_poll(nccl_state *st, accel_comm_req *r)
{
	int rc = ACCEL_OK;
	char what[96];
	if (st->aborted)
		return nccl_set_failed(st, st->fail_code ? st->fail_code : ACCEL_ERR_NCCL,
		                       "%s #%llu: the communicator was aborted after an earlier failure",
		                       coll_op_name(r->kind), (unsigned long long)r->seq);
	cudaError_t e = cudaEventQuery(r->ev);
	if (e == cudaSuccess)
		return 1;
	if (e != cudaErrorNotReady) {
		(void)cudaGetLastError();
		return nccl_cuda_fail(st, e, "cudaEventQuery");
	}
	ncclResult_t ar = ncclSuccess, q;
	if (nccl_comm_enter(st)) {   /* by the watchdog, since the check above */
		nccl_watch_reap(st);
		return st->failed ? nccl_set_failed(st, st->fail_code, "%s", st->fail_msg)
		                  : nccl_set_failed(st, ACCEL_ERR_NCCL,
		                                    "%s #%llu: the communicator was aborted",
		                                    coll_op_name(r->kind), (unsigned long long)r->seq);
	}
	q = ncclCommGetAsyncError(st->comm, &ar);
	nccl_comm_leave(st);
	if (q != ncclSuccess) {
		rc = nccl_fail(st, q, "ncclCommGetAsyncError");
		goto out;
	}
	if (ar != ncclSuccess && ar != ncclInProgress) {
		coll_describe(what, sizeof(what), r->kind, r->seq, r->dtype, r->count);
		rc = nccl_fail(st, ar, what);
		nccl_abort_comm(st);
		goto out;
	}
	if (r->deadline_ns && mono_ns() > r->deadline_ns) {
		accel_comm_req *old = oldest_running(st, r);
		coll_describe(what, sizeof(what), old->kind, old->seq, old->dtype, old->count);
		rc = nccl_timeout_fail(st, what, old->seq);
	}
out:
	return rc;
}

int nccl_wait(void *state, accel_comm_req *r)
{
	nccl_state *st = state;
	int rc = ACCEL_OK, prev = -1;
	assert(r && req_known(st, r));   /* the core waits its own, once */
	if ((rc = nccl_enter_device(st, &prev)) == ACCEL_OK) {
		nccl_watch_reap(st);
		uint32_t spins = 0;
		int p;
		while ((p = req_poll(st, r)) == 0)
			nccl_backoff(&spins);
		if (p < 0)
			rc = p;
		nccl_leave_device(st, prev);
	}
	/* released whatever happened: wait() is the end of a request */
	req_unlink(st, r);
	nccl_req_put(st, r);
	return rc;
}

/* The caller's stream waits for r's event; the host does not.  r is
 * released for the caller, but watched until it completes (its deadline
 * holds: see watch_main). */
int nccl_wait_stream(void *state, accel_comm_req *r, void *stream)
{
	nccl_state *st = state;
	int rc, prev = -1, p = ACCEL_OK;
	assert(r && req_known(st, r));
	req_unlink(st, r);
	if ((rc = nccl_enter_device(st, &prev))) {
		nccl_req_put(st, r);
		return rc;
	}
	nccl_watch_reap(st);
	p = st->failed ? fail_fast(st, r->kind) : req_poll(st, r);
	if (p == 0) {
		cudaError_t e = cudaStreamWaitEvent(stream ? (cudaStream_t)stream : cudaStreamLegacy,
		                                    r->ev, 0);
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			p = nccl_cuda_fail(st, e, "cudaStreamWaitEvent(the caller's stream, the collective's "
			                          "event)");
		} else if (nccl_watch_add(st, r) == ACCEL_OK) {
			r = NULL;
		} else {
			/* no thread to enforce the deadline: wait here instead */
			uint32_t spins = 0;
			while ((p = req_poll(st, r)) == 0)
				nccl_backoff(&spins);
		}
	}
	if (r)
		nccl_req_put(st, r);
	nccl_leave_device(st, prev);
	return p < 0 ? p : ACCEL_OK;
}

int nccl_test(void *state, accel_comm_req *r, int32_t *ret_done)
{
	nccl_state *st = state;
	int prev = -1, p;
	assert(ret_done);
	assert(r && req_known(st, r));
	if ((p = nccl_enter_device(st, &prev)))
		return p;
	nccl_watch_reap(st);
	p = req_poll(st, r);
	nccl_leave_device(st, prev);
	if (p < 0)
		return p;
	*ret_done = p;
	return ACCEL_OK;
}
