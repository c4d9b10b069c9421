#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-gpu-check.sh PYTHON: bench/gpu-check.sh's control flow without
# a GPU, its parts replaced by stubs (GPU_CHECK_BENCH) and nvidia-smi by a
# stub on PATH:
#  - without a GPU (nvidia-smi -L fails) it prints "skipped: no GPU" and
#    exits 77;
#  - a full run gathers every part's figures into summary.md with their
#    targets (fp8 GEMM ratios, train_mlp per dtype and fp8 / bf16, the
#    gpt2 rows), the gpu suite's results and the lines where its tests put
#    an observed difference next to a tolerance; a part that runs past its
#    limit is killed, reported as TIMED OUT, the rows it printed before
#    kept, and the exit status is 1;
#  - a deadline too close for a part skips it, the summary is still
#    written, and the whole check ends within the deadline;
#  - an unknown part is refused, naming it;
#  - bench/gpt2-gpu.sh (stub accel-gpt2 and python) prints a row per run as
#    it finishes, reports a run past RUN_TIMEOUT as timed out, and its
#    ratios.
set -u
PY=${1:?usage: test-gpu-check.sh PYTHON}
PY=$(command -v "$PY") || { echo "FAIL: no $1"; exit 1; }   # a path: stubs shadow python3
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../bench/gpu-check.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-gpu-check.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT INT TERM
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}
has() {   # has FILE TEXT WHAT
	grep -qF -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1"):
$(cat "$1")"
}

mkdir -p "$tmp/bin" "$tmp/nogpu" "$tmp/bench" "$tmp/build/cli" "$tmp/build/meson-logs"
cat > "$tmp/nogpu/nvidia-smi" <<'SH'
#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" >&2
exit 9
SH
cat > "$tmp/bin/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
-L) echo "GPU 0: FAKE-H200 (UUID: GPU-0)" ;;
*) echo "FAKE-H200, 143771 MiB, 580.00" ;;
esac
SH
cat > "$tmp/build/cli/accel" <<'SH'
#!/bin/sh
echo "accel env: cuda yes (stub)"
SH
cat > "$tmp/bench/fp8-gemm.sh" <<'SH'
#!/bin/sh
[ -n "${FAKE_SLOW:-}" ] && sleep 30
for op in fp8_e4m3:1480.0 bf16:800.0 torch_scaled_mm:1500.0; do
	echo "{\"bench\":\"fp8-gemm\",\"op\":\"${op%%:*}\",\"m\":8192,\"n\":8192,\"k\":8192,\"tflops\":${op#*:}}"
done
echo '{"bench": "fp8-gemm-ratio", "fp8_over_bf16": 1.85, "fp8_over_scaled_mm": 0.987}'
SH
cat > "$tmp/bench/train-cuda.sh" <<'SH'
#!/bin/sh
echo "# train-cuda stub: DTYPES=$DTYPES LEGACY=$LEGACY"
ms=1.0
for dt in $DTYPES; do
	echo "{\"bench\":\"train-cuda-ratio\",\"dtype\":\"$dt\",\"dims\":\"784-4096-4096-10\",\"batch\":4096,\"accel_ms\":$ms,\"peer\":\"pytorch 2.11 + accelerate 1.15\",\"peer_ms\":1.5,\"ratio\":1.5}"
	ms=0.8
done
SH
cat > "$tmp/bench/gpt2-gpu.sh" <<'SH'
#!/bin/sh
echo "gpt2-row: | accel-gpt2 bf16 | 150000 | 110.0 | 11.1% | 2000 MiB |"
echo "gpt2-row: | accel-gpt2 bf16-recompute | 120000 | 88.0 | 8.9% | 900 MiB |"
echo "gpt2-row: | torch-eager | 100000 | 73.3 | 7.4% | peak 9000 MiB (torch.cuda) |"
sleep 60
echo "gpt2-row: | never printed | | | | |"
SH
cat > "$tmp/build/meson-logs/testlog.json" <<'SH'
{"name": "fp8-gpu", "result": "OK", "duration": 3.5, "stdout": "codec e4m3: ok\ngemm e4m3 x e4m3 256x512x1024, operands at +0 bytes: worst error / sum|ab| 3.1e-07 (tolerance 0.0001) ok\n", "stderr": ""}
{"name": "cuda", "result": "OK", "duration": 41.0, "stdout": "", "stderr": "adamw: 72 option sets x 25 steps, largest difference 0 ulp (tolerance 2 ulp)\n"}
SH
chmod +x "$tmp/nogpu/nvidia-smi" "$tmp/bin/nvidia-smi" "$tmp/build/cli/accel"

# 1. no GPU: 77 and the message
rc=0
PATH="$tmp/nogpu:$PATH" GPU_LOG_DIR="$tmp/l0" sh "$check" "$tmp/build" > "$tmp/out0" 2>&1 || rc=$?
[ "$rc" = 77 ] || fail "no GPU: exit $rc, not 77: $(cat "$tmp/out0")"
has "$tmp/out0" "skipped: no GPU" "no GPU"

# 2. a full run, the gpt2 part past its limit
rc=0
s=$(date +%s)
PATH="$tmp/bin:$PATH" GPU_LOG_DIR="$tmp/l1" GPU_CHECK_BENCH="$tmp/bench" PYTHON="$PY" \
	PART_TIMEOUT_GPT2=3 GPU_CHECK_MIN_PART=1 sh "$check" "$tmp/build" > "$tmp/out1" 2>&1 || rc=$?
took=$(($(date +%s) - s))
[ "$rc" = 1 ] || fail "a run with a part past its limit: exit $rc, not 1"
[ "$took" -lt 20 ] || fail "the gpt2 stub was not stopped at its 3 s limit (the run took $took s)"
S=$tmp/l1/summary.md
[ -f "$S" ] || { fail "no summary.md"; cat "$tmp/out1"; exit 1; }
has "$S" "GPU: FAKE-H200, 143771 MiB, 580.00" "the GPU line"
has "$S" "gpt2: TIMED OUT" "the gpt2 part's status"
has "$S" "fp8gemm: ok" "the fp8gemm part's status"
has "$S" "fp8 / bf16 1.85 (need >= 1.60, met); fp8 / torch._scaled_mm 0.99 (need >= 0.95, met)" \
	"the FP8 GEMM targets"
has "$S" "fp8_e4m3 1480.0" "the FP8 GEMM figures"
has "$S" "784-4096-4096-10 batch 4096 fp8: accel 0.800 ms/step" "train_mlp fp8"
has "$S" "784-4096-4096-10 batch 4096 fp16" "train_mlp fp16"
has "$S" "accel fp8 / accel bf16 step time: 0.80" "fp8 against bf16"
has "$S" "| accel-gpt2 bf16-recompute | 120000 | 88.0 | 8.9% | 900 MiB |" "a gpt2 row printed before the kill"
grep -q "never printed" "$S" && fail "the gpt2 stub ran past its limit"
has "$S" "accel bf16 / PyTorch eager 1.50 (need >= 1.00, met); / torch.compile - (need >= 0.90, -)" \
	"the eager ratio from the rows, none for compile (killed before its row)"
has "$S" "--recompute / without 0.80" "the recompute ratio from the rows"
has "$S" "gpu suite: 2 test(s): fp8-gpu OK 4 s, cuda OK 41 s" "the suite's results"
has "$S" "worst error / sum|ab| 3.1e-07 (tolerance 0.0001)" "a tolerance line of fp8-gpu"
has "$S" "largest difference 0 ulp (tolerance 2 ulp)" "a tolerance line of cuda (stderr)"
has "$tmp/out1" "DTYPES=bf16 fp8 fp16 LEGACY=0" "train-cuda's dtypes"
for f in accel-env.log fp8-gemm.log train-cuda.log gpt2-gpu.log gpu-testlog.json parts.txt; do
	[ -f "$tmp/l1/$f" ] || fail "$f is not in GPU_LOG_DIR"
done

# 3. a deadline: fp8gemm runs past what is left, train is skipped
rc=0
s=$(date +%s)
PATH="$tmp/bin:$PATH" GPU_LOG_DIR="$tmp/l2" GPU_CHECK_BENCH="$tmp/bench" PYTHON="$PY" \
	GPU_CHECK_DEADLINE=$((s + 14)) GPU_CHECK_MIN_PART=2 FAKE_SLOW=1 \
	GPU_CHECK_PARTS="env fp8gemm train" sh "$check" "$tmp/build" > "$tmp/out2" 2>&1 || rc=$?
took=$(($(date +%s) - s))
[ "$rc" = 1 ] || fail "a run past its deadline: exit $rc, not 1"
[ "$took" -le 14 ] || fail "the check took $took s with a deadline 14 s away"
S=$tmp/l2/summary.md
[ -f "$S" ] || { fail "no summary.md after the deadline"; cat "$tmp/out2"; exit 1; }
has "$S" "env: ok" "env before the deadline"
has "$S" "fp8gemm: TIMED OUT" "fp8gemm cut at the deadline"
has "$S" "train: SKIPPED (no time left)" "train after the deadline"
has "$S" "fp8 GEMM: no result" "no fp8 figures"

# 4. an unknown part
rc=0
PATH="$tmp/bin:$PATH" GPU_LOG_DIR="$tmp/l3" GPU_CHECK_PARTS="env bogus" PYTHON="$PY" \
	sh "$check" "$tmp/build" > "$tmp/out3" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "an unknown part: exit $rc, not 2"
has "$tmp/out3" "no part 'bogus'" "the unknown part named"

# 5. bench/gpt2-gpu.sh itself with a stub accel-gpt2 and a stub python
# (PyTorch's peer): a row per run as it finishes, a run past RUN_TIMEOUT
# reported as timed out, the ratios
g=$tmp/g2
mkdir -p "$g/b/examples" "$g/b/plugins/x" "$g/b/backends/cuda" "$g/bin"
cat > "$g/b/examples/train_gpt2" <<'SH'
#!/bin/sh
steps=1 prev=
for a in "$@"; do
	[ "$prev" = --steps ] && steps=$a
	prev=$a
done
echo "step $steps loss 7.0 lr 0.0003 tokens/s 150000 (110.000 TFLOP/s), MFU 11.1%"
echo "memory per rank: accel 1000.0 MiB (peak 1200.0 MiB), activations 900.0 MiB"
SH
cat > "$g/bin/python3" <<SH
#!/bin/sh
[ "\$1" = - ] && exec "$PY" "\$@"
case "\$*" in *compile*) sleep 20 ;; esac
echo '{"tokens_per_s": 100000, "tflops": 73.3, "mfu": 0.074, "peak_mem_mib": 9000}'
SH
chmod +x "$g/b/examples/train_gpt2" "$g/bin/python3"
rc=0
PATH="$g/bin:$PATH" PYTHON="$g/bin/python3" RUN_TIMEOUT=2 TORCH_RUNS="torch-eager torch-compile" \
	sh "$here/../bench/gpt2-gpu.sh" "$g/b" 5 > "$tmp/out4" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "gpt2-gpu.sh with a run past its limit: exit $rc, not 1"
has "$tmp/out4" "gpt2-row: | accel-gpt2 fp8 | 150000 | 110.000 | 11.1% | accel 1000.0 MiB" "gpt2 fp8 row"
has "$tmp/out4" "gpt2-row: | torch-eager | 100000 | 73.3 | 7.4% | peak 9000 MiB (torch.cuda) |" \
	"gpt2 eager row"
has "$tmp/out4" "| torch-compile | timed out (2 s) | | | |" "gpt2 compile past its limit"
has "$tmp/out4" "accel bf16 / PyTorch eager: 1.50 (target >= 1.0)" "gpt2 ratio"

if [ "$fails" -gt 0 ]; then
	echo "$fails failure(s)"
	exit 1
fi
echo "gpu-check control flow: all checks passed"
