/* The CUDA backend at the model level: every model against the CPU double reference,
 * out-of-memory as an ordinary error, parity with PyTorch (tests/torch/parity.py),
 * graphs, staging, recompute and workspaces. Mixed precision: test_cuda_net_amp.c. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "backend/backend.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "ops/cuda/device.h"
#include "../test.h"
#include "net_util.h"

/* One training step on the GPU in FP32 against the CPU in double, with two other FP32
 * paths beside it as yardsticks: the CPU in float, and the GPU with cuDNN's batch norm
 * and separate activation kernels (tuning.test.bn_fuse = bn_own = 0). At init on
 * random data, batch-norm networks amplify rounding (PyTorch's own FP32 gradients differ
 * from float64 by up to 2e-2 on ResNet-50, see docs/log/perf-log.md; a ReLU input that rounds
 * across 0 in ResNet-50's last stage at batch 4, 16 values per channel, moves that
 * channel's gradient by a quarter), so the GPU must be as close to the double result as
 * the closer-to-double yardstick's error allows (three times the larger of the two), and
 * within 1e-5 where the problem is well conditioned. Loss and logits, every gradient,
 * parameters and running statistics after the step. */
static double worse(double a, double b)
{
	return a > b ? a : b;
}

static void check_against_cpu(const char *name, int size, int batch)
{
	struct net *g = build(name, size, batch, 10), *c = build(name, size, batch, 10);
	struct net *f = build(name, size, batch, 10), *s = build(name, size, batch, 10);
	if (!g || !c || !f || !s)
		goto out;
	/* faithful FP32: direct summation, as the CPU does */
	backend_cuda_set_conv_policy(g, 1, 1);
	backend_cuda_set_conv_policy(s, 1, 1);
	CHECK_MSG(net_setup(g, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	s->tuning.test.bn_fuse = 0;
	s->tuning.test.bn_own = 0;
	CHECK_MSG(net_setup(s, BACKEND_CUDA, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	CHECK(net_setup(c, BACKEND_CPU, GP_F64, PREC_FP32) == 0);
	CHECK(net_setup(f, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	float *x;
	int32_t *y;
	CHECK(train_synthetic_batch(batch, 3, size, size, 10, 5, &x, &y) == 0);
	CHECK(net_set_batch_data(g, x, y) == 0 && net_set_batch_data(c, x, y) == 0 &&
	      net_set_batch_data(f, x, y) == 0 && net_set_batch_data(s, x, y) == 0);
	free(x);
	free(y);
	size_t n = g->params_count, nl = (size_t)batch * 10;
	float *gv = malloc(n * sizeof(float)), *cv = malloc(n * sizeof(float)), *fv = malloc(n * sizeof(float));
	float *sv = malloc(n * sizeof(float)), *sl = malloc(nl * sizeof(float));
	float *gl = malloc(nl * sizeof(float)), *cl = malloc(nl * sizeof(float)), *fl = malloc(nl * sizeof(float));
	double lg, lc, lf, ls;
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4 };
	CHECK(net_forward(g, 1) == 0 && net_loss(g, &lg, NULL) == 0 && net_logits_to_host(g, gl) == 0);
	CHECK(net_forward(c, 1) == 0 && net_loss(c, &lc, NULL) == 0 && net_logits_to_host(c, cl) == 0);
	CHECK(net_forward(f, 1) == 0 && net_loss(f, &lf, NULL) == 0 && net_logits_to_host(f, fl) == 0);
	CHECK(net_forward(s, 1) == 0 && net_loss(s, &ls, NULL) == 0 && net_logits_to_host(s, sl) == 0);
	double tol_l = fmax(1e-5, 3 * worse(fabs(lf - lc), fabs(ls - lc)) / fabs(lc));
	CHECK_MSG(fabs(lg - lc) <= tol_l * fabs(lc), "%s loss %.8f vs %.8f (float CPU %.8f, cuDNN batch norm %.8f)",
		  name, lg, lc, lf, ls);
	double e_logits = dist(gl, cl, nl), tol_logits = fmax(2e-5, 3 * worse(dist(fl, cl, nl), dist(sl, cl, nl)));
	CHECK_MSG(e_logits <= tol_logits, "%s logits error %.3g > %.3g", name, e_logits, tol_logits);
	CHECK(net_backward(g) == 0 && net_backward(c) == 0 && net_backward(f) == 0 && net_backward(s) == 0);
	CHECK(net_grads_to_host(g, gv) == 0 && net_grads_to_host(c, cv) == 0 && net_grads_to_host(f, fv) == 0 &&
	      net_grads_to_host(s, sv) == 0);
	/* gradients: a ReLU input within rounding of 0 can flip between implementations
	 * and move the gradient by ~1/sqrt(elements) (see cuda_net_node_by_node) */
	double e_grad = dist(gv, cv, n), tol_grad = fmax(1e-2, 3 * worse(dist(fv, cv, n), dist(sv, cv, n)));
	printf("      %s gradients against double: GPU %.3g, float CPU %.3g, GPU with cuDNN batch norm %.3g\n", name,
	       e_grad, dist(fv, cv, n), dist(sv, cv, n));
	CHECK_MSG(e_grad <= tol_grad, "%s gradient error %.3g > %.3g", name, e_grad, tol_grad);
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
	CHECK(net_sgd_step(g, &sgd) == 0 && net_sgd_step(c, &sgd) == 0 && net_sgd_step(f, &sgd) == 0 &&
	      net_sgd_step(s, &sgd) == 0);
	CHECK(net_sync_to_host(g) == 0 && net_sync_to_host(c) == 0 && net_sync_to_host(f) == 0 &&
	      net_sync_to_host(s) == 0);
	double e_p = dist(g->host_params, c->host_params, n);
	double tol_p = fmax(1e-4, 3 * worse(dist(f->host_params, c->host_params, n), dist(s->host_params, c->host_params, n)));
	CHECK_MSG(e_p <= tol_p, "%s parameters after a step: error %.3g > %.3g", name, e_p, tol_p);
	size_t nr = g->running_count;
	double e_r = dist(g->host_running, c->host_running, nr);
	double tol_r = fmax(1e-5, 3 * worse(dist(f->host_running, c->host_running, nr),
					    dist(s->host_running, c->host_running, nr)));
	CHECK_MSG(e_r <= tol_r, "%s running statistics: error %.3g > %.3g", name, e_r, tol_r);
	free(gv);
	free(cv);
	free(fv);
	free(sv);
	free(gl);
	free(cl);
	free(fl);
	free(sl);
out:
	net_free(g);
	net_free(c);
	net_free(f);
	net_free(s);
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
 * device memory afterwards equals what it was before, within 1 MiB. The net that cannot
 * fit is resnet50 FP32 at 224 with 1,536 images (about 130 GB) per 80 GB of the device's
 * memory: a fixed 1,536 fit on a 141 GB H200 (s19-10). */
static int oom_batch(void)
{
	size_t f = 0, total = 0;
	if (cuda_mem_info(&f, &total) < 0)
		return 1536;
	double per80 = (double)total / 80e9;
	return 1536 * (int)(per80 < 1 ? 1 : per80 + 0.999);
}

TEST(cuda_net_out_of_memory_is_recoverable)
{
	NEED_GPU();
	struct net *small = build("resnet50", 64, 2, 10);
	CHECK(net_setup(small, BACKEND_CUDA, GP_F32, PREC_FP32) == 0); /* context and handles exist now */
	net_teardown(small);
	size_t free0, total, free1, free_mid;
	int big_n = oom_batch();
	/* One failed set-up first: CUDA loads kernel code lazily, on first launch, into
	 * device memory that stays for the process; measuring the big shapes launches
	 * kernels nothing else uses. That is not a leak, so it happens before free0. */
	struct net *warm = build("resnet50", 224, big_n, 1000);
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
		struct net *big = build("resnet50", 224, big_n, 1000); /* about 130 GB per 80 */
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

/* The PyTorch side runs where torch with CUDA is installed (the GPU machine). Twice:
 * the default kernels, judged by parity.py (within 1e-4, or for the batch-norm nets as
 * close to float64 as PyTorch's own FP32 result); and with PyTorch's batch-norm kernels
 * (cuDNN's, unfused: parity --plain-bn), where the first step's
 * logits, loss and gradients (all parameters together) must be within 1e-4 of
 * PyTorch's for every model. */
TEST(cuda_parity_with_pytorch)
{
	NEED_GPU();
	char out[16384];
	if (test_run("python3 -c 'import torch, torchvision, safetensors; assert torch.cuda.is_available()'",
		     out, sizeof(out)) != 0)
		SKIP("python3 with torch, torchvision, safetensors and CUDA is not available");
	char cmd[1024], json[600];
	snprintf(json, sizeof(json), "%s/parity_same_bn.json", test_tmpdir());
	for (int same_bn = 0; same_bn <= 1; same_bn++) {
		snprintf(cmd, sizeof(cmd), "python3 tests/torch/parity.py --bin %s --device cuda --ref64%s%s",
			 test_bin(), same_bn ? " --plain-bn --json " : "", same_bn ? json : "");
		int rc = test_run(cmd, out, sizeof(out));
		printf("%s%s", same_bn ? "      with cuDNN's batch norm, unfused:\n" : "", out);
		CHECK_MSG(rc == 0, "parity.py exited %d", rc);
	}
	json_error_t err;
	json_t *root = json_load_file(json, 0, &err);
	CHECK_MSG(root != NULL, "%s: %s", json, err.text);
	const char *model, *keys[] = { "logits", "loss", "grad_all" };
	json_t *r;
	int models = 0;
	json_object_foreach(root, model, r) {
		models++;
		for (int k = 0; k < 3; k++) {
			double v = json_number_value(json_object_get(r, keys[k]));
			CHECK_MSG(json_is_number(json_object_get(r, keys[k])) && v <= 1e-4,
				  "%s %s %.3g from PyTorch's with the same batch-norm kernels", model, keys[k], v);
		}
	}
	CHECK_EQ_INT(models, 4);
	json_decref(root);
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
	backend_cuda_set_conv_policy(a, 0, 1); /* same sums on every run */
	backend_cuda_set_conv_policy(b, 0, 1);
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	same_batch(a, b, 8, 64, 10, 2);
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
		/* separate ops: a fused batch norm's output is act(bn(x)), not the CPU node's
		 * bn(x) (the fused path is checked against the double reference by
		 * check_against_cpu and against these ops by cuda_fp32_fused_batch_norm_*) */
		backend_cuda_set_conv_policy(g, 1, 1);
		g->tuning.test.bn_fuse = 0;
		CHECK(net_setup(g, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
		CHECK(net_setup(c, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
		same_batch(g, c, 8, 64, 10, 5);
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
	backend_cuda_set_conv_policy(a, 0, 1);
	backend_cuda_set_conv_policy(b, 0, 1);
	a->use_graphs = b->use_graphs = 1;
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
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

/* One forward, loss and backward on each of two nets with the same batch: their losses,
 * and b's gradients' distance from a's. */
static double step_both(struct net *a, struct net *b, double *la, double *lb)
{
	CHECK(net_forward(a, 1) == 0 && net_loss(a, la, NULL) == 0 && net_backward(a) == 0);
	CHECK(net_forward(b, 1) == 0 && net_loss(b, lb, NULL) == 0 && net_backward(b) == 0);
	size_t n = a->params_count;
	float *ga = malloc(n * sizeof(float)), *gb = malloc(n * sizeof(float));
	double e = 1.0;
	CHECK(ga && gb);
	if (ga && gb) {
		CHECK(net_grads_to_host(a, ga) == 0 && net_grads_to_host(b, gb) == 0);
		e = rel_err_norm_f32(gb, ga, n);
	}
	free(ga);
	free(gb);
	return e;
}

/* Recomputing residual blocks' outputs as well (recompute 2) on the GPU, FP32 and bf16:
 * the same loss (forward is untouched), gradients as close as the BN+ReLU recompute's
 * (rounding across 0 at a ReLU), and a smaller plan than recompute 1. */
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
		backend_cuda_set_conv_policy(a, 0, 1);
		backend_cuda_set_conv_policy(b, 0, 1);
		backend_cuda_set_conv_policy(c, 0, 1);
		a->tuning.test.conv_ws_arena = 0; /* activations only in the arenas */
		b->tuning.test.conv_ws_arena = 0;
		c->tuning.test.conv_ws_arena = 0;
		CHECK(net_setup(a, BACKEND_CUDA, GP_F32, p) == 0);
		CHECK(net_setup(b, BACKEND_CUDA, GP_F32, p) == 0);
		CHECK(net_setup(c, BACKEND_CUDA, GP_F32, p) == 0);
		CHECK_MSG(c->plan.arena_bytes < b->plan.arena_bytes, "arena %zu recomputing blocks, %zu not",
			  c->plan.arena_bytes, b->plan.arena_bytes);
		same_batch(a, c, 8, 64, 10, 6);
		double la = 0, lc = 0, e = step_both(a, c, &la, &lc);
		CHECK_NEAR(la, lc, 1e-6 * fabs(la));
		printf("      resnet18 %s: gradients %.2e from keeping the outputs\n", amp ? "bf16" : "fp32", e);
		CHECK_LE(e, amp ? 5e-2 : 1e-2);
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
	backend_cuda_set_conv_policy(a, 0, 1);
	backend_cuda_set_conv_policy(b, 0, 1);
	/* activations only in the arenas: at this small size the convolution workspaces
	 * (planned there by default) would weigh as much as the activations */
	a->tuning.test.conv_ws_arena = 0;
	b->tuning.test.conv_ws_arena = 0;
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK_MSG(b->plan.arena_bytes < 0.8 * a->plan.arena_bytes, "arena %zu with recompute, %zu without",
		  b->plan.arena_bytes, a->plan.arena_bytes);
	same_batch(a, b, 8, 64, 10, 6);
	double la = 0, lb = 0, e = step_both(a, b, &la, &lb);
	CHECK_NEAR(la, lb, 1e-6 * fabs(lb));
	CHECK_LE(e, 1e-2);
out:
	net_free(a);
	net_free(b);
}

/* FP32 batch norms fused with the ReLU (ReLU6) after them, and residual blocks' last
 * batch norm with the add and ReLU, on the own kernels (the default), against the
 * separate cuDNN batch norm and element-wise kernels (tuning.test.bn_fuse = bn_own = 0), both measured
 * against the CPU in double: loss, logits, gradients, and parameters and running
 * statistics after 3 steps. Batch-norm networks at init amplify rounding, and a ReLU
 * input that rounds across 0 moves its channel's gradient (see check_against_cpu), so
 * two FP32 paths that round differently differ from double by different amounts; the
 * fused path must be as close to double as the separate one within the same factor as
 * there (3x), or 1e-5 / 1e-4 where both are closer. ResNet-18 has every fused form:
 * BN + ReLU, a block's last BN + add + ReLU, and the downsample's plain BN. */
static void fused_close(const char *what, const char *model, double e_fused, double e_sep, double floor)
{
	printf("      %s %s against double: fused %.2e, separate %.2e\n", model, what, e_fused, e_sep);
	CHECK_MSG(e_fused <= fmax(floor, 3 * e_sep), "%s %s: fused %.3g, separate %.3g (from double)", model,
		  what, e_fused, e_sep);
}

TEST(cuda_fp32_fused_batch_norm_matches_separate)
{
	NEED_GPU();
	const char *models[] = { "resnet18", "mobilenet_v2" };
	for (int m = 0; m < 2; m++) {
		struct net *nets[3] = { build(models[m], 64, 8, 10), build(models[m], 64, 8, 10),
					build(models[m], 64, 8, 10) };
		struct net *a = nets[0], *b = nets[1], *c = nets[2];
		size_t nl = 8 * 10, n = a ? a->params_count : 0;
		float *l[3] = { NULL }, *g[3] = { NULL };
		double loss[3] = { 0 };
		if (!a || !b || !c)
			goto next;
		CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
		b->tuning.test.bn_fuse = 0;
		b->tuning.test.bn_own = 0;
		CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
		CHECK(net_setup(c, BACKEND_CPU, GP_F64, PREC_FP32) == 0);
		int fused = 0, bns = 0;
		for (int i = 0; i < a->n_nodes; i++) {
			bns += a->nodes[i].op == OP_BATCHNORM2D;
			fused += a->nodes[i].op == OP_BATCHNORM2D && a->scratch[i].keep_last > 0;
			CHECK_EQ_INT(b->scratch[i].keep_last, 0);
		}
		printf("      %s fp32: %d of %d batch norms fused\n", models[m], fused, bns);
		/* resnet18: all but the 3 downsample ones; mobilenet_v2: those before a ReLU6 */
		CHECK_MSG(fused >= bns / 2, "%s: only %d of %d batch norms fused", models[m], fused, bns);
		float *x = NULL;
		int32_t *y = NULL;
		CHECK(train_synthetic_batch(8, 3, 64, 64, 10, 6, &x, &y) == 0);
		for (int k = 0; k < 3 && x && y; k++)
			CHECK(net_set_batch_data(nets[k], x, y) == 0);
		free(x);
		free(y);
		for (int k = 0; k < 3; k++) {
			l[k] = malloc(nl * sizeof(float));
			g[k] = malloc(n * sizeof(float));
			CHECK(l[k] && g[k]);
			if (!l[k] || !g[k])
				goto next;
			/* logits before backward: the loss's backward may write over them */
			CHECK(net_forward(nets[k], 1) == 0 && net_loss(nets[k], &loss[k], NULL) == 0 &&
			      net_logits_to_host(nets[k], l[k]) == 0);
			CHECK(net_backward(nets[k]) == 0 && net_grads_to_host(nets[k], g[k]) == 0);
		}
		printf("      %s fp32 fused against separate: loss %.2e, logits %.2e, gradients %.2e\n", models[m],
		       fabs(loss[0] - loss[1]) / fabs(loss[1]), dist(l[0], l[1], nl), dist(g[0], g[1], n));
		fused_close("loss", models[m], fabs(loss[0] - loss[2]) / fabs(loss[2]),
			    fabs(loss[1] - loss[2]) / fabs(loss[2]), 1e-5);
		fused_close("logits", models[m], dist(l[0], l[2], nl), dist(l[1], l[2], nl), 1e-5);
		fused_close("gradients", models[m], dist(g[0], g[2], n), dist(g[1], g[2], n), 1e-4);
		struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
		for (int k = 0; k < 3; k++) {
			CHECK(net_sgd_step(nets[k], &sgd) == 0);
			for (int s = 0; s < 2; s++)
				CHECK(net_train_step(nets[k], &sgd, NULL, NULL) == 0);
			CHECK(net_sync_to_host(nets[k]) == 0);
		}
		fused_close("parameters after 3 steps", models[m], dist(a->host_params, c->host_params, n),
			    dist(b->host_params, c->host_params, n), 1e-4);
		fused_close("running statistics after 3 steps", models[m],
			    dist(a->host_running, c->host_running, a->running_count),
			    dist(b->host_running, c->host_running, a->running_count), 1e-4);
next:
		for (int k = 0; k < 3; k++) {
			free(l[k]);
			free(g[k]);
			net_free(nets[k]);
		}
	}
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
	backend_cuda_set_conv_policy(a, 1, 1);
	backend_cuda_set_conv_policy(b, 1, 1);
	int rc_a = net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32);
	b->tuning.test.conv_ws_arena = 0; /* one shared workspace */
	int rc_b = net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32);
	CHECK_MSG(rc_a == 0 && rc_b == 0, "%s", gp_errmsg());
	if (rc_a || rc_b)
		goto out;
	int planned = 0;
	for (int i = 0; i < a->n_nodes; i++)
		planned += a->scratch[i].t_fwd >= 0 || a->scratch[i].t_bwd >= 0;
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

/* FP32 weight gradients on the side stream (the default) against the same on the main
 * stream (tuning.test.wgrad_stream = 0), with deterministic algorithms, so anything but the
 * same bits means a race: a gradient read before the side stream made it, or a buffer
 * the main stream reused while the side stream still read it. One eager backward
 * (gradients), then graph replays (parameters after the optimizer steps). ResNet-18
 * (every convolution but the first on the side), MobileNetV2 (depthwise ones on the
 * main stream) and the simple CNN (convolutions with a bias). */
TEST(cuda_wgrad_side_stream_matches_main_stream)
{
	NEED_GPU();
	const char *models[] = { "resnet18", "mobilenet_v2", "simple_cnn" };
	for (int m = 0; m < 3; m++) {
		int size = m == 2 ? 32 : 96, batch = 16;
		struct net *a = build(models[m], size, batch, 10), *b = build(models[m], size, batch, 10);
		float *pa = NULL, *pb = NULL;
		if (!a || !b)
			goto next;
		a->use_graphs = b->use_graphs = 1;
		backend_cuda_set_conv_policy(a, 0, 1);
		backend_cuda_set_conv_policy(b, 0, 1);
		a->tuning.test.wgrad_stream = 0;
		CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
		CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
		int side_a = 0, side_b = 0, convs = 0;
		for (int i = 0; i < b->n_nodes; i++) {
			side_a += a->scratch[i].side;
			side_b += b->scratch[i].side;
			convs += b->nodes[i].op == OP_CONV2D;
		}
		printf("      %s: %d of %d convolutions' weight gradients on the side stream; arena %.1f MiB "
		       "against %.1f MiB\n", models[m], side_b, convs, b->plan.arena_bytes / 1048576.0,
		       a->plan.arena_bytes / 1048576.0);
		CHECK_EQ_INT(side_a, 0);
		CHECK(side_b > 0);
		if (m != 1) /* all but the first (nothing left to overlap with) */
			CHECK_EQ_INT(side_b, convs - 1);
		same_batch(a, b, batch, size, 10, 8);
		double la = 0, lb = 0, e = step_both(a, b, &la, &lb);
		CHECK_MSG(e == 0 && la == lb, "%s: gradients %.3g apart, losses %.9f and %.9f", models[m], e, la, lb);
		struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4 };
		for (int s = 0; s < 4; s++) { /* the first eager, the rest graph replays */
			CHECK(net_train_step(a, &sgd, &la, NULL) == 0);
			CHECK(net_train_step(b, &sgd, &lb, NULL) == 0);
		}
		size_t n = a->params_count;
		pa = malloc(n * sizeof(float));
		pb = malloc(n * sizeof(float));
		CHECK(pa && pb && net_sync_to_host(a) == 0 && net_sync_to_host(b) == 0);
		if (pa && pb) {
			memcpy(pa, a->host_params, n * sizeof(float));
			memcpy(pb, b->host_params, n * sizeof(float));
			double ep = dist(pb, pa, n);
			CHECK_MSG(ep == 0 && la == lb, "%s: parameters %.3g apart after 4 steps, losses %.9f and %.9f",
				  models[m], ep, la, lb);
		}
	next:
		free(pa);
		free(pb);
		net_free(a);
		net_free(b);
	}
}
