/* SPDX-License-Identifier: MIT */
/* cli/launch.h: the parts of `accel launch` (private to the CLI).
 * cmd-launch.c parses and validates the command line and builds each rank's
 * environment; launch-run.c starts the processes and supervises them. */
#ifndef ACCEL_CLI_LAUNCH_H
#define ACCEL_CLI_LAUNCH_H

/* Everything the supervisor needs; owned by cmd-launch.c. */
typedef struct launch_spec {
	int nproc;             /* processes on this node                         */
	int first_rank;        /* global rank of local rank 0 (node_rank * nproc) */
	char **argv;           /* PROGRAM ARGS..., NULL-terminated (borrowed)    */
	char ***envp;          /* [nproc] complete environments, NULL-terminated */
	int prefix;            /* copy output to our stdout/stderr, "[rank R] "  */
	const char *log_dir;   /* (optional) also write log_dir/rank-R.log       */
	double grace_s;        /* SIGTERM -> SIGKILL delay when stopping ranks    */
	const char *master_addr; /* the rendezvous store, told about ranks that  */
	int master_port;         /* exit while others run (accel_store_report_exit) */
	int world_size;
} launch_spec;

/* Start spec->nproc processes and supervise them until all have exited.
 * Returns the launcher's exit status (docs/launch.md, "Exit status"). */
int accel_launch_run(const launch_spec *spec);

/* "SIGKILL" for 9, or "signal 42" for one without a name (static or buf). */
const char *accel_launch_signame(int sig, char *buf, unsigned long cap);

#endif
