/* SPDX-License-Identifier: MIT */
/* core/train.h: the training state of a context (private).
 *
 * accel_train holds the model registry (units and parameters as the user
 * registered them), the initial values or init callbacks, the optimizer
 * configuration and state counters (step, micro-step, learning rate), and
 * the metrics sink.  The user API in accel.h (@api-train section) is
 * implemented in core/train*.c on top of it; core/host.c implements the
 * host table's model/param_bind/param_init/optim_state_count/optim_step/
 * sync_step members by calling the functions below.
 *
 * Errors are recorded in the owning context's ctx->err. */
#ifndef ACCEL_CORE_TRAIN_H
#define ACCEL_CORE_TRAIN_H

#include <stdint.h>

#include "accel/plugin.h"
#include "ctx-impl.h"

/* Create the training state of `ctx`.  Called by accel_ctx_new() after the
 * config is resolved, the plugins are loaded, initialised and validated and
 * the comm backend is up.  Reads the core keys gradient_accumulation_steps,
 * max_grad_norm, seed, optimizer.*, scheduler.* and the metrics keys.
 * Owned by the context. */
int accelp_train_new(accel_ctx *ctx, accel_train **ret_train);
/* NULL-safe; frees registry, copies of initial values, metrics sink.
 * Returns NULL. */
accel_train *accelp_train_free(accel_train *t);

/* ---- host table members (core/host.c forwards to these) ---------------- */

/* The registered model; NULL before accel_prepare() started (the registry
 * is frozen when prepare calls the strategy's wrap()).  Borrowed. */
const accel_model_v1 *accelp_train_model(accel_train *t);
/* Record where parameter `param`'s working values and gradient live (either
 * may be NULL: not materialized). */
int accelp_train_param_bind(accel_train *t, uint32_t param, void *data, void *grad);
/* Fill dst with elements [offset, offset + dst->numel) of parameter
 * `param`'s initial values (from the registered buffer or the init
 * callback), converting to dst->dtype. */
int accelp_train_param_init(accel_train *t, uint32_t param, uint64_t offset,
                           const accel_view *dst);
/* Number of f32 state arrays the configured optimizer keeps per element. */
uint32_t accelp_train_optim_state_count(accel_train *t);
/* One optimizer update on a range (see accel_optim_args_v1), using the
 * parameter's group hyper-parameters, the current learning rate and the
 * step count. */
int accelp_train_optim_step(accel_train *t, const accel_optim_args_v1 *args);
/* host->optim_step_n (ABI minor 6): each range checked as optim_step checks
 * it, host views only, stepped on the context's optimizer pool
 * (core/optim_pool.c) with n_threads threads (0: the rank's share). */
int accelp_train_optim_step_n(accel_train *t, const accel_optim_args_v1 *args, uint32_t n,
                             uint32_t n_threads);
/* Nonzero when the current micro-step ends an accumulation cycle. */
int32_t accelp_train_sync_step(accel_train *t);

/* ---- ABI minor 3 host members ---------------------------------------------- */

/* The model as a plugin built with `abi_minor` lays it out (params[] and
 * units[] at the strides of that minor: before 3 the 1.2 params, before 6
 * units without kind).  Borrowed; NULL like accelp_train_model(). */
const accel_model_v1 *accelp_train_model_for(accel_train *t, uint32_t abi_minor);
/* 0 while accel_set_grad_enabled(ctx, 0) is in force (NULL t: 1). */
int32_t accelp_train_grad_enabled(const accel_train *t);
/* host->param_view(): views of the bound data and gradient. */
int accelp_train_param_view(accel_train *t, uint32_t param, accel_view *ret_data,
                           accel_view *ret_grad);
/* The accumulation contract: ACCEL_OK when `who` may reduce gradients now
 * (a sync micro-step, or a strategy with ACCEL_CAP_MICRO_REDUCE), else
 * ACCEL_ERR_STATE with a message naming the plugin and the micro-step. */
int accelp_train_check_reduce(accel_train *t, const char *who, const char *call);
/* host->req_on_done(): remember fn(arg) for `req`. */
int accelp_train_req_on_done(accel_train *t, accel_req *req, int (*fn)(void *arg), void *arg);
/* `req` completed (wait returned or test said done): run and forget its
 * callbacks in order; the first failure is returned.  NULL t: ACCEL_OK. */
int accelp_train_req_done(accel_train *t, accel_req *req);
/* Forget every callback without running it (the context is going away and
 * the plugins that registered them are finalized first). */
void accelp_train_drop_callbacks(accel_train *t);
/* Forget the callbacks of one request without running them (released
 * without a wait, as by group_free: the address may be reused). */
void accelp_train_drop_callbacks_of(accel_train *t, const accel_req *req);

/* ---- for the checkpoint module ------------------------------------------- */

/* Optimizer steps applied so far, micro-steps since the last sync. */
uint64_t accelp_train_step_count(const accel_train *t);
uint32_t accelp_train_micro_step(const accel_train *t);
/* Restore the counters after loading a checkpoint (the LR schedule follows
 * the step count). */
int accelp_train_set_step_count(accel_train *t, uint64_t step, uint32_t micro_step);
/* Nonzero once accel_prepare() succeeded. */
int accelp_train_prepared(const accel_train *t);

#endif
