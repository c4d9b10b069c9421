/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-manifest.c: the checkpoint manifest reader (format
 * version 2, core/ckpt_manifest.c), from any text.
 *
 * The parser must either refuse the input with ACCEL_ERR_CHECKPOINT (or
 * NOMEM) and a message, or accept it; an accepted manifest must hold what
 * the reader promises: tensors sorted by name and found by it, every slice
 * naming a file of the manifest, the slices of each tensor sorted and
 * covering its elements exactly once.  Checking the (absent) files and
 * reading a tensor must then fail cleanly, naming a file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "ckpt_manifest.h"
#include "fuzz.h"

static void must(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-manifest: %s\n", what);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	accelp_ckpt_manifest *m = NULL;
	accel_err e = {0};
	/* a directory that does not exist: no input reaches the file system */
	int st = accelp_ckpt_manifest_parse((const char *)data, size, "/nonexistent-fuzz-ckpt", &m,
	                                    &e);
	if (st != ACCEL_OK) {
		must(!m, "a refused manifest was returned");
		must(e.code == st && e.msg[0], "a refusal without a message");
		must(st == ACCEL_ERR_CHECKPOINT || st == ACCEL_ERR_NOMEM, "a refusal with another code");
		return 0;
	}
	must(m->version == ACCELP_CKPT_FORMAT_VERSION && m->world_size >= 1 && m->strategy,
	     "accepted without version, world size or strategy");
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const accelp_ckpt_tensor *t = &m->tensors[i];
		must(i == 0 || strcmp(m->tensors[i - 1].name, t->name) < 0, "tensors not sorted");
		must(accelp_ckpt_manifest_find(m, t->name) == t, "a tensor not found by its name");
		uint64_t at = 0;
		for (uint32_t k = 0; k < t->n_slices; k++) {
			const accelp_ckpt_slice *s = &t->slices[k];
			must(s->file < m->n_files, "a slice names no file");
			must(s->offset == at && s->count > 0, "slices not contiguous");
			at += s->count;
		}
		must(at == t->numel, "slices do not cover the tensor");
	}
	for (uint32_t i = 0; i < m->n_files; i++) {
		must(accelp_ckpt_manifest_file_index(m, m->files[i].name) == (int)i, "file index");
		must(!strchr(m->files[i].name, '/'), "a file name with a '/'");
	}
	if (m->n_files) {
		accelp_err_clear(&e);
		must(accelp_ckpt_manifest_check_files(m, &e) == ACCEL_ERR_CHECKPOINT && e.msg[0],
		     "absent files were not refused");
	}
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const accelp_ckpt_tensor *t = &m->tensors[i];
		if (!t->numel)
			continue;
		float one;
		accelp_err_clear(&e);
		int r = accel_dtype_size(t->dtype) <= sizeof(one)
		                ? accelp_ckpt_manifest_read(m, t, t->numel - 1, 1, &one, &e)
		                : ACCEL_ERR_CHECKPOINT;
		must(r != ACCEL_OK, "read from an absent file succeeded");
		break;
	}
	accelp_ckpt_manifest_free(m);
	return 0;
}
