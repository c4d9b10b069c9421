/* SPDX-License-Identifier: MIT */
/*
 * examples/train_mlp/train_eval.c: loss and accuracy of the trained model
 * on the training set and the held-out set, every rank a slice of each,
 * in a forward-only pass (train_mlp.h, FORWARD_ONLY).
 */
#include <stdint.h>
#include <string.h>

#include "train_mlp.h"

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
				return train_gpu_fail(t, "loading an evaluation batch");
			if (train_forward(t, n))
				return -1;
			if (mlp_cuda_eval(t->gpu, n))
				return train_gpu_fail(t, "evaluating");
			continue;
		}
		t->work.act[0] = d->x + (size_t)i * d->dim;
		if (t->prec != MLP_F32) {
			memcpy(t->xb, t->work.act[0], (size_t)n * (size_t)d->dim * sizeof(float));
			mlp_round(t->xb, (size_t)n * (size_t)d->dim, t->prec);
			t->work.act[0] = t->xb;
		}
		if (train_forward(t, n))
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
		if (train_forward(t, 0))
			return -1;
	if (t->gpu && mlp_cuda_take_eval(t->gpu, &sums[0], &sums[1]))
		return train_gpu_fail(t, "reading the evaluation sums");
	if ((rc = accel_allreduce(t->ctx, sums, sums, 2, ACCEL_DTYPE_F64, ACCEL_RED_SUM)))
		return train_fail(t, "reducing evaluation results", rc);
	*ret_loss = sums[0] / (double)d->n;
	*ret_acc = sums[1] / (double)d->n;
	return 0;
}

int train_evaluate(trainer *t, const mlp_data *d, int set, double *ret_loss, double *ret_acc)
{
	int rc;
	FORWARD_ONLY(t, rc, evaluate_pass(t, d, set, ret_loss, ret_acc));
	return rc;
}
