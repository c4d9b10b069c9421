/* SPDX-License-Identifier: MIT */
/* cli/launch-ranks.c: the ranks of `accel launch` as processes: started
 * (fork, exec, a process group each), reaped, stopped (SIGTERM, then
 * SIGKILL), the launcher's signals forwarded to them, the store told of
 * a rank that exits early, the comm backends' clean-up after a failed job,
 * and the exit status they add up to. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "backends/common/launch-env.h"
#include "comm.h"
#include "launch-run.h"
#include "log.h"
#include "setup.h"
#include "store.h"
#include "backends/common/mono.h"

void accelp_ranks_describe(int st, char *out, size_t cap)
{
	char b[32];
	if (WIFEXITED(st))
		snprintf(out, cap, "exit code %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(out, cap, "killed by signal %s (%d)%s%s",
		         accelp_launch_signame(WTERMSIG(st), b, sizeof(b)), WTERMSIG(st),
		         WCOREDUMP(st) ? ", core dumped" : "",
		         WTERMSIG(st) == SIGXFSZ ? ": a file-size limit (ulimit -f) stopped it" : "");
	else
		snprintf(out, cap, "wait status 0x%x", (unsigned)st);
}

int accelp_ranks_running(const launcher *L)
{
	int k = 0;
	for (int i = 0; i < L->n; i++)
		k += L->p[i].running;
	return k;
}

/* Send sig to the process group of every running rank. */
void accelp_ranks_signal(launcher *L, int sig)
{
	for (int i = 0; i < L->n; i++) {
		proc *p = &L->p[i];
		if (!p->running)
			continue;
		p->stopped = 1;
		if (kill(-p->pid, sig) < 0 && errno == ESRCH)
			kill(p->pid, sig); /* not yet a group leader: the child's setpgid raced */
	}
}

void accelp_ranks_stop(launcher *L, int sig)
{
	if (L->stopping)
		return;
	L->stopping = 1;
	L->kill_deadline = mono_ms() + (int64_t)(L->spec->grace_s * 1000.0 + 0.5);
	accelp_ranks_signal(L, sig);
}

/* How long a reporter keeps trying to reach the store (rank 0 may still be
 * starting it). */
#define REPORT_TIMEOUT_MS 10000

/* Rank p ended with status 0 while others still run.  If it never joined
 * the job (it exited before accel_ctx_new connected it to the rendezvous
 * store), the others would wait for it until comm.timeout_s; tell the store,
 * which then fails their waits at once, naming the rank.  A rank that did
 * join is known to the store already, which ignores the report.  A child
 * process does the telling, so that the supervisor never blocks; a program
 * that does not use the store makes it retry harmlessly until it is killed
 * at the launcher's end. */
static void report_exit(launcher *L, proc *p)
{
	const launch_spec *s = L->spec;
	int i = (int)(p - L->p);
	if (!s->master_addr || s->master_port <= 0 || !L->reporters || L->reporters[i] > 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		/* Not our handlers: a Ctrl-C reaching this child too must not count
		 * as a second signal in the launcher's pipe. */
		accelp_launch_child_signals();
		/* Nothing of the launcher's: not the signal pipe, and not the ranks'
		 * pipes (a rank whose output the launcher closes must see EPIPE at
		 * once, not when this child is done) or logs. */
		closefrom(3);
#ifdef __linux__
		prctl(PR_SET_PDEATHSIG, SIGKILL);   /* not past a launcher killed with -9 */
#endif
		accel_err e = {0};
		int rc = accelp_store_report_exit(s->master_addr, s->master_port, s->world_size, p->rank,
		                                 "exited with status 0", REPORT_TIMEOUT_MS, &e);
		_exit(rc == ACCEL_OK ? 0 : 1);
	}
	if (pid > 0)
		L->reporters[i] = pid;
}

/* Rank 0 ended with status 0 while others still run.  It hosted the
 * rendezvous store, so a rank that has not joined yet would retry its
 * refused connection until comm.timeout_s: answer on the store's port in its
 * place, telling every rank that connects why it cannot join.  (If the port
 * cannot be bound, a rank of 0's is still holding it: nothing to do.) */
static void refuse_for_rank0(launcher *L)
{
	const launch_spec *s = L->spec;
	if (!s->master_addr || s->master_port <= 0 || L->refusal)
		return;
	accel_err e = {0};
	accelp_store_refusal_start(s->master_addr, s->master_port, s->world_size,
	                          "rank 0 exited with status 0 while other ranks still run; it "
	                          "hosted the rendezvous store, so ranks that had not joined the "
	                          "job yet cannot (accel launch answers on the store's port)",
	                          &L->refusal, &e);
}

static void cleanup_note(void *arg, const char *text)
{
	accelp_stream_say((launcher *)arg, "%s", text);
}

/* After a job in which a rank failed, the comm backends remove what its
 * ranks may have left in the system (the shm backend: shared-memory names
 * that live only until every rank has mapped them, so a job killed while
 * the ranks set up can leave one behind); comm.h, the cleanup slot.  Once
 * every rank has exited. */
void accelp_ranks_cleanup(launcher *L)
{
	int failed = 0;
	for (int i = 0; i < L->n; i++)
		failed |= L->p[i].pid > 0 && !(WIFEXITED(L->p[i].status) && !WEXITSTATUS(L->p[i].status));
	if (!failed)
		return;
	int32_t *ranks = calloc((size_t)L->n, sizeof(*ranks));
	int64_t *pids = calloc((size_t)L->n, sizeof(*pids));
	const char *job_id = NULL, *config = NULL;
	for (char **e = L->spec->envp[0]; e && *e; e++) {
		if (!strncmp(*e, ACCEL_ENV_JOB_ID "=", sizeof(ACCEL_ENV_JOB_ID)))
			job_id = *e + sizeof(ACCEL_ENV_JOB_ID);
		else if (!strncmp(*e, ACCEL_ENV_CONFIG "=", sizeof(ACCEL_ENV_CONFIG)))
			config = *e + sizeof(ACCEL_ENV_CONFIG);
	}
	/* the loader a rank's context sets up: the job's config (--config, as
	 * the ranks got it), so its plugin_dirs are searched too; one that
	 * cannot be read leaves the default directories */
	accelp_setup_opts so = {.config_optional = 1, .config_path = config,
	                        .config_path_from = "accel launch --config"};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	/* the ranks said what this set-up finds wrong (a plugin directory's
	 * loop of links, say: rank 0, once per job); the launcher does not
	 * repeat it */
	int level = accelp_log_get_level(), r = ACCEL_OK;
	if (ranks && pids) {
		if (level > ACCEL_LOG_ERROR)
			accelp_log_set_level(ACCEL_LOG_ERROR);
		r = accelp_setup_run(&so, &s, &err);
		accelp_log_set_level(level);
	}
	if (!ranks || !pids)
		accelp_stream_say(L, "cannot ask the comm backends to clean up after the job: out of "
		                  "memory");
	else if (r != ACCEL_OK)
		accelp_stream_say(L, "cannot ask the comm backends to clean up after the job: %s", err.msg);
	else {
		int32_t n = 0;
		for (int i = 0; i < L->n; i++)
			if (L->p[i].pid > 0 && !L->p[i].running) {
				ranks[n] = L->p[i].rank;
				pids[n++] = L->p[i].pid;
			}
		accel_comm_cleanup_v1 args = {
			.struct_size = sizeof(args), .n_ranks = n, .job_id = job_id ? job_id : "",
			.ranks = ranks, .pids = pids, .started_unix = (int64_t)L->started,
			.note = cleanup_note, .note_arg = L};
		accelp_comm_cleanup_job(s.loader, &args);
	}
	if (ranks && pids)
		accelp_setup_fini(&s);
	free(ranks);
	free(pids);
}

static void on_exit_status(launcher *L, proc *p, int st)
{
	p->running = 0;
	p->status = st;
	/* What the rank wrote before it exited is delivered in full before the
	 * launcher stops waiting for its pipes (LINGER_MS counts only after). */
	stream *ss[2] = {&p->out, &p->err};
	for (int k = 0; k < 2; k++) {
		int avail = 0;
		if (ss[k]->fd >= 0 && ioctl(ss[k]->fd, FIONREAD, &avail) == 0 && avail > 0)
			ss[k]->owed = (size_t)avail;
	}
	int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if (ok && !p->stopped && !L->stopping && accelp_ranks_running(L)) {
		if (p->rank == 0)
			refuse_for_rank0(L);
		else
			report_exit(L, p);
	}
	/* Leftover children of this rank would keep its output open: on failure
	 * they go with it. */
	if (!ok)
		kill(-p->pid, SIGKILL);
	if (ok || p->stopped)
		return;
	p->failed = 1;
	p->fail_s = accelp_wall_s();
	char d[128];
	accelp_ranks_describe(st, d, sizeof(d));
	accelp_stream_say(L, "rank %d failed: %s", p->rank, d);
	if (L->first_failed < 0) {
		L->first_failed = (int)(p - L->p);
		L->fail_s = accelp_wall_s();
		/* Ranks that have already ended on their own (we just had not
		 * reaped them yet) are reported as they ended, not counted among
		 * the ranks we stop. */
		accelp_ranks_reap(L);
		int left = accelp_ranks_running(L);
		if (left) {
			accelp_stream_say(L, "stopping the other %d rank%s (SIGTERM, then SIGKILL after %g s)",
			                  left, left == 1 ? "" : "s", L->spec->grace_s);
			accelp_ranks_stop(L, SIGTERM);
		}
	}
}

void accelp_ranks_reap(launcher *L)
{
	for (int i = 0; i < L->n; i++) {
		proc *p = &L->p[i];
		if (!p->running)
			continue;
		int st;
		pid_t r;
		do
			r = waitpid(p->pid, &st, WNOHANG);
		while (r < 0 && errno == EINTR);
		if (r == p->pid)
			on_exit_status(L, p, st);
		else if (r < 0 && errno == ECHILD)
			on_exit_status(L, p, 0); /* someone else reaped it: nothing to learn */
	}
}

void accelp_ranks_on_signal(launcher *L, int sig)
{
	char b[32];
	if (!L->got_signal && !L->stopping) {
		L->got_signal = sig;
		int k = accelp_ranks_running(L);
		accelp_stream_say(L, "received %s: forwarding it to %d rank%s (SIGKILL after %g s; send it "
		                  "again to kill them now)", accelp_launch_signame(sig, b, sizeof(b)), k,
		                  k == 1 ? "" : "s", L->spec->grace_s);
		accelp_ranks_stop(L, sig);
		return;
	}
	if (!L->got_signal)
		L->got_signal = sig;
	if (!L->killed && accelp_ranks_running(L)) {
		accelp_stream_say(L, "received %s again: killing all ranks",
		                  accelp_launch_signame(sig, b, sizeof(b)));
		accelp_ranks_signal(L, SIGKILL);
		L->killed = 1;
		L->final_deadline = mono_ms() + KILL_WAIT_MS;
	}
}

/* Fork and exec rank i.  Returns 0, or -1 with L->exec_errno set when
 * PROGRAM could not be run (or the fork failed). */
int accelp_ranks_start(launcher *L, int i)
{
	proc *p = &L->p[i];
	int outp[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2] = {-1, -1};
	if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0) {
		L->start_errno = errno;
		goto fail;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		L->start_errno = errno;
		goto fail;
	}
	if (pid == 0) {
		/* Child: only async-signal-safe calls until exec. */
		setpgid(0, 0);
#ifdef __linux__
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1); /* the launcher died before we got here */
#endif
		accelp_launch_child_signals();
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (dup2(L->devnull, 0) < 0 || dup2(outp[1], 1) < 0 || dup2(errp[1], 2) < 0) {
			int e = errno;
			ssize_t w = write(ep[1], &e, sizeof(e));
			(void)w;
			_exit(126);
		}
		execvpe(L->spec->argv[0], L->spec->argv, L->spec->envp[i]);
		int e = errno;
		ssize_t w = write(ep[1], &e, sizeof(e));
		(void)w;
		_exit(e == ENOENT ? 127 : 126);
	}
	setpgid(pid, pid); /* also here: whichever runs first wins the race */
	close(outp[1]);
	close(errp[1]);
	close(ep[1]);
	outp[1] = errp[1] = ep[1] = -1;
	int e = 0;
	ssize_t r;
	do
		r = read(ep[0], &e, sizeof(e));
	while (r < 0 && errno == EINTR);
	close(ep[0]);
	ep[0] = -1;
	p->pid = pid;
	p->running = 1;
	p->stopped = 0;
	p->out.fd = outp[0];
	p->err.fd = errp[0];
	fcntl(outp[0], F_SETFL, fcntl(outp[0], F_GETFL) | O_NONBLOCK);
	fcntl(errp[0], F_SETFL, fcntl(errp[0], F_GETFL) | O_NONBLOCK);
	if (r == (ssize_t)sizeof(e)) {
		/* exec failed: the child has exited or is about to. */
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		p->running = 0;
		p->status = st;
		p->stopped = 1;
		L->exec_errno = e ? e : ENOEXEC;
		L->exec_rank = p->rank;
		return -1;
	}
	return 0;
fail:
	for (int k = 0; k < 2; k++) {
		if (outp[k] >= 0)
			close(outp[k]);
		if (errp[k] >= 0)
			close(errp[k]);
		if (ep[k] >= 0)
			close(ep[k]);
	}
	L->exec_rank = p->rank;
	return -1;
}

/* The launcher's exit status once the ranks have ended. */
int accelp_ranks_exit_code(const launcher *L)
{
	int rc;
	if (L->first_failed >= 0) {
		int st = L->p[L->first_failed].status;
		/* The tool-wide convention: 1 when something failed; a death by
		 * signal keeps the shell's 128+N so that it stays visible. */
		rc = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
	} else if (L->start_errno) {
		rc = 1;
	} else if (L->exec_errno) {
		rc = L->exec_errno == ENOENT ? 127 : 126;
	} else if (L->node_lost) {
		rc = 1;
	} else if (L->got_signal) {
		rc = 128 + L->got_signal;
	} else {
		rc = 0;
		for (int i = 0; i < L->n; i++)
			if (L->p[i].running)
				rc = 1; /* gave up waiting for it */
	}
	if (rc == 0 && (accelp_ranks_running(L) || L->log_failed))
		rc = 1;
	return rc;
}

/* Nothing may outlive us unreaped: kill and collect any stragglers (ranks
 * and exit reporters), close the ranks' streams and logs.  Returns rc, or
 * 1 when a log could not be written. */
int accelp_ranks_reap_stragglers(launcher *L, int rc)
{
	for (int i = 0; L->p && i < L->n; i++) {
		proc *p = &L->p[i];
		if (p->running) {
			kill(-p->pid, SIGKILL);
			kill(p->pid, SIGKILL);
			int st;
			if (waitpid(p->pid, &st, WNOHANG) == p->pid)
				p->running = 0;
		}
		accelp_stream_close(L, p, &p->out);
		accelp_stream_close(L, p, &p->err);
		if (p->logfd >= 0 && close(p->logfd) < 0 && rc == 0) {
			accelp_stream_say(L, "writing the log of rank %d failed: %s", p->rank, strerror(errno));
			rc = 1;
		}
		for (int k = 0; k < TAIL_LINES; k++)
			free(p->tail[k]);
	}
	L->refusal = accelp_store_refusal_stop(L->refusal);
	for (int i = 0; L->reporters && i < L->n; i++)
		if (L->reporters[i] > 0) {
			kill(L->reporters[i], SIGKILL);
			while (waitpid(L->reporters[i], NULL, 0) < 0 && errno == EINTR)
				;
		}
	free(L->reporters);
	L->reporters = NULL;
	return rc;
}
