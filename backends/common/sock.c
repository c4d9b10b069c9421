/* SPDX-License-Identifier: MIT */
/* backends/common/sock.c: TCP sockets with deadlines, and keepalive. */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/common/mono.h"
#include "backends/common/sock.h"

/* The longest single poll: a far deadline is checked again after it. */
#define SLICE_MS 60000

int sock_wait(int fd, short events, int64_t deadline_ns)
{
	for (;;) {
		int ms = -1;
		if (deadline_ns) {
			int64_t left = deadline_ns - mono_ns();
			if (left <= 0) {
				errno = ETIMEDOUT;
				return -1;
			}
			ms = left < SLICE_MS * 1000000ll ? (int)(left / 1000000) + 1 : SLICE_MS;
		}
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

int sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (sock_wait(fd, POLLOUT, deadline_ns))
			return -1;
	}
	return 0;
}

int sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns)
{
	char *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (sock_wait(fd, POLLIN, deadline_ns))
			return -1;
	}
	return 0;
}

int sock_connect_begin(const struct addrinfo *ai, int *ret_fd)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
	                ai->ai_protocol);
	if (fd < 0)
		return -1;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
		*ret_fd = fd;
		return 0;
	}
	if (errno == EINPROGRESS || errno == EINTR) {
		*ret_fd = fd;
		return 1;
	}
	int e = errno;
	close(fd);
	errno = e;
	return -1;
}

int sock_connect_error(int fd)
{
	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
		return errno;
	return soerr;
}

int sock_is_self(int fd)
{
	struct sockaddr_storage a, b;
	socklen_t al = sizeof(a), bl = sizeof(b);
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (getsockname(fd, (struct sockaddr *)&a, &al) < 0 ||
	    getpeername(fd, (struct sockaddr *)&b, &bl) < 0 || al != bl)
		return 0;
	if (a.ss_family == AF_INET && b.ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)&a, *y = (const void *)&b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a.ss_family == AF_INET6 && b.ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)&a, *y = (const void *)&b;
		return x->sin6_port == y->sin6_port &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
	}
	return 0;
}

int sock_connect(const struct addrinfo *ai, int64_t deadline_ns, int *ret_fd)
{
	int fd = -1;
	int c = sock_connect_begin(ai, &fd);
	if (c < 0)
		return -1;
	if (c == 1) {
		int e = sock_wait(fd, POLLOUT, deadline_ns) ? errno : sock_connect_error(fd);
		if (e) {
			close(fd);
			errno = e;
			return -1;
		}
	}
	/* Connected to itself: nothing listens there (yet), and holding the
	 * port would keep the server we wait for from binding it. */
	if (sock_is_self(fd)) {
		close(fd);
		errno = ECONNREFUSED;
		return -1;
	}
	*ret_fd = fd;
	return 0;
}

void sock_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int sock_keepalive(int fd, int64_t keepalive_ms, int user_timeout)
{
	if (keepalive_ms <= 0)
		return 0;
	int on = 1, cnt = 3;
	int64_t k = keepalive_ms < 2000 ? 2 : keepalive_ms / 1000;
	int idle = (int)(k / 2 < 32767 ? k / 2 : 32767);
	int intvl = (int)((k - idle) / cnt);
	if (intvl < 1)
		intvl = 1;
	if (intvl > 32767)
		intvl = 32767;
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0)
		return -1;
	if (user_timeout) {
		unsigned int user_ms = keepalive_ms > UINT_MAX ? UINT_MAX : (unsigned int)keepalive_ms;
		if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) != 0)
			return -1;
	}
	return 0;
}
