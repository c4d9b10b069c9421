#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpu-check.sh: the extra command of a GPU run after `meson test
# --suite gpu` (with the build's `meson devenv` on PATH), everything the
# GPU part of the project measures, bounded in time:
#
#   1. what the build found and what the machine has (accel env), and the
#      gpu suite's full log (the cuda test prints its largest differences);
#   2. `accel bench comm --device cuda` at one rank: its header must say
#      nccl;
#   3. bench/optim-cuda.sh: the cuda module's fused AdamW, 100M f32
#      parameters in 100 tensors, against torch.optim.AdamW(fused=True) and
#      a device-to-device copy in the same run;
#   4. bench/train-cuda.sh: train_mlp --device cuda 784-4096-4096-10,
#      batch 4096, f32 and bf16, on its own non-blocking stream and on the
#      legacy stream, against PyTorch + Accelerate (plain PyTorch autocast +
#      fused AdamW where accelerate is missing; the summary says which);
#
# then one summary block, Markdown, to paste into docs/benchmarks.md.
# Each part has a time limit (PART_TIMEOUT_*, seconds); a part that runs
# past it is killed and reported, and the rest goes on.  With the defaults
# the whole script stays under about 6 minutes (typically 2 to 3).  Logs go
# to $GPU_LOG_DIR too.  Exit status: 0 when every part ran (whether the
# targets were met is in the summary), 1 when one failed or timed out, 77
# without a GPU.
#
#   sh bench/gpu-check.sh [BUILD_DIR]          (default: build)
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
L=${GPU_LOG_DIR:-/tmp/accel-gpu}
PYTHON=${PYTHON:-python3}
ENV_T=${PART_TIMEOUT_ENV:-30}
COMM_T=${PART_TIMEOUT_COMM:-45}
OPTIM_T=${PART_TIMEOUT_OPTIM:-120}
TRAIN_T=${PART_TIMEOUT_TRAIN:-180}
mkdir -p "$L"
T0=$(date +%s)
fails=0
TO=
command -v timeout >/dev/null 2>&1 && TO=timeout

# part NAME LIMIT LOG CMD...: run CMD with a time limit, output into LOG and
# on stdout; returns its status (124: ran past LIMIT)
part() {
	name=$1 limit=$2 log=$3
	shift 3
	echo "== $name (limit $limit s)"
	s=$(date +%s)
	rc=0
	if [ -n "$TO" ]; then
		$TO -k 10 "$limit" "$@" > "$log" 2>&1 || rc=$?
	else
		"$@" > "$log" 2>&1 || rc=$?
	fi
	cat "$log"
	echo "== $name: status $rc in $(($(date +%s) - s)) s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
	return "$rc"
}

if ! nvidia-smi -L > /dev/null 2>&1; then
	echo "skipped: no GPU (nvidia-smi -L failed)"
	exit 77
fi
[ -f "$BUILD/meson-logs/testlog.txt" ] && cp "$BUILD/meson-logs/testlog.txt" "$L/gpu-testlog.txt"
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)

part "accel env (CUDA, NCCL)" "$ENV_T" "$L/accel-env.log" "$BUILD/cli/accel" env || fails=$((fails + 1))

# this build's modules (as meson devenv sets them): world 1, device buffers
: "${ACCEL_PLUGIN_PATH:=$BUILD/backends/shm:$BUILD/backends/nccl:$BUILD/plugins/ddp}"
: "${ACCEL_DEVICE_PATH:=$BUILD/backends/cuda}"
export ACCEL_PLUGIN_PATH ACCEL_DEVICE_PATH
part "accel bench comm --device cuda" "$COMM_T" "$L/bench-comm-cuda.log" \
	"$BUILD/cli/accel" bench comm --device cuda --set backend=nccl --op allreduce \
	--min-bytes 1M --max-bytes 256M --iters 20 --warmup 5 || fails=$((fails + 1))

part "bench/optim-cuda.sh" "$OPTIM_T" "$L/optim-cuda.log" \
	env ROUNDS="${ROUNDS:-2}" RUN_TIMEOUT=$((OPTIM_T / 3)) PYTHON="$PYTHON" \
	sh "$HERE/optim-cuda.sh" "$BUILD" || fails=$((fails + 1))

part "bench/train-cuda.sh" "$TRAIN_T" "$L/train-cuda.log" \
	env ROUNDS="${ROUNDS:-2}" RUN_TIMEOUT=60 PYTHON="$PYTHON" \
	sh "$HERE/train-cuda.sh" "$BUILD" || fails=$((fails + 1))

echo
echo "== summary (for docs/benchmarks.md), $(($(date +%s) - T0)) s"
"$PYTHON" - "$L" "$GPU" "$fails" <<'PY' | tee "$L/summary.md"
import json, os, re, subprocess, sys

logs, gpu, fails = sys.argv[1], sys.argv[2], int(sys.argv[3])


def lines(name):
    try:
        with open(os.path.join(logs, name)) as f:
            return f.read().splitlines()
    except OSError:
        return []


def json_lines(name, bench):
    out = []
    for ln in lines(name):
        if ln.startswith("{"):
            try:
                r = json.loads(ln)
            except ValueError:
                continue
            if r.get("bench") == bench:
                out.append(r)
    return out


def cuda_version():
    try:
        v = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release ([0-9.]+)", v)
        return m.group(1) if m else "?"
    except OSError:
        return "?"


def verdict(v, need):
    return "-" if v is None else ("met" if v >= need else "MISSED")


print("```")
print("GPU: %s; CUDA %s; run %s" % (gpu, cuda_version(),
                                     subprocess.run(["date", "-u", "+%Y-%m-%d"],
                                                    capture_output=True,
                                                    text=True).stdout.strip()))
hdr = [ln for ln in lines("bench-comm-cuda.log") if ln.startswith("#")][:1]
print("accel bench comm --device cuda header: %s" % (" | ".join(hdr) if hdr else "(none)"))
o = json_lines("optim-cuda.log", "optim-cuda-ratio")
if o:
    o = o[-1]
    print("fused AdamW, %d f32 params in %d tensors (fastest of 20-step batches):"
          % (o["n"], o["tensors"]))
    print("  accel %.3f ms (%.0f GB/s); %s %s ms; d2d copy %.0f GB/s (torch copy_ %s GB/s)"
          % (o["accel_ms"], o["accel_GBps"], o["peer"] or "torch: not run",
             o["peer_ms"] if o["peer_ms"] is not None else "-", o["copy_GBps"],
             o["torch_copy_GBps"] if o["torch_copy_GBps"] is not None else "-"))
    print("  vs torch fused: %s (need >= 1.00, %s); fraction of copy: %.3f (need >= 0.85, %s)"
          % ("%.2f" % o["ratio"] if o["ratio"] else "-", verdict(o["ratio"], 1.0),
             o["fraction_of_copy"], verdict(o["fraction_of_copy"], 0.85)))
else:
    print("fused AdamW: no result (see optim-cuda.log)")
t = json_lines("train-cuda.log", "train-cuda-ratio")
for r in t:
    print("train_mlp %s batch %d %s: accel %.3f ms/step (own stream; legacy stream %s ms); "
          "%s %s ms; ratio %s (need >= 1.00, %s)"
          % (r["dims"], r["batch"], r["dtype"], r["accel_ms"],
             r["accel_legacy_ms"] if r["accel_legacy_ms"] is not None else "-",
             r["peer"] or "peer: not run", r["peer_ms"] if r["peer_ms"] is not None else "-",
             "%.2f" % r["ratio"] if r["ratio"] else "-", verdict(r["ratio"], 1.0)))
if not t:
    print("train_mlp: no result (see train-cuda.log)")
print("parts failed or timed out: %d" % fails)
print("```")
PY
echo "done in $(($(date +%s) - T0)) s; logs in $L"
[ "$fails" -eq 0 ] || exit 1
exit 0
