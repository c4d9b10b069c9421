/* SPDX-License-Identifier: MIT */
/*
 * backends/common/sock.h: TCP sockets with deadlines, for the rendezvous
 * store and the tcp backend: wait for readiness, send and receive all of a
 * buffer, connect, each before a deadline on the mono_ns() clock (0: none),
 * on non-blocking sockets; and TCP keepalive.
 *
 * Every call returns 0, or -1 with errno set (ETIMEDOUT: the deadline
 * passed).  Nothing is logged: the caller words the message.
 */
#ifndef ACCEL_COMMON_SOCK_H
#define ACCEL_COMMON_SOCK_H

#include <stddef.h>
#include <stdint.h>

struct addrinfo;

/* Wait until fd is ready for `events` (POLLIN, POLLOUT). */
int sock_wait(int fd, short events, int64_t deadline_ns);

/* Write all of buf (MSG_NOSIGNAL: a closed peer is EPIPE, not a signal). */
int sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns);

/* Read exactly len bytes; the peer's EOF reads as ECONNRESET. */
int sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns);

/* Start a connection to ai on a new non-blocking, close-on-exec socket
 * (*ret_fd): 0 connected, 1 in progress (wait for POLLOUT, then
 * sock_connect_error), -1 with errno and no socket. */
int sock_connect_begin(const struct addrinfo *ai, int *ret_fd);

/* The outcome of a connection in progress that polled writable: 0, or
 * the errno value it failed with (ECONNREFUSED, ...). */
int sock_connect_error(int fd);

/* sock_connect_begin and the wait, in one: *ret_fd is connected (and
 * non-blocking) on 0; on -1 the socket is closed.  A connection to itself
 * (see sock_is_self) is closed and fails with ECONNREFUSED. */
int sock_connect(const struct addrinfo *ai, int64_t deadline_ns, int *ret_fd);

/* 1 when the connected socket fd is connected to itself: its local address
 * and port are its peer's.  TCP lets that happen when a client retries a
 * port on its own host that nothing listens on yet and the kernel picks
 * that very port as the client's source port (simultaneous open); the
 * client then talks to itself, and the server it waited for cannot bind
 * the port.  0 otherwise (also when an address cannot be read). */
int sock_is_self(int fd);

/* Turn off Nagle's delay (small request/reply messages). */
void sock_nodelay(int fd);

/* A connection counts as dead after keepalive_ms without an answer from
 * the peer node's kernel (<= 0: leave the socket as it is): keepalive
 * probes from half of it on while the connection is idle, three of them;
 * with user_timeout, also TCP_USER_TIMEOUT while data waits for its ACK
 * (which would also end the connection of a live peer whose receive window
 * stays full that long: for small messages only).  A live process's
 * kernel answers both even when the process is busy or stopped.  Linux
 * takes at most 32767 s for either interval. */
int sock_keepalive(int fd, int64_t keepalive_ms, int user_timeout);

#endif /* ACCEL_COMMON_SOCK_H */
