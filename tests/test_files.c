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

/* A FIFO where a user file belongs is one line at once, not a hang: as weights to
 * load, as a CIFAR-10 batch, as a result to plot and as a trace to analyze. */
TEST(file_fifo_inputs_refused_at_once)
{
	const char *dir = test_tmpdir();
	char path[600], cmd[2048], out[4096];
	snprintf(path, sizeof(path), "%s/w.safetensors", dir);
	CHECK_EQ_INT(mkfifo(path, 0644), 0);
	snprintf(path, sizeof(path), "%s/data_batch_1.bin", dir);
	CHECK_EQ_INT(mkfifo(path, 0644), 0);
	snprintf(path, sizeof(path), "%s/r.json", dir);
	CHECK_EQ_INT(mkfifo(path, 0644), 0);
	snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
	CHECK_EQ_INT(mkfifo(path, 0644), 0);
	const char *runs[][2] = {
		{ "train --model simple_cnn --device cpu --steps 1 --batch 2 --load '%s/w.safetensors'",
		  "w.safetensors' is not a regular file (a FIFO)" },
		{ "train --model simple_cnn --device cpu --steps 1 --batch 2 --data 'cifar10:%s'",
		  "data_batch_1.bin' is not a regular file (a FIFO)" },
		{ "plot '%s/r.json'", "r.json' is not a regular file (a FIFO)" },
		{ "analyze '%s'", "profiler_trace.json' is not a regular file (a FIFO)" },
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char args[1024];
		snprintf(args, sizeof(args), runs[i][0], dir);
		snprintf(cmd, sizeof(cmd), "timeout 20 %s %s", test_bin(), args);
		int rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc != 0 && rc != 124, "'%s' exited %d", args, rc);
		CHECK_MSG(test_count_lines(out) == 1, "'%s' printed: %s", args, out);
		CHECK_MSG(strstr(out, runs[i][1]) != NULL, "'%s' said: %s", args, out);
	}
}

/* A FIFO named like an image in an ImageFolder is skipped and counted as a corrupt
 * file, and the run goes on. */
TEST(file_fifo_image_skipped)
{
	const char *dir = test_tmpdir();
	char path[700], cmd[2048], out[8192];
	snprintf(cmd, sizeof(cmd), "cp -r tests/data/bad/class_000 tests/data/bad/class_001 '%s/'",
		 dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/class_000/fifo.jpg", dir);
	CHECK_EQ_INT(mkfifo(path, 0644), 0);
	snprintf(cmd, sizeof(cmd), "timeout 20 %s loader --data '%s' --batch 4 --workers 0 "
		 "--batches 6 --size 16", test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "fifo.jpg': '") && strstr(out, "is not a regular file (a FIFO)"),
		  "%s", out);
}

/* Sizes from the header, refused before any pixel is decoded: a PNG's IHDR and a
 * JPEG's SOF claiming 20000 x 20000 (400 M pixels, 1.2 GB decoded). */
TEST(file_image_pixel_cap)
{
	struct image_ctx ctx;
	enum image_kind kind;
	int w, h;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	uint8_t png[64] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13,
			    'I', 'H', 'D', 'R' };
	const uint32_t sides[3][2] = { { 20000, 20000 }, { 9459, 9460 }, { 9459, 9459 } };
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k < 4; k++) {
			png[16 + k] = (uint8_t)(sides[i][0] >> (24 - 8 * k));
			png[20 + k] = (uint8_t)(sides[i][1] >> (24 - 8 * k));
		}
		int rc = image_header(&ctx, png, sizeof(png), &kind, &w, &h);
		/* 9459 x 9459 = 89,472,681 is under PIL's 89,478,485; 9459 x 9460 is over */
		CHECK_EQ_INT(rc, i < 2 ? GP_EFORMAT : 0);
		if (i < 2)
			CHECK_MSG(strstr(gp_errmsg(), "pixels is over the limit of 89478485"), "%s",
				  gp_errmsg());
	}
	uint8_t rgb[16 * 8 * 3] = { 0 }, *jpeg;
	size_t len;
	CHECK_EQ_INT(image_encode_jpeg(rgb, 16, 8, 90, &jpeg, &len), 0);
	if (test_failed())
		goto out_ctx;
	CHECK_EQ_INT(image_header(&ctx, jpeg, len, &kind, &w, &h), 0);
	CHECK_EQ_INT(w * 1000 + h, 16008);
	size_t sof = 0;
	for (size_t i = 2; i + 9 < len && !sof; i++)
		if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0)
			sof = i;
	CHECK(sof > 0);
	if (sof) {
		/* SOF0: marker, length (2), precision (1), height (2), width (2) */
		jpeg[sof + 5] = jpeg[sof + 7] = 20000 >> 8;
		jpeg[sof + 6] = jpeg[sof + 8] = 20000 & 255;
		CHECK_EQ_INT(image_header(&ctx, jpeg, len, &kind, &w, &h), GP_EFORMAT);
		CHECK_MSG(strstr(gp_errmsg(), "20000x20000 pixels is over the limit"), "%s",
			  gp_errmsg());
	}
	image_jpeg_free(jpeg);
out_ctx:
	image_ctx_free(&ctx);
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

/* analyze replaces its outputs whole: a hard link to the old report keeps the old
 * bytes (a write in place would change them), and no temporary file remains. */
TEST(file_analyze_outputs_replaced_whole)
{
	const char *dir = test_tmpdir();
	char cmd[2048], out[16384], path[600], keep[600], buf[64];
	const char *names[2] = { "profile_report.md", "analysis.json" };
	snprintf(cmd, sizeof(cmd), "cp " SAMPLE_TRACE " '%s/'", dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		snprintf(keep, sizeof(keep), "%s/keep%d", dir, i);
		file_put(path, "old");
		CHECK_EQ_INT(link(path, keep), 0);
	}
	snprintf(cmd, sizeof(cmd), "%s analyze '%s'", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		snprintf(keep, sizeof(keep), "%s/keep%d", dir, i);
		file_get(keep, buf, sizeof(buf));
		CHECK_MSG(!strcmp(buf, "old"), "%s was written in place", names[i]);
		file_get(path, buf, sizeof(buf));
		CHECK_MSG(strcmp(buf, "old") != 0, "%s not rewritten", names[i]);
	}
	int hidden;
	dir_count(dir, &hidden);
	CHECK_EQ_INT(hidden, 0);
}

/* dataset make over an earlier one replaces each image whole too. */
TEST(file_dataset_images_replaced_whole)
{
	const char *dir = test_tmpdir();
	char cmd[2048], out[4096], path[600], keep[600];
	struct stat a, b;
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s/d' --classes 1 --images 2 "
		 "--size 16x16 --threads 1", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	snprintf(path, sizeof(path), "%s/d/class_000/img_0000000.jpg", dir);
	snprintf(keep, sizeof(keep), "%s/keep.jpg", dir);
	CHECK_EQ_INT(link(path, keep), 0);
	file_put(keep, "old");
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s/d' --classes 1 --images 2 "
		 "--size 16x16 --threads 1 --seed 7", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK_EQ_INT(stat(keep, &a), 0);
	CHECK_EQ_INT(stat(path, &b), 0);
	CHECK_EQ_INT(a.st_size, 3); /* the old inode untouched */
	CHECK(a.st_ino != b.st_ino && b.st_size > 100);
	int hidden;
	snprintf(path, sizeof(path), "%s/d/class_000", dir);
	CHECK_EQ_INT(dir_count(path, &hidden), 2);
	CHECK_EQ_INT(hidden, 0);
}
