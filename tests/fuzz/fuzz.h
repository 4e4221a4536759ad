/* What the fuzz targets share. The parsers under test take paths, as they do in the
 * commands, so each input is written to one memory-backed file (memfd) that is
 * rewritten in place: fuzzing touches no disk and the code runs exactly as it does
 * for a user's file. Outputs (charts, reports) go to one temporary folder, removed
 * at exit. */
#ifndef GP_FUZZ_H
#define GP_FUZZ_H

#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A harness that cannot set itself up has nothing to test: stop loudly. */
static inline void fuzz_die(const char *what)
{
	fprintf(stderr, "fuzz harness: %s\n", what);
	abort();
}

/* The path of a file holding exactly data[0..size). */
static inline const char *fuzz_input_file(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static char path[64];
	if (fd < 0) {
		fd = memfd_create("gpuperf-fuzz-input", 0);
		if (fd < 0)
			fuzz_die("memfd_create failed");
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
		fuzz_die("cannot write the input file");
	return path;
}

static char fuzz_dir_path[] = "/tmp/gpuperf-fuzz-XXXXXX";

static inline int fuzz_dir_remove_one(const char *path, const struct stat *st, int flag,
				      struct FTW *ftw)
{
	return remove(path);
}

static inline void fuzz_dir_remove(void)
{
	nftw(fuzz_dir_path, fuzz_dir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A temporary folder for what the code under test writes. */
static inline const char *fuzz_out_dir(void)
{
	static int made;
	if (!made) {
		if (!mkdtemp(fuzz_dir_path))
			fuzz_die("mkdtemp failed");
		atexit(fuzz_dir_remove);
		made = 1;
	}
	return fuzz_dir_path;
}

static inline FILE *fuzz_devnull(void)
{
	static FILE *f;
	if (!f && !(f = fopen("/dev/null", "w")))
		fuzz_die("cannot open /dev/null");
	return f;
}

/* jansson seeds its hash tables at random; a fixed seed keeps object iteration order,
 * and so a crash, reproducible from one run to the next. */
static inline void fuzz_json_seed(void)
{
	json_object_seed(1);
}

#endif
