/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress_ckpt.c: checkpoints (docs/compress.md).
 *
 *   compress/layout            i64 tensor, rank 0: [saving world size,
 *                              layout hash, steps counted, 1 when residual
 *                              blobs were written, then per bucket with
 *                              state: bucket_id, its layout hash]
 *   residual.<bucket_id>       blob per rank: its error-feedback residual
 *   compress/powersgd_q/<id>   f32 tensor, rank 0: PowerSGD's Q (equal on
 *                              every rank)
 *
 * Blobs load only at the saving world size (docs/checkpoints.md); the
 * tensors at any.  The strategy hands its buckets over only when it
 * reduces, so what is read is kept and adopted by each bucket when it
 * first comes, if its layout hash is the saved one; otherwise that bucket
 * starts from a zero residual (and a fresh Q), and post_step says so at
 * info level.  At another world size the residuals (which are per rank)
 * are not read at all, and load_state says so. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"

#define LAYOUT "compress/layout"
#define HDR 4   /* elements of the layout tensor before the buckets */

static int has_state(const cz_state *s, const cz_bucket *cb)
{
	return cb->kind == CZ_KIND_ALLREDUCE && (s->method == CZ_TOPK || s->method == CZ_POWERSGD);
}

int cz_save(cz_state *s, accel_ckpt_writer *w)
{
	const accel_host_v1 *H = s->host;
	uint32_t nb = 0;
	int r;
	for (uint32_t i = 0; i < s->n_buckets; i++)
		nb += has_state(s, s->buckets[i]);
	uint64_t n = HDR + 2 * (uint64_t)nb;
	int64_t *v = calloc(n, sizeof(*v));
	if (!v)
		return cz_error_nomem(s, "the checkpoint layout");
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	uint64_t k = HDR;
	for (uint32_t i = 0; i < s->n_buckets; i++) {
		const cz_bucket *cb = s->buckets[i];
		if (!has_state(s, cb))
			continue;
		h = (h ^ cb->hash) * UINT64_C(0x100000001b3);
		v[k++] = cb->id;
		v[k++] = (int64_t)cb->hash;
	}
	v[0] = s->world.world_size;
	v[1] = (int64_t)h;
	v[2] = (int64_t)s->step;
	v[3] = s->error_feedback && (s->method == CZ_TOPK || s->method == CZ_POWERSGD);
	if (s->world.rank == 0) {
		uint64_t shape[1] = {n};
		accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_I64, 1, 0, LAYOUT, shape, 0, n, v};
		if ((r = H->ckpt_write_tensor(s->h, w, &sl)))
			goto out;
	}
	for (uint32_t i = 0; i < s->n_buckets; i++) {
		const cz_bucket *cb = s->buckets[i];
		char name[96];
		if (!has_state(s, cb))
			continue;
		if (s->error_feedback) {
			snprintf(name, sizeof(name), "residual.%u", cb->id);
			if ((r = H->ckpt_write(s->h, w, name, cb->res[cb->cur],
			                       cb->numel * sizeof(float))))
				goto out;
		}
		if (s->method == CZ_POWERSGD && cb->have_q && cb->q_numel && s->world.rank == 0) {
			uint64_t shape[1] = {cb->q_numel};
			snprintf(name, sizeof(name), "compress/powersgd_q/%u", cb->id);
			accel_ckpt_slice_v1 sl = {sizeof(sl), ACCEL_DTYPE_F32, 1, 0, name, shape, 0,
			                          cb->q_numel, cb->q[cb->cur]};
			if ((r = H->ckpt_write_tensor(s->h, w, &sl)))
				goto out;
		}
	}
	r = ACCEL_OK;
out:
	free(v);
	return r;
}

void cz_saved_free(cz_state *s)
{
	for (uint32_t i = 0; i < s->n_saved; i++) {
		free(s->saved[i].res);
		free(s->saved[i].q);
	}
	free(s->saved);
	s->saved = NULL;
	s->n_saved = 0;
}

/* A bucket met for the first time (or present at a load): take what the
 * checkpoint held for it when its layout is the saved one.  The layout
 * hash covers the bucket's size, so a residual of another size under the
 * same hash is damage (refused: copying it would read past its end); a Q
 * of another size is a changed compress.powersgd_rank (a fresh Q). */
int cz_adopt(cz_state *s, cz_bucket *cb)
{
	if (!s->saved || !has_state(s, cb))
		return ACCEL_OK;
	cz_saved *sv = NULL;
	for (uint32_t i = 0; i < s->n_saved; i++)
		if (s->saved[i].id == cb->id)
			sv = &s->saved[i];
	int match = sv && sv->hash == cb->hash;
	if (match && sv->res && sv->numel != cb->numel)
		return s->host->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint's "
		                      "residual.%u holds %llu f32; bucket %u, of the layout it was "
		                      "saved for, has %llu elements (the checkpoint is damaged: resume "
		                      "from an earlier one)", cb->id, (unsigned long long)sv->numel,
		                      cb->id, (unsigned long long)cb->numel);
	if (cb->res[cb->cur])
		memset(cb->res[cb->cur], 0, cb->numel * sizeof(float));
	cb->have_q = 0;
	cb->pending = 0;
	if (!match) {
		s->resume_zeroed++;
		return ACCEL_OK;
	}
	if (sv->res && cb->res[cb->cur])
		memcpy(cb->res[cb->cur], sv->res, cb->numel * sizeof(float));
	if (sv->q && cb->q[cb->cur] && sv->q_numel == cb->q_numel) {
		memcpy(cb->q[cb->cur], sv->q, cb->q_numel * sizeof(float));
		cb->have_q = 1;
	} else if (sv->q && cb->q[cb->cur]) {
		s->resume_fresh_q++;
	}
	return ACCEL_OK;
}

/* The first non-finite value of f[0..n), or -1. */
static int64_t first_nonfinite(const float *f, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (!isfinite(f[i]))
			return (int64_t)i;
	return -1;
}

/* The layout tensor's header and bucket list as cz_save writes them:
 * NULL, or what is wrong. */
static const char *bad_layout(const int64_t *v, uint64_t numel, char *buf, size_t cap)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	if (v[0] < 1 || v[0] > INT32_MAX)
		snprintf(buf, cap, "its saving world size is %lld", (long long)v[0]);
	else if (v[2] < 0)
		snprintf(buf, cap, "its step count is %lld", (long long)v[2]);
	else if (v[3] != 0 && v[3] != 1)
		snprintf(buf, cap, "its residual flag is %lld, not 0 or 1", (long long)v[3]);
	else
		buf[0] = '\0';
	if (buf[0])
		return buf;
	for (uint64_t k = HDR; k < numel; k += 2) {
		if (v[k] < 0 || v[k] > UINT32_MAX) {
			snprintf(buf, cap, "bucket id %lld is not a bucket id", (long long)v[k]);
			return buf;
		}
		for (uint64_t j = HDR; j < k; j += 2)
			if (v[j] == v[k]) {
				snprintf(buf, cap, "bucket %lld is listed twice", (long long)v[k]);
				return buf;
			}
		h = (h ^ (uint64_t)v[k + 1]) * UINT64_C(0x100000001b3);
	}
	if (h != (uint64_t)v[1]) {
		snprintf(buf, cap, "its layout hash %016llx is not the one of its buckets (%016llx)",
		         (unsigned long long)v[1], (unsigned long long)h);
		return buf;
	}
	return NULL;
}

int cz_load_state(cz_state *s, accel_ckpt_reader *rd)
{
	const accel_host_v1 *H = s->host;
	accel_ckpt_tensor_info_v1 ti = {.struct_size = sizeof(ti)};
	int64_t *v = NULL;
	int r = H->ckpt_tensor_info(s->h, rd, LAYOUT, &ti);
	if (r == ACCEL_ERR_NOT_FOUND)
		return H->error(s->h, ACCEL_ERR_CHECKPOINT, "the checkpoint has compress "
		                "state but no %s tensor: it is damaged", LAYOUT);
	if (r)
		return r;
	if (ti.dtype != ACCEL_DTYPE_I64 || ti.numel < HDR || (ti.numel - HDR) % 2)
		return H->error(s->h, ACCEL_ERR_CHECKPOINT, "%s is %s[%llu]; expected "
		                "i64[4 + 2 x buckets]", LAYOUT, accel_abi_dtype_name(ti.dtype),
		                (unsigned long long)ti.numel);
	if (!(v = malloc(ti.numel * sizeof(*v))))
		return cz_error_nomem(s, "the checkpoint layout");
	if ((r = H->ckpt_read_tensor(s->h, rd, LAYOUT, ACCEL_DTYPE_I64, 0, ti.numel, v)))
		goto out;
	char why[160];
	if (bad_layout(v, ti.numel, why, sizeof(why))) {
		r = H->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s is not one compress "
		             "wrote: %s (the checkpoint is damaged: resume from an earlier one)",
		             LAYOUT, why);
		goto out;
	}
	cz_saved_free(s);
	uint32_t nb = (uint32_t)((ti.numel - HDR) / 2);
	s->saved = calloc(nb ? nb : 1, sizeof(*s->saved));
	if (!s->saved) {
		r = cz_error_nomem(s, "the checkpoint's buckets");
		goto out;
	}
	s->n_saved = nb;
	s->step = (uint64_t)v[2];
	s->resume_zeroed = 0;
	s->resume_said = 0;
	s->resume_fresh_q = 0;
	s->resume_q_said = 0;
	int same_world = v[0] == s->world.world_size;
	if (!same_world && s->error_feedback)
		H->log(s->h, ACCEL_LOG_INFO, "the checkpoint was saved at world size %lld; "
		       "this run has %d ranks: error-feedback residuals (one per rank) start from "
		       "zero%s", (long long)v[0], s->world.world_size,
		       s->method == CZ_POWERSGD ? "; PowerSGD's Q is kept" : "");
	for (uint32_t i = 0; i < nb; i++) {
		cz_saved *sv = &s->saved[i];
		char name[96];
		uint64_t bytes = 0;
		sv->id = (uint32_t)v[HDR + 2 * i];
		sv->hash = (uint64_t)v[HDR + 1 + 2 * i];
		snprintf(name, sizeof(name), "residual.%u", sv->id);
		/* only blobs that were written: a missing one is an error */
		if (same_world && s->error_feedback && v[3]) {
			if ((r = H->ckpt_size(s->h, rd, name, &bytes)))
				goto out;
			sv->numel = bytes / sizeof(float);
			if (bytes % sizeof(float)) {
				r = H->error(s->h, ACCEL_ERR_CHECKPOINT, "residual of bucket %u is %llu "
				             "bytes, not a whole number of f32", sv->id,
				             (unsigned long long)bytes);
				goto out;
			}
			if (!(sv->res = malloc(bytes ? bytes : 1))) {
				r = cz_error_nomem(s, "a saved residual");
				goto out;
			}
			if ((r = H->ckpt_read(s->h, rd, name, sv->res, bytes)))
				goto out;
			int64_t at = first_nonfinite(sv->res, sv->numel);
			if (at >= 0) {
				r = H->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint blob %s (bucket %u's "
				             "error-feedback residual) holds %g at element %lld; a residual is "
				             "finite (the checkpoint is damaged: resume from an earlier one)",
				             name, sv->id, (double)sv->res[at], (long long)at);
				goto out;
			}
		}
		snprintf(name, sizeof(name), "compress/powersgd_q/%u", sv->id);
		accel_ckpt_tensor_info_v1 qi = {.struct_size = sizeof(qi)};
		if (s->method == CZ_POWERSGD &&
		    H->ckpt_tensor_info(s->h, rd, name, &qi) == ACCEL_OK) {
			if (qi.dtype != ACCEL_DTYPE_F32 || qi.ndim != 1) {
				r = H->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s is %s with %u "
				             "dims; PowerSGD's Q is f32 with 1 (the checkpoint is damaged)",
				             name, accel_abi_dtype_name(qi.dtype), qi.ndim);
				goto out;
			}
			sv->q_numel = qi.numel;
			if (!(sv->q = malloc(qi.numel * sizeof(float) + 1))) {
				r = cz_error_nomem(s, "a saved Q");
				goto out;
			}
			if ((r = H->ckpt_read_tensor(s->h, rd, name, ACCEL_DTYPE_F32, 0, qi.numel,
			                             sv->q)))
				goto out;
			int64_t at = first_nonfinite(sv->q, sv->q_numel);
			if (at >= 0) {
				r = H->error(s->h, ACCEL_ERR_CHECKPOINT, "checkpoint tensor %s holds %g at "
				             "element %lld; PowerSGD's Q is finite (the checkpoint is damaged: "
				             "resume from an earlier one)", name, (double)sv->q[at],
				             (long long)at);
				goto out;
			}
		}
	}
	/* buckets that exist already (a load in the middle of a run) */
	r = ACCEL_OK;
	for (uint32_t i = 0; !r && i < s->n_buckets; i++)
		r = cz_adopt(s, s->buckets[i]);
out:
	free(v);
	return r;
}
