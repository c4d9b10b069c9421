/* SPDX-License-Identifier: MIT */
/* core/restart.h: what a rank does for `accel launch --max-restarts`
 * (docs/launch.md, "Automatic restart"): resume from the checkpoint the
 * launcher names (ACCEL_RESUME, ACCEL_RESUME_ROOT) at accel_prepare, and,
 * on rank 0, record the optimizer steps done and the checkpoints committed
 * in the launcher's state file (ACCEL_LAUNCH_STATE), so that the launcher
 * can say which checkpoint a restart resumes from and how many steps it
 * loses.  Private to the library and the CLI. */
#ifndef ACCEL_CORE_RESTART_H
#define ACCEL_CORE_RESTART_H

#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

/* The state file: the launcher creates it (size ACCELP_RESTART_FILE_SIZE,
 * zeros); rank 0 overwrites two NUL-padded text records in place:
 *   at ACCELP_RESTART_STEP_OFF: "<optimizer steps done>\n"
 *   at ACCELP_RESTART_SAVE_OFF: "<step> <absolute checkpoint directory>\n"
 * (the newest committed checkpoint); and every rank, when a collective
 * fails because a peer is gone or did not come (ACCEL_ERR_PEER,
 * ACCEL_ERR_TIMEOUT), writes 1 in the byte ACCELP_RESTART_PEER_OFF + its
 * local rank: its failure is a consequence of another's, which the
 * launcher then names as the cause (docs/launch.md, "When a rank fails"). */
#define ACCELP_RESTART_STEP_OFF 0
#define ACCELP_RESTART_STEP_LEN 64
#define ACCELP_RESTART_SAVE_OFF 64
#define ACCELP_RESTART_SAVE_LEN 4160
#define ACCELP_RESTART_PEER_OFF (ACCELP_RESTART_SAVE_OFF + ACCELP_RESTART_SAVE_LEN)
#define ACCELP_RESTART_PEER_LEN 1024 /* accel launch's most processes per node */
#define ACCELP_RESTART_FILE_SIZE (ACCELP_RESTART_PEER_OFF + ACCELP_RESTART_PEER_LEN)

typedef struct accelp_restart accelp_restart;

/* accel_ctx_new, once the rank is known: read the variables (skip_env:
 * none).  Errors: ACCEL_ERR_CONFIG for a malformed value, naming it. */
int accelp_restart_init(accel_ctx *ctx, int skip_env);
void accelp_restart_free(accel_ctx *ctx);

/* The end of accel_prepare: with ACCEL_RESUME set, load the checkpoint it
 * names (collective); no checkpoint behind "latest": start from the
 * beginning (said once, on rank 0). */
int accelp_restart_resume(accel_ctx *ctx);

/* The checkpoint ACCEL_RESUME resolves to, for accel_load_state(ctx,
 * NULL): 1 and the directory in buf, or 0 when there is none. */
int accelp_restart_dir(accel_ctx *ctx, char *buf, size_t cap);

/* Rank 0: after each optimizer step, and after a checkpoint dir was
 * committed at `step`. */
void accelp_restart_note_step(accel_ctx *ctx, uint64_t step);
void accelp_restart_note_saved(accel_ctx *ctx, const char *dir, uint64_t step);

/* Any rank, once: a collective failed because a peer is gone or did not
 * come; tell the launcher (ACCELP_RESTART_PEER_OFF) that this rank's
 * failure is not the cause.  Nothing without ACCEL_LAUNCH_STATE. */
void accelp_restart_note_peer(accel_ctx *ctx);

#endif
