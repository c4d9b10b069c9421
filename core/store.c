/* SPDX-License-Identifier: MIT */
/* core/store.c: the rendezvous key-value store.
 *
 * One TCP server (a thread in rank 0) and one client connection per rank.
 * Blocking requests (get, wait, barrier) are parked in the server, which
 * answers when the condition holds or when the request's own deadline
 * passes; the server therefore composes the timeout messages, because only
 * it knows which keys were never set and which ranks never arrived.  The
 * client waits a little longer than the request's timeout, so a server that
 * stopped answering is reported as such rather than hanging.
 *
 * Wire format (docs/launch.md has the full table): every message is a u32
 * big-endian body length followed by the body.  Requests start with a u8
 * op; replies start with an i32 status (ACCEL_OK or an ACCEL_ERR_* code)
 * followed by the op's result or, on failure, a length-prefixed message. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"

#define STORE_MAGIC 0x41435354u /* "ACST" */
#define STORE_VERSION 1u
#define STORE_MAX_KEY 4096u
#define STORE_MAX_VALUE (64u << 20)
#define STORE_MAX_FRAME (STORE_MAX_VALUE + 2 * STORE_MAX_KEY + 64u)
#define STORE_MAX_WAIT_KEYS 65536u
/* Extra time a client gives the server beyond a request's own timeout. */
#define STORE_REPLY_SLACK_MS 5000

/* HELLO flags */
#define HELLO_SECONDARY 1u
#define HELLO_OBSERVER 2u   /* not a rank: a launcher reporting rank exits */
#define HELLO_TOKEN 4u      /* a u64 job token follows: the store must have it */

enum {
	OP_HELLO = 1,
	OP_SET = 2,
	OP_GET = 3,
	OP_ADD = 4,
	OP_WAIT = 5,
	OP_BARRIER = 6,
	OP_BYE = 7,
	OP_EXITED = 8,   /* observer: rank r's process ended (u32 rank, str how) */
	OP_FAILED = 9,   /* rank: it failed and leaves the job (str why) */
};

/* The key the server sets when the job can no longer complete because a
 * rank exited before joining it; its value is the message.  Backends that
 * wait outside the store probe it (docs/launch.md). */
#define STORE_FAILED_KEY "accel/job/failed"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* now + ms without overflow: a timeout too large to represent means never
 * (a peer may send any value; a caller may pass INT64_MAX for "forever"). */
static int64_t deadline_after(int64_t now, int64_t ms)
{
	int64_t d;
	return __builtin_add_overflow(now, ms, &d) ? INT64_MAX : d;
}

static void fmt_secs(int64_t ms, char *buf, size_t cap)
{
	snprintf(buf, cap, "%g s", (double)ms / 1000.0);
}

/* strerror with a lower-case first letter, to sit inside a sentence. */
static const char *errtext(int e, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] = (char)(buf[0] - 'A' + 'a');
	return buf;
}

/* ---- byte buffers ---------------------------------------------------------- */

typedef struct sbuf {
	uint8_t *p;
	size_t len, cap;
	int oom;
} sbuf;

static void sb_free(sbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static int sb_reserve(sbuf *b, size_t extra)
{
	if (b->oom)
		return -1;
	if (b->len + extra <= b->cap)
		return 0;
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->len + extra)
		nc *= 2;
	uint8_t *np = realloc(b->p, nc);
	if (!np) {
		b->oom = 1;
		return -1;
	}
	b->p = np;
	b->cap = nc;
	return 0;
}

static void sb_put(sbuf *b, const void *data, size_t n)
{
	if (sb_reserve(b, n) < 0)
		return;
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void sb_u8(sbuf *b, uint8_t v)
{
	sb_put(b, &v, 1);
}

static void sb_u32(sbuf *b, uint32_t v)
{
	uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	sb_put(b, x, 4);
}

static void sb_i64(sbuf *b, int64_t sv)
{
	uint64_t v = (uint64_t)sv;
	sb_u32(b, (uint32_t)(v >> 32));
	sb_u32(b, (uint32_t)v);
}

static void sb_str(sbuf *b, const void *s, size_t n)
{
	sb_u32(b, (uint32_t)n);
	sb_put(b, s, n);
}

/* Start a frame: reserve the length word, patched by sb_end. */
static size_t sb_begin(sbuf *b)
{
	size_t at = b->len;
	sb_u32(b, 0);
	return at;
}

static void sb_end(sbuf *b, size_t at)
{
	if (b->oom)
		return;
	uint32_t n = (uint32_t)(b->len - at - 4);
	b->p[at] = (uint8_t)(n >> 24);
	b->p[at + 1] = (uint8_t)(n >> 16);
	b->p[at + 2] = (uint8_t)(n >> 8);
	b->p[at + 3] = (uint8_t)n;
}

static uint32_t rd_u32raw(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct cursor {
	const uint8_t *p;
	size_t left;
	int bad;
} cursor;

static uint8_t cu_u8(cursor *c)
{
	if (c->bad || c->left < 1)
		return c->bad = 1, 0;
	c->left--;
	return *c->p++;
}

static uint32_t cu_u32(cursor *c)
{
	if (c->bad || c->left < 4)
		return c->bad = 1, 0;
	uint32_t v = rd_u32raw(c->p);
	c->p += 4;
	c->left -= 4;
	return v;
}

static int64_t cu_i64(cursor *c)
{
	uint64_t hi = cu_u32(c), lo = cu_u32(c);
	return (int64_t)(hi << 32 | lo);
}

/* A length-prefixed byte string, borrowed from the frame. */
static const uint8_t *cu_str(cursor *c, uint32_t *ret_len)
{
	uint32_t n = cu_u32(c);
	if (c->bad || c->left < n) {
		c->bad = 1;
		*ret_len = 0;
		return NULL;
	}
	const uint8_t *s = c->p;
	c->p += n;
	c->left -= n;
	*ret_len = n;
	return s;
}

/* A key: no NUL inside, at most STORE_MAX_KEY bytes; returned owned. */
static char *cu_key(cursor *c)
{
	uint32_t n;
	const uint8_t *s = cu_str(c, &n);
	if (!s || n > STORE_MAX_KEY || memchr(s, 0, n)) {
		c->bad = 1;
		return NULL;
	}
	char *k = malloc(n + 1);
	if (!k) {
		c->bad = 1;
		return NULL;
	}
	memcpy(k, s, n);
	k[n] = '\0';
	return k;
}

/* "0-3, 5, 7-9" from a flag array, at most cap bytes. */
static void fmt_ranks(const uint8_t *set, int n, char *out, size_t cap)
{
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (!set[i])
			continue;
		int j = i;
		while (j + 1 < n && set[j + 1])
			j++;
		int w;
		if (j == i)
			w = snprintf(out + len, cap - len, "%s%d", len ? ", " : "", i);
		else
			w = snprintf(out + len, cap - len, "%s%d-%d", len ? ", " : "", i, j);
		if (w < 0 || (size_t)w >= cap - len) {
			if (cap > 4)
				snprintf(out + cap - 4, 4, "...");
			return;
		}
		len += (size_t)w;
		i = j;
	}
}

/* ---- server ------------------------------------------------------------------ */

typedef struct kv {
	char *key;
	uint8_t *val;
	uint32_t len;
	struct kv *next;
} kv;

/* RANK_EXITED: its launcher reported that it ended without ever connecting;
 * RANK_FAILED: it reported its own failure (FAILED) and is leaving */
enum { RANK_NEVER = 0, RANK_CONNECTED = 1, RANK_LEFT = 2, RANK_CRASHED = 3, RANK_EXITED = 4,
       RANK_FAILED = 5 };

typedef struct sclient {
	int fd;
	int rank;              /* -1 until HELLO */
	int dead;              /* close at the end of this loop turn */
	int said_bye;
	int primary;           /* the rank's first connection: its presence */
	int observer;          /* HELLO_OBSERVER: may only send EXITED and BYE */
	sbuf in, out;
	size_t out_off;
	/* the parked request, if any */
	int wait_op;           /* 0, OP_GET, OP_WAIT or OP_BARRIER */
	int64_t deadline, timeout_ms;
	char *wait_key;        /* GET key, BARRIER name */
	char **wait_keys;      /* WAIT */
	uint32_t n_wait_keys;
} sclient;

typedef struct barrier {
	char *name;
	uint8_t *arrived;      /* [world] */
	int n_arrived;
	struct barrier *next;
} barrier;

typedef struct store_server {
	int lfd[2];
	int n_lfd;
	int wake[2];           /* pipe: a byte asks the thread to stop */
	_Atomic int64_t stop_linger_ms; /* < 0: linger_ms; else the stop's own */
	int64_t keepalive_ms;  /* sock_keepalive() of every accepted connection */
	char *abort_msg;       /* set before the stop: the job failed (fail_job) */
	int abandoned;         /* set before the stop: the job gave up on this store,
	                          so ranks that never came are no news */
	uint64_t token;        /* 0, or the job token every HELLO must carry */
	pthread_t thread;
	int started;
	int world;
	int port;
	int64_t linger_ms;
	uint8_t *rank_state;   /* [world] RANK_* */
	sclient **cl;
	size_t ncl, capcl;
	kv **tab;
	size_t nb, nkv;
	barrier *barriers;
	char *failed;          /* why the job cannot complete (a rank exited early) */
	char *refuse;          /* a stand-in for a store that is gone: every HELLO
	                          gets this error (accel_store_refusal_start) */
} store_server;

static uint64_t hash_key(const char *k)
{
	uint64_t h = 1469598103934665603ull;
	for (; *k; k++)
		h = (h ^ (uint8_t)*k) * 1099511628211ull;
	return h;
}

static kv *kv_find(store_server *s, const char *key)
{
	for (kv *e = s->tab[hash_key(key) % s->nb]; e; e = e->next)
		if (!strcmp(e->key, key))
			return e;
	return NULL;
}

/* Replace or insert; takes nothing, copies key and value. */
static int kv_put(store_server *s, const char *key, const void *val, uint32_t len)
{
	kv *e = kv_find(s, key);
	uint8_t *nv = malloc(len ? len : 1);
	if (!nv)
		return -1;
	if (len)
		memcpy(nv, val, len);
	if (e) {
		free(e->val);
		e->val = nv;
		e->len = len;
		return 0;
	}
	if (s->nkv + 1 > s->nb) {
		size_t nnb = s->nb * 2;
		kv **nt = calloc(nnb, sizeof(*nt));
		if (nt) {
			for (size_t i = 0; i < s->nb; i++)
				for (kv *x = s->tab[i], *nx; x; x = nx) {
					nx = x->next;
					size_t b = hash_key(x->key) % nnb;
					x->next = nt[b];
					nt[b] = x;
				}
			free(s->tab);
			s->tab = nt;
			s->nb = nnb;
		}
	}
	e = calloc(1, sizeof(*e));
	if (!e || !(e->key = strdup(key))) {
		free(e);
		free(nv);
		return -1;
	}
	e->val = nv;
	e->len = len;
	size_t b = hash_key(key) % s->nb;
	e->next = s->tab[b];
	s->tab[b] = e;
	s->nkv++;
	return 0;
}

static void client_flush(sclient *c)
{
	while (!c->dead && c->out_off < c->out.len) {
		ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
		                 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		c->dead = 1;
	}
	if (c->out_off == c->out.len) {
		c->out.len = 0;
		c->out_off = 0;
	}
}

static void reply_ok(sclient *c, const void *payload, size_t n)
{
	size_t at = sb_begin(&c->out);
	sb_u32(&c->out, (uint32_t)ACCEL_OK);
	sb_put(&c->out, payload, n);
	sb_end(&c->out, at);
	if (c->out.oom)
		c->dead = 1;
	client_flush(c);
}

static void reply_err(sclient *c, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static void reply_err(sclient *c, int code, const char *fmt, ...)
{
	char msg[ACCEL_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	size_t at = sb_begin(&c->out);
	sb_u32(&c->out, (uint32_t)code);
	sb_str(&c->out, msg, strlen(msg));
	sb_end(&c->out, at);
	if (c->out.oom)
		c->dead = 1;
	client_flush(c);
}

static void unpark(sclient *c)
{
	c->wait_op = 0;
	free(c->wait_key);
	c->wait_key = NULL;
	for (uint32_t i = 0; i < c->n_wait_keys; i++)
		free(c->wait_keys[i]);
	free(c->wait_keys);
	c->wait_keys = NULL;
	c->n_wait_keys = 0;
}

static void park(sclient *c, int op, int64_t timeout_ms)
{
	c->wait_op = op;
	c->timeout_ms = timeout_ms;
	c->deadline = deadline_after(now_ms(), timeout_ms);
}

static barrier *barrier_find(store_server *s, const char *name, int create)
{
	for (barrier *b = s->barriers; b; b = b->next)
		if (!strcmp(b->name, name))
			return b;
	if (!create)
		return NULL;
	barrier *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->name = strdup(name);
	b->arrived = calloc((size_t)s->world, 1);
	if (!b->name || !b->arrived) {
		free(b->name);
		free(b->arrived);
		free(b);
		return NULL;
	}
	b->next = s->barriers;
	s->barriers = b;
	return b;
}

static void barrier_drop(store_server *s, barrier *b)
{
	for (barrier **pp = &s->barriers; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	free(b->name);
	free(b->arrived);
	free(b);
}

/* The ranks missing at b, with notes on those that never came or left. */
static void barrier_missing(store_server *s, const barrier *b, char *out, size_t cap)
{
	uint8_t *miss = calloc((size_t)s->world, 1), *never = calloc((size_t)s->world, 1),
	        *gone = calloc((size_t)s->world, 1), *early = calloc((size_t)s->world, 1);
	if (!miss || !never || !gone || !early) {
		snprintf(out, cap, "(out of memory listing them)");
		goto done;
	}
	int any_never = 0, any_gone = 0, any_early = 0;
	for (int r = 0; r < s->world; r++) {
		if (b->arrived[r])
			continue;
		miss[r] = 1;
		if (s->rank_state[r] == RANK_NEVER)
			never[r] = any_never = 1;
		else if (s->rank_state[r] == RANK_EXITED)
			early[r] = any_early = 1;
		else if (s->rank_state[r] != RANK_CONNECTED && s->rank_state[r] != RANK_FAILED)
			gone[r] = any_gone = 1;
	}
	char a[350], bb[350], cc[350], dd[350];
	fmt_ranks(miss, s->world, a, sizeof(a));
	fmt_ranks(never, s->world, bb, sizeof(bb));
	fmt_ranks(gone, s->world, cc, sizeof(cc));
	fmt_ranks(early, s->world, dd, sizeof(dd));
	snprintf(out, cap, "%s (of %d)%s%s%s%s%s%s%s", a, s->world,
	         any_never ? "; never connected to the store: " : "", any_never ? bb : "",
	         any_gone ? "; left the store: " : "", any_gone ? cc : "",
	         any_gone ? " (exited or crashed)" : "",
	         any_early ? "; exited before joining the job: " : "", any_early ? dd : "");
done:
	free(miss);
	free(never);
	free(gone);
	free(early);
}

/* Fail every waiter of b because rank `left` will never arrive. */
static void barrier_fail_left(store_server *s, barrier *b)
{
	char missing[1600];
	barrier_missing(s, b, missing, sizeof(missing));
	for (size_t i = 0; i < s->ncl; i++) {
		sclient *c = s->cl[i];
		if (c->wait_op == OP_BARRIER && !strcmp(c->wait_key, b->name)) {
			reply_err(c, ACCEL_ERR_PEER,
			          "store barrier '%s' (rank %d): a rank left the job before reaching "
			          "it; missing ranks: %s", b->name, c->rank, missing);
			unpark(c);
		}
	}
	barrier_drop(s, b);
}

/* A barrier that can no longer complete: some rank left without arriving. */
static int barrier_doomed(const store_server *s, const barrier *b)
{
	for (int r = 0; r < s->world; r++)
		if (!b->arrived[r] && (s->rank_state[r] == RANK_LEFT || s->rank_state[r] == RANK_CRASHED ||
		                       s->rank_state[r] == RANK_EXITED || s->rank_state[r] == RANK_FAILED))
			return 1;
	return 0;
}

static int key_exists(store_server *s, const char *k)
{
	return kv_find(s, k) != NULL;
}

/* Answer parked GET/WAIT requests that a new key may satisfy. */
static void wake_key_waiters(store_server *s)
{
	for (size_t i = 0; i < s->ncl; i++) {
		sclient *c = s->cl[i];
		if (c->wait_op == OP_GET) {
			kv *e = kv_find(s, c->wait_key);
			if (e) {
				reply_ok(c, e->val, e->len);
				unpark(c);
			}
		} else if (c->wait_op == OP_WAIT) {
			uint32_t k = 0;
			while (k < c->n_wait_keys && key_exists(s, c->wait_keys[k]))
				k++;
			if (k == c->n_wait_keys) {
				reply_ok(c, NULL, 0);
				unpark(c);
			}
		}
	}
}

static void expire(store_server *s, sclient *c)
{
	char t[32];
	fmt_secs(c->timeout_ms, t, sizeof(t));
	if (c->wait_op == OP_GET) {
		reply_err(c, ACCEL_ERR_TIMEOUT,
		          "store get '%s' (rank %d): timed out after %s; no rank set the key",
		          c->wait_key, c->rank, t);
	} else if (c->wait_op == OP_WAIT) {
		char miss[1024];
		size_t len = 0;
		int n = 0;
		miss[0] = '\0';
		for (uint32_t k = 0; k < c->n_wait_keys; k++) {
			if (key_exists(s, c->wait_keys[k]))
				continue;
			if (n++ < 8 && len < sizeof(miss)) {
				int w = snprintf(miss + len, sizeof(miss) - len, "%s'%s'", len ? ", " : "",
				                 c->wait_keys[k]);
				if (w > 0)
					len += (size_t)w;
			}
		}
		if (len >= sizeof(miss))
			len = sizeof(miss) - 1;
		if (n > 8)
			snprintf(miss + len, sizeof(miss) - len, " and %d more", n - 8);
		reply_err(c, ACCEL_ERR_TIMEOUT,
		          "store wait (rank %d): timed out after %s; keys never set: %s", c->rank, t,
		          miss);
	} else if (c->wait_op == OP_BARRIER) {
		barrier *b = barrier_find(s, c->wait_key, 0);
		char missing[1600] = "?";
		if (b)
			barrier_missing(s, b, missing, sizeof(missing));
		reply_err(c, ACCEL_ERR_TIMEOUT,
		          "store barrier '%s' (rank %d): timed out after %s; missing ranks: %s",
		          c->wait_key, c->rank, t, missing);
	}
	unpark(c);
}

static void do_hello(store_server *s, sclient *c, cursor *cu)
{
	uint32_t magic = cu_u32(cu), ver = cu_u32(cu);
	int32_t rank = (int32_t)cu_u32(cu), world = (int32_t)cu_u32(cu);
	uint32_t flags = cu_u32(cu);
	uint64_t token = (flags & HELLO_TOKEN) ? (uint64_t)cu_i64(cu) : 0;
	if (cu->bad || magic != STORE_MAGIC) {
		c->dead = 1; /* not one of ours: drop it silently */
		return;
	}
	if (s->refuse) {
		reply_err(c, ACCEL_ERR_PEER, "%s", s->refuse);
		return;
	}
	if (token != s->token) {
		/* before anything is recorded (an observer may report rank
		 * exits): a process of another job that reached this port must
		 * not take a rank's place or end one */
		reply_err(c, ACCEL_ERR_CONFIG, "the rendezvous store at this port belongs to another "
		          "job (its job token differs)");
		return;
	}
	if (ver == STORE_VERSION && world == s->world && (flags & HELLO_OBSERVER)) {
		c->observer = 1;
		reply_ok(c, NULL, 0);
		return;
	}
	if (ver != STORE_VERSION) {
		reply_err(c, ACCEL_ERR_ABI, "the rendezvous store speaks protocol %u, this rank %u "
		          "(mixed accel versions in one job?)", STORE_VERSION, ver);
		return;
	}
	if (world != s->world) {
		reply_err(c, ACCEL_ERR_CONFIG, "rank %d was started with world size %d but the "
		          "rendezvous store (rank 0) has world size %d: do all nodes use the same "
		          "-n/--nnodes, and is this port used by another job?", rank, world, s->world);
		return;
	}
	if (rank < 0 || rank >= s->world) {
		reply_err(c, ACCEL_ERR_CONFIG, "rank %d is outside the world of %d", rank, s->world);
		return;
	}
	if (flags & HELLO_SECONDARY) {
		/* another thread of a rank that is already here */
		if (s->rank_state[rank] != RANK_CONNECTED) {
			reply_err(c, ACCEL_ERR_STATE, "rank %d opened an extra connection to the "
			          "rendezvous store without being connected", rank);
			return;
		}
		c->rank = rank;
		reply_ok(c, NULL, 0);
		return;
	}
	if (s->rank_state[rank] != RANK_NEVER) {
		reply_err(c, ACCEL_ERR_STATE, "rank %d is already %s the rendezvous store: are two "
		          "processes using the same rank, or is another job on this port?", rank,
		          s->rank_state[rank] == RANK_CONNECTED ? "connected to" : "done with");
		return;
	}
	c->rank = rank;
	c->primary = 1;
	s->rank_state[rank] = RANK_CONNECTED;
	reply_ok(c, NULL, 0);
}

/* A GET or WAIT whose keys are missing after the job broke: they would
 * wait for a rank that is gone. */
static void fail_broken(store_server *s, sclient *c, const char *what, const char *key)
{
	reply_err(c, ACCEL_ERR_PEER, "store %s%s%s%s (rank %d) cannot complete: %s", what,
	          key ? " '" : "", key ? key : "", key ? "'" : "", c->rank, s->failed);
}

/* The job can no longer complete (msg says why): record it under
 * STORE_FAILED_KEY, fail the parked gets and waits and the barriers that
 * cannot complete, and refuse later waits for keys that are not set,
 * instead of letting them run into their timeouts.  The first reason
 * stays. */
static void fail_job(store_server *s, const char *msg)
{
	if (!s->failed) {
		s->failed = strdup(msg);
		if (!s->failed || kv_put(s, STORE_FAILED_KEY, msg, (uint32_t)strlen(msg)) < 0)
			return;
	}
	wake_key_waiters(s);   /* whatever is already satisfied */
	for (size_t i = 0; i < s->ncl; i++) {
		sclient *o = s->cl[i];
		if (o->wait_op == OP_GET || o->wait_op == OP_WAIT) {
			fail_broken(s, o, o->wait_op == OP_GET ? "get" : "wait", o->wait_key);
			unpark(o);
		}
	}
	for (barrier *b = s->barriers, *nx; b; b = nx) {
		nx = b->next;
		if (barrier_doomed(s, b))
			barrier_fail_left(s, b);
	}
}

/* A rank reports that it failed (its context could not be created) and is
 * leaving: the others must not wait for it until their timeouts. */
static void do_failed(store_server *s, sclient *c, cursor *cu)
{
	uint32_t wl;
	const uint8_t *why = cu_str(cu, &wl);
	if (cu->bad || wl > 400 || memchr(why, 0, wl)) {
		c->dead = 1;
		return;
	}
	reply_ok(c, NULL, 0);
	if (s->rank_state[c->rank] == RANK_CONNECTED)
		s->rank_state[c->rank] = RANK_FAILED;
	char msg[600];
	snprintf(msg, sizeof(msg), "rank %d failed: %.*s", c->rank, (int)wl, (const char *)why);
	fail_job(s, msg);
}

/* An observer (the launcher of some node) reports that rank r's process
 * ended.  A rank that had connected is already accounted for by its
 * connection; one that never did will never come, so nothing that waits
 * for the whole job can complete (fail_job). */
static void do_exited(store_server *s, sclient *c, cursor *cu)
{
	int32_t r = (int32_t)cu_u32(cu);
	uint32_t hl;
	const uint8_t *how = cu_str(cu, &hl);
	if (cu->bad || hl > 200 || memchr(how, 0, hl)) {
		c->dead = 1;
		return;
	}
	if (r < 0 || r >= s->world) {
		reply_err(c, ACCEL_ERR_INVALID_ARG, "rank %d is outside the world of %d", r, s->world);
		return;
	}
	reply_ok(c, NULL, 0);
	if (s->rank_state[r] != RANK_NEVER)
		return;
	s->rank_state[r] = RANK_EXITED;
	char msg[400];
	snprintf(msg, sizeof(msg), "rank %d %.*s before it joined the job (it never connected "
	         "to the rendezvous store)", r, (int)hl, (const char *)how);
	fail_job(s, msg);
}

static void do_barrier(store_server *s, sclient *c, const char *name, int64_t timeout_ms)
{
	barrier *b = barrier_find(s, name, 1);
	if (!b) {
		reply_err(c, ACCEL_ERR_NOMEM, "store barrier '%s': out of memory", name);
		return;
	}
	if (b->arrived[c->rank]) {
		reply_err(c, ACCEL_ERR_STATE, "store barrier '%s' (rank %d): this rank already "
		          "arrived; barrier names are single-use (add a counter)", name, c->rank);
		return;
	}
	b->arrived[c->rank] = 1;
	b->n_arrived++;
	c->wait_key = strdup(name);
	if (!c->wait_key) {
		reply_err(c, ACCEL_ERR_NOMEM, "store barrier '%s': out of memory", name);
		return;
	}
	park(c, OP_BARRIER, timeout_ms);
	if (b->n_arrived == s->world) {
		for (size_t i = 0; i < s->ncl; i++) {
			sclient *o = s->cl[i];
			if (o->wait_op == OP_BARRIER && !strcmp(o->wait_key, name)) {
				reply_ok(o, NULL, 0);
				unpark(o);
			}
		}
		barrier_drop(s, b);
	} else if (barrier_doomed(s, b)) {
		barrier_fail_left(s, b);
	} else if (timeout_ms == 0) {
		expire(s, c);
	}
}

/* Handle one request frame. */
static void handle(store_server *s, sclient *c, const uint8_t *body, size_t n)
{
	cursor cu = {body, n, 0};
	uint8_t op = cu_u8(&cu);
	if (op == OP_HELLO) {
		if (c->rank >= 0 || c->observer)
			c->dead = 1;
		else
			do_hello(s, c, &cu);
		return;
	}
	if (c->observer) {
		if (op == OP_EXITED)
			do_exited(s, c, &cu);
		else
			c->dead = 1;   /* BYE, or something an observer may not send */
		return;
	}
	if (c->rank < 0) {
		c->dead = 1; /* must introduce itself first */
		return;
	}
	switch (op) {
	case OP_BYE:
		c->said_bye = 1;
		c->dead = 1;
		return;
	case OP_FAILED:
		do_failed(s, c, &cu);
		return;
	case OP_SET: {
		char *key = cu_key(&cu);
		uint32_t len;
		const uint8_t *val = cu_str(&cu, &len);
		if (cu.bad || len > STORE_MAX_VALUE) {
			free(key);
			c->dead = 1;
			return;
		}
		if (kv_put(s, key, val, len) < 0)
			reply_err(c, ACCEL_ERR_NOMEM, "store set '%s': the store ran out of memory", key);
		else
			reply_ok(c, NULL, 0);
		free(key);
		wake_key_waiters(s);
		return;
	}
	case OP_GET: {
		int64_t tmo = cu_i64(&cu);
		char *key = cu_key(&cu);
		if (cu.bad) {
			free(key);
			c->dead = 1;
			return;
		}
		kv *e = kv_find(s, key);
		if (e) {
			reply_ok(c, e->val, e->len);
			free(key);
		} else if (s->failed) {
			fail_broken(s, c, "get", key);
			free(key);
		} else if (tmo <= 0) {
			reply_err(c, ACCEL_ERR_NOT_FOUND, "store get '%s' (rank %d): the key is not set",
			          key, c->rank);
			free(key);
		} else {
			c->wait_key = key;
			park(c, OP_GET, tmo);
		}
		return;
	}
	case OP_ADD: {
		int64_t delta = cu_i64(&cu);
		char *key = cu_key(&cu);
		if (cu.bad) {
			free(key);
			c->dead = 1;
			return;
		}
		kv *e = kv_find(s, key);
		long long cur = 0;
		if (e) {
			char tmp[32];
			char *end;
			if (e->len == 0 || e->len >= sizeof(tmp))
				goto notint;
			memcpy(tmp, e->val, e->len);
			tmp[e->len] = '\0';
			errno = 0;
			cur = strtoll(tmp, &end, 10);
			if (errno || *end)
				goto notint;
		}
		long long nv;
		if (__builtin_add_overflow(cur, (long long)delta, &nv)) {
			reply_err(c, ACCEL_ERR_INVALID_ARG, "store add '%s' (rank %d): %lld + %lld "
			          "overflows a 64-bit integer", key, c->rank, cur, (long long)delta);
			free(key);
			return;
		}
		char txt[32];
		int tl = snprintf(txt, sizeof(txt), "%lld", nv);
		if (kv_put(s, key, txt, (uint32_t)tl) < 0) {
			reply_err(c, ACCEL_ERR_NOMEM, "store add '%s': the store ran out of memory", key);
		} else {
			sbuf p = {0};
			sb_i64(&p, nv);
			reply_ok(c, p.p, p.len);
			sb_free(&p);
		}
		free(key);
		wake_key_waiters(s);
		return;
notint:
		reply_err(c, ACCEL_ERR_INVALID_ARG, "store add '%s' (rank %d): the key holds a value "
		          "that is not a decimal integer", key, c->rank);
		free(key);
		return;
	}
	case OP_WAIT: {
		int64_t tmo = cu_i64(&cu);
		uint32_t nk = cu_u32(&cu);
		if (cu.bad || nk > STORE_MAX_WAIT_KEYS) {
			c->dead = 1;
			return;
		}
		char **keys = calloc(nk ? nk : 1, sizeof(*keys));
		if (!keys) {
			reply_err(c, ACCEL_ERR_NOMEM, "store wait: out of memory");
			return;
		}
		uint32_t got = 0;
		while (got < nk && !cu.bad)
			keys[got++] = cu_key(&cu);
		c->wait_keys = keys;
		c->n_wait_keys = got;
		if (cu.bad) {
			unpark(c);
			c->dead = 1;
			return;
		}
		park(c, OP_WAIT, tmo < 0 ? 0 : tmo);
		uint32_t k = 0;
		while (k < nk && key_exists(s, keys[k]))
			k++;
		if (k == nk) {
			reply_ok(c, NULL, 0);
			unpark(c);
		} else if (s->failed) {
			fail_broken(s, c, "wait", NULL);
			unpark(c);
		} else if (tmo <= 0) {
			expire(s, c);
		}
		return;
	}
	case OP_BARRIER: {
		int64_t tmo = cu_i64(&cu);
		char *name = cu_key(&cu);
		if (cu.bad) {
			free(name);
			c->dead = 1;
			return;
		}
		do_barrier(s, c, name, tmo < 0 ? 0 : tmo);
		free(name);
		return;
	}
	default:
		c->dead = 1;
		return;
	}
}

static void client_read(store_server *s, sclient *c)
{
	for (;;) {
		if (sb_reserve(&c->in, 65536) < 0) {
			c->dead = 1;
			return;
		}
		ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
		if (n > 0) {
			c->in.len += (size_t)n;
			if ((size_t)n < 65536)
				break;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		c->dead = 1; /* EOF or error */
		break;
	}
	/* One request at a time: the next frame of a parked client, or of one
	 * whose last reply is still unsent, waits (a correct client never
	 * sends one before it has the reply).  A client that sends on anyway
	 * is dropped once it has sent more than the largest frame. */
	if ((c->wait_op || c->out.len) && c->in.len > STORE_MAX_FRAME + 4) {
		c->dead = 1;
		return;
	}
	size_t off = 0;
	while (!c->wait_op && !c->out.len && c->in.len - off >= 4) {
		uint32_t blen = rd_u32raw(c->in.p + off);
		if (blen > STORE_MAX_FRAME || blen == 0) {
			c->dead = 1;
			break;
		}
		if (c->in.len - off - 4 < blen)
			break;
		handle(s, c, c->in.p + off + 4, blen);
		off += 4 + (size_t)blen;
		if (c->dead)
			break;
	}
	if (off) {
		memmove(c->in.p, c->in.p + off, c->in.len - off);
		c->in.len -= off;
	}
	if (c->in.cap > (1u << 20) && c->in.len < 65536) {
		uint8_t *np = realloc(c->in.p, 65536 * 2);
		if (np) {
			c->in.p = np;
			c->in.cap = 65536 * 2;
		}
	}
}

static void client_close(store_server *s, size_t i)
{
	sclient *c = s->cl[i];
	unpark(c);
	close(c->fd);
	sb_free(&c->in);
	sb_free(&c->out);
	int rank = c->primary ? c->rank : -1;
	int crashed = 0;
	if (rank >= 0) {
		crashed = !c->said_bye && s->rank_state[rank] == RANK_CONNECTED;
		s->rank_state[rank] = c->said_bye ? RANK_LEFT : RANK_CRASHED;
		if (!c->said_bye)
			accel_log(ACCEL_LOG_DEBUG, "rendezvous store: rank %d disconnected without "
			          "saying goodbye", rank);
	}
	free(c);
	s->cl[i] = s->cl[--s->ncl];
	if (rank < 0)
		return;
	/* Barriers this rank can no longer reach fail now, not at their timeout. */
	for (barrier *b = s->barriers, *nb; b; b = nb) {
		nb = b->next;
		if (!b->arrived[rank])
			barrier_fail_left(s, b);
	}
	/* A rank that is gone without leaving (no BYE: it crashed, was killed,
	 * or exited without freeing its context) will set no key and reach no
	 * collective again: the job cannot complete.  Gets and waits fail now,
	 * and backends that wait outside the store (the shm attach) see it in
	 * STORE_FAILED_KEY, with or without a launcher to tell them. */
	if (crashed) {
		char msg[300];
		snprintf(msg, sizeof(msg), "rank %d lost its connection to the rendezvous store "
		         "without leaving the job (it crashed, was killed, or exited without "
		         "accel_ctx_free)", rank);
		fail_job(s, msg);
	}
}

/* A connection to another node counts as dead after ms without an answer
 * from that node's kernel (0: never; comm.keepalive_s): TCP keepalive
 * probes from half of it on while it is idle, and TCP_USER_TIMEOUT while
 * data waits for its ACK.  A live process's kernel answers both even when
 * the process is busy or stopped.  (TCP_USER_TIMEOUT would also end the
 * connection of a live peer whose receive buffer stays full that long; the
 * store's messages are far smaller than a socket buffer, and the tcp
 * backend, which moves large data, watches TCP_INFO instead.) */
static void sock_keepalive(int fd, int64_t ms)
{
	if (ms <= 0)
		return;
	/* Linux takes at most 32767 s for either interval */
	int on = 1, cnt = 3;
	int64_t k = ms < 2000 ? 2 : ms / 1000;
	int idle = (int)(k / 2 < 32767 ? k / 2 : 32767);
	int intvl = (int)((k - idle) / cnt);
	if (intvl < 1)
		intvl = 1;
	if (intvl > 32767)
		intvl = 32767;
	unsigned int user_ms = ms > UINT_MAX ? UINT_MAX : (unsigned int)ms;
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) != 0) {
		char et[128];
		accel_log(ACCEL_LOG_WARN, "rendezvous store: cannot set TCP keepalive (%s): a node "
		          "that vanishes is found by comm.timeout_s only", errtext(errno, et, sizeof(et)));
	}
}

static void server_accept(store_server *s, int lfd)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* The pending connection keeps the listener readable: pause
				 * instead of spinning until descriptors free up. */
				char et[128];
				accel_log(ACCEL_LOG_WARN, "rendezvous store: cannot accept a connection: %s",
				          errtext(errno, et, sizeof(et)));
				struct timespec ts = {0, 50000000};
				nanosleep(&ts, NULL);
			}
			return; /* EAGAIN: the next turn retries */
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		sock_keepalive(fd, s->keepalive_ms);
		if (s->ncl == s->capcl) {
			size_t nc = s->capcl ? s->capcl * 2 : 16;
			sclient **np = realloc(s->cl, nc * sizeof(*np));
			if (!np) {
				close(fd);
				return;
			}
			s->cl = np;
			s->capcl = nc;
		}
		sclient *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			return;
		}
		c->fd = fd;
		c->rank = -1;
		s->cl[s->ncl++] = c;
	}
}

static int all_done(const store_server *s)
{
	for (int r = 1; r < s->world; r++)
		if ((s->rank_state[r] == RANK_NEVER && !s->abandoned) ||
		    s->rank_state[r] == RANK_CONNECTED)
			return 0;
	return 1;
}

static void *server_main(void *arg)
{
	store_server *s = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	struct pollfd *pf = NULL;
	size_t cappf = 0;
	int stopping = 0;
	int64_t stop_deadline = 0;
	for (;;) {
		if (stopping && (all_done(s) || now_ms() >= stop_deadline))
			break;
		size_t need = 1 + (size_t)s->n_lfd + s->ncl;
		if (need > cappf) {
			struct pollfd *np = realloc(pf, need * sizeof(*np));
			if (!np) {
				struct timespec ts = {0, 10000000};
				nanosleep(&ts, NULL);
				continue;
			}
			pf = np;
			cappf = need;
		}
		size_t n = 0;
		pf[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
		for (int i = 0; i < s->n_lfd; i++)
			pf[n++] = (struct pollfd){.fd = s->lfd[i], .events = POLLIN};
		int64_t now = now_ms(), next = stopping ? stop_deadline : INT64_MAX;
		for (size_t i = 0; i < s->ncl; i++) {
			sclient *c = s->cl[i];
			short ev = POLLIN;
			if (c->out_off < c->out.len)
				ev |= POLLOUT;
			pf[n++] = (struct pollfd){.fd = c->fd, .events = ev};
			if (c->wait_op && c->deadline < next)
				next = c->deadline;
		}
		int tmo = -1;
		if (next != INT64_MAX)
			tmo = next <= now ? 0 : (int)(next - now > 60000 ? 60000 : next - now);
		int pr = poll(pf, n, tmo);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr > 0 && (pf[0].revents & POLLIN)) {
			char buf[16];
			ssize_t r = read(s->wake[0], buf, sizeof(buf));
			(void)r;
			if (!stopping) {
				stopping = 1;
				if (s->abort_msg)
					fail_job(s, s->abort_msg);
				int64_t lm = atomic_load(&s->stop_linger_ms);
				stop_deadline = deadline_after(now_ms(), lm >= 0 ? lm : s->linger_ms);
			}
		}
		if (pr > 0)
			for (int i = 0; i < s->n_lfd; i++)
				if (pf[1 + i].revents & POLLIN)
					server_accept(s, s->lfd[i]);
		/* Clients accepted this turn are past the end of pf; they are
		 * polled next turn. */
		size_t polled = n - 1 - (size_t)s->n_lfd;
		for (size_t i = 0; pr > 0 && i < polled && i < s->ncl; i++) {
			sclient *c = s->cl[i];
			short re = pf[1 + s->n_lfd + i].revents;
			if (re & (POLLIN | POLLHUP | POLLERR))
				client_read(s, c);
			if (re & POLLOUT)
				client_flush(c);
		}
		now = now_ms();
		for (size_t i = 0; i < s->ncl; i++) {
			sclient *c = s->cl[i];
			if (c->wait_op && !c->dead && c->deadline <= now)
				expire(s, c);
			/* A client whose parked request was just answered (or whose
			 * reply went out) may have its next request buffered already. */
			if (!c->wait_op && !c->out.len && !c->dead && c->in.len >= 4)
				client_read(s, c);
		}
		for (size_t i = s->ncl; i-- > 0;)
			if (s->cl[i]->dead)
				client_close(s, i);
	}
	if (stopping && !all_done(s) && !s->refuse && !s->failed && !s->abandoned) {
		uint8_t *still = calloc((size_t)s->world, 1);
		if (still) {
			for (int r = 1; r < s->world; r++)
				still[r] = s->rank_state[r] == RANK_CONNECTED || s->rank_state[r] == RANK_NEVER;
			char list[512];
			fmt_ranks(still, s->world, list, sizeof(list));
			accel_log(ACCEL_LOG_WARN, "rendezvous store: rank 0 stops the store while ranks "
			          "%s have not finished with it", list);
			free(still);
		}
	}
	free(pf);
	return NULL;
}

static store_server *server_free(store_server *s)
{
	if (!s)
		return NULL;
	for (size_t i = s->ncl; i-- > 0;) {
		s->cl[i]->said_bye = 1;
		client_close(s, i);
	}
	free(s->cl);
	for (int i = 0; i < s->n_lfd; i++)
		close(s->lfd[i]);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	for (size_t b = 0; s->tab && b < s->nb; b++)
		for (kv *e = s->tab[b], *ne; e; e = ne) {
			ne = e->next;
			free(e->key);
			free(e->val);
			free(e);
		}
	free(s->tab);
	while (s->barriers)
		barrier_drop(s, s->barriers);
	free(s->rank_state);
	free(s->failed);
	free(s->abort_msg);
	free(s->refuse);
	free(s);
	return NULL;
}

/* Loopback addresses get a loopback-only listener; anything else listens on
 * every interface, because a host name may resolve to a different local
 * address than the one other nodes use to reach us. */
static int addr_is_loopback(const char *addr)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(addr, NULL, &hints, &res) != 0)
		return 0;
	int loop = 1;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			const struct sockaddr_in *sa = (const void *)ai->ai_addr;
			if ((ntohl(sa->sin_addr.s_addr) >> 24) != 127)
				loop = 0;
		} else if (ai->ai_family == AF_INET6) {
			const struct sockaddr_in6 *sa = (const void *)ai->ai_addr;
			if (!IN6_IS_ADDR_LOOPBACK(&sa->sin6_addr))
				loop = 0;
		} else {
			loop = 0;
		}
	}
	freeaddrinfo(res);
	return loop;
}

static int listen_on(const struct addrinfo *ai, int *ret_fd, int *ret_errno)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
	                ai->ai_protocol);
	if (fd < 0) {
		*ret_errno = errno;
		return -1;
	}
	int one = 1, zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
		*ret_errno = errno;
		close(fd);
		return -1;
	}
	*ret_fd = fd;
	return 0;
}

/* The port a listening socket is bound to (for port 0: the one the kernel
 * chose), or -1. */
static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

static void ai_set_port(struct addrinfo *ai, int port)
{
	if (ai->ai_family == AF_INET)
		((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)port);
	else if (ai->ai_family == AF_INET6)
		((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)port);
}

/* Record a new listener; with port 0 the first one fixes the port the
 * kernel chose, and the others (IPv4 next to IPv6) bind the same one. */
static int add_listener(store_server *s, int fd)
{
	if (s->port == 0) {
		int p = bound_port(fd);
		if (p <= 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		s->port = p;
	}
	s->lfd[s->n_lfd++] = fd;
	return 0;
}

static int server_start(const char *addr, int port, int world, int64_t linger_ms,
                        int64_t keepalive_ms, const char *refuse, uint64_t token,
                        store_server **ret, accel_err *err)
{
	store_server *s = calloc(1, sizeof(*s));
	int rc;
	char et[128];
	if (!s)
		return accel_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	s->wake[0] = s->wake[1] = -1;
	s->world = world;
	s->port = port;
	s->linger_ms = linger_ms;
	s->keepalive_ms = keepalive_ms;
	s->token = token;
	atomic_store(&s->stop_linger_ms, -1);
	s->nb = 64;
	s->tab = calloc(s->nb, sizeof(*s->tab));
	s->rank_state = calloc((size_t)world, 1);
	s->refuse = refuse ? strdup(refuse) : NULL;
	if (!s->tab || !s->rank_state || (refuse && !s->refuse)) {
		rc = accel_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
		goto fail;
	}
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = accel_err_set(err, ACCEL_ERR_SYSTEM, "rendezvous store: pipe: %s",
		                   errtext(errno, et, sizeof(et)));
		goto fail;
	}
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	int loop = addr && addr_is_loopback(addr);   /* NULL: every interface */
	if (!addr)
		addr = "*";
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	int gai;
	if (loop) {
		gai = getaddrinfo(addr, ps, &hints, &res);
	} else {
		/* Wildcard: prefer one dual-stack IPv6 socket, else IPv4. */
		hints.ai_family = AF_INET6;
		gai = getaddrinfo(NULL, ps, &hints, &res);
		if (gai == 0) {
			int e = 0, fd;
			if (listen_on(res, &fd, &e) == 0) {
				if (add_listener(s, fd) < 0)
					e = errno;
			} else if (e == EADDRINUSE) {
				freeaddrinfo(res);
				rc = port ? accel_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous "
				                          "store on port %d (rank 0): address already in use; "
				                          "another job or a leftover process holds it: pick "
				                          "another master port", port)
				          : accel_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous "
				                          "store on a free port (rank 0): the system has none "
				                          "left");
				goto fail;
			}
			freeaddrinfo(res);
			res = NULL;
		}
		if (!s->n_lfd) {
			hints.ai_family = AF_INET;
			gai = getaddrinfo(NULL, ps, &hints, &res);
		}
	}
	if (!s->n_lfd && gai != 0) {
		rc = accel_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous store at "
		                   "%s:%d (rank 0): %s", addr, port, gai_strerror(gai));
		goto fail;
	}
	int last_errno = 0, want = 0;
	for (struct addrinfo *ai = res; ai && want < 2; ai = ai->ai_next)
		want++;
	for (int attempt = 0;; attempt++) {
		for (struct addrinfo *ai = res; ai && s->n_lfd < 2; ai = ai->ai_next) {
			int fd;
			if (s->port)
				ai_set_port(ai, s->port);
			if (listen_on(ai, &fd, &last_errno) == 0 && add_listener(s, fd) < 0)
				last_errno = errno;
		}
		/* Port 0: the port the kernel gave the first family may be taken
		 * in the other (IPv4 next to IPv6); start over with a new one
		 * rather than serve one family only. */
		if (port == 0 && s->n_lfd > 0 && s->n_lfd < want && last_errno == EADDRINUSE &&
		    attempt < 8) {
			while (s->n_lfd > 0)
				close(s->lfd[--s->n_lfd]);
			s->port = 0;
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
				ai_set_port(ai, 0);
			continue;
		}
		break;
	}
	if (res)
		freeaddrinfo(res);
	if (!s->n_lfd) {
		rc = accel_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous store at %s:%d "
		                   "(rank 0): %s%s", addr, port, errtext(last_errno, et, sizeof(et)),
		                   last_errno == EADDRINUSE && port == 0 ? "; the system has no free "
		                   "port left" :
		                   last_errno == EADDRINUSE ? "; another job or a leftover process "
		                   "holds the port: pick another master port" :
		                   last_errno == EADDRNOTAVAIL ? "; the master address is not an "
		                   "address of this host (is this node the master?)" : "");
		goto fail;
	}
	int e = pthread_create(&s->thread, NULL, server_main, s);
	if (e) {
		rc = accel_err_set(err, ACCEL_ERR_SYSTEM, "rendezvous store: cannot start its thread: %s",
		                   errtext(e, et, sizeof(et)));
		goto fail;
	}
	s->started = 1;
	*ret = s;
	return ACCEL_OK;
fail:
	server_free(s);
	return rc;
}

/* Stop the server thread: after the other ranks have disconnected, or at
 * the latest after linger_ms (< 0: the store's timeout).  abort_msg: the job
 * failed; the ranks still waiting are told so first (fail_job). */
static void server_stop(store_server *s, int64_t linger_ms, const char *abort_msg)
{
	if (!s || !s->started)
		return;
	if (abort_msg)
		s->abort_msg = strdup(abort_msg);  /* read by the thread after the wake */
	atomic_store(&s->stop_linger_ms, linger_ms);
	ssize_t w;
	do
		w = write(s->wake[1], "x", 1);
	while (w < 0 && errno == EINTR);
	pthread_join(s->thread, NULL);
	s->started = 0;
}

/* ---- client ------------------------------------------------------------------ */

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
	int64_t keepalive_ms;  /* sock_keepalive() of its connections */
	char addr[256];
	int port;
	char where[300];       /* "host:port" or "[v6]:port", for messages */
	int broken;            /* after an I/O failure: later calls fail at once */
	char broken_msg[512];
	int failed_self;       /* accel_store_fail was called: rank 0 stops at once */
	int abandoned;         /* accel_store_abandon: and without a warning */
	uint64_t token;        /* 0, or the job token sent in HELLO */
	int refused_is_final;  /* accel_store_join: the server listened before the
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
	return accel_err_set(err, code, "%s", msg);
}

/* Wait until fd is ready for `events` or the deadline passes (ETIMEDOUT). */
static int wait_io(int fd, short events, int64_t deadline, int *ret_errno)
{
	int64_t left = deadline - now_ms();
	if (left <= 0) {
		*ret_errno = ETIMEDOUT;
		return -1;
	}
	struct pollfd pf = {.fd = fd, .events = events};
	if (poll(&pf, 1, left > 60000 ? 60000 : (int)left) < 0 && errno != EINTR) {
		*ret_errno = errno;
		return -1;
	}
	return 0;
}

/* Write all of buf before the deadline (non-blocking socket). */
static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline, int *ret_errno)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			*ret_errno = errno;
			return -1;
		}
		if (wait_io(fd, POLLOUT, deadline, ret_errno))
			return -1;
	}
	return 0;
}

/* Read exactly n bytes before the deadline.  EOF reads as ECONNRESET. */
static int recv_all(int fd, uint8_t *p, size_t n, int64_t deadline, int *ret_errno)
{
	while (n) {
		ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0) {
			*ret_errno = ECONNRESET;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			*ret_errno = errno;
			return -1;
		}
		if (wait_io(fd, POLLIN, deadline, ret_errno))
			return -1;
	}
	return 0;
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
		return accel_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	int64_t start = now_ms();
	int64_t deadline = deadline_after(deadline_after(start, wait_ms), slack_ms);
	if (send_all(c->fd, req->p, req->len, deadline, &e) < 0)
		return set_broken(st, c, err, ACCEL_ERR_COMM, "lost the connection to the rendezvous "
		                  "store at %s (rank %d): %s; rank 0 hosts the store: did it exit?",
		                  st->where, st->rank, errtext(e, et, sizeof(et)));
	uint8_t hdr[4];
	if (recv_all(c->fd, hdr, 4, deadline, &e) < 0) {
		if (e == ETIMEDOUT) {
			fmt_secs(now_ms() - start, ts, sizeof(ts));
			return set_broken(st, c, err, ACCEL_ERR_TIMEOUT, "no reply from the rendezvous store "
			                  "at %s (rank %d) within %s: is rank 0 stopped or overloaded?",
			                  st->where, st->rank, ts);
		}
		return set_broken(st, c, err, ACCEL_ERR_COMM, "lost the connection to the rendezvous "
		                  "store at %s (rank %d): %s; rank 0 hosts the store: did it exit?",
		                  st->where, st->rank, errtext(e, et, sizeof(et)));
	}
	uint32_t blen = rd_u32raw(hdr);
	if (blen < 4 || blen > STORE_MAX_FRAME)
		return set_broken(st, c, err, ACCEL_ERR_COMM, "the rendezvous store at %s sent a malformed "
		                  "reply (rank %d); is something else listening on that port?",
		                  st->where, st->rank);
	sbuf body = {0};
	if (sb_reserve(&body, blen) < 0)
		return set_broken(st, c, err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	if (recv_all(c->fd, body.p, blen, deadline, &e) < 0) {
		sb_free(&body);
		return set_broken(st, c, err, ACCEL_ERR_COMM, "lost the connection to the rendezvous "
		                  "store at %s (rank %d): %s", st->where, st->rank,
		                  errtext(e, et, sizeof(et)));
	}
	body.len = blen;
	int32_t status = (int32_t)rd_u32raw(body.p);
	if (status != ACCEL_OK) {
		cursor cu = {body.p + 4, blen - 4, 0};
		uint32_t ml;
		const uint8_t *m = cu_str(&cu, &ml);
		if (status > 0 || status < ACCEL_ERR_INTERNAL)
			status = ACCEL_ERR_COMM;
		accel_err_set(err, status, "%.*s", m ? (int)ml : 0, m ? (const char *)m : "");
		sb_free(&body);
		return status;
	}
	memmove(body.p, body.p + 4, blen - 4);
	body.len = blen - 4;
	*ret_body = body;
	return ACCEL_OK;
}

static int try_connect(const struct addrinfo *ai, int64_t deadline, int *ret_fd, int *ret_errno)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
	                ai->ai_protocol);
	if (fd < 0) {
		*ret_errno = errno;
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS && errno != EINTR) {
			*ret_errno = errno;
			close(fd);
			return -1;
		}
		for (;;) {
			int64_t left = deadline - now_ms();
			if (left <= 0) {
				*ret_errno = ETIMEDOUT;
				close(fd);
				return -1;
			}
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			int pr = poll(&pf, 1, left > 60000 ? 60000 : (int)left);
			if (pr < 0 && errno == EINTR)
				continue;
			if (pr > 0)
				break;
		}
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr) {
			*ret_errno = soerr;
			close(fd);
			return -1;
		}
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*ret_fd = fd;
	return 0;
}

static int client_connect(const accel_store *st, int64_t timeout_ms, int *ret_fd,
                          accel_err *err)
{
	const char *addr = st->addr;
	int port = st->port;
	char ps[16], et[128], ts[32];
	snprintf(ps, sizeof(ps), "%d", port);
	int64_t start = now_ms(), deadline = deadline_after(start, timeout_ms);
	int64_t backoff = 10;
	int last = 0;
	const char *last_text = NULL;
	for (;;) {
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
		int gai = getaddrinfo(addr, ps, &hints, &res);
		if (gai == 0) {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				int fd, e = 0;
				if (try_connect(ai, deadline, &fd, &e) == 0) {
					freeaddrinfo(res);
					sock_keepalive(fd, st->keepalive_ms);
					*ret_fd = fd;
					return ACCEL_OK;
				}
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
			return accel_err_set(err, ACCEL_ERR_COMM, "cannot resolve the rendezvous store "
			                     "address '%s' (rank %d): %s", addr, st->rank,
			                     gai == EAI_SYSTEM ? errtext(errno, et, sizeof(et)) :
			                     gai_strerror(gai));
		}
		int64_t left = deadline - now_ms();
		if (st->refused_is_final && last == ECONNREFUSED && !last_text)
			return accel_err_set(err, ACCEL_ERR_COMM, "cannot reach the rendezvous store at "
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
	fmt_secs(timeout_ms, ts, sizeof(ts));
	return accel_err_set(err, ACCEL_ERR_COMM, "cannot reach the rendezvous store at %s "
	                     "(rank %d): %s after %s", st->where, st->rank,
	                     last_text ? last_text : errtext(last ? last : ETIMEDOUT, et, sizeof(et)),
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
	int64_t start = now_ms();
	sconn *c = calloc(1, sizeof(*c));
	if (!c)
		return accel_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
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
		int64_t left = deadline_after(start, timeout_ms) - now_ms();
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
		int rc = accel_err_set(err, ACCEL_ERR_COMM, "%s", st->broken_msg);
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

int accel_store_new(const char *addr, int port, int rank, int world_size, int64_t timeout_ms,
                    accel_store **ret_store, accel_err *err)
{
	return accel_store_new_keepalive(addr, port, rank, world_size, timeout_ms, 0, ret_store, err);
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

int accel_store_new_keepalive(const char *addr, int port, int rank, int world_size,
                              int64_t timeout_ms, int64_t keepalive_ms, accel_store **ret_store,
                              accel_err *err)
{
	open_args a = {addr, addr, port, rank, world_size, timeout_ms, keepalive_ms, 0, 0};
	return store_open(&a, ret_store, err);
}

int accel_store_new_host(int world_size, int64_t timeout_ms, int64_t keepalive_ms,
                         uint64_t token, accel_store **ret_store, accel_err *err)
{
	open_args a = {NULL, "127.0.0.1", 0, 0, world_size, timeout_ms, keepalive_ms, 0, token};
	return store_open(&a, ret_store, err);
}

int accel_store_join(const char *addr, int port, int rank, int world_size, int64_t within_ms,
                     int64_t timeout_ms, int64_t keepalive_ms, uint64_t token,
                     accel_store **ret_store, accel_err *err)
{
	if (within_ms <= 0)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: join time %" PRId64
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
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_store_new: no address given");
	if (port < (rank == 0 ? 0 : 1) || port > 65535)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: port %d is not in "
		                     "%d..65535", port, rank == 0 ? 0 : 1);
	if (world_size < 1 || rank < 0 || rank >= world_size)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: rank %d is not in "
		                     "0..%d", rank, world_size - 1);
	if (timeout_ms <= 0)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: timeout %" PRId64
		                     " ms must be > 0", timeout_ms);
	if (strlen(addr) > 255)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "rendezvous store: address is longer "
		                     "than 255 characters");
	int rc;
	accel_store *st = calloc(1, sizeof(*st));
	if (!st)
		return accel_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	pthread_mutex_init(&st->lock, NULL);
	st->rank = rank;
	st->world = world_size;
	st->timeout_ms = timeout_ms;
	st->keepalive_ms = keepalive_ms;
	st->token = a->token;
	st->refused_is_final = a->within_ms > 0;
	snprintf(st->addr, sizeof(st->addr), "%s", addr);
	if (rank == 0 &&
	    (rc = server_start(a->listen_addr, port, world_size, timeout_ms, keepalive_ms, NULL,
	                       a->token, &st->srv, err)) < 0)
		goto fail;
	st->port = st->srv ? st->srv->port : port;   /* port 0: the one the kernel chose */
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
		server_stop(st->srv, STORE_ABORT_LINGER_MS, why);
	}
	accel_store_free(st);
	return rc;
}

accel_store *accel_store_free(accel_store *st)
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
			int e;
			if (!req.oom)
				send_all(list->fd, req.p, req.len, now_ms() + 1000, &e);
			close(list->fd);
		}
		free(list);
		list = nx;
	}
	sb_free(&req);
	if (st->srv) {
		st->srv->abandoned = st->abandoned;   /* read by the thread after the wake */
		server_stop(st->srv, st->failed_self ? STORE_ABORT_LINGER_MS : -1, NULL);
		st->srv = server_free(st->srv);
	}
	pthread_mutex_destroy(&st->lock);
	free(st);
	return NULL;
}

int accel_store_port(const accel_store *st)
{
	return st ? st->port : 0;
}

accel_store *accel_store_abandon(accel_store *st)
{
	if (st)
		st->failed_self = st->abandoned = 1;
	return accel_store_free(st);
}

struct accel_store_refusal {
	store_server *srv;
};

int accel_store_refusal_start(const char *addr, int port, int world_size, const char *why,
                              accel_store_refusal **ret, accel_err *err)
{
	if (!addr || !*addr || port < 1 || port > 65535 || world_size < 1 || !why || !ret)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_store_refusal_start: bad argument");
	accel_store_refusal *r = calloc(1, sizeof(*r));
	if (!r)
		return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	int rc = server_start(addr, port, world_size, 0, 0, why, 0, &r->srv, err);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*ret = r;
	return ACCEL_OK;
}

accel_store_refusal *accel_store_refusal_stop(accel_store_refusal *r)
{
	if (r) {
		server_stop(r->srv, -1, NULL);
		server_free(r->srv);
		free(r);
	}
	return NULL;
}

int accel_store_fail(accel_store *st, const char *why)
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

int accel_store_report_exit(const char *addr, int port, int world_size, int rank, const char *how,
                            int64_t timeout_ms, accel_err *err)
{
	if (!addr || !*addr || port < 1 || port > 65535 || world_size < 1 || rank < 0 ||
	    rank >= world_size || timeout_ms <= 0 || !how || strlen(how) > 200 || strlen(addr) > 255)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_store_report_exit: bad argument");
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
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store %s: no store", what);
	if (!key)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store %s: NULL key", what);
	if (strlen(key) > STORE_MAX_KEY)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store %s: key longer than %u bytes",
		                     what, STORE_MAX_KEY);
	return ACCEL_OK;
}

int accel_store_set(accel_store *st, const char *key, const void *value, uint64_t len,
                    accel_err *err)
{
	int rc = check_key(st, "set", key, err);
	if (rc < 0)
		return rc;
	if (len > STORE_MAX_VALUE || (len && !value))
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store set '%s': value of %" PRIu64
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

int accel_store_get(accel_store *st, const char *key, void *buf, uint64_t cap,
                    uint64_t *ret_len, int64_t timeout_ms, accel_err *err)
{
	int rc = check_key(st, "get", key, err);
	if (rc < 0)
		return rc;
	if (cap && !buf)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store get '%s': NULL buffer", key);
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

int accel_store_add(accel_store *st, const char *key, int64_t delta, int64_t *ret_value,
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
			rc = accel_err_set(err, ACCEL_ERR_COMM, "store add '%s': malformed reply", key);
		else if (ret_value)
			*ret_value = v;
	}
	sb_free(&rep);
	return rc;
}

int accel_store_wait(accel_store *st, const char *const *keys, uint32_t n, int64_t timeout_ms,
                     accel_err *err)
{
	if (!st || (n && !keys))
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store wait: no store or no keys");
	if (n > STORE_MAX_WAIT_KEYS)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store wait: %u keys (the limit is %u)",
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
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "store wait: the key list is too long");
	}
	rc = rpc(st, &req, timeout_ms, &rep, err);
	sb_free(&req);
	sb_free(&rep);
	return rc;
}

int accel_store_barrier(accel_store *st, const char *name, int64_t timeout_ms, accel_err *err)
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
