/* SPDX-License-Identifier: MIT */
/* cli/cmd-bench.c: `accel bench` (placeholder until implemented). */
#include <stdio.h>

#include "cli.h"

int accel_cli_bench(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "accel bench: not implemented yet\n");
	return 1;
}
