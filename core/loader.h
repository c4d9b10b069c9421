/* SPDX-License-Identifier: MIT */
/* core/loader.h: finding, loading and checking plugins and comm backends
 * (private to libaccel and the CLI).
 *
 * Search order: config plugin_dirs, then ACCEL_PLUGIN_PATH (':'-separated),
 * then the install plugindir (ACCEL_PLUGINDIR).  Every regular file named
 * *.so in those directories (not recursive, dot files skipped, by name
 * within a directory) is a candidate; the same file reached twice (through
 * two directories or a symlink) is loaded once.
 *
 * Loading a candidate: its ELF header is checked first (so a text file or a
 * truncated copy is reported rather than mapped), then dlopen(RTLD_NOW |
 * RTLD_LOCAL), then the entry symbol of the newest supported major is
 * called (accel_plugin_entry_v1 or accel_comm_entry_v1), then descriptor,
 * vtable and parameter schema are checked.  A file that fails is recorded
 * as BROKEN with a one-line reason that starts with its path, and never
 * crashes the process.  Requirements (ACCEL_REQ_*, min_cuda_cc) are
 * compared with what this process offers: CUDA and the compute capability
 * as accelp_loader_set_available() says, NCCL and MPI when a usable comm
 * backend named "nccl" / "mpi" is loaded (or set_available says so);
 * unmet ones make the module UNAVAILABLE.  Plugins and comm
 * backends have separate name spaces; within one, a second module with a
 * name already taken is SHADOWED.  Like PATH: when it comes from a later
 * directory of the search order, the earlier one is used and a one-line
 * notice (info) names both files, so a file in plugin_dirs overrides an
 * installed one; when both are in one directory, looking the name up is an
 * error naming both files.
 *
 * Handles are never dlclose()d, not even by accelp_loader_free(): a plugin
 * (or a library it pulled in, such as NCCL or the CUDA runtime) may have
 * started threads, registered atexit() handlers or thread-local
 * destructors, and descriptor strings may still be referenced; unmapping
 * the code under them would crash at exit.  Loading the same file again
 * (a second loader) reuses the mapping.  See docs/writing-a-plugin.md.
 *
 * A loader is used from one thread at a time. */
#ifndef ACCEL_CORE_LOADER_H
#define ACCEL_CORE_LOADER_H

#include <stddef.h>
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

/* The smallest struct_size the loader accepts for each ABI v1 struct: it
 * must reach the last member the module's role requires.  Members beyond
 * a module's struct_size read as NULL/0 in the loader's copies (see
 * accel_module.plugin), i.e. "not implemented, the core's default". */
#define ACCEL_ABI_END(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))
#define ACCEL_PLUGIN_V1_HOOK_MIN_SIZE        ACCEL_ABI_END(accel_plugin_v1, fini)
#define ACCEL_PLUGIN_V1_STRATEGY_MIN_SIZE    ACCEL_ABI_END(accel_plugin_v1, step)
#define ACCEL_PLUGIN_V1_REDUCE_HOOK_MIN_SIZE ACCEL_ABI_END(accel_plugin_v1, reduce_bucket)
#define ACCEL_PLUGIN_DESC_V1_MIN_SIZE        ACCEL_ABI_END(accel_plugin_desc_v1, n_params)
#define ACCEL_PARAM_SCHEMA_V1_MIN_SIZE       ACCEL_ABI_END(accel_param_schema_v1, help)
#define ACCEL_COMM_V1_MIN_SIZE               ACCEL_ABI_END(accel_comm_v1, test)
#define ACCEL_COMM_DESC_V1_MIN_SIZE          ACCEL_ABI_END(accel_comm_desc_v1, n_params)

typedef struct accel_module {
	int kind;                         /* ACCEL_MODULE_PLUGIN / _COMM; 0 when the
	                                     file never got as far as an entry     */
	int status;                       /* ACCEL_MODULE_*                           */
	int abi_major;                    /* entry major found (0 if none)            */
	char *path;                       /* absolute path (as found, not resolved)  */
	char *reason;                     /* why BROKEN/UNAVAILABLE/SHADOWED, one line
	                                     starting with "<path>: "; NULL when OK  */
	const char *cause;                /* `reason` without the leading path; NULL
	                                     when OK                                 */
	const char *origin;               /* origin of the directory it came from
	                                     ("plugin_dirs", "ACCEL_PLUGIN_PATH",
	                                     "install", ...) or "file"               */
	const char *shadowed_by;          /* SHADOWED: path of the module of the same
	                                     name that comes first; else NULL         */
	int same_dir;                     /* SHADOWED: 1 when that module is in the
	                                     same directory (looking the name up is
	                                     then an error), 0 when it is earlier in
	                                     the search order (it is used)           */
	/* From the descriptor; name is NULL when the descriptor could not be
	 * read, the other strings are then NULL too.  Strings are borrowed from
	 * the module (which is never unloaded); summary is "" when the plugin
	 * gave none. */
	const char *name;
	const char *version;
	const char *summary;
	uint32_t abi_minor;               /* abi_minor the module was built with     */
	uint32_t role;                    /* plugins: ACCEL_ROLE_*; comm: 0           */
	uint32_t caps;                    /* plugins: ACCEL_CAP_*; comm: 0            */
	uint32_t devices;                 /* comm: bit (1u << ACCEL_DEVICE_*); else 0 */
	uint32_t requires;                /* ACCEL_REQ_*; min_cuda_cc > 0 adds CUDA    */
	int32_t min_cuda_cc;              /* plugins: e.g. 89; 0 when none            */
	uint32_t state_version;           /* plugins: desc.state_version              */
	const char *config_section;       /* NULL when the module has no keys        */
	/* The parameter schema copied into this core's struct layout (entries
	 * are sizeof(accel_param_schema_v1) apart whatever minor the module was
	 * built with; members it did not have are zero).  Owned by the loader;
	 * also what plugin->desc->params / comm->desc->params point to. */
	const accel_param_schema_v1 *params;
	uint32_t n_params;
	/* The module's vtable and descriptor copied into this core's layout
	 * (struct_size = this core's sizeof): every member can be read without
	 * a struct_size check; members the module did not have are NULL/0.
	 * Set only when the checks passed (OK, UNAVAILABLE, SHADOWED).  Owned
	 * by the loader. */
	const accel_plugin_v1 *plugin;    /* kind == PLUGIN                           */
	const accel_comm_v1 *comm;        /* kind == COMM                             */
	void *handle;                     /* dlopen handle (NULL if dlopen failed)    */
} accel_module;

/* `host` (required) is given to entry functions and must outlive the
 * loader.  Owned. */
int accelp_loader_new(const accel_host_v1 *host, accel_loader **ret_loader, accel_err *err);
/* Frees the records; never dlclose()s (see above).  NULL-safe, returns NULL. */
accel_loader *accelp_loader_free(accel_loader *ld);

/* Append a search directory (in order).  `origin` says where it came from
 * (copied).  Missing directories are remembered and reported by `accel
 * plugins list`, not errors. */
int accelp_loader_add_dir(accel_loader *ld, const char *dir, const char *origin, accel_err *err);
/* Add the standard directories after the config's: ACCEL_PLUGIN_PATH then the
 * install plugindir (ACCEL_PLUGINDIR at build time). */
int accelp_loader_add_default_dirs(accel_loader *ld, accel_err *err);
/* Load a single file (used by tests and by scan).  Broken files are
 * recorded, not errors: returns ACCEL_OK unless out of memory.  A file
 * already loaded (same real path) is not loaded twice.  ret_module
 * (optional) receives the file's record. */
int accelp_loader_load_file(accel_loader *ld, const char *path, const accel_module **ret_module,
                            accel_err *err);
/* Scan all directories not scanned yet and load every candidate. */
int accelp_loader_scan(accel_loader *ld, accel_err *err);

/* Modules in load order (borrowed until the loader is freed; the pointers
 * stay valid when more modules are loaded). */
uint32_t accelp_loader_count(const accel_loader *ld);
const accel_module *accelp_loader_get(const accel_loader *ld, uint32_t i);
/* Directories in search order with their origin ("plugin_dirs",
 * "ACCEL_PLUGIN_PATH", "install", or what add_dir was given); exists=0 if
 * missing or not a directory.  NULL past the end. */
uint32_t accelp_loader_dir_count(const accel_loader *ld);
/* What is wrong with `dir` as a plugin directory, for messages: NULL when
 * it is a directory, else "missing", "a file, not a directory", "not a
 * directory" or the reason stat() gave (a static string). */
const char *accelp_loader_dir_problem(const char *dir);
const char *accelp_loader_dir(const accel_loader *ld, uint32_t i, const char **ret_origin,
                              int *ret_exists);

/* Find a usable module by name and kind (0: either kind, plugins first).
 * Scans first if accelp_loader_scan() was not called.  Errors (recorded in
 * err):
 * ACCEL_ERR_NOT_FOUND "no plugin named 'x' in <dir> (<origin>), ...
 *   (available: a, b); did you mean 'y'?",
 * ACCEL_ERR_PLUGIN when the file providing x is broken (its reason),
 * ACCEL_ERR_UNSUPPORTED when its requirements are unmet (its reason),
 * ACCEL_ERR_PLUGIN for two modules of that name in one directory, naming
 *   both files (one in a later directory is shadowed, not an error). */
int accelp_loader_find(accel_loader *ld, int kind, const char *name,
                       const accel_module **ret_module, accel_err *err);

/* What this process offers, for requirement checks: ACCEL_REQ_* bits and the
 * best CUDA compute capability (0 if none).  Until it is called, nothing is
 * offered (ACCEL_REQ_NCCL/MPI are also offered by the loaded nccl/mpi comm
 * backends, see above).  May be called before or after scan: modules
 * already loaded are re-evaluated (OK <-> UNAVAILABLE). */
void accelp_loader_set_available(accel_loader *ld, uint32_t req_bits, int32_t cuda_cc);

/* Hook for the host table's error() when called with h == NULL, i.e. from
 * inside an entry function: the loader keeps the text (the first one, made
 * one line) and reports it with the file's path if the entry returns NULL.
 * Outside an entry call the text is logged as a warning.  Thread-local. */
void accelp_loader_entry_error(const char *msg);

/* Names for messages and listings (static strings). */
const char *accelp_loader_status_name(int status);   /* "ok", "unavailable", ... */
const char *accelp_loader_kind_name(int kind);       /* "plugin", "comm", "?"    */
const char *accelp_loader_role_name(uint32_t role);  /* "strategy", ..., "?"     */
const char *accelp_loader_cfg_type_name(uint32_t type); /* "int", "enum", ...    */
/* Requirements as text ("CUDA (cc >= 8.9), MPI"; "none"), into buf. */
const char *accelp_loader_requires_str(uint32_t requires, int32_t min_cuda_cc, char *buf,
                                       size_t cap);
/* Capability bits as text ("cpu, cuda, shard_optim"; "none"), into buf. */
const char *accelp_loader_caps_str(uint32_t caps, char *buf, size_t cap);

#endif
