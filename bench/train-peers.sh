#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/train-peers.sh: examples/train_mlp next to PyTorch DDP, in one run on
# one machine, same model and step:
#
#   pytorch-ddp  bench/torch_ddp_mlp.py: torch.nn.Linear MLP, mean
#                cross-entropy, AdamW, DistributedDataParallel over gloo,
#                NP processes
#   accel        `accel launch -n NP -- train_mlp` (strategy ddp, backend
#                shm, AdamW), NP processes
#   accel        train_mlp on one process (the scaling baseline)
#   accel-1xN    NP independent one-process train_mlp runs at the same time
#                (no communication): what the machine's shared cores, caches
#                and memory bandwidth alone cost against one process
#
# Every rank gets BATCH samples per step (train_mlp's --batch-size is the
# global batch, so it gets NP*BATCH), one thread per process
# (OMP_NUM_THREADS=1), 784-HIDDEN-...-10 with LAYERS hidden layers, AdamW
# with lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01. Each run
# takes WARMUP untimed steps, then times STEPS steps; ms_per_step is wall time
# per step on rank 0 (the ranks run in lock-step), samples_per_s counts the
# global batch.
#
# The three runs take turns, REPEATS rounds, so a busy machine slows them
# alike. Prints every run's JSON line (with "round"), then per
# implementation the median and the range over the rounds
# ({"bench":"train_mlp-summary",...}), then the ratio lines against the
# targets in docs/benchmarks.md ({"bench":"train_mlp-ratio",...}):
#   accel NP-rank samples/s / PyTorch NP-rank samples/s   (target >= 1.25)
#   accel NP-rank step time / accel 1-rank step time      (target <= 1.25)
# each from the medians, and also the median and range of the per-round
# ratios; then the same two on CPU time per step (cpu_*: informational,
# they do not see time spent waiting).
#
# Usage: bench/train-peers.sh [BUILD_DIR]        (default: build)
# Environment: NP (2), BATCH (128, per rank), STEPS (100), WARMUP (10),
#   REPEATS (5), HIDDEN (1024), LAYERS (2), PYTHON (/usr/bin/python3),
#   SKIP (space-separated runs to leave out: pytorch accel accel-1 accel-1xN),
#   MLP_ARGS (more train_mlp options, e.g. "--set ddp.bucket_cap_mb=4"),
#   QUIET_WAIT (0: before each run, wait up to this many seconds for a second
#   in which the rest of the machine uses less than QUIET_MAX (0.2) CPUs).
#   NICE (none: run each benchmark in a session of its own at this nice
#   level, e.g. -10 as root, so that other work on a shared machine takes
#   less of its CPU time; the session's scheduler autogroup gets the level
#   too, where the kernel has autogroups).
# Every run's line carries "others_cpus": the CPUs the rest of the machine
# used on average during the run (from /proc/stat, less the run's own CPU
# time), and "contention": the part of it that did not fit on the CPUs the
# run's processes left free, so runs slowed by other work can be told apart;
# the summaries are given over all runs and over the quiet ones (contention
# <= QUIET_MAX).
set -eu

BUILD=${1:-build}
NP=${NP:-2}
BATCH=${BATCH:-128}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-10}
REPEATS=${REPEATS:-5}
HIDDEN=${HIDDEN:-1024}
LAYERS=${LAYERS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
SKIP=${SKIP:-}
MLP_ARGS=${MLP_ARGS:-}
QUIET_WAIT=${QUIET_WAIT:-0}
QUIET_MAX=${QUIET_MAX:-0.2}
NICE=${NICE:-}
NICE_CMD=${NICE:+setsid -w}
HERE=$(cd "$(dirname "$0")" && pwd)
SELF=$HERE/$(basename "$0")
TICKS=$(getconf CLK_TCK)

ACCEL=$BUILD/cli/accel
TRAIN=$BUILD/examples/train_mlp
skipped() {
	case " $SKIP " in *" $1 "*) return 0 ;; esac
	return 1
}

if [ ! -x "$TRAIN" ] || [ ! -x "$ACCEL" ]; then
	echo "train-peers: $TRAIN or $ACCEL not found; build first (ninja -C $BUILD)" >&2
	exit 2
fi
if [ -z "${ACCEL_PLUGIN_PATH:-}" ]; then
	ACCEL_PLUGIN_PATH=$(find "$BUILD/backends" "$BUILD/plugins" -name '*.so' 2>/dev/null |
		sed 's|/[^/]*$||' | sort -u | paste -sd: -)
	export ACCEL_PLUGIN_PATH
fi
CPUS=$(nproc --all)   # before OMP_NUM_THREADS, which nproc obeys
export OMP_NUM_THREADS=1

# train_mlp options: timing only (no evaluation, no held-out set, one
# progress line at the end).
MLP="--steps $STEPS --warmup $WARMUP --hidden $HIDDEN --layers $LAYERS --test-samples 0
     --no-eval --json --log-every 100000000"

# One run, its output on stdout (the script calls itself under
# /usr/bin/time to get the CPU time of all the run's processes).
run1() {
	case $1 in
	pytorch)
		"$PYTHON" "$HERE/torch_ddp_mlp.py" --world "$NP" --batch "$BATCH" --steps "$STEPS" \
			--warmup "$WARMUP" --hidden "$HIDDEN" --layers "$LAYERS" ;;
	accel)
		"$ACCEL" launch -n "$NP" --set backend=shm --set strategy=ddp -- \
			"$TRAIN" $MLP --batch-size $((NP * BATCH)) $MLP_ARGS ;;
	accel-1)
		"$TRAIN" $MLP --batch-size "$BATCH" $MLP_ARGS ;;
	accel-1xN)
		# NP independent one-rank runs at once, no communication at all: the
		# machine's own scaling (shared cores, caches, memory bandwidth).
		i=0
		while [ "$i" -lt "$NP" ]; do
			("$TRAIN" $MLP --batch-size "$BATCH" $MLP_ARGS | sed "s/^/[rank $i] /") &
			i=$((i + 1))
		done
		wait ;;
	esac
}
if [ "${2:-}" = run1 ]; then
	if [ -n "$NICE" ]; then
		# A session of its own (setsid), whose scheduler autogroup gets the
		# nice level: with autogroups, a process's own nice level only
		# counts against processes of its session.
		echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
		renice -n "$NICE" -p $$ >/dev/null
	fi
	run1 "$3"
	exit
fi

OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-peers.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

# Rank 0's JSON line (the launcher prefixes rank output with "[rank R] "; a
# single process has no prefix), with the round number added.
keep_json() {  # $1: round
	sed -n 's/^\[rank 0\] //; /^{"bench"/s/}$/,"round":'"$1"'}/p'
}

# Busy CPU time of the whole machine in clock ticks: user, nice, system,
# irq, softirq and steal (time the hypervisor gave to someone else).
busy_ticks() {
	awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat
}

# Wait up to QUIET_WAIT seconds for one second in which the rest of the
# machine uses less than QUIET_MAX CPUs.
wait_quiet() {
	waited=0
	while [ "$waited" -lt "$QUIET_WAIT" ]; do
		b0=$(busy_ticks)
		sleep 1
		b1=$(busy_ticks)
		if awk -v d=$((b1 - b0)) -v t="$TICKS" -v m="$QUIET_MAX" 'BEGIN {exit !(d / t < m)}'; then
			return 0
		fi
		waited=$((waited + 1))
	done
}

run() {  # $1: run name, $2: round
	wait_quiet
	b0=$(busy_ticks)
	/usr/bin/time -f '%e %U %S' -o "$OUT/time" $NICE_CMD sh "$SELF" "$BUILD" run1 "$1" >"$OUT/raw" 2>"$OUT/err" ||
		{ cat "$OUT/err" "$OUT/raw" >&2; return 1; }
	b1=$(busy_ticks)
	# What the rest of the machine used meanwhile, in CPUs: all busy time
	# less this run's own (its processes' user + system time); and how much
	# of that competed with the run: what did not fit on the CPUs the run's
	# processes left free.
	procs=$NP
	[ "$1" = accel-1 ] && procs=1
	others=$(awk -v d=$((b1 - b0)) -v t="$TICKS" -v free=$((CPUS - procs)) '{
		o = (d / t - $2 - $3) / $1; if (o < 0) o = 0; c = o - free; if (c < 0) c = 0;
		printf "\"others_cpus\":%.2f,\"contention\":%.2f", o, c}' "$OUT/time")
	keep_json "$2" <"$OUT/raw" | sed 's/,"round":/,'"$others"',"round":/'
}

echo "# train-peers: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $CPUS" \
	"($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$ACCEL" --version 2>/dev/null | head -1);" \
	"torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
echo "# NP=$NP BATCH=$BATCH (per rank) STEPS=$STEPS WARMUP=$WARMUP REPEATS=$REPEATS" \
	"HIDDEN=$HIDDEN LAYERS=$LAYERS MLP_ARGS=$MLP_ARGS QUIET_WAIT=$QUIET_WAIT NICE=$NICE"

round=1
while [ "$round" -le "$REPEATS" ]; do
	for name in pytorch accel accel-1 accel-1xN; do
		skipped "$name" && continue
		run "$name" "$round" >"$OUT/$name.$round" || {
			echo "train-peers: $name failed (round $round)" >&2
			exit 1
		}
		cat "$OUT/$name.$round"
	done
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" "$NP" "$QUIET_MAX" <<'EOF'
import glob, json, os, statistics, sys

out, np_, quiet_max = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
runs = {}  # name -> {round: row}
for path in glob.glob(os.path.join(out, "*.[0-9]*")):
    name, rnd = os.path.basename(path).rsplit(".", 1)
    with open(path) as f:
        for line in f:
            runs.setdefault(name, {})[int(rnd)] = json.loads(line)
quiet = {n: {k: r for k, r in rows.items() if r.get("contention", 0) <= quiet_max}
         for n, rows in runs.items()}

def summary(name, rows, tag):
    if not rows:
        return None
    ms = [r["ms_per_step"] for r in rows.values()]
    sps = [r["samples_per_s"] for r in rows.values()]
    med = statistics.median(ms)
    first = rows[min(rows)]
    s = {"bench": "train_mlp-summary", "runs_used": tag, "run": name, "impl": first["impl"],
         "world": first["world"], "runs": len(ms),
         "ms_per_step": round(med, 2), "ms_min": round(min(ms), 2), "ms_max": round(max(ms), 2),
         "spread_pct": round(100 * (max(ms) - min(ms)) / med, 1),
         "samples_per_s": round(statistics.median(sps), 1)}
    for k in ("ms_optimizer", "ms_fwd_bwd", "ms_forward", "ms_backward", "ms_step",
              "cpu_ms_per_step", "others_cpus", "contention"):
        vals = [r[k] for r in rows.values() if k in r]
        if vals:
            s[k] = round(statistics.median(vals), 2)
    print(json.dumps(s))
    return s

def ratio(name, sums, rows, a_n, b_n, key, target, higher, tag):
    a, b = sums.get(a_n), sums.get(b_n)
    if not a or not b:
        return
    value = a[key] / b[key]
    paired = [rows[a_n][r][key] / rows[b_n][r][key] for r in rows.get(a_n, {})
              if r in rows.get(b_n, {})]
    met = value >= target if higher else value <= target
    line = {"bench": "train_mlp-ratio", "runs_used": tag, "ratio": name, "value": round(value, 3)}
    if paired:
        line.update({"per_round_median": round(statistics.median(paired), 3),
                     "per_round_min": round(min(paired), 3),
                     "per_round_max": round(max(paired), 3)})
    line.update({"target": (">= " if higher else "<= ") + str(target), "met": met})
    print(json.dumps(line))

for tag, rows in (("all", runs), (f"quiet (contention <= {quiet_max})", quiet)):
    sums = {n: summary(n, rows.get(n), tag) for n in ("pytorch", "accel", "accel-1", "accel-1xN")}
    ratio(f"accel{np_}_vs_pytorch{np_}_samples_per_s", sums, rows, "accel", "pytorch",
          "samples_per_s", 1.25, True, tag)
    ratio(f"accel{np_}_vs_accel1_step_time", sums, rows, "accel", "accel-1", "ms_per_step",
          1.25, False, tag)
    # For information: how much of that the machine itself costs (NP
    # independent one-rank runs, no communication, against one alone), and
    # what is left for communication and coordination.
    ratio(f"independent{np_}x1_vs_accel1_step_time", sums, rows, "accel-1xN", "accel-1",
          "ms_per_step", 1.25, False, tag)
    ratio(f"accel{np_}_vs_independent{np_}x1_step_time", sums, rows, "accel", "accel-1xN",
          "ms_per_step", 1.25, False, tag)
    # The same two on CPU time per step (rank 0's process, all threads): less
    # sensitive to other load than wall time, but blind to waiting.
    ratio(f"cpu_pytorch{np_}_vs_accel{np_}", sums, rows, "pytorch", "accel", "cpu_ms_per_step",
          1.25, True, tag)
    ratio(f"cpu_accel{np_}_vs_accel1", sums, rows, "accel", "accel-1", "cpu_ms_per_step",
          1.25, False, tag)
EOF
