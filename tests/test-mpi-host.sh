#!/bin/sh
# tests/test-mpi-host.sh MPIRUN HOST PROGRAM ARGS...: run PROGRAM on 2 ranks
# under mpirun with rank 0 under the host name HOST (a UTS namespace of its
# own), so that rank 1 sees rank 0 as another host and must reach rank 0's
# rendezvous store by that name (comm.mpi_store).  Exit 77 (skipped) where
# the host name cannot be changed (unshare -u needs CAP_SYS_ADMIN).
set -eu
if [ "${1:-}" = --rank ]; then
	shift
	host=$1
	shift
	rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-}}}
	if [ -z "$rank" ]; then
		echo "$0: no rank in the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK)" >&2
		exit 1
	fi
	if [ "$rank" = 0 ]; then
		exec unshare -u sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
	fi
	exec "$@"
fi
if [ $# -lt 3 ]; then
	echo "usage: $0 MPIRUN HOST PROGRAM [ARGS...]" >&2
	exit 2
fi
mpirun=$1
host=$2
shift 2
if ! unshare -u sh -c 'hostname accel-probe' 2>/dev/null; then
	echo "skipped: cannot give rank 0 a host name of its own here (unshare -u or hostname is not available)"
	exit 77
fi
exec "$mpirun" --allow-run-as-root --oversubscribe -n 2 sh "$0" --rank "$host" "$@"
