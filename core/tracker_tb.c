/* SPDX-License-Identifier: MIT */
/* core/tracker_tb.c: TensorBoard event files, written directly.
 *
 * The format is TensorFlow's TFRecord framing around serialized
 * tensorflow.Event protobufs (tensorflow/core/util/event.proto,
 * tensorflow/core/framework/summary.proto).  accel writes the few fields a
 * scalar needs, encoded by hand:
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * Each record: uint64 length (little-endian), uint32 masked CRC-32C of
 * those 8 bytes, the data, uint32 masked CRC-32C of the data.  TensorBoard
 * reads simple_value scalars into its Scalars dashboard. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tracker.h"

struct accel_tracker_tb {
	FILE *f;
	char *path;
	/* one Event being encoded */
	unsigned char *buf;
	size_t len, cap;
	/* the Summary, encoded apart because its length goes first */
	unsigned char *sum;
	size_t slen, scap;
};

static int put(unsigned char **b, size_t *len, size_t *cap, const void *p, size_t n)
{
	if (*len + n > *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		while (nc < *len + n)
			nc *= 2;
		unsigned char *nb = realloc(*b, nc);
		if (!nb)
			return -1;
		*b = nb;
		*cap = nc;
	}
	memcpy(*b + *len, p, n);
	*len += n;
	return 0;
}

static int put_varint(unsigned char **b, size_t *len, size_t *cap, uint64_t v)
{
	unsigned char tmp[10];
	size_t n = 0;
	do {
		tmp[n] = (unsigned char)(v & 0x7F);
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	return put(b, len, cap, tmp, n);
}

static void le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Event header fields: wall_time (1, fixed64), step (2, varint). */
static int event_start(accel_tracker_tb *tb, double wall_time, int64_t step)
{
	unsigned char d[9];
	uint64_t bits;
	tb->len = 0;
	memcpy(&bits, &wall_time, 8);
	d[0] = 0x09;
	le64(d + 1, bits);
	if (put(&tb->buf, &tb->len, &tb->cap, d, 9))
		return -1;
	if (step != 0) {   /* proto3: the default is not written */
		unsigned char t = 0x10;
		if (put(&tb->buf, &tb->len, &tb->cap, &t, 1) ||
		    put_varint(&tb->buf, &tb->len, &tb->cap, (uint64_t)step))
			return -1;
	}
	return 0;
}

static int write_record(accel_tracker_tb *tb, accel_err *err)
{
	unsigned char head[12], tail[4];
	le64(head, (uint64_t)tb->len);
	le32(head + 8, accelp_crc32c_masked(head, 8));
	le32(tail, accelp_crc32c_masked(tb->buf, tb->len));
	if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(tb->buf, 1, tb->len, tb->f) != tb->len ||
	    fwrite(tail, 1, 4, tb->f) != 4 || fflush(tb->f))
		return accelp_err_set(err, ACCEL_ERR_IO, "tensorboard event file '%s': write failed: "
		                      "%s", tb->path, strerror(errno));
	return ACCEL_OK;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int accelp_tracker_tb_new(const char *dir, accel_err *err, accel_tracker_tb **ret_tb)
{
	accel_tracker_tb *tb = NULL;
	char host[256] = "localhost";
	int r;
	if (accelp_tracker_mkdirs(dir))
		return accelp_err_set(err, ACCEL_ERR_IO, "logging_dir '%s': cannot create it: %s "
		                      "(set logging_dir to a writable directory)", dir, strerror(errno));
	tb = calloc(1, sizeof(*tb));
	if (!tb)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	(void)gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	double now = wall_now();
	/* TensorBoard sorts a directory's files by name: the seconds keep a
	 * resumed run's new file after the old one. */
	size_t n = strlen(dir) + strlen(host) + 80;
	tb->path = malloc(n);
	if (!tb->path) {
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	snprintf(tb->path, n, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)now, host,
	         (long)getpid());
	tb->f = fopen(tb->path, "wbx");
	if (!tb->f) {
		r = accelp_err_set(err, ACCEL_ERR_IO, "tensorboard event file '%s': cannot create it: "
		                   "%s", tb->path, strerror(errno));
		goto fail;
	}
	static const char version[] = "brain.Event:2";
	unsigned char t = 0x1A;
	if (event_start(tb, now, 0) || put(&tb->buf, &tb->len, &tb->cap, &t, 1) ||
	    put_varint(&tb->buf, &tb->len, &tb->cap, sizeof(version) - 1) ||
	    put(&tb->buf, &tb->len, &tb->cap, version, sizeof(version) - 1)) {
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((r = write_record(tb, err)))
		goto fail;
	*ret_tb = tb;
	return ACCEL_OK;

fail:
	accelp_tracker_tb_free(tb);
	return r;
}

static int add_value(const char *key, json_t *v, void *arg)
{
	accel_tracker_tb *tb = arg;
	double d;
	unsigned char hdr = 0x0A, fhdr = 0x15, f4[4];
	float f;
	uint32_t bits;
	size_t klen = strlen(key);
	if (json_is_number(v))
		d = json_number_value(v);
	else if (json_is_boolean(v))
		d = json_is_true(v);
	else if (json_is_string(v) && !strcmp(json_string_value(v), "NaN"))
		d = NAN;       /* the JSON-lines spelling of non-finite values */
	else if (json_is_string(v) && !strcmp(json_string_value(v), "Infinity"))
		d = INFINITY;
	else if (json_is_string(v) && !strcmp(json_string_value(v), "-Infinity"))
		d = -INFINITY;
	else
		return 0;     /* text, arrays, null: not a scalar */
	f = (float)d;
	memcpy(&bits, &f, 4);
	le32(f4, bits);
	/* Value: tag (1, length-delimited), simple_value (2, fixed32) */
	size_t vlen = 1 + (klen < 128 ? 1 : klen < 16384 ? 2 : 3) + klen + 5;
	if (put(&tb->sum, &tb->slen, &tb->scap, &hdr, 1) ||
	    put_varint(&tb->sum, &tb->slen, &tb->scap, vlen) ||
	    put(&tb->sum, &tb->slen, &tb->scap, &hdr, 1) ||
	    put_varint(&tb->sum, &tb->slen, &tb->scap, klen) ||
	    put(&tb->sum, &tb->slen, &tb->scap, key, klen) ||
	    put(&tb->sum, &tb->slen, &tb->scap, &fhdr, 1) ||
	    put(&tb->sum, &tb->slen, &tb->scap, f4, 4))
		return -1;
	return 0;
}

int accelp_tracker_tb_write(accel_tracker_tb *tb, json_t *rec, accel_err *err)
{
	json_t *jstep = json_object_get(rec, "step"), *jtime = json_object_get(rec, "time");
	json_t *copy = json_copy(rec);
	unsigned char t = 0x2A;
	int r = ACCEL_OK;
	if (!copy)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	json_object_del(copy, "step");
	json_object_del(copy, "time");
	tb->slen = 0;
	if (event_start(tb, jtime ? json_number_value(jtime) : wall_now(),
	                jstep ? (int64_t)json_integer_value(jstep) : 0) ||
	    accelp_tracker_flatten(copy, add_value, tb) ||
	    put(&tb->buf, &tb->len, &tb->cap, &t, 1) ||
	    put_varint(&tb->buf, &tb->len, &tb->cap, tb->slen) ||
	    (tb->slen && put(&tb->buf, &tb->len, &tb->cap, tb->sum, tb->slen)))
		r = accelp_err_set(err, ACCEL_ERR_NOMEM, "out of memory");
	json_decref(copy);
	if (r == ACCEL_OK && tb->slen)   /* nothing scalar: no event */
		r = write_record(tb, err);
	return r;
}

const char *accelp_tracker_tb_path(const accel_tracker_tb *tb)
{
	return tb ? tb->path : NULL;
}

accel_tracker_tb *accelp_tracker_tb_free(accel_tracker_tb *tb)
{
	if (!tb)
		return NULL;
	if (tb->f)
		fclose(tb->f);
	free(tb->path);
	free(tb->buf);
	free(tb->sum);
	free(tb);
	return NULL;
}
