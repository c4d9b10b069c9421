/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_mlp.c: train an MLP classifier on a synthetic
 * data set with accel.  The same program runs on one process or on N
 * (`accel launch -n N -- train_mlp ...`); with the same flags it computes the
 * same model up to floating-point reassociation, because:
 *   - --batch-size is the GLOBAL batch: the sampler (split_batches) gives
 *     rank r the r-th contiguous slice of each global batch of B samples;
 *   - each rank's loss is the mean over its B/N samples, and accel averages
 *     the gradients over ranks, which is the gradient of the mean over B;
 *   - initial values come from accel's seeded per-parameter generator,
 *     which does not depend on the world size.
 *
 * The model math (forward/backward of one layer, loss) is in mlp.c, and in
 * mlp_cuda.cu for --device cuda (parameters, gradients, activations and
 * the data on the GPU; accel's ddp keeps its buckets, reduction and
 * optimizer there too); this file is the training loop and the command
 * line.  See examples/README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <accel/accel.h>

#include "blas.h"
#include "mlp.h"
#include "mlp_cuda.h"
#include "mlp_fp8.h"
#include "st_write.h"
#include "step_metrics.h"

typedef struct options {
	long steps;
	long warmup;            /* untimed optimizer steps before --steps */
	long batch;
	double lr;              /* < 0: from the configuration */
	int hidden, layers;
	long long seed;         /* < 0: from the configuration (`seed`) */
	long samples, test_samples;
	int inputs, classes, modes;
	double sep, noise;
	int no_shuffle;
	int no_eval;
	int legacy_stream;      /* --device cuda on CUDA's legacy default stream */
	int json;
	int log_every;
	const char *save_init;
	const char *save_final;
	const char *save_final_ranks;   /* PREFIX: rank r writes PREFIX.rank<r>.safetensors */
	long checkpoint_every;  /* 0: no checkpoints */
	const char *project_dir;
	const char *resume;     /* checkpoint directory or "latest" */
	const char *config;
	const char *metrics;
	const char *device;     /* NULL / "cpu", "cuda" or "cuda:N" */
	const char *sets[40];   /* 32 --set, lr, shuffle, seed, project_dir, NULL */
	int n_sets;
	long die_rank, die_step;   /* --die-at; die_step 0: never */
	const char *die_marker;
	int hang;                  /* --hang-at: stop there instead of dying */
} options;

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: train_mlp [options]\n"
	        "Train an MLP classifier on a synthetic data set with accel; run it directly or\n"
	        "under `accel launch -n N --`.\n"
	        "  --steps N          optimizer steps (default 100)\n"
	        "  --warmup N         N more optimizer steps first, left out of the timing\n"
	        "                     (default 0)\n"
	        "  --batch-size B     global batch, split evenly over the processes (default 128)\n"
	        "  --lr X             learning rate (sets optimizer.params.lr; default: the config)\n"
	        "  --hidden H         hidden layer width (default 1024)\n"
	        "  --layers L         hidden layers; fc0..fc{L}, fc{L} is the output layer (default 2)\n"
	        "  --seed S           seed of the data, the initial weights and the shuffling\n"
	        "                     (sets the config key `seed`; default: the config's, 42)\n"
	        "  --samples N        training samples (default 8192)\n"
	        "  --test-samples N   held-out samples for the final accuracy (default 2048)\n"
	        "  --inputs D         input dimension (default 784)\n"
	        "  --classes C        classes (default 10)\n"
	        "  --device D         cpu (default), cuda (GPU local rank %% count) or cuda:N;\n"
	        "                     mixed_precision=bf16 or fp16 holds the weights and\n"
	        "                     activations in bf16 or f16 on either (f32 masters)\n"
	        "  --legacy-stream    on a GPU, compute on CUDA's legacy default stream instead\n"
	        "                     of a non-blocking stream of its own (for comparison)\n"
	        "  --no-shuffle       global batch k of an epoch is samples k*B .. (k+1)*B-1 (sets\n"
	        "                     dataloader.shuffle=false)\n"
	        "  --log-every N      progress line every N steps (default 25)\n"
	        "  --no-eval          skip the final evaluation (training and held-out sets)\n"
	        "  --json             print the timing as one JSON line on stdout (every process)\n"
	        "  --save-init DIR    write DIR/init.safetensors (initial parameters) and\n"
	        "                     DIR/data.safetensors (x [N,D] f32, y [N] i64)\n"
	        "  --save-final FILE  write the trained parameters to FILE (safetensors)\n"
	        "  --save-final-ranks PREFIX\n"
	        "                     every process (rank r) writes its trained parameters to\n"
	        "                     PREFIX.rank<r>.safetensors, to compare the ranks\n"
	        "  --checkpoint-every N\n"
	        "                     save the training state every N optimizer steps into\n"
	        "                     the project directory as checkpoint_<step>\n"
	        "  --project-dir DIR  where checkpoints go (default ./checkpoints)\n"
	        "  --resume DIR       continue from checkpoint DIR ('latest': the one the project\n"
	        "                     directory's 'latest' file names); --steps stays the total\n"
	        "  --die-at R:S[:FILE]  fault drill: rank R kills itself (SIGKILL) after step S;\n"
	        "                     with FILE, only while FILE does not exist (it is created\n"
	        "                     first: once per FILE), for accel launch --max-restarts\n"
	        "  --hang-at R:S[:FILE]  the same, but rank R stops responding (sleeps) instead\n"
	        "  --metrics FILE     also write the progress as JSON lines to FILE ('-': stdout)\n"
	        "  --config FILE      accel configuration (default: ACCEL_CONFIG, ./accel.json, ...)\n"
	        "  --set KEY=VALUE    override a configuration key (repeatable)\n");
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *ret)
{
	char *end;
	errno = 0;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || errno || *end || end == v || x < lo || x > hi) {
		fprintf(stderr, "train_mlp: %s needs an integer in [%ld, %ld], got '%s'\n", flag, lo, hi,
		        v ? v : "(nothing)");
		return -1;
	}
	*ret = x;
	return 0;
}

static int parse_double(const char *flag, const char *v, double *ret)
{
	char *end;
	double x = v ? strtod(v, &end) : 0;
	if (!v || *end || end == v || !(x > 0) || isinf(x)) {
		fprintf(stderr, "train_mlp: %s needs a positive number, got '%s'\n", flag,
		        v ? v : "(nothing)");
		return -1;
	}
	*ret = x;
	return 0;
}

static int is_path_option(const char *a)
{
	return !strcmp(a, "--save-init") || !strcmp(a, "--save-final") ||
	       !strcmp(a, "--save-final-ranks") || !strcmp(a, "--metrics") || !strcmp(a, "--config") ||
	       !strcmp(a, "--project-dir") || !strcmp(a, "--resume");
}

/* 0 ok, 1 exit successfully (help), -1 usage error. */
static int parse_args(int argc, char **argv, options *o)
{
	*o = (options){.steps = 100, .batch = 128, .lr = -1, .hidden = 1024, .layers = 2,
	               .seed = -1, .samples = 8192, .test_samples = 2048, .inputs = 784,
	               .classes = 10, .modes = 2, .sep = 6.0, .noise = 1.0, .log_every = 25,
	               .project_dir = "checkpoints"};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long x;
		int r = 0;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--no-shuffle")) {
			o->no_shuffle = 1;
			continue;
		} else if (!strcmp(a, "--no-eval")) {
			o->no_eval = 1;
			continue;
		} else if (!strcmp(a, "--json")) {
			o->json = 1;
			continue;
		} else if (!strcmp(a, "--legacy-stream")) {
			o->legacy_stream = 1;
			continue;
		} else if (!strcmp(a, "--steps")) {
			r = parse_long(a, v, 1, 100000000, &o->steps);
		} else if (!strcmp(a, "--warmup")) {
			r = parse_long(a, v, 0, 100000000, &o->warmup);
		} else if (!strcmp(a, "--batch-size")) {
			r = parse_long(a, v, 1, 1 << 20, &o->batch);
		} else if (!strcmp(a, "--lr")) {
			r = parse_double(a, v, &o->lr);
		} else if (!strcmp(a, "--hidden")) {
			r = parse_long(a, v, 1, 1 << 16, &x);
			o->hidden = (int)x;
		} else if (!strcmp(a, "--layers")) {
			r = parse_long(a, v, 0, MLP_MAX_LAYERS - 1, &x);
			o->layers = (int)x;
		} else if (!strcmp(a, "--seed")) {
			r = parse_long(a, v, 0, INT32_MAX, &x);
			o->seed = x;
		} else if (!strcmp(a, "--samples")) {
			r = parse_long(a, v, 1, 1L << 30, &o->samples);
		} else if (!strcmp(a, "--test-samples")) {
			r = parse_long(a, v, 0, 1L << 30, &o->test_samples);
		} else if (!strcmp(a, "--inputs")) {
			r = parse_long(a, v, 1, 1 << 20, &x);
			o->inputs = (int)x;
		} else if (!strcmp(a, "--classes")) {
			r = parse_long(a, v, 2, 1 << 16, &x);
			o->classes = (int)x;
		} else if (!strcmp(a, "--device")) {
			if (!v || (strcmp(v, "cpu") && strcmp(v, "cuda") && strncmp(v, "cuda:", 5))) {
				fprintf(stderr, "train_mlp: --device needs cpu, cuda or cuda:N, got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
			if (!strncmp(v, "cuda:", 5) && parse_long(a, v + 5, 0, 1023, &x))
				return -1;
			o->device = v;
		} else if (!strcmp(a, "--die-at") || !strcmp(a, "--hang-at")) {
			o->hang = !strcmp(a, "--hang-at");
			char *end = NULL;
			errno = 0;
			o->die_rank = v ? strtol(v, &end, 10) : -1;
			if (end && *end == ':')
				o->die_step = strtol(end + 1, &end, 10);
			if (!v || errno || !end || (*end && *end != ':') || o->die_rank < 0 ||
			    o->die_step < 1 || (*end == ':' && !end[1])) {
				fprintf(stderr, "train_mlp: %s needs RANK:STEP[:FILE] (rank >= 0, step "
				        ">= 1), got '%s'\n", a, v ? v : "(nothing)");
				return -1;
			}
			o->die_marker = *end == ':' ? end + 1 : NULL;
		} else if (!strcmp(a, "--checkpoint-every")) {
			r = parse_long(a, v, 1, 100000000, &o->checkpoint_every);
		} else if (!strcmp(a, "--log-every")) {
			r = parse_long(a, v, 1, 1L << 30, &x);
			o->log_every = (int)x;
		} else if (is_path_option(a) && (!v || !strncmp(v, "--", 2))) {
			/* "--save-final --json" would write a file named --json */
			fprintf(stderr, "train_mlp: %s needs a path%s%s%s\n", a, v ? ", not the option '" : "",
			        v ? v : "", v ? "'" : "");
			return -1;
		} else if (!strcmp(a, "--save-init")) {
			o->save_init = v;
		} else if (!strcmp(a, "--save-final")) {
			o->save_final = v;
		} else if (!strcmp(a, "--save-final-ranks")) {
			o->save_final_ranks = v;
		} else if (!strcmp(a, "--metrics")) {
			o->metrics = v;
		} else if (!strcmp(a, "--project-dir")) {
			o->project_dir = v;
		} else if (!strcmp(a, "--resume")) {
			o->resume = v;
		} else if (!strcmp(a, "--config")) {
			o->config = v;
		} else if (!strcmp(a, "--set") && (!v || !strchr(v, '='))) {
			fprintf(stderr, "train_mlp: --set needs KEY=VALUE%s%s%s\n", v ? ", got '" : "",
			        v ? v : "", v ? "'" : "");
			return -1;
		} else if (!strcmp(a, "--set")) {
			if (o->n_sets >= 32) {
				fprintf(stderr, "train_mlp: at most 32 --set options\n");
				return -1;
			}
			o->sets[o->n_sets++] = v;
		} else {
			fprintf(stderr, "train_mlp: unknown option or missing value: '%s' (see --help)\n", a);
			return -1;
		}
		if (r)
			return -1;
		i++;
	}
	if (o->legacy_stream && (!o->device || !strcmp(o->device, "cpu"))) {
		fprintf(stderr, "train_mlp: --legacy-stream picks the CUDA stream of --device cuda; "
		        "add --device cuda, or drop it\n");
		return -1;
	}
	return 0;
}

/* --die-at: this rank dies here, as a crashed process would (once per
 * marker file when one is given). */
static void die_drill(const options *o)
{
	if (o->die_marker) {
		int fd = open(o->die_marker, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0)
			return;   /* died here before (or cannot say so: no drill) */
		close(fd);
	}
	fprintf(stderr, "train_mlp: --%s-at %ld:%ld: rank %ld %s after step %ld\n",
	        o->hang ? "hang" : "die", o->die_rank, o->die_step, o->die_rank,
	        o->hang ? "stops responding" : "kills itself", o->die_step);
	fflush(NULL);
	if (!o->hang)
		raise(SIGKILL);
	for (;;)
		pause();   /* until a signal ends it: the launcher's SIGTERM */
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "./a//b/" -> "a/b": the same directory spelled one way. */
static void norm_path(char *p)
{
	char *o = p;
	const char *i = p;
	while (i[0] == '.' && i[1] == '/')
		for (i += 2; *i == '/';)
			i++;
	for (; *i; i++)
		if (!(*i == '/' && o > p && o[-1] == '/'))
			*o++ = *i;
	while (o > p + 1 && o[-1] == '/')
		o--;
	*o = '\0';
}

/* An output path that cannot work, said before any work: an existing
 * path of the wrong kind, or a parent directory that is missing or not
 * writable.  `dir`: 1 the path is a directory to create or reuse, 2 a
 * stream that may also be a pipe or a device (else a regular file);
 * `made_dir`: a directory the program creates before it writes `path`. */
static int bad_output(const char *path, const char *opt, int dir, const char *made_dir)
{
	if (!path)
		return 0;
	struct stat st;
	int exists = stat(path, &st) == 0;
	/* dir 2: a stream (the metrics), which may also be a pipe or a device */
	if (exists && dir == 2 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)))
		return 0;
	if (exists && (dir == 1 ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
		fprintf(stderr, "train_mlp: %s %s: it exists and is not a %s\n", opt, path,
		        dir == 1 ? "directory" : "regular file");
		return 1;
	}
	/* files go into an existing directory itself; a new one, or a
	 * replaced file, into its parent */
	if (exists && dir == 1) {
		if (access(path, W_OK | X_OK) == 0)
			return 0;
		fprintf(stderr, "train_mlp: %s %s: cannot write in it: %s\n", opt, path,
		        strerror(errno));
		return 1;
	}
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", path);
	norm_path(parent);
	char *slash = strrchr(parent, '/');
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else if (slash == parent)
		parent[1] = '\0';
	else
		*slash = '\0';
	/* a file in the --save-init directory, which is made after the checks */
	if (made_dir) {
		char md[4096];
		snprintf(md, sizeof(md), "%s", made_dir);
		norm_path(md);
		if (!strcmp(parent, md))
			return bad_output(made_dir, "--save-init", 1, NULL);
	}
	if (access(parent, W_OK | X_OK) != 0) {
		fprintf(stderr, "train_mlp: %s %s: cannot write in %s: %s\n", opt, path, parent,
		        strerror(errno));
		return 1;
	}
	return 0;
}

/* --save-final-ranks PREFIX: rank 0's file stands for all of them (they
 * share the directory); a prefix that leaves no room for the suffix is
 * refused here rather than cut short at the end. */
static int bad_ranks_output(const char *prefix, const char *made_dir)
{
	char path[4096];
	if (!prefix)
		return 0;
	if (strlen(prefix) > sizeof(path) - 64) {
		fprintf(stderr, "train_mlp: --save-final-ranks: the prefix is longer than %zu bytes\n",
		        sizeof(path) - 64);
		return 1;
	}
	snprintf(path, sizeof(path), "%s.rank0.safetensors", prefix);
	return bad_output(path, "--save-final-ranks", 0, made_dir);
}

/* The program's state: the model as registered with accel, and buffers. */
typedef struct trainer {
	accel_ctx *ctx;
	mlp_shape shape;
	mlp_work work;
	uint32_t unit[MLP_MAX_LAYERS];     /* accel unit of fc{l}         */
	uint32_t weight[MLP_MAX_LAYERS];   /* accel parameter indices     */
	uint32_t bias[MLP_MAX_LAYERS];
	float *xb;                         /* this rank's batch inputs    */
	int64_t *yb;
	int64_t *idx;
	mlp_cuda *gpu;                     /* --device cuda, else NULL    */
	int32_t dev_index;                 /* its CUDA ordinal            */
	uint32_t dtype;                    /* working dtype (mixed_precision) */
	int fp8_on;                        /* mixed_precision fp8         */
	mlp_fp8 *fp8;                      /* its GEMMs, after prepare    */
	int prec;                          /* the same as MLP_F32/_BF16/_F16 */
	float *wf, *bf;                    /* CPU, 16-bit: a layer's weight and
	                                      bias widened to f32 for the BLAS */
} trainer;

/* The working dtype mixed_precision asks for: no -> f32, bf16, fp16 -> f16
 * (the loss scaled by the scaler plugin's accel_loss_scale()).  Weights
 * and activations are held in it; accel keeps f32 masters and optimizer
 * state, and on the CPU the gradients are f32 (grad_dtype), on the GPU
 * the working dtype.  fp8 on the CPU: f32 weights, whose linear layers
 * the fp8 plugin's GEMM computes (on either device).  -1 (said on stderr) for a value
 * train_mlp does not compute in. */
static int choose_dtype(trainer *t, const options *o, int on_gpu)
{
	const char *mp = "no";
	if (accel_config_string(t->ctx, "mixed_precision", &mp) != ACCEL_OK)
		mp = "no";
	if (!strcmp(mp, "no")) {
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = MLP_F32;
	} else if (!strcmp(mp, "bf16")) {
		t->dtype = ACCEL_DTYPE_BF16;
		t->prec = MLP_BF16;
	} else if (!strcmp(mp, "fp16")) {
		t->dtype = ACCEL_DTYPE_F16;
		t->prec = MLP_F16;
	} else if (!strcmp(mp, "fp8")) {   /* f32 weights, GEMMs in fp8 (mlp_fp8.c) */
		t->dtype = ACCEL_DTYPE_F32;
		t->prec = MLP_F32;
	} else {
		fprintf(stderr, "train_mlp: --device %s computes in f32 (mixed_precision=no), bf16 "
		        "(mixed_precision=bf16), f16 (mixed_precision=fp16) or fp8 GEMMs "
		        "(mixed_precision=fp8), not mixed_precision=%s\n",
		        o->device ? o->device : "cpu", mp);
		return -1;
	}
	return 0;
}

/* Report a failure of the GPU math; returns -1. */
static int gpu_fail(const trainer *t, const char *what)
{
	fprintf(stderr, "train_mlp: %s on the GPU: %s\n", what, mlp_cuda_error(t->gpu));
	return -1;
}

/* --device cuda[:N]: the GPU of this process (cuda: local rank modulo the
 * GPUs, so `accel launch -n N` spreads the ranks, and several ranks may
 * share one). */
static int gpu_choose(trainer *t, const options *o)
{
	int n = mlp_cuda_device_count();
	if (n < 0) {
		fprintf(stderr, "train_mlp: --device %s: this train_mlp was built without CUDA "
		        "(meson found no CUDA toolkit with cuBLASLt; configure with -Dcuda=enabled "
		        "-Dcublaslt=enabled)\n", o->device);
		return -1;
	}
	if (n == 0) {
		fprintf(stderr, "train_mlp: --device %s: no CUDA device is visible (see nvidia-smi "
		        "and CUDA_VISIBLE_DEVICES)\n", o->device);
		return -1;
	}
	if (!strncmp(o->device, "cuda:", 5)) {
		t->dev_index = (int32_t)atoi(o->device + 5);
		if (t->dev_index >= n) {
			fprintf(stderr, "train_mlp: --device %s: there are %d CUDA devices (0 .. %d)\n",
			        o->device, n, n - 1);
			return -1;
		}
	} else {
		t->dev_index = (int32_t)(accel_local_rank(t->ctx) % n);
	}
	return 0;
}

/* Report an accel failure with what we were doing; returns -1. */
static int fail(const trainer *t, const char *what, int rc)
{
	fprintf(stderr, "train_mlp: %s: %s (%s)\n", what,
	        t->ctx && *accel_errmsg(t->ctx) ? accel_errmsg(t->ctx) : "no message",
	        accel_status_str(rc));
	return -1;
}

static int register_model(trainer *t)
{
	char name[64], pname[80];
	int rc;
	for (int l = 0; l < t->shape.n_layers; l++) {
		int64_t in = t->shape.dims[l], out = t->shape.dims[l + 1];
		int64_t wshape[2] = {out, in}, bshape[1] = {out};
		/* torch.nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for both. */
		double k = 1.0 / sqrt((double)in);
		accel_init init = accel_init_uniform(-k, k);
		snprintf(name, sizeof(name), "fc%d", l);
		snprintf(pname, sizeof(pname), "fc%d.weight", l);
		if (t->gpu) {
			/* on the GPU, in the working dtype (accel keeps f32 masters) */
			accel_param_desc d = {.struct_size = sizeof(d), .dtype = t->dtype, .unit = name,
			                      .name = pname, .ndim = 2, .shape = wshape,
			                      .device = ACCEL_DEVICE_CUDA, .device_index = t->dev_index,
			                      .init = &init,
			                      .compute_dtype =
			                              t->fp8_on ? mlp_fp8_compute_dtype(out, in) : 0};
			if ((rc = accel_model_add(t->ctx, &d, &t->weight[l])))
				return fail(t, "registering the model", rc);
			d.compute_dtype = 0;
			snprintf(pname, sizeof(pname), "fc%d.bias", l);
			d.ndim = 1;
			d.shape = bshape;
			if ((rc = accel_model_add(t->ctx, &d, &t->bias[l])))
				return fail(t, "registering the model", rc);
		} else {
			/* in the working dtype, gradients in f32 (mlp.c's SGEMM writes
			 * f32; accel keeps f32 masters and refreshes the 16-bit copy) */
			accel_param_desc d = {.struct_size = sizeof(d), .dtype = t->dtype, .unit = name,
			                      .name = pname, .ndim = 2, .shape = wshape,
			                      .device = ACCEL_DEVICE_CPU, .init = &init,
			                      .grad_dtype = ACCEL_DTYPE_F32};
			if ((rc = t->fp8_on ? mlp_fp8_add_weight(t->ctx, name, pname, wshape, &init,
			                                         &t->weight[l])
			                    : accel_model_add(t->ctx, &d, &t->weight[l])))
				return fail(t, "registering the model", rc);
			snprintf(pname, sizeof(pname), "fc%d.bias", l);
			d.ndim = 1;
			d.shape = bshape;
			if ((rc = accel_model_add(t->ctx, &d, &t->bias[l])))
				return fail(t, "registering the model", rc);
		}
		if ((rc = accel_model_find_unit(t->ctx, name, &t->unit[l])))
			return fail(t, "looking up a unit", rc);
	}
	return 0;
}

/* CPU, 16-bit working weights: fc{l}'s weight (and bias, when b is not
 * NULL) widened into t->wf (t->bf), exactly, for the f32 BLAS. */
static void widen_layer(trainer *t, int l, const float **W, const float **b)
{
	if (t->prec == MLP_F32)
		return;
	size_t in = (size_t)t->shape.dims[l], out = (size_t)t->shape.dims[l + 1];
	mlp_widen(t->wf, (const uint16_t *)*W, out * in, t->prec);
	*W = t->wf;
	if (b) {
		mlp_widen(t->bf, (const uint16_t *)*b, out, t->prec);
		*b = t->bf;
	}
}

/* Forward through every unit on n samples in t->work.act[0]. */
static int forward(trainer *t, int n)
{
	int rc;
	for (int l = 0; l < t->shape.n_layers; l++) {
		if ((rc = accel_unit_pre_forward(t->ctx, t->unit[l])))
			return fail(t, "pre-forward hook", rc);
		const float *W = accel_param_data(t->ctx, t->weight[l]);
		const float *b = accel_param_data(t->ctx, t->bias[l]);
		if (!W || !b)
			return fail(t, "parameters not available in forward", ACCEL_ERR_STATE);
		if (!t->gpu && n > 0)
			widen_layer(t, l, &W, &b);
		if (n > 0 && t->gpu) {
			if (mlp_cuda_forward_layer(t->gpu, l, W, b, n))
				return gpu_fail(t, "forward");
		} else if (n > 0 && t->fp8) {
			if ((rc = mlp_fp8_forward_layer(t->fp8, &t->shape, &t->work, l, W, b, n)))
				return fail(t, "fp8 forward", rc);
		} else if (n > 0) {
			mlp_forward_layer(&t->shape, &t->work, l, W, b, n);
		}
		if ((rc = accel_unit_post_forward(t->ctx, t->unit[l])))
			return fail(t, "post-forward hook", rc);
	}
	return 0;
}

static int backward(trainer *t, int n)
{
	/* 0 on a step's first micro-step: write the gradients (overwrite mode,
	 * set before accel_prepare), so accel never zeroes them. */
	int acc = accel_grad_accumulate(t->ctx);
	int rc;
	for (int l = t->shape.n_layers - 1; l >= 0; l--) {
		if ((rc = accel_unit_pre_backward(t->ctx, t->unit[l])))
			return fail(t, "pre-backward hook", rc);
		const float *W = accel_param_data(t->ctx, t->weight[l]);
		float *dW = accel_param_grad(t->ctx, t->weight[l]);
		float *db = accel_param_grad(t->ctx, t->bias[l]);
		if (!W || !dW || !db)
			return fail(t, "gradients not available in backward", ACCEL_ERR_STATE);
		if (!t->gpu)
			widen_layer(t, l, &W, NULL);
		if (t->gpu) {
			if (mlp_cuda_backward_layer(t->gpu, l, W, dW, db, n, acc))
				return gpu_fail(t, "backward");
		} else if (t->fp8) {
			if ((rc = mlp_fp8_backward_layer(t->fp8, &t->shape, &t->work, l, W, dW, db, n, acc)))
				return fail(t, "fp8 backward", rc);
		} else {
			mlp_backward_layer(&t->shape, &t->work, l, W, dW, db, n, acc);
		}
		if ((rc = accel_unit_post_backward(t->ctx, t->unit[l])))
			return fail(t, "post-backward hook", rc);
	}
	return 0;
}

static int load_batch(trainer *t, const mlp_data *d, const int64_t *idx, int n)
{
	if (t->gpu)
		return mlp_cuda_load_batch(t->gpu, idx, n) ? gpu_fail(t, "loading the batch") : 0;
	for (int i = 0; i < n; i++) {
		memcpy(t->xb + (size_t)i * d->dim, d->x + (size_t)idx[i] * d->dim,
		       (size_t)d->dim * sizeof(float));
		t->yb[i] = d->y[idx[i]];
	}
	/* the input in the working dtype, as a 16-bit program holds it */
	mlp_round(t->xb, (size_t)n * (size_t)d->dim, t->prec);
	t->work.act[0] = t->xb;
	return 0;
}

/* Loss and accuracy over a data set, split evenly over the ranks in
 * contiguous slices; sums are reduced so every rank gets the totals. */
static int evaluate_pass(trainer *t, const mlp_data *d, int set, double *ret_loss,
                         double *ret_acc)
{
	int rank = accel_rank(t->ctx), world = accel_world_size(t->ctx);
	int64_t lo = d->n * rank / world, hi = d->n * (rank + 1) / world;
	double sums[2] = {0, 0};     /* loss, correct */
	int rc;
	for (int64_t i = lo; i < hi; i += t->work.cap) {
		int n = (int)(hi - i < t->work.cap ? hi - i : t->work.cap);
		if (t->gpu) {
			/* sums stay on the device until the slice is done */
			if (mlp_cuda_load_slice(t->gpu, set, i, n))
				return gpu_fail(t, "loading an evaluation batch");
			if (forward(t, n))
				return -1;
			if (mlp_cuda_eval(t->gpu, n))
				return gpu_fail(t, "evaluating");
			continue;
		}
		t->work.act[0] = d->x + (size_t)i * d->dim;
		if (t->prec != MLP_F32) {
			memcpy(t->xb, t->work.act[0], (size_t)n * (size_t)d->dim * sizeof(float));
			mlp_round(t->xb, (size_t)n * (size_t)d->dim, t->prec);
			t->work.act[0] = t->xb;
		}
		if (forward(t, n))
			return -1;
		int correct;
		sums[0] += mlp_eval_loss(&t->shape, &t->work, d->y + i, n, &correct);
		sums[1] += correct;
	}
	/* Every rank makes the same number of collective calls whatever its
	 * slice: the hooks above may be collectives under sharded strategies,
	 * so ranks with fewer batches join with empty ones. */
	int64_t max_slice = (d->n + world - 1) / world;
	int64_t max_batches = (max_slice + t->work.cap - 1) / t->work.cap;
	int64_t mine = (hi - lo + t->work.cap - 1) / t->work.cap;
	for (int64_t k = mine; k < max_batches; k++)
		if (forward(t, 0))
			return -1;
	if (t->gpu && mlp_cuda_take_eval(t->gpu, &sums[0], &sums[1]))
		return gpu_fail(t, "reading the evaluation sums");
	if ((rc = accel_allreduce(t->ctx, sums, sums, 2, ACCEL_DTYPE_F64, ACCEL_RED_SUM)))
		return fail(t, "reducing evaluation results", rc);
	*ret_loss = sums[0] / (double)d->n;
	*ret_acc = sums[1] / (double)d->n;
	return 0;
}

/* A forward-only pass (accel_set_grad_enabled(ctx, 0)) around `rc = call`:
 * the unit hooks then tell a sharded strategy that no backward follows, so
 * it gathers each unit and frees it again (nothing kept or prefetched for
 * a backward). */
#define FORWARD_ONLY(t, rc, call)                                                   \
	do {                                                                            \
		int fo_rc_;                                                                 \
		if ((fo_rc_ = accel_set_grad_enabled((t)->ctx, 0))) {                       \
			(rc) = fail((t), "starting a forward-only pass", fo_rc_);                \
			break;                                                                  \
		}                                                                           \
		(rc) = (call);                                                              \
		if ((fo_rc_ = accel_set_grad_enabled((t)->ctx, 1)) && !(rc))                 \
			(rc) = fail((t), "ending a forward-only pass", fo_rc_);                  \
	} while (0)

static int evaluate(trainer *t, const mlp_data *d, int set, double *ret_loss, double *ret_acc)
{
	int rc;
	FORWARD_ONLY(t, rc, evaluate_pass(t, d, set, ret_loss, ret_acc));
	return rc;
}

/* Full parameters to a safetensors file, written by the main process, or
 * by every process when `every_rank` (each to its own path).  The unit
 * hooks make sharded strategies gather each unit's parameters; every
 * process calls this either way, since the gathering is collective. */
static int save_params_pass(trainer *t, const char *path, const char *const *meta, int n_meta,
                            int every_rank)
{
	int writer = every_rank || accel_is_main(t->ctx), rc, ret = -1,
	    n = 2 * t->shape.n_layers;
	st_tensor *ts = calloc((size_t)n, sizeof(*ts));
	float **copies = calloc((size_t)n, sizeof(*copies));
	char (*names)[32] = calloc((size_t)n, sizeof(*names));
	char err[512];
	if (!ts || !copies || !names) {
		fprintf(stderr, "train_mlp: out of memory\n");
		goto out;
	}
	for (int l = 0; l < t->shape.n_layers; l++) {
		if ((rc = accel_unit_pre_forward(t->ctx, t->unit[l]))) {
			fail(t, "gathering parameters", rc);
			goto out;
		}
		for (int j = 0; j < 2 && writer; j++) {
			uint32_t p = j ? t->bias[l] : t->weight[l];
			int k = 2 * l + j;
			size_t numel = (size_t)accel_param_numel(t->ctx, p);
			const float *src = accel_param_data(t->ctx, p);
			copies[k] = malloc(numel * sizeof(float));
			if (!src || !copies[k]) {
				fprintf(stderr, "train_mlp: %s: cannot copy %s\n", path,
				        accel_param_name(t->ctx, p));
				accel_unit_post_forward(t->ctx, t->unit[l]);
				goto out;
			}
			if (t->gpu && mlp_cuda_to_host(t->gpu, copies[k], src, numel)) {
				gpu_fail(t, "copying the parameters to the host");
				accel_unit_post_forward(t->ctx, t->unit[l]);
				goto out;
			} else if (!t->gpu && t->prec != MLP_F32) {
				mlp_widen(copies[k], (const uint16_t *)src, numel, t->prec);
			} else if (!t->gpu) {
				memcpy(copies[k], src, numel * sizeof(float));
			}
			snprintf(names[k], sizeof(names[k]), "%s", accel_param_name(t->ctx, p));
			ts[k] = (st_tensor){.name = names[k], .dtype = "F32", .data = copies[k],
			                    .nbytes = numel * sizeof(float)};
			if (j == 0) {
				ts[k].ndim = 2;
				ts[k].shape[0] = t->shape.dims[l + 1];
				ts[k].shape[1] = t->shape.dims[l];
			} else {
				ts[k].ndim = 1;
				ts[k].shape[0] = t->shape.dims[l + 1];
			}
		}
		if ((rc = accel_unit_post_forward(t->ctx, t->unit[l]))) {
			fail(t, "releasing parameters", rc);
			goto out;
		}
	}
	if (writer && st_write(path, ts, n, meta, n_meta, err, sizeof(err))) {
		fprintf(stderr, "train_mlp: %s\n", err);
		goto out;
	}
	ret = 0;
out:
	for (int k = 0; copies && k < n; k++)
		free(copies[k]);
	free(copies);
	free(ts);
	free(names);
	return ret;
}

/* save_params_pass in a forward-only pass (the gathers are not for a
 * backward). */
static int save_params(trainer *t, const char *path, const char *const *meta, int n_meta,
                       int every_rank)
{
	int rc;
	FORWARD_ONLY(t, rc, save_params_pass(t, path, meta, n_meta, every_rank));
	return rc;
}

static int save_data(const char *dir, const mlp_data *d, const char *const *meta, int n_meta)
{
	char path[4096], err[512];
	snprintf(path, sizeof(path), "%s/data.safetensors", dir);
	/* i64 first so both tensors stay aligned to their element size. */
	st_tensor ts[2] = {
		{.name = "y", .dtype = "I64", .ndim = 1, .shape = {d->n}, .data = d->y,
		 .nbytes = (size_t)d->n * sizeof(int64_t)},
		{.name = "x", .dtype = "F32", .ndim = 2, .shape = {d->n, d->dim}, .data = d->x,
		 .nbytes = (size_t)d->n * (size_t)d->dim * sizeof(float)},
	};
	if (st_write(path, ts, 2, meta, n_meta, err, sizeof(err))) {
		fprintf(stderr, "train_mlp: %s\n", err);
		return -1;
	}
	return 0;
}

static int make_dir(const char *dir)
{
	if (mkdir(dir, 0777) && errno != EEXIST) {
		fprintf(stderr, "train_mlp: cannot create directory %s: %s\n", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* --resume DIR, or "latest": the newest committed checkpoint of the
 * project directory (what its "latest" names, unless a save's update of
 * it failed: accel_latest_checkpoint). */
static int resume_dir(accel_ctx *ctx, const options *o, char *buf, size_t cap)
{
	if (strcmp(o->resume, "latest")) {
		snprintf(buf, cap, "%s", o->resume);
		return 0;
	}
	if (accel_latest_checkpoint(ctx, o->project_dir, buf, cap) != ACCEL_OK) {
		fprintf(stderr, "train_mlp: --resume latest: %s (no checkpoint was saved into "
		        "--project-dir %s?)\n", accel_errmsg(ctx), o->project_dir);
		return -1;
	}
	return 0;
}

/* Timing of the steps after --warmup: wall time per optimizer step, and
 * where the micro-steps spend it (for --json). */
#define TM_PHASES 5
static const char *const tm_phase_names[TM_PHASES] = {"data", "forward", "loss", "backward",
                                                      "step"};

typedef struct timing {
	int on;
	double t0, cpu0, last;   /* start (wall, process CPU), end of the last step */
	double *step_s;          /* wall time of each timed optimizer step */
	long n, micro;           /* timed optimizer steps, micro-steps */
	double phase[TM_PHASES]; /* seconds, summed over the timed micro-steps */
} timing;

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Timing starts when the device has finished the work before it. */
static int timing_start(trainer *t, timing *tm)
{
	if (t->gpu && mlp_cuda_sync(t->gpu))
		return gpu_fail(t, "waiting for the warm-up steps");
	tm->on = 1;
	tm->t0 = tm->last = now();
	tm->cpu0 = cpu_now();
	return 0;
}

static void timing_step(timing *tm)
{
	double tn = now();
	tm->step_s[tm->n++] = tn - tm->last;
	tm->last = tn;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* One line of JSON on stdout, from every process (rank 0's is the one to
 * quote: the ranks run in lock-step); the field names match
 * bench/torch_ddp_mlp.py. */
static void timing_json(const trainer *t, timing *tm, const options *o, int rank, int world,
                        const char *dims, double elapsed, double cpu)
{
	char host[256] = "unknown";
	long n = tm->n > 0 ? tm->n : 1;
	double micro = tm->micro > 0 ? (double)tm->micro : 1;
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = 0;
	qsort(tm->step_s, (size_t)tm->n, sizeof(double), cmp_double);
	double med = tm->n == 0 ? 0
	             : tm->n % 2 ? tm->step_s[tm->n / 2]
	                         : 0.5 * (tm->step_s[tm->n / 2 - 1] + tm->step_s[tm->n / 2]);
	printf("{\"bench\":\"train_mlp\",\"impl\":\"accel\",\"world\":%d,\"rank\":%d,"
	       "\"batch_per_rank\":%ld,"
	       "\"dims\":\"%s\",\"steps\":%ld,\"warmup\":%ld,\"micro_steps\":%ld,"
	       "\"ms_per_step\":%.3f,\"ms_per_step_median\":%.3f,\"samples_per_s\":%.1f,"
	       "\"cpu_ms_per_step\":%.3f",
	       world, rank, o->batch / world, dims, tm->n, o->warmup, tm->micro, 1e3 * elapsed / (double)n,
	       1e3 * med, (double)tm->micro * (double)o->batch / elapsed, 1e3 * cpu / (double)n);
	for (int k = 0; k < TM_PHASES; k++)
		printf(",\"ms_%s\":%.3f", tm_phase_names[k], 1e3 * tm->phase[k] / micro);
	/* CLOCK_MONOTONIC bounds of the timed steps, to cut a profile recorded
	 * with the same clock (bench/overhead.sh: perf record -k monotonic). */
	printf(",\"t_start\":%.6f,\"t_end\":%.6f", tm->t0, tm->last);
	if (t->gpu)   /* the GPU's step times are wall times between device syncs */
		printf(",\"device\":\"cuda:%d\",\"dtype\":\"%s\",\"gemm\":\"%s\",\"stream\":\"%s\"",
		       (int)t->dev_index, accel_dtype_name(t->dtype),
		       mlp_cuda_name(t->gpu), mlp_cuda_stream(t->gpu) ? "own" : "legacy");
	else
		printf(",\"device\":\"cpu\",\"dtype\":\"%s\",\"blas\":\"%s\"",
		       accel_dtype_name(t->dtype), blas_name());
	printf(",\"host\":\"%s\"}\n", host);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	options o;
	trainer t = {0};
	timing tm = {0};
	mlp_data train = {0}, test = {0};
	accel_sampler *sampler = NULL;
	int ret = EXIT_FAILURE, rc;
	char lr_set[64], seed_set[64], pd_set[4200];

	switch (parse_args(argc, argv, &o)) {
	case 1: return EXIT_SUCCESS;
	case -1: return 2;
	}
	if (o.lr > 0) {
		snprintf(lr_set, sizeof(lr_set), "optimizer.params.lr=%.17g", o.lr);
		o.sets[o.n_sets++] = lr_set;
	}
	if (o.no_shuffle)
		o.sets[o.n_sets++] = "dataloader.shuffle=false";
	/* the project directory accel checks and locks at accel_prepare */
	if (o.checkpoint_every || o.resume) {
		snprintf(pd_set, sizeof(pd_set), "project_dir=%s", o.project_dir);
		o.sets[o.n_sets++] = pd_set;
	}
	if (o.seed >= 0) {
		snprintf(seed_set, sizeof(seed_set), "seed=%lld", o.seed);
		o.sets[o.n_sets++] = seed_set;
	}
	o.sets[o.n_sets] = NULL;

	/* One BLAS thread per process: accel runs one process per core. */
	blas_single_thread();

	accel_opts ao = {.struct_size = sizeof(ao), .config_path = o.config, .sets = o.sets};
	if ((rc = accel_ctx_new(&ao, &t.ctx))) {
		fail(&t, "starting accel", rc);
		goto out;
	}
	int world = accel_world_size(t.ctx);
	if (o.batch % world) {
		fprintf(stderr, "train_mlp: --batch-size %ld is not a multiple of the %d processes; "
		        "each process must get the same number of samples for its mean loss to "
		        "average to the global mean\n", o.batch, world);
		ret = 2;
		goto out;
	}
	accel_sampler_opts so;
	accel_sampler_opts_init(&so);
	so.n_samples = (uint64_t)o.samples;
	so.batch_size = (uint64_t)o.batch;
	/* --batch-size is the global batch.  Shuffling, drop_last and
	 * even_batches come from the configuration (dataloader.*). */
	so.split_batches = 1;
	if ((rc = accel_sampler_new(t.ctx, &so, &sampler))) {
		fail(&t, "creating the sampler", rc);
		goto out;
	}
	/* Every process must get a batch on every step (the steps are
	 * collective): even_batches pads the last one, drop_last drops it. */
	accel_sampler_info si = {.struct_size = sizeof(si)};
	if ((rc = accel_sampler_get_info(sampler, &si))) {
		fail(&t, "reading the sampler", rc);
		goto out;
	}
	if (world > 1 && !si.even_batches && !si.drop_last) {
		fprintf(stderr, "train_mlp: dataloader.even_batches=false needs dataloader.drop_last=true "
		        "here: otherwise a process can get no samples in an epoch's last step while "
		        "the others train on theirs\n");
		ret = 2;
		goto out;
	}
	if (si.num_batches == 0) {
		fprintf(stderr, "train_mlp: no batch to train on: %ld samples, global batch %ld and "
		        "dataloader.drop_last=true leave none (lower --batch-size or raise "
		        "--samples)\n", o.samples, o.batch);
		ret = 2;
		goto out;
	}
	/* Outputs, before any work: rank 0 writes them, so rank 0 checks the
	 * paths, makes the --save-init directory and opens the metrics file
	 * (--metrics, else the configuration's metrics_file); every process
	 * then learns the outcome, so all stop together (2: bad usage, 1: the
	 * metrics file could not be opened) instead of waiting for rank 0 in a
	 * collective until comm.timeout_s. */
	const char *metrics_file = o.metrics;
	if (!metrics_file && accel_config_string(t.ctx, "metrics_file", &metrics_file) != ACCEL_OK)
		metrics_file = NULL;
	int32_t verdict = 0;
	if (accel_is_main(t.ctx)) {
		if (bad_output(o.save_init, "--save-init", 1, NULL) ||
		    bad_output(o.save_final, "--save-final", 0, o.save_init) ||
		    bad_ranks_output(o.save_final_ranks, o.save_init) ||
		    (metrics_file && strcmp(metrics_file, "-") &&
		     bad_output(metrics_file, o.metrics ? "--metrics" : "metrics_file", 2, o.save_init)))
			verdict = 2;
		else if (o.save_init && make_dir(o.save_init))
			verdict = 1;
		else if (o.checkpoint_every && make_dir(o.project_dir))
			verdict = 1;
		else if (metrics_file && (rc = accel_metrics_open(t.ctx, metrics_file))) {
			fail(&t, "opening the metrics file", rc);
			verdict = 1;
		}
	}
	if ((rc = accel_allreduce(t.ctx, &verdict, &verdict, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
		fail(&t, "agreeing on the output files", rc);
		goto out;
	}
	if (verdict) {
		/* every rank says why it stops: errors are not main-process-only
		 * output, and a rank that exits without a word leaves the
		 * launcher's summary with nothing to show */
		if (!accel_is_main(t.ctx))
			fprintf(stderr, "train_mlp: rank %d: stopping: rank 0 %s (its message above "
			        "says why)\n", accel_rank(t.ctx),
			        verdict == 2 ? "refused an output path" : "could not create an output");
		ret = verdict == 2 ? 2 : EXIT_FAILURE;
		goto out;
	}
	/* Trackers (log_with) write into logging_dir: logging them needs no
	 * --metrics. */
	const char *logging_dir = NULL;
	int log_metrics = metrics_file != NULL ||
	                  (accel_config_string(t.ctx, "logging_dir", &logging_dir) == ACCEL_OK &&
	                   *logging_dir);
	int64_t seed;
	if ((rc = accel_config_int(t.ctx, "seed", &seed))) {
		fail(&t, "reading the configuration key 'seed'", rc);
		goto out;
	}
	int on_gpu = o.device && strcmp(o.device, "cpu") != 0;
	if (choose_dtype(&t, &o, on_gpu) || (on_gpu && gpu_choose(&t, &o)))
		goto out;
	if (mlp_shape_init(&t.shape, o.inputs, o.hidden, o.layers, o.classes) ||
	    (!on_gpu && mlp_work_init(&t.work, &t.shape, (int)(o.batch / world)))) {
		fprintf(stderr, "train_mlp: out of memory for the model's activations\n");
		goto out;
	}
	t.work.prec = t.prec;
	if (!on_gpu && t.prec != MLP_F32) {
		size_t wmax = 0, bmax = 0;
		for (int l = 0; l < t.shape.n_layers; l++) {
			size_t wn = (size_t)t.shape.dims[l] * (size_t)t.shape.dims[l + 1];
			wmax = wn > wmax ? wn : wmax;
			bmax = (size_t)t.shape.dims[l + 1] > bmax ? (size_t)t.shape.dims[l + 1] : bmax;
		}
		t.wf = malloc(wmax * sizeof(float));
		t.bf = malloc(bmax * sizeof(float));
		if (!t.wf || !t.bf) {
			fprintf(stderr, "train_mlp: out of memory for the f32 copy of a layer\n");
			goto out;
		}
	}
	if (on_gpu)   /* activations live on the GPU (mlp_cuda) */
		t.work.cap = (int)(o.batch / world);

	/* The data: every process makes the same set from the seed. */
	if (mlp_data_make(&train, 0, o.samples, o.inputs, o.classes, o.modes, o.sep, o.noise,
	                  (uint64_t)seed) ||
	    (o.test_samples > 0 &&
	     mlp_data_make(&test, o.samples, o.test_samples, o.inputs, o.classes, o.modes, o.sep,
	                   o.noise, (uint64_t)seed))) {
		fprintf(stderr, "train_mlp: out of memory for the data set\n");
		goto out;
	}

	if (on_gpu) {
		char err[600];
		int32_t bad = 0;
		if (mlp_cuda_new(&t.shape, t.work.cap, t.dev_index, t.prec, &train,
		                 &test, &t.gpu, err, sizeof(err))) {
			fprintf(stderr, "train_mlp: --device %s: %s\n", o.device, err);
			bad = 1;
		}
		/* all stop together when one process has no GPU work space (out
		 * of memory, say), instead of waiting for it in accel_prepare */
		if ((rc = accel_allreduce(t.ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
			fail(&t, "agreeing on the GPU set-up", rc);
			goto out;
		}
		if (bad)
			goto out;
		/* compute on a non-blocking stream of our own, and tell accel: its
		 * ops, optimizer step and the waits for ddp's reductions go on it,
		 * ordered after backward without host syncs (docs/streams.md) */
		if (!o.legacy_stream) {
			if (mlp_cuda_use_stream(t.gpu, 1)) {
				gpu_fail(&t, "creating the compute stream");
				goto out;
			}
			if ((rc = accel_set_stream(t.ctx, mlp_cuda_stream(t.gpu)))) {
				fail(&t, "accel_set_stream", rc);
				goto out;
			}
		}
	}
	t.fp8_on = mlp_fp8_wanted(t.ctx);
	if (register_model(&t))
		goto out;
	/* backward() writes every gradient on a step's first micro-step (GEMM
	 * beta 0) and adds on the others, so accel need not zero them. */
	if ((rc = accel_set_grad_overwrite(t.ctx, 1))) {
		fail(&t, "accel_set_grad_overwrite", rc);
		goto out;
	}
	if ((rc = accel_prepare(t.ctx)) ||
	    (t.fp8_on && (rc = mlp_fp8_new(t.ctx, &t.shape, t.weight, t.work.cap, t.gpu, t.dev_index,
	                                   &t.fp8)))) {
		fail(&t, "accel_prepare", rc);
		goto out;
	}

	char dims[256], seedstr[32], stepsstr[32];
	int dl = 0;
	for (int l = 0; l <= t.shape.n_layers; l++)
		dl += snprintf(dims + dl, sizeof(dims) - (size_t)dl, "%s%d", l ? "-" : "",
		               t.shape.dims[l]);
	snprintf(seedstr, sizeof(seedstr), "%" PRId64, seed);
	const char *meta_init[] = {"format", "pt", "producer", "accel train_mlp", "dims", dims,
	                           "seed", seedstr};
	if (o.save_init) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/init.safetensors", o.save_init);
		if (save_params(&t, path, meta_init, 4, 0))
			goto out;
		if (accel_is_main(t.ctx) && save_data(o.save_init, &train, meta_init + 4, 2))
			goto out;
		accel_print(t.ctx, "saved %s and %s/data.safetensors\n", path, o.save_init);
	}

	t.xb = malloc((size_t)t.work.cap * (size_t)o.inputs * sizeof(float));
	t.yb = malloc((size_t)t.work.cap * sizeof(int64_t));
	t.idx = malloc((size_t)t.work.cap * sizeof(int64_t));
	if (!t.xb || !t.yb || !t.idx) {
		fprintf(stderr, "train_mlp: out of memory\n");
		goto out;
	}

	if (t.gpu)
		accel_print(t.ctx, "train_mlp: %s, %d process%s, global batch %ld, %ld samples, "
		            "%s, lr %g\n", dims, world, world > 1 ? "es" : "", o.batch, o.samples,
		            mlp_cuda_name(t.gpu), accel_get_lr(t.ctx));
	else
		accel_print(t.ctx, "train_mlp: %s, %d process%s, global batch %ld, %ld samples, "
		            "BLAS %s%s, lr %g\n", dims, world, world > 1 ? "es" : "", o.batch,
		            o.samples, blas_name(), t.prec == MLP_BF16  ? ", bf16 weights"
		                                    : t.prec == MLP_F16 ? ", f16 weights" : "",
		            accel_get_lr(t.ctx));

	/* --warmup steps first, then the --steps timed ones. */
	long total = o.warmup + o.steps;
	double t0 = now(), t_log = t0, window[2] = {0, 0};   /* loss sum, steps */
	/* a job restarted by accel launch --max-restarts is at the step of the
	 * checkpoint accel_prepare resumed (ACCEL_RESUME); 0 otherwise */
	long done = (long)accel_get_step(t.ctx), micro = 0, logged_at = 0;
	if (o.resume) {
		char dir[4096];
		int32_t bad = resume_dir(t.ctx, &o, dir, sizeof(dir)) ? 1 : 0;
		if ((rc = accel_allreduce(t.ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
			fail(&t, "agreeing on --resume", rc);
			goto out;
		}
		if (bad) {
			ret = 2;
			goto out;
		}
		if ((rc = accel_load_state(t.ctx, dir))) {
			fail(&t, "--resume: accel_load_state", rc);
			goto out;
		}
		done = (long)accel_get_step(t.ctx);
		if (done > total) {
			fprintf(stderr, "train_mlp: --resume %s: the checkpoint is at step %ld, past "
			        "--steps %ld\n", dir, done, total);
			ret = 2;
			goto out;
		}
		accel_print(t.ctx, "resumed from %s at step %ld\n", dir, done);
	}
	if (!(tm.step_s = malloc((size_t)o.steps * sizeof(double)))) {
		fprintf(stderr, "train_mlp: out of memory\n");
		goto out;
	}
	if (done >= o.warmup && timing_start(&t, &tm))
		goto out;
	/* The bar on a terminal, a line per --log-every otherwise. */
	if ((rc = accel_progress_begin(t.ctx, (uint64_t)done, (uint64_t)total))) {
		fail(&t, "accel_progress_begin", rc);
		goto out;
	}
	while (done < total) {
		uint32_t count;
		double c0 = now(), c1, c2, c3, c4;
		if ((rc = accel_sampler_next(sampler, t.idx, &count))) {
			fail(&t, "sampler", rc);
			goto out;
		}
		if (count == 0)    /* end of epoch: the sampler moved to the next */
			continue;
		if (load_batch(&t, &train, t.idx, (int)count))
			goto out;
		c1 = now();
		if (forward(&t, (int)count))
			goto out;
		c2 = now();
		/* Mean over this rank's slice, times the loss scale of a precision
		 * plugin (1 without one): dlogits = scale * (p - onehot) / count. */
		double scale = accel_loss_scale(t.ctx);
		double loss = 0;
		if (t.gpu && mlp_cuda_loss(t.gpu, (int)count, (double)count / scale,
		                           1.0 / (double)count)) {
			gpu_fail(&t, "the loss");
			goto out;
		} else if (!t.gpu) {
			loss = mlp_loss(&t.shape, &t.work, t.yb, (int)count, (double)count / scale, NULL) /
			       (double)count;
		}
		c3 = now();
		if (backward(&t, (int)count))
			goto out;
		c4 = now();
		int sync = accel_sync_gradients(t.ctx);
		if ((rc = accel_step(t.ctx))) {
			fail(&t, "accel_step", rc);
			goto out;
		}
		if (tm.on) {
			double p[TM_PHASES] = {c1 - c0, c2 - c1, c3 - c2, c4 - c3, now() - c4};
			for (int k = 0; k < TM_PHASES; k++)
				tm.phase[k] += p[k];
			tm.micro++;
		}
		micro++;
		window[0] += loss;
		window[1] += 1;
		if (!sync)
			continue;
		done++;
		if (done % o.log_every == 0 || done == total) {
			/* The GPU sums the losses of the micro-steps on the device. */
			if (t.gpu && mlp_cuda_take_train_loss(t.gpu, &window[0])) {
				gpu_fail(&t, "reading the loss");
				goto out;
			}
			/* The mean of the ranks' means is the global batch mean (equal
			 * slices). */
			if ((rc = accel_allreduce(t.ctx, window, window, 2, ACCEL_DTYPE_F64,
			                          ACCEL_RED_AVG))) {
				fail(&t, "reducing the loss", rc);
				goto out;
			}
			double tn = now();
			/* Micro-steps, not optimizer steps: each consumes one global batch. */
			double sps = (double)(micro - logged_at) * (double)o.batch / (tn - t_log);
			double mean = window[0] / window[1];
			if ((rc = accel_progress_update(t.ctx, (uint64_t)done, (uint64_t)micro *
			                                (uint64_t)o.batch, mean))) {
				fail(&t, "accel_progress_update", rc);
				goto out;
			}
			if (log_metrics &&
			    (rc = step_metrics_log(t.ctx, (uint64_t)done, mean, sps, 0, NULL, NULL))) {
				fail(&t, "writing metrics", rc);
				goto out;
			}
			window[0] = window[1] = 0;
			t_log = tn;
			logged_at = micro;
		} else if ((rc = accel_progress_update(t.ctx, (uint64_t)done,
		                                       (uint64_t)micro * (uint64_t)o.batch, NAN))) {
			fail(&t, "accel_progress_update", rc);
			goto out;
		}
		if (o.checkpoint_every && done % o.checkpoint_every == 0) {
			char dir[4096];
			snprintf(dir, sizeof(dir), "%s/checkpoint_%ld", o.project_dir, done);
			if ((rc = accel_save_state(t.ctx, dir))) {
				fail(&t, "accel_save_state", rc);
				goto out;
			}
			accel_print(t.ctx, "saved checkpoint %s\n", dir);
		}
		if (o.die_step && done == o.die_step && accel_rank(t.ctx) == o.die_rank)
			die_drill(&o);
		if (tm.on)
			timing_step(&tm);
		else if (done == o.warmup && timing_start(&t, &tm))
			goto out;
	}
	if ((rc = accel_progress_end(t.ctx))) {
		fail(&t, "accel_progress_end", rc);
		goto out;
	}
	/* The GPU may still be running the last steps. */
	if (t.gpu && mlp_cuda_sync(t.gpu)) {
		gpu_fail(&t, "finishing the steps");
		goto out;
	}
	if (tm.on && tm.n > 0) {
		double tn = now();
		tm.step_s[tm.n - 1] += tn - tm.last;
		tm.last = tn;
	}
	double elapsed = now() - tm.t0, cpu = cpu_now() - tm.cpu0;

	accel_print(t.ctx, "trained %ld steps (%ld global batches) in %.1f s (%.0f samples/s)%s\n",
	            tm.n, tm.micro, elapsed, (double)tm.micro * (double)o.batch / elapsed,
	            o.warmup ? " after the warm-up steps" : "");
	if (o.json)
		timing_json(&t, &tm, &o, accel_rank(t.ctx), world, dims, elapsed, cpu);
	if (!o.no_eval) {
		double train_loss, train_acc, test_loss = 0, test_acc = 0;
		if (evaluate(&t, &train, 0, &train_loss, &train_acc) ||
		    (test.n && evaluate(&t, &test, 1, &test_loss, &test_acc)))
			goto out;
		accel_print(t.ctx, "train loss %.4f accuracy %.4f\n", train_loss, train_acc);
		if (test.n)
			accel_print(t.ctx, "final accuracy %.4f (test loss %.4f, %" PRId64
			            " held-out samples)\n", test_acc, test_loss, test.n);
	}

	if (o.save_final) {
		snprintf(stepsstr, sizeof(stepsstr), "%ld", done);
		const char *meta_final[] = {"format", "pt", "producer", "accel train_mlp", "dims", dims,
		                            "seed", seedstr, "steps", stepsstr};
		if (save_params(&t, o.save_final, meta_final, 5, 0))
			goto out;
		accel_print(t.ctx, "saved %s\n", o.save_final);
	}
	if (o.save_final_ranks) {
		char path[4096], rankstr[16];
		snprintf(stepsstr, sizeof(stepsstr), "%ld", done);
		snprintf(rankstr, sizeof(rankstr), "%d", accel_rank(t.ctx));
		snprintf(path, sizeof(path), "%s.rank%d.safetensors", o.save_final_ranks,
		         accel_rank(t.ctx));
		const char *meta_final[] = {"format", "pt", "producer", "accel train_mlp", "dims", dims,
		                            "seed", seedstr, "steps", stepsstr, "rank", rankstr};
		if (save_params(&t, path, meta_final, 6, 1))
			goto out;
		accel_print(t.ctx, "saved %s.rank<r>.safetensors, r < %d\n", o.save_final_ranks,
		            world);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {   /* --json into a full disk, say */
		fprintf(stderr, "train_mlp: writing the output failed: %s\n", strerror(errno));
		goto out;
	}
	ret = EXIT_SUCCESS;
out:
	sampler = accel_sampler_free(sampler);
	/* the model's device memory and the context's use of the stream go
	 * with the context; then the work space and its stream */
	t.ctx = accel_ctx_free(t.ctx);
	t.fp8 = mlp_fp8_free(t.fp8);   /* unhooks from t.gpu: first */
	mlp_cuda_free(t.gpu);
	free(t.xb);
	free(t.yb);
	free(t.idx);
	free(t.wf);
	free(t.bf);
	free(tm.step_s);
	mlp_work_free(&t.work);
	mlp_data_free(&train);
	mlp_data_free(&test);
	t.ctx = accel_ctx_free(t.ctx);
	return ret;
}
