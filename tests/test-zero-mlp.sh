#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-zero-mlp.sh TRAIN_MLP: the zero strategy with the shipped
# example program, unchanged: examples/train_mlp trained for 20 steps with
# max_grad_norm set under ddp at 1 process (the reference) and under zero
# stages 1, 2 and 3 at 2 processes, stage 3 at 3 and 4, stage 2 with the
# optimizer offloaded to host memory and stage 3 with optimizer and
# parameters in NVMe swap files at 2.  Every rank writes its final weights
# (--save-final-ranks) and each must equal the reference within RTOL; the
# reference must have trained (moved from --save-init), and the held-out
# accuracy the program prints must be the reference's.  The full matrix of
# stages x offload x accumulation x world runs on tests/progs/zero-train
# (tests/test-zero-parity.sh); this is the same claim on train_mlp.
# Exits 77 only when `accel launch` cannot start two processes.
set -u

T=${1:?usage: test-zero-mlp.sh TRAIN_MLP}
: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
A=$ACCEL_CLI
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-zero-mlp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0
# zero at 2/3/4 processes vs ddp at 1: observed 1.77e-7 (stages 1-3 at 2); the
# issue's bound is 1e-6
RTOL=5e-7
MOVED=1e-2

. "$ACCEL_TEST_SRCDIR/tests/lib-compare.sh"
need_launch2

ARGS="--hidden 40 --layers 2 --inputs 24 --classes 6 --samples 1152 --test-samples 240 \
--batch-size 48 --steps 20 --log-every 1000"
mkdir -p "$tmp/nvme"
# cfg FILE STRATEGY STAGE [OFFLOAD_JSON]
cfg() {
	cat > "$1" <<EOF
{"strategy": "$2", "max_grad_norm": 0.5,
 "optimizer": {"type": "adamw", "params": {"lr": 0.003, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $3, "reduce_bucket_size": 1500,
                       "stage3_param_persistence_threshold": 0 ${4:-}}}
EOF
	[ "$2" = zero ] || sed -i 's/^ "zero_optimization".*$/ "ddp": {}}/; /^  *"stage3_param/d' "$1"
}

accuracy() {   # LOG: the "final accuracy" figure the program printed
	sed -n 's/.*final accuracy \([0-9.]*\).*/\1/p' "$1" | tail -1
}

cfg "$tmp/ddp.json" ddp 0
if ! ACCEL_CONFIG=$tmp/ddp.json "$T" $ARGS --save-init "$tmp/init" --save-final "$tmp/ref.st" \
	> "$tmp/ref.log" 2>&1; then
	fail "reference run (ddp, 1 process)"
	tail -20 "$tmp/ref.log"
	exit 1
fi
ref_acc=$(accuracy "$tmp/ref.log")
[ -n "$ref_acc" ] || fail "the reference run printed no final accuracy"
if python3 "$ACCEL_TEST_SRCDIR/tests/st_compare.py" "$tmp/init/init.safetensors" "$tmp/ref.st" \
	"$MOVED" > "$tmp/moved.log" 2>&1; then
	fail "the reference did not train (every tensor within $MOVED of its initial value)"
fi

nvme=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"},
  \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}"
cpu=', "offload_optimizer": {"device": "cpu"}'
# name STAGE WORLD OFFLOAD
for row in "s1 1 2 -" "s2 2 2 -" "s3 3 2 -" "s3w3 3 3 -" "s3w4 3 4 -" "s2cpu 2 2 cpu" \
	"s3nvme 3 2 nvme"; do
	set -- $row
	off=
	[ "$4" = cpu ] && off=$cpu
	[ "$4" = nvme ] && off=$nvme
	cfg "$tmp/$1.json" zero "$2" "$off"
	if ! "$A" launch -n "$3" --config "$tmp/$1.json" -- "$T" $ARGS \
		--save-final-ranks "$tmp/$1" > "$tmp/$1.log" 2>&1; then
		fail "$1: zero stage $2 at $3 processes (offload $4)"
		tail -20 "$tmp/$1.log"
		continue
	fi
	r=0
	while [ "$r" -lt "$3" ]; do
		st_cmp "$tmp/ref.st" "$tmp/$1.rank$r.safetensors" "$RTOL" \
			"$1: stage $2, offload $4, rank $r of $3 vs ddp at 1" || break
		r=$((r + 1))
	done
	acc=$(accuracy "$tmp/$1.log")
	[ "$acc" = "$ref_acc" ] || fail "$1: final accuracy ${acc:-none} vs the reference's $ref_acc"
	left=$(ls -A "$tmp/nvme" | head -3)
	[ -z "$left" ] || fail "$1: files left in nvme_path: $left"
done

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all rows within $RTOL of ddp at 1 process, final accuracy $ref_acc everywhere"
exit 0
