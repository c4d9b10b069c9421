/* SPDX-License-Identifier: MIT */
/* cli/main.c: `accel`, the command-line tool: dispatch to subcommands. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "accel/accel.h"
#include "accel/types.h"
#include "cli.h"

typedef struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} subcommand;

static const subcommand subcommands[] = {
	{"launch", accelp_cli_launch, "start N processes of a training program"},
	{"config", accelp_cli_config, "configs: init, wizard, validate, show, import-deepspeed/-accelerate"},
	{"env", accelp_cli_env, "print versions, devices and settings for a bug report"},
	{"plugins", accelp_cli_plugins, "list plugins and backends, show a plugin's settings"},
	{"bench", accelp_cli_bench, "benchmarks (comm)"},
	{"checkpoint", accelp_cli_checkpoint, "show a checkpoint's manifest, verify its checksums"},
	{"merge-weights", accelp_cli_merge_weights, "a checkpoint's weights as one safetensors file"},
	{"estimate-memory", accelp_cli_estimate, "per-rank memory of a model under ddp, each ZeRO stage and fsdp"},
	{"test", accelp_cli_test, "a short sanity run on N processes with the current config"},
	{"doctor", accelp_cli_doctor, "check this machine: port, /dev/shm, offload disk, GPUs, NCCL"},
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: accel [--help] [--version] COMMAND [ARGS...]\n"
		"\n"
		"Run C/C++/CUDA training programs on 1 or N processes; the JSON config\n"
		"chooses the strategy plugin (ddp, zero or fsdp in this release), the\n"
		"precision and the communication.\n"
		"\n"
		"Commands:\n");
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		fprintf(out, "  %-15s %s\n", subcommands[i].name, subcommands[i].summary);
	fprintf(out, "\n'accel COMMAND --help' describes a command.\n");
}

int accelp_cli_usage_error(const char *sub, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "accel%s%s: ", sub ? " " : "", sub ? sub : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'accel%s%s --help'.\n", sub ? " " : "", sub ? sub : "");
	return 2;
}

/* Output that could not be written (a full disk, a closed pipe with
 * SIGPIPE ignored) is a failure, not a silent success. */
static int finish(int status)
{
	errno = 0;
	int flushed = fflush(stdout) == 0;
	if (!flushed || ferror(stdout)) {
		fprintf(stderr, "accel: writing the output failed: %s\n",
		        !flushed && errno ? strerror(errno) : "a write to stdout failed");
		return status ? status : 1;
	}
	return status;
}

static const subcommand *find_sub(const char *name)
{
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (!strcmp(name, subcommands[i].name))
			return &subcommands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("accel: no command given\n\n", stderr);
		return usage(stderr), 2;
	}
	const char *a = argv[1];
	int help = !strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help");
	int version = !strcmp(a, "--version") || !strcmp(a, "-V");
	if (!strcmp(a, "help") && argc > 3)
		return accelp_cli_usage_error(NULL, "help takes one COMMAND (got '%s' and '%s')",
		                              argv[2], argv[3]);
	if (!strcmp(a, "help") && argc == 3 && strcmp(argv[2], "help") != 0) {
		/* `accel help COMMAND` is `accel COMMAND --help` */
		const subcommand *sc = find_sub(argv[2]);
		if (!sc)
			return accelp_cli_usage_error(NULL, "unknown command '%s'", argv[2]);
		char *args[] = {argv[2], "--help", NULL};
		return finish(sc->run(2, args));
	}
	if ((help || version) && argc > 2 && strcmp(a, "help") != 0)
		return accelp_cli_usage_error(NULL, "%s takes no arguments (got '%s')", a, argv[2]);
	if (help) {
		usage(stdout);
		return finish(0);
	}
	if (version) {
		printf("accel %s (plugin ABI %d.%d)\n", accel_version(), ACCEL_ABI_MAJOR,
		       ACCEL_ABI_MINOR);
		return finish(0);
	}
	const subcommand *sc = find_sub(a);
	if (sc)
		return finish(sc->run(argc - 1, argv + 1));
	if (a[0] == '-')
		return accelp_cli_usage_error(NULL, "unknown option '%s'", a);
	return accelp_cli_usage_error(NULL, "unknown command '%s'", a);
}
