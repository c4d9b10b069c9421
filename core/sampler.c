/* SPDX-License-Identifier: MIT */
/* core/sampler.c: distributed sampler, Accelerate's batching rules.
 *
 * Why a Feistel permutation instead of materializing randperm(N): every
 * rank needs only its own positions, so computing perm(pos) on demand costs
 * O(1) memory whatever N is, makes resuming mid-epoch (or at another world
 * size) free, and can never disagree between ranks because no rank builds a
 * table the others do not.  The network is keyed per (seed, epoch) by a
 * counter-based construction (the splitmix64 finalizer over counters), and
 * positions outside 0..N-1 are "cycle-walked" back in, which keeps it a
 * bijection of exactly 0..N-1 (Black and Rogaway, "Ciphers with arbitrary
 * finite domains", 2002). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ctx-impl.h"
#include "log.h"
#include "sampler.h"

/* Config keys the AUTO values come from (core schema, see docs/config.md). */
#define KEY_SEED "seed"
#define KEY_SHUFFLE "dataloader.shuffle"
#define KEY_DROP "dataloader.drop_last"
#define KEY_SPLIT "dataloader.split_batches"
#define KEY_EVEN "dataloader.even_batches"
/* Their defaults, used without a context (the same as the schema's). */
#define DEFAULT_SEED 42

/* The largest dataset: positions plus one global batch must fit in int64. */
#define MAX_SAMPLES (UINT64_C(1) << 62)

struct accel_sampler {
	accel_ctx *ctx;           /* borrowed, optional: receives messages */
	accel_err err;            /* most recent failure */
	uint64_t n;               /* N */
	uint64_t b;               /* per-rank batch */
	uint64_t g;               /* global batch R*b */
	uint32_t rank, world;
	uint64_t seed;
	int shuffle, drop_last, split, even;
	uint64_t epoch;
	uint64_t consumed;        /* positions of this epoch handed out, <= n */
	accel_perm perm;          /* keyed for `epoch` */
	int have_last;
	accel_sampler_batch last;
};

/* ---- the permutation -------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
	/* splitmix64's finalizer: a bijection of 64-bit words with full avalanche. */
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

void accelp_perm_init(accel_perm *p, uint64_t n, uint64_t seed, uint64_t epoch)
{
	memset(p, 0, sizeof(*p));
	p->n = n;
	/* Domain: 2^(2h) >= 2n with h >= 3.  Every round of a Feistel network
	 * on halves of h >= 2 bits is an even permutation of the domain, so a
	 * domain of exactly n elements would only ever produce even
	 * permutations, and halves of 1 or 2 bits give visibly non-uniform
	 * shuffles of small datasets (measured: chi-square over all 120 orders
	 * of 5 elements 3x its expectation at h = 2, normal at h = 3).  Room of
	 * at least 2n lets cycle walking break the parity; it costs < 8 walks
	 * per index on average. */
	uint32_t bits = 1;
	while (bits < 64 && (UINT64_C(1) << bits) < 2 * n)
		bits++;
	p->half_bits = (bits + 1) / 2 < 3 ? 3 : (bits + 1) / 2;
	/* 8 rounds: twice the 4 that make a Feistel network pseudo-random
	 * (Luby and Rackoff); measured uniform on small domains (tests). */
	p->rounds = 8;
	/* Keys: a counter sequence from (seed, epoch).  mix64 is a bijection, so
	 * for one seed every epoch gets a different key stream. */
	uint64_t st = mix64(mix64(seed + UINT64_C(0x632be59bd9b4e019)) + epoch);
	for (uint32_t i = 0; i < p->rounds; i++) {
		st += UINT64_C(0x9e3779b97f4a7c15);
		p->keys[i] = mix64(st);
	}
}

static uint64_t feistel(const accel_perm *p, uint64_t x)
{
	const uint32_t h = p->half_bits;
	const uint64_t mask = (UINT64_C(1) << h) - 1;
	uint64_t l = x >> h, r = x & mask;
	for (uint32_t i = 0; i < p->rounds; i++) {
		uint64_t f = mix64(r ^ p->keys[i]) >> (64 - h);
		uint64_t t = l ^ f;
		l = r;
		r = t;
	}
	return (l << h) | r;
}

uint64_t accelp_perm_apply(const accel_perm *p, uint64_t pos)
{
	if (p->n <= 1)
		return 0;
	/* Cycle walking: the domain is < 8n (for n >= 8), so on average < 8
	 * passes; it ends because pos lies on a cycle of the network, and that
	 * cycle returns into 0..n-1 (at the latest at pos itself). */
	uint64_t x = feistel(p, pos);
	while (x >= p->n)
		x = feistel(p, x);
	return x;
}

uint64_t accelp_sampler_perm(const accel_sampler *s, uint64_t epoch, uint64_t pos)
{
	if (!s->shuffle)
		return pos;
	if (epoch == s->epoch)
		return accelp_perm_apply(&s->perm, pos);
	accel_perm p;
	accelp_perm_init(&p, s->n, s->seed, epoch);
	return accelp_perm_apply(&p, pos);
}

/* ---- layout --------------------------------------------------------------------- */

uint64_t accelp_sampler_layout_valid(uint64_t n, uint64_t b, uint32_t rank, uint64_t offset)
{
	if (offset >= n)
		return 0;
	uint64_t left = n - offset, skip = (uint64_t)rank * b;
	if (skip >= left)
		return 0;
	return left - skip < b ? left - skip : b;
}

uint64_t accelp_sampler_layout_num_batches(uint64_t n, uint64_t b, uint32_t rank,
                                          uint32_t world_size, int drop_last,
                                          int even_batches)
{
	uint64_t g = b * world_size;
	if (drop_last)
		return n / g;
	if (even_batches)
		return n / g + (n % g != 0);
	uint64_t skip = (uint64_t)rank * b;
	if (skip >= n)
		return 0;
	return (n - skip + g - 1) / g;
}

/* Whether a step starting at `c` gives this rank a batch. */
static int step_available(const accel_sampler *s, uint64_t c)
{
	if (c >= s->n)
		return 0;
	if (s->drop_last)
		return s->n - c >= s->g;
	if (s->even)
		return 1;
	return accelp_sampler_layout_valid(s->n, s->b, s->rank, c) > 0;
}

/* ---- errors ----------------------------------------------------------------------- */

static int sampler_fail(accel_sampler *s, int code, const char *fmt, ...) ACCEL_PRINTF(3, 4);
static int sampler_fail(accel_sampler *s, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (s) {
		accelp_err_clear(&s->err);
		accelp_err_setv(&s->err, code, fmt, ap);
		if (s->ctx)
			accelp_err_set(&s->ctx->err, code, "%s", s->err.msg);
		else
			accelp_log(ACCEL_LOG_ERROR, "%s", s->err.msg);
	} else {
		char msg[512];
		vsnprintf(msg, sizeof(msg), fmt, ap);
		accelp_log(ACCEL_LOG_ERROR, "%s", msg);
	}
	va_end(ap);
	return code;
}

const char *accelp_sampler_last_error(const accel_sampler *s)
{
	return s ? s->err.msg : "";
}

/* ---- creation --------------------------------------------------------------------- */

void accel_sampler_opts_init(accel_sampler_opts *opts)
{
	if (!opts)
		return;
	memset(opts, 0, sizeof(*opts));
	opts->struct_size = sizeof(*opts);
	opts->seed = ACCEL_SAMPLER_AUTO;
	opts->rank = ACCEL_SAMPLER_AUTO;
	opts->world_size = ACCEL_SAMPLER_AUTO;
	opts->shuffle = ACCEL_SAMPLER_AUTO;
	opts->drop_last = ACCEL_SAMPLER_AUTO;
	opts->split_batches = ACCEL_SAMPLER_AUTO;
	opts->even_batches = ACCEL_SAMPLER_AUTO;
}

static int check_flag(const char *what, int32_t v, accel_err *err)
{
	if (v != 0 && v != 1)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: %s must be 0 or 1, got %d", what, (int)v);
	return ACCEL_OK;
}

int accelp_sampler_create(accel_ctx *ctx, const accel_sampler_opts *opts,
                         accel_sampler **ret_sampler, accel_err *err)
{
	accel_sampler *s = NULL;
	int rc;

	if (!opts || !ret_sampler)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "sampler: %s is NULL",
		                     !opts ? "opts" : "ret_sampler");
	if (opts->struct_size < sizeof(accel_sampler_opts))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: opts.struct_size is %u, expected %zu (call "
		                     "accel_sampler_opts_init() first)",
		                     opts->struct_size, sizeof(accel_sampler_opts));
	if (opts->n_samples == 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: n_samples is 0 (an empty dataset has no batches)");
	if (opts->n_samples > MAX_SAMPLES)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: n_samples %llu is larger than the supported 2^62",
		                     (unsigned long long)opts->n_samples);
	if (opts->batch_size == 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "sampler: batch_size is 0");
	if (opts->world_size <= 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: world_size must be > 0, got %d", (int)opts->world_size);
	if (opts->rank < 0 || opts->rank >= opts->world_size)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: rank %d is outside 0..%d (world_size %d)",
		                     (int)opts->rank, (int)opts->world_size - 1,
		                     (int)opts->world_size);
	if (opts->seed < 0)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: seed must be >= 0, got %lld", (long long)opts->seed);
	if ((rc = check_flag("shuffle", opts->shuffle, err)) ||
	    (rc = check_flag("drop_last", opts->drop_last, err)) ||
	    (rc = check_flag("split_batches", opts->split_batches, err)) ||
	    (rc = check_flag("even_batches", opts->even_batches, err)))
		return rc;

	uint64_t b = opts->batch_size;
	if (opts->split_batches) {
		if (b % (uint64_t)opts->world_size != 0)
			return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
			                     "sampler: with split_batches the batch size is the "
			                     "global batch and must be a multiple of the world size: "
			                     "%llu is not a multiple of %d (use %llu or %llu, or "
			                     "split_batches=false)",
			                     (unsigned long long)b, (int)opts->world_size,
			                     (unsigned long long)(b / (uint64_t)opts->world_size *
			                                          (uint64_t)opts->world_size),
			                     (unsigned long long)((b / (uint64_t)opts->world_size + 1) *
			                                          (uint64_t)opts->world_size));
		b /= (uint64_t)opts->world_size;
		if (b == 0)
			return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
			                     "sampler: global batch %llu is smaller than the world size %d",
			                     (unsigned long long)opts->batch_size, (int)opts->world_size);
	}
	if (b > UINT32_MAX)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "sampler: per-rank batch %llu is larger than %u",
		                     (unsigned long long)b, (unsigned)UINT32_MAX);

	s = calloc(1, sizeof(*s));
	if (!s)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "sampler: out of memory");
	s->ctx = ctx;
	s->n = opts->n_samples;
	s->b = b;
	s->rank = (uint32_t)opts->rank;
	s->world = (uint32_t)opts->world_size;
	s->g = b * s->world;
	s->seed = (uint64_t)opts->seed;
	s->shuffle = opts->shuffle;
	s->drop_last = opts->drop_last;
	s->split = opts->split_batches;
	s->even = opts->even_batches;
	s->epoch = 0;
	s->consumed = 0;
	accelp_perm_init(&s->perm, s->n, s->seed, 0);
	*ret_sampler = s;
	return ACCEL_OK;
}

/* A flag from the configuration: the value and whether a layer above the
 * built-in defaults set it (then it is the user's choice, not a default). */
static int config_flag(accel_ctx *ctx, const char *key, int32_t *ret_value,
                       const char **ret_source)
{
	int32_t v;
	if (!ctx || !ctx->cfg)
		return ACCEL_ERR_NOT_FOUND;
	if (accelp_config_get_bool(ctx->cfg, key, &v) != ACCEL_OK)
		return ACCEL_ERR_NOT_FOUND;
	const char *src = accelp_config_source(ctx->cfg, key);
	*ret_value = v != 0;
	/* "default" or "default (null at FILE)": not the user's choice. */
	*ret_source = (src && strncmp(src, "default", 7) != 0) ? src : NULL;
	return ACCEL_OK;
}

static int resolve_flag(accel_ctx *ctx, const char *key, int32_t given, int32_t dflt,
                        int32_t *ret, accel_err *err)
{
	int32_t cv = 0;
	const char *src = NULL;
	int have = config_flag(ctx, key, &cv, &src) == ACCEL_OK;
	if (given == ACCEL_SAMPLER_AUTO) {
		*ret = have ? cv : dflt;
		return ACCEL_OK;
	}
	if (have && src && (given != 0) != cv)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "sampler: %s=%s passed to accel_sampler_new() contradicts "
		                     "%s=%s from %s; set it in one place (leave the option at "
		                     "ACCEL_SAMPLER_AUTO to use the configuration)",
		                     key, given ? "true" : "false", key, cv ? "true" : "false", src);
	*ret = given;
	return ACCEL_OK;
}

/* An optimizer step that spans more than an epoch is rarely meant (a batch
 * size given per node instead of per rank, a small validation set): said
 * once per context, where the epoch's length is known. */
static void warn_accumulation(accel_ctx *ctx, const accel_sampler *s)
{
	int64_t gas;
	if (!ctx->cfg || ctx->warned_gas_epoch ||
	    accelp_config_get_int(ctx->cfg, "gradient_accumulation_steps", &gas) != ACCEL_OK ||
	    gas <= 1)
		return;
	uint64_t nb = accelp_sampler_layout_num_batches(s->n, s->b, s->rank, s->world,
	                                                s->drop_last, s->even);
	if ((uint64_t)gas <= nb)
		return;
	ctx->warned_gas_epoch = 1;
	const char *src = accelp_config_source(ctx->cfg, "gradient_accumulation_steps");
	accelp_log(ACCEL_LOG_WARN, "gradient_accumulation_steps = %lld (%s) is more than the %llu "
	          "batch%s of an epoch of this sampler (%llu samples, %llu per rank and step, %u "
	          "rank%s): each optimizer step spans more than an epoch; lower it or the batch "
	          "size", (long long)gas, src ? src : "config", (unsigned long long)nb,
	          nb == 1 ? "" : "es", (unsigned long long)s->n, (unsigned long long)s->b,
	          s->world, s->world == 1 ? "" : "s");
}

int accel_sampler_new(accel_ctx *ctx, const accel_sampler_opts *opts,
                      accel_sampler **ret_sampler)
{
	accel_err local = {0};
	accel_err *err = ctx ? &ctx->err : &local;
	accel_sampler_opts o;
	int rc;

	if (!opts || !ret_sampler) {
		rc = accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_sampler_new: %s is NULL",
		                   !opts ? "opts" : "ret_sampler");
		goto fail;
	}
	if (opts->struct_size < sizeof(o)) {
		rc = accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                   "accel_sampler_new: opts.struct_size is %u, expected %zu "
		                   "(call accel_sampler_opts_init() first)",
		                   opts->struct_size, sizeof(o));
		goto fail;
	}
	o = *opts;
	if (o.rank == ACCEL_SAMPLER_AUTO)
		o.rank = ctx ? ctx->world.rank : 0;
	if (o.world_size == ACCEL_SAMPLER_AUTO)
		o.world_size = ctx ? ctx->world.world_size : 1;
	if (o.seed == ACCEL_SAMPLER_AUTO) {
		int64_t seed = DEFAULT_SEED;
		if (ctx && ctx->cfg && accelp_config_get_int(ctx->cfg, KEY_SEED, &seed) == ACCEL_OK &&
		    seed < 0) {
			rc = accelp_err_set(err, ACCEL_ERR_CONFIG,
			                   "sampler: config seed is %lld; it must be >= 0",
			                   (long long)seed);
			goto fail;
		}
		o.seed = seed;
	}
	if ((rc = resolve_flag(ctx, KEY_SHUFFLE, o.shuffle, 1, &o.shuffle, err)) ||
	    (rc = resolve_flag(ctx, KEY_DROP, o.drop_last, 0, &o.drop_last, err)) ||
	    (rc = resolve_flag(ctx, KEY_SPLIT, o.split_batches, 0, &o.split_batches, err)) ||
	    (rc = resolve_flag(ctx, KEY_EVEN, o.even_batches, 1, &o.even_batches, err)))
		goto fail;
	if (ctx) {   /* accel_save_state saves it (core/ckpt.c) */
		accel_sampler **list = realloc(ctx->samplers, (ctx->n_samplers + 1) * sizeof(*list));
		if (!list) {
			rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "accel_sampler_new: out of memory");
			goto fail;
		}
		ctx->samplers = list;
	}
	if ((rc = accelp_sampler_create(ctx, &o, ret_sampler, err)))
		goto fail;
	if (ctx) {
		ctx->samplers[ctx->n_samplers++] = *ret_sampler;
		warn_accumulation(ctx, *ret_sampler);
	}
	return ACCEL_OK;
fail:
	if (!ctx)
		accelp_log(ACCEL_LOG_ERROR, "%s", local.msg);
	return rc;
}

void accelp_sampler_detach(accel_sampler *s)
{
	if (s)
		s->ctx = NULL;
}

accel_sampler *accel_sampler_free(accel_sampler *s)
{
	accel_ctx *ctx = s ? s->ctx : NULL;
	for (uint32_t i = 0; ctx && i < ctx->n_samplers; i++)
		if (ctx->samplers[i] == s) {
			memmove(&ctx->samplers[i], &ctx->samplers[i + 1],
			        (ctx->n_samplers - i - 1) * sizeof(*ctx->samplers));
			if (--ctx->n_samplers == 0) {
				free(ctx->samplers);
				ctx->samplers = NULL;
			}
			break;
		}
	free(s);
	return NULL;
}

/* ---- iteration ---------------------------------------------------------------------- */

static void go_to(accel_sampler *s, uint64_t epoch, uint64_t consumed)
{
	if (epoch != s->epoch || s->perm.n != s->n)
		accelp_perm_init(&s->perm, s->n, s->seed, epoch);
	s->epoch = epoch;
	s->consumed = consumed;
	s->have_last = 0;
}

int accel_sampler_next(accel_sampler *s, int64_t *ret_indices, uint32_t *ret_count)
{
	if (!s || !ret_indices || !ret_count)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG, "accel_sampler_next: %s is NULL",
		                    !s ? "s" : !ret_indices ? "ret_indices" : "ret_count");
	const uint64_t c = s->consumed;
	if (!step_available(s, c)) {
		go_to(s, s->epoch + 1, 0);
		*ret_count = 0;
		return ACCEL_OK;
	}
	const uint64_t start = c + (uint64_t)s->rank * s->b;
	const uint64_t valid = accelp_sampler_layout_valid(s->n, s->b, s->rank, c);
	const uint64_t count = (s->even || s->drop_last) ? s->b : valid;
	for (uint64_t j = 0; j < count; j++) {
		uint64_t pos = start + j;
		if (pos >= s->n)
			pos %= s->n;      /* even_batches padding: wrap to the epoch's start */
		ret_indices[j] = (int64_t)(s->shuffle ? accelp_perm_apply(&s->perm, pos) : pos);
	}
	s->consumed = s->n - c > s->g ? c + s->g : s->n;
	s->have_last = 1;
	s->last.struct_size = sizeof(s->last);
	s->last.epoch = s->epoch;
	s->last.offset = c;
	s->last.count = count;
	s->last.valid = valid;
	s->last.global_valid = s->n - c > s->g ? s->g : s->n - c;
	s->last.last = !step_available(s, s->consumed);
	*ret_count = (uint32_t)count;
	return ACCEL_OK;
}

int accel_sampler_set_epoch(accel_sampler *s, uint64_t epoch)
{
	if (!s)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG, "accel_sampler_set_epoch: s is NULL");
	go_to(s, epoch, 0);
	return ACCEL_OK;
}

int accel_sampler_get_state(const accel_sampler *s, accel_sampler_state *ret_state)
{
	if (!s || !ret_state)
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_get_state: %s is NULL", !s ? "s" : "ret_state");
	accel_sampler_state st = {0};
	uint32_t size = ret_state->struct_size;
	if (size < offsetof(accel_sampler_state, consumed) + sizeof(st.consumed))
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_get_state: ret_state->struct_size %u is "
		                    "smaller than version 1 (%zu); set it to sizeof(accel_sampler_state)",
		                    size, sizeof(st));
	st.struct_size = size < sizeof(st) ? size : (uint32_t)sizeof(st);
	st.version = ACCEL_SAMPLER_STATE_VERSION;
	st.n_samples = s->n;
	st.seed = s->seed;
	st.shuffle = (uint32_t)s->shuffle;
	st.epoch = s->epoch;
	st.consumed = s->consumed;
	memcpy(ret_state, &st, st.struct_size);
	return ACCEL_OK;
}

int accel_sampler_restore(accel_sampler *s, const accel_sampler_state *st)
{
	if (!s || !st)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG, "accel_sampler_restore: %s is NULL",
		                    !s ? "s" : "state");
	if (st->struct_size < offsetof(accel_sampler_state, consumed) + sizeof(st->consumed))
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_restore: state.struct_size %u is too small "
		                    "(%zu); not a sampler state", st->struct_size,
		                    sizeof(accel_sampler_state));
	if (st->version != ACCEL_SAMPLER_STATE_VERSION)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_restore: state version %u is not supported "
		                    "(this library reads version %d)", st->version,
		                    ACCEL_SAMPLER_STATE_VERSION);
	if (st->n_samples != s->n)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_restore: the state is for a dataset of %llu "
		                    "samples, this sampler has %llu; the order would not match",
		                    (unsigned long long)st->n_samples, (unsigned long long)s->n);
	if ((st->shuffle != 0) != (s->shuffle != 0))
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_restore: the state was saved with shuffle=%u, "
		                    "this sampler has shuffle=%d", st->shuffle, s->shuffle);
	if (s->shuffle && st->seed != s->seed)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_restore: the state was saved with seed %llu, "
		                    "this sampler has seed %llu; the order would not match",
		                    (unsigned long long)st->seed, (unsigned long long)s->seed);
	if (st->consumed > s->n)
		return sampler_fail(s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_restore: state.consumed %llu exceeds n_samples %llu",
		                    (unsigned long long)st->consumed, (unsigned long long)s->n);
	go_to(s, st->epoch, st->consumed);
	return ACCEL_OK;
}

int accel_sampler_get_info(const accel_sampler *s, accel_sampler_info *ret_info)
{
	if (!s || !ret_info)
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_get_info: %s is NULL", !s ? "s" : "ret_info");
	accel_sampler_info in = {0};
	uint32_t size = ret_info->struct_size;
	if (size < sizeof(uint32_t))
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_get_info: set ret_info->struct_size");
	in.struct_size = size < sizeof(in) ? size : (uint32_t)sizeof(in);
	in.rank = (int32_t)s->rank;
	in.world_size = (int32_t)s->world;
	in.shuffle = s->shuffle;
	in.drop_last = s->drop_last;
	in.split_batches = s->split;
	in.even_batches = s->even;
	in.seed = s->seed;
	in.n_samples = s->n;
	in.batch_size = s->b;
	in.global_batch = s->g;
	in.num_batches = accelp_sampler_layout_num_batches(s->n, s->b, s->rank, s->world,
	                                                  s->drop_last, s->even);
	memcpy(ret_info, &in, in.struct_size);
	return ACCEL_OK;
}

int accel_sampler_last_batch(const accel_sampler *s, accel_sampler_batch *ret_batch)
{
	if (!s || !ret_batch)
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_last_batch: %s is NULL", !s ? "s" : "ret_batch");
	if (!s->have_last)
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_STATE,
		                    "accel_sampler_last_batch: no batch was returned since the "
		                    "sampler was created, restored or moved to epoch %llu",
		                    (unsigned long long)s->epoch);
	uint32_t size = ret_batch->struct_size;
	if (size < sizeof(uint32_t))
		return sampler_fail((accel_sampler *)s, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_last_batch: set ret_batch->struct_size");
	accel_sampler_batch b = s->last;
	b.struct_size = size < sizeof(b) ? size : (uint32_t)sizeof(b);
	memcpy(ret_batch, &b, b.struct_size);
	return ACCEL_OK;
}

/* ---- metrics ----------------------------------------------------------------------- */

int accel_sampler_compact(const accel_sampler *s, void *data, size_t sample_bytes,
                          uint64_t *ret_count)
{
	accel_sampler *ms = (accel_sampler *)s;   /* only its error record changes */
	if (!s || !data || !ret_count || sample_bytes == 0)
		return sampler_fail(ms, ACCEL_ERR_INVALID_ARG,
		                    "accel_sampler_compact: %s",
		                    !s ? "s is NULL" : !data ? "data is NULL" :
		                    !ret_count ? "ret_count is NULL" : "sample_bytes is 0");
	if (!s->have_last)
		return sampler_fail(ms, ACCEL_ERR_STATE,
		                    "accel_sampler_compact: no batch was returned since the "
		                    "sampler was created, restored or moved to epoch %llu",
		                    (unsigned long long)s->epoch);
	char *p = data;
	const size_t block = (size_t)s->b * sample_bytes;
	uint64_t kept = 0;
	for (uint32_t r = 0; r < s->world; r++) {
		uint64_t v = accelp_sampler_layout_valid(s->n, s->b, r, s->last.offset);
		if (v == 0)
			break;        /* later ranks have no real samples either */
		/* The destination never passes the source (kept <= r*b), so an
		 * in-order forward move is safe. */
		if (kept != (uint64_t)r * s->b)
			memmove(p + kept * sample_bytes, p + (size_t)r * block, (size_t)v * sample_bytes);
		kept += v;
	}
	*ret_count = kept;
	return ACCEL_OK;
}
