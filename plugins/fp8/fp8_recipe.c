/* SPDX-License-Identifier: MIT */
/* plugins/fp8/fp8_recipe.c: delayed scaling (fp8_recipe.h). */
#include <math.h>
#include <string.h>

#include "fp8_recipe.h"

float fp8_recipe_scale(float amax, float fmax, int margin, float old_scale)
{
	if (!(amax > 0.0f) || !isfinite(amax))
		return old_scale;
	double bound = ldexp((double)fmax, -margin);
	double want = bound / (double)amax;
	float s = (float)want;
	/* f32 rounding may land above the exact quotient: step down until
	 * the bound holds (TE computes in f32 and can exceed it by an ulp) */
	while (s > 0.0f && (double)s * (double)amax > bound)
		s = nextafterf(s, 0.0f);
	/* an amax so small that the quotient overflows f32 ends at FLT_MAX */
	return s > 0.0f ? s : old_scale;
}

void fp8_recipe_update(float *history, uint32_t len, uint32_t n, uint32_t algo,
                       const float *fmax, int margin, int update_scale, float *scale,
                       float *ret_amax)
{
	for (uint32_t j = 0; j < n; j++) {
		float a = history[j];
		if (algo == FP8_ALGO_MAX)
			for (uint32_t r = 1; r < len; r++) {
				float v = history[(size_t)r * n + j];
				if (v > a || isnan(v))   /* NaN wins, as torch.max */
					a = isnan(a) ? a : v;
			}
		if (update_scale)
			scale[j] = fp8_recipe_scale(a, fmax[j], margin, scale[j]);
		if (ret_amax)
			ret_amax[j] = a;
	}
	for (uint32_t j = 0; j < n && len > 1; j++) {
		float row0 = history[j];
		for (uint32_t r = 0; r + 1 < len; r++)
			history[(size_t)r * n + j] = history[(size_t)(r + 1) * n + j];
		history[(size_t)(len - 1) * n + j] = row0;
	}
	memset(history, 0, n * sizeof(float));
}
