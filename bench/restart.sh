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

# seconds from the death to the first step line after "resumed from", and
# the part of it until the "resumed from" line (detection, stopping the
# other rank, starting the job again, the checkpoint load)
gap() {
	awk '/--die-at/ && !d { d = $1 }
	     /resumed from/ && !r { r = $1 }
	     r && d && / step[s]? / && /loss/ && !t { t = $1 }
	     END { if (!d || !t) exit 1; printf "%.2f %.2f\n", t - d, r - d }' "$1"
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
# the median time of one step (between consecutive step lines of rank 0)
step=$(awk '/\[rank 0\] step / && /loss/ { if (p) print $1 - p; p = $1 }' auto.log | sort -n |
	awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", v[int((NR + 1) / 2)] }')
for k in auto manual; do
	sort -n "$k.txt" | awk -v k="$k" -v step="$step" '{ g[NR] = $1; r[NR] = $2; l = $3 }
		END { printf "%-6s death -> training again: median %.2f s (range %.2f..%.2f, %d runs), of which until resumed %.2f s; steps lost %s; one step %s s\n",
		      k, g[int((NR + 1) / 2)], g[1], g[NR], NR, r[int((NR + 1) / 2)], l, step }'
done
