/* 1x1 convolutions as cuBLAS products (gemm_cublas.c) against the CPU f32 reference.
 * FP32 NCHW: forward and backward data image by image, the weight gradient both ways
 * (per-image products summed, and channel-major copies into one product), at stride 1
 * and on every s-th pixel, in one batch and in batches of one image; float sums against
 * float sums, 1e-5 strict, 5e-3 in TF32. 16-bit NHWC at strides 2 and 3 on the same
 * rounded values (outputs rounded once: tol_for). And their place in the convolution
 * plan. Without a device every test skips with the reason. */
#include <stdlib.h>
#include <string.h>

#define GPU_RNG_STREAM 24
#include "harness.h"
#include "ops/cuda/conv_plan.h"
#include "ops/cuda/cuda_ops.h"

static struct conv2d_args pw_args(int n, int c, int k, int h, int w, int stride)
{
	struct conv2d_args a = { .n = n, .c_in = c, .h_in = h, .w_in = w, .c_out = k, .kh = 1, .kw = 1,
				 .stride = stride, .pad = 0, .groups = 1, .h_out = (h - 1) / stride + 1,
				 .w_out = (w - 1) / stride + 1 };
	return a;
}

/* n, c, k, h, w, stride: per-image products (c*k <= (c+k)*pixels) at 35 and 64 pixels;
 * channel-major copies at 6 pixels (rows not a multiple of 4: the scalar copy) and 4
 * (the vector copy); strided: 5 x 7 to 3 x 4, 4 x 6 to 2 x 3 (copies), 7 x 7 to 3 x 3. */
static const int pw_cases[][6] = {
	{ 3, 16, 24, 5, 7, 1 }, { 4, 8, 8, 8, 8, 1 }, { 2, 64, 96, 2, 3, 1 }, { 3, 32, 48, 2, 2, 1 },
	{ 3, 16, 24, 5, 7, 2 }, { 2, 64, 96, 4, 6, 2 }, { 2, 8, 8, 7, 7, 3 },
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
			struct conv2d_args a = pw_args(s[0], s[1], s[2], s[3], s[4], s[5]);
			CHECK(conv1x1_gemm_ok(g.ctx, &a));
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t p_in = (size_t)a.h_in * a.w_in, p = (size_t)a.h_out * a.w_out;
			size_t nx = a.n * a.c_in * p_in, ny = a.n * a.c_out * p, nw = (size_t)a.c_out * a.c_in;
			float *x = host_rand(&g, nx, 1, 0), *w = host_rand(&g, nw, 0.3, 0), *dy = host_rand(&g, ny, 1, 0);
			float *dx0 = host_rand(&g, nx, 1, 0);
			float *y = host_f(&g, ny), *dx = host_f(&g, nx), *dw = host_f(&g, nw);
			conv2d_fwd_cpu_f32(&a, x, w, NULL, y);
			conv2d_bwd_data_cpu_f32(&a, dy, w, dx, 0);
			conv2d_bwd_filter_cpu_f32(&a, x, dy, dw, NULL);
			float *d_x = dev_from(&g, x, nx), *d_w = dev_from(&g, w, nw), *d_dy = dev_from(&g, dy, ny);
			float *d_y = dev_f(&g, ny), *d_dx = dev_from(&g, dx0, nx);
			size_t bytes[3], one[3];
			void *d_scratch[3];
			for (int dir = 0; dir < 3; dir++) {
				CHECK_OK(conv1x1_gemm_scratch_bytes(g.ctx, &a, dir, &bytes[dir]));
				CHECK_MSG((bytes[dir] > 0) == (a.stride > 1 || dir == 2), "case %d dir %d: %zu bytes", t, dir,
					  bytes[dir]);
				/* asked for all images in one batch here; one image's is that less the
				 * other images' */
				one[dir] = bytes[dir] ? bytes[dir] - (bytes[dir] - 256) / a.n * (a.n - 1) : 0;
				d_scratch[dir] = bytes[dir] ? dev_bytes(&g, bytes[dir]) : NULL;
			}

			for (int b = 0; b < 2; b++) { /* all images in one batch, then a batch an image */
				size_t sb = b ? one[0] : bytes[0];
				CHECK_OK(conv1x1_gemm_fwd_cuda(g.ctx, &a, d_x, d_w, d_y, d_scratch[0], sb));
				double e = err_down(&g, d_y, y, ny);
				CHECK_MSG(e <= tol, "math %d case %d batches %d forward: relative error %.3g", m, t, b, e);
			}
			/* backward data adds to what is there when asked */
			CHECK_OK(conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx, 1, d_scratch[1], bytes[1]));
			float *sum = host_f(&g, nx);
			for (size_t i = 0; i < nx; i++)
				sum[i] = dx0[i] + dx[i];
			double e = err_down(&g, d_dx, sum, nx);
			CHECK_MSG(e <= tol, "math %d case %d backward data (accumulated): relative error %.3g", m, t, e);
			for (int b = 0; b < 2; b++) {
				poison(&g, d_dx, nx * sizeof(float)); /* every pixel written, the skipped ones 0 */
				CHECK_OK(conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx, 0, d_scratch[1],
								    b ? one[1] : bytes[1]));
				e = err_down(&g, d_dx, dx, nx);
				CHECK_MSG(e <= tol, "math %d case %d batches %d backward data: relative error %.3g", m, t, b,
					  e);
			}

			float *d_dw = dev_f(&g, nw), *d_dw1 = dev_f(&g, nw);
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 0, d_scratch[2], bytes[2]));
			e = err_down(&g, d_dw, dw, nw);
			CHECK_MSG(e <= tol, "math %d case %d weight gradient: relative error %.3g", m, t, e);
			/* a batch an image: the same sums, in as many steps */
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw1, 0, d_scratch[2], one[2]));
			e = err_down(&g, d_dw1, dw, nw);
			CHECK_MSG(e <= tol, "math %d case %d weight gradient a batch an image: relative error %.3g", m,
				  t, e);
			/* the same bits on a second run; accumulate adds to what is there */
			float *first = copy_f(&g, down(&g, d_dw, nw), nw);
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 0, d_scratch[2], bytes[2]));
			CHECK_MSG(memcmp(first, down(&g, d_dw, nw), nw * sizeof(float)) == 0, "math %d case %d: two runs differ",
				  m, t);
			CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 1, d_scratch[2], bytes[2]));
			float *twice = host_f(&g, nw);
			for (size_t i = 0; i < nw; i++)
				twice[i] = 2 * dw[i];
			CHECK_LE(err_down(&g, d_dw, twice, nw), tol);
			/* too little scratch is refused, not overrun */
			for (int dir = 0; dir < 3; dir++) {
				if (!bytes[dir])
					continue;
				int rc = dir == 0   ? conv1x1_gemm_fwd_cuda(g.ctx, &a, d_x, d_w, d_y, d_scratch[0], one[0] - 1)
					 : dir == 1 ? conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx, 0, d_scratch[1],
										 one[1] - 1)
						    : conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw, 0,
										   d_scratch[2], one[2] - 1);
				CHECK_MSG(rc == GP_EINVAL, "case %d dir %d: %d with too little scratch", t, dir, rc);
				gp_error_clear();
			}
			gpu_release(&g, dev_mark, host_mark);
		}
	}
	CHECK_OK(cuda_ctx_set_math(g.ctx, CUDA_MATH_FP32));
	gpu_close(&g);
}

/* 16-bit NHWC products of a (forward, backward data into dx and added to it, weight
 * gradient) against the CPU on the same rounded values: outputs rounded once
 * (tol_for), the float weight gradient 1e-5. sc, bytes: each direction's scratch. */
static void check_nhwc16_products(struct gpu *g, enum gp_dtype ht, const struct conv2d_args *a, int t,
				  void *const sc[3], const size_t bytes[3])
{
	size_t p_in = (size_t)a->h_in * a->w_in, p = (size_t)a->h_out * a->w_out;
	size_t nx = a->n * a->c_in * p_in, ny = a->n * a->c_out * p, nw = (size_t)a->c_out * a->c_in;
	float *x = host_rand_h(g, ht, nx, 1, 0), *w = host_rand_h(g, ht, nw, 0.3, 0);
	float *dy = host_rand_h(g, ht, ny, 1, 0), *dx0 = host_rand_h(g, ht, nx, 1, 0);
	float *y = host_f(g, ny), *dx = host_f(g, nx), *dw = host_f(g, nw), *sum = host_f(g, nx);
	conv2d_fwd_cpu_f32(a, x, w, NULL, y);
	conv2d_bwd_data_cpu_f32(a, dy, w, dx, 0);
	conv2d_bwd_filter_cpu_f32(a, x, dy, dw, NULL);
	for (size_t i = 0; i < nx; i++)
		sum[i] = dx0[i] + dx[i];
	void *d_x = dev_bytes(g, nx * 2), *d_w = dev_bytes(g, nw * 2), *d_dy = dev_bytes(g, ny * 2);
	void *d_y = dev_bytes(g, ny * 2), *d_dx = dev_bytes(g, nx * 2);
	put_h(g, ht, d_x, host_to_nhwc(g, x, 4, a->n, a->c_in, (int)p_in), nx);
	put_h(g, ht, d_w, w, nw); /* K x C: the same in both layouts */
	put_h(g, ht, d_dy, host_to_nhwc(g, dy, 4, a->n, a->c_out, (int)p), ny);
	CHECK_OK(conv1x1_gemm_fwd_cuda(g->ctx, a, d_x, d_w, d_y, sc[0], bytes[0]));
	float *got = host_to_nchw(g, down_h(g, ht, d_y, ny), 4, a->n, a->c_out, (int)p);
	double e = rel_err_norm_f32(got, y, ny);
	CHECK_MSG(e <= tol_for(ht), "%s case %d forward: relative error %.3g", dtype_name(ht), t, e);
	poison(g, d_dx, nx * 2);
	CHECK_OK(conv1x1_gemm_bwd_data_cuda(g->ctx, a, d_dy, d_w, d_dx, 0, sc[1], bytes[1]));
	got = host_to_nchw(g, down_h(g, ht, d_dx, nx), 4, a->n, a->c_in, (int)p_in);
	e = rel_err_norm_f32(got, dx, nx);
	CHECK_MSG(e <= tol_for(ht), "%s case %d backward data: relative error %.3g", dtype_name(ht), t, e);
	put_h(g, ht, d_dx, host_to_nhwc(g, dx0, 4, a->n, a->c_in, (int)p_in), nx);
	CHECK_OK(conv1x1_gemm_bwd_data_cuda(g->ctx, a, d_dy, d_w, d_dx, 1, sc[1], bytes[1]));
	got = host_to_nchw(g, down_h(g, ht, d_dx, nx), 4, a->n, a->c_in, (int)p_in);
	e = rel_err_norm_f32(got, sum, nx);
	CHECK_MSG(e <= tol_for(ht), "%s case %d backward data (accumulated): relative error %.3g",
		  dtype_name(ht), t, e);
	float *d_dw = dev_f(g, nw);
	CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g->ctx, a, d_x, d_dy, d_dw, 0, sc[2], bytes[2]));
	e = err_down(g, d_dw, dw, nw);
	CHECK_MSG(e <= 1e-5, "%s case %d weight gradient: relative error %.3g", dtype_name(ht), t, e);
}

/* 16-bit NHWC at strides 2 and 3: the subsampled pixels' copies (16-byte pieces at 8
 * and 16 channels, 2-byte ones at 3) and the rows' products, against the CPU on the
 * same rounded values; backward data into dx and added to it. */
TEST(cuda_conv1x1_gemm_nhwc16_strided_matches_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 4);
	static const enum gp_dtype hts[] = { GP_F16, GP_BF16 };
	static const int cases[][6] = { { 2, 16, 24, 6, 7, 2 }, { 3, 8, 16, 7, 5, 3 }, { 2, 3, 8, 5, 5, 2 } };
	for (int h = 0; h < 2; h++)
		for (int t = 0; t < 3; t++) {
			enum gp_dtype ht = hts[h];
			CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
			const int *s = cases[t];
			struct conv2d_args a = pw_args(s[0], s[1], s[2], s[3], s[4], s[5]);
			CHECK(conv1x1_gemm_ok(g.ctx, &a));
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t bytes[3];
			void *sc[3];
			for (int dir = 0; dir < 3; dir++) {
				CHECK_OK(conv1x1_gemm_scratch_bytes(g.ctx, &a, dir, &bytes[dir]));
				CHECK_MSG((bytes[dir] > 0) == (dir < 2 || a.stride > 1), "dir %d: %zu bytes", dir, bytes[dir]);
				sc[dir] = dev_bytes(&g, bytes[dir]);
			}
			check_nhwc16_products(&g, ht, &a, t, sc, bytes);
			gpu_release(&g, dev_mark, host_mark);
		}
	gpu_close(&g);
}

/* 16-bit NHWC at stride 1 through cuBLASLt's candidates (conv1x1_gemm_tune_cuda, as the
 * plan times them): each direction's products timed once per context (backward data
 * alone and adding into dx), and with the test hook taking the fastest candidate
 * whatever its margin, the products that run it against the CPU on the same rounded
 * values, as cublasGemmEx's are. */
TEST(cuda_conv1x1_gemm_nhwc16_cublaslt_picks_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 5);
	static const enum gp_dtype hts[] = { GP_F16, GP_BF16 };
	static const int cases[][6] = { { 8, 64, 256, 14, 14, 1 }, { 4, 256, 64, 7, 9, 1 } };
	gemm_lt_force(1);
	int timed = 0, taken = 0;
	for (int h = 0; h < 2; h++)
		for (int t = 0; t < 2; t++) {
			enum gp_dtype ht = hts[h];
			CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
			const int *s = cases[t];
			struct conv2d_args a = pw_args(s[0], s[1], s[2], s[3], s[4], s[5]);
			CHECK(conv1x1_gemm_ok(g.ctx, &a));
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t p = (size_t)a.h_out * a.w_out;
			size_t nx = a.n * a.c_in * p, ny = a.n * a.c_out * p, nw = (size_t)a.c_out * a.c_in;
			/* timed on scratch buffers of the same shapes, as the plan's */
			void *t_x = dev_bytes(&g, nx * 2), *t_w = dev_bytes(&g, nw * 2), *t_y = dev_bytes(&g, ny * 2);
			float *t_dw = dev_f(&g, nw);
			for (int dir = 0; dir < 3; dir++)
				CHECK_OK(conv1x1_gemm_tune_cuda(g.ctx, &a, dir, t_x, t_w, t_y, t_dw));
			int now_taken, now = gemm_lt_picks(g.ctx, &now_taken);
			CHECK_MSG(now == timed + 4, "%s case %d: %d products timed, want %d", dtype_name(ht), t, now,
				  timed + 4);
			for (int dir = 0; dir < 3; dir++) /* again: nothing more to time */
				CHECK_OK(conv1x1_gemm_tune_cuda(g.ctx, &a, dir, t_x, t_w, t_y, t_dw));
			CHECK_EQ_INT(gemm_lt_picks(g.ctx, &now_taken), now);
			timed = now;
			taken = now_taken;
			void *const sc[3] = { NULL, NULL, NULL };
			const size_t bytes[3] = { 0, 0, 0 };
			check_nhwc16_products(&g, ht, &a, t, sc, bytes);
			gpu_release(&g, dev_mark, host_mark);
		}
	printf("      %d products timed, %d run cuBLASLt's candidate\n", timed, taken);
	CHECK_MSG(taken > 0, "no product took a cuBLASLt candidate (%d timed)", timed);
	gemm_lt_force(0);
	gpu_close(&g);
}

/* What the products refuse, so that the plan never hands them such a shape, and the
 * scratch they ask for on ResNet-50's shapes at batch 256: pure functions of the
 * context's mode, so this runs without a device too. */
TEST(cuda_conv1x1_gemm_refuses_what_it_does_not_take)
{
	struct cuda_ctx ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.act_dtype = GP_F32; /* NCHW */
	struct conv2d_args a = pw_args(2, 64, 256, 56, 56, 1), b;
	CHECK(conv1x1_gemm_ok(&ctx, &a));
	b = pw_args(2, 64, 256, 56, 56, 2);
	CHECK(conv1x1_gemm_ok(&ctx, &b));
	b.pad = 1; /* padded */
	b.h_out = b.w_out = 29;
	CHECK(!conv1x1_gemm_ok(&ctx, &b));
	b = a;
	b.h_out = 28; /* an output shape that is not the stride's */
	CHECK(!conv1x1_gemm_ok(&ctx, &b));
	b = a;
	b.kh = b.kw = 3;
	b.pad = 1;
	CHECK(!conv1x1_gemm_ok(&ctx, &b));
	b = a;
	b.groups = 2;
	CHECK(!conv1x1_gemm_ok(&ctx, &b));
	b = a;
	b.n = 65536; /* cuBLAS's batches */
	CHECK(!conv1x1_gemm_ok(&ctx, &b));
	size_t bytes = 1;
	CHECK_EQ_INT(conv1x1_gemm_scratch_bytes(&ctx, &b, 2, &bytes), GP_EUNSUPPORTED);
	gp_error_clear();
	CHECK_EQ_INT(bytes, 0);

	/* layer1's 256 -> 64 at 56 x 56: per-image products, (256 * 64 + 1) floats an image,
	 * all 256 images in one batch; no scratch forward or backward data */
	struct conv2d_args l1 = pw_args(256, 256, 64, 56, 56, 1);
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &l1, 2, &bytes));
	CHECK_EQ_INT(bytes, (size_t)(256 * 64 + 1) * 4 * 256 + 256);
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &l1, 0, &bytes));
	CHECK_EQ_INT(bytes, 0);
	/* layer4's 2048 -> 512 at 7 x 7: channel-major copies, (2048 + 512) * 49 floats an
	 * image, 133 images a batch within 64 MiB */
	struct conv2d_args l4 = pw_args(256, 2048, 512, 7, 7, 1);
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &l4, 2, &bytes));
	CHECK_EQ_INT(bytes, (size_t)2560 * 49 * 4 * 133 + 256);
	/* layer3's downsampling, 512 -> 1024 at stride 2: the gathered 14 x 14 pixels (167
	 * images a batch) forward and backward data; with the copies' products, 41 */
	struct conv2d_args ds = pw_args(256, 512, 1024, 28, 28, 2);
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &ds, 0, &bytes));
	CHECK_EQ_INT(bytes, (size_t)512 * 196 * 4 * 167 + 256);
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &ds, 1, &bytes));
	CHECK_EQ_INT(bytes, (size_t)512 * 196 * 4 * 167 + 256);
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &ds, 2, &bytes));
	CHECK_EQ_INT(bytes, ((size_t)512 * 196 + (size_t)1536 * 196) * 4 * 41 + 256);

	ctx.act_dtype = GP_F16; /* 16-bit NCHW */
	CHECK(!conv1x1_gemm_ok(&ctx, &a));
	ctx.nhwc = 1; /* 16-bit NHWC: one product, no scratch at stride 1 */
	CHECK(conv1x1_gemm_ok(&ctx, &a));
	for (int dir = 0; dir < 3; dir++) {
		CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &a, dir, &bytes));
		CHECK_EQ_INT(bytes, 0);
	}
	/* at stride 2 the gathered pixels, 2 bytes an element */
	CHECK_OK(conv1x1_gemm_scratch_bytes(&ctx, &ds, 2, &bytes));
	CHECK_EQ_INT(bytes, (size_t)512 * 196 * 2 * 256 + 256);
}

/* Through the convolution calls with cuDNN's heuristics, where the plan takes the
 * products without timing, at strides 1 and 2: each direction matches the direct call
 * bit for bit, each direction's scratch is the plan's workspace, the weight gradient
 * stays off the side stream, and the float-gradient call (16 bits only) declines. */
TEST(cuda_conv1x1_gemm_nchw_planned)
{
	struct gpu g;
	GPU_OPEN(&g, 3);
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F32, 0));
	g.ctx->heuristic_algos = 1;
	for (int stride = 1; stride <= 2; stride++) {
		struct conv2d_args a = pw_args(4, 48, 80, 6, 6, stride);
		int dev_mark = g.n_dev, host_mark = g.n_host;
		size_t p_in = 36, p = (size_t)a.h_out * a.w_out;
		size_t nx = a.n * a.c_in * p_in, ny = a.n * a.c_out * p, nw = (size_t)a.c_out * a.c_in;
		float *d_x = dev_from(&g, host_rand(&g, nx, 1, 0), nx), *d_w = dev_from(&g, host_rand(&g, nw, 0.3, 0), nw);
		float *d_dy = dev_from(&g, host_rand(&g, ny, 1, 0), ny);
		float *d_y = dev_f(&g, ny), *d_y2 = dev_f(&g, ny), *d_dx = dev_f(&g, nx), *d_dx2 = dev_f(&g, nx);
		float *d_dw = dev_f(&g, nw), *d_dw2 = dev_f(&g, nw);
		CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
		size_t fwd = 1, bwd = 1, wgrad = 0, want[3];
		CHECK_OK(conv2d_ws_bytes_cuda(g.ctx, &a, &fwd, &bwd, &wgrad));
		for (int dir = 0; dir < 3; dir++)
			CHECK_OK(conv1x1_gemm_scratch_bytes(g.ctx, &a, dir, &want[dir]));
		CHECK(want[2] > 0);
		CHECK_EQ_INT(fwd, want[0]);
		CHECK_EQ_INT(bwd, want[1]);
		CHECK_EQ_INT(wgrad, want[2]);
		CHECK(!conv2d_wgrad_is_cudnn(g.ctx, &a));

		void *sc = dev_bytes(&g, want[0] + want[1] + want[2]);
		CHECK_OK(conv2d_fwd_cuda(g.ctx, &a, NULL, d_x, d_w, NULL, d_y));
		CHECK_OK(conv1x1_gemm_fwd_cuda(g.ctx, &a, d_x, d_w, d_y2, sc, want[0]));
		CHECK_MSG(memcmp(down(&g, d_y, ny), down(&g, d_y2, ny), ny * sizeof(float)) == 0, "stride %d forward",
			  stride);
		CHECK_OK(conv2d_bwd_data_cuda(g.ctx, &a, NULL, d_dy, d_w, d_dx, 0));
		CHECK_OK(conv1x1_gemm_bwd_data_cuda(g.ctx, &a, d_dy, d_w, d_dx2, 0, sc, want[1]));
		CHECK_MSG(memcmp(down(&g, d_dx, nx), down(&g, d_dx2, nx), nx * sizeof(float)) == 0,
			  "stride %d backward data", stride);
		CHECK_OK(conv2d_bwd_filter_cuda(g.ctx, &a, NULL, d_x, d_dy, d_dw, NULL));
		CHECK_OK(conv1x1_gemm_bwd_filter_cuda(g.ctx, &a, d_x, d_dy, d_dw2, 0, sc, want[2]));
		CHECK_MSG(memcmp(down(&g, d_dw, nw), down(&g, d_dw2, nw), nw * sizeof(float)) == 0,
			  "stride %d weight gradient", stride);
		CHECK_EQ_INT(conv2d_bwd_filter_f32_cuda(g.ctx, &a, NULL, d_x, d_dy, d_dw, NULL), 0);
		gpu_release(&g, dev_mark, host_mark);
	}
	g.ctx->heuristic_algos = 0;
	gpu_close(&g);
}

/* Where the plan offers the products: strided ones in FP32 NCHW, not in 16-bit NHWC
 * (faster per direction there, but the resnet50 bf16 step ran 0.6% slower, s24-7),
 * even with cuDNN's heuristics, which take any offered product untimed. */
TEST(cuda_conv1x1_gemm_strided_only_in_fp32)
{
	struct gpu g;
	GPU_OPEN(&g, 5);
	g.ctx->heuristic_algos = 1;
	static const struct {
		enum gp_dtype dt;
		int nhwc, stride, want;
	} cases[] = { { GP_F32, 0, 2, 1 }, { GP_BF16, 1, 2, 0 }, { GP_BF16, 1, 1, 1 }, { GP_F16, 1, 2, 0 } };
	for (int t = 0; t < 4; t++) {
		CHECK_OK(cuda_ctx_set_act(g.ctx, cases[t].dt, cases[t].nhwc));
		struct conv2d_args a = pw_args(2, 32, 64, 8, 8, cases[t].stride);
		CHECK(conv1x1_gemm_ok(g.ctx, &a)); /* the products take it either way */
		CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
		const struct conv_plan *p = conv_plan_find(g.ctx, &a);
		CHECK(p != NULL);
		if (p)
			CHECK_MSG(p->fwd_gemm == cases[t].want && p->bwd_data_gemm == cases[t].want &&
					  p->bwd_filter_gemm == cases[t].want,
				  "case %d: products %d %d %d, want %d", t, p->fwd_gemm, p->bwd_data_gemm,
				  p->bwd_filter_gemm, cases[t].want);
	}
	g.ctx->heuristic_algos = 0;
	gpu_close(&g);
}
