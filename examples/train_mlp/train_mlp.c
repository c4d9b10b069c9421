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
 * optimizer there too).  This file is the program's set-up and training
 * loop; train_mlp.h lists the files with the rest (the command line, the
 * model's registration and its forward and backward through accel's
 * hooks, evaluation, output files, timing).  See examples/README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <accel/accel.h>

#include "blas.h"
#include "step_metrics.h"
#include "train_mlp.h"

/* Report an accel failure with what we were doing; returns -1. */
int train_fail(const trainer *t, const char *what, int rc)
{
	const char *msg = t->ctx && *accel_errmsg(t->ctx) ? accel_errmsg(t->ctx) : "no message";
	size_t n = strlen(what);
	/* the library's message may name the call already ("accel_prepare: ...") */
	if (!strncmp(msg, what, n) && msg[n] == ':')
		fprintf(stderr, "train_mlp: %s (%s)\n", msg, accel_status_str(rc));
	else
		fprintf(stderr, "train_mlp: %s: %s (%s)\n", what, msg, accel_status_str(rc));
	return -1;
}

/* Report a failure of the GPU math; returns -1. */
int train_gpu_fail(const trainer *t, const char *what)
{
	fprintf(stderr, "train_mlp: %s on the GPU: %s\n", what, mlp_cuda_error(t->gpu));
	return -1;
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
	        o->hang ? "hang" : o->slow ? "crash" : "die", o->die_rank, o->die_step,
	        o->die_rank, o->hang ? "stops responding" : o->slow ? "cuts its connections and "
	        "kills itself 1 s later" : "kills itself", o->die_step);
	fflush(NULL);
	if (o->slow) {
		/* as a machine whose network goes first: the peers find the
		 * connections closed while this process is still alive */
		for (int fd = 3; fd < 4096; fd++)
			shutdown(fd, SHUT_RDWR);
		sleep(1);
	}
	if (!o->hang)
		raise(SIGKILL);
	for (;;)
		pause();   /* until a signal ends it: the launcher's SIGTERM */
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

	switch (train_parse_args(argc, argv, &o)) {
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
		train_fail(&t, "starting accel", rc);
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
		train_fail(&t, "creating the sampler", rc);
		goto out;
	}
	/* Every process must get a batch on every step (the steps are
	 * collective): even_batches pads the last one, drop_last drops it. */
	accel_sampler_info si = {.struct_size = sizeof(si)};
	if ((rc = accel_sampler_get_info(sampler, &si))) {
		train_fail(&t, "reading the sampler", rc);
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
		if (train_bad_output(o.save_init, "--save-init", 1, NULL) ||
		    train_bad_output(o.save_final, "--save-final", 0, o.save_init) ||
		    train_bad_ranks_output(o.save_final_ranks, o.save_init) ||
		    (metrics_file && strcmp(metrics_file, "-") &&
		     train_bad_output(metrics_file, o.metrics ? "--metrics" : "metrics_file", 2,
		                      o.save_init)))
			verdict = 2;
		else if (o.save_init && train_make_dir(o.save_init))
			verdict = 1;
		else if (o.checkpoint_every && train_make_dir(o.project_dir))
			verdict = 1;
		else if (metrics_file && (rc = accel_metrics_open(t.ctx, metrics_file))) {
			train_fail(&t, "opening the metrics file", rc);
			verdict = 1;
		}
	}
	if ((rc = accel_allreduce(t.ctx, &verdict, &verdict, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
		train_fail(&t, "agreeing on the output files", rc);
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
		train_fail(&t, "reading the configuration key 'seed'", rc);
		goto out;
	}
	int on_gpu = o.device && strcmp(o.device, "cpu") != 0;
	if (train_choose_dtype(&t, &o, on_gpu) || (on_gpu && train_choose_gpu(&t, &o)))
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
			train_fail(&t, "agreeing on the GPU set-up", rc);
			goto out;
		}
		if (bad)
			goto out;
		/* compute on a non-blocking stream of our own, and tell accel: its
		 * ops, optimizer step and the waits for ddp's reductions go on it,
		 * ordered after backward without host syncs (docs/streams.md) */
		if (!o.legacy_stream) {
			if (mlp_cuda_use_stream(t.gpu, 1)) {
				train_gpu_fail(&t, "creating the compute stream");
				goto out;
			}
			if ((rc = accel_set_stream(t.ctx, mlp_cuda_stream(t.gpu)))) {
				train_fail(&t, "accel_set_stream", rc);
				goto out;
			}
		}
	}
	t.fp8_on = mlp_fp8_wanted(t.ctx);
	if (train_register_model(&t))
		goto out;
	/* train_backward() writes every gradient on a step's first micro-step
	 * (GEMM beta 0) and adds on the others, so accel need not zero them. */
	if ((rc = accel_set_grad_overwrite(t.ctx, 1))) {
		train_fail(&t, "accel_set_grad_overwrite", rc);
		goto out;
	}
	if ((rc = accel_prepare(t.ctx)) ||
	    (t.fp8_on && (rc = mlp_fp8_new(t.ctx, &t.shape, t.weight, t.work.cap, t.gpu, t.dev_index,
	                                   &t.fp8)))) {
		train_fail(&t, "accel_prepare", rc);
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
		if (train_save_params(&t, path, meta_init, 4, 0))
			goto out;
		if (accel_is_main(t.ctx) && train_save_data(o.save_init, &train, meta_init + 4, 2))
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
	double t0 = train_now(), t_log = t0, window[2] = {0, 0};   /* loss sum, steps */
	/* a job restarted by accel launch --max-restarts is at the step of the
	 * checkpoint accel_prepare resumed (ACCEL_RESUME); 0 otherwise */
	long done = (long)accel_get_step(t.ctx), micro = 0, logged_at = 0;
	if (o.resume) {
		char dir[4096];
		int32_t bad = train_resume_dir(t.ctx, &o, dir, sizeof(dir)) ? 1 : 0;
		if ((rc = accel_allreduce(t.ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX))) {
			train_fail(&t, "agreeing on --resume", rc);
			goto out;
		}
		if (bad) {
			ret = 2;
			goto out;
		}
		if ((rc = accel_load_state(t.ctx, dir))) {
			train_fail(&t, "--resume: accel_load_state", rc);
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
	if (done >= o.warmup && train_timing_start(&t, &tm))
		goto out;
	/* The bar on a terminal, a line per --log-every otherwise. */
	if ((rc = accel_progress_begin(t.ctx, (uint64_t)done, (uint64_t)total))) {
		train_fail(&t, "accel_progress_begin", rc);
		goto out;
	}
	while (done < total) {
		uint32_t count;
		double c0 = train_now(), c1, c2, c3, c4;
		if ((rc = accel_sampler_next(sampler, t.idx, &count))) {
			train_fail(&t, "sampler", rc);
			goto out;
		}
		if (count == 0)    /* end of epoch: the sampler moved to the next */
			continue;
		if (train_load_batch(&t, &train, t.idx, (int)count))
			goto out;
		c1 = train_now();
		if (train_forward(&t, (int)count))
			goto out;
		c2 = train_now();
		/* Mean over this rank's slice, times the loss scale of a precision
		 * plugin (1 without one): dlogits = scale * (p - onehot) / count. */
		double scale = accel_loss_scale(t.ctx);
		double loss = 0;
		if (t.gpu && mlp_cuda_loss(t.gpu, (int)count, (double)count / scale,
		                           1.0 / (double)count)) {
			train_gpu_fail(&t, "the loss");
			goto out;
		} else if (!t.gpu) {
			loss = mlp_loss(&t.shape, &t.work, t.yb, (int)count, (double)count / scale, NULL) /
			       (double)count;
		}
		c3 = train_now();
		if (train_backward(&t, (int)count))
			goto out;
		c4 = train_now();
		int sync = accel_sync_gradients(t.ctx);
		if ((rc = accel_step(t.ctx))) {
			train_fail(&t, "accel_step", rc);
			goto out;
		}
		if (tm.on) {
			double p[TM_PHASES] = {c1 - c0, c2 - c1, c3 - c2, c4 - c3, train_now() - c4};
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
				train_gpu_fail(&t, "reading the loss");
				goto out;
			}
			/* The mean of the ranks' means is the global batch mean (equal
			 * slices). */
			if ((rc = accel_allreduce(t.ctx, window, window, 2, ACCEL_DTYPE_F64,
			                          ACCEL_RED_AVG))) {
				train_fail(&t, "reducing the loss", rc);
				goto out;
			}
			double tn = train_now();
			/* Micro-steps, not optimizer steps: each consumes one global batch. */
			double sps = (double)(micro - logged_at) * (double)o.batch / (tn - t_log);
			double mean = window[0] / window[1];
			if ((rc = accel_progress_update(t.ctx, (uint64_t)done, (uint64_t)micro *
			                                (uint64_t)o.batch, mean))) {
				train_fail(&t, "accel_progress_update", rc);
				goto out;
			}
			if (log_metrics &&
			    (rc = step_metrics_log(t.ctx, (uint64_t)done, mean, sps, 0, NULL, NULL))) {
				train_fail(&t, "writing metrics", rc);
				goto out;
			}
			window[0] = window[1] = 0;
			t_log = tn;
			logged_at = micro;
		} else if ((rc = accel_progress_update(t.ctx, (uint64_t)done,
		                                       (uint64_t)micro * (uint64_t)o.batch, NAN))) {
			train_fail(&t, "accel_progress_update", rc);
			goto out;
		}
		if (o.checkpoint_every && done % o.checkpoint_every == 0) {
			char dir[4096];
			snprintf(dir, sizeof(dir), "%s/checkpoint_%ld", o.project_dir, done);
			if ((rc = accel_save_state(t.ctx, dir))) {
				train_fail(&t, "accel_save_state", rc);
				goto out;
			}
			accel_print(t.ctx, "saved checkpoint %s\n", dir);
		}
		if (o.die_step && done == o.die_step && accel_rank(t.ctx) == o.die_rank)
			die_drill(&o);
		if (tm.on)
			train_timing_step(&tm);
		else if (done == o.warmup && train_timing_start(&t, &tm))
			goto out;
	}
	if ((rc = accel_progress_end(t.ctx))) {
		train_fail(&t, "accel_progress_end", rc);
		goto out;
	}
	/* The GPU may still be running the last steps. */
	if (t.gpu && mlp_cuda_sync(t.gpu)) {
		train_gpu_fail(&t, "finishing the steps");
		goto out;
	}
	if (tm.on && tm.n > 0) {
		double tn = train_now();
		tm.step_s[tm.n - 1] += tn - tm.last;
		tm.last = tn;
	}
	double elapsed = train_now() - tm.t0, cpu = train_cpu_now() - tm.cpu0;

	accel_print(t.ctx, "trained %ld steps (%ld global batches) in %.1f s (%.0f samples/s)%s\n",
	            tm.n, tm.micro, elapsed, (double)tm.micro * (double)o.batch / elapsed,
	            o.warmup ? " after the warm-up steps" : "");
	if (o.json)
		train_timing_json(&t, &tm, &o, accel_rank(t.ctx), world, dims, elapsed, cpu);
	if (!o.no_eval) {
		double train_loss, train_acc, test_loss = 0, test_acc = 0;
		if (train_evaluate(&t, &train, 0, &train_loss, &train_acc) ||
		    (test.n && train_evaluate(&t, &test, 1, &test_loss, &test_acc)))
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
		if (train_save_params(&t, o.save_final, meta_final, 5, 0))
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
		if (train_save_params(&t, path, meta_final, 6, 1))
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
