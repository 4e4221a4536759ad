/* scale's report with PyTorch DDP beside (scale --torch): the ratio and efficiency
 * arithmetic, the table and its CSV, scale.json's runs, the summary line and the
 * chart from hand-made rows; the yardstick's JSON line read back; and the one note
 * when the yardstick cannot run (CPU device, no python3 with torch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cmd/yardstick.h"
#include "core/error.h"
#include "core/file.h"
#include "report/plots.h"
#include "report/result.h"
#include "report/scale_report.h"
#include "report/table.h"
#include "test.h"

/* The file as a string, NULL where it cannot be read. */
static char *slurp(const char *path)
{
	char *buf = NULL;
	size_t n;
	if (file_read_all(path, &buf, &n) < 0) {
		gp_error_clear();
		return NULL;
	}
	return buf;
}

/* Three counts: gpuperf 1000, 1900, 3600 img/s; PyTorch 800 and 1500, and a failure
 * at 4 GPUs. Batch 100 per GPU. */
static void rows_make(struct scale_row *r)
{
	static const double img[] = { 1000, 1900, 3600 }, ms[] = { 100, 105.2631578947, 111.1111111111 };
	memset(r, 0, sizeof(*r) * 3);
	for (int i = 0; i < 3; i++) {
		r[i].gpus = 1 << i;
		r[i].img_s = img[i];
		r[i].img_s_per_gpu = img[i] / r[i].gpus;
		r[i].ms_per_step = ms[i];
		r[i].allreduce_ms = i ? 8 : 0;
		r[i].slowest_rank = i ? 1 : 0;
		r[i].slowest_ms = r[i].fastest_ms = ms[i];
		r[i].mfu = (struct mfu){ 4.0e9, 4.0e9 * img[i] / 1e12, -1, -1, -1, -1, NULL };
	}
	r[0].data_wait_pct = 1.5; /* as read from a run on --data; the last unknown */
	r[1].data_wait_pct = 3.3;
	r[2].data_wait_pct = -1;
	r[0].torch = (struct scale_torch){ .state = SCALE_TORCH_OK, .img_s = 800, .img_s_per_gpu = 800,
					   .ms_per_step = 125, .peak_reserved_mib = 20480 };
	r[1].torch = (struct scale_torch){ .state = SCALE_TORCH_OK, .img_s = 1500, .img_s_per_gpu = 750,
					   .ms_per_step = 133.3, .peak_reserved_mib = 20992 };
	r[2].torch = (struct scale_torch){ .state = SCALE_TORCH_FAILED };
	snprintf(r[2].torch.note, sizeof(r[2].torch.note), "stopped after 120 s");
}

TEST(scale_report_ratio_and_efficiency)
{
	CHECK_NEAR(scale_ratio(1300, 1000), 1.3, 1e-15);
	CHECK(isnan(scale_ratio(1300, 0)));
	CHECK(isnan(scale_ratio(0, 1000)));
	CHECK(isnan(scale_ratio(NAN, 1000)));
	CHECK(isnan(scale_ratio(1300, INFINITY)));
	CHECK(isnan(scale_ratio(-5, 1000)));

	struct scale_row r[3];
	rows_make(r);
	scale_rows_derive(r, 3);
	CHECK_NEAR(r[0].efficiency, 1.0, 1e-15);
	CHECK_NEAR(r[1].efficiency, 0.95, 1e-15);
	CHECK_NEAR(r[2].efficiency, 0.9, 1e-15);
	/* gpuperf over PyTorch at each count; PyTorch's own efficiency against its 1 GPU */
	CHECK_NEAR(r[0].torch.ratio, 1.25, 1e-15);
	CHECK_NEAR(r[1].torch.ratio, 1900.0 / 1500.0, 1e-15);
	CHECK(isnan(r[2].torch.ratio));
	CHECK_NEAR(r[0].torch.efficiency, 1.0, 1e-15);
	CHECK_NEAR(r[1].torch.efficiency, 1500.0 / 1600.0, 1e-15);
	CHECK(isnan(r[2].torch.efficiency));
	/* exposed: step time over the one-GPU run; hidden: the rest of the all-reduce */
	CHECK_NEAR(r[1].exposed_ms, 5.2631578947, 1e-9);
	CHECK_NEAR(r[1].hidden_pct, 100 * (1 - 5.2631578947 / 8), 1e-7);
	CHECK(r[0].hidden_pct < 0);
	/* without PyTorch's one-GPU run its efficiency is unknown, the ratio still known */
	r[0].torch.state = SCALE_TORCH_FAILED;
	scale_rows_derive(r, 3);
	CHECK(isnan(r[1].torch.efficiency));
	CHECK_NEAR(r[1].torch.ratio, 1900.0 / 1500.0, 1e-15);
}

TEST(scale_report_table_csv_and_summary_with_torch)
{
	struct scale_row r[3];
	rows_make(r);
	scale_rows_derive(r, 3);
	struct table t;
	table_init(&t);
	CHECK_EQ_INT(scale_table_fill(&t, r, 3, 1, 1, 0), 0);
	CHECK_EQ_INT(t.n_cols, 13);
	CHECK(!strcmp(t.titles[11], "torch img/s"));
	CHECK(!strcmp(t.titles[12], "x torch"));
	CHECK_EQ_INT(t.n_rows, 3);
	if (t.n_rows == 3 && t.n_cols == 13) {
		CHECK(!strcmp(t.cells[0 * 13 + 11], "800.0"));
		CHECK(!strcmp(t.cells[0 * 13 + 12], "1.25x"));
		CHECK(!strcmp(t.cells[1 * 13 + 11], "1500.0"));
		CHECK(!strcmp(t.cells[1 * 13 + 12], "1.27x"));
		CHECK(!strcmp(t.cells[2 * 13 + 11], "failed"));
		CHECK(!strcmp(t.cells[2 * 13 + 12], "-"));
		CHECK(!strcmp(t.cells[2 * 13 + 3], "90.0%"));
	}
	char path[600];
	snprintf(path, sizeof(path), "%s/scaling.csv", test_tmpdir());
	CHECK_EQ_INT(table_write_csv(&t, path), 0);
	char *csv = slurp(path);
	CHECK(csv != NULL);
	if (csv) {
		const char *head = "GPUs,img/s,img/s/GPU,efficiency,ms/step,all-reduce ms,hidden,"
				   "slowest rank,TFLOP/s,MFU,J/img,torch img/s,x torch\r\n";
		CHECK_MSG(!strncmp(csv, head, strlen(head)), "%s", csv);
		CHECK_MSG(strstr(csv, ",unknown,-,800.0,1.25x\r\n") != NULL, "%s", csv);
		CHECK_MSG(strstr(csv, ",failed,-\r\n") != NULL, "%s", csv);
	}
	free(csv);
	table_free(&t);

	/* without --torch the table keeps its eleven columns */
	table_init(&t);
	CHECK_EQ_INT(scale_table_fill(&t, r, 3, 1, 0, 0), 0);
	CHECK_EQ_INT(t.n_cols, 11);
	table_free(&t);

	/* --data: the data wait after J/img, before PyTorch's two */
	table_init(&t);
	CHECK_EQ_INT(scale_table_fill(&t, r, 3, 1, 1, 1), 0);
	CHECK_EQ_INT(t.n_cols, 14);
	if (t.n_cols == 14 && t.n_rows == 3) {
		CHECK(!strcmp(t.titles[11], "data wait"));
		CHECK(!strcmp(t.titles[12], "torch img/s"));
		CHECK(!strcmp(t.cells[0 * 14 + 11], "1.5%"));
		CHECK(!strcmp(t.cells[1 * 14 + 11], "3.3%"));
		CHECK(!strcmp(t.cells[2 * 14 + 11], "-"));
		CHECK(!strcmp(t.cells[0 * 14 + 12], "800.0"));
	}
	table_free(&t);

	char line[512];
	scale_summary(r, 3, line, sizeof(line));
	CHECK_MSG(!strcmp(line, "summary: 4 GPUs 3600.0 img/s, 90.0% efficiency; gpuperf / PyTorch "
			  "DDP img/s: 1.25x at 1, 1.27x at 2, - at 4"), "%s", line);
	r[0].torch.state = r[1].torch.state = SCALE_TORCH_NOT_RUN;
	scale_rows_derive(r, 3);
	scale_summary(r, 3, line, sizeof(line));
	CHECK_MSG(!strcmp(line, "summary: 4 GPUs 3600.0 img/s, 90.0% efficiency"), "%s", line);
}

/* scale.json's runs and the chart drawn from them: PyTorch's line makes a second
 * series on both panels. */
TEST(scale_report_json_and_chart_with_torch)
{
	struct scale_row r[3];
	rows_make(r);
	scale_rows_derive(r, 3);
	json_t *runs = scale_runs_json(r, 3, 1);
	CHECK_EQ_INT(json_array_size(runs), 3);
	json_t *t0 = json_object_get(json_array_get(runs, 0), "torch");
	json_t *t1 = json_object_get(json_array_get(runs, 1), "torch");
	json_t *t2 = json_object_get(json_array_get(runs, 2), "torch");
	CHECK(!strcmp(json_string_value(json_object_get(t0, "status")), "ok"));
	CHECK_NEAR(json_number_value(json_object_get(t0, "img_s")), 800, 0);
	CHECK_NEAR(json_number_value(json_object_get(t0, "ms_per_step")), 125, 0);
	CHECK_NEAR(json_number_value(json_object_get(t0, "peak_reserved_mib")), 20480, 0);
	CHECK_NEAR(json_number_value(json_object_get(t0, "ratio")), 1.25, 1e-15);
	CHECK_NEAR(json_number_value(json_object_get(t1, "ratio")), 1900.0 / 1500.0, 1e-15);
	CHECK_NEAR(json_number_value(json_object_get(t1, "efficiency")), 1500.0 / 1600.0, 1e-15);
	CHECK(!strcmp(json_string_value(json_object_get(t2, "status")), "failed"));
	CHECK(!strcmp(json_string_value(json_object_get(t2, "note")), "stopped after 120 s"));
	CHECK(json_object_get(t2, "ratio") == NULL);
	CHECK_NEAR(json_number_value(json_object_get(json_array_get(runs, 2), "efficiency")), 0.9, 1e-15);
	json_t *plain = scale_runs_json(r, 3, 0);
	CHECK(json_object_get(json_array_get(plain, 0), "torch") == NULL);
	CHECK_NEAR(json_number_value(json_object_get(json_array_get(runs, 1), "data_wait_pct")), 3.3, 0);
	CHECK(json_is_null(json_object_get(json_array_get(runs, 2), "data_wait_pct")));

	/* the chart, drawn from the result as `gpuperf plot` draws it */
	struct test_pixel_counts with, without;
	char dir_a[600], dir_b[600], png[700];
	snprintf(dir_a, sizeof(dir_a), "%s/with", test_tmpdir());
	snprintf(dir_b, sizeof(dir_b), "%s/without", test_tmpdir());
	for (int k = 0; k < 2; k++) {
		json_t *res = result_new("scale", 0, NULL);
		json_object_set_new(res, "settings", json_pack("{s:s, s:s, s:s, s:i}", "model", "resnet50",
				    "precision", "bf16", "device", "cuda", "batch_per_gpu", 100));
		json_object_set(json_object_get(res, "measurements"), "runs", k ? plain : runs);
		CHECK_MSG(plots_draw(res, k ? dir_b : dir_a) == 0, "%s", gp_errmsg());
		snprintf(png, sizeof(png), "%s/%s", k ? dir_b : dir_a, plots_chart_name("scale"));
		test_check_png(png, 1280, 460, k ? &without : &with);
		json_decref(res);
	}
	CHECK_MSG(with.not_white > without.not_white + 500, "PyTorch's lines drew %ld pixels",
		  with.not_white - without.not_white);
	json_decref(runs);
	json_decref(plain);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* torch_ddp.py's stdout: torchrun's and NCCL's lines around rank 0's JSON line. */
TEST(scale_report_reads_the_ddp_line)
{
	char path[600], version[64] = "";
	struct scale_torch t;
	snprintf(path, sizeof(path), "%s/torch.jsonl", test_tmpdir());
	write_text(path, "W1127 torchrun: OMP_NUM_THREADS set to 1\n{not json\n"
		   "{\"tool\": \"pytorch-ddp\", \"torch\": \"2.5.1+cu124\", \"model\": \"resnet50\", "
		   "\"precision\": \"bf16\", \"world\": 2, \"batch_per_gpu\": 256, \"ms_per_step\": 190.5, "
		   "\"img_s_total\": 2687.7, \"img_s_per_gpu\": 1343.8, \"peak_reserved_mib\": 31200}\n"
		   "NCCL INFO comm destroyed\n");
	scale_torch_read(path, 2, &t, version, sizeof(version));
	CHECK_EQ_INT(t.state, SCALE_TORCH_OK);
	CHECK_NEAR(t.img_s, 2687.7, 0);
	CHECK_NEAR(t.img_s_per_gpu, 1343.8, 0);
	CHECK_NEAR(t.ms_per_step, 190.5, 0);
	CHECK_NEAR(t.peak_reserved_mib, 31200, 0);
	CHECK(!strcmp(version, "2.5.1+cu124"));
	/* a run of other ranks than asked is no measurement of this count */
	scale_torch_read(path, 4, &t, NULL, 0);
	CHECK_EQ_INT(t.state, SCALE_TORCH_FAILED);
	CHECK_MSG(!strcmp(t.note, "torch_ddp.py ran 2 ranks, not 4"), "%s", t.note);
	write_text(path, "{\"world\": 1, \"img_s_total\": 0, \"ms_per_step\": 3}\n");
	scale_torch_read(path, 1, &t, NULL, 0);
	CHECK_EQ_INT(t.state, SCALE_TORCH_FAILED);
	CHECK_MSG(!strcmp(t.note, "torch_ddp.py's line has no positive \"img_s_total\""), "%s", t.note);
	write_text(path, "Traceback (most recent call last):\n");
	scale_torch_read(path, 1, &t, NULL, 0);
	CHECK_EQ_INT(t.state, SCALE_TORCH_FAILED);
	CHECK(!strcmp(t.note, "torch_ddp.py printed no measurement"));
	snprintf(path, sizeof(path), "%s/absent.jsonl", test_tmpdir());
	scale_torch_read(path, 1, &t, NULL, 0);
	CHECK(!strcmp(t.note, "no output from torch_ddp.py"));
}

/* Without python3 on PATH the probe says so (bench's and scale's note); the scripts
 * are found from the working folder. */
TEST(scale_report_yardstick_probe_without_python)
{
	char why[256] = "", path[4096];
	const char *old = getenv("PATH");
	char *saved = old ? strdup(old) : NULL;
	char empty[600];
	snprintf(empty, sizeof(empty), "%s/nopython", test_tmpdir());
	mkdir(empty, 0755);
	setenv("PATH", empty, 1);
	int ok = yardstick_usable(why, sizeof(why));
	if (saved)
		setenv("PATH", saved, 1);
	else
		unsetenv("PATH");
	free(saved);
	CHECK_EQ_INT(ok, 0);
	CHECK_MSG(!strcmp(why, "python3 with torch and torchvision is not here"), "%s", why);
	CHECK_EQ_INT(yardstick_find("torch_ddp.py", path, sizeof(path)), 1);
	CHECK_MSG(strstr(path, "tools/torch_ddp.py") != NULL, "%s", path);
	CHECK_EQ_INT(yardstick_find("no_such_yardstick.py", path, sizeof(path)), 0);
}

/* scale --torch where the yardstick cannot run: one note, then scale runs and writes
 * its result as without --torch, the note recorded. On the CPU the device is the
 * reason (torch_ddp.py has no CPU path), whatever python3 there is. */
TEST(scale_report_cli_torch_skipped_on_cpu)
{
	char cmd[2048], out[16384], path[700], tmp[500];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "PATH=%s/nopython:/usr/bin:/bin timeout 120 %s scale --model "
		 "simple_cnn --device cpu --batch 2 --size 32 --steps 2 --gpus 1 --torch --csv "
		 "--out %s/s", tmp, test_bin(), tmp);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "scale --torch exited %d: %s", rc, out);
	const char *note = "PyTorch DDP yardstick skipped: tools/torch_ddp.py runs on CUDA GPUs "
			   "only, not with --device cpu\n";
	CHECK_MSG(!strncmp(out, note, strlen(note)), "%s", out);
	CHECK_MSG(strstr(out + strlen(note), "PyTorch") == NULL, "%s", out);
	CHECK(strstr(out, "x torch") == NULL);
	snprintf(path, sizeof(path), "%s/s/scale.json", tmp);
	json_t *res = json_load_file(path, 0, NULL);
	CHECK_MSG(res != NULL, "no %s", path);
	json_t *m = json_object_get(res, "measurements");
	json_t *pt = json_object_get(m, "pytorch");
	CHECK(!strcmp(json_string_value(json_object_get(pt, "status")), "skipped"));
	CHECK(strstr(json_string_value(json_object_get(pt, "note")), "--device cpu") != NULL);
	CHECK(json_is_true(json_object_get(json_object_get(res, "settings"), "torch")));
	CHECK_EQ_INT(json_array_size(json_object_get(m, "runs")), 1);
	CHECK(json_object_get(json_array_get(json_object_get(m, "runs"), 0), "torch") == NULL);
	json_decref(res);
	snprintf(path, sizeof(path), "%s/s/scaling.png", tmp);
	struct test_pixel_counts pc;
	test_check_png(path, 1280, 460, &pc);
	snprintf(path, sizeof(path), "%s/s/scaling.csv", tmp);
	char *csv = slurp(path);
	CHECK_MSG(csv && !strstr(csv, "torch"), "%s", csv ? csv : "no scaling.csv");
	free(csv);
}

/* A failed torchrun's log ends in its own summary between rules; the note is the
 * rank's exception. */
TEST(scale_report_torchrun_error_line)
{
	char path[600], line[200];
	snprintf(path, sizeof(path), "%s/torch_log.txt", test_tmpdir());
	write_text(path, "W1127 10:00:00 torch/distributed/run.py:793] Setting OMP_NUM_THREADS\n"
		   "[rank0]: Traceback (most recent call last):\n"
		   "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
		   "E1127 torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
		   "============================================================\n"
		   "tools/torch_ddp.py FAILED\n"
		   "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
		   "============================================================\n");
	yardstick_error_line(path, line, sizeof(line));
	CHECK_MSG(!strcmp(line, "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
			  "allocate 2.00 GiB"), "%s", line);
	write_text(path, "something went wrong\n-----\n=====\n\n");
	yardstick_error_line(path, line, sizeof(line));
	CHECK_MSG(!strcmp(line, "something went wrong"), "%s", line);
	write_text(path, "");
	yardstick_error_line(path, line, sizeof(line));
	CHECK(!strcmp(line, ""));
}
