/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/train_options.c: accel-gpt2's command line: --help, and
 * the flags into `options` (train_gpt2.h), the model's sizes checked
 * (gpt2_config_check) before accel starts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_gpt2.h"

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: accel-gpt2 [options]            train GPT-2 with accel\n"
	        "       accel-gpt2 prepare IN OUT       byte-level token file (vocabulary 256)\n"
	        "Run directly or under `accel launch -n N --`; strategy, precision and\n"
	        "accumulation come from the accel configuration.\n"
	        "  --model NAME       tiny (2 layers, 2 heads, dim 32, seq 32, vocab 256; the\n"
	        "                     default) or gpt2 (124M: 12, 12, 768, 1024, 50257)\n"
	        "  --layers L --heads H --dim C --seq-len T --vocab V\n"
	        "                     override the model's sizes\n"
	        "  --untied           give the LM head its own weight instead of the token\n"
	        "                     embedding's\n"
	        "  --data FILE        token file (docs/data.md); without it, random tokens\n"
	        "  --random-tokens N  how many random tokens without --data (default 65536)\n"
	        "  --val-fraction F   the last F of the tokens are held out (default 0.1)\n"
	        "  --steps N          optimizer steps (default 100)\n"
	        "  --batch-size B     global batch of sequences, split over the processes\n"
	        "                     (default 8)\n"
	        "  --lr X             learning rate (sets optimizer.params.lr)\n"
	        "  --seed S           seed of the weights, shuffling and random tokens\n"
	        "  --eval-every N     held-out loss every N steps and at the end (0: only at\n"
	        "                     the end, the default)\n"
	        "  --eval-batches N   held-out batches per evaluation (default 8; 0: all)\n"
	        "  --sample N         after training, N greedy tokens from a held-out prompt\n"
	        "  --recompute        keep only block inputs; re-run each block's forward in\n"
	        "                     its backward\n"
	        "  --log-every N      progress line every N steps (default 10)\n"
	        "  --peak-tflops X    the device's peak, for the MFU in progress lines\n"
	        "  --checkpoint-every N, --project-dir DIR, --resume DIR|latest\n"
	        "                     as train_mlp (docs/checkpointing.md)\n"
	        "  --save-final FILE  trained parameters as safetensors (f32)\n"
	        "  --save-final-ranks PREFIX\n"
	        "                     every rank writes the parameters as it sees them to\n"
	        "                     PREFIX.rank<r>.safetensors (to compare the ranks)\n"
	        "  --metrics FILE     also write the progress as JSON lines to FILE ('-':\n"
	        "                     stdout): loss, lr, samples_per_s, loss_scale, skipped,\n"
	        "                     tokens_per_s, tflops, mfu (with --peak-tflops); val_loss\n"
	        "  --config FILE      accel configuration;  --set KEY=VALUE  override a key\n"
	        "  --device D         cpu (default), cuda (GPU local rank %% count) or cuda:N\n"
	        "                     (docs/gpt2.md, \"On a GPU\")\n");
}

static int parse_num(const char *flag, const char *v, double lo, double hi, double *ret)
{
	char *end;
	double x = v ? strtod(v, &end) : 0;
	if (!v || *end || end == v || !(x >= lo && x <= hi)) {
		fprintf(stderr, "accel-gpt2: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi,
		        v ? v : "(nothing)");
		return -1;
	}
	*ret = x;
	return 0;
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *ret)
{
	double x;
	if (parse_num(flag, v, (double)lo, (double)hi, &x))
		return -1;
	if (x != floor(x)) {
		fprintf(stderr, "accel-gpt2: %s needs an integer, got '%s'\n", flag, v);
		return -1;
	}
	*ret = (long)x;
	return 0;
}

int train_parse_args(int argc, char **argv, options *o)
{
	*o = (options){.steps = 100, .batch = 8, .lr = -1, .seed = -1, .log_every = 10,
	               .eval_batches = 8, .val_fraction = 0.1, .random_tokens = 65536,
	               .project_dir = "checkpoints"};
	gpt2_config_named(&o->c, "tiny");
	int sizes[5] = {-1, -1, -1, -1, -1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long x = 0;
		int r = 0;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--untied")) {
			o->untied = 1;
			continue;
		} else if (!strcmp(a, "--recompute")) {
			o->recompute = 1;
			continue;
		} else if (!strcmp(a, "--model")) {
			if (!v || gpt2_config_named(&o->c, v)) {
				fprintf(stderr, "accel-gpt2: --model needs tiny or gpt2, got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
		} else if (!strcmp(a, "--layers")) {
			r = parse_int(a, v, 1, 256, &x);
			sizes[0] = (int)x;
		} else if (!strcmp(a, "--heads")) {
			r = parse_int(a, v, 1, 4096, &x);
			sizes[1] = (int)x;
		} else if (!strcmp(a, "--dim")) {
			r = parse_int(a, v, 1, 65536, &x);
			sizes[2] = (int)x;
		} else if (!strcmp(a, "--seq-len")) {
			r = parse_int(a, v, 1, 65536, &x);
			sizes[3] = (int)x;
		} else if (!strcmp(a, "--vocab")) {
			r = parse_int(a, v, 2, 65536, &x);
			sizes[4] = (int)x;
		} else if (!strcmp(a, "--steps")) {
			r = parse_int(a, v, 1, 100000000, &o->steps);
		} else if (!strcmp(a, "--batch-size")) {
			r = parse_int(a, v, 1, 1 << 20, &o->batch);
		} else if (!strcmp(a, "--lr")) {
			r = parse_num(a, v, 1e-12, 1e6, &o->lr);
		} else if (!strcmp(a, "--seed")) {
			r = parse_int(a, v, 0, INT32_MAX, &x);
			o->seed = x;
		} else if (!strcmp(a, "--random-tokens")) {
			r = parse_int(a, v, 2, 1L << 34, &o->random_tokens);
		} else if (!strcmp(a, "--val-fraction")) {
			r = parse_num(a, v, 0.0, 0.9, &o->val_fraction);
		} else if (!strcmp(a, "--eval-every")) {
			r = parse_int(a, v, 0, 100000000, &o->eval_every);
		} else if (!strcmp(a, "--eval-batches")) {
			r = parse_int(a, v, 0, 100000000, &o->eval_batches);
		} else if (!strcmp(a, "--sample")) {
			r = parse_int(a, v, 0, 100000, &o->sample);
		} else if (!strcmp(a, "--log-every")) {
			r = parse_int(a, v, 1, 100000000, &x);
			o->log_every = (int)x;
		} else if (!strcmp(a, "--peak-tflops")) {
			r = parse_num(a, v, 1e-6, 1e9, &o->peak_tflops);
		} else if (!strcmp(a, "--checkpoint-every")) {
			r = parse_int(a, v, 1, 100000000, &o->checkpoint_every);
		} else if ((!strcmp(a, "--data") || !strcmp(a, "--save-final") ||
		            !strcmp(a, "--save-final-ranks") || !strcmp(a, "--metrics") ||
		            !strcmp(a, "--project-dir") || !strcmp(a, "--resume") ||
		            !strcmp(a, "--config")) && (!v || !strncmp(v, "--", 2))) {
			fprintf(stderr, "accel-gpt2: %s needs a path%s%s%s\n", a,
			        v ? ", not the option '" : "", v ? v : "", v ? "'" : "");
			return -1;
		} else if (!strcmp(a, "--data")) {
			o->data = v;
		} else if (!strcmp(a, "--save-final")) {
			o->save_final = v;
		} else if (!strcmp(a, "--save-final-ranks")) {
			if (strlen(v) > 4000) {
				fprintf(stderr, "accel-gpt2: --save-final-ranks: the prefix is longer than "
				        "4000 bytes\n");
				return -1;
			}
			o->save_final_ranks = v;
		} else if (!strcmp(a, "--metrics")) {
			o->metrics = v;
		} else if (!strcmp(a, "--project-dir")) {
			o->project_dir = v;
		} else if (!strcmp(a, "--resume")) {
			o->resume = v;
		} else if (!strcmp(a, "--config")) {
			o->config = v;
		} else if (!strcmp(a, "--device")) {
			if (!v || (strcmp(v, "cpu") && strcmp(v, "cuda") && strncmp(v, "cuda:", 5))) {
				fprintf(stderr, "accel-gpt2: --device needs cpu, cuda or cuda:N, got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
			if (!strncmp(v, "cuda:", 5) && parse_int(a, v + 5, 0, 1023, &x))
				return -1;
			o->device = v;
		} else if (!strcmp(a, "--set")) {
			if (!v || !strchr(v, '=') || o->n_sets >= 32) {
				fprintf(stderr, "accel-gpt2: --set needs KEY=VALUE (at most 32), got '%s'\n",
				        v ? v : "(nothing)");
				return -1;
			}
			o->sets[o->n_sets++] = v;
		} else {
			fprintf(stderr, "accel-gpt2: unknown option or missing value: '%s' (see --help)\n",
			        a);
			return -1;
		}
		if (r)
			return -1;
		i++;
	}
	int *dst[5] = {&o->c.layers, &o->c.heads, &o->c.dim, &o->c.seq, &o->c.vocab};
	for (int k = 0; k < 5; k++)
		if (sizes[k] > 0)
			*dst[k] = sizes[k];
	char err[256];
	if (gpt2_config_check(&o->c, err, sizeof(err))) {
		fprintf(stderr, "accel-gpt2: %s\n", err);
		return -1;
	}
	return 0;
}
