/* SPDX-License-Identifier: MIT */
/* core/world.h: where this process sits in the job (private).
 *
 * A process learns its rank and the world size from the environment its
 * launcher gave it.  Sources, tried in this order (the first whose rank
 * variable is set wins, so `accel launch` inside a Slurm allocation or
 * mpirun inside srun are read from the innermost launcher):
 *
 *   "accel launch"          ACCEL_RANK, ACCEL_WORLD_SIZE (required together),
 *                           ACCEL_LOCAL_RANK, ACCEL_LOCAL_WORLD_SIZE,
 *                           ACCEL_NODE_RANK, ACCEL_NUM_NODES, ACCEL_JOB_ID
 *   "mpirun (OpenMPI)"      OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
 *                           job id from PMIX_NAMESPACE
 *   "mpiexec (MPICH/Hydra)" PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS;
 *                           job id from PMIX_NAMESPACE or PMI_PORT
 *   "torchrun"              RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 *                           GROUP_RANK, TORCHELASTIC_RUN_ID
 *   "srun"                  SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID,
 *                           SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_NODES,
 *                           SLURM_NODEID, SLURM_JOB_ID, SLURM_STEP_ID,
 *                           SLURM_STEP_NODELIST.  Only inside a job step (srun):
 *                           a batch script run directly (no SLURM_STEP_NUM_TASKS)
 *                           is a world of 1.
 *   "none"                  nothing set: a world of 1.
 *
 * The master address is ACCEL_MASTER_ADDR, else MASTER_ADDR, else (srun) the
 * first host of SLURM_STEP_NODELIST, else "127.0.0.1" when the whole job is
 * on one node, else "" (unknown).  The master port is ACCEL_MASTER_PORT,
 * else MASTER_PORT, else (srun) 20000 + (31 * SLURM_JOB_ID + SLURM_STEP_ID)
 * mod 20000, else 0 (unknown: the caller must bootstrap another way).
 *
 * Under MPI launchers the node of a rank is not in the environment: with the
 * default block mapping (local_rank == rank % local_world_size, every node
 * the same size) node_rank = rank / local_world_size and num_nodes =
 * world_size / local_world_size; otherwise both are -1 (unknown).  Likewise
 * local_rank and local_world_size are -1 when the launcher does not say.
 *
 * Values that are not integers, or that contradict each other (rank >=
 * world size, local rank >= local world size, ...), are errors
 * (ACCEL_ERR_CONFIG) whose message names the variables and their values. */
#ifndef ACCEL_CORE_WORLD_H
#define ACCEL_CORE_WORLD_H

#include <stddef.h>

#include "accel/plugin.h"
#include "error.h"

/* Buffer sizes that always hold the results (longer values are truncated). */
#define ACCEL_WORLD_JOB_ID_MAX 64
#define ACCEL_WORLD_ADDR_MAX 256

/* Look up an environment-style variable; NULL when unset.  The returned
 * string must stay valid until the detection call returns. */
typedef const char *(*accel_world_getvar_fn)(const char *name, void *userdata);

/* Read the world from the process environment (getenv).
 *
 * ret_world:      filled completely (struct_size set); required.
 * job_id:         (optional) a job id that every rank of the job computes
 *                 the same, made only of [A-Za-z0-9._-]; "" when the launcher
 *                 gives none (mpiexec without PMIx).  A world of 1 without a
 *                 launcher gets "solo-<pid>".  At most job_id_cap-1 chars.
 * master_addr:    (optional) host name or IP literal of rank 0's node, or ""
 *                 when unknown (see above).  At most master_addr_cap-1 chars.
 * ret_master_port:(optional) 1..65535, or 0 when unknown.
 * ret_launcher:   (optional) a static string naming the source:
 *                 "accel launch", "mpirun (OpenMPI)", "mpiexec (MPICH/Hydra)",
 *                 "torchrun", "srun" or "none".
 * err:            (optional) receives the message on failure.
 * Outputs are written only on success.  Returns ACCEL_OK, ACCEL_ERR_CONFIG
 * (inconsistent or malformed variables) or ACCEL_ERR_INVALID_ARG. */
int accelp_world_from_env(accel_world_v1 *ret_world, char *job_id, size_t job_id_cap,
                         char *master_addr, size_t master_addr_cap, int *ret_master_port,
                         const char **ret_launcher, accel_err *err);

/* The same, reading variables through `getvar` (tests, or a caller holding
 * its own environment snapshot). */
int accelp_world_from_vars(accel_world_getvar_fn getvar, void *userdata,
                          accel_world_v1 *ret_world, char *job_id, size_t job_id_cap,
                          char *master_addr, size_t master_addr_cap, int *ret_master_port,
                          const char **ret_launcher, accel_err *err);

#endif
