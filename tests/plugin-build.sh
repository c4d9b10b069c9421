# SPDX-License-Identifier: MIT
# Sourced by tests/test-install.sh and tests/test-localsgd.sh: install accel
# into a DESTDIR and build examples/plugin-skeleton (the localsgd strategy)
# out of tree from a copy, with nothing but the installed accel.pc and
# headers.  The caller sets ACCEL_TEST_BUILDDIR, ACCEL_TEST_SRCDIR and tmp.

pb_fail() {
	echo "FAIL: $1" >&2
	shift
	for f in "$@"; do
		echo "---- $f" >&2
		cat "$f" >&2
	done
	exit 1
}

# pb_install DEST [MESON_INSTALL_ARGS...]: `meson install --destdir DEST`,
# then point pkg-config at the installed accel.pc.  Sets root (DEST plus the
# prefix), PKG_CONFIG (relocating the .pc's prefix to root) and exports
# PKG_CONFIG_PATH.
pb_install() {
	pb_dest=$1
	shift
	meson install -C "$ACCEL_TEST_BUILDDIR" --quiet --destdir "$pb_dest" "$@" \
		>"$tmp/install.log" 2>&1 || pb_fail "meson install failed" "$tmp/install.log"
	pb_pc=$(find "$pb_dest" -path '*/pkgconfig/accel.pc' | head -n 1)
	[ -n "$pb_pc" ] || pb_fail "no pkgconfig/accel.pc under $pb_dest"
	pb_prefix=$(sed -n 's/^prefix=//p' "$pb_pc")
	[ -n "$pb_prefix" ] || pb_fail "$pb_pc has no prefix= line"
	root=$pb_dest$pb_prefix
	for h in accel/plugin.h accel/comm.h accel/types.h; do
		[ -f "$root/include/$h" ] || pb_fail "header $h not installed in $root/include"
	done
	# --define-variable relocates the .pc from its prefix to where DESTDIR
	# put it.
	export PKG_CONFIG_PATH="${pb_pc%/*}"
	PKG_CONFIG="pkg-config --define-variable=prefix=$root"
}

# pb_build DIR: copy examples/plugin-skeleton to DIR (outside the source
# tree, so only installed headers can be found), build localsgd.so there
# with its Makefile and -Werror, and check that it was compiled against
# $root/include and exports exactly the entry symbol.
pb_build() {
	pb_dir=$1
	rm -rf "$pb_dir"
	cp -R "$ACCEL_TEST_SRCDIR/examples/plugin-skeleton" "$pb_dir"
	rm -f "$pb_dir/localsgd.so"
	make -C "$pb_dir" PKG_CONFIG="$PKG_CONFIG" CFLAGS="-O2 -Werror" \
		>"$tmp/make.log" 2>&1 || pb_fail "building the localsgd plugin failed" "$tmp/make.log"
	grep -q -- "-I$root/include" "$tmp/make.log" ||
		pb_fail "localsgd was not compiled against $root/include" "$tmp/make.log"
	pb_exports=$(nm -D --defined-only "$pb_dir/localsgd.so" | awk 'NF { print $NF }')
	[ "$pb_exports" = accel_plugin_entry_v1 ] ||
		pb_fail "localsgd.so exports '$pb_exports', expected only accel_plugin_entry_v1"
}
