/* SPDX-License-Identifier: MIT */
/* core/config.c: layered configuration with sources, schemas and checks.
 *
 * Every layer is kept as a list of "documents" (a config file, one
 * environment variable, one --set assignment) exactly as given; nothing is
 * matched against schemas until accel_config_resolve(), because plugin
 * schemas arrive after the loader has read strategy/plugins from the raw
 * layers (accel_config_peek_*).  resolve() walks the documents in layer
 * order, matches each value to a declared key, normalizes it to the key's
 * type and remembers, per key and layer, the value and its source.  The
 * highest layer wins; a key given in one layer under two spellings (an
 * alias) with different values is an error.
 *
 * jansson parses files but keeps no positions, so a small scanner runs over
 * the (already validated) text and records line:column of every key and
 * value by path; sources of file values are "file:line:col" of the value,
 * unknown-key errors point at the key. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "backends/common/launch-env.h"
#include "config.h"
#include "log.h"

extern char **environ;

/* ---- types ------------------------------------------------------------------ */

/* Key types: the ABI's ACCEL_CFG_* plus internal ones for core keys. */
#define T_DBLLIST 100          /* JSON array of numbers (optimizer.params.betas) */

#define F_MIN_EXCL 1u          /* min is exclusive                              */
#define F_MAX_EXCL 2u          /* max is exclusive                              */
#define F_LOGLEVEL 4u          /* enum that also takes what the logger takes     */

/* Layers; the --set layer holds API assignments and then ACCEL_SET's. */
enum { LY_DEFAULT, LY_FILE, LY_ENV, LY_SET, LY_COUNT };

/* Document kinds, in the order resolve() applies them. */
enum { D_FILE, D_ENV, D_SET, D_LAUNCH };

typedef struct posrec {
	char *path;                /* segments joined by PSEP, array elements "[i]" */
	int kline, kcol;           /* the member's key (0 for array elements)       */
	int vline, vcol;           /* its value                                     */
} posrec;

#define PSEP '\x1f'

typedef struct doc {
	int kind;                  /* D_*                                            */
	char *name;                /* D_FILE: path or origin; D_ENV: variable name;
	                              D_SET/D_LAUNCH: the source text              */
	char *prefix;              /* D_SET/D_LAUNCH: the key assigned; else NULL   */
	json_t *root;              /* value (a string holding raw when not JSON)    */
	char *raw;                 /* D_ENV/D_SET/D_LAUNCH: the value text          */
	int raw_json;              /* raw parsed as JSON                            */
	json_t *split;             /* raw split at commas when not JSON, else NULL  */
	posrec *pos;               /* D_FILE only, sorted by path                   */
	size_t npos;
} doc;

/* What one layer says about one key. */
typedef struct setting {
	json_t *val;               /* normalized; json null for an explicit null    */
	char *src;
	const doc *doc;
	int alias;                 /* given under the alias spelling                */
} setting;

typedef struct keydef {
	char *key;                 /* full dotted path                               */
	char *env;                 /* ACCEL_...                                      */
	char *alias;               /* full path of an alias spelling, or NULL        */
	char *alias_env;
	char *choices;             /* ENUM: '|'-separated                            */
	char *help;
	int type;
	unsigned flags;
	double min, max;           /* -inf/+inf when unbounded                       */
	uint32_t list_len;         /* T_DBLLIST: exact length, 0 for any             */
	json_t *def;               /* normalized default or NULL                     */
	int section;               /* index into secs, -1 for core keys              */
	setting set[LY_COUNT];      /* filled by resolve(); [LY_DEFAULT] unused        */
	json_t *val;               /* resolved value (owned ref) or NULL             */
	char *src;                 /* resolved source (owned) or NULL                */
} keydef;

typedef struct cfg_section {
	char *name;
	char *owner;
	int selected;
	int backend;           /* the owner is a comm backend */
} cfg_section;

struct accel_config {
	keydef *keys;
	size_t nkeys, capkeys;
	cfg_section *secs;
	size_t nsecs, capsecs;
	doc **docs;
	size_t ndocs, capdocs;
	int resolved;
	char peek_src[1024];       /* accel_config_source() before resolve()   */
};

/* ---- the core schema ----------------------------------------------------------- */

typedef struct core_param {
	const char *key;
	int type;
	const char *def;           /* JSON, NULL: no default   */
	double min, max;           /* min > max: no range       */
	unsigned flags;
	const char *choices;
	uint32_t list_len;
	const char *alias;
	const char *help;
} core_param;

#define NORANGE 1, 0
#define GE(x) (x), INFINITY

/* Names and defaults follow Accelerate and DeepSpeed; docs/config.md lists
 * every key with its equivalent there.  Keep the two in step. */
static const core_param core_params[] = {
	{"strategy", ACCEL_CFG_STRING, "\"ddp\"", NORANGE, 0, NULL, 0, NULL,
	 "the sharding strategy plugin (ddp, zero, fsdp or a third-party one)"},
	{"plugins", ACCEL_CFG_STRLIST, "[]", NORANGE, 0, NULL, 0, NULL,
	 "hook plugins to load besides the strategy (scaler, fp8, compress, ...)"},
	{"plugin_dirs", ACCEL_CFG_STRLIST, "[]", NORANGE, 0, NULL, 0, NULL,
	 "directories searched for plugins before ACCEL_PLUGIN_PATH and the install directory"},
	{"backend", ACCEL_CFG_STRING, "\"auto\"", NORANGE, 0, NULL, 0, NULL,
	 "communication backend: auto, shm, tcp, mpi, nccl or an installed third-party one; auto: "
	 "nccl for GPU buffers, mpi under an MPI launcher, else shm on one node and tcp across "
	 "nodes"},
	{"mixed_precision", ACCEL_CFG_ENUM, "\"no\"", NORANGE, 0, "no|fp16|bf16|fp8", 0, NULL,
	 "working precision of forward/backward (master weights stay fp32)"},
	{"gradient_accumulation_steps", ACCEL_CFG_INT, "1", 1, 2147483647, 0, NULL, 0, NULL,
	 "micro-batches per optimizer step; gradients are reduced on the last one"},
	{"max_grad_norm", ACCEL_CFG_DOUBLE, NULL, GE(0), 0, NULL, 0, "gradient_clipping",
	 "clip the global gradient L2 norm to this value; unset: no clipping"},
	{"track_grad_norm", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "compute the global gradient norm every step even without clipping or a loss scaler "
	 "(one more pass over the gradients; accel_last_step() reports it)"},
	{"seed", ACCEL_CFG_INT, "42", GE(0), 0, NULL, 0, NULL,
	 "seed of parameter init, sampler shuffling and RNG streams"},
	{"log_level", ACCEL_CFG_ENUM, "\"info\"", NORANGE, F_LOGLEVEL,
	 "error|warn|info|debug|trace", 0, NULL, "logger verbosity"},
	{"metrics_file", ACCEL_CFG_STRING, NULL, NORANGE, 0, NULL, 0, NULL,
	 "file rank 0 appends JSON-lines metrics to; unset: stdout"},
	{"comm.timeout_s", ACCEL_CFG_DOUBLE, "300", 0.001, 1e9, 0, NULL, 0, NULL,
	 "seconds a collective may wait for the other ranks before failing (0.001 to 1e9, "
	 "about 31 years: in effect no limit)"},
	{"comm.keepalive_s", ACCEL_CFG_DOUBLE, "30", 0, 86400, 0, NULL, 0, NULL,
	 "seconds after which a connection to another node that answers nothing (no data, no "
	 "TCP keepalive reply: the node is down or cut off) counts as dead, in the rendezvous "
	 "store and the tcp backend; 0: off (then only comm.timeout_s ends the wait)"},
	{"comm.mpi_store", ACCEL_CFG_BOOL, "true", NORANGE, 0, NULL, 0, NULL,
	 "started by an MPI launcher without ACCEL_MASTER_ADDR/PORT: rank 0 hosts the rendezvous "
	 "store on a free port and sends its address over MPI, so that timeouts name the missing "
	 "ranks; false: run without a store"},
	{"optimizer.type", ACCEL_CFG_ENUM, "\"adamw\"", NORANGE, 0, "adamw|sgd", 0, NULL,
	 "optimizer (torch.optim.AdamW or SGD semantics)"},
	{"optimizer.params.lr", ACCEL_CFG_DOUBLE, "1e-3", GE(0), 0, NULL, 0, NULL,
	 "peak learning rate"},
	{"optimizer.params.betas", T_DBLLIST, "[0.9, 0.999]", 0, 1, F_MAX_EXCL, NULL, 2, NULL,
	 "AdamW coefficients of the running averages of the gradient and its square"},
	{"optimizer.params.eps", ACCEL_CFG_DOUBLE, "1e-8", GE(0), 0, NULL, 0, NULL,
	 "AdamW term added to the denominator"},
	{"optimizer.params.weight_decay", ACCEL_CFG_DOUBLE, "0.01", GE(0), 0, NULL, 0, NULL,
	 "decoupled (AdamW) or L2 (SGD) weight decay; default 0.01, 0 for sgd"},
	{"optimizer.params.momentum", ACCEL_CFG_DOUBLE, "0", GE(0), 0, NULL, 0, NULL,
	 "SGD momentum factor"},
	{"optimizer.params.dampening", ACCEL_CFG_DOUBLE, "0", GE(0), 0, NULL, 0, NULL,
	 "SGD dampening for momentum"},
	{"optimizer.params.nesterov", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "SGD Nesterov momentum"},
	{"optimizer.no_decay", ACCEL_CFG_STRLIST, "[]", NORANGE, 0, NULL, 0, NULL,
	 "parameter-name suffixes put in a group without weight decay (\"bias\", \"norm.weight\")"},
	{"scheduler.type", ACCEL_CFG_ENUM, "\"constant\"", NORANGE, 0, "constant|linear|cosine", 0,
	 NULL, "learning-rate schedule after warmup"},
	{"scheduler.warmup_steps", ACCEL_CFG_INT, "0", GE(0), 0, NULL, 0, NULL,
	 "optimizer steps of linear warmup from 0 to lr"},
	{"scheduler.total_steps", ACCEL_CFG_INT, "0", GE(0), 0, NULL, 0, NULL,
	 "optimizer steps of the whole run (warmup included); required by linear and cosine"},
	{"scheduler.min_lr", ACCEL_CFG_DOUBLE, "0", GE(0), 0, NULL, 0, NULL,
	 "learning rate linear and cosine decay to at total_steps"},
	{"dataloader.split_batches", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "the batch size given is global and split across processes"},
	{"dataloader.even_batches", ACCEL_CFG_BOOL, "true", NORANGE, 0, NULL, 0, NULL,
	 "every process gets the same number of batches (wrapping around the data)"},
	{"dataloader.drop_last", ACCEL_CFG_BOOL, "false", NORANGE, 0, NULL, 0, NULL,
	 "drop the last incomplete batch"},
	{"dataloader.shuffle", ACCEL_CFG_BOOL, "true", NORANGE, 0, NULL, 0, NULL,
	 "shuffle the sample order every epoch (seeded)"},
};

/* ACCEL_* variables that are not configuration. */
static const char *const reserved_env[] = {
	ACCEL_ENV_RANK, ACCEL_ENV_LOCAL_RANK, ACCEL_ENV_WORLD_SIZE, ACCEL_ENV_LOCAL_WORLD_SIZE,
	ACCEL_ENV_NODE_RANK, ACCEL_ENV_NUM_NODES, ACCEL_ENV_MASTER_ADDR, ACCEL_ENV_MASTER_PORT,
	ACCEL_ENV_CONFIG, ACCEL_ENV_PLUGIN_PATH, ACCEL_ENV_LOG_ALL_RANKS, ACCEL_ENV_JOB_ID,
	ACCEL_ENV_SET, ACCEL_ENV_CLI,
};

int accel_config_env_reserved(const char *name)
{
	if (!name)
		return 0;
	if (!strncmp(name, "ACCEL_TEST_", 11))
		return 1;
	for (size_t i = 0; i < sizeof(reserved_env) / sizeof(reserved_env[0]); i++)
		if (!strcmp(name, reserved_env[i]))
			return 1;
	return 0;
}

/* ---- small helpers ------------------------------------------------------------- */

static int nomem(accel_err *err)
{
	return accel_err_set(err, ACCEL_ERR_NOMEM, "out of memory in the configuration");
}

static char *xstrdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static char *strfmt(const char *fmt, ...) ACCEL_PRINTF(1, 2);
static char *strfmt(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap * 2 : 16;
	while (n < need)
		n *= 2;
	void *p = realloc(*arr, n * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = n;
	return 0;
}

/* Shortest "%g" form that reads back as the same double. */
static void fmt_num(double x, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.15g", x);
	if (strtod(buf, NULL) != x)
		snprintf(buf, cap, "%.17g", x);
}

/* A JSON real as text: like fmt_num, but "1.0" rather than "1". */
static void fmt_real(double x, char *buf, size_t cap)
{
	fmt_num(x, buf, cap);
	if (isfinite(x) && !strpbrk(buf, ".eE") && strlen(buf) + 3 <= cap)
		strcat(buf, ".0");
}

static char *env_name(const char *path)
{
	size_t n = strlen(path);
	char *s = malloc(n + 7);
	if (!s)
		return NULL;
	memcpy(s, "ACCEL_", 6);
	for (size_t i = 0; i < n; i++) {
		char c = path[i];
		s[6 + i] = (c == '.' || c == '-') ? '_' : (c >= 'a' && c <= 'z') ? (char)(c - 32) : c;
	}
	s[n + 6] = '\0';
	return s;
}

/* [A-Za-z0-9_-]+ segments joined by '.'. */
static int valid_path(const char *p)
{
	if (!p || !*p)
		return 0;
	int seg = 0;
	for (; *p; p++) {
		char c = *p;
		if (c == '.') {
			if (!seg)
				return 0;
			seg = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		           c == '_' || c == '-') {
			seg++;
		} else {
			return 0;
		}
	}
	return seg > 0;
}

/* 1 when `path` lies inside `group` ("a.b" inside "a"). */
static int path_in(const char *path, const char *group)
{
	size_t n = strlen(group);
	return !strncmp(path, group, n) && path[n] == '.';
}

/* Optimal string alignment distance (Damerau-Levenshtein with adjacent
 * transpositions), case-insensitive; SIZE_MAX for very long strings. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t n = strlen(a), m = strlen(b);
	if (n > 200 || m > 200)
		return SIZE_MAX;
	size_t rows[3][201];
	size_t *pp = rows[0], *p = rows[1], *c = rows[2];
	for (size_t j = 0; j <= m; j++)
		p[j] = j;
	for (size_t i = 1; i <= n; i++) {
		c[0] = i;
		for (size_t j = 1; j <= m; j++) {
			char x = a[i - 1], y = b[j - 1];
			if (x >= 'A' && x <= 'Z')
				x = (char)(x + 32);
			if (y >= 'A' && y <= 'Z')
				y = (char)(y + 32);
			size_t cost = x != y;
			size_t v = p[j] + 1;
			if (c[j - 1] + 1 < v)
				v = c[j - 1] + 1;
			if (p[j - 1] + cost < v)
				v = p[j - 1] + cost;
			if (i > 1 && j > 1) {
				char x1 = a[i - 2], y1 = b[j - 2];
				if (x1 >= 'A' && x1 <= 'Z')
					x1 = (char)(x1 + 32);
				if (y1 >= 'A' && y1 <= 'Z')
					y1 = (char)(y1 + 32);
				if (x == y1 && x1 == y && pp[j - 2] + 1 < v)
					v = pp[j - 2] + 1;
			}
			c[j] = v;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[m];
}

/* How far a suggestion may be from what was typed. */
static size_t max_distance(const char *s)
{
	size_t n = strlen(s);
	return n <= 3 ? 1 : n <= 8 ? 2 : 3;
}

/* A value as it appears in messages: JSON, cut at ~60 characters. */
static void describe(const json_t *v, char *buf, size_t cap)
{
	char num[64];
	if (!v) {
		snprintf(buf, cap, "nothing");
		return;
	}
	switch (json_typeof(v)) {
	case JSON_REAL:
		fmt_real(json_real_value(v), num, sizeof(num));
		snprintf(buf, cap, "%s", num);
		return;
	case JSON_OBJECT:
	case JSON_ARRAY:
	case JSON_STRING: {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
		const char *what = json_is_object(v) ? "an object " : json_is_array(v) ? "a list "
		                                                                       : "string ";
		if (!s) {
			snprintf(buf, cap, "%s", what);
			return;
		}
		if (strlen(s) > 60)
			memcpy(s + 56, " ...", 5);
		snprintf(buf, cap, "%s%s", what, s);
		free(s);
		return;
	}
	default: {
		char *s = json_dumps(v, JSON_ENCODE_ANY);
		snprintf(buf, cap, "%s", s ? s : "?");
		free(s);
		return;
	}
	}
}

/* A value for dumps: JSON with shortest round-trip numbers. */
static void fput_value(FILE *out, const json_t *v)
{
	char num[64];
	if (!v) {
		fputs("null", out);
	} else if (json_is_real(v)) {
		fmt_real(json_real_value(v), num, sizeof(num));
		fputs(num, out);
	} else if (json_is_array(v)) {
		size_t i;
		json_t *e;
		fputc('[', out);
		json_array_foreach(v, i, e) {
			if (i)
				fputs(", ", out);
			fput_value(out, e);
		}
		fputc(']', out);
	} else {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		fputs(s ? s : "null", out);
		free(s);
	}
}

static char *value_string(const json_t *v)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	if (!f)
		return NULL;
	fput_value(f, v);
	if (fclose(f)) {
		free(s);
		return NULL;
	}
	return s;
}

/* ---- the position scanner ---------------------------------------------------------
 * Runs over text jansson has accepted, so it only needs to be robust, not
 * strict: on anything unexpected it stops and positions are simply missing. */

typedef struct scanner {
	const char *p, *end;
	int line, col;
	posrec *recs;
	size_t n, cap;
	char *path;
	size_t plen, pcap;
	char *key;
	size_t klen, kcap;
	int bad;                   /* stop: malformed or out of memory */
} scanner;

static void sc_adv(scanner *s)
{
	unsigned char c = (unsigned char)*s->p++;
	if (c == '\n') {
		s->line++;
		s->col = 1;
	} else if ((c & 0xC0) != 0x80) {
		/* columns count characters, as jansson's do */
		s->col++;
	}
}

static void sc_ws(scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		sc_adv(s);
}

static void sc_keych(scanner *s, char c)
{
	if (grow((void **)&s->key, &s->kcap, s->klen + 2, 1)) {
		s->bad = 1;
		return;
	}
	s->key[s->klen++] = c;
	s->key[s->klen] = '\0';
}

static void sc_utf8(scanner *s, unsigned long cp)
{
	if (cp < 0x80) {
		sc_keych(s, (char)cp);
	} else if (cp < 0x800) {
		sc_keych(s, (char)(0xC0 | (cp >> 6)));
		sc_keych(s, (char)(0x80 | (cp & 0x3F)));
	} else if (cp < 0x10000) {
		sc_keych(s, (char)(0xE0 | (cp >> 12)));
		sc_keych(s, (char)(0x80 | ((cp >> 6) & 0x3F)));
		sc_keych(s, (char)(0x80 | (cp & 0x3F)));
	} else {
		sc_keych(s, (char)(0xF0 | (cp >> 18)));
		sc_keych(s, (char)(0x80 | ((cp >> 12) & 0x3F)));
		sc_keych(s, (char)(0x80 | ((cp >> 6) & 0x3F)));
		sc_keych(s, (char)(0x80 | (cp & 0x3F)));
	}
}

static unsigned long sc_hex4(scanner *s)
{
	unsigned long v = 0;
	for (int i = 0; i < 4; i++) {
		if (s->p >= s->end) {
			s->bad = 1;
			return 0;
		}
		char c = *s->p;
		int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
		        : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
		if (d < 0) {
			s->bad = 1;
			return 0;
		}
		v = v * 16 + (unsigned long)d;
		sc_adv(s);
	}
	return v;
}

/* A string at s->p; decoded into s->key when `decode`. */
static void sc_string(scanner *s, int decode)
{
	s->klen = 0;
	if (decode) {
		sc_keych(s, '\0');   /* s->key is never NULL, also for "" */
		s->klen = 0;
	}
	sc_adv(s); /* opening quote */
	while (!s->bad) {
		if (s->p >= s->end) {
			s->bad = 1;
			return;
		}
		char c = *s->p;
		if (c == '"') {
			sc_adv(s);
			return;
		}
		if (c != '\\') {
			if (decode)
				sc_keych(s, c);
			sc_adv(s);
			continue;
		}
		sc_adv(s);
		if (s->p >= s->end) {
			s->bad = 1;
			return;
		}
		char e = *s->p;
		sc_adv(s);
		if (!decode) {
			if (e == 'u')
				sc_hex4(s);
			continue;
		}
		switch (e) {
		case 'b': sc_keych(s, '\b'); break;
		case 'f': sc_keych(s, '\f'); break;
		case 'n': sc_keych(s, '\n'); break;
		case 'r': sc_keych(s, '\r'); break;
		case 't': sc_keych(s, '\t'); break;
		case 'u': {
			unsigned long cp = sc_hex4(s);
			if (cp >= 0xD800 && cp < 0xDC00 && s->end - s->p >= 6 && s->p[0] == '\\' &&
			    s->p[1] == 'u') {
				sc_adv(s);
				sc_adv(s);
				unsigned long lo = sc_hex4(s);
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			sc_utf8(s, cp);
			break;
		}
		default: sc_keych(s, e); break;
		}
	}
}

static size_t sc_push(scanner *s, const char *seg, size_t n)
{
	size_t old = s->plen;
	if (grow((void **)&s->path, &s->pcap, s->plen + n + 2, 1)) {
		s->bad = 1;
		return old;
	}
	if (s->plen)
		s->path[s->plen++] = PSEP;
	memcpy(s->path + s->plen, seg, n);
	s->plen += n;
	s->path[s->plen] = '\0';
	return old;
}

static void sc_pop(scanner *s, size_t old)
{
	s->plen = old;
	if (s->path)
		s->path[old] = '\0';
}

static void sc_record(scanner *s, int kl, int kc)
{
	if (s->bad)
		return;
	if (grow((void **)&s->recs, &s->cap, s->n + 1, sizeof(*s->recs))) {
		s->bad = 1;
		return;
	}
	posrec *r = &s->recs[s->n];
	r->path = strdup(s->path);
	if (!r->path) {
		s->bad = 1;
		return;
	}
	r->kline = kl;
	r->kcol = kc;
	r->vline = s->line;
	r->vcol = s->col;
	s->n++;
}

static void sc_value(scanner *s, int depth)
{
	sc_ws(s);
	if (s->bad || s->p >= s->end || depth > 4096) {
		s->bad = 1;
		return;
	}
	char c = *s->p;
	if (c == '{') {
		sc_adv(s);
		sc_ws(s);
		if (s->p < s->end && *s->p == '}') {
			sc_adv(s);
			return;
		}
		while (!s->bad) {
			sc_ws(s);
			if (s->p >= s->end || *s->p != '"') {
				s->bad = 1;
				return;
			}
			int kl = s->line, kc = s->col;
			sc_string(s, 1);
			sc_ws(s);
			if (s->bad || s->p >= s->end || *s->p != ':') {
				s->bad = 1;
				return;
			}
			sc_adv(s);
			sc_ws(s);
			size_t old = sc_push(s, s->key ? s->key : "", s->klen);
			sc_record(s, kl, kc);
			sc_value(s, depth + 1);
			sc_pop(s, old);
			sc_ws(s);
			if (s->p < s->end && *s->p == ',') {
				sc_adv(s);
				continue;
			}
			if (s->p < s->end && *s->p == '}') {
				sc_adv(s);
				return;
			}
			s->bad = 1;
		}
	} else if (c == '[') {
		sc_adv(s);
		sc_ws(s);
		if (s->p < s->end && *s->p == ']') {
			sc_adv(s);
			return;
		}
		for (size_t i = 0; !s->bad; i++) {
			char seg[32];
			sc_ws(s);
			int n = snprintf(seg, sizeof(seg), "[%zu]", i);
			size_t old = sc_push(s, seg, (size_t)n);
			sc_record(s, 0, 0);
			sc_value(s, depth + 1);
			sc_pop(s, old);
			sc_ws(s);
			if (s->p < s->end && *s->p == ',') {
				sc_adv(s);
				continue;
			}
			if (s->p < s->end && *s->p == ']') {
				sc_adv(s);
				return;
			}
			s->bad = 1;
		}
	} else if (c == '"') {
		sc_string(s, 0);
	} else {
		while (s->p < s->end && !strchr(",]} \t\r\n", *s->p))
			sc_adv(s);
	}
}

static int posrec_cmp(const void *a, const void *b)
{
	return strcmp(((const posrec *)a)->path, ((const posrec *)b)->path);
}

static void scan_positions(doc *d, const char *text, size_t len)
{
	scanner s = {.p = text, .end = text + len, .line = 1, .col = 1};
	if (sc_push(&s, "", 0), s.bad)
		goto done;
	sc_value(&s, 0);
	if (s.bad)
		accel_log(ACCEL_LOG_DEBUG, "config %s: position scan stopped early at %d:%d",
		          d->name, s.line, s.col);
	if (s.n)
		qsort(s.recs, s.n, sizeof(*s.recs), posrec_cmp);
	d->pos = s.recs;
	d->npos = s.n;
	s.recs = NULL;
	s.n = 0;
done:
	for (size_t i = 0; i < s.n; i++)
		free(s.recs[i].path);
	free(s.recs);
	free(s.path);
	free(s.key);
}

static const posrec *pos_find(const doc *d, const char *ppath)
{
	if (!d || !d->pos || !ppath)
		return NULL;
	posrec key = {.path = (char *)ppath};
	return bsearch(&key, d->pos, d->npos, sizeof(*d->pos), posrec_cmp);
}

/* Source text of a value (or of its key) inside document d. */
static void doc_source(const doc *d, const char *ppath, int at_key, char *buf, size_t cap)
{
	if (d->kind == D_FILE) {
		const posrec *r = pos_find(d, ppath);
		if (r && at_key && r->kline)
			snprintf(buf, cap, "%s:%d:%d", d->name, r->kline, r->kcol);
		else if (r)
			snprintf(buf, cap, "%s:%d:%d", d->name, r->vline, r->vcol);
		else
			snprintf(buf, cap, "%s", d->name);
	} else if (d->kind == D_ENV) {
		snprintf(buf, cap, "env %s", d->name);
	} else {
		snprintf(buf, cap, "%s", d->name);
	}
}

/* ---- documents ------------------------------------------------------------------- */

static doc *doc_free(doc *d)
{
	if (!d)
		return NULL;
	free(d->name);
	free(d->prefix);
	free(d->raw);
	json_decref(d->root);
	json_decref(d->split);
	for (size_t i = 0; i < d->npos; i++)
		free(d->pos[i].path);
	free(d->pos);
	free(d);
	return NULL;
}

static int add_doc(accel_config *cfg, doc *d, accel_err *err)
{
	if (grow((void **)&cfg->docs, &cfg->capdocs, cfg->ndocs + 1, sizeof(*cfg->docs))) {
		doc_free(d);
		return nomem(err);
	}
	cfg->docs[cfg->ndocs++] = d;
	cfg->resolved = 0;
	return ACCEL_OK;
}

/* A value from the environment or the command line: JSON if it parses,
 * else the text itself (and, for string lists, the text split at commas).
 * Text that starts like a JSON list, object or string but does not parse is
 * an error: splitting '["a"' at commas would only hide the typo. */
static int value_doc(int kind, const char *name, const char *prefix, const char *raw,
                     doc **ret, accel_err *err)
{
	doc *d = calloc(1, sizeof(*d));
	if (!d)
		return nomem(err);
	d->kind = kind;
	d->name = xstrdup(name);
	d->prefix = xstrdup(prefix);
	d->raw = xstrdup(raw);
	if (!d->name || (prefix && !d->prefix) || !d->raw)
		goto oom;
	json_error_t je;
	d->root = json_loads(raw, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	if (d->root) {
		d->raw_json = 1;
		*ret = d;
		return ACCEL_OK;
	}
	const char *first = raw + strspn(raw, " \t\r\n");
	if (strstr(je.text, "duplicate object key")) {
		int r = accel_err_set(err, ACCEL_ERR_CONFIG, "%s%s: column %d: %s",
		                      kind == D_ENV ? "env " : "", name, je.column, je.text);
		doc_free(d);
		return r;
	}
	if (*first == '[' || *first == '{' || *first == '"') {
		int r = accel_err_set(err, ACCEL_ERR_CONFIG,
		                      "%s%s: the value looks like JSON but is not valid JSON (column "
		                      "%d: %s); quote it for the shell, or write plain text without "
		                      "a leading %c", kind == D_ENV ? "env " : "", name, je.column,
		                      je.text, *first);
		doc_free(d);
		return r;
	}
	d->root = json_string(raw);
	if (!d->root) {
		json_t *raw_bytes = json_string_nocheck(raw);
		if (raw_bytes) {   /* it was not the memory */
			json_decref(raw_bytes);
			int r = accel_err_set(err, ACCEL_ERR_CONFIG,
			                      "%s%s: the value is not valid UTF-8 text (settings are "
			                      "JSON strings)", kind == D_ENV ? "env " : "", name);
			doc_free(d);
			return r;
		}
	}
	d->split = json_array();
	if (!d->root || !d->split)
		goto oom;
	const char *p = raw;
	while (*p) {
		const char *q = strchr(p, ',');
		size_t n = q ? (size_t)(q - p) : strlen(p);
		while (n && (*p == ' ' || *p == '\t'))
			p++, n--;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n && json_array_append_new(d->split, json_stringn(p, n)))
			goto oom;
		if (!q)
			break;
		p = q + 1;
	}
	*ret = d;
	return ACCEL_OK;
oom:
	doc_free(d);
	return nomem(err);
}

/* ---- keys and sections --------------------------------------------------------------- */

static void setting_clear(setting *s)
{
	json_decref(s->val);
	free(s->src);
	memset(s, 0, sizeof(*s));
}

static void keydef_clear(keydef *k)
{
	free(k->key);
	free(k->env);
	free(k->alias);
	free(k->alias_env);
	free(k->choices);
	free(k->help);
	json_decref(k->def);
	json_decref(k->val);
	free(k->src);
	for (int l = 0; l < LY_COUNT; l++)
		setting_clear(&k->set[l]);
	memset(k, 0, sizeof(*k));
}

static int key_active(const accel_config *cfg, const keydef *k)
{
	return k->section < 0 || cfg->secs[k->section].selected;
}

/* Index of the key spelled `path` (canonical or alias), or -1. */
static long find_key(const accel_config *cfg, const char *path, int *ret_alias)
{
	for (size_t i = 0; i < cfg->nkeys; i++) {
		if (!strcmp(cfg->keys[i].key, path)) {
			if (ret_alias)
				*ret_alias = 0;
			return (long)i;
		}
		if (cfg->keys[i].alias && !strcmp(cfg->keys[i].alias, path)) {
			if (ret_alias)
				*ret_alias = 1;
			return (long)i;
		}
	}
	return -1;
}

static long find_env(const accel_config *cfg, const char *name, int *ret_alias)
{
	for (size_t i = 0; i < cfg->nkeys; i++) {
		if (!strcmp(cfg->keys[i].env, name)) {
			*ret_alias = 0;
			return (long)i;
		}
		if (cfg->keys[i].alias_env && !strcmp(cfg->keys[i].alias_env, name)) {
			*ret_alias = 1;
			return (long)i;
		}
	}
	return -1;
}

/* 1 when some key lies inside `path` (it names a group of keys). */
static int is_group(const accel_config *cfg, const char *path)
{
	if (!*path)
		return 1;
	for (size_t i = 0; i < cfg->nkeys; i++)
		if (path_in(cfg->keys[i].key, path) ||
		    (cfg->keys[i].alias && path_in(cfg->keys[i].alias, path)))
			return 1;
	return 0;
}

/* The section `path` is in (or is), or -1. */
static long find_section(const accel_config *cfg, const char *path)
{
	for (size_t i = 0; i < cfg->nsecs; i++)
		if (!strcmp(cfg->secs[i].name, path) || path_in(path, cfg->secs[i].name))
			return (long)i;
	return -1;
}

/* The closest known key or group to `path`, or NULL. */
static const char *suggest_key(const accel_config *cfg, const char *path, char *buf, size_t cap)
{
	size_t best = SIZE_MAX, lim = max_distance(path);
	const char *last = strrchr(path, '.');
	last = last ? last + 1 : path;
	buf[0] = '\0';
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const char *names[2] = {cfg->keys[i].key, cfg->keys[i].alias};
		for (int a = 0; a < 2; a++) {
			const char *k = names[a];
			if (!k)
				continue;
			/* the key itself and every group above it */
			size_t klen = strlen(k);
			for (size_t end = 1; end <= klen; end++) {
				if (end < klen && k[end] != '.')
					continue;
				char cand[256];
				if (end >= sizeof(cand))
					continue;
				memcpy(cand, k, end);
				cand[end] = '\0';
				size_t d = edit_distance(path, cand);
				if (d <= lim && d < best) {
					best = d;
					snprintf(buf, cap, "%s", cand);
				}
			}
			/* the right key at the wrong level ("bucket_cap_mb" at the root) */
			const char *kl = strrchr(k, '.');
			if (best == SIZE_MAX && kl && !strcmp(kl + 1, last) && strcmp(k, path)) {
				best = lim + 1;
				snprintf(buf, cap, "%s", k);
			}
		}
	}
	return buf[0] ? buf : NULL;
}

/* "lr, betas, eps" — the names directly inside group `parent`. */
static void list_children(const accel_config *cfg, const char *parent, char *buf, size_t cap)
{
	size_t used = 0, plen = strlen(parent), count = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const char *k = cfg->keys[i].key;
		if (!path_in(k, parent))
			continue;
		const char *seg = k + plen + 1;
		size_t n = strcspn(seg, ".");
		/* skip names already listed */
		int dup = 0;
		for (size_t j = 0; j < i && !dup; j++) {
			const char *o = cfg->keys[j].key;
			dup = path_in(o, parent) && !strncmp(o + plen + 1, seg, n) &&
			      (o[plen + 1 + n] == '.' || o[plen + 1 + n] == '\0');
		}
		if (dup)
			continue;
		if (++count > 12) {
			if (used + 6 < cap)
				used += (size_t)snprintf(buf + used, cap - used, ", ...");
			return;
		}
		if (used + n + 3 >= cap)
			return;
		used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", used ? ", " : "", (int)n, seg);
	}
}

/* ---- values -------------------------------------------------------------------------- */

static int has_range(const keydef *k)
{
	return k->min <= k->max && (isfinite(k->min) || isfinite(k->max));
}

static int in_range(const keydef *k, double x)
{
	if (!has_range(k))
		return 1;
	if ((k->flags & F_MIN_EXCL) ? !(x > k->min) : !(x >= k->min))
		return 0;
	if ((k->flags & F_MAX_EXCL) ? !(x < k->max) : !(x <= k->max))
		return 0;
	return 1;
}

static void range_text(const keydef *k, char *buf, size_t cap)
{
	char lo[64], hi[64];
	buf[0] = '\0';
	if (!has_range(k))
		return;
	fmt_num(k->min, lo, sizeof(lo));
	fmt_num(k->max, hi, sizeof(hi));
	if (isfinite(k->min) && isfinite(k->max))
		snprintf(buf, cap, " in %c%s, %s%c", (k->flags & F_MIN_EXCL) ? '(' : '[', lo, hi,
		         (k->flags & F_MAX_EXCL) ? ')' : ']');
	else if (isfinite(k->min))
		snprintf(buf, cap, " %s %s", (k->flags & F_MIN_EXCL) ? ">" : ">=", lo);
	else
		snprintf(buf, cap, " %s %s", (k->flags & F_MAX_EXCL) ? "<" : "<=", hi);
}

static void expected_text(const keydef *k, char *buf, size_t cap)
{
	char r[160];
	range_text(k, r, sizeof(r));
	switch (k->type) {
	case ACCEL_CFG_BOOL: snprintf(buf, cap, "true or false"); break;
	case ACCEL_CFG_INT: snprintf(buf, cap, "an integer%s", r); break;
	case ACCEL_CFG_DOUBLE: snprintf(buf, cap, "a number%s", r); break;
	case ACCEL_CFG_STRING: snprintf(buf, cap, "a string"); break;
	case ACCEL_CFG_ENUM: snprintf(buf, cap, "one of %s", k->choices); break;
	case ACCEL_CFG_STRLIST: snprintf(buf, cap, "a list of strings"); break;
	case T_DBLLIST:
		if (k->list_len)
			snprintf(buf, cap, "a list of %u numbers%s", k->list_len, r);
		else
			snprintf(buf, cap, "a list of numbers%s", r);
		break;
	default: snprintf(buf, cap, "?"); break;
	}
}

static int choice_ok(const char *choices, const char *s)
{
	size_t n = strlen(s);
	for (const char *p = choices; p && *p;) {
		const char *q = strchr(p, '|');
		size_t m = q ? (size_t)(q - p) : strlen(p);
		if (m == n && !strncmp(p, s, n))
			return 1;
		p = q ? q + 1 : NULL;
	}
	return 0;
}

static const char *suggest_choice(const char *choices, const char *s, char *buf, size_t cap)
{
	size_t best = SIZE_MAX, lim = max_distance(s);
	buf[0] = '\0';
	for (const char *p = choices; p && *p;) {
		const char *q = strchr(p, '|');
		size_t m = q ? (size_t)(q - p) : strlen(p);
		char c[128];
		if (m < sizeof(c)) {
			memcpy(c, p, m);
			c[m] = '\0';
			size_t d = edit_distance(s, c);
			if (d <= lim && d < best) {
				best = d;
				snprintf(buf, cap, "%s", c);
			}
		}
		p = q ? q + 1 : NULL;
	}
	return buf[0] ? buf : NULL;
}

/* Where a value or element came from, for messages. */
typedef struct vsrc {
	const doc *d;              /* NULL for schema defaults                 */
	const char *ppath;         /* position path inside d (files)            */
	const char *text;          /* the value's source                        */
} vsrc;

static void element_source(const vsrc *vs, size_t i, char *buf, size_t cap)
{
	if (vs->d && vs->d->kind == D_FILE && vs->ppath) {
		char pp[1024];
		snprintf(pp, sizeof(pp), "%s%c[%zu]", vs->ppath, PSEP, i);
		doc_source(vs->d, pp, 0, buf, cap);
	} else {
		snprintf(buf, cap, "%s", vs->text);
	}
}

static int bad_value(const keydef *k, const char *shown_key, const vsrc *vs, const json_t *v,
                     const char *extra, accel_err *err)
{
	char exp[256], got[128];
	expected_text(k, exp, sizeof(exp));
	describe(v, got, sizeof(got));
	return accel_err_set(err, ACCEL_ERR_CONFIG, "invalid value for '%s' at %s: expected %s, got %s%s",
	                     shown_key, vs->text, exp, got, extra ? extra : "");
}

/* Check `v` against k's type and range; *ret is a new reference to the
 * normalized value (json null stays null: "back to the default"). */
static int normalize(const keydef *k, const char *shown_key, json_t *v, const vsrc *vs,
                     json_t **ret, accel_err *err)
{
	const doc *d = vs->d;
	/* env or --set value as typed: its raw text is available */
	int textual = d && d->kind != D_FILE && v == d->root;
	json_t *out = NULL;

	if (json_is_null(v)) {
		*ret = json_incref(v);
		return ACCEL_OK;
	}
	switch (k->type) {
	case ACCEL_CFG_BOOL:
		if (!json_is_boolean(v))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_incref(v);
		break;
	case ACCEL_CFG_INT: {
		json_int_t x;
		if (json_is_integer(v)) {
			x = json_integer_value(v);
		} else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
		           fabs(json_real_value(v)) < 9.2e18) {
			x = (json_int_t)json_real_value(v);
		} else {
			return bad_value(k, shown_key, vs, v, NULL, err);
		}
		if (!in_range(k, (double)x))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_integer(x);
		break;
	}
	case ACCEL_CFG_DOUBLE:
		if (!json_is_number(v) || !in_range(k, json_number_value(v)))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_real(json_number_value(v));
		break;
	case ACCEL_CFG_STRING:
		if (json_is_string(v))
			out = json_incref(v);
		else if (textual && !json_is_array(v) && !json_is_object(v))
			out = json_string(d->raw);
		else
			return bad_value(k, shown_key, vs, v, NULL, err);
		break;
	case ACCEL_CFG_ENUM: {
		const char *s = NULL;
		char lvl[16];
		if (json_is_string(v))
			s = json_string_value(v);
		else if (textual && !json_is_array(v) && !json_is_object(v))
			s = d->raw;
		if ((k->flags & F_LOGLEVEL) && json_is_integer(v)) {
			snprintf(lvl, sizeof(lvl), "%lld", (long long)json_integer_value(v));
			s = lvl;
		}
		if (s && (k->flags & F_LOGLEVEL)) {
			static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
			int l = accel_log_level_parse(s);
			if (l >= 0)
				s = names[l];
		}
		if (!s)
			return bad_value(k, shown_key, vs, v, NULL, err);
		if (!choice_ok(k->choices, s)) {
			char sug[128], extra[160] = "";
			json_t *sv = json_string(s);
			if (suggest_choice(k->choices, s, sug, sizeof(sug)))
				snprintf(extra, sizeof(extra), "; did you mean '%s'?", sug);
			int r = bad_value(k, shown_key, vs, sv ? sv : v, extra, err);
			json_decref(sv);
			return r;
		}
		out = json_string(s);
		break;
	}
	case ACCEL_CFG_STRLIST: {
		size_t i;
		json_t *e;
		if (textual && !d->raw_json && json_is_string(v) && d->split) {
			out = json_incref(d->split);
			break;
		}
		if (!json_is_array(v))
			return bad_value(k, shown_key, vs, v, NULL, err);
		json_array_foreach(v, i, e) {
			if (!json_is_string(e)) {
				char src[512], got[128];
				element_source(vs, i, src, sizeof(src));
				describe(e, got, sizeof(got));
				return accel_err_set(err, ACCEL_ERR_CONFIG,
				                     "invalid value for '%s' at %s: element %zu must be a "
				                     "string, got %s", shown_key, src, i, got);
			}
		}
		out = json_incref(v);
		break;
	}
	case T_DBLLIST: {
		size_t i;
		json_t *e;
		if (!json_is_array(v) || (k->list_len && json_array_size(v) != k->list_len))
			return bad_value(k, shown_key, vs, v, NULL, err);
		out = json_array();
		if (!out)
			return nomem(err);
		json_array_foreach(v, i, e) {
			if (!json_is_number(e) || !in_range(k, json_number_value(e))) {
				char src[512], got[128], exp[256];
				element_source(vs, i, src, sizeof(src));
				describe(e, got, sizeof(got));
				expected_text(k, exp, sizeof(exp));
				json_decref(out);
				return accel_err_set(err, ACCEL_ERR_CONFIG,
				                     "invalid value for '%s' at %s: element %zu is %s; "
				                     "expected %s", shown_key, src, i, got, exp);
			}
			if (json_array_append_new(out, json_real(json_number_value(e)))) {
				json_decref(out);
				return nomem(err);
			}
		}
		break;
	}
	default:
		return accel_err_set(err, ACCEL_ERR_INTERNAL, "config key '%s' has type %d",
		                     k->key, k->type);
	}
	if (!out)
		return nomem(err);
	*ret = out;
	return ACCEL_OK;
}

/* ---- declaring keys -------------------------------------------------------------------- */

/* Checks a new key against the keys already declared: same path, a path
 * that would be both a value and a group, or the same environment name. */
static int key_conflict(const accel_config *cfg, const keydef *nk, const char *what,
                        accel_err *err)
{
	const char *names[2] = {nk->key, nk->alias};
	const char *envs[2] = {nk->env, nk->alias_env};
	for (int a = 0; a < 2; a++) {
		if (!names[a])
			continue;
		if (accel_config_env_reserved(envs[a]))
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s declares key '%s', whose environment name %s is reserved",
			                     what, names[a], envs[a]);
		for (size_t i = 0; i < cfg->nkeys; i++) {
			const keydef *k = &cfg->keys[i];
			const char *owner = k->section < 0 ? "the core" : cfg->secs[k->section].owner;
			const char *kn[2] = {k->key, k->alias};
			const char *ke[2] = {k->env, k->alias_env};
			for (int b = 0; b < 2; b++) {
				if (!kn[b])
					continue;
				if (!strcmp(kn[b], names[a]))
					return accel_err_set(err, ACCEL_ERR_PLUGIN,
					                     "%s declares key '%s', already declared by %s",
					                     what, names[a], owner);
				if (path_in(kn[b], names[a]) || path_in(names[a], kn[b]))
					return accel_err_set(err, ACCEL_ERR_PLUGIN,
					                     "%s declares key '%s', which clashes with '%s' of "
					                     "%s (a key cannot also be a group of keys)",
					                     what, names[a], kn[b], owner);
				if (!strcmp(ke[b], envs[a]))
					return accel_err_set(err, ACCEL_ERR_PLUGIN,
					                     "%s declares key '%s' whose environment name %s is "
					                     "also the one of '%s' (%s); rename one of them",
					                     what, names[a], envs[a], kn[b], owner);
			}
		}
	}
	return ACCEL_OK;
}

/* Fill `k` (zeroed) from a schema entry; `full` is the full path. */
static int keydef_init(keydef *k, const char *full, int type, const char *def_json, double min,
                       double max, unsigned flags, const char *choices, uint32_t list_len,
                       const char *alias, const char *help, int section, const char *what,
                       accel_err *err)
{
	int r;
	k->section = section;
	k->type = type;
	k->flags = flags;
	k->list_len = list_len;
	if (min > max) {
		k->min = -INFINITY;
		k->max = INFINITY;
	} else {
		k->min = min;
		k->max = max;
	}
	k->key = xstrdup(full);
	k->env = env_name(full);
	k->choices = xstrdup(choices);
	k->help = xstrdup(help ? help : "");
	if (!k->key || !k->env || (choices && !k->choices) || !k->help)
		return nomem(err);
	if (alias) {
		k->alias = xstrdup(alias);
		k->alias_env = env_name(alias);
		if (!k->alias || !k->alias_env)
			return nomem(err);
	}
	if (type == ACCEL_CFG_ENUM) {
		if (!choices || !*choices || strstr(choices, "||") || choices[0] == '|' ||
		    choices[strlen(choices) - 1] == '|')
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s declares enum key '%s' with bad choices '%s' "
			                     "(expected 'a|b|c')", what, full, choices ? choices : "(null)");
	}
	if (def_json) {
		json_error_t je;
		json_t *v = json_loads(def_json, JSON_DECODE_ANY, &je);
		if (!v)
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s declares key '%s' with a default that is not JSON "
			                     "('%s': %s)", what, full, def_json, je.text);
		accel_err e2;
		accel_err_clear(&e2);
		vsrc vs = {.text = "its declaration"};
		if (json_is_null(v)) {
			json_decref(v);
		} else {
			r = normalize(k, full, v, &vs, &k->def, &e2);
			json_decref(v);
			if (r)
				return accel_err_set(err, r == ACCEL_ERR_NOMEM ? r : ACCEL_ERR_PLUGIN,
				                     "%s: bad default: %s", what, e2.msg);
		}
	}
	return ACCEL_OK;
}

static int add_core_schema(accel_config *cfg, accel_err *err)
{
	size_t n = sizeof(core_params) / sizeof(core_params[0]);
	if (grow((void **)&cfg->keys, &cfg->capkeys, n, sizeof(*cfg->keys)))
		return nomem(err);
	for (size_t i = 0; i < n; i++) {
		const core_param *p = &core_params[i];
		keydef k;
		memset(&k, 0, sizeof(k));
		int r = keydef_init(&k, p->key, p->type, p->def, p->min, p->max, p->flags, p->choices,
		                    p->list_len, p->alias, p->help, -1, "the core schema", err);
		if (!r)
			r = key_conflict(cfg, &k, "the core schema", err);
		if (r) {
			keydef_clear(&k);
			return r == ACCEL_ERR_NOMEM ? r : ACCEL_ERR_INTERNAL;
		}
		cfg->keys[cfg->nkeys++] = k;
	}
	return ACCEL_OK;
}

int accel_config_new(accel_config **ret_cfg, accel_err *err)
{
	if (!ret_cfg)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_new: ret_cfg is NULL");
	accel_config *cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return nomem(err);
	int r = add_core_schema(cfg, err);
	if (r)
		goto fail;
	*ret_cfg = cfg;
	return ACCEL_OK;
fail:
	accel_config_free(cfg);
	return r;
}

accel_config *accel_config_free(accel_config *cfg)
{
	if (!cfg)
		return NULL;
	for (size_t i = 0; i < cfg->nkeys; i++)
		keydef_clear(&cfg->keys[i]);
	free(cfg->keys);
	for (size_t i = 0; i < cfg->nsecs; i++) {
		free(cfg->secs[i].name);
		free(cfg->secs[i].owner);
	}
	free(cfg->secs);
	for (size_t i = 0; i < cfg->ndocs; i++)
		doc_free(cfg->docs[i]);
	free(cfg->docs);
	free(cfg);
	return NULL;
}

int accel_config_add_schema(accel_config *cfg, const char *section, const char *owner,
                            const accel_param_schema_v1 *params, uint32_t n_params,
                            unsigned flags, accel_err *err)
{
	char what[256];
	size_t added = 0, stride = sizeof(accel_param_schema_v1);
	int r = ACCEL_OK;

	if (!cfg || !section)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_add_schema: NULL argument");
	if (!owner)
		owner = section;
	snprintf(what, sizeof(what), "plugin '%s' (section '%s')", owner, section);
	if (!valid_path(section))
		return accel_err_set(err, ACCEL_ERR_PLUGIN,
		                     "plugin '%s' declares config_section '%s'; a section is made of "
		                     "[A-Za-z0-9_-] names joined by '.'", owner, section);
	if (n_params && !params)
		return accel_err_set(err, ACCEL_ERR_PLUGIN, "%s: %u params but no array", what, n_params);
	for (size_t i = 0; i < cfg->nsecs; i++)
		if (!strcmp(cfg->secs[i].name, section) || path_in(section, cfg->secs[i].name) ||
		    path_in(cfg->secs[i].name, section))
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "plugin '%s' declares config section '%s', which overlaps "
			                     "section '%s' of plugin '%s'", owner, section,
			                     cfg->secs[i].name, cfg->secs[i].owner);
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const keydef *k = &cfg->keys[i];
		if (k->section < 0 && (!strcmp(k->key, section) || path_in(k->key, section) ||
		                       path_in(section, k->key)))
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "plugin '%s' declares config section '%s', which overlaps "
			                     "the core key '%s'", owner, section, k->key);
	}
	if (n_params) {
		if (params[0].struct_size < sizeof(accel_param_schema_v1))
			return accel_err_set(err, ACCEL_ERR_PLUGIN,
			                     "%s: parameter schema struct_size %u is smaller than %zu; "
			                     "rebuild the plugin against current headers", what,
			                     params[0].struct_size, sizeof(accel_param_schema_v1));
		/* a newer plugin's entries are bigger: step by its size */
		stride = params[0].struct_size;
	}
	if (grow((void **)&cfg->secs, &cfg->capsecs, cfg->nsecs + 1, sizeof(*cfg->secs)) ||
	    grow((void **)&cfg->keys, &cfg->capkeys, cfg->nkeys + n_params, sizeof(*cfg->keys)))
		return nomem(err);
	cfg_section *sec = &cfg->secs[cfg->nsecs];
	sec->name = xstrdup(section);
	sec->owner = xstrdup(owner);
	sec->selected = (flags & ACCEL_SCHEMA_SELECTED) != 0;
	sec->backend = (flags & ACCEL_SCHEMA_BACKEND) != 0;
	if (!sec->name || !sec->owner) {
		r = nomem(err);
		goto fail;
	}
	for (uint32_t i = 0; i < n_params; i++) {
		const accel_param_schema_v1 *p =
			(const accel_param_schema_v1 *)(const void *)((const char *)params + i * stride);
		keydef k;
		memset(&k, 0, sizeof(k));
		if (p->struct_size != stride) {
			r = accel_err_set(err, ACCEL_ERR_PLUGIN, "%s: parameter %u has struct_size %u, "
			                  "parameter 0 has %zu", what, i, p->struct_size, stride);
			goto fail;
		}
		if (!valid_path(p->key)) {
			r = accel_err_set(err, ACCEL_ERR_PLUGIN,
			                  "%s: parameter %u has key '%s'; keys are [A-Za-z0-9_-] names "
			                  "joined by '.'", what, i, p->key ? p->key : "(null)");
			goto fail;
		}
		if (p->type < ACCEL_CFG_BOOL || p->type > ACCEL_CFG_STRLIST) {
			r = accel_err_set(err, ACCEL_ERR_PLUGIN, "%s: key '%s' has unknown type %u", what,
			                  p->key, p->type);
			goto fail;
		}
		char *full = strfmt("%s.%s", section, p->key);
		if (!full) {
			r = nomem(err);
			goto fail;
		}
		int has = (p->type == ACCEL_CFG_INT || p->type == ACCEL_CFG_DOUBLE) && p->min <= p->max;
		if (has && p->type == ACCEL_CFG_INT &&
		    ((isfinite(p->min) && p->min != floor(p->min)) ||
		     (isfinite(p->max) && p->max != floor(p->max)))) {
			free(full);
			r = accel_err_set(err, ACCEL_ERR_PLUGIN,
			                  "%s: integer key '%s' has the range [%g, %g]; the bounds of an "
			                  "integer key must be integers (or infinite)", what, p->key,
			                  p->min, p->max);
			goto fail;
		}
		r = keydef_init(&k, full, (int)p->type, p->default_json, has ? p->min : 1,
		                has ? p->max : 0, 0, p->choices, 0, NULL, p->help,
		                (int)cfg->nsecs, what, err);
		free(full);
		if (!r)
			r = key_conflict(cfg, &k, what, err);
		if (r) {
			keydef_clear(&k);
			goto fail;
		}
		cfg->keys[cfg->nkeys++] = k;
		added++;
	}
	cfg->nsecs++;
	cfg->resolved = 0;
	return ACCEL_OK;
fail:
	while (added--)
		keydef_clear(&cfg->keys[--cfg->nkeys]);
	free(sec->name);
	free(sec->owner);
	memset(sec, 0, sizeof(*sec));
	return r;
}

/* ---- loading layers ------------------------------------------------------------------- */

static int load_text(accel_config *cfg, const char *text, size_t len, const char *name,
                     accel_err *err)
{
	json_error_t je;
	/* A byte-order mark is allowed to be ignored (RFC 8259, section 8.1);
	 * a NUL byte would end the text for jansson, hiding what follows. */
	if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
		text += 3;
		len -= 3;
	}
	const char *nul = memchr(text, '\0', len);
	if (nul)
		return accel_err_set(err, ACCEL_ERR_CONFIG,
		                     "%s: contains a NUL byte (at byte %zu); a config file is JSON text",
		                     name, (size_t)(nul - text));
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return accel_err_set(err, ACCEL_ERR_CONFIG, "%s:%d:%d: invalid JSON: %s", name,
		                     je.line > 0 ? je.line : 1, je.column > 0 ? je.column : 1, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return accel_err_set(err, ACCEL_ERR_CONFIG,
		                     "%s: the top level must be a JSON object ({...}) of settings",
		                     name);
	}
	doc *d = calloc(1, sizeof(*d));
	if (!d || !(d->name = strdup(name))) {
		free(d);
		json_decref(root);
		return nomem(err);
	}
	d->kind = D_FILE;
	d->root = root;
	scan_positions(d, text, len);
	return add_doc(cfg, d, err);
}

int accel_config_load_string(accel_config *cfg, const char *json, const char *origin,
                             accel_err *err)
{
	if (!cfg || !json)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_load_string: NULL argument");
	return load_text(cfg, json, strlen(json), origin ? origin : "<string>", err);
}

int accel_config_load_file(accel_config *cfg, const char *path, accel_err *err)
{
	char *text = NULL;
	size_t len = 0, cap = 0;
	int r;
	if (!cfg || !path)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_load_file: NULL argument");
	/* O_NONBLOCK for the open only: a FIFO without a writer would block
	 * open() forever; once open, reads block as usual and such a FIFO
	 * reads as empty (/dev/stdin from a pipe still works). */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	FILE *f = NULL;
	if (fd >= 0) {
		int fl = fcntl(fd, F_GETFL);
		if (fl >= 0)
			(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		f = fdopen(fd, "rb");
		if (!f)
			close(fd);
	}
	if (!f)
		return accel_err_set(err, ACCEL_ERR_IO, "cannot open config file '%s': %s", path,
		                     strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		return accel_err_set(err, ACCEL_ERR_IO, "cannot read config file '%s': %s", path,
		                     strerror(EISDIR));
	}
	for (;;) {
		if (grow((void **)&text, &cap, len + 65536 + 1, 1)) {
			r = nomem(err);
			goto fail;
		}
		size_t n = fread(text + len, 1, 65536, f);
		len += n;
		if (n < 65536) {
			if (ferror(f)) {
				r = accel_err_set(err, ACCEL_ERR_IO, "cannot read config file '%s': %s",
				                  path, strerror(errno));
				goto fail;
			}
			break;
		}
		if (len > (64u << 20)) {
			r = accel_err_set(err, ACCEL_ERR_CONFIG,
			                  "config file '%s' is larger than 64 MiB; is it a config?", path);
			goto fail;
		}
	}
	text[len] = '\0';
	r = load_text(cfg, text, len, path, err);
fail:
	fclose(f);
	free(text);
	return r;
}

/* "key=value" with a key of [A-Za-z0-9_-.]; splits into key and value. */
static int parse_assignment(const char *a, const char *where, char **ret_key, const char **ret_val,
                            accel_err *err)
{
	const char *eq = strchr(a, '=');
	if (!eq || eq == a)
		return accel_err_set(err, ACCEL_ERR_CONFIG, "%s '%s': expected KEY=VALUE "
		                     "(for example seed=3 or optimizer.params.lr=1e-4)", where, a);
	const char *ks = a, *ke = eq;
	while (ks < ke && (*ks == ' ' || *ks == '\t'))
		ks++;
	while (ke > ks && (ke[-1] == ' ' || ke[-1] == '\t'))
		ke--;
	char *key = strndup(ks, (size_t)(ke - ks));
	if (!key)
		return nomem(err);
	if (!valid_path(key)) {
		accel_err_set(err, ACCEL_ERR_CONFIG, "%s '%s': '%s' is not a key (keys are names of "
		              "[A-Za-z0-9_-] joined by '.', like optimizer.params.lr)", where, a, key);
		free(key);
		return ACCEL_ERR_CONFIG;
	}
	*ret_key = key;
	*ret_val = eq + 1;
	return ACCEL_OK;
}

int accel_config_set(accel_config *cfg, const char *assignment, const char *origin,
                     accel_err *err)
{
	char *key = NULL, *src = NULL;
	const char *val;
	if (!cfg || !assignment)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_set: NULL argument");
	int r = parse_assignment(assignment, origin ? origin : "--set", &key, &val, err);
	if (r)
		return r;
	doc *d = NULL;
	src = strfmt("%s %s", origin ? origin : "--set", assignment);
	r = src ? value_doc(D_SET, src, key, val, &d, err) : nomem(err);
	free(src);
	free(key);
	return r ? r : add_doc(cfg, d, err);
}

static int load_launch_sets(accel_config *cfg, const char *text, accel_err *err)
{
	int line = 0, r = ACCEL_OK;
	const char *p = text;
	while (*p && !r) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		const char *next = p + n + (nl ? 1 : 0);   /* before n loses a '\r' */
		char *a = strndup(p, n);
		line++;
		if (!a)
			return nomem(err);
		if (n && a[n - 1] == '\r')
			a[--n] = '\0';
		if (n) {
			char where[64], *key = NULL, *src = NULL;
			const char *val;
			snprintf(where, sizeof(where), "ACCEL_SET line %d", line);
			r = parse_assignment(a, where, &key, &val, err);
			if (!r) {
				doc *d = NULL;
				src = strfmt("--set %s (accel launch)", a);
				r = src ? value_doc(D_LAUNCH, src, key, val, &d, err) : nomem(err);
				if (!r)
					r = add_doc(cfg, d, err);
			}
			free(key);
			free(src);
		}
		free(a);
		p = next;
	}
	return r;
}

int accel_config_load_env(accel_config *cfg, char *const *envp, accel_err *err)
{
	if (!cfg)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_load_env: NULL argument");
	if (!envp)
		envp = environ;
	for (char *const *e = envp; e && *e; e++) {
		const char *s = *e, *eq = strchr(s, '=');
		if (strncmp(s, "ACCEL_", 6) || !eq)
			continue;
		char name[256];
		size_t n = (size_t)(eq - s);
		if (n >= sizeof(name)) {
			return accel_err_set(err, ACCEL_ERR_CONFIG,
			                     "environment variable %.40s... has a name too long to be "
			                     "a config key", s);
		}
		memcpy(name, s, n);
		name[n] = '\0';
		int r;
		if (!strcmp(name, ACCEL_ENV_SET)) {
			if ((r = load_launch_sets(cfg, eq + 1, err)))
				return r;
			continue;
		}
		if (accel_config_env_reserved(name))
			continue;
		if (!eq[1]) {
			accel_log(ACCEL_LOG_DEBUG, "config: ignoring empty %s", name);
			continue;
		}
		doc *d = NULL;
		if ((r = value_doc(D_ENV, name, NULL, eq + 1, &d, err)) || (r = add_doc(cfg, d, err)))
			return r;
	}
	return ACCEL_OK;
}

const char *accel_config_find_file(const char **ret_from)
{
	static _Thread_local char buf[PATH_MAX];
	const char *from = NULL, *path = NULL;
	const char *e = getenv(ACCEL_ENV_CONFIG);
	if (e && *e) {
		from = ACCEL_ENV_CONFIG;
		path = e;
	} else if (access("accel.json", F_OK) == 0) {
		from = "./accel.json";
		path = "accel.json";
	} else {
		const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
		if (xdg && xdg[0] == '/') {
			if ((size_t)snprintf(buf, sizeof(buf), "%s/accel/default.json", xdg) < sizeof(buf) &&
			    access(buf, F_OK) == 0) {
				from = "$XDG_CONFIG_HOME/accel/default.json";
				path = buf;
			}
		} else if (home && *home) {
			if ((size_t)snprintf(buf, sizeof(buf), "%s/.config/accel/default.json", home) <
			            sizeof(buf) && access(buf, F_OK) == 0) {
				from = "~/.config/accel/default.json";
				path = buf;
			}
		}
	}
	if (ret_from)
		*ret_from = from;
	return path;
}

/* ---- raw lookups (peek) ----------------------------------------------------------------- */

/* Finds dotted `path` inside object `obj`, also through members whose names
 * contain dots ({"optimizer.type": ...}); appends position segments. */
static json_t *obj_find(json_t *obj, const char *path, char *pp, size_t ppcap)
{
	const char *k;
	json_t *v;
	if (!json_is_object(obj))
		return NULL;
	size_t base = strlen(pp);
	json_object_foreach(obj, k, v) {
		size_t n = strlen(k);
		if (strncmp(path, k, n) || (path[n] != '\0' && path[n] != '.'))
			continue;
		if (base + n + 2 < ppcap) {
			size_t u = base;
			if (u)
				pp[u++] = PSEP;
			memcpy(pp + u, k, n + 1);
		}
		if (path[n] == '\0')
			return v;
		json_t *r = obj_find(v, path + n + 1, pp, ppcap);
		if (r)
			return r;
		pp[base] = '\0';
	}
	return NULL;
}

static json_t *doc_find(const doc *d, const char *path, const char *env, char *pp, size_t ppcap)
{
	pp[0] = '\0';
	switch (d->kind) {
	case D_FILE:
		return obj_find(d->root, path, pp, ppcap);
	case D_ENV:
		return env && !strcmp(d->name, env) ? d->root : NULL;
	default:
		if (!strcmp(d->prefix, path))
			return d->root;
		if (path_in(path, d->prefix))
			return obj_find(d->root, path + strlen(d->prefix) + 1, pp, ppcap);
		return NULL;
	}
}

/* The raw value of `path` from the highest layer that has it (or its
 * alias), or the schema default.  ret_doc is NULL for defaults. */
static int raw_find(const accel_config *cfg, const char *path, json_t **ret_v, const doc **ret_doc,
                    char *src, size_t srccap)
{
	static const int order[] = {D_LAUNCH, D_SET, D_ENV, D_FILE};
	int alias = 0;
	long ki = find_key(cfg, path, &alias);
	const keydef *k = ki >= 0 ? &cfg->keys[ki] : NULL;
	const char *names[2] = {k ? k->key : path, k ? k->alias : NULL};
	char *envs[2] = {env_name(names[0]), names[1] ? env_name(names[1]) : NULL};
	int found = 0;
	char pp[1024];

	for (size_t o = 0; o < 4 && !found; o++) {
		for (size_t i = cfg->ndocs; i-- > 0 && !found;) {
			const doc *d = cfg->docs[i];
			if (d->kind != order[o])
				continue;
			for (int a = 0; a < 2 && !found; a++) {
				if (!names[a])
					continue;
				json_t *v = doc_find(d, names[a], envs[a], pp, sizeof(pp));
				if (!v)
					continue;
				found = 1;
				if (json_is_null(v))
					break;   /* explicit null: back to the default */
				*ret_v = v;
				*ret_doc = d;
				doc_source(d, pp, 0, src, srccap);
				free(envs[0]);
				free(envs[1]);
				return ACCEL_OK;
			}
		}
	}
	free(envs[0]);
	free(envs[1]);
	if (k && k->def) {
		*ret_v = k->def;
		*ret_doc = NULL;
		snprintf(src, srccap, "default");
		return ACCEL_OK;
	}
	return ACCEL_ERR_NOT_FOUND;
}

int accel_config_peek_string(const accel_config *cfg, const char *path, const char **ret)
{
	json_t *v;
	const doc *d;
	char src[512];
	if (!cfg || !path || !ret)
		return ACCEL_ERR_INVALID_ARG;
	int r = raw_find(cfg, path, &v, &d, src, sizeof(src));
	if (r)
		return r;
	if (json_is_string(v)) {
		*ret = json_string_value(v);
		return ACCEL_OK;
	}
	if (d && d->raw && v == d->root && !json_is_array(v) && !json_is_object(v)) {
		*ret = d->raw;
		return ACCEL_OK;
	}
	return ACCEL_ERR_CONFIG;
}

int accel_config_peek_strlist(const accel_config *cfg, const char *path, uint32_t index,
                              const char **ret)
{
	json_t *v;
	const doc *d;
	char src[512];
	if (!cfg || !path || !ret)
		return ACCEL_ERR_INVALID_ARG;
	int r = raw_find(cfg, path, &v, &d, src, sizeof(src));
	if (r)
		return r;
	if (d && d->split && !d->raw_json && v == d->root)
		v = d->split;
	if (!json_is_array(v))
		return ACCEL_ERR_CONFIG;
	if (index >= json_array_size(v))
		return ACCEL_ERR_NOT_FOUND;
	json_t *e = json_array_get(v, index);
	if (!json_is_string(e))
		return ACCEL_ERR_CONFIG;
	*ret = json_string_value(e);
	return ACCEL_OK;
}

/* ---- resolve ------------------------------------------------------------------------------ */

typedef struct walker {
	accel_config *cfg;
	const doc *d;
	int layer;
	accel_err *err;
} walker;

/* "strategy is 'ddp' (default) and plugins is [] (default)" */
static void selection_text(const accel_config *cfg, int backend, char *buf, size_t cap)
{
	static const char *const sel_keys[] = {"strategy", "plugins", "backend"};
	size_t used = 0;
	buf[0] = '\0';
	for (int i = backend ? 2 : 0; i < (backend ? 3 : 2); i++) {
		json_t *v;
		const doc *d;
		char src[512], *vs = NULL;
		if (raw_find(cfg, sel_keys[i], &v, &d, src, sizeof(src)))
			continue;
		if (d && d->split && !d->raw_json && !strcmp(sel_keys[i], "plugins"))
			v = d->split;
		if (json_is_string(v))
			vs = strfmt("'%s'", json_string_value(v));
		else
			vs = value_string(v);
		if (used < cap)
			used += (size_t)snprintf(buf + used, cap - used, "%s%s is %s (%s)",
			                         used ? " and " : "", sel_keys[i], vs ? vs : "?", src);
		free(vs);
	}
}

static int err_unselected(walker *w, long si, const char *src)
{
	const cfg_section *s = &w->cfg->secs[si];
	char sel[1024];
	selection_text(w->cfg, s->backend, sel, sizeof(sel));
	return accel_err_set(w->err, ACCEL_ERR_CONFIG,
	                     "section '%s' (%s %s) is set at %s but %s; select %s or remove "
	                     "the section", s->name, s->backend ? "backend" : "plugin", s->owner,
	                     src, sel, s->owner);
}

static int err_unknown(walker *w, const char *path, const char *src)
{
	char sug[256], kids[512];
	if (suggest_key(w->cfg, path, sug, sizeof(sug)))
		return accel_err_set(w->err, ACCEL_ERR_CONFIG,
		                     "unknown key '%s' at %s; did you mean '%s'?", path, src, sug);
	const char *dot = strrchr(path, '.');
	if (dot) {
		char parent[256];
		snprintf(parent, sizeof(parent), "%.*s", (int)(dot - path), path);
		if (is_group(w->cfg, parent)) {
			list_children(w->cfg, parent, kids, sizeof(kids));
			return accel_err_set(w->err, ACCEL_ERR_CONFIG,
			                     "unknown key '%s' at %s; '%s' has: %s", path, src, parent,
			                     kids);
		}
	}
	return accel_err_set(w->err, ACCEL_ERR_CONFIG,
	                     "unknown key '%s' at %s (not a core key, and no registered plugin "
	                     "declares it; see docs/config.md and `accel plugins list`)", path, src);
}

static int assign(walker *w, long ki, int alias, json_t *v, const char *ppath, const char *src)
{
	keydef *k = &w->cfg->keys[ki];
	const char *shown = alias ? k->alias : k->key;
	vsrc vs = {.d = w->d, .ppath = ppath, .text = src};
	json_t *nv = NULL;
	int r = normalize(k, shown, v, &vs, &nv, w->err);
	if (r)
		return r;
	setting *s = &k->set[w->layer];
	if (s->val) {
		if (s->doc == w->d && s->alias == alias) {
			json_decref(nv);
			return accel_err_set(w->err, ACCEL_ERR_CONFIG,
			                     "key '%s' is given twice in %s: at %s and at %s", shown,
			                     w->d->name, s->src, src);
		}
		if (s->alias != alias && !json_equal(s->val, nv)) {
			char a[128], b[128];
			describe(s->val, a, sizeof(a));
			describe(nv, b, sizeof(b));
			r = accel_err_set(w->err, ACCEL_ERR_CONFIG,
			                  "'%s' = %s at %s and '%s' = %s at %s set the same thing (%s is an "
			                  "alias of %s) to different values; keep one",
			                  s->alias ? k->alias : k->key, a, s->src, shown, b, src, k->alias,
			                  k->key);
			json_decref(nv);
			return r;
		}
		setting_clear(s);
	}
	s->val = nv;
	s->src = strdup(src);
	s->doc = w->d;
	s->alias = alias;
	if (!s->src)
		return nomem(w->err);
	return ACCEL_OK;
}

/* One member of a document: `path` is dotted, `ppath` its position path. */
static int walk(walker *w, const char *path, const char *ppath, json_t *v)
{
	char src[1024];
	int alias = 0;
	long si = *path ? find_section(w->cfg, path) : -1;
	if (si >= 0 && !w->cfg->secs[si].selected) {
		doc_source(w->d, ppath, 1, src, sizeof(src));
		return err_unselected(w, si, src);
	}
	long ki = *path ? find_key(w->cfg, path, &alias) : -1;
	if (ki >= 0) {
		doc_source(w->d, ppath, 0, src, sizeof(src));
		return assign(w, ki, alias, v, ppath, src);
	}
	if (!is_group(w->cfg, path)) {
		doc_source(w->d, ppath, 1, src, sizeof(src));
		return err_unknown(w, path, src);
	}
	if (!json_is_object(v)) {
		char got[128], kids[512];
		doc_source(w->d, ppath, 0, src, sizeof(src));
		describe(v, got, sizeof(got));
		list_children(w->cfg, path, kids, sizeof(kids));
		return accel_err_set(w->err, ACCEL_ERR_CONFIG,
		                     "invalid value for '%s' at %s: it is a group of settings (%s), so "
		                     "expected an object, got %s", path, src, kids, got);
	}
	const char *k;
	json_t *m;
	json_object_foreach(v, k, m) {
		char *cp = *path ? strfmt("%s.%s", path, k) : strdup(k);
		char *cpp = *ppath ? strfmt("%s%c%s", ppath, PSEP, k) : strdup(k);
		int r = (cp && cpp) ? ACCEL_OK : nomem(w->err);
		/* "" would name the group it is in ({"": {...}} the root), and
		 * "a..b" or "a." no key at all */
		size_t kl = strlen(k);
		if (!r && (!kl || k[0] == '.' || k[kl - 1] == '.' || strstr(k, ".."))) {
			doc_source(w->d, cpp, 0, src, sizeof(src));
			r = accel_err_set(w->err, ACCEL_ERR_CONFIG,
			                  kl ? "invalid key '%s' at %s: a dotted key has an empty part"
			                     : "empty key%s at %s: every setting has a name",
			                  k, src);
		}
		if (!r)
			r = walk(w, cp, cpp, m);
		free(cp);
		free(cpp);
		if (r)
			return r;
	}
	return ACCEL_OK;
}

static int walk_env(walker *w)
{
	const doc *d = w->d;
	char src[300];
	int alias = 0;
	snprintf(src, sizeof(src), "env %s", d->name);
	long ki = find_env(w->cfg, d->name, &alias);
	if (ki >= 0) {
		const keydef *k = &w->cfg->keys[ki];
		if (k->section >= 0 && !w->cfg->secs[k->section].selected)
			return err_unselected(w, k->section, src);
		return assign(w, ki, alias, d->root, NULL, src);
	}
	/* guess the key it was meant to be */
	size_t best = SIZE_MAX, lim = max_distance(d->name + 6);
	long bi = -1;
	int balias = 0;
	for (size_t i = 0; i < w->cfg->nkeys; i++) {
		const keydef *k = &w->cfg->keys[i];
		size_t a = edit_distance(d->name, k->env);
		size_t b = k->alias_env ? edit_distance(d->name, k->alias_env) : SIZE_MAX;
		if (a <= lim && a < best)
			best = a, bi = (long)i, balias = 0;
		if (b <= lim && b < best)
			best = b, bi = (long)i, balias = 1;
	}
	char guess[256];
	size_t n = strlen(d->name + 6);
	snprintf(guess, sizeof(guess), "%s", d->name + 6);
	for (size_t i = 0; i < n && i < sizeof(guess); i++)
		if (guess[i] >= 'A' && guess[i] <= 'Z')
			guess[i] = (char)(guess[i] + 32);
	if (bi >= 0) {
		const keydef *k = &w->cfg->keys[bi];
		return accel_err_set(w->err, ACCEL_ERR_CONFIG,
		                     "unknown key '%s' at %s; did you mean '%s' (%s)? (ACCEL_* "
		                     "variables set config keys; see docs/config.md)", guess, src,
		                     balias ? k->alias : k->key, balias ? k->alias_env : k->env);
	}
	return accel_err_set(w->err, ACCEL_ERR_CONFIG,
	                     "unknown key '%s' at %s: no config key has this environment name "
	                     "(ACCEL_* variables set config keys, '.' written as '_'; see "
	                     "docs/config.md)", guess, src);
}

static int layer_of(int kind)
{
	return kind == D_FILE ? LY_FILE : kind == D_ENV ? LY_ENV : LY_SET;
}

/* The setting of the highest layer, or NULL. */
static const setting *top_setting(const keydef *k)
{
	for (int l = LY_COUNT - 1; l > LY_DEFAULT; l--)
		if (k->set[l].val)
			return &k->set[l];
	return NULL;
}

/* Given by the user with a value (not only null). */
static int user_set(const keydef *k)
{
	const setting *s = top_setting(k);
	return s && !json_is_null(s->val);
}

/* Given by the user with a value other than the default: a key that would
 * be ignored is only an error then ("momentum": 0 with adamw changes
 * nothing, and a full dump must load back). */
static int user_changed(const keydef *k)
{
	return user_set(k) && !(k->def && json_equal(k->val, k->def));
}

static keydef *key_at(accel_config *cfg, const char *path)
{
	long i = find_key(cfg, path, NULL);
	return i >= 0 ? &cfg->keys[i] : NULL;
}

static int finalize(accel_config *cfg, accel_err *err)
{
	for (size_t i = 0; i < cfg->nkeys; i++) {
		keydef *k = &cfg->keys[i];
		json_decref(k->val);
		free(k->src);
		k->val = NULL;
		k->src = NULL;
		if (!key_active(cfg, k))
			continue;
		const setting *s = top_setting(k);
		if (s && !json_is_null(s->val)) {
			k->val = json_incref(s->val);
			k->src = strdup(s->src);
		} else if (k->def) {
			k->val = json_incref(k->def);
			k->src = s ? strfmt("default (null at %s)", s->src) : strdup("default");
		} else if (s) {
			k->src = strfmt("unset (null at %s)", s->src);
			if (!k->src)
				return nomem(err);
		}
		if (k->val && !k->src)
			return nomem(err);
	}
	/* torch.optim.SGD's weight_decay default is 0, AdamW's 0.01 */
	keydef *type = key_at(cfg, "optimizer.type"), *wd = key_at(cfg, "optimizer.params.weight_decay");
	if (type && wd && type->val && !strcmp(json_string_value(type->val), "sgd") && !user_set(wd)) {
		json_decref(wd->val);
		free(wd->src);
		wd->val = json_real(0.0);
		wd->src = strdup("default for sgd");
		if (!wd->val || !wd->src)
			return nomem(err);
	}
	return ACCEL_OK;
}

static const char *sval(const keydef *k)
{
	return k && json_is_string(k->val) ? json_string_value(k->val) : "";
}

static double dval(const keydef *k)
{
	return k && json_is_number(k->val) ? json_number_value(k->val) : 0.0;
}

/* Settings that only make sense together.  A key that would be ignored
 * under the chosen type is an error, never silently dropped. */
static int cross_check(accel_config *cfg, accel_err *err)
{
	keydef *st = key_at(cfg, "scheduler.type"), *tot = key_at(cfg, "scheduler.total_steps");
	keydef *wu = key_at(cfg, "scheduler.warmup_steps"), *mlr = key_at(cfg, "scheduler.min_lr");
	keydef *lr = key_at(cfg, "optimizer.params.lr"), *ot = key_at(cfg, "optimizer.type");
	const char *stype = sval(st), *otype = sval(ot);
	char a[64], b[64];

	if (!strcmp(stype, "linear") || !strcmp(stype, "cosine")) {
		if (dval(tot) <= 0)
			return accel_err_set(err, ACCEL_ERR_CONFIG,
			                     "scheduler.type is '%s' (%s) but scheduler.total_steps is "
			                     "%g (%s); set scheduler.total_steps to the number of "
			                     "optimizer steps of the run", stype, st->src, dval(tot),
			                     tot->src);
		if (dval(wu) > dval(tot))
			return accel_err_set(err, ACCEL_ERR_CONFIG,
			                     "scheduler.warmup_steps (%g, %s) exceeds "
			                     "scheduler.total_steps (%g, %s)", dval(wu), wu->src,
			                     dval(tot), tot->src);
		if (dval(mlr) > dval(lr)) {
			fmt_num(dval(mlr), a, sizeof(a));
			fmt_num(dval(lr), b, sizeof(b));
			return accel_err_set(err, ACCEL_ERR_CONFIG,
			                     "scheduler.min_lr (%s, %s) is larger than "
			                     "optimizer.params.lr (%s, %s)", a, mlr->src, b, lr->src);
		}
	} else if (user_changed(mlr)) {
		fmt_num(dval(mlr), a, sizeof(a));
		return accel_err_set(err, ACCEL_ERR_CONFIG,
		                     "scheduler.min_lr is set to %s at %s but scheduler.type is '%s' "
		                     "(%s), which does not decay; use linear or cosine, or remove min_lr",
		                     a, mlr->src, stype, st->src);
	}

	static const char *const sgd_only[] = {"optimizer.params.momentum",
	                                       "optimizer.params.dampening",
	                                       "optimizer.params.nesterov"};
	static const char *const adamw_only[] = {"optimizer.params.betas", "optimizer.params.eps"};
	int sgd = !strcmp(otype, "sgd");
	const char *const *other = sgd ? adamw_only : sgd_only;
	size_t n_other = sgd ? 2 : 3;
	for (size_t i = 0; i < n_other; i++) {
		keydef *k = key_at(cfg, other[i]);
		if (k && user_changed(k)) {
			char *v = value_string(k->val);
			int r = accel_err_set(err, ACCEL_ERR_CONFIG,
			                      "%s is set to %s at %s but optimizer.type is '%s' (%s), which "
			                      "does not use it; remove it or change optimizer.type", k->key,
			                      v ? v : "?", k->src, otype, ot->src);
			free(v);
			return r;
		}
	}
	if (sgd) {
		keydef *nes = key_at(cfg, "optimizer.params.nesterov");
		keydef *mom = key_at(cfg, "optimizer.params.momentum");
		keydef *dmp = key_at(cfg, "optimizer.params.dampening");
		if (nes && json_is_true(nes->val) && (dval(mom) <= 0 || dval(dmp) != 0))
			return accel_err_set(err, ACCEL_ERR_CONFIG,
			                     "optimizer.params.nesterov (%s) needs momentum > 0 and "
			                     "dampening 0; momentum is %g (%s), dampening %g (%s)",
			                     nes->src, dval(mom), mom->src, dval(dmp), dmp->src);
	}
	return ACCEL_OK;
}

int accel_config_resolve(accel_config *cfg, accel_err *err)
{
	static const int order[] = {D_FILE, D_ENV, D_SET, D_LAUNCH};
	int r = ACCEL_OK;
	if (!cfg)
		return accel_err_set(err, ACCEL_ERR_INVALID_ARG, "accel_config_resolve: NULL config");
	cfg->resolved = 0;
	for (size_t i = 0; i < cfg->nkeys; i++)
		for (int l = 0; l < LY_COUNT; l++)
			setting_clear(&cfg->keys[i].set[l]);
	for (size_t o = 0; o < 4; o++) {
		for (size_t i = 0; i < cfg->ndocs; i++) {
			const doc *d = cfg->docs[i];
			if (d->kind != order[o])
				continue;
			walker w = {.cfg = cfg, .d = d, .layer = layer_of(d->kind), .err = err};
			if (d->kind == D_ENV)
				r = walk_env(&w);
			else if (d->kind == D_FILE)
				r = walk(&w, "", "", d->root);
			else
				r = walk(&w, d->prefix, "", d->root);
			if (r)
				return r;
		}
	}
	if ((r = finalize(cfg, err)) || (r = cross_check(cfg, err)))
		return r;
	cfg->resolved = 1;
	return ACCEL_OK;
}

/* ---- getters ------------------------------------------------------------------------------ */

static int get_key(const accel_config *cfg, const char *path, const void *ret, const keydef **rk)
{
	if (!cfg || !path || !ret)
		return ACCEL_ERR_INVALID_ARG;
	if (!cfg->resolved)
		return ACCEL_ERR_STATE;
	long i = find_key(cfg, path, NULL);
	if (i < 0 || !key_active(cfg, &cfg->keys[i]) || !cfg->keys[i].val)
		return ACCEL_ERR_NOT_FOUND;
	*rk = &cfg->keys[i];
	return ACCEL_OK;
}

int accel_config_get_bool(const accel_config *cfg, const char *path, int32_t *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_BOOL)
		return ACCEL_ERR_CONFIG;
	*ret = json_is_true(k->val);
	return ACCEL_OK;
}

int accel_config_get_int(const accel_config *cfg, const char *path, int64_t *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_INT)
		return ACCEL_ERR_CONFIG;
	*ret = (int64_t)json_integer_value(k->val);
	return ACCEL_OK;
}

int accel_config_get_double(const accel_config *cfg, const char *path, double *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_DOUBLE && k->type != ACCEL_CFG_INT)
		return ACCEL_ERR_CONFIG;
	*ret = json_number_value(k->val);
	return ACCEL_OK;
}

int accel_config_get_string(const accel_config *cfg, const char *path, const char **ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_STRING && k->type != ACCEL_CFG_ENUM)
		return ACCEL_ERR_CONFIG;
	*ret = json_string_value(k->val);
	return ACCEL_OK;
}

int accel_config_get_strlist(const accel_config *cfg, const char *path, uint32_t index,
                             const char **ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != ACCEL_CFG_STRLIST)
		return ACCEL_ERR_CONFIG;
	if (index >= json_array_size(k->val))
		return ACCEL_ERR_NOT_FOUND;
	*ret = json_string_value(json_array_get(k->val, index));
	return ACCEL_OK;
}

int accel_config_get_dbllist(const accel_config *cfg, const char *path, uint32_t index,
                             double *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != T_DBLLIST)
		return ACCEL_ERR_CONFIG;
	if (index >= json_array_size(k->val))
		return ACCEL_ERR_NOT_FOUND;
	*ret = json_number_value(json_array_get(k->val, index));
	return ACCEL_OK;
}

int accel_config_get_count(const accel_config *cfg, const char *path, uint32_t *ret)
{
	const keydef *k;
	int r = get_key(cfg, path, ret, &k);
	if (r)
		return r;
	if (k->type != T_DBLLIST && k->type != ACCEL_CFG_STRLIST)
		return ACCEL_ERR_CONFIG;
	*ret = (uint32_t)json_array_size(k->val);
	return ACCEL_OK;
}

const char *accel_config_source(const accel_config *cfg, const char *path)
{
	if (!cfg || !path)
		return NULL;
	if (!cfg->resolved) {
		/* the source of what peek_* sees; the buffer is scratch space, not
		 * part of the configuration's value */
		json_t *v;
		const doc *d;
		accel_config *mut = (accel_config *)cfg;
		if (raw_find(cfg, path, &v, &d, mut->peek_src, sizeof(mut->peek_src)))
			return NULL;
		return mut->peek_src;
	}
	long i = find_key(cfg, path, NULL);
	if (i < 0 || !key_active(cfg, &cfg->keys[i]) || !cfg->keys[i].val)
		return NULL;
	return cfg->keys[i].src;
}

/* ---- dumps --------------------------------------------------------------------------------- */

static int dump_wanted(const accel_config *cfg, const keydef *k, int resolved)
{
	return key_active(cfg, k) && (resolved || top_setting(k));
}

typedef struct lineset {
	char **lines, **srcs;
	size_t n, cap;
} lineset;

/* Takes ownership of both strings. */
static void lines_add(lineset *ls, char *line, char *src)
{
	if (!line || grow((void **)&ls->lines, &ls->cap, ls->n + 1, sizeof(*ls->lines))) {
		free(line);
		free(src);
		return;
	}
	char **s2 = realloc(ls->srcs, ls->cap * sizeof(*s2));
	if (!s2) {
		free(line);
		free(src);
		return;
	}
	ls->srcs = s2;
	ls->lines[ls->n] = line;
	ls->srcs[ls->n] = src;
	ls->n++;
}

static void lines_print(FILE *out, const lineset *ls, int show_sources)
{
	size_t width = 0;
	for (size_t i = 0; i < ls->n; i++)
		if (strlen(ls->lines[i]) > width)
			width = strlen(ls->lines[i]);
	if (width > 60)
		width = 60;
	for (size_t i = 0; i < ls->n; i++) {
		if (show_sources && ls->srcs[i])
			fprintf(out, "%-*s  # %s\n", (int)width, ls->lines[i], ls->srcs[i]);
		else
			fprintf(out, "%s\n", ls->lines[i]);
	}
}

static void lines_free(lineset *ls)
{
	for (size_t i = 0; i < ls->n; i++) {
		free(ls->lines[i]);
		free(ls->srcs[i]);
	}
	free(ls->lines);
	free(ls->srcs);
}

/* Leaves of a document, for the raw dump before resolve(). */
static void raw_leaves(lineset *ls, const doc *d, const char *path, const char *ppath, json_t *v)
{
	if (json_is_object(v) && json_object_size(v)) {
		const char *k;
		json_t *m;
		json_object_foreach(v, k, m) {
			char *cp = *path ? strfmt("%s.%s", path, k) : strdup(k);
			char *cpp = *ppath ? strfmt("%s%c%s", ppath, PSEP, k) : strdup(k);
			if (cp && cpp)
				raw_leaves(ls, d, cp, cpp, m);
			free(cp);
			free(cpp);
		}
		return;
	}
	char src[1024], *vs = value_string(v);
	doc_source(d, ppath, 0, src, sizeof(src));
	lines_add(ls, strfmt("%s = %s", path, vs ? vs : "?"), strdup(src));
	free(vs);
}

void accel_config_dump(const accel_config *cfg, FILE *out, int resolved, int show_sources)
{
	static const int order[] = {D_FILE, D_ENV, D_SET, D_LAUNCH};
	lineset ls = {0};
	if (!cfg || !out)
		return;
	if (cfg->resolved) {
		for (size_t i = 0; i < cfg->nkeys; i++) {
			const keydef *k = &cfg->keys[i];
			if (!dump_wanted(cfg, k, resolved))
				continue;
			char *vs = value_string(k->val);
			lines_add(&ls, strfmt("%s = %s", k->key, vs ? vs : "?"),
			          xstrdup(k->src ? k->src : "default (unset)"));
			free(vs);
		}
	} else {
		/* before resolve: the raw layers, lowest first */
		for (size_t o = 0; o < 4; o++) {
			for (size_t i = 0; i < cfg->ndocs; i++) {
				const doc *d = cfg->docs[i];
				if (d->kind != order[o])
					continue;
				if (d->kind == D_ENV)
					lines_add(&ls, strfmt("%s = %s", d->name, d->raw),
					          strfmt("env %s", d->name));
				else
					raw_leaves(&ls, d, d->prefix ? d->prefix : "", "", d->root);
			}
		}
	}
	lines_print(out, &ls, show_sources);
	lines_free(&ls);
}

static void emit_json(FILE *out, const json_t *v, int indent)
{
	if (json_is_object(v) && json_object_size(v)) {
		const char *k;
		json_t *m;
		size_t i = 0;
		fputs("{\n", out);
		json_object_foreach((json_t *)v, k, m) {
			json_t *ks = json_string(k);
			char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
			fprintf(out, "%s%*s%s: ", i++ ? ",\n" : "", indent + 2, "", kj ? kj : "\"?\"");
			free(kj);
			json_decref(ks);
			emit_json(out, m, indent + 2);
		}
		fprintf(out, "\n%*s}", indent, "");
	} else {
		fput_value(out, v);
	}
}

int accel_config_dump_json(const accel_config *cfg, FILE *out, int resolved, int show_sources)
{
	int r = ACCEL_OK;
	if (!cfg || !out)
		return ACCEL_ERR_INVALID_ARG;
	if (!cfg->resolved)
		return ACCEL_ERR_STATE;
	json_t *tree = json_object(), *srcs = json_object();
	if (!tree || !srcs) {
		r = ACCEL_ERR_NOMEM;
		goto fail;
	}
	for (size_t i = 0; i < cfg->nkeys; i++) {
		const keydef *k = &cfg->keys[i];
		if (!dump_wanted(cfg, k, resolved))
			continue;
		json_t *node = tree;
		char *path = strdup(k->key), *save = NULL;
		if (!path) {
			r = ACCEL_ERR_NOMEM;
			goto fail;
		}
		char *seg = strtok_r(path, ".", &save);
		while (seg) {
			char *next = strtok_r(NULL, ".", &save);
			if (!next) {
				json_object_set_new(node, seg, k->val ? json_incref(k->val) : json_null());
			} else {
				json_t *child = json_object_get(node, seg);
				if (!json_is_object(child)) {
					child = json_object();
					json_object_set_new(node, seg, child);
				}
				node = child;
			}
			seg = next;
		}
		free(path);
		json_object_set_new(srcs, k->key, json_string(k->src ? k->src : "default (unset)"));
	}
	if (show_sources) {
		json_t *both = json_pack("{s:O,s:O}", "config", tree, "sources", srcs);
		if (!both) {
			r = ACCEL_ERR_NOMEM;
			goto fail;
		}
		emit_json(out, both, 0);
		json_decref(both);
	} else {
		json_t *one = json_pack("{s:O}", "config", tree);
		if (!one) {
			r = ACCEL_ERR_NOMEM;
			goto fail;
		}
		emit_json(out, one, 0);
		json_decref(one);
	}
	fputc('\n', out);
fail:
	json_decref(tree);
	json_decref(srcs);
	return r;
}
