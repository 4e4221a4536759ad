/* Time to accuracy (docs/training.md): the glyph classes of `dataset make
 * --difficulty` stay apart at any angle, the images come from the seed alone, the
 * summary reads a crossing off the history as documented, the chart of val top-1
 * against time is drawn, and the PyTorch side's schedule is gpuperf's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "data/glyphs.h"
#include "report/plots.h"
#include "test.h"

#define GRID 32

/* Class c's glyph (inside, and which colour) sampled on a GRID x GRID raster of
 * [-1, 1] squared, turned by angle. */
static void glyph_raster(int c, double angle, unsigned char *out)
{
	double ca = cos(angle), sa = sin(angle);
	for (int y = 0; y < GRID; y++)
		for (int x = 0; x < GRID; x++) {
			double px = (x + 0.5) * 2.0 / GRID - 1, py = (y + 0.5) * 2.0 / GRID - 1;
			double u = px * ca + py * sa, v = -px * sa + py * ca;
			int second = 0, in = glyph_covers(c, u, v, &second);
			out[y * GRID + x] = (unsigned char)(in ? 1 + second : 0);
		}
}

/* No class's glyph, turned by any multiple of 15 degrees, looks like another
 * class's: at least 3% of the raster differs. A square and a diamond (one shape at
 * 45 degrees) would fail this; that is why the shapes are the ones they are. */
TEST(tta_glyph_classes_differ_at_any_angle)
{
	static unsigned char base[GLYPH_CLASSES_MAX][GRID * GRID];
	unsigned char turned[GRID * GRID];
	for (int c = 0; c < GLYPH_CLASSES_MAX; c++)
		glyph_raster(c, 0, base[c]);
	int worst = GRID * GRID, wa = -1, wb = -1;
	for (int a = 0; a < GLYPH_CLASSES_MAX; a++)
		for (int k = 0; k < 24; k++) {
			glyph_raster(a, k * M_PI / 12, turned);
			for (int b = 0; b < GLYPH_CLASSES_MAX; b++) {
				if (b == a)
					continue;
				int diff = 0;
				for (int i = 0; i < GRID * GRID; i++)
					diff += turned[i] != base[b][i];
				if (diff < worst) {
					worst = diff;
					wa = a;
					wb = b;
				}
			}
		}
	CHECK_MSG(worst * 100 >= 3 * GRID * GRID,
		  "class %d turned looks like class %d: %d of %d cells differ", wa, wb, worst,
		  GRID * GRID);
}

static int file_bytes(const char *path, char **buf, long *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	fseek(f, 0, SEEK_END);
	*len = ftell(f);
	rewind(f);
	*buf = malloc(*len ? *len : 1);
	int ok = *buf && fread(*buf, 1, *len, f) == (size_t)*len;
	fclose(f);
	return ok;
}

/* 1 when the two files hold the same bytes. */
static int same_file(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	long nx = 0, ny = 0;
	int same = file_bytes(a, &x, &nx) && file_bytes(b, &y, &ny) && nx == ny &&
		   !memcmp(x, y, nx);
	free(x);
	free(y);
	return same;
}

/* One seed, one set of pictures, whatever the thread count; another seed, others;
 * and each level draws something else than the class textures. */
TEST(tta_dataset_difficulty_is_the_seeds)
{
	char cmd[1024], out[4096], a[512], b[512];
	const char *t = test_tmpdir();
	const char *runs[][2] = { { "a", "--difficulty 3 --seed 7 --threads 1" },
				  { "b", "--difficulty 3 --seed 7 --threads 3" },
				  { "c", "--difficulty 3 --seed 8" },
				  { "d", "--difficulty 0 --seed 7" } };
	for (int i = 0; i < 4; i++) {
		snprintf(cmd, sizeof(cmd), "%s dataset make --out %s/%s --classes 3 --images 6 "
			 "--size 48x40 %s", test_bin(), t, runs[i][0], runs[i][1]);
		int rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc == 0, "%s: rc %d: %s", cmd, rc, out);
	}
	int same_ab = 1, same_ac = 0, same_ad = 0;
	for (int i = 0; i < 6; i++) {
		snprintf(a, sizeof(a), "%s/a/class_%03d/img_%07d.jpg", t, i % 3, i);
		snprintf(b, sizeof(b), "%s/b/class_%03d/img_%07d.jpg", t, i % 3, i);
		same_ab &= same_file(a, b);
		snprintf(b, sizeof(b), "%s/c/class_%03d/img_%07d.jpg", t, i % 3, i);
		same_ac += same_file(a, b);
		snprintf(b, sizeof(b), "%s/d/class_%03d/img_%07d.jpg", t, i % 3, i);
		same_ad += same_file(a, b);
	}
	CHECK_MSG(same_ab, "one seed gave other images with another thread count");
	CHECK_EQ_INT(same_ac, 0);
	CHECK_EQ_INT(same_ad, 0);
}

TEST(tta_dataset_difficulty_bad_input)
{
	char args[512];
	snprintf(args, sizeof(args), "dataset make --out %s/x --difficulty 4", test_tmpdir());
	test_check_bad(args, "--difficulty");
	snprintf(args, sizeof(args), "dataset make --out %s/x --difficulty 2 --classes 121",
		 test_tmpdir());
	test_check_bad(args, "at most 120 classes");
}

static int have_python(void)
{
	char out[256];
	return test_run("python3 --version", out, sizeof(out)) == 0;
}

static double json_num(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The hand-made pair (tests/data/tta): PyTorch ends at 82% after 80 s; gpuperf is at
 * 80% at 30 s and 85% at 40 s, so it reaches 82% at 30 + 10 * 2/5 = 34 s: 0.425 of
 * PyTorch's time, 0.5 at the validation that shows it; +3 points at the end (the
 * point bar not met). A third gpuperf run that never gets there counts as the
 * slowest: the median of {34, 34, never} stays 34. */
TEST(tta_summary_reads_the_crossing)
{
	if (!have_python())
		SKIP("python3 not found");
	char cmd[2048], out[8192], path[512];
	const char *t = test_tmpdir();
	snprintf(path, sizeof(path), "%s/summary.json", t);
	snprintf(cmd, sizeof(cmd), "python3 tools/tta_summary.py --gpuperf tests/data/tta/gpuperf.json "
		 "--pytorch tests/data/tta/pytorch.json --json %s", path);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
	json_t *s = json_load_file(path, 0, NULL);
	CHECK_MSG(s != NULL, "no summary at %s", path);
	if (!s)
		return;
	CHECK_NEAR(json_num(s, "target_val_top1", NULL), 82, 1e-12);
	CHECK_NEAR(json_num(s, "gpuperf", "median_time_to_target_s"), 34, 1e-9);
	CHECK_NEAR(json_num(s, "time_ratio", NULL), 0.425, 1e-12);
	CHECK_NEAR(json_num(s, "time_ratio_at_val", NULL), 0.5, 1e-12);
	CHECK_NEAR(json_num(s, "final_diff_points", NULL), 3, 1e-12);
	json_t *bars = json_object_get(s, "bars");
	CHECK(json_is_false(json_object_get(bars, "final_ok")));
	CHECK(json_is_true(json_object_get(bars, "time_ok")));
	json_decref(s);
	CHECK(strstr(out, "+3.00 points") != NULL);

	/* a run that never reaches 82% (PyTorch's file read as gpuperf's: 75% at 60 s) */
	snprintf(cmd, sizeof(cmd), "python3 tools/tta_summary.py --gpuperf tests/data/tta/gpuperf.json "
		 "tests/data/tta/gpuperf.json tests/data/tta/pytorch.json "
		 "--pytorch tests/data/tta/pytorch.json --json %s", path);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
	s = json_load_file(path, 0, NULL);
	CHECK(s != NULL);
	if (s) {
		CHECK_NEAR(json_num(s, "gpuperf", "median_time_to_target_s"), 34, 1e-9);
		/* the median final: {85, 85, 82} */
		CHECK_NEAR(json_num(s, "gpuperf", "median_final_val_top1"), 85, 1e-12);
		json_decref(s);
	}
	/* bad input: one line, non-zero */
	rc = test_run("python3 tools/tta_summary.py --gpuperf tests/data/tta/missing.json "
		      "--pytorch tests/data/tta/pytorch.json", out, sizeof(out));
	CHECK(rc != 0);
	CHECK_EQ_INT(test_count_lines(out), 1);
}

TEST(tta_plot_history_chart)
{
	char cmd[1024], out[4096], png[512];
	const char *t = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s plot tests/data/tta/gpuperf.json tests/data/tta/pytorch.json "
		 "--out %s/chart", test_bin(), t);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
	snprintf(png, sizeof(png), "%s/chart/%s", t, PLOTS_HISTORY_CHART);
	struct test_pixel_counts pc;
	test_check_png(png, 800, 500, &pc);
	/* a train result without a validated epoch: one line, before drawing */
	json_t *doc = json_load_file("tests/data/tta/pytorch.json", 0, NULL);
	CHECK(doc != NULL);
	if (!doc)
		return;
	json_t *h;
	size_t i;
	json_array_foreach(json_object_get(doc, "history"), i, h)
		json_object_set_new(h, "val_top1", json_null());
	char bad[512];
	snprintf(bad, sizeof(bad), "%s/noval.json", t);
	CHECK(json_dump_file(doc, bad, 0) == 0);
	json_decref(doc);
	snprintf(cmd, sizeof(cmd), "plot tests/data/tta/gpuperf.json %s --out %s/chart2", bad, t);
	test_check_bad(cmd, "no validated epoch");
	/* several results of another command are refused */
	test_check_bad("plot tests/data/sample_amp.json tests/data/tta/gpuperf.json", "train result");
}

/* The PyTorch side's schedule is gpuperf's (torch's numbers, kept in the repo). */
TEST(tta_torch_schedule_is_gpuperfs)
{
	if (!have_python())
		SKIP("python3 not found");
	char out[4096];
	int rc = test_run("python3 tests/torch/test_tta.py", out, sizeof(out));
	CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
	CHECK(strstr(out, "matches 3 cosine cases") != NULL);
}

/* The mean accuracy (0..1) of the last epoch's logged steps in a train.json made
 * with --log-every 1; NAN when it cannot be read. */
static double last_epoch_accuracy(const char *path)
{
	json_t *doc = json_load_file(path, 0, NULL);
	json_t *m = json_object_get(doc, "measurements"), *log = json_object_get(m, "log"), *r;
	double bpe = json_num(m, "batches_per_epoch", NULL), sum = 0;
	size_t i, n = json_array_size(log), k = 0;
	json_array_foreach(log, i, r) {
		if (i + bpe >= n) {
			sum += json_num(r, "accuracy", NULL);
			k++;
		}
	}
	json_decref(doc);
	return k ? sum / k : NAN;
}

/* Why --difficulty exists: on one small budget (simple_cnn, 32x32, two epochs of
 * 1,500 images) the class textures are learnt well past chance, while level 2's
 * glyphs are not (measured: 60% against 10% on 2 cores). docs/training.md has the
 * longer runs that show level 2 learnable. */
TEST(tta_dataset_difficulty_is_hard)
{
	char cmd[1024], out[8192], path[512];
	const char *t = test_tmpdir();
	double acc[2];
	const int levels[2] = { 0, 2 };
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof(cmd), "(%s dataset make --out %s/d%d --classes 10 --images 1500 "
			 "--size 36x36 --difficulty %d --seed 1 && %s train --model simple_cnn "
			 "--device cpu --data %s/d%d --size 32 --epochs 2 --batch 32 --lr 0.01 "
			 "--workers 1 --seed 1 --log-every 1 --out %s/r%d)", test_bin(), t, levels[i],
			 levels[i], test_bin(), t, levels[i], t, levels[i]);
		int rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
		snprintf(path, sizeof(path), "%s/r%d/train.json", t, levels[i]);
		acc[i] = last_epoch_accuracy(path);
	}
	CHECK_MSG(acc[0] >= 0.4, "textures: %.3f after two epochs, expected at least 0.4", acc[0]);
	CHECK_MSG(acc[1] < 0.2, "level 2: %.3f after two epochs, expected under 0.2", acc[1]);
}

/* PyTorch's side end to end on the CPU, where torch and torchvision are installed
 * (the GPU machine; skipped elsewhere): two tiny epochs write the history schema
 * gpuperf's train.json uses, and gpuperf plot charts it. */
TEST(tta_torch_script_runs_on_cpu)
{
	char cmd[2048], out[16384], path[512];
	const char *t = test_tmpdir();
	if (!have_python() || test_run("python3 -c 'import torch, torchvision'", out, sizeof(out)) != 0)
		SKIP("python3 with torch and torchvision not found");
	snprintf(cmd, sizeof(cmd), "(%s dataset make --out %s/d/train --classes 3 --images 24 "
		 "--size 40x40 --difficulty 1 --seed 1 && %s dataset make --out %s/d/val "
		 "--classes 3 --images 9 --size 40x40 --difficulty 1 --seed 2 && python3 "
		 "tests/torch/tta.py --data %s/d --out %s/pt --device cpu --precision fp32 "
		 "--epochs 2 --warmup-epochs 1 --batch 8 --size 32 --lr 0.05 --workers 0 --seed 3)",
		 test_bin(), t, test_bin(), t, t, t);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
	snprintf(path, sizeof(path), "%s/pt/train.json", t);
	json_t *doc = json_load_file(path, 0, NULL);
	CHECK_MSG(doc != NULL, "no %s", path);
	if (!doc)
		return;
	json_t *hist = json_object_get(doc, "history"), *h;
	CHECK_EQ_INT(json_array_size(hist), 2);
	const char *keys[] = { "epoch", "step", "time_s", "lr", "train_loss", "train_top1",
			       "val_loss", "val_top1", "val_top5", "val_img_s", "img_s",
			       "data_wait_pct" };
	size_t i;
	json_array_foreach(hist, i, h) {
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			CHECK_MSG(json_is_number(json_object_get(h, keys[k])), "epoch %zu: no %s",
				  i + 1, keys[k]);
		CHECK_EQ_INT(json_integer_value(json_object_get(h, "step")), 3 * (i + 1));
		double a = json_num(h, "val_top1", NULL);
		CHECK(a >= 0 && a <= 100);
	}
	/* warmup epoch 0 at 0.01 x lr, then cosine's first value, the full lr */
	CHECK_NEAR(json_num(json_array_get(hist, 0), "lr", NULL), 0.0005, 1e-12);
	CHECK_NEAR(json_num(json_array_get(hist, 1), "lr", NULL), 0.05, 1e-12);
	CHECK_NEAR(json_num(doc, "final_val_top1", NULL),
		   json_num(json_array_get(hist, 1), "val_top1", NULL), 1e-12);
	CHECK(!strcmp(json_string_value(json_object_get(doc, "engine")), "pytorch"));
	json_decref(doc);
	snprintf(cmd, sizeof(cmd), "%s plot %s --out %s/chart", test_bin(), path, t);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
}

/* The legend tells runs apart by the settings that differ between them (issue 21's
 * --decode gpu against --decode cpu, else two families in one colour); their seeds
 * share a family. */
TEST(tta_plot_history_labels_name_the_differing_settings)
{
	json_t *r[3];
	const char *names[3] = { "a.json", "b.json", "c.json" };
	const char *decode[3] = { "gpu", "gpu", "cpu" };
	for (int i = 0; i < 3; i++)
		r[i] = json_pack("{s:s, s:{s:s, s:s, s:i, s:s}}", "engine", "gpuperf", "settings", "model",
				 "resnet18", "decode", decode[i], "seed", i + 1, "precision", "bf16");
	char label[96], family[96], family0[96];
	plots_history_label(r, names, 3, 0, label, sizeof(label), family0, sizeof(family0));
	CHECK_MSG(!strcmp(label, "gpuperf, decode gpu, seed 1"), "%s", label);
	plots_history_label(r, names, 3, 1, label, sizeof(label), family, sizeof(family));
	CHECK_MSG(!strcmp(family, family0), "%s", family);
	plots_history_label(r, names, 3, 2, label, sizeof(label), family, sizeof(family));
	CHECK_MSG(!strcmp(label, "gpuperf, decode cpu, seed 3"), "%s", label);
	/* alike but for the seed: engine and seed alone, as before */
	plots_history_label(r, names, 2, 1, label, sizeof(label), family, sizeof(family));
	CHECK_MSG(!strcmp(label, "gpuperf, seed 2"), "%s", label);
	for (int i = 0; i < 3; i++)
		json_decref(r[i]);
	/* an older PyTorch result: the optimizer as {"name": "sgd", ...} is gpuperf's
	 * "sgd", so only the engine tells the two apart */
	json_t *t[2];
	t[0] = json_pack("{s:s, s:{s:s, s:s, s:i}}", "engine", "gpuperf", "settings", "model",
			 "resnet18", "optimizer", "sgd", "seed", 1);
	t[1] = json_pack("{s:s, s:{s:s, s:{s:s, s:f}, s:i}}", "engine", "pytorch", "settings",
			 "model", "resnet18", "optimizer", "name", "sgd", "lr", 0.2, "seed", 1);
	plots_history_label(t, names, 2, 1, label, sizeof(label), family, sizeof(family));
	CHECK_MSG(!strcmp(label, "pytorch, seed 1"), "%s", label);
	json_decref(t[0]);
	json_decref(t[1]);
}
