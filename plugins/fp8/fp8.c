/* SPDX-License-Identifier: MIT */
/*
 * plugins/fp8/fp8.c: the fp8 recipe plugin (ACCEL_ROLE_FP8_RECIPE, section
 * "fp8"): delayed scaling with Accelerate's FP8RecipeKwargs names and
 * TransformerEngine's defaults, and the "fp8.gemm" extension
 * (accel-fp8.h, fp8_gemm.c).  docs/fp8.md.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8.h"
#include "fp8_codec.h"
#include "fp8_recipe.h"

#define KEY(t, k, def, lo, hi, ch, hp)                                                    \
	{.struct_size = sizeof(accel_param_schema_v1), .type = (t), .key = (k),                \
	 .default_json = (def), .min = (lo), .max = (hi), .choices = (ch), .help = (hp)}

static const accel_param_schema_v1 fp8_params[] = {
	KEY(ACCEL_CFG_INT, "margin", "0", 0, 64, NULL,
	    "Scale = (fp8_max / amax) / 2^margin: headroom in powers of two (TransformerEngine: 0)"),
	KEY(ACCEL_CFG_INT, "interval", "1", 1, 1e9, NULL,
	    "Recompute the scales every this many optimizer steps (the amax history rolls every "
	    "step)"),
	KEY(ACCEL_CFG_ENUM, "fp8_format", "\"HYBRID\"", 1, 0, "HYBRID|E4M3",
	    "HYBRID: E4M3 forward (inputs, weights), E5M2 gradients; E4M3: E4M3 for all three"),
	KEY(ACCEL_CFG_INT, "amax_history_len", "1024", 1, 1048576, NULL,
	    "Steps of amax history each scale is computed from"),
	KEY(ACCEL_CFG_ENUM, "amax_compute_algo", "\"max\"", 1, 0, "max|most_recent",
	    "The amax a scale is computed from: the history's maximum or the latest step's"),
	KEY(ACCEL_CFG_BOOL, "require_hardware", "false", 1, 0, NULL,
	    "Refuse to start without FP8 tensor cores (compute capability >= 8.9 and cuBLASLt) "
	    "instead of emulating the GEMMs"),
};

static const accel_plugin_desc_v1 fp8_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_FP8_RECIPE,
	.name = "fp8",
	.version = "1.0.0",
	.summary = "FP8 delayed scaling and GEMMs: cuBLASLt on cc >= 8.9, CPU emulation elsewhere",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_CHECKPOINT,
	/* decided at run time by available(): loads everywhere */
	.requires = 0,
	.min_cuda_cc = 0,
	.state_version = 1,     /* tensors fp8/amax_history/<param>, fp8/scale/<param> */
	.config_section = "fp8",
	.params = fp8_params,
	.n_params = sizeof(fp8_params) / sizeof(fp8_params[0]),
};

/* ---- the CUDA part ------------------------------------------------------------ */

int fp8_cuda_open(void **ret_dl, const fp8_cuda_api **ret_api, char *why, size_t cap)
{
	Dl_info info;
	char path[4096];
	*ret_dl = NULL;
	*ret_api = NULL;
	if (!dladdr((void *)fp8_cuda_open, &info) || !info.dli_fname) {
		snprintf(why, cap, "cannot tell where fp8.so was loaded from");
		return 0;
	}
	const char *slash = strrchr(info.dli_fname, '/');
	int dirlen = slash ? (int)(slash - info.dli_fname) : 1;
	snprintf(path, sizeof(path), "%.*s/fp8-cuda/fp8-cuda.so", dirlen,
	         slash ? info.dli_fname : ".");
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		snprintf(why, cap, "%s", e ? e : path);
		return 0;
	}
	fp8_cuda_entry_fn entry;
	*(void **)&entry = dlsym(dl, FP8_CUDA_ENTRY);
	const fp8_cuda_api *api = entry ? entry() : NULL;
	if (!api || api->version != FP8_CUDA_API_VERSION) {
		snprintf(why, cap, "%s: not the fp8 CUDA module of this plugin version", path);
		dlclose(dl);
		return 0;
	}
	*ret_dl = dl;
	*ret_api = api;
	return 0;
}

/* cc >= 89 and the CUDA part (cuBLASLt) loads and runs: 1; else 0 with why. */
static int hardware(const accel_host_v1 *host, accel_host *h, accel_device_info_v1 *info,
                    void **ret_dl, const fp8_cuda_api **ret_api, char *why, size_t cap)
{
	info->struct_size = sizeof(*info);
	*ret_dl = NULL;
	*ret_api = NULL;
	if (!ACCEL_HOST_HAS(host, device_info) || host->device_info(h, -1, info)) {
		memset(info, 0, sizeof(*info));
		snprintf(why, cap, "the core reports no CUDA device");
		return 0;
	}
	if (!info->cuda_present || info->device_count <= 0) {
		snprintf(why, cap, "no CUDA device is visible");
		return 0;
	}
	if (info->compute_capability < 89) {
		snprintf(why, cap, "the most capable CUDA device has compute capability %d.%d (FP8 "
		         "tensor cores need 8.9 or newer)", info->compute_capability / 10,
		         info->compute_capability % 10);
		return 0;
	}
	fp8_cuda_open(ret_dl, ret_api, why, cap);
	if (!*ret_api) {
		char tmp[512];
		snprintf(tmp, sizeof(tmp), "%s", why);
		snprintf(why, cap, "the fp8 CUDA module (cuBLASLt) does not load: %s", tmp);
		return 0;
	}
	return 1;
}

static int cfg_require(const accel_host_v1 *host, accel_host *h, int32_t *ret)
{
	int r = host->cfg_bool(h, "require_hardware", ret);
	if (r == ACCEL_ERR_NOT_FOUND) {
		*ret = 0;
		r = ACCEL_OK;
	}
	return r;
}

static int fp8_available(const accel_host_v1 *host, accel_host *h)
{
	accel_device_info_v1 info;
	void *dl;
	const fp8_cuda_api *api;
	char why[768];
	int32_t require = 0;
	int r;
	if ((r = cfg_require(host, h, &require)))
		return r;
	int hw = hardware(host, h, &info, &dl, &api, why, sizeof(why));
	if (hw) {
		dlclose(dl);
		host->log(h, ACCEL_LOG_INFO, "GEMMs on FP8 tensor cores with cuBLASLt "
		          "(compute capability %d.%d)", info.compute_capability / 10,
		          info.compute_capability % 10);
		return ACCEL_OK;
	}
	if (require) {
		int gpu = info.cuda_present && info.device_count > 0;
		return host->error(h, ACCEL_ERR_UNSUPPORTED, "fp8.require_hardware is true, but %s "
		                   "(device: %s, compute capability %d.%d): run on an Ada or Hopper "
		                   "GPU (sm_89/sm_90) or set fp8.require_hardware to false to emulate",
		                   why, gpu ? "the most capable CUDA device" : "none (CPU only)",
		                   info.compute_capability / 10, info.compute_capability % 10);
	}
	host->log(h, ACCEL_LOG_INFO, "emulates the FP8 GEMMs (quantize, dequantize, f32 "
	          "GEMM on the CPU): %s", why);
	return ACCEL_OK;
}

/* ---- init / fini ------------------------------------------------------------- */

static void fp8_fini(void *state);

static int fp8_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	fp8_state *s;
	const char *str;
	int64_t v;
	int r;

	if (!ACCEL_HOST_HAS(host, param_view) || !ACCEL_HOST_HAS(host, ckpt_read_tensor) ||
	    !ACCEL_HOST_HAS(host, stream))
		return host->error(h, ACCEL_ERR_ABI, "fp8: the host table is older than this plugin "
		                   "(needs ABI 1.4: param_view, checkpoint tensors, stream)");
	s = calloc(1, sizeof(*s));
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "fp8: out of memory");
	s->host = host;
	s->h = h;
	s->cuda_device = -1;
	s->world.struct_size = sizeof(s->world);
	if ((r = host->world(h, &s->world)))
		goto fail;
	s->margin = 0;
	s->interval = 1;
	s->hybrid = 1;
	s->hist_len = 1024;
	s->algo = FP8_ALGO_MAX;
	if (!(r = host->cfg_int(h, "margin", &v)))
		s->margin = (int32_t)v;
	else if (r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if (!(r = host->cfg_int(h, "interval", &v)))
		s->interval = v;
	else if (r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if (!(r = host->cfg_int(h, "amax_history_len", &v)))
		s->hist_len = (uint32_t)v;
	else if (r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if (!(r = host->cfg_string(h, "fp8_format", &str)))
		s->hybrid = strcmp(str, "E4M3") != 0;
	else if (r != ACCEL_ERR_NOT_FOUND)
		goto fail;
	if (!(r = host->cfg_string(h, "amax_compute_algo", &str)))
		s->algo = !strcmp(str, "most_recent") ? FP8_ALGO_MOST_RECENT : FP8_ALGO_MAX;
	else if (r != ACCEL_ERR_NOT_FOUND)
		goto fail;

	/* the same decision as available(), kept: the GEMMs choose by it */
	accel_device_info_v1 info;
	char why[768];
	if (hardware(host, h, &info, &s->cuda_dl, &s->cuda, why, sizeof(why)))
		s->cc = info.compute_capability;   /* the device is the parameters' (setup) */
	fp8_gemm_table_init(s);
	*ret_state = s;
	return ACCEL_OK;

fail:
	fp8_fini(s);
	return r;
}

static void free_params(fp8_state *s)
{
	for (uint32_t i = 0; s->p && i < s->n_fp8; i++) {
		fp8_param *p = &s->p[i];
		free(p->history);
		s->host->mem_free(s->h, p->wq);
		s->host->mem_free(s->h, p->wtq);
	}
	if (s->amax_dev)
		s->host->mem_free(s->h, s->amax_dev);
	free(s->amax_host);
	s->amax_dev = NULL;
	s->amax_host = NULL;
	free(s->p);
	free(s->slot);
	free(s->red);
	s->p = NULL;
	s->slot = NULL;
	s->red = NULL;
	s->n_fp8 = 0;
}

static void fp8_fini(void *state)
{
	fp8_state *s = state;
	if (!s)
		return;
	free_params(s);
	if (s->cctx)
		s->cuda->ctx_free(s->cctx);
	if (s->cuda_dl)
		dlclose(s->cuda_dl);
	free(s);
}

/* ---- the parameters ------------------------------------------------------------ */

static int is_fp8(uint32_t dt)
{
	return dt == ACCEL_DTYPE_F8E4M3 || dt == ACCEL_DTYPE_F8E5M2;
}

/* Find the fp8 parameters (compute_dtype f8*) and give each its history,
 * scales and quantized weight buffers.  Runs once, in the first unit hook
 * (or save_state/load_state when they come first). */
int fp8_setup(fp8_state *s)
{
	const accel_host_v1 *host = s->host;
	accel_host *h = s->h;
	const accel_model_v1 *m = host->model(h);
	int r = ACCEL_OK;
	if (s->set_up)
		return ACCEL_OK;
	if (!m)
		return host->error(h, ACCEL_ERR_STATE, "fp8: the model is not prepared yet");
	s->n_model_params = m->n_params;
	s->slot = malloc((m->n_params ? m->n_params : 1) * sizeof(*s->slot));
	if (!s->slot)
		return host->error(h, ACCEL_ERR_NOMEM, "fp8: out of memory");
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *pi = ACCEL_MODEL_PARAM(m, i);
		int f = ACCEL_STRUCT_HAS(pi, accel_param_info_v1, compute_dtype) &&
		        is_fp8(pi->compute_dtype);
		s->slot[i] = f ? (int32_t)n++ : -1;
	}
	s->p = calloc(n ? n : 1, sizeof(*s->p));
	s->red = calloc((size_t)(n ? n : 1) * ACCEL_FP8_OPERANDS, sizeof(float));
	if (!s->p || !s->red) {
		r = host->error(h, ACCEL_ERR_NOMEM, "fp8: out of memory");
		goto fail;
	}
	s->n_fp8 = n;
	if (!n)
		host->log(h, ACCEL_LOG_WARN, "fp8: no parameter has compute_dtype f8e4m3 or f8e5m2, "
		          "so no GEMM runs in fp8 (register the weights of your linear layers with "
		          "accel_param_desc.compute_dtype = ACCEL_DTYPE_F8E4M3)");
	for (uint32_t i = 0; i < m->n_params; i++) {
		if (s->slot[i] < 0)
			continue;
		const accel_param_info_v1 *pi = ACCEL_MODEL_PARAM(m, i);
		fp8_param *p = &s->p[s->slot[i]];
		p->index = i;
		p->unit = pi->unit;
		p->fmt_fwd = pi->compute_dtype;
		p->fmt_bwd = s->hybrid ? ACCEL_DTYPE_F8E5M2 : ACCEL_DTYPE_F8E4M3;
		if (pi->ndim != 2) {
			r = host->error(h, ACCEL_ERR_INVALID_ARG, "fp8: parameter '%s' has compute_dtype "
			                "%s but %u dimensions: fp8 GEMMs take the weight of a linear "
			                "layer, [out, in]", pi->name, accel_abi_dtype_name(pi->compute_dtype),
			                pi->ndim);
			goto fail;
		}
		p->out = (uint64_t)pi->shape[0];
		p->in = (uint64_t)pi->shape[1];
		p->device = pi->device;
		p->device_index = pi->device_index;
		for (int j = 0; j < ACCEL_FP8_OPERANDS; j++)
			p->scale[j] = 1.0f;   /* TE's initial scale */
		p->history = calloc((size_t)s->hist_len * ACCEL_FP8_OPERANDS, sizeof(float));
		if (!p->history) {
			r = host->error(h, ACCEL_ERR_NOMEM, "fp8: out of memory for the amax history "
			                "of '%s' (fp8.amax_history_len %u)", pi->name, s->hist_len);
			goto fail;
		}
		if (p->device == ACCEL_DEVICE_CUDA) {
			if (!s->cuda) {
				r = host->error(h, ACCEL_ERR_UNSUPPORTED, "fp8: parameter '%s' lives on "
				                "cuda:%d, but this process emulates the fp8 GEMMs on the CPU "
				                "(no device of compute capability >= 8.9 with cuBLASLt): keep "
				                "fp8 parameters in host memory, or run on an Ada or Hopper GPU",
				                pi->name, pi->device_index);
				goto fail;
			}
			if (p->out % 16 || p->in % 16) {
				/* the GEMMs run over in (forward) and out (dX) as k */
				r = host->error(h, ACCEL_ERR_INVALID_ARG, "fp8: parameter '%s' is [%llu, "
				                "%llu] on cuda:%d: cuBLASLt's FP8 GEMMs need both dimensions "
				                "multiples of 16; give it compute_dtype 0 (f32 GEMMs) or pad "
				                "the layer", pi->name, (unsigned long long)p->out,
				                (unsigned long long)p->in, pi->device_index);
				goto fail;
			}
			if (!s->cctx) {
				char err[512];
				if (s->cuda->ctx_new(pi->device_index, &s->cctx, err, sizeof(err))) {
					r = host->error(h, ACCEL_ERR_CUDA, "fp8: cuBLASLt on cuda:%d: %s",
					                pi->device_index, err);
					goto fail;
				}
				s->cuda_device = pi->device_index;
			}
			/* one device array for every parameter's amax: post_step reads
			 * it with one copy (each copy to the host waits for the stream) */
			size_t na = (size_t)n * ACCEL_FP8_OPERANDS;
			if (!s->amax_dev &&
			    ((r = host->mem_alloc(h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CUDA, p->device_index,
			                          na * sizeof(float), ACCEL_MEMF_ZERO,
			                          (void **)&s->amax_dev)) ||
			     (!(s->amax_host = calloc(2 * na, sizeof(float))) &&
			      (r = host->error(h, ACCEL_ERR_NOMEM, "fp8: out of memory")))))
				goto fail;
			p->amax_dev = s->amax_dev + (size_t)(p - s->p) * ACCEL_FP8_OPERANDS;
		}
		uint64_t bytes = p->out * p->in;
		if (!bytes)
			bytes = 1;
		if ((r = host->mem_alloc(h, ACCEL_MEM_BUFFERS, p->device, p->device_index, bytes, 0,
		                         (void **)&p->wq)) ||
		    (r = host->mem_alloc(h, ACCEL_MEM_BUFFERS, p->device, p->device_index, bytes, 0,
		                         (void **)&p->wtq)))
			goto fail;
	}
	s->set_up = 1;
	return ACCEL_OK;

fail:
	free_params(s);
	return r;
}

/* ---- unit hooks ------------------------------------------------------------- */

static int fp8_pre_forward(void *state, uint32_t unit)
{
	fp8_state *s = state;
	int r;
	if ((r = fp8_setup(s)))
		return r;
	/* after the strategy's pre_forward: gathered weights are bound now */
	for (uint32_t i = 0; i < s->n_fp8; i++) {
		fp8_param *p = &s->p[i];
		if (p->unit != unit)
			continue;
		accel_view w;
		memset(&w, 0, sizeof(w));
		w.struct_size = sizeof(w);
		if ((r = s->host->param_view(s->h, p->index, &w, NULL)))
			return r;
		if (!w.data)
			return s->host->error(s->h, ACCEL_ERR_STATE, "fp8: the weight of parameter %u is "
			                      "not materialized in its unit's pre_forward", p->index);
		if ((r = fp8_quantize_weight(s, p, &w)))
			return r;
	}
	return ACCEL_OK;
}

static int fp8_pre_backward(void *state, uint32_t unit)
{
	return fp8_setup(state);
}

/* ---- the recipe at the end of a step ------------------------------------------- */

static int fp8_post_step(void *state, const accel_step_info_v1 *info)
{
	fp8_state *s = state;
	const accel_host_v1 *host = s->host;
	int r;
	if ((r = fp8_setup(s)))
		return r;
	if (!s->n_fp8)
		return ACCEL_OK;
	/* this step's amax of every operand, the max over the ranks: every
	 * rank then computes the same scales */
	size_t na = (size_t)s->n_fp8 * ACCEL_FP8_OPERANDS;
	if (s->amax_dev) {
		/* amax_host: [0, na) the copy, [na, 2 na) zeros */
		char err[512];
		if (s->cuda->download(host->stream(s->h), s->amax_host, s->amax_dev,
		                      na * sizeof(float), err, sizeof(err)) ||
		    s->cuda->upload(host->stream(s->h), s->amax_dev, s->amax_host + na,
		                    na * sizeof(float), err, sizeof(err)))
			return host->error(s->h, ACCEL_ERR_CUDA, "fp8: reading the amax of the CUDA "
			                   "parameters: %s", err);
	}
	for (uint32_t i = 0; i < s->n_fp8; i++) {
		fp8_param *p = &s->p[i];
		float *dst = s->red + (size_t)i * ACCEL_FP8_OPERANDS;
		memcpy(dst, p->amax, sizeof(p->amax));
		if (p->amax_dev) {
			const float *dev = s->amax_host + (size_t)i * ACCEL_FP8_OPERANDS;
			for (int j = 0; j < ACCEL_FP8_OPERANDS; j++)
				if (dev[j] > dst[j] || isnan(dev[j]))
					dst[j] = dev[j];
		}
	}
	if (s->world.world_size > 1) {
		accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_F32,
		                .device = ACCEL_DEVICE_CPU, .data = s->red,
		                .numel = (uint64_t)s->n_fp8 * ACCEL_FP8_OPERANDS};
		if ((r = host->allreduce(s->h, &v, &v, ACCEL_RED_MAX, NULL)))
			return r;
	}
	/* info->step: optimizer steps before this one; the scale is
	 * recomputed on every interval-th step */
	int update = ((info->step + 1) % (uint64_t)s->interval) == 0;
	for (uint32_t i = 0; i < s->n_fp8; i++) {
		fp8_param *p = &s->p[i];
		float fmax[ACCEL_FP8_OPERANDS] = {fp8_max(p->fmt_fwd), fp8_max(p->fmt_fwd),
		                                  fp8_max(p->fmt_bwd)};
		memcpy(p->history, s->red + (size_t)i * ACCEL_FP8_OPERANDS, sizeof(p->amax));
		fp8_recipe_update(p->history, s->hist_len, ACCEL_FP8_OPERANDS, s->algo, fmax,
		                  s->margin, update, p->scale, NULL);
		memset(p->amax, 0, sizeof(p->amax));
		p->ready = 0;
	}
	return ACCEL_OK;
}

/* ---- checkpoints: tensors written by rank 0, read by every rank ---------------- */

/* Read fp8/amax_history/<p> (scale 0) or fp8/scale/<p> (scale 1), count
 * f32, into data once every value is one the recipe can start from: an
 * amax is finite and >= 0, a scale finite and > 0.  A NaN scale would
 * stay NaN (the recipe keeps the old scale when an amax is not usable)
 * and every fp8 GEMM after it would compute NaN. */
static int read_checked(fp8_state *s, accel_ckpt_reader *rd, const char *name, int scale,
                        uint64_t count, float *data)
{
	const accel_host_v1 *host = s->host;
	float *tmp = malloc((size_t)count * sizeof(float));
	int r;
	if (!tmp)
		return host->error(s->h, ACCEL_ERR_NOMEM, "out of memory reading %s", name);
	if ((r = host->ckpt_read_tensor(s->h, rd, name, ACCEL_DTYPE_F32, 0, count, tmp))) {
		free(tmp);
		return r;
	}
	for (uint64_t i = 0; i < count; i++) {
		float v = tmp[i];
		if (isfinite(v) && (scale ? v > 0 : v >= 0))
			continue;
		r = host->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s holds %g at "
		                "element %llu; %s (the checkpoint is damaged: resume from an "
		                "earlier one)", name,
		                (double)v, (unsigned long long)i,
		                scale ? "a scale is finite and > 0" : "an amax is finite and >= 0");
		free(tmp);
		return r;
	}
	memcpy(data, tmp, (size_t)count * sizeof(float));
	free(tmp);
	return ACCEL_OK;
}

static int save_or_load(fp8_state *s, accel_ckpt_writer *w, accel_ckpt_reader *rd)
{
	const accel_host_v1 *host = s->host;
	const accel_model_v1 *m = host->model(s->h);
	char name[600];
	int r;
	for (uint32_t i = 0; i < s->n_fp8; i++) {
		fp8_param *p = &s->p[i];
		const char *pname = ACCEL_MODEL_PARAM(m, p->index)->name;
		for (int t = 0; t < 2; t++) {
			uint64_t shape[2] = {t ? ACCEL_FP8_OPERANDS : s->hist_len, ACCEL_FP8_OPERANDS};
			uint32_t ndim = t ? 1 : 2;
			uint64_t count = t ? ACCEL_FP8_OPERANDS : (uint64_t)s->hist_len * ACCEL_FP8_OPERANDS;
			void *data = t ? (void *)p->scale : (void *)p->history;
			snprintf(name, sizeof(name), "fp8/%s/%s", t ? "scale" : "amax_history", pname);
			if (w) {
				if (s->world.rank != 0)
					continue;
				accel_ckpt_slice_v1 sl = {.struct_size = sizeof(sl), .dtype = ACCEL_DTYPE_F32,
				                          .ndim = ndim, .name = name, .shape = shape,
				                          .offset = 0, .count = count, .data = data};
				if ((r = host->ckpt_write_tensor(s->h, w, &sl)))
					return r;
				continue;
			}
			accel_ckpt_tensor_info_v1 ti = {.struct_size = sizeof(ti)};
			if ((r = host->ckpt_tensor_info(s->h, rd, name, &ti)) == ACCEL_ERR_NOT_FOUND)
				return host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint has no "
				                   "tensor %s: it was saved without parameter '%s' in fp8 "
				                   "(compute_dtype f8e4m3/f8e5m2)", name, pname);
			if (r)
				return r;
			if (ti.dtype != ACCEL_DTYPE_F32 || ti.ndim != ndim ||
			    ti.shape[0] != shape[0] || (ndim == 2 && ti.shape[1] != shape[1])) {
				char got[96] = "", want[48];
				for (uint32_t d = 0; d < ti.ndim && d < ACCEL_CKPT_MAX_DIMS; d++) {
					size_t at = strlen(got);
					snprintf(got + at, sizeof(got) - at, "%s%llu", d ? ", " : "",
					         (unsigned long long)ti.shape[d]);
				}
				if (ndim == 2)
					snprintf(want, sizeof(want), "%llu, %d", (unsigned long long)shape[0],
					         ACCEL_FP8_OPERANDS);
				else
					snprintf(want, sizeof(want), "%d", ACCEL_FP8_OPERANDS);
				return host->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s is %s "
				                   "[%s]; this run expects f32 [%s]%s", name,
				                   accel_abi_dtype_name(ti.dtype), got, want,
				                   !t && ti.dtype == ACCEL_DTYPE_F32 && ti.ndim == 2 &&
				                   ti.shape[1] == ACCEL_FP8_OPERANDS
				                   ? ": set fp8.amax_history_len to the saving run's value"
				                   : " (the checkpoint is damaged)");
			}
			if ((r = read_checked(s, rd, name, t, count, data)))
				return r;
		}
	}
	return ACCEL_OK;
}

static int fp8_save_state(void *state, accel_ckpt_writer *w)
{
	fp8_state *s = state;
	int r;
	if ((r = fp8_setup(s)))
		return r;
	return save_or_load(s, w, NULL);
}

static int fp8_load_state(void *state, accel_ckpt_reader *rd, uint32_t state_version)
{
	fp8_state *s = state;
	int r;
	if (state_version == 0) {   /* switched on at this resume: start fresh */
		s->host->log(s->h, ACCEL_LOG_INFO, "fp8: the checkpoint holds no fp8 state (saved "
		             "without fp8): amax histories and scales start as in a new run");
		return ACCEL_OK;
	}
	if (state_version != fp8_desc.state_version)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "fp8: checkpoint state version %u, "
		                      "this plugin reads %u", state_version, fp8_desc.state_version);
	if ((r = fp8_setup(s)))
		return r;
	return save_or_load(s, NULL, rd);
}

static const void *fp8_extension(void *state, const char *name, uint32_t version)
{
	fp8_state *s = state;
	if (name && !strcmp(name, ACCEL_FP8_GEMM_NAME) && version == ACCEL_FP8_GEMM_VERSION)
		return &s->table;
	return NULL;
}

static const accel_plugin_v1 fp8_plugin = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &fp8_desc,
	.init = fp8_init,
	.fini = fp8_fini,
	.pre_forward = fp8_pre_forward,
	.pre_backward = fp8_pre_backward,
	.post_step = fp8_post_step,
	.save_state = fp8_save_state,
	.load_state = fp8_load_state,
	.extension = fp8_extension,
	.available = fp8_available,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	if (!ACCEL_HOST_REQUIRE(host, "fp8", stream))
		return NULL;
	return &fp8_plugin;
}
