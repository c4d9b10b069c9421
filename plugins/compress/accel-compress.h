/* SPDX-License-Identifier: MIT */
/*
 * accel-compress.h: the extension table of the compress plugin
 * (docs/compress.md), reached from a training program with
 *
 *     const accel_compress_ext_v1 *x =
 *         accel_plugin_extension(ctx, "compress", ACCEL_COMPRESS_STATS, 1);
 *
 * NULL when the plugin is not active.  The table is borrowed until the
 * context is freed; call its members from the training thread, between
 * accel_step() calls.  Plain C99; installed next to accel/accel.h.
 */
#ifndef ACCEL_COMPRESS_H
#define ACCEL_COMPRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACCEL_COMPRESS_STATS "compress.stats"

/* accel_compress_stats_v1.method */
#define ACCEL_COMPRESS_FP16     1
#define ACCEL_COMPRESS_BF16     2
#define ACCEL_COMPRESS_TOPK     3
#define ACCEL_COMPRESS_POWERSGD 4

/* Figures of the last step (the last accel_step() whose post_step ran,
 * skipped or not) and since the context was made.  "Sent" is what the
 * plugin handed to collectives (the bytes accel_comm_stats() counts for
 * them); "dense" is what the uncompressed reduction of the same buckets
 * would have handed over (numel x dtype size of each bucket). */
typedef struct accel_compress_stats_v1 {
	uint32_t struct_size;      /* set by the caller; members beyond it are not written */
	uint32_t method;           /* ACCEL_COMPRESS_*                                     */
	uint64_t steps;            /* optimizer steps the plugin counted (post_step)        */
	uint64_t last_sent_bytes;
	uint64_t last_dense_bytes;
	double last_ratio;         /* last_dense_bytes / last_sent_bytes (1 when nothing
	                              was compressed, 0 when nothing was reduced)         */
	uint64_t total_sent_bytes;
	uint64_t total_dense_bytes;
	uint64_t last_compressed;  /* buckets reduced compressed in the last step         */
	uint64_t last_plain;       /* buckets reduced uncompressed (warm-up, min_numel)   */
	uint32_t compressing;      /* 1: the next step compresses (warm-up is over)       */
	uint32_t reserved;
} accel_compress_stats_v1;

typedef struct accel_compress_ext_v1 {
	uint32_t struct_size;      /* sizeof(accel_compress_ext_v1) of the plugin         */
	uint32_t reserved;
	void *self;                /* first argument of the members below                 */
	/* The figures above.  ACCEL_ERR_INVALID_ARG for a NULL ret. */
	int (*stats)(void *self, accel_compress_stats_v1 *ret);
	/* The error-feedback residual this rank holds for parameter `param`
	 * (f32, `numel` = the parameter's element count) as the next step will
	 * add it: zeros where none is held (no error feedback, fp16/bf16, not
	 * yet reduced, or a resume that started from zero residuals).
	 * ACCEL_ERR_INVALID_ARG for a bad index or count. */
	int (*residual)(void *self, uint32_t param, float *buf, uint64_t numel);
} accel_compress_ext_v1;

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_COMPRESS_H */
