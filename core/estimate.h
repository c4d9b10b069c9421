/* SPDX-License-Identifier: MIT */
/* core/estimate.h: a strategy's per-rank memory for a model, without a
 * model or a job (private to libaccel and the CLI; `accel estimate-memory`).
 *
 * One call: the configuration built as a context builds it (file, ACCEL_*
 * environment, --set; plugin_dirs, ACCEL_PLUGIN_PATH, the install
 * directory), with a variant's overrides applied above the --set layer
 * ("zero_optimization.stage=2"), the schemas of the strategy asked about,
 * of what the config selects and of every other installed strategy
 * declared active (one config serves every strategy's row), the configuration
 * resolved (so a bad key of the strategy's section is refused as a job
 * would refuse it), then the strategy plugin's estimate_memory slot (ABI
 * minor 6) called as available() is: with a host handle whose context
 * holds the configuration and the world the estimate is for, and no model,
 * communication or memory.  The hook plugins `mixed_precision` implies
 * (scaler, fp8) are not loaded: the working dtype is all the estimate needs
 * of them. */
#ifndef ACCEL_CORE_ESTIMATE_H
#define ACCEL_CORE_ESTIMATE_H

#include <stdint.h>

#include "accel/plugin.h"
#include "error.h"
#include "setup.h"

typedef struct accelp_estimate_opts {
	/* How to build the configuration and the loader (config file or text,
	 * skip_env, sets, extra plugin directories); `resolve` and
	 * `module_errors_first` are ignored. */
	const accelp_setup_opts *setup;
	const char *strategy;             /* the strategy plugin to ask            */
	const char *const *overrides;     /* NULL-terminated "key=value", applied
	                                     after setup->sets (optional)          */
	const char *overrides_origin;     /* their source in messages; NULL:
	                                     "estimate-memory variant"             */
	/* The model and the world.  default_dtype ACCEL_DTYPE_INVALID (0): the
	 * working dtype of `mixed_precision` (no: f32, fp16: f16, bf16 and fp8:
	 * bf16); n_state UINT32_MAX: the state arrays of the configured
	 * optimizer (adamw 2, sgd 1 with momentum, else 0).  struct_size is set
	 * by the call. */
	accel_estimate_in_v1 in;
} accelp_estimate_opts;

typedef struct accelp_estimate_result {
	accel_estimate_out_v1 out;        /* what the strategy answered           */
	uint32_t dtype;                   /* the working dtype used               */
	uint32_t n_state;                 /* the optimizer state arrays used      */
	char plugin_path[4096];           /* the strategy's file                  */
} accelp_estimate_result;

/* Errors (message in err): ACCEL_ERR_NOT_FOUND when no plugin of that name
 * is installed (the loader's message: where it looked, what is there);
 * ACCEL_ERR_UNSUPPORTED when the strategy has no estimate_memory slot
 * ("strategy 'x' gives no memory estimate ..."); ACCEL_ERR_CONFIG for the
 * configuration, a plugin that is not a strategy, or bad `in` values
 * (world_size < 1, n_params without numel, ...); the strategy's own
 * status and message when its estimate fails. */
int accelp_estimate_memory(const accelp_estimate_opts *opts, accelp_estimate_result *ret,
                          accel_err *err);

/* The working dtype `mixed_precision` gives (ACCEL_DTYPE_*), or
 * ACCEL_DTYPE_INVALID for a value that is none of no/fp16/bf16/fp8. */
uint32_t accelp_estimate_dtype_of(const char *mixed_precision);

#endif
