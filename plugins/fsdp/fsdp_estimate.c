/* SPDX-License-Identifier: MIT */
/* plugins/fsdp/fsdp_estimate.c: per-rank bytes the fsdp strategy keeps
 * between steps (ABI 1.6 slot estimate_memory; `accel estimate-memory`),
 * from the same layout rules as fsdp_wrap.c: program units grouped into
 * FSDP units by the wrap policy (a run also closes where the dtype
 * changes), each padded to a multiple of the shard group (the world;
 * HYBRID_SHARD: the node) and cut into blocks, the rank's block of the
 * weights and of the reduced gradient, the optimizer store's masters and
 * state for the elements in its blocks (zero_store.c's allocations), the
 * clipping statistics buffer.  What a gather or a backward holds for a
 * while (the gathered flat parameters, full gradients, reduce-dtype
 * copies) is not counted, as the zero plugin's estimate counts none of
 * it: docs/fsdp.md gives that peak.
 *
 * The description has no unit names (TRANSFORMER_BASED_WRAP is laid out
 * as UNIT_WRAP: at most S - 1 padding elements per unit apart), no
 * gradient dtype (the working dtype) and no frozen parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

/* zero_store.c: the CPU placement's staging slots on a GPU, of one
 * sub-group each (two for gradients, two for weights) */
#define STORE_STAGES 4

typedef struct est_run {
	uint64_t numel;
	uint32_t dtype;
} est_run;

static void add_store(const fsdp_cfg *c, int store_on_gpu, uint64_t owned, uint64_t owned_f32,
                      uint32_t n_state, uint64_t bytes[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES])
{
	if (!c->cpu_offload) {
		/* an f32 block is its own master */
		bytes[ACCEL_EST_DEVICE][ACCEL_MEM_MASTER] += (owned - owned_f32) * 4;
		bytes[ACCEL_EST_DEVICE][ACCEL_MEM_OPTIMIZER] += owned * 4 * n_state;
		return;
	}
	if (!owned)
		return;
	/* fsdp_wrap.c's sub_group_size: everything at once */
	uint64_t sg = owned < 1000000000u ? owned : 1000000000u;
	if (store_on_gpu)
		bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += STORE_STAGES * sg * 4;
	bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += owned * 4 * (1 + n_state);
}

int fsdp_estimate_bytes(const fsdp_cfg *c, const accel_estimate_in_v1 *in, uint32_t S,
                        uint32_t srank, uint32_t n_state,
                        uint64_t bytes[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES])
{
	uint64_t one = in->total_numel;
	uint32_t np = in->n_params ? in->n_params : 1;
	uint32_t nu = in->n_units ? in->n_units : 1;
	const uint64_t *numel = in->n_params ? in->numel : &one;
	int on_gpu = in->device != ACCEL_DEVICE_CPU;
	int sharded = c->sharding != FSDP_NO_SHARD;
	int offloaded = sharded && c->cpu_offload;
	est_run *runs = calloc(nu + np, sizeof(*runs));
	if (!runs)
		return ACCEL_ERR_NOMEM;
	memset(bytes, 0, sizeof(uint64_t) * ACCEL_EST_PLACES * ACCEL_EST_CATEGORIES);

	/* program units (parameters consumed until the unit's count), then
	 * FSDP units by the policy */
	uint32_t pi = 0, n_runs = 0;
	for (uint32_t u = 0; u < nu && pi < np; u++) {
		uint64_t un = in->n_units ? in->unit_numel[u] : one, got = 0;
		uint32_t dt = in->n_params && in->dtype ? in->dtype[pi] : in->default_dtype;
		while (pi < np && (got < un || got == 0))
			got += numel[pi++];
		if (u + 1 == nu)
			while (pi < np)   /* parameters past the units: the last one's */
				got += numel[pi++];
		est_run *f = n_runs ? &runs[n_runs - 1] : NULL;
		int starts = !f || f->dtype != dt || c->wrap == FSDP_WRAP_UNIT ||
		             c->wrap == FSDP_WRAP_TRANSFORMER ||
		             (c->wrap == FSDP_WRAP_SIZE && f->numel >= (uint64_t)c->min_num_params);
		if (starts) {
			f = &runs[n_runs++];
			f->dtype = dt;
		}
		f->numel += got;
	}

	uint64_t owned = 0, owned_f32 = 0;
	for (uint32_t i = 0; i < n_runs; i++) {
		const est_run *f = &runs[i];
		uint64_t ds = accel_abi_dtype_size(f->dtype);
		uint64_t padded = shard_padded(f->numel, S, 1), lo = 0, blk = 0;
		shard_block(padded, S, srank, &lo, &blk);
		uint64_t mine = !sharded ? f->numel
		                : lo >= f->numel ? 0
		                : (lo + blk < f->numel ? blk : f->numel - lo);
		if (offloaded) {
			bytes[ACCEL_EST_HOST][ACCEL_MEM_OFFLOAD] += 2 * blk * ds;
		} else {
			uint64_t n = sharded ? blk : padded;
			bytes[ACCEL_EST_DEVICE][ACCEL_MEM_PARAMS] += n * ds;
			bytes[ACCEL_EST_DEVICE][ACCEL_MEM_GRADS] += n * ds;
		}
		owned += mine;
		if (f->dtype == ACCEL_DTYPE_F32)
			owned_f32 += mine;
	}
	free(runs);
	/* the store is on the host when the blocks are (fsdp_wrap.c) */
	add_store(c, on_gpu && !offloaded, owned, owned_f32, n_state, bytes);
	/* the clipping statistics: two doubles in host memory */
	bytes[on_gpu ? ACCEL_EST_HOST : ACCEL_EST_DEVICE][ACCEL_MEM_BUFFERS] += 2 * sizeof(double);
	return ACCEL_OK;
}

static const char *const sharding_names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                             "HYBRID_SHARD"};

int fsdp_estimate_memory(const accel_host_v1 *host, accel_host *h,
                         const accel_estimate_in_v1 *in, accel_estimate_out_v1 *out)
{
	fsdp_cfg c;
	int r;
	if (!in || !out || !ACCEL_STRUCT_HAS(in, accel_estimate_in_v1, n_state) ||
	    in->world_size < 1)
		return host->error(h, ACCEL_ERR_INVALID_ARG, "estimate_memory: in is missing, older "
		                   "than this plugin (ABI 1.6) or has a world size below 1");
	if ((r = fsdp_read_config(host, h, &c)))
		return r;
	if (in->n_state > ZERO_MAX_STATE)
		return host->error(h, ACCEL_ERR_UNSUPPORTED, "the optimizer keeps %u state arrays; "
		                   "fsdp supports up to %d", in->n_state, ZERO_MAX_STATE);
	uint32_t np = in->n_params ? in->n_params : 1;
	for (uint32_t i = 0; i < np; i++) {
		uint32_t dt = in->n_params && in->dtype ? in->dtype[i] : in->default_dtype;
		if (!accel_abi_dtype_size(dt))
			return host->error(h, ACCEL_ERR_INVALID_ARG, "estimate_memory: parameter %u has "
			                   "an unknown dtype %u", i, dt);
	}
	/* HYBRID_SHARD shards over a node's ranks (rank 0's block: the largest) */
	uint32_t S = (uint32_t)in->world_size;
	if (c.sharding == FSDP_HYBRID_SHARD && in->local_world_size >= 1 &&
	    in->local_world_size < in->world_size)
		S = (uint32_t)in->local_world_size;
	uint64_t b[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES];
	if ((r = fsdp_estimate_bytes(&c, in, S, 0, in->n_state, b)))
		return host->error(h, r, "out of memory estimating");
	if (ACCEL_STRUCT_HAS(out, accel_estimate_out_v1, bytes))
		memcpy(out->bytes, b, sizeof(b));
	if (ACCEL_STRUCT_HAS(out, accel_estimate_out_v1, variant))
		snprintf(out->variant, sizeof(out->variant), "%s%s",
		         sharding_names[c.sharding < 4 ? c.sharding : 0],
		         c.cpu_offload ? ", cpu_offload" : "");
	return ACCEL_OK;
}

/* The estimate for this rank's own layout, logged at wrap: the test
 * compares it with accel_memory_stats at the end of a run. */
void fsdp_log_estimate(fsdp_state *s)
{
	const accel_model_v1 *m = s->model;
	uint64_t *numel = calloc(m->n_params + 1, sizeof(uint64_t));
	uint32_t *dtype = calloc(m->n_params + 1, sizeof(uint32_t));
	uint64_t *un = calloc(m->n_units + 1, sizeof(uint64_t));
	uint64_t b[ACCEL_EST_PLACES][ACCEL_EST_CATEGORIES];
	if (!numel || !dtype || !un)
		goto done;
	for (uint32_t i = 0; i < m->n_params; i++) {
		numel[i] = ACCEL_MODEL_PARAM(m, i)->numel;
		dtype[i] = ACCEL_MODEL_PARAM(m, i)->dtype;
	}
	for (uint32_t u = 0; u < m->n_units; u++)
		un[u] = ACCEL_MODEL_UNIT(m, u)->numel;
	accel_estimate_in_v1 in = {
		.struct_size = sizeof(in),
		.world_size = (int32_t)s->W,
		.local_world_size = (int32_t)s->S,
		.device = s->units[0].device,
		.n_params = m->n_params,
		.n_units = m->n_units,
		.numel = numel,
		.dtype = dtype,
		.unit_numel = un,
		.total_numel = m->total_numel,
		.n_state = s->n_state,
	};
	if (fsdp_estimate_bytes(&s->cfg, &in, s->S, s->srank, s->n_state, b))
		goto done;
	static const char *const cat[] = {"params", "grads", "master", "optimizer", "buffers",
	                                  "offload"};
	char line[256];
	int n = 0;
	for (uint32_t k = 0; k < 6 && n < (int)sizeof(line); k++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s %llu", k ? ", " : "", cat[k],
		              (unsigned long long)(b[ACCEL_EST_DEVICE][k] + b[ACCEL_EST_HOST][k]));
	s->host->log(s->h, ACCEL_LOG_INFO, "memory estimate for rank %u, bytes kept between "
	             "steps: %s", s->rank, line);
done:
	free(numel);
	free(dtype);
	free(un);
}
