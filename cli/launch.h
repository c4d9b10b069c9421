/* SPDX-License-Identifier: MIT */
/* cli/launch.h: the parts of `accel launch` (private to the CLI).
 * cmd-launch.c parses and validates the command line and builds each rank's
 * environment; launch-run.c starts the processes and supervises them
 * (with launch-ranks.c and launch-stream.c, through launch-run.h). */
#ifndef ACCEL_CLI_LAUNCH_H
#define ACCEL_CLI_LAUNCH_H

/* How an attempt ended, for the restart decision (cmd-launch.c). */
typedef struct launch_result {
	int got_signal;        /* the launcher was stopped by this signal, 0     */
	int failed_rank;       /* global rank of the rank whose failure ended the
	                        * attempt (accelp_launch_run: the first to fail
	                        * on its own, not for a lost peer), -1           */
	int consequence;       /* failed_rank's failure was itself a lost peer's
	                        * (no rank on this node failed otherwise)        */
	int cannot_start;      /* PROGRAM could not be run, or a fork failed     */
	int node_lost;         /* ended because another node's launcher was lost
	                        * (launch-nodes.c); reason names it              */
	double fail_s;         /* when the launcher learned of the first failure
	                        * or the loss (wall clock, seconds), 0: none      */
	char reason[160];      /* "rank 1 failed: exit code 3", "" when none     */
} launch_result;

typedef struct launch_nodes launch_nodes;

/* Everything the supervisor needs; owned by cmd-launch.c. */
typedef struct launch_spec {
	int nproc;             /* processes on this node                         */
	int first_rank;        /* global rank of local rank 0 (node_rank * nproc) */
	char **argv;           /* PROGRAM ARGS..., NULL-terminated (borrowed)    */
	char ***envp;          /* [nproc] complete environments, NULL-terminated */
	int prefix;            /* copy output to our stdout/stderr, "[rank R] "  */
	const char *log_dir;   /* (optional) also write log_dir/rank-R.log       */
	int log_append;        /* add to the logs (a restart), do not truncate   */
	double grace_s;        /* SIGTERM -> SIGKILL delay when stopping ranks    */
	const char *master_addr; /* the rendezvous store, told about ranks that  */
	int master_port;         /* exit while others run (accelp_store_report_exit) */
	int world_size;
	launch_result *result;   /* (optional) filled in before accelp_launch_run returns */
	launch_nodes *nodes;     /* (optional) the node launchers' connections,
	                          * watched while the ranks run: a lost node ends
	                          * the attempt (accelp_nodes_watch_*)           */
	int gen;                 /* the attempt's generation, for nodes         */
	const char *state_path;  /* (optional) ACCEL_LAUNCH_STATE: the ranks mark
	                          * there a failure caused by a lost peer        */
} launch_spec;

/* Start spec->nproc processes and supervise them until all have exited.
 * Returns the launcher's exit status (docs/launch.md, "Exit status"). */
int accelp_launch_run(const launch_spec *spec);

/* launch-restart.c: between the attempts of --max-restarts. */
typedef struct launch_state {
	long long step;          /* optimizer steps rank 0 had done, -1: unknown */
	long long ckpt_step;     /* the step of ckpt_dir                        */
	char ckpt_dir[4096];     /* the newest committed checkpoint, "" if none */
} launch_state;
/* A zero-filled state file in $TMPDIR (or /tmp) for the ranks'
 * ACCEL_LAUNCH_STATE: 0, or an errno value. */
int accelp_launch_state_create(char **ret_path);
/* What rank 0 recorded there (st zeroed by the caller keeps what an
 * earlier attempt saved when this one recorded nothing). */
void accelp_launch_state_read(const char *path, launch_state *st);
/* Forget the steps recorded and the ranks' lost-peer marks (before each
 * attempt). */
void accelp_launch_state_reset(const char *path);
/* marks[i] = 1 when local rank i (< n) marked its failure as caused by a
 * lost peer (core/restart.h), else 0; all 0 when the file cannot be read. */
void accelp_launch_state_peers(const char *path, unsigned char *marks, int n);
/* Run the --restart-filter command for slot: /bin/sh -c CMD with
 * SLOT RESTART FAILED_RANK as its $1 $2 $3, and the same in ACCEL_RESTART_SLOT,
 * ACCEL_RESTART_COUNT, ACCEL_RESTART_FAILED_RANK (+ ACCEL_RESTART_REASON),
 * in a process group of its own with stdin from /dev/null.  Waits at most
 * timeout_s (<= 0: no limit); past it, or when the launcher gets SIGINT,
 * SIGTERM or SIGHUP meanwhile, the whole group is killed (SIGKILL).
 * Returns its wait status (>= 0), or one of: */
#define ACCELP_FILTER_ERROR (-1)   /* could not be started (errno)          */
#define ACCELP_FILTER_TIMEOUT (-2) /* did not exit within timeout_s         */
#define ACCELP_FILTER_SIGNAL (-3)  /* the launcher got *ret_signal          */
int accelp_launch_filter(const char *cmd, int slot, int restart, const launch_result *res,
                         double timeout_s, int *ret_signal);

/* launch-nodes.c: the node launchers' rendezvous between the attempts of
 * --nnodes N --max-restarts R (docs/launch.md, "Several nodes"). */
/* What this node's attempt did. */
typedef struct launch_node_report {
	int gen;                 /* the attempt's generation (restart count)    */
	int rc;                  /* its exit status                              */
	int restartable;         /* a rank failed (not stopped, not unstartable) */
	int node_lost;           /* the attempt ended because a node was lost
	                          * (not a failure of this node's own)          */
	int consequence;         /* its failure is a lost peer's (launch_result) */
	double end_s;            /* when its first failure was seen, else when it
	                          * ended (wall clock, seconds)                  */
	char reason[160];        /* "rank 3 failed: exit code 1", ""             */
} launch_node_report;
typedef struct launch_node_policy {
	int restart, max_restarts, min_nodes;
	double timeout_s;        /* how long node 0 waits for a node's report   */
} launch_node_policy;
/* Node 0's decision, the same on every node. */
typedef struct launch_node_decision {
	int go;                  /* restart; else exit with rc                  */
	int rc;
	int gen, nodes, self;    /* the next attempt: its generation, node count,
	                          * and this node's rank in it                  */
	launch_state st;         /* node 0 fills it in before agreeing: the
	                          * checkpoint the restart resumes from          */
	char message[480];       /* the reason of the restart, or why not       */
} launch_node_decision;
/* Node 0 listens on port, waits for the nnodes - 1 others' launchers; they
 * connect (retrying) within timeout_s.  0, or -1 (message printed). */
int accelp_nodes_open(launch_nodes **ret, const char *addr, int port, int nnodes, int self,
                      double timeout_s);
/* After an attempt: report it, get the decision (node 0: collect, decide,
 * tell).  0, or -1 when out of memory. */
int accelp_nodes_agree(launch_nodes *N, const launch_node_report *me,
                       const launch_node_policy *pol, launch_node_decision *d);
void accelp_nodes_close(launch_nodes *N);
/* While an attempt runs (launch-run.c): the connections to watch, into
 * fds[cap] (node 0: every other node's that has not reported yet; the
 * others: node 0's); returns their number.  cap >= accelp_nodes_count(N). */
int accelp_nodes_count(const launch_nodes *N);
int accelp_nodes_watch_fds(launch_nodes *N, int *fds, int cap);
/* fd, one of those, is readable or closed.  Returns 1 when this node's
 * attempt must end, with why naming the lost node ("node 1's launcher
 * (node 1 at start) is gone: its connection closed"); node 0 then also
 * tells the other nodes to end theirs.  0: nothing to do (a node's report
 * arrived; it is read after the attempt). */
int accelp_nodes_watch_event(launch_nodes *N, int fd, int gen, char *why, unsigned long cap);

/* launch-out.c: the launcher's stdout or stderr, written by a thread from a
 * queue so that the supervising loop never blocks on its reader. */
typedef struct launch_out launch_out;
/* Start the writer of fd; it writes a byte 0 to wake_fd when the queue
 * drains below its high-water mark after launch_out_full() said full, and
 * when it exits.  Returns 0 or an errno value. */
int launch_out_start(launch_out **ret, int fd, int wake_fd);
/* Queue n bytes (never blocks; dropped once a write has failed). */
void launch_out_put(launch_out *o, const char *p, unsigned long n);
/* Non-zero while the queue is above its high-water mark: stop feeding it. */
int launch_out_full(launch_out *o);
/* Non-zero once a write failed (EPIPE: the reader has gone). */
int launch_out_dead(launch_out *o);
/* Write out what is queued and end the thread, waiting for it at most
 * timeout_ms (< 0: no limit) while watching sig_fd (the launcher's signal
 * pipe): a signal byte other than 0 or SIGCHLD abandons the wait too (the
 * thread stays blocked in its write; the process is about to exit).  Frees
 * o unless abandoned.  Returns 0, 1 when output was lost to a failed write,
 * -1 when abandoned. */
int launch_out_finish(launch_out *o, int sig_fd, int timeout_ms);

/* Write all n bytes to fd, waiting when it is non-blocking: 0, or -1 with
 * errno set. */
int launch_write_fully(int fd, const char *p, unsigned long n);

/* "SIGKILL" for 9, or "signal 42" for one without a name (static or buf). */
const char *accelp_launch_signame(int sig, char *buf, unsigned long cap);

#endif
