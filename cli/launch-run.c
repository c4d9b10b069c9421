/* SPDX-License-Identifier: MIT */
/* cli/launch-run.c: start the ranks of `accel launch` and supervise them.
 *
 * One thread, one poll() loop over: a self-pipe that the signal handlers
 * write to (SIGCHLD, and the signals we forward), two pipes per rank
 * (its stdout and stderr), and with --nnodes --max-restarts the other node
 * launchers' connections (launch-nodes.c).  The loop never blocks on our
 * own stdout and stderr: a thread each writes them from a queue
 * (launch-out.c), and while a queue is full the loop stops reading the
 * pipes that feed it.  Each rank runs in its own process group, so stopping
 * a rank also stops whatever it started; the launcher forwards terminal
 * signals itself.  Every child is reaped before we return.
 *
 * This file holds the loop, the launcher's signals and the attempt from
 * start to end; the ranks as processes are in launch-ranks.c, their output
 * in launch-stream.c (launch-run.h between them). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch-run.h"
#include "backends/common/mono.h"

static int sig_pipe[2] = {-1, -1};
static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
#define N_HANDLED ((int)(sizeof(handled_signals) / sizeof(handled_signals[0])))
/* Signals the launcher was started with ignored (nohup, a background job
 * of a script): they stay ignored, in the launcher and in the ranks. */
static int inherited_ign[N_HANDLED], pipe_inherited_ign;

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(sig_pipe[1], &b, 1);
	(void)w; /* a full pipe already holds a wake-up */
	errno = saved;
}

const char *accelp_launch_signame(int sig, char *buf, unsigned long cap)
{
	static const struct {
		int sig;
		const char *name;
	} names[] = {
		{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},     {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
		{SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},   {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
		{SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},   {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
		{SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},   {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
		{SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},   {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
		{SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},     {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
		{SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
		{SIGIO, "SIGIO"},     {SIGSYS, "SIGSYS"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].sig == sig)
			return names[i].name;
	snprintf(buf, cap, "signal %d", sig);
	return buf;
}

/* In a child: for every signal the launcher handles or ignores, the
 * disposition the launcher was started with, as if the child had been
 * started directly: the default action, or ignored where it was ignored
 * (async-signal-safe). */
void accelp_launch_child_signals(void)
{
	struct sigaction dfl, ign;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	ign = dfl;
	ign.sa_handler = SIG_IGN;
	/* SIGCHLD always gets its default: ignoring it would make the kernel
	 * reap the rank's children before its own waitpid() sees them. */
	for (int k = 0; k < N_HANDLED; k++)
		sigaction(handled_signals[k],
		          inherited_ign[k] && handled_signals[k] != SIGCHLD ? &ign : &dfl, NULL);
	sigaction(SIGPIPE, pipe_inherited_ign ? &ign : &dfl, NULL);
}

/* Three descriptors per rank (two pipes and a log) must fit under the
 * soft limit; raise it toward the hard limit when they would not. */
static void ensure_fd_limit(int n)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)n * 3 + 32;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need) ? need : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* fds 0-2 must be open, or our pipes would land on them. */
static void ensure_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int d = open("/dev/null", O_RDWR);
			if (d >= 0 && d != fd) {
				dup2(d, fd);
				close(d);
			}
		}
}

/* A node launcher's connection flagged by poll(): a lost node ends this
 * attempt as a failure would (the ranks are stopped), unless it is ending
 * already. */
static void node_event(launcher *L, int fd)
{
	char why[sizeof(L->lost_why)];
	if (L->stopping || L->first_failed >= 0 ||
	    !accelp_nodes_watch_event(L->spec->nodes, fd, L->spec->gen, why, sizeof(why)))
		return;
	accelp_ranks_reap(L);
	if (L->first_failed >= 0) {
		/* a rank had failed already: that is the reason; the loss is
		 * told all the same (node 0 counts it in its decision) */
		accelp_stream_say(L, "%s", why);
		return;
	}
	L->node_lost = 1;
	L->fail_s = accelp_wall_s();
	snprintf(L->lost_why, sizeof(L->lost_why), "%s", why);
	int left = accelp_ranks_running(L);
	accelp_stream_say(L, "%s; ending this node's attempt: stopping %d rank%s (SIGTERM, then "
	                  "SIGKILL after %g s)", why, left, left == 1 ? "" : "s", L->spec->grace_s);
	accelp_ranks_stop(L, SIGTERM);
}

static int run_loop(launcher *L)
{
	int nw = L->spec->nodes ? accelp_nodes_count(L->spec->nodes) : 0;
	size_t cap = (size_t)(1 + 2 * L->n + nw);
	struct pollfd *pf = calloc(cap, sizeof(*pf));
	proc **who = calloc(cap, sizeof(*who));
	stream **ws = calloc(cap, sizeof(*ws));
	int *wfd = calloc((size_t)nw + 1, sizeof(*wfd));
	if (!pf || !who || !ws || !wfd) {
		free(pf);
		free(who);
		free(ws);
		free(wfd);
		accelp_stream_say(L, "out of memory; killing all ranks");
		accelp_ranks_signal(L, SIGKILL);
		return -1;
	}
	for (;;) {
		accelp_ranks_reap(L);
		int running = accelp_ranks_running(L);
		int nfd = 0;
		pf[nfd++] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
		/* Output our stdout/stderr cannot take yet stays in the ranks'
		 * pipes (they block writing, as they would on the reader itself). */
		int full[3] = {0, 0, 0};
		for (int fd = 1; fd <= 2; fd++)
			full[fd] = L->spec->prefix && L->q[fd] && launch_out_full(L->q[fd]);
		int open_streams = 0, owed = 0;
		for (int i = 0; i < L->n; i++) {
			stream *ss[2] = {&L->p[i].out, &L->p[i].err};
			for (int k = 0; k < 2; k++) {
				if (ss[k]->fd < 0)
					continue;
				open_streams++;
				owed |= ss[k]->owed > 0;
				if (full[ss[k]->to])
					continue;
				who[nfd] = &L->p[i];
				ws[nfd] = ss[k];
				pf[nfd++] = (struct pollfd){.fd = ss[k]->fd, .events = POLLIN};
			}
		}
		/* the other node launchers' connections, while the attempt runs */
		int first_node = nfd;
		if (nw && running && !L->stopping && L->first_failed < 0) {
			int k = accelp_nodes_watch_fds(L->spec->nodes, wfd, nw);
			for (int i = 0; i < k; i++)
				pf[nfd++] = (struct pollfd){.fd = wfd[i], .events = POLLIN};
		}
		int64_t now = mono_ms();
		if (!running && !open_streams)
			break;
		/* Once the ranks have exited and what they wrote has been read
		 * (unless a signal asks us to hurry), give what they started
		 * LINGER_MS to let go of their pipes. */
		if (!running && !L->linger_deadline && (!owed || L->got_signal))
			L->linger_deadline = now + LINGER_MS;
		if (!running && L->linger_deadline) {
			if (now >= L->linger_deadline) {
				for (int i = 0; i < L->n; i++) {
					proc *p = &L->p[i];
					if (p->out.fd < 0 && p->err.fd < 0)
						continue;
					/* A pipe whose write end is closed everywhere only has
					 * unread output left (we were asked to hurry). */
					int held = 0;
					stream *ss[2] = {&p->out, &p->err};
					for (int k = 0; k < 2; k++) {
						struct pollfd t = {.fd = ss[k]->fd, .events = POLLIN};
						held |= ss[k]->fd >= 0 && poll(&t, 1, 0) >= 0 && !(t.revents & POLLHUP);
					}
					/* Something the rank started outlives it and holds its
					 * output: the job is over, so it goes too. */
					if (held) {
						accelp_stream_say(L, "rank %d exited but processes it started still "
						                  "hold its output; sending them SIGTERM", p->rank);
						kill(-p->pid, SIGTERM);
					}
					accelp_stream_close(L, p, &p->out);
					accelp_stream_close(L, p, &p->err);
				}
				break;
			}
		}
		if (L->stopping && running && !L->killed && now >= L->kill_deadline) {
			char list[512];
			size_t len = 0;
			int listed = 0;
			for (int i = 0; i < L->n && len < sizeof(list) - 40; i++)
				if (L->p[i].running) {
					len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d",
					                        len ? ", " : "", L->p[i].rank);
					listed++;
				}
			if (listed < running)
				snprintf(list + len, sizeof(list) - len, " and %d more", running - listed);
			accelp_stream_say(L, "rank%s %s did not stop within %g s: sending SIGKILL",
			                  running == 1 ? "" : "s", list, L->spec->grace_s);
			accelp_ranks_signal(L, SIGKILL);
			L->killed = 1;
			L->final_deadline = now + KILL_WAIT_MS;
		}
		if (L->killed && running && now >= L->final_deadline) {
			for (int i = 0; i < L->n; i++)
				if (L->p[i].running)
					accelp_stream_say(L, "rank %d (pid %ld) has not exited %d s after SIGKILL; "
					                  "giving up on it", L->p[i].rank, (long)L->p[i].pid,
					                  KILL_WAIT_MS / 1000);
			break;
		}
		/* The stop deadlines matter only while ranks run: once all have
		 * exited, only the linger (when it has started) does. */
		int64_t next = INT64_MAX;
		if (!running)
			next = L->linger_deadline ? L->linger_deadline : INT64_MAX;
		else if (L->stopping && !L->killed)
			next = L->kill_deadline;
		else if (L->killed)
			next = L->final_deadline;
		int tmo = -1;
		if (next != INT64_MAX)
			tmo = next <= now ? 0 : (int)(next - now > 60000 ? 60000 : next - now);
		int pr = poll(pf, (nfds_t)nfd, tmo);
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			accelp_stream_say(L, "poll: %s; killing all ranks", strerror(errno));
			accelp_ranks_signal(L, SIGKILL);
			L->killed = 1;
			L->final_deadline = mono_ms() + KILL_WAIT_MS;
			continue;
		}
		if (pf[0].revents & POLLIN) {
			unsigned char sigs[64];
			ssize_t r = read(sig_pipe[0], sigs, sizeof(sigs));
			for (ssize_t k = 0; k < r; k++)
				if (sigs[k] != SIGCHLD && sigs[k] != 0) /* 0: an output queue drained */
					accelp_ranks_on_signal(L, sigs[k]);
		}
		for (int k = 1; k < first_node; k++)
			if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
				if (ws[k]->fd >= 0)
					accelp_stream_read(L, who[k], ws[k]);
		for (int k = first_node; k < nfd; k++)
			if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
				node_event(L, pf[k].fd);
	}
	free(pf);
	free(who);
	free(ws);
	free(wfd);
	return 0;
}

/* Our handlers for the signals the launcher forwards (old: what they were),
 * and SIGPIPE ignored (oldpipe). */
static void install_signals(struct sigaction *old, struct sigaction *oldpipe)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	for (int k = 0; k < N_HANDLED; k++) {
		sigaction(handled_signals[k], NULL, &old[k]);
		/* nohup and the background jobs of scripts start us with SIGHUP
		 * or SIGINT ignored: keep them ignored (and so in the ranks).
		 * SIGCHLD we need, whatever it was. */
		inherited_ign[k] = old[k].sa_handler == SIG_IGN;
		if (!inherited_ign[k] || handled_signals[k] == SIGCHLD)
			sigaction(handled_signals[k], &sa, NULL);
	}
	struct sigaction ign;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, oldpipe);
	pipe_inherited_ign = oldpipe->sa_handler == SIG_IGN;
}

/* The failure that ended the attempt.  The first rank to fail is often
 * one that lost a peer (a collective found the peer's connection closed)
 * while the peer that failed, killed or crashed, was still being reaped:
 * the ranks mark such a failure in the state file (core/restart.h), and
 * the first rank that failed otherwise is named instead.  Returns 1 when
 * every failure here was marked (the cause is elsewhere: another node). */
static int pick_cause(launcher *L)
{
	if (L->first_failed < 0 || !L->spec->state_path)
		return 0;
	unsigned char *mark = malloc((size_t)L->n);
	if (!mark)
		return 0;
	accelp_launch_state_peers(L->spec->state_path, mark, L->n);
	int best = -1;
	for (int i = 0; i < L->n; i++)
		if (L->p[i].failed && !mark[i] && (best < 0 || L->p[i].fail_s < L->p[best].fail_s))
			best = i;
	int consequence = mark[L->first_failed] && best < 0;
	if (best >= 0 && best != L->first_failed) {
		accelp_stream_say(L, "rank %d failed because it lost a peer: the cause is rank %d's "
		                  "failure", L->p[L->first_failed].rank, L->p[best].rank);
		L->first_failed = best;
	}
	free(mark);
	return consequence;
}

int accelp_launch_run(const launch_spec *spec)
{
	launcher L;
	memset(&L, 0, sizeof(L));
	L.spec = spec;
	L.n = spec->nproc;
	L.first_failed = -1;
	L.devnull = -1;
	int rc = 1;
	if (spec->result)
		*spec->result = (launch_result){.failed_rank = -1, .cannot_start = 1};
	struct sigaction old[N_HANDLED], oldpipe;
	int installed = 0;
	ensure_std_fds();
	ensure_fd_limit(L.n);
	L.p = calloc((size_t)L.n, sizeof(*L.p));
	L.reporters = calloc((size_t)L.n, sizeof(*L.reporters));
	if (!L.p || !L.reporters) {
		accelp_stream_say(&L, "out of memory");
		free(L.p);
		free(L.reporters);
		return 1;
	}
	for (int i = 0; i < L.n; i++) {
		L.p[i].rank = spec->first_rank + i;
		L.p[i].out = (stream){.fd = -1, .to = 1};
		L.p[i].err = (stream){.fd = -1, .to = 2};
		L.p[i].logfd = -1;
	}
	L.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (L.devnull < 0) {
		accelp_stream_say(&L, "cannot open /dev/null: %s", strerror(errno));
		goto out;
	}
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		accelp_stream_say(&L, "cannot create a pipe: %s", strerror(errno));
		goto out;
	}
	if (spec->log_dir && accelp_stream_open_logs(&L) < 0)
		goto out;
	for (int fd = 1; fd <= 2; fd++) {
		int e = launch_out_start(&L.q[fd], fd, sig_pipe[1]);
		if (e) {
			accelp_stream_say(&L, "cannot start the thread that writes our %s: %s",
			    fd == 1 ? "stdout" : "stderr", strerror(e));
			goto out;
		}
	}
	install_signals(old, &oldpipe);
	installed = 1;

	L.started = time(NULL);
	for (int i = 0; i < L.n; i++) {
		if (accelp_ranks_start(&L, i) < 0) {
			if (L.start_errno)
				accelp_stream_say(&L, "cannot start rank %d: %s", L.exec_rank,
				                  strerror(L.start_errno));
			else
				accelp_stream_say(&L, "cannot run '%s' (rank %d): %s", spec->argv[0], L.exec_rank,
				    strerror(L.exec_errno));
			if (accelp_ranks_running(&L))
				accelp_ranks_stop(&L, SIGTERM);
			break;
		}
	}
	run_loop(&L);
	accelp_ranks_reap(&L);
	accelp_ranks_cleanup(&L);
	int consequence = pick_cause(&L);

	if (L.first_failed >= 0)
		accelp_stream_print_tails(&L);
	rc = accelp_ranks_exit_code(&L);
	if (spec->result) {
		launch_result *res = spec->result;
		res->got_signal = L.got_signal;
		res->cannot_start = L.start_errno || L.exec_errno;
		res->failed_rank = L.first_failed >= 0 ? L.p[L.first_failed].rank : -1;
		res->node_lost = L.node_lost && L.first_failed < 0;
		res->fail_s = L.first_failed >= 0 ? L.p[L.first_failed].fail_s : L.fail_s;
		res->consequence = consequence;
		res->reason[0] = '\0';
		if (res->node_lost)
			snprintf(res->reason, sizeof(res->reason), "%s", L.lost_why);
		if (L.first_failed >= 0) {
			char d[128];
			accelp_ranks_describe(L.p[L.first_failed].status, d, sizeof(d));
			snprintf(res->reason, sizeof(res->reason), "rank %d failed: %s",
			         res->failed_rank, d);
		}
	}
out:
	rc = accelp_ranks_reap_stragglers(&L, rc);
	/* Our own output last: the thread writes out what is queued.  While its
	 * reader does not read, a signal gives up on it, and after one has
	 * stopped the job the wait is at most the grace period (200 ms at
	 * least); stderr, with the launcher's own messages, still gets 200 ms
	 * after stdout was given up. */
	int flush_ms = L.got_signal ? (int)(spec->grace_s * 1000.0 + 0.5) : -1;
	if (L.got_signal && flush_ms < 200)
		flush_ms = 200;
	int abandoned = 0;
	for (int fd = 1; fd <= 2; fd++)
		if (L.q[fd]) {
			launch_out *q = L.q[fd];
			L.q[fd] = NULL;
			if (launch_out_finish(q, sig_pipe[0], abandoned ? 200 : flush_ms) < 0) {
				abandoned = 1;
				if (rc == 0)
					rc = 1;
			}
		}
	if (installed) {
		for (int k = 0; k < N_HANDLED; k++)
			sigaction(handled_signals[k], &old[k], NULL);
		sigaction(SIGPIPE, &oldpipe, NULL);
	}
	/* An abandoned writer thread may still wake us through the signal
	 * pipe: leave it open (the process exits next) rather than let that
	 * byte land in a reused descriptor. */
	for (int k = 0; k < 2 && !abandoned; k++)
		if (sig_pipe[k] >= 0) {
			close(sig_pipe[k]);
			sig_pipe[k] = -1;
		}
	if (L.devnull >= 0)
		close(L.devnull);
	free(L.p);
	return rc;
}
