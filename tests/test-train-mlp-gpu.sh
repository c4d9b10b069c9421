#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-train-mlp-gpu.sh TRAIN_MLP PYTHON [nccl|shm]: examples/train_mlp
# --device cuda against its CPU run (suite gpu).
#
# 20 steps of a 784-128-128-10 model, the same flags and seed on the CPU and
# on the GPU; the final parameters (--save-final) compared per tensor by
# tests/st_compare.py (largest difference over largest |value|):
#   - f32, SGD with momentum, AdamW, AdamW with clipping (the gradient norm
#     on the device): GPU 1 rank (nccl; shm staged when the build has no
#     nccl, third argument) == CPU within RTOL;
#   - the same on 2 ranks sharing the GPU through the shm backend (device
#     buckets staged through pinned host memory) == CPU and == 1 rank;
#   - 1 rank through shm (staged at world 1) == 1 rank through nccl;
#   - the default (compute on a non-blocking stream of train_mlp's own, set
#     with accel_set_stream) == --legacy-stream, bitwise, 1 and 2 ranks;
#   - clipping keeps its statistics on the device (the debug line);
#   - bf16 (mixed_precision=bf16, cuBLASLt bf16 with f32 accumulation)
#     trains: its loss falls, and its loss at the last step is within
#     BF16_LOSS of the f32 run's, on 1 and 2 ranks (its weights' distance
#     from the f32 run is printed, not checked);
#   - bf16 and fp16 (mixed_precision=fp16: f16 GEMMs, the scaler plugin's
#     loss scale) reach the f32 run's held-out accuracy ("final accuracy")
#     within ACC_POINTS (the issue's one point) on 1 and 2 ranks, 60 steps
#     with evaluation (ddp: zero does not run on a GPU yet, docs/zero.md).
# Tolerances (the lines "ok: ... max relative" print the differences):
# the design asks 1e-5; an H200 run (cuBLASLt 13.1) showed at most 2.4e-7
# for SGD and 1.6e-6 for AdamW with and without clipping, so RTOL_SGD is
# 6e-7 and RTOL 4e-6 (2.5x).  The bf16 run's final loss was 1e-4 from the
# f32 run's: BF16_LOSS is 1e-3 (bf16 GEMM algorithms differ between GPUs).
# AdamW runs with eps 1e-5: with torch's 1e-8 an update is about lr * sign(g)
# for a gradient near zero, so the last-bit differences of any two GEMM
# orders flip such updates; two CPU BLAS libraries (oneDNN and the
# example's own loops) end 6.8e-5 apart after these 20 steps with eps 1e-8,
# 1.2e-6 apart with 1e-5 (SGD: 3.2e-7).
# Exits 77 ("skipped: no GPU") when no CUDA device is visible.
set -u
prog=${1:?usage: test-train-mlp-gpu.sh TRAIN_MLP PYTHON}
python=${2:?usage: test-train-mlp-gpu.sh TRAIN_MLP PYTHON}
compare=$(dirname "$0")/st_compare.py
one=${3:-nccl}   # the backend of the 1-rank GPU runs
RTOL=${RTOL:-4e-6}
RTOL_SGD=${RTOL_SGD:-6e-7}
BF16_LOSS=${BF16_LOSS:-0.001}
ACC_POINTS=${ACC_POINTS:-0.01}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-mlp-gpu.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
. "$ACCEL_TEST_SRCDIR/tests/lib-compare.sh"

# comm.timeout_s 60: a collective that hangs fails in a minute, not the
# default 300 s (a GPU run's device time is short; these take milliseconds)
ARGS="--steps 20 --hidden 128 --layers 2 --batch-size 128 --samples 2048 --test-samples 0
      --seed 3 --log-every 10 --no-eval --set comm.timeout_s=60"

gpu_probe "$one"
[ -n "${ACCEL_CLI:-}" ] || { echo "FAIL: ACCEL_CLI is not set"; exit 1; }

cat > "$tmp/sgd.json" <<EOF
{"optimizer": {"type": "sgd", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.001}},
 "ddp": {"first_bucket_mb": 0.01, "bucket_cap_mb": 0.1}}
EOF
cat > "$tmp/adamw.json" <<EOF
{"optimizer": {"type": "adamw", "params": {"lr": 0.001, "weight_decay": 0.01, "eps": 1e-5},
               "no_decay": ["bias"]},
 "ddp": {"first_bucket_mb": 0.01, "bucket_cap_mb": 0.1}}
EOF
cat > "$tmp/clip.json" <<EOF
{"optimizer": {"type": "adamw", "params": {"lr": 0.001, "eps": 1e-5}}, "max_grad_norm": 0.5,
 "ddp": {"first_bucket_mb": 0.01, "bucket_cap_mb": 0.1}}
EOF

for c in sgd adamw clip; do
	tol=$RTOL
	[ "$c" = sgd ] && tol=$RTOL_SGD
	run "$c.cpu" "$tmp/$c.json"
	run "$c.gpu1" "$tmp/$c.json" --device cuda --set "backend=$one"
	run2 "$c.gpu2" "$tmp/$c.json"
	same "$c.cpu" "$c.gpu1" "$tol" "$c: GPU 1 rank vs CPU"
	same "$c.cpu" "$c.gpu2" "$tol" "$c: GPU 2 ranks (shm) vs CPU"
	same "$c.gpu1" "$c.gpu2" "$tol" "$c: GPU 1 rank vs 2 ranks"
done
# Clipping keeps the norm and the factor on the device (docs/streams.md,
# "Clipping on the device"): the debug line says which path the step took,
# on 1 rank (nccl) and 2 ranks (shm, staged buckets on the device).
for w in 1 2; do
	if [ "$w" = 1 ]; then
		# shellcheck disable=SC2086
		ACCEL_LOG_LEVEL=debug ACCEL_CONFIG="$tmp/clip.json" "$prog" $ARGS --device cuda \
			--set "backend=$one" --steps 2 > "$tmp/clipdbg$w.log" 2>&1
	else
		# shellcheck disable=SC2086
		ACCEL_LOG_LEVEL=debug "$ACCEL_CLI" launch -n 2 --config "$tmp/clip.json" -- "$prog" \
			$ARGS --device cuda --set backend=shm --steps 2 > "$tmp/clipdbg$w.log" 2>&1
	fi
	# the choice is logged first; a step that then falls back logs "on the host"
	if grep -q "gradient statistics and clipping: on the device" "$tmp/clipdbg$w.log" &&
		! grep -q "gradient statistics and clipping: on the host" "$tmp/clipdbg$w.log"; then
		echo "ok: clip: the statistics stay on the device ($w rank(s))"
	else
		fail "clip, $w rank(s): the statistics did not stay on the device:" \
			"$(grep -i 'gradient statistics' "$tmp/clipdbg$w.log" || tail -3 "$tmp/clipdbg$w.log")"
	fi
done
grep -q "cuBLASLt f32" "$tmp/adamw.gpu1.log" ||
	fail "the GPU run does not say it computes with cuBLASLt f32: $(head -1 "$tmp/adamw.gpu1.log")"

# World 1 through shm stages the buckets through host memory: same bits
# as nccl's (an average over one rank is the bucket itself).
if [ "$one" = nccl ]; then
	run adamw.shm1 "$tmp/adamw.json" --device cuda --set backend=shm
	same adamw.gpu1 adamw.shm1 0 "adamw: GPU 1 rank through shm vs nccl (bitwise)"
fi

# The default GPU run computes on a non-blocking stream of its own, handed
# to accel_set_stream (ddp's reductions wait on it, no host sync);
# --legacy-stream computes on CUDA's legacy stream: the same kernels in the
# same order, so the same bits, on 1 and 2 ranks.
run adamw.legacy "$tmp/adamw.json" --device cuda --set "backend=$one" --legacy-stream
same adamw.gpu1 adamw.legacy 0 "adamw: own stream vs legacy stream, 1 rank (bitwise)"
run2 adamw.legacy2 "$tmp/adamw.json" --legacy-stream
same adamw.gpu2 adamw.legacy2 0 "adamw: own stream vs legacy stream, 2 ranks (bitwise)"
if ! "$prog" --device cuda --steps 2 --hidden 8 --samples 64 --batch-size 32 --test-samples 0 \
	--no-eval --json --set "backend=$one" 2>&1 | grep -q '"stream":"own"'; then
	fail "the --json line of a GPU run does not say \"stream\":\"own\""
fi

# bf16: trains, and its loss stays near the f32 run's.
run adamw.bf16 "$tmp/adamw.json" --device cuda --set "backend=$one" --set mixed_precision=bf16
run2 adamw.bf16x2 "$tmp/adamw.json" --set mixed_precision=bf16
grep -q "cuBLASLt bf16" "$tmp/adamw.bf16.log" ||
	fail "the bf16 run does not say it computes in bf16: $(head -1 "$tmp/adamw.bf16.log")"
# loss_at LOG STEP: the progress line's loss ("step    10/20  loss 1.2345",
# rank 0's line under the launcher)
loss_at() {
	sed -n "s|.*step *$2/[0-9]* *loss \([0-9.]*\).*|\1|p" "$tmp/$1.log" | head -1
}
f32=$(loss_at adamw.gpu1 20)
for r in adamw.bf16 adamw.bf16x2; do
	first=$(loss_at $r 10)
	last=$(loss_at $r 20)
	if [ -z "$first" ] || [ -z "$last" ] || [ -z "$f32" ] ||
		! awk -v a="$first" -v b="$last" -v f="$f32" -v tol="$BF16_LOSS" \
			'BEGIN { d = b - f; if (d < 0) d = -d; exit !(b < a && d <= tol) }'; then
		fail "$r: loss at step 10 '$first', at step 20 '$last' (f32: '$f32', tolerance $BF16_LOSS)"
	else
		echo "ok: $r: loss $first -> $last (f32 $f32; difference" \
			"$(awk -v b="$last" -v f="$f32" 'BEGIN { d = b - f; print d < 0 ? -d : d }')," \
			"tolerance $BF16_LOSS)"
	fi
	[ -f "$tmp/$r.st" ] && [ -f "$tmp/adamw.gpu1.st" ] &&
		echo "info: $r vs f32 weights: $("$python" "$compare" "$tmp/adamw.gpu1.st" "$tmp/$r.st" 1 | tail -1)"
done

# bf16 and fp16 against f32: the held-out accuracy after 60 steps, 1 rank
# (the 1-rank backend) and 2 ranks sharing the GPU (shm).  Not yet run on a
# GPU (written without one): the CPU runs of tests/test-precision-mlp.sh
# are within 0.1 point.
EVAL_ARGS="--steps 60 --hidden 128 --layers 2 --batch-size 128 --samples 4096 --test-samples 2000
      --seed 3 --log-every 20 --device cuda --set comm.timeout_s=60"
accuracy() {   # LOG: the "final accuracy" figure the program printed
	sed -n 's/.*final accuracy \([0-9.]*\).*/\1/p' "$1" | tail -1
}
for mp in no bf16 fp16; do
	# shellcheck disable=SC2086
	ACCEL_CONFIG="$tmp/adamw.json" "$prog" $EVAL_ARGS --set "backend=$one" \
		--set mixed_precision=$mp > "$tmp/acc-$mp-1.log" 2>&1 ||
		{ fail "accuracy run $mp, 1 rank"; tail -5 "$tmp/acc-$mp-1.log"; }
	# shellcheck disable=SC2086
	"$ACCEL_CLI" launch -n 2 --config "$tmp/adamw.json" -- "$prog" $EVAL_ARGS --set backend=shm \
		--set mixed_precision=$mp > "$tmp/acc-$mp-2.log" 2>&1 ||
		{ fail "accuracy run $mp, 2 ranks"; tail -5 "$tmp/acc-$mp-2.log"; }
done
grep -q "cuBLASLt f16" "$tmp/acc-fp16-1.log" ||
	fail "the fp16 run does not say it computes in f16: $(head -1 "$tmp/acc-fp16-1.log")"
ref_acc=$(accuracy "$tmp/acc-no-1.log")
for r in acc-bf16-1 acc-bf16-2 acc-fp16-1 acc-fp16-2; do
	a=$(accuracy "$tmp/$r.log")
	if [ -z "$a" ] || [ -z "$ref_acc" ] || ! awk -v a="$a" -v r="$ref_acc" -v t="$ACC_POINTS" \
		'BEGIN { d = a - r; exit !(d <= t + 1e-9 && -d <= t + 1e-9) }'; then
		fail "$r: final accuracy '$a', f32 '$ref_acc' (within $ACC_POINTS)"
	else
		echo "ok: $r: final accuracy $a (f32 $ref_acc)"
	fi
done

# A usage error names the choices.
if "$prog" --device tpu > "$tmp/bad.log" 2>&1; then
	fail "--device tpu was accepted"
elif ! grep -q "cpu, cuda or cuda:N" "$tmp/bad.log"; then
	fail "--device tpu: $(cat "$tmp/bad.log")"
fi

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all GPU training checks passed"
exit 0
