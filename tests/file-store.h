/* SPDX-License-Identifier: MIT */
/* tests/file-store.h: a rendezvous store in files, for tests that drive a
 * comm backend without the core (test-comm, test-nccl, test-mpi): one file
 * per key under a directory, written by rename so readers never see half a
 * value.  The host's contract: get() waits up to timeout_ms (< 0: for
 * ever); a probe (timeout 0) returns ACCEL_ERR_NOT_FOUND for a missing key
 * and records nothing.  The includer defines `h_error()` (h may be NULL)
 * and, before including, FILE_STORE_DIR(h): the directory (default
 * h->store_dir). */
#ifndef ACCEL_TESTS_FILE_STORE_H
#define ACCEL_TESTS_FILE_STORE_H

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>

#include "accel/comm.h"

#ifndef FILE_STORE_DIR
#define FILE_STORE_DIR(h) ((h)->store_dir)
#endif

static void key_path(accel_host *h, const char *key, char *buf, size_t cap)
{
	char k[128];
	snprintf(k, sizeof(k), "%s", key);
	for (char *p = k; *p; p++)
		if (*p == '/')
			*p = '_';
	snprintf(buf, cap, "%s/%s", FILE_STORE_DIR(h), k);
}

static int fs_set(accel_host *h, const char *key, const void *value, uint64_t len)
{
	char path[512], tmp[600];
	key_path(h, key, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f || fwrite(value, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0)
		return h_error(h, ACCEL_ERR_SYSTEM, "file store: cannot write %s", path);
	return ACCEL_OK;
}

static int fs_get(accel_host *h, const char *key, void *buf, uint64_t cap, uint64_t *ret_len,
                  int64_t timeout_ms)
{
	char path[512];
	key_path(h, key, path, sizeof(path));
	for (int64_t waited = 0;; waited++) {
		FILE *f = fopen(path, "rb");
		if (f) {
			size_t n = fread(buf, 1, cap, f);
			fseek(f, 0, SEEK_END);
			*ret_len = (uint64_t)ftell(f);
			fclose(f);
			(void)n;
			return ACCEL_OK;
		}
		if (timeout_ms == 0)  /* a probe, as the host's store: no error recorded */
			return ACCEL_ERR_NOT_FOUND;
		if (timeout_ms >= 0 && waited >= timeout_ms)
			return h_error(h, ACCEL_ERR_TIMEOUT, "file store: no key %s", key);
		usleep(1000);
	}
}

static int fs_add(accel_host *h, const char *key, int64_t delta, int64_t *ret_value)
{
	char path[512], lock[600];
	int64_t v = 0;
	uint64_t len = 0;
	key_path(h, key, path, sizeof(path));
	snprintf(lock, sizeof(lock), "%s.lock", path);
	int fd = open(lock, O_CREAT | O_RDWR, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) != 0)
		return h_error(h, ACCEL_ERR_SYSTEM, "file store: cannot lock %s", lock);
	if (access(path, F_OK) == 0)
		fs_get(h, key, &v, sizeof(v), &len, 0);
	v += delta;
	int rc = fs_set(h, key, &v, sizeof(v));
	flock(fd, LOCK_UN);
	close(fd);
	if (rc == ACCEL_OK)
		*ret_value = v;
	return rc;
}

#endif /* ACCEL_TESTS_FILE_STORE_H */
