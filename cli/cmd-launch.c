/* SPDX-License-Identifier: MIT */
/* cli/cmd-launch.c: `accel launch` (placeholder until implemented). */
#include <stdio.h>

#include "cli.h"

int accel_cli_launch(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "accel launch: not implemented yet\n");
	return 1;
}
