#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-bucket-entries.sh PROG HOOK_DIR: the bucket descriptions
# (accel_bucket_v1's entries) that ddp, zero stages 2 and 3 and fsdp
# FULL_SHARD / SHARD_GRAD_OP hand a reduce hook, end to end.
#
# PROG is tests/progs/entry-train (every gradient value names its parameter
# and element: tests/fixtures/hook/entry-code.h); HOOK_DIR holds the
# entry-hook fixture, which checks in every bucket that the entries tile it
# (no gap, no overlap, the rest the zero padding to a multiple of the group
# size), that each entry's elements hold that parameter's gradient, and
# after the reduction the ranks' mean there; and at each step that the
# step's buckets named every element of every parameter of host->model()
# exactly once.  entry-train then checks every weight after SGD steps.
#
#   - each variant of ENTRY_VARIANTS at each world of ENTRY_WORLDS (default
#     2 and 3): the run passes, the hook logged a passed step for every
#     rank and step (all 96 elements), every rank's weights are right;
#   - the hook looks: with two gradient elements swapped in the last step
#     (entry-train --misplace) a run fails with the hook's message.
# Exits 77 (skipped) only when `accel launch` cannot start two processes.
set -u

prog=${1:?usage: test-bucket-entries.sh PROG HOOK_DIR}
hook_dir=${2:?usage: test-bucket-entries.sh PROG HOOK_DIR}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-entries.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG ACCEL_SET
fails=0
STEPS=3
VARIANTS=${ENTRY_VARIANTS:-ddp zero2 zero3 fsdp_full fsdp_grad_op}
WORLDS=${ENTRY_WORLDS:-2 3}

[ -n "${ACCEL_CLI:-}" ] || { echo "FAIL: ACCEL_CLI is not set (run through meson test)"; exit 1; }
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
. "$ACCEL_TEST_SRCDIR/tests/lib-compare.sh"
[ -f "$hook_dir/entry-hook.so" ] || { echo "FAIL: no entry-hook.so in $hook_dir"; exit 1; }
need_launch2

# section VARIANT: the strategy's name and config members.  Buckets small
# enough that each holds a few parameters: ddp's of about 31 elements
# (125 bytes), zero 2's groups a | b c | d (reduce_bucket_size 40), one per
# unit under zero 3 and fsdp.
section() {
	case $1 in
	ddp) echo '"strategy": "ddp", "ddp": {"bucket_cap_mb": 0.00012, "first_bucket_mb": 0.00012}' ;;
	zero2) echo '"strategy": "zero", "zero_optimization": {"stage": 2, "reduce_bucket_size": 40}' ;;
	zero3) echo '"strategy": "zero", "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}' ;;
	fsdp_full) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}' ;;
	fsdp_grad_op) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "SHARD_GRAD_OP"}' ;;
	*) echo "bad variant $1" >&2; return 1 ;;
	esac
}
plugin_of() {
	case $1 in zero*) echo zero ;; fsdp*) echo fsdp ;; *) echo ddp ;; esac
}
cfg() {   # FILE VARIANT
	echo "{\"plugins\": [\"entry-hook\"], \"plugin_dirs\": [\"$hook_dir\"], \"optimizer\": {\"type\": \"sgd\", \"params\": {\"lr\": 0.125, \"momentum\": 0, \"weight_decay\": 0}}, \"gradient_accumulation_steps\": 1, $(section "$2")}" > "$1"
}

for v in $VARIANTS; do
	if ! "$ACCEL_CLI" plugins info "$(plugin_of "$v")" > /dev/null 2>&1; then
		echo "skipped: $v: plugin $(plugin_of "$v") not built"
		continue
	fi
	cfg "$tmp/c.json" "$v"
	for n in $WORLDS; do
		log=$tmp/$v.$n.log
		if ! ACCEL_LOG_LEVEL=info ACCEL_LOG_ALL_RANKS=1 "$ACCEL_CLI" launch -n "$n" \
			--config "$tmp/c.json" -- "$prog" --steps $STEPS > "$log" 2>&1; then
			fail "$v world $n: the run failed"
			grep -m3 "entry-hook\|entry-train" "$log" || tail -10 "$log"
			continue
		fi
		r=0
		while [ "$r" -lt "$n" ]; do
			s=0
			while [ "$s" -lt $STEPS ]; do
				grep -q "entry-hook: rank $r step $s: .* 96 of 96 gradient elements where the entries say, each once" "$log" ||
					fail "$v world $n: no passed step $s of rank $r in the hook's log"
				s=$((s + 1))
			done
			grep -q "entry-train: rank $r: 8 parameters as the reduced gradients give" "$log" ||
				fail "$v world $n: rank $r did not check its weights"
			r=$((r + 1))
		done
		line=$(grep -m1 "entry-hook: rank 0 step $((STEPS - 1)):" "$log" || :)
		echo "ok: $v world $n: ${line#*entry-hook: }"
	done
done

# the hook looks at the values: two elements swapped are found
cfg "$tmp/m.json" zero2
if ! "$ACCEL_CLI" plugins info zero > /dev/null 2>&1; then
	cfg "$tmp/m.json" ddp
fi
if "$ACCEL_CLI" launch -n 2 --config "$tmp/m.json" -- "$prog" --steps $STEPS --misplace \
	> "$tmp/m.log" 2>&1; then
	fail "--misplace: the run passed; the hook did not see c.b's swapped elements"
elif grep -q "entry-hook: rank [01] step 2 .* bucket [0-9]*: element [0-9]* holds .* but entry [0-9]* says it is element 0 of 'c.b'.*the entry does not say where the gradient lies" "$tmp/m.log"; then
	echo "ok: --misplace: $(grep -m1 -o "entry-hook: rank [01] step 2 .*element 0 of 'c.b'[^:]*" "$tmp/m.log")"
else
	fail "--misplace: not the hook's message"
	tail -10 "$tmp/m.log"
fi
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
