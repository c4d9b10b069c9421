/* SPDX-License-Identifier: MIT */
/* backends/tcp/tcp_exchange.c: the tcp backend's exchange loop, and the
 * messages of the ops that fail in it.
 *
 * An exchange is every transfer an op posts to and from its peers, moved by
 * one poll() loop over nonblocking sockets: no ordering of sends and
 * receives can deadlock, and the loop watches the op's deadline and the
 * peers' connections (closed, or a node silent for comm.keepalive_s).  A
 * failure names the op, the peer, and what the peer or the rendezvous
 * store recorded about it. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/common/coll.h"
#include "backends/common/mono.h"
#include "tcp-impl.h"

/* ---- describing ops ------------------------------------------------------------------ */

static const char *red_name(uint32_t red)
{
	static const char *const n[] = {"sum", "avg", "max", "min"};
	return red <= ACCEL_RED_MIN ? n[red] : "?";
}

void tcp_hdr_describe(const op_hdr *m, char *buf, size_t cap)
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

void tcp_req_hdr(const accel_comm_req *r, op_hdr *m)
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

void tcp_req_describe(const accel_comm_req *r, char *buf, size_t cap)
{
	op_hdr m;
	tcp_req_hdr(r, &m);
	tcp_hdr_describe(&m, buf, cap);
}

int tcp_req_fail(accel_comm_req *r, int code, const char *fmt, ...)
{
	char what[192], tail[TCP_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tail, sizeof(tail), fmt, ap);
	va_end(ap);
	tcp_req_describe(r, what, sizeof(what));
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
		return tcp_req_fail(r, ACCEL_ERR_PEER, "rank %d (%s) closed its connection: %s",
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
	return tcp_req_fail(r, ACCEL_ERR_PEER, "rank %d (%s) is gone: %s%s%s%s", tcp_wr(st, p),
	                    st->peers[p].where, how,
	                    gone < 0 || silent ? "" : "; it exited without freeing its context, "
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
int tcp_exchange(tcp_state *st, accel_comm_req *r, xfer *x, int n, int64_t deadline,
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
					rc = tcp_req_fail(r, ACCEL_ERR_TIMEOUT,
					                  "did not complete within %.1f s on %s: %s stopped "
					                  "taking data (hung, stopped, or busy elsewhere)",
					                  (double)st->timeout_ms / 1000.0, st->self, list);
				}
				else if (arriving)
					rc = tcp_req_fail(r, ACCEL_ERR_TIMEOUT,
					                  "did not complete within %.1f s on %s: %s never "
					                  "arrived (busy elsewhere, hung, or issued fewer collectives)",
					                  (double)st->timeout_ms / 1000.0, st->self, list);
				else
					rc = tcp_req_fail(r, ACCEL_ERR_TIMEOUT,
					                  "did not complete within %.1f s on %s: %s "
					                  "stopped sending in the middle of it",
					                  (double)st->timeout_ms / 1000.0, st->self, list);
				goto out;
			}
			if (ms && rest < 100000000)
				ms = (int)(rest / 1000000) + 1;
		}
		if (__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
			rc = tcp_req_fail(r, ACCEL_ERR_STATE, "abandoned: the context was freed while it ran");
			goto out;
		}
		int k = poll(pf, (nfds_t)np, ms);
		if (k < 0 && errno != EINTR) {
			rc = tcp_req_fail(r, ACCEL_ERR_SYSTEM, "poll failed: %s", strerror(errno));
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
