#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/train-cuda.sh: `train_mlp --device cuda` next to PyTorch with
# Hugging Face Accelerate, in one run on one GPU, same model and batch:
#
#   accel               examples/train_mlp --device cuda (strategy ddp, the
#                       nccl backend at world 1, AdamW on the device, cuBLASLt
#                       GEMMs), one process, computing on a non-blocking
#                       stream of its own (accel_set_stream)
#   accel-legacy        the same with --legacy-stream (CUDA's legacy default
#                       stream), when LEGACY=1
#   pytorch-accelerate  bench/torch_accel_mlp.py: torch.nn.Linear MLP,
#                       Accelerator(mixed_precision=...), AdamW(fused=True);
#                       "pytorch" (plain autocast) where accelerate is not
#                       installed
#
# 784-HIDDEN-...-10 with LAYERS hidden layers, batch BATCH, AdamW lr 1e-3
# (weight decay 0.01), in f32 (no TF32 on either side) and in bf16 (accel:
# mixed_precision=bf16, bf16 parameters and GEMMs with f32 accumulation and
# f32 masters; torch: autocast); with DTYPES also fp16 (accel: f16 working
# weights and the scaler plugin; torch: Accelerator("fp16"), GradScaler)
# and fp8 (accel: mixed_precision=fp8, the fp8 plugin's cuBLASLt FP8 GEMMs
# for the layers whose dimensions are multiples of 16, f32 elsewhere;
# torch: Accelerator("fp8") where a backend is installed, else its bf16
# run, and the ratio line's peer says which).  Each run takes WARMUP untimed steps, then
# times STEPS steps between device syncs.  The two programs take turns for
# ROUNDS rounds; each result is the fastest round.  Prints every JSON line,
# then per dtype one ratio line
#   {"bench":"train-cuda-ratio","dtype":...,"accel_ms":...,"peer":...,
#    "peer_ms":...,"ratio":peer_ms/accel_ms}
# (ratio > 1: accel is faster).
#
# Usage: sh bench/train-cuda.sh [BUILD_DIR]          (default: build)
# Environment: HIDDEN (4096), LAYERS (2), BATCH (4096), STEPS (50),
#   WARMUP (10), ROUNDS (3), DTYPES ("f32 bf16"), LEGACY (1), PYTHON
#   (python3), MLP_ARGS (more train_mlp options), CLIP (a max_grad_norm for
#   both programs: accel keeps the norm on the device, torch uses
#   Accelerator.clip_grad_norm_; unset: no clipping), RUN_TIMEOUT (120: seconds
#   for one program run; one that takes longer is killed and reported, and
#   the rest goes on).  Exit 77 without a GPU.
set -eu

BUILD=${1:-build}
HIDDEN=${HIDDEN:-4096}
LAYERS=${LAYERS:-2}
BATCH=${BATCH:-4096}
STEPS=${STEPS:-50}
WARMUP=${WARMUP:-10}
ROUNDS=${ROUNDS:-3}
DTYPES=${DTYPES:-f32 bf16}
PYTHON=${PYTHON:-python3}
MLP_ARGS=${MLP_ARGS:-}
LEGACY=${LEGACY:-1}
CLIP=${CLIP:-}
CLIP_SET=
[ -n "$CLIP" ] && CLIP_SET="--set max_grad_norm=$CLIP"
export CLIP
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
TO=
command -v timeout >/dev/null 2>&1 && TO="timeout -k 10 $RUN_TIMEOUT"
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN=$BUILD/examples/train_mlp

if [ ! -x "$TRAIN" ]; then
	echo "train-cuda: $TRAIN not found; build with -Dcuda=enabled -Dcublaslt=enabled" >&2
	exit 2
fi
# uninstalled: the modules of the same build (scaler for fp16, fp8 for fp8)
ACCEL_PLUGIN_PATH=${ACCEL_PLUGIN_PATH:-$BUILD/backends/shm:$BUILD/backends/nccl:$BUILD/plugins/ddp:$BUILD/plugins/scaler:$BUILD/plugins/fp8}
ACCEL_DEVICE_PATH=${ACCEL_DEVICE_PATH:-$BUILD/backends/cuda}
export ACCEL_PLUGIN_PATH ACCEL_DEVICE_PATH
unset ACCEL_CONFIG ACCEL_SET
OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-cuda.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
# 4 batches per epoch: the sampler's epoch turn is in the timing too
SAMPLES=$((4 * BATCH))

echo "# train-cuda: $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname)" \
	"gpu '$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)'"
echo "# HIDDEN=$HIDDEN LAYERS=$LAYERS BATCH=$BATCH STEPS=$STEPS WARMUP=$WARMUP ROUNDS=$ROUNDS" \
	"CLIP=${CLIP:-none}"
have_torch=1
round=1
while [ "$round" -le "$ROUNDS" ]; do
	for dt in $DTYPES; do
		case $dt in
		f32) mp=no ;;
		bf16 | fp16 | fp8) mp=$dt ;;
		*)
			echo "train-cuda: DTYPES: '$dt' is not f32, bf16, fp16 or fp8" >&2
			exit 2
			;;
		esac
		variants=accel
		[ "$LEGACY" = 1 ] && variants="accel accel-legacy"
		for v in $variants; do
			extra=
			[ "$v" = accel-legacy ] && extra=--legacy-stream
			rc=0
			# shellcheck disable=SC2086
			$TO "$TRAIN" --device cuda --hidden "$HIDDEN" --layers "$LAYERS" \
				--batch-size "$BATCH" --samples "$SAMPLES" --test-samples 0 --no-eval \
				--steps "$STEPS" --warmup "$WARMUP" --log-every 1000000000 --json \
				--set "mixed_precision=$mp" --set optimizer.type=adamw \
				--set optimizer.params.lr=0.001 --set optimizer.params.weight_decay=0.01 \
				$CLIP_SET $extra $MLP_ARGS >"$OUT/$v.$dt.$round" 2>"$OUT/$v.$dt.$round.err" ||
				rc=$?
			if [ "$rc" = 124 ]; then
				echo "train-cuda: $v $dt round $round: train_mlp ran past ${RUN_TIMEOUT} s;" \
					"left out" >&2
				rm -f "$OUT/$v.$dt.$round"
				continue
			fi
			if [ "$rc" != 0 ]; then
				cat "$OUT/$v.$dt.$round" "$OUT/$v.$dt.$round.err" >&2
				if grep -q "no CUDA device is visible" "$OUT/$v.$dt.$round.err"; then
					echo "skipped: no GPU"
					exit 77
				fi
				echo "train-cuda: train_mlp failed" >&2
				exit 1
			fi
			grep '^{' "$OUT/$v.$dt.$round" | sed "s/}\$/,\"round\":$round}/"
		done
		if [ "$have_torch" = 1 ]; then
			rc=0
			$TO "$PYTHON" "$HERE/torch_accel_mlp.py" --hidden "$HIDDEN" --layers "$LAYERS" \
				--batch-size "$BATCH" --samples "$SAMPLES" --steps "$STEPS" \
				--warmup "$WARMUP" --rounds 1 --dtype "$dt" --max-grad-norm "${CLIP:-0}" \
				>"$OUT/torch.$dt.$round" \
				2>"$OUT/torch.$dt.$round.err" || rc=$?
			if [ "$rc" = 77 ]; then
				echo "train-cuda: torch peer skipped: $(cat "$OUT/torch.$dt.$round")" >&2
				rm -f "$OUT/torch.$dt.$round"
				have_torch=0
			elif [ "$rc" = 124 ]; then
				echo "train-cuda: torch $dt round $round ran past ${RUN_TIMEOUT} s; left out" >&2
				rm -f "$OUT/torch.$dt.$round"
			elif [ "$rc" != 0 ]; then
				tail -5 "$OUT/torch.$dt.$round.err" >&2
				echo "train-cuda: torch_accel_mlp.py failed" >&2
				exit 1
			else
				grep '^{' "$OUT/torch.$dt.$round" | sed "s/}\$/,\"round\":$round}/"
			fi
		fi
	done
	round=$((round + 1))
done

"$PYTHON" - "$OUT" <<'PY'
import glob, json, os, sys

best = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.[0-9]*")):
    if path.endswith(".err"):
        continue
    dt = os.path.basename(path).split(".")[1]
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            impl = r["impl"]
            if impl == "accel" and r.get("stream") == "legacy":
                impl = "accel-legacy"
            elif impl.startswith("pytorch"):
                impl = "peer"
            k = (impl, dt)
            if k not in best or r["ms_per_step"] < best[k]["ms_per_step"]:
                best[k] = r
print()
for dt in sorted({k[1] for k in best}, key=lambda d: d != "f32"):
    a = best.get(("accel", dt))
    lg = best.get(("accel-legacy", dt))
    t = best.get(("peer", dt))
    if not a:
        continue
    peer = None
    if t:
        peer = ("pytorch %s + accelerate %s" % (t["torch"], t["accelerate"])
                if t.get("accelerate") else "pytorch %s (autocast, no accelerate)" % t["torch"])
        if t.get("precision", dt) != dt:
            peer += ", ran %s" % t["precision"]
    out = {"bench": "train-cuda-ratio", "dtype": dt, "dims": a["dims"],
           "batch": a["batch_per_rank"], "accel_ms": a["ms_per_step"],
           "accel_ms_median": a.get("ms_per_step_median"), "gemm": a.get("gemm"),
           "accel_legacy_ms": lg["ms_per_step"] if lg else None,
           "peer": peer, "peer_ms": t["ms_per_step"] if t else None,
           "ratio": round(t["ms_per_step"] / a["ms_per_step"], 3) if t else None,
           "gpu": t["gpu"] if t else None,
           "max_grad_norm": float(os.environ["CLIP"]) if os.environ.get("CLIP") else None}
    print(json.dumps(out, separators=(",", ":")))
PY
