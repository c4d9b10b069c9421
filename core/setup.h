/* SPDX-License-Identifier: MIT */
/* core/setup.h: the set-up a context and the CLI share (private to
 * libaccel and the CLI).
 *
 * One call builds what accel_ctx_new() needs before processes and
 * communication start, and what `accel config`, `accel plugins` and `accel
 * env` inspect, so all of them apply the same rules:
 *
 *   1. the configuration layers: a config file (given, or found the usual
 *      way: ACCEL_CONFIG, ./accel.json, ~/.config/accel/default.json) or a
 *      JSON text, then the ACCEL_* environment, then "key=value" sets;
 *   2. a loader: extra directories (--plugin-dir), the config's
 *      plugin_dirs, ACCEL_PLUGIN_PATH, the install directory; scanned;
 *   3. the CUDA probe, which decides what the loader offers plugins;
 *   4. (resolve) the selection from the config, every module's config
 *      section declared (selected ones active), and the config resolved;
 *   5. (accelp_setup_modules) the selected plugins looked up, with their
 *      roles checked.
 *
 * A context runs step 5 after its rendezvous store is up (a plugin missing
 * on one node is reported to the others); the CLI runs it at once. */
#ifndef ACCEL_CORE_SETUP_H
#define ACCEL_CORE_SETUP_H

#include <stdint.h>

#include "config.h"
#include "cuda_probe.h"
#include "error.h"
#include "loader.h"
#include "select.h"

typedef struct accelp_setup_opts {
	const char *config_json;      /* config text instead of a file (optional)     */
	const char *config_path;      /* config file; NULL: the usual lookup, unless
	                                 config_json is given                         */
	const char *config_path_from; /* where config_path came from, for messages and
	                                 `accel config show` ("--config"); NULL: "given" */
	int skip_env;                 /* nonzero: no ACCEL_* configuration variables  */
	const char *const *sets;      /* NULL-terminated "key=value" (optional)       */
	const char *sets_origin;      /* their source; NULL: "--set key=value"        */
	const char *const *extra_dirs;  /* searched before plugin_dirs (--plugin-dir) */
	uint32_t n_extra_dirs;
	const char *extra_dirs_origin;  /* their origin; NULL: "--plugin-dir"        */
	int config_optional;          /* nonzero: a config that cannot be read is kept
	                                 in config_err and the loader is set up without
	                                 its plugin_dirs (accel plugins, accel env)   */
	int report_cuda;              /* nonzero: probe the driver also in a build
	                                 without CUDA (to report it; nothing is offered) */
	int resolve;                  /* nonzero: steps 4 (selection, schemas, resolve) */
	int all_errors;               /* nonzero (`accel config validate`): bad
	                                 plugin_dirs entries do not stop the set-up:
	                                 their problems are kept in dir_errors, the
	                                 loader goes on without the config's
	                                 plugin_dirs, and steps 4 run, so every other
	                                 problem of the file is found too            */
	int module_errors_first;      /* nonzero: when resolve fails and a selected
	                                 plugin cannot be used, that is the error (its
	                                 section is otherwise an "unknown key")       */
} accelp_setup_opts;

/* Where a failed set-up stopped. */
#define ACCELP_SETUP_OK       0
#define ACCELP_SETUP_CONFIG   1   /* reading the layers           */
#define ACCELP_SETUP_LOADER   2   /* directories, scan            */
#define ACCELP_SETUP_SELECT   3   /* selection or schemas         */
#define ACCELP_SETUP_RESOLVE  4   /* accelp_config_resolve()       */

typedef struct accelp_setup {
	accel_config *cfg;            /* owned; NULL after a take                     */
	accel_loader *loader;         /* owned; NULL after a take                     */
	accel_select sel;             /* with resolve: what the config selects        */
	const accel_module *mods[ACCEL_SELECT_MAX]; /* after accelp_setup_modules()   */
	char *config_file;            /* the file read, NULL if none (owned)          */
	const char *config_from;      /* how it was found: "ACCEL_CONFIG",
	                                 "./accel.json", ..., config_path_from        */
	accel_err config_err;         /* config_optional: why the config was not used */
	accelp_cuda_info cuda;        /* the probe (n_gpus -1 when not probed)        */
	int failed_at;                /* ACCELP_SETUP_*                               */
	/* all_errors: the problems of the config's plugin_dirs (owned, one line
	 * each; at most ACCEL_CONFIG_ERRORS_MAX, dir_errors_more past that). */
	char *dir_errors[ACCEL_CONFIG_ERRORS_MAX];
	uint32_t n_dir_errors, dir_errors_more;
} accelp_setup;

/* Steps 1-4 into *s (which need not be initialized).  On failure the
 * message is in err, s->failed_at says where, and what was built stays in
 * s for the caller to inspect; call accelp_setup_fini() either way. */
int accelp_setup_run(const accelp_setup_opts *opts, accelp_setup *s, accel_err *err);

/* Step 5: s->mods[i] for s->sel.names[i], roles checked.  allow_unmet: a
 * plugin whose requirements this machine lacks still counts (`accel config
 * validate` checks configs meant for other machines). */
int accelp_setup_modules(accelp_setup *s, int allow_unmet, accel_err *err);

/* Frees what s still owns; s can be run again after it. */
void accelp_setup_fini(accelp_setup *s);

#endif
