/* SPDX-License-Identifier: MIT */
/* plugins/ddp/ddp_estimate.c: what ddp would allocate for a model, without
 * the model (accel_plugin_v1.estimate_memory, ABI 1.6; `accel
 * estimate-memory`).
 *
 * The same arithmetic as wrap(): per parameter an f32 master (the working
 * copy too for f32 parameters, category PARAMS; else MASTER plus a working
 * copy in PARAMS), n_state f32 optimizer arrays (OPTIMIZER), and its
 * gradient in a bucket in the working dtype, starting on a 64-byte
 * boundary (GRADS).  Each gradient's padding is its own (ddp_bucket.c
 * rounds every offset up), so the bucket sizes do not change the total.
 * Everything is replicated: the world size does not change it either.
 * The description has no gradient or reduce dtypes, so the gradient dtype
 * is the working dtype and there are no reduce-dtype copies (BUFFERS 0). */
#include <stdio.h>

#include "ddp.h"

#define ALIGN_BYTES 64u

static void add_param(accel_estimate_out_v1 *out, uint64_t numel, uint32_t dtype,
                      uint32_t n_state)
{
	uint64_t *dev = out->bytes[ACCEL_EST_DEVICE];
	uint64_t es = accel_abi_dtype_size(dtype);
	uint64_t align = ALIGN_BYTES / es;
	if (dtype == ACCEL_DTYPE_F32) {
		dev[ACCEL_MEM_PARAMS] += numel * 4;
	} else {
		dev[ACCEL_MEM_MASTER] += numel * 4;
		dev[ACCEL_MEM_PARAMS] += numel * es;
	}
	dev[ACCEL_MEM_OPTIMIZER] += (uint64_t)n_state * numel * 4;
	dev[ACCEL_MEM_GRADS] += (numel + align - 1) / align * align * es;
}

int ddp_estimate_memory(const accel_host_v1 *host, accel_host *h, const accel_estimate_in_v1 *in,
                        accel_estimate_out_v1 *out)
{
	if (!in || !out || !ACCEL_STRUCT_HAS(in, accel_estimate_in_v1, n_state) ||
	    !ACCEL_STRUCT_HAS(out, accel_estimate_out_v1, variant))
		return host->error(h, ACCEL_ERR_INVALID_ARG, "estimate_memory: in or out is missing "
		                   "or older than this plugin (ABI 1.6)");
	if (in->n_state > DDP_MAX_STATE)
		return host->error(h, ACCEL_ERR_UNSUPPORTED, "the optimizer keeps %u state arrays; "
		                   "ddp supports up to %d", in->n_state, DDP_MAX_STATE);
	uint32_t n = in->n_params ? in->n_params : 1;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t dtype = in->n_params && in->dtype ? in->dtype[i] : in->default_dtype;
		if (!accel_abi_dtype_size(dtype))
			return host->error(h, ACCEL_ERR_INVALID_ARG, "estimate_memory: parameter %u has "
			                   "an unknown dtype %u", i, dtype);
		add_param(out, in->n_params ? in->numel[i] : in->total_numel, dtype, in->n_state);
	}
	snprintf(out->variant, sizeof(out->variant), "ddp");
	return ACCEL_OK;
}
