/* SPDX-License-Identifier: MIT */
/* examples/gpt2/gpt2_data.c: token files, preparation and the prefetching
 * reader (gpt2_data.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt2_data.h"

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

int gpt2_tokens_open(gpt2_tokens *t, const char *path, char *err, size_t cap)
{
	memset(t, 0, sizeof(*t));
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		snprintf(err, cap, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < GPT2_TOK_HEADER) {
		snprintf(err, cap, "%s: not a token file (shorter than its %d-byte header, or not a "
		         "regular file); make one with `accel-gpt2 prepare TEXT %s`", path,
		         GPT2_TOK_HEADER, path);
		close(fd);
		return -1;
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(err, cap, "%s: mmap failed: %s", path, strerror(errno));
		return -1;
	}
	const unsigned char *h = m;
	uint64_t n = (uint64_t)rd32(h + 16) | (uint64_t)rd32(h + 20) << 32;
	uint32_t ver = rd32(h + 8), vocab = rd32(h + 12);
	const char *bad = memcmp(h, GPT2_TOK_MAGIC, 8) ? "it does not start with " GPT2_TOK_MAGIC
	                  : ver != GPT2_TOK_VERSION     ? "its version is not 1"
	                  : vocab < 2 || vocab > 65536 ? "its vocabulary is not in 2..65536"
	                  : n > ((uint64_t)st.st_size - GPT2_TOK_HEADER) / 2 ||
	                                  (uint64_t)st.st_size != GPT2_TOK_HEADER + 2 * n
	                          ? "its size does not match the token count in the header"
	                          : NULL;
	if (bad) {
		snprintf(err, cap, "%s: not a valid token file: %s (docs/data.md)", path, bad);
		munmap(m, (size_t)st.st_size);
		return -1;
	}
	t->map = m;
	t->map_len = (size_t)st.st_size;
	t->tok = (const uint16_t *)(h + GPT2_TOK_HEADER);
	t->n = n;
	t->vocab = vocab;
	madvise(m, t->map_len, MADV_WILLNEED);
	/* every token within the vocabulary: checked once, here, not per batch */
	for (uint64_t i = 0; i < n; i++)
		if (t->tok[i] >= vocab) {
			snprintf(err, cap, "%s: token %llu is %u, not below the header's vocabulary %u",
			         path, (unsigned long long)i, t->tok[i], vocab);
			gpt2_tokens_close(t);
			return -1;
		}
	return 0;
}

int gpt2_tokens_random(gpt2_tokens *t, uint64_t n, uint32_t vocab, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	if (!(t->owned = malloc((size_t)n * sizeof(uint16_t))))
		return -1;
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	for (uint64_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		t->owned[i] = (uint16_t)((s >> 11) % vocab);
	}
	t->tok = t->owned;
	t->n = n;
	t->vocab = vocab;
	return 0;
}

void gpt2_tokens_close(gpt2_tokens *t)
{
	if (t->map)
		munmap(t->map, t->map_len);
	free(t->owned);
	memset(t, 0, sizeof(*t));
}

int gpt2_tokens_write(const char *path, const uint16_t *tok, uint64_t n, uint32_t vocab,
                      char *err, size_t cap)
{
	unsigned char h[GPT2_TOK_HEADER];
	memcpy(h, GPT2_TOK_MAGIC, 8);
	wr32(h + 8, GPT2_TOK_VERSION);
	wr32(h + 12, vocab);
	wr32(h + 16, (uint32_t)n);
	wr32(h + 20, (uint32_t)(n >> 32));
	FILE *f = fopen(path, "wb");
	if (!f) {
		snprintf(err, cap, "%s: cannot create: %s", path, strerror(errno));
		return -1;
	}
	int ok = fwrite(h, 1, sizeof(h), f) == sizeof(h);
	/* little-endian on disk, whatever the host */
	unsigned char buf[8192];
	for (uint64_t i = 0; ok && i < n;) {
		size_t k = 0;
		for (; k + 2 <= sizeof(buf) && i < n; i++, k += 2) {
			buf[k] = (unsigned char)(tok[i] & 0xff);
			buf[k + 1] = (unsigned char)(tok[i] >> 8);
		}
		ok = fwrite(buf, 1, k, f) == k;
	}
	if (fclose(f) || !ok) {
		snprintf(err, cap, "%s: writing failed: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int gpt2_prepare_bytes(const char *in, const char *out, uint64_t *ret_n, char *err, size_t cap)
{
	FILE *f = fopen(in, "rb");
	if (!f) {
		snprintf(err, cap, "%s: cannot open: %s", in, strerror(errno));
		return -1;
	}
	size_t n = 0, cap_tok = 1 << 16;
	uint16_t *tok = malloc(cap_tok * sizeof(uint16_t));
	int c;
	while (tok && (c = getc(f)) != EOF) {
		if (n == cap_tok) {
			uint16_t *t2 = realloc(tok, 2 * cap_tok * sizeof(uint16_t));
			if (!t2) {
				free(tok);
				tok = NULL;
				break;
			}
			tok = t2;
			cap_tok *= 2;
		}
		tok[n++] = (uint16_t)c;
	}
	int rerr = ferror(f);
	fclose(f);
	if (!tok || rerr) {
		snprintf(err, cap, "%s: %s", in, tok ? "read error" : "out of memory");
		free(tok);
		return -1;
	}
	if (n < 2) {
		snprintf(err, cap, "%s: has %zu bytes; a training text needs at least 2", in, n);
		free(tok);
		return -1;
	}
	int r = gpt2_tokens_write(out, tok, n, 256, err, cap);
	free(tok);
	*ret_n = n;
	return r;
}

void gpt2_stream_init(gpt2_stream *s, const gpt2_tokens *t, uint64_t first, uint64_t count,
                      int T)
{
	s->t = t;
	s->first = first;
	s->T = T;
	s->n_samples = count > (uint64_t)T ? (count - 1) / (uint64_t)T : 0;
}

void gpt2_stream_gather(const gpt2_stream *s, const int64_t *idx, int n, int32_t *inputs,
                        int32_t *targets)
{
	int T = s->T;
	for (int k = 0; k < n; k++) {
		const uint16_t *p = s->t->tok + s->first + (uint64_t)idx[k] * (uint64_t)T;
		for (int j = 0; j < T; j++) {
			inputs[(size_t)k * T + j] = p[j];
			targets[(size_t)k * T + j] = p[j + 1];
		}
	}
}

static void *reader_main(void *arg)
{
	gpt2_reader *r = arg;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->busy && !r->quit)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->quit)
			break;
		int slot = r->slot, n = r->n_pending;
		pthread_mutex_unlock(&r->mu);
		gpt2_stream_gather(r->s, r->idx, n, r->inp[slot], r->tgt[slot]);
		pthread_mutex_lock(&r->mu);
		r->busy = 0;
		pthread_cond_broadcast(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int gpt2_reader_start(gpt2_reader *r, const gpt2_stream *s, int cap)
{
	memset(r, 0, sizeof(*r));
	r->s = s;
	r->cap = cap;
	size_t n = (size_t)cap * (size_t)s->T;
	for (int k = 0; k < 2; k++) {
		r->inp[k] = malloc(n * sizeof(int32_t));
		r->tgt[k] = malloc(n * sizeof(int32_t));
		if (!r->inp[k] || !r->tgt[k])
			return -1;
	}
	if (!(r->idx = malloc((size_t)cap * sizeof(int64_t))))
		return -1;
	r->slot = 1;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	if (pthread_create(&r->th, NULL, reader_main, r)) {
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv);
		return -1;
	}
	r->started = 1;
	return 0;
}

void gpt2_reader_submit(gpt2_reader *r, const int64_t *idx, int n)
{
	pthread_mutex_lock(&r->mu);
	while (r->busy)
		pthread_cond_wait(&r->cv, &r->mu);
	memcpy(r->idx, idx, (size_t)n * sizeof(int64_t));
	r->n_pending = n;
	r->slot ^= 1;
	r->busy = 1;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

void gpt2_reader_take(gpt2_reader *r, int32_t **ret_inputs, int32_t **ret_targets)
{
	pthread_mutex_lock(&r->mu);
	while (r->busy)
		pthread_cond_wait(&r->cv, &r->mu);
	*ret_inputs = r->inp[r->slot];
	*ret_targets = r->tgt[r->slot];
	pthread_mutex_unlock(&r->mu);
}

void gpt2_reader_stop(gpt2_reader *r)
{
	if (r->started) {
		pthread_mutex_lock(&r->mu);
		r->quit = 1;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->th, NULL);
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv);
	}
	for (int k = 0; k < 2; k++) {
		free(r->inp[k]);
		free(r->tgt[k]);
	}
	free(r->idx);
	memset(r, 0, sizeof(*r));
}
