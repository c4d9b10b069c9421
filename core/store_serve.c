/* SPDX-License-Identifier: MIT */
/* core/store_serve.c: what the rendezvous store's server does with each
 * connection (store-impl.h): the key table, requests parked until their
 * condition holds or their deadline passes, barriers, and the ranks that
 * join, leave or fail.  The server composes the timeout messages, because
 * only it knows which keys were never set and which ranks never arrived.
 * Runs on the server thread only (store_server.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/common/mono.h"
#include "log.h"
#include "store-impl.h"

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

void store_serve_flush(sclient *c)
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
	store_serve_flush(c);
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
	store_serve_flush(c);
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
	c->deadline = mono_after(mono_ms(), timeout_ms);
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
	store_fmt_ranks(miss, s->world, a, sizeof(a));
	store_fmt_ranks(never, s->world, bb, sizeof(bb));
	store_fmt_ranks(gone, s->world, cc, sizeof(cc));
	store_fmt_ranks(early, s->world, dd, sizeof(dd));
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

void store_serve_expire(store_server *s, sclient *c)
{
	char t[32];
	store_fmt_secs(c->timeout_ms, t, sizeof(t));
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
 * ACCEL_STORE_KEY_JOB_FAILED, fail the parked gets and waits and the barriers that
 * cannot complete, and refuse later waits for keys that are not set,
 * instead of letting them run into their timeouts.  The first reason
 * stays. */
void store_serve_fail_job(store_server *s, const char *msg)
{
	if (!s->failed) {
		s->failed = strdup(msg);
		if (!s->failed || kv_put(s, ACCEL_STORE_KEY_JOB_FAILED, msg, (uint32_t)strlen(msg)) < 0)
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
	store_serve_fail_job(s, msg);
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
	store_serve_fail_job(s, msg);
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
		store_serve_expire(s, c);
	}
}

/* Handle one request frame. */
/* SET key value: replace or insert, then wake the waiters of keys. */
static void do_set(store_server *s, sclient *c, cursor *cu)
{
	char *key = cu_key(cu);
	uint32_t len;
	const uint8_t *val = cu_str(cu, &len);
	if (cu->bad || len > STORE_MAX_VALUE) {
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
}

/* GET timeout key: the value now, or parked until it is set or the
 * timeout passes (timeout <= 0: not found at once). */
static void do_get(store_server *s, sclient *c, cursor *cu)
{
	int64_t tmo = cu_i64(cu);
	char *key = cu_key(cu);
	if (cu->bad) {
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
}

/* ADD delta key: the key as a decimal integer plus delta (a missing key
 * counts as 0); the new value is the reply. */
static void do_add(store_server *s, sclient *c, cursor *cu)
{
	int64_t delta = cu_i64(cu);
	char *key = cu_key(cu);
	if (cu->bad) {
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
}

/* WAIT timeout n keys...: parked until every key is set. */
static void do_wait(store_server *s, sclient *c, cursor *cu)
{
	int64_t tmo = cu_i64(cu);
	uint32_t nk = cu_u32(cu);
	if (cu->bad || nk > STORE_MAX_WAIT_KEYS) {
		c->dead = 1;
		return;
	}
	char **keys = calloc(nk ? nk : 1, sizeof(*keys));
	if (!keys) {
		reply_err(c, ACCEL_ERR_NOMEM, "store wait: out of memory");
		return;
	}
	uint32_t got = 0;
	while (got < nk && !cu->bad)
		keys[got++] = cu_key(cu);
	c->wait_keys = keys;
	c->n_wait_keys = got;
	if (cu->bad) {
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
		store_serve_expire(s, c);
	}
}

/* BARRIER timeout name. */
static void do_barrier_req(store_server *s, sclient *c, cursor *cu)
{
	int64_t tmo = cu_i64(cu);
	char *name = cu_key(cu);
	if (cu->bad) {
		free(name);
		c->dead = 1;
		return;
	}
	do_barrier(s, c, name, tmo < 0 ? 0 : tmo);
	free(name);
}

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
	case OP_SET:
		do_set(s, c, &cu);
		return;
	case OP_GET:
		do_get(s, c, &cu);
		return;
	case OP_ADD:
		do_add(s, c, &cu);
		return;
	case OP_WAIT:
		do_wait(s, c, &cu);
		return;
	case OP_BARRIER:
		do_barrier_req(s, c, &cu);
		return;
	default:
		c->dead = 1;
		return;
	}
}

void store_serve_read(store_server *s, sclient *c)
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
		uint32_t blen = store_rd_u32(c->in.p + off);
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

void store_serve_close(store_server *s, size_t i)
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
			accelp_log(ACCEL_LOG_DEBUG, "rendezvous store: rank %d disconnected without "
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
	 * ACCEL_STORE_KEY_JOB_FAILED, with or without a launcher to tell them. */
	if (crashed) {
		char msg[300];
		snprintf(msg, sizeof(msg), "rank %d lost its connection to the rendezvous store "
		         "without leaving the job (it crashed, was killed, or exited without "
		         "accel_ctx_free)", rank);
		store_serve_fail_job(s, msg);
	}
}

void store_serve_clear(store_server *s)
{
	for (size_t b = 0; s->tab && b < s->nb; b++)
		for (kv *e = s->tab[b], *ne; e; e = ne) {
			ne = e->next;
			free(e->key);
			free(e->val);
			free(e);
		}
	free(s->tab);
	s->tab = NULL;
	while (s->barriers)
		barrier_drop(s, s->barriers);
}
