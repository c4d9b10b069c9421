#!/bin/sh
# `make demo`: the loader, the configuration, and a 2-process DDP training run
# on CPU with the default configuration.
set -eu
B=${1:-build}
# Run the uninstalled tool with the build tree's modules on ACCEL_PLUGIN_PATH.
ACCEL_PLUGIN_PATH=$(meson devenv -C "$B" printenv ACCEL_PLUGIN_PATH)
export ACCEL_PLUGIN_PATH
ACCEL="$B/cli/accel"
echo "== accel plugins list"
"$ACCEL" plugins list
echo
echo "== accel config show --resolved --config examples/configs/ddp.json"
"$ACCEL" config show --resolved --config examples/configs/ddp.json
echo
if [ ! -x "$B/examples/train_mlp" ]; then
	echo "demo: $B/examples/train_mlp was not built (no BLAS found); install libopenblas-dev" >&2
	exit 1
fi
echo "== accel launch -n 2 -- train_mlp   (strategy ddp, backend shm, AdamW; defaults)"
"$ACCEL" launch -n 2 -- "$B/examples/train_mlp" --steps 100
