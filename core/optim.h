/* SPDX-License-Identifier: MIT */
/* core/optim.h: optimizer kernels on flat f32 ranges (private).
 *
 * torch.optim.SGD and torch.optim.AdamW (PyTorch 1.13 rules and defaults)
 * applied to one contiguous range of a parameter at a time, so a sharding
 * strategy steps only the elements it owns: the update of element i depends
 * only on element i of p, g and the state arrays, never on where the range
 * starts or how the parameter is split.
 *
 * Arithmetic: f32, in the order of torch's single-tensor (foreach=False)
 * code as PyTorch's CPU kernels execute it on x86-64 with AVX2/AVX-512 (its
 * default dispatch on any machine with FMA), including the fused
 * multiply-adds those kernels contain; hyper-parameters are combined in
 * double, as Python does, and rounded to f32 where torch rounds them.  The
 * results are bit-identical to torch.optim on such machines (tested by
 * tests/optim_torch_check.py) and the same on every machine (the kernel
 * without hardware FMA calls fmaf()).  docs/optim.md writes the formulas out.
 *
 * The step count t of a range is the number of updates applied to it,
 * including this one (t = 1 on the first step).  SGD with momentum starts
 * its buffer on t = 1 (torch: "buffer is None"); the state arrays must be
 * zero before the first step (AdamW's moments start at zero).
 *
 * Thread contract: an accel_optim is immutable after creation; any number of
 * threads may call accelp_optim_step_range() on disjoint ranges at once. */
#ifndef ACCEL_CORE_OPTIM_H
#define ACCEL_CORE_OPTIM_H

#include <stdint.h>

#include "config.h"
#include "error.h"

#define ACCEL_OPTIM_SGD   0
#define ACCEL_OPTIM_ADAMW 1

/* Parameter groups made by optimizer.no_decay. */
#define ACCEL_OPTIM_GROUP_DECAY    0   /* weight_decay of the options */
#define ACCEL_OPTIM_GROUP_NO_DECAY 1   /* weight decay 0             */
#define ACCEL_OPTIM_N_GROUPS       2

/* Most state arrays any optimizer keeps per element (AdamW: 2). */
#define ACCEL_OPTIM_MAX_STATE 2

typedef struct accel_optim accel_optim;

/* Hyper-parameters; accelp_optim_opts_init() fills torch's defaults. */
typedef struct accel_optim_opts {
	uint32_t struct_size;     /* sizeof(accel_optim_opts)                        */
	uint32_t type;            /* ACCEL_OPTIM_SGD or ACCEL_OPTIM_ADAMW            */
	double lr;                /* peak learning rate (what a schedule scales; the
	                             rate of a step is an argument of step_range)    */
	double beta1, beta2;      /* AdamW, each in [0, 1)   (0.9, 0.999)            */
	double eps;               /* AdamW, >= 0             (1e-8)                  */
	double weight_decay;      /* >= 0: AdamW decoupled (1e-2), SGD L2 (0)        */
	double momentum;          /* SGD, >= 0               (0)                     */
	double dampening;         /* SGD                     (0)                     */
	int32_t nesterov;         /* SGD, 0/1; needs momentum > 0, dampening = 0     */
	int32_t reserved;
} accel_optim_opts;

/* What differs between parameter groups. */
typedef struct accel_optim_group {
	double weight_decay;
} accel_optim_group;

/* torch's defaults for `type` (lr 1e-3 for both, which torch.optim.SGD does
 * not default); struct_size set. */
void accelp_optim_opts_init(accel_optim_opts *opts, uint32_t type);

/* "sgd" / "adamw" <-> ACCEL_OPTIM_*; parse returns -1 for an unknown name,
 * name NULL for an unknown type. */
int accelp_optim_type_parse(const char *name);
const char *accelp_optim_type_name(uint32_t type);

/* Check the options (messages name the member and value) and make an
 * optimizer whose no_decay group has no name suffixes.  Returns ACCEL_OK,
 * ACCEL_ERR_INVALID_ARG or ACCEL_ERR_NOMEM.  Owned. */
int accelp_optim_new(const accel_optim_opts *opts, accel_optim **ret_optim, accel_err *err);

/* The same from a resolved configuration: optimizer.type,
 * optimizer.params.{lr, betas, eps, weight_decay, momentum, dampening,
 * nesterov} and the optimizer.no_decay suffixes.  Messages name the key and
 * where its value came from.  Returns ACCEL_OK, ACCEL_ERR_CONFIG or
 * ACCEL_ERR_NOMEM. */
int accelp_optim_new_from_config(const accel_config *cfg, accel_optim **ret_optim,
                                accel_err *err);

/* NULL-safe; returns NULL. */
accel_optim *accelp_optim_free(accel_optim *optim);

/* Borrowed, valid while optim lives. */
const accel_optim_opts *accelp_optim_get_opts(const accel_optim *optim);

/* f32 state arrays per element: SGD 0 (momentum 0) or 1 (the momentum
 * buffer), AdamW 2 (exp_avg, exp_avg_sq, in that order). 0 for NULL. */
uint32_t accelp_optim_state_count(const accel_optim *optim);

/* Group `group` (ACCEL_OPTIM_GROUP_*); NULL when out of range.  Borrowed. */
const accel_optim_group *accelp_optim_get_group(const accel_optim *optim, uint32_t group);

/* ACCEL_OPTIM_GROUP_NO_DECAY when `name` ends with one of the no_decay
 * suffixes (an empty suffix matches nothing), else ACCEL_OPTIM_GROUP_DECAY. */
uint32_t accelp_optim_group_of(const accel_optim *optim, const char *name);

/* One update of elements [0, n) of a range:
 *   grp         hyper-parameters of the range's group (NULL: group 0)
 *   t           this update's step count for the range, >= 1
 *   lr          this update's learning rate (finite, >= 0)
 *   p           n f32 values, updated in place
 *   g           n gradients of dtype gdtype (ACCEL_DTYPE_F32, _F16, _BF16),
 *               read only; each is converted to f32 and multiplied by
 *               (float)grad_scale first (unscale and clipping; 1: none).  A
 *               non-finite grad_scale or gradient makes the values
 *               non-finite, as in torch.
 *   state       accelp_optim_state_count() arrays of n f32, in place
 *               (NULL when the count is 0)
 * The arrays must not overlap (they are restrict-qualified; identical
 * starting addresses are refused).  Errors (ACCEL_ERR_INVALID_ARG, message
 * in err): NULL pointers with n > 0, t = 0, bad lr, unknown gdtype. */
int accelp_optim_step_range(const accel_optim *optim, const accel_optim_group *grp, uint64_t t,
                           double lr, float *p, const void *g, uint32_t gdtype,
                           float *const state[], uint64_t n, double grad_scale,
                           accel_err *err);

/* One range of step_ranges(): numel f32 parameters, gradients (of the
 * call's gdtype) and accelp_optim_state_count() state arrays (the others
 * NULL), all on the call's device. */
typedef struct accel_optim_range {
	float *param;
	const void *grad;
	float *state[ACCEL_OPTIM_MAX_STATE];
	uint64_t numel;
} accel_optim_range;

/* One update of n ranges of one group at one step count, with the rules
 * and arguments of step_range.  device ACCEL_DEVICE_CPU: step_range on each
 * range in turn; ACCEL_DEVICE_CUDA: the cuda device module's fused
 * multi-tensor kernel (enqueued; it gives the CPU's bits, see
 * docs/optim.md), which is loaded on first use; ACCEL_ERR_UNSUPPORTED with
 * the reason when this build, machine or install has no usable module.
 * grad_scale_dev (device steps only; NULL otherwise): device memory holding
 * the gradient factor, read by the kernel in place of grad_scale. */
int accelp_optim_step_ranges(const accel_optim *optim, const accel_optim_group *grp, uint64_t t,
                            double lr, int32_t device, int32_t device_index,
                            const accel_optim_range *ranges, uint32_t n, uint32_t gdtype,
                            double grad_scale, const double *grad_scale_dev,
                            accel_err *err);

/* The kernel variant step_range uses: "avx2-fma" (x86-64 with AVX2 and
 * FMA), "generic" (portable C; fmaf() from the C library where the target
 * has no FMA instruction).  Both give the same bits. */
const char *accelp_optim_get_kernel(const accel_optim *optim);
/* Choose the variant: "auto" (the fastest this CPU runs), or a name above.
 * ACCEL_ERR_UNSUPPORTED when this CPU cannot run it, ACCEL_ERR_INVALID_ARG
 * for an unknown name.  For tests and benchmarks. */
int accelp_optim_set_kernel(accel_optim *optim, const char *name, accel_err *err);

#endif
