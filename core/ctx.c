/* SPDX-License-Identifier: MIT */
/* core/ctx.c: placeholder until implemented. */
typedef int accel_placeholder_ctx;
