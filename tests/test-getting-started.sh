#!/bin/sh
# SPDX-License-Identifier: MIT
# docs/getting-started.md, run: install accel into a temporary DESTDIR, then
# run the page's fenced blocks marked "sh test", in order, as one script in
# an empty directory with only the install on PATH.  The page and the test
# cannot drift apart: the commands are read from the page.  Two things stand
# in for an install to the prefix itself: ACCEL_PLUGIN_PATH names the
# DESTDIR's plugin directory (an installed accel looks in the prefix's), and
# pkg-config is relocated to the DESTDIR (as tests/plugin-build.sh does).
set -eu

: "${ACCEL_TEST_BUILDDIR:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
page=$ACCEL_TEST_SRCDIR/docs/getting-started.md

tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-getting-started-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

unset ACCEL_PLUGIN_PATH ACCEL_DEVICE_PATH ACCEL_CONFIG
export HOME="$tmp/home"
mkdir -p "$HOME"

. "$ACCEL_TEST_SRCDIR/tests/plugin-build.sh"
echo "== meson install --destdir $tmp/dest"
pb_install "$tmp/dest"
plugindir=$($PKG_CONFIG --variable=plugindir accel) || fail "pkg-config --variable=plugindir failed"
[ -d "$plugindir" ] || fail "no plugin directory $plugindir"
mkdir "$tmp/shim"
real_pkg_config=$(command -v pkg-config) || fail "pkg-config is not installed"
printf '#!/bin/sh\nexec %s --define-variable=prefix=%s "$@"\n' "$real_pkg_config" "$root" \
	>"$tmp/shim/pkg-config"
chmod +x "$tmp/shim/pkg-config"
export PATH="$root/bin:$tmp/shim:$PATH"
export ACCEL_PLUGIN_PATH="$plugindir"
# the page's installed copy is the one read
[ -f "$root/share/doc/accel/getting-started.md" ] || fail "getting-started.md is not installed"
cmp "$page" "$root/share/doc/accel/getting-started.md" || fail "the installed page differs"

echo "== the page's blocks marked 'sh test'"
awk '
	/^```sh test[ \t]*$/ { inblock = 1; n++; printf "echo \"---- block %d\"\n", n; next }
	/^```/ && inblock { inblock = 0; next }
	inblock { print }
	END { if (inblock) exit 1 }
' "$page" >"$tmp/page.sh" || fail "an unterminated code block in $page"
blocks=$(grep -c '^echo "---- block' "$tmp/page.sh" || true)
[ "$blocks" -ge 5 ] || fail "only $blocks blocks marked 'sh test' in $page"
cat "$tmp/page.sh"
mkdir "$tmp/work"
(cd "$tmp/work" && sh -eu "$tmp/page.sh") >"$tmp/out" 2>&1 || {
	cat "$tmp/out" >&2
	fail "a command of docs/getting-started.md failed (the last block named above)"
}
cat "$tmp/out"

# What the page says the commands print.
for want in "my.json: ok" "ddp.json" \
	"[rank 0] train_mlp: 784-64-64-10, 2 processes, global batch 64, 2048 samples" \
	"[rank 0] step    40/40  loss " \
	"[rank 0] saved checkpoint checkpoints/checkpoint_40" \
	"[rank 0] trained 40 steps (80 global batches)" \
	"[rank 0] saved full.safetensors" \
	"[rank 0] resumed from run2/checkpoint_20 at step 20" \
	"the resumed run ends with the same weights" \
	"which is a file, not a directory"; do
	grep -qF -- "$want" "$tmp/out" || fail "the output lacks '$want'"
done
# the model learns what the page shows (0.99 here; the BLAS and the CPU
# change the last digits, not this)
acc=$(awk '/^\[rank 0\] train loss / { a = $NF } END { print a }' "$tmp/out")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' ||
	fail "training accuracy is '$acc', the page shows 0.99"
for w in checkpoint_20 latest; do
	grep -qx "$w" "$tmp/out" || fail "ls run2 does not show $w"
done
awk '$1 == "ddp" && $5 == "ok"' "$tmp/out" | grep -q . || fail "accel plugins list: ddp is not ok"
awk '$1 == "shm" && $5 == "ok"' "$tmp/out" | grep -q . || fail "accel plugins list: shm is not ok"
echo "PASS"
