/* SPDX-License-Identifier: MIT */
/* cli/import-accelerate.c: Accelerate's YAML config (the file `accelerate
 * config` writes) read with libyaml and mapped onto accel's keys with the
 * import builder (core/config_import.h), for `accel config
 * import-accelerate`.  Its own file so that the fuzz target of the
 * importers (tests/fuzz/fuzz-import.c) links it without the command. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "accel-build-config.h"
#include "import-accelerate.h"

#if ACCEL_HAVE_YAML
#include <yaml.h>

/* A plain scalar as YAML 1.1 (PyYAML's safe_load) reads it. */
static json_t *yaml_scalar(const yaml_node_t *n)
{
	const char *s = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || memchr(s, '\0', len))
		return json_stringn(s, len);
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
	static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On",
	                                    "ON"};
	static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO", "off",
	                                     "Off", "OFF"};
	for (size_t i = 0; i < sizeof(nulls) / sizeof(*nulls); i++)
		if (!strcmp(s, nulls[i]))
			return json_null();
	for (size_t i = 0; i < sizeof(trues) / sizeof(*trues); i++)
		if (!strcmp(s, trues[i]))
			return json_true();
	for (size_t i = 0; i < sizeof(falses) / sizeof(*falses); i++)
		if (!strcmp(s, falses[i]))
			return json_false();
	char *end;
	errno = 0;
	long long iv = strtoll(s, &end, 10);
	if (*s && !*end && !errno)
		return json_integer(iv);
	double dv = strtod(s, &end);
	/* (jansson holds no Inf: "1e999" stays a string) */
	if (*s && !*end && strspn(s, "+-0123456789.eE") == len && isfinite(dv))
		return json_real(dv);
	return json_stringn(s, len);
}

/* Nodes one document may expand to.  An alias is a reference, and a
 * mapping of aliases to mappings of aliases doubles at each level ("a
 * billion laughs"): 30 lines of YAML would be 2^30 JSON values.  An
 * Accelerate config has a few dozen. */
#define YAML_MAX_NODES 100000
#define YAML_MAX_DEPTH 64

typedef struct yaml_walk {
	yaml_document_t *d;
	uint64_t nodes;
	const char *why;   /* set when a limit or the input stopped the walk */
} yaml_walk;

static json_t *yaml_to_json(yaml_walk *w, yaml_node_t *n, int depth)
{
	if (!n) {
		w->why = "a reference to a node that does not exist";
		return NULL;
	}
	if (depth > YAML_MAX_DEPTH) {
		w->why = "nested more than 64 levels deep (or an alias that contains itself)";
		return NULL;
	}
	if (++w->nodes > YAML_MAX_NODES) {
		w->why = "more than 100000 values once its aliases are expanded (an Accelerate "
		         "config has a few dozen)";
		return NULL;
	}
	switch (n->type) {
	case YAML_SCALAR_NODE: {
		json_t *v = yaml_scalar(n);
		if (!v)
			w->why = "a string that is not valid UTF-8";
		return v;
	}
	case YAML_SEQUENCE_NODE: {
		json_t *a = json_array();
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     a && it < n->data.sequence.items.top; it++) {
			json_t *e = yaml_to_json(w, yaml_document_get_node(w->d, *it), depth + 1);
			if (!e || json_array_append_new(a, e)) {
				json_decref(a);
				return NULL;
			}
		}
		return a;
	}
	case YAML_MAPPING_NODE: {
		json_t *o = json_object();
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     o && p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(w->d, p->key);
			if (!k || k->type != YAML_SCALAR_NODE) {
				w->why = "a mapping key that is not a plain value";
				json_decref(o);
				return NULL;
			}
			json_t *v = yaml_to_json(w, yaml_document_get_node(w->d, p->value), depth + 1);
			if (!v || json_object_set_new(o, (const char *)k->data.scalar.value, v)) {
				if (v && !w->why)
					w->why = "a mapping key that is not valid UTF-8";
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	default:
		w->why = "an empty node";
		return NULL;
	}
}

int accelp_import_yaml_parse(const char *text, size_t len, const char *name, json_t **ret,
                             accel_err *err)
{
	yaml_parser_t p;
	yaml_document_t d;
	json_t *r = NULL;
	int rc = ACCEL_OK;
	if (!yaml_parser_initialize(&p))
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory reading YAML", name);
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, &d)) {
		rc = accelp_err_set(err, ACCEL_ERR_CONFIG, "%s:%zu:%zu: invalid YAML: %s", name,
		                    p.problem_mark.line + 1, p.problem_mark.column + 1,
		                    p.problem ? p.problem : "parse error");
		yaml_parser_delete(&p);
		return rc;
	}
	yaml_node_t *root = yaml_document_get_root_node(&d);
	yaml_walk w = {.d = &d};
	if (!root) {
		rc = accelp_err_set(err, ACCEL_ERR_CONFIG, "%s: expected a mapping of settings (the "
		                    "file `accelerate config` writes); the file is empty", name);
	} else if (!(r = yaml_to_json(&w, root, 0)) && w.why) {
		rc = accelp_err_set(err, ACCEL_ERR_CONFIG, "%s: not read: %s", name, w.why);
	} else if (!r) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "%s: out of memory reading YAML", name);
	} else if (!json_is_object(r)) {
		rc = accelp_err_set(err, ACCEL_ERR_CONFIG, "%s: expected a mapping of settings (the "
		                    "file `accelerate config` writes)", name);
	}
	yaml_document_delete(&d);
	yaml_parser_delete(&p);
	if (rc) {
		json_decref(r);
		return rc;
	}
	*ret = r;
	return ACCEL_OK;
}

#else

int accelp_import_yaml_parse(const char *text, size_t len, const char *name, json_t **ret,
                             accel_err *err)
{
	(void)text;
	(void)len;
	(void)ret;
	return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "%s: this accel was built without "
	                      "libyaml (install libyaml-dev, tools/install-deps.sh does, and "
	                      "rebuild)", name);
}

#endif

/* ---- Accelerate's settings onto accel's -------------------------------------- */

static void note_value(json_t *list, const char *key, const json_t *v, const char *why)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	accelp_import_note(list, "%s = %s: %s", key, s ? s : "?", why);
	free(s);
}

static int in_list(const char *k, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(k, *list))
			return 1;
	return 0;
}

/* Accelerate's deepspeed_config: its own key names, or a DeepSpeed file. */
static int map_acc_deepspeed(accelp_import *imp, json_t *dc, const char *yaml_path,
                             accel_err *err)
{
	const char *k;
	json_t *v;
	int r = ACCEL_OK;
	json_t *stage = json_object_get(dc, "zero_stage");
	json_int_t st = json_is_integer(stage) ? json_integer_value(stage) : -1;
	if (stage && (st < 0 || st > 3)) {
		note_value(imp->unsupported, "deepspeed_config.zero_stage", stage,
		           "expected 0, 1, 2 or 3");
	} else if (st == 0) {
		accelp_import_strategy(imp, "ddp", "deepspeed_config.zero_stage 0 (ZeRO off)");
	} else if (st > 0) {
		accelp_import_strategy(imp, "zero", "deepspeed_config.zero_stage %d", (int)st);
		r = accelp_import_put(imp, "deepspeed_config.zero_stage", "strategy", json_string("zero"));
		if (!r)
			r = accelp_import_section_value(imp, "deepspeed_config.zero_stage",
			                                "zero_optimization", "stage", stage);
	}
	static const struct {
		const char *acc, *key;
	} zmap[] = {
		{"offload_optimizer_device", "offload_optimizer.device"},
		{"offload_param_device", "offload_param.device"},
		{"offload_optimizer_nvme_path", "offload_optimizer.nvme_path"},
		{"offload_param_nvme_path", "offload_param.nvme_path"},
		{"zero3_save_16bit_model", "stage3_gather_16bit_weights_on_model_save"},
	};
	json_object_foreach(dc, k, v) {
		char from[256];
		snprintf(from, sizeof(from), "deepspeed_config.%s", k);
		if (r || !strcmp(k, "zero_stage") || json_is_null(v))
			continue;
		if (!strcmp(k, "gradient_accumulation_steps")) {
			if (json_is_string(v) && !strcmp(json_string_value(v), "auto"))
				accelp_import_auto(imp, from, "gradient_accumulation_steps");
			else
				r = accelp_import_put(imp, from, "gradient_accumulation_steps", json_incref(v));
			continue;
		}
		if (!strcmp(k, "gradient_clipping")) {
			if (json_is_string(v) && !strcmp(json_string_value(v), "auto"))
				accelp_import_note(imp->autos, "%s: \"auto\" -> unset (accel's default for "
				                   "max_grad_norm: no clipping)", from);
			else if (json_is_number(v) && json_number_value(v) == 0)
				accelp_import_note(imp->mapped, "%s 0 (no clipping) -> max_grad_norm unset",
				                   from);
			else
				r = accelp_import_put(imp, from, "max_grad_norm", json_incref(v));
			continue;
		}
		if (!strcmp(k, "deepspeed_config_file") && json_is_string(v)) {
			const char *p = json_string_value(v), *slash = strrchr(yaml_path, '/');
			char full[4096];
			if (p[0] != '/' && slash)
				snprintf(full, sizeof(full), "%.*s/%s", (int)(slash - yaml_path), yaml_path, p);
			else
				snprintf(full, sizeof(full), "%s", p);
			accelp_import_note(imp->mapped, "%s: %s imported (the DeepSpeed mapping)", from,
			                   full);
			r = accelp_import_deepspeed_file(imp, full, err);
			if (r)
				return r;
			continue;
		}
		size_t i;
		for (i = 0; i < sizeof(zmap) / sizeof(*zmap); i++)
			if (!strcmp(k, zmap[i].acc))
				break;
		if (i < sizeof(zmap) / sizeof(*zmap) && st > 0) {
			r = accelp_import_section_value(imp, from, "zero_optimization", zmap[i].key, v);
			continue;
		}
		note_value(imp->unsupported, from, v,
		           i < sizeof(zmap) / sizeof(*zmap) ? "ZeRO is off (zero_stage 0 or not given)"
		                                            : "no accel equivalent");
	}
	return r ? (err->code ? r : accelp_err_set(err, r, "out of memory")) : ACCEL_OK;
}

static int map_acc_fsdp(accelp_import *imp, json_t *fc)
{
	/* torch-only settings */
	static const char *const torch_only[] = {
		"fsdp_cpu_ram_efficient_loading", "fsdp_activation_checkpointing", "fsdp_version", NULL};
	/* Accelerate's names that are not the fsdp plugin's key without the
	 * prefix (FullyShardedDataParallelPlugin's own field names) */
	static const char *const renamed[][2] = {
		{"fsdp_transformer_layer_cls_to_wrap", "transformer_cls_names_to_wrap"},
		{"fsdp_offload_params", "cpu_offload"}};
	static const char *const strategies[] = {NULL, "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
	                                         "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
	const char *k;
	json_t *v;
	json_object_foreach(fc, k, v) {
		char from[256];
		snprintf(from, sizeof(from), "fsdp_config.%s", k);
		if (json_is_null(v))
			continue;
		if (in_list(k, torch_only)) {
			note_value(imp->unsupported, from, v, "accel shards by the units the program "
			           "registers; this torch module setting has no equivalent");
			continue;
		}
		if (strncmp(k, "fsdp_", 5)) {
			note_value(imp->unsupported, from, v, "not an fsdp_* setting");
			continue;
		}
		const char *to = k + 5;
		for (size_t i = 0; i < sizeof(renamed) / sizeof(renamed[0]); i++)
			if (!strcmp(k, renamed[i][0]))
				to = renamed[i][1];
		json_t *val = json_incref(v);
		if (!strcmp(k, "fsdp_transformer_layer_cls_to_wrap") && json_is_array(v)) {
			/* a list of class names: the plugin's comma-separated patterns */
			char names[1024] = "";
			size_t i, at = 0;
			json_t *e;
			json_array_foreach(v, i, e) {
				if (!json_is_string(e))
					continue;
				int n = snprintf(names + at, sizeof(names) - at, "%s%s", at ? "," : "",
				                 json_string_value(e));
				if (n < 0 || (size_t)n >= sizeof(names) - at)
					break;
				at += (size_t)n;
			}
			json_decref(val);
			val = json_string(names);
		}
		if (!strcmp(k, "fsdp_sharding_strategy") && json_is_integer(v) &&
		    json_integer_value(v) >= 1 && json_integer_value(v) <= 5) {
			json_decref(val);
			val = json_string(strategies[json_integer_value(v)]);
		}
		int r = val ? accelp_import_section_value(imp, from, "fsdp", to, val) : ACCEL_ERR_NOMEM;
		json_decref(val);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

int accelp_import_accelerate(accelp_import *imp, json_t *y, const char *path, accel_err *err)
{
	static const char *const ddp_types[] = {"NO", "MULTI_GPU", "MULTI_CPU", "MULTI_NPU",
	                                        "MULTI_XPU", "MULTI_MLU", "MULTI_MUSA", "MULTI_HPU",
	                                        "MULTI_SDAA", NULL};
	json_t *dt = json_object_get(y, "distributed_type");
	const char *type = json_is_string(dt) ? json_string_value(dt) : "NO";
	int r = ACCEL_OK;
	if (in_list(type, ddp_types)) {
		accelp_import_strategy(imp, "ddp", "distributed_type %s", type);
		r = accelp_import_put(imp, "distributed_type", "strategy", json_string("ddp"));
	} else if (!strcmp(type, "FSDP")) {
		accelp_import_strategy(imp, "fsdp", "distributed_type FSDP");
		r = accelp_import_put(imp, "distributed_type", "strategy", json_string("fsdp"));
	} else if (strcmp(type, "DEEPSPEED")) {
		note_value(imp->unsupported, "distributed_type", dt, "accel's strategies are ddp "
		           "(NO, MULTI_GPU, MULTI_CPU), zero (DEEPSPEED) and fsdp (FSDP)");
	}
	json_t *n = json_object_get(y, "num_processes"), *m = json_object_get(y, "num_machines");
	json_int_t np = json_is_integer(n) ? json_integer_value(n) : 1;
	json_int_t nm = json_is_integer(m) ? json_integer_value(m) : 1;
	const char *k;
	json_t *v;
	json_object_foreach(y, k, v) {
		if (r)
			break;
		if (!strcmp(k, "distributed_type") || json_is_null(v))
			continue;
		if (!strcmp(k, "mixed_precision")) {
			const char *s = json_is_string(v) ? json_string_value(v) : "";
			if (!strcmp(s, "no") || !strcmp(s, "fp16") || !strcmp(s, "bf16") ||
			    !strcmp(s, "fp8"))
				r = accelp_import_put(imp, k, "mixed_precision", json_string(s));
			else
				note_value(imp->unsupported, k, v, "expected no, fp16, bf16 or fp8");
		} else if (!strcmp(k, "num_processes") && json_is_integer(v)) {
			if (nm > 1 && np % nm)
				note_value(imp->unsupported, k, v, "not a multiple of num_machines");
			else
				accelp_import_note(imp->launch, "-n %lld (num_processes %lld%s)",
				                   (long long)(np / (nm > 0 ? nm : 1)), (long long)np,
				                   nm > 1 ? " over num_machines" : "");
		} else if (!strcmp(k, "num_machines") && json_is_integer(v)) {
			if (nm > 1)
				accelp_import_note(imp->launch, "--nnodes %lld (num_machines)", (long long)nm);
			else
				accelp_import_note(imp->mapped, "num_machines 1: one node, accel launch's "
				                   "default");
		} else if (!strcmp(k, "machine_rank") && json_is_integer(v)) {
			if (nm > 1)
				accelp_import_note(imp->launch, "--node-rank %lld (machine_rank)",
				                   (long long)json_integer_value(v));
			else
				accelp_import_note(imp->mapped, "machine_rank %lld: one node",
				                   (long long)json_integer_value(v));
		} else if (!strcmp(k, "main_process_ip") && json_is_string(v)) {
			accelp_import_note(imp->launch, "--master-addr %s (main_process_ip)",
			                   json_string_value(v));
		} else if (!strcmp(k, "main_process_port") && json_is_integer(v)) {
			accelp_import_note(imp->launch, "--master-port %lld (main_process_port)",
			                   (long long)json_integer_value(v));
		} else if (!strcmp(k, "compute_environment") && json_is_string(v) &&
		           !strcmp(json_string_value(v), "LOCAL_MACHINE")) {
			accelp_import_note(imp->mapped, "compute_environment LOCAL_MACHINE: nothing to set");
		} else if (!strcmp(k, "gpu_ids") && json_is_string(v) &&
		           !strcmp(json_string_value(v), "all")) {
			accelp_import_note(imp->mapped, "gpu_ids all: every visible GPU, accel's default");
		} else if (!strcmp(k, "gpu_ids")) {
			note_value(imp->unsupported, k, v, "choose GPUs with CUDA_VISIBLE_DEVICES");
		} else if (!strcmp(k, "deepspeed_config") && json_is_object(v)) {
			if (strcmp(type, "DEEPSPEED"))
				note_value(imp->unsupported, k, v, "distributed_type is not DEEPSPEED");
			else
				r = map_acc_deepspeed(imp, v, path, err);
		} else if (!strcmp(k, "fsdp_config") && json_is_object(v)) {
			if (strcmp(type, "FSDP"))
				note_value(imp->unsupported, k, v, "distributed_type is not FSDP");
			else
				r = map_acc_fsdp(imp, v);
		} else if (json_is_false(v) || (json_is_string(v) && !strcmp(json_string_value(v), "no"))) {
			note_value(imp->unsupported, k, v, "no accel equivalent (off: nothing is lost)");
		} else {
			note_value(imp->unsupported, k, v, "no accel equivalent");
		}
	}
	if (!strcmp(type, "DEEPSPEED") && !json_is_object(json_object_get(y, "deepspeed_config")))
		accelp_import_note(imp->unsupported, "distributed_type = \"DEEPSPEED\" without "
		                   "deepspeed_config: no ZeRO stage given, strategy stays ddp");
	if (r && !err->code)
		accelp_err_set(err, r, "%s: out of memory while importing", path);
	return r;
}
