/* The training recipe's arithmetic on the CPU reference: AdamW against a hand-written
 * double-precision torch.optim.AdamW, label-smoothed cross-entropy against its value
 * and central differences, gradient clipping as clip_grad_norm_, and gradient
 * accumulation against one batch of the same images. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "nn/models.h"
#include "ops/ops.h"
#include "train/trainer.h"
#include "test.h"

static const double adam_g[3][2] = { { 0.5, 1 }, { 0.2, -0.4 }, { -0.3, 0.1 } };

/* torch.optim.AdamW written the textbook way (bias-corrected moments), in double. */
static void adamw_textbook(double p[2], int steps, double lr, double b1, double b2, double eps, double wd)
{
	double m[2] = { 0 }, v[2] = { 0 };
	for (int t = 1; t <= steps; t++)
		for (int i = 0; i < 2; i++) {
			double g = adam_g[t - 1][i];
			p[i] *= 1 - lr * wd;
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
			p[i] -= lr * mh / (sqrt(vh) + eps);
		}
}

TEST(adamw_cpu_matches_hand_reference)
{
	struct sgd_args a = { .kind = OPTIM_ADAMW, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
			      .weight_decay = 0.1 };
	double p[2] = { 1, -2 }, m[2] = { 77, -5 }, v[2] = { 3, 9 }; /* garbage: step 1 starts at 0 */
	float pf[2] = { 1, -2 }, mf[2] = { 77, -5 }, vf[2] = { 3, 9 };
	/* after each step, from the textbook form worked out in Python */
	static const double want[3][2] = { { 0.9890000002, -2.0079999999 },
					   { 0.9790252483900929, -2.009448058333837 },
					   { 0.9750906898437834, -2.0106898199343934 } };
	for (int t = 1; t <= 3; t++) {
		a.step = t;
		a.first_step = t == 1;
		float gf[2] = { (float)adam_g[t - 1][0], (float)adam_g[t - 1][1] };
		adamw_step_cpu_f64(&a, 2, p, adam_g[t - 1], m, v);
		adamw_step_cpu_f32(&a, 2, pf, gf, mf, vf);
		double ref[2] = { 1, -2 };
		adamw_textbook(ref, t, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay);
		for (int i = 0; i < 2; i++) {
			CHECK_NEAR(p[i], ref[i], 1e-13);
			CHECK_NEAR(p[i], want[t - 1][i], 1e-13);
			CHECK_NEAR(pf[i], want[t - 1][i], 2e-6);
		}
	}
	/* the moments after step 3: m = 0.01 g1 + 0.09 g2 + 0.1 g3 (m0 = 0) */
	CHECK_NEAR(m[0], 0.9 * 0.9 * 0.05 + 0.9 * 0.02 - 0.03, 1e-15);
	CHECK_NEAR(v[1], 0.999 * 0.999 * 0.001 * 1 + 0.999 * 0.001 * 0.16 + 0.001 * 0.01, 1e-15);
}

TEST(adamw_cpu_without_weight_decay_moves_by_lr_first)
{
	/* step 1 with m0 = v0 = 0: the update is lr * g / (|g| + eps), about lr */
	struct sgd_args a = { .kind = OPTIM_ADAMW, .lr = 0.5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
			      .step = 1, .first_step = 1 };
	double p[3] = { 0, 0, 0 }, g[3] = { 4, -0.25, 0 }, m[3], v[3];
	adamw_step_cpu_f64(&a, 3, p, g, m, v);
	CHECK_NEAR(p[0], -0.5 * 4 / (4 + 1e-8), 1e-15);
	CHECK_NEAR(p[1], 0.5 * 0.25 / (0.25 + 1e-8), 1e-15);
	CHECK_NEAR(p[2], 0, 0);
}

static const double ls_logits[6] = { 1.0, 2.0, 0.5, -1.0, 0.0, 3.0 };
static const int32_t ls_labels[2] = { 1, 0 };

/* -sum_j q_j log p_j with q = (1 - e) onehot + e / k, written as the definition. */
static double ls_loss_by_definition(const double *l, double e)
{
	double loss = 0;
	for (int r = 0; r < 2; r++) {
		double s = 0;
		for (int j = 0; j < 3; j++)
			s += exp(l[r * 3 + j]);
		for (int j = 0; j < 3; j++)
			loss -= ((1 - e) * (j == ls_labels[r]) + e / 3) * (l[r * 3 + j] - log(s));
	}
	return loss / 2;
}

TEST(label_smoothing_loss_value_and_gradient)
{
	double d[6], l[6];
	int correct = -1;
	double loss = softmax_xent_ls_cpu_f64(2, 3, ls_logits, ls_labels, 0.1, d, &correct);
	CHECK_NEAR(loss, 2.2234596772660202, 1e-14); /* Python, from the definition */
	CHECK_NEAR(loss, ls_loss_by_definition(ls_logits, 0.1), 1e-14);
	CHECK_EQ_INT(correct, 1);
	/* central differences of the loss against the gradient */
	for (int i = 0; i < 6; i++) {
		memcpy(l, ls_logits, sizeof(l));
		l[i] += 1e-6;
		double up = softmax_xent_ls_cpu_f64(2, 3, l, ls_labels, 0.1, NULL, NULL);
		l[i] -= 2e-6;
		double down = softmax_xent_ls_cpu_f64(2, 3, l, ls_labels, 0.1, NULL, NULL);
		CHECK_NEAR(d[i], (up - down) / 2e-6, 1e-8);
	}
	/* the gradient of each row sums to zero: the targets sum to one */
	CHECK_NEAR(d[0] + d[1] + d[2], 0, 1e-15);
	/* smoothing 0 is the plain loss, bit for bit */
	double d0[6], dplain[6];
	double l0 = softmax_xent_ls_cpu_f64(2, 3, ls_logits, ls_labels, 0, d0, NULL);
	double lp = softmax_xent_cpu_f64(2, 3, ls_logits, ls_labels, dplain, NULL);
	CHECK(l0 == lp);
	CHECK(!memcmp(d0, dplain, sizeof(d0)));
	/* float: the same within float rounding */
	float lf[6], df[6];
	for (int i = 0; i < 6; i++)
		lf[i] = (float)ls_logits[i];
	CHECK_NEAR(softmax_xent_ls_cpu_f32(2, 3, lf, ls_labels, 0.1, df, NULL), 2.2234596772660202, 1e-6);
	for (int i = 0; i < 6; i++)
		CHECK_NEAR(df[i], d[i], 1e-7);
}

TEST(clip_grad_norm_factor)
{
	/* gradients (3, 4): norm 5; clip to 1 -> 1 / (5 + 1e-6) */
	struct sgd_args a = { .clip_norm = 1 };
	CHECK_NEAR(optim_grad_factor(&a, 25), 1 / (5 + 1e-6), 1e-16);
	a.clip_norm = 10; /* under the limit: untouched (torch clamps the coefficient to 1) */
	CHECK_NEAR(optim_grad_factor(&a, 25), 1, 0);
	/* accumulated over 2 micro-batches: the norm is that of the halved sum */
	a.grad_scale = 0.5;
	a.clip_norm = 1;
	CHECK_NEAR(optim_grad_factor(&a, 25), 0.5 / (2.5 + 1e-6), 1e-16);
	a.clip_norm = 0;
	CHECK_NEAR(optim_grad_factor(&a, 25), 0.5, 0);
	struct sgd_args none = { 0 };
	CHECK_NEAR(optim_grad_factor(&none, 25), 1, 0);
	double g[4] = { 3, 0, -4, 0 };
	CHECK_NEAR(sumsq_cpu_f64(4, g), 25, 0);
}

/* A small simple_cnn without dropout on the CPU backend in double. */
static struct net *small_net_p(int batch, struct optim_setup optim, double dropout)
{
	struct model_opts mo = model_defaults("simple_cnn");
	mo.batch = batch;
	mo.size = 16;
	mo.classes = 10;
	mo.dropout = dropout;
	mo.seed = 5;
	struct net *net = NULL;
	if (model_build("simple_cnn", &mo, &net) < 0)
		return NULL;
	net->optim = optim;
	if (net_setup(net, BACKEND_CPU, GP_F64, PREC_FP32) < 0) {
		net_free(net);
		return NULL;
	}
	return net;
}

static struct net *small_net(int batch, struct optim_setup optim)
{
	return small_net_p(batch, optim, 0);
}

TEST(clip_grad_norm_in_the_cpu_step)
{
	struct net *net = small_net(4, (struct optim_setup){ 0 });
	CHECK_MSG(net != NULL, "%s", gp_errmsg());
	if (!net)
		return;
	float *x = NULL;
	int32_t *y = NULL;
	CHECK(train_synthetic_batch(4, 3, 16, 16, 10, 1, &x, &y) == 0);
	CHECK(net_set_batch_data(net, x, y) == 0);
	CHECK(net_forward(net, 1) == 0 && net_loss(net, NULL, NULL) == 0 && net_backward(net) == 0);
	size_t n = net->params_count;
	double *p0 = malloc(n * sizeof(double)), *g = malloc(n * sizeof(double));
	memcpy(p0, net_cpu_params(net), n * sizeof(double));
	memcpy(g, net_cpu_grads(net), n * sizeof(double));
	double norm = 0;
	for (size_t i = 0; i < n; i++)
		norm += g[i] * g[i];
	norm = sqrt(norm);
	CHECK(norm > 0.1);
	/* plain SGD, lr 1: the parameters move by the clipped gradient */
	struct sgd_args a = { .lr = 1, .clip_norm = norm / 4 };
	CHECK(net_sgd_step(net, &a) == 0);
	const double *p1 = net_cpu_params(net), *g1 = net_cpu_grads(net);
	double coef = (norm / 4) / (norm + 1e-6), worst = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs(p1[i] - (p0[i] - coef * g[i]));
		worst = e > worst ? e : worst;
		CHECK_NEAR(g1[i], coef * g[i], 1e-15); /* scaled in place, as clip_grad_norm_ */
		if (test_failed())
			break;
	}
	CHECK_LE(worst, 1e-15);
	free(p0);
	free(g);
	free(x);
	free(y);
	net_free(net);
}

/* Three optimizer steps of a net at batch 2b over k = 2 micro-batches against a net at
 * batch 2b: the same images, the same parameters after each step. */
static void accum_matches_big_batch(struct sgd_args a)
{
	const int b = 3, steps = 3;
	struct net *big = small_net(2 * b, (struct optim_setup){ .kind = a.kind });
	struct net *acc = small_net(b, (struct optim_setup){ .kind = a.kind, .grad_accum = 2 });
	CHECK_MSG(big && acc, "%s", gp_errmsg());
	if (!big || !acc)
		goto out;
	/* accumulation keeps one more gradient array: the plan and the allocation say so */
	CHECK_EQ_INT(acc->plan.grads_bytes, 2 * big->plan.grads_bytes);
	CHECK_EQ_INT(acc->mem.cur_bytes[MEM_GRADS], 2 * big->mem.cur_bytes[MEM_GRADS]);
	struct sgd_args half = a;
	half.grad_scale = 0.5;
	size_t img = 3 * 16 * 16;
	for (int s = 0; s < steps; s++) {
		float *x = NULL;
		int32_t *y = NULL;
		CHECK(train_synthetic_batch(2 * b, 3, 16, 16, 10, 100 + s, &x, &y) == 0);
		double lbig = 0, lacc[2] = { 0 };
		CHECK(net_set_batch_data(big, x, y) == 0);
		CHECK(net_train_step(big, &a, &lbig, NULL) == 0);
		for (int m = 0; m < 2; m++) {
			CHECK(net_set_batch_data(acc, x + m * b * img, y + m * b) == 0);
			CHECK(net_forward(acc, 1) == 0);
			CHECK(net_loss(acc, &lacc[m], NULL) == 0);
			CHECK(net_backward(acc) == 0);
			CHECK(net_grad_accumulate(acc, m, 2) == 0);
		}
		CHECK(net_sgd_step(acc, &half) == 0);
		CHECK_NEAR((lacc[0] + lacc[1]) / 2, lbig, 1e-12 * fabs(lbig));
		free(x);
		free(y);
	}
	const double *pb = net_cpu_params(big), *pa = net_cpu_params(acc);
	double worst = 0, scale = 0;
	for (size_t i = 0; i < big->params_count; i++) {
		double d = fabs(pb[i] - pa[i]);
		worst = d > worst ? d : worst;
		scale = fabs(pb[i]) > scale ? fabs(pb[i]) : scale;
	}
	CHECK_MSG(worst <= 1e-6 * scale, "largest difference %.3g (largest parameter %.3g)", worst, scale);
	/* and the steps did move the parameters */
	struct net *fresh = small_net(b, (struct optim_setup){ 0 });
	double moved = 0;
	for (size_t i = 0; fresh && i < fresh->params_count; i++)
		moved = fmax(moved, fabs(((const double *)net_cpu_params(fresh))[i] - pb[i]));
	CHECK(moved > 1e-4);
	net_free(fresh);
out:
	net_free(big);
	net_free(acc);
}

TEST(grad_accum_equals_the_big_batch_sgd)
{
	accum_matches_big_batch((struct sgd_args){ .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3 });
}

TEST(grad_accum_equals_the_big_batch_adamw_clipped)
{
	accum_matches_big_batch((struct sgd_args){ .kind = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9,
						   .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
						   .clip_norm = 0.5 });
}

TEST(optimizer_state_only_for_adamw)
{
	struct net *sgd = small_net(2, (struct optim_setup){ 0 });
	struct net *adam = small_net(2, (struct optim_setup){ .kind = OPTIM_ADAMW });
	CHECK(sgd && adam);
	if (sgd && adam) {
		size_t n = sgd->params_count * sizeof(double);
		CHECK_EQ_INT(sgd->mem.cur_bytes[MEM_OPTIM], n);
		CHECK_EQ_INT(adam->mem.cur_bytes[MEM_OPTIM], 2 * n);
		CHECK_EQ_INT(adam->plan.optim_bytes, 2 * sgd->plan.optim_bytes);
		/* a step of the other kind, or accumulation without its buffer, is refused */
		struct sgd_args a = { .kind = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999 };
		CHECK(net_sgd_step(sgd, &a) < 0);
		CHECK(strstr(gp_errmsg(), "set up for SGD") != NULL);
		CHECK(net_grad_accumulate(sgd, 0, 2) < 0);
		gp_error_clear();
	}
	net_free(sgd);
	net_free(adam);
}

/* Each micro-batch of a step draws its own dropout masks, as each forward does in
 * torch; the next step's first micro-batch those of a fresh step. */
TEST(grad_accum_micro_batches_draw_new_dropout_masks)
{
	struct net *net = small_net_p(2, (struct optim_setup){ .grad_accum = 2 }, 0.5);
	CHECK_MSG(net != NULL, "%s", gp_errmsg());
	if (!net)
		return;
	float *x = NULL, l0[20], l1[20], l2[20];
	int32_t *y = NULL;
	CHECK(train_synthetic_batch(2, 3, 16, 16, 10, 3, &x, &y) == 0);
	CHECK(net_set_batch_data(net, x, y) == 0);
	CHECK(net_forward(net, 1) == 0 && net_logits_to_host(net, l0) == 0);
	CHECK(net_loss(net, NULL, NULL) == 0 && net_backward(net) == 0 && net_grad_accumulate(net, 0, 2) == 0);
	CHECK(net_forward(net, 1) == 0 && net_logits_to_host(net, l1) == 0);
	CHECK(memcmp(l0, l1, sizeof(l0)) != 0);
	CHECK(net_loss(net, NULL, NULL) == 0 && net_backward(net) == 0 && net_grad_accumulate(net, 1, 2) == 0);
	CHECK_EQ_INT(net->micro_batch, 0);
	/* no step taken: micro-batch 0 of the same step again, the same masks */
	CHECK(net_forward(net, 1) == 0 && net_logits_to_host(net, l2) == 0);
	CHECK(memcmp(l0, l2, sizeof(l0)) == 0);
	free(x);
	free(y);
	net_free(net);
}
