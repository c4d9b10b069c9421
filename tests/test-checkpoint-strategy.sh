#!/bin/sh
# SPDX-License-Identifier: MIT
# Checkpoints across strategies (docs/checkpoints.md, "Loading under another
# strategy"): a checkpoint saved under ddp loads under Local SGD (the
# example strategy, built in tree) and the other way, at 1, 2 and 3
# processes.  tests/progs/ckpt-reshard.c loads and saves at once: every
# canonical tensor (param/, master/, optim/) of the new checkpoint equals
# the loaded one's bit for bit, and training continues from there.  Under
# the same strategy and world size Local SGD restores every rank's replica
# (its per-rank blobs, byte for byte).  A tensor the new strategy needs
# but the checkpoint lacks is refused naming the tensor, the checkpoint and
# both strategies; the saving strategy's blobs are skipped with an info
# line naming them.  Then train_mlp resumes a ddp checkpoint under localsgd
# and the other way, and trains on.
# Usage: test-checkpoint-strategy.sh CKPT_RESHARD LOCALSGD_DIR TRAIN_MLP
set -eu

R=${1:?usage: test-checkpoint-strategy.sh CKPT_RESHARD LOCALSGD_DIR TRAIN_MLP LOCALSGD_1_2_DIR}
L=${2:?}
T=${3:?}
O=${4:?}
R=$(cd "$(dirname "$R")" && pwd)/$(basename "$R")
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
: "${ACCEL_CLI:?not set (run through meson test)}"
export ACCEL_PLUGIN_PATH="$L:${ACCEL_PLUGIN_PATH:-}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-strategy-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
cd "$tmp"

# fail; ranks N PROGRAM ARGS...: on N processes (1: directly); run N
# ARGS...: train_mlp ($T) so
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"

# reload N STRATEGY SRC DST: load SRC under STRATEGY on N processes, save
# DST at once, train 2 more steps; DST's canonical tensors must equal SRC's
reload() {
	n=$1 s=$2 src=$3 dst=$4
	ranks "$n" "$R" "$s" adamw reload "$src" "$dst" 2 >out 2>&1 ||
		{ cat out; fail "$src under $s at $n: reload"; }
	grep -qF "trained 2 more steps from step 3: weights changed, finite" out ||
		{ cat out; fail "$src under $s at $n: training did not continue"; }
	grep -q "\"strategy\": \"$s\"" "$dst/manifest.json" || fail "$dst: strategy"
	"$R" compare "$src" "$dst" >cmp 2>&1 || { cat cmp; fail "$src under $s at $n: tensors differ"; }
	grep -qF "14 tensors equal" cmp || { cat cmp; fail "$src under $s at $n: count"; }
	echo "  ok: $src under $s at $n process(es)"
}

# refused WHAT WANT N ARGS...: ARGS of $R on N processes exit 1 with WANT
# in the output
refused() {
	what=$1 want=$2 n=$3
	shift 3
	set +e
	ranks "$n" "$R" "$@" >out 2>&1
	rc=$?
	set -e
	[ "$rc" = 1 ] || { cat out; fail "$what: exited $rc"; }
	grep -qF -- "$want" out || { cat out; fail "$what: message"; }
}

echo "== saved under ddp at 2, loaded under localsgd at 1, 2 and 3"
ranks 2 "$R" ddp adamw save d2 3 >out 2>&1 || { cat out; fail "save under ddp"; }
for n in 1 2 3; do
	reload "$n" localsgd d2 "l$n"
done
grep -qF "info: accel_load_state: d2: saved under strategy 'ddp'; this job runs 'localsgd', which reads the canonical tensors (plugin 'ddp' saved no blobs)" out ||
	{ cat out; fail "the info line of a ddp checkpoint under localsgd"; }

echo "== saved under localsgd at 2 (replicas apart), loaded under ddp at 1, 2 and 3"
ranks 2 "$R" localsgd adamw save s2 3 >out 2>&1 || { cat out; fail "save under localsgd"; }
grep -q '"localsgd/clock"' s2/manifest.json || fail "s2: no localsgd/clock"
for n in 1 2 3; do
	reload "$n" ddp s2 "x$n"
done
grep -qF "info: accel_load_state: s2: saved under strategy 'localsgd'; this job runs 'ddp': skipping 10 blobs of plugin 'localsgd', which this job does not run (rank1.safetensors:localsgd/master/a, " out ||
	{ cat out; fail "the info line naming localsgd's skipped blobs"; }

echo "== localsgd at 2 and at 3 from its own checkpoint"
ranks 2 "$R" localsgd adamw reload s2 y2 0 >out 2>&1 || { cat out; fail "localsgd at 2"; }
# registered generators: at the saving world size each rank's own position
# (rank r drew r + 1 words before the save)
for want in "[rank 0] generators: data at 1 lane 0, rank at 1 lane 0" \
	"[rank 1] generators: data at 2 lane 0, rank at 2 lane 1"; do
	grep -qF "$want" out || { cat out; fail "generators at 2: no '$want'"; }
done
"$R" compare s2 y2 >cmp 2>&1 || { cat cmp; fail "localsgd at 2: tensors differ"; }
# rank 1's replica (its blobs) came back exactly, and it is not rank 0's
cmp s2/rank1.safetensors y2/rank1.safetensors || fail "localsgd at 2: rank 1's replica differs"
python3 - s2 <<'EOF' || fail "rank 1's replica equals rank 0's: the test proves nothing"
import json, struct, sys
def tensor(path, key):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    b, e = json.loads(raw[8:8 + n])[key]["data_offsets"]
    return raw[8 + n + b:8 + n + e]
d = sys.argv[1]
assert tensor(d + "/rank0.safetensors", "master/a") != tensor(d + "/rank1.safetensors", "localsgd/master/a")
EOF
echo "  ok: s2 under localsgd at 2 (every replica restored)"
reload 3 localsgd s2 y3
# at another world size: rank 0's position, each rank's own lane
for want in "[rank 0] generators: data at 1 lane 0, rank at 1 lane 0" \
	"[rank 1] generators: data at 1 lane 0, rank at 1 lane 1" \
	"[rank 2] generators: data at 1 lane 0, rank at 1 lane 2"; do
	grep -qF "$want" out || { cat out; fail "generators at 3: no '$want'"; }
done
echo "  ok: registered generators resume by the rule of docs/rng.md"

echo "== another optimizer is refused by name (checkpoint.allow_optimizer_change)"
for s in localsgd ddp; do
	refused "another optimizer under $s" \
		"accel_load_state: d2/manifest.json: saved with optimizer 'adamw' (state exp_avg, exp_avg_sq); this job's is 'sgd' (state momentum_buffer): set checkpoint.allow_optimizer_change=true" \
		2 "$s" sgd reload d2 z 1
	[ ! -e z ] || fail "a failed load saved"
done
echo "== a tensor the new strategy needs but the checkpoint lacks"
# a checkpoint of an accel that recorded no optimizer (nor manifest
# checksum): the tensors it holds say what is missing
rm -rf d2old && cp -r d2 d2old
python3 -c "import json; m=json.load(open('d2old/manifest.json')); [m.pop(k) for k in ('optimizer', 'manifest_xxh64')]; json.dump(m, open('d2old/manifest.json','w'))"
refused "a missing tensor" \
	"accel_load_state: d2old/manifest.json: no tensor 'optim/momentum_buffer/a', which this job's strategy 'localsgd' reads: the checkpoint was saved under strategy 'ddp', which did not write it" \
	2 localsgd sgd reload d2old z 1
[ ! -e z ] || fail "a failed load saved"
# and under the saving strategy: the other optimizer is named
refused "another optimizer" \
	"accel_load_state: d2old/manifest.json: no tensor 'optim/momentum_buffer/a': this job's optimizer 'sgd' keeps state 'momentum_buffer' (was the checkpoint saved with another optimizer?)" \
	2 ddp sgd reload d2old z 1
echo "  ok: missing tensor"

echo "== a strategy that keeps its state as blobs (Local SGD built against the ABI 1.2 headers)"
# blob-only state: loads under the saving strategy at the saving world size,
# is refused by name at another
(export ACCEL_PLUGIN_PATH="$O:$ACCEL_PLUGIN_PATH"
 ranks 2 "$R" localsgd adamw save b2 3) >out 2>&1 || { cat out; fail "save with the 1.2 localsgd"; }
grep -q '"state_version": 1' b2/manifest.json || { cat b2/manifest.json; fail "b2: not state version 1"; }
! grep -q '"optim/' b2/manifest.json || fail "b2: the 1.2 localsgd wrote optimizer tensors"
(export ACCEL_PLUGIN_PATH="$O:$ACCEL_PLUGIN_PATH"
 ranks 2 "$R" localsgd adamw reload b2 b2r 2) >out 2>&1 || { cat out; fail "blob-only state at 2"; }
grep -qF "trained 2 more steps from step 3: weights changed, finite" out ||
	{ cat out; fail "blob-only state at 2: did not train on"; }
(export ACCEL_PLUGIN_PATH="$O:$ACCEL_PLUGIN_PATH"
 refused "blob-only state at 3" "is per-rank state saved by a job of 2 processes; this job has 3" \
	3 localsgd adamw reload b2 b3 1)
echo "  ok: blob-only state"

echo "== train_mlp: ddp -> localsgd and localsgd -> ddp at 2 processes"
MLP_FLAGS="$MLP_FLAGS --log-every 5"
run 2 --steps 10 --checkpoint-every 10 --project-dir pd >out 2>&1 ||
	{ cat out; fail "train_mlp under ddp"; }
run 2 --steps 20 --resume pd/checkpoint_10 --set strategy=localsgd \
	--checkpoint-every 10 --project-dir pl >out 2>&1 || { cat out; fail "resumed under localsgd"; }
grep -q "resumed from pd/checkpoint_10 at step 10" out && grep -q "trained 10 steps" out ||
	{ cat out; fail "train_mlp under localsgd did not continue"; }
grep -q '"strategy": "localsgd"' pl/checkpoint_20/manifest.json || fail "pl: strategy"
run 2 --steps 30 --resume pl/checkpoint_20 >out 2>&1 ||
	{ cat out; fail "resumed under ddp"; }
grep -q "resumed from pl/checkpoint_20 at step 20" out && grep -q "trained 10 steps" out ||
	{ cat out; fail "train_mlp under ddp did not continue"; }
if grep -E "step 30/30" out | grep -qiE "nan|inf"; then cat out; fail "loss not finite"; fi
echo "  ok: train_mlp"
echo PASS
