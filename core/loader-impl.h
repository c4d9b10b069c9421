/* SPDX-License-Identifier: MIT */
/* core/loader-impl.h: the loader's records and the helpers its files share
 * (private to core/loader*.c).
 *
 *   loader.c         the loader object, directories, scanning, loading,
 *                    requirements and shadowing; names for messages
 *   loader_elf.c     the ELF pre-check that runs before dlopen()
 *   loader_desc.c    descriptor and vtable checks of an entry's table
 *   loader_schema.c  parameter schema checks and normalization
 *   loader_find.c    lookup by name, with "did you mean" */
#ifndef ACCEL_CORE_LOADER_IMPL_H
#define ACCEL_CORE_LOADER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "loader.h"

#define ACCEL_LOADER_NAME_MAX_LEN 63

/* One file.  The module's tables copied into this core's layout: members
 * its struct_size did not cover read as NULL/0, so nothing past the
 * module's structs is ever read. */
typedef struct module_rec {
	accel_module pub;
	char *real;                    /* realpath(), to load each file once */
	accel_param_schema_v1 *params; /* normalized copies (pub.params)     */
	accel_plugin_v1 plugin;
	accel_plugin_desc_v1 plugin_desc;
	accel_comm_v1 comm;
	accel_comm_desc_v1 comm_desc;
} module_rec;

typedef struct dir_rec {
	char *dir;
	char *origin;
	int exists;
	int scanned;
} dir_rec;

/* A directory entry named like a module that is not one a scan can open
 * (a dangling link, a loop of links, a folder): kept so that looking its
 * name up says what it is instead of "no plugin named". */
typedef struct skip_rec {
	char *path;
	char *why;
} skip_rec;

struct accel_loader {
	const accel_host_v1 *host;
	skip_rec *skips;
	uint32_t n_skips, cap_skips;
	accel_host_v1 *probe_host;   /* the host table probe_major() lends (owned) */
	module_rec **mods;
	uint32_t n_mods, cap_mods;
	dir_rec *dirs;
	uint32_t n_dirs, cap_dirs;
	uint32_t avail;
	int32_t avail_cc;
	int scanned;
};

/* ---- loader.c: records and message text ---- */

/* Append printf text to the string in buf (bounded by cap). */
void accelp_loader_appendf(char *buf, size_t cap, const char *fmt, ...) ACCEL_PRINTF(3, 4);
/* Fold control characters into spaces: reasons are one line. */
void accelp_loader_one_line(char *s);
/* A string a module gave, quoted for a message: bounded, one line. */
const char *accelp_loader_shown(const char *s, char *buf, size_t cap);
/* "plugin" or "comm backend". */
const char *accelp_loader_kind_word(int kind);
/* Set status and a "<path>: <cause>" reason (replacing any earlier one);
 * ACCEL_OK or ACCEL_ERR_NOMEM. */
int accelp_loader_rec_set(module_rec *m, int status, const char *fmt, ...) ACCEL_PRINTF(3, 4);
/* A file that cannot be used: record why; returns -1 (internal "failed"). */
int accelp_loader_broken(module_rec *m, const char *fmt, ...) ACCEL_PRINTF(2, 3);
/* The first module of that kind and name other than not_this, in search
 * order, that is not shadowed (a broken one counts once it said its
 * name); NULL if none. */
module_rec *accelp_loader_claimant(const accel_loader *ld, int kind, const char *name,
                                   const module_rec *not_this);

/* ---- loader_elf.c ---- */

/* 0 when `path` looks like a complete shared object for this machine,
 * else -1 with the cause in why. */
int accelp_loader_elf_check(const char *path, char *why, size_t cap);

/* ---- loader_desc.c ---- */

/* Check the table an entry returned and copy it into m (vtable,
 * descriptor, schema); 0, -1 with m marked BROKEN, or ACCEL_ERR_NOMEM. */
int accelp_loader_desc_check_plugin(module_rec *m, const accel_plugin_v1 *raw);
int accelp_loader_desc_check_comm(module_rec *m, const accel_comm_v1 *raw);

/* ---- loader_schema.c ---- */

/* Dotted path of [A-Za-z0-9_-] segments ("offload_optimizer.device"). */
int accelp_loader_schema_key_ok(const char *s);
/* Copy the module's schema into this core's layout (m->params) and check
 * it; `params` is the module's array, whose stride is its entries'
 * struct_size.  0, -1 with m marked BROKEN, or ACCEL_ERR_NOMEM. */
int accelp_loader_schema_load(module_rec *m, const char *section,
                              const accel_param_schema_v1 *params, uint32_t n_params);

#endif
