/* SPDX-License-Identifier: MIT */
/* core/sampler_gather.c: accel_gather_for_metrics, the collective half of
 * the sampler's metrics support.  core/sampler.c has the layout and
 * accel_sampler_compact(); this file stands apart because it needs the
 * context's collectives, and uses only the sampler's public getters. */
#include <stdlib.h>
#include <string.h>

#include "ctx-impl.h"
#include "sampler.h"

int accel_gather_for_metrics(accel_ctx *ctx, const accel_sampler *s, const void *send,
                             uint64_t per_sample, uint32_t dtype, void *recv,
                             uint64_t *ret_count)
{
	accel_sampler_info info = {.struct_size = sizeof(info)};
	accel_sampler_batch last = {.struct_size = sizeof(last)};
	void *tmp = NULL;
	size_t esize;
	int rc;

	if (!ctx)
		return ACCEL_ERR_INVALID_ARG;
	if (!s || !recv || !ret_count || per_sample == 0)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_gather_for_metrics: %s",
		                     !s ? "s is NULL" : !recv ? "recv is NULL" :
		                     !ret_count ? "ret_count is NULL" : "per_sample is 0");
	esize = accel_dtype_size(dtype);
	if (esize == 0)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "accel_gather_for_metrics: unknown dtype %u", dtype);
	if (accel_sampler_get_info(s, &info) != ACCEL_OK)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INTERNAL,
		                     "accel_gather_for_metrics: cannot read the sampler");
	if (accel_sampler_last_batch(s, &last) != ACCEL_OK)
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE,
		                     "accel_gather_for_metrics: no batch was returned since the "
		                     "sampler was created, restored or moved to a new epoch; call "
		                     "it after accel_sampler_next() returned a batch");
	if (info.world_size != ctx->world.world_size || info.rank != ctx->world.rank)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "accel_gather_for_metrics: the sampler is rank %d of %d but "
		                     "the context is rank %d of %d; gather with "
		                     "accel_sampler_compact() over your own group instead",
		                     (int)info.rank, (int)info.world_size, (int)ctx->world.rank,
		                     (int)ctx->world.world_size);
	if (!send && last.count > 0)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "accel_gather_for_metrics: send is NULL");
	if (per_sample > UINT64_MAX / info.batch_size / esize)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG,
		                     "accel_gather_for_metrics: per_sample %llu is too large",
		                     (unsigned long long)per_sample);

	const uint64_t elems = info.batch_size * per_sample;
	const void *src = send;
	if (last.count < info.batch_size) {
		/* A short batch (even_batches=0): pad to the fixed gather stride;
		 * compact() drops the tail. */
		tmp = calloc((size_t)elems, esize);
		if (!tmp) {
			rc = accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM,
			                   "accel_gather_for_metrics: out of memory (%llu bytes)",
			                   (unsigned long long)(elems * esize));
			goto fail;
		}
		if (last.count)
			memcpy(tmp, send, (size_t)(last.count * per_sample * esize));
		src = tmp;
	}
	if ((rc = accel_allgather(ctx, src, recv, elems, dtype)))
		goto fail;
	rc = accel_sampler_compact(s, recv, (size_t)(per_sample * esize), ret_count);
fail:
	free(tmp);
	return rc;
}
