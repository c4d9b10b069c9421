/* SPDX-License-Identifier: MIT */
/* backends/tcp/tcp_comm.c: the "tcp" comm backend (abi/accel/comm.h):
 * collectives on host memory over TCP, between processes on any number of
 * nodes, bootstrapped through the rendezvous store (tcp_boot.c).  It is
 * what backend "auto" uses for host buffers when `accel launch --nnodes`
 * starts a job on several nodes without an MPI launcher.
 *
 * Transport: one connection per pair of ranks (a full mesh).  Every op runs
 * on the communicator's comm thread, in issue order, as a series of
 * exchanges: each rank posts what it sends to and receives from every peer,
 * and one poll() loop moves all of it with nonblocking sockets, so no
 * ordering of sends and receives can deadlock and the loop can watch the
 * deadline and the peers' connections.
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
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "backends/common/coll-reduce.h"
#include "backends/common/sock.h"
#include "tcp-impl.h"

/* The kind of the farewell header fini sends. */
#define OP_BYE 0x42594531

/* One transfer of an exchange.  The transfers of one peer and direction
 * run in array order. */
struct xfer {
	int32_t peer;
	int send;
	char *p;
	uint64_t len, done;
};

/* ---- describing ops ------------------------------------------------------------------ */

static const char *red_name(uint32_t red)
{
	static const char *const n[] = {"sum", "avg", "max", "min"};
	return red <= ACCEL_RED_MIN ? n[red] : "?";
}

static void hdr_describe(const op_hdr *m, char *buf, size_t cap)
{
	if (m->kind == OP_BARRIER)
		snprintf(buf, cap, "barrier #%llu", (unsigned long long)m->seq);
	else if (m->kind == OP_BROADCAST)
		snprintf(buf, cap, "broadcast #%llu (%s, %llu elements, root %u)",
		         (unsigned long long)m->seq, accel_abi_dtype_name(m->dtype),
		         (unsigned long long)m->count, m->arg);
	else if (m->kind == OP_ALLGATHER)
		snprintf(buf, cap, "allgather #%llu (%s, %llu elements)", (unsigned long long)m->seq,
		         accel_abi_dtype_name(m->dtype), (unsigned long long)m->count);
	else
		snprintf(buf, cap, "%s #%llu (%s, %llu elements, %s)", coll_op_name((int)m->kind),
		         (unsigned long long)m->seq, accel_abi_dtype_name(m->dtype),
		         (unsigned long long)m->count, red_name(m->arg));
}

static void req_hdr(const accel_comm_req *r, op_hdr *m)
{
	memset(m, 0, sizeof(*m));
	m->magic = TCP_MAGIC;
	m->kind = (uint32_t)r->kind;
	m->seq = r->seq;
	m->count = r->kind == OP_BARRIER ? 0 : r->count;
	m->dtype = r->kind == OP_BARRIER ? 0 : r->dtype;
	m->arg = r->kind == OP_BROADCAST ? (uint32_t)r->root
	       : r->kind == OP_ALLREDUCE || r->kind == OP_REDUCE_SCATTER ? r->red : 0;
}

static void req_describe(const accel_comm_req *r, char *buf, size_t cap)
{
	op_hdr m;
	req_hdr(r, &m);
	hdr_describe(&m, buf, cap);
}

static int req_fail(accel_comm_req *r, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int req_fail(accel_comm_req *r, int code, const char *fmt, ...)
{
	char what[192], tail[TCP_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tail, sizeof(tail), fmt, ap);
	va_end(ap);
	req_describe(r, what, sizeof(what));
	snprintf(r->msg, sizeof(r->msg), "%s%s: %.*s", what, r->group ? r->group : "",
	         TCP_MSG_MAX - 200, tail);
	r->status = code;
	return code;
}

/* The rendezvous store's verdict on the job ("; the rendezvous store says:
 * rank 1 lost its connection ..."), waited for up to grace_ms: the store
 * learns of a rank that died at about the time its peers do, and it names
 * the first one, which the connections cannot tell apart from a survivor
 * that noticed first and exited.  Empty when it says nothing. */
static void store_verdict(const tcp_state *st, int64_t grace_ms, char *buf, size_t cap)
{
	char why[512];
	buf[0] = '\0';
	int64_t until = mono_ns() + grace_ms * 1000000;
	for (;;) {
		int rc = tcp_store_probe(st, ACCEL_STORE_KEY_JOB_FAILED, why, sizeof(why));
		if (rc == ACCEL_OK) {
			snprintf(buf, cap, "; the rendezvous store says: %s", why);
			return;
		}
		if (rc != ACCEL_ERR_NOT_FOUND || mono_ns() >= until)
			return;
		usleep(20000);
	}
}

/* What rank p recorded in the store before it closed its connections
 * (fini out of step with the others: after a failure, or with an op
 * running), into buf: 1; 0 when it recorded nothing; -1 when the store
 * cannot be asked. */
static int peer_gone_note(const tcp_state *st, int32_t p, char *buf, size_t cap)
{
	if (!st->host->store_get)
		return 0;
	int rc = tcp_gone_probe(st, p, buf, cap);
	if (rc == ACCEL_ERR_NOT_FOUND)
		return 0;
	if (rc != ACCEL_OK) {
		/* After the job failed the store answers a missing key with that
		 * failure; only when it does not answer at all is it gone (its
		 * host, rank 0, exited). */
		char probe[8];
		return tcp_store_probe(st, ACCEL_STORE_KEY_JOB_FAILED, probe, sizeof(probe)) == ACCEL_OK ? 0
		                                                                                : -1;
	}
	return 1;
}

/* When one peer's connection failed: the other peers whose connections are
 * closed too ("; the connections of rank 2 (...) closed too"), so that the
 * rank that died first is named even when a survivor that noticed it
 * earlier has already exited.  Empty when there are none. */
static void also_closed(const tcp_state *st, int32_t failed, char *buf, size_t cap)
{
	size_t k = 0;
	int named = 0;
	buf[0] = '\0';
	for (int32_t q = 0; q < st->world && k + 200 < cap; q++) {
		if (q == failed || st->peers[q].fd < 0)
			continue;
		struct pollfd p = {.fd = st->peers[q].fd, .events = POLLRDHUP};
		if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			continue;
		k += (size_t)snprintf(buf + k, cap - k, "%srank %d (%s)",
		                      named++ ? ", " : "; the connection of ", tcp_wr(st, q), st->peers[q].where);
	}
	if (named)
		snprintf(buf + k, cap - k, " closed too");
}

/* ---- the exchange loop ------------------------------------------------------------------ */

/* Fail r because peer p's connection failed (sending: while sending to
 * it; e: the errno, 0 for an orderly close): what p recorded in the store
 * before it closed, else who else is gone and the store's verdict. */
static int peer_failed(tcp_state *st, accel_comm_req *r, int32_t p, int sending, int e)
{
	char also[384], verdict[600], note[600], how[160];
	int gone = peer_gone_note(st, p, note, sizeof(note));
	if (gone > 0)
		return req_fail(r, ACCEL_ERR_PEER, "rank %d (%s) closed its connection: %s",
		                tcp_wr(st, p), st->peers[p].where, note);
	also_closed(st, p, also, sizeof(also));
	if (gone < 0 && st->rank == 0)
		snprintf(verdict, sizeof(verdict), "; this rank cannot reach the rendezvous store it "
		         "hosts either: the network of this node is down");
	else if (gone < 0)
		snprintf(verdict, sizeof(verdict), "; the rendezvous store cannot be reached either "
		         "(rank 0, which hosts it, is gone), so whether rank %d crashed or freed its "
		         "context after a failure of its own is unknown", tcp_wr(st, p));
	else
		store_verdict(st, 500, verdict, sizeof(verdict));
	int silent = e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN;
	if (silent && st->keepalive_ms > 0)
		snprintf(how, sizeof(how), "its node has not answered for comm.keepalive_s = %g s "
		         "(%s): it is down or unreachable", (double)st->keepalive_ms / 1000.0,
		         strerror(e));
	else if (silent)
		snprintf(how, sizeof(how), "its node stopped answering, and the kernel gave up "
		         "retransmitting (%s): it is down or unreachable", strerror(e));
	else if (sending)
		snprintf(how, sizeof(how), "sending to it failed (%s)",
		         e ? strerror(e) : "no progress");
	else if (e)
		snprintf(how, sizeof(how), "its connection failed (%s) while rank %d waited for its "
		         "data", strerror(e), tcp_wr(st, st->rank));
	else
		snprintf(how, sizeof(how), "its connection closed while rank %d waited for its data",
		         tcp_wr(st, st->rank));
	return req_fail(r, ACCEL_ERR_PEER, "rank %d (%s) is gone: %s%s%s%s", tcp_wr(st, p), st->peers[p].where,
	                how, gone < 0 || silent ? "" : "; it exited without freeing its context, "
	                                               "crashed or was killed",
	                also, verdict);
}

/* Whether peer p's node has acknowledged nothing of what this rank sent it
 * for comm.keepalive_s: this exchange has seen data in flight to it
 * (unacknowledged, or a zero-window probe unanswered) at every check for
 * that long, and its last ACK is that old.  (The last ACK alone is old after an idle spell while the ACK of
 * what was just sent is on its way; the kernel's "last data sent" moves
 * with every retransmission.)  A live peer that does not read (stopped,
 * busy: its receive window is full) still acknowledges the kernel's window
 * probes (which resets the kernel's count of unanswered ones) and has
 * nothing in flight, so this catches only a node that is down or cut off.
 * An idle connection is watched by TCP keepalive instead; TCP_USER_TIMEOUT
 * would also kill the connection of a peer that stops reading. */
static int peer_silent(tcp_state *st, int32_t p, int64_t now)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	if (getsockopt(st->peers[p].fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
	    len < offsetof(struct tcp_info, tcpi_last_ack_recv) + sizeof(ti.tcpi_last_ack_recv))
		return 0;
	/* in flight: unacknowledged data, or unanswered zero-window probes (a
	 * peer that had stopped reading, so that everything sent was
	 * acknowledged and the rest waits for its window, then vanished) */
	if (ti.tcpi_unacked == 0 && ti.tcpi_probes == 0) {
		st->unacked_since[p] = 0;
		return 0;
	}
	if (!st->unacked_since[p])
		st->unacked_since[p] = now;
	return now - st->unacked_since[p] >= st->keepalive_ms * 1000000 &&
	       (int64_t)ti.tcpi_last_ack_recv >= st->keepalive_ms;
}

/* The first unfinished transfer of peer p in direction `send` after x[i]. */
static int next_xfer(const xfer *x, int n, int i, int32_t p, int send)
{
	for (int k = i + 1; k < n; k++)
		if (x[k].send == send && x[k].peer == p && x[k].done < x[k].len)
			return k;
	return -1;
}

/* Move every transfer of x[0..n) (recv_only: every receive; sends may be
 * left unfinished, for a later call with the same x) or fail r: a peer's
 * connection closed
 * (ACCEL_ERR_PEER), the deadline passed (ACCEL_ERR_TIMEOUT; `arriving`:
 * the peers still owing data are named as never having arrived at the op,
 * else as stalled in it), or fini asked the thread to stop. */
static int exchange(tcp_state *st, accel_comm_req *r, xfer *x, int n, int64_t deadline,
                    int arriving, int recv_only)
{
	const int32_t w = st->world;
	int *cur_s = st->cur, *cur_r = st->cur + w;
	struct pollfd *pf = st->pf;
	int32_t *who = st->who;
	int rc = ACCEL_OK;
	/* poll without sleeping for a moment first: a small op's peers are
	 * usually microseconds away, and a sleep costs a wake-up each time */
	int64_t spin_until = mono_ns() + st->spin_ns;
	int64_t next_silence_check = 0;
	for (int32_t p = 0; p < w; p++)
		st->unacked_since[p] = 0;
	for (;;) {
		/* the first unfinished transfer of each peer and direction */
		for (int32_t p = 0; p < w; p++)
			cur_s[p] = cur_r[p] = -1;
		int left_s = 0, left_r = 0;
		for (int i = n - 1; i >= 0; i--) {
			if (x[i].done == x[i].len)
				continue;
			if (x[i].send) {
				left_s = 1;
				cur_s[x[i].peer] = i;
			} else {
				left_r = 1;
				cur_r[x[i].peer] = i;
			}
		}
		if (!left_r && (!left_s || recv_only))
			break;
		int np = 0;
		for (int32_t p = 0; p < w; p++) {
			short ev = (short)((cur_s[p] >= 0 ? POLLOUT : 0) | (cur_r[p] >= 0 ? POLLIN : 0));
			if (!ev)
				continue;
			pf[np].fd = st->peers[p].fd;
			pf[np].events = ev;
			pf[np].revents = 0;
			who[np++] = p;
		}
		int ms = mono_ns() < spin_until ? 0 : 100;
		if (deadline) {
			int64_t rest = deadline - mono_ns();
			if (rest <= 0) {
				char list[512];
				size_t k = 0;
				int named = 0;
				list[0] = '\0';
				for (int32_t p = 0; p < w && k < sizeof(list) - 160; p++) {
					if (cur_r[p] < 0)
						continue;
					k += (size_t)snprintf(list + k, sizeof(list) - k, "%srank %d (%s)",
					                      named++ ? ", " : "", tcp_wr(st, p), st->peers[p].where);
				}
				if (!named) {
					for (int32_t p = 0; p < w && k < sizeof(list) - 160; p++)
						if (cur_s[p] >= 0)
							k += (size_t)snprintf(list + k, sizeof(list) - k, "%srank %d (%s)",
							                      named++ ? ", " : "", tcp_wr(st, p), st->peers[p].where);
					rc = req_fail(r, ACCEL_ERR_TIMEOUT,
					              "did not complete within %.1f s on %s: %s stopped "
					              "taking data (hung, stopped, or busy elsewhere)",
					              (double)st->timeout_ms / 1000.0, st->self, list);
				}
				else if (arriving)
					rc = req_fail(r, ACCEL_ERR_TIMEOUT,
					              "did not complete within %.1f s on %s: %s never "
					              "arrived (busy elsewhere, hung, or issued fewer collectives)",
					              (double)st->timeout_ms / 1000.0, st->self, list);
				else
					rc = req_fail(r, ACCEL_ERR_TIMEOUT,
					              "did not complete within %.1f s on %s: %s "
					              "stopped sending in the middle of it",
					              (double)st->timeout_ms / 1000.0, st->self, list);
				goto out;
			}
			if (ms && rest < 100000000)
				ms = (int)(rest / 1000000) + 1;
		}
		if (__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
			rc = req_fail(r, ACCEL_ERR_STATE, "abandoned: the context was freed while it ran");
			goto out;
		}
		int k = poll(pf, (nfds_t)np, ms);
		if (k < 0 && errno != EINTR) {
			rc = req_fail(r, ACCEL_ERR_SYSTEM, "poll failed: %s", strerror(errno));
			goto out;
		}
		if (k == 0 && st->keepalive_ms > 0 && mono_ns() >= next_silence_check) {
			int64_t now = mono_ns();
			next_silence_check = now + 500000000;
			for (int j = 0; j < np; j++)
				if (peer_silent(st, who[j], now)) {
					rc = peer_failed(st, r, who[j], 1, ETIMEDOUT);
					goto out;
				}
		}
		for (int j = 0; k > 0 && j < np; j++) {
			int32_t p = who[j];
			short re = pf[j].revents;
			if (!re)
				continue;
			/* receive first (snd 0), then send (snd 1): a peer that sent
			 * everything and then closed (POLLHUP) still delivers its bytes */
			for (int snd = 0; snd < 2; snd++) {
				int *cur = snd ? cur_s : cur_r;
				short ready = (short)((snd ? POLLOUT : POLLIN) | POLLHUP | POLLERR);
				while (cur[p] >= 0 && (re & ready)) {
					xfer *t = &x[cur[p]];
					ssize_t moved = snd ? send(pf[j].fd, t->p + t->done, t->len - t->done,
					                           MSG_DONTWAIT | MSG_NOSIGNAL)
					                    : recv(pf[j].fd, t->p + t->done, t->len - t->done,
					                           MSG_DONTWAIT);
					if (moved > 0) {
						t->done += (uint64_t)moved;
						if (t->done == t->len)
							cur[p] = next_xfer(x, n, cur[p], p, snd);
						continue;
					}
					if (moved < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
						break;
					rc = peer_failed(st, r, p, snd, moved == 0 ? 0 : errno);
					goto out;
				}
			}
		}
	}
out:
	return rc;
}

static void add_x(xfer *x, int *n, int32_t peer, int send, const void *p, uint64_t len)
{
	if (!len)
		return;
	x[*n] = (xfer){.peer = peer, .send = send, .p = (char *)p, .len = len, .done = 0};
	(*n)++;
}

/* ---- the ops ------------------------------------------------------------------------------ */

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
	rc = exchange(st, r, x, *n, deadline, 1, recv_only);
	for (int32_t p = 0; p < w && rc == ACCEL_OK; p++) {
		if (p == st->rank)
			continue;
		const op_hdr *t = &theirs[p];
		if (t->magic == TCP_MAGIC && t->kind == OP_BYE) {
			rc = req_fail(r, ACCEL_ERR_PEER,
			              "rank %d (%s) left the job (it freed its context after #%llu) "
			              "while rank %d waits in this collective", tcp_wr(st, p), st->peers[p].where,
			              (unsigned long long)t->seq, tcp_wr(st, st->rank));
		} else if (t->magic != TCP_MAGIC) {
			rc = req_fail(r, ACCEL_ERR_COMM,
			              "rank %d (%s) sent data that is not a collective's header: the "
			              "ranks' streams are out of step", tcp_wr(st, p), st->peers[p].where);
		} else if (memcmp(t, &r->hdr, sizeof(op_hdr)) != 0) {
			char a[192], b[192];
			hdr_describe(&r->hdr, a, sizeof(a));
			hdr_describe(t, b, sizeof(b));
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
		rc = exchange(st, r, x, n, deadline, 0, 0);
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
		rc = exchange(st, r, x, n, deadline, 0, 0);
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
		if ((rc = exchange(st, r, x, n, deadline, 0, 0)) == ACCEL_OK)
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
	return exchange(st, r, x, n, deadline, 0, 0);
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
		return exchange(st, r, x, n, deadline, 0, 0);
	}
	/* round k: receive chunk k, pass chunk k - 1 on */
	for (uint64_t k = 0; k <= rounds && rc == ACCEL_OK; k++) {
		n = 0;
		if (k < rounds)
			add_x(x, &n, prev, 0, r->dst + k * c, slice(bytes, c, k));
		if (k > 0)
			add_x(x, &n, next, 1, r->dst + (k - 1) * c, slice(bytes, c, k - 1));
		rc = exchange(st, r, x, n, deadline, 0, 0);
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
	req_hdr(r, &r->hdr);
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
		rc = exchange(st, r, x, n, deadline, 0, 0);
	}
	if (rc == ACCEL_OK && r->kind == OP_ALLREDUCE && r->count) {
		for (int32_t q = 0; q < w; q++)
			st->in_ptrs[q] = q == st->rank ? r->src : stage_of(st, q, st->chunk_bytes, 1);
		void *o = r->dst;
		coll_reduce(r->dtype, r->red, w, st->in_ptrs, 1, &o, r->count, w);
	}
	return rc;
}

static int run_req(tcp_state *st, accel_comm_req *r)
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
	req_hdr(r, &r->hdr);
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

/* ---- the comm thread ------------------------------------------------------------------------ */

/* Run the request at the cursor, taken by this thread (worker or a caller
 * in wait()) under st->lock; returns with the lock held again, r finished
 * and the cursor moved on. */
static void run_cursor(tcp_state *st, accel_comm_req *r)
{
	int failed = st->failed;
	r->state = REQ_RUNNING;
	pthread_mutex_unlock(&st->lock);
	int rc;
	if (failed) {
		char what[192];
		req_describe(r, what, sizeof(what));
		snprintf(r->msg, sizeof(r->msg), "%s not run: an earlier collective failed (%.*s)",
		         what, TCP_MSG_MAX / 2, st->fail_msg);
		rc = r->status = st->fail_code;
	} else {
		rc = run_req(st, r);
	}
	pthread_mutex_lock(&st->lock);
	if (rc != ACCEL_OK) {
		r->status = rc;
		if (!st->failed) {
			st->failed = 1;
			st->fail_code = rc;
			snprintf(st->fail_msg, sizeof(st->fail_msg), "%s", r->msg);
		}
	}
	__atomic_store_n(&r->state, rc == ACCEL_OK ? REQ_DONE : REQ_FAILED, __ATOMIC_RELEASE);
	st->cursor = r->next;
	pthread_cond_broadcast(&st->done);
	if (st->cursor)
		pthread_cond_signal(&st->work);
}

/* Whether the request at the cursor waits for a thread to run it. */
static int cursor_ready(const tcp_state *st)
{
	return st->cursor && st->cursor->state == REQ_QUEUED;
}

static void *worker_main(void *arg)
{
	tcp_state *st = arg;
	pthread_mutex_lock(&st->lock);
	for (;;) {
		while (!st->stop && !cursor_ready(st))
			pthread_cond_wait(&st->work, &st->lock);
		if (st->stop)
			break;
		run_cursor(st, st->cursor);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* ---- issuing -------------------------------------------------------------------------------- */

static accel_comm_req *req_new(tcp_state *st, int kind, uint32_t dtype, uint32_t red)
{
	accel_comm_req *r = calloc(1, sizeof(*r));
	if (!r) {
		st->host->error(st->h, ACCEL_ERR_NOMEM, "%s: out of memory for a request",
		                coll_op_name(kind));
		return NULL;
	}
	r->kind = kind;
	r->group = st->group;
	r->dtype = dtype;
	r->red = red;
	r->esz = accel_abi_dtype_size(dtype);
	return r;
}

static int req_submit(tcp_state *st, accel_comm_req *r, accel_comm_req **ret_req)
{
	pthread_mutex_lock(&st->lock);
	if (st->failed) {
		int rc = st->host->error(st->h, st->fail_code,
		                         "%s #%llu not run: an earlier collective failed (%.*s)",
		                         coll_op_name(r->kind), (unsigned long long)st->seq + 1,
		                         TCP_MSG_MAX / 2, st->fail_msg);
		pthread_mutex_unlock(&st->lock);
		free(r);
		return rc;
	}
	r->seq = ++st->seq;
	r->state = REQ_QUEUED;
	coll_reqs_append(&st->live, r);
	if (!st->cursor)
		st->cursor = r;
	pthread_cond_signal(&st->work);
	pthread_mutex_unlock(&st->lock);
	*ret_req = r;
	return ACCEL_OK;
}

static int tcp_allreduce(void *state, const accel_view *send, const accel_view *recv,
                         uint32_t red, accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_ALLREDUCE, st->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, red);
	accel_comm_req *r = req_new(st, OP_ALLREDUCE, send->dtype, red);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->src = send->data;
	r->dst = recv->data;
	r->count = recv->numel;
	return req_submit(st, r, ret_req);
}

static int tcp_reduce_scatter(void *state, const accel_view *send, const accel_view *recv,
                              uint32_t red, accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_REDUCE_SCATTER, st->world, send, recv, ACCEL_DEVICE_CPU);
	coll_assert_reduction(send->dtype, red);
	accel_comm_req *r = req_new(st, OP_REDUCE_SCATTER, send->dtype, red);
	if (!r)
		return ACCEL_ERR_NOMEM;
	/* in place (recv == send): the result goes to the buffer's start */
	r->src = send->data;
	r->dst = recv->data;
	r->count = recv->numel;
	return req_submit(st, r, ret_req);
}

static int tcp_allgather(void *state, const accel_view *send, const accel_view *recv,
                         accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_pair(OP_ALLGATHER, st->world, send, recv, ACCEL_DEVICE_CPU);
	accel_comm_req *r = req_new(st, OP_ALLGATHER, send->dtype, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	/* in place with this rank's block at the buffer's start (send ==
	 * recv): run_allgather copies it to block `rank` first, which does
	 * not overlap it on rank > 0 */
	r->src = send->data;
	r->dst = recv->data;
	r->count = send->numel;
	return req_submit(st, r, ret_req);
}

static int tcp_broadcast(void *state, const accel_view *buf, int32_t root,
                         accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	coll_assert_view(buf, ACCEL_DEVICE_CPU);
	assert(root >= 0 && root < st->world);
	accel_comm_req *r = req_new(st, OP_BROADCAST, buf->dtype, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	r->dst = buf->data;
	r->src = buf->data;
	r->count = buf->numel;
	r->root = root;
	return req_submit(st, r, ret_req);
}

static int tcp_barrier(void *state, accel_comm_req **ret_req)
{
	tcp_state *st = state;
	assert(ret_req);
	accel_comm_req *r = req_new(st, OP_BARRIER, ACCEL_DTYPE_U8, ACCEL_RED_SUM);
	if (!r)
		return ACCEL_ERR_NOMEM;
	return req_submit(st, r, ret_req);
}

/* ---- completion --------------------------------------------------------------------------- */

static int tcp_wait(void *state, accel_comm_req *r)
{
	tcp_state *st = state;
	pthread_mutex_lock(&st->lock);
	assert(r && coll_reqs_has(&st->live, r));   /* the core waits its own, once */
	/* A blocking collective does not need the comm thread: while the next
	 * op waits for a thread, the caller runs it (no hand-off to a thread and
	 * back, which would dominate small ops).  Whoever runs an op enforces
	 * its deadline, so this ends. */
	while (r->state < REQ_DONE) {
		if (cursor_ready(st))
			run_cursor(st, st->cursor);
		else
			pthread_cond_wait(&st->done, &st->lock);
	}
	coll_reqs_unlink(&st->live, r);
	pthread_mutex_unlock(&st->lock);
	int status = r->status;
	if (status != ACCEL_OK)
		st->host->error(st->h, status, "%s", r->msg);
	free(r);
	return status;
}

static int tcp_test(void *state, accel_comm_req *r, int32_t *ret_done)
{
	tcp_state *st = state;
	assert(ret_done);
	pthread_mutex_lock(&st->lock);
	assert(r && coll_reqs_has(&st->live, r));
	int s = r->state;
	pthread_mutex_unlock(&st->lock);
	if (s == REQ_FAILED) {  /* finished, with an error; wait() still releases it */
		*ret_done = 1;
		return st->host->error(st->h, r->status, "%s", r->msg);
	}
	*ret_done = s == REQ_DONE;
	return ACCEL_OK;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

static void tcp_fini(void *state)
{
	tcp_state *st = state;
	if (!st)
		return;
	int idle = 1;
	if (st->thread_started) {
		pthread_mutex_lock(&st->lock);
		/* an op queued but not started leaves the streams in step */
		idle = !st->cursor || st->cursor->state == REQ_QUEUED;
		__atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
		pthread_cond_signal(&st->work);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->thread, NULL);
	}
	/* A farewell where the peers expect the next op's header, so that one
	 * waiting there learns that this rank left rather than died.  Not
	 * after a failure or with an op cut short: the streams are then out of
	 * step, and the closed connection says enough. */
	if ((!idle || st->failed || st->init_failed) && st->peers) {
		/* Out of step: a peer that waits for this rank's data would only
		 * see the connection close.  Say why in the store first, where it
		 * looks (peer_gone_note). */
		char note[TCP_MSG_MAX];
		if (st->init_failed)
			snprintf(note, sizeof(note), "its tcp backend failed to start: %.*s",
			         TCP_MSG_MAX - 64, st->fail_msg[0] ? st->fail_msg : "(see its own error)");
		else if (st->failed)
			snprintf(note, sizeof(note), "it freed its context after a collective failed "
			         "there: %.*s", TCP_MSG_MAX - 100, st->fail_msg);
		else
			snprintf(note, sizeof(note), "it freed its context while collective #%llu ran",
			         (unsigned long long)(st->cursor ? st->cursor->seq : st->seq));
		tcp_note_gone(st, note);
	}
	if (idle && !st->failed && !st->init_failed && st->peers) {
		/* the last op it started: a queued one never ran */
		uint64_t last = st->cursor ? st->cursor->seq - 1 : st->seq;
		op_hdr bye = {.magic = TCP_MAGIC, .kind = OP_BYE, .seq = last};
		int64_t until = mono_ns() + 1000000000ll;
		for (int32_t p = 0; p < st->world; p++)
			if (st->peers[p].fd >= 0)
				(void)sock_send_all(st->peers[p].fd, &bye, sizeof(bye), until);
	}
	if (st->peers)
		for (int32_t p = 0; p < st->world; p++)
			if (st->peers[p].fd >= 0)
				close(st->peers[p].fd);
	if (st->listen_fd >= 0)
		close(st->listen_fd);
	for (accel_comm_req *r = st->live.head, *nx; r; r = nx) {
		nx = r->next;
		free(r);
	}
	if (st->thread_started || st->sync_inited) {
		pthread_mutex_destroy(&st->lock);
		pthread_cond_destroy(&st->work);
		pthread_cond_destroy(&st->done);
	}
	free(st->peers);
	free(st->stage);
	free(st->in_ptrs);
	free(st->hdrs);
	free(st->small_buf);
	free(st->xs);
	free(st->cur);
	free(st->pf);
	free(st->who);
	free(st->unacked_since);
	free(st->wranks);
	free(st);
}

/* A group's names (tcp_split); NULL for the world. */
typedef struct tcp_group {
	const char *ns;
	int64_t comm_no;
	const int32_t *wranks;
	const char *tag;
} tcp_group;

/* A communicator: the world's (g NULL) or a group's, whose mesh is
 * bootstrapped under the group's store keys. */
static int tcp_open(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                    const tcp_group *g, void **ret_state)
{
	tcp_state *st = calloc(1, sizeof(*st));
	if (!st)
		return host->error(h, ACCEL_ERR_NOMEM, "tcp backend: out of memory");
	st->host = host;
	st->h = h;
	st->rank = args->rank;
	st->world = args->world_size;
	st->timeout_ms = args->timeout_ms;
	st->listen_fd = -1;
	st->num_nodes = args->num_nodes;
	if (ACCEL_COMM_INIT_HAS(args, master_addr) && args->master_addr)
		snprintf(st->master_addr, sizeof(st->master_addr), "%s", args->master_addr);
	if (g) {
		snprintf(st->ns, sizeof(st->ns), "%s", g->ns);
		st->comm_no = g->comm_no;
		st->wranks = malloc(sizeof(int32_t) * (size_t)st->world);
		if (!st->wranks) {
			free(st);
			return host->error(h, ACCEL_ERR_NOMEM, "tcp backend: out of memory");
		}
		memcpy(st->wranks, g->wranks, sizeof(int32_t) * (size_t)st->world);
		snprintf(st->self, sizeof(st->self), "world rank %d (%d of %d in group %s)",
		         (int)g->wranks[st->rank], (int)st->rank, (int)st->world, g->tag);
		snprintf(st->group, sizeof(st->group), " on group %s", g->tag);
	} else {
		snprintf(st->self, sizeof(st->self), "rank %d of %d", (int)st->rank, (int)st->world);
	}
	int64_t chunk_kb = 1024;
	const char *addr = "";
	int64_t small_kb = 16;
	/* comm.keepalive_s, from a core of ABI minor 2 on; before, 30 s */
	st->keepalive_ms = ACCEL_COMM_INIT_HAS(args, keepalive_ms) ? args->keepalive_ms : 30000;
	if (host->cfg_int) {
		host->cfg_int(h, "chunk_kb", &chunk_kb);
		host->cfg_int(h, "small_kb", &small_kb);
	}
	if (host->cfg_string)
		host->cfg_string(h, "addr", &addr);
	if (!addr)
		addr = "";
	st->chunk_bytes = (uint64_t)chunk_kb * 1024;
	st->small_bytes = (uint64_t)small_kb * 1024;
	/* spinning helps only while every local rank has a CPU of its own */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	st->spin_ns = args->local_world_size <= cpus ? TCP_SPIN_NS : 0;
	/* the stage holds world - 1 slices: keep it within 256 MiB */
	uint64_t cap = (UINT64_C(256) << 20) / (uint64_t)st->world;
	if (st->chunk_bytes > cap)
		st->chunk_bytes = cap < 4096 ? 4096 : cap & ~UINT64_C(4095);
	/* the one-shot all-reduce lands in the stage too */
	if (st->small_bytes > st->chunk_bytes)
		st->small_bytes = st->chunk_bytes;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->work, NULL);
	pthread_cond_init(&st->done, NULL);
	st->sync_inited = 1;
	st->peers = calloc((size_t)st->world, sizeof(tcp_peer));
	for (int32_t p = 0; st->peers && p < st->world; p++)
		st->peers[p].fd = -1;  /* before any tcp_fini: 0 would be stdin */
	st->in_ptrs = calloc((size_t)st->world, sizeof(void *));
	st->hdrs = calloc((size_t)st->world, sizeof(op_hdr));
	/* the one running op's scratch: at most 4 transfers per peer (an
	 * all-reduce round's results and the next round's inputs) */
	st->xs = calloc((size_t)st->world * 4, sizeof(xfer));
	st->cur = calloc((size_t)st->world * 2, sizeof(int));
	st->pf = calloc((size_t)st->world, sizeof(struct pollfd));
	st->who = calloc((size_t)st->world, sizeof(int32_t));
	st->unacked_since = calloc((size_t)st->world, sizeof(int64_t));
	st->small_buf = malloc(sizeof(op_hdr) + st->small_bytes);
	st->stage = st->world > 1 ? malloc((size_t)(st->world - 1) * st->chunk_bytes) : NULL;
	if (!st->peers || !st->in_ptrs || !st->hdrs || !st->small_buf || !st->xs || !st->cur ||
	    !st->pf || !st->who || !st->unacked_since ||
	    (st->world > 1 && !st->stage)) {
		tcp_fini(st);
		return host->error(h, ACCEL_ERR_NOMEM, "tcp backend: out of memory");
	}
	int rc = tcp_boot(st, args, addr);
	if (rc) {
		st->init_failed = 1;  /* no farewell: nobody is in step with us */
		tcp_fini(st);
		return rc;
	}
	if (pthread_create(&st->thread, NULL, worker_main, st) != 0) {
		st->init_failed = 1;
		snprintf(st->fail_msg, sizeof(st->fail_msg), "cannot start the comm thread");
		tcp_fini(st);
		return host->error(h, ACCEL_ERR_SYSTEM, "tcp backend: cannot start the comm thread");
	}
	st->thread_started = 1;
	*ret_state = st;
	return ACCEL_OK;
}

static int tcp_init(const accel_host_v1 *host, accel_host *h, const accel_comm_init_v1 *args,
                    void **ret_state)
{
	if (!args || !ACCEL_COMM_INIT_HAS(args, job_id))
		return host->error(h, ACCEL_ERR_ABI, "init: accel_comm_init_v1 is %s",
		                   args ? "too small (older core?)" : "NULL");
	if (!ret_state || args->world_size < 1 || args->rank < 0 || args->rank >= args->world_size)
		return host->error(h, ACCEL_ERR_INVALID_ARG, "tcp backend: bad init arguments");
	return tcp_open(host, h, args, NULL, ret_state);
}

/* A group: a mesh of its own between the members, bootstrapped like the
 * world's (addresses in the store, hellos) under "<parent's keys>/g<tag>"
 * (unique in the job even when a later context splits the same way); the
 * parent's connections are not touched. */
static int tcp_split(void *state, const accel_comm_split_v1 *args, void **ret_state)
{
	tcp_state *p = state;
	if (!args || args->struct_size < offsetof(accel_comm_split_v1, local_size) + sizeof(int32_t))
		return p->host->error(p->h, ACCEL_ERR_ABI, "split: accel_comm_split_v1 is too old");
	if (args->color == ACCEL_COMM_SPLIT_NONE) {
		*ret_state = NULL;
		return ACCEL_OK;
	}
	if (args->size < 1 || args->rank < 0 || args->rank >= args->size || !args->ranks ||
	    !args->tag)
		return p->host->error(p->h, ACCEL_ERR_INVALID_ARG,
		                      "split: rank %d is not in a group of %d", (int)args->rank,
		                      (int)args->size);
	accel_comm_init_v1 a = {
		.struct_size = sizeof(a), .rank = args->rank, .world_size = args->size,
		.local_rank = 0, .local_world_size = args->local_size, .node_rank = 0,
		.num_nodes = args->num_nodes, .device_index = -1, .timeout_ms = args->timeout_ms,
		.job_id = args->job_id, .master_addr = p->master_addr[0] ? p->master_addr : NULL,
		.keepalive_ms = p->keepalive_ms};
	/* the hello's communicator number: from the keys (the same on every
	 * member), kept apart from the world's counter values */
	char ns[128];
	int nl = snprintf(ns, sizeof(ns), "%s/g%s", p->ns, args->tag);
	if (nl < 0 || (size_t)nl >= sizeof(ns))
		return p->host->error(p->h, ACCEL_ERR_INVALID_ARG,
		                      "split: group %s is nested too deeply for tcp's store keys",
		                      args->tag);
	uint64_t hsh = 1469598103934665603ull;  /* FNV-1a */
	for (const char *c = ns; *c; c++)
		hsh = (hsh ^ (unsigned char)*c) * 1099511628211ull;
	tcp_group g = {ns, (int64_t)((hsh >> 3) | (UINT64_C(1) << 60)), args->ranks, args->tag};
	return tcp_open(p->host, p->h, &a, &g, ret_state);
}

static const accel_param_schema_v1 tcp_params[] = {
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "chunk_kb", "1024", 4, 65536, NULL,
	 "KiB each rank exchanges with each peer per pipeline round of an all-reduce, "
	 "reduce-scatter or broadcast (capped so the staging stays within 256 MiB)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "small_kb", "16", 0, 65536, NULL,
	 "Largest all-reduce or broadcast buffer, or all-gather block, in KiB sent in one exchange "
	 "with the op's header (an all-reduce whole to every peer, each rank reducing all inputs "
	 "itself; at most chunk_kb; 0: never)."},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_STRING, "addr", "\"\"", 0, -1, NULL,
	 "Address this rank listens on and the others connect to; empty: 127.0.0.1 on one node, "
	 "else the local address of the route to the master address."},
};

static const accel_comm_desc_v1 tcp_desc = {
	.struct_size = sizeof(accel_comm_desc_v1),
	.devices = 1u << ACCEL_DEVICE_CPU,
	.name = "tcp",
	.version = "1.0.0",
	.summary = "TCP collectives for host memory between processes on any nodes",
	.requires = 0,
	.config_section = "tcp",
	.params = tcp_params,
	.n_params = sizeof(tcp_params) / sizeof(tcp_params[0]),
	.scope = ACCEL_COMM_SCOPE_NODE | ACCEL_COMM_SCOPE_NODES,
	.preference = ACCEL_COMM_PREF_FALLBACK,
};

static const accel_comm_v1 tcp_vtable = {
	.struct_size = sizeof(accel_comm_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &tcp_desc,
	.init = tcp_init,
	.fini = tcp_fini,
	.probe = NULL,
	.mem_alloc = NULL,
	.mem_free = NULL,
	.allreduce = tcp_allreduce,
	.reduce_scatter = tcp_reduce_scatter,
	.allgather = tcp_allgather,
	.broadcast = tcp_broadcast,
	.barrier = tcp_barrier,
	.wait = tcp_wait,
	.test = tcp_test,
	.split = tcp_split,
};

ACCEL_EXPORT const accel_comm_v1 *accel_comm_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "tcp", error))
		return NULL;
	return &tcp_vtable;
}
