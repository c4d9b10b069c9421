#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/comm-peers.sh: accel's collectives next to their peers, in one run on
# one machine, with the same sizes and the same method (cli/comm-bench.h):
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
#           shared-memory implementation (all-reduce and all-gather only)
#
# Placement: the peers run out of place (send and receive buffers apart) and
# then, for the all-reduce, in place as well (one buffer: what DDP does with
# its buckets, and the only form torch's all_reduce has, so the gloo peer is
# always in place).  In-place runs are named PEER-inplace (accel-user-inplace,
# accel-backend-inplace, openmpi-inplace, floor-inplace); the targets are
# reported for both placements, against gloo once like for like (in place)
# and once against the out-of-place accel.
#
# Prints every peer's JSON lines, then one ratio line per op and size
# ({"bench":"comm-ratio",...}: peer time / accel time, so > 1 means accel is
# faster), then a summary table against the targets in docs/benchmarks.md:
# per target the ratio of the fastest times, the median of the per-round
# ratios (the verdict; see ROUNDS) and in how many rounds the target held,
# also as {"bench":"comm-target",...} lines.
#
# Usage: bench/comm-peers.sh [BUILD_DIR]        (default: build)
# Environment: NP (ranks, 2), OPS (all), MIN_BYTES (8), MAX_BYTES (256M),
#   ITERS (20), WARMUP (5), ROUNDS (1: with more, every peer runs ROUNDS
#   times, alternating; each peer's fastest time per size goes into the
#   tables, and each target is judged by the median over rounds of the
#   ratio of the two times measured in that round, which evens out a noisy
#   machine for all peers alike), BACKEND (shm; tcp compares accel's TCP
#   backend, best next to Open MPI over TCP: MPI_PEER_ARGS="--mca btl
#   tcp,self --mca btl_tcp_if_include lo", and SKIP="accel-backend
#   accel-backend-inplace accel-mpi floor floor-inplace"; the targets
#   printed are the shm ones),
#   MPI_PEER_ARGS (extra mpirun arguments for the openmpi peer, e.g. to force
#   a collective algorithm: "--mca coll_tuned_use_dynamic_rules 1 --mca
#   coll_tuned_allreduce_algorithm 4"), PYTHON (/usr/bin/python3), SKIP (space-separated peers to leave out:
#   accel-user accel-backend accel-mpi openmpi gloo floor, and the -inplace
#   names above), PLACEMENT (both: out of place and in place; out; in).
set -eu

BUILD=${1:-build}
NP=${NP:-2}
OPS=${OPS:-all}
MIN_BYTES=${MIN_BYTES:-8}
MAX_BYTES=${MAX_BYTES:-256M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-1}
BACKEND=${BACKEND:-shm}
PYTHON=${PYTHON:-/usr/bin/python3}
SKIP=${SKIP:-}
MPI_PEER_ARGS=${MPI_PEER_ARGS:-}
PLACEMENT=${PLACEMENT:-both}
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

case $PLACEMENT in
out | in | both) ;;
*) echo "comm-peers: PLACEMENT must be out, in or both, not '$PLACEMENT'" >&2; exit 2 ;;
esac
SIZES="--min-bytes $MIN_BYTES --max-bytes $MAX_BYTES --iters $ITERS --warmup $WARMUP --json"
COMMON="--op $OPS $SIZES"
# In-place runs: the all-reduce only (the op whose targets compare with gloo).
case $OPS in all | allreduce) INPLACE_RUNS=1 ;; *) INPLACE_RUNS=0 ;; esac
case $PLACEMENT in out) INPLACE_RUNS=0 ;; esac
IP_COMMON="--op allreduce $SIZES --inplace"

# JSON lines only (the launcher prefixes rank output with "[rank R] ").
keep_json() {
	sed -n 's/^\[rank [0-9]*\] //; /^{"bench"/p'
}

# Each run writes its raw output to $OUT/raw (status kept: sh has no
# pipefail), then the JSON lines go to stdout.
run_accel() {  # $1: user|backend, $2: the size/op arguments
	"$ACCEL" launch -n "$NP" --set "backend=$BACKEND" -- \
		"$ACCEL" bench comm $2 --buffers "$1" >"$OUT/raw" || return 1
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

run_openmpi() {  # $1: the size/op arguments
	if [ ! -x "$MPIBENCH" ] || ! command -v mpirun >/dev/null 2>&1; then
		echo "comm-peers: no MPI peer ($MPIBENCH or mpirun missing); skipped" >&2
		return 0
	fi
	mpirun --allow-run-as-root --oversubscribe -n "$NP" $MPI_PEER_ARGS "$MPIBENCH" $1 \
		>"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

run_gloo() {
	if ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
		echo "comm-peers: $PYTHON has no torch.distributed; gloo skipped" >&2
		return 0
	fi
	gargs=$COMMON
	[ "$PLACEMENT" = in ] && gargs="--op allreduce $SIZES"
	OMP_NUM_THREADS=1 "$PYTHON" "$HERE/gloo_allreduce.py" --world "$NP" $gargs >"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

run_floor() {  # $1: --inplace or nothing
	if [ ! -x "$FLOOR" ]; then
		echo "comm-peers: $FLOOR not built; floor skipped" >&2
		return 0
	fi
	case $OPS in all | allreduce | allgather) ;; *) return 0 ;; esac
	fops=$OPS
	[ -n "$1" ] && fops=allreduce
	"$FLOOR" --np "$NP" --op "$fops" --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" \
		--iters "$ITERS" --warmup "$WARMUP" $1 >"$OUT/raw" || return 1
	keep_json <"$OUT/raw"
}

echo "# comm-peers: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $(nproc)" \
	"load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$ACCEL" --version 2>/dev/null | head -1 || echo 'accel not built'); $(mpirun --version 2>/dev/null | head -1 || echo 'no mpirun');" \
	"torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
echo "# NP=$NP OPS=$OPS MIN_BYTES=$MIN_BYTES MAX_BYTES=$MAX_BYTES ITERS=$ITERS WARMUP=$WARMUP" \
	"ROUNDS=$ROUNDS BACKEND=$BACKEND PLACEMENT=$PLACEMENT MPI_PEER_ARGS='$MPI_PEER_ARGS'"

PEERS=""
[ "$PLACEMENT" != in ] && PEERS="accel-user accel-backend accel-mpi openmpi"
PEERS="$PEERS gloo"
[ "$PLACEMENT" != in ] && PEERS="$PEERS floor"
[ "$INPLACE_RUNS" = 1 ] &&
	PEERS="$PEERS accel-user-inplace accel-backend-inplace openmpi-inplace floor-inplace"

round=1
while [ "$round" -le "$ROUNDS" ]; do
	for peer in $PEERS; do
		skipped "$peer" && continue
		case $peer in
		accel-user) run_accel user "$COMMON" ;;
		accel-backend) run_accel backend "$COMMON" ;;
		accel-mpi) run_accel_mpi ;;
		openmpi) run_openmpi "$COMMON" ;;
		gloo) run_gloo ;;
		floor) run_floor "" ;;
		accel-user-inplace) run_accel user "$IP_COMMON" ;;
		accel-backend-inplace) run_accel backend "$IP_COMMON" ;;
		openmpi-inplace) run_openmpi "$IP_COMMON" ;;
		floor-inplace) run_floor --inplace ;;
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
per_round = {}  # (peer, op, bytes) -> {round: time}
for path in glob.glob(os.path.join(out, "*.[0-9]*")):
    peer, rnd = os.path.basename(path).rsplit(".", 1)
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            k = (peer, r["op"], r["bytes"])
            per_round.setdefault(k, {})[int(rnd)] = r["time_us"]
            if k not in best or r["time_us"] < best[k]["time_us"]:
                best[k] = r

def paired(peer, me, op, b):
    """Per-round ratios peer / accel: the two ran minutes apart at most
    (alternating within one round), so each pair saw the same machine."""
    p, a = per_round.get((peer, op, b), {}), per_round.get((me, op, b), {})
    return sorted(p[k] / a[k] for k in p if k in a and a[k] > 0)

def median(xs):
    n = len(xs)
    return (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2) if n else None

def t(peer, op, b):
    r = best.get((peer, op, b))
    return r["time_us"] if r else None

def ratio(peer_t, accel_t):
    return round(peer_t / accel_t, 3) if peer_t and accel_t else None

ops = ["allreduce", "reduce_scatter", "allgather", "broadcast"]
sizes = sorted({k[2] for k in best})
# (suffix, inplace): the out-of-place runs, then the in-place ones; gloo's
# all-reduce is in place in both comparisons (torch has no other).
placements = [("", False), ("-inplace", True)]
for suffix, inplace in placements:
    for buffers in ("user", "backend"):
        me = "accel-" + buffers + suffix
        for op in ops:
            for b in sizes:
                a = t(me, op, b)
                if a is None:
                    continue
                print(json.dumps({"bench": "comm-ratio", "op": op, "bytes": b, "buffers": buffers,
                                  "inplace": inplace,
                                  "accel_vs_openmpi": ratio(t("openmpi" + suffix, op, b), a),
                                  "accel_vs_gloo": ratio(t("gloo", op, b), a)},
                                 separators=(",", ":")))

f = lambda x: "%11.2f" % x if x is not None else "%11s" % "-"
q = lambda x: "%8.2f" % x if x is not None else "%8s" % "-"
for suffix, inplace in placements:
    rows = []
    for op in ops:
        for b in sizes:
            a, ab = t("accel-user" + suffix, op, b), t("accel-backend" + suffix, op, b)
            am = t("accel-mpi" + suffix, op, b)
            m, g = t("openmpi" + suffix, op, b), t("gloo", op, b)
            if a is None and ab is None:
                continue
            rows.append("  %-15s %10d %s %s %s %s %s %s %s %s" % (
                op, b, f(a), f(ab), f(am), f(m), f(g), q(ratio(m, a)), q(ratio(m, ab)),
                q(ratio(g, a))))
    if not rows:
        continue
    print()
    print("# %s: times in us (median call, slowest rank); ratios = peer time / accel time%s" % (
        "in place" if inplace else "out of place",
        "" if inplace else " (gloo: in place)"))
    print("# %-15s %10s %11s %11s %11s %11s %11s %8s %8s %8s" % (
        "op", "bytes", "accel-user", "accel-bk", "accel-mpi", "openmpi", "gloo",
        "u/ompi", "bk/ompi", "u/gloo"))
    for line in rows:
        print(line)

M64 = 64 << 20
# name, op, bytes, accel run, peer run, needed ratio, floor run
targets = []
for suffix, label in (("", "out of place"), ("-inplace", "in place")):
    gl = "gloo in place" if not suffix else "both in place"
    targets += [
        ("allreduce 64MiB user buffers vs OpenMPI, %s" % label, "allreduce", M64,
         "accel-user" + suffix, "openmpi" + suffix, 1.8),
        ("allreduce 64MiB user buffers vs gloo, accel %s (%s)" % (label, gl), "allreduce", M64,
         "accel-user" + suffix, "gloo", 4.0),
        ("allreduce 64MiB backend buffers vs OpenMPI, %s" % label, "allreduce", M64,
         "accel-backend" + suffix, "openmpi" + suffix, 5.0),
        ("allreduce 8B latency vs OpenMPI (time <= 2x), %s" % label, "allreduce", 8,
         "accel-user" + suffix, "openmpi" + suffix, 0.5),
    ]
targets += [
    ("reduce_scatter 64MiB vs OpenMPI, out of place", "reduce_scatter", M64, "accel-user", "openmpi", 1.0),
    ("allgather 64MiB vs OpenMPI, out of place", "allgather", M64, "accel-user", "openmpi", 1.2),
]
# How far each is from the memory-traffic floor (bench/memfloor), and where
# a target lies against it: a target time below the floor cannot be met by
# any shared-memory implementation on this machine.  In-place runs (and
# gloo) are held against the in-place floor.
def floor_of(run, op):
    if run == "gloo" or run.endswith("-inplace"):
        return t("floor-inplace", op, M64), "floor-inplace"
    return t("floor", op, M64), "floor"

floor_rows = []
for op in ("allreduce", "allgather"):
    for peer in ("accel-user", "accel-backend", "openmpi", "accel-user-inplace",
                 "accel-backend-inplace", "openmpi-inplace", "gloo"):
        x = t(peer, op, M64)
        fl, fname = floor_of(peer, op)
        if x is None or fl is None:
            continue
        floor_rows.append("  %-15s 64MiB %-22s %10.1f us = %5.2f x %s (%.1f us)" % (
            op, peer, x, x / fl, fname, fl))
        print(json.dumps({"bench": "comm-floor", "op": op, "bytes": M64, "peer": peer,
                          "floor": fname, "time_us": x, "floor_us": fl,
                          "x_floor": round(x / fl, 3)}, separators=(",", ":")))
    for name, o, b, me, peer, need, *_ in targets:
        if o != op or b != M64:
            continue
        pt = t(peer, op, M64)
        fl, fname = floor_of(me, op)
        if pt is None or fl is None:
            continue
        want = pt / need
        floor_rows.append("  target %-62s needs %10.1f us: %s" % (
            name, want, "below the " + fname if want < fl else "above the " + fname))
if floor_rows:
    print()
    print("# against the memory-traffic floor (NP threads, direct access, no synchronisation)")
    for line in floor_rows:
        print(line)
# The verdict: with one round, the ratio of the two times; with several, the
# median of the per-round ratios (each round's pair measured minutes apart),
# which a single lucky or unlucky round cannot move.  The ratio of the
# fastest times is printed too; it favours whichever peer varies more.
verdicts = []
for name, op, b, me, peer, need in targets:
    r = ratio(t(peer, op, b), t(me, op, b))
    if r is None:
        continue
    pr = paired(peer, me, op, b)
    med = round(median(pr), 3) if pr else r
    ahead = sum(x >= need for x in pr)
    verdicts.append((name, r, med, ahead, len(pr), need))
    print(json.dumps({"bench": "comm-target", "target": name, "op": op, "bytes": b,
                      "fastest_ratio": r, "median_round_ratio": med, "rounds_met": ahead,
                      "rounds": len(pr), "needed": need, "met": med >= need},
                     separators=(",", ":")))
print()
print("# %-69s %8s %8s %8s %8s %6s" % ("target", "fastest", "median", "rounds", "needed", ""))
for name, r, med, ahead, n, need in verdicts:
    print("  %-69s %8s %8s %8s %8s %6s" % (name, r, med, "%d/%d" % (ahead, n), ">= %g" % need,
                                          "met" if med >= need else "MISSED"))
EOF
