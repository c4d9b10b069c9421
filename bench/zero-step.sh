#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/zero-step.sh: the step time of examples/train_mlp under the zero
# strategy's stages 1, 2 and 3 next to ddp, in one run on one machine, same
# model, same batch, same configuration but for the strategy:
#
#   ddp    examples/configs/ddp.json    (buckets all-reduced, replicated
#                                        optimizer state)
#   zero1  examples/configs/zero1.json  (optimizer state partitioned)
#   zero2  examples/configs/zero2.json  (gradients partitioned too)
#   zero3  examples/configs/zero3.json  (parameters partitioned too,
#                                        gathered per unit with prefetch)
#
# The four files differ only in "strategy" and its section (ddp /
# zero_optimization); the script checks that before it starts.  Each run is
# `accel launch -n NP --config FILE --set backend=BACKEND -- train_mlp`,
# BATCH samples per rank and step (--batch-size NP*BATCH), one thread per
# process (OMP_NUM_THREADS=1), WARMUP untimed steps, then STEPS timed ones;
# ms_per_step is rank 0's wall time per optimizer step (the ranks run in
# lock-step).
#
# The four runs take turns, REPEATS rounds, so a busy machine slows them
# alike.  Prints every run's JSON line (with "round"), per run the median
# and range over the rounds ({"bench":"zero-step-summary",...}), then per
# stage the ratio of its step time to ddp's ({"bench":"zero-step-ratio",
# ...}): the ratio of the medians, and the median and range of the ratios
# of the two runs of one round (minutes apart at most), which is the
# verdict against the targets in docs/benchmarks.md: stages 1 and 2 within
# 10 % of ddp (<= 1.10), stage 3 within 30 % (<= 1.30).
#
# Usage: bench/zero-step.sh [BUILD_DIR]        (default: build)
# Environment: NP (2), BATCH (128, per rank), STEPS (50), WARMUP (5),
#   REPEATS (3), HIDDEN (1024), LAYERS (2), BACKEND (shm), CONFIGS
#   (examples/configs), RUNS ("ddp zero1 zero2 zero3"), MLP_ARGS (more
#   train_mlp options), SET (more --set KEY=VALUE for every run, e.g.
#   "--set gradient_accumulation_steps=1"), PYTHON (/usr/bin/python3).
set -eu

BUILD=${1:-build}
NP=${NP:-2}
BATCH=${BATCH:-128}
STEPS=${STEPS:-50}
WARMUP=${WARMUP:-5}
REPEATS=${REPEATS:-3}
HIDDEN=${HIDDEN:-1024}
LAYERS=${LAYERS:-2}
BACKEND=${BACKEND:-shm}
RUNS=${RUNS:-ddp zero1 zero2 zero3}
MLP_ARGS=${MLP_ARGS:-}
SET=${SET:-}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
CONFIGS=${CONFIGS:-$HERE/../examples/configs}

ACCEL=$BUILD/cli/accel
TRAIN=$BUILD/examples/train_mlp
if [ ! -x "$TRAIN" ] || [ ! -x "$ACCEL" ]; then
	echo "zero-step: $TRAIN or $ACCEL not found; build first (ninja -C $BUILD)" >&2
	exit 2
fi
for r in $RUNS; do
	if [ ! -f "$CONFIGS/$r.json" ]; then
		echo "zero-step: $CONFIGS/$r.json not found (the zero plugin's example configs;" \
			"CONFIGS names their directory)" >&2
		exit 2
	fi
done
# Like for like: the configs may differ in the strategy and its section only.
"$PYTHON" - "$CONFIGS" $RUNS <<'EOF' || exit 2
import json, sys
d = sys.argv[1]
base = None
for name in sys.argv[2:]:
    c = json.load(open("%s/%s.json" % (d, name)))
    for k in ("strategy", "ddp", "zero_optimization"):
        c.pop(k, None)
    if base is None:
        base, first = c, name
    elif c != base:
        keys = sorted(k for k in set(c) | set(base) if c.get(k) != base.get(k))
        sys.exit("zero-step: %s/%s.json and %s.json differ in more than the strategy: %s"
                 % (d, name, first, ", ".join(keys)))
EOF
if [ -z "${ACCEL_PLUGIN_PATH:-}" ]; then
	ACCEL_PLUGIN_PATH=$(find "$BUILD/backends" "$BUILD/plugins" -name '*.so' 2>/dev/null |
		sed 's|/[^/]*$||' | sort -u | paste -sd: -)
	export ACCEL_PLUGIN_PATH
fi
export OMP_NUM_THREADS=1

# train_mlp options: timing only (no evaluation, no held-out set, one
# progress line at the end), as bench/train-peers.sh.
MLP="--steps $STEPS --warmup $WARMUP --hidden $HIDDEN --layers $LAYERS --test-samples 0
     --no-eval --json --log-every 100000000"

OUT=$(mktemp -d "${TMPDIR:-/tmp}/zero-step.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

echo "# zero-step: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $(nproc --all)" \
	"($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$ACCEL" --version 2>/dev/null | head -1)"
echo "# NP=$NP BATCH=$BATCH (per rank) STEPS=$STEPS WARMUP=$WARMUP REPEATS=$REPEATS" \
	"HIDDEN=$HIDDEN LAYERS=$LAYERS BACKEND=$BACKEND RUNS='$RUNS' SET='$SET' MLP_ARGS='$MLP_ARGS'"

round=1
while [ "$round" -le "$REPEATS" ]; do
	for r in $RUNS; do
		# rank 0's JSON line (the launcher prefixes "[rank R] "), with the
		# run's name and round added
		"$ACCEL" launch -n "$NP" --config "$CONFIGS/$r.json" --set "backend=$BACKEND" $SET -- \
			"$TRAIN" $MLP --batch-size $((NP * BATCH)) $MLP_ARGS >"$OUT/raw" 2>"$OUT/err" || {
			echo "zero-step: $r failed (round $round):" >&2
			tail -20 "$OUT/err" "$OUT/raw" >&2
			exit 1
		}
		sed -n 's/^\[rank 0\] //; /^{"bench"/s/}$/,"run":"'"$r"'","round":'"$round"'}/p' \
			<"$OUT/raw" >"$OUT/$r.$round"
		if [ ! -s "$OUT/$r.$round" ]; then
			echo "zero-step: $r printed no JSON line (round $round)" >&2
			tail -20 "$OUT/raw" >&2
			exit 1
		fi
		cat "$OUT/$r.$round"
	done
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" "$NP" $RUNS <<'EOF'
import glob, json, os, statistics, sys

out, np_, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}  # name -> {round: row}
for path in glob.glob(os.path.join(out, "*.[0-9]*")):
    name, rnd = os.path.basename(path).rsplit(".", 1)
    with open(path) as f:
        for line in f:
            rows.setdefault(name, {})[int(rnd)] = json.loads(line)

med, cpu = {}, {}
for n in names:
    ms = [r["ms_per_step"] for r in rows.get(n, {}).values()]
    if not ms:
        continue
    med[n] = statistics.median(ms)
    line = {"bench": "zero-step-summary", "run": n, "world": np_, "runs": len(ms),
            "ms_per_step": round(med[n], 2), "ms_min": round(min(ms), 2),
            "ms_max": round(max(ms), 2)}
    for k in ("ms_forward", "ms_backward", "ms_step", "cpu_ms_per_step"):
        vals = [r[k] for r in rows[n].values() if k in r]
        if vals:
            line[k] = round(statistics.median(vals), 2)
    cpu[n] = line.get("cpu_ms_per_step")
    print(json.dumps(line, separators=(",", ":")))

targets = {"zero1": 1.10, "zero2": 1.10, "zero3": 1.30}
lines = []
for n in names:
    if n == "ddp" or n not in med or "ddp" not in med:
        continue
    paired = sorted(rows[n][k]["ms_per_step"] / rows["ddp"][k]["ms_per_step"]
                    for k in rows[n] if k in rows["ddp"])
    pr = statistics.median(paired)
    need = targets.get(n)
    line = {"bench": "zero-step-ratio", "run": n, "peer": "ddp", "world": np_,
            "ratio_of_medians": round(med[n] / med["ddp"], 3),
            "per_round_median": round(pr, 3), "per_round_min": round(paired[0], 3),
            "per_round_max": round(paired[-1], 3), "rounds": len(paired),
            "rounds_met": sum(x <= need for x in paired) if need else None,
            # for information: rank 0's CPU time per step (all its threads),
            # less sensitive to other load than wall time, blind to waiting
            "cpu_ratio_of_medians": round(cpu[n] / cpu["ddp"], 3)
            if cpu.get(n) and cpu.get("ddp") else None,
            "target": "<= %g" % need if need else None,
            "met": pr <= need if need else None}
    print(json.dumps(line, separators=(",", ":")))
    lines.append(line)
print()
print("# step time, median over rounds (ms); ratio = run / ddp, median of the rounds' ratios;")
print("# cpu = rank 0's CPU ms per step (median), for information")
print("# %-8s %10s %10s %10s %9s %8s %14s %8s" % ("run", "ms/step", "min", "max", "ratio",
                                                  "rounds", "target", "cpu"))
for n in names:
    if n not in med:
        continue
    l = next((x for x in lines if x["run"] == n), None)
    ms = [r["ms_per_step"] for r in rows[n].values()]
    print("  %-8s %10.2f %10.2f %10.2f %9s %8s %14s %8s" % (
        n, med[n], min(ms), max(ms), "%.3f" % l["per_round_median"] if l else "-",
        "%d/%d" % (l["rounds_met"], l["rounds"]) if l and l["target"] else "-",
        ("%s %s" % (l["target"], "met" if l["met"] else "MISSED")) if l and l["target"] else "-",
        "%.1f" % cpu[n] if cpu.get(n) else "-"))
EOF
