/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/train_eval.c: what the model does on held-out tokens: the
 * mean loss (each rank a slice of the held-out sequences) and a greedy
 * continuation of a held-out prompt, both in a forward-only pass
 * (train_gpt2.h, FORWARD_ONLY).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_device.h"
#include "train_gpt2.h"

/* Mean held-out loss over the first `batches` batches of cap sequences
 * per rank (0: all), each rank a contiguous slice. */
static int eval_pass(trainer *t, const gpt2_stream *val, long batches, double *ret_loss)
{
	int rank = accel_rank(t->ctx), world = t->world, T = t->c.seq;
	uint64_t total = val->n_samples;
	if (batches > 0 && (uint64_t)batches * (uint64_t)t->cap * (uint64_t)world < total)
		total = (uint64_t)batches * (uint64_t)t->cap * (uint64_t)world;
	uint64_t lo = total * (uint64_t)rank / (uint64_t)world,
	         hi = total * (uint64_t)(rank + 1) / (uint64_t)world;
	uint64_t max_slice = (total + (uint64_t)world - 1) / (uint64_t)world;
	uint64_t rounds = (max_slice + (uint64_t)t->cap - 1) / (uint64_t)t->cap;
	int32_t *inp = malloc((size_t)t->cap * T * sizeof(int32_t)),
	        *tgt = malloc((size_t)t->cap * T * sizeof(int32_t));
	int64_t *idx = malloc((size_t)t->cap * sizeof(int64_t));
	double sums[2] = {0, 0};
	int ret = -1, rc;
	if (!inp || !tgt || !idx) {
		fprintf(stderr, "accel-gpt2: out of memory for evaluation\n");
		goto out;
	}
	for (uint64_t r = 0; r < rounds; r++) {
		uint64_t a = lo + r * (uint64_t)t->cap;
		int n = a < hi ? (int)(hi - a < (uint64_t)t->cap ? hi - a : (uint64_t)t->cap) : 0;
		for (int k = 0; k < n; k++)
			idx[k] = (int64_t)(a + (uint64_t)k);
		gpt2_stream_gather(val, idx, n, inp, tgt);
		if (train_forward(t, inp, n))
			goto out;
		double s = 0;
		if (n > 0 && gpt2_dev_loss(&t->w, t->gpu, tgt, n, 0, &s))
			goto out;
		sums[0] += s;
		sums[1] += (double)n * T;
	}
	if ((rc = accel_allreduce(t->ctx, sums, sums, 2, ACCEL_DTYPE_F64, ACCEL_RED_SUM))) {
		train_fail(t, "reducing the held-out loss", rc);
		goto out;
	}
	*ret_loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
	ret = 0;
out:
	free(inp);
	free(tgt);
	free(idx);
	return ret;
}

int train_evaluate(trainer *t, const gpt2_stream *val, long batches, double *ret_loss)
{
	int rc;
	FORWARD_ONLY(t, rc, eval_pass(t, val, batches, ret_loss));
	return rc;
}

/* Greedy continuation of a held-out prompt: every rank computes (the hooks
 * are collective), rank 0 prints. */
static int sample_pass(trainer *t, const gpt2_stream *val, long n_new)
{
	int T = t->c.seq, V = t->c.vocab;
	int plen = T / 2 > 0 ? T / 2 : 1;
	int32_t *ctxt = calloc((size_t)T, sizeof(int32_t));
	int32_t *gen = malloc((size_t)(n_new + 1) * sizeof(int32_t));
	float *lbuf = malloc((size_t)V * sizeof(float));   /* the GPU's logits row */
	if (!ctxt || !gen || !lbuf) {
		fprintf(stderr, "accel-gpt2: --sample %ld: out of memory for %ld tokens\n", n_new,
		        n_new + T);
		free(ctxt);
		free(gen);
		free(lbuf);
		return -1;
	}
	int len = 0;
	for (; len < plen && (uint64_t)len < val->t->n - val->first; len++)
		ctxt[len] = val->t->tok[val->first + (uint64_t)len];
	for (long k = 0; k < n_new; k++) {
		const float *row = NULL;
		if (train_forward(t, ctxt, 1) ||
		    !(row = gpt2_dev_logits_row(&t->w, t->gpu, len - 1, V, lbuf))) {
			free(ctxt);
			free(gen);
			free(lbuf);
			return -1;
		}
		int best = 0;
		for (int j = 1; j < V; j++)
			if (row[j] > row[best])
				best = j;
		gen[k] = best;
		if (len == T) {   /* slide the window */
			memmove(ctxt, ctxt + 1, (size_t)(T - 1) * sizeof(int32_t));
			len--;
		}
		ctxt[len++] = best;
	}
	if (accel_is_main(t->ctx)) {
		char *s = malloc((size_t)(n_new * 8 + plen * 8 + 1));
		size_t o = 0;
		for (int i = 0; s && i < plen; i++) {
			int v = val->t->tok[val->first + (uint64_t)i];
			o += (size_t)(V == 256 && v >= 32 && v < 127 ? sprintf(s + o, "%c", v)
			              : V == 256 && v == '\n'       ? sprintf(s + o, "\\n")
			                                           : sprintf(s + o, "<%d>", v));
		}
		if (s)
			s[o++] = '|', s[o] = 0;
		for (long k = 0; s && k < n_new; k++) {
			int v = gen[k];
			o += (size_t)(V == 256 && v >= 32 && v < 127 ? sprintf(s + o, "%c", v)
			              : V == 256 && v == '\n'       ? sprintf(s + o, "\\n")
			                                           : sprintf(s + o, "<%d>", v));
		}
		accel_print(t->ctx, "sample (prompt|greedy continuation): %s\n", s ? s : "?");
		free(s);
	}
	free(ctxt);
	free(gen);
	free(lbuf);
	return 0;
}

int train_sample(trainer *t, const gpt2_stream *val, long n_new)
{
	int rc;
	FORWARD_ONLY(t, rc, sample_pass(t, val, n_new));
	return rc;
}
