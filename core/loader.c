/* SPDX-License-Identifier: MIT */
/* core/loader.c: finding and loading plugins and comm backends: the loader
 * object, its directories, scanning, loading one file, requirements and
 * shadowing, and the names used in messages.  Checks of what a file holds
 * live beside it (loader-impl.h lists the files).
 *
 * Everything a third-party file can get wrong must end up as a one-line
 * reason on its record, never as a crash or an abort. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "accel-build-config.h"
#include "loader-impl.h"
#include "comm.h"
#include "log.h"

/* Majors above ours that we recognise only to say "built for v9". */
#define ENTRY_MAJOR_SCAN_MAX 16

/* ---- names ------------------------------------------------------------------ */

const char *accelp_loader_status_name(int status)
{
	switch (status) {
	case ACCEL_MODULE_OK: return "ok";
	case ACCEL_MODULE_UNAVAILABLE: return "unavailable";
	case ACCEL_MODULE_BROKEN: return "broken";
	case ACCEL_MODULE_SHADOWED: return "shadowed";
	default: return "?";
	}
}

const char *accelp_loader_kind_name(int kind)
{
	switch (kind) {
	case ACCEL_MODULE_PLUGIN: return "plugin";
	case ACCEL_MODULE_COMM: return "comm";
	default: return "?";
	}
}

const char *accelp_loader_role_name(uint32_t role)
{
	switch (role) {
	case ACCEL_ROLE_STRATEGY: return "strategy";
	case ACCEL_ROLE_LOSS_SCALER: return "loss_scaler";
	case ACCEL_ROLE_REDUCE_HOOK: return "reduce_hook";
	case ACCEL_ROLE_OTHER: return "other";
	case ACCEL_ROLE_FP8_RECIPE: return "fp8_recipe";
	default: return "?";
	}
}

const char *accelp_loader_cfg_type_name(uint32_t type)
{
	switch (type) {
	case ACCEL_CFG_BOOL: return "bool";
	case ACCEL_CFG_INT: return "int";
	case ACCEL_CFG_DOUBLE: return "double";
	case ACCEL_CFG_STRING: return "string";
	case ACCEL_CFG_ENUM: return "enum";
	case ACCEL_CFG_STRLIST: return "strlist";
	default: return "?";
	}
}

void accelp_loader_appendf(char *buf, size_t cap, const char *fmt, ...)
{
	size_t n = strlen(buf);
	if (n + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + n, cap - n, fmt, ap);
	va_end(ap);
}

const char *accelp_loader_requires_str(uint32_t requires, int32_t min_cuda_cc, char *buf,
                                       size_t cap)
{
	if (!buf || cap == 0)
		return "";
	buf[0] = '\0';
	if (min_cuda_cc > 0)
		requires |= ACCEL_REQ_CUDA;
	if (requires & ACCEL_REQ_CUDA) {
		accelp_loader_appendf(buf, cap, "CUDA");
		if (min_cuda_cc > 0)
			accelp_loader_appendf(buf, cap, " (cc >= %d.%d)", min_cuda_cc / 10,
			                      min_cuda_cc % 10);
	}
	if (requires & ACCEL_REQ_NCCL)
		accelp_loader_appendf(buf, cap, "%sNCCL", buf[0] ? ", " : "");
	if (requires & ACCEL_REQ_MPI)
		accelp_loader_appendf(buf, cap, "%sMPI", buf[0] ? ", " : "");
	uint32_t unknown = requires & ~(ACCEL_REQ_CUDA | ACCEL_REQ_NCCL | ACCEL_REQ_MPI);
	if (unknown)
		accelp_loader_appendf(buf, cap, "%sunknown 0x%x", buf[0] ? ", " : "", unknown);
	if (!buf[0])
		snprintf(buf, cap, "none");
	return buf;
}

const char *accelp_loader_caps_str(uint32_t caps, char *buf, size_t cap)
{
	static const char *const names[] = {"cpu", "cuda", "shard_optim", "shard_grads",
	                                    "shard_params", "offload", "checkpoint",
	                                    "reduce_scatter", "micro_reduce", "shared_params"};
	if (!buf || cap == 0)
		return "";
	buf[0] = '\0';
	for (unsigned i = 0; i < 32; i++) {
		if (!(caps & (1u << i)))
			continue;
		if (i < sizeof(names) / sizeof(names[0]))
			accelp_loader_appendf(buf, cap, "%s%s", buf[0] ? ", " : "", names[i]);
		else
			accelp_loader_appendf(buf, cap, "%sbit%u", buf[0] ? ", " : "", i);
	}
	if (!buf[0])
		snprintf(buf, cap, "none");
	return buf;
}

/* ---- entry error capture -------------------------------------------------- */

typedef struct entry_capture {
	char msg[512];
} entry_capture;

static _Thread_local entry_capture *entry_cap;

void accelp_loader_one_line(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r' || *s == '\t')
			*s = ' ';
}

void accelp_loader_entry_error(const char *msg)
{
	if (!msg)
		msg = "";
	if (entry_cap) {
		if (!entry_cap->msg[0]) {
			snprintf(entry_cap->msg, sizeof(entry_cap->msg), "%s", msg);
			accelp_loader_one_line(entry_cap->msg);
		}
		return;
	}
	accelp_log(ACCEL_LOG_WARN, "a plugin reported an error outside any context: %s", msg);
}

/* ---- loader object ------------------------------------------------------------ */

int accelp_loader_new(const accel_host_v1 *host, accel_loader **ret_loader, accel_err *err)
{
	if (!host || !ret_loader)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_loader_new: %s is NULL",
		                     host ? "ret_loader" : "host");
	accel_loader *ld = calloc(1, sizeof(*ld));
	if (!ld)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory creating the plugin "
		                     "loader");
	ld->host = host;
	*ret_loader = ld;
	return ACCEL_OK;
}

static module_rec *rec_free(module_rec *m)
{
	if (!m)
		return NULL;
	free(m->pub.path);
	free(m->pub.reason);
	free(m->real);
	free(m->params);
	free(m);
	return NULL;
}

accel_loader *accelp_loader_free(accel_loader *ld)
{
	if (!ld)
		return NULL;
	/* No dlclose(): see loader.h. */
	for (uint32_t i = 0; i < ld->n_mods; i++)
		rec_free(ld->mods[i]);
	free(ld->mods);
	for (uint32_t i = 0; i < ld->n_dirs; i++) {
		free(ld->dirs[i].dir);
		free(ld->dirs[i].origin);
	}
	free(ld->dirs);
	for (uint32_t i = 0; i < ld->n_skips; i++) {
		free(ld->skips[i].path);
		free(ld->skips[i].why);
	}
	free(ld->skips);
	free(ld->probe_host);
	free(ld);
	return NULL;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int accelp_loader_add_dir(accel_loader *ld, const char *dir, const char *origin, accel_err *err)
{
	if (!ld || !dir || !*dir)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "accelp_loader_add_dir: empty directory name%s%s",
		                     origin ? " from " : "", origin ? origin : "");
	if (ld->n_dirs == ld->cap_dirs) {
		uint32_t cap = ld->cap_dirs ? 2 * ld->cap_dirs : 8;
		dir_rec *d = realloc(ld->dirs, cap * sizeof(*d));
		if (!d)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		ld->dirs = d;
		ld->cap_dirs = cap;
	}
	dir_rec *d = &ld->dirs[ld->n_dirs];
	memset(d, 0, sizeof(*d));
	d->dir = strdup(dir);
	d->origin = strdup(origin ? origin : "?");
	if (!d->dir || !d->origin) {
		free(d->dir);
		free(d->origin);
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	}
	/* Keep "/a/b/" and "/a/b" alike in listings. */
	size_t n = strlen(d->dir);
	while (n > 1 && d->dir[n - 1] == '/')
		d->dir[--n] = '\0';
	d->exists = is_dir(d->dir);
	ld->n_dirs++;
	return ACCEL_OK;
}

int accelp_loader_add_default_dirs(accel_loader *ld, accel_err *err)
{
	if (!ld)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_loader_add_default_dirs: "
		                     "NULL");
	const char *env = getenv(ACCEL_ENV_PLUGIN_PATH);
	if (env && *env) {
		char *copy = strdup(env);
		if (!copy)
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		char *save = NULL;
		for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
			int r = accelp_loader_add_dir(ld, tok, ACCEL_ENV_PLUGIN_PATH, err);
			if (r) {
				free(copy);
				return r;
			}
		}
		free(copy);
	}
	return accelp_loader_add_dir(ld, ACCEL_PLUGINDIR, "install", err);
}

uint32_t accelp_loader_count(const accel_loader *ld)
{
	return ld ? ld->n_mods : 0;
}

const accel_module *accelp_loader_get(const accel_loader *ld, uint32_t i)
{
	return ld && i < ld->n_mods ? &ld->mods[i]->pub : NULL;
}

const char *accelp_loader_dir_problem(const char *dir)
{
	struct stat st;
	if (!dir || stat(dir, &st) != 0)
		return !dir || errno == ENOENT || errno == ENOTDIR ? "missing" : strerror(errno);
	if (S_ISDIR(st.st_mode))
		return NULL;
	return S_ISREG(st.st_mode) ? "a file, not a directory" : "not a directory";
}

uint32_t accelp_loader_dir_count(const accel_loader *ld)
{
	return ld ? ld->n_dirs : 0;
}

const char *accelp_loader_dir(const accel_loader *ld, uint32_t i, const char **ret_origin,
                              int *ret_exists)
{
	if (!ld || i >= ld->n_dirs)
		return NULL;
	if (ret_origin)
		*ret_origin = ld->dirs[i].origin;
	if (ret_exists)
		*ret_exists = ld->dirs[i].exists;
	return ld->dirs[i].dir;
}

/* ---- record helpers --------------------------------------------------------------- */

int accelp_loader_rec_set(module_rec *m, int status, const char *fmt, ...)
{
	char cause[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	accelp_loader_one_line(cause);
	size_t plen = strlen(m->pub.path);
	size_t len = plen + 2 + strlen(cause) + 1;
	char *reason = malloc(len);
	if (!reason)
		return ACCEL_ERR_NOMEM;
	snprintf(reason, len, "%s: %s", m->pub.path, cause);
	free(m->pub.reason);
	m->pub.reason = reason;
	m->pub.cause = reason + plen + 2;
	m->pub.status = status;
	return ACCEL_OK;
}

int accelp_loader_broken(module_rec *m, const char *fmt, ...)
{
	char cause[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	accelp_loader_rec_set(m, ACCEL_MODULE_BROKEN, "%s", cause);
	m->pub.status = ACCEL_MODULE_BROKEN;
	return -1;
}

static void rec_clear(module_rec *m)
{
	free(m->pub.reason);
	m->pub.reason = NULL;
	m->pub.cause = NULL;
	m->pub.status = ACCEL_MODULE_OK;
}

const char *accelp_loader_kind_word(int kind)
{
	return kind == ACCEL_MODULE_COMM ? "comm backend" : "plugin";
}

/* Quote a string a plugin gave us for a message, bounded and one line. */
const char *accelp_loader_shown(const char *s, char *buf, size_t cap)
{
	if (!s)
		return "(null)";
	snprintf(buf, cap, "%s", s);
	if (strlen(s) >= cap && cap > 4)
		memcpy(buf + cap - 4, "...", 4);
	accelp_loader_one_line(buf);
	return buf;
}

/* dlerror() text starts with the path again; keep the rest, one line. */
static void trim_dlerror(const char *path, const char *e, char *out, size_t cap)
{
	if (!e)
		e = "unknown dlopen error";
	size_t plen = strlen(path);
	if (!strncmp(e, path, plen) && e[plen] == ':') {
		e += plen + 1;
		while (*e == ' ')
			e++;
	}
	snprintf(out, cap, "%s", e);
	accelp_loader_one_line(out);
}

/* ---- requirements and duplicates ---------------------------------------------------- */

/* ACCEL_REQ_NCCL / _MPI mean "accel's nccl / mpi comm backend" (plugin.h):
 * the loader itself knows whether another loaded module provides them. */
static uint32_t backends_offered(const accel_loader *ld, const module_rec *not_this)
{
	uint32_t bits = 0;
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		const module_rec *o = ld->mods[i];
		if (o == not_this || o->pub.kind != ACCEL_MODULE_COMM ||
		    o->pub.status != ACCEL_MODULE_OK)
			continue;
		if (!strcmp(o->pub.name, "nccl"))
			bits |= ACCEL_REQ_NCCL;
		if (!strcmp(o->pub.name, "mpi"))
			bits |= ACCEL_REQ_MPI;
	}
	return bits;
}

/* UNAVAILABLE or OK for a module that loaded and is not shadowed. */
static int eval_requirements(const accel_loader *ld, module_rec *m)
{
	if (m->pub.status == ACCEL_MODULE_BROKEN || m->pub.status == ACCEL_MODULE_SHADOWED)
		return ACCEL_OK;
	uint32_t req = m->pub.requires;
	if (m->pub.min_cuda_cc > 0)
		req |= ACCEL_REQ_CUDA;
	uint32_t avail = ld->avail | backends_offered(ld, m);
	char why[512] = "";
	if ((req & ACCEL_REQ_CUDA) && !(avail & ACCEL_REQ_CUDA))
		accelp_loader_appendf(why, sizeof(why),
		                      "needs CUDA (no CUDA device module or no GPU)");
	else if ((req & ACCEL_REQ_CUDA) && m->pub.min_cuda_cc > ld->avail_cc)
		accelp_loader_appendf(why, sizeof(why), "needs a GPU of compute capability >= "
		                      "%d.%d (best here: %d.%d)", m->pub.min_cuda_cc / 10,
		                      m->pub.min_cuda_cc % 10, ld->avail_cc / 10,
		                      ld->avail_cc % 10);
	if ((req & ACCEL_REQ_NCCL) && !(avail & ACCEL_REQ_NCCL))
		accelp_loader_appendf(why, sizeof(why), "%sneeds NCCL (no usable nccl comm backend)",
		                      why[0] ? "; " : "");
	if ((req & ACCEL_REQ_MPI) && !(avail & ACCEL_REQ_MPI))
		accelp_loader_appendf(why, sizeof(why), "%sneeds MPI (no usable mpi comm backend)",
		                      why[0] ? "; " : "");
	uint32_t unknown = req & ~(ACCEL_REQ_CUDA | ACCEL_REQ_NCCL | ACCEL_REQ_MPI);
	if (unknown)
		accelp_loader_appendf(why, sizeof(why), "%sneeds requirement bits 0x%x this accel "
		                      "does not know (built for a newer accel?)",
		                      why[0] ? "; " : "", unknown);
	if (!why[0]) {
		rec_clear(m);
		return ACCEL_OK;
	}
	return accelp_loader_rec_set(m, ACCEL_MODULE_UNAVAILABLE, "%s '%s' %s",
	                             accelp_loader_kind_word(m->pub.kind), m->pub.name, why);
}

/* Requirements of every module again: comm backends first (they decide
 * NCCL/MPI for the plugins), twice so that one backend needing another
 * settles. */
static void reevaluate(accel_loader *ld)
{
	for (int pass = 0; pass < 3; pass++)
		for (uint32_t i = 0; i < ld->n_mods; i++)
			if ((pass < 2) == (ld->mods[i]->pub.kind == ACCEL_MODULE_COMM))
				eval_requirements(ld, ld->mods[i]);
}

/* A broken module counts once it got far enough to say its name: it is
 * the one the user put first (an override), so a later module of the same
 * name must not silently stand in for it. */
module_rec *accelp_loader_claimant(const accel_loader *ld, int kind, const char *name,
                                          const module_rec *not_this)
{
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (o == not_this || o->pub.kind != kind || !o->pub.name ||
		    o->pub.status == ACCEL_MODULE_SHADOWED || strcmp(o->pub.name, name))
			continue;
		return o;
	}
	return NULL;
}

/* ---- loading ------------------------------------------------------------------------- */

static char *absolute_path(const char *path)
{
	if (path[0] == '/')
		return strdup(path);
	while (path[0] == '.' && path[1] == '/')   /* "./x.so" from --plugin-dir . */
		path += 2;
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return strdup(path);
	size_t n = strlen(cwd) + 1 + strlen(path) + 1;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", cwd, path);
	return p;
}

static int push_rec(accel_loader *ld, module_rec *m)
{
	if (ld->n_mods == ld->cap_mods) {
		uint32_t cap = ld->cap_mods ? 2 * ld->cap_mods : 16;
		module_rec **v = realloc(ld->mods, cap * sizeof(*v));
		if (!v)
			return ACCEL_ERR_NOMEM;
		ld->mods = v;
		ld->cap_mods = cap;
	}
	ld->mods[ld->n_mods++] = m;
	return ACCEL_OK;
}

typedef const void *(*entry_fn)(const accel_host_v1 *host);

static entry_fn find_entry(void *handle, const char *prefix, int major)
{
	char sym[64];
	snprintf(sym, sizeof(sym), "%s%d", prefix, major);
	dlerror();
	void *p = dlsym(handle, sym);
	entry_fn f;
	/* POSIX guarantees this conversion for dlsym results. */
	memcpy(&f, &p, sizeof(f));
	return p ? f : NULL;
}

/* Whether two paths name files in one directory (as found, not resolved:
 * two directories of the search path that are links to one place hold
 * the same files, which load once). */
static int same_dir(const char *a, const char *b)
{
	const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
	size_t la = sa ? (size_t)(sa - a) : 0, lb = sb ? (size_t)(sb - b) : 0;
	return la == lb && !strncmp(a, b, la);
}

/* m has the name of `first`, which came before it.  Like PATH: from a
 * later directory it is shadowed, with a one-line notice, so a file in
 * plugin_dirs overrides an installed one; in the same directory neither
 * can be said to come first, and looking the name up is an error. */
static int shadow(module_rec *m, const module_rec *first)
{
	const char *kind = accelp_loader_kind_word(m->pub.kind);
	m->pub.shadowed_by = first->pub.path;
	m->pub.same_dir = same_dir(m->pub.path, first->pub.path);
	if (m->pub.same_dir)
		return accelp_loader_rec_set(m, ACCEL_MODULE_SHADOWED, "%s '%s' is also provided by "
		                             "%s in the same directory; remove or rename one", kind,
		                             m->pub.name, first->pub.path);
	int r = accelp_loader_rec_set(m, ACCEL_MODULE_SHADOWED, "%s '%s' is shadowed by %s, "
	                              "which comes earlier in the search order", kind,
	                              m->pub.name, first->pub.path);
	if (r == ACCEL_OK)
		accelp_log(ACCEL_LOG_INFO, "%s", m->pub.reason);
	return r;
}

/* An entry that returned NULL without a word: most often a module built
 * against headers edited to another major, whose ACCEL_HOST_REQUIRE
 * refuses a host of ours without calling error() (it cannot know our
 * layout).  Ask it again with only the major changed: the one it accepts
 * is the one it was built for.  Only the entry runs (it must be free of
 * side effects, plugin.h); the module stays broken and is never called
 * again.  0 when no major is accepted, -1 when out of memory. */
static int probe_major(accel_loader *ld, entry_fn fn, const accel_host_v1 *host)
{
	if (!ld->probe_host && !(ld->probe_host = malloc(sizeof(*ld->probe_host))))
		return -1;
	entry_capture quiet;
	entry_capture *saved = entry_cap;
	int found = 0;
	for (int major = 0; major <= ENTRY_MAJOR_SCAN_MAX && !found; major++) {
		if (major == ACCEL_ABI_MAJOR)
			continue;
		/* a host table may be shorter than ours (an older one in tests) */
		size_t n = host->struct_size < sizeof(*ld->probe_host) ? host->struct_size
		                                                       : sizeof(*ld->probe_host);
		memset(ld->probe_host, 0, sizeof(*ld->probe_host));
		memcpy(ld->probe_host, host, n);
		ld->probe_host->abi_major = (uint32_t)major;
		quiet.msg[0] = '\0';
		entry_cap = &quiet;
		if (fn(ld->probe_host))
			found = major;
		entry_cap = saved;
	}
	return found;
}

/* Fills m from the file; failures go to m's status and reason.  Returns an
 * error status only for out-of-memory. */
static int load_into(accel_loader *ld, module_rec *m)
{
	const char *path = m->pub.path;
	char why[1024];
	if (accelp_loader_elf_check(path, why, sizeof(why)))
		return accelp_loader_broken(m, "%s", why);
	dlerror();
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		trim_dlerror(path, dlerror(), why, sizeof(why));
		return accelp_loader_broken(m, "cannot load: %s", why);
	}
	m->pub.handle = h;

	/* Newest supported major first; this core has only v1. */
	entry_fn pe = find_entry(h, "accel_plugin_entry_v", ACCEL_ABI_MAJOR);
	entry_fn ce = find_entry(h, "accel_comm_entry_v", ACCEL_ABI_MAJOR);
	if (pe && ce)
		return accelp_loader_broken(m, "exports both %s and %s; a file is either a plugin "
		                            "or a comm backend", ACCEL_PLUGIN_ENTRY_V1,
		                            ACCEL_COMM_ENTRY_V1);
	if (!pe && !ce) {
		for (int major = ENTRY_MAJOR_SCAN_MAX; major > ACCEL_ABI_MAJOR; major--) {
			const char *which = find_entry(h, "accel_plugin_entry_v", major) ? "plugin"
			                    : find_entry(h, "accel_comm_entry_v", major) ? "comm"
			                                                                 : NULL;
			if (which) {
				m->pub.abi_major = major;
				return accelp_loader_broken(m, "built for %s ABI v%d; this accel "
				                            "supports v%d", which, major,
				                            ACCEL_ABI_MAJOR);
			}
		}
		return accelp_loader_broken(m, "missing entry symbol: exports neither %s nor %s "
		                            "(not an accel plugin, or built without ACCEL_EXPORT "
		                            "on its entry)", ACCEL_PLUGIN_ENTRY_V1,
		                            ACCEL_COMM_ENTRY_V1);
	}
	m->pub.kind = pe ? ACCEL_MODULE_PLUGIN : ACCEL_MODULE_COMM;
	m->pub.abi_major = ACCEL_ABI_MAJOR;
	const char *sym = pe ? ACCEL_PLUGIN_ENTRY_V1 : ACCEL_COMM_ENTRY_V1;

	entry_capture cap;
	cap.msg[0] = '\0';
	entry_capture *saved = entry_cap;
	entry_cap = &cap;
	/* comm backends see the narrower table (comm.h) of the core's host */
	const void *vt = pe ? pe(ld->host)
	                    : ce(ld->host == accelp_host_table() ? accelp_comm_host_table() : ld->host);
	entry_cap = saved;
	if (!vt) {
		if (cap.msg[0])
			return accelp_loader_broken(m, "%s returned NULL: %s", sym, cap.msg);
		int built = probe_major(ld, pe ? pe : ce, pe ? ld->host
		                        : ld->host == accelp_host_table() ? accelp_comm_host_table()
		                                                          : ld->host);
		if (built < 0)
			return ACCEL_ERR_NOMEM;
		if (built > 0) {
			m->pub.abi_major = (uint32_t)built;
			return accelp_loader_broken(m, "%s returned NULL: the %s was built against accel "
			                            "headers of ABI major %d (its entry accepts only a "
			                            "host of major %d); this accel is ABI %d.%d: rebuild "
			                            "it against this accel's headers (pkg-config --cflags "
			                            "accel)", sym, accelp_loader_kind_word(m->pub.kind),
			                            built, built, ACCEL_ABI_MAJOR, ACCEL_ABI_MINOR);
		}
		return accelp_loader_broken(m, "%s returned NULL (the %s gave no reason)",
		                            sym, accelp_loader_kind_word(m->pub.kind));
	}
	if (cap.msg[0])
		accelp_log(ACCEL_LOG_DEBUG, "%s: %s reported '%s' but returned a table", path, sym,
		          cap.msg);
	int r = pe ? accelp_loader_desc_check_plugin(m, (const accel_plugin_v1 *)vt)
	           : accelp_loader_desc_check_comm(m, (const accel_comm_v1 *)vt);
	if (r == ACCEL_ERR_NOMEM)
		return r;
	if (r)
		return ACCEL_OK;   /* broken, reason recorded */

	module_rec *first = accelp_loader_claimant(ld, m->pub.kind, m->pub.name, m);
	if (first)
		return shadow(m, first);
	return eval_requirements(ld, m);
}

static int load_path(accel_loader *ld, const char *path, const char *origin,
                     const accel_module **ret_module, accel_err *err)
{
	char *real = realpath(path, NULL);
	if (real) {
		for (uint32_t i = 0; i < ld->n_mods; i++)
			if (ld->mods[i]->real && !strcmp(ld->mods[i]->real, real)) {
				free(real);
				if (ret_module)
					*ret_module = &ld->mods[i]->pub;
				return ACCEL_OK;
			}
	}
	module_rec *m = calloc(1, sizeof(*m));
	if (!m) {
		free(real);
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory loading %s", path);
	}
	m->real = real;
	m->pub.origin = origin;
	m->pub.path = absolute_path(path);
	if (!m->pub.path || push_rec(ld, m)) {
		rec_free(m);
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory loading %s", path);
	}
	/* Broken files are records, not errors; only running out of memory is. */
	int r = load_into(ld, m);
	if (r == ACCEL_ERR_NOMEM)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory loading %s", path);
	/* A new comm backend can satisfy (or a shadowing one no longer
	 * satisfy) what earlier modules require. */
	if (m->pub.kind == ACCEL_MODULE_COMM)
		reevaluate(ld);
	if (m->pub.status == ACCEL_MODULE_OK)
		accelp_log(ACCEL_LOG_DEBUG, "loaded %s '%s' %s from %s",
		          accelp_loader_kind_word(m->pub.kind), m->pub.name, m->pub.version,
		          m->pub.path);
	else
		accelp_log(ACCEL_LOG_DEBUG, "%s: %s", accelp_loader_status_name(m->pub.status),
		          m->pub.reason);
	if (ret_module)
		*ret_module = &m->pub;
	return ACCEL_OK;
}

int accelp_loader_load_file(accel_loader *ld, const char *path, const accel_module **ret_module,
                            accel_err *err)
{
	if (!ld || !path || !*path)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_loader_load_file: %s",
		                     ld ? "empty path" : "loader is NULL");
	return load_path(ld, path, "file", ret_module, err);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether this process is the first of its job (global rank 0, or not
 * started by a launcher): what a scan finds wrong with a plugin directory
 * is said once per job there, and at debug level by every other rank (on
 * a node whose directories differ from rank 0's, ACCEL_LOG_LEVEL=debug or
 * `accel plugins list` there shows them).  The rank is read from the
 * variables launchers set (docs/launch.md), ours first. */
static int first_of_job(void)
{
	static const char *const vars[] = {ACCEL_ENV_RANK, ACCEL_ENV_TORCH_RANK,
	                                   "OMPI_COMM_WORLD_RANK", "PMI_RANK",
	                                   "SLURM_PROCID"};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return !strcmp(v, "0");
	}
	return 1;
}

static void scan_warn(const char *fmt, ...) ACCEL_PRINTF(1, 2);
static void scan_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_logv(first_of_job() ? ACCEL_LOG_WARN : ACCEL_LOG_DEBUG, fmt, ap);
	va_end(ap);
}

static int add_skip(accel_loader *ld, const char *path, const char *why)
{
	if (ld->n_skips == ld->cap_skips) {
		uint32_t cap = ld->cap_skips ? 2 * ld->cap_skips : 4;
		skip_rec *v = realloc(ld->skips, cap * sizeof(*v));
		if (!v)
			return ACCEL_ERR_NOMEM;
		ld->skips = v;
		ld->cap_skips = cap;
	}
	char *p = strdup(path), *w = strdup(why);
	if (!p || !w) {
		free(p);
		free(w);
		return ACCEL_ERR_NOMEM;
	}
	ld->skips[ld->n_skips++] = (skip_rec){.path = p, .why = w};
	return ACCEL_OK;
}

/* 1 for a file to load; 0 for anything else, where a name like a module's
 * that cannot be opened is recorded (add_skip) and said (scan_warn);
 * negative when out of memory. */
static int is_candidate(accel_loader *ld, const char *dir, const char *name)
{
	size_t n = strlen(name);
	if (name[0] == '.' || n < 4 || strcmp(name + n - 3, ".so") != 0)
		return 0;
	char p[PATH_MAX];
	if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p))
		return 0;
	struct stat st;
	const char *why = NULL;
	if (stat(p, &st) != 0)
		/* a link whose target is gone, or a loop of links: skipped, but
		 * not silently (the user may believe that module installed) */
		why = errno == ENOENT ? "a symbolic link whose target does not exist"
		      : errno == ELOOP ? "a loop of symbolic links"
		                       : strerror(errno);
	else if (S_ISDIR(st.st_mode))
		why = "a directory, not a module file";
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	if (!why)
		return 1;
	scan_warn("plugin directory %s: %s is skipped: %s", dir, name, why);
	return add_skip(ld, p, why) ? -1 : 0;
}

static int scan_dir(accel_loader *ld, dir_rec *d, accel_err *err)
{
	d->scanned = 1;
	d->exists = is_dir(d->dir);
	if (!d->exists)
		return ACCEL_OK;
	DIR *dh = opendir(d->dir);
	if (!dh) {
		/* Listed as existing but unreadable: say so once, go on. */
		scan_warn("plugin directory %s (%s): %s", d->dir, d->origin, strerror(errno));
		return ACCEL_OK;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = ACCEL_OK;
	struct dirent *de;
	while ((de = readdir(dh))) {
		int c = is_candidate(ld, d->dir, de->d_name);
		if (c < 0) {
			r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			goto done;
		}
		if (!c)
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			char **v = realloc(names, nc * sizeof(*v));
			if (!v) {
				r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
				goto done;
			}
			names = v;
			cap = nc;
		}
		if (!(names[n] = strdup(de->d_name))) {
			r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
			goto done;
		}
		n++;
	}
	/* Directory order is arbitrary; by name is reproducible. */
	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_names);
	for (size_t i = 0; i < n && r == ACCEL_OK; i++) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s", d->dir, names[i]);
		r = load_path(ld, p, d->origin, NULL, err);
	}
done:
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(dh);
	return r;
}

int accelp_loader_scan(accel_loader *ld, accel_err *err)
{
	if (!ld)
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG, "accelp_loader_scan: NULL loader");
	ld->scanned = 1;
	for (uint32_t i = 0; i < ld->n_dirs; i++) {
		if (ld->dirs[i].scanned)
			continue;
		/* The origin string lives as long as the loader: records borrow it. */
		int r = scan_dir(ld, &ld->dirs[i], err);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

void accelp_loader_set_available(accel_loader *ld, uint32_t req_bits, int32_t cuda_cc)
{
	if (!ld)
		return;
	ld->avail = req_bits;
	ld->avail_cc = cuda_cc > 0 ? cuda_cc : 0;
	reevaluate(ld);
}

