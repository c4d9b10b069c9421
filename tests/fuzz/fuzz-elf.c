/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-elf.c: the loader's ELF pre-check (core/loader_elf.c),
 * from any file.
 *
 * The input is a whole file in a plugin directory.  accelp_loader_elf_check
 * must refuse it with a one-line reason, or accept it; an accepted file is
 * checked again here, from the bytes in memory with overflow-safe
 * arithmetic: an ELF header of this process's class and machine, a shared
 * object, program headers of the right size inside the file, every
 * PT_LOAD / PT_DYNAMIC segment's bytes inside the file and the section
 * headers (when present) too.  What dlopen would map must exist.  The
 * reason is written into a small buffer with a guard after it, so a
 * message that does not fit must be cut, not overflow. */
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader-impl.h"
#include "fuzz.h"

static void must(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-elf: %s\n", what);
		abort();
	}
}

/* e_machine of this process's own executable: the machine the check wants. */
static unsigned host_machine(void)
{
	static int known;
	static unsigned em;
	if (!known) {
		ElfW(Ehdr) eh;
		FILE *f = fopen("/proc/self/exe", "rb");
		if (f && fread(&eh, sizeof(eh), 1, f) == 1)
			em = eh.e_machine;
		if (f)
			fclose(f);
		known = 1;
	}
	return em;
}

static int fits(uint64_t off, uint64_t len, uint64_t size)
{
	uint64_t end;
	return !__builtin_add_overflow(off, len, &end) && end <= size;
}

/* What an accepted file must be (see above). */
static void check_accepted(const uint8_t *data, size_t size)
{
	ElfW(Ehdr) eh;
	must(size >= sizeof(eh), "accepted a file shorter than an ELF header");
	memcpy(&eh, data, sizeof(eh));
	must(!memcmp(eh.e_ident, ELFMAG, SELFMAG), "accepted a file without the ELF magic");
	must(eh.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32),
	     "accepted another ELF class");
	must(eh.e_type == ET_DYN, "accepted an ELF file that is not a shared object");
	must(!host_machine() || eh.e_machine == host_machine(), "accepted another machine's ELF");
	must(eh.e_phentsize == sizeof(ElfW(Phdr)) && eh.e_phnum > 0,
	     "accepted a corrupt program header table");
	must(fits(eh.e_phoff, (uint64_t)eh.e_phnum * eh.e_phentsize, size),
	     "accepted program headers past the end of the file");
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		ElfW(Phdr) ph;
		memcpy(&ph, data + eh.e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
		if (ph.p_type == PT_LOAD || ph.p_type == PT_DYNAMIC)
			must(fits(ph.p_offset, ph.p_filesz, size),
			     "accepted a segment whose bytes are past the end of the file");
	}
	if (eh.e_shoff)
		must(fits(eh.e_shoff, (uint64_t)eh.e_shnum * eh.e_shentsize, size),
		     "accepted section headers past the end of the file");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[FUZZ_PATH_MAX];
	int fd = fuzz_input_file("fuzz-elf", data, size, path);
	if (fd < 0)
		return 0;

	/* 96 bytes: most reasons are longer, so truncation is exercised */
	char why[96 + 16];
	memset(why, 0x5a, sizeof(why));
	int r = accelp_loader_elf_check(path, why, 96);
	for (size_t i = 96; i < sizeof(why); i++)
		must(why[i] == 0x5a, "the reason was written past its buffer");
	if (r != 0) {
		must(r == -1, "refused with a status other than -1");
		must(memchr(why, '\0', 96) != NULL && why[0], "refused without a reason");
		must(!strchr(why, '\n'), "a reason of more than one line");
	} else {
		check_accepted(data, size);
	}
	close(fd);
	return 0;
}
