#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-compress.sh CHECK TRAIN_MLP PART: the compress plugin
# (docs/compress.md) at 2 ranks under `accel launch`.
#   invariants  tests/progs/compress-check (CHECK) under ddp: top-k per
#               bucket and per tensor (error feedback, warm-up, min_numel),
#               PowerSGD rank 2 on rank-2 gradients (the exact mean),
#               fp16/bf16, a skipped step (tests/fixtures/skip), each with
#               its invariants checked every step and the bytes the comm
#               layer counted against ratio x dense + indices
#   refusals    top-k / PowerSGD refused under zero stage 2 and fsdp
#               FULL_SHARD naming both sides, accepted (and run) under zero
#               stage 1 and fsdp NO_SHARD; fp16 runs (and is checked) under
#               zero stage 2 and fsdp FULL_SHARD; start_iter with powersgd
#   resume      save after 5 steps, resume: the next 5 steps equal the
#               uninterrupted run's bit for bit (top-k and PowerSGD); at 1
#               rank and with another bucket layout the residuals start
#               from zero and the log says so
#   mlp         examples/train_mlp (TRAIN_MLP) at 2 ranks, 300 steps (100
#               with COMPRESS_TEST_SUBSET=1, under the sanitizers): top-k 1% with
#               error feedback and PowerSGD rank 2 reach >= 90% of the
#               uncompressed final accuracy in the same steps, fp16/bf16
#               within one point; --metrics lines carry the compress stats
# Exits 77 only when `accel launch` cannot start two processes.
set -u

C=${1:?usage: test-compress.sh CHECK TRAIN_MLP PART}
T=${2:?}
PART=${3:?}
: "${ACCEL_CLI:?not set (run through meson test)}"
A=$ACCEL_CLI
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-compress.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET ACCEL_TEST_SKIP_CALL
fails=0

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

# cfg FILE STRATEGY_JSON COMPRESS_JSON [EXTRA_TOP_JSON]
cfg() {
	cat > "$1" <<EOF2
{$2, "plugins": ["compress"${4:+, $4}],
 "optimizer": {"type": "sgd", "params": {"lr": 1, "weight_decay": 0}},
 "compress": {$3}}
EOF2
}

# check NAME N CONFIG MODE STEPS [ARGS...]: run compress-check; its
# per-rank reports must start with 0
check() {
	name=$1 n=$2 c=$3 mode=$4 steps=$5
	shift 5
	out="$tmp/$name"
	mkdir -p "$out"
	if ! "$A" launch -n "$n" --config "$c" -- "$C" "$mode" "$out" "$steps" "$@" \
		> "$out/launch.log" 2>&1; then
		fail "$name: the run failed"
		tail -15 "$out/launch.log"
		return 1
	fi
	r=0
	while [ "$r" -lt "$n" ]; do
		if ! head -c 2 "$out/check-$r" 2>/dev/null | grep -q '^0 '; then
			fail "$name: rank $r: $(cat "$out/check-$r" 2>/dev/null)"
			return 1
		fi
		r=$((r + 1))
	done
	echo "ok: $name: $(cut -c3- "$out/check-0")"
	return 0
}

# refuse NAME CONFIG WANT...: context creation or prepare fails at 2 ranks
# and rank 0's message has every WANT
refuse() {
	name=$1 c=$2
	shift 2
	out="$tmp/$name"
	mkdir -p "$out"
	if "$A" launch -n 2 --config "$c" -- "$C" none "$out" 1 > "$out/launch.log" 2>&1; then
		fail "$name: accepted"
		return 1
	fi
	msg=$(cat "$out/check-0" 2>/dev/null)
	for want in "$@"; do
		case "$msg" in
		*"$want"*) ;;
		*) fail "$name: message lacks '$want': $msg"; return 1 ;;
		esac
	done
	echo "ok: $name refused: $msg"
}

DDP='"strategy": "ddp"'
case $PART in
invariants)
	cfg "$tmp/topk.json" "$DDP" '"method": "topk", "ratio": 0.05, "start_iter": 2'
	check topk-bucket 2 "$tmp/topk.json" topk 8
	cfg "$tmp/topkt.json" "$DDP" \
		'"method": "topk", "ratio": 0.1, "granularity": "tensor", "min_numel": 10'
	check topk-tensor 2 "$tmp/topkt.json" topk 6
	cfg "$tmp/psgd.json" "$DDP" \
		'"method": "powersgd", "matrix_approximation_rank": 2, "start_powerSGD_iter": 2'
	check powersgd-rank2-warm 2 "$tmp/psgd.json" powersgd 8
	cfg "$tmp/psgdc2.json" "$DDP" '"method": "powersgd", "matrix_approximation_rank": 2,
	 "start_powerSGD_iter": 0, "warm_start": false'
	check powersgd-rank2-cold 2 "$tmp/psgdc2.json" powersgd 12
	cfg "$tmp/psgdcold.json" "$DDP" '"method": "powersgd", "matrix_approximation_rank": 3,
	 "start_powerSGD_iter": 0, "warm_start": false, "seed": 7'
	check powersgd-rank3-cold 2 "$tmp/psgdcold.json" powersgd 4
	cfg "$tmp/fp16.json" "$DDP" '"method": "fp16"'
	check fp16 2 "$tmp/fp16.json" fp16 3
	cfg "$tmp/bf16.json" "$DDP" '"method": "bf16"'
	check bf16 2 "$tmp/bf16.json" bf16 3
	if [ -f "${ACCEL_TEST_SKIP_DIR:-}/skip-hook.so" ]; then
		cfg "$tmp/skip.json" "$DDP, \"plugin_dirs\": [\"$ACCEL_TEST_SKIP_DIR\"]" \
			'"method": "topk", "ratio": 0.05' '"skip-hook"'
		ACCEL_TEST_SKIP_CALL=2 check topk-skip 2 "$tmp/skip.json" topk 5 &&
			{ grep -q "1 skipped" "$tmp/topk-skip/check-0" || fail "topk-skip: no step was skipped"; }
		cfg "$tmp/pskip.json" "$DDP, \"plugin_dirs\": [\"$ACCEL_TEST_SKIP_DIR\"]" \
			'"method": "powersgd", "matrix_approximation_rank": 2, "start_powerSGD_iter": 0' \
			'"skip-hook"'
		ACCEL_TEST_SKIP_CALL=2 check powersgd-skip 2 "$tmp/pskip.json" powersgd 5
	else
		fail "skip-hook.so not found (ACCEL_TEST_SKIP_DIR='${ACCEL_TEST_SKIP_DIR:-}')"
	fi
	;;
refusals)
	Z2='"strategy": "zero", "zero_optimization": {"stage": 2}'
	Z1='"strategy": "zero", "zero_optimization": {"stage": 1, "reduce_scatter": false}'
	Z1RS='"strategy": "zero", "zero_optimization": {"stage": 1}'
	FS='"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}'
	NS='"strategy": "fsdp", "fsdp": {"sharding_strategy": "NO_SHARD"}'
	cfg "$tmp/z2t.json" "$Z2" '"method": "topk"'
	refuse topk-zero2 "$tmp/z2t.json" "compress: top-k needs all-reduce; strategy 'zero' reduces with reduce-scatter" "stage 2"
	cfg "$tmp/fst.json" "$FS" '"method": "powersgd"'
	refuse powersgd-fsdp-full "$tmp/fst.json" "compress: PowerSGD needs all-reduce; strategy 'fsdp' reduces with reduce-scatter" "FULL_SHARD"
	cfg "$tmp/psi.json" "$DDP" '"method": "powersgd", "start_iter": 5'
	refuse powersgd-start-iter "$tmp/psi.json" "compress.start_iter" "start_powerSGD_iter"
	cfg "$tmp/z1rs.json" "$Z1RS" '"method": "topk"'
	refuse topk-zero1-reduce-scatter "$tmp/z1rs.json" "top-k needs all-reduce" "reduce_scatter false"
	# accepted: run 3 steps (the exact checks are ddp's, above)
	cfg "$tmp/z1t.json" "$Z1" '"method": "topk", "ratio": 0.05'
	check topk-zero1 2 "$tmp/z1t.json" none 3
	cfg "$tmp/nst.json" "$NS" '"method": "topk", "ratio": 0.05'
	check topk-fsdp-noshard 2 "$tmp/nst.json" none 3
	cfg "$tmp/nsp.json" "$NS" '"method": "powersgd", "matrix_approximation_rank": 2, "start_powerSGD_iter": 0'
	check powersgd-fsdp-noshard 2 "$tmp/nsp.json" none 3
	cfg "$tmp/z2h.json" "$Z2" '"method": "fp16"'
	check fp16-zero2 2 "$tmp/z2h.json" fp16 3
	cfg "$tmp/fsh.json" "$FS" '"method": "bf16"'
	check bf16-fsdp-full 2 "$tmp/fsh.json" bf16 3
	;;
resume)
	for m in topk powersgd; do
		if [ $m = topk ]; then mc='"method": "topk", "ratio": 0.05, "granularity": "tensor"'
		else mc='"method": "powersgd", "matrix_approximation_rank": 2, "start_powerSGD_iter": 2'; fi
		cfg "$tmp/$m.json" "$DDP" "$mc"
		check "$m-full" 2 "$tmp/$m.json" $m 10 --save-at 5 "$tmp/$m.ckpt" \
			--record "$tmp/$m.ref" --no-exact || continue
		check "$m-resumed" 2 "$tmp/$m.json" $m 5 --first 5 --load "$tmp/$m.ckpt" \
			--compare "$tmp/$m.ref" --no-exact
		ACCEL_LOG_LEVEL=info check "$m-other-world" 1 "$tmp/$m.json" $m 3 --first 5 \
			--load "$tmp/$m.ckpt" --zero-after-load --no-exact &&
			{ grep -q "saved at world size 2; this run has 1 ranks: error-feedback residuals (one per rank) start from zero" \
				"$tmp/$m-other-world/launch.log" || fail "$m-other-world: no info line"; }
		cfg "$tmp/$m.small.json" '"strategy": "ddp", "ddp": {"bucket_cap_mb": 0.0002, "first_bucket_mb": 0.0002}' "$mc"
		ACCEL_LOG_LEVEL=info check "$m-other-layout" 2 "$tmp/$m.small.json" $m 3 --first 5 \
			--load "$tmp/$m.ckpt" --zero-after-load --no-exact &&
			{ grep -q "had no matching residual in the checkpoint" \
				"$tmp/$m-other-layout/launch.log" || fail "$m-other-layout: no info line"; }
	done
	;;
mlp)
	if [ "$T" = none ] || [ ! -x "$T" ]; then
		echo "skipped: train_mlp is not built"
		exit 77
	fi
	steps=300
	[ "${COMPRESS_TEST_SUBSET:-0}" = 1 ] && steps=100   # under the sanitizers
	ARGS="--hidden 64 --layers 2 --inputs 32 --classes 8 --samples 4096 --test-samples 1024 \
--batch-size 64 --steps $steps --log-every 50"
	for m in none fp16 bf16 topk powersgd; do
		case $m in
		none) c= ;;
		topk) c='"method": "topk", "ratio": 0.01, "use_error_feedback": true' ;;
		powersgd) c='"method": "powersgd", "matrix_approximation_rank": 2, "start_powerSGD_iter": 10' ;;
		*) c="\"method\": \"$m\"" ;;
		esac
		if [ -z "$c" ]; then
			echo '{"strategy": "ddp", "optimizer": {"type": "adamw", "params": {"lr": 0.003}}}' > "$tmp/$m.json"
		else
			echo "{\"strategy\": \"ddp\", \"plugins\": [\"compress\"], \"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 0.003}}, \"compress\": {$c}}" > "$tmp/$m.json"
		fi
		if ! "$A" launch -n 2 --config "$tmp/$m.json" -- "$T" $ARGS --metrics "$tmp/$m.metrics" \
			> "$tmp/$m.log" 2>&1; then
			fail "train_mlp $m"
			tail -10 "$tmp/$m.log"
			continue
		fi
		acc=$(sed -n 's/.*final accuracy \([0-9.]*\).*/\1/p' "$tmp/$m.log" | head -1)
		eval "acc_$m=\${acc:-0}"
		echo "train_mlp $m: final accuracy ${acc:-?}"
		if [ $m != none ] && ! grep -q '"compress_ratio"' "$tmp/$m.metrics"; then
			fail "train_mlp $m: --metrics lines lack the compress stats"
			head -3 "$tmp/$m.metrics"
		fi
	done
	for m in fp16 bf16 topk powersgd; do
		eval "a=\$acc_$m"
		if [ $m = fp16 ] || [ $m = bf16 ]; then
			awk -v a="$a" -v b="$acc_none" 'BEGIN { exit !(a >= b - 0.01) }' ||
				fail "train_mlp $m: accuracy $a, more than one point below $acc_none"
		else
			awk -v a="$a" -v b="$acc_none" 'BEGIN { exit !(a >= 0.9 * b) }' ||
				fail "train_mlp $m: accuracy $a < 90% of uncompressed $acc_none"
		fi
	done
	;;
*)
	echo "unknown part $PART"
	exit 2
	;;
esac
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all compress $PART checks passed"
