/* SPDX-License-Identifier: MIT */
/* core/ops_cpu.c: placeholder until implemented. */
typedef int accel_placeholder_ops_cpu;
