/* SPDX-License-Identifier: MIT */
/* cli/main.c: `accel`, the command-line tool: dispatch to subcommands. */
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
	{"launch", accel_cli_launch, "start N processes of a training program"},
	{"config", accel_cli_config, "validate and show configurations (show, validate)"},
	{"env", accel_cli_env, "print versions, devices and settings for a bug report"},
	{"plugins", accel_cli_plugins, "list plugins and backends, show a plugin's settings"},
	{"bench", accel_cli_bench, "benchmarks (comm)"},
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: accel [--help] [--version] COMMAND [ARGS...]\n"
		"\n"
		"Run C/C++/CUDA training programs on 1 or N processes; the JSON config\n"
		"chooses the strategy (DDP, ZeRO, FSDP), precision and communication.\n"
		"\n"
		"Commands:\n");
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		fprintf(out, "  %-9s %s\n", subcommands[i].name, subcommands[i].summary);
	fprintf(out, "\n'accel COMMAND --help' describes a command.\n");
}

int accel_cli_usage_error(const char *sub, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "accel%s%s: ", sub ? " " : "", sub ? sub : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'accel%s%s --help'.\n", sub ? " " : "", sub ? sub : "");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("accel: no command given\n\n", stderr);
		return usage(stderr), 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("accel %s (plugin ABI %d.%d)\n", accel_version(), ACCEL_ABI_MAJOR,
		       ACCEL_ABI_MINOR);
		return 0;
	}
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (!strcmp(argv[1], subcommands[i].name))
			return subcommands[i].run(argc - 1, argv + 1);
	return accel_cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}
