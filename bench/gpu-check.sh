#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpu-check.sh: the extra commands of a GPU run after `meson test
# --suite gpu` (with the build's `meson devenv` on PATH): what the build
# found and what the machine has, then the fused AdamW benchmark
# (bench/optim-cuda.sh).  Logs go to $GPU_LOG_DIR too.
#
#   sh bench/gpu-check.sh [BUILD_DIR]          (default: build)
set -u
BUILD=${1:-build}
L=${GPU_LOG_DIR:-/tmp/accel-gpu}
mkdir -p "$L"
# the gpu suite's full log (the cuda test prints its largest differences)
[ -f "$BUILD/meson-logs/testlog.txt" ] && cp "$BUILD/meson-logs/testlog.txt" "$L/gpu-testlog.txt"
echo "== accel env (CUDA, NCCL)"
"$BUILD/cli/accel" env 2>&1 | sed -n '/build features/p;/## CUDA and NCCL/,/## MPI/p' |
	tee "$L/accel-env.log"
echo "== bench/optim-cuda.sh"
ROUNDS=${ROUNDS:-3} sh "$(dirname "$0")/optim-cuda.sh" "$BUILD" 2>&1 | tee "$L/optim-cuda.log"
