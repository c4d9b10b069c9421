/* SPDX-License-Identifier: MIT */
/* core/host.c: the host table (accel_host_v1) that plugins and comm backends
 * call.  Each function takes the instance's accel_host handle, which knows
 * its context, name and config section; errors are prefixed with the
 * instance's name so a message always says which plugin spoke. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel-build-config.h"
#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "ctx-impl.h"
#include "cuda_probe.h"
#include "device.h"
#include "kv.h"
#include "loader.h"
#include "log.h"
#include "mem.h"
#include "ops.h"
#include "select.h"
#include "store.h"
#include "stream.h"
#include "train.h"

static void host_log(accel_host *h, int32_t level, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static void host_log(accel_host *h, int32_t level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_logv_tag(level, h ? h->name : NULL, fmt, ap);
	va_end(ap);
}

static int host_error(accel_host *h, int32_t code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int host_error(accel_host *h, int32_t code, const char *fmt, ...)
{
	char msg[ACCEL_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (code >= 0)
		code = ACCEL_ERR_INTERNAL;
	if (!h || !h->ctx) {
		/* Inside an entry function: the loader reports it with the path. */
		accelp_loader_entry_error(msg);
		return code;
	}
	if (h->name)
		return accelp_err_set(&h->ctx->err, code, "%s: %s", h->name, msg);
	return accelp_err_set(&h->ctx->err, code, "%s", msg);
}

static int host_world(accel_host *h, accel_world_v1 *ret_world)
{
	if (!h || !ret_world)
		return ACCEL_ERR_INVALID_ARG;
	*ret_world = h->ctx->world;
	return ACCEL_OK;
}

/* "key" -> "<section>.key"; "/key" -> "key". */
static const char *cfg_path(accel_host *h, const char *key, char *buf, size_t cap)
{
	if (key[0] == '/')
		return key + 1;
	if (!h->section)
		return key;
	snprintf(buf, cap, "%s.%s", h->section, key);
	return buf;
}

/* A plugin's call with a NULL argument is its bug: say so, do not crash. */
static int cfg_args(accel_host *h, const char *fn, const char *key, const void *ret_value)
{
	if (h && h->ctx && key && ret_value)
		return ACCEL_OK;
	return host_error(h && h->ctx ? h : NULL, ACCEL_ERR_INVALID_ARG, "host->%s: %s is NULL", fn,
	                  !h || !h->ctx ? "the host handle" : !key ? "key" : "ret_value");
}

static int cfg_check(accel_host *h, const char *key, int r)
{
	if (r == ACCEL_ERR_CONFIG)
		return host_error(h, r, "config key '%s' read with the wrong type", key);
	return r;
}

static int host_cfg_bool(accel_host *h, const char *key, int32_t *ret_value)
{
	char buf[512];
	int ar = cfg_args(h, "cfg_bool", key, ret_value);
	if (ar)
		return ar;
	return cfg_check(h, key, accelp_config_get_bool(h->ctx->cfg, cfg_path(h, key, buf, sizeof(buf)),
	                                            ret_value));
}

static int host_cfg_int(accel_host *h, const char *key, int64_t *ret_value)
{
	char buf[512];
	int ar = cfg_args(h, "cfg_int", key, ret_value);
	if (ar)
		return ar;
	return cfg_check(h, key, accelp_config_get_int(h->ctx->cfg, cfg_path(h, key, buf, sizeof(buf)),
	                                           ret_value));
}

static int host_cfg_double(accel_host *h, const char *key, double *ret_value)
{
	char buf[512];
	int ar = cfg_args(h, "cfg_double", key, ret_value);
	if (ar)
		return ar;
	return cfg_check(h, key, accelp_config_get_double(h->ctx->cfg,
	                                              cfg_path(h, key, buf, sizeof(buf)), ret_value));
}

static int host_cfg_string(accel_host *h, const char *key, const char **ret_value)
{
	char buf[512];
	int ar = cfg_args(h, "cfg_string", key, ret_value);
	if (ar)
		return ar;
	return cfg_check(h, key, accelp_config_get_string(h->ctx->cfg,
	                                              cfg_path(h, key, buf, sizeof(buf)), ret_value));
}

static int host_cfg_strlist(accel_host *h, const char *key, uint32_t index, const char **ret_value)
{
	char buf[512];
	int ar = cfg_args(h, "cfg_strlist", key, ret_value);
	if (ar)
		return ar;
	return cfg_check(h, key, accelp_config_get_strlist(h->ctx->cfg,
	                                               cfg_path(h, key, buf, sizeof(buf)), index,
	                                               ret_value));
}

static int need_train(accel_host *h, const char *what)
{
	if (!h->ctx->train)
		return host_error(h, ACCEL_ERR_STATE, "%s called before the model exists", what);
	return ACCEL_OK;
}

/* A plugin built before minor 3 gets params[] at its minor's stride. */
static const accel_model_v1 *host_model(accel_host *h)
{
	if (!h->ctx->train)
		return NULL;
	return accelp_train_model_for(h->ctx->train, h->module ? h->module->abi_minor
	                                                      : ACCEL_ABI_MINOR);
}

static int host_param_bind(accel_host *h, uint32_t param, void *data, void *grad)
{
	int r = need_train(h, "param_bind");
	return r ? r : accelp_train_param_bind(h->ctx->train, param, data, grad);
}

static int host_param_init(accel_host *h, uint32_t param, uint64_t offset, const accel_view *dst)
{
	int r = need_train(h, "param_init");
	return r ? r : accelp_train_param_init(h->ctx->train, param, offset, dst);
}

static int host_mem_alloc(accel_host *h, uint32_t category, int32_t device, int32_t device_index,
                          uint64_t bytes, uint32_t flags, void **ret_ptr)
{
	if (!ret_ptr)
		return host_error(h, ACCEL_ERR_INVALID_ARG, "mem_alloc: ret_ptr is NULL");
	return accelp_mem_alloc(h->ctx, category, device, device_index, bytes, flags, ret_ptr);
}

static void host_mem_free(accel_host *h, void *ptr)
{
	accelp_mem_release(h->ctx, ptr);
}

static int host_op_copy(accel_host *h, const accel_view *dst, const accel_view *src)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_copy(dst, src, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static int host_op_fill(accel_host *h, const accel_view *dst, double value)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_fill(dst, value, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static int host_op_scale(accel_host *h, const accel_view *x, double alpha)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_scale(x, alpha, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static int host_op_axpy(accel_host *h, const accel_view *y, double alpha, const accel_view *x)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_axpy(y, alpha, x, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static int host_op_sumsq(accel_host *h, const accel_view *x, double *ret_sumsq)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_sumsq(x, ret_sumsq, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static int host_op_sumsq_acc(accel_host *h, const accel_view *x, double *stats)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_device_sumsq_acc(x, stats, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static int host_op_nonfinite(accel_host *h, const accel_view *x, uint64_t *ret_count)
{
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	int r = accelp_ops_nonfinite(x, ret_count, &h->ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static uint32_t host_optim_state_count(accel_host *h)
{
	return h->ctx->train ? accelp_train_optim_state_count(h->ctx->train) : 0;
}

static int host_optim_step(accel_host *h, const accel_optim_args_v1 *args)
{
	int r = need_train(h, "optim_step");
	if (r)
		return r;
	void *prev = accelp_device_stream_swap(h->ctx->stream);
	r = accelp_train_optim_step(h->ctx->train, args);
	accelp_device_stream_swap(prev);
	return r;
}

static int need_comm(accel_host *h, const char *what)
{
	if (!h->ctx->comm)
		return host_error(h, ACCEL_ERR_STATE, "%s: no comm backend is up", what);
	return ACCEL_OK;
}

static int host_allreduce(accel_host *h, const accel_view *send, const accel_view *recv,
                          uint32_t op, accel_req **ret_req)
{
	int r = need_comm(h, "allreduce");
	return r ? r : accelp_comm_allreduce(h->ctx->comm, send, recv, op, ret_req);
}

static int host_reduce_scatter(accel_host *h, const accel_view *send, const accel_view *recv,
                               uint32_t op, accel_req **ret_req)
{
	int r = need_comm(h, "reduce_scatter");
	return r ? r : accelp_comm_reduce_scatter(h->ctx->comm, send, recv, op, ret_req);
}

static int host_allgather(accel_host *h, const accel_view *send, const accel_view *recv,
                          accel_req **ret_req)
{
	int r = need_comm(h, "allgather");
	return r ? r : accelp_comm_allgather(h->ctx->comm, send, recv, ret_req);
}

static int host_broadcast(accel_host *h, const accel_view *buf, int32_t root, accel_req **ret_req)
{
	int r = need_comm(h, "broadcast");
	return r ? r : accelp_comm_broadcast(h->ctx->comm, buf, root, ret_req);
}

static int host_barrier(accel_host *h, accel_req **ret_req)
{
	int r = need_comm(h, "barrier");
	return r ? r : accelp_comm_barrier(h->ctx->comm, ret_req);
}

/* A completed request runs its req_on_done callbacks before wait() or
 * test() returns; they run after a failed wait too (the request is
 * released either way, so they would never run otherwise), and the wait's
 * own failure wins. */
static int host_wait(accel_host *h, accel_req *req)
{
	int r = need_comm(h, "wait");
	if (r)
		return r;
	r = accelp_comm_wait(h->ctx->comm, req);
	int c = accelp_train_req_done(h->ctx->train, req);
	return r ? r : c;
}

static int host_test(accel_host *h, accel_req *req, int32_t *ret_done)
{
	int32_t done = 0;
	int r = need_comm(h, "test");
	if (r || (r = accelp_comm_test(h->ctx->comm, req, &done)))
		return r;
	if (done && (r = accelp_train_req_done(h->ctx->train, req)))
		return r;
	if (ret_done)
		*ret_done = done;
	return ACCEL_OK;
}

/* A pre-division for a reduce hook, on the context's stream like the
 * strategy's own ops. */
static int scale_on_stream(accel_ctx *ctx, const accel_view *x, double alpha)
{
	void *prev = accelp_device_stream_swap(ctx->stream);
	int r = accelp_ops_scale(x, alpha, &ctx->err);
	accelp_device_stream_swap(prev);
	return r;
}

static const accel_active *reduce_hook(const accel_ctx *ctx)
{
	for (uint32_t i = 0; i < ctx->n_active; i++) {
		const accel_active *a = &ctx->active[i];
		if (a->inited && a->vt->desc->role == ACCEL_ROLE_REDUCE_HOOK)
			return a;
	}
	return NULL;
}

/* A hook of minor 3 that has only reduce_bucket_v2 gets a bucket without
 * entries (the old calls carry none). */
static int hook_all_reduce(accel_host *h, const accel_active *hook, const accel_view *bucket,
                           uint32_t bucket_id, uint32_t flags, accel_req **ret_req)
{
	if (hook->vt->reduce_bucket_v2) {
		accel_bucket_v1 b = {.struct_size = sizeof(b), .bucket_id = bucket_id,
		                     .view = *bucket, .flags = flags};
		return hook->vt->reduce_bucket_v2(hook->state, &b, ret_req);
	}
	if (!hook->vt->reduce_bucket)
		return host_error(h, ACCEL_ERR_UNSUPPORTED, "reduce hook '%s' has no all-reduce "
		                  "(only reduce_scatter_bucket); this strategy all-reduces its "
		                  "gradient buckets", hook->host.name);
	return hook->vt->reduce_bucket(hook->state, bucket, bucket_id, ret_req);
}

static int host_reduce_bucket(accel_host *h, const accel_view *bucket, uint32_t bucket_id,
                              accel_req **ret_req)
{
	accel_ctx *ctx = h->ctx;
	const accel_active *hook = reduce_hook(ctx);
	int r = accelp_train_check_reduce(ctx->train, h->name, "reduce_bucket");
	if (r)
		return r;
	if (hook)
		return hook_all_reduce(h, hook, bucket, bucket_id, ACCEL_REDUCE_PREDIVIDED, ret_req);
	r = need_comm(h, "reduce_bucket");
	return r ? r : accelp_comm_allreduce(ctx->comm, bucket, bucket, ACCEL_RED_SUM, ret_req);
}

/* The mean without a pre-division pass: the backend's AVG folds 1/world
 * into its reduction loop.  A reduce hook keeps its contract (a pre-divided
 * bucket to sum), so for one the host divides first. */
static int host_reduce_bucket_mean(accel_host *h, const accel_view *bucket, uint32_t bucket_id,
                                   accel_req **ret_req)
{
	accel_ctx *ctx = h->ctx;
	const accel_active *hook = reduce_hook(ctx);
	int r = accelp_train_check_reduce(ctx->train, h->name, "reduce_bucket_mean");
	if (r)
		return r;
	if (hook && hook->vt->reduce_bucket_v2)
		return hook_all_reduce(h, hook, bucket, bucket_id, 0, ret_req);
	if (hook) {
		if (ctx->world.world_size > 1 &&
		    (r = scale_on_stream(ctx, bucket, 1.0 / ctx->world.world_size)))
			return r;
		return hook_all_reduce(h, hook, bucket, bucket_id, ACCEL_REDUCE_PREDIVIDED, ret_req);
	}
	r = need_comm(h, "reduce_bucket_mean");
	return r ? r : accelp_comm_allreduce(ctx->comm, bucket, bucket, ACCEL_RED_AVG, ret_req);
}

/* A bucket description is checked once, here, where it enters the core:
 * hooks may then trust it. */
static int check_bucket(accel_host *h, const char *fn, const accel_bucket_v1 *b,
                        uint32_t flags)
{
	accel_train *t = h->ctx->train;
	if (!b || b->struct_size < ACCEL_ABI_END(accel_bucket_v1, group))
		return host_error(h, ACCEL_ERR_INVALID_ARG, "%s: %s", fn,
		                  b ? "bucket struct_size is too small (set it to "
		                      "sizeof(accel_bucket_v1))"
		                    : "bucket is NULL");
	if (b->view.struct_size < sizeof(accel_view) || (!b->view.data && b->view.numel))
		return host_error(h, ACCEL_ERR_INVALID_ARG, "%s: bucket %u has a bad view (struct_size "
		                  "%u, data %s, %llu elements)", fn, b->bucket_id,
		                  b->view.struct_size, b->view.data ? "set" : "NULL",
		                  (unsigned long long)b->view.numel);
	if (flags & ~ACCEL_REDUCE_PREDIVIDED)
		return host_error(h, ACCEL_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn,
		                  flags & ~ACCEL_REDUCE_PREDIVIDED);
	if (b->n_entries && !b->entries)
		return host_error(h, ACCEL_ERR_INVALID_ARG, "%s: bucket %u has %u entries and a NULL "
		                  "entries pointer", fn, b->bucket_id, b->n_entries);
	const accel_model_v1 *m = t ? accelp_train_model(t) : NULL;
	uint64_t end = 0;
	for (uint32_t i = 0; i < b->n_entries; i++) {
		const accel_bucket_entry_v1 *e = &b->entries[i];
		const accel_param_info_v1 *p = m && e->param < m->n_params ? &m->params[e->param]
		                                                             : NULL;
		if (!p || e->bucket_offset < end || e->numel > b->view.numel ||
		    e->bucket_offset > b->view.numel - e->numel || e->param_offset > p->numel ||
		    e->numel > p->numel - e->param_offset)
			return host_error(h, ACCEL_ERR_INVALID_ARG, "%s: bucket %u entry %u (param %u, "
			                  "elements [%llu, +%llu) of it at bucket offset %llu) is out of "
			                  "range or overlaps the one before: entries must be sorted and "
			                  "lie inside both the %llu-element bucket and the parameter",
			                  fn, b->bucket_id, i, e->param,
			                  (unsigned long long)e->param_offset,
			                  (unsigned long long)e->numel,
			                  (unsigned long long)e->bucket_offset,
			                  (unsigned long long)b->view.numel);
		end = e->bucket_offset + e->numel;
	}
	return ACCEL_OK;
}

static int host_reduce_bucket_v2(accel_host *h, const accel_bucket_v1 *b, uint32_t flags,
                                 accel_req **ret_req)
{
	accel_ctx *ctx = h->ctx;
	const accel_active *hook = reduce_hook(ctx);
	int r;
	if ((r = check_bucket(h, "reduce_bucket_v2", b, flags)) ||
	    (r = accelp_train_check_reduce(ctx->train, h->name, "reduce_bucket_v2")))
		return r;
	if (b->group && hook && !hook->vt->reduce_bucket_v2)
		return host_error(h, ACCEL_ERR_UNSUPPORTED, "reduce_bucket_v2: bucket %u names a "
		                  "group, which reduce hook '%s' (built before ABI 1.3) cannot reduce "
		                  "over", b->bucket_id, hook->host.name);
	if (hook && hook->vt->reduce_bucket_v2) {
		accel_bucket_v1 hb = *b;
		hb.struct_size = sizeof(hb);
		hb.flags = flags;
		return hook->vt->reduce_bucket_v2(hook->state, &hb, ret_req);
	}
	if (hook) {
		/* A hook of minor < 3 sums a pre-divided bucket of the world. */
		if (!(flags & ACCEL_REDUCE_PREDIVIDED) && ctx->world.world_size > 1 &&
		    (r = scale_on_stream(ctx, &b->view, 1.0 / ctx->world.world_size)))
			return r;
		return hook_all_reduce(h, hook, &b->view, b->bucket_id, ACCEL_REDUCE_PREDIVIDED,
		                       ret_req);
	}
	if ((r = need_comm(h, "reduce_bucket_v2")))
		return r;
	return accelp_comm_group_allreduce(ctx->comm, b->group, &b->view, &b->view,
	                                  flags & ACCEL_REDUCE_PREDIVIDED ? ACCEL_RED_SUM
	                                                                  : ACCEL_RED_AVG,
	                                  ret_req);
}

static int host_reduce_scatter_bucket(accel_host *h, const accel_bucket_v1 *b,
                                      const accel_view *shard, uint32_t flags,
                                      accel_req **ret_req)
{
	accel_ctx *ctx = h->ctx;
	const accel_active *hook = reduce_hook(ctx);
	int r;
	if ((r = check_bucket(h, "reduce_scatter_bucket", b, flags)) ||
	    (r = accelp_train_check_reduce(ctx->train, h->name, "reduce_scatter_bucket")))
		return r;
	if (!shard || shard->struct_size < sizeof(accel_view) || (!shard->data && shard->numel))
		return host_error(h, ACCEL_ERR_INVALID_ARG, "reduce_scatter_bucket: bucket %u: bad "
		                  "shard view", b->bucket_id);
	if (hook) {
		if (!hook->vt->reduce_scatter_bucket)
			return host_error(h, ACCEL_ERR_UNSUPPORTED, "reduce hook '%s' has no "
			                  "reduce_scatter_bucket; strategy '%s' reduces gradients "
			                  "with reduce-scatter: select a hook that supports it or "
			                  "none", hook->host.name, h->name ? h->name : "?");
		accel_bucket_v1 hb = *b;
		hb.struct_size = sizeof(hb);
		hb.flags = flags;
		return hook->vt->reduce_scatter_bucket(hook->state, &hb, shard, ret_req);
	}
	if ((r = need_comm(h, "reduce_scatter_bucket")))
		return r;
	return accelp_comm_group_reduce_scatter(ctx->comm, b->group, &b->view, shard,
	                                 flags & ACCEL_REDUCE_PREDIVIDED ? ACCEL_RED_SUM
	                                                                 : ACCEL_RED_AVG,
	                                 ret_req);
}

static int host_req_on_done(accel_host *h, accel_req *req, int (*fn)(void *arg), void *arg)
{
	int r = need_train(h, "req_on_done");
	return r ? r : accelp_train_req_on_done(h->ctx->train, req, fn, arg);
}

static int32_t host_grad_enabled(accel_host *h)
{
	return accelp_train_grad_enabled(h->ctx->train);
}

static int host_param_view(accel_host *h, uint32_t param, accel_view *ret_data,
                           accel_view *ret_grad)
{
	int r = need_train(h, "param_view");
	return r ? r : accelp_train_param_view(h->ctx->train, param, ret_data, ret_grad);
}

static int host_device_info(accel_host *h, int32_t device_index, accel_device_info_v1 *ret)
{
	if (!ret || ret->struct_size < ACCEL_ABI_END(accel_device_info_v1, compute_capability))
		return host_error(h, ACCEL_ERR_INVALID_ARG, "device_info: %s", ret ?
		                  "set ret->struct_size = sizeof(accel_device_info_v1)" : "ret is NULL");
	/* the probe the loader's requirement checks use, so both agree */
	accelp_cuda_info probe;
	uint32_t offered = 0;
	int32_t count = 0, cc = 0;
	accelp_cuda_probe(&probe);
	accelp_cuda_offered(&probe, &offered, &cc);
	if (offered & ACCEL_REQ_CUDA) {
		count = probe.n_gpus;
		if (device_index >= 0)
			cc = device_index < count && device_index < ACCELP_CUDA_MAX_GPUS
			             ? probe.gpus[device_index].cc
			             : 0;
	}
	if (device_index >= count && count > 0)
		return host_error(h, ACCEL_ERR_INVALID_ARG, "device_info: CUDA device %d does not "
		                  "exist (this process sees %d)", device_index, count);
	uint32_t size = ret->struct_size;
	accel_device_info_v1 info = {.struct_size = size, .cuda_present = count > 0,
	                             .device_count = count, .compute_capability = cc};
	memcpy(ret, &info, size < sizeof(info) ? size : sizeof(info));
	return ACCEL_OK;
}

static int32_t host_sync_step(accel_host *h)
{
	return h->ctx->train ? accelp_train_sync_step(h->ctx->train) : 1;
}

/* The stream is the one the core set on this plugin's host handle for its
 * save_state/load_state (core/ckpt.c); blob names get the plugin's prefix. */
static int host_ckpt_write(accel_host *h, accel_ckpt_writer *w, const char *name,
                           const void *data, uint64_t bytes)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!w || w != h->ckpt)
		return host_error(h, ACCEL_ERR_STATE, "ckpt_write outside this plugin's save_state");
	return accelp_ckpt_write(w, h->name, name, data, bytes, &h->ctx->err);
}

static int host_ckpt_size(accel_host *h, accel_ckpt_reader *r, const char *name,
                          uint64_t *ret_bytes)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!r || r != h->ckpt)
		return host_error(h, ACCEL_ERR_STATE, "ckpt_size outside this plugin's load_state");
	return accelp_ckpt_size(r, h->name, name, ret_bytes, &h->ctx->err);
}

static int host_ckpt_read(accel_host *h, accel_ckpt_reader *r, const char *name, void *buf,
                          uint64_t bytes)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!r || r != h->ckpt)
		return host_error(h, ACCEL_ERR_STATE, "ckpt_read outside this plugin's load_state");
	if (bytes && !buf)
		return host_error(h, ACCEL_ERR_INVALID_ARG, "ckpt_read: buf is NULL");
	return accelp_ckpt_read(r, h->name, name, buf, bytes, &h->ctx->err);
}

static int host_ckpt_write_tensor(accel_host *h, accel_ckpt_writer *w,
                                  const accel_ckpt_slice_v1 *s)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!w || w != h->ckpt)
		return host_error(h, ACCEL_ERR_STATE, "ckpt_write_tensor outside this plugin's "
		                  "save_state");
	return accelp_ckpt_write_tensor(w, h->name, s, 0, &h->ctx->err);
}

static int host_ckpt_tensor_info(accel_host *h, accel_ckpt_reader *r, const char *name,
                                 accel_ckpt_tensor_info_v1 *ret)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!r || r != h->ckpt)
		return host_error(h, ACCEL_ERR_STATE, "ckpt_tensor_info outside this plugin's "
		                  "load_state");
	return accelp_ckpt_tensor_info(r, h->name, name, ret, &h->ctx->err);
}

static int host_ckpt_read_tensor(accel_host *h, accel_ckpt_reader *r, const char *name,
                                 uint32_t dtype, uint64_t offset, uint64_t count, void *buf)
{
	if (!h || !h->ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!r || r != h->ckpt)
		return host_error(h, ACCEL_ERR_STATE, "ckpt_read_tensor outside this plugin's "
		                  "load_state");
	return accelp_ckpt_read_tensor(r, h->name, name, dtype, offset, count, buf, &h->ctx->err);
}

/* A job of several processes without a rendezvous store (started by
 * mpirun without ACCEL_MASTER_ADDR/PORT, before or without the store
 * comm.mpi_store makes over MPI): the in-process map would make every rank
 * wait for keys only it can see. */
static int no_store(accel_host *h)
{
	accel_ctx *ctx = h->ctx;
	if (ctx->store || ctx->world.world_size == 1)
		return ACCEL_OK;
	int on_mpi = ctx->comm && !strcmp(accelp_comm_backend_name(ctx->comm), "mpi");
	int32_t mpi_store = 1;
	accelp_config_get_bool(ctx->cfg, "comm.mpi_store", &mpi_store);
	return host_error(h, ACCEL_ERR_CONFIG,
	                  "needs the rendezvous store, but %s started this job of %d processes "
	                  "without one: set ACCEL_MASTER_ADDR and ACCEL_MASTER_PORT (e.g. mpirun "
	                  "-x ACCEL_MASTER_ADDR=host -x ACCEL_MASTER_PORT=29500)%s",
	                  ctx->launcher ? ctx->launcher : "the launcher", ctx->world.world_size,
	                  !on_mpi ? ", or use backend mpi (which starts without a store and then "
	                            "makes one over MPI)"
	                  : mpi_store ? "; the one comm.mpi_store makes over MPI could not be set "
	                                "up (see the warnings at start-up)"
	                              : ", or set comm.mpi_store=true (the job then gets one over "
	                                "MPI)");
}

static int host_store_set(accel_host *h, const char *key, const void *value, uint64_t len)
{
	accel_ctx *ctx = h->ctx;
	int r = no_store(h);
	if (r)
		return r;
	if (ctx->store)
		return accelp_store_set(ctx->store, key, value, len, &ctx->err);
	return accelp_kv_set(ctx->local_store, key, value, len, &ctx->err);
}

static int host_store_get(accel_host *h, const char *key, void *buf, uint64_t cap,
                          uint64_t *ret_len, int64_t timeout_ms)
{
	accel_ctx *ctx = h->ctx;
	int r;
	if (timeout_ms == 0) {
		/* A probe: the status is the answer and nothing is recorded, so a
		 * backend probing while it reports a failure keeps its message. */
		if (!ctx->store && ctx->world.world_size > 1)
			return ACCEL_ERR_UNSUPPORTED;  /* no store in this job */
		accel_err e = {0};
		r = ctx->store ? accelp_store_get(ctx->store, key, buf, cap, ret_len, 0, &e)
		               : accelp_kv_get(ctx->local_store, key, buf, cap, ret_len, &e);
		if (r == ACCEL_ERR_NOT_FOUND || (r == ACCEL_ERR_TIMEOUT && !ctx->store))
			return ACCEL_ERR_NOT_FOUND;
		return r;
	}
	if ((r = no_store(h)))
		return r;
	if (ctx->store)
		return accelp_store_get(ctx->store, key, buf, cap, ret_len, timeout_ms, &ctx->err);
	return accelp_kv_get(ctx->local_store, key, buf, cap, ret_len, &ctx->err);
}

static int host_store_add(accel_host *h, const char *key, int64_t delta, int64_t *ret_value)
{
	accel_ctx *ctx = h->ctx;
	int r = no_store(h);
	if (r)
		return r;
	if (ctx->store)
		return accelp_store_add(ctx->store, key, delta, ret_value, &ctx->err);
	return accelp_kv_add(ctx->local_store, key, delta, ret_value, &ctx->err);
}

static int host_optim_step_n(accel_host *h, const accel_optim_args_v1 *args, uint32_t n,
                             uint32_t n_threads)
{
	int r = need_train(h, "optim_step_n");
	if (r)
		return r;
	return accelp_train_optim_step_n(h->ctx->train, args, n, n_threads);
}

static const accel_host_v1 host_table = {
	.struct_size = sizeof(accel_host_v1),
	.abi_major = ACCEL_ABI_MAJOR,
	.abi_minor = ACCEL_ABI_MINOR,
	.accel_version = ACCEL_VERSION_STRING,
	.log = host_log,
	.error = host_error,
	.world = host_world,
	.cfg_bool = host_cfg_bool,
	.cfg_int = host_cfg_int,
	.cfg_double = host_cfg_double,
	.cfg_string = host_cfg_string,
	.cfg_strlist = host_cfg_strlist,
	.model = host_model,
	.param_bind = host_param_bind,
	.param_init = host_param_init,
	.mem_alloc = host_mem_alloc,
	.mem_free = host_mem_free,
	.op_copy = host_op_copy,
	.op_fill = host_op_fill,
	.op_scale = host_op_scale,
	.op_axpy = host_op_axpy,
	.op_sumsq = host_op_sumsq,
	.op_nonfinite = host_op_nonfinite,
	.optim_state_count = host_optim_state_count,
	.optim_step = host_optim_step,
	.allreduce = host_allreduce,
	.reduce_scatter = host_reduce_scatter,
	.allgather = host_allgather,
	.broadcast = host_broadcast,
	.barrier = host_barrier,
	.wait = host_wait,
	.test = host_test,
	.reduce_bucket = host_reduce_bucket,
	.sync_step = host_sync_step,
	.ckpt_write = host_ckpt_write,
	.ckpt_size = host_ckpt_size,
	.ckpt_read = host_ckpt_read,
	.store_set = host_store_set,
	.store_get = host_store_get,
	.store_add = host_store_add,
	.reduce_bucket_mean = host_reduce_bucket_mean,
	.grad_enabled = host_grad_enabled,
	.param_view = host_param_view,
	.device_info = host_device_info,
	.reduce_bucket_v2 = host_reduce_bucket_v2,
	.reduce_scatter_bucket = host_reduce_scatter_bucket,
	.req_on_done = host_req_on_done,
	/* ABI minor 3: groups (core/host_comm.c) */
	.group_split = accelp_host_group_split,
	.group_info = accelp_host_group_info,
	.group_world_rank = accelp_host_group_world_rank,
	.group_free = accelp_host_group_free,
	.group_allreduce = accelp_host_group_allreduce,
	.group_reduce_scatter = accelp_host_group_reduce_scatter,
	.group_allgather = accelp_host_group_allgather,
	.group_broadcast = accelp_host_group_broadcast,
	.group_barrier = accelp_host_group_barrier,
	/* ABI minor 4: checkpoint tensors (core/ckpt.c) */
	.ckpt_write_tensor = host_ckpt_write_tensor,
	.ckpt_tensor_info = host_ckpt_tensor_info,
	.ckpt_read_tensor = host_ckpt_read_tensor,
	/* ABI minor 4: device streams (core/stream.c) */
	.stream = accelp_host_stream,
	.wait_stream = accelp_host_wait_stream,
	.op_copy_async = accelp_host_op_copy_async,
	.op_sumsq_acc = host_op_sumsq_acc,
	/* ABI minor 6: the optimizer on many threads (core/optim_pool.c) */
	.optim_step_n = host_optim_step_n,
	/* ABI minor 6: host waits on stream work (core/stream.c) */
	.stream_sync = accelp_host_stream_sync,
	.event_record = accelp_host_event_record,
	.event_sync = accelp_host_event_sync,
	.event_query = accelp_host_event_query,
	.event_free = accelp_host_event_free,
};

const accel_host_v1 *accelp_host_table(void)
{
	return &host_table;
}
