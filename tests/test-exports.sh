#!/bin/sh
# SPDX-License-Identifier: MIT
# Every built plugin and comm backend (each *.so in the module directories
# of ACCEL_PLUGIN_PATH) exports exactly one dynamic symbol, its entry
# (accel_plugin_entry_v1 or accel_comm_entry_v1), and does not link
# libaccel: plugins reach the core only through the host table.  libaccel
# exports every function core/include/accel/accel.h declares ACCEL_API
# (accel_memory_stats among them) and no name outside the accel_ prefix.
set -eu

: "${ACCEL_PLUGIN_PATH:?ACCEL_PLUGIN_PATH is not set (run through meson test)}"
NM=${NM:-nm}
READELF=${READELF:-readelf}

checked=0
failed=0
old_ifs=$IFS
IFS=:
set -f
for dir in $ACCEL_PLUGIN_PATH; do
	IFS=$old_ifs
	set +f
	[ -n "$dir" ] && [ -d "$dir" ] || continue
	for f in "$dir"/*.so; do
		[ -f "$f" ] || continue
		checked=$((checked + 1))
		if ! syms=$("$NM" -D --defined-only "$f" 2>&1); then
			echo "FAIL: $f: nm failed: $syms"
			failed=$((failed + 1))
			continue
		fi
		# "0000000000001190 T accel_comm_entry_v1" -> name; one per line.
		names=$(printf '%s\n' "$syms" | awk 'NF { print $NF }' | sort)
		count=$(printf '%s\n' "$names" | awk 'NF' | wc -l)
		case "$count:$names" in
		1:accel_plugin_entry_v1 | 1:accel_comm_entry_v1)
			echo "ok: $f exports only $names" ;;
		*)
			echo "FAIL: $f exports $count symbols, expected only its entry:"
			printf '%s\n' "$names" | sed 's/^/    /'
			failed=$((failed + 1))
			continue ;;
		esac
		if "$READELF" -d "$f" | grep -q 'NEEDED.*\[libaccel\.so'; then
			echo "FAIL: $f links libaccel (plugins use the host table only)"
			failed=$((failed + 1))
		fi
	done
	IFS=:
	set -f
done
IFS=$old_ifs
set +f

# libaccel's public API
if [ -n "${ACCEL_TEST_BUILDDIR:-}" ] && [ -n "${ACCEL_TEST_SRCDIR:-}" ]; then
	lib="$ACCEL_TEST_BUILDDIR/core/libaccel.so"
	hdr="$ACCEL_TEST_SRCDIR/core/include/accel/accel.h"
	exported=$("$NM" -D --defined-only "$lib" | awk 'NF { print $NF }' | sort)
	declared=$(grep '^ACCEL_API' "$hdr" | grep -o 'accel_[a-z0-9_]*(' | tr -d '(' | sort -u)
	missing=$(printf '%s\n' "$declared" | while read -r fn; do
		printf '%s\n' "$exported" | grep -qx "$fn" || echo "$fn"
	done)
	stray=$(printf '%s\n' "$exported" | grep -v '^accel_' || true)
	if [ -n "$missing" ] || [ -n "$stray" ] || ! printf '%s\n' "$declared" | grep -qx accel_memory_stats; then
		echo "FAIL: $lib: declared in accel.h but not exported: ${missing:-none}; exported outside accel_*: ${stray:-none}"
		failed=$((failed + 1))
	else
		echo "ok: $lib exports the $(printf '%s\n' "$declared" | wc -l) functions accel.h declares"
	fi
	checked=$((checked + 1))
fi

if [ "$checked" -eq 0 ]; then
	echo "FAIL: no modules (*.so) found in ACCEL_PLUGIN_PATH=$ACCEL_PLUGIN_PATH"
	exit 1
fi
echo "$checked modules checked, $failed failed"
[ "$failed" -eq 0 ]
