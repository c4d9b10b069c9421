/* SPDX-License-Identifier: MIT */
/* tests/test-gpt2-grad.c: the math of examples/gpt2 (gpt2_model.c compiled
 * in f64): every element of every parameter's gradient against central
 * finite differences of the loss, on tiny configurations, with the LM head
 * tied to the token embedding and untied, and with the block forward
 * re-run before each block's backward (activation recompute, as the
 * program does it).  Also the f32 build against the f64 one (same loss
 * and gradients to float rounding), and with 16-bit activations (bf16,
 * f16: what is stored is 16-bit, the result within its rounding). */
#ifndef GPT2_F64
#define GPT2_F64   /* meson passes it too: gpt2_model.c beside this file is the f64 build */
#endif
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2.h"
#undef GPT2_F64
#include "gpt2.h"
#include "mlp.h"

typedef struct model {
	gpt2_config c;
	int tied;
	int n;                    /* tensors: wte, wpe, L * 12, lnf.w, lnf.b [, head] */
	double *p[3 + 12 * 8 + 2], *g[3 + 12 * 8 + 2];
	size_t numel[3 + 12 * 8 + 2];
} model;

static double urand(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return (double)((*st >> 40) & 0xffffff) / 16777216.0 * 2.0 - 1.0;
}

static int add(model *m, size_t numel, double scale, double base, uint64_t *seed)
{
	int k = m->n++;
	m->numel[k] = numel;
	m->p[k] = malloc(numel * sizeof(double));
	m->g[k] = calloc(numel, sizeof(double));
	for (size_t i = 0; i < numel; i++)
		m->p[k][i] = base + scale * urand(seed);
	return k;
}

/* Layout: 0 wte, 1 wpe, 2 + 12 l + k block tensors, then lnf.w, lnf.b,
 * head (untied). */
static void model_init(model *m, const gpt2_config *c, int tied)
{
	uint64_t seed = 12345;
	memset(m, 0, sizeof(*m));
	m->c = *c;
	m->tied = tied;
	add(m, (size_t)c->vocab * c->dim, 0.5, 0, &seed);
	add(m, (size_t)c->seq * c->dim, 0.5, 0, &seed);
	for (int l = 0; l < c->layers; l++)
		for (int k = 0; k < GPT2_BLOCK_TENSORS; k++) {
			int64_t sh[2] = {1, 1};
			int nd = gpt2_block_shape(c, k, sh);
			int is_ln_w = k == GPT2_LN1_W || k == GPT2_LN2_W;
			add(m, (size_t)sh[0] * (nd == 2 ? (size_t)sh[1] : 1), nd == 2 ? 0.4 : 0.2,
			    is_ln_w ? 1.0 : 0, &seed);
		}
	add(m, (size_t)c->dim, 0.2, 1.0, &seed);
	add(m, (size_t)c->dim, 0.2, 0, &seed);
	if (!tied)
		add(m, (size_t)c->vocab * c->dim, 0.5, 0, &seed);
}

static void model_free(model *m)
{
	for (int k = 0; k < m->n; k++) {
		free(m->p[k]);
		free(m->g[k]);
	}
}

/* Mean loss over n sequences; with grad, backward too (gradients added to
 * m->g; recompute re-runs each block's forward before its backward). */
static double run(model *m, gpt2d_work *w, const int32_t *tok, const int32_t *tgt, int n,
                  int grad, int recompute)
{
	int L = m->c.layers, hk = 2 + 12 * L;
	const double *head = m->tied ? m->p[0] : m->p[hk + 2];
	gpt2d_embed_forward(w, tok, m->p[0], m->p[1], n);
	for (int l = 0; l < L; l++)
		gpt2d_block_forward(w, l, (const double *const *)&m->p[2 + 12 * l], n);
	gpt2d_head_forward(w, m->p[hk], m->p[hk + 1], head, n);
	double denom = (double)n * m->c.seq;
	double loss = gpt2d_loss(w, tgt, n, grad ? 1.0 / denom : 0) / denom;
	if (!grad)
		return loss;
	gpt2d_head_backward(w, m->p[hk], head, m->g[hk], m->g[hk + 1],
	                    m->tied ? m->g[0] : m->g[hk + 2], n);
	for (int l = L - 1; l >= 0; l--) {
		if (recompute)
			gpt2d_block_forward(w, l, (const double *const *)&m->p[2 + 12 * l], n);
		gpt2d_block_backward(w, l, (const double *const *)&m->p[2 + 12 * l], &m->g[2 + 12 * l],
		                     n);
	}
	gpt2d_embed_backward(w, m->g[0], m->g[1], n);
	return loss;
}

typedef struct gc_case {
	const char *what;
	gpt2_config c;
	int B, tied, recompute;
} gc_case;

static const gc_case gc_cases[] = {
	{"tied, 2 layers", {.layers = 2, .heads = 2, .dim = 8, .seq = 5, .vocab = 11}, 2, 1, 0},
	{"untied, 1 layer, 1 head", {.layers = 1, .heads = 1, .dim = 6, .seq = 4, .vocab = 7}, 2, 0, 0},
	{"tied, 3 layers, recompute", {.layers = 3, .heads = 4, .dim = 8, .seq = 6, .vocab = 9}, 1, 1,
	 1},
};

START_TEST(gradcheck_every_parameter)
{
	const gc_case *tc = &gc_cases[_i];
	model m;
	gpt2d_work w;
	model_init(&m, &tc->c, tc->tied);
	ck_assert_int_eq(gpt2d_work_init(&w, &tc->c, tc->B, tc->recompute), 0);
	int NT = tc->B * tc->c.seq;
	int32_t *tok = malloc((size_t)NT * sizeof(int32_t)), *tgt = malloc((size_t)NT * sizeof(int32_t));
	uint64_t s = 99;
	for (int i = 0; i < NT; i++) {
		tok[i] = (int32_t)((urand(&s) + 1) * 0.5 * tc->c.vocab) % tc->c.vocab;
		tgt[i] = (int32_t)((urand(&s) + 1) * 0.5 * tc->c.vocab) % tc->c.vocab;
	}
	run(&m, &w, tok, tgt, tc->B, 1, tc->recompute);
	/* |analytic - numeric| / max(|analytic| + |numeric|, 1e-4) over all
	 * elements; observed worst 3.6e-7 (eps 1e-5, f64) */
	double worst = 0, eps = 1e-5;
	size_t checked = 0;
	for (int k = 0; k < m.n; k++)
		for (size_t i = 0; i < m.numel[k]; i++) {
			double keep = m.p[k][i];
			m.p[k][i] = keep + eps;
			double lp = run(&m, &w, tok, tgt, tc->B, 0, 0);
			m.p[k][i] = keep - eps;
			double lm = run(&m, &w, tok, tgt, tc->B, 0, 0);
			m.p[k][i] = keep;
			double num = (lp - lm) / (2 * eps), ana = m.g[k][i];
			double rel = fabs(ana - num) / fmax(fabs(ana) + fabs(num), 1e-4);
			if (rel > worst)
				worst = rel;
			ck_assert_msg(rel < 1e-6, "%s: tensor %d element %zu: analytic %.10g, numeric %.10g",
			              tc->what, k, i, ana, num);
			checked++;
		}
	printf("gpt2-grad %s: %zu elements, worst relative error %.3g\n", tc->what, checked, worst);
	/* the gradient is not trivially zero anywhere it should not be */
	double gsum = 0;
	for (int k = 0; k < m.n; k++)
		for (size_t i = 0; i < m.numel[k]; i++)
			gsum += fabs(m.g[k][i]);
	ck_assert(gsum > 1e-3);
	free(tok);
	free(tgt);
	gpt2d_work_free(&w);
	model_free(&m);
}
END_TEST

/* Values of x[0..n) that are not values of prec (mlp_round moves them). */
static size_t not_16bit(const float *x, size_t n, int prec)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		float r = x[i];
		mlp_round(&r, 1, prec);
		bad += r != x[i];
	}
	return bad;
}

/* The float build against the f64 one: f32 activations (float rounding
 * only), and a 16-bit program's (gpt2_work.prec: every GEMM operand
 * rounded to bf16 / f16) within that type's rounding.  Bounds are 2-3x
 * the observed worst. */
static const struct f32_case {
	const char *what;
	int prec;
	double loss_rtol, grad_tol;
} f32_cases[] = {
	/* observed loss 2.7e-8 relative, gradients 5.8e-7 of each tensor's max */
	{"f32", GPT2_ACT_F32, 1e-5, 1.5e-6},
	/* observed loss 5.6e-4 relative, gradients 8.4e-3 */
	{"bf16", GPT2_ACT_BF16, 1.5e-3, 2e-2},
	/* observed loss 5.7e-5 relative, gradients 1.2e-3 */
	{"f16", GPT2_ACT_F16, 1.5e-4, 3e-3},
};

START_TEST(f32_matches_f64)
{
	const struct f32_case *tc = &f32_cases[_i];
	gpt2_config c = {.layers = 2, .heads = 2, .dim = 16, .seq = 8, .vocab = 13};
	model m;
	gpt2d_work wd;
	gpt2_work wf;
	model_init(&m, &c, 1);
	ck_assert_int_eq(gpt2d_work_init(&wd, &c, 2, 0), 0);
	ck_assert_int_eq(gpt2_work_init(&wf, &c, 2, 1), 0);
	wf.prec = tc->prec;
	int NT = 2 * c.seq;
	int32_t tok[16], tgt[16];
	for (int i = 0; i < NT; i++) {
		tok[i] = (i * 7 + 3) % c.vocab;
		tgt[i] = (i * 5 + 1) % c.vocab;
	}
	double ld = run(&m, &wd, tok, tgt, 2, 1, 0);
	float *pf[128], *gf[128];
	for (int k = 0; k < m.n; k++) {
		pf[k] = malloc(m.numel[k] * sizeof(float));
		gf[k] = calloc(m.numel[k], sizeof(float));
		for (size_t i = 0; i < m.numel[k]; i++)
			pf[k][i] = (float)m.p[k][i];
	}
	int hk = 2 + 12 * c.layers;
	gpt2_embed_forward(&wf, tok, pf[0], pf[1], 2);
	for (int l = 0; l < c.layers; l++)
		gpt2_block_forward(&wf, l, (const float *const *)&pf[2 + 12 * l], 2);
	gpt2_head_forward(&wf, pf[hk], pf[hk + 1], pf[0], 2);
	size_t BT = (size_t)NT, C = (size_t)c.dim;
	/* the logits before the loss turns them into their gradient */
	size_t bad_logits = tc->prec ? not_16bit(wf.logits, BT * (size_t)c.vocab, tc->prec) : 0;
	double lf = gpt2_loss(&wf, tgt, 2, 1.0 / NT) / NT;
	gpt2_head_backward(&wf, pf[hk], pf[0], gf[hk], gf[hk + 1], gf[0], 2);
	for (int l = c.layers - 1; l >= 0; l--) {
		gpt2_block_forward(&wf, l, (const float *const *)&pf[2 + 12 * l], 2);   /* recompute */
		gpt2_block_backward(&wf, l, (const float *const *)&pf[2 + 12 * l], &gf[2 + 12 * l], 2);
	}
	gpt2_embed_backward(&wf, gf[0], gf[1], 2);
	if (tc->prec != GPT2_ACT_F32) {
		/* what a 16-bit program stores is 16-bit; the residual is f32 */
		const gpt2_block_act *a = &wf.blk[0];
		const struct { const char *name; const float *x; size_t n; } st[] = {
			{"ln_1 output", a->ln1, BT * C}, {"qkv", a->qkv, BT * 3 * C},
			{"attention probabilities", a->att, 2 * (size_t)c.heads * c.seq * c.seq},
			{"attention output", a->atty, BT * C}, {"ln_2 output", a->ln2, BT * C},
			{"c_fc output", a->fc, BT * 4 * C}, {"GELU output", a->gelu, BT * 4 * C},
			{"ln_f output", wf.lnf, BT * C}, {"dlogits", wf.logits, BT * (size_t)c.vocab},
			{"dqkv", wf.dbuf + BT * 4 * C, BT * 3 * C},
		};
		ck_assert_msg(bad_logits == 0, "%s: %zu logits are not %s values", tc->what,
		              bad_logits, tc->what);
		for (size_t k = 0; k < sizeof(st) / sizeof(st[0]); k++)
			ck_assert_msg(not_16bit(st[k].x, st[k].n, tc->prec) == 0,
			              "%s: %zu of %zu values of the %s are not %s values", tc->what,
			              not_16bit(st[k].x, st[k].n, tc->prec), st[k].n, st[k].name,
			              tc->what);
		ck_assert_msg(not_16bit(a->mid, BT * C, tc->prec) > BT * C / 2,
		              "%s: the residual stream was rounded", tc->what);
	} else {
		ck_assert_msg(not_16bit(wf.blk[0].qkv, BT * 3 * C, GPT2_ACT_BF16) > BT * 3 * C / 2,
		              "f32: qkv looks rounded to bf16");
	}
	/* worst |f32 - f64| / (max |g| of the tensor) */
	double worst = 0;
	for (int k = 0; k < m.n; k++) {
		double gmax = 1e-12;
		for (size_t i = 0; i < m.numel[k]; i++)
			gmax = fmax(gmax, fabs(m.g[k][i]));
		for (size_t i = 0; i < m.numel[k]; i++)
			worst = fmax(worst, fabs(gf[k][i] - m.g[k][i]) / gmax);
		free(pf[k]);
		free(gf[k]);
	}
	printf("gpt2-grad %s activations vs f64: loss %.9g vs %.9g (relative %.3g), worst "
	       "gradient difference %.3g\n", tc->what, lf, ld, fabs(lf - ld) / fabs(ld), worst);
	ck_assert_msg(fabs(lf - ld) < tc->loss_rtol * fabs(ld), "%s: loss %.9g vs f64 %.9g",
	              tc->what, lf, ld);
	ck_assert_msg(worst < tc->grad_tol, "%s gradients differ from f64 by %.3g (bound %.3g)",
	              tc->what, worst, tc->grad_tol);
	gpt2_work_free(&wf);
	gpt2d_work_free(&wd);
	model_free(&m);
}
END_TEST

/* Configurations, parameter counts and FLOPs of the named models. */
START_TEST(named_configs)
{
	gpt2_config c;
	char err[256];
	ck_assert_int_eq(gpt2_config_named(&c, "gpt2"), 0);
	ck_assert_int_eq(gpt2_config_check(&c, err, sizeof(err)), 0);
	/* 124,439,808 trainable parameters with the tied head (GPT-2 small,
	 * as Hugging Face counts it) */
	ck_assert_int_eq(gpt2_n_params(&c, 1), 124439808);
	ck_assert_int_eq(gpt2_n_params(&c, 0), 124439808 + 50257 * 768);
	ck_assert_int_eq(gpt2_config_named(&c, "tiny"), 0);
	ck_assert_int_eq(gpt2_config_check(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(gpt2_config_named(&c, "huge"), -1);
	c.heads = 3;
	ck_assert_int_eq(gpt2_config_check(&c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "--heads 3"), "%s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gpt2-grad");
	TCase *tc = tcase_create("math");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, gradcheck_every_parameter, 0,
	                    (int)(sizeof(gc_cases) / sizeof(gc_cases[0])));
	tcase_add_loop_test(tc, f32_matches_f64, 0, (int)(sizeof(f32_cases) / sizeof(f32_cases[0])));
	tcase_add_test(tc, named_configs);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
