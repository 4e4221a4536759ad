/* Training with validation: the top-k counter, the eval-mode forward, every image of
 * the validation set scored once, the data layouts (train/ and val/, --val-data,
 * CIFAR-10's test batch), the per-epoch history in train.json, and the TensorBoard
 * scalars as tensorboard's own reader sees them. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/models.h"
#include "train/evaluate.h"
#include "train/trainer.h"
#include "test.h"

/* Hand-made logits: a clear winner, ties (the lower index ranks first, as argmax
 * takes the first maximum), NaN (above every number, as torch.topk puts it). */
TEST(train_val_topk_by_hand)
{
	const float a[6] = { 0.1f, 3.0f, 2.0f, 2.0f, -1.0f, 0.5f };
	CHECK_EQ_INT(eval_topk_hit(a, 6, 1, 1), 1);
	CHECK_EQ_INT(eval_topk_hit(a, 6, 2, 1), 0);
	CHECK_EQ_INT(eval_topk_hit(a, 6, 2, 2), 1);  /* tie at 2.0: index 2 before 3 */
	CHECK_EQ_INT(eval_topk_hit(a, 6, 3, 2), 0);
	CHECK_EQ_INT(eval_topk_hit(a, 6, 3, 3), 1);
	CHECK_EQ_INT(eval_topk_hit(a, 6, 0, 4), 0);  /* 5th: 3.0, 2.0, 2.0, 0.5 ahead */
	CHECK_EQ_INT(eval_topk_hit(a, 6, 0, 5), 1);
	CHECK_EQ_INT(eval_topk_hit(a, 6, 4, 5), 0);  /* last of six */
	const float t[4] = { 1.0f, 1.0f, 1.0f, 1.0f }; /* all equal: rank is the index */
	for (int l = 0; l < 4; l++) {
		CHECK_EQ_INT(eval_topk_hit(t, 4, l, 1), l == 0);
		CHECK_EQ_INT(eval_topk_hit(t, 4, l, 2), l < 2);
	}
	const float n[4] = { 0.0f, NAN, 5.0f, 1.0f };
	CHECK_EQ_INT(eval_topk_hit(n, 4, 2, 1), 0); /* the NaN ranks first */
	CHECK_EQ_INT(eval_topk_hit(n, 4, 2, 2), 1);
	CHECK_EQ_INT(eval_topk_hit(n, 4, 1, 5), 0); /* a NaN at the label never hits */
}

/* Cross-entropy and the counts over a batch, against numbers worked out by hand. */
TEST(train_val_counts_by_hand)
{
	const float logits[3 * 3] = { 0, 0, 0, /* loss ln 3, top-1 hit only for label 0 */
				      1, 2, 3, /* label 2: loss ln(e + e^2 + e^3) - 3 */
				      5, 0, 0 };
	const int32_t labels[3] = { 1, 2, 0 };
	struct eval_counts c = { 0 };
	eval_counts_add(&c, logits, labels, 3, 3);
	CHECK_EQ_INT(c.images, 3);
	CHECK_EQ_INT(c.top1, 2); /* row 0's label 1 loses the tie to 0 */
	CHECK_EQ_INT(c.top5, 3);
	double want = log(3.0) + (log(exp(1) + exp(2) + exp(3)) - 3) + (log(exp(5) + 2) - 5);
	CHECK_NEAR(c.loss_sum, want, 1e-6);
}

static struct net *build_set_up(const char *name, int size, int batch, int classes)
{
	struct model_opts o = model_defaults(name);
	o.size = size;
	o.batch = batch;
	o.classes = classes;
	o.seed = 7;
	struct net *net = NULL;
	int rc = model_build(name, &o, &net);
	CHECK_MSG(rc == 0, "model_build(%s): %s", name, gp_errmsg());
	if (rc == 0 && (rc = net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32)) != 0) {
		CHECK_MSG(0, "net_setup: %s", gp_errmsg());
		net_free(net);
		return NULL;
	}
	return net;
}

/* The eval forward treats each image on its own (running statistics, no dropout):
 * after training steps have moved the statistics, image 0's logits are the same in
 * two different batches and in two passes, where a training forward's batch
 * statistics make them differ, and it leaves the running statistics alone. */
TEST(train_val_eval_forward_uses_running_stats)
{
	const int size = 32, batch = 4, classes = 10;
	struct net *net = build_set_up("resnet18", size, batch, classes);
	float *x = NULL, *l1 = NULL, *l2 = NULL, *run = NULL;
	int32_t *y = NULL;
	if (!net)
		return;
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, 3, &x, &y) == 0);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	CHECK(net_set_batch_data(net, x, y) == 0);
	for (int s = 0; s < 2; s++)
		CHECK(net_train_step(net, &sgd, NULL, NULL) == 0);
	size_t nl = (size_t)batch * classes, img = (size_t)3 * size * size;
	l1 = malloc(nl * sizeof(float));
	l2 = malloc(nl * sizeof(float));
	run = malloc(net->running_count * sizeof(float));
	CHECK(net_sync_to_host(net) == 0);
	memcpy(run, net->host_running, net->running_count * sizeof(float));
	CHECK(net_forward(net, 0) == 0 && net_logits_to_host(net, l1) == 0);
	/* image 0 with three others replaced */
	for (size_t i = img; i < img * batch; i++)
		x[i] = 3.0f * x[i] + 1.0f;
	CHECK(net_set_batch_data(net, x, y) == 0);
	CHECK(net_forward(net, 0) == 0 && net_logits_to_host(net, l2) == 0);
	CHECK_LE(rel_err_norm_f32(l1, l2, classes), 1e-6);
	CHECK(rel_err_norm_f32(l1 + classes, l2 + classes, classes) > 1e-2);
	CHECK(net_sync_to_host(net) == 0);
	CHECK(memcmp(run, net->host_running, net->running_count * sizeof(float)) == 0);
	/* in training mode the other images change image 0's logits */
	CHECK(net_forward(net, 1) == 0 && net_logits_to_host(net, l2) == 0);
	CHECK(rel_err_norm_f32(l1, l2, classes) > 1e-3);
	free(x);
	free(y);
	free(l1);
	free(l2);
	free(run);
	net_free(net);
}

/* Scored in batches of 4 (the last of the 10 padded) or one at a time, the same
 * 10 images give the same counts and loss: each is scored once, the padding never. */
TEST(train_val_every_image_once_any_batch)
{
	const char *dir = test_tmpdir();
	char cmd[1024], out[4096], spec[600];
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s/d' --classes 3 --images 10 --size 40x36 --threads 1",
		 test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	snprintf(spec, sizeof(spec), "%s/d", dir);
	struct eval_result r[2];
	const int batches[2] = { 4, 1 };
	for (int k = 0; k < 2; k++) {
		struct net *net = build_set_up("simple_cnn", 32, batches[k], 3);
		struct dataset *ds = NULL;
		memset(&r[k], 0, sizeof(r[k]));
		CHECK(dataset_open(spec, 0, 32, &ds) == 0);
		struct eval_opts eo = { .workers = k, .seed = 1 };
		if (net && ds)
			CHECK_MSG(evaluate_net(net, ds, &eo, &r[k]) == 0, "%s", gp_errmsg());
		dataset_close(ds);
		net_free(net);
	}
	CHECK_EQ_INT(r[0].counts.images, 10);
	CHECK_EQ_INT(r[1].counts.images, 10);
	CHECK_EQ_INT(r[0].counts.top1, r[1].counts.top1);
	CHECK_EQ_INT(r[0].counts.top5, r[1].counts.top5);
	CHECK_NEAR(r[0].loss, r[1].loss, 1e-5);
	CHECK(r[0].loss > 0.5 && r[0].loss < 5); /* an untrained net on 3 classes: about ln 3 */
	CHECK_NEAR(r[0].top1, 100.0 * r[0].counts.top1 / 10, 1e-9);
	CHECK_NEAR(r[0].top5, 100.0, 1e-9); /* 3 classes: always in the top 5 */
}

/* The trainer on a dataset make --val-fraction folder: a validation at each epoch's
 * end that sees every file of val/ once (9 of them: not a multiple of the batch). */
TEST(train_val_trainer_history)
{
	const char *dir = test_tmpdir();
	char cmd[1024], out[4096], spec[600];
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s/d' --classes 3 --images 30 --size 40x36 "
		 "--threads 1 --val-fraction 0.25", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK_MSG(strstr(out, "split: 21 images in") && strstr(out, "9 in"), "%s", out); /* 2.5 rounds up */
	snprintf(spec, sizeof(spec), "%s/d", dir);
	struct train_opts o = train_opts_default();
	o.data = spec;
	o.batch = 4;
	o.size = 32;
	o.epochs = 3;
	o.eval_every = 2;
	o.sgd.lr = 0.01;
	struct train_result res;
	int rc = train_run(&o, &res, NULL);
	CHECK_MSG(rc == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(res.n_history, 3);
	CHECK_EQ_INT(res.val_images, 9);
	for (int i = 0; rc == 0 && i < res.n_history; i++) {
		const struct train_epoch_summary *e = &res.history[i];
		CHECK_EQ_INT(e->epoch, i + 1);
		CHECK_EQ_INT(e->step, 5L * (i + 1)); /* 21 images, batches of 4, the last dropped */
		CHECK_EQ_INT(e->has_val, i != 0);    /* every 2nd epoch and the last */
		CHECK_EQ_INT(e->val_images, i ? 9 : 0);
		CHECK(isfinite(e->train_loss) && e->train_top1 >= 0 && e->train_top1 <= 100);
		CHECK(e->img_s > 0 && e->time_s > 0);
		if (i)
			CHECK(e->time_s > e[-1].time_s);
		if (e->has_val)
			CHECK(isfinite(e->val_loss) && e->val_loss > 0 && e->val_img_s > 0 &&
			      e->val_top5 >= e->val_top1);
	}
	train_result_free(&res);
	/* eval_every 0 (compare, maxbatch): no validation, no history for a run in steps */
	o.epochs = 0;
	o.steps = 3;
	o.eval_every = 0;
	CHECK(train_run(&o, &res, NULL) == 0);
	CHECK_EQ_INT(res.n_history, 0);
	CHECK(res.history == NULL);
	train_result_free(&res);
}

static void cifar_file(const char *dir, const char *name, int n)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	CHECK_MSG(f != NULL, "cannot write %s", path);
	if (!f)
		return;
	for (int r = 0; r < n; r++) {
		fputc(r % 10, f);
		for (int p = 0; p < 3072; p++)
			fputc((r * 7 + p * 13) & 255, f);
	}
	fclose(f);
}

/* CIFAR-10 validates on its test batch: 6 records beside 5 x 4 training ones; without
 * one it trains only. */
TEST(train_val_cifar10_test_batch)
{
	const char *dir = test_tmpdir();
	char name[32], spec[600];
	for (int b = 1; b <= 5; b++) {
		snprintf(name, sizeof(name), "data_batch_%d.bin", b);
		cifar_file(dir, name, 4);
	}
	cifar_file(dir, "test_batch.bin", 6);
	snprintf(spec, sizeof(spec), "cifar10:%s", dir);
	struct train_opts o = train_opts_default();
	o.data = spec;
	o.batch = 4;
	o.size = 32;
	o.epochs = 1;
	o.eval_every = 1;
	struct train_result res;
	CHECK_MSG(train_run(&o, &res, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(res.n_history, 1);
	CHECK_EQ_INT(res.val_images, 6);
	if (res.n_history == 1) {
		CHECK_EQ_INT(res.history[0].has_val, 1);
		CHECK_EQ_INT(res.history[0].val_images, 6);
		CHECK_EQ_INT(res.history[0].step, 5);
	}
	train_result_free(&res);
	/* without test_batch.bin: training only, as a plain ImageFolder */
	char path[700];
	snprintf(path, sizeof(path), "%s/test_batch.bin", dir);
	CHECK_EQ_INT(remove(path), 0);
	CHECK_MSG(train_run(&o, &res, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(res.val_images, 0);
	CHECK(res.n_history == 1 && !res.history[0].has_val);
	train_result_free(&res);
}

/* The command: per-epoch lines, "history" with exactly the shared keys, the best and
 * final top-1, --val-data elsewhere; bad paths are one line before training. */
TEST(train_val_cli_history_json)
{
	const char *dir = test_tmpdir();
	char cmd[1500], out[16384], path[700];
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s/d' --classes 2 --images 24 --size 40x36 "
		 "--threads 1 --val-fraction 0.25 && %s train --device cpu --data '%s/d' --epochs 2 --batch 4 "
		 "--size 32 --out '%s/r'", test_bin(), dir, test_bin(), dir, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	CHECK_MSG(strstr(out, "epoch   1/2  train loss") && strstr(out, "epoch   2/2  train loss"), "%s", out);
	CHECK_MSG(strstr(out, "val loss") && strstr(out, "top-5"), "%s", out);
	snprintf(path, sizeof(path), "%s/r/train.json", dir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err), *m = json_object_get(j, "measurements");
	json_t *h = json_object_get(m, "history");
	CHECK_MSG(j && json_array_size(h) == 2, "%s: %s", path, err.text);
	static const char *const keys[] = { "epoch", "step", "time_s", "lr", "train_loss", "train_top1",
					    "val_loss", "val_top1", "val_top5", "val_img_s", "img_s",
					    "data_wait_pct" };
	for (size_t i = 0; i < json_array_size(h); i++) {
		json_t *e = json_array_get(h, i);
		CHECK_EQ_INT(json_object_size(e), 12);
		for (int k = 0; k < 12; k++)
			CHECK_MSG(json_object_get(e, keys[k]) != NULL, "history[%zu] lacks %s", i, keys[k]);
		CHECK_EQ_INT(json_integer_value(json_object_get(e, "epoch")), (long)i + 1);
		CHECK(json_is_real(json_object_get(e, "val_top1")));
	}
	double t1 = json_real_value(json_object_get(json_array_get(h, 0), "val_top1"));
	double t2 = json_real_value(json_object_get(json_array_get(h, 1), "val_top1"));
	CHECK_NEAR(json_real_value(json_object_get(m, "final_val_top1")), t2, 1e-9);
	CHECK_NEAR(json_real_value(json_object_get(m, "best_val_top1")), t1 > t2 ? t1 : t2, 1e-9);
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "val_images")), 6);
	json_decref(j);
	/* --val-data elsewhere: d/val read as a folder of its own, every 2nd epoch */
	snprintf(cmd, sizeof(cmd), "%s train --device cpu --data '%s/d/train' --val-data '%s/d/val' --epochs 3 "
		 "--eval-every 2 --batch 4 --size 32 --out '%s/r2'", test_bin(), dir, dir, dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	snprintf(path, sizeof(path), "%s/r2/train.json", dir);
	j = json_load_file(path, 0, &err);
	h = json_object_get(json_object_get(j, "measurements"), "history");
	CHECK_EQ_INT(json_array_size(h), 3);
	CHECK(json_is_null(json_object_get(json_array_get(h, 0), "val_top1")));
	CHECK(json_is_real(json_object_get(json_array_get(h, 1), "val_top1")));
	CHECK(json_is_real(json_object_get(json_array_get(h, 2), "val_top1")));
	json_decref(j);
	/* a plain ImageFolder: training only, as before */
	snprintf(cmd, sizeof(cmd), "%s train --device cpu --data '%s/d/train' --epochs 1 --batch 4 --size 32 "
		 "--out '%s/r3'", test_bin(), dir, dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && !strstr(out, "val loss") && strstr(out, "epoch   1/1"), "%s", out);
	snprintf(cmd, sizeof(cmd), "train --device cpu --data '%s/d' --val-data '%s/nowhere' --epochs 1 --batch 4 "
		 "--size 32 --out '%s/r4'", dir, dir, dir);
	test_check_bad(cmd, "--val-data: dataset folder");
	snprintf(cmd, sizeof(cmd), "train --device cpu --data '%s/d' --val-data '%s/d/val' --eval-every 0 "
		 "--out '%s/r5'", dir, dir, dir);
	test_check_bad(cmd, "--eval-every 0");
	snprintf(cmd, sizeof(cmd), "dataset make --out '%s/e' --classes 4 --images 6 --val-fraction 0.5", dir);
	test_check_bad(cmd, "no training image");
}

/* The scalars through tensorboard's own reader, and the CSV logs beside them. */
TEST(train_val_tensorboard_scalars)
{
	char out[65536];
	if (test_run("python3 -c 'import tensorboard' ", out, sizeof(out)) != 0)
		SKIP("python package tensorboard not installed");
	const char *dir = test_tmpdir();
	char cmd[1500], path[700];
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s/d' --classes 2 --images 24 --size 40x36 "
		 "--threads 1 --val-fraction 0.25 && %s train --device cpu --data '%s/d' --epochs 2 --batch 4 "
		 "--size 32 --log-every 2 --out '%s/r' --tensorboard '%s/tb' && python3 tools/check_tb.py '%s/tb'",
		 test_bin(), dir, test_bin(), dir, dir, dir, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	static const char *const tags[] = { "train/loss 2 ", "train/top1 2 ", "train/lr 2 0.01", "train/img_s 2 ",
					    "train/data_wait_pct 2 ", "gpu/memory_mib 2 ", "epoch/train_loss 1 ",
					    "epoch/train_top1 2 ", "epoch/val_loss 2 ", "epoch/val_top1 1 ",
					    "epoch/val_top5 2 100", "epoch/lr 2 0.01", "epoch/img_s 1 " };
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
		CHECK_MSG(strstr(out, tags[i]) != NULL, "no '%s' in: %s", tags[i], out);
	/* the step count: 4 batches an epoch, lines at 1, 2, 4, 6, 8 */
	CHECK_MSG(strstr(out, "train/loss 8 ") && !strstr(out, "train/loss 3 "), "%s", out);
	snprintf(path, sizeof(path), "%s/r/train_epochs.csv", dir);
	FILE *f = fopen(path, "r");
	CHECK_MSG(f != NULL, "no %s", path);
	if (f) {
		char line[512];
		int n = 0;
		while (fgets(line, sizeof(line), f))
			n++;
		fclose(f);
		CHECK_EQ_INT(n, 3); /* header and two epochs */
	}
	snprintf(path, sizeof(path), "%s/r/train_log.csv", dir);
	f = fopen(path, "r");
	CHECK_MSG(f != NULL, "no %s", path);
	if (f) {
		char line[512];
		CHECK(fgets(line, sizeof(line), f) && !strcmp(line, "step,loss,top1,lr,img_s,data_wait_pct,memory_mib\n"));
		fclose(f);
	}
	/* without --tensorboard: inside the run folder */
	snprintf(cmd, sizeof(cmd), "%s train --device cpu --steps 2 --batch 2 --size 16 --classes 3 --out '%s/r2' && "
		 "python3 tools/check_tb.py '%s/r2/tensorboard'", test_bin(), dir, dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && strstr(out, "train/loss 2 "), "%s", out);
}
