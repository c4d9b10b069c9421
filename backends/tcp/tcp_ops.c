/* SPDX-License-Identifier: MIT */
/* backends/tcp/tcp_ops.c: the tcp backend's ops, each a series of
 * exchanges (tcp_exchange.c), run one at a time in issue order.
 *
 * Every op opens with a header exchange (kind, sequence number, dtype,
 * count, reduction or root) with every peer: ranks that issued different
 * collectives fail naming both, and a rank that never sends its header is
 * named as never having arrived.  A rank that frees its context sends a
 * farewell header, so the others can tell "left the job" from "died".
 *
 * Algorithms (W ranks, each block 1/W of the buffer):
 *  - all-reduce: reduce-scatter + all-gather by direct exchange, in rounds
 *    of `chunk_kb` per peer: each rank receives every peer's slice of its
 *    block, reduces all W in rank order (coll_reduce, the kernels shm uses,
 *    so both backends give the same bits) and sends the result slice to
 *    every peer; the result exchange of round k travels with the input
 *    exchange of round k+1.  Per rank (W-1)/W of the buffer goes out and
 *    comes in twice, as in a ring, but in W-1 streams at once.
 *  - reduce-scatter: the first half of that; all-gather: each rank sends
 *    its block to every peer; barrier: the header exchange alone.
 *  - small all-reduce, all-gather and broadcast (tcp.small_kb): the payload
 *    travels with the header, in one exchange (run_small).
 *  - broadcast: a pipelined chain root -> root+1 -> ..., in chunks, so no
 *    link carries the buffer more than once. */
#include <stdint.h>
#include <string.h>

#include "backends/common/coll.h"
#include "backends/common/coll-reduce.h"
#include "backends/common/mono.h"
#include "tcp-impl.h"

static void add_x(xfer *x, int *n, int32_t peer, int send, const void *p, uint64_t len)
{
	if (!len)
		return;
	x[*n] = (xfer){.peer = peer, .send = send, .p = (char *)p, .len = len, .done = 0};
	(*n)++;
}

/* The header exchange: every rank sends `out` (r->hdr, filled by the caller,
 * possibly followed by a payload in the same buffer: one send, one segment)
 * to every peer and receives the peers' headers into st->hdrs (recv_only:
 * the sends may still be unfinished in x[0..*n) on return).  Fails r on a
 * mismatch, a peer that left, or a stream out of step. */
static int run_header(tcp_state *st, accel_comm_req *r, int64_t deadline, const void *out,
                      uint64_t out_len, xfer *x, int *n, int recv_only)
{
	const int32_t w = st->world;
	op_hdr *theirs = st->hdrs;
	int rc;
	*n = 0;
	for (int32_t p = 0; p < w; p++) {
		if (p == st->rank)
			continue;
		add_x(x, n, p, 1, out, out_len);
		add_x(x, n, p, 0, &theirs[p], sizeof(op_hdr));
	}
	rc = tcp_exchange(st, r, x, *n, deadline, 1, recv_only);
	for (int32_t p = 0; p < w && rc == ACCEL_OK; p++) {
		if (p == st->rank)
			continue;
		const op_hdr *t = &theirs[p];
		if (t->magic == TCP_MAGIC && t->kind == OP_BYE) {
			rc = tcp_req_fail(r, ACCEL_ERR_PEER,
			                  "rank %d (%s) left the job (it freed its context after #%llu) "
			                  "while rank %d waits in this collective", tcp_wr(st, p),
			                  st->peers[p].where, (unsigned long long)t->seq,
			                  tcp_wr(st, st->rank));
		} else if (t->magic != TCP_MAGIC) {
			rc = tcp_req_fail(r, ACCEL_ERR_COMM,
			                  "rank %d (%s) sent data that is not a collective's header: the "
			                  "ranks' streams are out of step", tcp_wr(st, p), st->peers[p].where);
		} else if (memcmp(t, &r->hdr, sizeof(op_hdr)) != 0) {
			char a[192], b[192];
			tcp_hdr_describe(&r->hdr, a, sizeof(a));
			tcp_hdr_describe(t, b, sizeof(b));
			snprintf(r->msg, sizeof(r->msg),
			         "collective mismatch: rank %d issued %s but rank %d issued %s; every "
			         "rank must issue the same collectives with the same sizes in the same "
			         "order", tcp_wr(st, st->rank), a, tcp_wr(st, p), b);
			rc = r->status = ACCEL_ERR_COMM;
		}
	}
	return rc;
}

static uint64_t blk_off(uint64_t n, int32_t w, int32_t b)
{
	uint64_t base = n / (uint64_t)w, rem = n % (uint64_t)w;
	return (uint64_t)b * base + ((uint64_t)b < rem ? (uint64_t)b : rem);
}

static uint64_t blk_len(uint64_t n, int32_t w, int32_t b)
{
	return n / (uint64_t)w + ((uint64_t)b < n % (uint64_t)w ? 1 : 0);
}

/* Elements [k*c, k*c + c) of a block of len elements, clipped (0 past the end). */
static uint64_t slice(uint64_t len, uint64_t c, uint64_t k)
{
	uint64_t lo = k * c;
	if (lo >= len)
		return 0;
	return len - lo < c ? len - lo : c;
}

/* Stage slot of peer p (every rank but this one has one). */
static char *stage_of(tcp_state *st, int32_t p, uint64_t chunk_elems, size_t esz)
{
	int32_t i = p < st->rank ? p : p - 1;
	return st->stage + (uint64_t)i * chunk_elems * esz;
}

/* The reduction half: receive every peer's slice k of this rank's block into
 * the stage and send it slice k of theirs (block b starts at off(b), has
 * len(b) elements).  `even`: blocks of r->count each (reduce_scatter),
 * else the all-reduce's split of r->count. */
static void add_inputs(tcp_state *st, accel_comm_req *r, xfer *x, int *n, uint64_t k, uint64_t c,
                       int even)
{
	const int32_t w = st->world;
	for (int32_t p = 0; p < w; p++) {
		if (p == st->rank)
			continue;
		uint64_t off = even ? (uint64_t)p * r->count : blk_off(r->count, w, p);
		uint64_t len = even ? r->count : blk_len(r->count, w, p);
		uint64_t mlen = even ? r->count : blk_len(r->count, w, st->rank);
		add_x(x, n, p, 1, r->src + (off + k * c) * r->esz, slice(len, c, k) * r->esz);
		add_x(x, n, p, 0, stage_of(st, p, c, r->esz), slice(mlen, c, k) * r->esz);
	}
}

/* Reduce slice k of this rank's block, in rank order, into out. */
static void reduce_slice(tcp_state *st, accel_comm_req *r, uint64_t k, uint64_t c, const char *own,
                         char *out, uint64_t mlen)
{
	uint64_t m = slice(mlen, c, k);
	if (!m)
		return;
	for (int32_t q = 0; q < st->world; q++)
		st->in_ptrs[q] = q == st->rank ? own + k * c * r->esz : stage_of(st, q, c, r->esz);
	void *o = out + k * c * r->esz;
	coll_reduce(r->dtype, r->red, st->world, st->in_ptrs, 1, &o, m, st->world);
}

static int run_allreduce(tcp_state *st, accel_comm_req *r, int64_t deadline)
{
	const int32_t w = st->world, me = st->rank;
	uint64_t c = st->chunk_bytes / r->esz;
	uint64_t moff = blk_off(r->count, w, me), mlen = blk_len(r->count, w, me);
	uint64_t maxlen = blk_len(r->count, w, 0);
	uint64_t rounds = (maxlen + c - 1) / c;
	xfer *x = st->xs;
	int rc = ACCEL_OK, n = 0;
	if (rounds) {
		add_inputs(st, r, x, &n, 0, c, 0);
		rc = tcp_exchange(st, r, x, n, deadline, 0, 0);
	}
	for (uint64_t k = 0; k < rounds && rc == ACCEL_OK; k++) {
		reduce_slice(st, r, k, c, r->src + moff * r->esz, r->dst + moff * r->esz, mlen);
		/* the results of round k, then the inputs of round k + 1 (an
		 * in-place buffer's slice k was sent in round k's inputs) */
		n = 0;
		for (int32_t p = 0; p < w; p++) {
			if (p == me)
				continue;
			uint64_t po = blk_off(r->count, w, p), pl = blk_len(r->count, w, p);
			add_x(x, &n, p, 1, r->dst + (moff + k * c) * r->esz, slice(mlen, c, k) * r->esz);
			add_x(x, &n, p, 0, r->dst + (po + k * c) * r->esz, slice(pl, c, k) * r->esz);
		}
		if (k + 1 < rounds)
			add_inputs(st, r, x, &n, k + 1, c, 0);
		rc = tcp_exchange(st, r, x, n, deadline, 0, 0);
	}
	return rc;
}

static int run_reduce_scatter(tcp_state *st, accel_comm_req *r, int64_t deadline)
{
	uint64_t c = st->chunk_bytes / r->esz;
	uint64_t rounds = (r->count + c - 1) / c;
	const char *own = r->src + (uint64_t)st->rank * r->count * r->esz;
	xfer *x = st->xs;
	int rc = ACCEL_OK;
	for (uint64_t k = 0; k < rounds && rc == ACCEL_OK; k++) {
		int n = 0;
		add_inputs(st, r, x, &n, k, c, 1);
		/* in place with the result at the buffer's start: slice k of
		 * block 0 was sent above before it is overwritten here */
		if ((rc = tcp_exchange(st, r, x, n, deadline, 0, 0)) == ACCEL_OK)
			reduce_slice(st, r, k, c, own, r->dst, r->count);
	}
	return rc;
}

static int run_allgather(tcp_state *st, accel_comm_req *r, int64_t deadline)
{
	const int32_t w = st->world;
	uint64_t bytes = r->count * r->esz;
	char *slot = r->dst + (uint64_t)st->rank * bytes;
	if (r->src != slot && bytes)
		memcpy(slot, r->src, bytes);  /* disjoint: the core refuses other overlaps */
	xfer *x = st->xs;
	int n = 0;
	for (int32_t p = 0; p < w; p++) {
		if (p == st->rank)
			continue;
		add_x(x, &n, p, 1, slot, bytes);
		add_x(x, &n, p, 0, r->dst + (uint64_t)p * bytes, bytes);
	}
	return tcp_exchange(st, r, x, n, deadline, 0, 0);
}

static int run_broadcast(tcp_state *st, accel_comm_req *r, int64_t deadline)
{
	const int32_t w = st->world;
	int32_t pos = (st->rank - r->root + w) % w;
	int32_t prev = (st->rank - 1 + w) % w, next = (st->rank + 1) % w;
	uint64_t bytes = r->count * r->esz, c = st->chunk_bytes;
	uint64_t rounds = (bytes + c - 1) / c;
	xfer x[2];
	int n, rc = ACCEL_OK;
	if (pos == 0 || pos == w - 1) {
		/* the root only sends, the chain's end only receives */
		n = 0;
		add_x(x, &n, pos == 0 ? next : prev, pos == 0, r->dst, bytes);
		return tcp_exchange(st, r, x, n, deadline, 0, 0);
	}
	/* round k: receive chunk k, pass chunk k - 1 on */
	for (uint64_t k = 0; k <= rounds && rc == ACCEL_OK; k++) {
		n = 0;
		if (k < rounds)
			add_x(x, &n, prev, 0, r->dst + k * c, slice(bytes, c, k));
		if (k > 0)
			add_x(x, &n, next, 1, r->dst + (k - 1) * c, slice(bytes, c, k - 1));
		rc = tcp_exchange(st, r, x, n, deadline, 0, 0);
	}
	return rc;
}

/* A small op in one exchange (an all-reduce, all-gather or broadcast of at
 * most small_kb): every rank sends its header and its payload (copied
 * behind the header, so one send carries both) to every peer, checks the
 * peers' headers, then reads their payloads.  The all-reduce payload is the
 * whole buffer, and each rank reduces all W inputs in rank order itself
 * (the same bits as the pipelined form, which reduces each element in the
 * same order); the all-gather's is this rank's block; the broadcast's the
 * root's buffer (the others send their header only). */
static int run_small(tcp_state *st, accel_comm_req *r, int64_t deadline)
{
	const int32_t w = st->world;
	uint64_t bytes = r->count * r->esz, plen = bytes;
	const char *payload = r->src;
	if (r->kind == OP_ALLGATHER) {
		/* own block into its slot first: in place with the block at the
		 * buffer's start, peer 0's block lands there */
		char *slot = r->dst + (uint64_t)st->rank * bytes;
		if (r->src != slot && bytes)
			memcpy(slot, r->src, bytes);
		payload = slot;
	} else if (r->kind == OP_BROADCAST) {
		payload = r->dst;
		plen = st->rank == r->root ? bytes : 0;
	}
	xfer *x = st->xs;
	int n, rc;
	tcp_req_hdr(r, &r->hdr);
	memcpy(st->small_buf, &r->hdr, sizeof(op_hdr));
	if (plen)
		memcpy(st->small_buf + sizeof(op_hdr), payload, plen);
	rc = run_header(st, r, deadline, st->small_buf, sizeof(op_hdr) + plen, x, &n, 1);
	if (rc == ACCEL_OK) {
		for (int32_t p = 0; p < w; p++) {
			if (p == st->rank)
				continue;
			if (r->kind == OP_ALLREDUCE)
				add_x(x, &n, p, 0, stage_of(st, p, st->chunk_bytes, 1), bytes);
			else if (r->kind == OP_ALLGATHER)
				add_x(x, &n, p, 0, r->dst + (uint64_t)p * bytes, bytes);
			else if (p == r->root)
				add_x(x, &n, p, 0, r->dst, bytes);
		}
		rc = tcp_exchange(st, r, x, n, deadline, 0, 0);
	}
	if (rc == ACCEL_OK && r->kind == OP_ALLREDUCE && r->count) {
		for (int32_t q = 0; q < w; q++)
			st->in_ptrs[q] = q == st->rank ? r->src : stage_of(st, q, st->chunk_bytes, 1);
		void *o = r->dst;
		coll_reduce(r->dtype, r->red, w, st->in_ptrs, 1, &o, r->count, w);
	}
	return rc;
}

int tcp_ops_run(tcp_state *st, accel_comm_req *r)
{
	int64_t deadline = mono_deadline_ns(st->timeout_ms);
	if (st->world == 1) {
		/* nothing to exchange: the reduction of one input, or a copy */
		if (r->kind == OP_ALLREDUCE || r->kind == OP_REDUCE_SCATTER) {
			const void *in = r->src;
			void *out = r->dst;
			if (r->count)
				coll_reduce(r->dtype, r->red, 1, &in, 1, &out, r->count, 1);
		} else if (r->kind == OP_ALLGATHER && r->src != r->dst && r->count) {
			memcpy(r->dst, r->src, r->count * r->esz);
		}
		return ACCEL_OK;
	}
	if ((r->kind == OP_ALLREDUCE || r->kind == OP_ALLGATHER || r->kind == OP_BROADCAST) &&
	    r->count * r->esz <= st->small_bytes)
		return run_small(st, r, deadline);
	int n, rc;
	tcp_req_hdr(r, &r->hdr);
	if ((rc = run_header(st, r, deadline, &r->hdr, sizeof(op_hdr), st->xs, &n, 0)))
		return rc;
	switch (r->kind) {
	case OP_ALLREDUCE: return run_allreduce(st, r, deadline);
	case OP_REDUCE_SCATTER: return run_reduce_scatter(st, r, deadline);
	case OP_ALLGATHER: return run_allgather(st, r, deadline);
	case OP_BROADCAST: return run_broadcast(st, r, deadline);
	default: return ACCEL_OK;  /* barrier: the headers were it */
	}
}
