/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-config.c: the config layers, from any bytes.
 *
 * Input: sections separated by a line "%%".  Section 0 is a config file's
 * text (accelp_config_load_string); each later line is a --set assignment
 * (accelp_config_set), or, when it starts with "env ", one environment entry
 * (accelp_config_load_env: ACCEL_* variables and the launcher's ACCEL_SET).  A plugin section "fz" with one key of every type is
 * declared, then everything is resolved, read back and dumped.  Any outcome
 * but a crash, a sanitizer report or a leak is fine: bad input must give an
 * error code with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/plugin.h"
#include "config.h"
#include "fuzz.h"

static const accel_param_schema_v1 schema[] = {
	{sizeof(accel_param_schema_v1), ACCEL_CFG_BOOL, "flag", "true", 1, 0, NULL, "a bool"},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_INT, "n", "4", 1, 64, NULL, "an int"},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_DOUBLE, "nested.x", "0.5", 0, 1, NULL, "a double"},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_STRING, "name", NULL, 1, 0, NULL, "a string"},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_ENUM, "dev", "\"cpu\"", 1, 0, "none|cpu|nvme",
	 "an enum"},
	{sizeof(accel_param_schema_v1), ACCEL_CFG_STRLIST, "list", "[]", 1, 0, NULL, "a list"},
};

static void fail_check(const accel_err *e, int r)
{
	/* Every failure must say what went wrong. */
	if (r != ACCEL_OK && (e->code == ACCEL_OK || !e->msg[0])) {
		fprintf(stderr, "fuzz-config: error %d without a message\n", r);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	accel_config *cfg = NULL;
	accel_err e = {0};
	if (accelp_config_new(&cfg, &e) != ACCEL_OK) {
		free(text);
		return 0;
	}
	char *sep = strstr(text, "\n%%\n");
	char *sets = NULL;
	if (sep) {
		*sep = '\0';
		sets = sep + 4;
	}
	int r = accelp_config_load_string(cfg, text, "fuzz.json", &e);
	fail_check(&e, r);
	accelp_err_clear(&e);
	for (char *line = sets; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strncmp(line, "env ", 4)) {
			char *envp[] = {line + 4, NULL};
			r = accelp_config_load_env(cfg, envp, &e);
			fail_check(&e, r);
			accelp_err_clear(&e);
		} else if (strcmp(line, "%%") != 0) {
			r = accelp_config_set(cfg, line, NULL, &e);
			fail_check(&e, r);
			accelp_err_clear(&e);
		}
		line = nl ? nl + 1 : NULL;
	}
	r = accelp_config_add_schema(cfg, "fz", "fuzz", schema, sizeof(schema) / sizeof(schema[0]), 1,
	                            &e);
	fail_check(&e, r);
	accelp_err_clear(&e);
	FILE *sink = fopen("/dev/null", "w");
	if (sink)
		accelp_config_dump(cfg, sink, 0, 1);
	r = accelp_config_resolve(cfg, &e);
	fail_check(&e, r);
	if (r == ACCEL_OK) {
		int32_t b;
		int64_t i;
		double d;
		const char *s;
		uint32_t n = 0;
		accelp_config_get_bool(cfg, "fz.flag", &b);
		accelp_config_get_int(cfg, "fz.n", &i);
		accelp_config_get_double(cfg, "fz.nested.x", &d);
		accelp_config_get_string(cfg, "fz.name", &s);
		accelp_config_get_string(cfg, "fz.dev", &s);
		if (accelp_config_get_count(cfg, "fz.list", &n) == ACCEL_OK)
			for (uint32_t k = 0; k < n; k++)
				accelp_config_get_strlist(cfg, "fz.list", k, &s);
		accelp_config_get_string(cfg, "backend", &s);
		accelp_config_get_strlist(cfg, "plugins", 0, &s);
		accelp_config_source(cfg, "fz.n");
		if (sink) {
			accelp_config_dump(cfg, sink, 1, 1);
			accelp_config_dump_json(cfg, sink, 1, 1);
		}
	}
	if (sink)
		fclose(sink);
	accelp_config_free(cfg);
	free(text);
	return 0;
}
