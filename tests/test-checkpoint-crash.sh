#!/bin/sh
# SPDX-License-Identifier: MIT
# Crash injection into accel_save_state (docs/checkpoints.md, "Atomic
# commit"; docs/testing.md): with ACCEL_TEST_CKPT_CRASH=<point>[@<rank>] a
# rank of a 2-process train_mlp _exits at each write point of its second
# save (before its files, halfway through its file, before the barrier,
# between the manifest and the rename, before `latest`).  After each: the
# previous checkpoint is what `latest` names, it verifies
# (`accel checkpoint show --verify`) and a run resumed from it ends bitwise
# equal to an uninterrupted one; no directory named checkpoint_<n> exists
# that is not complete and verified; a temporary directory is refused as a
# checkpoint unless it holds a manifest (after the manifest was written).
# Usage: test-checkpoint-crash.sh TRAIN_MLP
set -eu

T=${1:?usage: test-checkpoint-crash.sh TRAIN_MLP}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
: "${ACCEL_CLI:?not set (run through meson test)}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-crash-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG ACCEL_TEST_CKPT_CRASH
cd "$tmp"
A=$ACCEL_CLI
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"
MLP_FLAGS="$MLP_FLAGS --set comm.timeout_s=30"

run 2 --steps 10 --save-final straight.st >out 2>&1 || { cat out; fail "straight run"; }
run 2 --steps 5 --checkpoint-every 5 --project-dir base >out 2>&1 || { cat out; fail "first save"; }

for point in before-files@1 mid-file@0 mid-file@1 before-barrier@1 before-rename before-latest; do
	rm -rf p && cp -r base p
	set +e
	ACCEL_TEST_CKPT_CRASH=$point run 2 --steps 10 --checkpoint-every 5 --resume latest \
		--project-dir p >out 2>&1
	rc=$?
	set -e
	name=${point%@*}
	case $point in *@*) who=${point#*@} ;; *) who=0 ;; esac   # rank 0 commits
	[ "$rc" != 0 ] || { cat out; fail "$point: the run did not fail"; }
	grep -qF "ACCEL_TEST_CKPT_CRASH: rank $who exits at '$name'" out ||
		grep -qF "test crash halfway through the file" out ||
		{ cat out; fail "$point: the crash did not happen"; }
	[ "$(cat p/latest)" = checkpoint_5 ] || fail "$point: latest is $(cat p/latest)"
	"$A" checkpoint show p/checkpoint_5 --verify >show 2>&1 ||
		{ cat show; fail "$point: the previous checkpoint does not verify"; }
	for d in p/checkpoint_*; do
		case $d in
		*.tmp-*)
			if [ -e "$d/manifest.json" ]; then
				[ "$name" = before-rename ] || fail "$point: $d has a manifest"
			else
				set +e
				"$A" checkpoint show "$d" >show 2>&1
				rc=$?
				set -e
				[ "$rc" = 1 ] && grep -qF "is not a committed checkpoint" show ||
					{ cat show; fail "$point: $d was not refused"; }
			fi ;;
		p/checkpoint_5) ;;
		p/checkpoint_10)
			# only after the rename: complete, but `latest` does not name it yet
			[ "$name" = before-latest ] || fail "$point: $d exists"
			"$A" checkpoint show "$d" --verify >show 2>&1 ||
				{ cat show; fail "$point: $d does not verify"; } ;;
		*) fail "$point: unexpected $d" ;;
		esac
	done
	run 2 --steps 10 --resume latest --project-dir p --save-final resumed.st >out 2>&1 ||
		{ cat out; fail "$point: resuming from latest"; }
	cmp straight.st resumed.st || fail "$point: the resumed run's weights differ"
	echo "  ok: $point"
done

# a rank that stalls before the barrier: the others' collective timeout
# names it, and the previous checkpoint is left as it was
rm -rf p && cp -r base p
set +e
ACCEL_TEST_CKPT_CRASH=stall-before-barrier@1 run 2 \
	--set comm.timeout_s=2 --steps 10 --checkpoint-every 5 --resume latest --project-dir p \
	>out 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat out; fail "stall: exited $rc"; }
grep -qE "accel_save_state.*: rank 1 never arrived within 2 s" out ||
	{ cat out; fail "stall: the timeout does not name rank 1"; }
[ "$(cat p/latest)" = checkpoint_5 ] || fail "stall: latest is $(cat p/latest)"
[ ! -e p/checkpoint_10 ] || fail "stall: p/checkpoint_10 exists"
echo "  ok: stall-before-barrier@1 (the timeout names rank 1)"
echo PASS
