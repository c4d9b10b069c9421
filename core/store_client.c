/* SPDX-License-Identifier: MIT */
/* core/store_client.c: the rendezvous store's client (store.h): one TCP
 * connection per blocking call in flight, each request answered by the
 * server (store_server.c, in rank 0) when its condition holds or its own
 * deadline passes.  The client waits a little longer than the request's
 * timeout, so a server that stopped answering is reported as such rather
 * than hanging. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/mono.h"
#include "backends/common/sock.h"
#include "store-impl.h"

/* One TCP connection.  A call takes an idle one for its whole round trip, so
 * a thread blocked in get/wait/barrier never holds up another thread of the
 * same rank (which may be the one about to set the key); extra connections
 * are opened on demand and kept. */
typedef struct sconn {
	int fd;
	struct sconn *next;
} sconn;

struct accel_store {
	pthread_mutex_t lock;  /* guards idle, broken, broken_msg */
	sconn *idle;
	int rank, world;
	int64_t timeout_ms;
	int64_t keepalive_ms;  /* store_sock_tune() of its connections */
	char addr[256];
	int port;
	char where[300];       /* "host:port" or "[v6]:port", for messages */
	int broken;            /* after an I/O failure: later calls fail at once */
	char broken_msg[512];
	int failed_self;       /* accelp_store_fail was called: rank 0 stops at once */
	int abandoned;         /* accelp_store_abandon: and without a warning */
	uint64_t token;        /* 0, or the job token sent in HELLO */
	int refused_is_final;  /* accelp_store_join: the server listened before the
	                          address was sent, so "refused" will not change */
	store_server *srv;
};

/* How long rank 0's server stays up after its own rank failed, to deliver
 * the failure to the ranks still waiting. */
#define STORE_ABORT_LINGER_MS 1000

/* Record a lost connection (closing it); every later call fails with the
 * same message. */
static int set_broken(accel_store *st, sconn *c, accel_err *err, int code, const char *fmt,
                      ...) ACCEL_PRINTF(5, 6);
static int set_broken(accel_store *st, sconn *c, accel_err *err, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
	pthread_mutex_lock(&st->lock);
	if (!st->broken) {
		st->broken = 1;
		snprintf(st->broken_msg, sizeof(st->broken_msg), "%s", msg);
	}
	pthread_mutex_unlock(&st->lock);
	return accelp_err_set(err, code, "%s", msg);
}

/* One request/reply round trip on connection c (owned by the caller for the
 * call).  On ACCEL_OK *ret_body holds the reply after the status word (owned;
 * free it).  A server-side failure comes back as its status with the
 * server's message in err.  The reply may take wait_ms (what the server may
 * wait for, e.g. a key) and slack_ms more (the trip and a busy server). */
static int rpc_on(accel_store *st, sconn *c, sbuf *req, int64_t wait_ms, int64_t slack_ms,
                  sbuf *ret_body, accel_err *err)
{
	char et[128], ts[32];
	int e = 0;
	if (req->oom)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	int64_t start = mono_ms();
	int64_t deadline = mono_ms_to_ns(mono_after(mono_after(start, wait_ms), slack_ms));
	if (sock_send_all(c->fd, req->p, req->len, deadline) < 0) {
		e = errno;
		return set_broken(st, c, err, ACCEL_ERR_COMM, "lost the connection to the rendezvous "
		                  "store at %s (rank %d): %s; rank 0 hosts the store: did it exit?",
		                  st->where, st->rank, store_errtext(e, et, sizeof(et)));
	}
	uint8_t hdr[4];
	if (sock_recv_all(c->fd, hdr, 4, deadline) < 0) {
		e = errno;
		if (e == ETIMEDOUT) {
			store_fmt_secs(mono_ms() - start, ts, sizeof(ts));
			return set_broken(st, c, err, ACCEL_ERR_TIMEOUT, "no reply from the rendezvous store "
			                  "at %s (rank %d) within %s: is rank 0 stopped or overloaded?",
			                  st->where, st->rank, ts);
		}
		return set_broken(st, c, err, ACCEL_ERR_COMM, "lost the connection to the rendezvous "
		                  "store at %s (rank %d): %s; rank 0 hosts the store: did it exit?",
		                  st->where, st->rank, store_errtext(e, et, sizeof(et)));
	}
	uint32_t blen = store_rd_u32(hdr);
	if (blen < 4 || blen > STORE_MAX_FRAME)
		return set_broken(st, c, err, ACCEL_ERR_COMM, "the rendezvous store at %s sent a malformed "
		                  "reply (rank %d); is something else listening on that port?",
		                  st->where, st->rank);
	sbuf body = {0};
	if (sb_reserve(&body, blen) < 0)
		return set_broken(st, c, err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	if (sock_recv_all(c->fd, body.p, blen, deadline) < 0) {
		e = errno;
		sb_free(&body);
		return set_broken(st, c, err, ACCEL_ERR_COMM, "lost the connection to the rendezvous "
		                  "store at %s (rank %d): %s", st->where, st->rank,
		                  store_errtext(e, et, sizeof(et)));
	}
	body.len = blen;
	int32_t status = (int32_t)store_rd_u32(body.p);
	if (status != ACCEL_OK) {
		cursor cu = {body.p + 4, blen - 4, 0};
		uint32_t ml;
		const uint8_t *m = cu_str(&cu, &ml);
		if (status > 0 || status < ACCEL_ERR_INTERNAL)
			status = ACCEL_ERR_COMM;
		accelp_err_set(err, status, "%.*s", m ? (int)ml : 0, m ? (const char *)m : "");
		sb_free(&body);
		return status;
	}
	memmove(body.p, body.p + 4, blen - 4);
	body.len = blen - 4;
	*ret_body = body;
	return ACCEL_OK;
}

static int client_connect(const accel_store *st, int64_t timeout_ms, int *ret_fd,
                          accel_err *err)
{
	const char *addr = st->addr;
	int port = st->port;
	char ps[16], et[128], ts[32];
	snprintf(ps, sizeof(ps), "%d", port);
	int64_t start = mono_ms(), deadline = mono_after(start, timeout_ms);
	int64_t backoff = 10;
	int last = 0;
	const char *last_text = NULL;
	for (;;) {
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
		int gai = getaddrinfo(addr, ps, &hints, &res);
		if (gai == 0) {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				int fd, e = 0;
				if (sock_connect(ai, mono_ms_to_ns(deadline), &fd) == 0) {
					freeaddrinfo(res);
					store_sock_tune(fd, st->keepalive_ms);
					*ret_fd = fd;
					return ACCEL_OK;
				}
				e = errno;
				/* Running out of our own time says less than the
				 * previous attempt's answer ("refused"). */
				if (e != ETIMEDOUT || !last)
					last = e;
			}
			freeaddrinfo(res);
			last_text = NULL;
		} else if (gai == EAI_AGAIN) {
			last_text = "temporary failure in name resolution";
		} else {
			return accelp_err_set(err, ACCEL_ERR_COMM, "cannot resolve the rendezvous store "
			                     "address '%s' (rank %d): %s", addr, st->rank,
			                     gai == EAI_SYSTEM ? store_errtext(errno, et, sizeof(et)) :
			                     gai_strerror(gai));
		}
		int64_t left = deadline - mono_ms();
		if (st->refused_is_final && last == ECONNREFUSED && !last_text)
			return accelp_err_set(err, ACCEL_ERR_COMM, "cannot reach the rendezvous store at "
			                     "%s (rank %d): connection refused (the store was up before "
			                     "its address was sent, so nothing listens there for this "
			                     "rank)", st->where, st->rank);
		if (left <= 0)
			break;
		int64_t nap = backoff < left ? backoff : left;
		struct timespec tsl = {(time_t)(nap / 1000), (long)(nap % 1000) * 1000000};
		while (nanosleep(&tsl, &tsl) < 0 && errno == EINTR)
			;
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	store_fmt_secs(timeout_ms, ts, sizeof(ts));
	return accelp_err_set(err, ACCEL_ERR_COMM, "cannot reach the rendezvous store at %s "
	                     "(rank %d): %s after %s", st->where, st->rank,
	                     last_text ? last_text : store_errtext(last ? last : ETIMEDOUT, et, sizeof(et)),
	                     ts);
}

/* Open a connection and introduce ourselves; secondary connections belong
 * to a rank that is already connected. */
/* Connect and say HELLO: the connect may take timeout_ms, the reply
 * timeout_ms and the usual slack more; with `within` set, both together
 * take at most timeout_ms. */
static int conn_open_within(accel_store *st, uint32_t flags, int64_t timeout_ms, int within,
                            sconn **ret, accel_err *err)
{
	int64_t start = mono_ms();
	sconn *c = calloc(1, sizeof(*c));
	if (!c)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	c->fd = -1;
	int rc = client_connect(st, timeout_ms, &c->fd, err);
	if (rc < 0) {
		free(c);
		return rc;
	}
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_HELLO);
	sb_u32(&req, STORE_MAGIC);
	sb_u32(&req, STORE_VERSION);
	sb_u32(&req, (uint32_t)st->rank);
	sb_u32(&req, (uint32_t)st->world);
	sb_u32(&req, flags | (st->token ? HELLO_TOKEN : 0));
	if (st->token)
		sb_i64(&req, (int64_t)st->token);
	sb_end(&req, at);
	if (within) {
		int64_t left = mono_after(start, timeout_ms) - mono_ms();
		rc = rpc_on(st, c, &req, left > 0 ? left : 0, 0, &rep, err);
	} else {
		rc = rpc_on(st, c, &req, timeout_ms, STORE_REPLY_SLACK_MS, &rep, err);
	}
	sb_free(&req);
	sb_free(&rep);
	if (rc < 0) {
		if (c->fd >= 0)
			close(c->fd);
		free(c);
		return rc;
	}
	*ret = c;
	return ACCEL_OK;
}

static int conn_open(accel_store *st, uint32_t flags, int64_t timeout_ms, sconn **ret,
                     accel_err *err)
{
	return conn_open_within(st, flags, timeout_ms, 0, ret, err);
}

static int conn_get(accel_store *st, sconn **ret, accel_err *err)
{
	pthread_mutex_lock(&st->lock);
	if (st->broken) {
		int rc = accelp_err_set(err, ACCEL_ERR_COMM, "%s", st->broken_msg);
		pthread_mutex_unlock(&st->lock);
		return rc;
	}
	sconn *c = st->idle;
	if (c)
		st->idle = c->next;
	pthread_mutex_unlock(&st->lock);
	if (c) {
		*ret = c;
		return ACCEL_OK;
	}
	return conn_open(st, HELLO_SECONDARY, st->timeout_ms, ret, err);
}

static void conn_put(accel_store *st, sconn *c)
{
	if (c->fd < 0) {
		free(c);
		return;
	}
	pthread_mutex_lock(&st->lock);
	c->next = st->idle;
	st->idle = c;
	pthread_mutex_unlock(&st->lock);
}

/* A whole call: take a connection, round trip, give it back. */
static int rpc(accel_store *st, sbuf *req, int64_t wait_ms, sbuf *ret_body, accel_err *err)
{
	sconn *c = NULL;
	int rc = conn_get(st, &c, err);
	if (rc < 0)
		return rc;
	rc = rpc_on(st, c, req, wait_ms, STORE_REPLY_SLACK_MS, ret_body, err);
	conn_put(st, c);
	return rc;
}

int accelp_store_new(const char *addr, int port, int rank, int world_size, int64_t timeout_ms,
                    accel_store **ret_store, accel_err *err)
{
	return accelp_store_new_keepalive(addr, port, rank, world_size, timeout_ms, 0, ret_store, err);
}

typedef struct {
	const char *listen_addr;  /* rank 0's server listens here (NULL: every interface) */
	const char *addr;         /* every rank connects here */
	int port, rank, world_size;
	int64_t timeout_ms, keepalive_ms;
	int64_t within_ms;        /* > 0: connect and HELLO within this, no slack */
	uint64_t token;           /* 0, or the job token (rank 0's server wants it) */
} open_args;

static int store_open(const open_args *a, accel_store **ret_store, accel_err *err);

int accelp_store_new_keepalive(const char *addr, int port, int rank, int world_size,
                              int64_t timeout_ms, int64_t keepalive_ms, accel_store **ret_store,
                              accel_err *err)
{
	open_args a = {addr, addr, port, rank, world_size, timeout_ms, keepalive_ms, 0, 0};
	return store_open(&a, ret_store, err);
}

int accelp_store_new_host(int world_size, int64_t timeout_ms, int64_t keepalive_ms,
                         uint64_t token, accel_store **ret_store, accel_err *err)
{
	open_args a = {NULL, "127.0.0.1", 0, 0, world_size, timeout_ms, keepalive_ms, 0, token};
	return store_open(&a, ret_store, err);
}

int accelp_store_join(const char *addr, int port, int rank, int world_size, int64_t within_ms,
                     int64_t timeout_ms, int64_t keepalive_ms, uint64_t token,
                     accel_store **ret_store, accel_err *err)
{
	if (within_ms <= 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: join time %" PRId64
		                     " ms must be > 0", within_ms);
	open_args a = {addr, addr, port, rank, world_size, timeout_ms, keepalive_ms, within_ms,
	               token};
	return store_open(&a, ret_store, err);
}

static int store_open(const open_args *a, accel_store **ret_store, accel_err *err)
{
	const char *addr = a->addr;
	int port = a->port, rank = a->rank, world_size = a->world_size;
	int64_t timeout_ms = a->timeout_ms, keepalive_ms = a->keepalive_ms;
	if (!addr || !*addr || !ret_store)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_store_new: no address given");
	if (port < (rank == 0 ? 0 : 1) || port > 65535)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: port %d is not in "
		                     "%d..65535", port, rank == 0 ? 0 : 1);
	if (world_size < 1 || rank < 0 || rank >= world_size)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: rank %d is not in "
		                     "0..%d", rank, world_size - 1);
	if (timeout_ms <= 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: timeout %" PRId64
		                     " ms must be > 0", timeout_ms);
	if (strlen(addr) > 255)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: address is longer "
		                     "than 255 characters");
	int rc;
	accel_store *st = calloc(1, sizeof(*st));
	if (!st)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	pthread_mutex_init(&st->lock, NULL);
	st->rank = rank;
	st->world = world_size;
	st->timeout_ms = timeout_ms;
	st->keepalive_ms = keepalive_ms;
	st->token = a->token;
	st->refused_is_final = a->within_ms > 0;
	snprintf(st->addr, sizeof(st->addr), "%s", addr);
	if (rank == 0 &&
	    (rc = store_server_start(a->listen_addr, port, world_size, timeout_ms, keepalive_ms, NULL,
	                       a->token, &st->srv, err)) < 0)
		goto fail;
	st->port = st->srv ? store_server_port(st->srv) : port;   /* port 0: the one the kernel chose */
	if (strchr(addr, ':'))
		snprintf(st->where, sizeof(st->where), "[%s]:%d", addr, st->port);
	else
		snprintf(st->where, sizeof(st->where), "%s:%d", addr, st->port);
	if ((rc = a->within_ms > 0 ? conn_open_within(st, 0, a->within_ms, 1, &st->idle, err)
	                           : conn_open(st, 0, timeout_ms, &st->idle, err)) < 0)
		goto fail;
	*ret_store = st;
	return ACCEL_OK;
fail:
	if (st->srv) {
		/* Ranks that reached rank 0's server meanwhile must not wait for
		 * it until their timeout. */
		char why[ACCEL_ERRMSG_MAX + 64];
		snprintf(why, sizeof(why), "rank 0 failed: %s", err ? err->msg : "could not join");
		store_server_stop(st->srv, STORE_ABORT_LINGER_MS, why);
	}
	accelp_store_free(st);
	return rc;
}

accel_store *accelp_store_free(accel_store *st)
{
	if (!st)
		return NULL;
	/* No call may be in flight now (the caller's contract): every
	 * connection is idle.  Say goodbye on each, so the server records a
	 * clean exit rather than a crash. */
	pthread_mutex_lock(&st->lock);
	sconn *list = st->idle;
	st->idle = NULL;
	pthread_mutex_unlock(&st->lock);
	sbuf req = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_BYE);
	sb_end(&req, at);
	while (list) {
		sconn *nx = list->next;
		if (list->fd >= 0) {
			if (!req.oom)
				(void)sock_send_all(list->fd, req.p, req.len, mono_deadline_ns(1000));
			close(list->fd);
		}
		free(list);
		list = nx;
	}
	sb_free(&req);
	if (st->srv) {
		if (st->abandoned)   /* read by the thread after the wake */
			store_server_abandon(st->srv);
		store_server_stop(st->srv, st->failed_self ? STORE_ABORT_LINGER_MS : -1, NULL);
		st->srv = store_server_free(st->srv);
	}
	pthread_mutex_destroy(&st->lock);
	free(st);
	return NULL;
}

int accelp_store_port(const accel_store *st)
{
	return st ? st->port : 0;
}

accel_store *accelp_store_abandon(accel_store *st)
{
	if (st)
		st->failed_self = st->abandoned = 1;
	return accelp_store_free(st);
}

struct accel_store_refusal {
	store_server *srv;
};

int accelp_store_refusal_start(const char *addr, int port, int world_size, const char *why,
                              accel_store_refusal **ret, accel_err *err)
{
	if (!addr || !*addr || port < 1 || port > 65535 || world_size < 1 || !why || !ret)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_store_refusal_start: bad argument");
	accel_store_refusal *r = calloc(1, sizeof(*r));
	if (!r)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	int rc = store_server_start(addr, port, world_size, 0, 0, why, 0, &r->srv, err);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*ret = r;
	return ACCEL_OK;
}

accel_store_refusal *accelp_store_refusal_stop(accel_store_refusal *r)
{
	if (r) {
		store_server_stop(r->srv, -1, NULL);
		store_server_free(r->srv);
		free(r);
	}
	return NULL;
}

int accelp_store_fail(accel_store *st, const char *why)
{
	if (!st)
		return ACCEL_ERR_INVALID_ARG;
	st->failed_self = 1;
	char w[401];
	snprintf(w, sizeof(w), "%s", why && *why ? why : "(no reason given)");
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_FAILED);
	sb_str(&req, w, strlen(w));
	sb_end(&req, at);
	accel_err e = {0};
	int rc = req.oom ? ACCEL_ERR_NOMEM : rpc(st, &req, 2000, &rep, &e);
	sb_free(&req);
	sb_free(&rep);
	return rc;
}

int accelp_store_report_exit(const char *addr, int port, int world_size, int rank, const char *how,
                            int64_t timeout_ms, accel_err *err)
{
	if (!addr || !*addr || port < 1 || port > 65535 || world_size < 1 || rank < 0 ||
	    rank >= world_size || timeout_ms <= 0 || !how || strlen(how) > 200 || strlen(addr) > 255)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_store_report_exit: bad argument");
	accel_store st = {.rank = rank, .world = world_size, .timeout_ms = timeout_ms, .port = port};
	pthread_mutex_init(&st.lock, NULL);
	snprintf(st.addr, sizeof(st.addr), "%s", addr);
	snprintf(st.where, sizeof(st.where), strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
	sconn *c = NULL;
	int rc = conn_open(&st, HELLO_OBSERVER, timeout_ms, &c, err);
	if (rc == ACCEL_OK) {
		sbuf req = {0}, rep = {0};
		size_t at = sb_begin(&req);
		sb_u8(&req, OP_EXITED);
		sb_u32(&req, (uint32_t)rank);
		sb_str(&req, how, strlen(how));
		sb_end(&req, at);
		rc = rpc_on(&st, c, &req, timeout_ms, STORE_REPLY_SLACK_MS, &rep, err);
		sb_free(&req);
		sb_free(&rep);
		if (c->fd >= 0)
			close(c->fd);
		free(c);
	}
	pthread_mutex_destroy(&st.lock);
	return rc;
}

static int check_key(const accel_store *st, const char *what, const char *key, accel_err *err)
{
	if (!st)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store %s: no store", what);
	if (!key)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store %s: NULL key", what);
	if (strlen(key) > STORE_MAX_KEY)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store %s: key longer than %u bytes",
		                     what, STORE_MAX_KEY);
	return ACCEL_OK;
}

int accelp_store_set(accel_store *st, const char *key, const void *value, uint64_t len,
                    accel_err *err)
{
	int rc = check_key(st, "set", key, err);
	if (rc < 0)
		return rc;
	if (len > STORE_MAX_VALUE || (len && !value))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store set '%s': value of %" PRIu64
		                     " bytes (the limit is %u, and NULL needs length 0)", key, len,
		                     STORE_MAX_VALUE);
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_SET);
	sb_str(&req, key, strlen(key));
	sb_str(&req, value, (size_t)len);
	sb_end(&req, at);
	rc = rpc(st, &req, st->timeout_ms, &rep, err);
	sb_free(&req);
	sb_free(&rep);
	return rc;
}

int accelp_store_get(accel_store *st, const char *key, void *buf, uint64_t cap,
                    uint64_t *ret_len, int64_t timeout_ms, accel_err *err)
{
	int rc = check_key(st, "get", key, err);
	if (rc < 0)
		return rc;
	if (cap && !buf)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store get '%s': NULL buffer", key);
	if (timeout_ms < 0)
		timeout_ms = st->timeout_ms;
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_GET);
	sb_i64(&req, timeout_ms);
	sb_str(&req, key, strlen(key));
	sb_end(&req, at);
	rc = rpc(st, &req, timeout_ms, &rep, err);
	sb_free(&req);
	if (rc == ACCEL_OK) {
		size_t n = rep.len < cap ? rep.len : (size_t)cap;
		if (n)
			memcpy(buf, rep.p, n);
		if (ret_len)
			*ret_len = rep.len;
	}
	sb_free(&rep);
	return rc;
}

int accelp_store_add(accel_store *st, const char *key, int64_t delta, int64_t *ret_value,
                    accel_err *err)
{
	int rc = check_key(st, "add", key, err);
	if (rc < 0)
		return rc;
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_ADD);
	sb_i64(&req, delta);
	sb_str(&req, key, strlen(key));
	sb_end(&req, at);
	rc = rpc(st, &req, st->timeout_ms, &rep, err);
	sb_free(&req);
	if (rc == ACCEL_OK) {
		cursor cu = {rep.p, rep.len, 0};
		int64_t v = cu_i64(&cu);
		if (cu.bad)
			rc = accelp_err_set(err, ACCEL_ERR_COMM, "store add '%s': malformed reply", key);
		else if (ret_value)
			*ret_value = v;
	}
	sb_free(&rep);
	return rc;
}

int accelp_store_wait(accel_store *st, const char *const *keys, uint32_t n, int64_t timeout_ms,
                     accel_err *err)
{
	if (!st || (n && !keys))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store wait: no store or no keys");
	if (n > STORE_MAX_WAIT_KEYS)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store wait: %u keys (the limit is %u)",
		                     n, STORE_MAX_WAIT_KEYS);
	int rc;
	for (uint32_t i = 0; i < n; i++)
		if ((rc = check_key(st, "wait", keys[i], err)) < 0)
			return rc;
	if (timeout_ms < 0)
		timeout_ms = st->timeout_ms;
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_WAIT);
	sb_i64(&req, timeout_ms);
	sb_u32(&req, n);
	for (uint32_t i = 0; i < n; i++)
		sb_str(&req, keys[i], strlen(keys[i]));
	sb_end(&req, at);
	if (!req.oom && req.len - 4 > STORE_MAX_FRAME) {
		sb_free(&req);
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "store wait: the key list is too long");
	}
	rc = rpc(st, &req, timeout_ms, &rep, err);
	sb_free(&req);
	sb_free(&rep);
	return rc;
}

int accelp_store_barrier(accel_store *st, const char *name, int64_t timeout_ms, accel_err *err)
{
	int rc = check_key(st, "barrier", name, err);
	if (rc < 0)
		return rc;
	if (timeout_ms < 0)
		timeout_ms = st->timeout_ms;
	sbuf req = {0}, rep = {0};
	size_t at = sb_begin(&req);
	sb_u8(&req, OP_BARRIER);
	sb_i64(&req, timeout_ms);
	sb_str(&req, name, strlen(name));
	sb_end(&req, at);
	rc = rpc(st, &req, timeout_ms, &rep, err);
	sb_free(&req);
	sb_free(&rep);
	return rc;
}

