/* SPDX-License-Identifier: MIT */
/* tests/free-port.h: a TCP port on 127.0.0.1 that nothing listens on right
 * now (bound to port 0, read back, closed), for tests that start a
 * rendezvous store.  free_port() (which fails the test when there is
 * none) needs <check.h> included first. */
#ifndef ACCEL_TESTS_FREE_PORT_H
#define ACCEL_TESTS_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* The port, or -1 when no socket could be bound. */
static inline int free_port_try(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	if (fd < 0)
		return -1;
	int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	         getsockname(fd, (struct sockaddr *)&sa, &sl) == 0;
	close(fd);
	return ok ? ntohs(sa.sin_port) : -1;
}

#ifdef ck_assert_int_gt
/* In a Check test: the port, or the test fails. */
static inline int free_port(void)
{
	int port = free_port_try();
	ck_assert_int_gt(port, 0);
	return port;
}
#endif

#endif
