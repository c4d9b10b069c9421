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
 * signals itself.  Every child is reaped before we return. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "backends/common/launch-env.h"
#include "comm.h"
#include "launch.h"
#include "log.h"
#include "select.h"
#include "setup.h"
#include "store.h"
#include "backends/common/mono.h"

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

/* Our stdout (1) or stderr (2): through its writer's queue once started
 * (never blocks), directly before that.  A failed write (EPIPE) silences
 * the stream. */
static void out_write(launcher *L, int fd, const char *p, size_t n)
{
	if (L->q[fd]) {
		launch_out_put(L->q[fd], p, n);
		return;
	}
	if (!L->out_dead[fd] && launch_write_fully(fd, p, n) < 0)
		L->out_dead[fd] = 1;
}

static int out_is_dead(const launcher *L, int fd)
{
	return L->q[fd] ? launch_out_dead(L->q[fd]) : L->out_dead[fd];
}

/* A line for the rank's log.  The first failed write
 * (a full disk) is reported, fails the launch (exit status 1) and stops
 * that log; the rank itself runs on. */
static void say(launcher *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_write(launcher *L, proc *p, const char *data, size_t n)
{
	if (p->logfd < 0 || p->log_errno)
		return;
	if (launch_write_fully(p->logfd, data, n) < 0) {
		p->log_errno = errno ? errno : EIO;
		L->log_failed = 1;
		say(L, "writing the log of rank %d ('%s/rank-%d.log') failed: %s; its further output "
		    "is not logged", p->rank, L->spec->log_dir, p->rank, strerror(p->log_errno));
	}
}

static void say(launcher *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(launcher *L, const char *fmt, ...)
{
	char line[2048];
	va_list ap;
	int n = snprintf(line, sizeof(line), "accel launch: ");
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	out_write(L, 2, line, (size_t)n);
}

static void emit_line(launcher *L, proc *p, stream *s, const char *line, size_t len)
{
	if (L->spec->prefix) {
		char *b = malloc(len + 40);
		if (b) {
			int h = snprintf(b, 40, "[rank %d] ", p->rank);
			memcpy(b + h, line, len);
			b[h + (int)len] = '\n';
			out_write(L, s->to, b, (size_t)h + len + 1);
			free(b);
		}
	}
	/* The loop is the log's only writer, so the line and its newline stay
	 * together without a copy. */
	log_write(L, p, line, len);
	log_write(L, p, "\n", 1);
	if (s == &p->err)
		p->err_lines++;
	char *copy = strndup(line, len < TAIL_LINE_MAX ? len : TAIL_LINE_MAX);
	if (copy) {
		free(p->tail[p->tail_next]);
		p->tail[p->tail_next] = copy;
		p->tail_next = (p->tail_next + 1) % TAIL_LINES;
		if (p->tail_n < TAIL_LINES)
			p->tail_n++;
	}
}

static void stream_feed(launcher *L, proc *p, stream *s, const char *data, size_t n)
{
	while (n) {
		const char *nl = memchr(data, '\n', n);
		size_t seg = nl ? (size_t)(nl - data) : n;
		size_t room = sizeof(s->buf) - s->len;
		if (seg > room) {
			/* A line longer than the buffer is cut into buffer-sized lines. */
			memcpy(s->buf + s->len, data, room);
			emit_line(L, p, s, s->buf, sizeof(s->buf));
			s->len = 0;
			data += room;
			n -= room;
			continue;
		}
		memcpy(s->buf + s->len, data, seg);
		s->len += seg;
		data += seg;
		n -= seg;
		if (nl) {
			emit_line(L, p, s, s->buf, s->len);
			s->len = 0;
			data++;
			n--;
		}
	}
}

static void stream_close(launcher *L, proc *p, stream *s)
{
	if (s->fd < 0)
		return;
	if (s->len)
		emit_line(L, p, s, s->buf, s->len); /* a last line without '\n' */
	s->len = 0;
	close(s->fd);
	s->fd = -1;
}

static void stream_read(launcher *L, proc *p, stream *s)
{
	char buf[65536];
	for (;;) {
		ssize_t r = read(s->fd, buf, sizeof(buf));
		if (r > 0) {
			s->owed = s->owed > (size_t)r ? s->owed - (size_t)r : 0;
			stream_feed(L, p, s, buf, (size_t)r);
			/* Where our own stdout/stderr is a closed pipe (`accel launch ...
			 * | head`) and there is no log file, the rank's output goes
			 * nowhere: close its pipe too, so that its next write fails with
			 * SIGPIPE/EPIPE as it would writing to the closed pipe itself. */
			if (out_is_dead(L, s->to) && p->logfd < 0) {
				s->len = 0;
				close(s->fd);
				s->fd = -1;
			}
			return; /* one read per turn keeps ranks fair */
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		stream_close(L, p, s); /* EOF or error */
		return;
	}
}

static void describe_status(int st, char *out, size_t cap)
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

static int count_running(const launcher *L)
{
	int k = 0;
	for (int i = 0; i < L->n; i++)
		k += L->p[i].running;
	return k;
}

/* Send sig to the process group of every running rank. */
static void signal_all(launcher *L, int sig)
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

static void begin_stop(launcher *L, int sig)
{
	if (L->stopping)
		return;
	L->stopping = 1;
	L->kill_deadline = mono_ms() + (int64_t)(L->spec->grace_s * 1000.0 + 0.5);
	signal_all(L, sig);
}

/* In a child: for every signal the launcher handles or ignores, the
 * disposition the launcher was started with, as if the child had been
 * started directly: the default action, or ignored where it was ignored
 * (async-signal-safe). */
static void default_signals(void)
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
		default_signals();
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
	say((launcher *)arg, "%s", text);
}

/* After a job in which a rank failed, the comm backends remove what its
 * ranks may have left in the system (the shm backend: shared-memory names
 * that live only until every rank has mapped them, so a job killed while
 * the ranks set up can leave one behind); comm.h, the cleanup slot.  Once
 * every rank has exited. */
static void comm_cleanup(launcher *L)
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
		say(L, "cannot ask the comm backends to clean up after the job: out of memory");
	else if (r != ACCEL_OK)
		say(L, "cannot ask the comm backends to clean up after the job: %s", err.msg);
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

static void reap(launcher *L);

/* For the node launchers' "which failure came first" (launch-nodes.c): the
 * moment a failure is seen, not when the attempt's teardown ends, whose
 * length varies from node to node. */
static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
	if (ok && !p->stopped && !L->stopping && count_running(L)) {
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
	char d[128];
	describe_status(st, d, sizeof(d));
	say(L, "rank %d failed: %s", p->rank, d);
	if (L->first_failed < 0) {
		L->first_failed = (int)(p - L->p);
		L->fail_s = wall_s();
		/* Ranks that have already ended on their own (we just had not
		 * reaped them yet) are reported as they ended, not counted among
		 * the ranks we stop. */
		reap(L);
		int left = count_running(L);
		if (left) {
			say(L, "stopping the other %d rank%s (SIGTERM, then SIGKILL after %g s)", left,
			    left == 1 ? "" : "s", L->spec->grace_s);
			begin_stop(L, SIGTERM);
		}
	}
}

static void reap(launcher *L)
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

static void on_launcher_signal(launcher *L, int sig)
{
	char b[32];
	if (!L->got_signal && !L->stopping) {
		L->got_signal = sig;
		int k = count_running(L);
		say(L, "received %s: forwarding it to %d rank%s (SIGKILL after %g s; send it again "
		    "to kill them now)", accelp_launch_signame(sig, b, sizeof(b)), k, k == 1 ? "" : "s",
		    L->spec->grace_s);
		begin_stop(L, sig);
		return;
	}
	if (!L->got_signal)
		L->got_signal = sig;
	if (!L->killed && count_running(L)) {
		say(L, "received %s again: killing all ranks", accelp_launch_signame(sig, b, sizeof(b)));
		signal_all(L, SIGKILL);
		L->killed = 1;
		L->final_deadline = mono_ms() + KILL_WAIT_MS;
	}
}

/* Fork and exec rank i.  Returns 0, or -1 with L->exec_errno set when
 * PROGRAM could not be run (or the fork failed). */
static int start_rank(launcher *L, int i)
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
		default_signals();
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

static int open_logs(launcher *L)
{
	for (int i = 0; i < L->n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/rank-%d.log", L->spec->log_dir, L->p[i].rank);
		L->p[i].logfd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC |
		                     (L->spec->log_append ? O_APPEND : O_TRUNC), 0644);
		if (L->p[i].logfd < 0) {
			say(L, "cannot write the log file '%s': %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void print_tail(launcher *L, const proc *p, const char *how)
{
	if (!p->tail_n) {
		say(L, "rank %d printed nothing", p->rank);
		return;
	}
	say(L, "last %d line%s of rank %d%s:", p->tail_n, p->tail_n == 1 ? "" : "s", p->rank, how);
	int start = (p->tail_next - p->tail_n + TAIL_LINES) % TAIL_LINES;
	for (int k = 0; k < p->tail_n; k++) {
		const char *line = p->tail[(start + k) % TAIL_LINES];
		size_t len = strlen(line);
		char *b = malloc(len + 48);
		if (!b)
			continue;
		int h = snprintf(b, 48, "  [rank %d] ", p->rank);
		memcpy(b + h, line, len);
		b[h + (int)len] = '\n';
		out_write(L, 2, b, (size_t)h + len + 1);
		free(b);
	}
}

/* The lines that explain a failure: the first failed rank's, then those of
 * the other ranks that failed on their own, then of the ranks the launcher
 * stopped that wrote on stderr.  A rank that stops because another told it
 * to (an all-reduced verdict, a peer that vanished) is often the first to
 * exit, while the rank with the reason is still on its way out and gets
 * the SIGTERM.  At most MORE_TAILS besides the first, lowest ranks first. */
#define MORE_TAILS 3
static const char *last_line(const proc *p)
{
	return p->tail_n ? p->tail[(p->tail_next - 1 + TAIL_LINES) % TAIL_LINES] : NULL;
}

static void print_tails(launcher *L)
{
	const proc *first = &L->p[L->first_failed];
	const proc *shown_p[MORE_TAILS + 1] = {first};
	print_tail(L, first, "");
	int shown = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < L->n && shown < MORE_TAILS; i++) {
			const proc *p = &L->p[i];
			if (p == first || !p->tail_n ||
			    (pass == 0 ? !p->failed : p->failed || !p->stopped || !p->err_lines))
				continue;
			/* every rank failing with the same message: once is enough */
			int same = 0;
			for (int k = 0; k <= shown && !same; k++)
				same = last_line(shown_p[k]) && !strcmp(last_line(shown_p[k]), last_line(p));
			if (same)
				continue;
			shown_p[shown + 1] = p;
			print_tail(L, p, pass == 0 ? " (it failed too)"
			                           : " (stopped by the launcher; it wrote on stderr)");
			shown++;
		}
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
	reap(L);
	if (L->first_failed >= 0) {
		/* a rank had failed already: that is the reason; the loss is
		 * told all the same (node 0 counts it in its decision) */
		say(L, "%s", why);
		return;
	}
	L->node_lost = 1;
	L->fail_s = wall_s();
	snprintf(L->lost_why, sizeof(L->lost_why), "%s", why);
	int left = count_running(L);
	say(L, "%s; ending this node's attempt: stopping %d rank%s (SIGTERM, then SIGKILL after "
	    "%g s)", why, left, left == 1 ? "" : "s", L->spec->grace_s);
	begin_stop(L, SIGTERM);
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
		say(L, "out of memory; killing all ranks");
		signal_all(L, SIGKILL);
		return -1;
	}
	for (;;) {
		reap(L);
		int running = count_running(L);
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
						say(L, "rank %d exited but processes it started still hold its output; "
						    "sending them SIGTERM", p->rank);
						kill(-p->pid, SIGTERM);
					}
					stream_close(L, p, &p->out);
					stream_close(L, p, &p->err);
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
			say(L, "rank%s %s did not stop within %g s: sending SIGKILL", running == 1 ? "" : "s",
			    list, L->spec->grace_s);
			signal_all(L, SIGKILL);
			L->killed = 1;
			L->final_deadline = now + KILL_WAIT_MS;
		}
		if (L->killed && running && now >= L->final_deadline) {
			for (int i = 0; i < L->n; i++)
				if (L->p[i].running)
					say(L, "rank %d (pid %ld) has not exited %d s after SIGKILL; giving up on "
					    "it", L->p[i].rank, (long)L->p[i].pid, KILL_WAIT_MS / 1000);
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
			say(L, "poll: %s; killing all ranks", strerror(errno));
			signal_all(L, SIGKILL);
			L->killed = 1;
			L->final_deadline = mono_ms() + KILL_WAIT_MS;
			continue;
		}
		if (pf[0].revents & POLLIN) {
			unsigned char sigs[64];
			ssize_t r = read(sig_pipe[0], sigs, sizeof(sigs));
			for (ssize_t k = 0; k < r; k++)
				if (sigs[k] != SIGCHLD && sigs[k] != 0) /* 0: an output queue drained */
					on_launcher_signal(L, sigs[k]);
		}
		for (int k = 1; k < first_node; k++)
			if (pf[k].revents & (POLLIN | POLLHUP | POLLERR))
				if (ws[k]->fd >= 0)
					stream_read(L, who[k], ws[k]);
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

/* The launcher's exit status once the ranks have ended. */
static int exit_code(const launcher *L)
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
	if (rc == 0 && (count_running(L) || L->log_failed))
		rc = 1;
	return rc;
}

/* Nothing may outlive us unreaped: kill and collect any stragglers (ranks
 * and exit reporters), close the ranks' streams and logs.  Returns rc, or
 * 1 when a log could not be written. */
static int reap_stragglers(launcher *L, int rc)
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
		stream_close(L, p, &p->out);
		stream_close(L, p, &p->err);
		if (p->logfd >= 0 && close(p->logfd) < 0 && rc == 0) {
			say(L, "writing the log of rank %d failed: %s", p->rank, strerror(errno));
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
		say(&L, "out of memory");
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
		say(&L, "cannot open /dev/null: %s", strerror(errno));
		goto out;
	}
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		say(&L, "cannot create a pipe: %s", strerror(errno));
		goto out;
	}
	if (spec->log_dir && open_logs(&L) < 0)
		goto out;
	for (int fd = 1; fd <= 2; fd++) {
		int e = launch_out_start(&L.q[fd], fd, sig_pipe[1]);
		if (e) {
			say(&L, "cannot start the thread that writes our %s: %s",
			    fd == 1 ? "stdout" : "stderr", strerror(e));
			goto out;
		}
	}
	install_signals(old, &oldpipe);
	installed = 1;

	L.started = time(NULL);
	for (int i = 0; i < L.n; i++) {
		if (start_rank(&L, i) < 0) {
			if (L.start_errno)
				say(&L, "cannot start rank %d: %s", L.exec_rank, strerror(L.start_errno));
			else
				say(&L, "cannot run '%s' (rank %d): %s", spec->argv[0], L.exec_rank,
				    strerror(L.exec_errno));
			if (count_running(&L))
				begin_stop(&L, SIGTERM);
			break;
		}
	}
	run_loop(&L);
	reap(&L);
	comm_cleanup(&L);

	if (L.first_failed >= 0)
		print_tails(&L);
	rc = exit_code(&L);
	if (spec->result) {
		launch_result *res = spec->result;
		res->got_signal = L.got_signal;
		res->cannot_start = L.start_errno || L.exec_errno;
		res->failed_rank = L.first_failed >= 0 ? L.p[L.first_failed].rank : -1;
		res->node_lost = L.node_lost && L.first_failed < 0;
		res->fail_s = L.fail_s;
		res->reason[0] = '\0';
		if (res->node_lost)
			snprintf(res->reason, sizeof(res->reason), "%s", L.lost_why);
		if (L.first_failed >= 0) {
			char d[128];
			describe_status(L.p[L.first_failed].status, d, sizeof(d));
			snprintf(res->reason, sizeof(res->reason), "rank %d failed: %s",
			         res->failed_rank, d);
		}
	}
out:
	rc = reap_stragglers(&L, rc);
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
