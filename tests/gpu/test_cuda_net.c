/* The CUDA backend at the model level: every model against the CPU double reference,
 * out-of-memory as an ordinary error, and parity with PyTorch (tests/torch/parity.py). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/models.h"
#include "nn/trainer.h"
#include "ops/cuda/device.h"
#include "../test.h"

#define NEED_GPU()                                                        \
	do {                                                              \
		char why_[256];                                           \
		if (!cuda_available(why_, sizeof(why_))) {                \
			char msg_[300];                                   \
			snprintf(msg_, sizeof(msg_), "no CUDA device: %s", why_); \
			SKIP(msg_);                                       \
		}                                                         \
	} while (0)

static struct net *build(const char *name, int size, int batch, int classes)
{
	struct model_opts o = model_defaults(name);
	o.size = size;
	o.batch = batch;
	o.classes = classes;
	o.seed = 3;
	o.dropout = 0;
	struct net *net = NULL;
	CHECK_MSG(model_build(name, &o, &net) == 0, "%s", gp_errmsg());
	return net;
}

/* One training step on the GPU (strict FP32) and on the CPU in double: loss, logits,
 * gradients, then parameters after a second step. */
static void check_against_cpu(const char *name, int size, int batch)
{
	struct net *g = build(name, size, batch, 10), *c = build(name, size, batch, 10);
	if (!g || !c)
		goto out;
	CHECK_MSG(net_setup(g, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	CHECK(net_setup(c, BACKEND_CPU, GP_F64, PREC_FP32) == 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(batch, 3, size, size, 10, 5, &x, &y) == 0);
	CHECK(net_set_batch_data(g, x, y) == 0);
	CHECK(net_set_batch_data(c, x, y) == 0);
	free(x);
	free(y);
	size_t n = g->params_count, nl = (size_t)batch * 10;
	float *gg = malloc(n * sizeof(float)), *cg = malloc(n * sizeof(float));
	float *gl = malloc(nl * sizeof(float)), *cl = malloc(nl * sizeof(float));
	double lg, lc;
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4 };
	for (int step = 0; step < 2; step++) {
		CHECK(net_forward(g, 1) == 0 && net_loss(g, &lg, NULL) == 0 && net_backward(g) == 0);
		CHECK(net_forward(c, 1) == 0 && net_loss(c, &lc, NULL) == 0 && net_backward(c) == 0);
		CHECK_MSG(fabs(lg - lc) <= 1e-5 * fabs(lc), "%s step %d loss %.8f vs %.8f", name, step, lg, lc);
		CHECK(net_logits_to_host(g, gl) == 0 && net_logits_to_host(c, cl) == 0);
		CHECK_LE(rel_err_norm_f32(gl, cl, nl), 1e-5);
		CHECK(net_grads_to_host(g, gg) == 0 && net_grads_to_host(c, cg) == 0);
		double ge = rel_err_norm_f32(gg, cg, n);
		CHECK_MSG(ge <= 1e-4, "%s step %d gradient error %.3g", name, step, ge);
		CHECK(net_sgd_step(g, &sgd) == 0 && net_sgd_step(c, &sgd) == 0);
	}
	CHECK(net_sync_to_host(g) == 0 && net_sync_to_host(c) == 0);
	CHECK_LE(rel_err_norm_f32(g->host_params, c->host_params, n), 1e-5);
	CHECK_LE(rel_err_norm_f32(g->host_running, c->host_running, g->running_count), 1e-5);
	free(gg);
	free(cg);
	free(gl);
	free(cl);
out:
	net_free(g);
	net_free(c);
}

TEST(cuda_net_simple_cnn_matches_cpu)
{
	NEED_GPU();
	check_against_cpu("simple_cnn", 32, 4);
}

TEST(cuda_net_resnet18_matches_cpu)
{
	NEED_GPU();
	check_against_cpu("resnet18", 64, 8);
}

TEST(cuda_net_resnet50_matches_cpu)
{
	NEED_GPU();
	check_against_cpu("resnet50", 96, 4);
}

TEST(cuda_net_mobilenet_v2_matches_cpu)
{
	NEED_GPU();
	check_against_cpu("mobilenet_v2", 64, 8);
}

/* Out of memory ten times in one process, then a batch that fits trains; free
 * device memory afterwards equals what it was before, within 1 MiB. */
TEST(cuda_net_out_of_memory_is_recoverable)
{
	NEED_GPU();
	struct net *small = build("resnet50", 64, 2, 10);
	CHECK(net_setup(small, BACKEND_CUDA, GP_F32, PREC_FP32) == 0); /* context and handles exist now */
	net_teardown(small);
	size_t free0, total, free1;
	CHECK(cuda_mem_info(&free0, &total) == 0);
	for (int i = 0; i < 10; i++) {
		struct net *big = build("resnet50", 224, 4096, 1000);
		if (!big)
			break;
		int rc = net_setup(big, BACKEND_CUDA, GP_F32, PREC_FP32);
		CHECK_MSG(rc == GP_EDEVOOM, "try %d: rc %d (%s)", i, rc, gp_errmsg());
		CHECK_MSG(strstr(gp_errmsg(), "free") != NULL, "message: %s", gp_errmsg());
		CHECK_EQ_INT(big->mem.total_bytes, 0);
		net_free(big);
	}
	CHECK(net_setup(small, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(2, 3, 64, 64, 10, 1, &x, &y) == 0);
	CHECK(net_set_batch_data(small, x, y) == 0);
	double loss = 0;
	CHECK(net_forward(small, 1) == 0 && net_loss(small, &loss, NULL) == 0 && net_backward(small) == 0);
	CHECK(loss > 0 && isfinite(loss));
	free(x);
	free(y);
	net_free(small);
	CHECK(cuda_mem_info(&free1, &total) == 0);
	double diff_mib = ((double)free0 - (double)free1) / 1048576.0;
	CHECK_MSG(fabs(diff_mib) <= 1.0, "free memory moved by %.2f MiB", diff_mib);
}

/* The PyTorch side runs where torch with CUDA is installed (the GPU machine). */
TEST(cuda_parity_with_pytorch)
{
	NEED_GPU();
	char out[16384];
	if (test_run("python3 -c 'import torch, torchvision, safetensors; assert torch.cuda.is_available()'",
		     out, sizeof(out)) != 0)
		SKIP("python3 with torch, torchvision, safetensors and CUDA is not available");
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "python3 tests/torch/parity.py --bin %s --device cuda", test_bin());
	int rc = test_run(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK_MSG(rc == 0, "parity.py exited %d", rc);
}

/* Replaying the captured step gives what running it op by op gives, dropout included
 * (the mask's step counter lives on the device). */
TEST(cuda_graph_step_matches_eager)
{
	NEED_GPU();
	struct model_opts o = model_defaults("mobilenet_v2");
	o.size = 64;
	o.batch = 8;
	o.classes = 10;
	o.seed = 4;
	struct net *a = NULL, *b = NULL;
	CHECK(model_build("mobilenet_v2", &o, &a) == 0 && model_build("mobilenet_v2", &o, &b) == 0);
	if (!a || !b)
		goto out;
	a->use_graphs = 1;
	b->use_graphs = 0;
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 2, &x, &y) == 0);
	CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(b, x, y) == 0);
	free(x);
	free(y);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	double la = 0, lb = 0;
	for (int s = 0; s < 5; s++) {
		CHECK(net_train_step(a, &sgd, &la, NULL) == 0);
		CHECK(net_train_step(b, &sgd, &lb, NULL) == 0);
		CHECK_MSG(fabs(la - lb) <= 1e-4 * fabs(lb), "step %d: loss %.7f graph vs %.7f eager", s, la, lb);
	}
	CHECK(net_sync_to_host(a) == 0 && net_sync_to_host(b) == 0);
	CHECK_LE(rel_err_norm_f32(a->host_params, b->host_params, a->params_count), 1e-4);
	CHECK_EQ_INT(a->nodes[2].bn_batches_tracked, 5);
	CHECK_EQ_INT(a->sgd_steps, 5);
out:
	net_free(a);
	net_free(b);
}
