/* SPDX-License-Identifier: MIT */
/* cli/launch-nodes.c: the node launchers' rendezvous of `accel launch
 * --nnodes N --max-restarts R` (docs/launch.md, "Automatic restart",
 * "Several nodes").  Node 0's launcher listens on --master-port + 1; every
 * other node's launcher connects to it at start and keeps the connection
 * for the life of the job, so node 0 learns of a launcher that died (even
 * by SIGKILL) from the connection's end.  After each attempt every node
 * reports one line "G RC RESTARTABLE END REASON" (G: the attempt's
 * generation, END: when its launcher saw its first failure, else when it
 * ended, by the wall clock; RESTARTABLE 2: ended by a lost node);
 * node 0 decides for all:
 *   "go G2 NODES RANK CKPT_STEP STEP\nCKPT_DIR\nREASON\n"  restart as node
 *       RANK of NODES (ranks renumbered densely, node 0 stays 0);
 *   "stop RC\nMESSAGE\n"  exit (RC for a node whose own attempt succeeded).
 * A node that loses node 0 exits: node 0 runs the store the ranks meet at,
 * and there is no election (documented).
 *
 * While an attempt runs the supervisor (launch-run.c) watches these
 * connections too, so that a lost launcher ends the attempt at once rather
 * than when the ranks notice: node 0 watches every other node's connection
 * until that node reports, and on its end tells the others
 * "abort G REASON\n"; the others watch node 0's, for that line or its end.
 * A node that vanished (nothing closes its connection) is found by TCP
 * keepalive (KEEPALIVE_S). */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/sock.h"
#include "launch.h"

#define LINE_MAX_NODES 8192
/* A peer that answers nothing for this long is gone (keepalive probes from
 * KEEPALIVE_IDLE_S of silence, every KEEPALIVE_INTVL_S). */
#define KEEPALIVE_S 30
#define KEEPALIVE_IDLE_S 10
#define KEEPALIVE_INTVL_S 5

struct launch_nodes {
	int nnodes;       /* at start                                      */
	int self;         /* node rank at start                            */
	int listen_fd;    /* node 0                                        */
	int *fd;          /* node 0: [nnodes] peer connection, -1 gone     */
	int master_fd;    /* others: connection to node 0                  */
	int nodes;        /* node 0: nodes in the current attempt          */
	int *cur;         /* node 0: [nnodes] current node rank, -1 gone    */
	int *watch;       /* node 0: [nnodes] watched in this attempt       */
	int master_gone;  /* others: node 0's connection ended mid-attempt  */
	char gone[256];   /* node 0: nodes lost mid-attempt, "node 1, ..."  */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Read one line (without its newline) into buf within the deadline:
 * 0, -1 on end of file or error, -2 on timeout. */
static int read_line(int fd, char *buf, size_t cap, double deadline)
{
	size_t n = 0;
	for (;;) {
		double left = deadline - now_s();
		if (left <= 0)
			return -2;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int pr = poll(&p, 1, (int)(left * 1000) + 1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -1;
		if (pr == 0)
			continue;
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		if (c == '\n') {
			buf[n] = '\0';
			return 0;
		}
		if (n + 1 < cap)
			buf[n++] = c;
	}
}

/* A peer that has gone must not kill us with SIGPIPE: the launcher's own
 * disposition is back to the default between attempts. */
static int send_all(int fd, const char *s)
{
	size_t n = strlen(s);
	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Find a peer whose machine vanished (power, a cut network: nothing closes
 * the connection) within about KEEPALIVE_S, while we wait for it and while
 * the attempt runs.  Best effort: without it only the report timeout
 * finds it. */
static void keepalive(int fd)
{
	int one = 1, idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTVL_S;
	int cnt = (KEEPALIVE_S - KEEPALIVE_IDLE_S) / KEEPALIVE_INTVL_S;
	unsigned user_ms = KEEPALIVE_S * 1000u;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
#ifdef TCP_USER_TIMEOUT
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
#else
	(void)user_ms;
#endif
}

static int resolve(const char *addr, int port, struct addrinfo **ret)
{
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	return getaddrinfo(addr, ps, &hints, ret);
}

int accelp_nodes_open(launch_nodes **ret, const char *addr, int port, int nnodes, int self,
                      double timeout_s)
{
	*ret = NULL;
	launch_nodes *N = calloc(1, sizeof(*N));
	if (!N || !(N->fd = malloc((size_t)nnodes * sizeof(int))) ||
	    !(N->cur = malloc((size_t)nnodes * sizeof(int))) ||
	    !(N->watch = calloc((size_t)nnodes, sizeof(int)))) {
		if (N) {
			free(N->fd);
			free(N->cur);
		}
		free(N);
		fprintf(stderr, "accel launch: out of memory\n");
		return -1;
	}
	N->nnodes = nnodes;
	N->self = self;
	N->listen_fd = N->master_fd = -1;
	N->nodes = nnodes;
	for (int k = 0; k < nnodes; k++) {
		N->fd[k] = -1;
		N->cur[k] = k;
	}
	double deadline = now_s() + timeout_s;
	char line[128];
	if (self == 0) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		sa.sin_addr.s_addr = htonl(INADDR_ANY);
		if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, nnodes) < 0) {
			fprintf(stderr, "accel launch: node 0: cannot listen on port %d for the other "
			        "nodes' launchers (--master-port + 1, used with --max-restarts): %s; "
			        "choose a --master-port whose next port is free\n", port,
			        strerror(errno));
			if (fd >= 0)
				close(fd);
			goto fail;
		}
		N->listen_fd = fd;
		for (int got = 1; got < nnodes;) {
			double left = deadline - now_s();
			struct pollfd p = {.fd = fd, .events = POLLIN};
			int pr = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
			if (pr < 0 && errno == EINTR)
				continue;
			if (pr <= 0) {
				fprintf(stderr, "accel launch: node 0: only %d of the %d nodes' launchers "
				        "connected to port %d within %.0f s; start every node's launcher "
				        "with the same --master-addr/--master-port\n", got, nnodes, port,
				        timeout_s);
				goto fail;
			}
			int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			int r;
			if (read_line(c, line, sizeof(line), now_s() + 10) < 0 ||
			    sscanf(line, "hello %d", &r) != 1 || r <= 0 || r >= nnodes || N->fd[r] >= 0) {
				fprintf(stderr, "accel launch: node 0: ignoring a connection on port %d "
				        "that is not a launcher of this job ('%.60s')\n", port, line);
				close(c);
				continue;
			}
			N->fd[r] = c;
			N->watch[r] = 1;
			keepalive(c);
			got++;
		}
	} else {
		struct addrinfo *ai = NULL;
		int e = resolve(addr, port, &ai);
		if (e) {
			fprintf(stderr, "accel launch: node %d: cannot resolve --master-addr '%s': %s\n",
			        self, addr, gai_strerror(e));
			goto fail;
		}
		for (;;) {
			int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			/* a connection to itself (node 0 on this host, not yet
			 * listening, and the kernel chose that very port as our
			 * source) is nobody: it would also keep node 0 from
			 * binding the port */
			if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 && !sock_is_self(fd)) {
				N->master_fd = fd;
				keepalive(fd);
				break;
			}
			if (fd >= 0)
				close(fd);
			if (now_s() > deadline) {
				fprintf(stderr, "accel launch: node %d: node 0's launcher did not answer on "
				        "%s:%d (--master-port + 1) within %.0f s; start it with the same "
				        "--master-addr/--master-port and --max-restarts\n", self, addr,
				        port, timeout_s);
				freeaddrinfo(ai);
				goto fail;
			}
			usleep(100000);
		}
		freeaddrinfo(ai);
		snprintf(line, sizeof(line), "hello %d\n", self);
		if (send_all(N->master_fd, line) < 0) {
			fprintf(stderr, "accel launch: node %d: lost node 0's launcher at start: %s\n",
			        self, strerror(errno));
			goto fail;
		}
	}
	*ret = N;
	return 0;
fail:
	accelp_nodes_close(N);
	return -1;
}

void accelp_nodes_close(launch_nodes *N)
{
	if (!N)
		return;
	for (int k = 0; k < N->nnodes; k++)
		if (N->fd[k] >= 0)
			close(N->fd[k]);
	if (N->listen_fd >= 0)
		close(N->listen_fd);
	if (N->master_fd >= 0)
		close(N->master_fd);
	free(N->fd);
	free(N->cur);
	free(N->watch);
	free(N);
}

int accelp_nodes_count(const launch_nodes *N)
{
	return N->nnodes;
}

int accelp_nodes_watch_fds(launch_nodes *N, int *fds, int cap)
{
	int n = 0;
	if (N->self != 0) {
		if (N->master_fd >= 0 && !N->master_gone && cap > 0)
			fds[n++] = N->master_fd;
		return n;
	}
	for (int k = 1; k < N->nnodes && n < cap; k++)
		if (N->fd[k] >= 0 && N->watch[k])
			fds[n++] = N->fd[k];
	return n;
}

/* Why a connection that poll() flagged has ended: "" while it is alive
 * (data waits in it), else the words for the message. */
static const char *ended(int fd, char *buf, size_t cap)
{
	char c;
	ssize_t r;
	do
		r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
		return "";
	if (r == 0)
		return "its connection closed";
	snprintf(buf, cap, "its connection failed: %s", strerror(errno));
	return buf;
}

int accelp_nodes_watch_event(launch_nodes *N, int fd, int gen, char *why, unsigned long cap)
{
	char how[128], line[512];
	if (N->self != 0) {
		if (fd != N->master_fd || N->master_gone)
			return 0;
		const char *e = ended(fd, how, sizeof(how));
		if (!*e) {
			/* node 0 ends the attempt (a line sent after a decision is
			 * impossible: this node has not reported yet) */
			int g, off = 0;
			if (read_line(fd, line, sizeof(line), now_s() + 10) == 0) {
				if (sscanf(line, "abort %d %n", &g, &off) == 1 && off > 0 && g == gen) {
					snprintf(why, cap, "node 0's launcher ends the attempt on every node: %s",
					         line + off);
					return 1;
				}
				return 0; /* a stale abort: ignored */
			}
			e = "its connection closed";
		}
		N->master_gone = 1;
		snprintf(why, cap, "node 0's launcher is gone (%s)", e);
		return 1;
	}
	int k = 1;
	while (k < N->nnodes && N->fd[k] != fd)
		k++;
	if (k >= N->nnodes || !N->watch[k])
		return 0;
	const char *e = ended(fd, how, sizeof(how));
	if (!*e) {
		/* its report: its attempt ended, the line is read by decide() */
		N->watch[k] = 0;
		return 0;
	}
	snprintf(why, cap, "node %d's launcher (node %d at start) is gone: %s", N->cur[k], k, e);
	close(N->fd[k]);
	N->fd[k] = -1;
	N->watch[k] = 0;
	size_t gl = strlen(N->gone);
	snprintf(N->gone + gl, sizeof(N->gone) - gl, "%snode %d", gl ? ", " : "", N->cur[k]);
	/* the others end theirs too: their ranks may wait outside any
	 * collective, where the lost ranks' absence would never reach them */
	snprintf(line, sizeof(line), "abort %d %.400s\n", gen, why);
	for (int o = 1; o < N->nnodes; o++)
		if (N->fd[o] >= 0 && N->watch[o])
			send_all(N->fd[o], line);
	return 1;
}

/* Node 0: collect the reports, decide, tell the others. */
static int decide(launch_nodes *N, const launch_node_report *me, const launch_node_policy *pol,
                  launch_node_decision *d, double deadline)
{
	int n = N->nnodes;
	int *rc = calloc((size_t)n, sizeof(int)), *ok = calloc((size_t)n, sizeof(int));
	double end0 = me->end_s, endk;
	char *reason = calloc((size_t)n, 160);
	if (!rc || !ok || !reason) {
		free(rc), free(ok), free(reason);
		return -1;
	}
	rc[0] = me->rc;
	ok[0] = me->restartable;
	snprintf(reason, 160, "%s", me->reason);
	char line[512], gone[256];
	/* the nodes lost while the attempt ran (accelp_nodes_watch_event) */
	snprintf(gone, sizeof(gone), "%s", N->gone);
	N->gone[0] = '\0';
	/* an attempt ended by a lost node is not a failure of its own: the
	 * reason told is the loss */
	int present = 1, first_fail = me->rc && !me->node_lost ? 0 : -1;
	int cons0 = me->consequence != 0;
	for (int k = 1; k < n; k++) {
		if (N->fd[k] < 0)
			continue;
		int g, r, s, c, off = 0;
		int e = read_line(N->fd[k], line, sizeof(line), deadline);
		if (e == 0 && sscanf(line, "%d %d %d %d %lf %n", &g, &r, &s, &c, &endk, &off) == 5 &&
		    g == me->gen) {
			present++;
			rc[k] = r;
			ok[k] = s != 0;
			c = c != 0;
			snprintf(reason + 160 * k, 160, "%s", line + off);
			/* the reason told is the failure seen first (the
			 * others' ranks usually fail because of it), a rank's
			 * own before one that only lost a peer (c); s == 2:
			 * ended because a node was lost */
			if (r && s != 2 &&
			    (first_fail < 0 || (c == cons0 ? endk < end0 : cons0 && !c))) {
				first_fail = k;
				end0 = endk;
				cons0 = c;
			}
			continue;
		}
		fprintf(stderr, "accel launch: node %d's launcher (node %d at start) is gone: %s\n",
		        N->cur[k], k,
		        e == -2 ? "it did not report within the timeout" : "its connection closed");
		close(N->fd[k]);
		N->fd[k] = -1;
		size_t gl = strlen(gone);
		snprintf(gone + gl, sizeof(gone) - gl, "%snode %d", gl ? ", " : "", N->cur[k]);
	}
	int lost = present < N->nodes;
	char why[200];
	if (first_fail >= 0)
		snprintf(why, sizeof(why), "%s", reason + 160 * first_fail);
	else if (lost)
		snprintf(why, sizeof(why), "the loss of %s", gone);
	else
		why[0] = '\0';
	if (lost && first_fail < 0)
		first_fail = -2;
	int all_ok = 1;
	for (int k = 0; k < n; k++)
		if ((k == 0 || N->fd[k] >= 0) && rc[k] && !ok[k])
			all_ok = 0;
	d->rc = me->rc ? me->rc : 1;
	if (first_fail == -1) {
		d->go = 0;
		d->rc = 0;
		snprintf(d->message, sizeof(d->message), "done");
	} else if (!all_ok) {
		d->go = 0;
		snprintf(d->message, sizeof(d->message), "not restarting after %s: an attempt was "
		         "stopped or could not start", why);
	} else if (pol->restart >= pol->max_restarts) {
		d->go = 0;
		snprintf(d->message, sizeof(d->message), "%s; no restart left (--max-restarts %d)",
		         why, pol->max_restarts);
	} else if (present < pol->min_nodes) {
		d->go = 0;
		snprintf(d->message, sizeof(d->message), "%s; %d of the %d nodes left (lost: %s), "
		         "fewer than --min-nodes %d: not restarting", why, present, N->nodes,
		         gone[0] ? gone : "none", pol->min_nodes);
	} else {
		d->go = 1;
		if (lost && first_fail >= 0)
			snprintf(d->message, sizeof(d->message), "%.200s and the loss of %.200s", why,
			         gone);
		else
			snprintf(d->message, sizeof(d->message), "%s", why);
	}
	/* renumber: node 0 stays 0, the others in their old order */
	int next = 1;
	N->nodes = d->nodes = present;
	d->self = 0;
	for (int k = 1; k < n; k++) {
		N->cur[k] = N->fd[k] >= 0 ? next++ : -1;
		N->watch[k] = N->fd[k] >= 0;
	}
	d->gen = me->gen + 1;
	for (int k = 1; k < n; k++) {
		if (N->fd[k] < 0)
			continue;
		char *msg = NULL;
		int m;
		if (d->go)
			m = asprintf(&msg, "go %d %d %d %lld %lld\n%s\n%s\n", d->gen, d->nodes,
			             N->cur[k], d->st.ckpt_step, d->st.step, d->st.ckpt_dir,
			             d->message);
		else
			m = asprintf(&msg, "stop %d\n%s\n", d->rc, d->message);
		if (m < 0 || send_all(N->fd[k], msg) < 0) {
			fprintf(stderr, "accel launch: cannot tell node %d the decision: %s\n",
			        N->cur[k], strerror(errno));
		}
		free(msg);
	}
	free(rc), free(ok), free(reason);
	return 0;
}

int accelp_nodes_agree(launch_nodes *N, const launch_node_report *me,
                       const launch_node_policy *pol, launch_node_decision *d)
{
	double deadline = now_s() + pol->timeout_s;
	if (N->self == 0)
		return decide(N, me, pol, d, deadline);
	char line[LINE_MAX_NODES], reason[160];
	snprintf(reason, sizeof(reason), "%s", me->reason);
	reason[strcspn(reason, "\n")] = '\0';
	snprintf(line, sizeof(line), "%d %d %d %d %.6f %s\n", me->gen, me->rc,
	         me->node_lost ? 2 : me->restartable, me->consequence, me->end_s, reason);
	int e = N->master_gone || send_all(N->master_fd, line) < 0 ? -1 : 0;
	/* skip what node 0 told while the attempt ran (its "abort" may cross
	 * this node's report) */
	while (e == 0 && (e = read_line(N->master_fd, line, sizeof(line), deadline)) == 0 &&
	       !strncmp(line, "abort ", 6))
		;
	if (e < 0) {
		/* when node 0's loss ended the attempt, the reason is that loss */
		if (N->master_gone && me->node_lost)
			reason[0] = '\0';
		snprintf(d->message, sizeof(d->message), "%s%snode 0's launcher is gone (%s): it runs "
		         "the store the ranks meet at, so the other nodes cannot restart without it",
		         reason, reason[0] ? "; " : "",
		         e == -2 ? "no answer within the timeout" : "its connection closed");
		d->go = 0;
		d->rc = me->rc ? me->rc : 1;
		return 0;
	}
	int g, nodes, rank, rc;
	long long cs, s;
	if (sscanf(line, "go %d %d %d %lld %lld", &g, &nodes, &rank, &cs, &s) == 5) {
		d->go = 1;
		d->gen = g;
		d->nodes = nodes;
		d->self = rank;
		d->st.ckpt_step = cs;
		d->st.step = s;
		if (read_line(N->master_fd, d->st.ckpt_dir, sizeof(d->st.ckpt_dir), deadline) < 0 ||
		    read_line(N->master_fd, d->message, sizeof(d->message), deadline) < 0) {
			snprintf(d->message, sizeof(d->message), "node 0's launcher is gone in the middle "
			         "of its decision");
			d->go = 0;
			d->rc = me->rc ? me->rc : 1;
		}
		return 0;
	}
	if (sscanf(line, "stop %d", &rc) == 1) {
		d->go = 0;
		d->rc = me->rc ? me->rc : rc;
		if (read_line(N->master_fd, d->message, sizeof(d->message), deadline) < 0)
			snprintf(d->message, sizeof(d->message), "node 0 stopped the job");
		return 0;
	}
	d->go = 0;
	d->rc = me->rc ? me->rc : 1;
	snprintf(d->message, sizeof(d->message), "node 0's launcher sent '%.60s', not a decision",
	         line);
	return 0;
}
