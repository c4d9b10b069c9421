#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/optim-peers.sh: accel's AdamW step next to its peers, in one run on
# one machine, on the same N f32 parameters and the same number of threads:
#
#   accel   bench/bench-optim --threads T: core/optim's AdamW kernel (one
#           fused pass), each of T threads stepping its slice
#   triad   the same process, the same T threads: a STREAM triad
#           a = b + s*c over N elements, the bandwidth those threads get
#           (STREAM's 12 bytes per element)
#   torch   bench/torch_adamw.py --threads T (torch.set_num_threads(T),
#           OMP_NUM_THREADS=T): torch.optim.AdamW, foreach=False and
#           foreach=True; the faster of the two is the peer
#
# For each thread count the programs take turns for ROUNDS rounds.  The
# tables show each program's fastest step (other processes only make
# steps slower) and its median; the verdict on each target is the median
# over rounds of the value measured within a round (accel against the
# torch run right after it, accel against the triad of its own process),
# with the number of rounds in which it held, as bench/comm-peers.sh does.
# Prints every JSON line, then per thread count one ratio line
# ({"bench":"optim-ratio",...}) and a summary against the targets in
# docs/benchmarks.md: accel >= 3x torch's parameters per second, and
# accel's 28 bytes per parameter moved at >= 60% of the triad's bandwidth
# (STREAM's 12 bytes per element; also shown with the write-allocate read
# of a[] counted, 16 bytes, since AdamW's in-place writes have none).
#
# Usage: bench/optim-peers.sh [BUILD_DIR]        (default: build)
# Environment: N (16777216; the CPU-offload target is stated for
#   100000000), THREADS (space-separated thread counts, default "1"; "all"
#   or 0: every CPU this shell may use), ROUNDS (3), MIN_TIME (0.5 s per
#   program and round), PYTHON (/usr/bin/python3), KERNEL (auto).
set -eu

BUILD=${1:-build}
N=${N:-16777216}
ROUNDS=${ROUNDS:-3}
MIN_TIME=${MIN_TIME:-0.5}
PYTHON=${PYTHON:-/usr/bin/python3}
KERNEL=${KERNEL:-auto}
THREADS=${THREADS:-1}
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
ALLCPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # the CPUs this shell may use (affinity)
TLIST=""
for t in $THREADS; do
	case $t in
	all | 0) t=$ALLCPUS ;;
	*[!0-9]*) echo "optim-peers: THREADS lists thread counts, not '$t'" >&2; exit 2 ;;
	esac
	TLIST="$TLIST $t"
done
echo "# N=$N THREADS=$TLIST ROUNDS=$ROUNDS MIN_TIME=$MIN_TIME KERNEL=$KERNEL" \
	"torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"

export OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
round=1
while [ "$round" -le "$ROUNDS" ]; do
	for t in $TLIST; do
		OMP_NUM_THREADS=$t "$BENCH" --n "$N" --threads "$t" --min-time "$MIN_TIME" \
			--rounds 1 --kernel "$KERNEL" >"$OUT/accel.$t.$round" ||
			{ echo "optim-peers: bench-optim failed" >&2; exit 1; }
		cat "$OUT/accel.$t.$round"
		if [ "$have_torch" = 1 ]; then
			OMP_NUM_THREADS=$t "$PYTHON" "$HERE/torch_adamw.py" --n "$N" --threads "$t" \
				--min-time "$MIN_TIME" --rounds 1 >"$OUT/torch.$t.$round" ||
				{ echo "optim-peers: torch_adamw.py failed" >&2; exit 1; }
			cat "$OUT/torch.$t.$round"
		fi
	done
	round=$((round + 1))
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$OUT" <<'EOF'
import glob, json, os, statistics, sys

out = sys.argv[1]
rows = {}   # (threads, round) -> list of rows
for path in glob.glob(os.path.join(out, "*.*.*")):
    prog, t, rnd = os.path.basename(path).split(".")
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "time_ms" in r:
                rows.setdefault((int(t), int(rnd)), []).append(r)

def pick(rs, impl, op, foreach=None):
    c = [r for r in rs if r["impl"] == impl and r["op"] == op and
         (foreach is None or r.get("foreach") == foreach)]
    return min(c, key=lambda r: r["time_ms"]) if c else None

for t in sorted({k[0] for k in rows}):
    rounds = sorted(k[1] for k in rows if k[0] == t)
    allrows = [r for k, rs in rows.items() if k[0] == t for r in rs]
    accel = pick(allrows, "accel", "adamw")
    triad = pick(allrows, "triad", "triad")
    torchs = [pick(allrows, "torch", "adamw", fe) for fe in (False, True)]
    torchs = [r for r in torchs if r]
    peer = min(torchs, key=lambda r: r["time_ms"]) if torchs else None
    # per round: accel against the faster torch variant of that round, and
    # accel's bytes/s against the triad of its own process
    per_ratio, per_frac = [], []
    for rnd in rounds:
        rs = rows[(t, rnd)]
        a, tr, p = pick(rs, "accel", "adamw"), pick(rs, "triad", "triad"), pick(rs, "torch", "adamw")
        if a and p:
            per_ratio.append(p["time_ms"] / a["time_ms"])
        if a and tr:
            per_frac.append(a["GBps"] / tr["GBps"])
    med_ratio = statistics.median(per_ratio) if per_ratio else None
    med_frac = statistics.median(per_frac) if per_frac else None
    line = {"bench": "optim-ratio", "machine": accel["machine"], "threads": t, "n": accel["n"],
            "kernel": accel["kernel"], "rounds": len(rounds),
            "accel_gparam_s": accel["gparam_s"], "accel_GBps": accel["GBps"],
            "peer": ("torch %s AdamW foreach=%s" % (peer["torch"], peer["foreach"]))
            if peer else None,
            "peer_gparam_s": peer["gparam_s"] if peer else None,
            "ratio": round(med_ratio, 3) if med_ratio else None,
            "ratio_fastest": round(peer["time_ms"] / accel["time_ms"], 3) if peer else None,
            "triad_GBps": triad["GBps"],
            "fraction_of_triad": round(med_frac, 3) if med_frac else None,
            "fraction_of_triad_wa": round(med_frac * 12 / 16, 3) if med_frac else None,
            "fraction_of_triad_fastest": round(accel["GBps"] / triad["GBps"], 3)}
    print(json.dumps(line, separators=(",", ":")))
    print()
    print("# %d thread%s, N=%d: fastest and median step over %d rounds; AdamW counts 28 "
          "bytes/param (read p,g,m,v; write p,m,v)" % (t, "" if t == 1 else "s", accel["n"],
                                                       len(rounds)))
    print("# %-34s %10s %10s %10s %10s" % ("", "ms", "median ms", "Gparam/s", "GB/s"))
    print("  %-34s %10.2f %10.2f %10.4f %10.2f" % ("accel AdamW (%s)" % accel["kernel"],
          accel["time_ms"], accel["time_ms_median"], accel["gparam_s"], accel["GBps"]))
    for r in sorted(torchs, key=lambda r: r["foreach"]):
        print("  %-34s %10.2f %10.2f %10.4f %10.2f" % ("torch AdamW foreach=%s" % r["foreach"],
              r["time_ms"], r["time_ms_median"], r["gparam_s"], r["GBps"]))
    print("  %-34s %10.2f %10.2f %10s %10.2f" % ("triad (12 B/elem, STREAM)", triad["time_ms"],
          triad["time_ms_median"], "-", triad["GBps"]))
    print("  %-34s %10.2f %10.2f %10s %10.2f" % ("triad (16 B/elem, write-allocate)",
          triad["time_ms"], triad["time_ms_median"], "-", triad["GBps"] * 16 / 12))
    print()
    print("# %-44s %8s %8s %8s %8s %7s" % ("target (median of the rounds' values)", "value",
                                           "rounds", "fastest", "needed", ""))
    fr = line["fraction_of_triad_fastest"]
    targets = [("accel vs torch AdamW (params/s)", med_ratio, per_ratio, line["ratio_fastest"], 3.0),
               ("accel bytes/s as a fraction of the triad's", med_frac, per_frac, fr, 0.6),
               ("  the same, triad with write-allocate", med_frac * 12 / 16 if med_frac else None,
                [x * 12 / 16 for x in per_frac], fr * 12 / 16, 0.6)]
    for name, v, per, fastest, need in targets:
        verdict = "-" if v is None else ("met" if v >= need else "MISSED")
        print("  %-44s %8s %8s %8s %8.2f %7s" % (
            name, "-" if v is None else "%.2f" % v, "%d/%d" % (sum(x >= need for x in per), len(per)),
            "-" if fastest is None else "%.2f" % fastest, need, verdict))
    print()
EOF
