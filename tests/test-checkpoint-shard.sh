#!/bin/sh
# SPDX-License-Identifier: MIT
# Working weights of a strategy that shards parameters (ABI 1.6
# materialize; docs/abi.md, docs/checkpoints.md) with the fx-shard fixture
# (tests/fixtures/shard): each rank holds 1/W of every parameter and
# gathers a unit with host->allgather.  tests/progs/ckpt-shard.c saves
# weights moved away from a fresh model's by OFFSET * (1 + k % 7) and
# checks a load bit for bit on every rank:
#  - saved under fx-shard at 2 ranks, loaded under ddp at 2 and 1, and
#    under fx-shard at 3 (sizes not divisible by 3);
#  - saved under ddp at 2, loaded under fx-shard at 2 (WRITEBACK into the
#    shards, read back through the unit hooks);
#  - accel_save_model under fx-shard writes the full weights: the same
#    file, byte for byte, as ddp's after loading the same checkpoint;
#  - the core gathers one unit at a time on every rank (the fixture's
#    record: 3 GATHER, 3 RELEASE per walk, never two units at once; peak
#    ACCEL_MEM_PARAMS within the shards plus one gathered unit);
#  - a strategy with ACCEL_CAP_SHARD_PARAMS and no materialize slot is
#    refused naming it (fx-shard-nomat).
# Usage: test-checkpoint-shard.sh CKPT_SHARD FX_SHARD_DIR
set -eu

P=${1:?usage: test-checkpoint-shard.sh CKPT_SHARD FX_SHARD_DIR}
F=${2:?}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
: "${ACCEL_CLI:?not set (run through meson test)}"
export ACCEL_PLUGIN_PATH="$F:${ACCEL_PLUGIN_PATH:-}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-ckpt-shard-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
cd "$tmp"

# fail, and ranks N CMD...: CMD on N processes (1: directly)
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"

# equal N: every one of N ranks loaded all 3154 values (37 + 2112 + 1000 + 5)
equal() {
	r=0
	while [ "$r" -lt "$1" ]; do
		grep -q "rank $r: 3154 of 3154 values equal, 3154 moved" out ||
			{ cat out; fail "$2: rank $r"; }
		r=$((r + 1))
	done
}

echo "== saved under fx-shard at 2 ranks"
ranks 2 "$P" fx-shard save s2 s2.model 0.25 >out 2>&1 || { cat out; fail "save under fx-shard"; }
# the save walks the units twice (param/ tensors, accel_save_model), plus
# the reads of the program (through the hooks, not materialize)
for r in 0 1; do
	grep -q "rank $r: materialize: 6 gathers, 6 releases, 0 writebacks, at most 1 unit(s) at once; params peak ok" out ||
		{ cat out; fail "fx-shard save: rank $r's walk"; }
done
"$ACCEL_CLI" checkpoint show --verify s2 >show 2>&1 || { cat show; fail "s2 does not verify"; }

echo "== loaded under ddp at 2 and 1, under fx-shard at 3"
ranks 2 "$P" ddp load s2 d2.model 0.25 >out 2>&1 || { cat out; fail "s2 under ddp at 2"; }
equal 2 "s2 under ddp at 2"
cmp s2.model d2.model || fail "accel_save_model under fx-shard differs from ddp's"
ranks 1 "$P" ddp load s2 d1.model 0.25 >out 2>&1 || { cat out; fail "s2 under ddp at 1"; }
equal 1 "s2 under ddp at 1"
ranks 3 "$P" fx-shard load s2 f3.model 0.25 >out 2>&1 || { cat out; fail "s2 under fx-shard at 3"; }
equal 3 "s2 under fx-shard at 3"
grep -q "rank 2: materialize: 6 gathers, 6 releases, 3 writebacks, at most 1 unit(s) at once; params peak ok" out ||
	{ cat out; fail "fx-shard load at 3: rank 2's walk"; }
cmp s2.model f3.model || fail "accel_save_model under fx-shard at 3 differs"

echo "== saved under ddp at 2, loaded under fx-shard at 2"
ranks 2 "$P" ddp save d2s d2s.model 0.5 >out 2>&1 || { cat out; fail "save under ddp"; }
ranks 2 "$P" fx-shard load d2s x2.model 0.5 >out 2>&1 || { cat out; fail "d2s under fx-shard"; }
equal 2 "d2s under fx-shard at 2"
cmp d2s.model x2.model || fail "accel_save_model after the load differs from ddp's"

echo "== no materialize slot"
ranks 2 "$P" fx-shard-nomat refuse n2 n2.model 0 >out 2>&1 || { cat out; fail "fx-shard-nomat"; }
for what in "accel_save_state: strategy 'fx-shard-nomat' (" "accel_save_model: strategy 'fx-shard-nomat' (" "accel_load_state: strategy 'fx-shard-nomat' ("; do
	grep -qF "refused: $what" out || { cat out; fail "no refusal: $what"; }
done
grep -qF "shards parameters (ACCEL_CAP_SHARD_PARAMS) but has no materialize slot (ABI 1.6): its working weights cannot be saved" out ||
	{ cat out; fail "the refusal's text"; }
grep -qF "its working weights cannot be loaded" out || { cat out; fail "the load refusal's text"; }
[ ! -e n2 ] || fail "n2 was written"
echo "ok"
