/* The CUDA backend at the model level in mixed precision: fp16 loss scaling with an
 * injected overflow, bf16 and fp16 against FP32 on the same weights, where 16 bits depart
 * from FP32 node by node, and batch norm fused with the ReLU (and add) after it. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tuning.h"
#include "backend/backend.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "ops/cuda/bn16_rule.h"
#include "ops/cuda/device.h"
#include "net_util.h"

/* Loss scaling on the GPU: an overflowing scale skips the step and backs off; a
 * power-of-two scale trains as without it. */
TEST(cuda_loss_scaling_skips_overflow)
{
	NEED_GPU();
	struct net *a = build("resnet18", 64, 4, 10), *b = build("resnet18", 64, 4, 10);
	if (!a || !b)
		goto out;
	backend_cuda_set_conv_policy(a, 0, 1);
	backend_cuda_set_conv_policy(b, 0, 1);
	CHECK(net_setup(a, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CUDA, GP_F32, PREC_FP32) == 0);
	same_batch(a, b, 4, 64, 10, 9);
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
	 * docs/log/perf-log.md); ours moves 0.13 from FP32 here. The others hold the 2e-2. */
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
 * bits compounds with depth (and PyTorch's autocast does the same, see docs/performance.md),
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
	f->tuning.test.bn_fuse = 0;
	h->tuning.test.bn_fuse = 0;
	int rc_f = net_setup(f, BACKEND_CUDA, GP_F32, PREC_FP32), rc_h = net_setup(h, BACKEND_CUDA, GP_F32, prec);
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

static void check_fused_bn(const char *model, int must_fuse, int bn16, int fold)
{
	const int size = 64, batch = 8, classes = 10;
	struct net *nets[3] = { build(model, size, batch, classes), build(model, size, batch, classes),
				build(model, size, batch, classes) };
	struct net *f = nets[0], *a = nets[1], *b = nets[2]; /* FP32, fused, separate */
	float *x = NULL, *l[3] = { 0 }, *gr[3] = { 0 };
	int32_t *y = NULL;
	if (!f || !a || !b)
		goto out;
	a->tuning.bn16 = bn16;
	a->tuning.relu6_fold = fold;
	int rc_f = net_setup(f, BACKEND_CUDA, GP_F32, PREC_FP32), rc_a = net_setup(a, BACKEND_CUDA, GP_F32, PREC_BF16);
	b->tuning.test.bn_fuse = 0;
	int rc_b = net_setup(b, BACKEND_CUDA, GP_F32, PREC_BF16);
	CHECK_MSG(rc_f == 0 && rc_a == 0 && rc_b == 0, "%s: %s", model, gp_errmsg());
	if (rc_f || rc_a || rc_b)
		goto out;
	int fused = 0, reserve = 0;
	for (int i = 0; i < a->n_nodes; i++) {
		fused += a->nodes[i].op == OP_BATCHNORM2D && a->scratch[i].keep_last > 0;
		reserve += a->scratch[i].t_keep >= 0;
		CHECK_EQ_INT(b->scratch[i].keep_last, 0);
	}
	printf("      %s: %d batch norms fused (%d with reserve space)\n", model, fused, reserve);
	/* the own kernels keep no reserve space: cuDNN's fused ones do */
	if (bn16 == BN16_OWN)
		CHECK_MSG(reserve == 0, "%s: %d batch norms kept cuDNN's reserve space under own", model, reserve);
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
	check_fused_bn("resnet18", 1, BN16_CUDNN, RELU6_FOLD_AUTO);
	check_fused_bn("resnet50", 1, BN16_CUDNN, RELU6_FOLD_AUTO);
	/* ReLU6 folded into the depthwise convolutions (cuDNN's batch norms leave it) */
	check_fused_bn("mobilenet_v2", 1, BN16_CUDNN, RELU6_FOLD_AUTO);
}

/* Every batch norm on the own 16-bit kernels (GPUPERF_BN16=own: bn_nhwc16.cu, fused
 * with the ReLU, ReLU6 and add + ReLU after it where the net fuses): held to cuDNN's
 * separate ops' distance from FP32 as the fused cuDNN net is. */
TEST(cuda_amp_own_bn16_as_close_as_cudnn)
{
	NEED_GPU();
	/* the own batch norms apply every ReLU6 (auto), or fuse a ReLU and leave the clip
	 * to the depthwise convolutions (always) */
	check_fused_bn("mobilenet_v2", 1, BN16_OWN, RELU6_FOLD_AUTO);
	check_fused_bn("mobilenet_v2", 1, BN16_OWN, RELU6_FOLD_ALWAYS);
	check_fused_bn("resnet18", 1, BN16_OWN, RELU6_FOLD_AUTO);
	/* the add + ReLU joins and 256 to 2048 channels, which auto gives the own kernels
	 * at batch 256 since the twenty-first session */
	check_fused_bn("resnet50", 1, BN16_OWN, RELU6_FOLD_AUTO);
}

/* Nets a and b, set up alike but for one switch, on one synthetic batch (seed): the
 * loss and every gradient after one step, and every parameter (with running set, and
 * running statistic) after three, the same bits. */
static void same_bits_for_three_steps(struct net *a, struct net *b, const char *model, enum precision prec,
				      int batch, int size, int classes, uint64_t seed, int running)
{
	same_batch(a, b, batch, size, classes, seed);
	double la = 0, lb = 0;
	size_t np = a->params_count;
	float *ga = malloc(np * sizeof(float)), *gb = malloc(np * sizeof(float));
	CHECK(ga && gb);
	if (!ga || !gb)
		goto out;
	CHECK(net_forward(a, 1) == 0 && net_loss(a, &la, NULL) == 0 && net_backward(a) == 0);
	CHECK(net_forward(b, 1) == 0 && net_loss(b, &lb, NULL) == 0 && net_backward(b) == 0);
	CHECK(net_grads_to_host(a, ga) == 0 && net_grads_to_host(b, gb) == 0);
	CHECK_MSG(la == lb && !memcmp(ga, gb, np * sizeof(float)),
		  "%s %s: loss %.9g against %.9g, gradients %.3g apart", model, train_precision_name(prec), la, lb,
		  dist(ga, gb, np));
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	for (int s = 0; s < 2; s++)
		CHECK(net_train_step(a, &sgd, NULL, NULL) == 0 && net_train_step(b, &sgd, NULL, NULL) == 0);
	CHECK(net_sync_to_host(a) == 0 && net_sync_to_host(b) == 0);
	CHECK_MSG(!memcmp(a->host_params, b->host_params, np * sizeof(float)) &&
			  (!running || !memcmp(a->host_running, b->host_running, a->running_count * sizeof(float))),
		  "%s %s: parameters %.3g apart after 3 steps", model, train_precision_name(prec),
		  dist(a->host_params, b->host_params, np));
out:
	free(ga);
	free(gb);
}

/* A residual block's last batch norm (the add's input last in forward order) applies the
 * mask of the ReLU after the add in its backward where the own 16-bit kernels run it
 * (bn_bwd_out_masked_cuda): the ReLU's pass over the block's output gradient goes.
 * Against that pass (tuning.test.bn_out_mask = 0) on the same weights and batch, with
 * the same convolution algorithms (cuDNN's heuristic, deterministic ones; the own
 * products and stem kernels wherever they take a shape): the masked gradient is the
 * same bits, so the loss, every gradient after one step and every parameter after two
 * more must be equal bit for bit. want: the ReLUs masked so (resnet50 16 blocks, resnet18
 * 8); none without the own kernels (cudnn). */
static void check_out_mask(const char *model, enum precision prec, int bn16, int want)
{
	const int size = 64, batch = 8, classes = 10;
	struct net *a = build(model, size, batch, classes), *b = build(model, size, batch, classes);
	if (!a || !b)
		goto out;
	a->tuning.bn16 = b->tuning.bn16 = bn16;
	b->tuning.test.bn_out_mask = 0;
	a->conv_policy.deterministic = b->conv_policy.deterministic = 1;
	a->conv_policy.heuristic = b->conv_policy.heuristic = 1;
	int rc_a = net_setup(a, BACKEND_CUDA, GP_F32, prec), rc_b = net_setup(b, BACKEND_CUDA, GP_F32, prec);
	CHECK_MSG(rc_a == 0 && rc_b == 0, "%s: %s", model, gp_errmsg());
	if (rc_a || rc_b)
		goto out;
	int masked = 0, other = 0;
	for (int i = 0; i < a->n_nodes; i++) {
		masked += a->scratch[i].out_last > 0;
		other += b->scratch[i].out_last > 0;
		if (a->scratch[i].out_last > 0) /* the ReLU's output lives until then */
			CHECK(a->tensors[plan_tensor_root(a, a->nodes[i].t_y)].last_step >= a->scratch[i].out_last);
	}
	CHECK_MSG(masked == want && other == 0, "%s %s bn16 %d: %d ReLU masks in batch norms (want %d), %d with "
		  "the switch off", model, train_precision_name(prec), bn16, masked, want, other);
	same_bits_for_three_steps(a, b, model, prec, batch, size, classes, 17, 0);
out:
	net_free(a);
	net_free(b);
}

TEST(cuda_amp_block_relu_mask_in_the_batch_norm_changes_no_bit)
{
	NEED_GPU();
	check_out_mask("resnet50", PREC_BF16, BN16_OWN, 16);
	check_out_mask("resnet18", PREC_FP16, BN16_OWN, 8);
	check_out_mask("resnet18", PREC_BF16, BN16_CUDNN, 0);
}

/* A downsampling block's join, relu(bn3(x) + bn_ds(z)), applies both batch norms in one
 * pass where both run on the own 16-bit kernels (FUSE_BN_STATS): the shortcut's batch
 * norm makes its statistics only and never writes its output. Against the join reading
 * that output (tuning.test.bn_add_bn = 0), on the same weights and batch: want joins
 * (resnet50 4, resnet18 3 under own; none on cuDNN's batch norms). The shortcut's
 * output is then not rounded to 16 bits before the add, so the two nets differ by that
 * rounding: the joined net is held to the other's distance from FP32 (near_as) for
 * the loss, logits and gradients after one step, and parameters and running
 * statistics after three; the first join's shortcut statistics, made before any
 * output differs, are the same bits. A join without the shortcut's batch norm, or with its statistics
 * wrong, is O(1) off. */
static void check_join(const char *model, enum precision prec, int bn16, int want)
{
	const int size = 64, batch = 8, classes = 10;
	struct net *nets[3] = { build(model, size, batch, classes), build(model, size, batch, classes),
				build(model, size, batch, classes) };
	struct net *f = nets[0], *a = nets[1], *b = nets[2]; /* FP32, joined, apart */
	float *x = NULL, *l[3] = { 0 }, *gr[3] = { 0 };
	int32_t *y = NULL;
	if (!f || !a || !b)
		goto out;
	a->tuning.bn16 = b->tuning.bn16 = bn16;
	b->tuning.test.bn_add_bn = 0;
	/* the same convolution algorithms in both (cuDNN's heuristic, deterministic ones) */
	a->conv_policy.deterministic = b->conv_policy.deterministic = 1;
	a->conv_policy.heuristic = b->conv_policy.heuristic = 1;
	int rc_f = net_setup(f, BACKEND_CUDA, GP_F32, PREC_FP32), rc_a = net_setup(a, BACKEND_CUDA, GP_F32, prec),
	    rc_b = net_setup(b, BACKEND_CUDA, GP_F32, prec);
	CHECK_MSG(rc_f == 0 && rc_a == 0 && rc_b == 0, "%s: %s", model, gp_errmsg());
	if (rc_f || rc_a || rc_b)
		goto out;
	int fa = 0, fb = 0, first = -1;
	for (int i = 0; i < a->n_nodes; i++) {
		if (a->nodes[i].op != OP_BATCHNORM2D)
			continue;
		fa += a->scratch[i].keep_last > 0;
		fb += b->scratch[i].keep_last > 0;
		if (first < 0 && a->scratch[i].keep_last > 0 && !b->scratch[i].keep_last)
			first = i;
	}
	CHECK_MSG(fa - fb == want, "%s %s bn16 %d: %d shortcut batch norms joined (want %d)", model,
		  train_precision_name(prec), bn16, fa - fb, want);
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, 23, &x, &y) == 0);
	size_t nl = (size_t)batch * classes, np = f->params_count;
	double loss[3];
	for (int k = 0; k < 3; k++) {
		l[k] = malloc(nl * sizeof(float));
		gr[k] = malloc(np * sizeof(float));
		CHECK(l[k] && gr[k] && net_set_batch_data(nets[k], x, y) == 0);
		CHECK(net_forward(nets[k], 1) == 0 && net_loss(nets[k], &loss[k], NULL) == 0 &&
		      net_logits_to_host(nets[k], l[k]) == 0);
		CHECK(net_backward(nets[k]) == 0 && net_grads_to_host(nets[k], gr[k]) == 0);
	}
	if (first >= 0) { /* the running statistics after one forward: the first join's the same */
		CHECK(net_sync_to_host(a) == 0 && net_sync_to_host(b) == 0);
		const struct node *nd = &a->nodes[first];
		size_t off = nd->running_offset, c = (size_t)nd->a.bn.c;
		CHECK_MSG(!memcmp(a->host_running + off, b->host_running + off, 2 * c * sizeof(float)),
			  "%s: %s's running statistics differ (%.3g)", model, nd->name,
			  dist(a->host_running + off, b->host_running + off, 2 * c));
	}
	double eL[2], el[2], eg[2];
	for (int k = 0; k < 2; k++) {
		eL[k] = fabs(loss[k + 1] - loss[0]) / fabs(loss[0]);
		el[k] = dist(l[k + 1], l[0], nl);
		eg[k] = dist(gr[k + 1], gr[0], np);
	}
	printf("      %s %s from FP32, joined / apart: loss %.2e / %.2e, logits %.2e / %.2e, grads %.2e / %.2e\n",
	       model, train_precision_name(prec), eL[0], eL[1], el[0], el[1], eg[0], eg[1]);
	CHECK_MSG(near_as(eL[0], eL[1]) >= 0, "%s: joined loss %.3g from FP32 against %.3g", model, eL[0], eL[1]);
	CHECK_MSG(near_as(el[0], el[1]) >= 0, "%s: joined logits %.3g from FP32 against %.3g", model, el[0], el[1]);
	CHECK_MSG(near_as(eg[0], eg[1]) >= 0, "%s: joined gradients %.3g from FP32 against %.3g", model, eg[0],
		  eg[1]);
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	for (int k = 0; k < 3; k++) {
		CHECK(net_sgd_step(nets[k], &sgd) == 0);
		for (int st = 0; st < 2; st++)
			CHECK(net_train_step(nets[k], &sgd, NULL, NULL) == 0);
		CHECK(net_sync_to_host(nets[k]) == 0);
	}
	double ep[2], er[2];
	for (int k = 0; k < 2; k++) {
		ep[k] = dist(nets[k + 1]->host_params, f->host_params, np);
		er[k] = dist(nets[k + 1]->host_running, f->host_running, f->running_count);
	}
	printf("      %s %s after 3 steps, joined / apart: params %.2e / %.2e, running %.2e / %.2e\n", model,
	       train_precision_name(prec), ep[0], ep[1], er[0], er[1]);
	CHECK_MSG(near_as(ep[0], ep[1]) >= 0, "%s: joined parameters %.3g from FP32 against %.3g", model, ep[0],
		  ep[1]);
	CHECK_MSG(near_as(er[0], er[1]) >= 0, "%s: joined running statistics %.3g from FP32 against %.3g", model,
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

TEST(cuda_amp_downsample_join_applies_both_batch_norms)
{
	NEED_GPU();
	check_join("resnet50", PREC_BF16, BN16_OWN, 4);
	check_join("resnet18", PREC_FP16, BN16_OWN, 3);
	check_join("resnet18", PREC_BF16, BN16_CUDNN, 0);
}

/* ResNet's stem max pool applies the batch norm and ReLU before it in training where
 * the own 16-bit kernels run that batch norm (FUSE_POOL_BN_RELU): the batch norm makes
 * its statistics only and the ReLU's output is never written. The pool rounds each
 * element as the apply would write it, so against the apply and the pool
 * (tuning.test.bn_pool = 0), on the same weights, batch and convolution algorithms,
 * the loss, every gradient after one step and every parameter after three are the same
 * bits. want: the pools that apply them (1; none with cuDNN's batch norms). */
static void check_pool_bn(const char *model, enum precision prec, int bn16, int want)
{
	const int size = 64, batch = 8, classes = 10;
	struct net *a = build(model, size, batch, classes), *b = build(model, size, batch, classes);
	if (!a || !b)
		goto out;
	a->tuning.bn16 = b->tuning.bn16 = bn16;
	b->tuning.test.bn_pool = 0;
	a->conv_policy.deterministic = b->conv_policy.deterministic = 1;
	a->conv_policy.heuristic = b->conv_policy.heuristic = 1;
	int rc_a = net_setup(a, BACKEND_CUDA, GP_F32, prec), rc_b = net_setup(b, BACKEND_CUDA, GP_F32, prec);
	CHECK_MSG(rc_a == 0 && rc_b == 0, "%s: %s", model, gp_errmsg());
	if (rc_a || rc_b)
		goto out;
	int pooled = 0, other = 0;
	for (int i = 0; i < a->n_nodes; i++)
		if (a->nodes[i].op == OP_MAXPOOL2D) {
			pooled += a->scratch[i].keep_last > 0;
			other += b->scratch[i].keep_last > 0;
		}
	CHECK_MSG(pooled == want && other == 0, "%s %s bn16 %d: %d pools apply the batch norm (want %d), %d with "
		  "the switch off", model, train_precision_name(prec), bn16, pooled, want, other);
	same_bits_for_three_steps(a, b, model, prec, batch, size, classes, 29, 1);
out:
	net_free(a);
	net_free(b);
}

TEST(cuda_amp_stem_pool_applies_its_batch_norm_changes_no_bit)
{
	NEED_GPU();
	check_pool_bn("resnet50", PREC_BF16, BN16_OWN, 1);
	check_pool_bn("resnet18", PREC_FP16, BN16_OWN, 1);
	check_pool_bn("resnet18", PREC_BF16, BN16_CUDNN, 0);
}

/* The set-up's plan frees what the prediction without a device (gpuperf info's,
 * net_plan_predict) says it will: ResNet's stem ReLU output, read by nothing but the max
 * pool in forward, once its batch norm is big enough for auto's rule (batch 24 at 224:
 * 19.3 M elements) and so on the own kernels, which take the mask from x; kept under
 * cudnn, whose fused backward reads it. Training on the freed plan is checked against
 * FP32 by cuda_amp_own_bn16_as_close_as_cudnn (own everywhere, small shapes). */
TEST(cuda_amp_stem_relu_output_freed_as_predicted)
{
	NEED_GPU();
	static const struct {
		int bn16;
		enum precision prec;
		int stem;
	} cases[] = { { BN16_AUTO, PREC_BF16, 1 }, { BN16_CUDNN, PREC_BF16, 0 }, { BN16_CUDNN, PREC_FP32, 1 } };
	for (size_t k = 0; k < sizeof cases / sizeof *cases && !test_failed(); k++) {
		struct net *n = build("resnet18", 224, 24, 10);
		if (!n)
			return;
		n->tuning.bn16 = cases[k].bn16;
		int want[256] = { 0 }, marked = 0, stem = -1;
		CHECK(n->n_nodes <= 256);
		int rc = net_plan_predict(n, BACKEND_CUDA, GP_F32, cases[k].prec);
		CHECK_MSG(rc == 0, "%s", gp_errmsg());
		for (int i = 0; rc == 0 && i < n->n_nodes && i < 256; i++) {
			want[i] = n->scratch[i].out_unread;
			marked += want[i];
			if (n->nodes[i].op == OP_RELU && n->nodes[n->nodes[i].last_consumer].op == OP_MAXPOOL2D)
				stem = i;
		}
		CHECK(stem > 0);
		CHECK_MSG(marked == cases[k].stem && (stem < 0 || want[stem] == cases[k].stem),
			  "bn16 %d %s: %d outputs predicted unread, the stem's %d", cases[k].bn16,
			  train_precision_name(cases[k].prec), marked, stem >= 0 ? want[stem] : -1);
		rc = net_setup(n, BACKEND_CUDA, GP_F32, cases[k].prec);
		CHECK_MSG(rc == 0, "%s", gp_errmsg());
		int differ = 0;
		for (int i = 0; rc == 0 && i < n->n_nodes && i < 256; i++)
			differ += n->scratch[i].out_unread != want[i];
		CHECK_MSG(differ == 0, "bn16 %d %s: the set-up marks %d outputs otherwise than predicted",
			  cases[k].bn16, train_precision_name(cases[k].prec), differ);
		if (rc == 0 && stem > 0 && cases[k].stem) { /* and it trains: a step on the freed plan */
			float *x = NULL;
			int32_t *y = NULL;
			double loss = 0;
			CHECK(train_synthetic_batch(24, 3, 224, 224, 10, 5, &x, &y) == 0);
			CHECK(net_set_batch_data(n, x, y) == 0);
			CHECK(net_forward(n, 1) == 0 && net_loss(n, &loss, NULL) == 0 && net_backward(n) == 0);
			CHECK_MSG(isfinite(loss) && loss > 1.0 && loss < 5.0, "loss %g", loss);
			free(x);
			free(y);
		}
		net_free(n);
	}
}

/* Where MobileNetV2's ReLU6 layers run, by GPUPERF_RELU6_FOLD and GPUPERF_BN16: 35 of
 * them, 17 read only by a depthwise convolution (foldable), 18 by a 1x1 convolution or
 * the pooling. Under auto a ReLU6 is folded only where the batch norm before it is
 * cuDNN's, which leaves a ReLU6 to a pass of its own; the own batch norms apply it. At
 * batch 256 under both autos the batch norms of at least 16 Mi elements apply 26, and
 * the 1280-channel 7 x 7 one before the pooling (15.3 Mi, from 12 Mi on 256 channels
 * and more since the twenty-second session) a 27th; of the 8 left (cuDNN's) the three
 * 960-channel 7 x 7 ones before a depthwise convolution fold; until the twenty-first
 * session the three 192-channel 28 x 28 ones folded too (the fold asked about the
 * batch norm with a plain ReLU, cuDNN's there). */
TEST(cuda_amp_relu6_fold_follows_the_switch)
{
	NEED_GPU();
	const struct {
		int bn16, fold, folded, in_bn, size, batch;
	} cases[] = {
		{ BN16_OWN, RELU6_FOLD_AUTO, 0, 35, 64, 8 },	  { BN16_OWN, RELU6_FOLD_ALWAYS, 17, 18, 64, 8 },
		{ BN16_OWN, RELU6_FOLD_NEVER, 0, 35, 64, 8 },	  { BN16_CUDNN, RELU6_FOLD_AUTO, 17, 0, 64, 8 },
		{ BN16_CUDNN, RELU6_FOLD_NEVER, 0, 0, 64, 8 },	  { BN16_AUTO, RELU6_FOLD_AUTO, 3, 27, 224, 256 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]) && !test_failed(); k++) {
		struct net *n = build("mobilenet_v2", cases[k].size, cases[k].batch, 10);
		if (!n)
			return;
		n->tuning.bn16 = cases[k].bn16;
		n->tuning.relu6_fold = cases[k].fold;
		int rc = net_setup(n, BACKEND_CUDA, GP_F32, PREC_BF16), folded = -1, in_bn = -1;
		CHECK_MSG(rc == 0, "%s", gp_errmsg());
		if (rc == 0)
			backend_cuda_relu6_roles(n, &folded, &in_bn);
		CHECK_MSG(folded == cases[k].folded && in_bn == cases[k].in_bn,
			  "bn16 %d, fold %d: %d folded, %d in the batch norm; want %d and %d", cases[k].bn16,
			  cases[k].fold, folded, in_bn, cases[k].folded, cases[k].in_bn);
		net_free(n);
	}
	/* the process's switch reaches the net */
	setenv("GPUPERF_RELU6_FOLD", "never", 1);
	tuning_reload();
	struct net *n = build("mobilenet_v2", 64, 8, 10);
	unsetenv("GPUPERF_RELU6_FOLD");
	tuning_reload();
	if (!n)
		return;
	CHECK_EQ_INT(n->tuning.relu6_fold, RELU6_FOLD_NEVER);
	net_free(n);
}
