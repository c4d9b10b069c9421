/* SPDX-License-Identifier: MIT */
/* core/log.c: the logger.  Process-wide settings from the environment; one
 * write() per line so lines of concurrent ranks do not interleave. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "log.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = ACCEL_LOG_INFO;
static int log_all_ranks;
static int log_rank = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

int accelp_log_level_parse(const char *s)
{
	if (!s || !*s)
		return -1;
	for (int i = 0; i <= ACCEL_LOG_TRACE; i++)
		if (!strcasecmp(s, level_names[i]))
			return i;
	if (!strcasecmp(s, "warning"))
		return ACCEL_LOG_WARN;
	if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
		return s[0] - '0';
	return -1;
}

static void log_read_env(void)
{
	const char *lv = getenv(ACCEL_ENV_LOG_LEVEL);
	int l = accelp_log_level_parse(lv);
	if (l >= 0)
		log_level = l;
	else if (lv && *lv)
		fprintf(stderr, "[accel] warn: ACCEL_LOG_LEVEL='%s' is not one of "
		        "error|warn|info|debug|trace|0..4; messages before the configuration "
		        "is read use info (a context refuses the value)\n", lv);
	const char *all = getenv(ACCEL_ENV_LOG_ALL_RANKS);
	log_all_ranks = all && *all && strcmp(all, "0") != 0;
	const char *r = getenv(ACCEL_ENV_RANK);
	if (r && *r)
		log_rank = atoi(r);
}

void accelp_log_init(void)
{
	pthread_once(&log_once, log_read_env);
}

void accelp_log_set_rank(int rank)
{
	accelp_log_init();
	log_rank = rank;
}

int accelp_log_get_level(void)
{
	accelp_log_init();
	return log_level;
}

void accelp_log_set_level(int level)
{
	accelp_log_init();
	if (level >= ACCEL_LOG_ERROR && level <= ACCEL_LOG_TRACE)
		log_level = level;
}

void accelp_logv_tag(int level, const char *tag, const char *fmt, va_list ap)
{
	accelp_log_init();
	if (level > log_level)
		return;
	/* Main-process-only by default for chatter; problems show everywhere. */
	if (level >= ACCEL_LOG_INFO && !log_all_ranks && log_rank > 0)
		return;
	if (level < 0)
		level = 0;
	if (level > ACCEL_LOG_TRACE)
		level = ACCEL_LOG_TRACE;
	char line[4096];
	int n;
	if (log_rank >= 0)
		n = snprintf(line, sizeof(line), "[accel rank %d] %s: ", log_rank, level_names[level]);
	else
		n = snprintf(line, sizeof(line), "[accel] %s: ", level_names[level]);
	if (tag && n < (int)sizeof(line))
		n += snprintf(line + n, sizeof(line) - n, "%s: ", tag);
	if (n < (int)sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (n >= (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}

void accelp_logv(int level, const char *fmt, va_list ap)
{
	accelp_logv_tag(level, NULL, fmt, ap);
}

void accelp_log(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	accelp_logv(level, fmt, ap);
	va_end(ap);
}
