/* SPDX-License-Identifier: MIT */
/* cli/launch-run.h: the supervisor of `accel launch` (private to
 * launch-run.c, the loop and its signals; launch-ranks.c, the ranks as
 * processes; launch-stream.c, their output).  One thread runs all of it:
 * nothing here locks.  launch.h is what the rest of the CLI sees. */
#ifndef ACCEL_CLI_LAUNCH_RUN_H
#define ACCEL_CLI_LAUNCH_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "launch.h"
#include "store.h"

#define TAIL_LINES 10
#define TAIL_LINE_MAX 1024
#define LINE_BUF 16384
/* After the last rank exited, how long its leftover children may keep the
 * output pipes open before we stop reading them. */
#define LINGER_MS 500
/* After SIGKILL, how long we wait for the kernel to let a rank go. */
#define KILL_WAIT_MS 5000

typedef struct stream {
	int fd;                /* read end; -1 once closed */
	int to;                /* 1: our stdout, 2: our stderr */
	size_t len;            /* bytes of an unfinished line in buf */
	size_t owed;           /* bytes the rank had left in the pipe when it exited */
	char buf[LINE_BUF];
} stream;

typedef struct proc {
	int rank;
	pid_t pid;             /* also its process group id */
	int running;           /* started and not reaped */
	int status;            /* wait status once reaped */
	int stopped;           /* we signalled it before it exited */
	int failed;            /* exited non-zero / by a signal on its own */
	double fail_s;         /* when the launcher saw it fail (wall clock) */
	stream out, err;
	int logfd;
	int log_errno;         /* writing its log failed (reported once) */
	char *tail[TAIL_LINES];
	int tail_n, tail_next;
	int err_lines;         /* lines it wrote on stderr */
} proc;

typedef struct launcher {
	const launch_spec *spec;
	proc *p;
	int n;
	int devnull;
	launch_out *q[3];      /* [1], [2]: writers of our stdout/stderr, once started */
	int out_dead[3];       /* before they start: a write gave EPIPE, drop output */
	int log_failed;        /* a log file could not be written: exit status 1 */
	int stopping, killed;
	int64_t kill_deadline, final_deadline, linger_deadline;
	int got_signal;        /* first SIGINT/SIGTERM/SIGHUP received */
	int first_failed;      /* rank index (local) of the first failure, -1 */
	int exec_errno;        /* PROGRAM could not be started */
	int exec_rank;
	int start_errno;       /* pipe/fork failed: a launcher error */
	pid_t *reporters;      /* [n] children telling the store a rank exited */
	time_t started;        /* when the first rank was started */
	accel_store_refusal *refusal; /* stands in for rank 0's store once it is gone */
	int node_lost;         /* another node's launcher was lost: the attempt ends */
	char lost_why[160];
	double fail_s;         /* wall clock when the first failure or loss was seen */
} launcher;

/* For the node launchers' "which failure came first" (launch-nodes.c): the
 * moment a failure is seen, not when the attempt's teardown ends, whose
 * length varies from node to node. */
static inline double accelp_wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* launch-run.c */
/* In a child before exec (async-signal-safe): every signal the launcher
 * handles or ignores gets the disposition the launcher was started with. */
void accelp_launch_child_signals(void);

/* launch-stream.c: the ranks' output and the launcher's messages. */
/* "accel launch: " + the message + a newline on our stderr. */
void accelp_stream_say(launcher *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s of rank p is readable (or closed): one read, its lines passed on. */
void accelp_stream_read(launcher *L, proc *p, stream *s);
/* Pass on a last unfinished line and close s (closed already: nothing). */
void accelp_stream_close(launcher *L, proc *p, stream *s);
/* Open (truncate, or append on a restart) log_dir/rank-R.log of every rank:
 * 0, or -1 (message said). */
int accelp_stream_open_logs(launcher *L);
/* After a failure: the last lines of the ranks that explain it. */
void accelp_stream_print_tails(launcher *L);

/* launch-ranks.c: the ranks as processes. */
/* Fork and exec rank i.  Returns 0, or -1 with L->exec_errno set when
 * PROGRAM could not be run (or L->start_errno when the fork failed). */
int accelp_ranks_start(launcher *L, int i);
/* Collect the ranks that have exited, without waiting; a failure stops
 * the others. */
void accelp_ranks_reap(launcher *L);
/* How many ranks are started and not reaped. */
int accelp_ranks_running(const launcher *L);
/* Send sig to the process group of every running rank. */
void accelp_ranks_signal(launcher *L, int sig);
/* Stop the ranks: sig now, SIGKILL after --grace-s (run loop); once. */
void accelp_ranks_stop(launcher *L, int sig);
/* The launcher got sig (SIGINT, SIGTERM, SIGHUP): forward it; again: kill. */
void accelp_ranks_on_signal(launcher *L, int sig);
/* "exit code 3", "killed by signal SIGKILL (9)", ... for wait status st. */
void accelp_ranks_describe(int st, char *out, size_t cap);
/* Once every rank has exited: the comm backends' clean-up after a failure. */
void accelp_ranks_cleanup(launcher *L);
/* The launcher's exit status once the ranks have ended. */
int accelp_ranks_exit_code(const launcher *L);
/* Kill and collect whatever is left (ranks, exit reporters), close streams
 * and logs.  Returns rc, or 1 when a log could not be written. */
int accelp_ranks_reap_stragglers(launcher *L, int rc);

#endif
