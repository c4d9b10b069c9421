# SPDX-License-Identifier: MIT
# tests/lib-compare.sh: the run-and-compare helpers of the training test
# scripts (parity, checkpoint and GPU tests), sourced, not run:
#
#     . "$ACCEL_TEST_SRCDIR/tests/lib-compare.sh"
#
# The caller sets `tmp` (its scratch directory) and `fails=0` before it
# calls them; the helpers write their logs under $tmp and count failures
# in $fails.  Each says below which other variables of the caller it reads.
#
#   fail WHAT...            "FAIL: WHAT", one failure more
#   need_launch2            exits 77 when `accel launch -n 2` ($ACCEL_CLI)
#                           cannot start /bin/true here
#   st_cmp A B RTOL WHAT    safetensors files A and B equal within RTOL
#                           (tests/st_compare.py, run by $python, else
#                           python3): an "ok:" line with the largest
#                           difference, or a failure with the comparison's
#                           output; returns 1 when they differ
#   every_rank REF PREFIX N RTOL WHAT
#                           each of PREFIX.0 .. PREFIX.N-1 equals REF within
#                           RTOL ("$prog" --compare: tests/progs'
#                           parity programs)
#   moved INIT FINAL WHAT   every tensor of FINAL moved from INIT by more
#                           than $MOVED relative ("$prog" --compare)
#   runn N CONFIG OUT [ARGS...]
#                           "$prog" at N ranks under `accel launch`, each
#                           rank writing OUT.RANK (--out-ranks); log OUT.log
#   two_nodes CONFIG OUT    "$prog" ($STEPS steps of $BATCH) as one job of
#                           two launchers of 2 ranks each, nodes 0 and 1 on
#                           this machine (needs python3 for a free port),
#                           each rank writing OUT.RANK; logs $tmp/h0.log,
#                           $tmp/h1.log; their exit statuses in st0, st1;
#                           returns 1 when either failed
#   reference REF OPTIM GAS ddp at one process (no launcher), $STEPS steps
#                           of $BATCH, into REF; needs the caller's
#                           cfg FILE STRATEGY OPTIM GAS MEMBERS
#   mem_match LINE MEMFILE [zero]
#                           a strategy's memory estimate log LINE (fsdp's
#                           "... bytes kept between steps: ..."; with zero,
#                           zero's "memory after the first step ...") against
#                           the "CATEGORY BYTES" lines accel_memory_stats
#                           wrote to MEMFILE: prints " CATEGORY
#                           measured/estimated" for each; returns 1 unless
#                           all are equal
#
# GPU scripts (examples/train_mlp as $prog, its flags in $ARGS; results in
# $tmp/NAME.st):
#   gpu_probe BACKEND [ARGS...]
#                           exits 77 ("skipped: no GPU") when no CUDA device
#                           is visible, 1 when the probe run fails otherwise
#                           (ARGS: the probe's flags for a $prog other than
#                           train_mlp)
#   run NAME CONFIG [ARGS...]   one process
#   run2 NAME CONFIG [ARGS...]  2 ranks sharing the GPU through shm
#   same A B RTOL WHAT      st_cmp of $tmp/A.st and $tmp/B.st (a failure
#                           when either run left no result)

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

need_launch2() {
	echo '{}' > "$tmp/empty.json"
	if ! "$ACCEL_CLI" launch -n 2 --config "$tmp/empty.json" -- /bin/true > "$tmp/probe.log" 2>&1; then
		echo "skipped: accel launch -n 2 cannot start /bin/true here:"
		tail -5 "$tmp/probe.log"
		exit 77
	fi
}

st_cmp() {   # A B RTOL WHAT
	if "${python:-python3}" "$ACCEL_TEST_SRCDIR/tests/st_compare.py" "$1" "$2" "$3" \
		> "$tmp/cmp.log" 2>&1; then
		echo "ok: $4: $(tail -1 "$tmp/cmp.log")"
		return 0
	fi
	fail "$4"
	cat "$tmp/cmp.log"
	return 1
}

# every_rank REF PREFIX N RTOL WHAT: each of PREFIX.0 .. PREFIX.N-1 is REF.
every_rank() {
	r=0
	while [ "$r" -lt "$3" ]; do
		if ! "$prog" --compare "$1" "$2.$r" --rtol "$4" > "$tmp/cmp.log" 2>&1; then
			fail "$5: rank $r differs"
			cat "$tmp/cmp.log"
			return
		fi
		r=$((r + 1))
	done
	echo "ok: $5: all $3 ranks: $(cat "$tmp/cmp.log")"
}

moved() {
	"$prog" --compare "$1" "$2" --rtol "$MOVED" > "$tmp/moved.log" 2>/dev/null
	line=$(tail -1 "$tmp/moved.log")
	nt=$(echo "$line" | sed -n 's/.* in \([0-9]*\) tensors, \([0-9]*\) outside.*/\1/p')
	no=$(echo "$line" | sed -n 's/.* in \([0-9]*\) tensors, \([0-9]*\) outside.*/\2/p')
	[ -n "$nt" ] && [ "$nt" = "$no" ] || fail "$3 did not train: ${no:-?} of ${nt:-?} tensors moved"
}

# runn N CONFIG OUT [ARGS...]: N ranks; every rank writes OUT.RANK.
runn() {
	n=$1 c=$2 out=$3
	shift 3
	"$ACCEL_CLI" launch -n "$n" --config "$c" -- "$prog" --out-ranks "$out" "$@" \
		> "$out.log" 2>&1
}

# two_nodes CONFIG OUT: two launchers as nodes 0 and 1 of one job.
two_nodes() {
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	for node in 1 0; do
		"$ACCEL_CLI" launch -n 2 --nnodes 2 --node-rank $node --master-addr 127.0.0.1 \
			--master-port "$port" --config "$1" -- "$prog" --out-ranks "$2" \
			--steps $STEPS --batch $BATCH > "$tmp/h$node.log" 2>&1 &
		eval "pid$node=\$!"
	done
	st0=0 st1=0
	wait "$pid0" || st0=$?
	wait "$pid1" || st1=$?
	[ "$st0" -eq 0 ] && [ "$st1" -eq 0 ]
}

# reference REF OPTIM GAS: ddp at world 1 (one process, no launcher)
reference() {
	cfg "$tmp/ref.json" ddp "$2" "$3" ""
	ACCEL_CONFIG=$tmp/ref.json "$prog" --out "$1" --steps $STEPS --batch $BATCH \
		> "$1.log" 2>&1 || { fail "reference $2 gas $3"; cat "$1.log"; return 1; }
}

# mem_match LINE MEMFILE [zero]: the estimate in LINE == MEMFILE, per
# category.  zero's parts are "[host |nvme ]CATEGORY MEASURED (est N)":
# device and host add up, nvme file bytes are not memory; fsdp's are
# "CATEGORY N".
mem_match() {
	echo "$1" | awk -v mf="$2" -v p="${3:-}" '{
		s = $0
		if (p == "zero") { sub(/.*estimated\): /, "", s); sub(/; peak.*/, "", s) }
		else sub(/.*between steps: /, "", s)
		n = split(s, parts, ", ")
		for (i = 1; i <= n; i++) {
			k = split(parts[i], w, " ")
			if (w[1] == "nvme") continue
			c = (w[1] == "host") ? w[2] : w[1]
			e = w[k]; sub(/\)/, "", e)
			est[c] += e
		}
		while ((getline l < mf) > 0) { split(l, f, " "); cur[f[1]] = f[2] }
		ok = 1
		split("params grads master optimizer buffers offload", cats, " ")
		for (i = 1; i <= 6; i++) {
			c = cats[i]
			if (cur[c] + 0 != est[c] + 0) ok = 0
			out = out sprintf(" %s %d/%d", c, cur[c], est[c])
		}
		print out
		exit !ok }'
}

# gpu_probe BACKEND [ARGS...]: a machine without a GPU (or a build without
# CUDA) says so; ARGS replace train_mlp's one-step flags.
gpu_probe() {
	b=$1
	shift
	[ $# -gt 0 ] ||
		set -- --steps 1 --hidden 8 --samples 64 --batch-size 32 --test-samples 0 --no-eval
	if ! "$prog" --device cuda "$@" --set "backend=$b" > "$tmp/probe.log" 2>&1; then
		if grep -q "no CUDA device is visible" "$tmp/probe.log"; then
			echo "skipped: no GPU"
			exit 77
		fi
		echo "FAIL: the probe run failed:"
		cat "$tmp/probe.log"
		exit 1
	fi
}

# run NAME CONFIG [ARGS...]: one process; final parameters in $tmp/NAME.st
run() {
	name=$1 cfg=$2
	shift 2
	# shellcheck disable=SC2086
	if ! ACCEL_CONFIG=$cfg "$prog" $ARGS --save-final "$tmp/$name.st" "$@" \
		> "$tmp/$name.log" 2>&1; then
		fail "$name: the run failed"
		cat "$tmp/$name.log"
		return 1
	fi
}

# run2 NAME CONFIG [ARGS...]: 2 ranks on the GPU through the shm backend
run2() {
	name=$1 cfg=$2
	shift 2
	# shellcheck disable=SC2086
	if ! "$ACCEL_CLI" launch -n 2 --config "$cfg" -- "$prog" $ARGS --device cuda \
		--set backend=shm --save-final "$tmp/$name.st" "$@" > "$tmp/$name.log" 2>&1; then
		fail "$name: the 2-rank run failed"
		cat "$tmp/$name.log"
		return 1
	fi
}

# same A B RTOL WHAT
same() {
	if [ ! -f "$tmp/$1.st" ] || [ ! -f "$tmp/$2.st" ]; then
		fail "$4: no result to compare"
		return
	fi
	st_cmp "$tmp/$1.st" "$tmp/$2.st" "$3" "$4" || true
}
