/* SPDX-License-Identifier: MIT */
/* core/optim.c: SGD and AdamW on flat f32 ranges.
 *
 * Why the arithmetic looks the way it does: the goal is the exact bits of
 * torch.optim (1.13, foreach=False) on a CPU.  There every line of
 * _single_tensor_sgd/_single_tensor_adamw is a separate ATen kernel over
 * f32, Python float scalars are rounded to f32 when they meet a tensor,
 * and the AVX2 kernels (PyTorch's default dispatch on x86-64) fuse two
 * things: add_(x, alpha=a) is vec::fmadd(x, a, self), and addcmul_ is
 * compiled from `self + s * t1 * t2` with contraction, i.e.
 * fma(s * t1, t2, self).  addcdiv_ (`self + s * t1 / t2`) has nothing to
 * fuse.  The loops below repeat that per element with explicit fmaf() and
 * everything else unfused (fp-contract off), so the result does not depend
 * on the compiler either.  Keeping each element's arithmetic independent
 * of its neighbours is also what makes a sharded step bit-identical to an
 * unsharded one.
 *
 * One pass reads p, g, m, v and writes p, m, v (28 bytes per f32 element
 * with f32 gradients): the step is memory bound, so the loops are plain
 * restrict loops that GCC vectorises; the x86-64 build adds an AVX2+FMA
 * copy chosen at run time, because without FMA hardware fmaf() is a
 * library call that stops vectorisation (that copy stays correct, only
 * slower). */
#if defined(__GNUC__) && !defined(__clang__)
/* Vectorise at the -O2 of debugoptimized builds (GCC 12's -O2 cost model
 * refuses loops that need an epilogue) and never contract a * b + c behind
 * our back (C11 mode already does not; gnu11 would). */
#pragma GCC optimize("tree-loop-vectorize", "vect-cost-model=dynamic", "fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* sqrtf only sets errno for arguments < 0, and exp_avg_sq is >= 0 (or
 * NaN): saying it has no side effects here lets the loops use the vector
 * square root without -fno-math-errno for all of libaccel (GCC decides
 * this per declaration, not per function, so the pragma below cannot). */
extern float sqrtf(float) __attribute__((const, nothrow));

#include "accel/accel.h"
#include "device.h"
#include "optim.h"
#include "backends/common/optim-consts.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX2_FMA 1
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

enum kernel { K_GENERIC, K_AVX2_FMA };
static const char *const kernel_names[] = {"generic", "avx2-fma"};

struct accel_optim {
	accel_optim_opts o;
	accel_optim_group groups[ACCEL_OPTIM_N_GROUPS];
	char **no_decay;            /* owned suffixes */
	uint32_t n_no_decay;
	enum kernel kernel;
};

/* ---- options ----------------------------------------------------------------- */

static const char *const type_names[] = {
	[ACCEL_OPTIM_SGD] = "sgd",
	[ACCEL_OPTIM_ADAMW] = "adamw",
};
#define N_TYPES (sizeof(type_names) / sizeof(type_names[0]))

int accelp_optim_type_parse(const char *name)
{
	if (!name)
		return -1;
	for (uint32_t i = 0; i < N_TYPES; i++)
		if (!strcmp(name, type_names[i]))
			return (int)i;
	return -1;
}

const char *accelp_optim_type_name(uint32_t type)
{
	return type < N_TYPES ? type_names[type] : NULL;
}

void accelp_optim_opts_init(accel_optim_opts *opts, uint32_t type)
{
	if (!opts)
		return;
	*opts = (accel_optim_opts){
		.struct_size = sizeof(*opts),
		.type = type,
		.lr = 1e-3,
		.beta1 = 0.9,
		.beta2 = 0.999,
		.eps = 1e-8,
		.weight_decay = type == ACCEL_OPTIM_ADAMW ? 1e-2 : 0.0,
	};
}

/* Checks of the rules torch's constructors enforce (and a few it does not:
 * NaN and infinities).  `pre` names the members as the caller knows them. */
static int check_opts(const accel_optim_opts *o, int from_config, accel_err *err)
{
	const char *pre = from_config ? "optimizer.params." : "accel_optim_opts.";
	int code = from_config ? ACCEL_ERR_CONFIG : ACCEL_ERR_INVALID_ARG;
	if (o->type >= N_TYPES)
		return accelp_err_set(err, code, "optimizer: %s %u is not sgd (%d) or "
		                     "adamw (%d)", from_config ? "optimizer.type" : "accel_optim_opts.type",
		                     o->type, ACCEL_OPTIM_SGD, ACCEL_OPTIM_ADAMW);
	if (!isfinite(o->lr) || o->lr < 0)
		return accelp_err_set(err, code, "optimizer: %slr must be a finite "
		                     "number >= 0, got %g", pre, o->lr);
	if (!isfinite(o->weight_decay) || o->weight_decay < 0)
		return accelp_err_set(err, code, "optimizer: %sweight_decay must be a "
		                     "finite number >= 0, got %g", pre, o->weight_decay);
	if (o->type == ACCEL_OPTIM_ADAMW) {
		if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
			return accelp_err_set(err, code, "optimizer: %s%s must be in "
			                     "[0, 1), got [%g, %g]", pre,
			                     from_config ? "betas" : "beta1 and beta2", o->beta1,
			                     o->beta2);
		if (!isfinite(o->eps) || o->eps < 0)
			return accelp_err_set(err, code, "optimizer: %seps must be a "
			                     "finite number >= 0, got %g", pre, o->eps);
	} else {
		if (!isfinite(o->momentum) || o->momentum < 0)
			return accelp_err_set(err, code, "optimizer: %smomentum must be "
			                     "a finite number >= 0, got %g", pre, o->momentum);
		if (!isfinite(o->dampening))
			return accelp_err_set(err, code, "optimizer: %sdampening must "
			                     "be finite, got %g", pre, o->dampening);
		if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
			return accelp_err_set(err, code, "optimizer: %snesterov needs "
			                     "momentum > 0 and dampening = 0 (as torch.optim.SGD), got "
			                     "momentum %g, dampening %g", pre, o->momentum, o->dampening);
	}
	return ACCEL_OK;
}

static enum kernel best_kernel(void)
{
#ifdef HAVE_AVX2_FMA
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return K_AVX2_FMA;
#endif
	return K_GENERIC;
}

static int create(const accel_optim_opts *opts, int from_config, accel_optim **ret,
                  accel_err *err)
{
	accel_optim *o;
	int rc;
	if (!opts || !ret)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer: %s is NULL",
		                     !opts ? "opts" : "ret_optim");
	if (opts->struct_size < sizeof(accel_optim_opts))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer: opts.struct_size is %u, "
		                     "expected %zu (use accelp_optim_opts_init)", opts->struct_size,
		                     sizeof(accel_optim_opts));
	if ((rc = check_opts(opts, from_config, err)))
		return rc;
	o = calloc(1, sizeof(*o));
	if (!o)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "optimizer: out of memory");
	o->o = *opts;
	o->o.struct_size = sizeof(o->o);
	o->o.nesterov = opts->nesterov ? 1 : 0;
	o->groups[ACCEL_OPTIM_GROUP_DECAY].weight_decay = opts->weight_decay;
	o->groups[ACCEL_OPTIM_GROUP_NO_DECAY].weight_decay = 0.0;
	o->kernel = best_kernel();
	*ret = o;
	return ACCEL_OK;
}

int accelp_optim_new(const accel_optim_opts *opts, accel_optim **ret_optim, accel_err *err)
{
	return create(opts, 0, ret_optim, err);
}

static const char *source_of(const accel_config *cfg, const char *key)
{
	const char *s = accelp_config_source(cfg, key);
	return s ? s : "unset";
}

/* Unset keys keep *value (the defaults of accelp_optim_opts_init). */
static int config_double(const accel_config *cfg, const char *key, double *value,
                         accel_err *err)
{
	int rc = accelp_config_get_double(cfg, key, value);
	if (rc == ACCEL_ERR_NOT_FOUND)
		return ACCEL_OK;
	if (rc)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "optimizer: %s (from %s) is not a number",
		                     key, source_of(cfg, key));
	return ACCEL_OK;
}

int accelp_optim_new_from_config(const accel_config *cfg, accel_optim **ret_optim,
                                accel_err *err)
{
	accel_optim_opts opts;
	accel_optim *o = NULL;
	const char *type = "adamw", *suffix;
	uint32_t n_betas = 0, n = 0;
	int32_t nesterov = 0;
	int rc, t;

	if (!cfg || !ret_optim)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer: %s is NULL",
		                     !cfg ? "cfg" : "ret_optim");
	rc = accelp_config_get_string(cfg, "optimizer.type", &type);
	if (rc && rc != ACCEL_ERR_NOT_FOUND)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "optimizer: optimizer.type (from %s) is "
		                     "not a string", source_of(cfg, "optimizer.type"));
	if ((t = accelp_optim_type_parse(type)) < 0)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "optimizer: optimizer.type '%s' (from %s) "
		                     "is not one of adamw, sgd", type, source_of(cfg, "optimizer.type"));
	accelp_optim_opts_init(&opts, (uint32_t)t);
	if ((rc = config_double(cfg, "optimizer.params.lr", &opts.lr, err)) ||
	    (rc = config_double(cfg, "optimizer.params.eps", &opts.eps, err)) ||
	    (rc = config_double(cfg, "optimizer.params.weight_decay", &opts.weight_decay, err)) ||
	    (rc = config_double(cfg, "optimizer.params.momentum", &opts.momentum, err)) ||
	    (rc = config_double(cfg, "optimizer.params.dampening", &opts.dampening, err)))
		return rc;
	rc = accelp_config_get_bool(cfg, "optimizer.params.nesterov", &nesterov);
	if (rc && rc != ACCEL_ERR_NOT_FOUND)
		return accelp_err_set(err, ACCEL_ERR_CONFIG, "optimizer: optimizer.params.nesterov "
		                     "(from %s) is not a boolean",
		                     source_of(cfg, "optimizer.params.nesterov"));
	opts.nesterov = nesterov ? 1 : 0;
	if (accelp_config_get_count(cfg, "optimizer.params.betas", &n_betas) == ACCEL_OK) {
		if (n_betas != 2 ||
		    accelp_config_get_dbllist(cfg, "optimizer.params.betas", 0, &opts.beta1) ||
		    accelp_config_get_dbllist(cfg, "optimizer.params.betas", 1, &opts.beta2))
			return accelp_err_set(err, ACCEL_ERR_CONFIG, "optimizer: optimizer.params.betas "
			                     "(from %s) must be a list of 2 numbers",
			                     source_of(cfg, "optimizer.params.betas"));
	}
	if ((rc = create(&opts, 1, &o, err)))
		return rc;
	while (accelp_config_get_strlist(cfg, "optimizer.no_decay", n, &suffix) == ACCEL_OK)
		n++;
	if (n) {
		o->no_decay = calloc(n, sizeof(*o->no_decay));
		if (!o->no_decay)
			goto nomem;
		for (uint32_t i = 0; i < n; i++) {
			if (accelp_config_get_strlist(cfg, "optimizer.no_decay", i, &suffix) ||
			    !(o->no_decay[i] = strdup(suffix)))
				goto nomem;
			o->n_no_decay = i + 1;
		}
	}
	*ret_optim = o;
	return ACCEL_OK;

nomem:
	accelp_optim_free(o);
	return accelp_err_set(err, ACCEL_ERR_NOMEM, "optimizer: out of memory");
}

accel_optim *accelp_optim_free(accel_optim *optim)
{
	if (!optim)
		return NULL;
	for (uint32_t i = 0; i < optim->n_no_decay; i++)
		free(optim->no_decay[i]);
	free(optim->no_decay);
	free(optim);
	return NULL;
}

const accel_optim_opts *accelp_optim_get_opts(const accel_optim *optim)
{
	return optim ? &optim->o : NULL;
}

uint32_t accelp_optim_state_count(const accel_optim *optim)
{
	if (!optim)
		return 0;
	if (optim->o.type == ACCEL_OPTIM_ADAMW)
		return 2;
	return optim->o.momentum != 0 ? 1 : 0;
}

const accel_optim_group *accelp_optim_get_group(const accel_optim *optim, uint32_t group)
{
	return optim && group < ACCEL_OPTIM_N_GROUPS ? &optim->groups[group] : NULL;
}

uint32_t accelp_optim_group_of(const accel_optim *optim, const char *name)
{
	size_t n = name ? strlen(name) : 0;
	for (uint32_t i = 0; optim && name && i < optim->n_no_decay; i++) {
		size_t m = strlen(optim->no_decay[i]);
		if (m && m <= n && !strcmp(name + n - m, optim->no_decay[i]))
			return ACCEL_OPTIM_GROUP_NO_DECAY;
	}
	return ACCEL_OPTIM_GROUP_DECAY;
}

const char *accelp_optim_get_kernel(const accel_optim *optim)
{
	return optim ? kernel_names[optim->kernel] : NULL;
}

int accelp_optim_set_kernel(accel_optim *optim, const char *name, accel_err *err)
{
	enum kernel best = best_kernel();
	if (!optim || !name)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer: %s is NULL",
		                     !optim ? "optim" : "kernel name");
	if (!strcmp(name, "auto")) {
		optim->kernel = best;
		return ACCEL_OK;
	}
	for (uint32_t k = 0; k < sizeof(kernel_names) / sizeof(kernel_names[0]); k++) {
		if (strcmp(name, kernel_names[k]))
			continue;
		if (k != K_GENERIC && k != best)
			return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "optimizer: kernel '%s' needs "
			                     "a CPU feature this machine lacks", name);
		optim->kernel = (enum kernel)k;
		return ACCEL_OK;
	}
	return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer: unknown kernel '%s' (auto, "
	                     "generic, avx2-fma)", name);
}

/* ---- kernels ------------------------------------------------------------------ */

/* The f32 constants of one update: backends/common/optim-consts.h. */
typedef accel_optim_adamw_k adamw_k;
typedef accel_optim_sgd_k sgd_k;

static ALWAYS_INLINE float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static ALWAYS_INLINE uint32_t to_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

/* Exact f16 -> f32 without branches or loops (so it vectorises): normal
 * numbers by placing exponent and mantissa in an f32 and rescaling by
 * 2^(127-15); subnormals as mantissa * 2^-24 from an integer, so no f32
 * subnormal is involved and flush-to-zero modes (DAZ/FTZ) cannot change
 * the result; exponent 31 is inf/NaN. */
static ALWAYS_INLINE float f16_to_f32(uint16_t h)
{
	uint32_t a = (uint32_t)(h & 0x7fffu) << 13;
	uint32_t s = (uint32_t)(h & 0x8000u) << 16;
	uint32_t norm = to_bits(from_bits(a) * 0x1p112f);
	uint32_t sub = to_bits((float)(int32_t)(h & 0x3ffu) * 0x1p-24f);
	uint32_t is_sub = 0u - (uint32_t)(a < 0x00800000u);      /* all ones: exponent 0  */
	uint32_t is_special = 0u - (uint32_t)(a >= 0x0f800000u); /* all ones: inf/NaN     */
	uint32_t u = (norm & ~is_sub) | (sub & is_sub);
	u = (u & ~is_special) | ((a | 0x7f800000u) & is_special);
	return from_bits(u | s);
}

static ALWAYS_INLINE float load_grad(const void *restrict g, uint64_t i, uint32_t dt)
{
	if (dt == ACCEL_DTYPE_F32)
		return ((const float *)g)[i];
	if (dt == ACCEL_DTYPE_BF16)
		return from_bits((uint32_t)((const uint16_t *)g)[i] << 16);
	return f16_to_f32(((const uint16_t *)g)[i]);
}

/* torch 1.13 _single_tensor_adamw, per element:
 *   param.mul_(1 - lr * wd)
 *   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)                  */
static ALWAYS_INLINE void adamw_body(const adamw_k *k, float *restrict p,
                                     const void *restrict g, uint32_t dt, float *restrict m,
                                     float *restrict v, uint64_t n)
{
	const float decay = k->decay, b1 = k->b1, omb1 = k->omb1, b2 = k->b2, omb2 = k->omb2;
	const float bc2s = k->bc2s, eps = k->eps, nstep = k->nstep, gs = k->gs;
	for (uint64_t i = 0; i < n; i++) {
		float gi = load_grad(g, i, dt) * gs;
		float pi = p[i] * decay;
		float mi = fmaf(gi, omb1, m[i] * b1);
		float vi = fmaf(omb2 * gi, gi, v[i] * b2);
		float d = sqrtf(vi) / bc2s + eps;
		m[i] = mi;
		v[i] = vi;
		p[i] = pi + (nstep * mi) / d;
	}
}

/* torch 1.13 _single_tensor_sgd, per element:
 *   d_p = d_p.add(param, alpha=wd)                      (if wd != 0)
 *   buf = clone(d_p) on the first step, else
 *   buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
 *   d_p = d_p.add(buf, alpha=momentum) if nesterov else buf
 *   param.add_(d_p, alpha=-lr)
 * MOM, WD, NEST and FIRST are constants at every call, so each combination
 * is its own branch-free loop (the vectoriser gives up on loops whose
 * selects were turned into branches). */
static ALWAYS_INLINE void sgd_body(const sgd_k *k, float *restrict p, const void *restrict g,
                                   uint32_t dt, float *restrict buf, uint64_t n,
                                   const int MOM, const int WD, const int NEST, const int FIRST)
{
	const float wd = k->wd, mom = k->mom, omdamp = k->omdamp, nlr = k->nlr, gs = k->gs;
	for (uint64_t i = 0; i < n; i++) {
		float pi = p[i];
		float d = load_grad(g, i, dt) * gs;
		if (WD)
			d = fmaf(pi, wd, d);
		if (MOM) {
			float b = FIRST ? d : fmaf(d, omdamp, buf[i] * mom);
			buf[i] = b;
			d = NEST ? fmaf(b, mom, d) : b;
		}
		p[i] = fmaf(d, nlr, pi);
	}
}

static ALWAYS_INLINE void sgd_flags(const sgd_k *k, float *restrict p, const void *restrict g,
                                    uint32_t dt, float *restrict buf, uint64_t n)
{
	if (!buf) {
		if (k->has_wd)
			sgd_body(k, p, g, dt, NULL, n, 0, 1, 0, 0);
		else
			sgd_body(k, p, g, dt, NULL, n, 0, 0, 0, 0);
		return;
	}
	switch ((k->has_wd ? 4 : 0) | (k->nesterov ? 2 : 0) | (k->first ? 1 : 0)) {
	case 0: sgd_body(k, p, g, dt, buf, n, 1, 0, 0, 0); break;
	case 1: sgd_body(k, p, g, dt, buf, n, 1, 0, 0, 1); break;
	case 2: sgd_body(k, p, g, dt, buf, n, 1, 0, 1, 0); break;
	case 3: sgd_body(k, p, g, dt, buf, n, 1, 0, 1, 1); break;
	case 4: sgd_body(k, p, g, dt, buf, n, 1, 1, 0, 0); break;
	case 5: sgd_body(k, p, g, dt, buf, n, 1, 1, 0, 1); break;
	case 6: sgd_body(k, p, g, dt, buf, n, 1, 1, 1, 0); break;
	default: sgd_body(k, p, g, dt, buf, n, 1, 1, 1, 1); break;
	}
}

/* One copy of each loop per gradient dtype, with `dt` a constant so each
 * is its own vectorised loop. */
#define KERNELS(suffix, attr)                                                              \
	attr static void adamw_##suffix(const adamw_k *k, float *restrict p,                   \
	                                const void *restrict g, uint32_t dt, float *restrict m, \
	                                float *restrict v, uint64_t n)                          \
	{                                                                                      \
		switch (dt) {                                                                      \
		case ACCEL_DTYPE_F32: adamw_body(k, p, g, ACCEL_DTYPE_F32, m, v, n); break;       \
		case ACCEL_DTYPE_BF16: adamw_body(k, p, g, ACCEL_DTYPE_BF16, m, v, n); break;     \
		default: adamw_body(k, p, g, ACCEL_DTYPE_F16, m, v, n); break;                   \
		}                                                                                  \
	}                                                                                      \
	attr static void sgd_##suffix(const sgd_k *k, float *restrict p, const void *restrict g, \
	                              uint32_t dt, float *restrict buf, uint64_t n)            \
	{                                                                                      \
		switch (dt) {                                                                      \
		case ACCEL_DTYPE_F32: sgd_flags(k, p, g, ACCEL_DTYPE_F32, buf, n); break;         \
		case ACCEL_DTYPE_BF16: sgd_flags(k, p, g, ACCEL_DTYPE_BF16, buf, n); break;       \
		default: sgd_flags(k, p, g, ACCEL_DTYPE_F16, buf, n); break;                     \
		}                                                                                  \
	}

KERNELS(generic, )
#ifdef HAVE_AVX2_FMA
KERNELS(avx2, __attribute__((target("avx2,fma"))))
#endif

/* ---- the step ------------------------------------------------------------------ */

int accelp_optim_step_range(const accel_optim *optim, const accel_optim_group *grp, uint64_t t,
                           double lr, float *p, const void *g, uint32_t gdtype,
                           float *const state[], uint64_t n, double grad_scale,
                           accel_err *err)
{
	uint32_t ns;
	double wd;

	if (!optim)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: optim is NULL");
	if (!grp)
		grp = &optim->groups[ACCEL_OPTIM_GROUP_DECAY];
	if (t == 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: step count t is 0; "
		                     "the first update has t = 1");
	if (!isfinite(lr) || lr < 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: learning rate %g "
		                     "must be finite and >= 0", lr);
	wd = grp->weight_decay;
	if (!isfinite(wd) || wd < 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: group weight_decay "
		                     "%g must be finite and >= 0", wd);
	if (gdtype != ACCEL_DTYPE_F32 && gdtype != ACCEL_DTYPE_F16 && gdtype != ACCEL_DTYPE_BF16)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: gradient dtype %s "
		                     "(%u) is not f32, f16 or bf16",
		                     accel_dtype_name(gdtype) ? accel_dtype_name(gdtype) : "unknown",
		                     gdtype);
	if (n == 0)
		return ACCEL_OK;
	ns = accelp_optim_state_count(optim);
	if (!p || !g)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: %s is NULL for %llu "
		                     "elements", !p ? "parameter" : "gradient", (unsigned long long)n);
	if (ns && !state)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: %s needs %u state "
		                     "arrays, got none", type_names[optim->o.type], ns);
	for (uint32_t k = 0; k < ns; k++) {
		if (!state[k])
			return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: state[%u] is "
			                     "NULL (%s keeps %u)", k, type_names[optim->o.type], ns);
		if ((void *)state[k] == (void *)p || (const void *)state[k] == g ||
		    (k && state[k] == state[0]))
			return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: state[%u] is "
			                     "the same array as the %s", k,
			                     (void *)state[k] == (void *)p ? "parameters"
			                     : (const void *)state[k] == g ? "gradients" : "state[0]");
	}
	if ((const void *)p == g)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: parameters and "
		                     "gradients are the same array");

	if (optim->o.type == ACCEL_OPTIM_ADAMW) {
		const accel_optim_opts *o = &optim->o;
		adamw_k k = accel_optim_adamw_consts(lr, o->beta1, o->beta2, o->eps, wd, t,
		                                      grad_scale);
#ifdef HAVE_AVX2_FMA
		if (optim->kernel == K_AVX2_FMA) {
			adamw_avx2(&k, p, g, gdtype, state[0], state[1], n);
			return ACCEL_OK;
		}
#endif
		adamw_generic(&k, p, g, gdtype, state[0], state[1], n);
		return ACCEL_OK;
	}

	sgd_k k = accel_optim_sgd_consts(lr, optim->o.momentum, optim->o.dampening,
	                                  optim->o.nesterov, wd, t, grad_scale);
	float *buf = ns ? state[0] : NULL;
#ifdef HAVE_AVX2_FMA
	if (optim->kernel == K_AVX2_FMA) {
		sgd_avx2(&k, p, g, gdtype, buf, n);
		return ACCEL_OK;
	}
#endif
	sgd_generic(&k, p, g, gdtype, buf, n);
	return ACCEL_OK;
}

int accelp_optim_step_ranges(const accel_optim *optim, const accel_optim_group *grp, uint64_t t,
                            double lr, int32_t device, int32_t device_index,
                            const accel_optim_range *ranges, uint32_t n, uint32_t gdtype,
                            double grad_scale, const double *grad_scale_dev, accel_err *err)
{
	const accel_device_v1 *dev;
	int r;
	if (!optim || (n && !ranges))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: %s is NULL",
		                     !optim ? "optim" : "ranges");
	if (device == ACCEL_DEVICE_CPU && grad_scale_dev)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: a gradient factor "
		                     "in device memory (grad_scale_dev) for a CPU step");
	if (device == ACCEL_DEVICE_CPU) {
		for (uint32_t i = 0; i < n; i++) {
			const accel_optim_range *q = &ranges[i];
			if ((r = accelp_optim_step_range(optim, grp, t, lr, q->param, q->grad, gdtype,
			                                q->state, q->numel, grad_scale, err)))
				return r;
		}
		return ACCEL_OK;
	}
	/* The checks of step_range that do not read memory, then the module. */
	if ((r = accelp_optim_step_range(optim, grp, t, lr, NULL, NULL, gdtype, NULL, 0, grad_scale,
	                                err)))
		return r;
	if ((r = accelp_device_for("optimizer step", device, device_index, &dev, err)) ||
	    (r = accelp_device_use_stream(dev, "optimizer step", err)))
		return r;
	/* a module before device ABI 1.2 would ignore the factor's address and
	 * apply grad_scale: an update without its clipping */
	if (grad_scale_dev && dev->desc->abi_minor < 2)
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "optimizer step: the gradient "
		                     "factor is in device memory, and the %s device module is of "
		                     "device ABI 1.%u (1.2 reads it)", dev->desc->name,
		                     dev->desc->abi_minor);
	if (!grp)
		grp = &optim->groups[ACCEL_OPTIM_GROUP_DECAY];
	uint32_t ns = accelp_optim_state_count(optim);
	for (uint32_t i = 0; i < n; i++) {
		const accel_optim_range *q = &ranges[i];
		if (q->numel && (!q->param || !q->grad || (ns >= 1 && !q->state[0]) ||
		                 (ns >= 2 && !q->state[1])))
			return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "optimizer step: range %u has a "
			                     "NULL parameter, gradient or state array (%s keeps %u) for "
			                     "%llu elements", i, type_names[optim->o.type], ns,
			                     (unsigned long long)q->numel);
	}
	accel_device_optim_v1 o = {
		.struct_size = sizeof(o),
		.type = optim->o.type == ACCEL_OPTIM_ADAMW ? ACCEL_DEVICE_OPTIM_ADAMW
		                                           : ACCEL_DEVICE_OPTIM_SGD,
		.grad_dtype = gdtype,
		.nesterov = optim->o.nesterov,
		.step = t,
		.lr = lr,
		.beta1 = optim->o.beta1,
		.beta2 = optim->o.beta2,
		.eps = optim->o.eps,
		.weight_decay = grp->weight_decay,
		.momentum = optim->o.momentum,
		.dampening = optim->o.dampening,
		.grad_scale = grad_scale,
		.range_size = sizeof(accel_device_range_v1),
		.grad_scale_dev = grad_scale_dev,
	};
	/* accel_optim_range and accel_device_range_v1 have the same members;
	 * convert in batches rather than depend on that. */
	enum { BATCH = 256 };
	accel_device_range_v1 dr[BATCH];
	char buf[1024] = "";
	accel_device_err_v1 de = {sizeof(de), sizeof(buf), buf};
	for (uint32_t i = 0; i < n;) {
		uint32_t k = 0;
		for (; i < n && k < BATCH; i++, k++)
			dr[k] = (accel_device_range_v1){ranges[i].param, ranges[i].grad,
			                                {ranges[i].state[0], ranges[i].state[1]},
			                                ranges[i].numel};
		if ((r = dev->optim_step(device_index, &o, dr, k, &de)))
			return accelp_device_fail(err, r, "optimizer step", buf);
	}
	return ACCEL_OK;
}
