/* SPDX-License-Identifier: MIT */
/* bench/mpi_allreduce.c: the MPI peer of `accel bench comm`.
 *
 * Times the MPI library's own blocking collectives (MPI_Allreduce,
 * MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast) on ordinary malloc'd
 * buffers, the way `accel bench comm` times accel's (see comm-bench.h for
 * the method), and prints the same JSON lines with "backend":"openmpi"
 * (or "mpi" for another MPI library).  Run it under the MPI launcher:
 *
 *   mpirun -n 2 bench/mpi_allreduce --op all --max-bytes 64M --json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "cli/comm-bench.h"

static const char *const usage_text =
	"Usage: mpirun -n N mpi_allreduce [--op allreduce|reduce_scatter|allgather|broadcast|all]\n"
	"         [--dtype f32|f64|i32|i64] [--min-bytes 8] [--max-bytes 256M] [--iters 20]\n"
	"         [--warmup 5] [--inplace] [--no-check] [--json]\n";

static MPI_Datatype mpi_type(uint32_t dt)
{
	switch (dt) {
	case ACCEL_DTYPE_F32: return MPI_FLOAT;
	case ACCEL_DTYPE_F64: return MPI_DOUBLE;
	case ACCEL_DTYPE_I32: return MPI_INT32_T;
	case ACCEL_DTYPE_I64: return MPI_INT64_T;
	default: return MPI_DATATYPE_NULL;
	}
}

static int run_op(int op, MPI_Datatype t, void *send, void *recv, uint64_t count, int inplace)
{
	int n = (int)count;
	switch (op) {
	case CB_OP_ALLREDUCE:
		return MPI_Allreduce(inplace ? MPI_IN_PLACE : send, inplace ? send : recv, n, t, MPI_SUM,
		                     MPI_COMM_WORLD);
	case CB_OP_REDUCE_SCATTER:
		return MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, inplace ? send : recv, n,
		                                t, MPI_SUM, MPI_COMM_WORLD);
	case CB_OP_ALLGATHER:
		return MPI_Allgather(inplace ? MPI_IN_PLACE : send, n, t, recv, n, t, MPI_COMM_WORLD);
	default:
		return MPI_Bcast(recv, n, t, 0, MPI_COMM_WORLD);
	}
}

int main(int argc, char **argv)
{
	int rank = 0, world = 1, op_sel = CB_OP_ALLREDUCE, iters = 20, warmup = 5, json = 0;
	int inplace = 0, check = 1;
	uint64_t min_bytes = 8, max_bytes = 256ull << 20;
	uint32_t dt = ACCEL_DTYPE_F32;
	const char *dname = "f32";
	char host[256] = "";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--inplace")) {
			inplace = 1;
		} else if (!strcmp(a, "--no-check")) {
			check = 0;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			if (rank == 0)
				fputs(usage_text, stdout);
			MPI_Finalize();
			return 0;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(a, "--op")) {
			bad = (op_sel = cb_op_parse(v)) < 0;
			i++;
		} else if (!strcmp(a, "--dtype")) {
			dt = cb_dtype_parse(v);
			dname = v;
			bad = mpi_type(dt) == MPI_DATATYPE_NULL;
			i++;
		} else if (!strcmp(a, "--min-bytes")) {
			bad = cb_parse_bytes(v, &min_bytes) || min_bytes == 0;
			i++;
		} else if (!strcmp(a, "--max-bytes")) {
			bad = cb_parse_bytes(v, &max_bytes);
			i++;
		} else if (!strcmp(a, "--iters")) {
			bad = (iters = atoi(v)) < 1;
			i++;
		} else if (!strcmp(a, "--warmup")) {
			bad = (warmup = atoi(v)) < 0;
			i++;
		} else {
			bad = 1;
		}
		if (bad) {
			if (rank == 0)
				fprintf(stderr, "mpi_allreduce: bad argument '%s%s%s'\n%s", a, v ? " " : "",
				        v ? v : "", usage_text);
			MPI_Finalize();
			return 2;
		}
	}
	if (max_bytes < min_bytes)
		max_bytes = min_bytes;
	gethostname(host, sizeof(host) - 1);

	const char *backend = "mpi";
#ifdef OPEN_MPI
	backend = "openmpi";
#endif
	MPI_Datatype t = mpi_type(dt);
	size_t es = cb_dtype_size(dt);
	/* Buffers for the largest size: all-gather's receive side is the
	 * largest of all ops at a given reported size. */
	uint64_t cap = max_bytes + (uint64_t)world * es;
	char *send = aligned_alloc(64, (cap + 63) / 64 * 64);
	char *recv = aligned_alloc(64, (cap + 63) / 64 * 64);
	double *times = malloc(sizeof(double) * (size_t)iters);
	if (!send || !recv || !times) {
		fprintf(stderr, "mpi_allreduce: out of memory for %llu-byte buffers\n",
		        (unsigned long long)cap);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(recv, 0, cap);
	if (rank == 0 && !json)
		cb_table_header(stdout, backend, "user", world, host, inplace);

	int first = op_sel == CB_OP_COUNT ? 0 : op_sel, last = op_sel == CB_OP_COUNT ? 3 : op_sel;
	int status = 0;
	for (int op = first; op <= last; op++) {
		for (uint64_t b = min_bytes; b <= max_bytes; b *= 2) {
			uint64_t count, bytes;
			if (!cb_counts(op, b, es, world, &count, &bytes))
				continue;
			cb_fill(op, dt, send, count, rank, world);
			if (op == CB_OP_BROADCAST)
				cb_fill(op, dt, recv, count, rank, world);
			if (op == CB_OP_ALLGATHER && inplace)  /* MPI_IN_PLACE: own block at slot rank */
				memcpy(recv + (uint64_t)rank * count * es, send, count * es);
			for (int k = 0; k < warmup; k++)
				run_op(op, t, send, recv, count, inplace);
			double sum = 0.0;
			for (int k = 0; k < iters; k++) {
				double t0 = cb_now_s();
				if (run_op(op, t, send, recv, count, inplace) != MPI_SUCCESS)
					status = 1;
				times[k] = (cb_now_s() - t0) * 1e6;
				sum += times[k];
			}
			double loc[2] = {cb_median(times, iters), sum / iters}, glob[2];
			MPI_Allreduce(loc, glob, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			int ok = 0;
			if (check && (!inplace || op == CB_OP_ALLREDUCE)) {
				uint64_t bad = 0;
				void *res = recv;
				if (inplace) {   /* one more call from the input, checked */
					cb_fill(op, dt, send, count, rank, world);
					if (run_op(op, t, send, recv, count, 1) != MPI_SUCCESS)
						status = 1;
					res = send;
				}
				ok = cb_check(op, dt, res, count, rank, world, &bad);
				if (ok < 0)
					fprintf(stderr, "mpi_allreduce: rank %d: %s of %llu bytes: element %llu "
					        "is wrong\n", rank, cb_op_names[op], (unsigned long long)bytes,
					        (unsigned long long)bad);
			}
			int gok = 0;
			MPI_Allreduce(&ok, &gok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
			if (gok < 0)
				status = 1;
			cb_row row = {cb_op_names[op], dname, bytes, count, glob[0], glob[1], world,
			              backend, "user", host, iters, gok, inplace};
			if (rank == 0) {
				if (json)
					cb_json(stdout, &row, op);
				else
					cb_table_row(stdout, &row, op);
			}
			if (b > UINT64_MAX / 2)
				break;
		}
	}
	free(send);
	free(recv);
	free(times);
	MPI_Finalize();
	return status;
}
