/* The depthwise convolution kernels (dwconv.cu) against the CPU f32 reference, for every
 * element type they take: float in NCHW, fp16 and bf16 in NHWC. MobileNetV2's 3x3 shapes
 * at small sizes, 5x5, 7x7, 1x1, odd sizes, no padding, channel counts that take the
 * 16-bit 2-channel and scalar paths, misaligned arrays, several batch slices in the
 * weight gradient and slices long enough that its threads take several steps. Random
 * inputs are rounded to the 16-bit type on the host first, so both sides see the same
 * values, and the reference runs on those (transposed to NCHW). Outputs are poisoned with
 * 0xff bytes (NaN in float and both 16-bit types) before each run so unwritten elements
 * fail the comparison. Tolerances (relative error of the norm): float the strict one of
 * test_cuda_ops.c (1e-5), 16 bits those of test_cuda_amp.c (bf16 1e-2, fp16 2e-3). The
 * weight gradient must also be the same bits run to run. Without a device every GPU test
 * skips with the reason. */
#include <math.h>
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
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"

#define GIB ((size_t)1 << 30)

static const enum gp_dtype DTS[] = { GP_F32, GP_F16, GP_BF16 };
#define N_DTS ((int)(sizeof(DTS) / sizeof(DTS[0])))
static const enum gp_dtype HTS[] = { GP_F16, GP_BF16 };
#define N_HTS ((int)(sizeof(HTS) / sizeof(HTS[0])))

/* --- device arrays of either type, in the kernels' layout (the rest: harness.h) ------------ */

static size_t esize(enum gp_dtype dt)
{
	return dt == GP_F32 ? sizeof(float) : 2;
}

static double tol_dt(enum gp_dtype dt)
{
	return dt == GP_F32 ? 1e-5 : tol_for(dt);
}

/* Random values as the type stores them. */
static float *host_rand_dt(struct gpu *g, enum gp_dtype dt, size_t n, double scale, double shift)
{
	return dt == GP_F32 ? host_rand(g, n, scale, shift) : host_rand_h(g, dt, n, scale, shift);
}

/* A device array of n elements starting off elements into its allocation: in 16 bits
 * off = 1 breaks every vector alignment, off = 2 leaves 4-byte alignment only. */
static void *dev_at(struct gpu *g, enum gp_dtype dt, size_t n, int off)
{
	char *p = dev_bytes(g, (n + (size_t)off) * esize(dt));
	return p ? p + (size_t)off * esize(dt) : NULL;
}

static void put_dt(struct gpu *g, enum gp_dtype dt, void *d, const float *h, size_t n)
{
	if (dt == GP_F32)
		put(g, d, h, n * sizeof(float));
	else
		put_h(g, dt, d, h, n);
}

static float *down_dt(struct gpu *g, enum gp_dtype dt, const void *d, size_t n)
{
	return dt == GP_F32 ? down(g, d, n) : down_h(g, dt, d, n);
}

/* An NCHW host activation onto the device in dt's layout (float NCHW, 16 bits NHWC),
 * and back. */
static void put_act(struct gpu *g, enum gp_dtype dt, void *d, const float *x, int n, int c, int hw)
{
	put_dt(g, dt, d, dt == GP_F32 ? x : (const float *)host_to_nhwc(g, x, 4, n, c, hw), (size_t)n * c * hw);
}

static float *down_act(struct gpu *g, enum gp_dtype dt, const void *d, int n, int c, int hw)
{
	float *h = down_dt(g, dt, d, (size_t)n * c * hw);
	return dt == GP_F32 ? h : (float *)host_to_nchw(g, h, 4, n, c, hw);
}

static void check_rel(enum gp_dtype dt, const char *what, const char *part, const float *got,
		      const float *want, size_t n, const char *file, int line)
{
	double e = rel_err_norm_f32(got, want, n), tol = tol_dt(dt);
	if (!(e <= tol))
		test_fail(file, line, "%s %s: %s relative error %.3g > %.3g", dtype_name(dt), what, part,
			  e, tol);
}
#define CHECK_REL(dt, what, part, got, want, n) \
	check_rel(dt, what, part, got, want, n, __FILE__, __LINE__)

/* --- shapes ------------------------------------------------------------------------------ */

/* MobileNetV2's depthwise layers (3x3, pad 1; channel counts 32..960) at small sizes,
 * then the generic path (5x5, 7x7, 1x1), channel counts for the 16-bit 2-channel (36, 4)
 * and scalar (21, 15, 1) paths, and the edges of the tiling: planes smaller than a row
 * group, several batch slices in the weight gradient, a slice walk over planes smaller
 * than a block. */
static const struct conv2d_args *dw_cases(size_t *count)
{
	static struct conv2d_args cases[40];
	size_t i = 0;
	cases[i++] = dw_args(2, 32, 16, 16, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 32, 14, 14, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 96, 16, 16, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 96, 15, 15, 3, 2, 1, 1);
	cases[i++] = dw_args(3, 144, 15, 15, 3, 1, 1, 0);
	cases[i++] = dw_args(3, 144, 14, 14, 3, 1, 1, 1);
	cases[i++] = dw_args(3, 144, 15, 15, 3, 2, 1, 1);
	cases[i++] = dw_args(3, 144, 15, 15, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 192, 16, 16, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 192, 14, 14, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 192, 15, 15, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 192, 15, 15, 3, 2, 1, 1);
	cases[i++] = dw_args(4, 384, 8, 8, 3, 1, 1, 1);
	cases[i++] = dw_args(2, 384, 7, 7, 3, 1, 1, 1);
	cases[i++] = dw_args(2, 576, 15, 15, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 576, 14, 14, 3, 1, 1, 0);
	cases[i++] = dw_args(2, 576, 7, 7, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 576, 14, 14, 3, 2, 1, 1);
	cases[i++] = dw_args(4, 960, 4, 4, 3, 1, 1, 0);
	cases[i++] = dw_args(3, 960, 7, 7, 3, 1, 1, 1);
	cases[i++] = dw_args(3, 40, 17, 13, 3, 2, 1, 1);  /* odd sizes, stride 2 */
	cases[i++] = dw_args(2, 24, 10, 9, 3, 1, 0, 0);   /* no padding */
	cases[i++] = dw_args(2, 24, 13, 12, 3, 1, 1, 1);  /* tiled, 8 channels a block */
	cases[i++] = dw_args(2, 24, 13, 11, 5, 1, 2, 0);  /* 5x5 pad 2 (generic) */
	cases[i++] = dw_args(3, 16, 15, 12, 5, 2, 2, 1);  /* 5x5 stride 2 */
	cases[i++] = dw_args(2, 8, 11, 10, 7, 1, 3, 1);   /* 7x7 */
	cases[i++] = dw_args(2, 8, 9, 7, 1, 2, 0, 1);     /* 1x1 stride 2 */
	cases[i++] = dw_args(2, 36, 11, 13, 3, 1, 1, 1);  /* 16 bits: 2 channels per thread */
	cases[i++] = dw_args(2, 36, 12, 12, 3, 2, 1, 0);
	cases[i++] = dw_args(2, 21, 9, 10, 3, 1, 1, 1);   /* 16 bits: scalar */
	cases[i++] = dw_args(2, 15, 9, 8, 5, 2, 2, 1);    /* scalar, generic */
	cases[i++] = dw_args(2, 4, 2, 3, 3, 1, 1, 1);     /* plane smaller than a row group */
	cases[i++] = dw_args(9, 20, 2, 2, 3, 2, 1, 1);    /* 1x1 output */
	cases[i++] = dw_args(70, 960, 1, 1, 3, 1, 1, 1);  /* 1x1 planes, 4 channel groups */
	cases[i++] = dw_args(4, 32, 56, 56, 3, 1, 1, 1);  /* float: 3 batch slices */
	cases[i++] = dw_args(200, 8, 7, 7, 3, 1, 1, 1);   /* float: 2 slices of 7x7 planes */
	cases[i++] = dw_args(400, 4, 9, 9, 5, 2, 2, 1);   /* generic, 2 slices */
	*count = i;
	return cases;
}

/* Every direction (arrays start `off` elements into their allocations) against the
 * reference, then the weight gradient again for the same bits. */
static void check_dwconv(struct gpu *g, enum gp_dtype dt, const struct conv2d_args *a, int off)
{
	int dev_mark = g->n_dev, host_mark = g->n_host;
	int n = a->n, c = a->c_in, hwi = a->h_in * a->w_in, hwo = a->h_out * a->w_out;
	int nhwc = dt != GP_F32;
	size_t es = esize(dt);
	size_t nx = (size_t)n * c * hwi, ny = (size_t)n * c * hwo;
	size_t nw = (size_t)c * a->kh * a->kw, nb = a->has_bias ? (size_t)c : 0;
	size_t ns = dwconv_bwd_filter_scratch_floats(dt, a);
	float *x = host_rand_dt(g, dt, nx, 1, 0), *w = host_rand_dt(g, dt, nw, 0.3, 0);
	float *b = host_rand(g, c, 1, 0), *dy = host_rand_dt(g, dt, ny, 1, 0);
	float *dx0 = host_rand_dt(g, dt, nx, 1, 0);
	float *y = host_f(g, ny), *dw = host_f(g, nw), *db = nb ? host_f(g, nb) : NULL;
	void *d_x = dev_at(g, dt, nx, off), *d_w = dev_at(g, dt, nw, off), *d_y = dev_at(g, dt, ny, off);
	void *d_dy = dev_at(g, dt, ny, off), *d_dx = dev_at(g, dt, nx, off), *d_dw = dev_at(g, dt, nw, off);
	float *d_b = dev_from(g, b, c), *d_db = nb ? dev_f(g, nb) : NULL, *d_scratch = dev_f(g, ns);
	cudaStream_t s = g->ctx->stream;
	char what[160];

	snprintf(what, sizeof(what), "dwconv n%d c%d %dx%d k%d s%d p%d bias%d offset%d", n, c,
		 a->h_in, a->w_in, a->kh, a->stride, a->pad, a->has_bias, off);
	CHECK_MSG(dwconv_supported(dt, nhwc, a), "%s %s: not supported", dtype_name(dt), what);
	CHECK_MSG(ns > 0, "%s %s: no scratch", dtype_name(dt), what);
	if (!d_x || !d_w || !d_y || !d_dy || !d_dx || !d_dw || !d_b || !d_scratch) {
		gpu_release(g, dev_mark, host_mark);
		return;
	}
	put_act(g, dt, d_x, x, n, c, hwi);
	put_dt(g, dt, d_w, w, nw); /* c x 1 x k x k is [c][k][k][1] */
	put_act(g, dt, d_dy, dy, n, c, hwo);

	/* b is passed even without has_bias: the kernel must ignore it then, as the
	 * reference does. */
	conv2d_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(dwconv_fwd_cuda(s, dt, a, d_x, d_w, d_b, d_y, 0));
	CHECK_REL(dt, what, "forward", down_act(g, dt, d_y, n, c, hwo), y, ny);

	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put_act(g, dt, d_dx, dx0, n, c, hwi);
		if (!acc)
			poison(g, d_dx, nx * es);
		conv2d_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(dwconv_bwd_data_cuda(s, dt, a, d_dy, d_w, d_dx, acc, 0, NULL));
		CHECK_REL(dt, what, acc ? "backward data (accumulate)" : "backward data",
			  down_act(g, dt, d_dx, n, c, hwi), dx, nx);
	}

	conv2d_bwd_filter_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(dwconv_bwd_filter_cuda(s, dt, a, d_x, d_dy, d_dw, d_db, d_scratch, 0));
	CHECK_REL(dt, what, "weight gradient", down_dt(g, dt, d_dw, nw), dw, nw);
	float *db1 = nb ? down(g, d_db, nb) : NULL;
	if (nb)
		CHECK_REL(dt, what, "bias gradient", db1, db, nb);
	void *dw1 = host_bytes(g, nw * es);
	get(g, dw1, d_dw, nw * es);

	/* The same bits on a second run, from poisoned outputs and scratch. */
	poison(g, d_dw, nw * es);
	poison(g, d_scratch, ns * sizeof(float));
	poison(g, d_db, nb * sizeof(float));
	CHECK_OK(dwconv_bwd_filter_cuda(s, dt, a, d_x, d_dy, d_dw, d_db, d_scratch, 0));
	void *dw2 = host_bytes(g, nw * es);
	get(g, dw2, d_dw, nw * es);
	CHECK_MSG(!memcmp(dw1, dw2, nw * es), "%s %s: weight gradient differs run to run",
		  dtype_name(dt), what);
	if (nb)
		CHECK_MSG(!memcmp(db1, down(g, d_db, nb), nb * sizeof(float)),
			  "%s %s: bias gradient differs run to run", dtype_name(dt), what);
	gpu_release(g, dev_mark, host_mark);
}

/* --- tests ------------------------------------------------------------------------------- */

/* Host-only: the shape test and argument checks need no device. */
TEST(dwconv_supported_shapes)
{
	struct conv2d_args dw = dw_args(2, 32, 16, 16, 3, 1, 1, 0);
	struct conv2d_args s2 = dw_args(2, 96, 15, 15, 3, 2, 1, 1);
	struct conv2d_args k5 = dw_args(1, 36, 9, 9, 5, 2, 2, 0);
	struct conv2d_args k7 = dw_args(1, 8, 9, 9, 7, 2, 3, 0);
	struct conv2d_args normal = dw;
	normal.groups = 1; /* an ordinary 32 -> 32 convolution */
	struct conv2d_args grouped = dw;
	grouped.groups = 2;
	struct conv2d_args mult = dw;
	mult.c_out = 64; /* depth multiplier 2 */
	struct conv2d_args even = dw_args(2, 32, 16, 16, 4, 1, 1, 0);
	struct conv2d_args k9 = dw_args(2, 32, 16, 16, 9, 1, 4, 0);
	struct conv2d_args s3 = dw_args(2, 32, 16, 16, 3, 3, 1, 0);
	struct conv2d_args rect = dw;
	rect.kw = 5;
	struct conv2d_args bad_out = dw;
	bad_out.h_out = 15;
	struct conv2d_args huge = dw_args(1, 4096, 1024, 1024, 3, 1, 1, 0); /* 2^32 per image */
	const struct conv2d_args *no[] = { &normal, &grouped, &mult, &even, &k9, &s3, &rect, &bad_out };

	for (int t = 0; t < N_DTS; t++) {
		enum gp_dtype dt = DTS[t];
		int nhwc = dt != GP_F32;
		CHECK_EQ_INT(dwconv_supported(dt, nhwc, &dw), 1);
		CHECK_EQ_INT(dwconv_supported(dt, nhwc, &s2), 1);
		CHECK_EQ_INT(dwconv_supported(dt, nhwc, &k5), 1);
		CHECK_EQ_INT(dwconv_supported(dt, nhwc, &k7), 1);
		CHECK_EQ_INT(dwconv_supported(dt, !nhwc, &dw), 0); /* float NCHW, 16 bits NHWC only */
		for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
			CHECK_MSG(!dwconv_supported(dt, nhwc, no[i]), "%s: case %zu supported", dtype_name(dt), i);
		/* one 16-bit image is at most 2^31 - 1 elements; a float plane 2^30 */
		CHECK_EQ_INT(dwconv_supported(dt, nhwc, &huge), dt == GP_F32);
		CHECK(dwconv_bwd_filter_scratch_floats(dt, &dw) > 0);
		CHECK_EQ_INT(dwconv_bwd_filter_scratch_floats(dt, &normal), 0);
		/* Unsupported arguments are refused before anything is launched. */
		CHECK_EQ_INT(dwconv_fwd_cuda(0, dt, &normal, NULL, NULL, NULL, NULL, 0), GP_EINVAL);
		CHECK_EQ_INT(dwconv_bwd_data_cuda(0, dt, &normal, NULL, NULL, NULL, 0, 0, NULL), GP_EINVAL);
		CHECK_EQ_INT(dwconv_bwd_filter_cuda(0, dt, &normal, NULL, NULL, NULL, NULL, NULL, 0), GP_EINVAL);
	}
	CHECK_EQ_INT(dwconv_supported(GP_F64, 0, &dw), 0);
	CHECK_EQ_INT(dwconv_supported(GP_F64, 1, &dw), 0);
	/* Other types, and a folded ReLU6 in float, are refused before anything is launched. */
	CHECK_EQ_INT(dwconv_fwd_cuda(0, GP_F64, &dw, NULL, NULL, NULL, NULL, 0), GP_EINVAL);
	CHECK_EQ_INT(dwconv_bwd_data_cuda(0, GP_I32, &dw, NULL, NULL, NULL, 0, 0, NULL), GP_EINVAL);
	CHECK_EQ_INT(dwconv_bwd_filter_cuda(0, GP_U8, &dw, NULL, NULL, NULL, NULL, NULL, 0), GP_EINVAL);
	CHECK_EQ_INT(dwconv_fwd_cuda(0, GP_F32, &dw, NULL, NULL, NULL, NULL, 1), GP_EUNSUPPORTED);
	CHECK_EQ_INT(dwconv_bwd_data_cuda(0, GP_F32, &dw, NULL, NULL, NULL, 0, 1, NULL), GP_EUNSUPPORTED);
	CHECK_EQ_INT(dwconv_bwd_filter_cuda(0, GP_F32, &dw, NULL, NULL, NULL, NULL, NULL, 1), GP_EUNSUPPORTED);
	CHECK_EQ_INT(dwconv_bwd_data_cuda(0, GP_BF16, &dw, NULL, NULL, NULL, 0, 1, NULL), GP_EINVAL);
	gp_error_clear();
}

/* Every vector width the 16-bit kernels take (channels per thread, and rows per thread at
 * 4 channels); { 0, 0 } is the default choice per direction, and float's only one. */
static const int WIDTHS[][2] = { { 0, 0 }, { 8, 0 }, { 4, 4 }, { 4, 2 }, { 2, 0 } };
#define N_WIDTHS ((int)(sizeof(WIDTHS) / sizeof(WIDTHS[0])))

TEST(cuda_dwconv_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 51);
	const struct conv2d_args *cases = dw_cases(&n);
	for (int t = 0; t < N_DTS; t++)
		for (int tiled = 1; tiled >= (DTS[t] == GP_F32 ? 1 : 0); tiled--)
			for (int wi = 0; wi < (DTS[t] == GP_F32 ? 1 : N_WIDTHS); wi++) {
				dwconv_set_tiled(tiled ? 7 : 0);
				dwconv_set_widths(WIDTHS[wi][0], WIDTHS[wi][1]);
				for (size_t i = 0; i < n; i++)
					check_dwconv(&g, DTS[t], &cases[i], 0);
			}
	dwconv_set_widths(0, 0);
	dwconv_set_tiled(7);
	gpu_close(&g);
}

/* Arrays off the 16-byte alignment take the 16-bit 2-channel (offset 2) or scalar
 * (offset 1) path even where c is a multiple of 8; float takes any alignment. */
TEST(cuda_dwconv_misaligned)
{
	struct gpu g;
	GPU_OPEN(&g, 52);
	struct conv2d_args cases[] = {
		dw_args(2, 32, 14, 14, 3, 1, 1, 1),
		dw_args(2, 144, 15, 15, 3, 2, 1, 0),
		dw_args(2, 24, 13, 11, 5, 1, 2, 1),
	};
	for (int t = 0; t < N_DTS; t++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			for (int off = 1; off <= 2; off++)
				check_dwconv(&g, DTS[t], &cases[i], off);
	gpu_close(&g);
}

/* Slices long enough that each thread of the weight gradient takes several steps through
 * them: in 16 bits, 64 channels (32 pixel lanes) along 128-wide rows and across 28-wide
 * rows and images; 8 channels (256 lanes) over enough 7x7 planes to fill 1024 slices,
 * where a step spans 5 images, a row and 4 columns. */
TEST(cuda_dwconv_long_slices)
{
	struct gpu g;
	GPU_OPEN(&g, 53);
	struct conv2d_args cases[] = {
		dw_args(3, 64, 128, 128, 3, 1, 1, 0),
		dw_args(5400, 8, 7, 7, 3, 1, 1, 1),
		dw_args(4, 64, 56, 56, 3, 2, 1, 1),
	};
	for (int t = 0; t < N_DTS; t++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			check_dwconv(&g, DTS[t], &cases[i], 0);
	gpu_close(&g);
}

/* A batch of an empty size: nothing is launched, and the weight gradient is zero. */
TEST(cuda_dwconv_empty_batch)
{
	struct gpu g;
	GPU_OPEN(&g, 54);
	struct conv2d_args a = dw_args(0, 16, 8, 8, 3, 1, 1, 1);
	for (int t = 0; t < N_DTS; t++) {
		enum gp_dtype dt = DTS[t];
		void *d_dw = dev_bytes(&g, 16 * 9 * esize(dt));
		float *d_db = dev_f(&g, 16);
		CHECK_OK(dwconv_fwd_cuda(g.ctx->stream, dt, &a, NULL, NULL, NULL, NULL, 0));
		CHECK_OK(dwconv_bwd_data_cuda(g.ctx->stream, dt, &a, NULL, NULL, NULL, 1, 0, NULL));
		CHECK_OK(dwconv_bwd_filter_cuda(g.ctx->stream, dt, &a, NULL, NULL, d_dw, d_db, NULL, 0));
		float *dw = down_dt(&g, dt, d_dw, 16 * 9), *db = down(&g, d_db, 16);
		for (int i = 0; i < 16 * 9; i++)
			CHECK_MSG(dw[i] == 0.0f, "%s dw[%d] = %g", dtype_name(dt), i, dw[i]);
		for (int i = 0; i < 16; i++)
			CHECK_MSG(db[i] == 0.0f, "%s db[%d] = %g", dtype_name(dt), i, db[i]);
	}
	gpu_close(&g);
}

/* A ReLU6 folded into the convolution that reads it (relu6 = 1): on a stored
 * input r >= 0 (the fused batch norm's max(z, 0)) with a good share above 6, forward and
 * weight gradient equal the plain kernels on min(r, 6), bit for bit (the clip happens on
 * load); backward data equals the plain one with the gradient zeroed where r >= 6, bit
 * for bit without accumulate (masking before the one rounding), and accumulated it adds
 * that masked gradient to dx. In NHWC on the device throughout. */
TEST(cuda_dwconv_relu6_folded)
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
	for (int wt = 0; wt < 2 * N_WIDTHS * N_HTS; wt++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			enum gp_dtype ht = HTS[wt % N_HTS];
			dwconv_set_widths(WIDTHS[wt / N_HTS % N_WIDTHS][0], WIDTHS[wt / N_HTS % N_WIDTHS][1]);
			dwconv_set_tiled(wt < N_WIDTHS * N_HTS ? 7 : 0);
			const struct conv2d_args *a = &cases[i];
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t nx = (size_t)a->n * a->c_in * a->h_in * a->w_in, ny = (size_t)a->n * a->c_in * a->h_out * a->w_out;
			size_t nw = (size_t)a->c_in * a->kh * a->kw, ns = dwconv_bwd_filter_scratch_floats(ht, a);
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
			void *d_r = dev_at(&g, ht, nx, 0), *d_q = dev_at(&g, ht, nx, 0), *d_w = dev_at(&g, ht, nw, 0);
			void *d_dy = dev_at(&g, ht, ny, 0), *d_y1 = dev_at(&g, ht, ny, 0), *d_y2 = dev_at(&g, ht, ny, 0);
			void *d_dx1 = dev_at(&g, ht, nx, 0), *d_dx2 = dev_at(&g, ht, nx, 0);
			void *d_dw1 = dev_at(&g, ht, nw, 0), *d_dw2 = dev_at(&g, ht, nw, 0);
			float *d_scratch = dev_f(&g, ns);
			put_h(&g, ht, d_r, r, nx); /* NHWC on both sides: a permutation does not matter */
			put_h(&g, ht, d_q, q, nx);
			put_h(&g, ht, d_w, w, nw);
			put_h(&g, ht, d_dy, dy, ny);
			CHECK_OK(dwconv_fwd_cuda(s, ht, a, d_r, d_w, NULL, d_y1, 1));
			CHECK_OK(dwconv_fwd_cuda(s, ht, a, d_q, d_w, NULL, d_y2, 0));
			CHECK_MSG(max_abs_diff(down_h(&g, ht, d_y1, ny), down_h(&g, ht, d_y2, ny), ny) == 0,
				  "%s case %zu: folded forward differs", dtype_name(ht), i);
			CHECK_OK(dwconv_bwd_filter_cuda(s, ht, a, d_r, d_dy, d_dw1, NULL, d_scratch, 1));
			CHECK_OK(dwconv_bwd_filter_cuda(s, ht, a, d_q, d_dy, d_dw2, NULL, d_scratch, 0));
			CHECK_MSG(max_abs_diff(down_h(&g, ht, d_dw1, nw), down_h(&g, ht, d_dw2, nw), nw) == 0,
				  "%s case %zu: folded weight gradient differs", dtype_name(ht), i);
			poison(&g, d_dx1, nx * 2);
			CHECK_OK(dwconv_bwd_data_cuda(s, ht, a, d_dy, d_w, d_dx1, 0, 1, d_r));
			CHECK_OK(dwconv_bwd_data_cuda(s, ht, a, d_dy, d_w, d_dx2, 0, 0, NULL));
			float *g1 = down_h(&g, ht, d_dx1, nx), *g2 = down_h(&g, ht, d_dx2, nx);
			for (size_t k = 0; k < nx; k++)
				g2[k] = r[k] < 6 ? g2[k] : 0.0f;
			CHECK_MSG(max_abs_diff(g1, g2, nx) == 0, "%s case %zu: folded backward data differs",
				  dtype_name(ht), i);
			put_h(&g, ht, d_dx1, dx0, nx);
			CHECK_OK(dwconv_bwd_data_cuda(s, ht, a, d_dy, d_w, d_dx1, 1, 1, d_r));
			float *want = host_f(&g, nx);
			for (size_t k = 0; k < nx; k++)
				want[k] = dx0[k] + g2[k];
			CHECK_LE(rel_err_norm_f32(down_h(&g, ht, d_dx1, nx), want, nx), tol_for(ht));
			gpu_release(&g, dev_mark, host_mark);
		}
	dwconv_set_widths(0, 0);
	dwconv_set_tiled(7);
	gpu_close(&g);
}

/* n 16-bit values of |scale * u + shift| (u uniform in [-1, 1)) or scale * u + shift on
 * the device: a 1 Mi-element random block copied over the array, on the context's
 * stream (dev_copy: a plain device-to-device cudaMemcpy is not ordered with it, and
 * the weight gradients read NaN now and then, s19-9). */
static void *dev_rand_big(struct gpu *g, enum gp_dtype ht, size_t n, double scale, double shift,
			  int nonneg)
{
	size_t m = n < ((size_t)1 << 20) ? n : (size_t)1 << 20;
	float *h = host_rand_h(g, ht, m, scale, shift);
	for (size_t i = 0; nonneg && i < m; i++)
		h[i] = fabsf(h[i]);
	char *d = dev_bytes(g, n * 2);
	if (!d)
		return NULL;
	put_h(g, ht, d, h, m);
	for (size_t done = m; done < n;) {
		size_t k = done < n - done ? done : n - done;
		dev_copy(g, d + done * 2, d, k * 2);
		done += k;
	}
	return test_failed() ? NULL : d;
}

/* Median ms of 7 samples of 3 back-to-back runs of direction dir (0 forward, 1 backward
 * data, 2 weight gradient) of shape a as training runs it (the ReLU6 folded). */
struct dw_bufs {
	void *x, *w, *y, *dy, *dx, *dw;
	float *scratch;
};

static int dw_run(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, int dir,
		  const struct dw_bufs *b)
{
	if (dir == 0)
		return dwconv_fwd_cuda(s, ht, a, b->x, b->w, NULL, b->y, 1);
	if (dir == 1)
		return dwconv_bwd_data_cuda(s, ht, a, b->dy, b->w, b->dx, 0, 1, b->x);
	return dwconv_bwd_filter_cuda(s, ht, a, b->x, b->dy, b->dw, NULL, b->scratch, 1);
}

static double dw_time(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, int dir,
		      const struct dw_bufs *b)
{
	cudaEvent_t e0, e1;
	double ms[7];
	if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
		return -1;
	for (int w = 0; w < 2; w++)
		CHECK_OK(dw_run(s, ht, a, dir, b));
	for (int k = 0; k < 7; k++) {
		float t = 0;
		cudaEventRecord(e0, s);
		for (int r = 0; r < 3; r++)
			CHECK_OK(dw_run(s, ht, a, dir, b));
		cudaEventRecord(e1, s);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&t, e0, e1);
		ms[k] = t / 3.0;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	for (int i = 1; i < 7; i++)
		for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
			double t = ms[j];
			ms[j] = ms[j - 1];
			ms[j - 1] = t;
		}
	return ms[3];
}

/* MobileNetV2's depthwise layers at batch 256 in bf16, as training runs them (inputs >= 0
 * with a share above 6, the ReLU6 folded in every direction): the tiled kernels against
 * the row kernels at their default widths, per layer and direction, and per step
 * weighted by the layer counts. The tiled outputs match the row kernels' (first 4 Mi
 * elements of y and dx, all of dw) within bf16's tolerance, and the tiled kernels take
 * less time per step. */
TEST(cuda_dwconv_tiled_beats_row_kernels)
{
	static const int SH[][4] = { /* channels, size, stride, layers */
		{ 32, 112, 1, 1 }, { 96, 112, 2, 1 }, { 144, 56, 1, 1 }, { 144, 56, 2, 1 },
		{ 192, 28, 1, 2 }, { 192, 28, 2, 1 }, { 384, 14, 1, 4 }, { 576, 14, 1, 2 },
		{ 576, 14, 2, 1 }, { 960, 7, 1, 3 },
	};
	/* variant: tiled directions mask, width cap (0: the defaults) */
	static const int VAR[][2] = { { 0, 0 }, { 7, 0 } };
	static const char *const VNAME[] = { "rows", "tiled" };
	static const char *const DNAME[] = { "fwd", "dgrad", "wgrad" };
	enum { NV = 2 };
	struct gpu g;
	GPU_OPEN(&g, 56);
	enum gp_dtype ht = GP_BF16;
	cudaStream_t s = g.ctx->stream;
	double step[NV][3] = { { 0 } };
	printf("      %-18s %5s %6s", "shape", "dir", "");
	for (int v = 0; v < NV; v++)
		printf(" %9s", VNAME[v]);
	printf("  (ms, median of 7 x 3 runs)\n");
	for (size_t i = 0; i < sizeof(SH) / sizeof(SH[0]); i++) {
		struct conv2d_args a = dw_args(256, SH[i][0], SH[i][1], SH[i][1], 3, SH[i][2], 1, 0);
		int dev_mark = g.n_dev, host_mark = g.n_host;
		size_t nx = (size_t)a.n * a.c_in * a.h_in * a.w_in, ny = (size_t)a.n * a.c_in * a.h_out * a.w_out;
		size_t nw = (size_t)a.c_in * 9, cmp_x = nx < 4u << 20 ? nx : 4u << 20;
		size_t cmp_y = ny < 4u << 20 ? ny : 4u << 20;
		struct dw_bufs b;
		b.x = dev_rand_big(&g, ht, nx, 4, 4, 1);
		b.dy = dev_rand_big(&g, ht, ny, 1, 0, 0);
		b.w = dev_rand_big(&g, ht, nw, 0.3, 0, 0);
		b.y = dev_at(&g, ht, ny, 0);
		b.dx = dev_at(&g, ht, nx, 0);
		b.dw = dev_at(&g, ht, nw, 0);
		b.scratch = dev_f(&g, dwconv_bwd_filter_scratch_floats(ht, &a));
		if (!b.x || !b.dy || !b.w || !b.y || !b.dx || !b.dw || !b.scratch) {
			gpu_release(&g, dev_mark, host_mark);
			break;
		}
		float *ref[3] = { NULL, NULL, NULL };
		for (int v = 0; v < NV; v++) {
			dwconv_set_tiled(VAR[v][0]);
			dwconv_set_widths(VAR[v][1], 0);
			for (int d = 0; d < 3; d++) {
				CHECK_OK(dw_run(s, ht, &a, d, &b));
				float *out = d == 0 ? down_h(&g, ht, b.y, cmp_y)
					   : d == 1 ? down_h(&g, ht, b.dx, cmp_x) : down_h(&g, ht, b.dw, nw);
				size_t n_out = d == 0 ? cmp_y : d == 1 ? cmp_x : nw;
				if (!v)
					ref[d] = out;
				else
					CHECK_MSG(rel_err_norm_f32(out, ref[d], n_out) <= tol_for(ht),
						  "%d ch %dx%d s%d %s: %s differs from the row kernels by %.3g",
						  a.c_in, a.h_in, a.w_in, a.stride, DNAME[d], VNAME[v],
						  rel_err_norm_f32(out, ref[d], n_out));
			}
		}
		for (int d = 0; d < 3; d++) {
			printf("      %3d ch %3dx%-3d s%d %5s x%d    ", a.c_in, a.h_in, a.w_in, a.stride,
			       DNAME[d], SH[i][3]);
			for (int v = 0; v < NV; v++) {
				dwconv_set_tiled(VAR[v][0]);
				dwconv_set_widths(VAR[v][1], 0);
				double ms = dw_time(s, ht, &a, d, &b);
				step[v][d] += ms * SH[i][3];
				printf(" %9.3f", ms);
			}
			printf("\n");
		}
		gpu_release(&g, dev_mark, host_mark);
	}
	dwconv_set_tiled(7);
	dwconv_set_widths(0, 0);
	double tot[NV] = { 0 };
	for (int d = 0; d < 3; d++) {
		printf("      per step, %-5s", DNAME[d]);
		for (int v = 0; v < NV; v++) {
			printf(" %s %.3f", VNAME[v], step[v][d]);
			tot[v] += step[v][d];
		}
		printf(" ms\n");
	}
	printf("      per step, all: rows %.3f ms, tiled %.3f ms (%.2fx)\n", tot[0], tot[1],
	       tot[0] / tot[1]);
	CHECK_MSG(tot[1] < tot[0], "tiled %.3f ms a step against the row kernels' %.3f", tot[1], tot[0]);
	gpu_close(&g);
}

/* Float tensors past 2^32 elements (10,700 images of 32 x 112 x 112: 4.3e9 floats, 17 GB
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
	float *d_scratch = dev_f(&g, dwconv_bwd_filter_scratch_floats(GP_F32, &a));
	if (!d_x || !d_y || !d_w || !d_dw || !d_db || !d_scratch) {
		gpu_close(&g);
		return;
	}
	cudaStream_t s = g.ctx->stream;
	CHECK_OK(fill_cuda(s, d_x, count - img, 1.0f));
	CHECK_OK(fill_cuda(s, d_x + count - img, img, 2.0f));
	CHECK_OK(fill_cuda(s, d_w, (size_t)a.c_in * 9, 1.0f));

	CHECK_OK(dwconv_fwd_cuda(s, GP_F32, &a, d_x, d_w, NULL, d_y, 0));
	for (int i = 0; i < 4; i++)
		check_plane(&g, &a, d_y, planes[i], scale[i], "huge forward");
	/* 3x3 pad 1 stride 1 with w = 1 is its own transpose: dx has y's pattern. */
	poison(&g, d_y, count * sizeof(float));
	CHECK_OK(dwconv_bwd_data_cuda(s, GP_F32, &a, d_x, d_w, d_y, 0, 0, NULL));
	for (int i = 0; i < 4; i++)
		check_plane(&g, &a, d_y, planes[i], scale[i], "huge backward data");

	/* dy = x: tap (ky, kx) of every channel sums x * x over the cells it touched, 1 in
	 * every image but the last (4). */
	CHECK_OK(dwconv_bwd_filter_cuda(s, GP_F32, &a, d_x, d_x, d_dw, d_db, d_scratch, 0));
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
