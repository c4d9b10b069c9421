/* SPDX-License-Identifier: MIT */
/* core/comm_group.c: groups (sub-communicators, accel_comm_group_*).
 *
 * A split all-gathers every rank's (colour, key, node) over the parent,
 * orders each colour's members by key, names the group after its parent
 * and the split's number, and asks the backends' split() for its states;
 * the collectives on a group are in comm_coll.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm-impl.h"
#include "loader.h"
#include "log.h"
#include "train.h"

/* The group a caller means: NULL is the world; anything else must be one
 * of this communicator's groups. */
int accelp_comm_group_of(accel_comm *c, accel_group *g, const char *op, accel_group **ret)
{
	if (!g || g == &c->world) {
		*ret = &c->world;
		return ACCEL_OK;
	}
	for (accel_group *p = c->groups; p; p = p->next)
		if (p == g) {
			*ret = g;
			return ACCEL_OK;
		}
	return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
	                     "%s: %p is not a group of this context (freed already?)", op,
	                     (void *)g);
}

typedef struct member {
	int32_t key, parent_rank;
} member;

static int member_cmp(const void *a, const void *b)
{
	const member *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->parent_rank < y->parent_rank ? -1 : x->parent_rank > y->parent_rank;
}

static void describe_group(accel_group *g)
{
	size_t used = (size_t)snprintf(g->what, sizeof(g->what), " on group %s (world rank%s ",
	                               g->tag, g->size == 1 ? "" : "s");
	for (int32_t i = 0; i < g->size && used + 16 < sizeof(g->what); i++)
		used += (size_t)snprintf(g->what + used, sizeof(g->what) - used, "%s%d",
		                         i ? ", " : "", g->wranks[i]);
	if (used + 16 >= sizeof(g->what))
		snprintf(g->what + sizeof(g->what) - 16, 16, ", ...)");
	else
		snprintf(g->what + used, sizeof(g->what) - used, ")");
}

static accel_group *group_destroy(accel_comm *c, accel_group *g)
{
	if (!g)
		return NULL;
	if (g->dev_state)
		c->dev.vt->fini(g->dev_state);
	if (g->cpu_state)
		c->cpu.vt->fini(g->cpu_state);
	free(g->wranks);
	free(g->nodes);
	free(g);
	return NULL;
}

int accelp_comm_group_split(accel_comm *c, accel_group *parent, int32_t color, int32_t key,
                           accel_group **ret_group)
{
	accel_ctx *ctx = c->ctx;
	accel_group *p = NULL, *g = NULL;
	int32_t *all = NULL;
	member *mem = NULL;
	int32_t *pranks = NULL;
	int r = accelp_comm_group_of(c, parent, "group_split", &p);
	if (r)
		return r;
	if (!ret_group)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "group_split: ret_group is NULL");
	if (color < ACCEL_COMM_SPLIT_NONE)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "group_split%s: colour %d is negative; colours are >= 0, or "
		                     "ACCEL_COMM_SPLIT_NONE (-1) for a rank that joins no group",
		                     accelp_comm_on_group(p), color);
	/* the same answer on every rank (the same backends), so nobody is
	 * left waiting in the all-gather below */
	if (!c->cpu.vt->split)
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "group_split: comm backend '%s' (%s, built against accel ABI "
		                     "1.%u) cannot make sub-communicators (it has no split slot); "
		                     "choose a backend that has one (docs/comm.md, \"Groups\")",
		                     c->cpu.module->name, c->cpu.module->path,
		                     c->cpu.module->abi_minor);
	if (p->dev_state && !c->dev.vt->split)
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "group_split: device comm backend '%s' (%s) cannot make "
		                     "sub-communicators (it has no split slot)", c->dev.module->name,
		                     c->dev.module->path);
	uint32_t n = ++p->n_splits;   /* on every rank, NONE included: names stay in step */

	/* Everyone's (colour, key, node) over the parent. */
	int32_t mine[3] = {color, key, ctx->world.node_rank};
	all = malloc(sizeof(int32_t) * 3 * (size_t)p->size);
	if (!all)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	accel_view sv = {sizeof(accel_view), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, mine, 3};
	accel_view rv = {sizeof(accel_view), ACCEL_DTYPE_I32, ACCEL_DEVICE_CPU, 0, all,
	                 3 * (uint64_t)p->size};
	if ((r = accelp_comm_group_allgather(c, p, &sv, &rv, NULL)))
		goto fail;

	accel_comm_split_v1 args = {.struct_size = sizeof(args), .color = color, .key = key,
	                            .rank = -1, .size = 0};
	char tag[GROUP_TAG_MAX];
	int tl = snprintf(tag, sizeof(tag), "%s%s%uc%d", p->tag, p->tag[0] ? "." : "", n,
	                  color < 0 ? 0 : color);
	if (tl < 0 || (size_t)tl >= sizeof(tag)) {
		r = accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                  "group_split%s: groups nested too deeply (the name of the new "
		                  "group would pass %d characters)", accelp_comm_on_group(p),
		                  GROUP_TAG_MAX - 1);
		goto fail;
	}
	int64_t keepalive_ms;
	accelp_comm_times(ctx, &args.timeout_ms, &keepalive_ms);
	args.job_id = accelp_comm_job_id(ctx);
	args.tag = tag;
	if (color != ACCEL_COMM_SPLIT_NONE) {
		g = calloc(1, sizeof(*g));
		mem = malloc(sizeof(*mem) * (size_t)p->size);
		if (!g || !mem) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
			goto fail;
		}
		int32_t k = 0;
		for (int32_t q = 0; q < p->size; q++)
			if (all[3 * q] == color)
				mem[k++] = (member){all[3 * q + 1], q};
		qsort(mem, (size_t)k, sizeof(*mem), member_cmp);
		g->comm = c;
		g->size = k;
		g->wranks = malloc(sizeof(int32_t) * (size_t)k);
		g->nodes = malloc(sizeof(int32_t) * (size_t)k);
		pranks = malloc(sizeof(int32_t) * (size_t)k);
		if (!g->wranks || !g->nodes || !pranks) {
			r = accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
			goto fail;
		}
		int32_t nodes = 0, local = 0;
		for (int32_t i = 0; i < k; i++) {
			int32_t q = mem[i].parent_rank;
			pranks[i] = q;
			g->wranks[i] = p->wranks ? p->wranks[q] : q;
			g->nodes[i] = all[3 * q + 2];
			if (q == p->rank)
				g->rank = i;
			local += g->nodes[i] == ctx->world.node_rank;
			int seen = 0;
			for (int32_t j = 0; j < i && !seen; j++)
				seen = g->nodes[j] == g->nodes[i];
			nodes += !seen;
		}
		snprintf(g->tag, sizeof(g->tag), "%s", tag);
		describe_group(g);
		args.rank = g->rank;
		args.size = k;
		args.ranks = g->wranks;
		args.parent_ranks = pranks;
		args.num_nodes = nodes;
		args.local_size = local;
	}
	void *cs = NULL, *ds = NULL;
	if ((r = c->cpu.vt->split(p->cpu_state, &args, &cs))) {
		if (ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "group_split%s: backend %s failed: %s",
			              accelp_comm_on_group(p), c->cpu.module->name, accel_status_str(r));
		goto fail;
	}
	if (p->dev_state && (r = c->dev.vt->split(p->dev_state, &args, &ds))) {
		if (cs)
			c->cpu.vt->fini(cs);
		if (ctx->err.code == ACCEL_OK)
			accelp_err_set(&ctx->err, r, "group_split%s: device backend %s failed: %s",
			              accelp_comm_on_group(p), c->dev.module->name, accel_status_str(r));
		goto fail;
	}
	if (g && !cs) {
		if (ds)
			c->dev.vt->fini(ds);
		r = accelp_err_set(&ctx->err, ACCEL_ERR_INTERNAL,
		                  "group_split: backend %s returned no state for a member",
		                  c->cpu.module->name);
		goto fail;
	}
	free(all);
	free(mem);
	free(pranks);
	if (g) {
		g->cpu_state = cs;
		g->dev_state = ds;
		g->next = c->groups;
		c->groups = g;
		accelp_log(ACCEL_LOG_DEBUG, "group %s: rank %d of %d%s", g->tag, g->rank, g->size,
		          g->what);
	} else {
		if (cs)
			c->cpu.vt->fini(cs);
		if (ds)
			c->dev.vt->fini(ds);
	}
	*ret_group = g;
	return ACCEL_OK;
fail:
	free(all);
	free(mem);
	free(pranks);
	group_destroy(c, g);
	return r;
}

int accelp_comm_group_info(accel_comm *c, accel_group *grp, int32_t *ret_rank, int32_t *ret_size)
{
	accel_group *g = NULL;
	int r = accelp_comm_group_of(c, grp, "group_info", &g);
	if (r)
		return r;
	if (ret_rank)
		*ret_rank = g->rank;
	if (ret_size)
		*ret_size = g->size;
	return ACCEL_OK;
}

int accelp_comm_group_world_rank(accel_comm *c, accel_group *grp, int32_t rank,
                                int32_t *ret_world_rank)
{
	accel_group *g = NULL;
	int r = accelp_comm_group_of(c, grp, "group_world_rank", &g);
	if (r)
		return r;
	if (!ret_world_rank || rank < 0 || rank >= g->size)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "group_world_rank%s: %s", accelp_comm_on_group(g),
		                     !ret_world_rank ? "ret_world_rank is NULL"
		                                     : "rank is outside the group");
	*ret_world_rank = g->wranks ? g->wranks[rank] : rank;
	return ACCEL_OK;
}

accel_group *accelp_comm_group_free(accel_comm *c, accel_group *g)
{
	if (!c || !g || g == &c->world)
		return NULL;
	accel_group **pp = &c->groups;
	while (*pp && *pp != g)
		pp = &(*pp)->next;
	if (!*pp) {
		accelp_log(ACCEL_LOG_WARN, "group_free: %p is not a group of this context (freed "
		          "already?); ignored", (void *)g);
		return NULL;
	}
	*pp = g->next;
	/* Requests of the group not yet waited for: released now, while the
	 * backend state they belong to still exists; taken off the live list
	 * under the lock, waited for outside it (a wait can last timeout_s).
	 * Their staging buffers go back unused and their req_on_done callbacks
	 * are dropped, not run (a later request may get the same address). */
	accel_req *mine = NULL;
	pthread_mutex_lock(&c->live_mu);
	for (accel_req *q = c->live, *nx; q; q = nx) {
		nx = q->next;
		if (q->g != g)
			continue;
		accelp_comm_req_unlink_locked(c, q);
		q->next = mine;
		mine = q;
	}
	pthread_mutex_unlock(&c->live_mu);
	for (accel_req *q = mine, *nx; q; q = nx) {
		nx = q->next;
		if (q->breq)
			q->be->vt->wait(q->state, q->breq);
		comm_stage_out(&q->stage, 0, &c->ctx->err);
		accelp_train_drop_callbacks_of(c->ctx->train, q);
		free(q);
	}
	return group_destroy(c, g);
}
