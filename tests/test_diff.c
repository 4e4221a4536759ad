/* diff: the spread of repeats, the direction of each metric, the noise rule, and the
 * command on hand-made results: an improvement, a regression within noise, one
 * beyond noise and the threshold (exit 1), mismatched commands and a missing file
 * (exit 2, one line). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "report/diff.h"
#include "report/stats.h"
#include "test.h"

TEST(stats_summarize_mean_std_min_max)
{
	const double v[] = { 2, 4, 4, 4, 5, 5, 7, 9, NAN };
	struct stat_summary s;
	stats_summarize(v, 9, &s);
	CHECK_EQ_INT(s.n, 8);
	CHECK_NEAR(s.mean, 5, 1e-12);
	/* sum of squares 32 over n - 1 = 7 */
	CHECK_NEAR(s.std, sqrt(32.0 / 7), 1e-12);
	CHECK_NEAR(s.min, 2, 0);
	CHECK_NEAR(s.max, 9, 0);
	stats_summarize(v, 1, &s);
	CHECK_EQ_INT(s.n, 1);
	CHECK_NEAR(s.std, 0, 0);

	json_t *j = stats_json(&(struct stat_summary){ 5, 1.5, 3, 7, 4 }, v, 2);
	struct stat_summary back;
	CHECK(stats_is_summary(j));
	CHECK_EQ_INT(stats_read(j, &back), 0);
	CHECK_NEAR(back.std, 1.5, 0);
	CHECK_EQ_INT(back.n, 4);
	CHECK_EQ_INT(json_array_size(json_object_get(j, "values")), 2);
	json_object_set_new(j, "n", json_integer(0));
	CHECK(stats_read(j, &back) < 0);
	json_decref(j);
}

TEST(diff_direction_by_name)
{
	CHECK_EQ_INT(diff_direction_of("img_s"), DIFF_HIGHER_BETTER);
	CHECK_EQ_INT(diff_direction_of("cells[batch=64,precision=fp16].speedup"), DIFF_HIGHER_BETTER);
	CHECK_EQ_INT(diff_direction_of("runs[workers=4].mean_util"), DIFF_HIGHER_BETTER);
	CHECK_EQ_INT(diff_direction_of("maxbatch/largest_batch"), DIFF_HIGHER_BETTER);
	CHECK_EQ_INT(diff_direction_of("ms_per_step"), DIFF_LOWER_BETTER);
	CHECK_EQ_INT(diff_direction_of("cells[batch=64].peak_mib"), DIFF_LOWER_BETTER);
	CHECK_EQ_INT(diff_direction_of("peak_bytes_by_category.weights"), DIFF_LOWER_BETTER);
	CHECK_EQ_INT(diff_direction_of("total_s"), DIFF_LOWER_BETTER);
	CHECK_EQ_INT(diff_direction_of("data_wait_pct"), DIFF_LOWER_BETTER);
	CHECK_EQ_INT(diff_direction_of("params"), DIFF_NEUTRAL);
}

static struct diff_metric metric(double v, double std, int n)
{
	struct diff_metric m = { .value = v };
	if (n > 1) {
		m.spread = (struct stat_summary){ v, std, v - std, v + std, n };
		m.has_spread = 1;
	}
	return m;
}

TEST(diff_noise_rule)
{
	double se;
	/* se = sqrt(4/4 + 4/4) = 1.414: a change of 2.5 is within 2 se, 3 beyond */
	struct diff_metric a = metric(100, 2, 4), b = metric(97.5, 2, 4), c = metric(97, 2, 4);
	CHECK_EQ_INT(diff_beyond_noise(&a, &b, &se), 0);
	CHECK_NEAR(se, sqrt(2.0), 1e-12);
	CHECK_EQ_INT(diff_beyond_noise(&a, &c, &se), 1);
	/* one side without repeats: the other's std stands for it, sqrt(1/4 + 1) */
	struct diff_metric single = metric(95, 0, 1);
	CHECK_EQ_INT(diff_beyond_noise(&a, &single, &se), 1);
	CHECK_NEAR(se, 2 * sqrt(1.25), 1e-12);
	/* no spread anywhere: any change counts, none does not */
	struct diff_metric x = metric(10, 0, 1), y = metric(10.1, 0, 1);
	CHECK_EQ_INT(diff_beyond_noise(&x, &y, &se), 1);
	CHECK(isnan(se));
	CHECK_EQ_INT(diff_beyond_noise(&x, &x, &se), 0);
}

/* A train result with img/s and ms/step repeated (mean, std, n = 5). */
static void write_train(const char *path, double img_s, double img_std, double ms, double ms_std,
			double peak_bytes)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "{\"schema\": \"gpuperf.result/1\", \"command\": \"train\", \"settings\": {},"
		   " \"measurements\": {\"model\": \"resnet18\", \"batch\": 32, \"steps\": 20,"
		   " \"img_s\": %g, \"ms_per_step\": %g, \"peak_bytes\": %g, \"first_loss\": 6.9,"
		   " \"repeat\": {\"n\": 5,"
		   " \"img_s\": {\"mean\": %g, \"std\": %g, \"min\": %g, \"max\": %g, \"n\": 5},"
		   " \"ms_per_step\": {\"mean\": %g, \"std\": %g, \"min\": %g, \"max\": %g, \"n\": 5}}}}\n",
		img_s, ms, peak_bytes, img_s, img_std, img_s - img_std, img_s + img_std, ms, ms_std,
		ms - ms_std, ms + ms_std);
	fclose(f);
}

static int run_diff(const char *a, const char *b, const char *extra, char *out, size_t cap)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s diff %s %s %s", test_bin(), a, b, extra);
	return test_run(cmd, out, cap);
}

TEST(diff_cli_improvement_noise_regression)
{
	char a[512], b[512], c[512], d[512], out[16384];
	const char *t = test_tmpdir();
	snprintf(a, sizeof(a), "%s/a.json", t);
	snprintf(b, sizeof(b), "%s/b.json", t);
	snprintf(c, sizeof(c), "%s/c.json", t);
	snprintf(d, sizeof(d), "%s/d.json", t);
	write_train(a, 1000, 5, 32.0, 0.2, 1e9);
	write_train(b, 1100, 5, 29.1, 0.2, 1e9);  /* 10% faster: improved */
	write_train(c, 990, 10, 32.3, 0.4, 1e9);  /* 1% slower, inside the spread */
	write_train(d, 900, 5, 35.5, 0.2, 1.2e9); /* 10% slower, 20% more memory */

	CHECK_EQ_INT(run_diff(a, b, "", out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "improved"), "no improvement in: %s", out);
	CHECK_MSG(strstr(out, "0 regressed"), "%s", out);

	CHECK_EQ_INT(run_diff(a, c, "", out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "0 improved, 3 within noise"), "%s", out);

	CHECK_EQ_INT(run_diff(a, d, "", out, sizeof(out)), 1);
	CHECK_MSG(strstr(out, "3 regressed"), "%s", out);
	/* a threshold above every change: worse, but not failed */
	CHECK_EQ_INT(run_diff(a, d, "--threshold 25", out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "0 regressed") && strstr(out, "3 worse"), "%s", out);

	/* --json: the rows with their verdicts and the change */
	CHECK_EQ_INT(run_diff(a, d, "--json", out, sizeof(out)), 1);
	json_error_t err;
	json_t *j = json_loads(out, 0, &err);
	CHECK_MSG(j, "not JSON (%s): %s", err.text, out);
	CHECK_EQ_INT(json_integer_value(json_object_get(j, "regressed")), 3);
	json_t *rows = json_object_get(j, "rows");
	int seen = 0;
	for (size_t i = 0; i < json_array_size(rows); i++) {
		json_t *r = json_array_get(rows, i);
		if (strcmp(json_string_value(json_object_get(r, "metric")), "img_s"))
			continue;
		seen = 1;
		CHECK_NEAR(json_real_value(json_object_get(r, "change_pct")), -10, 1e-9);
		CHECK(!strcmp(json_string_value(json_object_get(r, "verdict")), "regressed"));
		CHECK(!strcmp(json_string_value(json_object_get(r, "better")), "higher"));
	}
	CHECK(seen);
	json_decref(j);

	/* --html: one page, the table and a chart inline, no script */
	char html[600], cmd_extra[700];
	snprintf(html, sizeof(html), "%s/diff.html", t);
	snprintf(cmd_extra, sizeof(cmd_extra), "--html %s", html);
	CHECK_EQ_INT(run_diff(a, d, cmd_extra, out, sizeof(out)), 1);
	FILE *f = fopen(html, "r");
	CHECK(f);
	if (f) {
		static char page[65536];
		size_t n = fread(page, 1, sizeof(page) - 1, f);
		page[n] = 0;
		fclose(f);
		CHECK(strstr(page, "<!DOCTYPE html>"));
		CHECK(strstr(page, "<svg"));
		CHECK(strstr(page, "<td>img_s</td>"));
		CHECK(!strstr(page, "<script"));
	}
}

TEST(diff_cli_bad_input)
{
	char a[512], m[512], out[4096];
	const char *t = test_tmpdir();
	snprintf(a, sizeof(a), "%s/a.json", t);
	snprintf(m, sizeof(m), "%s/amp.json", t);
	write_train(a, 1000, 5, 32.0, 0.2, 1e9);
	FILE *f = fopen(m, "w");
	if (f) {
		fputs("{\"schema\": \"gpuperf.result/1\", \"command\": \"amp\", \"measurements\": "
		      "{\"cells\": []}}\n", f);
		fclose(f);
	}
	CHECK_EQ_INT(run_diff(a, m, "", out, sizeof(out)), 2);
	CHECK_MSG(strstr(out, "one command") && test_count_lines(out) == 1, "%s", out);
	CHECK_EQ_INT(run_diff(a, "/nonexistent/run", "", out, sizeof(out)), 2);
	CHECK_MSG(strstr(out, "/nonexistent/run") && test_count_lines(out) == 1, "%s", out);
	CHECK_EQ_INT(run_diff(a, "", "", out, sizeof(out)), 2);
	CHECK_EQ_INT(run_diff(a, a, "--threshold -1", out, sizeof(out)), 2);
	/* an unreadable result: the reader's own message, not a lost one */
	char txt[600];
	snprintf(txt, sizeof(txt), "%s/text.json", t);
	f = fopen(txt, "w");
	if (f) {
		fputs("hello\n", f);
		fclose(f);
	}
	CHECK_EQ_INT(run_diff(txt, a, "", out, sizeof(out)), 2);
	CHECK_MSG(strstr(out, "text.json' line 1") && test_count_lines(out) == 1, "%s", out);
	/* a run folder with no result in it */
	CHECK_EQ_INT(run_diff(a, t, "", out, sizeof(out)), 2);
	test_check_bad("diff onlyone", "which two runs");
}

TEST(diff_run_folder_finds_its_result)
{
	char dir[512], path[600], out[8192];
	snprintf(dir, sizeof(dir), "%s/train_20260101_120000", test_tmpdir());
	mkdir(dir, 0777);
	snprintf(path, sizeof(path), "%s/train.json", dir);
	write_train(path, 1000, 5, 32.0, 0.2, 1e9);
	CHECK_EQ_INT(run_diff(dir, path, "", out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "3 within noise"), "%s", out);
}

/* The spread of a --repeat object: n runs, the mean equal to the headline figure. */
static void check_repeat(json_t *m, const char *key, int n)
{
	json_t *s = json_object_get(json_object_get(m, "repeat"), key);
	struct stat_summary st;
	CHECK_MSG(s && stats_read(s, &st) == 0, "no spread of %s", key);
	if (!s)
		return;
	CHECK_EQ_INT(st.n, n);
	CHECK_NEAR(st.mean, json_number_value(json_object_get(m, key)), 1e-6 * st.mean);
	CHECK(st.min <= st.mean && st.mean <= st.max && st.min > 0);
	CHECK(st.std >= 0 && st.std <= st.max - st.min);
}

TEST(diff_repeat_train_amp_compare_record_spread)
{
	char cmd[2048], path[600], out[8192];
	const char *t = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s train --device cpu --model simple_cnn --batch 4 --steps 4 "
		 "--repeat 3 --out %s/t", test_bin(), t);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/t/train.json", t);
	json_t *res = json_load_file(path, 0, NULL);
	json_t *m = json_object_get(res, "measurements");
	CHECK(m);
	check_repeat(m, "img_s", 3);
	check_repeat(m, "ms_per_step", 3);
	CHECK_EQ_INT(json_array_size(json_object_get(json_object_get(json_object_get(m, "repeat"),
								      "img_s"), "values")), 3);
	json_decref(res);

	snprintf(cmd, sizeof(cmd), "%s amp --device cpu --model simple_cnn --batches 4 "
		 "--precisions fp32 --steps 4 --repeat 2 --out %s/a", test_bin(), t);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/a/amp.json", t);
	res = json_load_file(path, 0, NULL);
	json_t *cell = json_array_get(json_object_get(json_object_get(res, "measurements"), "cells"), 0);
	CHECK(cell);
	check_repeat(cell, "img_s", 2);
	json_decref(res);
	snprintf(cmd, sizeof(cmd), "%s compare --device cpu --models simple_cnn --batch 4 --steps 4 "
		 "--repeat 2 --out %s/c", test_bin(), t);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/c/compare.json", t);
	res = json_load_file(path, 0, NULL);
	json_t *row = json_array_get(json_object_get(json_object_get(res, "measurements"), "models"), 0);
	CHECK(row);
	check_repeat(row, "img_s", 2);
	check_repeat(row, "ms_per_step", 2);
	json_decref(res);
	test_check_bad("train --repeat 0", "--repeat");
	test_check_bad("train --repeat 2 --epochs 2 --profile-epochs 0", "--repeat");
}

/* Elements of one array whose identity fields agree (the largest tensors alive at the
 * memory peak, several of one category) are metrics of their own, told apart by their
 * order: a run compared with itself then changes nothing. */
TEST(diff_elements_with_the_same_identity_stay_apart)
{
	json_t *m = json_pack("{s:[{s:s, s:i}, {s:s, s:i}, {s:s, s:i}]}", "largest",
			      "category", "activations", "bytes", 100,
			      "category", "activations", "bytes", 400,
			      "category", "weights", "bytes", 50);
	struct diff_run run;
	memset(&run, 0, sizeof(run));
	CHECK_EQ_INT(diff_run_collect(&run, m, ""), 0);
	CHECK_EQ_INT(run.n, 3);
	int found = 0;
	for (int i = 0; i < run.n; i++) {
		if (!strcmp(run.m[i].name, "largest[category=activations].bytes"))
			found += run.m[i].value == 100;
		if (!strcmp(run.m[i].name, "largest[category=activations#1].bytes"))
			found += run.m[i].value == 400;
	}
	CHECK_EQ_INT(found, 2);
	diff_run_free(&run);
	json_decref(m);
}
