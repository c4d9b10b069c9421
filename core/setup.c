/* SPDX-License-Identifier: MIT */
/* core/setup.c: configuration layers, loader, CUDA probe, schemas and
 * selection, done once for a context and for the CLI (setup.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel-build-config.h"
#include "ctx-impl.h"
#include "log.h"
#include "setup.h"

static int load_layers(const accelp_setup_opts *o, accelp_setup *s, accel_err *err)
{
	int r = accelp_config_new(&s->cfg, err);
	if (r)
		return r;
	if (o->config_json) {
		r = accelp_config_load_string(s->cfg, o->config_json, "<config_json>", err);
	} else {
		const char *path = o->config_path;
		const char *from = o->config_path_from ? o->config_path_from : "given";
		if (!path)
			path = accelp_config_find_file(&from);
		if (path) {
			/* find_file's answer lives only until the next call */
			if (!(s->config_file = strdup(path)))
				return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			s->config_from = from;
			accelp_log(ACCEL_LOG_DEBUG, "config file %s from %s", path, from);
			r = accelp_config_load_file(s->cfg, path, err);
		}
	}
	if (!r && !o->skip_env)
		r = accelp_config_load_env(s->cfg, NULL, err);
	for (const char *const *p = o->sets; !r && p && *p; p++)
		r = accelp_config_set(s->cfg, *p, o->sets_origin, err);
	return r;
}

/* The nearest folder above `path` that exists ("" when none does). */
static void existing_parent(const char *path, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", path);
	for (;;) {
		char *slash = strrchr(buf, '/');
		while (slash && slash > buf && slash[1] == '\0') {   /* "a/b/" */
			*slash = '\0';
			slash = strrchr(buf, '/');
		}
		if (!slash) {
			snprintf(buf, cap, "%s", ".");
			return;
		}
		slash[slash == buf ? 1 : 0] = '\0';
		if (!accelp_loader_dir_problem(buf) || slash == buf)
			return;
	}
}

/* What is wrong with plugin_dirs[i] (`dir`, from `src`) into err, or
 * ACCEL_OK when it is a directory. */
static int dir_check(uint32_t i, const char *src, const char *dir, accel_err *err)
{
	if (!*dir)
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "plugin_dirs[%u] (from %s) is an empty string; name a "
		                     "directory (\".\" for the current one)", i, src);
	const char *problem = accelp_loader_dir_problem(dir);
	if (!problem)
		return ACCEL_OK;
	char parent[4096];
	existing_parent(dir, parent, sizeof(parent));
	if (!strcmp(problem, "a file, not a directory")) {
		size_t n = strlen(dir);
		const char *so = n > 3 && !strcmp(dir + n - 3, ".so") ? "a module's path; " : "";
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "plugin_dirs[%u] (from %s) is '%s', which is a file, not a "
		                     "directory: %splugin_dirs lists the folders that hold modules, "
		                     "so name its folder, \"%s\"", i, src, dir, so, parent);
	}
	if (!strcmp(problem, "missing"))
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "plugin_dirs[%u] (from %s) is '%s', which does not exist (the "
		                     "nearest folder above it that does is %s): fix the name, create "
		                     "the folder or remove the entry", i, src, dir, parent);
	return accelp_err_set(err, ACCEL_ERR_CONFIG,
	                     "plugin_dirs[%u] (from %s) is '%s', which cannot be used as a plugin "
	                     "directory: %s", i, src, dir, problem);
}

/* The config's plugin_dirs, all checked before any is added, so a bad
 * entry leaves the loader without them rather than with some.  Every bad
 * entry is said (up to the config's error limit), each with its position,
 * as resolve() says bad keys. */
static int add_config_dirs(accel_config *cfg, accel_loader *ld, accel_err *err)
{
	const char *dir;
	uint32_t n = 0;
	int r;
	while ((r = accelp_config_peek_strlist(cfg, "plugin_dirs", n, &dir)) == ACCEL_OK)
		n++;
	if (r != ACCEL_ERR_NOT_FOUND) {
		const char *src = accelp_config_source(cfg, "plugin_dirs");
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "plugin_dirs%s%s%s must be a list of directory names",
		                     src ? " (" : "", src ? src : "", src ? ")" : "");
	}
	/* A file (the likely slip: a .so's path for its folder) or a folder
	 * that is not there is said here, with the fix, rather than found out
	 * later as a plugin that is "not found". */
	uint32_t bad = 0;
	for (uint32_t i = 0; i < n; i++) {
		char src[1024];
		const char *at = accelp_config_peek_source_at(cfg, "plugin_dirs", i);
		snprintf(src, sizeof(src), "%s", at ? at : "?");
		accelp_config_peek_strlist(cfg, "plugin_dirs", i, &dir);
		accel_err e;
		accelp_err_clear(&e);
		if (!dir_check(i, src, dir, &e))
			continue;
		bad++;
		if (accelp_config_error_add(cfg, e.msg))
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	}
	if (bad)
		return accelp_config_error_report(cfg, err);
	for (uint32_t i = 0; i < n; i++) {
		accelp_config_peek_strlist(cfg, "plugin_dirs", i, &dir);
		if ((r = accelp_loader_add_dir(ld, dir, "plugin_dirs", err)))
			return r;
	}
	return ACCEL_OK;
}

/* The CUDA driver decides what the loader offers plugins; a build without
 * CUDA offers nothing and asks only when told to report. */
static void probe(const accelp_setup_opts *o, accelp_setup *s)
{
	uint32_t avail;
	int32_t cc;
	if (ACCEL_HAVE_CUDA || o->report_cuda) {
		accelp_cuda_probe(&s->cuda);
	} else {
		memset(&s->cuda, 0, sizeof(s->cuda));
		s->cuda.n_gpus = -1;
		snprintf(s->cuda.driver_error, sizeof(s->cuda.driver_error),
		         "not probed: accel was built without CUDA");
	}
	accelp_cuda_offered(&s->cuda, &avail, &cc);
	accelp_loader_set_available(s->loader, avail, cc);
}

static int finish_loader(const accelp_setup_opts *o, accelp_setup *s, accel_err *err)
{
	int r;
	if ((r = accelp_loader_add_default_dirs(s->loader, err)))
		return r;
	probe(o, s);
	return accelp_loader_scan(s->loader, err);
}

/* all_errors: the plugin_dirs problems move out of the config's list
 * (resolve() starts it afresh) into s; 0, or -1 when out of memory. */
static int keep_dir_errors(accelp_setup *s, const accel_err *cerr, accel_err *err)
{
	uint32_t n = accelp_config_error_count(s->cfg);
	for (uint32_t i = 0; i < n || (!n && !i); i++) {
		const char *msg = n ? accelp_config_error_get(s->cfg, i) : cerr->msg;
		if (!(s->dir_errors[s->n_dir_errors] = strdup(msg))) {
			accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			return -1;
		}
		s->n_dir_errors++;
	}
	s->dir_errors_more = accelp_config_error_more(s->cfg);
	return 0;
}

static int open_loader(const accelp_setup_opts *o, accelp_setup *s, int with_config,
                       accel_err *err)
{
	int r = accelp_loader_new(accelp_host_table(), &s->loader, err);
	for (uint32_t i = 0; !r && i < o->n_extra_dirs; i++)
		r = accelp_loader_add_dir(s->loader, o->extra_dirs[i],
		                          o->extra_dirs_origin ? o->extra_dirs_origin : "--plugin-dir",
		                          err);
	if (r)
		return r;
	if (with_config) {
		accel_err cerr;
		accelp_err_clear(&cerr);
		r = add_config_dirs(s->cfg, s->loader,
		                    o->config_optional || o->all_errors ? &cerr : err);
		if (r == ACCEL_ERR_CONFIG && o->all_errors)
			return keep_dir_errors(s, &cerr, err) ? ACCEL_ERR_NOMEM : finish_loader(o, s, err);
		if (r == ACCEL_ERR_NOMEM || (r && !o->config_optional))
			return r == ACCEL_ERR_NOMEM ? accelp_err_set(err, r, "out of memory") : r;
		if (r)
			s->config_err = cerr;
	}
	return finish_loader(o, s, err);
}

/* A selected plugin that cannot be used is the better story than the
 * "unknown key" its section became. */
static void prefer_module_error(accelp_setup *s, accel_err *err)
{
	accel_err e;
	accelp_err_clear(&e);
	if (accelp_setup_modules(s, 0, &e) == ACCEL_OK)
		return;
	accelp_err_clear(err);
	accelp_err_set(err, e.code, "%s", e.msg);
}

int accelp_setup_run(const accelp_setup_opts *o, accelp_setup *s, accel_err *err)
{
	memset(s, 0, sizeof(*s));
	s->cuda.n_gpus = -1;
	if (!o)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_setup_run: opts is NULL");
	accelp_err_clear(&s->config_err);

	s->failed_at = ACCELP_SETUP_CONFIG;
	accel_err cerr;
	accelp_err_clear(&cerr);
	int r = load_layers(o, s, o->config_optional ? &cerr : err);
	if (r == ACCEL_ERR_NOMEM && o->config_optional)
		return accelp_err_set(err, r, "%s", cerr.msg);
	if (r && !o->config_optional)
		return r;
	if (r)
		s->config_err = cerr;

	s->failed_at = ACCELP_SETUP_LOADER;
	if ((r = open_loader(o, s, !s->config_err.code, err)))
		return r;
	if (!o->resolve || s->config_err.code) {
		s->failed_at = ACCELP_SETUP_OK;
		return ACCEL_OK;
	}

	s->failed_at = ACCELP_SETUP_SELECT;
	if ((r = accelp_select_from_config(s->cfg, &s->sel, err)) ||
	    (r = accelp_select_register_schemas(s->cfg, s->loader, &s->sel, err)))
		return r;
	s->failed_at = ACCELP_SETUP_RESOLVE;
	if ((r = accelp_config_resolve(s->cfg, err))) {
		if (o->module_errors_first)
			prefer_module_error(s, err);
		return err->code ? err->code : r;
	}
	s->failed_at = ACCELP_SETUP_OK;
	return ACCEL_OK;
}

int accelp_setup_modules(accelp_setup *s, int allow_unmet, accel_err *err)
{
	if (!s || !s->loader || !s->sel.n)
		return accelp_err_set(err, ACCEL_ERR_STATE,
		                     "accelp_setup_modules: no selection (run with resolve first)");
	return accelp_select_modules(&s->sel, s->loader, allow_unmet, s->mods, err);
}

void accelp_setup_fini(accelp_setup *s)
{
	if (!s)
		return;
	s->loader = accelp_loader_free(s->loader);
	s->cfg = accelp_config_free(s->cfg);
	free(s->config_file);
	s->config_file = NULL;
	for (uint32_t i = 0; i < s->n_dir_errors; i++)
		free(s->dir_errors[i]);
	s->n_dir_errors = s->dir_errors_more = 0;
}
