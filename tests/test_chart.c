/* Charts: files come out in the asked format and size, are not blank, and the
 * charts drawn from the sample results show what they must (the red OOM mark). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cairo.h>
#include <jansson.h>

#include "core/error.h"
#include "report/chart.h"
#include "report/plots.h"
#include "report/result.h"
#include "test.h"

static long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Width and height from the PNG signature and IHDR chunk; 0 when not a PNG. */
static int png_size(const char *path, unsigned *w, unsigned *h)
{
	static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	unsigned char b[24];
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	size_t got = fread(b, 1, sizeof(b), f);
	fclose(f);
	if (got != sizeof(b) || memcmp(b, sig, 8) || memcmp(b + 12, "IHDR", 4))
		return 0;
	*w = (unsigned)b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19];
	*h = (unsigned)b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23];
	return 1;
}

/* Read the PNG back with cairo and count pixels off the white background, and
 * pixels of CHART_RED (214, 39, 40) give or take antialiasing. */
static int png_pixels(const char *path, struct test_pixel_counts *pc)
{
	cairo_surface_t *s = cairo_image_surface_create_from_png(path);
	memset(pc, 0, sizeof(*pc));
	if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
		cairo_surface_destroy(s);
		return 0;
	}
	cairo_surface_flush(s);
	int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
	int stride = cairo_image_surface_get_stride(s);
	const unsigned char *data = cairo_image_surface_get_data(s);
	for (int y = 0; y < h; y++) {
		const uint32_t *row = (const uint32_t *)(data + (size_t)y * stride);
		for (int x = 0; x < w; x++) {
			unsigned r = row[x] >> 16 & 0xff, g = row[x] >> 8 & 0xff, b = row[x] & 0xff;
			pc->total++;
			pc->not_white += (row[x] & 0xffffff) != 0xffffff;
			pc->red += r > 190 && g < 80 && b < 80;
		}
	}
	cairo_surface_destroy(s);
	return 1;
}

void test_check_png(const char *path, unsigned want_w, unsigned want_h,
		    struct test_pixel_counts *pc)
{
	unsigned w = 0, h = 0;
	CHECK_MSG(png_size(path, &w, &h), "'%s' is not a PNG", path);
	CHECK_EQ_INT(w, want_w);
	CHECK_EQ_INT(h, want_h);
	long size = file_size(path);
	CHECK_MSG(size > 5000 && size < 4000000, "'%s' is %ld bytes", path, size);
	CHECK(png_pixels(path, pc));
	CHECK_MSG(pc->not_white * 100 > pc->total, "only %ld of %ld pixels drawn", pc->not_white,
		  pc->total);
}

TEST(chart_ticks_nice_values)
{
	double t[32], step;
	int n = chart_ticks_nice(0, 100, 5, t, 32, &step);
	CHECK_EQ_INT(n, 6);
	CHECK_NEAR(step, 20, 1e-12);
	CHECK_NEAR(t[5], 100, 1e-12);
	n = chart_ticks_nice(0.13, 0.87, 6, t, 32, &step);
	CHECK_NEAR(step, 0.1, 1e-12);
	CHECK_EQ_INT(n, 7);
	CHECK_NEAR(t[0], 0.2, 1e-12);
	CHECK_NEAR(t[6], 0.8, 1e-12);
	n = chart_ticks_nice(-3, 7, 5, t, 32, &step);
	CHECK_NEAR(step, 2, 1e-12);
	CHECK_EQ_INT(n, 5); /* -2 0 2 4 6 */
	CHECK(t[1] == 0 && !signbit(t[1]));
	n = chart_ticks_nice(0, 81559, 6, t, 32, &step);
	CHECK_NEAR(step, 10000, 1e-9);
	CHECK_EQ_INT(n, 9); /* 0 .. 80000 */
	CHECK_NEAR(t[8], 80000, 1e-9);
}

/* Bounds a result from elsewhere can hold: the step stays finite and positive (callers
 * divide by it) and every tick is a finite number. */
TEST(chart_ticks_nice_degenerate_bounds)
{
	const double bounds[][2] = {
		{ 0, 5e-324 }, { 5e-324, 5e-324 }, { -1e308, 1e308 }, { 1e308, 1e308 },
		{ NAN, 1 },    { 0, INFINITY },    { -INFINITY, 0 },  { 1e300, 1e300 * (1 + 1e-15) },
	};
	for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
		double t[32], step = NAN;
		int n = chart_ticks_nice(bounds[i][0], bounds[i][1], 6, t, 32, &step);
		CHECK_MSG(isfinite(step) && step > 0, "[%g, %g]: step %g", bounds[i][0],
			  bounds[i][1], step);
		CHECK_MSG(n >= 0 && n <= 32, "[%g, %g]: %d ticks", bounds[i][0], bounds[i][1], n);
		for (int k = 0; k < n && k < 32; k++)
			CHECK_MSG(isfinite(t[k]), "[%g, %g]: tick %d is %g", bounds[i][0],
				  bounds[i][1], k, t[k]);
	}
}

/* A 2 x 2 figure with every kind of item: lines with dashes and markers, a
 * reference line, a marked point, stacked bars, a log2 axis. */
static struct chart_figure *figure_sample(void)
{
	struct chart_figure *fig = chart_figure_new(2, 2, 0, 0, "every item");
	double x[64], y[64], y2[64];
	for (int i = 0; i < 64; i++) {
		x[i] = i * 0.25;
		y[i] = 50 + 40 * sin(i * 0.3);
		y2[i] = 30 + 10 * cos(i * 0.2);
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_title(p, "lines");
	chart_panel_set_labels(p, "time (s)", "utilization (%)");
	CHECK_EQ_INT(chart_panel_add_line(p, x, y, 64, (struct chart_line_style){ CHART_BLUE, 0, 0, 0 },
					  "solid"), 0);
	CHECK_EQ_INT(chart_panel_add_line(p, x, y2, 64,
					  (struct chart_line_style){ CHART_GREEN, 1.5, 1, 1 },
					  "dashed with markers"), 0);
	CHECK_EQ_INT(chart_panel_add_hline(p, 10, CHART_ORANGE, 1, "threshold"), 0);

	double b[8], mem[8];
	for (int i = 0; i < 8; i++) {
		b[i] = 1 << (i + 2);
		mem[i] = 500 + 90 * b[i];
	}
	p = chart_figure_panel(fig, 1);
	chart_panel_set_title(p, "log2 axis");
	chart_panel_set_labels(p, "batch size", "memory (MiB)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	CHECK_EQ_INT(chart_panel_add_line(p, b, mem, 8, (struct chart_line_style){ CHART_BLUE, 2, 0, 1 },
					  "peak"), 0);
	CHECK_EQ_INT(chart_panel_add_point(p, 1024, 81559, CHART_RED, "out of memory"), 0);

	const char *bars[] = { "conv", "bn", "relu", "fc" };
	const char *stages[] = { "forward", "backward", "optimizer" };
	double v[12] = { 3, 6, 0.5, 1, 2, 0.2, 0.5, 1, 0, 0.2, 0.4, 0.1 };
	p = chart_figure_panel(fig, 2);
	chart_panel_set_title(p, "stacked bars");
	chart_panel_set_labels(p, "layer type", "time (ms)");
	CHECK_EQ_INT(chart_panel_set_bars(p, 4, bars, 3, stages, NULL, v), 0);
	/* panel 3 stays empty: it still gets axes */
	CHECK(chart_figure_panel(fig, 4) == NULL);
	return fig;
}

TEST(chart_multi_panel_png)
{
	char path[512];
	struct test_pixel_counts pc;
	snprintf(path, sizeof(path), "%s/panels.png", test_tmpdir());
	struct chart_figure *fig = figure_sample();
	CHECK_EQ_INT(chart_figure_save(fig, path), 0);
	chart_figure_free(fig);
	test_check_png(path, 1280, 880, &pc);
	CHECK_MSG(pc.red > 50, "the red marked point is missing (%ld red pixels)", pc.red);
}

TEST(chart_svg_and_pdf)
{
	const char *dir = test_tmpdir();
	char path[512], head[64] = "";
	struct chart_figure *fig = figure_sample();
	snprintf(path, sizeof(path), "%s/panels.svg", dir);
	CHECK_EQ_INT(chart_figure_save(fig, path), 0);
	FILE *f = fopen(path, "rb");
	if (f) {
		CHECK(fread(head, 1, sizeof(head) - 1, f) > 0);
		fclose(f);
	}
	CHECK_MSG(strstr(head, "<svg") || strstr(head, "<?xml"), "not SVG: %.20s", head);
	CHECK(file_size(path) > 5000);
	snprintf(path, sizeof(path), "%s/panels.pdf", dir);
	CHECK_EQ_INT(chart_figure_save(fig, path), 0);
	f = fopen(path, "rb");
	memset(head, 0, sizeof(head));
	if (f) {
		CHECK(fread(head, 1, 5, f) == 5);
		fclose(f);
	}
	CHECK(!strncmp(head, "%PDF-", 5));
	chart_figure_free(fig);
}

TEST(chart_save_errors)
{
	const char *dir = test_tmpdir();
	char path[512];
	struct chart_figure *fig = chart_figure_new(1, 1, 200, 100, NULL);
	snprintf(path, sizeof(path), "%s/chart.gif", dir);
	CHECK_EQ_INT(chart_figure_save(fig, path), GP_EINVAL);
	CHECK(strstr(gp_errmsg(), ".png, .svg or .pdf") != NULL);
	snprintf(path, sizeof(path), "%s/missing/chart.png", dir);
	CHECK_EQ_INT(chart_figure_save(fig, path), GP_EIO);
	CHECK(strstr(gp_errmsg(), path) != NULL);
	CHECK(chart_figure_new(0, 1, 0, 0, NULL) == NULL);
	chart_figure_free(fig);
}

static json_t *sample_result(const char *name)
{
	char path[256];
	json_t *res = NULL;
	snprintf(path, sizeof(path), "tests/data/%s", name);
	if (result_read(path, &res) < 0)
		printf("    %s\n", gp_errmsg());
	return res;
}

TEST(plots_maxbatch_chart)
{
	json_t *res = sample_result("sample_maxbatch.json");
	if (!res)
		SKIP("tests/data/sample_maxbatch.json not readable (run from the repository root)");
	char dir[512], path[600];
	struct test_pixel_counts pc;
	snprintf(dir, sizeof(dir), "%s/charts", test_tmpdir());
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, plots_chart_name("maxbatch"));
	CHECK(!strcmp(plots_chart_name("maxbatch"), "batch_size_memory_usage.png"));
	test_check_png(path, 900, 560, &pc);
	/* The OOM dot alone is about 130 pixels, its label adds more. */
	CHECK_MSG(pc.red > 150, "only %ld red pixels: the out-of-memory mark is missing", pc.red);

	/* Without a failed trial there is no red mark. */
	json_t *trials = json_object_get(json_object_get(res, "measurements"), "trials");
	for (size_t i = json_array_size(trials); i-- > 0;)
		if (!json_is_true(json_object_get(json_array_get(trials, i), "ok")))
			json_array_remove(trials, i);
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	test_check_png(path, 900, 560, &pc);
	CHECK_MSG(pc.red < 20, "%ld red pixels without any out-of-memory trial", pc.red);
	json_decref(res);
}

TEST(plots_workers_chart)
{
	json_t *res = sample_result("sample_workers.json");
	if (!res)
		SKIP("tests/data/sample_workers.json not readable (run from the repository root)");
	char dir[512], path[600];
	struct test_pixel_counts pc;
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	snprintf(path, sizeof(path), "%s/gpu_utilization_comparison.png", dir);
	test_check_png(path, 1280, 880, &pc); /* 4 runs: 2 x 2 panels of 640 x 420 and a title */
	CHECK_MSG(pc.red > 500, "the red mean lines are missing (%ld red pixels)", pc.red);
	json_decref(res);
}

/* The committed amp sample (resnet50 on an H100, all four precisions, fp32 and tf32
 * out of memory at batch 1024) renders, directly and through `gpuperf plot`. */
TEST(plots_amp_chart)
{
	json_t *res = sample_result("sample_amp.json");
	if (!res)
		SKIP("tests/data/sample_amp.json not readable (run from the repository root)");
	char dir[512], path[600], cmd[1400], out[2048];
	struct test_pixel_counts pc;
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	CHECK(!strcmp(plots_chart_name("amp"), "amp_speedup.png"));
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	snprintf(path, sizeof(path), "%s/amp_speedup.png", dir);
	test_check_png(path, 1400, 560, &pc); /* two panels side by side */

	/* Without fp32 there is no speed-up to draw, and the chart still comes out. */
	json_t *cells = json_object_get(json_object_get(res, "measurements"), "cells");
	CHECK_EQ_INT(json_array_size(cells), 20);
	for (size_t i = json_array_size(cells); i-- > 0;)
		if (!strcmp(json_string_value(json_object_get(json_array_get(cells, i), "precision")),
			    "fp32"))
			json_array_remove(cells, i);
	CHECK_EQ_INT(json_array_size(cells), 15);
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	test_check_png(path, 1400, 560, &pc);
	json_decref(res);

	if (access(test_bin(), X_OK) != 0)
		SKIP("needs build/gpuperf");
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s plot tests/data/sample_amp.json --out '%s'", test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/amp_speedup.png", dir);
	CHECK_MSG(strstr(out, path) != NULL, "output: %s", out);
	test_check_png(path, 1400, 560, &pc);
}

/* Results with numbers no measurement gives (found by fuzzing tests/fuzz/fuzz_result.c;
 * the inputs are in tests/fuzz/corpus/result/): each chart still comes out, leaving
 * out what cannot be drawn, where axis arithmetic used to overflow into NaN and
 * infinity and convert them to integers (undefined; test-san stops on it); an amp
 * batch beyond any int is refused in one message (the third column) instead. */
TEST(plots_extreme_values)
{
	static const char *const measurements[][3] = {
		{ "maxbatch", "{\"capacity_mib\": 1e308, \"max_batch\": -1e308, \"trials\": ["
			      "{\"batch\": -1e308, \"ok\": true, \"peak_alloc_mib\": 1e308, "
			      "\"process_mib\": -1e308, \"predicted_mib\": 1e308}, "
			      "{\"batch\": 0, \"ok\": false}, {\"batch\": 1e308, \"ok\": true, "
			      "\"peak_alloc_mib\": 0, \"process_mib\": 0}]}" },
		{ "maxbatch", "{\"capacity_mib\": 0, \"max_batch\": 1, \"trials\": [{\"batch\": 1, "
			      "\"ok\": true, \"peak_alloc_mib\": 5e-324, \"process_mib\": 0}]}" },
		{ "maxbatch", "{\"capacity_mib\": 1, \"max_batch\": 1, \"trials\": [{\"batch\": "
			      "1e308, \"ok\": true, \"peak_alloc_mib\": 1, \"process_mib\": 1}]}" },
		{ "workers", "{\"runs\": [{\"workers\": 1e308, \"mean_util\": -1e308, "
			     "\"idle_share\": 1e308, \"samples\": [[1e308, 1e308], [-1e308, -1e308], "
			     "[0, 5]]}]}" },
		{ "amp", "{\"cells\": [{\"precision\": \"fp16\", \"status\": \"oom\", \"batch\": "
			 "1e300}, {\"precision\": \"fp16\", \"status\": \"ok\", \"batch\": 2, "
			 "\"img_s\": 1, \"speedup\": 1}]}", "\"batch\" must be from 1 to 2147483647" },
		{ "amp", "{\"cells\": [{\"precision\": \"fp16\", \"status\": \"ok\", \"batch\": "
			 "1e308, \"img_s\": 1e308, \"speedup\": 1e308}, {\"precision\": \"fp32\", "
			 "\"status\": \"ok\", \"batch\": 1, \"img_s\": 1, \"speedup\": 1}]}",
		  "\"batch\" must be from 1 to 2147483647" },
	};
	char dir[512], path[700];
	snprintf(dir, sizeof(dir), "%s/extreme", test_tmpdir());
	for (size_t i = 0; i < sizeof(measurements) / sizeof(measurements[0]); i++) {
		json_error_t jerr;
		json_t *m = json_loads(measurements[i][1], 0, &jerr);
		CHECK_MSG(m != NULL, "case %zu: %s", i, jerr.text);
		if (!m)
			continue;
		json_t *res = json_pack("{s:s, s:o}", "command", measurements[i][0], "measurements", m);
		snprintf(path, sizeof(path), "%s/%s", dir, plots_chart_name(measurements[i][0]));
		unlink(path);
		int rc = plots_draw(res, dir);
		if (measurements[i][2]) {
			CHECK_MSG(rc == GP_EFORMAT && strstr(gp_errmsg(), measurements[i][2]),
				  "case %zu (%s): rc %d, %s", i, measurements[i][0], rc, gp_errmsg());
			CHECK_MSG(access(path, R_OK) != 0, "case %zu: drew %s", i, path);
		} else {
			CHECK_MSG(rc == 0, "case %zu (%s): %s", i, measurements[i][0], gp_errmsg());
			CHECK_MSG(access(path, R_OK) == 0, "case %zu: no %s", i, path);
		}
		json_decref(res);
	}
}

TEST(plots_errors)
{
	const char *dir = test_tmpdir();
	json_t *res = json_pack("{s:s, s:{}}", "command", "train", "measurements");
	CHECK_EQ_INT(plots_draw(res, dir), GP_EUNSUPPORTED);
	CHECK(!strcmp(gp_errmsg(), "no charts for results of 'train'"));
	json_decref(res);

	res = json_pack("{s:s, s:{s:f, s:i, s:[{s:i}]}}", "command", "maxbatch", "measurements",
			"capacity_mib", 81559.0, "max_batch", 64, "trials", "batch", 64);
	CHECK_EQ_INT(plots_draw(res, dir), GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "\"ok\"") != NULL, "message: %s", gp_errmsg());
	json_decref(res);

	res = json_pack("{s:s, s:{s:[{s:i, s:f, s:f, s:[[f]]}]}}", "command", "workers",
			"measurements", "runs", "workers", 2, "mean_util", 50.0, "idle_share", 0.1,
			"samples", 1.0);
	CHECK_EQ_INT(plots_draw(res, dir), GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "sample 0") != NULL, "message: %s", gp_errmsg());
	json_decref(res);

	res = json_pack("{s:s, s:{s:[]}}", "command", "amp", "measurements", "cells");
	CHECK_EQ_INT(plots_draw(res, dir), GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "\"cells\" is missing or empty") != NULL, "message: %s",
		  gp_errmsg());
	json_decref(res);
	res = json_pack("{s:s, s:{s:[{s:i, s:s, s:s}]}}", "command", "amp", "measurements", "cells",
			"batch", 64, "precision", "fp16", "status", "ok");
	CHECK_EQ_INT(plots_draw(res, dir), GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "amp cell 0: \"img_s\"") != NULL, "message: %s", gp_errmsg());
	json_decref(res);
	res = json_pack("{s:s, s:{s:[{s:i, s:s, s:s}]}}", "command", "amp", "measurements", "cells",
			"batch", 64, "precision", "fp16", "status", "crashed");
	CHECK_EQ_INT(plots_draw(res, dir), GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "\"status\"") != NULL, "message: %s", gp_errmsg());
	json_decref(res);
}

TEST(cmd_plot_runs)
{
	char cmd[1024], out[2048];
	const char *dir = test_tmpdir();
	if (access(test_bin(), X_OK) != 0 || access("tests/data/sample_workers.json", R_OK) != 0)
		SKIP("needs build/gpuperf and tests/data (run from the repository root)");
	snprintf(cmd, sizeof(cmd), "%s plot tests/data/sample_workers.json --out '%s'", test_bin(),
		 dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "gpu_utilization_comparison.png") != NULL, "output: %s", out);
	snprintf(cmd, sizeof(cmd), "%s/gpu_utilization_comparison.png", dir);
	CHECK(file_size(cmd) > 5000);
	snprintf(cmd, sizeof(cmd), "%s plot", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 2);
	CHECK_MSG(strstr(out, "usage: gpuperf plot") != NULL, "output: %s", out);
	snprintf(cmd, sizeof(cmd), "%s plot /nonexistent.json", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 1);
	CHECK_MSG(strstr(out, "cannot open '/nonexistent.json': No such file") != NULL, "output: %s", out);
}
