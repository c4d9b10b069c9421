#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-ddp-parity.sh PROG MODE: end-to-end training parity of the ddp
# strategy with tests/progs/train-parity.
#
#   single: one process (no launcher needed): unit hooks on/off give
#           identical results, 4 micro-steps of B/4 == 1 step of B, clipping
#           really clips, bf16 trains, missing/duplicate hooks are errors
#           naming the unit.
#   multi:  `accel launch -n 1/2/4` (and -n 4 over the tcp backend) on the
#           same global batches agree within
#           1e-6 relative (SGD with momentum, AdamW, AdamW with clipping,
#           with accumulation), every rank logs the same bucket plan, and a
#           bucket's reduction is issued before the last unit's backward.
#           Exits 77 (skipped) when `accel launch` cannot start 2 ranks.
set -u

prog=${1:?usage: test-ddp-parity.sh PROG single|multi}
mode=${2:?usage: test-ddp-parity.sh PROG single|multi}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-ddp-parity.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# Small buckets so the 3-unit model gets several: fc3 is 68 floats (272
# bytes), fc2 272 floats, fc1 144 floats.
buckets='"ddp": {"first_bucket_mb": 0.0002, "bucket_cap_mb": 0.0005}'
cat > "$tmp/sgd.json" <<EOF
{"optimizer": {"type": "sgd", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.001}},
 $buckets}
EOF
cat > "$tmp/adamw.json" <<EOF
{"optimizer": {"type": "adamw", "params": {"lr": 0.01, "weight_decay": 0.01},
               "no_decay": ["bias"]},
 "scheduler": {"type": "cosine", "warmup_steps": 2, "total_steps": 8}, $buckets}
EOF
cat > "$tmp/clip.json" <<EOF
{"optimizer": {"type": "adamw", "params": {"lr": 0.01}}, "max_grad_norm": 0.05, $buckets}
EOF
# The same with gradient accumulation over 4 micro-steps.
for c in sgd adamw clip; do
	sed 's/^{/{"gradient_accumulation_steps": 4, /' "$tmp/$c.json" > "$tmp/$c-acc.json"
done

# run1 CONFIG OUT [ARGS...]: one process, no launcher.
run1() {
	cfg=$1 out=$2
	shift 2
	ACCEL_CONFIG=$cfg "$prog" --out "$out" "$@" > "$out.log" 2>&1
}

# runn N CONFIG OUT [ARGS...]: N ranks through the launcher.
runn() {
	n=$1 cfg=$2 out=$3
	shift 3
	"$ACCEL_CLI" launch -n "$n" --config "$cfg" -- "$prog" --out "$out" "$@" > "$out.log" 2>&1
}

same() {
	# same A B RTOL WHAT
	if ! "$prog" --compare "$1" "$2" --rtol "$3" > "$tmp/cmp.log" 2>&1; then
		fail "$4"
		cat "$tmp/cmp.log"
	else
		echo "ok: $4: $(cat "$tmp/cmp.log")"
	fi
}

if [ "$mode" = single ]; then
	for c in sgd adamw clip; do
		run1 "$tmp/$c.json" "$tmp/$c.1" --metrics "$tmp/$c.metrics" ||
			{ fail "$c: world 1 run"; cat "$tmp/$c.1.log"; continue; }
		# Without hooks ddp reduces everything in accel_step: same numbers.
		run1 "$tmp/$c.json" "$tmp/$c.nohooks" --hooks none ||
			{ fail "$c: run without hooks"; cat "$tmp/$c.nohooks.log"; continue; }
		same "$tmp/$c.1" "$tmp/$c.nohooks" 0 "$c: hooks vs no hooks (bitwise)"
		run1 "$tmp/$c-acc.json" "$tmp/$c.acc" ||
			{ fail "$c: accumulation run"; cat "$tmp/$c.acc.log"; continue; }
		same "$tmp/$c.1" "$tmp/$c.acc" 1e-6 "$c: 4 micro-steps of B/4 vs 1 step of B"
	done
	# The clipped run clips (coef < 1) and the metrics lines are there.
	n=$(grep -c '"clip_coef":0\.' "$tmp/clip.metrics" 2>/dev/null)
	[ "${n:-0}" -ge 1 ] || fail "clip: no step was clipped ($(head -2 "$tmp/clip.metrics" 2>&1))"
	n=$(grep -c '"step":' "$tmp/sgd.metrics" 2>/dev/null)
	[ "${n:-0}" -eq 6 ] || fail "sgd: expected 6 metrics lines, got ${n:-0}"
	grep -q '"clip_coef":1\.0' "$tmp/sgd.metrics" || fail "sgd: clip_coef should be 1.0"
	# bf16 parameters with f32 masters train.
	run1 "$tmp/adamw.json" "$tmp/bf16" --dtype bf16 ||
		{ fail "bf16 run"; cat "$tmp/bf16.log"; }
	same "$tmp/adamw.1" "$tmp/bf16" 0.05 "bf16 close to f32"
	# Hook misuse is an error naming the unit.
	if run1 "$tmp/sgd.json" "$tmp/partial" --hooks partial; then
		fail "partial hooks were accepted"
	elif ! grep -q "never called accel_unit_post_backward.*'fc1'" "$tmp/partial.log"; then
		fail "partial hooks: message does not name unit fc1"
		cat "$tmp/partial.log"
	else
		echo "ok: partial hooks rejected: $(grep -o "ddp: .*" "$tmp/partial.log" | head -1)"
	fi
	if run1 "$tmp/sgd.json" "$tmp/twice" --hooks twice; then
		fail "duplicate post_backward was accepted"
	elif ! grep -q "called twice for unit 'fc3'" "$tmp/twice.log"; then
		fail "duplicate hook: message does not name unit fc3"
		cat "$tmp/twice.log"
	fi
	[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
	exit 0
fi

[ "$mode" = multi ] || { echo "unknown mode $mode"; exit 2; }
[ -n "${ACCEL_CLI:-}" ] || { echo "skipped: ACCEL_CLI is not set"; exit 77; }
echo '{}' > "$tmp/empty.json"
if ! "$ACCEL_CLI" launch -n 2 --config "$tmp/empty.json" -- "$prog" --steps 1 \
	> "$tmp/probe.log" 2>&1; then
	echo "skipped: accel launch -n 2 cannot run the parity program yet:"
	tail -5 "$tmp/probe.log"
	exit 77
fi

for c in sgd adamw clip; do
	run1 "$tmp/$c.json" "$tmp/$c.1" || { fail "$c: world 1"; cat "$tmp/$c.1.log"; continue; }
	for n in 2 4; do
		runn "$n" "$tmp/$c.json" "$tmp/$c.$n" ||
			{ fail "$c: world $n"; tail -20 "$tmp/$c.$n.log"; continue; }
		same "$tmp/$c.1" "$tmp/$c.$n" 1e-6 "$c: world 1 vs world $n"
	done
	runn 2 "$tmp/$c-acc.json" "$tmp/$c.acc2" ||
		{ fail "$c: world 2 with accumulation"; tail -20 "$tmp/$c.acc2.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.acc2" 1e-6 "$c: world 1 vs world 2 x 4 micro-steps"
	runn 4 "$tmp/$c.json" "$tmp/$c.4n" --hooks none ||
		{ fail "$c: world 4 without hooks"; tail -20 "$tmp/$c.4n.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.4n" 1e-6 "$c: world 1 vs world 4 without hooks"
	# the same gradients over the tcp backend (the one jobs across nodes use)
	"$ACCEL_CLI" launch -n 4 --config "$tmp/$c.json" --set backend=tcp -- "$prog" \
		--out "$tmp/$c.4tcp" > "$tmp/$c.4tcp.log" 2>&1 ||
		{ fail "$c: world 4 over tcp"; tail -20 "$tmp/$c.4tcp.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.4tcp" 1e-6 "$c: world 1 vs world 4 over tcp"
done

# A reduce hook gets pre-divided buckets and sums them (the host divides for
# it; without one the backend averages): the same numbers either way.  SGD,
# because AdamW hardly notices a gradient off by a constant factor.
if [ -n "${ACCEL_TEST_HOOK_DIR:-}" ] && [ -f "$ACCEL_TEST_HOOK_DIR/sum-hook.so" ]; then
	sed "s|^{|{\"plugins\": [\"sum-hook\"], \"plugin_dirs\": [\"$ACCEL_TEST_HOOK_DIR\"], |" \
		"$tmp/sgd.json" > "$tmp/hook.json"
	for n in 2 4; do
		if ! runn "$n" "$tmp/hook.json" "$tmp/hook.$n"; then
			fail "reduce hook: world $n"
			tail -20 "$tmp/hook.$n.log"
			continue
		fi
		grep -q "sum-hook: reducing bucket 0" "$tmp/hook.$n.log" ||
			fail "reduce hook: world $n did not go through sum-hook"
		same "$tmp/sgd.1" "$tmp/hook.$n" 1e-6 "sgd: world 1 vs world $n with a reduce hook"
	done
else
	fail "reduce hook: sum-hook.so not found (ACCEL_TEST_HOOK_DIR='${ACCEL_TEST_HOOK_DIR:-}')"
fi

# Bucket plans: every rank logs the same lines; launches overlap backward.
ACCEL_LOG_LEVEL=trace ACCEL_LOG_ALL_RANKS=1 runn 4 "$tmp/sgd.json" "$tmp/plan" --steps 2 ||
	{ fail "world 4 at trace level"; tail -20 "$tmp/plan.log"; }
for r in 0 1 2 3; do
	sed -n "s/.*\[accel rank $r\] debug: ddp: \(bucket [0-9]*: .*\)/\1/p" "$tmp/plan.log" \
		> "$tmp/plan.$r"
done
[ -s "$tmp/plan.0" ] || fail "rank 0 logged no bucket plan"
nb=$(wc -l < "$tmp/plan.0")
[ "$nb" -ge 2 ] || fail "expected several buckets, got $nb"
for r in 1 2 3; do
	cmp -s "$tmp/plan.0" "$tmp/plan.$r" || { fail "rank $r bucket plan differs from rank 0";
		diff "$tmp/plan.0" "$tmp/plan.$r"; }
done
echo "ok: $nb buckets, same plan on 4 ranks"
# "bucket 0 reduction issued at post_backward K of 3" with K < 3 on every rank.
for r in 0 1 2 3; do
	k=$(sed -n "s/.*\[accel rank $r\] trace: ddp: bucket 0 reduction issued at post_backward \([0-9]*\) of \([0-9]*\)/\1 \2/p" \
		"$tmp/plan.log" | head -1)
	set -- $k
	if [ $# -ne 2 ]; then
		fail "rank $r: no launch line for bucket 0"
	elif [ "$1" -ge "$2" ]; then
		fail "rank $r: bucket 0 issued at post_backward $1 of $2 (no overlap)"
	else
		echo "ok: rank $r issued bucket 0 at post_backward $1 of $2"
	fi
done

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
exit 0
