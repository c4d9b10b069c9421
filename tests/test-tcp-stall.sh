#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-tcp-stall.sh: a rank that is alive but stopped (SIGSTOP, a
# debugger, a frozen cgroup) for longer than comm.keepalive_s, in the middle
# of large broadcasts from rank 0, is not taken for a vanished node: its
# kernel still answers (window probes, keepalive), and the job completes once
# it continues.  (TCP_USER_TIMEOUT on the mesh used to abort such a
# connection after comm.keepalive_s: rank 0 then reported rank 1 "down or
# unreachable".)
set -eu
: "${ACCEL_CLI:?set by meson}" "${ACCEL_TEST_BUILDDIR:?set by meson}"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/test-tcp-stall.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

"$ACCEL_CLI" launch -n 2 --grace-s 2 --set backend=tcp --set comm.keepalive_s=2 \
	--set comm.timeout_s=60 -- "$ACCEL_TEST_BUILDDIR/tests/comm-ranks" stall "$OUT" 1 \
	>"$OUT/launch.log" 2>&1 &
launcher=$!
i=0
while [ ! -s "$OUT/stalled" ]; do
	i=$((i + 1))
	[ "$i" -lt 300 ] || { kill "$launcher" 2>/dev/null; cat "$OUT/launch.log" >&2; fail "rank 1 never stopped itself"; }
	sleep 0.1
done
pid=$(cat "$OUT/stalled")
# stopped for 3 x comm.keepalive_s
sleep 6
kill -CONT "$pid" 2>/dev/null || true
status=0
wait "$launcher" || status=$?
for r in 0 1; do
	rep=$(cat "$OUT/stall-$r" 2>/dev/null) || { cat "$OUT/launch.log" >&2; fail "rank $r wrote no report"; }
	echo "rank $r: $rep"
	case $rep in
	"0 "*) ;;
	*) fail "rank $r failed while rank 1 was only stopped: $rep" ;;
	esac
done
[ "$status" -eq 0 ] || { cat "$OUT/launch.log" >&2; fail "accel launch exited $status"; }
echo "ok: rank 1 stopped for 6 s (comm.keepalive_s 2) in the middle of 64 MiB broadcasts; the job completed"
