/* SPDX-License-Identifier: MIT */
/* backends/common/mono.c: the monotonic clock and saturating deadlines. */
#include <time.h>

#include "backends/common/mono.h"

int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_after(int64_t now, int64_t delta)
{
	int64_t d;
	return __builtin_add_overflow(now, delta, &d) ? INT64_MAX : d;
}

int64_t mono_deadline_ns(int64_t timeout_ms)
{
	if (timeout_ms <= 0)
		return 0;
	int64_t now = mono_ns();
	if (timeout_ms > (INT64_MAX - now) / 1000000)
		return INT64_MAX;
	return now + timeout_ms * 1000000;
}

int64_t mono_ms_to_ns(int64_t t_ms)
{
	int64_t d;
	return __builtin_mul_overflow(t_ms, (int64_t)1000000, &d) ? INT64_MAX : d;
}
