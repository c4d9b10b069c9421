#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/optim-peers.sh: accel's AdamW step next to its peers, in one run on
# one machine, one thread each, on the same N f32 parameters:
#
#   accel   bench/bench-optim: core/optim's AdamW kernel (one fused pass)
#   triad   the same process: a STREAM triad a = b + s*c over N elements,
#           the bandwidth one core gets (STREAM's 12 bytes per element)
#   torch   bench/torch_adamw.py: torch.optim.AdamW, foreach=False and
#           foreach=True; the faster of the two is the peer
#
# The programs take turns for ROUNDS rounds and each result is the fastest
# step seen (other processes only make steps slower).  Prints every JSON
# line, then one ratio line ({"bench":"optim-ratio",...}) and a summary
# against the targets in docs/benchmarks.md: accel >= 3x torch's
# parameters per second, and accel's 28 bytes per parameter moved at >= 60%
# of the triad's bandwidth (STREAM's 12 bytes per element; also shown with
# the write-allocate read of a[] counted, 16 bytes, since AdamW's in-place
# writes have none).
#
# Usage: bench/optim-peers.sh [BUILD_DIR]        (default: build)
# Environment: N (16777216), ROUNDS (3), MIN_TIME (0.5 s per program and
#   round), PYTHON (/usr/bin/python3), KERNEL (auto).
set -eu

BUILD=${1:-build}
N=${N:-16777216}
ROUNDS=${ROUNDS:-3}
MIN_TIME=${MIN_TIME:-0.5}
PYTHON=${PYTHON:-/usr/bin/python3}
KERNEL=${KERNEL:-auto}
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH=$BUILD/bench/bench-optim

if [ ! -x "$BENCH" ]; then
	echo "optim-peers: $BENCH not found; build first (ninja -C $BUILD)" >&2
	exit 2
fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/optim-peers.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

have_torch=1
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "optim-peers: $PYTHON has no torch; the torch peer is skipped" >&2
	have_torch=0
fi

echo "# optim-peers: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $(nproc)" \
	"load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# N=$N ROUNDS=$ROUNDS MIN_TIME=$MIN_TIME KERNEL=$KERNEL" \
	"torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
round=1
while [ "$round" -le "$ROUNDS" ]; do
	"$BENCH" --n "$N" --min-time "$MIN_TIME" --rounds 1 --kernel "$KERNEL" \
		>"$OUT/accel.$round" || { echo "optim-peers: bench-optim failed" >&2; exit 1; }
	cat "$OUT/accel.$round"
	if [ "$have_torch" = 1 ]; then
		"$PYTHON" "$HERE/torch_adamw.py" --n "$N" --min-time "$MIN_TIME" --rounds 1 \
			>"$OUT/torch.$round" || { echo "optim-peers: torch_adamw.py failed" >&2; exit 1; }
		cat "$OUT/torch.$round"
	fi
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" <<'EOF'
import glob, json, os, sys

best = {}   # (impl, op, foreach) -> row with the lowest time
for path in glob.glob(os.path.join(sys.argv[1], "*.[0-9]*")):
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "time_ms" not in r:
                continue
            k = (r["impl"], r["op"], r.get("foreach"))
            if k not in best or r["time_ms"] < best[k]["time_ms"]:
                best[k] = r

accel = best[("accel", "adamw", None)]
triad = best[("triad", "triad", None)]
torchs = [r for k, r in best.items() if k[0] == "torch"]
peer = min(torchs, key=lambda r: r["time_ms"]) if torchs else None
fraction = accel["GBps"] / triad["GBps"]
ratio = peer["time_ms"] / accel["time_ms"] if peer else None
out = {"bench": "optim-ratio", "machine": accel["machine"], "threads": 1, "n": accel["n"],
       "kernel": accel["kernel"],
       "accel_gparam_s": accel["gparam_s"], "accel_GBps": accel["GBps"],
       "peer": ("torch %s AdamW foreach=%s" % (peer["torch"], peer["foreach"])) if peer else None,
       "peer_gparam_s": peer["gparam_s"] if peer else None,
       "ratio": round(ratio, 3) if ratio else None,
       "triad_GBps": triad["GBps"], "fraction_of_triad": round(fraction, 3),
       "fraction_of_triad_wa": round(fraction * 12 / 16, 3)}
print(json.dumps(out, separators=(",", ":")))
print()
print("# fastest step of %d rounds; AdamW counts 28 bytes/param (read p,g,m,v; write p,m,v)"
      % len(glob.glob(os.path.join(sys.argv[1], "accel.*"))))
print("# %-34s %10s %10s %10s" % ("", "ms", "Gparam/s", "GB/s"))
print("  %-34s %10.2f %10.4f %10.2f" % ("accel AdamW (%s)" % accel["kernel"], accel["time_ms"],
                                          accel["gparam_s"], accel["GBps"]))
for r in sorted(torchs, key=lambda r: r["foreach"]):
    print("  %-34s %10.2f %10.4f %10.2f" % ("torch AdamW foreach=%s" % r["foreach"],
                                              r["time_ms"], r["gparam_s"], r["GBps"]))
print("  %-34s %10.2f %10s %10.2f" % ("triad (12 B/elem, STREAM)", triad["time_ms"], "-",
                                        triad["GBps"]))
print("  %-34s %10.2f %10s %10.2f" % ("triad (16 B/elem, write-allocate)", triad["time_ms"],
                                        "-", triad["GBps"] * 16 / 12))
print()
print("# %-44s %8s %8s %8s" % ("target", "value", "needed", ""))
rows = [("accel vs torch AdamW (params/s)", ratio, 3.0),
        ("accel bytes/s as a fraction of the triad's", fraction, 0.6),
        ("  the same, triad with write-allocate", fraction * 12 / 16, 0.6)]
for name, v, need in rows:
    verdict = "-" if v is None else ("met" if v >= need else "MISSED")
    print("  %-44s %8s %8.2f %8s" % (name, "-" if v is None else "%.2f" % v, need, verdict))
EOF
