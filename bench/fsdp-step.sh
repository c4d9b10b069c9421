#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/fsdp-step.sh: the step time of examples/train_mlp under the fsdp
# strategy's FULL_SHARD, SHARD_GRAD_OP and NO_SHARD next to ddp, in one run,
# same model, batch and configuration but for the strategy: each config is
# examples/configs/ddp.json with "strategy" and its section replaced
# (fsdp: UNIT_WRAP, BACKWARD_PRE, the defaults).  Each run is `accel launch
# -n NP --config FILE --set backend=BACKEND -- train_mlp --json`, BATCH
# samples per rank and step, one thread per process, WARMUP untimed steps,
# then STEPS timed ones; ms_per_step is rank 0's wall time per optimizer step.
# The runs take turns for REPEATS rounds; the verdict per strategy is the
# median over rounds of its step time divided by ddp's in the same round
# (target for NO_SHARD, issue 27: within 5 % of ddp, <= 1.05).
#
# Usage: bench/fsdp-step.sh [BUILD_DIR]        (default: build)
# Environment: NP (2), BATCH (128), STEPS (30), WARMUP (5), REPEATS (3),
#   HIDDEN (1024), LAYERS (2), BACKEND (shm), PYTHON (python3).
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
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
ACCEL=$BUILD/cli/accel
TRAIN=$BUILD/examples/train_mlp
[ -x "$TRAIN" ] && [ -x "$ACCEL" ] ||
	{ echo "fsdp-step: $TRAIN or $ACCEL not found; build first (ninja -C $BUILD)" >&2; exit 2; }
if [ -z "${ACCEL_PLUGIN_PATH:-}" ]; then
	ACCEL_PLUGIN_PATH=$(find "$BUILD/backends" "$BUILD/plugins" -name '*.so' 2>/dev/null |
		sed 's|/[^/]*$||' | sort -u | paste -sd: -)
	export ACCEL_PLUGIN_PATH
fi
export OMP_NUM_THREADS=1
OUT=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-step.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
RUNS="ddp FULL_SHARD SHARD_GRAD_OP NO_SHARD"
"$PYTHON" - "$HERE/../examples/configs/ddp.json" "$OUT" $RUNS <<'EOF'
import json, sys
base = json.load(open(sys.argv[1]))
for run in sys.argv[3:]:
    c = dict(base)
    if run != "ddp":
        c.pop("ddp", None)
        c["strategy"] = "fsdp"
        c["fsdp"] = {"sharding_strategy": run}
    json.dump(c, open("%s/%s.json" % (sys.argv[2], run), "w"))
EOF
MLP="--steps $STEPS --warmup $WARMUP --hidden $HIDDEN --layers $LAYERS --test-samples 0
     --no-eval --json --log-every 100000000 --batch-size $((NP * BATCH))"
echo "# fsdp-step: $(date -u +%Y-%m-%dT%H:%M:%SZ) cpus $(nproc --all) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# NP=$NP BATCH=$BATCH STEPS=$STEPS WARMUP=$WARMUP REPEATS=$REPEATS HIDDEN=$HIDDEN LAYERS=$LAYERS BACKEND=$BACKEND"
round=1
while [ "$round" -le "$REPEATS" ]; do
	for r in $RUNS; do
		"$ACCEL" launch -n "$NP" --config "$OUT/$r.json" --set "backend=$BACKEND" -- \
			"$TRAIN" $MLP > "$OUT/raw" 2> "$OUT/err" ||
			{ echo "fsdp-step: $r failed (round $round):" >&2; tail -20 "$OUT/err" >&2; exit 1; }
		sed -n 's/^\[rank 0\] //; /^{"bench"/s/}$/,"run":"'"$r"'","round":'"$round"'}/p' \
			< "$OUT/raw" | tee -a "$OUT/all.jsonl"
	done
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" - "$OUT/all.jsonl" $RUNS <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["run"], {})[r["round"]] = r
print("# %-14s %9s %14s %22s %9s" % ("run", "ms/step", "(range)", "step/ddp median (range)", "cpu ms"))
for n in sys.argv[2:]:
    ms = [r["ms_per_step"] for r in by[n].values()]
    cpu = [r["cpu_ms_per_step"] for r in by[n].values() if "cpu_ms_per_step" in r]
    rat = sorted(by[n][k]["ms_per_step"] / by["ddp"][k]["ms_per_step"] for k in by[n])
    print("  %-14s %9.1f %14s %22s %9s" % (
        n, statistics.median(ms), "(%.0f-%.0f)" % (min(ms), max(ms)),
        "-" if n == "ddp" else "%.2f (%.2f-%.2f)" % (statistics.median(rat), rat[0], rat[-1]),
        "%.1f" % statistics.median(cpu) if cpu else "-"))
EOF
