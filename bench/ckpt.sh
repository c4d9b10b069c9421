#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/ckpt.sh: accel_save_state / accel_load_state bandwidth next to a raw
# sequential write (+ fsync) and read of the same bytes, in the same runs
# (bench/ckpt.c: one process, or P processes under accel launch, each
# writing and reading its share), on a model of TENSORS f32 parameters of
# MB MiB in all with AdamW state (the checkpoint holds 4 x MB: weights,
# f32 masters, two state arrays).  ROUNDS runs; the summary gives the best
# and the median of each figure and both ratios (best over best, median
# over median: a disk whose write speed swings from round to round makes
# best-over-best pessimistic), and the median of the rounds' own ratios.
# Odd rounds time the save first, even rounds the raw peers first; every
# timed phase starts after a sync() and SETTLE seconds (default 2: this
# machine's virtual disk writes a burst fast, then slowly while its host
# drains it, which made whichever phase ran second look slow).
#
# Usage: sh bench/ckpt.sh [BUILD_DIR]          (default: build)
# Environment: DIR (a directory on the disk to measure; default a new one
#   under TMPDIR), MB (64), TENSORS (16), P (1), ROUNDS (3), SETTLE (2).
# Goal (docs/benchmarks.md): save and load >= 70% of raw.
set -eu

BUILD=${1:-build}
MB=${MB:-64}
TENSORS=${TENSORS:-16}
P=${P:-1}
ROUNDS=${ROUNDS:-3}
B=$BUILD/bench/bench-ckpt
[ -x "$B" ] || { echo "bench/ckpt.sh: $B not built (ninja -C $BUILD)" >&2; exit 2; }
own=0
if [ -z "${DIR:-}" ]; then
	DIR=$(mktemp -d "${TMPDIR:-/tmp}/accel-bench-ckpt-XXXXXX")
	own=1
fi
out=$(mktemp "${TMPDIR:-/tmp}/accel-bench-ckpt-out-XXXXXX")
trap 'rm -f "$out"; [ "$own" = 0 ] || rm -rf "$DIR"' EXIT INT TERM
export ACCEL_PLUGIN_PATH="${ACCEL_PLUGIN_PATH:-$BUILD/plugins/ddp:$BUILD/backends/shm}"

for r in $(seq "$ROUNDS"); do
	rm -rf "$DIR/ckpt"
	# odd rounds time the save first, even ones the raw peers first
	order=save-first
	[ $((r % 2)) = 1 ] || order=raw-first
	if [ "$P" = 1 ]; then
		"$B" "$DIR" "$MB" "$TENSORS" adamw "$order"
	else
		"$BUILD/cli/accel" launch -n "$P" -- "$B" "$DIR" "$MB" "$TENSORS" adamw "$order" |
			sed 's/^\[rank 0\] //'
	fi | tee -a "$out"
done
rm -rf "$DIR/ckpt"
python3 - "$out" <<'EOF'
import json, sys
import statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = ("save_gbs", "load_gbs", "raw_write_gbs", "raw_read_gbs")
best = {k: max(r[k] for r in rows) for k in keys}
med = {k: statistics.median(r[k] for r in rows) for k in keys}
s, l = best["save_gbs"] / best["raw_write_gbs"], best["load_gbs"] / best["raw_read_gbs"]
ms, ml = med["save_gbs"] / med["raw_write_gbs"], med["load_gbs"] / med["raw_read_gbs"]
print(json.dumps({"bench": "ckpt-summary", "processes": rows[0]["processes"],
                  "bytes": rows[0]["bytes"], "rounds": len(rows),
                  **{"best_" + k: round(v, 3) for k, v in best.items()},
                  **{"median_" + k: round(v, 3) for k, v in med.items()},
                  "save_vs_raw_best": round(s, 3), "load_vs_raw_best": round(l, 3),
                  "save_vs_raw_median": round(ms, 3), "load_vs_raw_median": round(ml, 3),
                  "save_vs_raw_round_median": round(statistics.median(
                      r["save_gbs"] / r["raw_write_gbs"] for r in rows), 3),
                  "load_vs_raw_round_median": round(statistics.median(
                      r["load_gbs"] / r["raw_read_gbs"] for r in rows), 3)}))
print("save %.0f%% (median %.0f%%) of raw write, load %.0f%% (median %.0f%%) of raw read "
      "(goal: >= 70%% each)" % (100 * s, 100 * ms, 100 * l, 100 * ml))
EOF
