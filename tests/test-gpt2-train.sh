#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-gpt2-train.sh TRAIN_GPT2: examples/gpt2 --model tiny learning
# byte-level text (a Debian license file, prepared by `accel-gpt2 prepare`):
#   - bad input (token files, sizes) is refused with exit 2 and a message;
#   - at 2 processes (ddp), STEPS steps reach a held-out loss below
#     LOSS_BOUND (from the run recorded in docs/gpt2.md) and the greedy
#     sample prints;
#   - resume: the same run checkpointed at step HALF and resumed at 3
#     processes ends within RESUME_TOL of the uninterrupted 2-process run's
#     held-out loss (the curve continues; 3 processes round differently);
#   - --recompute gives the same final weights as without (bitwise);
#   - --metrics FILE: the checkpointed run's JSON lines carry every key at
#     each progress step (loss equal to the progress line's, tokens/s =
#     samples/s x seq, MFU = TFLOP/s / (peak x processes)) and the final
#     held-out loss;
#   - mixed_precision bf16 and fp16 (scaler; 16-bit weights and
#     activations) end within PREC_TOL of the f32 run's held-out loss; the
#     fp16 run's metrics show the scaler's loss scale.
# GPT2_TRAIN_LEAN=1 (sanitizer builds): fewer steps, the resume and the
# recompute checks only.  Exits 77 only when `accel launch` cannot start
# processes.
set -u

G=${1:?usage: test-gpt2-train.sh TRAIN_GPT2}
: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
A=$ACCEL_CLI
S=$ACCEL_TEST_SRCDIR/tests
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-gpt2-train.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0
LEAN=${GPT2_TRAIN_LEAN:-0}
TEXT=/usr/share/common-licenses/GPL-3
[ -r "$TEXT" ] || TEXT=$S/../README.md
# Recorded (docs/gpt2.md): 300 steps at 2 processes, held-out loss 2.871
# on GPL-3 with the tied head (2.699 untied; a uniform guess is ln 256 =
# 5.55; 3.346 at step 100); the bound leaves room for another BLAS's
# rounding
STEPS=300
LOSS_BOUND=3.0
HALF=20
RESUME_STEPS=40
# resumed at 3 processes vs 2 throughout, held-out loss after 40 steps:
# observed equal to 6 decimals (3.541387 both; untied 3.365527 both)
RESUME_TOL=0.0005
# 16-bit weights and activations (every GEMM operand rounded) vs f32 after
# PREC_STEPS steps, held-out loss: observed bf16 0.0035 (3.342144 vs
# 3.345602), fp16 0.0010 (3.346638); untied bf16 0.0038 (2.973066 vs
# 2.976819), fp16 0.0004.  (16-bit weights with f32 activations were
# 0.0040 and 0.0034.)
PREC_STEPS=100
PREC_TOL=0.01
if [ "$LEAN" = 1 ]; then
	STEPS=0
	PREC_STEPS=0
fi

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
"$G" prepare "$TEXT" "$tmp/text.tok" > "$tmp/prepare.log" || { echo "FAIL: prepare $TEXT"; exit 1; }
cat "$tmp/prepare.log"
cat > "$tmp/ddp.json" <<EOF
{"strategy": "ddp", "seed": 3,
 "optimizer": {"type": "adamw", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "dataloader": {"shuffle": true, "drop_last": true}}
EOF
ARGS="--data $tmp/text.tok --batch-size 12 --eval-batches 0"

# held-out loss of a log (the final one)
heldout() {
	sed -n 's/.*final held-out loss \([0-9.]*\).*/\1/p' "$1" | tail -1
}
# |a - b| <= tol
within() {
	awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'
}

# 0. bad input: exit 2 and a message naming the problem
head -c 100 "$tmp/text.tok" > "$tmp/cut.tok"
bad() {   # WHAT EXPECTED-TEXT ARGS...
	what=$1 want=$2
	shift 2
	"$G" --config "$tmp/ddp.json" "$@" > "$tmp/bad.log" 2>&1
	rc=$?
	if [ $rc = 2 ] && grep -q -- "$want" "$tmp/bad.log"; then
		echo "ok: $what: $(cat "$tmp/bad.log")"
	else
		fail "$what: exit $rc, expected 2 and '$want': $(cat "$tmp/bad.log")"
	fi
}
bad "a cut token file" "size does not match the token count" --data "$tmp/cut.tok"
bad "a missing token file" "cannot open" --data "$tmp/none.tok"
bad "a vocabulary larger than the model's" "set --vocab 256" --data "$tmp/text.tok" --vocab 100
bad "--dim not a multiple of --heads" "is not a multiple of --heads" --dim 33
bad "too little data for a batch" "fewer than one global batch" --data "$tmp/text.tok" \
	--seq-len 512 --batch-size 100
# a metrics file that cannot be opened: exit 1 (not usage), the path named
"$G" --config "$tmp/ddp.json" --data "$tmp/text.tok" --steps 1 --metrics "$tmp/no/such.jsonl" \
	> "$tmp/bad.log" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "metrics file '$tmp/no/such.jsonl': cannot open for appending" "$tmp/bad.log"; then
	echo "ok: an unwritable --metrics: $(cat "$tmp/bad.log")"
else
	fail "an unwritable --metrics: exit $rc, expected 1 and the path: $(cat "$tmp/bad.log")"
fi

# 1. learning
if [ "$STEPS" -gt 0 ]; then
	if "$A" launch -n 2 --config "$tmp/ddp.json" -- "$G" $ARGS --steps $STEPS --log-every 50 \
		--eval-every 100 --sample 48 > "$tmp/learn.log" 2>&1; then
		grep -E "step|sample" "$tmp/learn.log"
		l=$(heldout "$tmp/learn.log")
		if awk -v l="$l" -v b="$LOSS_BOUND" 'BEGIN { exit !(l != "" && l < b) }'; then
			echo "ok: held-out loss $l after $STEPS steps at 2 processes (bound $LOSS_BOUND)"
		else
			fail "held-out loss '$l' after $STEPS steps is not below $LOSS_BOUND"
		fi
		grep -q "sample (prompt|greedy continuation)" "$tmp/learn.log" || fail "no sample printed"
	else
		tail -5 "$tmp/learn.log"
		fail "the learning run failed"
	fi
fi

# 2. resume 2 -> 3 processes (the first run also writes --metrics)
"$A" launch -n 2 --config "$tmp/ddp.json" -- "$G" $ARGS --steps $RESUME_STEPS --log-every 10 \
	--checkpoint-every $HALF --project-dir "$tmp/ck" --metrics "$tmp/full.jsonl" \
	--peak-tflops 0.5 > "$tmp/full.log" 2>&1 ||
	{ tail -5 "$tmp/full.log"; fail "the checkpointed run failed"; }
# the metrics lines against the progress lines of the same run
if python3 - "$tmp/full.jsonl" "$tmp/full.log" > "$tmp/metrics.log" 2>&1 <<'PYEOF'
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
log = open(sys.argv[2]).read()
printed = {int(m.group(1)): float(m.group(2))
           for m in re.finditer(r"\] step (\d+) loss ([0-9.]+) ", log)}
final = float(re.search(r"final held-out loss ([0-9.]+)", log).group(1))
train = [r for r in recs if "loss" in r]
val = [r for r in recs if "val_loss" in r]
keys = {"step", "time", "loss", "lr", "samples_per_s", "loss_scale", "skipped",
        "tokens_per_s", "tflops", "mfu"}
assert [r["step"] for r in train] == [10, 20, 30, 40], [r["step"] for r in train]
for r in train:
    assert set(r) == keys, sorted(r)
    assert abs(r["loss"] - printed[r["step"]]) < 1e-6, (r, printed)
    assert abs(r["lr"] - 0.003) < 1e-12 and r["loss_scale"] == 1 and r["skipped"] == 0, r
    assert r["samples_per_s"] > 0 and abs(r["tokens_per_s"] - 32 * r["samples_per_s"]) < 1e-6 * r["tokens_per_s"], r
    # --peak-tflops 0.5 at 2 processes
    assert abs(r["mfu"] - r["tflops"] / 1.0) < 1e-9 * r["tflops"], r
assert len(val) == 1 and val[0]["step"] == 40 and abs(val[0]["val_loss"] - final) < 1e-6, val
print("metrics: %d progress records (loss %.6f at step 40, %.0f tokens/s), val_loss %.6f"
      % (len(train), train[-1]["loss"], train[-1]["tokens_per_s"], val[0]["val_loss"]))
PYEOF
then
	echo "ok: --metrics: $(tail -1 "$tmp/metrics.log")"
else
	cat "$tmp/metrics.log"
	head -3 "$tmp/full.jsonl"
	fail "--metrics lines do not match the run's progress lines"
fi
"$A" launch -n 3 --config "$tmp/ddp.json" -- "$G" $ARGS --steps $RESUME_STEPS --log-every 10 \
	--resume "$tmp/ck/checkpoint_$HALF" --project-dir "$tmp/ck" > "$tmp/resumed.log" 2>&1 ||
	{ tail -5 "$tmp/resumed.log"; fail "the resumed run (3 processes) failed"; }
a=$(heldout "$tmp/full.log")
b=$(heldout "$tmp/resumed.log")
grep -E "^\[rank 0\] step (30|40)" "$tmp/full.log" "$tmp/resumed.log"
if within "$a" "$b" "$RESUME_TOL" && grep -q "resumed from .* at step $HALF" "$tmp/resumed.log"; then
	echo "ok: resumed at 3 processes from step $HALF of a 2-process run: held-out loss $b vs $a"
else
	fail "resume 2 -> 3 processes: held-out loss '$b' vs '$a' uninterrupted (tolerance $RESUME_TOL)"
fi

# 3. recompute changes nothing
"$A" launch -n 1 --config "$tmp/ddp.json" -- "$G" $ARGS --steps 5 --save-final "$tmp/plain.st" \
	> "$tmp/plain.log" 2>&1 || fail "the run without recompute failed"
"$A" launch -n 1 --config "$tmp/ddp.json" -- "$G" $ARGS --steps 5 --recompute \
	--save-final "$tmp/recompute.st" > "$tmp/recompute.log" 2>&1 || fail "the --recompute run failed"
if cmp -s "$tmp/plain.st" "$tmp/recompute.st"; then
	echo "ok: --recompute: the same final weights, bitwise"
	grep "memory per rank" "$tmp/plain.log" "$tmp/recompute.log"
else
	fail "--recompute changed the final weights"
fi

# 4. bf16 and fp16 against f32
if [ "$PREC_STEPS" -gt 0 ]; then
	for p in no bf16 fp16; do
		"$A" launch -n 1 --config "$tmp/ddp.json" -- "$G" $ARGS --steps $PREC_STEPS \
			--log-every 50 --set mixed_precision=$p --metrics "$tmp/prec-$p.jsonl" \
			> "$tmp/prec-$p.log" 2>&1 ||
			{ tail -5 "$tmp/prec-$p.log"; fail "mixed_precision=$p: the run failed"; }
	done
	# the scaler's loss scale (65536 at the start, halved on overflow)
	# in fp16's metrics; 1 without a scaler
	s16=$(sed -n 's/.*"loss_scale":\([0-9.e+]*\).*/\1/p' "$tmp/prec-fp16.jsonl" | tail -1)
	sbf=$(sed -n 's/.*"loss_scale":\([0-9.e+]*\).*/\1/p' "$tmp/prec-bf16.jsonl" | tail -1)
	if awk -v a="$s16" -v b="$sbf" 'BEGIN { exit !(a != "" && a + 0 > 1 && b + 0 == 1) }'; then
		echo "ok: loss_scale in the metrics: fp16 $s16, bf16 $sbf"
	else
		fail "loss_scale in the metrics: fp16 '$s16' (expected > 1), bf16 '$sbf' (expected 1)"
	fi
	f=$(heldout "$tmp/prec-no.log")
	for p in bf16 fp16; do
		h=$(heldout "$tmp/prec-$p.log")
		if within "$h" "$f" "$PREC_TOL"; then
			echo "ok: mixed_precision=$p: held-out loss $h vs f32 $f after $PREC_STEPS steps"
		else
			fail "mixed_precision=$p: held-out loss '$h' vs f32 '$f' (tolerance $PREC_TOL)"
		fi
	done
fi
[ "$fails" = 0 ] && echo "gpt2-train: all passed" || echo "gpt2-train: $fails failure(s)"
[ "$fails" = 0 ]
