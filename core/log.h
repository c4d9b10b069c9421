/* SPDX-License-Identifier: MIT */
/* core/log.h: the logger (private).
 *
 * Level from ACCEL_LOG_LEVEL (error|warn|info|debug|trace or 0..4, default
 * info).  Lines go to stderr as "[accel rank R] LEVEL: text".  By default
 * only the main process (rank 0) prints info and debug lines; warnings and
 * errors print on every rank; ACCEL_LOG_ALL_RANKS=1 makes every rank print
 * everything.  The logger is process-wide configuration read from the
 * environment (like the environment itself), not error state. */
#ifndef ACCEL_CORE_LOG_H
#define ACCEL_CORE_LOG_H

#include <stdarg.h>

#include "accel/types.h"

/* (Re)read ACCEL_LOG_LEVEL / ACCEL_LOG_ALL_RANKS; called lazily. */
void accelp_log_init(void);
/* Set the rank shown in the prefix (-1: no rank known, no prefix number). */
void accelp_log_set_rank(int rank);
int accelp_log_get_level(void);
void accelp_log_set_level(int level);
/* Parse "info"/"2"...; returns -1 when not a level. */
int accelp_log_level_parse(const char *s);
void accelp_log(int level, const char *fmt, ...) ACCEL_PRINTF(2, 3);
void accelp_logv(int level, const char *fmt, va_list ap) ACCEL_PRINTF(2, 0);
/* With an extra tag after the prefix, e.g. the plugin name. */
void accelp_logv_tag(int level, const char *tag, const char *fmt, va_list ap)
	ACCEL_PRINTF(3, 0);

#endif
