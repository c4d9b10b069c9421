/* SPDX-License-Identifier: MIT */
/* core/config_deepspeed.c: a DeepSpeed JSON config mapped onto accel's keys
 * (`deepspeed_config_file`, `accel config import-deepspeed`).  The table
 * is in docs/config.md ("Importing DeepSpeed and Accelerate configs"). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config-impl.h"
#include "config_import.h"

static int is_auto(const json_t *v)
{
	return json_is_string(v) && !strcmp(json_string_value(v), "auto");
}

static void unsupported(accelp_import *imp, const char *key, const json_t *v, const char *why)
{
	char *s = cfg_value_string(v);
	accelp_import_note(imp->unsupported, "%s = %s: %s", key, s ? s : "?", why);
	free(s);
}

/* Every member of `obj` not consumed, as unsupported "prefix.key". */
static void rest_unsupported(accelp_import *imp, const char *prefix, json_t *obj,
                             const char *const *done, const char *why)
{
	const char *k;
	json_t *v;
	char full[512];
	json_object_foreach(obj, k, v) {
		int used = 0;
		for (const char *const *d = done; d && *d; d++)
			used |= !strcmp(*d, k);
		if (used)
			continue;
		snprintf(full, sizeof(full), "%s%s%s", prefix, *prefix ? "." : "", k);
		unsupported(imp, full, v, why);
	}
}

/* A plain value: "auto" takes accel's default; else put under `key`. */
static int value(accelp_import *imp, const char *from, const char *key, json_t *v)
{
	if (is_auto(v)) {
		accelp_import_auto(imp, from, key);
		return ACCEL_OK;
	}
	return accelp_import_put(imp, from, key, json_incref(v));
}

static double num(const json_t *v, double dflt)
{
	return json_is_number(v) ? json_number_value(v) : dflt;
}

/* DeepSpeed's fp16 loss scaler settings onto the scaler plugin's section
 * (docs/scaler.md).  An import reproduces DeepSpeed's behaviour, so a
 * setting the file leaves out takes DeepSpeed's default, written
 * explicitly where it differs from the plugin's (which are torch's):
 * loss_scale_window 1000, hysteresis 2, min_loss_scale 1. */
static int fp16_put(accelp_import *imp, const char *from, const char *key, json_t *v)
{
	if (!v)
		return ACCEL_ERR_NOMEM;
	int r = accelp_import_section_value(imp, from, "scaler", key, v);
	json_decref(v);
	return r;
}

static int map_fp16(accelp_import *imp, json_t *sec)
{
	static const struct {
		const char *ds, *key, *dflt_json;
	} keys[] = {
		{"loss_scale_window", "growth_interval", "1000"},
		{"hysteresis", "hysteresis", "2"},
		{"consecutive_hysteresis", "consecutive_hysteresis", "false"},
		{"min_loss_scale", "min_loss_scale", "1"},
	};
	json_t *ls = json_object_get(sec, "loss_scale");
	json_t *isp = json_object_get(sec, "initial_scale_power");
	char from[128];
	int r = ACCEL_OK, dynamic = 1;

	if (ls && is_auto(ls)) {
		accelp_import_auto(imp, "fp16.loss_scale", "scaler.dynamic");
	} else if (ls && json_is_number(ls) && json_number_value(ls) > 0) {
		dynamic = 0;
		if ((r = fp16_put(imp, "fp16.loss_scale (> 0: static)", "dynamic", json_false())) ||
		    (r = fp16_put(imp, "fp16.loss_scale", "init_scale", json_incref(ls))))
			return r;
	} else if (ls && !(json_is_number(ls) && json_number_value(ls) == 0)) {
		unsupported(imp, "fp16.loss_scale", ls, "expected 0 (dynamic) or a static scale > 0");
	} else if ((r = fp16_put(imp, ls ? "fp16.loss_scale (0: dynamic)"
	                                 : "fp16.loss_scale (not given: DeepSpeed's 0, dynamic)",
	                         "dynamic", json_true()))) {
		return r;
	}
	if (!dynamic) {
		/* DeepSpeed's static LossScaler reads none of the dynamic settings */
		static const char *const done[] = {"enabled", "loss_scale", "auto_cast", NULL};
		rest_unsupported(imp, "fp16", sec, done, "DeepSpeed ignores it with a static "
		                 "loss_scale (> 0), and so does accel");
	} else {
		if (isp && is_auto(isp)) {
			accelp_import_auto(imp, "fp16.initial_scale_power", "scaler.init_scale");
		} else if (isp && !(json_is_integer(isp) && json_integer_value(isp) >= -126 &&
		                    json_integer_value(isp) <= 127)) {
			unsupported(imp, "fp16.initial_scale_power", isp, "expected an integer power of "
			            "two that an f32 scale can hold (-126 .. 127)");
		} else {
			int p = isp ? (int)json_integer_value(isp) : 16;
			snprintf(from, sizeof(from), "fp16.initial_scale_power%s %d (2^%d)",
			         isp ? "" : " (not given: DeepSpeed's)", p, p);
			if ((r = fp16_put(imp, from, "init_scale", json_real(ldexp(1.0, p)))))
				return r;
		}
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			json_t *v = json_object_get(sec, keys[i].ds);
			if (v) {
				snprintf(from, sizeof(from), "fp16.%s", keys[i].ds);
				r = accelp_import_section_value(imp, from, "scaler", keys[i].key, v);
			} else {
				snprintf(from, sizeof(from), "fp16.%s (not given: DeepSpeed's default)",
				         keys[i].ds);
				r = fp16_put(imp, from, keys[i].key, json_loads(keys[i].dflt_json,
				                                                JSON_DECODE_ANY, NULL));
			}
			if (r)
				return r;
		}
		static const char *const done[] = {"enabled", "loss_scale", "initial_scale_power",
		                                   "loss_scale_window", "hysteresis",
		                                   "consecutive_hysteresis", "min_loss_scale",
		                                   "auto_cast", NULL};
		rest_unsupported(imp, "fp16", sec, done, "not a loss scaler setting accel has");
	}
	json_t *ac = json_object_get(sec, "auto_cast");
	if (ac && !json_is_false(ac))
		unsupported(imp, "fp16.auto_cast", ac, "the program casts its inputs itself (accel "
		            "has no autocast)");
	return ACCEL_OK;
}

static int map_precision(accelp_import *imp, json_t *ds)
{
	static const char *const names[] = {"fp16", "bf16", "bfloat16"};
	const char *on = NULL;
	for (size_t i = 0; i < 3; i++) {
		json_t *sec = json_object_get(ds, names[i]);
		if (!sec)
			continue;
		char from[64];
		snprintf(from, sizeof(from), "%s.enabled", names[i]);
		json_t *en = json_object_get(sec, "enabled");
		if (!json_is_object(sec)) {
			unsupported(imp, names[i], sec, "expected an object with \"enabled\"");
			continue;
		}
		static const char *const done[] = {"enabled", NULL};
		if (is_auto(en)) {
			accelp_import_auto(imp, from, "mixed_precision");
		} else if (json_is_true(en)) {
			const char *mode = i == 0 ? "fp16" : "bf16";
			if (on && strcmp(on, mode))
				return ACCEL_ERR_CONFIG;
			on = mode;
			int r = accelp_import_put(imp, from, "mixed_precision", json_string(mode));
			if (r)
				return r;
			if (i == 0) {
				if ((r = map_fp16(imp, sec)))
					return r;
				continue;
			}
		} else if (en && !json_is_false(en)) {
			unsupported(imp, from, en, "expected true, false or \"auto\"");
		}
		rest_unsupported(imp, names[i], sec, done,
		                 i > 0 ? "accel's bf16 has no settings"
		                 : is_auto(en) ? "fp16.enabled is \"auto\", which leaves "
		                                 "mixed_precision at accel's default (no): no loss "
		                                 "scaler is selected for these settings"
		                               : "fp16 is not enabled (fp16.enabled true selects the "
		                                 "loss scaler these settings are for)");
	}
	return ACCEL_OK;
}

static int map_optimizer(accelp_import *imp, json_t *opt)
{
	static const char *const done[] = {"type", "params", NULL};
	if (!json_is_object(opt)) {
		unsupported(imp, "optimizer", opt, "expected an object with type and params");
		return ACCEL_OK;
	}
	json_t *t = json_object_get(opt, "type"), *p = json_object_get(opt, "params");
	const char *type = json_is_string(t) ? json_string_value(t) : "";
	const char *mine = NULL;
	json_t *awm = json_is_object(p) ? json_object_get(p, "adam_w_mode") : NULL;
	if (!strcasecmp(type, "adamw") || (!strcasecmp(type, "adam") && !json_is_false(awm)))
		mine = "adamw";
	else if (!strcasecmp(type, "sgd"))
		mine = "sgd";
	if (!mine) {
		static const char *const tdone[] = {"type", NULL};
		unsupported(imp, "optimizer.type", t, "accel's optimizers are adamw and sgd "
		            "(DeepSpeed's Adam with adam_w_mode true is adamw)");
		rest_unsupported(imp, "optimizer", opt, tdone, "belongs to an optimizer accel does "
		                 "not have");
		return ACCEL_OK;
	}
	int r = accelp_import_put(imp, "optimizer.type", "optimizer.type", json_string(mine));
	if (r)
		return r;
	if (strcasecmp(type, "adamw") && !strcmp(mine, "adamw"))
		accelp_import_note(imp->mapped, "optimizer.type \"%s\" is AdamW in DeepSpeed "
		                   "(adam_w_mode defaults to true)", type);
	rest_unsupported(imp, "optimizer", opt, done, "not an optimizer setting accel has");
	if (!json_is_object(p))
		return ACCEL_OK;
	static const char *const adamw_keys[] = {"lr", "betas", "eps", "weight_decay", NULL};
	static const char *const sgd_keys[] = {"lr", "weight_decay", "momentum", "dampening",
	                                       "nesterov", NULL};
	const char *const *keys = !strcmp(mine, "adamw") ? adamw_keys : sgd_keys;
	for (const char *const *k = keys; *k; k++) {
		json_t *v = json_object_get(p, *k);
		if (!v)
			continue;
		char from[64], key[64];
		snprintf(from, sizeof(from), "optimizer.params.%s", *k);
		snprintf(key, sizeof(key), "optimizer.params.%s", *k);
		if (is_auto(v) && !strcmp(*k, "weight_decay") && !strcmp(mine, "sgd")) {
			accelp_import_note(imp->autos, "%s: \"auto\" -> 0 (accel's default for sgd)", from);
			continue;
		}
		if ((r = value(imp, from, key, v)))
			return r;
	}
	const char *consumed[8];
	size_t n = 0;
	for (const char *const *k = keys; *k; k++)
		consumed[n++] = *k;
	consumed[n++] = "adam_w_mode";
	consumed[n] = NULL;
	rest_unsupported(imp, "optimizer.params", p, consumed, mine[0] == 'a'
	                 ? "not a parameter of accel's adamw" : "not a parameter of accel's sgd");
	return ACCEL_OK;
}

/* DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR. */
static int map_scheduler(accelp_import *imp, json_t *ds, json_t *sch)
{
	if (!json_is_object(sch)) {
		unsupported(imp, "scheduler", sch, "expected an object with type and params");
		return ACCEL_OK;
	}
	json_t *t = json_object_get(sch, "type"), *p = json_object_get(sch, "params");
	const char *type = json_is_string(t) ? json_string_value(t) : "";
	const char *mine = !strcmp(type, "WarmupLR")         ? "constant"
	                   : !strcmp(type, "WarmupDecayLR")  ? "linear"
	                   : !strcmp(type, "WarmupCosineLR") ? "cosine"
	                                                     : NULL;
	if (!mine) {
		static const char *const tdone[] = {"type", NULL};
		unsupported(imp, "scheduler.type", t, "accel's schedules are WarmupLR (constant), "
		            "WarmupDecayLR (linear) and WarmupCosineLR (cosine)");
		rest_unsupported(imp, "scheduler", sch, tdone, "belongs to a schedule accel does not "
		                 "have");
		return ACCEL_OK;
	}
	static const char *const done[] = {"type", "params", NULL};
	rest_unsupported(imp, "scheduler", sch, done, "not a scheduler setting accel has");
	int r = accelp_import_put(imp, "scheduler.type", "scheduler.type", json_string(mine));
	if (r || !json_is_object(p))
		return r;
	json_t *v;
	if ((v = json_object_get(p, "warmup_num_steps")) &&
	    (r = value(imp, "scheduler.params.warmup_num_steps", "scheduler.warmup_steps", v)))
		return r;
	if ((v = json_object_get(p, "total_num_steps"))) {
		if (is_auto(v))
			accelp_import_note(imp->autos, "scheduler.params.total_num_steps: \"auto\" -> 0 "
			                   "(accel's default); %s needs scheduler.total_steps > 0: set it "
			                   "to the run's optimizer steps", mine);
		else if ((r = accelp_import_put(imp, "scheduler.params.total_num_steps",
		                                "scheduler.total_steps", json_incref(v))))
			return r;
	}
	/* the peak rate is the optimizer's lr in accel */
	if ((v = json_object_get(p, "warmup_max_lr"))) {
		json_t *opt_lr = json_object_get(json_object_get(json_object_get(ds, "optimizer"),
		                                                 "params"), "lr");
		if (is_auto(v))
			accelp_import_note(imp->autos, "scheduler.params.warmup_max_lr: \"auto\" -> "
			                   "optimizer.params.lr");
		else if (opt_lr && json_is_number(opt_lr) && num(opt_lr, 0) != num(v, 0))
			unsupported(imp, "scheduler.params.warmup_max_lr", v,
			            "differs from optimizer.params.lr, which is accel's peak rate");
		else if ((r = accelp_import_put(imp, "scheduler.params.warmup_max_lr",
		                                "optimizer.params.lr", json_incref(v))))
			return r;
	}
	if ((v = json_object_get(p, "warmup_min_lr")) && !is_auto(v) && num(v, 1) != 0)
		unsupported(imp, "scheduler.params.warmup_min_lr", v, "accel warms up from 0");
	else if (v && is_auto(v))
		accelp_import_note(imp->autos, "scheduler.params.warmup_min_lr: \"auto\" -> 0 "
		                   "(accel warms up from 0)");
	if ((v = json_object_get(p, "warmup_min_ratio")) && !is_auto(v) && num(v, 1) != 0)
		unsupported(imp, "scheduler.params.warmup_min_ratio", v, "accel warms up from 0");
	if ((v = json_object_get(p, "cos_min_ratio")) && !is_auto(v)) {
		json_t *lr = json_object_get(json_object_get(imp->config, "optimizer"), "params");
		lr = json_object_get(lr, "lr");
		double peak = json_is_number(lr) ? json_number_value(lr) : 1e-3;
		if ((r = accelp_import_put(imp, "scheduler.params.cos_min_ratio", "scheduler.min_lr",
		                           json_real(peak * num(v, 0)))))
			return r;
	}
	json_t *wt = json_object_get(p, "warmup_type");
	json_t *wn = json_object_get(p, "warmup_num_steps");
	if (wt && !(json_is_string(wt) && !strcmp(json_string_value(wt), "linear")))
		unsupported(imp, "scheduler.params.warmup_type", wt, "accel's warmup is linear");
	else if (!wt && wn && !(json_is_integer(wn) && json_integer_value(wn) == 0))
		accelp_import_note(imp->unsupported, "scheduler.params.warmup_type (not given: "
		                   "DeepSpeed's default is \"log\"): accel's warmup is linear");
	static const char *const pdone[] = {"warmup_num_steps", "total_num_steps", "warmup_max_lr",
	                                    "warmup_min_lr", "warmup_min_ratio", "cos_min_ratio",
	                                    "warmup_type", NULL};
	rest_unsupported(imp, "scheduler.params", p, pdone, "not a scheduler setting accel has");
	return ACCEL_OK;
}

static int map_zero(accelp_import *imp, json_t *z)
{
	if (!json_is_object(z)) {
		unsupported(imp, "zero_optimization", z, "expected an object");
		return ACCEL_OK;
	}
	json_t *st = json_object_get(z, "stage");
	json_int_t stage = json_is_integer(st) ? json_integer_value(st) : 0;
	if (is_auto(st) || (st && !json_is_integer(st)) || stage < 0 || stage > 3) {
		unsupported(imp, "zero_optimization.stage", st, "expected 0, 1, 2 or 3");
		return ACCEL_OK;
	}
	if (stage == 0) {
		static const char *const done[] = {"stage", NULL};
		accelp_import_strategy(imp, "ddp", "zero_optimization.stage %s0 (ZeRO off)",
		                       st ? "" : "not given: ");
		rest_unsupported(imp, "zero_optimization", z, done,
		                 "ZeRO is off (stage 0); strategy ddp has no such setting");
		return ACCEL_OK;
	}
	accelp_import_strategy(imp, "zero", "zero_optimization.stage %d", (int)stage);
	int r = accelp_import_put(imp, "zero_optimization.stage", "strategy", json_string("zero"));
	const char *k;
	json_t *v;
	json_object_foreach(z, k, v) {
		char from[256];
		snprintf(from, sizeof(from), "zero_optimization.%s", k);
		if (!r)
			r = accelp_import_section_value(imp, from, "zero_optimization", k, v);
	}
	return r;
}

/* DeepSpeed's top-level `aio` (the NVMe swapper's I/O settings) belongs to
 * ZeRO's offload, and a plugin has one config section: it goes under
 * zero_optimization.aio (checked against the installed plugin's schema as
 * the rest of the section is). */
static int map_aio(accelp_import *imp, json_t *aio)
{
	if (!json_is_object(aio)) {
		unsupported(imp, "aio", aio, "expected an object (block_size, queue_depth, ...)");
		return ACCEL_OK;
	}
	if (strcmp(imp->strategy, "zero")) {
		rest_unsupported(imp, "aio", aio, NULL, "ZeRO is off; aio configures the NVMe "
		                 "offload of strategy zero");
		return ACCEL_OK;
	}
	const char *k;
	json_t *v;
	json_object_foreach(aio, k, v) {
		char from[256], key[256];
		snprintf(from, sizeof(from), "aio.%s", k);
		snprintf(key, sizeof(key), "aio.%s", k);
		int r = accelp_import_section_value(imp, from, "zero_optimization", key, v);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

int accelp_import_deepspeed(accelp_import *imp, json_t *ds, const char *name, accel_err *err)
{
	if (!json_is_object(ds))
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "%s: a DeepSpeed config is a JSON object ({...})", name);
	int r = ACCEL_OK;
	json_t *v;
	if ((v = json_object_get(ds, "gradient_accumulation_steps")))
		r = value(imp, "gradient_accumulation_steps", "gradient_accumulation_steps", v);
	if (!r && (v = json_object_get(ds, "gradient_clipping"))) {
		if (json_is_number(v) && json_number_value(v) == 0)
			accelp_import_note(imp->mapped, "gradient_clipping 0 (DeepSpeed: no clipping) -> "
			                   "max_grad_norm unset");
		else if (is_auto(v))
			accelp_import_note(imp->autos, "gradient_clipping: \"auto\" -> unset (accel's "
			                   "default for max_grad_norm: no clipping)");
		else
			r = accelp_import_put(imp, "gradient_clipping", "max_grad_norm", json_incref(v));
	}
	if (!r && (r = map_precision(imp, ds)) == ACCEL_ERR_CONFIG)
		return accelp_err_set(err, r, "%s: fp16.enabled and bf16.enabled are both true; "
		                     "DeepSpeed refuses that too: keep one", name);
	if (!r && (v = json_object_get(ds, "optimizer")))
		r = map_optimizer(imp, v);
	if (!r && (v = json_object_get(ds, "scheduler")))
		r = map_scheduler(imp, ds, v);
	if (!r && (v = json_object_get(ds, "zero_optimization")))
		r = map_zero(imp, v);
	if (!r && (v = json_object_get(ds, "aio")))
		r = map_aio(imp, v);
	if (r)
		return accelp_err_set(err, r, "%s: out of memory while importing", name);
	static const char *const done[] = {"gradient_accumulation_steps", "gradient_clipping",
	                                   "fp16", "bf16", "bfloat16", "optimizer", "scheduler",
	                                   "zero_optimization", "aio", "train_batch_size",
	                                   "train_micro_batch_size_per_gpu", NULL};
	for (const char *const *b = done + 9; *b; b++)
		if ((v = json_object_get(ds, *b)))
			unsupported(imp, *b, v, "the program chooses its batch size (accel_sampler_opts."
			            "batch_size; with dataloader.split_batches it is the global "
			            "one)");
	rest_unsupported(imp, "", ds, done, "no accel equivalent");
	return ACCEL_OK;
}

int accelp_import_deepspeed_file(accelp_import *imp, const char *path, accel_err *err)
{
	json_error_t je;
	struct stat st;
	/* a regular file only: the path may come from another file (an
	 * Accelerate config's deepspeed_config_file), and a FIFO or a terminal
	 * would wait for input forever */
	FILE *f = fopen(path, "rb");
	if (!f)
		return accelp_err_set(err, ACCEL_ERR_IO, "cannot open DeepSpeed config '%s': %s",
		                      path, strerror(errno));
	if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
		fclose(f);
		return accelp_err_set(err, ACCEL_ERR_IO, "cannot import DeepSpeed config '%s': not a "
		                      "regular file", path);
	}
	json_t *ds = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
	fclose(f);
	if (!ds)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "%s:%d:%d: invalid JSON: %s", path,
		                      je.line > 0 ? je.line : 1, je.column > 0 ? je.column : 1, je.text);
	int r = accelp_import_deepspeed(imp, ds, path, err);
	json_decref(ds);
	return r;
}
