/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-main.c: runs a fuzz target over files, without libFuzzer.
 *
 * The targets in this directory define LLVMFuzzerTestOneInput().  Built
 * with clang -fsanitize=fuzzer (meson -Dfuzz=enabled) libFuzzer drives them;
 * otherwise this main() feeds them every file named on the command line and
 * every file in a directory named there (the seed corpus and the inputs that
 * once found a bug), so the regular test suite replays them under any
 * compiler and sanitizer.  Exit status 0 when every input ran. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "fuzz: cannot open %s\n", path);
		return 1;
	}
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	size_t got;
	while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			uint8_t *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	int bad = ferror(f) || !buf;
	fclose(f);
	if (bad) {
		free(buf);
		fprintf(stderr, "fuzz: cannot read %s\n", path);
		return 1;
	}
	/* An exact-size copy, so ASan sees reads past the input's end. */
	uint8_t *exact = malloc(n ? n : 1);
	if (!exact) {
		free(buf);
		return 1;
	}
	memcpy(exact, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, int *count)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "fuzz: cannot open directory %s\n", dir);
		return 1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int bad = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof(*names));
			if (!nn) {
				bad = 1;
				break;
			}
			names = nn;
		}
		names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
		if (!names[n]) {
			bad = 1;
			break;
		}
		sprintf(names[n], "%s/%s", dir, e->d_name);
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_names);   /* a fixed order to replay */
	for (size_t i = 0; i < n; i++) {
		if (!bad) {
			bad = run_file(names[i]);
			++*count;
		}
		free(names[i]);
	}
	free(names);
	return bad;
}

int main(int argc, char **argv)
{
	int count = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n"
		        "Runs the fuzz target once on each file (directories: each file in "
		        "them).\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat sb;
		if (stat(argv[i], &sb) != 0) {
			fprintf(stderr, "fuzz: %s: no such file or directory\n", argv[i]);
			return 1;
		}
		int bad = S_ISDIR(sb.st_mode) ? run_dir(argv[i], &count) : (count++, run_file(argv[i]));
		if (bad)
			return 1;
	}
	printf("%s: %d inputs ran\n", argv[0], count);
	return count > 0 ? 0 : 1;
}
