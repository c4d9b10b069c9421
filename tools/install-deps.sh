#!/bin/sh
# Install the Debian packages accel needs to build and test, only those that
# are missing, plus any packages named as arguments (`make fuzz` adds clang
# and libclang-rt-dev).  Runs apt-get as root (or through sudo).
set -eu
# build: compiler, meson, jansson, Check; MPI backend; BLAS libraries for the
# example (oneDNN, OpenBLAS, BLIS); PyTorch for the cross-checks against
# torch.optim and safetensors, and for the benchmark peers; iproute2 (ip) for
# the vanished-node tests (tests/test-tcp-vanish.sh); libyaml for `accel config
# import-accelerate`; matplotlib for the benchmark charts (bench/plot.py);
# liburing for ZeRO's NVMe offload (io_uring).
PKGS="build-essential meson ninja-build pkg-config libjansson-dev libxxhash-dev check libsubunit-dev iproute2 \
libyaml-dev liburing-dev \
libopenmpi-dev openmpi-bin libopenblas-dev libblis-dev libdnnl-dev \
python3 python3-numpy python3-torch python3-matplotlib $*"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "accel: installing missing packages:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
