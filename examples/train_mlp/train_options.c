/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_options.c: train_mlp's command line: --help,
 * and the flags into `options` (train_mlp.h).  Everything a flag can get
 * wrong is said here, before accel starts; main turns the configuration
 * keys some flags stand for (--lr, --seed, --no-shuffle) into --set.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_mlp.h"

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
	        "  --crash-at R:S[:FILE] the same, but rank R first shuts its sockets and dies\n"
	        "                     1 s later: its peers see it gone before its death does\n"
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
int train_parse_args(int argc, char **argv, options *o)
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
		} else if (!strcmp(a, "--die-at") || !strcmp(a, "--hang-at") ||
		           !strcmp(a, "--crash-at")) {
			o->hang = !strcmp(a, "--hang-at");
			o->slow = !strcmp(a, "--crash-at");
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
