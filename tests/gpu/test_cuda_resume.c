/* Training checkpoints on the GPU: the optimizer buffers live on the device and go
 * through the backend's optim_state hooks, the dropout masks read a device step
 * counter, fp16 carries a loss scaler. With deterministic convolution algorithms
 * (train_opts.deterministic; simple_cnn has no batch norm, whose statistics sum with
 * atomics), a run stopped after epoch 2 by SIGINT and resumed from its last
 * checkpoint ends bit for bit as the uninterrupted one, loader threads and CUDA graph
 * replay included. Without a device every test skips. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "core/file.h"
#include "core/interrupt.h"
#include "nn/models.h"
#include "train/schedule.h"
#include "train/train_state.h"
#include "train/trainer.h"

static int stop_at_12(void *user, struct net *net, int step, int steps, double elapsed_s)
{
	if (step == 12)
		raise(SIGINT);
	return 0;
}

static int same_file(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;
	int same = file_read_all(a, &x, &nx) == 0 && file_read_all(b, &y, &ny) == 0 && nx == ny &&
		   !memcmp(x, y, nx);
	free(x);
	free(y);
	return same;
}

static void check_cuda_resume(enum optim_kind kind, enum precision prec)
{
	struct gpu g;
	GPU_OPEN(&g, 3);
	gpu_close(&g);
	char ds[600], cmd[1200], out[4096], whole[700], part[700], again[700], last[800];
	const char *dir = test_tmpdir();
	snprintf(ds, sizeof(ds), "%s/ds", dir);
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 3 --images 96 --size 40x40 --threads 2",
		 test_bin(), ds);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	if (rc)
		return;
	struct train_opts o = train_opts_default();
	o.backend = BACKEND_CUDA;
	o.precision = prec;
	o.deterministic = 1;
	o.data = ds;
	o.classes = 0;
	o.size = 32;
	o.batch = 8;
	o.epochs = 4;
	o.workers = 2;
	o.log_every = 1;
	o.keep_log = 1;
	o.seed = 11;
	o.dropout = 0.3;
	if (kind == OPTIM_ADAMW)
		o.sgd = (struct sgd_args){ .kind = OPTIM_ADAMW, .lr = 2e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
					   .weight_decay = 0.01 };
	else
		o.sgd = (struct sgd_args){ .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4 };
	o.schedule = lr_schedule_defaults(LR_COSINE, o.sgd.lr);
	o.schedule.warmup_epochs = 1;
	snprintf(whole, sizeof(whole), "%s/whole", dir);
	snprintf(part, sizeof(part), "%s/part", dir);
	snprintf(again, sizeof(again), "%s/again", dir);

	struct train_result a, b, c;
	o.checkpoint_dir = whole;
	CHECK_MSG(train_run(&o, &a, NULL) == 0, "%s", gp_errmsg());
	struct train_observer ob = { .after_step = stop_at_12 };
	o.checkpoint_dir = part;
	CHECK(interrupt_catch() == 0);
	rc = train_run_observed(&o, &ob, &b, NULL);
	interrupt_release();
	CHECK(interrupt_catch() == 0); /* forget the signal */
	interrupt_release();
	CHECK_MSG(rc == GP_EINTR && b.steps == 12, "rc %d, %d steps: %s", rc, b.steps, gp_errmsg());
	snprintf(last, sizeof(last), "%s/last", part);
	o.resume = last;
	o.checkpoint_dir = again;
	CHECK_MSG(train_run(&o, &c, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(c.n_log, a.n_log);
	for (int i = 0; i < a.n_log && i < c.n_log; i++)
		CHECK_MSG(a.log[i].loss == c.log[i].loss && a.log[i].accuracy == c.log[i].accuracy,
			  "step %d: loss %.17g uninterrupted, %.17g resumed", a.log[i].step, a.log[i].loss,
			  c.log[i].loss);
	char wa[900], wc[900];
	snprintf(wa, sizeof(wa), "%s/last/" TRAIN_STATE_WEIGHTS, whole);
	snprintf(wc, sizeof(wc), "%s/last/" TRAIN_STATE_WEIGHTS, again);
	CHECK_MSG(same_file(wa, wc), "weights differ: %s and %s", wa, wc);
	struct train_state sa, sc;
	snprintf(wa, sizeof(wa), "%s/last", whole);
	snprintf(wc, sizeof(wc), "%s/last", again);
	if (train_state_read(wa, &sa) == 0 && train_state_read(wc, &sc) == 0) {
		CHECK_EQ_INT(sa.sgd_steps, sc.sgd_steps);
		CHECK(sa.scaler.scale == sc.scaler.scale && sa.scaler.growth_tracker == sc.scaler.growth_tracker);
		train_state_free(&sa);
		train_state_free(&sc);
	} else {
		CHECK_MSG(0, "%s", gp_errmsg());
	}
	train_result_free(&a);
	train_result_free(&b);
	train_result_free(&c);
}

TEST(cuda_resume_sgd_is_bit_identical)
{
	check_cuda_resume(OPTIM_SGD, PREC_FP32);
}

TEST(cuda_resume_adamw_is_bit_identical)
{
	check_cuda_resume(OPTIM_ADAMW, PREC_FP32);
}

TEST(cuda_resume_fp16_with_loss_scaler_is_bit_identical)
{
	check_cuda_resume(OPTIM_SGD, PREC_FP16);
}

/* The optimizer buffers through the backend hooks: what goes in comes out. */
TEST(cuda_optim_state_round_trip)
{
	struct gpu g;
	GPU_OPEN(&g, 4);
	gpu_close(&g);
	struct model_opts mo = model_defaults("simple_cnn");
	mo.batch = 2;
	mo.size = 16;
	mo.classes = 10;
	struct net *net = NULL;
	CHECK(model_build("simple_cnn", &mo, &net) == 0);
	if (!net)
		return;
	net->optim.kind = OPTIM_ADAMW;
	CHECK_MSG(net_setup(net, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	size_t n = net->params_count;
	float *m = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
	float *m2 = calloc(n, sizeof(float)), *v2 = calloc(n, sizeof(float));
	for (size_t i = 0; i < n; i++) {
		m[i] = (float)i * 1e-3f;
		v[i] = (float)(n - i) * 1e-4f;
	}
	net->sgd_steps = 7;
	CHECK(net_optim_state_from_host(net, m, v) == 0);
	CHECK(net_optim_state_to_host(net, m2, v2) == 0);
	CHECK(!memcmp(m, m2, n * sizeof(float)) && !memcmp(v, v2, n * sizeof(float)));
	CHECK(net_optim_state_from_host(net, m, NULL) == GP_EINVAL); /* AdamW needs both */
	free(m);
	free(v);
	free(m2);
	free(v2);
	net_free(net);
}
