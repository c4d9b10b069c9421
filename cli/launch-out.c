/* SPDX-License-Identifier: MIT */
/* cli/launch-out.c: the launcher's own stdout and stderr, each written by a
 * thread of its own from a queue, so that the supervising loop never blocks
 * on a reader that does not read (`| less` left on a page, a stalled log
 * shipper): signals are still forwarded and failed ranks still stopped.
 * Back-pressure is explicit: while a queue holds more than OUT_HIGH bytes
 * the loop stops reading the ranks' pipes that feed it (launch_out_full),
 * so the ranks block on their own writes as they would writing to the
 * stalled reader directly. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define OUT_HIGH (1u << 20)

struct launch_out {
	int fd;
	int wake_fd;             /* a byte 0 here wakes the supervising loop */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *pend;              /* queued, not yet taken by the thread */
	size_t pend_len, pend_cap;
	size_t inflight;         /* taken by the thread, being written */
	int closing;             /* no more puts: drain and exit */
	int throttled;           /* the loop saw the queue full: wake it below */
	atomic_int dead;         /* a write failed (EPIPE...): output dropped */
	atomic_int done;         /* the thread has exited */
};

static void wake(launch_out *o)
{
	unsigned char b = 0;
	ssize_t w = write(o->wake_fd, &b, 1);
	(void)w; /* a full pipe already holds a wake-up */
}

int launch_write_fully(int fd, const char *p, unsigned long n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* Someone else made the descriptor non-blocking. */
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			poll(&pf, 1, 1000);
		} else {
			return -1;
		}
	}
	return 0;
}

static void *writer(void *arg)
{
	launch_out *o = arg;
	char *work = NULL;
	size_t work_cap = 0;
	pthread_mutex_lock(&o->mu);
	for (;;) {
		while (!o->pend_len && !o->closing)
			pthread_cond_wait(&o->cv, &o->mu);
		if (!o->pend_len)
			break;
		/* Take the whole queue: swap buffers. */
		char *t = o->pend;
		size_t tcap = o->pend_cap, n = o->pend_len;
		o->pend = work;
		o->pend_cap = work_cap;
		o->pend_len = 0;
		work = t;
		work_cap = tcap;
		o->inflight = n;
		pthread_mutex_unlock(&o->mu);
		if (!atomic_load(&o->dead) && launch_write_fully(o->fd, work, n) < 0)
			atomic_store(&o->dead, 1);
		pthread_mutex_lock(&o->mu);
		o->inflight = 0;
		if (o->throttled && o->pend_len < OUT_HIGH) {
			o->throttled = 0;
			wake(o);
		}
	}
	pthread_mutex_unlock(&o->mu);
	free(work);
	atomic_store(&o->done, 1);
	wake(o);
	return NULL;
}

int launch_out_start(launch_out **ret, int fd, int wake_fd)
{
	launch_out *o = calloc(1, sizeof(*o));
	if (!o)
		return ENOMEM;
	o->fd = fd;
	o->wake_fd = wake_fd;
	pthread_mutex_init(&o->mu, NULL);
	pthread_cond_init(&o->cv, NULL);
	/* The thread must not take the signals the loop handles. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int e = pthread_create(&o->thread, NULL, writer, o);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		pthread_mutex_destroy(&o->mu);
		pthread_cond_destroy(&o->cv);
		free(o);
		return e;
	}
	*ret = o;
	return 0;
}

void launch_out_put(launch_out *o, const char *p, unsigned long n)
{
	if (!n || atomic_load(&o->dead))
		return;
	pthread_mutex_lock(&o->mu);
	if (o->pend_len + n > o->pend_cap) {
		size_t cap = o->pend_cap ? o->pend_cap : 65536;
		while (cap < o->pend_len + n)
			cap *= 2;
		char *b = realloc(o->pend, cap);
		if (!b) {
			pthread_mutex_unlock(&o->mu);
			return; /* out of memory: this piece of output is lost */
		}
		o->pend = b;
		o->pend_cap = cap;
	}
	memcpy(o->pend + o->pend_len, p, n);
	o->pend_len += n;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&o->mu);
}

int launch_out_full(launch_out *o)
{
	if (atomic_load(&o->dead))
		return 0;
	pthread_mutex_lock(&o->mu);
	int full = o->pend_len + o->inflight >= OUT_HIGH;
	if (full)
		o->throttled = 1;
	pthread_mutex_unlock(&o->mu);
	return full;
}

int launch_out_dead(launch_out *o)
{
	return atomic_load(&o->dead);
}

int launch_out_finish(launch_out *o, int sig_fd, int timeout_ms)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_mutex_lock(&o->mu);
	o->closing = 1;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&o->mu);
	while (!atomic_load(&o->done)) {
		int wait_ms = -1;
		if (timeout_ms >= 0) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			int64_t spent = (int64_t)(t.tv_sec - t0.tv_sec) * 1000 +
			                (t.tv_nsec - t0.tv_nsec) / 1000000;
			if (spent >= timeout_ms) {
				pthread_detach(o->thread);
				return -1;
			}
			wait_ms = (int)(timeout_ms - spent);
		}
		struct pollfd pf = {.fd = sig_fd, .events = POLLIN};
		if (poll(&pf, 1, wait_ms) < 0 && errno != EINTR)
			break;
		unsigned char b[64];
		ssize_t r = pf.revents & POLLIN ? read(sig_fd, b, sizeof(b)) : 0;
		for (ssize_t k = 0; k < r; k++)
			if (b[k] != 0 && b[k] != SIGCHLD) {
				/* The reader is stuck and the user wants out: leave the
				 * thread blocked in its write; the process exits next. */
				pthread_detach(o->thread);
				return -1;
			}
	}
	pthread_join(o->thread, NULL);
	pthread_mutex_destroy(&o->mu);
	pthread_cond_destroy(&o->cv);
	free(o->pend);
	int dead = atomic_load(&o->dead);
	free(o);
	return dead ? 1 : 0;
}
