/* SPDX-License-Identifier: MIT */
/* core/comm.c: placeholder until implemented. */
typedef int accel_placeholder_comm;
