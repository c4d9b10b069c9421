/* SPDX-License-Identifier: MIT */
/* core/store_server.c: the rendezvous store's server thread (store-impl.h):
 * one thread in rank 0 that listens (IPv6 dual-stack or IPv4, or loopback
 * only), accepts, and polls every connection; what it does with their
 * requests is store_serve.c's. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/mono.h"
#include "log.h"
#include "store-impl.h"

static void server_accept(store_server *s, int lfd)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* The pending connection keeps the listener readable: pause
				 * instead of spinning until descriptors free up. */
				char et[128];
				accelp_log(ACCEL_LOG_WARN, "rendezvous store: cannot accept a connection: %s",
				          store_errtext(errno, et, sizeof(et)));
				struct timespec ts = {0, 50000000};
				nanosleep(&ts, NULL);
			}
			return; /* EAGAIN: the next turn retries */
		}
		store_sock_tune(fd, s->keepalive_ms);
		if (s->ncl == s->capcl) {
			size_t nc = s->capcl ? s->capcl * 2 : 16;
			sclient **np = realloc(s->cl, nc * sizeof(*np));
			if (!np) {
				close(fd);
				return;
			}
			s->cl = np;
			s->capcl = nc;
		}
		sclient *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			return;
		}
		c->fd = fd;
		c->rank = -1;
		s->cl[s->ncl++] = c;
	}
}

static int all_done(const store_server *s)
{
	for (int r = 1; r < s->world; r++)
		if ((s->rank_state[r] == RANK_NEVER && !s->abandoned) ||
		    s->rank_state[r] == RANK_CONNECTED)
			return 0;
	return 1;
}

static void *server_main(void *arg)
{
	store_server *s = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	struct pollfd *pf = NULL;
	size_t cappf = 0;
	int stopping = 0;
	int64_t stop_deadline = 0;
	for (;;) {
		if (stopping && (all_done(s) || mono_ms() >= stop_deadline))
			break;
		size_t need = 1 + (size_t)s->n_lfd + s->ncl;
		if (need > cappf) {
			struct pollfd *np = realloc(pf, need * sizeof(*np));
			if (!np) {
				struct timespec ts = {0, 10000000};
				nanosleep(&ts, NULL);
				continue;
			}
			pf = np;
			cappf = need;
		}
		size_t n = 0;
		pf[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
		for (int i = 0; i < s->n_lfd; i++)
			pf[n++] = (struct pollfd){.fd = s->lfd[i], .events = POLLIN};
		int64_t now = mono_ms(), next = stopping ? stop_deadline : INT64_MAX;
		for (size_t i = 0; i < s->ncl; i++) {
			sclient *c = s->cl[i];
			short ev = POLLIN;
			if (c->out_off < c->out.len)
				ev |= POLLOUT;
			pf[n++] = (struct pollfd){.fd = c->fd, .events = ev};
			if (c->wait_op && c->deadline < next)
				next = c->deadline;
		}
		int tmo = -1;
		if (next != INT64_MAX)
			tmo = next <= now ? 0 : (int)(next - now > 60000 ? 60000 : next - now);
		int pr = poll(pf, n, tmo);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr > 0 && (pf[0].revents & POLLIN)) {
			char buf[16];
			ssize_t r = read(s->wake[0], buf, sizeof(buf));
			(void)r;
			if (!stopping) {
				stopping = 1;
				if (s->abort_msg)
					store_serve_fail_job(s, s->abort_msg);
				int64_t lm = atomic_load(&s->stop_linger_ms);
				stop_deadline = mono_after(mono_ms(), lm >= 0 ? lm : s->linger_ms);
			}
		}
		if (pr > 0)
			for (int i = 0; i < s->n_lfd; i++)
				if (pf[1 + i].revents & POLLIN)
					server_accept(s, s->lfd[i]);
		/* Clients accepted this turn are past the end of pf; they are
		 * polled next turn. */
		size_t polled = n - 1 - (size_t)s->n_lfd;
		for (size_t i = 0; pr > 0 && i < polled && i < s->ncl; i++) {
			sclient *c = s->cl[i];
			short re = pf[1 + s->n_lfd + i].revents;
			if (re & (POLLIN | POLLHUP | POLLERR))
				store_serve_read(s, c);
			if (re & POLLOUT)
				store_serve_flush(c);
		}
		now = mono_ms();
		for (size_t i = 0; i < s->ncl; i++) {
			sclient *c = s->cl[i];
			if (c->wait_op && !c->dead && c->deadline <= now)
				store_serve_expire(s, c);
			/* A client whose parked request was just answered (or whose
			 * reply went out) may have its next request buffered already. */
			if (!c->wait_op && !c->out.len && !c->dead && c->in.len >= 4)
				store_serve_read(s, c);
		}
		for (size_t i = s->ncl; i-- > 0;)
			if (s->cl[i]->dead)
				store_serve_close(s, i);
	}
	if (stopping && !all_done(s) && !s->refuse && !s->failed && !s->abandoned) {
		uint8_t *still = calloc((size_t)s->world, 1);
		if (still) {
			for (int r = 1; r < s->world; r++)
				still[r] = s->rank_state[r] == RANK_CONNECTED || s->rank_state[r] == RANK_NEVER;
			char list[512];
			store_fmt_ranks(still, s->world, list, sizeof(list));
			accelp_log(ACCEL_LOG_WARN, "rendezvous store: rank 0 stops the store while ranks "
			          "%s have not finished with it", list);
			free(still);
		}
	}
	free(pf);
	return NULL;
}

store_server *store_server_free(store_server *s)
{
	if (!s)
		return NULL;
	for (size_t i = s->ncl; i-- > 0;) {
		s->cl[i]->said_bye = 1;
		store_serve_close(s, i);
	}
	free(s->cl);
	for (int i = 0; i < s->n_lfd; i++)
		close(s->lfd[i]);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	store_serve_clear(s);
	free(s->rank_state);
	free(s->failed);
	free(s->abort_msg);
	free(s->refuse);
	free(s);
	return NULL;
}

/* Loopback addresses get a loopback-only listener; anything else listens on
 * every interface, because a host name may resolve to a different local
 * address than the one other nodes use to reach us. */
static int addr_is_loopback(const char *addr)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(addr, NULL, &hints, &res) != 0)
		return 0;
	int loop = 1;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			const struct sockaddr_in *sa = (const void *)ai->ai_addr;
			if ((ntohl(sa->sin_addr.s_addr) >> 24) != 127)
				loop = 0;
		} else if (ai->ai_family == AF_INET6) {
			const struct sockaddr_in6 *sa = (const void *)ai->ai_addr;
			if (!IN6_IS_ADDR_LOOPBACK(&sa->sin6_addr))
				loop = 0;
		} else {
			loop = 0;
		}
	}
	freeaddrinfo(res);
	return loop;
}

static int listen_on(const struct addrinfo *ai, int *ret_fd, int *ret_errno)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
	                ai->ai_protocol);
	if (fd < 0) {
		*ret_errno = errno;
		return -1;
	}
	int one = 1, zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
		*ret_errno = errno;
		close(fd);
		return -1;
	}
	*ret_fd = fd;
	return 0;
}

/* The port a listening socket is bound to (for port 0: the one the kernel
 * chose), or -1. */
static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

static void ai_set_port(struct addrinfo *ai, int port)
{
	if (ai->ai_family == AF_INET)
		((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)port);
	else if (ai->ai_family == AF_INET6)
		((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)port);
}

/* Record a new listener; with port 0 the first one fixes the port the
 * kernel chose, and the others (IPv4 next to IPv6) bind the same one. */
static int add_listener(store_server *s, int fd)
{
	if (s->port == 0) {
		int p = bound_port(fd);
		if (p <= 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		s->port = p;
	}
	s->lfd[s->n_lfd++] = fd;
	return 0;
}

int store_server_start(const char *addr, int port, int world, int64_t linger_ms,
                       int64_t keepalive_ms, const char *refuse, uint64_t token,
                       store_server **ret, accel_err *err)
{
	store_server *s = calloc(1, sizeof(*s));
	int rc;
	char et[128];
	if (!s)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
	s->wake[0] = s->wake[1] = -1;
	s->world = world;
	s->port = port;
	s->linger_ms = linger_ms;
	s->keepalive_ms = keepalive_ms;
	s->token = token;
	atomic_store(&s->stop_linger_ms, -1);
	s->nb = 64;
	s->tab = calloc(s->nb, sizeof(*s->tab));
	s->rank_state = calloc((size_t)world, 1);
	s->refuse = refuse ? strdup(refuse) : NULL;
	if (!s->tab || !s->rank_state || (refuse && !s->refuse)) {
		rc = accelp_err_set(err, ACCEL_ERR_NOMEM, "rendezvous store: out of memory");
		goto fail;
	}
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = accelp_err_set(err, ACCEL_ERR_SYSTEM, "rendezvous store: pipe: %s",
		                   store_errtext(errno, et, sizeof(et)));
		goto fail;
	}
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	int loop = addr && addr_is_loopback(addr);   /* NULL: every interface */
	if (!addr)
		addr = "*";
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	int gai;
	if (loop) {
		gai = getaddrinfo(addr, ps, &hints, &res);
	} else {
		/* Wildcard: prefer one dual-stack IPv6 socket, else IPv4. */
		hints.ai_family = AF_INET6;
		gai = getaddrinfo(NULL, ps, &hints, &res);
		if (gai == 0) {
			int e = 0, fd;
			if (listen_on(res, &fd, &e) == 0) {
				if (add_listener(s, fd) < 0)
					e = errno;
			} else if (e == EADDRINUSE) {
				freeaddrinfo(res);
				rc = port ? accelp_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous "
				                          "store on port %d (rank 0): address already in use; "
				                          "another job or a leftover process holds it: pick "
				                          "another master port", port)
				          : accelp_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous "
				                          "store on a free port (rank 0): the system has none "
				                          "left");
				goto fail;
			}
			freeaddrinfo(res);
			res = NULL;
		}
		if (!s->n_lfd) {
			hints.ai_family = AF_INET;
			gai = getaddrinfo(NULL, ps, &hints, &res);
		}
	}
	if (!s->n_lfd && gai != 0) {
		rc = accelp_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous store at "
		                   "%s:%d (rank 0): %s", addr, port, gai_strerror(gai));
		goto fail;
	}
	int last_errno = 0, want = 0;
	for (struct addrinfo *ai = res; ai && want < 2; ai = ai->ai_next)
		want++;
	for (int attempt = 0;; attempt++) {
		for (struct addrinfo *ai = res; ai && s->n_lfd < 2; ai = ai->ai_next) {
			int fd;
			if (s->port)
				ai_set_port(ai, s->port);
			if (listen_on(ai, &fd, &last_errno) == 0 && add_listener(s, fd) < 0)
				last_errno = errno;
		}
		/* Port 0: the port the kernel gave the first family may be taken
		 * in the other (IPv4 next to IPv6); start over with a new one
		 * rather than serve one family only. */
		if (port == 0 && s->n_lfd > 0 && s->n_lfd < want && last_errno == EADDRINUSE &&
		    attempt < 8) {
			while (s->n_lfd > 0)
				close(s->lfd[--s->n_lfd]);
			s->port = 0;
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
				ai_set_port(ai, 0);
			continue;
		}
		break;
	}
	if (res)
		freeaddrinfo(res);
	if (!s->n_lfd) {
		rc = accelp_err_set(err, ACCEL_ERR_SYSTEM, "cannot start the rendezvous store at %s:%d "
		                   "(rank 0): %s%s", addr, port, store_errtext(last_errno, et, sizeof(et)),
		                   last_errno == EADDRINUSE && port == 0 ? "; the system has no free "
		                   "port left" :
		                   last_errno == EADDRINUSE ? "; another job or a leftover process "
		                   "holds the port: pick another master port" :
		                   last_errno == EADDRNOTAVAIL ? "; the master address is not an "
		                   "address of this host (is this node the master?)" : "");
		goto fail;
	}
	int e = pthread_create(&s->thread, NULL, server_main, s);
	if (e) {
		rc = accelp_err_set(err, ACCEL_ERR_SYSTEM, "rendezvous store: cannot start its thread: %s",
		                   store_errtext(e, et, sizeof(et)));
		goto fail;
	}
	s->started = 1;
	*ret = s;
	return ACCEL_OK;
fail:
	store_server_free(s);
	return rc;
}

void store_server_stop(store_server *s, int64_t linger_ms, const char *abort_msg)
{
	if (!s || !s->started)
		return;
	if (abort_msg)
		s->abort_msg = strdup(abort_msg);  /* read by the thread after the wake */
	atomic_store(&s->stop_linger_ms, linger_ms);
	ssize_t w;
	do
		w = write(s->wake[1], "x", 1);
	while (w < 0 && errno == EINTR);
	pthread_join(s->thread, NULL);
	s->started = 0;
}

int store_server_port(const store_server *s)
{
	return s->port;
}

void store_server_abandon(store_server *s)
{
	s->abandoned = 1;
}
