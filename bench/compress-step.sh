#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/compress-step.sh: the step time of examples/train_mlp at NP ranks
# under ddp with the compress reduce hook (docs/compress.md), each method
# against the uncompressed run, in one run on one machine, same model,
# batch and configuration but for the hook:
#
#   none      examples/configs/ddp.json as it is (buckets all-reduced in f32)
#   fp16      + "plugins": ["compress"], compress.method fp16
#   bf16      + compress.method bf16
#   topk      + compress.method topk, ratio 0.01, start_iter 0
#   powersgd  + compress.method powersgd, matrix_approximation_rank 2,
#               start_powerSGD_iter 0
#
# Each run is `accel launch -n NP --config FILE --set backend=BACKEND --
# train_mlp`, BATCH samples per rank and step, one thread per process,
# WARMUP untimed steps, then STEPS timed ones; ms_per_step is rank 0's wall
# time per optimizer step.  The runs take turns, REPEATS rounds, so a busy
# machine slows them alike.  Prints every run's JSON line, then per method
# the median over rounds and the median of the per-round ratios to the
# uncompressed run ({"bench":"compress-step-ratio",...}).  No target: on
# one node with shared memory the bytes saved cost more to compute than
# they save to move; the figure is the cost of the computation.
#
# Usage: bench/compress-step.sh [BUILD_DIR]        (default: build)
# Environment: NP (2), BATCH (128), STEPS (30), WARMUP (5), REPEATS (3),
#   HIDDEN (1024), LAYERS (2), BACKEND (shm), RUNS ("none fp16 bf16 topk
#   powersgd"), PYTHON (/usr/bin/python3).
set -eu

BUILD=${1:-build}
NP=${NP:-2}
BATCH=${BATCH:-128}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
REPEATS=${REPEATS:-3}
HIDDEN=${HIDDEN:-1024}
LAYERS=${LAYERS:-2}
BACKEND=${BACKEND:-shm}
RUNS=${RUNS:-none fp16 bf16 topk powersgd}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)

ACCEL=$BUILD/cli/accel
TRAIN=$BUILD/examples/train_mlp
if [ ! -x "$TRAIN" ] || [ ! -x "$ACCEL" ]; then
	echo "compress-step: $TRAIN or $ACCEL not found; build first (ninja -C $BUILD)" >&2
	exit 2
fi
if [ -z "${ACCEL_PLUGIN_PATH:-}" ]; then
	ACCEL_PLUGIN_PATH=$(find "$BUILD/backends" "$BUILD/plugins" -name '*.so' 2>/dev/null |
		sed 's|/[^/]*$||' | sort -u | paste -sd: -)
	export ACCEL_PLUGIN_PATH
fi
export OMP_NUM_THREADS=1

OUT=$(mktemp -d "${TMPDIR:-/tmp}/compress-step.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

# one config per method: ddp.json plus the hook
"$PYTHON" - "$HERE/../examples/configs/ddp.json" "$OUT" <<'EOF2' || exit 2
import json, sys
base = json.load(open(sys.argv[1]))
hook = {
    "fp16": {"method": "fp16"},
    "bf16": {"method": "bf16"},
    "topk": {"method": "topk", "ratio": 0.01, "start_iter": 0},
    "powersgd": {"method": "powersgd", "matrix_approximation_rank": 2,
                 "start_powerSGD_iter": 0},
}
json.dump(base, open("%s/none.json" % sys.argv[2], "w"))
for name, section in hook.items():
    c = dict(base)
    c["plugins"] = ["compress"]
    c["compress"] = section
    json.dump(c, open("%s/%s.json" % (sys.argv[2], name), "w"))
EOF2

MLP="--steps $STEPS --warmup $WARMUP --hidden $HIDDEN --layers $LAYERS --test-samples 0
     --no-eval --json --log-every 100000000"

echo "# compress-step: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $(nproc --all)" \
	"($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# NP=$NP BATCH=$BATCH (per rank) STEPS=$STEPS WARMUP=$WARMUP REPEATS=$REPEATS" \
	"HIDDEN=$HIDDEN LAYERS=$LAYERS BACKEND=$BACKEND RUNS='$RUNS'"

round=1
while [ "$round" -le "$REPEATS" ]; do
	for r in $RUNS; do
		"$ACCEL" launch -n "$NP" --config "$OUT/$r.json" --set "backend=$BACKEND" -- \
			"$TRAIN" $MLP --batch-size $((NP * BATCH)) >"$OUT/raw" 2>"$OUT/err" || {
			echo "compress-step: $r failed (round $round):" >&2
			tail -20 "$OUT/err" "$OUT/raw" >&2
			exit 1
		}
		sed -n 's/^\[rank 0\] //; /^{"bench"/s/}$/,"run":"'"$r"'","round":'"$round"'}/p' \
			<"$OUT/raw" >"$OUT/$r.$round"
		if [ ! -s "$OUT/$r.$round" ]; then
			echo "compress-step: $r printed no JSON line (round $round)" >&2
			tail -20 "$OUT/raw" >&2
			exit 1
		fi
		cat "$OUT/$r.$round"
	done
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" "$NP" $RUNS <<'EOF2'
import glob, json, os, statistics, sys
out, np_, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for path in glob.glob(os.path.join(out, "*.[0-9]*")):
    name, rnd = os.path.basename(path).rsplit(".", 1)
    if not rnd.isdigit():
        continue
    with open(path) as f:
        for line in f:
            rows.setdefault(name, {})[int(rnd)] = json.loads(line)
med = {n: statistics.median(r["ms_per_step"] for r in rows[n].values()) for n in names if n in rows}
print("# %-9s %10s %10s %10s %9s" % ("run", "ms/step", "min", "max", "vs none"))
for n in names:
    if n not in med:
        continue
    ms = [r["ms_per_step"] for r in rows[n].values()]
    ratio = None
    if n != "none" and "none" in rows:
        paired = sorted(rows[n][k]["ms_per_step"] / rows["none"][k]["ms_per_step"]
                        for k in rows[n] if k in rows["none"])
        ratio = statistics.median(paired)
        print(json.dumps({"bench": "compress-step-ratio", "run": n, "peer": "none",
                          "world": np_, "ms_per_step": round(med[n], 2),
                          "peer_ms_per_step": round(med["none"], 2),
                          "per_round_median": round(ratio, 3),
                          "per_round_min": round(paired[0], 3),
                          "per_round_max": round(paired[-1], 3)}, separators=(",", ":")))
    print("  %-9s %10.2f %10.2f %10.2f %9s" % (n, med[n], min(ms), max(ms),
                                              "%.3f" % ratio if ratio else "-"))
EOF2
