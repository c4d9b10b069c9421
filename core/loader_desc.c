/* SPDX-License-Identifier: MIT */
/* core/loader_desc.c: the table an entry function returned: descriptor
 * strings, role, requirements, vtable size and required slots, copied into
 * this core's layout field by field before anything else reads them. */
#include <stdio.h>
#include <string.h>

#include "loader-impl.h"

static int name_ok(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return n > 0 && n <= ACCEL_LOADER_NAME_MAX_LEN;
}

/* Dotted path of [A-Za-z0-9_-] segments: "offload_optimizer.device". */

/* Common descriptor strings: name, version, summary, section. */
static int desc_strings(module_rec *m, const char *what, const char *name, const char *version,
                        const char *summary, const char *section)
{
	char b1[96];
	if (!name)
		return accelp_loader_broken(m, "%s name is NULL", what);
	if (!name_ok(name))
		return accelp_loader_broken(m, "%s name \"%s\" is not 1-%d characters of [a-z0-9_-]",
		                            what, accelp_loader_shown(name, b1, sizeof(b1)),
		                            ACCEL_LOADER_NAME_MAX_LEN);
	m->pub.name = name;
	if (!version || !*version)
		return accelp_loader_broken(m, "%s '%s' has no version string", what,
		                            name);
	if (section && !accelp_loader_schema_key_ok(section))
		return accelp_loader_broken(m, "%s '%s': config_section \"%s\" is not a dotted "
		                            "name of [A-Za-z0-9_-] parts", what, name,
		                            accelp_loader_shown(section, b1, sizeof(b1)));
	m->pub.version = version;
	m->pub.summary = summary ? summary : "";
	m->pub.config_section = section;
	return 0;
}

#define REQUIRE_SLOT(m, vt, slot, what)                                               \
	do {                                                                          \
		if (!(vt)->slot)                                                      \
			return accelp_loader_broken((m), "%s '%s': required slot %s is NULL", \
			                            (what), (m)->pub.name, #slot);            \
	} while (0)

/* Copy min(have, cap) bytes of a module struct, zero the rest. */
static void copy_struct(void *dst, size_t cap, const void *src, uint32_t have)
{
	memset(dst, 0, cap);
	memcpy(dst, src, have < cap ? have : cap);
}

static const char *role_word(uint32_t role)
{
	switch (role) {
	case ACCEL_ROLE_STRATEGY: return "strategy";
	case ACCEL_ROLE_REDUCE_HOOK: return "reduce hook";
	case ACCEL_ROLE_LOSS_SCALER: return "loss scaler";
	case ACCEL_ROLE_FP8_RECIPE: return "fp8 recipe";
	default: return "hook";
	}
}

/* A plugin built against a newer minor may use host members this core
 * lacks: it loads only when it says which host minor it needs at least
 * (desc.min_host_minor, read only when its struct_size covers it). */
static int minor_check(module_rec *m, uint32_t built, const accel_plugin_desc_v1 *rd)
{
	uint32_t need = rd->struct_size >= ACCEL_ABI_END(accel_plugin_desc_v1, min_host_minor)
	                        ? rd->min_host_minor
	                        : 0;
	if (need > ACCEL_ABI_MINOR)
		return accelp_loader_broken(m, "plugin '%s' needs accel ABI %d.%u or newer "
		                            "(min_host_minor); this accel is %d.%d: upgrade accel",
		                            m->pub.name, ACCEL_ABI_MAJOR, need, ACCEL_ABI_MAJOR,
		                            ACCEL_ABI_MINOR);
	if (built > ACCEL_ABI_MINOR && need == 0)
		return accelp_loader_broken(m, "plugin '%s' was built against ABI %d.%u; this accel "
		                            "is %d.%d: upgrade accel or rebuild the plugin against "
		                            "its headers (or declare min_host_minor in its "
		                            "descriptor)", m->pub.name, ACCEL_ABI_MAJOR, built,
		                            ACCEL_ABI_MAJOR, ACCEL_ABI_MINOR);
	return 0;
}

int accelp_loader_desc_check_plugin(module_rec *m, const accel_plugin_v1 *raw)
{
	if (raw->struct_size < ACCEL_ABI_END(accel_plugin_v1, desc))
		return accelp_loader_broken(m, "struct_size too small: accel_plugin_v1.struct_size "
		                            "is %u, ABI v1 needs at least %zu (through desc)",
		                            raw->struct_size, ACCEL_ABI_END(accel_plugin_v1, desc));
	const accel_plugin_desc_v1 *rd = raw->desc;
	if (!rd)
		return accelp_loader_broken(m, "accel_plugin_v1.desc is NULL");
	if (rd->struct_size < ACCEL_PLUGIN_DESC_V1_MIN_SIZE)
		return accelp_loader_broken(m, "struct_size too small: "
		                            "accel_plugin_desc_v1.struct_size is %u, ABI v1 needs "
		                            "at least %zu", rd->struct_size,
		                            (size_t)ACCEL_PLUGIN_DESC_V1_MIN_SIZE);
	accel_plugin_desc_v1 *d = &m->plugin_desc;
	copy_struct(d, sizeof(*d), rd, rd->struct_size);
	d->struct_size = sizeof(*d);
	int r = desc_strings(m, "plugin", d->name, d->version, d->summary, d->config_section);
	if (r)
		return r;
	m->pub.role = d->role;
	m->pub.caps = d->caps;
	m->pub.requires = d->requires;
	m->pub.min_cuda_cc = d->min_cuda_cc;
	m->pub.state_version = d->state_version;
	if (d->role < ACCEL_ROLE_STRATEGY || d->role > ACCEL_ROLE_FP8_RECIPE)
		return accelp_loader_broken(m, "plugin '%s': unknown role %u", d->name, d->role);
	if (d->min_cuda_cc < 0)
		return accelp_loader_broken(m, "plugin '%s': min_cuda_cc is %d", d->name,
		                            (int)d->min_cuda_cc);

	/* The vtable must reach the last slot its role requires. */
	size_t need = d->role == ACCEL_ROLE_STRATEGY      ? ACCEL_PLUGIN_V1_STRATEGY_MIN_SIZE
	              : d->role == ACCEL_ROLE_REDUCE_HOOK ? ACCEL_PLUGIN_V1_REDUCE_HOOK_MIN_SIZE
	                                                  : ACCEL_PLUGIN_V1_HOOK_MIN_SIZE;
	const char *last = d->role == ACCEL_ROLE_STRATEGY      ? "step"
	                   : d->role == ACCEL_ROLE_REDUCE_HOOK ? "reduce_bucket"
	                                                       : "fini";
	if (raw->struct_size < need)
		return accelp_loader_broken(m, "struct_size too small: accel_plugin_v1.struct_size "
		                            "is %u, a v1 %s needs at least %zu (through %s)",
		                            raw->struct_size, role_word(d->role), need, last);
	accel_plugin_v1 *vt = &m->plugin;
	copy_struct(vt, sizeof(*vt), raw, raw->struct_size);
	vt->struct_size = sizeof(*vt);
	vt->desc = d;
	m->pub.abi_minor = raw->abi_minor;
	if ((r = minor_check(m, raw->abi_minor, rd)))
		return r;
	REQUIRE_SLOT(m, vt, init, "plugin");
	REQUIRE_SLOT(m, vt, fini, "plugin");
	if (d->role == ACCEL_ROLE_STRATEGY) {
		REQUIRE_SLOT(m, vt, wrap, "strategy");
		REQUIRE_SLOT(m, vt, reduce, "strategy");
		REQUIRE_SLOT(m, vt, grad_stats, "strategy");
		REQUIRE_SLOT(m, vt, step, "strategy");
	}
	/* A hook of minor 3 may have only the bucket-description slots. */
	if (d->role == ACCEL_ROLE_REDUCE_HOOK && !vt->reduce_bucket && !vt->reduce_bucket_v2 &&
	    !vt->reduce_scatter_bucket)
		return accelp_loader_broken(m, "reduce hook '%s': required slot reduce_bucket (or, since ABI 1.3, "
		              "reduce_bucket_v2 or reduce_scatter_bucket) is NULL", m->pub.name);
	if ((r = accelp_loader_schema_load(m, d->config_section, d->params, d->n_params)))
		return r;
	d->params = m->params;
	m->pub.plugin = vt;
	return 0;
}

int accelp_loader_desc_check_comm(module_rec *m, const accel_comm_v1 *raw)
{
	if (raw->struct_size < ACCEL_COMM_V1_MIN_SIZE)
		return accelp_loader_broken(m, "struct_size too small: accel_comm_v1.struct_size "
		                            "is %u, ABI v1 needs at least %zu (through test)",
		                            raw->struct_size, (size_t)ACCEL_COMM_V1_MIN_SIZE);
	const accel_comm_desc_v1 *rd = raw->desc;
	if (!rd)
		return accelp_loader_broken(m, "accel_comm_v1.desc is NULL");
	if (rd->struct_size < ACCEL_COMM_DESC_V1_MIN_SIZE)
		return accelp_loader_broken(m, "struct_size too small: "
		                            "accel_comm_desc_v1.struct_size is %u, ABI v1 needs at "
		                            "least %zu", rd->struct_size,
		                            (size_t)ACCEL_COMM_DESC_V1_MIN_SIZE);
	accel_comm_desc_v1 *d = &m->comm_desc;
	copy_struct(d, sizeof(*d), rd, rd->struct_size);
	d->struct_size = sizeof(*d);
	int r = desc_strings(m, "comm backend", d->name, d->version, d->summary,
	                     d->config_section);
	if (r)
		return r;
	m->pub.devices = d->devices;
	m->pub.requires = d->requires;
	if (!(d->devices & ((1u << ACCEL_DEVICE_CPU) | (1u << ACCEL_DEVICE_CUDA))))
		return accelp_loader_broken(m, "comm backend '%s': devices is 0x%x, serves neither "
		                            "cpu nor cuda", d->name, d->devices);
	accel_comm_v1 *vt = &m->comm;
	copy_struct(vt, sizeof(*vt), raw, raw->struct_size);
	vt->struct_size = sizeof(*vt);
	vt->desc = d;
	m->pub.abi_minor = raw->abi_minor;
	REQUIRE_SLOT(m, vt, init, "comm backend");
	REQUIRE_SLOT(m, vt, fini, "comm backend");
	REQUIRE_SLOT(m, vt, allreduce, "comm backend");
	REQUIRE_SLOT(m, vt, reduce_scatter, "comm backend");
	REQUIRE_SLOT(m, vt, allgather, "comm backend");
	REQUIRE_SLOT(m, vt, broadcast, "comm backend");
	REQUIRE_SLOT(m, vt, barrier, "comm backend");
	REQUIRE_SLOT(m, vt, wait, "comm backend");
	REQUIRE_SLOT(m, vt, test, "comm backend");
	if ((r = accelp_loader_schema_load(m, d->config_section, d->params, d->n_params)))
		return r;
	d->params = m->params;
	m->pub.comm = vt;
	return 0;
}

