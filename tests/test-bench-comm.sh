#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-bench-comm.sh: `accel bench comm` end to end on 2 ranks: every
# op and size reports a row whose results were checked, on user and on
# backend buffers, out of place and (all-reduce) in place, and bad usage
# exits 2 with a message.
set -eu
: "${ACCEL_CLI:?set by meson}"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/test-bench-comm.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }

for buffers in user backend; do
	"$ACCEL_CLI" launch -n 2 --set backend=shm -- "$ACCEL_CLI" bench comm --op all \
		--min-bytes 8 --max-bytes 64K --iters 3 --warmup 1 --json --dtype bf16 \
		--buffers "$buffers" >"$OUT/$buffers" 2>"$OUT/$buffers.err" ||
		{ cat "$OUT/$buffers.err" >&2; fail "bench comm --buffers $buffers exited $?"; }
	rows=$(grep -c '"bench":"comm"' "$OUT/$buffers" || true)
	[ "$rows" -eq 56 ] || fail "$buffers: $rows rows, expected 4 ops x 14 sizes = 56"
	ok=$(grep -c '"check":"ok"' "$OUT/$buffers" || true)
	[ "$ok" -eq 56 ] || fail "$buffers: only $ok of 56 rows checked ok"
	grep -q "\"buffers\":\"$buffers\"" "$OUT/$buffers" || fail "$buffers: rows do not say so"
	grep -q '"world":2' "$OUT/$buffers" || fail "$buffers: world is not 2"
	for op in allreduce reduce_scatter allgather broadcast; do
		grep -q "\"op\":\"$op\",\"dtype\":\"bf16\",\"bytes\":65536" "$OUT/$buffers" ||
			fail "$buffers: no 64 KiB $op row"
	done
	echo "bench comm, $buffers buffers: $rows rows, all checked"
done

# Sizes whose last round of shm's staged algorithms is partial (a round is
# world x chunk_kb = 128 KiB at 2 ranks; the powers of two above all fill
# whole rounds): 200 KiB (reduce-scatter + all-gather form: one full round
# and 72 KiB) and 400 KiB (above 2 rounds the two-rank all-reduce takes its
# pair form: three full rounds and 16 KiB), out of place and in place.  The
# check (cli/comm-bench.h, cb_check) computes every expected element from
# the inputs' formula, not from another collective.
for ip in "" --inplace; do
	"$ACCEL_CLI" launch -n 2 --set backend=shm -- "$ACCEL_CLI" bench comm --op all \
		--min-bytes 200K --max-bytes 400K --iters 2 --warmup 1 --json --dtype f32 $ip \
		>"$OUT/partial$ip" 2>"$OUT/partial$ip.err" ||
		{ cat "$OUT/partial$ip.err" >&2; fail "bench comm, partial rounds $ip exited $?"; }
	for b in 204800 409600; do
		for op in allreduce reduce_scatter allgather broadcast; do
			grep -q "\"op\":\"$op\",\"dtype\":\"f32\",\"bytes\":$b,.*\"check\":\"ok\"" \
				"$OUT/partial$ip" || { cat "$OUT/partial$ip" "$OUT/partial$ip.err" >&2;
				fail "partial rounds $ip: no checked $op row of $b bytes"; }
		done
	done
	echo "bench comm, partial last rounds ${ip:-out of place}: 8 rows, all checked"
done

# in place: every op is checked; the checked call starts again from the
# input (18 sizes for each of the four ops)
for buffers in user backend; do
	"$ACCEL_CLI" launch -n 2 --set backend=shm -- "$ACCEL_CLI" bench comm --op all \
		--min-bytes 8 --max-bytes 1M --iters 3 --warmup 1 --json --inplace \
		--buffers "$buffers" >"$OUT/ip-$buffers" 2>"$OUT/ip-$buffers.err" ||
		{ cat "$OUT/ip-$buffers.err" >&2; fail "bench comm --inplace --buffers $buffers exited $?"; }
	ok=$(grep -c '"check":"ok","inplace":true' "$OUT/ip-$buffers" || true)
	[ "$ok" -eq 72 ] || fail "in place, $buffers: $ok of 72 rows checked ok and in place"
	echo "bench comm --inplace, $buffers buffers: 72 rows, all checked"
done

# default output on one rank: the table, then the same rows as JSON lines
"$ACCEL_CLI" bench comm --max-bytes 1K --iters 2 >"$OUT/both" || fail "default run"
grep -q '^# comm benchmark: backend shm' "$OUT/both" || fail "no table header"
[ "$(grep -c '^  allreduce' "$OUT/both")" -eq 8 ] || fail "default: expected 8 table rows"
[ "$(grep -c '^{"bench":"comm","op":"allreduce"' "$OUT/both")" -eq 8 ] ||
	fail "default: expected 8 JSON lines after the table"
last_row=$(grep -n '^  allreduce' "$OUT/both" | tail -n 1 | cut -d: -f1)
first_json=$(grep -n '^{"bench"' "$OUT/both" | head -n 1 | cut -d: -f1)
[ "$first_json" -gt "$last_row" ] || fail "default: JSON lines are not after the table"
grep -q '"bytes":1024,.*"check":"ok"' "$OUT/both" || fail "default: no checked 1 KiB JSON row"
# --table: only the table; --json: only JSON lines
"$ACCEL_CLI" bench comm --max-bytes 1K --iters 2 --table >"$OUT/table" || fail "table run"
[ "$(grep -c '^  allreduce' "$OUT/table")" -eq 8 ] || fail "--table: expected 8 rows"
! grep -q '^{' "$OUT/table" || fail "--table printed JSON"
"$ACCEL_CLI" bench comm --max-bytes 1K --iters 2 --json >"$OUT/json" || fail "json run"
[ "$(grep -c '^{"bench":"comm"' "$OUT/json")" -eq "$(wc -l <"$OUT/json")" ] ||
	fail "--json printed more than JSON lines"

# bad usage: exit 2 and a message naming the option
set +e
"$ACCEL_CLI" bench comm --op scatter >/dev/null 2>"$OUT/usage"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad --op exited $rc, not 2"
grep -q "unknown --op 'scatter'" "$OUT/usage" || fail "bad --op message: $(cat "$OUT/usage")"
set +e
"$ACCEL_CLI" bench comm --max-bytes 12Q >/dev/null 2>"$OUT/usage"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- "--max-bytes '12Q'" "$OUT/usage" || fail "bad size: rc $rc"
for args in "stray:unexpected argument 'stray'" "--bogus:unknown option '--bogus'" \
            "--op:--op needs a value" "--device=gpu:--device 'gpu' is not cpu or cuda" \
            "--max-bytes=18446744073709551615:is above the largest size, 1024G" \
            "--min-bytes= 8:--min-bytes ' 8' is not a size"; do
	set +e
	"$ACCEL_CLI" bench comm "${args%%:*}" >/dev/null 2>"$OUT/usage"; rc=$?
	set -e
	[ "$rc" -eq 2 ] && grep -q -- "${args#*:}" "$OUT/usage" ||
		fail "'${args%%:*}': rc $rc, $(cat "$OUT/usage")"
done
set +e
"$ACCEL_CLI" bench comm --json --table >/dev/null 2>"$OUT/usage"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- "--json and --table exclude each other" "$OUT/usage" ||
	fail "--json --table: rc $rc, $(cat "$OUT/usage")"
# a range with no whole element per rank measures nothing: exit 2, saying so
set +e
"$ACCEL_CLI" bench comm --min-bytes 3 --max-bytes 3 >/dev/null 2>"$OUT/usage"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "no size from 3 to 3 bytes fits allreduce of f32 on 1 ranks" \
	"$OUT/usage" || fail "--min-bytes 3 --max-bytes 3: rc $rc, $(cat "$OUT/usage")"
set +e
"$ACCEL_CLI" bench comm --device cuda --buffers user >/dev/null 2>"$OUT/usage"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- "--buffers is for --device cpu" "$OUT/usage" ||
	fail "--device cuda --buffers user: rc $rc, $(cat "$OUT/usage")"
# --device cuda without a usable device backend: exit 1 naming the reason
# (skipped when this machine has a GPU: then nccl would really start)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	set +e
	"$ACCEL_CLI" bench comm --device cuda --set backend=nccl --max-bytes 64 \
		>/dev/null 2>"$OUT/usage"; rc=$?
	set -e
	# a build without the nccl module names that instead
	nonccl=-e"comm backend 'nccl' needs CUDA"
	"$ACCEL_CLI" plugins list 2>/dev/null | grep -q '^nccl ' ||
		nonccl=-e"no comm backend named 'nccl'"
	[ "$rc" -eq 1 ] && grep -q -e "cudaSetDevice(0) failed" -e "CUDA runtime library" \
		-e "nccl backend" -e "comm backend 'nccl' needs CUDA" "$nonccl" "$OUT/usage" ||
		fail "--device cuda without a GPU: rc $rc, $(cat "$OUT/usage")"
fi
echo "PASS"
