/* SPDX-License-Identifier: MIT */
/* core/config_schema.c: the declared keys: the core schema (core_params[]), the
 * sections plugins declare (accelp_config_add_schema), and finding a key by
 * path or variable name, with suggestions for near misses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backends/common/launch-env.h"
#include "config-impl.h"

extern char **environ;

typedef struct core_param {
	const char *key;
	int type;
	const char *def;           /* JSON, NULL: no default   */
	double min, max;           /* min > max: no range       */
	unsigned flags;
	const char *choices;
	uint32_t list_len;
	const char *alias;
	const char *help;
} core_param;

#define NORANGE 1, 0
#define GE(x) (x), INFINITY

/* Names and defaults follow Accelerate and DeepSpeed; docs/config.md lists
 * every key with its equivalent there.  Keep the two in step. */
static const core_param core_params[] = {
	{"strategy", ACCEL_CFG_STRING, "\"ddp\"", NORANGE, 0, NULL, 0, NULL,
	 "the sharding strategy plugin (ddp, zero, fsdp or a third-party one)"},
	{"plugins", ACCEL_CFG_STRLIST, "[]", NORANGE, 0, NULL, 0, NULL,
	 "hook plugins to load besides the strategy (scaler, fp8, compress, ...)"},
	{"plugin_dirs", ACCEL_CFG_STRLIST, "[]", NORANGE, 0, NULL, 0, NULL,
	 "directories searched for plugins before ACCEL_PLUGIN_PATH and the install directory"},
	{"backend", ACCEL_CFG_STRING, "\"auto\"", NORANGE, 0, NULL, 0, NULL,
	 "communication backend: auto, shm, tcp, mpi, nccl or an installed third-party one; auto: "
	 "nccl for GPU buffers, mpi under an MPI launcher, else shm on one node and tcp across "
	 "nodes"},
	{"mixed_precision", ACCEL_CFG_ENUM, "\"no\"", NORANGE, 0, "no|fp16|bf16|fp8", 0, NULL,
	 "working precision of forward/backward (master weights stay fp32)"},
	{"gradient_accumulation_steps", ACCEL_CFG_INT, "1", 1, 2147483647, 0, NULL, 0, NULL,
	 "micro-batches per optimizer step; gradients are reduced on the last one"},
	{"max_grad_norm", ACCEL_CFG_DOUBLE, NULL, GE(0), 0, NULL, 0, "gradient_clipping",
	 "clip the global gradient L2 norm to this value; unset: no clipping"},
	{"track_grad_norm", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "compute the global gradient norm every step even without clipping or a loss scaler "
	 "(one more pass over the gradients; accel_last_step() reports it)"},
	{"seed", ACCEL_CFG_INT, "42", GE(0), 0, NULL, 0, NULL,
	 "seed of parameter init, sampler shuffling and RNG streams"},
	{"log_level", ACCEL_CFG_ENUM, "\"info\"", NORANGE, F_LOGLEVEL,
	 "error|warn|info|debug|trace", 0, NULL, "logger verbosity"},
	{"deepspeed_config_file", ACCEL_CFG_STRING, NULL, NORANGE, 0, NULL, 0, NULL,
	 "a DeepSpeed JSON config whose settings are mapped onto accel's keys (config file only; "
	 "the file's own keys override it)"},
	{"metrics_file", ACCEL_CFG_STRING, NULL, NORANGE, 0, NULL, 0, NULL,
	 "file rank 0 appends JSON-lines metrics to; unset: metrics.jsonl in logging_dir when that "
	 "is set, else stdout"},
	{"log_with", ACCEL_CFG_STRLIST, "[\"jsonl\"]", NORANGE, 0, NULL, 0, NULL,
	 "metrics trackers the main process writes: jsonl, csv (logging_dir/metrics.csv), "
	 "tensorboard (event files in logging_dir), or all"},
	{"logging_dir", ACCEL_CFG_STRING, NULL, NORANGE, 0, NULL, 0, NULL,
	 "directory of the csv and tensorboard trackers' files (created when missing)"},
	{"comm.timeout_s", ACCEL_CFG_DOUBLE, "300", 0.001, 1e9, 0, NULL, 0, NULL,
	 "seconds a collective may wait for the other ranks before failing (0.001 to 1e9, "
	 "about 31 years: in effect no limit)"},
	{"comm.keepalive_s", ACCEL_CFG_DOUBLE, "30", 0, 86400, 0, NULL, 0, NULL,
	 "seconds after which a connection to another node that answers nothing (no data, no "
	 "TCP keepalive reply: the node is down or cut off) counts as dead, in the rendezvous "
	 "store and the tcp backend; 0: off (then only comm.timeout_s ends the wait)"},
	{"comm.mpi_store", ACCEL_CFG_BOOL, "true", NORANGE, 0, NULL, 0, NULL,
	 "started by an MPI launcher without ACCEL_MASTER_ADDR/PORT: rank 0 hosts the rendezvous "
	 "store on a free port and sends its address over MPI, so that timeouts name the missing "
	 "ranks; false: run without a store"},
	{"optimizer.type", ACCEL_CFG_ENUM, "\"adamw\"", NORANGE, 0, "adamw|sgd", 0, NULL,
	 "optimizer (torch.optim.AdamW or SGD semantics)"},
	{"optimizer.params.lr", ACCEL_CFG_DOUBLE, "1e-3", GE(0), 0, NULL, 0, NULL,
	 "peak learning rate"},
	{"optimizer.params.betas", T_DBLLIST, "[0.9, 0.999]", 0, 1, F_MAX_EXCL, NULL, 2, NULL,
	 "AdamW coefficients of the running averages of the gradient and its square"},
	{"optimizer.params.eps", ACCEL_CFG_DOUBLE, "1e-8", GE(0), 0, NULL, 0, NULL,
	 "AdamW term added to the denominator"},
	{"optimizer.params.weight_decay", ACCEL_CFG_DOUBLE, "0.01", GE(0), 0, NULL, 0, NULL,
	 "decoupled (AdamW) or L2 (SGD) weight decay; default 0.01, 0 for sgd"},
	{"optimizer.params.momentum", ACCEL_CFG_DOUBLE, "0", GE(0), 0, NULL, 0, NULL,
	 "SGD momentum factor"},
	{"optimizer.params.dampening", ACCEL_CFG_DOUBLE, "0", GE(0), 0, NULL, 0, NULL,
	 "SGD dampening for momentum"},
	{"optimizer.params.nesterov", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "SGD Nesterov momentum"},
	{"optimizer.no_decay", ACCEL_CFG_STRLIST, "[]", NORANGE, 0, NULL, 0, NULL,
	 "parameter-name suffixes put in a group without weight decay (\"bias\", \"norm.weight\")"},
	{"scheduler.type", ACCEL_CFG_ENUM, "\"constant\"", NORANGE, 0, "constant|linear|cosine", 0,
	 NULL, "learning-rate schedule after warmup"},
	{"scheduler.warmup_steps", ACCEL_CFG_INT, "0", GE(0), 0, NULL, 0, NULL,
	 "optimizer steps of linear warmup from 0 to lr"},
	{"scheduler.total_steps", ACCEL_CFG_INT, "0", GE(0), 0, NULL, 0, NULL,
	 "optimizer steps of the whole run (warmup included); required by linear and cosine"},
	{"scheduler.min_lr", ACCEL_CFG_DOUBLE, "0", GE(0), 0, NULL, 0, NULL,
	 "learning rate linear and cosine decay to at total_steps"},
	{"dataloader.split_batches", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "the batch size given is global and split across processes"},
	{"dataloader.even_batches", ACCEL_CFG_BOOL, "true", NORANGE, 0, NULL, 0, NULL,
	 "every process gets the same number of batches (wrapping around the data)"},
	{"dataloader.drop_last", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "drop the last incomplete batch"},
	{"dataloader.shuffle", ACCEL_CFG_BOOL, "true", NORANGE, 0, NULL, 0, NULL,
	 "shuffle the sample order every epoch (seeded)"},
	/* checkpoints (core/ckpt.c), Accelerate's ProjectConfiguration names */
	{"project_dir", ACCEL_CFG_STRING, "\".\"", NORANGE, 0, NULL, 0, NULL,
	 "directory of the run's outputs; automatic checkpoints go to its checkpoints/"},
	{"automatic_checkpoint_naming", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "accel_save_state(ctx, NULL) saves into project_dir/checkpoints/checkpoint_<iteration> "
	 "and accel_load_state(ctx, NULL) loads the latest one"},
	{"total_limit", ACCEL_CFG_INT, NULL, GE(1), 0, NULL, 0, NULL,
	 "automatic checkpoints kept; older ones are removed after a new one is committed; unset: "
	 "all"},
	{"iteration", ACCEL_CFG_INT, "0", GE(0), 0, NULL, 0, NULL,
	 "number of the next automatic checkpoint (checkpoint_<iteration>)"},
	{"checkpoint.allow_optimizer_change", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "accel_load_state of a checkpoint saved with another optimizer drops its state (a "
	 "warning names it) instead of refusing"},
};

/* ACCEL_* variables that are not configuration. */
static const char *const reserved_env[] = {
	ACCEL_ENV_RANK, ACCEL_ENV_LOCAL_RANK, ACCEL_ENV_WORLD_SIZE, ACCEL_ENV_LOCAL_WORLD_SIZE,
	ACCEL_ENV_NODE_RANK, ACCEL_ENV_NUM_NODES, ACCEL_ENV_MASTER_ADDR, ACCEL_ENV_MASTER_PORT,
	ACCEL_ENV_CONFIG, ACCEL_ENV_PLUGIN_PATH, ACCEL_ENV_LOG_ALL_RANKS, ACCEL_ENV_JOB_ID,
	ACCEL_ENV_SET, ACCEL_ENV_CLI, ACCEL_ENV_DEVICE_PATH,
	/* accel launch --max-restarts (core/restart.c) */
	ACCEL_ENV_RESTART_COUNT, ACCEL_ENV_RESUME, ACCEL_ENV_RESUME_ROOT, ACCEL_ENV_LAUNCH_STATE,
	ACCEL_ENV_LAUNCH_SLOT,
};

int accelp_config_env_reserved(const char *name)
{
	if (!name)
		return 0;
	if (!strncmp(name, "ACCEL_TEST_", 11))
		return 1;
	for (size_t i = 0; i < sizeof(reserved_env) / sizeof(reserved_env[0]); i++)
		if (!strcmp(name, reserved_env[i]))
			return 1;
	return 0;
}

void cfg_setting_clear(setting *s)
{
	json_decref(s->val);
	free(s->src);
	memset(s, 0, sizeof(*s));
}

static void keydef_clear(keydef *k)
{
	free(k->key);
	free(k->env);
	free(k->alias);
	free(k->alias_env);
	free(k->choices);
	free(k->help);
	json_decref(k->def);
	json_decref(k->val);
	free(k->src);
	for (int l = 0; l < LY_COUNT; l++)
		cfg_setting_clear(&k->set[l]);
	memset(k, 0, sizeof(*k));
}

int cfg_key_active(const accel_config *cfg, const keydef *k)
{
	return k->section < 0 || cfg->secs[k->section].selected;
}

/* Index of the key spelled `path` (canonical or alias), or -1. */
long cfg_find_key(const accel_config *cfg, const char *path, int *ret_alias)
{
	for (size_t i = 0; i < cfg->nkeys; i++) {
		if (!strcmp(cfg->keys[i].key, path)) {
			if (ret_alias)
				*ret_alias = 0;
			return (long)i;
		}
		if (cfg->keys[i].alias && !strcmp(cfg->keys[i].alias, path)) {
			if (ret_alias)
				*ret_alias = 1;
			return (long)i;
		}
	}
	return -1;
}

long cfg_find_env(const accel_config *cfg, const char *name, int *ret_alias)
{
	for (size_t i = 0; i < cfg->nkeys; i++) {
		if (!strcmp(cfg->keys[i].env, name)) {
			*ret_alias = 0;
			return (long)i;
		}
		if (cfg->keys[i].alias_env && !strcmp(cfg->keys[i].alias_env, name)) {
			*ret_alias = 1;
			return (long)i;
		}
	}
	return -1;
}

/* 1 when some key lies inside `path` (it names a group of keys). */
int cfg_is_group(const accel_config *cfg, const char *path)
{
	if (!*path)
		return 1;
	for (size_t i = 0; i < cfg->nkeys; i++)
		if (cfg_path_in(cfg->keys[i].key, path) ||
		    (cfg->keys[i].alias && cfg_path_in(cfg->keys[i].alias, path)))
			return 1;
	return 0;
}

/* The section `path` is in (or is), or -1. */
long cfg_find_section(const accel_config *cfg, const char *path)
{
	for (size_t i = 0; i < cfg->nsecs; i++)
		if (!strcmp(cfg->secs[i].name, path) || cfg_path_in(path, cfg->secs[i].name))
			return (long)i;
	return -1;
}

/* The closest known key or group to `path`, or NULL. */
const char *cfg_suggest_key(const accel_config *cfg, const char *path, char *buf, size_t cap)
{
	size_t best = SIZE_MAX, lim = cfg_max_distance(path);
	const char *last = strrchr(path, '.');
	last = last ? last + 1 : path;
	buf[0] = '\0';
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const char *names[2] = {cfg->keys[i].key, cfg->keys[i].alias};
		for (int a = 0; a < 2; a++) {
			const char *k = names[a];
			if (!k)
				continue;
			/* the key itself and every group above it */
			size_t klen = strlen(k);
			for (size_t end = 1; end <= klen; end++) {
				if (end < klen && k[end] != '.')
					continue;
				char cand[256];
				if (end >= sizeof(cand))
					continue;
				memcpy(cand, k, end);
				cand[end] = '\0';
				size_t d = cfg_edit_distance(path, cand);
				if (d <= lim && d < best) {
					best = d;
					snprintf(buf, cap, "%s", cand);
				}
			}
			/* the right key at the wrong level ("bucket_cap_mb" at the root) */
			const char *kl = strrchr(k, '.');
			if (best == SIZE_MAX && kl && !strcmp(kl + 1, last) && strcmp(k, path)) {
				best = lim + 1;
				snprintf(buf, cap, "%s", k);
			}
		}
	}
	return buf[0] ? buf : NULL;
}

/* "lr, betas, eps" — the names directly inside group `parent`. */
void cfg_list_children(const accel_config *cfg, const char *parent, char *buf, size_t cap)
{
	size_t used = 0, plen = strlen(parent), count = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const char *k = cfg->keys[i].key;
		if (!cfg_path_in(k, parent))
			continue;
		const char *seg = k + plen + 1;
		size_t n = strcspn(seg, ".");
		/* skip names already listed */
		int dup = 0;
		for (size_t j = 0; j < i && !dup; j++) {
			const char *o = cfg->keys[j].key;
			dup = cfg_path_in(o, parent) && !strncmp(o + plen + 1, seg, n) &&
			      (o[plen + 1 + n] == '.' || o[plen + 1 + n] == '\0');
		}
		if (dup)
			continue;
		if (++count > 12) {
			if (used + 6 < cap)
				used += (size_t)snprintf(buf + used, cap - used, ", ...");
			return;
		}
		if (used + n + 3 >= cap)
			return;
		used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", used ? ", " : "", (int)n, seg);
	}
}

/* Checks a new key against the keys already declared: same path, a path
 * that would be both a value and a group, or the same environment name. */
static int key_conflict(const accel_config *cfg, const keydef *nk, const char *what,
                        accel_err *err)
{
	const char *names[2] = {nk->key, nk->alias};
	const char *envs[2] = {nk->env, nk->alias_env};
	for (int a = 0; a < 2; a++) {
		if (!names[a])
			continue;
		if (accelp_config_env_reserved(envs[a]))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s declares key '%s', whose environment name %s is reserved",
			                     what, names[a], envs[a]);
		for (size_t i = 0; i < cfg->nkeys; i++) {
			const keydef *k = &cfg->keys[i];
			const char *owner = k->section < 0 ? "the core" : cfg->secs[k->section].owner;
			const char *kn[2] = {k->key, k->alias};
			const char *ke[2] = {k->env, k->alias_env};
			for (int b = 0; b < 2; b++) {
				if (!kn[b])
					continue;
				if (!strcmp(kn[b], names[a]))
					return accelp_err_set(err, ACCEL_ERR_PLUGIN,
					                     "%s declares key '%s', already declared by %s",
					                     what, names[a], owner);
				if (cfg_path_in(kn[b], names[a]) || cfg_path_in(names[a], kn[b]))
					return accelp_err_set(err, ACCEL_ERR_PLUGIN,
					                     "%s declares key '%s', which clashes with '%s' of "
					                     "%s (a key cannot also be a group of keys)",
					                     what, names[a], kn[b], owner);
				if (!strcmp(ke[b], envs[a]))
					return accelp_err_set(err, ACCEL_ERR_PLUGIN,
					                     "%s declares key '%s' whose environment name %s is "
					                     "also the one of '%s' (%s); rename one of them",
					                     what, names[a], envs[a], kn[b], owner);
			}
		}
	}
	return ACCEL_OK;
}

/* Fill `k` (zeroed) from a schema entry; `full` is the full path. */
static int keydef_init(keydef *k, const char *full, int type, const char *def_json, double min,
                       double max, unsigned flags, const char *choices, uint32_t list_len,
                       const char *alias, const char *help, int section, const char *what,
                       accel_err *err)
{
	int r;
	k->section = section;
	k->type = type;
	k->flags = flags;
	k->list_len = list_len;
	if (min > max) {
		k->min = -INFINITY;
		k->max = INFINITY;
	} else {
		k->min = min;
		k->max = max;
	}
	k->key = cfg_xstrdup(full);
	k->env = cfg_env_name(full);
	k->choices = cfg_xstrdup(choices);
	k->help = cfg_xstrdup(help ? help : "");
	if (!k->key || !k->env || (choices && !k->choices) || !k->help)
		return cfg_nomem(err);
	if (alias) {
		k->alias = cfg_xstrdup(alias);
		k->alias_env = cfg_env_name(alias);
		if (!k->alias || !k->alias_env)
			return cfg_nomem(err);
	}
	if (type == ACCEL_CFG_ENUM) {
		if (!choices || !*choices || strstr(choices, "||") || choices[0] == '|' ||
		    choices[strlen(choices) - 1] == '|')
			return accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s declares enum key '%s' with bad choices '%s' "
			                     "(expected 'a|b|c')", what, full, choices ? choices : "(null)");
	}
	if (def_json) {
		json_error_t je;
		json_t *v = json_loads(def_json, JSON_DECODE_ANY, &je);
		if (!v)
			return accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s declares key '%s' with a default that is not JSON "
			                     "('%s': %s)", what, full, def_json, je.text);
		accel_err e2;
		accelp_err_clear(&e2);
		vsrc vs = {.text = "its declaration"};
		if (json_is_null(v)) {
			json_decref(v);
		} else {
			r = cfg_normalize(k, full, v, &vs, &k->def, &e2);
			json_decref(v);
			if (r)
				return accelp_err_set(err, r == ACCEL_ERR_NOMEM ? r : ACCEL_ERR_PLUGIN,
				                     "%s: bad default: %s", what, e2.msg);
		}
	}
	return ACCEL_OK;
}

static int add_core_schema(accel_config *cfg, accel_err *err)
{
	size_t n = sizeof(core_params) / sizeof(core_params[0]);
	if (cfg_grow((void **)&cfg->keys, &cfg->capkeys, n, sizeof(*cfg->keys)))
		return cfg_nomem(err);
	for (size_t i = 0; i < n; i++) {
		const core_param *p = &core_params[i];
		keydef k;
		memset(&k, 0, sizeof(k));
		int r = keydef_init(&k, p->key, p->type, p->def, p->min, p->max, p->flags, p->choices,
		                    p->list_len, p->alias, p->help, -1, "the core schema", err);
		if (!r)
			r = key_conflict(cfg, &k, "the core schema", err);
		if (r) {
			keydef_clear(&k);
			return r == ACCEL_ERR_NOMEM ? r : ACCEL_ERR_INTERNAL;
		}
		cfg->keys[cfg->nkeys++] = k;
	}
	return ACCEL_OK;
}

int accelp_config_new(accel_config **ret_cfg, accel_err *err)
{
	if (!ret_cfg)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_new: ret_cfg is NULL");
	accel_config *cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return cfg_nomem(err);
	int r = add_core_schema(cfg, err);
	if (r)
		goto fail;
	*ret_cfg = cfg;
	return ACCEL_OK;
fail:
	accelp_config_free(cfg);
	return r;
}

accel_config *accelp_config_free(accel_config *cfg)
{
	if (!cfg)
		return NULL;
	for (size_t i = 0; i < cfg->nkeys; i++)
		keydef_clear(&cfg->keys[i]);
	free(cfg->keys);
	for (size_t i = 0; i < cfg->nsecs; i++) {
		free(cfg->secs[i].name);
		free(cfg->secs[i].owner);
	}
	free(cfg->secs);
	for (size_t i = 0; i < cfg->ndocs; i++)
		cfg_doc_free(cfg->docs[i]);
	free(cfg->docs);
	for (uint32_t i = 0; i < cfg->nerrs; i++)
		free(cfg->errs[i]);
	free(cfg);
	return NULL;
}

int accelp_config_add_schema(accel_config *cfg, const char *section, const char *owner,
                            const accel_param_schema_v1 *params, uint32_t n_params,
                            unsigned flags, accel_err *err)
{
	char what[256];
	size_t added = 0, stride = sizeof(accel_param_schema_v1);
	int r = ACCEL_OK;

	if (!cfg || !section)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_config_add_schema: NULL argument");
	if (!owner)
		owner = section;
	snprintf(what, sizeof(what), "plugin '%s' (section '%s')", owner, section);
	if (!cfg_valid_path(section))
		return accelp_err_set(err, ACCEL_ERR_PLUGIN,
		                     "plugin '%s' declares config_section '%s'; a section is made of "
		                     "[A-Za-z0-9_-] names joined by '.'", owner, section);
	if (n_params && !params)
		return accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s: %u params but no array", what, n_params);
	for (size_t i = 0; i < cfg->nsecs; i++)
		if (!strcmp(cfg->secs[i].name, section) || cfg_path_in(section, cfg->secs[i].name) ||
		    cfg_path_in(cfg->secs[i].name, section))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                     "plugin '%s' declares config section '%s', which overlaps "
			                     "section '%s' of plugin '%s'", owner, section,
			                     cfg->secs[i].name, cfg->secs[i].owner);
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const keydef *k = &cfg->keys[i];
		if (k->section < 0 && (!strcmp(k->key, section) || cfg_path_in(k->key, section) ||
		                       cfg_path_in(section, k->key)))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                     "plugin '%s' declares config section '%s', which overlaps "
			                     "the core key '%s'", owner, section, k->key);
	}
	if (n_params) {
		if (params[0].struct_size < sizeof(accel_param_schema_v1))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s: parameter schema struct_size %u is smaller than %zu; "
			                     "rebuild the plugin against current headers", what,
			                     params[0].struct_size, sizeof(accel_param_schema_v1));
		/* a newer plugin's entries are bigger: step by its size */
		stride = params[0].struct_size;
	}
	if (cfg_grow((void **)&cfg->secs, &cfg->capsecs, cfg->nsecs + 1, sizeof(*cfg->secs)) ||
	    cfg_grow((void **)&cfg->keys, &cfg->capkeys, cfg->nkeys + n_params, sizeof(*cfg->keys)))
		return cfg_nomem(err);
	cfg_section *sec = &cfg->secs[cfg->nsecs];
	sec->name = cfg_xstrdup(section);
	sec->owner = cfg_xstrdup(owner);
	sec->selected = (flags & ACCEL_SCHEMA_SELECTED) != 0;
	sec->backend = (flags & ACCEL_SCHEMA_BACKEND) != 0;
	if (!sec->name || !sec->owner) {
		r = cfg_nomem(err);
		goto fail;
	}
	for (uint32_t i = 0; i < n_params; i++) {
		const accel_param_schema_v1 *p =
			(const accel_param_schema_v1 *)(const void *)((const char *)params + i * stride);
		keydef k;
		memset(&k, 0, sizeof(k));
		if (p->struct_size != stride) {
			r = accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s: parameter %u has struct_size %u, "
			                  "parameter 0 has %zu", what, i, p->struct_size, stride);
			goto fail;
		}
		if (!cfg_valid_path(p->key)) {
			r = accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                  "%s: parameter %u has key '%s'; keys are [A-Za-z0-9_-] names "
			                  "joined by '.'", what, i, p->key ? p->key : "(null)");
			goto fail;
		}
		if (p->type < ACCEL_CFG_BOOL || p->type > ACCEL_CFG_STRLIST) {
			r = accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s: key '%s' has unknown type %u", what,
			                  p->key, p->type);
			goto fail;
		}
		char *full = cfg_strfmt("%s.%s", section, p->key);
		if (!full) {
			r = cfg_nomem(err);
			goto fail;
		}
		int has = (p->type == ACCEL_CFG_INT || p->type == ACCEL_CFG_DOUBLE) && p->min <= p->max;
		if (has && p->type == ACCEL_CFG_INT &&
		    ((isfinite(p->min) && p->min != floor(p->min)) ||
		     (isfinite(p->max) && p->max != floor(p->max)))) {
			free(full);
			r = accelp_err_set(err, ACCEL_ERR_PLUGIN,
			                  "%s: integer key '%s' has the range [%g, %g]; the bounds of an "
			                  "integer key must be integers (or infinite)", what, p->key,
			                  p->min, p->max);
			goto fail;
		}
		r = keydef_init(&k, full, (int)p->type, p->default_json, has ? p->min : 1,
		                has ? p->max : 0, 0, p->choices, 0, NULL, p->help,
		                (int)cfg->nsecs, what, err);
		free(full);
		if (!r)
			r = key_conflict(cfg, &k, what, err);
		if (r) {
			keydef_clear(&k);
			goto fail;
		}
		cfg->keys[cfg->nkeys++] = k;
		added++;
	}
	cfg->nsecs++;
	cfg->resolved = 0;
	return ACCEL_OK;
fail:
	while (added--)
		keydef_clear(&cfg->keys[--cfg->nkeys]);
	free(sec->name);
	free(sec->owner);
	memset(sec, 0, sizeof(*sec));
	return r;
}

