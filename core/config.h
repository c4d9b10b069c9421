/* SPDX-License-Identifier: MIT */
/* core/config.h: the resolved configuration (private to libaccel and the CLI).
 *
 * Layers, lowest to highest: built-in defaults (schemas) < config file <
 * environment (ACCEL_*) < command-line --set.  A higher layer overrides a
 * lower one; every value remembers where it came from ("accel.json:3:17",
 * "env ACCEL_SEED", "--set seed=3", "default").  Keys are dotted paths from
 * the root: "gradient_accumulation_steps", "ddp.bucket_cap_mb",
 * "zero_optimization.offload_optimizer.device".
 *
 * Validation happens in accelp_config_resolve(): every key given must be
 * declared by the core schema or by the schema of a registered section
 * (a plugin's or backend's config_section); unknown keys are errors with a
 * "did you mean" suggestion; types and ranges are checked; aliases given
 * twice with different values, and a plugin section given while that plugin
 * is not selected, are errors naming both sources.
 * Everything here records failures in the accel_err passed in.
 *
 * docs/config.md is the user-facing reference (keys, env mapping, rules).
 * An accel_config is used from one thread at a time. */
#ifndef ACCEL_CORE_CONFIG_H
#define ACCEL_CORE_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "accel/plugin.h"
#include "error.h"

typedef struct accel_config accel_config;

/* A new configuration holding the core schema and its defaults. Owned. */
int accelp_config_new(accel_config **ret_cfg, accel_err *err);
accel_config *accelp_config_free(accel_config *cfg);   /* NULL-safe, returns NULL */

/* Find the config file the way accel does when none is given: ACCEL_CONFIG
 * (returned even when the file is missing, so loading it reports the path),
 * then ./accel.json, then $XDG_CONFIG_HOME/accel/default.json (when
 * XDG_CONFIG_HOME is set) else ~/.config/accel/default.json.  Returns a
 * borrowed string (valid until the environment changes or the next call from
 * the same thread) or NULL when none exists.  ret_from (may be NULL) says
 * which rule matched ("ACCEL_CONFIG", "./accel.json",
 * "$XDG_CONFIG_HOME/accel/default.json", "~/.config/accel/default.json"). */
const char *accelp_config_find_file(const char **ret_from);

/* Layers.  Files (and strings) form one layer, applied in call order (a
 * later file overrides an earlier one); --set assignments likewise. */
int accelp_config_load_file(accel_config *cfg, const char *path, accel_err *err);
int accelp_config_load_string(accel_config *cfg, const char *json, const char *origin,
                             accel_err *err);   /* for tests and embedding */
/* Read every ACCEL_* variable of `envp` (NULL: environ) that names a config
 * key (see docs/config.md for the mapping); reserved launcher variables
 * (ACCEL_RANK, ...) are skipped; other ACCEL_* variables are errors with a
 * suggestion. Environment variables are matched after schemas are known, so
 * this only records them; they are checked in resolve().  Empty variables
 * are ignored.  ACCEL_SET (newline-separated key=value lines written by
 * `accel launch --set`) is parsed here and applied at the --set layer after
 * the accelp_config_set() assignments, with origin "--set KEY=VALUE (accel
 * launch)".  Call once. */
int accelp_config_load_env(accel_config *cfg, char *const *envp, accel_err *err);
/* "key=value": value parsed as JSON, or taken as a string when it is not
 * valid JSON ("--set backend=shm"; for a string-list key a non-JSON value is
 * split at commas: "--set plugins=scaler,compress").  `origin` is the
 * source shown for the value; NULL: "--set key=value". */
int accelp_config_set(accel_config *cfg, const char *assignment, const char *origin,
                     accel_err *err);

/* Declare the keys of one section (a plugin's or backend's config_section).
 * `owner` names the plugin for messages.  `flags`: ACCEL_SCHEMA_SELECTED
 * declares the section active; without it the section is known but not
 * active, and giving its keys is an error that says the plugin is not
 * selected.  ACCEL_SCHEMA_BACKEND: the owner is a comm backend (selected
 * with `backend`, which the messages then name).  Errors (ACCEL_ERR_PLUGIN): a malformed schema
 * (bad key, type, default or range), a section or key already declared, two
 * keys whose environment names collide.  Must come before resolve(). */
int accelp_config_add_schema(accel_config *cfg, const char *section, const char *owner,
                            const accel_param_schema_v1 *params, uint32_t n_params,
                            unsigned flags, accel_err *err);
#define ACCEL_SCHEMA_SELECTED 1u
#define ACCEL_SCHEMA_BACKEND 2u
/* Check everything and fill defaults.  After success the getters work.
 * May be called again after more layers or schemas were added.
 * A value that is wrong does not stop the walk: every bad key, value and
 * section of every layer is recorded (up to ACCEL_CONFIG_ERRORS_MAX, each
 * with its position), and `err` gets the first, followed by the others
 * ("; also: ...") as far as they fit.  The cross-key checks run only when
 * every key was valid on its own. */
int accelp_config_resolve(accel_config *cfg, accel_err *err);
#define ACCEL_CONFIG_ERRORS_MAX 20
/* The problems the last resolve() found, one message each (borrowed until
 * the next resolve() or free): 0 after a success.  accelp_config_error_more()
 * is how many more there were past ACCEL_CONFIG_ERRORS_MAX. */
uint32_t accelp_config_error_count(const accel_config *cfg);
const char *accelp_config_error_get(const accel_config *cfg, uint32_t i);
uint32_t accelp_config_error_more(const accel_config *cfg);
/* Records a problem found outside resolve() (the set-up's checks of
 * plugin_dirs) in the same list, under the same limit, until the next
 * resolve().  ACCEL_ERR_NOMEM, else ACCEL_OK. */
int accelp_config_error_add(accel_config *cfg, const char *msg);
/* ACCEL_ERR_CONFIG with the recorded problems in `err` as resolve() gives
 * them (the first, then "; also: ..." as far as they fit); ACCEL_OK when
 * there are none. */
int accelp_config_error_report(const accel_config *cfg, accel_err *err);

/* Typed getters by full dotted path (an alias works too).  ACCEL_ERR_NOT_FOUND
 * when unset with no default, unknown, or in a section that is not selected
 * (no error recorded); ACCEL_ERR_CONFIG on type mismatch; ACCEL_ERR_STATE
 * before resolve().  get_double accepts integer keys.  Strings borrowed
 * until the config is freed. */
int accelp_config_get_bool(const accel_config *cfg, const char *path, int32_t *ret);
int accelp_config_get_int(const accel_config *cfg, const char *path, int64_t *ret);
int accelp_config_get_double(const accel_config *cfg, const char *path, double *ret);
int accelp_config_get_string(const accel_config *cfg, const char *path, const char **ret);
/* NOT_FOUND past the end. */
int accelp_config_get_strlist(const accel_config *cfg, const char *path, uint32_t index,
                             const char **ret);
/* Lists of numbers (core keys such as optimizer.params.betas). */
int accelp_config_get_dbllist(const accel_config *cfg, const char *path, uint32_t index,
                             double *ret);
/* Number of elements of a string or number list. */
int accelp_config_get_count(const accel_config *cfg, const char *path, uint32_t *ret);
/* Where the value of `path` came from (borrowed until the config is freed),
 * NULL when unset.  Defaults say "default"; a derived default says why
 * ("default for sgd").  Before resolve(): the source of the raw value that
 * peek_* returns (valid until the next call on cfg). */
const char *accelp_config_source(const accel_config *cfg, const char *path);

/* Before resolve(): raw lookups of core keys the loader needs to know which
 * plugins to load (strategy, plugins, plugin_dirs, backend), honouring the
 * layers (defaults of registered schemas included) but without schema
 * checks.  Same return conventions (ACCEL_ERR_CONFIG when the value has the
 * wrong JSON type). */
int accelp_config_peek_string(const accel_config *cfg, const char *path, const char **ret);
int accelp_config_peek_strlist(const accel_config *cfg, const char *path, uint32_t index,
                              const char **ret);
/* Before resolve(): where element `index` of the list peek_strlist sees
 * comes from ("file:line:col" of the element in a file; the variable or
 * --set text otherwise); NULL when unset.  Valid until the next call on cfg. */
const char *accelp_config_peek_source_at(const accel_config *cfg, const char *path,
                                         uint32_t index);

/* Print every key: with show_sources, "key = value    # source"; with
 * resolved=0 only keys that were set by some layer (not defaults).  Values
 * are JSON ("ddp" quoted), unset keys print as null.  Keys of unselected
 * sections are left out.  Before resolve() it prints the raw assignments of
 * every layer instead. */
void accelp_config_dump(const accel_config *cfg, FILE *out, int resolved, int show_sources);
/* The same as one JSON document: {"config": {nested values, a valid config
 * file}, "sources": {"dotted.key": "source", ...}} (sources only with
 * show_sources).  Needs resolve(). */
int accelp_config_dump_json(const accel_config *cfg, FILE *out, int resolved, int show_sources);

/* Nonzero when `name` is an ACCEL_* variable that is not configuration
 * (ACCEL_RANK, ACCEL_CONFIG, ACCEL_TEST_*, ...; see docs/config.md). */
int accelp_config_env_reserved(const char *name);

#endif
