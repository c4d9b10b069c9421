#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/overhead.sh: accel's own cost per training step of examples/train_mlp
# (784-1024-1024-10, AdamW, strategy ddp, backend shm), at world sizes 1 and
# 2 with BATCH samples per rank: everything accel does besides the
# collectives (the comm backend) and the optimizer arithmetic, as a share of
# the step. Two independent measurements (bench/overhead.py has the rules):
#
#   perf       CPU-time samples (perf record -e cpu-clock, DWARF call
#              stacks) of PERF_STEPS timed steps after 10 warm-up steps,
#              cut to the timed steps by their CLOCK_MONOTONIC bounds
#   callgrind  instruction counts (valgrind --tool=callgrind): runs with
#              CG_STEPS_A and CG_STEPS_B timed steps after 2 warm-up steps;
#              the difference divided by the difference in steps is the cost
#              of one steady-state step, so start-up and exit cancel out.
#              Repeatable to the instruction on a busy machine, but
#              instructions are not time: memory-bound loops (zeroing,
#              gradient statistics) cost more time per instruction than the
#              GEMMs, and under valgrind oneDNN runs its AVX2 kernels, not
#              the AVX-512 ones (valgrind does not emulate AVX-512).
#
# Usage: bench/overhead.sh [BUILD_DIR]     (default: build; a release build)
# Environment: METHODS ("perf callgrind"), WORLDS ("1 2"), BATCH (128),
#   PERF_STEPS (200), PERF_FREQ (2000), CG_STEPS_A (2), CG_STEPS_B (6),
#   OPTIM_FUNCS (functions counted as optimizer arithmetic; default: every
#   function defined in core/optim.c plus the step entry accelp_train_optim_step
#   and grad_at of core/train_step.c), KEEP (a directory to keep the profiles in).
set -eu

BUILD=${1:-build}
METHODS=${METHODS:-perf callgrind}
WORLDS=${WORLDS:-1 2}
BATCH=${BATCH:-128}
PERF_STEPS=${PERF_STEPS:-200}
PERF_FREQ=${PERF_FREQ:-2000}
CG_STEPS_A=${CG_STEPS_A:-2}
CG_STEPS_B=${CG_STEPS_B:-6}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)

ACCEL=$BUILD/cli/accel
TRAIN=$BUILD/examples/train_mlp
if [ ! -x "$TRAIN" ] || [ ! -x "$ACCEL" ]; then
	echo "overhead: $TRAIN or $ACCEL not found; build first (ninja -C $BUILD)" >&2
	exit 2
fi
if [ -z "${ACCEL_PLUGIN_PATH:-}" ]; then
	ACCEL_PLUGIN_PATH=$(find "$BUILD/backends" "$BUILD/plugins" -name '*.so' 2>/dev/null |
		sed 's|/[^/]*$||' | sort -u | paste -sd: -)
	export ACCEL_PLUGIN_PATH
fi
CPUS=$(nproc --all)
export OMP_NUM_THREADS=1

if [ -n "${KEEP:-}" ]; then
	OUT=$KEEP
	mkdir -p "$OUT"
else
	OUT=$(mktemp -d "${TMPDIR:-/tmp}/overhead.XXXXXX")
	trap 'rm -rf "$OUT"' EXIT INT TERM
fi

# Which objects are accel's, which the comm backend's, which functions are
# the optimizer's.
CLASSES="--accel-obj libaccel.so"
for so in $(find "$BUILD/plugins" -name '*.so' 2>/dev/null); do
	CLASSES="$CLASSES --accel-obj $(basename "$so")"
done
for so in $(find "$BUILD/backends" -name 'comm-*.so' 2>/dev/null); do
	CLASSES="$CLASSES --comm-obj $(basename "$so")"
done
if [ -z "${OPTIM_FUNCS:-}" ]; then
	OPTIM_FUNCS="accelp_train_optim_step grad_at"
	for o in "$BUILD"/core/libaccel.so*.p/optim.c.o; do
		[ -f "$o" ] || continue
		OPTIM_FUNCS="$OPTIM_FUNCS $(nm --defined-only "$o" | awk '$2 ~ /^[tT]$/ {print $3}' | tr '\n' ' ')"
	done
fi
for f in $OPTIM_FUNCS; do
	CLASSES="$CLASSES --optim-func $f"
done

# train_mlp on W ranks, every rank wrapped in "$@" (a profiler) with its
# output files named by the world size and rank ($OUT/<tag>.wW.rR).
MLP_TIMING="--test-samples 0 --no-eval --json --log-every 100000000"
run_ranks() {  # $1 world, $2 tag, then: profiler command prefix (uses $F)
	w=$1 tag=$2
	shift 2
	cmd='F='"$OUT/$tag.w$w"'.r${ACCEL_RANK:-0}; exec '"$*"' '"$TRAIN"' '"$MLP_TIMING"' --batch-size '$((w * BATCH))' $ARGS >"$F.json"'
	if [ "$w" = 1 ]; then
		sh -c "$cmd"
	else
		"$ACCEL" launch -n "$w" --set backend=shm --set strategy=ddp -- sh -c "$cmd"
	fi
}

echo "# overhead: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) cpus $CPUS" \
	"($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)) load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $("$ACCEL" --version 2>/dev/null | head -1); METHODS=$METHODS WORLDS=$WORLDS BATCH=$BATCH"
echo "# optimizer functions: $OPTIM_FUNCS"

for method in $METHODS; do
	case $method in
	perf)
		if ! perf record -q -e cpu-clock -o "$OUT/probe.data" true >/dev/null 2>&1; then
			echo "overhead: perf record does not work here; perf skipped" >&2
			continue
		fi
		args=""
		for w in $WORLDS; do
			ARGS="--warmup 10 --steps $PERF_STEPS" run_ranks "$w" perf \
				perf record -q -e cpu-clock -F "$PERF_FREQ" -k monotonic \
				--call-graph dwarf,8192 -o '$F.data' --
			for data in "$OUT"/perf.w"$w".r*.data; do
				f=${data%.data}
				perf script -i "$data" -F tid,time,ip,sym,dso --no-inline >"$f.txt" 2>/dev/null
				rm -f "$data"
				args="$args --json $f.json --script $f.txt"
			done
		done
		"$PYTHON" "$HERE/overhead.py" perf $CLASSES $args
		;;
	callgrind)
		if ! command -v valgrind >/dev/null 2>&1; then
			echo "overhead: no valgrind; callgrind skipped" >&2
			continue
		fi
		args=""
		for w in $WORLDS; do
			for s in "$CG_STEPS_A" "$CG_STEPS_B"; do
				ARGS="--warmup 2 --steps $s --samples 512" run_ranks "$w" "cg$s" \
					valgrind -q --tool=callgrind --compress-strings=no --compress-pos=no \
					'--callgrind-out-file=$F.out' 2>"$OUT/cg.w$w.log" ||
					{ cat "$OUT/cg.w$w.log" >&2; exit 1; }
			done
			for a in "$OUT"/cg"$CG_STEPS_A".w"$w".r*.out; do
				b=$(echo "$a" | sed "s|/cg$CG_STEPS_A\\.|/cg$CG_STEPS_B.|")
				args="$args --out $a $b"
			done
		done
		"$PYTHON" "$HERE/overhead.py" callgrind $CLASSES --steps "$CG_STEPS_A" "$CG_STEPS_B" $args
		;;
	*)
		echo "overhead: unknown method '$method' (perf, callgrind)" >&2
		exit 2
		;;
	esac
done
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
