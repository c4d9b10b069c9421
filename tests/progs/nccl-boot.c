/* SPDX-License-Identifier: MIT */
/* tests/progs/nccl-boot.c: the nccl backend's bootstrap inside a real job,
 * without a GPU, run on 2 ranks under mpirun.  The device backend is the
 * fxdev fixture (tests/fixtures/fxdev), which runs the nccl backend's own
 * bootstrap code and host callbacks with a made-up id.
 *
 *   nccl-boot mpi     no ACCEL_MASTER_ADDR and comm.mpi_store=false: the job
 *                     has no rendezvous store, so the id must come by
 *                     broadcast over the host backend (mpi)
 *   nccl-boot store   ACCEL_MASTER_ADDR/PORT set: the id goes through the
 *                     store, and no host collective is spent on it
 *   nccl-boot auto    no ACCEL_MASTER_ADDR, comm.mpi_store at its default:
 *                     rank 0 hosts a store it announced over mpi, and the id
 *                     goes through it as in mode store
 *   nccl-boot nest    as mpi, and fxdev's init() first makes a broadcast on
 *                     a CUDA buffer, which must be refused (ACCEL_ERR_STATE)
 *                     instead of starting init() again without end
 *
 * The first collective on a CUDA-labelled buffer brings the device backend
 * up between two host all-reduces; every rank must then hold rank 0's id,
 * and the host collectives around it must still match.  Exit 0 only if
 * every check passed on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "accel/accel.h"
#include "comm.h"
#include "ctx-impl.h"

static int g_rank, g_failures;

#include "free-port.h"
#include "rank-check.h"


/* A host all-reduce of the ranks' numbers: the sequence must still match. */
static void host_sum(accel_ctx *ctx, int world, const char *when)
{
	int32_t v = g_rank + 1;
	int rc = accel_allreduce(ctx, &v, &v, 1, ACCEL_DTYPE_I32, ACCEL_RED_SUM);
	CHECK(rc == ACCEL_OK, "host allreduce %s: %s", when, accel_errmsg(ctx));
	CHECK(rc != ACCEL_OK || v == world * (world + 1) / 2, "host allreduce %s gave %d", when,
	      (int)v);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int world = 0, level = 0;
	if (strcmp(mode, "mpi") != 0 && strcmp(mode, "store") != 0 && strcmp(mode, "nest") != 0 &&
	    strcmp(mode, "auto") != 0) {
		fprintf(stderr, "usage: mpirun -n 2 nccl-boot mpi|store|auto|nest\n");
		return 2;
	}
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);

	unsetenv("ACCEL_MASTER_ADDR");
	unsetenv("ACCEL_MASTER_PORT");
	unsetenv("MASTER_ADDR");
	if (!strcmp(mode, "nest"))
		setenv("FXDEV_NEST", "1", 1);
	else
		unsetenv("FXDEV_NEST");
	if (!strcmp(mode, "store")) {
		int port = g_rank == 0 ? free_port_try() : 0;
		MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
		char p[16];
		snprintf(p, sizeof(p), "%d", port);
		setenv("ACCEL_MASTER_ADDR", "127.0.0.1", 1);
		setenv("ACCEL_MASTER_PORT", p, 1);
	}
	/* modes mpi and nest: no store at all */
	static const char *const sets_nostore[] = {"backend=fxdev", "comm.mpi_store=false", NULL};
	static const char *const sets[] = {"backend=fxdev", NULL};
	int want_store = !strcmp(mode, "store") || !strcmp(mode, "auto");
	accel_opts o = {.struct_size = sizeof(o), .sets = want_store ? sets : sets_nostore};
	accel_ctx *ctx = NULL;
	int rc = accel_ctx_new(&o, &ctx);
	CHECK(rc == ACCEL_OK, "accel_ctx_new: %s", ctx ? accel_errmsg(ctx) : accel_status_str(rc));
	if (rc == ACCEL_OK) {
		CHECK(!strcmp(accelp_comm_backend_name(ctx->comm), "mpi"),
		      "host backend %s, expected mpi", accelp_comm_backend_name(ctx->comm));
		CHECK((ctx->store != NULL) == want_store, "store %s in mode %s",
		      ctx->store ? "present" : "absent", mode);
		host_sum(ctx, world, "before");
		uint64_t seq0 = accelp_comm_seq(ctx->comm);

		unsigned char got[4 + 128];
		memset(got, 0xee, sizeof(got));
		accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_U8,
		                .device = ACCEL_DEVICE_CUDA, .device_index = 0, .data = got,
		                .numel = sizeof(got)};
		rc = accelp_comm_broadcast(ctx->comm, &v, 0, NULL);
		CHECK(rc == ACCEL_OK, "device broadcast (brings fxdev up): %s", accel_errmsg(ctx));
		/* the store path spends no host collective; the broadcast path one */
		uint64_t host_ops = accelp_comm_seq(ctx->comm) - seq0 - 1;
		CHECK(host_ops == (uint64_t)(want_store ? 0 : 1),
		      "%llu host collectives spent on the bootstrap in mode %s",
		      (unsigned long long)host_ops, mode);
		host_sum(ctx, world, "after");

		int32_t via = -1;
		memcpy(&via, got, sizeof(via));
		CHECK(via == want_store, "id came %s in mode %s",
		      via ? "through the store" : "by broadcast", mode);
		unsigned char *all = malloc(sizeof(got) * (size_t)world);
		MPI_Allgather(got, (int)sizeof(got), MPI_BYTE, all, (int)sizeof(got), MPI_BYTE,
		              MPI_COMM_WORLD);
		for (int q = 1; q < world; q++)
			CHECK(!memcmp(all + 4, all + (size_t)q * sizeof(got) + 4, 128),
			      "rank %d holds another id than rank 0", q);
		int nonzero = 0;
		for (int i = 4; i < (int)sizeof(got); i++)
			nonzero |= all[i] != 0 && all[i] != 0xee;
		CHECK(nonzero, "rank 0's id is empty");
		free(all);
	}
	accel_ctx_free(ctx);
	int total = 0;
	MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("%s: nccl bootstrap (%s), %d failed check(s) over %d ranks\n",
		       total ? "FAIL" : "PASS", mode, total, world);
	MPI_Finalize();
	return total ? 1 : 0;
}
