/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_store.c: one rank's optimizer shard (zero_store.h).
 *
 * Why it is built this way:
 *  - The optimizer's update of an element depends on that element alone
 *    (host->optim_step's contract), so the store may cut its element space
 *    anywhere: per piece on the device, per sub-group and piece when
 *    offloaded.  That is what makes every placement and sub_group_size give
 *    the same bits, and what the tests check with memcmp.
 *  - Offloaded, the host arrays are whole (CPU) or one block per sub-group
 *    in the swap file (NVMe: [master | state0 | state1 ...], 4096-aligned),
 *    so a sub-group is one contiguous read and one contiguous write.
 *  - Gradients and working weights on a GPU go through small host staging
 *    buffers, two of each, so that the copies of the next and the previous
 *    sub-group run while the CPU steps the current one.  A copy across
 *    devices keeps the dtype (op_copy's rule), so casts run on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zero_store.h"

#define ZERO_DEFAULT_SUB_GROUP UINT64_C(1000000000)
#define SWAP_ALIGN UINT64_C(4096)

typedef struct piece_rt {
	zero_piece p;
	uint64_t at;          /* first element in the store's space */
	uint32_t work_dtype;  /* the parameter's dtype              */
	float *master;        /* DEVICE: own master or `work`; CPU: into st->master */
} piece_rt;

/* One buffer of an NVMe sub-group pipeline. */
typedef struct swap_buf {
	void *raw;            /* from mem_alloc                         */
	float *data;          /* 4096-aligned inside raw                */
	uint64_t rd_ticket, wr_ticket;
	int32_t rd_pending, wr_pending;
	uint64_t group;       /* the sub-group it holds                 */
} swap_buf;

struct zero_store {
	const accel_host_v1 *H;
	accel_host *h;
	zero_store_opts o;
	char *nvme_path, *nvme_key;
	uint32_t n;
	piece_rt *pc;
	uint64_t numel;
	int on_gpu;

	/* DEVICE: masters of the pieces that are not master_is_work; CPU: the
	 * whole space.  state[k]: the whole space (DEVICE, CPU). */
	float *master;
	float *state[ZERO_MAX_STATE];

	/* CPU, NVMe */
	uint64_t sg;          /* elements per sub-group                 */
	uint64_t n_sg;
	accel_optim_args_v1 *args;
	int async;            /* op_copy_async + events                 */
	void *gstage[2], *wstage[2];   /* GPU: host staging (sg * 4 bytes)  */
	void *gev[2], *wev[2];         /* their copies' events              */

	/* NVMe */
	zero_swap *sw;
	uint64_t blk_stride;
	uint32_t nbuf;
	swap_buf *buf;

	zero_store_stats stats;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static const char *place_name(uint32_t place)
{
	return place == ZERO_PLACE_DEVICE ? "device" : place == ZERO_PLACE_CPU ? "cpu" : "nvme";
}

static accel_view mkview(uint32_t dtype, int32_t device, int32_t device_index, void *data,
                         uint64_t numel)
{
	accel_view v = {sizeof(accel_view), dtype, device, device_index, data, numel};
	return v;
}

static size_t dsize(uint32_t dtype)
{
	return accel_abi_dtype_size(dtype);
}

static int float_dtype(uint32_t dt)
{
	return dt == ACCEL_DTYPE_F32 || dt == ACCEL_DTYPE_BF16 || dt == ACCEL_DTYPE_F16;
}

/* ---- copies ---------------------------------------------------------------- */

/* op_copy, also across devices with a dtype change (which op_copy refuses):
 * the conversion runs on the host side, through a temporary buffer. */
static int xcopy(zero_store *st, const accel_view *dst, const accel_view *src)
{
	const accel_host_v1 *H = st->H;
	if (dst->dtype == src->dtype ||
	    (dst->device == src->device && dst->device_index == src->device_index))
		return H->op_copy(st->h, dst, src);
	int src_host = src->device == ACCEL_DEVICE_CPU;
	/* the temporary is on the host, in the dtype of the side that is not */
	uint32_t tdt = src_host ? dst->dtype : src->dtype;
	void *tmp = NULL;
	int r = H->mem_alloc(st->h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0,
	                     dst->numel * dsize(tdt), 0, &tmp);
	if (r)
		return r;
	accel_view t = mkview(tdt, ACCEL_DEVICE_CPU, 0, tmp, dst->numel);
	if (src_host) {
		if (!(r = H->op_copy(st->h, &t, src)))
			r = H->op_copy(st->h, dst, &t);
	} else if (dst->device == ACCEL_DEVICE_CPU) {
		if (!(r = H->op_copy(st->h, &t, src)))
			r = H->op_copy(st->h, dst, &t);
	} else {
		/* device to another device with a cast: stage both ways */
		void *tmp2 = NULL;
		if (!(r = H->mem_alloc(st->h, ACCEL_MEM_BUFFERS, ACCEL_DEVICE_CPU, 0,
		                       dst->numel * dsize(dst->dtype), 0, &tmp2))) {
			accel_view t2 = mkview(dst->dtype, ACCEL_DEVICE_CPU, 0, tmp2, dst->numel);
			if (!(r = H->op_copy(st->h, &t, src)) && !(r = H->op_copy(st->h, &t2, &t)))
				r = H->op_copy(st->h, dst, &t2);
			H->mem_free(st->h, tmp2);
		}
	}
	H->mem_free(st->h, tmp);
	return r;
}

/* An ordered copy for the step: on the context's stream when the host can
 * wait for it (events), else synchronous. */
static int copy_async(zero_store *st, const accel_view *dst, const accel_view *src)
{
	if (st->async)
		return st->H->op_copy_async(st->h, dst, src);
	return st->H->op_copy(st->h, dst, src);
}

static int ev_record(zero_store *st, void **ev)
{
	if (!st->async)
		return ACCEL_OK;
	return st->H->event_record(st->h, ev);
}

static int ev_wait(zero_store *st, void **ev)
{
	if (!*ev)
		return ACCEL_OK;
	int r = st->H->event_sync(st->h, *ev);
	st->H->event_free(st->h, *ev);
	*ev = NULL;
	return r;
}

/* ---- the pieces -------------------------------------------------------------- */

/* First piece whose run ends after element x. */
static uint32_t piece_at(const zero_store *st, uint64_t x)
{
	uint32_t lo = 0, hi = st->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (st->pc[mid].at + st->pc[mid].p.numel <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int check_pieces(zero_store *st, const zero_piece *pieces, uint32_t n, int replace)
{
	const accel_host_v1 *H = st->H;
	const accel_model_v1 *m = H->model ? H->model(st->h) : NULL;
	if (n && !pieces)
		return H->error(st->h, ACCEL_ERR_INVALID_ARG, "zero store: %u pieces but no array", n);
	if (n && !m)
		return H->error(st->h, ACCEL_ERR_STATE,
		                "zero store: the model is not known yet (make the store in wrap())");
	for (uint32_t i = 0; i < n; i++) {
		const zero_piece *p = &pieces[i];
		if (replace) {
			const zero_piece *o = &st->pc[i].p;
			if (p->param != o->param || p->param_offset != o->param_offset ||
			    p->numel != o->numel || p->grad_dtype != o->grad_dtype ||
			    p->master_is_work != o->master_is_work)
				return H->error(st->h, ACCEL_ERR_INVALID_ARG,
				                "zero store: set_pieces: piece %u is not the piece it "
				                "replaces (param, offset, numel, grad dtype and "
				                "master_is_work must stay)", i);
			if (p->numel && !p->work)
				return H->error(st->h, ACCEL_ERR_INVALID_ARG,
				                "zero store: set_pieces: piece %u has no working weights", i);
			continue;
		}
		if (p->param >= m->n_params)
			return H->error(st->h, ACCEL_ERR_INVALID_ARG,
			                "zero store: piece %u names parameter %u of a model of %u", i,
			                p->param, m->n_params);
		const accel_param_info_v1 *pi = ACCEL_MODEL_PARAM(m, p->param);
		if (p->param_offset > pi->numel || p->numel > pi->numel - p->param_offset)
			return H->error(st->h, ACCEL_ERR_INVALID_ARG,
			                "zero store: piece %u ([%llu, +%llu) of %s) runs past the "
			                "parameter's %llu elements", i,
			                (unsigned long long)p->param_offset, (unsigned long long)p->numel,
			                pi->name ? pi->name : "?", (unsigned long long)pi->numel);
		if (!float_dtype(pi->dtype) || !float_dtype(p->grad_dtype))
			return H->error(st->h, ACCEL_ERR_INVALID_ARG,
			                "zero store: piece %u (%s): working dtype %s, gradient dtype %s; "
			                "the optimizer takes f32, bf16 or f16", i,
			                pi->name ? pi->name : "?", accel_abi_dtype_name(pi->dtype),
			                accel_abi_dtype_name(p->grad_dtype));
		if (p->numel && !p->work)
			return H->error(st->h, ACCEL_ERR_INVALID_ARG,
			                "zero store: piece %u (%s) has no working weights", i,
			                pi->name ? pi->name : "?");
		if (p->master_is_work &&
		    (st->o.place != ZERO_PLACE_DEVICE || pi->dtype != ACCEL_DTYPE_F32))
			return H->error(st->h, ACCEL_ERR_INVALID_ARG,
			                "zero store: piece %u (%s): master_is_work needs device "
			                "placement and an f32 parameter (placement %s, dtype %s)", i,
			                pi->name ? pi->name : "?", place_name(st->o.place),
			                accel_abi_dtype_name(pi->dtype));
	}
	return ACCEL_OK;
}

/* ---- making and freeing ----------------------------------------------------------- */

static int alloc_swap_bufs(zero_store *st);

static int store_alloc(zero_store *st)
{
	const accel_host_v1 *H = st->H;
	int r;
	int32_t dev = st->o.device, di = st->o.device_index;
	if (st->n && !(st->args = calloc(st->n, sizeof(*st->args))))
		return H->error(st->h, ACCEL_ERR_NOMEM, "zero store: out of memory");
	if (st->o.place == ZERO_PLACE_DEVICE) {
		uint64_t own = 0;
		for (uint32_t i = 0; i < st->n; i++)
			if (!st->pc[i].p.master_is_work)
				own += st->pc[i].p.numel;
		if (own && (r = H->mem_alloc(st->h, ACCEL_MEM_MASTER, dev, di, own * 4, ACCEL_MEMF_ZERO,
		                             (void **)&st->master)))
			return r;
		own = 0;
		for (uint32_t i = 0; i < st->n; i++) {
			piece_rt *p = &st->pc[i];
			if (p->p.master_is_work) {
				p->master = p->p.work;
			} else {
				p->master = st->master ? st->master + own : NULL;
				own += p->p.numel;
			}
		}
		for (uint32_t k = 0; k < st->o.n_state && st->numel; k++)
			if ((r = H->mem_alloc(st->h, ACCEL_MEM_OPTIMIZER, dev, di, st->numel * 4,
			                      ACCEL_MEMF_ZERO, (void **)&st->state[k])))
				return r;
		return ACCEL_OK;
	}

	uint32_t pin = st->on_gpu && st->o.pin_memory ? ACCEL_MEMF_PINNED : 0;
	st->sg = st->o.sub_group_size ? st->o.sub_group_size : ZERO_DEFAULT_SUB_GROUP;
	if (st->sg > st->numel)
		st->sg = st->numel;
	st->n_sg = st->sg ? (st->numel + st->sg - 1) / st->sg : 0;
	if (st->o.place == ZERO_PLACE_NVME && st->numel) {
		/* the directory checked before any memory is taken */
		st->blk_stride = align_up((uint64_t)(1 + st->o.n_state) * st->sg * 4, SWAP_ALIGN);
		if ((r = zero_nvme_preflight(H, st->h, st->o.nvme_key, st->o.nvme_path,
		                             st->blk_stride * st->n_sg)))
			return r;
	}
	st->async = st->on_gpu && ACCEL_HOST_HAS(H, op_copy_async) &&
	            ACCEL_HOST_HAS(H, event_record) && ACCEL_HOST_HAS(H, event_sync) &&
	            ACCEL_HOST_HAS(H, event_free);
	/* two staging slots overlap neighbouring sub-groups (zero_estimate.c
	 * counts them: change both together) */
	if (st->on_gpu && st->numel)
		for (int i = 0; i < 2; i++)
			if ((r = H->mem_alloc(st->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0, st->sg * 4, pin,
			                      &st->gstage[i])) ||
			    (r = H->mem_alloc(st->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0, st->sg * 4, pin,
			                      &st->wstage[i])))
				return r;
	if (st->on_gpu && !st->async)
		H->log(st->h, ACCEL_LOG_DEBUG,
		       "zero store: this host has no op_copy_async/event_record: gradient and "
		       "weight copies of the offloaded step are synchronous (no overlap)");
	if (st->o.place == ZERO_PLACE_CPU) {
		if (!st->numel)
			return ACCEL_OK;
		if ((r = H->mem_alloc(st->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0, st->numel * 4,
		                      ACCEL_MEMF_ZERO | pin, (void **)&st->master)))
			return r;
		for (uint32_t i = 0; i < st->n; i++)
			st->pc[i].master = st->master + st->pc[i].at;
		for (uint32_t k = 0; k < st->o.n_state; k++)
			if ((r = H->mem_alloc(st->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0, st->numel * 4,
			                      ACCEL_MEMF_ZERO | pin, (void **)&st->state[k])))
				return r;
		return ACCEL_OK;
	}
	return alloc_swap_bufs(st);
}

int zero_store_new(const accel_host_v1 *H, accel_host *h, const zero_store_opts *o,
                   const zero_piece *pieces, uint32_t n, zero_store **ret_store)
{
	zero_store *st = NULL;
	int r;
	if (!H || !o || !ret_store)
		return H && H->error ? H->error(h, ACCEL_ERR_INVALID_ARG,
		                                "zero_store_new: NULL options or ret_store")
		                     : ACCEL_ERR_INVALID_ARG;
	if (o->place > ZERO_PLACE_NVME)
		return H->error(h, ACCEL_ERR_INVALID_ARG,
		                "zero store: placement %u is not device (0), cpu (1) or nvme (2)",
		                o->place);
	if (o->n_state > ZERO_MAX_STATE)
		return H->error(h, ACCEL_ERR_INVALID_ARG,
		                "zero store: %u optimizer state arrays; at most %d", o->n_state,
		                ZERO_MAX_STATE);
	if (!(st = calloc(1, sizeof(*st))))
		return H->error(h, ACCEL_ERR_NOMEM, "zero store: out of memory");
	st->H = H;
	st->h = h;
	st->o = *o;
	st->on_gpu = o->device != ACCEL_DEVICE_CPU;
	if (o->place == ZERO_PLACE_NVME) {
		const char *key = o->nvme_key ? o->nvme_key : "zero_optimization.offload_optimizer.nvme_path";
		if (!o->nvme_path || !*o->nvme_path) {
			r = H->error(h, ACCEL_ERR_CONFIG,
			             "%s: NVMe offload needs a directory for its swap file: set %s", key, key);
			goto fail;
		}
		if (o->buffer_count < 2) {
			r = H->error(h, ACCEL_ERR_CONFIG,
			             "zero_optimization.offload_optimizer.buffer_count: %u; NVMe offload "
			             "needs at least 2 (4 is DeepSpeed's default; 3 or more overlap the "
			             "next read and the last write with the step)", o->buffer_count);
			goto fail;
		}
		if (!(st->nvme_path = strdup(o->nvme_path)) || !(st->nvme_key = strdup(key))) {
			r = H->error(h, ACCEL_ERR_NOMEM, "zero store: out of memory");
			goto fail;
		}
		st->o.nvme_path = st->nvme_path;
		st->o.nvme_key = st->nvme_key;
	} else {
		st->o.nvme_path = st->o.nvme_key = NULL;
	}
	if (n && !(st->pc = calloc(n, sizeof(*st->pc)))) {
		r = H->error(h, ACCEL_ERR_NOMEM, "zero store: out of memory");
		goto fail;
	}
	if ((r = check_pieces(st, pieces, n, 0)))
		goto fail;
	st->n = n;
	{
		const accel_model_v1 *m = n ? H->model(h) : NULL;
		uint64_t at = 0;
		for (uint32_t i = 0; i < n; i++) {
			st->pc[i].p = pieces[i];
			st->pc[i].at = at;
			st->pc[i].work_dtype = ACCEL_MODEL_PARAM(m, pieces[i].param)->dtype;
			at += pieces[i].numel;
		}
		st->numel = at;
	}
	if ((r = store_alloc(st)))
		goto fail;
	H->log(h, ACCEL_LOG_DEBUG, "zero store: %llu elements in %u pieces, placement %s, %u "
	       "state arrays", (unsigned long long)st->numel, n, place_name(o->place), o->n_state);
	if (o->place != ZERO_PLACE_DEVICE)
		H->log(h, ACCEL_LOG_DEBUG, "zero store: %llu sub-groups of %llu elements",
		       (unsigned long long)st->n_sg, (unsigned long long)st->sg);
	*ret_store = st;
	return ACCEL_OK;
fail:
	zero_store_free(st);
	return r;
}

uint64_t zero_store_numel(const zero_store *st)
{
	return st ? st->numel : 0;
}

zero_store *zero_store_free(zero_store *st)
{
	if (!st)
		return NULL;
	const accel_host_v1 *H = st->H;
	for (int i = 0; i < 2; i++) {
		if (st->gev[i])
			H->event_free(st->h, st->gev[i]);
		if (st->wev[i])
			H->event_free(st->h, st->wev[i]);
	}
	st->sw = zero_swap_close(st->sw);
	if (st->buf) {
		for (uint32_t i = 0; i < st->nbuf; i++)
			H->mem_free(st->h, st->buf[i].raw);
		free(st->buf);
	}
	for (int i = 0; i < 2; i++) {
		H->mem_free(st->h, st->gstage[i]);
		H->mem_free(st->h, st->wstage[i]);
	}
	H->mem_free(st->h, st->master);
	for (int k = 0; k < ZERO_MAX_STATE; k++)
		H->mem_free(st->h, st->state[k]);
	free(st->args);
	free(st->pc);
	free(st->nvme_path);
	free(st->nvme_key);
	free(st);
	return NULL;
}

int zero_store_set_pieces(zero_store *st, const zero_piece *pieces, uint32_t n)
{
	if (!st)
		return ACCEL_ERR_INVALID_ARG;
	if (n != st->n)
		return st->H->error(st->h, ACCEL_ERR_INVALID_ARG,
		                    "zero store: set_pieces: %u pieces for a store of %u", n, st->n);
	int r = check_pieces(st, pieces, n, 1);
	if (r)
		return r;
	for (uint32_t i = 0; i < n; i++) {
		st->pc[i].p.work = pieces[i].work;
		st->pc[i].p.grad = pieces[i].grad;
		if (st->pc[i].p.master_is_work)
			st->pc[i].master = pieces[i].work;
	}
	return ACCEL_OK;
}

void zero_store_get_stats(const zero_store *st, zero_store_stats *ret)
{
	if (!ret)
		return;
	if (!st) {
		memset(ret, 0, sizeof(*ret));
		return;
	}
	*ret = st->stats;
}

/* ---- the swap file (NVMe placement) ----------------------------------------------- */

/* Elements and bytes of sub-group g, and its block in the swap file. */
static uint64_t sg_numel(const zero_store *st, uint64_t g)
{
	uint64_t s = g * st->sg;
	return st->numel - s < st->sg ? st->numel - s : st->sg;
}

static uint64_t sg_bytes(const zero_store *st, uint64_t g)
{
	return align_up((uint64_t)(1 + st->o.n_state) * sg_numel(st, g) * 4, SWAP_ALIGN);
}

static int alloc_swap_bufs(zero_store *st)
{
	const accel_host_v1 *H = st->H;
	int r;
	if (!st->numel)
		return ACCEL_OK;
	uint64_t bytes = st->blk_stride * st->n_sg;
	char tag[64];
	accel_world_v1 w = {sizeof(w), 0, 0, 0, 0, 0, 0};
	if (H->world && H->world(st->h, &w) == ACCEL_OK)
		snprintf(tag, sizeof(tag), "optimizer state, rank %d", w.rank);
	else
		snprintf(tag, sizeof(tag), "optimizer state");
	if ((r = zero_swap_open(H, st->h, st->o.nvme_path, tag, bytes, &st->o.aio, &st->sw)))
		return r;
	/* sub-group g uses buffer g mod nbuf: more buffers than sub-groups
	 * would never be used (with one sub-group, one buffer; zero_estimate.c
	 * counts min(buffer_count, sub-groups): change both together) */
	st->nbuf = st->o.buffer_count;
	if (st->nbuf > st->n_sg)
		st->nbuf = (uint32_t)st->n_sg;
	if (!(st->buf = calloc(st->nbuf, sizeof(*st->buf))))
		return H->error(st->h, ACCEL_ERR_NOMEM, "zero store: out of memory");
	uint64_t align = zero_swap_align(st->sw);
	for (uint32_t i = 0; i < st->nbuf; i++) {
		if ((r = H->mem_alloc(st->h, ACCEL_MEM_OFFLOAD, ACCEL_DEVICE_CPU, 0,
		                      st->blk_stride + align, 0, &st->buf[i].raw)))
			return r;
		st->buf[i].data = (float *)(void *)align_up((uint64_t)(uintptr_t)st->buf[i].raw, align);
	}
	if (st->o.buffer_count < 3)
		H->log(st->h, ACCEL_LOG_DEBUG,
		       "zero store: %u NVMe buffers: the next sub-group's read waits for the "
		       "step (no read-ahead; 3 or more buffers overlap reads and writes with it)",
		       st->o.buffer_count);
	H->log(st->h, ACCEL_LOG_INFO,
	       "zero store: optimizer state in a %.2f GiB swap under %s (%s I/O), %u host "
	       "buffers of one sub-group (%.2f GiB; sub_group_size sets it)",
	       (double)bytes / 1073741824.0, st->o.nvme_path,
	       zero_swap_direct(st->sw) ? "O_DIRECT" : "buffered", st->nbuf,
	       (double)st->nbuf * (double)(st->blk_stride + align) / 1073741824.0);
	return ACCEL_OK;
}

static int swap_wait(zero_store *st, uint64_t ticket)
{
	double t0 = now_s();
	int r = zero_swap_wait(st->sw, ticket);
	st->stats.io_wait_seconds += now_s() - t0;
	return r;
}

/* Make buffer b free: its pending transfers complete. */
static int buf_settle(zero_store *st, swap_buf *b)
{
	int r = ACCEL_OK;
	if (b->rd_pending) {
		b->rd_pending = 0;
		r = swap_wait(st, b->rd_ticket);
	}
	if (b->wr_pending) {
		b->wr_pending = 0;
		int r2 = swap_wait(st, b->wr_ticket);
		r = r ? r : r2;
	}
	return r;
}

static int buf_read(zero_store *st, swap_buf *b, uint64_t g)
{
	int r = buf_settle(st, b);
	if (r)
		return r;
	uint64_t len = sg_bytes(st, g);
	if ((r = zero_swap_read(st->sw, g * st->blk_stride, b->data, len, &b->rd_ticket)))
		return r;
	b->rd_pending = 1;
	b->group = g;
	st->stats.bytes_swapped_in += len;
	return ACCEL_OK;
}

static int buf_write(zero_store *st, swap_buf *b)
{
	uint64_t len = sg_bytes(st, b->group);
	int r = zero_swap_write(st->sw, b->group * st->blk_stride, b->data, len, &b->wr_ticket);
	if (r)
		return r;
	b->wr_pending = 1;
	st->stats.bytes_swapped_out += len;
	return ACCEL_OK;
}

static int bufs_settle(zero_store *st)
{
	int r = ACCEL_OK;
	for (uint32_t i = 0; st->buf && i < st->nbuf; i++) {
		int r2 = buf_settle(st, &st->buf[i]);
		r = r ? r : r2;
	}
	return r;
}

/* ---- array access (checkpoints, initial masters) ------------------------------------ */

/* Where array `array` of elements [x, x + cnt) lives on the host, for the
 * CPU placement and for a swap buffer holding sub-group g. */
static int ranges(zero_store *st, uint32_t array, uint64_t at, const accel_view *v, int write)
{
	const accel_host_v1 *H = st->H;
	int r = ACCEL_OK;
	const char *what = write ? "zero_store_write" : "zero_store_read";
	if (!v || v->numel == 0)
		return ACCEL_OK;
	if (array > st->o.n_state)
		return H->error(st->h, ACCEL_ERR_INVALID_ARG,
		                "%s: array %u; the store has the masters (0) and %u state arrays",
		                what, array, st->o.n_state);
	if (at > st->numel || v->numel > st->numel - at)
		return H->error(st->h, ACCEL_ERR_INVALID_ARG,
		                "%s: elements [%llu, %llu) past the store's %llu", what,
		                (unsigned long long)at, (unsigned long long)(at + v->numel),
		                (unsigned long long)st->numel);
	if (!float_dtype(v->dtype) || !v->data)
		return H->error(st->h, ACCEL_ERR_INVALID_ARG,
		                "%s: the view must be f32, bf16 or f16 with data (dtype %s)", what,
		                accel_abi_dtype_name(v->dtype));
	size_t vsz = dsize(v->dtype);
	uint64_t end = at + v->numel;

	if (st->o.place == ZERO_PLACE_NVME) {
		if ((r = bufs_settle(st)))
			return r;
		swap_buf *b = &st->buf[0];
		for (uint64_t g = at / st->sg; g * st->sg < end; g++) {
			uint64_t s = g * st->sg, n = sg_numel(st, g);
			uint64_t lo = at > s ? at : s, hi = end < s + n ? end : s + n;
			if ((r = buf_read(st, b, g)) || (r = buf_settle(st, b)))
				return r;
			accel_view hv = mkview(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0,
			                       b->data + (uint64_t)array * n + (lo - s), hi - lo);
			accel_view uv = *v;
			uv.data = (char *)v->data + (lo - at) * vsz;
			uv.numel = hi - lo;
			if ((r = write ? xcopy(st, &hv, &uv) : xcopy(st, &uv, &hv)))
				return r;
			if (write && ((r = buf_write(st, b)) || (r = buf_settle(st, b))))
				return r;
		}
		return ACCEL_OK;
	}

	int32_t dev = st->o.place == ZERO_PLACE_DEVICE ? st->o.device : ACCEL_DEVICE_CPU;
	int32_t di = st->o.place == ZERO_PLACE_DEVICE ? st->o.device_index : 0;
	for (uint32_t i = piece_at(st, at); i < st->n && st->pc[i].at < end; i++) {
		piece_rt *p = &st->pc[i];
		uint64_t lo = at > p->at ? at : p->at;
		uint64_t hi = end < p->at + p->p.numel ? end : p->at + p->p.numel;
		if (hi <= lo)
			continue;
		float *base = array == 0 ? p->master : st->state[array - 1] + p->at;
		int32_t bdev = dev, bdi = di;
		if (array == 0 && p->p.master_is_work) {   /* the working weights, f32 */
			bdev = st->o.device;
			bdi = st->o.device_index;
		}
		accel_view sv = mkview(ACCEL_DTYPE_F32, bdev, bdi, base + (lo - p->at), hi - lo);
		accel_view uv = *v;
		uv.data = (char *)v->data + (lo - at) * vsz;
		uv.numel = hi - lo;
		if ((r = write ? xcopy(st, &sv, &uv) : xcopy(st, &uv, &sv)))
			return r;
	}
	return ACCEL_OK;
}

int zero_store_read(zero_store *st, uint32_t array, uint64_t at, const accel_view *dst)
{
	return st ? ranges(st, array, at, dst, 0) : ACCEL_ERR_INVALID_ARG;
}

int zero_store_write(zero_store *st, uint32_t array, uint64_t at, const accel_view *src)
{
	return st ? ranges(st, array, at, src, 1) : ACCEL_ERR_INVALID_ARG;
}

int zero_store_write_param(zero_store *st, const zero_piece *pieces, const uint64_t *piece_at,
                           uint32_t n, uint32_t *next, uint32_t param, float *values)
{
	int r;
	for (; *next < n && pieces[*next].param == param; (*next)++) {
		const zero_piece *z = &pieces[*next];
		accel_view mv = mkview(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, values + z->param_offset,
		                       z->numel);
		if ((r = zero_store_write(st, 0, piece_at[*next], &mv)))
			return r;
	}
	return ACCEL_OK;
}

/* work = cast(master) for the part [lo, hi) of piece p whose masters are at
 * `m` (host or the parameters' device). */
static int work_from(zero_store *st, piece_rt *p, uint64_t lo, uint64_t hi, float *m,
                     int32_t mdev, int32_t mdi)
{
	accel_view mv = mkview(ACCEL_DTYPE_F32, mdev, mdi, m, hi - lo);
	accel_view wv = mkview(p->work_dtype, st->o.device, st->o.device_index,
	                       (char *)p->p.work + (lo - p->at) * dsize(p->work_dtype), hi - lo);
	return xcopy(st, &wv, &mv);
}

int zero_store_refresh_work(zero_store *st)
{
	int r;
	if (!st)
		return ACCEL_ERR_INVALID_ARG;
	if (st->o.place == ZERO_PLACE_NVME) {
		if ((r = bufs_settle(st)))
			return r;
		swap_buf *b = st->buf ? &st->buf[0] : NULL;
		for (uint64_t g = 0; g < st->n_sg; g++) {
			uint64_t s = g * st->sg, e = s + sg_numel(st, g);
			if ((r = buf_read(st, b, g)) || (r = buf_settle(st, b)))
				return r;
			for (uint32_t i = piece_at(st, s); i < st->n && st->pc[i].at < e; i++) {
				piece_rt *p = &st->pc[i];
				uint64_t lo = s > p->at ? s : p->at;
				uint64_t hi = e < p->at + p->p.numel ? e : p->at + p->p.numel;
				if (hi > lo && (r = work_from(st, p, lo, hi, b->data + (lo - s),
				                              ACCEL_DEVICE_CPU, 0)))
					return r;
			}
		}
		return ACCEL_OK;
	}
	for (uint32_t i = 0; i < st->n; i++) {
		piece_rt *p = &st->pc[i];
		if (p->p.master_is_work || !p->p.numel)
			continue;
		int dev = st->o.place == ZERO_PLACE_DEVICE;
		if ((r = work_from(st, p, p->at, p->at + p->p.numel, p->master,
		                   dev ? st->o.device : ACCEL_DEVICE_CPU, dev ? st->o.device_index : 0)))
			return r;
	}
	return ACCEL_OK;
}

/* ---- the step ------------------------------------------------------------------------ */

/* Device placement: every piece at once.  On the host (CPU training
 * without offload) the pieces go to optim_step_n together, so the step
 * runs on the rank's threads too; on a GPU one optim_step per piece
 * (enqueued on the stream). */
static int step_device(zero_store *st, double grad_scale, const double *grad_scale_dev)
{
	const accel_host_v1 *H = st->H;
	int r;
	int batch = !st->on_gpu && ACCEL_HOST_HAS(H, optim_step_n);
	uint32_t na = 0;
	for (uint32_t i = 0; i < st->n; i++) {
		piece_rt *p = &st->pc[i];
		if (!p->p.numel)
			continue;
		if (!p->p.grad)
			return H->error(st->h, ACCEL_ERR_STATE,
			                "zero store: piece %u (parameter %u) has no gradient to step "
			                "with (zero_store_set_pieces)", i, p->p.param);
		accel_optim_args_v1 *a = &st->args[batch ? na++ : 0];
		memset(a, 0, sizeof(*a));
		a->struct_size = sizeof(*a);
		a->param = p->p.param;
		a->offset = p->p.param_offset;
		a->master = mkview(ACCEL_DTYPE_F32, st->o.device, st->o.device_index, p->master,
		                   p->p.numel);
		a->grad = mkview(p->p.grad_dtype, st->o.device, st->o.device_index, (void *)p->p.grad,
		                 p->p.numel);
		for (uint32_t k = 0; k < st->o.n_state; k++)
			a->state[k] = st->state[k] + p->at;
		a->grad_scale = grad_scale;
		a->grad_scale_dev = grad_scale_dev;
		if (!batch && (r = H->optim_step(st->h, a)))
			return r;
	}
	if (batch && na && (r = H->optim_step_n(st->h, st->args, na, st->o.n_threads)))
		return r;
	for (uint32_t i = 0; i < st->n; i++) {
		piece_rt *p = &st->pc[i];
		if (p->p.numel && !p->p.master_is_work &&
		    (r = work_from(st, p, p->at, p->at + p->p.numel, p->master, st->o.device,
		                   st->o.device_index)))
			return r;
	}
	return ACCEL_OK;
}

/* GPU: enqueue the device-to-host copies of sub-group g's gradients into
 * staging slot `slot` (same dtype; the step reads them there). */
static int grads_fetch(zero_store *st, uint64_t g, int slot)
{
	uint64_t s = g * st->sg, e = s + sg_numel(st, g);
	int r;
	for (uint32_t i = piece_at(st, s); i < st->n && st->pc[i].at < e; i++) {
		piece_rt *p = &st->pc[i];
		uint64_t lo = s > p->at ? s : p->at;
		uint64_t hi = e < p->at + p->p.numel ? e : p->at + p->p.numel;
		if (hi <= lo)
			continue;
		size_t gs = dsize(p->p.grad_dtype);
		accel_view dv = mkview(p->p.grad_dtype, ACCEL_DEVICE_CPU, 0,
		                       (char *)st->gstage[slot] + (lo - s) * 4, hi - lo);
		accel_view sv = mkview(p->p.grad_dtype, st->o.device, st->o.device_index,
		                       (char *)p->p.grad + (lo - p->at) * gs, hi - lo);
		if ((r = copy_async(st, &dv, &sv)))
			return r;
	}
	return ev_record(st, &st->gev[slot]);
}

/* Step sub-group g whose masters are at `master` and state arrays at
 * state[k] (host), gradients in slot `slot` (GPU) or in place (CPU), then
 * update the working weights. */
static int step_group(zero_store *st, uint64_t g, float *master, float *const state[],
                      int slot, double grad_scale)
{
	const accel_host_v1 *H = st->H;
	uint64_t s = g * st->sg, e = s + sg_numel(st, g);
	uint32_t na = 0, first = piece_at(st, s);
	int r;
	for (uint32_t i = first; i < st->n && st->pc[i].at < e; i++) {
		piece_rt *p = &st->pc[i];
		uint64_t lo = s > p->at ? s : p->at;
		uint64_t hi = e < p->at + p->p.numel ? e : p->at + p->p.numel;
		if (hi <= lo)
			continue;
		if (!p->p.grad)
			return H->error(st->h, ACCEL_ERR_STATE,
			                "zero store: piece %u (parameter %u) has no gradient to step "
			                "with (zero_store_set_pieces)", i, p->p.param);
		accel_optim_args_v1 *a = &st->args[na++];
		memset(a, 0, sizeof(*a));
		a->struct_size = sizeof(*a);
		a->param = p->p.param;
		a->offset = p->p.param_offset + (lo - p->at);
		a->master = mkview(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, master + (lo - s), hi - lo);
		void *gp = st->on_gpu ? (char *)st->gstage[slot] + (lo - s) * 4
		                      : (char *)(uintptr_t)p->p.grad + (lo - p->at) * dsize(p->p.grad_dtype);
		a->grad = mkview(p->p.grad_dtype, ACCEL_DEVICE_CPU, 0, gp, hi - lo);
		for (uint32_t k = 0; k < st->o.n_state; k++)
			a->state[k] = state[k] + (lo - s);
		a->grad_scale = grad_scale;
	}
	if (ACCEL_HOST_HAS(H, optim_step_n)) {
		if ((r = H->optim_step_n(st->h, st->args, na, st->o.n_threads)))
			return r;
	} else {
		for (uint32_t j = 0; j < na; j++)
			if ((r = H->optim_step(st->h, &st->args[j])))
				return r;
	}
	/* the working weights */
	if (st->on_gpu && (r = ev_wait(st, &st->wev[slot])))   /* slot's last upload */
		return r;
	for (uint32_t i = first; i < st->n && st->pc[i].at < e; i++) {
		piece_rt *p = &st->pc[i];
		uint64_t lo = s > p->at ? s : p->at;
		uint64_t hi = e < p->at + p->p.numel ? e : p->at + p->p.numel;
		if (hi <= lo)
			continue;
		if (!st->on_gpu) {
			if ((r = work_from(st, p, lo, hi, master + (lo - s), ACCEL_DEVICE_CPU, 0)))
				return r;
			continue;
		}
		size_t ws = dsize(p->work_dtype);
		accel_view mv = mkview(ACCEL_DTYPE_F32, ACCEL_DEVICE_CPU, 0, master + (lo - s), hi - lo);
		accel_view tv = mkview(p->work_dtype, ACCEL_DEVICE_CPU, 0,
		                       (char *)st->wstage[slot] + (lo - s) * 4, hi - lo);
		accel_view wv = mkview(p->work_dtype, st->o.device, st->o.device_index,
		                       (char *)p->p.work + (lo - p->at) * ws, hi - lo);
		if ((r = H->op_copy(st->h, &tv, &mv)) || (r = copy_async(st, &wv, &tv)))
			return r;
	}
	return st->on_gpu ? ev_record(st, &st->wev[slot]) : ACCEL_OK;
}

static int step_offload(zero_store *st, double grad_scale)
{
	int r = ACCEL_OK;
	uint64_t G = st->n_sg;
	float *state[ZERO_MAX_STATE] = {0};
	int nvme = st->o.place == ZERO_PLACE_NVME;
	/* read-ahead: as far as buffer_count allows (sub-group j goes to
	 * buffer j mod nbuf, whose last sub-group, j - nbuf <= g - 2, was
	 * written out; with a buffer per sub-group, nbuf = G, no buffer is
	 * reused and the depth, buffer_count - 2, only bounds the reads in
	 * flight) */
	uint64_t next_read = 0,
	         depth = nvme && st->o.buffer_count >= 3 ? st->o.buffer_count - 2 : 0;

	if (st->on_gpu && G && (r = grads_fetch(st, 0, 0)))
		goto out;
	for (uint64_t g = 0; g < G; g++) {
		int slot = (int)(g & 1);
		if (st->on_gpu && g + 1 < G && (r = grads_fetch(st, g + 1, (int)((g + 1) & 1))))
			goto out;
		float *master;
		if (nvme) {
			/* reads ahead as far as the buffers allow: the buffer of
			 * sub-group j last held j - nbuf, written out at g - 2 */
			for (; next_read < G && next_read <= g + depth; next_read++)
				if ((r = buf_read(st, &st->buf[next_read % st->nbuf], next_read)))
					goto out;
			swap_buf *b = &st->buf[g % st->nbuf];
			if (b->rd_pending) {
				b->rd_pending = 0;
				if ((r = swap_wait(st, b->rd_ticket)))
					goto out;
			}
			uint64_t n = sg_numel(st, g);
			master = b->data;
			for (uint32_t k = 0; k < st->o.n_state; k++)
				state[k] = b->data + (uint64_t)(k + 1) * n;
		} else {
			master = st->master + g * st->sg;
			for (uint32_t k = 0; k < st->o.n_state; k++)
				state[k] = st->state[k] + g * st->sg;
		}
		if (st->on_gpu && (r = ev_wait(st, &st->gev[slot])))
			goto out;
		if ((r = step_group(st, g, master, state, slot, grad_scale)))
			goto out;
		if (nvme && (r = buf_write(st, &st->buf[g % st->nbuf])))
			goto out;
	}
out:
	/* leave nothing in flight, also after a failure */
	for (int i = 0; i < 2; i++) {
		int r2 = ev_wait(st, &st->gev[i]);
		int r3 = ev_wait(st, &st->wev[i]);
		r = r ? r : r2 ? r2 : r3;
	}
	if (nvme) {
		int r2 = bufs_settle(st);
		r = r ? r : r2;
	}
	return r;
}

int zero_store_step(zero_store *st, double grad_scale, const double *grad_scale_dev)
{
	if (!st)
		return ACCEL_ERR_INVALID_ARG;
	if (grad_scale_dev && (st->o.place != ZERO_PLACE_DEVICE || !st->on_gpu))
		return st->H->error(st->h, ACCEL_ERR_INVALID_ARG,
		                    "zero store: a device-side gradient factor (grad_scale_dev) needs "
		                    "the optimizer on the GPU; this store's placement is %s on device "
		                    "%d (the strategy must pass the host factor: no grad_stats_device "
		                    "with offload)", place_name(st->o.place), st->o.device);
	double t0 = now_s();
	int r = st->o.place == ZERO_PLACE_DEVICE ? step_device(st, grad_scale, grad_scale_dev)
	                                         : step_offload(st, grad_scale);
	st->stats.step_seconds += now_s() - t0;
	if (!r)
		st->stats.steps++;
	return r;
}

int zero_store_copy(void *st, uint32_t array, uint64_t at, const accel_view *v, int to_view)
{
	return to_view ? zero_store_read(st, array, at, v) : zero_store_write(st, array, at, v);
}
