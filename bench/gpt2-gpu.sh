#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpt2-gpu.sh BUILD_DIR [STEPS]: accel-gpt2 --device cuda (GPT-2 124M:
# 12 layers, 12 heads, dim 768, seq 1024, vocab 50257, tied head; global
# batch 16 x 1024 tokens, random tokens, AdamW, ddp at 1 process) against
# the same model in PyTorch + Accelerate on the same GPU
# (bench/gpt2_torch_gpu.py: Accelerator(mixed_precision="bf16"), fused
# AdamW, eager and torch.compile, the attention materialised as accel-gpt2
# computes it and with scaled_dot_product_attention):
#   - bf16: tokens/s, TFLOP/s and MFU (against PEAK_TFLOPS, default 989: the
#     dense bf16 peak of an H100/H200 SXM), accel against eager and compiled
#     (the issue's targets: >= 1.0x eager, >= 0.9x compiled);
#   - bf16 with --recompute: tokens/s and memory (accel's model memory and
#     accel-gpt2's activations, per rank) against without;
#   - fp8 (mixed_precision=fp8: the blocks' linear layers through the fp8
#     plugin, compute capability >= 8.9) against bf16.
# accel's figure is the last progress line (the second half of 2 x STEPS
# steps); PyTorch's is STEPS steps after 5 warm-up steps.  Ends with a
# Markdown table for docs/benchmarks.md ("gpt2 on a GPU").  Each run has a
# time limit (RUN_TIMEOUT, seconds, default 300), and prints its table row
# as a "gpt2-row: | ... |" line as soon as it is done, so a caller that
# stops this script early (bench/gpu-check.sh) still has the finished rows.
# ACCEL_RUNS (default "bf16 bf16-recompute fp8") and TORCH_RUNS (default
# "torch-eager torch-compile torch-eager-sdpa torch-compile-sdpa") choose
# the runs, in that order; COMPILE_STEPS (default STEPS) the timed steps of
# the torch.compile runs (their compile happens in the warm-up steps).
# Exits 77 with a message when no CUDA device is visible or the build has
# no CUDA (nothing is measured then), 1 when a run failed.
# PYTHON: the interpreter with torch and accelerate (default python3).
set -u
B=${1:?usage: gpt2-gpu.sh BUILD_DIR [STEPS]}
STEPS=${2:-20}
PY=${PYTHON:-python3}
PEAK=${PEAK_TFLOPS:-989}
PEAK_FP8=${PEAK_TFLOPS_FP8:-1979}
RT=${RUN_TIMEOUT:-300}
ACCEL_RUNS=${ACCEL_RUNS:-bf16 bf16-recompute fp8}
TORCH_RUNS=${TORCH_RUNS:-torch-eager torch-compile torch-eager-sdpa torch-compile-sdpa}
CSTEPS=${COMPILE_STEPS:-$STEPS}
HERE=$(cd "$(dirname "$0")" && pwd)
G=$B/examples/train_gpt2
export ACCEL_LOG_LEVEL=warn
# the build's plugins, comm backends and device module (as `meson devenv`)
ACCEL_PLUGIN_PATH=${ACCEL_PLUGIN_PATH:-$(ls -d "$B"/plugins/* "$B"/backends/* | tr '\n' ':')}
ACCEL_DEVICE_PATH=${ACCEL_DEVICE_PATH:-$B/backends/cuda}
export ACCEL_PLUGIN_PATH ACCEL_DEVICE_PATH
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt2-gpu.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
TO=
command -v timeout > /dev/null 2>&1 && TO="timeout $RT"
fails=0

[ -x "$G" ] || { echo "gpt2-gpu.sh: $G is not built"; exit 1; }
# a machine without a GPU, or a build without CUDA, says so and stops
if ! "$G" --device cuda --steps 1 --batch-size 1 > "$tmp/probe.log" 2>&1; then
	if grep -q -e "no CUDA device is visible" -e "built without CUDA" "$tmp/probe.log"; then
		echo "gpt2-gpu.sh: nothing measured: $(grep -e 'no CUDA device' -e 'without CUDA' \
			"$tmp/probe.log" | head -n 1)"
		exit 77
	fi
	echo "gpt2-gpu.sh: the probe run failed:"
	cat "$tmp/probe.log"
	exit 1
fi

cat > "$tmp/ddp.json" <<JSON
{"strategy": "ddp", "seed": 1, "backend": "nccl",
 "optimizer": {"type": "adamw", "params": {"lr": 3e-4, "weight_decay": 0.0}}}
JSON
M="--model gpt2 --batch-size 16 --random-tokens 4000000 --eval-batches 1"

# failed STATUS: what a run's row says instead of its tokens/s
failed() {
	if [ "$1" = 124 ] || [ "$1" = 137 ]; then
		echo "timed out (${RT} s)"
	else
		echo "failed (status $1)"
	fi
}

# accel NAME PEAK ARGS...: tokens/s, TFLOP/s, MFU and memory into
# $tmp/NAME.{log,row}
accel_run() {
	name=$1 peak=$2
	shift 2
	rc=0
	# shellcheck disable=SC2086 # word lists
	$TO "$G" --device cuda --config "$tmp/ddp.json" $M --steps $((2 * STEPS)) \
		--log-every "$STEPS" --peak-tflops "$peak" "$@" > "$tmp/$name.log" 2>&1 || rc=$?
	if [ "$rc" != 0 ]; then
		tail -n 20 "$tmp/$name.log"
		echo "FAIL: accel-gpt2 $name (status $rc)"
		fails=$((fails + 1))
		echo "accel-gpt2 $name | $(failed "$rc") | | |" > "$tmp/$name.row"
		echo "gpt2-row: | $(cat "$tmp/$name.row") |"
		return 1
	fi
	line=$(grep "^step $((2 * STEPS)) loss" "$tmp/$name.log" | tail -n 1)
	tps=$(echo "$line" | sed -n 's/.*tokens\/s \([0-9.]*\).*/\1/p')
	tf=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) TFLOP\/s).*/\1/p')
	mfu=$(echo "$line" | sed -n 's/.*MFU \([0-9.]*%\).*/\1/p')
	mem=$(sed -n 's/^memory per rank: \(.*\)/\1/p' "$tmp/$name.log" | tail -n 1)
	echo "accel-gpt2 $name | $tps | $tf | $mfu | $mem" > "$tmp/$name.row"
	grep -E "device|^step|memory" "$tmp/$name.log"
	echo "gpt2-row: | $(cat "$tmp/$name.row") |"
}

# torch NAME ARGS...
torch_run() {
	name=$1
	shift
	steps=$STEPS
	case $name in *compile*) steps=$CSTEPS ;; esac
	rc=0
	# shellcheck disable=SC2086
	$TO "$PY" "$HERE/gpt2_torch_gpu.py" --batch-size 16 --steps "$steps" \
		--peak-tflops "$PEAK" "$@" > "$tmp/$name.log" 2>&1 || rc=$?
	if [ "$rc" != 0 ]; then
		tail -n 20 "$tmp/$name.log"
		echo "FAIL: PyTorch $name (status $rc)"
		fails=$((fails + 1))
		echo "$name | $(failed "$rc") | | |" > "$tmp/$name.row"
		echo "gpt2-row: | $(cat "$tmp/$name.row") |"
		return 1
	fi
	cat "$tmp/$name.log"
	"$PY" - "$tmp/$name.log" "$name" > "$tmp/$name.row" <<'PY'
import json, sys
r = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
print("%s | %.0f | %.1f | %.1f%% | peak %.0f MiB (torch.cuda)" % (
    sys.argv[2], r["tokens_per_s"], r["tflops"], 100 * r.get("mfu", 0), r["peak_mem_mib"]))
PY
	echo "gpt2-row: | $(cat "$tmp/$name.row") |"
}

for r in $ACCEL_RUNS; do
	case $r in
	bf16) accel_run bf16 "$PEAK" --set mixed_precision=bf16 ;;
	bf16-recompute) accel_run bf16-recompute "$PEAK" --set mixed_precision=bf16 --recompute ;;
	fp8) accel_run fp8 "$PEAK_FP8" --set mixed_precision=fp8 ;;
	*) echo "gpt2-gpu.sh: ACCEL_RUNS: no run '$r' (bf16, bf16-recompute, fp8)"; exit 2 ;;
	esac
done
for r in $TORCH_RUNS; do
	case $r in
	torch-eager) torch_run torch-eager ;;
	torch-compile) torch_run torch-compile --compile ;;
	torch-eager-sdpa) torch_run torch-eager-sdpa --sdpa ;;
	torch-compile-sdpa) torch_run torch-compile-sdpa --compile --sdpa ;;
	*)
		echo "gpt2-gpu.sh: TORCH_RUNS: no run '$r' (torch-eager, torch-compile," \
			"torch-eager-sdpa, torch-compile-sdpa)"
		exit 2
		;;
	esac
done

ratio() {   # ratio A B: tokens/s of row A over row B
	if [ ! -f "$tmp/$1.row" ] || [ ! -f "$tmp/$2.row" ]; then
		printf -- "-"
		return
	fi
	a=$(cut -d'|' -f2 "$tmp/$1.row" | tr -d ' ')
	b=$(cut -d'|' -f2 "$tmp/$2.row" | tr -d ' ')
	awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'
}

echo
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)," \
	"GPT-2 124M, batch 16 x 1024, $STEPS timed steps"
echo
echo "| run | tokens/s | TFLOP/s | MFU | memory |"
echo "|---|---|---|---|---|"
for r in $ACCEL_RUNS $TORCH_RUNS; do
	[ -f "$tmp/$r.row" ] && echo "| $(cat "$tmp/$r.row") |"
done
echo
echo "accel bf16 / PyTorch eager: $(ratio bf16 torch-eager) (target >= 1.0);" \
	"/ compiled: $(ratio bf16 torch-compile) (target >= 0.9);" \
	"/ compiled with SDPA: $(ratio bf16 torch-compile-sdpa)"
echo "accel fp8 / accel bf16: $(ratio fp8 bf16); recompute / no recompute: $(ratio bf16-recompute bf16)"
[ "$fails" -eq 0 ] || exit 1
