#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-shm-ns.sh: the shm backend across Linux namespaces, with
# `unshare` (no privileges needed where user namespaces are allowed):
#  - a rank in a pid namespace of its own (as under some container set-ups)
#    joins a 3-rank job while it must wait for a late rank: it used to take
#    rank 0, whose pid it cannot see, for dead; every rank checks the matrix;
#  - /dev/shm too small for the segment (a private 8 MiB tmpfs): the error
#    gives the segment's parts and names the setting that makes it large
#    (shm.small_kb here), not always shm.chunk_kb.
# Skipped (77) where `unshare -Urpf` or `unshare -rm` is not allowed.
set -eu
: "${ACCEL_CLI:?set by meson}" "${ACCEL_TEST_BUILDDIR:?set by meson}"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/test-shm-ns.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
PROG=$ACCEL_TEST_BUILDDIR/tests/comm-ranks

if ! unshare -Urpf --mount-proc true >"$OUT/probe.log" 2>&1 ||
	! unshare -rm sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' >>"$OUT/probe.log" 2>&1; then
	echo "skipped: no unprivileged pid/mount namespaces here ($(head -1 "$OUT/probe.log"))"
	exit 77
fi

# 1. rank 1 in its own pid namespace, rank 2 one second late
mkdir "$OUT/pidns"
status=0
"$ACCEL_CLI" launch -n 3 --set backend=shm -- sh -c '
	case $ACCEL_RANK in
	1) exec unshare -Urpf --kill-child --mount-proc "$0" matrix "$1" 0 16385 ;;
	2) sleep 1 ;;
	esac
	exec "$0" matrix "$1" 0 16385' "$PROG" "$OUT/pidns" >"$OUT/pidns.log" 2>&1 || status=$?
[ "$status" -eq 0 ] || { cat "$OUT/pidns.log" >&2; fail "the job with rank 1 in its own pid namespace exited $status"; }
for r in 0 1 2; do
	rep=$(cat "$OUT/pidns/matrix-$r" 2>/dev/null) || fail "rank $r wrote no report"
	case $rep in
	"0 "*"backend shm"*) ;;
	*) fail "rank $r: $rep" ;;
	esac
done
echo "ok: 3 ranks, rank 1 in its own pid namespace: every matrix check passed"

# 2. /dev/shm of 8 MiB, one-shot slots of 2 x 8 MiB per rank
mkdir "$OUT/nospace"
status=0
unshare -rm sh -c 'mount -t tmpfs -o size=8m tmpfs /dev/shm && exec "$@"' sh \
	"$ACCEL_CLI" launch -n 2 --set backend=shm --set shm.small_kb=8192 -- \
	"$PROG" matrix "$OUT/nospace" 0 100 >"$OUT/nospace.log" 2>&1 || status=$?
[ "$status" -ne 0 ] || fail "the job without room in /dev/shm exited 0"
grep -q "cannot reserve [0-9]* bytes of shared memory for 2 ranks in /dev/shm (33554432 B of one-shot slots: 2 x shm.small_kb per rank; .*lower shm.small_kb)" "$OUT/nospace.log" ||
	{ cat "$OUT/nospace.log" >&2; fail "no error naming shm.small_kb"; }
echo "ok: /dev/shm too small: the error names shm.small_kb"
