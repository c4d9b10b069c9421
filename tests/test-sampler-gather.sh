#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-sampler-gather.sh PROG: the sampler and accel_gather_for_metrics
# across processes (tests/progs/sampler-gather.c): one process without a
# launcher, then `accel launch -n 2` and `-n 3` (odd world sizes pad
# differently).  Exits 77 (skipped) when `accel launch` cannot start ranks.
set -u

prog=${1:?usage: test-sampler-gather.sh PROG}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-sampler-gather.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
# A failing rank must not leave the others waiting for minutes.
echo '{"comm": {"timeout_s": 30}}' > "$tmp/cfg.json"

if ! ACCEL_CONFIG="$tmp/cfg.json" "$prog" > "$tmp/one.log" 2>&1; then
	echo "FAIL: one process"
	cat "$tmp/one.log"
	exit 1
fi
cat "$tmp/one.log"

[ -n "${ACCEL_CLI:-}" ] || { echo "skipped: ACCEL_CLI is not set"; exit 77; }
if ! "$ACCEL_CLI" launch -n 2 --config "$tmp/cfg.json" -- /bin/true > "$tmp/probe.log" 2>&1; then
	echo "skipped: accel launch -n 2 cannot start ranks here:"
	cat "$tmp/probe.log"
	exit 77
fi
for n in 2 3; do
	if ! "$ACCEL_CLI" launch -n "$n" --config "$tmp/cfg.json" -- "$prog" > "$tmp/n$n.log" 2>&1; then
		echo "FAIL: accel launch -n $n"
		cat "$tmp/n$n.log"
		exit 1
	fi
	cat "$tmp/n$n.log"
	ok=$(grep -c "cases ok" "$tmp/n$n.log")
	[ "$ok" -eq "$n" ] || { echo "FAIL: $ok of $n ranks reported success"; exit 1; }
done
exit 0
