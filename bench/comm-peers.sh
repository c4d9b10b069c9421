#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/comm-peers.sh: accel's collectives next to their peers, in one run on
# one machine, with the same sizes and the same method (bench/comm-bench.h):
#
#   accel   `accel launch -n NP -- accel bench comm` with backend shm, on user
#           buffers and on the backend's own (shared-memory) buffers
#   openmpi bench/mpi_allreduce under mpirun: MPI_Allreduce,
#           MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast
#   gloo    bench/gloo_allreduce.py: torch.distributed with the gloo backend
#   accel-mpi  (for information, no target) accel's own mpi backend through
#           the core under mpirun, next to the Open MPI calls it makes
#   floor   bench/memfloor: NP threads with direct access to every buffer
#           move exactly the bytes an all-reduce / all-gather must move, no
#           synchronisation: a lower bound on this machine for any
#           shared-memory implementation (all-reduce and all-gather only;
#           out of place like the others)
#
# Prints every peer's JSON lines, then one ratio line per op and size
# ({"bench":"comm-ratio",...}: peer time / accel time, so > 1 means accel is
# faster), then a summary table against the targets in docs/benchmarks.md.
#
# Usage: bench/comm-peers.sh [BUILD_DIR]        (default: build)
# Environment: NP (ranks, 2), OPS (all), MIN_BYTES (8), MAX_BYTES (64M),
#   ITERS (20), WARMUP (5), ROUNDS (1: with more, every peer runs ROUNDS
#   times, alternating, and each keeps its fastest time per size, which
#   evens out a noisy machine for all peers alike), BACKEND (shm),
#   MPI_PEER_ARGS (extra mpirun arguments for the openmpi peer, e.g. to force
#   a collective algorithm: "--mca coll_tuned_use_dynamic_rules 1 --mca
#   coll_tuned_allreduce_algorithm 4"), PYTHON (/usr/bin/python3), SKIP (space-separated peers to leave out:
#   accel-user accel-backend accel-mpi openmpi gloo floor).
set -eu

BUILD=${1:-build}
NP=${NP:-2}
OPS=${OPS:-all}
MIN_BYTES=${MIN_BYTES:-8}
MAX_BYTES=${MAX_BYTES:-64M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-1}
BACKEND=${BACKEND:-shm}
PYTHON=${PYTHON:-/usr/bin/python3}
SKIP=${SKIP:-}
MPI_PEER_ARGS=${MPI_PEER_ARGS:-}
HERE=$(cd "$(dirname "$0")" && pwd)

ACCEL=$BUILD/cli/accel
MPIBENCH=$BUILD/bench/mpi_allreduce
FLOOR=$BUILD/bench/memfloor
skipped() {
	case " $SKIP " in *" $1 "*) return 0 ;; esac
	return 1
}

if [ ! -x "$ACCEL" ] && ! { skipped accel-user && skipped accel-backend; }; then
	echo "comm-peers: $ACCEL not found; build first (ninja -C $BUILD)" >&2
	exit 2
fi
if [ -z "${ACCEL_PLUGIN_PATH:-}" ]; then
	ACCEL_PLUGIN_PATH=$(find "$BUILD/backends" "$BUILD/plugins" -name '*.so' 2>/dev/null |
		sed 's|/[^/]*$||' | sort -u | paste -sd: -)
	export ACCEL_PLUGIN_PATH
fi

OUT=$(mktemp -d "${TMPDIR:-/tmp}/comm-peers.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

COMMON="--op $OPS --min-bytes $MIN_BYTES --max-bytes $MAX_BYTES --iters $ITERS --warmup $WARMUP --json"

# JSON lines only (the launcher prefixes rank output with "[rank R] ").
keep_json() {
	sed -n 's/^\[rank [0-9]*\] //; /^{"bench"/p'
}

# Each run writes its raw output to $OUT/raw (status kept: sh has no
# pipefail), then the JSON lines go to stdout.
run_accel() {  # $1: user|backend
	"$ACCEL" launch -n "$NP" --set "backend=$BACKEND" -- \
		"$ACCEL" bench comm $COMMON --buffers "$1" >"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

# accel's mpi backend through the core, under mpirun (the core still joins
# its rendezvous store there, hence the address).
run_accel_mpi() {
	if ! command -v mpirun >/dev/null 2>&1; then
		echo "comm-peers: no mpirun; accel-mpi skipped" >&2
		return 0
	fi
	port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	mpirun --allow-run-as-root --oversubscribe -n "$NP" -x ACCEL_PLUGIN_PATH \
		-x ACCEL_MASTER_ADDR=127.0.0.1 -x ACCEL_MASTER_PORT="$port" \
		"$ACCEL" bench comm $COMMON --buffers user --set backend=mpi >"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

run_openmpi() {
	if [ ! -x "$MPIBENCH" ] || ! command -v mpirun >/dev/null 2>&1; then
		echo "comm-peers: no MPI peer ($MPIBENCH or mpirun missing); skipped" >&2
		return 0
	fi
	mpirun --allow-run-as-root --oversubscribe -n "$NP" $MPI_PEER_ARGS "$MPIBENCH" $COMMON \
		>"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

run_gloo() {
	if ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
		echo "comm-peers: $PYTHON has no torch.distributed; gloo skipped" >&2
		return 0
	fi
	OMP_NUM_THREADS=1 "$PYTHON" "$HERE/gloo_allreduce.py" --world "$NP" $COMMON >"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

run_floor() {
	if [ ! -x "$FLOOR" ]; then
		echo "comm-peers: $FLOOR not built; floor skipped" >&2
		return 0
	fi
	case $OPS in all | allreduce | allgather) ;; *) return 0 ;; esac
	"$FLOOR" --np "$NP" --op "$OPS" --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" \
		--iters "$ITERS" --warmup "$WARMUP" >"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

echo "# comm-peers: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $(nproc)" \
	"load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$ACCEL" --version 2>/dev/null | head -1 || echo 'accel not built'); $(mpirun --version 2>/dev/null | head -1 || echo 'no mpirun');" \
	"torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
echo "# NP=$NP OPS=$OPS MIN_BYTES=$MIN_BYTES MAX_BYTES=$MAX_BYTES ITERS=$ITERS WARMUP=$WARMUP" \
	"ROUNDS=$ROUNDS BACKEND=$BACKEND MPI_PEER_ARGS='$MPI_PEER_ARGS'"

round=1
while [ "$round" -le "$ROUNDS" ]; do
	for peer in accel-user accel-backend accel-mpi openmpi gloo floor; do
		skipped "$peer" && continue
		case $peer in
		accel-user) run_accel user ;;
		accel-backend) run_accel backend ;;
		accel-mpi) run_accel_mpi ;;
		openmpi) run_openmpi ;;
		gloo) run_gloo ;;
		floor) run_floor ;;
		esac >"$OUT/$peer.$round" || { echo "comm-peers: $peer failed (round $round)" >&2; exit 1; }
		cat "$OUT/$peer.$round"
	done
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" <<'EOF'
import glob, json, os, sys

out = sys.argv[1]
best = {}  # (peer, op, bytes) -> row with the lowest median time
for path in glob.glob(os.path.join(out, "*.[0-9]*")):
    peer = os.path.basename(path).rsplit(".", 1)[0]
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            k = (peer, r["op"], r["bytes"])
            if k not in best or r["time_us"] < best[k]["time_us"]:
                best[k] = r

def t(peer, op, b):
    r = best.get((peer, op, b))
    return r["time_us"] if r else None

def ratio(peer_t, accel_t):
    return round(peer_t / accel_t, 3) if peer_t and accel_t else None

ops = ["allreduce", "reduce_scatter", "allgather", "broadcast"]
sizes = sorted({k[2] for k in best})
for buffers in ("user", "backend"):
    me = "accel-" + buffers
    for op in ops:
        for b in sizes:
            a = t(me, op, b)
            if a is None:
                continue
            print(json.dumps({"bench": "comm-ratio", "op": op, "bytes": b, "buffers": buffers,
                              "accel_vs_openmpi": ratio(t("openmpi", op, b), a),
                              "accel_vs_gloo": ratio(t("gloo", op, b), a)},
                             separators=(",", ":")))

def busbw(peer, op, b):
    r = best.get((peer, op, b))
    return r["busbw_GBps"] if r else None

print()
print("# times in us (median call, slowest rank); ratios = peer time / accel time")
print("# %-15s %10s %11s %11s %11s %11s %11s %8s %8s %8s" % (
    "op", "bytes", "accel-user", "accel-bk", "accel-mpi", "openmpi", "gloo",
    "u/ompi", "bk/ompi", "u/gloo"))
for op in ops:
    for b in sizes:
        a, ab, am = t("accel-user", op, b), t("accel-backend", op, b), t("accel-mpi", op, b)
        m, g = t("openmpi", op, b), t("gloo", op, b)
        if a is None and ab is None:
            continue
        f = lambda x: "%11.2f" % x if x is not None else "%11s" % "-"
        q = lambda x: "%8.2f" % x if x is not None else "%8s" % "-"
        print("  %-15s %10d %s %s %s %s %s %s %s %s" % (
            op, b, f(a), f(ab), f(am), f(m), f(g), q(ratio(m, a)), q(ratio(m, ab)),
            q(ratio(g, a))))

M64 = 64 << 20
targets = [
    ("allreduce 64MiB busbw, user buffers, vs OpenMPI", "allreduce", M64, "accel-user", "openmpi", 1.8),
    ("allreduce 64MiB busbw, user buffers, vs gloo", "allreduce", M64, "accel-user", "gloo", 4.0),
    ("allreduce 64MiB busbw, backend buffers, vs OpenMPI", "allreduce", M64, "accel-backend", "openmpi", 5.0),
    ("allreduce 8B latency vs OpenMPI (time <= 2x)", "allreduce", 8, "accel-user", "openmpi", 0.5),
    ("reduce_scatter 64MiB vs OpenMPI", "reduce_scatter", M64, "accel-user", "openmpi", 1.0),
    ("allgather 64MiB vs OpenMPI", "allgather", M64, "accel-user", "openmpi", 1.0),
]
# How far each is from the memory-traffic floor (bench/memfloor), and where
# a target lies against it: a target time below the floor cannot be met by
# any shared-memory implementation on this machine.
floor_rows = []
for op in ("allreduce", "allgather"):
    fl = t("floor", op, M64)
    if fl is None:
        continue
    for peer in ("accel-user", "accel-backend", "openmpi", "gloo"):
        x = t(peer, op, M64)
        if x is not None:
            floor_rows.append("  %-15s 64MiB %-14s %10.1f us = %5.2f x floor (%.1f us)" % (
                op, peer, x, x / fl, fl))
            print(json.dumps({"bench": "comm-floor", "op": op, "bytes": M64, "peer": peer,
                              "time_us": x, "floor_us": fl, "x_floor": round(x / fl, 3)},
                             separators=(",", ":")))
    for name, o, b, me, peer, need in targets:
        if o != op or b != M64:
            continue
        pt = t(peer, op, M64)
        if pt is None:
            continue
        want = pt / need
        floor_rows.append("  target %-45s needs %10.1f us: %s" % (
            name, want, "below the floor" if want < fl else "above the floor"))
if floor_rows:
    print()
    print("# against the memory-traffic floor (NP threads, direct access, no synchronisation)")
    for line in floor_rows:
        print(line)
print()
print("# %-52s %8s %8s %6s" % ("target", "ratio", "needed", ""))
for name, op, b, me, peer, need in targets:
    r = ratio(t(peer, op, b), t(me, op, b))
    verdict = "-" if r is None else ("met" if r >= need else "MISSED")
    print("  %-52s %8s %8s %6s" % (name, r if r is not None else "n/a", ">= %g" % need, verdict))
EOF
