/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz.h: the entry point every fuzz target defines (libFuzzer's),
 * and the helpers in fuzz-util.c that the targets share. */
#ifndef ACCEL_TESTS_FUZZ_H
#define ACCEL_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Enough for "/proc/self/fd/<any int>". */
#define FUZZ_PATH_MAX 64

/* The input as a file, for readers that take a path: size bytes of data
 * written into an anonymous memory file named name (memfd_create, no
 * flags), whose path (/proc/self/fd/N) is written into ret_path.  Returns
 * the descriptor, which the caller closes (the file goes with it), or -1
 * when the file cannot be made or a write fails; nothing is left open
 * then and ret_path is not written: the target skips that input. */
int fuzz_input_file(const char *name, const uint8_t *data, size_t size,
                    char ret_path[FUZZ_PATH_MAX]);

#endif
