/* SPDX-License-Identifier: MIT */
/* cli/cmd-launch.c: `accel launch`: the environment each rank gets and the
 * attempts of --max-restarts.  The command line is read in launch-args.c,
 * the ranks supervised in launch-run.c. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/common/launch-env.h"
#include "cli.h"
#include "launch-args.h"
#include "launch.h"

extern char **environ;

/* How long the node launchers wait for each other: at start, and for a
 * node's report after an attempt (its ranks stop within comm.timeout_s of
 * the others' failure, plus --grace-s). */
#define NODES_TIMEOUT_S 300.0

/* The port the launcher chose for the rendezvous store, held from the
 * choice until the launcher exits (or chooses again for a restart): a
 * socket bound to it with SO_REUSEADDR and never listening.  Rank 0's
 * store, which sets SO_REUSEADDR too, binds and listens on it all the
 * same, while the kernel gives it to no other process in between: a port
 * chosen, released and bound a moment later by rank 0 (after its exec and
 * start-up) could be taken meanwhile by any process asking for a free
 * one, and rank 0 then failed with "address already in use". */
static int port_hold = -1;

static void free_port_release(void)
{
	if (port_hold >= 0)
		close(port_hold);
	port_hold = -1;
}

/* A port that is free now (the kernel's choice), held (port_hold). */
static int free_port(void)
{
	free_port_release();
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0)
		return -1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	socklen_t sl = sizeof(sa);
	int port = -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	if (port < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	port_hold = fd;
	return port;
}

static void make_job_id(const launch_opts *o, char *out, size_t cap)
{
	if (o->job_id_arg) {
		snprintf(out, cap, "%s", o->job_id_arg);
		return;
	}
	uint64_t h;
	if (o->nnodes > 1) {
		/* Every node computes the same id from what they all share. */
		char key[300];
		snprintf(key, sizeof(key), "%s:%d", o->addr, o->port);
		h = 1469598103934665603ull;
		for (const char *p = key; *p; p++)
			h = (h ^ (uint8_t)*p) * 1099511628211ull;
	} else if (getrandom(&h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		h = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
	}
	snprintf(out, cap, "%016llx", (unsigned long long)h);
}

/* mkdir -p */
static int make_dirs(const char *path)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0777) < 0 && errno != EEXIST)
		return -1;
	struct stat stt;
	if (stat(buf, &stt) < 0)
		return -1;
	if (!S_ISDIR(stt.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

/* Shell-quote s for display ('...' or $'...' with escapes). */
static void print_quoted(FILE *f, const char *s)
{
	int plain = *s != '\0', ctrl = 0;
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c == 0x7f)
			ctrl = 1;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("@%_-+=:,./", c)))
			plain = 0;
	}
	if (plain) {
		fputs(s, f);
	} else if (!ctrl) {
		fputc('\'', f);
		for (const char *p = s; *p; p++)
			if (*p == '\'')
				fputs("'\\''", f);
			else
				fputc(*p, f);
		fputc('\'', f);
	} else {
		fputs("$'", f);
		for (const char *p = s; *p; p++) {
			unsigned char c = (unsigned char)*p;
			if (c == '\n')
				fputs("\\n", f);
			else if (c == '\t')
				fputs("\\t", f);
			else if (c == '\\' || c == '\'')
				fprintf(f, "\\%c", c);
			else if (c < 0x20 || c == 0x7f)
				fprintf(f, "\\x%02x", c);
			else
				fputc(c, f);
		}
		fputc('\'', f);
	}
}

typedef struct envlist {
	char **v;
	int n, cap;
} envlist;

static int env_add(envlist *e, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int env_add(envlist *e, const char *name, const char *fmt, ...)
{
	if (e->n + 1 >= e->cap) {
		int nc = e->cap ? e->cap * 2 : 32;
		char **nv = realloc(e->v, (size_t)nc * sizeof(*nv));
		if (!nv)
			return -1;
		e->v = nv;
		e->cap = nc;
	}
	va_list ap;
	va_start(ap, fmt);
	char *val = NULL;
	int r = vasprintf(&val, fmt, ap);
	va_end(ap);
	if (r < 0)
		return -1;
	char *kv = NULL;
	r = asprintf(&kv, "%s=%s", name, val);
	free(val);
	if (r < 0)
		return -1;
	e->v[e->n++] = kv;
	e->v[e->n] = NULL;
	return 0;
}

static void env_free(envlist *e)
{
	for (int i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
	memset(e, 0, sizeof(*e));
}

/* The inherited environment without the names in `adds`, then `adds`. */
static char **env_merge(char *const *adds, int nadds)
{
	size_t n = 0;
	for (char **p = environ; p && *p; p++)
		n++;
	char **out = calloc(n + (size_t)nadds + 1, sizeof(*out));
	if (!out)
		return NULL;
	size_t k = 0;
	for (char **p = environ; p && *p; p++) {
		const char *eq = strchr(*p, '=');
		size_t nl = eq ? (size_t)(eq - *p) : strlen(*p);
		int over = 0;
		for (int j = 0; j < nadds && !over; j++)
			over = !strncmp(adds[j], *p, nl) && adds[j][nl] == '=';
		if (!over)
			out[k++] = *p;
	}
	for (int j = 0; j < nadds; j++)
		out[k++] = adds[j];
	out[k] = NULL;
	return out;
}

/* What every rank of this launcher shares. */
typedef struct job {
	const char *addr;
	int port;
	char id[64];
	int world;
	int omp;                  /* OMP_NUM_THREADS to set, 0: none */
	char *config_abs;         /* --config made absolute (owned)  */
	char *sets;               /* --set lines joined by '\n' (owned) */
	const char *log_dir;
	int restart;              /* attempt number: ACCEL_RESTART_COUNT */
	int max_restarts;
	const char *resume_root;  /* ACCEL_RESUME_ROOT on a restart, NULL: no checkpoint */
	const char *state_path;   /* ACCEL_LAUNCH_STATE, NULL */
} job;

/* --config as an absolute path to a readable regular file; 0, or the usage
 * error's status. */
static int config_abs(const launch_opts *o, char **ret)
{
	/* errno is read only right after the call that failed: realpath()
	 * may succeed and leave a stale errno behind */
	char *abs = realpath(o->config, NULL);
	int e = abs ? 0 : errno;
	struct stat stt;
	if (!e && stat(abs, &stt) < 0)
		e = errno;
	if (!e && S_ISREG(stt.st_mode) && access(abs, R_OK) < 0)
		e = errno;
	if (e || !S_ISREG(stt.st_mode)) {
		free(abs);
		return accelp_cli_usage_error("launch", "--config '%s': %s", o->config,
		                              e ? strerror(e) : "not a regular file");
	}
	*ret = abs;
	return 0;
}

/* The --set assignments as ACCEL_SET's value, one per line; NULL when out
 * of memory. */
static char *joined_sets(const launch_opts *o)
{
	size_t len = 0;
	for (int i = 0; i < o->sets.n; i++)
		len += strlen(o->sets.v[i]) + 1;
	char *s = malloc(len + 1);
	if (!s)
		return NULL;
	s[0] = '\0';
	for (int i = 0; i < o->sets.n; i++) {
		if (i)
			strcat(s, "\n");
		strcat(s, o->sets.v[i]);
	}
	return s;
}

/* The variables of local rank l of n, started in slot `slot`; nonzero when
 * out of memory. */
static int rank_env(envlist *e, const launch_opts *o, const job *j, int n, int l, int slot)
{
	int r = o->node_rank * n + l, bad = 0;
	bad |= env_add(e, ACCEL_ENV_RANK, "%d", r);
	bad |= env_add(e, ACCEL_ENV_LOCAL_RANK, "%d", l);
	bad |= env_add(e, ACCEL_ENV_WORLD_SIZE, "%d", j->world);
	bad |= env_add(e, ACCEL_ENV_LOCAL_WORLD_SIZE, "%d", n);
	bad |= env_add(e, ACCEL_ENV_NODE_RANK, "%d", o->node_rank);
	bad |= env_add(e, ACCEL_ENV_NUM_NODES, "%d", o->nnodes);
	bad |= env_add(e, ACCEL_ENV_MASTER_ADDR, "%s", j->addr);
	bad |= env_add(e, ACCEL_ENV_MASTER_PORT, "%d", j->port);
	bad |= env_add(e, ACCEL_ENV_JOB_ID, "%s", j->id);
	if (j->config_abs)
		bad |= env_add(e, ACCEL_ENV_CONFIG, "%s", j->config_abs);
	if (j->sets)
		bad |= env_add(e, ACCEL_ENV_SET, "%s", j->sets);
	bad |= env_add(e, ACCEL_ENV_TORCH_RANK, "%d", r);
	bad |= env_add(e, ACCEL_ENV_TORCH_WORLD_SIZE, "%d", j->world);
	bad |= env_add(e, ACCEL_ENV_TORCH_LOCAL_RANK, "%d", l);
	bad |= env_add(e, ACCEL_ENV_TORCH_LOCAL_WORLD_SIZE, "%d", n);
	bad |= env_add(e, ACCEL_ENV_TORCH_MASTER_ADDR, "%s", j->addr);
	bad |= env_add(e, ACCEL_ENV_TORCH_MASTER_PORT, "%d", j->port);
	if (j->omp)
		bad |= env_add(e, "OMP_NUM_THREADS", "%d", j->omp);
	if (j->state_path)
		bad |= env_add(e, ACCEL_ENV_LAUNCH_STATE, "%s", j->state_path);
	if (j->max_restarts > 0) {
		bad |= env_add(e, ACCEL_ENV_RESTART_COUNT, "%d", j->restart);
		bad |= env_add(e, ACCEL_ENV_LAUNCH_SLOT, "%d", slot);
		if (j->resume_root) {
			bad |= env_add(e, ACCEL_ENV_RESUME, "latest");
			bad |= env_add(e, ACCEL_ENV_RESUME_ROOT, "%s", j->resume_root);
		}
	}
	return bad;
}

/* --dry-run: what would be started, with every variable; the status. */
static int dry_run(const launch_opts *o, const job *j, const envlist *adds)
{
	int n = o->nproc;
	printf("accel launch: dry run: %d process%s on node %d of %d, world size %d, job %s, "
	       "master %s:%d%s\n", n, n == 1 ? "" : "es", o->node_rank, o->nnodes, j->world, j->id,
	       j->addr, j->port, o->port ? "" : " (a free port now; another is picked at launch)");
	/* accel's variables the ranks inherit as they are (ACCEL_CONFIG or
	 * ACCEL_SET from an outer job, ACCEL_LOG_LEVEL, ...): they change
	 * what the ranks do as much as the ones set below */
	int shown = 0;
	for (char **ev = environ; ev && *ev; ev++) {
		const char *eq = strchr(*ev, '=');
		if (!eq || strncmp(*ev, "ACCEL_", 6) != 0)
			continue;
		int set_here = 0;
		for (int k = 0; k < adds[0].n && !set_here; k++)
			set_here = !strncmp(adds[0].v[k], *ev, (size_t)(eq - *ev) + 1);
		if (set_here)
			continue;
		if (!shown++)
			printf("inherited by every rank:\n");
		printf("  %.*s=", (int)(eq - *ev), *ev);
		print_quoted(stdout, eq + 1);
		putchar('\n');
	}
	for (int l = 0; l < n; l++) {
		printf("rank %d:\n", o->node_rank * n + l);
		for (int k = 0; k < adds[l].n; k++) {
			const char *kv = adds[l].v[k], *eq = strchr(kv, '=');
			printf("  %.*s=", (int)(eq - kv), kv);
			print_quoted(stdout, eq + 1);
			putchar('\n');
		}
		printf("  command:");
		for (char **a = o->prog; *a; a++) {
			putchar(' ');
			print_quoted(stdout, *a);
		}
		putchar('\n');
	}
	if (j->log_dir)
		printf("logs: %s/rank-R.log\n", j->log_dir);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* Free the environments of the n ranks of an attempt. */
static void envs_free(envlist *adds, char ***envp, int n)
{
	for (int l = 0; adds && l < n; l++)
		env_free(&adds[l]);
	for (int l = 0; envp && l < n; l++)
		free(envp[l]);
	free(adds);
	free(envp);
}

/* The environments of the n ranks started in slots[]; nonzero when out of
 * memory. */
static int envs_make(const launch_opts *o, const job *j, const int *slots, int n,
                     envlist **ret_adds, char ***ret_envp[])
{
	envlist *adds = calloc((size_t)n, sizeof(*adds));
	char ***envp = calloc((size_t)n, sizeof(*envp));
	*ret_adds = adds;
	*ret_envp = envp;
	if (!adds || !envp)
		return -1;
	for (int l = 0; l < n; l++)
		if (rank_env(&adds[l], o, j, n, l, slots[l]) ||
		    !(envp[l] = env_merge(adds[l].v, adds[l].n)))
			return -1;
	return 0;
}

/* After a failed attempt: which slots the next one starts (--restart-filter),
 * into slots[]; returns their number, or -1 when the job must not restart
 * (a filter did not answer in time, or the launcher got *ret_signal while
 * one ran: 0 for the former); the message is printed. */
static int filter_slots(const launch_opts *o, int *slots, int n, int restart,
                        const launch_result *res, int rc, int *ret_signal)
{
	*ret_signal = 0;
	if (!o->restart_filter)
		return n;
	int kept = 0;
	for (int l = 0; l < n; l++) {
		int sig = 0;
		int st = accelp_launch_filter(o->restart_filter, slots[l], restart, res,
		                              o->filter_timeout_s, &sig);
		if (st == 0) {
			slots[kept++] = slots[l];
			continue;
		}
		if (st == ACCELP_FILTER_TIMEOUT) {
			fprintf(stderr, "accel launch: restart filter '%.200s%s' did not answer within "
			        "%g s (slot %d; --restart-filter-timeout); its process group was killed; "
			        "not restarting after %s: exiting with status %d\n", o->restart_filter,
			        strlen(o->restart_filter) > 200 ? "..." : "", o->filter_timeout_s,
			        slots[l], res->reason, rc);
			return -1;
		}
		if (st == ACCELP_FILTER_SIGNAL) {
			char b[32];
			fprintf(stderr, "accel launch: received %s while the restart filter ran (slot "
			        "%d): killed its process group; not restarting: exiting with status %d\n",
			        accelp_launch_signame(sig, b, sizeof(b)), slots[l], 128 + sig);
			*ret_signal = sig;
			return -1;
		}
		if (st < 0)
			fprintf(stderr, "accel launch: --restart-filter: cannot run it for slot %d: %s; "
			        "dropping the slot\n", slots[l], strerror(errno));
		else if (WIFEXITED(st))
			fprintf(stderr, "accel launch: --restart-filter dropped slot %d (exit code %d)\n",
			        slots[l], WEXITSTATUS(st));
		else
			fprintf(stderr, "accel launch: --restart-filter dropped slot %d (killed by signal "
			        "%d)\n", slots[l], WTERMSIG(st));
	}
	return kept;
}

/* The line that says what a restart resumes from and what it costs. */
static void say_restart(const launch_opts *o, const job *j, const char *reason,
                        const launch_state *st, int world)
{
	char lost[96];
	long long from = st->ckpt_dir[0] ? st->ckpt_step : 0;
	if (st->step < 0)
		snprintf(lost, sizeof(lost), "no step was done in the failed attempt");
	else
		snprintf(lost, sizeof(lost), "%lld step%s lost (rank 0 had done %lld)",
		         st->step > from ? st->step - from : 0, st->step - from == 1 ? "" : "s",
		         st->step);
	if (st->ckpt_dir[0])
		fprintf(stderr, "accel launch: restart %d of %d after %s: resuming from %s (step %lld) "
		        "at world size %d; %s\n", j->restart, o->max_restarts, reason,
		        st->ckpt_dir, st->ckpt_step, world, lost);
	else
		fprintf(stderr, "accel launch: restart %d of %d after %s: the job saved no checkpoint, "
		        "so it starts from the beginning at world size %d; %s\n", j->restart,
		        o->max_restarts, reason, world, lost);
}

int accelp_cli_launch(int argc, char **argv)
{
	launch_opts o;
	int rc = accelp_launch_args(argc, argv, &o);
	int n = o.nproc, cur = n;
	envlist *adds = NULL;
	char ***envp = NULL;
	char *tee_dir = NULL, *state_path = NULL;
	int *slots = NULL;
	launch_nodes *nodes = NULL;
	launch_node_decision dec;
	char base_id[64], root[4096];
	launch_state st;
	memset(&st, 0, sizeof(st));
	job j = {.addr = o.addr ? o.addr : "127.0.0.1", .port = o.port, .world = n * o.nnodes,
	         .max_restarts = o.max_restarts};
	if (rc != 0) {
		rc = rc < 0 ? 0 : rc;
		goto out;
	}
	if (o.config && (rc = config_abs(&o, &j.config_abs)))
		goto out;
	if (o.sets.n && !(j.sets = joined_sets(&o)))
		goto oom;
	if (!j.port && (j.port = free_port()) < 0) {
		fprintf(stderr, "accel launch: cannot find a free TCP port for the rendezvous store: "
		        "%s; give one with --master-port\n", strerror(errno));
		rc = 1;
		goto out;
	}
	make_job_id(&o, j.id, sizeof(j.id));
	snprintf(base_id, sizeof(base_id), "%s", j.id);
	j.log_dir = o.log_dir;
	if (o.tee && !j.log_dir) {
		if (asprintf(&tee_dir, "accel-logs/%s", j.id) < 0)
			goto oom;
		j.log_dir = tee_dir;
	}
	/* Many ranks each starting one OpenMP thread per core would oversubscribe
	 * the machine; give each its share unless the user chose. */
	if (n > 1 && !getenv("OMP_NUM_THREADS")) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		j.omp = cpus > n ? (int)(cpus / n) : 1;
	}
	if (!(slots = calloc((size_t)n, sizeof(*slots))))
		goto oom;
	for (int l = 0; l < n; l++)
		slots[l] = l;
	/* The ranks' state file: where rank 0 records its steps and
	 * checkpoints for a restart, and where a rank marks a failure that
	 * only follows another's (a lost peer), so that the cause is named. */
	if (!o.dry_run) {
		int e = accelp_launch_state_create(&state_path);
		if (e && o.max_restarts > 0)
			fprintf(stderr, "accel launch: cannot create the file the ranks record their "
			        "steps and checkpoints in: %s; restarts will not know the checkpoint to "
			        "resume from, and start from the beginning\n", strerror(e));
		else if (e)
			fprintf(stderr, "accel launch: cannot create the file the ranks mark their "
			        "failures in: %s; when a rank fails, one that only lost it as a peer "
			        "may be named instead\n", strerror(e));
		j.state_path = state_path;
	}
	if (o.nnodes > 1 && o.max_restarts > 0 && !o.dry_run &&
	    accelp_nodes_open(&nodes, j.addr, j.port + 1, o.nnodes, o.node_rank, NODES_TIMEOUT_S) < 0) {
		rc = 1;
		goto out;
	}
	for (;;) {
		if (envs_make(&o, &j, slots, cur, &adds, &envp))
			goto oom;
		if (o.dry_run) {
			rc = dry_run(&o, &j, adds);
			goto out;
		}
		if (j.log_dir && !j.restart) {
			if (make_dirs(j.log_dir) < 0) {
				fprintf(stderr, "accel launch: cannot create the log directory '%s': %s\n",
				        j.log_dir, strerror(errno));
				rc = 1;
				goto out;
			}
			fprintf(stderr, "accel launch: writing rank output to %s/rank-{%d..%d}.log\n",
			        j.log_dir, o.node_rank * n, o.node_rank * n + n - 1);
		}
		if (state_path)
			accelp_launch_state_reset(state_path);
		fflush(stdout);
		fflush(stderr);
		launch_result res;
		launch_spec spec = {
			.nproc = cur,
			.first_rank = o.node_rank * cur,
			.argv = o.prog,
			.envp = envp,
			.prefix = !o.log_dir || o.tee,
			.log_dir = j.log_dir,
			.log_append = j.restart > 0,
			.grace_s = o.grace_s,
			.master_addr = j.addr,
			.master_port = j.port,
			.world_size = j.world,
			.result = &res,
			.nodes = nodes,
			.gen = j.restart,
			.state_path = state_path,
		};
		rc = accelp_launch_run(&spec);
		envs_free(adds, envp, cur);
		adds = NULL;
		envp = NULL;
		if (nodes) {
			/* every node's launcher reports; node 0 decides for all */
			launch_node_report me = {.gen = j.restart, .rc = rc, .node_lost = res.node_lost,
			                         .consequence = res.consequence,
			                         .restartable = rc == 0 || res.node_lost ||
			                                        !(res.got_signal || res.cannot_start ||
			                                          res.failed_rank < 0)};
			snprintf(me.reason, sizeof(me.reason), "%s", rc ? res.reason : "");
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			me.end_s = res.fail_s > 0 ? res.fail_s
			                           : (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
			launch_node_policy pol = {.restart = j.restart, .max_restarts = o.max_restarts,
			                          .min_nodes = o.min_nodes, .timeout_s = NODES_TIMEOUT_S};
			memset(&dec, 0, sizeof(dec));
			if (state_path)
				accelp_launch_state_read(state_path, &st);
			dec.st = st;
			if (accelp_nodes_agree(nodes, &me, &pol, &dec) < 0)
				goto oom;
			if (!dec.go) {
				if (dec.rc)
					fprintf(stderr, "accel launch: node %d: %s: exiting with status %d\n",
					        o.node_rank, dec.message, dec.rc);
				rc = dec.rc;
				break;
			}
			st = dec.st;
			o.nnodes = dec.nodes;
			o.node_rank = dec.self;
			j.restart = dec.gen;
			j.world = cur * o.nnodes;
			snprintf(j.id, sizeof(j.id), "%.50s.r%d", base_id, j.restart);
			j.resume_root = NULL;
			if (st.ckpt_dir[0]) {
				snprintf(root, sizeof(root), "%s", st.ckpt_dir);
				char *slash = strrchr(root, '/');
				if (slash && slash != root)
					*slash = '\0';
				j.resume_root = root;
			}
			say_restart(&o, &j, dec.message, &st, j.world);
			fprintf(stderr, "accel launch: this launcher is node %d of %d in restart %d\n",
			        o.node_rank, o.nnodes, j.restart);
			continue;
		}
		if (rc == 0 || o.max_restarts == 0)
			break;
		/* a rank failed: restart unless the job was stopped, PROGRAM cannot
		 * run, or the launcher itself failed */
		if (res.got_signal || res.cannot_start || res.failed_rank < 0)
			break;
		if (j.restart >= o.max_restarts) {
			fprintf(stderr, "accel launch: %s; no restart left (--max-restarts %d): exiting "
			        "with its status %d\n", res.reason, o.max_restarts, rc);
			break;
		}
		if (state_path)
			accelp_launch_state_read(state_path, &st);
		int fsig;
		int kept = filter_slots(&o, slots, cur, j.restart + 1, &res, rc, &fsig);
		if (kept < 0) {
			if (fsig)
				rc = 128 + fsig;
			break;
		}
		if (kept < o.min_nproc) {
			fprintf(stderr, "accel launch: %s; only %d of the %d slot%s passed "
			        "--restart-filter, fewer than --min-nproc %d: not restarting (exit "
			        "status %d)\n", res.reason, kept, cur, cur == 1 ? "" : "s", o.min_nproc, rc);
			break;
		}
		cur = kept;
		j.restart++;
		j.world = cur * o.nnodes;
		/* a fresh job id and, on one node, a fresh port: nothing of the
		 * failed attempt (its store, its shared memory) is in the way */
		snprintf(j.id, sizeof(j.id), "%.50s.r%d", base_id, j.restart);
		if (!o.port && (j.port = free_port()) < 0) {
			fprintf(stderr, "accel launch: cannot find a free TCP port for the rendezvous "
			        "store of restart %d: %s\n", j.restart, strerror(errno));
			rc = 1;
			break;
		}
		j.resume_root = NULL;
		if (st.ckpt_dir[0]) {
			snprintf(root, sizeof(root), "%s", st.ckpt_dir);
			char *slash = strrchr(root, '/');
			if (slash && slash != root)
				*slash = '\0';
			j.resume_root = root;
		}
		say_restart(&o, &j, res.reason, &st, j.world);
	}
	goto out;
oom:
	fprintf(stderr, "accel launch: out of memory\n");
	rc = 1;
out:
	free_port_release();
	envs_free(adds, envp, cur);
	accelp_nodes_close(nodes);
	free(slots);
	free(o.sets.v);
	free(j.config_abs);
	free(j.sets);
	free(tee_dir);
	if (state_path)
		unlink(state_path);
	free(state_path);
	return rc;
}
