/* SPDX-License-Identifier: MIT */
/* plugins/fsdp/fsdp.c: the fsdp strategy's descriptor, configuration and
 * vtable (PyTorch's FullyShardedDataParallel, configured with the names of
 * Accelerate's FSDP plugin without their fsdp_ prefix; docs/fsdp.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

#define KEY(t, k, d, lo, hi, ch, hp) \
	{sizeof(accel_param_schema_v1), (t), (k), (d), (lo), (hi), (ch), (hp)}

#define SHARDINGS "FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD"
#define WRAPS "UNIT_WRAP|SIZE_BASED_WRAP|TRANSFORMER_BASED_WRAP|NO_WRAP"
#define PREFETCHES "BACKWARD_PRE|BACKWARD_POST|NO_PREFETCH"
#define STATE_DICTS "FULL_STATE_DICT|SHARDED_STATE_DICT|LOCAL_STATE_DICT"
#define REDUCE_DTYPES "none|float32|float16|bfloat16"

static const accel_param_schema_v1 fsdp_params[] = {
	KEY(ACCEL_CFG_ENUM, "sharding_strategy", "\"FULL_SHARD\"", 1, 0, SHARDINGS,
	    "FULL_SHARD: parameters, gradients and optimizer state sharded; SHARD_GRAD_OP: "
	    "parameters kept gathered from forward to backward; NO_SHARD: data parallel; "
	    "HYBRID_SHARD: FULL_SHARD within a node, replicated across nodes"),
	KEY(ACCEL_CFG_ENUM, "auto_wrap_policy", "\"UNIT_WRAP\"", 1, 0, WRAPS,
	    "How program units are grouped into FSDP units (runs of consecutive units): "
	    "UNIT_WRAP one per program unit; SIZE_BASED_WRAP a run closes at min_num_params "
	    "elements; TRANSFORMER_BASED_WRAP a unit whose name or kind matches "
	    "transformer_cls_names_to_wrap is an FSDP unit of its own (the units between form runs); "
	    "NO_WRAP one root unit"),
	KEY(ACCEL_CFG_INT, "min_num_params", "100000000", 1, (double)(1ll << 53), NULL,
	    "SIZE_BASED_WRAP: elements at which a run of units becomes an FSDP unit"),
	KEY(ACCEL_CFG_STRING, "transformer_cls_names_to_wrap", NULL, 1, 0, NULL,
	    "TRANSFORMER_BASED_WRAP: comma-separated patterns (fnmatch) matched against "
	    "unit names and kinds (accel_unit_set_kind, e.g. \"Block\"); each matching unit "
	    "is an FSDP unit"),
	KEY(ACCEL_CFG_ENUM, "backward_prefetch", "\"BACKWARD_PRE\"", 1, 0, PREFETCHES,
	    "When the next unit's gather for backward is issued"),
	KEY(ACCEL_CFG_BOOL, "forward_prefetch", "false", 1, 0, NULL,
	    "Gather the next unit during the current unit's forward"),
	KEY(ACCEL_CFG_BOOL, "limit_all_gathers", "true", 1, 0, NULL,
	    "At most two gathers in flight"),
	KEY(ACCEL_CFG_BOOL, "cpu_offload", "false", 1, 0, NULL,
	    "The rank's parameter and gradient blocks, master weights and optimizer state in "
	    "host memory (pinned with parameters on a GPU), copied to the device for each "
	    "gather; the optimizer step on the CPU threads (NO_SHARD: masters and state only)"),
	KEY(ACCEL_CFG_BOOL, "sync_module_states", "true", 1, 0, NULL,
	    "Broadcast rank 0's initial values (false: each rank keeps the block of its own "
	    "initial values)"),
	KEY(ACCEL_CFG_ENUM, "state_dict_type", "\"SHARDED_STATE_DICT\"", 1, 0, STATE_DICTS,
	    "Checkpoints: SHARDED each rank writes the ranges it owns (loadable at any world "
	    "size and under ddp or zero); FULL the same (accel_save_model gathers the full "
	    "weights); LOCAL the flat shards as per-rank blobs (same world size only)"),
	KEY(ACCEL_CFG_BOOL, "use_orig_params", "true", 1, 0, NULL,
	    "Accepted both ways, with the same training: accel's optimizer is the core's, "
	    "per original parameter and element-wise, and the program computes with each "
	    "parameter's view in the gathered flat parameter either way (docs/fsdp.md)"),
	KEY(ACCEL_CFG_ENUM, "mixed_precision_policy.reduce_dtype", "\"none\"", 1, 0,
	    REDUCE_DTYPES, "dtype gradients cross ranks in (none: each parameter's "
	    "reduce_dtype, by default its gradient dtype); the reduced values are cast back"),
};

#define FSDP_SHARDED_CAPS                                                          \
	(ACCEL_CAP_SHARD_OPTIM | ACCEL_CAP_SHARD_GRADS | ACCEL_CAP_SHARD_PARAMS | \
	 ACCEL_CAP_REDUCE_SCATTER)

const accel_plugin_desc_v1 fsdp_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_STRATEGY,
	.name = "fsdp",
	.version = "1.0.0",
	.summary = "Fully sharded data parallel: a flat parameter per wrapped unit, sharded "
	           "over the ranks, gathered around its forward and backward",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CHECKPOINT | ACCEL_CAP_OFFLOAD | FSDP_SHARDED_CAPS |
	        ACCEL_CAP_SHARED_PARAMS,
	.state_version = 1,     /* tensors master/, optim/ (canonical names); local/ blobs */
	.config_section = "fsdp",
	.params = fsdp_params,
	.n_params = sizeof(fsdp_params) / sizeof(fsdp_params[0]),
};

/* The index of `v` in the '|'-separated `choices`, or -1. */
static int choice_index(const char *choices, const char *v)
{
	size_t n = strlen(v);
	int i = 0;
	for (const char *c = choices; c && *c; i++) {
		const char *e = strchr(c, '|');
		size_t len = e ? (size_t)(e - c) : strlen(c);
		if (len == n && !strncmp(c, v, n))
			return i;
		c = e ? e + 1 : NULL;
	}
	return -1;
}

static int read_enum(const accel_host_v1 *H, accel_host *h, const char *key,
                     const char *choices, uint32_t *ret)
{
	const char *v = NULL;
	int r = H->cfg_string(h, key, &v);
	if (r == ACCEL_ERR_NOT_FOUND || (!r && !v))
		return ACCEL_OK;
	if (r)
		return r;
	int i = choice_index(choices, v);
	if (i < 0)
		return H->error(h, ACCEL_ERR_CONFIG, "fsdp.%s: '%s' is not one of %s", key, v,
		                choices);
	*ret = (uint32_t)i;
	return ACCEL_OK;
}

#define GET(fn, key, dst) SHARD_CFG_GET(fn, key, dst)

int fsdp_read_config(const accel_host_v1 *H, accel_host *h, fsdp_cfg *c)
{
	int r;

	memset(c, 0, sizeof(*c));
	c->sharding = FSDP_FULL_SHARD;
	c->wrap = FSDP_WRAP_UNIT;
	c->prefetch = FSDP_PREFETCH_PRE;
	c->state_dict = FSDP_SD_SHARDED;
	c->min_num_params = 100000000;
	c->limit_all_gathers = 1;
	c->sync_module_states = 1;
	c->use_orig_params = 1;
	{
		/* enum order in the schema differs from the internal one for wraps */
		uint32_t w = 0;
		if ((r = read_enum(H, h, "sharding_strategy", SHARDINGS, &c->sharding)) ||
		    (r = read_enum(H, h, "auto_wrap_policy", WRAPS, &w)) ||
		    (r = read_enum(H, h, "backward_prefetch", PREFETCHES, &c->prefetch)))
			return r;
		static const uint32_t wraps[] = {FSDP_WRAP_UNIT, FSDP_WRAP_SIZE,
		                                 FSDP_WRAP_TRANSFORMER, FSDP_WRAP_NONE};
		c->wrap = wraps[w];
		static const uint32_t sds[] = {FSDP_SD_FULL, FSDP_SD_SHARDED, FSDP_SD_LOCAL};
		/* the default, SHARDED, is index 1 */
		uint32_t sdi = 1;
		if ((r = read_enum(H, h, "state_dict_type", STATE_DICTS, &sdi)))
			return r;
		c->state_dict = sds[sdi];
	}
	GET(cfg_int, "min_num_params", &c->min_num_params);
	GET(cfg_string, "transformer_cls_names_to_wrap", &c->cls_names);
	GET(cfg_bool, "forward_prefetch", &c->forward_prefetch);
	GET(cfg_bool, "limit_all_gathers", &c->limit_all_gathers);
	GET(cfg_bool, "cpu_offload", &c->cpu_offload);
	GET(cfg_bool, "sync_module_states", &c->sync_module_states);
	GET(cfg_bool, "use_orig_params", &c->use_orig_params);
	uint32_t red = 0;
	if ((r = read_enum(H, h, "mixed_precision_policy.reduce_dtype", REDUCE_DTYPES, &red)))
		return r;

	if (c->min_num_params < 1)
		return H->error(h, ACCEL_ERR_CONFIG, "fsdp.min_num_params: %lld; use a positive "
		                "number of elements", (long long)c->min_num_params);
	if (c->wrap == FSDP_WRAP_TRANSFORMER && (!c->cls_names || !*c->cls_names))
		return H->error(h, ACCEL_ERR_CONFIG, "fsdp.auto_wrap_policy is "
		                "TRANSFORMER_BASED_WRAP but fsdp.transformer_cls_names_to_wrap is "
		                "not set; name the units to wrap (comma-separated patterns, e.g. "
		                "\"block*\")");
	static const uint32_t red_dtypes[] = {0, ACCEL_DTYPE_F32, ACCEL_DTYPE_F16, ACCEL_DTYPE_BF16};
	c->reduce_dtype = red_dtypes[red];
	return ACCEL_OK;
}

static const char *sharding_name(uint32_t v)
{
	static const char *n[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
	return v < 4 ? n[v] : "?";
}

static int fsdp_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	fsdp_state *s;
	int r;

	if (!(s = calloc(1, sizeof(*s))))
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	s->host = host;
	s->h = h;
	if ((r = shard_init_world(host, h, &s->world, &s->W, &s->rank)) ||
	    (r = fsdp_read_config(host, h, &s->cfg))) {
		free(s);
		return r;
	}
	s->S = s->W;
	s->srank = s->rank;
	if (s->cfg.sharding == FSDP_HYBRID_SHARD && !ACCEL_HOST_HAS(host, group_split)) {
		free(s);
		return host->error(h, ACCEL_ERR_ABI, "fsdp.sharding_strategy HYBRID_SHARD needs "
		                   "groups (ABI 1.3); this host table is older");
	}
	host->log(h, ACCEL_LOG_INFO, "sharding_strategy %s", sharding_name(s->cfg.sharding));
	if (!s->cfg.use_orig_params)
		host->log(h, ACCEL_LOG_INFO, "use_orig_params false: trained exactly as true (the "
		          "core's optimizer steps each original parameter's range of the flat "
		          "parameter element-wise; parameters are bound to their views in the "
		          "gathered flat parameter inside the unit hooks either way)");
	*ret_state = s;
	return ACCEL_OK;
}

static void fsdp_fini(void *state)
{
	fsdp_state *s = state;
	if (!s)
		return;
	if (s->model)
		s->host->log(s->h, ACCEL_LOG_INFO, "peak gathered parameter bytes %llu",
		             (unsigned long long)s->gathered_peak);
	fsdp_release_all(s);
	free(s);
}

/* ABI gap A: NO_SHARD all-reduces and shards nothing. */
static int fsdp_instance_caps(void *state, uint32_t *ret_caps)
{
	fsdp_state *s = state;
	*ret_caps = ACCEL_CAP_CPU | ACCEL_CAP_CHECKPOINT | ACCEL_CAP_SHARED_PARAMS |
	            (s->cfg.cpu_offload ? (uint32_t)ACCEL_CAP_OFFLOAD : 0u) |
	            (s->cfg.sharding == FSDP_NO_SHARD ? 0u : (uint32_t)FSDP_SHARDED_CAPS);
	return ACCEL_OK;
}

static const accel_plugin_v1 fsdp_plugin = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &fsdp_desc,
	.init = fsdp_init,
	.fini = fsdp_fini,
	.wrap = fsdp_wrap,
	.reduce = fsdp_reduce,
	.grad_stats = fsdp_grad_stats,
	.grad_stats_device = fsdp_grad_stats_device,
	.step = fsdp_step,
	.save_state = fsdp_save_state,
	.load_state = fsdp_load_state,
	.pre_forward = fsdp_pre_forward,
	.post_forward = fsdp_post_forward,
	.pre_backward = fsdp_pre_backward,
	.post_backward = fsdp_post_backward,
	.micro_step_end = fsdp_micro_step_end,
	.instance_caps = fsdp_instance_caps,
	.materialize = fsdp_materialize,
	.estimate_memory = fsdp_estimate_memory,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "fsdp", op_copy_async))
		return NULL;
	return &fsdp_plugin;
}
