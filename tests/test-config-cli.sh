#!/bin/sh
# SPDX-License-Identifier: MIT
# `accel config` show FILE, init (every template listed is written and
# validates; a plugin's own templates appear with it), "//" comments, the
# questionnaire (flags, and through a pseudo-terminal), import-deepspeed,
# the deepspeed_config_file key, and (part "accelerate") import-accelerate.
#
#   test-config-cli.sh PART    PART: core | accelerate
# Exit 77 only for an outside prerequisite: python3 (JSON checks, the
# pseudo-terminal), or for "accelerate" an accel built without libyaml
# because none was found; one configured -Dyaml=disabled on purpose is
# checked to say so (.ci/run builds one).
set -eu

: "${ACCEL_CLI:?not set (run through meson test)}"
: "${ACCEL_TEST_BUILDDIR:?not set (run through meson test)}"
: "${ACCEL_TEST_SRCDIR:?not set (run through meson test)}"
part=${1:-core}
data=$ACCEL_TEST_SRCDIR/tests/data
fx=$ACCEL_TEST_BUILDDIR/tests/fixtures
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accel-test-config-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset ACCEL_CONFIG ACCEL_SET
export HOME="$tmp"
cd "$tmp"
command -v python3 >/dev/null 2>&1 || { echo "skipped: no python3"; exit 77; }
# The installed strategies are ddp, and the fixture named zero where a
# check installs one: the zero, fsdp and fp8 plugins the build makes too
# are taken off the search path, and checked on their own; so is the scaler
# (fp16 without it is checked first, with it at the end), and the compress
# hook (its template would join the list of installed ones).
zero_dir=$ACCEL_TEST_BUILDDIR/plugins/zero
fsdp_dir=$ACCEL_TEST_BUILDDIR/plugins/fsdp
fp8_dir=$ACCEL_TEST_BUILDDIR/plugins/fp8
scaler_dir=$ACCEL_TEST_BUILDDIR/plugins/scaler
ACCEL_PLUGIN_PATH=$(printf '%s\n' "$ACCEL_PLUGIN_PATH" | tr ':' '\n' | grep -vxF "$zero_dir" |
	grep -vxF "$fsdp_dir" | grep -vxF "$fp8_dir" | grep -vxF "$scaler_dir" |
	grep -vxF "$ACCEL_TEST_BUILDDIR/plugins/compress" | paste -sd: -)
export ACCEL_PLUGIN_PATH

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# run EXPECTED_STATUS ARGS...: output in $tmp/out (stdout) and $tmp/err.
run() {
	want=$1
	shift
	set +e
	"$ACCEL_CLI" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
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
	grep -q -F -- "$2" "$1" || {
		echo "---- $1" >&2
		cat "$1" >&2
		fail "$1 lacks: $2"
	}
}

hasnt() {
	if grep -q -F -- "$2" "$1"; then
		cat "$1" >&2
		fail "$1 has: $2"
	fi
}

# json FILE PYTHON-EXPRESSION...: each expression (over c = the file's
# JSON) must be true.
json() {
	f=$1
	shift
	python3 - "$f" "$@" <<'EOF' || fail "JSON check of $f"
import json, sys
c = json.load(open(sys.argv[1]))
for e in sys.argv[2:]:
    if not eval(e):
        print("false: %s\n%s" % (e, json.dumps(c, indent=1)), file=sys.stderr)
        sys.exit(1)
EOF
}

if [ "$part" = accelerate ]; then
	run 2 config import-accelerate
	set +e
	"$ACCEL_CLI" config import-accelerate "$data/accelerate-ddp.yaml" >"$tmp/out" 2>"$tmp/err"
	set -e
	if [ "${ACCEL_TEST_YAML_DISABLED:-0}" = 1 ]; then
		# configured with -Dyaml=disabled (a step of .ci/run): the command
		# says what is missing and how to get it, and writes nothing
		run 1 config import-accelerate "$data/accelerate-ddp.yaml" -o ddp.json
		has err "accel config import-accelerate: this accel was built without libyaml (install libyaml-dev, tools/install-deps.sh does, and rebuild)"
		[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "more than the one line about libyaml"
		[ ! -e ddp.json ] || fail "import-accelerate without libyaml wrote ddp.json"
		run 2 config import-accelerate
		# the rest of `accel config` works without it
		run 0 config import-deepspeed "$data/ds-stage0.json" -o s0.json
		has out "s0.json: ok"
		echo "ok: a build without libyaml says so"
		exit 0
	fi
	if grep -q "built without libyaml" "$tmp/err"; then
		echo "skipped: accel built without libyaml (libyaml-dev)"
		exit 77
	fi
	# MULTI_GPU, bf16, 2 processes: ddp, valid here
	run 0 config import-accelerate "$data/accelerate-ddp.yaml" -o ddp.json
	has out "ddp.json: ok"
	has out "run it with: accel launch -n 2 --config ddp.json PROGRAM"
	has err "accelerate-ddp.yaml: strategy ddp (distributed_type MULTI_GPU)"
	has err "accelerate-ddp.yaml: mixed_precision = \"bf16\""
	has err "not supported, left out: main_training_function = \"main\": no accel equivalent"
	has err "not supported, left out: use_cpu = false: no accel equivalent (off: nothing is lost)"
	has err "for accel launch: -n 2 (num_processes 2)"
	json ddp.json 'c["strategy"] == "ddp"' 'c["mixed_precision"] == "bf16"' \
		'any("-n 2" in l for l in c["//"])' 'set(c) == {"//", "strategy", "mixed_precision"}'
	# every key of the input is accounted for: mapped, auto, left out or launch
	for k in compute_environment debug distributed_type downcast_bf16 enable_cpu_affinity \
		gpu_ids machine_rank main_training_function mixed_precision num_machines \
		num_processes rdzv_backend same_network tpu_env tpu_use_cluster tpu_use_sudo use_cpu; do
		grep -q -- "$k" "$tmp/err" || fail "key $k of accelerate-ddp.yaml is not reported"
	done
	run 0 config validate ddp.json
	# DEEPSPEED, ZeRO-2 with offload, fp16, 2 nodes of 4
	run 1 config import-accelerate "$data/accelerate-deepspeed.yaml" -o ds.json
	has err "deepspeed_config.zero_stage 2 selects strategy 'zero', which is not installed (plugins found: ddp"
	has err "mixed_precision fp16 needs the 'scaler' plugin, which is not installed"
	has err "deepspeed_config.offload_optimizer_device -> zero_optimization.offload_optimizer.device = \"cpu\""
	has err "deepspeed_config.gradient_clipping -> max_grad_norm = 1.0"
	has err "not supported, left out: deepspeed_config.zero3_init_flag = false"
	has err "for accel launch: -n 4 (num_processes 8 over num_machines)"
	has err "for accel launch: --nnodes 2 (num_machines)"
	has err "for accel launch: --master-addr 10.0.0.1 (main_process_ip)"
	has err "for accel launch: --master-port 29500 (main_process_port)"
	json ds.json 'c["strategy"] == "zero"' 'c["mixed_precision"] == "fp16"' \
		'c["gradient_accumulation_steps"] == 4' 'c["max_grad_norm"] == 1.0' \
		'c["zero_optimization"]["stage"] == 2' \
		'c["zero_optimization"]["offload_optimizer"]["device"] == "cpu"' \
		'c["zero_optimization"]["offload_param"]["device"] == "none"'
	# FSDP: fsdp_* -> the fsdp section; torch-only settings listed
	run 1 config import-accelerate "$data/accelerate-fsdp.yaml" -o fsdp.json
	has err "distributed_type FSDP selects strategy 'fsdp', which is not installed (plugins found: ddp"
	has err "fsdp_config.fsdp_sharding_strategy -> fsdp.sharding_strategy = \"FULL_SHARD\""
	has err "fsdp_config.fsdp_transformer_layer_cls_to_wrap -> fsdp.transformer_cls_names_to_wrap = \"LlamaDecoderLayer\""
	has err "fsdp_config.fsdp_offload_params -> fsdp.cpu_offload = false"
	has err "not supported, left out: fsdp_config.fsdp_cpu_ram_efficient_loading = true"
	json fsdp.json 'c["strategy"] == "fsdp"' 'c["fsdp"]["sharding_strategy"] == "FULL_SHARD"' \
		'c["fsdp"]["backward_prefetch"] == "BACKWARD_PRE"' \
		'c["fsdp"]["state_dict_type"] == "SHARDED_STATE_DICT"' \
		'c["fsdp"]["cpu_offload"] is False' 'c["mixed_precision"] == "bf16"' \
		'c["fsdp"]["use_orig_params"] is True' 'c["fsdp"]["sync_module_states"] is True' \
		'c["fsdp"]["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"' \
		'c["fsdp"]["transformer_cls_names_to_wrap"] == "LlamaDecoderLayer"'
	# with the fsdp plugin installed: every mapped key is one of its keys
	if [ -e "$fsdp_dir/fsdp.so" ]; then
		ACCEL_PLUGIN_PATH=$fsdp_dir:$ACCEL_PLUGIN_PATH run 0 config import-accelerate \
			"$data/accelerate-fsdp.yaml" -o fsdp2.json
		grep -q "has no key" "$tmp/err" && fail "fsdp keys unknown to the fsdp plugin: $(grep 'has no key' "$tmp/err")"
		ACCEL_PLUGIN_PATH=$fsdp_dir:$ACCEL_PLUGIN_PATH run 0 config validate fsdp2.json
	fi
	# bad input: not YAML, not a mapping, missing
	printf 'a: [1, 2\n' >bad.yaml
	run 1 config import-accelerate bad.yaml
	has err "bad.yaml:2:1: invalid YAML"
	printf -- '- 1\n- 2\n' >list.yaml
	run 1 config import-accelerate list.yaml
	has err "list.yaml: expected a mapping of settings"
	run 1 config import-accelerate missing.yaml
	has err "cannot open 'missing.yaml'"
	echo "ok: import-accelerate"
	exit 0
fi

# ---- show FILE is show --config FILE ------------------------------------------
run 0 config init -o a.json
run 0 config show a.json
cp "$tmp/out" show-arg
run 0 config show --config a.json
cmp -s show-arg "$tmp/out" || fail "show FILE and show --config FILE differ"
has out 'ddp.bucket_cap_mb = 25.0'
run 2 config show a.json b.json
has err "one config file only (got 'a.json' and 'b.json')"
run 2 config show --config a.json b.json
run 1 config show nonexistent.json
has err "cannot open config file 'nonexistent.json'"

# ---- plugin_dirs: every bad entry, each at its position --------------------------
mkdir -p realdir
touch afile.so
cat >dirs.json <<EOF
{"plugin_dirs": [
  "$tmp/realdir",
  "$tmp/afile.so",
  "$tmp/no/such/dir",
  ""
]}
EOF
run 1 config validate dirs.json
has err "dirs.json: error: plugin_dirs[1] (from dirs.json:3:3) is '$tmp/afile.so', which is a file, not a directory: a module's path; plugin_dirs lists the folders that hold modules, so name its folder, \"$tmp\""
has err "dirs.json: error: plugin_dirs[2] (from dirs.json:4:3) is '$tmp/no/such/dir', which does not exist (the nearest folder above it that does is $tmp): fix the name, create the folder or remove the entry"
has err "dirs.json: error: plugin_dirs[3] (from dirs.json:5:3) is an empty string; name a directory"
[ "$(wc -l <"$tmp/err")" -eq 3 ] || fail "expected 3 error lines for dirs.json"
hasnt err "plugin_dirs[0]"
run 1 config show dirs.json
has err "plugin_dirs[1] (from dirs.json:3:3)"
has err "; also: plugin_dirs[2] (from dirs.json:4:3)"
has err "; also: plugin_dirs[3] (from dirs.json:5:3)"
# past the config's error limit (20): those, then how many more
python3 -c 'import json; print(json.dumps({"plugin_dirs": ["/nonexistent/%d" % i for i in range(25)]}))' >many.json
run 1 config validate many.json
[ "$(grep -c 'which does not exist' "$tmp/err")" -eq 20 ] || fail "expected 20 plugin_dirs errors"
has err "many.json: error: plugin_dirs[19] (from many.json:1:"
hasnt err "plugin_dirs[20]"
has err "many.json: error: 5 more problems not shown (the first 20 are)"
# a bad plugin_dirs entry hides nothing else: a bad key, a bad value and an
# unknown strategy of the same file are said too, each on its line
cat >mixed.json <<EOF
{"plugin_dirs": ["$tmp/no/such/dir"], "seeed": 1, "max_grad_norm": "x",
 "strategy": "nosuch"}
EOF
run 1 config validate mixed.json
has err "mixed.json: error: plugin_dirs[0] (from mixed.json:1:18) is '$tmp/no/such/dir', which does not exist"
has err "mixed.json: error: unknown key 'seeed' at mixed.json:1:"
has err "mixed.json: error: invalid value for 'max_grad_norm' at mixed.json:1:"
has err "mixed.json: error: no plugin named 'nosuch' in "
[ "$(grep -c ': error: ' "$tmp/err")" -ge 4 ] || fail "expected at least 4 errors for mixed.json"

# the selected plugins' own checks run (one process, this machine): a reduce
# hook with only reduce_bucket cannot serve zero stage 2's reduce-scatter,
# which `accel launch` would refuse at once
if [ -f "$zero_dir/zero.so" ]; then
	cat >hook-zero.json <<EOF
{"plugin_dirs": ["$zero_dir", "$ACCEL_TEST_BUILDDIR/tests/fixtures/hook"],
 "strategy": "zero", "zero_optimization": {"stage": 2}, "plugins": ["sum-hook"]}
EOF
	run 1 config validate hook-zero.json
	has err "hook-zero.json: error: reduce hook 'sum-hook' ($ACCEL_TEST_BUILDDIR/tests/fixtures/hook/sum-hook.so) has no reduce_scatter_bucket, and strategy 'zero' reduces gradients with reduce-scatter"
	hasnt out "hook-zero.json: ok"
	# the same hook with ddp is fine
	sed 's/"strategy": "zero", "zero_optimization": {"stage": 2}/"strategy": "ddp"/' \
		hook-zero.json >hook-ddp.json
	run 0 config validate hook-ddp.json
	has out "hook-ddp.json: ok"
fi

# ---- init: every template listed is written and validates ---------------------
run 0 config init --list
has out "bf16             core"
has out "ddp              plugin ddp"
names=$(awk 'NR > 1 { print $1 }' "$tmp/out")
[ -n "$names" ] || fail "no templates listed"
for t in $names; do
	run 0 config init --template "$t" -o "t-$t.json"
	has out "wrote t-$t.json from template $t"
	has out "t-$t.json: ok"
	run 0 config validate "t-$t.json"
done
json t-ddp.json 'c["strategy"] == "ddp"' '"//" in c' 'c["ddp"]["bucket_cap_mb"] == 25'
json t-bf16.json 'c["mixed_precision"] == "bf16"'
# the default template is ddp, the default file accel.json (where accel looks)
run 0 config init
cmp -s accel.json t-ddp.json || fail "init without --template is not ddp's template"
run 1 config init
has err "'accel.json' exists; --force overwrites it"
run 0 config init --template bf16 --force
cmp -s accel.json t-bf16.json || fail "--force did not overwrite"
run 0 config init --template bf16 -o -
cmp -s "$tmp/out" t-bf16.json || fail "-o - is not the template"
run 1 config init --template zero
has err "no template named 'zero' (installed: bf16, ddp)"
# the fp8 plugin's template (fp8 is off the path above): written and valid
path_without_fp8=$ACCEL_PLUGIN_PATH
ACCEL_PLUGIN_PATH=$fp8_dir:$ACCEL_PLUGIN_PATH
run 0 config init --template fp8 -o t-fp8.json
json t-fp8.json 'c["mixed_precision"] == "fp8"' 'c["fp8"]["amax_history_len"] == 1024'
run 0 config validate t-fp8.json
ACCEL_PLUGIN_PATH=$path_without_fp8
# validate prints its verdict, not the plugins' chatter: compress and fsdp
# log an info line (the method, the sharding) when a context starts them,
# which validate does (a comm backend is installed: no "note: not run"
# line), yet stderr stays empty; a warning still shows
for p in compress fsdp; do
	[ -e "$ACCEL_TEST_BUILDDIR/plugins/$p/$p.so" ] || continue
	ACCEL_PLUGIN_PATH=$ACCEL_TEST_BUILDDIR/plugins/$p:$path_without_fp8
	run 0 config init --template "$p" -o "t-$p.json"
	run 0 config validate "t-$p.json"
	has out "t-$p.json: ok"
	[ ! -s "$tmp/err" ] || { cat "$tmp/err" >&2; fail "config validate t-$p.json: more than the verdict"; }
	ACCEL_LAUNCH_STATE=$tmp/no-such-dir/state run 0 config validate "t-$p.json"
	has out "t-$p.json: ok"
	has err "warn: ACCEL_LAUNCH_STATE='$tmp/no-such-dir/state': cannot open it"
	ACCEL_PLUGIN_PATH=$path_without_fp8
done
echo "ok: validate's verdict without the plugins' info lines"
run 2 config init --bogus
run 2 config init --template
rm accel.json

# a plugin's own templates: STEM.template.json and STEM.NAME.template.json
# next to STEM.so; a broken one is left out with a warning
mkdir plug
ln -s "$fx/good.so" plug/good.so
cat >plug/good.template.json <<'EOF'
{"//": "The good fixture: a strategy for tests", "strategy": "good",
 "good": {"//": "its keys", "bucket_cap_mb": 50}}
EOF
cat >plug/good.offload.template.json <<'EOF'
{"//": ["Offloading good", "second line"], "strategy": "good", "good": {"offload": {"device": "cpu"}}}
EOF
echo '{"strategy": ' >plug/good.broken.template.json
echo '{"//": "of nobody"}' >plug/other.template.json
ACCEL_PLUGIN_PATH=$PWD/plug:$ACCEL_PLUGIN_PATH
export ACCEL_PLUGIN_PATH
run 0 config init --list
has out "good             plugin good      The good fixture"
has out "offload          plugin good      Offloading good"
hasnt out "broken"
hasnt out "of nobody"
has err "template 'broken' of plugin good is left out"
for t in good offload; do
	run 0 config init --template $t -o "p-$t.json"
	has out "p-$t.json: ok"
done
json p-offload.json 'c["good"]["offload"]["device"] == "cpu"'
# ... and through a config's plugin_dirs (--config FILE, or the config accel
# finds: ACCEL_CONFIG, ./accel.json): listed, written with plugin_dirs
# naming the plugin's folder, so the file validates and finds the plugin
mkdir plug2
ln -s "$fx/good.so" plug2/good.so
cp plug/good.template.json plug/good.offload.template.json plug2/
rm plug/good.so
run 0 config init --list
hasnt out "plugin good"
ACCEL_PLUGIN_PATH=${ACCEL_PLUGIN_PATH#*:}
printf '{"plugin_dirs": ["%s/plug2"]}\n' "$tmp" >user.json
run 0 config init --config user.json --list
has out "good             plugin good      The good fixture"
has out "offload          plugin good      Offloading good"
has out "ddp              plugin ddp"
run 0 config init --config user.json --template offload -o u-offload.json
has out "wrote u-offload.json from template offload (plugin good)"
has out "u-offload.json: ok"
json u-offload.json "c['plugin_dirs'] == ['$tmp/plug2']" 'c["strategy"] == "good"' \
	'c["good"]["offload"]["device"] == "cpu"' '"// plugin_dirs" in c'
run 0 config validate u-offload.json
run 0 config show u-offload.json
has out "good.offload.device = \"cpu\""
ACCEL_CONFIG=$tmp/user.json
export ACCEL_CONFIG
run 0 config init --list
has out "good             plugin good      The good fixture"
run 0 config wizard --strategy good --yes -o u-wizard.json
has out "u-wizard.json: ok"
json u-wizard.json "c['plugin_dirs'] == ['$tmp/plug2']" 'c["strategy"] == "good"' \
	'c["good"]["bucket_cap_mb"] == 50'
unset ACCEL_CONFIG
run 1 config init --template good -o nothing.json
has err "no template named 'good' (installed: bf16, ddp)"
# a bad entry there is said, and the rest still searched
printf '{"plugin_dirs": ["%s/plug2/good.so", "%s/plug2"]}\n' "$tmp" "$tmp" >baduser.json
run 0 config init --config baduser.json --list
has out "good             plugin good"
has err "warning: plugin_dirs[0] of baduser.json, '$tmp/plug2/good.so', is left out: a file, not a directory"
run 2 config init --config

# ---- "//" members are comments, at any depth ---------------------------------------
cat >c.json <<'EOF'
{"//": "top", "// seed": "why 7", "seed": 7, "//mixed_precision": "bf16",
 "optimizer": {"//": ["a", "b"], "type": "sgd", "params": {"// lr": 1, "lr": 0.5}}}
EOF
run 0 config validate c.json
run 0 config show c.json
has out "seed = 7"
has out "optimizer.params.lr = 0.5"
hasnt out "//"
hasnt out "bf16"
echo '{"/ /": 1}' >notc.json
run 1 config validate notc.json
has err "unknown key '/ /'"

# ---- the questionnaire, scripted with flags -----------------------------------------
run 0 config wizard --strategy ddp --mixed-precision bf16 --num-processes 2 \
	--gradient-accumulation-steps 4 --max-grad-norm 0.5 --yes -o w.json
has out "wrote w.json (strategy ddp, mixed_precision bf16, gradient_accumulation_steps 4, max_grad_norm 0.5)"
has out "w.json: ok"
has out "run it with: accel launch -n 2 --config w.json PROGRAM"
json w.json 'c["strategy"] == "ddp"' 'c["mixed_precision"] == "bf16"' \
	'c["gradient_accumulation_steps"] == 4' 'c["max_grad_norm"] == 0.5' \
	'c["ddp"]["bucket_cap_mb"] == 25' '"accel launch -n 2" in c["//"]'
run 0 config validate w.json
run 0 config wizard --yes
json accel.json 'c["strategy"] == "ddp"' 'c["mixed_precision"] == "no"' \
	'c["gradient_accumulation_steps"] == 1' '"max_grad_norm" not in c'
run 1 config wizard --yes
has err "'accel.json' exists"
run 1 config wizard --strategy zero --yes -o z.json
has err "--strategy zero: no such strategy is installed (installed: ddp)"
run 1 config wizard --mixed-precision fp16 --yes -o z.json
has err "fp16 needs the scaler plugin"
[ ! -e z.json ] || fail "a refused wizard wrote z.json"
run 2 config wizard --gradient-accumulation-steps 0
run 2 config wizard --max-grad-norm -1
# `accel config` alone without a terminal is a usage error, not a hang
run 2 config
has err "on a terminal \`accel config\` alone asks a few questions"
# input that ends early writes nothing
set +e
printf '1\n' | "$ACCEL_CLI" config wizard -o eof.json >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 1 ] || fail "wizard with input ending early exited $st"
has err "input ended before every question was answered; nothing written"
[ ! -e eof.json ] || fail "wizard wrote eof.json on early end of input"

# ---- the questionnaire through a pseudo-terminal: `accel config` alone ----------------
# Answers: strategy by number, a wrong precision then bf16 by name, 4
# accumulation steps, clipping 2.5, 3 processes, the file name; then the
# overwrite question for an existing file (declined, then accepted).
cat >wizard-pty.py <<'EOF'
import os, pty, select, sys, time
argv, steps = sys.argv[1:2] + ["config"], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
out, pos = b"", 0
def until(pat):
    global out, pos
    end = time.time() + 30
    while True:
        i = out.find(pat, pos)
        if i >= 0:
            pos = i + len(pat)
            return
        r, _, _ = select.select([fd], [], [], max(0.0, end - time.time()))
        d = b""
        if r:
            try:
                d = os.read(fd, 4096)
            except OSError:
                pass
        if not d:
            sys.stdout.write(out.decode(errors="replace"))
            sys.exit("pty: no %r in the output" % pat)
        out += d
for s in steps:   # "PROMPT=>ANSWER", or "TEXT" to wait for; <ESC> is the byte 27
    prompt, _, answer = s.partition("=>")
    until(prompt.encode())
    if _:
        os.write(fd, answer.replace("<ESC>", "\x1b").encode() + b"\r")
while True:
    try:
        d = os.read(fd, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(st))
EOF
set +e
python3 wizard-pty.py "$ACCEL_CLI" "Choose 1-1 [1]: =>1" "Choose 1-2 [1]: =>fp64" \
	"not one of the choices" "Choose 1-2 [1]: =>bf16" "steps [1]: =>4" "[none]: =>2.5" \
	"[1]: =>3" "[accel.json]: =>pty.json" >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 0 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "the questionnaire exited $st"; }
has out "Which strategy?"
has out "1) ddp"
has out "2) bf16"
has out "'fp64' is not one of the choices"
has out "pty.json: ok"
has out "run it with: accel launch -n 3 --config pty.json PROGRAM"
json pty.json 'c["strategy"] == "ddp"' 'c["mixed_precision"] == "bf16"' \
	'c["gradient_accumulation_steps"] == 4' 'c["max_grad_norm"] == 2.5'
run 0 config validate pty.json
cp pty.json pty.before
set +e
python3 wizard-pty.py "$ACCEL_CLI" "Choose 1-1 [1]: =>" "Choose 1-2 [1]: =>" "steps [1]: =>" \
	"[none]: =>" "[1]: =>" "[accel.json]: =>pty.json" "Overwrite it? (y/n) [n]: =>" \
	>"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 1 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "declined overwrite exited $st"; }
has out "nothing written"
cmp -s pty.json pty.before || fail "a declined overwrite changed pty.json"
set +e
python3 wizard-pty.py "$ACCEL_CLI" "Choose 1-1 [1]: =>" "Choose 1-2 [1]: =>2" "steps [1]: =>" \
	"[none]: =>" "[1]: =>" "[accel.json]: =>pty.json" "Overwrite it? (y/n) [n]: =>y" \
	>"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 0 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "accepted overwrite exited $st"; }
json pty.json 'c["mixed_precision"] == "bf16"' 'c["gradient_accumulation_steps"] == 1' \
	'"max_grad_norm" not in c'

# The arrow keys, as a terminal sends them (ESC [ A up, ESC [ B down, and
# ESC O A / ESC O B in application mode): Enter takes the marked choice;
# the list wraps around; a number typed after moving still wins.  With the
# config naming plug2, the strategies are good (plugin_dirs first) and ddp
# (the default, marked at the start).
ACCEL_CONFIG=$tmp/user.json
export ACCEL_CONFIG
set +e
python3 wizard-pty.py "$ACCEL_CLI" "Choose 1-2 [2]: =><ESC>[A" "Choose 1-2 [1]: =><ESC>[B" \
	"steps [1]: =>2" "[none]: =>" "[1]: =>" "[accel.json]: =>arrows.json" >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 0 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "the questionnaire with arrows exited $st"; }
has out "Up/Down move the marker (>) of a choice, Enter takes the [default]"
has out "1) good"
has out "> 2) ddp"
has out "Choose 1-2 [2]: good"
has out "Choose 1-2 [1]: bf16"
has out "arrows.json: ok"
json arrows.json 'c["strategy"] == "good"' 'c["mixed_precision"] == "bf16"' \
	'c["gradient_accumulation_steps"] == 2' "c['plugin_dirs'] == ['$tmp/plug2']"
set +e
python3 wizard-pty.py "$ACCEL_CLI" "Choose 1-2 [2]: =><ESC>OB<ESC>OB<ESC>OA" \
	"Choose 1-2 [1]: =><ESC>[A<ESC>[A<ESC>[B<ESC>[B<ESC>[B" "steps [1]: =>" "[none]: =>" \
	"[1]: =>" "[accel.json]: =>wrap.json" >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 0 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "the questionnaire (wrapping) exited $st"; }
# ddp, down twice (wraps to ddp), up once: good; no, up twice, down thrice: bf16
json wrap.json 'c["strategy"] == "good"' 'c["mixed_precision"] == "bf16"'
set +e
python3 wizard-pty.py "$ACCEL_CLI" "Choose 1-2 [2]: =><ESC>[A2" "Choose 1-2 [1]: =><ESC>[Bno" \
	"steps [1]: =>" "[none]: =>" "[1]: =>" "[accel.json]: =>typed.json" >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 0 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "the questionnaire (typed) exited $st"; }
json typed.json 'c["strategy"] == "ddp"' 'c["mixed_precision"] == "no"'
unset ACCEL_CONFIG

# ---- import-deepspeed -------------------------------------------------------------------
# ZeRO-2: written, the strategy named as not installed, every auto and
# every key left out reported
run 1 config import-deepspeed "$data/ds-zero2.json" -o z2.json
has err "zero_optimization.stage 2 selects strategy 'zero', which is not installed (plugins found: ddp); z2.json is written"
has err "auto: gradient_accumulation_steps: \"auto\" -> 1 (accel's default for gradient_accumulation_steps)"
has err "auto: optimizer.params.eps: \"auto\" -> 1e-08 (accel's default for optimizer.params.eps)"
has err "auto: fp16.enabled: \"auto\" -> \"no\""
has err "auto: zero_optimization.reduce_bucket_size: \"auto\" -> left out"
has err "auto: scheduler.params.warmup_max_lr: \"auto\" -> optimizer.params.lr"
has err "not supported, left out: train_micro_batch_size_per_gpu = 4: the program chooses its batch size"
has err "not supported, left out: steps_per_print = 2000: no accel equivalent"
has err "not supported, left out: fp16.loss_scale_window = 1000: fp16.enabled is \"auto\""
has err "bf16.enabled -> mixed_precision = \"bf16\""
has err "scheduler.params.total_num_steps -> scheduler.total_steps = 1000"
for k in fp16 bf16 optimizer scheduler zero_optimization gradient_accumulation_steps \
	gradient_clipping steps_per_print train_batch_size train_micro_batch_size_per_gpu \
	wall_clock_breakdown; do
	grep -q -- "$k" "$tmp/err" || fail "key $k of ds-zero2.json is not reported"
done
json z2.json 'c["strategy"] == "zero"' 'c["mixed_precision"] == "bf16"' \
	'c["max_grad_norm"] == 1.0' 'c["optimizer"]["type"] == "adamw"' \
	'c["optimizer"]["params"]["lr"] == 3e-4' 'c["optimizer"]["params"]["betas"] == [0.9, 0.95]' \
	'"eps" not in c["optimizer"]["params"]' 'c["scheduler"]["type"] == "linear"' \
	'c["scheduler"]["warmup_steps"] == 100' 'c["zero_optimization"]["stage"] == 2' \
	'c["zero_optimization"]["offload_optimizer"]["device"] == "cpu"' \
	'"reduce_bucket_size" not in c["zero_optimization"]' \
	'"gradient_accumulation_steps" not in c' \
	'any("steps_per_print" in l for l in c["//"])'
# the file validates once a plugin named zero declares the section: without
# one, validate says what is missing
run 1 config validate z2.json
has err "zero"
# ZeRO stage 0: ddp, valid here; to stdout without -o
run 0 config import-deepspeed "$data/ds-stage0.json"
cp "$tmp/out" s0.json
json s0.json 'c["strategy"] == "ddp"' 'c["gradient_accumulation_steps"] == 4' \
	'c["optimizer"]["type"] == "sgd"' 'c["optimizer"]["params"]["momentum"] == 0.9' \
	'c["optimizer"]["params"]["lr"] == 0.1' 'c["scheduler"]["type"] == "constant"' \
	'"max_grad_norm" not in c' '"zero_optimization" not in c'
has err "strategy ddp (zero_optimization.stage 0 (ZeRO off))"
has err "not supported, left out: zero_optimization.reduce_bucket_size = 500000000.0: ZeRO is off"
has err "auto: optimizer.params.weight_decay: \"auto\" -> 0 (accel's default for sgd)"
run 0 config validate s0.json
# DeepSpeed's top-level aio goes under zero_optimization.aio (the zero
# plugin's one section); "auto" keeps the plugin's default
run 1 config import-deepspeed "$data/ds-zero3-nvme.json" -o z3.json
has err "aio.block_size -> zero_optimization.aio.block_size = 1048576"
has err "aio.overlap_events -> zero_optimization.aio.overlap_events = true"
has err "auto: aio.use_gds: \"auto\" -> left out"
hasnt err "not supported, left out: aio"
json z3.json 'c["strategy"] == "zero"' 'c["zero_optimization"]["stage"] == 3' \
	'c["zero_optimization"]["offload_param"] == {"device": "nvme", "nvme_path": "/local_nvme"}' \
	'c["zero_optimization"]["aio"] == {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": False, "overlap_events": True}' \
	'"aio" not in c'
# without ZeRO, aio has nothing to configure: listed
printf '{"zero_optimization": {"stage": 0}, "aio": {"queue_depth": 4}}\n' >aio0.json
run 0 config import-deepspeed aio0.json -o aio0-out.json
has err "not supported, left out: aio.queue_depth = 4: ZeRO is off"
json aio0-out.json '"aio" not in c' '"zero_optimization" not in c'
printf '{"zero_optimization": {"stage": 1}, "aio": 3}\n' >aio3.json
run 1 config import-deepspeed aio3.json -o aio3-out.json
has err "not supported, left out: aio = 3: expected an object"
# a strategy found through the plugin_dirs of the user's config (here
# ACCEL_CONFIG's): the config written names that folder, so it validates
# (and runs) with that plugin
mkdir userddp
ln -s "$ACCEL_TEST_BUILDDIR/plugins/ddp/ddp.so" userddp/ddp.so
printf '{"plugin_dirs": ["%s/userddp"]}\n' "$tmp" >userddp.json
ACCEL_CONFIG=$tmp/userddp.json
export ACCEL_CONFIG
run 0 config import-deepspeed "$data/ds-stage0.json" -o s0u.json
unset ACCEL_CONFIG
has out "s0u.json: ok"
json s0u.json "c['plugin_dirs'] == ['$tmp/userddp']" 'c["strategy"] == "ddp"' \
	'c["gradient_accumulation_steps"] == 4'
run 0 config show s0u.json
has out "plugin_dirs = [\"$tmp/userddp\"]"
run 0 config import-deepspeed "$data/ds-stage0.json" --config userddp.json -o s0c.json
cmp -s s0u.json s0c.json || fail "--config FILE and ACCEL_CONFIG give different configs"
run 2 config import-deepspeed "$data/ds-stage0.json" --config
run 1 config import-deepspeed missing.json
has err "cannot open DeepSpeed config 'missing.json'"
echo '{"fp16": {"enabled": true}, "bf16": {"enabled": true}}' >both.json
run 1 config import-deepspeed both.json
has err "fp16.enabled and bf16.enabled are both true"
echo '[1]' >arr.json
run 1 config import-deepspeed arr.json
has err "a DeepSpeed config is a JSON object"
run 2 config import-deepspeed
run 2 config import-deepspeed a b

# with a strategy named zero installed, its section is checked against the
# plugin's schema: "auto" takes the plugin's default, undeclared keys are
# listed, and the file validates
mkdir zplug
ln -s "$fx/zero/zero.so" zplug/zero.so
saved_path=$ACCEL_PLUGIN_PATH
ACCEL_PLUGIN_PATH=$PWD/zplug:$ACCEL_PLUGIN_PATH
run 0 config import-deepspeed "$data/ds-zero2.json" -o z2i.json
has err "auto: zero_optimization.reduce_bucket_size: \"auto\" -> 500000000 (zero's default for zero_optimization.reduce_bucket_size)"
has err "not supported, left out: zero_optimization.allgather_partitions = true: the installed plugin zero has no key zero_optimization.allgather_partitions"
has err "not supported, left out: zero_optimization.offload_optimizer.pin_memory = true: the installed plugin zero has no key"
hasnt err "which is not installed"
has out "z2i.json: ok"
json z2i.json 'c["strategy"] == "zero"' \
	'c["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}, "overlap_comm": True}'
run 0 config validate z2i.json
# aio against the plugin's schema: a declared key is copied, the others listed
run 0 config import-deepspeed "$data/ds-zero3-nvme.json" -o z3i.json
has err "aio.queue_depth -> zero_optimization.aio.queue_depth = 8"
has err "not supported, left out: aio.block_size = 1048576: the installed plugin zero has no key zero_optimization.aio.block_size"
json z3i.json 'c["zero_optimization"]["aio"] == {"queue_depth": 8}' '"aio" not in c' 
ACCEL_PLUGIN_PATH=$saved_path

# ---- deepspeed_config_file: mapped at load time, the file's keys win --------------------
mkdir sub
cp "$data/ds-stage0.json" sub/ds.json
echo '{"deepspeed_config_file": "ds.json", "seed": 3, "gradient_accumulation_steps": 2}' \
	>sub/run.json
run 0 config validate sub/run.json
run 0 config show sub/run.json
has out "gradient_accumulation_steps = 2"
has out "sub/run.json:1:"
has out 'optimizer.type = "sgd"'
has out "sub/ds.json (deepspeed_config_file)"
has err "deepspeed_config_file sub/ds.json: not supported, ignored: train_micro_batch_size_per_gpu = 8"
echo '{"deepspeed_config_file": "nope.json"}' >sub/bad.json
run 1 config validate sub/bad.json
has err "deepspeed_config_file of sub/bad.json: cannot open DeepSpeed config 'sub/nope.json'"
run 1 config show --set deepspeed_config_file=sub/ds.json
has err "deepspeed_config_file is read from a config file only"
set +e
ACCEL_DEEPSPEED_CONFIG_FILE=sub/ds.json "$ACCEL_CLI" config show >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" -eq 1 ] || fail "ACCEL_DEEPSPEED_CONFIG_FILE exited $st"
has err "deepspeed_config_file is read from a config file only"
# ---- with the zero plugin this build made, when it made one ---------------------------
# DeepSpeed's aio lands in the plugin's own aio keys, "auto" takes its
# default, and the written config validates
if [ -f "$zero_dir/zero.so" ]; then
	ACCEL_PLUGIN_PATH=$zero_dir:$ACCEL_PLUGIN_PATH
	run 0 config import-deepspeed "$data/ds-zero3-nvme.json" -o z3r.json
	has out "z3r.json: ok"
	has err "aio.thread_count -> zero_optimization.aio.thread_count = 1"
	has err "auto: aio.use_gds: \"auto\" -> false (zero's default for zero_optimization.aio.use_gds)"
	hasnt err "not supported"
	json z3r.json 'c["zero_optimization"]["aio"] == {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": False, "overlap_events": True}'
	run 0 config validate z3r.json
	ACCEL_PLUGIN_PATH=$saved_path
	echo "ok: import-deepspeed with the zero plugin"
fi
# ---- with the scaler plugin this build made: DeepSpeed's fp16 section ------------------
# mapped onto scaler.*, DeepSpeed's defaults written for what the file
# leaves out, a static loss_scale, bad values listed; the fp16 template
if [ -f "$scaler_dir/scaler.so" ]; then
	saved_path=$ACCEL_PLUGIN_PATH
	ACCEL_PLUGIN_PATH=$scaler_dir:$ACCEL_PLUGIN_PATH
	run 0 config import-deepspeed "$data/ds-fp16.json" -o f16.json
	has out "f16.json: ok"
	has err "fp16.enabled -> mixed_precision = \"fp16\""
	has err "fp16.loss_scale (0: dynamic) -> scaler.dynamic = true"
	has err "fp16.initial_scale_power 12 (2^12) -> scaler.init_scale = 4096.0"
	has err "fp16.loss_scale_window -> scaler.growth_interval = 500"
	has err "fp16.hysteresis -> scaler.hysteresis = 3"
	has err "fp16.consecutive_hysteresis -> scaler.consecutive_hysteresis = true"
	has err "fp16.min_loss_scale -> scaler.min_loss_scale = 0.5"
	has err "not supported, left out: fp16.auto_cast = true: the program casts its inputs itself"
	has err "not supported, left out: fp16.fp16_master_weights_and_grads = false: not a loss scaler setting accel has"
	json f16.json 'c["mixed_precision"] == "fp16"' \
		'c["scaler"] == {"dynamic": True, "init_scale": 4096.0, "growth_interval": 500, "hysteresis": 3, "consecutive_hysteresis": True, "min_loss_scale": 0.5}'
	run 0 config validate f16.json
	# only enabled: DeepSpeed's defaults, written (torch's differ)
	echo '{"fp16": {"enabled": true}}' >f16min.json
	run 0 config import-deepspeed f16min.json -o f16min-out.json
	has err "fp16.loss_scale (not given: DeepSpeed's 0, dynamic) -> scaler.dynamic = true"
	has err "fp16.initial_scale_power (not given: DeepSpeed's) 16 (2^16) -> scaler.init_scale = 65536.0"
	has err "fp16.loss_scale_window (not given: DeepSpeed's default) -> scaler.growth_interval = 1000"
	has err "fp16.hysteresis (not given: DeepSpeed's default) -> scaler.hysteresis = 2"
	has err "fp16.min_loss_scale (not given: DeepSpeed's default) -> scaler.min_loss_scale = 1"
	json f16min-out.json \
		'c["scaler"] == {"dynamic": True, "init_scale": 65536.0, "growth_interval": 1000, "hysteresis": 2, "consecutive_hysteresis": False, "min_loss_scale": 1}'
	# a static scale: the dynamic settings are listed, as DeepSpeed ignores them
	echo '{"fp16": {"enabled": true, "loss_scale": 128, "loss_scale_window": 100, "initial_scale_power": 8}}' >f16st.json
	run 0 config import-deepspeed f16st.json -o f16st-out.json
	has err "fp16.loss_scale (> 0: static) -> scaler.dynamic = false"
	has err "fp16.loss_scale -> scaler.init_scale = 128"
	has err "not supported, left out: fp16.loss_scale_window = 100: DeepSpeed ignores it with a static loss_scale"
	has err "not supported, left out: fp16.initial_scale_power = 8: DeepSpeed ignores it"
	json f16st-out.json 'c["scaler"] == {"dynamic": False, "init_scale": 128}'
	run 0 config validate f16st-out.json
	# bad values listed; "auto" takes the plugin's default
	echo '{"fp16": {"enabled": true, "loss_scale": -1, "initial_scale_power": 200, "hysteresis": "auto"}}' >f16bad.json
	run 0 config import-deepspeed f16bad.json -o f16bad-out.json
	has err "not supported, left out: fp16.loss_scale = -1: expected 0 (dynamic) or a static scale > 0"
	has err "not supported, left out: fp16.initial_scale_power = 200: expected an integer power of two"
	has err "auto: fp16.hysteresis: \"auto\" -> 1 (scaler's default for scaler.hysteresis)"
	json f16bad-out.json '"hysteresis" not in c["scaler"]' '"init_scale" not in c["scaler"]'
	# fp16 off: its settings are listed, no scaler section
	echo '{"fp16": {"enabled": false, "hysteresis": 4}}' >f16off.json
	run 0 config import-deepspeed f16off.json -o f16off-out.json
	has err "not supported, left out: fp16.hysteresis = 4: fp16 is not enabled"
	json f16off-out.json '"scaler" not in c' '"mixed_precision" not in c'
	# the template is listed with the plugin, written and valid
	run 0 config init --list
	has out "fp16"
	run 0 config init --template fp16 --output t16.json
	json t16.json 'c["mixed_precision"] == "fp16"' 'c["scaler"]["init_scale"] == 65536'
	run 0 config validate t16.json
	ACCEL_PLUGIN_PATH=$saved_path
	echo "ok: import-deepspeed fp16 and the fp16 template with the scaler plugin"
fi
echo "ok: show, init, comments, wizard, import-deepspeed, deepspeed_config_file"
