/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-tokens.c: the GPT-2 example's token file reader
 * (examples/gpt2/gpt2_data.c, format in docs/data.md), from any file.
 *
 * The input is the whole file.  gpt2_tokens_open must refuse it with a
 * message that names the file, or accept it; an accepted file has the
 * header's magic, version 1, a vocabulary in 2..65536, exactly 24 + 2n
 * bytes and every token below the vocabulary (a token at or above it
 * would index past the model's embedding table), and every sample the
 * sampler may ask for is readable: the program's split (a tenth for
 * validation) at a few sequence lengths, first and last samples of each
 * part gathered, and every value gathered below the vocabulary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2_data.h"
#include "fuzz.h"

static void must(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-tokens: %s\n", what);
		abort();
	}
}

static uint64_t rd(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Samples idx of stream s, each value checked against the vocabulary. */
static void gather(const gpt2_stream *s, const int64_t *idx, int n, uint32_t vocab)
{
	size_t len = (size_t)n * (size_t)s->T;
	int32_t *in = malloc(len * sizeof(*in)), *tg = malloc(len * sizeof(*tg));
	if (in && tg) {
		gpt2_stream_gather(s, idx, n, in, tg);
		for (size_t i = 0; i < len; i++)
			must(in[i] >= 0 && (uint32_t)in[i] < vocab && tg[i] >= 0 &&
			     (uint32_t)tg[i] < vocab, "a gathered token is not below the vocabulary");
	}
	free(in);
	free(tg);
}

static void check_stream(const gpt2_tokens *t, uint64_t first, uint64_t count, int T)
{
	gpt2_stream s;
	gpt2_stream_init(&s, t, first, count, T);
	must(s.n_samples * (uint64_t)T + (s.n_samples ? 1 : 0) <= count,
	     "the stream has more samples than its tokens hold");
	if (!s.n_samples)
		return;
	int64_t idx[4] = {0, (int64_t)(s.n_samples - 1), (int64_t)(s.n_samples / 2), 0};
	gather(&s, idx, 4, t->vocab);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[FUZZ_PATH_MAX], err[512];
	int fd = fuzz_input_file("fuzz-tokens", data, size, path);
	if (fd < 0)
		return 0;
	err[0] = '\0';

	gpt2_tokens t;
	if (gpt2_tokens_open(&t, path, err, sizeof(err)) != 0) {
		must(err[0] != '\0', "refused without a message");
		must(!strncmp(err, path, strlen(path)), "the message does not name the file");
		must(t.map == NULL && t.tok == NULL, "a refused file left a mapping");
		close(fd);
		return 0;
	}
	must(size >= GPT2_TOK_HEADER && !memcmp(data, GPT2_TOK_MAGIC, 8), "accepted a bad magic");
	must(rd(data + 8, 4) == GPT2_TOK_VERSION, "accepted another version");
	must(t.vocab == rd(data + 12, 4) && t.vocab >= 2 && t.vocab <= 65536,
	     "accepted a vocabulary outside 2..65536");
	must(t.n == rd(data + 16, 8) && size == GPT2_TOK_HEADER + 2 * t.n,
	     "accepted a size that does not match the token count");
	for (uint64_t i = 0; i < t.n; i++)
		must(rd(data + GPT2_TOK_HEADER + 2 * i, 2) < t.vocab && t.tok[i] < t.vocab,
		     "accepted a token not below the vocabulary");
	/* the program's split: the last tenth for validation */
	static const int seqs[] = {1, 2, 7, 64};
	uint64_t n_val = (uint64_t)((double)t.n * 0.1), n_train = t.n - n_val;
	for (size_t k = 0; k < sizeof(seqs) / sizeof(seqs[0]); k++) {
		check_stream(&t, 0, n_train, seqs[k]);
		check_stream(&t, n_train, n_val, seqs[k]);
	}
	gpt2_tokens_close(&t);
	close(fd);
	return 0;
}
