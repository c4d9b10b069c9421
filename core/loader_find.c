/* SPDX-License-Identifier: MIT */
/* core/loader_find.c: looking a module up by name, and the message when
 * it is not there: the directories searched, what is available, and the
 * closest name. */
#include <stdio.h>
#include <string.h>

#include "loader-impl.h"

/* ---- lookup ----------------------------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 64 || lb > 64)
		return (size_t)-1;
	size_t row[65];
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* "libaccel-zero.so" -> "zero": how a file might be named for its module. */
static int stem_matches(const char *path, const char *name)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	static const char *const prefixes[] = {"libaccel-plugin-", "libaccel-comm-", "libaccel-",
	                                       "libaccel_", "accel-plugin-", "accel-comm-",
	                                       "accel-", "accel_", "comm-", "plugin-",
	                                       "lib", ""};
	size_t bl = strlen(base);
	if (bl < 3)
		return 0;
	bl -= 3; /* ".so" */
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t pl = strlen(prefixes[i]);
		if (bl > pl && !strncmp(base, prefixes[i], pl) && bl - pl == strlen(name) &&
		    !strncmp(base + pl, name, bl - pl))
			return 1;
	}
	return 0;
}

static int kind_matches(int want, int kind)
{
	return want == 0 ? (kind == ACCEL_MODULE_PLUGIN || kind == ACCEL_MODULE_COMM)
	                 : kind == want;
}

static int find_kind(accel_loader *ld, int kind, const char *name,
                     const accel_module **ret_module, accel_err *err)
{
	module_rec *first = accelp_loader_claimant(ld, kind, name, NULL);
	if (!first)
		return ACCEL_ERR_NOT_FOUND;
	if (first->pub.status == ACCEL_MODULE_BROKEN) {
		const char *later = NULL;
		for (uint32_t i = 0; i < ld->n_mods && !later; i++) {
			module_rec *o = ld->mods[i];
			if (o != first && o->pub.kind == kind && o->pub.name && !strcmp(o->pub.name, name))
				later = o->pub.path;
		}
		if (later)
			return accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s '%s' cannot be used: %s "
			                     "(it comes first in the search order, so %s, a later "
			                     "file of that name, is not used in its place)",
			                     accelp_loader_kind_word(kind), name, first->pub.reason,
			                     later);
		return accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s '%s' cannot be used: %s",
		                     accelp_loader_kind_word(kind), name, first->pub.reason);
	}
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (o != first && o->pub.status == ACCEL_MODULE_SHADOWED && o->pub.same_dir &&
		    o->pub.kind == kind && !strcmp(o->pub.name, name))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN, "two %ss are named '%s': %s "
			                     "and %s, in one directory; remove or rename one",
			                     accelp_loader_kind_word(kind), name, first->pub.path,
			                     o->pub.path);
	}
	if (first->pub.status == ACCEL_MODULE_UNAVAILABLE)
		return accelp_err_set(err, ACCEL_ERR_UNSUPPORTED, "%s", first->pub.reason);
	*ret_module = &first->pub;
	return ACCEL_OK;
}

int accelp_loader_find(accel_loader *ld, int kind, const char *name,
                       const accel_module **ret_module, accel_err *err)
{
	if (!ld || !name || !ret_module)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_loader_find: %s is NULL",
		                     !ld ? "loader" : !name ? "name" : "ret_module");
	if (kind != 0 && kind != ACCEL_MODULE_PLUGIN && kind != ACCEL_MODULE_COMM)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_loader_find: kind %d",
		                     kind);
	if (!ld->scanned) {
		int r = accelp_loader_scan(ld, err);
		if (r)
			return r;
	}
	const char *word = kind == ACCEL_MODULE_COMM ? "comm backend"
	                   : kind == ACCEL_MODULE_PLUGIN ? "plugin" : "plugin or comm backend";
	int r = ACCEL_ERR_NOT_FOUND;
	if (kind != ACCEL_MODULE_COMM) {
		/* either kind: a plugin that cannot be used does not hide a usable
		 * comm backend of the same name (its error is kept otherwise) */
		accel_err pe;
		accelp_err_clear(&pe);
		r = find_kind(ld, ACCEL_MODULE_PLUGIN, name, ret_module, kind ? err : &pe);
		if (!kind && r != ACCEL_OK && r != ACCEL_ERR_NOT_FOUND) {
			accel_err ce;
			accelp_err_clear(&ce);
			if (find_kind(ld, ACCEL_MODULE_COMM, name, ret_module, &ce) == ACCEL_OK)
				return ACCEL_OK;
			return accelp_err_set(err, r, "%s", pe.msg);
		}
	}
	if (r == ACCEL_ERR_NOT_FOUND && kind != ACCEL_MODULE_PLUGIN)
		r = find_kind(ld, ACCEL_MODULE_COMM, name, ret_module, err);
	if (r != ACCEL_ERR_NOT_FOUND)
		return r;

	/* A broken file that is, or looks like, the one asked for says why. */
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (o->pub.status != ACCEL_MODULE_BROKEN)
			continue;
		if ((o->pub.name && !strcmp(o->pub.name, name) &&
		     (!o->pub.kind || kind_matches(kind, o->pub.kind))) ||
		    (!o->pub.name && stem_matches(o->pub.path, name)))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s '%s' cannot be used: %s",
			                     word, name, o->pub.reason);
	}
	/* A file of that name that the scan could not open. */
	for (uint32_t i = 0; i < ld->n_skips; i++)
		if (stem_matches(ld->skips[i].path, name))
			return accelp_err_set(err, ACCEL_ERR_PLUGIN, "%s '%s' cannot be used: %s exists "
			                     "but is not a module that can be loaded: %s", word, name,
			                     ld->skips[i].path, ld->skips[i].why);
	/* A file of that name that holds a module of another name: modules
	 * are found by the name they declare, not by their file's. */
	char other[512] = "";
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (o->pub.name && strcmp(o->pub.name, name) && stem_matches(o->pub.path, name))
			accelp_loader_appendf(other, sizeof(other), "; %s exists but declares the %s "
			                      "name '%s' (a module is selected by the name it declares)",
			                      o->pub.path, accelp_loader_kind_word(o->pub.kind),
			                      o->pub.name);
	}

	char dirs[1024] = "", avail[512] = "";
	for (uint32_t i = 0; i < ld->n_dirs; i++) {
		/* a file given for a folder is not "missing" */
		const char *problem = ld->dirs[i].exists ? NULL
		                                         : accelp_loader_dir_problem(ld->dirs[i].dir);
		accelp_loader_appendf(dirs, sizeof(dirs), "%s%s (%s%s%s)", i ? ", " : "",
		                      ld->dirs[i].dir, ld->dirs[i].origin, problem ? ", " : "",
		                      problem ? problem : "");
	}
	const char *best = NULL;
	size_t best_d = (size_t)-1;
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (!o->pub.name || o->pub.status == ACCEL_MODULE_BROKEN ||
		    o->pub.status == ACCEL_MODULE_SHADOWED || !kind_matches(kind, o->pub.kind))
			continue;
		accelp_loader_appendf(avail, sizeof(avail), "%s%s", avail[0] ? ", " : "",
		                      o->pub.name);
		size_t dist = edit_distance(name, o->pub.name);
		if (dist < best_d) {
			best_d = dist;
			best = o->pub.name;
		}
	}
	size_t nl = strlen(name);
	size_t limit = nl <= 3 ? 1 : nl <= 8 ? 2 : 3;
	int suggest = best && nl && (best_d <= limit || !strncmp(best, name, nl) ||
	                       (strlen(best) >= 3 && strstr(name, best)));
	if (!ld->n_dirs)
		return accelp_err_set(err, ACCEL_ERR_NOT_FOUND,
		                     "no %s named '%s': no plugin directories are configured (set "
		                     "ACCEL_PLUGIN_PATH or plugin_dirs)", word, name);
	return accelp_err_set(err, ACCEL_ERR_NOT_FOUND,
	                     "no %s named '%s' in %s (available: %s)%s%s%s%s", word, name, dirs,
	                     avail[0] ? avail : "none", suggest ? "; did you mean '" : "",
	                     suggest ? best : "", suggest ? "'?" : "", other);
}

