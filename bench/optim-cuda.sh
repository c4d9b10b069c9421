#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/optim-cuda.sh: the cuda device module's fused multi-tensor AdamW
# next to its peers, in one run on one GPU, on the same N f32 parameters in
# T tensors:
#
#   accel  bench-optim-cuda: accelp_optim_step_ranges on ACCEL_DEVICE_CUDA
#          (backends/cuda, one fused kernel pass per launch of <= 160 tensors)
#   copy   the same process: cudaMemcpy device to device, read + write bytes
#   torch  bench/torch_adamw_cuda.py: torch.optim.AdamW(fused=True), and
#          torch's own copy_ bandwidth in its process
#
# The two programs take turns for ROUNDS rounds; each result is the fastest
# batch seen.  Prints every JSON line, then one ratio line
# ({"bench":"optim-cuda-ratio",...}) and a summary against the targets in
# docs/benchmarks.md: accel >= 1.0x torch fused AdamW (time per step), and
# accel's 28 bytes per parameter moved at >= 85% of the copy bandwidth.
#
# Usage: sh bench/optim-cuda.sh [BUILD_DIR]          (default: build)
# Environment: N (100000000), TENSORS (100), STEPS (20), ROUNDS (3),
#   PYTHON (python3), RUN_TIMEOUT (90: seconds for one program run; one
#   that takes longer is killed and fails the benchmark).  Exit 77 without
#   a GPU.
set -eu

BUILD=${1:-build}
N=${N:-100000000}
TENSORS=${TENSORS:-100}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-3}
PYTHON=${PYTHON:-python3}
RUN_TIMEOUT=${RUN_TIMEOUT:-90}
TO=
command -v timeout >/dev/null 2>&1 && TO="timeout -k 10 $RUN_TIMEOUT"
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=$BUILD/bench/bench-optim-cuda

if [ ! -x "$BENCH" ]; then
	echo "optim-cuda: $BENCH not found; build with -Dcuda=enabled first" >&2
	exit 2
fi
# uninstalled: the module from the same build
ACCEL_DEVICE_PATH=${ACCEL_DEVICE_PATH:-$BUILD/backends/cuda}
export ACCEL_DEVICE_PATH
MACH=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
MACH=${MACH:-unknown}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/optim-cuda.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

echo "# optim-cuda: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) gpu '$MACH'"
echo "# N=$N TENSORS=$TENSORS STEPS=$STEPS ROUNDS=$ROUNDS" \
	"torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
have_torch=1
round=1
while [ "$round" -le "$ROUNDS" ]; do
	rc=0
	$TO "$BENCH" --n "$N" --tensors "$TENSORS" --steps "$STEPS" --rounds 1 --machine "$MACH" \
		>"$OUT/accel.$round" || rc=$?
	if [ "$rc" = 77 ]; then
		cat "$OUT/accel.$round"
		exit 77
	fi
	[ "$rc" = 0 ] || { cat "$OUT/accel.$round"; echo "optim-cuda: bench-optim-cuda failed" \
		"(status $rc; 124: ran past ${RUN_TIMEOUT} s)" >&2; exit 1; }
	cat "$OUT/accel.$round"
	if [ "$have_torch" = 1 ]; then
		rc=0
		$TO "$PYTHON" "$HERE/torch_adamw_cuda.py" --n "$N" --tensors "$TENSORS" --steps "$STEPS" \
			--rounds 1 --machine "$MACH" >"$OUT/torch.$round" || rc=$?
		if [ "$rc" = 77 ]; then
			echo "optim-cuda: torch peer skipped: $(cat "$OUT/torch.$round")" >&2
			rm -f "$OUT/torch.$round"
			have_torch=0
		elif [ "$rc" != 0 ]; then
			echo "optim-cuda: torch_adamw_cuda.py failed (status $rc; 124: ran past" \
				"${RUN_TIMEOUT} s)" >&2
			exit 1
		else
			cat "$OUT/torch.$round"
		fi
	fi
	round=$((round + 1))
done

"$PYTHON" - "$OUT" <<'PY'
import glob, json, os, sys

best = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.[0-9]*")):
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "time_ms" not in r:
                continue
            k = (r["impl"], r["op"])
            if k not in best or r["time_ms"] < best[k]["time_ms"]:
                best[k] = r
accel = best[("accel", "adamw")]
copy = best[("cuda", "d2d-copy")]
torch = best.get(("torch", "adamw"))
tcopy = best.get(("torch", "d2d-copy"))
ratio = torch["time_ms"] / accel["time_ms"] if torch else None
frac = accel["GBps"] / copy["GBps"]
print(json.dumps({"bench": "optim-cuda-ratio", "machine": accel["machine"], "n": accel["n"],
                  "tensors": accel["tensors"], "accel_ms": accel["time_ms"],
                  "accel_GBps": accel["GBps"],
                  "peer": ("torch %s AdamW fused=True" % torch["torch"]) if torch else None,
                  "peer_ms": torch["time_ms"] if torch else None,
                  "ratio": round(ratio, 3) if ratio else None,
                  "copy_GBps": copy["GBps"], "fraction_of_copy": round(frac, 3),
                  "torch_copy_GBps": tcopy["GBps"] if tcopy else None},
                 separators=(",", ":")))
print()
print("# fastest batch; AdamW counts 28 bytes/param (read p,g,m,v; write p,m,v), copies 2x bytes")
print("# %-34s %10s %10s" % ("", "ms", "GB/s"))
print("  %-34s %10.3f %10.1f" % ("accel fused AdamW", accel["time_ms"], accel["GBps"]))
if torch:
    print("  %-34s %10.3f %10.1f" % ("torch AdamW fused=True", torch["time_ms"], torch["GBps"]))
print("  %-34s %10.3f %10.1f" % ("cudaMemcpy d2d", copy["time_ms"], copy["GBps"]))
if tcopy:
    print("  %-34s %10.3f %10.1f" % ("torch copy_", tcopy["time_ms"], tcopy["GBps"]))
print()
print("# %-44s %8s %8s %8s" % ("target", "value", "needed", ""))
for name, v, need in [("accel vs torch fused AdamW (time per step)", ratio, 1.0),
                      ("accel bytes/s as a fraction of d2d copy", frac, 0.85)]:
    verdict = "-" if v is None else ("met" if v >= need else "MISSED")
    print("  %-44s %8s %8.2f %8s" % (name, "-" if v is None else "%.2f" % v, need, verdict))
PY
