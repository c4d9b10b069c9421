/* SPDX-License-Identifier: MIT */
/* core/host.c: placeholder until implemented. */
typedef int accel_placeholder_host;
