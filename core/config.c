/* SPDX-License-Identifier: MIT */
/* core/config.c: placeholder until implemented. */
typedef int accel_placeholder_config;
