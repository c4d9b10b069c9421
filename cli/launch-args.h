/* SPDX-License-Identifier: MIT */
/* cli/launch-args.h: the command line of `accel launch` (launch-args.c),
 * read for cmd-launch.c. */
#ifndef ACCEL_CLI_LAUNCH_ARGS_H
#define ACCEL_CLI_LAUNCH_ARGS_H

/* The options, in the order --help lists them; they index launch_opts.given. */
typedef enum launch_opt_id {
	OPT_NPROC, OPT_NNODES, OPT_NODE_RANK, OPT_MASTER_ADDR, OPT_MASTER_PORT, OPT_JOB_ID,
	OPT_CONFIG, OPT_SET, OPT_TEE, OPT_LOG_DIR, OPT_GRACE_S, OPT_MAX_RESTARTS, OPT_MIN_NPROC,
	OPT_MIN_NODES, OPT_RESTART_FILTER, OPT_FILTER_TIMEOUT, OPT_DRY_RUN, OPT_HELP,
	N_OPTS
} launch_opt_id;

/* --set's assignments, in the order given (argv's strings, borrowed). */
typedef struct launch_strlist {
	char **v;
	int n;
} launch_strlist;

typedef struct launch_opts {
	int nproc, nnodes, node_rank, port;
	const char *addr, *job_id_arg, *config, *log_dir;
	int tee, dry_run;
	double grace_s;
	launch_strlist sets;
	char **prog;
	int max_restarts, min_nproc, min_nodes;
	const char *restart_filter;
	double filter_timeout_s;
	unsigned char given[N_OPTS]; /* the option was on the command line */
} launch_opts;

/* Read `accel launch [OPTIONS] [--] PROGRAM [ARGS...]` (argv[0] is
 * "launch") into o, defaults filled in, and check the options against each
 * other.  Returns 0; -1 when --help was printed (exit 0); 2 for bad usage
 * and 1 when out of memory, with the message printed.  Whatever it returns,
 * the caller frees o->sets.v; o's strings are argv's. */
int accelp_launch_args(int argc, char **argv, launch_opts *o);

#endif
