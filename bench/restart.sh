#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/restart.sh: what a rank's death costs examples/train_mlp at 2 ranks
# (docs/benchmarks.md, "Automatic restart"): the seconds from the death to
# the first optimizer step done again, and the steps lost, with
#   auto:   accel launch --max-restarts 1 (detection, stopping the other
#           rank, the restart, the checkpoint load, one step);
#   manual: accel launch without restarts, then at once a second accel
#           launch with --resume latest (what a script that watches the
#           exit status does; no human delay counted).
# Rank 1 kills itself (SIGKILL) after step DIE; checkpoints every EVERY
# steps, so DIE mod EVERY steps are lost.  Every output line is stamped on
# arrival (python3); the death is the stamp of train_mlp's --die-at line,
# "training again" the stamp of the first progress line after the resume.
# ROUNDS runs of each; the median and the range are printed.
#
# Usage: sh bench/restart.sh [BUILD_DIR]          (default: build)
# Environment: ROUNDS (3), STEPS (40), EVERY (10), DIE (25), ARGS (more
#   train_mlp options; default: its own model, 784-1024-1024-10).
set -eu

BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-40}
EVERY=${EVERY:-10}
DIE=${DIE:-25}
A=$BUILD/cli/accel
T=$BUILD/examples/train_mlp
[ -x "$A" ] && [ -x "$T" ] || { echo "bench/restart.sh: build $BUILD first" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench/restart.sh: needs python3" >&2; exit 2; }
A=$(cd "$(dirname "$A")" && pwd)/accel
T=$(cd "$(dirname "$T")" && pwd)/train_mlp
export ACCEL_PLUGIN_PATH="${ACCEL_PLUGIN_PATH:-$(cd "$BUILD" && pwd)/plugins/ddp:$(cd "$BUILD" && pwd)/backends/shm}"
unset ACCEL_CONFIG
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-bench-restart-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp"

stamp() {
	python3 -u -c 'import sys, time
for line in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), line))'
}
F="--steps $STEPS --checkpoint-every $EVERY --log-every 1 --no-eval --test-samples 0 ${ARGS:-}"

# seconds from the death to the first step line after "resumed from"
gap() {
	awk '/--die-at/ && !d { d = $1 }
	     /resumed from/ { r = 1 }
	     r && d && / step[s]? / && /loss/ && !t { t = $1 }
	     END { if (!d || !t) exit 1; printf "%.2f\n", t - d }' "$1"
}
lost() {
	sed -n 's/.*; \([0-9]*\) steps\{0,1\} lost.*/\1/p' "$1" | head -1
}

: >auto.txt
: >manual.txt
for r in $(seq "$ROUNDS"); do
	rm -rf p m marker
	"$A" launch -n 2 --max-restarts 1 -- "$T" $F --project-dir p --die-at "1:$DIE:marker" \
		2>&1 | stamp >auto.log
	g=$(gap auto.log) || { cat auto.log; echo "bench/restart.sh: auto: no figures" >&2; exit 1; }
	echo "$g $(lost auto.log)" >>auto.txt
	rm -f marker
	{ "$A" launch -n 2 -- "$T" $F --project-dir m --die-at "1:$DIE:marker" 2>&1 || true
	  "$A" launch -n 2 -- "$T" $F --project-dir m --resume latest 2>&1; } | stamp >manual.log
	g=$(gap manual.log) || { cat manual.log; echo "bench/restart.sh: manual: no figures" >&2; exit 1; }
	echo "$g $((DIE - DIE / EVERY * EVERY))" >>manual.txt
	echo "round $r: auto $(cat auto.txt | tail -1) manual $(tail -1 manual.txt)" >&2
done
step=$(awk '/ step[s]? / && /loss/ { if (p) { s += $1 - p; n++ } p = $1 } END { if (n) printf "%.3f", s / n }' auto.log)
for k in auto manual; do
	sort -n "$k.txt" | awk -v k="$k" -v step="$step" '{ g[NR] = $1; l = $2 }
		END { printf "%-6s death -> training again: median %.2f s (range %.2f..%.2f, %d runs); steps lost %s; one step %.3f s\n",
		      k, g[int((NR + 1) / 2)], g[1], g[NR], NR, l, step }'
done
