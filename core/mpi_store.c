/* SPDX-License-Identifier: MIT */
/* core/mpi_store.c: a rendezvous store for jobs started by an MPI launcher
 * (mpi_store.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "config.h"
#include "ctx-impl.h"
#include "log.h"
#include "mpi_store.h"
#include "store.h"

/* What rank 0 broadcasts: where its store listens, or why it has none. */
typedef struct {
	char magic[8];          /* "accelMSt" */
	int32_t port;           /* 0: no store (why says so) */
	uint32_t pad;
	uint64_t token;         /* the job token the store wants in every HELLO */
	char host[256];         /* gethostname() */
	char boot[40];          /* /proc/sys/kernel/random/boot_id: same host */
	char why[256];
} mpi_store_msg;

/* The buffers of the two collectives.  MPI may still write them after a
 * collective timed out, even after the context is gone (comm ABI), so
 * after a failure they are never freed: kept on a list (not a leak). */
typedef struct mpi_store_bufs {
	struct mpi_store_bufs *next;
	mpi_store_msg m;
	int32_t ok;
	int32_t oks[];
} mpi_store_bufs;

static pthread_mutex_t g_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static mpi_store_bufs *g_lost;

static void keep_lost(mpi_store_bufs *b)
{
	pthread_mutex_lock(&g_lost_mu);
	b->next = g_lost;
	g_lost = b;
	pthread_mutex_unlock(&g_lost_mu);
}

#define MPI_STORE_MAGIC "accelMSt"
/* The others must be connected (or have given up) within this, and within
 * half of comm.timeout_s: rank 0 meanwhile waits in the host all-gather
 * that follows, under that timeout.  Rank 0's server listens before it
 * sends its address, so only an unreachable host takes that long. */
#define MPI_STORE_JOIN_MS 15000

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void read_boot_id(char *buf, size_t cap)
{
	buf[0] = '\0';
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return;
	if (!fgets(buf, (int)cap, f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
}

static void this_host(mpi_store_msg *m)
{
	if (gethostname(m->host, sizeof(m->host) - 1) != 0)
		m->host[0] = '\0';
	m->host[sizeof(m->host) - 1] = '\0';
	read_boot_id(m->boot, sizeof(m->boot));
}

static uint64_t job_token(void)
{
	uint64_t t = 0;
	if (getrandom(&t, sizeof(t), GRND_NONBLOCK) != (ssize_t)sizeof(t)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		t = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
		    ((uint64_t)getpid() << 32);
	}
	return t ? t : 1;
}

/* Join rank 0's store: on rank 0's host (same host name and boot id) over
 * loopback first, then by its host name if loopback was refused or led
 * elsewhere (a network namespace of its own); elsewhere by its host name.
 * A join whose handshake went unanswered is not retried at another address
 * (the server may have counted it).  Returns the address that worked, or
 * NULL with the error in `why`. */
static const char *mpi_store_join(accel_ctx *ctx, const mpi_store_msg *m, int64_t within_ms,
                                  int64_t timeout_ms, int64_t keepalive_ms, accel_store **st,
                                  char *why, size_t cap)
{
	mpi_store_msg me;
	memset(&me, 0, sizeof(me));
	this_host(&me);
	int local = m->host[0] && m->boot[0] && !strcmp(me.host, m->host) &&
	            !strcmp(me.boot, m->boot);
	const char *addrs[2];
	int n = 0;
	if (local)
		addrs[n++] = "127.0.0.1";
	if (m->host[0])
		addrs[n++] = m->host;
	if (n == 0) {
		snprintf(why, cap, "rank 0 has no host name to connect to");
		return NULL;
	}
	int64_t start = mono_ms();
	for (int i = 0; i < n; i++) {
		/* a refused loopback fails at once (the server listened before
		 * it sent its address), so the whole time is each one's */
		int64_t left = start + within_ms - mono_ms();
		accel_err e;
		accelp_err_clear(&e);
		int rc = accelp_store_join(addrs[i], m->port, ctx->world.rank, ctx->world.world_size,
		                          left > 0 ? left : 1, timeout_ms, keepalive_ms, m->token, st,
		                          &e);
		if (rc == ACCEL_OK)
			return addrs[i];
		*st = NULL;
		snprintf(why, cap, "%s", e.msg[0] ? e.msg : accel_status_str(rc));
		if (rc == ACCEL_ERR_TIMEOUT)
			break;
	}
	return NULL;
}

/* Every rank takes part in both collectives whatever happened before
 * them (mpi_store.h). */
int accelp_mpi_store_start(accel_ctx *ctx)
{
	int32_t on = 1;
	if (ctx->store || ctx->world.world_size < 2 || !ctx->launcher ||
	    strncmp(ctx->launcher, "mpi", 3) != 0)
		return ACCEL_OK;
	accelp_config_get_bool(ctx->cfg, "comm.mpi_store", &on);
	if (!on)
		return ACCEL_OK;
	int64_t timeout_ms, keepalive_ms;
	accelp_comm_times(ctx, &timeout_ms, &keepalive_ms);
	int32_t rank = ctx->world.rank, world = ctx->world.world_size;
	accel_store *st = NULL;
	char why[ACCEL_ERRMSG_MAX] = "";
	int r;
	mpi_store_bufs *bufs = calloc(1, sizeof(*bufs) + (size_t)world * sizeof(int32_t));
	if (!bufs)   /* before the first collective: the others then fail in it, not hang */
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	mpi_store_msg *m = &bufs->m;
	if (rank == 0) {
		accel_err e;
		accelp_err_clear(&e);
		memcpy(m->magic, MPI_STORE_MAGIC, sizeof(m->magic));
		this_host(m);
		m->token = job_token();
		if (accelp_store_new_host(world, timeout_ms, keepalive_ms, m->token, &st, &e) ==
		    ACCEL_OK)
			m->port = accelp_store_port(st);
		else
			snprintf(m->why, sizeof(m->why), "%.255s",
			         e.msg[0] ? e.msg : "the store did not start (no message)");
	}
	accel_view v = {.struct_size = sizeof(v), .dtype = ACCEL_DTYPE_U8,
	                .device = ACCEL_DEVICE_CPU, .data = m, .numel = sizeof(*m)};
	if ((r = accelp_comm_broadcast(ctx->comm, &v, 0, NULL)))
		goto fail;
	m->why[sizeof(m->why) - 1] = '\0';
	m->host[sizeof(m->host) - 1] = '\0';
	m->boot[sizeof(m->boot) - 1] = '\0';
	int no_store = 0;   /* rank 0 has none: nothing to reach */
	const char *via = NULL;
	if (memcmp(m->magic, MPI_STORE_MAGIC, sizeof(m->magic)) != 0) {
		snprintf(why, sizeof(why), "rank 0 sent something else than its store's address "
		         "(ranks out of step at start-up?)");
	} else if (m->port <= 0) {
		no_store = 1;
		if (rank == 0)
			accelp_log(ACCEL_LOG_WARN, "the job runs without a rendezvous store: rank 0 "
			          "could not start one (comm.mpi_store): %s; timeouts of mpi and nccl "
			          "collectives will not name the missing ranks", m->why);
	} else if (rank != 0) {
		int64_t within = timeout_ms / 2 < MPI_STORE_JOIN_MS ? timeout_ms / 2 : MPI_STORE_JOIN_MS;
		via = mpi_store_join(ctx, m, within > 0 ? within : 1, timeout_ms, keepalive_ms, &st,
		                     why, sizeof(why));
	}
	/* Every rank learns which ranks are connected: all use the store, or none. */
	bufs->ok = !no_store && why[0] == '\0' && (rank == 0 ? st != NULL : via != NULL);
	accel_view sv = {.struct_size = sizeof(sv), .dtype = ACCEL_DTYPE_I32,
	                 .device = ACCEL_DEVICE_CPU, .data = &bufs->ok, .numel = 1};
	accel_view rv = {.struct_size = sizeof(rv), .dtype = ACCEL_DTYPE_I32,
	                 .device = ACCEL_DEVICE_CPU, .data = bufs->oks, .numel = (uint64_t)world};
	if ((r = accelp_comm_allgather(ctx->comm, &sv, &rv, NULL)))
		goto fail;
	char bad[160] = "";
	size_t used = 0;
	int nbad = 0, listed = 0;
	for (int32_t q = 0; q < world; q++) {
		if (bufs->oks[q])
			continue;
		nbad++;
		int k = snprintf(bad + used, sizeof(bad) - used, "%s%d", listed ? ", " : "", (int)q);
		if (k > 0 && (size_t)k < sizeof(bad) - used - 24) {   /* room for the tail */
			used += (size_t)k;
			listed++;
		} else {
			bad[used] = '\0';
		}
	}
	if (listed < nbad)
		snprintf(bad + used, sizeof(bad) - used, " and %d more", nbad - listed);
	char host[sizeof(m->host)];
	int port = m->port, via_loopback = via && !strcmp(via, "127.0.0.1");
	snprintf(host, sizeof(host), "%s", m->host);
	free(bufs);   /* both collectives completed (via may point into it) */
	via = NULL;
	if (nbad == 0) {
		ctx->store = st;
		if (rank == 0)
			accelp_log(ACCEL_LOG_DEBUG, "started by %s without ACCEL_MASTER_ADDR/PORT: rank 0 "
			          "hosts the rendezvous store on %s:%d", ctx->launcher, host, port);
		else
			accelp_log(ACCEL_LOG_DEBUG, "connected to rank 0's rendezvous store at %s:%d (%s)",
			          via_loopback ? "127.0.0.1" : host, port,
			          via_loopback ? "same host" : "rank 0's host name");
		return ACCEL_OK;
	}
	accelp_store_abandon(st);
	if (no_store)
		return ACCEL_OK;   /* rank 0 said why */
	if (why[0])
		accelp_log(ACCEL_LOG_WARN, "no rendezvous store in this job: %s", why);
	if (rank == 0)
		accelp_log(ACCEL_LOG_WARN, "the job runs without a rendezvous store: %s %s could not "
		          "reach rank 0's store on %s:%d (comm.mpi_store); timeouts of mpi and nccl "
		          "collectives will not name the missing ranks. Set ACCEL_MASTER_ADDR and "
		          "ACCEL_MASTER_PORT (mpirun -x) to an address of rank 0's node that the "
		          "others reach, or comm.mpi_store=false to skip the attempt",
		          nbad > 1 ? "ranks" : "rank", bad, host, port);
	return ACCEL_OK;
fail:
	keep_lost(bufs);   /* MPI may still write them */
	if (ctx->err.code) {
		/* say which step of the start-up the collective was */
		char was[ACCEL_ERRMSG_MAX];
		int code = ctx->err.code;
		snprintf(was, sizeof(was), "%s", ctx->err.msg);
		accelp_err_clear(&ctx->err);
		accelp_err_set(&ctx->err, code, "while rank 0 announced its rendezvous store over MPI "
		              "(comm.mpi_store; false skips this step): %s", was);
		/* ranks that got through tell why when they use the store */
		if (st)
			accelp_store_fail(st, ctx->err.msg);
	}
	accelp_store_abandon(st);
	return ctx->err.code ? ctx->err.code : r;
}
