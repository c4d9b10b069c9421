#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/fp8-gemm.sh: the fp8 plugin's FP8 GEMM (cuBLASLt, E4M3 x E4M3, f32
# out, fast accumulation, TN) against a bf16 cuBLASLt GEMM in the same
# process and PyTorch's torch._scaled_mm (and torch.matmul in bf16) in the
# same run, at M = N = K = SIZE on one GPU.  Prints every JSON line, then
#   {"bench":"fp8-gemm-ratio","fp8_over_bf16":..,"fp8_over_scaled_mm":..}
# Targets (docs/benchmarks.md): fp8 >= 1.6x bf16, and >= 0.95x _scaled_mm.
#
# Usage: sh bench/fp8-gemm.sh [BUILD_DIR]      (default: build)
# Environment: SIZE (8192), ITERS (50), PYTHON (python3).  Exit 77 without
# an FP8 GPU.
set -eu
BUILD=${1:-build}
SIZE=${SIZE:-8192}
ITERS=${ITERS:-50}
PYTHON=${PYTHON:-python3}
BENCH=$BUILD/bench/bench-fp8-gemm
MOD=$BUILD/plugins/fp8/fp8-cuda/fp8-cuda.so
if [ ! -x "$BENCH" ] || [ ! -f "$MOD" ]; then
	echo "fp8-gemm: $BENCH or $MOD not found; build with CUDA and cuBLASLt first" >&2
	exit 2
fi
MACH=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
MACH=${MACH:-unknown}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/fp8-gemm.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
echo "# fp8-gemm: $(date -u +%Y-%m-%dT%H:%M:%SZ) gpu '$MACH' SIZE=$SIZE ITERS=$ITERS"
rc=0
"$BENCH" --m "$SIZE" --n "$SIZE" --k "$SIZE" --iters "$ITERS" --machine "$MACH" "$MOD" \
	>"$OUT/accel" || rc=$?
cat "$OUT/accel"
[ "$rc" = 77 ] && exit 77
[ "$rc" = 0 ] || exit 1
"$PYTHON" - "$SIZE" "$ITERS" "$MACH" >"$OUT/torch" <<'PY' || echo "# torch peer failed or missing" >&2
import json, sys
import torch
n, iters, mach = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
a = torch.full((n, n), 0.5, device="cuda").to(torch.float8_e4m3fn)
b = torch.full((n, n), 0.5, device="cuda").to(torch.float8_e4m3fn).t()
one = torch.tensor(1.0, device="cuda")
def timeit(fn):
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters
res = {}
if hasattr(torch, "_scaled_mm"):
    res["torch_scaled_mm"] = timeit(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                             out_dtype=torch.float32,
                                                             use_fast_accum=True))
x = torch.full((n, n), 1 / 64, device="cuda", dtype=torch.bfloat16)
res["torch_bf16"] = timeit(lambda: x @ x.t())
for op, ms in res.items():
    print(json.dumps({"bench": "fp8-gemm", "machine": mach, "op": op, "m": n, "n": n, "k": n,
                      "ms": round(ms, 4), "tflops": round(2 * n**3 / (ms * 1e-3) / 1e12, 1)}))
PY
cat "$OUT/torch" 2>/dev/null || true
"$PYTHON" - "$OUT/accel" "$OUT/torch" <<'PY'
import json, sys
r = {}
for p in sys.argv[1:]:
    try:
        for l in open(p):
            if l.startswith("{"):
                j = json.loads(l)
                r[j["op"]] = j["tflops"]
    except OSError:
        pass
out = {"bench": "fp8-gemm-ratio",
       "fp8_over_bf16": round(r["fp8_e4m3"] / r["bf16"], 3)}
if "torch_scaled_mm" in r:
    out["fp8_over_scaled_mm"] = round(r["fp8_e4m3"] / r["torch_scaled_mm"], 3)
print(json.dumps(out))
PY
