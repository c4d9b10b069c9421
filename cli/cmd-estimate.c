/* SPDX-License-Identifier: MIT */
/* cli/cmd-estimate.c: `accel estimate-memory`: per-rank bytes of each
 * strategy and ZeRO variant for a model, from the strategy plugins' own
 * estimate_memory slots (core/estimate.c calls them; nothing of a
 * strategy's arithmetic lives here). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "cli.h"
#include "estimate.h"
#include "safetensors.h"
#include "setup.h"

#define SUB "estimate-memory"
#define MAX_SETS 64
#define MAX_STRATEGIES 16

static void help(void)
{
	printf(
		"Usage: accel estimate-memory (--params N | --model FILE.safetensors) [--world W]\n"
		"                             [--config FILE] [--set KEY=VALUE]... [--device cpu|cuda]\n"
		"                             [--strategy NAME]... [--json]\n"
		"\n"
		"Per-rank memory of a model's parameters, gradients, master weights,\n"
		"optimizer state and buffers under ddp, every ZeRO stage (0-3) with\n"
		"each offload variant (optimizer to cpu/nvme; at stage 3 parameters too)\n"
		"and every fsdp sharding_strategy with and without cpu_offload (the STAGE\n"
		"column names the sharding strategy), as each strategy plugin computes\n"
		"it for itself.  Nothing is allocated.\n"
		"\n"
		"The working dtype comes from the config's mixed_precision (no: f32;\n"
		"fp16: f16; bf16, fp8: bf16) and the optimizer state from optimizer.type\n"
		"(adamw: 2 f32 arrays per element; sgd: 1 with momentum, else 0).  A row\n"
		"sets zero_optimization.stage and offload_{optimizer,param}.device over\n"
		"the config (fsdp rows: fsdp.sharding_strategy and fsdp.cpu_offload); the\n"
		"config's other keys (bucket sizes, wrap policy, ...) apply as set.\n"
		"\n"
		"Options:\n"
		"  --params N         the model's parameter count: 125000000, 125M, 7.5B\n"
		"                     (k, M, B or G, T: powers of 1000), one tensor\n"
		"  --model FILE       a safetensors file (train_mlp --save-init writes one):\n"
		"                     its tensors are the parameters, in the file's order;\n"
		"                     tensors named PREFIX.x form the unit PREFIX; their\n"
		"                     dtypes are ignored (the working dtype is the config's)\n"
		"  --world W          ranks of the job (default 1)\n"
		"  --config FILE      the config (default: $ACCEL_CONFIG, ./accel.json,\n"
		"                     ~/.config/accel/default.json); --set KEY=VALUE over it\n"
		"  --device KIND      where the parameters live: cuda (default) or cpu\n"
		"  --strategy NAME    only this strategy's rows (repeatable); another\n"
		"                     installed strategy plugin gets one row, its config\n"
		"  --json             one JSON object per row (JSON Lines); notes on stderr\n"
		"  -h, --help         show this help\n"
		"\n"
		"Sizes print in powers of 1000 (1 GB = 10^9 bytes); --json gives bytes.\n"
		"A strategy that is not installed, or gives no estimate, is a note, not\n"
		"an error.\n"
		"\n"
		"Exit status: 0 success, 1 a row failed (config error) or none could be\n"
		"computed, 2 bad usage.\n");
}

/* ---- the rows ------------------------------------------------------------------ */

typedef struct variant {
	const char *strategy;
	int stage;                 /* -1: not a ZeRO row           */
	const char *opt, *param;   /* offload devices (ZeRO rows)   */
	const char *sharding;      /* fsdp rows: sharding_strategy  */
	int cpu_offload;           /* fsdp rows: cpu_offload        */
} variant;

/* DeepSpeed offloads the optimizer at stages 1-3 and the parameters at
 * stage 3 only; parameters go where the optimizer goes. */
static const variant zero_rows[] = {
	{"zero", 0, "none", "none", NULL, 0},
	{"zero", 1, "none", "none", NULL, 0}, {"zero", 1, "cpu", "none", NULL, 0}, {"zero", 1, "nvme", "none", NULL, 0},
	{"zero", 2, "none", "none", NULL, 0}, {"zero", 2, "cpu", "none", NULL, 0}, {"zero", 2, "nvme", "none", NULL, 0},
	{"zero", 3, "none", "none", NULL, 0}, {"zero", 3, "cpu", "none", NULL, 0}, {"zero", 3, "nvme", "none", NULL, 0},
	{"zero", 3, "cpu", "cpu", NULL, 0},   {"zero", 3, "nvme", "nvme", NULL, 0},
};

/* fsdp: each sharding strategy without and with cpu_offload (which moves
 * the optimizer, and with a sharded strategy the parameter blocks, to the
 * host). */
static const variant fsdp_rows[] = {
	{"fsdp", -1, NULL, NULL, "FULL_SHARD", 0},    {"fsdp", -1, NULL, NULL, "FULL_SHARD", 1},
	{"fsdp", -1, NULL, NULL, "SHARD_GRAD_OP", 0}, {"fsdp", -1, NULL, NULL, "SHARD_GRAD_OP", 1},
	{"fsdp", -1, NULL, NULL, "NO_SHARD", 0},      {"fsdp", -1, NULL, NULL, "NO_SHARD", 1},
	{"fsdp", -1, NULL, NULL, "HYBRID_SHARD", 0},  {"fsdp", -1, NULL, NULL, "HYBRID_SHARD", 1},
};

typedef struct row {
	variant v;
	int status;                /* ACCEL_OK or the estimate's error */
	accelp_estimate_result res;
	char offload[32];
} row;

static const char *offload_label(const variant *v, char *buf, size_t cap)
{
	if (v->sharding)
		snprintf(buf, cap, !v->cpu_offload ? "none"
		                   : strcmp(v->sharding, "NO_SHARD") ? "optimizer+param:cpu"
		                                                     : "optimizer:cpu");
	else if (v->stage < 0 || !strcmp(v->opt, "none"))
		snprintf(buf, cap, "none");
	else if (!strcmp(v->param, "none"))
		snprintf(buf, cap, "optimizer:%s", v->opt);
	else
		snprintf(buf, cap, "optimizer+param:%s", v->opt);
	return buf;
}

/* ---- arguments ------------------------------------------------------------------ */

/* "7500000000", "7.5B", "125M", "1e9": a whole, positive count. */
static int parse_count(const char *s, uint64_t *ret)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno)
		return -1;
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1e3; end++; break;
	case 'M': mul = 1e6; end++; break;
	case 'B': case 'G': mul = 1e9; end++; break;
	case 'T': mul = 1e12; end++; break;
	default: break;
	}
	if (*end || !(v > 0))
		return -1;
	/* whole counts only: 7.5B is one, 1.5 is not */
	double n = v * mul;
	if (n != floor(n) || n >= 1.8e19)
		return -1;
	/* doubles above 2^53 are whole but not exact: take the digits as given */
	if (mul == 1 && strspn(s, "0123456789") == strlen(s)) {
		*ret = strtoull(s, NULL, 10);
		return errno ? -1 : 0;
	}
	*ret = (uint64_t)n;
	return 0;
}

/* The parameters of a safetensors file: element counts in data order,
 * units by name prefix (up to the last '.') in order of first use. */
typedef struct model {
	uint64_t *numel, *unit_numel, total;
	uint32_t n, n_units;
} model;

static int by_offset(const void *a, const void *b)
{
	const accel_st_tensor *x = *(const accel_st_tensor *const *)a;
	const accel_st_tensor *y = *(const accel_st_tensor *const *)b;
	return (x->offset > y->offset) - (x->offset < y->offset);
}

static int same_unit(const char *unit, const char *name, size_t len)
{
	return strlen(unit) == len && !strncmp(unit, name, len);
}

static int load_model(const char *path, model *m)
{
	accel_st_reader *rd = NULL;
	accel_err err;
	accelp_err_clear(&err);
	memset(m, 0, sizeof(*m));
	if (accelp_st_reader_new(path, &rd, &err)) {
		fprintf(stderr, "accel " SUB ": --model: %s\n", err.msg);
		return 1;
	}
	uint32_t n = accelp_st_reader_count(rd);
	if (!n) {
		fprintf(stderr, "accel " SUB ": --model %s holds no tensors\n", path);
		accelp_st_reader_free(rd);
		return 1;
	}
	const accel_st_tensor **t = calloc(n, sizeof(*t));
	char **unit = calloc(n, sizeof(*unit));
	m->numel = calloc(n, sizeof(uint64_t));
	m->unit_numel = calloc(n, sizeof(uint64_t));
	int rc = 1;
	if (!t || !unit || !m->numel || !m->unit_numel)
		goto nomem;
	for (uint32_t i = 0; i < n; i++)
		t[i] = accelp_st_reader_get(rd, i);
	/* data order is the writer's order of tensors (within a dtype) */
	qsort(t, n, sizeof(*t), by_offset);
	for (uint32_t i = 0; i < n; i++) {
		const char *dot = strrchr(t[i]->name, '.');
		size_t len = dot ? (size_t)(dot - t[i]->name) : strlen(t[i]->name);
		uint32_t u = m->n_units;
		/* a unit's tensors are usually together: the last unit first */
		if (u && same_unit(unit[u - 1], t[i]->name, len))
			u--;
		else
			for (u = 0; u < m->n_units; u++)
				if (same_unit(unit[u], t[i]->name, len))
					break;
		if (u == m->n_units && !(unit[m->n_units++] = strndup(t[i]->name, len)))
			goto nomem;
		m->unit_numel[u] += t[i]->numel;
		m->numel[i] = t[i]->numel;
		m->total += t[i]->numel;
	}
	m->n = n;
	rc = 0;
	if (!m->total) {
		fprintf(stderr, "accel " SUB ": --model %s: its tensors hold no elements\n", path);
		rc = 1;
	}
	goto out;
nomem:
	fprintf(stderr, "accel " SUB ": out of memory\n");
out:
	if (unit)
		for (uint32_t u = 0; u < m->n_units; u++)
			free(unit[u]);
	free(unit);
	free(t);
	accelp_st_reader_free(rd);
	return rc;
}

/* ---- output -------------------------------------------------------------------- */

/* Three significant digits in powers of 1000, as the ZeRO paper rounds. */
static const char *human(uint64_t b, char *buf, size_t cap)
{
	static const char *const unit[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
	double v = (double)b;
	int u = 0;
	while (v >= 999.5 && u < 6) {
		v /= 1000;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%llu B", (unsigned long long)b);
	else
		snprintf(buf, cap, "%.3g %s", v, unit[u]);
	return buf;
}

static uint64_t cat(const accel_estimate_out_v1 *o, int c)
{
	uint64_t s = 0;
	for (int p = 0; p < ACCEL_EST_PLACES; p++)
		s += o->bytes[p][c];
	return s;
}

static uint64_t place(const accel_estimate_out_v1 *o, int p)
{
	uint64_t s = 0;
	for (int c = 0; c < ACCEL_EST_CATEGORIES; c++)
		s += o->bytes[p][c];
	return s;
}

static uint64_t model_states(const accel_estimate_out_v1 *o)
{
	return cat(o, ACCEL_MEM_PARAMS) + cat(o, ACCEL_MEM_GRADS) + cat(o, ACCEL_MEM_MASTER) +
	       cat(o, ACCEL_MEM_OPTIMIZER);
}

static int print_json(const row *r, int32_t world, uint64_t params)
{
	const accel_estimate_out_v1 *o = &r->res.out;
	json_t *j = json_object();
	if (!j)
		return -1;
	json_object_set_new(j, "strategy", json_string(r->v.strategy));
	json_object_set_new(j, "stage", r->v.stage < 0 ? json_null() : json_integer(r->v.stage));
	json_object_set_new(j, "offload", json_string(r->offload));
	json_object_set_new(j, "world", json_integer(world));
	json_object_set_new(j, "params", json_integer((json_int_t)params));
	json_object_set_new(j, "params_bytes", json_integer((json_int_t)cat(o, ACCEL_MEM_PARAMS)));
	json_object_set_new(j, "grads_bytes", json_integer((json_int_t)cat(o, ACCEL_MEM_GRADS)));
	json_object_set_new(j, "master_bytes", json_integer((json_int_t)cat(o, ACCEL_MEM_MASTER)));
	json_object_set_new(j, "optimizer_bytes",
	                    json_integer((json_int_t)cat(o, ACCEL_MEM_OPTIMIZER)));
	json_object_set_new(j, "buffers_bytes", json_integer((json_int_t)cat(o, ACCEL_MEM_BUFFERS)));
	json_object_set_new(j, "model_states_bytes", json_integer((json_int_t)model_states(o)));
	json_object_set_new(j, "offload_bytes", json_integer((json_int_t)cat(o, ACCEL_MEM_OFFLOAD)));
	json_object_set_new(j, "device_bytes", json_integer((json_int_t)place(o, ACCEL_EST_DEVICE)));
	json_object_set_new(j, "host_bytes", json_integer((json_int_t)place(o, ACCEL_EST_HOST)));
	json_object_set_new(j, "nvme_bytes", json_integer((json_int_t)place(o, ACCEL_EST_NVME)));
	const char *oo = r->v.stage < 0 ? "none" : r->v.opt;
	const char *op = r->v.stage < 0 ? "none" : r->v.param;
	if (r->v.sharding && r->v.cpu_offload) {
		/* fsdp: the optimizer, and with a sharded strategy the parameters */
		oo = "cpu";
		op = strcmp(r->v.sharding, "NO_SHARD") ? "cpu" : "none";
	}
	json_object_set_new(j, "offload_optimizer", json_string(oo));
	json_object_set_new(j, "offload_param", json_string(op));
	json_object_set_new(j, "variant", json_string(o->variant));
	json_object_set_new(j, "dtype", json_string(accel_abi_dtype_name(r->res.dtype)));
	json_object_set_new(j, "optimizer_states", json_integer(r->res.n_state));
	if (r->v.sharding)
		json_object_set_new(j, "sharding_strategy", json_string(r->v.sharding));
	char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
	json_decref(j);
	if (!s)
		return -1;
	puts(s);
	free(s);
	return 0;
}

static void print_table(const row *rows, uint32_t n)
{
	char b[10][32];
	printf("%-8s %-13s %-21s %9s %9s %9s %9s %9s %9s %12s %9s %9s %9s\n", "STRATEGY", "STAGE",
	       "OFFLOAD", "PARAMS", "GRADS", "MASTER", "OPTIMIZER", "BUFFERS", "OFFLOAD",
	       "MODEL-STATES", "DEVICE", "HOST", "NVME");
	for (uint32_t i = 0; i < n; i++) {
		const row *r = &rows[i];
		if (r->status)
			continue;
		const accel_estimate_out_v1 *o = &r->res.out;
		char stage[16];
		if (r->v.sharding)
			snprintf(stage, sizeof(stage), "%s", r->v.sharding);
		else
			snprintf(stage, sizeof(stage), r->v.stage < 0 ? "-" : "%d", r->v.stage);
		printf("%-8s %-13s %-21s %9s %9s %9s %9s %9s %9s %12s %9s %9s %9s\n", r->v.strategy,
		       stage, r->offload, human(cat(o, ACCEL_MEM_PARAMS), b[0], 32),
		       human(cat(o, ACCEL_MEM_GRADS), b[1], 32), human(cat(o, ACCEL_MEM_MASTER), b[2], 32),
		       human(cat(o, ACCEL_MEM_OPTIMIZER), b[3], 32),
		       human(cat(o, ACCEL_MEM_BUFFERS), b[4], 32),
		       human(cat(o, ACCEL_MEM_OFFLOAD), b[5], 32), human(model_states(o), b[6], 32),
		       human(place(o, ACCEL_EST_DEVICE), b[7], 32),
		       human(place(o, ACCEL_EST_HOST), b[8], 32),
		       human(place(o, ACCEL_EST_NVME), b[9], 32));
	}
}

/* ---- the command ---------------------------------------------------------------- */

typedef struct args {
	uint64_t params;
	const char *model_file;
	int32_t world;
	int32_t device;
	const char *config;
	const char *sets[MAX_SETS + 1];
	int n_sets;
	const char *strategies[MAX_STRATEGIES];
	int n_strategies;
	int json;
} args;

static int parse(int argc, char **argv, args *a)
{
	static const struct option longopts[] = {
		{"params", required_argument, NULL, 'p'},
		{"model", required_argument, NULL, 'm'},
		{"world", required_argument, NULL, 'w'},
		{"config", required_argument, NULL, 'c'},
		{"set", required_argument, NULL, 's'},
		{"device", required_argument, NULL, 'd'},
		{"strategy", required_argument, NULL, 'S'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char *end;
	int c;
	memset(a, 0, sizeof(*a));
	a->world = 1;
	a->device = ACCEL_DEVICE_CUDA;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			help();
			return -1;
		case 'p':
			if (parse_count(optarg, &a->params))
				return accelp_cli_usage_error(SUB, "--params '%s': expected a whole count of "
				                              "parameters such as 7500000000, 7.5B or 125M",
				                              optarg);
			break;
		case 'm':
			if (!*optarg)
				return accelp_cli_usage_error(SUB, "--model needs a safetensors file");
			a->model_file = optarg;
			break;
		case 'w': {
			errno = 0;
			long w = strtol(optarg, &end, 10);
			if (!*optarg || *end || errno || w < 1 || w > 16777216)
				return accelp_cli_usage_error(SUB, "--world '%s': expected the number of "
				                              "ranks, 1..16777216", optarg);
			a->world = (int32_t)w;
			break;
		}
		case 'c':
			a->config = optarg;
			break;
		case 's':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return accelp_cli_usage_error(SUB, "--set '%s' is not KEY=VALUE", optarg);
			if (a->n_sets == MAX_SETS)
				return accelp_cli_usage_error(SUB, "more than %d --set options", MAX_SETS);
			a->sets[a->n_sets++] = optarg;
			break;
		case 'd':
			if (!strcmp(optarg, "cuda"))
				a->device = ACCEL_DEVICE_CUDA;
			else if (!strcmp(optarg, "cpu"))
				a->device = ACCEL_DEVICE_CPU;
			else
				return accelp_cli_usage_error(SUB, "--device '%s': expected cuda or cpu",
				                              optarg);
			break;
		case 'S':
			if (!*optarg)
				return accelp_cli_usage_error(SUB, "--strategy needs a plugin name");
			if (a->n_strategies == MAX_STRATEGIES)
				return accelp_cli_usage_error(SUB, "more than %d --strategy options",
				                              MAX_STRATEGIES);
			a->strategies[a->n_strategies++] = optarg;
			break;
		case 'j':
			a->json = 1;
			break;
		case ':':
			return accelp_cli_usage_error(SUB, "option '%s' needs a value", argv[optind - 1]);
		default:
			return accelp_cli_usage_error(SUB, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return accelp_cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
	if (a->params && a->model_file)
		return accelp_cli_usage_error(SUB, "--params and --model both give the model; "
		                              "use one");
	if (!a->params && !a->model_file)
		return accelp_cli_usage_error(SUB, "no model: give --params N or --model "
		                              "FILE.safetensors");
	return 0;
}

static int wanted(const args *a, const char *strategy)
{
	if (!a->n_strategies)
		return 1;
	for (int i = 0; i < a->n_strategies; i++)
		if (!strcmp(a->strategies[i], strategy))
			return 1;
	return 0;
}

/* The rows: ddp, the ZeRO variants, the fsdp variants, then each
 * --strategy that is none of those. */
static uint32_t plan(const args *a, row *rows)
{
	uint32_t n = 0;
	if (wanted(a, "ddp"))
		rows[n++].v = (variant){"ddp", -1, NULL, NULL, NULL, 0};
	if (wanted(a, "zero"))
		for (size_t i = 0; i < sizeof(zero_rows) / sizeof(zero_rows[0]); i++)
			rows[n++].v = zero_rows[i];
	if (wanted(a, "fsdp"))
		for (size_t i = 0; i < sizeof(fsdp_rows) / sizeof(fsdp_rows[0]); i++)
			rows[n++].v = fsdp_rows[i];
	for (int i = 0; i < a->n_strategies; i++) {
		const char *s = a->strategies[i];
		int dup = !strcmp(s, "ddp") || !strcmp(s, "zero") || !strcmp(s, "fsdp");
		for (int j = 0; j < i; j++)
			dup |= !strcmp(a->strategies[j], s);
		if (!dup)
			rows[n++].v = (variant){s, -1, NULL, NULL, NULL, 0};
	}
	for (uint32_t i = 0; i < n; i++)
		offload_label(&rows[i].v, rows[i].offload, sizeof(rows[i].offload));
	return n;
}

int accelp_cli_estimate(int argc, char **argv)
{
	args a;
	int rc = parse(argc, argv, &a);
	if (rc)
		return rc < 0 ? 0 : rc;
	model m = {0};
	if (a.model_file && load_model(a.model_file, &m)) {
		free(m.numel);
		free(m.unit_numel);
		return 1;
	}

	row rows[sizeof(zero_rows) / sizeof(zero_rows[0]) + sizeof(fsdp_rows) / sizeof(fsdp_rows[0]) +
	         1 + MAX_STRATEGIES];
	memset(rows, 0, sizeof(rows));
	uint32_t n_rows = plan(&a, rows);

	accelp_setup_opts so = {
		.config_path = a.config,
		.config_path_from = "--config",
		.sets = a.n_sets ? a.sets : NULL,
	};
	accelp_estimate_opts eo = {
		.setup = &so,
		.in = {
			.world_size = a.world,
			.local_world_size = a.world,
			.device = a.device,
			.n_params = m.n,
			.n_units = m.n_units,
			.numel = m.numel,
			.unit_numel = m.unit_numel,
			.total_numel = a.model_file ? m.total : a.params,
			.n_state = UINT32_MAX,
		},
	};
	const char *missing[MAX_STRATEGIES + 2] = {NULL};
	static char notes[MAX_STRATEGIES + 2][ACCEL_ERRMSG_MAX + 64];
	uint32_t n_missing = 0, n_ok = 0, n_failed = 0;
	static char last_err[ACCEL_ERRMSG_MAX];
	const char *last_strategy = "";
	for (uint32_t i = 0; i < n_rows; i++) {
		row *r = &rows[i];
		char ov[3][96], origin[128];
		const char *ovs[4] = {NULL};
		int skip = 0;
		for (uint32_t k = 0; k < n_missing; k++)
			skip |= !strcmp(missing[k], r->v.strategy);
		if (skip) {
			r->status = ACCEL_ERR_NOT_FOUND;
			continue;
		}
		if (r->v.stage >= 0) {
			snprintf(ov[0], sizeof(ov[0]), "zero_optimization.stage=%d", r->v.stage);
			snprintf(ov[1], sizeof(ov[1]), "zero_optimization.offload_optimizer.device=\"%s\"",
			         r->v.opt);
			snprintf(ov[2], sizeof(ov[2]), "zero_optimization.offload_param.device=\"%s\"",
			         r->v.param);
			ovs[0] = ov[0];
			ovs[1] = ov[1];
			ovs[2] = ov[2];
		}
		if (r->v.sharding) {
			snprintf(ov[0], sizeof(ov[0]), "fsdp.sharding_strategy=\"%s\"", r->v.sharding);
			snprintf(ov[1], sizeof(ov[1]), "fsdp.cpu_offload=%s",
			         r->v.cpu_offload ? "true" : "false");
			ovs[0] = ov[0];
			ovs[1] = ov[1];
		}
		if (r->v.stage >= 0)
			snprintf(origin, sizeof(origin), "estimate-memory row %s stage %d, offload %s",
			         r->v.strategy, r->v.stage, r->offload);
		else if (r->v.sharding)
			snprintf(origin, sizeof(origin), "estimate-memory row %s %s, offload %s",
			         r->v.strategy, r->v.sharding, r->offload);
		else
			snprintf(origin, sizeof(origin), "estimate-memory row %s", r->v.strategy);
		eo.strategy = r->v.strategy;
		eo.overrides = ovs;
		eo.overrides_origin = origin;
		accel_err err;
		accelp_err_clear(&err);
		r->status = accelp_estimate_memory(&eo, &r->res, &err);
		if (!r->status) {
			n_ok++;
			continue;
		}
		if (r->status == ACCEL_ERR_NOT_FOUND || r->status == ACCEL_ERR_UNSUPPORTED) {
			/* one note per strategy: the other variants would say the same */
			missing[n_missing] = r->v.strategy;
			snprintf(notes[n_missing++], sizeof(notes[0]), r->status == ACCEL_ERR_NOT_FOUND
			         ? "note: %s: not installed (%s)" : "note: %.0s%s", r->v.strategy,
			         err.msg);
			if (a.json)
				fprintf(stderr, "%s\n", notes[n_missing - 1]);
			continue;
		}
		n_failed++;
		/* a plugin that cannot be loaded fails every row alike: say it once */
		if (!strcmp(err.msg, last_err) && !strcmp(r->v.strategy, last_strategy))
			continue;
		snprintf(last_err, sizeof(last_err), "%s", err.msg);
		last_strategy = r->v.strategy;
		fprintf(stderr, "accel " SUB ": %s: %s\n", origin + strlen("estimate-memory row "),
		        err.msg);
	}

	const row *first = NULL;
	for (uint32_t i = 0; i < n_rows && !first; i++)
		if (!rows[i].status)
			first = &rows[i];
	uint64_t total = eo.in.total_numel;
	if (first && !a.json) {
		printf("%llu parameters%s%s, working dtype %s, %u optimizer state array%s, world %d, "
		       "per rank (1 GB = 10^9 bytes):\n", (unsigned long long)total,
		       a.model_file ? " from " : "", a.model_file ? a.model_file : "",
		       accel_abi_dtype_name(first->res.dtype), first->res.n_state,
		       first->res.n_state == 1 ? "" : "s", (int)a.world);
		print_table(rows, n_rows);
	}
	for (uint32_t k = 0; !a.json && k < n_missing; k++)
		printf("%s\n", notes[k]);
	for (uint32_t i = 0; a.json && i < n_rows; i++)
		if (!rows[i].status && print_json(&rows[i], a.world, total)) {
			fprintf(stderr, "accel " SUB ": out of memory\n");
			n_failed++;
			break;
		}
	if (!n_ok && !n_failed)
		fprintf(stderr, "accel " SUB ": no strategy asked for gives an estimate here\n");
	free(m.numel);
	free(m.unit_numel);
	return n_failed || !n_ok ? 1 : 0;
}
