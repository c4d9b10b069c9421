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
#           same global batches agree within RTOL (SGD with momentum,
#           AdamW, AdamW with clipping, with accumulation); on every run
#           each rank's parameters are bitwise rank 0's; every rank logs the
#           same bucket plan; and the comm layer's timestamps
#           (ACCEL_TEST_COMM_TRACE) show bucket 0's reduction issued before
#           the backward of the last unit began, on every rank and step.
#           Exits 77 (skipped) only when `accel launch` cannot start two
#           processes of /bin/true here; a failing training run is a FAIL.
#
# Every run is also checked to have trained: each tensor moved by more than
# MOVED (relative) from its initial value.
set -u

prog=${1:?usage: test-ddp-parity.sh PROG single|multi}
mode=${2:?usage: test-ddp-parity.sh PROG single|multi}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-ddp-parity.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

# Tolerances: about 2.5 times the largest deviation observed (x86-64 with
# AVX2+FMA, shm and tcp backends); see docs/testing.md.
RTOL=4e-7        # world 1 vs 2/4, accumulation: observed 1.57e-7 (sgd, world 2)
RTOL_BF16=8e-3   # bf16 parameters vs f32: observed 2.75e-3 (adamw)
MOVED=1e-2       # smallest relative move of a tensor: observed > 5e-2

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

# runn N CONFIG OUT [ARGS...]: N ranks through the launcher; every rank
# writes OUT.RANK, and ranks 1..N-1 must hold exactly rank 0's values,
# which are then OUT.
runn() {
	n=$1 cfg=$2 out=$3
	shift 3
	"$ACCEL_CLI" launch -n "$n" --config "$cfg" -- "$prog" --out-ranks "$out" "$@" \
		> "$out.log" 2>&1 || return 1
	ranks_equal "$out" "$n"
	cp "$out.0" "$out"
}

# ranks_equal PREFIX N: PREFIX.1 .. PREFIX.N-1 are bitwise PREFIX.0.
ranks_equal() {
	r=1
	while [ "$r" -lt "$2" ]; do
		if ! "$prog" --compare "$1.0" "$1.$r" --rtol 0 > "$tmp/cmp.log" 2>&1; then
			fail "$(basename "$1"): rank $r differs from rank 0"
			cat "$tmp/cmp.log"
		fi
		r=$((r + 1))
	done
}

# moved INIT FINAL WHAT: every tensor of FINAL is more than MOVED (relative
# to its largest value) away from INIT: the run trained.
moved() {
	"$prog" --compare "$1" "$2" --rtol "$MOVED" > "$tmp/moved.log" 2>/dev/null
	line=$(tail -1 "$tmp/moved.log")
	nt=$(echo "$line" | sed -n 's/.* in \([0-9]*\) tensors, \([0-9]*\) outside.*/\1/p')
	no=$(echo "$line" | sed -n 's/.* in \([0-9]*\) tensors, \([0-9]*\) outside.*/\2/p')
	if [ -n "$nt" ] && [ "$nt" = "$no" ]; then
		echo "ok: $3 trained: all $nt tensors moved by more than $MOVED"
	else
		fail "$3 did not train: ${no:-?} of ${nt:-?} tensors moved by more than $MOVED ($line)"
	fi
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
		run1 "$tmp/$c.json" "$tmp/$c.init" --steps 0 ||
			{ fail "$c: world 1 initial parameters"; cat "$tmp/$c.init.log"; continue; }
		run1 "$tmp/$c.json" "$tmp/$c.1" --metrics "$tmp/$c.metrics" ||
			{ fail "$c: world 1 run"; cat "$tmp/$c.1.log"; continue; }
		moved "$tmp/$c.init" "$tmp/$c.1" "$c: world 1"
		# Without hooks ddp reduces everything in accel_step: same numbers.
		run1 "$tmp/$c.json" "$tmp/$c.nohooks" --hooks none ||
			{ fail "$c: run without hooks"; cat "$tmp/$c.nohooks.log"; continue; }
		same "$tmp/$c.1" "$tmp/$c.nohooks" 0 "$c: hooks vs no hooks (bitwise)"
		run1 "$tmp/$c-acc.json" "$tmp/$c.acc" ||
			{ fail "$c: accumulation run"; cat "$tmp/$c.acc.log"; continue; }
		same "$tmp/$c.1" "$tmp/$c.acc" "$RTOL" "$c: 4 micro-steps of B/4 vs 1 step of B"
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
	moved "$tmp/adamw.init" "$tmp/bf16" "bf16"
	same "$tmp/adamw.1" "$tmp/bf16" "$RTOL_BF16" "bf16 close to f32"
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
[ -n "${ACCEL_CLI:-}" ] || { echo "FAIL: ACCEL_CLI is not set (run through meson test)"; exit 1; }
echo '{}' > "$tmp/empty.json"
# The only outside prerequisite: this machine lets the launcher start two
# processes.  Whether it can train is what the test checks.
if ! "$ACCEL_CLI" launch -n 2 --config "$tmp/empty.json" -- /bin/true > "$tmp/probe.log" 2>&1; then
	echo "skipped: accel launch -n 2 cannot start /bin/true here:"
	tail -5 "$tmp/probe.log"
	exit 77
fi

for c in sgd adamw clip; do
	run1 "$tmp/$c.json" "$tmp/$c.init" --steps 0 ||
		{ fail "$c: initial parameters"; cat "$tmp/$c.init.log"; continue; }
	run1 "$tmp/$c.json" "$tmp/$c.1" || { fail "$c: world 1"; cat "$tmp/$c.1.log"; continue; }
	for n in 2 4; do
		runn "$n" "$tmp/$c.json" "$tmp/$c.$n" ||
			{ fail "$c: world $n"; tail -20 "$tmp/$c.$n.log"; continue; }
		moved "$tmp/$c.init" "$tmp/$c.$n" "$c: world $n"
		same "$tmp/$c.1" "$tmp/$c.$n" "$RTOL" "$c: world 1 vs world $n"
	done
	runn 2 "$tmp/$c-acc.json" "$tmp/$c.acc2" ||
		{ fail "$c: world 2 with accumulation"; tail -20 "$tmp/$c.acc2.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.acc2" "$RTOL" "$c: world 1 vs world 2 x 4 micro-steps"
	runn 4 "$tmp/$c.json" "$tmp/$c.4n" --hooks none ||
		{ fail "$c: world 4 without hooks"; tail -20 "$tmp/$c.4n.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.4n" "$RTOL" "$c: world 1 vs world 4 without hooks"
	# the same gradients over the tcp backend (the one jobs across nodes use)
	sed 's/^{/{"backend": "tcp", /' "$tmp/$c.json" > "$tmp/$c-tcp.json"
	runn 4 "$tmp/$c-tcp.json" "$tmp/$c.4tcp" ||
		{ fail "$c: world 4 over tcp"; tail -20 "$tmp/$c.4tcp.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.4tcp" "$RTOL" "$c: world 1 vs world 4 over tcp"
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
		same "$tmp/sgd.1" "$tmp/hook.$n" "$RTOL" "sgd: world 1 vs world $n with a reduce hook"
	done
else
	fail "reduce hook: sum-hook.so not found (ACCEL_TEST_HOOK_DIR='${ACCEL_TEST_HOOK_DIR:-}')"
fi

# Bucket plans: every rank logs the same lines.  The same run records what
# happened when: the comm layer's issue times of every collective
# (ACCEL_TEST_COMM_TRACE) and train-parity's backward windows (--trace).
ACCEL_TEST_COMM_TRACE=$tmp/comm ACCEL_LOG_LEVEL=trace ACCEL_LOG_ALL_RANKS=1 \
	runn 4 "$tmp/sgd.json" "$tmp/planrun" --steps 2 --trace "$tmp/bw" ||
	{ fail "world 4 at trace level"; tail -20 "$tmp/planrun.log"; }
for r in 0 1 2 3; do
	sed -n "s/.*\[accel rank $r\] debug: ddp: \(bucket [0-9]*: .*\)/\1/p" "$tmp/planrun.log" \
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
# Overlap, from the timestamps: in every step on every rank, the first
# collective issued after backward began is an allreduce (ddp issues bucket
# 0 first) issued before the backward of the last unit (fc1) began, so it
# was in flight while backward still ran; and all nb bucket reductions were
# issued before the last post_backward returned (none waited for accel_step).
for r in 0 1 2 3; do
	if [ ! -s "$tmp/bw.$r" ] || [ ! -s "$tmp/comm.$r" ]; then
		fail "rank $r: no backward trace or comm trace"
		continue
	fi
	if awk -v r="$r" -v nb="$nb" '
		FNR == NR { if ($1 == "backward") { k++; b[k] = $3; l[k] = $4; e[k] = $5 } next }
		{ n++; seq[n] = $1; op[n] = $2; is[n] = $3 }
		END {
			if (k < 2) { printf "rank %d: %d backward windows, expected 2\n", r, k; exit 1 }
			for (s = 1; s <= k; s++) {
				first = 0; during = 0
				for (i = 1; i <= n; i++) {
					if (is[i] < b[s]) continue
					if (!first || is[i] < is[first]) first = i
					if (is[i] <= e[s] && op[i] == "allreduce") during++
				}
				if (!first) { printf "rank %d step %d: nothing issued after backward began\n", r, s; bad = 1; continue }
				if (op[first] != "allreduce") {
					printf "rank %d step %d: first collective after backward began is %s #%s\n", r, s, op[first], seq[first]; bad = 1
				} else if (is[first] >= l[s]) {
					printf "rank %d step %d: bucket 0 (allreduce #%s) issued %.1f us after the last unit'"'"'s backward began (no overlap)\n", r, s, seq[first], (is[first] - l[s]) / 1e3; bad = 1
				} else {
					printf "ok: rank %d step %d: bucket 0 (allreduce #%s) in flight %.1f us before the last unit'"'"'s backward began\n", r, s, seq[first], (l[s] - is[first]) / 1e3
				}
				if (during != nb) { printf "rank %d step %d: %d of %d bucket reductions issued during backward\n", r, s, during, nb; bad = 1 }
			}
			exit bad
		}' "$tmp/bw.$r" "$tmp/comm.$r" > "$tmp/overlap.log"; then
		cat "$tmp/overlap.log"
	else
		fail "overlap on rank $r:"
		cat "$tmp/overlap.log"
	fi
done

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
exit 0
