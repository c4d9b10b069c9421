#!/bin/sh
# SPDX-License-Identifier: MIT
# Trackers and progress through examples/train_mlp (docs/tracking.md):
#  - log_with ["jsonl","csv","tensorboard"] on 2 processes: the main process
#    alone writes logging_dir/metrics.jsonl, metrics.csv and one TensorBoard
#    event file; the event file is read back by tests/tb_read.py (struct and
#    its own CRC-32C, every CRC checked) and by the tensorboard package when
#    it is installed; the three agree on every step and value;
#  - bad log_with / logging_dir: clear errors before training;
#  - progress: through a pipe, plain lines "step N/T  loss ..."; through a
#    pseudo-terminal (python3 pty), a bar redrawn with "\r" that ends at
#    100% on one line.
# Usage: test-trackers.sh TRAIN_MLP PYTHON3
set -eu

T=${1:?usage: test-trackers.sh TRAIN_MLP PYTHON3}
PY=${2:-python3}
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")
: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
command -v "$PY" >/dev/null 2>&1 || { echo "skipped: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-trackers-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG
small="--hidden 16 --samples 256 --batch-size 32 --test-samples 0 --no-eval"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

echo "== three trackers on 2 processes, main process only"
"$ACCEL_CLI" launch -n 2 -- "$T" $small --steps 12 --log-every 4 \
	--set 'log_with=["jsonl","csv","tensorboard"]' --set "logging_dir=$tmp/runs/a" \
	>"$tmp/out" 2>"$tmp/err" || { cat "$tmp/out" "$tmp/err" >&2; fail "the run failed"; }
n=$(ls "$tmp/runs/a" | grep -c '^events\.out\.tfevents\.') || true
[ "$n" -eq 1 ] || { ls -l "$tmp/runs/a" >&2; fail "expected 1 event file (rank 0 only), found $n"; }
ev=$(ls "$tmp/runs/a"/events.out.tfevents.*)
"$PY" "$ACCEL_TEST_SRCDIR/tests/tb_read.py" "$ev" >"$tmp/tb.jsonl" 2>"$tmp/tb.err" ||
	{ cat "$tmp/tb.err" >&2; fail "tb_read.py refused $ev"; }
grep -q '^file_version brain.Event:2$' "$tmp/tb.err" || fail "no file_version event"
"$PY" - "$tmp/runs/a" "$tmp/tb.jsonl" <<'PYEOF'
import csv, json, math, sys
d, tbfile = sys.argv[1], sys.argv[2]
jl = [json.loads(l) for l in open(d + "/metrics.jsonl")]
assert [r["step"] for r in jl] == [4, 8, 12], [r["step"] for r in jl]
rows = list(csv.DictReader(open(d + "/metrics.csv")))
assert [int(r["step"]) for r in rows] == [4, 8, 12], rows
tb = [json.loads(l) for l in open(tbfile)]
assert len(tb) == 3 * 5, tb   # loss, lr, samples_per_s, loss_scale, skipped at 3 steps
for j, c in zip(jl, rows):
    for k in ("loss", "lr", "samples_per_s"):
        assert float(c[k]) == j[k], (k, c[k], j[k])       # %.17g: exact
        t = [e for e in tb if e["step"] == j["step"] and e["tag"] == k]
        assert len(t) == 1, (j["step"], k, t)
        # float32 in the event: within its rounding
        assert math.isclose(t[0]["value"], j[k], rel_tol=1e-6), (k, t[0], j[k])
        assert abs(t[0]["wall_time"] - j["time"]) < 1e-6, (t[0], j["time"])
assert 0 < jl[-1]["loss"] < jl[0]["loss"], "the loss did not fall"
print("ok: jsonl, csv and tensorboard agree on", len(jl), "steps")
PYEOF
set +e
"$PY" "$ACCEL_TEST_SRCDIR/tests/tb_read.py" --tensorboard "$ev" >"$tmp/tb2.jsonl" 2>"$tmp/tb2.err"
rc=$?
set -e
if [ $rc -eq 77 ]; then
	echo "(tensorboard package not installed: its reader not tried)"
elif [ $rc -ne 0 ] || ! cmp -s "$tmp/tb.jsonl" "$tmp/tb2.jsonl"; then
	cat "$tmp/tb2.err" >&2
	diff "$tmp/tb.jsonl" "$tmp/tb2.jsonl" >&2 || true
	fail "the tensorboard package read the file differently"
else
	echo "ok: the tensorboard package reads the same scalars"
fi

echo "== a resumed run continues the CSV and adds an event file"
"$T" $small --steps 4 --log-every 2 --set 'log_with=["csv","tensorboard"]' \
	--set "logging_dir=$tmp/runs/b" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "run b"; }
sleep 1   # event files are named by the second
"$T" $small --steps 4 --log-every 2 --set 'log_with=["csv","tensorboard"]' \
	--set "logging_dir=$tmp/runs/b" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "run b2"; }
[ "$(grep -c '^step,' "$tmp/runs/b/metrics.csv")" -eq 1 ] || fail "two CSV headers"
[ "$(grep -c . "$tmp/runs/b/metrics.csv")" -eq 5 ] || { cat "$tmp/runs/b/metrics.csv" >&2; fail "expected header + 4 rows"; }
[ ! -e "$tmp/runs/b/metrics.jsonl" ] || fail "jsonl written though log_with leaves it out"
[ "$(ls "$tmp/runs/b" | grep -c tfevents)" -eq 2 ] || fail "expected 2 event files"

echo "== bad configurations fail before training"
expect_err() {
	text=$1
	shift
	set +e
	"$T" $small --steps 2 "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	set -e
	[ $rc -ne 0 ] || fail "$*: exited 0"
	grep -q -- "$text" "$tmp/err" || { cat "$tmp/err" >&2; fail "$*: stderr lacks: $text"; }
	! grep -q '^step ' "$tmp/out" || fail "$*: it trained"
}
expect_err "unknown tracker 'wandb'; accel writes jsonl, csv, tensorboard" \
	--set 'log_with=["jsonl","wandb"]'
expect_err "selects csv and tensorboard, which write into a directory: set 'logging_dir'" \
	--set 'log_with=["csv","tensorboard"]'
touch "$tmp/file"
expect_err "logging_dir '$tmp/file/x' (accel_opts.sets logging_dir=$tmp/file/x): cannot create it: Not a directory" \
	--set 'log_with=["csv"]' --set "logging_dir=$tmp/file/x"

echo "== progress through a pipe: plain lines"
"$T" $small --steps 9 --log-every 3 >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "pipe run"; }
grep -E '^step +3/9  loss [0-9.]+  lr [0-9.e-]+  [0-9]+ samples/s  eta [0-9:]+$' "$tmp/out" >/dev/null ||
	{ cat "$tmp/out" >&2; fail "no plain progress line for step 3/9"; }
[ "$(grep -c '^step ' "$tmp/out")" -eq 3 ] || { cat "$tmp/out" >&2; fail "expected 3 progress lines"; }
! grep -q "$(printf '\r')" "$tmp/out" || fail "carriage returns in piped output"

echo "== progress on a terminal: a bar"
"$PY" - "$T" $small --steps 40 --log-every 10 <<'PYEOF'
import os, pty, re, sys
argv = sys.argv[1:]
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm"
    os.environ["COLUMNS"] = "100"
    os.execv(argv[0], argv)
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
text = out.decode("utf-8", "replace")
assert os.WEXITSTATUS(status) == 0, text
assert "\r" in text and "\x1b[K" in text, repr(text[-500:])
frames = [f for f in re.split(r"[\r\n]+", text) if "|" in f and "%" in f]
assert frames, repr(text)
last = frames[-1].replace("\x1b[K", "")
m = re.match(r"^100%\|#+\| 40/40 \[[0-9:]+<00:00, [0-9]+ samples/s, loss ([0-9.]+)\]$", last)
assert m, repr(last)
assert not re.search(r"^step +10/40", text, re.M), "plain lines on a terminal"
# the "trained ..." summary (accel_print) is on its own line, after the bar
lines = text.replace("\r\n", "\n").split("\n")
assert any(l.startswith("trained 40 steps") for l in lines), repr(text[-400:])
print("ok: bar frames", len(frames), "last", last)
PYEOF
echo "all tracker and progress checks passed"
