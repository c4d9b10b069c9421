#!/bin/sh
# SPDX-License-Identifier: MIT
# `accel plugins` and `accel env` against the loader fixtures: every status
# and reason in the table and in --json, info with a schema, and the exit
# status convention (0 ok, 1 not found / not usable, 2 bad usage).
set -eu

: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_BUILDDIR:?not set (run through meson test)}"
fx=$ACCEL_TEST_BUILDDIR/tests/fixtures
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_PLUGIN_PATH ACCEL_CONFIG
export HOME="$tmp"
cd "$tmp"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# run EXPECTED_STATUS ARGS...: output in $tmp/out (stdout) and $tmp/err.
run() {
	want=$1
	shift
	set +e
	"$ACCEL_CLI" "$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	set -e
	if [ "$got" -ne "$want" ]; then
		echo "---- stdout" >&2
		cat "$tmp/out" >&2
		echo "---- stderr" >&2
		cat "$tmp/err" >&2
		fail "accel $* exited $got, expected $want"
	fi
}

has() {
	grep -q -- "$2" "$1" || {
		cat "$1" >&2
		fail "$1 lacks: $2"
	}
}

# The ABI version the fixtures and plugins are built with (abi/accel/types.h).
. "$ACCEL_TEST_SRCDIR/tests/abi-version.sh"

# Whether this machine offers CUDA to plugins, as accel itself decides it
# (the same probe a context uses): the needs-cuda fixture (min_cuda_cc 80)
# is ok where a GPU of compute capability >= 8.0 answers, else unavailable.
run 0 env
cuda_line=$(grep '^- plugins that need CUDA: ' "$tmp/out") || { cat "$tmp/out" >&2; fail "accel env does not say whether plugins that need CUDA are usable"; }
case "$cuda_line" in
"- plugins that need CUDA: usable here (best compute capability "*")")
	cc=${cuda_line##*capability }
	cc=${cc%)}
	cc_x10=$(echo "$cc" | awk -F. '{ print $1 * 10 + $2 }')
	if [ "$cc_x10" -ge 80 ]; then
		needs_cuda=ok
		needs_cuda_why=
	else
		needs_cuda=unavailable
		needs_cuda_why="plugin 'needs-cuda' needs a GPU of compute capability >= 8.0 (best here: $cc)"
	fi ;;
"- plugins that need CUDA: unavailable here ("*")")
	needs_cuda=unavailable
	needs_cuda_why="plugin 'needs-cuda' needs CUDA (no CUDA device module or no GPU)" ;;
*) fail "unexpected line: $cuda_line" ;;
esac
echo "needs-cuda is expected to be $needs_cuda here ($cuda_line)"
if [ "$needs_cuda" = ok ]; then n_ok=12 n_unavail=0; else n_ok=11 n_unavail=1; fi

echo "== plugins list"
run 0 plugins list --plugin-dir "$fx"
# NAME VERSION ABI KIND STATUS REQUIRES PATH, one row per file.
row() {
	awk -v p="$fx/$1" '$NF == p { print $1, $2, $3, $4, $5 }' "$tmp/out"
}
for spec in \
	"good.so|good 1.2.3 $ABI strategy ok" \
	"comm-good.so|fx_comm 0.0.1 $ABI comm ok" \
	"dup-a.so|dup 1.2.3 $ABI strategy ok" \
	"dup-b.so|dup 1.2.3 $ABI strategy shadowed" \
	"needs-cuda.so|needs-cuda 1.2.3 $ABI other $needs_cuda" \
	"short-hook.so|short-hook 1.2.3 $ABI other ok" \
	"needs-mpi.so|needs-mpi 1.2.3 $ABI other ok" \
	"comm-mpi.so|mpi 0.0.1 $ABI comm ok" \
	"abi-v9.so|- - v9 - broken" \
	"not-elf.so|- - - - broken" \
	"truncated.so|- - - - broken" \
	"no-entry.so|- - - - broken" \
	"null-slot.so|null-slot 1.2.3 v1 strategy broken" \
	"other-major.so|- - v2 - broken" \
	"abi-newer.so|abi-newer 1.2.3 v1 strategy broken" \
	"abi-newer-declared.so|abi-newer-declared 1.2.3 v1.42 strategy ok" \
	"min-host-unmet.so|min-host-unmet 1.2.3 v1 strategy broken"; do
	file=${spec%%|*}
	want=${spec#*|}
	got=$(row "$file")
	[ "$got" = "$want" ] || { cat "$tmp/out" >&2; fail "row of $file is '$got', expected '$want'"; }
done
has "$tmp/out" "^30 found: $n_ok ok, $n_unavail unavailable, 17 broken, 1 shadowed\.$"

has "$tmp/out" "^  $fx/not-elf.so: not an ELF shared object"
has "$tmp/out" "^  $fx/abi-v9.so: built for plugin ABI v9; this accel supports v1$"
has "$tmp/out" "^  $fx/abi-newer.so: plugin 'abi-newer' was built against ABI 1\.42; this accel is ${ABI#v}: upgrade accel or rebuild the plugin against its headers (or declare min_host_minor in its descriptor)$"
has "$tmp/out" "^  $fx/min-host-unmet.so: plugin 'min-host-unmet' needs accel ABI 1\.41 or newer (min_host_minor); this accel is ${ABI#v}: upgrade accel$"
has "$tmp/out" "^  $fx/other-major.so: accel_plugin_entry_v1 returned NULL: the plugin was built against accel headers of ABI major 2 "
if [ "$needs_cuda" = ok ]; then
	! grep -q "needs-cuda.so:" "$tmp/out" || fail "needs-cuda is listed as not usable"
else
	has "$tmp/out" "^  $fx/needs-cuda.so: $needs_cuda_why$"
fi
has "$tmp/out" "^  $fx/dup-b.so: plugin 'dup' is also provided by $fx/dup-a.so"
has "$tmp/out" "^  1\. $fx  (--plugin-dir)$"
has "$tmp/out" "(install"

echo "== plugins list --json"
run 0 plugins list --plugin-dir "$fx" --json
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
"$PY" - "$tmp/out" "$fx" "$needs_cuda" "$needs_cuda_why" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
fx, needs_cuda, needs_cuda_why = sys.argv[2], sys.argv[3], sys.argv[4] or None
mods = {m["path"].rsplit("/", 1)[1]: m for m in doc["modules"]}
assert doc["abi_major"] == 1, doc["abi_major"]
assert doc["directories"][0] == {"path": fx, "origin": "--plugin-dir", "exists": True}, doc["directories"][0]
g = mods["good.so"]
assert (g["name"], g["status"], g["kind"], g["role"], g["version"]) == ("good", "ok", "plugin", "strategy", "1.2.3"), g
assert g["reason"] is None and g["caps"] == ["cpu"] and g["requires"] == [], g
n = mods["needs-cuda.so"]
assert n["status"] == needs_cuda and n["requires"] == ["cuda"] and n["min_cuda_cc"] == 80, n
assert n["reason"] == needs_cuda_why, n["reason"]
b = mods["small-struct.so"]
assert b["status"] == "broken" and b["name"] == "small-struct" and b["reason"].startswith("struct_size too small"), b
c = mods["comm-good.so"]
assert c["kind"] == "comm" and c["devices"] == ["cpu"], c
assert len(mods) == 30, sorted(mods)
PYEOF

echo "== the same name in two directories: the earlier wins, the later is shadowed"
mkdir "$tmp/over"
cp "$fx/good.so" "$tmp/over/good.so"
run 0 plugins list --plugin-dir "$tmp/over" --plugin-dir "$fx"
[ "$(awk -v p="$tmp/over/good.so" '$NF == p { print $1, $5 }' "$tmp/out")" = "good ok" ] ||
	{ cat "$tmp/out" >&2; fail "the copy in the first directory is not the one used"; }
[ "$(row good.so)" = "good 1.2.3 $ABI strategy shadowed" ] ||
	{ cat "$tmp/out" >&2; fail "row of good.so is '$(row good.so)'"; }
has "$tmp/out" "^Shadowed (the file of that name earlier in the search order is used):$"
has "$tmp/out" "^  $fx/good.so: plugin 'good' is shadowed by $tmp/over/good.so, which comes earlier in the search order$"
has "$tmp/out" "^31 found: $n_ok ok, $n_unavail unavailable, 17 broken, 2 shadowed\.$"
# the one-line notice, on stderr
[ "$(grep -c "is shadowed by" "$tmp/err")" = 1 ] || { cat "$tmp/err" >&2; fail "expected one notice"; }
has "$tmp/err" "^\[accel\] info: $fx/good.so: plugin 'good' is shadowed by $tmp/over/good.so, which comes earlier in the search order$"
run 0 plugins info good --plugin-dir "$tmp/over" --plugin-dir "$fx"
has "$tmp/out" "file: *$tmp/over/good.so  (--plugin-dir)$"
run 0 plugins list --plugin-dir "$tmp/over" --plugin-dir "$fx" --json
"$PY" - "$tmp/out" "$fx" "$tmp/over" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
fx, over = sys.argv[2], sys.argv[3]
mods = {m["path"]: m for m in doc["modules"]}
w, s = mods[over + "/good.so"], mods[fx + "/good.so"]
assert (w["status"], w["shadowed_by"]) == ("ok", None), w
assert (s["status"], s["shadowed_by"]) == ("shadowed", over + "/good.so"), s
d = mods[fx + "/dup-b.so"]
assert (d["status"], d["shadowed_by"]) == ("shadowed", fx + "/dup-a.so"), d
PYEOF
# The same name twice in one directory stays an error.
mkdir "$tmp/twice"
cp "$fx/good.so" "$tmp/twice/a.so"
cp "$fx/good.so" "$tmp/twice/b.so"
run 1 plugins info good --plugin-dir "$tmp/twice"
has "$tmp/err" "two plugins are named 'good': $tmp/twice/a.so and $tmp/twice/b.so, in one directory; remove or rename one"

echo "== plugins info"
run 0 plugins info good --plugin-dir "$fx"
has "$tmp/out" "^good 1.2.3: test fixture good$"
has "$tmp/out" "kind: *plugin, role strategy"
has "$tmp/out" "select with: *\"strategy\": \"good\""
has "$tmp/out" "good.bucket_cap_mb  *int  *default 25, 1 \.\. 4096$"
has "$tmp/out" "good.offload.device  *enum  *default \"none\", one of none|cpu|nvme$"
has "$tmp/out" "good.no_default  *int  *default (none)$"
has "$tmp/out" "Bucket size in MiB\.$"
run 0 plugins info good --plugin-dir "$fx" --json
"$PY" - "$tmp/out" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["select"] == {"strategy": "good"}, m["select"]
p = {x["key"]: x for x in m["parameters"]}
assert p["bucket_cap_mb"] == {"key": "bucket_cap_mb", "path": "good.bucket_cap_mb", "type": "int",
                              "default": 25, "min": 1, "max": 4096, "help": "Bucket size in MiB."}, p["bucket_cap_mb"]
assert p["offload.device"]["choices"] == ["none", "cpu", "nvme"], p["offload.device"]
assert p["names"]["default"] == ["a", "b"] and p["no_default"]["default"] is None, p
PYEOF
# Unavailable modules are still described.
run 0 plugins info needs-cuda --plugin-dir "$fx"
if [ "$needs_cuda" = ok ]; then
	has "$tmp/out" "status: *ok$"
else
	has "$tmp/out" "status: *unavailable: $needs_cuda_why$"
fi
has "$tmp/out" "requires: *CUDA (cc >= 8.0)"

echo "== exit status 1: not found, duplicate, broken, bad config"
run 1 plugins info goood --plugin-dir "$fx"
has "$tmp/err" "no plugin or comm backend named 'goood' in $fx (--plugin-dir), .* did you mean 'good'?"
run 1 plugins info dup --plugin-dir "$fx"
has "$tmp/err" "two plugins are named 'dup': $fx/dup-a.so and $fx/dup-b.so"
run 1 plugins info null-slot --plugin-dir "$fx"
has "$tmp/err" "required slot step is NULL"
printf '{"plugin_dirs": "not a list"}\n' >"$tmp/bad.json"
run 1 plugins list --config "$tmp/bad.json"
has "$tmp/err" "plugin_dirs.* must be a list of directory names"
printf '{"plugin_dirs": ["%s"]}\n' "$fx" >"$tmp/good.json"
run 0 plugins list --config "$tmp/good.json"
has "$tmp/out" "^  1\. $fx  (plugin_dirs)$"
has "$tmp/out" "^Config file: $tmp/good.json$"

echo "== exit status 2: bad usage; --help"
run 2 plugins frob
has "$tmp/err" "unknown subcommand 'frob'"
has "$tmp/err" "Try 'accel plugins --help'"
run 2 plugins info
run 2 plugins info a b
run 2 plugins list extra
run 2 plugins --bogus
run 2 plugins --plugin-dir
run 0 plugins --help
has "$tmp/out" "^Usage: accel plugins \[list\]"
run 0 plugins info --help
run 2 env --bogus
run 2 env extra
run 0 env --help
has "$tmp/out" "^Usage: accel env"
run 2
has "$tmp/err" "^accel: no command given$"
has "$tmp/err" "^Usage: accel "
run 2 frob
has "$tmp/err" "^accel: unknown command 'frob'$"
has "$tmp/err" "Try 'accel --help'"

echo "== env"
ACCEL_LOG_LEVEL=warn NCCL_DEBUG=INFO run 0 env --plugin-dir "$fx"
for want in "^## accel$" "^- accel: [0-9.]* (plugin ABI ${ABI#v})$" "^- compiler: " "^- jansson: " \
	"^- build features: CUDA \(yes\|no\), NCCL \(yes\|no\)" "^- CUDA driver: " "^- CUDA runtime: " \
	"^- GPUs: " "^- NCCL: " "^- MPI library: " "^- OS: .*; kernel " "^- CPU: .*cores online" \
	"^- memory: [0-9.]* GiB$" "^  1\. \`$fx\` (--plugin-dir)$" "^- modules found: 30$" \
	"^| good | 1\.2\.3 | strategy | ok | \`$fx/good.so\` |$" \
	"^| bad-schema | 1\.2\.3 | strategy | broken: schema entry 0 ('bad_schema\.steps', int)" \
	"^ACCEL_LOG_LEVEL=warn$" "^NCCL_DEBUG=INFO$"; do
	has "$tmp/out" "$want"
done
# A broken config is reported, not fatal.
ACCEL_CONFIG="$tmp/missing.json" run 0 env
has "$tmp/out" "^- config problem (its plugin_dirs are not searched): cannot open config file"

echo "== an unbounded range, as text and as JSON (null, not a wrapped integer)"
run 0 plugins info section-clash --plugin-dir "$fx"
has "$tmp/out" "good\.steps  *int  *default 1, >= 0$"
run 0 plugins info section-clash --plugin-dir "$fx" --json
/usr/bin/python3 - "$tmp/out" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
p = [q for q in m["parameters"] if q["key"] == "steps"][0]
assert p["min"] == 0 and p["max"] is None, p
PY
echo "== config validate: a selected broken plugin says why (not 'unknown key' for its section)"
printf '{"plugin_dirs": ["%s/override"], "strategy": "good", "good": {"ratio": 0.25}}\n' "$fx" \
	>"$tmp/broken.json"
run 1 config validate "$tmp/broken.json"
has "$tmp/err" "plugin 'good' cannot be used: .*override/good\.so: .*required slot step is NULL"
echo "== config validate: a bad key is reported also when a selected plugin is missing"
# a directory with the good fixture alone: the comm fixtures beside it
# declare sections of their own, active under backend auto
mkdir -p "$tmp/only-good"
ln -s "$fx/good.so" "$tmp/only-good/good.so"
fx=$tmp/only-good
printf '{"plugin_dirs": ["%s"], "strategy": "ddp", "seeed": 1}\n' "$fx" >"$tmp/two.json"
run 1 config validate "$tmp/two.json"
has "$tmp/err" "^$tmp/two.json: error: unknown key 'seeed' at $tmp/two.json:1:[0-9]*; did you mean 'seed'?$"
has "$tmp/err" "^$tmp/two.json: error: no plugin named 'ddp' in $fx (plugin_dirs), .*(available: .*good.*)"
[ "$(grep -c ': error: ' "$tmp/err")" = 2 ] || { cat "$tmp/err" >&2; fail "expected two errors"; }
[ ! -s "$tmp/out" ] || { cat "$tmp/out" >&2; fail "an invalid file printed 'ok'"; }
# each problem alone, and a valid file
printf '{"plugin_dirs": ["%s"], "strategy": "good", "seeed": 1}\n' "$fx" >"$tmp/key.json"
printf '{"plugin_dirs": ["%s"], "strategy": "ddp"}\n' "$fx" >"$tmp/plugin.json"
printf '{"plugin_dirs": ["%s"], "strategy": "good", "seed": 1}\n' "$fx" >"$tmp/fine.json"
run 1 config validate "$tmp/key.json" "$tmp/plugin.json" "$tmp/fine.json"
[ "$(grep -c ': error: ' "$tmp/err")" = 2 ] || { cat "$tmp/err" >&2; fail "expected two errors"; }
has "$tmp/err" "^$tmp/key.json: error: unknown key 'seeed'"
has "$tmp/err" "^$tmp/plugin.json: error: no plugin named 'ddp'"
[ "$(cat "$tmp/out")" = "$tmp/fine.json: ok" ] || { cat "$tmp/out" >&2; fail "fine.json is not ok"; }
echo PASS
