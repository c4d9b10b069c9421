/* SPDX-License-Identifier: MIT */
/* tests/test-config.c: the layered configuration (core/config_*.c) and the
 * `accel config` command.  Every error test checks the status and that the
 * message names the key and where it came from. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accel/accel.h"
#include "config.h"

#define S sizeof(accel_param_schema_v1)

/* A stand-in for the ddp plugin's schema and ZeRO's (nested keys). */
static const accel_param_schema_v1 ddp_params[] = {
	{S, ACCEL_CFG_INT, "bucket_cap_mb", "25", 1, 4096, NULL, "bucket size in MiB"},
	{S, ACCEL_CFG_BOOL, "static_graph", "false", 1, 0, NULL, "same graph every step"},
};
static const accel_param_schema_v1 zero_params[] = {
	{S, ACCEL_CFG_INT, "stage", "0", 0, 3, NULL, "ZeRO stage"},
	{S, ACCEL_CFG_ENUM, "offload_optimizer.device", "\"none\"", 1, 0, "none|cpu|nvme", "where"},
	{S, ACCEL_CFG_STRING, "offload_optimizer.nvme_path", NULL, 1, 0, NULL, "NVMe directory"},
	{S, ACCEL_CFG_DOUBLE, "reduce_bucket_size", "5e8", 1, 0, NULL, "elements"},
};

static accel_config *mk(accel_err *e)
{
	accel_config *c = NULL;
	accelp_err_clear(e);
	ck_assert_int_eq(accelp_config_new(&c, e), ACCEL_OK);
	ck_assert_ptr_nonnull(c);
	return c;
}

/* Load `json` as "cfg.json", optional env and one --set, then resolve. */
static int run(accel_config *c, const char *json, char **env, const char *set, accel_err *e)
{
	int r = ACCEL_OK;
	if (json)
		r = accelp_config_load_string(c, json, "cfg.json", e);
	if (!r && env)
		r = accelp_config_load_env(c, env, e);
	if (!r && set)
		r = accelp_config_set(c, set, NULL, e);
	if (!r)
		r = accelp_config_resolve(c, e);
	return r;
}

#define ASSERT_MSG_HAS(e, s) ck_assert_msg(strstr((e).msg, (s)) != NULL, \
	"message '%s' lacks '%s'", (e).msg, (s))

/* ---- defaults and getters ----------------------------------------------------------- */

START_TEST(defaults)
{
	accel_err e;
	accel_config *c = mk(&e);
	const char *s;
	int64_t i;
	double d;
	int32_t b;
	uint32_t n;

	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_ERR_STATE);
	/* before resolve: where the raw value comes from */
	ck_assert_str_eq(accelp_config_source(c, "seed"), "default");
	ck_assert_ptr_null(accelp_config_source(c, "max_grad_norm"));
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);

	ck_assert_int_eq(accelp_config_get_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "ddp");
	ck_assert_int_eq(accelp_config_get_string(c, "backend", &s), ACCEL_OK);
	ck_assert_str_eq(s, "auto");
	ck_assert_int_eq(accelp_config_get_string(c, "mixed_precision", &s), ACCEL_OK);
	ck_assert_str_eq(s, "no");
	ck_assert_int_eq(accelp_config_get_int(c, "gradient_accumulation_steps", &i), ACCEL_OK);
	ck_assert_int_eq(i, 1);
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 42);
	ck_assert_int_eq(accelp_config_get_string(c, "log_level", &s), ACCEL_OK);
	ck_assert_str_eq(s, "info");
	ck_assert_int_eq(accelp_config_get_double(c, "comm.timeout_s", &d), ACCEL_OK);
	ck_assert_double_eq(d, 300.0);
	ck_assert_int_eq(accelp_config_get_string(c, "optimizer.type", &s), ACCEL_OK);
	ck_assert_str_eq(s, "adamw");
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.lr", &d), ACCEL_OK);
	ck_assert_double_eq(d, 1e-3);
	ck_assert_int_eq(accelp_config_get_count(c, "optimizer.params.betas", &n), ACCEL_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(accelp_config_get_dbllist(c, "optimizer.params.betas", 0, &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.9);
	ck_assert_int_eq(accelp_config_get_dbllist(c, "optimizer.params.betas", 1, &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.999);
	ck_assert_int_eq(accelp_config_get_dbllist(c, "optimizer.params.betas", 2, &d),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.eps", &d), ACCEL_OK);
	ck_assert_double_eq(d, 1e-8);
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.weight_decay", &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.01);
	ck_assert_int_eq(accelp_config_get_bool(c, "optimizer.params.nesterov", &b), ACCEL_OK);
	ck_assert_int_eq(b, 0);
	ck_assert_int_eq(accelp_config_get_count(c, "optimizer.no_decay", &n), ACCEL_OK);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(accelp_config_get_strlist(c, "plugins", 0, &s), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_get_string(c, "scheduler.type", &s), ACCEL_OK);
	ck_assert_str_eq(s, "constant");
	ck_assert_int_eq(accelp_config_get_int(c, "scheduler.total_steps", &i), ACCEL_OK);
	ck_assert_int_eq(i, 0);
	ck_assert_int_eq(accelp_config_get_bool(c, "dataloader.split_batches", &b), ACCEL_OK);
	ck_assert_int_eq(b, 0);
	ck_assert_int_eq(accelp_config_get_bool(c, "dataloader.even_batches", &b), ACCEL_OK);
	ck_assert_int_eq(b, 1);
	ck_assert_int_eq(accelp_config_get_bool(c, "dataloader.drop_last", &b), ACCEL_OK);
	ck_assert_int_eq(b, 0);
	ck_assert_int_eq(accelp_config_get_bool(c, "dataloader.shuffle", &b), ACCEL_OK);
	ck_assert_int_eq(b, 1);
	ck_assert_str_eq(accelp_config_source(c, "seed"), "default");

	/* no default: unset, no error recorded */
	ck_assert_int_eq(accelp_config_get_double(c, "max_grad_norm", &d), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_get_double(c, "gradient_clipping", &d), ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_null(accelp_config_source(c, "max_grad_norm"));
	/* unknown keys and wrong types */
	ck_assert_int_eq(accelp_config_get_int(c, "no.such.key", &i), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_get_int(c, "strategy", &i), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(accelp_config_get_bool(c, "seed", &b), ACCEL_ERR_CONFIG);
	/* an integer key reads as a double */
	ck_assert_int_eq(accelp_config_get_double(c, "seed", &d), ACCEL_OK);
	ck_assert_double_eq(d, 42.0);
	ck_assert_int_eq(e.code, ACCEL_OK);
	c = accelp_config_free(c);
	ck_assert_ptr_null(c);
	ck_assert_ptr_null(accelp_config_free(NULL));
}
END_TEST

/* ---- precedence ------------------------------------------------------------------------ */

static const char prec_json[] =
	"{\n"
	"  \"seed\": 1,\n"
	"  \"gradient_accumulation_steps\": 2,\n"
	"  \"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 0.01, \"eps\": 1e-7}}\n"
	"}\n";

START_TEST(precedence)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *env[] = {"ACCEL_SEED=2", "ACCEL_OPTIMIZER_PARAMS_LR=0.02", "HOME=/x", NULL};
	int64_t i;
	double d;

	ck_assert_int_eq(accelp_config_load_string(c, prec_json, "cfg.json", &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_load_env(c, env, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "seed=3", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);

	/* default < file < env < --set */
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 3);
	ck_assert_str_eq(accelp_config_source(c, "seed"), "--set seed=3");
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.lr", &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.02);
	ck_assert_str_eq(accelp_config_source(c, "optimizer.params.lr"), "env ACCEL_OPTIMIZER_PARAMS_LR");
	ck_assert_int_eq(accelp_config_get_int(c, "gradient_accumulation_steps", &i), ACCEL_OK);
	ck_assert_int_eq(i, 2);
	ck_assert_str_eq(accelp_config_source(c, "gradient_accumulation_steps"), "cfg.json:3:34");
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.eps", &d), ACCEL_OK);
	ck_assert_double_eq(d, 1e-7);
	ck_assert_str_eq(accelp_config_source(c, "optimizer.params.eps"), "cfg.json:4:64");
	ck_assert_str_eq(accelp_config_source(c, "optimizer.type"), "cfg.json:4:25");
	ck_assert_str_eq(accelp_config_source(c, "mixed_precision"), "default");
	c = accelp_config_free(c);

	/* without the higher layers the lower ones show through */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_string(c, prec_json, "cfg.json", &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_load_env(c, env, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 2);
	ck_assert_str_eq(accelp_config_source(c, "seed"), "env ACCEL_SEED");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, prec_json, NULL, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 1);
	ck_assert_str_eq(accelp_config_source(c, "seed"), "cfg.json:2:11");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(set_values)
{
	accel_err e;
	accel_config *c = mk(&e);
	const char *s;
	int32_t b;
	double d;

	/* non-JSON text is a string; lists split at commas; origin replaces "--set" */
	ck_assert_int_eq(accelp_config_set(c, "backend=shm", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "plugins=scaler, compress", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "dataloader.shuffle=false", "accel_opts.sets", &e),
	                 ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "optimizer={\"type\": \"sgd\", \"params\": {\"lr\": 0.5}}",
	                                  NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "strategy=123", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_string(c, "backend", &s), ACCEL_OK);
	ck_assert_str_eq(s, "shm");
	ck_assert_int_eq(accelp_config_get_strlist(c, "plugins", 0, &s), ACCEL_OK);
	ck_assert_str_eq(s, "scaler");
	ck_assert_int_eq(accelp_config_get_strlist(c, "plugins", 1, &s), ACCEL_OK);
	ck_assert_str_eq(s, "compress");
	ck_assert_int_eq(accelp_config_get_strlist(c, "plugins", 2, &s), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_get_bool(c, "dataloader.shuffle", &b), ACCEL_OK);
	ck_assert_int_eq(b, 0);
	ck_assert_str_eq(accelp_config_source(c, "dataloader.shuffle"),
	                 "accel_opts.sets dataloader.shuffle=false");
	ck_assert_int_eq(accelp_config_get_string(c, "optimizer.type", &s), ACCEL_OK);
	ck_assert_str_eq(s, "sgd");
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.lr", &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.5);
	/* string key given a JSON number on the command line keeps the text */
	ck_assert_int_eq(accelp_config_get_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "123");
	c = accelp_config_free(c);

	/* only a value typed directly keeps its text; inside JSON types count */
	c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "optimizer={\"type\": 3}", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'optimizer.type' at --set optimizer={\"type\": 3}: "
	                        "expected one of adamw|sgd, got 3");
	c = accelp_config_free(c);
	c = mk(&e);
	ck_assert_int_eq(accelp_config_set(c, "optimizer={\"type\": \"sgd\"}", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	/* sgd's weight decay default is torch's 0 */
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.weight_decay", &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.0);
	ck_assert_str_eq(accelp_config_source(c, "optimizer.params.weight_decay"), "default for sgd");
	c = accelp_config_free(c);

	/* later --set of the same key wins; null goes back to the default */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_string(c, "{\"max_grad_norm\": 1.5, \"seed\": 7}",
	                                          "cfg.json", &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "seed=8", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "seed=9", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "max_grad_norm=null", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	int64_t i;
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 9);
	ck_assert_int_eq(accelp_config_get_double(c, "max_grad_norm", &d), ACCEL_ERR_NOT_FOUND);
	c = accelp_config_free(c);

	/* malformed assignments */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_set(c, "seed", NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "'seed': expected KEY=VALUE");
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_config_set(c, "=3", NULL, &e), ACCEL_ERR_CONFIG);
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_config_set(c, "a..b=3", NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "'a..b' is not a key");
	/* broken JSON is not quietly taken as text */
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_config_set(c, "plugins=[\"scaler\"", NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "--set plugins=[\"scaler\": the value looks like JSON but is not valid JSON");
	accelp_err_clear(&e);
	char *env[] = {"ACCEL_OPTIMIZER={\"type\": sgd}", NULL};
	ck_assert_int_eq(accelp_config_load_env(c, env, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "env ACCEL_OPTIMIZER: the value looks like JSON");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(launch_sets)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *env[] = {"ACCEL_SET=seed=5\n\noptimizer.params.lr=0.1\r\nplugins=[\"scaler\"]\n",
	               "ACCEL_SEED=4", NULL};
	int64_t i;
	double d;
	const char *s;

	ck_assert_int_eq(accelp_config_load_env(c, env, &e), ACCEL_OK);
	/* an API --set comes before ACCEL_SET's (the launcher's command line wins) */
	ck_assert_int_eq(accelp_config_set(c, "seed=6", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 5);
	ck_assert_str_eq(accelp_config_source(c, "seed"), "--set seed=5 (accel launch)");
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.lr", &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.1);
	ck_assert_str_eq(accelp_config_source(c, "optimizer.params.lr"),
	                 "--set optimizer.params.lr=0.1 (accel launch)");
	ck_assert_int_eq(accelp_config_get_strlist(c, "plugins", 0, &s), ACCEL_OK);
	ck_assert_str_eq(s, "scaler");
	c = accelp_config_free(c);

	/* a bad line names its number */
	c = mk(&e);
	char *bad[] = {"ACCEL_SET=seed=5\nnot an assignment\n", NULL};
	ck_assert_int_eq(accelp_config_load_env(c, bad, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "ACCEL_SET line 2 'not an assignment': expected KEY=VALUE");
	c = accelp_config_free(c);
}
END_TEST

/* A '\r' ending the last line: once a hang (the loop kept finding it). */
START_TEST(launch_sets_last_line_cr)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *env[] = {"ACCEL_SET=seed=3\r", NULL};
	int64_t i;
	ck_assert_int_eq(run(c, NULL, env, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 3);
	c = accelp_config_free(c);
	c = mk(&e);
	char *only_cr[] = {"ACCEL_SET=\r", NULL};
	ck_assert_int_eq(run(c, NULL, only_cr, NULL, &e), ACCEL_OK);
	c = accelp_config_free(c);
}
END_TEST

/* Member names that name no key: "" (it would stand for the group it is
 * in: {"": {...}} the root) and dotted names with an empty part. */
START_TEST(empty_key_names)
{
	static const char *const bad[][2] = {
		{"{\"\": {\"seed\": 3}}", "empty key at cfg.json:1:6: every setting has a name"},
		{"{\"optimizer\": {\"\": 1}}", "empty key at cfg.json:1:"},
		{"{\"optimizer..type\": \"sgd\"}",
		 "invalid key 'optimizer..type' at cfg.json:1:"},
		{"{\".seed\": 1}", "invalid key '.seed' at cfg.json:1:"},
		{"{\"seed.\": 1}", "invalid key 'seed.' at cfg.json:1:"},
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		accel_err e;
		accel_config *c = mk(&e);
		ck_assert_int_eq(run(c, bad[k][0], NULL, NULL, &e), ACCEL_ERR_CONFIG);
		ASSERT_MSG_HAS(e, bad[k][1]);
		c = accelp_config_free(c);
	}
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "optimizer={\"\": 1}", &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "empty key at --set optimizer={\"\": 1}");
	c = accelp_config_free(c);
}
END_TEST

/* Values from the command line and the environment: a JSON object with a
 * key twice, and text that is not UTF-8, are errors (not "out of memory",
 * not the last one silently winning). */
START_TEST(set_values_duplicates_and_utf8)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "optimizer={\"type\": \"sgd\", \"type\": \"adamw\"}",
	                     &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "duplicate object key");
	c = accelp_config_free(c);
	c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "metrics_file=/tmp/m\xe9.jsonl", &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "the value is not valid UTF-8 text");
	c = accelp_config_free(c);
	c = mk(&e);
	char *env[] = {"ACCEL_METRICS_FILE=/tmp/m\xff", NULL};
	ck_assert_int_eq(run(c, NULL, env, NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "env ACCEL_METRICS_FILE: the value is not valid UTF-8 text");
	c = accelp_config_free(c);
}
END_TEST

/* A NUL byte in a config file is an error (it used to end the text
 * there); a UTF-8 byte-order mark is skipped. */
START_TEST(file_nul_and_bom)
{
	accel_err e;
	accel_config *c = mk(&e);
	static const char nul[] = "{\"seed\": 1}\0{\"seed\": 2}";
	char path[] = "/tmp/accel-test-nul-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, nul, sizeof(nul) - 1), (ssize_t)(sizeof(nul) - 1));
	close(fd);
	ck_assert_int_eq(accelp_config_load_file(c, path, &e), ACCEL_ERR_CONFIG);
	unlink(path);
	ASSERT_MSG_HAS(e, ": contains a NUL byte (at byte 11)");
	c = accelp_config_free(c);
	c = mk(&e);
	int64_t i;
	ck_assert_int_eq(run(c, "\xef\xbb\xbf{\"seed\": 9}", NULL, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "seed", &i), ACCEL_OK);
	ck_assert_int_eq(i, 9);
	c = accelp_config_free(c);
}
END_TEST

START_TEST(env_reserved)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *env[] = {"ACCEL_RANK=3", "ACCEL_LOCAL_RANK=1", "ACCEL_WORLD_SIZE=4",
	               "ACCEL_LOCAL_WORLD_SIZE=4", "ACCEL_NODE_RANK=0", "ACCEL_NUM_NODES=1",
	               "ACCEL_MASTER_ADDR=127.0.0.1", "ACCEL_MASTER_PORT=29500",
	               "ACCEL_CONFIG=/nonexistent.json", "ACCEL_PLUGIN_PATH=/a:/b",
	               "ACCEL_LOG_ALL_RANKS=1", "ACCEL_JOB_ID=j1", "ACCEL_CLI=/bin/accel",
	               "ACCEL_TEST_ANYTHING=1", "ACCEL_BACKEND=", "ACCEL_LOG_LEVEL=debug",
	               "NOT_ACCEL_SEED=x", "ACCELSEED=1", NULL};
	const char *s;
	ck_assert_int_eq(run(c, NULL, env, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_string(c, "log_level", &s), ACCEL_OK);
	ck_assert_str_eq(s, "debug");
	ck_assert_str_eq(accelp_config_source(c, "log_level"), "env ACCEL_LOG_LEVEL");
	/* empty variables are ignored */
	ck_assert_int_eq(accelp_config_get_string(c, "backend", &s), ACCEL_OK);
	ck_assert_str_eq(s, "auto");
	ck_assert(accelp_config_env_reserved("ACCEL_MASTER_PORT"));
	ck_assert(accelp_config_env_reserved("ACCEL_TEST_SRCDIR"));
	ck_assert(!accelp_config_env_reserved("ACCEL_SEED"));
	c = accelp_config_free(c);

	/* the logger's numeric levels are accepted and named */
	c = mk(&e);
	char *env2[] = {"ACCEL_LOG_LEVEL=3", NULL};
	ck_assert_int_eq(run(c, NULL, env2, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_string(c, "log_level", &s), ACCEL_OK);
	ck_assert_str_eq(s, "debug");
	c = accelp_config_free(c);
}
END_TEST

/* ---- errors -------------------------------------------------------------------------------- */

START_TEST(unknown_key_file)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, "{\n  \"seed\": 1,\n    \"gradient_acumulation_steps\": 2\n}", NULL,
	                     NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(e.code, ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "unknown key 'gradient_acumulation_steps' at cfg.json:3:5; "
	                        "did you mean 'gradient_accumulation_steps'?");
	c = accelp_config_free(c);

	/* nested: the path is named in full; no close match lists the group */
	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"params\": {\"learning_rate\": 0.1}}}", NULL,
	                     NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "unknown key 'optimizer.params.learning_rate' at cfg.json:1:27; "
	                        "'optimizer.params' has: lr, betas, eps, weight_decay, momentum, "
	                        "dampening, nesterov");
	c = accelp_config_free(c);

	/* a plugin key at the wrong level */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(run(c, "{\"bucket_cap_mb\": 25}", NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "unknown key 'bucket_cap_mb' at cfg.json:1:2; did you mean "
	                        "'ddp.bucket_cap_mb'?");
	c = accelp_config_free(c);

	/* a group given a scalar */
	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": \"sgd\"}", NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "invalid value for 'optimizer' at cfg.json:1:15: it is a group of settings");
	ASSERT_MSG_HAS(e, "got string \"sgd\"");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(unknown_key_env)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *env[] = {"ACCEL_GRADIENT_ACUMULATION_STEPS=4", NULL};
	/* recorded at load, checked at resolve */
	ck_assert_int_eq(accelp_config_load_env(c, env, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "unknown key 'gradient_acumulation_steps' at env "
	                  "ACCEL_GRADIENT_ACUMULATION_STEPS; did you mean "
	                  "'gradient_accumulation_steps' (ACCEL_GRADIENT_ACCUMULATION_STEPS)?");
	c = accelp_config_free(c);

	c = mk(&e);
	char *env2[] = {"ACCEL_FROBNICATE_EVERYTHING=1", NULL};
	ck_assert_int_eq(run(c, NULL, env2, NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "unknown key 'frobnicate_everything' at env ACCEL_FROBNICATE_EVERYTHING");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(unknown_key_set)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "mixed_precison=bf16", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "unknown key 'mixed_precison' at --set mixed_precison=bf16; "
	                        "did you mean 'mixed_precision'?");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "optimizer={\"tpye\": \"sgd\"}", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "unknown key 'optimizer.tpye' at --set optimizer={\"tpye\": \"sgd\"}; "
	                        "did you mean 'optimizer.type'?");
	c = accelp_config_free(c);
}
END_TEST

/* Several problems: all are reported, each with its position, in document
 * order and then by layer; the cross-key checks wait for valid keys. */
START_TEST(several_errors)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *env[] = {"ACCEL_SEDE=4", NULL};
	ck_assert_int_eq(run(c, "{\n  \"seed\": \"x\",\n  \"gradient_acumulation_steps\": 2,\n"
	                        "  \"optimizer\": {\"params\": {\"lr\": -1}},\n"
	                        "  \"scheduler\": {\"type\": \"linear\"}\n}",
	                     env, "mixed_precison=bf16", &e), ACCEL_ERR_CONFIG);
	static const char *const want[] = {
		"invalid value for 'seed' at cfg.json:2:11: expected an integer >= 0, got string \"x\"",
		"unknown key 'gradient_acumulation_steps' at cfg.json:3:3; did you mean "
		"'gradient_accumulation_steps'?",
		"invalid value for 'optimizer.params.lr' at cfg.json:4:34: expected a number >= 0, "
		"got -1",
		"unknown key 'sede' at env ACCEL_SEDE; did you mean 'seed' (ACCEL_SEED)? (ACCEL_* "
		"variables set config keys; see docs/config.md)",
		"unknown key 'mixed_precison' at --set mixed_precison=bf16; did you mean "
		"'mixed_precision'?",
	};
	size_t n = sizeof(want) / sizeof(want[0]);
	ck_assert_uint_eq(accelp_config_error_count(c), n);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(accelp_config_error_get(c, (uint32_t)i), want[i]);
	ck_assert_ptr_null(accelp_config_error_get(c, (uint32_t)n));
	ck_assert_uint_eq(accelp_config_error_more(c), 0);
	/* the message: the first, then the others */
	char msg[ACCEL_ERRMSG_MAX];
	snprintf(msg, sizeof(msg), "%s; also: %s; also: %s; also: %s; also: %s", want[0], want[1],
	         want[2], want[3], want[4]);
	ck_assert_str_eq(e.msg, msg);
	/* scheduler.total_steps is missing for 'linear': a cross-key check,
	 * which is not run on a config with bad keys */
	ck_assert_ptr_null(strstr(e.msg, "total_steps"));
	c = accelp_config_free(c);

	/* more than the limit: the first ACCEL_CONFIG_ERRORS_MAX, and a count */
	char big[4096];
	size_t used = (size_t)snprintf(big, sizeof(big), "{");
	for (int i = 0; i < ACCEL_CONFIG_ERRORS_MAX + 5; i++)
		used += (size_t)snprintf(big + used, sizeof(big) - used, "%s\"bogus_%02d\": 1",
		                         i ? ", " : "", i);
	snprintf(big + used, sizeof(big) - used, "}");
	c = mk(&e);
	ck_assert_int_eq(run(c, big, NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_uint_eq(accelp_config_error_count(c), ACCEL_CONFIG_ERRORS_MAX);
	ck_assert_uint_eq(accelp_config_error_more(c), 5);
	ck_assert_ptr_nonnull(strstr(accelp_config_error_get(c, 19), "'bogus_19' at cfg.json:1:"));
	ck_assert_msg(strstr(e.msg, "more problems; `accel config validate` lists them)") != NULL,
	              "%s", e.msg);
	ck_assert_ptr_eq(strstr(e.msg, "unknown key 'bogus_00' at cfg.json:1:2"), e.msg);

	/* fixed, it resolves, and the list is empty again */
	accelp_err_clear(&e);
	c = accelp_config_free(c);
	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"seed\": 3}", NULL, NULL, &e), ACCEL_OK);
	ck_assert_uint_eq(accelp_config_error_count(c), 0);
	c = accelp_config_free(c);
}
END_TEST

START_TEST(wrong_type)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, "{\n  \"seed\": \"abc\"\n}", NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'seed' at cfg.json:2:11: expected an integer >= 0, "
	                        "got string \"abc\"");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"dataloader\": {\"shuffle\": 1}}", NULL, NULL, &e),
	                 ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'dataloader.shuffle' at cfg.json:1:28: expected "
	                        "true or false, got 1");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"plugins\": [\"scaler\",\n 3]}", NULL, NULL, &e),
	                 ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'plugins' at cfg.json:2:2: element 1 must be a "
	                        "string, got 3");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "seed=1.5", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'seed' at --set seed=1.5: expected an integer "
	                        ">= 0, got 1.5");
	c = accelp_config_free(c);

	/* an integral JSON real is an integer */
	c = mk(&e);
	int64_t i;
	ck_assert_int_eq(run(c, "{\"scheduler\": {\"total_steps\": 1e4}}", NULL, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "scheduler.total_steps", &i), ACCEL_OK);
	ck_assert_int_eq(i, 10000);
	c = accelp_config_free(c);
}
END_TEST

START_TEST(out_of_range)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, "{\"gradient_accumulation_steps\": 0}", NULL, NULL, &e),
	                 ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'gradient_accumulation_steps' at cfg.json:1:33: "
	                        "expected an integer in [1, 2147483647], got 0");
	c = accelp_config_free(c);

	c = mk(&e);
	char *env[] = {"ACCEL_COMM_TIMEOUT_S=0.0001", NULL}; /* would be 0 ms */
	ck_assert_int_eq(run(c, NULL, env, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'comm.timeout_s' at env ACCEL_COMM_TIMEOUT_S: "
	                        "expected a number in [0.001, 1000000000], got 0.0001");
	c = accelp_config_free(c);

	/* a timeout beyond 1e9 s would overflow the backends' nanosecond deadlines */
	c = mk(&e);
	char *env_big[] = {"ACCEL_COMM_TIMEOUT_S=1e300", NULL};
	ck_assert_int_eq(run(c, NULL, env_big, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'comm.timeout_s' at env ACCEL_COMM_TIMEOUT_S: "
	                        "expected a number in [0.001, 1000000000], got 1e+300");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"params\": {\"betas\": [0.9,\n   1.0]}}}", NULL,
	                     NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'optimizer.params.betas' at cfg.json:2:4: element "
	                        "1 is 1.0; expected a list of 2 numbers in [0, 1)");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "optimizer.params.betas=[0.9]", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'optimizer.params.betas' at --set "
	                        "optimizer.params.betas=[0.9]: expected a list of 2 numbers in [0, 1), "
	                        "got a list [0.9]");
	c = accelp_config_free(c);

	/* plugin ranges come from the schema */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "zero_optimization", "zero", zero_params, 4, 1,
	                                         &e), ACCEL_OK);
	ck_assert_int_eq(run(c, NULL, NULL, "zero_optimization.stage=4", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'zero_optimization.stage' at --set "
	                        "zero_optimization.stage=4: expected an integer in [0, 3], got 4");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(bad_enum)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, "{\"mixed_precision\": \"bf61\"}", NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'mixed_precision' at cfg.json:1:21: expected one of "
	                        "no|fp16|bf16|fp8, got string \"bf61\"; did you mean 'bf16'?");
	c = accelp_config_free(c);

	c = mk(&e);
	char *env[] = {"ACCEL_LOG_LEVEL=verbose", NULL};
	ck_assert_int_eq(run(c, NULL, env, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "invalid value for 'log_level' at env ACCEL_LOG_LEVEL: expected one "
	                        "of error|warn|info|debug|trace, got string \"verbose\"");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(syntax_error)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(accelp_config_load_string(c, "{\n  \"seed\": 1,\n  \"x\": }", "cfg.json", &e),
	                 ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "cfg.json:3:8: invalid JSON: unexpected token near '}'");
	c = accelp_config_free(c);

	/* duplicate keys are rejected, not silently resolved */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_string(c, "{\"seed\": 3,\n \"seed\": 4}", "cfg.json", &e),
	                 ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "cfg.json:2:7: invalid JSON: duplicate object key");
	c = accelp_config_free(c);

	/* and so is one key spelled two ways in one file */
	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer.type\": \"sgd\",\n \"optimizer\": {\"type\": \"sgd\"}}",
	                     NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "key 'optimizer.type' is given twice in cfg.json: at cfg.json:1:20 "
	                        "and at cfg.json:2:24");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_string(c, "[1, 2]", "cfg.json", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "cfg.json: the top level must be a JSON object ({...}) of settings");
	c = accelp_config_free(c);

	/* missing file: path and strerror */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_file(c, "/nonexistent/accel.json", &e), ACCEL_ERR_IO);
	ck_assert_str_eq(e.msg, "cannot open config file '/nonexistent/accel.json': No such file or "
	                        "directory");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(alias_conflict)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, "{\"max_grad_norm\": 1.0,\n \"gradient_clipping\": 2.0}", NULL, NULL,
	                     &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "'max_grad_norm' = 1.0 at cfg.json:1:19 and 'gradient_clipping' = 2.0 at "
	                        "cfg.json:2:23 set the same thing (gradient_clipping is an alias of "
	                        "max_grad_norm) to different values; keep one");
	c = accelp_config_free(c);

	/* the same value twice is fine; the alias reads the same */
	c = mk(&e);
	double d;
	ck_assert_int_eq(run(c, "{\"max_grad_norm\": 1, \"gradient_clipping\": 1.0}", NULL, NULL, &e),
	                 ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_double(c, "gradient_clipping", &d), ACCEL_OK);
	ck_assert_double_eq(d, 1.0);
	c = accelp_config_free(c);

	/* across layers the higher one wins, as for any key */
	c = mk(&e);
	char *env[] = {"ACCEL_GRADIENT_CLIPPING=0.5", NULL};
	ck_assert_int_eq(run(c, "{\"max_grad_norm\": 1.0}", env, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_double(c, "max_grad_norm", &d), ACCEL_OK);
	ck_assert_double_eq(d, 0.5);
	ck_assert_str_eq(accelp_config_source(c, "max_grad_norm"), "env ACCEL_GRADIENT_CLIPPING");
	c = accelp_config_free(c);

	/* two --set spellings in one layer disagree */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_set(c, "gradient_clipping=1", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(run(c, NULL, NULL, "max_grad_norm=2", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "'gradient_clipping' = 1.0 at --set gradient_clipping=1 and "
	                        "'max_grad_norm' = 2.0 at --set max_grad_norm=2 set the same thing "
	                        "(gradient_clipping is an alias of max_grad_norm) to different values; "
	                        "keep one");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(unselected_section)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_add_schema(c, "zero_optimization", "zero", zero_params, 4, 0,
	                                         &e), ACCEL_OK);
	ck_assert_int_eq(run(c, "{\n  \"zero_optimization\": {\"stage\": 2}\n}", NULL, NULL, &e),
	                 ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "section 'zero_optimization' (plugin zero) is set at cfg.json:2:3 but "
	                        "strategy is 'ddp' (default) and plugins is [] (default); select zero "
	                        "or remove the section");
	c = accelp_config_free(c);

	/* from the environment, with the strategy named in the file */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "zero_optimization", "zero", zero_params, 4, 0,
	                                         &e), ACCEL_OK);
	char *env[] = {"ACCEL_ZERO_OPTIMIZATION_STAGE=3", NULL};
	ck_assert_int_eq(run(c, "{\"strategy\": \"fsdp\"}", env, NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "section 'zero_optimization' (plugin zero) is set at env "
	                        "ACCEL_ZERO_OPTIMIZATION_STAGE but strategy is 'fsdp' (cfg.json:1:14) "
	                        "and plugins is [] (default); select zero or remove the section");
	c = accelp_config_free(c);

	/* a backend's section names the backend setting */
	static const accel_param_schema_v1 mpi_params[] = {
		{S, ACCEL_CFG_BOOL, "cuda_aware", "false", 1, 0, NULL, "MPI can read device memory"},
	};
	c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "mpi", "mpi", mpi_params, 1, ACCEL_SCHEMA_BACKEND,
	                                         &e), ACCEL_OK);
	ck_assert_int_eq(run(c, NULL, NULL, "mpi.cuda_aware=true", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "section 'mpi' (backend mpi) is set at --set mpi.cuda_aware=true but "
	                        "backend is 'auto' (default); select mpi or remove the section");
	c = accelp_config_free(c);

	/* keys of an unselected section that nobody set are simply not there */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "zero_optimization", "zero", zero_params, 4, 0,
	                                         &e), ACCEL_OK);
	ck_assert_int_eq(run(c, NULL, NULL, NULL, &e), ACCEL_OK);
	int64_t i;
	ck_assert_int_eq(accelp_config_get_int(c, "zero_optimization.stage", &i), ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_null(accelp_config_source(c, "zero_optimization.stage"));
	c = accelp_config_free(c);
}
END_TEST

START_TEST(plugin_keys)
{
	accel_err e;
	accel_config *c = mk(&e);
	int64_t i;
	double d;
	const char *s;
	int32_t b;

	ck_assert_int_eq(accelp_config_add_schema(c, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_add_schema(c, "zero_optimization", "zero", zero_params, 4, 1,
	                                         &e), ACCEL_OK);
	char *env[] = {"ACCEL_ZERO_OPTIMIZATION_OFFLOAD_OPTIMIZER_DEVICE=cpu", NULL};
	ck_assert_int_eq(run(c,
	                     "{\"ddp\": {\"bucket_cap_mb\": 50},\n"
	                     " \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
	                     "{\"device\": \"nvme\", \"nvme_path\": \"/tmp/nv\"}}}",
	                     env, "zero_optimization.stage=3", &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "ddp.bucket_cap_mb", &i), ACCEL_OK);
	ck_assert_int_eq(i, 50);
	ck_assert_str_eq(accelp_config_source(c, "ddp.bucket_cap_mb"), "cfg.json:1:27");
	ck_assert_int_eq(accelp_config_get_bool(c, "ddp.static_graph", &b), ACCEL_OK);
	ck_assert_int_eq(b, 0);
	ck_assert_int_eq(accelp_config_get_int(c, "zero_optimization.stage", &i), ACCEL_OK);
	ck_assert_int_eq(i, 3);
	ck_assert_str_eq(accelp_config_source(c, "zero_optimization.stage"),
	                 "--set zero_optimization.stage=3");
	ck_assert_int_eq(accelp_config_get_string(c, "zero_optimization.offload_optimizer.device", &s),
	                 ACCEL_OK);
	ck_assert_str_eq(s, "cpu");
	ck_assert_str_eq(accelp_config_source(c, "zero_optimization.offload_optimizer.device"),
	                 "env ACCEL_ZERO_OPTIMIZATION_OFFLOAD_OPTIMIZER_DEVICE");
	ck_assert_int_eq(accelp_config_get_string(c, "zero_optimization.offload_optimizer.nvme_path",
	                                         &s), ACCEL_OK);
	ck_assert_str_eq(s, "/tmp/nv");
	ck_assert_int_eq(accelp_config_get_double(c, "zero_optimization.reduce_bucket_size", &d),
	                 ACCEL_OK);
	ck_assert_double_eq(d, 5e8);
	c = accelp_config_free(c);

	/* a key without default stays unset */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "zero_optimization", "zero", zero_params, 4, 1,
	                                         &e), ACCEL_OK);
	ck_assert_int_eq(run(c, NULL, NULL, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_string(c, "zero_optimization.offload_optimizer.nvme_path",
	                                         &s), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_get_string(c, "zero_optimization.offload_optimizer.device", &s),
	                 ACCEL_OK);
	ck_assert_str_eq(s, "none");
	/* schemas come before resolve; a later one makes resolve needed again */
	ck_assert_int_eq(accelp_config_add_schema(c, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "ddp.bucket_cap_mb", &i), ACCEL_ERR_STATE);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_int(c, "ddp.bucket_cap_mb", &i), ACCEL_OK);
	ck_assert_int_eq(i, 25);
	c = accelp_config_free(c);
}
END_TEST

START_TEST(schema_errors)
{
	accel_err e;
	accel_config *c = mk(&e);

	/* two keys with one environment name */
	static const accel_param_schema_v1 a[] = {{S, ACCEL_CFG_INT, "b_c", "1", 1, 0, NULL, ""}};
	static const accel_param_schema_v1 ab[] = {{S, ACCEL_CFG_INT, "c", "1", 1, 0, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "a", "pa", a, 1, 1, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_add_schema(c, "a_b", "pab", ab, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ck_assert_str_eq(e.msg, "plugin 'pab' (section 'a_b') declares key 'a_b.c' whose environment "
	                        "name ACCEL_A_B_C is also the one of 'a.b_c' (pa); rename one of them");
	/* nothing of the failed schema stays */
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	int64_t i;
	ck_assert_int_eq(accelp_config_get_int(c, "a_b.c", &i), ACCEL_ERR_NOT_FOUND);

	/* same section twice, a core name, reserved env names, bad defaults */
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "a", "other", ab, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "overlaps section 'a' of plugin 'pa'");
	accelp_err_clear(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "optimizer", "bad", ab, 1, 1, &e),
	                 ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "overlaps the core key 'optimizer.type'");
	accelp_err_clear(&e);
	static const accel_param_schema_v1 rk[] = {{S, ACCEL_CFG_INT, "size", "1", 1, 0, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "world", "w", rk, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "ACCEL_WORLD_SIZE is reserved");
	accelp_err_clear(&e);
	static const accel_param_schema_v1 bd[] = {{S, ACCEL_CFG_INT, "n", "9", 0, 3, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "p1", "p1", bd, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "plugin 'p1' (section 'p1'): bad default: invalid value for 'p1.n'");
	accelp_err_clear(&e);
	static const accel_param_schema_v1 be[] = {{S, ACCEL_CFG_ENUM, "m", "\"x\"", 1, 0, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "p2", "p2", be, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "bad choices");
	accelp_err_clear(&e);
	static const accel_param_schema_v1 bk[] = {{S, ACCEL_CFG_INT, "bad key", "1", 1, 0, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "p3", "p3", bk, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "has key 'bad key'");
	accelp_err_clear(&e);
	static const accel_param_schema_v1 kg[] = {{S, ACCEL_CFG_INT, "x", "1", 1, 0, NULL, ""},
	                                           {S, ACCEL_CFG_INT, "x.y", "1", 1, 0, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "p4", "p4", kg, 2, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "a key cannot also be a group");
	accelp_err_clear(&e);
	accel_param_schema_v1 small[1] = {{S - 8, ACCEL_CFG_INT, "x", "1", 1, 0, NULL, ""}};
	ck_assert_int_eq(accelp_config_add_schema(c, "p5", "p5", small, 1, 1, &e), ACCEL_ERR_PLUGIN);
	ASSERT_MSG_HAS(e, "struct_size");
	c = accelp_config_free(c);
}
END_TEST

START_TEST(cross_checks)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(run(c, "{\"scheduler\": {\"type\": \"cosine\", \"warmup_steps\": 10}}", NULL,
	                     NULL, &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "scheduler.type is 'cosine' (cfg.json:1:24) but scheduler.total_steps "
	                        "is 0 (default); set scheduler.total_steps to the number of optimizer "
	                        "steps of the run");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"scheduler\": {\"type\": \"linear\", \"warmup_steps\": 10}}", NULL,
	                     "scheduler.total_steps=5", &e), ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "scheduler.warmup_steps (10, cfg.json:1:50) exceeds "
	                        "scheduler.total_steps (5, --set scheduler.total_steps=5)");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"params\": {\"momentum\": 0.9}}}", NULL, NULL, &e),
	                 ACCEL_ERR_CONFIG);
	ck_assert_str_eq(e.msg, "optimizer.params.momentum is set to 0.9 at cfg.json:1:39 but "
	                        "optimizer.type is 'adamw' (default), which does not use it; remove it "
	                        "or change optimizer.type");
	c = accelp_config_free(c);

	/* the default value of an unused key changes nothing and is accepted */
	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"eps\": 1e-8}}}",
	                     NULL, NULL, &e), ACCEL_OK);
	c = accelp_config_free(c);
	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"eps\": 1e-6}}}",
	                     NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "optimizer.params.eps is set to 1e-06 at cfg.json:1:49 but optimizer.type is "
	                  "'sgd' (cfg.json:1:24)");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"nesterov\": true}}}",
	                     NULL, NULL, &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "optimizer.params.nesterov (cfg.json:1:54) needs momentum > 0");
	c = accelp_config_free(c);

	c = mk(&e);
	ck_assert_int_eq(run(c, NULL, NULL, "scheduler.min_lr=1e-5", &e), ACCEL_ERR_CONFIG);
	ASSERT_MSG_HAS(e, "scheduler.min_lr is set to 1e-05 at --set scheduler.min_lr=1e-5 but "
	                  "scheduler.type is 'constant' (default)");
	c = accelp_config_free(c);

	/* a valid sgd + cosine setup; sgd with an explicit weight decay keeps it */
	c = mk(&e);
	double d;
	ck_assert_int_eq(run(c, "{\"optimizer\": {\"type\": \"sgd\", \"params\": {\"momentum\": 0.9, "
	                        "\"nesterov\": true, \"weight_decay\": 5e-4}},"
	                        " \"scheduler\": {\"type\": \"cosine\", \"total_steps\": 100, "
	                        "\"min_lr\": 1e-5}}", NULL, NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_get_double(c, "optimizer.params.weight_decay", &d), ACCEL_OK);
	ck_assert_double_eq(d, 5e-4);
	c = accelp_config_free(c);
}
END_TEST

START_TEST(peek)
{
	accel_err e;
	accel_config *c = mk(&e);
	const char *s;
	char *env[] = {"ACCEL_PLUGINS=scaler,fp8", "ACCEL_BACKEND=shm", NULL};

	/* defaults before anything is loaded */
	ck_assert_int_eq(accelp_config_peek_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "ddp");
	ck_assert_int_eq(accelp_config_peek_strlist(c, "plugins", 0, &s), ACCEL_ERR_NOT_FOUND);
	ck_assert_int_eq(accelp_config_peek_string(c, "no_such_key", &s), ACCEL_ERR_NOT_FOUND);

	ck_assert_int_eq(accelp_config_load_string(c, "{\"strategy\": \"zero\", \"plugins\": "
	                                          "[\"compress\"], \"plugin_dirs\": [\"/p1\", \"/p2\"],"
	                                          " \"backend\": \"mpi\", \"zero_optimization\": "
	                                          "{\"stage\": 3}}", "cfg.json", &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_peek_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "zero");
	ck_assert_int_eq(accelp_config_peek_strlist(c, "plugin_dirs", 1, &s), ACCEL_OK);
	ck_assert_str_eq(s, "/p2");
	ck_assert_int_eq(accelp_config_peek_strlist(c, "plugins", 0, &s), ACCEL_OK);
	ck_assert_str_eq(s, "compress");
	ck_assert_str_eq(accelp_config_source(c, "plugin_dirs"), "cfg.json:1:62");
	/* keys of sections nobody declared yet are reachable too */
	ck_assert_int_eq(accelp_config_peek_string(c, "zero_optimization.stage", &s), ACCEL_ERR_CONFIG);

	ck_assert_int_eq(accelp_config_load_env(c, env, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_peek_strlist(c, "plugins", 1, &s), ACCEL_OK);
	ck_assert_str_eq(s, "fp8");
	ck_assert_int_eq(accelp_config_peek_string(c, "backend", &s), ACCEL_OK);
	ck_assert_str_eq(s, "shm");
	ck_assert_int_eq(accelp_config_set(c, "strategy=fsdp", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_peek_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "fsdp");
	ck_assert_int_eq(accelp_config_set(c, "strategy=null", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_peek_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "ddp");
	/* wrong JSON types */
	ck_assert_int_eq(accelp_config_set(c, "plugin_dirs={\"a\": 1}", NULL, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_peek_strlist(c, "plugin_dirs", 0, &s), ACCEL_ERR_CONFIG);
	ck_assert_int_eq(e.code, ACCEL_OK);
	c = accelp_config_free(c);
}
END_TEST

/* ---- dumps ---------------------------------------------------------------------------------- */

static char *capture_dump(const accel_config *c, int json, int resolved, int sources)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	ck_assert_ptr_nonnull(f);
	if (json)
		ck_assert_int_eq(accelp_config_dump_json(c, f, resolved, sources), ACCEL_OK);
	else
		accelp_config_dump(c, f, resolved, sources);
	fclose(f);
	return buf;
}

START_TEST(dump)
{
	accel_err e;
	accel_config *c = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(run(c, prec_json, NULL, "ddp.bucket_cap_mb=50", &e), ACCEL_OK);

	char *t = capture_dump(c, 0, 0, 1);
	ck_assert_str_eq(t,
		"gradient_accumulation_steps = 2  # cfg.json:3:34\n"
		"seed = 1                         # cfg.json:2:11\n"
		"optimizer.type = \"adamw\"         # cfg.json:4:25\n"
		"optimizer.params.lr = 0.01       # cfg.json:4:51\n"
		"optimizer.params.eps = 1e-07     # cfg.json:4:64\n"
		"ddp.bucket_cap_mb = 50           # --set ddp.bucket_cap_mb=50\n");
	free(t);

	t = capture_dump(c, 0, 1, 0);
	ck_assert_ptr_nonnull(strstr(t, "strategy = \"ddp\"\n"));
	ck_assert_ptr_nonnull(strstr(t, "optimizer.params.betas = [0.9, 0.999]\n"));
	ck_assert_ptr_nonnull(strstr(t, "max_grad_norm = null\n"));
	ck_assert_ptr_nonnull(strstr(t, "ddp.static_graph = false\n"));
	ck_assert_ptr_null(strstr(t, "#"));
	free(t);

	/* JSON: the config part is itself a valid config file */
	t = capture_dump(c, 1, 1, 1);
	json_error_t je;
	json_t *j = json_loads(t, 0, &je);
	ck_assert_msg(j != NULL, "dump_json is not JSON: %s\n%s", je.text, t);
	json_t *cfgj = json_object_get(j, "config");
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(cfgj, "ddp"),
	                                                    "bucket_cap_mb")), 50);
	ck_assert_double_eq(json_number_value(json_object_get(json_object_get(json_object_get(cfgj,
	                    "optimizer"), "params"), "eps")), 1e-7);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "sources"), "seed")),
	                 "cfg.json:2:11");
	char *again = json_dumps(cfgj, 0);
	accel_config *c2 = mk(&e);
	ck_assert_int_eq(accelp_config_add_schema(c2, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_load_string(c2, again, "dumped", &e), ACCEL_OK);
	ck_assert_msg(accelp_config_resolve(c2, &e) == ACCEL_OK, "%s", e.msg);
	int64_t i;
	ck_assert_int_eq(accelp_config_get_int(c2, "ddp.bucket_cap_mb", &i), ACCEL_OK);
	ck_assert_int_eq(i, 50);
	c2 = accelp_config_free(c2);
	free(again);
	json_decref(j);
	free(t);
	c = accelp_config_free(c);

	/* before resolve: the raw layers */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_string(c, "{\"seed\": 1, \"x\": {\"y\": 2}}", "cfg.json",
	                                          &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_set(c, "seed=2", NULL, &e), ACCEL_OK);
	t = capture_dump(c, 0, 0, 1);
	ck_assert_str_eq(t, "seed = 1  # cfg.json:1:10\n"
	                    "x.y = 2   # cfg.json:1:24\n"
	                    "seed = 2  # --set seed=2\n");
	free(t);
	c = accelp_config_free(c);
}
END_TEST

/* ---- files ---------------------------------------------------------------------------------- */

static char *tmpdir(void)
{
	char *d = strdup("/tmp/accel-test-config-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
}

static void rm_rf(const char *dir)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(find_file)
{
	/* forked by Check: changing cwd and environment stays inside this test */
	char *d = tmpdir(), p[PATH_MAX];
	const char *from = "x";
	ck_assert_int_eq(chdir(d), 0);
	unsetenv("ACCEL_CONFIG");
	unsetenv("XDG_CONFIG_HOME");
	setenv("HOME", d, 1);

	ck_assert_ptr_null(accelp_config_find_file(&from));
	ck_assert_ptr_null(from);

	snprintf(p, sizeof(p), "%s/.config", d);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/.config/accel", d);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/.config/accel/default.json", d);
	write_file(p, "{}");
	ck_assert_str_eq(accelp_config_find_file(&from), p);
	ck_assert_str_eq(from, "~/.config/accel/default.json");

	/* XDG_CONFIG_HOME replaces ~/.config */
	setenv("XDG_CONFIG_HOME", "/nonexistent-xdg", 1);
	ck_assert_ptr_null(accelp_config_find_file(&from));
	snprintf(p, sizeof(p), "%s/xdg/accel", d);
	ck_assert_int_eq(system("mkdir -p xdg/accel && echo '{}' > xdg/accel/default.json"), 0);
	snprintf(p, sizeof(p), "%s/xdg", d);
	setenv("XDG_CONFIG_HOME", p, 1);
	snprintf(p, sizeof(p), "%s/xdg/accel/default.json", d);
	ck_assert_str_eq(accelp_config_find_file(&from), p);
	ck_assert_str_eq(from, "$XDG_CONFIG_HOME/accel/default.json");

	/* ./accel.json beats the user default */
	write_file("accel.json", "{}");
	ck_assert_str_eq(accelp_config_find_file(&from), "accel.json");
	ck_assert_str_eq(from, "./accel.json");

	/* ACCEL_CONFIG beats everything, even when missing (loading says so) */
	setenv("ACCEL_CONFIG", "/nonexistent/x.json", 1);
	ck_assert_str_eq(accelp_config_find_file(&from), "/nonexistent/x.json");
	ck_assert_str_eq(from, "ACCEL_CONFIG");
	ck_assert_str_eq(accelp_config_find_file(NULL), "/nonexistent/x.json");
	rm_rf(d);
	free(d);
}
END_TEST

START_TEST(load_file_positions)
{
	accel_err e;
	accel_config *c = mk(&e);
	char *d = tmpdir(), p[PATH_MAX];
	int64_t i;
	snprintf(p, sizeof(p), "%s/multi.json", d);
	/* tabs, CRLF, a non-ASCII string before the value, escapes in keys */
	write_file(p, "{\r\n\t\"strategy\": \"d\\u00e9p\xc3\xa9\", \"seed\": 11,\r\n"
	              "\t\"sched\\u0075ler\": {\"warmup_steps\": 3}\r\n}\r\n");
	ck_assert_int_eq(accelp_config_load_file(c, p, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_resolve(c, &e), ACCEL_OK);
	char want[PATH_MAX + 32];
	snprintf(want, sizeof(want), "%s:2:35", p);
	ck_assert_str_eq(accelp_config_source(c, "seed"), want);
	snprintf(want, sizeof(want), "%s:3:37", p);
	ck_assert_str_eq(accelp_config_source(c, "scheduler.warmup_steps"), want);
	ck_assert_int_eq(accelp_config_get_int(c, "scheduler.warmup_steps", &i), ACCEL_OK);
	ck_assert_int_eq(i, 3);
	c = accelp_config_free(c);

	/* a directory is not a config file */
	c = mk(&e);
	ck_assert_int_eq(accelp_config_load_file(c, d, &e), ACCEL_ERR_IO);
	ASSERT_MSG_HAS(e, "Is a directory");
	ASSERT_MSG_HAS(e, d);
	c = accelp_config_free(c);
	rm_rf(d);
	free(d);
}
END_TEST

START_TEST(example_ddp)
{
	accel_err e;
	accel_config *c = mk(&e);
	char p[PATH_MAX];
	int64_t i;
	const char *s;
	snprintf(p, sizeof(p), "%s/examples/configs/ddp.json", ACCEL_TEST_SRCDIR);
	ck_assert_int_eq(accelp_config_add_schema(c, "ddp", "ddp", ddp_params, 2, 1, &e), ACCEL_OK);
	ck_assert_int_eq(accelp_config_load_file(c, p, &e), ACCEL_OK);
	ck_assert_msg(accelp_config_resolve(c, &e) == ACCEL_OK, "%s", e.msg);
	ck_assert_int_eq(accelp_config_get_int(c, "ddp.bucket_cap_mb", &i), ACCEL_OK);
	ck_assert_int_eq(i, 25);
	ck_assert_int_eq(accelp_config_get_string(c, "strategy", &s), ACCEL_OK);
	ck_assert_str_eq(s, "ddp");
	ck_assert_int_eq(accelp_config_get_string(c, "optimizer.type", &s), ACCEL_OK);
	ck_assert_str_eq(s, "adamw");
	ck_assert_int_eq(accelp_config_get_string(c, "scheduler.type", &s), ACCEL_OK);
	ck_assert_str_ne(s, "constant");
	ck_assert_ptr_nonnull(strstr(accelp_config_source(c, "ddp.bucket_cap_mb"), "ddp.json:"));
	c = accelp_config_free(c);
}
END_TEST

/* ---- the CLI -------------------------------------------------------------------------------- */

typedef struct cli_result {
	int status;
	char out[16384];
} cli_result;

/* Run `accel ARGS...` with stdout and stderr together in r->out. */
static void cli(cli_result *r, const char *const *args)
{
	const char *exe = getenv("ACCEL_CLI");
	char path[PATH_MAX];
	if (!exe) {
		const char *b = getenv("ACCEL_TEST_BUILDDIR");
		ck_assert_msg(b != NULL, "ACCEL_CLI is not set (run through meson test)");
		snprintf(path, sizeof(path), "%s/cli/accel", b);
		exe = path;
	}
	int fd[2];
	ck_assert_int_eq(pipe(fd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fd[1], 1);
		dup2(fd[1], 2);
		close(fd[0]);
		close(fd[1]);
		char *argv[32];
		int n = 0;
		argv[n++] = (char *)exe;
		for (; args[n - 1] && n < 31; n++)
			argv[n] = (char *)args[n - 1];
		argv[n] = NULL;
		execv(exe, argv);
		_exit(127);
	}
	close(fd[1]);
	size_t used = 0;
	ssize_t k;
	while ((k = read(fd[0], r->out + used, sizeof(r->out) - 1 - used)) > 0)
		used += (size_t)k;
	r->out[used] = '\0';
	close(fd[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define CLI_HAS(r, s) ck_assert_msg(strstr((r).out, (s)) != NULL, "output lacks '%s':\n%s", (s), \
	(r).out)

START_TEST(cli_validate)
{
	static cli_result r;
	char *d = tmpdir(), good[PATH_MAX], bad[PATH_MAX], ex[PATH_MAX];
	unsetenv("ACCEL_CONFIG");
	snprintf(good, sizeof(good), "%s/good.json", d);
	snprintf(bad, sizeof(bad), "%s/bad.json", d);
	snprintf(ex, sizeof(ex), "%s/examples/configs/ddp.json", ACCEL_TEST_SRCDIR);
	write_file(good, "{\"seed\": 1, \"optimizer\": {\"type\": \"sgd\"}}\n");
	write_file(bad, "{\n  \"seed\": 1,\n  \"gradient_acumulation_steps\": 2\n}\n");

	cli(&r, (const char *[]){"config", "validate", good, NULL});
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.out);
	char want[PATH_MAX + 8];
	snprintf(want, sizeof(want), "%s: ok\n", good);
	ck_assert_str_eq(r.out, want);

	cli(&r, (const char *[]){"config", "validate", bad, NULL});
	ck_assert_int_eq(r.status, 1);
	CLI_HAS(r, "unknown key 'gradient_acumulation_steps'");
	snprintf(want, sizeof(want), "%s:3:3", bad);
	CLI_HAS(r, want);
	CLI_HAS(r, "did you mean 'gradient_accumulation_steps'?");

	/* several problems: one line each, with its position */
	write_file(bad, "{\n  \"seed\": \"x\",\n  \"gradient_acumulation_steps\": 2\n}\n");
	cli(&r, (const char *[]){"config", "validate", "--no-env", bad, NULL});
	ck_assert_int_eq(r.status, 1);
	static char want2[4 * PATH_MAX + 256];
	snprintf(want2, sizeof(want2), "%s: error: invalid value for 'seed' at %s:2:11: expected "
	         "an integer >= 0, got string \"x\"\n%s: error: unknown key "
	         "'gradient_acumulation_steps' at %s:3:3; did you mean "
	         "'gradient_accumulation_steps'?\n", bad, bad, bad, bad);
	CLI_HAS(r, want2);

	cli(&r, (const char *[]){"config", "validate", "/nonexistent/cfg.json", NULL});
	ck_assert_int_eq(r.status, 1);
	CLI_HAS(r, "/nonexistent/cfg.json");
	CLI_HAS(r, "No such file or directory");

	/* the example needs the ddp plugin's schema, found by the loader */
	cli(&r, (const char *[]){"config", "validate", ex, NULL});
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.out);
	CLI_HAS(r, "ddp.json: ok");
	rm_rf(d);
	free(d);
}
END_TEST

START_TEST(cli_show)
{
	static cli_result r;
	unsetenv("ACCEL_CONFIG");
	ck_assert_int_eq(chdir("/"), 0);
	cli(&r, (const char *[]){"config", "show", "--resolved", "--set", "seed=7", "--set",
	                         "optimizer.params.lr=0.5", NULL});
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.out);
	CLI_HAS(r, "seed = 7");
	CLI_HAS(r, "# --set seed=7");
	CLI_HAS(r, "strategy = \"ddp\"");
	CLI_HAS(r, "# default");

	cli(&r, (const char *[]){"config", "show", "--json", "--set", "seed=7", NULL});
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.out);
	json_error_t je;
	json_t *j = json_loads(r.out, 0, &je);
	ck_assert_msg(j != NULL, "not JSON (%s): %s", je.text, r.out);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "config"), "seed")), 7);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "sources"), "seed")),
	                 "--set seed=7");
	/* without --resolved only what was set */
	ck_assert_ptr_null(json_object_get(json_object_get(j, "config"), "strategy"));
	json_decref(j);

	cli(&r, (const char *[]){"config", "show", "--set", "seed=-1", NULL});
	ck_assert_int_eq(r.status, 1);
	CLI_HAS(r, "invalid value for 'seed' at --set seed=-1");

	/* show prints what the layers say, also a module this machine lacks;
	 * validate checks the modules and the context's selection rules */
	cli(&r, (const char *[]){"config", "show", "--set", "backend=elsewhere", NULL});
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.out);
	CLI_HAS(r, "backend = \"elsewhere\"");
	char empty[] = "/tmp/accel-test-empty-XXXXXX";
	int fd = mkstemp(empty);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "{}", 2), 2);
	close(fd);
	cli(&r, (const char *[]){"config", "validate", "--set", "backend=elsewhere", empty, NULL});
	ck_assert_int_eq(r.status, 1);
	CLI_HAS(r, "backend 'elsewhere' (from --set backend=elsewhere): no comm backend named "
	           "'elsewhere'");
	cli(&r, (const char *[]){"config", "validate", "--set", "plugins=ddp", empty, NULL});
	unlink(empty);
	ck_assert_int_eq(r.status, 1);
	CLI_HAS(r, "'ddp' is listed in plugins (--set plugins=ddp) but is the strategy");
}
END_TEST

START_TEST(cli_usage)
{
	static cli_result r;
	cli(&r, (const char *[]){"config", NULL});
	ck_assert_int_eq(r.status, 2);
	CLI_HAS(r, "accel config --help");
	cli(&r, (const char *[]){"config", "frobnicate", NULL});
	ck_assert_int_eq(r.status, 2);
	CLI_HAS(r, "unknown subcommand 'frobnicate'");
	cli(&r, (const char *[]){"config", "validate", NULL});
	ck_assert_int_eq(r.status, 2);
	CLI_HAS(r, "accel config validate --help");
	cli(&r, (const char *[]){"config", "show", "--bogus", NULL});
	ck_assert_int_eq(r.status, 2);
	CLI_HAS(r, "unknown option '--bogus'");
	cli(&r, (const char *[]){"config", "show", "--set", NULL});
	ck_assert_int_eq(r.status, 2);
	cli(&r, (const char *[]){"config", "show", "--set", "seed", NULL});
	ck_assert_int_eq(r.status, 2);
	CLI_HAS(r, "KEY=VALUE");
	/* show FILE is show --config FILE: one file */
	cli(&r, (const char *[]){"config", "show", "one.json", "two.json", NULL});
	ck_assert_int_eq(r.status, 2);
	CLI_HAS(r, "one config file only");

	cli(&r, (const char *[]){"config", "--help", NULL});
	ck_assert_int_eq(r.status, 0);
	CLI_HAS(r, "Usage: accel config");
	cli(&r, (const char *[]){"config", "validate", "--help", NULL});
	ck_assert_int_eq(r.status, 0);
	CLI_HAS(r, "Usage: accel config validate");
	cli(&r, (const char *[]){"config", "show", "--help", NULL});
	ck_assert_int_eq(r.status, 0);
	CLI_HAS(r, "Usage: accel config show");
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, defaults);
	tcase_add_test(tc, precedence);
	tcase_add_test(tc, set_values);
	tcase_add_test(tc, launch_sets);
	tcase_add_test(tc, launch_sets_last_line_cr);
	tcase_add_test(tc, empty_key_names);
	tcase_add_test(tc, set_values_duplicates_and_utf8);
	tcase_add_test(tc, file_nul_and_bom);
	tcase_add_test(tc, env_reserved);
	tcase_add_test(tc, unknown_key_file);
	tcase_add_test(tc, several_errors);
	tcase_add_test(tc, unknown_key_env);
	tcase_add_test(tc, unknown_key_set);
	tcase_add_test(tc, wrong_type);
	tcase_add_test(tc, out_of_range);
	tcase_add_test(tc, bad_enum);
	tcase_add_test(tc, syntax_error);
	tcase_add_test(tc, alias_conflict);
	tcase_add_test(tc, unselected_section);
	tcase_add_test(tc, plugin_keys);
	tcase_add_test(tc, schema_errors);
	tcase_add_test(tc, cross_checks);
	tcase_add_test(tc, peek);
	tcase_add_test(tc, dump);
	tcase_add_test(tc, find_file);
	tcase_add_test(tc, load_file_positions);
	tcase_add_test(tc, example_ddp);
	suite_add_tcase(s, tc);

	TCase *tcli = tcase_create("cli");
	tcase_set_timeout(tcli, 60);
	tcase_add_test(tcli, cli_validate);
	tcase_add_test(tcli, cli_show);
	tcase_add_test(tcli, cli_usage);
	suite_add_tcase(s, tcli);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
