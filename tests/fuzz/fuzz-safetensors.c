/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-safetensors.c: the safetensors reader, from any file.
 *
 * The input is the whole file (u64 header length, JSON header, data).  The
 * reader must either reject it with ACCEL_ERR_CHECKPOINT / ACCEL_ERR_IO and
 * a message, or accept it; an accepted file must be readable: every tensor
 * found by name, every element range inside it read back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "fuzz.h"

static void must(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-safetensors: %s\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[FUZZ_PATH_MAX];
	int fd = fuzz_input_file("fuzz-st", data, size, path);
	if (fd < 0)
		return 0;

	accel_st_reader *r = NULL;
	accel_err e = {0};
	int st = accelp_st_reader_new(path, &r, &e);
	if (st != ACCEL_OK) {
		must(!r, "failed open returned a reader");
		must(e.code == st && e.msg[0], "failed open without a message");
		must(st == ACCEL_ERR_CHECKPOINT || st == ACCEL_ERR_IO || st == ACCEL_ERR_NOMEM,
		     "failed open with an unexpected code");
		close(fd);
		return 0;
	}
	uint32_t n = accelp_st_reader_count(r);
	uint8_t *buf = malloc(1 << 16);
	for (uint32_t i = 0; i < n && buf; i++) {
		const accel_st_tensor *t = accelp_st_reader_get(r, i), *u = NULL;
		must(t != NULL, "tensor i < count is NULL");
		must(accelp_st_reader_find(r, t->name, &u, &e) == ACCEL_OK && u == t,
		     "an accepted tensor is not found by its name");
		uint64_t es = accel_abi_dtype_size(t->dtype);
		must(es > 0, "accepted tensor with an unknown dtype");
		uint64_t count = t->nbytes / es, step = (1 << 16) / es;
		for (uint64_t first = 0; first < count && first < 4 * step; first += step) {
			uint64_t k = count - first < step ? count - first : step;
			accelp_err_clear(&e);
			must(accelp_st_reader_read(r, t, first, k, buf, &e) == ACCEL_OK,
			     "reading inside an accepted tensor failed");
		}
		/* a range past the end is refused with a message */
		accelp_err_clear(&e);
		must(accelp_st_reader_read(r, t, count, 1, buf, &e) == ACCEL_ERR_INVALID_ARG && e.msg[0],
		     "a range past the tensor's end was not refused");
		accelp_err_clear(&e);
	}
	free(buf);
	uint32_t nm = accelp_st_reader_metadata_count(r);
	for (uint32_t i = 0; i < nm; i++) {
		const char *v = NULL;
		const char *k = accelp_st_reader_metadata_key(r, i, &v);
		must(k && v && accelp_st_reader_metadata(r, k) == v, "metadata key lookup disagrees");
	}
	accelp_st_reader_free(r);
	close(fd);
	return 0;
}
