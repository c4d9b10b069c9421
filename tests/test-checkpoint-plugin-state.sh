#!/bin/sh
# SPDX-License-Identifier: MIT
# A checkpoint is input accel does not control: plugin state in it with
# the wrong shape, dtype or values is refused at load with a message that
# names the checkpoint directory, the tensor and what is wrong, never
# trained from (docs/checkpoints.md, "Plugin state that is wrong").
# Through examples/train_mlp: a checkpoint is saved with the loss scaler
# (fp16), fp8, compress (PowerSGD with error feedback, 2 ranks), zero and
# fsdp; each case copies it, rewrites one tensor or blob with
# tests/ckpt_edit.py (the files' and slices' checksums kept consistent,
# the manifest unsealed as an older accel wrote it, so the load reaches
# the plugin) and resumes.
#  - scaler/state: 4 elements, f32, scale NaN, -2, 0;
#  - fp8/scale/<p>: NaN, negative, Inf, another length, f64;
#    fp8/amax_history/<p>: another length, a NaN, a negative amax;
#  - compress/layout: another length, a world size of 0, a hash that is
#    not its buckets'; PowerSGD's Q: f64, a NaN, another length (accepted:
#    a fresh Q, said); a residual with an Inf; a residual of another size
#    under the saved layout (refused when its bucket first reduces);
#  - zero / fsdp: master/ and optim/ tensors of another dtype or shape.
# Usage: test-checkpoint-plugin-state.sh TRAIN_MLP
set -eu

T=${1:?usage: test-checkpoint-plugin-state.sh TRAIN_MLP}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
E="$ACCEL_TEST_SRCDIR/tests/ckpt_edit.py"
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-plugin-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
cd "$tmp"

# fail, and run N ARGS...: train_mlp on N processes (1: directly)
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"

# save NAME N ARGS...: checkpoint NAME/checkpoint_4 after 4 steps
save() {
	name=$1 n=$2
	shift 2
	run "$n" --steps 4 --checkpoint-every 4 --project-dir "$name" "$@" >out 2>&1 ||
		{ cat out; fail "saving with $name"; }
}

# bad N 'ARGS' 'WANT' NAME EDIT...: edit a copy of the checkpoint in $src,
# resume with ARGS; the run fails with WANT in its output
bad() {
	n=$1 args=$2 want=$3
	shift 3
	rm -rf c && cp -r "$src" c
	python3 "$E" c "$@" || fail "ckpt_edit.py $*"
	set +e
	run "$n" --steps 6 --resume c $args >out 2>&1
	rc=$?
	set -e
	[ "$rc" != 0 ] || { cat out; fail "$*: resumed from it"; }
	grep -qF -- "$want" out || { cat out; fail "$*: the output lacks: $want"; }
	echo "  ok: $*"
}

# good N 'ARGS' 'WANT' NAME EDIT...: as bad, but the run ends well and says WANT
good() {
	n=$1 args=$2 want=$3
	shift 3
	rm -rf c && cp -r "$src" c
	python3 "$E" c "$@" || fail "ckpt_edit.py $*"
	run "$n" --steps 6 --resume c $args >out 2>&1 || { cat out; fail "$*: not resumed"; }
	grep -qF -- "$want" out || { cat out; fail "$*: the output lacks: $want"; }
	echo "  ok: $* (accepted)"
}

echo "== the loss scaler's state"
save p16 1 --set mixed_precision=fp16
src=p16/checkpoint_4
# the unedited copy (rewritten, unsealed) resumes: the edits are what is refused
good 1 "--set mixed_precision=fp16" "resumed from c at step 4" scaler/state
S="checkpoint c: scaler: checkpoint tensor scaler/state"
bad 1 "--set mixed_precision=fp16" "$S has dtype f64 and 4 elements; expected f64 with 3" \
	scaler/state --shape 4
bad 1 "--set mixed_precision=fp16" "$S has dtype f32 and 3 elements" scaler/state --dtype F32
for v in nan -2 0; do
	bad 1 "--set mixed_precision=fp16" "$S holds scale $v, growth tracker" \
		scaler/state --element 0=$v
done

echo "== fp8's scales and amax histories"
save p8 1 --set mixed_precision=fp8
src=p8/checkpoint_4
S="checkpoint c: fp8: checkpoint tensor fp8/scale/fc0.weight"
bad 1 "--set mixed_precision=fp8" "$S holds nan at element 0; a scale is finite and > 0" \
	fp8/scale/fc0.weight --element 0=nan
bad 1 "--set mixed_precision=fp8" "$S holds -1 at element 2; a scale is finite and > 0" \
	fp8/scale/fc0.weight --element 2=-1
bad 1 "--set mixed_precision=fp8" "$S holds inf at element 1" fp8/scale/fc0.weight --element 1=inf
bad 1 "--set mixed_precision=fp8" "$S is f32 [4]; this run expects f32 [3] (the checkpoint is damaged)" \
	fp8/scale/fc0.weight --shape 4
bad 1 "--set mixed_precision=fp8" "$S is f64 [3]; this run expects f32 [3]" \
	fp8/scale/fc0.weight --dtype F64
S="checkpoint c: fp8: checkpoint tensor fp8/amax_history/fc1.weight"
bad 1 "--set mixed_precision=fp8" "$S is f32 [16, 3]; this run expects f32 [1024, 3]: set fp8.amax_history_len" \
	fp8/amax_history/fc1.weight --shape 16,3
bad 1 "--set mixed_precision=fp8" "$S holds nan at element 5; an amax is finite and >= 0" \
	fp8/amax_history/fc1.weight --element 5=nan
bad 1 "--set mixed_precision=fp8" "$S holds -0.5 at element 0; an amax is finite and >= 0" \
	fp8/amax_history/fc1.weight --element 0=-0.5

echo "== compress: the layout, PowerSGD's Q and the residuals"
printf '{"plugins": ["compress"], "compress": {"method": "powersgd", "matrix_approximation_rank": 2, "start_powerSGD_iter": 0, "use_error_feedback": true}}\n' >psgd.json
save pc 2 --config psgd.json
src=pc/checkpoint_4
P="--config psgd.json"
S="checkpoint c: compress:"
bad 2 "$P" "$S compress/layout is i64[5]; expected i64[4 + 2 x buckets]" compress/layout --shape 5
bad 2 "$P" "$S checkpoint tensor compress/layout is not one compress wrote: its saving world size is 0" \
	compress/layout --element 0=0
bad 2 "$P" "$S checkpoint tensor compress/layout is not one compress wrote: its layout hash" \
	compress/layout --element 5=7
bad 2 "$P" "$S checkpoint tensor compress/powersgd_q/0 is f64 with 1 dims; PowerSGD's Q is f32" \
	compress/powersgd_q/0 --dtype F64
bad 2 "$P" "$S checkpoint tensor compress/powersgd_q/0 holds nan at element 5; PowerSGD's Q is finite" \
	compress/powersgd_q/0 --element 5=nan
good 2 "$P" "compress: 1 bucket(s) start from a fresh PowerSGD Q: the checkpoint's Q has another size" \
	compress/powersgd_q/0 --shape 100
# rank 0's residual (rank1.safetensors keeps its own)
bad 2 "$P" "$S checkpoint blob residual.0 (bucket 0's error-feedback residual) holds inf at element 3; a residual is finite" \
	compress/residual.0 --element 3=inf
bad 2 "$P" "compress: the checkpoint's residual.0 holds 10 f32; bucket 0, of the layout it was saved for, has" \
	compress/residual.0 --shape 10

echo "== zero and fsdp: master weights and optimizer state of another dtype or shape"
printf '{"strategy": "zero", "zero_optimization": {"stage": 2}}\n' >zero.json
save pz 1 --config zero.json
src=pz/checkpoint_4
bad 1 "--config zero.json" "c/manifest.json: tensor 'master/fc0.bias' is f64; master weights and optimizer state are f32" \
	master/fc0.bias --dtype F64
bad 1 "--config zero.json" "c/manifest.json: tensor 'optim/exp_avg/fc1.weight' has shape [16, 17]; the model's parameter 'fc1.weight' has shape [16, 16]" \
	optim/exp_avg/fc1.weight --shape 16,17
printf '{"strategy": "fsdp"}\n' >fsdp.json
save pf 1 --config fsdp.json
src=pf/checkpoint_4
bad 1 "--config fsdp.json" "c/manifest.json: tensor 'optim/exp_avg_sq/fc0.bias' is f16; master weights and optimizer state are f32" \
	optim/exp_avg_sq/fc0.bias --dtype F16
bad 1 "--config fsdp.json" "c/manifest.json: tensor 'master/fc2.bias' has shape [11]; the model's parameter 'fc2.bias' has shape [10]" \
	master/fc2.bias --shape 11
echo "PASS"
