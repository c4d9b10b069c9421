#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-fp8-recipe.sh PROG: the fp8 plugin through accel with
# tests/progs/fp8-check (one fp8 linear layer, emulated GEMMs):
#  - one process: the GEMM equals the quantize-dequantize reference, the
#    scales follow delayed scaling (also with margin 2 and interval 3),
#    and the log says that it emulates;
#  - 2 ranks with different input amax per rank: every rank holds the
#    scales of the maximum (fp8-check checks each step); the state saved
#    after step 2 resumes at 1 and 3 ranks with the same scales;
#  - fp8.require_hardware true on this machine (no FP8 GPU) refuses to
#    start, naming the device and its compute capability.
set -u
prog=${1:?usage: test-fp8-recipe.sh PROG}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-fp8.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG ACCEL_SET
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}
cat >"$tmp/cfg.json" <<'JSON'
{"mixed_precision": "fp8", "seed": 7,
 "optimizer": {"type": "sgd", "params": {"lr": 0.05}},
 "fp8": {"amax_history_len": 1}}
JSON

# 1 process, no launcher
if ACCEL_CONFIG="$tmp/cfg.json" ACCEL_LOG_LEVEL=info "$prog" train 4 >"$tmp/one.out" 2>"$tmp/one.err"; then
	# this machine without an FP8 GPU: "emulates"; with one: "cuBLASLt"
	grep -qE "emulates the FP8 GEMMs|FP8 tensor cores with cuBLASLt" "$tmp/one.err" ||
		fail "1 process: the log does not say whether fp8 emulates: $(cat "$tmp/one.err")"
	if ! nvidia-smi -L >/dev/null 2>&1; then
		grep -q "emulates the FP8 GEMMs" "$tmp/one.err" ||
			fail "1 process, no GPU: the log does not say that fp8 emulates"
	fi
	[ "$(grep -c '^scales ' "$tmp/one.out")" = 4 ] || fail "1 process: expected 4 scale lines"
else
	fail "1 process: $(cat "$tmp/one.err")"
fi

# margin 2 and interval 3: the scales move only on every third step, by 1/4
if ACCEL_CONFIG="$tmp/cfg.json" ACCEL_SET="fp8.margin=2
fp8.interval=3" "$prog" train 7 >"$tmp/mi.out" 2>"$tmp/mi.err"; then
	a=$(sed -n 's/^scales 0 //p' "$tmp/mi.out") b=$(sed -n 's/^scales 1 //p' "$tmp/mi.out")
	c=$(sed -n 's/^scales 2 //p' "$tmp/mi.out")
	[ "$a" = "$b" ] && [ "$b" != "$c" ] ||
		fail "interval 3: scales after steps 0, 1, 2: '$a', '$b', '$c'"
else
	fail "margin 2, interval 3: $(cat "$tmp/mi.err")"
fi

# the amax history: 3 steps, its maximum or the latest step's
# (fp8-check computes the expected scales from the history's window; X's
# amax cycles 1, 2, 3, so the two differ at every third step), 8 steps
for algo in max most_recent; do
	if ACCEL_CONFIG="$tmp/cfg.json" ACCEL_SET="fp8.amax_history_len=3
fp8.amax_compute_algo=$algo" "$prog" train 8 >"$tmp/h$algo.out" 2>"$tmp/h$algo.err"; then
		[ "$(grep -c '^scales ' "$tmp/h$algo.out")" = 8 ] ||
			fail "history 3, $algo: expected 8 scale lines"
	else
		fail "history 3, $algo: $(cat "$tmp/h$algo.err")"
	fi
done
# the two algorithms' X scales differ after step 3 (max: 3 of steps 2, 3; most_recent: 1)
a=$(sed -n 's/^scales 3 \([^ ]*\).*/\1/p' "$tmp/hmax.out")
b=$(sed -n 's/^scales 3 \([^ ]*\).*/\1/p' "$tmp/hmost_recent.out")
[ -n "$a" ] && [ "$a" != "$b" ] ||
	fail "history 3: the X scale after step 3 is '$a' with max and '$b' with most_recent"

if ! "$ACCEL_CLI" launch -n 2 --config "$tmp/cfg.json" -- /bin/true >"$tmp/probe.log" 2>&1; then
	echo "skipped: accel launch -n 2 cannot start /bin/true here:"
	cat "$tmp/probe.log"
	exit 77
fi
# 2 ranks; save after step 2
if "$ACCEL_CLI" launch -n 2 --config "$tmp/cfg.json" -- "$prog" train 5 "$tmp/ckpt" 2 \
	>"$tmp/two.out" 2>&1; then
	want=$(sed -n 's/.*scales 2 \(.*\)$/\1/p' "$tmp/two.out")
	[ -n "$want" ] || fail "2 ranks: no scales of step 2 in: $(cat "$tmp/two.out")"
	# the 2-rank scales differ from the 1-process ones: rank 1's larger amax won
	one=$(sed -n 's/^scales 2 \([^ ]*\).*/\1/p' "$tmp/one.out")
	two=$(echo "$want" | cut -d' ' -f1)
	[ "$one" != "$two" ] || fail "the X scale at 2 ranks ($two) equals 1 rank's: amax not reduced?"
	for n in 1 3; do
		if "$ACCEL_CLI" launch -n $n --config "$tmp/cfg.json" -- "$prog" resume "$tmp/ckpt" \
			>"$tmp/resume$n.out" 2>&1; then
			got=$(sed -n 's/.*scales loaded \(.*\)$/\1/p' "$tmp/resume$n.out")
			[ "$got" = "$want" ] || fail "resumed at $n ranks: scales '$got', saved '$want'"
		else
			fail "resume at $n ranks: $(cat "$tmp/resume$n.out")"
		fi
	done
else
	fail "2 ranks: $(cat "$tmp/two.out")"
fi

# 2 ranks with a history of 3 steps and interval 2: every rank checks
# each step's scales against the history of the maxima over ranks
if ! "$ACCEL_CLI" launch -n 2 --config "$tmp/cfg.json" --set fp8.amax_history_len=3 \
	--set fp8.interval=2 -- "$prog" train 8 >"$tmp/two-h.out" 2>&1; then
	fail "2 ranks, history 3, interval 2: $(cat "$tmp/two-h.out")"
fi

# require_hardware on a machine without an FP8 GPU
if ACCEL_CONFIG="$tmp/cfg.json" ACCEL_SET="fp8.require_hardware=true" "$prog" train 1 \
	>"$tmp/hw.out" 2>"$tmp/hw.err"; then
	if grep -q "cuBLASLt" "$tmp/hw.err" 2>/dev/null; then
		echo "note: this machine has an FP8 GPU; require_hardware accepted it"
	else
		fail "require_hardware=true started without FP8 hardware"
	fi
else
	grep -q "require_hardware is true" "$tmp/hw.err" && grep -q "compute capability" "$tmp/hw.err" ||
		fail "require_hardware: the message does not name the setting and the device: $(cat "$tmp/hw.err")"
fi
[ $fails -eq 0 ] && echo "fp8 recipe: all checks passed"
exit $((fails != 0))
