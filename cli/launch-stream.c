/* SPDX-License-Identifier: MIT */
/* cli/launch-stream.c: the ranks' output under `accel launch`: their
 * pipes read into lines, prefixed "[rank R] " on our stdout/stderr and
 * written to their logs, the last lines of each kept for the summary of
 * a failure; and the launcher's own messages.  The supervising loop
 * (launch-run.c) is the only caller, so nothing here locks. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch-run.h"

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
static void log_write(launcher *L, proc *p, const char *data, size_t n)
{
	if (p->logfd < 0 || p->log_errno)
		return;
	if (launch_write_fully(p->logfd, data, n) < 0) {
		p->log_errno = errno ? errno : EIO;
		L->log_failed = 1;
		accelp_stream_say(L, "writing the log of rank %d ('%s/rank-%d.log') failed: %s; its "
		                  "further output is not logged", p->rank, L->spec->log_dir, p->rank,
		                  strerror(p->log_errno));
	}
}

void accelp_stream_say(launcher *L, const char *fmt, ...)
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

void accelp_stream_close(launcher *L, proc *p, stream *s)
{
	if (s->fd < 0)
		return;
	if (s->len)
		emit_line(L, p, s, s->buf, s->len); /* a last line without '\n' */
	s->len = 0;
	close(s->fd);
	s->fd = -1;
}

void accelp_stream_read(launcher *L, proc *p, stream *s)
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
		accelp_stream_close(L, p, s); /* EOF or error */
		return;
	}
}

int accelp_stream_open_logs(launcher *L)
{
	for (int i = 0; i < L->n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/rank-%d.log", L->spec->log_dir, L->p[i].rank);
		L->p[i].logfd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC |
		                     (L->spec->log_append ? O_APPEND : O_TRUNC), 0644);
		if (L->p[i].logfd < 0) {
			accelp_stream_say(L, "cannot write the log file '%s': %s", path, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void print_tail(launcher *L, const proc *p, const char *how)
{
	if (!p->tail_n) {
		accelp_stream_say(L, "rank %d printed nothing", p->rank);
		return;
	}
	accelp_stream_say(L, "last %d line%s of rank %d%s:", p->tail_n, p->tail_n == 1 ? "" : "s",
	                  p->rank, how);
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

void accelp_stream_print_tails(launcher *L)
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
