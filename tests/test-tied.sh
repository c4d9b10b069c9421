#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-tied.sh PROG LSGD_DIR ABI12_DIR: a parameter used by two units
# (tests/progs/tied-train: a tied embedding and output head declared with
# accel_unit_use_param) under every strategy that handles shared
# parameters (ACCEL_CAP_SHARED_PARAMS).
#
#   - parity: every variant in TIED_VARIANTS (ddp; zero stages 1-3, with
#     and without cpu offload, stage 3 with NVMe offload of optimizer and
#     parameters; fsdp FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, size-based wrap,
#     NO_WRAP, cpu_offload with and without prefetch; plugins not built are
#     skipped by name) at 1, 2 and 3
#     ranks, accumulation 1 and 2 (TIED_WORLDS, TIED_GAS): every rank's
#     final weights equal ddp at one process within RTOL;
#   - the sum of both uses: with SGD (no momentum, no clipping) the first
#     update of the tied weight equals -lr * (g_emb + g_head) computed by
#     the program from an untied reference, and differs from one use alone
#     and from twice the sum (tied-train --check-sgd);
#   - one master, one optimizer state: a checkpoint's manifest lists
#     exactly one master/emb.weight and one optim/exp_avg/emb.weight, each
#     covering the V x D elements exactly once, and no other tensor;
#     checkpoints saved under one strategy load under another at another
#     world size and give the same weights as an uninterrupted run;
#   - HYBRID_SHARD as two launchers of two ranks each (TIED_HYBRID= empty
#     skips it), every rank against ddp at one process;
#   - the memory estimate equals accel_memory_stats at the end of a run,
#     per category, every rank of world 3, to the byte (TIED_MEMORY: the
#     zero 3 and fsdp variants; empty skips it);
#   - accel_unit_use_param's refusals (tied-train --api-errors);
#   - refusal: a strategy without ACCEL_CAP_SHARED_PARAMS (the localsgd
#     example) and one built before ABI 1.7 are refused at accel_prepare
#     with a message naming the unit, the parameter and the strategy.
# Exits 77 (skipped) only when `accel launch` cannot start two processes.
set -u

prog=${1:?usage: test-tied.sh PROG LSGD_DIR ABI12_DIR}
lsgd_dir=${2:?usage}
abi12_dir=${3:?usage}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-tied.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

# Tolerance: about 2.5 times the largest deviation observed (x86-64, shm):
RTOL=3.5e-7      # observed 1.24e-7 (every strategy at worlds 2 and 3, V 13 x D 7)
STEPS=8
BATCH=24         # divisible by 1, 2, 3 ranks x 1, 2 micro-steps
VARIANTS=${TIED_VARIANTS:-ddp zero1 zero2 zero3 zero1cpu zero2cpu zero3cpu zero3nvme fsdp_full fsdp_grad_op fsdp_no_shard fsdp_wrap fsdp_nowrap fsdp_full_offload fsdp_grad_op_offload}
WORLDS=${TIED_WORLDS:-1 2 3}
GAS=${TIED_GAS:-1 2}

mkdir -p "$tmp/nvme"
[ -n "${ACCEL_CLI:-}" ] || { echo "FAIL: ACCEL_CLI is not set (run through meson test)"; exit 1; }
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
. "$ACCEL_TEST_SRCDIR/tests/lib-compare.sh"
need_launch2
have_plugin() {
	"$ACCEL_CLI" plugins info "$1" > /dev/null 2>&1
}

# section VARIANT: the strategy's name and config members.
section() {
	case $1 in
	ddp) echo '"strategy": "ddp", "ddp": {}' ;;
	zero[123]) echo "\"strategy\": \"zero\", \"zero_optimization\": {\"stage\": ${1#zero}, \"reduce_bucket_size\": 40, \"stage3_param_persistence_threshold\": 0}" ;;
	zero[123]cpu) s=${1#zero}; s=${s%cpu}
		echo "\"strategy\": \"zero\", \"zero_optimization\": {\"stage\": $s, \"reduce_bucket_size\": 40, \"stage3_param_persistence_threshold\": 0, \"offload_optimizer\": {\"device\": \"cpu\"}}" ;;
	# stage 3 with optimizer and parameter shards in NVMe swap files
	zero3nvme) echo "\"strategy\": \"zero\", \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": 40, \"stage3_param_persistence_threshold\": 0, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}}" ;;
	fsdp_full) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}' ;;
	fsdp_grad_op) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "SHARD_GRAD_OP"}' ;;
	fsdp_no_shard) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "NO_SHARD"}' ;;
	# size-based wrap: emb (91 elements) wrapped alone, mid and head (56 + 13) with the root
	fsdp_wrap) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 90}' ;;
	fsdp_nowrap) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "NO_WRAP"}' ;;
	fsdp_full_offload) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD", "cpu_offload": true}' ;;
	fsdp_grad_op_offload) echo '"strategy": "fsdp", "fsdp": {"sharding_strategy": "SHARD_GRAD_OP", "cpu_offload": true, "backward_prefetch": "BACKWARD_POST", "forward_prefetch": true}' ;;
	*) echo "bad variant $1" >&2; return 1 ;;
	esac
}
plugin_of() {
	case $1 in zero*) echo zero ;; fsdp*) echo fsdp ;; *) echo ddp ;; esac
}

# cfg FILE VARIANT OPTIM GAS
cfg() {
	case $3 in
	sgd0) opt='{"type": "sgd", "params": {"lr": 0.1, "momentum": 0, "weight_decay": 0}}'; clip='' ;;
	*) opt='{"type": "adamw", "params": {"lr": 0.02, "weight_decay": 0.01}}'; clip='"max_grad_norm": 0.5,' ;;
	esac
	echo "{\"optimizer\": $opt, $clip \"gradient_accumulation_steps\": $4, $(section "$2")}" > "$1"
}

for g in $GAS; do
	cfg "$tmp/ref$g.json" ddp adamw "$g"
	ACCEL_CONFIG=$tmp/ref$g.json "$prog" --out "$tmp/ref$g" --steps $STEPS --batch $BATCH \
		> "$tmp/ref$g.log" 2>&1 || { fail "reference ddp gas $g"; cat "$tmp/ref$g.log"; }
	# the reference trained (every tensor moved)
	cfg "$tmp/init.json" ddp adamw 1
	ACCEL_CONFIG=$tmp/init.json "$prog" --out "$tmp/init" --steps 0 > /dev/null 2>&1
	"$prog" --compare "$tmp/init" "$tmp/ref$g" --rtol 1e-2 > "$tmp/moved.log" 2>/dev/null
	grep -q " 4 tensors, 4 outside" "$tmp/moved.log" || fail "reference gas $g did not train: $(cat "$tmp/moved.log")"
done

for v in $VARIANTS; do
	p=$(plugin_of "$v")
	if ! have_plugin "$p"; then
		echo "skipped: $v: plugin $p not built"
		continue
	fi
	for n in $WORLDS; do
		for g in $GAS; do
			cfg "$tmp/c.json" "$v" adamw "$g"
			if ! "$ACCEL_CLI" launch -n "$n" --config "$tmp/c.json" -- "$prog" \
				--out-ranks "$tmp/o" --steps $STEPS --batch $BATCH > "$tmp/o.log" 2>&1; then
				fail "$v world $n gas $g: the run failed"
				tail -15 "$tmp/o.log"
				continue
			fi
			every_rank "$tmp/ref$g" "$tmp/o" "$n" "$RTOL" "$v world $n gas $g vs ddp world 1"
		done
		# the sum of both uses, with SGD: at the largest world, accumulation 2
		cfg "$tmp/s.json" "$v" sgd0 2
		if "$ACCEL_CLI" launch -n "$n" --config "$tmp/s.json" -- "$prog" --check-sgd 0.1 \
			--steps 1 --batch $BATCH > "$tmp/s.log" 2>&1; then
			echo "ok: $v world $n: $(grep -m1 'untied reference' "$tmp/s.log")"
		else
			fail "$v world $n: the tied weight's update is not -lr * (g_emb + g_head)"
			tail -15 "$tmp/s.log"
		fi
	done
done

# one master, one optimizer state; checkpoints across strategies
if command -v python3 > /dev/null 2>&1; then
	one_state() {
		python3 - "$1/manifest.json" <<'EOF' || fail "$2: the checkpoint does not hold one master and one optimizer state per parameter"
import json, sys
m = json.load(open(sys.argv[1]))
t = m["tensors"]
want = {"emb.weight": 91, "mid.weight": 49, "mid.bias": 7, "head.bias": 13}
for k in ("master", "optim/exp_avg", "optim/exp_avg_sq"):
    names = sorted(n[len(k) + 1:] for n in t if n.startswith(k + "/") and n.count("/") == k.count("/") + 1)
    if names != sorted(want):
        sys.exit("%s/: %s, want %s" % (k, names, sorted(want)))
    for n, numel in want.items():
        cover = sum(s["count"] for s in t[k + "/" + n]["slices"])
        if cover != numel:
            sys.exit("%s/%s: slices cover %d elements, want %d" % (k, n, cover, numel))
extra = [n for n in t if not n.startswith(("master/", "optim/", "param/"))]
if extra:
    sys.exit("unexpected tensors %s" % extra)
print("one master and one optimizer state per parameter: %d tensors" % len(t))
EOF
	}
	cfg "$tmp/full.json" ddp adamw 1
	ACCEL_CONFIG=$tmp/full.json "$prog" --out "$tmp/full" --steps 8 --batch $BATCH > /dev/null 2>&1 ||
		fail "the uninterrupted reference failed"
	# save at 4 steps under A (world N), resume under B (world M) for 4 more
	# TIED_CKPT: comma-separated "SAVE_VARIANT WORLD LOAD_VARIANT WORLD"
	pairs=${TIED_CKPT:-ddp 2 zero3 3,zero3 3 fsdp_full 2,fsdp_full 2 zero1 1,zero2cpu 2 fsdp_wrap 3,fsdp_grad_op 3 ddp 2}
	IFS=,
	for pair in $pairs; do
		IFS=' 	
'
		set -- $pair
		[ $# -eq 4 ] || continue
		if ! have_plugin "$(plugin_of "$1")" || ! have_plugin "$(plugin_of "$3")"; then
			echo "skipped: checkpoint $1 -> $3: plugin not built"
			continue
		fi
		rm -rf "$tmp/ck"
		cfg "$tmp/a.json" "$1" adamw 1
		cfg "$tmp/b.json" "$3" adamw 1
		if ! "$ACCEL_CLI" launch -n "$2" --config "$tmp/a.json" -- "$prog" --steps 4 \
			--batch $BATCH --save "$tmp/ck" > "$tmp/a.log" 2>&1; then
			fail "checkpoint: saving under $1 at world $2 failed"; tail -10 "$tmp/a.log"; continue
		fi
		one_state "$tmp/ck" "$1 world $2" > "$tmp/one.log" && echo "ok: $1 world $2: $(cat "$tmp/one.log")"
		if ! "$ACCEL_CLI" launch -n "$4" --config "$tmp/b.json" -- "$prog" --steps 4 \
			--batch $BATCH --load "$tmp/ck" --out-ranks "$tmp/r" > "$tmp/b.log" 2>&1; then
			fail "checkpoint: $1 world $2 loaded under $3 world $4 failed"; tail -10 "$tmp/b.log"; continue
		fi
		every_rank "$tmp/full" "$tmp/r" "$4" "$RTOL" "saved under $1 world $2, resumed under $3 world $4 vs uninterrupted"
	done
	IFS=' 	
'
else
	echo "note: no python3: the checkpoint checks are not run"
fi

# HYBRID_SHARD: two launchers as two nodes of two ranks (sharded within a
# node, replicated across), every rank against ddp at one process
if [ -n "${TIED_HYBRID-1}" ] && have_plugin fsdp && command -v python3 > /dev/null 2>&1; then
	for g in $GAS; do
		echo "{\"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 0.02, \"weight_decay\": 0.01}}, \"max_grad_norm\": 0.5, \"gradient_accumulation_steps\": $g, \"strategy\": \"fsdp\", \"fsdp\": {\"sharding_strategy\": \"HYBRID_SHARD\"}}" > "$tmp/h.json"
		if ! two_nodes "$tmp/h.json" "$tmp/h"; then
			fail "HYBRID_SHARD gas $g: the 2-node job failed ($st0, $st1)"
			tail -10 "$tmp/h0.log" "$tmp/h1.log"
			continue
		fi
		every_rank "$tmp/ref$g" "$tmp/h" 4 "$RTOL" "HYBRID_SHARD 2 nodes x 2 ranks gas $g vs ddp world 1"
	done
fi

# The memory estimate (the estimate_memory slot's arithmetic, logged by
# the strategy for the rank's own layout) against what accel_memory_stats
# counts at the end of the run (tied-train --memory), per category, on
# every rank of world 3, to the byte: the tied weight's owner, gathered
# with its gradient across the head's backward, must be counted the way
# the strategy allocates it.  zero logs "memory after the first step ...
# (est N)" per place; device and host add up (a CPU job's memory is all
# host memory), nvme file bytes are not memory.  fsdp logs "memory
# estimate for rank R, bytes kept between steps: ...".
MEM_VARIANTS=${TIED_MEMORY-zero3 zero3cpu zero3nvme fsdp_full fsdp_grad_op fsdp_no_shard fsdp_wrap fsdp_nowrap fsdp_full_offload}
for v in $MEM_VARIANTS; do
	p=$(plugin_of "$v")
	have_plugin "$p" || { echo "skipped: memory $v: plugin $p not built"; continue; }
	cfg "$tmp/m.json" "$v" adamw 1
	if ! ACCEL_LOG_LEVEL=info ACCEL_LOG_ALL_RANKS=1 "$ACCEL_CLI" launch -n 3 \
		--config "$tmp/m.json" -- "$prog" --steps 3 --batch $BATCH \
		--memory "$tmp/mem" > "$tmp/m.log" 2>&1; then
		fail "memory $v: the run failed"; tail -15 "$tmp/m.log"; continue
	fi
	for r in 0 1 2; do
		case $p in
		zero) line=$(grep "\[accel rank $r\].*memory after the first step" "$tmp/m.log" | head -1) ;;
		*) line=$(grep "memory estimate for rank $r, " "$tmp/m.log" | head -1) ;;
		esac
		[ -n "$line" ] || { fail "memory $v rank $r: no estimate in the log"; continue; }
		if res=$(mem_match "$line" "$tmp/mem.$r" "$p"); then
			[ "$r" = 2 ] && echo "ok: memory $v (rank 2, measured/estimated):$res"
		else
			fail "memory $v rank $r (measured/estimated):$res"
		fi
	done
done

# the API's refusals
if "$prog" --api-errors > "$tmp/api.log" 2>&1; then
	echo "ok: accel_unit_use_param refusals: $(grep -c '^ok' "$tmp/api.log") checked"
else
	fail "accel_unit_use_param refusals"; cat "$tmp/api.log"
fi

# refusal: a strategy without ACCEL_CAP_SHARED_PARAMS, and one built before ABI 1.7
echo "{\"strategy\": \"localsgd\", \"plugin_dirs\": [\"$lsgd_dir\"]}" > "$tmp/l.json"
echo "{\"strategy\": \"localsgd\", \"plugin_dirs\": [\"$abi12_dir\"]}" > "$tmp/l12.json"
for c in l l12; do
	if ACCEL_CONFIG=$tmp/$c.json "$prog" --steps 1 > "$tmp/$c.log" 2>&1; then
		fail "strategy localsgd ($c) ran a model with a shared parameter"
	elif grep -q "accel_prepare: unit 'head' uses parameter 'emb.weight' of unit 'emb' (accel_unit_use_param, a shared/tied parameter), but strategy 'localsgd' does not declare" "$tmp/$c.log"; then
		echo "ok: refused ($c): $(grep -m1 accel_prepare "$tmp/$c.log")"
	else
		fail "strategy localsgd ($c): not refused with the expected message"; cat "$tmp/$c.log"
	fi
done
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
