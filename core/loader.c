/* SPDX-License-Identifier: MIT */
/* core/loader.c: placeholder until implemented. */
typedef int accel_placeholder_loader;
