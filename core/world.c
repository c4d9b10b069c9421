/* SPDX-License-Identifier: MIT */
/* core/world.c: rank and world size from the launcher's environment.
 *
 * Each launcher has its own variables; the table of sources below keeps the
 * per-launcher knowledge in one place so a message can always name the
 * variables that disagree. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "world.h"

typedef struct wsrc {
	accel_world_getvar_fn get;
	void *ud;
	const char *launcher;
	accel_err *err;
} wsrc;

static const char *getvar(const wsrc *s, const char *name)
{
	const char *v = s->get(name, s->ud);
	return (v && *v) ? v : NULL;
}

/* Strict decimal int: the whole string (digits, an optional leading '-';
 * no spaces or '+'), within int range. */
static int parse_int(const char *s, long *ret)
{
	char *end;
	if (!((s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9')))
		return -1;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end)
		return -1;
	if (errno || v < INT_MIN || v > INT_MAX)
		return -2;  /* an integer, but not one an int holds */
	*ret = v;
	return 0;
}

/* Sizes and counts (WORLD_SIZE, NUM_NODES, NTASKS, LOCALNRANKS, ...) are at
 * least 1; ranks and node numbers at least 0. */
static int min_of(const char *name)
{
	size_t n = strlen(name);
	return (n >= 4 && !strcmp(name + n - 4, "SIZE")) || strstr(name, "NUM_") ||
	       strstr(name, "NNODES") || strstr(name, "NRANKS") || strstr(name, "NTASKS");
}

/* Read integer variable `name` into *ret: 1 when set, 0 when unset, <0 on a
 * malformed value (error recorded).  A value out of range (negative, a
 * size of 0, or past INT_MAX) is one rule with one message. */
static int read_int(const wsrc *s, const char *name, int *ret)
{
	const char *v = getvar(s, name);
	long x;
	int min = min_of(name);
	if (!v)
		return 0;
	int p = parse_int(v, &x);
	if (p == -1)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s='%s' is not an integer (read as the world of %s)",
		                     name, v, s->launcher);
	/* -1 stands for "not given" below, so a given negative is refused
	 * here, by the same rule as 0 for a size. */
	if (p == -2 || x < min)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%s is out of range: must be %d..%d (read as the world of %s)",
		                     name, v, min, INT_MAX, s->launcher);
	*ret = (int)x;
	return 1;
}

static int require_int(const wsrc *s, const char *name, const char *because, int *ret)
{
	int r = read_int(s, name, ret);
	if (r == 0)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s is set but %s is not: cannot tell the world of %s",
		                     because, name, s->launcher);
	return r < 0 ? r : ACCEL_OK;
}

/* The number of tasks on node `node` from Slurm's "2(x3),1" format. */
static int slurm_tasks_on_node(const char *spec, int node, int *ret)
{
	const char *p = spec;
	int idx = 0;
	while (*p) {
		char *end;
		if (*p < '0' || *p > '9')
			return -1;
		errno = 0;
		long n = strtol(p, &end, 10), rep = 1;
		if (errno || n > INT_MAX)
			return -1;
		p = end;
		if (*p == '(') {
			if (p[1] != 'x' || p[2] < '0' || p[2] > '9')
				return -1;
			rep = strtol(p + 2, &end, 10);
			if (errno || end == p + 2 || *end != ')' || rep < 1 || rep > INT_MAX)
				return -1;
			p = end + 1;
		}
		if (*p != ',' && *p)
			return -1;
		if (node < (long)idx + rep) {
			*ret = (int)n;
			return 0;
		}
		idx += (int)rep;
		if (*p == ',')
			p++;
	}
	return -1;
}

/* First host of a Slurm host list: "gpu[03-05,9],cpu1" -> "gpu03",
 * "gpu[07-09]-ib" -> "gpu07-ib", "rack[1-2]-node[01-04]" -> "rack1-node01":
 * the name up to the first top-level ',', each bracket replaced by its
 * first value. */
static void slurm_first_host(const char *list, char *out, size_t cap)
{
	size_t n = 0;
	const char *p = list;
	while (*p && *p != ',') {
		if (*p == '[') {
			p++;
			while (*p && *p != '-' && *p != ',' && *p != ']') {
				if (n + 1 < cap)
					out[n++] = *p;
				p++;
			}
			while (*p && *p != ']')
				p++;
			if (*p == ']')
				p++;
			continue;
		}
		if (n + 1 < cap)
			out[n++] = *p;
		p++;
	}
	out[n] = '\0';
}

/* Keep only characters safe in file and segment names. */
static void sanitize_id(const char *in, char *out, size_t cap)
{
	size_t n = 0;
	for (; *in && n + 1 < cap; in++) {
		char c = *in;
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		         c == '.' || c == '_' || c == '-';
		out[n++] = ok ? c : '_';
	}
	out[n] = '\0';
}

/* Derive node_rank/num_nodes for launchers that only give local values. */
static void derive_nodes(accel_world_v1 *w)
{
	w->node_rank = -1;
	w->num_nodes = -1;
	if (w->local_world_size <= 0 || w->local_rank < 0)
		return;
	if (w->world_size % w->local_world_size == 0 &&
	    w->rank % w->local_world_size == w->local_rank) {
		w->node_rank = w->rank / w->local_world_size;
		w->num_nodes = w->world_size / w->local_world_size;
	}
}

typedef struct names {
	const char *rank, *size, *local_rank, *local_size, *node_rank, *num_nodes;
} names;

/* Range checks common to all sources; messages name the variables. */
static int check_world(const wsrc *s, const names *nm, const accel_world_v1 *w)
{
	if (w->world_size < 1)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG, "%s=%d: the world size must be >= 1 (%s)",
		                     nm->size, w->world_size, s->launcher);
	if (w->rank < 0 || w->rank >= w->world_size)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%d is not in 0..%s-1 (%s=%d) (%s)", nm->rank, w->rank,
		                     nm->size, nm->size, w->world_size, s->launcher);
	if (nm->local_size && w->local_world_size != -1 &&
	    (w->local_world_size < 1 || w->local_world_size > w->world_size))
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%d is not in 1..%s (%s=%d) (%s)", nm->local_size,
		                     w->local_world_size, nm->size, nm->size, w->world_size,
		                     s->launcher);
	if (nm->local_rank && w->local_rank != -1 && w->local_world_size != -1 &&
	    (w->local_rank < 0 || w->local_rank >= w->local_world_size))
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%d is not in 0..%s-1 (%s=%d) (%s)", nm->local_rank,
		                     w->local_rank, nm->local_size, nm->local_size,
		                     w->local_world_size, s->launcher);
	if (nm->local_rank && w->local_rank != -1 && w->local_world_size == -1 &&
	    (w->local_rank < 0 || w->local_rank >= w->world_size))
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%d is not in 0..%s-1 (%s=%d) (%s)", nm->local_rank,
		                     w->local_rank, nm->size, nm->size, w->world_size, s->launcher);
	if (nm->num_nodes && w->num_nodes != -1 &&
	    (w->num_nodes < 1 || w->num_nodes > w->world_size))
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%d is not in 1..%s (%s=%d) (%s)", nm->num_nodes, w->num_nodes,
		                     nm->size, nm->size, w->world_size, s->launcher);
	if (nm->node_rank && nm->num_nodes && w->node_rank != -1 && w->num_nodes != -1 &&
	    (w->node_rank < 0 || w->node_rank >= w->num_nodes))
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s=%d is not in 0..%s-1 (%s=%d) (%s)", nm->node_rank,
		                     w->node_rank, nm->num_nodes, nm->num_nodes, w->num_nodes,
		                     s->launcher);
	return ACCEL_OK;
}

/* Optional integer with a default. */
static int opt_int(const wsrc *s, const char *name, int def, int *ret)
{
	*ret = def;
	int r = read_int(s, name, ret);
	return r < 0 ? r : ACCEL_OK;
}

typedef struct result {
	accel_world_v1 w;
	char job_id[ACCEL_WORLD_JOB_ID_MAX];
	char addr[ACCEL_WORLD_ADDR_MAX];
	int port;
	const char *launcher;
} result;

static int from_accel(wsrc *s, result *r)
{
	static const names nm = {ACCEL_ENV_RANK, ACCEL_ENV_WORLD_SIZE, ACCEL_ENV_LOCAL_RANK,
	                         ACCEL_ENV_LOCAL_WORLD_SIZE, ACCEL_ENV_NODE_RANK,
	                         ACCEL_ENV_NUM_NODES};
	accel_world_v1 *w = &r->w;
	int rc;
	/* the variable that made us look: named when its partner is missing */
	const char *why = getvar(s, nm.rank) ? nm.rank : nm.size;
	if ((rc = require_int(s, nm.rank, why, &w->rank)) < 0 ||
	    (rc = require_int(s, nm.size, why, &w->world_size)) < 0)
		return rc;
	/* Defaults describe what our launcher would have set (block mapping). */
	if ((rc = opt_int(s, nm.local_size, w->world_size, &w->local_world_size)) < 0)
		return rc;
	int ls = w->local_world_size > 0 ? w->local_world_size : 1;
	if ((rc = opt_int(s, nm.local_rank, w->rank % ls, &w->local_rank)) < 0 ||
	    (rc = opt_int(s, nm.num_nodes, w->world_size % ls ? 1 : w->world_size / ls,
	                  &w->num_nodes)) < 0 ||
	    (rc = opt_int(s, nm.node_rank, w->rank / ls, &w->node_rank)) < 0)
		return rc;
	if ((rc = check_world(s, &nm, w)) < 0)
		return rc;
	const char *jid = getvar(s, ACCEL_ENV_JOB_ID);
	if (jid)
		sanitize_id(jid, r->job_id, sizeof(r->job_id));
	return ACCEL_OK;
}

/* Launchers that give rank, size and the local pair (local ones optional)
 * and no node numbers: read them, check them, derive the nodes. */
static int read_mpi_style(wsrc *s, const names *nm, accel_world_v1 *w)
{
	int rc;
	const char *why = getvar(s, nm->rank) ? nm->rank : nm->size;
	if ((rc = require_int(s, nm->rank, why, &w->rank)) < 0 ||
	    (rc = require_int(s, nm->size, why, &w->world_size)) < 0 ||
	    (rc = opt_int(s, nm->local_rank, -1, &w->local_rank)) < 0 ||
	    (rc = opt_int(s, nm->local_size, -1, &w->local_world_size)) < 0)
		return rc;
	if ((rc = check_world(s, nm, w)) < 0)
		return rc;
	derive_nodes(w);
	return ACCEL_OK;
}

static int from_ompi(wsrc *s, result *r)
{
	static const names nm = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	                         "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL,
	                         NULL};
	accel_world_v1 *w = &r->w;
	int rc;
	if ((rc = read_mpi_style(s, &nm, w)) < 0)
		return rc;
	const char *ns = getvar(s, "PMIX_NAMESPACE");
	if (!ns)
		ns = getvar(s, "OMPI_MCA_ess_base_jobid");
	if (ns) {
		char tmp[ACCEL_WORLD_JOB_ID_MAX];
		snprintf(tmp, sizeof(tmp), "ompi-%s", ns);
		sanitize_id(tmp, r->job_id, sizeof(r->job_id));
	}
	return ACCEL_OK;
}

static int from_pmi(wsrc *s, result *r)
{
	static const names nm = {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
	                         NULL, NULL};
	accel_world_v1 *w = &r->w;
	int rc;
	if ((rc = read_mpi_style(s, &nm, w)) < 0)
		return rc;
	const char *ns = getvar(s, "PMIX_NAMESPACE");
	const char *port = getvar(s, "PMI_PORT");
	char tmp[ACCEL_WORLD_JOB_ID_MAX];
	if (ns)
		snprintf(tmp, sizeof(tmp), "pmi-%s", ns);
	else if (port)
		snprintf(tmp, sizeof(tmp), "pmi-%s", port);
	else
		tmp[0] = '\0';
	sanitize_id(tmp, r->job_id, sizeof(r->job_id));
	return ACCEL_OK;
}

static int from_torchrun(wsrc *s, result *r)
{
	static const names nm = {ACCEL_ENV_TORCH_RANK, ACCEL_ENV_TORCH_WORLD_SIZE,
	                         ACCEL_ENV_TORCH_LOCAL_RANK, ACCEL_ENV_TORCH_LOCAL_WORLD_SIZE, NULL,
	                         NULL};
	accel_world_v1 *w = &r->w;
	int rc;
	if ((rc = read_mpi_style(s, &nm, w)) < 0)
		return rc;
	int group;
	if ((rc = read_int(s, ACCEL_ENV_TORCH_GROUP_RANK, &group)) < 0)
		return rc;
	if (rc == 1 && group >= w->world_size)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "GROUP_RANK=%d is not in 0..WORLD_SIZE-1 (WORLD_SIZE=%d) (%s)",
		                     group, w->world_size, s->launcher);
	if (rc == 1 && w->num_nodes == -1)
		w->node_rank = group;
	const char *id = getvar(s, "TORCHELASTIC_RUN_ID");
	if (id) {
		char tmp[ACCEL_WORLD_JOB_ID_MAX];
		snprintf(tmp, sizeof(tmp), "torch-%s", id);
		sanitize_id(tmp, r->job_id, sizeof(r->job_id));
	}
	return ACCEL_OK;
}

static int from_slurm(wsrc *s, result *r)
{
	static const names nm = {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
	                         "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID",
	                         "SLURM_STEP_NUM_NODES"};
	accel_world_v1 *w = &r->w;
	int rc;
	if ((rc = require_int(s, nm.rank, nm.size, &w->rank)) < 0 ||
	    (rc = require_int(s, nm.size, nm.rank, &w->world_size)) < 0 ||
	    (rc = opt_int(s, nm.local_rank, -1, &w->local_rank)) < 0 ||
	    (rc = opt_int(s, nm.node_rank, -1, &w->node_rank)) < 0 ||
	    (rc = opt_int(s, nm.num_nodes, -1, &w->num_nodes)) < 0)
		return rc;
	if (w->num_nodes == -1 && (rc = opt_int(s, "SLURM_NNODES", -1, &w->num_nodes)) < 0)
		return rc;
	w->local_world_size = -1;
	const char *tpn = getvar(s, nm.local_size);
	if (!tpn)
		tpn = getvar(s, "SLURM_TASKS_PER_NODE");
	if (tpn && w->node_rank >= 0 &&
	    slurm_tasks_on_node(tpn, w->node_rank, &w->local_world_size) < 0)
		return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
		                     "%s='%s' does not list the tasks of node %s=%d (srun)",
		                     getvar(s, nm.local_size) ? nm.local_size : "SLURM_TASKS_PER_NODE",
		                     tpn, nm.node_rank, w->node_rank);
	if ((rc = check_world(s, &nm, w)) < 0)
		return rc;
	const char *job = getvar(s, "SLURM_JOB_ID");
	if (!job)
		job = getvar(s, "SLURM_JOBID");
	const char *step = getvar(s, "SLURM_STEP_ID");
	if (!step)
		step = getvar(s, "SLURM_STEPID");
	if (job) {
		char tmp[ACCEL_WORLD_JOB_ID_MAX];
		snprintf(tmp, sizeof(tmp), "slurm-%s.%s", job, step ? step : "0");
		sanitize_id(tmp, r->job_id, sizeof(r->job_id));
		long j, st = 0;
		if (parse_int(job, &j) == 0 && (!step || parse_int(step, &st) == 0))
			r->port = 20000 + (int)(((unsigned long)j * 31u + (unsigned long)st) % 20000u);
	}
	const char *nodes = getvar(s, "SLURM_STEP_NODELIST");
	if (!nodes)
		nodes = getvar(s, "SLURM_JOB_NODELIST");
	if (nodes)
		slurm_first_host(nodes, r->addr, sizeof(r->addr));
	return ACCEL_OK;
}

static int master_from_env(wsrc *s, result *r)
{
	const char *an = ACCEL_ENV_MASTER_ADDR;
	const char *a = getvar(s, an);
	if (!a) {
		an = ACCEL_ENV_TORCH_MASTER_ADDR;
		a = getvar(s, an);
	}
	if (a) {
		if (strlen(a) >= sizeof(r->addr))
			return accelp_err_set(s->err, ACCEL_ERR_CONFIG, "%s is longer than %zu characters",
			                     an, sizeof(r->addr) - 1);
		snprintf(r->addr, sizeof(r->addr), "%s", a);
	} else if (!r->addr[0] && r->w.num_nodes == 1) {
		snprintf(r->addr, sizeof(r->addr), "127.0.0.1");
	}
	const char *pn = ACCEL_ENV_MASTER_PORT;
	const char *p = getvar(s, pn);
	if (!p) {
		pn = ACCEL_ENV_TORCH_MASTER_PORT;
		p = getvar(s, pn);
	}
	if (p) {
		long v;
		if (parse_int(p, &v) < 0 || v < 1 || v > 65535)
			return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
			                     "%s='%s' is not a port number (1..65535)", pn, p);
		/* torchrun's static rendezvous hosts its own store on MASTER_PORT
		 * (TORCHELASTIC_USE_AGENT_STORE=True): accel's goes one above. */
		const char *agent = getvar(s, "TORCHELASTIC_USE_AGENT_STORE");
		if (!strcmp(pn, ACCEL_ENV_TORCH_MASTER_PORT) && !strcmp(s->launcher, "torchrun") && agent &&
		    !strcmp(agent, "True")) {
			if (v == 65535)
				return accelp_err_set(s->err, ACCEL_ERR_CONFIG,
				                     "MASTER_PORT=65535 is torchrun's store, and accel's would "
				                     "be the port above it: set ACCEL_MASTER_PORT");
			v++;
		}
		r->port = (int)v;
	}
	return ACCEL_OK;
}

int accelp_world_from_vars(accel_world_getvar_fn get, void *ud, accel_world_v1 *ret_world,
                          char *job_id, size_t job_id_cap, char *master_addr,
                          size_t master_addr_cap, int *ret_master_port, const char **ret_launcher,
                          accel_err *err)
{
	if (!get || !ret_world || (job_id && !job_id_cap) || (master_addr && !master_addr_cap))
		return accelp_err_set(err, ACCEL_ERR_INVALID_ARG,
		                     "accelp_world_from_vars: NULL output or zero-sized buffer");
	result r;
	memset(&r, 0, sizeof(r));
	r.w.struct_size = sizeof(r.w);
	wsrc s = {get, ud, NULL, err};
	int rc;
	if (getvar(&s, ACCEL_ENV_RANK) || getvar(&s, ACCEL_ENV_WORLD_SIZE)) {
		s.launcher = "accel launch";
		rc = from_accel(&s, &r);
	} else if (getvar(&s, "OMPI_COMM_WORLD_RANK") || getvar(&s, "OMPI_COMM_WORLD_SIZE")) {
		s.launcher = "mpirun (OpenMPI)";
		rc = from_ompi(&s, &r);
	} else if (getvar(&s, "PMI_RANK") || getvar(&s, "PMI_SIZE")) {
		s.launcher = "mpiexec (MPICH/Hydra)";
		rc = from_pmi(&s, &r);
	} else if (getvar(&s, ACCEL_ENV_TORCH_RANK) && getvar(&s, ACCEL_ENV_TORCH_WORLD_SIZE)) {
		/* RANK alone is too common a name to mean a launcher. */
		s.launcher = "torchrun";
		rc = from_torchrun(&s, &r);
	} else if (getvar(&s, "SLURM_PROCID") && getvar(&s, "SLURM_STEP_NUM_TASKS")) {
		s.launcher = "srun";
		rc = from_slurm(&s, &r);
	} else if (getvar(&s, "SLURM_PROCID") && strcmp(getvar(&s, "SLURM_PROCID"), "0") != 0) {
		/* A batch script is task 0 of its allocation (a world of one);
		 * any other task id comes from a step whose variables are gone,
		 * and running it as rank 0 of 1 would train alone in silence. */
		return accelp_err_set(err, ACCEL_ERR_CONFIG,
		                     "SLURM_PROCID=%s says this process is a task of a Slurm step, "
		                     "but SLURM_STEP_NUM_TASKS is not set, so its world is unknown: "
		                     "start it with srun (which sets both), or unset SLURM_PROCID to "
		                     "run it as a single process",
		                     getvar(&s, "SLURM_PROCID"));
	} else {
		s.launcher = "none";
		r.w.rank = 0;
		r.w.world_size = 1;
		r.w.local_rank = 0;
		r.w.local_world_size = 1;
		r.w.node_rank = 0;
		r.w.num_nodes = 1;
		snprintf(r.job_id, sizeof(r.job_id), "solo-%ld", (long)getpid());
		rc = ACCEL_OK;
	}
	if (rc < 0)
		return rc;
	if ((rc = master_from_env(&s, &r)) < 0)
		return rc;
	*ret_world = r.w;
	if (job_id)
		snprintf(job_id, job_id_cap, "%s", r.job_id);
	if (master_addr)
		snprintf(master_addr, master_addr_cap, "%s", r.addr);
	if (ret_master_port)
		*ret_master_port = r.port;
	if (ret_launcher)
		*ret_launcher = s.launcher;
	return ACCEL_OK;
}

static const char *env_get(const char *name, void *ud)
{
	(void)ud;
	return getenv(name);
}

int accelp_world_from_env(accel_world_v1 *ret_world, char *job_id, size_t job_id_cap,
                         char *master_addr, size_t master_addr_cap, int *ret_master_port,
                         const char **ret_launcher, accel_err *err)
{
	return accelp_world_from_vars(env_get, NULL, ret_world, job_id, job_id_cap, master_addr,
	                             master_addr_cap, ret_master_port, ret_launcher, err);
}
