#!/bin/sh
# SPDX-License-Identifier: MIT
# accel launch --nnodes 2 --max-restarts (docs/launch.md, "Several nodes"):
# two launchers on this machine play two nodes of one rank each
# (--master-addr 127.0.0.1), running examples/train_mlp:
#  (a) rank 1 (node 1) kills itself at step 7 once: both launchers agree on
#      restart 1, resume from checkpoint_5, and the final weights are
#      bitwise equal to an uninterrupted 2-node run, on every rank;
#  (a2) rank 1 (node 1) shuts its sockets at step 7 and dies 1 s later:
#      rank 0 fails first (it lost its peer), yet the restart both nodes
#      agree on names rank 1's death, the cause (rank 0 marked its own
#      failure as a lost peer's in the launcher's state file);
#  (b) node 1's launcher is killed with -9 while its rank hangs after step
#      7, under --min-nodes 1: node 0 restarts alone at world size 1 and
#      finishes, bitwise equal to checkpoint_5 resumed by hand at world 1;
#  (c) the same without --min-nodes: node 0 exits non-zero, naming node 1
#      as lost and --min-nodes 2;
#  (d) node 0's launcher killed with -9 (while rank 0 hangs and rank 1
#      waits for it in a collective) under --min-nodes 1: node 1 does not
#      restart (node 0 runs the store; no election) and says why;
#  (e) three nodes whose ranks sleep outside any collective: node 2's
#      launcher killed with -9 ends the attempt on nodes 0 and 1 within
#      seconds (node 0 sees the connection close and tells node 1), naming
#      node 2, and under --min-nodes 2 they restart as 2 nodes;
#  (f) the same two-node job with node 0's launcher killed: node 1 ends
#      within seconds, naming node 0.
# Usage: test-launch-nodes.sh TRAIN_MLP
set -eu

T=${1:?usage: test-launch-nodes.sh TRAIN_MLP}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
: "${ACCEL_CLI:?not set (run through meson test)}"
command -v python3 > /dev/null 2>&1 || { echo "skipped: no python3 to pick free ports"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-nodes-XXXXXX")
pids=''
cleanup() {
	for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
unset ACCEL_CONFIG ACCEL_RESUME ACCEL_RESUME_ROOT ACCEL_RESTART_COUNT ACCEL_LAUNCH_STATE
cd "$tmp"
. "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"
F="$MLP_FLAGS --steps 12 --set scheduler.type=linear --set scheduler.total_steps=12
   --set scheduler.warmup_steps=3 --set max_grad_norm=0.05"

# what fail (lib-ranks.sh) prints after its line: the nodes' logs
fail_details() {
	for f in n0 n1 n2; do [ -e "$f" ] && { echo "--- $f"; cat "$f"; }; done
}

# two free ports in a row: the store's P and the launchers' P + 1
ports() {
	python3 -c '
import socket
for _ in range(200):
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass
'
}

# node R of $NN (default 2): start its launcher in the background; $pidR is its pid
node() {
	r=$1
	shift
	timeout 180 "$ACCEL_CLI" launch --grace-s 2 -n 1 --nnodes "${NN:-2}" --node-rank "$r" \
		--master-addr 127.0.0.1 --master-port "$port" "$@" > "n$r" 2>&1 &
	eval "pid$r=\$!"
	pids="$pids $!"
}

echo "== uninterrupted reference: 2 nodes x 1 rank"
port=$(ports)
node 1 -- "$T" $F --save-final straight.st --save-final-ranks straight
node 0 -- "$T" $F --save-final straight.st --save-final-ranks straight
st0=0 st1=0
wait "$pid0" || st0=$?
wait "$pid1" || st1=$?
[ "$st0$st1" = 00 ] || fail "reference run: exit $st0, $st1"

echo "== (a) rank 1 on node 1 dies at step 7 once: both nodes restart"
port=$(ports)
A="--max-restarts 2 -- $T $F --checkpoint-every 5 --project-dir pa --die-at 1:7:markera --save-final a.st
   --save-final-ranks a"
node 1 $A
node 0 $A
st0=0 st1=0
wait "$pid0" || st0=$?
wait "$pid1" || st1=$?
[ "$st0$st1" = 00 ] || fail "(a): exit $st0, $st1, expected 0 0"
[ -e markera ] || fail "(a): rank 1 never died"
for f in n0 n1; do
	grep -Eq "accel launch: restart 1 of 2 after rank 1 failed: killed by signal SIGKILL \(9\): resuming from $tmp/pa/checkpoint_5 \(step 5\) at world size 2;" $f ||
		fail "(a): restart line in $f"
	[ "$(grep -c 'accel launch: restart' $f)" = 1 ] || fail "(a): not one restart in $f"
done
grep -q "this launcher is node 1 of 2 in restart 1" n1 || fail "(a): node 1's new place"
grep -q "resumed from $tmp/pa/checkpoint_5 at step 5" n0 || fail "(a): rank 0 did not resume"
cmp straight.st a.st || fail "(a): restarted weights differ from the uninterrupted run"
# every rank's weights, each written on its own node
for r in 0 1; do
	cmp straight.rank$r.safetensors a.rank$r.safetensors ||
		fail "(a): rank $r's restarted weights differ from the uninterrupted run"
done

echo "== (a2) rank 1 cuts its connections, dies 1 s later: its death is named, not rank 0's"
port=$(ports)
A="--max-restarts 1 -- $T $F --checkpoint-every 5 --project-dir pa2 --crash-at 1:7:markera2
   --save-final a2.st"
node 1 $A
node 0 $A
st0=0 st1=0
wait "$pid0" || st0=$?
wait "$pid1" || st1=$?
[ "$st0$st1" = 00 ] || fail "(a2): exit $st0, $st1, expected 0 0"
grep -q "cuts its connections" n1 || fail "(a2): rank 1 never crashed"
grep -q "accel launch: rank 0 failed: exit code 1" n0 || fail "(a2): rank 0 did not fail first"
for f in n0 n1; do
	grep -Eq "accel launch: restart 1 of 1 after rank 1 failed: killed by signal SIGKILL \(9\): resuming from $tmp/pa2/checkpoint_5 \(step 5\)" $f ||
		fail "(a2): the restart line in $f does not name rank 1's death"
done
cmp straight.st a2.st || fail "(a2): restarted weights differ from the uninterrupted run"

# (b), (c), (d): rank K hangs after step 7 (checkpoint_5 saved); once it
# says so, node K's launcher is killed with -9 (its rank goes with it, and
# the other rank's collective fails)
lose_node() {
	tag=$1
	k=$2
	shift 2
	port=$(ports)
	B="--max-restarts 2 $* -- $T $F --checkpoint-every 5 --project-dir p$tag --hang-at $k:7:marker$tag
	   --save-final $tag.st --set comm.timeout_s=60"
	node 1 $B
	node 0 $B
	i=0
	until grep -q "rank $k stops responding" n$k; do
		i=$((i + 1))
		[ $i -lt 600 ] || fail "($tag): rank 1 never hung"
		eval "kill -0 \$pid$k" 2>/dev/null || fail "($tag): node $k ended before its rank hung"
		sleep 0.1
	done
	# the launcher itself, not the timeout(1) that runs it
	eval "pk=\$pid$k"
	lk=$(pgrep -P "$pk") || fail "($tag): no launcher under pid $pk"
	kill -9 $lk
	st0=0 st1=0
	wait "$pid0" || st0=$?
	wait "$pid1" || st1=$?
}

echo "== (b) node 1's launcher killed with -9 under --min-nodes 1: node 0 goes on alone"
lose_node b 1 --min-nodes 1
[ "$st0" = 0 ] || fail "(b): node 0 exit $st0, expected 0"
grep -q "accel launch: node 1's launcher (node 1 at start) is gone: its connection closed" n0 ||
	fail "(b): the lost node is not named"
grep -Eq "accel launch: restart 1 of 2 after .*: resuming from $tmp/pb/checkpoint_5 \(step 5\) at world size 1;" n0 ||
	fail "(b): restart line (world size 1)"
grep -q "this launcher is node 0 of 1 in restart 1" n0 || fail "(b): node 0's new place"
"$T" $F --resume pb/checkpoint_5 --save-final byhand.st > out1 2>&1 || { cat out1; fail "(b): resume by hand"; }
cmp byhand.st b.st || fail "(b): world-1 restart differs from checkpoint_5 resumed at world 1"

echo "== (c) the same without --min-nodes: node 0 exits naming node 1"
lose_node c 1
[ "$st0" != 0 ] || fail "(c): node 0 exited 0"
grep -q "accel launch: node 1's launcher (node 1 at start) is gone: its connection closed" n0 ||
	fail "(c): the lost node is not named"
grep -q "1 of the 2 nodes left (lost: node 1), fewer than --min-nodes 2: not restarting: exiting with status $st0" n0 ||
	fail "(c): no refusal line"
grep -q "accel launch: restart" n0 && fail "(c): restarted"
[ ! -e c.st ] || fail "(c): the job finished"

echo "== (d) node 0's launcher killed with -9 under --min-nodes 1: node 1 stops"
lose_node d 0 --min-nodes 1
[ "$st1" != 0 ] || fail "(d): node 1 exited 0"
grep -q "accel launch: node 1: .*node 0's launcher is gone (its connection closed): it runs the store the ranks meet at, so the other nodes cannot restart without it: exiting with status $st1" n1 ||
	fail "(d): no line naming node 0"
grep -q "accel launch: restart" n1 && fail "(d): node 1 restarted"

# (e), (f): ranks that sleep (no collective, no store) in the first
# attempt, say "up", and succeed at once in a restart; node K's launcher is
# killed with -9 once every rank is up, and the others must end their
# attempt within seconds rather than when their ranks end (60 s)
S='if [ "$ACCEL_RESTART_COUNT" = 0 ]; then touch up.$ACCEL_RANK; exec sleep 60; fi; echo "rank $ACCEL_RANK of $ACCEL_WORLD_SIZE in restart $ACCEL_RESTART_COUNT"'
sleepers() {
	k=$1
	NN=$2
	shift 2
	port=$(ports)
	rm -f up.*
	r=$((NN - 1))
	while [ $r -ge 0 ]; do
		node $r --max-restarts 1 "$@" -- sh -c "$S"
		r=$((r - 1))
	done
	i=0
	while [ "$(ls up.* 2>/dev/null | wc -l)" -lt "$NN" ]; do
		i=$((i + 1))
		[ $i -lt 300 ] || fail "($tag): the ranks did not all start"
		sleep 0.1
	done
	eval "pk=\$pid$k"
	lk=$(pgrep -P "$pk") || fail "($tag): no launcher under pid $pk"
	t0=$(date +%s%N)
	kill -9 $lk
	st0=0 st1=0
	[ "$k" = 0 ] || { wait "$pid0" || st0=$?; }
	[ "$k" = 1 ] || { wait "$pid1" || st1=$?; }
	t1=$(date +%s%N)
	ms=$(( (t1 - t0) / 1000000 ))
	[ "$k" = 2 ] && { wait "$pid2" || true; }
	NN=2
}

echo "== (e) 3 nodes, node 2's launcher killed with -9 while the ranks sleep: the others end at once"
tag=e
sleepers 2 3 --min-nodes 2
# 0.1 s observed (the restart's ranks succeed at once); 60 s before
[ "$ms" -lt 5000 ] || fail "(e): nodes 0 and 1 took $ms ms to end"
[ "$st0$st1" = 00 ] || fail "(e): exit $st0, $st1, expected 0 0 (restarted as 2 nodes)"
grep -q "^accel launch: node 2's launcher (node 2 at start) is gone: its connection closed; ending this node's attempt: stopping 1 rank (SIGTERM, then SIGKILL after 2 s)$" n0 ||
	fail "(e): node 0 does not name node 2"
grep -q "^accel launch: node 0's launcher ends the attempt on every node: node 2's launcher (node 2 at start) is gone: its connection closed; ending this node's attempt: stopping 1 rank" n1 ||
	fail "(e): node 1 does not say why its attempt ended"
for f in n0 n1; do
	grep -q "^accel launch: restart 1 of 1 after the loss of node 2: the job saved no checkpoint, so it starts from the beginning at world size 2;" $f ||
		fail "(e): restart line in $f"
done
grep -q "this launcher is node 1 of 2 in restart 1" n1 || fail "(e): node 1's new place"
grep -q "rank 1 of 2 in restart 1" n1 || fail "(e): node 1's rank in the restart"

echo "== (f) node 0's launcher killed with -9 while the ranks sleep: node 1 ends at once"
tag=f
sleepers 0 2 --min-nodes 1
[ "$ms" -lt 5000 ] || fail "(f): node 1 took $ms ms to end"
[ "$st1" = 1 ] || fail "(f): node 1 exit $st1, expected 1"
grep -q "^accel launch: node 0's launcher is gone (its connection closed); ending this node's attempt: stopping 1 rank" n1 ||
	fail "(f): node 1 does not name node 0 at once"
grep -q "^accel launch: node 1: node 0's launcher is gone (its connection closed): it runs the store the ranks meet at, so the other nodes cannot restart without it: exiting with status 1$" n1 ||
	fail "(f): node 1's final line"
grep -q "accel launch: restart" n1 && fail "(f): node 1 restarted"
echo "ok"
