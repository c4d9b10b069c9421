/* SPDX-License-Identifier: MIT */
/* cli/cmd-test.c: `accel test`: a short sanity run on N processes with the
 * current configuration (what `accelerate test` is for Accelerate).
 *
 * It runs `accel launch -n N -- accel test --worker`, the path a user's
 * job takes (launcher, rendezvous, the configured backend and strategy),
 * and each worker checks values it can compute alone:
 *   - ranks: the world size is N and every rank 0..N-1 is there once;
 *   - collectives: all-reduce (sum, avg, max; f32 and i64), broadcast,
 *     all-gather and reduce-scatter of rank-dependent data against the
 *     closed-form results (exact in f32);
 *   - training: a linear least-squares model trained 6 steps with SGD by
 *     the configured strategy, each rank on its share of the batch, against
 *     full-batch gradient descent computed in double by every rank, and the
 *     parameters identical on all ranks.
 * The optimizer is fixed for the run (SGD, lr 0.05, no weight decay,
 * constant schedule, one micro-batch a step) so the reference is known;
 * strategy, backend, clipping and plugins are the config's.  The model is
 * f32 and computed in f32 whatever mixed_precision says (a check of the
 * distribution, not of a precision recipe). */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "cli.h"
#include "self-launch.h"

#define SUB "test"
#define MAX_SETS 64

static void help(void)
{
	printf(
		"Usage: accel test [OPTIONS]\n"
		"\n"
		"Run a short sanity job on N processes with the current configuration: it\n"
		"starts `accel launch -n N` with itself as the program, checks the ranks,\n"
		"the collectives (all-reduce, broadcast, all-gather, reduce-scatter) and 6\n"
		"training steps of a small model under the configured strategy against\n"
		"known values, and prints PASS or FAIL per check with the reason.\n"
		"\n"
		"The run uses SGD (lr 0.05, no weight decay, constant schedule, one micro-\n"
		"batch per step) so its result is known; the strategy, backend, clipping\n"
		"and plugins come from the configuration.  The model is f32 and computed in\n"
		"f32 whatever mixed_precision says (it is printed, not applied).\n"
		"\n"
		"Options:\n"
		"  -n, --num-processes N  processes (default 2)\n"
		"  --config F             accel config file (default: as for any accel\n"
		"                         program: ACCEL_CONFIG, ./accel.json, ...)\n"
		"  --set KEY=VALUE        config override (repeatable)\n"
		"  --timeout S            stop the job after S seconds (default 120)\n"
		"  -h, --help             this help\n"
		"\n"
		"Exit status: 0 when every check passed, 1 when one failed or the job did\n"
		"not finish, 2 on bad usage.\n");
}

/* ---- the worker ------------------------------------------------------------- */

#define D 8          /* features */
#define PER_RANK 16  /* samples per rank and step */
#define STEPS 6
#define LR 0.05

typedef struct worker {
	accel_ctx *ctx;
	int rank, world;
	int failed;
} worker;

static void result(worker *w, int ok, const char *check, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Rank 0 prints every result; another rank prints only its failures (with
 * its rank), so a failure seen by one rank alone is not lost. */
static void result(worker *w, int ok, const char *check, const char *fmt, ...)
{
	va_list ap;
	if (!ok)
		w->failed = 1;
	if (ok && w->rank != 0)
		return;
	FILE *out = ok ? stdout : stderr;
	fprintf(out, "%s  %-14s ", ok ? "PASS" : "FAIL", check);
	if (!ok && w->world > 1)
		fprintf(out, "(rank %d) ", w->rank);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	fflush(out);
}

static int call_ok(worker *w, int rc, const char *check, const char *what)
{
	if (rc == ACCEL_OK)
		return 1;
	result(w, 0, check, "%s: %s", what, accel_errmsg(w->ctx));
	accel_clear_error(w->ctx);
	return 0;
}

static void check_collectives(worker *w)
{
	int n = w->world, r = w->rank;
	enum { C = 1000 };
	float f[C], g[C];
	int64_t i64[3];
	/* all-reduce sum / avg / max, f32: element i of rank r is r + 1 + i */
	for (int i = 0; i < C; i++)
		f[i] = (float)(r + 1 + i);
	if (call_ok(w, accel_allreduce(w->ctx, f, g, C, ACCEL_DTYPE_F32, ACCEL_RED_SUM),
	            "allreduce", "sum")) {
		int bad = -1;
		for (int i = 0; i < C && bad < 0; i++)
			if (g[i] != (float)(n * (n + 1) / 2 + n * i))
				bad = i;
		if (bad >= 0)
			result(w, 0, "allreduce", "sum f32: element %d is %g, expected %d", bad,
			       (double)g[bad], n * (n + 1) / 2 + n * bad);
		else
			result(w, 1, "allreduce", "sum of %d f32 over %d ranks", C, n);
	}
	if (call_ok(w, accel_allreduce(w->ctx, f, g, C, ACCEL_DTYPE_F32, ACCEL_RED_MAX),
	            "allreduce-max", "max")) {
		int bad = -1;
		for (int i = 0; i < C && bad < 0; i++)
			if (g[i] != (float)(n + i))
				bad = i;
		result(w, bad < 0, "allreduce-max", bad < 0 ? "max f32" : "element %d is %g, "
		       "expected %d", bad, bad < 0 ? 0.0 : (double)g[bad], n + bad);
	}
	i64[0] = (int64_t)1 << 40;
	i64[1] = r;
	i64[2] = -(int64_t)r * 3;
	if (call_ok(w, accel_allreduce(w->ctx, i64, i64, 3, ACCEL_DTYPE_I64, ACCEL_RED_SUM),
	            "allreduce-i64", "sum")) {
		int64_t want[3] = {(int64_t)n << 40, (int64_t)n * (n - 1) / 2,
		                   -(int64_t)3 * n * (n - 1) / 2};
		int ok = !memcmp(i64, want, sizeof(want));
		result(w, ok, "allreduce-i64", ok ? "sum i64 (2^40 kept exact)" : "got %lld %lld "
		       "%lld, expected %lld %lld %lld", (long long)i64[0], (long long)i64[1],
		       (long long)i64[2], (long long)want[0], (long long)want[1], (long long)want[2]);
	}
	double avg[2] = {r, 1.5};
	if (call_ok(w, accel_allreduce(w->ctx, avg, avg, 2, ACCEL_DTYPE_F64, ACCEL_RED_AVG),
	            "allreduce-avg", "avg")) {
		int ok = fabs(avg[0] - (n - 1) / 2.0) < 1e-12 && fabs(avg[1] - 1.5) < 1e-12;
		result(w, ok, "allreduce-avg", ok ? "avg f64" : "got %g %g, expected %g 1.5", avg[0],
		       avg[1], (n - 1) / 2.0);
	}
	/* broadcast from the last rank */
	for (int i = 0; i < C; i++)
		f[i] = r == n - 1 ? (float)(i * 7 % 13) : -1.0f;
	if (call_ok(w, accel_broadcast(w->ctx, f, C, ACCEL_DTYPE_F32, n - 1), "broadcast",
	            "from the last rank")) {
		int bad = -1;
		for (int i = 0; i < C && bad < 0; i++)
			if (f[i] != (float)(i * 7 % 13))
				bad = i;
		result(w, bad < 0, "broadcast", bad < 0 ? "from rank %d" : "element %d differs",
		       bad < 0 ? n - 1 : bad);
	}
	/* all-gather: rank r sends 10 values r*100 + k */
	float *all = malloc((size_t)n * 10 * sizeof(float));
	float mine[10], rs[10];
	for (int k = 0; k < 10; k++)
		mine[k] = (float)(r * 100 + k);
	if (all && call_ok(w, accel_allgather(w->ctx, mine, all, 10, ACCEL_DTYPE_F32), "allgather",
	                   "10 f32 a rank")) {
		int bad = -1;
		for (int i = 0; i < n * 10 && bad < 0; i++)
			if (all[i] != (float)(i / 10 * 100 + i % 10))
				bad = i;
		result(w, bad < 0, "allgather", bad < 0 ? "rank order kept" : "element %d is %g",
		       bad, bad < 0 ? 0.0 : (double)all[bad]);
	}
	/* reduce-scatter: element j of every rank's n*10 is j + r; rank r gets
	 * its 10 sums */
	float *src = malloc((size_t)n * 10 * sizeof(float));
	if (src) {
		for (int j = 0; j < n * 10; j++)
			src[j] = (float)(j + r);
		if (call_ok(w, accel_reduce_scatter(w->ctx, src, rs, 10, ACCEL_DTYPE_F32,
		                                    ACCEL_RED_SUM), "reduce-scatter", "sum")) {
			int bad = -1;
			for (int k = 0; k < 10 && bad < 0; k++)
				if (rs[k] != (float)(n * (r * 10 + k) + n * (n - 1) / 2))
					bad = k;
			result(w, bad < 0, "reduce-scatter", bad < 0 ? "sum, each rank its block"
			       : "element %d is %g", bad, bad < 0 ? 0.0 : (double)rs[bad]);
		}
	}
	free(all);
	free(src);
	call_ok(w, accel_wait_for_everyone(w->ctx), "barrier", "accel_wait_for_everyone");
}

/* Sample j of the global batch (the same every step): x in [-1, 1], y from
 * fixed true weights. */
static void sample(int j, double *x, double *y)
{
	static const double wt[D] = {0.5, -1.0, 0.25, 2.0, -0.75, 1.5, -0.5, 1.0};
	*y = 0.3;
	for (int i = 0; i < D; i++) {
		x[i] = sin(1.0 + j * 0.37 + i * 1.91);
		*y += wt[i] * x[i];
	}
}

static void check_training(worker *w, double max_norm, int low_precision)
{
	int n = w->world, M = n * PER_RANK;
	double ref[D + 1] = {0}, x[D], y;
	uint32_t pw, pb;
	int64_t shape_w[1] = {D}, shape_b[1] = {1};
	accel_init zero = accel_init_const(0.0);
	double loss0 = 0, loss_last = 0;

	if (!call_ok(w, accel_model_add_param(w->ctx, "linear", "linear.weight", ACCEL_DTYPE_F32,
	                                      1, shape_w, &zero, &pw), "train", "model") ||
	    !call_ok(w, accel_model_add_param(w->ctx, "linear", "linear.bias", ACCEL_DTYPE_F32, 1,
	                                      shape_b, &zero, &pb), "train", "model") ||
	    !call_ok(w, accel_prepare(w->ctx), "train", "accel_prepare"))
		return;
	for (int step = 0; step < STEPS; step++) {
		/* the reference: full-batch gradient of 0.5 * mean (pred - y)^2 */
		double g[D + 1] = {0}, loss = 0;
		for (int j = 0; j < M; j++) {
			sample(j, x, &y);
			double e = ref[D] - y;
			for (int i = 0; i < D; i++)
				e += ref[i] * x[i];
			loss += 0.5 * e * e / M;
			for (int i = 0; i < D; i++)
				g[i] += e * x[i] / M;
			g[D] += e / M;
		}
		if (max_norm > 0) {   /* torch.nn.utils.clip_grad_norm_ */
			double s = 0;
			for (int i = 0; i <= D; i++)
				s += g[i] * g[i];
			double coef = max_norm / (sqrt(s) + 1e-6);
			if (coef < 1)
				for (int i = 0; i <= D; i++)
					g[i] *= coef;
		}
		for (int i = 0; i <= D; i++)
			ref[i] -= LR * g[i];

		/* the job: this rank's share, its gradient of its mean */
		if (!call_ok(w, accel_unit_pre_forward(w->ctx, 0), "train", "pre_forward"))
			return;
		float *wd = accel_param_data(w->ctx, pw), *bd = accel_param_data(w->ctx, pb);
		double mine[D + 1] = {0}, myloss = 0;
		for (int j = w->rank * PER_RANK; j < (w->rank + 1) * PER_RANK; j++) {
			sample(j, x, &y);
			double e = (double)bd[0] - y;
			for (int i = 0; i < D; i++)
				e += (double)wd[i] * x[i];
			myloss += 0.5 * e * e / PER_RANK;
			for (int i = 0; i < D; i++)
				mine[i] += e * x[i] / PER_RANK;
			mine[D] += e / PER_RANK;
		}
		if (!call_ok(w, accel_unit_post_forward(w->ctx, 0), "train", "post_forward") ||
		    !call_ok(w, accel_unit_pre_backward(w->ctx, 0), "train", "pre_backward"))
			return;
		float *gw = accel_param_grad(w->ctx, pw), *gb = accel_param_grad(w->ctx, pb);
		if (!gw || !gb) {
			result(w, 0, "train", "accel_param_grad gave NULL inside the backward hooks");
			return;
		}
		for (int i = 0; i < D; i++)
			gw[i] = (float)mine[i];
		gb[0] = (float)mine[D];
		if (!call_ok(w, accel_unit_post_backward(w->ctx, 0), "train", "post_backward") ||
		    !call_ok(w, accel_step(w->ctx), "train", "accel_step") ||
		    !call_ok(w, accel_allreduce(w->ctx, &myloss, &myloss, 1, ACCEL_DTYPE_F64,
		                                ACCEL_RED_AVG), "train", "loss"))
			return;
		if (step == 0)
			loss0 = myloss;
		loss_last = myloss;
		if (fabs(myloss - loss) > 1e-4 * (1 + loss) * (low_precision ? 100 : 1)) {
			result(w, 0, "train-loss", "step %d: the job's loss %.8g, the reference's %.8g",
			       step, myloss, loss);
			return;
		}
	}
	/* the parameters after STEPS steps */
	if (!call_ok(w, accel_unit_pre_forward(w->ctx, 0), "train", "pre_forward"))
		return;
	float *wd = accel_param_data(w->ctx, pw), *bd = accel_param_data(w->ctx, pb);
	float got[D + 1];
	memcpy(got, wd, D * sizeof(float));
	got[D] = bd[0];
	double worst = 0;
	int at = 0;
	for (int i = 0; i <= D; i++) {
		double e = fabs((double)got[i] - ref[i]) / (1e-3 + fabs(ref[i]));
		if (e > worst) {
			worst = e;
			at = i;
		}
	}
	/* f32 end to end: a few ulps over 6 steps (observed < 1e-6); bf16 and
	 * fp16 reductions round to 8 and 11 bits */
	double tol = low_precision ? 2e-2 : 1e-5;
	result(w, worst <= tol, "train", worst <= tol ? "%d SGD steps on %d ranks match full-batch "
	       "gradient descent (worst relative error %.2g, tolerance %.0g); loss %.4f -> %.4f"
	       : "after %d steps parameter %d is %.8g, the reference %.8g (relative error %.3g > "
	       "%.0g)", STEPS, worst <= tol ? n : at, worst <= tol ? worst : (double)got[at],
	       worst <= tol ? tol : ref[at], worst <= tol ? loss0 : worst,
	       worst <= tol ? loss_last : tol);
	/* the same parameters on every rank, bit for bit */
	float lo[D + 1], hi[D + 1];
	if (call_ok(w, accel_allreduce(w->ctx, got, lo, D + 1, ACCEL_DTYPE_F32, ACCEL_RED_MIN),
	            "train-agree", "min") &&
	    call_ok(w, accel_allreduce(w->ctx, got, hi, D + 1, ACCEL_DTYPE_F32, ACCEL_RED_MAX),
	            "train-agree", "max")) {
		int same = !memcmp(lo, hi, sizeof(lo));
		if (same)
			result(w, 1, "train-agree", "parameters identical on all %d rank%s", n,
			       n == 1 ? "" : "s");
		else
			result(w, 0, "train-agree", "the ranks' parameters differ (a rank stepped "
			       "differently)");
	}
	call_ok(w, accel_unit_post_forward(w->ctx, 0), "train", "post_forward");
}

static int run_worker(int expect_world)
{
	static const char *const sets[] = {
		"optimizer.type=sgd", "optimizer.params.lr=0.05", "optimizer.params.weight_decay=0",
		"optimizer.params.momentum=0", "scheduler.type=constant",
		"scheduler.warmup_steps=0", "gradient_accumulation_steps=1", NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	worker w = {0};
	int rc = accel_ctx_new(&o, &w.ctx);
	if (rc) {
		fprintf(stderr, "FAIL  %-14s %s\n", "start", accel_errmsg(w.ctx));
		accel_ctx_free(w.ctx);
		return 1;
	}
	w.rank = accel_rank(w.ctx);
	w.world = accel_world_size(w.ctx);
	const char *strategy = "?", *backend = "?", *mp = "no";
	(void)accel_config_string(w.ctx, "strategy", &strategy);
	(void)accel_config_string(w.ctx, "backend", &backend);
	(void)accel_config_string(w.ctx, "mixed_precision", &mp);
	double max_norm = 0;
	if (accel_config_double(w.ctx, "max_grad_norm", &max_norm) != ACCEL_OK)
		max_norm = 0;
	accel_clear_error(w.ctx);

	/* ranks: each rank's number, gathered */
	int32_t me = w.rank, *all = malloc((size_t)w.world * sizeof(int32_t));
	int ranks_ok = w.world == expect_world;
	if (all && call_ok(&w, accel_allgather(w.ctx, &me, all, 1, ACCEL_DTYPE_I32), "ranks",
	                   "all-gather of the ranks"))
		for (int i = 0; i < w.world; i++)
			ranks_ok &= all[i] == i;
	free(all);
	result(&w, ranks_ok, "ranks", ranks_ok ? "%d processes, ranks 0..%d (strategy %s, "
	       "backend %s, mixed_precision %s)" : "world size %d, expected %d, or a rank is "
	       "missing or doubled", w.world, ranks_ok ? w.world - 1 : expect_world, strategy,
	       backend, mp);
	check_collectives(&w);
	check_training(&w, max_norm, strcmp(mp, "no") != 0);

	int32_t failed = w.failed;
	if (accel_allreduce(w.ctx, &failed, &failed, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX) != ACCEL_OK)
		failed = 1;
	if (w.rank == 0 && !failed)
		printf("accel-test-all-passed\n");
	accel_ctx_free(w.ctx);
	return failed ? 1 : 0;
}

/* ---- the command ----------------------------------------------------------------- */

int accelp_cli_test(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"num-processes", required_argument, NULL, 'n'},
		{"config", required_argument, NULL, 'c'},
		{"set", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 't'},
		{"worker", required_argument, NULL, 'W'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL;
	const char *sets[MAX_SETS + 1] = {NULL};
	int n_sets = 0, worker_world = 0;
	long nproc = 2;
	double timeout = 120;
	char *end;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hn:", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			help();
			return 0;
		case 'n':
			nproc = strtol(optarg, &end, 10);
			if (!*optarg || *end || nproc < 1 || nproc > 256)
				return accelp_cli_usage_error(SUB, "--num-processes '%s': expected 1..256",
				                              optarg);
			break;
		case 'c':
			config = optarg;
			break;
		case 's':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return accelp_cli_usage_error(SUB, "--set '%s' is not KEY=VALUE", optarg);
			if (n_sets == MAX_SETS)
				return accelp_cli_usage_error(SUB, "more than %d --set options", MAX_SETS);
			sets[n_sets++] = optarg;
			break;
		case 't':
			timeout = strtod(optarg, &end);
			if (!*optarg || *end || !(timeout >= 1 && timeout <= 86400))
				return accelp_cli_usage_error(SUB, "--timeout '%s': expected seconds, 1..86400",
				                              optarg);
			break;
		case 'W':
			worker_world = atoi(optarg);
			break;
		case ':':
			return accelp_cli_usage_error(SUB, "option '%s' needs a value", argv[optind - 1]);
		default:
			return accelp_cli_usage_error(SUB, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return accelp_cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
	if (worker_world)
		return run_worker(worker_world);

	char nbuf[16];
	snprintf(nbuf, sizeof(nbuf), "%ld", nproc);
	const char *wargs[] = {"test", "--worker", nbuf, NULL};
	sets[n_sets] = NULL;
	accel_cli_job job = {.nproc = (int)nproc, .config = config, .sets = sets, .worker = wargs,
	                     .timeout_s = timeout};
	char *out = NULL, why[256];
	int status = 0, timed_out = 0;
	printf("accel test: %ld process%s%s%s\n", nproc, nproc == 1 ? "" : "es",
	       config ? ", config " : "", config ? config : "");
	fflush(stdout);
	if (accelp_cli_self_launch(&job, &out, &status, &timed_out, why, sizeof(why))) {
		fprintf(stderr, "accel test: could not start accel launch: %s\n", why);
		return 1;
	}
	/* The job's lines without the launcher's "[rank R] " prefix. */
	int passed = 0;
	for (char *line = out, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *text = line;
		if (!strncmp(text, "[rank ", 6) && strchr(text, ']'))
			text = strchr(text, ']') + 1 + (strchr(text, ']')[1] == ' ');
		if (!strcmp(text, "accel-test-all-passed")) {
			passed = 1;
			continue;
		}
		printf("%s\n", text);
	}
	free(out);
	if (timed_out) {
		printf("accel test: FAIL: the job did not finish in %.0f s (stopped; a rank hung in a "
		       "collective or the rendezvous; see the lines above)\n", timeout);
		return 1;
	}
	if (status != 0 || !passed) {
		printf("accel test: FAIL (accel launch exited %d); see the FAIL lines above\n", status);
		return 1;
	}
	printf("accel test: PASS\n");
	return 0;
}
