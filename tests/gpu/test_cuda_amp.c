/* The 16-bit paths of the own kernels (eltwise.cu, convert.cu, pool.cu, bn.cu, loss.cu,
 * bias.cu) for fp16 and bf16 against the CPU f32
 * reference. Random inputs are rounded to the 16-bit type on the host first, so both
 * sides see the same values, and the reference runs on those (transposed to NCHW where
 * the device works channels last). Outputs are poisoned with 0xff bytes (NaN in both
 * 16-bit types) before each run so unwritten elements fail the comparison. Tolerances
 * (relative error of the norm): 1e-2 for bf16, 2e-3 for fp16, a little above one
 * rounding of the output (2^-9 and 2^-11 at worst); conversions, layout changes and
 * argmax must match exactly. Without a device every test skips with the reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define GPU_RNG_STREAM 11
#include "harness.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/rng.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"

static const enum gp_dtype HTS[] = { GP_F16, GP_BF16 };
#define N_HTS ((int)(sizeof(HTS) / sizeof(HTS[0])))

/* --- 16-bit device arrays (the rest of the helpers: harness.h) ------------------------------ */

static void *dev_h(struct gpu *g, size_t n)
{
	return dev_bytes(g, n * 2);
}

/* Element off of a 16-bit device array: off = 1 breaks every 16-byte alignment. */
static void *h_at(void *p, size_t off)
{
	return p ? (uint16_t *)p + off : NULL;
}

static void *dev_h_from(struct gpu *g, enum gp_dtype ht, const float *h, size_t n)
{
	void *d = dev_h(g, n);
	put_h(g, ht, d, h, n);
	return d;
}

/* The host array in the device's layout (a copy either way). */
static float *in_layout(struct gpu *g, int nhwc, const float *x, int n, int c, int hw)
{
	return nhwc ? host_to_nhwc(g, x, 4, n, c, hw) : copy_f(g, x, (size_t)n * c * hw);
}

/* A device result in the layout nhwc names, as NCHW floats. */
static float *down_nchw(struct gpu *g, enum gp_dtype ht, int nhwc, const void *d, int n, int c, int hw)
{
	float *f = down_h(g, ht, d, (size_t)n * c * hw);
	return nhwc ? host_to_nchw(g, f, 4, n, c, hw) : f;
}

static void check_rel(enum gp_dtype ht, const char *what, const float *got, const float *want,
		      size_t n, const char *file, int line)
{
	double e = rel_err_norm_f32(got, want, n), tol = tol_for(ht);
	if (!(e <= tol))
		test_fail(file, line, "%s %s: relative error %.3g > %.3g", dtype_name(ht), what, e, tol);
}
#define CHECK_REL(ht, what, got, want, n) check_rel(ht, what, got, want, n, __FILE__, __LINE__)

/* --- conversions ---------------------------------------------------------------------------- */

TEST(amp_cast_rounds_to_nearest_even)
{
	const size_t n = 10007; /* not a multiple of 8: the vector loop leaves a tail */
	struct gpu g;
	GPU_OPEN(&g, 1);
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		/* Offset 0 takes the 16-byte path, offset 1 the unaligned scalar one. */
		for (int off = 0; off <= 1; off++) {
			float *x = host_f(&g, n);
			for (size_t i = 0; i < n; i++) /* magnitudes from 2^-30 to 2^30 */
				x[i] = (float)(rng_normal(&g.rng) * ldexp(1.0, (int)rng_below(&g.rng, 61) - 30));
			/* Ties, the fp16 overflow edge and subnormals. */
			x[1] = 1.0f + 1.0f / 2048;   /* fp16 tie: to even (1) */
			x[2] = 1.0f + 3.0f / 2048;   /* fp16 tie: to even (up) */
			x[3] = 1.0f + 1.0f / 256;    /* bf16 tie */
			x[4] = 65519.0f;             /* fp16: 65504 */
			x[5] = 65520.0f;             /* fp16: inf */
			x[6] = -3e-6f;               /* fp16 subnormal */
			x[7] = 3.0e38f;
			x[8] = -0.0f;
			x[n - 1] = 2.9e-8f;          /* fp16: rounds to the smallest subnormal */
			float *d_x = dev_f(&g, n + 1);
			void *d_y = dev_h(&g, n + 1);
			float *d_back = dev_f(&g, n + 1);
			uint16_t *bits = host_bytes(&g, n * 2);
			put(&g, d_x + off, x, n * sizeof(float));

			CHECK_OK(cast_f32_to_h_cuda(g.ctx->stream, ht, n, d_x + off, h_at(d_y, off)));
			get(&g, bits, h_at(d_y, off), n * 2);
			size_t bad = 0;
			for (size_t i = 0; i < n; i++)
				if (bits[i] != h_bits(ht, x[i]) && bad++ < 5)
					test_fail(__FILE__, __LINE__, "%s cast x[%zu] = %.9g: 0x%04x, expected 0x%04x",
						  dtype_name(ht), i, x[i], bits[i], h_bits(ht, x[i]));
			CHECK_EQ_INT(bad, 0);

			CHECK_OK(cast_h_to_f32_cuda(g.ctx->stream, ht, n, h_at(d_y, off), d_back + off));
			float *back = down(&g, d_back + off, n);
			bad = 0;
			for (size_t i = 0; i < n; i++)
				if (f_bits(back[i]) != f_bits(h_round(ht, x[i])) && bad++ < 5)
					test_fail(__FILE__, __LINE__, "%s widen [%zu]: %.9g, expected %.9g",
						  dtype_name(ht), i, back[i], h_round(ht, x[i]));
			CHECK_EQ_INT(bad, 0);
		}
	}
	gpu_close(&g);
}

TEST(amp_layout_round_trip)
{
	static const int cfg[][4] = {
		/* n, c, h, w */
		{ 2, 3, 17, 19 },  /* the input image: few channels */
		{ 3, 40, 7, 9 },   /* neither side a multiple of the tile */
		{ 2, 64, 16, 16 },
		{ 16, 8, 3, 3 },   /* conv weights KCRS -> KRSC */
		{ 6, 72, 3, 3 },   /* wide C, 9 taps: the narrow kernel */
		{ 4, 40, 1, 1 },   /* a 1x1 convolution's weights: a cast */
		{ 5, 1, 1, 13 },
	};
	struct gpu g;
	GPU_OPEN(&g, 2);
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
			int n = cfg[k][0], c = cfg[k][1], h = cfg[k][2], w = cfg[k][3], hw = h * w;
			size_t cnt = (size_t)n * c * hw;
			float *x = host_rand(&g, cnt, 2, 0), *xr = host_f(&g, cnt);
			for (size_t i = 0; i < cnt; i++)
				xr[i] = h_round(ht, x[i]);
			float *d_x = dev_from(&g, x, cnt), *d_back = dev_f(&g, cnt);
			void *d_h = dev_h(&g, cnt);
			for (int nhwc = 0; nhwc <= 1; nhwc++) {
				poison(&g, d_h, cnt * 2);
				CHECK_OK(to_h_layout_cuda(g.ctx->stream, ht, n, c, h, w, nhwc, d_x, d_h));
				CHECK_LE(max_abs_diff(down_nchw(&g, ht, nhwc, d_h, n, c, hw), xr, cnt), 0);
				poison(&g, d_back, cnt * sizeof(float));
				CHECK_OK(from_h_layout_cuda(g.ctx->stream, ht, n, c, h, w, nhwc, d_h, d_back, 0));
				CHECK_LE(max_abs_diff(down(&g, d_back, cnt), xr, cnt), 0);
				/* accumulate: the same float addition on both sides, so exact */
				float *y0 = host_rand(&g, cnt, 1, 0), *want = host_f(&g, cnt);
				for (size_t i = 0; i < cnt; i++)
					want[i] = y0[i] + xr[i];
				put(&g, d_back, y0, cnt * sizeof(float));
				CHECK_OK(from_h_layout_cuda(g.ctx->stream, ht, n, c, h, w, nhwc, d_h, d_back, 1));
				CHECK_LE(max_abs_diff(down(&g, d_back, cnt), want, cnt), 0);
			}
		}
	}
	gpu_close(&g);
}

/* --- elementwise ------------------------------------------------------------------------ */

typedef int (*hact_fwd_fn)(cudaStream_t, enum gp_dtype, size_t, const void *, void *);
typedef int (*hact_bwd_fn)(cudaStream_t, enum gp_dtype, size_t, const void *, const void *, void *,
			   int);
typedef void (*act_fwd_cpu_fn)(size_t, const float *, float *);
typedef void (*act_bwd_cpu_fn)(size_t, const float *, const float *, float *, int);

static void check_activation_h(struct gpu *g, enum gp_dtype ht, int off, hact_fwd_fn fwd,
			       hact_bwd_fn bwd, act_fwd_cpu_fn fwd_cpu, act_bwd_cpu_fn bwd_cpu)
{
	const size_t n = 10007;
	float *x = host_rand_h(g, ht, n, 4.0, 1.0), *y = host_f(g, n);
	float *dy = host_rand_h(g, ht, n, 1.0, 0.0), *dx0 = host_rand_h(g, ht, n, 1.0, 0.0);
	void *d_x = dev_h(g, n + 1), *d_y = dev_h(g, n + 1), *d_dy = dev_h(g, n + 1);
	void *d_dx = dev_h(g, n + 1);
	put_h(g, ht, h_at(d_x, off), x, n);
	put_h(g, ht, h_at(d_dy, off), dy, n);

	fwd_cpu(n, x, y);
	CHECK_OK(fwd(g->ctx->stream, ht, n, h_at(d_x, off), h_at(d_y, off)));
	/* max(x, 0) and min(., 6) of a 16-bit value are 16-bit values: exact */
	CHECK_LE(max_abs_diff(down_h(g, ht, h_at(d_y, off), n), y, n), 0);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, n);
		if (acc)
			put_h(g, ht, h_at(d_dx, off), dx0, n);
		else
			poison(g, d_dx, (n + 1) * 2);
		bwd_cpu(n, y, dy, dx, acc);
		CHECK_OK(bwd(g->ctx->stream, ht, n, h_at(d_y, off), h_at(d_dy, off), h_at(d_dx, off), acc));
		CHECK_REL(ht, acc ? "activation backward, accumulate" : "activation backward",
			  down_h(g, ht, h_at(d_dx, off), n), dx, n);
	}
}

TEST(amp_relu_relu6_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 3);
	for (int t = 0; t < N_HTS; t++)
		for (int off = 0; off <= 1; off++) {
			check_activation_h(&g, HTS[t], off, relu_fwd_cuda, relu_bwd_cuda,
					   relu_fwd_cpu_f32, relu_bwd_cpu_f32);
			check_activation_h(&g, HTS[t], off, relu6_fwd_cuda, relu6_bwd_cuda,
					   relu6_fwd_cpu_f32, relu6_bwd_cpu_f32);
		}
	gpu_close(&g);
}

TEST(amp_add_grad_pass_match_cpu)
{
	const size_t n = 4099;
	struct gpu g;
	GPU_OPEN(&g, 4);
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		for (int off = 0; off <= 1; off++) {
			float *a = host_rand_h(&g, ht, n, 1, 0), *b = host_rand_h(&g, ht, n, 1, 0);
			float *y = host_f(&g, n);
			void *d_a = dev_h(&g, n + 1), *d_b = dev_h(&g, n + 1), *d_y = dev_h(&g, n + 1);
			put_h(&g, ht, h_at(d_a, off), a, n);
			put_h(&g, ht, h_at(d_b, off), b, n);

			add_fwd_cpu_f32(n, a, b, y);
			CHECK_OK(add_fwd_cuda(g.ctx->stream, ht, n, h_at(d_a, off), h_at(d_b, off),
						h_at(d_y, off)));
			CHECK_REL(ht, "add", down_h(&g, ht, h_at(d_y, off), n), y, n);
			for (int acc = 0; acc <= 1; acc++) {
				float *dx = copy_f(&g, b, n);
				put_h(&g, ht, h_at(d_y, off), b, n);
				if (!acc)
					poison(&g, d_y, (n + 1) * 2);
				grad_pass_cpu_f32(n, a, dx, acc);
				CHECK_OK(grad_pass_cuda(g.ctx->stream, ht, n, h_at(d_a, off),
							  h_at(d_y, off), acc));
				float *got = down_h(&g, ht, h_at(d_y, off), n);
				if (acc)
					CHECK_REL(ht, "grad_pass accumulate", got, dx, n);
				else /* a copy */
					CHECK_LE(max_abs_diff(got, dx, n), 0);
			}
		}
	}
	gpu_close(&g);
}

TEST(amp_scale_flags_nonfinite)
{
	const size_t n = 4099;
	struct gpu g;
	GPU_OPEN(&g, 5);
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		for (int off = 0; off <= 1; off++) {
			float *x = host_rand_h(&g, ht, n, 1, 0), *want = host_f(&g, n);
			void *d_p = dev_h(&g, n + 1), *p = h_at(d_p, off);
			int *d_flag = dev_bytes(&g, sizeof(int));
			int flag = -1, zero = 0;
			put_h(&g, ht, p, x, n);
			put(&g, d_flag, &zero, sizeof(int));

			/* A power of two scales exactly, and nothing is flagged. */
			CHECK_OK(scale_cuda(g.ctx->stream, ht, p, n, 8.0, d_flag));
			for (size_t i = 0; i < n; i++)
				want[i] = x[i] * 8.0f;
			CHECK_LE(max_abs_diff(down_h(&g, ht, p, n), want, n), 0);
			get(&g, &flag, d_flag, sizeof(int));
			CHECK_EQ_INT(flag, 0);

			/* Another factor rounds; no flag pointer at all. */
			CHECK_OK(scale_cuda(g.ctx->stream, ht, p, n, 0.3, NULL));
			for (size_t i = 0; i < n; i++)
				want[i] *= 0.3f;
			CHECK_REL(ht, "scale", down_h(&g, ht, p, n), want, n);

			/* An injected inf, in the vector body and in the tail. */
			for (int where = 0; where < 2; where++) {
				size_t at = where ? n - 2 : 1234;
				float *v = host_rand_h(&g, ht, n, 1, 0);
				v[at] = INFINITY;
				put_h(&g, ht, p, v, n);
				put(&g, d_flag, &zero, sizeof(int));
				CHECK_OK(scale_cuda(g.ctx->stream, ht, p, n, 0.5, d_flag));
				get(&g, &flag, d_flag, sizeof(int));
				CHECK_EQ_INT(flag, 1);
			}

			/* fp16: finite in float, beyond 65504 once rounded. */
			if (ht == GP_F16) {
				float *v = host_rand_h(&g, ht, n, 1, 0);
				v[77] = 1000.0f;
				put_h(&g, ht, p, v, n);
				put(&g, d_flag, &zero, sizeof(int));
				CHECK_OK(scale_cuda(g.ctx->stream, ht, p, n, 100.0, d_flag));
				get(&g, &flag, d_flag, sizeof(int));
				CHECK_EQ_INT(flag, 1);
			}
		}
	}
	gpu_close(&g);
}

/* --- pooling ----------------------------------------------------------------------------- */

TEST(amp_avgpool_global_matches_cpu)
{
	static const int cfg[][3] = { { 3, 5, 49 }, { 2, 7, 1 }, { 2, 3, 100 }, { 4, 64, 49 } };
	struct gpu g;
	GPU_OPEN(&g, 6);
	for (int t = 0; t < N_HTS; t++)
		for (int nhwc = 0; nhwc <= 1; nhwc++)
			for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
				enum gp_dtype ht = HTS[t];
				int n = cfg[k][0], c = cfg[k][1], hw = cfg[k][2];
				size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
				float *x = host_rand_h(&g, ht, nx, 1, 0.5), *y = host_f(&g, ny);
				float *dy = host_rand_h(&g, ht, ny, 1, 0), *dx0 = host_rand_h(&g, ht, nx, 1, 0);
				void *d_x = dev_h_from(&g, ht, in_layout(&g, nhwc, x, n, c, hw), nx);
				void *d_y = dev_h(&g, ny), *d_dy = dev_h_from(&g, ht, dy, ny);
				void *d_dx = dev_h(&g, nx);

				avgpool_global_fwd_cpu_f32(n, c, hw, x, y);
				CHECK_OK(avgpool_global_fwd_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_x, d_y));
				CHECK_REL(ht, nhwc ? "avgpool NHWC" : "avgpool NCHW", down_h(&g, ht, d_y, ny), y, ny);
				for (int acc = 0; acc <= 1; acc++) {
					float *dx = copy_f(&g, dx0, nx);
					put_h(&g, ht, d_dx, in_layout(&g, nhwc, dx0, n, c, hw), nx);
					if (!acc)
						poison(&g, d_dx, nx * 2);
					avgpool_global_bwd_cpu_f32(n, c, hw, dy, dx, acc);
					CHECK_OK(avgpool_global_bwd_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_dy,
									   d_dx, acc));
					CHECK_REL(ht, nhwc ? "avgpool backward NHWC" : "avgpool backward NCHW",
						  down_nchw(&g, ht, nhwc, d_dx, n, c, hw), dx, nx);
				}
			}
	gpu_close(&g);
}

TEST(amp_maxpool_matches_cpu)
{
	static const int cfg[][6] = {
		/* n, c, h, k, stride, pad */
		{ 2, 3, 11, 3, 2, 1 }, /* ResNet stem pool */
		{ 2, 4, 8, 2, 2, 0 },
		{ 1, 2, 7, 3, 1, 1 },  /* overlapping windows: one input feeds several */
		{ 2, 64, 16, 3, 2, 1 },  /* NHWC: 8 channels per thread; backward 2 x 2 pixels */
		{ 1, 8, 9, 3, 2, 1 },    /* the same on an odd height: a last row of blocks cut */
		{ 1, 16, 7, 3, 1, 1 },   /* the same, overlapping windows */
	};
	struct gpu g;
	GPU_OPEN(&g, 7);
	for (int t = 0; t < N_HTS; t++)
		for (int nhwc = 0; nhwc <= 1; nhwc++)
			for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
				enum gp_dtype ht = HTS[t];
				struct pool_args a = { .n = cfg[k][0], .c = cfg[k][1], .h_in = cfg[k][2],
						       .w_in = cfg[k][2] + 1, .k = cfg[k][3],
						       .stride = cfg[k][4], .pad = cfg[k][5] };
				a.h_out = conv_out_size(a.h_in, a.k, a.stride, a.pad);
				a.w_out = conv_out_size(a.w_in, a.k, a.stride, a.pad);
				int hw_in = a.h_in * a.w_in, hw_out = a.h_out * a.w_out;
				size_t nx = (size_t)a.n * a.c * hw_in, ny = (size_t)a.n * a.c * hw_out;
				/* bf16 rounding makes ties in a window common: the first must win */
				float *x = host_rand_h(&g, ht, nx, 1, 0), *y = host_f(&g, ny);
				float *dy = host_rand_h(&g, ht, ny, 1, 0), *dx0 = host_rand_h(&g, ht, nx, 1, 0);
				uint8_t *am = host_bytes(&g, ny), *am_gpu = host_bytes(&g, ny);
				void *d_x = dev_h_from(&g, ht, in_layout(&g, nhwc, x, a.n, a.c, hw_in), nx);
				void *d_y = dev_h(&g, ny), *d_dx = dev_h(&g, nx);
				void *d_dy = dev_h_from(&g, ht, in_layout(&g, nhwc, dy, a.n, a.c, hw_out), ny);
				uint8_t *d_am = dev_bytes(&g, ny);

				maxpool_fwd_cpu_f32(&a, x, y, am);
				CHECK_OK(maxpool_fwd_cuda(g.ctx->stream, ht, nhwc, &a, d_x, d_y, d_am));
				CHECK_LE(max_abs_diff(down_nchw(&g, ht, nhwc, d_y, a.n, a.c, hw_out), y, ny), 0);
				get(&g, am_gpu, d_am, ny);
				if (nhwc)
					am_gpu = host_to_nchw(&g, am_gpu, 1, a.n, a.c, hw_out);
				CHECK_MSG(memcmp(am_gpu, am, ny) == 0, "%s %s maxpool case %zu: argmax differs",
					  dtype_name(ht), nhwc ? "NHWC" : "NCHW", k);
				for (int acc = 0; acc <= 1; acc++) {
					float *dx = copy_f(&g, dx0, nx);
					put_h(&g, ht, d_dx, in_layout(&g, nhwc, dx0, a.n, a.c, hw_in), nx);
					if (!acc)
						poison(&g, d_dx, nx * 2);
					maxpool_bwd_cpu_f32(&a, dy, am, dx, acc);
					CHECK_OK(maxpool_bwd_cuda(g.ctx->stream, ht, nhwc, &a, d_dy, d_am, d_dx,
								    acc));
					CHECK_REL(ht, nhwc ? "maxpool backward NHWC" : "maxpool backward NCHW",
						  down_nchw(&g, ht, nhwc, d_dx, a.n, a.c, hw_in), dx, nx);
				}
			}
	gpu_close(&g);
}

/* The max pool over relu(bn(x)) in one pass (maxpool_bn_relu_fwd_cuda: ResNet's stem in
 * training) against the apply then the pool, bit for bit in the output and the argmax:
 * each element is rounded as the apply writes it before the windows compare, so the
 * ReLU's zeros tie as they do after the apply. NHWC, 8 to 136 channels, overlapping and
 * cut windows, tiles cut at the edges and in channels. */
TEST(amp_maxpool_over_batch_norm_equals_apply_then_pool)
{
	static const int cfg[][6] = {
		/* n, c, h, k, stride, pad */
		/* ResNet's stem pool (3 x 3, stride 2, pad 1: the tiled kernel) */
		{ 2, 64, 16, 3, 2, 1 },  /* 8 x 9 outputs: the last column of tiles cut */
		{ 1, 8, 9, 3, 2, 1 },    /* one channel group of a tile's 8, an odd height */
		{ 1, 136, 11, 3, 2, 1 }, /* 17 groups: three channel tiles, the last cut */
		/* other windows (the direct kernel) */
		{ 3, 16, 7, 3, 1, 1 },  /* overlapping windows */
		{ 2, 24, 12, 2, 2, 0 }, /* 3 channel groups: a thread's group changes as it strides */
	};
	struct gpu g;
	GPU_OPEN(&g, 21);
	for (int t = 0; t < N_HTS; t++)
		for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
			int dev_mark = g.n_dev, host_mark = g.n_host;
			enum gp_dtype ht = HTS[t];
			struct pool_args a = { .n = cfg[k][0], .c = cfg[k][1], .h_in = cfg[k][2], .w_in = cfg[k][2] + 1,
					       .k = cfg[k][3], .stride = cfg[k][4], .pad = cfg[k][5] };
			a.h_out = conv_out_size(a.h_in, a.k, a.stride, a.pad);
			a.w_out = conv_out_size(a.w_in, a.k, a.stride, a.pad);
			int c = a.c, hw_in = a.h_in * a.w_in, hw_out = a.h_out * a.w_out;
			size_t nx = (size_t)a.n * c * hw_in, ny = (size_t)a.n * c * hw_out;
			/* about half of relu(bn(x)) is 0: ties the first in the window must win */
			float *x = host_rand_h(&g, ht, nx, 2, 0);
			float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 1, 0);
			float *mean = host_rand(&g, c, 1, 0), *invstd = host_rand(&g, c, 0.1, 0.7);
			struct bn_norm bn = { dev_from(&g, gamma, c), dev_from(&g, beta, c), dev_from(&g, mean, c),
					      dev_from(&g, invstd, c) };
			void *d_x = dev_h_from(&g, ht, in_layout(&g, 1, x, a.n, c, hw_in), nx), *d_r = dev_h(&g, nx);
			void *d_y[2] = { dev_h(&g, ny), dev_h(&g, ny) };
			uint8_t *d_am[2] = { dev_bytes(&g, ny), dev_bytes(&g, ny) };
			CHECK_OK(bn_apply_cuda(g.ctx->stream, ht, 1, a.n, c, hw_in, d_x, NULL, bn.gamma, bn.beta, bn.mean,
					       bn.invstd, BN_APPLY_RELU, d_r));
			CHECK_OK(maxpool_fwd_cuda(g.ctx->stream, ht, 1, &a, d_r, d_y[0], d_am[0]));
			CHECK_OK(CUDA_CHECK(cudaMemsetAsync(d_y[1], 0xff, ny * 2, g.ctx->stream)));
			CHECK_OK(CUDA_CHECK(cudaMemsetAsync(d_am[1], 0xff, ny, g.ctx->stream)));
			CHECK_OK(maxpool_bn_relu_fwd_cuda(g.ctx->stream, ht, 1, &a, d_x, &bn, d_y[1], d_am[1]));
			float *y0 = down_nchw(&g, ht, 1, d_y[0], a.n, c, hw_out), *y1 = down_nchw(&g, ht, 1, d_y[1], a.n, c, hw_out);
			uint8_t *am0 = host_bytes(&g, ny), *am1 = host_bytes(&g, ny);
			get(&g, am0, d_am[0], ny);
			get(&g, am1, d_am[1], ny);
			size_t differ = 0, ties = 0;
			for (size_t i = 0; i < ny; i++) {
				differ += f_bits(y0[i]) != f_bits(y1[i]) || am0[i] != am1[i];
				ties += y0[i] == 0.0f && am0[i] != 0;
			}
			CHECK_MSG(differ == 0, "%s case %zu: %zu of %zu outputs or argmaxes differ", dtype_name(ht), k,
				  differ, ny);
			CHECK_MSG(ties > 0, "%s case %zu: no zero window past its first element", dtype_name(ht), k);
			gpu_release(&g, dev_mark, host_mark);
		}
	gpu_close(&g);
}

/* --- batch norm, dropout, bias ------------------------------------------------------------ */

/* act(bn(x) + identity) in one pass, against the float reference on the same 16-bit
 * inputs, rounded once; the identity absent, as it is, or a batch norm's input
 * normalized on the way (bn_apply_norm_id_cuda: a downsampling block's join). */
TEST(amp_bn_apply_matches_cpu)
{
	static const int cfg[][3] = { { 4, 16, 63 }, { 3, 5, 1 }, { 2, 33, 49 }, { 3, 2048, 7 } };
	struct gpu g;
	GPU_OPEN(&g, 8);
	for (int t = 0; t < N_HTS; t++)
		for (int nhwc = 0; nhwc <= 1; nhwc++)
			for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++)
				for (int v = 0; v < 9; v++) { /* each activation, each kind of identity */
					int dev_mark = g.n_dev, host_mark = g.n_host;
					enum gp_dtype ht = HTS[t];
					int act = v / 3, with_id = v % 3;
					int n = cfg[k][0], c = cfg[k][1], hw = cfg[k][2];
					struct bn_args a = { .n = n, .c = c, .h = hw, .w = 1, .eps = 1e-5 };
					size_t nx = (size_t)n * c * hw;
					float *x = host_rand_h(&g, ht, nx, 2, 1), *y = host_f(&g, nx);
					float *id = host_rand_h(&g, ht, nx, 4, 0);
					float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 2, 0);
					float *mean = host_rand(&g, c, 1, 1), *invstd = host_rand(&g, c, 0.1, 0.7);
					void *d_x = dev_h_from(&g, ht, in_layout(&g, nhwc, x, n, c, hw), nx);
					void *d_id = dev_h_from(&g, ht, in_layout(&g, nhwc, id, n, c, hw), nx);
					void *d_y = dev_h(&g, nx);
					float *d_gamma = dev_from(&g, gamma, c), *d_beta = dev_from(&g, beta, c);
					float *d_mean = dev_from(&g, mean, c), *d_invstd = dev_from(&g, invstd, c);

					float *zg = host_rand(&g, c, 0.5, 1), *zb = host_rand(&g, c, 2, 0);
					float *zm = host_rand(&g, c, 1, 1), *zi = host_rand(&g, c, 0.1, 0.7);
					struct bn_norm zn = { dev_from(&g, zg, c), dev_from(&g, zb, c), dev_from(&g, zm, c),
							      dev_from(&g, zi, c) };
					if (with_id == 2) /* the identity's batch norm, in float */
						bn_apply_cpu_f32(&a, copy_f(&g, id, nx), zg, zb, zm, zi, id);
					bn_apply_cpu_f32(&a, x, gamma, beta, mean, invstd, y);
					for (size_t i = 0; i < nx; i++) {
						float v = y[i] + (with_id ? id[i] : 0.0f);
						if (act != BN_APPLY_LINEAR)
							v = v > 0.0f ? v : 0.0f;
						if (act == BN_APPLY_RELU6)
							v = v > 6.0f ? 6.0f : v;
						y[i] = v;
					}
					if (with_id == 2)
						CHECK_OK(bn_apply_norm_id_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_x, d_id,
									       d_gamma, d_beta, d_mean, d_invstd, &zn,
									       (enum bn_apply_act)act, d_y));
					else
						CHECK_OK(bn_apply_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_x,
								       with_id ? d_id : NULL, d_gamma, d_beta, d_mean,
								       d_invstd, (enum bn_apply_act)act, d_y));
					CHECK_REL(ht, nhwc ? "bn_apply NHWC" : "bn_apply NCHW",
						  down_nchw(&g, ht, nhwc, d_y, n, c, hw), y, nx);
					gpu_release(&g, dev_mark, host_mark);
				}
	gpu_close(&g);
}

/* NHWC with channels in eights takes a kernel of its own (one channel group per thread);
 * it gives the general element-wise path's bits (NCHW here, on the same values). */
/* The NHWC kernel (one wave of blocks, two chunks a thread in flight) against the general
 * path, bit for bit: a small tensor, and one where every thread loops over several
 * pairs of chunks and the last pair is cut short; without an identity, with one, and
 * with one normalized on the way. */
TEST(amp_bn_apply_nhwc_kernel_equals_general_path)
{
	struct gpu g;
	GPU_OPEN(&g, 18);
	static const int shapes[][3] = { { 5, 96, 37 }, { 32, 64, 1001 } };
	for (int sh = 0; sh < 2; sh++) {
		int n = shapes[sh][0], c = shapes[sh][1], hw = shapes[sh][2];
		size_t nx = (size_t)n * c * hw;
		for (int t = 0; t < N_HTS; t++) {
			enum gp_dtype ht = HTS[t];
			float *x = host_rand_h(&g, ht, nx, 4, 0), *id = host_rand_h(&g, ht, nx, 4, 0);
			float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 2, 0);
			float *mean = host_rand(&g, c, 1, 0), *invstd = host_rand(&g, c, 0.1, 0.7);
			float *d_gamma = dev_from(&g, gamma, c), *d_beta = dev_from(&g, beta, c);
			float *d_mean = dev_from(&g, mean, c), *d_invstd = dev_from(&g, invstd, c);
			void *d_y[2], *d_x[2], *d_id[2];
			for (int nhwc = 0; nhwc <= 1; nhwc++) {
				d_x[nhwc] = dev_h_from(&g, ht, in_layout(&g, nhwc, x, n, c, hw), nx);
				d_id[nhwc] = dev_h_from(&g, ht, in_layout(&g, nhwc, id, n, c, hw), nx);
				d_y[nhwc] = dev_h(&g, nx);
			}
			/* the identity's batch norm (with_id 2): the statistics swapped round */
			struct bn_norm zn = { d_mean, d_invstd, d_gamma, d_beta };
			for (int with_id = 0; with_id <= 2; with_id++) {
				for (int act = BN_APPLY_LINEAR; act <= BN_APPLY_RELU6; act++) {
					for (int nhwc = 0; nhwc <= 1; nhwc++) {
						CHECK_OK(CUDA_CHECK(cudaMemset(d_y[nhwc], 0xff, nx * 2)));
						if (with_id == 2)
							CHECK_OK(bn_apply_norm_id_cuda(g.ctx->stream, ht, nhwc, n, c, hw,
										       d_x[nhwc], d_id[nhwc], d_gamma,
										       d_beta, d_mean, d_invstd, &zn,
										       (enum bn_apply_act)act, d_y[nhwc]));
						else
							CHECK_OK(bn_apply_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_x[nhwc],
									       with_id ? d_id[nhwc] : NULL, d_gamma,
									       d_beta, d_mean, d_invstd,
									       (enum bn_apply_act)act, d_y[nhwc]));
					}
					float *general = down_nchw(&g, ht, 0, d_y[0], n, c, hw);
					float *fast = down_nchw(&g, ht, 1, d_y[1], n, c, hw);
					size_t differ = 0;
					for (size_t i = 0; i < nx; i++)
						differ += f_bits(general[i]) != f_bits(fast[i]);
					CHECK_MSG(differ == 0, "%dx%dx%d %s identity %d act %d: %zu of %zu differ", n,
						  c, hw, dtype_name(ht), with_id, act, differ, nx);
				}
			}
		}
	}
	gpu_close(&g);
}

TEST(amp_dropout_matches_cpu)
{
	struct gpu g;
	struct dropout_args a = { .count = 10007, .p = 0.3 };
	GPU_OPEN(&g, 9);
	size_t n = a.count;
	uint8_t *mask = host_bytes(&g, n);
	dropout_mask_cpu(n, a.p, 1234, mask);
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		for (int off = 0; off <= 1; off++) {
			float *x = host_rand_h(&g, ht, n, 1, 0), *y = host_f(&g, n);
			float *dx0 = host_rand_h(&g, ht, n, 1, 0);
			void *d_x = dev_h(&g, n + 1), *d_y = dev_h(&g, n + 1), *d_dx = dev_h(&g, n + 1);
			uint8_t *d_mask = dev_bytes(&g, n + 1);
			put(&g, d_mask + off, mask, n);
			put_h(&g, ht, h_at(d_x, off), x, n);

			dropout_fwd_cpu_f32(&a, mask, x, y);
			CHECK_OK(dropout_fwd_cuda(g.ctx->stream, ht, &a, d_mask + off, h_at(d_x, off),
						    h_at(d_y, off)));
			CHECK_REL(ht, "dropout", down_h(&g, ht, h_at(d_y, off), n), y, n);
			for (int acc = 0; acc <= 1; acc++) {
				float *dx = copy_f(&g, dx0, n);
				put_h(&g, ht, h_at(d_dx, off), dx0, n);
				if (!acc)
					poison(&g, d_dx, (n + 1) * 2);
				dropout_bwd_cpu_f32(&a, mask, x, dx, acc);
				CHECK_OK(dropout_bwd_cuda(g.ctx->stream, ht, &a, d_mask + off, h_at(d_x, off),
							    h_at(d_dx, off), acc));
				CHECK_REL(ht, acc ? "dropout backward, accumulate" : "dropout backward",
					  down_h(&g, ht, h_at(d_dx, off), n), dx, n);
			}
		}
	}
	gpu_close(&g);
}

TEST(amp_bias_add_channel_sum)
{
	static const int cfg[][3] = { { 3, 5, 37 }, { 33, 129, 1 }, { 2, 40, 9 }, { 64, 10, 1 } };
	struct gpu g;
	GPU_OPEN(&g, 10);
	for (int t = 0; t < N_HTS; t++)
		for (int nhwc = 0; nhwc <= 1; nhwc++)
			for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
				enum gp_dtype ht = HTS[t];
				int n = cfg[k][0], c = cfg[k][1], hw = cfg[k][2];
				size_t count = (size_t)n * c * hw;
				float *y = host_rand_h(&g, ht, count, 1, 0), *b = host_rand(&g, c, 1, 0);
				float *want = host_f(&g, count), *want_db = host_f(&g, c);
				void *d_y = dev_h_from(&g, ht, in_layout(&g, nhwc, y, n, c, hw), count);
				float *d_b = dev_from(&g, b, c), *d_db = dev_f(&g, c);

				for (size_t i = 0; i < count; i++)
					want[i] = y[i] + b[i / hw % c];
				for (int ch = 0; ch < c; ch++) {
					double s = 0;
					for (int ni = 0; ni < n; ni++)
						for (int j = 0; j < hw; j++)
							s += y[((size_t)ni * c + ch) * hw + j];
					want_db[ch] = (float)s;
				}
				/* db is float, summed from the same 16-bit values: float accuracy */
				CHECK_OK(channel_sum_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_y, d_db));
				CHECK_LE(rel_err_norm_f32(down(&g, d_db, c), want_db, c), 1e-6);
				CHECK_OK(bias_add_cuda(g.ctx->stream, ht, nhwc, n, c, hw, d_b, d_y));
				CHECK_REL(ht, nhwc ? "bias_add NHWC" : "bias_add NCHW",
					  down_nchw(&g, ht, nhwc, d_y, n, c, hw), want, count);
			}
	gpu_close(&g);
}

/* --- loss ---------------------------------------------------------------------------------- */

TEST(amp_softmax_xent_matches_cpu)
{
	static const int cfg[][2] = { { 37, 1000 }, { 64, 10 }, { 1, 3 } };
	struct gpu g;
	GPU_OPEN(&g, 11);
	for (int t = 0; t < N_HTS; t++)
		for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
			enum gp_dtype ht = HTS[t];
			int n = cfg[c][0], k = cfg[c][1], correct = -1, correct_gpu = -1;
			size_t nl = (size_t)n * k;
			float *logits = host_rand(&g, nl, 3, 0), *dl = host_f(&g, nl);
			int32_t *labels = host_bytes(&g, n * sizeof(int32_t));
			double loss_gpu = NAN;
			for (int i = 0; i < n; i++) {
				labels[i] = (int32_t)rng_below(&g.rng, k);
				if (i % 2) /* make about half of the predictions right */
					logits[(size_t)i * k + labels[i]] += 30.0f;
			}
			for (size_t i = 0; i < nl; i++)
				logits[i] = h_round(ht, logits[i]);
			void *d_logits = dev_h_from(&g, ht, logits, nl), *d_dl = dev_h(&g, nl);
			float *d_scratch = dev_f(&g, 2 * (size_t)n);
			int32_t *d_labels = dev_bytes(&g, n * sizeof(int32_t));
			double *d_loss = dev_bytes(&g, sizeof(double));
			int *d_correct = dev_bytes(&g, sizeof(int));
			put(&g, d_labels, labels, n * sizeof(int32_t));

			double loss = softmax_xent_cpu_f32(n, k, logits, labels, dl, &correct);
			CHECK_OK(softmax_xent_cuda(g.ctx->stream, ht, n, k, d_logits, d_labels, d_dl,
						     d_scratch, d_loss, d_correct));
			get(&g, &loss_gpu, d_loss, sizeof(double));
			get(&g, &correct_gpu, d_correct, sizeof(int));
			/* the same logits on both sides: only float vs double arithmetic differs */
			CHECK_NEAR(loss_gpu, loss, 1e-5 * fabs(loss) + 1e-6);
			CHECK_EQ_INT(correct_gpu, correct);
			CHECK(correct >= n / 2);
			CHECK_REL(ht, "dlogits", down_h(&g, ht, d_dl, nl), dl, nl);
		}
	gpu_close(&g);
}

/* --- arguments ----------------------------------------------------------------------------- */

TEST(amp_rejects_other_types_and_skips_empty)
{
	struct gpu g;
	struct pool_args pa = { 0 };
	struct dropout_args da = { .count = 0, .p = 0.5 };
	GPU_OPEN(&g, 12);
	cudaStream_t s = g.ctx->stream;
	for (int ht = GP_F32; ht <= GP_U8; ht++) {
		if (ht == GP_F16 || ht == GP_BF16)
			continue;
		CHECK_EQ_INT(cast_f32_to_h_cuda(s, ht, 8, NULL, NULL), GP_EINVAL);
		if (ht == GP_F32) { /* a type of every launcher, but its kernels take NCHW only */
			CHECK_EQ_INT(maxpool_fwd_cuda(s, ht, 1, &pa, NULL, NULL, NULL), GP_EINVAL);
			CHECK_EQ_INT(channel_sum_cuda(s, ht, 1, 1, 1, 1, NULL, NULL), GP_EINVAL);
			CHECK_EQ_INT(bn_apply_cuda(s, ht, 1, 1, 1, 1, NULL, NULL, NULL, NULL, NULL, NULL,
						   BN_APPLY_RELU, NULL), GP_EINVAL);
			continue;
		}
		CHECK_EQ_INT(relu_fwd_cuda(s, ht, 8, NULL, NULL), GP_EINVAL);
		CHECK_EQ_INT(grad_pass_cuda(s, ht, 8, NULL, NULL, 0), GP_EINVAL);
		CHECK_EQ_INT(scale_cuda(s, ht, NULL, 8, 2.0, NULL), GP_EINVAL);
		CHECK_EQ_INT(maxpool_fwd_cuda(s, ht, 1, &pa, NULL, NULL, NULL), GP_EINVAL);
		CHECK_EQ_INT(softmax_xent_cuda(s, ht, 2, 2, NULL, NULL, NULL, NULL, NULL, NULL),
			     GP_EINVAL);
		CHECK_EQ_INT(channel_sum_cuda(s, ht, 0, 1, 1, 1, NULL, NULL), GP_EINVAL);
	}
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		CHECK_OK(cast_f32_to_h_cuda(s, ht, 0, NULL, NULL));
		CHECK_OK(cast_h_to_f32_cuda(s, ht, 0, NULL, NULL));
		CHECK_OK(to_h_layout_cuda(s, ht, 0, 3, 4, 4, 1, NULL, NULL));
		CHECK_OK(from_h_layout_cuda(s, ht, 2, 0, 4, 4, 1, NULL, NULL, 1));
		CHECK_EQ_INT(to_h_layout_cuda(s, ht, -1, 3, 4, 4, 1, NULL, NULL), GP_EINVAL);
		CHECK_OK(relu6_bwd_cuda(s, ht, 0, NULL, NULL, NULL, 1));
		CHECK_OK(add_fwd_cuda(s, ht, 0, NULL, NULL, NULL));
		CHECK_OK(grad_pass_cuda(s, ht, 0, NULL, NULL, 0));
		CHECK_OK(scale_cuda(s, ht, NULL, 0, 2.0, NULL));
		CHECK_OK(avgpool_global_fwd_cuda(s, ht, 1, 0, 8, 49, NULL, NULL));
		CHECK_OK(avgpool_global_bwd_cuda(s, ht, 0, 2, 8, 0, NULL, NULL, 1));
		CHECK_OK(maxpool_fwd_cuda(s, ht, 1, &pa, NULL, NULL, NULL));
		CHECK_OK(maxpool_bwd_cuda(s, ht, 0, &pa, NULL, NULL, NULL, 0));
		CHECK_OK(bn_apply_cuda(s, ht, 1, 0, 4, 4, NULL, NULL, NULL, NULL, NULL, NULL, BN_APPLY_RELU, NULL));
		CHECK_OK(dropout_fwd_cuda(s, ht, &da, NULL, NULL, NULL));
		CHECK_OK(dropout_bwd_cuda(s, ht, &da, NULL, NULL, NULL, 1));
		CHECK_OK(bias_add_cuda(s, ht, 0, 0, 4, 1, NULL, NULL));
		CHECK_OK(channel_sum_cuda(s, ht, 1, 4, 0, 1, NULL, NULL));
		CHECK_EQ_INT(softmax_xent_cuda(s, ht, 0, 10, NULL, NULL, NULL, NULL, NULL, NULL),
			     GP_EINVAL);
	}
	CHECK_OK(cuda_ctx_sync(g.ctx));
	gpu_close(&g);
}

/* --- 1x1 convolutions as cuBLAS products ---------------------------------------------------
 * 16-bit NHWC 1x1 convolutions may run each direction as one product over N*H*W rows
 * (conv_cudnn.c takes it where it measures faster; with cuDNN's heuristics, where
 * nothing is timed, always, which this test uses to reach that path). Against the host
 * on the same rounded inputs: y = x W^T, dx = dy W (+ dx), dW = dy^T x in float. */
TEST(amp_conv1x1_products_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 12);
	const int n = 3, c = 40, k = 24, h = 5, w = 7, m = n * h * w;
	struct conv2d_args a = { .n = n, .c_in = c, .h_in = h, .w_in = w, .c_out = k, .kh = 1, .kw = 1,
				 .stride = 1, .pad = 0, .groups = 1, .h_out = h, .w_out = w };
	g.ctx->heuristic_algos = 1;
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
		/* rows of x and dy are pixels (NHWC), W is K x C */
		float *x = host_rand_h(&g, ht, (size_t)m * c, 1, 0), *wt = host_rand_h(&g, ht, (size_t)k * c, 1, 0);
		float *dy = host_rand_h(&g, ht, (size_t)m * k, 1, 0), *dx0 = host_rand_h(&g, ht, (size_t)m * c, 1, 0);
		float *y_ref = host_f(&g, (size_t)m * k), *dx_ref = host_f(&g, (size_t)m * c);
		float *dw_ref = host_f(&g, (size_t)k * c);
		for (int r = 0; r < m; r++)
			for (int o = 0; o < k; o++) {
				double s = 0;
				for (int i = 0; i < c; i++)
					s += (double)x[(size_t)r * c + i] * wt[(size_t)o * c + i];
				y_ref[(size_t)r * k + o] = (float)s;
			}
		for (int r = 0; r < m; r++)
			for (int i = 0; i < c; i++) {
				double s = dx0[(size_t)r * c + i];
				for (int o = 0; o < k; o++)
					s += (double)dy[(size_t)r * k + o] * wt[(size_t)o * c + i];
				dx_ref[(size_t)r * c + i] = (float)s;
			}
		for (int o = 0; o < k; o++)
			for (int i = 0; i < c; i++) {
				double s = 0;
				for (int r = 0; r < m; r++)
					s += (double)dy[(size_t)r * k + o] * x[(size_t)r * c + i];
				dw_ref[(size_t)o * c + i] = (float)s;
			}
		void *d_x = dev_h_from(&g, ht, x, (size_t)m * c), *d_w = dev_h_from(&g, ht, wt, (size_t)k * c);
		void *d_dy = dev_h_from(&g, ht, dy, (size_t)m * k), *d_dx = dev_h_from(&g, ht, dx0, (size_t)m * c);
		void *d_y = dev_h(&g, (size_t)m * k);
		float *d_dw = dev_f(&g, (size_t)k * c);
		poison(&g, d_y, (size_t)m * k * 2);
		CHECK_OK(conv2d_fwd_cuda(g.ctx, &a, NULL, d_x, d_w, NULL, d_y));
		CHECK_REL(ht, "1x1 forward", down_h(&g, ht, d_y, (size_t)m * k), y_ref, (size_t)m * k);
		CHECK_OK(conv2d_bwd_data_cuda(g.ctx, &a, NULL, d_dy, d_w, d_dx, 1));
		CHECK_REL(ht, "1x1 backward data (accumulated)", down_h(&g, ht, d_dx, (size_t)m * c), dx_ref,
			  (size_t)m * c);
		CHECK_EQ_INT(conv2d_bwd_filter_f32_cuda(g.ctx, &a, NULL, d_x, d_dy, d_dw, NULL), 1);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dw, (size_t)k * c), dw_ref, (size_t)k * c), 1e-5);
		/* a 3x3 convolution is not a product: the caller gets 0 and uses cuDNN */
		struct conv2d_args b = a;
		b.kh = b.kw = 3;
		b.pad = 1;
		CHECK_EQ_INT(conv2d_bwd_filter_f32_cuda(g.ctx, &b, NULL, d_x, d_dy, d_dw, NULL), 0);
	}
	gpu_close(&g);
}

/* --- batch norm fused with ReLU / ReLU6 (cuDNN's Ex op sets) ------------------------------
 * Against the separate ops on the same device (cuDNN's plain batch norm, then the
 * ReLU kernels, and back): outputs, input gradient, parameter gradients and running
 * statistics. gamma 4 and beta 1 put a good share of the outputs past 6, so ReLU6's
 * clip is exercised (the test checks that some are). */
TEST(amp_bn_relu_fused_matches_separate)
{
	struct gpu g;
	GPU_OPEN(&g, 13);
	const struct bn_args a = { .n = 4, .c = 24, .h = 6, .w = 5, .eps = 1e-5, .momentum = 0.1 };
	const size_t cnt = (size_t)a.n * a.c * a.h * a.w;
	for (int t = 0; t < N_HTS; t++) {
		enum gp_dtype ht = HTS[t];
		CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
		for (int six = 0; six <= 1; six++) {
			enum bn_fuse op = six ? BN_FUSE_RELU6 : BN_FUSE_RELU;
			size_t reserve = 0;
			CHECK_OK(bn_plan_cuda(g.ctx, &a));
			int fused = bn_fuse_plan_cuda(g.ctx, &a, op, &reserve);
			CHECK_MSG(fused >= 0, "bn_fuse_plan_cuda: %s", gp_errmsg());
			printf("      %s %s: cuDNN %s it (reserve %zu bytes)\n", dtype_name(ht), six ? "ReLU6" : "ReLU",
			       fused == 1 ? "fuses" : "declines", reserve);
			/* ReLU is what resnets train with: it must fuse; ReLU6 falls back when not */
			CHECK_MSG(fused == 1 || six, "%s: cuDNN declined batch norm + ReLU", dtype_name(ht));
			if (fused != 1)
				continue;
			float *x = host_rand_h(&g, ht, cnt, 2, 0.5), *dy = host_rand_h(&g, ht, cnt, 1, 0);
			float gamma[24], beta[24], run0[48];
			for (int c = 0; c < a.c; c++) {
				gamma[c] = 4.0f + 0.05f * c;
				beta[c] = 1.0f;
				run0[c] = 0.1f * c;
				run0[a.c + c] = 1.0f + 0.01f * c;
			}
			float *d_gamma = dev_from(&g, gamma, a.c), *d_beta = dev_from(&g, beta, a.c);
			void *d_x = dev_h_from(&g, ht, x, cnt), *d_dy = dev_h_from(&g, ht, dy, cnt);
			void *y[2] = { dev_h(&g, cnt), dev_h(&g, cnt) }, *dx[2] = { dev_h(&g, cnt), dev_h(&g, cnt) };
			void *t_h = dev_h(&g, cnt), *rsv = reserve ? dev_bytes(&g, reserve) : NULL;
			float *st[2] = { dev_f(&g, 2 * a.c), dev_f(&g, 2 * a.c) }, *run[2] = { dev_from(&g, run0, 2 * a.c),
												dev_from(&g, run0, 2 * a.c) };
			float *dg[2] = { dev_f(&g, 2 * a.c), dev_f(&g, 2 * a.c) };
			cudaStream_t s = g.ctx->stream;
			/* fused */
			CHECK_OK(bn_fwd_train_fused_cuda(g.ctx, &a, op, d_x, NULL, d_gamma, d_beta, y[0], st[0], st[0] + a.c,
							 run[0], run[0] + a.c, rsv, reserve));
			CHECK_OK(bn_bwd_relu_fused_cuda(g.ctx, &a, op, d_x, y[0], d_dy, d_gamma, d_beta, st[0], st[0] + a.c,
							dx[0], 0, dg[0], dg[0] + a.c, rsv, reserve));
			/* separate */
			CHECK_OK(bn_fwd_train_cuda(g.ctx, &a, d_x, d_gamma, d_beta, t_h, st[1], st[1] + a.c, run[1],
						   run[1] + a.c));
			CHECK_OK(six ? relu6_fwd_cuda(s, ht, cnt, t_h, y[1]) : relu_fwd_cuda(s, ht, cnt, t_h, y[1]));
			CHECK_OK(six ? relu6_bwd_cuda(s, ht, cnt, y[1], d_dy, t_h, 0) : relu_bwd_cuda(s, ht, cnt, y[1], d_dy, t_h, 0));
			CHECK_OK(bn_bwd_cuda(g.ctx, &a, d_x, t_h, d_gamma, st[1], st[1] + a.c, dx[1], 0, dg[1], dg[1] + a.c));
			float *y0 = down_h(&g, ht, y[0], cnt), *y1 = down_h(&g, ht, y[1], cnt);
			size_t clipped = 0, zeros = 0;
			for (size_t i = 0; i < cnt; i++) {
				clipped += y1[i] == 6.0f;
				zeros += y1[i] == 0.0f;
			}
			CHECK_MSG(zeros > cnt / 20 && (!six || clipped > cnt / 20), "%zu zeros, %zu at 6 of %zu", zeros,
				  clipped, cnt);
			CHECK_REL(ht, "fused output", y0, y1, cnt);
			CHECK_REL(ht, "fused input gradient", down_h(&g, ht, dx[0], cnt), down_h(&g, ht, dx[1], cnt), cnt);
			CHECK_LE(rel_err_norm_f32(down(&g, dg[0], 2 * a.c), down(&g, dg[1], 2 * a.c), 2 * a.c), 1e-2);
			CHECK_LE(rel_err_norm_f32(down(&g, st[0], 2 * a.c), down(&g, st[1], 2 * a.c), 2 * a.c), 1e-5);
			CHECK_LE(rel_err_norm_f32(down(&g, run[0], 2 * a.c), down(&g, run[1], 2 * a.c), 2 * a.c), 1e-5);
		}
	}
	gpu_close(&g);
}
