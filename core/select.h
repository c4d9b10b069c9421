/* SPDX-License-Identifier: MIT */
/* core/select.h: which modules a configuration selects (private; used by
 * core/setup.c, which a context and the CLI share, so both apply the same
 * rules). */
#ifndef ACCEL_CORE_SELECT_H
#define ACCEL_CORE_SELECT_H

#include <stdint.h>

#include "config.h"
#include "error.h"
#include "loader.h"

#define ACCEL_SELECT_MAX 32

/* The plugin names a configuration selects: names[0] is the strategy
 * ("ddp" unless `strategy` says otherwise), then `plugins` in order, then
 * what `mixed_precision` implies (fp16 -> scaler, fp8 -> fp8).  Names are
 * borrowed from the configuration. */
typedef struct accel_select {
	const char *names[ACCEL_SELECT_MAX];
	const char *why[ACCEL_SELECT_MAX];   /* "strategy", "plugins", "mixed_precision=fp16" */
	uint32_t n;
	const char *backend;      /* `backend` ("auto" when unset) */
} accel_select;

/* Works before resolve() (reads the raw layers). */
int accelp_select_from_config(const accel_config *cfg, accel_select *ret_sel, accel_err *err);
int accelp_select_has(const accel_select *sel, const char *name);

/* Declare every loaded module's config section: selected plugins, and the
 * backend in use (every backend under "auto"), as active; the others as
 * known-but-inactive, so giving their keys is an error that says so. */
int accelp_select_register_schemas(accel_config *cfg, const accel_loader *ld,
                                  const accel_select *sel, accel_err *err);

/* Whether the section of comm backend `name` is in use when `backend`
 * says what it says (under "auto": every loaded backend, since auto may
 * pick any of them). */
int accelp_select_backend_active(const accel_loader *ld, const char *backend, const char *name);

/* The scope a comm module covers (ACCEL_COMM_SCOPE_*; the documented
 * default when its descriptor states none). */
uint32_t accelp_select_comm_scope(const accel_module *m);

/* Nonzero when comm module m's probe() accepts the job (called only for
 * modules that have a probe). */
typedef int (*accel_select_probe_fn)(void *arg, const accel_module *m);

/* Backend "auto" for buffers on `device` (ACCEL_DEVICE_*) in a job of
 * num_nodes nodes, from the descriptors alone: among the loaded comm
 * backends that are usable here, serve `device`, whose scope covers the
 * job and whose probe accepts it, the highest preference wins; ties go to
 * the smaller name.  ACCEL_ERR_NOT_FOUND when none qualifies; `why` then
 * says, for each backend that serves `device`, why it was passed over
 * (empty when none serves it), and *ret_broken (may be NULL) how many of
 * them are files that cannot be loaded.  No backend name is known here. */
int accelp_select_comm_auto(const accel_loader *ld, int device, int32_t num_nodes,
                           accel_select_probe_fn probe, void *probe_arg,
                           const accel_module **ret_module, char *why, size_t cap,
                           int *ret_broken);

/* Find the selected plugins (ret_mods[i] for sel->names[i]) and check
 * their roles: names[0] a strategy, no other strategy, at most one
 * loss scaler, one fp8 recipe and one reduce hook, and a reduce hook
 * with the slot for how the strategy reduces (ACCEL_CAP_REDUCE_SCATTER).  allow_unmet: a plugin whose
 * requirements this machine lacks still counts (`accel config validate`
 * checks configs meant for other machines). */
int accelp_select_modules(const accel_select *sel, accel_loader *ld, int allow_unmet,
                         const accel_module **ret_mods, accel_err *err);

/* Whether reduce hook `hook` has the slot for how strategy `strat` reduces
 * given the strategy's capabilities `strat_caps` (ACCEL_CAP_REDUCE_SCATTER:
 * reduce_scatter_bucket, else an all-reduce slot); ACCEL_ERR_CONFIG with a
 * message naming both otherwise.  accelp_select_modules() runs it for a
 * strategy whose caps are static (no instance_caps slot); the context runs
 * it again with the instance caps once the plugins are initialised. */
int accelp_select_check_reduce_hook(const accel_module *strat, uint32_t strat_caps,
                                   const accel_module *hook, accel_err *err);

#endif
