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
int accel_select_from_config(const accel_config *cfg, accel_select *ret_sel, accel_err *err);
int accel_select_has(const accel_select *sel, const char *name);

/* Declare every loaded module's config section: selected plugins, and the
 * backend in use (every backend under "auto"), as active; the others as
 * known-but-inactive, so giving their keys is an error that says so. */
int accel_select_register_schemas(accel_config *cfg, const accel_loader *ld,
                                  const accel_select *sel, accel_err *err);

/* Whether the section of comm backend `name` is in use when `backend`
 * says what it says (under "auto": the built-in ones). */
int accel_select_backend_active(const accel_loader *ld, const char *backend, const char *name);

/* Find the selected plugins (ret_mods[i] for sel->names[i]) and check
 * their roles: names[0] a strategy, no other strategy, at most one
 * loss scaler, one fp8 recipe and one reduce hook, and a reduce hook
 * with the slot for how the strategy reduces (ACCEL_CAP_REDUCE_SCATTER).  allow_unmet: a plugin whose
 * requirements this machine lacks still counts (`accel config validate`
 * checks configs meant for other machines). */
int accel_select_modules(const accel_select *sel, accel_loader *ld, int allow_unmet,
                         const accel_module **ret_mods, accel_err *err);

#endif
