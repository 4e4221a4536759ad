/* The own tensor-core kernels for 16-bit NHWC convolutions of few input channels
 * (conv_stem.cu: ResNet's stem) against the CPU f32 reference on the same 16-bit-rounded
 * values, and their place in the convolution plan. The forward output is rounded once
 * from float sums (tol_for: 1e-2 bf16, 2e-3 fp16); the weight gradient is float sums of
 * the same products (1e-5). Without a device every test skips with the reason. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GPU_RNG_STREAM 23
#include "harness.h"
#include "core/tuning.h"
#include "ops/cuda/cuda_ops.h"

static const enum gp_dtype HTS[] = { GP_F16, GP_BF16 };
#define N_HTS ((int)(sizeof(HTS) / sizeof(HTS[0])))

static struct conv2d_args stem_args(int n, int c, int h, int w, int k, int kh, int kw, int stride, int pad)
{
	struct conv2d_args a = { .n = n, .c_in = c, .h_in = h, .w_in = w, .c_out = k, .kh = kh, .kw = kw,
				 .stride = stride, .pad = pad, .groups = 1 };
	a.h_out = (h + 2 * pad - kh) / stride + 1;
	a.w_out = (w + 2 * pad - kw) / stride + 1;
	return a;
}

/* Shapes: ResNet's stem on a small odd image (a last tile part full, every edge
 * padded), one channel into two groups of 64 filters, no padding, 7 channels and an
 * oblong window (112 columns, a part-used fragment), one channel at stride 1 on rows
 * of whole 16-byte chunks (not ResNet's form): the forward builds columns. Then
 * ResNet's stem on rows of whole chunks, which the forward reads as staged rows: on 16
 * columns (every window at an edge) and on 288 (two tiles along an output row, the
 * second part full). The last field: whether the forward stages rows. */
static const int stem_cases[][10] = {
	/* n, c, h, w, k, kh, kw, stride, pad, staged */
	{ 2, 3, 37, 37, 64, 7, 7, 2, 3, 0 },
	{ 3, 1, 20, 13, 128, 3, 3, 1, 1, 0 },
	{ 1, 4, 9, 11, 64, 5, 5, 2, 0, 0 },
	{ 2, 7, 10, 12, 64, 4, 4, 3, 2, 0 },
	{ 2, 3, 20, 16, 64, 7, 7, 2, 3, 1 },
	{ 1, 3, 16, 288, 64, 7, 7, 2, 3, 1 },
	{ 3, 1, 9, 16, 128, 3, 3, 1, 1, 0 },
};

/* Forward outputs further from the CPU's float result than one 16-bit rounding and a
 * float sum's error allow (2^-7 relative, 1e-3 absolute): a column read from the wrong
 * place moves an element by about one product (0.2 here), which the norm over the
 * whole output could hide. */
static size_t stem_far(const float *got, const float *want, size_t n)
{
	size_t far = 0;
	for (size_t i = 0; i < n; i++)
		far += !(fabsf(got[i] - want[i]) <= fabsf(want[i]) / 128 + 1e-3f);
	return far;
}

static float rel_err_dw(struct gpu *g, const float *d_dw, const float *want, size_t n)
{
	return (float)rel_err_norm_f32(down(g, d_dw, n), want, n);
}

TEST(cuda_stem_conv_matches_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 1);
	for (int t = 0; t < N_HTS; t++)
		for (size_t k = 0; k < sizeof(stem_cases) / sizeof(stem_cases[0]); k++) {
			const int *s = stem_cases[k];
			enum gp_dtype ht = HTS[t];
			struct conv2d_args a = stem_args(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8]);
			CHECK_MSG(stem_conv_supported(ht, 1, &a), "%s case %zu not taken", dtype_name(ht), k);
			struct stem_rows sr;
			CHECK_EQ_INT(stem_conv_rows(&a, &sr), s[9]);
			int dev_mark = g.n_dev, host_mark = g.n_host;
			int hw_in = a.h_in * a.w_in, hw_out = a.h_out * a.w_out, rs = a.kh * a.kw;
			size_t nx = (size_t)a.n * a.c_in * hw_in, ny = (size_t)a.n * a.c_out * hw_out;
			size_t nw = (size_t)a.c_out * a.c_in * rs;
			float *x = host_rand_h(&g, ht, nx, 1, 0), *w = host_rand_h(&g, ht, nw, 0.2, 0);
			float *dy = host_rand_h(&g, ht, ny, 1, 0);
			float *y = host_f(&g, ny), *dw = host_f(&g, nw);
			conv2d_fwd_cpu_f32(&a, x, w, NULL, y);
			conv2d_bwd_filter_cpu_f32(&a, x, dy, dw, NULL);

			void *d_x = dev_bytes(&g, nx * 2), *d_w = dev_bytes(&g, nw * 2), *d_y = dev_bytes(&g, ny * 2);
			void *d_dy = dev_bytes(&g, ny * 2);
			put_h(&g, ht, d_x, host_to_nhwc(&g, x, 4, a.n, a.c_in, hw_in), nx);
			put_h(&g, ht, d_w, host_to_nhwc(&g, w, 4, a.c_out, a.c_in, rs), nw); /* KRSC */
			put_h(&g, ht, d_dy, host_to_nhwc(&g, dy, 4, a.n, a.c_out, hw_out), ny);
			CHECK_OK(stem_conv_fwd_cuda(g.ctx->stream, ht, &a, d_x, d_w, d_y));
			float *got = host_to_nchw(&g, down_h(&g, ht, d_y, ny), 4, a.n, a.c_out, hw_out);
			double e = rel_err_norm_f32(got, y, ny);
			CHECK_MSG(e <= tol_for(ht), "%s case %zu forward: relative error %.3g", dtype_name(ht), k, e);
			CHECK_MSG(!stem_far(got, y, ny), "%s case %zu forward: %zu of %zu outputs off", dtype_name(ht), k,
				  stem_far(got, y, ny), ny);

			size_t floats = 0;
			CHECK_OK(stem_conv_wgrad_scratch_floats(ht, &a, &floats));
			CHECK(floats >= nw);
			float *d_scratch = dev_f(&g, floats), *d_dw = dev_f(&g, nw), *d_dw2 = dev_f(&g, nw);
			CHECK_OK(stem_conv_wgrad_cuda(g.ctx->stream, ht, &a, d_x, d_dy, d_dw, 0, d_scratch, floats));
			float e_dw = rel_err_dw(&g, d_dw, dw, nw);
			CHECK_MSG(e_dw <= 1e-5, "%s case %zu weight gradient: relative error %.3g", dtype_name(ht), k,
				  (double)e_dw);
			/* the same bits on a second run; accumulate adds to what is there */
			CHECK_OK(stem_conv_wgrad_cuda(g.ctx->stream, ht, &a, d_x, d_dy, d_dw2, 0, d_scratch, floats));
			CHECK_MSG(memcmp(down(&g, d_dw, nw), down(&g, d_dw2, nw), nw * sizeof(float)) == 0,
				  "%s case %zu: two runs differ", dtype_name(ht), k);
			CHECK_OK(stem_conv_wgrad_cuda(g.ctx->stream, ht, &a, d_x, d_dy, d_dw2, 1, d_scratch, floats));
			float *twice = host_f(&g, nw);
			for (size_t i = 0; i < nw; i++)
				twice[i] = 2 * dw[i];
			CHECK_LE(rel_err_dw(&g, d_dw2, twice, nw), 1e-5);
			/* too little scratch is refused, not overrun */
			CHECK_EQ_INT(stem_conv_wgrad_cuda(g.ctx->stream, ht, &a, d_x, d_dy, d_dw2, 0, d_scratch, nw - 1),
				     GP_EINVAL);
			gp_error_clear();
			gpu_release(&g, dev_mark, host_mark);
		}
	gpu_close(&g);
}

/* What the kernels refuse, so that the plan never hands them such a shape. */
TEST(cuda_stem_conv_refuses_what_it_does_not_take)
{
	struct conv2d_args a = stem_args(2, 3, 224, 224, 64, 7, 7, 2, 3);
	CHECK(stem_conv_supported(GP_BF16, 1, &a));
	struct stem_rows sr;
	CHECK(stem_conv_rows(&a, &sr)); /* ResNet's stem at 224: staged rows */
	CHECK(stem_conv_supported(GP_F16, 1, &a));
	CHECK(!stem_conv_supported(GP_F32, 0, &a));
	CHECK(!stem_conv_supported(GP_BF16, 0, &a)); /* NCHW */
	struct conv2d_args b = a;
	b.c_in = 8; /* a multiple of 8 is cuDNN's */
	CHECK(!stem_conv_supported(GP_BF16, 1, &b));
	b = a;
	b.c_out = 96;
	CHECK(!stem_conv_supported(GP_BF16, 1, &b));
	b = stem_args(2, 4, 32, 32, 64, 7, 7, 1, 3); /* 196 columns */
	CHECK(!stem_conv_supported(GP_BF16, 1, &b));
	b = a;
	b.groups = 3;
	b.c_out = 192;
	CHECK(!stem_conv_supported(GP_BF16, 1, &b));
}

/* The staged-rows layout of ResNet's stem at every width that is a multiple of 8 up to
 * 1,024, without a device: every pixel of a tile (up to 128 of an output row) has a
 * copy where its window starts a 16-byte row; every piece it reads, the last one's tail
 * included, lies in the kh rows the staging writes (past them a copy holds what the
 * shared memory held before); K covers the window; the copies are 8k + 1 slots apart,
 * and the 8 pixels of an ldmatrix read 8 distinct bank groups in every piece. Other
 * shapes build columns. */
TEST(cuda_stem_rows_layout_covers_every_window)
{
	int taken = 0;
	for (int w = 8; w <= 1024; w += 8) {
		struct conv2d_args a = stem_args(2, 3, 32, w, 64, 7, 7, 2, 3);
		struct stem_rows r;
		if (!stem_conv_rows(&a, &r))
			continue;
		taken++;
		CHECK(r.copies == 4 && r.gcd == 2 && r.pieces == 3 && r.kq == 22 && r.ldb == r.kq * 8 + 8);
		CHECK(r.copy_el >= 7 * r.row_el && r.copy_el % 8 == 0 && (r.copy_el / 8) % 8 == 1 && r.row_el % 8 == 0);
		int len = a.w_out < 128 ? a.w_out : 128, bad = 0, conflicts = 0;
		for (int m = 0; m < len; m++) {
			int start = m * 6, i = 0;
			while (i < r.copies && (start + i * r.gcd) % 8)
				i++;
			bad += i == r.copies || start + i * r.gcd + 6 * r.row_el + 8 * r.pieces > 7 * r.row_el;
		}
		for (int m0 = 0; m0 + 8 <= len; m0 += 8)
			for (int q = 0; q < r.pieces; q++) {
				int banks = 0;
				for (int m = m0; m < m0 + 8; m++) {
					int start = m * 6, i = ((8 - start % 8) % 8) / r.gcd;
					banks |= 1 << ((i * r.copy_el + start + i * r.gcd + 8 * q) / 8 % 8);
				}
				conflicts += banks != 0xff;
			}
		CHECK_MSG(!bad && !conflicts, "width %d: %d windows outside the staged rows, %d ldmatrix reads on "
			  "shared banks", w, bad, conflicts);
		CHECK_EQ_INT(r.segs, (a.w_out + 127) / 128);
		CHECK_EQ_INT(r.tiles, a.n * a.h_out * r.segs);
	}
	CHECK_EQ_INT(taken, 128);
	struct stem_rows r;
	struct conv2d_args other[] = {
		stem_args(2, 3, 224, 220, 64, 7, 7, 2, 3), /* rows of 660 elements: not whole chunks */
		stem_args(2, 3, 224, 224, 64, 7, 7, 2, 2), /* another pad: windows start elsewhere */
		stem_args(2, 1, 16, 16, 64, 3, 3, 1, 1),
		stem_args(2, 4, 64, 64, 64, 7, 7, 2, 3),
	};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		CHECK_MSG(!stem_conv_rows(&other[i], &r), "shape %zu stages rows", i);
}

/* ResNet's stem through the convolution calls under GPUPERF_CONV_STEM=own: the plan
 * takes the kernels in both directions, the forward matches the direct call bit for bit
 * and the weight gradient comes out in float through conv2d_bwd_filter_f32_cuda (the
 * 16-bit-copy call refuses it). */
TEST(cuda_stem_conv_planned_under_own)
{
	struct gpu g;
	GPU_OPEN(&g, 2);
	setenv("GPUPERF_CONV_STEM", "own", 1);
	tuning_reload();
	struct conv2d_args a = stem_args(4, 3, 64, 64, 64, 7, 7, 2, 3);
	int hw_in = a.h_in * a.w_in, hw_out = a.h_out * a.w_out;
	size_t nx = (size_t)a.n * a.c_in * hw_in, ny = (size_t)a.n * a.c_out * hw_out, nw = (size_t)a.c_out * 147;
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
		float *x = host_rand_h(&g, ht, nx, 1, 0), *w = host_rand_h(&g, ht, nw, 0.2, 0);
		float *dy = host_rand_h(&g, ht, ny, 1, 0);
		void *d_x = dev_bytes(&g, nx * 2), *d_w = dev_bytes(&g, nw * 2), *d_dy = dev_bytes(&g, ny * 2);
		void *d_y = dev_bytes(&g, ny * 2), *d_y2 = dev_bytes(&g, ny * 2);
		put_h(&g, ht, d_x, host_to_nhwc(&g, x, 4, a.n, a.c_in, hw_in), nx);
		put_h(&g, ht, d_w, host_to_nhwc(&g, w, 4, a.c_out, a.c_in, 49), nw);
		put_h(&g, ht, d_dy, host_to_nhwc(&g, dy, 4, a.n, a.c_out, hw_out), ny);
		CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
		CHECK_OK(conv2d_fwd_cuda(g.ctx, &a, NULL, d_x, d_w, NULL, d_y));
		CHECK_OK(stem_conv_fwd_cuda(g.ctx->stream, ht, &a, d_x, d_w, d_y2));
		CHECK_MSG(memcmp(down_h(&g, ht, d_y, ny), down_h(&g, ht, d_y2, ny), ny * sizeof(float)) == 0,
			  "%s: the planned forward is not the stem kernels'", dtype_name(ht));
		size_t fwd = 1, bwd = 0, wgrad = 0;
		CHECK_OK(conv2d_ws_bytes_cuda(g.ctx, &a, &fwd, &bwd, &wgrad));
		size_t floats = 0;
		CHECK_OK(stem_conv_wgrad_scratch_floats(ht, &a, &floats));
		CHECK_EQ_INT(fwd, 0);
		CHECK_EQ_INT(wgrad, floats * sizeof(float));
		float *d_dw = dev_f(&g, nw), *ref = host_f(&g, nw);
		CHECK_EQ_INT(conv2d_bwd_filter_f32_cuda(g.ctx, &a, NULL, d_x, d_dy, d_dw, NULL), 1);
		conv2d_bwd_filter_cpu_f32(&a, x, dy, ref, NULL);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dw, nw), ref, nw), 1e-5);
		CHECK_EQ_INT(conv2d_bwd_filter_cuda(g.ctx, &a, NULL, d_x, d_dy, d_w, NULL), GP_EINVAL);
		gp_error_clear();
	}
	unsetenv("GPUPERF_CONV_STEM");
	tuning_reload();
	gpu_close(&g);
}
