/* SPDX-License-Identifier: MIT */
/* cli/cmd-config.c: `accel config` (placeholder until implemented). */
#include <stdio.h>

#include "cli.h"

int accel_cli_config(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "accel config: not implemented yet\n");
	return 1;
}
