/* SPDX-License-Identifier: MIT */
/* core/tracker.c: what the trackers share: CRC-32C, making the logging
 * directory, flattening a record into scalar leaves. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tracker.h"

/* Bytewise table of the reflected Castagnoli polynomial 0x82F63B78, built
 * once on first use. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t accelp_crc32c(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint32_t c = 0xFFFFFFFFu;
	pthread_once(&crc_once, crc_init);
	for (size_t i = 0; i < n; i++)
		c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

uint32_t accelp_crc32c_masked(const void *data, size_t n)
{
	uint32_t c = accelp_crc32c(data, n);
	return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

int accelp_tracker_mkdirs(const char *dir)
{
	char buf[4096];
	size_t n = strlen(dir);
	struct stat st;
	if (n == 0 || n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, dir, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0777) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0777) != 0 && errno != EEXIST)
		return -1;
	if (stat(buf, &st) != 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

static int walk(json_t *obj, char *prefix, size_t plen, size_t cap,
                int (*fn)(const char *key, json_t *v, void *arg), void *arg)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		size_t klen = strlen(key);
		int r;
		if (plen + klen + 2 > cap)
			continue;   /* a key path over 1 KiB: not a metric name anyone plots */
		memcpy(prefix + plen, key, klen + 1);
		if (json_is_object(v)) {
			prefix[plen + klen] = '/';
			prefix[plen + klen + 1] = '\0';
			r = walk(v, prefix, plen + klen + 1, cap, fn, arg);
		} else {
			r = fn(prefix, v, arg);
		}
		prefix[plen] = '\0';
		if (r)
			return r;
	}
	return 0;
}

int accelp_tracker_flatten(json_t *rec, int (*fn)(const char *key, json_t *v, void *arg),
                           void *arg)
{
	char prefix[1024];
	prefix[0] = '\0';
	return walk(rec, prefix, 0, sizeof(prefix), fn, arg);
}
