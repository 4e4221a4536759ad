/* train --data and gpuperf workers on the CPU with a tiny ImageFolder: the data path
 * trains and reports its wait, the loader keeps training deterministic for any
 * worker count, and the workers result holds sane numbers for every run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "report/result.h"
#include "test.h"
#include "cmd/workers_rule.h"

/* 24 small JPEGs in 3 classes under dir/ds; returns 0 on success. */
static int make_dataset(char *ds, size_t cap)
{
	char cmd[2048], out[4096];
	snprintf(ds, cap, "%s/ds", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 3 --images 24 --size 40x36 "
		 "--threads 1", test_bin(), ds);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "dataset make exited %d: %s", rc, out);
	return rc;
}

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	CHECK_MSG(json_is_number(v), "\"%s\" is missing or not a number", key);
	return json_number_value(v);
}

/* The JSON summary that train --json prints after its log lines. */
static json_t *train_json(const char *out)
{
	const char *p = strstr(out, "\n{");
	json_error_t err;
	json_t *j = p ? json_loads(p + 1, JSON_DISABLE_EOF_CHECK, &err) : NULL;
	CHECK_MSG(j != NULL, "no JSON summary in: %s", out);
	return j;
}

TEST(train_on_imagefolder_reports_data_wait)
{
	char ds[600], cmd[2048], out[16384];
	if (make_dataset(ds, sizeof(ds)))
		return;
	snprintf(cmd, sizeof(cmd), "%s train --data %s --workers 2 --steps 3 --model simple_cnn "
		 "--size 32 --batch 4 --device cpu --json", test_bin(), ds);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train exited %d: %s", rc, out);
	CHECK(strstr(out, "data: ") != NULL);
	CHECK(strstr(out, "ms per step waiting for batches") != NULL);
	CHECK(strstr(out, "0 corrupt images skipped") != NULL);
	json_t *j = train_json(out);
	if (!j)
		return;
	CHECK_EQ_INT(num(j, "steps"), 3);
	CHECK_EQ_INT(num(j, "classes"), 3); /* the dataset's, not the synthetic 1000 */
	CHECK_EQ_INT(num(j, "workers"), 2);
	CHECK_EQ_INT(num(j, "batches_per_epoch"), 6); /* 24 images / 4 */
	CHECK(num(j, "img_s") > 0);
	double wait = num(j, "data_wait_ms"), copy = num(j, "copy_ms"), pct = num(j, "data_wait_pct");
	CHECK(copy >= 0);
	CHECK(wait >= copy); /* the wait includes the copy */
	CHECK(pct >= 0 && pct <= 100);
	/* the share is the mean wait over the mean step */
	CHECK_NEAR(pct, 100 * wait * 3 / (1e3 * num(j, "total_s")), 1e-6);
	CHECK_EQ_INT(num(j, "skipped_corrupt"), 0);
	json_decref(j);

	/* --epochs counts passes over the data: 2 x 6 batches */
	snprintf(cmd, sizeof(cmd), "%s train --data %s --epochs 2 --model simple_cnn --size 32 "
		 "--batch 4 --device cpu --json", test_bin(), ds);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train --epochs exited %d: %s", rc, out);
	if ((j = train_json(out))) {
		CHECK_EQ_INT(num(j, "steps"), 12);
		json_decref(j);
	}
}

/* The losses printed at every step, as text (exact comparison). */
static int losses(const char *out, char v[][16], int cap)
{
	int n = 0;
	for (const char *p = strstr(out, "loss "); p && n < cap; p = strstr(p + 1, "loss ")) {
		if (sscanf(p, "loss %15s", v[n]) == 1 && strncmp(v[n], "%", 1))
			n++;
	}
	return n;
}

TEST(train_data_losses_do_not_depend_on_workers)
{
	char ds[600], cmd[2048], out[3][16384], v[3][8][16];
	int n[3];
	if (make_dataset(ds, sizeof(ds)))
		return;
	static const int workers[3] = { 0, 2, 3 };
	for (int k = 0; k < 3; k++) {
		snprintf(cmd, sizeof(cmd), "%s train --data %s --workers %d --steps 5 --log-every 1 "
			 "--seed 7 --model simple_cnn --size 32 --batch 4 --device cpu", test_bin(), ds,
			 workers[k]);
		int rc = test_run(cmd, out[k], sizeof(out[k]));
		CHECK_MSG(rc == 0, "train --workers %d exited %d: %s", workers[k], rc, out[k]);
		n[k] = losses(out[k], v[k], 8);
	}
	/* 5 step lines, then "loss A -> B" in the summary */
	CHECK_EQ_INT(n[0], 6);
	for (int k = 1; k < 3; k++) {
		CHECK_EQ_INT(n[k], n[0]);
		for (int i = 0; i < n[0] && i < n[k]; i++)
			CHECK_MSG(!strcmp(v[0][i], v[k][i]), "step %d: loss %s with 0 workers, %s with %d",
				  i + 1, v[0][i], v[k][i], workers[k]);
	}
	/* each step sees a new batch, so the losses are not one value repeated */
	int differ = 0;
	for (int i = 1; i < 5 && i < n[0]; i++)
		differ |= strcmp(v[0][i], v[0][0]) != 0;
	CHECK(differ);
}

TEST(workers_cpu_result_and_csv)
{
	char ds[600], dir[600], cmd[2048], out[16384], path[700];
	if (make_dataset(ds, sizeof(ds)))
		return;
	snprintf(dir, sizeof(dir), "%s/out", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s workers --device cpu --workers 0,2 --steps 3 --data %s "
		 "--model simple_cnn --size 32 --batch 4 --out %s --csv", test_bin(), ds, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "workers exited %d: %s", rc, out);
	CHECK(strstr(out, "reading: with 0 workers the training loop waited for data") != NULL);
	CHECK(strstr(out, "recommended: ") != NULL);
	CHECK(strstr(out, "note: GPU utilization n/a (the CPU backend)") != NULL);
	snprintf(path, sizeof(path), "%s/gpu_utilization_comparison.png", dir);
	CHECK(access(path, F_OK) != 0); /* no samples, no chart */

	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/workers.json", dir);
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	CHECK(!strcmp(json_string_value(json_object_get(res, "command")), "workers"));
	CHECK(json_is_null(json_object_get(res, "gpu")));
	json_t *set = json_object_get(res, "settings");
	CHECK_EQ_INT(num(set, "steps"), 3);
	CHECK_EQ_INT(num(set, "classes"), 3);
	CHECK_EQ_INT(json_array_size(json_object_get(set, "workers")), 2);
	json_t *m = json_object_get(res, "measurements");
	json_t *runs = json_object_get(m, "runs");
	CHECK_EQ_INT(json_array_size(runs), 2);
	double img_s[2] = { 0, 0 };
	for (size_t i = 0; i < json_array_size(runs) && i < 2; i++) {
		json_t *r = json_array_get(runs, i);
		CHECK_EQ_INT(num(r, "workers"), i * 2);
		img_s[i] = num(r, "img_s");
		CHECK(img_s[i] > 0);
		CHECK(num(r, "data_wait_ms") >= 0);
		CHECK(num(r, "total_s") > 0);
		CHECK_EQ_INT(num(r, "steps"), 3);
		json_t *samples = json_object_get(r, "samples");
		CHECK(json_is_array(samples) && json_array_size(samples) == 0);
		CHECK(json_is_null(json_object_get(r, "mean_util")));
		CHECK(json_is_null(json_object_get(r, "std_util")));
		CHECK(json_is_null(json_object_get(r, "idle_share")));
		CHECK(json_is_null(json_object_get(r, "util_source")));
	}
	/* the fewest workers within 5% of the best img/s */
	double best = img_s[0] > img_s[1] ? img_s[0] : img_s[1];
	CHECK_EQ_INT(num(m, "recommended_workers"), img_s[0] >= 0.95 * best ? 0 : 2);
	json_decref(res);

	char csv[4096];
	snprintf(path, sizeof(path), "%s/workers.csv", dir);
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL);
	if (!f)
		return;
	size_t n = fread(csv, 1, sizeof(csv) - 1, f);
	csv[n] = 0;
	fclose(f);
	CHECK(!strncmp(csv, "workers,GPU util %,std %,idle %,samples,total s,img/s,data wait ms,", 66));
	CHECK_EQ_INT(test_count_lines(csv), 3);
	CHECK(strstr(csv, "\r\n0,n/a,n/a,n/a,n/a,") != NULL);
	CHECK(strstr(csv, "\r\n2,n/a,n/a,n/a,n/a,") != NULL);
}

TEST(workers_and_train_data_bad_input_one_clear_line)
{
	char ds[600], args[1024];
	if (make_dataset(ds, sizeof(ds)))
		return;
	test_check_bad("workers --device cpu --workers 0 --steps 1 --data /nonexistent/gp-ds",
		  "dataset folder '/nonexistent/gp-ds' does not exist");
	test_check_bad("workers --device cpu --workers 0", "--data DIR");
	snprintf(args, sizeof(args), "workers --device cpu --workers -1 --data %s", ds);
	test_check_bad(args, "--workers must be between 0 and 256 (got -1)");
	snprintf(args, sizeof(args), "workers --device cpu --workers , --data %s", ds);
	test_check_bad(args, "--workers: give at least one worker count");
	snprintf(args, sizeof(args), "workers --device cpu --workers 2,0,2 --data %s", ds);
	test_check_bad(args, "--workers lists 2 twice");
	snprintf(args, sizeof(args), "workers --device cpu --interval 0 --data %s", ds);
	test_check_bad(args, "--interval must be");
	test_check_bad("train --device cpu --model simple_cnn --data /nonexistent/gp-ds",
		  "dataset folder '/nonexistent/gp-ds' does not exist");
	snprintf(args, sizeof(args), "train --device cpu --model simple_cnn --data %s --workers -1", ds);
	test_check_bad(args, "--workers must be between 0 and 256 (got -1)");
	test_check_bad("train --device cpu --model simple_cnn --workers 2", "need --data DIR");
	snprintf(args, sizeof(args), "train --device cpu --model simple_cnn --data %s --classes 2", ds);
	test_check_bad(args, "--classes 2 is fewer than the 3 classes");
}

/* advise: a baseline, at least the larger-batch candidate, each trial's verdict
 * consistent with its measured speed-up, and a result naming the best. */
TEST(advise_measures_each_candidate)
{
	char cmd[2048], out[16384], dir[512], res[700];
	const char *tmp = test_tmpdir();
	snprintf(dir, sizeof(dir), "%s/ds", tmp);
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 3 --images 48 --size 64x48", test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(cmd, sizeof(cmd), "%s advise --model simple_cnn --device cpu --data %s --batch 8 --steps 6 "
		 "--size 32 --out %s/adv", test_bin(), dir, tmp);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK(strstr(out, "advice:") != NULL);
	snprintf(res, sizeof(res), "%s/adv/advise.json", tmp);
	json_error_t e;
	json_t *j = json_load_file(res, 0, &e);
	CHECK_MSG(j != NULL, "%s: %s", res, e.text);
	if (!j)
		return;
	json_t *trials = json_object_get(json_object_get(j, "measurements"), "trials");
	CHECK(json_array_size(trials) >= 2);
	CHECK(!strcmp(json_string_value(json_object_get(json_array_get(trials, 0), "change")), "baseline"));
	size_t i;
	json_t *t;
	int saw_batch = 0;
	json_array_foreach(trials, i, t) {
		double speedup = json_real_value(json_object_get(t, "speedup"));
		int kept = json_is_true(json_object_get(t, "kept"));
		CHECK(json_real_value(json_object_get(t, "img_s")) > 0);
		if (kept)
			CHECK_MSG(speedup >= 1.05, "trial %zu kept at %.3fx", i, speedup);
		saw_batch |= json_integer_value(json_object_get(t, "batch")) == 16;
	}
	CHECK(saw_batch);
	json_decref(j);
}

/* The recommendation on hand-made rows (cmd/workers_rule.h): throughput first, then
 * GPU utilization within 2 points of the fastest run, then CPU cost. */
TEST(workers_recommend_weighs_util_and_cpu)
{
	int best;
	/* nothing but throughput measured: the fewest workers within 5% of the best */
	struct workers_row a[] = { { 0, 100, 0, 0, -1 }, { 2, 180, 0, 0, -1 },
				   { 4, 198, 0, 0, -1 }, { 8, 200, 0, 0, -1 } };
	CHECK_EQ_INT(workers_recommend(a, 4, &best), 2);
	CHECK_EQ_INT(best, 3);
	/* 4 workers are within 5% in img/s but leave the GPU 10 points less busy */
	struct workers_row b[] = { { 4, 198, 1, 80, 5 }, { 8, 200, 1, 90, 9 } };
	CHECK_EQ_INT(workers_recommend(b, 2, &best), 1);
	/* within 2 points and far cheaper: the fewer workers */
	struct workers_row c[] = { { 4, 196, 1, 88.5, 6 }, { 8, 200, 1, 90, 11 } };
	CHECK_EQ_INT(workers_recommend(c, 2, &best), 0);
	/* fewer workers but much more CPU (decoding in the training thread and spinning):
	 * the cheaper run wins; within 25% of it, the fewer workers again */
	struct workers_row d[] = { { 0, 199, 1, 90, 8 }, { 4, 200, 1, 90, 4 } };
	CHECK_EQ_INT(workers_recommend(d, 2, &best), 1);
	d[0].cpu_cores = 4.9;
	CHECK_EQ_INT(workers_recommend(d, 2, &best), 0);
	/* utilization measured for one run only: not compared */
	struct workers_row e[] = { { 2, 197, 0, 0, 3 }, { 8, 200, 1, 95, 3.5 } };
	CHECK_EQ_INT(workers_recommend(e, 2, &best), 0);
}
