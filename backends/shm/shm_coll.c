/* SPDX-License-Identifier: MIT */
/* backends/shm/shm_coll.c: the collective algorithms.
 *
 * Every op starts the same way: the rank writes a descriptor of the op into
 * its line of the segment and publishes the op's sequence number ("posts"),
 * then waits until every rank has posted that number and checks that all
 * ranks issued the same op.  Then one of three algorithms runs, chosen from
 * data every rank has, so all ranks choose the same:
 *
 *  - one-shot (payload <= small_bytes): the payload was copied into the
 *    rank's slot together with the post; every rank reads all slots.  Slots
 *    are double buffered by sequence parity: a rank that posts op s+2 (and
 *    overwrites slot parity s) has seen every rank post s+1, which each did
 *    only after finishing op s.  No trailing synchronization.
 *  - zero-copy (every rank's buffers are backend-allocated): each rank reads
 *    the peers' buffers directly, reduces its 1/N slice and writes the
 *    result into every rank's output, then a final phase barrier.
 *  - pipelined staging (everything else): the data goes in rounds through a
 *    ring of `depth` staging buffers; in each round every rank copies the
 *    parts the others reduce into its buffer, reduces its own part reading
 *    the others' buffers, publishes the result, and copies the others'
 *    results out (reduce-scatter + all-gather).  Each rank reduces 1/N.
 *    A large all-reduce on two ranks instead stages the whole round and
 *    both ranks reduce all of it (staged_allreduce_pair).
 *
 * Progress inside ops is a per-rank phase counter (`sig`) that increases by
 * the same steps on every rank; "wait until every rank passed phase p" is
 * the only synchronization.  A staging buffer is rewritten only after every
 * rank passed the phase in which it finished reading it (reuse[]). */
#include <stdio.h>
#include <string.h>

#include "backends/common/coll-copy.h"
#include "shm-impl.h"

static uint64_t op_payload(const shm_comm *c, const shm_op *op)
{
	uint64_t es = accel_abi_dtype_size(op->dtype);
	switch (op->kind & SHM_OP_KIND_MASK) {
	case SHM_OP_ALLREDUCE:
	case SHM_OP_ALLGATHER:
	case SHM_OP_BROADCAST:
		return op->count * es;
	case SHM_OP_REDUCE_SCATTER:
		return op->count * es * (uint64_t)c->world;
	default:
		return 0;
	}
}

int shm_coll_is_small(const shm_comm *c, const shm_op *op)
{
	return op_payload(c, op) <= c->small_bytes;
}

static char *slot(const shm_comm *c, int32_t q, uint64_t seq)
{
	return c->small + ((uint64_t)q * 2 + (seq & 1)) * c->small_bytes;
}

static char *stage(const shm_comm *c, int32_t q, uint64_t b)
{
	return c->stage + (uint64_t)q * c->stage_rank_bytes + b * (uint64_t)c->world * c->chunk_bytes;
}

static int ranges_overlap(const void *a, uint64_t an, const void *b, uint64_t bn)
{
	const char *x = a, *y = b;
	return an && bn && x < y + bn && y < x + an;
}

void shm_coll_post(shm_comm *c, shm_op *op)
{
	shm_rank *me = &c->ranks[c->rank];
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint32_t kind = op->kind & SHM_OP_KIND_MASK;
	int32_t salloc = -1, ralloc = -1;
	uint64_t soff = 0, roff = 0;

	if (c->world == 1) {
		/* nothing to share */
	} else if (shm_coll_is_small(c, op)) {
		char *dst = slot(c, c->rank, op->seq);
		uint64_t n = op_payload(c, op);
		if (n && (kind != SHM_OP_BROADCAST || op->root == c->rank))
			memcpy(dst, op->send.data, n);
	} else {
		uint64_t sbytes = op_payload(c, op), rbytes = 0;
		if (kind == SHM_OP_ALLREDUCE)
			rbytes = sbytes;
		else if (kind == SHM_OP_REDUCE_SCATTER)
			rbytes = op->count * es;
		else if (kind == SHM_OP_ALLGATHER)
			rbytes = op->count * es * (uint64_t)c->world;
		const shm_alloc *a = shm_mem_find(c, op->send.data, sbytes, &soff);
		salloc = a ? a->index : -1;
		if (kind != SHM_OP_BROADCAST) {
			a = shm_mem_find(c, op->recv.data, rbytes, &roff);
			ralloc = a ? a->index : -1;
		}
		/* Overlaps other than the in-place forms every rank expects
		 * (recv == send + rank block) rule out direct access by peers. */
		if (kind == SHM_OP_ALLGATHER) {
			char *own = (char *)op->recv.data + (uint64_t)c->rank * op->count * es;
			if (op->send.data != own && ranges_overlap(op->send.data, sbytes, op->recv.data, rbytes))
				op->kind |= SHM_OPF_ALIAS;
		} else if (kind == SHM_OP_REDUCE_SCATTER) {
			char *own = (char *)op->send.data + (uint64_t)c->rank * op->count * es;
			if (op->recv.data != own && ranges_overlap(op->send.data, sbytes, op->recv.data, rbytes))
				op->kind |= SHM_OPF_ALIAS;
		}
	}
	uint32_t code = (op->kind & SHM_OP_KIND_MASK) | ((op->kind & SHM_OPF_ALIAS) ? 1u << 8 : 0) |
	                (op->dtype & 0xffu) << 16 | (op->redop & 0xffu) << 24;
	uint32_t v = atomic_load_explicit(&me->dver, memory_order_relaxed);
	atomic_store_explicit(&me->dver, v + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&me->code, code, memory_order_relaxed);
	atomic_store_explicit(&me->root, op->root, memory_order_relaxed);
	atomic_store_explicit(&me->count, op->count, memory_order_relaxed);
	atomic_store_explicit(&me->send_alloc, salloc, memory_order_relaxed);
	atomic_store_explicit(&me->recv_alloc, ralloc, memory_order_relaxed);
	atomic_store_explicit(&me->send_off, soff, memory_order_relaxed);
	atomic_store_explicit(&me->recv_off, roff, memory_order_relaxed);
	atomic_store_explicit(&me->dseq, (uint32_t)op->seq, memory_order_relaxed);
	atomic_store_explicit(&me->dver, v + 2, memory_order_release);
	shm_post_seq(c, op->seq);
	op->posted = 1;
}

int shm_coll_arrived(shm_comm *c, const shm_op *op)
{
	for (int32_t q = 0; q < c->world; q++)
		if (atomic_load_explicit(&c->ranks[q].seq, memory_order_acquire) < op->seq)
			return 0;
	return 1;
}

/* A peer's posted descriptor, read under the sequence lock. */
typedef struct peer_desc {
	shm_op op;
	int32_t send_alloc, recv_alloc;
	uint64_t send_off, recv_off;
} peer_desc;

static int read_peer(const shm_comm *c, int32_t q, uint64_t seq, peer_desc *d)
{
	shm_rank *r = &c->ranks[q];
	uint32_t v1 = atomic_load_explicit(&r->dver, memory_order_acquire);
	uint64_t s1 = atomic_load_explicit(&r->seq, memory_order_acquire);
	memset(d, 0, sizeof(*d));
	uint32_t code = atomic_load_explicit(&r->code, memory_order_relaxed);
	d->op.root = atomic_load_explicit(&r->root, memory_order_relaxed);
	d->op.count = atomic_load_explicit(&r->count, memory_order_relaxed);
	d->send_alloc = atomic_load_explicit(&r->send_alloc, memory_order_relaxed);
	d->recv_alloc = atomic_load_explicit(&r->recv_alloc, memory_order_relaxed);
	d->send_off = atomic_load_explicit(&r->send_off, memory_order_relaxed);
	d->recv_off = atomic_load_explicit(&r->recv_off, memory_order_relaxed);
	uint32_t dseq = atomic_load_explicit(&r->dseq, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	uint32_t v2 = atomic_load_explicit(&r->dver, memory_order_relaxed);
	uint64_t s2 = atomic_load_explicit(&r->seq, memory_order_relaxed);
	d->op.kind = (code & 0xffu) | ((code & (1u << 8)) ? SHM_OPF_ALIAS : 0);
	d->op.dtype = (code >> 16) & 0xffu;
	d->op.redop = code >> 24;
	d->op.seq = seq;
	/* 0: the peer is already posting a later op (so it finished this one) */
	return v1 == v2 && !(v1 & 1u) && dseq == (uint32_t)seq && s1 == seq && s2 == seq;
}

static int same_op(const shm_op *a, const shm_op *b)
{
	uint32_t kind = a->kind & SHM_OP_KIND_MASK;
	if (kind != (b->kind & SHM_OP_KIND_MASK))
		return 0;
	if (kind == SHM_OP_BARRIER)
		return 1;
	if (a->dtype != b->dtype || a->count != b->count)
		return 0;
	if ((kind == SHM_OP_ALLREDUCE || kind == SHM_OP_REDUCE_SCATTER) && a->redop != b->redop)
		return 0;
	if (kind == SHM_OP_BROADCAST && a->root != b->root)
		return 0;
	return 1;
}

static int validate(shm_comm *c, const shm_op *op, char *msg, size_t cap)
{
	for (int32_t q = 0; q < c->world; q++) {
		peer_desc d;
		if (q == c->rank || !read_peer(c, q, op->seq, &d))
			continue;
		if (same_op(op, &d.op))
			continue;
		char mine[160], theirs[160];
		shm_op_describe(c, op, mine, sizeof(mine));
		shm_op_describe(c, &d.op, theirs, sizeof(theirs));
		shm_fmt(msg, cap,
		         "collective mismatch: rank %d issued %s but rank %d issued %s; every rank "
		         "must issue the same collectives with the same sizes in the same order",
		         shm_wr(c, c->rank), mine, shm_wr(c, q), theirs);
		return ACCEL_ERR_COMM;
	}
	return ACCEL_OK;
}

/* ---- synchronization helpers ---- */

typedef struct run_ctx {
	shm_comm *c;
	const shm_op *op;
	uint64_t deadline;
	int64_t spin_ns;          /* for the arrival */
	int64_t phase_spin_ns;    /* for the phase waits inside the op */
	char *msg;
	size_t cap;
} run_ctx;

static int next_phase(run_ctx *r)
{
	shm_comm *c = r->c;
	c->phase++;
	shm_post_sig(c, c->phase);
	return ACCEL_OK;
}

static int wait_phase(run_ctx *r, uint64_t phase, int32_t which)
{
	return shm_wait(r->c, r->op, 1, phase, which, r->deadline, r->phase_spin_ns, r->msg, r->cap);
}

/* Take the next staging buffer once every rank is done reading its last
 * use.  Returns the buffer index in *ret_b. */
static int stage_acquire(run_ctx *r, uint64_t *ret_b, int need)
{
	shm_comm *c = r->c;
	uint64_t b = c->round++ % c->depth;
	*ret_b = b;
	if (!need || c->reuse[b] == 0)
		return ACCEL_OK;
	return wait_phase(r, c->reuse[b], -1);
}

/* Split [0, len) into world parts whose boundaries are multiples of
 * `align` elements (cache lines); parts at the end may be empty. */
static void split(uint64_t len, int32_t world, int32_t q, uint64_t align, uint64_t *lo,
                  uint64_t *hi)
{
	uint64_t per = (len + (uint64_t)world - 1) / (uint64_t)world;
	per = (per + align - 1) / align * align;
	uint64_t a = per * (uint64_t)q;
	*lo = a < len ? a : len;
	*hi = *lo + per < len ? *lo + per : len;
}

/* ---- one-shot ---- */

static int run_small(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t n = op->count;
	const void **in = c->in_ptrs;

	switch (op->kind & SHM_OP_KIND_MASK) {
	case SHM_OP_ALLREDUCE: {
		if (!n)
			break;
		for (int32_t q = 0; q < c->world; q++)
			in[q] = slot(c, q, op->seq);
		void *out = op->recv.data;
		coll_reduce(op->dtype, op->redop, c->world, in, 1, &out, n, c->world);
		break;
	}
	case SHM_OP_REDUCE_SCATTER: {
		if (!n)
			break;
		for (int32_t q = 0; q < c->world; q++)
			in[q] = slot(c, q, op->seq) + (uint64_t)c->rank * n * es;
		void *out = op->recv.data;
		coll_reduce(op->dtype, op->redop, c->world, in, 1, &out, n, c->world);
		break;
	}
	case SHM_OP_ALLGATHER:
		if (!n)
			break;
		for (int32_t q = 0; q < c->world; q++) {
			char *dst = (char *)op->recv.data + (uint64_t)q * n * es;
			memcpy(dst, slot(c, q, op->seq), n * es);
		}
		break;
	case SHM_OP_BROADCAST:
		if (n && c->rank != op->root)
			memcpy(op->send.data, slot(c, op->root, op->seq), n * es);
		break;
	default:
		break;
	}
	return ACCEL_OK;
}

/* ---- zero-copy on backend-allocated buffers ---- */

static char *peer_ptr(const shm_alloc *a, int32_t q, uint64_t off)
{
	return a->base + (uint64_t)q * a->stride + off;
}

/* Can every rank's buffers be reached directly?  Decided from the posted
 * descriptors alone, which every rank sees alike, so that every rank takes
 * the same path.  Each rank's own buffers must lie in the allocation the
 * others use (also for a broadcast: a rank's mapping of an allocation ends
 * with its own mem_free, which is not collective, so only a rank that
 * posts an allocation is known to have it mapped). */
static int zero_copy_plan(run_ctx *r, const shm_alloc **ret_s, const shm_alloc **ret_r,
                          uint64_t *soff, uint64_t *roff)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint32_t kind = op->kind & SHM_OP_KIND_MASK;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t sbytes = op_payload(c, op);
	uint64_t rbytes = kind == SHM_OP_ALLREDUCE ? sbytes
	                : kind == SHM_OP_REDUCE_SCATTER ? op->count * es
	                : kind == SHM_OP_ALLGATHER ? op->count * es * (uint64_t)c->world : 0;
	int need_recv = kind == SHM_OP_ALLREDUCE;
	int32_t sidx = -2, ridx = -2;

	for (int32_t q = 0; q < c->world; q++) {
		peer_desc d;
		if (!read_peer(c, q, op->seq, &d))
			return 0;   /* cannot happen for non-small ops; be safe */
		if (d.op.kind & SHM_OPF_ALIAS)
			return 0;
		if (d.send_alloc < 0 || (sidx != -2 && d.send_alloc != sidx))
			return 0;
		sidx = d.send_alloc;
		soff[q] = d.send_off;
		if (need_recv) {
			if (d.recv_alloc < 0 || (ridx != -2 && d.recv_alloc != ridx))
				return 0;
			ridx = d.recv_alloc;
			roff[q] = d.recv_off;
		}
	}
	/* This rank posted both indexes itself, so it maps them (a mem_free
	 * waits for the collectives in flight). */
	const shm_alloc *sa = shm_mem_by_index(c, sidx);
	const shm_alloc *ra = need_recv ? shm_mem_by_index(c, ridx) : NULL;
	if (!sa || (need_recv && !ra))
		return 0;
	/* The offsets come from peers: keep them inside the buffers. */
	for (int32_t q = 0; q < c->world; q++) {
		if (soff[q] + sbytes > sa->bytes || (need_recv && roff[q] + rbytes > ra->bytes))
			return 0;
	}
	*ret_s = sa;
	*ret_r = ra;
	return 1;
}

static int run_zero_copy(run_ctx *r, const shm_alloc *sa, const shm_alloc *ra, const uint64_t *soff,
                         const uint64_t *roff)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t n = op->count;
	int32_t me = c->rank, w = c->world;
	const void **in = c->in_ptrs;
	void **out = c->out_ptrs;

	switch (op->kind & SHM_OP_KIND_MASK) {
	case SHM_OP_ALLREDUCE: {
		uint64_t lo, hi;
		split(n, w, me, 64 / es, &lo, &hi);
		if (hi > lo) {
			for (int32_t q = 0; q < w; q++) {
				in[q] = peer_ptr(sa, q, soff[q]) + lo * es;
				out[q] = peer_ptr(ra, q, roff[q]) + lo * es;
			}
			coll_reduce(op->dtype, op->redop, w, in, w, out, hi - lo, w);
		}
		break;
	}
	case SHM_OP_REDUCE_SCATTER: {
		for (int32_t q = 0; q < w; q++)
			in[q] = peer_ptr(sa, q, soff[q]) + (uint64_t)me * n * es;
		out[0] = op->recv.data;
		coll_reduce(op->dtype, op->redop, w, in, 1, out, n, w);
		break;
	}
	case SHM_OP_ALLGATHER:
		for (int32_t q = 0; q < w; q++) {
			char *dst = (char *)op->recv.data + (uint64_t)q * n * es;
			const char *src = peer_ptr(sa, q, soff[q]);
			if (dst != src)
				memcpy(dst, src, n * es);
		}
		break;
	case SHM_OP_BROADCAST:
		if (me != op->root) {
			const char *src = peer_ptr(sa, op->root, soff[op->root]);
			if (src != (char *)op->send.data)
				memcpy(op->send.data, src, n * es);
		}
		break;
	default:
		break;
	}
	/* Nobody may reuse its buffers before every rank is done with them. */
	next_phase(r);
	return wait_phase(r, c->phase, -1);
}

/* ---- pipelined staging ---- */

/* The all-gather half of round `g` (staging buffer b): copy the others'
 * results out once they posted them (phase p_red). */
typedef struct gather_job {
	int valid;
	uint64_t base, len, b, p_red;
	int stream;               /* all-gather: results with streaming stores */
} gather_job;

static int allreduce_gather(run_ctx *r, const gather_job *g)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	int32_t me = c->rank, w = c->world;
	char *recv = op->recv.data;
	int st;
	for (int32_t k = 1; k < w; k++) {
		int32_t q = (me + k) % w;    /* stagger who reads whom */
		uint64_t lo, hi;
		split(g->len, w, q, 64 / es, &lo, &hi);
		if (hi <= lo)
			continue;
		if ((st = wait_phase(r, g->p_red, q)))
			return st;
		memcpy(recv + (g->base + lo) * es, stage(c, q, g->b) + (uint64_t)q * c->chunk_bytes,
		       (hi - lo) * es);
	}
	/* Every rank's next post says it is done reading buffer b. */
	c->reuse[g->b] = c->phase + 1;
	return ACCEL_OK;
}

/* Reduce-scatter + all-gather in rounds.  The all-gather of a round runs
 * after the reduction of the next one, when the others' results are
 * normally there already: the only wait that couples the ranks tightly is
 * "everyone copied this round in". */
static int staged_allreduce(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t align = 64 / es;
	uint64_t chunk = c->chunk_bytes / es;         /* elements per rank and round */
	int32_t me = c->rank, w = c->world;
	const char *send = op->send.data;
	char *recv = op->recv.data;
	const void **in = c->in_ptrs;
	void **out = c->out_ptrs;
	gather_job prev = {0};
	int st;

	for (uint64_t base = 0; base < op->count;) {
		uint64_t len = op->count - base;
		if (len > chunk * (uint64_t)w)
			len = chunk * (uint64_t)w;
		uint64_t b, lo, hi;
		if ((st = stage_acquire(r, &b, 1)))
			return st;
		char *mine = stage(c, me, b);
		for (int32_t q = 0; q < w; q++) {
			if (q == me)
				continue;
			split(len, w, q, align, &lo, &hi);
			if (hi > lo)
				memcpy(mine + (uint64_t)q * c->chunk_bytes, send + (base + lo) * es, (hi - lo) * es);
		}
		next_phase(r);
		if ((st = wait_phase(r, c->phase, -1)))
			return st;
		split(len, w, me, align, &lo, &hi);
		if (hi > lo) {
			for (int32_t q = 0; q < w; q++)
				in[q] = q == me ? send + (base + lo) * es
				                : stage(c, q, b) + (uint64_t)me * c->chunk_bytes;
			out[0] = recv + (base + lo) * es;
			out[1] = mine + (uint64_t)me * c->chunk_bytes;
			coll_reduce(op->dtype, op->redop, w, in, 2, out, hi - lo, w);
		}
		next_phase(r);
		if (prev.valid && (st = allreduce_gather(r, &prev)))
			return st;
		prev = (gather_job){1, base, len, b, c->phase, 0};
		base += len;
	}
	if (prev.valid) {
		if ((st = allreduce_gather(r, &prev)))
			return st;
		next_phase(r);
	}
	return ACCEL_OK;
}

/* The second half of a staged round in which every rank reduces from the
 * others' staging buffers b (c->in_ptrs, set by the caller): publish that
 * this rank staged its part, wait until every rank has, reduce the
 * world inputs into dst, and release b once every rank has passed the
 * reduction phase. */
static int reduce_staged_round(run_ctx *r, uint64_t b, void *dst, uint64_t len)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	int st;
	next_phase(r);
	if ((st = wait_phase(r, c->phase, -1)))
		return st;
	c->out_ptrs[0] = dst;
	coll_reduce(op->dtype, op->redop, c->world, c->in_ptrs, 1, c->out_ptrs, len, c->world);
	next_phase(r);
	c->reuse[b] = c->phase;
	return ACCEL_OK;
}

/* Two ranks: each stages its whole round and reduces the whole round from
 * its own input and the other's copy, in rank order, so both compute the
 * same bits.  Each element still crosses between the cores once each way,
 * as in the reduce-scatter + all-gather form, but with one synchronization
 * per round instead of two and no copy of results through the ring; the
 * price is that both ranks do all the arithmetic (memory-bound here: the
 * 64 MiB all-reduce went from 16.6-19.5 to 15.2-16.6 ms in place, from
 * 24.6-29.8 to 22.5-24.8 ms out of place, 2 ranks on the 2-vCPU VM). */
static int staged_allreduce_pair(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t chunk = (uint64_t)c->world * c->chunk_bytes / es;   /* a whole buffer */
	int32_t me = c->rank, w = c->world;
	const char *send = op->send.data;
	char *recv = op->recv.data;
	const void **in = c->in_ptrs;
	int st;

	for (uint64_t base = 0; base < op->count;) {
		uint64_t len = op->count - base < chunk ? op->count - base : chunk;
		uint64_t b;
		if ((st = stage_acquire(r, &b, 1)))
			return st;
		memcpy(stage(c, me, b), send + base * es, len * es);
		for (int32_t q = 0; q < w; q++)
			in[q] = q == me ? send + base * es : stage(c, q, b);
		if ((st = reduce_staged_round(r, b, recv + base * es, len)))
			return st;
		base += len;
	}
	return ACCEL_OK;
}

static int staged_reduce_scatter(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t chunk = c->chunk_bytes / es;
	uint64_t n = op->count;
	int32_t me = c->rank, w = c->world;
	const char *send = op->send.data;
	char *recv = op->recv.data;
	const void **in = c->in_ptrs;
	int st;

	for (uint64_t base = 0; base < n;) {
		uint64_t len = n - base < chunk ? n - base : chunk;
		uint64_t b;
		if ((st = stage_acquire(r, &b, 1)))
			return st;
		char *mine = stage(c, me, b);
		for (int32_t q = 0; q < w; q++)
			if (q != me)
				memcpy(mine + (uint64_t)q * c->chunk_bytes, send + ((uint64_t)q * n + base) * es,
				       len * es);
		for (int32_t q = 0; q < w; q++)
			in[q] = q == me ? send + ((uint64_t)me * n + base) * es
			                : stage(c, q, b) + (uint64_t)me * c->chunk_bytes;
		if ((st = reduce_staged_round(r, b, recv + base * es, len)))
			return st;
		base += len;
	}
	return ACCEL_OK;
}

/* Results into user buffers: streaming stores for large ones (see
 * shm.stream_kb and backends/common/coll_copy.c), memcpy otherwise. */
static void copy_result(int stream, void *dst, const void *src, uint64_t bytes)
{
	if (stream)
		coll_copy_stream(dst, src, bytes);
	else
		memcpy(dst, src, bytes);
}

/* dst_stage = dst_res = src, reading src from memory once: block by block,
 * the second copy reads the block the first just brought into the cache. */
static void copy2(char *dst_stage, char *dst_res, const char *src, uint64_t bytes, int stream)
{
	const uint64_t blk = 16384;
	for (uint64_t o = 0; o < bytes; o += blk) {
		uint64_t k = bytes - o < blk ? bytes - o : blk;
		memcpy(dst_stage + o, src + o, k);
		copy_result(stream, dst_res + o, src + o, k);
	}
}

/* Copy the others' blocks of round (base, len) out of their staging
 * buffers b, once they posted them (phase p_in). */
static int allgather_out(run_ctx *r, const gather_job *g)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	int32_t me = c->rank, w = c->world;
	char *recv = op->recv.data;
	int st;
	for (int32_t k = 1; k < w; k++) {
		int32_t q = (me + k) % w;
		if ((st = wait_phase(r, g->p_red, q)))
			return st;
		copy_result(g->stream, recv + ((uint64_t)q * op->count + g->base) * es,
		            stage(c, q, g->b), g->len * es);
	}
	c->reuse[g->b] = c->phase + 1;   /* our next post: done reading buffer b */
	return ACCEL_OK;
}

/* Each round stages one block piece and copies the others' pieces of the
 * previous round, which they normally posted long ago. */
static int staged_allgather(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t chunk = (uint64_t)c->world * c->chunk_bytes / es;   /* a whole buffer */
	uint64_t n = op->count;
	int32_t me = c->rank;
	const char *send = op->send.data;
	char *recv = op->recv.data;
	gather_job prev = {0};
	/* A large result goes past the caches: it does not fit, and the lines
	 * it replaces need not be read first (measured: the 64 MiB all-gather
	 * on 2 ranks, see docs/comm.md, "Streaming stores"). */
	int stream = c->stream_bytes && n * es * (uint64_t)c->world >= c->stream_bytes;
	int st;

	for (uint64_t base = 0; base < n;) {
		uint64_t len = n - base < chunk ? n - base : chunk;
		uint64_t b;
		if ((st = stage_acquire(r, &b, 1)))
			return st;
		char *own = recv + ((uint64_t)me * n + base) * es;
		const char *src = send + base * es;
		if (own != src && !ranges_overlap(own, len * es, src, len * es)) {
			copy2(stage(c, me, b), own, src, len * es, stream);   /* one read of src */
			next_phase(r);
		} else {
			memcpy(stage(c, me, b), src, len * es);
			next_phase(r);
			if (own != src)
				memmove(own, src, len * es);
		}
		uint64_t p_in = c->phase;
		if (prev.valid && (st = allgather_out(r, &prev)))
			return st;
		prev = (gather_job){1, base, len, b, p_in, stream};
		base += len;
	}
	if (prev.valid) {
		if ((st = allgather_out(r, &prev)))
			return st;
		next_phase(r);
	}
	return ACCEL_OK;
}

static int staged_broadcast(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_op *op = r->op;
	uint64_t es = accel_abi_dtype_size(op->dtype);
	uint64_t chunk = (uint64_t)c->world * c->chunk_bytes;   /* bytes */
	uint64_t bytes = op->count * es;
	char *buf = op->send.data;
	int32_t root = op->root;
	int st;

	for (uint64_t base = 0; base < bytes;) {
		uint64_t len = bytes - base < chunk ? bytes - base : chunk;
		uint64_t b;
		if ((st = stage_acquire(r, &b, c->rank == root)))
			return st;
		if (c->rank == root)
			memcpy(stage(c, root, b), buf + base, len);
		next_phase(r);
		if (c->rank != root) {
			if ((st = wait_phase(r, c->phase, root)))
				return st;
			memcpy(buf + base, stage(c, root, b), len);
		}
		next_phase(r);
		c->reuse[b] = c->phase;
		base += len;
	}
	return ACCEL_OK;
}

static int run_large(run_ctx *r)
{
	shm_comm *c = r->c;
	const shm_alloc *sa = NULL, *ra = NULL;

	if (zero_copy_plan(r, &sa, &ra, c->zc_soff, c->zc_roff))
		return run_zero_copy(r, sa, ra, c->zc_soff, c->zc_roff);
	switch (r->op->kind & SHM_OP_KIND_MASK) {
	case SHM_OP_ALLREDUCE:
		/* From three rounds on, the pair form's single synchronization
		 * per round outweighs its doubled arithmetic (measured). */
		if (c->world == 2 && op_payload(c, r->op) > 2 * (uint64_t)c->world * c->chunk_bytes)
			return staged_allreduce_pair(r);
		return staged_allreduce(r);
	case SHM_OP_REDUCE_SCATTER: return staged_reduce_scatter(r);
	case SHM_OP_ALLGATHER: return staged_allgather(r);
	case SHM_OP_BROADCAST: return staged_broadcast(r);
	default: return ACCEL_OK;
	}
}

/* One rank: the result is the input. */
static void run_single(const shm_op *op)
{
	uint64_t bytes = op->count * accel_abi_dtype_size(op->dtype);
	uint32_t kind = op->kind & SHM_OP_KIND_MASK;
	if (bytes && (kind == SHM_OP_ALLREDUCE || kind == SHM_OP_REDUCE_SCATTER ||
	              kind == SHM_OP_ALLGATHER) && op->recv.data != op->send.data)
		memmove(op->recv.data, op->send.data, bytes);
}

int shm_coll_run(shm_comm *c, shm_op *op, int on_thread, char *msg, size_t cap)
{
	/* Waiting for the others to start the op, the comm thread spins
	 * briefly: it shares its CPU with the computation it overlaps, and the
	 * others may still be computing.  Once every rank is in the op, the
	 * phase waits between rounds are short and frequent, and sleeping in
	 * them would cost a wake-up per round: they spin the full spin_us
	 * (while the others' counters move, shm_wait()).
	 *
	 * Unless the machine has more runnable threads than we have CPUs: then
	 * a rank we wait for is often off the CPU, and polling for it keeps
	 * our CPU from it, or from whoever holds the one it waits for, while a
	 * rank that sleeps at once is woken by the post and, having slept,
	 * gets the CPU back ahead of the busy processes.  That pays for ops
	 * that outlast a time slice (SHM_BUSY_MIN_BYTES, 32 MiB per rank),
	 * which then do not poll.  The 64 MiB all-gather on 2 ranks with 8-9
	 * runnable threads on the 2 vCPUs: 18-23 ms without polling, 46-67 ms
	 * polling (Open MPI 44-49 ms); in quieter minutes of the same runs
	 * polling was the faster, 8.6-10 ms against 16-19 ms at best, hence
	 * the check (docs/comm.md, "Waiting"). */
	int64_t spin = c->spin_ns, phase_spin = c->spin_ns;
	if (on_thread && spin > SHM_THREAD_SPIN_NS)
		spin = SHM_THREAD_SPIN_NS;
	if (c->world > 1 && op_payload(c, op) >= SHM_BUSY_MIN_BYTES &&
	    op_payload(c, op) > c->small_bytes && shm_cpus_busy(c)) {
		spin = phase_spin = 0;
		c->n_busy++;
	}
	run_ctx r = {.c = c, .op = op, .msg = msg, .cap = cap, .spin_ns = spin,
	             .phase_spin_ns = phase_spin};
	int st;

	r.deadline = op->deadline_ns ? op->deadline_ns
	                             : shm_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
	if ((st = shm_check_abort(c, op, msg, cap)))
		return st;
	if (!op->posted)
		shm_coll_post(c, op);
	if ((st = shm_wait(c, op, 0, op->seq, -1, r.deadline, r.spin_ns, msg, cap)))
		return st;
	if ((st = validate(c, op, msg, cap)))
		return st;
	if (c->world == 1) {
		run_single(op);
		return ACCEL_OK;
	}
	if (shm_coll_is_small(c, op))
		return run_small(&r);
	return run_large(&r);
}
