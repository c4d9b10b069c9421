/* SPDX-License-Identifier: MIT */
/* core/loader_elf.c: the ELF pre-check that runs before dlopen().
 *
 * glibc maps a truncated object happily and the process then dies of
 * SIGBUS while relocating it, so the header, program headers and segment
 * extents are read and compared with the file size first; a text file, an
 * executable, an object for another machine or a cut-off copy is reported
 * with a one-line cause instead of being mapped. */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader-impl.h"

/* ---- ELF pre-check ------------------------------------------------------------------ */

#if defined(__x86_64__)
#define HOST_EM EM_X86_64
#elif defined(__aarch64__)
#define HOST_EM EM_AARCH64
#elif defined(__i386__)
#define HOST_EM EM_386
#elif defined(__arm__)
#define HOST_EM EM_ARM
#elif defined(__powerpc64__)
#define HOST_EM EM_PPC64
#elif defined(__riscv)
#define HOST_EM EM_RISCV
#elif defined(__s390x__)
#define HOST_EM EM_S390
#endif

#if __SIZEOF_POINTER__ == 8
#define HOST_ELFCLASS ELFCLASS64
#else
#define HOST_ELFCLASS ELFCLASS32
#endif

/* Printable start of a non-ELF file, for "starts with ...". */
static void printable_prefix(const unsigned char *b, size_t n, char *out, size_t cap)
{
	size_t j = 0;
	for (size_t i = 0; i < n && i < 12 && j + 5 < cap; i++) {
		unsigned char c = b[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			out[j++] = (char)c;
		else
			j += (size_t)snprintf(out + j, cap - j, "\\x%02x", c);
	}
	out[j < cap ? j : cap - 1] = '\0';
}

int accelp_loader_elf_check(const char *path, char *why, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, cap, "cannot open: %s", strerror(errno));
		return -1;
	}
	int ret = -1;
	struct stat st;
	ElfW(Ehdr) eh;
	if (fstat(fd, &st) != 0) {
		snprintf(why, cap, "cannot stat: %s", strerror(errno));
		goto out;
	}
	uint64_t size = (uint64_t)st.st_size;
	memset(&eh, 0, sizeof(eh));
	ssize_t got = pread(fd, &eh, sizeof(eh), 0);
	if (got < 0) {
		snprintf(why, cap, "cannot read: %s", strerror(errno));
		goto out;
	}
	if (got < SELFMAG || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
		char pfx[64];
		if (got == 0) {
			snprintf(why, cap, "not an ELF shared object (empty file)");
		} else {
			printable_prefix((const unsigned char *)&eh, (size_t)got, pfx, sizeof(pfx));
			snprintf(why, cap, "not an ELF shared object (starts with \"%s\")", pfx);
		}
		goto out;
	}
	if ((size_t)got < EI_NIDENT || eh.e_ident[EI_CLASS] != HOST_ELFCLASS) {
		snprintf(why, cap, "wrong ELF class: %s, this process is %d-bit",
		         (size_t)got < EI_NIDENT ? "truncated header"
		         : eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit"
		         : eh.e_ident[EI_CLASS] == ELFCLASS64 ? "64-bit" : "invalid",
		         (int)(8 * sizeof(void *)));
		goto out;
	}
	if ((size_t)got < sizeof(eh)) {
		snprintf(why, cap, "truncated: file is %llu bytes, shorter than an ELF header",
		         (unsigned long long)size);
		goto out;
	}
	if (eh.e_type != ET_DYN) {
		snprintf(why, cap, "not a shared object (ELF type %u%s); build it with -shared",
		         (unsigned)eh.e_type, eh.e_type == ET_EXEC ? ", an executable"
		                             : eh.e_type == ET_REL ? ", an object file" : "");
		goto out;
	}
#ifdef HOST_EM
	if (eh.e_machine != HOST_EM) {
		snprintf(why, cap, "built for another machine (ELF machine %u, this one is %u)",
		         (unsigned)eh.e_machine, (unsigned)HOST_EM);
		goto out;
	}
#endif
	uint64_t need = 0;
	if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0) {
		snprintf(why, cap, "corrupt ELF header (%u program headers of %u bytes)",
		         (unsigned)eh.e_phnum, (unsigned)eh.e_phentsize);
		goto out;
	}
	/* offsets and sizes are the file's: sums that wrap past 2^64 would
	 * pass as small, so they are checked as such */
	uint64_t ph_end;
	if (__builtin_add_overflow((uint64_t)eh.e_phoff,
	                           (uint64_t)eh.e_phnum * eh.e_phentsize, &ph_end))
		ph_end = UINT64_MAX;
	if (ph_end > size) {
		snprintf(why, cap, "truncated: file is %llu bytes, its program headers end at %llu",
		         (unsigned long long)size, (unsigned long long)ph_end);
		goto out;
	}
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		ElfW(Phdr) ph;
		off_t off = (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize);
		if (pread(fd, &ph, sizeof(ph), off) != (ssize_t)sizeof(ph)) {
			snprintf(why, cap, "cannot read program header %u", i);
			goto out;
		}
		if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC)
			continue;
		uint64_t end;
		if (__builtin_add_overflow((uint64_t)ph.p_offset, (uint64_t)ph.p_filesz, &end)) {
			snprintf(why, cap, "corrupt ELF program header %u (offset %llu + size %llu "
			         "is past 2^64)", i, (unsigned long long)ph.p_offset,
			         (unsigned long long)ph.p_filesz);
			goto out;
		}
		if (end > need)
			need = end;
	}
	if (need > size) {
		snprintf(why, cap, "truncated: file is %llu bytes, its segments need %llu",
		         (unsigned long long)size, (unsigned long long)need);
		goto out;
	}
	if (eh.e_shoff != 0) {
		uint64_t sh_end;
		if (__builtin_add_overflow((uint64_t)eh.e_shoff,
		                           (uint64_t)eh.e_shnum * eh.e_shentsize, &sh_end))
			sh_end = UINT64_MAX;
		if (sh_end > size) {
			snprintf(why, cap, "truncated: file is %llu bytes, its section headers end at %llu",
			         (unsigned long long)size, (unsigned long long)sh_end);
			goto out;
		}
	}
	ret = 0;
out:
	close(fd);
	return ret;
}

/* dlerror() text starts with the path again; keep the rest, one line. */
