/* SPDX-License-Identifier: MIT */
/* tests/progs/ckpt-shard.c: working weights of a strategy that shards
 * parameters (ABI 1.6 materialize; tests/test-checkpoint-shard.sh).
 *
 *   ckpt-shard STRATEGY save DIR MODEL OFFSET
 *       build the model, add OFFSET * (1 + k % 7) to element k of every
 *       parameter (ddp: through accel_param_data; fx-shard: its config
 *       key fx_shard.offset does it to its shards), accel_save_state(DIR),
 *       accel_save_model(MODEL)
 *   ckpt-shard STRATEGY load DIR MODEL OFFSET
 *       build the model, read every weight, accel_load_state(DIR), read
 *       them again: each must equal its fresh value + OFFSET * (1 + k % 7)
 *       bit for bit, on every rank ("rank R: N values equal"); then
 *       accel_save_model(MODEL)
 *   ckpt-shard STRATEGY refuse DIR MODEL 0
 *       accel_save_state, accel_save_model and accel_load_state must each
 *       fail with ACCEL_ERR_UNSUPPORTED (prints "refused: MESSAGE")
 *
 * Weights are read unit by unit between accel_unit_pre_forward and
 * accel_unit_post_forward with gradients disabled, which works under ddp
 * and under a strategy that gathers units.  The model: "a" [37] in unit
 * u0, "b" [64, 33] in u1, "c" [1000] and "frozen" [5] in u2.  Under
 * fx-shard the walk's record is printed and the peak of ACCEL_MEM_PARAMS
 * (accel_memory_stats) is checked against its shards plus one unit. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "../fixtures/shard/fx-shard.h"

#define NP 4
static const uint32_t unit_of[NP] = {0, 1, 2, 2};  /* a, b, c, frozen */

static int fail_ctx(accel_ctx *ctx, const char *what, int rc)
{
	fprintf(stderr, "ckpt-shard: %s: %s\n", what, ctx ? accel_errmsg(ctx) : accel_status_str(rc));
	accel_ctx_free(ctx);
	return 1;
}

static float delta(double offset, uint64_t k)
{
	return (float)(offset * (double)(1 + k % 7));
}

/* all weights, parameter after parameter, into out (numel of each in n) */
static int read_all(accel_ctx *ctx, float **out)
{
	int rc;
	if ((rc = accel_set_grad_enabled(ctx, 0)))
		return rc;
	for (uint32_t u = 0; u < accel_model_n_units(ctx); u++) {
		if ((rc = accel_unit_pre_forward(ctx, u)))
			return rc;
		for (uint32_t i = 0; i < NP; i++) {
			if (unit_of[i] != u)
				continue;
			const float *w = accel_param_data(ctx, i);
			uint64_t n = accel_param_numel(ctx, i);
			if (!w) {
				fprintf(stderr, "ckpt-shard: parameter %u not bound in its unit's hooks\n", i);
				return ACCEL_ERR_INTERNAL;
			}
			memcpy(out[i], w, n * 4);
		}
		if ((rc = accel_unit_post_forward(ctx, u)))
			return rc;
	}
	return accel_set_grad_enabled(ctx, 1);
}

int main(int argc, char **argv)
{
	if (argc != 6 || (strcmp(argv[2], "save") && strcmp(argv[2], "load") &&
	                  strcmp(argv[2], "refuse"))) {
		fprintf(stderr, "usage: ckpt-shard STRATEGY save|load|refuse DIR MODEL OFFSET\n");
		return 2;
	}
	const char *strat = argv[1], *mode = argv[2], *dir = argv[3], *model = argv[4];
	double offset = atof(argv[5]);
	int sharded = !strncmp(strat, "fx-shard", 8);
	char s1[96], s2[96];
	snprintf(s1, sizeof(s1), "strategy=%s", strat);
	snprintf(s2, sizeof(s2), "fx_shard.offset=%s", !strcmp(mode, "save") ? argv[5] : "0");
	const char *sets[] = {s1, "optimizer.type=sgd", "optimizer.params.lr=0.1",
	                      !strcmp(strat, "fx-shard") ? s2 : NULL, NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	if (rc)
		return fail_ctx(ctx, "accel_ctx_new", rc);
	accel_init u = accel_init_uniform(-1, 1);
	int64_t sa[1] = {37}, sb[2] = {64, 33}, sc[1] = {1000}, sf[1] = {5};
	accel_param_desc fz = {.struct_size = sizeof(fz), .dtype = ACCEL_DTYPE_F32, .unit = "u2",
	                       .name = "frozen", .ndim = 1, .frozen = 1, .shape = sf, .init = &u};
	if ((rc = accel_model_add_param(ctx, "u0", "a", ACCEL_DTYPE_F32, 1, sa, &u, NULL)) ||
	    (rc = accel_model_add_param(ctx, "u1", "b", ACCEL_DTYPE_F32, 2, sb, &u, NULL)) ||
	    (rc = accel_model_add_param(ctx, "u2", "c", ACCEL_DTYPE_F32, 1, sc, &u, NULL)) ||
	    (rc = accel_model_add(ctx, &fz, NULL)) || (rc = accel_prepare(ctx)))
		return fail_ctx(ctx, "building the model", rc);
	float *fresh[NP], *now[NP];
	uint64_t total = 0;
	for (uint32_t i = 0; i < NP; i++) {
		uint64_t n = accel_param_numel(ctx, i);
		fresh[i] = malloc(n * 4);
		now[i] = malloc(n * 4);
		if (!fresh[i] || !now[i])
			return fail_ctx(ctx, "out of memory", ACCEL_ERR_NOMEM);
		total += n;
	}
	int rank = accel_rank(ctx);
	if (!strcmp(mode, "refuse")) {
		rc = accel_save_state(ctx, dir);
		printf("refused: %s\n", rc == ACCEL_ERR_UNSUPPORTED ? accel_errmsg(ctx) : "NO");
		accel_clear_error(ctx);
		rc = accel_save_model(ctx, model);
		printf("refused: %s\n", rc == ACCEL_ERR_UNSUPPORTED ? accel_errmsg(ctx) : "NO");
		accel_clear_error(ctx);
		rc = accel_load_state(ctx, dir);
		printf("refused: %s\n", rc == ACCEL_ERR_UNSUPPORTED ? accel_errmsg(ctx) : "NO");
		for (uint32_t i = 0; i < NP; i++) {
			free(fresh[i]);
			free(now[i]);
		}
		accel_ctx_free(ctx);
		return 0;
	}
	if ((rc = read_all(ctx, fresh)))
		return fail_ctx(ctx, "reading the weights", rc);
	if (!strcmp(mode, "save")) {
		if (!sharded)
			for (uint32_t i = 0; i < NP; i++) {
				float *w = accel_param_data(ctx, i);
				for (uint64_t k = 0; k < accel_param_numel(ctx, i); k++)
					w[k] += delta(offset, k);
			}
		if ((rc = accel_save_state(ctx, dir)))
			return fail_ctx(ctx, "accel_save_state", rc);
	} else {
		if ((rc = accel_load_state(ctx, dir)))
			return fail_ctx(ctx, "accel_load_state", rc);
		if ((rc = read_all(ctx, now)))
			return fail_ctx(ctx, "reading the loaded weights", rc);
		uint64_t equal = 0, moved = 0, shown = 0;
		for (uint32_t i = 0; i < NP; i++)
			for (uint64_t k = 0; k < accel_param_numel(ctx, i); k++) {
				float want = fresh[i][k] + delta(offset, k);
				equal += !memcmp(&want, &now[i][k], 4);
				moved += now[i][k] != fresh[i][k];
				if (memcmp(&want, &now[i][k], 4) && shown++ < 5)
					fprintf(stderr, "rank %d: %s[%" PRIu64 "] = %.9g, expected %.9g\n", rank,
					        accel_param_name(ctx, i), k, (double)now[i][k], (double)want);
			}
		printf("rank %d: %" PRIu64 " of %" PRIu64 " values equal, %" PRIu64 " moved\n", rank,
		       equal, total, moved);
	}
	if ((rc = accel_save_model(ctx, model)))
		return fail_ctx(ctx, "accel_save_model", rc);
	if (sharded) {
		const fx_shard_record *r = accel_plugin_extension(ctx, strat, FX_SHARD_RECORD, 1);
		uint64_t cur = 0, peak = 0;
		if (!r || (rc = accel_memory_stats(ctx, ACCEL_MEM_PARAMS, ACCEL_DEVICE_CPU, 0, &cur,
		                                   &peak)))
			return fail_ctx(ctx, "the fixture's record or accel_memory_stats", rc);
		printf("rank %d: materialize: %u gathers, %u releases, %u writebacks, at most %u "
		       "unit(s) at once; params peak %s (%" PRIu64 " <= %" PRIu64 " + %" PRIu64
		       "), now %" PRIu64 "\n", rank, r->gathers, r->releases, r->writebacks,
		       r->max_live_units,
		       peak <= r->shard_bytes + r->largest_unit_bytes ? "ok" : "TOO HIGH", peak,
		       r->shard_bytes, r->largest_unit_bytes, cur);
	}
	for (uint32_t i = 0; i < NP; i++) {
		free(fresh[i]);
		free(now[i]);
	}
	accel_ctx_free(ctx);
	return 0;
}
