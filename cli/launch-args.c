/* SPDX-License-Identifier: MIT */
/* cli/launch-args.c: the command line of `accel launch`.  One table row
 * per option drives both the parsing and --help: its names, the kind and
 * range of its value, where it goes, and its help text.  Each option takes
 * "--name VALUE" and "--name=VALUE" (a short one also "-n VALUE" and
 * "-nVALUE"); a message about a bad value names the option and the value. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "launch-args.h"

#define MAX_NPROC 1024
#define MAX_WORLD (1 << 20)

static const char *const help_head =
	"Usage: accel launch [OPTIONS] [--] PROGRAM [ARGS...]\n"
	"\n"
	"Start N processes of PROGRAM on this node, tell each its rank through the\n"
	"environment, relay their output, and stop all of them when one fails.\n"
	"\n"
	"Options:\n";

static const char *const help_tail =
	"\n"
	"Each rank gets ACCEL_RANK, ACCEL_LOCAL_RANK, ACCEL_WORLD_SIZE,\n"
	"ACCEL_LOCAL_WORLD_SIZE, ACCEL_NODE_RANK, ACCEL_NUM_NODES, ACCEL_MASTER_ADDR,\n"
	"ACCEL_MASTER_PORT, ACCEL_JOB_ID, ACCEL_LAUNCH_STATE (and ACCEL_CONFIG, ACCEL_SET\n"
	"when given), plus RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,\n"
	"MASTER_PORT.\n"
	"\n"
	"Exit status: 0 when every rank exits 0; 1 when the first rank to fail exited\n"
	"with a non-zero code (the message names the rank and the code), 128+N when it\n"
	"was killed by signal N; 128+N when the launcher itself was stopped by signal N\n"
	"(SIGINT, SIGTERM, SIGHUP); 127 (not found) or 126 (not executable) when\n"
	"PROGRAM cannot be run; 2 for bad usage; 1 for other launcher errors.  With\n"
	"--max-restarts, the status of the last attempt.\n";

typedef enum opt_kind {
	K_INT,     /* a whole number in [lo, hi] into an int: "expected WHAT, LO..HI"    */
	K_SECONDS, /* seconds in [dlo, dhi] into a double: "expected seconds, LO..HI"   */
	K_STRING,  /* into a const char *, after check()                                 */
	K_LIST,    /* appended to a launch_strlist (repeatable), after check()           */
	K_FLAG,    /* takes no value: sets an int to 1                                   */
	K_HELP,    /* takes no value: prints the help, and the command exits 0           */
} opt_kind;

typedef struct optdef {
	const char *name;     /* "--nproc-per-node"                                     */
	const char *shrt;     /* (optional) "-n": also "-n VALUE" and "-nVALUE"          */
	const char *metavar;  /* the value in --help, "N"; NULL: takes no value          */
	opt_kind kind;
	size_t off;           /* the target in launch_opts (not K_HELP)                  */
	long lo, hi;          /* K_INT                                                   */
	double dlo, dhi;      /* K_SECONDS                                               */
	const char *what;     /* K_INT: what the number counts                           */
	const char *empty;    /* (optional) K_STRING: "" is refused as "empty EMPTY"     */
	/* (optional) K_STRING, K_LIST: NULL when v is fine, else why it is not */
	const char *(*check)(const char *v);
	const char *help;     /* the --help text, '\n' between its lines                 */
} optdef;

static const char *check_addr(const char *v)
{
	return !*v || strlen(v) > 255 || strchr(v, ' ') ? "expected a host name or IP address" : NULL;
}

static const char *check_job_id(const char *s)
{
	size_t n = strlen(s);
	const char *why = "use 1..63 characters of [A-Za-z0-9._-]";
	if (n == 0 || n > 63)
		return why;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		      *s == '.' || *s == '_' || *s == '-'))
			return why;
	return NULL;
}

static const char *check_set(const char *v)
{
	const char *eq = strchr(v, '=');
	if (!eq || eq == v)
		return "expected KEY=VALUE (for example seed=3 or optimizer.params.lr=1e-4)";
	if (strchr(v, '\n'))
		return "a value cannot contain a newline";
	return NULL;
}

#define AT(field) offsetof(launch_opts, field)

static const optdef options[N_OPTS] = {
	[OPT_NPROC] = {"--nproc-per-node", "-n", "N", K_INT, AT(nproc), .lo = 1, .hi = MAX_NPROC,
	               .what = "a whole number of processes",
	               .help = "processes on this node (default 1)"},
	[OPT_NNODES] = {"--nnodes", NULL, "M", K_INT, AT(nnodes), .lo = 1, .hi = 65536,
	                .what = "a whole number of nodes",
	                .help = "nodes in the job (default 1); run one launcher per node"},
	[OPT_NODE_RANK] = {"--node-rank", NULL, "R", K_INT, AT(node_rank), .lo = 0, .hi = 65535,
	                   .what = "a node index",
	                   .help = "this node's index, 0..M-1 (required when M > 1)"},
	[OPT_MASTER_ADDR] = {"--master-addr", NULL, "A", K_STRING, AT(addr), .check = check_addr,
	                     .help = "host of rank 0, where the rendezvous store listens\n"
	                             "(default 127.0.0.1; required when M > 1)"},
	[OPT_MASTER_PORT] = {"--master-port", NULL, "P", K_INT, AT(port), .lo = 1, .hi = 65535,
	                     .what = "a port number",
	                     .help = "its port (default: a free port when M = 1; required\n"
	                             "when M > 1)"},
	[OPT_JOB_ID] = {"--job-id", NULL, "ID", K_STRING, AT(job_id_arg), .check = check_job_id,
	                .help = "job id shared by all ranks ([A-Za-z0-9._-], at most 63\n"
	                        "chars; default: random, or derived from the master\n"
	                        "address and port when M > 1)"},
	[OPT_CONFIG] = {"--config", NULL, "F", K_STRING, AT(config),
	                .help = "accel JSON config; ranks get its absolute path in\n"
	                        "ACCEL_CONFIG"},
	[OPT_SET] = {"--set", NULL, "KEY=VALUE", K_LIST, AT(sets), .check = check_set,
	             .help = "override a config key (repeatable); ranks get the list\n"
	                     "in ACCEL_SET, one assignment per line"},
	[OPT_TEE] = {"--tee", NULL, NULL, K_FLAG, AT(tee),
	             .help = "prefix output AND write DIR/rank-R.log (DIR: --log-dir,\n"
	                     "default ./accel-logs/JOB_ID)"},
	[OPT_LOG_DIR] = {"--log-dir", NULL, "D", K_STRING, AT(log_dir), .empty = "directory name",
	                 .help = "write each rank's stdout+stderr to D/rank-R.log and\n"
	                         "print only the launcher's own messages"},
	[OPT_GRACE_S] = {"--grace-s", NULL, "S", K_SECONDS, AT(grace_s), .dlo = 0.0, .dhi = 3600.0,
	                 .help = "seconds between SIGTERM and SIGKILL when stopping ranks\n"
	                         "(default 5)"},
	[OPT_MAX_RESTARTS] = {"--max-restarts", NULL, "N", K_INT, AT(max_restarts), .lo = 0,
	                      .hi = 1000000, .what = "a whole number of restarts",
	                      .help = "when a rank fails, stop the others and start the job\n"
	                              "again, up to N times (default 0); the ranks resume from\n"
	                              "the newest checkpoint the job saved (ACCEL_RESUME)"},
	[OPT_MIN_NPROC] = {"--min-nproc", NULL, "M", K_INT, AT(min_nproc), .lo = 1, .hi = MAX_NPROC,
	                   .what = "a whole number of processes",
	                   .help = "restart with fewer processes, down to M, when slots are\n"
	                           "dropped by --restart-filter (default: -n; one node only)"},
	[OPT_MIN_NODES] = {"--min-nodes", NULL, "K", K_INT, AT(min_nodes), .lo = 1, .hi = 65536,
	                   .what = "a whole number of nodes",
	                   .help = "with --nnodes: when a node's launcher is lost, restart\n"
	                           "with the nodes left, down to K (default: --nnodes);\n"
	                           "node 0 must stay; uses --master-port + 1 as well"},
	[OPT_RESTART_FILTER] = {"--restart-filter", NULL, "CMD", K_STRING, AT(restart_filter),
	                        .empty = "command",
	                        .help = "before a restart, run /bin/sh -c CMD for each slot,\n"
	                                "with SLOT RESTART FAILED_RANK as $1 $2 $3; a non-zero\n"
	                                "exit drops the slot (one node only)"},
	[OPT_FILTER_TIMEOUT] = {"--restart-filter-timeout", NULL, "S", K_SECONDS,
	                        AT(filter_timeout_s), .dlo = 0.1, .dhi = 86400.0,
	                        .help = "seconds CMD may take (default 60); past it\n"
	                                "its process group is killed and the job does not\n"
	                                "restart"},
	[OPT_DRY_RUN] = {"--dry-run", NULL, NULL, K_FLAG, AT(dry_run),
	                 .help = "print each rank's environment and command; start nothing"},
	[OPT_HELP] = {"--help", "-h", NULL, K_HELP, 0, .help = "show this help"},
};

/* Where the option's text starts in --help, and the indent of its further
 * lines. */
#define HELP_COL 26

static void print_help(FILE *f)
{
	fputs(help_head, f);
	for (int k = 0; k < N_OPTS; k++) {
		const optdef *d = &options[k];
		char left[64];
		int n = snprintf(left, sizeof(left), "  %s%s%s%s%s", d->shrt ? d->shrt : "  ",
		                 d->shrt ? ", " : "  ", d->name, d->metavar ? " " : "",
		                 d->metavar ? d->metavar : "");
		/* a name too long for the column is followed by two spaces */
		fprintf(f, "%-*s", n <= HELP_COL - 2 ? HELP_COL : n + 2, left);
		for (const char *h = d->help; *h;) {
			size_t len = strcspn(h, "\n");
			if (h != d->help)
				fprintf(f, "%*s", HELP_COL, "");
			fprintf(f, "%.*s\n", (int)len, h);
			h += len + (h[len] == '\n');
		}
	}
	fputs(help_tail, f);
}

/* "-n/--nproc-per-node" or "--nnodes": how messages name the option. */
static const char *opt_label(const optdef *d, char *buf, size_t cap)
{
	if (!d->shrt)
		return d->name;
	snprintf(buf, cap, "%s/%s", d->shrt, d->name);
	return buf;
}

/* The row argument a names, and its value when a holds one ("--name=V",
 * "-nV"; else *ret_val is NULL); NULL when a names no option. */
static const optdef *find_option(const char *a, const char **ret_val)
{
	*ret_val = NULL;
	for (int k = 0; k < N_OPTS; k++) {
		const optdef *d = &options[k];
		size_t ln = strlen(d->name), sn = d->shrt ? strlen(d->shrt) : 0;
		if (!strcmp(a, d->name) || (d->shrt && !strcmp(a, d->shrt)))
			return d;
		if (!strncmp(a, d->name, ln) && a[ln] == '=') {
			*ret_val = a + ln + 1;
			return d;
		}
		if (d->shrt && d->metavar && !strncmp(a, d->shrt, sn)) {
			*ret_val = a + sn;
			return d;
		}
	}
	return NULL;
}

#define USAGE(...) accelp_cli_usage_error("launch", __VA_ARGS__)

/* Strict integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *ret)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || errno || *end || v < lo || v > hi)
		return -1;
	*ret = (int)v;
	return 0;
}

/* Strict number of seconds in [lo, hi]. */
static int parse_seconds(const char *s, double lo, double hi, double *ret)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !(v >= lo && v <= hi))
		return -1;
	*ret = v;
	return 0;
}

/* Store value v of option d in o: 0, or 2 (bad usage, message printed). */
static int take_option(const optdef *d, const char *v, launch_opts *o)
{
	char lb[64];
	const char *label = opt_label(d, lb, sizeof(lb));
	void *at = (char *)o + d->off;
	const char *why = NULL;
	switch (d->kind) {
	case K_INT:
		if (parse_int(v, d->lo, d->hi, at) < 0)
			return USAGE("%s '%s': expected %s, %ld..%ld", label, v, d->what, d->lo, d->hi);
		return 0;
	case K_SECONDS:
		if (parse_seconds(v, d->dlo, d->dhi, at) < 0)
			return USAGE("%s '%s': expected seconds, %g..%g", label, v, d->dlo, d->dhi);
		return 0;
	case K_STRING:
	case K_LIST:
		if (d->empty && !*v)
			return USAGE("%s: empty %s", label, d->empty);
		if (d->check && (why = d->check(v)) != NULL)
			return USAGE("%s '%s': %s", label, v, why);
		if (d->kind == K_STRING) {
			*(const char **)at = v;
		} else {
			launch_strlist *l = at;
			l->v[l->n++] = (char *)v;
		}
		return 0;
	case K_FLAG:
		*(int *)at = 1;
		return 0;
	case K_HELP:
		break;
	}
	return 0;
}

int accelp_launch_args(int argc, char **argv, launch_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->nproc = 1;
	o->nnodes = 1;
	o->grace_s = 5.0;
	o->filter_timeout_s = 60.0;
	o->sets.v = calloc((size_t)argc + 1, sizeof(*o->sets.v));
	if (!o->sets.v) {
		fprintf(stderr, "accel launch: out of memory\n");
		return 1;
	}
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-' || !a[1])
			break; /* PROGRAM */
		const optdef *d = find_option(a, &v);
		if (!d)
			return USAGE("unknown option '%s'", a);
		if (!d->metavar && v)
			return USAGE("option '%s' takes no value (got '%s')", d->name, a);
		if (d->kind == K_HELP) {
			print_help(stdout);
			return -1;
		}
		if (d->metavar && !v) {
			if (i + 1 >= argc)
				return USAGE("option '%s' needs a value", a);
			v = argv[++i];
		}
		int rc = take_option(d, v, o);
		if (rc)
			return rc;
		o->given[d - options] = 1;
	}
	if (i >= argc)
		return USAGE("no PROGRAM given: accel launch [OPTIONS] -- PROGRAM [ARGS...]");
	if (!argv[i][0])
		return USAGE("PROGRAM is an empty string");
	o->prog = argv + i;
	if (o->nnodes > 1) {
		if (!o->given[OPT_NODE_RANK])
			return USAGE("--node-rank is required with --nnodes %d: each node's launcher "
			             "needs its own index, 0..%d", o->nnodes, o->nnodes - 1);
		if (!o->addr)
			return USAGE("--master-addr is required with --nnodes > 1 (the host of rank 0, "
			             "reachable from every node)");
		if (!o->port)
			return USAGE("--master-port is required with --nnodes > 1 (the same free port on "
			             "every node's command line)");
	}
	if (o->node_rank >= o->nnodes)
		return USAGE("--node-rank %d is not below --nnodes %d", o->node_rank, o->nnodes);
	if (!o->given[OPT_MIN_NPROC])
		o->min_nproc = o->nproc;
	if (o->min_nproc > o->nproc)
		return USAGE("--min-nproc %d is larger than -n/--nproc-per-node %d", o->min_nproc,
		             o->nproc);
	if (o->min_nproc < o->nproc && o->nnodes > 1)
		return USAGE("--min-nproc %d with --nnodes %d: restarting with fewer processes works "
		             "on one node only (every node's launcher would have to agree on the new "
		             "world size)", o->min_nproc, o->nnodes);
	if (!o->given[OPT_MIN_NODES])
		o->min_nodes = o->nnodes;
	if (o->min_nodes > o->nnodes)
		return USAGE("--min-nodes %d is larger than --nnodes %d", o->min_nodes, o->nnodes);
	if (o->given[OPT_MIN_NODES] && o->max_restarts == 0)
		return USAGE("--min-nodes applies to restarts: give --max-restarts N too");
	if (o->nnodes > 1 && o->max_restarts > 0 && o->port >= 65535)
		return USAGE("--master-port %d with --nnodes and --max-restarts: the launchers also "
		             "meet on --master-port + 1, so give a port below 65535", o->port);
	if ((o->given[OPT_MIN_NPROC] || o->restart_filter) && o->max_restarts == 0)
		return USAGE("%s applies to restarts: give --max-restarts N too",
		             o->restart_filter ? "--restart-filter" : "--min-nproc");
	if (o->restart_filter && o->nnodes > 1)
		return USAGE("--restart-filter with --nnodes %d: filtering slots works on one node "
		             "only (with several nodes a node's processes are all or nothing)",
		             o->nnodes);
	if (o->given[OPT_FILTER_TIMEOUT] && !o->restart_filter)
		return USAGE("--restart-filter-timeout applies to --restart-filter: give the filter "
		             "command too");
	if ((long)o->nproc * o->nnodes > MAX_WORLD)
		return USAGE("world size (-n x --nnodes) is larger than 1048576");
	return 0;
}
