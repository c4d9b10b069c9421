/* SPDX-License-Identifier: MIT */
/* cli/cmd-checkpoint.c: `accel checkpoint show DIR [--verify]` (a checkpoint's
 * manifest as a table; every checksum checked) and `accel merge-weights
 * CKPT_DIR OUT.safetensors` (one consolidated weights file, assembled one
 * tensor at a time from its slices: memory bounded by the largest tensor).
 * docs/cli.md, docs/checkpoints.md. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accel/accel.h"
#include "ckpt_impl.h"
#include "ckpt_manifest.h"
#include "cli.h"
#include "safetensors.h"

static void show_usage(FILE *out)
{
	fprintf(out,
		"Usage: accel checkpoint show DIR [--verify]\n"
		"\n"
		"Print a checkpoint's manifest (written by accel_save_state) as a table: format,\n"
		"world size, strategy and plugins, step, files, and every tensor with its\n"
		"dtype, global shape and slices.  DIR a project directory (checkpoint_<n>\n"
		"directories, latest): list its checkpoints, the ones of abandoned timelines,\n"
		"leftovers of saves that did not finish, and the job that last held it.\n"
		"\n"
		"Options:\n"
		"  --verify    also read every slice and file and check its XXH64 checksum;\n"
		"              exit 1 naming the first bad slice or file\n"
		"  -h, --help  show this help\n"
		"\n"
		"Exit status: 0 ok, 1 not a checkpoint or a checksum mismatch, 2 bad usage.\n");
}

static void merge_usage(FILE *out)
{
	fprintf(out,
		"Usage: accel merge-weights [--master] CKPT_DIR OUT.safetensors\n"
		"\n"
		"Write the weights of checkpoint CKPT_DIR (saved at any world size) as one\n"
		"safetensors file, each parameter under its own name (metadata format: pt, so\n"
		"safetensors.torch.load_file feeds load_state_dict).  Tensors are assembled one\n"
		"at a time from their slices, each slice checked against its checksum: memory\n"
		"stays near the largest tensor, not the model.\n"
		"\n"
		"Options:\n"
		"  --master    the f32 master weights (master/<name>) instead of the working\n"
		"              weights (param/<name>)\n"
		"  -h, --help  show this help\n"
		"\n"
		"Exit status: 0 written, 1 failure (nothing is left at OUT), 2 bad usage.\n");
}

static int is_help(const char *a)
{
	return !strcmp(a, "--help") || !strcmp(a, "-h");
}

static int by_number(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	long long p = strtoll(x + 11, NULL, 10), q = strtoll(y + 11, NULL, 10);
	return p < q ? -1 : p > q ? 1 : strcmp(x, y);
}

/* A project directory: its checkpoint_* entries, latest, the lock file. */
static int show_project(const char *dir)
{
	char path[4096], line[512] = "", latest[4096];
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	accel_err err = {0};
	if (!d) {
		fprintf(stderr, "accel checkpoint show: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "checkpoint_", 11) || !e->d_name[11])
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			char **t = realloc(names, cap * sizeof(*t));
			if (!t)
				break;
			names = t;
		}
		if ((names[n] = strdup(e->d_name)))
			n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), by_number);
	printf("project      %s\n", dir);
	snprintf(path, sizeof(path), "%s/.accel-lock", dir);
	FILE *f = fopen(path, "r");
	if (f) {
		char job[128] = "?", host[256] = "?", me[256] = "";
		long pid = 0;
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
		gethostname(me, sizeof(me) - 1);
		if (sscanf(line, "job %127s pid %ld host %255s", job, &pid, host) == 3)
			printf("job          %s (pid %ld on host %s)%s\n", job, pid, host,
			       strcmp(host, me) ? "" : pid > 0 && kill((pid_t)pid, 0) == 0 ?
			                         ": running" : ": ended");
	}
	snprintf(path, sizeof(path), "%s/latest", dir);
	line[0] = '\0';
	if ((f = fopen(path, "r"))) {
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
		line[strcspn(line, "\r\n")] = '\0';
	}
	printf("latest       %s", *line ? line : "(none)");
	if (!accelp_ckpt_find_latest(&err, dir, latest, sizeof(latest)))
		printf(" (--resume latest: %s)", strrchr(latest, '/') + 1);
	printf("\n\n%-44s  %8s  %s\n", "checkpoint", "step", "state");
	for (size_t i = 0; i < n; i++) {
		accelp_ckpt_manifest *m = NULL;
		accel_err me = {0};
		char step[32] = "-";
		const char *state;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		int ok = !accelp_ckpt_manifest_open(path, &m, &me);
		if (ok)
			snprintf(step, sizeof(step), "%" PRId64, m->step);
		if (strstr(names[i], ".abandoned-"))
			state = "abandoned timeline (moved aside by a resumed job; total_limit prunes it first)";
		else if (strstr(names[i], ".tmp-"))
			state = "leftover of a save that did not finish (the next save removes it)";
		else if (ok)
			state = strcmp(names[i], line) ? "committed" : "committed, latest";
		else
			state = "not a committed checkpoint (no valid manifest)";
		printf("%-44s  %8s  %s\n", names[i], step, state);
		accelp_ckpt_manifest_free(m);
		free(names[i]);
	}
	free(names);
	return 0;
}

static int show(const char *dir, int verify)
{
	accelp_ckpt_manifest *m = NULL;
	accel_err err = {0};
	char shp[256];
	char mpath[4096];
	struct stat sb;
	snprintf(mpath, sizeof(mpath), "%s/manifest.json", dir);
	if (!verify && stat(mpath, &sb) != 0 && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		snprintf(mpath, sizeof(mpath), "%s/latest", dir);
		DIR *d = opendir(dir);
		struct dirent *e;
		int project = stat(mpath, &sb) == 0;
		while (!project && d && (e = readdir(d)))
			project = !strncmp(e->d_name, "checkpoint_", 11);
		if (d)
			closedir(d);
		if (project)
			return show_project(dir);
	}
	if (accelp_ckpt_manifest_open(dir, &m, &err)) {
		fprintf(stderr, "accel checkpoint show: %s\n", err.msg);
		return 1;
	}
	uint64_t bytes = 0, elems = 0;
	for (uint32_t i = 0; i < m->n_files; i++)
		bytes += m->files[i].size;
	for (uint32_t i = 0; i < m->n_tensors; i++)
		elems += m->tensors[i].numel;
	printf("checkpoint   %s\n", dir);
	printf("format       %" PRId64 " (accel %s)\n", m->version,
	       m->accel_version ? m->accel_version : "?");
	if (m->unsealed)
		printf("manifest     no manifest_xxh64 (an accel before the manifest checksum wrote "
		       "it)\n");
	else
		printf("manifest     xxh64 %016" PRIx64 " (its own checksum: verified)\n",
		       m->self_xxh64);
	printf("world size   %" PRId64 "\n", m->world_size);
	printf("strategy     %s\n", m->strategy);
	printf("plugins     ");
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(m->root, "plugins"), i, p)
		printf(" %s (state version %" JSON_INTEGER_FORMAT ")",
		       json_string_value(json_object_get(p, "name")) ?
		               json_string_value(json_object_get(p, "name")) : "?",
		       json_integer_value(json_object_get(p, "state_version")));
	printf("\nstep         %" PRId64 " (micro-step %" PRId64 ")\n", m->step, m->micro_step);
	printf("samplers     %" PRId64 "\n", m->samplers);
	printf("generators   %" PRId64 " (accel_rng_register)\n", m->rngs);
	printf("files        %u, %" PRIu64 " bytes\n", m->n_files, bytes);
	printf("tensors      %u, %" PRIu64 " elements\n\n", m->n_tensors, elems);
	size_t w = strlen("tensor");
	for (uint32_t k = 0; k < m->n_tensors; k++)
		if (strlen(m->tensors[k].name) > w)
			w = strlen(m->tensors[k].name);
	printf("%-*s  %-8s  %-16s  %10s  %s\n", (int)w, "tensor", "dtype", "shape", "elements",
	       "slices (file: elements)");
	for (uint32_t k = 0; k < m->n_tensors; k++) {
		const accelp_ckpt_tensor *t = &m->tensors[k];
		printf("%-*s  %-8s  %-16s  %10" PRIu64 " ", (int)w, t->name,
		       accelp_st_dtype_name(t->dtype),
		       accelp_ckpt_shape_str(t->shape, t->ndim, shp, sizeof(shp)), t->numel);
		for (uint32_t s = 0; s < t->n_slices; s++)
			printf(" %s:[%" PRIu64 ",%" PRIu64 ")", m->files[t->slices[s].file].name,
			       t->slices[s].offset, t->slices[s].offset + t->slices[s].count);
		printf("\n");
	}
	int rc = 0;
	if (verify) {
		uint64_t slices = 0;
		for (uint32_t k = 0; k < m->n_tensors; k++)
			slices += m->tensors[k].n_slices;
		/* slices first, so a corrupt byte is named by its tensor and range */
		int r = accelp_ckpt_manifest_check_files(m, &err);
		if (!r)
			r = accelp_ckpt_manifest_verify_slices(m, &err);
		for (uint32_t f = 0; !r && f < m->n_files; f++)
			r = accelp_ckpt_manifest_verify_file(m, f, &err);
		fflush(stdout);
		if (r) {
			fprintf(stderr, "accel checkpoint show: verify: %s\n", err.msg);
			rc = 1;
		} else {
			printf("\nverified: %" PRIu64 " slices and %u files match their XXH64 "
			       "checksums\n", slices, m->n_files);
		}
	}
	accelp_ckpt_manifest_free(m);
	return rc;
}

int accelp_cli_checkpoint(int argc, char **argv)
{
	const char *dir = NULL;
	int verify = 0;
	if (argc < 2)
		return accelp_cli_usage_error("checkpoint", "no subcommand given (show)");
	if (is_help(argv[1])) {
		show_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "show"))
		return accelp_cli_usage_error("checkpoint", "unknown subcommand '%s' (show)", argv[1]);
	for (int i = 2; i < argc; i++) {
		if (is_help(argv[i])) {
			show_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--verify")) {
			verify = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return accelp_cli_usage_error("checkpoint", "unknown option '%s'", argv[i]);
		} else if (dir) {
			return accelp_cli_usage_error("checkpoint", "show takes one DIR (got '%s' and "
			                              "'%s')", dir, argv[i]);
		} else {
			dir = argv[i];
		}
	}
	if (!dir)
		return accelp_cli_usage_error("checkpoint", "show: no checkpoint DIR given");
	return show(dir, verify);
}

/* ---- merge-weights ----------------------------------------------------------------- */

static int merge(const char *dir, const char *out, const char *prefix)
{
	accelp_ckpt_manifest *m = NULL;
	accel_st_writer *w = NULL;
	accel_err err = {0};
	void *buf = NULL;
	size_t plen = strlen(prefix);
	uint32_t n = 0;
	int rc = accelp_ckpt_manifest_open(dir, &m, &err);
	if (!rc)
		rc = accelp_ckpt_manifest_check_files(m, &err);
	if (!rc && !(rc = accelp_st_writer_new(out, &w, &err)))
		rc = accelp_st_writer_set_metadata(w, "format", "pt", &err);
	for (uint32_t k = 0; !rc && k < m->n_tensors; k++) {
		const accelp_ckpt_tensor *t = &m->tensors[k];
		if (strncmp(t->name, prefix, plen))
			continue;
		rc = accelp_st_writer_add(w, t->name + plen, t->dtype, t->ndim, t->shape, NULL, &err);
		n++;
	}
	if (!rc && !n)
		rc = accelp_err_set(&err, ACCEL_ERR_CHECKPOINT, "%s: no '%s' tensors in the checkpoint",
		                    m->path, prefix);
	/* one tensor in memory at a time */
	for (uint32_t k = 0; !rc && k < m->n_tensors; k++) {
		const accelp_ckpt_tensor *t = &m->tensors[k];
		if (strncmp(t->name, prefix, plen))
			continue;
		size_t bytes = (size_t)(t->numel * accel_dtype_size(t->dtype));
		if (!(buf = malloc(bytes ? bytes : 1))) {
			rc = accelp_err_set(&err, ACCEL_ERR_NOMEM, "out of memory for tensor '%s' (%zu "
			                    "bytes)", t->name, bytes);
			break;
		}
		rc = accelp_ckpt_manifest_read(m, t, 0, t->numel, buf, &err);
		if (!rc)
			rc = accelp_st_writer_write(w, t->name + plen, buf, bytes, &err);
		free(buf);
		buf = NULL;
	}
	if (!rc)
		rc = accelp_st_writer_commit(w, &err);
	accelp_st_writer_free(w);   /* without commit: the temporary is removed */
	if (rc)
		fprintf(stderr, "accel merge-weights: %s\n", err.msg);
	else
		printf("wrote %s: %u tensors from %s (saved by %" PRId64 " processes, step %" PRId64
		       ")\n", out, n, dir, m->world_size, m->step);
	accelp_ckpt_manifest_free(m);
	return rc ? 1 : 0;
}

int accelp_cli_merge_weights(int argc, char **argv)
{
	const char *pos[2] = {NULL, NULL};
	int npos = 0, master = 0;
	for (int i = 1; i < argc; i++) {
		if (is_help(argv[i])) {
			merge_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--master")) {
			master = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return accelp_cli_usage_error("merge-weights", "unknown option '%s'", argv[i]);
		} else if (npos == 2) {
			return accelp_cli_usage_error("merge-weights", "too many arguments ('%s')", argv[i]);
		} else {
			pos[npos++] = argv[i];
		}
	}
	if (npos != 2)
		return accelp_cli_usage_error("merge-weights", "expected CKPT_DIR and OUT.safetensors");
	return merge(pos[0], pos[1], master ? "master/" : "param/");
}
