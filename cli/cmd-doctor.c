/* SPDX-License-Identifier: MIT */
/* cli/cmd-doctor.c: `accel doctor`: is this machine ready to run a job?
 *
 * One line per check, "OK", "WARN" or "FAIL" and the reason; the exit
 * status is 1 only when a check FAILs (a CPU machine without GPUs or NCCL
 * is fine).  The checks are the things that stop a first job: the config,
 * the launcher's port, /dev/shm (the shm backend's memory), the offload
 * directory and its write speed, the GPUs and the device module, NCCL, and
 * an all-reduce between 2 local processes through `accel launch`, the path
 * a real job takes. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "accel-build-config.h"
#include "cli.h"
#include "config.h"
#include "cuda_probe.h"
#include "device.h"
#include "loader.h"
#include "probe.h"
#include "self-launch.h"
#include "setup.h"

#define SUB "doctor"

static void help(void)
{
	printf(
		"Usage: accel doctor [OPTIONS]\n"
		"\n"
		"Check that this machine can run accel jobs; one line per check:\n"
		"  config     the configuration resolves (file, ACCEL_* variables, --set)\n"
		"  port       the launcher's rendezvous port is free (--port, else\n"
		"             ACCEL_MASTER_PORT; without either, that a free port can be had)\n"
		"  shm        /dev/shm exists, is writable, and its free space\n"
		"  offload    the offload directory (--offload-dir, else each of the config's\n"
		"             zero_optimization.offload_optimizer.nvme_path and\n"
		"             offload_param.nvme_path, else a temporary directory) is\n"
		"             writable; its measured write bandwidth (--offload-mib MiB\n"
		"             written and fsync'ed)\n"
		"  gpu        GPUs through the cuda device module (\"no GPU\" is fine on a CPU\n"
		"             machine)\n"
		"  nccl       libnccl found (where from, version) and the nccl backend module\n"
		"  allreduce  `accel launch -n 2` runs an all-reduce of the configured\n"
		"             backend and gets the right sums\n"
		"\n"
		"Each line says OK, WARN (works, but worth a look) or FAIL (a job would fail)\n"
		"and why.\n"
		"\n"
		"Options:\n"
		"  --config F         accel config file (default: as for any accel program)\n"
		"  --set KEY=VALUE    config override (repeatable)\n"
		"  --port P           the port to check (what you give accel launch\n"
		"                     --master-port)\n"
		"  --offload-dir DIR  the directory to check for offloading\n"
		"  --offload-mib N    MiB to write for the bandwidth (default 64)\n"
		"  --no-allreduce     skip the 2-process all-reduce\n"
		"  -h, --help         this help\n"
		"\n"
		"Exit status: 0 when no check FAILs, 1 when one does, 2 on bad usage.\n");
}

typedef struct doctor {
	int fails, warns;
} doctor;

static void report(doctor *d, const char *level, const char *check, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void report(doctor *d, const char *level, const char *check, const char *fmt, ...)
{
	va_list ap;
	printf("%-4s  %-9s  ", level, check);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!strcmp(level, "FAIL"))
		d->fails++;
	else if (!strcmp(level, "WARN"))
		d->warns++;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void human(uint64_t b, char *buf, size_t cap)
{
	if (b >= (1ull << 30))
		snprintf(buf, cap, "%.1f GiB", (double)b / (1ull << 30));
	else
		snprintf(buf, cap, "%.0f MiB", (double)b / (1ull << 20));
}

/* ---- port ------------------------------------------------------------------- */

static void check_port(doctor *d, long port, const char *from)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		report(d, "FAIL", "port", "cannot make a TCP socket: %s", strerror(errno));
		return;
	}
	/* SO_REUSEADDR as the store sets it: a port in TIME_WAIT is usable */
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a.sin_port = htons((uint16_t)port);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int e = errno;
		close(fd);
		if (e == EADDRINUSE)
			report(d, "FAIL", "port", "port %ld (%s) is in use by another process: the "
			       "launcher's rendezvous store could not listen on it; stop that process "
			       "or choose another --master-port (ss -ltnp shows who holds it)", port, from);
		else
			report(d, "FAIL", "port", "port %ld (%s): cannot listen on it: %s", port, from,
			       strerror(e));
		return;
	}
	if (port == 0) {
		socklen_t len = sizeof(a);
		getsockname(fd, (struct sockaddr *)&a, &len);
		report(d, "OK", "port", "a free port was available (%d); single-node launches pick "
		       "one themselves, multi-node ones need --master-port (check it with --port P)",
		       ntohs(a.sin_port));
	} else {
		report(d, "OK", "port", "port %ld (%s) is free", port, from);
	}
	close(fd);
}

/* ---- /dev/shm ---------------------------------------------------------------- */

#define SHM_WARN_BYTES (1ull << 30)

static void check_shm(doctor *d)
{
	struct statvfs vs;
	char free_s[32], total_s[32];
	if (statvfs("/dev/shm", &vs) != 0) {
		report(d, "FAIL", "shm", "/dev/shm: %s; the shm backend (the default on one node) "
		       "needs it: mount a tmpfs there, or use --set backend=tcp", strerror(errno));
		return;
	}
	if (access("/dev/shm", W_OK | X_OK) != 0) {
		report(d, "FAIL", "shm", "/dev/shm is not writable by this user (%s); the shm "
		       "backend needs it: fix its mode (1777), or use --set backend=tcp",
		       strerror(errno));
		return;
	}
	uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
	uint64_t total = (uint64_t)vs.f_blocks * vs.f_frsize;
	human(avail, free_s, sizeof(free_s));
	human(total, total_s, sizeof(total_s));
	if (avail < SHM_WARN_BYTES)
		report(d, "WARN", "shm", "/dev/shm has %s free of %s: the shm backend's buffers and "
		       "staging for large models may not fit (containers default to 64 MiB: start "
		       "with e.g. --shm-size=8g)", free_s, total_s);
	else
		report(d, "OK", "shm", "/dev/shm: %s free of %s", free_s, total_s);
}

/* ---- offload directory ------------------------------------------------------ */

static void check_offload(doctor *d, const char *dir, const char *from, long mib)
{
	char path[4200], tmpl[64] = "";
	struct stat st;
	int fd = -1;
	char *buf = NULL;
	if (!dir) {
		const char *t = getenv("TMPDIR");
		snprintf(tmpl, sizeof(tmpl), "%.40s/accel-doctor-XXXXXX", t && *t ? t : "/tmp");
		if (!mkdtemp(tmpl)) {
			report(d, "FAIL", "offload", "cannot make a temporary directory %s: %s", tmpl,
			       strerror(errno));
			return;
		}
		dir = tmpl;
		from = "a temporary directory; give yours with --offload-dir";
	}
	if (stat(dir, &st) != 0) {
		report(d, "FAIL", "offload", "%s (%s): %s; create it, or point the offload path at "
		       "an existing directory", dir, from, strerror(errno));
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		report(d, "FAIL", "offload", "%s (%s) is not a directory", dir, from);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/.accel-doctor-%ld", dir, (long)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		report(d, "FAIL", "offload", "%s (%s): cannot write in it: %s", dir, from,
		       strerror(errno));
		goto out;
	}
	size_t chunk = 4u << 20;
	if (!(buf = malloc(chunk))) {
		report(d, "FAIL", "offload", "out of memory");
		goto out;
	}
	/* not zeros: a compressing or deduplicating file system would skip them */
	for (size_t i = 0; i < chunk; i++)
		buf[i] = (char)(i * 2654435761u >> 13);
	uint64_t want = (uint64_t)mib << 20, done = 0;
	double t0 = mono();
	while (done < want) {
		size_t n = want - done < chunk ? (size_t)(want - done) : chunk;
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			report(d, "FAIL", "offload", "%s (%s): writing %ld MiB failed after %.0f MiB: %s",
			       dir, from, mib, (double)done / (1 << 20),
			       w < 0 ? strerror(errno) : "no space");
			goto out;
		}
		done += (uint64_t)w;
	}
	if (fsync(fd) != 0) {
		report(d, "FAIL", "offload", "%s (%s): fsync failed: %s", dir, from, strerror(errno));
		goto out;
	}
	double dt = mono() - t0;
	struct statvfs vs;
	char avail[32] = "?";
	if (statvfs(dir, &vs) == 0)
		human((uint64_t)vs.f_bavail * vs.f_frsize, avail, sizeof(avail));
	report(d, "OK", "offload", "%s (%s): writable, %.0f MiB/s (%ld MiB written and "
	       "fsync'ed in %.2f s), %s free", dir, from, (double)want / (1 << 20) / dt, mib, dt,
	       avail);
out:
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	free(buf);
	if (tmpl[0])
		rmdir(tmpl);
}

/* ---- GPUs, NCCL ---------------------------------------------------------------- */

static void check_gpu(doctor *d, const accelp_cuda_info *cuda)
{
	char names[512] = "", mem[32];
	size_t off = 0;
	for (int i = 0; i < cuda->n_gpus && i < ACCELP_CUDA_MAX_GPUS && off < sizeof(names) - 64; i++) {
		human(cuda->gpus[i].mem_bytes, mem, sizeof(mem));
		off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%d: %.60s (cc %d.%d, %s)",
		                        i ? "; " : "", i, cuda->gpus[i].name, cuda->gpus[i].cc / 10,
		                        cuda->gpus[i].cc % 10, mem);
	}
	if (!ACCEL_HAVE_CUDA) {
		if (cuda->n_gpus > 0)
			report(d, "WARN", "gpu", "the driver sees %d GPU%s (%s) but this accel was built "
			       "without CUDA: they will not be used (rebuild with -Dcuda=enabled)",
			       cuda->n_gpus, cuda->n_gpus == 1 ? "" : "s", names);
		else
			report(d, "OK", "gpu", "no GPU (this accel was built without CUDA; jobs run on "
			       "the CPU)");
		return;
	}
	const accel_device_v1 *dev = NULL;
	accel_err err;
	accelp_err_clear(&err);
	int r = accelp_device_get(ACCEL_DEVICE_CUDA, &dev, &err);
	if (r == ACCEL_OK) {
		uint32_t count = 0;
		const char *path = accelp_device_module_path(ACCEL_DEVICE_CUDA, &count);
		report(d, "OK", "gpu", "%u GPU%s through the cuda device module %s%s%s", count,
		       count == 1 ? "" : "s", path ? path : "?", names[0] ? ": " : "", names);
		return;
	}
	if (cuda->n_gpus > 0)
		report(d, "FAIL", "gpu", "the CUDA driver sees %d GPU%s (%s) but the cuda device "
		       "module cannot use them: %s", cuda->n_gpus, cuda->n_gpus == 1 ? "" : "s",
		       names, err.msg);
	else
		report(d, "OK", "gpu", "no GPU (%s); jobs run on the CPU",
		       cuda->driver_lib[0] ? "the CUDA driver found none"
		                           : "no CUDA driver on this machine");
}

static void check_nccl(doctor *d, const accelp_cuda_info *cuda, accel_loader *ld)
{
	accel_cli_libs libs;
	char where[PATH_MAX] = "";
	const char *backend = NULL;
	const accel_module *unusable = NULL;   /* installed, not usable here */
	accelp_cli_probe_libs(&libs);
	if (libs.nccl_lib[0]) {
		/* where from: the file the dynamic linker picked */
		void *h = dlopen(libs.nccl_lib, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		if (!h)
			h = dlopen(libs.nccl_lib, RTLD_NOW | RTLD_LOCAL);
		struct link_map *lm = NULL;
		if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
			snprintf(where, sizeof(where), "%s", lm->l_name);
		if (h)
			dlclose(h);
	}
	for (uint32_t i = 0; ld && i < accelp_loader_count(ld); i++) {
		const accel_module *m = accelp_loader_get(ld, i);
		if (m->kind != ACCEL_MODULE_COMM || !m->name || strcmp(m->name, "nccl"))
			continue;
		if (m->status == ACCEL_MODULE_OK)
			backend = m->path;
		else if (!unusable && m->status != ACCEL_MODULE_SHADOWED)
			unusable = m;
	}
	char module[PATH_MAX + 512];
	if (backend)
		snprintf(module, sizeof(module), "%s", backend);
	else if (unusable)
		snprintf(module, sizeof(module), "%s (%s here: %s)", unusable->path,
		         accelp_loader_status_name(unusable->status),
		         unusable->cause ? unusable->cause : "no reason given");
	else
		snprintf(module, sizeof(module), "not installed");
	int v = libs.nccl_version;
	if (libs.nccl_lib[0]) {
		char ver[32];
		snprintf(ver, sizeof(ver), "%d.%d.%d", v >= 10000 ? v / 10000 : v / 1000,
		         v >= 10000 ? v % 10000 / 100 : v % 1000 / 100, v % 100);
		report(d, backend || cuda->n_gpus <= 0 ? "OK" : "WARN", "nccl",
		       "NCCL %s from %s; nccl backend module: %s%s", ver, where[0] ? where : libs.nccl_lib,
		       module,
		       backend || cuda->n_gpus <= 0 || unusable ? "" : " (GPU jobs need it: build "
		                                                     "with -Dnccl=enabled)");
	} else if (cuda->n_gpus > 0) {
		report(d, "WARN", "nccl", "libnccl.so.2 not found: GPU collectives need it (install "
		       "libnccl2, or put its directory on LD_LIBRARY_PATH)");
	} else {
		report(d, "OK", "nccl", "libnccl.so.2 not found (not needed without GPUs)");
	}
}

/* ---- the 2-process all-reduce --------------------------------------------------- */

#define AR_COUNT 4096

/* The worker: every rank adds rank+1+i at element i; the sums are exact in
 * f32.  Rank 0 prints one line the parent reads. */
static int allreduce_worker(void)
{
	accel_ctx *ctx = NULL;
	float *buf = NULL;
	int rc = accel_ctx_new(NULL, &ctx), ret = 1;
	if (rc) {
		fprintf(stderr, "doctor: starting accel: %s\n", accel_errmsg(ctx));
		goto out;
	}
	int rank = accel_rank(ctx), world = accel_world_size(ctx);
	if (!(buf = malloc(AR_COUNT * sizeof(float))))
		goto out;
	for (int i = 0; i < AR_COUNT; i++)
		buf[i] = (float)(rank + 1 + i % 1000);
	double t0 = mono();
	if ((rc = accel_allreduce(ctx, buf, buf, AR_COUNT, ACCEL_DTYPE_F32, ACCEL_RED_SUM))) {
		fprintf(stderr, "doctor: rank %d: all-reduce: %s\n", rank, accel_errmsg(ctx));
		goto out;
	}
	double dt = mono() - t0;
	for (int i = 0; i < AR_COUNT; i++) {
		float want = (float)(world * (world + 1) / 2 + world * (i % 1000));
		if (buf[i] != want) {
			fprintf(stderr, "doctor: rank %d: all-reduce element %d is %g, expected %g\n",
			        rank, i, (double)buf[i], (double)want);
			goto out;
		}
	}
	const char *backend = "?";
	(void)accel_config_string(ctx, "backend", &backend);
	if (rank == 0)
		printf("doctor-allreduce-ok world=%d backend=%s ms=%.3f\n", world, backend, dt * 1e3);
	ret = 0;
out:
	free(buf);
	accel_ctx_free(ctx);
	return ret;
}

static void check_allreduce(doctor *d, const char *config, const char *const *sets)
{
	static const char *const worker[] = {"doctor", "--allreduce-worker", NULL};
	accel_cli_job job = {.nproc = 2, .config = config, .sets = sets, .worker = worker,
	                     .timeout_s = 60};
	char *out = NULL, why[256];
	int status = 0, timed_out = 0;
	double t0 = mono();
	if (accelp_cli_self_launch(&job, &out, &status, &timed_out, why, sizeof(why))) {
		report(d, "FAIL", "allreduce", "could not start accel launch: %s", why);
		return;
	}
	const char *ok = strstr(out, "doctor-allreduce-ok ");
	if (status == 0 && ok) {
		char backend[64] = "?";
		double ms = 0;
		(void)sscanf(strstr(ok, "backend=") ? strstr(ok, "backend=") : "", "backend=%63s ms=%lf",
		             backend, &ms);
		report(d, "OK", "allreduce", "2 processes, backend %s: %d floats summed right in %.2f "
		       "ms (the whole job %.2f s)", backend, AR_COUNT, ms, mono() - t0);
	} else {
		/* the job's last lines say why */
		size_t n = strlen(out);
		while (n && out[n - 1] == '\n')
			out[--n] = '\0';
		const char *tail = out + n;
		for (int lines = 0; tail > out && lines < 4; tail--)
			if (tail[-1] == '\n' && ++lines == 4)
				break;
		report(d, "FAIL", "allreduce", "accel launch -n 2 %s; its last lines:\n      %s",
		       timed_out ? "did not finish in 60 s (stopped)" : "failed", tail);
	}
	free(out);
}

/* ---- the command ------------------------------------------------------------------ */

#define MAX_SETS 64

int accelp_cli_doctor(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"set", required_argument, NULL, 's'},
		{"port", required_argument, NULL, 'p'},
		{"offload-dir", required_argument, NULL, 'o'},
		{"offload-mib", required_argument, NULL, 'm'},
		{"no-allreduce", no_argument, NULL, 'n'},
		{"allreduce-worker", no_argument, NULL, 'W'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config = NULL, *offload = NULL, *offload_from = "--offload-dir";
	const char *sets[MAX_SETS + 1] = {NULL};
	int n_sets = 0, no_ar = 0, worker = 0;
	long port = -1, mib = 64;
	const char *port_from = "--port";
	char *end;
	int c;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			help();
			return 0;
		case 'c':
			config = optarg;
			break;
		case 's':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return accelp_cli_usage_error(SUB, "--set '%s' is not KEY=VALUE", optarg);
			if (n_sets == MAX_SETS)
				return accelp_cli_usage_error(SUB, "more than %d --set options", MAX_SETS);
			sets[n_sets++] = optarg;
			break;
		case 'p':
			port = strtol(optarg, &end, 10);
			if (!*optarg || *end || port < 1 || port > 65535)
				return accelp_cli_usage_error(SUB, "--port '%s': expected a port number, "
				                              "1..65535", optarg);
			break;
		case 'o':
			offload = optarg;
			break;
		case 'm':
			mib = strtol(optarg, &end, 10);
			if (!*optarg || *end || mib < 1 || mib > 65536)
				return accelp_cli_usage_error(SUB, "--offload-mib '%s': expected 1..65536",
				                              optarg);
			break;
		case 'n':
			no_ar = 1;
			break;
		case 'W':
			worker = 1;
			break;
		case ':':
			return accelp_cli_usage_error(SUB, "option '%s' needs a value", argv[optind - 1]);
		default:
			return accelp_cli_usage_error(SUB, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return accelp_cli_usage_error(SUB, "unexpected argument '%s'", argv[optind]);
	if (worker)
		return allreduce_worker();

	doctor d = {0};
	sets[n_sets] = NULL;

	/* config: what a job on this machine would resolve */
	accelp_setup_opts so = {
		.config_path = config,
		.config_path_from = "--config",
		.sets = n_sets ? sets : NULL,
		.report_cuda = 1,
		.resolve = 1,
		.module_errors_first = 1,
	};
	accelp_setup s;
	accel_err err;
	accelp_err_clear(&err);
	int setup_ok = accelp_setup_run(&so, &s, &err) == ACCEL_OK &&
	               accelp_setup_modules(&s, 0, &err) == ACCEL_OK;
	if (setup_ok) {
		const char *strategy = "?", *backend = "?";
		(void)accelp_config_get_string(s.cfg, "strategy", &strategy);
		(void)accelp_config_get_string(s.cfg, "backend", &backend);
		report(&d, "OK", "config", "%s: strategy %s, backend %s",
		       s.config_file ? s.config_file : "no config file (defaults)", strategy, backend);
	} else {
		report(&d, "FAIL", "config", "%s", err.msg);
	}

	if (port < 0) {
		const char *env = getenv("ACCEL_MASTER_PORT");
		port = 0;
		if (env && *env) {
			port = strtol(env, &end, 10);
			port_from = "ACCEL_MASTER_PORT";
			if (*end || port < 1 || port > 65535) {
				report(&d, "FAIL", "port", "ACCEL_MASTER_PORT='%s' is not a port number "
				       "(1..65535)", env);
				port = -1;
			}
		}
	}
	if (port >= 0)
		check_port(&d, port, port_from);

	check_shm(&d);

	/* ZeRO's NVMe swap directories (DeepSpeed's keys, the zero plugin's
	 * section): each one given, once.  From the resolved config, or from
	 * the raw layers when it does not resolve (the zero plugin missing, a
	 * typo elsewhere): the disk is worth checking all the same. */
	const char *paths[2] = {NULL, NULL}, *froms[2] = {NULL, NULL};
	int n_paths = 0;
	if (!offload && s.cfg) {
		static const char *const keys[] = {"zero_optimization.offload_optimizer.nvme_path",
		                                   "zero_optimization.offload_param.nvme_path"};
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			const char *p = NULL;
			int r = setup_ok ? accelp_config_get_string(s.cfg, keys[i], &p)
			                 : accelp_config_peek_string(s.cfg, keys[i], &p);
			if (r != ACCEL_OK || !p || !*p || (n_paths && !strcmp(paths[0], p)))
				continue;
			paths[n_paths] = p;
			froms[n_paths++] = keys[i];
		}
	}
	if (offload || !n_paths)
		check_offload(&d, offload, offload_from, mib);
	for (int i = 0; i < n_paths; i++)
		check_offload(&d, paths[i], froms[i], mib);

	if (s.cuda.n_gpus < 0 && !s.cuda.driver_lib[0] && !s.cuda.driver_error[0])
		accelp_cuda_probe(&s.cuda);   /* the set-up stopped before its probe */
	check_gpu(&d, &s.cuda);
	check_nccl(&d, &s.cuda, s.loader);
	accelp_setup_fini(&s);

	if (no_ar)
		report(&d, "OK", "allreduce", "skipped (--no-allreduce)");
	else if (!setup_ok)
		report(&d, "FAIL", "allreduce", "not tried: the configuration does not resolve "
		       "(see config above)");
	else
		check_allreduce(&d, config, sets);

	printf("%d check%s failed, %d warning%s\n", d.fails, d.fails == 1 ? "" : "s", d.warns,
	       d.warns == 1 ? "" : "s");
	return d.fails ? 1 : 0;
}
