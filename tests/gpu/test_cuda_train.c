/* The training recipe's CUDA kernels against their CPU twins (optim.cu, loss.cu):
 * the fused optimizer step (AdamW, SGD with a gradient scale and clipping), the sum of
 * squares, gradient accumulation and label-smoothed cross-entropy; then a simple_cnn
 * trained a few steps with all of them on the GPU and on the CPU, eager and replayed
 * as a graph while the rate changes. Without a device every test skips. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "backend/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "net_util.h"

TEST(cuda_optim_step_matches_cpu)
{
	static const struct sgd_args cfg[] = {
		{ .kind = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01 },
		{ .kind = OPTIM_ADAMW, .lr = 3e-3, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-6, .grad_scale = 0.25,
		  .clip_norm = 0.5 },
		{ .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .grad_scale = 0.5 },
		{ .lr = 0.05, .momentum = 0.9, .nesterov = 1, .clip_norm = 1.0 },
	};
	const size_t n = 1003;
	struct gpu g;
	GPU_OPEN(&g, 31);
	for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
		float *p = host_rand(&g, n, 1, 0), *m = host_f(&g, n), *v = host_f(&g, n);
		float *d_p = dev_from(&g, p, n), *d_g = dev_f(&g, n), *d_m = dev_f(&g, n), *d_v = dev_f(&g, n);
		double *d_dev = dev_bytes(&g, (OPTIM_HYPER_DOUBLES + 1 + OPTIM_SUMSQ_BLOCKS) * sizeof(double));
		double *d_sumsq = d_dev + OPTIM_HYPER_DOUBLES;
		for (int step = 1; step <= 3; step++) {
			struct sgd_args a = cfg[t];
			a.first_step = step == 1;
			a.step = step;
			a.lr *= step; /* a schedule: the rate comes from device memory */
			float *grad = host_rand(&g, n, 2, 0);
			put(&g, d_g, grad, n * sizeof(float));
			/* the CPU backend's order: scale in place, then the update */
			double f = optim_grad_factor(&a, a.clip_norm > 0 ? sumsq_cpu_f32(n, grad) : 0);
			scale_cpu_f32(n, grad, f);
			if (a.kind == OPTIM_ADAMW)
				adamw_step_cpu_f32(&a, n, p, grad, m, v);
			else
				sgd_step_cpu_f32(&a, n, p, grad, m);
			CHECK_OK(optim_hyper_set_cuda(g.ctx->stream, d_dev, &a));
			if (a.clip_norm > 0)
				CHECK_OK(sumsq_cuda(g.ctx->stream, n, d_g, d_sumsq + 1, d_sumsq));
			CHECK_OK(optim_step_cuda(g.ctx->stream, &a, d_dev, a.clip_norm > 0 ? d_sumsq : NULL, n, d_p,
						 d_g, d_m, d_v));
		}
		CHECK_LE(rel_err_norm_f32(down(&g, d_p, n), p, n), 1e-6);
		CHECK_LE(rel_err_norm_f32(down(&g, d_m, n), m, n), 1e-6);
		if (cfg[t].kind == OPTIM_ADAMW)
			CHECK_LE(rel_err_norm_f32(down(&g, d_v, n), v, n), 1e-6);
	}
	gpu_close(&g);
}

TEST(cuda_sumsq_and_grad_accum_match_cpu)
{
	const size_t n = 300001;
	struct gpu g;
	GPU_OPEN(&g, 32);
	float *x = host_rand(&g, n, 1, 0.1), *acc = host_f(&g, n);
	float *d_x = dev_from(&g, x, n), *d_acc = dev_f(&g, n);
	double *d_part = dev_bytes(&g, (OPTIM_SUMSQ_BLOCKS + 1) * sizeof(double)), sumsq = 0;
	CHECK_OK(sumsq_cuda(g.ctx->stream, n, d_x, d_part + 1, d_part));
	get(&g, &sumsq, d_part, sizeof(double));
	CHECK_NEAR(sumsq, sumsq_cpu_f32(n, x), 1e-12 * sumsq);
	for (int mode = GRAD_ACC_SAVE; mode <= GRAD_ACC_RESTORE; mode++) {
		grad_accum_cpu_f32((enum grad_accum_mode)mode, n, x, acc);
		CHECK_OK(grad_accum_cuda(g.ctx->stream, (enum grad_accum_mode)mode, n, d_x, d_acc));
	}
	CHECK_LE(rel_err_norm_f32(down(&g, d_x, n), x, n), 0);
	CHECK_LE(rel_err_norm_f32(down(&g, d_acc, n), acc, n), 0);
	gpu_close(&g);
}

TEST(cuda_label_smoothing_matches_cpu)
{
	static const int cfg[][2] = { { 37, 1000 }, { 64, 10 }, { 1, 3 } };
	static const enum gp_dtype types[] = { GP_F32, GP_F16, GP_BF16 };
	struct gpu g;
	GPU_OPEN(&g, 33);
	for (size_t ti = 0; ti < 3; ti++)
		for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
			enum gp_dtype dt = types[ti];
			int n = cfg[t][0], k = cfg[t][1], correct = -1, correct_gpu = -1;
			size_t nl = (size_t)n * k;
			float *logits = dt == GP_F32 ? host_rand(&g, nl, 3, 0) : host_rand_h(&g, dt, nl, 3, 0);
			float *dl = host_f(&g, nl);
			int32_t *labels = host_bytes(&g, n * sizeof(int32_t));
			for (int i = 0; i < n; i++)
				labels[i] = (int32_t)rng_below(&g.rng, k);
			void *d_logits = dev_bytes(&g, nl * 4), *d_dl = dev_bytes(&g, nl * 4);
			if (dt == GP_F32)
				put(&g, d_logits, logits, nl * sizeof(float));
			else
				put_h(&g, dt, d_logits, logits, nl);
			float *d_scratch = dev_f(&g, 2 * (size_t)n);
			int32_t *d_labels = dev_bytes(&g, n * sizeof(int32_t));
			double *d_loss = dev_bytes(&g, sizeof(double)), loss_gpu = NAN;
			int *d_correct = dev_bytes(&g, sizeof(int));
			put(&g, d_labels, labels, n * sizeof(int32_t));
			double loss = softmax_xent_ls_cpu_f32(n, k, logits, labels, 0.1, dl, &correct);
			CHECK_OK(softmax_xent_ls_cuda(g.ctx->stream, dt, n, k, d_logits, d_labels, 0.1, d_dl, d_scratch,
						      d_loss, d_correct));
			get(&g, &loss_gpu, d_loss, sizeof(double));
			get(&g, &correct_gpu, d_correct, sizeof(int));
			CHECK_NEAR(loss_gpu, loss, 1e-6 * fabs(loss));
			CHECK_EQ_INT(correct_gpu, correct);
			float *got = dt == GP_F32 ? down(&g, d_dl, nl) : down_h(&g, dt, d_dl, nl);
			CHECK_LE(rel_err_norm_f32(got, dl, nl), dt == GP_F32 ? 1e-6 : tol_for(dt));
		}
	gpu_close(&g);
}

/* simple_cnn trained 3 optimizer steps of 2 micro-batches with AdamW, clipping, label
 * smoothing and a changing rate, on the GPU (FP32, direct convolutions) and the CPU in
 * float: the parameters' change must agree. */
TEST(cuda_net_train_recipe_matches_cpu)
{
	NEED_GPU();
	const int b = 4, size = 16;
	struct net *gn = build("simple_cnn", size, b, 10), *cn = build("simple_cnn", size, b, 10);
	if (!gn || !cn)
		goto out;
	struct optim_setup os = { .kind = OPTIM_ADAMW, .grad_accum = 2, .dynamic = 1 };
	gn->optim = cn->optim = os;
	gn->label_smoothing = cn->label_smoothing = 0.1;
	backend_cuda_set_conv_policy(gn, 1, 1);
	CHECK_MSG(net_setup(gn, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	CHECK(net_setup(cn, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	size_t n = gn->params_count, img = 3 * size * size;
	float *p0 = malloc(n * sizeof(float)), *pg = malloc(n * sizeof(float)), *pc = malloc(n * sizeof(float));
	memcpy(p0, gn->host_params, n * sizeof(float));
	for (int s = 0; s < 3; s++) {
		struct sgd_args a = { .kind = OPTIM_ADAMW, .lr = 1e-3 * (s + 1), .beta1 = 0.9 - 0.02 * s, .beta2 = 0.999,
				      .eps = 1e-8, .weight_decay = 0.01, .grad_scale = 0.5, .clip_norm = 0.5 };
		float *x = NULL;
		int32_t *y = NULL;
		CHECK(train_synthetic_batch(2 * b, 3, size, size, 10, 40 + s, &x, &y) == 0);
		for (int m = 0; m < 2 && x; m++) {
			double lg, lc;
			CHECK(net_set_batch_data(gn, x + m * b * img, y + m * b) == 0);
			CHECK(net_set_batch_data(cn, x + m * b * img, y + m * b) == 0);
			CHECK(net_forward(gn, 1) == 0 && net_loss(gn, &lg, NULL) == 0 && net_backward(gn) == 0);
			CHECK(net_forward(cn, 1) == 0 && net_loss(cn, &lc, NULL) == 0 && net_backward(cn) == 0);
			CHECK_NEAR(lg, lc, 1e-5 * fabs(lc));
			CHECK(net_grad_accumulate(gn, m, 2) == 0 && net_grad_accumulate(cn, m, 2) == 0);
		}
		CHECK(net_sgd_step(gn, &a) == 0 && net_sgd_step(cn, &a) == 0);
		free(x);
		free(y);
	}
	CHECK(net_sync_to_host(gn) == 0 && net_sync_to_host(cn) == 0);
	memcpy(pg, gn->host_params, n * sizeof(float));
	memcpy(pc, cn->host_params, n * sizeof(float));
	for (size_t i = 0; i < n; i++) {
		pg[i] -= p0[i];
		pc[i] -= p0[i];
	}
	double e = rel_err_norm_f32(pg, pc, n);
	printf("      parameter change GPU vs CPU: relative error %.3g\n", e);
	CHECK_LE(e, 1e-2);
	free(p0);
	free(pg);
	free(pc);
out:
	net_free(gn);
	net_free(cn);
}

/* A captured step replayed while the rate and momentum change (OneCycleLR) ends where
 * the same steps run eagerly end: the graph reads them from device memory. */
TEST(cuda_graph_replay_follows_the_schedule)
{
	NEED_GPU();
	const int b = 4, size = 16;
	struct net *gr = build("simple_cnn", size, b, 10), *ea = build("simple_cnn", size, b, 10);
	if (!gr || !ea)
		goto out;
	for (int k = 0; k < 2; k++) {
		struct net *net = k ? ea : gr;
		net->optim = (struct optim_setup){ .kind = OPTIM_SGD, .dynamic = 1 };
		net->use_graphs = !k;
		backend_cuda_set_conv_policy(net, 1, 1);
		CHECK_MSG(net_setup(net, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	}
	same_batch(gr, ea, b, size, 10, 9);
	for (int s = 0; s < 5; s++) {
		struct sgd_args a = { .lr = 0.01 * (1 + s), .momentum = 0.95 - 0.02 * s, .clip_norm = s >= 3 ? 0.1 : 0 };
		CHECK(net_train_step(gr, &a, NULL, NULL) == 0);
		CHECK(net_train_step(ea, &a, NULL, NULL) == 0);
	}
	size_t n = gr->params_count;
	CHECK(net_sync_to_host(gr) == 0 && net_sync_to_host(ea) == 0);
	CHECK_LE(rel_err_norm_f32(gr->host_params, ea->host_params, n), 1e-6);
out:
	net_free(gr);
	net_free(ea);
}
