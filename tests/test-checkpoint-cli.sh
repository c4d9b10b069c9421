#!/bin/sh
# SPDX-License-Identifier: MIT
# `accel checkpoint show [--verify]` and `accel merge-weights`
# (docs/cli.md, docs/checkpoints.md): the table shows what the manifest
# holds; --verify passes on a good checkpoint and names the slice whose
# bytes were changed; merge-weights of a checkpoint saved by 2 processes
# equals the weights train_mlp saved at that step (bitwise), reads in Python
# (json + struct; the safetensors package too where it is installed), and
# on a checkpoint whose largest tensor is 1/8 of the model its peak RSS
# stays under 3x that tensor.
# Usage: test-checkpoint-cli.sh TRAIN_MLP CKPT_MAKE
set -eu

T=${1:?usage: test-checkpoint-cli.sh TRAIN_MLP CKPT_MAKE}
MK=${2:?usage: test-checkpoint-cli.sh TRAIN_MLP CKPT_MAKE}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
MK=$(cd "$(dirname "$MK")" && pwd)/$(basename "$MK")
: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
cd "$tmp"
A=$ACCEL_CLI

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

echo "== a checkpoint of train_mlp at 2 processes"
timeout 120 "$A" launch -n 2 -- "$T" --hidden 16 --samples 96 --batch-size 16 --no-eval \
	--test-samples 0 --log-every 100 --steps 6 --checkpoint-every 6 --project-dir p \
	--save-final final.st >out 2>&1 || { cat out; fail "train_mlp"; }
C=p/checkpoint_6

echo "== accel checkpoint show"
"$A" checkpoint show "$C" >show 2>&1 || { cat show; fail "show exited $?"; }
for want in "world size   2" "strategy     ddp" "step         6 (micro-step 0)" \
	"plugins      ddp (state version 2)" "format       2 (accel " "samplers     1" "generators   0 (accel_rng_register)" \
	"tensors      24, "; do
	grep -qF "$want" show || { cat show; fail "show lacks: $want"; }
done
# ddp balances the bytes: rank 0 writes model.safetensors (13002 f32) and
# the first 13002 elements of the masters and optimizer state, rank 1 the
# other 26004; the ranges meet inside optim/exp_avg/fc0.weight
grep -qE '^master/fc0\.weight +F32 +\[16, 784\] +12544 +rank0\.safetensors:\[0,12544\)$' show ||
	{ cat show; fail "show: the row of master/fc0.weight"; }
grep -qE '^optim/exp_avg/fc0\.weight +F32 +\[16, 784\] +12544 +rank0\.safetensors:\[0,458\) rank1\.safetensors:\[458,12544\)$' show ||
	{ cat show; fail "show: the row of optim/exp_avg/fc0.weight"; }
grep -qE '^master/fc1\.weight +F32 +\[16, 16\] +256 +rank1\.safetensors:\[0,256\)$' show ||
	{ cat show; fail "show: the row of master/fc1.weight"; }
grep -qE '^param/fc2\.bias +F32 +\[10\] +10 +model\.safetensors:\[0,10\)$' show ||
	{ cat show; fail "show: the row of param/fc2.bias"; }
"$A" checkpoint show "$C" --verify >show 2>&1 || { cat show; fail "--verify of a good checkpoint"; }
grep -qF "verified: 25 slices and 3 files match their XXH64 checksums" show ||
	{ cat show; fail "--verify: summary"; }

echo "== --verify names the slice whose bytes changed"
cp -r "$C" bad
# one byte in the middle of master/fc1.weight, which rank 1 holds whole
off=$(python3 -c "
import json, struct
f = open('bad/rank1.safetensors', 'rb'); n = struct.unpack('<Q', f.read(8))[0]
h = json.loads(f.read(n)); b, e = h['master/fc1.weight']['data_offsets']
print(8 + n + (b + e) // 2)")
printf '\377' | dd of=bad/rank1.safetensors bs=1 seek="$off" conv=notrunc 2>/dev/null
set +e
"$A" checkpoint show bad --verify >show 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat show; fail "--verify of a corrupt checkpoint exited $rc"; }
grep -qF "accel checkpoint show: verify: bad/rank1.safetensors: tensor 'master/fc1.weight' elements [0, 256) (key 'master/fc1.weight'): checksum xxh64" show ||
	{ cat show; fail "--verify: message"; }
set +e
"$A" checkpoint show nowhere >show 2>&1
rc=$?
"$A" checkpoint list "$C" >show2 2>&1
rc2=$?
set -e
[ "$rc" = 1 ] && grep -qF "accel checkpoint show: nowhere: no such checkpoint directory" show ||
	{ cat show; fail "show of no directory"; }
[ "$rc2" = 2 ] && grep -qF "unknown subcommand 'list'" show2 || { cat show2; fail "bad usage"; }
"$A" checkpoint --help | grep -qF "Usage: accel checkpoint show DIR [--verify]" || fail "--help"
"$A" merge-weights --help | grep -qF "Usage: accel merge-weights" || fail "merge --help"

echo "== accel merge-weights equals the saved weights"
"$A" merge-weights "$C" merged.st >out 2>&1 || { cat out; fail "merge-weights"; }
grep -qF "wrote merged.st: 6 tensors from $C (saved by 2 processes, step 6)" out ||
	{ cat out; fail "merge-weights: message"; }
python3 "$ACCEL_TEST_SRCDIR/tests/st_compare.py" final.st merged.st 0 >cmp 2>&1 ||
	{ cat cmp; fail "merged weights differ from train_mlp's"; }
# the f32 masters, assembled from both ranks' slices: the same values here
"$A" merge-weights --master "$C" masters.st >out 2>&1 || { cat out; fail "--master"; }
python3 "$ACCEL_TEST_SRCDIR/tests/st_compare.py" final.st masters.st 0 >cmp 2>&1 ||
	{ cat cmp; fail "merged master weights differ"; }
python3 - merged.st <<'EOF' || fail "reading merged.st in Python"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert h.pop("__metadata__") == {"format": "pt"}, "metadata"
assert sorted(h) == ["fc0.bias", "fc0.weight", "fc1.bias", "fc1.weight", "fc2.bias",
                     "fc2.weight"], sorted(h)
assert h["fc0.weight"]["shape"] == [16, 784] and h["fc0.weight"]["dtype"] == "F32"
try:
    from safetensors.numpy import load_file
except ImportError:
    print("(the safetensors package is not installed: read with json + struct only)")
else:
    t = load_file(sys.argv[1])
    assert t["fc0.weight"].shape == (16, 784), t["fc0.weight"].shape
    print("safetensors.numpy.load_file read it")
EOF
# param/ tensors are whole in model.safetensors: rank 1's damaged slice is
# read (and refused) only for the masters
"$A" merge-weights --master bad out.st >out 2>&1 && fail "merge --master of a corrupt checkpoint"
grep -qF "bad/rank1.safetensors: tensor 'master/fc1.weight' elements [0, 256)" out ||
	{ cat out; fail "merge --master: message"; }
[ ! -e out.st ] || fail "a failed merge left out.st"

echo "== merge-weights' memory: largest tensor 1/8 of the model, peak RSS < 3x it"
# 8 tensors of 2M f32 (8 MiB each, 64 MiB in all), saved by 2 processes
timeout 120 "$A" launch -n 2 -- "$MK" 8 2097152 big >out 2>&1 || { cat out; fail "ckpt-make"; }
peak() {   # peak RSS in KiB of the command
	python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
if r.returncode:
    sys.exit(r.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}
base=0
if ldd "$A" 2>/dev/null | grep -q libasan; then
	# AddressSanitizer: its runtime alone is ~14 MiB and its quarantine
	# keeps freed tensors; measure the growth over `checkpoint show`
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
	base=$(peak "$A" checkpoint show big) || fail "checkpoint show big"
	echo "  (sanitized build: over the $base KiB of 'accel checkpoint show')"
fi
for what in "" --master; do
	rss=$(peak "$A" merge-weights $what big big.st) || fail "merge-weights $what of the big checkpoint"
	rss=$((rss - base))
	limit=$((3 * 8 * 1024))   # KiB
	echo "  merge-weights $what: peak RSS $rss KiB (largest tensor 8192 KiB, limit $limit KiB)"
	[ "$rss" -lt "$limit" ] || fail "peak RSS $rss KiB >= $limit KiB"
	rm -f big.st
done
echo PASS
