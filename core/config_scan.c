/* SPDX-License-Identifier: MIT */
/* core/config_scan.c: the position scanner.  jansson parses files but keeps no
 * positions, so this scanner runs over the (already validated) text and
 * records line:column of every key and value by path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-impl.h"
#include "log.h"

/* The position scanner
 * Runs over text jansson has accepted, so it only needs to be robust, not
 * strict: on anything unexpected it stops and positions are simply missing. */

typedef struct scanner {
	const char *p, *end;
	int line, col;
	posrec *recs;
	size_t n, cap;
	char *path;
	size_t plen, pcap;
	char *key;
	size_t klen, kcap;
	int bad;                   /* stop: malformed or out of memory */
} scanner;

static void sc_adv(scanner *s)
{
	unsigned char c = (unsigned char)*s->p++;
	if (c == '\n') {
		s->line++;
		s->col = 1;
	} else if ((c & 0xC0) != 0x80) {
		/* columns count characters, as jansson's do */
		s->col++;
	}
}

static void sc_ws(scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		sc_adv(s);
}

static void sc_keych(scanner *s, char c)
{
	if (cfg_grow((void **)&s->key, &s->kcap, s->klen + 2, 1)) {
		s->bad = 1;
		return;
	}
	s->key[s->klen++] = c;
	s->key[s->klen] = '\0';
}

static void sc_utf8(scanner *s, unsigned long cp)
{
	if (cp < 0x80) {
		sc_keych(s, (char)cp);
	} else if (cp < 0x800) {
		sc_keych(s, (char)(0xC0 | (cp >> 6)));
		sc_keych(s, (char)(0x80 | (cp & 0x3F)));
	} else if (cp < 0x10000) {
		sc_keych(s, (char)(0xE0 | (cp >> 12)));
		sc_keych(s, (char)(0x80 | ((cp >> 6) & 0x3F)));
		sc_keych(s, (char)(0x80 | (cp & 0x3F)));
	} else {
		sc_keych(s, (char)(0xF0 | (cp >> 18)));
		sc_keych(s, (char)(0x80 | ((cp >> 12) & 0x3F)));
		sc_keych(s, (char)(0x80 | ((cp >> 6) & 0x3F)));
		sc_keych(s, (char)(0x80 | (cp & 0x3F)));
	}
}

static unsigned long sc_hex4(scanner *s)
{
	unsigned long v = 0;
	for (int i = 0; i < 4; i++) {
		if (s->p >= s->end) {
			s->bad = 1;
			return 0;
		}
		char c = *s->p;
		int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
		        : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
		if (d < 0) {
			s->bad = 1;
			return 0;
		}
		v = v * 16 + (unsigned long)d;
		sc_adv(s);
	}
	return v;
}

/* A string at s->p; decoded into s->key when `decode`. */
static void sc_string(scanner *s, int decode)
{
	s->klen = 0;
	if (decode) {
		sc_keych(s, '\0');   /* s->key is never NULL, also for "" */
		s->klen = 0;
	}
	sc_adv(s); /* opening quote */
	while (!s->bad) {
		if (s->p >= s->end) {
			s->bad = 1;
			return;
		}
		char c = *s->p;
		if (c == '"') {
			sc_adv(s);
			return;
		}
		if (c != '\\') {
			if (decode)
				sc_keych(s, c);
			sc_adv(s);
			continue;
		}
		sc_adv(s);
		if (s->p >= s->end) {
			s->bad = 1;
			return;
		}
		char e = *s->p;
		sc_adv(s);
		if (!decode) {
			if (e == 'u')
				sc_hex4(s);
			continue;
		}
		switch (e) {
		case 'b': sc_keych(s, '\b'); break;
		case 'f': sc_keych(s, '\f'); break;
		case 'n': sc_keych(s, '\n'); break;
		case 'r': sc_keych(s, '\r'); break;
		case 't': sc_keych(s, '\t'); break;
		case 'u': {
			unsigned long cp = sc_hex4(s);
			if (cp >= 0xD800 && cp < 0xDC00 && s->end - s->p >= 6 && s->p[0] == '\\' &&
			    s->p[1] == 'u') {
				sc_adv(s);
				sc_adv(s);
				unsigned long lo = sc_hex4(s);
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			sc_utf8(s, cp);
			break;
		}
		default: sc_keych(s, e); break;
		}
	}
}

static size_t sc_push(scanner *s, const char *seg, size_t n)
{
	size_t old = s->plen;
	if (cfg_grow((void **)&s->path, &s->pcap, s->plen + n + 2, 1)) {
		s->bad = 1;
		return old;
	}
	if (s->plen)
		s->path[s->plen++] = PSEP;
	memcpy(s->path + s->plen, seg, n);
	s->plen += n;
	s->path[s->plen] = '\0';
	return old;
}

static void sc_pop(scanner *s, size_t old)
{
	s->plen = old;
	if (s->path)
		s->path[old] = '\0';
}

static void sc_record(scanner *s, int kl, int kc)
{
	if (s->bad)
		return;
	if (cfg_grow((void **)&s->recs, &s->cap, s->n + 1, sizeof(*s->recs))) {
		s->bad = 1;
		return;
	}
	posrec *r = &s->recs[s->n];
	r->path = strdup(s->path);
	if (!r->path) {
		s->bad = 1;
		return;
	}
	r->kline = kl;
	r->kcol = kc;
	r->vline = s->line;
	r->vcol = s->col;
	s->n++;
}

static void sc_value(scanner *s, int depth)
{
	sc_ws(s);
	if (s->bad || s->p >= s->end || depth > 4096) {
		s->bad = 1;
		return;
	}
	char c = *s->p;
	if (c == '{') {
		sc_adv(s);
		sc_ws(s);
		if (s->p < s->end && *s->p == '}') {
			sc_adv(s);
			return;
		}
		while (!s->bad) {
			sc_ws(s);
			if (s->p >= s->end || *s->p != '"') {
				s->bad = 1;
				return;
			}
			int kl = s->line, kc = s->col;
			sc_string(s, 1);
			sc_ws(s);
			if (s->bad || s->p >= s->end || *s->p != ':') {
				s->bad = 1;
				return;
			}
			sc_adv(s);
			sc_ws(s);
			size_t old = sc_push(s, s->key ? s->key : "", s->klen);
			sc_record(s, kl, kc);
			sc_value(s, depth + 1);
			sc_pop(s, old);
			sc_ws(s);
			if (s->p < s->end && *s->p == ',') {
				sc_adv(s);
				continue;
			}
			if (s->p < s->end && *s->p == '}') {
				sc_adv(s);
				return;
			}
			s->bad = 1;
		}
	} else if (c == '[') {
		sc_adv(s);
		sc_ws(s);
		if (s->p < s->end && *s->p == ']') {
			sc_adv(s);
			return;
		}
		for (size_t i = 0; !s->bad; i++) {
			char seg[32];
			sc_ws(s);
			int n = snprintf(seg, sizeof(seg), "[%zu]", i);
			size_t old = sc_push(s, seg, (size_t)n);
			sc_record(s, 0, 0);
			sc_value(s, depth + 1);
			sc_pop(s, old);
			sc_ws(s);
			if (s->p < s->end && *s->p == ',') {
				sc_adv(s);
				continue;
			}
			if (s->p < s->end && *s->p == ']') {
				sc_adv(s);
				return;
			}
			s->bad = 1;
		}
	} else if (c == '"') {
		sc_string(s, 0);
	} else {
		while (s->p < s->end && !strchr(",]} \t\r\n", *s->p))
			sc_adv(s);
	}
}

static int posrec_cmp(const void *a, const void *b)
{
	return strcmp(((const posrec *)a)->path, ((const posrec *)b)->path);
}

void cfg_scan_positions(doc *d, const char *text, size_t len)
{
	scanner s = {.p = text, .end = text + len, .line = 1, .col = 1};
	if (sc_push(&s, "", 0), s.bad)
		goto done;
	sc_value(&s, 0);
	if (s.bad)
		accelp_log(ACCEL_LOG_DEBUG, "config %s: position scan stopped early at %d:%d",
		          d->name, s.line, s.col);
	if (s.n)
		qsort(s.recs, s.n, sizeof(*s.recs), posrec_cmp);
	d->pos = s.recs;
	d->npos = s.n;
	s.recs = NULL;
	s.n = 0;
done:
	for (size_t i = 0; i < s.n; i++)
		free(s.recs[i].path);
	free(s.recs);
	free(s.path);
	free(s.key);
}

static const posrec *pos_find(const doc *d, const char *ppath)
{
	if (!d || !d->pos || !ppath)
		return NULL;
	posrec key = {.path = (char *)ppath};
	return bsearch(&key, d->pos, d->npos, sizeof(*d->pos), posrec_cmp);
}

/* Source text of a value (or of its key) inside document d. */
void cfg_doc_source(const doc *d, const char *ppath, int at_key, char *buf, size_t cap)
{
	if (d->kind == D_FILE) {
		const posrec *r = pos_find(d, ppath);
		if (r && at_key && r->kline)
			snprintf(buf, cap, "%s:%d:%d", d->name, r->kline, r->kcol);
		else if (r)
			snprintf(buf, cap, "%s:%d:%d", d->name, r->vline, r->vcol);
		else
			snprintf(buf, cap, "%s", d->name);
	} else if (d->kind == D_ENV) {
		snprintf(buf, cap, "env %s", d->name);
	} else {
		snprintf(buf, cap, "%s", d->name);
	}
}

