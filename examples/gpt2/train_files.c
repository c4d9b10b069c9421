/* SPDX-License-Identifier: MIT */
/*
 * examples/gpt2/train_files.c: the files accel-gpt2 writes and reads
 * besides the tokens and accel's checkpoints: the final parameters as
 * safetensors (st_write.c), gathered unit by unit under sharded
 * strategies; the checkpoint --resume names; the metrics file and its
 * held-out loss records.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_device.h"
#include "st_write.h"
#include "train_gpt2.h"

/* all_ranks: every rank writes its own file (path differs per rank), with
 * its rank in the metadata; else the main process writes. */
static int save_final_pass(trainer *t, const char *path, long steps, int all_ranks)
{
	uint32_t np = accel_model_n_params(t->ctx);
	int writer = all_ranks || accel_is_main(t->ctx), ret = -1, rc;
	st_tensor *ts = calloc(np, sizeof(*ts));
	float **copies = calloc(np, sizeof(*copies));
	uint32_t units[3 + 256], nu = 0;
	char err[512];
	if (!ts || !copies) {
		fprintf(stderr, "accel-gpt2: %s: out of memory for the table of %u parameters\n",
		        path, np);
		goto out;
	}
	units[nu++] = t->u_embed;
	for (int l = 0; l < t->c.layers; l++)
		units[nu++] = t->u_block[l];
	units[nu++] = t->u_head;
	/* parameters in registration order are grouped by unit: copy each in
	 * its unit's window */
	uint32_t p = 0;
	for (uint32_t u = 0; u < nu; u++) {
		if ((rc = accel_unit_pre_forward(t->ctx, units[u]))) {
			train_fail(t, "gathering parameters", rc);
			goto out;
		}
		uint32_t end = u == 0 ? 2 : u + 1 < nu ? 2 + (u) * GPT2_BLOCK_TENSORS : np;
		for (; p < end; p++) {
			size_t n = (size_t)accel_param_numel(t->ctx, p);
			const float *src = train_weights(t, p, 0);
			if (!writer)
				continue;
			if (!(copies[p] = malloc(n * sizeof(float))) || !src) {
				fprintf(stderr, "accel-gpt2: %s: cannot copy %s\n", path,
				        accel_param_name(t->ctx, p));
				accel_unit_post_forward(t->ctx, units[u]);
				goto out;
			}
			if (gpt2_dev_param_to_host(t->gpu, copies[p], src, n, t->prec == PREC_F32)) {
				accel_unit_post_forward(t->ctx, units[u]);
				goto out;
			}
			ts[p] = (st_tensor){.name = accel_param_name(t->ctx, p), .dtype = "F32",
			                    .data = copies[p], .nbytes = n * sizeof(float), .ndim = 1,
			                    .shape = {(int64_t)n}};
		}
		if ((rc = accel_unit_post_forward(t->ctx, units[u]))) {
			train_fail(t, "releasing parameters", rc);
			goto out;
		}
	}
	char stepstr[32], rankstr[16];
	snprintf(stepstr, sizeof(stepstr), "%ld", steps);
	snprintf(rankstr, sizeof(rankstr), "%d", accel_rank(t->ctx));
	const char *meta[] = {"format", "pt", "producer", "accel-gpt2", "steps", stepstr,
	                      "rank", rankstr};
	if (writer && st_write(path, ts, (int)np, meta, all_ranks ? 4 : 3, err, sizeof(err))) {
		fprintf(stderr, "accel-gpt2: %s\n", err);
		goto out;
	}
	ret = 0;
out:
	for (uint32_t k = 0; copies && k < np; k++)
		free(copies[k]);
	free(copies);
	free(ts);
	return ret;
}

int train_save_final(trainer *t, const char *path, long steps, int all_ranks)
{
	int rc;
	FORWARD_ONLY(t, rc, save_final_pass(t, path, steps, all_ranks));
	return rc;
}

int train_resume_dir(accel_ctx *ctx, const options *o, char *buf, size_t cap)
{
	if (strcmp(o->resume, "latest")) {
		snprintf(buf, cap, "%s", o->resume);
		return 0;
	}
	/* the newest committed checkpoint: what "latest" names, unless a
	 * save's update of it failed (accel_latest_checkpoint) */
	if (accel_latest_checkpoint(ctx, o->project_dir, buf, cap) != ACCEL_OK) {
		fprintf(stderr, "accel-gpt2: --resume latest: %s\n", accel_errmsg(ctx));
		return -1;
	}
	return 0;
}

/* --metrics FILE, else the configuration's metrics_file: rank 0 opens it
 * and every rank learns the outcome, so all stop together.  Progress is
 * logged when a file is named or logging_dir (the trackers') is set. */
int train_open_metrics(trainer *t, const char *path, int *ret_log)
{
	const char *dir = NULL;
	int32_t bad = 0;
	int rc;
	if (!path && accel_config_string(t->ctx, "metrics_file", &path) != ACCEL_OK)
		path = NULL;
	if (accel_is_main(t->ctx) && path && (rc = accel_metrics_open(t->ctx, path))) {
		train_fail(t, "opening the metrics file (--metrics, else metrics_file)", rc);
		bad = 1;
	}
	if ((rc = accel_allreduce(t->ctx, &bad, &bad, 1, ACCEL_DTYPE_I32, ACCEL_RED_MAX)))
		return train_fail(t, "agreeing on the metrics file", rc);
	if (bad) {
		if (!accel_is_main(t->ctx))
			fprintf(stderr, "accel-gpt2: rank %d: stopping: rank 0 could not open the "
			        "metrics file (its message says why)\n", accel_rank(t->ctx));
		return -1;
	}
	*ret_log = path != NULL ||
	           (accel_config_string(t->ctx, "logging_dir", &dir) == ACCEL_OK && *dir);
	return 0;
}

/* A held-out loss as its own metrics record. */
int train_log_val_loss(trainer *t, int log_metrics, long step, double loss)
{
	const char *k = "val_loss";
	int rc;
	if (log_metrics && (rc = accel_log_scalars(t->ctx, (uint64_t)step, 1, &k, &loss)))
		return train_fail(t, "writing metrics", rc);
	return 0;
}
