#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpu-check.sh: the extra command of a GPU run after `meson test
# --suite gpu` (with the build's `meson devenv` on PATH): everything the
# open GPU items of the project measure, bounded in time, most valuable
# first (docs/testing.md, "On a lent GPU: the one call"):
#
#   env      what the build found and what the machine has (accel env),
#            and the gpu suite's logs (testlog.txt, testlog.json);
#   fp8gemm  bench/fp8-gemm.sh: the fp8 plugin's cuBLASLt FP8 GEMM at
#            8192^3 against bf16 and torch._scaled_mm (targets: >= 1.6x
#            bf16, >= 0.95x _scaled_mm);
#   train    bench/train-cuda.sh: train_mlp --device cuda 784-4096-4096-10,
#            batch 4096, bf16, fp8 and fp16 against PyTorch + Accelerate
#            (TRAIN_DTYPES; f32 and bf16 were measured before);
#   gpt2     bench/gpt2-gpu.sh: GPT-2 124M, batch 16 x 1024: accel bf16,
#            bf16 with --recompute (memory), fp8, against PyTorch +
#            Accelerate eager and torch.compile (GPT2_TORCH_RUNS);
#   comm     accel bench comm --device cuda at one rank (its header must
#            say nccl)                               (measured before)
#   optim    bench/optim-cuda.sh: fused AdamW, 100M f32 parameters, against
#            torch.optim.AdamW(fused=True) and a d2d copy (measured before)
#
# then one summary, Markdown, to paste into docs/benchmarks.md: every
# figure with its target, each gpu test's result with the observed
# differences it printed next to its tolerance, and each part's status.
#
# GPU_CHECK_PARTS chooses the parts (default "env fp8gemm train gpt2";
# "all" adds comm and optim).  Each part has a time limit
# (PART_TIMEOUT_ENV 20, _FP8GEMM 90, _TRAIN 150, _GPT2 240, _COMM 45,
# _OPTIM 120 seconds), cut to what is left of the whole check's time:
# GPU_CHECK_DEADLINE (a `date +%s` time: set it before the build and the
# gpu suite, so the suite's time counts) or else GPU_CHECK_BUDGET seconds
# from now (default 540).  A part that runs past its limit is killed and
# reported, a part with under GPU_CHECK_MIN_PART (15) s left is skipped, and the summary is
# always written.  Logs and summary.md go to $GPU_LOG_DIR (default
# /tmp/accel-gpu).  Exit status: 0 when every chosen part ran (whether
# the targets were met is in the summary), 1 when one failed, timed out or
# was skipped, 77 without a GPU (nvidia-smi -L fails).
# GPU_CHECK_BENCH (default: this directory) is where the part scripts are
# looked up; tests/test-gpu-check.sh points it at stubs.
#
#   sh bench/gpu-check.sh [BUILD_DIR]          (default: build)
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=${GPU_CHECK_BENCH:-$HERE}
L=${GPU_LOG_DIR:-/tmp/accel-gpu}
PYTHON=${PYTHON:-python3}
PARTS=${GPU_CHECK_PARTS:-env fp8gemm train gpt2}
[ "$PARTS" = all ] && PARTS="env fp8gemm train gpt2 comm optim"
T0=$(date +%s)
DEADLINE=${GPU_CHECK_DEADLINE:-$((T0 + ${GPU_CHECK_BUDGET:-540}))}
SUMMARY_RESERVE=10   # seconds kept for the summary
MIN_PART=${GPU_CHECK_MIN_PART:-15}   # a part with less time left is skipped
mkdir -p "$L" || exit 1
: > "$L/parts.txt"
fails=0
TO=
command -v timeout > /dev/null 2>&1 && TO=timeout

# part NAME LIMIT LOG CMD...: run CMD with a time limit (LIMIT, cut to the
# time left), output into LOG and on stdout; one line per part into
# parts.txt: NAME STATUS SECONDS LIMIT (STATUS: the exit status, 124 = ran
# past its limit, "skipped" = no time left)
part() {
	name=$1 limit=$2 log=$3
	shift 3
	left=$((DEADLINE - SUMMARY_RESERVE - $(date +%s)))
	[ "$limit" -gt "$left" ] && limit=$left
	if [ "$limit" -lt "$MIN_PART" ]; then
		echo "== $name: SKIPPED (${left} s left before the deadline)"
		echo "$name skipped 0 $limit" >> "$L/parts.txt"
		fails=$((fails + 1))
		return
	fi
	echo "== $name (limit $limit s)"
	s=$(date +%s)
	rc=0
	if [ -n "$TO" ]; then
		$TO -k 5 "$limit" "$@" > "$log" 2>&1 || rc=$?
	else
		"$@" > "$log" 2>&1 || rc=$?
	fi
	cat "$log"
	dt=$(($(date +%s) - s))
	echo "== $name: status $rc in $dt s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
	echo "$name $rc $dt $limit" >> "$L/parts.txt"
	[ "$rc" = 0 ] || fails=$((fails + 1))
}

if ! nvidia-smi -L > /dev/null 2>&1; then
	echo "skipped: no GPU (nvidia-smi -L failed)"
	exit 77
fi
for f in testlog.txt testlog.json; do
	[ -f "$BUILD/meson-logs/$f" ] && cp "$BUILD/meson-logs/$f" "$L/gpu-$f"
done
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
echo "gpu-check: $GPU; parts: $PARTS; $((DEADLINE - T0)) s until the deadline"

# this build's modules (as meson devenv sets them)
# shellcheck disable=SC2012 # the build's own directory names
: "${ACCEL_PLUGIN_PATH:=$(ls -d "$BUILD"/plugins/* "$BUILD"/backends/* 2> /dev/null | tr '\n' ':')}"
: "${ACCEL_DEVICE_PATH:=$BUILD/backends/cuda}"
export ACCEL_PLUGIN_PATH ACCEL_DEVICE_PATH

for p in $PARTS; do
	case $p in
	env)
		part env "${PART_TIMEOUT_ENV:-20}" "$L/accel-env.log" "$BUILD/cli/accel" env ;;
	fp8gemm)
		part fp8gemm "${PART_TIMEOUT_FP8GEMM:-90}" "$L/fp8-gemm.log" \
			env PYTHON="$PYTHON" sh "$BENCH/fp8-gemm.sh" "$BUILD" ;;
	train)
		part train "${PART_TIMEOUT_TRAIN:-150}" "$L/train-cuda.log" \
			env ROUNDS="${TRAIN_ROUNDS:-2}" LEGACY=0 RUN_TIMEOUT=40 PYTHON="$PYTHON" \
			DTYPES="${TRAIN_DTYPES:-bf16 fp8 fp16}" sh "$BENCH/train-cuda.sh" "$BUILD" ;;
	gpt2)
		part gpt2 "${PART_TIMEOUT_GPT2:-240}" "$L/gpt2-gpu.log" \
			env RUN_TIMEOUT=100 PYTHON="$PYTHON" COMPILE_STEPS="${GPT2_COMPILE_STEPS:-5}" \
			TORCH_RUNS="${GPT2_TORCH_RUNS:-torch-eager torch-compile torch-compile-sdpa}" \
			sh "$BENCH/gpt2-gpu.sh" "$BUILD" "${GPT2_STEPS:-10}" ;;
	comm)
		part comm "${PART_TIMEOUT_COMM:-45}" "$L/bench-comm-cuda.log" \
			"$BUILD/cli/accel" bench comm --device cuda --set backend=nccl --op allreduce \
			--min-bytes 1M --max-bytes 256M --iters 20 --warmup 5 ;;
	optim)
		part optim "${PART_TIMEOUT_OPTIM:-120}" "$L/optim-cuda.log" \
			env ROUNDS=2 RUN_TIMEOUT=40 PYTHON="$PYTHON" sh "$BENCH/optim-cuda.sh" "$BUILD" ;;
	*)
		echo "gpu-check: GPU_CHECK_PARTS: no part '$p' (env fp8gemm train gpt2 comm optim, or all)"
		exit 2 ;;
	esac
done

echo
echo "== summary (for docs/benchmarks.md), $(($(date +%s) - T0)) s"
"$PYTHON" "$HERE/gpu_summary.py" "$L" "$GPU" | tee "$L/summary.md"
echo "done in $(($(date +%s) - T0)) s; logs in $L"
[ "$fails" -eq 0 ] || exit 1
exit 0
