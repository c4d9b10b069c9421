#!/bin/sh
# `make demo`: show the loader and the configuration at work.
set -eu
B=${1:-build}
ACCEL="meson devenv -C $B -w . accel"
echo "== accel plugins list"
$ACCEL plugins list
echo
echo "== accel config show --resolved --config examples/configs/ddp.json"
$ACCEL config show --resolved --config examples/configs/ddp.json
