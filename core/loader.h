/* SPDX-License-Identifier: MIT */
/* core/loader.h: finding, loading and checking plugins and comm backends.
 *
 * Search order: config plugin_dirs, then ACCEL_PLUGIN_PATH (':'-separated),
 * then the install plugindir.  Every regular file named *.so in those
 * directories (not recursive) is a candidate.  Loading is dlopen(RTLD_NOW |
 * RTLD_LOCAL); the entry symbol of the newest supported major is called;
 * descriptor and vtable are checked (struct_size, required slots, name
 * syntax, role).  A file that fails is recorded with its path and a one-line
 * reason and never crashes the process; two modules with one name are an
 * error naming both files.  Handles are never dlclose()d while the loader
 * lives (and not at all, see docs/abi.md). */
#ifndef ACCEL_CORE_LOADER_H
#define ACCEL_CORE_LOADER_H

#include <stdint.h>

#include "accel/comm.h"
#include "accel/plugin.h"
#include "error.h"

typedef struct accel_loader accel_loader;

#define ACCEL_MODULE_PLUGIN 1
#define ACCEL_MODULE_COMM   2

/* Status of one scanned file. */
#define ACCEL_MODULE_OK          0  /* loaded and usable                     */
#define ACCEL_MODULE_UNAVAILABLE 1  /* loaded but requirements unmet         */
#define ACCEL_MODULE_BROKEN      2  /* could not be loaded; see reason       */
#define ACCEL_MODULE_SHADOWED    3  /* same name as an earlier module (dup)  */

typedef struct accel_module {
	int kind;                         /* ACCEL_MODULE_PLUGIN / _COMM; 0 if broken */
	int status;                       /* ACCEL_MODULE_*                           */
	int abi_major;                    /* entry major found (0 if none)            */
	char *path;                       /* absolute path                            */
	char *reason;                     /* why BROKEN/UNAVAILABLE/SHADOWED, or NULL */
	const char *name;                 /* from the descriptor (NULL if broken)     */
	const char *version;
	const accel_plugin_v1 *plugin;    /* kind == PLUGIN                          */
	const accel_comm_v1 *comm;        /* kind == COMM                            */
	void *handle;                     /* dlopen handle                           */
} accel_module;

/* `host` is given to entry functions.  Owned. */
int accel_loader_new(const accel_host_v1 *host, accel_loader **ret_loader, accel_err *err);
accel_loader *accel_loader_free(accel_loader *ld);

/* Append a search directory (in order).  Missing directories are remembered
 * and reported by `accel plugins list`, not errors. */
int accel_loader_add_dir(accel_loader *ld, const char *dir, const char *origin, accel_err *err);
/* Add the standard directories after the config's: ACCEL_PLUGIN_PATH then the
 * install plugindir (ACCEL_PLUGINDIR at build time). */
int accel_loader_add_default_dirs(accel_loader *ld, accel_err *err);
/* Load a single file (used by tests and by scan). Broken files are recorded,
 * not errors: returns ACCEL_OK unless out of memory. */
int accel_loader_load_file(accel_loader *ld, const char *path, accel_err *err);
/* Scan all directories and load every candidate. */
int accel_loader_scan(accel_loader *ld, accel_err *err);

/* Modules in scan order (borrowed). */
uint32_t accel_loader_count(const accel_loader *ld);
const accel_module *accel_loader_get(const accel_loader *ld, uint32_t i);
/* Directories in search order with their origin ("plugin_dirs",
 * "ACCEL_PLUGIN_PATH", "install"); exists=0 if missing. */
uint32_t accel_loader_dir_count(const accel_loader *ld);
const char *accel_loader_dir(const accel_loader *ld, uint32_t i, const char **ret_origin,
                             int *ret_exists);

/* Find a usable module by name and kind.  Errors (recorded in err):
 * ACCEL_ERR_NOT_FOUND "no plugin named X in <dirs>; did you mean Y?",
 * ACCEL_ERR_PLUGIN when the file named X is broken (its reason),
 * ACCEL_ERR_UNSUPPORTED when its requirements are unmet ("fp8 needs CUDA"),
 * ACCEL_ERR_PLUGIN for duplicates (naming both files). */
int accel_loader_find(accel_loader *ld, int kind, const char *name,
                      const accel_module **ret_module, accel_err *err);

/* What this process offers, for requirement checks: ACCEL_REQ_* bits and the
 * best CUDA compute capability (0 if none).  Set by the core before scan. */
void accel_loader_set_available(accel_loader *ld, uint32_t req_bits, int32_t cuda_cc);

#endif
