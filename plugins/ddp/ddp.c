/* SPDX-License-Identifier: MIT */
/* plugins/ddp/ddp.c: the ddp strategy (data parallel, replicated parameters
 * and optimizer state, bucketed all-reduce overlapped with backward).
 *
 * Memory: per parameter an f32 master (which is also the working copy for
 * f32 parameters; bf16/f16 parameters get a separate working copy the
 * optimizer refreshes after every step) and the optimizer's state arrays;
 * gradients live in the buckets (docs/ddp.md), so the user's
 * accel_param_grad() pointer is a view into bucket memory and the
 * all-reduce runs on it in place. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "ddp.h"

#define MIB (1024.0 * 1024.0)

static const accel_param_schema_v1 ddp_params[] = {
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_DOUBLE,
		.key = "bucket_cap_mb",
		.default_json = "25",
		.min = 1e-6,
		.max = 1048576,
		.help = "Gradient bucket size in MiB (PyTorch DDP's bucket_cap_mb); smaller "
		        "buckets start reducing earlier in backward, larger ones reduce faster.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_DOUBLE,
		.key = "first_bucket_mb",
		.default_json = "1",
		.min = 1e-6,
		.max = 1048576,
		.help = "Size in MiB of the first bucket (the last layers' gradients), kept small "
		        "so the first reduction starts early (PyTorch: 1 MiB).",
	},
};

static const accel_plugin_desc_v1 ddp_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_STRATEGY,
	.name = "ddp",
	.version = "1.0.0",
	.summary = "Data parallel: replicated model, bucketed all-reduce overlapped with backward",
	/* Only what works today: parameters on CUDA devices need the device
	 * module, which ddp has not been run against yet.  Checkpoints: master
	 * weights and optimizer state as tensors, the bytes split evenly over
	 * the ranks, loadable at any world size or strategy (accel_save_state). */
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CHECKPOINT | ACCEL_CAP_SHARED_PARAMS,
	.requires = 0,
	.min_cuda_cc = 0,
	.state_version = 2,     /* 2: tensors (master/, optim/); 1: per-rank blobs */
	.config_section = "ddp",
	.params = ddp_params,
	.n_params = sizeof(ddp_params) / sizeof(ddp_params[0]),
};

static int ddp_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	ddp_state *s;
	double cap_mb = 25, first_mb = 1;
	int r;

	if (host->struct_size < offsetof(accel_host_v1, sync_step) + sizeof(host->sync_step) ||
	    !ACCEL_HOST_HAS(host, ckpt_read_tensor))
		return host->error(h, ACCEL_ERR_ABI, "the host table is older than this plugin");
	s = calloc(1, sizeof(*s));
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	s->host = host;
	s->h = h;
	s->world.struct_size = sizeof(s->world);
	if ((r = host->world(h, &s->world)))
		goto fail;
	r = host->cfg_double(h, "bucket_cap_mb", &cap_mb);
	if (r && r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	r = host->cfg_double(h, "first_bucket_mb", &first_mb);
	if (r && r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if (!(cap_mb > 0) || !(first_mb > 0)) {
		r = host->error(h, ACCEL_ERR_CONFIG, "ddp.bucket_cap_mb (%g) and ddp.first_bucket_mb "
		                "(%g) must be > 0", cap_mb, first_mb);
		goto fail;
	}
	s->cap_bytes = (uint64_t)(cap_mb * MIB);
	s->first_bytes = (uint64_t)(first_mb * MIB);
	if (!s->cap_bytes)
		s->cap_bytes = 1;
	if (!s->first_bytes)
		s->first_bytes = 1;
	s->debug.struct_size = sizeof(s->debug);
	*ret_state = s;
	return ACCEL_OK;

fail:
	free(s);
	return r;
}

static void ddp_fini(void *state)
{
	ddp_state *s = state;
	if (!s)
		return;
	/* Only our own records here: fini must not rely on the model still
	 * being alive. */
	if (s->params) {
		for (uint32_t i = 0; i < s->n_params; i++) {
			ddp_param *p = &s->params[i];
			if (p->work != p->master)
				s->host->mem_free(s->h, p->work);
			s->host->mem_free(s->h, p->master);
			for (uint32_t k = 0; k < DDP_MAX_STATE; k++)
				s->host->mem_free(s->h, p->state[k]);
		}
	}
	if (s->buckets)
		for (uint32_t b = 0; b < s->n_buckets; b++) {
			if (s->buckets[b].req)
				s->host->wait(s->h, s->buckets[b].req);
			s->host->mem_free(s->h, s->buckets[b].data);
			s->host->mem_free(s->h, s->buckets[b].comm);
		}
	free(s->params);
	free(s->buckets);
	free(s->order);
	free(s->entries);
	free(s->unit_first);
	free(s->unit_buckets);
	free(s->unit_done);
	free(s->dbg_first);
	free(s->dbg_numel);
	free(s->dbg_bytes);
	free(s->dbg_dtype);
	free(s->launch_pos);
	free(s);
}

static accel_view view_of(const accel_param_info_v1 *p, uint32_t dtype, void *data, uint64_t n)
{
	return (accel_view){sizeof(accel_view), dtype, p->device, p->device_index, data, n};
}

static int alloc_param(ddp_state *s, uint32_t i)
{
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, i);
	ddp_param *dp = &s->params[i];
	const accel_host_v1 *H = s->host;
	int f32 = p->dtype == ACCEL_DTYPE_F32;
	int r;

	if ((r = H->mem_alloc(s->h, f32 ? ACCEL_MEM_PARAMS : ACCEL_MEM_MASTER, p->device,
	                      p->device_index, p->numel * 4, 0, (void **)&dp->master)))
		return r;
	dp->work = dp->master;
	if (!f32 && (r = H->mem_alloc(s->h, ACCEL_MEM_PARAMS, p->device, p->device_index,
	                              p->numel * 2, 0, &dp->work)))
		return r;
	if (p->requires_grad)
		for (uint32_t k = 0; k < s->n_state; k++)
			if ((r = H->mem_alloc(s->h, ACCEL_MEM_OPTIMIZER, p->device, p->device_index,
			                      p->numel * 4, ACCEL_MEMF_ZERO, (void **)&dp->state[k])))
				return r;
	return ACCEL_OK;
}

/* Working copies follow the masters (after init, step, load). */
static int refresh_work(ddp_state *s, uint32_t i)
{
	const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, i);
	ddp_param *dp = &s->params[i];
	if (dp->work == dp->master)
		return ACCEL_OK;
	accel_view dst = view_of(p, p->dtype, dp->work, p->numel);
	accel_view src = view_of(p, ACCEL_DTYPE_F32, dp->master, p->numel);
	return s->host->op_copy(s->h, &dst, &src);
}

static int ddp_wrap(void *state)
{
	ddp_state *s = state;
	const accel_host_v1 *H = s->host;
	int r;

	if (s->model)
		return H->error(s->h, ACCEL_ERR_STATE, "wrap called twice");
	s->model = H->model(s->h);
	if (!s->model)
		return H->error(s->h, ACCEL_ERR_STATE, "wrap: the host has no model");
	s->n_state = H->optim_state_count(s->h);
	if (s->n_state > DDP_MAX_STATE)
		return H->error(s->h, ACCEL_ERR_UNSUPPORTED, "the optimizer keeps %u state arrays; "
		                "ddp supports up to %d", s->n_state, DDP_MAX_STATE);
	s->params = calloc(s->model->n_params ? s->model->n_params : 1, sizeof(*s->params));
	if (!s->params)
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	s->n_params = s->model->n_params;
	for (uint32_t i = 0; i < s->model->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, i);
		s->params[i].bucket = DDP_NO_BUCKET;
		/* Only a host of minor 3 registers a reduce_dtype, and it has both
		 * members; checked all the same, since ddp relies on them. */
		if (p->requires_grad && ddp_reduce_dtype(p) != ddp_grad_dtype(p) &&
		    (!ACCEL_HOST_HAS(H, reduce_bucket_v2) || !ACCEL_HOST_HAS(H, req_on_done)))
			return H->error(s->h, ACCEL_ERR_UNSUPPORTED, "parameter '%s': reduce_dtype %s "
			                "differs from its gradient dtype %s, which needs host members "
			                "reduce_bucket_v2 and req_on_done (ABI 1.3); this host is ABI "
			                "1.%u", p->name, accel_abi_dtype_name(ddp_reduce_dtype(p)),
			                accel_abi_dtype_name(ddp_grad_dtype(p)), H->abi_minor);
	}

	for (uint32_t i = 0; i < s->model->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, i);
		if ((r = alloc_param(s, i)))
			return r;
		accel_view m = view_of(p, ACCEL_DTYPE_F32, s->params[i].master, p->numel);
		if ((r = H->param_init(s->h, i, 0, &m)))
			return r;
		/* Every rank starts from rank 0's values, whatever the init did. */
		if (s->world.world_size > 1 && (r = H->broadcast(s->h, &m, 0, NULL)))
			return r;
		if ((r = refresh_work(s, i)))
			return r;
	}

	if ((r = ddp_plan_build(s)))
		return r;
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		ddp_bucket *bk = &s->buckets[b];
		uint64_t bytes = bk->numel * accel_abi_dtype_size(bk->dtype);
		if ((r = H->mem_alloc(s->h, ACCEL_MEM_GRADS, bk->device, bk->device_index, bytes,
		                      ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &bk->data)))
			return r;
		/* Gradients that cross ranks in another dtype get a copy in it,
		 * reduced in place; the user's pointers stay in the gradient
		 * bucket, which gets the result cast back. */
		if (bk->reduce_dtype != bk->dtype &&
		    (r = H->mem_alloc(s->h, ACCEL_MEM_BUFFERS, bk->device, bk->device_index,
		                      bk->numel * accel_abi_dtype_size(bk->reduce_dtype),
		                      ACCEL_MEMF_COMM | ACCEL_MEMF_ZERO, &bk->comm)))
			return r;
	}
	/* Alignment padding must read as zero; MEMF_ZERO covers the backend's
	 * memory too, but say so explicitly in case it does not. */
	if ((r = ddp_zero_grads(s)))
		return r;
	for (uint32_t i = 0; i < s->model->n_params; i++) {
		ddp_param *dp = &s->params[i];
		void *grad = NULL;
		if (dp->bucket != DDP_NO_BUCKET) {
			const ddp_bucket *bk = &s->buckets[dp->bucket];
			grad = (char *)bk->data + dp->offset * accel_abi_dtype_size(bk->dtype);
		}
		if ((r = H->param_bind(s->h, i, dp->work, grad)))
			return r;
	}
	ddp_plan_log(s);
	return ddp_plan_check_ranks(s);
}

static int ddp_grad_stats(void *state, double *ret_sumsq, uint64_t *ret_nonfinite)
{
	ddp_state *s = state;
	double total = 0;
	uint64_t bad = 0;
	int r;
	/* After reduce() every rank holds the same averaged gradients, so the
	 * local sums are already the global ones. */
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		const ddp_bucket *bk = &s->buckets[b];
		accel_view v = {sizeof(v), bk->dtype, bk->device, bk->device_index, bk->data,
		                bk->numel};
		double sq = 0;
		uint64_t nf = 0;
		if ((r = s->host->op_sumsq(s->h, &v, &sq)))
			return r;
		/* A finite sum of squares means no Inf/NaN (f32 squares cannot
		 * overflow an f64 sum), so the counting pass runs only when the
		 * sum says something is there. */
		if (!isfinite(sq) && (r = s->host->op_nonfinite(s->h, &v, &nf)))
			return r;
		total += sq;
		bad += nf;
	}
	*ret_sumsq = total;
	*ret_nonfinite = bad;
	return ACCEL_OK;
}

/* grad_stats() without the trip to the host (plugin ABI 1.5): the same
 * per-bucket sums, added on the device in bucket order (the same f64
 * additions, so the same bits as grad_stats' total).  Buckets elsewhere
 * than the core's device: declined, the core then calls grad_stats(). */
static int ddp_grad_stats_device(void *state, int32_t device, int32_t device_index,
                                 double *stats)
{
	ddp_state *s = state;
	int r;
	if (!ACCEL_HOST_HAS(s->host, op_sumsq_acc))
		return ACCEL_ERR_UNSUPPORTED;
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		const ddp_bucket *bk = &s->buckets[b];
		if (bk->device != device || bk->device_index != device_index)
			return ACCEL_ERR_UNSUPPORTED;
	}
	for (uint32_t b = 0; b < s->n_buckets; b++) {
		const ddp_bucket *bk = &s->buckets[b];
		accel_view v = {sizeof(v), bk->dtype, bk->device, bk->device_index, bk->data,
		                bk->numel};
		if ((r = s->host->op_sumsq_acc(s->h, &v, stats)))
			return r;
	}
	return ACCEL_OK;
}

static int ddp_step(void *state, const accel_step_info_v1 *info)
{
	ddp_state *s = state;
	const accel_model_v1 *m = s->model;
	const double *gsd = ACCEL_STRUCT_HAS(info, accel_step_info_v1, grad_scale_dev)
	                    ? info->grad_scale_dev : NULL;
	int r;

	if (!info->skip) {
		for (uint32_t i = 0; i < m->n_params; i++) {
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
			ddp_param *dp = &s->params[i];
			if (dp->bucket == DDP_NO_BUCKET)
				continue;
			const ddp_bucket *bk = &s->buckets[dp->bucket];
			accel_optim_args_v1 a = {
				.struct_size = sizeof(a),
				.param = i,
				.offset = 0,
				.master = view_of(p, ACCEL_DTYPE_F32, dp->master, p->numel),
				.grad = view_of(p, bk->dtype,
				                (char *)bk->data + dp->offset *
				                        accel_abi_dtype_size(bk->dtype),
				                p->numel),
				.grad_scale = info->grad_scale,
				.grad_scale_dev = gsd,
			};
			for (uint32_t k = 0; k < s->n_state; k++)
				a.state[k] = dp->state[k];
			if ((r = s->host->optim_step(s->h, &a)) || (r = refresh_work(s, i)))
				return r;
		}
	}
	/* The program overwrites the gradients on its next micro-step: no pass
	 * zeroing them (also after a skipped step). */
	if (info->struct_size >= offsetof(accel_step_info_v1, flags) + sizeof(info->flags) &&
	    (info->flags & ACCEL_STEP_KEEP_GRADS))
		return ACCEL_OK;
	return ddp_zero_grads(s);
}

/* ---- checkpoint state: master weights and optimizer state as tensors ----
 * Replicas are identical, so the ranks split the save's bytes evenly.  The
 * master and optimizer tensors, in parameter order, form one f32 element
 * space; rank 0 also writes the working weights (model.safetensors, P
 * bytes), so of the total T (those P and the tensors' bytes) it takes the
 * first max(0, T/W - P) bytes of that space and ranks 1..W-1 split the rest
 * evenly: every rank writes about T/W bytes.  A rank writes the part of
 * each tensor that falls in its range (mostly whole tensors, a tensor cut
 * where ranges meet); on load every rank reads every tensor whole, from
 * whichever files hold it (any saving world size or strategy).
 * Names (docs/checkpoints.md): master/<param> (f32) and
 * optim/<state>/<param>: exp_avg, exp_avg_sq (AdamW), momentum_buffer (SGD
 * with momentum).  The step count is global (the manifest's step). */

static const char *state_name(ddp_state *s, uint32_t k, char *buf, size_t cap)
{
	const char *type = "adamw";
	if (s->host->cfg_string(s->h, "/optimizer.type", &type) != ACCEL_OK)
		type = "adamw";
	const char *name = accel_ckpt_optim_state_name(type, s->n_state, k);
	if (name)
		return name;
	snprintf(buf, cap, "state%u", k);
	return buf;
}

/* This rank's elements [*ret_lo, *ret_hi) of the element space of the
 * master and optimizer tensors (see above). */
static void save_range(ddp_state *s, uint64_t *ret_lo, uint64_t *ret_hi)
{
	const accel_model_v1 *m = s->model;
	uint64_t elems = 0, pbytes = 0, W = (uint64_t)s->world.world_size;
	uint64_t r = (uint64_t)s->world.rank;
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		elems += p->numel * (1 + (p->requires_grad ? s->n_state : 0));
		pbytes += p->numel * accel_abi_dtype_size(p->dtype);
	}
	uint64_t share = (elems * 4 + pbytes) / W;   /* bytes per rank */
	uint64_t first = share > pbytes ? (share - pbytes + 3) / 4 : 0;   /* rank 0's elements */
	if (first > elems || W == 1)
		first = elems;
	if (r == 0) {
		*ret_lo = 0;
		*ret_hi = first;
	} else {
		uint64_t rest = elems - first;
		*ret_lo = first + rest * (r - 1) / (W - 1);
		*ret_hi = first + rest * r / (W - 1);
	}
}

/* Save the part of f32 array `dev` (on p's device), tensor `name`, that
 * lies in this rank's range [lo, hi) of the element space, where the
 * tensor starts at element `at`. */
static int save_part(ddp_state *s, const accel_param_info_v1 *p, float *dev, const char *name,
                     uint64_t at, uint64_t rlo, uint64_t rhi, void **stage)
{
	const accel_host_v1 *H = s->host;
	uint64_t n = p->numel;
	uint64_t lo = rlo > at ? rlo - at : 0, hi = rhi > at ? rhi - at : 0;
	if (lo > n)
		lo = n;
	if (hi > n)
		hi = n;
	if (hi <= lo)
		return ACCEL_OK;   /* none of it is ours */
	uint64_t shape[ACCEL_CKPT_MAX_DIMS];
	for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
		shape[d] = (uint64_t)p->shape[d];
	const float *data = dev + lo;
	uint32_t flags = ACCEL_CKPT_BORROW;   /* our arrays: no step during the save */
	if (p->device != ACCEL_DEVICE_CPU) {
		accel_view dv = view_of(p, ACCEL_DTYPE_F32, dev + lo, hi - lo);
		accel_view hv = {sizeof(hv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, *stage, hi - lo};
		int r2 = H->op_copy(s->h, &hv, &dv);
		if (r2)
			return r2;
		data = *stage;
		flags = 0;   /* the staging buffer is reused */
	}
	accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_F32, p->ndim, flags, name, shape, lo,
	                          hi - lo, data};
	return H->ckpt_write_tensor(s->h, s->ckpt_w, &sl);
}

/* Read all of tensor `name` into f32 array `dev` (on p's device). */
static int load_whole(ddp_state *s, const accel_param_info_v1 *p, float *dev, const char *name,
                      void **stage)
{
	const accel_host_v1 *H = s->host;
	float *buf = p->device != ACCEL_DEVICE_CPU ? *stage : dev;
	int r = H->ckpt_read_tensor(s->h, s->ckpt_r, name, ACCEL_DTYPE_F32, 0, p->numel, buf);
	if (r || buf == dev)
		return r;
	accel_view dv = view_of(p, ACCEL_DTYPE_F32, dev, p->numel);
	accel_view hv = {sizeof(hv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, buf, p->numel};
	return H->op_copy(s->h, &dv, &hv);
}

static int save_or_load(ddp_state *s, int save)
{
	const accel_model_v1 *m = s->model;
	char name[600], sb[16];
	void *stage = NULL;
	int r = ACCEL_OK;
	if (!m)
		return s->host->error(s->h, ACCEL_ERR_STATE, "%s before accel_prepare()",
		                      save ? "save_state" : "load_state");
	uint64_t largest = 1;
	for (uint32_t i = 0; i < m->n_params; i++)
		if (ACCEL_MODEL_PARAM(m, i)->device != ACCEL_DEVICE_CPU &&
		    ACCEL_MODEL_PARAM(m, i)->numel > largest)
			largest = ACCEL_MODEL_PARAM(m, i)->numel;
	if (!(stage = malloc(largest * 4)))
		return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory staging checkpoint state");
	uint64_t lo = 0, hi = 0, at = 0;   /* this rank's range; where the tensor starts */
	if (save)
		save_range(s, &lo, &hi);
	for (uint32_t i = 0; !r && i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		ddp_param *dp = &s->params[i];
		if (snprintf(name, sizeof(name), "master/%s", p->name) >= (int)sizeof(name)) {
			r = s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "parameter name too long");
			break;
		}
		r = save ? save_part(s, p, dp->master, name, at, lo, hi, &stage)
		         : load_whole(s, p, dp->master, name, &stage);
		at += p->numel;
		for (uint32_t k = 0; !r && p->requires_grad && k < s->n_state; k++) {
			snprintf(name, sizeof(name), "optim/%s/%s", state_name(s, k, sb, sizeof(sb)),
			         p->name);
			r = save ? save_part(s, p, dp->state[k], name, at, lo, hi, &stage)
			         : load_whole(s, p, dp->state[k], name, &stage);
			at += p->numel;
		}
		if (!r && !save)
			r = refresh_work(s, i);
	}
	free(stage);
	return r;
}

static int ddp_save_state(void *state, accel_ckpt_writer *w)
{
	ddp_state *s = state;
	s->ckpt_w = w;
	int r = save_or_load(s, 1);
	s->ckpt_w = NULL;
	return r;
}

static int ddp_load_state(void *state, accel_ckpt_reader *rd, uint32_t state_version)
{
	ddp_state *s = state;
	/* 0: saved under another strategy; ddp's state is the canonical
	 * tensors alone, so it loads the same way */
	if (state_version != ddp_desc.state_version && state_version != 0)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint holds ddp state "
		                      "version %u; this ddp reads version %u", state_version,
		                      ddp_desc.state_version);
	s->ckpt_r = rd;
	int r = save_or_load(s, 0);
	s->ckpt_r = NULL;
	return r;
}

static const void *ddp_extension(void *state, const char *name, uint32_t version)
{
	ddp_state *s = state;
	if (s && name && !strcmp(name, ACCEL_DDP_DEBUG) && version == 1)
		return &s->debug;
	return NULL;
}

static const accel_plugin_v1 ddp_plugin = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &ddp_desc,
	.init = ddp_init,
	.fini = ddp_fini,
	.wrap = ddp_wrap,
	.reduce = ddp_reduce,
	.grad_stats = ddp_grad_stats,
	.grad_stats_device = ddp_grad_stats_device,
	.step = ddp_step,
	.save_state = ddp_save_state,
	.load_state = ddp_load_state,
	.post_backward = ddp_post_backward,
	.extension = ddp_extension,
	.estimate_memory = ddp_estimate_memory,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "ddp", ckpt_read_tensor))
		return NULL;
	return &ddp_plugin;
}
