/* SPDX-License-Identifier: MIT */
/* backends/common/optim-consts.h: the f32 constants of one SGD or AdamW update,
 * combined in double and rounded to f32 where torch rounds them
 * (header-only, private; shared by core/optim.c and the device modules so
 * a device step gives the CPU step's bits). */
#ifndef ACCEL_COMMON_OPTIM_CONSTS_H
#define ACCEL_COMMON_OPTIM_CONSTS_H

#include <math.h>
#include <stdint.h>

typedef struct accel_optim_adamw_k {
	float decay;     /* 1 - lr * wd                       */
	float b1, omb1;  /* beta1, 1 - beta1                  */
	float b2, omb2;  /* beta2, 1 - beta2                  */
	float bc2s;      /* sqrt(1 - beta2^t)                 */
	float eps;
	float nstep;     /* -lr / (1 - beta1^t)               */
	float gs;        /* grad_scale                        */
} accel_optim_adamw_k;

typedef struct accel_optim_sgd_k {
	float wd, mom, omdamp, nlr, gs;   /* omdamp = 1 - dampening, nlr = -lr */
	int has_wd, nesterov, first;
} accel_optim_sgd_k;

/* As _single_tensor_adamw: Python floats, then f32 at the tensor. */
static inline accel_optim_adamw_k accel_optim_adamw_consts(double lr, double beta1, double beta2,
                                                           double eps, double wd, uint64_t t,
                                                           double grad_scale)
{
	double bc1 = 1 - pow(beta1, (double)t);
	double bc2 = 1 - pow(beta2, (double)t);
	double step_size = lr / bc1;
	accel_optim_adamw_k k = {
		.decay = (float)(1 - lr * wd),
		.b1 = (float)beta1,
		.omb1 = (float)(1 - beta1),
		.b2 = (float)beta2,
		.omb2 = (float)(1 - beta2),
		.bc2s = (float)sqrt(bc2),
		.eps = (float)eps,
		.nstep = (float)-step_size,
		.gs = (float)grad_scale,
	};
	return k;
}

static inline accel_optim_sgd_k accel_optim_sgd_consts(double lr, double momentum,
                                                       double dampening, int nesterov, double wd,
                                                       uint64_t t, double grad_scale)
{
	accel_optim_sgd_k k = {
		.wd = (float)wd,
		.mom = (float)momentum,
		.omdamp = (float)(1 - dampening),
		.nlr = (float)-lr,
		.gs = (float)grad_scale,
		.has_wd = wd != 0,
		.nesterov = nesterov ? 1 : 0,
		.first = t == 1,
	};
	return k;
}

#endif
