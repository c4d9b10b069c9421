/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-import.c: `accel config import-deepspeed` and
 * `import-accelerate`, from any bytes.
 *
 * Input: when the first line is "accelerate", the rest is an Accelerate
 * YAML config (cli/import-accelerate.c; a build without libyaml refuses it
 * with a message, which is checked too); otherwise the input, less a first
 * line "deepspeed", is a DeepSpeed JSON config (core/config_deepspeed.c),
 * read from a file as the command reads it.  Each is imported twice:
 * without the plugins' schemas and with three sections declared as the
 * zero, scaler and fsdp plugins declare them (so "auto" takes a default,
 * and keys a plugin does not declare are listed).  An import is refused
 * with an error code and a message, or it succeeds: then every list it
 * keeps holds strings, its comment block is built, and the config it
 * writes is loaded and resolved as `accel config validate` would, which
 * accepts it or refuses it with a message.  Never a crash, a sanitizer
 * report or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "accel/plugin.h"
#include "config.h"
#include "config_import.h"
#include "import-accelerate.h"
#include "fuzz.h"

#define P(type, key, def, lo, hi, choices) \
	{sizeof(accel_param_schema_v1), type, key, def, lo, hi, choices, "fuzz"}
static const accel_param_schema_v1 zero_schema[] = {
	P(ACCEL_CFG_INT, "stage", "2", 0, 3, NULL),
	P(ACCEL_CFG_ENUM, "offload_optimizer.device", "\"none\"", 1, 0, "none|cpu|nvme"),
	P(ACCEL_CFG_ENUM, "offload_param.device", "\"none\"", 1, 0, "none|cpu|nvme"),
	P(ACCEL_CFG_STRING, "offload_optimizer.nvme_path", NULL, 1, 0, NULL),
	P(ACCEL_CFG_INT, "reduce_bucket_size", "500000000", 1, 0, NULL),
	P(ACCEL_CFG_BOOL, "overlap_comm", "true", 1, 0, NULL),
	P(ACCEL_CFG_INT, "aio.block_size", "1048576", 4096, 1 << 30, NULL),
};
static const accel_param_schema_v1 scaler_schema[] = {
	P(ACCEL_CFG_BOOL, "dynamic", "true", 1, 0, NULL),
	P(ACCEL_CFG_DOUBLE, "init_scale", "65536", 0, 3.4028234663852886e38, NULL),
	P(ACCEL_CFG_INT, "growth_interval", "2000", 1, 1000000000, NULL),
	P(ACCEL_CFG_INT, "hysteresis", "1", 1, 1000000, NULL),
	P(ACCEL_CFG_BOOL, "consecutive_hysteresis", "false", 1, 0, NULL),
	P(ACCEL_CFG_DOUBLE, "min_loss_scale", "0", 0, 3.4028234663852886e38, NULL),
};
static const accel_param_schema_v1 fsdp_schema[] = {
	P(ACCEL_CFG_ENUM, "sharding_strategy", "\"FULL_SHARD\"", 1, 0,
	  "FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|HYBRID_SHARD_ZERO2"),
	P(ACCEL_CFG_BOOL, "cpu_offload", "false", 1, 0, NULL),
	P(ACCEL_CFG_STRLIST, "transformer_cls_names_to_wrap", "[]", 1, 0, NULL),
	P(ACCEL_CFG_INT, "min_num_params", "0", 0, 0, NULL),
};
#undef P

static void must(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-import: %s\n", what);
		abort();
	}
}

static void fail_check(const accel_err *e, int r, const char *what)
{
	if (r != ACCEL_OK && (e->code != r || !e->msg[0])) {
		fprintf(stderr, "fuzz-import: %s: error %d without its message\n", what, r);
		abort();
	}
}

static accel_config *schemas_new(void)
{
	accel_config *c = NULL;
	accel_err e = {0};
	if (accelp_config_new(&c, &e))
		return NULL;
	if (accelp_config_add_schema(c, "zero_optimization", "zero", zero_schema,
	                             sizeof(zero_schema) / sizeof(*zero_schema), 0, &e) ||
	    accelp_config_add_schema(c, "scaler", "scaler", scaler_schema,
	                             sizeof(scaler_schema) / sizeof(*scaler_schema), 0, &e) ||
	    accelp_config_add_schema(c, "fsdp", "fsdp", fsdp_schema,
	                             sizeof(fsdp_schema) / sizeof(*fsdp_schema), 0, &e)) {
		fprintf(stderr, "fuzz-import: the fuzz schemas do not register: %s\n", e.msg);
		abort();
	}
	return c;
}

static void lists_ok(const accelp_import *imp)
{
	const json_t *lists[] = {imp->mapped, imp->autos, imp->unsupported, imp->launch};
	for (size_t k = 0; k < sizeof(lists) / sizeof(*lists); k++) {
		size_t i;
		json_t *e;
		must(json_is_array(lists[k]), "a report list is not an array");
		json_array_foreach(lists[k], i, e)
			must(json_is_string(e), "a report line is not a string");
	}
	must(json_is_object(imp->config), "the imported config is not an object");
	must(memchr(imp->strategy, '\0', sizeof(imp->strategy)) && imp->strategy[0],
	     "no strategy selected");
}

/* The config the command writes, loaded and resolved (with schemas when given). */
static void validate(const accelp_import *imp, int with_schemas)
{
	json_t *doc = json_object();
	json_t *comment = accelp_import_comment(imp, "fuzz");
	must(doc && comment, "out of memory building the written config");
	json_object_set_new(doc, "//", comment);
	json_object_set_new(doc, "strategy", json_string(imp->strategy));
	json_object_update(doc, imp->config);
	char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	json_decref(doc);
	must(text != NULL, "the imported config does not serialize");
	accel_config *cfg = with_schemas ? schemas_new() : NULL;
	accel_err e = {0};
	if (!cfg && accelp_config_new(&cfg, &e)) {
		free(text);
		return;
	}
	int r = accelp_config_load_string(cfg, text, "imported.json", &e);
	fail_check(&e, r, "loading the written config");
	if (!r) {
		r = accelp_config_resolve(cfg, &e);
		fail_check(&e, r, "resolving the written config");
	}
	accelp_config_free(cfg);
	free(text);
}

static void import_once(const char *text, size_t len, int yaml, int with_schemas)
{
	accel_config *schemas = with_schemas ? schemas_new() : NULL;
	accelp_import imp;
	accel_err e = {0};
	if (accelp_import_init(&imp, schemas, &e)) {
		accelp_config_free(schemas);
		return;
	}
	int r;
	if (yaml) {
		json_t *y = NULL;
		r = accelp_import_yaml_parse(text, len, "fuzz.yaml", &y, &e);
		fail_check(&e, r, "reading the YAML");
		must(r || json_is_object(y), "accepted YAML that is not a mapping");
		if (!r) {
			r = accelp_import_accelerate(&imp, y, "fuzz.yaml", &e);
			fail_check(&e, r, "import-accelerate");
		}
		json_decref(y);
	} else {
		/* from a file, as the command reads it */
		char path[FUZZ_PATH_MAX];
		int fd = fuzz_input_file("fuzz-import", (const uint8_t *)text, len, path);
		if (fd < 0) {
			accelp_import_fini(&imp);
			accelp_config_free(schemas);
			return;
		}
		r = accelp_import_deepspeed_file(&imp, path, &e);
		fail_check(&e, r, "import-deepspeed");
		close(fd);
	}
	if (!r) {
		lists_ok(&imp);
		validate(&imp, with_schemas);
	}
	accelp_import_fini(&imp);
	accelp_config_free(schemas);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	int yaml = 0;
	if (size >= 11 && !memcmp(data, "accelerate\n", 11)) {
		yaml = 1;
		text += 11;
		size -= 11;
	} else if (size >= 10 && !memcmp(data, "deepspeed\n", 10)) {
		text += 10;
		size -= 10;
	}
	import_once(text, size, yaml, 0);
	import_once(text, size, yaml, 1);
	return 0;
}
