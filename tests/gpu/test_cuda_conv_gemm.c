/* FP32 NCHW 1x1 convolutions as cuBLAS products (gemm_cublas.c) against the CPU f32
 * reference: forward and backward data image by image, the weight gradient both ways
 * (per-image products summed, and channel-major copies into one product), in one batch
 * and in batches of one image; and their place in the convolution plan. Float sums
 * against float sums: 1e-5 strict, 5e-3 in TF32. Without a device every test skips
 * with the reason. */
#include <stdlib.h>
#include <string.h>

#define GPU_RNG_STREAM 24
#include "harness.h"
#include "ops/cuda/cuda_ops.h"

static struct conv2d_args pw_args(int n, int c, int k, int h, int w)
{
	struct conv2d_args a = { .n = n, .c_in = c, .h_in = h, .w_in = w, .c_out = k, .kh = 1, .kw = 1,
				 .stride = 1, .pad = 0, .groups = 1, .h_out = h, .w_out = w };
	return a;
}

/* n, c, k, h, w: per-image products (c*k <= (c+k)*h*w) at 35 and 64 pixels;
 * channel-major copies at 6 pixels (rows not a multiple of 4: the scalar copy) and 4
 * (the vector copy). */
static const int pw_cases[][5] = {
	{ 3, 16, 24, 5, 7 },
	{ 4, 8, 8, 8, 8 },
	{ 2, 64, 96, 2, 3 },
	{ 3, 32, 48, 2, 2 },
};
#define N_PW ((int)(sizeof(pw_cases) / sizeof(pw_cases[0])))

static double err_down(struct gpu *g, const float *d, const float *want, size_t n)
{
	return rel_err_norm_f32(down(g, d, n), want, n);
}

TEST(cuda_conv1x1_gemm_nchw_matches_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 1);
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F32, 0));
	for (int m = 0; m < 2; m++) {
		CHECK_OK(cuda_ctx_set_math(g.ctx, m ? CUDA_MATH_TF32 : CUDA_MATH_FP32));
		double tol = m ? 5e-3 : 1e-5;
		for (int t = 0; t < N_PW; t++) {
			const int *s = pw_cases[t];
			struct conv2d_args a = pw_args(s[0], s[1], s[2], s[3], s[4]);
			CHECK(conv1x1_gemm_ok(g.ctx, &a));
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t p = (size_t)a.h_in * a.w_in, nx = a.n * a.c_in * p, ny = a.n * a.c_out * p;
			size_t nw = (size_t)a.c_out * a.c_in;
			float *x = host_rand(&g, nx, 1, 0), *w = host_rand(&g, nw, 0.3, 0), *dy = host_rand(&g, ny, 1, 0);
			float *dx0 = host_rand(&g, nx, 1, 0);
			float *y = host_f(&g, ny), *dx = host_f(&g, nx), *dw = host_f(&g, nw);
			conv2d_fwd_cpu_f32(&a, x, w, NULL, y);
			conv2d_bwd_data_cpu_f32(&a, dy, w, dx, 0);
			conv2d_bwd_filter_cpu_f32(&a, x, dy, dw, NULL);
			float *d_x = dev_from(&g, x, nx), *d_w = dev_from(&g, w, nw), *d_dy = dev_from(&g, dy, ny);
			float *d_y = dev_f(&g, ny), *d_dx = dev_from(&g, dx0, nx);

			CHECK_OK(conv1x1_gemm_fwd_cuda(g.ctx, &a, d_x, d_w, d_y));
			double e = err_down(&g, d_y, y, ny);
			CHECK_MSG(e <= tol, "math %d case %d forward: relative error %.3g", m, t, e);
			/* backward data adds to what is there when asked */
			CHECK_OK(conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx, 1));
			float *sum = host_f(&g, nx);
			for (size_t i = 0; i < nx; i++)
				sum[i] = dx0[i] + dx[i];
			e = err_down(&g, d_dx, sum, nx);
			CHECK_MSG(e <= tol, "math %d case %d backward data (accumulated): relative error %.3g", m, t, e);
			CHECK_OK(conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx, 0));
			e = err_down(&g, d_dx, dx, nx);
			CHECK_MSG(e <= tol, "math %d case %d backward data: relative error %.3g", m, t, e);

			size_t floats = 0;
			CHECK_OK(conv1x1_gemm_scratch_floats(g.ctx, &a, &floats));
			size_t one = floats / a.n; /* asked for all images in one batch here */
			CHECK_EQ_INT(one * a.n, floats);
			CHECK_EQ_INT(one, nw <= (a.c_in + a.c_out) * p ? nw + 1 : (a.c_in + a.c_out) * p);
			float *d_scratch = dev_f(&g, floats), *d_dw = dev_f(&g, nw), *d_dw1 = dev_f(&g, nw);
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 0, d_scratch, floats));
			e = err_down(&g, d_dw, dw, nw);
			CHECK_MSG(e <= tol, "math %d case %d weight gradient: relative error %.3g", m, t, e);
			/* a batch an image: the same sums, in as many steps */
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw1, 0, d_scratch, one));
			e = err_down(&g, d_dw1, dw, nw);
			CHECK_MSG(e <= tol, "math %d case %d weight gradient a batch an image: relative error %.3g", m,
				  t, e);
			/* the same bits on a second run; accumulate adds to what is there */
			float *first = copy_f(&g, down(&g, d_dw, nw), nw);
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 0, d_scratch, floats));
			CHECK_MSG(memcmp(first, down(&g, d_dw, nw), nw * sizeof(float)) == 0, "math %d case %d: two runs differ",
				  m, t);
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 1, d_scratch, floats));
			float *twice = host_f(&g, nw);
			for (size_t i = 0; i < nw; i++)
				twice[i] = 2 * dw[i];
			CHECK_LE(err_down(&g, d_dw, twice, nw), tol);
			/* too little scratch is refused, not overrun */
			CHECK_EQ_INT(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 0, d_scratch, one - 1),
				     GP_EINVAL);
			gp_error_clear();
			gpu_release(&g, dev_mark, host_mark);
		}
	}
	CHECK_OK(cuda_ctx_set_math(g.ctx, CUDA_MATH_FP32));
	gpu_close(&g);
}

/* What the products refuse, so that the plan never hands them such a shape. */
TEST(cuda_conv1x1_gemm_refuses_what_it_does_not_take)
{
	struct gpu g;
	GPU_OPEN(&g, 2);
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F32, 0));
	struct conv2d_args a = pw_args(2, 64, 256, 56, 56), b;
	CHECK(conv1x1_gemm_ok(g.ctx, &a));
	b = a;
	b.stride = 2;
	b.h_out = b.w_out = 28;
	CHECK(!conv1x1_gemm_ok(g.ctx, &b));
	b = a;
	b.kh = b.kw = 3;
	b.pad = 1;
	CHECK(!conv1x1_gemm_ok(g.ctx, &b));
	b = a;
	b.groups = 2;
	CHECK(!conv1x1_gemm_ok(g.ctx, &b));
	b = a;
	b.n = 65536; /* cuBLAS's batches */
	CHECK(!conv1x1_gemm_ok(g.ctx, &b));
	size_t floats = 1;
	CHECK_EQ_INT(conv1x1_gemm_scratch_floats(g.ctx, &b, &floats), GP_EUNSUPPORTED);
	gp_error_clear();
	CHECK_EQ_INT(floats, 0);
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F16, 0)); /* 16-bit NCHW */
	CHECK(!conv1x1_gemm_ok(g.ctx, &a));
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F16, 1)); /* 16-bit NHWC: one product, no scratch */
	CHECK(conv1x1_gemm_ok(g.ctx, &a));
	CHECK_OK(conv1x1_gemm_scratch_floats(g.ctx, &a, &floats));
	CHECK_EQ_INT(floats, 0);
	gpu_close(&g);
}

/* Through the convolution calls with cuDNN's heuristics, where the plan takes the
 * products without timing: each direction matches the direct call bit for bit, the
 * weight gradient's scratch is the plan's workspace, it stays off the side stream, and
 * the float-gradient call (16 bits only) declines. */
TEST(cuda_conv1x1_gemm_nchw_planned)
{
	struct gpu g;
	GPU_OPEN(&g, 3);
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F32, 0));
	g.ctx->heuristic_algos = 1;
	struct conv2d_args a = pw_args(4, 48, 80, 6, 6);
	size_t p = 36, nx = a.n * a.c_in * p, ny = a.n * a.c_out * p, nw = (size_t)a.c_out * a.c_in;
	float *d_x = dev_from(&g, host_rand(&g, nx, 1, 0), nx), *d_w = dev_from(&g, host_rand(&g, nw, 0.3, 0), nw);
	float *d_dy = dev_from(&g, host_rand(&g, ny, 1, 0), ny);
	float *d_y = dev_f(&g, ny), *d_y2 = dev_f(&g, ny), *d_dx = dev_f(&g, nx), *d_dx2 = dev_f(&g, nx);
	float *d_dw = dev_f(&g, nw), *d_dw2 = dev_f(&g, nw);
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	size_t fwd = 1, bwd = 1, wgrad = 0, floats = 0;
	CHECK_OK(conv2d_ws_bytes_cuda(g.ctx, &a, &fwd, &bwd, &wgrad));
	CHECK_OK(conv1x1_gemm_scratch_floats(g.ctx, &a, &floats));
	CHECK(floats > 0);
	CHECK_EQ_INT(fwd, 0);
	CHECK_EQ_INT(bwd, 0);
	CHECK_EQ_INT(wgrad, floats * sizeof(float));
	CHECK(!conv2d_wgrad_is_cudnn(g.ctx, &a));

	CHECK_OK(conv2d_fwd_cuda(g.ctx, &a, NULL, d_x, d_w, NULL, d_y));
	CHECK_OK(conv1x1_gemm_fwd_cuda(g.ctx, &a, d_x, d_w, d_y2));
	CHECK(memcmp(down(&g, d_y, ny), down(&g, d_y2, ny), ny * sizeof(float)) == 0);
	CHECK_OK(conv2d_bwd_data_cuda(g.ctx, &a, NULL, d_dy, d_w, d_dx, 0));
	CHECK_OK(conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx2, 0));
	CHECK(memcmp(down(&g, d_dx, nx), down(&g, d_dx2, nx), nx * sizeof(float)) == 0);
	float *d_scratch = dev_f(&g, floats);
	CHECK_OK(conv2d_bwd_filter_cuda(g.ctx, &a, NULL, d_x, d_dy, d_dw, NULL));
	CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw2, 0, d_scratch, floats));
	CHECK(memcmp(down(&g, d_dw, nw), down(&g, d_dw2, nw), nw * sizeof(float)) == 0);
	CHECK_EQ_INT(conv2d_bwd_filter_f32_cuda(g.ctx, &a, NULL, d_x, d_dy, d_dw, NULL), 0);
	g.ctx->heuristic_algos = 0;
	gpu_close(&g);
}
