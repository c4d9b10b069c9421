/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-util.c: what the fuzz targets share (fuzz.h).
 *
 * A memory file, not one on disk: a target runs millions of times under
 * libFuzzer, and nothing is left behind when it crashes. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

int fuzz_input_file(const char *name, const uint8_t *data, size_t size,
                    char ret_path[FUZZ_PATH_MAX])
{
	int fd = memfd_create(name, 0);
	if (fd < 0)
		return -1;
	for (size_t off = 0; off < size;) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	snprintf(ret_path, FUZZ_PATH_MAX, "/proc/self/fd/%d", fd);
	return fd;
}
