#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-ddp-parity.sh PROG MODE: end-to-end training parity of the ddp
# strategy with tests/progs/train-parity.
#
#   single: one process (no launcher needed): unit hooks on/off give
#           identical results, 4 micro-steps of B/4 == 1 step of B, clipping
#           really clips (one plain SGD step moves the parameters by
#           lr x max_grad_norm when clipped, by lr x the gradient norm when
#           not), bf16 trains, missing/duplicate hooks are errors naming
#           the unit.
#   multi:  `accel launch -n 1/2/4` (and -n 4 over the tcp backend) on the
#           same global batches agree within RTOL (SGD with momentum,
#           SGD with clipping, AdamW, AdamW with clipping, with
#           accumulation; SGD rows catch gradients summed instead of
#           averaged, which AdamW hardly notices); on every run
#           each rank's parameters are bitwise rank 0's; every rank logs the
#           same bucket plan; and the comm layer's timestamps
#           (ACCEL_TEST_COMM_TRACE) show bucket 0's reduction issued before
#           the backward of the last unit began, on every rank and step.
#           A rank-dependent initialisation (--rank-init) ends, after
#           accel_prepare, bitwise equal to the one-process run on every
#           rank (ddp broadcasts rank 0's values), and trains to the
#           one-process result.
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
RTOL=4e-7        # world 1 vs 2/4, accumulation: observed 1.57e-7 (sgd, world 2),
                 # 1.4e-7 (clip: AdamW with clipping, world 4)
RTOL_ADAMW=2.5e-7   # adamw rows: observed 8.89e-8 (world 4)
RTOL_SGDCLIP=2.5e-7 # sgdclip rows: observed 8.74e-8 (world 2 x 4 micro-steps)
CLIP_RTOL=4e-6   # |step| / lr vs max_grad_norm: observed 1.3e-6; vs grad_norm: 3.8e-8
RTOL_BF16=8e-3   # bf16 parameters vs f32: observed 2.75e-3 (adamw)
MOVED=1e-2       # smallest relative move of a tensor: observed > 5e-2

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# tol CONFIG: the tolerance of world 1 vs N and of accumulation for CONFIG.
tol() {
	case $1 in
	adamw) echo "$RTOL_ADAMW" ;;
	sgdclip) echo "$RTOL_SGDCLIP" ;;
	*) echo "$RTOL" ;;
	esac
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
# SGD with momentum and clipping: max_grad_norm among the steps' gradient
# norms (observed at world 1: 4.04, 4.02, 2.89 clipped; 1.69, 1.02, 0.75
# not), so some steps are clipped and some not, and a gradient off by a
# constant factor shows.
cat > "$tmp/sgdclip.json" <<EOF
{"optimizer": {"type": "sgd", "params": {"lr": 0.05, "momentum": 0.9}}, "max_grad_norm": 2.5,
 $buckets}
EOF
# The same with gradient accumulation over 4 micro-steps.
for c in sgd adamw clip sgdclip; do
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

# stepnorm A B: the Euclidean norm of B - A over every parameter.
stepnorm() {
	paste "$1" "$2" | awk '{ d = $6 - $3; s += d * d } END { printf "%.9e\n", sqrt(s) }'
}

# relclose A B RTOL: |A - B| <= RTOL * |B|.
relclose() {
	awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d;
		if (b < 0) b = -b; exit !(d <= t * b) }'
}

if [ "$mode" = single ]; then
	for c in sgd adamw clip sgdclip; do
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
		same "$tmp/$c.1" "$tmp/$c.acc" "$(tol "$c")" "$c: 4 micro-steps of B/4 vs 1 step of B"
	done
	# Clipping by what it does: one plain SGD step from the initial values
	# moves the parameters by lr x the gradient norm (max_grad_norm 1000:
	# not clipped, the norm reported), and with max_grad_norm 0.1, below
	# that norm, by lr x max_grad_norm.
	echo '{"optimizer": {"type": "sgd", "params": {"lr": 0.05}}, "max_grad_norm": 1000}' \
		> "$tmp/sgd1.json"
	echo '{"optimizer": {"type": "sgd", "params": {"lr": 0.05}}, "max_grad_norm": 0.1}' \
		> "$tmp/sgd1clip.json"
	if run1 "$tmp/sgd1.json" "$tmp/sgd1" --steps 1 --metrics "$tmp/sgd1.metrics" &&
	   run1 "$tmp/sgd1clip.json" "$tmp/sgd1clip" --steps 1; then
		gn=$(sed -n 's/.*"grad_norm":\([^,}]*\).*/\1/p' "$tmp/sgd1.metrics" | head -1)
		u0=$(stepnorm "$tmp/sgd.init" "$tmp/sgd1" | awk '{ printf "%.9e", $1 / 0.05 }')
		u1=$(stepnorm "$tmp/sgd.init" "$tmp/sgd1clip" | awk '{ printf "%.9e", $1 / 0.05 }')
		echo "one SGD step: |step|/lr = $u0 unclipped (grad_norm $gn), $u1 with max_grad_norm 0.1"
		awk -v g="${gn:-0}" 'BEGIN { exit !(g > 0.2) }' ||
			fail "clip: the first step's grad_norm '$gn' is not above 2 x max_grad_norm 0.1"
		relclose "$u0" "${gn:-0}" "$CLIP_RTOL" ||
			fail "unclipped SGD step: |step|/lr $u0 is not the gradient norm $gn"
		relclose "$u1" 0.1 "$CLIP_RTOL" ||
			fail "clipped SGD step: |step|/lr $u1 is not max_grad_norm 0.1 (clipping did not clip)"
	else
		fail "one-step SGD runs"
		cat "$tmp/sgd1.log" "$tmp/sgd1clip.log"
	fi
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

for c in sgd adamw clip sgdclip; do
	run1 "$tmp/$c.json" "$tmp/$c.init" --steps 0 ||
		{ fail "$c: initial parameters"; cat "$tmp/$c.init.log"; continue; }
	run1 "$tmp/$c.json" "$tmp/$c.1" || { fail "$c: world 1"; cat "$tmp/$c.1.log"; continue; }
	for n in 2 4; do
		runn "$n" "$tmp/$c.json" "$tmp/$c.$n" ||
			{ fail "$c: world $n"; tail -20 "$tmp/$c.$n.log"; continue; }
		moved "$tmp/$c.init" "$tmp/$c.$n" "$c: world $n"
		same "$tmp/$c.1" "$tmp/$c.$n" "$(tol "$c")" "$c: world 1 vs world $n"
	done
	runn 2 "$tmp/$c-acc.json" "$tmp/$c.acc2" ||
		{ fail "$c: world 2 with accumulation"; tail -20 "$tmp/$c.acc2.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.acc2" "$(tol "$c")" "$c: world 1 vs world 2 x 4 micro-steps"
	runn 4 "$tmp/$c.json" "$tmp/$c.4n" --hooks none ||
		{ fail "$c: world 4 without hooks"; tail -20 "$tmp/$c.4n.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.4n" "$(tol "$c")" "$c: world 1 vs world 4 without hooks"
	# the same gradients over the tcp backend (the one jobs across nodes use)
	sed 's/^{/{"backend": "tcp", /' "$tmp/$c.json" > "$tmp/$c-tcp.json"
	runn 4 "$tmp/$c-tcp.json" "$tmp/$c.4tcp" ||
		{ fail "$c: world 4 over tcp"; tail -20 "$tmp/$c.4tcp.log"; continue; }
	same "$tmp/$c.1" "$tmp/$c.4tcp" "$(tol "$c")" "$c: world 1 vs world 4 over tcp"
done

# Every rank starts from rank 0's values: fc1.bias's init is shifted by
# 0.5 x rank (--rank-init); after accel_prepare every rank holds the
# one-process values bitwise, and after training the one-process result.
run1 "$tmp/sgd.json" "$tmp/ri.init" --steps 0 --rank-init ||
	{ fail "rank-init: world 1 initial parameters"; cat "$tmp/ri.init.log"; }
run1 "$tmp/sgd.json" "$tmp/ri.1" --rank-init || { fail "rank-init: world 1"; cat "$tmp/ri.1.log"; }
for n in 2 4; do
	runn "$n" "$tmp/sgd.json" "$tmp/ri0.$n" --steps 0 --rank-init ||
		{ fail "rank-init: world $n, no step"; tail -20 "$tmp/ri0.$n.log"; continue; }
	same "$tmp/ri.init" "$tmp/ri0.$n" 0 "rank-init: world $n after accel_prepare vs world 1"
done
runn 2 "$tmp/sgd.json" "$tmp/ri.2" --rank-init || { fail "rank-init: world 2"; tail -20 "$tmp/ri.2.log"; }
same "$tmp/ri.1" "$tmp/ri.2" "$RTOL" "rank-init: world 1 vs world 2 trained"

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
