/* SPDX-License-Identifier: MIT */
/* cli/cmd-config.h: what the `accel config` subcommands share
 * (cmd-config.c: validate, show, dispatch; cmd-config-init.c: init and the
 * questionnaire; cmd-config-import.c: import-deepspeed, import-accelerate). */
#ifndef ACCEL_CLI_CMD_CONFIG_H
#define ACCEL_CLI_CMD_CONFIG_H

#include "setup.h"

/* Subcommands; argv[0] is the subcommand's name. */
int accelp_cli_config_init(int argc, char **argv);
int accelp_cli_config_wizard(int argc, char **argv);
int accelp_cli_config_import(int argc, char **argv, int accelerate);

/* `accel config validate FILE` without the environment: prints "FILE: ok"
 * or one "FILE: error: ..." line per problem; 0 when valid. */
int accelp_cli_config_check(const char *file);

/* The loader with every installed plugin scanned and, with resolve, every
 * schema registered (the config is "{}").  The search path is the user's
 * plugin_dirs (those of `config`, else of the config file accel finds the
 * usual way: ACCEL_CONFIG, ./accel.json, ~/.config/accel/default.json; a
 * module found there has origin "plugin_dirs"), ACCEL_PLUGIN_PATH and the
 * install directory.  0 or 1 (printed). */
int accelp_cli_config_modules(const char *where, int resolve, const char *config,
                              accelp_setup *s);

/* Write `text` to `path` ("-": stdout); an existing file only with force.
 * 0, or 1 with the reason printed. */
int accelp_cli_config_write(const char *where, const char *path, const char *text, int force);

#endif
