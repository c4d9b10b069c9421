/* SPDX-License-Identifier: MIT */
/* tests/test-safetensors.c: safetensors writer/reader round trips, atomic
 * commit, streaming, range reads, and rejection of every kind of corrupt
 * file with its message.
 *
 * Also a helper for tests/safetensors_check.py (an independent reader in
 * Python):  test-safetensors --write-sample FILE  writes a file with known
 * values;  test-safetensors --dump FILE  prints what this reader sees, one
 * JSON object per tensor. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "accel/accel.h"
#include "error.h"
#include "backends/common/half.h"
#include "safetensors.h"

static char tmpdir[256];

static void make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/accel-st-XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	DIR *d = opendir(tmpdir);
	if (!d)
		return;
	struct dirent *e;
	char p[512];
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(tmpdir);
}

static char *tmp_path(const char *name)
{
	static char p[512];
	snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	return p;
}

static int count_files(void)
{
	DIR *d = opendir(tmpdir);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	if (d)
		closedir(d);
	return n;
}

static uint64_t file_size(const char *path)
{
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

/* ---- the sample file (shared with safetensors_check.py) ------------------ */

static int write_sample(const char *path, accel_err *err)
{
	float f32[12], scalar = 42.5f, empty[1];
	double f64[5];
	uint16_t f16[6], bf16[4];
	int64_t i64[3] = {-1, (int64_t)1 << 40, 7};
	int32_t i32[4] = {-5, 0, 5, 2147483647};
	uint8_t u8[6] = {0, 1, 2, 127, 128, 255};
	uint8_t e4m3[4] = {0x38, 0x40, 0xb8, 0x00};  /* 1, 2, -1, 0 */
	uint8_t e5m2[2] = {0x3c, 0xc0};              /* 1, -2 */
	for (int i = 0; i < 12; i++)
		f32[i] = (float)i * 0.25f - 1.0f;
	for (int i = 0; i < 5; i++)
		f64[i] = (double)i / 3.0;
	for (int i = 0; i < 6; i++)
		f16[i] = accel_f32_to_f16((float)(i - 3) * 0.5f);
	for (int i = 0; i < 4; i++)
		bf16[i] = accel_f32_to_bf16((float)(i + 1) * 1.5f);

	accel_st_writer *w = NULL;
	int rc = accelp_st_writer_new(path, &w, err);
	const uint64_t s34[] = {3, 4}, s5[] = {5}, s23[] = {2, 3}, s4[] = {4}, s3[] = {3},
	               s22[] = {2, 2}, s6[] = {6}, s2[] = {2}, s03[] = {0, 3};
	/* u8 first so the layout sort has something to do. */
	if (!rc) rc = accelp_st_writer_add(w, "u8", ACCEL_DTYPE_U8, 1, s6, u8, err);
	if (!rc) rc = accelp_st_writer_add(w, "f16", ACCEL_DTYPE_F16, 2, s23, f16, err);
	if (!rc) rc = accelp_st_writer_add(w, "f32", ACCEL_DTYPE_F32, 2, s34, f32, err);
	if (!rc) rc = accelp_st_writer_add(w, "f64", ACCEL_DTYPE_F64, 1, s5, f64, err);
	if (!rc) rc = accelp_st_writer_add(w, "bf16", ACCEL_DTYPE_BF16, 1, s4, bf16, err);
	if (!rc) rc = accelp_st_writer_add(w, "i64", ACCEL_DTYPE_I64, 1, s3, i64, err);
	if (!rc) rc = accelp_st_writer_add(w, "i32", ACCEL_DTYPE_I32, 2, s22, i32, err);
	if (!rc) rc = accelp_st_writer_add(w, "f8e4m3", ACCEL_DTYPE_F8E4M3, 1, s4, e4m3, err);
	if (!rc) rc = accelp_st_writer_add(w, "f8e5m2", ACCEL_DTYPE_F8E5M2, 1, s2, e5m2, err);
	if (!rc) rc = accelp_st_writer_add(w, "empty", ACCEL_DTYPE_F32, 2, s03, empty, err);
	if (!rc) rc = accelp_st_writer_add(w, "scalar", ACCEL_DTYPE_F32, 0, NULL, &scalar, err);
	if (!rc) rc = accelp_st_writer_set_metadata(w, "format", "pt", err);
	if (!rc) rc = accelp_st_writer_set_metadata(w, "producer", "accel test", err);
	if (!rc) rc = accelp_st_writer_commit(w, err);
	accelp_st_writer_free(w);
	return rc;
}

/* One JSON line per tensor, values as numbers (f16/bf16 widened, f8 as raw
 * bytes since the reader does not decode them). */
static int dump(const char *path, accel_err *err)
{
	accel_st_reader *r = NULL;
	int rc = accelp_st_reader_new(path, &r, err);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < accelp_st_reader_metadata_count(r); i++) {
		const char *v, *k = accelp_st_reader_metadata_key(r, i, &v);
		json_t *o = json_pack("{s:s,s:s}", "metadata", k, "value", v);
		char *s = json_dumps(o, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(o);
	}
	for (uint32_t i = 0; !rc && i < accelp_st_reader_count(r); i++) {
		const accel_st_tensor *t = accelp_st_reader_get(r, i);
		size_t es = accel_dtype_size(t->dtype);
		unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
		rc = accelp_st_reader_read(r, t, 0, t->numel, buf, err);
		json_t *shape = json_array(), *vals = json_array();
		for (uint32_t d = 0; d < t->ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
		for (uint64_t k = 0; !rc && k < t->numel; k++) {
			const unsigned char *p = buf + k * es;
			json_t *v = NULL;
			float f;
			double dd;
			uint16_t h;
			int32_t i32;
			int64_t i64;
			switch (t->dtype) {
			case ACCEL_DTYPE_F32: memcpy(&f, p, 4); v = json_real(f); break;
			case ACCEL_DTYPE_F64: memcpy(&dd, p, 8); v = json_real(dd); break;
			case ACCEL_DTYPE_F16: memcpy(&h, p, 2); v = json_real(accel_f16_to_f32(h)); break;
			case ACCEL_DTYPE_BF16: memcpy(&h, p, 2); v = json_real(accel_bf16_to_f32(h)); break;
			case ACCEL_DTYPE_I32: memcpy(&i32, p, 4); v = json_integer(i32); break;
			case ACCEL_DTYPE_I64: memcpy(&i64, p, 8); v = json_integer(i64); break;
			default: v = json_integer(*p); break;
			}
			json_array_append_new(vals, v);
		}
		json_t *o = json_pack("{s:s,s:s,s:o,s:[I,I],s:o}", "name", t->name, "dtype",
		                      accelp_st_dtype_name(t->dtype), "shape", shape, "offsets",
		                      (json_int_t)t->offset, (json_int_t)(t->offset + t->nbytes),
		                      "values", vals);
		char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
		printf("%s\n", s);
		free(s);
		json_decref(o);
		free(buf);
	}
	accelp_st_reader_free(r);
	return rc;
}

/* ---- round trips ------------------------------------------------------------ */

START_TEST(roundtrip_sample)
{
	accel_err err = {0};
	const char *p = tmp_path("sample.safetensors");
	ck_assert_msg(write_sample(p, &err) == ACCEL_OK, "%s", err.msg);
	ck_assert_int_eq(count_files(), 1);   /* no temporary left behind */

	/* The header length is a multiple of 8 and the file ends with the data. */
	unsigned char lb[8];
	FILE *f = fopen(p, "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fread(lb, 1, 8, f), 8);
	fclose(f);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | lb[i];
	ck_assert_uint_eq(hlen % 8, 0);

	accel_st_reader *r = NULL;
	ck_assert_msg(accelp_st_reader_new(p, &r, &err) == ACCEL_OK, "%s", err.msg);
	ck_assert_uint_eq(accelp_st_reader_count(r), 11);
	ck_assert_str_eq(accelp_st_reader_path(r), p);
	uint64_t total = 0;
	for (uint32_t i = 0; i < accelp_st_reader_count(r); i++) {
		const accel_st_tensor *t = accelp_st_reader_get(r, i);
		/* layout: aligned to element size, in offset order, contiguous */
		ck_assert_uint_eq(t->offset % accel_dtype_size(t->dtype), 0);
		ck_assert_uint_eq(t->offset, total);
		total += t->nbytes;
	}
	ck_assert_uint_eq(file_size(p), 8 + hlen + total);
	ck_assert_ptr_null(accelp_st_reader_get(r, 11));

	const accel_st_tensor *t;
	float f32[12];
	ck_assert_int_eq(accelp_st_reader_find(r, "f32", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->dtype, ACCEL_DTYPE_F32);
	ck_assert_uint_eq(t->ndim, 2);
	ck_assert_uint_eq(t->shape[0], 3);
	ck_assert_uint_eq(t->shape[1], 4);
	ck_assert_uint_eq(t->numel, 12);
	ck_assert_uint_eq(t->nbytes, 48);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 12, f32, &err), ACCEL_OK);
	for (int i = 0; i < 12; i++)
		ck_assert_float_eq(f32[i], (float)i * 0.25f - 1.0f);
	/* a range in the middle */
	float mid[3] = {0};
	ck_assert_int_eq(accelp_st_reader_read(r, t, 5, 3, mid, &err), ACCEL_OK);
	ck_assert_float_eq(mid[0], 0.25f);
	ck_assert_float_eq(mid[2], 0.75f);

	double f64[5];
	ck_assert_int_eq(accelp_st_reader_find(r, "f64", &t, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 5, f64, &err), ACCEL_OK);
	ck_assert_double_eq(f64[4], 4.0 / 3.0);

	uint16_t h[6];
	ck_assert_int_eq(accelp_st_reader_find(r, "f16", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->dtype, ACCEL_DTYPE_F16);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 6, h, &err), ACCEL_OK);
	ck_assert_float_eq(accel_f16_to_f32(h[0]), -1.5f);
	ck_assert_float_eq(accel_f16_to_f32(h[5]), 1.0f);
	ck_assert_int_eq(accelp_st_reader_find(r, "bf16", &t, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 4, h, &err), ACCEL_OK);
	ck_assert_float_eq(accel_bf16_to_f32(h[3]), 6.0f);

	int64_t i64[3];
	ck_assert_int_eq(accelp_st_reader_find(r, "i64", &t, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 3, i64, &err), ACCEL_OK);
	ck_assert_int_eq(i64[0], -1);
	ck_assert_int_eq(i64[1], (int64_t)1 << 40);
	int32_t i32[4];
	ck_assert_int_eq(accelp_st_reader_find(r, "i32", &t, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 4, i32, &err), ACCEL_OK);
	ck_assert_int_eq(i32[3], 2147483647);
	uint8_t u8[6];
	ck_assert_int_eq(accelp_st_reader_find(r, "u8", &t, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 6, u8, &err), ACCEL_OK);
	ck_assert_uint_eq(u8[4], 128);
	ck_assert_uint_eq(u8[5], 255);
	ck_assert_int_eq(accelp_st_reader_find(r, "f8e4m3", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->dtype, ACCEL_DTYPE_F8E4M3);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 4, u8, &err), ACCEL_OK);
	ck_assert_uint_eq(u8[2], 0xb8);
	ck_assert_int_eq(accelp_st_reader_find(r, "f8e5m2", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->dtype, ACCEL_DTYPE_F8E5M2);

	ck_assert_int_eq(accelp_st_reader_find(r, "empty", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->numel, 0);
	ck_assert_uint_eq(t->ndim, 2);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 0, NULL, &err), ACCEL_OK);
	float sc = 0;
	ck_assert_int_eq(accelp_st_reader_find(r, "scalar", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->ndim, 0);
	ck_assert_uint_eq(t->numel, 1);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 1, &sc, &err), ACCEL_OK);
	ck_assert_float_eq(sc, 42.5f);

	ck_assert_str_eq(accelp_st_reader_metadata(r, "format"), "pt");
	ck_assert_str_eq(accelp_st_reader_metadata(r, "producer"), "accel test");
	ck_assert_ptr_null(accelp_st_reader_metadata(r, "nope"));
	ck_assert_uint_eq(accelp_st_reader_metadata_count(r), 2);
	const char *v;
	ck_assert_str_eq(accelp_st_reader_metadata_key(r, 0, &v), "format");
	ck_assert_str_eq(v, "pt");
	ck_assert_int_eq(err.code, ACCEL_OK);

	/* lookups and ranges that fail */
	ck_assert_int_eq(accelp_st_reader_find(r, "missing", &t, &err), ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(err.msg, "no tensor named \"missing\""));
	ck_assert_ptr_nonnull(strstr(err.msg, "sample.safetensors"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_reader_find(r, "f32", &t, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_reader_read(r, t, 10, 3, f32, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "elements [10, 13) outside its 12"));
	accelp_st_reader_free(r);
}
END_TEST

START_TEST(empty_file_roundtrip)
{
	accel_err err = {0};
	const char *p = tmp_path("empty.safetensors");
	accel_st_writer *w = NULL;
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_OK);
	w = accelp_st_writer_free(w);
	ck_assert_ptr_null(w);
	ck_assert_uint_eq(file_size(p), 16);   /* "{}" padded to 8 */
	accel_st_reader *r = NULL;
	ck_assert_msg(accelp_st_reader_new(p, &r, &err) == ACCEL_OK, "%s", err.msg);
	ck_assert_uint_eq(accelp_st_reader_count(r), 0);
	ck_assert_uint_eq(accelp_st_reader_metadata_count(r), 0);
	r = accelp_st_reader_free(r);
	ck_assert_ptr_null(r);
	ck_assert_ptr_null(accelp_st_writer_free(NULL));
	ck_assert_ptr_null(accelp_st_reader_free(NULL));
}
END_TEST

/* Streaming: tensors described first, data supplied in chunks, interleaved;
 * then read back in ranges with a small buffer (bounded memory). */
START_TEST(streaming_and_ranges)
{
	accel_err err = {0};
	const char *p = tmp_path("stream.safetensors");
	enum { N = 1000003 };   /* odd size, several chunks */
	accel_st_writer *w = NULL;
	uint64_t sa[] = {N}, sb[] = {7, 11};
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "a", ACCEL_DTYPE_F32, 1, sa, NULL, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "b", ACCEL_DTYPE_I64, 2, sb, NULL, &err), ACCEL_OK);
	float chunk[4096];
	int64_t bvals[77];
	for (int i = 0; i < 77; i++)
		bvals[i] = 1000 + i;
	uint64_t done = 0;
	int bdone = 0;
	while (done < N) {
		uint64_t n = N - done < 4096 ? N - done : 4096;
		for (uint64_t i = 0; i < n; i++)
			chunk[i] = (float)(done + i);
		ck_assert_msg(accelp_st_writer_write(w, "a", chunk, n * 4, &err) == ACCEL_OK, "%s",
		              err.msg);
		done += n;
		if (bdone < 77) {   /* interleave the other tensor, 11 values at a time */
			ck_assert_int_eq(accelp_st_writer_write(w, "b", bvals + bdone, 11 * 8, &err),
			                 ACCEL_OK);
			bdone += 11;
		}
	}
	/* nothing can be added once data flows */
	ck_assert_int_eq(accelp_st_writer_add(w, "c", ACCEL_DTYPE_U8, 1, sa, NULL, &err),
	                 ACCEL_ERR_STATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "after data was written"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_set_metadata(w, "k", "v", &err), ACCEL_ERR_STATE);
	accelp_err_clear(&err);
	/* too many bytes */
	ck_assert_int_eq(accelp_st_writer_write(w, "b", bvals, 8, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "would exceed its 616"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_write(w, "zz", bvals, 8, &err), ACCEL_ERR_NOT_FOUND);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_ERR_STATE);
	accelp_st_writer_free(w);

	accel_st_reader *r = NULL;
	const accel_st_tensor *t;
	ck_assert_msg(accelp_st_reader_new(p, &r, &err) == ACCEL_OK, "%s", err.msg);
	ck_assert_int_eq(accelp_st_reader_find(r, "b", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->offset, 0);   /* 8-byte elements first */
	int64_t b[77];
	ck_assert_int_eq(accelp_st_reader_read(r, t, 0, 77, b, &err), ACCEL_OK);
	for (int i = 0; i < 77; i++)
		ck_assert_int_eq(b[i], 1000 + i);
	ck_assert_int_eq(accelp_st_reader_find(r, "a", &t, &err), ACCEL_OK);
	ck_assert_uint_eq(t->offset, 616);
	uint64_t pos = 0;
	while (pos < N) {
		uint64_t n = N - pos < 3000 ? N - pos : 3000;
		ck_assert_int_eq(accelp_st_reader_read(r, t, pos, n, chunk, &err), ACCEL_OK);
		for (uint64_t i = 0; i < n; i++)
			if (chunk[i] != (float)(pos + i))
				ck_abort_msg("a[%" PRIu64 "] = %g", pos + i, (double)chunk[i]);
		pos += n;
	}
	accelp_st_reader_free(r);
}
END_TEST

START_TEST(incomplete_stream)
{
	accel_err err = {0};
	const char *p = tmp_path("partial.safetensors");
	accel_st_writer *w = NULL;
	uint64_t s[] = {10};
	float x[10] = {0};
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, NULL, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_write(w, "x", x, 12, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_ERR_STATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor \"x\" is incomplete: 12 of 40 bytes written"));
	accelp_st_writer_free(w);
	ck_assert_int_eq(access(p, F_OK), -1);
	ck_assert_int_eq(count_files(), 0);
}
END_TEST

/* A writer freed without commit leaves the previous file as it was. */
START_TEST(atomic_replace)
{
	accel_err err = {0};
	const char *p = tmp_path("model.safetensors");
	ck_assert_int_eq(write_sample(p, &err), ACCEL_OK);
	uint64_t before = file_size(p);

	accel_st_writer *w = NULL;
	uint64_t s[] = {2};
	float x[2] = {1, 2};
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, NULL, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_write(w, "x", x, 4, &err), ACCEL_OK);
	ck_assert_int_eq(count_files(), 2);     /* target + temporary */
	accelp_st_writer_free(w);                 /* "crash" before commit */
	ck_assert_int_eq(count_files(), 1);
	ck_assert_uint_eq(file_size(p), before);
	accel_st_reader *r = NULL;
	ck_assert_int_eq(accelp_st_reader_new(p, &r, &err), ACCEL_OK);
	ck_assert_uint_eq(accelp_st_reader_count(r), 11);
	accelp_st_reader_free(r);

	/* and a committed one replaces it */
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, x, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_OK);
	accelp_st_writer_free(w);
	ck_assert_int_eq(accelp_st_reader_new(p, &r, &err), ACCEL_OK);
	ck_assert_uint_eq(accelp_st_reader_count(r), 1);
	accelp_st_reader_free(r);
	ck_assert_int_eq(count_files(), 1);
}
END_TEST

/* accelp_st_writer_late_metadata: a value known once the data is final
 * (computed during commit) replaces a placeholder of its length; the
 * file's checksums from the writer match the file on disk. */
static char *late_sum(void *arg)
{
	const float *x = arg;
	char *v = malloc(8);
	if (v)
		snprintf(v, 8, "%04d", (int)(x[0] + x[1] + x[2]));
	return v;
}

static char *late_long(void *arg)
{
	(void)arg;
	return strdup("0123456789012345678901234567890123456789");   /* past the padding */
}

START_TEST(late_metadata)
{
	accel_err err = {0};
	const char *p = tmp_path("late.safetensors");
	accel_st_writer *w = NULL;
	uint64_t s[] = {3};
	float x[3] = {1, 2, 3};
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, x, &err), ACCEL_OK);
	/* no placeholder: refused */
	ck_assert_int_eq(accelp_st_writer_late_metadata(w, "sum", late_sum, x, &err),
	                 ACCEL_ERR_STATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "late metadata 'sum' needs its placeholder"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_set_metadata(w, "sum", "0000", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_late_metadata(w, "sum", late_sum, x, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_OK);
	uint64_t size = 0, hash = 0, hh = 0;
	ck_assert_int_eq(accelp_st_writer_hashes(w, &size, &hash, &hh), ACCEL_OK);
	accelp_st_writer_free(w);
	accel_st_reader *r = NULL;
	ck_assert_int_eq(accelp_st_reader_new(p, &r, &err), ACCEL_OK);
	ck_assert_str_eq(accelp_st_reader_metadata(r, "sum"), "0006");
	accelp_st_reader_free(r);
	/* the sums the writer computed are the file's */
	FILE *f = fopen(p, "rb");
	ck_assert_ptr_nonnull(f);
	unsigned char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	ck_assert_uint_eq(n, size);
	ck_assert_uint_eq(XXH64(buf, n, 0), hash);
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | buf[i];
	ck_assert_uint_eq(XXH64(buf, (size_t)(8 + hl), 0), hh);

	/* a value of another length would move the data: the commit fails */
	ck_assert_int_eq(accelp_st_writer_new(p, &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, x, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_set_metadata(w, "sum", "0000", &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_late_metadata(w, "sum", late_long, NULL, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_ERR_STATE);
	ck_assert_ptr_nonnull(strstr(err.msg, "metadata 'sum' is not as long as its placeholder"));
	accelp_st_writer_free(w);
	ck_assert_int_eq(accelp_st_reader_new(p, &r, &err), ACCEL_OK);   /* the old file stays */
	ck_assert_str_eq(accelp_st_reader_metadata(r, "sum"), "0006");
	accelp_st_reader_free(r);
}
END_TEST

/* An overwritten file keeps its mode; a new one gets 0666 less the umask
 * (read without changing it: umask(2) would change it for every thread). */
START_TEST(file_modes)
{
	accel_err err = {0};
	const char *p = tmp_path("modes.safetensors");
	ck_assert_int_eq(write_sample(p, &err), ACCEL_OK);
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	mode_t um = umask(022);
	umask(um);
	ck_assert_int_eq(st.st_mode & 0777, 0666 & ~um);
	ck_assert_int_eq(chmod(p, 0600), 0);
	ck_assert_int_eq(write_sample(p, &err), ACCEL_OK);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	/* the umask is not left changed, and one of 077 is honoured */
	um = umask(077);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(write_sample(p, &err), ACCEL_OK);
	ck_assert_int_eq(umask(um), 077);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
}
END_TEST

/* A dimension that JSON's int64 cannot hold, in a tensor of zero
 * elements (so the size check alone passes it), is refused at add. */
START_TEST(huge_dimension_refused)
{
	accel_err err = {0};
	accel_st_writer *w = NULL;
	uint64_t s[] = {0, (uint64_t)1 << 63};
	ck_assert_int_eq(accelp_st_writer_new(tmp_path("huge.safetensors"), &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "empty", ACCEL_DTYPE_F32, 2, s, NULL, &err),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor \"empty\": shape[1] = 9223372036854775808 is "
	                                      "larger than 2^63-1"));
	accelp_st_writer_free(w);
}
END_TEST

START_TEST(writer_misuse)
{
	accel_err err = {0};
	accel_st_writer *w = NULL;
	uint64_t s[] = {2};
	float x[2] = {0};

	ck_assert_int_eq(accelp_st_writer_new("/nonexistent-dir/x.safetensors", &w, &err),
	                 ACCEL_ERR_IO);
	ck_assert_ptr_null(w);
	ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-dir/x.safetensors: cannot create"));
	accelp_err_clear(&err);

	ck_assert_int_eq(accelp_st_writer_new(tmp_path("m.safetensors"), &w, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "", ACCEL_DTYPE_F32, 1, s, x, &err),
	                 ACCEL_ERR_INVALID_ARG);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_add(w, "__metadata__", ACCEL_DTYPE_F32, 1, s, x, &err),
	                 ACCEL_ERR_INVALID_ARG);
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", 99, 1, s, x, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "unknown dtype 99"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 17, s, x, &err),
	                 ACCEL_ERR_INVALID_ARG);
	accelp_err_clear(&err);
	uint64_t huge[] = {UINT64_MAX / 2, 3};
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 2, huge, x, &err),
	                 ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "shape overflows"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, x, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_add(w, "x", ACCEL_DTYPE_F32, 1, s, x, &err), ACCEL_OK);
	ck_assert_int_eq(accelp_st_writer_write(w, "x", x, 4, &err), ACCEL_ERR_INVALID_ARG);
	ck_assert_ptr_nonnull(strstr(err.msg, "tensor \"x\" added twice"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_writer_commit(w, &err), ACCEL_ERR_STATE);
	accelp_st_writer_free(w);
	ck_assert_int_eq(count_files(), 0);
}
END_TEST

/* ---- corrupt files ------------------------------------------------------------ */

/* Write `header` (padded to 8 with spaces unless raw_len is given) and
 * `data_len` bytes of data. */
static void write_raw(const char *path, const char *header, int64_t forced_len, size_t data_len)
{
	size_t len = strlen(header), padded = (len + 7) & ~(size_t)7;
	uint64_t hl = forced_len >= 0 ? (uint64_t)forced_len : padded;
	unsigned char lb[8];
	for (int i = 0; i < 8; i++)
		lb[i] = (unsigned char)(hl >> (8 * i));
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	fwrite(lb, 1, 8, f);
	fwrite(header, 1, len, f);
	for (size_t i = len; i < padded; i++)
		fputc(' ', f);
	for (size_t i = 0; i < data_len; i++)
		fputc((int)(i & 0xff), f);
	fclose(f);
}

static void expect_bad(const char *header, int64_t forced_len, size_t data_len, int code,
                       const char *msg)
{
	const char *p = tmp_path("bad.safetensors");
	write_raw(p, header, forced_len, data_len);
	accel_err err = {0};
	accel_st_reader *r = NULL;
	int rc = accelp_st_reader_new(p, &r, &err);
	ck_assert_msg(rc == code, "header %s: got %s (%s), want %s", header, accel_status_str(rc),
	              err.msg, accel_status_str(code));
	ck_assert_ptr_null(r);
	ck_assert_msg(strstr(err.msg, msg) != NULL, "message \"%s\" lacks \"%s\"", err.msg, msg);
	ck_assert_msg(strstr(err.msg, "bad.safetensors") != NULL, "message \"%s\" lacks the file",
	              err.msg);
}

#define T1(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape \
                                  ",\"data_offsets\":[" #b "," #e "]}"

START_TEST(reject_truncated)
{
	const char *p = tmp_path("bad.safetensors");
	FILE *f = fopen(p, "wb");
	fwrite("\x10\x00\x00", 1, 3, f);
	fclose(f);
	accel_err err = {0};
	accel_st_reader *r = NULL;
	ck_assert_int_eq(accelp_st_reader_new(p, &r, &err), ACCEL_ERR_CHECKPOINT);
	ck_assert_ptr_nonnull(strstr(err.msg, "bad.safetensors: truncated: 3 bytes"));

	/* header cut short */
	expect_bad("{" T1("x", "F32", "[2]", 0, 8) "}", 4096, 0, ACCEL_ERR_CHECKPOINT,
	           "truncated: the header length says 4096 bytes but only 56 follow");
	/* data cut short */
	expect_bad("{" T1("x", "F32", "[4]", 0, 16) "}", -1, 10, ACCEL_ERR_CHECKPOINT,
	           "tensor \"x\": data_offsets [0, 16] out of range: the data buffer has 10 bytes "
	           "(file truncated?)");

	/* a real file with its last byte cut off */
	accel_err e2 = {0};
	const char *s = tmp_path("cut.safetensors");
	ck_assert_int_eq(write_sample(s, &e2), ACCEL_OK);
	ck_assert_int_eq(truncate(s, (off_t)file_size(s) - 1), 0);
	ck_assert_int_eq(accelp_st_reader_new(s, &r, &e2), ACCEL_ERR_CHECKPOINT);
	ck_assert_ptr_nonnull(strstr(e2.msg, "out of range"));
	unlink(s);

	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_reader_new(tmp_path("absent.safetensors"), &r, &err),
	                 ACCEL_ERR_NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(err.msg, "absent.safetensors: cannot open"));
	accelp_err_clear(&err);
	ck_assert_int_eq(accelp_st_reader_new(tmpdir, &r, &err), ACCEL_ERR_CHECKPOINT);
	ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
}
END_TEST

START_TEST(reject_header_length)
{
	expect_bad("{}", (int64_t)1 << 40, 0, ACCEL_ERR_CHECKPOINT,
	           "bad header length 1099511627776");
	expect_bad("{}", 0, 0, ACCEL_ERR_CHECKPOINT, "bad header length 0");
	/* a plausible length that cuts the JSON short */
	expect_bad("{" T1("x", "F32", "[2]", 0, 8) "}", 16, 0, ACCEL_ERR_CHECKPOINT,
	           "bad header JSON");
}
END_TEST

START_TEST(reject_bad_json)
{
	expect_bad("{\"x\": {\"dtype\": \"F32\",, }}", -1, 0, ACCEL_ERR_CHECKPOINT,
	           "bad header JSON at byte");
	expect_bad("[1, 2]", -1, 0, ACCEL_ERR_CHECKPOINT, "does not start with '{'");
	expect_bad("{" T1("x", "F32", "[1]", 0, 4) "," T1("x", "F32", "[1]", 4, 8) "}", -1, 8,
	           ACCEL_ERR_CHECKPOINT, "duplicate");
	expect_bad("{\"x\": 3}", -1, 0, ACCEL_ERR_CHECKPOINT, "tensor \"x\": header entry is not an object");
	expect_bad("{\"x\": {\"dtype\":\"F32\",\"shape\":[1]}}", -1, 4, ACCEL_ERR_CHECKPOINT,
	           "tensor \"x\": missing \"data_offsets\"");
	expect_bad("{\"x\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", -1,
	           4, ACCEL_ERR_CHECKPOINT, "unexpected key \"extra\"");
	expect_bad("{\"x\": {\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", -1, 4,
	           ACCEL_ERR_CHECKPOINT, "shape[0] is not a non-negative integer");
	expect_bad("{\"x\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", -1, 4,
	           ACCEL_ERR_CHECKPOINT, "data_offsets must be [begin, end]");
	expect_bad("{\"x\": {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", -1, 4,
	           ACCEL_ERR_CHECKPOINT, "end before they begin");
	expect_bad("{\"__metadata__\": {\"a\": 1}}", -1, 0, ACCEL_ERR_CHECKPOINT,
	           "\"__metadata__\".\"a\" is not a string");
	expect_bad("{\"__metadata__\": [1]}", -1, 0, ACCEL_ERR_CHECKPOINT,
	           "\"__metadata__\" must be an object of strings");
}
END_TEST

START_TEST(reject_overlap)
{
	expect_bad("{" T1("a", "F32", "[4]", 0, 16) "," T1("b", "F32", "[4]", 8, 24) "}", -1, 24,
	           ACCEL_ERR_CHECKPOINT, "tensors \"a\" [0, 16) and \"b\" [8, 24) overlap");
	/* two tensors on exactly the same bytes */
	expect_bad("{" T1("a", "U8", "[8]", 0, 8) "," T1("b", "U8", "[8]", 0, 8) "}", -1, 8,
	           ACCEL_ERR_CHECKPOINT, "overlap");
}
END_TEST

START_TEST(reject_out_of_range)
{
	expect_bad("{" T1("a", "F32", "[4]", 0, 16) "," T1("b", "F32", "[4]", 16, 32) "}", -1, 24,
	           ACCEL_ERR_CHECKPOINT,
	           "tensor \"b\": data_offsets [16, 32] out of range: the data buffer has 24 bytes");
	/* gap and trailing bytes: the buffer must be covered exactly */
	expect_bad("{" T1("a", "F32", "[2]", 0, 8) "," T1("b", "F32", "[2]", 16, 24) "}", -1, 24,
	           ACCEL_ERR_CHECKPOINT, "bytes [8, 16) of the data buffer belong to no tensor");
	expect_bad("{" T1("a", "F32", "[2]", 0, 8) "}", -1, 12, ACCEL_ERR_CHECKPOINT,
	           "the data buffer has 12 bytes but the tensors cover 8");
	expect_bad("{" T1("a", "F32", "[2]", 4, 12) "}", -1, 12, ACCEL_ERR_CHECKPOINT,
	           "bytes [0, 4) of the data buffer belong to no tensor");
}
END_TEST

START_TEST(reject_wrong_size)
{
	expect_bad("{" T1("w", "F32", "[2, 3]", 0, 20) "}", -1, 20, ACCEL_ERR_CHECKPOINT,
	           "tensor \"w\": wrong size: shape [2, 3] of F32 is 24 bytes but data_offsets "
	           "[0, 20] span 20");
	expect_bad("{" T1("w", "BF16", "[3]", 0, 3) "}", -1, 8, ACCEL_ERR_CHECKPOINT,
	           "wrong size");
	expect_bad("{" T1("w", "F32", "[4294967296, 4294967296]", 0, 4) "}", -1, 4,
	           ACCEL_ERR_CHECKPOINT, "shape overflows");
}
END_TEST

/* A FIFO is refused at once, not waited on for a writer. */
START_TEST(reject_fifo)
{
	accel_err err = {0};
	const char *p = tmp_path("fifo.safetensors");
	ck_assert_int_eq(mkfifo(p, 0600), 0);
	accel_st_reader *r = NULL;
	alarm(10);   /* the old code blocked in open() */
	ck_assert_int_eq(accelp_st_reader_new(p, &r, &err), ACCEL_ERR_CHECKPOINT);
	alarm(0);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(strstr(err.msg, "fifo.safetensors: not a regular file"));
}
END_TEST

START_TEST(reject_unknown_dtype)
{
	expect_bad("{" T1("w", "F17", "[2]", 0, 8) "}", -1, 8, ACCEL_ERR_CHECKPOINT,
	           "tensor \"w\": unknown dtype \"F17\"");
	/* in the format but not in accel */
	expect_bad("{" T1("w", "I16", "[2]", 0, 4) "}", -1, 8, ACCEL_ERR_CHECKPOINT,
	           "unknown dtype \"I16\"");
	expect_bad("{\"w\": {\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 8,
	           ACCEL_ERR_CHECKPOINT, "dtype is not a string");
}
END_TEST

START_TEST(dtype_names)
{
	ck_assert_str_eq(accelp_st_dtype_name(ACCEL_DTYPE_BF16), "BF16");
	ck_assert_str_eq(accelp_st_dtype_name(ACCEL_DTYPE_F8E4M3), "F8_E4M3");
	ck_assert_ptr_null(accelp_st_dtype_name(ACCEL_DTYPE_INVALID));
	ck_assert_ptr_null(accelp_st_dtype_name(1234));
	for (uint32_t d = 1; d < ACCEL_DTYPE_COUNT; d++)
		ck_assert_uint_eq(accelp_st_dtype_parse(accelp_st_dtype_name(d)), d);
	ck_assert_uint_eq(accelp_st_dtype_parse("f32"), ACCEL_DTYPE_INVALID);
	ck_assert_uint_eq(accelp_st_dtype_parse(NULL), ACCEL_DTYPE_INVALID);
}
END_TEST

static void setup(void)
{
	make_tmpdir();
}

static void teardown(void)
{
	remove_tmpdir();
}

static Suite *safetensors_suite(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc = tcase_create("roundtrip");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, roundtrip_sample);
	tcase_add_test(tc, empty_file_roundtrip);
	tcase_add_test(tc, streaming_and_ranges);
	tcase_add_test(tc, incomplete_stream);
	tcase_add_test(tc, atomic_replace);
	tcase_add_test(tc, late_metadata);
	tcase_add_test(tc, writer_misuse);
	tcase_add_test(tc, file_modes);
	tcase_add_test(tc, huge_dimension_refused);
	tcase_add_test(tc, dtype_names);
	suite_add_tcase(s, tc);
	tc = tcase_create("corrupt");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, reject_truncated);
	tcase_add_test(tc, reject_header_length);
	tcase_add_test(tc, reject_bad_json);
	tcase_add_test(tc, reject_overlap);
	tcase_add_test(tc, reject_out_of_range);
	tcase_add_test(tc, reject_wrong_size);
	tcase_add_test(tc, reject_unknown_dtype);
	tcase_add_test(tc, reject_fifo);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	if (argc == 3 && (!strcmp(argv[1], "--write-sample") || !strcmp(argv[1], "--dump"))) {
		accel_err err = {0};
		int rc = !strcmp(argv[1], "--dump") ? dump(argv[2], &err) : write_sample(argv[2], &err);
		if (rc) {
			fprintf(stderr, "test-safetensors: %s\n", err.msg);
			return EXIT_FAILURE;
		}
		return EXIT_SUCCESS;
	}
	SRunner *sr = srunner_create(safetensors_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
