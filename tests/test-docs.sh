#!/bin/sh
# SPDX-License-Identifier: MIT
# The docs against the tool, on a fresh install (as tests/test-getting-started.sh):
#   - every shell example of the installed docs that shows a command and its
#     output is run and its output compared (tests/doc_examples.py), or says
#     on its fence why it cannot run here;
#   - the version numbers the docs quote are `accel --version`'s;
#   - every relative link of the installed docs resolves inside them;
#   - every command `accel --help` lists (and each subcommand its own --help
#     lists) answers --help, -h and `accel help` as docs/cli.md says, and has
#     its "## accel COMMAND" section there;
#   - every ```json block of the installed docs validates as a config, and
#     every example config the installed configs/README.md names is
#     installed and validates;
#   - the installed reduce-hook example builds from the installed headers
#     alone and trains like no hook at all.
# Exit 77 only when python3 is missing.
set -eu

: "${ACCEL_TEST_BUILDDIR:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
PY=${ACCEL_TEST_PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "skipped: no python3"; exit 77; }
check=$ACCEL_TEST_SRCDIR/tests/doc_examples.py

tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-docs-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

unset ACCEL_PLUGIN_PATH ACCEL_DEVICE_PATH ACCEL_CONFIG ACCEL_SET
export HOME="$tmp/home"
mkdir -p "$HOME"

. "$ACCEL_TEST_SRCDIR/tests/plugin-build.sh"
echo "== meson install --destdir $tmp/dest"
pb_install "$tmp/dest"
plugindir=$($PKG_CONFIG --variable=plugindir accel) || fail "pkg-config --variable=plugindir failed"
docdir=$root/share/doc/accel
[ -f "$docdir/cli.md" ] || fail "the docs are not installed in $docdir"
export PATH="$root/bin:$PATH"
export ACCEL_PLUGIN_PATH="$plugindir"

echo "== versions"
version=$(accel --version) || fail "accel --version failed"
"$PY" "$check" versions "$docdir" "$version"

echo "== links"
"$PY" "$check" links "$docdir"

echo "== the reduce-hook example, built from the installed headers"
ex=$root/share/accel/examples
[ -f "$ex/reduce-hook/mean_hook.c" ] || fail "examples/reduce-hook is not installed in $ex"
cp -R "$ex/reduce-hook" "$tmp/hook"
make -C "$tmp/hook" PKG_CONFIG="$PKG_CONFIG" CFLAGS="-O2 -Werror" >"$tmp/make.log" 2>&1 ||
	pb_fail "building the reduce-hook example failed" "$tmp/make.log"
grep -q -- "-I$root/include" "$tmp/make.log" ||
	pb_fail "mean_hook was not compiled against $root/include" "$tmp/make.log"
exports=$(nm -D --defined-only "$tmp/hook/mean_hook.so" | awk 'NF { print $NF }')
[ "$exports" = accel_plugin_entry_v1 ] || fail "mean_hook.so exports '$exports'"
accel plugins info mean-hook --plugin-dir "$tmp/hook" >"$tmp/info.out" 2>&1 ||
	pb_fail "accel plugins info mean-hook failed" "$tmp/info.out"
grep -q '^  status: *ok$' "$tmp/info.out" || pb_fail "mean-hook is not ok" "$tmp/info.out"
grep -q 'kind: *plugin, role reduce_hook' "$tmp/info.out" ||
	pb_fail "mean-hook is not a reduce hook" "$tmp/info.out"
# 2 ranks (1/2 is exact): with the hook, the losses are those without it
mkdir "$tmp/train"
for run in plain hook; do
	set -- --set seed=3
	[ $run = plain ] || set -- "$@" --set 'plugins=["mean-hook"]' --set "plugin_dirs=[\"$tmp/hook\"]"
	(cd "$tmp/train" && accel launch -n 2 "$@" -- accel-train-mlp --steps 12 --log-every 4) \
		>"$tmp/$run.out" 2>&1 || pb_fail "training ($run) failed" "$tmp/$run.out"
	grep '^\[rank 0\] step ' "$tmp/$run.out" | sed 's/  lr .*//' >"$tmp/$run.loss"
	[ "$(wc -l <"$tmp/$run.loss")" -ge 3 ] || pb_fail "no loss lines ($run)" "$tmp/$run.out"
done
cmp -s "$tmp/plain.loss" "$tmp/hook.loss" ||
	pb_fail "the mean-hook run's losses differ from the run without a hook" "$tmp/plain.loss" \
		"$tmp/hook.loss"
cat "$tmp/hook.loss"

echo "== --help of every command (docs/cli.md: usage on stdout, status 0)"
# help_ok WORDS...: `accel WORDS --help` and `-h` print a usage on stdout,
# nothing on stderr, and exit 0
help_ok() {
	for h in --help -h; do
		accel "$@" $h >"$tmp/help.out" 2>"$tmp/help.err" ||
			pb_fail "accel $* $h exited $?" "$tmp/help.out" "$tmp/help.err"
		head -n 1 "$tmp/help.out" | grep -q '^Usage: accel ' ||
			pb_fail "accel $* $h does not start with 'Usage: accel '" "$tmp/help.out"
		[ ! -s "$tmp/help.err" ] || pb_fail "accel $* $h wrote on stderr" "$tmp/help.err"
	done
}
# the command words of a "Commands:" section (continuation lines are indented deeper)
list_commands() {
	sed -n '/^Commands:/,/^$/p' "$1" | awk '/^  [a-z]/ { print $1 }'
}
accel --help >"$tmp/top.out" || fail "accel --help failed"
cmds=$(list_commands "$tmp/top.out")
[ "$(echo "$cmds" | wc -w)" -ge 8 ] || pb_fail "accel --help lists too few commands" "$tmp/top.out"
n_help=0
for c in $cmds; do
	help_ok "$c"
	n_help=$((n_help + 1))
	accel "$c" --help >"$tmp/c.out"
	accel help "$c" >"$tmp/h.out" || fail "accel help $c failed"
	cmp -s "$tmp/c.out" "$tmp/h.out" || fail "accel help $c differs from accel $c --help"
	grep -q "^## accel $c\$" "$docdir/cli.md" || fail "cli.md has no section '## accel $c'"
	for s in $(list_commands "$tmp/c.out"); do
		help_ok "$c" "$s"
		n_help=$((n_help + 1))
	done
done
# the forms docs/cli.md shows that no "Commands:" section lists
for sub in "plugins list" "plugins info" "checkpoint show"; do
	help_ok $sub
	n_help=$((n_help + 1))
done
echo "$n_help commands answer --help and -h"

echo "== the example configs, installed"
cfgdir=$root/share/accel/examples/configs
named=$(grep -o '^| `[^`]*\.json`' "$cfgdir/README.md" | tr -d '|` ')
[ "$(echo "$named" | wc -w)" -ge 3 ] || fail "$cfgdir/README.md names too few configs"
for f in $named; do
	[ -f "$cfgdir/$f" ] || fail "configs/README.md names $f, which is not installed in $cfgdir"
done
for f in "$cfgdir"/*.json; do
	out=$(accel config validate --no-env "$f" 2>/dev/null) || fail "$f does not validate: $out"
	[ "$out" = "$f: ok" ] || fail "accel config validate $f printed '$out'"
done
echo "$(echo "$named" | wc -w) configs named, installed and valid"

echo "== the shell examples of the installed docs"
# a working directory with what the examples name: the example configs and
# the plugin skeleton's localsgd.so (built from the installed headers)
pb_build "$tmp/work"
mkdir -p "$tmp/work/examples"
cp -R "$ACCEL_TEST_SRCDIR/examples/configs" "$tmp/work/examples/configs"
# the install in $tmp/dest reads as the install the docs show
"$PY" "$check" examples "$docdir" "$tmp/work" \
	"$plugindir=>/usr/local/lib/x86_64-linux-gnu/accel/plugins" \
	"(ACCEL_PLUGIN_PATH)=>(install)" "$tmp/work=>/home/me/src/localsgd" "$tmp/dest=>"
echo "== the json blocks of the installed docs, as configs"
"$PY" "$check" configs "$docdir" "$tmp/work" "$tmp/work=>/home/me/src/localsgd"
echo PASS
