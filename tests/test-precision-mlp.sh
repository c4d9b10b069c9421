#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-precision-mlp.sh TRAIN_MLP PRECISIONS: examples/train_mlp with
# mixed_precision bf16 (and fp16, when PRECISIONS names it: the build has
# the scaler plugin) on the CPU, against the f32 run (mixed_precision=no,
# ddp, 1 process):
#   - the held-out accuracy ("final accuracy") within one point of the f32
#     run's, under ddp and zero stage 2 (AdamW) at 1 and 2 processes, and
#     ddp with SGD at 1;
#   - 2 processes equal 1 process within the 16-bit tolerance (below), final
#     weights and held-out accuracy, for each strategy, and zero equals ddp;
#   - the run holds 16-bit working weights and f32 masters: its checkpoint
#     (tests/ckpt_masters.py) has param/ tensors in BF16 / F16 that are the
#     F32 master/ tensors rounded to nearest even, and masters finer than
#     16 bits;
#   - the --metrics lines carry loss_scale and skipped: 1 and 0 for bf16
#     (no scaler); for fp16 the scaler's scale (> 1).
# PRECISION_MLP_LEAN=1 (sanitizer builds) runs ddp at 1 and zero stage 2 at
# 2 processes only.  Exits 77 only when `accel launch` cannot start two
# processes.
set -u

T=${1:?usage: test-precision-mlp.sh TRAIN_MLP PRECISIONS}
PRECS=${2:-bf16}
: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
A=$ACCEL_CLI
S=$ACCEL_TEST_SRCDIR/tests
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-precision-mlp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

# Held-out accuracy of a 16-bit run against the f32 run: the issue's one
# point.  Observed (60 steps): AdamW bf16 0.9745, fp16 0.9750 and 0.9755,
# f32 0.9750; SGD bf16 and fp16 0.9735, f32 0.9740.
ACC_POINTS=0.01
# 2 processes against 1, per tensor max|a - b| / max|a| of the final
# weights (tests/st_compare.py).  The f32 gradients of the two orders
# differ in their last bits, which a 16-bit working copy does not see until
# a master crosses a rounding boundary; one crossing moves a weight by a
# 16-bit ulp and the runs drift apart from there (AdamW magnifies small
# gradients).  f16 sees the masters 8x finer than bf16 (so crossings come
# sooner), and its subnormals may round the smallest activation gradients
# of a half batch (twice the scale) other than a whole batch's.  Observed at these 60 steps: bf16 0 (bitwise) for seeds
# 1..6 and 42 (at 200 steps 1.2e-3 and 5.8e-3 for seeds 1 and 7, so the
# bound is one bf16 ulp, 2^-8); fp16 3.4e-2 for seed 42 (this test's), at
# most 5.5e-3 for seeds 1..6.
RTOL_bf16=3.9e-3
RTOL_fp16=0.1
# ... and their held-out accuracies: observed equal, or 0.0005 apart (one
# sample of 2000; fp16 seed 2 and 42).
ACC_RANKS=0.0025
STEPS=60
ARGS="--hidden 40 --layers 2 --inputs 24 --classes 6 --samples 1152 --test-samples 2000 \
--batch-size 48 --steps $STEPS --log-every 20"

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

echo '{}' > "$tmp/empty.json"
if ! "$A" launch -n 2 --config "$tmp/empty.json" -- /bin/true > "$tmp/probe.log" 2>&1; then
	echo "skipped: accel launch -n 2 cannot start /bin/true here:"
	tail -5 "$tmp/probe.log"
	exit 77
fi

cat > "$tmp/ddp.json" <<EOF
{"strategy": "ddp", "optimizer": {"type": "adamw", "params": {"lr": 0.003, "weight_decay": 0.01}}}
EOF
# plain SGD too: AdamW's update does not depend on the gradients' scale, so
# only SGD shows a loss scale that is not divided out again (or a loss not
# multiplied by it, whose f16 gradients underflow)
cat > "$tmp/sgd.json" <<EOF
{"strategy": "ddp", "optimizer": {"type": "sgd", "params": {"lr": 0.05, "momentum": 0.9}}}
EOF
cat > "$tmp/zero2.json" <<EOF
{"strategy": "zero", "optimizer": {"type": "adamw", "params": {"lr": 0.003, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2, "reduce_bucket_size": 1500}}
EOF

accuracy() {   # LOG: the "final accuracy" figure the program printed
	sed -n 's/.*final accuracy \([0-9.]*\).*/\1/p' "$1" | tail -1
}

# run NAME CONFIG N MIXED_PRECISION: train, save the final weights, a
# checkpoint at the last step and the metrics; 0 when it ran
run() {
	if ! "$A" launch -n "$3" --config "$tmp/$2.json" -- "$T" $ARGS --set mixed_precision="$4" \
		--save-final "$tmp/$1.st" --checkpoint-every $STEPS --project-dir "$tmp/ck-$1" \
		--metrics "$tmp/$1.jsonl" > "$tmp/$1.log" 2>&1; then
		fail "$1: training failed ($2, $3 process(es), mixed_precision=$4)"
		tail -20 "$tmp/$1.log"
		return 1
	fi
	return 0
}

run ref ddp 1 no || exit 1
ref_acc=$(accuracy "$tmp/ref.log")
[ -n "$ref_acc" ] || { fail "the f32 run printed no final accuracy"; exit 1; }
echo "f32 (ddp, 1 process): final accuracy $ref_acc"
run ref-sgd sgd 1 no || exit 1
ref_sgd_acc=$(accuracy "$tmp/ref-sgd.log")
[ -n "$ref_sgd_acc" ] || { fail "the f32 SGD run printed no final accuracy"; exit 1; }
echo "f32 (ddp, SGD, 1 process): final accuracy $ref_sgd_acc"

cmp_st() {   # A B RTOL WHAT
	if python3 "$S/st_compare.py" "$tmp/$1.st" "$tmp/$2.st" "$3" > "$tmp/cmp.log" 2>&1; then
		echo "ok: $4: $(tail -1 "$tmp/cmp.log")"
	else
		fail "$4"
		cat "$tmp/cmp.log"
	fi
}

if [ "${PRECISION_MLP_LEAN:-0}" = 1 ]; then
	CASES="ddp:1 zero2:2"
else
	CASES="ddp:1 ddp:2 zero2:1 zero2:2 sgd:1"
fi
for mp in $PRECS; do
	case $mp in
	bf16) fmt=bf16; eval rtol=\$RTOL_bf16 ;;
	fp16) fmt=f16; eval rtol=\$RTOL_fp16 ;;
	*) fail "unknown precision '$mp'"; continue ;;
	esac
	for c in $CASES; do
		cfg=${c%:*} n=${c#*:} name=$mp-${c%:*}-$n
		run "$name" "$cfg" "$n" "$mp" || continue
		acc=$(accuracy "$tmp/$name.log") ra=$ref_acc
		[ "$cfg" = sgd ] && ra=$ref_sgd_acc
		if [ -z "$acc" ] || ! awk -v a="$acc" -v r="$ra" -v t="$ACC_POINTS" \
			'BEGIN { d = a - r; exit !(d <= t + 1e-9 && -d <= t + 1e-9) }'; then
			fail "$name: final accuracy '$acc', f32 $ra (within $ACC_POINTS)"
		else
			echo "ok: $name: final accuracy $acc (f32 $ra)"
		fi
		grep -q "BLAS .*, $fmt weights" "$tmp/$name.log" ||
			fail "$name: the start line does not say $fmt weights"
		if python3 "$S/ckpt_masters.py" "$tmp/ck-$name/checkpoint_$STEPS" "$fmt" \
			> "$tmp/masters.log" 2>&1; then
			echo "ok: $name: $(tail -1 "$tmp/masters.log")"
		else
			fail "$name: the checkpoint's working copies and masters"
			cat "$tmp/masters.log"
		fi
		# loss_scale and skipped on every metrics line (3 lines: steps 20, 40, 60)
		if ! python3 - "$tmp/$name.jsonl" "$mp" > "$tmp/metrics.log" 2>&1 <<'PYEOF'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [20, 40, 60], [r["step"] for r in rows]
for r in rows:
    assert r["skipped"] in (0, 1), r
    if sys.argv[2] == "bf16":
        assert r["loss_scale"] == 1 and r["skipped"] == 0, r
    else:
        assert r["loss_scale"] > 1 and math.log2(r["loss_scale"]).is_integer(), r
assert rows[-1]["loss"] < rows[0]["loss"], "the loss did not fall"
print("loss_scale", [r["loss_scale"] for r in rows], "skipped", [r["skipped"] for r in rows])
PYEOF
		then
			fail "$name: the metrics lines"
			cat "$tmp/metrics.log"
		else
			echo "ok: $name: metrics $(cat "$tmp/metrics.log")"
		fi
	done
	for s in ddp zero2; do
		[ -f "$tmp/$mp-$s-1.st" ] && [ -f "$tmp/$mp-$s-2.st" ] || continue
		cmp_st "$mp-$s-1" "$mp-$s-2" "$rtol" "$mp $s: 2 processes vs 1"
		a1=$(accuracy "$tmp/$mp-$s-1.log") a2=$(accuracy "$tmp/$mp-$s-2.log")
		if awk -v a="$a1" -v b="$a2" -v t="$ACC_RANKS" \
			'BEGIN { d = a - b; exit !(d <= t + 1e-9 && -d <= t + 1e-9) }'; then
			echo "ok: $mp $s: final accuracy $a2 at 2 processes, $a1 at 1"
		else
			fail "$mp $s: final accuracy $a2 at 2 processes, $a1 at 1 (within $ACC_RANKS)"
		fi
	done
	[ -f "$tmp/$mp-zero2-1.st" ] && cmp_st "$mp-ddp-1" "$mp-zero2-1" "$rtol" "$mp zero2 vs ddp at 1"
	[ -f "$tmp/$mp-zero2-2.st" ] && cmp_st "$mp-ddp-1" "$mp-zero2-2" "$rtol" "$mp zero2 at 2 vs ddp at 1"
done

if [ "$fails" -ne 0 ]; then
	echo "$fails failure(s)"
	exit 1
fi
echo "all precision checks passed"
