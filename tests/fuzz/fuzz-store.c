/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-store.c: the rendezvous store's server, from any bytes.
 *
 * Rank 0 of a 2-rank store is started once (its server thread listens on
 * 127.0.0.1); each input is the byte stream of one TCP connection to it,
 * sent whole, after which the harness half-closes and reads until the server
 * closes or 2 s pass.  The server must survive anything a peer sends (bad
 * frames are dropped with the connection) and keep serving: after every
 * input a set/get round trip through rank 0's own client must work.  The
 * wire protocol is in docs/launch.md. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store.h"
#include "fuzz.h"

static accel_store *store;
static int port;

static void stop(void)
{
	store = accelp_store_free(store);
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int p = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		p = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return p;
}

static void start(void)
{
	accel_err e = {0};
	for (int tries = 0; tries < 20 && !store; tries++) {
		port = free_port();
		if (port > 0 && accelp_store_new("127.0.0.1", port, 0, 2, 2000, &store, &e) != ACCEL_OK) {
			store = NULL;
			accelp_err_clear(&e);
		}
	}
	if (!store) {
		fprintf(stderr, "fuzz-store: cannot start the store server\n");
		abort();
	}
	atexit(stop);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!store)
		start();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "fuzz-store: the server stopped accepting connections\n");
		abort();
	}
	size_t off = 0;
	while (off < size) {
		ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
		if (w <= 0)
			break;   /* the server dropped us: fine */
		off += (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	char buf[4096];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (poll(&p, 1, 2000) > 0 && recv(fd, buf, sizeof(buf), 0) > 0)
		;
	close(fd);

	/* still serving? */
	accel_err e = {0};
	char val[8] = {0};
	uint64_t len = 0;
	if (accelp_store_set(store, "fuzz/alive", "yes", 3, &e) != ACCEL_OK ||
	    accelp_store_get(store, "fuzz/alive", val, sizeof(val), &len, 0, &e) != ACCEL_OK ||
	    len != 3 || memcmp(val, "yes", 3)) {
		fprintf(stderr, "fuzz-store: the server stopped serving: %s\n", e.msg);
		abort();
	}
	return 0;
}
