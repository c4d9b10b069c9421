/* SPDX-License-Identifier: MIT */
/* cli/import-accelerate.h: Accelerate's YAML config onto accel's keys
 * (cli/import-accelerate.c; the builder and the DeepSpeed mapping are
 * core/config_import.h's). */
#ifndef ACCEL_CLI_IMPORT_ACCELERATE_H
#define ACCEL_CLI_IMPORT_ACCELERATE_H

#include <stddef.h>

#include <jansson.h>

#include "config_import.h"

/* Read YAML text[0..len) of file `name` as PyYAML's safe_load would (YAML
 * 1.1 plain scalars: null, bools, numbers) into a JSON object (owned, in
 * *ret).  ACCEL_ERR_CONFIG with "name:line:col: invalid YAML: ..." or what
 * else is wrong (not a mapping, empty, too deep, aliases that expand past
 * 100000 values); ACCEL_ERR_UNSUPPORTED in a build without libyaml. */
int accelp_import_yaml_parse(const char *text, size_t len, const char *name, json_t **ret,
                             accel_err *err);

/* Map Accelerate config `y` (read from `path`; a deepspeed_config_file in
 * it is found beside it) into imp.  Errors (ACCEL_ERR_NOMEM, or the
 * DeepSpeed file's) with a message in err. */
int accelp_import_accelerate(accelp_import *imp, json_t *y, const char *path, accel_err *err);

#endif /* ACCEL_CLI_IMPORT_ACCELERATE_H */
