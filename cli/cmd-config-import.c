/* SPDX-License-Identifier: MIT */
/* cli/cmd-config-import.c: `accel config import-deepspeed` and `accel config
 * import-accelerate`: another tool's config written as an accel config,
 * with every mapping, every "auto" and every key left out reported
 * (core/config_import.h; the DeepSpeed mapping is core/config_deepspeed.c,
 * shared with the `deepspeed_config_file` key).  Accelerate's YAML is read
 * with libyaml. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "accel-build-config.h"
#include "cli.h"
#include "cmd-config.h"
#include "config_import.h"
#include "loader.h"

#if ACCEL_HAVE_YAML
#include <yaml.h>
#endif

static void usage_import(FILE *out, int accelerate)
{
	const char *sub = accelerate ? "import-accelerate" : "import-deepspeed";
	fprintf(out,
		"Usage: accel config %s FILE [--output OUT] [--force] [--config CFG]\n"
		"\n"
		"Write %s as an accel config.  Keys are mapped to accel's names\n"
		"(docs/config.md has the table), every \"auto\" takes accel's default (or the\n"
		"installed plugin's) and is reported with the value it took, and every key accel\n"
		"does not support is listed: nothing is dropped in silence.  The report goes to\n"
		"stderr and into the file as \"//\" comments.  A strategy the file selects that\n"
		"is not installed (zero, fsdp) is named; the file is still written.\n"
		"\n"
		"Options:\n"
		"  -o, --output OUT  write here (default: stdout); the file is then checked as\n"
		"                    `accel config validate` would\n"
		"  --force           overwrite OUT if it exists\n"
		"  --config CFG      look for the strategy also in the plugin_dirs of CFG\n"
		"                    (default: the config accel finds: $ACCEL_CONFIG,\n"
		"                    ./accel.json, ~/.config/accel/default.json)\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 written (and valid here), 1 not written, or written but not usable\n"
		"here (a strategy or plugin not installed, a check failed), 2 bad usage.\n",
		sub, accelerate ? "an Accelerate config (the YAML `accelerate config` writes)"
		                : "a DeepSpeed JSON config");
}

/* ---- Accelerate's YAML ----------------------------------------------------- */

#if ACCEL_HAVE_YAML
/* A plain scalar as YAML 1.1 (PyYAML's safe_load) reads it. */
static json_t *yaml_scalar(const yaml_node_t *n)
{
	const char *s = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
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
	if (*s && !*end && strspn(s, "+-0123456789.eE") == len)
		return json_real(dv);
	return json_stringn(s, len);
}

static json_t *yaml_to_json(yaml_document_t *d, yaml_node_t *n, int depth)
{
	if (!n || depth > 64)
		return NULL;
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return yaml_scalar(n);
	case YAML_SEQUENCE_NODE: {
		json_t *a = json_array();
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     a && it < n->data.sequence.items.top; it++) {
			json_t *e = yaml_to_json(d, yaml_document_get_node(d, *it), depth + 1);
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
			yaml_node_t *k = yaml_document_get_node(d, p->key);
			json_t *v = yaml_to_json(d, yaml_document_get_node(d, p->value), depth + 1);
			if (!k || k->type != YAML_SCALAR_NODE || !v ||
			    json_object_set_new(o, (const char *)k->data.scalar.value, v)) {
				json_decref(v);
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	default:
		return NULL;
	}
}

static json_t *yaml_load(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "accel config import-accelerate: cannot open '%s': %s\n", path,
		        strerror(errno));
		return NULL;
	}
	yaml_parser_t p;
	yaml_document_t d;
	json_t *r = NULL;
	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	if (!yaml_parser_load(&p, &d)) {
		fprintf(stderr, "accel config import-accelerate: %s:%zu:%zu: invalid YAML: %s\n", path,
		        p.problem_mark.line + 1, p.problem_mark.column + 1,
		        p.problem ? p.problem : "parse error");
	} else {
		yaml_node_t *root = yaml_document_get_root_node(&d);
		r = root ? yaml_to_json(&d, root, 0) : NULL;
		if (!json_is_object(r)) {
			fprintf(stderr, "accel config import-accelerate: %s: expected a mapping of "
			        "settings (the file `accelerate config` writes)%s\n", path,
			        root ? "" : "; the file is empty");
			json_decref(r);
			r = NULL;
		}
		yaml_document_delete(&d);
	}
	yaml_parser_delete(&p);
	fclose(f);
	return r;
}
#endif

#if ACCEL_HAVE_YAML   /* the Accelerate mapping */
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

static int map_accelerate(accelp_import *imp, json_t *y, const char *path, accel_err *err)
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

#endif

/* ---- the command ------------------------------------------------------------ */

static void print_list(const char *sub, const char *file, const char *what, const json_t *l)
{
	size_t i;
	json_t *e;
	json_array_foreach(l, i, e)
		fprintf(stderr, "accel config %s: %s: %s%s\n", sub, file, what, json_string_value(e));
}

/* The module `name` of kind PLUGIN, usable or only unmet here. */
static int installed(const accelp_setup *s, const char *name)
{
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		if (m->kind == ACCEL_MODULE_PLUGIN && m->name && !strcmp(m->name, name) &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE))
			return 1;
	}
	return 0;
}

/* The folder of plugin `name` when it was found through the user's
 * plugin_dirs (the config written names it, so it finds the plugin), else
 * NULL; *oom set when a copy could not be made. */
static char *user_dir(const accelp_setup *s, const char *name, int *oom)
{
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		const char *slash = strrchr(m->path, '/');
		if (m->kind != ACCEL_MODULE_PLUGIN || !m->name || strcmp(m->name, name) ||
		    (m->status != ACCEL_MODULE_OK && m->status != ACCEL_MODULE_UNAVAILABLE))
			continue;
		if (strcmp(m->origin, "plugin_dirs") || !slash)
			return NULL;
		char *d = strndup(m->path, (size_t)(slash - m->path));
		*oom = !d;
		return d;
	}
	return NULL;
}

static void found_plugins(const accelp_setup *s, FILE *out)
{
	int n = 0;
	for (uint32_t i = 0; i < accelp_loader_count(s->loader); i++) {
		const accel_module *m = accelp_loader_get(s->loader, i);
		if (m->kind == ACCEL_MODULE_PLUGIN && m->name &&
		    (m->status == ACCEL_MODULE_OK || m->status == ACCEL_MODULE_UNAVAILABLE))
			fprintf(out, "%s%s", n++ ? ", " : "", m->name);
	}
	if (!n)
		fprintf(out, "none");
}

int accelp_cli_config_import(int argc, char **argv, int accelerate)
{
	const char *sub = accelerate ? "import-accelerate" : "import-deepspeed";
	char where[64];
	snprintf(where, sizeof(where), "config %s", sub);
	const char *in = NULL, *out = "-", *config = NULL;
	int force = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage_import(stdout, accelerate);
			return 0;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			if (i + 1 >= argc || !*argv[i + 1])
				return accelp_cli_usage_error(where, "%s needs a FILE", a);
			out = argv[++i];
		} else if (!strncmp(a, "--output=", 9) && a[9]) {
			out = a + 9;
		} else if (!strcmp(a, "--config")) {
			if (i + 1 >= argc || !*argv[i + 1])
				return accelp_cli_usage_error(where, "%s needs a FILE", a);
			config = argv[++i];
		} else if (!strncmp(a, "--config=", 9) && a[9]) {
			config = a + 9;
		} else if (!strcmp(a, "--force")) {
			force = 1;
		} else if (a[0] == '-' && a[1]) {
			return accelp_cli_usage_error(where, "unknown option '%s'", a);
		} else if (in) {
			return accelp_cli_usage_error(where, "one FILE only (got '%s' and '%s')", in, a);
		} else {
			in = a;
		}
	}
	if (!in)
		return accelp_cli_usage_error(where, "missing FILE to import");
#if !ACCEL_HAVE_YAML
	if (accelerate) {
		fprintf(stderr, "accel config import-accelerate: this accel was built without libyaml "
		        "(install libyaml-dev, tools/install-deps.sh does, and rebuild)\n");
		return 1;
	}
#endif
	accelp_setup s;
	accelp_import imp;
	accel_err err;
	accelp_err_clear(&err);
	int status = 1, r;
	char *text = NULL;
	json_t *doc = NULL, *y = NULL;
	memset(&imp, 0, sizeof(imp));
	if (accelp_cli_config_modules(sub, 1, config, &s))
		goto out;
	if ((r = accelp_import_init(&imp, s.cfg, &err))) {
		fprintf(stderr, "accel %s: %s\n", where, err.msg);
		goto out;
	}
	if (!accelerate) {
		r = accelp_import_deepspeed_file(&imp, in, &err);
	} else {
#if ACCEL_HAVE_YAML
		if (!(y = yaml_load(in)))
			goto out;
		r = map_accelerate(&imp, y, in, &err);
#else
		r = ACCEL_ERR_UNSUPPORTED;
#endif
	}
	if (r) {
		fprintf(stderr, "accel %s: %s\n", where, err.msg);
		goto out;
	}
	fprintf(stderr, "accel %s: %s: strategy %s (%s)\n", where, in, imp.strategy,
	        imp.strategy_why);
	print_list(sub, in, "", imp.mapped);
	print_list(sub, in, "auto: ", imp.autos);
	print_list(sub, in, "not supported, left out: ", imp.unsupported);
	print_list(sub, in, "for accel launch: ", imp.launch);

	char header[1024];
	snprintf(header, sizeof(header), "imported from %s by `accel config %s`; members named "
	         "\"//...\" are comments that accel ignores", in, sub);
	doc = json_object();
	json_t *comment = accelp_import_comment(&imp, header);
	int oom = 0;
	char *sdir = user_dir(&s, imp.strategy, &oom);
	if (!doc || !comment || oom || json_object_set_new(doc, "//", comment) ||
	    (sdir && (json_object_set_new(doc, "// plugin_dirs", json_string(
	                  "where the strategy was found (the plugin_dirs of your config)")) ||
	              json_object_set_new(doc, "plugin_dirs", json_pack("[s]", sdir)))) ||
	    json_object_set_new(doc, "strategy", json_string(imp.strategy)) ||
	    json_object_update(doc, imp.config)) {
		free(sdir);
		fprintf(stderr, "accel %s: out of memory\n", where);
		goto out;
	}
	free(sdir);
	char *t = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
	if (!t || asprintf(&text, "%s\n", t) < 0) {
		free(t);
		text = NULL;
		fprintf(stderr, "accel %s: out of memory\n", where);
		goto out;
	}
	free(t);
	if (accelp_cli_config_write(sub, out, text, force))
		goto out;
	const char *written = strcmp(out, "-") ? out : "the config (stdout)";
	/* what this machine lacks, named as such */
	int missing = 0;
	if (!installed(&s, imp.strategy)) {
		fprintf(stderr, "accel %s: %s selects strategy '%s', which is not installed (plugins "
		        "found: ", where, imp.strategy_why, imp.strategy);
		found_plugins(&s, stderr);
		fprintf(stderr, "); %s is written and will validate once a %s plugin is installed\n",
		        written, imp.strategy);
		missing = 1;
	}
	json_t *mp = json_object_get(imp.config, "mixed_precision");
	const char *mode = json_is_string(mp) ? json_string_value(mp) : "no";
	const char *need = !strcmp(mode, "fp16") ? "scaler" : !strcmp(mode, "fp8") ? "fp8" : NULL;
	if (need && !installed(&s, need)) {
		fprintf(stderr, "accel %s: mixed_precision %s needs the '%s' plugin, which is not "
		        "installed (plugins found: ", where, mode, need);
		found_plugins(&s, stderr);
		fprintf(stderr, ")\n");
		missing = 1;
	}
	if (missing)
		goto out;
	if (strcmp(out, "-")) {
		printf("wrote %s\n", out);
		status = accelp_cli_config_check(out);
		if (!status) {   /* the launcher's share, as one command line */
			size_t i;
			json_t *e;
			printf("run it with: accel launch");
			json_array_foreach(imp.launch, i, e) {
				const char *l = json_string_value(e), *p = strstr(l, " (");
				printf(" %.*s", p ? (int)(p - l) : (int)strlen(l), l);
			}
			printf(" --config %s PROGRAM [ARGS...]\n", out);
		}
	} else {
		status = 0;
	}
out:
	free(text);
	json_decref(doc);
	json_decref(y);
	accelp_import_fini(&imp);
	accelp_setup_fini(&s);
	return status;
}
