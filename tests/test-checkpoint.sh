#!/bin/sh
# SPDX-License-Identifier: MIT
# accel_save_state / accel_load_state through examples/train_mlp
# (docs/checkpoints.md): a run resumed from a checkpoint ends bitwise equal
# to an uninterrupted one on every rank (1 and 2 processes; shuffling, a warm-up LR
# schedule and gradient clipping on; and with gradient accumulation), a bad checkpoint is refused with a
# message naming the file and what was expected (and is left as it was),
# and a failed save leaves the last good checkpoint and `latest` alone.
# Resharding: a checkpoint saved by 2 processes resumes at 1, 3 and 4 within
# a relative 5e-7 of an uninterrupted run at that size (measured worst:
# 1.7e-7; the first half ran at another size, so the reductions' order
# differs).
# Usage: test-checkpoint.sh TRAIN_MLP
set -eu

T=${1:?usage: test-checkpoint.sh TRAIN_MLP}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
: "${ACCEL_CLI:?not set (run through meson test)}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
cd "$tmp"

# fail, and run N ARGS...: train_mlp on N processes (1: directly)
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"
MLP_FLAGS="$MLP_FLAGS --set scheduler.type=linear --set scheduler.total_steps=20
   --set scheduler.warmup_steps=4 --set max_grad_norm=0.05"

for n in 1 2; do
	echo "== resume at $n process(es) is bitwise equal to an uninterrupted run"
	run "$n" --steps 20 --save-final "straight$n.st" --save-final-ranks "straight$n" >"out$n" 2>&1 ||
		{ cat "out$n"; fail "straight run"; }
	run "$n" --steps 10 --checkpoint-every 5 --project-dir "p$n" >"out$n" 2>&1 ||
		{ cat "out$n"; fail "first half"; }
	[ -d "p$n/checkpoint_5" ] && [ -d "p$n/checkpoint_10" ] || fail "checkpoints not written"
	[ "$(cat "p$n/latest")" = checkpoint_10 ] || fail "latest: $(cat "p$n/latest")"
	grep -q '"world_size": '"$n" "p$n/checkpoint_10/manifest.json" || fail "manifest world_size"
	grep -q '"step": 10' "p$n/checkpoint_10/manifest.json" || fail "manifest step"
	[ "$(ls "p$n" | grep -c tmp)" = 0 ] || fail "a temporary directory was left: $(ls "p$n")"
	run "$n" --steps 20 --resume latest --project-dir "p$n" --save-final "resumed$n.st" \
		--save-final-ranks "resumed$n" >"out$n" 2>&1 || { cat "out$n"; fail "resumed run"; }
	grep -q "resumed from p$n/checkpoint_10 at step 10" "out$n" || { cat "out$n"; fail "resume line"; }
	grep -q "trained 10 steps" "out$n" || { cat "out$n"; fail "the resumed run did not do 10 steps"; }
	cmp "straight$n.st" "resumed$n.st" || fail "$n process(es): resumed weights differ"
	# every rank's weights, not only rank 0's
	r=0
	while [ "$r" -lt "$n" ]; do
		[ -f "resumed$n.rank$r.safetensors" ] || fail "$n process(es): rank $r wrote no weights"
		cmp "straight$n.rank$r.safetensors" "resumed$n.rank$r.safetensors" ||
			fail "$n process(es): rank $r's resumed weights differ from its uninterrupted run's"
		r=$((r + 1))
	done
	# and the checkpoint changes training: resuming from step 5 also matches
	run "$n" --steps 20 --resume "p$n/checkpoint_5" --save-final "r5_$n.st" >"out$n" 2>&1 ||
		{ cat "out$n"; fail "resume from step 5"; }
	cmp "straight$n.st" "r5_$n.st" || fail "$n process(es): resumed from step 5: weights differ"
done

echo "== with gradient accumulation (2 micro-steps a step) too"
G="--set gradient_accumulation_steps=2"
run 1 $G --steps 20 --save-final gas_a.st >out 2>&1 || { cat out; fail "straight run"; }
run 1 $G --steps 10 --checkpoint-every 10 --project-dir pg >out 2>&1 || { cat out; fail "first half"; }
run 1 $G --steps 20 --resume pg/checkpoint_10 --save-final gas_b.st >out 2>&1 ||
	{ cat out; fail "resumed run"; }
cmp gas_a.st gas_b.st || fail "gradient accumulation: resumed weights differ"

echo "== a failed save leaves the last checkpoint and latest alone"
cp -r p1 keep
set +e
run 1 --steps 10 --checkpoint-every 5 --project-dir p1 >out 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat out; fail "saving over an existing checkpoint exited $rc"; }
grep -q "p1/checkpoint_5 already exists; save into a new directory" out || { cat out; fail "message"; }
# (but for the project directory's lock file, rewritten by every job)
diff -r -x .accel-lock keep p1 >/dev/null || fail "the failed save changed the project directory"

echo "== bad checkpoints are refused, named, and left as they were"
# case NAME EDIT EXPECTED: copy p1/checkpoint_10 to c, apply EDIT (a shell
# command run in c), resume from it at 1 process, expect EXPECTED on stderr
case_() {
	name=$1 edit=$2 want=$3
	rm -rf c && cp -r p1/checkpoint_10 c
	(cd c && eval "$edit")
	before=$(find c -type f | sort | xargs md5sum)
	set +e
	run 1 --steps 20 --resume c >out 2>&1
	rc=$?
	set -e
	[ "$rc" = 1 ] || { cat out; fail "$name: exited $rc, expected 1"; }
	grep -qF -- "$want" out || { cat out; fail "$name: output lacks: $want"; }
	after=$(find c -type f | sort | xargs md5sum)
	[ "$before" = "$after" ] || fail "$name: loading changed the checkpoint"
	echo "  ok: $name"
}
py_edit() {   # rewrite manifest.json with a python expression on m
	# without its manifest_xxh64, as an accel before the manifest checksum
	# wrote it (accepted with a warning): the fields' own checks are what
	# these rows test; the checksum has its rows below
	python3 -c "import json,sys; m=json.load(open('manifest.json')); m.pop('manifest_xxh64'); $1; json.dump(m, open('manifest.json','w'))"
}
flip='printf "\377" | dd of=rank0.safetensors bs=1 seek=$(($(stat -c %s rank0.safetensors) - 1)) conv=notrunc 2>/dev/null'
case_ "missing manifest" "rm manifest.json" \
	"c/manifest.json: missing: c is not a committed checkpoint"
case_ "not a directory" "true; cd .. && rm -rf c && touch c" \
	"c: no such checkpoint directory"
case_ "unknown format version" "py_edit \"m['format_version']=7\"" \
	"c/manifest.json: format_version 7; this accel (0.1.0) reads version 2 (a newer accel wrote it?)"
case_ "old format version" "py_edit \"m['format_version']=1\"" \
	"c/manifest.json: format_version 1; this accel (0.1.0) reads version 2 (an older accel wrote it"
case_ "slice checksum" "py_edit \"m['tensors']['master/fc1.weight']['slices'][0]['xxh64']='0123456789abcdef'\"" \
	"c/rank0.safetensors: tensor 'master/fc1.weight' elements [0, 256) (key 'master/fc1.weight'): checksum xxh64"
case_ "tensor shape differs from the model" "py_edit \"m['tensors']['optim/exp_avg/fc0.weight']['shape']=[784, 16]\"" \
	"c/manifest.json: tensor 'optim/exp_avg/fc0.weight' has shape [784, 16]; the model's parameter 'fc0.weight' has shape [16, 784]"
case_ "param dtype differs from the model" "py_edit \"m['tensors']['param/fc2.bias']['dtype']='I32'\"" \
	"c/manifest.json: tensor 'param/fc2.bias' is i32 [10]; the model's parameter 'fc2.bias' is f32 [10]"
case_ "slices leave a gap" "py_edit \"m['tensors']['master/fc2.bias']['slices'][0]['count']=9\"" \
	"c/manifest.json: tensor 'master/fc2.bias': its slices hold 9 of its 10 elements"
case_ "corrupt file (data)" "$flip" \
	"c/rank0.safetensors: blob 'sampler/0': checksum xxh64"
case_ "corrupt file (header)" 'printf "x" | dd of=rank0.safetensors bs=1 seek=20 conv=notrunc 2>/dev/null' \
	"c/rank0.safetensors: header checksum xxh64"
msize=$(stat -c %s p1/checkpoint_10/model.safetensors)
case_ "truncated file" "truncate -s -3 model.safetensors" \
	"c/model.safetensors: $((msize - 3)) bytes; the manifest expects $msize"
case_ "missing file" "rm model.safetensors" \
	"c/model.safetensors: missing (the manifest lists it: $msize bytes)"
# (loading under another strategy: tests/test-checkpoint-strategy.sh)
case_ "other strategy without a tensor ddp reads" "py_edit \"m['strategy']='zero'; m['plugins']=[{'name': 'zero', 'state_version': 1}]; del m['tensors']['optim/exp_avg_sq/fc1.bias']\"" \
	"c/manifest.json: no tensor 'optim/exp_avg_sq/fc1.bias', which this job's strategy 'ddp' reads: the checkpoint was saved under strategy 'zero', which did not write it"
case_ "plugin not saved" "py_edit \"m['plugins']=[]\"" \
	"c/manifest.json: no state of plugin 'ddp', the strategy that saved the checkpoint (plugins does not list it)"
case_ "bad JSON" "echo '{' > manifest.json" \
	"c/manifest.json:2: not valid JSON"
echo "== a missing rank's shard is named with a tensor it holds"
for n in 1 4; do
	rm -rf c && cp -r p2/checkpoint_10 c && rm c/rank1.safetensors
	set +e
	run "$n" --steps 20 --resume c >out 2>&1
	rc=$?
	set -e
	[ "$rc" = 1 ] || { cat out; fail "missing shard at $n: exited $rc"; }
	grep -qF "c/rank1.safetensors: missing (the manifest lists it: " out &&
		grep -qF "bytes); it holds rank 1's shard: tensor 'master/fc0.bias' elements [0, 16) of 16" out ||
		{ cat out; fail "missing shard at $n: message"; }
	echo "  ok: missing rank's shard ($n process(es))"
done

echo "== saved by 2 processes, resumed at 1, 3 and 4: within 5e-7 of a run at that size"
# a global batch of 12 splits over 1, 2, 3 and 4 processes
R="--batch-size 12"
run 2 $R --steps 10 --checkpoint-every 10 --project-dir pr >out 2>&1 || { cat out; fail "save at 2"; }
for n in 1 3 4; do
	run "$n" $R --steps 20 --save-final "rs$n.st" >out 2>&1 || { cat out; fail "straight at $n"; }
	run "$n" $R --steps 20 --resume pr/checkpoint_10 --save-final "rr$n.st" >out 2>&1 ||
		{ cat out; fail "resume at $n from 2"; }
	grep -q "resumed from pr/checkpoint_10 at step 10" out || { cat out; fail "resume line at $n"; }
	grep -q "trained 10 steps" out || { cat out; fail "the resumed run at $n did not do 10 steps"; }
	python3 "$ACCEL_TEST_SRCDIR/tests/st_compare.py" "rs$n.st" "rr$n.st" 5e-7 >cmp 2>&1 ||
		{ cat cmp; fail "resumed at $n from 2: weights differ"; }
	echo "  ok: 2 -> $n: $(tail -1 cmp)"
done
# and back: saved at 3, resumed at 2 (slices of 3 files read by 2 ranks)
run 3 $R --steps 10 --checkpoint-every 10 --project-dir p3 >out 2>&1 || { cat out; fail "save at 3"; }
run 2 $R --steps 20 --save-final rs2.st >out 2>&1 || { cat out; fail "straight at 2"; }
run 2 $R --steps 20 --resume p3/checkpoint_10 --save-final rr2.st >out 2>&1 || { cat out; fail "3 -> 2"; }
python3 "$ACCEL_TEST_SRCDIR/tests/st_compare.py" rs2.st rr2.st 5e-7 >cmp 2>&1 ||
	{ cat cmp; fail "resumed at 2 from 3: weights differ"; }
echo "  ok: 3 -> 2: $(tail -1 cmp)"
set +e
run 1 --steps 20 --resume latest --project-dir nowhere >out 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -qF "cannot read nowhere/latest" out || { cat out; fail "--resume latest without one"; }
echo "  ok: --resume latest without a checkpoint"
echo PASS
