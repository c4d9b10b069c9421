#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpt2-cpu.sh BUILD_DIR [STEPS]: examples/gpt2 (accel-gpt2, ddp) against
# the same model in PyTorch (bench/gpt2_torch.py, DistributedDataParallel on
# gloo; Debian's python3-torch) on the CPU, one thread per process (BLAS
# threads included), at 1 and 2 processes, for the tiny configuration and a
# ~10M one (8 layers, 8 heads, dim 256, seq 128, vocab 16384).  Random
# tokens, AdamW, global batch 8 (tiny) and 4 (10M) sequences.  Prints a
# table of tokens/s and the accel/PyTorch ratio (docs/benchmarks.md, "gpt2
# on the CPU").
# PYTHON: the interpreter that has torch (default /usr/bin/python3).
set -u
B=${1:?usage: gpt2-cpu.sh BUILD_DIR [STEPS]}
STEPS=${2:-20}
PY=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
G=$B/examples/train_gpt2
A=$B/cli/accel
export ACCEL_LOG_LEVEL=warn
# one thread per process, BLAS included (PyTorch's OpenBLAS would otherwise
# start one thread per core)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ACCEL_PLUGIN_PATH=$(ls -d "$B"/plugins/* "$B"/backends/* | tr '\n' ':')
export ACCEL_PLUGIN_PATH
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt2-cpu.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cat > "$tmp/ddp.json" <<JSON
{"strategy": "ddp", "seed": 1,
 "optimizer": {"type": "adamw", "params": {"lr": 3e-4, "weight_decay": 0.0}}}
JSON
printf '%-6s %-5s %14s %14s %7s\n' config procs "accel tok/s" "torch tok/s" ratio
for cfg in tiny 10m; do
	if [ $cfg = tiny ]; then
		M="--layers 2 --heads 2 --dim 32 --seq-len 32 --vocab 256"
		BS=8
	else
		M="--layers 8 --heads 8 --dim 256 --seq-len 128 --vocab 16384"
		BS=4
	fi
	for n in 1 2; do
		# accel: the tokens/s of the second half of the steps (the last
		# progress line), after a warm-up half
		"$A" launch -n $n --config "$tmp/ddp.json" -- "$G" $M --batch-size $BS \
			--steps $((2 * STEPS)) --log-every $STEPS --eval-batches 1 \
			--random-tokens $((BS * 200 * 130)) > "$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; exit 1; }
		a=$(sed -n 's/.*step [0-9]* loss .* tokens\/s \([0-9]*\).*/\1/p' "$tmp/a.log" | tail -1)
		t=$("$PY" "$HERE/gpt2_torch.py" $M --batch-size $BS --steps $STEPS --world $n \
			2>/dev/null | sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p')
		printf '%-6s %-5s %14s %14.0f %7s\n' $cfg $n "$a" "${t:-0}" \
			"$(awk -v a="$a" -v t="${t:-0}" 'BEGIN { if (t > 0) printf "%.2f", a / t; else print "n/a" }')"
	done
done
