/* SPDX-License-Identifier: MIT */
/* tests/progs/ckpt-make.c: save a checkpoint of a model of N equal f32
 * tensors "t0".."t<N-1>" of NUMEL elements each (so the largest tensor is
 * 1/N of the model), initialised uniform in [-1, 1), plain SGD (no
 * optimizer state), after one step with gradient 1.  Run directly or under
 * `accel launch -n K` (ddp then writes each master tensor in K slices).
 * Used by tests/test-checkpoint-cli.sh for accel merge-weights' memory.
 * Usage: ckpt-make N NUMEL DIR */
#include <stdio.h>
#include <stdlib.h>

#include "accel/accel.h"

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: ckpt-make N NUMEL DIR\n");
		return 2;
	}
	int n = atoi(argv[1]);
	int64_t numel = atoll(argv[2]);
	const char *sets[] = {"optimizer.type=sgd", "optimizer.params.lr=0.01", NULL};
	accel_opts o = {.struct_size = sizeof(o), .sets = sets};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	accel_init u = accel_init_uniform(-1, 1);
	for (int i = 0; !rc && i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "t%d", i);
		rc = accel_model_add_param(ctx, "u", name, ACCEL_DTYPE_F32, 1, &numel, &u, NULL);
	}
	if (!rc)
		rc = accel_prepare(ctx);
	for (int i = 0; !rc && i < n; i++) {
		float *g = accel_param_grad(ctx, (uint32_t)i);
		for (int64_t k = 0; k < numel; k++)
			g[k] = 1.0f;
	}
	if (!rc)
		rc = accel_unit_post_backward(ctx, 0);
	if (!rc)
		rc = accel_step(ctx);
	if (!rc)
		rc = accel_save_state(ctx, argv[3]);
	if (rc)
		fprintf(stderr, "ckpt-make: %s\n", ctx ? accel_errmsg(ctx) : accel_status_str(rc));
	accel_ctx_free(ctx);
	return rc ? 1 : 0;
}
