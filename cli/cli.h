/* SPDX-License-Identifier: MIT */
/* cli/cli.h: subcommands of the `accel` tool.  Each takes the arguments after
 * its name (argv[0] is the subcommand name) and returns the process exit
 * status: 0 success, 1 failure, 2 bad usage (with a message and a pointer
 * to --help on stderr). */
#ifndef ACCEL_CLI_H
#define ACCEL_CLI_H

int accelp_cli_launch(int argc, char **argv);
int accelp_cli_config(int argc, char **argv);
int accelp_cli_env(int argc, char **argv);
int accelp_cli_plugins(int argc, char **argv);
int accelp_cli_bench(int argc, char **argv);
int accelp_cli_checkpoint(int argc, char **argv);     /* cmd-checkpoint.c */
int accelp_cli_merge_weights(int argc, char **argv);  /* cmd-checkpoint.c */
int accelp_cli_doctor(int argc, char **argv);
int accelp_cli_test(int argc, char **argv);
int accelp_cli_estimate(int argc, char **argv);       /* cmd-estimate.c */

/* Print "accel SUB: message\nTry 'accel SUB --help'." and return 2. */
int accelp_cli_usage_error(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
