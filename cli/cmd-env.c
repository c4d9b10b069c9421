/* SPDX-License-Identifier: MIT */
/* cli/cmd-env.c: `accel env` (placeholder until implemented). */
#include <stdio.h>

#include "cli.h"

int accel_cli_env(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "accel env: not implemented yet\n");
	return 1;
}
