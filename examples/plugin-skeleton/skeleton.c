/* SPDX-License-Identifier: MIT */
/*
 * skeleton.c: a complete accel plugin in one file, built out of tree
 * against the installed headers:
 *
 *     cc $(pkg-config --cflags accel) -std=c11 -shared -fPIC \
 *        -fvisibility=hidden -Wl,--no-undefined -o skeleton.so skeleton.c
 *
 * It is a hook plugin (role OTHER): it reads three configuration keys,
 * says hello at init, and logs a line every `log_every` optimizer steps.
 * Select it with  "plugins": ["skeleton"]  and configure it in the
 * "skeleton" object of the config.  docs/writing-a-plugin.md walks through
 * it; copy it as the start of your own plugin.
 */
#include <stdint.h>
#include <stdlib.h>

#include <accel/plugin.h>

/* Everything one context's instance needs.  A plugin keeps no globals:
 * two contexts in one process get two of these. */
typedef struct skeleton {
	const accel_host_v1 *host;   /* the host table, valid until fini */
	accel_host *h;               /* our handle: first argument of every host call */
	const char *greeting;        /* borrowed from the config until fini */
	int64_t log_every;
	int32_t verbose;
	uint64_t steps;              /* optimizer steps seen (applied or skipped) */
	uint64_t skipped;
} skeleton;

/* The keys this plugin reads, inside its config section "skeleton".  The
 * core validates the user's values against this table before init(),
 * fills in the defaults, rejects unknown keys, and prints the table in
 * `accel plugins info skeleton`. */
static const accel_param_schema_v1 skeleton_params[] = {
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_STRING,
		.key = "greeting",
		.default_json = "\"hello\"",
		.min = 0, .max = -1,            /* no range */
		.help = "Word the plugin logs at init, to show it was selected.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_INT,
		.key = "log_every",
		.default_json = "100",
		.min = 1, .max = 1000000,
		.help = "Log the gradient norm and loss scale every this many optimizer steps.",
	},
	{
		.struct_size = sizeof(accel_param_schema_v1),
		.type = ACCEL_CFG_BOOL,
		.key = "verbose",
		.default_json = "false",
		.min = 0, .max = -1,
		.help = "Also log skipped steps (fp16 overflow) as they happen.",
	},
};

static int skeleton_init(const accel_host_v1 *host, accel_host *h, void **ret_state)
{
	skeleton *s = calloc(1, sizeof(*s));
	accel_world_v1 w = {.struct_size = sizeof(w)};
	int r;
	if (!s)
		return host->error(h, ACCEL_ERR_NOMEM, "out of memory");
	s->host = host;
	s->h = h;
	/* Keys are relative to our section.  Every key has a default, so
	 * these fail only on a bug; the host has recorded why, or we say. */
	if ((r = host->cfg_string(h, "greeting", &s->greeting)) ||
	    (r = host->cfg_int(h, "log_every", &s->log_every)) ||
	    (r = host->cfg_bool(h, "verbose", &s->verbose))) {
		host->error(h, r, "cannot read the skeleton config section");
		goto fail;
	}
	if ((r = host->world(h, &w)))
		goto fail;
	host->log(h, ACCEL_LOG_INFO, "%s from rank %d of %d; logging every %lld steps",
	          s->greeting, (int)w.rank, (int)w.world_size, (long long)s->log_every);
	*ret_state = s;
	return ACCEL_OK;
fail:
	free(s);
	return r;
}

static void skeleton_fini(void *state)
{
	skeleton *s = state;
	if (!s)
		return;
	s->host->log(s->h, ACCEL_LOG_DEBUG, "%llu steps seen, %llu skipped",
	             (unsigned long long)s->steps, (unsigned long long)s->skipped);
	free(s);
}

/* Called after every optimizer step, including skipped ones.  info->step
 * counts the steps applied before this one, so this is step info->step + 1. */
static int skeleton_post_step(void *state, const accel_step_info_v1 *info)
{
	skeleton *s = state;
	unsigned long long n = (unsigned long long)info->step + 1;
	s->steps++;
	if (info->skip) {
		s->skipped++;
		if (s->verbose)
			s->host->log(s->h, ACCEL_LOG_INFO, "step %llu skipped (non-finite gradients)",
			             n);
	}
	if (s->steps % (uint64_t)s->log_every == 0)
		s->host->log(s->h, ACCEL_LOG_INFO, "step %llu: grad norm %.4g, loss scale %g", n,
		             info->grad_norm, info->loss_scale);
	return ACCEL_OK;
}

static const accel_plugin_desc_v1 skeleton_desc = {
	.struct_size = sizeof(accel_plugin_desc_v1),
	.role = ACCEL_ROLE_OTHER,
	.name = "skeleton",
	.version = "0.1.0",
	.summary = "example hook plugin: logs at init and every N steps",
	.caps = ACCEL_CAP_CPU | ACCEL_CAP_CUDA,   /* touches no parameter memory */
	.requires = 0,
	.min_cuda_cc = 0,
	.state_version = 0,                         /* no save_state */
	.config_section = "skeleton",
	.params = skeleton_params,
	.n_params = sizeof(skeleton_params) / sizeof(skeleton_params[0]),
};

/* NULL slots mean "the core's default" (see accel/plugin.h). */
static const accel_plugin_v1 skeleton_vtable = {
	.struct_size = sizeof(accel_plugin_v1),
	.abi_minor = ACCEL_ABI_MINOR,
	.desc = &skeleton_desc,
	.init = skeleton_init,
	.fini = skeleton_fini,
	.post_step = skeleton_post_step,
};

/* The one exported symbol.  Everything above is static, and the build
 * uses -fvisibility=hidden, so nothing else leaks out of the .so. */
ACCEL_EXPORT const accel_plugin_v1 *accel_plugin_entry_v1(const accel_host_v1 *host)
{
	/* All host members this file calls exist since ABI 1.0.  A plugin
	 * using a member appended later checks host->struct_size here and
	 * returns NULL after host->error(NULL, ...) when the host is older. */
	(void)host;
	return &skeleton_vtable;
}
