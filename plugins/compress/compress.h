/* SPDX-License-Identifier: MIT */
/* plugins/compress/compress.h: the compress plugin's state (private). */
#ifndef ACCEL_COMPRESS_INTERNAL_H
#define ACCEL_COMPRESS_INTERNAL_H

#include <stdint.h>

#include "accel/plugin.h"
#include "accel-compress.h"

#define CZ_FP16     ACCEL_COMPRESS_FP16
#define CZ_BF16     ACCEL_COMPRESS_BF16
#define CZ_TOPK     ACCEL_COMPRESS_TOPK
#define CZ_POWERSGD ACCEL_COMPRESS_POWERSGD

#define CZ_KIND_ALLREDUCE 0
#define CZ_KIND_SCATTER   1

/* A run of a bucket and how it crosses ranks. */
typedef struct cz_seg {
	uint64_t off, numel;       /* in the bucket (elements)                  */
	uint32_t param;            /* parameter of the run (UINT32_MAX: none)   */
	uint64_t poff;             /* first element of the parameter in the run */
	uint32_t dense;            /* 1: sent uncompressed                      */
	uint64_t k;                /* top-k: elements sent                      */
	uint32_t rows, cols, rank; /* powersgd: matrix and approximation rank   */
	uint64_t p_off, q_off;     /* powersgd: offsets in the P and Q buffers  */
} cz_seg;

typedef struct cz_state cz_state;

/* What the plugin keeps per bucket (by bucket_id and kind). */
typedef struct cz_bucket {
	cz_state *s;
	uint32_t id, kind;
	uint64_t numel;
	uint32_t dtype;
	uint64_t hash;             /* layout: numel and entries                 */
	cz_seg *segs;
	uint32_t n_segs;
	uint64_t n_dense;          /* elements sent uncompressed                */
	uint64_t k_total;          /* top-k: pairs sent per rank                */
	uint64_t p_numel, q_numel; /* powersgd                                  */
	/* error feedback, double-buffered: res[cur] is committed, res[!cur]
	 * the one this step's reduction wrote (pending until post_step) */
	float *res[2];
	float *q[2];               /* powersgd Q, the same on every rank        */
	int cur, pending, have_q;
	/* scratch, allocated on first use and kept */
	float *work;               /* the bucket in f32 (host)                  */
	float *orig;               /* powersgd: work before compression         */
	void *stage;               /* host copy of a device bucket              */
	float *dense_buf;          /* uncompressed runs packed                  */
	void *send, *recv;         /* payloads                                  */
	uint64_t send_bytes, recv_bytes;
	void *half, *half_shard;   /* fp16/bf16 buffers (on the bucket's device) */
	uint64_t half_numel, half_shard_numel;
	/* the reduction in flight */
	accel_bucket_v1 b;
	accel_view shard;
	accel_req *dense_req;
	int group_size;
	double factor;             /* 1/group size, or 1 when pre-divided       */
	int compressed;
} cz_bucket;

/* A residual or Q read from a checkpoint, adopted by the bucket of the
 * same id and layout when it first comes. */
typedef struct cz_saved {
	uint32_t id;
	uint64_t hash, numel, q_numel;
	float *res, *q;
} cz_saved;

struct cz_state {
	const accel_host_v1 *host;
	accel_host *h;
	accel_world_v1 world;
	/* config */
	uint32_t method;
	double ratio;
	int tensor_granularity;
	int error_feedback;
	int64_t start_iter;
	int64_t min_numel;
	int64_t rank;              /* matrix_approximation_rank */
	double min_compression_rate;
	int warm_start;
	double ortho_eps;
	uint64_t seed;
	/* steps counted in post_step */
	uint64_t step;
	cz_bucket **buckets;
	uint32_t n_buckets, cap_buckets;
	cz_saved *saved;
	uint32_t n_saved;
	int saved_world_ok;        /* residual blobs were read                  */
	uint32_t resume_zeroed;    /* buckets that started from zero after a resume */
	uint32_t resume_fresh_q;   /* buckets whose saved Q had another size     */
	int resume_q_said;
	int resume_said;
	/* statistics */
	uint64_t cur_sent, cur_dense, cur_comp, cur_plain;
	accel_compress_stats_v1 stats;
	accel_compress_ext_v1 ext;
};

/* compress.c */
int cz_error_nomem(cz_state *s, const char *what);
/* compress_bucket.c: the bucket's state, made on first sight */
int cz_bucket_get(cz_state *s, const accel_bucket_v1 *b, uint32_t kind, cz_bucket **ret);
void cz_bucket_free(cz_state *s, cz_bucket *cb);
int cz_group(cz_state *s, accel_group *g, int32_t *ret_size);
int cz_allreduce(cz_state *s, accel_group *g, const accel_view *v, uint32_t op, accel_req **ret);
int cz_allgather(cz_state *s, accel_group *g, const accel_view *send, const accel_view *recv,
                 accel_req **ret);
int cz_buf(cz_state *s, void **p, uint64_t *have, uint64_t bytes);
int cz_load(cz_bucket *cb, float *dst);
int cz_store(cz_bucket *cb, const float *src);
int cz_plain(cz_state *s, cz_bucket *cb, const accel_bucket_v1 *b, accel_req **ret_req);
float *cz_res_in(cz_bucket *cb);
float *cz_res_out(cz_bucket *cb);
/* compress_cast.c */
int cz_cast_allreduce(cz_state *s, cz_bucket *cb, accel_req **ret_req);
int cz_cast_scatter(cz_state *s, cz_bucket *cb, accel_req **ret_req);
/* compress_topk.c */
int cz_topk_plan(cz_state *s, cz_bucket *cb);
int cz_topk_reduce(cz_state *s, cz_bucket *cb, accel_req **ret_req);
/* compress_powersgd.c */
int cz_psgd_plan(cz_state *s, cz_bucket *cb);
int cz_psgd_reduce(cz_state *s, cz_bucket *cb, accel_req **ret_req);
/* compress_ckpt.c */
int cz_save(cz_state *s, accel_ckpt_writer *w);
int cz_load_state(cz_state *s, accel_ckpt_reader *r);
int cz_adopt(cz_state *s, cz_bucket *cb);
void cz_saved_free(cz_state *s);

#endif
