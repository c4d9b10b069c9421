/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero.c: the zero strategy's descriptor, configuration and
 * vtable (ZeRO stages 0-3, DeepSpeed's `zero_optimization` section).
 *
 * The schema declares every key DeepSpeed documents for the section, with
 * DeepSpeed's defaults, so an imported DeepSpeed config validates; keys
 * accel does not implement are refused by name when set to anything but
 * their default (docs/zero.md, "Configuration"). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

#define KEY(t, k, d, lo, hi, ch, hp) \
	{sizeof(accel_param_schema_v1), (t), (k), (d), (lo), (hi), (ch), (hp)}

static const accel_param_schema_v1 zero_params[] = {
	KEY(ACCEL_CFG_INT, "stage", "0", 0, 3, NULL,
	    "ZeRO stage: 0 data parallel, 1 optimizer state sharded, 2 + gradients, "
	    "3 + parameters"),
	KEY(ACCEL_CFG_BOOL, "contiguous_gradients", "true", 1, 0, NULL,
	    "Gradients in one flat buffer per reduce group (accel always does this)"),
	KEY(ACCEL_CFG_BOOL, "overlap_comm", "false", 1, 0, NULL,
	    "Accepted; accel always issues a group's reduction asynchronously as soon as "
	    "its units finished backward"),
	KEY(ACCEL_CFG_BOOL, "reduce_scatter", "true", 1, 0, NULL,
	    "Reduce gradients with reduce-scatter; false: all-reduce and keep the own block"),
	KEY(ACCEL_CFG_DOUBLE, "reduce_bucket_size", "500000000", 1, 1e15, NULL,
	    "Elements per reduce group (consecutive units; stage 3: one unit per group)"),
	KEY(ACCEL_CFG_BOOL, "allgather_partitions", "true", 1, 0, NULL,
	    "All-gather updated partitions (false, broadcasts, is not implemented)"),
	KEY(ACCEL_CFG_DOUBLE, "allgather_bucket_size", "500000000", 1, 1e15, NULL,
	    "Elements per all-gather (accel gathers one reduce group at a time)"),
	KEY(ACCEL_CFG_DOUBLE, "stage3_prefetch_bucket_size", "50000000", 0, 1e15, NULL,
	    "Stage 3: elements of upcoming units gathered ahead (0: no prefetch)"),
	KEY(ACCEL_CFG_DOUBLE, "stage3_param_persistence_threshold", "100000", 0, 1e15, NULL,
	    "Stage 3: units of at most this many elements stay gathered"),
	KEY(ACCEL_CFG_DOUBLE, "stage3_max_live_parameters", "1000000000", 0, 1e15, NULL,
	    "Stage 3: most gathered non-persistent elements at once (prefetch stops there)"),
	KEY(ACCEL_CFG_DOUBLE, "stage3_max_reuse_distance", "1000000000", 0, 1e15, NULL,
	    "Stage 3: DeepSpeed keeps a unit gathered when it is used again within this "
	    "distance; accel releases after every use (accepted, no effect)"),
	KEY(ACCEL_CFG_BOOL, "stage3_gather_16bit_weights_on_model_save", "false", 1, 0, NULL,
	    "accel_save_model gathers the working weights at stage 3 either way"),
	KEY(ACCEL_CFG_DOUBLE, "sub_group_size", "1000000000", 1, 1e15, NULL,
	    "Elements stepped at a time by an offloaded optimizer"),
	KEY(ACCEL_CFG_BOOL, "round_robin_gradients", "false", 1, 0, NULL,
	    "Not implemented by accel (must stay false)"),
	KEY(ACCEL_CFG_BOOL, "elastic_checkpoint", "false", 1, 0, NULL,
	    "accel's checkpoints load at any world size either way"),
	KEY(ACCEL_CFG_BOOL, "ignore_unused_parameters", "true", 1, 0, NULL,
	    "Parameters without gradients reduce zeros (false is not implemented)"),
	KEY(ACCEL_CFG_BOOL, "legacy_stage1", "false", 1, 0, NULL,
	    "Not implemented by accel (must stay false)"),
	KEY(ACCEL_CFG_BOOL, "zero3_init_flag", "false", 1, 0, NULL,
	    "Stage 3: every rank creates only its own shard of each parameter (a model "
	    "larger than one process can be built; a rank-dependent init stays so); "
	    "false: rank 0's values are broadcast unit by unit"),
	KEY(ACCEL_CFG_ENUM, "offload_optimizer.device", "\"none\"", 1, 0, "none|cpu|nvme",
	    "Where master weights and optimizer state live"),
	KEY(ACCEL_CFG_STRING, "offload_optimizer.nvme_path", NULL, 1, 0, NULL,
	    "Directory of the optimizer's swap file (device nvme)"),
	KEY(ACCEL_CFG_BOOL, "offload_optimizer.pin_memory", "false", 1, 0, NULL,
	    "Page-locked host buffers for the offloaded optimizer"),
	KEY(ACCEL_CFG_INT, "offload_optimizer.buffer_count", "4", 2, 1024, NULL,
	    "NVMe: sub-group buffers in flight"),
	KEY(ACCEL_CFG_BOOL, "offload_optimizer.fast_init", "false", 1, 0, NULL,
	    "Accepted; accel's NVMe initialisation is the same either way"),
	KEY(ACCEL_CFG_DOUBLE, "offload_optimizer.ratio", "1", 0, 1, NULL,
	    "Fraction of the optimizer offloaded (only 1 is implemented)"),
	KEY(ACCEL_CFG_ENUM, "offload_param.device", "\"none\"", 1, 0, "none|cpu|nvme",
	    "Stage 3: where the parameter shards live between uses"),
	KEY(ACCEL_CFG_STRING, "offload_param.nvme_path", NULL, 1, 0, NULL,
	    "Directory of the parameters' swap file (device nvme)"),
	KEY(ACCEL_CFG_BOOL, "offload_param.pin_memory", "false", 1, 0, NULL,
	    "Page-locked host memory for offloaded parameters"),
	KEY(ACCEL_CFG_INT, "offload_param.buffer_count", "5", 1, 1024, NULL,
	    "NVMe: parameter buffers (accepted)"),
	KEY(ACCEL_CFG_DOUBLE, "offload_param.buffer_size", "100000000", 1, 1e15, NULL,
	    "NVMe: elements per parameter buffer (accepted)"),
	KEY(ACCEL_CFG_DOUBLE, "offload_param.max_in_cpu", "1000000000", 0, 1e15, NULL,
	    "NVMe: parameter elements kept in host memory (accepted)"),
	KEY(ACCEL_CFG_INT, "zero_hpz_partition_size", "1", 1, 1 << 20, NULL,
	    "ZeRO++ hierarchical partitioning (only 1 is implemented)"),
	KEY(ACCEL_CFG_BOOL, "zero_quantized_weights", "false", 1, 0, NULL,
	    "ZeRO++ quantized weights (not implemented)"),
	KEY(ACCEL_CFG_BOOL, "zero_quantized_nontrainable_weights", "false", 1, 0, NULL,
	    "ZeRO++ quantized frozen weights (not implemented)"),
	KEY(ACCEL_CFG_BOOL, "zero_quantized_gradients", "false", 1, 0, NULL,
	    "ZeRO++ quantized gradients (not implemented)"),
	KEY(ACCEL_CFG_INT, "mics_shard_size", "-1", -1, 1 << 20, NULL,
	    "MiCS sharding group size (not implemented: -1)"),
	KEY(ACCEL_CFG_BOOL, "mics_hierarchical_params_gather", "false", 1, 0, NULL,
	    "MiCS hierarchical gather (not implemented)"),
	KEY(ACCEL_CFG_BOOL, "memory_efficient_linear", "true", 1, 0, NULL,
	    "A PyTorch module patch; accel has no modules (accepted, no effect)"),
	KEY(ACCEL_CFG_BOOL, "pipeline_loading_checkpoint", "false", 1, 0, NULL,
	    "Not implemented (must stay false)"),
	KEY(ACCEL_CFG_BOOL, "override_module_apply", "true", 1, 0, NULL,
	    "A PyTorch module patch (accepted, no effect)"),
	KEY(ACCEL_CFG_BOOL, "use_multi_rank_bucket_allreduce", "true", 1, 0, NULL,
	    "Accepted, no effect"),
	KEY(ACCEL_CFG_BOOL, "log_trace_cache_warnings", "false", 1, 0, NULL,
	    "Accepted, no effect"),
	KEY(ACCEL_CFG_INT, "stage3_module_granularity_threshold", "0", 0, 1e15, NULL,
	    "Not implemented (must stay 0): accel's units are what the program registers"),
	KEY(ACCEL_CFG_BOOL, "use_all_reduce_for_fetch_params", "false", 1, 0, NULL,
	    "Not implemented (must stay false)"),
	KEY(ACCEL_CFG_BOOL, "cpu_offload", "false", 1, 0, NULL,
	    "Deprecated DeepSpeed key: use offload_optimizer.device \"cpu\""),
	KEY(ACCEL_CFG_INT, "aio.block_size", "1048576", 4096, 1 << 30, NULL,
	    "NVMe: bytes per I/O request (DeepSpeed's aio.block_size)"),
	KEY(ACCEL_CFG_INT, "aio.queue_depth", "8", 1, 4096, NULL,
	    "NVMe: requests in flight per ring"),
	KEY(ACCEL_CFG_INT, "aio.thread_count", "1", 1, 256, NULL,
	    "NVMe: submission rings"),
	KEY(ACCEL_CFG_BOOL, "aio.single_submit", "false", 1, 0, NULL,
	    "NVMe: submit requests one at a time"),
	KEY(ACCEL_CFG_BOOL, "aio.overlap_events", "true", 1, 0, NULL,
	    "NVMe: submit new requests while earlier ones complete"),
	KEY(ACCEL_CFG_INT, "aio.intra_op_parallelism", "1", 1, 256, NULL,
	    "Accepted, no effect"),
	KEY(ACCEL_CFG_BOOL, "aio.use_gds", "false", 1, 0, NULL,
	    "GPUDirect Storage (not implemented)"),
};

#define ZERO_CAPS                                                                          \
	(ACCEL_CAP_CPU | ACCEL_CAP_SHARD_OPTIM | ACCEL_CAP_SHARD_GRADS | ACCEL_CAP_SHARD_PARAMS | \
	 ACCEL_CAP_OFFLOAD | ACCEL_CAP_CHECKPOINT | ACCEL_CAP_REDUCE_SCATTER |                  \
	 ACCEL_CAP_MICRO_REDUCE | ACCEL_CAP_SHARED_PARAMS)

const accel_plugin_desc_v1 zero_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_STRATEGY,
	.name = "zero",
	.version = "1.0.0",
	.summary = "ZeRO stages 0-3: optimizer state, gradients and parameters sharded over "
	           "the ranks, optimizer offload to CPU or NVMe",
	/* The union over every stage; instance_caps gives the configured
	 * stage's (docs/zero.md, "Capabilities"). */
	.caps = ZERO_CAPS,
	.state_version = 1,     /* tensors master/, optim/ (canonical names) */
	.config_section = "zero_optimization",
	.params = zero_params,
	.n_params = sizeof(zero_params) / sizeof(zero_params[0]),
};

/* Keys accel declares but does not implement: refused by name unless they
 * hold their default. */
static const struct {
	const char *key;
	const char *why;
} refused[] = {
	{"round_robin_gradients", "accel reduces every group on every rank in order"},
	{"allgather_partitions", "accel always all-gathers the updated blocks"},
	{"ignore_unused_parameters", "parameters without gradients reduce zeros"},
	{"legacy_stage1", "accel has one stage-1 layout"},
	{"offload_optimizer.ratio", "only the whole optimizer is offloaded (ratio 1)"},
	{"zero_hpz_partition_size", "ZeRO++ hierarchical partitioning is not there (size 1)"},
	{"zero_quantized_weights", "ZeRO++ weight quantization is not there"},
	{"zero_quantized_nontrainable_weights", "ZeRO++ weight quantization is not there"},
	{"zero_quantized_gradients", "ZeRO++ gradient quantization is not there"},
	{"mics_shard_size", "MiCS is not there (-1)"},
	{"mics_hierarchical_params_gather", "MiCS is not there"},
	{"pipeline_loading_checkpoint", "pipeline parallelism is not there"},
	{"stage3_module_granularity_threshold", "accel's units are the program's own"},
	{"use_all_reduce_for_fetch_params", "stage 3 gathers with all-gather"},
	{"cpu_offload", "a deprecated DeepSpeed key: set offload_optimizer.device to \"cpu\""},
	{"aio.use_gds", "GPUDirect Storage is not there"},
};

static const accel_param_schema_v1 *schema_of(const char *key)
{
	for (uint32_t i = 0; i < zero_desc.n_params; i++)
		if (!strcmp(zero_params[i].key, key))
			return &zero_params[i];
	return NULL;
}

/* Whether `key` holds something other than its default. */
static int non_default(const accel_host_v1 *H, accel_host *h, const char *key, int *ret)
{
	const accel_param_schema_v1 *p = schema_of(key);
	int r;
	*ret = 0;
	if (!p)
		return H->error(h, ACCEL_ERR_INTERNAL, "no schema entry for '%s'", key);
	if (p->type == ACCEL_CFG_BOOL) {
		int32_t v = 0;
		if ((r = H->cfg_bool(h, key, &v)))
			return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
		*ret = (v != 0) != !strcmp(p->default_json, "true");
	} else if (p->type == ACCEL_CFG_INT) {
		int64_t v = 0;
		if ((r = H->cfg_int(h, key, &v)))
			return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
		*ret = v != strtoll(p->default_json, NULL, 10);
	} else if (p->type == ACCEL_CFG_DOUBLE) {
		double v = 0;
		if ((r = H->cfg_double(h, key, &v)))
			return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
		*ret = v != strtod(p->default_json, NULL);
	}
	return ACCEL_OK;
}

static uint32_t place_of(const char *s)
{
	return !strcmp(s, "cpu") ? ZERO_PLACE_CPU : !strcmp(s, "nvme") ? ZERO_PLACE_NVME
	                                                             : ZERO_PLACE_DEVICE;
}

#define GET(fn, key, dst) SHARD_CFG_GET(fn, key, dst)

int zero_read_config(const accel_host_v1 *H, accel_host *h, zero_cfg *c, int for_estimate)
{
	const char *dev = "none", *pdev = "none";
	int64_t v;
	int r, bad;

	memset(c, 0, sizeof(*c));
	c->contiguous_gradients = 1;
	c->reduce_scatter = 1;
	c->reduce_bucket_size = c->allgather_bucket_size = 5e8;
	c->prefetch_bucket_size = 5e7;
	c->persistence_threshold = 1e5;
	c->max_live_parameters = c->max_reuse_distance = c->sub_group_size = 1e9;
	c->opt_buffer_count = 4;
	zero_aio_opts_default(&c->aio);

	for (uint32_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		if ((r = non_default(H, h, refused[i].key, &bad)))
			return r;
		if (bad)
			return H->error(h, ACCEL_ERR_CONFIG, "zero_optimization.%s: not implemented by "
			                "accel's zero plugin (%s); remove the key or set it to its "
			                "default %s", refused[i].key, refused[i].why,
			                schema_of(refused[i].key)->default_json);
	}
	GET(cfg_int, "stage", &c->stage);
	if (c->stage < 0 || c->stage > 3)
		return H->error(h, ACCEL_ERR_CONFIG, "zero_optimization.stage: %lld is not a ZeRO "
		                "stage; use 0, 1, 2 or 3", (long long)c->stage);
	GET(cfg_bool, "overlap_comm", &c->overlap_comm);
	GET(cfg_bool, "reduce_scatter", &c->reduce_scatter);
	GET(cfg_bool, "contiguous_gradients", &c->contiguous_gradients);
	GET(cfg_double, "reduce_bucket_size", &c->reduce_bucket_size);
	GET(cfg_double, "allgather_bucket_size", &c->allgather_bucket_size);
	GET(cfg_double, "stage3_prefetch_bucket_size", &c->prefetch_bucket_size);
	GET(cfg_double, "stage3_param_persistence_threshold", &c->persistence_threshold);
	GET(cfg_double, "stage3_max_live_parameters", &c->max_live_parameters);
	GET(cfg_double, "stage3_max_reuse_distance", &c->max_reuse_distance);
	GET(cfg_double, "sub_group_size", &c->sub_group_size);
	GET(cfg_bool, "zero3_init_flag", &c->zero3_init_flag);
	GET(cfg_string, "offload_optimizer.device", &dev);
	GET(cfg_string, "offload_param.device", &pdev);
	GET(cfg_string, "offload_optimizer.nvme_path", &c->opt_nvme_path);
	GET(cfg_string, "offload_param.nvme_path", &c->param_nvme_path);
	GET(cfg_bool, "offload_optimizer.pin_memory", &c->opt_pin_memory);
	GET(cfg_int, "offload_optimizer.buffer_count", &c->opt_buffer_count);
	v = (int64_t)c->aio.block_size;
	GET(cfg_int, "aio.block_size", &v);
	c->aio.block_size = (uint64_t)v;
	v = c->aio.queue_depth;
	GET(cfg_int, "aio.queue_depth", &v);
	c->aio.queue_depth = (uint32_t)v;
	v = c->aio.thread_count;
	GET(cfg_int, "aio.thread_count", &v);
	c->aio.thread_count = (uint32_t)v;
	GET(cfg_bool, "aio.single_submit", &c->aio.single_submit);
	GET(cfg_bool, "aio.overlap_events", &c->aio.overlap_events);
	c->opt_place = place_of(dev);
	c->param_place = place_of(pdev);

	if (c->opt_place != ZERO_PLACE_DEVICE && c->stage == 0)
		return H->error(h, ACCEL_ERR_CONFIG, "zero_optimization.offload_optimizer.device "
		                "'%s' needs stage 1, 2 or 3 (stage is 0: nothing is partitioned to "
		                "offload); raise zero_optimization.stage or set the device to "
		                "\"none\"", dev);
	c->grad_accum = 1;
	GET(cfg_int, "/gradient_accumulation_steps", &c->grad_accum);
	/* an estimate touches no disk: nvme_path may be left unset there */
	if (c->opt_place == ZERO_PLACE_NVME && !for_estimate &&
	    (!c->opt_nvme_path || !*c->opt_nvme_path))
		return H->error(h, ACCEL_ERR_CONFIG, "zero_optimization.offload_optimizer.device is "
		                "\"nvme\" but zero_optimization.offload_optimizer.nvme_path is not "
		                "set; name a directory on a fast local disk");
	if (c->param_place != ZERO_PLACE_DEVICE && c->stage != 3)
		return H->error(h, ACCEL_ERR_CONFIG, "zero_optimization.offload_param.device '%s' "
		                "needs stage 3 (stage is %lld: parameters are not partitioned); set "
		                "zero_optimization.stage to 3 or offload_param.device to \"none\"",
		                pdev, (long long)c->stage);
	if (c->param_place == ZERO_PLACE_NVME && !for_estimate &&
	    (!c->param_nvme_path || !*c->param_nvme_path))
		return H->error(h, ACCEL_ERR_CONFIG, "zero_optimization.offload_param.device is "
		                "\"nvme\" but zero_optimization.offload_param.nvme_path is not set; "
		                "name a directory on a fast local disk");
	return ACCEL_OK;
}

static uint32_t caps_of_stage(const zero_cfg *c)
{
	/* shared parameters: stages 0-2 reduce a group once its own units are
	 * done, after every use; stage 3 holds the owner (zero_stage3.c) */
	uint32_t caps = ACCEL_CAP_CPU | ACCEL_CAP_CHECKPOINT | ACCEL_CAP_SHARED_PARAMS;
	if (c->stage >= 1)
		caps |= ACCEL_CAP_SHARD_OPTIM | (c->reduce_scatter ? ACCEL_CAP_REDUCE_SCATTER : 0);
	if (c->stage >= 2)
		caps |= ACCEL_CAP_SHARD_GRADS | ACCEL_CAP_REDUCE_SCATTER | ACCEL_CAP_MICRO_REDUCE;
	if (c->stage >= 3)
		caps |= ACCEL_CAP_SHARD_PARAMS;
	if (c->opt_place != ZERO_PLACE_DEVICE || c->param_place != ZERO_PLACE_DEVICE)
		caps |= ACCEL_CAP_OFFLOAD;
	return caps;
}

static int zero_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	zero_state *s;
	int r;

	if (!(s = calloc(1, sizeof(*s))))
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	s->host = host;
	s->h = h;
	if ((r = shard_init_world(host, h, &s->world, &s->W, &s->rank)) ||
	    (r = zero_read_config(host, h, &s->cfg, 0))) {
		free(s);
		return r;
	}
	host->log(h, ACCEL_LOG_INFO, "stage %lld, offload optimizer %s, offload param %s",
	          (long long)s->cfg.stage,
	          s->cfg.opt_place == ZERO_PLACE_CPU ? "cpu"
	          : s->cfg.opt_place == ZERO_PLACE_NVME ? "nvme" : "none",
	          s->cfg.param_place == ZERO_PLACE_CPU ? "cpu" : "none");
	*ret_state = s;
	return ACCEL_OK;
}

static void zero_fini(void *state)
{
	zero_state *s = state;
	if (!s)
		return;
	if (s->model)
		s->host->log(s->h, ACCEL_LOG_INFO, "peak bytes over the run: peak params %llu, peak "
		             "grads %llu, peak buffers %llu",
		             (unsigned long long)s->mem_peak[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS],
		             (unsigned long long)s->mem_peak[ACCEL_EST_DEVICE][ACCEL_MEM_GRADS],
		             (unsigned long long)s->mem_peak[ACCEL_EST_DEVICE][ACCEL_MEM_BUFFERS]);
	zero_release_all(s);
	free(s);
}

static int zero_instance_caps(void *state, uint32_t *ret_caps)
{
	zero_state *s = state;
	*ret_caps = caps_of_stage(&s->cfg);
	return ACCEL_OK;
}

/* Stage 3 has its own unit hooks; stages 0-2 need post_backward only. */
static int zero_pre_forward(void *state, uint32_t unit)
{
	zero_state *s = state;
	return s->cfg.stage == 3 ? zero3_pre_forward(state, unit) : ACCEL_OK;
}

static int zero_post_forward(void *state, uint32_t unit)
{
	zero_state *s = state;
	return s->cfg.stage == 3 ? zero3_post_forward(state, unit) : ACCEL_OK;
}

static int zero_pre_backward(void *state, uint32_t unit)
{
	zero_state *s = state;
	return s->cfg.stage == 3 ? zero3_pre_backward(state, unit) : ACCEL_OK;
}

static int zero_post_backward_any(void *state, uint32_t unit)
{
	zero_state *s = state;
	return s->cfg.stage == 3 ? zero3_post_backward(state, unit) : zero_post_backward(state, unit);
}

static const accel_plugin_v1 zero_plugin = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &zero_desc,
	.init = zero_init,
	.fini = zero_fini,
	.wrap = zero_wrap,
	.reduce = zero_reduce,
	.grad_stats = zero_grad_stats,
	.grad_stats_device = zero_grad_stats_device,
	.step = zero_step,
	.save_state = zero_save_state,
	.load_state = zero_load_state,
	.pre_forward = zero_pre_forward,
	.post_forward = zero_post_forward,
	.pre_backward = zero_pre_backward,
	.post_backward = zero_post_backward_any,
	.micro_step_end = zero_micro_step_end,
	.instance_caps = zero_instance_caps,
	.materialize = zero3_materialize,
	.estimate_memory = zero_estimate_memory,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "zero", op_copy_async))
		return NULL;
	return &zero_plugin;
}
