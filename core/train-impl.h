/* SPDX-License-Identifier: MIT */
/* core/train-impl.h: the definition of accel_train, shared by core/train*.c
 * and core/metrics.c (private). */
#ifndef ACCEL_CORE_TRAIN_IMPL_H
#define ACCEL_CORE_TRAIN_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "accel/accel.h"
#include "accel/plugin.h"
#include "train.h"

/* One registered parameter. */
typedef struct param_rec {
	char *name;                 /* owned */
	uint32_t dtype;
	uint32_t grad_dtype, reduce_dtype, compute_dtype;  /* resolved, never 0 */
	uint32_t unit;
	uint32_t group;             /* 0: weight decay, 1: optimizer.no_decay */
	uint32_t ndim;
	int64_t shape[8];
	uint64_t numel;
	int32_t device, device_index;
	uint32_t frozen;
	accel_init init;            /* data points at init_data for ACCEL_INIT_DATA */
	void *init_data;            /* owned copy of the user's initial values */
	void *data, *grad;          /* bound by the strategy; NULL: not materialized */
} param_rec;

typedef struct unit_rec {
	char *name;                 /* owned */
	char *kind;                 /* owned, NULL: none (accel_unit_set_kind) */
	uint32_t first_param, n_params;
	uint64_t numel;
	uint32_t *uses;             /* owned: parameters of earlier units it also
	                               uses (accel_unit_use_param) */
	uint32_t n_uses;
} unit_rec;

struct accel_train {
	accel_ctx *ctx;
	param_rec *params;
	uint32_t n_params, cap_params;
	unit_rec *units;
	uint32_t n_units, cap_units;
	/* The frozen view handed to plugins (built by accel_prepare). */
	accel_param_info_v1 *pinfo;
	accel_unit_info_v1 *uinfo;
	accel_model_v1 model;
	/* The same model for plugins built before ABI minor 3: params[] at
	 * that minor's stride (ACCEL_PARAM_INFO_V1_SIZE_MINOR2). */
	char *pinfo_minor2;
	accel_model_v1 model_minor2;
	/* For plugins built before ABI minor 6: units[] at that minor's
	 * stride (ACCEL_UNIT_INFO_V1_SIZE_MINOR5), no kind; model_minor5 keeps
	 * the current params[]. */
	char *uinfo_minor5;
	accel_model_v1 model_minor5;
	int preparing, prepared, prepare_failed;

	/* Accumulation and step state. */
	uint32_t gas;               /* gradient_accumulation_steps */
	uint32_t micro;             /* micro-steps done in the current cycle */
	uint64_t step;              /* optimizer steps applied */
	double max_grad_norm;       /* 0: no clipping */
	int32_t track_grad_norm;    /* compute the norm even when nothing needs it */
	int32_t grad_overwrite;     /* accel_set_grad_overwrite(): never zero grads */
	int32_t grad_disabled;      /* accel_set_grad_enabled(ctx, 0): forward only */
	/* host->req_on_done() callbacks, in registration order. */
	struct req_cb {
		accel_req *req;
		int (*fn)(void *arg);
		void *arg;
	} *req_cbs;
	uint32_t n_req_cbs, cap_req_cbs;
	uint64_t seed;
	double lr;                  /* learning rate of the next step (group 0) */
	int in_step;
	const accel_step_info_v1 *step_info;  /* during the strategy's step() */
	accel_step_report last;
	int have_last;
	/* Gradient statistics on the device (device ABI 1.2, plugin ABI 1.5):
	 * dev_stats_mode 0 undecided, 1 on the device, -1 on the host;
	 * dev_stats: ACCEL_DEVICE_STATS_DOUBLES f64 on (dev_stats_device,
	 * dev_stats_index); last_on_device: t->last's norm and coefficient are
	 * still there (read by accel_last_step). */
	int dev_stats_mode;
	double *dev_stats;
	int32_t dev_stats_device, dev_stats_index;
	int last_on_device;

	/* Optimizer and schedule (core/optim.h, core/lrsched.h; see train_step.c). */
	void *optim;

	/* Metrics sink (core/metrics.c). */
	FILE *metrics;
	int metrics_owned;          /* fclose on free */
	char *metrics_path;
	/* Trackers (core/tracker.h), from log_with; opened on first use. */
	int log_jsonl, log_csv, log_tb;
	struct accel_tracker_csv *csv;
	struct accel_tracker_tb *tb;

	/* Progress display (core/progress.c); NULL when not started. */
	struct accelp_progress *progress;
};

int accelp_train_optim_new(accel_train *t);
void accelp_train_optim_free(accel_train *t);
/* Recompute t->lr for step t->step. */
int accelp_train_sched_update(accel_train *t);

int accelp_train_metrics_new(accel_train *t);
void accelp_train_metrics_free(accel_train *t);
/* Before accel_print() writes: clear a progress bar off the terminal line
 * (it is drawn again at the next update). */
void accelp_progress_clear(accel_train *t);
void accelp_progress_free(accel_train *t);

#endif
