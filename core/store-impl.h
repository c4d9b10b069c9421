/* SPDX-License-Identifier: MIT */
/* core/store-impl.h: what the parts of the rendezvous store share (private).
 *
 * store_wire.c    the wire format: byte buffers that build frames, cursors
 *                 that read them, and the text helpers of the messages
 * store_serve.c   what the server does with each connection: the key
 *                 table, parked requests, barriers, ranks that join, leave
 *                 or fail
 * store_server.c  the server thread: listening sockets, accepting, the
 *                 poll loop, start and stop
 * store_client.c  the client: accel_store_* (store.h)
 *
 * Wire format (docs/launch.md has the full table): every message is a u32
 * big-endian body length followed by the body.  Requests start with a u8
 * op; replies start with an i32 status (ACCEL_OK or an ACCEL_ERR_* code)
 * followed by the op's result or, on failure, a length-prefixed message. */
#ifndef ACCEL_CORE_STORE_IMPL_H
#define ACCEL_CORE_STORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/common/store-keys.h"
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


/* ---- store_wire.c: byte buffers, cursors, message text, socket settings ------- */

/* A growing byte buffer; after a failed allocation (oom) every write is
 * dropped, checked once at the end. */
typedef struct sbuf {
	uint8_t *p;
	size_t len, cap;
	int oom;
} sbuf;

void sb_free(sbuf *b);
/* Room for extra more bytes: 0, or -1 (oom set). */
int sb_reserve(sbuf *b, size_t extra);
void sb_put(sbuf *b, const void *data, size_t n);
void sb_u8(sbuf *b, uint8_t v);
void sb_u32(sbuf *b, uint32_t v);   /* big-endian */
void sb_i64(sbuf *b, int64_t sv);   /* big-endian */
void sb_str(sbuf *b, const void *s, size_t n);   /* u32 length, bytes */
/* Start a frame: reserve the length word, patched by sb_end. */
size_t sb_begin(sbuf *b);
void sb_end(sbuf *b, size_t at);

/* A big-endian u32 at p. */
uint32_t store_rd_u32(const uint8_t *p);

/* Reads a frame; any read past its end sets bad and returns 0 / NULL. */
typedef struct cursor {
	const uint8_t *p;
	size_t left;
	int bad;
} cursor;

uint8_t cu_u8(cursor *c);
uint32_t cu_u32(cursor *c);
int64_t cu_i64(cursor *c);
/* A length-prefixed byte string, borrowed from the frame. */
const uint8_t *cu_str(cursor *c, uint32_t *ret_len);
/* A key: no NUL inside, at most STORE_MAX_KEY bytes; returned owned. */
char *cu_key(cursor *c);

/* "2.5 s" */
void store_fmt_secs(int64_t ms, char *buf, size_t cap);
/* strerror with a lower-case first letter, to sit inside a sentence. */
const char *store_errtext(int e, char *buf, size_t cap);
/* "0-3, 5, 7-9" from a flag array, at most cap bytes. */
void store_fmt_ranks(const uint8_t *set, int n, char *out, size_t cap);

/* What both ends set on a connection: no Nagle delay (small request/reply
 * messages) and, keepalive_ms > 0 (comm.keepalive_s), TCP keepalive with
 * TCP_USER_TIMEOUT (sock_keepalive: the store's messages are far smaller
 * than a socket buffer; the tcp backend, which moves large data, watches
 * TCP_INFO instead).  A failure is logged: a node that vanishes is then
 * found by the timeouts only. */
void store_sock_tune(int fd, int64_t keepalive_ms);

/* ---- the server's state (store_serve.c, store_server.c) ------------------------ */

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
	                          gets this error (accelp_store_refusal_start) */
} store_server;

/* store_serve.c: the requests of connection c. */
/* Read what c sent and serve the complete frames, one at a time. */
void store_serve_read(store_server *s, sclient *c);
/* Send what c's replies left unsent (non-blocking). */
void store_serve_flush(sclient *c);
/* c's parked request reached its deadline: answer it with the timeout. */
void store_serve_expire(store_server *s, sclient *c);
/* Close connection i (s->cl[i]) and account for its rank's departure. */
void store_serve_close(store_server *s, size_t i);
/* The job cannot complete: every parked request fails with msg, and
 * ACCEL_STORE_KEY_JOB_FAILED is set to it. */
void store_serve_fail_job(store_server *s, const char *msg);
/* Free the key table and the barriers. */
void store_serve_clear(store_server *s);

/* ---- store_server.c: the server thread ---------------------------------------- */

/* Listen at addr:port (addr NULL: every interface; port 0: a free one) and
 * start the thread.  refuse: answer every HELLO with this error (a
 * stand-in for a store that is gone); token: 0, or the job token every
 * HELLO must carry. */
int store_server_start(const char *addr, int port, int world, int64_t linger_ms,
                       int64_t keepalive_ms, const char *refuse, uint64_t token,
                       store_server **ret, accel_err *err);
/* Stop the server thread: after the other ranks have disconnected, or at
 * the latest after linger_ms (< 0: the store's timeout).  abort_msg: the job
 * failed; the ranks still waiting are told so first. */
void store_server_stop(store_server *s, int64_t linger_ms, const char *abort_msg);
store_server *store_server_free(store_server *s);
/* The port it listens on (the one the kernel chose for port 0). */
int store_server_port(const store_server *s);
/* The job gave up on this store: ranks that never came are no news (call
 * before store_server_stop). */
void store_server_abandon(store_server *s);

#endif /* ACCEL_CORE_STORE_IMPL_H */
