#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-check-skips.sh PYTHON: tools/check-skips.py (CI's skip policing)
# on doctored meson test logs, with the machine's facts given by --assume:
# an expected skip passes, a skip the machine could have run fails and is
# named with its reason, a test with no outside prerequisite may never
# skip, a missing or empty log fails, a test that this machine's
# capabilities should have registered and did not fails; and one run with
# the real probes.
set -u
python=${1:?usage: test-check-skips.sh PYTHON}
: "${ACCEL_TEST_SRCDIR:?set by meson}"
tool=$ACCEL_TEST_SRCDIR/tools/check-skips.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-check-skips.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# log FILE NAME:RESULT...: a testlog.json with one entry per argument.
log() {
	f=$1
	shift
	: >"$f"
	for t in "$@"; do
		name=${t%%:*} result=${t#*:}
		out=""
		[ "$result" = SKIP ] && out="skipped: $name's own reason\\n"
		printf '{"name": "accel:unit / %s", "stdout": "%s", "result": "%s", "returncode": %s}\n' \
			"$name" "$out" "$result" "$([ "$result" = SKIP ] && echo 77 || echo 0)" >>"$f"
	done
}

# expect RC PATTERN WHAT ARGS...: check-skips.py ARGS exits RC and prints PATTERN.
expect() {
	want=$1 pat=$2 what=$3
	shift 3
	"$python" "$tool" "$@" >"$tmp/out" 2>&1
	rc=$?
	if [ "$rc" -ne "$want" ]; then
		fail "$what: exit $rc, expected $want"
		cat "$tmp/out"
	elif ! grep -q -- "$pat" "$tmp/out"; then
		fail "$what: output lacks '$pat'"
		cat "$tmp/out"
	else
		echo "ok: $what: $(grep -m 1 -- "$pat" "$tmp/out")"
	fi
}

all_ok="store:OK ddp-parity-multi:OK optim-torch:OK"
log "$tmp/ok.json" $all_ok
expect 0 "3 tests, 0 expected skip(s), 0 unexpected" "nothing skipped" \
	--assume gpu=1 "$tmp/ok.json"

log "$tmp/gpu.json" store:OK nccl-gpu:SKIP
expect 0 "expected skip: nccl-gpu: this machine lacks a GPU" "nccl-gpu without a GPU" \
	--assume gpu=0 "$tmp/gpu.json"
expect 1 "UNEXPECTED SKIP: nccl-gpu: this machine has a GPU.*skipped: nccl-gpu's own reason" \
	"nccl-gpu with a GPU" --assume gpu=1 "$tmp/gpu.json"

# A test without an outside prerequisite never skips, whatever the machine.
log "$tmp/ddp.json" ddp-parity-multi:SKIP localsgd:OK
expect 1 "UNEXPECTED SKIP: ddp-parity-multi: it has no outside prerequisite" \
	"ddp-parity-multi skipped" --assume gpu=0 --assume torch=0 "$tmp/ddp.json"

# Two prerequisites: either one missing lets it skip; both present do not.
log "$tmp/torch.json" optim-torch:SKIP
expect 0 "expected skip: optim-torch: this machine lacks PyTorch" "optim-torch without torch" \
	--assume torch=0 --assume avx2_fma=1 "$tmp/torch.json"
expect 0 "expected skip: optim-torch: this machine lacks a CPU with AVX2 and FMA" \
	"optim-torch without AVX2+FMA" --assume torch=1 --assume avx2_fma=0 "$tmp/torch.json"
expect 1 "UNEXPECTED SKIP: optim-torch" "optim-torch with torch and AVX2+FMA" \
	--assume torch=1 --assume avx2_fma=1 "$tmp/torch.json"

# Several logs (the plain and the ASan build): a bad one fails the run.
expect 1 "0 expected skip(s), 1 unexpected" "two logs, one bad" \
	--assume gpu=1 "$tmp/ok.json" "$tmp/gpu.json"

# A build directory is read at meson-logs/testlog.json, and its registered
# tests at meson-info/intro-tests.json.
nocaps="--assume mpi=0 --assume cuda_toolkit=0 --assume nccl=0 --assume cublaslt=0 --assume python3=0"
mkdir -p "$tmp/build/meson-logs" "$tmp/build/meson-info"
cp "$tmp/gpu.json" "$tmp/build/meson-logs/testlog.json"
echo '[{"name": "store"}, {"name": "nccl-gpu"}]' >"$tmp/build/meson-info/intro-tests.json"
expect 0 "expected skip: nccl-gpu" "a build directory" --assume gpu=0 $nocaps "$tmp/build"

# Tests that vanish at configure time: where the machine has MPI (or
# python3), the tests registered only with it must be registered; without
# it, or with -Dmpi=disabled, their absence is as expected.
expect 1 "NOT REGISTERED: mpi-groups-values: this machine has MPI" "MPI tests not registered" \
	--assume gpu=0 $nocaps --assume mpi=1 "$tmp/build"
expect 1 "NOT REGISTERED: checkpoint-python: this machine has python3" \
	"python3 tests not registered" --assume gpu=0 $nocaps --assume python3=1 "$tmp/build"
expect 0 "not registered, as expected: mpi: this machine lacks MPI" "MPI tests without MPI" \
	--assume gpu=0 $nocaps "$tmp/build"
echo '[{"name": "mpi", "value": "disabled"}]' >"$tmp/build/meson-info/intro-buildoptions.json"
expect 0 "not registered, as configured: mpi (-Dmpi=disabled)" "MPI disabled on purpose" \
	--assume gpu=0 $nocaps --assume mpi=1 "$tmp/build"
rm "$tmp/build/meson-info/intro-tests.json"
expect 1 "cannot read the registered tests" "a build directory without meson-info" \
	--assume gpu=0 $nocaps "$tmp/build"

# Nothing ran: a failure, not a pass.
: >"$tmp/empty.json"
expect 1 "lists no test" "an empty log" "$tmp/empty.json"
expect 1 "cannot read" "a missing log" "$tmp/nothere.json"
expect 2 "FACT=0|1" "a bad --assume" --assume gpu=maybe "$tmp/ok.json"

# The real probes run (their answers depend on the machine; a log without
# skips passes whatever they say).
log "$tmp/real.json" store:OK nccl-gpu:OK
expect 0 "2 tests, 0 expected skip(s), 0 unexpected" "the real probes" "$tmp/real.json"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
exit 0
