/* SPDX-License-Identifier: MIT */
/* core/comm_check.c: the checks of a collective's arguments.
 *
 * Every call is checked here once, before a backend sees it (backends only
 * assert, backends/common/coll.h), so that a mistake gets a message that
 * names the argument, the collective and the group. */
#include <string.h>

#include "comm-impl.h"

int accelp_comm_check_view(accel_comm *c, accel_group *g, const accel_view *v, const char *op,
                           const char *which, int reduce)
{
	accel_ctx *ctx = c->ctx;
	if (!v)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s is NULL", op, which);
	if (v->struct_size < sizeof(accel_view))
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s.struct_size is %u, expected at least %zu (set it to "
		                     "sizeof(accel_view))", op, which, v->struct_size, sizeof(accel_view));
	if (accel_dtype_size(v->dtype) == 0)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has invalid dtype %u",
		                     op, which, v->dtype);
	if (reduce && v->dtype != ACCEL_DTYPE_F32 && v->dtype != ACCEL_DTYPE_F64 &&
	    v->dtype != ACCEL_DTYPE_F16 && v->dtype != ACCEL_DTYPE_BF16 &&
	    v->dtype != ACCEL_DTYPE_I32 && v->dtype != ACCEL_DTYPE_I64)
		return accelp_err_set(&ctx->err, ACCEL_ERR_UNSUPPORTED,
		                     "%s: reductions over %s are not supported (f32, f64, f16, bf16, "
		                     "i32, i64 are)", op, accel_dtype_name(v->dtype));
	if (v->numel && !v->data)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: %s has %llu elements but a NULL data pointer", op, which,
		                     (unsigned long long)v->numel);
	/* numel * world * 8 must fit comfortably in 64 bits (and in memory) */
	if (v->numel > (UINT64_C(1) << 56) / 8 / (uint64_t)g->size)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "%s: %s has %llu elements, too many",
		                     op, which, (unsigned long long)v->numel);
	return ACCEL_OK;
}

static int overlap(const accel_view *a, const accel_view *b)
{
	size_t es = accel_dtype_size(a->dtype);
	const char *x = a->data, *y = b->data;
	return a->numel && b->numel && x < y + b->numel * es && y < x + a->numel * es;
}

/* In place means exactly the same buffer (allreduce), or for reduce_scatter
 * recv at send's start or at this rank's block, and for allgather send at
 * recv's start or at this rank's block; any other overlap is a mistake. */
static int check_overlap(accel_comm *c, accel_group *g, const accel_view *s, const accel_view *d,
                         const char *op)
{
	accel_ctx *ctx = c->ctx;
	size_t es = accel_dtype_size(s->dtype);
	if (!overlap(s, d) || s->data == d->data)
		return ACCEL_OK;
	if (!strcmp(op, "reduce_scatter") &&
	    (const char *)d->data == (const char *)s->data + (uint64_t)g->rank * d->numel * es)
		return ACCEL_OK;
	if (!strcmp(op, "allgather") &&
	    (const char *)s->data == (const char *)d->data + (uint64_t)g->rank * s->numel * es)
		return ACCEL_OK;
	return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
	                     "%s: send [%p, +%llu) and recv [%p, +%llu) overlap; in place means %s",
	                     op, s->data, (unsigned long long)(s->numel * es), d->data,
	                     (unsigned long long)(d->numel * es),
	                     !strcmp(op, "allreduce") ? "send == recv"
	                     : !strcmp(op, "reduce_scatter")
	                         ? "recv == send or recv == send + rank * recv count"
	                         : "send == recv or send == recv + rank * send count");
}

int accelp_comm_check_pair(accel_comm *c, accel_group *g, const accel_view *s, const accel_view *d,
                           const char *op, int reduce, uint64_t want_send, uint64_t want_recv)
{
	accel_ctx *ctx = c->ctx;
	int r;
	if ((r = accelp_comm_check_view(c, g, s, op, "send", reduce)) ||
	    (r = accelp_comm_check_view(c, g, d, op, "recv", reduce)))
		return r;
	if (s->dtype != d->dtype)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: send is %s but recv is %s", op, accel_dtype_name(s->dtype),
		                     accel_dtype_name(d->dtype));
	if (s->device != d->device || s->device_index != d->device_index)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: send and recv are on different devices", op);
	if (s->numel != want_send || d->numel != want_recv)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s%s: with %d ranks, send has %llu elements and recv %llu; "
		                     "expected %llu and %llu", op, accelp_comm_on_group(g), g->size,
		                     (unsigned long long)s->numel, (unsigned long long)d->numel,
		                     (unsigned long long)want_send, (unsigned long long)want_recv);
	return check_overlap(c, g, s, d, op);
}

int accelp_comm_check_op(accel_comm *c, uint32_t op, const char *what)
{
	if (op > ACCEL_RED_MIN)
		return accelp_err_set(&c->ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "%s: unknown reduction %u (ACCEL_RED_SUM, _AVG, _MAX, _MIN)", what,
		                     op);
	return ACCEL_OK;
}
