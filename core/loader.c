/* SPDX-License-Identifier: MIT */
/* core/loader.c: finding, loading and checking plugins and comm backends.
 *
 * Everything a third-party file can get wrong must end up as a one-line
 * reason on its record, never as a crash or an abort: the ELF header is
 * read before dlopen() because glibc maps a truncated object happily and
 * the process then dies of SIGBUS while relocating it; descriptors are
 * checked field by field before anything else reads them. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel-build-config.h"
#include "comm.h"
#include "loader.h"
#include "log.h"

/* Majors above ours that we recognise only to say "built for v9". */
#define ENTRY_MAJOR_SCAN_MAX 16
#define NAME_MAX_LEN 63
#define SCHEMA_MAX_PARAMS 4096

/* The module's tables copied into this core's layout: members its
 * struct_size did not cover read as NULL/0, so nothing past the module's
 * structs is ever read. */
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

struct accel_loader {
	const accel_host_v1 *host;
	module_rec **mods;
	uint32_t n_mods, cap_mods;
	dir_rec *dirs;
	uint32_t n_dirs, cap_dirs;
	uint32_t avail;
	int32_t avail_cc;
	int scanned;
};

/* ---- names ------------------------------------------------------------------ */

const char *accel_loader_status_name(int status)
{
	switch (status) {
	case ACCEL_MODULE_OK: return "ok";
	case ACCEL_MODULE_UNAVAILABLE: return "unavailable";
	case ACCEL_MODULE_BROKEN: return "broken";
	case ACCEL_MODULE_SHADOWED: return "shadowed";
	default: return "?";
	}
}

const char *accel_loader_kind_name(int kind)
{
	switch (kind) {
	case ACCEL_MODULE_PLUGIN: return "plugin";
	case ACCEL_MODULE_COMM: return "comm";
	default: return "?";
	}
}

const char *accel_loader_role_name(uint32_t role)
{
	switch (role) {
	case ACCEL_ROLE_STRATEGY: return "strategy";
	case ACCEL_ROLE_PRECISION: return "precision";
	case ACCEL_ROLE_REDUCE_HOOK: return "reduce_hook";
	case ACCEL_ROLE_OTHER: return "other";
	default: return "?";
	}
}

const char *accel_loader_cfg_type_name(uint32_t type)
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

static void appendf(char *buf, size_t cap, const char *fmt, ...) ACCEL_PRINTF(3, 4);

static void appendf(char *buf, size_t cap, const char *fmt, ...)
{
	size_t n = strlen(buf);
	if (n + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + n, cap - n, fmt, ap);
	va_end(ap);
}

const char *accel_loader_requires_str(uint32_t requires, int32_t min_cuda_cc, char *buf,
                                      size_t cap)
{
	if (!buf || cap == 0)
		return "";
	buf[0] = '\0';
	if (min_cuda_cc > 0)
		requires |= ACCEL_REQ_CUDA;
	if (requires & ACCEL_REQ_CUDA) {
		appendf(buf, cap, "CUDA");
		if (min_cuda_cc > 0)
			appendf(buf, cap, " (cc >= %d.%d)", min_cuda_cc / 10, min_cuda_cc % 10);
	}
	if (requires & ACCEL_REQ_NCCL)
		appendf(buf, cap, "%sNCCL", buf[0] ? ", " : "");
	if (requires & ACCEL_REQ_MPI)
		appendf(buf, cap, "%sMPI", buf[0] ? ", " : "");
	uint32_t unknown = requires & ~(ACCEL_REQ_CUDA | ACCEL_REQ_NCCL | ACCEL_REQ_MPI);
	if (unknown)
		appendf(buf, cap, "%sunknown 0x%x", buf[0] ? ", " : "", unknown);
	if (!buf[0])
		snprintf(buf, cap, "none");
	return buf;
}

const char *accel_loader_caps_str(uint32_t caps, char *buf, size_t cap)
{
	static const char *const names[] = {"cpu", "cuda", "shard_optim", "shard_grads",
	                                    "shard_params", "offload", "checkpoint"};
	if (!buf || cap == 0)
		return "";
	buf[0] = '\0';
	for (unsigned i = 0; i < 32; i++) {
		if (!(caps & (1u << i)))
			continue;
		if (i < sizeof(names) / sizeof(names[0]))
			appendf(buf, cap, "%s%s", buf[0] ? ", " : "", names[i]);
		else
			appendf(buf, cap, "%sbit%u", buf[0] ? ", " : "", i);
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

/* Reasons are one line: fold control characters into spaces. */
static void one_line(char *s)
{
	for (; *s; s++)
		if (*s == '\n' || *s == '\r' || *s == '\t')
			*s = ' ';
}

void accel_loader_entry_error(const char *msg)
{
	if (!msg)
		msg = "";
	if (entry_cap) {
		if (!entry_cap->msg[0]) {
			snprintf(entry_cap->msg, sizeof(entry_cap->msg), "%s", msg);
			one_line(entry_cap->msg);
		}
		return;
	}
	accel_log(ACCEL_LOG_WARN, "a plugin reported an error outside any context: %s", msg);
}

/* ---- loader object ------------------------------------------------------------ */

int accel_loader_new(const accel_host_v1 *host, accel_loader **ret_loader, accel_err *err)
{
	if (!host || !ret_loader)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_loader_new: %s is NULL",
		                     host ? "ret_loader" : "host");
	accel_loader *ld = calloc(1, sizeof(*ld));
	if (!ld)
		return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory creating the plugin loader");
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

accel_loader *accel_loader_free(accel_loader *ld)
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
	free(ld);
	return NULL;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int accel_loader_add_dir(accel_loader *ld, const char *dir, const char *origin, accel_err *err)
{
	if (!ld || !dir || !*dir)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "accel_loader_add_dir: empty directory name%s%s",
		                     origin ? " from " : "", origin ? origin : "");
	if (ld->n_dirs == ld->cap_dirs) {
		uint32_t cap = ld->cap_dirs ? 2 * ld->cap_dirs : 8;
		dir_rec *d = realloc(ld->dirs, cap * sizeof(*d));
		if (!d)
			return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
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
		return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	}
	/* Keep "/a/b/" and "/a/b" alike in listings. */
	size_t n = strlen(d->dir);
	while (n > 1 && d->dir[n - 1] == '/')
		d->dir[--n] = '\0';
	d->exists = is_dir(d->dir);
	ld->n_dirs++;
	return ACCEL_OK;
}

int accel_loader_add_default_dirs(accel_loader *ld, accel_err *err)
{
	if (!ld)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_loader_add_default_dirs: NULL");
	const char *env = getenv("ACCEL_PLUGIN_PATH");
	if (env && *env) {
		char *copy = strdup(env);
		if (!copy)
			return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		char *save = NULL;
		for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
			int r = accel_loader_add_dir(ld, tok, "ACCEL_PLUGIN_PATH", err);
			if (r) {
				free(copy);
				return r;
			}
		}
		free(copy);
	}
	return accel_loader_add_dir(ld, ACCEL_PLUGINDIR, "install", err);
}

uint32_t accel_loader_count(const accel_loader *ld)
{
	return ld ? ld->n_mods : 0;
}

const accel_module *accel_loader_get(const accel_loader *ld, uint32_t i)
{
	return ld && i < ld->n_mods ? &ld->mods[i]->pub : NULL;
}

uint32_t accel_loader_dir_count(const accel_loader *ld)
{
	return ld ? ld->n_dirs : 0;
}

const char *accel_loader_dir(const accel_loader *ld, uint32_t i, const char **ret_origin,
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

/* Set status and a "<path>: <cause>" reason (replacing any earlier one). */
static int rec_set(module_rec *m, int status, const char *fmt, ...) ACCEL_PRINTF(3, 4);

static int rec_set(module_rec *m, int status, const char *fmt, ...)
{
	char cause[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	one_line(cause);
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

/* A file that cannot be used: record why; returns -1 (internal "failed"). */
static int broken(module_rec *m, const char *fmt, ...) ACCEL_PRINTF(2, 3);

static int broken(module_rec *m, const char *fmt, ...)
{
	char cause[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	rec_set(m, ACCEL_MODULE_BROKEN, "%s", cause);
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

static const char *kind_word(int kind)
{
	return kind == ACCEL_MODULE_COMM ? "comm backend" : "plugin";
}

/* ---- ELF pre-check ------------------------------------------------------------------ */

#if defined(__x86_64__)
#define HOST_EM EM_X86_64
#elif defined(__aarch64__)
#define HOST_EM EM_AARCH64
#elif defined(__i386__)
#define HOST_EM EM_386
#elif defined(__arm__)
#define HOST_EM EM_ARM
#elif defined(__powerpc64__)
#define HOST_EM EM_PPC64
#elif defined(__riscv)
#define HOST_EM EM_RISCV
#elif defined(__s390x__)
#define HOST_EM EM_S390
#endif

#if __SIZEOF_POINTER__ == 8
#define HOST_ELFCLASS ELFCLASS64
#else
#define HOST_ELFCLASS ELFCLASS32
#endif

/* Printable start of a non-ELF file, for "starts with ...". */
static void printable_prefix(const unsigned char *b, size_t n, char *out, size_t cap)
{
	size_t j = 0;
	for (size_t i = 0; i < n && i < 12 && j + 5 < cap; i++) {
		unsigned char c = b[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			out[j++] = (char)c;
		else
			j += (size_t)snprintf(out + j, cap - j, "\\x%02x", c);
	}
	out[j < cap ? j : cap - 1] = '\0';
}

/* 0 when `path` looks like a complete shared object for this machine, else
 * -1 with the cause in why. */
static int elf_check(const char *path, char *why, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, cap, "cannot open: %s", strerror(errno));
		return -1;
	}
	int ret = -1;
	struct stat st;
	ElfW(Ehdr) eh;
	if (fstat(fd, &st) != 0) {
		snprintf(why, cap, "cannot stat: %s", strerror(errno));
		goto out;
	}
	uint64_t size = (uint64_t)st.st_size;
	memset(&eh, 0, sizeof(eh));
	ssize_t got = pread(fd, &eh, sizeof(eh), 0);
	if (got < 0) {
		snprintf(why, cap, "cannot read: %s", strerror(errno));
		goto out;
	}
	if (got < SELFMAG || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
		char pfx[64];
		if (got == 0) {
			snprintf(why, cap, "not an ELF shared object (empty file)");
		} else {
			printable_prefix((const unsigned char *)&eh, (size_t)got, pfx, sizeof(pfx));
			snprintf(why, cap, "not an ELF shared object (starts with \"%s\")", pfx);
		}
		goto out;
	}
	if ((size_t)got < EI_NIDENT || eh.e_ident[EI_CLASS] != HOST_ELFCLASS) {
		snprintf(why, cap, "wrong ELF class: %s, this process is %d-bit",
		         (size_t)got < EI_NIDENT ? "truncated header"
		         : eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit"
		         : eh.e_ident[EI_CLASS] == ELFCLASS64 ? "64-bit" : "invalid",
		         (int)(8 * sizeof(void *)));
		goto out;
	}
	if ((size_t)got < sizeof(eh)) {
		snprintf(why, cap, "truncated: file is %llu bytes, shorter than an ELF header",
		         (unsigned long long)size);
		goto out;
	}
	if (eh.e_type != ET_DYN) {
		snprintf(why, cap, "not a shared object (ELF type %u%s); build it with -shared",
		         (unsigned)eh.e_type, eh.e_type == ET_EXEC ? ", an executable"
		                             : eh.e_type == ET_REL ? ", an object file" : "");
		goto out;
	}
#ifdef HOST_EM
	if (eh.e_machine != HOST_EM) {
		snprintf(why, cap, "built for another machine (ELF machine %u, this one is %u)",
		         (unsigned)eh.e_machine, (unsigned)HOST_EM);
		goto out;
	}
#endif
	uint64_t need = 0;
	if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0) {
		snprintf(why, cap, "corrupt ELF header (%u program headers of %u bytes)",
		         (unsigned)eh.e_phnum, (unsigned)eh.e_phentsize);
		goto out;
	}
	uint64_t ph_end = (uint64_t)eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
	if (ph_end > size) {
		snprintf(why, cap, "truncated: file is %llu bytes, its program headers end at %llu",
		         (unsigned long long)size, (unsigned long long)ph_end);
		goto out;
	}
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		ElfW(Phdr) ph;
		off_t off = (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize);
		if (pread(fd, &ph, sizeof(ph), off) != (ssize_t)sizeof(ph)) {
			snprintf(why, cap, "cannot read program header %u", i);
			goto out;
		}
		if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC)
			continue;
		uint64_t end = (uint64_t)ph.p_offset + (uint64_t)ph.p_filesz;
		if (end > need)
			need = end;
	}
	if (need > size) {
		snprintf(why, cap, "truncated: file is %llu bytes, its segments need %llu",
		         (unsigned long long)size, (unsigned long long)need);
		goto out;
	}
	if (eh.e_shoff != 0) {
		uint64_t sh_end = (uint64_t)eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize;
		if (sh_end > size) {
			snprintf(why, cap, "truncated: file is %llu bytes, its section headers end at %llu",
			         (unsigned long long)size, (unsigned long long)sh_end);
			goto out;
		}
	}
	ret = 0;
out:
	close(fd);
	return ret;
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
	one_line(out);
}

/* ---- descriptor checks ------------------------------------------------------------- */

static int name_ok(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return n > 0 && n <= NAME_MAX_LEN;
}

/* Dotted path of [A-Za-z0-9_-] segments: "offload_optimizer.device". */
static int key_ok(const char *s)
{
	size_t seg = 0, n = 0;
	for (; s[n]; n++) {
		char c = s[n];
		if (c == '.') {
			if (seg == 0)
				return 0;
			seg = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return 0;
		seg++;
	}
	return seg > 0 && n <= 255;
}

/* Quote a string a plugin gave us for a message, bounded and one line. */
static const char *shown(const char *s, char *buf, size_t cap)
{
	if (!s)
		return "(null)";
	snprintf(buf, cap, "%s", s);
	if (strlen(s) >= cap && cap > 4)
		memcpy(buf + cap - 4, "...", 4);
	one_line(buf);
	return buf;
}

static int choice_in(const char *choices, const char *v)
{
	size_t vl = strlen(v);
	for (const char *p = choices; *p;) {
		const char *bar = strchr(p, '|');
		size_t l = bar ? (size_t)(bar - p) : strlen(p);
		if (l == vl && !strncmp(p, v, l))
			return 1;
		if (!bar)
			break;
		p = bar + 1;
	}
	return 0;
}

/* Checks one normalized schema entry; 0 or -1 with the cause in why. */
static int schema_entry_check(const accel_param_schema_v1 *p, char *why, size_t cap)
{
	char b1[96];
	if (p->type < ACCEL_CFG_BOOL || p->type > ACCEL_CFG_STRLIST) {
		snprintf(why, cap, "unknown type %u", p->type);
		return -1;
	}
	if (isnan(p->min) || isnan(p->max)) {
		snprintf(why, cap, "min or max is NaN");
		return -1;
	}
	if (p->type == ACCEL_CFG_INT && p->min <= p->max &&
	    ((isfinite(p->min) && p->min != floor(p->min)) ||
	     (isfinite(p->max) && p->max != floor(p->max)))) {
		snprintf(why, cap, "integer key with the range [%g, %g]; its bounds must be integers "
		         "(or infinite)", p->min, p->max);
		return -1;
	}
	if (p->type == ACCEL_CFG_ENUM) {
		if (!p->choices || !*p->choices) {
			snprintf(why, cap, "enum without choices");
			return -1;
		}
		/* No empty alternatives ("a||b", "a|") and no repeats. */
		for (const char *c = p->choices; *c;) {
			const char *bar = strchr(c, '|');
			size_t l = bar ? (size_t)(bar - c) : strlen(c);
			if (l == 0 || (bar && bar[1] == '\0')) {
				snprintf(why, cap, "choices \"%s\" has an empty alternative",
				         shown(p->choices, b1, sizeof(b1)));
				return -1;
			}
			for (const char *d = c + l + (bar ? 1 : 0); bar && *d;) {
				const char *bar2 = strchr(d, '|');
				size_t l2 = bar2 ? (size_t)(bar2 - d) : strlen(d);
				if (l2 == l && !strncmp(c, d, l)) {
					snprintf(why, cap, "choices \"%s\" lists \"%.*s\" twice",
					         shown(p->choices, b1, sizeof(b1)), (int)l, c);
					return -1;
				}
				if (!bar2)
					break;
				d = bar2 + 1;
			}
			if (!bar)
				break;
			c = bar + 1;
		}
	}
	if (!p->default_json)
		return 0;
	json_error_t jerr;
	json_t *v = json_loads(p->default_json, JSON_DECODE_ANY, &jerr);
	if (!v) {
		snprintf(why, cap, "default '%s' is not valid JSON (%s)",
		         shown(p->default_json, b1, sizeof(b1)), jerr.text);
		return -1;
	}
	const char *want = NULL;
	int range = p->min <= p->max;
	switch (p->type) {
	case ACCEL_CFG_BOOL:
		if (!json_is_boolean(v))
			want = "true or false";
		break;
	case ACCEL_CFG_INT:
		if (!json_is_integer(v))
			want = "an integer";
		else if (range && ((double)json_integer_value(v) < p->min ||
		                   (double)json_integer_value(v) > p->max)) {
			snprintf(why, cap, "default %s is outside its range [%g, %g]",
			         shown(p->default_json, b1, sizeof(b1)), p->min, p->max);
			json_decref(v);
			return -1;
		}
		break;
	case ACCEL_CFG_DOUBLE:
		if (!json_is_number(v))
			want = "a number";
		else if (range && (json_number_value(v) < p->min || json_number_value(v) > p->max)) {
			snprintf(why, cap, "default %s is outside its range [%g, %g]",
			         shown(p->default_json, b1, sizeof(b1)), p->min, p->max);
			json_decref(v);
			return -1;
		}
		break;
	case ACCEL_CFG_STRING:
		if (!json_is_string(v))
			want = "a JSON string";
		break;
	case ACCEL_CFG_ENUM:
		if (!json_is_string(v)) {
			want = "a JSON string";
		} else if (!choice_in(p->choices, json_string_value(v))) {
			char b2[96];
			snprintf(why, cap, "default %s is not one of \"%s\"",
			         shown(p->default_json, b1, sizeof(b1)), shown(p->choices, b2, sizeof(b2)));
			json_decref(v);
			return -1;
		}
		break;
	case ACCEL_CFG_STRLIST:
		if (!json_is_array(v)) {
			want = "a JSON array of strings";
		} else {
			for (size_t i = 0; i < json_array_size(v); i++)
				if (!json_is_string(json_array_get(v, i)))
					want = "a JSON array of strings";
		}
		break;
	default:
		break;
	}
	json_decref(v);
	if (want) {
		snprintf(why, cap, "default %s is not %s", shown(p->default_json, b1, sizeof(b1)),
		         want);
		return -1;
	}
	return 0;
}

/* Copy the module's schema into our layout and check it.  `params` is the
 * module's array, whose stride is its entries' struct_size. */
static int schema_load(module_rec *m, const char *section, const accel_param_schema_v1 *params,
                       uint32_t n_params)
{
	char b1[96], why[512];
	if (n_params == 0)
		return 0;
	if (n_params > SCHEMA_MAX_PARAMS)
		return broken(m, "schema declares %u parameters (at most %u)",
		              n_params, SCHEMA_MAX_PARAMS);
	if (!params)
		return broken(m,
		              "descriptor says n_params = %u but params is NULL", n_params);
	if (!section)
		return broken(m,
		              "declares %u parameters but no config_section to hold them",
		              n_params);
	uint32_t stride = params[0].struct_size;
	if (stride < ACCEL_PARAM_SCHEMA_V1_MIN_SIZE)
		return broken(m,
		              "struct_size too small: params[0].struct_size is %u, "
		              "accel_param_schema_v1 needs at least %zu",
		              stride, (size_t)ACCEL_PARAM_SCHEMA_V1_MIN_SIZE);
	m->params = calloc(n_params, sizeof(*m->params));
	if (!m->params)
		return ACCEL_ERR_NOMEM;
	for (uint32_t i = 0; i < n_params; i++) {
		const accel_param_schema_v1 *src =
			(const accel_param_schema_v1 *)((const char *)params + (size_t)i * stride);
		if (src->struct_size != stride)
			return broken(m,
			              "schema entry %u has struct_size %u, entry 0 has %u "
			              "(all entries must be one struct type)", i, src->struct_size,
			              stride);
		accel_param_schema_v1 *p = &m->params[i];
		memcpy(p, src, stride < sizeof(*p) ? stride : sizeof(*p));
		p->struct_size = sizeof(*p);
		if (!p->key || !key_ok(p->key))
			return broken(m,
			              "schema entry %u: key \"%s\" is not a dotted name of "
			              "[A-Za-z0-9_-] parts", i, shown(p->key, b1, sizeof(b1)));
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(m->params[j].key, p->key))
				return broken(m,
				              "schema entries %u and %u both declare key '%s'", j, i,
				              p->key);
		if (schema_entry_check(p, why, sizeof(why)))
			return broken(m, "schema entry %u ('%s.%s', %s): %s", i,
			              section, p->key, accel_loader_cfg_type_name(p->type), why);
	}
	m->pub.params = m->params;
	m->pub.n_params = n_params;
	return 0;
}

/* Common descriptor strings: name, version, summary, section. */
static int desc_strings(module_rec *m, const char *what, const char *name, const char *version,
                        const char *summary, const char *section)
{
	char b1[96];
	if (!name)
		return broken(m, "%s name is NULL", what);
	if (!name_ok(name))
		return broken(m,
		              "%s name \"%s\" is not 1-%d characters of [a-z0-9_-]", what,
		              shown(name, b1, sizeof(b1)), NAME_MAX_LEN);
	m->pub.name = name;
	if (!version || !*version)
		return broken(m, "%s '%s' has no version string", what,
		              name);
	if (section && !key_ok(section))
		return broken(m,
		              "%s '%s': config_section \"%s\" is not a dotted name of "
		              "[A-Za-z0-9_-] parts", what, name, shown(section, b1, sizeof(b1)));
	m->pub.version = version;
	m->pub.summary = summary ? summary : "";
	m->pub.config_section = section;
	return 0;
}

#define REQUIRE_SLOT(m, vt, slot, what)                                              \
	do {                                                                         \
		if (!(vt)->slot)                                                     \
			return broken((m), "%s '%s': required slot %s is NULL", (what), \
			              (m)->pub.name, #slot);                         \
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
	case ACCEL_ROLE_PRECISION: return "precision hook";
	default: return "hook";
	}
}

static int plugin_check(module_rec *m, const accel_plugin_v1 *raw)
{
	if (raw->struct_size < ACCEL_ABI_END(accel_plugin_v1, desc))
		return broken(m, "struct_size too small: accel_plugin_v1.struct_size is %u, ABI v1 "
		              "needs at least %zu (through desc)", raw->struct_size,
		              ACCEL_ABI_END(accel_plugin_v1, desc));
	const accel_plugin_desc_v1 *rd = raw->desc;
	if (!rd)
		return broken(m, "accel_plugin_v1.desc is NULL");
	if (rd->struct_size < ACCEL_PLUGIN_DESC_V1_MIN_SIZE)
		return broken(m, "struct_size too small: accel_plugin_desc_v1.struct_size is %u, "
		              "ABI v1 needs at least %zu", rd->struct_size,
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
	if (d->role < ACCEL_ROLE_STRATEGY || d->role > ACCEL_ROLE_OTHER)
		return broken(m, "plugin '%s': unknown role %u", d->name, d->role);
	if (d->min_cuda_cc < 0)
		return broken(m, "plugin '%s': min_cuda_cc is %d", d->name, (int)d->min_cuda_cc);

	/* The vtable must reach the last slot its role requires. */
	size_t need = d->role == ACCEL_ROLE_STRATEGY      ? ACCEL_PLUGIN_V1_STRATEGY_MIN_SIZE
	              : d->role == ACCEL_ROLE_REDUCE_HOOK ? ACCEL_PLUGIN_V1_REDUCE_HOOK_MIN_SIZE
	                                                  : ACCEL_PLUGIN_V1_HOOK_MIN_SIZE;
	const char *last = d->role == ACCEL_ROLE_STRATEGY      ? "step"
	                   : d->role == ACCEL_ROLE_REDUCE_HOOK ? "reduce_bucket"
	                                                       : "fini";
	if (raw->struct_size < need)
		return broken(m, "struct_size too small: accel_plugin_v1.struct_size is %u, a v1 %s "
		              "needs at least %zu (through %s)", raw->struct_size, role_word(d->role),
		              need, last);
	accel_plugin_v1 *vt = &m->plugin;
	copy_struct(vt, sizeof(*vt), raw, raw->struct_size);
	vt->struct_size = sizeof(*vt);
	vt->desc = d;
	m->pub.abi_minor = raw->abi_minor;
	REQUIRE_SLOT(m, vt, init, "plugin");
	REQUIRE_SLOT(m, vt, fini, "plugin");
	if (d->role == ACCEL_ROLE_STRATEGY) {
		REQUIRE_SLOT(m, vt, wrap, "strategy");
		REQUIRE_SLOT(m, vt, reduce, "strategy");
		REQUIRE_SLOT(m, vt, grad_stats, "strategy");
		REQUIRE_SLOT(m, vt, step, "strategy");
	}
	if (d->role == ACCEL_ROLE_REDUCE_HOOK)
		REQUIRE_SLOT(m, vt, reduce_bucket, "reduce hook");
	if ((r = schema_load(m, d->config_section, d->params, d->n_params)))
		return r;
	d->params = m->params;
	m->pub.plugin = vt;
	return 0;
}

static int comm_check(module_rec *m, const accel_comm_v1 *raw)
{
	if (raw->struct_size < ACCEL_COMM_V1_MIN_SIZE)
		return broken(m, "struct_size too small: accel_comm_v1.struct_size is %u, ABI v1 "
		              "needs at least %zu (through test)", raw->struct_size,
		              (size_t)ACCEL_COMM_V1_MIN_SIZE);
	const accel_comm_desc_v1 *rd = raw->desc;
	if (!rd)
		return broken(m, "accel_comm_v1.desc is NULL");
	if (rd->struct_size < ACCEL_COMM_DESC_V1_MIN_SIZE)
		return broken(m, "struct_size too small: accel_comm_desc_v1.struct_size is %u, ABI v1 "
		              "needs at least %zu", rd->struct_size,
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
		return broken(m, "comm backend '%s': devices is 0x%x, serves neither cpu nor cuda",
		              d->name, d->devices);
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
	if ((r = schema_load(m, d->config_section, d->params, d->n_params)))
		return r;
	d->params = m->params;
	m->pub.comm = vt;
	return 0;
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
		appendf(why, sizeof(why), "needs CUDA (no CUDA device module or no GPU)");
	else if ((req & ACCEL_REQ_CUDA) && m->pub.min_cuda_cc > ld->avail_cc)
		appendf(why, sizeof(why), "needs a GPU of compute capability >= %d.%d (best here: %d.%d)",
		        m->pub.min_cuda_cc / 10, m->pub.min_cuda_cc % 10, ld->avail_cc / 10,
		        ld->avail_cc % 10);
	if ((req & ACCEL_REQ_NCCL) && !(avail & ACCEL_REQ_NCCL))
		appendf(why, sizeof(why), "%sneeds NCCL (no usable nccl comm backend)",
		        why[0] ? "; " : "");
	if ((req & ACCEL_REQ_MPI) && !(avail & ACCEL_REQ_MPI))
		appendf(why, sizeof(why), "%sneeds MPI (no usable mpi comm backend)",
		        why[0] ? "; " : "");
	uint32_t unknown = req & ~(ACCEL_REQ_CUDA | ACCEL_REQ_NCCL | ACCEL_REQ_MPI);
	if (unknown)
		appendf(why, sizeof(why),
		        "%sneeds requirement bits 0x%x this accel does not know (built for a newer "
		        "accel?)", why[0] ? "; " : "", unknown);
	if (!why[0]) {
		rec_clear(m);
		return ACCEL_OK;
	}
	return rec_set(m, ACCEL_MODULE_UNAVAILABLE, "%s '%s' %s", kind_word(m->pub.kind),
	               m->pub.name, why);
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

/* The first module of that kind and name other than m, in search order.
 * A broken one counts once it got far enough to say its name: it is the
 * one the user put first (an override), so a later module of the same
 * name must not silently stand in for it. */
static module_rec *claimant(const accel_loader *ld, int kind, const char *name,
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

/* Fills m from the file; failures go to m's status and reason.  Returns an
 * error status only for out-of-memory. */
static int load_into(accel_loader *ld, module_rec *m)
{
	const char *path = m->pub.path;
	char why[1024];
	if (elf_check(path, why, sizeof(why)))
		return broken(m, "%s", why);
	dlerror();
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		trim_dlerror(path, dlerror(), why, sizeof(why));
		return broken(m, "cannot load: %s", why);
	}
	m->pub.handle = h;

	/* Newest supported major first; this core has only v1. */
	entry_fn pe = find_entry(h, "accel_plugin_entry_v", ACCEL_ABI_MAJOR);
	entry_fn ce = find_entry(h, "accel_comm_entry_v", ACCEL_ABI_MAJOR);
	if (pe && ce)
		return broken(m,
		              "exports both %s and %s; a file is either a plugin or a comm backend",
		              ACCEL_PLUGIN_ENTRY_V1, ACCEL_COMM_ENTRY_V1);
	if (!pe && !ce) {
		for (int major = ENTRY_MAJOR_SCAN_MAX; major > ACCEL_ABI_MAJOR; major--) {
			const char *which = find_entry(h, "accel_plugin_entry_v", major) ? "plugin"
			                    : find_entry(h, "accel_comm_entry_v", major) ? "comm"
			                                                                 : NULL;
			if (which) {
				m->pub.abi_major = major;
				return broken(m,
				              "built for %s ABI v%d; this accel supports v%d", which,
				              major, ACCEL_ABI_MAJOR);
			}
		}
		return broken(m,
		              "missing entry symbol: exports neither %s nor %s (not an accel "
		              "plugin, or built without ACCEL_EXPORT on its entry)",
		              ACCEL_PLUGIN_ENTRY_V1, ACCEL_COMM_ENTRY_V1);
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
	                    : ce(ld->host == accel_host_table() ? accel_comm_host_table() : ld->host);
	entry_cap = saved;
	if (!vt) {
		if (cap.msg[0])
			return broken(m, "%s returned NULL: %s", sym, cap.msg);
		return broken(m, "%s returned NULL (the %s gave no reason)",
		              sym, kind_word(m->pub.kind));
	}
	if (cap.msg[0])
		accel_log(ACCEL_LOG_DEBUG, "%s: %s reported '%s' but returned a table", path, sym,
		          cap.msg);
	int r = pe ? plugin_check(m, (const accel_plugin_v1 *)vt)
	           : comm_check(m, (const accel_comm_v1 *)vt);
	if (r == ACCEL_ERR_NOMEM)
		return r;
	if (r)
		return ACCEL_OK;   /* broken, reason recorded */

	module_rec *first = claimant(ld, m->pub.kind, m->pub.name, m);
	if (first)
		return rec_set(m, ACCEL_MODULE_SHADOWED,
		               "%s '%s' is also provided by %s, which comes first in the search "
		               "order; remove or rename one", kind_word(m->pub.kind), m->pub.name,
		               first->pub.path);
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
		return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory loading %s", path);
	}
	m->real = real;
	m->pub.origin = origin;
	m->pub.path = absolute_path(path);
	if (!m->pub.path || push_rec(ld, m)) {
		rec_free(m);
		return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory loading %s", path);
	}
	/* Broken files are records, not errors; only running out of memory is. */
	int r = load_into(ld, m);
	if (r == ACCEL_ERR_NOMEM)
		return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory loading %s", path);
	/* A new comm backend can satisfy (or a shadowing one no longer
	 * satisfy) what earlier modules require. */
	if (m->pub.kind == ACCEL_MODULE_COMM)
		reevaluate(ld);
	if (m->pub.status == ACCEL_MODULE_OK)
		accel_log(ACCEL_LOG_DEBUG, "loaded %s '%s' %s from %s", kind_word(m->pub.kind),
		          m->pub.name, m->pub.version, m->pub.path);
	else
		accel_log(ACCEL_LOG_DEBUG, "%s: %s", accel_loader_status_name(m->pub.status),
		          m->pub.reason);
	if (ret_module)
		*ret_module = &m->pub;
	return ACCEL_OK;
}

int accel_loader_load_file(accel_loader *ld, const char *path, const accel_module **ret_module,
                           accel_err *err)
{
	if (!ld || !path || !*path)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_loader_load_file: %s",
		                     ld ? "empty path" : "loader is NULL");
	return load_path(ld, path, "file", ret_module, err);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_candidate(const char *dir, const char *name)
{
	size_t n = strlen(name);
	if (name[0] == '.' || n < 4 || strcmp(name + n - 3, ".so") != 0)
		return 0;
	char p[PATH_MAX];
	if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p))
		return 0;
	struct stat st;
	if (stat(p, &st) != 0) {
		/* a link whose target is gone, or a loop of links: skipped, but
		 * not silently (the user may believe that module installed) */
		accel_log(ACCEL_LOG_WARN, "plugin directory %s: %s is skipped: %s", dir, name,
		          errno == ENOENT ? "a symbolic link whose target does not exist"
		                          : strerror(errno));
		return 0;
	}
	return S_ISREG(st.st_mode);
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
		accel_log(ACCEL_LOG_WARN, "plugin directory %s (%s): %s", d->dir, d->origin,
		          strerror(errno));
		return ACCEL_OK;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	int r = ACCEL_OK;
	struct dirent *de;
	while ((de = readdir(dh))) {
		if (!is_candidate(d->dir, de->d_name))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 16;
			char **v = realloc(names, nc * sizeof(*v));
			if (!v) {
				r = accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
				goto done;
			}
			names = v;
			cap = nc;
		}
		if (!(names[n] = strdup(de->d_name))) {
			r = accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
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

int accel_loader_scan(accel_loader *ld, accel_err *err)
{
	if (!ld)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_loader_scan: NULL loader");
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

void accel_loader_set_available(accel_loader *ld, uint32_t req_bits, int32_t cuda_cc)
{
	if (!ld)
		return;
	ld->avail = req_bits;
	ld->avail_cc = cuda_cc > 0 ? cuda_cc : 0;
	reevaluate(ld);
}

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
	module_rec *first = claimant(ld, kind, name, NULL);
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
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s '%s' cannot be used: %s (it comes first in the search "
			                     "order, so %s, a later file of that name, is not used in its "
			                     "place)", kind_word(kind), name, first->pub.reason, later);
		return accel_err_set(err, ACCEL_ERR_PLUGIN, "%s '%s' cannot be used: %s",
		                     kind_word(kind), name, first->pub.reason);
	}
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (o != first && o->pub.status == ACCEL_MODULE_SHADOWED && o->pub.kind == kind &&
		    !strcmp(o->pub.name, name))
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "two %ss are named '%s': %s and %s; remove or rename one "
			                     "(or drop one directory from plugin_dirs / "
			                     "ACCEL_PLUGIN_PATH)", kind_word(kind), name,
			                     first->pub.path, o->pub.path);
	}
	if (first->pub.status == ACCEL_MODULE_UNAVAILABLE)
		return accel_err_set(err, ACCEL_ERR_UNSUPPORTED, "%s", first->pub.reason);
	*ret_module = &first->pub;
	return ACCEL_OK;
}

int accel_loader_find(accel_loader *ld, int kind, const char *name,
                      const accel_module **ret_module, accel_err *err)
{
	if (!ld || !name || !ret_module)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_loader_find: %s is NULL",
		                     !ld ? "loader" : !name ? "name" : "ret_module");
	if (kind != 0 && kind != ACCEL_MODULE_PLUGIN && kind != ACCEL_MODULE_COMM)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_loader_find: kind %d", kind);
	if (!ld->scanned) {
		int r = accel_loader_scan(ld, err);
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
		accel_err_clear(&pe);
		r = find_kind(ld, ACCEL_MODULE_PLUGIN, name, ret_module, kind ? err : &pe);
		if (!kind && r != ACCEL_OK && r != ACCEL_ERR_NOT_FOUND) {
			accel_err ce;
			accel_err_clear(&ce);
			if (find_kind(ld, ACCEL_MODULE_COMM, name, ret_module, &ce) == ACCEL_OK)
				return ACCEL_OK;
			return accel_err_set(err, r, "%s", pe.msg);
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
			return accel_err_set(err, ACCEL_ERR_PLUGIN, "%s '%s' cannot be used: %s", word,
			                     name, o->pub.reason);
	}

	char dirs[1024] = "", avail[512] = "";
	for (uint32_t i = 0; i < ld->n_dirs; i++)
		appendf(dirs, sizeof(dirs), "%s%s (%s%s)", i ? ", " : "", ld->dirs[i].dir,
		        ld->dirs[i].origin, ld->dirs[i].exists ? "" : ", missing");
	const char *best = NULL;
	size_t best_d = (size_t)-1;
	for (uint32_t i = 0; i < ld->n_mods; i++) {
		module_rec *o = ld->mods[i];
		if (!o->pub.name || o->pub.status == ACCEL_MODULE_BROKEN ||
		    o->pub.status == ACCEL_MODULE_SHADOWED || !kind_matches(kind, o->pub.kind))
			continue;
		appendf(avail, sizeof(avail), "%s%s", avail[0] ? ", " : "", o->pub.name);
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
		return accel_err_set(err, ACCEL_ERR_NOT_FOUND,
		                     "no %s named '%s': no plugin directories are configured (set "
		                     "ACCEL_PLUGIN_PATH or plugin_dirs)", word, name);
	return accel_err_set(err, ACCEL_ERR_NOT_FOUND,
	                     "no %s named '%s' in %s (available: %s)%s%s%s", word, name, dirs,
	                     avail[0] ? avail : "none", suggest ? "; did you mean '" : "",
	                     suggest ? best : "", suggest ? "'?" : "");
}
