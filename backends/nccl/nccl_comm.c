/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_comm.c: the "nccl" comm backend (abi/accel/comm.h) for
 * buffers in CUDA device memory.
 *
 * One communicator per backend instance, created non-blocking
 * (ncclConfig_t.blocking = 0) so that neither its creation nor a collective
 * can hang without a deadline: every NCCL call that returns ncclInProgress
 * is settled by polling ncclCommGetAsyncError against the timeout, and a
 * timeout aborts the communicator (ncclCommAbort), the only way to stop
 * NCCL kernels that wait for a missing peer.
 *
 * Collectives run on the instance's own CUDA stream; a request is a CUDA
 * event recorded after the collective.  The stream first waits (an event,
 * not a host sync) for the work queued earlier on the context's compute
 * stream (host->stream, ABI minor 4; the legacy default stream without
 * one), so gradients produced there are complete.  wait_stream() makes a
 * caller's stream wait on a request's event instead of the host; such a
 * request is then watched by a thread of the instance until it completes,
 * which aborts the communicator at the collective's deadline, so a stream
 * waiting for a peer that never comes is released and the failure is
 * reported by the next call (docs/streams.md).  NCCL's own AVG (ncclAvg)
 * and half types (ncclFloat16, ncclBfloat16) are used directly.
 *
 * This file: the life cycle (init, split, fini), device memory and the
 * vtable; nccl-comm.h says where the rest is. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/mono.h"
#include "nccl-comm.h"

/* How long fini() lets outstanding work finish before it aborts (ms). */
#define DRAIN_MAX_MS 10000

/* ---- memory -------------------------------------------------------------------------------- */

static int nccl_mem_alloc(void *state, int32_t device, int32_t device_index, uint64_t bytes,
                          void **ret_ptr)
{
	nccl_state *st = state;
	int rc = ACCEL_OK, prev = -1;
	void *p = NULL;
	if (device != ACCEL_DEVICE_CUDA)
		return st->host->error(st->h, ACCEL_ERR_UNSUPPORTED,
		                       "mem_alloc: the nccl backend allocates device memory "
		                       "only (asked for device %d)", device);
	if (device_index != st->device)
		return st->host->error(st->h, ACCEL_ERR_INVALID_ARG,
		                       "mem_alloc: asked for cuda:%d, but this rank's "
		                       "communicator is on cuda:%d", device_index, st->device);
	if ((rc = nccl_enter_device(st, &prev)))
		return rc;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		char msg[MSG_MAX];
		accel_nccl_describe_cuda(e, "cudaMalloc", msg, sizeof(msg));
		/* Out of memory is the caller's to handle, not a broken communicator. */
		rc = st->host->error(st->h, e == cudaErrorMemoryAllocation ? ACCEL_ERR_NOMEM
		                                                           : ACCEL_ERR_CUDA,
		                     "%s (%llu bytes on cuda:%d)", msg, (unsigned long long)bytes,
		                     st->device);
	} else {
		*ret_ptr = p;
	}
	nccl_leave_device(st, prev);
	return rc;
}

static void drain_or_abort(nccl_state *st, int64_t deadline, const char *when);

static void nccl_mem_free(void *state, void *ptr)
{
	nccl_state *st = state;
	if (!ptr)
		return;
	/* cudaFree waits for the device: never behind a collective that waits
	 * for a missing peer, and never under a running kernel */
	if (st->live) {
		/* as long as the collectives themselves may take: the latest
		 * deadline of the requests still held (0: one has none) */
		int64_t deadline = 1;
		for (accel_comm_req *r = st->live; r; r = r->next)
			deadline = !r->deadline_ns || !deadline ? 0
			           : r->deadline_ns > deadline ? r->deadline_ns : deadline;
		drain_or_abort(st, deadline, "before freeing device memory");
	}
	cudaError_t e = cudaFree(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		st->host->log(st->h, ACCEL_LOG_WARN, "cudaFree(%p) failed: %s", ptr,
		              cudaGetErrorString(e));
	}
}

/* ---- life cycle ---------------------------------------------------------------------------- */

/* Let the work queued on our stream finish by `deadline` (mono_ns
 * clock, 0: none); a failed communicator, a stuck stream, a stream error or
 * an NCCL error meanwhile abort the communicator instead (after which the
 * stream drains: aborting ends NCCL's kernels).  Called before anything
 * that would wait for the stream without a deadline (cudaFree,
 * ncclCommFinalize). */
static void drain_or_abort(nccl_state *st, int64_t deadline, const char *when)
{
	if (!st->comm || st->aborted)
		return;
	if (st->failed) {
		nccl_abort_comm(st);
		return;
	}
	if (!st->stream)
		return;
	int64_t start = mono_ns();
	uint32_t spins = 0;
	cudaError_t e;
	ncclResult_t ar = ncclSuccess, q = ncclSuccess;
	while ((e = cudaStreamQuery(st->stream)) == cudaErrorNotReady &&
	       (!deadline || mono_ns() < deadline)) {
		if (nccl_comm_enter(st))
			return;   /* aborted by the watchdog: the stream drains */
		q = ncclCommGetAsyncError(st->comm, &ar);
		nccl_comm_leave(st);
		if (q != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress))
			break;
		nccl_backoff(&spins);
	}
	if (e == cudaSuccess)
		return;
	int code = ACCEL_ERR_NCCL;
	if (e != cudaErrorNotReady) {
		(void)cudaGetLastError();
		code = ACCEL_ERR_CUDA;
		st->host->log(st->h, ACCEL_LOG_WARN, "rank %d: the collective stream failed %s (%s); "
		              "aborting the communicator", st->rank, when, cudaGetErrorName(e));
	} else if (q != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress)) {
		ncclResult_t bad = q != ncclSuccess ? q : ar;
		if (bad == ncclRemoteError)
			code = ACCEL_ERR_PEER;
		st->host->log(st->h, ACCEL_LOG_WARN, "rank %d: NCCL reported %s %s; aborting the "
		              "communicator", st->rank, accel_nccl_result_name(bad), when);
	} else {
		code = ACCEL_ERR_TIMEOUT;
		st->host->log(st->h, ACCEL_LOG_WARN, "rank %d: collectives still running after %.1f s "
		              "%s; aborting the communicator", st->rank,
		              (double)(mono_ns() - start) / 1e9, when);
	}
	nccl_abort_comm(st);
	if (!st->failed) {
		st->failed = 1;
		st->fail_code = code;
		snprintf(st->fail_msg, sizeof(st->fail_msg), "the communicator was aborted %s", when);
	}
}

static void nccl_fini(void *state)
{
	nccl_state *st = state;
	int prev = -1;
	if (!st)
		return;
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	cudaSetDevice(st->device);
	drain_or_abort(st, mono_deadline_ns(DRAIN_MAX_MS), "at shutdown");
	nccl_watch_stop(st);   /* after the drain: the stream is idle or aborted */
	if (st->comm && !st->aborted) {
		/* finalize (flushes NCCL's own work), bounded too */
		int64_t deadline = mono_deadline_ns(DRAIN_MAX_MS);
		uint32_t spins = 0;
		ncclResult_t ar = ncclCommFinalize(st->comm);
		while (ar == ncclInProgress && mono_ns() < deadline &&
		       ncclCommGetAsyncError(st->comm, &ar) == ncclSuccess)
			nccl_backoff(&spins);
		if (ar == ncclSuccess)
			ncclCommDestroy(st->comm);
		else
			nccl_abort_comm(st);
	}
	while (st->live) {
		accel_comm_req *r = st->live;
		st->live = r->next;
		nccl_req_put(st, r);
	}
	while (st->spare) {
		accel_comm_req *r = st->spare;
		st->spare = r->next;
		cudaEventDestroy(r->ev);
		free(r);
	}
	if (st->scratch)
		cudaFree(st->scratch);
	if (st->dep_ev)
		cudaEventDestroy(st->dep_ev);
	if (st->stream)
		cudaStreamDestroy(st->stream);
	(void)cudaGetLastError();
	if (prev >= 0)
		cudaSetDevice(prev);
	free(st->wranks);
	free(st);
}

static int nccl_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                     void **ret_state)
{
	nccl_state *st = NULL;
	int rc = ACCEL_OK, ndev = 0, prev = -1;
	char msg[MSG_MAX];
	ncclUniqueId id;

	if (!args || !ACCEL_COMM_INIT_HAS(args, job_id))
		return host->error(h, ACCEL_ERR_ABI, "init: accel_comm_init_v1 is %s",
		                   args ? "too small (older core?)" : "NULL");
	st = calloc(1, sizeof(*st));
	if (!st)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory for the backend state");
	st->host = host;
	st->h = h;
	st->rank = args->rank;
	st->world = args->world_size;
	st->timeout_ms = args->timeout_ms;
	st->device = args->device_index >= 0 ? args->device_index : args->local_rank;

	CUDA_TRY(st, cudaGetDeviceCount(&ndev), fail);
	CUDA_TRY(st, cudaGetDevice(&prev), fail);
	if (st->device < 0 || st->device >= ndev) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");
		rc = host->error(h, ACCEL_ERR_CONFIG,
		                 "rank %d (local rank %d) wants cuda:%d, but %d GPU(s) are "
		                 "visible (CUDA_VISIBLE_DEVICES=%s); start at most one process per "
		                 "GPU on each node",
		                 st->rank, args->local_rank, st->device, ndev, vis ? vis : "(unset)");
		goto fail;
	}
	CUDA_TRY(st, cudaSetDevice(st->device), fail);

	nccl_host_boot hb = {host, h, 0};
	int via_store = 0;
	rc = accel_nccl_bootstrap(&accel_nccl_host_boot_ops, &hb, st->rank, st->world,
	                          st->timeout_ms, &id, &via_store, msg, sizeof(msg));
	if (rc != ACCEL_OK) {
		/* a failed host broadcast recorded its own error first (which
		 * then wins); this says what it was for */
		if (hb.bcast_failed)
			host->log(h, ACCEL_LOG_ERROR, "%s", msg);
		host->error(h, rc, "%s", msg);
		goto fail;
	}

	/* The store namespace for naming missing ranks: from the id, which is
	 * the same on every rank and new for every communicator.  Without a
	 * store a timeout cannot name them. */
	st->no_store = st->world > 1 && !via_store;
	if (st->world > 1 && via_store) {
		uint64_t hsh = 1469598103934665603ull;  /* FNV-1a */
		for (size_t i = 0; i < sizeof(id.internal); i++)
			hsh = (hsh ^ (unsigned char)id.internal[i]) * 1099511628211ull;
		snprintf(st->ns, sizeof(st->ns), "nccl/%016llx", (unsigned long long)hsh);
	}
	const char *blocking = getenv("NCCL_COMM_BLOCKING");
	if (blocking && atoi(blocking) == 1)
		host->log(h, ACCEL_LOG_WARN,
		          "NCCL_COMM_BLOCKING=1 makes NCCL calls block: a missing rank then hangs "
		          "this one without the %.1f s deadline (comm.timeout_s); unset it",
		          (double)st->timeout_ms / 1000.0);

	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	NCCL_TRY(st, "ncclCommInitRankConfig (creating the communicator)", 0,
	         ncclCommInitRankConfig(&st->comm, st->world, id, st->rank, &cfg), fail);

	CUDA_TRY(st, cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), fail);
	CUDA_TRY(st, cudaEventCreateWithFlags(&st->dep_ev, cudaEventDisableTiming), fail);
	CUDA_TRY(st, cudaMalloc(&st->scratch, 64), fail);
	CUDA_TRY(st, cudaMemset(st->scratch, 0, 64), fail);

	host->log(h, ACCEL_LOG_DEBUG, "rank %d of %d on cuda:%d, NCCL %d.%d.%d, timeout %lld ms",
	          st->rank, st->world, st->device, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
	          (long long)st->timeout_ms);
	*ret_state = st;
	if (prev >= 0 && prev != st->device)
		cudaSetDevice(prev);  /* every call restores the caller's device */
	return ACCEL_OK;
fail:
	nccl_fini(st);
	if (prev >= 0)
		cudaSetDevice(prev);
	(void)cudaGetLastError();
	return rc;
}

/* Where a rank outside the new group lets ncclCommSplit write its (NULL)
 * communicator; never read. */
static ncclComm_t g_split_sink;

/* ncclCommSplit in non-blocking mode: the new communicator's handle is
 * stored (from NCCL's thread) only once its initialisation has finished,
 * and until then *newcomm is NULL, while the parent's own state may already
 * read success (seen with NCCL 2.28 at one rank).  Wait for the handle
 * until `deadline` (the parent's timeout, counted from the split's call),
 * with the parent's errors reported; the new communicator's own result is
 * read after. */
static ncclResult_t split_wait(nccl_state *p, ncclComm_t *slot, int64_t deadline, int *rc)
{
	uint32_t spins = 0;
	*rc = ACCEL_OK;
	while (!__atomic_load_n(slot, __ATOMIC_ACQUIRE)) {
		ncclResult_t ar = ncclSuccess;
		ncclResult_t q = ncclCommGetAsyncError(p->comm, &ar);
		if (q != ncclSuccess)
			return q;
		if (ar != ncclSuccess && ar != ncclInProgress)
			return ar;
		if (deadline && mono_ns() > deadline) {
			*rc = nccl_timeout_fail(p, "ncclCommSplit (waiting for the new communicator)",
			                        0);
			return ncclInProgress;
		}
		nccl_backoff(&spins);
	}
	return ncclSuccess;
}

/* A group: ncclCommSplit of the parent (collective over it; colour NONE is
 * NCCL_SPLIT_NOCOLOR), with the rank the core gave as the key, on the
 * parent's device; a stream and scratch of its own like init(). */
static int nccl_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	nccl_state *p = state, *st = NULL;
	int rc = ACCEL_OK, prev = -1;
	if (!args || args->struct_size < offsetof(accel_comm_split_v1, local_size) + sizeof(int32_t))
		return p->host->error(p->h, ACCEL_ERR_ABI, "split: accel_comm_split_v1 is too old");
	if (p->failed)
		return p->host->error(p->h, p->fail_code, "split: %s", p->fail_msg);
	int member = args->color != ACCEL_COMM_SPLIT_NONE;
	if (member) {
		st = calloc(1, sizeof(*st));
		if (!st)
			return p->host->error(p->h, ACCEL_ERR_NOMEM, "out of memory for the backend state");
		st->host = p->host;
		st->h = p->h;
		st->rank = args->rank;
		st->world = args->size;
		st->timeout_ms = args->timeout_ms;
		st->device = p->device;
		st->no_store = p->no_store;
		st->wranks = malloc(sizeof(int32_t) * (size_t)args->size);
		if (!st->wranks) {
			free(st);
			return p->host->error(p->h, ACCEL_ERR_NOMEM, "out of memory");
		}
		memcpy(st->wranks, args->ranks, sizeof(int32_t) * (size_t)args->size);
		/* under the parent's keys, which its unique id made unique */
		int nl = p->ns[0] ? snprintf(st->ns, sizeof(st->ns), "%s/g%s", p->ns, args->tag) : 0;
		if (nl < 0 || (size_t)nl >= sizeof(st->ns))
			st->ns[0] = '\0';   /* too deep to name missing ranks: said as "cannot tell" */
	}
	if ((rc = nccl_enter_device(p, &prev)))
		goto fail;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	if (nccl_comm_enter(p)) {
		rc = p->host->error(p->h, p->fail_code ? p->fail_code : ACCEL_ERR_NCCL, "ncclCommSplit "
		                    "not run: the parent communicator was aborted (%s)", p->fail_msg);
		goto fail;
	}
	/* NCCL writes the new communicator from its own thread when the split
	 * has finished: into st (on the heap) for a member, into a sink for the
	 * others (NCCL writes NULL there). */
	int64_t deadline = mono_deadline_ns(p->timeout_ms);
	ncclResult_t sr = ncclCommSplit(p->comm, member ? args->color : NCCL_SPLIT_NOCOLOR,
	                                member ? args->rank : 0,
	                                member ? &st->comm : &g_split_sink, &cfg);
	int launched = sr == ncclSuccess || sr == ncclInProgress;
	if (sr == ncclInProgress)
		sr = nccl_settle(p, "ncclCommSplit", 0, &rc);
	if (member && rc == ACCEL_OK && (sr == ncclSuccess || sr == ncclInProgress))
		sr = split_wait(p, &st->comm, deadline, &rc);
	nccl_comm_leave(p);
	if (rc == ACCEL_OK && sr != ncclSuccess)
		rc = nccl_fail(p, sr, "ncclCommSplit");
	if (rc != ACCEL_OK) {
		if (member && launched && !__atomic_load_n(&st->comm, __ATOMIC_ACQUIRE)) {
			/* NCCL may still write st->comm: st is left to it (a leak
			 * of one state, after an error that ends the job anyway) */
			free(st->wranks);
			st = NULL;
		}
		goto fail;
	}
	if (!member) {
		nccl_leave_device(p, prev);
		*ret_state = NULL;
		return ACCEL_OK;
	}
	NCCL_TRY(st, "ncclCommSplit (the new group's communicator)", 0, ncclInProgress, fail);
	CUDA_TRY(st, cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), fail);
	CUDA_TRY(st, cudaEventCreateWithFlags(&st->dep_ev, cudaEventDisableTiming), fail);
	CUDA_TRY(st, cudaMalloc(&st->scratch, 64), fail);
	CUDA_TRY(st, cudaMemset(st->scratch, 0, 64), fail);
	nccl_leave_device(p, prev);
	p->host->log(p->h, ACCEL_LOG_DEBUG, "group %s: rank %d of %d on cuda:%d", args->tag,
	             st->rank, st->world, st->device);
	*ret_state = st;
	return ACCEL_OK;
fail:
	nccl_fini(st);
	if (prev >= 0)
		nccl_leave_device(p, prev);
	(void)cudaGetLastError();
	return rc;
}

static int32_t nccl_probe(const accel_host_v1 *host, accel_host *h)
{
	int n = 0;
	(void)host;
	(void)h;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n > 0;
}

static const accel_comm_desc_v1 nccl_desc = {
	.struct_size = sizeof(accel_comm_desc_v1),
	.devices = 1u << ACCEL_DEVICE_CUDA,
	.name = "nccl",
	.version = "1.0.0",
	.summary = "NCCL collectives on CUDA device memory (one GPU per rank)",
	.requires = ACCEL_REQ_CUDA,
	.config_section = NULL,
	.params = NULL,
	.n_params = 0,
	.scope = ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES,
	.preference = ACCEL_COMM_PREF_LAUNCHER,
};

static const accel_comm_v1 nccl_vtable = {
	.struct_size = sizeof(accel_comm_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &nccl_desc,
	.init = nccl_init,
	.fini = nccl_fini,
	.probe = nccl_probe,
	.mem_alloc = nccl_mem_alloc,
	.mem_free = nccl_mem_free,
	.allreduce = nccl_allreduce,
	.reduce_scatter = nccl_reduce_scatter,
	.allgather = nccl_allgather,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.wait = nccl_wait,
	.test = nccl_test,
	.split = nccl_split,
	.wait_stream = nccl_wait_stream,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "nccl", store_add))   /* the rendezvous store */
		return NULL;
	return &nccl_vtable;
}
