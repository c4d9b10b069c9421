#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/train_mlp and the accel tool on bad input: usage errors exit 2
# before any work (output paths, batches, option values), FIFOs do not
# hang, output that cannot be written is a failure, and the configuration's
# metrics_file receives the progress.  Usage: test-train-mlp-cli.sh TRAIN_MLP
set -eu

T=${1:?usage: test-train-mlp-cli.sh TRAIN_MLP}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")   # the tests below change directory
: "${ACCEL_CLI:?not set (run through meson test)}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-mlp-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
small="--hidden 16 --steps 3 --samples 64 --batch-size 16 --no-eval"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# expect STATUS TEXT CMD...: exit status STATUS within 20 s, TEXT on stderr
expect() {
	want=$1 text=$2
	shift 2
	set +e
	timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	set -e
	[ "$got" -eq "$want" ] || { cat "$tmp/err" >&2; fail "$* exited $got, expected $want"; }
	[ -z "$text" ] || grep -q -- "$text" "$tmp/err" || { cat "$tmp/err" >&2; fail "$*: stderr lacks: $text"; }
}

echo "== output paths are checked before training"
expect 2 "--save-final $tmp: it exists and is not a regular file" $T $small --save-final "$tmp"
expect 2 "cannot write in $tmp/missing" $T $small --save-final "$tmp/missing/w.safetensors"
touch "$tmp/file"
expect 2 "--save-init $tmp/file: it exists and is not a directory" $T $small --save-init "$tmp/file"
expect 2 "--save-final needs a path, not the option '--json'" $T $small --save-final --json
expect 2 "--save-final-ranks needs a path, not the option '--json'" $T $small --save-final-ranks --json
expect 2 "cannot write in $tmp/missing" $T $small --save-final-ranks "$tmp/missing/w"
[ ! -e "$tmp/--json" ] || fail "a file named --json was written"
expect 2 "--set needs KEY=VALUE, got 'seed'" $T $small --set seed
expect 2 "--legacy-stream picks the CUDA stream of --device cuda" $T $small --legacy-stream

echo "== every process gets a batch on every step"
expect 2 "no batch to train on: 40 samples, global batch 100" \
	$T --hidden 16 --steps 3 --samples 40 --batch-size 100 --no-eval --set dataloader.drop_last=true
# (under accel launch: the launcher exits 1 and names the rank's exit code 2)
expect 1 "dataloader.even_batches=false needs dataloader.drop_last=true" \
	"$ACCEL_CLI" launch -n 2 -- $T $small --set dataloader.even_batches=false
grep -q "failed: exit code 2" "$tmp/err" || fail "even_batches: the rank did not exit 2"
expect 1 "not a multiple of the 2 processes" "$ACCEL_CLI" launch -n 2 -- $T $small --batch-size 33
grep -q "failed: exit code 2" "$tmp/err" || fail "batch size: the rank did not exit 2"

echo "== under accel launch every rank says why it stops, and the summary shows the reason"
expect 1 "" "$ACCEL_CLI" launch -n 2 -- $T $small --save-final "$tmp/missing/w.safetensors"
reason="train_mlp: --save-final $tmp/missing/w.safetensors: cannot write in $tmp/missing"
grep -qxF "[rank 0] $reason: No such file or directory" "$tmp/err" ||
	{ cat "$tmp/err" >&2; fail "rank 0's reason is not printed"; }
grep -qxF "[rank 1] train_mlp: rank 1: stopping: rank 0 refused an output path (its message above says why)" \
	"$tmp/err" || { cat "$tmp/err" >&2; fail "rank 1 stops without a word"; }
grep -q "printed nothing" "$tmp/err" && { cat "$tmp/err" >&2; fail "a rank printed nothing"; }
# whichever rank the launcher saw fail first, its summary holds rank 0's line
sed -n '/^accel launch: last /,$p' "$tmp/err" | grep -qxF "  [rank 0] $reason: No such file or directory" ||
	{ cat "$tmp/err" >&2; fail "the launcher's summary lacks rank 0's reason"; }

echo "== FIFOs do not hang"
mkfifo "$tmp/fifo"
expect 1 "invalid JSON" $T $small --config "$tmp/fifo"
expect 1 "it is a FIFO that no process reads" $T $small --metrics "$tmp/fifo"
expect 0 "" "$ACCEL_CLI" env --config "$tmp/fifo"

echo "== output that cannot be written is a failure"
if [ -w /dev/full ]; then
	timeout 20 $T $small --json >/dev/full 2>"$tmp/err" && fail "train_mlp --json >/dev/full exited 0"
	grep -q "writing the output failed" "$tmp/err" || fail "train_mlp: no message for /dev/full"
	timeout 20 "$ACCEL_CLI" env >/dev/full 2>"$tmp/err" && fail "accel env >/dev/full exited 0"
	grep -q "writing the output failed" "$tmp/err" || fail "accel env: no message for /dev/full"
fi

echo "== the configuration's metrics_file gets the progress"
expect 0 "" $T --hidden 16 --steps 6 --samples 64 --batch-size 16 --no-eval --log-every 2 \
	--set metrics_file="$tmp/m.jsonl"
[ "$(wc -l <"$tmp/m.jsonl")" -eq 3 ] || { cat "$tmp/m.jsonl" >&2; fail "metrics_file: expected 3 lines"; }
grep -q '"loss":' "$tmp/m.jsonl" || fail "metrics_file: no loss"

echo "== --save-init's directory may hold the other outputs, however it is spelled"
( cd "$tmp" && expect 0 "" $T $small --save-init ./run1/ --save-final run1//final.safetensors \
	--metrics run1/m.jsonl )
[ -f "$tmp/run1/final.safetensors" ] && [ -f "$tmp/run1/init.safetensors" ] &&
	[ -f "$tmp/run1/m.jsonl" ] || fail "run1: outputs missing"

echo "== --save-final keeps the mode of a file it replaces; a new one follows the umask"
: >"$tmp/kept.safetensors"
chmod 640 "$tmp/kept.safetensors"
expect 0 "" $T $small --save-final "$tmp/kept.safetensors"
[ "$(stat -c %a "$tmp/kept.safetensors")" = 640 ] ||
	fail "replaced file: mode $(stat -c %a "$tmp/kept.safetensors"), expected 640"
( umask 027 && expect 0 "" $T $small --save-final "$tmp/new.safetensors" )
[ "$(stat -c %a "$tmp/new.safetensors")" = 640 ] ||
	fail "new file under umask 027: mode $(stat -c %a "$tmp/new.safetensors"), expected 640"

echo "== a bad output path stops every process at once (rank 0 checks, all agree)"
expect 1 "metrics_file $tmp/missing/m.jsonl: cannot write in $tmp/missing" \
	"$ACCEL_CLI" launch -n 2 -- $T $small --set metrics_file="$tmp/missing/m.jsonl"
grep -q "rank [01] failed: exit code 2" "$tmp/err" || fail "metrics_file: the ranks did not exit 2"
if grep -q "rank 1.*ACCEL_ERR_PEER\|rank 0 never arrived" "$tmp/err"; then
	cat "$tmp/err" >&2
	fail "rank 1 waited for rank 0 in a collective"
fi

echo "== the accel tool's own arguments"
expect 2 "--version takes no arguments" "$ACCEL_CLI" --version foo
expect 2 "unknown option '--bogus'" "$ACCEL_CLI" --bogus
expect 2 "unknown option '-x'" "$ACCEL_CLI" env -xh
timeout 20 "$ACCEL_CLI" help env | grep -q "^Usage: accel env" || fail "accel help env"
expect 2 "help takes one COMMAND" "$ACCEL_CLI" help env extra
expect 2 "unknown option '--json=1'" "$ACCEL_CLI" plugins --json=1
echo PASS
