#!/bin/sh
# SPDX-License-Identifier: MIT
# The checkpoint fixes of a fault campaign (docs/checkpoints.md), through
# examples/train_mlp and `accel checkpoint show`:
#  - resuming an older checkpoint: the next saves continue from it, the
#    newer checkpoints of the abandoned timeline are moved aside (one
#    warning names them), listed, and the run ends well;
#  - the project directory checked at accel_prepare (not a directory, no
#    room for one checkpoint, forbidden where the user is not root);
#  - leftovers of dead jobs removed at the next save; `--resume latest`
#    finds a committed checkpoint whose `latest` update never happened;
#  - the manifest's own checksum and its fields named;
#  - one job per project directory (a flock, released when the holder dies);
#  - another optimizer on resume refused, or its state dropped by name;
#    another gradient_accumulation_steps or LR schedule said;
#  - a reduce hook with checkpoint state switched on at a resume.
# Usage: test-checkpoint-faults.sh TRAIN_MLP HOOK_DIR
set -eu

T=${1:?usage: test-checkpoint-faults.sh TRAIN_MLP HOOK_DIR}
H=${2:?usage: test-checkpoint-faults.sh TRAIN_MLP HOOK_DIR}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
H=$(cd "$H" && pwd)
: "${ACCEL_CLI:?not set (run through meson test)}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-faults-XXXXXX")
holder=
trap '[ -z "$holder" ] || kill -9 "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG ACCEL_TEST_CKPT_CRASH ACCEL_TEST_CKPT_FREE_BYTES
cd "$tmp"
A=$ACCEL_CLI

# fail, and run N ARGS...: train_mlp on N processes (1: directly)
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"

# expect RC WANT ARGS...: train_mlp at 1 process exits RC with WANT in its output
expect() {
	want_rc=$1 want=$2
	shift 2
	set +e
	run 1 "$@" >out 2>&1
	rc=$?
	set -e
	[ "$rc" = "$want_rc" ] || { cat out; fail "$want: exited $rc, expected $want_rc"; }
	grep -qF -- "$want" out || { cat out; fail "output lacks: $want"; }
}

echo "== resuming an older checkpoint abandons the newer ones, by name"
run 2 --steps 30 --checkpoint-every 10 --project-dir p --save-final straight.st >out 2>&1 ||
	{ cat out; fail "straight run"; }
cmp -s p/checkpoint_20/model.safetensors /dev/null && fail "no checkpoint_20"
cp p/checkpoint_20/manifest.json old20.json
run 2 --steps 30 --checkpoint-every 10 --project-dir p --resume p/checkpoint_10 \
	--save-final resumed.st >out 2>&1 || { cat out; fail "the resumed run failed"; }
grep -q "resumed from p/checkpoint_10 at step 10" out || { cat out; fail "did not resume at 10"; }
[ "$(grep -c 'the newer checkpoints of the timeline it abandoned' out)" = 1 ] ||
	{ cat out; fail "not one warning naming the abandoned checkpoints"; }
grep -q "this job resumed from checkpoint_10 in .*/p; the newer checkpoints of the timeline it abandoned (checkpoint_2\(0\|0, checkpoint_30\)\|checkpoint_30, checkpoint_20) are moved aside as <name>.abandoned-" out ||
	{ cat out; fail "the warning does not name checkpoint_20 and checkpoint_30"; }
for k in 20 30; do
	ls -d p/checkpoint_$k.abandoned-* >/dev/null 2>&1 || fail "checkpoint_$k was not moved aside"
	[ -f p/checkpoint_$k/manifest.json ] || fail "no new checkpoint_$k"
done
cmp -s old20.json p/checkpoint_20.abandoned-*/manifest.json || fail "the abandoned checkpoint_20 changed"
[ "$(cat p/latest)" = checkpoint_30 ] || fail "latest is $(cat p/latest)"
# the same data order and state: the new timeline ends where the old one did
cmp straight.st resumed.st || fail "the resumed run's weights differ from the straight run's"
"$A" checkpoint show p >show 2>&1 || { cat show; fail "show of a project directory"; }
grep -qE '^checkpoint_20\.abandoned-[0-9TZ]+ +20  abandoned timeline' show ||
	{ cat show; fail "show does not list the abandoned checkpoint_20"; }
grep -qE '^checkpoint_30 +30  committed, latest$' show || { cat show; fail "show: checkpoint_30"; }
grep -qE '^latest +checkpoint_30 \(--resume latest: checkpoint_30\)$' show || { cat show; fail "show: latest"; }
echo "  ok: resumed at 10 over 20 and 30: both moved aside, the run ends bitwise as the straight one"

echo "== the project directory is checked at accel_prepare"
touch afile
expect 1 "accel_prepare: project directory afile is not a directory (project_dir)" \
	--steps 10 --checkpoint-every 5 --project-dir afile
grep -q "^step" out && fail "trained before refusing a file as project directory"
# one checkpoint of the 784-16-16-10 MLP: 13002 f32 weights, and f32
# master weights and AdamW's two moments: 13002 * 4 * 4 = 208032 bytes
ACCEL_TEST_CKPT_FREE_BYTES=1000 expect 1 \
	"accel_prepare: project directory pf has 1000 bytes free; one checkpoint of this model needs about 208032" \
	--steps 10 --checkpoint-every 5 --project-dir pf
ACCEL_TEST_CKPT_FREE_BYTES=208032 run 1 --steps 5 --checkpoint-every 5 --project-dir pf2 >out 2>&1 ||
	{ cat out; fail "exactly enough room was refused"; }
if [ "$(id -u)" != 0 ]; then
	mkdir ro && chmod 555 ro
	expect 1 "accel_prepare: project directory ro is not writable: creating .accel-lock: Permission denied (forbidden" \
		--steps 10 --checkpoint-every 5 --project-dir ro
	chmod 755 ro
	echo "  ok: not a directory, no room, forbidden"
else
	echo "  ok: not a directory, no room (forbidden: not checked as root, who may write anywhere)"
fi

echo "== leftovers of dead jobs are removed at the next save, one line each"
rm -rf q && cp -r p q && rm -rf q/checkpoint_*.abandoned-*
mkdir q/checkpoint_40.tmp-deadjob && touch q/checkpoint_40.tmp-deadjob/rank0.safetensors
echo checkpoint_40 >q/latest.tmp-deadjob
run 1 --steps 40 --checkpoint-every 10 --project-dir q --resume latest >out 2>&1 ||
	{ cat out; fail "run over leftovers"; }
for x in checkpoint_40.tmp-deadjob latest.tmp-deadjob; do
	[ ! -e "q/$x" ] || fail "$x was not removed"
	[ "$(grep -c "removed .*/q/$x, left by a job that ended before committing it" out)" = 1 ] ||
		{ cat out; fail "no one line naming $x"; }
done
[ -f q/checkpoint_40/manifest.json ] || fail "checkpoint_40 was not saved"
echo "  ok"

echo "== --resume latest finds a committed checkpoint whose latest update failed"
rm -rf r && mkdir r
ACCEL_TEST_CKPT_CRASH=before-latest run 1 --steps 10 --checkpoint-every 5 --project-dir r >out 2>&1 || true
# the first save (checkpoint_5) crashed before `latest`: no latest at all
[ -f r/checkpoint_5/manifest.json ] && [ ! -e r/latest ] || { ls r; fail "crash setup"; }
run 1 --steps 10 --checkpoint-every 5 --project-dir r --resume latest >out 2>&1 ||
	{ cat out; fail "--resume latest without latest"; }
grep -q "resumed from r/checkpoint_5 at step 5" out || { cat out; fail "did not resume checkpoint_5"; }
grep -qF "r/latest is missing; checkpoint_5 is the newest committed checkpoint there: using it" out ||
	{ cat out; fail "no warning about the missing latest"; }
# latest older than a committed checkpoint (the update of the second save failed)
echo checkpoint_5 >r/latest
run 1 --steps 12 --project-dir r --resume latest >out 2>&1 || { cat out; fail "older latest"; }
grep -q "resumed from r/checkpoint_10 at step 10" out || { cat out; fail "older latest: not checkpoint_10"; }
grep -qF "r/latest names checkpoint_5, an older one; checkpoint_10 is the newest committed checkpoint there: using it" out ||
	{ cat out; fail "older latest: warning"; }
echo "  ok"

echo "== the manifest's own checksum, and its fields named"
rm -rf c && cp -r p/checkpoint_10 c
sed -i 's/"step": 10,/"step": 11,/' c/manifest.json
grep -q '"step": 11,' c/manifest.json || fail "sed edit of step"
expect 1 "c/manifest.json: its content has checksum xxh64 " --steps 20 --resume c
grep -qF "(the manifest was edited or is corrupt: checkpoints are not edited by hand)" out ||
	{ cat out; fail "checksum message"; }
rm -rf c && cp -r p/checkpoint_10 c
sed -i 's/"micro_step": 0,/"micro_step": 1,/' c/manifest.json
expect 1 "c/manifest.json: its content has checksum xxh64 " --steps 20 --resume c
# an older accel's manifest (no checksum): fields checked by name
unsealed() {
	rm -rf c && cp -r p/checkpoint_10 c
	python3 -c "import json; m=json.load(open('c/manifest.json')); m.pop('manifest_xxh64'); $1; json.dump(m, open('c/manifest.json','w'))"
}
unsealed "m['step']=-5"
expect 1 "c/manifest.json: step: -5 is not a step" --steps 20 --resume c
unsealed "m['world_size']='2'"
expect 1 'c/manifest.json: world_size: "2" is not a process count' --steps 20 --resume c
unsealed "m['samplers']=-1"
expect 1 "c/manifest.json: samplers: -1 is not a number of samplers" --steps 20 --resume c
unsealed "del m['step']"
expect 1 "c/manifest.json: step missing" --steps 20 --resume c
unsealed "pass"
expect 0 "c/manifest.json has no manifest_xxh64 (an accel before the manifest checksum wrote it)" \
	--steps 20 --resume c
"$A" checkpoint show p/checkpoint_10 >show 2>&1 || { cat show; fail "show"; }
grep -qE '^manifest     xxh64 [0-9a-f]{16} \(its own checksum: verified\)$' show ||
	{ cat show; fail "show: the manifest checksum"; }
echo "  ok"

echo "== one job per project directory"
printf 'job other-job pid 4242 host elsewhere\n' >p/.accel-lock
# the holder says when it holds the lock (a fixed 0.5 s wait let a job on a
# loaded machine run before flock had taken it); its I/O is not the test's,
# so its sleep, left behind when flock is killed, holds no pipe of ours
rm -f held
flock -o p/.accel-lock sh -c 'echo $$ > held.tmp && mv held.tmp held && exec sleep 60' \
	</dev/null >/dev/null 2>&1 &
holder=$!
i=0
until [ -s held ]; do
	i=$((i + 1))
	[ $i -lt 300 ] || fail "flock did not take p/.accel-lock within 30 s"
	sleep 0.1
done
expect 1 "accel_prepare: project directory p is in use by job other-job (pid 4242 on host elsewhere)" \
	--steps 40 --checkpoint-every 10 --project-dir p --resume latest
kill -9 "$holder" "$(cat held)" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
holder=
# the kernel released the dead holder's lock: the next job runs
run 1 --steps 32 --project-dir p --resume latest >out 2>&1 || { cat out; fail "after the holder died"; }
"$A" checkpoint show p >show 2>&1
grep -qE '^job          .+ \(pid [0-9]+ on host .+\)(: ended)?$' show || { cat show; fail "show: the lock's job"; }
echo "  ok"

echo "== another optimizer on resume: refused by name, or its state dropped by name"
SGD="--set optimizer.type=sgd --set optimizer.params.momentum=0.9"
expect 1 "p/checkpoint_10/manifest.json: saved with optimizer 'adamw' (state exp_avg, exp_avg_sq); this job's is 'sgd' (state momentum_buffer): set checkpoint.allow_optimizer_change=true to resume with it" \
	--steps 20 --resume p/checkpoint_10 $SGD
expect 0 "accel_load_state: p/checkpoint_10: saved with optimizer 'adamw' (state exp_avg, exp_avg_sq); this job's is 'sgd' (state momentum_buffer) (checkpoint.allow_optimizer_change): dropping optim/exp_avg/*, optim/exp_avg_sq/*; momentum_buffer start from zero" \
	--steps 20 --resume p/checkpoint_10 $SGD --set checkpoint.allow_optimizer_change=true \
	--save-final sgd-resumed.st
# the new state starts from zero: with dampening 0 the first step of SGD
# with momentum from a zero buffer is plain SGD's (0.9 * 0 + g = g), so one
# step from the checkpoint ends bitwise equal to SGD without momentum
# (whose state is none: also an optimizer change); a buffer read from the
# dropped AdamW moments, or left unset, would not
run 1 --steps 11 --resume p/checkpoint_10 $SGD --set checkpoint.allow_optimizer_change=true \
	--save-final sgd-m.st >out 2>&1 || { cat out; fail "sgd with momentum, 1 step"; }
run 1 --steps 11 --resume p/checkpoint_10 --set optimizer.type=sgd \
	--set checkpoint.allow_optimizer_change=true --save-final sgd-0.st >out 2>&1 ||
	{ cat out; fail "sgd without momentum, 1 step"; }
grep -qF "this job's is 'sgd' (no state) (checkpoint.allow_optimizer_change): dropping optim/exp_avg/*, optim/exp_avg_sq/*" out ||
	{ cat out; fail "sgd without momentum: warning"; }
cmp sgd-m.st sgd-0.st || fail "momentum did not start from zero (the step differs from plain SGD's)"
echo "  ok: refused, then dropped by name; the new state starts from zero"

echo "== another gradient_accumulation_steps or LR schedule is said"
expect 0 "accel_load_state: p/checkpoint_10: saved with gradient_accumulation_steps 1; this job uses 2: an optimizer step now takes 2 micro-batches" \
	--steps 12 --resume p/checkpoint_10 --set gradient_accumulation_steps=2
expect 0 "accel_load_state: p/checkpoint_10: saved with learning-rate schedule {\"lr\":0.001,\"min_lr\":0.0,\"total_steps\":0,\"type\":\"constant\",\"warmup_steps\":0}; this job's is {\"lr\":0.001,\"min_lr\":0.0,\"total_steps\":40,\"type\":\"linear\",\"warmup_steps\":0}: the learning rate follows the new schedule from step 10 on" \
	--steps 12 --resume p/checkpoint_10 --set scheduler.type=linear --set scheduler.total_steps=40
run 1 --steps 12 --resume p/checkpoint_10 >out 2>&1 || { cat out; fail "same settings"; }
! grep -q "saved with" out || { cat out; fail "a warning with the same settings"; }
echo "  ok"

echo "== a reduce hook with checkpoint state switched on at a resume"
printf '{"plugins": ["state-hook"], "plugin_dirs": ["%s"]}\n' "$H" >hook.json
run 2 --steps 20 --resume p/checkpoint_10 --project-dir ph --checkpoint-every 20 --config hook.json \
	--save-final hooked.st >out 2>&1 || { cat out; fail "switching the hook on at a resume"; }
grep -qF "accel_load_state: p/checkpoint_10: no state of plugin 'state-hook', which this job runs (the checkpoint was saved without it): its load_state gets state_version 0" out ||
	{ cat out; fail "no info line for the hook"; }
grep -q "state-hook: load_state: no saved state (version 0): counting from 0" out ||
	{ cat out; fail "the hook's load_state did not get version 0"; }
grep -q "state-hook: 10 buckets reduced in all" out || { cat out; fail "hook: count after 10 steps"; }
# the sum hook trains exactly like no hook: the weights of the straight run
cmp hooked.st straight20.st 2>/dev/null || {
	run 2 --steps 20 --save-final straight20.st >out2 2>&1 || { cat out2; fail "straight 20"; }
	cmp hooked.st straight20.st || fail "the hooked resumed run's weights differ from a straight run's"
}
# and its own state comes back from its checkpoint
run 2 --steps 25 --resume ph/checkpoint_20 --config hook.json >out 2>&1 ||
	{ cat out; fail "resume with the hook's state"; }
grep -q "state-hook: load_state: restored 10 buckets reduced" out || { cat out; fail "hook: restore"; }
grep -q "state-hook: 15 buckets reduced in all" out || { cat out; fail "hook: count after 15 steps"; }
echo "  ok"
echo "== the scaler, compress and fp8 plugins switched on at a resume start fresh"
# (each is a plugin of this build, found on ACCEL_PLUGIN_PATH)
for spec in 'scaler|{"plugins": ["scaler"]}|scaler: the checkpoint holds no scaler state (saved without fp16): starting from init_scale 65536' \
	'compress|{"plugins": ["compress"], "compress": {"method": "fp16"}}|compress: the checkpoint holds no compress state (saved without the hook): residuals start at zero' \
	'fp8|{"mixed_precision": "fp8"}|fp8: the checkpoint holds no fp8 state (saved without fp8): amax histories and scales start as in a new run'; do
	name=${spec%%|*}
	rest=${spec#*|}
	printf '%s\n' "${rest%%|*}" >on-$name.json
	want=${rest#*|}
	run 2 --steps 12 --resume p/checkpoint_10 --config on-$name.json >out 2>&1 ||
		{ cat out; fail "$name switched on at a resume"; }
	grep -qF "no state of plugin '$name', which this job runs" out || { cat out; fail "$name: no core info line"; }
	grep -qF "$want" out || { cat out; fail "$name: its load_state did not start fresh"; }
done
echo "  ok"
echo "PASS"
