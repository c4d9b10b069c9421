/* SPDX-License-Identifier: MIT */
/* core/config_import.h: other tools' configurations mapped onto accel's keys
 * (private to libaccel and the CLI).
 *
 * A DeepSpeed JSON config (`deepspeed_config_file`, `accel config
 * import-deepspeed`) is mapped here; the CLI maps Accelerate's YAML
 * (`accel config import-accelerate`) with the same builder.  Nothing is
 * dropped in silence: every value that becomes an accel key is recorded in
 * `mapped`, every "auto" in `autos` with the value it took, and every key
 * accel does not support in `unsupported`, each as one line of text.
 * docs/config.md has the mapping table. */
#ifndef ACCEL_CORE_CONFIG_IMPORT_H
#define ACCEL_CORE_CONFIG_IMPORT_H

#include <jansson.h>

#include "config.h"
#include "error.h"

typedef struct accelp_import {
	json_t *config;        /* the accel config built: a nested object, a valid
	                          config file once written (owned)                 */
	json_t *mapped;        /* array of strings: "ds-key -> accel-key = value"  */
	json_t *autos;         /* array of strings: "key: \"auto\" -> value (why)" */
	json_t *unsupported;   /* array of strings: "key = value: why"             */
	json_t *launch;        /* array of strings: settings that belong to
	                          `accel launch` ("-n 4 (num_processes 4)")        */
	char strategy[64];     /* the strategy selected ("ddp" when nothing says)  */
	char strategy_why[256];/* what selected it ("zero_optimization.stage 2")   */
	const accel_config *schemas; /* optional: every installed module's schema
	                          registered (accelp_setup with resolve): "auto" in
	                          a plugin section takes its default, and keys the
	                          installed plugin does not declare are unsupported */
	accel_config *core;    /* the core schema, for the defaults of core keys   */
} accelp_import;

/* An empty import (strategy "ddp").  schemas may be NULL. */
int accelp_import_init(accelp_import *imp, const accel_config *schemas, accel_err *err);
void accelp_import_fini(accelp_import *imp);   /* NULL-safe */

/* Set dotted `key` of imp->config to `v` (reference stolen), recording
 * "from -> key = value" in mapped. */
int accelp_import_put(accelp_import *imp, const char *from, const char *key, json_t *v);
/* Record one line in imp->unsupported / imp->autos / imp->launch. */
void accelp_import_note(json_t *list, const char *fmt, ...) ACCEL_PRINTF(2, 3);
/* "auto" for accel key `key` (given as `from`): records the default it takes
 * (the core's, or the installed plugin's; left unset) in autos. */
void accelp_import_auto(accelp_import *imp, const char *from, const char *key);
/* Select the strategy, with the reason. */
void accelp_import_strategy(accelp_import *imp, const char *name, const char *why, ...)
	ACCEL_PRINTF(3, 4);
/* Copy a section (DeepSpeed's zero_optimization, Accelerate's fsdp_*) into
 * accel section `section` key by key: "auto" values take the installed
 * plugin's default (autos), keys the installed plugin does not declare are
 * unsupported; without the plugin every key is copied as given. */
int accelp_import_section_value(accelp_import *imp, const char *from, const char *section,
                                const char *key, json_t *v);

/* Map DeepSpeed config `ds` (a JSON object read from `name`) into imp. */
int accelp_import_deepspeed(accelp_import *imp, json_t *ds, const char *name, accel_err *err);
/* Read and map DeepSpeed config file `path`. */
int accelp_import_deepspeed_file(accelp_import *imp, const char *path, accel_err *err);

/* Each list of imp as log lines / a "//" comment array for the file
 * written (every mapped, auto, unsupported and launch line). */
json_t *accelp_import_comment(const accelp_import *imp, const char *header);

#endif /* ACCEL_CORE_CONFIG_IMPORT_H */
