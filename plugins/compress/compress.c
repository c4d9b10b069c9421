/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress.c: the compress reduce hook (vtable, config,
 * validation, step bookkeeping, statistics).
 *
 * Gradient buckets of ddp, zero and fsdp come here through the host's
 * reduce_bucket_v2 / reduce_scatter_bucket hook points (docs/compress.md).
 * fp16/bf16 cast the bucket and reduce the half copy (both hook points);
 * top-k and PowerSGD need every rank's whole bucket, so they take only the
 * all-reduce point and validate() refuses strategies that reduce-scatter.
 * Error-feedback residuals are double-buffered per bucket: a reduction
 * writes the new one aside and post_step() commits it, unless the step
 * was skipped (a loss-scaler overflow), which leaves the old one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"

#define P(type_, key_, def_, lo_, hi_, choices_, help_)                                  \
	{.struct_size = sizeof(accel_param_schema_v1), .type = (type_), .key = (key_),       \
	 .default_json = (def_), .min = (lo_), .max = (hi_), .choices = (choices_),          \
	 .help = (help_)}

static const accel_param_schema_v1 cz_params[] = {
	P(ACCEL_CFG_ENUM, "method", "\"fp16\"", 1, 0, "fp16|bf16|topk|powersgd",
	  "fp16/bf16: reduce a half-precision copy; topk: the largest |g| of each bucket or "
	  "tensor with error feedback; powersgd: low-rank P/Q approximation (PyTorch's hook)."),
	P(ACCEL_CFG_DOUBLE, "ratio", "0.01", 1e-9, 1,
	  NULL, "topk: fraction of the elements sent, k = max(1, floor(n * ratio))."),
	P(ACCEL_CFG_ENUM, "granularity", "\"bucket\"", 1, 0, "bucket|tensor",
	  "topk: choose k per bucket or per parameter run of a bucket."),
	P(ACCEL_CFG_BOOL, "use_error_feedback", "true", 1, 0, NULL,
	  "topk, powersgd: add what was not sent to the next step's gradient."),
	P(ACCEL_CFG_INT, "start_iter", NULL, 0, 9.0e15, NULL,
	  "fp16, bf16, topk: plain all-reduce steps before compressing (default 0); powersgd "
	  "uses start_powerSGD_iter."),
	P(ACCEL_CFG_INT, "min_numel", "0", 0, 9.0e15, NULL,
	  "Runs (topk granularity tensor, powersgd) or buckets smaller than this go "
	  "uncompressed."),
	P(ACCEL_CFG_INT, "matrix_approximation_rank", "1", 1, 1024, NULL,
	  "powersgd: rank of the P Q^T approximation."),
	P(ACCEL_CFG_INT, "start_powerSGD_iter", "1000", 0, 9.0e15, NULL,
	  "powersgd: plain all-reduce steps before compressing."),
	P(ACCEL_CFG_DOUBLE, "min_compression_rate", "2", 0, 1e12, NULL,
	  "powersgd: compress a matrix only when rows*cols > rate * rank*(rows+cols)."),
	P(ACCEL_CFG_BOOL, "warm_start", "true", 1, 0, NULL,
	  "powersgd: start each step from the last step's Q instead of a new random one."),
	P(ACCEL_CFG_DOUBLE, "orthogonalization_epsilon", "0", 0, 1, NULL,
	  "powersgd: added to column norms in Gram-Schmidt (0: none)."),
	P(ACCEL_CFG_INT, "seed", "0", 0, 9.0e15, NULL,
	  "powersgd: seed of the random Q, the same on every rank."),
};

static const accel_plugin_desc_v1 cz_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_REDUCE_HOOK,
	.name = "compress",
	.version = "1.0.0",
	.summary = "Compressed gradient reduction: fp16/bf16 cast, top-k with error feedback, "
	           "PowerSGD",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CHECKPOINT,
	.state_version = 1,
	.config_section = "compress",
	.params = cz_params,
	.n_params = sizeof(cz_params) / sizeof(cz_params[0]),
};

static const char *method_name(uint32_t m)
{
	switch (m) {
	case CZ_FP16: return "fp16";
	case CZ_BF16: return "bf16";
	case CZ_TOPK: return "top-k";
	default: return "PowerSGD";
	}
}

int cz_error_nomem(cz_state *s, const char *what)
{
	return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory for %s", what);
}

static int cfg_int(cz_state *s, const char *key, int64_t *v)
{
	int r = s->host->cfg_int(s->h, key, v);
	return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
}

static int cfg_bool(cz_state *s, const char *key, int *v)
{
	int32_t b = *v;
	int r = s->host->cfg_bool(s->h, key, &b);
	if (r == ACCEL_OK)
		*v = b != 0;
	return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
}

static int cfg_double(cz_state *s, const char *key, double *v)
{
	int r = s->host->cfg_double(s->h, key, v);
	return r == ACCEL_ERR_NOT_FOUND ? ACCEL_OK : r;
}

static int cz_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	int r;
	cz_state *s = calloc(1, sizeof(*s));
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	s->host = host;
	s->h = h;
	s->world.struct_size = sizeof(s->world);
	s->ratio = 0.01;
	s->error_feedback = 1;
	s->rank = 1;
	s->min_compression_rate = 2;
	s->warm_start = 1;
	const char *m = "fp16", *gran = "bucket";
	int64_t start_psgd = 1000, seed = 0, start_iter = -1;
	if ((r = host->world(h, &s->world)))
		goto fail;
	r = host->cfg_string(h, "method", &m);
	if (r && r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	r = host->cfg_string(h, "granularity", &gran);
	if (r && r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if ((r = cfg_double(s, "ratio", &s->ratio)) ||
	    (r = cfg_bool(s, "use_error_feedback", &s->error_feedback)) ||
	    (r = cfg_int(s, "start_iter", &start_iter)) ||
	    (r = cfg_int(s, "min_numel", &s->min_numel)) ||
	    (r = cfg_int(s, "matrix_approximation_rank", &s->rank)) ||
	    (r = cfg_int(s, "start_powerSGD_iter", &start_psgd)) ||
	    (r = cfg_double(s, "min_compression_rate", &s->min_compression_rate)) ||
	    (r = cfg_bool(s, "warm_start", &s->warm_start)) ||
	    (r = cfg_double(s, "orthogonalization_epsilon", &s->ortho_eps)) ||
	    (r = cfg_int(s, "seed", &seed)))
		goto fail;
	s->method = !strcmp(m, "fp16")   ? CZ_FP16
	            : !strcmp(m, "bf16") ? CZ_BF16
	            : !strcmp(m, "topk") ? CZ_TOPK
	                                 : CZ_POWERSGD;
	s->tensor_granularity = !strcmp(gran, "tensor");
	s->seed = (uint64_t)seed;
	if (s->method == CZ_POWERSGD) {
		if (start_iter >= 0) {
			r = host->error(h, ACCEL_ERR_CONFIG, "compress.start_iter is for fp16, bf16 and "
			                "topk; with method powersgd the warm-up is "
			                "compress.start_powerSGD_iter (PyTorch's name): use that key");
			goto fail;
		}
		s->start_iter = start_psgd;
	} else {
		s->start_iter = start_iter < 0 ? 0 : start_iter;
	}
	if (!(s->ratio > 0 && s->ratio <= 1)) {
		r = host->error(h, ACCEL_ERR_CONFIG, "compress.ratio %g must be in (0, 1]", s->ratio);
		goto fail;
	}
	s->stats.struct_size = sizeof(s->stats);
	s->stats.method = s->method;
	s->ext = (accel_compress_ext_v1){.struct_size = sizeof(s->ext), .self = s};
	host->log(h, ACCEL_LOG_INFO, "method %s, warm-up %lld steps%s", m,
	          (long long)s->start_iter,
	          s->method == CZ_TOPK ? (s->tensor_granularity ? ", top-k per tensor"
	                                                        : ", top-k per bucket")
	                               : "");
	*ret_state = s;
	return ACCEL_OK;
fail:
	free(s);
	return r;
}

static void cz_fini(void *state)
{
	cz_state *s = state;
	if (!s)
		return;
	for (uint32_t i = 0; i < s->n_buckets; i++)
		cz_bucket_free(s, s->buckets[i]);
	free(s->buckets);
	cz_saved_free(s);
	free(s);
}

/* Top-k and PowerSGD need each rank's whole bucket (an all-gather of
 * indices, products with the whole matrix): a strategy that reduces with
 * reduce-scatter hands them blocks.  The caps are the strategy instance's
 * (zero's stage, fsdp's sharding strategy: ABI minor 6). */
static int cz_validate(void *state, const accel_selection_v1 *sel)
{
	cz_state *s = state;
	if (s->method == CZ_FP16 || s->method == CZ_BF16 || !sel || sel->n_plugins == 0 ||
	    !ACCEL_STRUCT_HAS(sel, accel_selection_v1, caps) || !sel->caps)
		return ACCEL_OK;
	if (!(sel->caps[0] & ACCEL_CAP_REDUCE_SCATTER))
		return ACCEL_OK;
	const char *name = sel->names ? sel->names[0] : "?";
	char how[160] = "";
	int64_t stage;
	const char *shard;
	if (!strcmp(name, "zero") &&
	    s->host->cfg_int(s->h, "/zero_optimization.stage", &stage) == ACCEL_OK)
		snprintf(how, sizeof(how), " (zero_optimization.stage %lld; stage 0, and stage 1 "
		         "with reduce_scatter false, all-reduce)", (long long)stage);
	else if (!strcmp(name, "fsdp") &&
	         s->host->cfg_string(s->h, "/fsdp.sharding_strategy", &shard) == ACCEL_OK)
		snprintf(how, sizeof(how), " (fsdp.sharding_strategy %s; NO_SHARD all-reduces)",
		         shard);
	return s->host->error(s->h, ACCEL_ERR_CONFIG, "%s needs all-reduce; strategy "
	                      "'%s' reduces with reduce-scatter%s: choose method fp16 or bf16, "
	                      "or a strategy that all-reduces", method_name(s->method), name,
	                      how);
}

static int compressing(const cz_state *s)
{
	return s->step >= (uint64_t)s->start_iter;
}

static int cz_reduce_bucket_v2(void *state, const accel_bucket_v1 *b, accel_req **ret_req)
{
	cz_state *s = state;
	cz_bucket *cb;
	int r = cz_bucket_get(s, b, CZ_KIND_ALLREDUCE, &cb);
	if (r)
		return r;
	cb->b = *b;
	cb->dense_req = NULL;
	if ((r = cz_group(s, b->group, &cb->group_size)))
		return r;
	cb->factor = b->flags & ACCEL_REDUCE_PREDIVIDED ? 1.0 : 1.0 / cb->group_size;
	uint64_t dense = b->view.numel * accel_abi_dtype_size(b->view.dtype);
	s->cur_dense += dense;
	int comp = compressing(s) && (int64_t)b->view.numel >= s->min_numel;
	if (comp && s->method == CZ_TOPK && cb->k_total == 0)
		comp = 0;  /* no run compresses (min_numel) */
	if (comp && (s->method == CZ_FP16 || s->method == CZ_BF16) &&
	    b->view.dtype == (s->method == CZ_FP16 ? ACCEL_DTYPE_F16 : ACCEL_DTYPE_BF16))
		comp = 0;  /* already half */
	cb->compressed = comp;
	if (!comp) {
		s->cur_plain++;
		s->cur_sent += dense;
		return cz_plain(s, cb, b, ret_req);
	}
	s->cur_comp++;
	switch (s->method) {
	case CZ_FP16:
	case CZ_BF16: return cz_cast_allreduce(s, cb, ret_req);
	case CZ_TOPK: return cz_topk_reduce(s, cb, ret_req);
	default: return cz_psgd_reduce(s, cb, ret_req);
	}
}

static int cz_reduce_scatter_bucket(void *state, const accel_bucket_v1 *b,
                                    const accel_view *shard, accel_req **ret_req)
{
	cz_state *s = state;
	cz_bucket *cb;
	int r;
	if (s->method != CZ_FP16 && s->method != CZ_BF16)
		return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED, "%s needs all-reduce; "
		                      "bucket %u came to be reduce-scattered (validate should have "
		                      "refused this strategy)", method_name(s->method), b->bucket_id);
	if ((r = cz_bucket_get(s, b, CZ_KIND_SCATTER, &cb)))
		return r;
	cb->b = *b;
	cb->shard = *shard;
	if ((r = cz_group(s, b->group, &cb->group_size)))
		return r;
	cb->factor = b->flags & ACCEL_REDUCE_PREDIVIDED ? 1.0 : 1.0 / cb->group_size;
	uint64_t dense = b->view.numel * accel_abi_dtype_size(b->view.dtype);
	s->cur_dense += dense;
	uint32_t half = s->method == CZ_FP16 ? ACCEL_DTYPE_F16 : ACCEL_DTYPE_BF16;
	if (!compressing(s) || (int64_t)b->view.numel < s->min_numel || b->view.dtype == half) {
		s->cur_plain++;
		s->cur_sent += dense;
		accel_view send = b->view;
		uint32_t op = b->flags & ACCEL_REDUCE_PREDIVIDED ? ACCEL_RED_SUM : ACCEL_RED_AVG;
		return b->group ? s->host->group_reduce_scatter(s->h, b->group, &send, shard, op,
		                                                ret_req)
		                : s->host->reduce_scatter(s->h, &send, shard, op, ret_req);
	}
	s->cur_comp++;
	return cz_cast_scatter(s, cb, ret_req);
}

static int cz_post_step(void *state, const accel_step_info_v1 *info)
{
	cz_state *s = state;
	for (uint32_t i = 0; i < s->n_buckets; i++) {
		cz_bucket *cb = s->buckets[i];
		if (cb->pending && !info->skip)
			cb->cur = !cb->cur;
		cb->pending = 0;
	}
	s->step = info->step + (info->skip ? 0 : 1);
	s->stats.steps = s->step;
	s->stats.last_sent_bytes = s->cur_sent;
	s->stats.last_dense_bytes = s->cur_dense;
	s->stats.last_ratio = s->cur_sent ? (double)s->cur_dense / (double)s->cur_sent : 0;
	s->stats.total_sent_bytes += s->cur_sent;
	s->stats.total_dense_bytes += s->cur_dense;
	s->stats.last_compressed = s->cur_comp;
	s->stats.last_plain = s->cur_plain;
	s->stats.compressing = compressing(s);
	s->cur_sent = s->cur_dense = s->cur_comp = s->cur_plain = 0;
	if (s->resume_zeroed && !s->resume_said) {
		s->host->log(s->h, ACCEL_LOG_INFO, "%u bucket(s) had no matching residual "
		             "in the checkpoint (the bucket layout differs from the saving run's): "
		             "they started from zero residuals", s->resume_zeroed);
		s->resume_said = 1;
	}
	if (s->resume_fresh_q && !s->resume_q_said) {
		s->host->log(s->h, ACCEL_LOG_INFO, "%u bucket(s) start from a fresh PowerSGD Q: the "
		             "checkpoint's Q has another size (compress.matrix_approximation_rank changed?)",
		             s->resume_fresh_q);
		s->resume_q_said = 1;
	}
	return ACCEL_OK;
}

static int ext_stats(void *self, accel_compress_stats_v1 *ret)
{
	cz_state *s = self;
	if (!ret || ret->struct_size < offsetof(accel_compress_stats_v1, last_sent_bytes))
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "compress.stats: ret is NULL or "
		                      "its struct_size is not set");
	size_t n = ret->struct_size < sizeof(*ret) ? ret->struct_size : sizeof(*ret);
	accel_compress_stats_v1 tmp = s->stats;
	tmp.struct_size = (uint32_t)n;
	memcpy(ret, &tmp, n);
	return ACCEL_OK;
}

static int ext_residual(void *self, uint32_t param, float *buf, uint64_t numel)
{
	cz_state *s = self;
	const accel_model_v1 *m = s->host->model(s->h);
	if (!m || param >= m->n_params || !buf)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "compress.stats residual: "
		                      "parameter %u does not exist (or buf is NULL)", param);
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, param);
	if (numel != p->numel)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "compress.stats residual: "
		                      "parameter '%s' has %llu elements, not %llu", p->name,
		                      (unsigned long long)p->numel, (unsigned long long)numel);
	memset(buf, 0, numel * sizeof(float));
	for (uint32_t i = 0; i < s->n_buckets; i++) {
		cz_bucket *cb = s->buckets[i];
		const float *res = cb->res[cb->cur];
		for (uint32_t k = 0; res && k < cb->n_segs; k++) {
			const cz_seg *g = &cb->segs[k];
			if (g->param != param)
				continue;
			uint64_t po = g->poff;
			if (po + g->numel <= numel)
				memcpy(buf + po, res + g->off, g->numel * sizeof(float));
		}
	}
	return ACCEL_OK;
}

static const void *cz_extension(void *state, const char *name, uint32_t version)
{
	cz_state *s = state;
	if (!s || !name || strcmp(name, ACCEL_COMPRESS_STATS) || version != 1)
		return NULL;
	s->ext.stats = ext_stats;
	s->ext.residual = ext_residual;
	return &s->ext;
}

static int cz_save_state(void *state, accel_ckpt_writer *w)
{
	return cz_save(state, w);
}

static int cz_load_state_slot(void *state, accel_ckpt_reader *r, uint32_t version)
{
	cz_state *s = state;
	if (version == 0) {   /* switched on at this resume: start fresh */
		s->host->log(s->h, ACCEL_LOG_INFO, "compress: the checkpoint holds no compress state "
		             "(saved without the hook): residuals start at zero");
		return ACCEL_OK;
	}
	if (version != cz_desc.state_version)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint holds "
		                      "compress state version %u; this plugin reads version %u",
		                      version, cz_desc.state_version);
	return cz_load_state(s, r);
}

static const accel_plugin_v1 cz_plugin = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &cz_desc,
	.init = cz_init,
	.fini = cz_fini,
	.validate = cz_validate,
	.save_state = cz_save_state,
	.load_state = cz_load_state_slot,
	.post_step = cz_post_step,
	.extension = cz_extension,
	.reduce_bucket_v2 = cz_reduce_bucket_v2,
	.reduce_scatter_bucket = cz_reduce_scatter_bucket,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "compress", ckpt_read_tensor))
		return NULL;
	return &cz_plugin;
}
