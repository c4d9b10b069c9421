#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpt2-curves.sh BUILD_DIR [STEPS]: examples/gpt2 (--model tiny) on
# byte-level tokens of a Debian text file, the same run at 2 processes
# under ddp, zero stages 1/2/3, zero 3 with cpu offload of parameters and
# optimizer, fsdp FULL_SHARD / SHARD_GRAD_OP / NO_SHARD (f32), and ddp with
# mixed_precision bf16 and fp16 (16-bit weights and activations; fp16 with
# the loss scaler).  AdamW lr 3e-3, global batch 12 sequences of 32 bytes,
# STEPS steps (default 200), the training loss logged every STEPS/10 steps
# through --metrics.  Prints the loss curves side by side (a column per
# run, a row per logged step, then the held-out loss), the largest spread
# per row over the f32 strategies and the largest distance of a 16-bit run
# from f32 ddp, and one JSON line with the worst of both
# (docs/gpt2.md, "Loss curves").  A strategy whose plugin the build lacks
# is skipped with "skipped: plugin X not built".
set -u
B=${1:?usage: gpt2-curves.sh BUILD_DIR [STEPS]}
STEPS=${2:-200}
EVERY=$((STEPS / 10))
[ "$EVERY" -gt 0 ] || EVERY=1
G=$B/examples/train_gpt2
A=$B/cli/accel
export ACCEL_LOG_LEVEL=warn
ACCEL_PLUGIN_PATH=$(ls -d "$B"/plugins/* "$B"/backends/* | tr '\n' ':')
export ACCEL_PLUGIN_PATH
unset ACCEL_CONFIG ACCEL_SET
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt2-curves.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
TEXT=/usr/share/common-licenses/GPL-3
[ -r "$TEXT" ] || TEXT=$(dirname "$0")/../README.md
"$G" prepare "$TEXT" "$tmp/text.tok" > /dev/null || exit 1

# conf NAME PLUGIN JSON: a run's configuration (the common optimizer and
# loader, then the strategy's keys)
RUNS=""
conf() {
	if [ ! -e "$B/plugins/$2/$2.so" ]; then
		echo "skipped: plugin $2 not built ($1)"
		return
	fi
	cat > "$tmp/$1.json" <<JSON
{"seed": 3, "optimizer": {"type": "adamw", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "dataloader": {"shuffle": true, "drop_last": true}, $3}
JSON
	RUNS="$RUNS $1"
}
conf ddp ddp '"strategy": "ddp"'
conf zero1 zero '"strategy": "zero", "zero_optimization": {"stage": 1}'
conf zero2 zero '"strategy": "zero", "zero_optimization": {"stage": 2}'
conf zero3 zero '"strategy": "zero", "zero_optimization": {"stage": 3}'
conf zero3-off zero '"strategy": "zero", "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}'
conf fsdp-full fsdp '"strategy": "fsdp", "fsdp": {"sharding_strategy": "FULL_SHARD"}'
conf fsdp-grad fsdp '"strategy": "fsdp", "fsdp": {"sharding_strategy": "SHARD_GRAD_OP"}'
conf fsdp-none fsdp '"strategy": "fsdp", "fsdp": {"sharding_strategy": "NO_SHARD"}'
conf ddp-bf16 ddp '"strategy": "ddp", "mixed_precision": "bf16"'
[ -e "$B/plugins/scaler/scaler.so" ] && conf ddp-fp16 ddp '"strategy": "ddp", "mixed_precision": "fp16"'

for r in $RUNS; do
	if ! "$A" launch -n 2 --config "$tmp/$r.json" -- "$G" --data "$tmp/text.tok" \
		--batch-size 12 --steps "$STEPS" --log-every "$EVERY" --eval-batches 0 \
		--metrics "$tmp/$r.jsonl" > "$tmp/$r.log" 2>&1; then
		tail -5 "$tmp/$r.log"
		echo "gpt2-curves: the $r run failed"
		exit 1
	fi
done
echo "accel launch -n 2 -- accel-gpt2 --data GPL-3 bytes --batch-size 12 --steps $STEPS" \
	"--log-every $EVERY --metrics FILE; training loss (mean over the last $EVERY steps):"
python3 - "$tmp" $RUNS <<'PYEOF'
import json, os, socket, sys
d, runs = sys.argv[1], sys.argv[2:]
curves, final = {}, {}
for r in runs:
    curves[r] = {}
    for line in open(os.path.join(d, r + ".jsonl")):
        rec = json.loads(line)
        if "loss" in rec:
            curves[r][rec["step"]] = rec["loss"]
        elif "val_loss" in rec:
            final[r] = rec["val_loss"]
f32 = [r for r in runs if "16" not in r]
half = [r for r in runs if "16" in r]
w = max(9, max(len(r) for r in runs))
print("%6s " % "step" + " ".join("%*s" % (w, r) for r in runs) + "  %9s %9s" % ("spread", "16b-ddp"))
worst = [0.0, 0.0]
def row(label, vals):
    sp = max(vals[r] for r in f32) - min(vals[r] for r in f32)
    hd = max((abs(vals[r] - vals["ddp"]) for r in half), default=0.0) if "ddp" in vals else 0.0
    worst[0], worst[1] = max(worst[0], sp), max(worst[1], hd)
    print("%6s " % label + " ".join("%*.4f" % (w, vals[r]) for r in runs)
          + "  %9.2e %9.2e" % (sp, hd))
for s in sorted(curves[runs[0]]):
    row(str(s), {r: curves[r][s] for r in runs})
row("held", final)
print(json.dumps({"bench": "gpt2-curves", "host": socket.gethostname(), "processes": 2,
                  "runs": runs, "max_spread_f32": worst[0], "max_16bit_vs_ddp": worst[1]}))
PYEOF
