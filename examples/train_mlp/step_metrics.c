/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/step_metrics.c: the examples' --metrics record
 * (step_metrics.h). */
#include "step_metrics.h"

#include "accel-compress.h"

/* The compress plugin's figures of the last step, appended when the plugin
 * is active: keys/vals hold n entries and room for 3 more; returns the new
 * count. */
static uint32_t compress_metrics(accel_ctx *ctx, const char **keys, double *vals, uint32_t n)
{
	const accel_compress_ext_v1 *x =
	        accel_plugin_extension(ctx, "compress", ACCEL_COMPRESS_STATS, 1);
	accel_compress_stats_v1 st = {.struct_size = sizeof(st)};
	if (!x) {
		accel_clear_error(ctx);  /* not active: nothing to add */
		return n;
	}
	if (x->stats(x->self, &st))
		return n;
	keys[n] = "compress_sent_bytes";
	vals[n++] = (double)st.last_sent_bytes;
	keys[n] = "compress_dense_bytes";
	vals[n++] = (double)st.last_dense_bytes;
	keys[n] = "compress_ratio";
	vals[n++] = st.last_ratio;
	return n;
}

int step_metrics_log(accel_ctx *ctx, uint64_t step, double loss, double samples_per_s,
                     uint32_t n_extra, const char *const *extra_keys, const double *extra_vals)
{
	/* the loss scale and whether the last step was skipped (a scaler's
	 * found_inf); 1 and 0 without a scaler */
	accel_step_report rep = {.struct_size = sizeof(rep)};
	const char *keys[5 + STEP_METRICS_MAX_EXTRA + 3] = {"loss", "lr", "samples_per_s",
	                                                    "loss_scale", "skipped"};
	double vals[5 + STEP_METRICS_MAX_EXTRA + 3] = {loss, 0, samples_per_s, 0, 0};
	uint32_t n = 5;
	int rc;
	if (n_extra > STEP_METRICS_MAX_EXTRA)
		return accel_set_error(ctx, ACCEL_ERR_INVALID_ARG, "step_metrics_log: %u extra "
		                       "keys, at most %d", n_extra, STEP_METRICS_MAX_EXTRA);
	if ((rc = accel_last_step(ctx, &rep)))
		return rc;
	vals[1] = accel_get_lr(ctx);
	vals[3] = rep.loss_scale;
	vals[4] = (double)rep.skipped;
	for (uint32_t k = 0; k < n_extra; k++, n++) {
		keys[n] = extra_keys[k];
		vals[n] = extra_vals[k];
	}
	n = compress_metrics(ctx, keys, vals, n);
	return accel_log_scalars(ctx, step, n, keys, vals);
}
