/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/mlp.c: MLP forward/backward, loss and data (mlp.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "mlp.h"

/* ---- precision ------------------------------------------------------------ */

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Round to nearest even on the bits (the program is built from accel's
 * public headers only, so it has its own copy of the conversions). */
uint16_t mlp_to_half(float x, int prec)
{
	uint32_t u = f32_bits(x);
	if (prec == MLP_BF16) {
		if ((u & 0x7fffffffu) > 0x7f800000u)
			return (uint16_t)((u >> 16) | 0x40u);
		u += 0x7fffu + ((u >> 16) & 1u);
		return (uint16_t)(u >> 16);
	}
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u);
	if (a >= 0x477ff000u)                 /* 65520 and up: infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) {                /* f16 subnormal: multiples of 2^-24 */
		float q = bits_f32(a) * 16777216.0f;   /* exact: a power-of-two scale */
		return (uint16_t)(sign | (uint16_t)nearbyintf(q));
	}
	a += 0xfffu + ((a >> 13) & 1u);
	return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
}

float mlp_from_half(uint16_t h, int prec)
{
	if (prec == MLP_BF16)
		return bits_f32((uint32_t)h << 16);
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0)   /* zero or subnormal: m * 2^-24, exact in f32 */
		return bits_f32(f32_bits((float)m * 0x1p-24f) | sign);
	if (e == 0x1f)
		return bits_f32(sign | 0x7f800000u | (m << 13));
	return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

void mlp_round(float *x, size_t n, int prec)
{
	if (prec == MLP_F32)
		return;
	for (size_t i = 0; i < n; i++)
		x[i] = mlp_from_half(mlp_to_half(x[i], prec), prec);
}

void mlp_widen(float *dst, const uint16_t *src, size_t n, int prec)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = mlp_from_half(src[i], prec);
}

/* ---- shapes and work space ------------------------------------------------- */

int mlp_shape_init(mlp_shape *s, int inputs, int hidden, int n_hidden, int classes)
{
	if (inputs < 1 || classes < 2 || n_hidden < 0 || n_hidden >= MLP_MAX_LAYERS ||
	    (n_hidden > 0 && hidden < 1))
		return -1;
	memset(s, 0, sizeof(*s));
	s->n_layers = n_hidden + 1;
	s->dims[0] = inputs;
	for (int l = 1; l <= n_hidden; l++)
		s->dims[l] = hidden;
	s->dims[s->n_layers] = classes;
	return 0;
}

int mlp_max_dim(const mlp_shape *s)
{
	int m = 0;
	for (int l = 0; l <= s->n_layers; l++)
		m = s->dims[l] > m ? s->dims[l] : m;
	return m;
}

int mlp_work_init(mlp_work *w, const mlp_shape *s, int cap)
{
	memset(w, 0, sizeof(*w));
	w->cap = cap;
	for (int l = 1; l <= s->n_layers; l++)
		if (!(w->act[l] = malloc((size_t)cap * (size_t)s->dims[l] * sizeof(float))))
			goto fail;
	for (int i = 0; i < 2; i++)
		if (!(w->dact[i] = malloc((size_t)cap * (size_t)mlp_max_dim(s) * sizeof(float))))
			goto fail;
	return 0;
fail:
	mlp_work_free(w);
	return -1;
}

void mlp_work_free(mlp_work *w)
{
	for (int l = 1; l <= MLP_MAX_LAYERS; l++)
		free(w->act[l]);
	free(w->dact[0]);
	free(w->dact[1]);
	memset(w, 0, sizeof(*w));
}

void mlp_forward_layer(const mlp_shape *s, mlp_work *w, int l, const float *W, const float *b,
                       int n)
{
	int in = s->dims[l], out = s->dims[l + 1];
	float *y = w->act[l + 1];
	for (int i = 0; i < n; i++)
		memcpy(y + (size_t)i * out, b, (size_t)out * sizeof(float));
	/* y[n,out] += x[n,in] . W[out,in]^T */
	blas_sgemm(0, 1, n, out, in, 1.0f, w->act[l], in, W, in, 1.0f, y, out);
	if (l < s->n_layers - 1)
		for (size_t i = 0; i < (size_t)n * out; i++)
			y[i] = y[i] > 0.0f ? y[i] : 0.0f;
	/* after the ReLU, which commutes with rounding: one rounding of the
	 * f32 sum, as a 16-bit GEMM with a bias (and ReLU) epilogue stores it */
	mlp_round(y, (size_t)n * out, w->prec);
}

/* Loss of one row; writes softmax into p when p != NULL. */
static double row_loss(const float *z, int c, int64_t label, float *p, int *hit)
{
	float mx = z[0];
	int arg = 0;
	for (int j = 1; j < c; j++)
		if (z[j] > mx) {
			mx = z[j];
			arg = j;
		}
	double sum = 0;
	for (int j = 0; j < c; j++)
		sum += exp((double)z[j] - mx);
	if (p)
		for (int j = 0; j < c; j++)
			p[j] = (float)(exp((double)z[j] - mx) / sum);
	*hit = arg == label;
	return log(sum) - ((double)z[label] - mx);
}

double mlp_loss(const mlp_shape *s, mlp_work *w, const int64_t *labels, int n, double denom,
                int *ret_correct)
{
	int c = s->dims[s->n_layers], correct = 0, hit;
	const float *z = w->act[s->n_layers];
	float *g = w->dact[0];
	double total = 0;
	for (int i = 0; i < n; i++) {
		float *gi = g + (size_t)i * c;
		total += row_loss(z + (size_t)i * c, c, labels[i], gi, &hit);
		correct += hit;
		gi[labels[i]] -= 1.0f;
		for (int j = 0; j < c; j++)
			gi[j] = (float)(gi[j] / denom);
	}
	mlp_round(g, (size_t)n * c, w->prec);
	if (ret_correct)
		*ret_correct = correct;
	return total;
}

double mlp_eval_loss(const mlp_shape *s, const mlp_work *w, const int64_t *labels, int n,
                     int *ret_correct)
{
	int c = s->dims[s->n_layers], correct = 0, hit;
	double total = 0;
	for (int i = 0; i < n; i++) {
		total += row_loss(w->act[s->n_layers] + (size_t)i * c, c, labels[i], NULL, &hit);
		correct += hit;
	}
	if (ret_correct)
		*ret_correct = correct;
	return total;
}

void mlp_backward_layer(const mlp_shape *s, mlp_work *w, int l, const float *W, float *dW,
                        float *db, int n, int accumulate)
{
	int in = s->dims[l], out = s->dims[l + 1];
	/* dact[0] holds dY of this layer on entry: layers alternate buffers. */
	int cur = (s->n_layers - 1 - l) & 1;
	const float *dy = w->dact[cur];
	float *dx = w->dact[cur ^ 1];
	/* dW[out,in] (+)= dY[n,out]^T . X[n,in]: without `accumulate` the
	 * product overwrites dW (beta 0), so nobody has to zero it first. */
	blas_sgemm(1, 0, out, in, n, 1.0f, dy, out, w->act[l], in, accumulate ? 1.0f : 0.0f, dW,
	           in);
	if (!accumulate)
		memset(db, 0, (size_t)out * sizeof(*db));
	for (int i = 0; i < n; i++)
		for (int j = 0; j < out; j++)
			db[j] += dy[(size_t)i * out + j];
	if (l == 0)
		return;
	/* dX[n,in] = dY[n,out] . W[out,in], then through fc{l-1}'s ReLU: its
	 * output x is positive exactly where its input was. */
	blas_sgemm(0, 0, n, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
	mlp_round(dx, (size_t)n * in, w->prec);
	const float *x = w->act[l];
	for (size_t i = 0; i < (size_t)n * in; i++)
		if (!(x[i] > 0.0f))
			dx[i] = 0.0f;
}

/* ---- data ----------------------------------------------------------------- */

static uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

typedef struct rng {
	uint64_t s;
	int have;
	double spare;
} rng;

static double uniform01(rng *r)   /* (0, 1) */
{
	r->s = splitmix(r->s);
	return ((double)(r->s >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(rng *r)
{
	if (r->have) {
		r->have = 0;
		return r->spare;
	}
	double u = uniform01(r), v = uniform01(r);
	double m = sqrt(-2.0 * log(u));
	r->spare = m * sin(2.0 * M_PI * v);
	r->have = 1;
	return m * cos(2.0 * M_PI * v);
}

int mlp_data_make(mlp_data *d, int64_t first, int64_t n, int dim, int classes, int modes,
                  double sep, double noise, uint64_t seed)
{
	memset(d, 0, sizeof(*d));
	if (n < 1 || dim < 1 || classes < 2 || modes < 1 || first < 0)
		return -1;
	size_t nc = (size_t)classes * (size_t)modes;
	float *centres = malloc(nc * (size_t)dim * sizeof(float));
	d->x = malloc((size_t)n * (size_t)dim * sizeof(float));
	d->y = malloc((size_t)n * sizeof(int64_t));
	if (!centres || !d->x || !d->y) {
		free(centres);
		mlp_data_free(d);
		return -1;
	}
	d->n = n;
	d->dim = dim;
	d->classes = classes;
	double cstd = sep / sqrt((double)dim);
	for (size_t c = 0; c < nc; c++) {
		rng r = {.s = splitmix(seed ^ 0x636c757374657273ull) + c};
		for (int j = 0; j < dim; j++)
			centres[c * (size_t)dim + (size_t)j] = (float)(cstd * normal(&r));
	}
	for (int64_t i = 0; i < n; i++) {
		/* Each sample has its own stream, keyed by its global index. */
		rng r = {.s = splitmix(splitmix(seed) + (uint64_t)(first + i))};
		r.s = splitmix(r.s);
		int64_t label = (int64_t)(r.s % (uint64_t)classes);
		r.s = splitmix(r.s);
		size_t c = (size_t)label * (size_t)modes + (size_t)(r.s % (uint64_t)modes);
		float *x = d->x + (size_t)i * (size_t)dim;
		for (int j = 0; j < dim; j++)
			x[j] = centres[c * (size_t)dim + (size_t)j] + (float)(noise * normal(&r));
		d->y[i] = label;
	}
	free(centres);
	return 0;
}

void mlp_data_free(mlp_data *d)
{
	free(d->x);
	free(d->y);
	memset(d, 0, sizeof(*d));
}
