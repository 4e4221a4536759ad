/* Whole models: torchvision's parameter counts and MACs, gradients of the whole
 * network against finite differences in double, float against double, the memory
 * plan, and training that learns. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "ops/cuda/bn16_rule.h"
#include "train/trainer.h"
#include "test.h"

static struct net *build(const char *name, int size, int batch, int classes)
{
	struct model_opts o = model_defaults(name);
	o.size = size;
	o.batch = batch;
	o.classes = classes;
	o.seed = 7;
	struct net *net = NULL;
	int rc = model_build(name, &o, &net);
	CHECK_MSG(rc == 0, "model_build(%s): %s", name, gp_errmsg());
	return net;
}

TEST(models_param_counts_match_torchvision)
{
	static const struct { const char *name; size_t params; double gmacs; } want[] = {
		{ "resnet18", 11689512, 1.8 },
		{ "resnet50", 25557032, 4.1 },
		{ "mobilenet_v2", 3504872, 0.30 },
	};
	for (int i = 0; i < 3; i++) {
		struct net *net = build(want[i].name, 224, 1, 1000);
		if (!net)
			continue;
		CHECK_EQ_INT(net->params_count, want[i].params);
		double gmacs = net_total_macs(net) / 1e9;
		CHECK_MSG(fabs(gmacs / want[i].gmacs - 1) <= 0.02, "%s: %.4f GMACs, published %.2f",
			  want[i].name, gmacs, want[i].gmacs);
		net_free(net);
	}
	struct net *net = build("simple_cnn", 32, 1, 10);
	/* conv 3*32*9+32, 32*64*9+64, 64*128*9+128, fc 2048*256+256, 256*10+10 */
	CHECK_EQ_INT(net->params_count, 896 + 18496 + 73856 + 524544 + 2570);
	net_free(net);
}

TEST(models_state_dict_names_follow_torchvision)
{
	struct net *net = build("resnet50", 64, 1, 1000);
	const char *keys[] = { "conv1.weight", "bn1.running_var", "bn1.num_batches_tracked",
			       "layer1.0.downsample.0.weight", "layer1.0.downsample.1.bias",
			       "layer4.2.conv3.weight", "layer4.2.bn3.running_mean", "fc.weight", "fc.bias" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		CHECK_MSG(net_state_find(net, keys[i]) != NULL, "resnet50 lacks %s", keys[i]);
	CHECK(net_state_find(net, "layer1.1.downsample.0.weight") == NULL);
	CHECK_EQ_INT(net->n_state, 320); /* len(torchvision.models.resnet50().state_dict()) */
	net_free(net);
	net = build("mobilenet_v2", 64, 1, 1000);
	const char *mkeys[] = { "features.0.0.weight", "features.0.1.running_mean", "features.1.conv.0.0.weight",
				"features.1.conv.1.weight", "features.1.conv.2.num_batches_tracked",
				"features.2.conv.1.0.weight", "features.2.conv.3.bias", "features.18.0.weight",
				"classifier.1.weight" };
	for (size_t i = 0; i < sizeof(mkeys) / sizeof(mkeys[0]); i++)
		CHECK_MSG(net_state_find(net, mkeys[i]) != NULL, "mobilenet_v2 lacks %s", mkeys[i]);
	CHECK_EQ_INT(net->n_state, 314); /* len(torchvision.models.mobilenet_v2().state_dict()) */
	struct state_entry *dw = net_state_find(net, "features.2.conv.1.0.weight");
	CHECK(dw && dw->dims[0] == 96 && dw->dims[1] == 1 && dw->dims[2] == 3);
	net_free(net);
	net = build("resnet18", 64, 1, 1000);
	CHECK_EQ_INT(net->n_state, 122);
	net_free(net);
}

static void random_batch(struct net *net, uint64_t seed)
{
	float *x;
	int32_t *labels;
	CHECK(train_synthetic_batch(net->batch, net->in_c, net->in_h, net->in_w, net->classes, seed, &x,
				    &labels) == 0);
	CHECK(net_set_batch_data(net, x, labels) == 0);
	free(x);
	free(labels);
}

static double loss_at(struct net *net)
{
	double loss = 0;
	CHECK(net_forward(net, 1) == 0);
	CHECK(net_loss(net, &loss, NULL) == 0);
	return loss;
}

/* Directional finite differences of the whole training loss in double precision:
 * (L(p + h v) - L(p - h v)) / 2h against grad . v for random unit directions v over
 * all parameters, plus single coordinates (the last bias, the first weight, one in the
 * middle). The size keeps at least 2x2 pixels in the last stage, so that batch norm
 * sees more than two values per channel and the loss stays smooth at the FD step. */
static void check_model_gradients(const char *name, int size, int batch, int directions, int probes_n)
{
	struct net *net = build(name, size, batch, 10);
	if (!net)
		return;
	CHECK(net_setup(net, BACKEND_CPU, GP_F64, PREC_FP32) == 0);
	random_batch(net, 3);
	double *p = net_cpu_params(net), *g = net_cpu_grads(net);
	size_t n = net->params_count;
	double *grad = malloc(n * sizeof(double)), *v = malloc(n * sizeof(double));
	loss_at(net);
	CHECK(net_backward(net) == 0);
	memcpy(grad, g, n * sizeof(double));
	struct rng r;
	rng_seed(&r, 11, 5);
	const double h = 1e-7; /* small enough that few ReLU/max-pool kinks are crossed */
	for (int d = 0; d < directions; d++) {
		double norm = 0, gv = 0;
		for (size_t i = 0; i < n; i++) {
			v[i] = rng_normal(&r);
			norm += v[i] * v[i];
		}
		norm = sqrt(norm);
		for (size_t i = 0; i < n; i++) {
			v[i] /= norm;
			gv += grad[i] * v[i];
		}
		for (size_t i = 0; i < n; i++)
			p[i] += h * v[i];
		double lp = loss_at(net);
		for (size_t i = 0; i < n; i++)
			p[i] -= 2 * h * v[i];
		double lm = loss_at(net);
		for (size_t i = 0; i < n; i++)
			p[i] += h * v[i];
		double fd = (lp - lm) / (2 * h);
		CHECK_MSG(fabs(fd - gv) <= 1e-5 * fabs(gv) + 1e-9, "%s direction %d: fd %.10g grad.v %.10g",
			  name, d, fd, gv);
	}
	/* single coordinates: the first weight, one in the middle, the last bias */
	size_t probes[3] = { n - 1, 0, n / 2 };
	for (int k = 0; k < probes_n; k++) {
		size_t i = probes[k];
		double keep = p[i], hh = 1e-7;
		p[i] = keep + hh;
		double lp = loss_at(net);
		p[i] = keep - hh;
		double lm = loss_at(net);
		p[i] = keep;
		double fd = (lp - lm) / (2 * hh);
		CHECK_MSG(fabs(fd - grad[i]) <= 1e-4 * fabs(grad[i]) + 1e-8, "%s param %zu: fd %.10g grad %.10g",
			  name, i, fd, grad[i]);
	}
	free(grad);
	free(v);
	net_free(net);
}

TEST(model_grad_simple_cnn_matches_finite_differences)
{
	check_model_gradients("simple_cnn", 16, 3, 3, 3);
}

TEST(model_grad_resnet18_matches_finite_differences)
{
	check_model_gradients("resnet18", 64, 2, 2, 3);
}

TEST(model_grad_mobilenet_v2_matches_finite_differences)
{
	check_model_gradients("mobilenet_v2", 64, 2, 2, 3);
}

TEST(model_grad_resnet50_matches_finite_differences)
{
	check_model_gradients("resnet50", 64, 2, 1, 1);
}

/* The float backend (im2col + BLAS) against the double reference for one step. */
TEST(model_float_backend_matches_double_reference)
{
	struct net *a = build("resnet18", 32, 4, 10), *b = build("resnet18", 32, 4, 10);
	CHECK(net_setup(a, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CPU, GP_F64, PREC_FP32) == 0);
	random_batch(a, 5);
	random_batch(b, 5);
	double la = loss_at(a), lb = loss_at(b);
	CHECK_LE(fabs(la - lb) / fabs(lb), 1e-5);
	CHECK(net_backward(a) == 0);
	CHECK(net_backward(b) == 0);
	size_t n = a->params_count;
	float *ga = net_cpu_grads(a);
	double *gb = net_cpu_grads(b), num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num += (ga[i] - gb[i]) * (ga[i] - gb[i]);
		den += gb[i] * gb[i];
	}
	CHECK_LE(sqrt(num / den), 1e-4);
	net_free(a);
	net_free(b);
}

/* Pairs of planned tensors that share bytes while both are alive (must be none). */
static int plan_overlaps(const struct net *net)
{
	int bad = 0;
	for (int i = 0; i < net->n_tensors; i++) {
		const struct plan_tensor *x = &net->tensors[i];
		for (int j = i + 1; j < net->n_tensors && x->alias_of < 0; j++) {
			const struct plan_tensor *y = &net->tensors[j];
			if (y->alias_of >= 0 || x->last_step < y->first_step || y->last_step < x->first_step)
				continue;
			bad += x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes;
		}
	}
	return bad;
}

/* No two tensors whose lifetimes intersect may share bytes, and reuse must pay. */
TEST(memory_plan_never_overlaps_live_tensors)
{
	const char *names[] = { "resnet50", "mobilenet_v2", "simple_cnn" };
	for (int m = 0; m < 3; m++) {
		struct net *net = build(names[m], m == 2 ? 32 : 64, 4, 10);
		CHECK(net_plan_memory(net, 1, 4, 0) == 0);
		int bad = plan_overlaps(net);
		CHECK_EQ_INT(bad, 0);
		CHECK_MSG(net->plan.arena_bytes < 0.7 * net->plan.no_reuse_bytes,
			  "%s: arena %zu vs %zu without reuse", names[m], net->plan.arena_bytes,
			  net->plan.no_reuse_bytes);
		net_free(net);
	}
}

/* Residual adds hand their gradient on without copies: a block's last batch norm and
 * (where the add writes it first) the block's input read the add's own gradient
 * buffer. The gradients themselves are checked against finite differences above. */
/* Convolution workspaces planned into the arena (the CUDA backend's option) take
 * memory that is free while their convolution runs: no overlap with anything live,
 * and far less than one shared buffer on top of the peak would add. */
TEST(memory_plan_places_conv_workspaces)
{
	struct net *net = build("resnet50", 64, 4, 10);
	CHECK(net_plan_memory(net, 1, 4, 0) == 0);
	size_t base = net->plan.arena_bytes, ws = (size_t)8 << 20;
	struct scratch_req *req = net_scratch_reqs(net);
	CHECK(req != NULL);
	for (int i = 0; req && i < net->n_nodes; i++)
		if (net->nodes[i].op == OP_CONV2D)
			req[i].fwd_bytes = req[i].bwd_bytes = ws;
	CHECK(net_plan_memory(net, 1, 4, 0) == 0);
	int bad = plan_overlaps(net), placed = 0;
	for (int i = 0; req && i < net->n_nodes; i++)
		placed += (req[i].t_fwd >= 0) + (req[i].t_bwd >= 0);
	CHECK_EQ_INT(bad, 0);
	CHECK(placed > 100);
	CHECK_MSG(net->plan.arena_bytes <= base + ws, "arena %zu, %zu without workspaces", net->plan.arena_bytes, base);
	net_free(net);
}

/* Weight gradients on a side stream (the CUDA backend's, FP32): what each reads (the
 * convolution's input and output gradient) and its own workspace stay alive until the
 * main stream waits for it at the next convolution below, so nothing the main stream
 * writes meanwhile lands on them. */
static int root_last(const struct net *net, int t)
{
	return net->tensors[plan_tensor_root(net, t)].last_step;
}

TEST(memory_plan_keeps_side_stream_wgrad_inputs_alive)
{
	const char *names[] = { "resnet18", "mobilenet_v2", "simple_cnn" };
	for (int m = 0; m < 3; m++) {
		struct net *net = build(names[m], m == 2 ? 32 : 64, 4, 10);
		CHECK(net_plan_memory(net, 1, 4, 0) == 0);
		size_t base = net->plan.arena_bytes;
		int n = net->n_nodes, sides = 0, convs = 0;
		struct scratch_req *req = net_scratch_reqs(net);
		CHECK(req != NULL);
		if (!req)
			break;
		for (int i = 0; i < n; i++)
			if (net->nodes[i].op == OP_CONV2D) {
				req[i].fwd_bytes = req[i].bwd_bytes = (size_t)1 << 20;
				req[i].side_bytes = (size_t)2 << 20;
				req[i].side = 1;
				convs++;
			}
		CHECK(net_plan_memory(net, 1, 4, 0) == 0);
		CHECK_EQ_INT(plan_overlaps(net), 0);
		int prev = -1; /* the convolution before, in forward order: the next in backward */
		for (int i = 0; i < n; i++) {
			const struct node *nd = &net->nodes[i];
			const struct scratch_req *r = &req[i];
			if (nd->op != OP_CONV2D)
				continue;
			/* no convolution feeds an add in these; the first stays on the main stream,
			 * its backward workspace large enough for its weight gradient again */
			CHECK_EQ_INT(r->side, prev >= 0);
			if (prev < 0) {
				CHECK(r->bwd_bytes == (size_t)2 << 20 && r->side_bytes == 0 && r->t_side < 0);
				CHECK(r->t_bwd >= 0 && net->tensors[r->t_bwd].bytes >= (size_t)2 << 20);
			} else {
				CHECK_EQ_INT(r->side_join, prev);
			}
			prev = i;
		}
		for (int i = 0; i < n; i++) {
			const struct node *nd = &net->nodes[i];
			const struct scratch_req *r = &req[i];
			if (nd->op != OP_CONV2D || !r->side)
				continue;
			sides++;
			int until = 2 * n - r->side_join;
			const struct node *src = &net->nodes[nd->in[0]];
			if (src->t_y >= 0)
				CHECK_MSG(root_last(net, src->t_y) >= until, "%s node %d: input until %d, joined at %d",
					  names[m], i, root_last(net, src->t_y), until);
			CHECK_MSG(root_last(net, nd->t_dy) >= until, "%s node %d: gradient until %d, joined at %d",
				  names[m], i, root_last(net, nd->t_dy), until);
			CHECK(r->t_side >= 0);
			if (r->t_side >= 0) {
				CHECK_EQ_INT(net->tensors[r->t_side].first_step, 2 * n - i);
				CHECK_EQ_INT(net->tensors[r->t_side].last_step, until);
			}
		}
		CHECK_EQ_INT(sides, convs - 1);
		/* a few convolutions' tensors live longer: the arena grows, but not by much */
		CHECK_MSG(net->plan.arena_bytes < 1.25 * base + ((size_t)8 << 20), "%s: arena %zu, %zu without",
			  names[m], net->plan.arena_bytes, base);
		net_free(net);
	}
}

/* A convolution whose output an add reads directly may share its gradient buffer
 * with the add's other inputs (written in place later in backward): it keeps its
 * weight gradient on the main stream. */
TEST(memory_plan_keeps_wgrad_on_main_when_an_add_shares_the_gradient)
{
	struct net *net = calloc(1, sizeof(*net));
	CHECK(net != NULL);
	if (!net)
		return;
	CHECK(net_init(net, "conv_add", 4, 3, 8, 8) == 0);
	net->batch = 2;
	int x = net_input(net);
	int a = net_conv(net, "a", x, 4, 3, 1, 1, 1, 0);
	int b = net_conv(net, "b", a, 4, 3, 1, 1, 1, 0);
	int f = net_flatten(net, net_avgpool_global(net, net_add(net, b, a)));
	net_linear(net, "fc", f, 4, 1);
	CHECK_MSG(net_finalize(net) == 0, "%s", gp_errmsg());
	struct scratch_req *req = net_scratch_reqs(net);
	CHECK(req != NULL);
	for (int i = 0; req && i < net->n_nodes; i++)
		req[i].side = net->nodes[i].op == OP_CONV2D;
	CHECK(net_plan_memory(net, 1, 4, 0) == 0);
	CHECK(req && !req[b].side);
	CHECK(req && !req[a].side); /* the lowest */
	CHECK_EQ_INT(plan_overlaps(net), 0);
	net_free(net);
}

/* Max pooling keeps a byte per output (its argmax's offset in the window), so a
 * window beyond 15 x 15 is refused in one line when the net is built; ResNet-50's
 * pooling keeps 64 x 56 x 56 bytes an image. */
TEST(maxpool_argmax_is_a_byte_and_big_windows_are_refused)
{
	struct net *net = calloc(1, sizeof(*net));
	CHECK(net != NULL);
	if (!net)
		return;
	CHECK(net_init(net, "pool16", 4, 3, 40, 40) == 0);
	net->batch = 2;
	CHECK_EQ_INT(net_maxpool(net, net_input(net), MAXPOOL_K_MAX + 1, 1, 0), -1);
	CHECK_EQ_INT(net->build_err, GP_EUNSUPPORTED);
	CHECK_MSG(strstr(gp_errmsg(), "max pool k16: windows up to 15x15"), "%s", gp_errmsg());
	net_free(net);
	net = build("resnet50", 224, 2, 10);
	int pools = 0;
	for (int i = 0; net && i < net->n_nodes; i++)
		if (net->nodes[i].op == OP_MAXPOOL2D) {
			pools++;
			CHECK_EQ_INT((long)node_saved_bytes(&net->nodes[i], 2), 2L * 64 * 56 * 56);
		}
	CHECK_EQ_INT(pools, 1);
	net_free(net);
}

/* A fused batch norm's reserve space (the CUDA backend's, under mixed precision) is a
 * tensor from the batch norm's forward to the step its backward (or, for the residual
 * add's fused forward, that add) reads it again: placed without overlapping anything
 * live, with the lifetime the node asks for. */
TEST(memory_plan_places_bn_reserve)
{
	struct net *net = build("resnet50", 64, 4, 10);
	int n = net->n_nodes, bns = 0;
	struct scratch_req *req = net_scratch_reqs(net);
	CHECK(req != NULL);
	if (!req) {
		net_free(net);
		return;
	}
	for (int i = 0; i < n; i++) {
		struct node *nd = &net->nodes[i];
		if (nd->op != OP_BATCHNORM2D)
			continue;
		req[i].keep_bytes = (size_t)1 << 20;
		req[i].keep_last = bns++ % 2 ? 2 * n - i : nd->last_consumer; /* backward, or the add */
	}
	CHECK(net_plan_memory(net, 1, 2, 0) == 0);
	int bad = plan_overlaps(net), placed = 0;
	for (int i = 0; i < n; i++) {
		const struct node *nd = &net->nodes[i];
		if (nd->op != OP_BATCHNORM2D)
			continue;
		CHECK(req[i].t_keep >= 0);
		if (req[i].t_keep < 0)
			continue;
		placed++;
		const struct plan_tensor *t = &net->tensors[req[i].t_keep];
		CHECK_EQ_INT(t->first_step, i);
		CHECK_EQ_INT(t->last_step, req[i].keep_last);
		CHECK(t->bytes >= req[i].keep_bytes);
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(placed, bns);
	/* inference plans keep nothing for a backward */
	CHECK(net_plan_memory(net, 0, 2, 0) == 0);
	for (int i = 0; i < n; i++)
		CHECK_EQ_INT(req[i].t_keep, -1);
	net_free(net);
}

/* model at 224 x 224 with the CUDA backend's plan predicted without a device under
 * bn16 (and recompute) for prec; NULL, the failure checked, where it could not be. */
static struct net *predicted_cuda(const char *model, int batch, enum precision prec, int bn16, int recompute)
{
	struct net *net = build(model, 224, batch, 10);
	if (!net)
		return NULL;
	net->tuning.bn16 = bn16;
	net->recompute = recompute;
	int rc = net_plan_predict(net, BACKEND_CUDA, GP_F32, prec);
	CHECK_MSG(rc == 0, "%s: %s", model, gp_errmsg());
	if (rc == 0)
		return net;
	net_free(net);
	return NULL;
}

/* The CUDA backend's plan, predicted without a device: where a residual block's last
 * batch norm runs on the own 16-bit kernels, its backward applies the mask of the ReLU
 * after the add (the block's output), so that ReLU's output lives until that batch
 * norm's backward, two steps after the ReLU's (struct scratch_req's out_last). Batch 256
 * at 224 under GPUPERF_BN16=auto: all 16 of resnet50's blocks (256 to 2048 channels, at
 * least 12 Mi elements), 2 of resnet18's (layer3's 256 channels over 14 x 14; 64 and 128
 * channels and 512 over 7 x 7 stay on cuDNN, whose backward takes no such mask); none
 * under cudnn, in FP32 (the own FP32 kernels run the ReLU's pass), or under recompute,
 * whose ReLU outputs live only until the ReLU's backward. */
TEST(memory_plan_keeps_block_outputs_for_the_batch_norm_that_masks)
{
#ifndef GP_HAVE_CUDA
	SKIP("built without CUDA: no CUDA backend to predict");
#endif
	static const struct {
		const char *model;
		enum precision prec;
		int bn16, recompute, marked;
	} cases[] = {
		{ "resnet50", PREC_BF16, BN16_AUTO, 0, 16 }, { "resnet50", PREC_FP16, BN16_AUTO, 0, 16 },
		{ "resnet18", PREC_BF16, BN16_AUTO, 0, 2 },  { "resnet50", PREC_BF16, BN16_CUDNN, 0, 0 },
		{ "resnet50", PREC_FP32, BN16_AUTO, 0, 0 },  { "resnet50", PREC_BF16, BN16_AUTO, 1, 0 },
		{ "mobilenet_v2", PREC_BF16, BN16_AUTO, 0, 0 },
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct net *net = predicted_cuda(cases[k].model, 256, cases[k].prec, cases[k].bn16, cases[k].recompute);
		if (!net)
			continue;
		int n = net->n_nodes, marked = 0;
		for (int r = 0; r < n; r++) {
			int last = net->scratch[r].out_last;
			if (!last)
				continue;
			marked++;
			const struct node *rn = &net->nodes[r], *add = &net->nodes[r - 1];
			CHECK(rn->op == OP_RELU && add->op == OP_ADD && rn->in[0] == r - 1);
			CHECK(net->nodes[r - 2].op == OP_BATCHNORM2D && (add->in[0] == r - 2 || add->in[1] == r - 2));
			CHECK_EQ_INT(last, 2 * n - (r - 2));
			CHECK_EQ_INT(net->tensors[plan_tensor_root(net, rn->t_y)].last_step, last);
			/* one gradient buffer for the ReLU, the add and its inputs (what the
			 * backend checks before it leaves the ReLU's pass out) */
			int root = plan_tensor_root(net, rn->t_dy);
			CHECK_EQ_INT(plan_tensor_root(net, add->t_dy), root);
			for (int j = 0; j < 2; j++)
				CHECK_EQ_INT(plan_tensor_root(net, net->nodes[add->in[j]].t_dy), root);
		}
		CHECK_MSG(marked == cases[k].marked, "%s %s bn16 %d recompute %d: %d ReLU outputs kept for a batch "
			  "norm's mask, want %d", cases[k].model, train_precision_name(cases[k].prec), cases[k].bn16,
			  cases[k].recompute, marked, cases[k].marked);
		net_free(net);
	}
}

/* The CUDA backend's plan, predicted without a device (net_plan_predict: what gpuperf
 * info and a memory cap's first check see): a ReLU output that nothing but the ReLU's
 * own backward would keep is freed where the fused batch norm before takes the mask
 * from x. That is ResNet's stem (its ReLU feeds the max pool, which keeps its argmax),
 * in FP32 (the own fused kernels) and in 16 bits under GPUPERF_BN16=auto (the rule
 * routes that batch norm to the own kernels for it); not under cudnn, whose fused
 * backward reads the output. In MobileNetV2 every ReLU6 feeds a convolution, which
 * keeps its input, but the last, before the global pool: in FP32 that one too (in 16
 * bits its 4 M elements stay on cuDNN's kernels). Freeing the stem's output takes its
 * bytes off the arena's peak, at the loss. */
TEST(memory_plan_frees_the_stem_relu_output_the_own_batch_norm_never_reads)
{
#ifndef GP_HAVE_CUDA
	SKIP("built without CUDA: no CUDA backend to predict");
#endif
	static const struct {
		const char *model;
		enum precision prec;
		int bn16, marked;
	} cases[] = {
		{ "resnet18", PREC_BF16, BN16_AUTO, 1 },   { "resnet50", PREC_FP16, BN16_AUTO, 1 },
		{ "resnet18", PREC_FP32, BN16_AUTO, 1 },   { "resnet50", PREC_FP32, BN16_CUDNN, 1 },
		{ "resnet18", PREC_BF16, BN16_CUDNN, 0 },  { "mobilenet_v2", PREC_BF16, BN16_AUTO, 0 },
		{ "mobilenet_v2", PREC_FP32, BN16_AUTO, 1 },
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct net *net = predicted_cuda(cases[k].model, 64, cases[k].prec, cases[k].bn16, 0);
		if (!net)
			continue;
		int marked = 0, at = -1;
		for (int i = 0; i < net->n_nodes; i++)
			if (net->scratch[i].out_unread) {
				marked++;
				at = i;
			}
		CHECK_MSG(marked == cases[k].marked, "%s %s bn16 %d: %d outputs unread, want %d", cases[k].model,
			  train_precision_name(cases[k].prec), cases[k].bn16, marked, cases[k].marked);
		const struct node *r = at >= 0 ? &net->nodes[at] : NULL;
		enum op_type after = r ? net->nodes[r->last_consumer].op : OP_COUNT;
		if (r) {
			int root = plan_tensor_root(net, r->t_y);
			CHECK(net->nodes[r->in[0]].op == OP_BATCHNORM2D);
			CHECK(after == OP_MAXPOOL2D || after == OP_AVGPOOL_GLOBAL);
			CHECK_EQ_INT(net->tensors[root].last_step, r->last_consumer);
		}
		if (marked == 1 && after == OP_MAXPOOL2D) {
			size_t with = net->plan.arena_bytes, bytes = shape_numel(r->out) *
				net_act_elem_bytes(BACKEND_CUDA, GP_F32, cases[k].prec);
			CHECK_EQ_INT(plan_overlaps(net), 0);
			net->scratch[at].out_unread = 0;
			CHECK(net_plan_memory(net, 1, net_act_elem_bytes(BACKEND_CUDA, GP_F32, cases[k].prec), 0) == 0);
			CHECK_MSG(with + bytes == net->plan.arena_bytes, "%s %s: arena %zu with the stem freed, %zu "
				  "without, the output %zu", cases[k].model, train_precision_name(cases[k].prec), with,
				  net->plan.arena_bytes, bytes);
		}
		net_free(net);
	}
}

TEST(memory_plan_shares_add_gradients)
{
	const char *names[] = { "resnet18", "resnet50", "mobilenet_v2" };
	for (int m = 0; m < 3; m++) {
		struct net *net = build(names[m], 64, 2, 10);
		CHECK(net_plan_memory(net, 1, 4, 0) == 0);
		int adds = 0, shared = 0, both = 0;
		for (int i = 0; i < net->n_nodes; i++) {
			const struct node *nd = &net->nodes[i];
			if (nd->op != OP_ADD)
				continue;
			adds++;
			size_t off = net->tensors[nd->t_dy].offset;
			int s0 = net->tensors[net->nodes[nd->in[0]].t_dy].offset == off;
			int s1 = net->tensors[net->nodes[nd->in[1]].t_dy].offset == off;
			shared += s0 || s1;
			both += s0 && s1;
		}
		CHECK(adds > 0);
		CHECK_MSG(shared == adds && both == adds, "%s: %d adds, %d share a gradient, %d both",
			  names[m], adds, shared, both);
		net_free(net);
	}
}

TEST(simple_cnn_loss_halves_in_50_steps)
{
	struct train_opts o = train_opts_default();
	o.model = "simple_cnn";
	o.classes = 10;
	o.batch = 32;
	o.steps = 50;
	o.sgd.lr = 0.05;
	struct train_result r;
	CHECK_MSG(train_run(&o, &r, NULL) == 0, "%s", gp_errmsg());
	CHECK_MSG(r.last_loss <= 0.5 * r.first_loss, "loss %.4f -> %.4f", r.first_loss, r.last_loss);
	CHECK(r.img_s > 0);
}

/* A model saved after training loads into a fresh one and gives the same logits. */
TEST(checkpoint_round_trip_through_a_model)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/m.safetensors", test_tmpdir());
	struct net *a = build("mobilenet_v2", 32, 2, 10), *b = build("mobilenet_v2", 32, 2, 10);
	CHECK(net_setup(a, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	random_batch(a, 9);
	loss_at(a);
	CHECK(net_backward(a) == 0);
	struct sgd_args sgd = { .lr = 0.1, .momentum = 0.9 };
	CHECK(net_sgd_step(a, &sgd) == 0);
	CHECK(net_sync_to_host(a) == 0);
	CHECK_MSG(checkpoint_save(a, path) == 0, "%s", gp_errmsg());
	CHECK_MSG(checkpoint_load(b, path) == 0, "%s", gp_errmsg());
	CHECK(memcmp(a->host_params, b->host_params, a->params_count * sizeof(float)) == 0);
	CHECK(memcmp(a->host_running, b->host_running, a->running_count * sizeof(float)) == 0);
	CHECK_EQ_INT(b->nodes[2].bn_batches_tracked, 1);
	net_free(a);
	net_free(b);
}

/* Recomputing residual blocks' outputs too (recompute 2: relu(bn(x) + identity), the
 * identity itself recomputed first along a stage) gives the same loss and gradients
 * bit for bit again, and less memory than recompute 1; each chain is made at its
 * planned step, in forward order. */
TEST(recompute_blocks_gives_the_same_gradients_with_less_memory)
{
	const char *names[] = { "resnet18", "resnet50" };
	for (int m = 0; m < 2; m++) {
		struct net *a = build(names[m], 64, 2, 10), *b = build(names[m], 64, 2, 10);
		struct net *c = build(names[m], 64, 2, 10);
		if (!a || !b || !c)
			return;
		b->recompute = 1;
		c->recompute = 2;
		CHECK(net_setup(a, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
		CHECK(net_setup(b, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
		CHECK(net_setup(c, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
		random_batch(a, 8);
		random_batch(c, 8);
		int blocks = 0, chained = 0;
		for (int i = 0; i < c->n_nodes; i++) {
			int id = node_recompute_identity(c, i);
			blocks += id >= 0;
			/* a chained identity is made no later than the block that adds it */
			if (id >= 0 && c->nodes[id].t_re >= 0) {
				chained++;
				CHECK(c->tensors[c->nodes[id].t_re].first_step <= c->tensors[c->nodes[i].t_re].first_step);
			}
		}
		/* resnet18: one block of each stage's two; resnet50: all but the first of 3, 4, 6, 3 */
		CHECK_EQ_INT(blocks, m ? 12 : 4);
		CHECK_EQ_INT(chained, m ? 8 : 0);
		double la = loss_at(a), lc = loss_at(c);
		CHECK(la == lc);
		CHECK(net_backward(a) == 0 && net_backward(c) == 0);
		CHECK_MSG(memcmp(net_cpu_grads(a), net_cpu_grads(c), a->params_count * sizeof(float)) == 0,
			  "%s: gradients differ with the blocks recomputed", names[m]);
		CHECK_MSG(c->plan.arena_bytes < b->plan.arena_bytes, "%s: arena %zu recomputing blocks, %zu not",
			  names[m], c->plan.arena_bytes, b->plan.arena_bytes);
		int bad = plan_overlaps(c);
		CHECK_EQ_INT(bad, 0);
		net_free(a);
		net_free(b);
		net_free(c);
	}
}

/* Recomputing BN+ReLU outputs in backward instead of keeping them gives the same
 * loss and the same gradients bit for bit (the forward normalizes through the same
 * function), and needs less activation memory. */
TEST(recompute_gives_the_same_gradients_with_less_memory)
{
	const char *names[] = { "resnet18", "mobilenet_v2", "resnet50" };
	for (int m = 0; m < 3; m++) {
		for (int dt = 0; dt < (m < 2 ? 2 : 1); dt++) {
			enum gp_dtype dtype = dt ? GP_F64 : GP_F32;
			struct net *a = build(names[m], 64, 2, 10), *b = build(names[m], 64, 2, 10);
			if (!a || !b)
				return;
			b->recompute = 1;
			CHECK(net_setup(a, BACKEND_CPU, dtype, PREC_FP32) == 0);
			CHECK(net_setup(b, BACKEND_CPU, dtype, PREC_FP32) == 0);
			random_batch(a, 8);
			random_batch(b, 8);
			int recomputed = 0;
			for (int i = 0; i < b->n_nodes; i++)
				recomputed += b->nodes[i].t_re >= 0;
			CHECK(recomputed > 0);
			double la = loss_at(a), lb = loss_at(b);
			CHECK(la == lb);
			CHECK(net_backward(a) == 0 && net_backward(b) == 0);
			size_t bytes = a->params_count * dtype_size(dtype);
			CHECK_MSG(memcmp(net_cpu_grads(a), net_cpu_grads(b), bytes) == 0,
				  "%s %s: gradients differ with recompute", names[m], dtype_name(dtype));
			/* MobileNet keeps two wide tensors per expanded layer, ResNets mostly one */
			if (dt == 0)
				CHECK_MSG(b->plan.arena_bytes < (m == 1 ? 0.7 : 0.9) * a->plan.arena_bytes,
					  "%s: arena %zu with recompute, %zu without", names[m],
					  b->plan.arena_bytes, a->plan.arena_bytes);
			net_free(a);
			net_free(b);
		}
	}
}

TEST(memory_plan_with_recompute_never_overlaps_live_tensors)
{
	struct net *net = build("mobilenet_v2", 64, 4, 10);
	net->recompute = 1;
	CHECK(net_plan_memory(net, 1, 4, 0) == 0);
	int bad = plan_overlaps(net);
	CHECK_EQ_INT(bad, 0);
	net_free(net);
}

/* Gradient buckets: contiguous ranges covering every gradient once, last layers
 * first, each announced only when its gradients are final. */
struct bucket_log {
	int n;
	size_t next_end;
	int ordered;
	float *snap;
	const float *grads;
};

static void on_bucket(void *user, const struct net *net, int bucket, size_t first, size_t count)
{
	struct bucket_log *L = user;
	L->ordered &= bucket == L->n && first + count == L->next_end;
	L->next_end = first;
	memcpy(L->snap + first, L->grads + first, count * sizeof(float));
	L->n++;
}

TEST(grad_buckets_cover_everything_in_backward_order)
{
	struct net *net = build("resnet18", 32, 2, 10);
	CHECK(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	random_batch(net, 4);
	struct bucket_log L = { .ordered = 1, .next_end = net->params_count };
	L.snap = calloc(net->params_count, sizeof(float));
	L.grads = net_cpu_grads(net);
	CHECK(net_set_grad_buckets(net, 1 << 20, on_bucket, &L) == 0);
	CHECK(net->buckets.n > 5);
	loss_at(net);
	CHECK(net_backward(net) == 0);
	CHECK_EQ_INT(L.n, net->buckets.n);
	CHECK(L.ordered);
	CHECK_EQ_INT(L.next_end, 0);
	/* what each bucket held when announced is the final gradient */
	CHECK(memcmp(L.snap, L.grads, net->params_count * sizeof(float)) == 0);
	free(L.snap);
	net_free(net);
}

/* Loss scaling as torch.amp.GradScaler: a power-of-two scale changes nothing (the
 * scaling is exact); an overflowing scale skips the step, leaves the parameters as
 * they were and backs off; clean steps grow the scale after the interval. */
TEST(loss_scaling_skips_overflow_and_adapts_the_scale)
{
	struct net *a = build("resnet18", 32, 2, 10), *b = build("resnet18", 32, 2, 10);
	CHECK(net_setup(a, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	CHECK(net_setup(b, BACKEND_CPU, GP_F32, PREC_FP32) == 0);
	random_batch(a, 3);
	random_batch(b, 3);
	net_enable_loss_scaling(b);
	b->scaler.growth_interval = 2;
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	for (int s = 0; s < 3; s++) {
		CHECK(net_train_step(a, &sgd, NULL, NULL) == 0);
		CHECK(net_train_step(b, &sgd, NULL, NULL) == 0);
	}
	size_t bytes = a->params_count * sizeof(float);
	CHECK(memcmp(net_cpu_params(a), net_cpu_params(b), bytes) == 0);
	CHECK_NEAR(b->scaler.scale, 131072.0, 0); /* grew once after 2 clean steps */
	CHECK_EQ_INT(b->scaler.skipped_steps, 0);
	/* inject an overflow: the gradients become inf, the step is skipped */
	float *before = malloc(bytes);
	memcpy(before, net_cpu_params(b), bytes);
	b->scaler.scale = 3e38;
	int steps_before = b->sgd_steps;
	CHECK(net_train_step(b, &sgd, NULL, NULL) == 0);
	CHECK_EQ_INT(b->scaler.skipped_steps, 1);
	CHECK_EQ_INT(b->sgd_steps, steps_before);
	CHECK(memcmp(before, net_cpu_params(b), bytes) == 0);
	CHECK_NEAR(b->scaler.scale, 1.5e38, 1e30);
	CHECK_EQ_INT(b->scaler.growth_tracker, 0);
	/* back off until the gradients are finite again, then steps resume */
	for (int s = 0; s < 200 && b->sgd_steps == steps_before; s++)
		CHECK(net_train_step(b, &sgd, NULL, NULL) == 0);
	CHECK(b->sgd_steps == steps_before + 1);
	CHECK(memcmp(before, net_cpu_params(b), bytes) != 0);
	free(before);
	net_free(a);
	net_free(b);
}
