#!/bin/sh
# SPDX-License-Identifier: MIT
# The docs against the tool, on a fresh install (as tests/test-getting-started.sh):
#   - every shell example of the installed docs that shows a command and its
#     output is run and its output compared (tests/doc_examples.py), or says
#     on its fence why it cannot run here;
#   - the version numbers the docs quote are `accel --version`'s;
#   - every relative link of the installed docs resolves inside them;
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
echo PASS
