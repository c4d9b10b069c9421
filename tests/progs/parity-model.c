/* SPDX-License-Identifier: MIT */
/* tests/progs/parity-model.c: the model, data and training micro-step of
 * tests/progs/train-parity.c and tests/progs/zero-train.c, their options,
 * set-up and training loop, and the --compare of written parameters they
 * share with tests/progs/tied-train.c (parity-model.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parity-model.h"

const int dims[NL + 1] = {8, 16, 16, 4};

void input(long i, double *x)
{
	for (int j = 0; j < dims[0]; j++)
		x[j] = sin(0.37 * (double)i + 1.3 * j) + 0.25 * cos(0.11 * (double)i * (j + 1));
}

void target(long i, double *t)
{
	double x[DMAX];
	input(i, x);
	for (int o = 0; o < dims[NL]; o++) {
		double s = 0;
		for (int j = 0; j < dims[0]; j++)
			s += sin(0.5 * (o + 1) + j) * x[j];
		t[o] = tanh(s) + 0.1 * o;
	}
}

int bias_init(void *user, const char *name, uint64_t offset, uint64_t count, float *dst)
{
	const long *rank_shift = user;   /* NULL, or zero-train --rank-init: the rank's offset */
	if (strcmp(name, "fc1.bias"))
		return 7;
	for (uint64_t i = 0; i < count; i++) {
		if (rank_shift)
			dst[i] = 0.05f * (float)cos((double)(offset + i)) + 0.5f * (float)*rank_shift;
		else
			dst[i] = 0.05f * (float)cos((double)(offset + i));
	}
	return 0;
}

double pget(const model *m, const void *p, long i)
{
	if (m->dtype == ACCEL_DTYPE_F32)
		return ((const float *)p)[i];
	uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

void gadd(const model *m, void *g, long i, double v)
{
	if (m->dtype == ACCEL_DTYPE_F32) {
		((float *)g)[i] += (float)v;
		return;
	}
	/* bf16 += v, round to nearest even */
	uint16_t *h = g;
	uint32_t u = (uint32_t)h[i] << 16;
	float f;
	memcpy(&f, &u, 4);
	f += (float)v;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	h[i] = (uint16_t)(u >> 16);
}

FILE *g_trace;      /* --trace: this rank's backward windows */
long g_micro;       /* micro-steps run so far */

long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int fail(accel_ctx *ctx, const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", parity_prog, what, ctx ? accel_errmsg(ctx) : "no context");
	return 1;
}

/* One micro-batch: samples [first, first + n).  Returns the mean loss. */
int micro_step(model *m, long first, long n, const char *hooks, double *ret_loss)
{
	static double act[NL + 1][64][DMAX];
	double loss = 0;
	int partial = !strcmp(hooks, "partial"), use = strcmp(hooks, "none") != 0;
	int twice = !strcmp(hooks, "twice");

	if (n > 64)
		return fprintf(stderr, "%s: micro-batch %ld > 64\n", parity_prog, n), 2;
	for (long s = 0; s < n; s++)
		input(first + s, act[0][s]);
	for (int l = 0; l < NL; l++) {
		if (use && accel_unit_pre_forward(m->ctx, (uint32_t)l))
			return fail(m->ctx, "pre_forward");
		const void *W = accel_param_data(m->ctx, m->w[l]);
		const void *B = accel_param_data(m->ctx, m->b[l]);
		if (!W || !B)
			return fail(m->ctx, "accel_param_data returned NULL");
		for (long s = 0; s < n; s++)
			for (int o = 0; o < dims[l + 1]; o++) {
				double z = pget(m, B, o);
				for (int i = 0; i < dims[l]; i++)
					z += pget(m, W, (long)o * dims[l] + i) * act[l][s][i];
				act[l + 1][s][o] = l + 1 < NL ? tanh(z) : z;
			}
		if (use && accel_unit_post_forward(m->ctx, (uint32_t)l))
			return fail(m->ctx, "post_forward");
	}
	/* dL/dy for the mean loss, times the loss scale. */
	double scale = accel_loss_scale(m->ctx);
	static double d[64][DMAX], dprev[64][DMAX];
	for (long s = 0; s < n; s++) {
		double t[DMAX];
		target(first + s, t);
		for (int o = 0; o < dims[NL]; o++) {
			double e = act[NL][s][o] - t[o];
			loss += 0.5 * e * e / (double)n;
			d[s][o] = e / (double)n * scale;
		}
	}
	long long t_begin = now_ns(), t_last = 0;
	for (int l = NL - 1; l >= 0; l--) {
		if (l == 0)
			t_last = now_ns();
		if (use && accel_unit_pre_backward(m->ctx, (uint32_t)l))
			return fail(m->ctx, "pre_backward");
		const void *W = accel_param_data(m->ctx, m->w[l]);
		void *gW = accel_param_grad(m->ctx, m->w[l]);
		void *gB = accel_param_grad(m->ctx, m->b[l]);
		if (!W || !gW || !gB)
			return fail(m->ctx, "accel_param_grad returned NULL");
		for (int o = 0; o < dims[l + 1]; o++) {
			double gb = 0;
			for (long s = 0; s < n; s++)
				gb += d[s][o];
			gadd(m, gB, o, gb);
			for (int i = 0; i < dims[l]; i++) {
				double gw = 0;
				for (long s = 0; s < n; s++)
					gw += d[s][o] * act[l][s][i];
				gadd(m, gW, (long)o * dims[l] + i, gw);
			}
		}
		if (l > 0) {
			for (long s = 0; s < n; s++)
				for (int i = 0; i < dims[l]; i++) {
					double v = 0;
					for (int o = 0; o < dims[l + 1]; o++)
						v += pget(m, W, (long)o * dims[l] + i) * d[s][o];
					double a = act[l][s][i];
					dprev[s][i] = v * (1 - a * a);
				}
			memcpy(d, dprev, sizeof(d));
		}
		/* partial: the first unit (last in backward) never reports. */
		if (use && !(partial && l == 0)) {
			if (accel_unit_post_backward(m->ctx, (uint32_t)l))
				return fail(m->ctx, "post_backward");
			if (twice && l == NL - 1 && accel_unit_post_backward(m->ctx, (uint32_t)l))
				return fail(m->ctx, "post_backward");
		}
	}
	if (g_trace)
		fprintf(g_trace, "backward %ld %lld %lld %lld\n", g_micro, t_begin, t_last, now_ns());
	g_micro++;
	*ret_loss = loss;
	return 0;
}

/* Per parameter tensor: max |a - b| <= rtol * max |a| + atol.  Relative to
 * the tensor's scale rather than to each element, so elements that happen to
 * be near zero do not turn reassociation noise into a failure; rtol 0
 * demands identical values. */
typedef struct tstat {
	char name[128];
	double maxdiff, maxabs;
	long n;
} tstat;

static int tensor_check(const tstat *t, double rtol, double atol, double *worst)
{
	double rel = t->maxabs > 0 ? t->maxdiff / t->maxabs : t->maxdiff;
	if (rel > *worst)
		*worst = rel;
	if (t->maxdiff <= rtol * t->maxabs + atol)
		return 0;
	fprintf(stderr, "compare: %s (%ld values): max difference %.3e, max |value| %.3e, "
	        "relative %.3e > %.1e\n", t->name, t->n, t->maxdiff, t->maxabs, rel, rtol);
	return 1;
}

int compare(const char *a, const char *b, double rtol, double atol)
{
	FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
	char na[128], nb[128];
	unsigned long long ia, ib;
	double va, vb, worst = 0;
	long n = 0, bad = 0, tensors = 0;
	tstat cur = {{0}, 0, 0, 0};
	if (!fa || !fb)
		return fprintf(stderr, "compare: cannot open %s\n", fa ? b : a), 2;
	for (;;) {
		int ra = fscanf(fa, "%127s %llu %lf", na, &ia, &va);
		int rb = fscanf(fb, "%127s %llu %lf", nb, &ib, &vb);
		if (ra != 3 || rb != 3) {
			if (ra != rb)
				return fprintf(stderr, "compare: %s and %s differ in length\n", a, b), 3;
			break;
		}
		if (strcmp(na, nb) || ia != ib)
			return fprintf(stderr, "compare: line %ld: %s[%llu] vs %s[%llu]\n", n + 1, na, ia,
			               nb, ib), 3;
		if (strcmp(na, cur.name)) {
			if (cur.n) {
				bad += tensor_check(&cur, rtol, atol, &worst);
				tensors++;
			}
			memset(&cur, 0, sizeof(cur));
			snprintf(cur.name, sizeof(cur.name), "%s", na);
		}
		double diff = fabs(va - vb);
		if (!(diff == diff) || !(va == va))
			diff = INFINITY;  /* NaN anywhere is a failure */
		cur.maxdiff = fmax(cur.maxdiff, diff);
		cur.maxabs = fmax(cur.maxabs, fabs(va));
		cur.n++;
		n++;
	}
	if (cur.n) {
		bad += tensor_check(&cur, rtol, atol, &worst);
		tensors++;
	}
	fclose(fa);
	fclose(fb);
	if (!n)
		return fprintf(stderr, "compare: %s is empty\n", a), 3;
	printf("compare: %ld values in %ld tensors, %ld outside tolerance, max relative "
	       "difference %.3g\n", n, tensors, bad, worst);
	return bad ? 3 : 0;
}

int parity_option(int argc, char **argv, int *i, parity_opts *o)
{
	const char *a = argv[*i];
	int has_value = *i + 1 < argc;
	if (!strcmp(a, "--rank-init")) {
		o->rank_init = 1;
		return 1;
	}
	if (!has_value)
		return 0;
	if (!strcmp(a, "--steps"))
		o->steps = atol(argv[++*i]);
	else if (!strcmp(a, "--batch"))
		o->batch = atol(argv[++*i]);
	else if (!strcmp(a, "--hooks"))
		o->hooks = argv[++*i];
	else if (!strcmp(a, "--out"))
		o->out = argv[++*i];
	else if (!strcmp(a, "--out-ranks"))
		o->out_ranks = argv[++*i];
	else if (!strcmp(a, "--metrics"))
		o->metrics = argv[++*i];
	else if (!strcmp(a, "--dtype"))
		o->dtype = argv[++*i];
	else if (!strcmp(a, "--trace"))
		o->trace = argv[++*i];
	else
		return 0;
	return 1;
}

int parity_compare_main(int argc, char **argv, int i)
{
	double rtol = 1e-6, atol = 0;
	for (int j = i + 3; j + 1 < argc; j += 2) {
		if (!strcmp(argv[j], "--rtol"))
			rtol = atof(argv[j + 1]);
		else if (!strcmp(argv[j], "--atol"))
			atol = atof(argv[j + 1]);
	}
	return compare(argv[i + 1], argv[i + 2], rtol, atol);
}

int parity_ctx_new(long batch, long max_micro, accel_ctx **ret_ctx, parity_job *ret_job)
{
	accel_ctx *ctx = NULL;
	parity_job j = {.gas = 1};

	if (accel_ctx_new(NULL, &ctx)) {
		fail(ctx, "accel_ctx_new");
		accel_ctx_free(ctx);
		return 1;
	}
	accel_config_int(ctx, "gradient_accumulation_steps", &j.gas);
	j.world = accel_world_size(ctx);
	j.rank = accel_rank(ctx);
	if (batch % (j.world * j.gas) || (max_micro > 0 && batch / (j.world * j.gas) > max_micro)) {
		if (max_micro > 0)
			fprintf(stderr, "%s: batch %ld is not a multiple of world %ld x "
			        "accumulation %lld (or the micro-batch exceeds %ld)\n", parity_prog,
			        batch, j.world, (long long)j.gas, max_micro);
		else
			fprintf(stderr, "%s: batch %ld is not a multiple of world %ld x "
			        "accumulation %lld\n", parity_prog, batch, j.world, (long long)j.gas);
		accel_ctx_free(ctx);
		return 2;
	}
	j.micro = batch / (j.world * j.gas);
	*ret_ctx = ctx;
	*ret_job = j;
	return 0;
}

int parity_open_trace(const char *trace, long rank)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s.%ld", trace, rank);
	if (!(g_trace = fopen(path, "w"))) {
		perror(path);
		return 1;
	}
	return 0;
}

int parity_add_params(model *m, long *rank_shift)
{
	/* accel_init_data reads it at accel_prepare */
	static float fc2_bias[16];
	for (int i = 0; i < 16; i++)
		fc2_bias[i] = 0.01f * (float)(i - 8);
	for (int l = 0; l < NL; l++) {
		char unit[16], wn[32], bn[32];
		int64_t wshape[2] = {dims[l + 1], dims[l]}, bshape[1] = {dims[l + 1]};
		accel_init wi = accel_init_normal(0.0, 1.0 / sqrt((double)dims[l]));
		accel_init bi = l == 0 ? accel_init_callback(bias_init, rank_shift)
		              : l == 1 ? accel_init_data(fc2_bias)
		                       : accel_init_uniform(-0.1, 0.1);
		snprintf(unit, sizeof(unit), "fc%d", l + 1);
		snprintf(wn, sizeof(wn), "fc%d.weight", l + 1);
		snprintf(bn, sizeof(bn), "fc%d.bias", l + 1);
		if (accel_model_add_param(m->ctx, unit, wn, m->dtype, 2, wshape, &wi, &m->w[l]) ||
		    accel_model_add_param(m->ctx, unit, bn, m->dtype, 1, bshape, &bi, &m->b[l]))
			return fail(m->ctx, "accel_model_add_param");
	}
	return 0;
}

int parity_begin(model *m, const parity_opts *o, parity_job *job, long *rank_shift)
{
	int r;
	if ((r = parity_ctx_new(o->batch, 0, &m->ctx, job)))
		return r;
	m->dtype = accel_dtype_parse(o->dtype);
	*rank_shift = o->rank_init ? job->rank : 0;
	if (o->trace && parity_open_trace(o->trace, job->rank))
		return 1;
	return parity_add_params(m, rank_shift);
}

int parity_prepare_train(model *m, const parity_opts *o, const parity_job *job)
{
	if (accel_prepare(m->ctx))
		return fail(m->ctx, "accel_prepare");
	if (o->metrics && accel_metrics_open(m->ctx, o->metrics))
		return fail(m->ctx, "accel_metrics_open");
	return parity_train(m, job, o->steps, o->batch, o->hooks);
}

int parity_end(model *m, int r)
{
	if (!r && accel_wait_for_everyone(m->ctx))
		r = fail(m->ctx, "accel_wait_for_everyone");
	m->ctx = accel_ctx_free(m->ctx);
	if (g_trace && fclose(g_trace) && !r)
		r = (perror("--trace"), 1);
	return r;
}

int parity_train(model *m, const parity_job *job, long steps, long batch, const char *hooks)
{
	int64_t gas = job->gas;
	int r;

	for (long s = 0; s < steps; s++) {
		double loss_sum = 0, loss;
		for (long g = 0; g < gas; g++) {
			/* Global batch s: micro-batch g, this rank's share. */
			long first = (s * batch + g * (batch / gas) + job->rank * job->micro) %
			             (N_SAMPLES - 64);
			if ((r = micro_step(m, first, job->micro, hooks, &loss)))
				return r;
			loss_sum += loss;
			if (accel_step(m->ctx))
				return fail(m->ctx, "accel_step");
		}
		accel_step_report rep = {.struct_size = sizeof(rep)};
		if (accel_last_step(m->ctx, &rep))
			return fail(m->ctx, "accel_last_step");
		const char *keys[] = {"loss", "lr", "grad_norm", "clip_coef"};
		double vals[] = {loss_sum / (double)gas, rep.lr, rep.grad_norm, rep.clip_coef};
		if (accel_log_scalars(m->ctx, accel_get_step(m->ctx), 4, keys, vals))
			return fail(m->ctx, "accel_log_scalars");
	}
	return 0;
}
