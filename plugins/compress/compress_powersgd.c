/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress_powersgd.c: PowerSGD (Vogels et al. 2019) as
 * PyTorch's powerSGD_hook does it, with its names and defaults: each 2-D
 * parameter run M (rows x cols, its shape from the model) is approximated
 * by P Q^T of rank r: P = M Q, all-reduce P, orthonormalize P (Gram-
 * Schmidt), Q = M^T P, all-reduce Q (issued from the first callback, and
 * waited for there), M ~ P Q^T (in the second).  Q starts from the same
 * random matrix on every rank (seeded from `seed`) and, with warm_start,
 * from the last step's Q after that.  1-D runs, runs below min_numel and
 * matrices that would not shrink by min_compression_rate go uncompressed,
 * packed into the P all-reduce.  With error feedback the residual is what
 * PyTorch keeps: this rank's (gradient + old residual) minus the result. */
#include <math.h>
#include <string.h>

#include "compress.h"

int cz_psgd_plan(cz_state *s, cz_bucket *cb)
{
	const accel_model_v1 *m = s->host->model(s->h);
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		cz_seg *g = &cb->segs[i];
		const accel_param_info_v1 *p =
		        m && g->param < m->n_params ? ACCEL_MODEL_PARAM(m, g->param) : NULL;
		g->dense = 1;
		if (p && p->ndim >= 2 && g->poff == 0 && g->numel == p->numel && p->shape[0] > 0 &&
		    (int64_t)g->numel >= s->min_numel) {
			uint64_t rows = (uint64_t)p->shape[0], cols = p->numel / rows;
			uint64_t r = (uint64_t)s->rank;
			r = r < rows ? r : rows;
			r = r < cols ? r : cols;
			/* PyTorch's _should_compress */
			if ((double)(rows + cols) * (double)r * s->min_compression_rate <
			    (double)(rows * cols)) {
				g->dense = 0;
				g->rows = (uint32_t)rows;
				g->cols = (uint32_t)cols;
				g->rank = (uint32_t)r;
				g->p_off = cb->p_numel;
				g->q_off = cb->q_numel;
				cb->p_numel += rows * r;
				cb->q_numel += cols * r;
			}
		}
		if (g->dense)
			cb->n_dense += g->numel;
	}
	return ACCEL_OK;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Standard normal values from (seed, bucket, step): the same on every rank. */
static void randn(float *q, uint64_t n, uint64_t seed, uint32_t bucket, uint64_t step)
{
	uint64_t st = seed * UINT64_C(0x9e3779b97f4a7c15) ^ ((uint64_t)bucket << 32) ^ step;
	for (uint64_t i = 0; i < n; i += 2) {
		double u1 = ((splitmix(&st) >> 11) + 1.0) * 0x1.0p-53;
		double u2 = (splitmix(&st) >> 11) * 0x1.0p-53;
		double rad = sqrt(-2.0 * log(u1));
		q[i] = (float)(rad * cos(2 * M_PI * u2));
		if (i + 1 < n)
			q[i + 1] = (float)(rad * sin(2 * M_PI * u2));
	}
}

/* Gram-Schmidt on the columns of a (rows x r, row-major), in place: what
 * PyTorch's _orthogonalize_gram_schmidt computes in exact arithmetic, with
 * each column's projections removed twice ("twice is enough", Giraud et
 * al.): when r exceeds the rank of the matrix, a column is left with
 * rounding noise only, and one pass would leave that noise far from
 * orthogonal to the others, so P P^T would not be a projection.  A zero
 * column stays zero instead of turning into NaN when epsilon is 0. */
static void orthogonalize(float *a, uint32_t rows, uint32_t r, double eps)
{
	for (uint32_t i = 0; i < r; i++) {
		for (int pass = 0; pass < 2; pass++)
			for (uint32_t c = 0; c < i; c++) {
				double dot = 0;
				for (uint32_t j = 0; j < rows; j++)
					dot += (double)a[(uint64_t)j * r + c] * a[(uint64_t)j * r + i];
				for (uint32_t j = 0; j < rows; j++)
					a[(uint64_t)j * r + i] -= (float)(dot * a[(uint64_t)j * r + c]);
			}
		double nn = 0;
		for (uint32_t j = 0; j < rows; j++)
			nn += (double)a[(uint64_t)j * r + i] * a[(uint64_t)j * r + i];
		double d = sqrt(nn) + eps;
		if (d > 0)
			for (uint32_t j = 0; j < rows; j++)
				a[(uint64_t)j * r + i] = (float)(a[(uint64_t)j * r + i] / d);
	}
}

static float *q_in(cz_bucket *cb)
{
	return cb->pending ? cb->q[!cb->cur] : cb->q[cb->cur];
}

static int second(void *arg)
{
	cz_bucket *cb = arg;
	cz_state *s = cb->s;
	float *q = cb->q[!cb->cur], *out = cb->work;
	const float *sent = cb->send;  /* [dense | P], summed */
	float f = (float)cb->factor;
	if (cb->factor != 1.0)
		for (uint64_t i = 0; i < cb->q_numel; i++)
			q[i] *= f;
	memset(out, 0, cb->numel * sizeof(float));
	uint64_t d = 0;
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		const cz_seg *g = &cb->segs[i];
		if (g->dense) {
			for (uint64_t j = 0; j < g->numel; j++)
				out[g->off + j] = sent[d + j] * f;
			d += g->numel;
			continue;
		}
		const float *P = sent + cb->n_dense + g->p_off, *Q = q + g->q_off;
		float *M = out + g->off;
		for (uint32_t a = 0; a < g->rows; a++)
			for (uint32_t b = 0; b < g->cols; b++) {
				float acc = 0;
				for (uint32_t k = 0; k < g->rank; k++)
					acc += P[(uint64_t)a * g->rank + k] * Q[(uint64_t)b * g->rank + k];
				M[(uint64_t)a * g->cols + b] = acc;
			}
	}
	if (s->error_feedback) {
		float *e = cz_res_out(cb);
		for (uint64_t i = 0; i < cb->numel; i++)
			e[i] = cb->orig[i] - out[i];
	}
	cb->pending = 1;
	cb->have_q = 1;
	return cz_store(cb, out);
}

static int first(void *arg)
{
	cz_bucket *cb = arg;
	cz_state *s = cb->s;
	int r;
	float *P = (float *)cb->send + cb->n_dense, *q = cb->q[!cb->cur];
	const float *M = cb->orig;
	/* a bucket of uncompressed runs only (1-D, small): PyTorch still
	 * keeps its error feedback, so it comes through here too */
	if (!cb->q_numel)
		return second(cb);
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		const cz_seg *g = &cb->segs[i];
		if (g->dense)
			continue;
		float *Pg = P + g->p_off, *Qg = q + g->q_off;
		const float *Mg = M + g->off;
		orthogonalize(Pg, g->rows, g->rank, s->ortho_eps);
		/* Q = M^T P */
		memset(Qg, 0, (uint64_t)g->cols * g->rank * sizeof(float));
		for (uint32_t a = 0; a < g->rows; a++)
			for (uint32_t b = 0; b < g->cols; b++) {
				float m = Mg[(uint64_t)a * g->cols + b];
				for (uint32_t k = 0; k < g->rank; k++)
					Qg[(uint64_t)b * g->rank + k] += m * Pg[(uint64_t)a * g->rank + k];
			}
	}
	accel_view qv = {sizeof(qv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, q, cb->q_numel};
	accel_req *req = NULL;
	if ((r = cz_allreduce(s, cb->b.group, &qv, ACCEL_RED_SUM, &req)))
		return r;
	s->cur_sent += cb->q_numel * 4;
	if ((r = s->host->req_on_done(s->h, req, second, cb))) {
		s->host->wait(s->h, req);
		return r;
	}
	return s->host->wait(s->h, req);
}

int cz_psgd_reduce(cz_state *s, cz_bucket *cb, accel_req **ret_req)
{
	int r;
	uint64_t n = cb->numel, sn = cb->n_dense + cb->p_numel;
	if (cb->send_bytes < sn * 4 && (r = cz_buf(s, &cb->send, &cb->send_bytes, sn * 4)))
		return r;
	float *M = cb->orig;
	if ((r = cz_load(cb, M)))
		return r;
	if (s->error_feedback) {
		const float *e = cz_res_in(cb);
		for (uint64_t i = 0; i < n; i++)
			M[i] += e[i];
	}
	/* the Q this step starts from */
	float *qn = cb->q[!cb->cur];
	if (s->warm_start && (cb->have_q || cb->pending)) {
		const float *qi = q_in(cb);
		if (qi != qn)
			memcpy(qn, qi, cb->q_numel * sizeof(float));
	} else {
		randn(qn, cb->q_numel, s->seed, cb->id, s->warm_start ? 0 : s->step);
	}
	float *sent = cb->send;
	uint64_t d = 0;
	for (uint32_t i = 0; i < cb->n_segs; i++) {
		const cz_seg *g = &cb->segs[i];
		if (g->dense) {
			memcpy(sent + d, M + g->off, g->numel * sizeof(float));
			d += g->numel;
			continue;
		}
		/* P = M Q */
		float *Pg = sent + cb->n_dense + g->p_off;
		const float *Qg = qn + g->q_off, *Mg = M + g->off;
		for (uint32_t a = 0; a < g->rows; a++)
			for (uint32_t k = 0; k < g->rank; k++) {
				float acc = 0;
				for (uint32_t b = 0; b < g->cols; b++)
					acc += Mg[(uint64_t)a * g->cols + b] * Qg[(uint64_t)b * g->rank + k];
				Pg[(uint64_t)a * g->rank + k] = acc;
			}
	}
	accel_view sv = {sizeof(sv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, sent, sn};
	accel_req *req = NULL;
	if ((r = cz_allreduce(s, cb->b.group, &sv, ACCEL_RED_SUM, &req)))
		return r;
	s->cur_sent += sn * 4;
	if (!ret_req) {
		if ((r = s->host->wait(s->h, req)))
			return r;
		return first(cb);
	}
	if ((r = s->host->req_on_done(s->h, req, first, cb))) {
		s->host->wait(s->h, req);
		return r;
	}
	*ret_req = req;
	return ACCEL_OK;
}
