/* SPDX-License-Identifier: MIT */
/* core/ctx-impl.h: the definition of accel_ctx and of the per-module host
 * handles (private).  Modules keep their own state behind their own opaque
 * types; the context only holds them. */
#ifndef ACCEL_CORE_CTX_IMPL_H
#define ACCEL_CORE_CTX_IMPL_H

#include <stdint.h>

#include "accel/accel.h"
#include "accel/comm.h"
#include "accel/plugin.h"
#include "error.h"

typedef struct accel_config accel_config;
typedef struct accel_loader accel_loader;
typedef struct accel_module accel_module;
typedef struct accel_store accel_store;
typedef struct accel_comm accel_comm;
typedef struct accel_train accel_train;
typedef struct accel_mem accel_mem;
typedef struct accel_kv accel_kv;
typedef struct accel_optim_pool accel_optim_pool;

/* What a plugin or backend instance gets as its `accel_host *`. */
struct accel_host {
	accel_ctx *ctx;
	const accel_module *module;   /* NULL for the core itself */
	const char *name;             /* plugin/backend name, for message prefixes */
	const char *section;          /* its config_section, or NULL */
	void *ckpt;                   /* current checkpoint stream, while saving/loading */
};

/* One active plugin. */
typedef struct accel_active {
	const accel_module *module;
	const accel_plugin_v1 *vt;
	struct accel_host host;
	void *state;                  /* from init(); NULL until then */
	int inited;
	/* this instance's capabilities: desc->caps until init(), then what
	 * instance_caps() (ABI minor 6) reported, or desc->caps without that
	 * slot.  Every core check of a plugin's caps reads this. */
	uint32_t caps;
} accel_active;

struct accel_ctx {
	accel_err err;
	accel_config *cfg;
	accel_loader *loader;
	accel_world_v1 world;
	char job_id[64];
	accel_store *store;           /* NULL when world_size == 1 and no master */
	accel_comm *comm;             /* collectives (CPU backend, device backend) */
	accel_active *active;         /* active[0] is the strategy */
	uint32_t n_active;
	accel_train *train;           /* model registry, optimizer, step state */
	accel_mem *mem;               /* accounted allocations (core/mem.c) */
	accel_kv *local_store;        /* store for world 1 without a rendezvous */
	char master_addr[256];
	int master_port;
	const char *launcher;         /* who started us: "accel launch", "mpirun", ... */
	uint64_t mem_bytes[ACCEL_MEM_CATEGORY_COUNT][2];  /* [category][cpu, cuda] */
	uint64_t mem_peak[ACCEL_MEM_CATEGORY_COUNT][2];
	/* samplers made with this context, saved and restored by
	 * accel_save_state/accel_load_state in this order (core/ckpt.c) */
	accel_sampler **samplers;
	uint32_t n_samplers;
	int warned_gas_epoch;         /* gradient_accumulation_steps > an epoch: said */
	/* the program's generators saved and restored with checkpoints
	 * (accel_rng_register; borrowed, core/ckpt.c) */
	accel_rng **rngs;
	uint32_t n_rngs;
	/* automatic checkpoint naming: the next checkpoint_<n> (core/ckpt.c;
	 * from the config key `iteration` until the first save or load) */
	int64_t ckpt_iteration;
	int ckpt_iteration_set;
	/* the project directory (core/ckpt_project.c): its lock's fd + 1 (0:
	 * none, rank 0 only) and real path; the directory and n of the
	 * checkpoint_<n> last loaded, until the next save moves the abandoned
	 * timeline aside */
	int ckpt_lock_fd;
	char *ckpt_project;
	char *ckpt_resumed_root;
	int64_t ckpt_resumed_n;
	/* accel launch --max-restarts: ACCEL_RESUME and rank 0's state file
	 * (core/restart.c); NULL when the launcher set none of it */
	struct accelp_restart *restart;
	/* the compute stream (accel_set_stream; NULL: the legacy default
	 * stream) and its device (-1 for NULL); core/stream.c */
	void *stream;
	int32_t stream_device;
	/* host->optim_step_n's threads (core/optim_pool.c): created on first
	 * use, joined by accel_ctx_free */
	accel_optim_pool *optim_pool;
};

/* The host table the core hands to every plugin and backend (core/host.c). */
const accel_host_v1 *accelp_host_table(void);

#endif
