#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-checkpoint-gpu.sh TRAIN_MLP [nccl|shm]: checkpoints of
# examples/train_mlp --device cuda (suite gpu; docs/checkpoints.md).  The
# working weights and the strategy's state live on the device, so a save
# stages them through host memory and a load copies them back: 20 steps
# straight and 10 + save + resume + 10 must end bitwise equal (f32 with
# AdamW and gradient clipping, and bf16 mixed precision), at 1 rank.
# Exits 77 ("skipped: no GPU") when no CUDA device is visible.
set -u
prog=${1:?usage: test-checkpoint-gpu.sh TRAIN_MLP [nccl|shm]}
one=${2:-nccl}
prog=$(cd "$(dirname "$prog")" && pwd)/$(basename "$prog")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-ckpt-gpu.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
cd "$tmp" || exit 1

# The probe: a machine without a GPU (or a build without CUDA) says so.
if ! "$prog" --device cuda --steps 1 --hidden 8 --samples 64 --batch-size 32 --test-samples 0 \
	--no-eval --set "backend=$one" >probe.log 2>&1; then
	if grep -q "no CUDA device is visible" probe.log; then
		echo "skipped: no GPU"
		exit 77
	fi
	echo "FAIL: the probe run failed:"
	cat probe.log
	exit 1
fi

fails=0
ARGS="--device cuda --hidden 64 --layers 2 --batch-size 64 --samples 1024 --test-samples 0
      --seed 5 --log-every 100 --no-eval --set backend=$one --set optimizer.type=adamw
      --set max_grad_norm=0.5 --set scheduler.type=linear --set scheduler.total_steps=20
      --set scheduler.warmup_steps=4"
for mode in f32 bf16; do
	extra=""
	[ "$mode" = f32 ] || extra="--set mixed_precision=bf16"
	if ! timeout 300 "$prog" $ARGS $extra --steps 20 --save-final "straight-$mode.st" \
		>"out-$mode" 2>&1; then
		cat "out-$mode"; echo "FAIL: $mode: straight run"; fails=$((fails + 1)); continue
	fi
	if ! timeout 300 "$prog" $ARGS $extra --steps 10 --checkpoint-every 10 \
		--project-dir "p-$mode" >"out-$mode" 2>&1; then
		cat "out-$mode"; echo "FAIL: $mode: first half"; fails=$((fails + 1)); continue
	fi
	if ! timeout 300 "$prog" $ARGS $extra --steps 20 --resume "p-$mode/checkpoint_10" \
		--save-final "resumed-$mode.st" >"out-$mode" 2>&1; then
		cat "out-$mode"; echo "FAIL: $mode: resumed run"; fails=$((fails + 1)); continue
	fi
	grep -q "trained 10 steps" "out-$mode" ||
		{ cat "out-$mode"; echo "FAIL: $mode: the resumed run did not do 10 steps"; fails=$((fails + 1)); }
	if cmp "straight-$mode.st" "resumed-$mode.st"; then
		echo "ok: $mode: resumed on the GPU equals the uninterrupted run bit for bit"
	else
		echo "FAIL: $mode: resumed weights differ"; fails=$((fails + 1))
	fi
done
[ "$fails" = 0 ] || exit 1
echo PASS
