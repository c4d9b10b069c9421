/* SPDX-License-Identifier: MIT */
/*
 * localsgd.c: Local SGD, a complete accel strategy plugin in one file, built
 * out of tree against the installed headers only:
 *
 *     cc $(pkg-config --cflags accel) -std=c11 -shared -fPIC \
 *        -fvisibility=hidden -Wl,--no-undefined -o localsgd.so localsgd.c
 *
 * Every rank keeps a full replica of the model and steps on its OWN
 * gradients: no gradient is communicated.  After every `sync_every`
 * optimizer steps the ranks average their parameters (one all-reduce per
 * device and dtype), and, with `average_optimizer_state`, their optimizer
 * state.  The first `warmup_steps` steps all-reduce gradients instead, like
 * ddp ("post-local SGD").  With plain or momentum SGD and sync_every 1 the
 * result equals ddp's, because averaging after a linear update equals the
 * update with averaged gradients.
 *
 * Select it with  "strategy": "localsgd"  and configure it in the
 * "localsgd" object of the config.  docs/writing-a-plugin.md walks through
 * this file; copy it as the start of your own strategy.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <accel/plugin.h>

/* Parameter i of the model at the stride the core laid it out with (ABI
 * 1.3 appended members to accel_param_info_v1).  Headers older than 1.3
 * lack the macro; there params[i] is right. */
#ifndef ACCEL_MODEL_PARAM
#define ACCEL_MODEL_PARAM(m, i) (&(m)->params[i])
#endif

/* What save_state writes (see "checkpoints" below): 2 with checkpoint
 * tensors (ABI 1.4 headers), 1 (blobs only) with older headers. */
#ifdef ACCEL_CKPT_MAX_DIMS
#define LSGD_STATE_VERSION 2
#else
#define LSGD_STATE_VERSION 1
#endif
#define LSGD_MAX_STATE 4   /* optimizer state arrays we can hold per element */
#define LSGD_ALIGN 16      /* every parameter starts at a multiple of 16 elements */

/* Where one parameter lives.  All pointers point into its group's buffers. */
typedef struct lsgd_param {
	uint32_t group;
	uint64_t offset;              /* first element in the group's trainable or frozen region */
	float *master;                /* f32 values the optimizer updates           */
	void *work;                   /* working-dtype values (== master for f32)   */
	void *grad;                   /* working-dtype gradient; NULL when frozen   */
	float *state[LSGD_MAX_STATE]; /* optimizer state, n_state arrays            */
} lsgd_param;

/* Parameters that share a working dtype and a device share flat buffers, so
 * a synchronization is one all-reduce per group (usually there is one). */
typedef struct lsgd_group {
	uint32_t dtype;
	int32_t device, device_index;
	uint64_t n_train;    /* elements of the trainable parameters, padded   */
	uint64_t n_frozen;   /* elements of the frozen parameters, padded      */
	float *master;       /* n_train + n_frozen f32: trainable ones first    */
	float *state;        /* n_state * n_train f32: state k at k * n_train   */
	void *grad;          /* n_train elements of dtype                       */
	void *work;          /* n_train + n_frozen elements of dtype; NULL for f32 */
} lsgd_group;

/* Everything one context's instance needs.  A plugin keeps no globals:
 * two contexts in one process get two of these. */
typedef struct lsgd {
	const accel_host_v1 *host;   /* the host table, valid until fini */
	accel_host *h;               /* our handle: first argument of every host call */
	accel_world_v1 world;
	int64_t sync_every;
	int64_t warmup_steps;
	int32_t average_state;
	int32_t global_stats;

	const accel_model_v1 *model; /* borrowed from wrap() until fini */
	uint32_t n_state;            /* host->optim_state_count()       */
	lsgd_param *params;
	uint32_t n_params;
	lsgd_group *groups;
	uint32_t n_groups;
	accel_req **reqs;            /* 2 per group: outstanding collectives */
	double *stats;               /* 2 doubles for global_grad_stats      */

	/* step() calls so far, applied or skipped.  This is the clock of the
	 * synchronizations: it advances identically on every rank even when one
	 * rank skips a step another applies, so every rank issues the same
	 * collectives in the same order. */
	uint64_t steps;
	uint64_t syncs;
	/* loaded from another strategy's checkpoint or at another world size:
	 * the next step() sets the clock from the optimizer's step count */
	int clock_from_step;
} lsgd;

/* The keys this plugin reads, inside its config section "localsgd".  The
 * core validates the user's values against this table before init(),
 * fills in the defaults, rejects unknown keys, and prints the table in
 * `accel plugins info localsgd`. */
static const accel_param_schema_v1 lsgd_params[] = {
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_INT,
		.key = "sync_every",
		.default_json = "4",
		.min = 1, .max = 1000000,
		.help = "Average the parameters over all ranks after every this many optimizer "
		        "steps (torch's PeriodicModelAverager period); 1 averages after every step.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_INT,
		.key = "warmup_steps",
		.default_json = "0",
		.min = 0, .max = 1000000000,
		.help = "Optimizer steps at the start that all-reduce gradients like ddp "
		        "(post-local SGD); local steps begin after them.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_BOOL,
		.key = "average_optimizer_state",
		.default_json = "false",
		.min = 0, .max = -1,            /* no range */
		.help = "Also average the optimizer state (momentum, Adam moments) at each "
		        "synchronization; by default each rank keeps its own.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_BOOL,
		.key = "global_grad_stats",
		.default_json = "false",
		.min = 0, .max = -1,
		.help = "All-reduce the gradient norm and non-finite count every step, so all ranks "
		        "clip alike and skip overflow steps together; by default each rank uses its own.",
	},
};

static const accel_plugin_desc_v1 lsgd_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_STRATEGY,
	.name = "localsgd",
	.version = "1.0.0",
	.summary = "Local SGD: each rank steps on its own gradients, parameters averaged every N steps",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CUDA | ACCEL_CAP_CHECKPOINT,
	.requires = 0,
	.min_cuda_cc = 0,
	.state_version = LSGD_STATE_VERSION, /* layout of what save_state writes (below) */
	.config_section = "localsgd",
	.params = lsgd_params,
	.n_params = sizeof(lsgd_params) / sizeof(lsgd_params[0]),
};

static accel_view view(const lsgd_group *g, uint32_t dtype, void *data, uint64_t numel)
{
	return (accel_view){sizeof(accel_view), dtype, g->device, g->device_index, data, numel};
}

/* ---- init, validate, fini ------------------------------------------------ */

static int lsgd_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	lsgd *s = calloc(1, sizeof(*s));
	int r;
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	s->host = host;
	s->h = h;
	s->world.struct_size = sizeof(s->world);
	if ((r = host->world(h, &s->world)))
		goto fail;
	/* Keys are relative to our section, typed and range-checked by the core.
	 * Every key has a default, so these fail only on a bug; say which. */
	if ((r = host->cfg_int(h, "sync_every", &s->sync_every)) ||
	    (r = host->cfg_int(h, "warmup_steps", &s->warmup_steps)) ||
	    (r = host->cfg_bool(h, "average_optimizer_state", &s->average_state)) ||
	    (r = host->cfg_bool(h, "global_grad_stats", &s->global_stats))) {
		host->error(h, r, "cannot read the localsgd config section");
		goto fail;
	}
	if (s->sync_every < 1) {
		r = host->error(h, ACCEL_ERR_CONFIG, "localsgd.sync_every is %lld; it must be >= 1",
		                (long long)s->sync_every);
		goto fail;
	}
	*ret_state = s;
	return ACCEL_OK;
fail:
	free(s);
	return r;
}

/* Refuse combinations that cannot mean what the user wants, naming both. */
static int lsgd_validate(void *state, const accel_selection_v1 *sel)
{
	lsgd *s = state;
	for (uint32_t i = 1; i < sel->n_plugins; i++) {
		if (sel->roles[i] == ACCEL_ROLE_REDUCE_HOOK && s->warmup_steps == 0)
			return s->host->error(s->h, ACCEL_ERR_CONFIG,
			                      "reduce hook '%s' replaces gradient all-reduces, and with "
			                      "localsgd.warmup_steps = 0 Local SGD all-reduces no gradients; "
			                      "drop '%s' from \"plugins\" or set localsgd.warmup_steps",
			                      sel->names[i], sel->names[i]);
		if (sel->roles[i] == ACCEL_ROLE_PRECISION && !s->global_stats && sel->world_size > 1)
			s->host->log(s->h, ACCEL_LOG_INFO,
			             "with '%s' and local gradient statistics each rank skips overflow "
			             "steps on its own; set localsgd.global_grad_stats=true to skip "
			             "them together", sel->names[i]);
	}
	return ACCEL_OK;
}

/* Frees our own records only: fini must not rely on the model being alive,
 * and runs after a failed wrap() too, so every pointer may be NULL. */
static void lsgd_fini(void *state)
{
	lsgd *s = state;
	if (!s)
		return;
	for (uint32_t i = 0; s->reqs && i < 2 * s->n_groups; i++)
		if (s->reqs[i])
			s->host->wait(s->h, s->reqs[i]);
	for (uint32_t g = 0; s->groups && g < s->n_groups; g++) {
		s->host->mem_free(s->h, s->groups[g].master);
		s->host->mem_free(s->h, s->groups[g].state);
		s->host->mem_free(s->h, s->groups[g].grad);
		s->host->mem_free(s->h, s->groups[g].work);
	}
	s->host->mem_free(s->h, s->stats);
	s->host->log(s->h, ACCEL_LOG_DEBUG, "%llu steps, %llu synchronizations",
	             (unsigned long long)s->steps, (unsigned long long)s->syncs);
	free(s->reqs);
	free(s->groups);
	free(s->params);
	free(s);
}

/* ---- wrap: storage layout -------------------------------------------------- */

/* Assign every parameter to a group and an offset inside it. */
static int plan(lsgd *s)
{
	const accel_model_v1 *m = s->model;
	for (uint32_t i = 0; i < m->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
		uint32_t g;
		if (p->dtype != ACCEL_DTYPE_F32 && p->dtype != ACCEL_DTYPE_BF16 &&
		    p->dtype != ACCEL_DTYPE_F16)
			return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED,
			                      "parameter '%s' has dtype %u; localsgd supports f32, bf16 "
			                      "and f16 parameters", p->name, p->dtype);
		for (g = 0; g < s->n_groups; g++)
			if (s->groups[g].dtype == p->dtype && s->groups[g].device == p->device &&
			    s->groups[g].device_index == p->device_index)
				break;
		if (g == s->n_groups) {
			lsgd_group *grown = realloc(s->groups, (g + 1) * sizeof(*grown));
			if (!grown)
				return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
			s->groups = grown;
			s->groups[g] = (lsgd_group){.dtype = p->dtype, .device = p->device,
			                            .device_index = p->device_index};
			s->n_groups++;
		}
		lsgd_group *gr = &s->groups[g];
		uint64_t *end = p->requires_grad ? &gr->n_train : &gr->n_frozen;
		s->params[i].group = g;
		s->params[i].offset = *end;
		*end += (p->numel + LSGD_ALIGN - 1) / LSGD_ALIGN * LSGD_ALIGN;
	}
	s->reqs = calloc(2 * (size_t)s->n_groups + 1, sizeof(*s->reqs));
	if (!s->reqs)
		return s->host->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	return ACCEL_OK;
}

/* Buffers of one group.  Memory the collectives run on comes from the comm
 * backend (ACCEL_MEMF_COMM) so they need no staging copy.  Zero-filled: the
 * padding between parameters must read as zero in sums and averages. */
static int alloc_group(lsgd *s, lsgd_group *g)
{
	const accel_host_v1 *H = s->host;
	uint32_t f32 = g->dtype == ACCEL_DTYPE_F32;
	uint64_t n = g->n_train + g->n_frozen;
	uint32_t zero = ACCEL_MEMF_ZERO, comm = ACCEL_MEMF_ZERO | ACCEL_MEMF_COMM;
	int r;
	if ((r = H->mem_alloc(s->h, f32 ? ACCEL_MEM_PARAMS : ACCEL_MEM_MASTER, g->device,
	                      g->device_index, n * 4, comm, (void **)&g->master)))
		return r;
	if (s->n_state && g->n_train &&
	    (r = H->mem_alloc(s->h, ACCEL_MEM_OPTIMIZER, g->device, g->device_index,
	                      s->n_state * g->n_train * 4, s->average_state ? comm : zero,
	                      (void **)&g->state)))
		return r;
	if (g->n_train &&
	    (r = H->mem_alloc(s->h, ACCEL_MEM_GRADS, g->device, g->device_index,
	                      g->n_train * accel_abi_dtype_size(g->dtype),
	                      s->warmup_steps ? comm : zero, &g->grad)))
		return r;
	if (!f32 && (r = H->mem_alloc(s->h, ACCEL_MEM_PARAMS, g->device, g->device_index,
	                              n * accel_abi_dtype_size(g->dtype), zero, &g->work)))
		return r;
	return ACCEL_OK;
}

/* Working copies follow the masters: elements [first, first + n) of a group. */
static int refresh_work(lsgd *s, const lsgd_group *g, uint64_t first, uint64_t n)
{
	if (!g->work || !n)
		return ACCEL_OK;
	uint64_t es = accel_abi_dtype_size(g->dtype);
	accel_view dst = view(g, g->dtype, (char *)g->work + first * es, n);
	accel_view src = view(g, ACCEL_DTYPE_F32, g->master + first, n);
	return s->host->op_copy(s->h, &dst, &src);
}

static int lsgd_wrap(void *state)
{
	lsgd *s = state;
	const accel_host_v1 *H = s->host;
	uint64_t elems = 0;
	int r;

	if (s->model)
		return H->error(s->h, ACCEL_ERR_STATE, "wrap called twice");
	s->model = H->model(s->h);
	if (!s->model)
		return H->error(s->h, ACCEL_ERR_STATE, "wrap: the host has no model");
	s->n_state = H->optim_state_count(s->h);
	if (s->n_state > LSGD_MAX_STATE)
		return H->error(s->h, ACCEL_ERR_UNSUPPORTED, "the optimizer keeps %u state arrays "
		                "per element; localsgd holds at most %d", s->n_state, LSGD_MAX_STATE);
	s->n_params = s->model->n_params;
	s->params = calloc(s->n_params ? s->n_params : 1, sizeof(*s->params));
	if (!s->params)
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory");
	if ((r = plan(s)))
		return r;
	for (uint32_t g = 0; g < s->n_groups; g++)
		if ((r = alloc_group(s, &s->groups[g])))
			return r;

	/* Point every parameter into its group; fill the masters with the
	 * user's initial values. */
	for (uint32_t i = 0; i < s->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, i);
		lsgd_param *lp = &s->params[i];
		lsgd_group *g = &s->groups[lp->group];
		uint64_t at = p->requires_grad ? lp->offset : g->n_train + lp->offset;
		lp->master = g->master + at;
		uint64_t es = accel_abi_dtype_size(g->dtype);
		lp->work = g->work ? (char *)g->work + at * es : (void *)lp->master;
		if (p->requires_grad) {
			lp->grad = (char *)g->grad + lp->offset * es;
			for (uint32_t k = 0; k < s->n_state; k++)
				lp->state[k] = g->state + k * g->n_train + lp->offset;
		}
		accel_view mv = view(g, ACCEL_DTYPE_F32, lp->master, p->numel);
		if ((r = H->param_init(s->h, i, 0, &mv)))
			return r;
		elems += p->numel;
	}
	/* Every rank starts from rank 0's values, whatever the init did: one
	 * broadcast per group rather than one per parameter. */
	for (uint32_t g = 0; g < s->n_groups; g++) {
		lsgd_group *gr = &s->groups[g];
		accel_view mv = view(gr, ACCEL_DTYPE_F32, gr->master, gr->n_train + gr->n_frozen);
		if (s->world.world_size > 1 && (r = H->broadcast(s->h, &mv, 0, NULL)))
			return r;
		if ((r = refresh_work(s, gr, 0, gr->n_train + gr->n_frozen)))
			return r;
	}
	/* Tell the core where the user's values and gradients are. */
	for (uint32_t i = 0; i < s->n_params; i++)
		if ((r = H->param_bind(s->h, i, s->params[i].work, s->params[i].grad)))
			return r;
	if (s->global_stats && s->world.world_size > 1 && s->n_groups &&
	    (r = H->mem_alloc(s->h, ACCEL_MEM_BUFFERS, s->groups[0].device,
	                      s->groups[0].device_index, 2 * sizeof(double),
	                      ACCEL_MEMF_ZERO | ACCEL_MEMF_COMM, (void **)&s->stats)))
		return r;

	uint64_t sync_bytes = 0;
	for (uint32_t g = 0; g < s->n_groups; g++)
		sync_bytes += s->groups[g].n_train * 4 * (1 + (s->average_state ? s->n_state : 0));
	H->log(s->h, ACCEL_LOG_INFO, "Local SGD on %d ranks: %u parameters (%llu elements) in %u "
	       "group(s); averaging %s every %lld steps after %lld warm-up steps, %.3g MiB per "
	       "synchronization", (int)s->world.world_size, s->n_params,
	       (unsigned long long)elems, s->n_groups,
	       s->average_state ? "parameters and optimizer state" : "parameters",
	       (long long)s->sync_every, (long long)s->warmup_steps,
	       (double)sync_bytes / (1024.0 * 1024.0));
	return ACCEL_OK;
}

/* ---- one optimizer step ------------------------------------------------------ */

static int in_warmup(const lsgd *s)
{
	return s->steps < (uint64_t)s->warmup_steps;
}

/* Wait for the requests issued into s->reqs; the first failure wins but
 * every request is released. */
static int wait_all(lsgd *s)
{
	int r = ACCEL_OK;
	for (uint32_t i = 0; i < 2 * s->n_groups; i++)
		if (s->reqs[i]) {
			int w = s->host->wait(s->h, s->reqs[i]);
			s->reqs[i] = NULL;
			if (!r)
				r = w;
		}
	return r;
}

/* Outside the warm-up there is nothing to communicate: each rank steps on
 * its own gradients.  In the warm-up, all-reduce them as ddp does, through
 * the reduce-hook point so a compression plugin applies. */
static int lsgd_reduce(void *state)
{
	lsgd *s = state;
	int r = ACCEL_OK;
	if (!s->model)
		return s->host->error(s->h, ACCEL_ERR_STATE, "reduce before accel_prepare()");
	if (!in_warmup(s) || s->world.world_size < 2)
		return ACCEL_OK;
	for (uint32_t g = 0; g < s->n_groups && !r; g++) {
		lsgd_group *gr = &s->groups[g];
		accel_view v = view(gr, gr->dtype, gr->grad, gr->n_train);
		if (!gr->n_train)
			continue;
		/* reduce_bucket sums: pre-divide so the result is the mean. */
		if (!(r = s->host->op_scale(s->h, &v, 1.0 / s->world.world_size)))
			r = s->host->reduce_bucket(s->h, &v, g, &s->reqs[g]);
	}
	int w = wait_all(s);
	return r ? r : w;
}

/* The core turns these into the gradient norm (for clipping and the report)
 * and the overflow check.  Under Local SGD the gradients differ per rank, so
 * by default they are this rank's own statistics, and each rank clips on
 * its own norm, as torch's post-local SGD does with clip_grad_norm_ on
 * local gradients.  With global_grad_stats the ranks agree on one norm, the
 * root mean square of their local norms, and on the non-finite count. */
static int lsgd_grad_stats(void *state, double *ret_sumsq, uint64_t *ret_nonfinite)
{
	lsgd *s = state;
	const accel_host_v1 *H = s->host;
	double sumsq = 0;
	uint64_t nonfinite = 0;
	int r;
	for (uint32_t g = 0; g < s->n_groups; g++) {
		lsgd_group *gr = &s->groups[g];
		accel_view v = view(gr, gr->dtype, gr->grad, gr->n_train);
		double sq = 0;
		uint64_t nf = 0;
		if (!gr->n_train)
			continue;
		if ((r = H->op_sumsq(s->h, &v, &sq)) || (r = H->op_nonfinite(s->h, &v, &nf)))
			return r;
		sumsq += sq;
		nonfinite += nf;
	}
	H->log(s->h, ACCEL_LOG_TRACE, "step %llu: local gradient sum of squares %.17g, %llu "
	       "non-finite", (unsigned long long)s->steps + 1, sumsq, (unsigned long long)nonfinite);
	/* In the warm-up the gradients are already the same on every rank. */
	if (s->stats && !in_warmup(s)) {
		double local[2] = {sumsq, (double)nonfinite};
		const lsgd_group *g0 = &s->groups[0];
		accel_view dev = view(g0, ACCEL_DTYPE_F64, s->stats, 2);
		accel_view host = {sizeof(host), ACCEL_DTYPE_F64, ACCEL_DEVICE_CPU, 0, local, 2};
		int on_cpu = g0->device == ACCEL_DEVICE_CPU;
		if (on_cpu)
			memcpy(s->stats, local, sizeof(local));
		if ((!on_cpu && (r = H->op_copy(s->h, &dev, &host))) ||
		    (r = H->allreduce(s->h, &dev, &dev, ACCEL_RED_SUM, NULL)) ||
		    (!on_cpu && (r = H->op_copy(s->h, &host, &dev))))
			return r;
		if (on_cpu)
			memcpy(local, s->stats, sizeof(local));
		sumsq = local[0] / s->world.world_size;
		nonfinite = (uint64_t)local[1];
	}
	*ret_sumsq = sumsq;
	*ret_nonfinite = nonfinite;
	return ACCEL_OK;
}

/* Average the parameters (and optimizer state) over all ranks: one
 * all-reduce per group and buffer, all issued before any is waited for. */
static int average(lsgd *s)
{
	const accel_host_v1 *H = s->host;
	int r = ACCEL_OK;
	for (uint32_t g = 0; g < s->n_groups && !r; g++) {
		lsgd_group *gr = &s->groups[g];
		accel_view mv = view(gr, ACCEL_DTYPE_F32, gr->master, gr->n_train);
		accel_view sv = view(gr, ACCEL_DTYPE_F32, gr->state, s->n_state * gr->n_train);
		if (!gr->n_train)
			continue;
		r = H->allreduce(s->h, &mv, &mv, ACCEL_RED_AVG, &s->reqs[2 * g]);
		if (!r && s->average_state && s->n_state)
			r = H->allreduce(s->h, &sv, &sv, ACCEL_RED_AVG, &s->reqs[2 * g + 1]);
	}
	int w = wait_all(s);
	if (r || (r = w))
		return r;
	for (uint32_t g = 0; g < s->n_groups; g++)
		if ((r = refresh_work(s, &s->groups[g], 0, s->groups[g].n_train)))
			return r;
	s->syncs++;
	H->log(s->h, ACCEL_LOG_DEBUG, "step %llu: averaged %s over %d ranks (synchronization %llu)",
	       (unsigned long long)s->steps,
	       s->average_state && s->n_state ? "parameters and optimizer state" : "parameters",
	       (int)s->world.world_size, (unsigned long long)s->syncs);
	return ACCEL_OK;
}

static int zero_grads(lsgd *s)
{
	int r;
	for (uint32_t g = 0; g < s->n_groups; g++) {
		lsgd_group *gr = &s->groups[g];
		accel_view v = view(gr, gr->dtype, gr->grad, gr->n_train);
		if (gr->n_train && (r = s->host->op_fill(s->h, &v, 0.0)))
			return r;
	}
	return ACCEL_OK;
}

static int lsgd_step(void *state, const accel_step_info_v1 *info)
{
	lsgd *s = state;
	const accel_model_v1 *m = s->model;
	int r;

	if (s->clock_from_step) {
		s->steps = info->step;
		s->clock_from_step = 0;
	}
	if (!info->skip) {
		for (uint32_t i = 0; i < m->n_params; i++) {
			const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(m, i);
			lsgd_param *lp = &s->params[i];
			lsgd_group *g = &s->groups[lp->group];
			if (!p->requires_grad)
				continue;
			accel_optim_args_v1 a = {
				.struct_size = sizeof(a),
				.param = i,
				.offset = 0,
				.master = view(g, ACCEL_DTYPE_F32, lp->master, p->numel),
				.grad = view(g, g->dtype, lp->grad, p->numel),
				.grad_scale = info->grad_scale,
			};
			for (uint32_t k = 0; k < s->n_state; k++)
				a.state[k] = lp->state[k];
			if ((r = s->host->optim_step(s->h, &a)))
				return r;
		}
		for (uint32_t g = 0; g < s->n_groups; g++)
			if ((r = refresh_work(s, &s->groups[g], 0, s->groups[g].n_train)))
				return r;
	}
	if ((r = zero_grads(s)))
		return r;
	/* The clock advances on skipped steps too (see struct lsgd). */
	s->steps++;
	if (s->world.world_size > 1 && s->steps > (uint64_t)s->warmup_steps &&
	    (s->steps - (uint64_t)s->warmup_steps) % (uint64_t)s->sync_every == 0)
		return average(s);
	return ACCEL_OK;
}

/* ---- checkpoints ------------------------------------------------------------------
 * With checkpoint tensors (ABI 1.4, ACCEL_CKPT_MAX_DIMS defined), state
 * version 2: rank 0 writes its replica as the canonical tensors every
 * strategy reads (master/NAME f32, optim/STATE/NAME: exp_avg, exp_avg_sq
 * for AdamW, momentum_buffer for SGD) and "localsgd/clock" (i64 [2]: the
 * synchronization clock and the world size).  Between synchronizations
 * the other ranks hold other values, so each of them writes its replica as
 * its own blobs "master/NAME", "optimK/NAME".  A load at the saving world
 * size restores every rank's replica exactly; at another world size, or
 * from a checkpoint of another strategy (state_version 0: no localsgd
 * state), every rank starts from the canonical tensors; the clock is the
 * saved "localsgd/clock" when there is one (another world size), else the
 * optimizer's step count (the next step's, accel_step_info_v1.step).
 * Built against older headers (no tensors), state version 1: every rank's
 * replica and the clock as blobs, loadable at the saving world size. */

static int blob_name(lsgd *s, char *buf, size_t cap, const char *kind, const char *param)
{
	int n = snprintf(buf, cap, "%s/%s", kind, param);
	if (n < 0 || (size_t)n >= cap)
		return s->host->error(s->h, ACCEL_ERR_INVALID_ARG, "parameter name '%.40s...' is too "
		                      "long for a checkpoint name", param);
	return ACCEL_OK;
}

#ifdef ACCEL_CKPT_MAX_DIMS
/* The canonical name of optimizer state k (docs/checkpoints.md). */
static const char *state_name(lsgd *s, uint32_t k, char *buf, size_t cap)
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
#endif

/* One f32 array of parameter p to or from a checkpoint: as the canonical
 * tensor `name` (tensor != 0), else as this rank's blob `name`.  Device
 * memory goes through a host staging buffer. */
static int xfer(lsgd *s, const accel_param_info_v1 *p, const lsgd_group *g, float *data,
                void *ckpt, const char *name, int save, int tensor)
{
	const accel_host_v1 *H = s->host;
	uint64_t numel = p->numel, bytes = numel * 4;
	void *buf = data;
	int r;
	if (g->device != ACCEL_DEVICE_CPU && !(buf = malloc(bytes ? bytes : 1)))
		return H->error(s->h, ACCEL_ERR_NOMEM, "out of memory staging '%s'", name);
	accel_view dv = view(g, ACCEL_DTYPE_F32, data, numel);
	accel_view hv = {sizeof(hv), ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, buf, numel};
	if (save) {
		r = buf != data ? H->op_copy(s->h, &hv, &dv) : ACCEL_OK;
#ifdef ACCEL_CKPT_MAX_DIMS
		if (!r && tensor) {
			uint64_t shape[ACCEL_CKPT_MAX_DIMS];
			for (uint32_t d = 0; d < p->ndim && d < ACCEL_CKPT_MAX_DIMS; d++)
				shape[d] = (uint64_t)p->shape[d];
			/* our own arrays are not changed during the save: borrowed */
			accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_F32, p->ndim,
			                          buf == data ? ACCEL_CKPT_BORROW : 0, name, shape, 0,
			                          numel, buf};
			r = H->ckpt_write_tensor(s->h, ckpt, &sl);
		} else
#endif
		if (!r)
			r = H->ckpt_write(s->h, ckpt, name, buf, bytes);
	} else {
#ifdef ACCEL_CKPT_MAX_DIMS
		if (tensor)
			r = H->ckpt_read_tensor(s->h, ckpt, name, ACCEL_DTYPE_F32, 0, numel, buf);
		else
#endif
			r = H->ckpt_read(s->h, ckpt, name, buf, bytes);
		if (!r && buf != data)
			r = H->op_copy(s->h, &dv, &hv);
	}
	if (buf != data)
		free(buf);
	(void)tensor;
	return r;
}

/* tensor: this rank's replica is (or is read from) the canonical tensors */
static int save_or_load(lsgd *s, void *ckpt, int save, int tensor)
{
	char name[512], kind[32];
	int r;
	for (uint32_t i = 0; i < s->n_params; i++) {
		const accel_param_info_v1 *p = ACCEL_MODEL_PARAM(s->model, i);
		lsgd_param *lp = &s->params[i];
		const lsgd_group *g = &s->groups[lp->group];
		if ((r = blob_name(s, name, sizeof(name), "master", p->name)) ||
		    (r = xfer(s, p, g, lp->master, ckpt, name, save, tensor)))
			return r;
		for (uint32_t k = 0; p->requires_grad && k < s->n_state; k++) {
			snprintf(kind, sizeof(kind), "optim%u", k);
#ifdef ACCEL_CKPT_MAX_DIMS
			char sb[16];
			if (tensor)
				snprintf(kind, sizeof(kind), "optim/%s", state_name(s, k, sb, sizeof(sb)));
#endif
			if ((r = blob_name(s, name, sizeof(name), kind, p->name)) ||
			    (r = xfer(s, p, g, lp->state[k], ckpt, name, save, tensor)))
				return r;
		}
	}
	if (save)
		return ACCEL_OK;
	for (uint32_t g = 0; g < s->n_groups; g++)
		if ((r = refresh_work(s, &s->groups[g], 0, s->groups[g].n_train + s->groups[g].n_frozen)))
			return r;
	return ACCEL_OK;
}

static int ckpt_ready(lsgd *s, int save)
{
	if (!s->model)
		return s->host->error(s->h, ACCEL_ERR_STATE, "%s before accel_prepare()",
		                      save ? "save_state" : "load_state");
#ifdef ACCEL_CKPT_MAX_DIMS
	if (!ACCEL_HOST_HAS(s->host, ckpt_read_tensor))
		return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED, "this accel has no checkpoint "
		                      "tensors (ABI 1.4); this localsgd writes them");
#else
	if (!ACCEL_HOST_HAS(s->host, ckpt_read))
		return s->host->error(s->h, ACCEL_ERR_UNSUPPORTED, "this accel has no checkpoint streams");
#endif
	return ACCEL_OK;
}

static int lsgd_save_state(void *state, accel_ckpt_writer *w)
{
	lsgd *s = state;
	int r = ckpt_ready(s, 1);
	if (r)
		return r;
#ifdef ACCEL_CKPT_MAX_DIMS
	if (s->world.rank == 0) {
		int64_t clock[2] = {(int64_t)s->steps, s->world.world_size};
		uint64_t shape[1] = {2};
		accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_I64, 1, 0, "localsgd/clock", shape,
		                          0, 2, clock};
		if ((r = s->host->ckpt_write_tensor(s->h, w, &sl)))
			return r;
	}
	return save_or_load(s, w, 1, s->world.rank == 0);
#else
	uint64_t steps = s->steps;
	if ((r = save_or_load(s, w, 1, 0)))
		return r;
	return s->host->ckpt_write(s->h, w, "localsgd/steps", &steps, sizeof(steps));
#endif
}

static int lsgd_load_state(void *state, accel_ckpt_reader *rd, uint32_t state_version)
{
	lsgd *s = state;
	int r = ckpt_ready(s, 0);
	if (r)
		return r;
#ifdef ACCEL_CKPT_MAX_DIMS
	if (state_version != LSGD_STATE_VERSION && state_version != 0)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint holds localsgd state "
		                      "version %u; this localsgd %s reads version %u (and the "
		                      "canonical tensors of any strategy's checkpoint)", state_version,
		                      lsgd_desc.version, LSGD_STATE_VERSION);
	/* the clock and the saving world size, when localsgd saved it */
	int64_t clock[2] = {0, 0};
	accel_ckpt_tensor_info_v1 info = {.struct_size = sizeof(info)};
	if (state_version && (r = s->host->ckpt_tensor_info(s->h, rd, "localsgd/clock", &info)) !=
	                             ACCEL_ERR_NOT_FOUND) {
		if (r || (r = s->host->ckpt_read_tensor(s->h, rd, "localsgd/clock", ACCEL_DTYPE_I64, 0,
		                                        2, clock)))
			return r;
	}
	int same = clock[1] == s->world.world_size;
	if ((r = save_or_load(s, rd, 0, !same || s->world.rank == 0)))
		return r;
	s->steps = (uint64_t)clock[0];
	s->clock_from_step = clock[1] == 0;   /* no clock saved */
	return ACCEL_OK;
#else
	uint64_t steps = 0;
	if (state_version != LSGD_STATE_VERSION)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint holds localsgd state "
		                      "version %u; this localsgd %s reads version %u", state_version,
		                      lsgd_desc.version, LSGD_STATE_VERSION);
	if ((r = save_or_load(s, rd, 0, 0)) ||
	    (r = s->host->ckpt_read(s->h, rd, "localsgd/steps", &steps, sizeof(steps))))
		return r;
	s->steps = steps;
	return ACCEL_OK;
#endif
}

/* ---- the vtable and the entry -------------------------------------------------------
 * NULL slots mean "the core's default" (see accel/plugin.h): Local SGD needs
 * no unit hooks, since nothing happens during backward. */
static const accel_plugin_v1 lsgd_vtable = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &lsgd_desc,
	.init = lsgd_init,
	.fini = lsgd_fini,
	.validate = lsgd_validate,
	.wrap = lsgd_wrap,
	.reduce = lsgd_reduce,
	.grad_stats = lsgd_grad_stats,
	.step = lsgd_step,
	.save_state = lsgd_save_state,
	.load_state = lsgd_load_state,
};

/* The one exported symbol.  Everything above is static, and the build
 * uses -fvisibility=hidden, so nothing else leaks out of the .so. */
ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	/* A plugin using a host member appended in a later ABI minor checks
	 * here that the running host has it; ACCEL_HOST_REQUIRE refuses with a
	 * reason (through host->error) when it does not.  All members this
	 * file calls exist since 1.0; reduce_bucket is checked as the example. */
	if (!ACCEL_HOST_REQUIRE(host, "localsgd", reduce_bucket))
		return NULL;
	return &lsgd_vtable;
}
