/* SPDX-License-Identifier: MIT */
/*
 * backends/common/mono.h: the monotonic clock that every timeout of accel
 * runs on (the rendezvous store, the launcher, the comm backends), and
 * deadlines on it that saturate instead of overflowing: a timeout too
 * large to represent means never (a peer may send any value; a caller may
 * pass INT64_MAX for "forever").
 *
 * Part of the internal common library (backends/common/meson.build), linked
 * into libaccel, the CLI and the backend modules with hidden visibility.
 */
#ifndef ACCEL_COMMON_MONO_H
#define ACCEL_COMMON_MONO_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds and in milliseconds. */
int64_t mono_ns(void);
int64_t mono_ms(void);

/* now + delta without overflow: INT64_MAX when the sum does not fit. */
int64_t mono_after(int64_t now, int64_t delta);

/* The deadline timeout_ms from now on the mono_ns() clock; 0 (none) when
 * timeout_ms <= 0, INT64_MAX when it is too far to represent. */
int64_t mono_deadline_ns(int64_t timeout_ms);

/* A time t_ms on the mono_ms() clock as the same time on the mono_ns()
 * clock; INT64_MAX when it does not fit. */
int64_t mono_ms_to_ns(int64_t t_ms);

#endif /* ACCEL_COMMON_MONO_H */
