/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz.h: the entry point every fuzz target defines (libFuzzer's). */
#ifndef ACCEL_TESTS_FUZZ_H
#define ACCEL_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
