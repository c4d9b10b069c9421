#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-zero-parity.sh PROG MODE: end-to-end training parity of the
# zero strategy with tests/progs/zero-train (train-parity's model, written
# inside a forward-only pass with the unit hooks, so stage 3 gathers).
#
#   matrix: N ranks equal 1 rank (ddp at world 1, same config, 20 steps,
#           max_grad_norm set) within RTOL for stages 1, 2, 3 x offload
#           none, cpu, nvme (and at stage 3 optimizer and parameters both
#           in NVMe swap files) x gradient_accumulation_steps 1 and 4 x world
#           2, 3 and 4; every rank's final weights are compared (not rank
#           0's), and every run must have trained.  ZERO_TEST_SUBSET=1
#           (meson sets it in sanitizer builds) runs a representative
#           subset: each stage and offload once, each world and
#           accumulation at least once.
#   checks: bf16 stages 1-3 bitwise equal to ddp at world 2; and the
#           defects a parity test easily misses:
#           - SGD (gradient scale matters, unlike AdamW) at world 3, stages
#             0-3: gradients summed instead of averaged fail here;
#           - a rank-dependent initialisation (--rank-init) must give rank
#             0's values on every rank after accel_prepare (stages 0-3,
#             world 3);
#           - what accel counted for each rank (accel_memory_stats, through
#             zero-train --memory) equals the plugin's estimate for that
#             rank (the estimate_memory slot's rules, logged after the first
#             step) within 5%, per category, for stages 0-3 and each
#             offload (buffers excepted: comm staging is the backend's);
#           - stages 0-2: a group's reduction is issued during backward,
#             before the last unit's backward began (ACCEL_TEST_COMM_TRACE);
#           - stage 3 at world 4: the peak of parameter bytes accel counted
#             is at most the own shards + the two largest units + the
#             prefetch budget; with prefetch on, the gather of
#             the last unit's weights for its backward was issued before
#             that backward began (ACCEL_TEST_COMM_TRACE), and without
#             prefetch it was not;
#           - bad configs are refused with their messages;
#           - no file is left in nvme_path after a run or a failed run.
# Exits 77 (skipped) only when `accel launch` cannot start two processes.
set -u

prog=${1:?usage: test-zero-parity.sh PROG matrix|checks}
mode=${2:?usage: test-zero-parity.sh PROG matrix|checks}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-zero-parity.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

# Tolerances: about 2.5 times the largest deviation observed (x86-64, shm).
RTOL=6e-7        # world 1 (ddp) vs zero at 2/3/4: observed 1.98e-7 (adamw),
                 # 2.55e-7 (sgd without clipping, world 3)
MOVED=1e-2       # smallest relative move of a tensor: observed > 5e-2
STEPS=20
BATCH=48         # divisible by 2, 3, 4 ranks x 4 micro-steps

[ -n "${ACCEL_CLI:-}" ] || { echo "FAIL: ACCEL_CLI is not set (run through meson test)"; exit 1; }
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
. "$ACCEL_TEST_SRCDIR/tests/lib-compare.sh"
need_launch2

# cfg FILE STRATEGY OPTIM GAS ZERO_JSON: a config.  Small reduce groups so
# the 3-unit model (fc1 144, fc2 272, fc3 68 elements) gets several at
# stages 0-2; every unit gathered and released at stage 3 (persistence 0).
cfg() {
	case $3 in
	sgd) opt='{"type": "sgd", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.001}}' ;;
	*) opt='{"type": "adamw", "params": {"lr": 0.01, "weight_decay": 0.01}}' ;;
	esac
	# SGD without clipping: a clipped step hides a gradient's scale
	[ "$3" = sgd ] && clip='' || clip='"max_grad_norm": 0.05,'
	cat > "$1" <<EOF
{"strategy": "$2", "optimizer": $opt, $clip
 "gradient_accumulation_steps": $4,
 "zero_optimization": {"reduce_bucket_size": 300, "stage3_param_persistence_threshold": 0 $5}}
EOF
	[ "$2" = zero ] || sed -i 's/^ "zero_optimization".*}}$/ "ddp": {}}/' "$1"
}

# nvme_clean DIR WHAT: nothing left in DIR.
nvme_clean() {
	left=$(ls -A "$1" 2>/dev/null | head -3)
	[ -z "$left" ] || fail "$2: files left in nvme_path: $left"
}

mkdir -p "$tmp/nvme"
offload_json() {
	case $1 in
	cpu) echo ', "offload_optimizer": {"device": "cpu"}' ;;
	nvme) echo ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}" ;;
	# stage 3: optimizer and parameter shards in swap files
	pnvme) echo ", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"},
		\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}" ;;
	*) echo '' ;;
	esac
}

if [ "$mode" = matrix ]; then
	ACCEL_CONFIG=$tmp/empty.json "$prog" --out "$tmp/init" --steps 0 > "$tmp/init.log" 2>&1 ||
		{ fail "initial parameters"; cat "$tmp/init.log"; }
	for gas in 1 4; do
		reference "$tmp/ref$gas" adamw $gas || continue
		for st in 1 2 3; do
			offs="none cpu nvme"
			[ "$st" = 3 ] && offs="$offs pnvme"
			for off in $offs; do
				for n in 2 3 4; do
					if [ "${ZERO_TEST_SUBSET:-0}" = 1 ]; then
						# one world per (stage, offload, gas), all worlds covered
						want=$(( (st + gas + ${#off}) % 3 + 2 ))
						[ "$n" = "$want" ] || continue
					fi
					what="stage $st offload $off gas $gas world $n"
					cfg "$tmp/c.json" zero adamw $gas ", \"stage\": $st $(offload_json $off)"
					out=$tmp/s$st-$off-$gas-$n
					runn "$n" "$tmp/c.json" "$out" --steps $STEPS --batch $BATCH ||
						{ fail "$what: run failed"; tail -20 "$out.log"; continue; }
					every_rank "$tmp/ref$gas" "$out" "$n" "$RTOL" "$what vs ddp world 1"
					moved "$tmp/init" "$out.0" "$what"
					nvme_clean "$tmp/nvme" "$what"
				done
			done
		done
	done
	[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
	exit 0
fi

[ "$mode" = checks ] || { echo "unknown mode $mode"; exit 2; }

# SGD without clipping: a gradient summed over ranks instead of averaged
# moves SGD by W times the step (AdamW's update, and a clipped one, would
# hardly notice; the matrix passes with that defect).
reference "$tmp/sgdref" sgd 1 || exit 1
for st in 0 1 2 3; do
	cfg "$tmp/c.json" zero sgd 1 ", \"stage\": $st"
	runn 3 "$tmp/c.json" "$tmp/sgd$st" --steps $STEPS --batch $BATCH ||
		{ fail "sgd stage $st world 3"; tail -20 "$tmp/sgd$st.log"; continue; }
	every_rank "$tmp/sgdref" "$tmp/sgd$st" 3 "$RTOL" "sgd stage $st world 3 vs ddp world 1"
done

# bf16 working weights and gradients: at world 2 without accumulation every
# stage computes what ddp at world 2 does (the same reductions in bf16, the
# same f32 masters): bitwise (observed 0 difference).
cfg "$tmp/c.json" ddp adamw 1 ""
runn 2 "$tmp/c.json" "$tmp/bfddp" --steps $STEPS --batch $BATCH --dtype bf16 ||
	{ fail "bf16 ddp world 2"; tail -20 "$tmp/bfddp.log"; }
for st in 1 2 3; do
	cfg "$tmp/c.json" zero adamw 1 ", \"stage\": $st"
	runn 2 "$tmp/c.json" "$tmp/bf$st" --steps $STEPS --batch $BATCH --dtype bf16 ||
		{ fail "bf16 stage $st world 2"; tail -20 "$tmp/bf$st.log"; continue; }
	every_rank "$tmp/bfddp.0" "$tmp/bf$st" 2 0 "bf16 stage $st world 2 vs ddp world 2 (bitwise)"
done

# A rank-dependent init: every rank starts from rank 0's values (rank 0's
# shift is 0, so the one-process run is the reference).
ACCEL_CONFIG=$tmp/empty.json "$prog" --out "$tmp/rinit" --steps 0 --rank-init \
	> "$tmp/rinit.log" 2>&1 || { fail "rank-init reference"; cat "$tmp/rinit.log"; }
for st in 0 1 2 3; do
	cfg "$tmp/c.json" zero adamw 1 ", \"stage\": $st"
	runn 3 "$tmp/c.json" "$tmp/ri$st" --steps 0 --batch $BATCH --rank-init ||
		{ fail "rank-init stage $st"; tail -20 "$tmp/ri$st.log"; continue; }
	every_rank "$tmp/rinit" "$tmp/ri$st" 3 0 "rank-dependent init, stage $st, after accel_prepare"
done

# Measured (accel_memory_stats) against the plugin's estimate, every rank.
for v in "0 none" "1 none" "2 none" "3 none" "2 cpu" "3 cpu" "1 nvme" "3 nvme" "3 pnvme" \
	"1 none bf16" "3 none bf16" "2 cpu bf16" "3 pnvme bf16"; do
	set -- $v f32
	cfg "$tmp/c.json" zero adamw 1 ", \"stage\": $1 $(offload_json $2)"
	ACCEL_LOG_LEVEL=info ACCEL_LOG_ALL_RANKS=1 \
		runn 3 "$tmp/c.json" "$tmp/mem" --steps 3 --batch $BATCH --memory "$tmp/memst" \
			--dtype "$3" || { fail "memory stage $1 offload $2 $3"; tail -20 "$tmp/mem.log"; continue; }
	for r in 0 1 2; do
		line=$(grep "\[accel rank $r\].*memory after the first step" "$tmp/mem.log" | head -1)
		if [ -z "$line" ]; then
			fail "memory stage $1 offload $2 rank $r: no memory report"
			continue
		fi
		# estimate per category: device + host (a CPU job counts both as
		# host memory); nvme file bytes are not memory
		if echo "$line" | awk -v mf="$tmp/memst.$r" -v what="stage $1 offload $2 $3 rank $r" '
			{
				s = $0; sub(/.*estimated\): /, "", s); sub(/; peak.*/, "", s)
				n = split(s, parts, ", ")
				for (i = 1; i <= n; i++) {
					k = split(parts[i], w, " ")
					if (w[1] == "nvme") continue
					cat = (w[1] == "host") ? w[2] : w[1]
					e = w[k]; sub(/\)/, "", e)
					est[cat] += e
				}
				while ((getline l < mf) > 0) { split(l, f, " "); cur[f[1]] = f[2] }
				split("params grads master optimizer offload", cats, " ")
				bad = 0
				for (i = 1; i <= 5; i++) {
					c = cats[i]; m = cur[c] + 0; e = est[c] + 0
					d = m > e ? m - e : e - m
					if (d > 0.05 * e) { printf "%s: %s measured %d, estimated %d\n", what, c, m, e; bad = 1 }
					out = out sprintf(" %s %d/%d", c, m, e)
				}
				if (!bad) printf "ok: memory %s: measured/estimated%s\n", what, out
				exit bad
			}' > "$tmp/memcmp.log"; then
			[ "$r" = 0 ] && cat "$tmp/memcmp.log"
		else
			fail "$(cat "$tmp/memcmp.log")"
		fi
	done
	nvme_clean "$tmp/nvme" "memory stage $1 offload $2"
done

# Stage 3 with zero3_init_flag (each rank initialises only its own
# blocks): the same model when the init does not depend on the rank; with
# a rank-dependent init each rank's blocks keep their own values (what the
# flag means; without it rank 0's model is broadcast, checked above).
cfg "$tmp/c.json" zero adamw 1 ', "stage": 3, "zero3_init_flag": true'
runn 3 "$tmp/c.json" "$tmp/if" --steps 0 --batch $BATCH ||
	{ fail "zero3_init_flag"; tail -20 "$tmp/if.log"; }
ACCEL_CONFIG=$tmp/empty.json "$prog" --out "$tmp/init0" --steps 0 > "$tmp/init0.log" 2>&1 ||
	{ fail "initial parameters"; cat "$tmp/init0.log"; }
every_rank "$tmp/init0" "$tmp/if" 3 0 "stage 3 zero3_init_flag: initial weights"
runn 3 "$tmp/c.json" "$tmp/ifr" --steps 0 --batch $BATCH --rank-init ||
	{ fail "zero3_init_flag --rank-init"; tail -20 "$tmp/ifr.log"; }
if "$prog" --compare "$tmp/rinit" "$tmp/ifr.0" --rtol 0 > /dev/null 2>&1; then
	fail "zero3_init_flag with a rank-dependent init gave rank 0's model (blocks not made by their owners)"
else
	echo "ok: zero3_init_flag with a rank-dependent init: each rank's blocks its own"
fi
# reduce_scatter false (all-reduce, own block kept): the same training
cfg "$tmp/c.json" zero adamw 1 ', "stage": 1, "reduce_scatter": false'
runn 3 "$tmp/c.json" "$tmp/nors" --steps $STEPS --batch $BATCH ||
	{ fail "reduce_scatter false"; tail -20 "$tmp/nors.log"; }
reference "$tmp/adref" adamw 1 && every_rank "$tmp/adref" "$tmp/nors" 3 "$RTOL" "stage 1 reduce_scatter false world 3 vs ddp world 1"

# Stages 0-2: the reduction of the last units' group (fc3 alone; fc1 and
# fc2 form the other) is issued while backward still runs: before the
# backward of the last unit (fc1) began, on every rank and micro-step.
for st in 0 1 2; do
	[ $st = 0 ] && op=allreduce || op=reduce_scatter
	cfg "$tmp/c.json" zero adamw 4 ", \"stage\": $st"
	ACCEL_TEST_COMM_TRACE=$tmp/ov$st runn 2 "$tmp/c.json" "$tmp/ov$st" --steps 2 --batch $BATCH \
		--trace "$tmp/ovbw$st" || { fail "overlap stage $st"; tail -20 "$tmp/ov$st.log"; continue; }
	for r in 0 1; do
		# micro-steps whose reduction is due: all at stage 2, the 4th of 4 at 0-1
		res=$(awk -v op=$op -v st=$st 'FNR == NR { if ($1 == "backward" && (st == 2 || $2 % 4 == 3)) { k++; b[k] = $3; l[k] = $4 } next }
			$2 == op { for (s = 1; s <= k; s++) if ($3 >= b[s] && $3 < l[s]) early[s] = 1 }
			END { for (s = 1; s <= k; s++) n += early[s]; printf "%d %d", n, k }' \
			"$tmp/ovbw$st.$r" "$tmp/ov$st.$r")
		set -- $res
		if [ "$2" -gt 0 ] && [ "$1" = "$2" ]; then
			echo "ok: stage $st rank $r: $op issued during backward in all $2 reducing micro-steps"
		else
			fail "stage $st rank $r: $op issued during backward in ${1:-?} of ${2:-?} reducing micro-steps"
		fi
	done
done

# Stage 3 at world 4: peak gathered parameters, and prefetch overlap.
for pf in on off; do
	[ $pf = on ] && b=1000000 || b=0
	cfg "$tmp/c.json" zero adamw 1 ", \"stage\": 3, \"stage3_prefetch_bucket_size\": $b"
	ACCEL_LOG_LEVEL=info ACCEL_LOG_ALL_RANKS=1 ACCEL_TEST_COMM_TRACE=$tmp/comm$pf \
		runn 4 "$tmp/c.json" "$tmp/pf$pf" --steps 3 --batch $BATCH --trace "$tmp/bw$pf" \
			--memory "$tmp/pm$pf" ||
		{ fail "stage 3 prefetch $pf"; tail -20 "$tmp/pf$pf.log"; continue; }
	for r in 0 1 2 3; do
		# fc1 144, fc2 272, fc3 68 elements (each divisible by 4: no
		# padding): own shards (144+272+68)/4 x 4 bytes = 484; two largest
		# units (272+144) x 4 = 1664; prefetch budget 1000000 elements, but
		# at most the model (484 x 4 bytes = 1936): bound 484 + 1664 + 1936
		# with prefetch, 484 + 1664 without.
		peak=$(awk '$1 == "params" { print $3 }' "$tmp/pm$pf.$r" 2>/dev/null)
		[ $pf = on ] && bound=$((484 + 1664 + 1936)) || bound=$((484 + 1664))
		if [ -z "$peak" ]; then
			fail "stage 3 prefetch $pf rank $r: no memory report"
		elif [ "$peak" -gt "$bound" ]; then
			fail "stage 3 prefetch $pf rank $r: peak params $peak bytes > bound $bound"
		else
			echo "ok: stage 3 prefetch $pf rank $r: peak params $peak <= $bound bytes"
		fi
		# allgathers issued while the last unit's (fc1's) backward ran:
		# its gather for backward, unless a prefetch issued it earlier.
		late=$(awk 'FNR == NR { if ($1 == "backward" && $2 >= 1) { k++; l[k] = $4; e[k] = $5 } next }
			$2 == "allgather" { for (s = 1; s <= k; s++) if ($3 >= l[s] && $3 <= e[s]) n++ }
			END { print n + 0 }' "$tmp/bw$pf.$r" "$tmp/comm$pf.$r")
		if [ $pf = on ] && [ "$late" -ne 0 ]; then
			fail "stage 3 prefetch on rank $r: $late gathers issued at fc1's backward (not prefetched)"
		elif [ $pf = off ] && [ "$late" -lt 2 ]; then
			fail "stage 3 prefetch off rank $r: expected fc1's gathers at its backward, saw $late"
		else
			echo "ok: stage 3 prefetch $pf rank $r: $late gathers issued during fc1's backward"
		fi
	done
done

# Bad configs: refused with a message naming the problem.
while IFS='|' read -r z want; do
	[ -n "$z" ] || continue
	echo "{\"strategy\": \"zero\", \"zero_optimization\": {$z}}" > "$tmp/bad.json"
	if ACCEL_CONFIG=$tmp/bad.json "$prog" --steps 1 > "$tmp/bad.log" 2>&1; then
		fail "accepted: $z"
	elif ! grep -q "$want" "$tmp/bad.log"; then
		fail "$z: message lacks '$want':"
		cat "$tmp/bad.log"
	else
		echo "ok: refused $z: $(tail -1 "$tmp/bad.log" | cut -c1-160)"
	fi
done <<EOF
"stage": 4|zero_optimization.stage.*expected an integer in \[0, 3\]
"stage": 2, "offload_optimizer": {"device": "nvme"}|nvme_path is not set
"stage": 2, "offload_param": {"device": "cpu"}|offload_param.device 'cpu' needs stage 3
"stage": 0, "offload_optimizer": {"device": "cpu"}|needs stage 1, 2 or 3
"stage": 3, "offload_param": {"device": "nvme"}|offload_param.nvme_path is not set
"stage": 1, "zero_quantized_weights": true|zero_quantized_weights: not implemented by accel's zero plugin
"stage": 1, "zero_hpz_partition_size": 2|zero_hpz_partition_size: not implemented
"stage": 1, "mics_shard_size": 4|mics_shard_size: not implemented
"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "$tmp/missing"}|$tmp/missing
"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "$tmp/missing"}|$tmp/missing
EOF
nvme_clean "$tmp/nvme" "bad configs"

# A failed run leaves no swap file: rank 1 of 2 dies mid-run (an invalid
# hook sequence) after the store was made.
cfg "$tmp/c.json" zero adamw 1 ", \"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}"
if runn 2 "$tmp/c.json" "$tmp/dies" --steps 2 --hooks twice; then
	fail "a run with duplicate post_backward passed"
fi
nvme_clean "$tmp/nvme" "a failed run"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
exit 0
