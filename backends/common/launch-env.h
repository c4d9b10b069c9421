/* SPDX-License-Identifier: MIT */
/*
 * backends/common/launch-env.h: the names of the environment variables that
 * `accel launch` sets in every rank and that the library reads back (core's
 * world discovery, logger and config layers, the tcp backend's master
 * address).  One place for both sides, so that a rename cannot leave the
 * launcher and the ranks speaking of different variables; docs/launch.md
 * describes each.  Only names here: what they mean for other launchers
 * (mpirun, srun) is core/world.c's.
 */
#ifndef ACCEL_COMMON_LAUNCH_ENV_H
#define ACCEL_COMMON_LAUNCH_ENV_H

/* accel's own, set by `accel launch` for each rank */
#define ACCEL_ENV_RANK             "ACCEL_RANK"
#define ACCEL_ENV_LOCAL_RANK       "ACCEL_LOCAL_RANK"
#define ACCEL_ENV_WORLD_SIZE       "ACCEL_WORLD_SIZE"
#define ACCEL_ENV_LOCAL_WORLD_SIZE "ACCEL_LOCAL_WORLD_SIZE"
#define ACCEL_ENV_NODE_RANK        "ACCEL_NODE_RANK"
#define ACCEL_ENV_NUM_NODES        "ACCEL_NUM_NODES"
#define ACCEL_ENV_MASTER_ADDR      "ACCEL_MASTER_ADDR"
#define ACCEL_ENV_MASTER_PORT      "ACCEL_MASTER_PORT"
#define ACCEL_ENV_JOB_ID           "ACCEL_JOB_ID"
#define ACCEL_ENV_CONFIG           "ACCEL_CONFIG"   /* the config file, made absolute */
#define ACCEL_ENV_SET              "ACCEL_SET"      /* --set assignments, one a line */

/* set by `accel launch --max-restarts` (docs/launch.md, "Automatic restart") */
#define ACCEL_ENV_RESTART_COUNT    "ACCEL_RESTART_COUNT" /* 0 on the first attempt */
#define ACCEL_ENV_RESUME           "ACCEL_RESUME"      /* "latest" or a checkpoint dir */
#define ACCEL_ENV_RESUME_ROOT      "ACCEL_RESUME_ROOT" /* the directory whose "latest" */
#define ACCEL_ENV_LAUNCH_STATE     "ACCEL_LAUNCH_STATE" /* rank 0 records steps, saves */
#define ACCEL_ENV_LAUNCH_SLOT      "ACCEL_LAUNCH_SLOT"  /* the slot a rank was started in */

/* read by the library, set by the user (passed through by the launcher) */
#define ACCEL_ENV_PLUGIN_PATH      "ACCEL_PLUGIN_PATH"
#define ACCEL_ENV_DEVICE_PATH      "ACCEL_DEVICE_PATH" /* device modules, before the install dir */
#define ACCEL_ENV_LOG_LEVEL        "ACCEL_LOG_LEVEL"
#define ACCEL_ENV_LOG_ALL_RANKS    "ACCEL_LOG_ALL_RANKS"
#define ACCEL_ENV_CLI              "ACCEL_CLI"      /* the accel binary, for tests */

/* the torchrun names, also set by `accel launch` (programs written for
 * torchrun read them) and read when torchrun started the ranks */
#define ACCEL_ENV_TORCH_RANK             "RANK"
#define ACCEL_ENV_TORCH_WORLD_SIZE       "WORLD_SIZE"
#define ACCEL_ENV_TORCH_LOCAL_RANK       "LOCAL_RANK"
#define ACCEL_ENV_TORCH_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define ACCEL_ENV_TORCH_GROUP_RANK       "GROUP_RANK"
#define ACCEL_ENV_TORCH_MASTER_ADDR      "MASTER_ADDR"
#define ACCEL_ENV_TORCH_MASTER_PORT      "MASTER_PORT"

#endif /* ACCEL_COMMON_LAUNCH_ENV_H */
