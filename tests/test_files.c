/* User files and written files: a FIFO, a directory or a decompression bomb given as
 * input is refused (or, as an image, skipped) at once; every output is replaced
 * whole, and an interrupted write leaves no temporary file behind. */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "data/image.h"
#include "test.h"

#define SAMPLE_TRACE "tests/data/sample_trace/profiler_trace.json"

/* Entries of dir other than "." and "..", and how many of them start with '.'. */
static int dir_count(const char *dir, int *hidden)
{
	int n = 0;
	*hidden = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		n++;
		*hidden += e->d_name[0] == '.';
	}
	if (d)
		closedir(d);
	return n;
}

static void file_put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK_MSG(f != NULL, "cannot write %s", path);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* The file's bytes as a string (at most cap - 1 of them). */
static void file_get(const char *path, char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	fclose(f);
}

TEST(file_open_read_refuses_fifo_and_directory)
{
	const char *dir = test_tmpdir();
	char path[600];
	int fd;
	long long size;
	snprintf(path, sizeof(path), "%s/a.jpg", dir);
	CHECK_EQ_INT(mkfifo(path, 0644), 0);
	CHECK_EQ_INT(file_open_read(path, &fd, &size), GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "is not a regular file (a FIFO)") != NULL, "%s",
		  gp_errmsg());
	CHECK_EQ_INT(file_open_read(dir, &fd, &size), GP_EFORMAT);
	CHECK(strstr(gp_errmsg(), "(a directory)") != NULL);
	snprintf(path, sizeof(path), "%s/missing", dir);
	CHECK_EQ_INT(file_open_read(path, &fd, &size), GP_EIO);
	snprintf(path, sizeof(path), "%s/ok.bin", dir);
	file_put(path, "12345");
	CHECK_EQ_INT(file_open_read(path, &fd, &size), 0);
	CHECK_EQ_INT(size, 5);
	char buf[8];
	/* blocking again: a read returns the bytes */
	CHECK_EQ_INT(read(fd, buf, sizeof(buf)), 5);
	close(fd);
}

TEST(file_atomic_tmp_names_owner)
{
	const char *dir = test_tmpdir();
	char path[600], want[700], buf[64];
	struct atomic_file af;
	int hidden, live = file_tmp_live_count();
	snprintf(path, sizeof(path), "%s/out.json", dir);
	CHECK_EQ_INT(atomic_file_open(&af, path), 0);
	snprintf(want, sizeof(want), "%s/.out.json.tmp.%ld", dir, (long)getpid());
	CHECK_MSG(!strcmp(af.tmp_path, want), "%s", af.tmp_path);
	CHECK_EQ_INT(file_tmp_live_count(), live + 1);
	/* A second writer of the same path gets a name of its own. */
	struct atomic_file af2;
	CHECK_EQ_INT(atomic_file_open(&af2, path), 0);
	CHECK(strcmp(af.tmp_path, af2.tmp_path) != 0);
	atomic_file_abort(&af2);
	fputs("new", af.f);
	CHECK_EQ_INT(access(path, F_OK), -1); /* nothing visible before commit */
	CHECK_EQ_INT(atomic_file_commit(&af), 0);
	CHECK_EQ_INT(file_tmp_live_count(), live);
	file_get(path, buf, sizeof(buf));
	CHECK(!strcmp(buf, "new"));
	CHECK_EQ_INT(dir_count(dir, &hidden), 1);
	CHECK_EQ_INT(hidden, 0);
	CHECK_EQ_INT(atomic_file_write(path, "whole", 5), 0);
	file_get(path, buf, sizeof(buf));
	CHECK(!strcmp(buf, "whole"));
	snprintf(path, sizeof(path), "%s/no/such/dir/x", dir);
	CHECK_EQ_INT(atomic_file_write(path, "x", 1), GP_EIO);
	CHECK_EQ_INT(file_tmp_live_count(), live);
}

/* SIGINT and SIGTERM during a write: the process dies of the signal, and the
 * temporary file (a full-size one, as a checkpoint's would be) is gone. */
TEST(file_signal_removes_live_tmp)
{
	const int sigs[2] = { SIGTERM, SIGINT };
	for (int k = 0; k < 2; k++) {
		const char *dir = test_tmpdir();
		char path[600];
		int hidden;
		snprintf(path, sizeof(path), "%s/w.safetensors", dir);
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			struct atomic_file af;
			static char block[1 << 20];
			if (file_cleanup_on_signals() < 0 || atomic_file_open(&af, path) < 0)
				_exit(3);
			for (int i = 0; i < 8; i++)
				fwrite(block, 1, sizeof(block), af.f);
			fflush(af.f);
			raise(sigs[k]);
			_exit(4);
		}
		int st = 0;
		CHECK_EQ_INT(waitpid(pid, &st, 0), pid);
		CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == sigs[k], "status 0x%x", st);
		CHECK_EQ_INT(dir_count(dir, &hidden), 0);
	}
}
