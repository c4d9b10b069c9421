#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-tcp-vanish.sh: a node that vanishes (alive, but its network
# gone: nothing answers, no connection closes) is found by the tcp backend's
# keepalive within seconds, not only at comm.timeout_s.  Inside a private
# network namespace (`unshare -rn`, no privileges needed), `accel launch -n 2`
# runs comm-ranks' vanish mode: after a barrier rank 1 takes the namespace's
# loopback down and sleeps; rank 0, in an all-reduce with comm.timeout_s=60
# and comm.keepalive_s=3, must fail naming rank 1 as unreachable well before
# the timeout.  Skipped (77) where the system allows no user namespaces or
# `ip` (iproute2) is missing.
set -eu
: "${ACCEL_CLI:?set by meson}" "${ACCEL_TEST_BUILDDIR:?set by meson}"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/test-tcp-vanish.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! command -v ip >/dev/null 2>&1; then
	echo "skipped: no 'ip' command (Debian package iproute2)"
	exit 77
fi
if ! unshare -rn sh -c 'ip link set lo up' >"$OUT/unshare.log" 2>&1; then
	echo "skipped: no private network namespace here (unshare -rn: $(head -1 "$OUT/unshare.log"))"
	exit 77
fi

start=$(date +%s)
status=0
unshare -rn sh -c 'ip link set lo up && exec "$@"' sh \
	"$ACCEL_CLI" launch -n 2 --grace-s 2 --set backend=tcp --set comm.keepalive_s=3 \
	--set comm.timeout_s=60 -- "$ACCEL_TEST_BUILDDIR/tests/comm-ranks" vanish "$OUT" 1 \
	>"$OUT/launch.log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
[ -f "$OUT/vanish-0" ] || { cat "$OUT/launch.log" >&2; fail "rank 0 wrote no report"; }
report=$(cat "$OUT/vanish-0")
echo "launch exit $status after ${took} s; rank 0: $report"
[ "$status" -ne 0 ] || fail "accel launch exited 0"
case $report in
-1[0-9]" "*) ;;
*) fail "rank 0's all-reduce did not fail: $report" ;;
esac
echo "$report" | grep -q "rank 1 (pid [0-9]* on .*) is gone: its node has not answered for comm.keepalive_s = 3 s" ||
	fail "rank 0 does not name rank 1 as unreachable: $report"
secs=$(echo "$report" | cut -d' ' -f2)
# comm.keepalive_s 3: the unacknowledged header is given up on after 3 s
# without an ACK (checked every 0.5 s), or keepalive ends the idle connection
# after about 4 s; comm.timeout_s would have taken 60
awk -v s="$secs" 'BEGIN { exit !(s < 20) }' || fail "rank 0 took $secs s to notice"
[ "$took" -lt 40 ] || fail "accel launch took $took s"
echo "ok: rank 0 found rank 1 unreachable after $secs s (comm.timeout_s 60)"
