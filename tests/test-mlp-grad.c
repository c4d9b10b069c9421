/* SPDX-License-Identifier: MIT */
/* tests/test-mlp-grad.c: the math of examples/train_mlp (mlp.c): gradients
 * against central finite differences, the loss on known inputs, the
 * data-parallel identity the example relies on (the mean of N per-slice
 * mean-loss gradients equals the gradient of the mean over the whole batch),
 * the data set's determinism, and the 16-bit precision mode (mlp.h,
 * "precision"): the example's own f32 <-> bf16/f16 conversions against the
 * reference of tests/half-ref.h, and a bf16/f16 pass that rounds exactly
 * the activations and activation gradients a 16-bit program holds. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "mlp.h"
#include "half-ref.h"

typedef struct model {
	mlp_shape s;
	float *W[MLP_MAX_LAYERS], *b[MLP_MAX_LAYERS];
	float *dW[MLP_MAX_LAYERS], *db[MLP_MAX_LAYERS];
} model;

static float urand(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((*st >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static size_t wsize(const model *m, int l)
{
	return (size_t)m->s.dims[l] * (size_t)m->s.dims[l + 1];
}

static void model_init(model *m, int inputs, int hidden, int n_hidden, int classes,
                       uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	ck_assert_int_eq(mlp_shape_init(&m->s, inputs, hidden, n_hidden, classes), 0);
	for (int l = 0; l < m->s.n_layers; l++) {
		int out = m->s.dims[l + 1];
		m->W[l] = malloc(wsize(m, l) * sizeof(float));
		m->b[l] = malloc((size_t)out * sizeof(float));
		m->dW[l] = calloc(wsize(m, l), sizeof(float));
		m->db[l] = calloc((size_t)out, sizeof(float));
		float k = 1.0f / sqrtf((float)m->s.dims[l]);
		for (size_t i = 0; i < wsize(m, l); i++)
			m->W[l][i] = k * urand(&seed);
		for (int i = 0; i < out; i++)
			m->b[l][i] = k * urand(&seed);
	}
}

static void model_zero_grad(model *m)
{
	for (int l = 0; l < m->s.n_layers; l++) {
		memset(m->dW[l], 0, wsize(m, l) * sizeof(float));
		memset(m->db[l], 0, (size_t)m->s.dims[l + 1] * sizeof(float));
	}
}

static void model_free(model *m)
{
	for (int l = 0; l < m->s.n_layers; l++) {
		free(m->W[l]);
		free(m->b[l]);
		free(m->dW[l]);
		free(m->db[l]);
	}
}

/* Mean loss over n samples; with grad, accumulates the gradient of that
 * mean (denominator `denom`) into dW/db. */
static double run_acc(model *m, const float *x, const int64_t *y, int n, int grad, double denom,
                      int accumulate)
{
	mlp_work w;
	ck_assert_int_eq(mlp_work_init(&w, &m->s, n), 0);
	w.act[0] = (float *)x;
	for (int l = 0; l < m->s.n_layers; l++)
		mlp_forward_layer(&m->s, &w, l, m->W[l], m->b[l], n);
	double loss;
	if (grad) {
		loss = mlp_loss(&m->s, &w, y, n, denom, NULL);
		for (int l = m->s.n_layers - 1; l >= 0; l--)
			mlp_backward_layer(&m->s, &w, l, m->W[l], m->dW[l], m->db[l], n, accumulate);
	} else {
		loss = mlp_eval_loss(&m->s, &w, y, n, NULL);
	}
	mlp_work_free(&w);
	return loss / n;
}

static double run(model *m, const float *x, const int64_t *y, int n, int grad, double denom)
{
	return run_acc(m, x, y, n, grad, denom, 1);
}

static void gradcheck(int inputs, int hidden, int n_hidden, int classes, int n, uint64_t seed)
{
	model m;
	model_init(&m, inputs, hidden, n_hidden, classes, seed);
	float *x = malloc((size_t)n * inputs * sizeof(float));
	int64_t *y = malloc((size_t)n * sizeof(int64_t));
	for (int i = 0; i < n * inputs; i++)
		x[i] = 2.0f * urand(&seed);
	for (int i = 0; i < n; i++) {
		urand(&seed);
		y[i] = (int64_t)((seed >> 20) % (uint64_t)classes);
	}
	run(&m, x, y, n, 1, n);

	/* Central differences in float: eps large enough that the loss's float
	 * rounding (~1e-7) is small against eps * grad, small enough that the
	 * quadratic term and ReLU kinks rarely matter; a kink crossing makes a
	 * single coordinate wrong, so allow a handful of outliers. */
	const float eps = 1e-3f;
	int checked = 0, bad = 0;
	double worst = 0;
	for (int l = 0; l < m.s.n_layers; l++) {
		for (int which = 0; which < 2; which++) {
			float *p = which ? m.b[l] : m.W[l];
			float *g = which ? m.db[l] : m.dW[l];
			size_t cnt = which ? (size_t)m.s.dims[l + 1] : wsize(&m, l);
			for (size_t i = 0; i < cnt; i++) {
				float keep = p[i];
				p[i] = keep + eps;
				double lp = run(&m, x, y, n, 0, n);
				p[i] = keep - eps;
				double lm = run(&m, x, y, n, 0, n);
				p[i] = keep;
				double fd = (lp - lm) / (2.0 * eps);
				double err = fabs(fd - g[i]) / (fabs(fd) + fabs(g[i]) + 1e-3);
				worst = err > worst ? err : worst;
				if (err > 2e-2)
					bad++;
				checked++;
			}
		}
	}
	ck_assert_msg(bad <= checked / 100, "%d of %d gradients off by > 2%% (worst %g)", bad,
	              checked, worst);
	free(x);
	free(y);
	model_free(&m);
}

/* accumulate 0 (accel_set_grad_overwrite mode) overwrites whatever the
 * gradient buffers hold with exactly what accumulate 1 adds to zeros; a
 * second pass with accumulate 1 then adds to it. */
START_TEST(overwrite_equals_zero_then_add)
{
	model a, b;
	uint64_t seed = 5;
	model_init(&a, 6, 8, 2, 4, 21);
	model_init(&b, 6, 8, 2, 4, 21);
	float x[5 * 6];
	int64_t y[5] = {0, 1, 2, 3, 1};
	for (int i = 0; i < 5 * 6; i++)
		x[i] = urand(&seed);
	for (int l = 0; l < b.s.n_layers; l++) {   /* stale values in b */
		for (size_t i = 0; i < wsize(&b, l); i++)
			b.dW[l][i] = 123.0f + (float)i;
		for (int i = 0; i < b.s.dims[l + 1]; i++)
			b.db[l][i] = -7.0f;
	}
	for (int pass = 0; pass < 2; pass++) {
		run_acc(&a, x, y, 5, 1, 5, 1);
		run_acc(&b, x, y, 5, 1, 5, pass);
		for (int l = 0; l < a.s.n_layers; l++) {
			ck_assert(!memcmp(a.dW[l], b.dW[l], wsize(&a, l) * sizeof(float)));
			ck_assert(!memcmp(a.db[l], b.db[l], (size_t)a.s.dims[l + 1] * sizeof(float)));
		}
	}
	model_free(&a);
	model_free(&b);
}
END_TEST

START_TEST(gradcheck_linear)
{
	gradcheck(6, 0, 0, 4, 5, 11);
}
END_TEST

START_TEST(gradcheck_one_hidden)
{
	gradcheck(7, 9, 1, 3, 6, 12);
}
END_TEST

START_TEST(gradcheck_three_hidden)
{
	gradcheck(5, 8, 3, 4, 7, 13);
}
END_TEST

/* Zero weights and biases: logits 0, loss log(C), gradient of the bias of
 * the output layer = mean(softmax - onehot) = 1/C - fraction of each label. */
START_TEST(loss_known_values)
{
	model m;
	model_init(&m, 3, 4, 1, 5, 1);
	for (int l = 0; l < m.s.n_layers; l++) {
		memset(m.W[l], 0, wsize(&m, l) * sizeof(float));
		memset(m.b[l], 0, (size_t)m.s.dims[l + 1] * sizeof(float));
	}
	float x[4 * 3] = {1, 2, 3, -1, 0, 2, 5, 5, 5, 0, 0, 1};
	int64_t y[4] = {0, 0, 3, 4};
	double loss = run(&m, x, y, 4, 1, 4);
	ck_assert_double_eq_tol(loss, log(5.0), 1e-6);
	const float *db = m.db[1];
	ck_assert_float_eq_tol(db[0], 0.2f - 0.5f, 1e-6f);
	ck_assert_float_eq_tol(db[1], 0.2f, 1e-6f);
	ck_assert_float_eq_tol(db[3], 0.2f - 0.25f, 1e-6f);
	ck_assert_float_eq_tol(db[4], 0.2f - 0.25f, 1e-6f);
	/* hidden ReLU outputs are all 0, so no weight gradient reaches fc0 */
	for (size_t i = 0; i < wsize(&m, 0); i++)
		ck_assert_float_eq(m.dW[0][i], 0.0f);

	/* forward of one layer: y = x W^T + b */
	model one;
	model_init(&one, 2, 0, 0, 2, 3);
	float W[4] = {1, 2, 3, 4}, b[2] = {0.5f, -1};
	memcpy(one.W[0], W, sizeof(W));
	memcpy(one.b[0], b, sizeof(b));
	mlp_work w;
	ck_assert_int_eq(mlp_work_init(&w, &one.s, 1), 0);
	float xi[2] = {1, -1};
	w.act[0] = xi;
	mlp_forward_layer(&one.s, &w, 0, one.W[0], one.b[0], 1);
	ck_assert_float_eq(w.act[1][0], 1 - 2 + 0.5f);
	ck_assert_float_eq(w.act[1][1], 3 - 4 - 1);   /* last layer: no ReLU */
	int64_t yi = 0;
	int correct = -1;
	double l1 = mlp_eval_loss(&one.s, &w, &yi, 1, &correct);
	ck_assert_int_eq(correct, 1);
	ck_assert_double_eq_tol(l1, log(1 + exp(-2.0 - (-0.5))), 1e-6);
	mlp_work_free(&w);
	model_free(&one);
	model_free(&m);
}
END_TEST

/* What DDP computes: N ranks each take a contiguous slice of B/N samples,
 * backward the mean over their slice, and the gradients are averaged.  That
 * must equal the gradient of the mean over all B (and gradient accumulation
 * over the slices, summed then divided by N, is the same computation). */
START_TEST(data_parallel_identity)
{
	const int B = 12;
	model full, part;
	model_init(&full, 10, 16, 2, 4, 77);
	model_init(&part, 10, 16, 2, 4, 77);
	uint64_t seed = 5;
	float x[12 * 10];
	int64_t y[12];
	for (int i = 0; i < B * 10; i++)
		x[i] = urand(&seed);
	for (int i = 0; i < B; i++)
		y[i] = i % 4;
	double lfull = run(&full, x, y, B, 1, B);
	for (int ranks = 2; ranks <= 4; ranks += 1) {
		if (B % ranks)
			continue;
		int b = B / ranks;
		model_zero_grad(&part);
		double lsum = 0;
		for (int r = 0; r < ranks; r++)    /* grads accumulate: sum of slice means */
			lsum += run(&part, x + (size_t)r * b * 10, y + r * b, b, 1, b);
		ck_assert_double_eq_tol(lsum / ranks, lfull, 1e-6);
		for (int l = 0; l < full.s.n_layers; l++) {
			for (size_t i = 0; i < wsize(&full, l); i++)
				ck_assert_float_eq_tol(part.dW[l][i] / ranks, full.dW[l][i], 1e-6f);
			for (int i = 0; i < full.s.dims[l + 1]; i++)
				ck_assert_float_eq_tol(part.db[l][i] / ranks, full.db[l][i], 1e-6f);
		}
	}
	model_free(&full);
	model_free(&part);
}
END_TEST

START_TEST(data_deterministic)
{
	mlp_data a, b, c;
	ck_assert_int_eq(mlp_data_make(&a, 0, 20, 16, 5, 2, 4.0, 1.0, 9), 0);
	ck_assert_int_eq(mlp_data_make(&b, 7, 5, 16, 5, 2, 4.0, 1.0, 9), 0);
	ck_assert_int_eq(mlp_data_make(&c, 0, 20, 16, 5, 2, 4.0, 1.0, 10), 0);
	/* sample i does not depend on how many are made or where we start */
	ck_assert_mem_eq(b.x, a.x + 7 * 16, 5 * 16 * sizeof(float));
	ck_assert_mem_eq(b.y, a.y + 7, 5 * sizeof(int64_t));
	/* another seed, other data; labels in range and not all equal */
	ck_assert_int_ne(memcmp(a.x, c.x, 16 * sizeof(float)), 0);
	int seen[5] = {0};
	for (int i = 0; i < 20; i++) {
		ck_assert_int_ge(a.y[i], 0);
		ck_assert_int_lt(a.y[i], 5);
		seen[a.y[i]]++;
	}
	int kinds = 0;
	for (int k = 0; k < 5; k++)
		kinds += seen[k] > 0;
	ck_assert_int_ge(kinds, 3);
	mlp_data empty;
	ck_assert_int_eq(mlp_data_make(&empty, 0, 0, 16, 5, 2, 4.0, 1.0, 10), -1);
	mlp_data_free(&a);
	mlp_data_free(&b);
	mlp_data_free(&c);
}
END_TEST

/* mlp_to_half on every rounding boundary of tests/half-ref.h, and
 * mlp_from_half on every pattern (the example has its own copies of the
 * conversions: it is built from accel's public headers only). */
START_TEST(half_conversions_match_reference)
{
	const half_fmt *f = _i ? &half_fmt_f16 : &half_fmt_bf16;
	int prec = _i ? MLP_F16 : MLP_BF16;
	size_t n = 0;
	half_probe *p = half_ref_probes(f, (size_t)1 << 18, &n);
	ck_assert_msg(p != NULL, "%s: building the probes failed (see stderr)", f->name);
	uint16_t *out = malloc(n * sizeof(*out));
	ck_assert(out != NULL);
	for (size_t i = 0; i < n; i++)
		out[i] = mlp_to_half(p[i].x, prec);
	char msg[256];
	size_t bad = half_ref_compare(f, p, out, n, msg, sizeof(msg));
	ck_assert_msg(bad == 0, "mlp_to_half: %zu of %zu wrong; first: %s", bad, n, msg);
	for (uint32_t h = 0; h < 65536; h++) {
		double want = half_ref_decode(f, (uint16_t)h);
		float got = mlp_from_half((uint16_t)h, prec);
		if (isnan(want))
			ck_assert_msg(isnan(got), "%s 0x%04x: %a, want NaN", f->name, h, (double)got);
		else
			ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
			              "%s 0x%04x: %a, want %a", f->name, h, (double)got, want);
	}
	free(out);
	free(p);
}
END_TEST

static int all_representable(const float *x, size_t n, int prec)
{
	for (size_t i = 0; i < n; i++)
		if (mlp_from_half(mlp_to_half(x[i], prec), prec) != x[i])
			return 0;
	return 1;
}

/* prec bf16/f16: each layer's output is the f32 layer's output rounded
 * once (not rounded before the bias or the ReLU), and the logits'
 * gradient and every activation gradient are 16-bit values; the weight
 * gradients stay f32 (they are not all 16-bit values). */
START_TEST(half_pass_rounds_what_a_16bit_program_holds)
{
	int prec = _i ? MLP_F16 : MLP_BF16, n = 17;
	model m;
	uint64_t seed = 99;
	model_init(&m, 12, 20, 2, 5, seed);
	for (int l = 0; l < m.s.n_layers; l++) {   /* 16-bit weights */
		mlp_round(m.W[l], wsize(&m, l), prec);
		mlp_round(m.b[l], (size_t)m.s.dims[l + 1], prec);
	}
	float *x = malloc((size_t)n * 12 * sizeof(float));
	int64_t y[17];
	for (int i = 0; i < n * 12; i++)
		x[i] = 2.0f * urand(&seed);
	mlp_round(x, (size_t)n * 12, prec);
	for (int i = 0; i < n; i++)
		y[i] = i % 5;
	mlp_work w32, w16;
	ck_assert_int_eq(mlp_work_init(&w32, &m.s, n), 0);
	ck_assert_int_eq(mlp_work_init(&w16, &m.s, n), 0);
	w16.prec = prec;
	w32.act[0] = w16.act[0] = x;
	for (int l = 0; l < m.s.n_layers; l++) {
		mlp_forward_layer(&m.s, &w16, l, m.W[l], m.b[l], n);
		/* the f32 layer on the 16-bit layer's input (act[0] is x in both) */
		if (l > 0)
			memcpy(w32.act[l], w16.act[l], (size_t)n * (size_t)m.s.dims[l] * sizeof(float));
		mlp_forward_layer(&m.s, &w32, l, m.W[l], m.b[l], n);
		size_t cnt = (size_t)n * (size_t)m.s.dims[l + 1];
		mlp_round(w32.act[l + 1], cnt, prec);
		ck_assert_msg(!memcmp(w32.act[l + 1], w16.act[l + 1], cnt * sizeof(float)),
		              "layer %d: the 16-bit output is not the f32 output rounded once", l);
	}
	mlp_loss(&m.s, &w16, y, n, n / 1024.0, NULL);   /* a scaled loss, as fp16 uses */
	ck_assert(all_representable(w16.dact[0], (size_t)n * 5, prec));
	int f32_grads = 0;
	for (int l = m.s.n_layers - 1; l >= 0; l--) {
		mlp_backward_layer(&m.s, &w16, l, m.W[l], m.dW[l], m.db[l], n, 0);
		if (l > 0) {
			int cur = (m.s.n_layers - 1 - l) & 1;
			ck_assert_msg(all_representable(w16.dact[cur ^ 1], (size_t)n * m.s.dims[l], prec),
			              "layer %d: the input gradient holds values finer than 16 bits", l);
		}
		f32_grads += !all_representable(m.dW[l], wsize(&m, l), prec);
	}
	ck_assert_msg(f32_grads > 0, "every weight gradient is a 16-bit value: not accumulated in f32?");
	mlp_work_free(&w32);
	mlp_work_free(&w16);
	free(x);
	model_free(&m);
}
END_TEST

static Suite *mlp_grad_suite(void)
{
	Suite *s = suite_create("mlp-grad");
	TCase *tc = tcase_create("math");
	tcase_add_test(tc, overwrite_equals_zero_then_add);
	tcase_add_test(tc, gradcheck_linear);
	tcase_add_test(tc, gradcheck_one_hidden);
	tcase_add_test(tc, gradcheck_three_hidden);
	tcase_add_test(tc, loss_known_values);
	tcase_add_test(tc, data_parallel_identity);
	tcase_add_test(tc, data_deterministic);
	tcase_add_loop_test(tc, half_conversions_match_reference, 0, 2);
	tcase_add_loop_test(tc, half_pass_rounds_what_a_16bit_program_holds, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	blas_single_thread();
	SRunner *sr = srunner_create(mlp_grad_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
