/* SPDX-License-Identifier: MIT */
/* plugins/zero/zero_store.h: the optimizer side of one rank's shard (private
 * to the zero plugin): f32 master weights and optimizer state for the
 * elements this rank updates, where they live (with the parameters, in host
 * memory, or in NVMe swap files) and the optimizer step over them.
 *
 * The partitioning code (zero_partition.c, zero_stage3.c) decides which
 * elements a rank owns and where their working weights and reduced
 * gradients lie; it describes them to the store as `pieces`, each a run of
 * one parameter's elements.  The store's element space is the pieces
 * concatenated in the order given: piece k covers elements
 * [at_k, at_k + numel_k) of it, at_0 = 0.
 *
 * Placement (zero_optimization.offload_optimizer.device):
 *  ZERO_PLACE_DEVICE  masters and state on the parameters' device (no
 *                     offload); an f32 parameter's piece may use its
 *                     working weights as its master (master_is_work), so
 *                     f32 training keeps no second copy;
 *  ZERO_PLACE_CPU     masters and state in host memory (ACCEL_MEM_OFFLOAD;
 *                     pinned when the parameters are on a GPU); the step
 *                     runs on the rank's CPU threads (host->optim_step_n),
 *                     sub_group_size elements at a time, the gradients'
 *                     device-to-host copies of the next sub-group and the
 *                     updated weights' host-to-device copies of the last
 *                     overlapping the current step;
 *  ZERO_PLACE_NVME    masters and state in a swap file under nvme_path
 *                     (zero_nvme.h), swapped in, stepped on the CPU threads
 *                     and swapped out one sub-group at a time, the next
 *                     sub-group's read and the previous one's write
 *                     overlapping the current step.
 * Every placement gives bit-identical results: the optimizer's arithmetic
 * per element does not depend on where it runs or how it is split.
 *
 * Every function that can fail reports through host->error and returns
 * its status. */
#ifndef ACCEL_ZERO_STORE_H
#define ACCEL_ZERO_STORE_H

#include <stdint.h>

#include "accel/plugin.h"
#include "zero_nvme.h"

#define ZERO_PLACE_DEVICE 0
#define ZERO_PLACE_CPU    1
#define ZERO_PLACE_NVME   2

#define ZERO_MAX_STATE 4

typedef struct zero_piece {
	uint32_t param;          /* parameter index (accel_model_v1)              */
	uint32_t grad_dtype;     /* dtype of `grad` (f32, f16, bf16)               */
	uint64_t param_offset;   /* first element inside the parameter             */
	uint64_t numel;          /* elements in the run                            */
	void *work;              /* the run's working weights (the parameter's
	                            dtype and device): the step writes the updated
	                            values here                                    */
	const void *grad;        /* the run's reduced (mean) gradient, on the
	                            parameter's device, read by the step           */
	int32_t master_is_work;  /* ZERO_PLACE_DEVICE and an f32 parameter: `work`
	                            is the master (updated in place)               */
	int32_t reserved;
} zero_piece;

typedef struct zero_store_opts {
	uint32_t place;          /* ZERO_PLACE_*                                    */
	uint32_t n_state;        /* optimizer state arrays per element
	                            (host->optim_state_count)                      */
	int32_t device, device_index; /* where working weights and gradients live */
	uint64_t sub_group_size; /* elements stepped at a time when offloaded    */
	int32_t pin_memory;      /* offload_optimizer.pin_memory                  */
	uint32_t n_threads;      /* optim_step_n threads; 0: the rank's           */
	uint32_t buffer_count;   /* NVMe: sub-group buffers in flight (>= 2)       */
	uint32_t reserved;
	const char *nvme_path;   /* NVMe: directory of the swap file               */
	const char *nvme_key;    /* NVMe: the config key naming it, for messages   */
	zero_aio_opts aio;       /* NVMe: zero_optimization.aio.*                  */
} zero_store_opts;

typedef struct zero_store zero_store;

/* Make the store for `n` pieces (copied; their pointers must stay valid
 * until zero_store_free, or until zero_store_set_pieces replaces them).
 * Allocates masters and state (state zeroed); masters are set with
 * zero_store_write. */
int zero_store_new(const accel_host_v1 *H, accel_host *h, const zero_store_opts *o,
                   const zero_piece *pieces, uint32_t n, zero_store **ret_store);

/* Elements in the store's space (the pieces' numel summed). */
uint64_t zero_store_numel(const zero_store *st);

/* array 0: the masters (f32); array k + 1: optimizer state k (f32).
 * Copy elements [at, at + dst->numel) of the array into dst / from src
 * (any device, converting dtype as op_copy does).  Writing array 0 of a
 * master_is_work piece writes its working weights. */
int zero_store_read(zero_store *st, uint32_t array, uint64_t at, const accel_view *dst);
int zero_store_write(zero_store *st, uint32_t array, uint64_t at, const accel_view *src);
/* The masters of parameter `param` from its whole values in f32 host
 * memory: zero_store_write of each piece from pieces[*next] on that
 * belongs to it (the store's pieces, n of them, at piece_at[] in its
 * space), *next moved past them.  For the initial values, parameter by
 * parameter in the pieces' order. */
int zero_store_write_param(zero_store *st, const zero_piece *pieces, const uint64_t *piece_at,
                           uint32_t n, uint32_t *next, uint32_t param, float *values);
/* zero_store_read (to_view nonzero) or zero_store_write on a store passed
 * as void * (the copy callback of shard_ckpt_io). */
int zero_store_copy(void *st, uint32_t array, uint64_t at, const accel_view *v, int to_view);

/* Working weights from the masters (after zero_store_write of masters, or
 * a checkpoint load): every piece's `work` = its master, cast. */
int zero_store_refresh_work(zero_store *st);

/* One optimizer step over every piece: reads `grad`, updates masters and
 * state, writes `work`.  grad_scale / grad_scale_dev as in
 * accel_optim_args_v1 (grad_scale_dev is device memory; only with
 * ZERO_PLACE_DEVICE on a device, else ACCEL_ERR_INVALID_ARG). */
int zero_store_step(zero_store *st, double grad_scale, const double *grad_scale_dev);

/* Replace the pieces' `work` and `grad` pointers (same count, params,
 * offsets and numel as before): for a layout whose buffers move. */
int zero_store_set_pieces(zero_store *st, const zero_piece *pieces, uint32_t n);

/* What the last steps took, for the log and the benchmarks. */
typedef struct zero_store_stats {
	uint64_t steps;
	uint64_t bytes_swapped_in, bytes_swapped_out;   /* NVMe */
	double step_seconds;      /* wall time in zero_store_step               */
	double io_wait_seconds;   /* of that, waiting for swap I/O              */
} zero_store_stats;
void zero_store_get_stats(const zero_store *st, zero_store_stats *ret);

/* Frees everything (NULL is a no-op; returns NULL). */
zero_store *zero_store_free(zero_store *st);

#endif
