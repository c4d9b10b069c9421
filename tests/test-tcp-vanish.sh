#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-tcp-vanish.sh: a node that vanishes (alive, but its network
# gone: nothing answers, no connection closes) is found within seconds
# (comm.keepalive_s), not only at comm.timeout_s.  Each case runs inside a
# private network namespace (`unshare -rn`, no privileges needed), where
# taking the loopback down cuts every rank off:
#  1. comm-ranks' vanish mode: after a barrier rank 1 takes the loopback
#     down and sleeps; rank 0, in an all-reduce with comm.timeout_s=60 and
#     comm.keepalive_s=3, must fail naming rank 1 as unreachable;
#  2. comm-ranks' stall mode: rank 1 stops itself (SIGSTOP) in 64 MiB
#     broadcasts, so rank 0's connection waits for its window, then the
#     loopback goes down; rank 0 must fail the same way.
# Skipped (77) where the system allows no user namespaces or `ip`
# (iproute2) is missing.
set -eu
: "${ACCEL_CLI:?set by meson}" "${ACCEL_TEST_BUILDDIR:?set by meson}"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/test-tcp-vanish.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_unreachable CASE REPORT LOG STATUS KEEPALIVE: rank 0's REPORT says
# its collective failed naming rank 1 as unreachable within 20 s (with
# comm.timeout_s 60), and accel launch exited non-zero (STATUS).
expect_unreachable() {
	[ -f "$2" ] || { cat "$3" >&2; fail "$1: rank 0 wrote no report"; }
	report=$(cat "$2")
	echo "$1: launch exit $4; rank 0: $report"
	[ "$4" -ne 0 ] || fail "$1: accel launch exited 0"
	echo "$report" | grep -q "rank 1 (pid [0-9]* on .*) is gone: its node has not answered for comm.keepalive_s = $5 s" ||
		fail "$1: rank 0 does not name rank 1 as unreachable: $report"
	secs=$(echo "$report" | cut -d' ' -f2)
	awk -v s="$secs" 'BEGIN { exit !(s < 20) }' || fail "$1: rank 0 took $secs s to notice"
	echo "ok: $1: rank 0 found rank 1 unreachable after $secs s (comm.timeout_s 60)"
}

if ! command -v ip >/dev/null 2>&1; then
	echo "skipped: no 'ip' command (Debian package iproute2)"
	exit 77
fi
if ! unshare -rn sh -c 'ip link set lo up' >"$OUT/unshare.log" 2>&1; then
	echo "skipped: no private network namespace here (unshare -rn: $(head -1 "$OUT/unshare.log"))"
	exit 77
fi

# 1. rank 1's node vanishes while rank 0 waits in an all-reduce
start=$(date +%s)
status=0
unshare -rn sh -c 'ip link set lo up && exec "$@"' sh \
	"$ACCEL_CLI" launch -n 2 --grace-s 2 --set backend=tcp --set comm.keepalive_s=3 \
	--set comm.timeout_s=60 -- "$ACCEL_TEST_BUILDDIR/tests/comm-ranks" vanish "$OUT" 1 \
	>"$OUT/launch.log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
# comm.keepalive_s 3: the unacknowledged header is given up on after 3 s
# without an ACK (checked every 0.5 s), or keepalive ends the idle connection
# after about 4 s; comm.timeout_s would have taken 60
expect_unreachable "vanished" "$OUT/vanish-0" "$OUT/launch.log" "$status" 3
[ "$took" -lt 40 ] || fail "accel launch took $took s"

# 2. The node vanishes while its rank had stopped reading (SIGSTOP in the
# middle of 64 MiB broadcasts from rank 0): everything rank 0 sent is
# acknowledged and the rest waits for a window that never opens, so there
# is no unacknowledged data and keepalive does not run; the unanswered
# window probes must count as silence.
mkdir "$OUT/stall"
status=0
OUTDIR=$OUT/stall unshare -rn sh -c '
	ip link set lo up || exit 1
	"$@" &
	l=$!
	i=0
	while [ ! -s "$OUTDIR/stalled" ]; do
		i=$((i + 1))
		[ "$i" -lt 300 ] || { kill "$l"; exit 1; }
		sleep 0.1
	done
	sleep 1
	ip link set lo down
	wait "$l"' sh \
	"$ACCEL_CLI" launch -n 2 --grace-s 2 --set backend=tcp --set comm.keepalive_s=2 \
	--set comm.timeout_s=60 -- "$ACCEL_TEST_BUILDDIR/tests/comm-ranks" stall "$OUT/stall" 1 \
	>"$OUT/stall.log" 2>&1 || status=$?
expect_unreachable "stopped, then vanished" "$OUT/stall/stall-0" "$OUT/stall.log" "$status" 2
