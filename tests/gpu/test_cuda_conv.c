/* Convolutions (cuDNN, cuBLAS products, own depthwise kernels) and linear layers
 * against their CPU f32 reference on fresh random inputs, and every distinct
 * convolution of the models. Outputs are poisoned with NaN before each run so unwritten
 * elements fail the comparison. Tolerances (relative error of the norm): strict FP32
 * 1e-5, TF32 5e-3. Without a device every test skips with the reason. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/rng.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"
#include "nn/models.h"

/* --- convolution ------------------------------------------------------------------------ */

static struct conv2d_args conv_args(int n, int c_in, int h, int c_out, int k, int stride, int pad,
				    int groups, int bias)
{
	struct conv2d_args a = { .n = n, .c_in = c_in, .h_in = h, .w_in = h + 2, .c_out = c_out,
				 .kh = k, .kw = k, .stride = stride, .pad = pad, .groups = groups,
				 .has_bias = bias };
	a.h_out = conv_out_size(a.h_in, k, stride, pad);
	a.w_out = conv_out_size(a.w_in, k, stride, pad);
	return a;
}

static const struct conv2d_args *conv_cases(size_t *count)
{
	static struct conv2d_args cases[9];
	cases[0] = conv_args(2, 3, 17, 8, 7, 2, 3, 1, 0);    /* stem 7x7 s2 p3 */
	cases[1] = conv_args(2, 16, 9, 16, 3, 1, 1, 1, 0);   /* 3x3 s1 */
	cases[2] = conv_args(2, 16, 9, 32, 3, 2, 1, 1, 0);   /* 3x3 s2 */
	cases[3] = conv_args(2, 32, 8, 16, 1, 1, 0, 1, 0);   /* 1x1 */
	cases[4] = conv_args(2, 16, 8, 32, 1, 2, 0, 1, 0);   /* 1x1 s2 downsample */
	cases[5] = conv_args(2, 24, 10, 24, 3, 1, 1, 24, 0); /* depthwise 3x3 */
	cases[6] = conv_args(2, 24, 10, 24, 3, 2, 1, 24, 0); /* depthwise 3x3 s2 */
	cases[7] = conv_args(2, 8, 7, 12, 3, 1, 1, 2, 1);    /* groups 2, bias */
	cases[8] = conv_args(3, 5, 6, 7, 3, 1, 0, 1, 1);     /* bias, no padding */
	*count = sizeof(cases) / sizeof(cases[0]);
	return cases;
}

static void check_conv(struct gpu *g, const struct conv2d_args *a, double tol)
{
	size_t nx = (size_t)a->n * a->c_in * a->h_in * a->w_in;
	size_t ny = (size_t)a->n * a->c_out * a->h_out * a->w_out;
	size_t nw = (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw;
	size_t nb = a->has_bias ? a->c_out : 0;
	float *x = host_rand(g, nx, 1, 0), *w = host_rand(g, nw, 0.3, 0), *y = host_f(g, ny);
	float *b = nb ? host_rand(g, nb, 1, 0) : NULL, *db = nb ? host_f(g, nb) : NULL;
	float *dy = host_rand(g, ny, 1, 0), *dx0 = host_rand(g, nx, 1, 0), *dw = host_f(g, nw);
	float *d_x = dev_from(g, x, nx), *d_w = dev_from(g, w, nw), *d_y = dev_f(g, ny);
	float *d_b = nb ? dev_from(g, b, nb) : NULL, *d_db = nb ? dev_f(g, nb) : NULL;
	float *d_dy = dev_from(g, dy, ny), *d_dx = dev_f(g, nx), *d_dw = dev_f(g, nw);
	char what[160];

	snprintf(what, sizeof(what), "conv n%d %d->%d %dx%d k%d s%d p%d g%d bias%d", a->n,
		 a->c_in, a->c_out, a->h_in, a->w_in, a->kh, a->stride, a->pad, a->groups,
		 a->has_bias);
	conv2d_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(conv2d_fwd_cuda(g->ctx, a, NULL, d_x, d_w, d_b, d_y));
	double e = rel_err_norm_f32(down(g, d_y, ny), y, ny);
	CHECK_MSG(e <= tol, "%s: forward error %.3g > %.3g", what, e, tol);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put(g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(g, d_dx, nx * sizeof(float));
		conv2d_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(conv2d_bwd_data_cuda(g->ctx, a, NULL, d_dy, d_w, d_dx, acc));
		e = rel_err_norm_f32(down(g, d_dx, nx), dx, nx);
		CHECK_MSG(e <= tol, "%s: backward data (accumulate %d) error %.3g > %.3g", what, acc,
			  e, tol);
	}
	conv2d_bwd_filter_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(conv2d_bwd_filter_cuda(g->ctx, a, NULL, d_x, d_dy, d_dw, d_db));
	e = rel_err_norm_f32(down(g, d_dw, nw), dw, nw);
	CHECK_MSG(e <= tol, "%s: backward filter error %.3g > %.3g", what, e, tol);
	if (nb) {
		e = rel_err_norm_f32(down(g, d_db, nb), db, nb);
		CHECK_MSG(e <= 1e-5, "%s: bias gradient error %.3g", what, e);
	}
}

TEST(cuda_conv_fp32_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 12);
	const struct conv2d_args *cases = conv_cases(&n);
	for (size_t i = 0; i < n; i++)
		check_conv(&g, &cases[i], 1e-5);
	gpu_close(&g);
}

TEST(cuda_conv_tf32_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 13);
	CHECK_OK(cuda_ctx_set_math(g.ctx, CUDA_MATH_TF32));
	const struct conv2d_args *cases = conv_cases(&n);
	for (size_t i = 0; i < n; i++)
		check_conv(&g, &cases[i], 5e-3);
	gpu_close(&g);
}

/* Batches beyond cuDNN's int sizes run as slices: with the limit lowered to 3 images'
 * worth, 8 images run as 3 + 3 + 2, the weight gradient summed over the slices. */
TEST(cuda_conv_batch_slices_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 16);
	struct conv2d_args a = conv_args(8, 6, 10, 8, 3, 1, 1, 1, 1);
	conv_cuda_set_max_elems((size_t)3 * 8 * 10 * 12); /* the output: 8 x 10 x 12 per image */
	check_conv(&g, &a, 1e-5);
	struct conv2d_args dw = conv_args(7, 8, 9, 8, 3, 2, 1, 8, 0); /* depthwise, stride 2, 2+2+2+1 */
	conv_cuda_set_max_elems((size_t)2 * 8 * 9 * 11); /* the input: 8 x 9 x 11 per image */
	check_conv(&g, &dw, 1e-5);
	conv_cuda_set_max_elems(0);
	conv2d_plans_clear(g.ctx);
	gpu_close(&g);
}

TEST(cuda_conv_plan_cache)
{
	struct gpu g;
	GPU_OPEN(&g, 14);
	struct conv2d_args a = conv_args(4, 16, 14, 32, 3, 1, 1, 1, 0);
	conv2d_plans_clear(g.ctx); /* the cache is the device's, shared with earlier tests */
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 0);
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 1);
	a.has_bias = 1; /* the bias does not change the plan */
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 1);
	a.n = 8; /* another batch is another shape */
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 2);
	CHECK_OK(cuda_ctx_set_math(g.ctx, CUDA_MATH_TF32));
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 3);
	/* Measuring scratch is gone: the only workspace left is the shared one. */
	CHECK_EQ_INT(g.mem.cur_bytes[MEM_WORKSPACE], g.ctx->workspace_bytes);
	CHECK(g.ctx->workspace_bytes <= g.ctx->workspace_limit_bytes);
	CHECK(g.mem.peak_bytes[MEM_WORKSPACE] >= g.ctx->workspace_bytes);

	/* With no workspace allowed, a new shape still gets a plan and nothing grows. */
	size_t ws = g.ctx->workspace_bytes;
	g.ctx->workspace_limit_bytes = 0;
	struct conv2d_args b = conv_args(2, 32, 12, 64, 3, 2, 1, 1, 0);
	CHECK_OK(conv2d_plan_cuda(g.ctx, &b));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 4);
	CHECK_EQ_INT(g.ctx->workspace_bytes, ws);
	check_conv(&g, &b, 5e-3);

	struct conv2d_args bad = conv_args(2, 6, 8, 8, 3, 1, 1, 4, 0); /* 6 % 4 != 0 */
	CHECK_EQ_INT(conv2d_plan_cuda(g.ctx, &bad), GP_EINVAL);
	conv2d_plans_clear(g.ctx);
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 0);
	gpu_close(&g);
}

/* --- linear ----------------------------------------------------------------------------- */

static void check_linear(struct gpu *g, const struct linear_args *a, double tol)
{
	size_t nx = (size_t)a->n * a->in, ny = (size_t)a->n * a->out, nw = (size_t)a->out * a->in;
	size_t nb = a->has_bias ? a->out : 0;
	float *x = host_rand(g, nx, 1, 0), *w = host_rand(g, nw, 0.1, 0), *y = host_f(g, ny);
	float *b = nb ? host_rand(g, nb, 1, 0) : NULL, *db = nb ? host_f(g, nb) : NULL;
	float *dy = host_rand(g, ny, 1, 0), *dx0 = host_rand(g, nx, 1, 0), *dw = host_f(g, nw);
	float *d_x = dev_from(g, x, nx), *d_w = dev_from(g, w, nw), *d_y = dev_f(g, ny);
	float *d_b = nb ? dev_from(g, b, nb) : NULL, *d_db = nb ? dev_f(g, nb) : NULL;
	float *d_dy = dev_from(g, dy, ny), *d_dx = dev_f(g, nx), *d_dw = dev_f(g, nw);

	linear_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(linear_fwd_cuda(g->ctx, a, d_x, d_w, d_b, d_y));
	CHECK_LE(rel_err_norm_f32(down(g, d_y, ny), y, ny), tol);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put(g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(g, d_dx, nx * sizeof(float));
		linear_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(linear_bwd_data_cuda(g->ctx, a, d_dy, d_w, d_dx, acc));
		CHECK_LE(rel_err_norm_f32(down(g, d_dx, nx), dx, nx), tol);
	}
	linear_bwd_weight_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(linear_bwd_weight_cuda(g->ctx, a, d_x, d_dy, d_dw, d_db));
	CHECK_LE(rel_err_norm_f32(down(g, d_dw, nw), dw, nw), tol);
	if (nb)
		CHECK_LE(rel_err_norm_f32(down(g, d_db, nb), db, nb), 1e-5);
}

TEST(cuda_linear_matches_cpu)
{
	static const struct linear_args cfg[] = {
		{ .n = 33, .in = 517, .out = 129, .has_bias = 1 },
		{ .n = 8, .in = 64, .out = 10, .has_bias = 0 },
		{ .n = 64, .in = 2048, .out = 1000, .has_bias = 1 }, /* ResNet-50 head */
	};
	struct gpu g;
	GPU_OPEN(&g, 16);
	for (int math = CUDA_MATH_FP32; math <= CUDA_MATH_TF32; math++) {
		CHECK_OK(cuda_ctx_set_math(g.ctx, math));
		for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++)
			check_linear(&g, &cfg[t], math == CUDA_MATH_TF32 ? 5e-3 : 1e-5);
	}
	gpu_close(&g);
}

/* Every distinct convolution of the models at a small batch and size, under both
 * FP32 algorithm policies: all algorithms competing (the default, as PyTorch's
 * cudnn.benchmark) and direct summation only. */
static void check_model_convs(const char *model, int size, int batch, int direct_only)
{
	struct model_opts o = model_defaults(model);
	o.size = size;
	o.batch = batch;
	o.classes = 10;
	struct net *net = NULL;
	CHECK(model_build(model, &o, &net) == 0);
	if (!net)
		return;
	for (int i = 0; i < net->n_nodes; i++) {
		if (net->nodes[i].op != OP_CONV2D)
			continue;
		int seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = net->nodes[j].op == OP_CONV2D &&
			       !memcmp(&net->nodes[j].a.conv, &net->nodes[i].a.conv, sizeof(struct conv2d_args));
		if (seen)
			continue;
		struct gpu g;
		if (gpu_open(&g, 100 + i, GPU_RNG_STREAM) != 0) {
			test_fail(__FILE__, __LINE__, "gpu_open: %s", gp_errmsg());
			break;
		}
		g.ctx->fp32_direct_only = direct_only;
		int failed_before = test_failed();
		check_conv(&g, &net->nodes[i].a.conv, 1e-5);
		if (test_failed() && !failed_before)
			printf("      %s %s (%s)\n", model, net->nodes[i].name,
			       direct_only ? "direct algorithms only" : "all algorithms");
		gpu_close(&g);
	}
	net_free(net);
}

TEST(cuda_conv_model_layers_match_cpu)
{
	char why[256];
	if (!cuda_available(why, sizeof(why)))
		SKIP("no CUDA device");
	for (int direct = 1; direct >= 0; direct--) {
		check_model_convs("resnet18", 64, 8, direct);
		check_model_convs("mobilenet_v2", 64, 8, direct);
	}
}
