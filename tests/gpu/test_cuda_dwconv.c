/* The depthwise convolution kernels (dwconv.cu) against the CPU f32 reference on fresh
 * random inputs: MobileNetV2's 3x3 shapes at small sizes, plus 5x5, 7x7, 1x1, odd
 * sizes and no padding for the generic path. Outputs are poisoned with NaN before each
 * run so unwritten elements fail the comparison; tolerance is the strict FP32 one of
 * test_cuda_ops.c (relative error of the norm 1e-5). The weight gradient must also be
 * the same bits run to run. Without a device every GPU test skips with the reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/rng.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_dwconv.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

#define GIB ((size_t)1 << 30)

/* --- shapes ------------------------------------------------------------------------------ */

/* MobileNetV2's depthwise layers (3x3, pad 1; channel counts 32..960) at small sizes,
 * then the generic path and the edges of the tiling: planes narrower than a row
 * group, several batch slices in the weight gradient, a slice walk over planes
 * smaller than a block. */
static const struct conv2d_args *dw_cases(size_t *count)
{
	static struct conv2d_args cases[20];
	size_t i = 0;
	cases[i++] = dw_args(2, 32, 16, 16, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 96, 16, 16, 3, 2, 1, 0);
	cases[i++] = dw_args(3, 144, 15, 15, 3, 1, 1, 0);
	cases[i++] = dw_args(3, 144, 15, 15, 3, 2, 1, 1);
	cases[i++] = dw_args(2, 192, 16, 16, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 192, 15, 15, 3, 2, 1, 0);
	cases[i++] = dw_args(4, 384, 8, 8, 3, 1, 1, 1);
	cases[i++] = dw_args(2, 576, 15, 15, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 576, 7, 7, 3, 2, 1, 0);
	cases[i++] = dw_args(4, 960, 4, 4, 3, 1, 1, 0);
	cases[i++] = dw_args(3, 40, 17, 13, 3, 2, 1, 1);  /* odd sizes, stride 2 */
	cases[i++] = dw_args(2, 24, 10, 9, 3, 1, 0, 0);   /* no padding */
	cases[i++] = dw_args(2, 24, 13, 11, 5, 1, 2, 0);  /* 5x5 pad 2 (generic) */
	cases[i++] = dw_args(3, 16, 15, 12, 5, 2, 2, 1);  /* 5x5 stride 2 */
	cases[i++] = dw_args(2, 8, 11, 10, 7, 1, 3, 1);   /* 7x7 */
	cases[i++] = dw_args(2, 8, 9, 7, 1, 2, 0, 1);     /* 1x1 stride 2 */
	cases[i++] = dw_args(2, 4, 2, 3, 3, 1, 1, 1);     /* plane smaller than a row group */
	cases[i++] = dw_args(4, 32, 56, 56, 3, 1, 1, 1);  /* 3 batch slices */
	cases[i++] = dw_args(200, 8, 7, 7, 3, 1, 1, 1);   /* 2 slices of 7x7 planes */
	cases[i++] = dw_args(400, 4, 9, 9, 5, 2, 2, 1);   /* generic, 2 slices */
	*count = i;
	return cases;
}

static void check_dwconv(struct gpu *g, const struct conv2d_args *a, double tol)
{
	size_t c = (size_t)a->c_in, kk = (size_t)a->kh * a->kw;
	size_t nx = (size_t)a->n * c * a->h_in * a->w_in;
	size_t ny = (size_t)a->n * c * a->h_out * a->w_out;
	size_t nw = c * kk, nb = a->has_bias ? c : 0;
	size_t ns = dwconv_bwd_filter_scratch_floats(a);
	float *x = host_rand(g, nx, 1, 0), *w = host_rand(g, nw, 0.3, 0), *y = host_f(g, ny);
	float *b = host_rand(g, c, 1, 0), *db = nb ? host_f(g, nb) : NULL;
	float *dy = host_rand(g, ny, 1, 0), *dx0 = host_rand(g, nx, 1, 0), *dw = host_f(g, nw);
	float *d_x = dev_from(g, x, nx), *d_w = dev_from(g, w, nw), *d_y = dev_f(g, ny);
	float *d_b = dev_from(g, b, c), *d_db = nb ? dev_f(g, nb) : NULL;
	float *d_dy = dev_from(g, dy, ny), *d_dx = dev_f(g, nx), *d_dw = dev_f(g, nw);
	float *d_scratch = dev_f(g, ns);
	cudaStream_t s = g->ctx->stream;
	char what[160];

	snprintf(what, sizeof(what), "dwconv n%d c%d %dx%d k%d s%d p%d bias%d", a->n, a->c_in,
		 a->h_in, a->w_in, a->kh, a->stride, a->pad, a->has_bias);
	CHECK_MSG(dwconv_supported(a), "%s: not supported", what);
	CHECK_MSG(ns > 0, "%s: no scratch", what);

	/* b is passed even without has_bias: the kernel must ignore it then, as the
	 * reference does. */
	conv2d_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(dwconv_fwd_cuda(s, a, d_x, d_w, d_b, d_y));
	double e = rel_err_norm_f32(down(g, d_y, ny), y, ny);
	CHECK_MSG(e <= tol, "%s: forward error %.3g > %.3g", what, e, tol);

	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put(g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(g, d_dx, nx * sizeof(float));
		conv2d_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(dwconv_bwd_data_cuda(s, a, d_dy, d_w, d_dx, acc));
		e = rel_err_norm_f32(down(g, d_dx, nx), dx, nx);
		CHECK_MSG(e <= tol, "%s: backward data (accumulate %d) error %.3g > %.3g", what, acc,
			  e, tol);
	}

	conv2d_bwd_filter_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(dwconv_bwd_filter_cuda(s, a, d_x, d_dy, d_dw, d_db, d_scratch));
	float *dw1 = down(g, d_dw, nw), *db1 = nb ? down(g, d_db, nb) : NULL;
	e = rel_err_norm_f32(dw1, dw, nw);
	CHECK_MSG(e <= tol, "%s: backward filter error %.3g > %.3g", what, e, tol);
	if (nb) {
		e = rel_err_norm_f32(db1, db, nb);
		CHECK_MSG(e <= tol, "%s: bias gradient error %.3g > %.3g", what, e, tol);
	}

	/* The same bits on a second run, from poisoned outputs and scratch. */
	poison(g, d_dw, nw * sizeof(float));
	poison(g, d_scratch, ns * sizeof(float));
	if (nb)
		poison(g, d_db, nb * sizeof(float));
	CHECK_OK(dwconv_bwd_filter_cuda(s, a, d_x, d_dy, d_dw, d_db, d_scratch));
	float *dw2 = down(g, d_dw, nw), *db2 = nb ? down(g, d_db, nb) : NULL;
	CHECK_MSG(!memcmp(dw1, dw2, nw * sizeof(float)), "%s: weight gradient differs run to run",
		  what);
	if (nb)
		CHECK_MSG(!memcmp(db1, db2, nb * sizeof(float)), "%s: bias gradient differs run to run",
			  what);
}

/* --- tests ------------------------------------------------------------------------------- */

/* Host-only: the shape test and argument checks need no device. */
TEST(dwconv_supported_shapes)
{
	struct conv2d_args dw = dw_args(2, 32, 16, 16, 3, 1, 1, 0);
	CHECK_EQ_INT(dwconv_supported(&dw), 1);
	struct conv2d_args s2 = dw_args(2, 96, 15, 15, 3, 2, 1, 1);
	CHECK_EQ_INT(dwconv_supported(&s2), 1);
	struct conv2d_args k7 = dw_args(1, 8, 9, 9, 7, 2, 3, 0);
	CHECK_EQ_INT(dwconv_supported(&k7), 1);

	struct conv2d_args normal = dw;
	normal.groups = 1; /* an ordinary 32 -> 32 convolution */
	CHECK_EQ_INT(dwconv_supported(&normal), 0);
	struct conv2d_args grouped = dw;
	grouped.groups = 2;
	CHECK_EQ_INT(dwconv_supported(&grouped), 0);
	struct conv2d_args mult = dw;
	mult.c_out = 64; /* depth multiplier 2 */
	CHECK_EQ_INT(dwconv_supported(&mult), 0);
	struct conv2d_args even = dw_args(2, 32, 16, 16, 4, 1, 1, 0);
	CHECK_EQ_INT(dwconv_supported(&even), 0);
	struct conv2d_args k9 = dw_args(2, 32, 16, 16, 9, 1, 4, 0);
	CHECK_EQ_INT(dwconv_supported(&k9), 0);
	struct conv2d_args s3 = dw_args(2, 32, 16, 16, 3, 3, 1, 0);
	CHECK_EQ_INT(dwconv_supported(&s3), 0);
	struct conv2d_args rect = dw;
	rect.kw = 5;
	CHECK_EQ_INT(dwconv_supported(&rect), 0);
	struct conv2d_args bad_out = dw;
	bad_out.h_out = 15;
	CHECK_EQ_INT(dwconv_supported(&bad_out), 0);

	CHECK(dwconv_bwd_filter_scratch_floats(&dw) > 0);
	CHECK_EQ_INT(dwconv_bwd_filter_scratch_floats(&normal), 0);
	/* Unsupported arguments are refused before anything is launched. */
	CHECK_EQ_INT(dwconv_fwd_cuda(0, &normal, NULL, NULL, NULL, NULL), GP_EINVAL);
	CHECK_EQ_INT(dwconv_bwd_data_cuda(0, &normal, NULL, NULL, NULL, 0), GP_EINVAL);
	CHECK_EQ_INT(dwconv_bwd_filter_cuda(0, &normal, NULL, NULL, NULL, NULL, NULL), GP_EINVAL);
	gp_error_clear();
}

TEST(cuda_dwconv_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 41);
	const struct conv2d_args *cases = dw_cases(&n);
	for (size_t i = 0; i < n; i++)
		check_dwconv(&g, &cases[i], 1e-5);
	gpu_close(&g);
}

/* A batch of an empty size: nothing is launched, and the weight gradient is zero. */
TEST(cuda_dwconv_empty_batch)
{
	struct gpu g;
	GPU_OPEN(&g, 42);
	struct conv2d_args a = dw_args(0, 16, 8, 8, 3, 1, 1, 1);
	float *d_dw = dev_f(&g, 16 * 9), *d_db = dev_f(&g, 16);
	CHECK_OK(dwconv_fwd_cuda(g.ctx->stream, &a, NULL, NULL, NULL, NULL));
	CHECK_OK(dwconv_bwd_data_cuda(g.ctx->stream, &a, NULL, NULL, NULL, 1));
	CHECK_OK(dwconv_bwd_filter_cuda(g.ctx->stream, &a, NULL, NULL, d_dw, d_db, NULL));
	float *dw = down(&g, d_dw, 16 * 9), *db = down(&g, d_db, 16);
	for (int i = 0; i < 16 * 9; i++)
		CHECK_MSG(dw[i] == 0.0f, "dw[%d] = %g", i, dw[i]);
	for (int i = 0; i < 16; i++)
		CHECK_MSG(db[i] == 0.0f, "db[%d] = %g", i, db[i]);
	gpu_close(&g);
}

/* Tensors past 2^32 elements (10,700 images of 32 x 112 x 112: 4.3e9 floats, 17 GB
 * each): x is 1 except the last image, which is 2, so a wrapped 32-bit index reads the
 * wrong value or leaves NaN poison unwritten. With w = 1 the expected outputs are
 * counts of the window cells inside the image. */
static double ones_window(const struct conv2d_args *a, int oh, int ow)
{
	int cells = 0;
	for (int ky = 0; ky < a->kh; ky++)
		for (int kx = 0; kx < a->kw; kx++) {
			int ih = oh * a->stride - a->pad + ky, iw = ow * a->stride - a->pad + kx;
			cells += ih >= 0 && ih < a->h_in && iw >= 0 && iw < a->w_in;
		}
	return cells;
}

static void check_plane(struct gpu *g, const struct conv2d_args *a, const float *d, size_t plane,
			double scale, const char *what)
{
	size_t hw = (size_t)a->h_out * a->w_out;
	float *h = down(g, d + plane * hw, hw);
	int bad = 0;
	for (int oh = 0; oh < a->h_out && bad < 3; oh++)
		for (int ow = 0; ow < a->w_out && bad < 3; ow++) {
			double want = scale * ones_window(a, oh, ow);
			float got = h[(size_t)oh * a->w_out + ow];
			if (!(got == (float)want)) {
				bad++;
				test_fail(__FILE__, __LINE__, "%s: plane %zu at (%d, %d) = %g, expected %g",
					  what, plane, oh, ow, got, want);
			}
		}
}

TEST(cuda_dwconv_huge_tensors)
{
	struct gpu g;
	size_t free_b = 0, total_b = 0;
	GPU_OPEN(&g, 43);
	struct conv2d_args a = dw_args(10700, 32, 112, 112, 3, 1, 1, 0);
	size_t hw = (size_t)a.h_in * a.w_in, img = (size_t)a.c_in * hw, count = a.n * img;
	if (cuda_mem_info(&free_b, &total_b) < 0 || free_b < 2 * count * sizeof(float) + 2 * GIB) {
		snprintf(g.why, sizeof(g.why), "needs %zu GiB of device memory, %zu GiB free",
			 2 * count * sizeof(float) / GIB + 2, free_b / GIB);
		gpu_close(&g);
		SKIP(g.why);
	}
	/* The planes to read back: first, one past 2^31 elements, the last image's first and last. */
	size_t planes[4] = { 0, ((size_t)1 << 31) / hw + 1, (a.n - 1) * (size_t)a.c_in,
			     a.n * (size_t)a.c_in - 1 };
	double scale[4] = { 1, 1, 2, 2 };
	float *d_x = dev_f(&g, count), *d_y = dev_f(&g, count);
	float *d_w = dev_f(&g, (size_t)a.c_in * 9), *d_dw = dev_f(&g, (size_t)a.c_in * 9);
	float *d_db = dev_f(&g, a.c_in);
	float *d_scratch = dev_f(&g, dwconv_bwd_filter_scratch_floats(&a));
	if (!d_x || !d_y || !d_w || !d_dw || !d_db || !d_scratch) {
		gpu_close(&g);
		return;
	}
	cudaStream_t s = g.ctx->stream;
	CHECK_OK(fill_cuda(s, d_x, count - img, 1.0f));
	CHECK_OK(fill_cuda(s, d_x + count - img, img, 2.0f));
	CHECK_OK(fill_cuda(s, d_w, (size_t)a.c_in * 9, 1.0f));

	CHECK_OK(dwconv_fwd_cuda(s, &a, d_x, d_w, NULL, d_y));
	for (int i = 0; i < 4; i++)
		check_plane(&g, &a, d_y, planes[i], scale[i], "huge forward");
	/* 3x3 pad 1 stride 1 with w = 1 is its own transpose: dx has y's pattern. */
	poison(&g, d_y, count * sizeof(float));
	CHECK_OK(dwconv_bwd_data_cuda(s, &a, d_x, d_w, d_y, 0));
	for (int i = 0; i < 4; i++)
		check_plane(&g, &a, d_y, planes[i], scale[i], "huge backward data");

	/* dy = x: tap (ky, kx) of every channel sums x * x over the cells it touched, 1 in
	 * every image but the last (4). */
	CHECK_OK(dwconv_bwd_filter_cuda(s, &a, d_x, d_x, d_dw, d_db, d_scratch));
	float *dw = down(&g, d_dw, (size_t)a.c_in * 9), *db = down(&g, d_db, a.c_in);
	for (int ky = 0; ky < 3; ky++)
		for (int kx = 0; kx < 3; kx++) {
			double rows = a.h_out - (ky != 1), cols = a.w_out - (kx != 1);
			double want = rows * cols * (a.n - 1 + 4);
			for (int ch = 0; ch < a.c_in; ch++)
				CHECK_MSG(fabs(dw[ch * 9 + ky * 3 + kx] - want) <= 1e-6 * want,
					  "huge backward filter: dw[%d][%d][%d] = %.9g, expected %.9g",
					  ch, ky, kx, dw[ch * 9 + ky * 3 + kx], want);
		}
	double want_db = (double)hw * (a.n - 1 + 2);
	for (int ch = 0; ch < a.c_in; ch++)
		CHECK_MSG(fabs(db[ch] - want_db) <= 1e-6 * want_db, "huge bias gradient: db[%d] = %.9g, expected %.9g",
			  ch, db[ch], want_db);
	gpu_close(&g);
}
