#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-gpt2-device.sh TRAIN_GPT2 yes|no: accel-gpt2's --device flag
# in any build, GPU or not (suite gpt2).  The second argument says whether
# the build has the CUDA path (examples/gpt2/gpt2_cuda.cu).
#   - without it, --device cuda exits 2 saying the program was built
#     without CUDA (no silent CPU fallback);
#   - with it and no GPU, exit 2 saying no CUDA device is visible; with a
#     GPU, one step runs and names cuBLASLt;
#   - a malformed --device, and mixed_precision=fp8 on the CPU, exit 2 with
#     a message naming the problem.
set -u
G=${1:?usage: test-gpt2-device.sh TRAIN_GPT2 yes|no}
CUDA=${2:?usage: test-gpt2-device.sh TRAIN_GPT2 yes|no}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-gpt2-dev.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

# expect NAME STATUS PATTERN ARGS...: the run exits STATUS and its output
# has PATTERN
expect() {
	name=$1 want=$2 pat=$3
	shift 3
	"$G" "$@" > "$tmp/out" 2>&1
	rc=$?
	if [ "$rc" -eq "$want" ] && grep -q -e "$pat" "$tmp/out"; then
		echo "ok: $name: exit $rc, $(grep -e "$pat" "$tmp/out" | head -n 1)"
	else
		echo "FAIL: $name: exit $rc (want $want), output:"
		cat "$tmp/out"
		fails=$((fails + 1))
	fi
}

expect "bad --device" 2 "needs cpu, cuda or cuda:N, got 'gpu'" --device gpu
expect "bad --device cuda:N" 2 "needs an integer\|needs a number" --device cuda:x
expect "fp8 on the CPU" 2 "mixed_precision=fp8 runs on --device cuda only" \
	--steps 1 --set mixed_precision=fp8
if [ "$CUDA" = no ]; then
	expect "--device cuda, no CUDA" 2 "accel-gpt2 was built without CUDA" --device cuda --steps 1
else
	"$G" --device cuda --steps 1 --batch-size 2 > "$tmp/out" 2>&1
	rc=$?
	if [ "$rc" -eq 2 ] && grep -q "no CUDA device is visible" "$tmp/out"; then
		echo "ok: --device cuda without a GPU: exit 2, $(head -n 1 "$tmp/out")"
	elif [ "$rc" -eq 0 ] && grep -q "cuBLASLt" "$tmp/out"; then
		echo "ok: --device cuda on a GPU: $(grep cuBLASLt "$tmp/out")"
	else
		echo "FAIL: --device cuda: exit $rc, output:"
		cat "$tmp/out"
		fails=$((fails + 1))
	fi
fi
[ "$fails" -eq 0 ] || exit 1
echo "all device checks passed"
