/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/gpt2_data.h: the token file (docs/data.md), byte-level
 * preparation of a text file, random tokens for throughput runs, and a
 * reader that gathers a batch's sequences on a thread of its own while the
 * previous batch computes.
 *
 * Token file: a 24-byte header, then n_tokens uint16 little-endian tokens:
 *   0  "ACCELTOK"  magic (8 bytes)
 *   8  uint32 LE   version (1)
 *   12 uint32 LE   vocabulary size (every token is below it)
 *   16 uint64 LE   n_tokens
 * Sample i of a stream is tokens [i*T, i*T + T] (T + 1 tokens: the inputs
 * and, shifted by one, the targets).
 */
#ifndef EXAMPLES_GPT2_DATA_H
#define EXAMPLES_GPT2_DATA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define GPT2_TOK_MAGIC "ACCELTOK"
#define GPT2_TOK_VERSION 1u
#define GPT2_TOK_HEADER 24

typedef struct gpt2_tokens {
	const uint16_t *tok;     /* n tokens (into the mapping, or owned)    */
	uint64_t n;
	uint32_t vocab;
	void *map;               /* mmap of the file (NULL: owned tok)      */
	size_t map_len;
	uint16_t *owned;
} gpt2_tokens;

/* Map a token file.  0, or -1 with a message naming the file in err. */
int gpt2_tokens_open(gpt2_tokens *t, const char *path, char *err, size_t cap);
/* n uniform random tokens in [0, vocab) from seed. */
int gpt2_tokens_random(gpt2_tokens *t, uint64_t n, uint32_t vocab, uint64_t seed);
void gpt2_tokens_close(gpt2_tokens *t);
/* Write tokens to a token file. */
int gpt2_tokens_write(const char *path, const uint16_t *tok, uint64_t n, uint32_t vocab,
                      char *err, size_t cap);
/* `prepare IN OUT`: the bytes of IN as tokens (vocabulary 256). */
int gpt2_prepare_bytes(const char *in, const char *out, uint64_t *ret_n, char *err, size_t cap);

/* A view of T+1-token samples: sample i starts at token first + i*T. */
typedef struct gpt2_stream {
	const gpt2_tokens *t;
	uint64_t first, n_samples;
	int T;
} gpt2_stream;

/* Tokens [first, first+count) of t as samples of T (+1) tokens. */
void gpt2_stream_init(gpt2_stream *s, const gpt2_tokens *t, uint64_t first, uint64_t count,
                      int T);
/* inputs[k*T ..] and targets of samples idx[0..n). */
void gpt2_stream_gather(const gpt2_stream *s, const int64_t *idx, int n, int32_t *inputs,
                        int32_t *targets);

/* Prefetching reader: submit a batch's indices, take it later. */
typedef struct gpt2_reader {
	const gpt2_stream *s;
	int cap;                         /* samples per batch                 */
	int32_t *inp[2], *tgt[2];
	int64_t *idx;
	int n_pending, slot, busy, quit, started;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
} gpt2_reader;

int gpt2_reader_start(gpt2_reader *r, const gpt2_stream *s, int cap);
/* Gather samples idx[0..n) on the reader's thread into the next slot. */
void gpt2_reader_submit(gpt2_reader *r, const int64_t *idx, int n);
/* Wait for the submitted batch; its inputs and targets (valid until the
 * submit after next). */
void gpt2_reader_take(gpt2_reader *r, int32_t **ret_inputs, int32_t **ret_targets);
void gpt2_reader_stop(gpt2_reader *r);

#endif
