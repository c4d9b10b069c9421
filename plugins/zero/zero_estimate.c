/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_estimate.c: per-rank bytes the zero strategy allocates
 * (ABI 1.6 slot estimate_memory), computed from the same layout rules as
 * zero_partition.c (groups, padding, blocks, pieces), and the memory
 * report logged after the first optimizer step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

typedef struct est_model {
	uint32_t n_params, n_units;
	const uint64_t *numel;
	const uint32_t *dtype;      /* NULL: all dflt */
	uint32_t dflt;
	const uint64_t *unit_numel;
	uint64_t total;
} est_model;

static uint32_t dt_of(const est_model *m, uint32_t i)
{
	return m->dtype ? m->dtype[i] : m->dflt;
}

#define SWAP_ALIGN 4096   /* zero_store.c: swap blocks and O_DIRECT buffers */

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* What zero_store.c allocates for `owned` elements (owned_f32 of them of
 * f32 parameters): masters and state with the parameters; in host memory;
 * or a swap file of sub-group blocks plus buffer_count host buffers of one
 * block each; on a GPU also four staging buffers of a sub-group. */
static void store_bytes(const zero_cfg *c, uint64_t owned, uint64_t owned_f32, uint32_t n_state,
                        int on_device, uint64_t bytes[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES])
{
	if (c->opt_place == ZERO_PLACE_DEVICE) {
		/* an f32 parameter's master is its working weights */
		bytes[ACCEL_EST_DEVICE][ACCEL_MEM_MASTER] += (owned - owned_f32) * 4;
		bytes[ACCEL_EST_DEVICE][ACCEL_MEM_OPTIMIZER] += owned * 4 * n_state;
		return;
	}
	if (!owned)
		return;
	uint64_t sg = (uint64_t)c->sub_group_size;
	if (!sg || sg > owned)
		sg = owned;
	if (on_device)
		bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += 4 * sg * 4;
	if (c->opt_place == ZERO_PLACE_CPU) {
		bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += owned * 4 * (1 + n_state);
		return;
	}
	uint64_t n_sg = (owned + sg - 1) / sg;
	uint64_t blk = align_up((uint64_t)(1 + n_state) * sg * 4, SWAP_ALIGN);
	uint64_t nbuf = (uint64_t)c->opt_buffer_count;
	if (nbuf > n_sg)
		nbuf = n_sg;   /* zero_store.c: buffer g mod nbuf for sub-group g */
	bytes[ACCEL_EST_NVME][ACCEL_MEM_OFFLOAD] += blk * n_sg;
	bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += nbuf * (blk + SWAP_ALIGN);
}

/* bytes[place][category] for rank `rank` of `W` under config c. */
static int estimate(const zero_cfg *c, const est_model *m, uint32_t W, uint32_t rank,
                    uint32_t n_state, int on_device,
                    uint64_t bytes[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES])
{
	uint64_t one = m->total;
	const uint64_t *numel = m->n_params ? m->numel : &one;
	uint32_t np = m->n_params ? m->n_params : 1;
	uint64_t target = c->stage == 3 ? 0 : (uint64_t)c->reduce_bucket_size;
	uint64_t *at = calloc(np, sizeof(uint64_t));
	shard_piece *sp = calloc(np, sizeof(*sp));
	if (!at || !sp) {
		free(at);
		free(sp);
		return ACCEL_ERR_NOMEM;
	}
	memset(bytes, 0, sizeof(uint64_t) * ACCEL_EST_PLACES * ACCEL_EST_CATEGORIES);
	/* units -> parameter runs (consecutive, their numel summing to the unit's) */
	uint32_t pi = 0, u = 0, nu = m->n_units ? m->n_units : 1;
	uint64_t owned = 0, owned_f32 = 0, pstage = 0;
	/* stage 3: the units kept for the job (zero3_keeps_units) */
	uint64_t k_sum = 0, k_top1 = 0, k_top2 = 0, k_work = 0, k_grad = 0;
	while (pi < np) {
		/* one group: units until target */
		uint32_t g0 = pi, dt = dt_of(m, pi);
		uint64_t gnumel = 0;
		while (pi < np && u < nu) {
			uint64_t un = m->n_units ? m->unit_numel[u] : one, got = 0;
			if (gnumel && dt_of(m, pi) != dt)
				break;
			while (pi < np && (got < un || got == 0)) {
				got += numel[pi];
				gnumel += numel[pi];
				pi++;
			}
			u++;
			if (gnumel >= target || target == 0)
				break;
		}
		if (u >= nu)
			while (pi < np) {   /* parameters past the units: last group */
				gnumel += numel[pi];
				pi++;
			}
		uint32_t gn = pi - g0;
		uint64_t padded = shard_padded(gnumel, W, ZERO_ALIGN), lo, blk;
		shard_block(padded, W, rank, &lo, &blk);
		shard_offsets(numel + g0, gn, at);
		uint32_t k = shard_pieces(at, numel + g0, gn, lo, blk, sp);
		uint64_t mine = 0;
		for (uint32_t j = 0; j < k; j++)
			mine += sp[j].numel;
		uint64_t ds = accel_abi_dtype_size(dt);
		if (c->stage < 3) {
			bytes[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS] += padded * ds;
			bytes[ACCEL_EST_DEVICE][c->stage == 2 ? ACCEL_MEM_BUFFERS : ACCEL_MEM_GRADS] +=
				padded * ds;
		} else {
			if (c->param_place == ZERO_PLACE_NVME) {
				/* zero_param_nvme.c: the block in the swap, one staging block */
				uint64_t b = align_up(blk * ds, SWAP_ALIGN);
				bytes[ACCEL_EST_NVME][ACCEL_MEM_PARAMS] += b;
				if (b + SWAP_ALIGN > pstage)
					pstage = b + SWAP_ALIGN;
			} else {
				bytes[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS] += blk * ds;
			}
			if ((double)gnumel <= c->persistence_threshold) {
				bytes[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS] += padded * ds;
			} else {
				k_sum += padded;
				k_work += padded * ds;
				if (padded > k_top1) {
					k_top2 = k_top1;
					k_top1 = padded;
				} else if (padded > k_top2) {
					k_top2 = padded;
				}
			}
			k_grad += padded * ds;   /* gradients in the parameters' dtype */
		}
		if (c->stage >= 2)
			bytes[ACCEL_EST_DEVICE][ACCEL_MEM_GRADS] +=
				blk * accel_abi_dtype_size(zero_acc_dtype(dt, c->grad_accum));
		uint64_t own = c->stage == 0 ? gnumel : mine;
		owned += own;
		if (dt == ACCEL_DTYPE_F32 && !(c->stage == 3 && c->param_place == ZERO_PLACE_NVME))
			owned_f32 += own;
	}
	free(at);
	free(sp);
	if (zero3_keeps_units(c, k_sum, k_top1, k_top2)) {
		bytes[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS] += k_work;
		bytes[ACCEL_EST_DEVICE][ACCEL_MEM_BUFFERS] += k_grad;
	}
	bytes[ACCEL_EST_DEVICE][ACCEL_MEM_BUFFERS] += 2 * sizeof(double);
	bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += pstage;
	store_bytes(c, owned, owned_f32, n_state, on_device, bytes);
	return ACCEL_OK;
}

static void label(const zero_cfg *c, char *buf, size_t cap)
{
	snprintf(buf, cap, "stage %lld, offload %s", (long long)c->stage,
	         c->opt_place == ZERO_PLACE_CPU ? "cpu" : c->opt_place == ZERO_PLACE_NVME ? "nvme"
	                                                                              : "none");
}

int zero_estimate_memory(const accel_host_v1 *host, accel_host *h, const accel_estimate_in_v1 *in,
                         accel_estimate_out_v1 *out)
{
	zero_cfg c;
	int r;
	if (!in || !out || in->world_size < 1)
		return host->error(h, ACCEL_ERR_INVALID_ARG, "estimate_memory needs a world "
		                   "size >= 1");
	if ((r = zero_read_config(host, h, &c, 1)))
		return r;
	est_model m = {in->n_params, in->n_units, in->numel, in->dtype, in->default_dtype,
	               in->unit_numel, in->total_numel};
	uint64_t b[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES];
	if ((r = estimate(&c, &m, (uint32_t)in->world_size, 0, in->n_state,
	                  in->device != ACCEL_DEVICE_CPU, b)))
		return host->error(h, r, "out of memory estimating");
	if (out->struct_size >= offsetof(accel_estimate_out_v1, bytes) + sizeof(out->bytes))
		memcpy(out->bytes, b, sizeof(b));
	if (out->struct_size >= offsetof(accel_estimate_out_v1, variant) + sizeof(out->variant))
		label(&c, out->variant, sizeof(out->variant));
	return ACCEL_OK;
}

static const char *const cat_names[] = {"params", "grads", "master", "optimizer", "buffers",
                                        "offload"};

/* After the first step: what this rank allocated (zero's own tally plus
 * the store's masters and state, which follow from its pieces) against
 * the estimate for this rank. */
void zero_log_memory(zero_state *s)
{
	const accel_model_v1 *mo = s->model;
	uint64_t *numel = calloc(mo->n_params + 1, sizeof(uint64_t));
	uint32_t *dtype = calloc(mo->n_params + 1, sizeof(uint32_t));
	uint64_t *un = calloc(mo->n_units + 1, sizeof(uint64_t));
	if (!numel || !dtype || !un)
		goto done;
	for (uint32_t i = 0; i < mo->n_params; i++) {
		numel[i] = ACCEL_MODEL_PARAM(mo, i)->numel;
		dtype[i] = ACCEL_MODEL_PARAM(mo, i)->dtype;
	}
	for (uint32_t u = 0; u < mo->n_units; u++)
		un[u] = ACCEL_MODEL_UNIT(mo, u)->numel;
	est_model m = {mo->n_params, mo->n_units, numel, dtype, 0, un, mo->total_numel};
	uint64_t est[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES], got[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES];
	if (estimate(&s->cfg, &m, s->W, s->rank, s->n_state,
	             s->groups[0].device != ACCEL_DEVICE_CPU, est))
		goto done;
	memcpy(got, s->mem, sizeof(got));
	/* the store's part follows from its pieces (zero_store.c allocates it
	 * through mem_alloc too, so accel_memory_stats counts it; the test
	 * compares that count with the estimate) */
	uint64_t owned = 0, owned_f32 = 0;
	for (uint32_t k = 0; k < s->n_pieces; k++) {
		owned += s->pieces[k].numel;
		owned_f32 += s->pieces[k].master_is_work ? s->pieces[k].numel : 0;
	}
	store_bytes(&s->cfg, owned, owned_f32, s->n_state, s->groups[0].device != ACCEL_DEVICE_CPU,
	            got);
	char line[512];
	int n = 0;
	for (uint32_t pl = 0; pl < ACCEL_EST_PLACES; pl++)
		for (uint32_t c = 0; c < ACCEL_MEM_CATEGORY_COUNT; c++) {
			if (!got[pl][c] && !est[pl][c])
				continue;
			n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s%s %llu (est %llu)",
			              n ? ", " : "", pl == ACCEL_EST_HOST ? "host " : pl == ACCEL_EST_NVME ? "nvme " : "",
			              cat_names[c], (unsigned long long)got[pl][c],
			              (unsigned long long)est[pl][c]);
			if (n >= (int)sizeof(line))
				break;
		}
	s->host->log(s->h, ACCEL_LOG_INFO, "memory after the first step, bytes (measured "
	             "vs estimated): %s; peak params %llu, peak grads %llu", line,
	             (unsigned long long)s->mem_peak[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS],
	             (unsigned long long)s->mem_peak[ACCEL_EST_DEVICE][ACCEL_MEM_GRADS]);
done:
	free(numel);
	free(dtype);
	free(un);
}
