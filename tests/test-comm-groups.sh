#!/bin/sh
# tests/test-comm-groups.sh COMM_GROUPS BACKEND: groups (sub-communicators)
# on 4 ranks under `accel launch` with backend BACKEND (tests/progs/comm-groups.c
# checks the values and messages on each rank).
set -u
PROG=$1
BACKEND=$2
OUT=$(mktemp -d "${TMPDIR:-/tmp}/accel-groups-XXXXXX")
trap 'rm -rf "$OUT"' EXIT
fail() {
	echo "FAIL: $*"
	tail -n 60 "$OUT/run.log"
	exit 1
}
# run NAME [launch options...] -- MODE [VICTIM]: exit status into $rc
run() {
	"$ACCEL_CLI" launch -n 4 --grace-s 5 --set "backend=$BACKEND" "$@" >"$OUT/run.log" 2>&1
	rc=$?
}
# (rank lines only: the launcher's failure summary repeats some, indented)
oks() { grep -c "^\[rank [0-9]*\] .*comm-groups $1: ok (backend $BACKEND)" "$OUT/run.log"; }

run -- "$PROG" values
[ "$rc" -eq 0 ] && [ "$(oks values)" -eq 4 ] || fail "values: rc $rc"

# world rank 3 comes 4 s late to a group all-reduce (timeout 2 s): rank 1,
# its partner in the odd group, names it by world rank
run --set comm.timeout_s=2 -- "$PROG" late 3
grep "\[rank 1\] saw:" "$OUT/run.log" | grep -q "rank 3" || fail "late: rank 3 not named"
[ "$rc" -eq 0 ] && [ "$(oks late)" -eq 4 ] || fail "late: rc $rc"

# world rank 2 dies in the even group: rank 0 says so, naming world rank 2
run -- "$PROG" dead 2
grep "\[rank 0\] saw:" "$OUT/run.log" | grep -Eq "rank 2 \(pid [0-9]+[^)]*\) is (dead|gone)" ||
	fail "dead: rank 2 not named dead"
[ "$(oks dead)" -eq 3 ] || fail "dead: rc $rc"
echo PASS
