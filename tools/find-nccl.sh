#!/bin/sh
# Prints where NCCL's header and library are, for meson.build:
#   inc=<directory holding nccl.h>   (empty: not found)
#   lib=<path of libnccl.so or libnccl.so.2>   (empty: not found)
# Looked for, header and library separately, in order: $1 (-Dnccl_home),
# $NCCL_HOME, the CUDA prefix $2, the nvidia/nccl folder of an installed
# PyTorch wheel (nvidia-nccl-cu*), then (library only) the linker's default
# search path as ldconfig knows it.
nccl_home=$1
cuda_home=$2
wheel=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
if [ -z "$wheel" ]; then
	wheel=$(python3 -c 'import site, glob
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for g in glob.glob(d + "/nvidia/nccl"):
        print(g); raise SystemExit' 2>/dev/null)
fi
inc=
lib=
for d in "$nccl_home" "$NCCL_HOME" "$cuda_home" "$wheel"; do
	[ -n "$d" ] || continue
	if [ -z "$inc" ] && [ -f "$d/include/nccl.h" ]; then
		inc=$d/include
	fi
	for l in lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu; do
		for f in libnccl.so libnccl.so.2; do
			if [ -z "$lib" ] && [ -e "$d/$l/$f" ]; then
				lib=$d/$l/$f
			fi
		done
	done
done
if [ -z "$lib" ]; then
	lib=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) |
		awk '/libnccl\.so(\.2)? /{print $NF; exit}')
fi
echo "inc=$inc"
echo "lib=$lib"
