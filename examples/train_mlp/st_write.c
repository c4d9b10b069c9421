/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/st_write.c: see st_write.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_write.h"

typedef struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
		char *np = realloc(b->p, ncap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

static int plain(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
			return 0;
	return 1;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int st_write(const char *path, const st_tensor *t, int n, const char *const *meta, int n_meta,
             char *err, size_t errlen)
{
	sbuf h = {0};
	char *tmp = NULL;
	int fd = -1, rc = -1;
	uint64_t off = 0;

	sb_printf(&h, "{");
	if (n_meta > 0) {
		sb_printf(&h, "\"__metadata__\":{");
		for (int i = 0; i < n_meta; i++) {
			if (!plain(meta[2 * i]) || !plain(meta[2 * i + 1])) {
				snprintf(err, errlen, "%s: metadata \"%s\" needs escaping", path, meta[2 * i]);
				goto out;
			}
			sb_printf(&h, "%s\"%s\":\"%s\"", i ? "," : "", meta[2 * i], meta[2 * i + 1]);
		}
		sb_printf(&h, "}");
	}
	for (int i = 0; i < n; i++) {
		if (!plain(t[i].name)) {
			snprintf(err, errlen, "%s: tensor name \"%s\" needs escaping", path, t[i].name);
			goto out;
		}
		sb_printf(&h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (i || n_meta > 0) ? "," : "",
		          t[i].name, t[i].dtype);
		for (int d = 0; d < t[i].ndim; d++)
			sb_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
		sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
		          (unsigned long long)(off + t[i].nbytes));
		off += t[i].nbytes;
	}
	sb_printf(&h, "}");
	while (!h.oom && h.len % 8)
		sb_printf(&h, " ");
	if (h.oom) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}

	size_t tl = strlen(path) + 16;
	tmp = malloc(tl);
	if (!tmp) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	snprintf(tmp, tl, "%s.tmp-XXXXXX", path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	unsigned char len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
	int bad = write_all(fd, len8, 8) || write_all(fd, h.p, h.len);
	for (int i = 0; i < n && !bad; i++)
		bad = write_all(fd, t[i].data, t[i].nbytes);
	if (bad || fsync(fd)) {
		snprintf(err, errlen, "%s: writing %s: %s", path, tmp, strerror(errno));
		goto out;
	}
	if (close(fd)) {
		fd = -1;
		snprintf(err, errlen, "%s: closing %s: %s", path, tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	/* mkstemp creates 0600: a file it replaces keeps its mode, a new one
	 * gets the usual permissions (umask(2) read and restored: this program
	 * has one thread, so nobody creates a file in between). */
	struct stat old;
	mode_t mode;
	if (stat(path, &old) == 0 && S_ISREG(old.st_mode)) {
		mode = old.st_mode & 07777;
	} else {
		mode_t um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	chmod(tmp, mode);
	if (rename(tmp, path)) {
		snprintf(err, errlen, "%s: renaming %s over it: %s", path, tmp, strerror(errno));
		goto out;
	}
	free(tmp);
	tmp = NULL;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	free(h.p);
	return rc;
}
