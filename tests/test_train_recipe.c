/* gpuperf train's recipe options: bad combinations are one error line, the schedule's
 * rate reaches every step (log and train.json), the plain run is the optimizer step it
 * always was, and accumulation over copies of one batch is that batch's step. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/models.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "test.h"

TEST(train_recipe_bad_options)
{
	static const char *const bad[][2] = {
		{ "--optimizer adam", "--optimizer must be sgd or adamw" },
		{ "--optimizer adamw --momentum 0.5", "AdamW takes --betas" },
		{ "--optimizer adamw --nesterov", "AdamW takes --betas" },
		{ "--optimizer adamw --betas 0.9", "--betas must be B1,B2" },
		{ "--optimizer adamw --betas 0.9,1", "--betas must be B1,B2" },
		{ "--optimizer adamw --betas x,0.9", "--betas must be B1,B2" },
		{ "--eps 1e-6", "add --optimizer adamw" },
		{ "--betas 0.9,0.99", "add --optimizer adamw" },
		{ "--lr-step 3", "--lr-step needs --lr-schedule step" },
		{ "--lr-schedule step", "needs --lr-step N" },
		{ "--lr-schedule onecycle --warmup-epochs 2", "does not combine with --lr-schedule onecycle" },
		{ "--warmup-factor 0.1", "--warmup-factor needs --warmup-epochs" },
		{ "--lr-schedule cosine --lr-gamma 0.5", "--lr-gamma needs --lr-schedule step" },
		{ "--lr-schedule linear", "--lr-schedule must be constant, step, cosine or onecycle" },
		{ "--label-smoothing 1.5", "--label-smoothing must be" },
		{ "--grad-accum 0", "--grad-accum must be" },
		{ "--clip-grad-norm 0", "--clip-grad-norm must be" },
		{ "--eps nan --optimizer adamw", "--eps" },
		{ "--lr-schedule cosine --epochs 2 --warmup-epochs 2", "leaves nothing of --epochs 2" },
		{ "--lr-schedule cosine --steps 4 --warmup-epochs 3", "--warmup-epochs 3 leaves nothing" },
	};
	char args[512];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(args, sizeof(args), "train --device cpu --steps 2 --batch 2 --size 16 --out %s/o%zu %s",
			 test_tmpdir(), i, bad[i][0]);
		test_check_bad(args, bad[i][1]);
	}
}

/* Cosine after a warmup epoch, 4 epochs of 2 steps: every step's rate in the log line
 * and in train.json, the recipe in its settings. */
TEST(train_recipe_rate_per_step_in_log_and_result)
{
	char cmd[1024], out[16384], path[600];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s train --device cpu --steps 8 --epoch-steps 2 --batch 2 --size 16 "
		 "--classes 10 --log-every 1 --lr 0.1 --lr-schedule cosine --warmup-epochs 1 "
		 "--label-smoothing 0.1 --clip-grad-norm 5 --out %s/r", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	/* epoch 0: 0.1 x 0.01; epochs 1-3: cosine over 3 epochs */
	CHECK_MSG(strstr(out, "step     1/8  loss") && strstr(out, "lr 1.000e-03"), "%s", out);
	CHECK(strstr(out, "lr 7.500e-02") != NULL); /* epoch 2: 0.05 (1 + cos(pi / 3)) */
	CHECK(strstr(out, "schedule cosine after 1 warmup epochs") != NULL);
	snprintf(path, sizeof(path), "%s/r/train.json", dir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	CHECK_MSG(j != NULL, "%s: %s", path, err.text);
	if (!j)
		return;
	json_t *set = json_object_get(j, "settings"), *lg = json_object_get(json_object_get(j, "measurements"), "log");
	CHECK(!strcmp(json_string_value(json_object_get(set, "lr_schedule")), "cosine"));
	CHECK(!strcmp(json_string_value(json_object_get(set, "optimizer")), "sgd"));
	CHECK_EQ_INT(json_integer_value(json_object_get(set, "warmup_epochs")), 1);
	CHECK_NEAR(json_number_value(json_object_get(set, "label_smoothing")), 0.1, 0);
	CHECK_NEAR(json_number_value(json_object_get(set, "clip_grad_norm")), 5, 0);
	CHECK_NEAR(json_number_value(json_object_get(set, "momentum")), 0.9, 0);
	CHECK_EQ_INT(json_array_size(lg), 8);
	struct lr_schedule_cfg c = lr_schedule_defaults(LR_COSINE, 0.1);
	c.warmup_epochs = 1;
	c.steps_per_epoch = 2;
	c.total_steps = 8;
	for (size_t i = 0; i < json_array_size(lg); i++) {
		json_t *p = json_array_get(lg, i);
		CHECK_EQ_INT(json_integer_value(json_object_get(p, "step")), i + 1);
		double lr = json_number_value(json_object_get(p, "lr"));
		CHECK_NEAR(lr, lr_schedule_lr(&c, (long)i), 1e-9 * lr);
		CHECK(json_is_number(json_object_get(p, "loss")) && json_is_number(json_object_get(p, "accuracy")));
	}
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(j, "measurements"), "last_lr")),
		   lr_schedule_lr(&c, 7), 1e-12);
	json_decref(j);
}

static struct train_opts small_opts(void)
{
	struct train_opts o = train_opts_default();
	o.batch = 2;
	o.size = 16;
	o.classes = 10;
	o.steps = 3;
	o.log_every = 1;
	return o;
}

/* The plain run (no recipe option) takes the optimizer steps it always took: SGD at
 * lr 0.01, momentum 0.9, as net_train_step by hand on the same batch and net. */
TEST(train_recipe_plain_run_is_unchanged)
{
	struct train_opts o = small_opts();
	struct train_result r;
	CHECK_MSG(train_run(&o, &r, NULL) == 0, "%s", gp_errmsg());
	struct model_opts mo = model_defaults("simple_cnn");
	mo.batch = 2;
	mo.size = 16;
	mo.classes = 10;
	mo.seed = o.seed;
	mo.dropout = o.dropout;
	struct net *net = NULL;
	float *x = NULL;
	int32_t *y = NULL;
	CHECK(model_build("simple_cnn", &mo, &net) == 0);
	CHECK(net && net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	CHECK(train_synthetic_batch(2, 3, 16, 16, 10, o.seed, &x, &y) == 0);
	CHECK(net_set_batch_data(net, x, y) == 0);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	double loss = 0;
	for (int s = 0; s < 3; s++)
		CHECK(net_train_step(net, &sgd, &loss, NULL) == 0);
	CHECK_MSG(loss == r.last_loss, "by hand %.17g, trainer %.17g", loss, r.last_loss);
	CHECK_NEAR(r.last_lr, 0.01, 0);
	free(x);
	free(y);
	net_free(net);
	train_result_free(&r);
}

/* Two micro-batches that are the same fixed batch: their summed gradients halved are
 * that batch's gradients exactly, so the run equals the plain one bit for bit, and
 * counts twice the images. */
TEST(train_recipe_grad_accum_of_copies_is_the_plain_step)
{
	struct train_opts o = small_opts();
	o.dropout = 0;
	o.keep_log = 1;
	struct train_result plain, acc;
	CHECK_MSG(train_run(&o, &plain, NULL) == 0, "%s", gp_errmsg());
	o.grad_accum = 2;
	CHECK_MSG(train_run(&o, &acc, NULL) == 0, "%s", gp_errmsg());
	CHECK(plain.last_loss == acc.last_loss);
	CHECK_EQ_INT(acc.n_log, 3);
	CHECK_EQ_INT(plain.n_log, 3);
	for (int i = 0; i < acc.n_log && i < plain.n_log; i++)
		CHECK(acc.log[i].loss == plain.log[i].loss && acc.log[i].accuracy == plain.log[i].accuracy);
	/* the memory for the accumulated gradients */
	CHECK_EQ_INT(acc.mem.peak_bytes[MEM_GRADS], 2 * plain.mem.peak_bytes[MEM_GRADS]);
	train_result_free(&plain);
	train_result_free(&acc);
}
