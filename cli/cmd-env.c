/* SPDX-License-Identifier: MIT */
/* cli/cmd-env.c: `accel env`, everything a bug report needs about this
 * build, this machine and its settings, as Markdown.  It never fails on
 * what it finds (a broken config or a missing library is part of the
 * report); only bad usage is an error. */
#include <getopt.h>
#include <jansson.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "accel-build-config.h"
#include "accel/accel.h"
#include "cli.h"
#include "loader.h"
#include "probe.h"
#include "setup.h"

extern char **environ;

#define MAX_DIRS 64

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: accel env [OPTIONS]\n"
		"\n"
		"Print accel's version and build features, the CUDA driver/runtime, GPUs,\n"
		"NCCL and MPI found at run time, CPU, memory and OS, the plugins found and\n"
		"the ACCEL_*, NCCL_*, OMPI_*, SLURM_* environment, as Markdown to paste\n"
		"into a bug report.\n"
		"\n"
		"Options:\n"
		"  --plugin-dir DIR  also search DIR for plugins, first (repeatable)\n"
		"  --config FILE     read plugin_dirs from FILE (default: $ACCEL_CONFIG,\n"
		"                    ./accel.json, $XDG_CONFIG_HOME/accel/default.json,\n"
		"                    ~/.config/accel/default.json)\n"
		"  -h, --help        show this help\n");
}

static void version3(int v, int major_div, char *buf, size_t cap)
{
	/* CUDA: 1000*major + 10*minor. */
	if (v <= 0)
		snprintf(buf, cap, "unknown");
	else
		snprintf(buf, cap, "%d.%d", v / major_div, (v % major_div) / 10);
}

static void nccl_version(int v, char *buf, size_t cap)
{
	/* NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before. */
	if (v >= 10000)
		snprintf(buf, cap, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
	else
		snprintf(buf, cap, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

/* Copy, cutting at cap - 1 (snprintf("%s") would warn about the cut). */
static void copy_cut(char *buf, size_t cap, const char *s)
{
	size_t n = strlen(s);
	if (n >= cap)
		n = cap - 1;
	memcpy(buf, s, n);
	buf[n] = '\0';
}

static void cpu_model(char *buf, size_t cap)
{
	snprintf(buf, cap, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		/* x86 says "model name", many ARM kernels "Model" or only "CPU part". */
		if (strncmp(line, "model name", 10) && strncmp(line, "Model", 5) &&
		    strncmp(line, "cpu model", 9))
			continue;
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		v[strcspn(v, "\n")] = '\0';
		if (*v) {
			copy_cut(buf, cap, v);
			break;
		}
	}
	fclose(f);
}

static void os_name(char *buf, size_t cap)
{
	snprintf(buf, cap, "unknown");
	FILE *f = fopen("/etc/os-release", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "PRETTY_NAME=", 12))
			continue;
		char *v = line + 12;
		v[strcspn(v, "\n")] = '\0';
		size_t n = strlen(v);
		if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
			v[n - 1] = '\0';
			v++;
		}
		copy_cut(buf, cap, v);
		break;
	}
	fclose(f);
}

static const char *gib(uint64_t bytes, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.1f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
	return buf;
}

static int env_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int shown_var(const char *kv)
{
	static const char *const prefixes[] = {"ACCEL_", "NCCL_", "OMPI_", "SLURM_", "PMIX_RANK=",
	                                       "CUDA_VISIBLE_DEVICES=", "LD_LIBRARY_PATH="};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(kv, prefixes[i], strlen(prefixes[i])))
			return 1;
	return 0;
}

static void print_environment(void)
{
	size_t n = 0;
	for (char **e = environ; e && *e; e++)
		n += shown_var(*e);
	printf("## Environment\n\n");
	if (!n) {
		printf("No ACCEL_*, NCCL_*, OMPI_*, SLURM_*, CUDA_VISIBLE_DEVICES or LD_LIBRARY_PATH "
		       "variables set.\n");
		return;
	}
	char **v = malloc(n * sizeof(*v));
	if (!v)
		return;
	size_t k = 0;
	for (char **e = environ; e && *e; e++)
		if (shown_var(*e))
			v[k++] = *e;
	qsort(v, k, sizeof(*v), env_cmp);
	printf("```\n");
	for (size_t i = 0; i < k; i++)
		printf("%s\n", v[i]);
	printf("```\n");
	free(v);
}

/* A table cell: '|' would end it. */
static void cell(const char *s)
{
	for (; s && *s; s++) {
		if (*s == '|')
			fputc('\\', stdout);
		fputc(*s, stdout);
	}
}

static void print_modules(const accel_loader *ld)
{
	printf("- search directories:\n");
	for (uint32_t i = 0; i < accelp_loader_dir_count(ld); i++) {
		const char *origin;
		int exists;
		const char *d = accelp_loader_dir(ld, i, &origin, &exists);
		printf("  %u. `%s` (%s%s%s)\n", i + 1, d, origin, exists ? "" : ", ",
		       exists ? "" : accelp_loader_dir_problem(d) ? accelp_loader_dir_problem(d)
		                                            : "missing");
	}
	uint32_t n = accelp_loader_count(ld);
	printf("- modules found: %u\n", n);
	if (!n)
		return;
	printf("\n| name | version | kind | status | path |\n|---|---|---|---|---|\n");
	for (uint32_t i = 0; i < n; i++) {
		const accel_module *m = accelp_loader_get(ld, i);
		const char *kind = m->kind == ACCEL_MODULE_COMM ? "comm"
		                   : m->kind == ACCEL_MODULE_PLUGIN && m->name
		                           ? accelp_loader_role_name(m->role)
		                           : "-";
		printf("| ");
		cell(m->name ? m->name : "-");
		printf(" | ");
		cell(m->version ? m->version : "-");
		printf(" | %s | %s%s", kind, accelp_loader_status_name(m->status), m->cause ? ": " : "");
		cell(m->cause);
		printf(" | `");
		cell(m->path);
		printf("` |\n");
	}
}

/* The driver as core probed it (what plugins are offered follows from
 * it), the runtime and NCCL libraries as the CLI finds them. */
static void print_cuda(const accelp_cuda_info *cuda)
{
	char buf[64], buf2[64];
	accel_cli_libs libs;
	accelp_cli_probe_libs(&libs);
	printf("\n## CUDA and NCCL (found at run time)\n\n");
	if (cuda->driver_lib[0]) {
		version3(cuda->driver_version, 1000, buf2, sizeof(buf2));
		printf("- CUDA driver: %s (%s)%s%s\n", buf2, cuda->driver_lib,
		       cuda->driver_error[0] ? "; " : "", cuda->driver_error);
	} else {
		printf("- CUDA driver: not found (%s)\n", cuda->driver_error[0] ? cuda->driver_error
		                                                             : "libcuda.so.1");
	}
	if (libs.runtime_lib[0]) {
		version3(libs.runtime_version, 1000, buf2, sizeof(buf2));
		printf("- CUDA runtime: %s (%s)\n", buf2, libs.runtime_lib);
	} else {
		printf("- CUDA runtime: not found\n");
	}
	if (cuda->n_gpus < 0) {
		printf("- GPUs: unknown (no working CUDA driver)\n");
	} else {
		printf("- GPUs: %d\n", cuda->n_gpus);
		for (int i = 0; i < cuda->n_gpus; i++)
			printf("  - %d: %s, compute capability %d.%d, %s\n", i,
			       cuda->gpus[i].name[0] ? cuda->gpus[i].name : "?", cuda->gpus[i].cc / 10,
			       cuda->gpus[i].cc % 10, gib(cuda->gpus[i].mem_bytes, buf, sizeof(buf)));
	}
	/* What the loader offers plugins that require CUDA (tests read this). */
	uint32_t avail;
	int32_t cc;
	accelp_cuda_offered(cuda, &avail, &cc);
	if (avail & ACCEL_REQ_CUDA)
		printf("- plugins that need CUDA: usable here (best compute capability %d.%d)\n",
		       cc / 10, cc % 10);
	else
		printf("- plugins that need CUDA: unavailable here (%s)\n",
		       ACCEL_HAVE_CUDA ? "no GPU answered" : "accel was built without CUDA");
	printf("- NCCL at build time: header %s, library %s\n",
	       ACCEL_NCCL_INCLUDE[0] ? ACCEL_NCCL_INCLUDE : "not found",
	       ACCEL_NCCL_LIBRARY[0] ? ACCEL_NCCL_LIBRARY : "not found");
	if (libs.nccl_lib[0]) {
		nccl_version(libs.nccl_version, buf2, sizeof(buf2));
		printf("- NCCL: %s (%s)\n", buf2, libs.nccl_lib);
	} else {
		printf("- NCCL: not found\n");
	}
}

static void print_system(void)
{
	char buf[512];
	printf("\n## System\n\n");
	struct utsname u;
	char os[256];
	os_name(os, sizeof(os));
	if (uname(&u) == 0)
		printf("- OS: %s; kernel %s %s %s\n", os, u.sysname, u.release, u.machine);
	else
		printf("- OS: %s\n", os);
	cpu_model(buf, sizeof(buf));
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;
	int usable = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
	printf("- CPU: %s; %ld cores online, %d usable by this process\n", buf, online, usable);
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psize > 0)
		printf("- memory: %s\n", gib((uint64_t)pages * (uint64_t)psize, buf, sizeof(buf)));
}

int accelp_cli_env(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"plugin-dir", required_argument, NULL, 'd'},
		{"config", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dirs[MAX_DIRS];
	uint32_t n_dirs = 0;
	const char *config = NULL;
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (n_dirs == MAX_DIRS || !*optarg)
				return accelp_cli_usage_error("env", "--plugin-dir: %s",
				                              *optarg ? "too many" : "empty directory");
			dirs[n_dirs++] = optarg;
			break;
		case 'c':
			config = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			return accelp_cli_usage_error("env", "option '%s' needs a value", argv[optind - 1]);
		default:
			/* a short option inside a cluster (-xh) is optopt, not argv[optind - 1] */
			if (optopt && strncmp(argv[optind - 1], "--", 2))
				return accelp_cli_usage_error("env", "unknown option '-%c'", optopt);
			return accelp_cli_usage_error("env", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return accelp_cli_usage_error("env", "unexpected argument '%s'", argv[optind]);

	char buf[512];
	printf("## accel\n\n");
	printf("- accel: %s (plugin ABI %d.%d)\n", accel_version(), ACCEL_ABI_MAJOR,
	       ACCEL_ABI_MINOR);
	printf("- compiler: %s\n", ACCEL_CC_ID);
#if JANSSON_VERSION_HEX >= 0x020d00
	printf("- jansson: %s (built with %s)\n", jansson_version_str(), JANSSON_VERSION);
#else
	printf("- jansson: %s\n", JANSSON_VERSION);
#endif
	printf("- build features: CUDA %s, NCCL %s, cuBLASLt %s, MPI %s\n",
	       ACCEL_HAVE_CUDA ? "yes" : "no", ACCEL_HAVE_NCCL ? "yes" : "no",
	       ACCEL_HAVE_CUBLASLT ? "yes" : "no", ACCEL_HAVE_MPI ? "yes" : "no");
	printf("- install plugin directory: `%s`\n", ACCEL_PLUGINDIR);

	/* The loader and the CUDA probe as a context sets them up; a config
	 * that cannot be read is reported, not fatal. */
	accelp_setup_opts so = {
		.config_path = config,
		.config_path_from = "--config",
		.extra_dirs = dirs,
		.n_extra_dirs = n_dirs,
		.config_optional = 1,
		.report_cuda = 1,
	};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	int setup_failed = accelp_setup_run(&so, &s, &err) != ACCEL_OK;
	print_cuda(&s.cuda);

	printf("\n## MPI\n\n");
	if (accelp_cli_probe_mpi(buf, sizeof(buf)) == 0)
		printf("- MPI library: %s\n", buf);
	else
		printf("- MPI library: not found (%s)\n", buf);

	print_system();

	printf("\n## Plugins\n\n");
	if (setup_failed) {
		printf("- could not scan: %s\n", err.msg);
	} else {
		printf("- config file: %s\n", s.config_file ? s.config_file : "none");
		if (s.config_err.code)
			printf("- config problem (its plugin_dirs are not searched): %s\n",
			       s.config_err.msg);
		print_modules(s.loader);
	}
	accelp_setup_fini(&s);

	printf("\n");
	print_environment();
	fflush(stdout);
	return 0;
}
