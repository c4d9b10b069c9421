/* SPDX-License-Identifier: MIT */
/* tests/free-port.h: a TCP port on 127.0.0.1 that nothing listens on right
 * now (bound to port 0, read back, closed), for tests that start a
 * rendezvous store.  Check-based tests only. */
#ifndef ACCEL_TESTS_FREE_PORT_H
#define ACCEL_TESTS_FREE_PORT_H

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

#endif
