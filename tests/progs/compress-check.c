/* SPDX-License-Identifier: MIT */
/* tests/progs/compress-check.c: one rank of tests/test-compress.sh.  It
 * drives the compress plugin's buckets with scripted gradients through
 * the real core and ddp (ACCEL_CONFIG selects both) and checks, every
 * step, the invariants of docs/compress.md exactly:
 *
 *   compress-check topk|powersgd|none OUTDIR STEPS [options]
 *     --first N        the first step's index in the gradient script (resume)
 *     --save-at N DIR  accel_save_state(DIR) after N steps
 *     --load DIR       accel_load_state(DIR) before the first step
 *     --record FILE    write every step's reduced gradient to FILE.<rank>
 *     --compare FILE   ... and require it to equal FILE.<rank> bit for bit
 *     --zero-after-load  every residual must read zero after --load
 *     --no-exact       powersgd: skip the exact-mean check (warm start over
 *                      many steps: see PCOMP_TOL; --compare still checks)
 *
 * The model: w0 [16 x 12], b0 [12] (unit u0), w1 [12 x 6], b1 [6] (u1).
 * Parameters are set to 0 before each step under SGD with lr 1 and no
 * decay, so after it each holds minus the reduced gradient, bit for bit.
 *
 * topk: with x = gradient + old residual (read through the plugin's
 *   compress.stats extension), the positions sent are those where the new
 *   residual is 0: exactly k of them (per bucket or per tensor), none
 *   smaller in |x| than one left out, and sent + new residual == x bit for
 *   bit; the reduced gradient equals the mean over ranks of what each sent
 *   (all-gathered here), bit for bit; bytes the comm layer counted
 *   (accel_comm_stats) <= ratio x dense + 4 bytes of index per value.
 * powersgd: with w0's gradient of rank <= 2 on every rank and
 *   matrix_approximation_rank 2, the reduced gradient is the exact mean
 *   (to PCOMP_TOL); uncompressed parameters are the mean; the new residual
 *   is x - result (PyTorch's error feedback), bit for bit.
 * A skipped step (tests/fixtures/skip) must leave every residual and the
 * parameters as they were.
 *
 * Writes OUTDIR/check-<rank>: "0 <summary>" or "1 <what failed>". */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "accel-compress.h"

#define NP 4
/* powersgd, rank >= the matrix's rank: exact in exact arithmetic.  In f32,
 * with a fresh random Q each step (warm_start false), observed worst
 * relative error 4.2e-7 (rank 3, 4 steps), 1.55e-4 (rank 2, 12 steps: the
 * residuals grow, and rounding with them); with
 * warm start the last step's Q can be nearly blind to a direction of the
 * new gradient, and rounding noise of the residuals (which error feedback
 * makes a random walk of local - mean) then fills that direction: 8.1e-5
 * after 6 compressed steps, 1.3e-3 after 8.  Bound about 3x the 12-step
 * cold figure; longer warm runs use --no-exact. */
#define PCOMP_TOL 5e-4

static const char *g_out;
static int g_rank, g_world;
static char g_msg[1024];
static const char *names[NP] = {"w0", "b0", "w1", "b1"};
static const int64_t shapes[NP][2] = {{16, 12}, {12, 0}, {12, 6}, {6, 0}};
static uint64_t numel[NP];
static uint32_t pidx[NP];

/* Written to a file of this process's own and renamed into place: when
 * accel_ctx_new fails every rank reports as rank 0 (its rank is not
 * known), and the launcher stops the others as soon as one exits, so a
 * check-0 opened in place could be left empty by a rank stopped between
 * opening and writing it. */
static void report(int st, const char *msg)
{
	char path[1024], part[1100];
	snprintf(path, sizeof(path), "%s/check-%d", g_out, g_rank);
	snprintf(part, sizeof(part), "%s.%ld.part", path, (long)getpid());
	FILE *f = fopen(part, "w");
	if (!f)
		return;
	int bad = fprintf(f, "%d %s\n", st, msg) < 0;
	if (fclose(f) || bad || rename(part, path))
		remove(part);
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A value in (-1, 1) from (rank, step, param, i). */
static float rnd(int rank, long step, int p, uint64_t i)
{
	uint64_t h = mix(((uint64_t)rank << 48) ^ ((uint64_t)step << 24) ^ ((uint64_t)p << 20) ^ i ^
	                 UINT64_C(0x9e3779b97f4a7c15));
	return (float)((double)(h >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* The gradient script.  lowrank: w0 = u_r a^T + v_r b^T (rank <= 2 on
 * every rank, and so is the mean). */
static void script(int rank, long step, int p, float *g, int lowrank)
{
	if (lowrank && p == 0) {
		int64_t R = shapes[0][0], C = shapes[0][1];
		for (int64_t a = 0; a < R; a++)
			for (int64_t b = 0; b < C; b++)
				g[a * C + b] = rnd(rank, step, 10, (uint64_t)a) * rnd(0, step, 11, (uint64_t)b) +
				               rnd(rank, step, 12, (uint64_t)a) * rnd(0, step, 13, (uint64_t)b);
		return;
	}
	for (uint64_t i = 0; i < numel[p]; i++)
		g[i] = rnd(rank, step, p, i);
}

static int fail(const char *fmt, ...) ACCEL_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_msg, sizeof(g_msg), fmt, ap);
	va_end(ap);
	return 1;
}

static int cmp_mag_desc(const void *a, const void *b)
{
	float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
	return (x < y) - (x > y);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: compress-check topk|powersgd|none OUTDIR STEPS [options]\n");
		return 2;
	}
	const char *mode = argv[1];
	g_out = argv[2];
	long steps = atol(argv[3]), first = 0, save_at = -1;
	const char *save_dir = NULL, *load_dir = NULL, *record = NULL, *compare = NULL;
	int zero_after_load = 0, no_exact = 0;
	for (int i = 4; i < argc; i++) {
		if (!strcmp(argv[i], "--first") && i + 1 < argc)
			first = atol(argv[++i]);
		else if (!strcmp(argv[i], "--save-at") && i + 2 < argc) {
			save_at = atol(argv[++i]);
			save_dir = argv[++i];
		} else if (!strcmp(argv[i], "--load") && i + 1 < argc)
			load_dir = argv[++i];
		else if (!strcmp(argv[i], "--record") && i + 1 < argc)
			record = argv[++i];
		else if (!strcmp(argv[i], "--compare") && i + 1 < argc)
			compare = argv[++i];
		else if (!strcmp(argv[i], "--zero-after-load"))
			zero_after_load = 1;
		else if (!strcmp(argv[i], "--no-exact"))
			no_exact = 1;
		else {
			fprintf(stderr, "compress-check: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	int topk = !strcmp(mode, "topk"), psgd = !strcmp(mode, "powersgd");
	/* fp16/bf16: the result is the mean to the half type's precision:
	 * one rounding of each (divided) value and of the sum; values in
	 * (-1, 1).  Observed worst 4.9e-4 (fp16) and 3.9e-3 (bf16) relative to
	 * the mean's largest element; bounds about 3x */
	double cast_tol = !strcmp(mode, "fp16") ? 1.5e-3 : !strcmp(mode, "bf16") ? 1.2e-2 : 0;
	accel_ctx *ctx = NULL;
	int st = accel_ctx_new(NULL, &ctx), rc = 1;
	float *x[NP] = {0}, *eold[NP] = {0}, *enew[NP] = {0}, *res[NP] = {0}, *pb[NP] = {0};
	float *all = NULL;
	FILE *rec = NULL, *cmpf = NULL;
	if (st) {
		fprintf(stderr, "accel_ctx_new: %s\n", ctx ? accel_errmsg(ctx) : accel_status_str(st));
		g_rank = 0;
		report(1, ctx ? accel_errmsg(ctx) : accel_status_str(st));
		accel_ctx_free(ctx);
		return 3;
	}
	g_rank = accel_rank(ctx);
	g_world = accel_world_size(ctx);
	uint64_t total = 0;
	for (int p = 0; p < NP; p++) {
		int nd = shapes[p][1] ? 2 : 1;
		numel[p] = (uint64_t)shapes[p][0] * (uint64_t)(nd == 2 ? shapes[p][1] : 1);
		total += numel[p];
		accel_init z = accel_init_const(0);
		if ((st = accel_model_add_param(ctx, p < 2 ? "u0" : "u1", names[p], ACCEL_DTYPE_F32,
		                                (uint32_t)nd, shapes[p], &z, &pidx[p]))) {
			rc = fail("accel_model_add_param: %s", accel_errmsg(ctx));
			goto out;
		}
		x[p] = calloc(numel[p], sizeof(float));
		eold[p] = calloc(numel[p], sizeof(float));
		enew[p] = calloc(numel[p], sizeof(float));
		res[p] = calloc(numel[p], sizeof(float));
		pb[p] = calloc(numel[p], sizeof(float));
	}
	all = calloc(total * (size_t)g_world, sizeof(float));
	if ((st = accel_prepare(ctx))) {
		rc = fail("accel_prepare: %s", accel_errmsg(ctx));
		goto out;
	}
	const accel_compress_ext_v1 *ext = accel_plugin_extension(ctx, "compress",
	                                                          ACCEL_COMPRESS_STATS, 1);
	if (!ext && (topk || psgd)) {
		rc = fail("no compress.stats extension: %s", accel_errmsg(ctx));
		goto out;
	}
	accel_clear_error(ctx);
	double ratio = 0.01;
	int64_t min_numel = 0, start = 0;
	const char *gran = "bucket";
	accel_config_double(ctx, "compress.ratio", &ratio);
	accel_config_int(ctx, "compress.min_numel", &min_numel);
	accel_config_string(ctx, "compress.granularity", &gran);
	if (psgd)
		accel_config_int(ctx, "compress.start_powerSGD_iter", &start);
	else
		accel_config_int(ctx, "compress.start_iter", &start);
	int per_tensor = !strcmp(gran, "tensor");
	/* Under ddp the parameters are the f32 masters, so setting them to 0
	 * makes the result exact; sharded strategies keep masters of their
	 * own, and the result is read as the difference (inexact checks only) */
	const char *strategy = "ddp";
	accel_config_string(ctx, "strategy", &strategy);
	int exact = !strcmp(strategy, "ddp");
	if ((topk || psgd) && !exact) {
		rc = fail("the exact checks need strategy ddp (this is %s): run mode none, fp16 or "
		          "bf16", strategy);
		goto out;
	}
	if (load_dir) {
		if ((st = accel_load_state(ctx, load_dir))) {
			rc = fail("accel_load_state(%s): %s", load_dir, accel_errmsg(ctx));
			goto out;
		}
		for (int p = 0; zero_after_load && p < NP; p++) {
			if ((st = ext->residual(ext->self, pidx[p], res[p], numel[p]))) {
				rc = fail("residual: %s", accel_errmsg(ctx));
				goto out;
			}
			for (uint64_t i = 0; i < numel[p]; i++)
				if (res[p][i] != 0) {
					rc = fail("after loading %s: %s[%llu] residual %g, expected 0", load_dir,
					          names[p], (unsigned long long)i, res[p][i]);
					goto out;
				}
		}
	}
	char path[1100];
	if (record) {
		snprintf(path, sizeof(path), "%s.%d", record, g_rank);
		rec = fopen(path, "wb");
	}
	if (compare) {
		snprintf(path, sizeof(path), "%s.%d", compare, g_rank);
		if (!(cmpf = fopen(path, "rb"))) {
			rc = fail("cannot open %s", path);
			goto out;
		}
	}
	double worst_psgd = 0;
	uint64_t checked = 0, compressed_steps = 0, skipped = 0, max_bytes = 0;
	for (long t = 0; t < steps; t++) {
		long it = first + t;
		accel_compress_stats_v1 cs = {.struct_size = sizeof(cs)};
		for (int p = 0; p < NP; p++) {
			script(g_rank, it, p, x[p], psgd);
			if (ext && (st = ext->residual(ext->self, pidx[p], eold[p], numel[p]))) {
				rc = fail("residual: %s", accel_errmsg(ctx));
				goto out;
			}
		}
		/* the reductions start in post_backward: count from here */
		uint64_t b0 = 0, b1 = 0;
		accel_comm_stats(ctx, ACCEL_COLL_ALL, &b0, NULL);
		/* forward reads the parameters (and, under ddp, sets them to 0);
		 * backward writes the scripted gradients */
		for (uint32_t u = 0; u < 2; u++) {
			if ((st = accel_unit_pre_forward(ctx, u)))
				goto api_fail;
			for (int p = 2 * (int)u; p < 2 * (int)u + 2; p++) {
				float *w = accel_param_data(ctx, pidx[p]);
				if (exact)
					memset(w, 0, numel[p] * sizeof(float));
				memcpy(pb[p], w, numel[p] * sizeof(float));
			}
			if ((st = accel_unit_post_forward(ctx, u)))
				goto api_fail;
		}
		for (int u = 1; u >= 0; u--) {
			if ((st = accel_unit_pre_backward(ctx, (uint32_t)u)))
				goto api_fail;
			for (int p = 2 * u; p < 2 * u + 2; p++)
				memcpy(accel_param_grad(ctx, pidx[p]), x[p], numel[p] * sizeof(float));
			if ((st = accel_unit_post_backward(ctx, (uint32_t)u)))
				goto api_fail;
		}
		if ((st = accel_step(ctx)))
			goto api_fail;
		accel_comm_stats(ctx, ACCEL_COLL_ALL, &b1, NULL);
		accel_step_report sr = {.struct_size = sizeof(sr)};
		accel_last_step(ctx, &sr);
		if (ext && ext->stats(ext->self, &cs)) {
			rc = fail("stats: %s", accel_errmsg(ctx));
			goto out;
		}
		if (b1 - b0 > max_bytes)
			max_bytes = b1 - b0;
		/* R = before - after (= -after under ddp, exactly); the script's x
		 * becomes x + old residual below */
		float *R = all;  /* first `total` floats: this rank's result */
		uint64_t o = 0;
		if ((st = accel_set_grad_enabled(ctx, 0)))
			goto api_fail;
		for (uint32_t u = 0; u < 2; u++) {
			if ((st = accel_unit_pre_forward(ctx, u)))
				goto api_fail;
			for (int p = 2 * (int)u; p < 2 * (int)u + 2; p++) {
				const float *w = accel_param_data(ctx, pidx[p]);
				for (uint64_t i = 0; i < numel[p]; i++)
					R[o + i] = exact ? -w[i] : pb[p][i] - w[i];
				o += numel[p];
			}
			if ((st = accel_unit_post_forward(ctx, u)))
				goto api_fail;
		}
		if ((st = accel_set_grad_enabled(ctx, 1)))
			goto api_fail;
		for (int p = 0; p < NP; p++)
			if (ext && (st = ext->residual(ext->self, pidx[p], enew[p], numel[p]))) {
				rc = fail("residual: %s", accel_errmsg(ctx));
				goto out;
			}
		if (rec && (save_at < 0 || t + 1 > save_at))
			fwrite(R, sizeof(float), total, rec);
		if (cmpf) {
			float *want = malloc(total * sizeof(float));
			if (!want || fread(want, sizeof(float), total, cmpf) != total) {
				free(want);
				rc = fail("step %ld: the recorded run has no such step", it);
				goto out;
			}
			int same = !memcmp(want, R, total * sizeof(float));
			uint64_t at = 0;
			while (!same && at < total && !memcmp(&want[at], &R[at], sizeof(float)))
				at++;
			float wa = same ? 0 : want[at];
			free(want);
			if (!same) {
				rc = fail("step %ld: the resumed run's reduced gradient differs from the "
				          "uninterrupted run's at element %llu (%.9g vs %.9g)", it,
				          (unsigned long long)at, R[at], wa);
				goto out;
			}
		}
		if (save_at >= 0 && t + 1 == save_at && (st = accel_save_state(ctx, save_dir))) {
			rc = fail("accel_save_state(%s): %s", save_dir, accel_errmsg(ctx));
			goto out;
		}
		if (sr.skipped) {
			skipped++;
			for (int p = 0; p < NP; p++)
				if (memcmp(eold[p], enew[p], numel[p] * sizeof(float))) {
					rc = fail("step %ld was skipped but %s's residual changed", it, names[p]);
					goto out;
				}
			for (uint64_t i = 0; i < total; i++)
				if (R[i] != 0) {
					rc = fail("step %ld was skipped but parameters moved", it);
					goto out;
				}
			continue;
		}
		if (cast_tol > 0) {
			float *gath = malloc(total * (size_t)g_world * sizeof(float));
			float *gsc = malloc(total * sizeof(float));
			o = 0;
			for (int p = 0; p < NP; p++) {
				memcpy(gsc + o, x[p], numel[p] * sizeof(float));
				o += numel[p];
			}
			st = accel_allgather(ctx, gsc, gath, total, ACCEL_DTYPE_F32);
			double scale = 0, err = 0;
			for (uint64_t i = 0; !st && i < total; i++) {
				double m = 0;
				for (int q = 0; q < g_world; q++)
					m += gath[(uint64_t)q * total + i];
				m /= g_world;
				scale = fmax(scale, fabs(m));
				err = fmax(err, fabs(m - R[i]));
			}
			free(gath);
			free(gsc);
			if (st || err > cast_tol * scale) {
				rc = st ? fail("allgather: %s", accel_errmsg(ctx))
				        : fail("step %ld: %s: max error %.3g relative to the mean's max %.3g "
				               "(bound %g)", it, mode, err, scale, cast_tol);
				goto out;
			}
			if (err / scale > worst_psgd)
				worst_psgd = err / scale;
		}
		int comp = cs.last_compressed > 0;
		compressed_steps += comp;
		if ((topk || psgd) && comp != (it >= start)) {
			rc = fail("step %ld: compressed %d, but the warm-up is %lld steps", it, comp,
			          (long long)start);
			goto out;
		}
		if (!comp || !(topk || psgd))
			continue;
		/* the first step after a load adds a residual the extension cannot
		 * show before the bucket came (docs/compress.md): --compare checks it */
		if (load_dir && t == 0 && !zero_after_load)
			continue;
		for (int p = 0; p < NP; p++)
			for (uint64_t i = 0; i < numel[p]; i++)
				x[p][i] += eold[p][i];
		if (topk) {
			/* which positions were sent, and what each rank sent */
			float *sent = all + total;  /* scratch after R: total floats */
			float *gath = malloc(total * (size_t)g_world * sizeof(float));
			float *cand = malloc(total * sizeof(float));
			uint64_t nsel = 0, ncand = 0, k_all = 0;
			float min_sel = INFINITY, max_un = 0;
			o = 0;
			(void)sent;
			float *mine = malloc(total * sizeof(float));
			for (int p = 0; p < NP; p++) {
				uint64_t sel_p = 0;
				float min_p = INFINITY, max_p = 0;
				int dense = per_tensor && (int64_t)numel[p] < min_numel;
				for (uint64_t i = 0; i < numel[p]; i++) {
					float e = enew[p][i], xv = x[p][i];
					float s = xv - e;
					mine[o + i] = s;
					if (s + e != xv) {
						rc = fail("step %ld: %s[%llu]: sent %.9g + residual %.9g != gradient + "
						          "old residual %.9g", it, names[p], (unsigned long long)i, s,
						          e, xv);
						goto topk_out;
					}
					if (e != 0 && e != xv) {
						rc = fail("step %ld: %s[%llu]: residual %.9g is neither 0 (sent) nor "
						          "%.9g (kept)", it, names[p], (unsigned long long)i, e, xv);
						goto topk_out;
					}
					if (e == 0 && xv != 0) {
						sel_p++;
						min_p = fminf(min_p, fabsf(xv));
					} else {
						max_p = fmaxf(max_p, fabsf(xv));
					}
					cand[ncand++] = xv;
				}
				if (per_tensor) {
					uint64_t k = dense ? numel[p] : (uint64_t)floor((double)numel[p] * ratio);
					k = k < 1 ? 1 : k;
					if (sel_p != k || (!dense && min_p < max_p)) {
						rc = fail("step %ld: %s: %llu values sent (smallest |x| %g, largest "
						          "kept %g); expected the top %llu", it, names[p],
						          (unsigned long long)sel_p, min_p, max_p,
						          (unsigned long long)k);
						goto topk_out;
					}
					if (!dense)
						k_all += k;
				}
				nsel += sel_p;
				min_sel = fminf(min_sel, min_p);
				max_un = fmaxf(max_un, max_p);
				o += numel[p];
			}
			if (!per_tensor) {
				uint64_t k = (uint64_t)floor((double)total * ratio);
				k = k < 1 ? 1 : k;
				qsort(cand, ncand, sizeof(float), cmp_mag_desc);
				if (nsel != k || min_sel < max_un || fabsf(cand[k - 1]) != min_sel) {
					rc = fail("step %ld: %llu values sent (smallest |x| %g, largest kept %g); "
					          "expected the top %llu of the bucket", it,
					          (unsigned long long)nsel, min_sel, max_un, (unsigned long long)k);
					goto topk_out;
				}
				k_all = k;
			}
			/* the mean of what the ranks sent, as the plugin adds it */
			if ((st = accel_allgather(ctx, mine, gath, total, ACCEL_DTYPE_F32))) {
				rc = fail("allgather: %s", accel_errmsg(ctx));
				goto topk_out;
			}
			float f = (float)(1.0 / g_world);
			for (uint64_t i = 0; i < total; i++) {
				float m = 0;
				for (int q = 0; q < g_world; q++)
					m += gath[(uint64_t)q * total + i];
				m *= f;
				if (m != R[i]) {
					rc = fail("step %ld: element %llu: reduced %.9g, mean of what the ranks "
					          "sent %.9g", it, (unsigned long long)i, R[i], m);
					goto topk_out;
				}
			}
			/* what the comm layer was handed: values + 4-byte indices */
			uint64_t dense_bytes = total * 4, dense_part = 0;
			if (per_tensor)
				for (int p = 0; p < NP; p++)
					if ((int64_t)numel[p] < min_numel)
						dense_part += numel[p] * 4;
			double bound = ratio * (double)(dense_bytes - dense_part) + 4.0 * (double)k_all +
			               (double)dense_part;
			if ((double)(b1 - b0) > bound) {
				rc = fail("step %ld: the comm layer was handed %llu bytes; bound ratio x "
				          "dense + index bytes = %.0f (dense %llu)", it,
				          (unsigned long long)(b1 - b0), bound, (unsigned long long)dense_bytes);
				goto topk_out;
			}
			if (cs.last_sent_bytes != b1 - b0) {
				rc = fail("step %ld: the plugin says it sent %llu bytes, the comm layer "
				          "counted %llu", it, (unsigned long long)cs.last_sent_bytes,
				          (unsigned long long)(b1 - b0));
				goto topk_out;
			}
			rc = 0;
		topk_out:
			free(gath);
			free(cand);
			free(mine);
			if (rc)
				goto out;
			rc = 1;
		} else {
			/* powersgd: the exact mean, and PyTorch's residual */
			float *gsc = malloc(total * sizeof(float));
			float *gath = malloc(total * (size_t)g_world * sizeof(float));
			o = 0;
			for (int p = 0; p < NP; p++) {
				script(g_rank, it, p, gsc + o, 1);
				o += numel[p];
			}
			st = accel_allgather(ctx, gsc, gath, total, ACCEL_DTYPE_F32);
			double scale = 0, err = 0;
			for (uint64_t i = 0; !st && i < total; i++) {
				double m = 0;
				for (int q = 0; q < g_world; q++)
					m += gath[(uint64_t)q * total + i];
				m /= g_world;
				scale = fmax(scale, fabs(m));
				err = fmax(err, fabs(m - R[i]));
			}
			free(gsc);
			free(gath);
			if (st) {
				rc = fail("allgather: %s", accel_errmsg(ctx));
				goto out;
			}
			if (err / scale > worst_psgd)
				worst_psgd = err / scale;
			if (!no_exact && err > PCOMP_TOL * scale) {
				rc = fail("step %ld: PowerSGD of rank >= the gradient's: max error %.3g "
				          "relative to the mean's max %.3g (bound %g)", it, err, scale,
				          PCOMP_TOL);
				goto out;
			}
			o = 0;
			for (int p = 0; p < NP; p++) {
				for (uint64_t i = 0; i < numel[p]; i++)
					if (enew[p][i] != x[p][i] - R[o + i]) {
						rc = fail("step %ld: %s[%llu]: residual %.9g != gradient + old "
						          "residual - result %.9g", it, names[p],
						          (unsigned long long)i, enew[p][i], x[p][i] - R[o + i]);
						goto out;
					}
				o += numel[p];
			}
			if (cs.last_sent_bytes != b1 - b0) {
				rc = fail("step %ld: the plugin says it sent %llu bytes, the comm layer "
				          "counted %llu", it, (unsigned long long)cs.last_sent_bytes,
				          (unsigned long long)(b1 - b0));
				goto out;
			}
		}
		checked++;
		continue;
	api_fail:
		rc = fail("step %ld: %s", it, accel_errmsg(ctx));
		goto out;
	}
	snprintf(g_msg, sizeof(g_msg), "ok: %lld steps, %llu compressed and checked, %llu "
	         "skipped, at most %llu bytes handed to the comm layer per step, worst relative error "
	         "(PowerSGD, fp16/bf16) %.3g", (long long)steps, (unsigned long long)checked,
	         (unsigned long long)skipped, (unsigned long long)max_bytes, worst_psgd);
	rc = 0;
out:
	printf("rank %d: %s\n", g_rank, g_msg);
	report(rc, g_msg);
	if (rec)
		fclose(rec);
	if (cmpf)
		fclose(cmpf);
	for (int p = 0; p < NP; p++) {
		free(x[p]);
		free(eold[p]);
		free(enew[p]);
		free(res[p]);
		free(pb[p]);
	}
	free(all);
	accel_ctx_free(ctx);
	return rc;
}
