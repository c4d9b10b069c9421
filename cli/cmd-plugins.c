/* SPDX-License-Identifier: MIT */
/* cli/cmd-plugins.c: `accel plugins` (placeholder until implemented). */
#include <stdio.h>

#include "cli.h"

int accel_cli_plugins(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "accel plugins: not implemented yet\n");
	return 1;
}
