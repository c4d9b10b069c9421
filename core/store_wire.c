/* SPDX-License-Identifier: MIT */
/* core/store_wire.c: the rendezvous store's wire format (store-impl.h):
 * byte buffers that build frames, cursors that read them, and the text
 * helpers and socket settings both ends use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/sock.h"
#include "log.h"
#include "store-impl.h"

void store_fmt_secs(int64_t ms, char *buf, size_t cap)
{
	snprintf(buf, cap, "%g s", (double)ms / 1000.0);
}

/* strerror with a lower-case first letter, to sit inside a sentence. */
const char *store_errtext(int e, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] = (char)(buf[0] - 'A' + 'a');
	return buf;
}

void sb_free(sbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

int sb_reserve(sbuf *b, size_t extra)
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

void sb_put(sbuf *b, const void *data, size_t n)
{
	if (sb_reserve(b, n) < 0)
		return;
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
}

void sb_u8(sbuf *b, uint8_t v)
{
	sb_put(b, &v, 1);
}

void sb_u32(sbuf *b, uint32_t v)
{
	uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	sb_put(b, x, 4);
}

void sb_i64(sbuf *b, int64_t sv)
{
	uint64_t v = (uint64_t)sv;
	sb_u32(b, (uint32_t)(v >> 32));
	sb_u32(b, (uint32_t)v);
}

void sb_str(sbuf *b, const void *s, size_t n)
{
	sb_u32(b, (uint32_t)n);
	sb_put(b, s, n);
}

/* Start a frame: reserve the length word, patched by sb_end. */
size_t sb_begin(sbuf *b)
{
	size_t at = b->len;
	sb_u32(b, 0);
	return at;
}

void sb_end(sbuf *b, size_t at)
{
	if (b->oom)
		return;
	uint32_t n = (uint32_t)(b->len - at - 4);
	b->p[at] = (uint8_t)(n >> 24);
	b->p[at + 1] = (uint8_t)(n >> 16);
	b->p[at + 2] = (uint8_t)(n >> 8);
	b->p[at + 3] = (uint8_t)n;
}

uint32_t store_rd_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint8_t cu_u8(cursor *c)
{
	if (c->bad || c->left < 1)
		return c->bad = 1, 0;
	c->left--;
	return *c->p++;
}

uint32_t cu_u32(cursor *c)
{
	if (c->bad || c->left < 4)
		return c->bad = 1, 0;
	uint32_t v = store_rd_u32(c->p);
	c->p += 4;
	c->left -= 4;
	return v;
}

int64_t cu_i64(cursor *c)
{
	uint64_t hi = cu_u32(c), lo = cu_u32(c);
	return (int64_t)(hi << 32 | lo);
}

/* A length-prefixed byte string, borrowed from the frame. */
const uint8_t *cu_str(cursor *c, uint32_t *ret_len)
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
char *cu_key(cursor *c)
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
void store_fmt_ranks(const uint8_t *set, int n, char *out, size_t cap)
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

void store_sock_tune(int fd, int64_t keepalive_ms)
{
	sock_nodelay(fd);
	if (sock_keepalive(fd, keepalive_ms, 1) != 0) {
		char et[128];
		accelp_log(ACCEL_LOG_WARN, "rendezvous store: cannot set TCP keepalive (%s): a node "
		          "that vanishes is found by comm.timeout_s only",
		          store_errtext(errno, et, sizeof(et)));
	}
}
