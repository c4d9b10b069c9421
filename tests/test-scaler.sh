#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/test-scaler.sh PROG: the fp16 loss scaler (plugins/scaler) traced
# step by step with tests/progs/scaler-trace, which feeds scripted finite
# and non-finite gradients (Inf and NaN on the last rank only, -Inf on every
# rank) and checks, after every step, the scale, the skip, accel_last_step
# (skipped, loss_scale, step, nonfinite) and the weights (bitwise: unchanged
# on a skipped step, the unscaled update on the others) against the rule it
# computes itself (torch GradScaler's; DeepSpeed's with hysteresis or a
# floor).  Rows: torch's rule at 1 and 2 ranks (ddp; zero stage 2 at 2 when
# that plugin is built), other factors, accumulation, hysteresis (refilled
# on growth and on every good step), a floor, a static scale, a disabled
# scaler (a pass-through: non-finite steps are applied, as torch's), f16
# weights whose scaled gradients overflow f16 by themselves, and a state
# saved at one world size resumed at another.  Also: bad settings are
# refused with messages naming the key.
#
# Exits 77 (skipped) only when `accel launch` cannot start two processes of
# /bin/true here; then the world-1 rows still ran.
set -u

prog=${1:?usage: test-scaler.sh PROG}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-scaler.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export ACCEL_LOG_LEVEL=warn
unset ACCEL_CONFIG ACCEL_SET
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# 26 steps: growth at interval 3 several times, isolated and consecutive
# overflows of every kind.
S1='...i....n...II.....i.i.i..'
sgd='"optimizer": {"type": "sgd", "params": {"lr": 0.25, "momentum": 0, "weight_decay": 0}}'

# cfg NAME JSON-MEMBERS: a config file with the optimizer above.
cfg() {
	printf '{%s, %s}\n' "$sgd" "$2" > "$tmp/$1.json"
}
cfg torch '"mixed_precision": "fp16", "scaler": {"init_scale": 1024, "growth_interval": 3}'
cfg factors '"plugins": ["scaler"], "scaler": {"init_scale": 4096, "growth_factor": 4, "backoff_factor": 0.25, "growth_interval": 2}'
cfg acc '"mixed_precision": "fp16", "gradient_accumulation_steps": 2, "scaler": {"init_scale": 1024, "growth_interval": 3}'
cfg hyst '"mixed_precision": "fp16", "scaler": {"init_scale": 1024, "growth_interval": 3, "hysteresis": 2}'
cfg hystc '"mixed_precision": "fp16", "scaler": {"init_scale": 1024, "growth_interval": 4, "hysteresis": 3, "consecutive_hysteresis": true}'
cfg floor '"mixed_precision": "fp16", "scaler": {"init_scale": 1024, "growth_interval": 6, "min_loss_scale": 256}'
cfg static '"mixed_precision": "fp16", "scaler": {"init_scale": 512, "dynamic": false, "growth_interval": 2}'
cfg off '"mixed_precision": "fp16", "scaler": {"enabled": false}'
cfg defaults '"mixed_precision": "fp16"'
cfg f16 '"mixed_precision": "fp16", "scaler": {"init_scale": 131072, "growth_interval": 3}'
cfg f16acc '"mixed_precision": "fp16", "gradient_accumulation_steps": 2, "scaler": {"init_scale": 131072, "growth_interval": 3}'
cfg zero '"strategy": "zero", "zero_optimization": {"stage": 2}, "mixed_precision": "fp16", "scaler": {"init_scale": 1024, "growth_interval": 3}'

# run1 NAME SCRIPT [ARGS]: one process, no launcher.
run1() {
	name=$1 script=$2
	shift 2
	if ACCEL_CONFIG="$tmp/$name.json" "$prog" --script "$script" "$@" > "$tmp/$name.1.log" 2>&1
	then
		echo "ok: $name at 1 rank ($(grep -c '^step' "$tmp/$name.1.log") steps traced)"
		return 0
	fi
	fail "$name at 1 rank"
	cat "$tmp/$name.1.log"
	return 1
}

# runn N NAME SCRIPT [ARGS]: N ranks through the launcher.
runn() {
	n=$1 name=$2 script=$3
	shift 3
	if "$ACCEL_CLI" launch -n "$n" --config "$tmp/$name.json" -- "$prog" --script "$script" \
		"$@" > "$tmp/$name.$n.log" 2>&1
	then
		echo "ok: $name at $n ranks ($(grep -c 'step .* script' "$tmp/$name.$n.log") steps traced)"
		return 0
	fi
	fail "$name at $n ranks"
	cat "$tmp/$name.$n.log"
	return 1
}

# want NAME N PATTERN WHAT: the trace of NAME at N ranks has a line matching.
want() {
	grep -q "$3" "$tmp/$1.$2.log" || fail "$1 at $2 ranks: $4 (no line matching '$3')"
}

run1 torch "$S1"
# the trace is torch's: 1024 grows to 2048 after 3 good steps, the Inf at
# step 3 halves it and is skipped, 3 more good steps grow it again.
want torch 1 'step 2 script \. scale 1024 skipped 0 next 2048 applied 3' "growth after 3 steps"
want torch 1 'step 3 script i scale 2048 skipped 1 next 1024 applied 3' "back-off on Inf"
want torch 1 'step 8 script n scale 2048 skipped 1 next 1024' "back-off on NaN"
run1 factors "$S1"
want factors 1 'step 1 script \. scale 4096 skipped 0 next 16384' "growth by 4 after 2 steps"
want factors 1 'step 3 script i scale 16384 skipped 1 next 4096' "back-off by 0.25"
run1 acc "$S1"
run1 hyst "$S1"
# hysteresis 2: the first Inf is absorbed (skipped, scale kept), the second
# of II backs off
want hyst 1 'step 3 script i scale 2048 skipped 1 next 2048' "hysteresis absorbs the first overflow"
want hyst 1 'step 13 script I scale [0-9]* skipped 1 next' "II skipped"
run1 hystc "$S1"
run1 floor "$S1"
want floor 1 'next 256 ' "the floor is reached"
grep 'next' "$tmp/floor.1.log" | awk '$10 < 256 { bad = 1 } END { exit bad }' ||
	fail "floor: a scale below min_loss_scale 256"
run1 static "$S1"
grep '^step' "$tmp/static.1.log" | awk '$6 != 512 || $10 != 512 { bad = 1 } END { exit bad }' ||
	fail "static: the scale left 512"
want static 1 'step 3 script i scale 512 skipped 1 next 512' "a static scale still skips"
run1 off '.....'
want off 1 'step 4 script \. scale 1 skipped 0 next 1 applied 5' "disabled: scale 1"
# torch's disabled GradScaler applies a step with Inf gradients: so does
# this one (the weights become non-finite, which the program checks)
run1 off '..i.' && want off 1 'step 2 script i scale 1 skipped 0 next 1 applied 3' \
	"disabled: an Inf step is applied"
run1 defaults '..i..'
want defaults 1 'step 2 script i scale 65536 skipped 1 next 32768' "defaults: 65536, halved"

# f16 weights and gradients: scale x gradient overflows f16 by itself at
# 131072 (step 1: 5 elements reach 65536), the step is skipped and the
# scale halves, as in a real fp16 run; with accumulation the sum of the
# micro-steps overflows too
run1 f16 "$S1" --dtype f16
want f16 1 'step 1 script \. scale 131072 skipped 1 next 65536 applied 1 nonfinite 5' \
	"f16: a natural overflow is skipped and backs off"
run1 f16acc "$S1" --dtype f16
grep -q 'script \. scale [0-9]* skipped 1' "$tmp/f16acc.1.log" ||
	fail "f16acc: no natural overflow"

# bad settings: refused at context creation, naming the key
bad() {
	cfg bad "\"mixed_precision\": \"fp16\", \"scaler\": {$1}"
	if ACCEL_CONFIG="$tmp/bad.json" "$prog" --script . > "$tmp/bad.log" 2>&1; then
		fail "scaler {$1} was accepted"
	elif ! grep -q "$2" "$tmp/bad.log"; then
		fail "scaler {$1}: message lacks '$2': $(cat "$tmp/bad.log")"
	else
		echo "ok: scaler {$1} refused: $(grep -o "$2.*" "$tmp/bad.log" | head -1)"
	fi
}
bad '"growth_factor": 1' 'scaler.growth_factor is 1; it must be > 1'
bad '"backoff_factor": 1' 'scaler.backoff_factor is 1; it must be in (0, 1)'
bad '"init_scale": 0' 'scaler.init_scale is 0; it must be > 0'
bad '"init_scale": 128, "min_loss_scale": 256' 'scaler.init_scale (128) is below scaler.min_loss_scale (256)'
bad '"hysteresis": 0' 'hysteresis'
bad '"growth_interva": 3' 'growth_interval'

if ! printf '{}\n' > "$tmp/empty.json" ||
	! "$ACCEL_CLI" launch -n 2 --config "$tmp/empty.json" -- /bin/true > "$tmp/probe.log" 2>&1
then
	echo "skipped: accel launch -n 2 cannot start /bin/true here:"
	cat "$tmp/probe.log"
	[ "$fails" -eq 0 ] && exit 77
	exit 1
fi

# 2 ranks: Inf/NaN on rank 1 only, -Inf on both; every rank agrees.
for name in torch acc hyst floor static; do
	runn 2 "$name" "$S1"
done
grep -q 'nonfinite 2$' "$tmp/torch.2.log" ||
	fail "torch at 2 ranks: no step with 2 non-finite elements (II)"
if [ -f "$ACCEL_TEST_BUILDDIR/plugins/zero/zero.so" ]; then
	runn 2 zero "$S1"
else
	echo "note: zero plugin not built; the zero stage 2 row did not run"
fi

# save at 2 ranks, resume at 1 (and 1 -> 2): the rest of the trace
# continues as if never interrupted (the program replays the steps before
# --start at the saving world size and checks the weights it loads).  The
# points are chosen where the scale differs from init_scale and the good-
# step count (or the hysteresis left) is not 0, so each must be restored.
runn 2 factors "$S1" --stop 7 --save "$tmp/ckf" &&
	run1 factors "$S1" --start 7 --load "$tmp/ckf" --saved-world 2 &&
	want factors 1 'step 7 script \. scale 16384 skipped 0 next 65536' \
		"resumed at 1 rank from 2 (scale and good-step count restored)"
runn 2 torch "$S1" --stop 12 --save "$tmp/ck2" &&
	run1 torch "$S1" --start 12 --load "$tmp/ck2" --saved-world 2 &&
	want torch 1 'step 12 script I scale 2048' "resumed at 1 rank from 2"
run1 hyst "$S1" --stop 13 --save "$tmp/ck1" &&
	runn 2 hyst "$S1" --start 13 --load "$tmp/ck1" --saved-world 1 &&
	want hyst 2 'step 13 script I' "resumed at 2 ranks from 1 (mid-hysteresis)"

# a DeepSpeed config imported (accel config import-deepspeed) runs
# DeepSpeed's rule: its defaults hysteresis 2 and min_loss_scale 1 written
# by the import, checked step by step against DeepSpeed's formulation
cat > "$tmp/ds.json" <<EOF
{"fp16": {"enabled": true, "initial_scale_power": 10, "loss_scale_window": 3},
 "optimizer": {"type": "SGD", "params": {"lr": 0.25, "momentum": 0, "weight_decay": 0}}}
EOF
if "$ACCEL_CLI" config import-deepspeed "$tmp/ds.json" -o "$tmp/dsimp.json" \
	> "$tmp/dsimp.log" 2>&1
then
	runn 2 dsimp "$S1" &&
		want dsimp 2 'step 3 script i scale 2048 skipped 1 next 2048' \
			"imported DeepSpeed config: hysteresis 2 absorbs the first overflow"
else
	fail "import-deepspeed of an fp16 config"
	cat "$tmp/dsimp.log"
fi

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all scaler checks passed"
