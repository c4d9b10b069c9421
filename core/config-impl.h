/* SPDX-License-Identifier: MIT */
/* core/config-impl.h: what the parts of the configuration share (private).
 *
 * config_scan.c     the position scanner: line:column of every key and value
 * config_load.c     loading layers: files, environment, --set, as documents;
 *                   raw lookups (peek) before resolve
 * config_schema.c   declared keys: the core schema, plugin schemas, lookups
 * config_value.c    checking and normalizing one value against its key
 * config_resolve.c  resolution of the layers into values with sources; getters
 * config_dump.c     `accel config show` dumps
 * config_text.c     text helpers the others share
 *
 * Every layer is kept as a list of "documents" (a config file, one
 * environment variable, one --set assignment) exactly as given; nothing is
 * matched against schemas until accelp_config_resolve(), because plugin
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
#ifndef ACCEL_CORE_CONFIG_IMPL_H
#define ACCEL_CORE_CONFIG_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "config.h"

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
	char peek_src[1024];       /* accelp_config_source() before resolve()   */
	char *errs[ACCEL_CONFIG_ERRORS_MAX]; /* the last resolve()'s problems (owned) */
	uint32_t nerrs;
	uint32_t errs_more;        /* problems past ACCEL_CONFIG_ERRORS_MAX      */
};

/* Where a value or element came from, for messages. */
typedef struct vsrc {
	const doc *d;              /* NULL for schema defaults                 */
	const char *ppath;         /* position path inside d (files)            */
	const char *text;          /* the value's source                        */
} vsrc;


/* ---- config_text.c: text helpers (paths, names, suggestions, values as text) */

void cfg_describe(const json_t *v, char *buf, size_t cap);
size_t cfg_edit_distance(const char *a, const char *b);
char *cfg_env_name(const char *path);
void cfg_fmt_num(double x, char *buf, size_t cap);
void cfg_fput_value(FILE *out, const json_t *v);
int cfg_grow(void **arr, size_t *cap, size_t need, size_t elem);
size_t cfg_max_distance(const char *s);
int cfg_nomem(accel_err *err);
int cfg_path_in(const char *path, const char *group);
char *cfg_strfmt(const char *fmt, ...) ACCEL_PRINTF(1, 2);
int cfg_valid_path(const char *p);
char *cfg_value_string(const json_t *v);
char *cfg_xstrdup(const char *s);

/* ---- config_scan.c: line:column of every key and value of a config file */

void cfg_doc_source(const doc *d, const char *ppath, int at_key, char *buf, size_t cap);
void cfg_scan_positions(doc *d, const char *text, size_t len);

/* ---- config_load.c: the layers as documents; raw lookups before resolve */

doc *cfg_doc_free(doc *d);
int cfg_raw_find(const accel_config *cfg, const char *path, json_t **ret_v, const doc **ret_doc,
                 char *src, size_t srccap);
/* cfg_raw_find() that also gives the value's position path inside its
 * document (files; "" for other documents and defaults). */
int cfg_raw_find_at(const accel_config *cfg, const char *path, json_t **ret_v,
                    const doc **ret_doc, char *pp, size_t ppcap, char *src, size_t srccap);

/* ---- config_schema.c: declared keys and sections (the core schema, plugins' schemas) */

long cfg_find_env(const accel_config *cfg, const char *name, int *ret_alias);
long cfg_find_key(const accel_config *cfg, const char *path, int *ret_alias);
long cfg_find_section(const accel_config *cfg, const char *path);
int cfg_is_group(const accel_config *cfg, const char *path);
int cfg_key_active(const accel_config *cfg, const keydef *k);
void cfg_list_children(const accel_config *cfg, const char *parent, char *buf, size_t cap);
void cfg_setting_clear(setting *s);
const char *cfg_suggest_key(const accel_config *cfg, const char *path, char *buf, size_t cap);

/* ---- config_value.c: a value checked and normalized against its key */

int cfg_normalize(const keydef *k, const char *shown_key, json_t *v, const vsrc *vs,
                  json_t **ret, accel_err *err);

/* ---- config_resolve.c: resolution of the layers, and the getters */

const setting *cfg_top_setting(const keydef *k);

#endif /* ACCEL_CORE_CONFIG_IMPL_H */
