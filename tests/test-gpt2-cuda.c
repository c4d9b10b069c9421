/* SPDX-License-Identifier: MIT */
/* tests/test-gpt2-cuda.c: examples/gpt2's GPU math (gpt2_cuda.cu) against
 * its CPU math (gpt2_model.c, f32) on one training step of a small GPT-2,
 * without accel: the same weights and batch; the loss, one row of logits
 * (gpt2_cuda_logits_row, the padded row stride) and every parameter's
 * gradient, compared per tensor as max |gpu - cpu| / max |cpu|.
 *
 * Cases (table below): f32 with the tied head, untied, with --recompute
 * (each block's forward re-run before its backward, sharing one set of
 * intermediates), with a partial batch and with two accumulated passes
 * (the gradients must add); bf16 tied and with recompute; f16 with a loss
 * scale of 1024 (the gradients then compare divided by it).  The shapes
 * are odd where it matters: vocabulary 253 (the logits' row stride pads to
 * 256), head dim 16, 3 sequences of 24 tokens.
 *
 * Tolerances: f32 1e-5 of each tensor's largest value (the bound;
 * the GPU sums in other orders than the CPU, and the token-embedding
 * gradient is added with atomics), the loss 1e-6.  bf16 and f16 store
 * every activation and activation gradient in 16 bits (the CPU reference:
 * f32 on the same 16-bit weights).  A CPU simulation of exactly this test
 * (gpt2_model.c with each GPU kernel's and GEMM's output rounded to bf16 /
 * f16 where gpt2_cuda.cu stores it, f32 accumulation, the same weights and
 * tokens) differs from f32 by at most 1.29e-2 (tied) and 1.87e-2 (untied)
 * of a tensor's largest gradient in bf16, 1.54e-3 / 1.79e-3 in f16, and
 * in the loss by 4.2e-5 (bf16) and 6.0e-6 (f16) relative; the bounds are
 * about 2.7x those: 5e-2 and 1.5e-4 (bf16), 5e-3 and 2e-5 (f16).  NOT RUN
 * ON A GPU YET (none was lent when this was written): a run prints the
 * observed values in its "ok:" lines, and the bounds should then become
 * 2-3x the GPU's worst.  Exit 77 ("skipped: no GPU") without a CUDA
 * device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpt2.h"
#include "gpt2_cuda.h"
#include "tensor-cmp.h"

#define NB 3   /* sequences in the work space */

static int fails;

static float lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(*s >> 40) / (double)(1ull << 24) - 0.5);
}

static uint16_t to_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	u += 0x7fffu + ((u >> 16) & 1u);   /* round to nearest even (finite x) */
	return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* x as the working dtype would hold it */
static float rounded(float x, int prec)
{
	if (prec == GPT2_CUDA_BF16)
		return from_bf16(to_bf16(x));
	if (prec == GPT2_CUDA_F16)
		return (float)(_Float16)x;
	return x;
}

static void check(const char *tag, const char *what, const float *want, const float *got,
                  size_t n, double rtol)
{
	double md, ma;
	double rel = tensor_cmp_rel(want, got, n, &md, &ma);
	printf("%s %s %s: max difference %.3e, max |value| %.3e, relative %.3e (tolerance %.0e)\n",
	       rel <= rtol ? "ok:" : "FAIL:", tag, what, md, ma, rel, rtol);
	if (!(rel <= rtol))
		fails++;
}

static void die(const char *what, const char *why)
{
	printf("FAIL: %s: %s\n", what, why);
	exit(1);
}

#define CK(g, call)                                                                 \
	do {                                                                            \
		if ((call) != 0)                                                            \
			die(#call, gpt2_cuda_error(g));                                          \
	} while (0)

static void *dev_upload(const float *x, size_t n, int prec)
{
	void *d = NULL;
	size_t es = prec == GPT2_CUDA_F32 ? 4 : 2;
	if (cudaMalloc(&d, n * es) != cudaSuccess)
		die("cudaMalloc", "out of device memory");
	if (prec == GPT2_CUDA_F32) {
		if (cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice) != cudaSuccess)
			die("cudaMemcpy", "uploading a parameter");
		return d;
	}
	uint16_t *h = malloc(n * 2);
	for (size_t i = 0; i < n; i++) {
		if (prec == GPT2_CUDA_BF16) {
			h[i] = to_bf16(x[i]);
		} else {
			_Float16 v = (_Float16)x[i];
			memcpy(&h[i], &v, 2);
		}
	}
	if (cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice) != cudaSuccess)
		die("cudaMemcpy", "uploading a parameter");
	free(h);
	return d;
}

static float *dev_zeros(size_t n)
{
	void *d = NULL;
	if (cudaMalloc(&d, n * 4) != cudaSuccess || cudaMemset(d, 0, n * 4) != cudaSuccess)
		die("cudaMalloc", "out of device memory");
	return d;
}

static void dev_read(float *dst, const float *src, size_t n)
{
	if (cudaMemcpy(dst, src, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
		die("cudaMemcpy", "reading a gradient");
}

typedef struct tcase {
	const char *tag;
	int prec, tied, recompute, n, passes;
	double scale, rtol, loss_rtol;
} tcase;

/* The model's tensors: [0] wte, [1] wpe, [2 .. 2+12L) the blocks', then
 * ln_f.weight, ln_f.bias, lm_head (untied). */
typedef struct model {
	int nt;
	size_t numel[64];
	char name[64][48];
	float *h[64];    /* host values (rounded to the working dtype) */
	float *gcpu[64]; /* CPU gradients */
} model;

static void make_model(model *m, const gpt2_config *c, int prec, int tied)
{
	uint64_t seed = 2024;
	size_t C = (size_t)c->dim, V = (size_t)c->vocab, T = (size_t)c->seq;
	m->nt = 0;
	#define ADD(nm, cnt, kind)                                                       \
		do {                                                                         \
			int k_ = m->nt++;                                                        \
			snprintf(m->name[k_], sizeof(m->name[k_]), "%s", nm);                    \
			m->numel[k_] = (cnt);                                                    \
			m->h[k_] = malloc((cnt) * 4);                                            \
			m->gcpu[k_] = calloc((cnt), 4);                                          \
			for (size_t i_ = 0; i_ < (cnt); i_++) {                                  \
				float u_ = lcg(&seed);                                               \
				m->h[k_][i_] = rounded((kind) == 0   ? 0.3f * u_                     \
				                       : (kind) == 1 ? 1.0f + 0.4f * u_              \
				                                     : 0.1f * u_, prec);             \
			}                                                                        \
		} while (0)
	ADD("wte", V * C, 0);
	ADD("wpe", T * C, 0);
	for (int l = 0; l < c->layers; l++)
		for (int k = 0; k < GPT2_BLOCK_TENSORS; k++) {
			int64_t sh[2];
			int nd = gpt2_block_shape(c, k, sh);
			size_t cnt = (size_t)sh[0] * (nd == 2 ? (size_t)sh[1] : 1);
			char nm[48];
			snprintf(nm, sizeof(nm), "h.%d.%s", l, gpt2_block_names[k]);
			ADD(nm, cnt, k == GPT2_LN1_W || k == GPT2_LN2_W ? 1 : nd == 2 ? 0 : 2);
		}
	ADD("ln_f.weight", C, 1);
	ADD("ln_f.bias", C, 2);
	if (!tied)
		ADD("lm_head.weight", V * C, 0);
	#undef ADD
}

static void free_model(model *m)
{
	for (int k = 0; k < m->nt; k++) {
		free(m->h[k]);
		free(m->gcpu[k]);
	}
}

#define ROW 29   /* the logits row compared (sequence 1, position 5) */

/* CPU: `passes` forward/backward passes on the batch; returns the loss of
 * one; logits_row: row ROW before the loss. */
static double cpu_step(model *m, const gpt2_config *c, const tcase *tc, const int32_t *tok,
                       const int32_t *tgt, float *logits_row)
{
	gpt2_work w;
	int L = c->layers, nb = 2 + L * GPT2_BLOCK_TENSORS, n = tc->n;
	double loss = 0;
	if (gpt2_work_init(&w, c, NB, 0))
		die("gpt2_work_init", "out of memory");
	float *dhead = tc->tied ? m->gcpu[0] : m->gcpu[nb + 2];
	const float *head = tc->tied ? m->h[0] : m->h[nb + 2];
	for (int pass = 0; pass < tc->passes; pass++) {
		gpt2_embed_forward(&w, tok, m->h[0], m->h[1], n);
		for (int l = 0; l < L; l++)
			gpt2_block_forward(&w, l, (const float *const *)&m->h[2 + l * GPT2_BLOCK_TENSORS],
			                   n);
		gpt2_head_forward(&w, m->h[nb], m->h[nb + 1], head, n);
		memcpy(logits_row, w.logits + (size_t)ROW * c->vocab, (size_t)c->vocab * 4);
		loss = gpt2_loss(&w, tgt, n, tc->scale / ((double)n * c->seq));
		gpt2_head_backward(&w, m->h[nb], head, m->gcpu[nb], m->gcpu[nb + 1], dhead, n);
		for (int l = L - 1; l >= 0; l--)
			gpt2_block_backward(&w, l, (const float *const *)&m->h[2 + l * GPT2_BLOCK_TENSORS],
			                    &m->gcpu[2 + l * GPT2_BLOCK_TENSORS], n);
		gpt2_embed_backward(&w, m->gcpu[0], m->gcpu[1], n);
	}
	gpt2_work_free(&w);
	return loss;
}

static void run(const tcase *tc)
{
	gpt2_config c = {.layers = 2, .heads = 2, .dim = 32, .seq = 24, .vocab = 253};
	int L = c.layers, nb = 2 + L * GPT2_BLOCK_TENSORS, n = tc->n;
	size_t BT = (size_t)NB * (size_t)c.seq;
	model m;
	make_model(&m, &c, tc->prec, tc->tied);
	int32_t tok[NB * 24], tgt[NB * 24];
	uint64_t seed = 99;
	for (size_t i = 0; i < BT; i++) {
		tok[i] = (int32_t)((lcg(&seed) + 0.5f) * (float)c.vocab) % c.vocab;
		tgt[i] = (int32_t)((lcg(&seed) + 0.5f) * (float)c.vocab) % c.vocab;
	}
	tok[3] = tok[40] = 17;   /* repeated tokens: their wte rows add */
	float *row_cpu = malloc((size_t)c.vocab * 4), *row_gpu = malloc((size_t)c.vocab * 4);
	double loss_cpu = cpu_step(&m, &c, tc, tok, tgt, row_cpu);

	char err[600];
	gpt2_cuda *g = NULL;
	if (gpt2_cuda_new(&c, NB, tc->recompute, 0, tc->prec, &g, err, sizeof(err)))
		die("gpt2_cuda_new", err);
	CK(g, gpt2_cuda_use_stream(g, 1));
	void *p[64];
	float *gr[64];
	for (int k = 0; k < m.nt; k++) {
		p[k] = dev_upload(m.h[k], m.numel[k], tc->prec);
		gr[k] = dev_zeros(m.numel[k]);
	}
	/* the uploads and cudaMemset ran on the legacy stream, which the
	 * work space's non-blocking stream is not ordered after (and a
	 * pageable cudaMemcpy may return before its DMA lands): wait */
	if (cudaDeviceSynchronize() != cudaSuccess)
		die("cudaDeviceSynchronize", "after the uploads");
	const void *head = tc->tied ? p[0] : p[nb + 2];
	float *dhead = tc->tied ? gr[0] : gr[nb + 2];
	double loss_gpu = 0;
	for (int pass = 0; pass < tc->passes; pass++) {
		CK(g, gpt2_cuda_embed_forward(g, tok, p[0], p[1], n));
		for (int l = 0; l < L; l++)
			CK(g, gpt2_cuda_block_forward(g, l, (const void *const *)&p[2 + l * GPT2_BLOCK_TENSORS],
			                              n));
		CK(g, gpt2_cuda_head_forward(g, p[nb], p[nb + 1], head, n));
		CK(g, gpt2_cuda_logits_row(g, ROW, row_gpu));
		CK(g, gpt2_cuda_loss(g, tgt, n, tc->scale / ((double)n * c.seq), &loss_gpu));
		CK(g, gpt2_cuda_head_backward(g, p[nb], head, gr[nb], gr[nb + 1], dhead, n));
		for (int l = L - 1; l >= 0; l--) {
			const void *const *pl = (const void *const *)&p[2 + l * GPT2_BLOCK_TENSORS];
			if (tc->recompute)
				CK(g, gpt2_cuda_block_forward(g, l, pl, n));
			CK(g, gpt2_cuda_block_backward(g, l, pl, &gr[2 + l * GPT2_BLOCK_TENSORS], n));
		}
		CK(g, gpt2_cuda_embed_backward(g, gr[0], gr[1], n));
	}
	CK(g, gpt2_cuda_sync(g));

	double dl = fabs(loss_gpu - loss_cpu) / fabs(loss_cpu);
	printf("%s %s loss: cpu %.9g gpu %.9g, relative %.3e (tolerance %.0e)\n",
	       dl <= tc->loss_rtol ? "ok:" : "FAIL:", tc->tag, loss_cpu, loss_gpu, dl, tc->loss_rtol);
	if (!(dl <= tc->loss_rtol))
		fails++;
	check(tc->tag, "logits row", row_cpu, row_gpu, (size_t)c.vocab, tc->rtol);
	for (int k = 0; k < m.nt; k++) {
		float *got = malloc(m.numel[k] * 4);
		dev_read(got, gr[k], m.numel[k]);
		/* a loss scale multiplies every gradient: compare unscaled */
		for (size_t i = 0; i < m.numel[k]; i++) {
			got[i] = (float)(got[i] / tc->scale);
			m.gcpu[k][i] = (float)(m.gcpu[k][i] / tc->scale);
		}
		char what[80];
		snprintf(what, sizeof(what), "d %s%s", m.name[k],
		         tc->tied && k == 0 ? " (embedding + tied head)" : "");
		check(tc->tag, what, m.gcpu[k], got, m.numel[k], tc->rtol);
		free(got);
		cudaFree(p[k]);
		cudaFree(gr[k]);
	}
	gpt2_cuda_free(g);
	free(row_cpu);
	free(row_gpu);
	free_model(&m);
}

int main(void)
{
	int n = gpt2_cuda_device_count();
	if (n < 0) {
		printf("FAIL: built without CUDA, yet registered\n");
		return 1;
	}
	if (n == 0) {
		printf("skipped: no GPU\n");
		return 77;
	}
	static const tcase cases[] = {
		/* tag                  prec            tied rec n passes scale rtol loss */
		{"f32 tied", GPT2_CUDA_F32, 1, 0, NB, 1, 1.0, 1e-5, 1e-6},
		{"f32 untied", GPT2_CUDA_F32, 0, 0, NB, 1, 1.0, 1e-5, 1e-6},
		{"f32 recompute", GPT2_CUDA_F32, 1, 1, NB, 1, 1.0, 1e-5, 1e-6},
		{"f32 partial batch", GPT2_CUDA_F32, 1, 0, NB - 1, 1, 1.0, 1e-5, 1e-6},
		{"f32 two passes", GPT2_CUDA_F32, 1, 1, NB, 2, 1.0, 1e-5, 1e-6},
		{"bf16 tied", GPT2_CUDA_BF16, 1, 0, NB, 1, 1.0, 5e-2, 1.5e-4},
		{"bf16 untied recompute", GPT2_CUDA_BF16, 0, 1, NB, 1, 1.0, 5e-2, 1.5e-4},
		{"f16 scale 1024", GPT2_CUDA_F16, 1, 0, NB, 1, 1024.0, 5e-3, 2e-5},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run(&cases[i]);
	if (fails) {
		printf("%d comparison(s) out of tolerance\n", fails);
		return 1;
	}
	printf("all comparisons within tolerance\n");
	return 0;
}
