/* SPDX-License-Identifier: MIT */
/* tests/progs/ckpt-reshard.c: checkpoints across strategies
 * (tests/test-checkpoint-strategy.sh, docs/checkpoints.md).
 *
 *   ckpt-reshard STRATEGY OPTIM save DIR STEPS
 *       train STEPS steps and save into DIR
 *   ckpt-reshard STRATEGY OPTIM reload SRC DST STEPS
 *       load SRC, save into DST at once (its canonical tensors must equal
 *       SRC's: compare with ckpt-compare), then train STEPS more steps and
 *       print "trained N more steps from step S: weights changed, finite"
 *       (and on every rank where its two registered generators resumed:
 *       before the save, rank r drew r + 1 words of each)
 *   ckpt-reshard compare A B
 *       every param/, master/ and optim/ tensor of checkpoint A equals B's
 *       bit for bit (and B has no other); prints "N tensors equal"
 *
 * STRATEGY: ddp, localsgd; OPTIM: adamw, sgd (momentum 0.9).  The model:
 * f32 tensors "a" [37], "b" [64, 33], "c" [1000], "frozen" [5] (no
 * gradient).  Gradients depend on the rank and the step, so Local SGD's
 * replicas differ between synchronizations.  Run directly or under
 * `accel launch -n K`. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ckpt_manifest.h"
#include "error.h"

static int fail_ctx(accel_ctx *ctx, const char *what, int rc)
{
	fprintf(stderr, "ckpt-reshard: %s: %s\n", what,
	        ctx ? accel_errmsg(ctx) : accel_status_str(rc));
	accel_ctx_free(ctx);
	return 1;
}

static int train(accel_ctx *ctx, int steps)
{
	int rc = ACCEL_OK, rank = accel_rank(ctx);
	uint32_t n = accel_model_n_params(ctx);
	for (int s = 0; !rc && s < steps; s++) {
		for (uint32_t i = 0; i < n; i++) {
			float *g = accel_param_grad(ctx, i);
			uint64_t numel = accel_param_numel(ctx, i);
			for (uint64_t k = 0; g && k < numel; k++)
				g[k] = 1e-2f * sinf(0.37f * (float)k + (float)s + 1.3f * (float)rank +
				                    (float)i);
		}
		if (!(rc = accel_unit_post_backward(ctx, 0)))
			rc = accel_step(ctx);
	}
	return rc;
}

static double weight_sum(accel_ctx *ctx, int *ret_finite)
{
	double sum = 0;
	*ret_finite = 1;
	for (uint32_t i = 0; i < accel_model_n_params(ctx); i++) {
		const float *w = accel_param_data(ctx, i);
		uint64_t numel = accel_param_numel(ctx, i);
		for (uint64_t k = 0; w && k < numel; k++) {
			*ret_finite &= isfinite(w[k]) != 0;
			sum += fabs((double)w[k]);
		}
	}
	return sum;
}

static int compare(const char *a, const char *b)
{
	accelp_ckpt_manifest *ma = NULL, *mb = NULL;
	accel_err err = {0};
	void *ba = NULL, *bb = NULL;
	int rc = 1, equal = 0;
	if (accelp_ckpt_manifest_open(a, &ma, &err) || accelp_ckpt_manifest_open(b, &mb, &err)) {
		fprintf(stderr, "ckpt-reshard compare: %s\n", err.msg);
		goto out;
	}
	for (int pass = 0; pass < 2; pass++) {
		const accelp_ckpt_manifest *x = pass ? mb : ma, *y = pass ? ma : mb;
		for (uint32_t i = 0; i < x->n_tensors; i++) {
			const char *nm = x->tensors[i].name;
			if (strncmp(nm, "param/", 6) && strncmp(nm, "master/", 7) &&
			    strncmp(nm, "optim/", 6))
				continue;
			if (!accelp_ckpt_manifest_find(y, nm)) {
				fprintf(stderr, "ckpt-reshard compare: tensor '%s' is in %s, not in %s\n", nm,
				        x->dir, y->dir);
				goto out;
			}
		}
	}
	for (uint32_t i = 0; i < ma->n_tensors; i++) {
		const accelp_ckpt_tensor *ta = &ma->tensors[i];
		if (strncmp(ta->name, "param/", 6) && strncmp(ta->name, "master/", 7) &&
		    strncmp(ta->name, "optim/", 6))
			continue;
		const accelp_ckpt_tensor *tb = accelp_ckpt_manifest_find(mb, ta->name);
		size_t bytes = (size_t)ta->numel * accel_dtype_size(ta->dtype);
		if (tb->dtype != ta->dtype || tb->numel != ta->numel) {
			fprintf(stderr, "ckpt-reshard compare: tensor '%s': dtype or size differ\n",
			        ta->name);
			goto out;
		}
		free(ba);
		free(bb);
		ba = malloc(bytes ? bytes : 1);
		bb = malloc(bytes ? bytes : 1);
		if (!ba || !bb || accelp_ckpt_manifest_read(ma, ta, 0, ta->numel, ba, &err) ||
		    accelp_ckpt_manifest_read(mb, tb, 0, tb->numel, bb, &err)) {
			fprintf(stderr, "ckpt-reshard compare: %s\n", err.msg);
			goto out;
		}
		if (memcmp(ba, bb, bytes)) {
			fprintf(stderr, "ckpt-reshard compare: tensor '%s' differs between %s and %s\n",
			        ta->name, a, b);
			goto out;
		}
		equal++;
	}
	printf("%d tensors equal\n", equal);
	rc = 0;
out:
	free(ba);
	free(bb);
	accelp_ckpt_manifest_free(ma);
	accelp_ckpt_manifest_free(mb);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "compare"))
		return compare(argv[2], argv[3]);
	int save = argc == 6 && !strcmp(argv[3], "save");
	int reload = argc == 7 && !strcmp(argv[3], "reload");
	if (!save && !reload) {
		fprintf(stderr, "usage: ckpt-reshard STRATEGY OPTIM save DIR STEPS\n"
		                "       ckpt-reshard STRATEGY OPTIM reload SRC DST STEPS\n"
		                "       ckpt-reshard compare A B\n");
		return 2;
	}
	char strat[64], opt[64];
	snprintf(strat, sizeof(strat), "strategy=%s", argv[1]);
	snprintf(opt, sizeof(opt), "optimizer.type=%s", argv[2]);
	const char *sets[] = {strat, opt, "optimizer.params.lr=0.01",
	                      !strcmp(argv[2], "sgd") ? "optimizer.params.momentum=0.9" : NULL,
	                      NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	if (rc)
		return fail_ctx(ctx, "accel_ctx_new", rc);
	accel_init u = accel_init_uniform(-1, 1);
	int64_t sa[1] = {37}, sb[2] = {64, 33}, sc[1] = {1000}, sf[1] = {5};
	accel_param_desc fz = {.struct_size = sizeof(fz), .dtype = ACCEL_DTYPE_F32, .unit = "u",
	                       .name = "frozen", .ndim = 1, .frozen = 1, .shape = sf, .init = &u};
	if ((rc = accel_model_add_param(ctx, "u", "a", ACCEL_DTYPE_F32, 1, sa, &u, NULL)) ||
	    (rc = accel_model_add_param(ctx, "u", "b", ACCEL_DTYPE_F32, 2, sb, &u, NULL)) ||
	    (rc = accel_model_add_param(ctx, "u", "c", ACCEL_DTYPE_F32, 1, sc, &u, NULL)) ||
	    (rc = accel_model_add(ctx, &fz, NULL)) || (rc = accel_prepare(ctx)))
		return fail_ctx(ctx, "building the model", rc);
	/* two registered generators, a data stream and a rank stream */
	accel_rng gd, gr;
	if ((rc = accel_rng_seed_stream(ctx, ACCEL_RNG_DATA, 3, &gd)) ||
	    (rc = accel_rng_seed_stream(ctx, ACCEL_RNG_RANK, 4, &gr)) ||
	    (rc = accel_rng_register(ctx, &gd)) || (rc = accel_rng_register(ctx, &gr)))
		return fail_ctx(ctx, "accel_rng_register", rc);
	if (save) {
		if ((rc = train(ctx, atoi(argv[5]))))
			return fail_ctx(ctx, "training", rc);
		/* rank r draws r + 1 words of each: positions differ by rank */
		for (int k = 0; k <= accel_rank(ctx); k++)
			(void)(accel_rng_u32(&gd) + accel_rng_u32(&gr));
		if ((rc = accel_save_state(ctx, argv[4])))
			return fail_ctx(ctx, "accel_save_state", rc);
		accel_ctx_free(ctx);
		return 0;
	}
	if ((rc = accel_load_state(ctx, argv[4])))
		return fail_ctx(ctx, "accel_load_state", rc);
	printf("generators: data at %" PRIu64 " lane %u, rank at %" PRIu64 " lane %u\n",
	       accel_rng_tell(&gd), gd.lane, accel_rng_tell(&gr), gr.lane);
	if ((rc = accel_save_state(ctx, argv[5])))
		return fail_ctx(ctx, "accel_save_state", rc);
	int finite;
	double before = weight_sum(ctx, &finite);
	int steps = atoi(argv[6]);
	if ((rc = train(ctx, steps)))
		return fail_ctx(ctx, "training after the load", rc);
	double after = weight_sum(ctx, &finite);
	if (accel_rank(ctx) == 0)
		printf("trained %d more steps from step %" PRIu64 ": weights %s, %s\n", steps,
		       accel_get_step(ctx) - (uint64_t)steps, after != before ? "changed" : "unchanged",
		       finite ? "finite" : "NOT finite");
	accel_ctx_free(ctx);
	return 0;
}
