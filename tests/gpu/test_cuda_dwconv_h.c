/* The 16-bit NHWC depthwise convolution kernels (dwconv_h.cu) for fp16 and bf16 against
 * the CPU f32 reference: MobileNetV2's 3x3 shapes at small sizes, 5x5, 7x7, 1x1, odd
 * sizes, channel counts that take the 2-channel and the scalar paths, misaligned arrays,
 * and batches long enough that the weight gradient's slices take several steps per
 * thread. Random inputs are rounded to the 16-bit type on the host first, so both sides
 * see the same values, and the reference runs on those (transposed to NCHW). Outputs are
 * poisoned with 0xff bytes (NaN in both 16-bit types and as float) before each run so
 * unwritten elements fail the comparison. Tolerances (relative error of the norm) are
 * those of test_cuda_amp.c: 1e-2 for bf16, 2e-3 for fp16. The weight gradient must also
 * be the same bits run to run. Without a device every GPU test skips with the reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define GPU_RNG_STREAM 13
#include "harness.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/rng.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_dwconv_h.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"

static const enum gp_dtype HTS[] = { GP_F16, GP_BF16 };
#define N_HTS ((int)(sizeof(HTS) / sizeof(HTS[0])))

/* --- 16-bit device arrays and layouts (the rest of the helpers: harness.h) ----------------- */

/* A 16-bit device array of n elements starting off elements into its allocation: off = 1
 * breaks every vector alignment, off = 2 leaves 4-byte alignment only. */
static void *dev_h_at(struct gpu *g, size_t n, int off)
{
	void *p = dev_bytes(g, (n + (size_t)off) * 2);
	return p ? (uint16_t *)p + off : NULL;
}

/* N,C,HW <-> N,HW,C floats on the host. */
static float *to_nhwc(struct gpu *g, const float *src, int n, int c, int hw)
{
	float *dst = host_f(g, (size_t)n * c * hw);
	for (int ni = 0; ni < n; ni++)
		for (int ch = 0; ch < c; ch++)
			for (int j = 0; j < hw; j++)
				dst[((size_t)ni * hw + j) * c + ch] = src[((size_t)ni * c + ch) * hw + j];
	return dst;
}

static float *to_nchw(struct gpu *g, const float *src, int n, int c, int hw)
{
	float *dst = host_f(g, (size_t)n * c * hw);
	for (int ni = 0; ni < n; ni++)
		for (int ch = 0; ch < c; ch++)
			for (int j = 0; j < hw; j++)
				dst[((size_t)ni * c + ch) * hw + j] = src[((size_t)ni * hw + j) * c + ch];
	return dst;
}

/* A 16-bit NHWC device activation as NCHW floats. */
static float *down_nchw(struct gpu *g, enum gp_dtype ht, const void *d, int n, int c, int hw)
{
	return to_nchw(g, down_h(g, ht, d, (size_t)n * c * hw), n, c, hw);
}

static void check_rel(enum gp_dtype ht, const char *what, const char *part, const float *got,
		      const float *want, size_t n, const char *file, int line)
{
	double e = rel_err_norm_f32(got, want, n), tol = tol_for(ht);
	if (!(e <= tol))
		test_fail(file, line, "%s %s: %s relative error %.3g > %.3g", dtype_name(ht), what, part,
			  e, tol);
}
#define CHECK_REL(ht, what, part, got, want, n) \
	check_rel(ht, what, part, got, want, n, __FILE__, __LINE__)

/* --- shapes ------------------------------------------------------------------------------ */

/* MobileNetV2's depthwise layers (3x3, pad 1; channel counts 32..960) at small sizes,
 * then the generic path (5x5, 7x7, 1x1), channel counts for the 2-channel (36, 4) and
 * scalar (21, 15, 1) paths, planes smaller than a row group. */
static const struct conv2d_args *dwh_cases(size_t *count)
{
	static struct conv2d_args cases[24];
	size_t i = 0;
	cases[i++] = dw_args(2, 32, 14, 14, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 96, 15, 15, 3, 2, 1, 1);
	cases[i++] = dw_args(3, 144, 14, 14, 3, 1, 1, 1);
	cases[i++] = dw_args(3, 144, 15, 15, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 192, 14, 14, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 192, 15, 15, 3, 2, 1, 1);
	cases[i++] = dw_args(2, 384, 7, 7, 3, 1, 1, 1);
	cases[i++] = dw_args(2, 576, 14, 14, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 576, 14, 14, 3, 2, 1, 1);
	cases[i++] = dw_args(3, 960, 7, 7, 3, 1, 1, 1);
	cases[i++] = dw_args(3, 40, 17, 13, 3, 2, 1, 1);  /* odd sizes, stride 2 */
	cases[i++] = dw_args(2, 24, 10, 9, 3, 1, 0, 0);   /* no padding */
	cases[i++] = dw_args(2, 24, 13, 11, 5, 1, 2, 0);  /* 5x5 pad 2 (generic) */
	cases[i++] = dw_args(3, 16, 15, 12, 5, 2, 2, 1);  /* 5x5 stride 2 */
	cases[i++] = dw_args(2, 8, 11, 10, 7, 1, 3, 1);   /* 7x7 */
	cases[i++] = dw_args(2, 8, 9, 7, 1, 2, 0, 1);     /* 1x1 stride 2 */
	cases[i++] = dw_args(2, 36, 11, 13, 3, 1, 1, 1);  /* 2 channels per thread */
	cases[i++] = dw_args(2, 36, 12, 12, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 21, 9, 10, 3, 1, 1, 1);   /* scalar */
	cases[i++] = dw_args(2, 15, 9, 8, 5, 2, 2, 1);    /* scalar, generic */
	cases[i++] = dw_args(2, 4, 2, 3, 3, 1, 1, 1);     /* plane smaller than a row group */
	cases[i++] = dw_args(9, 20, 2, 2, 3, 2, 1, 1);    /* 1x1 output */
	cases[i++] = dw_args(70, 960, 1, 1, 3, 1, 1, 1);  /* 1x1 planes, 4 channel groups */
	*count = i;
	return cases;
}

/* Every entry point on a (16-bit arrays start `off` elements into their allocations) against
 * the reference, then the weight gradient again for the same bits. */
static void check_dwh(struct gpu *g, enum gp_dtype ht, const struct conv2d_args *a, int off)
{
	int dev_mark = g->n_dev, host_mark = g->n_host;
	int n = a->n, c = a->c_in, hwi = a->h_in * a->w_in, hwo = a->h_out * a->w_out;
	size_t nx = (size_t)n * c * hwi, ny = (size_t)n * c * hwo;
	size_t nw = (size_t)c * a->kh * a->kw, nb = a->has_bias ? (size_t)c : 0;
	size_t ns = dwconv_h_bwd_filter_scratch_floats(a);
	float *x = host_rand_h(g, ht, nx, 1, 0), *w = host_rand_h(g, ht, nw, 0.3, 0);
	float *b = host_rand(g, c, 1, 0), *dy = host_rand_h(g, ht, ny, 1, 0);
	float *dx0 = host_rand_h(g, ht, nx, 1, 0);
	float *y = host_f(g, ny), *dw = host_f(g, nw), *db = nb ? host_f(g, nb) : NULL;
	void *d_x = dev_h_at(g, nx, off), *d_w = dev_h_at(g, nw, off), *d_y = dev_h_at(g, ny, off);
	void *d_dy = dev_h_at(g, ny, off), *d_dx = dev_h_at(g, nx, off), *d_dw = dev_h_at(g, nw, off);
	float *d_b = dev_from(g, b, c), *d_db = nb ? dev_f(g, nb) : NULL, *d_scratch = dev_f(g, ns);
	cudaStream_t s = g->ctx->stream;
	char what[160];

	snprintf(what, sizeof(what), "dwconv_h n%d c%d %dx%d k%d s%d p%d bias%d offset%d", n, c,
		 a->h_in, a->w_in, a->kh, a->stride, a->pad, a->has_bias, off);
	CHECK_MSG(dwconv_h_supported(a), "%s: not supported", what);
	CHECK_MSG(ns > 0, "%s: no scratch", what);
	if (!d_x || !d_w || !d_y || !d_dy || !d_dx || !d_dw || !d_b || !d_scratch) {
		gpu_release(g, dev_mark, host_mark);
		return;
	}
	put_h(g, ht, d_x, to_nhwc(g, x, n, c, hwi), nx);
	put_h(g, ht, d_w, w, nw); /* c x 1 x k x k is [c][k][k][1] */
	put_h(g, ht, d_dy, to_nhwc(g, dy, n, c, hwo), ny);

	/* b is passed even without has_bias: the kernel must ignore it then, as the
	 * reference does. */
	conv2d_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(dwconv_h_fwd_cuda(s, ht, a, d_x, d_w, d_b, d_y));
	CHECK_REL(ht, what, "forward", down_nchw(g, ht, d_y, n, c, hwo), y, ny);

	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put_h(g, ht, d_dx, to_nhwc(g, dx0, n, c, hwi), nx);
		if (!acc)
			poison(g, d_dx, nx * 2);
		conv2d_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(dwconv_h_bwd_data_cuda(s, ht, a, d_dy, d_w, d_dx, acc));
		CHECK_REL(ht, what, acc ? "backward data (accumulate)" : "backward data",
			  down_nchw(g, ht, d_dx, n, c, hwi), dx, nx);
	}

	conv2d_bwd_filter_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(dwconv_h_bwd_filter_cuda(s, ht, a, d_x, d_dy, d_dw, d_db, d_scratch));
	CHECK_REL(ht, what, "weight gradient", down_h(g, ht, d_dw, nw), dw, nw);
	float *db1 = nb ? down(g, d_db, nb) : NULL;
	if (nb)
		CHECK_REL(ht, what, "bias gradient", db1, db, nb);
	uint16_t *dw1 = host_bytes(g, nw * 2);
	get(g, dw1, d_dw, nw * 2);

	/* The same bits on a second run, from poisoned outputs and scratch. */
	poison(g, d_dw, nw * 2);
	poison(g, d_scratch, ns * sizeof(float));
	poison(g, d_db, nb * sizeof(float));
	CHECK_OK(dwconv_h_bwd_filter_cuda(s, ht, a, d_x, d_dy, d_dw, d_db, d_scratch));
	uint16_t *dw2 = host_bytes(g, nw * 2);
	get(g, dw2, d_dw, nw * 2);
	CHECK_MSG(!memcmp(dw1, dw2, nw * 2), "%s %s: weight gradient differs run to run",
		  dtype_name(ht), what);
	if (nb)
		CHECK_MSG(!memcmp(db1, down(g, d_db, nb), nb * sizeof(float)),
			  "%s %s: bias gradient differs run to run", dtype_name(ht), what);
	gpu_release(g, dev_mark, host_mark);
}

/* --- tests ------------------------------------------------------------------------------- */

/* Host-only: the shape test and argument checks need no device. */
TEST(dwconv_h_supported_shapes)
{
	struct conv2d_args dw = dw_args(2, 32, 16, 16, 3, 1, 1, 0);
	CHECK_EQ_INT(dwconv_h_supported(&dw), 1);
	struct conv2d_args s2 = dw_args(2, 96, 15, 15, 3, 2, 1, 1);
	CHECK_EQ_INT(dwconv_h_supported(&s2), 1);
	struct conv2d_args k5 = dw_args(1, 36, 9, 9, 5, 2, 2, 0);
	CHECK_EQ_INT(dwconv_h_supported(&k5), 1);

	struct conv2d_args normal = dw;
	normal.groups = 1; /* an ordinary 32 -> 32 convolution */
	CHECK_EQ_INT(dwconv_h_supported(&normal), 0);
	struct conv2d_args mult = dw;
	mult.c_out = 64; /* depth multiplier 2 */
	CHECK_EQ_INT(dwconv_h_supported(&mult), 0);
	struct conv2d_args even = dw_args(2, 32, 16, 16, 4, 1, 1, 0);
	CHECK_EQ_INT(dwconv_h_supported(&even), 0);
	struct conv2d_args s3 = dw_args(2, 32, 16, 16, 3, 3, 1, 0);
	CHECK_EQ_INT(dwconv_h_supported(&s3), 0);
	struct conv2d_args bad_out = dw;
	bad_out.h_out = 15;
	CHECK_EQ_INT(dwconv_h_supported(&bad_out), 0);
	struct conv2d_args huge = dw_args(1, 4096, 1024, 1024, 3, 1, 1, 0); /* 2^32 per image */
	CHECK_EQ_INT(dwconv_h_supported(&huge), 0);

	CHECK(dwconv_h_bwd_filter_scratch_floats(&dw) > 0);
	CHECK_EQ_INT(dwconv_h_bwd_filter_scratch_floats(&normal), 0);
	/* Unsupported arguments and types are refused before anything is launched. */
	CHECK_EQ_INT(dwconv_h_fwd_cuda(0, GP_BF16, &normal, NULL, NULL, NULL, NULL), GP_EINVAL);
	CHECK_EQ_INT(dwconv_h_bwd_data_cuda(0, GP_F16, &normal, NULL, NULL, NULL, 0), GP_EINVAL);
	CHECK_EQ_INT(dwconv_h_bwd_filter_cuda(0, GP_BF16, &normal, NULL, NULL, NULL, NULL, NULL),
		     GP_EINVAL);
	CHECK_EQ_INT(dwconv_h_fwd_cuda(0, GP_F32, &dw, NULL, NULL, NULL, NULL), GP_EINVAL);
	CHECK_EQ_INT(dwconv_h_bwd_data_cuda(0, GP_F32, &dw, NULL, NULL, NULL, 0), GP_EINVAL);
	CHECK_EQ_INT(dwconv_h_bwd_filter_cuda(0, GP_F32, &dw, NULL, NULL, NULL, NULL, NULL), GP_EINVAL);
	gp_error_clear();
}

/* Every vector width the kernels take (channels per thread, and rows per thread at 4
 * channels); { 0, 0 } is the default choice per direction. */
static const int WIDTHS[][2] = { { 0, 0 }, { 8, 0 }, { 4, 4 }, { 4, 2 }, { 2, 0 } };
#define N_WIDTHS ((int)(sizeof(WIDTHS) / sizeof(WIDTHS[0])))

TEST(cuda_dwconv_h_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 51);
	const struct conv2d_args *cases = dwh_cases(&n);
	for (int wi = 0; wi < N_WIDTHS; wi++) {
		dwconv_h_set_widths(WIDTHS[wi][0], WIDTHS[wi][1]);
		for (int t = 0; t < N_HTS; t++)
			for (size_t i = 0; i < n; i++)
				check_dwh(&g, HTS[t], &cases[i], 0);
	}
	dwconv_h_set_widths(0, 0);
	gpu_close(&g);
}

/* Arrays off the 16-byte alignment take the 2-channel (offset 2) or scalar (offset 1)
 * path even where c is a multiple of 8. */
TEST(cuda_dwconv_h_misaligned)
{
	struct gpu g;
	GPU_OPEN(&g, 52);
	struct conv2d_args cases[] = {
		dw_args(2, 32, 14, 14, 3, 1, 1, 1),
		dw_args(2, 144, 15, 15, 3, 2, 1, 0),
		dw_args(2, 24, 13, 11, 5, 1, 2, 1),
	};
	for (int t = 0; t < N_HTS; t++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			for (int off = 1; off <= 2; off++)
				check_dwh(&g, HTS[t], &cases[i], off);
	gpu_close(&g);
}

/* Slices long enough that each thread of the weight gradient takes several steps through
 * them: 64 channels (32 pixel lanes) along 128-wide rows and across 28-wide rows and
 * images; 8 channels (256 lanes) over enough 7x7 planes to fill 1024 slices, where a step
 * spans 5 images, a row and 4 columns. */
TEST(cuda_dwconv_h_long_slices)
{
	struct gpu g;
	GPU_OPEN(&g, 53);
	struct conv2d_args cases[] = {
		dw_args(3, 64, 128, 128, 3, 1, 1, 0),
		dw_args(5400, 8, 7, 7, 3, 1, 1, 1),
		dw_args(4, 64, 56, 56, 3, 2, 1, 1),
	};
	for (int t = 0; t < N_HTS; t++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			check_dwh(&g, HTS[t], &cases[i], 0);
	gpu_close(&g);
}

/* A batch of an empty size: nothing is launched, and the weight gradient is zero. */
TEST(cuda_dwconv_h_empty_batch)
{
	struct gpu g;
	GPU_OPEN(&g, 54);
	struct conv2d_args a = dw_args(0, 16, 8, 8, 3, 1, 1, 1);
	for (int t = 0; t < N_HTS; t++) {
		void *d_dw = dev_bytes(&g, 16 * 9 * 2);
		float *d_db = dev_f(&g, 16);
		CHECK_OK(dwconv_h_fwd_cuda(g.ctx->stream, HTS[t], &a, NULL, NULL, NULL, NULL));
		CHECK_OK(dwconv_h_bwd_data_cuda(g.ctx->stream, HTS[t], &a, NULL, NULL, NULL, 1));
		CHECK_OK(dwconv_h_bwd_filter_cuda(g.ctx->stream, HTS[t], &a, NULL, NULL, d_dw, d_db, NULL));
		float *dw = down_h(&g, HTS[t], d_dw, 16 * 9), *db = down(&g, d_db, 16);
		for (int i = 0; i < 16 * 9; i++)
			CHECK_MSG(dw[i] == 0.0f, "%s dw[%d] = %g", dtype_name(HTS[t]), i, dw[i]);
		for (int i = 0; i < 16; i++)
			CHECK_MSG(db[i] == 0.0f, "%s db[%d] = %g", dtype_name(HTS[t]), i, db[i]);
	}
	gpu_close(&g);
}

/* A ReLU6 folded into the convolution that reads it (dwconv_h_*_relu6_cuda): on a stored
 * input r >= 0 (the fused batch norm's max(z, 0)) with a good share above 6, forward and
 * weight gradient equal the plain kernels on min(r, 6), bit for bit (the clip happens on
 * load); backward data equals the plain one with the gradient zeroed where r >= 6, bit
 * for bit without accumulate (masking before the one rounding), and accumulated it adds
 * that masked gradient to dx. In NHWC on the device throughout. */
TEST(cuda_dwconv_h_relu6_folded)
{
	struct gpu g;
	GPU_OPEN(&g, 55);
	struct conv2d_args cases[] = {
		dw_args(2, 32, 14, 14, 3, 1, 1, 0),  /* 8 or 4 channels per thread */
		dw_args(2, 144, 15, 15, 3, 2, 1, 0), /* stride 2 */
		dw_args(2, 24, 13, 11, 5, 1, 2, 0),  /* the generic kernels */
		dw_args(2, 6, 9, 9, 3, 1, 1, 0),     /* 2 channels per thread */
	};
	cudaStream_t s = g.ctx->stream;
	for (int wt = 0; wt < N_WIDTHS * N_HTS; wt++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			enum gp_dtype ht = HTS[wt % N_HTS];
			dwconv_h_set_widths(WIDTHS[wt / N_HTS][0], WIDTHS[wt / N_HTS][1]);
			const struct conv2d_args *a = &cases[i];
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t nx = (size_t)a->n * a->c_in * a->h_in * a->w_in, ny = (size_t)a->n * a->c_in * a->h_out * a->w_out;
			size_t nw = (size_t)a->c_in * a->kh * a->kw, ns = dwconv_h_bwd_filter_scratch_floats(a);
			float *r = host_rand_h(&g, ht, nx, 4, 4), *q = host_f(&g, nx);
			size_t over = 0;
			for (size_t k = 0; k < nx; k++) {
				r[k] = r[k] < 0 ? -r[k] : r[k]; /* >= 0, as after the fused ReLU */
				q[k] = r[k] < 6 ? r[k] : 6;
				over += r[k] >= 6;
			}
			CHECK_MSG(over > nx / 10, "only %zu of %zu inputs at or above 6", over, nx);
			float *w = host_rand_h(&g, ht, nw, 1, 0), *dy = host_rand_h(&g, ht, ny, 1, 0);
			float *dx0 = host_rand_h(&g, ht, nx, 1, 0);
			void *d_r = dev_h_at(&g, nx, 0), *d_q = dev_h_at(&g, nx, 0), *d_w = dev_h_at(&g, nw, 0);
			void *d_dy = dev_h_at(&g, ny, 0), *d_y1 = dev_h_at(&g, ny, 0), *d_y2 = dev_h_at(&g, ny, 0);
			void *d_dx1 = dev_h_at(&g, nx, 0), *d_dx2 = dev_h_at(&g, nx, 0);
			void *d_dw1 = dev_h_at(&g, nw, 0), *d_dw2 = dev_h_at(&g, nw, 0);
			float *d_scratch = dev_f(&g, ns);
			put_h(&g, ht, d_r, r, nx); /* NHWC on both sides: a permutation does not matter */
			put_h(&g, ht, d_q, q, nx);
			put_h(&g, ht, d_w, w, nw);
			put_h(&g, ht, d_dy, dy, ny);
			CHECK_OK(dwconv_h_fwd_relu6_cuda(s, ht, a, d_r, d_w, NULL, d_y1));
			CHECK_OK(dwconv_h_fwd_cuda(s, ht, a, d_q, d_w, NULL, d_y2));
			CHECK_MSG(max_abs_diff(down_h(&g, ht, d_y1, ny), down_h(&g, ht, d_y2, ny), ny) == 0,
				  "%s case %zu: folded forward differs", dtype_name(ht), i);
			CHECK_OK(dwconv_h_bwd_filter_relu6_cuda(s, ht, a, d_r, d_dy, d_dw1, NULL, d_scratch));
			CHECK_OK(dwconv_h_bwd_filter_cuda(s, ht, a, d_q, d_dy, d_dw2, NULL, d_scratch));
			CHECK_MSG(max_abs_diff(down_h(&g, ht, d_dw1, nw), down_h(&g, ht, d_dw2, nw), nw) == 0,
				  "%s case %zu: folded weight gradient differs", dtype_name(ht), i);
			poison(&g, d_dx1, nx * 2);
			CHECK_OK(dwconv_h_bwd_data_relu6_cuda(s, ht, a, d_dy, d_w, d_r, d_dx1, 0));
			CHECK_OK(dwconv_h_bwd_data_cuda(s, ht, a, d_dy, d_w, d_dx2, 0));
			float *g1 = down_h(&g, ht, d_dx1, nx), *g2 = down_h(&g, ht, d_dx2, nx);
			for (size_t k = 0; k < nx; k++)
				g2[k] = r[k] < 6 ? g2[k] : 0.0f;
			CHECK_MSG(max_abs_diff(g1, g2, nx) == 0, "%s case %zu: folded backward data differs",
				  dtype_name(ht), i);
			put_h(&g, ht, d_dx1, dx0, nx);
			CHECK_OK(dwconv_h_bwd_data_relu6_cuda(s, ht, a, d_dy, d_w, d_r, d_dx1, 1));
			float *want = host_f(&g, nx);
			for (size_t k = 0; k < nx; k++)
				want[k] = dx0[k] + g2[k];
			CHECK_LE(rel_err_norm_f32(down_h(&g, ht, d_dx1, nx), want, nx), tol_for(ht));
			gpu_release(&g, dev_mark, host_mark);
		}
	dwconv_h_set_widths(0, 0);
	gpu_close(&g);
}
