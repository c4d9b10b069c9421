#!/bin/sh
# SPDX-License-Identifier: MIT
# `accel test` and `accel doctor` (docs/cli.md):
#  - accel test passes on 2 (shm) and 3 (tcp) processes with every check
#    line, fails with the reason on a configuration that cannot start, and
#    refuses bad usage;
#  - accel doctor prints one OK/WARN/FAIL line per check and exits 0 on this
#    machine (no GPU is not a failure), and 1 with the reasons when the port
#    is taken, the offload path is not a directory, or the config is bad.
set -eu
: "${ACCEL_CLI:?not set (run through meson test)}"
A=$ACCEL_CLI
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-doctor-XXXXXX")
trap 'kill $holder 2>/dev/null || true; rm -rf "$tmp"' EXIT INT TERM
holder=
unset ACCEL_CONFIG ACCEL_MASTER_PORT
cd "$tmp"   # no ./accel.json here

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# run STATUS CMD...: CMD exits STATUS; stdout+stderr in $tmp/out
run() {
	want=$1
	shift
	set +e
	timeout 150 "$@" >"$tmp/out" 2>&1
	got=$?
	set -e
	[ "$got" -eq "$want" ] || { cat "$tmp/out" >&2; fail "$* exited $got, expected $want"; }
}
has() {
	grep -q -- "$1" "$tmp/out" || { cat "$tmp/out" >&2; fail "output lacks: $1"; }
}

echo "== accel test"
run 0 "$A" test --help
has "Usage: accel test"
has "num-processes N"
run 0 "$A" test
for c in ranks allreduce allreduce-max allreduce-i64 allreduce-avg broadcast allgather \
	reduce-scatter train train-agree; do
	grep -q "^PASS  $c " "$tmp/out" || { cat "$tmp/out" >&2; fail "no PASS line for $c"; }
done
has "^PASS  ranks          2 processes, ranks 0..1 (strategy ddp"
has "match full-batch gradient descent"
has "^accel test: PASS$"
! grep -q FAIL "$tmp/out" || fail "a FAIL line in a passing run"
run 0 "$A" test --num-processes 3 --set backend=tcp --set max_grad_norm=0.05
has "^PASS  ranks          3 processes, ranks 0..2 (strategy ddp, backend tcp"
has "^PASS  train-agree    parameters identical on all 3 ranks"
echo '{"strategy": "nosuch"}' >"$tmp/bad.json"
run 1 "$A" test --config "$tmp/bad.json"
has "^FAIL  start          no plugin named 'nosuch'"
has "^accel test: FAIL (accel launch exited 1)"
run 2 "$A" test -n 0
has "num-processes '0': expected 1..256"
run 2 "$A" test extra
has "unexpected argument 'extra'"

echo "== accel doctor"
run 0 "$A" doctor --help
has "Usage: accel doctor"
run 0 "$A" doctor --offload-mib 8
for c in config port shm offload gpu nccl allreduce; do
	grep -Eq "^(OK  |WARN)  $c " "$tmp/out" || { cat "$tmp/out" >&2; fail "no OK/WARN line for $c"; }
done
has "^OK    allreduce  2 processes, backend "
has "summed right"
has "writable, [0-9]* MiB/s (8 MiB written and fsync'ed"
has "^0 checks failed"
[ "$(grep -c . "$tmp/out")" -eq 8 ] || { cat "$tmp/out" >&2; fail "expected 7 check lines and a summary"; }
# the nccl backend module installed (on the search path) but without a GPU
# is named with why it cannot be used, not "not installed"
nccl_so=$(printf '%s\n' "${ACCEL_PLUGIN_PATH:-}" | tr ':' '\n' | while read -r d; do
	if [ -f "$d/comm-nccl.so" ]; then echo "$d/comm-nccl.so"; break; fi; done)
if [ -n "$nccl_so" ] && grep -q '^OK    nccl       NCCL' "$tmp/out" && grep -q '^OK    gpu        no GPU' "$tmp/out"; then
	has "nccl backend module: $nccl_so (unavailable here: comm backend 'nccl' needs CUDA"
fi

# a port held by another process, an offload path that is a file
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(120)' >"$tmp/port" &
holder=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$tmp/port" ] && break; sleep 0.5; done
port=$(cat "$tmp/port")
[ -n "$port" ] || fail "could not hold a port"
touch "$tmp/file"
run 1 "$A" doctor --port "$port" --offload-dir "$tmp/file" --no-allreduce
has "^FAIL  port       port $port (--port) is in use by another process"
has "^FAIL  offload    $tmp/file (--offload-dir) is not a directory"
has "^OK    shm "
has "^2 checks failed"
kill $holder
holder=
ACCEL_MASTER_PORT=70000 run 1 "$A" doctor --no-allreduce
has "^FAIL  port       ACCEL_MASTER_PORT='70000' is not a port number"
run 1 "$A" doctor --config "$tmp/bad.json"
has "^FAIL  config     "
has "nosuch"
has "^FAIL  allreduce  not tried: the configuration does not resolve"
# the offload check reads ZeRO's nvme_path keys (DeepSpeed's names), each
# path once: from the resolved config with the zero plugin installed, from
# the file when the config does not resolve (without it)
mkdir "$tmp/nvme"
cat >"$tmp/zero-nvme.json" <<EOF
{"strategy": "zero", "zero_optimization": {"stage": 3,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/file"},
  "offload_param": {"device": "nvme", "nvme_path": "$tmp/nvme"}}}
EOF
run 1 "$A" doctor --config "$tmp/zero-nvme.json" --offload-mib 1 --no-allreduce
has "^FAIL  offload    $tmp/file (zero_optimization.offload_optimizer.nvme_path) is not a directory"
has "^OK    offload    $tmp/nvme (zero_optimization.offload_param.nvme_path): writable, [0-9]* MiB/s (1 MiB written"
[ "$(grep -c "offload " "$tmp/out")" -eq 2 ] || { cat "$tmp/out" >&2; fail "not two offload lines"; }
cat >"$tmp/zero-one.json" <<EOF
{"strategy": "zero", "zero_optimization": {"stage": 3,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/nvme"},
  "offload_param": {"device": "nvme", "nvme_path": "$tmp/nvme"}}}
EOF
# (seed -1 fails the config check whether or not the zero plugin is
# installed: the status is 1 either way, and the paths come from the file)
run 1 "$A" doctor --config "$tmp/zero-one.json" --set seed=-1 --offload-mib 1 --no-allreduce
has "^FAIL  config     .*seed"
has "^OK    offload    $tmp/nvme (zero_optimization.offload_optimizer.nvme_path): writable"
[ "$(grep -c "offload " "$tmp/out")" -eq 1 ] || { cat "$tmp/out" >&2; fail "one path, not one offload line"; }
# --offload-dir wins over the config
run 1 "$A" doctor --config "$tmp/zero-nvme.json" --set seed=-1 --offload-dir "$tmp/nvme" \
	--offload-mib 1 --no-allreduce
has "^OK    offload    $tmp/nvme (--offload-dir): writable"
[ "$(grep -c "offload " "$tmp/out")" -eq 1 ] || { cat "$tmp/out" >&2; fail "--offload-dir: not one offload line"; }
run 2 "$A" doctor --port 0
has "expected a port number, 1..65535"
echo "accel test and accel doctor: all checks passed"
