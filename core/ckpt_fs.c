/* SPDX-License-Identifier: MIT */
/* core/ckpt_fs.c: the file system helpers of checkpoints (paths, fsync,
 * removing a temporary directory, small text files written durably). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_impl.h"


/* buf = dir + "/" + name (check_ready bounds dir, names are short). */
void accelp_ckpt_pjoin(char *buf, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= cap)
		buf[0] = '\0';
}

int accelp_ckpt_fsync_path(const char *path, int dir)
{
	int fd = open(path, (dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	close(fd);
	return r;
}

void accelp_ckpt_parent_of(const char *path, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", path);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	char *s = strrchr(buf, '/');
	if (!s)
		snprintf(buf, cap, ".");
	else if (s == buf)
		buf[1] = '\0';
	else
		*s = '\0';
}

const char *accelp_ckpt_base_of(const char *path, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", path);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	char *s = strrchr(buf, '/');
	return s ? s + 1 : buf;
}

/* Remove a directory of plain files (a failed save's temporary one). */
void accelp_ckpt_remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char p[PATH_CAP];
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			accelp_ckpt_pjoin(p, sizeof(p), dir, e->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

int accelp_ckpt_write_text(const char *path, const char *text, accel_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(errno));
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t k = write(fd, text + off, len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			int e = errno;
			close(fd);
			return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(e));
		}
		off += (size_t)k;
	}
	int bad = fsync(fd) != 0, e = errno;
	if (close(fd) != 0 && !bad) {
		bad = 1;
		e = errno;
	}
	if (bad)
		return accelp_err_set(err, ACCEL_ERR_IO, "%s: %s", path, strerror(e));
	return ACCEL_OK;
}

