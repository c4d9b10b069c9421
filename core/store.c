/* SPDX-License-Identifier: MIT */
/* core/store.c: placeholder until implemented. */
typedef int accel_placeholder_store;
