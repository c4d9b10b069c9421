/* SPDX-License-Identifier: MIT */
/* backends/tcp/tcp_boot.c: the tcp backend's full mesh, set up through the
 * job's rendezvous store.
 *
 * Every rank listens on an ephemeral port of the address its peers reach it
 * at, and publishes "<address> <port> <pid> <host>" under
 * tcp/<n>/addr/<rank>, where n numbers the communicators of the job (a
 * per-rank counter in the store, as for nccl: ranks that create
 * communicators in the same order agree on n).  Rank r then connects to
 * every lower rank and accepts one connection from every higher rank.  A
 * connection opens with a hello naming the communicator, the job, the world
 * size and both ranks; the accepting side checks it and answers with its
 * own, so both ends know they reached the right process.
 *
 * Which address: `tcp.addr` when set; on one node 127.0.0.1; across nodes
 * the local address of the route to the master (the rendezvous store's host:
 * ACCEL_MASTER_ADDR, MASTER_ADDR or the first Slurm node), the
 * interface the store traffic uses, which the other nodes can reach too. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "backends/common/mono.h"
#include "backends/common/sock.h"
#include "tcp-impl.h"

typedef struct hello {
	uint32_t magic, proto;
	int64_t comm_no;
	uint64_t job;
	int32_t world, from, to, reserved;
	uint64_t chunk_bytes, small_bytes;  /* must agree: they shape the streams */
} hello;

/* FNV-1a of the job id: a connection from another job is refused. */
static uint64_t job_hash(const char *s)
{
	uint64_t x = 0xcbf29ce484222325ull;
	for (; s && *s; s++)
		x = (x ^ (unsigned char)*s) * 0x100000001b3ull;
	return x;
}

/* A mesh connection: no Nagle delay, non-blocking, and (comm.keepalive_s)
 * TCP keepalive: an idle connection whose peer node answers nothing for
 * keepalive_ms (probes from half of it on, three of them) fails with
 * ETIMEDOUT.  A live peer's kernel answers the probes even when the process
 * is busy or stopped.  Data in flight that its node never acknowledges is
 * caught by exchange() (peer_silent, from TCP_INFO), not by
 * TCP_USER_TIMEOUT, which would also kill the connection of a live peer
 * that merely stopped reading (a full receive window). */
static void tune(const tcp_state *st, int fd)
{
	sock_nodelay(fd);
	if (sock_keepalive(fd, st->keepalive_ms, 0) != 0)
		st->host->log(st->h, ACCEL_LOG_WARN,
		              "tcp: cannot set TCP keepalive (%s): a node that vanishes is "
		              "found by comm.timeout_s only", strerror(errno));
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int boot_error(tcp_state *st, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int boot_error(tcp_state *st, int code, const char *fmt, ...)
{
	char msg[TCP_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* the first one, for the note a failed bootstrap leaves (tcp_note_gone) */
	if (!st->fail_msg[0])
		snprintf(st->fail_msg, sizeof(st->fail_msg), "%s", msg);
	return st->host->error(st->h, code, "rank %d of %d: %s", st->rank, st->world, msg);
}

int tcp_store_probe(const tcp_state *st, const char *key, char *buf, size_t cap)
{
	uint64_t len = 0;
	if (!st->host->store_get)
		return ACCEL_ERR_UNSUPPORTED;
	int rc = st->host->store_get(st->h, key, buf, cap - 1, &len, 0);
	if (rc == ACCEL_OK)
		buf[len < cap ? len : cap - 1] = '\0';
	return rc;
}

static void gone_key(const tcp_state *st, int32_t rank, char *key, size_t cap)
{
	snprintf(key, cap, ACCEL_STORE_FMT_TCP_GONE, st->ns, rank);
}

int tcp_gone_probe(const tcp_state *st, int32_t rank, char *buf, size_t cap)
{
	char key[192];
	gone_key(st, rank, key, sizeof(key));
	return tcp_store_probe(st, key, buf, cap);
}

void tcp_note_gone(tcp_state *st, const char *note)
{
	char key[192];
	if (!st->host->store_set || !st->comm_no || st->world < 2)
		return;
	gone_key(st, st->rank, key, sizeof(key));
	st->host->store_set(st->h, key, note, strlen(note));
}

/* The note of a bootstrap that failed here, left before connections close. */
static void note_boot_failed(tcp_state *st)
{
	char note[TCP_MSG_MAX];
	snprintf(note, sizeof(note), "its tcp backend failed to start: %.*s", TCP_MSG_MAX - 64,
	         st->fail_msg[0] ? st->fail_msg : "(see its own error)");
	tcp_note_gone(st, note);
}

/* The address to listen on (numeric, into out). */
static int pick_addr(tcp_state *st, const accel_comm_init_v1 *args, const char *cfg, char *out,
                     size_t cap)
{
	if (cfg && *cfg) {
		snprintf(out, cap, "%s", cfg);
		return ACCEL_OK;
	}
	/* loopback only when the job is known to be on one node (num_nodes is
	 * -1 when the launcher does not tell) */
	if (args->num_nodes == 1) {
		snprintf(out, cap, "127.0.0.1");
		return ACCEL_OK;
	}
	/* the core's master address (ABI minor 2: also the first Slurm node);
	 * from an older core, the environment's */
	const char *master = ACCEL_COMM_INIT_HAS(args, master_addr) ? args->master_addr : NULL;
	if (!master || !*master)
		master = getenv(ACCEL_ENV_MASTER_ADDR);
	if (!master || !*master)
		master = getenv(ACCEL_ENV_TORCH_MASTER_ADDR);
	if (!master || !*master) {
		char nodes[32];
		snprintf(nodes, sizeof(nodes), args->num_nodes > 1 ? "%d nodes" : "an unknown number of nodes",
		         args->num_nodes);
		return boot_error(st, ACCEL_ERR_CONFIG,
		                  "a job on %s needs the address this rank is reached at, found from "
		                  "the route to the master address, but the job has none (neither "
		                  "ACCEL_MASTER_ADDR nor MASTER_ADDR is set, and no Slurm node list): "
		                  "set one, or tcp.addr", nodes);
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
	struct addrinfo *res = NULL;
	int g = getaddrinfo(master, "9", &hints, &res);
	if (g != 0)
		return boot_error(st, ACCEL_ERR_CONFIG,
		                  "cannot resolve the master address '%s' to find the interface to "
		                  "listen on: %s; set tcp.addr", master,
		                  gai_strerror(g));
	int rc = ACCEL_ERR_COMM;
	char why[128] = "no usable address";
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		/* a UDP connect sends nothing: it only picks the route */
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
		    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
		    getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)cap, NULL, 0,
		                NI_NUMERICHOST) == 0) {
			rc = ACCEL_OK;
			close(fd);
			break;
		}
		snprintf(why, sizeof(why), "%s", strerror(errno));
		close(fd);
	}
	freeaddrinfo(res);
	if (rc != ACCEL_OK)
		return boot_error(st, ACCEL_ERR_COMM,
		                  "no route from this node to the master address '%s': %s; set "
		                  "tcp.addr", master, why);
	return ACCEL_OK;
}

static int listen_on(tcp_state *st, const char *addr, char *port_out, size_t cap)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	int g = getaddrinfo(addr, "0", &hints, &res);
	if (g != 0)
		return boot_error(st, ACCEL_ERR_CONFIG, "cannot resolve tcp.addr '%s': %s", addr,
		                  gai_strerror(g));
	int err = 0;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, st->world) == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
			    getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, port_out, (socklen_t)cap,
			                NI_NUMERICSERV) == 0) {
				freeaddrinfo(res);
				st->listen_fd = fd;
				return ACCEL_OK;
			}
		}
		err = errno;
		close(fd);
	}
	freeaddrinfo(res);
	return boot_error(st, ACCEL_ERR_COMM,
	                  "cannot listen on %s: %s (is it an address of this machine? see "
	                  "tcp.addr)", addr, strerror(err));
}

/* The store's verdict on the job, probed while waiting outside the store. */
static int job_failed(tcp_state *st, char *why, size_t cap)
{
	return tcp_store_probe(st, ACCEL_STORE_KEY_JOB_FAILED, why, cap) == ACCEL_OK;
}

#define PROBE_NS 100000000ll   /* how often waits look at accel/job/failed */

/* Wait until fd has `events`, watching the job: 0 ready, -1 with errno
 * (ETIMEDOUT: the deadline), 1 the job failed (why says how). */
static int boot_wait(tcp_state *st, int fd, short events, int64_t deadline, char *why, size_t cap)
{
	for (;;) {
		if (job_failed(st, why, cap))
			return 1;
		int64_t until = mono_ns() + PROBE_NS;
		if (deadline && until > deadline)
			until = deadline;
		if (sock_wait(fd, events, until) == 0)
			return 0;
		if (errno != ETIMEDOUT)
			return -1;
		if (deadline && mono_ns() >= deadline)
			return -1;
	}
}

/* Parse "<addr> <port> <pid> <host>" into its parts. */
static int parse_rec(char *rec, char **addr, char **port, char **pid, char **host)
{
	char *save = NULL;
	*addr = strtok_r(rec, " ", &save);
	*port = strtok_r(NULL, " ", &save);
	*pid = strtok_r(NULL, " ", &save);
	*host = strtok_r(NULL, " ", &save);
	return *addr && *port && *pid && *host;
}

static int job_failed_error(tcp_state *st, const char *waiting, const char *why)
{
	return boot_error(st, ACCEL_ERR_PEER, "the job failed while this rank waited %s: %s",
	                  waiting, why);
}

/* Connect to rank q at addr:port, retrying refused connections (q may not
 * listen yet) until the deadline; -1 after recording the error. */
static int connect_to(tcp_state *st, int32_t q, const char *addr, const char *port,
                      int64_t deadline)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	char why[512], waiting[64];
	snprintf(waiting, sizeof(waiting), "to connect to rank %d", q);
	int g = getaddrinfo(addr, port, &hints, &res);
	if (g != 0) {
		boot_error(st, ACCEL_ERR_COMM, "cannot resolve rank %d's address %s:%s: %s", q, addr,
		           port, gai_strerror(g));
		return -1;
	}
	int err = 0;  /* the last failure of an attempt, not our own deadline */
	for (;;) {
		for (struct addrinfo *a = res; a; a = a->ai_next) {
			int fd = -1;
			int c = sock_connect_begin(a, &fd);
			if (c < 0) {
				err = errno;
				continue;
			}
			if (c == 1) {
				int w = boot_wait(st, fd, POLLOUT, deadline, why, sizeof(why));
				if (w == 1) {
					close(fd);
					freeaddrinfo(res);
					job_failed_error(st, waiting, why);
					return -1;
				}
				int soerr = w == 0 ? sock_connect_error(fd) : 0;
				if (w == 0 && soerr == 0)
					c = 0;
				else if (w == 0)
					err = soerr;
				else if (errno != ETIMEDOUT)
					err = errno;
			}
			if (c == 0) {
				freeaddrinfo(res);
				return fd;
			}
			close(fd);
		}
		if (deadline && mono_ns() >= deadline)
			break;
		if (job_failed(st, why, sizeof(why))) {
			freeaddrinfo(res);
			job_failed_error(st, waiting, why);
			return -1;
		}
		usleep(50000);
	}
	freeaddrinfo(res);
	boot_error(st, ACCEL_ERR_TIMEOUT, "cannot connect to rank %d at %s:%s (%s) within %.1f s%s%s",
	           tcp_wr(st, q), addr, port, st->peers[q].where, (double)st->timeout_ms / 1000.0,
	           err ? ": " : " (no answer)", err ? strerror(err) : "");
	return -1;
}

static void hello_fill(const tcp_state *st, uint64_t job, int32_t to, hello *m)
{
	memset(m, 0, sizeof(*m));
	m->magic = TCP_MAGIC;
	m->proto = TCP_PROTO;
	m->comm_no = st->comm_no;
	m->job = job;
	m->world = st->world;
	m->from = st->rank;
	m->to = to;
	m->chunk_bytes = st->chunk_bytes;
	m->small_bytes = st->small_bytes;
}

/* The settings that decide how every op is cut into messages must be the
 * same on both ends, or the streams are misread: an error naming both. */
static int settings_differ(tcp_state *st, const hello *m)
{
	if (m->chunk_bytes == st->chunk_bytes && m->small_bytes == st->small_bytes)
		return ACCEL_OK;
	return boot_error(st, ACCEL_ERR_CONFIG,
	                  "rank %d uses tcp.chunk_kb %llu and tcp.small_kb %llu, this rank %llu and "
	                  "%llu (after capping); every rank must use the same values", (int)m->from,
	                  (unsigned long long)(m->chunk_bytes / 1024),
	                  (unsigned long long)(m->small_bytes / 1024),
	                  (unsigned long long)(st->chunk_bytes / 1024),
	                  (unsigned long long)(st->small_bytes / 1024));
}

/* What is wrong with a hello that should come from `from` (-1: any higher
 * rank), or NULL. */
static const char *hello_bad(const tcp_state *st, uint64_t job, const hello *m, int32_t from)
{
	if (m->magic != TCP_MAGIC)
		return "not an accel tcp backend";
	if (m->proto != TCP_PROTO)
		return "another version of the tcp backend";
	if (m->job != job)
		return "a process of another job";
	if (m->comm_no != st->comm_no)
		return "another communicator of this job (contexts created in a different order?)";
	if (m->world != st->world)
		return "a rank with another world size";
	if (m->to != st->rank)
		return "a connection meant for another rank";
	if (from >= 0 ? m->from != from : (m->from <= st->rank || m->from >= st->world))
		return "an unexpected rank";
	return NULL;
}

static int publish(tcp_state *st, const char *addr, const char *port)
{
	char key[192], rec[512], host[256] = "?";
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	for (char *p = host; *p; p++)
		if (*p == ' ')
			*p = '_';
	int n = snprintf(rec, sizeof(rec), "%s %s %ld %.200s", addr, port, (long)getpid(), host);
	if (n < 0 || (size_t)n >= sizeof(rec))
		return boot_error(st, ACCEL_ERR_CONFIG, "this rank's address record is too long "
		                  "(address '%s')", addr);
	snprintf(key, sizeof(key), ACCEL_STORE_FMT_TCP_ADDR, st->ns, st->rank);
	if (st->host->store_set(st->h, key, rec, (uint64_t)n) != ACCEL_OK)
		return boot_error(st, ACCEL_ERR_COMM,
		                  "cannot publish this rank's address in the rendezvous store "
		                  "(key '%s')", key);
	return ACCEL_OK;
}

/* Rank q's record, if the store has it, parsed into its parts (recording
 * no error): ACCEL_OK, ACCEL_ERR_NOT_FOUND, ACCEL_ERR_CHECKPOINT for a value
 * that is not a record, else the store's status.  Fills peers[q].where. */
static int try_record(tcp_state *st, int32_t q, char *rec, size_t cap, char **addr, char **port)
{
	char key[192], *pid, *host;
	snprintf(key, sizeof(key), ACCEL_STORE_FMT_TCP_ADDR, st->ns, q);
	int rc = tcp_store_probe(st, key, rec, cap);
	if (rc != ACCEL_OK)
		return rc;
	if (!parse_rec(rec, addr, port, &pid, &host))
		return ACCEL_ERR_CHECKPOINT;
	snprintf(st->peers[q].where, sizeof(st->peers[q].where), "pid %s on %.60s, %.40s:%s", pid,
	         host, *addr, *port);
	return ACCEL_OK;
}

/* Read rank q's record, waiting for it until the deadline while watching
 * the job; fills peers[q].where and the address parts. */
static int lookup(tcp_state *st, int32_t q, int64_t deadline, char *rec, size_t cap, char **addr,
                  char **port)
{
	char key[192], why[512];
	snprintf(key, sizeof(key), ACCEL_STORE_FMT_TCP_ADDR, st->ns, q);
	int64_t pause_us = 5000;
	for (;;) {
		int rc = try_record(st, q, rec, cap, addr, port);
		if (rc == ACCEL_OK)
			return ACCEL_OK;
		if (rc == ACCEL_ERR_CHECKPOINT)
			return boot_error(st, ACCEL_ERR_COMM,
			                  "store key '%s' does not hold a tcp address record; are two "
			                  "jobs sharing one store?", key);
		if (rc != ACCEL_ERR_NOT_FOUND && job_failed(st, why, sizeof(why))) {
			char waiting[64];
			snprintf(waiting, sizeof(waiting), "for rank %d's address", q);
			return job_failed_error(st, waiting, why);
		}
		if (rc != ACCEL_ERR_NOT_FOUND)
			return boot_error(st, rc, "cannot read rank %d's address (store key '%s') from "
			                  "the rendezvous store (status %d): is its host, rank 0, gone?", q,
			                  key, rc);
		if (job_failed(st, why, sizeof(why))) {
			char waiting[64];
			snprintf(waiting, sizeof(waiting), "for rank %d's address", q);
			return job_failed_error(st, waiting, why);
		}
		if (deadline && mono_ns() >= deadline)
			return boot_error(st, ACCEL_ERR_TIMEOUT,
			                  "rank %d never arrived: it did not publish its tcp address "
			                  "(store key '%s') within %.1f s (it has not reached "
			                  "accel_ctx_new, or it uses another backend)", q, key,
			                  (double)st->timeout_ms / 1000.0);
		usleep((useconds_t)pause_us);
		if (pause_us < 100000)
			pause_us *= 2;
	}
}

/* A connection accepted, its hello not yet complete. */
typedef struct pending {
	int fd;
	uint32_t got;
	int64_t limit;    /* dropped when its hello is not complete by then */
	hello m;
} pending;

#define MAX_PENDING 64
#define HELLO_NS 5000000000ll

/* A pending connection's complete hello: take it as rank m.from's
 * connection (1), drop it (0), or fail the bootstrap (< 0). */
static int take_hello(tcp_state *st, pending *pc, uint64_t job, int64_t deadline)
{
	const char *bad = hello_bad(st, job, &pc->m, -1);
	if (!bad && st->peers[pc->m.from].fd >= 0)
		bad = "a second connection from the same rank";
	int32_t q = pc->m.from;
	char rec[512], *qa, *qp;
	/* a rank publishes its record before it connects: one that has none
	 * is not the rank it says it is */
	if (!bad) {
		int tr = try_record(st, q, rec, sizeof(rec), &qa, &qp);
		if (tr == ACCEL_ERR_NOT_FOUND)
			bad = "a process without a published address";
		else if (tr == ACCEL_ERR_CHECKPOINT)
			return boot_error(st, ACCEL_ERR_COMM, "store key '%s/addr/%d' does not "
			                  "hold a tcp address record; are two jobs sharing one store?",
			                  st->ns, q);
		else if (tr != ACCEL_OK && job_failed(st, rec, sizeof(rec)))
			return job_failed_error(st, "for the ranks to connect", rec);
		else if (tr != ACCEL_OK)
			return boot_error(st, tr, "cannot read rank %d's address from the rendezvous "
			                  "store (status %d): is its host, rank 0, gone?", q, tr);
	}
	if (bad) {
		st->host->log(st->h, ACCEL_LOG_WARN,
		              "rank %d dropped a connection from %s (it said rank %d)", st->rank, bad,
		              (int)pc->m.from);
		return 0;
	}
	hello back;
	hello_fill(st, job, q, &back);
	int64_t sd = mono_ns() + HELLO_NS;
	if (deadline && sd > deadline)
		sd = deadline;
	if (sock_send_all(pc->fd, &back, sizeof(back), sd))
		return boot_error(st, ACCEL_ERR_PEER, "rank %d (%s) closed its connection during "
		                  "the hello: %s", tcp_wr(st, q), st->peers[q].where, strerror(errno));
	/* after the answer, so that q sees the difference and says so too
	 * (pc->fd stays with the caller, which closes it) */
	int rc = settings_differ(st, &pc->m);
	if (rc)
		return rc;
	st->peers[q].fd = pc->fd;
	tune(st, pc->fd);
	return 1;
}

/* Accept one connection from every higher rank.  Hellos are read from all
 * pending connections at once, so a connection that says nothing (a port
 * scanner, a stuck process) delays no one and is dropped after 5 s. */
static int accept_higher(tcp_state *st, uint64_t job, int64_t deadline, const char *addr,
                         const char *port)
{
	pending pend[MAX_PENDING];
	struct pollfd pf[MAX_PENDING + 1];
	int np = 0, rc = ACCEL_OK;
	int32_t missing = st->world - 1 - st->rank;
	int64_t next_probe = 0;
	char why[512];
	while (missing > 0) {
		int64_t now = mono_ns();
		if (deadline && now >= deadline) {
			char list[256];
			size_t n = 0;
			list[0] = '\0';
			for (int32_t q = st->rank + 1; q < st->world && n < sizeof(list) - 16; q++)
				if (st->peers[q].fd < 0)
					n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? ", " : "", q);
			rc = boot_error(st, ACCEL_ERR_TIMEOUT,
			                "rank%s %s never arrived: no connection within %.1f s (listening "
			                "on %s:%s)", missing > 1 ? "s" : "", list,
			                (double)st->timeout_ms / 1000.0, addr, port);
			goto out;
		}
		if (now >= next_probe) {
			if (job_failed(st, why, sizeof(why))) {
				char waiting[64];
				snprintf(waiting, sizeof(waiting), "for %d rank%s to connect", missing,
				         missing > 1 ? "s" : "");
				rc = job_failed_error(st, waiting, why);
				goto out;
			}
			next_probe = now + PROBE_NS;
		}
		/* silent connections past their limit go */
		for (int i = 0; i < np; i++) {
			if (now < pend[i].limit)
				continue;
			st->host->log(st->h, ACCEL_LOG_WARN,
			              "rank %d dropped a connection that sent no hello within 5 s",
			              st->rank);
			close(pend[i].fd);
			pend[i--] = pend[--np];
		}
		int n = 0;
		if (np < MAX_PENDING)
			pf[n++] = (struct pollfd){.fd = st->listen_fd, .events = POLLIN};
		int base = n;
		for (int i = 0; i < np; i++)
			pf[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
		if (poll(pf, (nfds_t)n, 100) <= 0)
			continue;
		/* hellos first (the indices of pend[] match pf[base + i]) */
		for (int i = np - 1; i >= 0; i--) {
			if (!pf[base + i].revents)
				continue;
			pending *pc = &pend[i];
			ssize_t got = recv(pc->fd, (char *)&pc->m + pc->got, sizeof(hello) - pc->got,
			                   MSG_DONTWAIT);
			if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				continue;
			int keep = 0;
			if (got > 0) {
				pc->got += (uint32_t)got;
				if (pc->got >= 8 && pc->m.magic == TCP_MAGIC && pc->m.proto != TCP_PROTO) {
					/* another version: its hello may be of another size */
					st->host->log(st->h, ACCEL_LOG_WARN,
					              "rank %d dropped a connection from a tcp backend of "
					              "protocol %u (this one speaks %u): every node must run the "
					              "same accel version", st->rank, pc->m.proto, TCP_PROTO);
					close(pc->fd);
					pend[i] = pend[--np];
					continue;
				}
				if (pc->got < sizeof(hello))
					continue;
				int t = take_hello(st, pc, job, deadline);
				if (t < 0) {
					rc = t;
					goto out;
				}
				keep = t;
				if (keep)
					missing--;
			} else {
				st->host->log(st->h, ACCEL_LOG_WARN,
				              "rank %d dropped a connection that closed before its hello",
				              st->rank);
			}
			if (!keep)
				close(pc->fd);
			pend[i] = pend[--np];
		}
		if (base && (pf[0].revents & POLLIN) && np < MAX_PENDING) {
			int fd = accept4(st->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd >= 0)
				pend[np++] = (pending){.fd = fd, .got = 0, .limit = mono_ns() + HELLO_NS};
		}
	}
out:
	/* say why before the pending connections close under their ranks */
	if (rc != ACCEL_OK)
		note_boot_failed(st);
	for (int i = 0; i < np; i++)
		close(pend[i].fd);
	return rc;
}

/* Why rank q dropped the connection, when it said so in the store (its
 * note, or the job's verdict), waited for up to 0.5 s: it may still be
 * writing it. */
static int peer_note(tcp_state *st, int32_t q, char *buf, size_t cap)
{
	int64_t until = mono_ns() + 500000000ll;
	do {
		if (tcp_gone_probe(st, q, buf, cap) == ACCEL_OK)
			return 1;
		if (job_failed(st, buf, cap))
			return 1;
		usleep(20000);
	} while (mono_ns() < until);
	return 0;
}

int tcp_boot(tcp_state *st, const accel_comm_init_v1 *args, const char *cfg_addr)
{
	char addr[256], port[32], key[64], why[512];
	int rc;
	if (st->world == 1)
		return ACCEL_OK;
	if (!st->host->store_add || !st->host->store_get || !st->host->store_set)
		return boot_error(st, ACCEL_ERR_UNSUPPORTED, "the host has no rendezvous store");
	int64_t deadline = mono_deadline_ns(st->timeout_ms);
	uint64_t job = job_hash(args->job_id);

	if (!st->ns[0]) {
		/* the world: the k-th communicator of every rank */
		snprintf(key, sizeof(key), ACCEL_STORE_FMT_TCP_COUNT, st->rank);
		if ((rc = st->host->store_add(st->h, key, 1, &st->comm_no)))
			return rc;
		snprintf(st->ns, sizeof(st->ns), ACCEL_STORE_FMT_TCP_NS, (long long)st->comm_no);
	}   /* a group: named by its tag (tcp_split) */
	if ((rc = pick_addr(st, args, cfg_addr, addr, sizeof(addr))) ||
	    (rc = listen_on(st, addr, port, sizeof(port))) || (rc = publish(st, addr, port)))
		return rc;

	/* connect to the lower ranks */
	for (int32_t q = 0; q < st->rank; q++) {
		char rec[512], *qa, *qp;
		if ((rc = lookup(st, q, deadline, rec, sizeof(rec), &qa, &qp)))
			return rc;
		int fd = connect_to(st, q, qa, qp, deadline);
		if (fd < 0)
			return ACCEL_ERR_COMM;
		st->peers[q].fd = fd;
		hello m, back;
		hello_fill(st, job, q, &m);
		if (sock_send_all(fd, &m, sizeof(m), deadline))
			return boot_error(st, ACCEL_ERR_PEER, "rank %d (%s) closed the connection before "
			                  "the hello: %s", tcp_wr(st, q), st->peers[q].where, strerror(errno));
		/* its answer, watching the job (q may itself still be connecting) */
		size_t got = 0;
		while (got < sizeof(back)) {
			ssize_t n = recv(fd, (char *)&back + got, sizeof(back) - got, MSG_DONTWAIT);
			if (n > 0) {
				got += (size_t)n;
				continue;
			}
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
				int w = boot_wait(st, fd, POLLIN, deadline, why, sizeof(why));
				if (w == 1) {
					char waiting[64];
					snprintf(waiting, sizeof(waiting), "for rank %d's hello", q);
					return job_failed_error(st, waiting, why);
				}
				if (w == 0)
					continue;
			}
			int e = n == 0 ? ECONNRESET : errno;
			if (e != ETIMEDOUT && peer_note(st, q, why, sizeof(why)))
				return boot_error(st, ACCEL_ERR_PEER, "rank %d (%s) closed the connection "
				                  "during the hello: %s", tcp_wr(st, q), st->peers[q].where, why);
			return boot_error(st, e == ETIMEDOUT ? ACCEL_ERR_TIMEOUT : ACCEL_ERR_PEER,
			                  "rank %d (%s) did not answer the connection's hello%s: %s",
			                  tcp_wr(st, q), st->peers[q].where, e == ETIMEDOUT ? " in time" : "",
			                  strerror(e));
		}
		/* another version: the rest of its hello means something else */
		if (back.magic == TCP_MAGIC && back.proto != TCP_PROTO)
			return boot_error(st, ACCEL_ERR_COMM, "rank %d (%s) runs tcp backend protocol %u, "
			                  "this rank %u: every node must run the same accel version",
			                  tcp_wr(st, q), st->peers[q].where, back.proto, TCP_PROTO);
		/* its answer comes from q, addressed to us */
		const char *bad = hello_bad(st, job, &back, q);
		if (bad)
			return boot_error(st, ACCEL_ERR_COMM, "the process at %s is %s, not rank %d of "
			                  "this communicator", st->peers[q].where, bad, tcp_wr(st, q));
		if ((rc = settings_differ(st, &back)))
			return rc;
		tune(st, fd);
	}

	if ((rc = accept_higher(st, job, deadline, addr, port)))
		return rc;
	close(st->listen_fd);
	st->listen_fd = -1;
	return ACCEL_OK;
}
