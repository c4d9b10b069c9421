#!/bin/sh
# SPDX-License-Identifier: MIT
# Install accel into a temporary DESTDIR, build examples/plugin-skeleton (the
# localsgd strategy) out of tree with only the installed accel.pc and
# headers, install it into the plugin directory pkg-config names, and check
# that the installed `accel` lists it and describes its schema.  The example
# program, configs, docs and man page are installed, and the installed
# accel-train-mlp trains on 2 processes with the installed plugins (a loop
# of links in a plugin directory warns once for the job: on one node of 2
# processes, and on 2 nodes of 1).
# tests/test-localsgd.sh trains with it.  Then the build tree with the
# installed modules later in its search path (as after `meson install` to
# the prefix it was configured for): its own modules are used, the
# installed ones are shadowed, and its tests still find one ddp.
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

# Only what the install provides: no uninstalled modules, no user config
# (the build tree's module path is kept for the check after the install).
uninstalled_path=${ACCEL_PLUGIN_PATH:-}
unset ACCEL_PLUGIN_PATH ACCEL_CONFIG
export HOME="$tmp/home"
mkdir -p "$HOME"

. "$ACCEL_TEST_SRCDIR/tests/plugin-build.sh"

# Not --no-rebuild: `meson test install` builds only this test's own
# dependencies, and the install needs every installable target.
echo "== meson install --destdir $dest"
pb_install "$dest"
echo "installed prefix: $pb_prefix (under $dest)"
[ -f "$root/include/accel/accel.h" ] || fail "header accel/accel.h not installed in $root/include"
[ -x "$root/bin/accel" ] || fail "accel not installed in $root/bin"

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

echo "== build the localsgd plugin (examples/plugin-skeleton) out of tree"
pb_build "$tmp/localsgd"
make -C "$tmp/localsgd" PKG_CONFIG="$PKG_CONFIG" install >>"$tmp/make.log" 2>&1 ||
	fail_with "make install of the plugin failed" "$tmp/make.log"
[ -f "$plugindir/localsgd.so" ] || fail "make install did not put localsgd.so in $plugindir"

echo "== accel plugins list / info with plugin_dirs pointing at it"
printf '{"plugin_dirs": ["%s"]}\n' "$plugindir" >"$tmp/accel.json"
accel=$root/bin/accel
"$accel" plugins list --config "$tmp/accel.json" >"$tmp/list.out" 2>"$tmp/list.err" ||
	fail_with "accel plugins list failed" "$tmp/list.out" "$tmp/list.err"
cat "$tmp/list.out"
line=$(grep '^localsgd ' "$tmp/list.out") || fail_with "localsgd not listed" "$tmp/list.out"
set -- $line
[ "$2" = 1.0.0 ] || fail "version column is '$2'"
# The ABI version the fixtures and plugins are built with (abi/accel/types.h).
. "$ACCEL_TEST_SRCDIR/tests/abi-version.sh"
[ "$3" = "$ABI" ] || fail "ABI column is '$3', expected '$ABI'"
[ "$4" = strategy ] || fail "kind column is '$4'"
[ "$5" = ok ] || fail "status column is '$5'"
[ "$7" = "$plugindir/localsgd.so" ] || fail "path column is '$7'"
grep -q "$plugindir  (plugin_dirs)" "$tmp/list.out" || fail "plugin_dirs directory not listed"

"$accel" plugins info localsgd --config "$tmp/accel.json" >"$tmp/info.out" 2>&1 ||
	fail_with "accel plugins info localsgd failed" "$tmp/info.out"
cat "$tmp/info.out"
for want in 'localsgd 1.0.0: Local SGD' 'role strategy' 'capabilities: *cpu, cuda, checkpoint' \
	'state version: *2' \
	'localsgd.sync_every  *int  *default 4, 1 .. 1000000' \
	'localsgd.warmup_steps  *int  *default 0, 0 .. 1000000000' \
	'localsgd.average_optimizer_state  *bool  *default false' \
	'localsgd.global_grad_stats  *bool  *default false' \
	'"strategy": "localsgd"' 'config section: *"localsgd"'; do
	grep -q -- "$want" "$tmp/info.out" || fail "info lacks '$want'"
done

echo "== the example program, its configs, the docs and the man page are installed"
for f in bin/accel-train-mlp libexec/accel/train_mlp share/accel/examples/configs/ddp.json \
	share/accel/examples/README.md share/accel/examples/plugin-skeleton/localsgd.c \
	share/doc/accel/README.md share/doc/accel/getting-started.md share/doc/accel/config.md \
	share/doc/accel/launch.md share/doc/accel/checkpoints.md share/man/man1/accel.1; do
	[ -f "$root/$f" ] || fail "$f is not installed under $root"
done
[ -x "$root/bin/accel-train-mlp" ] || fail "bin/accel-train-mlp is not executable"
# every command that `accel --help` lists has its entry in the man page
"$accel" --help >"$tmp/help.out" || fail_with "accel --help failed" "$tmp/help.out"
cmds=$(sed -n '/^Commands:/,/^$/p' "$tmp/help.out" | awk 'NR > 1 && NF { print $1 }')
[ -n "$cmds" ] || fail_with "accel --help lists no commands" "$tmp/help.out"
for c in $cmds; do
	grep -q "^\.TP\$" "$root/share/man/man1/accel.1" &&
		awk -v c="$c" 'prev == ".TP" && $0 == ".B " c { found = 1 } { prev = $0 } END { exit !found }' \
			"$root/share/man/man1/accel.1" ||
		fail "the man page has no entry for 'accel $c' (docs/accel.1, COMMANDS)"
done
if command -v groff >/dev/null 2>&1; then
	LC_ALL=C groff -man -ww -z "$root/share/man/man1/accel.1" >"$tmp/groff.out" 2>&1 ||
		fail_with "groff refuses the man page" "$tmp/groff.out"
	[ ! -s "$tmp/groff.out" ] || fail_with "groff warns about the man page" "$tmp/groff.out"
fi

echo "== config templates from the install: ddp's (next to ddp.so) and the core's bf16"
[ -f "$plugindir/ddp.template.json" ] || fail "ddp.template.json is not installed in $plugindir"
mkdir "$tmp/tmpl"
(cd "$tmp/tmpl" && "$accel" config init --config "$tmp/accel.json" --list) \
	>"$tmp/tmpl.out" 2>"$tmp/tmpl.err" || fail_with "config init --list failed" "$tmp/tmpl.out" \
	"$tmp/tmpl.err"
grep -q '^ddp  *plugin ddp  *Data parallel' "$tmp/tmpl.out" || fail_with "ddp not listed" "$tmp/tmpl.out"
grep -q '^bf16  *core  *bf16 mixed precision' "$tmp/tmpl.out" ||
	fail_with "bf16 not listed" "$tmp/tmpl.out"
for t in ddp bf16; do
	(cd "$tmp/tmpl" && "$accel" config init --config "$tmp/accel.json" --template $t -o $t.json) \
		>"$tmp/tmpl.out" 2>"$tmp/tmpl.err" ||
		fail_with "config init --template $t failed" "$tmp/tmpl.out" "$tmp/tmpl.err"
	grep -q "^$t.json: ok\$" "$tmp/tmpl.out" || fail_with "$t.json not valid" "$tmp/tmpl.out"
	(cd "$tmp/tmpl" && "$accel" config validate $t.json) >"$tmp/tmpl.out" 2>&1 ||
		fail_with "$t.json does not validate" "$tmp/tmpl.out"
done
# ddp's plugin was found through plugin_dirs: the config written names it
grep -q "\"plugin_dirs\": \\[\"$plugindir\"\\]" "$tmp/tmpl/ddp.json" ||
	fail_with "ddp.json does not name $plugindir" "$tmp/tmpl/ddp.json"
grep -q '"strategy": "ddp"' "$tmp/tmpl/ddp.json" || fail_with "ddp.json: no strategy" "$tmp/tmpl/ddp.json"
# ... and so does bf16's (the core's template; its strategy is ddp)
grep -q "\"plugin_dirs\": \\[\"$plugindir\"\\]" "$tmp/tmpl/bf16.json" ||
	fail_with "bf16.json does not name $plugindir" "$tmp/tmpl/bf16.json"
grep -q '"mixed_precision": "bf16"' "$tmp/tmpl/bf16.json" ||
	fail_with "bf16.json: no bf16" "$tmp/tmpl/bf16.json"

echo "== the installed accel-train-mlp trains on 2 processes with the installed plugins"
# A plugin directory with a loop of symbolic links next to the real one:
# one warning for the job (local rank 0's), not one per rank.
mkdir "$tmp/loopy"
ln -s loop-b.so "$tmp/loopy/loop-a.so"
ln -s loop-a.so "$tmp/loopy/loop-b.so"
printf '{"plugin_dirs": ["%s", "%s"], "strategy": "ddp", "backend": "shm"}\n' "$plugindir" \
	"$tmp/loopy" >"$tmp/train.json"
(cd "$tmp" && PATH="$root/bin:$PATH" accel launch -n 2 --config "$tmp/train.json" -- \
	accel-train-mlp --hidden 16 --steps 3 --samples 64 --batch-size 16 --no-eval) \
	>"$tmp/train.out" 2>"$tmp/train.err" ||
	fail_with "the installed accel-train-mlp failed" "$tmp/train.out" "$tmp/train.err"
cat "$tmp/train.out"
grep -q '^\[rank 0\] train_mlp: .*, 2 processes, global batch 16, 64 samples' "$tmp/train.out" ||
	fail_with "no 2-process header" "$tmp/train.out"
grep -q '^\[rank 0\] trained 3 steps (3 global batches)' "$tmp/train.out" ||
	fail_with "did not train 3 steps" "$tmp/train.out"
for l in a b; do
	n=$(grep -c "plugin directory $tmp/loopy: loop-$l.so is skipped: a loop of symbolic links" \
		"$tmp/train.err" || true)
	[ "$n" -eq 1 ] || fail_with "the loop-$l.so warning appears $n times, expected once" \
		"$tmp/train.err"
done
# The same job as 2 nodes of 1 process (two launchers on this machine, over
# tcp): still once for the job, from global rank 0 (node 0's launcher); the
# first rank of node 1 does not repeat it.
if command -v python3 >/dev/null 2>&1; then
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
else
	port=$((20000 + $$ % 30000))
fi
printf '{"plugin_dirs": ["%s", "%s"], "strategy": "ddp"}\n' "$plugindir" "$tmp/loopy" \
	>"$tmp/train2.json"
for node in 1 0; do
	(cd "$tmp" && PATH="$root/bin:$PATH" exec accel launch --nnodes 2 --node-rank $node -n 1 \
		--master-addr 127.0.0.1 --master-port "$port" --config "$tmp/train2.json" -- \
		accel-train-mlp --hidden 16 --steps 3 --samples 64 --batch-size 16 --no-eval) \
		>"$tmp/node$node.out" 2>"$tmp/node$node.err" &
	eval "pid$node=\$!"
done
st0=0
st1=0
wait "$pid0" || st0=$?
wait "$pid1" || st1=$?
[ "$st0" -eq 0 ] && [ "$st1" -eq 0 ] || fail_with "the 2-node job failed ($st0, $st1)" \
	"$tmp/node0.out" "$tmp/node0.err" "$tmp/node1.out" "$tmp/node1.err"
grep -q '^\[rank 0\] trained 3 steps' "$tmp/node0.out" ||
	fail_with "the 2-node job did not train 3 steps" "$tmp/node0.out"
for l in a b; do
	w="plugin directory $tmp/loopy: loop-$l.so is skipped: a loop of symbolic links"
	n0=$(grep -c "$w" "$tmp/node0.err" || true)
	n1=$(grep -c "$w" "$tmp/node1.err" || true)
	[ "$n0" -eq 1 ] && [ "$n1" -eq 0 ] || fail_with "the loop-$l.so warning appears $n0 times \
on node 0 and $n1 on node 1, expected once on node 0" "$tmp/node0.err" "$tmp/node1.err"
	grep -q "^\[rank 0\].*$w" "$tmp/node0.err" || fail_with "not rank 0's warning" "$tmp/node0.err"
done
# A job that fails after the scan (a strategy that is not there): the
# launcher, cleaning up after it with the job's config, does not repeat it.
printf '{"plugin_dirs": ["%s", "%s"], "strategy": "nosuch", "backend": "shm"}\n' "$plugindir" \
	"$tmp/loopy" >"$tmp/fail.json"
if (cd "$tmp" && PATH="$root/bin:$PATH" accel launch -n 2 --config "$tmp/fail.json" -- \
	accel-train-mlp --hidden 16 --steps 3 --samples 64 --batch-size 16 --no-eval) \
	>"$tmp/fail.out" 2>"$tmp/fail.err"; then
	fail_with "a job selecting strategy nosuch succeeded" "$tmp/fail.out" "$tmp/fail.err"
fi
grep -q "no plugin named 'nosuch'" "$tmp/fail.err" || fail_with "no reason given" "$tmp/fail.err"
# (the launcher's summary quotes rank 0's last lines, indented: not counted)
n=$(grep -c "^\[rank 0\] .*plugin directory $tmp/loopy: loop-a.so is skipped" "$tmp/fail.err" || true)
m=$(grep -c "^[^ ].*plugin directory $tmp/loopy: loop-a.so is skipped" "$tmp/fail.err" || true)
[ "$n" -eq 1 ] && [ "$m" -eq 1 ] || fail_with "the warning appears $m times in a failed job \
($n from rank 0), expected once, from rank 0" "$tmp/fail.err"

# Without plugin_dirs it is not found, and the error says where it looked.
if "$accel" plugins info localsgd >"$tmp/nf.out" 2>&1; then
	fail_with "info without plugin_dirs should fail" "$tmp/nf.out"
fi
grep -q "no plugin or comm backend named 'localsgd'" "$tmp/nf.out" ||
	fail_with "unexpected not-found message" "$tmp/nf.out"

echo "== the build tree after an install: its modules first, the installed ones shadowed"
[ -n "$uninstalled_path" ] || fail "ACCEL_PLUGIN_PATH was not set (run through meson test)"
: "${ACCEL_CLI:?not set (run through meson test)}"
after_install="$uninstalled_path:$plugindir"
ACCEL_PLUGIN_PATH=$after_install "$ACCEL_CLI" plugins list >"$tmp/both.out" 2>"$tmp/both.err" ||
	fail_with "accel plugins list failed with the installed modules on the path" "$tmp/both.out" \
		"$tmp/both.err"
[ -f "$plugindir/ddp.so" ] || fail "ddp.so was not installed in $plugindir"
used=$(awk '$1 == "ddp" && $5 == "ok" { print $NF }' "$tmp/both.out")
[ "$(printf '%s\n' "$used" | awk 'NF' | wc -l)" -eq 1 ] ||
	fail_with "expected exactly one usable ddp, got '$used'" "$tmp/both.out"
case "$used" in
"$dest"/*) fail "the installed ddp ($used) is used, not the build tree's" ;;
esac
[ "$(awk -v p="$plugindir/ddp.so" '$NF == p { print $1, $5 }' "$tmp/both.out")" = "ddp shadowed" ] ||
	fail_with "the installed ddp.so is not listed as shadowed" "$tmp/both.out"
reason="$plugindir/ddp.so: plugin 'ddp' is shadowed by $used, which comes earlier in the search order"
grep -qxF "  $reason" "$tmp/both.out" || fail_with "no shadowed line for ddp" "$tmp/both.out"
grep -qxF "[accel] info: $reason" "$tmp/both.err" || fail_with "no notice for ddp" "$tmp/both.err"
# Every installed module is shadowed by the build tree's (localsgd, only
# installed, is the one exception), and nothing is broken.
awk -v d="$plugindir/" 'index($NF, d) == 1 && $1 != "localsgd" && $5 != "shadowed"' \
	"$tmp/both.out" | grep . && fail_with "an installed module is used" "$tmp/both.out"
awk '$5 == "broken"' "$tmp/both.out" | grep . && fail_with "a module is broken" "$tmp/both.out"

# A context of the build tree: a config that selects ddp validates, and the
# build tree's context tests pass (they failed with "two plugins are named
# 'ddp'" before shadowing worked like PATH).
printf '{"strategy": "ddp"}\n' >"$tmp/ddp.json"
ACCEL_PLUGIN_PATH=$after_install "$ACCEL_CLI" config validate "$tmp/ddp.json" \
	>"$tmp/validate.out" 2>"$tmp/validate.err" ||
	fail_with "accel config validate failed" "$tmp/validate.out" "$tmp/validate.err"
grep -qxF "$tmp/ddp.json: ok" "$tmp/validate.out" || fail_with "not ok" "$tmp/validate.out"
ACCEL_PLUGIN_PATH=$after_install ACCEL_LOG_LEVEL=warn "$ACCEL_TEST_BUILDDIR/tests/test-ctx" \
	>"$tmp/ctx.out" 2>&1 || fail_with "the build tree's test-ctx failed" "$tmp/ctx.out"
grep -q "^100%: Checks: [1-9]" "$tmp/ctx.out" || fail_with "test-ctx ran no checks" "$tmp/ctx.out"
echo "PASS"
