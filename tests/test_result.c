/* JSON results and console tables: what is written reads back, and a failed write
 * leaves nothing behind. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/error.h"
#include "core/version.h"
#include "report/result.h"
#include "report/table.h"
#include "test.h"

static int dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static size_t file_read(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "rb");
	size_t n = 0;
	if (f) {
		n = fread(buf, 1, cap - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return n;
}

TEST(result_write_read_back)
{
	char *argv[] = { "maxbatch", "--model", "resnet50" };
	json_t *res = result_new("maxbatch", 3, argv);
	CHECK(res != NULL);
	if (!res)
		return;
	struct nvml_static_info info = { .name = "NVIDIA H100 80GB HBM3",
					 .uuid = "GPU-1",
					 .driver_version = "550.54.15",
					 .cuda_driver_version = 12040,
					 .mem_total_bytes = 85520809984ULL,
					 .power_limit_mw = 700000,
					 .max_sm_clock_mhz = 1980,
					 .max_mem_clock_mhz = 2619 };
	CHECK_EQ_INT(result_set_gpu(res, result_gpu_from_nvml(&info)), 0);
	json_object_set_new(json_object_get(res, "measurements"), "max_batch", json_integer(384));

	char dir[512], path[600];
	snprintf(dir, sizeof(dir), "%s/a/b/c", test_tmpdir());
	CHECK_EQ_INT(result_write(res, dir, "maxbatch_resnet50", path, sizeof(path)), 0);
	json_decref(res);
	char want[600];
	snprintf(want, sizeof(want), "%s/maxbatch_resnet50.json", dir);
	CHECK(!strcmp(path, want));
	CHECK_EQ_INT(dir_entries(dir), 1); /* the temporary file is gone */

	json_t *back = NULL;
	CHECK_EQ_INT(result_read(path, &back), 0);
	if (!back)
		return;
	CHECK(!strcmp(json_string_value(json_object_get(back, "schema")), "gpuperf.result/1"));
	CHECK(!strcmp(json_string_value(json_object_get(back, "gpuperf_version")), GPUPERF_VERSION));
	CHECK(!strcmp(json_string_value(json_object_get(back, "command")), "maxbatch"));
	json_t *args = json_object_get(back, "argv");
	CHECK_EQ_INT(json_array_size(args), 3);
	CHECK(!strcmp(json_string_value(json_array_get(args, 2)), "resnet50"));
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	CHECK(!strcmp(json_string_value(json_object_get(back, "host")), host));
	const char *started = json_string_value(json_object_get(back, "started_utc"));
	const char *finished = json_string_value(json_object_get(back, "finished_utc"));
	CHECK(started && strlen(started) == 20 && started[10] == 'T' && started[19] == 'Z');
	CHECK(finished && strcmp(finished, started) >= 0);
	json_t *gpu = json_object_get(back, "gpu");
	CHECK(!strcmp(json_string_value(json_object_get(gpu, "name")), "NVIDIA H100 80GB HBM3"));
	CHECK(!strcmp(json_string_value(json_object_get(gpu, "cuda_driver_version")), "12.4"));
	CHECK_NEAR(json_number_value(json_object_get(gpu, "memory_mib")), 81559.0, 0.5);
	CHECK_NEAR(json_number_value(json_object_get(gpu, "power_limit_w")), 700.0, 1e-9);
	CHECK(json_is_object(json_object_get(back, "settings")));
	CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(back, "measurements"),
							"max_batch")), 384);
	json_decref(back);
}

TEST(result_new_has_null_gpu)
{
	json_t *res = result_new("workers", 0, NULL);
	CHECK(res && json_is_null(json_object_get(res, "gpu")));
	CHECK(res && json_array_size(json_object_get(res, "argv")) == 0);
	CHECK_EQ_INT(result_set_gpu(res, json_string("not an object")), GP_EINVAL);
	json_decref(res);
}

TEST(result_write_failure_leaves_nothing)
{
	/* Tests run as root, so permissions do not stop a write: a regular file used
	 * as a directory does. */
	const char *tmp = test_tmpdir();
	char file[512], dir[600];
	snprintf(file, sizeof(file), "%s/plain_file", tmp);
	FILE *f = fopen(file, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fclose(f);
	snprintf(dir, sizeof(dir), "%s/results", file);
	json_t *res = result_new("maxbatch", 0, NULL);
	CHECK_EQ_INT(result_write(res, dir, "r", NULL, 0), GP_EIO);
	CHECK_MSG(strstr(gp_errmsg(), "cannot create directory") && strstr(gp_errmsg(), dir) &&
			  strstr(gp_errmsg(), "Not a directory"),
		  "message: %s", gp_errmsg());
	CHECK_EQ_INT(dir_entries(tmp), 1);

	/* A directory where the result should go makes the rename fail: the
	 * temporary file must not stay behind. */
	char blocker[600];
	snprintf(blocker, sizeof(blocker), "%s/r.json", tmp);
	CHECK_EQ_INT(mkdir(blocker, 0755), 0);
	CHECK_EQ_INT(result_write(res, tmp, "r", NULL, 0), GP_EIO);
	CHECK_MSG(strstr(gp_errmsg(), "cannot write") && strstr(gp_errmsg(), "r.json"),
		  "message: %s", gp_errmsg());
	CHECK_EQ_INT(dir_entries(tmp), 2); /* plain_file and the r.json directory */
	json_decref(res);
}

TEST(result_read_rejects_other_json)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/other.json", test_tmpdir());
	FILE *f = fopen(path, "w");
	if (!f)
		SKIP("cannot create a file in the test directory");
	fputs("{\"schema\": \"something/2\"}", f);
	fclose(f);
	json_t *res = NULL;
	CHECK_EQ_INT(result_read(path, &res), GP_EFORMAT);
	CHECK(strstr(gp_errmsg(), "not a gpuperf result") != NULL);
	CHECK_EQ_INT(result_read("/nonexistent/x.json", &res), GP_EIO);
	CHECK(res == NULL);
}

TEST(table_print_aligned)
{
	struct table t;
	table_init(&t);
	CHECK_EQ_INT(table_add_col(&t, "batch", TABLE_RIGHT), 0);
	CHECK_EQ_INT(table_add_col(&t, "step ms", TABLE_RIGHT), 0);
	CHECK_EQ_INT(table_add_col(&t, "status", TABLE_LEFT), 0);
	CHECK_EQ_INT(table_add_row(&t, "%d\t%.1f\t%s", 64, 101.25, "ok"), 0);
	CHECK_EQ_INT(table_add_row(&t, "%d\t%.1f\t%s", 1024, 9.0, "out of memory"), 0);
	CHECK_EQ_INT(table_add_row(&t, "%d\t%d", 1, 2), GP_EINVAL);
	CHECK_EQ_INT(table_add_col(&t, "late", TABLE_LEFT), GP_EINVAL);

	char out[1024];
	FILE *f = fmemopen(out, sizeof(out), "w");
	CHECK_EQ_INT(table_print(&t, f), 0);
	fclose(f);
	const char *want = "batch  step ms  status\n"
			   "-----------------------------\n"
			   "   64    101.2  ok\n"
			   " 1024      9.0  out of memory\n";
	CHECK_MSG(!strcmp(out, want), "got:\n%s", out);
	table_free(&t);
}

TEST(table_csv_quoting)
{
	struct table t;
	table_init(&t);
	table_add_col(&t, "model", TABLE_LEFT);
	table_add_col(&t, "note", TABLE_LEFT);
	table_add_col(&t, "img/s", TABLE_RIGHT);
	CHECK_EQ_INT(table_add_row(&t, "%s\t%s\t%d", "resnet50", "fp16, channels_last", 2800), 0);
	CHECK_EQ_INT(table_add_row(&t, "%s\t%s\t%d", "say \"hi\"", "two\nlines", 1), 0);
	char path[512], got[1024];
	snprintf(path, sizeof(path), "%s/t.csv", test_tmpdir());
	CHECK_EQ_INT(table_write_csv(&t, path), 0);
	file_read(path, got, sizeof(got));
	const char *want = "model,note,img/s\r\n"
			   "resnet50,\"fp16, channels_last\",2800\r\n"
			   "\"say \"\"hi\"\"\",\"two\nlines\",1\r\n";
	CHECK_MSG(!strcmp(got, want), "got:\n%s", got);
	CHECK_EQ_INT(table_write_csv(&t, "/nonexistent/dir/t.csv"), GP_EIO);
	CHECK(strstr(gp_errmsg(), "/nonexistent/dir/t.csv") != NULL);
	table_free(&t);
}
