/* The CUDA backend at the model level: every model against the CPU double reference,
 * out-of-memory as an ordinary error, and parity with PyTorch (tests/torch/parity.py). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/backend.h"
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

/* One training step on the GPU in FP32 against the CPU in double, with the CPU in
 * float beside it: at init on random data, batch-norm networks amplify rounding
 * (PyTorch's own FP32 gradients differ from float64 by up to 2e-2 on ResNet-50, see
 * docs/PERF.md), so the GPU must be as close to the double result as our float CPU
 * path is (three times its error), and within 1e-5 where the problem is well
 * conditioned. Loss and logits, every gradient, parameters after the step. */
static double dist(const float *a, const float *b, size_t n)
{
	return rel_err_norm_f32(a, b, n);
}

static void check_against_cpu(const char *name, int size, int batch)
{
	struct net *g = build(name, size, batch, 10), *c = build(name, size, batch, 10);
	struct net *f = build(name, size, batch, 10);
	if (!g || !c || !f)
		goto out;
	/* faithful FP32: direct summation, as the CPU does */
	backend_cuda_set_conv_policy(1, 1);
	CHECK_MSG(net_setup(g, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	backend_cuda_set_conv_policy(0, 0);
	CHECK(net_setup(c, BACKEND_CPU, GP_F64, PREC_FP32) == 0);
	CHECK(net_setup(f, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(batch, 3, size, size, 10, 5, &x, &y) == 0);
	CHECK(net_set_batch_data(g, x, y) == 0 && net_set_batch_data(c, x, y) == 0 &&
	      net_set_batch_data(f, x, y) == 0);
	free(x);
	free(y);
	size_t n = g->params_count, nl = (size_t)batch * 10;
	float *gv = malloc(n * sizeof(float)), *cv = malloc(n * sizeof(float)), *fv = malloc(n * sizeof(float));
	float *gl = malloc(nl * sizeof(float)), *cl = malloc(nl * sizeof(float)), *fl = malloc(nl * sizeof(float));
	double lg, lc, lf;
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4 };
	CHECK(net_forward(g, 1) == 0 && net_loss(g, &lg, NULL) == 0 && net_logits_to_host(g, gl) == 0);
	CHECK(net_forward(c, 1) == 0 && net_loss(c, &lc, NULL) == 0 && net_logits_to_host(c, cl) == 0);
	CHECK(net_forward(f, 1) == 0 && net_loss(f, &lf, NULL) == 0 && net_logits_to_host(f, fl) == 0);
	double tol_l = fmax(1e-5, 3 * fabs(lf - lc) / fabs(lc));
	CHECK_MSG(fabs(lg - lc) <= tol_l * fabs(lc), "%s loss %.8f vs %.8f (float CPU %.8f)", name, lg, lc, lf);
	double e_logits = dist(gl, cl, nl), tol_logits = fmax(2e-5, 3 * dist(fl, cl, nl));
	CHECK_MSG(e_logits <= tol_logits, "%s logits error %.3g > %.3g", name, e_logits, tol_logits);
	CHECK(net_backward(g) == 0 && net_backward(c) == 0 && net_backward(f) == 0);
	CHECK(net_grads_to_host(g, gv) == 0 && net_grads_to_host(c, cv) == 0 && net_grads_to_host(f, fv) == 0);
	/* gradients: a ReLU input within rounding of 0 can flip between implementations
	 * and move the gradient by ~1/sqrt(elements) (see cuda_net_node_by_node) */
	double e_grad = dist(gv, cv, n), tol_grad = fmax(1e-2, 3 * dist(fv, cv, n));
	CHECK_MSG(e_grad <= tol_grad, "%s gradient error %.3g > %.3g (float CPU %.3g)", name, e_grad, tol_grad,
		  dist(fv, cv, n));
	if (e_grad > tol_grad)
		for (int k = 0; k < g->n_state; k++) {
			struct state_entry *e = &g->state[k];
			if (e->kind != STATE_PARAM)
				continue;
			double ek = dist(gv + e->offset, cv + e->offset, e->numel);
			if (ek > tol_grad)
				printf("      %s: %.3g (float CPU %.3g)\n", e->name, ek,
				       dist(fv + e->offset, cv + e->offset, e->numel));
		}
	CHECK(net_sgd_step(g, &sgd) == 0 && net_sgd_step(c, &sgd) == 0 && net_sgd_step(f, &sgd) == 0);
	CHECK(net_sync_to_host(g) == 0 && net_sync_to_host(c) == 0 && net_sync_to_host(f) == 0);
	double e_p = dist(g->host_params, c->host_params, n);
	double tol_p = fmax(1e-4, 3 * dist(f->host_params, c->host_params, n));
	CHECK_MSG(e_p <= tol_p, "%s parameters after a step: error %.3g > %.3g", name, e_p, tol_p);
	double e_r = dist(g->host_running, c->host_running, g->running_count);
	double tol_r = fmax(1e-5, 3 * dist(f->host_running, c->host_running, g->running_count));
	CHECK_MSG(e_r <= tol_r, "%s running statistics: error %.3g > %.3g", name, e_r, tol_r);
	free(gv);
	free(cv);
	free(fv);
	free(gl);
	free(cl);
	free(fl);
out:
	net_free(g);
	net_free(c);
	net_free(f);
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
	check_against_cpu("resnet50", 64, 4);
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
	size_t free0, total, free1, free_mid;
	/* One failed set-up first: CUDA loads kernel code lazily, on first launch, into
	 * device memory that stays for the process; measuring the big shapes launches
	 * kernels nothing else uses. That is not a leak, so it happens before free0. */
	struct net *warm = build("resnet50", 224, 1536, 1000);
	if (warm)
		CHECK(net_setup(warm, BACKEND_CUDA, GP_F32, PREC_FP32) == GP_EDEVOOM);
	net_free(warm);
	/* and one training step of the net that fits, whose kernels load the same way */
	float *wx;
	int32_t *wy;
	CHECK(net_setup(small, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(train_synthetic_batch(2, 3, 64, 64, 10, 1, &wx, &wy) == 0);
	CHECK(net_set_batch_data(small, wx, wy) == 0);
	CHECK(net_forward(small, 1) == 0 && net_loss(small, NULL, NULL) == 0 && net_backward(small) == 0);
	CHECK(net_wait(small) == 0);
	free(wx);
	free(wy);
	net_teardown(small);
	CHECK(cuda_mem_info(&free0, &total) == 0);
	for (int i = 0; i < 10; i++) {
		struct net *big = build("resnet50", 224, 1536, 1000); /* about 130 GB */
		if (!big)
			break;
		int rc = net_setup(big, BACKEND_CUDA, GP_F32, PREC_FP32);
		CHECK_MSG(rc == GP_EDEVOOM, "try %d: rc %d (%s)", i, rc, gp_errmsg());
		CHECK_MSG(strstr(gp_errmsg(), "free") != NULL, "message: %s", gp_errmsg());
		CHECK_EQ_INT(big->mem.total_bytes, 0);
		net_free(big);
		if (i == 0 && cuda_mem_info(&free_mid, &total) == 0)
			printf("      free after the first failed set-up: %+.2f MiB\n",
			       ((double)free_mid - (double)free0) / 1048576.0);
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
	snprintf(cmd, sizeof(cmd), "python3 tests/torch/parity.py --bin %s --device cuda --ref64", test_bin());
	int rc = test_run(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK_MSG(rc == 0, "parity.py exited %d", rc);
}

/* Replaying the captured step gives what running it op by op gives, dropout included
 * (the mask's step counter lives on the device). Not bit for bit: cuDNN's fastest
 * algorithms may sum in a different order on each run. */
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
	backend_cuda_set_conv_policy(0, 1); /* same sums on every run */
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	backend_cuda_set_conv_policy(0, 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 2, &x, &y) == 0);
	CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(b, x, y) == 0);
	free(x);
	free(y);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	double la = 0, lb = 0;
	for (int s = 0; s < 3; s++) {
		CHECK(net_train_step(a, &sgd, &la, NULL) == 0);
		CHECK(net_train_step(b, &sgd, &lb, NULL) == 0);
		CHECK_MSG(fabs(la - lb) <= 1e-3 * fabs(lb), "step %d: loss %.7f graph vs %.7f eager", s, la, lb);
	}
	CHECK(net_sync_to_host(a) == 0 && net_sync_to_host(b) == 0);
	CHECK_LE(rel_err_norm_f32(a->host_params, b->host_params, a->params_count), 1e-3);
	CHECK_EQ_INT(a->nodes[2].bn_batches_tracked, 3);
	CHECK_EQ_INT(a->sgd_steps, 3);
out:
	net_free(a);
	net_free(b);
}

/* Node by node: every output after its forward and every output gradient after the
 * backward that completes it, GPU against the float CPU path, so that a mismatch is
 * pinned to the first op where it appears; outputs that a backward reads must still
 * hold their forward values. */
struct node_log {
	float **vals[2];
	float **fwd_own;   /* this backend's forward outputs, to catch later overwrites */
	int clobbered;
	int first_flip;    /* first relu (backward order) whose GPU mask differs from the CPU's */
	int n;
	struct net *cpu;
	double worst[2];
	int worst_node[2];
};

static void log_node(void *user, const struct net *cnet, int node, enum net_phase phase)
{
	struct node_log *L = user;
	struct net *net = (struct net *)cnet;
	if (node < 0)
		return;
	int grad = phase == PHASE_BACKWARD;
	/* an op whose backward reads its own output must find it unchanged */
	if (op_bwd_needs_output(net->nodes[node].op) && net->nodes[node].t_y >= 0) {
		size_t cnt = shape_numel(net->nodes[node].out);
		float *now = malloc(cnt * sizeof(float));
		if (net_tensor_to_host(net, node, 0, now) == 0) {
			if (!grad) {
				free(L->fwd_own[node]);
				L->fwd_own[node] = now;
				now = NULL;
			} else if (net->backend == BACKEND_CUDA && L->vals[0][node] && L->worst_node[1] < 0) {
				/* where do the CPU's and the GPU's masks disagree, and by how much */
				const float *yc = L->vals[0][node];
				long flips = 0;
				double maxabs = 0;
				for (size_t j = 0; j < cnt; j++) {
					if ((yc[j] > 0) != (now[j] > 0))
						flips++;
					double d = fabs(yc[j] - now[j]);
					if (d > maxabs)
						maxabs = d;
				}
				if (flips && L->first_flip < 0) {
					printf("      node %d: %ld of %zu mask elements differ, max |y diff| %.3g\n",
					       node, flips, cnt, maxabs);
					L->first_flip = node;
				}
			}
			if (grad && L->fwd_own[node] && memcmp(now, L->fwd_own[node], cnt * sizeof(float))) {
				char b[80];
				printf("      %s backend: output of %s changed between its forward and backward\n",
				       net->backend == BACKEND_CPU ? "cpu" : "cuda", net_node_label(net, node, b, 80));
				L->clobbered++;
			}
		}
		free(now);
	}
	/* after node's backward its own dy is final only where nothing aliases it: read
	 * the gradients of its inputs instead, which this backward has just completed
	 * when it is their first consumer in backward order */
	int target = grad ? (net->nodes[node].n_in ? net->nodes[node].in[0] : -1) : node;
	if (target < 0 || (grad ? net->nodes[target].t_dy : net->nodes[target].t_y) < 0)
		return;
	if (grad && net->nodes[target].last_consumer == node && net->nodes[target].consumers > 1)
		return; /* more gradient still to come */
	size_t cnt = shape_numel(net->nodes[target].out);
	float *buf = malloc(cnt * sizeof(float));
	if (net_tensor_to_host(net, target, grad, buf) != 0) {
		free(buf);
		return;
	}
	if (net->backend == BACKEND_CPU) {
		free(L->vals[grad][node]);
		L->vals[grad][node] = buf;
		return;
	}
	float *ref = L->vals[grad][node];
	if (ref) {
		double e = rel_err_norm_f32(buf, ref, cnt);
		if (e > L->worst[grad] && L->worst_node[grad] < 0 && e > 1e-4) {
			L->worst[grad] = e;
			L->worst_node[grad] = node;
		}
	}
	free(buf);
}

TEST(cuda_net_node_by_node_matches_cpu)
{
	NEED_GPU();
	const char *models[] = { "resnet18", "mobilenet_v2" };
	for (int m = 0; m < 2; m++) {
		struct net *g = build(models[m], 64, 8, 10), *c = build(models[m], 64, 8, 10);
		if (!g || !c)
			break;
		struct node_log L = { .n = g->n_nodes, .worst_node = { -1, -1 }, .first_flip = -1 };
		L.vals[0] = calloc(g->n_nodes, sizeof(float *));
		L.vals[1] = calloc(g->n_nodes, sizeof(float *));
		L.fwd_own = calloc(g->n_nodes, sizeof(float *));
		backend_cuda_set_conv_policy(1, 1);
		CHECK(net_setup(g, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
		backend_cuda_set_conv_policy(0, 0);
		CHECK(net_setup(c, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
		float *x;
		int32_t *y;
		CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 5, &x, &y) == 0);
		CHECK(net_set_batch_data(g, x, y) == 0 && net_set_batch_data(c, x, y) == 0);
		free(x);
		free(y);
		struct net *order[2] = { c, g };
		for (int k = 0; k < 2; k++) {
			struct net *n = order[k];
			n->hooks = (struct net_hooks){ .node_end = log_node, .user = &L };
			double loss;
			CHECK(net_forward(n, 1) == 0 && net_loss(n, &loss, NULL) == 0 && net_backward(n) == 0);
		}
		char b0[80], b1[80];
		if (L.worst_node[0] >= 0 || L.worst_node[1] >= 0)
			printf("      %s: first forward mismatch %s (%.3g), first backward mismatch after %s (%.3g)\n",
			       models[m], L.worst_node[0] >= 0 ? net_node_label(g, L.worst_node[0], b0, 80) : "-",
			       L.worst[0], L.worst_node[1] >= 0 ? net_node_label(g, L.worst_node[1], b1, 80) : "-",
			       L.worst[1]);
		CHECK_EQ_INT(L.clobbered, 0);
		CHECK_MSG(L.worst_node[0] < 0, "%s: a forward output differs by more than 1e-4", models[m]);
		/* A ReLU whose input lies within rounding of 0 may take the other branch on the
		 * GPU; one flipped element of N moves the gradient by about 1/sqrt(N) (2.6e-3
		 * for 131072). So gradients must agree to 1e-4 up to the first flip, and a
		 * first mismatch must sit exactly at a flipped ReLU. */
		CHECK_MSG(L.worst_node[1] < 0 || L.worst_node[1] == L.first_flip,
			  "%s: a gradient differs by more than 1e-4 at node %d with no ReLU flip there",
			  models[m], L.worst_node[1]);
		for (int i = 0; i < g->n_nodes; i++) {
			free(L.vals[0][i]);
			free(L.vals[1][i]);
			free(L.fwd_own[i]);
		}
		free(L.fwd_own);
		free(L.vals[0]);
		free(L.vals[1]);
		net_free(g);
		net_free(c);
	}
}

/* Batches staged on the copy stream (pinned host memory, overlapping the previous
 * step) train exactly as batches copied in synchronously. */
TEST(cuda_staged_batches_match_synchronous_copies)
{
	NEED_GPU();
	struct net *a = build("resnet18", 64, 8, 10), *b = build("resnet18", 64, 8, 10);
	if (!a || !b)
		goto out;
	backend_cuda_set_conv_policy(0, 1);
	a->use_graphs = b->use_graphs = 1;
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	backend_cuda_set_conv_policy(0, 0);
	float *x[3];
	int32_t *y[3];
	for (int k = 0; k < 3; k++)
		CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 20 + k, &x[k], &y[k]) == 0);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	for (int s = 0; s < 4; s++) {
		double la = 0, lb = 0;
		CHECK(net_stage_batch(a, x[s % 3], y[s % 3]) == 0);
		CHECK(net_train_step(a, &sgd, &la, NULL) == 0);
		CHECK(net_set_batch_data(b, x[s % 3], y[s % 3]) == 0);
		CHECK(net_train_step(b, &sgd, &lb, NULL) == 0);
		CHECK_MSG(fabs(la - lb) <= 1e-5 * fabs(lb), "step %d: staged %.7f, synchronous %.7f", s, la, lb);
	}
	CHECK(net_wait(a) == 0);
	for (int k = 0; k < 3; k++) {
		free(x[k]);
		free(y[k]);
	}
out:
	net_free(a);
	net_free(b);
}

/* Recomputing residual blocks' outputs as well (recompute 2) on the GPU, FP32 and bf16:
 * the same loss (forward is untouched), gradients as close as the BN+ReLU recompute's
 * (rounding across 0 at a ReLU, and in bf16 a second rounding of the recomputed sum),
 * and a smaller plan than recompute 1. Not yet run on a GPU when written (2026-11-22). */
TEST(cuda_recompute_blocks_matches_keeping_outputs)
{
	NEED_GPU();
	for (int amp = 0; amp <= 1; amp++) {
		struct net *a = build("resnet18", 64, 8, 10), *b = build("resnet18", 64, 8, 10);
		struct net *c = build("resnet18", 64, 8, 10);
		if (!a || !b || !c)
			return;
		enum precision p = amp ? PREC_BF16 : PREC_FP32;
		b->recompute = 1;
		c->recompute = 2;
		backend_cuda_set_conv_policy(0, 1);
		setenv("GPUPERF_CONV_WS_ARENA", "0", 1); /* activations only in the arenas */
		CHECK(net_setup(a, BACKEND_CUDA, GP_F32, p) == 0);
		CHECK(net_setup(b, BACKEND_CUDA, GP_F32, p) == 0);
		CHECK(net_setup(c, BACKEND_CUDA, GP_F32, p) == 0);
		unsetenv("GPUPERF_CONV_WS_ARENA");
		backend_cuda_set_conv_policy(0, 0);
		CHECK_MSG(c->plan.arena_bytes < b->plan.arena_bytes, "arena %zu recomputing blocks, %zu not",
			  c->plan.arena_bytes, b->plan.arena_bytes);
		float *x;
		int32_t *y;
		CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 6, &x, &y) == 0);
		CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(c, x, y) == 0);
		free(x);
		free(y);
		double la = 0, lc = 0;
		CHECK(net_forward(a, 1) == 0 && net_loss(a, &la, NULL) == 0 && net_backward(a) == 0);
		CHECK(net_forward(c, 1) == 0 && net_loss(c, &lc, NULL) == 0 && net_backward(c) == 0);
		CHECK_NEAR(la, lc, 1e-6 * fabs(la));
		size_t n = a->params_count;
		float *ga = malloc(n * sizeof(float)), *gc = malloc(n * sizeof(float));
		CHECK(net_grads_to_host(a, ga) == 0 && net_grads_to_host(c, gc) == 0);
		double e = rel_err_norm_f32(gc, ga, n);
		printf("      resnet18 %s: gradients %.2e from keeping the outputs\n", amp ? "bf16" : "fp32", e);
		CHECK_LE(e, amp ? 5e-2 : 1e-2);
		free(ga);
		free(gc);
		net_free(a);
		net_free(b);
		net_free(c);
	}
}

/* Recomputing BN+ReLU outputs in backward on the GPU: the same loss (forward is
 * untouched), gradients equal up to ReLU inputs that round across 0 (the recompute
 * kernel and cuDNN's batch norm round differently), and a smaller arena. */
TEST(cuda_recompute_matches_keeping_outputs)
{
	NEED_GPU();
	struct net *a = build("mobilenet_v2", 64, 8, 10), *b = build("mobilenet_v2", 64, 8, 10);
	if (!a || !b)
		goto out;
	b->recompute = 1;
	backend_cuda_set_conv_policy(0, 1);
	/* activations only in the arenas: at this small size the convolution workspaces
	 * (planned there by default) would weigh as much as the activations */
	setenv("GPUPERF_CONV_WS_ARENA", "0", 1);
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	unsetenv("GPUPERF_CONV_WS_ARENA");
	backend_cuda_set_conv_policy(0, 0);
	CHECK_MSG(b->plan.arena_bytes < 0.8 * a->plan.arena_bytes, "arena %zu with recompute, %zu without",
		  b->plan.arena_bytes, a->plan.arena_bytes);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 6, &x, &y) == 0);
	CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(b, x, y) == 0);
	free(x);
	free(y);
	double la = 0, lb = 0;
	CHECK(net_forward(a, 1) == 0 && net_loss(a, &la, NULL) == 0 && net_backward(a) == 0);
	CHECK(net_forward(b, 1) == 0 && net_loss(b, &lb, NULL) == 0 && net_backward(b) == 0);
	CHECK_NEAR(la, lb, 1e-6 * fabs(lb));
	size_t n = a->params_count;
	float *ga = malloc(n * sizeof(float)), *gb = malloc(n * sizeof(float));
	CHECK(net_grads_to_host(a, ga) == 0 && net_grads_to_host(b, gb) == 0);
	CHECK_LE(rel_err_norm_f32(gb, ga, n), 1e-2);
	free(ga);
	free(gb);
out:
	net_free(a);
	net_free(b);
}

/* Loss scaling on the GPU: an overflowing scale skips the step and backs off; a
 * power-of-two scale trains as without it. */
TEST(cuda_loss_scaling_skips_overflow)
{
	NEED_GPU();
	struct net *a = build("resnet18", 64, 4, 10), *b = build("resnet18", 64, 4, 10);
	if (!a || !b)
		goto out;
	backend_cuda_set_conv_policy(0, 1);
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	backend_cuda_set_conv_policy(0, 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(4, 3, 64, 64, 10, 9, &x, &y) == 0);
	CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(b, x, y) == 0);
	free(x);
	free(y);
	net_enable_loss_scaling(b);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	for (int s = 0; s < 2; s++) {
		CHECK(net_train_step(a, &sgd, NULL, NULL) == 0);
		CHECK(net_train_step(b, &sgd, NULL, NULL) == 0);
	}
	CHECK(net_sync_to_host(a) == 0 && net_sync_to_host(b) == 0);
	CHECK_LE(rel_err_norm_f32(b->host_params, a->host_params, a->params_count), 1e-6);
	/* a scale that overflows float: the scaled loss gradient is inf (3e38 alone may
	 * stay finite through a small net, and its reciprocal is a denormal) */
	b->scaler.scale = 1e300;
	int steps = b->sgd_steps;
	CHECK(net_train_step(b, &sgd, NULL, NULL) == 0);
	CHECK_EQ_INT(b->sgd_steps, steps);
	CHECK_EQ_INT(b->scaler.skipped_steps, 1);
out:
	net_free(a);
	net_free(b);
}

/* Mixed precision against FP32 on the same weights and batch: logits, loss, gradients
 * and parameters after 3 steps within 16-bit tolerances (issue 7 asks 2e-2 of
 * torchvision under autocast; FP32 is the nearer reference here), in both layouts,
 * and fp16 with loss scaling. */
static void check_amp(const char *model, enum precision prec, enum layout layout)
{
	const int size = strcmp(model, "simple_cnn") ? 64 : 32, batch = 8, classes = 10;
	struct net *f = build(model, size, batch, classes), *h = build(model, size, batch, classes);
	float *x = NULL, *gf = NULL, *gh = NULL, *lf = NULL, *lh = NULL;
	int32_t *y = NULL;
	if (!f || !h)
		goto out;
	h->layout = layout;
	int rc_f = net_setup(f, BACKEND_CUDA, GP_F32, PREC_FP32), rc_h = net_setup(h, BACKEND_CUDA, GP_F32, prec);
	CHECK_MSG(rc_f == 0 && rc_h == 0, "%s: %s", model, gp_errmsg());
	if (rc_f || rc_h)
		goto out;
	if (prec == PREC_FP16) {
		/* a moderate scale: at 2^16 the first steps of a fresh net overflow fp16, and
		 * GradScaler would skip them (the overflow path has its own test) */
		net_enable_loss_scaling(h);
		h->scaler.scale = 256;
	}
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, 5, &x, &y) == 0);
	CHECK(net_set_batch_data(f, x, y) == 0 && net_set_batch_data(h, x, y) == 0);
	double loss_f = 0, loss_h = 0;
	size_t nl = (size_t)batch * classes, np = f->params_count;
	lf = malloc(nl * sizeof(float));
	lh = malloc(nl * sizeof(float));
	gf = malloc(np * sizeof(float));
	gh = malloc(np * sizeof(float));
	/* logits before backward: their memory is reused there */
	CHECK(net_forward(f, 1) == 0 && net_loss(f, &loss_f, NULL) == 0 && net_logits_to_host(f, lf) == 0);
	CHECK_MSG(net_forward(h, 1) == 0 && net_loss(h, &loss_h, NULL) == 0 && net_logits_to_host(h, lh) == 0,
		  "%s: %s", model, gp_errmsg());
	CHECK(net_backward(f) == 0 && net_backward(h) == 0);
	CHECK(net_grads_to_host(f, gf) == 0 && net_grads_to_host(h, gh) == 0);
	if (prec == PREC_FP16) /* the gradients are still scaled until the optimizer step */
		for (size_t i = 0; i < np; i++)
			gh[i] /= (float)h->scaler.scale;
	double e_logits = dist(lh, lf, nl), e_grads = dist(gh, gf, np);
	double e_loss = fabs(loss_h - loss_f) / fabs(loss_f);
	printf("      %s %s %s: logits %.2e loss %.2e grads %.2e", model, train_precision_name(prec),
	       layout == LAYOUT_NCHW ? "nchw" : "nhwc", e_logits, e_loss, e_grads);
	/* Gradients of batch-norm nets at init are ill-conditioned (ReLU masks flip on
	 * values within rounding of 0, which 16 bits make common): printed, and held only
	 * to "the same gradient" (a wrong layout or a missing term gives >= 1). */
	int bn_net = strcmp(model, "simple_cnn") != 0;
	if (bn_net) { /* tests/torch/parity.py --amp shows PyTorch's autocast as far from FP32 */
		CHECK_MSG(e_loss <= 5e-2 && isfinite(e_logits) && isfinite(e_grads), "%s: loss %.3g, logits %.3g, grads %.3g",
			  model, e_loss, e_logits, e_grads);
	} else {
		CHECK_MSG(e_logits <= 1e-2 && e_loss <= 1e-2, "%s: logits %.3g, loss %.3g", model, e_logits, e_loss);
		CHECK_MSG(e_grads <= 1e-1, "%s: gradients %.3g", model, e_grads);
	}
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	CHECK(net_sgd_step(f, &sgd) == 0 && net_sgd_step(h, &sgd) == 0);
	for (int s = 0; s < 2; s++) {
		CHECK(net_train_step(f, &sgd, NULL, NULL) == 0);
		CHECK(net_train_step(h, &sgd, NULL, NULL) == 0);
	}
	CHECK(net_sync_to_host(f) == 0 && net_sync_to_host(h) == 0);
	double e_params = dist(h->host_params, f->host_params, np);
	printf(" params after 3 steps %.2e\n", e_params);
	/* ResNet-50 is the chaotic one: at tests/torch/parity.py's settings PyTorch's own
	 * autocast ends 3 steps 1.28 (relative norm) away from its FP32 parameters (H100,
	 * docs/PERF.md); ours moves 0.13 from FP32 here. The others hold the 2e-2. */
	double p_tol = !bn_net ? 1e-3 : strcmp(model, "resnet50") ? 2e-2 : 0.5;
	CHECK_MSG(e_params <= p_tol, "%s: parameters after 3 steps %.3g", model, e_params);
	CHECK_EQ_INT(h->scaler.skipped_steps, 0);
out:
	free(x);
	free(y);
	free(lf);
	free(lh);
	free(gf);
	free(gh);
	net_free(f);
	net_free(h);
}

TEST(cuda_amp_bf16_matches_fp32)
{
	NEED_GPU();
	const char *models[] = { "simple_cnn", "resnet18", "resnet50", "mobilenet_v2" };
	for (int m = 0; m < 4; m++)
		check_amp(models[m], PREC_BF16, LAYOUT_AUTO);
	check_amp("resnet18", PREC_BF16, LAYOUT_NCHW);
}

TEST(cuda_amp_fp16_matches_fp32)
{
	NEED_GPU();
	check_amp("resnet18", PREC_FP16, LAYOUT_AUTO);
	check_amp("mobilenet_v2", PREC_FP16, LAYOUT_NCHW);
}

struct grad_rec {
	float **ref;
	double worst;
	int first, worst_node;
	int forward; /* node outputs after forward, else input gradients after backward */
};

/* The tensor a record looks at: the node's output, or its input's gradient. */
static int rec_tensor(const struct grad_rec *r, const struct net *net, int node, enum net_phase phase,
		      int *t_node)
{
	const struct node *nd = &net->nodes[node];
	if (node < 0 || phase != (r->forward ? PHASE_FORWARD : PHASE_BACKWARD))
		return 0;
	if (r->forward) {
		*t_node = node;
		return nd->op != OP_INPUT;
	}
	*t_node = nd->n_in ? nd->in[0] : -1;
	return nd->n_in && nd->op != OP_INPUT;
}

static void grad_keep(void *user, const struct net *net, int node, enum net_phase phase)
{
	struct grad_rec *r = user;
	int t;
	if (!rec_tensor(r, net, node, phase, &t))
		return;
	size_t n = shape_numel(net->nodes[t].out);
	r->ref[node] = malloc(n * sizeof(float));
	if (r->ref[node] && net_tensor_to_host((struct net *)net, t, !r->forward, r->ref[node]) < 0) {
		gp_error_clear();
		free(r->ref[node]);
		r->ref[node] = NULL;
	}
}

static void grad_compare(void *user, const struct net *net, int node, enum net_phase phase)
{
	struct grad_rec *r = user;
	int t;
	if (!rec_tensor(r, net, node, phase, &t) || !r->ref[node])
		return;
	size_t n = shape_numel(net->nodes[t].out);
	float *b = malloc(n * sizeof(float));
	if (b && net_tensor_to_host((struct net *)net, t, !r->forward, b) == 0) {
		double e = rel_err_norm_f32(b, r->ref[node], n);
		if (e > 1e-2 && r->first < 0)
			r->first = node;
		if (e > r->worst) {
			r->worst = e;
			r->worst_node = node;
		}
	}
	gp_error_clear();
	free(b);
}

/* Where mixed precision departs from FP32, node by node (resnet18 and mobilenet_v2),
 * printing the first node past 1e-2 in each direction and the worst. Rounding to 8
 * bits compounds with depth (and PyTorch's autocast does the same, see docs/PERF.md),
 * so only the stem must stay within 1e-2, the rest within 0.5 forward, and gradients
 * finite and not uncorrelated (2 would be opposite). */
static void amp_node_by_node(const char *model, enum precision prec)
{
	const int size = 64, batch = 8, classes = 10;
	struct net *f = build(model, size, batch, classes), *h = build(model, size, batch, classes);
	float *x = NULL, *a = NULL, *b = NULL;
	int32_t *y = NULL;
	if (!f || !h)
		goto out;
	/* node by node: each node computes its own output (no batch norm fused with the
	 * ReLU after it; cuda_amp_fused_batch_norm checks the fused ops) */
	setenv("GPUPERF_BN_FUSE", "0", 1);
	int rc_f = net_setup(f, BACKEND_CUDA, GP_F32, PREC_FP32), rc_h = net_setup(h, BACKEND_CUDA, GP_F32, prec);
	unsetenv("GPUPERF_BN_FUSE");
	CHECK_MSG(rc_f == 0 && rc_h == 0, "%s: %s", model, gp_errmsg());
	if (rc_f || rc_h)
		goto out;
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, 5, &x, &y) == 0);
	CHECK(net_set_batch_data(f, x, y) == 0 && net_set_batch_data(h, x, y) == 0);
	size_t cap = 0;
	for (int i = 0; i < f->n_nodes; i++)
		cap = shape_numel(f->nodes[i].out) > cap ? shape_numel(f->nodes[i].out) : cap;
	a = malloc(cap * sizeof(float));
	b = malloc(cap * sizeof(float));
	/* forward outputs, each read right after its node (later nodes may reuse the
	 * memory), FP32's kept on the host, then compared */
	struct grad_rec fr = { .ref = calloc((size_t)f->n_nodes, sizeof(float *)), .first = -1, .worst_node = -1,
			       .forward = 1 };
	f->hooks = (struct net_hooks){ .node_end = grad_keep, .user = &fr };
	h->hooks = (struct net_hooks){ .node_end = grad_compare, .user = &fr };
	CHECK(net_forward(f, 1) == 0 && net_forward(h, 1) == 0);
	double worst_f = fr.worst;
	int first_f = fr.first, worst_node = fr.worst_node;
	for (int i = 0; i < f->n_nodes; i++)
		free(fr.ref[i]);
	free(fr.ref);
	char l1[96], l2[96];
	printf("      %s %s forward: first > 1e-2 at %s, worst %.2e at %s\n", model, train_precision_name(prec),
	       first_f < 0 ? "-" : net_node_label(f, first_f, l1, sizeof(l1)), worst_f,
	       worst_node < 0 ? "-" : net_node_label(f, worst_node, l2, sizeof(l2)));
	/* the stem is one convolution from the input: 16-bit rounding only */
	CHECK_MSG(first_f < 0 || first_f > 2, "%s: forward error above 1e-2 already at node %d", model, first_f);
	CHECK_MSG(worst_f <= 0.5, "%s: forward output %.3g", model, worst_f);
	/* gradients: each node's input gradient right after its backward (later nodes'
	 * backward reuses the memory), FP32's kept on the host, then compared */
	struct grad_rec rec = { .ref = calloc((size_t)f->n_nodes, sizeof(float *)), .first = -1, .worst_node = -1 };
	CHECK(net_loss(f, NULL, NULL) == 0 && net_loss(h, NULL, NULL) == 0);
	f->hooks = (struct net_hooks){ .node_end = grad_keep, .user = &rec };
	h->hooks = (struct net_hooks){ .node_end = grad_compare, .user = &rec };
	CHECK(net_backward(f) == 0 && net_backward(h) == 0);
	double worst_g = rec.worst;
	int first_g = rec.first, worst_g_node = rec.worst_node;
	for (int i = 0; i < f->n_nodes; i++)
		free(rec.ref[i]);
	free(rec.ref);
	f->hooks = h->hooks = (struct net_hooks){ 0 };
	printf("      %s %s backward (input gradient of): first > 1e-2 at %s, worst %.2e at %s\n", model,
	       train_precision_name(prec), first_g < 0 ? "-" : net_node_label(f, first_g, l1, sizeof(l1)), worst_g,
	       worst_g_node < 0 ? "-" : net_node_label(f, worst_g_node, l2, sizeof(l2)));
	CHECK_MSG(worst_g <= 2 && isfinite(worst_g), "%s: gradient %.3g", model, worst_g);
out:
	free(x);
	free(y);
	free(a);
	free(b);
	net_free(f);
	net_free(h);
}

TEST(cuda_amp_node_by_node)
{
	NEED_GPU();
	amp_node_by_node("resnet18", PREC_BF16);
	amp_node_by_node("mobilenet_v2", PREC_BF16);
}

/* Batch norm fused with the ReLU (resnet: and the residual add) after it, through
 * cuDNN's Ex calls (bf16 NHWC, the default), against the separate ops: same weights
 * and batch, each beside FP32. Two bf16 runs that round differently (the fused op
 * does not round the value before the ReLU or the add) drift apart in these
 * ill-conditioned nets at init as far as bf16 drifts from FP32 (resnet50: logits 0.2
 * between them, 0.37 from FP32), so the fused net is held to the separate ops' own
 * distance from FP32: at most 1.5 times it (plus a 1e-2 floor) for the loss, logits
 * and gradients after one step and for the parameters and running statistics after
 * three (eager, then graph replays). A wrong mask, residual or statistic is O(1). */
static double near_as(double fused, double separate)
{
	return 1.5 * separate + 1e-2 - fused;
}

static void check_fused_bn(const char *model, int must_fuse)
{
	const int size = 64, batch = 8, classes = 10;
	struct net *nets[3] = { build(model, size, batch, classes), build(model, size, batch, classes),
				build(model, size, batch, classes) };
	struct net *f = nets[0], *a = nets[1], *b = nets[2]; /* FP32, fused, separate */
	float *x = NULL, *l[3] = { 0 }, *gr[3] = { 0 };
	int32_t *y = NULL;
	if (!f || !a || !b)
		goto out;
	int rc_f = net_setup(f, BACKEND_CUDA, GP_F32, PREC_FP32), rc_a = net_setup(a, BACKEND_CUDA, GP_F32, PREC_BF16);
	setenv("GPUPERF_BN_FUSE", "0", 1);
	int rc_b = net_setup(b, BACKEND_CUDA, GP_F32, PREC_BF16);
	unsetenv("GPUPERF_BN_FUSE");
	CHECK_MSG(rc_f == 0 && rc_a == 0 && rc_b == 0, "%s: %s", model, gp_errmsg());
	if (rc_f || rc_a || rc_b)
		goto out;
	int fused = 0, reserve = 0;
	for (int i = 0; i < a->n_nodes; i++) {
		fused += a->nodes[i].op == OP_BATCHNORM2D && a->nodes[i].rsv_last > 0;
		reserve += a->nodes[i].t_rsv >= 0;
		CHECK_EQ_INT(b->nodes[i].rsv_last, 0);
	}
	printf("      %s: %d batch norms fused (%d with reserve space)\n", model, fused, reserve);
	CHECK_MSG(fused > 0 || !must_fuse, "%s: no batch norm fused (cuDNN declined every one)", model);
	if (!fused) /* mobilenet_v2's ReLU6, where cuDNN does not fuse it: the separate ops run */
		goto out;
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, 5, &x, &y) == 0);
	size_t nl = (size_t)batch * classes, np = f->params_count;
	double loss[3];
	for (int k = 0; k < 3; k++) {
		l[k] = malloc(nl * sizeof(float));
		gr[k] = malloc(np * sizeof(float));
		CHECK(net_set_batch_data(nets[k], x, y) == 0);
		CHECK(net_forward(nets[k], 1) == 0 && net_loss(nets[k], &loss[k], NULL) == 0 &&
		      net_logits_to_host(nets[k], l[k]) == 0);
		CHECK(net_backward(nets[k]) == 0 && net_grads_to_host(nets[k], gr[k]) == 0);
	}
	double el[2], eg[2], eL[2];
	for (int k = 0; k < 2; k++) {
		eL[k] = fabs(loss[k + 1] - loss[0]) / fabs(loss[0]);
		el[k] = dist(l[k + 1], l[0], nl);
		eg[k] = dist(gr[k + 1], gr[0], np);
	}
	printf("      %s from FP32, fused / separate: loss %.2e / %.2e, logits %.2e / %.2e, grads %.2e / %.2e\n",
	       model, eL[0], eL[1], el[0], el[1], eg[0], eg[1]);
	CHECK_MSG(near_as(eL[0], eL[1]) >= 0, "%s: fused loss %.3g from FP32 against %.3g", model, eL[0], eL[1]);
	CHECK_MSG(near_as(el[0], el[1]) >= 0, "%s: fused logits %.3g from FP32 against %.3g", model, el[0], el[1]);
	CHECK_MSG(near_as(eg[0], eg[1]) >= 0, "%s: fused gradients %.3g from FP32 against %.3g", model, eg[0], eg[1]);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	for (int k = 0; k < 3; k++) {
		CHECK(net_sgd_step(nets[k], &sgd) == 0);
		for (int s = 0; s < 2; s++)
			CHECK(net_train_step(nets[k], &sgd, NULL, NULL) == 0);
		CHECK(net_sync_to_host(nets[k]) == 0);
	}
	double ep[2], er[2];
	for (int k = 0; k < 2; k++) {
		ep[k] = dist(nets[k + 1]->host_params, f->host_params, np);
		er[k] = dist(nets[k + 1]->host_running, f->host_running, f->running_count);
	}
	printf("      %s after 3 steps, fused / separate: params %.2e / %.2e, running %.2e / %.2e\n", model, ep[0],
	       ep[1], er[0], er[1]);
	CHECK_MSG(near_as(ep[0], ep[1]) >= 0, "%s: fused parameters %.3g from FP32 against %.3g", model, ep[0], ep[1]);
	CHECK_MSG(near_as(er[0], er[1]) >= 0, "%s: fused running statistics %.3g from FP32 against %.3g", model,
		  er[0], er[1]);
out:
	free(x);
	free(y);
	for (int k = 0; k < 3; k++) {
		free(l[k]);
		free(gr[k]);
		net_free(nets[k]);
	}
}

TEST(cuda_amp_fused_batch_norm)
{
	NEED_GPU();
	check_fused_bn("resnet18", 1);
	check_fused_bn("resnet50", 1);
	check_fused_bn("mobilenet_v2", 1); /* ReLU6 folded into the depthwise convolutions */
}

/* Convolution workspaces planned into the arena (the default) train as the
 * shared workspace does: same loss and logits, and the arena holds the workspaces. */
TEST(cuda_conv_workspace_in_arena)
{
	NEED_GPU();
	const int size = 64, batch = 8, classes = 10;
	struct net *a = build("resnet18", size, batch, classes), *b = build("resnet18", size, batch, classes);
	float *x = NULL, *la = NULL, *lb = NULL;
	int32_t *y = NULL;
	if (!a || !b)
		goto out;
	backend_cuda_set_conv_policy(1, 1);
	int rc_a = net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32);
	setenv("GPUPERF_CONV_WS_ARENA", "0", 1); /* one shared workspace */
	int rc_b = net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32);
	unsetenv("GPUPERF_CONV_WS_ARENA");
	backend_cuda_set_conv_policy(0, 0);
	CHECK_MSG(rc_a == 0 && rc_b == 0, "%s", gp_errmsg());
	if (rc_a || rc_b)
		goto out;
	int planned = 0;
	for (int i = 0; i < a->n_nodes; i++)
		planned += a->nodes[i].t_wsf >= 0 || a->nodes[i].t_wsb >= 0;
	printf("      %d convolutions with workspace in the arena; arena %.1f MiB against %.1f MiB\n", planned,
	       a->plan.arena_bytes / 1048576.0, b->plan.arena_bytes / 1048576.0);
	CHECK(a->plan.arena_bytes >= b->plan.arena_bytes);
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, 5, &x, &y) == 0);
	CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(b, x, y) == 0);
	size_t nl = (size_t)batch * classes;
	la = malloc(nl * sizeof(float));
	lb = malloc(nl * sizeof(float));
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	double loss_a = 0, loss_b = 0;
	for (int s = 0; s < 3; s++) { /* eager, then graph replays */
		CHECK(net_train_step(a, &sgd, &loss_a, NULL) == 0);
		CHECK(net_train_step(b, &sgd, &loss_b, NULL) == 0);
	}
	CHECK_NEAR(loss_a, loss_b, 1e-4 * fabs(loss_b));
	CHECK(net_forward(a, 0) == 0 && net_forward(b, 0) == 0);
	CHECK(net_logits_to_host(a, la) == 0 && net_logits_to_host(b, lb) == 0);
	CHECK_LE(dist(la, lb, nl), 1e-4);
out:
	free(x);
	free(y);
	free(la);
	free(lb);
	net_free(a);
	net_free(b);
}
