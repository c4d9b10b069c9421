#!/bin/sh
# SPDX-License-Identifier: MIT
# Install accel into a temporary DESTDIR, build examples/plugin-skeleton out
# of tree with only the installed accel.pc and headers, install it into the
# plugin directory pkg-config names, and check that the installed `accel`
# lists it and describes its schema.
set -eu

: "${ACCEL_TEST_BUILDDIR:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# Show a file's text in the log, then fail.
fail_with() {
	msg=$1
	shift
	for f in "$@"; do
		echo "---- $f" >&2
		cat "$f" >&2
	done
	fail "$msg"
}

# Only what the install provides: no uninstalled modules, no user config.
unset ACCEL_PLUGIN_PATH ACCEL_CONFIG
export HOME="$tmp/home"
mkdir -p "$HOME"

# Not --no-rebuild: `meson test install` builds only this test's own
# dependencies, and the install needs every installable target.
echo "== meson install --destdir $dest"
meson install -C "$ACCEL_TEST_BUILDDIR" --quiet --destdir "$dest" \
	>"$tmp/install.log" 2>&1 || fail_with "meson install failed" "$tmp/install.log"

pc=$(find "$dest" -path '*/pkgconfig/accel.pc' | head -n 1)
[ -n "$pc" ] || fail "no pkgconfig/accel.pc under $dest"
prefix=$(sed -n 's/^prefix=//p' "$pc")
[ -n "$prefix" ] || fail "$pc has no prefix= line"
root=$dest$prefix
echo "installed prefix: $prefix (under $dest)"

for h in accel/accel.h accel/plugin.h accel/comm.h accel/types.h; do
	[ -f "$root/include/$h" ] || fail "header $h not installed in $root/include"
done
[ -x "$root/bin/accel" ] || fail "accel not installed in $root/bin"

# pkg-config reads the installed accel.pc; --define-variable relocates it
# from its prefix to where DESTDIR put it.
export PKG_CONFIG_PATH="${pc%/*}"
PKG_CONFIG="pkg-config --define-variable=prefix=$root"
plugindir=$($PKG_CONFIG --variable=plugindir accel) || fail "pkg-config --variable=plugindir accel failed"
case "$plugindir" in
"$root"/*/accel/plugins) echo "plugindir: $plugindir" ;;
*) fail "pkg-config plugindir is '$plugindir', expected $root/<libdir>/accel/plugins" ;;
esac
cflags=$($PKG_CONFIG --cflags accel)
case " $cflags " in
*" -I$root/include "*) ;;
*) fail "pkg-config --cflags accel is '$cflags', expected -I$root/include" ;;
esac

echo "== build the skeleton out of tree"
# A copy outside the source tree, so only installed headers can be found.
cp -R "$ACCEL_TEST_SRCDIR/examples/plugin-skeleton" "$tmp/skeleton"
rm -f "$tmp/skeleton/skeleton.so"
make -C "$tmp/skeleton" PKG_CONFIG="$PKG_CONFIG" CFLAGS="-O2 -Werror" \
	>"$tmp/make.log" 2>&1 || fail_with "building the skeleton failed" "$tmp/make.log"
grep -q -- "-I$root/include" "$tmp/make.log" || fail_with "the skeleton was not compiled against $root/include" "$tmp/make.log"
make -C "$tmp/skeleton" PKG_CONFIG="$PKG_CONFIG" install >>"$tmp/make.log" 2>&1 ||
	fail_with "make install of the skeleton failed" "$tmp/make.log"
[ -f "$plugindir/skeleton.so" ] || fail "make install did not put skeleton.so in $plugindir"
exports=$(nm -D --defined-only "$plugindir/skeleton.so" | awk 'NF { print $NF }')
[ "$exports" = accel_plugin_entry_v1 ] || fail "skeleton.so exports '$exports', expected only accel_plugin_entry_v1"

echo "== accel plugins list / info with plugin_dirs pointing at it"
printf '{"plugin_dirs": ["%s"]}\n' "$plugindir" >"$tmp/accel.json"
accel=$root/bin/accel
"$accel" plugins list --config "$tmp/accel.json" >"$tmp/list.out" 2>"$tmp/list.err" ||
	fail_with "accel plugins list failed" "$tmp/list.out" "$tmp/list.err"
cat "$tmp/list.out"
line=$(grep '^skeleton ' "$tmp/list.out") || fail_with "skeleton not listed" "$tmp/list.out"
set -- $line
[ "$2" = 0.1.0 ] || fail "version column is '$2'"
[ "$3" = v1.0 ] || fail "ABI column is '$3'"
[ "$4" = other ] || fail "kind column is '$4'"
[ "$5" = ok ] || fail "status column is '$5'"
[ "$7" = "$plugindir/skeleton.so" ] || fail "path column is '$7'"
grep -q "$plugindir  (plugin_dirs)" "$tmp/list.out" || fail "plugin_dirs directory not listed"

"$accel" plugins info skeleton --config "$tmp/accel.json" >"$tmp/info.out" 2>&1 ||
	fail_with "accel plugins info skeleton failed" "$tmp/info.out"
cat "$tmp/info.out"
for want in 'skeleton 0.1.0: example hook plugin' 'role other' \
	'skeleton.greeting' 'string   default "hello"' \
	'skeleton.log_every' 'int      default 100, 1 .. 1000000' \
	'skeleton.verbose' 'bool     default false' \
	'"plugins": \["skeleton"\]'; do
	grep -q -- "$want" "$tmp/info.out" || fail "info lacks '$want'"
done

# Without plugin_dirs it is not found, and the error says where it looked.
if "$accel" plugins info skeleton >"$tmp/nf.out" 2>&1; then
	fail_with "info without plugin_dirs should fail" "$tmp/nf.out"
fi
grep -q "no plugin or comm backend named 'skeleton'" "$tmp/nf.out" ||
	fail_with "unexpected not-found message" "$tmp/nf.out"
echo "PASS"
