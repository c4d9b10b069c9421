/* SPDX-License-Identifier: MIT */
/* cli/self-launch.h: run this `accel` again under `accel launch -n N`, as a
 * worker (`accel test`, `accel doctor`), and collect what the job printed. */
#ifndef ACCEL_CLI_SELF_LAUNCH_H
#define ACCEL_CLI_SELF_LAUNCH_H

#include <stddef.h>

typedef struct accel_cli_job {
	int nproc;                    /* processes (accel launch -n)                   */
	const char *config;           /* --config for the launcher (optional)          */
	const char *const *sets;      /* NULL-terminated --set KEY=VALUE (optional)     */
	const char *const *worker;    /* NULL-terminated arguments after `accel`, e.g.
	                                 {"test", "--worker", NULL}                    */
	double timeout_s;             /* the job is stopped (SIGTERM, then SIGKILL
	                                 5 s later) when it runs longer               */
} accel_cli_job;

/* Run the job with stdout and stderr into one pipe.  On return
 * *ret_output is the text (owned; NUL-terminated; the first 1 MiB),
 * *ret_status the launcher's exit status (128+N for signal N), and
 * *ret_timed_out 1 when it had to be stopped.  0, or -1 with the reason in
 * why when the job could not be started. */
int accelp_cli_self_launch(const accel_cli_job *job, char **ret_output, int *ret_status,
                           int *ret_timed_out, char *why, size_t cap);

/* Path of the running executable (/proc/self/exe), or argv0's. */
const char *accelp_cli_self_path(void);

#endif
