/* SPDX-License-Identifier: MIT */
/* examples/reduce-hook/mean_hook.c: "mean-hook", the smallest complete
 * reduce hook (ACCEL_ROLE_REDUCE_HOOK) of ABI 1.3 and later.
 *
 * A reduce hook replaces the all-reduce of each gradient bucket; compression
 * hooks (top-k, PowerSGD, fp16) are built the same way.  This one computes
 * the mean the plain way, without blocking the backward pass: it starts an
 * all-reduce SUM over the bucket's ranks and, once that completes, divides
 * by their number in a req_on_done() callback (unless the strategy divided
 * already: ACCEL_REDUCE_PREDIVIDED).  Training with it gives what training
 * without a hook gives, up to float rounding.
 *
 * Build against an installed accel with the Makefile next to this file and
 * select it with {"plugins": ["mean-hook"]} (docs/writing-a-plugin.md). */
#include <stdlib.h>

#include "accel/plugin.h"

/* What the callback needs after the reduce call returned: the bucket's
 * view is copied, since `b` is only borrowed until the reduction ends, and
 * req_on_done()'s `arg` must stay valid until the callback has run. */
typedef struct pending {
	const accel_host_v1 *host;
	accel_host *h;
	accel_view view;
	double scale;
} pending;

typedef struct hook_state {
	const accel_host_v1 *host;
	accel_host *h;
	pending **pend;     /* one per bucket id, each allocated once: a slot
	                       must not move while its callback is pending */
	uint32_t n_pend;
} hook_state;

static int hook_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	hook_state *s = calloc(1, sizeof(*s));
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "mean-hook: out of memory");
	s->host = host;
	s->h = h;
	*ret_state = s;
	return ACCEL_OK;
}

static void hook_fini(void *state)
{
	hook_state *s = state;
	for (uint32_t i = 0; i < s->n_pend; i++)
		free(s->pend[i]);
	free(s->pend);
	free(s);
}

/* Runs on the training thread inside the wait()/test() that finds the
 * all-reduce complete: the sum becomes the mean. */
static int finish(void *arg)
{
	pending *p = arg;
	return p->host->op_scale(p->h, &p->view, p->scale);
}

static int hook_reduce_bucket_v2(void *state, const accel_bucket_v1 *b, accel_req **ret_req)
{
	hook_state *s = state;
	const accel_host_v1 *H = s->host;
	int32_t rank = 0, size = 1;
	int r;
	if (b->group) {
		if ((r = H->group_info(s->h, b->group, &rank, &size)))
			return r;
	} else {
		accel_world_v1 w = {.struct_size = sizeof(w)};
		if ((r = H->world(s->h, &w)))
			return r;
		size = w.world_size;
	}
	if (b->bucket_id >= s->n_pend) {
		pending **t = realloc(s->pend, (b->bucket_id + 1) * sizeof(*t));
		if (!t)
			return H->error(s->h, ACCEL_ERR_NOMEM, "mean-hook: out of memory");
		for (uint32_t i = s->n_pend; i <= b->bucket_id; i++)
			t[i] = NULL;
		s->pend = t;
		s->n_pend = b->bucket_id + 1;
	}
	/* The bucket is reduced again only after this reduction was waited
	 * for, so one slot per bucket id is enough. */
	pending *p = s->pend[b->bucket_id];
	if (!p && !(p = s->pend[b->bucket_id] = malloc(sizeof(*p))))
		return H->error(s->h, ACCEL_ERR_NOMEM, "mean-hook: out of memory");
	p->host = H;
	p->h = s->h;
	p->view = b->view;
	p->scale = (b->flags & ACCEL_REDUCE_PREDIVIDED) ? 1.0 : 1.0 / size;
	accel_req *req = NULL;
	r = b->group ? H->group_allreduce(s->h, b->group, &b->view, &b->view, ACCEL_RED_SUM, &req)
	             : H->allreduce(s->h, &b->view, &b->view, ACCEL_RED_SUM, &req);
	if (r)
		return r;
	if (!req)   /* the backend finished already */
		return p->scale == 1.0 ? ACCEL_OK : finish(p);
	if (p->scale != 1.0 && (r = H->req_on_done(s->h, req, finish, p)))
		return r;
	*ret_req = req;
	return ACCEL_OK;
}

static const accel_plugin_desc_v1 hook_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_REDUCE_HOOK,
	.name = "mean-hook",
	.version = "1.0.0",
	.summary = "example reduce hook: all-reduce SUM, then 1/ranks once it completes",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CUDA,
};

static const accel_plugin_v1 hook_vtable = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &hook_desc,
	.init = hook_init,
	.fini = hook_fini,
	.reduce_bucket_v2 = hook_reduce_bucket_v2,
};

ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	/* refuses (with a message) a host older than the members it uses:
	 * group_allreduce comes after req_on_done in the table */
	if (!ACCEL_HOST_REQUIRE(host, "mean-hook", group_allreduce))
		return NULL;
	return &hook_vtable;
}
