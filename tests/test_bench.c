/* bench: a quick CPU bench gives one run folder with every stage's result, its
 * report in HTML and Markdown (summary, sections, inline SVG, each figure naming
 * an existing JSON), that plot redraws and diff reads; a failing stage is reported
 * and the rest go on; headless Chromium renders the page without console errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "test.h"
#include "report/bench_report.h"
#include "report/result.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc(n + 1);
	if (buf && fread(buf, 1, n, f) == (size_t)n)
		buf[n] = 0;
	else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static int count(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Every "from FILE" in the page names a file in dir (FILE up to '<' or ' '). */
static void check_sources(const char *html, const char *dir)
{
	int n = 0;
	for (const char *p = html; (p = strstr(p, "class=\"source\">from ")); n++) {
		char rel[256], path[800];
		p += strlen("class=\"source\">from ");
		size_t len = strcspn(p, "< ");
		snprintf(rel, sizeof(rel), "%.*s", (int)len, p);
		snprintf(path, sizeof(path), "%s/%s", dir, rel);
		CHECK_MSG(access(path, R_OK) == 0, "the page cites %s, which is not there", rel);
	}
	CHECK_MSG(n >= 6, "only %d figures name their JSON", n);
}

static const char *bench_dir(void)
{
	static char dir[512];
	static int made;
	if (made)
		return made > 0 ? dir : NULL;
	char cmd[1024], out[8192];
	snprintf(dir, sizeof(dir), "%s/b", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s bench --quick --device cpu --out %s", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "bench exited %d: %s", rc, out);
	made = rc == 0 ? 1 : -1;
	return made > 0 ? dir : NULL;
}

TEST(bench_cpu_quick_run_folder_and_report)
{
	const char *dir = bench_dir();
	char path[800];
	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/bench.json", dir);
	json_t *b = json_load_file(path, 0, NULL);
	CHECK(b);
	json_t *m = json_object_get(b, "measurements"), *stages = json_object_get(m, "stages"), *st;
	size_t i;
	const char *want[] = { "info_simple_cnn", "compare", "amp", "maxbatch", "profile" };
	CHECK_EQ_INT(json_array_size(stages), 5);
	json_array_foreach(stages, i, st) {
		const char *name = json_string_value(json_object_get(st, "stage"));
		CHECK_MSG(i < 5 && name && !strcmp(name, want[i]), "stage %zu is %s", i, name);
		CHECK_MSG(!strcmp(json_string_value(json_object_get(st, "status")), "ok"), "%s: %s", name,
			  json_string_value(json_object_get(st, "note")));
		snprintf(path, sizeof(path), "%s/%s", dir, json_string_value(json_object_get(st, "result")));
		CHECK_MSG(access(path, R_OK) == 0, "%s is missing", path);
		CHECK(json_number_value(json_object_get(st, "seconds")) > 0);
	}
	json_t *env = json_object_get(m, "environment");
	CHECK(json_integer_value(json_object_get(json_object_get(env, "cpu"), "cores")) >= 1);
	CHECK(json_number_value(json_object_get(env, "memory_mib")) > 0);
	CHECK(json_string_value(json_object_get(env, "commit")));
	json_decref(b);

	snprintf(path, sizeof(path), "%s/report.html", dir);
	char *html = slurp(path);
	CHECK(html);
	if (html) {
		CHECK(strstr(html, "<!DOCTYPE html>"));
		CHECK(strstr(html, "id=\"summary\""));
		CHECK(strstr(html, "Findings"));
		CHECK(strstr(html, "<h2 id=\"compare\">") && strstr(html, "<h2 id=\"amp\">") &&
		      strstr(html, "<h2 id=\"maxbatch\">") && strstr(html, "<h2 id=\"profile\">"));
		CHECK_MSG(count(html, "<svg") >= 5, "%d charts", count(html, "<svg"));
		/* self-contained: no script, nothing fetched */
		CHECK(!strstr(html, "<script"));
		CHECK(!strstr(html, "src=\"http") && !strstr(html, "href=\"http") &&
		      !strstr(html, "<link"));
		check_sources(html, dir);
	}
	free(html);
	snprintf(path, sizeof(path), "%s/report.md", dir);
	char *md = slurp(path);
	CHECK(md && strstr(md, "## Summary") && strstr(md, "### Findings") &&
	      strstr(md, "_from compare/compare.json_") && strstr(md, "| simple_cnn |"));
	free(md);
}

/* A bench run on a host with several GPUs has a scale stage: the report gives its
 * table, chart and the efficiency at the largest count in the summary (the stage's
 * result is hand-made here; on a GPU host `scale` writes it). */
/* A bench folder with a scale stage of two counts (1 and 8 GPUs); with torch, the
 * runs carry PyTorch DDP's figures as scale --torch writes them. The report.md
 * written, or NULL. */
static char *bench_scale_report(const char *name, int torch)
{
	const char *src = bench_dir();
	char dir[600], cmd[2400], out[4096], path[800];
	if (!src)
		return NULL;
	snprintf(dir, sizeof(dir), "%s/%s", test_tmpdir(), name);
	snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s && mkdir -p %s/scale", dir, src, dir, dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/scale/scale.json", dir);
	json_t *runs = json_pack("[{s:i, s:f, s:f, s:f, s:f, s:f}, {s:i, s:f, s:f, s:f, s:f, s:f}]",
				 "gpus", 1, "img_s", 5700.0, "img_s_per_gpu", 5700.0, "efficiency", 1.0,
				 "ms_per_step", 44.9, "exposed_comm_ms", 0.0,
				 "gpus", 8, "img_s", 38000.0, "img_s_per_gpu", 4750.0, "efficiency",
				 0.8333, "ms_per_step", 53.9, "exposed_comm_ms", 6.2);
	if (torch) {
		json_object_set_new(json_array_get(runs, 0), "torch",
				    json_pack("{s:s, s:f, s:f}", "status", "ok", "img_s", 4500.0, "ratio",
					      5700.0 / 4500.0));
		json_object_set_new(json_array_get(runs, 1), "torch",
				    json_pack("{s:s, s:f, s:f}", "status", "ok", "img_s", 30400.0, "ratio",
					      38000.0 / 30400.0));
	}
	json_t *res = json_pack("{s:s, s:s, s:{s:s}, s:{s:o}}", "schema", RESULT_SCHEMA, "command",
				"scale", "settings", "model", "resnet50", "measurements", "runs", runs);
	CHECK_EQ_INT(json_dump_file(res, path, 0), 0);
	json_decref(res);
	snprintf(path, sizeof(path), "%s/bench.json", dir);
	json_t *b = json_load_file(path, 0, NULL);
	CHECK(b);
	if (!b)
		return NULL;
	json_array_append_new(json_object_get(json_object_get(b, "measurements"), "stages"),
			      json_pack("{s:s, s:s, s:s, s:f}", "stage", "scale", "status", "ok",
					"result", "scale/scale.json", "seconds", 60.0));
	CHECK_EQ_INT(json_dump_file(b, path, 0), 0);
	json_decref(b);
	CHECK_EQ_INT(bench_report_write(dir), 0);
	snprintf(path, sizeof(path), "%s/report.md", dir);
	char *md = slurp(path);
	CHECK(md);
	return md;
}

TEST(bench_report_has_the_scale_stage)
{
	char *md = bench_scale_report("bscale", 0);
	if (!md)
		return;
	CHECK(strstr(md, "## Data parallel over the GPUs (scale)"));
	CHECK_MSG(strstr(md, "| 8 | 38000.0 | 4750.0 | 83.3% | 53.90 | 6.20 |\n"), "%s", md);
	CHECK(strstr(md, "resnet50 on 8 GPUs: 38000.0 img/s, 83.3% scaling efficiency (scale)"));
	CHECK(strstr(md, "data parallel loses 17% to communication"));
	CHECK(!strstr(md, "PyTorch DDP"));
	free(md);
}

/* bench --torch passes --torch to scale: PyTorch DDP's img/s and the ratio beside
 * each count, and the ratio at the largest count in the headline. */
TEST(bench_report_scale_stage_with_torch)
{
	char *md = bench_scale_report("bscale_torch", 1);
	if (!md)
		return;
	CHECK_MSG(strstr(md, "| GPUs | img/s | img/s per GPU | scaling efficiency | ms/step | "
			 "exposed communication (ms) | PyTorch DDP img/s | gpuperf / PyTorch DDP |"),
		  "%s", md);
	CHECK_MSG(strstr(md, "| 1 | 5700.0 | 5700.0 | 100.0% | 44.90 | 0.00 | 4500.0 | 1.27x |"), "%s", md);
	CHECK_MSG(strstr(md, "| 8 | 38000.0 | 4750.0 | 83.3% | 53.90 | 6.20 | 30400.0 | 1.25x |"), "%s", md);
	CHECK_MSG(strstr(md, "resnet50 on 8 GPUs: 38000.0 img/s, 83.3% scaling efficiency, 1.25x "
			 "PyTorch DDP's 30400.0 img/s (scale)"), "%s", md);
	free(md);
}

TEST(bench_plot_redraws_and_diff_reads_it)
{
	const char *dir = bench_dir();
	/* diff lists every metric: the profile's analysis alone has hundreds */
	static char out[1 << 20];
	char path[800], cmd[2048];
	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/amp/amp_speedup.png", dir);
	unlink(path);
	snprintf(cmd, sizeof(cmd), "%s/report.html", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s plot %s", test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(access(path, R_OK) == 0, "plot did not redraw %s: %s", path, out);
	snprintf(path, sizeof(path), "%s/report.html", dir);
	CHECK_MSG(access(path, R_OK) == 0, "plot did not rewrite the report: %s", out);
	/* a run compared with itself: every shared metric, nothing changed */
	snprintf(cmd, sizeof(cmd), "%s diff %s %s", test_bin(), dir, dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "amp/cells[") && strstr(out, "maxbatch/largest_batch") &&
		  strstr(out, " 0 regressed") && strstr(out, "0 improved"), "%.2000s", out);
}

TEST(bench_failing_stage_is_reported_and_the_rest_go_on)
{
	char cmd[1024], out[8192], path[800];
	const char *t = test_tmpdir();
	/* fp16 needs a GPU: amp fails on the CPU, the others run */
	snprintf(cmd, sizeof(cmd), "%s bench --quick --device cpu --precisions fp16 --out %s/f",
		 test_bin(), t);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "1 failed"), "%s", out);
	snprintf(path, sizeof(path), "%s/f/bench.json", t);
	json_t *b = json_load_file(path, 0, NULL), *st;
	size_t i;
	int failed = 0, ok = 0;
	json_array_foreach(json_object_get(json_object_get(b, "measurements"), "stages"), i, st) {
		const char *status = json_string_value(json_object_get(st, "status"));
		if (!strcmp(json_string_value(json_object_get(st, "stage")), "amp")) {
			failed = !strcmp(status, "failed");
			CHECK(strstr(json_string_value(json_object_get(st, "note")), "GPU"));
		} else {
			ok += !strcmp(status, "ok");
		}
	}
	json_decref(b);
	CHECK(failed);
	CHECK_EQ_INT(ok, 4);
	snprintf(path, sizeof(path), "%s/f/report.md", t);
	char *md = slurp(path);
	CHECK(md && strstr(md, "Stage amp failed"));
	free(md);
}

TEST(bench_bad_input_and_plan)
{
	char cmd[1024], out[8192];
	test_check_bad("bench --models nope", "nope");
	test_check_bad("bench --data /nonexistent/images", "/nonexistent/images");
	test_check_bad("bench --quick --frobnicate", "frobnicate");
	snprintf(cmd, sizeof(cmd), "%s bench --device cpu --plan --data %s", test_bin(), test_tmpdir());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "workers") && strstr(out, "train ") && strstr(out, "amp --model=simple_cnn"),
		  "%s", out);
}

/* Chromium's console messages reach stderr as "...:CONSOLE..." lines. */
TEST(bench_report_renders_in_headless_chromium)
{
	char browser[64] = "", cmd[2048], out[65536], path[800];
	const char *names[] = { "chromium", "chromium-browser", "google-chrome" };
	for (int i = 0; i < 3 && !*browser; i++) {
		snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", names[i]);
		if (system(cmd) == 0)
			snprintf(browser, sizeof(browser), "%s", names[i]);
	}
	if (!*browser)
		SKIP("no chromium here (tools/install-deps.sh installs it)");
	const char *dir = bench_dir();
	if (!dir)
		return;
	char abs[600];
	if (!realpath(dir, abs))
		return;
	snprintf(path, sizeof(path), "%s/dom.html", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "timeout 120 %s --headless --no-sandbox --disable-gpu "
		 "--user-data-dir=%s/chromium --enable-logging=stderr --v=0 --dump-dom "
		 "file://%s/report.html 2>&1 >%s | grep ':CONSOLE' ; true", browser, test_tmpdir(),
		 abs, path);
	test_run(cmd, out, sizeof(out));
	CHECK_MSG(!*out, "console messages: %s", out);
	char *dom = slurp(path);
	CHECK_MSG(dom && strlen(dom) > 1000, "no DOM came back");
	if (dom) {
		CHECK(strstr(dom, "id=\"summary\""));
		CHECK_MSG(count(dom, "<h2") >= 7, "%d sections", count(dom, "<h2"));
		CHECK(count(dom, "<svg") >= 5);
		CHECK(count(dom, "<table>") >= 5);
		CHECK(strstr(dom, "<ol>\n<li>") || strstr(dom, "<ol><li>"));
	}
	free(dom);
}
